#!/bin/sh
# cli_input.sh - hostile and broken input that dsv41 once accepted, hung on, aborted on or
# blamed on the wrong thing. Every file is a copy of real data (the golden, models/tiny.json, a
# converted checkpoint) changed in one way by python at run time. Each case must give one
# `dsv41: ...` line naming the problem and a non-zero exit, never a crash, hang or exit 0.
# Prints "N passed, N failed".
. "$(dirname "$0")/lib.sh"
golden=${DSV41_GOLDEN:-${DSV41_SHARED:-../shared}/golden/ds41_tiny_golden.json}
if [ ! -f "$golden" ]; then bad "golden not found at $golden"; finish; exit 1; fi

# expect_named NAME WORD CMD...: expect_error, and the message contains WORD
expect_named() {
    name=$1; word=$2; shift 2
    expect_error "$name" "$@"
    grep -qF -- "$word" "$tmp/err" || bad "$name: the message does not name '$word': $(cat "$tmp/err")"
}

# ---- goldens: one field changed (python's json writes NaN / Infinity as such)
gold() { # $1 case, $2 python statement on g
    python3 - "$golden" "$tmp/$1.json" "$2" <<'PY'
import json, sys
g = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(g, open(sys.argv[2], "w"))
PY
}
# case|word the message must name|python statement on g
while IFS='|' read -r case word stmt; do
    c=${case%% *}; gold "$c" "$stmt" && expect_named "golden: $case" "$word" $dsv41 check "$tmp/$c.json"
done <<'EOF'
vocab_1e30|vocab_size|g["fixture"]["vocab_size"] = 1e30
vocab_nan|vocab_size|g["fixture"]["vocab_size"] = float("nan")
eps_nan|norm_eps|g["fixture"]["norm_eps"] = float("nan")
id_wrap (2^32+2, not truncated to 2)|input_ids|g["prefill12"]["input_ids"]["data"][0] = 2**32 + 2
id_float|input_ids|g["prefill12"]["input_ids"]["data"][0] = 2.5
len_float|input_ids|g["prefill12"]["input_ids"]["shape"][1] = 12.5
len_huge (batch x tokens past int64)|input_ids|g["prefill12"]["input_ids"]["shape"][1] = 2**62
stride_huge (count + stride past int64)|L2.sa_q|g["decode12"]["L2.sa_q"]["stride"] = 2**63 - 1
stride_1e300|stride|g["decode12"]["L2.sa_q"]["stride"] = 1e300
shape_float|L2.sa_q|g["decode12"]["L2.sa_q"]["shape"][3] = 32.5
batch_str (a malformed field is named)|batch|g["fixture"]["batch"] = "1"
cand_str (a malformed field is named)|candidate_source_layer|g["fixture"]["candidate_source_layer"] = "4"
cand_neg (a negative layer id)|candidate_source_layer|g["fixture"]["candidate_source_layer"] = -3
no_regimes (nothing to check is a failure)|no captures|g["fixture"]["regimes"] = []
only_headers|no captures|g = {"fixture": g["fixture"], "weights_meta": g["weights_meta"]}; g["fixture"].pop("regimes")
meta_float|wq_a|g["weights_meta"]["layers.1.attn.wq_a.weight"]["shape"] = [16.0, 64.5]
EOF

# ---- configs: models/tiny.json with one field changed, through synth
conf() { # $1 case, $2 python statement on c
    python3 - models/tiny.json "$tmp/$1.cfg.json" "$2" <<'PY'
import json, sys
c = json.load(open(sys.argv[1]))
exec(sys.argv[3])
json.dump(c, open(sys.argv[2], "w"))
PY
}
conf eps 'c["norm_eps"] = float("nan")'
expect_named "config: NaN norm_eps" norm_eps $dsv41 synth --config "$tmp/eps.cfg.json" -o "$tmp/eps_ck"
conf theta 'c["rope_theta"] = float("inf")'
expect_named "config: infinite rope_theta" rope_theta $dsv41 synth --config "$tmp/theta.cfg.json" -o "$tmp/theta_ck"
conf dim 'c["dim"] = 64.5'
expect_named "config: a float dim" dim $dsv41 synth --config "$tmp/dim.cfg.json" -o "$tmp/dim_ck"
[ -z "$(ls "$tmp" | grep -e _ck)" ] && ok || bad "failed synths leave nothing behind: $(ls "$tmp")"

