#!/usr/bin/python3
"""Independent numpy reference of the DSpark drafter (the release's Transformer.forward_spec).

Runs the backbone with golden_gen.py's emulation of the bf16 reference (a prefill, then greedy
one-token decode steps), taps the inputs of the layers dspark_target_layer_ids names, and after
each decode step drafts one block the way forward_spec does (../shared/docs/DSPARK.md section 3):

  main_x   = main_norm(main_proj(concat over targets of bf16(mean over the hc copies of h_in)))
  rings    = per stage, the window ring of kv_norm(wkv(main_x)) at the main positions (rotated,
             fp8 fake-quantized); a prefill seeds them and drafts nothing
  block    = [anchor, noise, ...] at positions S+1..S+B, through every stage: the usual block
             with an attention over the whole ring plus the whole block (bidirectional)
  heads    = head(norm(hc_pre(h))) plus the Markov bias of the previous token, argmax in order;
             confidence = proj . [hc_pre(h); markov embed] (a logit, no sigmoid)

The weights are the generator's filler (the names of the release's mtp.N.* layout), so the C
engine's synthesized model of the same config is the same model. Writes JSON:
  {"config", "prefill": [ids], "steps": [{"pos", "token", "anchor", "draft_ids",
   "draft_logits": capture, "confidence": capture, "margins", "robust"}]}
with captures in golden_gen.py's emit() layout, so the C test compares them with the golden's
bars. "margins" holds, per pick, the gap between the best and the second logit; "robust" says
whether the step keeps its drafts and stays within half the bars under golden_gen.py's twin
numerics (a bf16 rounding that lands the other way cascades through 3 stages, so only robust
steps are a fair test of another implementation).

  dspark_ref.py --config models/tiny_dspark.json --out FILE [--prefill N] [--steps N] [--seed-ids N]
"""
import argparse
import json
import os
import sys
from collections import OrderedDict

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import golden_gen as gg  # noqa: E402

F32, F64 = np.float32, np.float64


def stage_specs(fix):
    """(name, shape, storage) of the mtp.N.* tensors the drafter reads, in the release's names: each
    stage is a backbone layer of ratio 0 with no Engram and the drafter's expert count, plus the
    tap projection (stage 0) and the heads (the last stage)."""
    V, D, rank, n = fix["vocab_size"], fix["dim"], fix["dspark_markov_rank"], fix["n_mtp_layers"]
    plain = OrderedDict(fix, n_layers=n, n_routed_experts=fix["dspark_n_routed_experts"], compress_ratios=[0] * n,
                        kv_source_layers=[], index_source_layers=[], engram_layer_ids=[])
    specs = [(f"mtp.{name[len('layers.'):]}", shape, storage) for name, shape, storage in gg.param_specs(plain)
             if name.startswith("layers.")]
    specs += [("mtp.0.main_proj.weight", [D, len(fix["dspark_target_layer_ids"]) * D], "bf16"),
              ("mtp.0.main_norm.weight", [D], "bf16")]
    p = f"mtp.{n - 1}."
    specs += [(p + "norm.weight", [D], "bf16"), (p + "markov_head.embed.weight", [V, rank], "bf16"),
              (p + "markov_head.head.weight", [V, rank], "bf16"),
              (p + "confidence_head.proj.weight", [1, D + rank], "bf16")]
    return specs


def fill(specs):
    out = {}
    for name, shape, storage in specs:
        scale, offset, _ = gg.fill_rule(name, shape)
        v = gg.fixed_values(name, int(np.prod(shape)), scale, offset)
        out[name] = (gg.bf16(v) if storage == "bf16" else v).reshape(shape)
    return out


