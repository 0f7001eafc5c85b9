#!/bin/sh
# serve_draft.sh - serve --draft: speculative decoding per slot gives the replies of plain
# decoding. The test model is serve_lib's with three DSpark stages (models/tiny_dspark.json's
# keys); a plain server and one with --draft 3, two slots each, answer the same requests (greedy
# ones, sent to the drafting server at once so that its slots decode side by side, a sampled
# one with a seed, and a sampled one held to a JSON Schema): the same texts. The drafting server's replies and /metrics count the drafts
# its verifies checked and kept; the plain server's count none. Then a model of all-zero weights,
# whose drafts are all kept, through the drafting server. Prints "N passed, N failed".
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/serve_lib.sh"

# the model with DSpark stages: serve_lib's config plus the stage keys of tiny_dspark.json
python3 - "$data/models/tiny_text.json" models/tiny_dspark.json "$tmp/draft.json" <<'PY' && ok || bad "the config with stages"
import json, sys
cfg, stages = json.load(open(sys.argv[1])), json.load(open(sys.argv[2]))
cfg.update({k: v for k, v in stages.items() if k == "n_mtp_layers" or k.startswith("dspark_")})
json.dump(cfg, open(sys.argv[3], "w"))
PY
md=$tmp/tiny_draft
$dsv41 synth --config "$tmp/draft.json" -o "$md" >/dev/null && cp "$m/tokenizer.json" "$md/" && ok || bad "synth the model with stages"
m=$md

# ask NAME BODY: the reply of the server on $port in $tmp/NAME (in the background: wait for it)
ask() { curl -s -o "$tmp/$1" --data-binary "$2" -H 'Content-Type: application/json' "http://127.0.0.1:$port/v1/chat/completions"; }
sampled='{"model":"m","messages":[{"role":"user","content":"Tell a story"}],"temperature":0.8,"top_p":0.9,"seed":42,"max_tokens":20}'
# a reply held to a JSON Schema: the grammar's pick is the verify's pick, so the same tokens
constrained='{"model":"m","messages":[{"role":"user","content":"JSON"}],"temperature":1,"seed":5,"max_tokens":120,"response_format":{"type":"json_schema","json_schema":{"name":"t","schema":{"type":"object","properties":{"a":{"type":"array","items":{"enum":["x","yy",1]},"maxItems":6},"b":{"type":"string","maxLength":12}},"required":["a","b"]}}}}'

for kind in plain draft; do
    if [ $kind = plain ]; then start $kind -np 2 || { finish; exit 1; }
    else start $kind -np 2 --draft 3 || { finish; exit 1; }; fi
    ask $kind.a "$(chat "Hello there" 24)" & a=$!
    ask $kind.b "$(chat "What is a cache?" 24)" & b=$!
    ask $kind.c "$(chat "One more question" 24)" & c=$!
    wait $a $b $c
    ask $kind.s "$sampled"
    ask $kind.j "$constrained"
    budget "a thinking budget ($kind)"
    # a grammar that reaches a dead end after its first token (it needs the end-of-sentence id,
    # masked while it cannot end): with drafts the dead end comes in a verify's pick, and the
    # reply ends there as it does without
    req POST /v1/completions '{"prompt":"x","grammar":"root ::= \"a\" <[1]> \"b\"","max_tokens":8,"temperature":0}'
    python3 -c 'import json,sys; c=json.load(open(sys.argv[1]))["choices"][0]; assert c["finish_reason"]=="grammar_dead_end" and c["text"]=="a", c' \
        "$tmp/resp" && ok || bad "a dead end ($kind): $code $(head -c 300 "$tmp/resp")"
    req GET /metrics
    cp "$tmp/resp" "$tmp/$kind.metrics"
    stop
done

contents "$tmp"/plain.? "$tmp"/draft.?
for r in a b c s j; do
    if [ -s "$tmp/plain.$r.txt" ] && cmp -s "$tmp/plain.$r.txt" "$tmp/draft.$r.txt"; then ok
    else bad "reply $r with --draft 3 differs: '$(head -c 200 "$tmp/draft.$r.txt")' vs '$(head -c 200 "$tmp/plain.$r.txt")'"; fi
done

# the counts: some drafts checked with --draft, none without, never more kept than checked
python3 - "$tmp" <<'PY' && ok || bad "the replies' timings count the drafts"
import json, sys
t = lambda f: json.load(open(sys.argv[1] + "/" + f, encoding="utf-8"))["timings"]
draft = [t("draft." + r) for r in "abcs"]
assert sum(d["draft_n"] for d in draft) > 0, draft
assert all(0 <= d["draft_n_accepted"] <= d["draft_n"] for d in draft), draft
assert all(t("plain." + r) == {"draft_n": 0, "draft_n_accepted": 0} for r in "abcs")
PY
val() { sed -n "s/^$1 //p" "$tmp/$2.metrics"; }
[ "$(val dsv41_draft_tokens_total plain)" = 0 ] && [ "$(val dsv41_draft_tokens_total draft)" -gt 0 ] &&
    [ "$(val dsv41_draft_accepted_tokens_total draft)" -le "$(val dsv41_draft_tokens_total draft)" ] && ok ||
    bad "/metrics counts the drafts: $(grep draft "$tmp/draft.metrics" | grep -v '^#')"

# Drafts the verify keeps. A model whose weights are all zero (synth --skeleton: every data region
# a hole) has all-zero logits, so decoding and the drafter both pick id 0 every time (the first of
# equal logits) and every draft is kept: replies of many tokens a forward, cut by max_tokens inside
# a block, two slots verifying side by side in one batch, and a stream.
z=$tmp/zero
$dsv41 synth --skeleton --config "$tmp/draft.json" -o "$z" >/dev/null && cp "$m/tokenizer.json" "$z/" && ok || bad "synth the all-zero model"
m=$z
start zero -np 2 --draft 3 || { finish; exit 1; }
comp() { printf '{"model":"m","prompt":[5,6,7],"temperature":0,"max_tokens":%d%s}' "$1" "$2"; }
curl -s -o "$tmp/z.a" --data-binary "$(comp 10)" "http://127.0.0.1:$port/v1/completions" & a=$!
curl -s -o "$tmp/z.b" --data-binary "$(comp 7)" "http://127.0.0.1:$port/v1/completions" & b=$!
wait $a $b
curl -s -o "$tmp/z.s" --data-binary "$(comp 9 ',"stream":true,"stream_options":{"include_usage":true}')" "http://127.0.0.1:$port/v1/completions"
python3 - "$tmp" <<'PY' && ok || bad "all-zero model with --draft 3: $(head -c 300 "$tmp/z.a") $(tail -c 300 "$tmp/z.s")"
import json, sys
d = sys.argv[1]
for f, n in (("z.a", 10), ("z.b", 7)):
    r = json.load(open(d + "/" + f))
    assert r["usage"]["completion_tokens"] == n and r["choices"][0]["finish_reason"] == "length", r
    t = r["timings"]
    assert t["draft_n_accepted"] == t["draft_n"] > 0, t  # every draft kept, several tokens a forward
    assert n - 1 - t["draft_n_accepted"] < n // 2, t
ev = [json.loads(l[6:]) for l in open(d + "/z.s") if l.startswith("data: {")]
assert ev[-1]["usage"]["completion_tokens"] == 9, ev[-1]
assert [c["finish_reason"] for e in ev for c in e["choices"] if c["finish_reason"]] == ["length"], ev
PY
stop
finish
