# serve_lib.sh - what the server tests share (after lib.sh): the test model (the tiny geometry
# with synthesized weights, the real 129,280-token vocabulary and the V4.1 tokenizer) in $m,
# servers started on kernel-chosen ports, requests with curl, OpenAI's error shape, and the node
# scripts that drive a server through an npm client.
data=${DSV41_SHARED:-../shared}
for f in "$data/models/tiny_text.json" "$data/tokenizer/deepseek-v3/tokenizer.json" "$data/tokenizer/v41_added_tokens.json"; do
    if [ ! -f "$f" ]; then bad "shared data not found: $f"; finish; exit 1; fi
done
pids=""
trap 'for p in $pids; do kill -9 $p 2>/dev/null; done; rm -rf "$tmp"' EXIT

# the model: synthesized weights, the V3 tokenizer with the V4.1 added-token table
m=$tmp/tiny_text
$dsv41 synth --config "$data/models/tiny_text.json" -o "$m" >/dev/null &&
    python3 tools/v41_tokenizer.py "$data/tokenizer" "$m/tokenizer.json" && ok || bad "build the test model"

. "$(dirname "$0")/serve_start.sh" # start NAME ARGS...: a server in the background, $port and $pid

# stop: SIGTERM, and the server must exit 0 within 20 s
stop() {
    kill -TERM $pid
    for _ in $(seq 200); do kill -0 $pid 2>/dev/null || break; sleep 0.1; done
    if kill -0 $pid 2>/dev/null; then bad "the server ignored SIGTERM"; kill -9 $pid; fi
    wait $pid; rc=$?
    [ $rc -eq 0 ] && ok || bad "the server exited $rc after SIGTERM"
}

# req METHOD PATH [BODY] [curl args...]: the reply in $tmp/resp, the status in $code
req() {
    method=$1; path=$2; shift 2
    if [ $# -gt 0 ]; then body=$1; shift; set -- --data-binary "$body" -H 'Content-Type: application/json' "$@"; fi
    code=$(curl -s -o "$tmp/resp" -w '%{http_code}' -X "$method" "$@" "http://127.0.0.1:$port$path")
}

# contents FILE...: the message content (or completion text) of each chat reply FILE in FILE.txt
# (one python for all: its start is slow on a busy machine)
contents() {
    python3 - "$@" <<'PY'
import json, sys
for f in sys.argv[1:]:
    try:
        c = json.load(open(f, encoding="utf-8"))["choices"][0]
        t = c["message"]["content"] if "message" in c else c["text"]
    except Exception as e:
        t = "(no reply: %s)" % e
    open(f + ".txt", "w", encoding="utf-8").write(t)
PY
}

# expect_err NAME STATUS METHOD PATH [BODY] [curl args]: that status, OpenAI's error shape
expect_err() {
    name=$1; want=$2; shift 2
    req "$@"
    if [ "$code" = "$want" ] && grep -Eq '^\{"error":\{"message":"([^"\\]|\\.)*","type":"[a-z_]+","param":(null|"[a-z_]+"),"code":(null|"[a-z_]+")\}\}$' "$tmp/resp"
    then ok; else bad "$name: status $code (want $want), $(head -c 300 "$tmp/resp")"; fi
}

# chat TEXT MAX: a greedy chat body
chat() { printf '{"model":"m","messages":[{"role":"user","content":"%s"}],"temperature":0,"max_tokens":%d}' "$1" "$2"; }

# budget NAME: tests/serve_budget.py against the server on $port (a thinking budget on /v1/messages)
budget() {
    printf '{"messages":[{"role":"user","content":"Question 2: what is 2 + 2?"}],"options":{"thinking_mode":"thinking"}}' >"$tmp/think.json"
    $dsv41 render --chat "$tmp/think.json" >"$tmp/think.txt"
    python3 tests/serve_budget.py "$port" "$tmp/think.json" "$(cat "$tmp/think.txt")" && ok || bad "$1"
}

# client NAME PACKAGE SCRIPT: a node script (tests/client_lib.mjs) driving the server on $port
# through an npm package, with $tmp/hello as its expected file and $n as its max tokens; its FAIL
# lines are shown and its closing line is one case
client() {
    if [ ! -d "tests/node/node_modules/$2" ] || ! command -v node >/dev/null; then
        bad "node or the $2 npm package is missing (make test installs the packages: npm ci --prefix tests/node)"
        return
    fi
    out=$(node "$3" "http://127.0.0.1:$port" "$tmp/hello" $n 2>&1)
    printf '%s\n' "$out" | grep '^FAIL' | sed "s/^FAIL: /FAIL: $1: /"
    line=$(printf '%s\n' "$out" | tail -n 1)
    case $line in *" passed, 0 failed") ok ;; *) bad "$1: $line" ;; esac
}
