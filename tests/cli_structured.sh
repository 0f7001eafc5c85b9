#!/bin/sh
# cli_structured.sh - `dsv41 run --json-schema / --grammar` on the test model with the real V4.1
# vocabulary (tiny_text.json's geometry, synthesized weights, three DSpark stages): the labels of
# tests/data/schema_cases.json checked by python3-jsonschema (the independent reference
# test_grammar relies on); replies sampled at temperature 1 over many seeds under bounded schemas,
# each complete and valid by python3-jsonschema; --draft gives the same replies; a grammar file;
# thinking mode; bad files, schemas and grammars as one-line errors. Prints the tokens a second
# with and without a schema (for reading, not a verdict). Prints "N passed, N failed".
# DSV41_TEST_SEEDS (6 by default) caps the seeds a case is sampled over: make sanitize asks for
# one, where every schema, grammar and --draft path still runs once and a sanitized run of the
# real vocabulary's masks takes seconds.
. "$(dirname "$0")/lib.sh"
data=${DSV41_SHARED:-../shared}
for f in "$data/models/tiny_text.json" "$data/tokenizer/deepseek-v3/tokenizer.json" "$data/tokenizer/v41_added_tokens.json"; do
    if [ ! -f "$f" ]; then bad "shared data not found: $f"; finish; exit 1; fi
done

# the labels: valid and outside documents validate, invalid ones do not
python3 - tests/data/schema_cases.json <<'PY' && ok || bad "the schema table's labels (python3-jsonschema)"
import json, sys, jsonschema
fc = jsonschema.FormatChecker()
wrong = 0
for c in json.load(open(sys.argv[1], encoding="utf-8"))["cases"]:
    v = jsonschema.validators.validator_for(c["schema"])(c["schema"], format_checker=fc)
    for doc in c["valid"] + c.get("outside", []):
        if not v.is_valid(json.loads(doc)): print("labelled valid, is not:", doc); wrong += 1
    for doc in c["invalid"]:
        try: value = json.loads(doc)
        except ValueError: continue
        if v.is_valid(value): print("labelled invalid, is valid:", doc); wrong += 1
sys.exit(wrong > 0)
PY

# the model: tiny_text.json with the stage keys of tiny_dspark.json, the V4.1 tokenizer
m=$tmp/model
python3 - "$data" models/tiny_dspark.json "$tmp/cfg.json" <<'PY' &&
import json, sys
data, stages = sys.argv[1], json.load(open(sys.argv[2]))
cfg = json.load(open(data + "/models/tiny_text.json"))
cfg.update({k: v for k, v in stages.items() if k == "n_mtp_layers" or k.startswith("dspark_")})
json.dump(cfg, open(sys.argv[3], "w"))
PY
python3 tools/v41_tokenizer.py "$data/tokenizer" "$tmp/tokenizer.json" &&
"$dsv41" synth --config "$tmp/cfg.json" -o "$m" >/dev/null && cp "$tmp/tokenizer.json" "$m/" && ok || { bad "build the test model"; finish; exit 1; }

# bounded schemas: every reply ends by itself (well before -n) and validates
cat >"$tmp/s1.json" <<'J'
{"type": "object", "properties": {"name": {"type": "string", "maxLength": 10}, "age": {"type": "integer", "minimum": 0, "maximum": 130},
 "tags": {"type": "array", "items": {"enum": ["a", "b", "c"]}, "maxItems": 3}, "ok": {"type": "boolean"}},
 "required": ["name", "age"], "additionalProperties": false}
J
cat >"$tmp/s2.json" <<'J'
{"type": "array", "items": {"anyOf": [{"type": "number", "minimum": -5, "maximum": 5}, {"type": "null"},
 {"type": "string", "format": "date"}]}, "minItems": 1, "maxItems": 4}
J
cat >"$tmp/s3.json" <<'J'
{"$defs": {"t": {"type": "object", "properties": {"v": {"type": "integer", "minimum": 1, "maximum": 9},
 "kids": {"type": "array", "items": {"$ref": "#/$defs/t"}, "maxItems": 1}}, "required": ["v", "kids"], "additionalProperties": false}},
 "type": "object", "properties": {"root": {"$ref": "#/$defs/t"}, "id": {"type": "string", "format": "uuid"},
 "code": {"type": "string", "pattern": "^[A-Z]{2}-[0-9]{2,4}$"}}, "required": ["root", "id", "code"], "additionalProperties": false}
J
cat >"$tmp/s4.json" <<'J'
{"type": "object", "properties": {"k": {"const": "x"}, "n": {"type": ["integer", "null"], "maximum": 99, "minimum": -99},
 "e": {"oneOf": [{"type": "boolean"}, {"enum": [1.5, "two", [3]]}]}}, "required": ["k", "n", "e"], "additionalProperties": false}
J
seeds=${DSV41_TEST_SEEDS:-6}
upto() { seq 1 $(($1 < seeds ? $1 : seeds)); } # upto N: the seeds 1..N, at most $seeds of them
for s in 1 2 3 4; do
    for seed in $(upto 6); do
        "$dsv41" run -m "$m" -p "Reply in JSON" --json-schema "$tmp/s$s.json" --temp 1 -s $seed -n 600 -t 1 \
            >"$tmp/out.$s.$seed" 2>"$tmp/err.$s.$seed" || bad "schema $s seed $seed: $(head -c 300 "$tmp/err.$s.$seed")"
    done
