#!/usr/bin/python3
"""Compare two DeepSeek-V4.1 golden files capture by capture.

  compare.py GOT.json WANT.json [-v]

Bars (GOLDEN.md section 2.6, the Rust testutil):
  * integers (ids, hashes, indices, candidates) and the engram table gather: EXACT (1e-12);
  * f32 chains (*_pre, *_post, *_comb, pre_mix_*, moe_weights): sample tol 1e-4, ck_rel 1e-4;
  * everything else, logits_full included: sample tol bf16_tol(WANT) = 2*2^-8*max|sample| + 1e-6,
    ck_rel 2^-7.
Per capture: same shape / n / stride, sample length ceil(n/stride), all values finite,
max |GOT.data - WANT.data| <= tol, and |GOT.ck - WANT.ck| <= ck_rel * max(1, mag).

A golden file keeps only a strided sample, so mag = sum |v_i|*(i+1) over the whole tensor is
exact for stride-1 captures and estimated from the sample otherwise (each sampled term stands
for `stride` terms). The fixture and weights_meta are checked too (reported on their own lines);
the final line is "N passed, N failed" over the captures of every regime. Exit 0 iff all pass.
"""
import json
import math
import sys
from collections import OrderedDict

EXACT = 1e-12
F32_TOL = 1e-4
BF16_CK_REL = 0.0078125
RUN_META = ("reference", "kernels", "torch")  # free-text provenance, not compared

INT_SUFFIXES = ("input_ids", "engram_hashes", ".engram_hash_ids", ".sa_topk_idxs",
                ".moe_indices", ".topk_idxs", ".candidates")
EXACT_FLOAT_SUFFIXES = (".engram_embed",)
F32_SUFFIXES = ("_pre", "_post", "_comb", ".pre_mix_in", ".pre_mix_out", ".moe_weights")


def bar(name, want):
    """(kind, sample tol, ck_rel) for a capture."""
    if name.endswith(INT_SUFFIXES):
        return "int", EXACT, EXACT
    if name.endswith(EXACT_FLOAT_SUFFIXES):
        return "exact", EXACT, EXACT
    if name.endswith(F32_SUFFIXES):
        return "f32", F32_TOL, F32_TOL
    m = max((abs(v) for v in want["data"]), default=0.0)
    return "bf16", 2.0 * 2.0 ** -8 * m + 1e-6, BF16_CK_REL


def check_capture(name, got, want):
    """Returns a list of problems (empty when the capture passes)."""
    errs = []
    for key in ("shape", "n", "stride"):
        if got.get(key) != want.get(key):
            errs.append(f"{key} {got.get(key)} != {want.get(key)}")
    if errs:
        return errs
    n, stride = want["n"], want["stride"]
    expect_len = -(-n // stride) if n else 0
    for who, rec in (("got", got), ("want", want)):
        if len(rec["data"]) != expect_len:
            errs.append(f"{who} sample length {len(rec['data'])} != ceil(n/stride) {expect_len}")
        if not all(math.isfinite(v) for v in rec["data"]) or not math.isfinite(rec["ck"]):
            errs.append(f"{who} has non-finite values")
    if errs:
        return errs
    kind, tol, ck_rel = bar(name, want)
    worst, at = 0.0, -1
    for i, (g, w) in enumerate(zip(got["data"], want["data"])):
        d = abs(g - w)
        if d > worst:
            worst, at = d, i
    if worst > tol:
        errs.append(f"[{kind}] sample max |diff| {worst:.3e} > tol {tol:.3e} at sample {at} "
                    f"(flat {at * stride}): got {got['data'][at]!r} want {want['data'][at]!r}")
    mag = sum(abs(v) * (j * stride + 1) for j, v in enumerate(got["data"])) * stride
    bound = ck_rel * max(1.0, mag)
    if abs(got["ck"] - want["ck"]) > bound:
        errs.append(f"[{kind}] ck {got['ck']!r} vs {want['ck']!r} (|diff| {abs(got['ck'] - want['ck']):.3e}"
                    f" > bound {bound:.3e})")
    return errs


def compare_fixture(got, want):
    errs = []
    gk = [k for k in got if k not in RUN_META]
    wk = [k for k in want if k not in RUN_META]
    if gk != wk:
        errs.append(f"fixture keys differ: only got {sorted(set(gk) - set(wk))}, "
                    f"only want {sorted(set(wk) - set(gk))}" if set(gk) != set(wk)
                    else "fixture key order differs")
    for k in wk:
        if k in got and got[k] != want[k]:
            errs.append(f"fixture.{k}: {str(got[k])[:80]} != {str(want[k])[:80]}")
    return errs


def compare_weights(got, want):
    errs = []
    if list(got) != list(want):
        if set(got) != set(want):
            errs.append(f"weights_meta names differ: only got {sorted(set(got) - set(want))[:5]}, "
                        f"only want {sorted(set(want) - set(got))[:5]}")
        else:
            errs.append("weights_meta order differs")
    for name, w in want.items():
        g = got.get(name)
        if g is None:
            continue
        for key in ("shape", "n", "scale", "offset", "kind", "dtype"):
            if g.get(key) != w.get(key):
                errs.append(f"weights_meta.{name}.{key}: {g.get(key)} != {w.get(key)}")
        if abs(g["ck"] - w["ck"]) > 1e-9 * max(1.0, abs(w["ck"])):
            errs.append(f"weights_meta.{name}.ck: {g['ck']!r} != {w['ck']!r}")
    return errs


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("-")]
    verbose = "-v" in sys.argv[1:]
    if len(args) != 2:
        raise SystemExit(__doc__)
    with open(args[0]) as f:
        got = json.load(f, object_pairs_hook=OrderedDict)
    with open(args[1]) as f:
        want = json.load(f, object_pairs_hook=OrderedDict)

    ok = True
    fx = compare_fixture(got["fixture"], want["fixture"])
    for e in fx:
        print("FIXTURE", e)
    print(f"fixture: {'ok' if not fx else f'{len(fx)} differences'}")
    wm = compare_weights(got["weights_meta"], want["weights_meta"])
    for e in wm[:20]:
        print("WEIGHTS", e)
    print(f"weights_meta: {len(want['weights_meta']) - len({e.split('.ck')[0] for e in wm})}"
          f"/{len(want['weights_meta'])} match" if wm else
          f"weights_meta: {len(want['weights_meta'])}/{len(want['weights_meta'])} match")
    ok = ok and not fx and not wm

    passed = failed = 0
    regimes = want["fixture"]["regimes"]
    if got["fixture"].get("regimes") != regimes:
        print(f"REGIMES got {got['fixture'].get('regimes')} want {regimes}")
    for r in regimes:
        gr, wr = got.get(r, {}), want[r]
        if list(k for k in gr if k in wr) != list(k for k in wr if k in gr):
            print(f"ORDER {r}: capture order differs")
            ok = False
        for name, wcap in wr.items():
            if name not in gr:
                print(f"FAIL {r}.{name}: missing")
                failed += 1
                continue
            errs = check_capture(name, gr[name], wcap)
            if errs:
                failed += 1
                for e in errs:
                    print(f"FAIL {r}.{name}: {e}")
            else:
                passed += 1
                if verbose:
                    print(f"ok   {r}.{name}")
        for name in gr:
            if name not in wr:
                print(f"FAIL {r}.{name}: not in WANT")
                failed += 1
    print(f"{passed} passed, {failed} failed")
    sys.exit(0 if ok and failed == 0 else 1)


if __name__ == "__main__":
    main()