class Drafter:
    """The stages' state (one ring per stage) and forward_spec over it."""

    def __init__(self, fix, weights, tables):
        self.f, self.w = fix, weights
        self.L, self.n = fix["n_layers"], fix["n_mtp_layers"]
        self.B, self.W = fix["dspark_block_size"], fix["window_size"]
        # the stages are layers n_layers.. of a model whose MoE has the drafter's expert counts:
        # golden_gen's Model serves their mixes, norms and MoE under those layer names
        sf = OrderedDict(fix)
        sf["n_routed_experts"] = fix["dspark_n_routed_experts"]
        sf["n_activated_experts"] = fix["dspark_n_activated_experts"]
        sw = dict(weights)
        for name in list(weights):
            if name.startswith("mtp."):
                s, rest = name[4:].split(".", 1)
                sw[f"layers.{self.L + int(s)}.{rest}"] = weights[name]
        self.sm = gg.Model(sf, sw, tables, 1)
        self.cos, self.sin = self.sm.rope[self.L]  # plain RoPE: the stages have ratio 0
        self.rings = np.zeros((self.n, self.W, fix["head_dim"]), F32)

    def main_x(self, hidden):
        p = "mtp.0."
        return gg.rms_norm(gg.lin_bf16(hidden, self.w[p + "main_proj.weight"]), self.w[p + "main_norm.weight"],
                           self.f["norm_eps"])

    def main_kv(self, s, mx, pos):
        p = f"mtp.{s}.attn."
        kv = gg.rms_norm(gg.lin_bf16(mx, self.w[p + "wkv.weight"]), self.w[p + "kv_norm.weight"], self.f["norm_eps"])
        kv = gg.rope_tail(kv, self.f["rope_head_dim"], self.cos[pos], self.sin[pos])
        return gg.fp8_fake_quant(kv, 32)

    def seed(self, mx, pos):
        """Ring writes of main rows mx [n][D] at positions pos (only the last W rows survive)."""
        for s in range(self.n):
            kv = self.main_kv(s, mx, pos)
            for i, p in enumerate(pos):
                self.rings[s, p % self.W] = kv[i]

    def attention(self, s, x, S):
        f, w = self.f, self.w
        p = f"mtp.{s}.attn."
        B, H, hd, rd, eps = self.B, f["n_heads"], f["head_dim"], f["rope_head_dim"], f["norm_eps"]
        pos = np.arange(S + 1, S + 1 + B)
        cos, sin = self.cos[pos], self.sin[pos]
        qr = gg.rms_norm(gg.lin_bf16(x, w[p + "wq_a.weight"]), w[p + "q_norm.weight"], eps)
        q = gg.lin_bf16(qr, w[p + "wq_b.weight"]).reshape(1, B, H, hd)
        q = gg.rope_tail(q, rd, cos[None, :, None], sin[None, :, None])
        kv = gg.rms_norm(gg.lin_bf16(x, w[p + "wkv.weight"]), w[p + "kv_norm.weight"], eps)
        kv = gg.fp8_fake_quant(gg.rope_tail(kv, rd, cos[None], sin[None]), 32)
        rows = np.concatenate([self.rings[s][None], kv], axis=1)
        # every row reads the ring slots filled so far and the whole block
        idx = np.concatenate([np.arange(min(self.W, S + 1)), self.W + np.arange(B)]).astype(np.int32)
        idx = np.broadcast_to(idx[None, None, :], (1, B, idx.size)).copy()
        o = gg.sparse_attn(q, rows, w[p + "attn_sink"], idx, hd ** -0.5)
        o = gg.rope_tail(o, rd, cos[None, :, None], sin[None, :, None], inverse=True)
        G, orank = f["o_groups"], f["o_lora_rank"]
        og = o.reshape(1, B, G, -1).astype(F64)
        wo_a = w[p + "wo_a.weight"].astype(F64).reshape(G, orank, -1)
        u = gg.b16(gg.contract("bsgd,grd->bsgr", og, wo_a))
        return gg.lin_bf16(u.reshape(1, B, -1), w[p + "wo_b.weight"])

    def stage(self, s, h, pre_mix, S):
        sm, w, eps, p = self.sm, self.w, self.f["norm_eps"], f"mtp.{s}."
        a_pre, a_post, a_comb = sm.hc_mixes(h, w[p + "hc_attn_fn"], w[p + "hc_attn_scale"], w[p + "hc_attn_base"])
        x = gg.rms_norm(sm.hc_pre(h, pre_mix), w[p + "attn_norm.weight"], eps)
        h_mid = sm.hc_post(self.attention(s, x, S), h, a_post, a_comb)
        f_pre, f_post, f_comb = sm.hc_mixes(h_mid, w[p + "hc_ffn_fn"], w[p + "hc_ffn_scale"], w[p + "hc_ffn_base"])
        x = gg.rms_norm(sm.hc_pre(h_mid, a_pre), w[p + "ffn_norm.weight"], eps)
        y = sm.moe(self.L + s, x, lambda *a, **k: None, lambda n: n)
        return sm.hc_post(y, h_mid, f_post, f_comb), f_pre

    def draft(self, anchor, hidden, S):
        """forward_spec at start_pos S > 0: hidden [D*targets] is the tap row of position S."""
        f, w, B = self.f, self.w, self.B
        self.seed(self.main_x(hidden[None]), [S])
        ids = np.full((1, B), f["dspark_noise_token_id"], np.int64)
        ids[0, 0] = anchor
        emb = w["embed.weight"][ids]
        h = np.repeat(emb[:, :, None, :], f["hc_mult"], axis=2).astype(F32)
        pre_mix = np.zeros((1, B, f["hc_mult"]), F32)
        pre_mix[..., 0] = 1.0
        for s in range(self.n):
            h, pre_mix = self.stage(s, h, pre_mix, S)
        last = f"mtp.{self.n - 1}."
        z = self.sm.hc_pre(h, pre_mix)[0]                                        # [B, D], pre-norm
        base = gg.lin_f32(gg.rms_norm(z, w[last + "norm.weight"], f["norm_eps"]), w["head.weight"])
        emb_m, head_m = w[last + "markov_head.embed.weight"], w[last + "markov_head.head.weight"]
        out, logits, embeds, margins = [anchor], np.zeros_like(base), [], []
        for i in range(B):
            e = emb_m[out[-1]]
            logits[i] = gg.r32(base[i].astype(F64) + gg.lin_f32(e, head_m).astype(F64))
            top = np.sort(logits[i])[-2:]
            margins.append(float(top[1] - top[0]))
            out.append(int(np.argmax(logits[i])))  # first max on ties, as torch's argmax
            embeds.append(e)
        conf = gg.lin_f32(np.concatenate([z, np.array(embeds)], axis=1), w[last + "confidence_head.proj.weight"])
        return out[1:], logits, conf[:, 0], margins


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True)
    ap.add_argument("--out", required=True)
    ap.add_argument("--prefill", type=int, default=10)
    ap.add_argument("--steps", type=int, default=12)
    ap.add_argument("--seed-ids", type=int, default=0)
    args = ap.parse_args()
    fix = json.load(open(args.config), object_pairs_hook=OrderedDict)
    primes, offsets, multipliers, rows = tables = gg.engram_tables(fix)
    fix["engram_num_embeddings"] = rows
    back = OrderedDict(fix)
    back["compress_ratios"] = fix["compress_ratios"][:fix["n_layers"]]
    gg.check_roles(back)
    if args.prefill + args.steps + fix["dspark_block_size"] > fix["max_seq_len"]:
        raise SystemExit("prefill + steps + block size exceed max_seq_len")
    weights, _ = gg.make_weights(back)
    weights.update(fill(stage_specs(fix)))
    V = fix["vocab_size"]
    ids = [gg.fixed_int("input_ids", i + args.seed_ids * 1000, V) for i in range(args.prefill)]
    steps = simulate(fix, back, weights, tables, ids, args.steps)
    # the same run under other legitimate numerics (golden_gen.py's twins: float32 accumulation,
    # whole and in 8 lanes), fed the same tokens: a step where a twin moves a draft or more than
    # half the bars is too close to a rounding boundary to hold another implementation to
    for accum in ("f32", "simd8"):
        gg.NUM = gg.Numerics(accum=accum)
        forced = [(st["token"], st["anchor"]) for st in steps]
        for st, tw in zip(steps, simulate(fix, back, weights, tables, ids, args.steps, forced)):
            st["robust"] = st.get("robust", True) and st["draft_ids"] == tw["draft_ids"] and all(
                np.abs(st[k] - tw[k]).max() <= 0.5 * (2 * 2.0 ** -8 * np.abs(st[k]).max() + 1e-6)
                for k in ("draft_logits", "confidence"))
    for st in steps:
        for k in ("draft_logits", "confidence"):
            st[k] = gg.emit(k, st[k], False, True)
    with open(args.out, "w") as fh:
        json.dump(OrderedDict(config=args.config, prefill=ids, steps=steps), fh)
    print(f"wrote {args.out}: prefill {args.prefill}, {args.steps} drafts, {sum(st['robust'] for st in steps)} robust, "
          f"smallest pick margin {min(min(st['margins']) for st in steps):.3g}")