done
python3 - "$tmp" $((4 * $(upto 6 | wc -l))) <<'PY' && ok || bad "replies under the schemas (python3-jsonschema)"
import glob, json, os, sys, jsonschema
tmp, want, wrong, n = sys.argv[1], int(sys.argv[2]), 0, 0
fc = jsonschema.FormatChecker()
for path in sorted(glob.glob(os.path.join(tmp, "out.*"))):
    s = path.split(".")[-2]
    schema = json.load(open(os.path.join(tmp, "s%s.json" % s)))
    text = open(path, encoding="utf-8").read()
    text = text[:-1] if text.endswith("\n") else text
    n += 1
    try:
        jsonschema.validate(json.loads(text), schema, format_checker=fc)
    except Exception as e:
        print("%s: %r: %s" % (os.path.basename(path), text[:200], str(e).splitlines()[0])); wrong += 1
print("%d replies validated, %d not" % (n - wrong, wrong))
sys.exit(wrong > 0 or n < want)
PY

# --draft: the same replies, and drafts were verified
for seed in $(upto 3); do
    "$dsv41" run -m "$m" -p "Reply in JSON" --json-schema "$tmp/s1.json" --temp 1 -s $seed -n 600 -t 1 --draft 3 \
        >"$tmp/draft.$seed" 2>"$tmp/derr.$seed"
    cmp -s "$tmp/draft.$seed" "$tmp/out.1.$seed" && ok || bad "--draft 3, seed $seed: '$(cat "$tmp/draft.$seed")' against '$(cat "$tmp/out.1.$seed")'"
done
# (greedy: no seed changes the reply, so once)
a=$("$dsv41" run -m "$m" -p "Reply in JSON" --json-schema "$tmp/s1.json" --temp 0 -n 300 -t 1 2>/dev/null)
b=$("$dsv41" run -m "$m" -p "Reply in JSON" --json-schema "$tmp/s1.json" --temp 0 -n 300 -t 1 --draft 3 --draft-p-min 0 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "greedy with --draft: '$b' against '$a'"

# a grammar that allows most drafts, so that verifies keep some: the same replies, greedy and sampled
printf 'root ::= [^\\x00]{0,400}\n' >"$tmp/loose.gbnf"
for t in 0 0.8; do
    a=$("$dsv41" run -m "$m" -p "Tell a story" --grammar "$tmp/loose.gbnf" --temp $t -s 9 -n 120 -t 1 2>/dev/null)
    b=$("$dsv41" run -m "$m" -p "Tell a story" --grammar "$tmp/loose.gbnf" --temp $t -s 9 -n 120 -t 1 --draft 4 --draft-p-min 0 2>/dev/null)
    [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "a loose grammar with --draft at temperature $t: '$b' against '$a'"
done

# a grammar file; thinking mode (the grammar applies after </think>)
printf 'root ::= ("yes" | "no") "!"{1,3}\n' >"$tmp/g.gbnf"
for seed in $(upto 4); do
    out=$("$dsv41" run -m "$m" -p "yes or no?" --grammar "$tmp/g.gbnf" --temp 1 -s $seed -n 50 -t 1 2>"$tmp/err")
    echo "$out" | grep -qxE '(yes|no)!{1,3}' && ok || bad "--grammar: '$out' $(head -c 200 "$tmp/err")"
done
"$dsv41" run -m "$m" -p "Reply in JSON" --json-schema "$tmp/s1.json" --think high --temp 1 -s 3 -n 40 -t 1 >"$tmp/think" 2>"$tmp/err" &&
    ok || bad "--think with a schema: $(head -c 300 "$tmp/err")"

# bad input: one line each
printf '{"type": "object", "properties": {"a": {"type": "string", "pattern": "^(?=x)$"}}}' >"$tmp/bad.json"
printf 'root ::= "a" | b\n' >"$tmp/bad.gbnf"
printf '{"type": ' >"$tmp/broken.json"
expect_error "a missing schema file" "$dsv41" run -m "$m" -p hi -s 1 --json-schema "$tmp/none.json"
expect_error "a schema outside the subset" "$dsv41" run -m "$m" -p hi -s 1 --json-schema "$tmp/bad.json"
grep -q "lookaround.*/properties/a/pattern" "$tmp/err" && ok || bad "the schema error names the pointer: $(cat "$tmp/err")"
expect_error "a schema that is not JSON" "$dsv41" run -m "$m" -p hi -s 1 --json-schema "$tmp/broken.json"
expect_error "a bad grammar" "$dsv41" run -m "$m" -p hi -s 1 --grammar "$tmp/bad.gbnf"
grep -q "1:16: no rule defines b" "$tmp/err" && ok || bad "the grammar error names the place: $(cat "$tmp/err")"
expect_error "both --grammar and --json-schema" "$dsv41" run -m "$m" -p hi --grammar "$tmp/g.gbnf" --json-schema "$tmp/s1.json"
expect_error "--grammar with --ids" "$dsv41" run --ids 1,2 --grammar "$tmp/g.gbnf"

# the cost, for reading: the same seed with and without a schema (any JSON, so it runs to -n)
# (a sanitizer build's speed says nothing: there only the schema's run, a reply to -n under an
# open schema)
printf '{"type": "array"}' >"$tmp/any.json"
kinds="plain schema"
[ "$dsv41" = ./dsv41 ] || kinds=schema
for kind in $kinds; do
    if [ $kind = plain ]; then set --; else set -- --json-schema "$tmp/any.json"; fi
    "$dsv41" run -m "$m" -p "Reply in JSON" --temp 1 -s 5 -n 200 -t 1 "$@" >/dev/null 2>"$tmp/speed.$kind"
    echo "$kind: $(grep -o 'generated: .*' "$tmp/speed.$kind")"
done
finish