# a sliding window longer than the context: refused before any allocation (it sized a ring of
# 2^30 rows per layer and each decode step's scratch)
conf window_huge 'c["window_size"] = 2**30'
expect_named "config: a window over the context" window_size $dsv41 synth --config "$tmp/window_huge.cfg.json" -o "$tmp/window_ck"
# a huge index_topk: the top-k never holds more than the compressed entries so far, so it runs
# (before: abort "out of memory for 192 bytes of scratch") and equals index_topk = max_seq_len
conf topk_huge 'c["index_topk"] = 2**30'
conf topk_ctx 'c["index_topk"] = c["max_seq_len"]'
$dsv41 synth --config "$tmp/topk_huge.cfg.json" -o "$tmp/topk_huge" && $dsv41 synth --config "$tmp/topk_ctx.cfg.json" -o "$tmp/topk_ctx" &&
    a=$($dsv41 run -m "$tmp/topk_huge" --ids 2,17,47,5,9,33,12,60,7,3,21,40 -n 8 2>/dev/null | head -n 1) &&
    b=$($dsv41 run -m "$tmp/topk_ctx" --ids 2,17,47,5,9,33,12,60,7,3,21,40 -n 8 2>/dev/null | head -n 1) &&
    [ -n "$a" ] && [ "$a" = "$b" ] && ok || bad "index_topk 2^30 runs as index_topk = max_seq_len: '$a' vs '$b'"

# ---- checkpoints: a converted copy broken in one way
$dsv41 convert --golden "$golden" --dtype bf16 -o "$tmp/ck" || bad "convert"
broken() { # $1 case, $2 python statement (d: the copy; shard(i), header, rewrite(i, header), cfg, save_cfg)
    rm -rf "$tmp/b_$1"; cp -r "$tmp/ck" "$tmp/b_$1"
    python3 - "$tmp/b_$1" "$2" <<'PY'
import json, os, struct, sys
d = sys.argv[1]
def shard(i): return os.path.join(d, "model-%05d-of-00003.safetensors" % i)
def header(i):
    raw = open(shard(i), "rb").read(); n = struct.unpack("<Q", raw[:8])[0]
    return json.loads(raw[8:8 + n]), raw[8 + n:]
def rewrite(i, h, data):
    text = json.dumps(h).encode(); text += b" " * (-len(text) % 8)
    open(shard(i), "wb").write(struct.pack("<Q", len(text)) + text + data)
cfg = json.load(open(os.path.join(d, "config.json")))
def save_cfg(): json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
exec(sys.argv[2])
PY
}
broken overlap 'h, data = header(1); names = [k for k in h if k != "__metadata__"]
a, b = names[0], next(k for k in names[1:] if h[k]["data_offsets"][1] - h[k]["data_offsets"][0] <= h[names[0]]["data_offsets"][1] - h[names[0]]["data_offsets"][0])
h[b]["data_offsets"] = [h[a]["data_offsets"][0], h[a]["data_offsets"][0] + h[b]["data_offsets"][1] - h[b]["data_offsets"][0]]
rewrite(1, h, data)'
expect_named "checkpoint: two tensors share bytes" overlap $dsv41 inspect "$tmp/b_overlap"
broken wrong_shard 'p = os.path.join(d, "model.safetensors.index.json"); idx = json.load(open(p))
idx["weight_map"]["embed.weight"] = "model-00002-of-00003.safetensors"; json.dump(idx, open(p, "w"))'
expect_named "checkpoint: the index names a shard without the tensor" embed.weight $dsv41 inspect "$tmp/b_wrong_shard"
broken metadata 'h, data = header(1); h["__metadata__"] = "pt"; rewrite(1, h, data)'
expect_named "checkpoint: a non-object __metadata__" __metadata__ $dsv41 inspect "$tmp/b_metadata"
broken shape_wrap 'h, data = header(1); k = next(k for k in h if k != "__metadata__"); h[k]["shape"] = [2**32, 2**32, 2**33]; rewrite(1, h, data)'
expect_named "checkpoint: a shape whose element count wraps" shape $dsv41 inspect "$tmp/b_shape_wrap"
broken neg_layer 'cfg["text_config"]["candidate_source_layer_id"] = -2; save_cfg()'
expect_named "checkpoint: a negative layer id" candidate_source_layer_id $dsv41 inspect "$tmp/b_neg_layer"
broken eps 'cfg["text_config"]["rms_norm_eps"] = float("nan"); save_cfg()'
expect_named "checkpoint: NaN rms_norm_eps" rms_norm_eps $dsv41 inspect "$tmp/b_eps"
# a bad vocab_size is the config's fault, a bad map entry the map's
broken vocab 'cfg["text_config"]["vocab_size"] = 64.5; save_cfg()'
expect_named "checkpoint: a float vocab_size is blamed on config.json" config.json $dsv41 inspect "$tmp/b_vocab"
grep -q vocab_size "$tmp/err" && ! grep -q engram_token_map "$tmp/err" && ok || bad "vocab_size: $(cat "$tmp/err")"
broken map_entry 'p = os.path.join(d, "engram_token_map.json"); m = json.load(open(p)); m[5] = 10**6; json.dump(m, open(p, "w"))'
expect_named "checkpoint: a bad map entry is blamed on the map" engram_token_map.json $dsv41 inspect "$tmp/b_map_entry"
broken map_float 'p = os.path.join(d, "engram_token_map.json"); m = json.load(open(p)); m[5] = 5.5; json.dump(m, open(p, "w"))'
expect_named "checkpoint: a float map entry" "entry 5" $dsv41 inspect "$tmp/b_map_float"
# NaN weights: the run fails with a message instead of printing tokens 0,0,0
broken nan_weight 'h, data = header(2); o = h["norm.weight"]["data_offsets"][0]; data = bytearray(data); data[o:o + 2] = b"\xc0\x7f"; rewrite(2, h, bytes(data))'
expect_named "checkpoint: NaN weights fail the run" NaN $dsv41 run -m "$tmp/b_nan_weight" --ids 2,17,47 -n 3
# a FIFO where a shard should be: refused at once, never a hang in open()
rm -rf "$tmp/b_fifo"; cp -r "$tmp/ck" "$tmp/b_fifo"; rm "$tmp/b_fifo/model-00002-of-00003.safetensors"
mkfifo "$tmp/b_fifo/model-00002-of-00003.safetensors"
expect_named "checkpoint: a FIFO shard" "not a regular file" timeout 20 $dsv41 inspect "$tmp/b_fifo"
rm -rf "$tmp/c_fifo"; cp -r "$tmp/ck" "$tmp/c_fifo"; rm "$tmp/c_fifo/config.json"; mkfifo "$tmp/c_fifo/config.json"
expect_named "checkpoint: a FIFO config.json" "not a regular file" timeout 20 $dsv41 inspect "$tmp/c_fifo"

