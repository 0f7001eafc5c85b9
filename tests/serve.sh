#!/bin/sh
# serve.sh - `dsv41 serve` over HTTP on loopback: the tiny geometry with the real 129,280-token
# vocabulary and the V4.1 tokenizer. Greedy replies are checked against `dsv41 run -p` (whole,
# streamed, as a raw completion), 8 clients at once get what each gets alone in fewer forward
# steps than tokens (batched), the official
# `openai` npm client drives a chat, a stream and a tool-call round trip, and the same on
# /v1/responses, the official
# `@anthropic-ai/sdk` client the same on /v1/messages (with pings during a long prefill and
# Anthropic's error shape), headless chromium
# drives the chat page at / (tests/serve_page.mjs), every kind of bad
# request gets its status and OpenAI's
# error shape while the server keeps serving, a client that hangs up frees its slot, a bounded
# load leaves the memory flat, and SIGTERM ends streams cleanly with exit 0.
# Ports are chosen by the kernel (--port 0). Prints "N passed, N failed".
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/serve_lib.sh"

# the greedy replies `dsv41 run -p` gives (its stdout ends with one added newline; the server
# leaves out the same special tokens, tests/serve_text.sh checks that rule on every route)
n=12
for i in 0 1; do
    $dsv41 run -m "$m" -p "Question $i: what is $i + $i?" -n $n --temp 0 -t 1 2>/dev/null >"$tmp/run$i"
    python3 -c 'import sys; t=open(sys.argv[1],"rb").read(); open(sys.argv[1],"wb").write(t[:-1])' "$tmp/run$i"
done
$dsv41 run -m "$m" -p "Hello there" -n $n --temp 0 -t 1 2>/dev/null | python3 -c 'import sys; sys.stdout.buffer.write(sys.stdin.buffer.read()[:-1])' >"$tmp/hello"

start main -np 8 || { finish; exit 1; }

req GET /health
[ "$code" = 200 ] && [ "$(cat "$tmp/resp")" = '{"status":"ok"}' ] && ok || bad "health: $code $(cat "$tmp/resp")"
req GET /v1/models
[ "$code" = 200 ] && grep -q '"data":\[{"id":"tiny_text",.*"context_length":4096}\]' "$tmp/resp" && ok || bad "models: $(cat "$tmp/resp")"

# greedy chat == run -p, whole and streamed
for i in 0 1; do
    req POST /v1/chat/completions "$(chat "Question $i: what is $i + $i?" $n)"
    cp "$tmp/resp" "$tmp/got$i"
done
contents "$tmp/got0" "$tmp/got1"
for i in 0 1; do
    cmp -s "$tmp/got$i.txt" "$tmp/run$i" && ok || bad "greedy chat $i differs from run -p: '$(cat "$tmp/got$i.txt")' vs '$(cat "$tmp/run$i")'"
done
req POST /v1/chat/completions "$(chat "Question 0: what is 0 + 0?" $n | sed 's/}$/,"stream":true,"stream_options":{"include_usage":true}}/')"
python3 - "$tmp/resp" "$tmp/run0" $n <<'PY' && ok || bad "streamed chat"
import json, sys
events = [l[6:] for l in open(sys.argv[1], encoding="utf-8").read().split("\n") if l.startswith("data: ")]
assert events[-1] == "[DONE]", events[-1]
chunks = [json.loads(e) for e in events[:-1]]
assert all(c["object"] == "chat.completion.chunk" for c in chunks)
text = "".join(ch["delta"].get("content") or "" for c in chunks for ch in c["choices"])
want = open(sys.argv[2], encoding="utf-8").read()
assert text == want, (text, want)
finishes = [ch["finish_reason"] for c in chunks for ch in c["choices"] if ch["finish_reason"]]
assert finishes == ["length"], finishes
assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == int(sys.argv[3]), chunks[-1]
assert len(chunks) >= int(sys.argv[3]), "one chunk per token"
PY

