#!/bin/sh
# cli.sh - the dsv41 program as a user drives it: the golden check, malformed goldens (each a
# one-line error and a non-zero exit, never a crash), and `run` on the built-in model.
# Prints "N passed, N failed" and exits non-zero on any failure.
cd "$(dirname "$0")/.." || exit 1
golden=${DSV41_GOLDEN:-${DSV41_SHARED:-../shared}/golden/ds41_tiny_golden.json}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
passed=0; failed=0
ok() { passed=$((passed + 1)); }
bad() { failed=$((failed + 1)); echo "FAIL: $*"; }

# expect_error NAME CMD...: non-zero exit below 128 (no signal) and exactly one line on stderr
expect_error() {
    name=$1; shift
    "$@" >"$tmp/out" 2>"$tmp/err"; rc=$?
    lines=$(wc -l <"$tmp/err")
    if [ $rc -ne 0 ] && [ $rc -lt 128 ] && [ "$lines" -eq 1 ]; then ok; else bad "$name: rc=$rc, $lines stderr lines: $(head -c 300 "$tmp/err")"; fi
}

if [ ! -f "$golden" ]; then bad "golden not found at $golden"; echo "$passed passed, $failed failed"; exit 1; fi

out=$(./dsv41 check "$golden"); rc=$?
last=$(printf '%s\n' "$out" | tail -n 1)
[ $rc -eq 0 ] && [ "$last" = "443 passed, 0 failed" ] && ok || bad "check on the golden: rc=$rc, '$last'"

# malformed goldens, each made from the real one
mk() { python3 - "$golden" "$tmp/$1.json" "$2" <<'PY'
import json, sys
src, dst, what = sys.argv[1], sys.argv[2], sys.argv[3]
g = json.load(open(src))
if what == "no_dim": del g["fixture"]["dim"]
elif what == "meta_shape": g["weights_meta"]["layers.1.attn.wq_a.weight"]["shape"] = [16, 65]
elif what == "meta_extra": g["weights_meta"]["layers.9.attn.wq_a.weight"] = g["weights_meta"]["layers.1.attn.wq_a.weight"]
elif what == "cap_shape": g["decode12"]["L2.sa_q"]["shape"] = [1, 1, 4, 31]
elif what == "cap_data": g["prefill12"]["L3.sa_o"]["data"].pop()
elif what == "no_regime": del g["decode13"]
elif what == "bad_ids": g["prefill12"]["input_ids"]["data"][0] = 999
elif what == "sample": g["decode13"]["L5.sa_o"]["data"][3] += 0.05
elif what == "ratio": g["fixture"]["compress_ratios"][1] = 2
json.dump(g, open(dst, "w"))
PY
}
for case in no_dim meta_shape meta_extra cap_shape cap_data no_regime bad_ids ratio; do
    mk $case $case && expect_error "golden $case" ./dsv41 check "$tmp/$case.json"
done
head -c 100000 "$golden" >"$tmp/truncated.json"
expect_error "truncated golden" ./dsv41 check "$tmp/truncated.json"
expect_error "missing golden" ./dsv41 check "$tmp/nonexistent.json"
echo '{"fixture": {}}' >"$tmp/notgolden.json"
expect_error "not a golden" ./dsv41 check "$tmp/notgolden.json"

mk sample sample
out=$(./dsv41 check "$tmp/sample.json"); rc=$?
[ $rc -eq 1 ] && printf '%s\n' "$out" | grep -q '^FAIL decode13 L5.sa_o: max error' &&
    [ "$(printf '%s\n' "$out" | tail -n 1)" = "442 passed, 1 failed" ] && ok || bad "a wrong golden sample is reported: rc=$rc"

# run on the built-in model
out=$(./dsv41 run --ids 2,17,47 -n 16); rc=$?
ids=$(printf '%s\n' "$out" | head -n 1 | tr ',' '\n' | grep -cE '^[0-9]+$')
[ $rc -eq 0 ] && [ "$ids" -eq 16 ] && printf '%s\n' "$out" | tail -n 1 | grep -qE '^prompt: 3 tokens, [0-9.]+ tok/s \| generated: 16 tokens, [0-9.]+ tok/s$' &&
    ok || bad "run: rc=$rc, output '$out'"
again=$(./dsv41 run --ids 2,17,47 -n 16 | head -n 1)
[ "$again" = "$(printf '%s\n' "$out" | head -n 1)" ] && ok || bad "run is deterministic"
expect_error "run past the context" ./dsv41 run --ids 2,17,47 -n 100
expect_error "run with a bad id list" ./dsv41 run --ids 2,x
expect_error "run with an id outside the vocabulary" ./dsv41 run --ids 2,64 -n 1
expect_error "run with an unknown flag" ./dsv41 run --bogus
expect_error "unknown command" ./dsv41 frobnicate

echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
