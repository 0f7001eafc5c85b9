/* inventory.c - every tensor of a release checkpoint, derived from its config.
 *
 * The names, storage dtypes and shapes follow the release's naming rules (V41_REFERENCE.md
 * section 12.1): the globals, each backbone layer with the tensors its roles give it, then the
 * DSpark draft blocks, which are built like a layer with their own expert count plus a few
 * extras. Quantized matrices come with their e8m0 scales: fp8 over 32x32 tiles, the Engram
 * table's rows and the fp4 experts per 32 inputs. Vision tensors are not listed: the reference
 * does not give their names. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "inventory.h"

typedef enum { K_BF16, K_F32, K_FP8, K_FP8_ROWS, K_FP4 } kind;

static int push(inventory *inv, const char *name, const char *dtype, int32_t elem, int32_t ndim, int64_t r, int64_t c) {
    if (inv->n == inv->cap) {
        size_t cap = inv->cap ? inv->cap * 2 : 4096;
        inv_tensor *nt = realloc(inv->t, cap * sizeof *nt);
        if (!nt) return set_error("out of memory");
        inv->t = nt;
        inv->cap = cap;
    }
    inv_tensor *t = &inv->t[inv->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype;
    t->ndim = ndim;
    t->shape[0] = r;
    t->shape[1] = ndim > 1 ? c : 1;
    t->nbytes = r * t->shape[1] * elem; /* < 2^37 for the largest Engram table */
    return 0;
}

/* One logical tensor [r][c] (c = 0: a vector [r]) named prefix + fmt, stored as k says. */
static int add(inventory *inv, const char *prefix, kind k, int64_t r, int64_t c, const char *fmt, ...) {
    char name[96], base[96];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(base, sizeof base, fmt, ap);
    va_end(ap);
    snprintf(name, sizeof name, "%s%s", prefix, base);
    int32_t nd = c ? 2 : 1;
    if (k == K_BF16 || k == K_F32) return k == K_BF16 ? push(inv, name, "BF16", 2, nd, r, c) : push(inv, name, "F32", 4, nd, r, c);
    int rc = k == K_FP4 ? push(inv, name, "I8", 1, 2, r, (c + 1) / 2) : push(inv, name, "F8_E4M3", 1, 2, r, c);
    snprintf(name, sizeof name, "%s%.*s.scale", prefix, (int)strlen(base) - 7, base); /* X.weight -> X.scale */
    int64_t sr = k == K_FP8 ? (r + 31) / 32 : r;
    return rc || push(inv, name, "F8_E8M0", 1, 2, sr, (c + 31) / 32);
}

/* What a backbone layer and a DSpark block share: norms, mHC, attention, the MoE with E experts. */
static int add_block(inventory *inv, const config *c, const char *p, int32_t E) {
    int64_t dim = c->dim, mix = (int64_t)(2 + c->hc_mult) * c->hc_mult, hcd = (int64_t)c->hc_mult * dim;
    int64_t hd = c->head_dim, qr = c->q_lora_rank, H = c->n_heads, G = c->o_groups, orank = c->o_lora_rank;
    int64_t inter = c->moe_inter_dim, sh = (int64_t)c->n_shared_experts * inter;
    if (add(inv, p, K_BF16, dim, 0, "attn_norm.weight") || add(inv, p, K_BF16, dim, 0, "ffn_norm.weight"))
        return -1;
    for (int f = 0; f < 2; f++) {
        const char *s = f ? "ffn" : "attn";
        if (add(inv, p, K_F32, mix, hcd, "hc_%s_fn", s) || add(inv, p, K_F32, mix, 0, "hc_%s_base", s) ||
            add(inv, p, K_F32, 3, 0, "hc_%s_scale", s))
            return -1;
    }
    if (add(inv, p, K_F32, H, 0, "attn.attn_sink") || add(inv, p, K_FP8, qr, dim, "attn.wq_a.weight") ||
        add(inv, p, K_FP8, H * hd, qr, "attn.wq_b.weight") || add(inv, p, K_FP8, hd, dim, "attn.wkv.weight") ||
        add(inv, p, K_FP8, G * orank, H * hd / G, "attn.wo_a.weight") ||
        add(inv, p, K_FP8, dim, G * orank, "attn.wo_b.weight") || add(inv, p, K_BF16, qr, 0, "attn.q_norm.weight") ||
        add(inv, p, K_BF16, hd, 0, "attn.kv_norm.weight") || add(inv, p, K_BF16, E, dim, "ffn.gate.weight") ||
        add(inv, p, K_F32, E, 0, "ffn.gate.bias") || add(inv, p, K_F32, E, 0, "ffn.gate.bias_vl"))
        return -1;
    for (int32_t e = 0; e < E; e++)
        if (add(inv, p, K_FP4, inter, dim, "ffn.experts.%d.w1.weight", e) ||
            add(inv, p, K_FP4, dim, inter, "ffn.experts.%d.w2.weight", e) ||
            add(inv, p, K_FP4, inter, dim, "ffn.experts.%d.w3.weight", e))
            return -1;
    return sh > 0 && (add(inv, p, K_FP8, sh, dim, "ffn.shared_experts.w1.weight") ||
                      add(inv, p, K_FP8, dim, sh, "ffn.shared_experts.w2.weight") ||
                      add(inv, p, K_FP8, sh, dim, "ffn.shared_experts.w3.weight"))
               ? -1
               : 0;
}

