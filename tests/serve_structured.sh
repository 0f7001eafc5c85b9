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
# the server still serves a free reply after all that
req POST /v1/chat/completions "$(chat "Hello there" 4)"
[ "$code" = 200 ] && ok || bad "a plain chat after the constrained ones: $code $(head -c 300 "$tmp/resp")"
stop

finish
