#!/bin/sh
# cli_skeleton.sh - DeepSeek-V4.1-Flash at its real size. `dsv41 synth --skeleton` writes the
# release checkpoint's layout (every tensor at its real name, dtype and shape, 48 shards, data
# regions as holes of sparse files); inspect must report the numbers tests/ref/release_inventory.py
# computes from the config alone, in both config.json forms, and two tokens decode at a bounded peak
# resident memory. Skips, saying why, where the filesystem has no holes or the machine cannot hold
# the ~13 GB of (all-zero) weights one token reads.
. "$(dirname "$0")/lib.sh"
cfg=models/v41_flash.json

skip() { echo "skipped: $*"; finish; exit; }
truncate -s 1G "$tmp/hole" 2>/dev/null || skip "cannot create a 1 GB sparse file here"
[ "$(du -k "$tmp/hole" | cut -f1)" -le 64 ] || skip "the filesystem of $tmp does not keep holes"
rm -f "$tmp/hole"
avail=$(awk '/^MemAvailable:/ {print $2}' /proc/meminfo)
[ "${avail:-0}" -ge 16777216 ] || skip "under 16 GB of memory available (${avail:-?} kB); one decoded token reads 13 GB"

"$dsv41" synth --skeleton --config "$cfg" -o "$tmp/v41" && ok || bad "synth --skeleton"
used=$(du -sk "$tmp/v41" | cut -f1)
[ "$used" -lt 65536 ] && ok || bad "the 509 GB skeleton takes $used kB of disk"
[ -z "$(ls "$tmp" | grep tmp-)" ] && cmp -s "$cfg" "$tmp/v41/config.json" && ok || bad "renamed into place, config copied verbatim"
expect_error "synth --skeleton over an existing directory" "$dsv41" synth --skeleton --config "$cfg" -o "$tmp/v41"
python3 -c 'import json, sys; c = json.load(open(sys.argv[1])); del c["text_config"]["hidden_size"]; json.dump(c, open(sys.argv[2], "w"))' \
    "$cfg" "$tmp/nodim.json"
expect_error "synth --skeleton with a config missing a key" "$dsv41" synth --skeleton --config "$tmp/nodim.json" -o "$tmp/bad"
grep -q "hidden_size\|'dim'" "$tmp/err" && [ ! -e "$tmp/bad" ] && [ -z "$(ls "$tmp" | grep tmp-)" ] && ok ||
    bad "a failed skeleton names the key and leaves nothing behind: $(cat "$tmp/err")"

# 48 shards as the release has them, each Engram table (and its scales) alone in one of the last two
python3 - "$tmp/v41" <<'PY' && ok || bad "the skeleton's shards"
import json, os, struct, sys
d = sys.argv[1]
wm = json.load(open(os.path.join(d, "model.safetensors.index.json")))["weight_map"]
files = sorted(set(wm.values()))
assert len(files) == 48 and files[-1] == "model-00048-of-00048.safetensors", files[-3:]
for l, f in ((1, files[-2]), (14, files[-1])):
    mine = sorted(k for k, v in wm.items() if v == f)
    assert mine == ["layers.%d.engram.embed.%s" % (l, s) for s in ("scale", "weight")], mine
for f in files:  # a header that covers the whole file
    raw = open(os.path.join(d, f), "rb").read(8)
    n = struct.unpack("<Q", raw)[0]
    h = json.loads(open(os.path.join(d, f), "rb").read(8 + n)[8:])
    end = max(v["data_offsets"][1] for k, v in h.items() if k != "__metadata__")
    assert os.path.getsize(os.path.join(d, f)) == 8 + n + end, f
PY

