#!/bin/sh
# serve_agents.sh - what coding agents send today (Claude Code on /v1/messages, Codex on
# /v1/responses), on the test model of serve.sh: system messages among Anthropic's messages,
# Claude Code's billing-header system block (which changes every request and must not defeat
# the prompt cache), adaptive thinking, output_config.effort, context_management and unknown
# anthropic-beta values; the Responses API echoing the request, counting reasoning tokens,
# marking an incomplete reply's message incomplete, and answering Codex's fields. The expected
# prompts come from `dsv41 render` of chat cases written here (tests/serve_agents.py).
# Prints "N passed, N failed".
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/serve_lib.sh"

# render NAME CASE: the prompt `dsv41 render --chat` writes for the chat case CASE, in $tmp/NAME.txt
render() { printf '%s' "$2" >"$tmp/$1.json" && $dsv41 render --chat "$tmp/$1.json" >"$tmp/$1.txt"; }
sys='{"role":"system","content":"You are a coding agent."}'
u1='{"role":"user","content":"List the files."}'
mid='{"role":"system","content":"<system-reminder>Be brief.</system-reminder>"}'
render mid "{\"messages\":[$sys,$u1,$mid],\"options\":{\"thinking_mode\":\"chat\"}}"
render sys "{\"messages\":[$sys,$u1],\"options\":{\"thinking_mode\":\"chat\"}}"
render effort "{\"messages\":[$sys,$u1],\"options\":{\"thinking_mode\":\"thinking\",\"reasoning_effort\":\"max\"}}"

start main -np 2 || { finish; exit 1; }
python3 tests/serve_agents.py "$port" "$tmp" && ok || bad "agents' requests (tests/serve_agents.py)"
stop

finish