# thinking mode: the reply (this model never closes its reasoning) comes back as reasoning_content
req POST /v1/chat/completions '{"messages":[{"role":"user","content":"hi"}],"reasoning_effort":"high","max_tokens":4,"seed":3}'
[ "$code" = 200 ] && grep -q '"message":{"role":"assistant","content":"","reasoning_content":"[^"]' "$tmp/resp" && ok ||
    bad "thinking mode: $(head -c 300 "$tmp/resp")"

# the raw completion of the rendered prompt is the chat reply
printf '{"messages":[{"role":"user","content":"Question 1: what is 1 + 1?"}],"options":{"thinking_mode":"chat"}}' >"$tmp/case.json"
$dsv41 render --chat "$tmp/case.json" >"$tmp/prompt"
req POST /v1/completions "$(python3 -c 'import json,sys; print(json.dumps({"prompt": open(sys.argv[1],encoding="utf-8").read(), "temperature": 0, "max_tokens": int(sys.argv[2])}))' "$tmp/prompt" $n)"
cp "$tmp/resp" "$tmp/raw"
contents "$tmp/raw"
[ "$code" = 200 ] && cmp -s "$tmp/raw.txt" "$tmp/run1" && ok || bad "completion of the rendered prompt: $(head -c 300 "$tmp/resp")"

# tokenize / detokenize against the command line's tokenizer
req POST /tokenize '{"content":"Hello <｜User｜> world"}'
want=$($dsv41 tokenize --tokenizer "$m/tokenizer.json" --special "Hello <｜User｜> world")
[ "$code" = 200 ] && [ "$(cat "$tmp/resp")" = "{\"tokens\":$want}" ] && ok || bad "tokenize: $(cat "$tmp/resp") vs $want"
req POST /detokenize "{\"tokens\":$want}"
[ "$code" = 200 ] && [ "$(cat "$tmp/resp")" = '{"content":"Hello <｜User｜> world"}' ] && ok || bad "detokenize: $(cat "$tmp/resp")"

# 8 clients at once each get the reply they get alone
for i in 0 1 2 3 4 5 6 7; do
    req POST /v1/chat/completions "$(chat "Question $i: what is $i + $i?" $n)"
    cp "$tmp/resp" "$tmp/alone$i"
done
# (cold prefills, so that each joins a step of the others' decoding; counters before and after:
# with batching the 8 replies take fewer steps than tokens)
req GET /metrics
cp "$tmp/resp" "$tmp/metrics0"
cpids=""
for i in 0 1 2 3 4 5 6 7; do
    curl -s -o "$tmp/par$i" "http://127.0.0.1:$port/v1/chat/completions" \
        --data-binary "$(chat "Question $i: what is $i + $i?" $n | sed 's/}$/,"cache_prompt":false}/')" &
    cpids="$cpids $!"
done
for c in $cpids; do wait $c; done
contents "$tmp"/alone? "$tmp"/par?
same=0
for i in 0 1 2 3 4 5 6 7; do cmp -s "$tmp/par$i.txt" "$tmp/alone$i.txt" && same=$((same + 1)); done
[ $same -eq 8 ] && ok || bad "8 concurrent clients: only $same got the reply they get alone"
req GET /metrics
python3 - "$tmp/metrics0" "$tmp/resp" $((8 * n)) <<'PY' && ok || bad "8 concurrent clients were not batched"
import sys
def counters(f):
    return {l.split()[0]: float(l.split()[1]) for l in open(f) if l.startswith("dsv41_") and "{" not in l}
a, b = counters(sys.argv[1]), counters(sys.argv[2])
gen, steps = b["dsv41_generated_tokens_total"] - a["dsv41_generated_tokens_total"], b["dsv41_steps_total"] - a["dsv41_steps_total"]
assert gen == int(sys.argv[3]) and 0 < steps < gen and b["dsv41_batch_size"] >= 1, (gen, steps)
PY

