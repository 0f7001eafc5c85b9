#!/bin/sh
# run.sh SECONDS [HARNESS...] - runs each fuzz harness (all of build/fuzz/fuzz_* by default) for
# SECONDS, starting from the seeds (tests/fuzz/seeds.sh, rebuilt each run) and the corpus kept
# in build/fuzz/corpus/HARNESS from earlier runs. A crash, leak, sanitizer report, timeout or
# out-of-memory stops that harness and leaves its input in build/fuzz/crashes/; the closing
# line is "N passed, N failed" (one case per harness) and the exit status is non-zero on any.
cd "$(dirname "$0")/../.." || exit 1
secs=$1; shift
[ -n "$secs" ] || { echo "usage: tests/fuzz/run.sh SECONDS [HARNESS...]" >&2; exit 2; }
harnesses=${*:-$(ls build/fuzz/ | sed -n 's/^fuzz_\([a-z_]*\)$/\1/p')}
tests/fuzz/seeds.sh build/fuzz/seeds || { echo "could not build the seeds"; echo "0 passed, 1 failed"; exit 1; }
mkdir -p build/fuzz/crashes
passed=0; failed=0
# each harness runs on one CPU: DSV41_TEST_JOBS of them at a time (default: one per CPU), all for
# the same SECONDS, so a batch ends together
lanes=${DSV41_TEST_JOBS:-$(nproc 2>/dev/null || echo 1)}
fuzz() { # $1: a harness; leaves its log and exit status (0: no finding) in build/fuzz/
    mkdir -p "build/fuzz/corpus/$1"
    # rss: the largest seed model is small; a run needing more memory is a finding
    "build/fuzz/fuzz_$1" -max_total_time="$secs" -timeout=30 -rss_limit_mb=3072 -print_final_stats=1 \
        -artifact_prefix="build/fuzz/crashes/$1-" "build/fuzz/corpus/$1" "build/fuzz/seeds/$1" >"build/fuzz/$1.log" 2>&1
    echo $? >"build/fuzz/$1.rc"
}
set -- $harnesses
while [ $# -gt 0 ]; do
    batch=; n=0
    while [ $# -gt 0 ] && [ $n -lt "$lanes" ]; do batch="$batch $1"; n=$((n + 1)); shift; done
    for h in $batch; do fuzz "$h" & done
    wait
    for h in $batch; do
        log=build/fuzz/$h.log
        if [ "$(cat "build/fuzz/$h.rc")" = 0 ]; then
            passed=$((passed + 1))
            echo "fuzz $h: $(grep -E '^stat::number_of_executed_units' "$log" | sed 's/.*: *//') inputs in ${secs}s, no finding"
        else
            failed=$((failed + 1))
            echo "FAIL fuzz $h: $(grep -E 'ERROR|SUMMARY|runtime error' "$log" | head -n 3 | tr '\n' ' ')(log: $log)"
        fi
    done
done
echo "$passed passed, $failed failed"
[ "$failed" -eq 0 ]
