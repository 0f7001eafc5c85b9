#!/bin/sh
# serve_text.sh - one rule for a reply's text everywhere. For the same greedy prompts, on the test
# model of serve.sh (the real vocabulary, whose greedy replies here hold special tokens such as
# <|place_holder_mm_span_...|>), the text of `dsv41 run -p`, of the Python module's chat() and of
# the server's routes (chat completions whole and streamed, a raw completion of the rendered
# prompt) is the same: special tokens left out unless asked for (--special, special=True,
# "skip_special_tokens": false), the ones that mark a reply's parts kept.
# Prints "N passed, N failed".
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/serve_lib.sh"

n=12
q() { printf 'Question %s: what is %s + %s?' "$1" "$1" "$1"; }
# the command line's replies (its stdout ends with one added newline)
for i in 0 1 2 3 4 5 6 7; do
    for sp in "" --special; do
        $dsv41 run -m "$m" -p "$(q $i)" -n $n --temp 0 $sp -t 1 2>/dev/null |
            python3 -c 'import sys; sys.stdout.buffer.write(sys.stdin.buffer.read()[:-1])' >"$tmp/cli$i$sp"
    done
done
# the test means something only when a reply holds a special token the rule leaves out
differ=0
for i in 0 1 2 3 4 5 6 7; do cmp -s "$tmp/cli$i" "$tmp/cli$i--special" || differ=$((differ + 1)); done
[ $differ -gt 0 ] && ok || bad "no greedy reply holds a special token: the test compares nothing"

# the Python module (over the normal build's library: a sanitizer build has none python can load)
if [ "$dsv41" = ./dsv41 ]; then
    DSV41_LIB=build/libdsv41.so PYTHONPATH=python python3 - "$m" "$tmp" $n <<'PY' || bad "the Python module"
import sys, dsv41
m = dsv41.Model(sys.argv[1])
for i in range(8):
    q = "Question %d: what is %d + %d?" % (i, i, i)
    for sp, suffix in ((False, ""), (True, "--special")):
        text = m.chat(q, max_tokens=int(sys.argv[3]), temperature=0, special=sp)
        open("%s/py%d%s" % (sys.argv[2], i, suffix), "w", encoding="utf-8").write(text)
PY
    for i in 0 1 2 3 4 5 6 7; do
        for sp in "" --special; do
            cmp -s "$tmp/py$i$sp" "$tmp/cli$i$sp" && ok || bad "Python $i $sp: '$(cat "$tmp/py$i$sp")' vs run -p '$(cat "$tmp/cli$i$sp")'"
        done
    done
fi

start main -np 8 || { finish; exit 1; }

# body I SKIP [EXTRA]: a greedy chat completion body for question I (SKIP: skip_special_tokens)
body() { printf '{"messages":[{"role":"user","content":"%s"}],"temperature":0,"max_tokens":%d,"skip_special_tokens":%s%s}' "$(q $1)" $n "$2" "$3"; }
# sse FILE OUT: the content deltas of a streamed chat completion laid end to end
sse() {
    python3 - "$1" "$2" <<'PY'
import json, sys
events = [l[6:] for l in open(sys.argv[1], encoding="utf-8").read().split("\n") if l.startswith("data: ")]
text = "".join(ch["delta"].get("content") or "" for e in events[:-1] for ch in json.loads(e)["choices"])
open(sys.argv[2], "w", encoding="utf-8").write(text if events and events[-1] == "[DONE]" else "(no [DONE])")
PY
}
for i in 0 1 2 3 4 5 6 7; do
    for sp in "" --special; do
        skip=true; [ -n "$sp" ] && skip=false
        req POST /v1/chat/completions "$(body $i $skip)"
        cp "$tmp/resp" "$tmp/chat$i$sp"
        req POST /v1/chat/completions "$(body $i $skip ',"stream":true')"
        sse "$tmp/resp" "$tmp/stream$i$sp.txt"
        printf '{"messages":[{"role":"user","content":"%s"}],"options":{"thinking_mode":"chat"}}' "$(q $i)" >"$tmp/case.json"
        $dsv41 render --chat "$tmp/case.json" >"$tmp/prompt"
        req POST /v1/completions "$(python3 -c 'import json,sys; print(json.dumps({"prompt": open(sys.argv[1],encoding="utf-8").read(), "temperature": 0, "max_tokens": int(sys.argv[2]), "skip_special_tokens": sys.argv[3] == "true"}))' "$tmp/prompt" $n $skip)"
        cp "$tmp/resp" "$tmp/raw$i$sp"
    done
done
contents "$tmp"/chat?* "$tmp"/raw?*
for i in 0 1 2 3 4 5 6 7; do
    for sp in "" --special; do
        for k in chat stream raw; do
            cmp -s "$tmp/$k$i$sp.txt" "$tmp/cli$i$sp" && ok || bad "$k $i $sp: '$(cat "$tmp/$k$i$sp.txt")' vs run -p '$(cat "$tmp/cli$i$sp")'"
        done
    done
done
expect_err "skip_special_tokens not a boolean" 400 POST /v1/chat/completions "$(body 0 '"no"')"
stop

finish