# the official openai client (chat completions and responses), and @anthropic-ai/sdk on /v1/messages
client "openai client" openai tests/serve_client.mjs
client "anthropic client" @anthropic-ai/sdk tests/serve_anthropic.mjs
# a thinking budget ends the reasoning with </think>, and the answer follows
budget "messages: a thinking budget"
# a long prefill streamed through /v1/messages: pings keep the stream alive before the first block
python3 -c 'import json; print(json.dumps({"max_tokens": 2, "stream": True, "messages": [{"role": "user", "content": "word " * 3000}]}))' >"$tmp/long.json"
curl -sN -o "$tmp/pings" "http://127.0.0.1:$port/v1/messages" --data-binary "@$tmp/long.json"
python3 - "$tmp/pings" <<'PY' && ok || bad "pings during a long prefill: $(grep -c ping "$tmp/pings") pings, $(head -c 300 "$tmp/pings")"
import sys
events = [l[7:] for l in open(sys.argv[1], encoding="utf-8").read().split("\n") if l.startswith("event: ")]
first = events.index("content_block_start")
assert events[0] == "message_start" and "ping" in events[1:first] and events[-1] == "message_stop", events
PY
# Anthropic's error shape on its routes, for any status
anthropic_err() {
    name=$1; want=$2; shift 2
    req "$@"
    if [ "$code" = "$want" ] && grep -Eq '^\{"type":"error","error":\{"type":"[a-z_]+","message":"([^"\\]|\\.)*"\}\}$' "$tmp/resp"
    then ok; else bad "$name: status $code (want $want), $(head -c 300 "$tmp/resp")"; fi
}
anthropic_err "messages: malformed JSON" 400 POST /v1/messages '{"messages": ['
anthropic_err "messages: no max_tokens" 400 POST /v1/messages '{"messages":[{"role":"user","content":"x"}]}'
anthropic_err "messages: an image block" 400 POST /v1/messages '{"max_tokens":2,"messages":[{"role":"user","content":[{"type":"image","source":{}}]}]}'
anthropic_err "messages: a server tool" 400 POST /v1/messages '{"max_tokens":2,"messages":[{"role":"user","content":"x"}],"tools":[{"type":"web_search_20250305","name":"web_search"}]}'
anthropic_err "messages: wrong method" 405 GET /v1/messages
anthropic_err "messages: a budget not below max_tokens" 400 POST /v1/messages '{"max_tokens":8,"thinking":{"type":"enabled","budget_tokens":8},"messages":[{"role":"user","content":"x"}]}'
anthropic_err "messages: a budget of 0" 400 POST /v1/messages '{"max_tokens":8,"thinking":{"type":"enabled","budget_tokens":0},"messages":[{"role":"user","content":"x"}]}'
anthropic_err "messages: over the context" 400 POST /v1/messages '{"max_tokens":5000,"messages":[{"role":"user","content":"x"}]}'

# the chat page: its security headers, then a real browser
hdr=$(curl -s -D - -o "$tmp/page" "http://127.0.0.1:$port/")
printf '%s' "$hdr" | grep -qi "^content-security-policy: default-src 'self'" && printf '%s' "$hdr" | grep -qi '^x-content-type-options: nosniff' &&
    grep -q 'id="prompt"' "$tmp/page" && ok || bad "GET /: $(printf '%s' "$hdr" | head -c 400)"
if [ -d tests/node/node_modules/puppeteer-core ] && [ -x "${CHROMIUM:-/usr/bin/chromium}" ] && command -v node >/dev/null; then
    out=$(node tests/serve_page.mjs "http://127.0.0.1:$port" 2>&1)
    printf '%s\n' "$out" | grep '^FAIL' | sed 's/^FAIL: /FAIL: chat page: /'
    line=$(printf '%s\n' "$out" | tail -n 1)
    case $line in *" passed, 0 failed") ok ;; *) bad "chat page in chromium: $line" ;; esac
else
    bad "puppeteer-core or chromium is missing: .ci/run installs them"
fi