/* The tensors layer l's roles add: compressor and index keys (kv source), indexer queries
 * (index source), Engram. */
static int add_roles(inventory *inv, const config *c, const char *p, int32_t l) {
    int64_t dim = c->dim, hd = c->head_dim, ihd = c->index_head_dim, hc = c->hc_mult, ehd = c->engram_head_dim;
    if (c->is_kv_source[l] &&
        (add(inv, p, K_BF16, hd, dim, "attn.compressor.wkv.weight") ||
         (c->compress_ratio[l] > 1 && add(inv, p, K_BF16, hd, dim, "attn.compressor.wgate.weight")) ||
         add(inv, p, K_BF16, hd, 0, "attn.compressor.norm.weight") || add(inv, p, K_BF16, ihd, hd, "attn.indexer.wk.weight") ||
         add(inv, p, K_BF16, ihd, 0, "attn.indexer.k_norm.weight")))
        return -1;
    if (c->is_index_source[l] && (add(inv, p, K_FP8, (int64_t)c->index_n_heads * ihd, c->q_lora_rank, "attn.indexer.wq_b.weight") ||
                                  add(inv, p, K_BF16, c->index_n_heads, dim, "attn.indexer.weights_proj.weight")))
        return -1;
    int ei = config_engram_index(c, l);
    return ei >= 0 && (add(inv, p, K_FP8_ROWS, c->engram_rows[ei], ehd, "engram.embed.weight") ||
                       add(inv, p, K_FP8, dim * (hc + 1), engram_cols(c) * ehd, "engram.wkv.weight") ||
                       add(inv, p, K_BF16, hc, dim, "engram.q_weight") || add(inv, p, K_BF16, hc, dim, "engram.k_weight"))
               ? -1
               : 0;
}

int inventory_build(const config *c, inventory *inv) {
    int64_t dim = c->dim, V = c->vocab_size, rank = c->dspark_markov_rank;
    char p[32];
    memset(inv, 0, sizeof *inv);
    if (add(inv, "", K_BF16, V, dim, "embed.weight")) goto fail;
    for (int32_t l = 0; l < c->n_layers; l++) {
        snprintf(p, sizeof p, "layers.%d.", l);
        if (add_block(inv, c, p, c->n_routed_experts) || add_roles(inv, c, p, l)) goto fail;
    }
    for (int32_t b = 0; b < c->n_mtp_layers; b++) {
        snprintf(p, sizeof p, "mtp.%d.", b);
        if (add_block(inv, c, p, c->dspark_n_experts)) goto fail;
        if (b == 0 && (add(inv, p, K_FP8, dim, c->dspark_n_targets * dim, "main_proj.weight") ||
                       add(inv, p, K_BF16, dim, 0, "main_norm.weight")))
            goto fail;
        if (b == c->n_mtp_layers - 1 &&
            (add(inv, p, K_BF16, dim, 0, "norm.weight") || add(inv, p, K_BF16, V, rank, "markov_head.embed.weight") ||
             add(inv, p, K_BF16, V, rank, "markov_head.head.weight") ||
             add(inv, p, K_BF16, 1, dim + rank, "confidence_head.proj.weight")))
            goto fail;
    }
    if (add(inv, "", K_BF16, dim, 0, "norm.weight") || add(inv, "", K_BF16, V, dim, "head.weight")) goto fail;
    return 0;
fail:
    inventory_free(inv);
    return -1;
}

void inventory_free(inventory *inv) {
    free(inv->t);
    memset(inv, 0, sizeof *inv);
}
