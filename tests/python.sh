#!/bin/sh
# python.sh - the Python module (python/dsv41.py) with Debian's python3 over the library just
# built, compared with the dsv41 program. Prints "N passed, N failed".
. "$(dirname "$0")/lib.sh"
# packaging and the Python module are the normal build's: a sanitizer build (make sanitize) has no
# runtime a plain python3 or cc could load, so there is nothing of its own to test here
if [ "$dsv41" != ./dsv41 ]; then echo "not run on a sanitizer build"; finish; exit; fi
PY=/usr/bin/python3
[ -x "$PY" ] || PY=python3
chat_model "$tmp/m" || bad "the test checkpoint"
out=$(DSV41_LIB=build/libdsv41.so PYTHONPATH=python "$PY" tests/test_python.py ./dsv41 "$tmp/m" 2>&1); rc=$?
printf '%s\n' "$out" | grep -v '^[0-9]* passed, [0-9]* failed$'
line=$(printf '%s\n' "$out" | grep -E '^[0-9]+ passed, [0-9]+ failed$')
if [ -n "$line" ]; then passed=$((passed + ${line%% passed*})); f=${line#*passed, }; failed=$((failed + ${f%% failed*})); fi
[ $rc -eq 0 ] && [ -n "$line" ] || bad "test_python.py: rc=$rc"
out=$(DSV41_LIB="$tmp/none.so" PYTHONPATH=python "$PY" -c 'import dsv41' 2>&1); rc=$?
[ $rc -ne 0 ] && printf '%s\n' "$out" | grep -q 'ImportError: dsv41: cannot load' && ok || bad "a missing DSV41_LIB: $out"
finish
