#!/bin/bash
# run.sh - runs the tests given (test programs and scripts, longest first for the lanes to end
# together; the Makefile's `test` names them all), DSV41_TEST_JOBS at a time (default: one per
# CPU), then prints the total as one "N passed, N failed" line. Exits non-zero if anything
# failed, crashed or ran past its time.
#
# The tests share nothing that would make running them side by side unsafe: each works in its own
# temporary folder, a server takes the port the kernel gives it, and a test's verdicts compare
# bits and texts, never times. Most of them wait on a child process, a server or qemu for much
# of their run, so two at a time on two CPUs took 60% of the time of one after another (2026-12-04).
# A test's output is printed whole when it ends, so the blocks never interleave.
#
# No test may hang the suite: each runs under timeout(1) in a process group of its own, and one
# still running after DSV41_TEST_TIMEOUT seconds (default 1800, several times the longest test's
# usual time on a busy 2-core machine) is ended, with everything it started, and counted as a
# failure under its name. Ctrl-C or SIGTERM ends every running test's group the same way.
lanes=${DSV41_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
limit=${DSV41_TEST_TIMEOUT:-1800}
case $limit in '' | *[!0-9]* | 0) echo "run.sh: DSV41_TEST_TIMEOUT must be a positive number of seconds, not '$limit'"; exit 2 ;; esac
logs=$(mktemp -d) || exit 1
trap 'rm -rf "$logs"' EXIT
# a test's process group is its timeout's pid (timeout(1) makes one unless --foreground)
end_all() { for f in "$logs"/*.pid; do [ -f "$f" ] && kill -TERM -- "-$(cat "$f")" 2>/dev/null; done; exit 130; }
trap end_all INT TERM
passed=0; failed=0
tally() { # $1: a program's output; adds its closing line's counts
    line=$(printf '%s\n' "$1" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -z "$line" ]; then failed=$((failed + 1)); echo "no summary line: counted as one failure"; return; fi
    passed=$((passed + ${line%% passed*})); f=${line#*passed, }; failed=$((failed + ${f%% failed*}))
}
tests=("$@")
declare -A index_of # a running test's pid -> its index in tests
report() { # $1: the index of a test that ended
    local t=${tests[$1]} out rc secs
    out=$(cat "$logs/$1.out"); read -r rc secs <"$logs/$1.rc"
    echo "== $t"
    printf '%s\n' "$out"
    echo "-- $t: $secs s" # where CI's minutes go
    if [ "$rc" -eq 124 ] || { [ "$rc" -eq 137 ] && [ "$secs" -ge "$limit" ]; }; then
        echo "FAIL: $t ran past $limit s (DSV41_TEST_TIMEOUT) and was ended: counted as one failure"
        failed=$((failed + 1))
        return
    fi
    tally "$out"
    [ "$rc" -ne 0 ] && [ "$(printf '%s\n' "$out" | grep -cE '^[0-9]+ passed, 0 failed$')" -gt 0 ] && failed=$((failed + 1))
}
reap() { # waits for one running test and reports it
    local pid
    wait -n -p pid
    report "${index_of[$pid]}"
    unset "index_of[$pid]"
}
for i in "${!tests[@]}"; do
    while [ ${#index_of[@]} -ge "$lanes" ]; do reap; done
    (
        t0=$(date +%s)
        # TERM at the limit, KILL 10 s later for a test that ignores it
        timeout -k 10 "$limit" "${tests[$i]}" </dev/null >"$logs/$i.out" 2>&1 &
        echo $! >"$logs/$i.pid"
        wait $!; rc=$?
        rm -f "$logs/$i.pid"
        echo "$rc $(($(date +%s) - t0))" >"$logs/$i.rc"
    ) &
    index_of[$!]=$i
done
while [ ${#index_of[@]} -gt 0 ]; do reap; done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