# bad requests: status and error shape, and the server goes on
expect_err "malformed JSON" 400 POST /v1/chat/completions '{"messages": ['
expect_err "not an object" 400 POST /v1/chat/completions '[1, 2]'
expect_err "no messages" 400 POST /v1/chat/completions '{"model":"m"}'
expect_err "messages of the wrong type" 400 POST /v1/chat/completions '{"messages":"hi"}'
expect_err "a role the encoder refuses" 400 POST /v1/chat/completions '{"messages":[{"role":"narrator","content":"x"}]}'
expect_err "temperature of the wrong type" 400 POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"temperature":"hot"}'
expect_err "top_p out of range" 400 POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"top_p":7}'
expect_err "max_tokens not an integer" 400 POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"max_tokens":1.5}'
expect_err "stream not a boolean" 400 POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"stream":"yes"}'
expect_err "n other than 1" 400 POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"n":3}'
expect_err "a tool_choice naming no tool" 400 POST /v1/chat/completions '{"messages":[{"role":"user","content":"x"}],"tools":[],"tool_choice":{"type":"function","function":{"name":"f"}}}'
expect_err "a prompt that is not a string" 400 POST /v1/completions '{"prompt":5}'
expect_err "invalid UTF-8" 400 POST /v1/completions "$(printf '{"prompt":"a\377b"}')"
expect_err "tokenize without content" 400 POST /tokenize '{}'
expect_err "detokenize of an unknown id" 400 POST /detokenize '{"tokens":[99999999]}'
expect_err "prompt and max_tokens over the context" 400 POST /v1/chat/completions "$(chat hi 5000)"
grep -q '"message":"[^"]*5000[^"]*4096' "$tmp/resp" && ok || bad "the context error names the numbers: $(cat "$tmp/resp")"
expect_err "responses: previous_response_id" 400 POST /v1/responses '{"input":"x","previous_response_id":"resp_1"}'
expect_err "responses: a stored response" 404 GET /v1/responses/resp_1
expect_err "responses: a hosted tool" 400 POST /v1/responses '{"input":"x","tools":[{"type":"web_search"}]}'
expect_err "responses: an image" 400 POST /v1/responses '{"input":[{"role":"user","content":[{"type":"input_image","image_url":"x"}]}]}'
expect_err "unknown route" 404 GET /v2/everything
expect_err "wrong method" 405 GET /v1/chat/completions
head -c 9000000 /dev/zero | tr '\0' 'a' >"$tmp/big"
expect_err "a body over 8 MiB" 413 POST /v1/completions "@$tmp/big"
req POST /v1/chat/completions "$(chat hi 2)"
[ "$code" = 200 ] && ok || bad "the server still serves after the bad requests: $code"

# a client that hangs up frees its slot within a step
timeout 1 curl -sN -o /dev/null "http://127.0.0.1:$port/v1/chat/completions" --data-binary "$(chat 'a long one' 4000 | sed 's/}$/,"stream":true}/')"
free=0
for _ in $(seq 50); do
    req GET /metrics
    grep -q '^dsv41_slots_busy 0$' "$tmp/resp" && { free=1; break; }
    sleep 0.1
done
[ $free -eq 1 ] && grep -q 'client gone' "$tmp/main.log" && ok || bad "a hung-up client keeps its slot: $(grep busy "$tmp/resp")"

# /metrics counts what happened
req GET /metrics
grep -q '^dsv41_requests_total{status="400"} [1-9]' "$tmp/resp" && grep -q '^dsv41_requests_total{status="404"} [1-9]' "$tmp/resp" &&
    grep -q '^dsv41_generated_tokens_total [1-9]' "$tmp/resp" && grep -q '^dsv41_decode_tokens_per_second [0-9.]*[1-9]' "$tmp/resp" &&
    ok || bad "metrics: $(grep -v '^#' "$tmp/resp" | head -c 600)"

