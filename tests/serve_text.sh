#!/bin/sh
# serve_text.sh - one rule for a reply's text everywhere. For the same greedy prompts, on the test
# model of serve.sh (the real vocabulary, whose greedy replies here hold special tokens such as
# <|place_holder_mm_span_...|>), the text of `dsv41 run -p`, of the Python module's chat() and of
# the server's routes (chat completions whole and streamed, a raw completion of the rendered
# prompt, Anthropic's messages and OpenAI's responses, whole and streamed) is the same: special
# tokens left out unless asked for (--special, special=True, "skip_special_tokens": false), the
# ones that mark a reply's parts kept. Then 8 clients at once, on three routes, each get the
# reply they got alone.
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

# greedy bodies for question I with skip_special_tokens SKIP (and EXTRA members): chat
# completions, Anthropic's messages, OpenAI's responses
body() { printf '{"messages":[{"role":"user","content":"%s"}],"temperature":0,"max_tokens":%d,"skip_special_tokens":%s%s}' "$(q $1)" $n "$2" "$3"; }
mbody() { printf '{"messages":[{"role":"user","content":"%s"}],"temperature":0,"max_tokens":%d,"skip_special_tokens":%s%s}' "$(q $1)" $n "$2" "$3"; }
rbody() { printf '{"input":"%s","temperature":0,"max_output_tokens":%d,"skip_special_tokens":%s%s}' "$(q $1)" $n "$2" "$3"; }
# a raw completion of each rendered prompt (one python for all: its start is slow on a busy machine)
for i in 0 1 2 3 4 5 6 7; do
    printf '{"messages":[{"role":"user","content":"%s"}],"options":{"thinking_mode":"chat"}}' "$(q $i)" >"$tmp/case.json"
    $dsv41 render --chat "$tmp/case.json" >"$tmp/prompt$i"
done
python3 - "$tmp" $n <<'PY'
import json, sys
for i in range(8):
    prompt = open("%s/prompt%d" % (sys.argv[1], i), encoding="utf-8").read()
    for skip in ("true", "false"):
        json.dump({"prompt": prompt, "temperature": 0, "max_tokens": int(sys.argv[2]), "skip_special_tokens": skip == "true"},
                  open("%s/cbody%d%s" % (sys.argv[1], i, skip), "w", encoding="utf-8"))
PY
# text FILE...: the reply text of each reply FILE (any route, whole or streamed) in FILE.txt
text() {
    python3 - "$@" <<'PY'
import json, sys
for f in sys.argv[1:]:
    raw = open(f, encoding="utf-8").read()
    try:
        if raw.startswith("{"):
            r = json.loads(raw)
            if "choices" in r:
                c = r["choices"][0]
                t = c["message"]["content"] if "message" in c else c["text"]
            elif r.get("type") == "message":
                t = "".join(b["text"] for b in r["content"] if b["type"] == "text")
            else:
                t = "".join(p["text"] for i in r["output"] if i["type"] == "message" for p in i["content"])
        else:
            data = [json.loads(l[6:]) for l in raw.split("\n") if l.startswith("data: {")]
            if raw.rstrip().endswith("data: [DONE]"):
                t = "".join(ch["delta"].get("content") or "" for e in data for ch in e["choices"])
            elif data and data[-1]["type"] == "message_stop":
                t = "".join(e["delta"]["text"] for e in data if e["type"] == "content_block_delta" and e["delta"]["type"] == "text_delta")
            elif data and data[-1]["type"] in ("response.completed", "response.incomplete"):
                t = "".join(e["delta"] for e in data if e["type"] == "response.output_text.delta")
            else:
                t = "(the stream did not end)"
    except Exception as e:
        t = "(no reply: %s)" % e
    open(f + ".txt", "w", encoding="utf-8").write(t)
PY
}
kinds="chat stream raw msg msgstream resp respstream"
for i in 0 1 2 3 4 5 6 7; do
    for sp in "" --special; do
        skip=true; [ -n "$sp" ] && skip=false
        s=',"stream":true'
        for k in chat stream msg msgstream resp respstream raw; do
            case $k in
            chat) req POST /v1/chat/completions "$(body $i $skip)" ;;
            stream) req POST /v1/chat/completions "$(body $i $skip "$s")" ;;
            msg) req POST /v1/messages "$(mbody $i $skip)" ;;
            msgstream) req POST /v1/messages "$(mbody $i $skip "$s")" ;;
            resp) req POST /v1/responses "$(rbody $i $skip)" ;;
            respstream) req POST /v1/responses "$(rbody $i $skip "$s")" ;;
            raw) req POST /v1/completions "@$tmp/cbody$i$skip" ;;
            esac
            cp "$tmp/resp" "$tmp/$k$i$sp"
        done
    done
done
text $(for k in $kinds; do for i in 0 1 2 3 4 5 6 7; do printf '%s ' "$tmp/$k$i" "$tmp/$k$i--special"; done; done)
for i in 0 1 2 3 4 5 6 7; do
    for sp in "" --special; do
        for k in $kinds; do
            cmp -s "$tmp/$k$i$sp.txt" "$tmp/cli$i$sp" && ok || bad "$k $i $sp: '$(cat "$tmp/$k$i$sp.txt")' vs run -p '$(cat "$tmp/cli$i$sp")'"
        done
    done
done
expect_err "skip_special_tokens not a boolean" 400 POST /v1/chat/completions "$(body 0 '"no"')"

# 8 clients at once on three routes, cold prefills, so that each joins the others' steps
cpids=""
for i in 0 1 2 3 4 5 6 7; do
    case $((i % 4)) in
    0) route=/v1/chat/completions; b=$(body $i true ',"cache_prompt":false') ;;
    1) route=/v1/messages; b=$(mbody $i true ',"cache_prompt":false') ;;
    2) route=/v1/responses; b=$(rbody $i true ',"cache_prompt":false') ;;
    3) route=/v1/messages; b=$(mbody $i true ',"cache_prompt":false,"stream":true') ;;
    esac
    curl -s -o "$tmp/par$i" "http://127.0.0.1:$port$route" --data-binary "$b" &
    cpids="$cpids $!"
done
for c in $cpids; do wait $c; done
text "$tmp"/par?
same=0
for i in 0 1 2 3 4 5 6 7; do cmp -s "$tmp/par$i.txt" "$tmp/cli$i" && same=$((same + 1)); done
[ $same -eq 8 ] && ok || bad "8 concurrent clients on three routes: only $same got their solo reply"
stop

finish
