#!/bin/sh
# install.sh - `make install` into a fresh folder and what a user then does with it: build the
# example with pkg-config against the shared library, link the static library into a program
# that has its own linear() and json_free(), load the Python module from the installed
# library; every one must give the ids `dsv41 run` gives. Then only dsv41_ names are exported,
# and `make uninstall` removes what was installed. Prints "N passed, N failed".
. "$(dirname "$0")/lib.sh"
# packaging and the Python module are the normal build's: a sanitizer build (make sanitize) has no
# runtime a plain python3 or cc could load, so there is nothing of its own to test here
if [ "$dsv41" != ./dsv41 ]; then echo "not run on a sanitizer build"; finish; exit; fi
p="$tmp/prefix"
want=$(./dsv41 run --ids 2,17,47 -n 16 2>/dev/null)
MAKEFLAGS= make -s install PREFIX="$p" >"$tmp/log" 2>&1 || { bad "make install: $(tail -n 3 "$tmp/log")"; finish; exit 1; }
for f in bin/dsv41 lib/libdsv41.a lib/libdsv41.so lib/libdsv41.so.0 include/dsv41.h include/dsv41_dev.h include/dsv41_dist.h lib/pkgconfig/dsv41.pc share/man/man1/dsv41.1; do
    [ -e "$p/$f" ] && ok || bad "not installed: $f"
done
ver=$(sed -n 's/^#define DSV41_VERSION "\(.*\)"/\1/p' include/dsv41.h)
[ -f "$p/lib/libdsv41.so.$ver" ] && readelf -d "$p/lib/libdsv41.so" | grep -q "SONAME.*\[libdsv41.so.${ver%%.*}\]" && ok ||
    bad "the shared library's version and soname"
grep -q "\"dsv41 $ver\"" "$p/share/man/man1/dsv41.1" && ok || bad "the man page names another version"
[ "$("$p/bin/dsv41" run --ids 2,17,47 -n 16 2>/dev/null)" = "$want" ] && ok || bad "the installed program"

# only the public names leave the shared library, and only they are global in the static one
others=$(nm -D --defined-only "$p/lib/libdsv41.so" | awk '{print $3}' | grep -v '^dsv41_')
[ -z "$others" ] && [ "$(nm -D --defined-only "$p/lib/libdsv41.so" | grep -c ' dsv41_')" -gt 40 ] && ok ||
    bad "the shared library exports more than dsv41_ names: $(echo $others | head -c 300)"
others=$(nm -g --defined-only "$p/lib/libdsv41.a" | awk 'NF == 3 {print $3}' | grep -v '^dsv41_')
[ -z "$others" ] && ok || bad "the static library has global non-dsv41_ names: $(echo $others | head -c 300)"

# the example, built the way its comment says, against the shared library
export PKG_CONFIG_PATH="$p/lib/pkgconfig"
cc examples/generate.c $(pkg-config --cflags --libs dsv41) -o "$tmp/generate" 2>"$tmp/err" &&
    [ "$(LD_LIBRARY_PATH="$p/lib" "$tmp/generate" | head -n 1)" = "$want" ] && ok || bad "pkg-config build: $(cat "$tmp/err")"

# a program with names the library uses inside links against the static library
cat >"$tmp/collide.c" <<'C'
#include <stdio.h>
#include "dsv41.h"
int linear(int x) { return 2 * x; }            /* the library has its own linear() */
void json_free(void *p) { (void)p; }           /* ... and json_free() */
int main(void) {
    dsv41_model *m = dsv41_model_builtin();
    dsv41_session *s = dsv41_session_new(m);
    float logits[64];
    int32_t ids[3] = {2, 17, 47};
    if (!m || !s || dsv41_session_forward(s, ids, 3, logits, NULL)) return 1;
    for (int i = 0; i < 16; i++) {
        int32_t best = 0;
        for (int32_t v = 1; v < dsv41_model_vocab_size(m); v++) if (logits[v] > logits[best]) best = v;
        printf("%s%d", i ? "," : "", best);
        if (i < 15 && dsv41_session_forward(s, &best, 1, logits, NULL)) return 1;
    }
    printf("\n");
    json_free(NULL);
    dsv41_session_free(s);
    dsv41_model_free(m);
    return linear(0);
}
C
cc -I"$p/include" "$tmp/collide.c" "$p/lib/libdsv41.a" $(pkg-config --libs-only-l --static dsv41 | sed 's/-ldsv41//') \
    -o "$tmp/collide" 2>"$tmp/err" && [ "$("$tmp/collide")" = "$want" ] && ok || bad "static link with linear() and json_free(): $(head -c 400 "$tmp/err")"
cc "$tmp/collide.c" $(pkg-config --cflags --libs dsv41) -o "$tmp/collide_so" 2>"$tmp/err" &&
    [ "$(LD_LIBRARY_PATH="$p/lib" "$tmp/collide_so")" = "$want" ] && ok || bad "shared link with linear() and json_free()"

# the Python module from the installed library
got=$(DSV41_LIB="$p/lib/libdsv41.so" PYTHONPATH=python /usr/bin/python3 -c \
      'import dsv41; print(",".join(map(str, dsv41.Model().generate([2, 17, 47], 16))))' 2>&1)
[ "$got" = "$want" ] && ok || bad "python over the installed library: $got"

# DESTDIR stages under a root; uninstall leaves no file behind
MAKEFLAGS= make -s install PREFIX=/usr DESTDIR="$tmp/stage" >/dev/null 2>&1 && [ -f "$tmp/stage/usr/lib/libdsv41.a" ] && ok || bad "DESTDIR"
make -s uninstall PREFIX="$p" >/dev/null 2>&1 && [ -z "$(find "$p" ! -type d)" ] && ok || bad "uninstall left: $(find "$p" ! -type d)"
finish
