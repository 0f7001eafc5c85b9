#!/bin/sh
# cli.sh - the dsv41 program as a user drives it: the golden check, malformed goldens (each a
# one-line error and a non-zero exit, never a crash), and `run` on the built-in model.
# Prints "N passed, N failed" and exits non-zero on any failure.
. "$(dirname "$0")/lib.sh"
golden=${DSV41_GOLDEN:-${DSV41_SHARED:-../shared}/golden/ds41_tiny_golden.json}

if [ ! -f "$golden" ]; then bad "golden not found at $golden"; echo "$passed passed, $failed failed"; exit 1; fi

out=$("$dsv41" check "$golden"); rc=$?
last=$(printf '%s\n' "$out" | tail -n 1)
[ $rc -eq 0 ] && [ "$last" = "443 passed, 0 failed" ] && ok || bad "check on the golden: rc=$rc, '$last'"

# the fast kernels and the pool at 1 and several threads
for t in 1 2 3; do
    last=$("$dsv41" check "$golden" -t $t | tail -n 1)
    [ "$last" = "443 passed, 0 failed" ] && ok || bad "check on the golden at -t $t: '$last'"
done
for t in 0 257 x; do
    err=$("$dsv41" check "$golden" -t $t 2>&1 >/dev/null); rc=$?
    [ $rc -eq 2 ] && [ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] && ok || bad "check -t $t: rc=$rc, '$err'"
done

# every kernel set this CPU runs prints exactly the lines scalar prints; an unknown set or one
# this CPU cannot run is a one-line error, from the flag or from DSV41_KERNELS
sets=$($dsv41 kernels | tr -d '*')
case " $sets " in *" scalar "*) ok ;; *) bad "dsv41 kernels lists scalar: '$sets'" ;; esac
[ "$($dsv41 kernels | tr ' ' '\n' | grep -c '\*$')" -eq 1 ] && ok || bad "dsv41 kernels marks one default"
same_on_sets() { # $1: what, $2: how many lines to compare, then the command; those lines of its
    what=$1; n=$2; shift 2 # output under every set equal scalar's
    want=$("$@" --kernels scalar | head -n "$n")
    for k in $sets; do
        [ "$("$@" --kernels "$k" | head -n "$n")" = "$want" ] && ok || bad "$what: kernel set $k prints other lines than scalar"
    done
}
same_on_sets "check on the golden" 100000 $dsv41 check "$golden"
same_on_sets "run" 1 $dsv41 run --ids 2,17,47,5,9,33,21,2,8,13,40,1,7,19,3,11,60,25 -n 8
expect_error "check --kernels nonesuch" $dsv41 check "$golden" --kernels nonesuch
[ "$(uname -m)" = x86_64 ] && expect_error "run --kernels neon on x86" $dsv41 run --ids 2 -n 1 --kernels neon
DSV41_KERNELS=nonesuch expect_error "DSV41_KERNELS=nonesuch" $dsv41 run --ids 2 -n 1
DSV41_KERNELS=scalar $dsv41 run --ids 2 -n 1 >/dev/null 2>&1 && ok || bad "DSV41_KERNELS=scalar runs"

# goldens of another geometry, batch sizes and decode counts, written by the independent numpy
# reference; each input set was chosen robust by its order-sensitivity check (--require-robust)
PY=python3
for p in python3 /usr/bin/python3; do "$p" -c 'import numpy' 2>/dev/null && { PY=$p; break; }; done
if "$PY" -c 'import numpy' 2>/dev/null; then
    for spec in "alt 2 9 3 2313" "alt 1 9 3 90" "tiny 2 5 4 2733"; do
        set -- $spec
        "$PY" tests/ref/golden_gen.py -q --no-twin --out "$tmp/g.json" --geometry "$1" --batch "$2" --prefill "$3" \
            --decode "$4" --seed-ids "$5" >/dev/null 2>&1 || { bad "golden_gen $spec"; continue; }
        out=$("$dsv41" check "$tmp/g.json"); rc=$?
        last=$(printf '%s\n' "$out" | tail -n 1)
        [ $rc -eq 0 ] && printf '%s\n' "$last" | grep -qE '^[1-9][0-9]* passed, 0 failed$' && ok || bad "check on golden $spec: '$last'"
        same_on_sets "check on golden $spec" 100000 $dsv41 check "$tmp/g.json"
    done