# ---- run: numeric flags
expect_named "run -n past int64 in the context check" "-n" $dsv41 run --ids 2,17,47 -n 9223372036854775807
expect_named "run -n past int32" "-n" $dsv41 run --ids 2,17,47 -n 4294967298
for flag in -n --top-k --seed -t --temp --top-p --min-p; do
    for v in nan inf -inf 1e400; do
        expect_named "run -p $flag $v" "$flag" $dsv41 run -m "$tmp/ck" -p hi $flag $v
    done
done
expect_named "run -p --seed 1.5" "--seed" $dsv41 run -m "$tmp/ck" -p hi --seed 1.5
expect_named "run -p --top-k -1" "--top-k" $dsv41 run -m "$tmp/ck" -p hi --top-k -1

# ---- render: content the prompt cannot carry
chat() { python3 -c 'import sys; open(sys.argv[1], "wb").write(sys.argv[2].encode("utf-8", "surrogatepass"))' "$tmp/$1.chat.json" "$2"; }
chat nul '{"messages": [{"role": "user", "content": "a\u0000b"}]}'
expect_named "render: a NUL in content" "messages[0].content" $dsv41 render --chat "$tmp/nul.chat.json"
chat surrogate '{"messages": [{"role": "user", "content": "ab\ud800c"}]}'
expect_named "render: a lone surrogate escape" "messages[0].content" $dsv41 render --chat "$tmp/surrogate.chat.json"
printf '{"messages": [{"role": "system", "content": "ok"}, {"role": "user", "content": "bad \377 byte"}]}' >"$tmp/raw.chat.json"
expect_named "render: a raw invalid byte" "messages[1].content: invalid UTF-8 at byte offset 4" $dsv41 render --chat "$tmp/raw.chat.json"
chat tool_nul '{"messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f\u0000", "parameters": {}}}]}'
expect_named "render: a NUL anywhere in the case" "tools[0].function.name" $dsv41 render --chat "$tmp/tool_nul.chat.json"

# ---- convert / synth stopped by a signal while writing: no temporary directory is left, and
# the exit status is 128 + the signal. The model is bench/mini.json with 6 experts, so that
# writing lasts long enough to be caught in the act.
python3 -c 'import json, sys; c = json.load(open("bench/mini.json")); c["n_routed_experts"] = 6; json.dump(c, open(sys.argv[1], "w"))' "$tmp/mid.json"
for sig in TERM INT; do
    $dsv41 synth --config "$tmp/mid.json" --dtype fp8 -o "$tmp/sig_$sig" 2>"$tmp/sig_err" &
    pid=$!
    i=0
    while [ $i -lt 600 ] && ! ls "$tmp" | grep -q "sig_$sig.tmp-" && kill -0 $pid 2>/dev/null; do sleep 0.1; i=$((i + 1)); done
    kill -$sig $pid
    wait $pid; rc=$?
    want=$([ $sig = TERM ] && echo 143 || echo 130)
    [ $rc -eq "$want" ] && [ -z "$(ls "$tmp" | grep "sig_$sig")" ] && ok ||
        bad "synth stopped by SIG$sig: rc=$rc (want $want), left: $(ls "$tmp" | grep sig_) $(cat "$tmp/sig_err")"
done

finish
