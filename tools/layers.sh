#!/bin/sh
# layers.sh OBJECT... - checks that the library's dependencies point one way, from its objects.
#
# A module is one object, .../LAYER/NAME.o, and its layer is its folder (src/LAYER/NAME.c).
# Module A uses module B when A's object refers to a global symbol that B's object defines
# (nm). Each layer may use the layers its line below names and itself, nothing else; and the
# modules' graph, with the edges inside a layer too, must have no cycle. Prints every upward
# use as "upward: A (LAYER) uses B (LAYER): SYMBOL" and any cycle, and exits 1 on either.
# Every object given must sit in a layer's folder: a source file outside them is no layer's.
#
# The table: a layer, then the layers it may use (src/README.md says why this order).
TABLE='
base
runtime  base
kernels  base runtime
model    base runtime kernels
text     base
io       base runtime kernels model text
lib      base runtime kernels model text io
tools    base runtime kernels model text io lib
'
[ $# -gt 0 ] || { echo "usage: layers.sh OBJECT..."; exit 2; }
NM=${NM:-nm}
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT

printf '%s\n' "$TABLE" | awk 'NF' >"$tmp/table"
# one nm for all the objects: "PATH:ADDRESS TYPE SYMBOL", and "PATH: U SYMBOL" for the uses
$NM -A -g --defined-only "$@" >"$tmp/nm.defs" 2>"$tmp/nm.err" && $NM -A -u "$@" >"$tmp/nm.uses" 2>>"$tmp/nm.err" ||
    { cat "$tmp/nm.err"; exit 1; }
# the module of an object path, or "" outside the table's folders
MODULE='function module(path,   n, p) {
    n = split(path, p, "/"); sub(/\.o$/, "", p[n])
    return (n > 1 && (p[n - 1] in layer)) ? p[n - 1] "/" p[n] : ""
}'
awk "$MODULE"' NR == FNR {layer[$1]; next}
     {split($0, f, ":"); m = module(f[1]); if (m != "") print $NF, m}' "$tmp/table" "$tmp/nm.defs" >"$tmp/defs"
awk "$MODULE"' NR == FNR {layer[$1]; next}
     {split($0, f, ":"); m = module(f[1]); if (m != "") print m, $NF}' "$tmp/table" "$tmp/nm.uses" >"$tmp/uses"
printf '%s\n' "$@" | awk "$MODULE"' NR == FNR {layer[$1]; next} module($0) == "" {print}' "$tmp/table" - >"$tmp/outside"
if [ -s "$tmp/outside" ]; then echo "in no layer's folder (src/LAYER/NAME.c, tools/layers.sh):"; cat "$tmp/outside"; exit 1; fi
n=$#

# module A, module B, symbol: for every use of a symbol another module defines
awk 'NR == FNR {def[$1] = $2; next} ($2 in def) && def[$2] != $1 {print $1, def[$2], $2}' \
    "$tmp/defs" "$tmp/uses" | sort -u >"$tmp/edges"

status=0
awk 'NR == FNR {for (i = 1; i <= NF; i++) may[$1 " " $i] = 1; next}
     {split($1, a, "/"); split($2, b, "/")
      if (!((a[1] " " b[1]) in may)) printf "upward: %s (%s) uses %s (%s): %s\n", $1, a[1], $2, b[1], $3}' \
    "$tmp/table" "$tmp/edges" >"$tmp/upward"
if [ -s "$tmp/upward" ]; then cat "$tmp/upward"; status=1; fi

# tsort names the modules of a cycle on stderr when there is one
awk '{print $2, $1}' "$tmp/edges" | sort -u | tsort >/dev/null 2>"$tmp/cycle"
if [ -s "$tmp/cycle" ]; then echo "cycle among the modules:"; sed 's/^tsort: //' "$tmp/cycle"; status=1; fi

[ $status -eq 0 ] && echo "layers: $n modules, $(awk '{print $1, $2}' "$tmp/edges" | sort -u | wc -l) uses, all downward, no cycle"
exit $status