# load: 64 requests from 8 clients, twice; 0 errors, and the memory after the second round is
# within 5% of what it was after the first (the first one grows the caches to their size)
rss() { awk '/^VmRSS/ {print $2}' /proc/$pid/status; }
load() {
    seq 64 | xargs -P 8 -I{} curl -s -o /dev/null -w '%{http_code}\n' "http://127.0.0.1:$port/v1/chat/completions" \
        --data-binary '{"messages":[{"role":"user","content":"load {}"}],"max_tokens":2,"seed":{}}' >"$tmp/codes"
    grep -vc '^200$' "$tmp/codes"
}
# (a sanitizer build: ASan's quarantine keeps freed blocks resident, up to 256 MB, so only growth
# well past that slack counts; LeakSanitizer checks for leaks when the server exits)
slack=105; [ "$dsv41" != ./dsv41 ] && slack=125
errors=$(load); r1=$(rss); errors2=$(load); r2=$(rss)
[ "$errors" -eq 0 ] && [ "$errors2" -eq 0 ] && [ $((r2 * 100)) -le $((r1 * slack)) ] && ok ||
    bad "load: $errors and $errors2 errors in 2 x 64 requests, RSS $r1 kB then $r2 kB"

# one log line per request
lines=$(grep -c '^POST /v1/chat/completions [0-9]* prompt=' "$tmp/main.log")
[ "$lines" -ge 128 ] && ok || bad "log lines: only $lines chat lines"

# SIGTERM during a stream: the stream closes with [DONE], exit 0
curl -sN -o "$tmp/last" "http://127.0.0.1:$port/v1/chat/completions" --data-binary "$(chat 'a long one' 4000 | sed 's/}$/,"stream":true}/')" &
cpid=$!
sleep 1
stop
wait $cpid
tail -n 2 "$tmp/last" | grep -q '^data: \[DONE\]$' && ok || bad "a stream cut by SIGTERM does not close: $(tail -c 200 "$tmp/last")"

# an API key, and the queue
start keyed --api-key sekrit -np 1 --queue 1 || { finish; exit 1; }
expect_err "no API key" 401 POST /v1/chat/completions "$(chat hi 2)"
expect_err "a wrong API key" 401 POST /v1/chat/completions "$(chat hi 2)" -H 'Authorization: Bearer sekriT'
expect_err "a key of another length" 401 POST /v1/chat/completions "$(chat hi 2)" -H 'Authorization: Bearer sekrit2'
req GET /health
[ "$code" = 200 ] && ok || bad "health without a key: $code"
req POST /v1/chat/completions "$(chat hi 2)" -H 'Authorization: Bearer sekrit'
[ "$code" = 200 ] && ok || bad "the right API key: $code $(cat "$tmp/resp")"
req POST /v1/messages '{"max_tokens":2,"messages":[{"role":"user","content":"hi"}]}' -H 'x-api-key: sekrit'
[ "$code" = 200 ] && ok || bad "the right key as x-api-key: $code $(cat "$tmp/resp")"
req POST /v1/messages '{"max_tokens":2,"messages":[{"role":"user","content":"hi"}]}' -H 'x-api-key: sekriT'
[ "$code" = 401 ] && grep -q '^{"type":"error","error":{"type":"authentication_error",' "$tmp/resp" && ok ||
    bad "a wrong x-api-key: $code $(cat "$tmp/resp")"
long=$(chat 'a long one' 3000 | sed 's/}$/,"stream":true}/')
for k in 1 2; do
    curl -sN -o /dev/null -H 'Authorization: Bearer sekrit' "http://127.0.0.1:$port/v1/chat/completions" --data-binary "$long" &
    sleep 0.5
done
expect_err "all slots busy and the queue full" 503 POST /v1/chat/completions "$(chat hi 2)" -H 'Authorization: Bearer sekrit'
stop

# bad flags
expect_error "serve: unknown flag" $dsv41 serve -m "$m" --bogus 1
expect_error "serve: no model" $dsv41 serve --port 0
expect_error "serve: a bad port" $dsv41 serve -m "$m" --port 99999
expect_error "serve: a missing model" $dsv41 serve -m "$tmp/none" --port 0
expect_error "serve: a context over the model's" $dsv41 serve -m "$m" --port 0 -c 100000

finish
