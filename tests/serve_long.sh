#!/bin/bash
# serve_long.sh - the server past the real candidate window: the tiny text geometry with the real
# candidate settings (2,048 blocks of 8, so the candidate layer selects only past 16,384
# positions) and a prompt of 16,450 token ids. Its greedy reply cold and again from the slot's
# prompt cache must be the reply the library gives the same ids in one prefill
# (tests/ref/serve_ref.py, in its own process); extended after the slot's file is restored into the
# other slot, the reply must be the one the live slot gives. Prints "N passed, N failed".
. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/serve_lib.sh"

n=4
long=$tmp/long
python3 - "$data/models/tiny_text.json" "$tmp/long.json" <<'PY' && ok || bad "the long geometry's config"
import json, sys
c = json.load(open(sys.argv[1]))
c.update(max_seq_len=16600, candidate_topk_blocks=2048, candidate_block_size=8, index_n_heads=1)
json.dump(c, open(sys.argv[2], "w"))
PY
$dsv41 synth --config "$tmp/long.json" -o "$long" >/dev/null && cp "$m/tokenizer.json" "$long/" && ok || bad "synthesize the long model"
m=$long
ids=$(python3 -c 'import random; r = random.Random(16450); print(",".join(str(r.randrange(1000, 100000)) for _ in range(16450)))')
want=$(DSV41_LIB=build/libdsv41.so PYTHONPATH=python python3 tests/ref/serve_ref.py "$m" $n "[$ids]" "[]") && ok ||
    bad "the library's reply"
# same NAME CACHED [REF]: the reply in $tmp/resp has the reference's tokens and text (REF, else $want), and that
# many cached tokens
same() {
    python3 - "$tmp/resp" "${3:-$want}" "$2" <<'PY' && ok || bad "$1"
import json, sys
r, want, cached = json.load(open(sys.argv[1], encoding="utf-8")), json.loads(sys.argv[2]), int(sys.argv[3])
got = (r["tokens"], r["choices"][0]["text"], r["usage"]["prompt_tokens_details"]["cached_tokens"])
assert got == (want["tokens"], want["text"], cached), (got, want, cached)
PY
}
# complete IDS [EXTRA]: a greedy completion of the ids; the reply in $tmp/resp
complete() { req POST /v1/completions "{\"prompt\":[$1],\"max_tokens\":$n,\"temperature\":0,\"return_tokens\":true$2}"; }

mkdir -p "$tmp/slots"
start long -np 2 --slot-save-path "$tmp/slots" || { finish; exit 1; }
complete "$ids" ',"id_slot":0'
same "16,450 positions, cold" 0
# the slot's prompt cache: the same prompt again is taken whole from the slot's snapshot of it
complete "$ids" ',"id_slot":0'
same "16,450 positions, from the slot's prompt cache" 16450
# a slot file holds the slot's tokens (the prompt and the reply but its last token): restored into
# slot 1, the prompt, that reply and one id more compute only the new ones, and give what slot 0,
# which holds the same tokens live, gives
fed=$(python3 -c 'import json, sys; print(",".join(map(str, json.loads(sys.argv[1])["tokens"][:-1])))' "$want")
ext="$ids,$fed,4242"
req POST /slots/0?action=save '{"filename":"long.slot"}'
[ "$code" = 200 ] && ok || bad "save slot 0: $code $(head -c 300 "$tmp/resp")"
req POST /slots/1?action=restore '{"filename":"long.slot"}'
[ "$code" = 200 ] && ok || bad "restore into slot 1: $code $(head -c 300 "$tmp/resp")"
complete "$ext" ',"id_slot":0'
live=$(python3 -c 'import json, sys; r = json.load(open(sys.argv[1], encoding="utf-8")); print(json.dumps({"tokens": r["tokens"], "text": r["choices"][0]["text"]}))' "$tmp/resp")
complete "$ext" ',"id_slot":1'
same "16,450 positions, extended from the slot file restored into slot 1 as from the live slot" $((16450 + n - 1)) "$live"
stop
finish
