#!/bin/sh
# runner.sh - the test runner's own promises (tests/run.sh): a test still running past
# DSV41_TEST_TIMEOUT seconds is ended with everything it started and counted as one failure under
# its name, while the others' counts still add up; a limit that is not a number is refused.
# Fake tests with a 2-second limit, so this takes seconds. Prints "N passed, N failed".
. "$(dirname "$0")/lib.sh"

printf '#!/bin/sh\necho "3 passed, 0 failed"\n' >"$tmp/quick.sh"
# a hang: a child that sleeps (its pid noted) and the test waiting on it
printf '#!/bin/sh\nsleep 300 &\necho $! >"%s/child"\nwait\n' "$tmp" >"$tmp/hangs.sh"
chmod +x "$tmp/quick.sh" "$tmp/hangs.sh"
t0=$(date +%s)
DSV41_TEST_TIMEOUT=2 DSV41_TEST_JOBS=2 timeout 60 tests/run.sh "$tmp/quick.sh" "$tmp/hangs.sh" >"$tmp/out" 2>&1; rc=$?
secs=$(($(date +%s) - t0))
[ $rc -ne 0 ] && [ $rc -ne 124 ] && [ "$(tail -n 1 "$tmp/out")" = "3 passed, 1 failed" ] && ok ||
    bad "a hanging test: rc=$rc, closing line '$(tail -n 1 "$tmp/out")'"
grep -q "^FAIL: $tmp/hangs.sh ran past 2 s" "$tmp/out" && ok || bad "the hanging test is not named: $(cat "$tmp/out")"
[ $secs -lt 30 ] && ok || bad "the runner took $secs s to end a test with a 2 s limit"
child=$(cat "$tmp/child" 2>/dev/null)
gone() { [ -n "$child" ] && ! kill -0 "$child" 2>/dev/null; } # (a dead child stays visible until it is reaped)
for _ in $(seq 50); do gone && break; sleep 0.1; done
gone && ok || bad "the hanging test's child $child still runs: $(ps -o stat=,cmd= -p "$child")"
[ -n "$child" ] && kill "$child" 2>/dev/null

DSV41_TEST_TIMEOUT=soon tests/run.sh "$tmp/quick.sh" >"$tmp/out" 2>&1; rc=$?
[ $rc -eq 2 ] && grep -q 'DSV41_TEST_TIMEOUT must be' "$tmp/out" && ok || bad "a bad limit: rc=$rc, $(cat "$tmp/out")"
finish