# inspect's lines in the form release_inventory.py prints
inspected() {
    "$dsv41" inspect "$1" | sed -nE \
        -e 's/^  (F32|BF16|F8_E4M3|FP4 \(I8\)) +([0-9]+) tensors +([0-9]+) bytes( \(.*\))?$/\1 \2 \3/p' \
        -e 's/^  total +([0-9]+) bytes( \(.*\))?$/total \1/p' \
        -e 's/^checkpoint: ([0-9]+) tensors in 48 shards, ([0-9]+) bytes of data; ([0-9]+) tensors .*/checkpoint \1 \2 \3/p' \
        -e 's/^one decoded token reads ([0-9]+) bytes .*/decode \1/p'
}
want=$(python3 tests/ref/release_inventory.py "$cfg")
got=$(inspected "$tmp/v41")
[ -n "$want" ] && [ "$got" = "$want" ] && ok || bad "inspect of the skeleton: got '$got', want '$want'"
# the cache per token of context: 890 bytes packed at the release's precision (2.5 entries of 288 + 68), plus the ids (12)
"$dsv41" inspect "$tmp/v41" | grep -qx "cache per token of context: 902 bytes as a session holds it, 890 of them the compressed KV and index keys packed at the release's precision (FP4)" &&
    ok || bad "inspect of the skeleton: the cache per token: $("$dsv41" inspect "$tmp/v41" | grep cache)"

# the flat inference/config.json form of the same config, over the same shards
mkdir "$tmp/flat"
for f in "$tmp"/v41/*; do [ "${f##*/}" = config.json ] || ln -s "$f" "$tmp/flat/"; done
python3 - "$cfg" "$tmp/flat/config.json" <<'PY'
import json, sys
t = json.load(open(sys.argv[1]))["text_config"]
ren = {"hidden_size": "dim", "moe_intermediate_size": "moe_inter_dim", "num_hidden_layers": "n_layers",
       "num_attention_heads": "n_heads", "qk_rope_head_dim": "rope_head_dim", "rms_norm_eps": "norm_eps",
       "num_experts_per_tok": "n_activated_experts", "scoring_func": "score_func", "routed_scaling_factor": "route_scale",
       "sliding_window": "window_size", "kv_source_layer_ids": "kv_source_layers",
       "index_source_layer_ids": "index_source_layers", "candidate_source_layer_id": "candidate_source_layer",
       "engram_pad_token_id": "engram_pad_id", "num_nextn_predict_layers": "n_mtp_layers",
       "dspark_num_experts_per_tok": "dspark_n_activated_experts"}
drop = ("rope_scaling", "model_type", "num_key_value_heads", "max_position_embeddings", "topk_method", "hidden_act",
        "tie_word_embeddings")
flat = {ren.get(k, k): v for k, v in t.items() if k not in drop}
rs = t["rope_scaling"]
flat.update(rope_factor=rs["factor"], original_seq_len=rs["original_max_position_embeddings"],
            beta_fast=rs["beta_fast"], beta_slow=rs["beta_slow"], dtype="fp8", expert_dtype="fp4")
json.dump(flat, open(sys.argv[2], "w"), indent=1)
PY
want_flat=$(python3 tests/ref/release_inventory.py "$tmp/flat/config.json")
got=$(inspected "$tmp/flat")
[ "$want_flat" = "$want" ] && [ "$got" = "$want" ] && ok || bad "inspect with the flat config.json: got '$got', want '$want'"

# a prefill of 3 tokens and one decode step at full size; all-zero weights give all-zero logits,
# so greedy decoding picks id 0. Peak resident memory includes the mapped weights touched. A
# sanitizer build (make sanitize) prefills only: each pass faults in 13 GB of holes and their
# shadow, 80 s for the two under ASan
n=2 want=0,0
[ "$dsv41" = ./dsv41 ] || { n=1; want=0; }
out=$(python3 - "$dsv41" run -m "$tmp/v41" --ids 0,1,2 -n $n <<'PY'
import resource, subprocess, sys, time
t = time.time()
r = subprocess.run(sys.argv[1:], capture_output=True, text=True)
rss = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(r.returncode, (r.stdout.splitlines() or [""])[0], rss, "%.1f" % (time.time() - t), r.stderr.strip()[:200])
PY
)
set -- $out
echo "run --ids 0,1,2 -n $n on the skeleton: exit $1, tokens $2, peak RSS $(($3 / 1024)) MB, $4 s"
[ "$1" = 0 ] && [ "$2" = "$want" ] && [ "$3" -lt 20971520 ] && ok || bad "decoding on the skeleton: $out"

finish
