#!/bin/sh
# load.sh - decoding on a busy host: two CPU-bound processes run while a small synthesized model
# decodes at one thread and at the default thread count. Both must give the same tokens; the
# speeds and their ratio are printed, not asserted (the host is shared and its load moves).
# Bounded: each decode has a time limit and the busy processes are killed on exit.
. "$(dirname "$0")/lib.sh"

hogs=""
trap 'kill $hogs 2>/dev/null; rm -rf "$tmp"' EXIT

# a geometry where every projection of a decode step is split across threads
python3 - models/tiny.json "$tmp/load.json" <<'PY'
import json, sys
cfg = json.load(open(sys.argv[1]))
cfg.update(vocab_size=512, dim=512, head_dim=64, q_lora_rank=128, o_lora_rank=64, moe_inter_dim=256,
           n_routed_experts=8, index_head_dim=64, engram_head_dim=64, engram_compressed_vocab_size=512,
           max_seq_len=512)
json.dump(cfg, open(sys.argv[2], "w"))
PY
"$dsv41" synth --config "$tmp/load.json" --dtype fp8 -o "$tmp/m" >/dev/null && ok || bad "synth the load model"

for i in 1 2; do
    sh -c 'while :; do :; done' &
    hogs="$hogs $!"
done

# the same prompt decoded at 1 thread and at the default count, one after the other
for t in 1 default; do
    if [ $t = default ]; then flags=""; else flags="-t $t"; fi
    timeout 120 "$dsv41" run -m "$tmp/m" --ids 2,17,47 -n 64 $flags >"$tmp/out.$t" 2>"$tmp/err.$t"; rc=$?
    [ $rc -eq 0 ] && ok || bad "decode at $t threads under load: rc=$rc, $(head -c 300 "$tmp/err.$t")"
done
speed() { sed -n 's/.*generated: [0-9]* tokens, \([0-9.]*\) tok\/s$/\1/p' "$tmp/err.$1"; }
one=$(speed 1); all=$(speed default)
[ -n "$one" ] && [ "$(head -n 1 "$tmp/out.1")" = "$(head -n 1 "$tmp/out.default")" ] && ok ||
    bad "the same tokens at 1 and the default threads under load"
echo "with 2 busy processes: decode at 1 thread $one tok/s, at the default threads $all tok/s" \
    "(ratio $(python3 -c "import sys; print('%.2f' % (float(sys.argv[2]) / float(sys.argv[1])))" "${one:-1}" "${all:-0}"))"
finish