def simulate(fix, back, weights, tables, ids, n_steps, forced=None):
    """A prefill of ids, then n_steps greedy decode steps (or the (token, anchor) pairs forced
    gives), each followed by a draft: the steps' records, arrays unemitted."""
    model, drafter = gg.Model(back, weights, tables, 1), Drafter(fix, weights, tables)
    targets, hc = fix["dspark_target_layer_ids"], fix["hc_mult"]
    names = {f"L{t}.h_in" for t in targets} | {"logits_full"}

    def run(toks, pos):
        rec = model.forward(np.array([toks], np.int64), pos, names)
        arr = {k: np.array(rec[k]["data"], F32).reshape(rec[k]["shape"]) for k in names}
        taps = [gg.b16(gg.rp(gg.short_sum(arr[f"L{t}.h_in"][0].astype(F64), 1, "hc")) / hc) for t in targets]
        return np.concatenate(taps, axis=-1), arr["logits_full"][0]

    hidden, logits = run(ids, 0)
    drafter.seed(drafter.main_x(hidden), list(range(len(ids))))  # forward_spec at start_pos 0
    token, steps = int(np.argmax(logits[-1])), []
    for k in range(n_steps):
        S = len(ids) + k
        if forced:
            token = forced[k][0]
        hidden, logits = run([token], S)
        anchor = forced[k][1] if forced else int(np.argmax(logits[-1]))
        d, dl, conf, margins = drafter.draft(anchor, hidden[0], S)
        steps.append(OrderedDict(pos=S, token=token, anchor=anchor, draft_ids=d, draft_logits=dl, confidence=conf,
                                 margins=margins))
        token = anchor
    return steps


if __name__ == "__main__":
    main()
