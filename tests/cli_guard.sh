#!/bin/sh
# cli_guard.sh - tests of the guards themselves: copies of the golden perturbed just past one of
# the checker's bars must fail `dsv41 check`, and shards cut short or overrun must be refused.
# Without these, loosening the f32 bar 100x, dropping the checksum comparison or letting a
# tensor end 64 bytes past its shard left every other test passing. The perturbations are
# computed at run time from the shared golden with the bars GOLDEN.md states (f32 kinds 1e-4,
# bf16 kinds 2^-7 of the sample's max, exact kinds 0; checksums 1e-4, 2^-7 or exact, relative
# to the index-weighted sum of magnitudes), moved twice the bar so that the model's own small
# error cannot hide it. Prints "N passed, N failed".
. "$(dirname "$0")/lib.sh"
golden=${DSV41_GOLDEN:-${DSV41_SHARED:-../shared}/golden/ds41_tiny_golden.json}
if [ ! -f "$golden" ]; then bad "golden not found at $golden"; finish; exit 1; fi

python3 - "$golden" "$tmp" <<'PY' || bad "could not write the perturbed goldens"
import copy, json, os, sys
src, dst = sys.argv[1], sys.argv[2]
g = json.load(open(src))
EXACT = {"input_ids", "engram_hashes", "engram_hash_ids", "sa_topk_idxs", "moe_indices", "topk_idxs", "candidates"}
F32 = {"attn_pre", "attn_post", "attn_comb", "ffn_pre", "ffn_post", "ffn_comb", "pre_mix_in", "pre_mix_out", "moe_weights"}
def kind(name):
    base = name.rsplit(".", 1)[-1]
    return "exact" if base in EXACT else "f32" if base in F32 else "bf16"
def regimes():
    return [k for k in g if k not in ("fixture", "weights_meta")]
def find(want, stride1=False):  # the first capture of a kind, a full one when its checksum is needed
    for r in regimes():
        for name, c in g[r].items():
            if name != "input_ids" and kind(name) == want and (not stride1 or c["stride"] == 1) and len(c["data"]) > 1:
                return r, name
    raise SystemExit("no %s capture" % want)
def put(case, mutate):
    h = copy.deepcopy(g)
    r, name = mutate(h)
    json.dump(h, open(os.path.join(dst, case + ".json"), "w"))
    open(os.path.join(dst, case + ".name"), "w").write("%s %s" % (r, name))

def sample(want):
    def m(h):
        r, name = find(want)
        d = h[r][name]["data"]
        smax = max(abs(v) for v in d)
        i = min(range(len(d)), key=lambda k: abs(d[k]))  # the smallest: moving it never raises the max
        bar = 1e-4 if want == "f32" else 2.0 * 2 ** -8 * smax + 1e-6
        d[i] += 2 * bar
        return r, name
    return m
def checksum(want):
    def m(h):
        r, name = find(want, stride1=True)
        c = h[r][name]
        wsum = sum(abs(v) * (i + 1) for i, v in enumerate(c["data"]))
        c["ck"] += 2 * (1e-4 if want == "f32" else 2 ** -7) * max(1.0, wsum)
        return r, name
    return m
def off_by_one(h):
    r, name = find("exact")
    h[r][name]["data"][0] += 1
    return r, name
def missing(h):
    r, name = find("bf16")
    del h[r][name]
    return r, name
def wrong_shape(h):
    r, name = find("bf16")
    h[r][name]["shape"] = h[r][name]["shape"] + [1]
    return r, name
put("f32_sample", sample("f32"))
put("bf16_sample", sample("bf16"))
put("f32_checksum", checksum("f32"))
put("bf16_checksum", checksum("bf16"))
put("int_capture", off_by_one)
put("missing", missing)
put("wrong_shape", wrong_shape)
PY

total=$($dsv41 check "$golden" | tail -n 1 | sed 's/ passed.*//')
for case in f32_sample bf16_sample f32_checksum bf16_checksum int_capture missing; do
    name=$(cat "$tmp/$case.name")
    out=$($dsv41 check "$tmp/$case.json"); rc=$?
    [ $rc -eq 1 ] && printf '%s\n' "$out" | grep -q "^FAIL $name: " &&
        [ "$(printf '%s\n' "$out" | tail -n 1)" = "$((total - 1)) passed, 1 failed" ] && ok ||
        bad "golden $case ($name) must fail exactly that capture: rc=$rc, $(printf '%s\n' "$out" | tail -n 2 | tr '\n' ' ')"
done
expect_error "golden wrong_shape" $dsv41 check "$tmp/wrong_shape.json"
grep -qF "$(cut -d' ' -f2 "$tmp/wrong_shape.name")" "$tmp/err" && ok || bad "wrong shape: the error names no capture: $(cat "$tmp/err")"

# shards: the last tensor of a shard ending one byte, or 64 bytes, past the data
$dsv41 convert --golden "$golden" --dtype fp8 -o "$tmp/ck" || bad "convert"
short() { # $1 case, $2 python statement on raw (the shard's bytes), n (header length), h (header)
    rm -rf "$tmp/$1"; cp -r "$tmp/ck" "$tmp/$1"
    python3 - "$tmp/$1/model-00002-of-00003.safetensors" "$2" <<'PY'
import json, struct, sys
path = sys.argv[1]
raw = open(path, "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
h = json.loads(raw[8:8 + n])
def rewrite(h, data):
    text = json.dumps(h).encode(); text += b" " * (-len(text) % 8)
    open(path, "wb").write(struct.pack("<Q", len(text)) + text + data)
exec(sys.argv[2])
PY
}
short cut1 'open(path, "wb").write(raw[:-1])'
expect_error "a shard cut one byte short" $dsv41 inspect "$tmp/cut1"
short cut64 'open(path, "wb").write(raw[:-64])'
expect_error "a shard cut 64 bytes short" $dsv41 inspect "$tmp/cut64"
short past64 'last = max((k for k in h if k != "__metadata__"), key=lambda k: h[k]["data_offsets"][1])
h[last]["data_offsets"] = [o + 64 for o in h[last]["data_offsets"]]
rewrite(h, raw[8 + n:])'
expect_error "a tensor ending 64 bytes past its shard's data" $dsv41 inspect "$tmp/past64"
grep -q "model-00002-of-00003" "$tmp/err" && ok || bad "the error names no shard: $(cat "$tmp/err")"
$dsv41 inspect "$tmp/ck" >/dev/null && ok || bad "the unbroken checkpoint loads"

finish
