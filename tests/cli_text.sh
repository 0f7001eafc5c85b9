#!/bin/sh
# cli_text.sh - `dsv41 tokenize` and `dsv41 render` as a script drives them: every case of the
# shared vectors.json and chat_vectors.json goes through the commands (case files are written
# to a temporary folder at run time; the shared data is never copied into the repository),
# then bad input, each of which must give one `dsv41: ...` line and a non-zero exit, never a
# crash. Prints "N passed, N failed" and exits non-zero on any failure.
. "$(dirname "$0")/lib.sh"
data=${DSV41_SHARED:-../shared}/tokenizer
tok=$data/deepseek-v3/tokenizer.json
added=$data/v41_added_tokens.json

for f in "$tok" "$added" "$data/vectors.json" "$data/chat_vectors.json"; do
    if [ ! -f "$f" ]; then bad "shared data not found: $f"; echo "$passed passed, $failed failed"; exit 1; fi
done

# one folder per case: tok/NNN (text, ids, markers special / v3) and chat/NNN (case.json and
# its expectations: exact, endswith, contains.K, not_contains.K or error)
python3 - "$data" "$tmp" <<'PY' || bad "could not write the case files"
import json, os, sys
src, dst = sys.argv[1], sys.argv[2]

def put(folder, name, text):
    with open(os.path.join(folder, name), "w", encoding="utf-8", newline="") as f:
        f.write(text)

for i, v in enumerate(json.load(open(os.path.join(src, "vectors.json"), encoding="utf-8"))):
    d = os.path.join(dst, "tok", "%03d" % i)
    os.makedirs(d)
    put(d, "text", v["text"])
    put(d, "ids", json.dumps(v["ids"], separators=(",", ":")) + "\n")
    if v.get("parse_special"): put(d, "special", "")
    if str(v.get("tokenizer", "")).startswith("v3"): put(d, "v3", "")
for i, c in enumerate(json.load(open(os.path.join(src, "chat_vectors.json"), encoding="utf-8"))):
    d = os.path.join(dst, "chat", "%03d" % i)
    os.makedirs(d)
    put(d, "case.json", json.dumps({k: c[k] for k in ("messages", "tools", "options") if k in c}, ensure_ascii=False))
    e = c["expect"]
    if e.get("error"): put(d, "error", "")
    for key in ("exact", "endswith"):
        if key in e: put(d, key, e[key])
    for key in ("contains", "not_contains"):
        for k, s in enumerate(e.get(key, [])): put(d, "%s.%d" % (key, k), s)
PY

for d in "$tmp"/tok/*; do
    [ -d "$d" ] || continue
    text=$(cat "$d/text"; printf x); text=${text%x}
    set -- --tokenizer "$tok"
    [ -f "$d/v3" ] || set -- "$@" --added "$added"
    [ -f "$d/special" ] && set -- "$@" --special
    "$dsv41" tokenize "$@" -- "$text" >"$d/out" 2>"$d/err"; rc=$?
    if [ $rc -eq 0 ] && cmp -s "$d/out" "$d/ids"; then ok; else bad "tokenize vector $(basename "$d"): rc=$rc $(cat "$d/out" "$d/err" | head -c 200)"; fi
done

# has FILE PATTERN_FILE: 1 when the text of PATTERN_FILE occurs in FILE
has() {
    text=$(cat "$1"; printf x); pat=$(cat "$2"; printf x)
    case ${text%x} in *"${pat%x}"*) return 0 ;; esac
    return 1
}

for d in "$tmp"/chat/*; do
    [ -d "$d" ] || continue
    name="render chat vector $(basename "$d")"
    if [ -f "$d/error" ]; then expect_error "$name" "$dsv41" render --chat "$d/case.json"; continue; fi
    "$dsv41" render --chat "$d/case.json" >"$d/out" 2>"$d/err"; rc=$?
    fine=$((rc == 0))
    if [ -f "$d/exact" ] && ! cmp -s "$d/out" "$d/exact"; then fine=0; fi
    if [ -f "$d/endswith" ]; then
        n=$(($(wc -c <"$d/endswith")))
        tail -c "$n" "$d/out" | cmp -s - "$d/endswith" || fine=0
    fi
    for f in "$d"/contains.*; do [ -f "$f" ] && ! has "$d/out" "$f" && fine=0; done
    for f in "$d"/not_contains.*; do [ -f "$f" ] && has "$d/out" "$f" && fine=0; done
    if [ $fine -eq 1 ]; then ok; else bad "$name: rc=$rc $(head -c 200 "$d/err")"; fi
done

# expect_out NAME WANT CMD...: the command succeeds and prints exactly WANT
expect_out() {
    name=$1; want=$2; shift 2
    got=$("$@" 2>&1); rc=$?
    if [ $rc -eq 0 ] && [ "$got" = "$want" ]; then ok; else bad "$name: rc=$rc, '$got'"; fi
}

# special parsing is off unless asked for
expect_out "tokenize without --special" "[30,28217,6756,28217,32,23166]" "$dsv41" tokenize --tokenizer "$tok" "<｜User｜>Hi"
expect_out "tokenize with --special" "[128803,23166]" "$dsv41" tokenize --tokenizer "$tok" --special "<｜User｜>Hi"
expect_out "tokenize of a text starting with -" "[15]" "$dsv41" tokenize --tokenizer "$tok" -- "-"

# bad input
printf '{"model": {' >"$tmp/truncated.json"
printf '{"messages": [{"role": "narrator", "content": "x"}]}' >"$tmp/badrole.json"
printf '{"messages": [' >"$tmp/badjson.json"
expect_error "tokenize: unknown flag" "$dsv41" tokenize --tokenizer "$tok" --bogus x
expect_error "tokenize: no --tokenizer" "$dsv41" tokenize x
expect_error "tokenize: two texts" "$dsv41" tokenize --tokenizer "$tok" x y
expect_error "tokenize: missing tokenizer file" "$dsv41" tokenize --tokenizer "$tmp/none.json" x
expect_error "tokenize: truncated tokenizer file" "$dsv41" tokenize --tokenizer "$tmp/truncated.json" x
expect_error "tokenize: missing added-token table" "$dsv41" tokenize --tokenizer "$tok" --added "$tmp/none.json" x
expect_error "tokenize: invalid UTF-8" "$dsv41" tokenize --tokenizer "$tok" "$(printf 'a\377b')"
if grep -q 'byte offset 1' "$tmp/err"; then ok; else bad "invalid UTF-8: the offset is not named: $(cat "$tmp/err")"; fi
expect_error "tokenize: lone surrogate" "$dsv41" tokenize --tokenizer "$tok" "$(printf 'a\355\240\200b')"
expect_error "render: unknown flag" "$dsv41" render --bogus "$tmp/badrole.json"
expect_error "render: no file" "$dsv41" render
expect_error "render: missing file" "$dsv41" render --chat "$tmp/none.json"
expect_error "render: malformed JSON" "$dsv41" render --chat "$tmp/badjson.json"
expect_error "render: invalid case" "$dsv41" render --chat "$tmp/badrole.json"

finish
