#!/bin/sh
# serve_structured.sh - structured output on every route of `dsv41 serve`, on the test model of
# serve.sh (filler weights, the real vocabulary): a table of JSON Schemas whose replies
# python3-jsonschema validates, raw grammars, strict and forced tool calls on all three APIs,
# thinking before a constrained answer, bad schemas and grammars, a dead end
# (tests/serve_structured.py); then the official clients' structured-output helpers over many
# seeds at temperature 1 (tests/serve_structured.mjs). Prints "N passed, N failed".
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/serve_lib.sh"

start main -np 2 || { finish; exit 1; }
python3 tests/serve_structured.py "$port" && ok || bad "constrained replies (tests/serve_structured.py)"
n=700
: >"$tmp/hello"
client "structured output through the clients" zod tests/serve_structured.mjs
# the format is rendered into the prompt as the V4.1 template renders a system message's
# response_format: the prompt is the one `dsv41 render` writes for that case
rf='{"type":"json_schema","json_schema":{"name":"t","schema":{"type":"object","properties":{"a":{"type":"integer"}},"required":["a"]}}}'
printf '{"messages":[{"role":"system","content":"","response_format":%s},{"role":"user","content":"JSON"}],"options":{"thinking_mode":"chat"}}' "$rf" >"$tmp/rf.json"
$dsv41 render --chat "$tmp/rf.json" >"$tmp/rf.txt"
req POST /tokenize "$(python3 -c 'import json,sys; print(json.dumps({"content": open(sys.argv[1], encoding="utf-8").read()}))' "$tmp/rf.txt")"
want=$(python3 -c 'import json,sys; print(len(json.load(open(sys.argv[1]))["tokens"]))' "$tmp/resp")
req POST /v1/chat/completions "{\"messages\":[{\"role\":\"user\",\"content\":\"JSON\"}],\"response_format\":$rf,\"max_tokens\":1}"
got=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["usage"]["prompt_tokens"])' "$tmp/resp" 2>/dev/null)
[ "$got" = "$want" ] && ok || bad "the response format in the prompt: $got prompt tokens, the rendered case has $want"
# the server still serves a free reply after all that
req POST /v1/chat/completions "$(chat "Hello there" 4)"
[ "$code" = 200 ] && ok || bad "a plain chat after the constrained ones: $code $(head -c 300 "$tmp/resp")"
stop

finish
