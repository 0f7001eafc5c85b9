#!/bin/sh
# neon.sh - the NEON kernel set on an x86 machine: the kernel tests and the whole-forward
# comparison across kernel sets, cross-built for arm64 (make build/aarch64/test_*) and run under
# qemu-user, where the sets are scalar and neon. Without the cross compiler or qemu-aarch64 it
# says so and counts nothing (.ci/run installs both). On an arm64 machine the ordinary tests
# already run the NEON set. Prints "N passed, N failed".
. "$(dirname "$0")/lib.sh"
# a sanitizer build (make sanitize) changes nothing in the arm64 cross build: it runs once, with the normal suite
if [ "$dsv41" != ./dsv41 ]; then echo "neon: run with the normal build only"; finish; exit; fi
if [ "$(uname -m)" = aarch64 ]; then echo "neon: this is arm64, the ordinary tests run it"; finish; exit; fi
if ! command -v aarch64-linux-gnu-gcc >/dev/null || ! command -v qemu-aarch64 >/dev/null ||
    [ ! -d /usr/aarch64-linux-gnu/lib ]; then
    echo "neon: not run (needs gcc-aarch64-linux-gnu, libc6-dev-arm64-cross and qemu-user)"
    finish; exit
fi
for t in test_kernels test_kernel_sets; do
    if ! MAKEFLAGS= make -s build/aarch64/$t >"$tmp/make" 2>&1; then bad "cross-build $t: $(tail -n 3 "$tmp/make")"; continue; fi
    out=$(qemu-aarch64 -L /usr/aarch64-linux-gnu build/aarch64/$t 2>&1); rc=$?
    printf '%s\n' "$out" | grep -E '^(FAIL|kernel set|best)'
    line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$' | tail -n 1)
    printf '%s\n' "$out" | grep -q '^kernel set neon$\|^best: neon$' || [ $t != test_kernels ] || bad "$t under qemu: the neon set did not run"
    if [ -z "$line" ] || [ $rc -ne 0 ]; then bad "$t under qemu: rc=$rc, '$line'"; continue; fi
    passed=$((passed + ${line%% passed*})); f=${line#*passed, }; failed=$((failed + ${f%% failed*}))
done
finish