else
    bad "python3 with numpy is needed for the reference goldens"
fi

# malformed goldens, each made from the real one
mk() { python3 - "$golden" "$tmp/$1.json" "$2" <<'PY'
import json, sys
src, dst, what = sys.argv[1], sys.argv[2], sys.argv[3]
g = json.load(open(src))
if what == "no_dim": del g["fixture"]["dim"]
elif what == "meta_shape": g["weights_meta"]["layers.1.attn.wq_a.weight"]["shape"] = [16, 65]
elif what == "meta_extra": g["weights_meta"]["layers.9.attn.wq_a.weight"] = g["weights_meta"]["layers.1.attn.wq_a.weight"]
elif what == "cap_shape": g["decode12"]["L2.sa_q"]["shape"] = [1, 1, 4, 31]
elif what == "cap_data": g["prefill12"]["L3.sa_o"]["data"].pop()
elif what == "no_regime": del g["decode13"]
elif what == "bad_ids": g["prefill12"]["input_ids"]["data"][0] = 999
elif what == "sample": g["decode13"]["L5.sa_o"]["data"][3] += 0.05
elif what == "ratio": g["fixture"]["compress_ratios"][1] = 2
json.dump(g, open(dst, "w"))
PY
}
for case in no_dim meta_shape meta_extra cap_shape cap_data no_regime bad_ids ratio; do
    mk $case $case && expect_error "golden $case" "$dsv41" check "$tmp/$case.json"
done
head -c 100000 "$golden" >"$tmp/truncated.json"
expect_error "truncated golden" "$dsv41" check "$tmp/truncated.json"
expect_error "missing golden" "$dsv41" check "$tmp/nonexistent.json"
echo '{"fixture": {}}' >"$tmp/notgolden.json"
expect_error "not a golden" "$dsv41" check "$tmp/notgolden.json"

mk sample sample
out=$("$dsv41" check "$tmp/sample.json"); rc=$?
[ $rc -eq 1 ] && printf '%s\n' "$out" | grep -q '^FAIL decode13 L5.sa_o: max error' &&
    [ "$(printf '%s\n' "$out" | tail -n 1)" = "442 passed, 1 failed" ] && ok || bad "a wrong golden sample is reported: rc=$rc"

# run on the built-in model: the ids alone on stdout, the timing line on stderr
out=$("$dsv41" run --ids 2,17,47 -n 16 2>"$tmp/err"); rc=$?
ids=$(printf '%s\n' "$out" | tr ',' '\n' | grep -cE '^[0-9]+$')
[ $rc -eq 0 ] && [ "$ids" -eq 16 ] && [ "$(printf '%s\n' "$out" | wc -l)" -eq 1 ] &&
    grep -qE '^prompt: 3 tokens, [0-9.]+ tok/s \| generated: 16 tokens, [0-9.]+ tok/s$' "$tmp/err" &&
    ok || bad "run: rc=$rc, output '$out', stderr '$(cat "$tmp/err")'"
again=$("$dsv41" run --ids 2,17,47 -n 16 2>/dev/null)
[ "$again" = "$out" ] && ok || bad "run is deterministic"
# stdout and stderr in one pipe (stdout fully buffered): the ids' line ends before the timings
both=$("$dsv41" run --ids 2,17,47 -n 16 2>&1 | head -n 2)
[ "$(printf '%s\n' "$both" | head -n 1)" = "$out" ] && ok || bad "run: the ids' line is not ended first: '$both'"
# greedy is the argmax: a temperature of 0 and the llama.cpp spellings give the same ids
same=$("$dsv41" run --ids 2,17,47 --n-predict 16 --temperature 0 -s 5 --threads 2 2>/dev/null)
[ "$same" = "$out" ] && ok || bad "llama.cpp spellings: '$same'"
# -n past the context stops at the context with a note
out=$("$dsv41" run --ids 2,17,47 -n 100 2>"$tmp/err"); rc=$?
[ $rc -eq 0 ] && [ "$(printf '%s\n' "$out" | tr ',' '\n' | grep -c .)" -eq 61 ] && grep -q '^note: stopping at the context of 64' "$tmp/err" &&
    ok || bad "run past the context: rc=$rc, $(cat "$tmp/err")"
