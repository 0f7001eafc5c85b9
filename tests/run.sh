#!/bin/sh
# run.sh - runs every test program given and the CLI tests, then prints the total as one
# "N passed, N failed" line. Exits non-zero if anything failed or a program crashed.
passed=0; failed=0
tally() { # $1: a program's output; adds its closing line's counts
    line=$(printf '%s\n' "$1" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    if [ -z "$line" ]; then failed=$((failed + 1)); echo "no summary line: counted as one failure"; return; fi
    passed=$((passed + ${line%% passed*})); f=${line#*passed, }; failed=$((failed + ${f%% failed*}))
}
for t in "$@" tests/cli.sh tests/cli_text.sh tests/cli_chat.sh tests/cli_input.sh tests/cli_guard.sh tests/cli_skeleton.sh tests/serve.sh tests/serve_slots.sh tests/neon.sh tests/load.sh tests/python.sh tests/install.sh; do
    echo "== $t"
    t0=$(date +%s)
    out=$("$t" 2>&1); rc=$?
    printf '%s\n' "$out"
    echo "-- $t: $(($(date +%s) - t0)) s" # where CI's minutes go
    tally "$out"
    [ $rc -ne 0 ] && [ "$(printf '%s\n' "$out" | grep -cE '^[0-9]+ passed, 0 failed$')" -gt 0 ] && failed=$((failed + 1))
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
