#!/bin/bash
# run.sh - runs every test program given and the CLI tests, DSV41_TEST_JOBS at a time (default:
# one per CPU), then prints the total as one "N passed, N failed" line. Exits non-zero if anything
# failed or a program crashed.
#
# The tests share nothing that would make running them side by side unsafe: each works in its own
# temporary folder, a server takes the port the kernel gives it, and a test's verdicts compare
# bits and texts, never times. Most of them wait on a child process, a server or qemu for much
# of their run, so two at a time on two CPUs took 60% of the time of one after another (2026-12-04).
# A test's output is printed whole when it ends, so the blocks never interleave.
lanes=${DSV41_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
logs=$(mktemp -d) || exit 1
trap 'rm -rf "$logs"' EXIT
passed=0; failed=0
tally() { # $1: a program's output; adds its closing line's counts
    line=$(printf '%s\n' "$1" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -z "$line" ]; then failed=$((failed + 1)); echo "no summary line: counted as one failure"; return; fi
    passed=$((passed + ${line%% passed*})); f=${line#*passed, }; failed=$((failed + ${f%% failed*}))
}
# the longest first (neon.sh runs under qemu on one CPU), so that the lanes finish together
tests=(tests/neon.sh tests/cli_skeleton.sh "$@" tests/cli.sh tests/cli_text.sh tests/cli_chat.sh tests/cli_input.sh
    tests/cli_guard.sh tests/serve.sh tests/serve_text.sh tests/serve_slots.sh tests/load.sh tests/python.sh tests/install.sh)
declare -A index_of # a running test's pid -> its index in tests
report() { # $1: the index of a test that ended
    local t=${tests[$1]} out rc secs
    out=$(cat "$logs/$1.out"); read -r rc secs <"$logs/$1.rc"
    echo "== $t"
    printf '%s\n' "$out"
    echo "-- $t: $secs s" # where CI's minutes go
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
        "${tests[$i]}" >"$logs/$i.out" 2>&1; rc=$?
        echo "$rc $(($(date +%s) - t0))" >"$logs/$i.rc"
    ) &
    index_of[$!]=$i
done
while [ ${#index_of[@]} -gt 0 ]; do reap; done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
