#!/bin/sh
# layers.sh - the layer check (tools/layers.sh, `make layers`) passes on the library's own
# objects and fails when they break the rule: copies of the objects plus one small object
# that calls upward, or two that call each other, or one in no layer's folder, in a temporary
# folder (the tree is never touched). Prints "N passed, N failed".
. "$(dirname "$0")/lib.sh"
# the objects of the build under test: ./dsv41 is build/'s, a sanitizer's program sits in its build
build=$(dirname "$dsv41"); [ "$build" = . ] && build=build
layers=$(ls -d src/*/ | xargs -n 1 basename) # the library's folders
if ! ls "$build"/base/*.o >/dev/null 2>&1; then bad "no objects under $build"; finish; exit; fi
CC=${CC:-cc}

# case NAME WANT (pass or a line the failure prints) DIR: runs the check on DIR's objects
case_() {
    out=$(tools/layers.sh "$3"/*/*.o 2>&1); rc=$?
    if [ "$2" = pass ]; then
        if [ $rc -eq 0 ]; then ok; else bad "$1: rc=$rc: $(printf '%s\n' "$out" | head -n 3)"; fi
    elif [ $rc -ne 0 ] && printf '%s\n' "$out" | grep -qF "$2"; then ok
    else bad "$1: rc=$rc, wanted a failure naming '$2': $(printf '%s\n' "$out" | head -n 3)"; fi
}

copy() { # copy DIR: the build's library objects, each layer's in a folder of that name
    for l in $layers; do mkdir -p "$1/$l" && cp "$build/$l/"*.o "$1/$l/"; done
}

copy "$tmp/lib"
case_ "the library's objects" pass "$tmp/lib"

# an object outside the layers' folders: a source file put in src/ itself
copy "$tmp/flat"
mkdir -p "$tmp/flat/src" && cp "$build/base/error.o" "$tmp/flat/src/stray.o"
case_ "an object in no layer" "in no layer's folder" "$tmp/flat"

# base calls the golden check, two layers above it
copy "$tmp/up"
printf 'int dsv41_golden_check();\nint up_call(void) { return dsv41_golden_check(0, 0, 0, 0, 0); }\n' >"$tmp/up.c"
$CC -c "$tmp/up.c" -o "$tmp/up/base/upward.o" && \
    case_ "an upward call" "upward: base/upward (base) uses tools/golden_check (tools): dsv41_golden_check" "$tmp/up"

# text may use base alone: the tokenizer calling a model op is upward too, though model is not above text
copy "$tmp/side"
printf 'void rms_norm();\nvoid side_call(void) { rms_norm(0, 0, 0, 0, 0.0f, 0); }\n' >"$tmp/side.c"
$CC -c "$tmp/side.c" -o "$tmp/side/text/sideways.o" && \
    case_ "a use outside the table" "upward: text/sideways (text) uses model/rms (model): rms_norm" "$tmp/side"

# two modules of one layer that need each other
copy "$tmp/cycle"
printf 'int ping(int n);\nint pong(int n) { return n ? ping(n - 1) : 0; }\n' >"$tmp/pong.c"
printf 'int pong(int n);\nint ping(int n) { return n ? pong(n - 1) : 1; }\n' >"$tmp/ping.c"
$CC -c "$tmp/pong.c" -o "$tmp/cycle/model/pong.o" && $CC -c "$tmp/ping.c" -o "$tmp/cycle/model/ping.o" && \
    case_ "a cycle inside a layer" "cycle among the modules" "$tmp/cycle"
finish