out=$("$dsv41" run --ids 2,17,47 -n 100 -c 10 2>/dev/null)
[ "$(printf '%s\n' "$out" | tr ',' '\n' | grep -c .)" -eq 7 ] && ok || bad "run -c 10: '$out'"
# sampling flags work with --ids; a clock seed is printed
a=$("$dsv41" run --ids 2,17,47 -n 16 --temp 1 --seed 9 --top-k 20 --repeat-penalty 1.3 2>/dev/null)
b=$("$dsv41" run --ids 2,17,47 -n 16 --temp 1 --seed 9 --top-k 20 --repeat-penalty 1.3 2>/dev/null)
[ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "sampled run --ids with a seed repeats"
"$dsv41" run --ids 2,17,47 -n 2 --temp 1 2>&1 >/dev/null | grep -qE '^seed: [0-9]+$' && ok || bad "the clock seed is printed"
# every subcommand's --help exits 0 on stdout and shows defaults where it has them
for c in run chat serve check tokenize render convert synth inspect bench; do
    "$dsv41" $c --help >"$tmp/help" 2>"$tmp/err"; rc=$?
    [ $rc -eq 0 ] && [ ! -s "$tmp/err" ] && grep -q "^usage: dsv41 $c" "$tmp/help" && ok || bad "$c --help: rc=$rc"
done
for c in run chat serve synth bench check; do grep -q "default:" <<EOF2 && ok || bad "$c --help shows no default"
$("$dsv41" $c -h)
EOF2
done
"$dsv41" --help | grep -q '^usage: dsv41' && ok || bad "dsv41 --help"
"$dsv41" --version | grep -qE '^dsv41 [0-9]+\.[0-9]+\.[0-9]+$' && "$dsv41" --version | grep -q '^kernel sets: scalar' && ok || bad "--version"
# unknown flags and bad values: exit 2, one line
for args in "run --bogus" "run --ids 1 -n -1" "run --ids 1 --temp nan" "run --ids 1 --top-p 2" "run --ids 1 -n 99999999999" \
            "run --ids 1 --seed -3" "chat -m x --bogus" "synth --config" "bench -m" "inspect" "check" "run --ids 1 -t 0"; do
    "$dsv41" $args >/dev/null 2>"$tmp/err"; rc=$?
    [ $rc -eq 2 ] && [ "$(wc -l <"$tmp/err")" -eq 1 ] && ok || bad "dsv41 $args: rc=$rc, $(cat "$tmp/err")"
done
out=$("$dsv41" run --ids 2 -n 3 2>/dev/null); rc=$? # a one-token prefill has no compressed rows yet
[ $rc -eq 0 ] && printf '%s\n' "$out" | grep -qE '^[0-9]+,[0-9]+,[0-9]+$' && ok || bad "run of one prompt token: rc=$rc, '$out'"
python3 -c 'import json, sys; c = json.load(open("models/tiny.json")); c.update(n_heads=1 << 20, head_dim=4096); json.dump(c, sys.stdout)' >"$tmp/wide.json"
expect_error "a config whose n_heads*head_dim overflows" "$dsv41" synth --config "$tmp/wide.json" -o "$tmp/wide"
# DSpark keys that do not describe a drafter the release could build: each a one-line error
for bad in '"dspark_target_layer_ids": [4, 3]' '"dspark_target_layer_ids": [3, 6]' '"dspark_target_layer_ids": []' \
    '"dspark_noise_token_id": 64' '"dspark_markov_rank": 0' '"dspark_block_size": 65' '"dspark_n_activated_experts": 4' \
    '"compress_ratios": [0, 0, 2, 2, 1, 1, 0, 1, 0]' '"n_mtp_layers": 200'; do
    python3 -c 'import json, sys; c = json.load(open("models/tiny_dspark.json")); c.update(json.loads("{" + sys.argv[1] + "}"))
json.dump(c, sys.stdout)' "$bad" >"$tmp/dsbad.json"
    expect_error "synth of a DSpark config with $bad" "$dsv41" synth --config "$tmp/dsbad.json" -o "$tmp/dsbad"
done
expect_error "run with a bad id list" "$dsv41" run --ids 2,x
expect_error "run with an id outside the vocabulary" "$dsv41" run --ids 2,64 -n 1
# --ids @FILE and --ids - (stdin): the same prompt as inline, in any of the separators, past
# the size the system allows one argument (here padded with spaces to 200 KB)
want=$("$dsv41" run --ids 2,17,47,5,9 -n 6 2>/dev/null)
printf '[2, 17,\n47 5\t9]\n' >"$tmp/ids.json"
[ -n "$want" ] && [ "$("$dsv41" run --ids @"$tmp/ids.json" -n 6 2>/dev/null)" = "$want" ] && ok || bad "run --ids @FILE"
printf '2 17 47 5 9' | "$dsv41" run --ids - -n 6 2>/dev/null >"$tmp/out" && [ "$(cat "$tmp/out")" = "$want" ] && ok ||
    bad "run --ids -"
python3 -c 'import sys; sys.stdout.write("2," + " " * 200000 + "17,47,5,9\n")' >"$tmp/wide_ids"
[ "$("$dsv41" run --ids @"$tmp/wide_ids" -n 6 2>/dev/null)" = "$want" ] && ok || bad "run --ids @FILE of 200 KB"
# case|word the one-line message must name|the file's bytes (a printf format)
while IFS='|' read -r case word bytes; do
    printf "$bytes" >"$tmp/ids_case"
    expect_error "run --ids @FILE: $case" "$dsv41" run --ids @"$tmp/ids_case" -n 1
    grep -qF -- "$word" "$tmp/err" || bad "run --ids @FILE: $case: the message does not name '$word': $(cat "$tmp/err")"
done <<'IDS'
empty|no token ids|
only spaces|no token ids|  \n\n
empty brackets|no token ids|[ ]
a word|'x' (id 2)|2,x,3
a negative id|'-1'|2 -1
an id past int32|'99999999999'|99999999999
two commas|(id 2)|2,,3
a trailing comma|a comma after id 2|2,3,
an open bracket|closing ']'|[2,3
a NUL byte|NUL|2\0003
IDS
expect_error "run --ids @ a missing file" "$dsv41" run --ids @"$tmp/nonesuch" -n 1
grep -qF "nonesuch" "$tmp/err" || bad "the missing file is named: $(cat "$tmp/err")"
expect_error "run --ids @ a directory" "$dsv41" run --ids @"$tmp" -n 1
expect_error "run with an unknown flag" "$dsv41" run --bogus
expect_error "unknown command" "$dsv41" frobnicate

# checkpoints: convert, load back, and every way a checkpoint can be broken
"$dsv41" convert --golden "$golden" --dtype bf16 -o "$tmp/ck" && ok || bad "convert bf16"
out=$("$dsv41" check "$golden" -m "$tmp/ck" | tail -n 1)
[ "$out" = "443 passed, 0 failed" ] && ok || bad "check -m on the bf16 checkpoint: '$out'"
"$dsv41" inspect "$tmp/ck" >"$tmp/inspect" && grep -q 'one decoded token reads' "$tmp/inspect" &&
    grep -q 'candidate source' "$tmp/inspect" && ok || bad "inspect"
"$dsv41" convert --golden "$golden" --dtype fp8 -o "$tmp/ck8" && "$dsv41" run -m "$tmp/ck8" --ids 2,17,47 -n 4 >/dev/null 2>&1 &&
    ok || bad "an fp8 checkpoint converts and runs"
expect_error "convert over an existing directory" "$dsv41" convert --golden "$golden" --dtype bf16 -o "$tmp/ck"
expect_error "convert with a bad dtype" "$dsv41" convert --golden "$golden" --dtype fp16 -o "$tmp/ck16"
[ ! -e "$tmp/ck16" ] && [ -z "$(ls "$tmp" | grep tmp-)" ] && ok || bad "a failed convert leaves nothing behind"

# break a copy of the checkpoint in one way, then expect a one-line error naming file and tensor
broken() { # $1: case name; prints the directory
    rm -rf "$tmp/b_$1"; cp -r "$tmp/ck" "$tmp/b_$1"
    python3 - "$tmp/b_$1" "$1" <<'PY'
import json, os, struct, sys
d, what = sys.argv[1], sys.argv[2]
shard = os.path.join(d, "model-00001-of-00003.safetensors")
raw = open(shard, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
head = json.loads(raw[8:8 + n])
def rewrite(h):
    text = json.dumps(h).encode()
    text += b" " * (-len(text) % 8)
    open(shard, "wb").write(struct.pack("<Q", len(text)) + text + raw[8 + n:])
if what == "truncated": open(shard, "wb").write(raw[:len(raw) // 2])
elif what == "header_json": open(shard, "wb").write(raw[:8] + b"{not json" + raw[17:])
elif what == "offsets": head["layers.0.attn.wq_a.weight"]["data_offsets"][1] += 10 ** 9; rewrite(head)
elif what == "dtype": head["layers.0.attn.wq_a.weight"]["dtype"] = "F16"; rewrite(head)
elif what == "shape": head["layers.0.attn.wq_a.weight"]["shape"] = [32, 32]; rewrite(head)
elif what == "overflow":  # a shape whose byte count wraps 64 bits to exactly the data's size
    t = head["layers.0.attn.wq_a.weight"]
    size = t["data_offsets"][1] - t["data_offsets"][0]
    t["dtype"], t["shape"] = "BF16", [2 ** 62 + size // 4, 2]; rewrite(head)
elif what == "missing":
    del head["layers.0.attn.wq_a.weight"]; rewrite(head)
    idx = json.load(open(os.path.join(d, "model.safetensors.index.json")))
    del idx["weight_map"]["layers.0.attn.wq_a.weight"]
    json.dump(idx, open(os.path.join(d, "model.safetensors.index.json"), "w"))
elif what == "no_shard": os.remove(os.path.join(d, "model-00002-of-00003.safetensors"))
elif what == "flat":  # the inference/config.json form with ModelArgs names
    t = json.load(open(os.path.join(d, "config.json")))["text_config"]
    ren = {"hidden_size": "dim", "moe_intermediate_size": "moe_inter_dim", "num_hidden_layers": "n_layers",
           "num_attention_heads": "n_heads", "qk_rope_head_dim": "rope_head_dim", "rms_norm_eps": "norm_eps",
           "num_experts_per_tok": "n_activated_experts", "scoring_func": "score_func",
           "routed_scaling_factor": "route_scale", "sliding_window": "window_size",
           "kv_source_layer_ids": "kv_source_layers", "index_source_layer_ids": "index_source_layers",
           "candidate_source_layer_id": "candidate_source_layer", "engram_pad_token_id": "engram_pad_id"}
    flat = {ren.get(k, k): v for k, v in t.items() if k != "rope_scaling"}
    rs = t["rope_scaling"]
    flat.update(rope_factor=rs["factor"], original_seq_len=rs["original_max_position_embeddings"],
                beta_fast=rs["beta_fast"], beta_slow=rs["beta_slow"])
    json.dump(flat, open(os.path.join(d, "config.json"), "w"))
elif what in ("extras", "unknown", "vl_outside"):  # tensors appended to shard 1 and the index
    idx_path = os.path.join(d, "model.safetensors.index.json")
    idx = json.load(open(idx_path))
    layers = json.load(open(os.path.join(d, "config.json")))["text_config"]["num_hidden_layers"]
    experts = json.load(open(os.path.join(d, "config.json")))["text_config"]["n_routed_experts"]
    data = raw[8 + n:]
    def add(name, dtype, shape, size):
        global data
        head[name] = {"dtype": dtype, "shape": shape, "data_offsets": [len(data), len(data) + size]}
        idx["weight_map"][name] = "model-00001-of-00003.safetensors"
        data += bytes(size)
    if what == "extras":  # what the release has beside the text model
        for l in range(layers): add("layers.%d.ffn.gate.bias_vl" % l, "F32", [experts], 4 * experts)
        add("mtp.0.attn.wq_a.weight", "F8_E4M3", [32, 64], 2048)
        add("mtp.2.markov_head.embed.weight", "BF16", [64, 8], 1024)
        add("vision.blocks.0.attn.qkv.weight", "BF16", [96, 32], 6144)
        add("aligner.proj.weight", "BF16", [32, 32], 2048)
        add("image_newline", "BF16", [32], 64)
    elif what == "unknown": add("layers.0.ffn.gate.bias_xl", "F32", [experts], 4 * experts)
    else: add("layers.%d.ffn.gate.bias_vl" % layers, "F32", [experts], 4 * experts)
    text = json.dumps(head).encode()
    text += b" " * (-len(text) % 8)
    open(shard, "wb").write(struct.pack("<Q", len(text)) + text + data)
    json.dump(idx, open(idx_path, "w"))
elif what == "roles":
    c = json.load(open(os.path.join(d, "config.json")))
    c["text_config"]["index_source_layer_ids"] = [2, 4]
    json.dump(c, open(os.path.join(d, "config.json"), "w"))
PY
}
for case in truncated header_json offsets dtype shape overflow missing no_shard roles; do
    broken $case
    expect_error "checkpoint: $case" "$dsv41" inspect "$tmp/b_$case"
    grep -q "model-0000\|safetensors\|wq_a\|tensor" "$tmp/err" && ok || bad "checkpoint $case: the error names no file or tensor: $(cat "$tmp/err")"
done
broken extras
out=$("$dsv41" check "$golden" -m "$tmp/b_extras" | tail -n 1)
[ "$out" = "443 passed, 0 failed" ] && ok || bad "a checkpoint with the release's DSpark, vision and bias_vl tensors: '$out'"
"$dsv41" inspect "$tmp/b_extras" | grep -q '^checkpoint: [0-9]* tensors in 3 shards, .* 11 tensors the text pass leaves unread' &&
    ok || bad "inspect counts the tensors the text pass leaves unread"
for case in unknown vl_outside; do
    broken $case
    expect_error "checkpoint: $case tensor" "$dsv41" inspect "$tmp/b_$case"
    grep -q "tensor 'layers\.[0-9]*\.ffn\.gate\.bias_\(xl\|vl\)' is not used" "$tmp/err" && ok || bad "checkpoint $case: $(cat "$tmp/err")"
done
broken flat
out=$("$dsv41" check "$golden" -m "$tmp/b_flat" | tail -n 1)
[ "$out" = "443 passed, 0 failed" ] && ok || bad "the flat config.json form: '$out'"

# bench --parallel: the batched decode beside the one-stream decode, in the JSON and the table
chat_model "$tmp/bm" || bad "synth the bench model"
out=$("$dsv41" bench -m "$tmp/bm" -t 2 --parallel 3 --json 2>/dev/null)
printf '%s' "$out" | python3 -c 'import json, sys; p = json.load(sys.stdin)["decode_parallel"]; a = p["projections_alone_s"]
sys.exit(not (p["streams"] == 3 and p["tokens_per_s"] > 0 and p["speedup"] > 0 and a[0] > 0 and a[1] > 0 and
              abs(p["projections_alone_speedup"] / (3 * a[0] / a[1]) - 1) < 1e-3))' &&
    ok || bad "bench --parallel 3 --json: '$out'"
printf '%s' "$out" | python3 -c 'import json, sys; k = json.load(sys.stdin)["kernels"]
sys.exit(not (k["set"] == sys.argv[1] and k["matrices"] == [] and (sys.argv[1] not in ("avx512", "avx2") or k["int8_peak_macs"] > 0)))' \
    "$("$dsv41" kernels 2>/dev/null | tr ' ' '\n' | sed -n 's/\*$//p')" && ok || bad "bench --json: the kernels of a bf16 model: '$out'"
# the table on an fp8 model: the quant kernels at 1, 8, 16 rows and the prefill's, fp8 and fp4
"$dsv41" synth --config "$tmp/tiny.json" --dtype fp8 -o "$tmp/b8" >/dev/null 2>&1 || bad "synth the fp8 bench model"
out=$("$dsv41" bench -m "$tmp/b8" -t 1 --parallel 2 2>/dev/null)
printf '%s\n' "$out" | grep -q '^  decode at    16, 2 streams batched: .* tok/s in all  (.*x one stream)$' &&
    ok || bad "bench --parallel 2: no batched line in the table"
printf '%s\n' "$out" | grep -q '^  projections alone, weights in cache: .* ms a step for one stream, .* ms for 2  (.*x)$' &&
    ok || bad "bench --parallel 2: no line of the projections alone"
for ty in fp8 fp4; do
    [ "$(printf '%s\n' "$out" | grep -cE "^    $ty +[0-9]+x[0-9]+ +(1 row |8 rows|16 rows|[0-9]+ rows): +[0-9.]+ ms +[0-9.]+ G MAC/s")" -eq 4 ] &&
        ok || bad "bench: the $ty kernel at four row counts: '$out'"
done
# avx2 and avx512 weigh their kernels against their integer instruction's measured rate
case "$("$dsv41" kernels 2>/dev/null | tr ' ' '\n' | sed -n 's/\*$//p')" in
avx2) limit='vpmaddwd \+ vpaddd at [0-9.]+ G 16-bit' ;;
avx512) limit='vpdpbusd at [0-9.]+ G byte' ;;
*) limit='' ;;
esac
[ -z "$limit" ] || printf '%s\n' "$out" | grep -qE "^  quant kernels \(.*, weights in cache\), against $limit multiply-adds/s:$" &&
    ok || bad "bench: the kernels' limit line ($limit): '$out'"
expect_error "bench --parallel 0" "$dsv41" bench -m "$tmp/bm" --parallel 0
# bench --ctx: a prefill of each length, the decode after it and the peak memory of each
out=$("$dsv41" bench -m "$tmp/bm" -t 2 --ctx 64,300 --json 2>/dev/null)
printf '%s' "$out" | python3 -c 'import json, sys; p = json.load(sys.stdin)["long_context"]
sys.exit(not ([e["ctx"] for e in p] == [64, 300] and all(e["prefill_tokens_per_s"] > 0 and e["decode_tokens_per_s"] > 0 and
              e["peak_rss_mb"] > 1 for e in p)))' && ok || bad "bench --ctx 64,300 --json: '$out'"
"$dsv41" bench -m "$tmp/bm" -t 1 --ctx 40 2>/dev/null | grep -q '^  context      40: prefill .* tok/s  decode after it .* tok/s  peak resident memory .* MB$' &&
    ok || bad "bench --ctx 40: no line for the context"
for v in 0 5,,3 5, x; do expect_error "bench --ctx $v" "$dsv41" bench -m "$tmp/bm" --ctx "$v"; done
expect_error "bench --ctx past max_seq_len" "$dsv41" bench -m "$tmp/bm" --ctx 2040
expect_error "bench --ctx with --parallel" "$dsv41" bench -m "$tmp/bm" --ctx 64 --parallel 2

# speculative decoding with the drafter synth writes: run --draft N prints the ids of plain run
# (bf16 and fp8 weights), bench --draft N reports its figures
"$dsv41" synth --config models/tiny_dspark.json -o "$tmp/ds" >/dev/null 2>&1 &&
    "$dsv41" synth --config models/tiny_dspark.json -o "$tmp/ds8" --dtype fp8 >/dev/null 2>&1 || bad "synth the DSpark model"
for dir in ds ds8; do
    want=$("$dsv41" run -m "$tmp/$dir" --ids 2,17,47,5,9,33,21,2,8,13 -n 44 2>/dev/null)
    for d in 1 2 5 7; do
        got=$("$dsv41" run -m "$tmp/$dir" --ids 2,17,47,5,9,33,21,2,8,13 -n 44 --draft $d 2>/dev/null)
        [ -n "$want" ] && [ "$got" = "$want" ] && ok || bad "run -m $dir --draft $d: '$got', plain run: '$want'"
    done
done
# every draft verified (p 0; the loop above had the default 0.5) and a cut inside most blocks
want=$("$dsv41" run -m "$tmp/ds" --ids 2,17,47,5,9,33,21,2,8,13 -n 44 2>/dev/null)
for p in 0 0.6; do
    got=$("$dsv41" run -m "$tmp/ds" --ids 2,17,47,5,9,33,21,2,8,13 -n 44 --draft 5 --draft-p-min $p 2>/dev/null)
    [ -n "$want" ] && [ "$got" = "$want" ] && ok || bad "run --draft 5 --draft-p-min $p: '$got', plain run: '$want'"
done
for p in -0.1 1.5 x; do expect_error "run --draft-p-min $p" "$dsv41" run --ids 2 --draft 3 --draft-p-min "$p"; done
[ "$("$dsv41" run --ids 2,17,47 -n 12 --draft 3 2>/dev/null)" = "$("$dsv41" run --ids 2,17,47 -n 12 2>/dev/null)" ] && ok ||
    bad "run --draft on a model without a drafter decodes plainly"
# sampled (a seed, filters, a penalty): the same ids as plain sampled decoding with that seed
samp="--temp 0.9 --top-k 12 --top-p 0.9 --repeat-penalty 1.2 -s 5"
want=$("$dsv41" run -m "$tmp/ds" --ids 2,17,47,5,9,33,21,2,8,13 -n 30 $samp 2>/dev/null)
for d in 2 5; do
    got=$("$dsv41" run -m "$tmp/ds" --ids 2,17,47,5,9,33,21,2,8,13 -n 30 $samp --draft $d 2>/dev/null)
    [ -n "$want" ] && [ "$got" = "$want" ] && ok || bad "sampled run --draft $d: '$got', plain run: '$want'"
done
"$dsv41" run -m "$tmp/ds" --ids 2,17,47,5,9,33,21,2,8,13 -n 20 --draft 3 2>&1 >/dev/null |
    grep -q '^speculative: [0-9]* forwards for 19 tokens (.* a forward), [0-9]* drafts, [0-9]* accepted$' && ok ||
    bad "run --draft reports its drafts"
expect_error "run --draft 65" "$dsv41" run --ids 2 --draft 65
out=$("$dsv41" bench -m "$tmp/ds" -t 1 --draft 3 --json 2>/dev/null)
# the bytes bound: a verify of 4 rows reads more than one step and less than four, a draft some,
# and the bound is 4 steps' bytes over theirs
printf '%s' "$out" | python3 -c 'import json, sys; j = json.load(sys.stdin); p = j["speculative"]; b = j["decode"]["bytes_per_token"]
sys.exit(not (p["draft"] == 3 and p["verify_rows_cost"] > 0 and p["drafter_cost"] > 0 and p["accept_all_tokens_per_s"] > 0
              and p["speedup_accept_all"] > 0 and 0 <= p["own_acceptance"] <= 1 and p["own_policy_tokens_per_s"] > 0
              and b < p["verify_bytes"] < 4 * b and p["draft_bytes"] > 0
              and abs(p["bytes_bound_speedup"] - 4 * b / (p["verify_bytes"] + p["draft_bytes"])) < 1e-3))' &&
    ok || bad "bench --draft 3 --json: '$out'"

finish
