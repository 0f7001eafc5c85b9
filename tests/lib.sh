# lib.sh - what the CLI test scripts share: run from the repository root with a temporary
# folder, count cases, and check that bad input fails the way the project promises.
cd "$(dirname "$0")/.." || exit 1
dsv41=${DSV41:-./dsv41} # the program under test (`make sanitize` names its own build)
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }

# expect_error NAME CMD...: non-zero exit below 128 (no signal), exactly one stderr line, and it
# starts with "dsv41: "
expect_error() {
    name=$1; shift
    "$@" >"$tmp/out" 2>"$tmp/err" </dev/null; rc=$?
    lines=$(wc -l <"$tmp/err")
    if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$lines" -eq 1 ] && grep -q '^dsv41: ' "$tmp/err"; then ok
    else bad "$name: rc=$rc, $lines stderr lines: $(head -c 300 "$tmp/err")"; fi
}

# chat_model DIR: a checkpoint of the tiny geometry with room for a byte-level vocabulary, a
# longer context and a small byte-level tokenizer.json (tests/ref/chat_model.py), for the text
# commands
chat_model() {
    python3 tests/ref/chat_model.py models/tiny.json "$tmp/tiny.json" "$tmp/tokenizer.json" || return 1
    "$dsv41" synth --config "$tmp/tiny.json" -o "$1" && cp "$tmp/tokenizer.json" "$1/"
}

# the closing line, and the exit status
finish() {
    echo "$passed passed, $failed failed"
    [ "$failed" -eq 0 ]
}
