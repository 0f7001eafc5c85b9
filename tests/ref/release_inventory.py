#!/usr/bin/env python3
"""What `dsv41 inspect` must report for a DeepSeek-V4.1 release checkpoint, computed from its
config.json alone by closed-form arithmetic over the shapes in ../shared/docs/V41_REFERENCE.md
section 12.1 (no tensor list, nothing from the engine). Prints the expected inspect lines:

  <DTYPE> <tensors> <bytes>      the matrices the text model loads, per storage dtype, with scales
  total <bytes>
  checkpoint <tensors> <bytes> <unread>
  decode <bytes>                 weights one decoded token reads

Usage: release_inventory.py CONFIG.json   (served form with text_config, or the flat form)
"""
import json
import sys


def cdiv(a, b):
    return -(-a // b)


def fp8(r, c):   # e4m3 [r, c] + e8m0 over 32x32 tiles
    return r * c + cdiv(r, 32) * cdiv(c, 32)


def fp4(r, c):   # two e2m1 per byte + e8m0 per 32 inputs of a row
    return r * c // 2 + r * cdiv(c, 32)


def rows8(r, c):  # e4m3 table + e8m0 per 32 values of a row
    return r * c + r * cdiv(c, 32)


def main():
    root = json.load(open(sys.argv[1]))
    t = root.get("text_config", root)
    served = "text_config" in root
    g = lambda flat, hf: t[hf if served else flat]
    V, D, L = t["vocab_size"], g("dim", "hidden_size"), g("n_layers", "num_hidden_layers")
    H, hd, qr = g("n_heads", "num_attention_heads"), t["head_dim"], t["q_lora_rank"]
    G, orank, inter = t["o_groups"], t["o_lora_rank"], g("moe_inter_dim", "moe_intermediate_size")
    E, act, nsh = t["n_routed_experts"], g("n_activated_experts", "num_experts_per_tok"), t["n_shared_experts"]
    hc, IH, ihd = t["hc_mult"], t["index_n_heads"], t["index_head_dim"]
    ratios = t["compress_ratios"]
    kv = g("kv_source_layers", "kv_source_layer_ids")
    ix = g("index_source_layers", "index_source_layer_ids")
    eng_rows = t["engram_num_embeddings"]
    ehd, ecols = t["engram_head_dim"], (t["engram_max_ngram_size"] - 1) * t["engram_n_heads"]
    mtp = g("n_mtp_layers", "num_nextn_predict_layers")
    dE, rank, ntgt = t["dspark_n_routed_experts"], t["dspark_markov_rank"], len(t["dspark_target_layer_ids"])
    mix, sh = (2 + hc) * hc, nsh * inter

    # per dtype: [tensors, bytes] of the matrices the text model loads (scales with their matrix)
    m = {"F32": [0, 0], "BF16": [0, 0], "F8_E4M3": [0, 0], "FP4 (I8)": [0, 0]}

    def mat(dt, n, b):
        m[dt][0] += n
        m[dt][1] += b

    attn = fp8(qr, D) + fp8(H * hd, qr) + fp8(hd, D) + fp8(G * orank, H * hd // G) + fp8(D, G * orank)
    shared = 2 * fp8(sh, D) + fp8(D, sh)
    expert = 2 * fp4(inter, D) + fp4(D, inter)
    hcfn = 4 * mix * hc * D
    mat("BF16", 2, 2 * 2 * V * D)                         # embed, head
    decode = 2 * D + 2 * V * D                            # one embedding row, the head
    for l in range(L):
        mat("F32", 2, 2 * hcfn)
        mat("F8_E4M3", 5 + 3, attn + shared)
        mat("BF16", 1, 2 * E * D)                         # gate
        mat("FP4 (I8)", 3 * E, E * expert)
        decode += 2 * hcfn + attn + shared + 2 * E * D + act * expert
        if l in kv:                                       # compressor wkv (+ wgate at ratio 2), indexer wk
            n = 2 if ratios[l] > 1 else 1
            mat("BF16", n + 1, n * 2 * hd * D + 2 * ihd * hd)
            decode += n * 2 * hd * D + 2 * ihd * hd
        if l in ix:                                       # indexer wq_b, weights_proj
            mat("F8_E4M3", 1, fp8(IH * ihd, qr))
            mat("BF16", 1, 2 * IH * D)
            decode += fp8(IH * ihd, qr) + 2 * IH * D
        if l in t["engram_layer_ids"]:                    # table, wkv; q/k weights are folded at load
            rows = eng_rows[t["engram_layer_ids"].index(l)]
            wkv = fp8(D * (hc + 1), ecols * ehd)
            mat("F8_E4M3", 2, rows8(rows, ehd) + wkv)
            decode += wkv + ecols * rows8(1, ehd)

    # every tensor in the files: count and bytes (scales are tensors of their own here)
    def block(nE):
        n = 2 + 6 + 1 + 10 + 2 + 3 + 6 * nE + 6
        b = 2 * 2 * D + 2 * (hcfn + 4 * mix + 4 * 3) + 4 * H + attn + 2 * (qr + hd)
        b += 2 * nE * D + 2 * 4 * nE + nE * expert + shared
        return n, b

    n, b = block(E)
    tensors, data = 3 + L * n, 2 * 2 * V * D + 2 * D + L * b
    for l in kv:
        n = 4 + (ratios[l] > 1)                          # wkv, norm, indexer wk, k_norm (+ wgate)
        tensors += n
        data += 2 * hd * D * (1 + (ratios[l] > 1)) + 2 * hd + 2 * ihd * hd + 2 * ihd
    tensors += 3 * len(ix)
    data += len(ix) * (fp8(IH * ihd, qr) + 2 * IH * D)
    for rows in eng_rows:
        tensors += 6
        data += rows8(rows, ehd) + fp8(D * (hc + 1), ecols * ehd) + 2 * 2 * hc * D
    n, b = block(dE)
    extras = 7                                            # main_proj + scale, main_norm, norm, markov x2, confidence
    tensors += mtp * n + extras
    data += mtp * b + fp8(D, ntgt * D) + 2 * D + 2 * D + 2 * 2 * V * rank + 2 * (D + rank)
    drafter = mtp > 0 and t.get("dspark_block_size", 0) > 0
    unread = L + (mtp if drafter else mtp * n + extras)   # bias_vl of every layer and stage; a drafter loads the rest

    for dt, (cnt, byt) in m.items():
        print(dt, cnt, byt)
    print("total", sum(v[1] for v in m.values()))
    print("checkpoint", tensors, data, unread)
    print("decode", decode)


main()
