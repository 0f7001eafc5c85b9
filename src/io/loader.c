/* loader.c - builds a model from a config and a weight source.
 *
 * The parameter list is derived from the config alone (layer roles decide which optional
 * tensors exist), and every tensor is requested with the shape the config implies. A source
 * (the golden's filler, the built-in rule, later a checkpoint) answers with the tensor in its
 * storage format or fails with a message naming the tensor. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "loader.h"

typedef struct {
    dsv41_model *m;
    weight_source *src;
    char prefix[32];
} builder;

static int mat(builder *b, weight *w, int64_t rows, int64_t cols, const char *fmt, ...) {
    char name[160];
    int n = snprintf(name, sizeof name, "%s", b->prefix);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(name + n, sizeof name - (size_t)n, fmt, ap);
    va_end(ap);
    int64_t shape[2] = {rows, cols};
    return b->src->load(b->src, b->m, name, 2, shape, w);
}

/* Vectors (norms, biases, sinks, mix scales) are small: they are held as f32. */
static float *vec(builder *b, int64_t n, const char *suffix) {
    char name[160];
    snprintf(name, sizeof name, "%s%s", b->prefix, suffix);
    int64_t shape[1] = {n};
    weight w;
    if (b->src->load(b->src, b->m, name, 1, shape, &w)) return NULL;
    float *v = model_alloc(b->m, (size_t)n * sizeof *v);
    if (!v) { set_error("%s: out of memory", name); return NULL; }
    w.rows = n;
    w.cols = 1;
    for (int64_t i = 0; i < n; i++) v[i] = weight_get(&w, i, 0);
    return v;
}

static int build_engram(builder *b, layer_weights *L, int ei) {
    const config *c = &b->m->cfg;
    int64_t hd = c->engram_head_dim, hcd = (int64_t)c->hc_mult * c->dim;
    weight q, k;
    if (mat(b, &L->eg_table, c->engram_rows[ei], hd, "engram.embed.weight") ||
        mat(b, &L->eg_wkv, (int64_t)c->dim * (c->hc_mult + 1), engram_cols(c) * hd, "engram.wkv.weight"))
        return -1;
    if (L->eg_table.type != DT_E4M3 || !L->eg_table.scale)
        return set_error("%sengram.embed.weight: the table must be e4m3 with e8m0 scales", b->prefix);
    /* the reference only ever uses q_weight * k_weight as a product; each factor is read before
     * the next load, the only lifetime a source promises (convert streams its sources) */
    L->eg_qk = model_alloc(b->m, (size_t)hcd * sizeof *L->eg_qk);
    if (!L->eg_qk) return set_error("out of memory");
    if (mat(b, &q, c->hc_mult, c->dim, "engram.q_weight")) return -1;
    for (int64_t i = 0; i < hcd; i++) L->eg_qk[i] = weight_get(&q, i / c->dim, i % c->dim);
    if (mat(b, &k, c->hc_mult, c->dim, "engram.k_weight")) return -1;
    for (int64_t i = 0; i < hcd; i++) L->eg_qk[i] *= weight_get(&k, i / c->dim, i % c->dim);
    return 0;
}

/* Layer l's weights under b's prefix, with E routed experts; a DSpark stage is layer
 * n_layers + s, which has no compressor, indexer or Engram. */
static int build_layer(builder *b, layer_weights *L, int32_t l, int64_t E) {
    const config *c = &b->m->cfg;
    int64_t dim = c->dim, mix = (int64_t)(2 + c->hc_mult) * c->hc_mult, hcd = (int64_t)c->hc_mult * dim;
    int64_t hd = c->head_dim, qr = c->q_lora_rank, H = c->n_heads, G = c->o_groups, orank = c->o_lora_rank;
    int64_t ihd = c->index_head_dim, IH = c->index_n_heads, inter = c->moe_inter_dim;
    L->engram = config_engram_index(c, l);
    if (L->engram >= 0 && build_engram(b, L, L->engram)) return -1;
    if (mat(b, &L->hc_attn_fn, mix, hcd, "hc_attn_fn") || mat(b, &L->hc_ffn_fn, mix, hcd, "hc_ffn_fn") ||
        !(L->hc_attn_base = vec(b, mix, "hc_attn_base")) || !(L->hc_ffn_base = vec(b, mix, "hc_ffn_base")) ||
        !(L->hc_attn_scale = vec(b, 3, "hc_attn_scale")) || !(L->hc_ffn_scale = vec(b, 3, "hc_ffn_scale")) ||
        !(L->attn_norm = vec(b, dim, "attn_norm.weight")) || !(L->ffn_norm = vec(b, dim, "ffn_norm.weight")) ||
        !(L->attn_sink = vec(b, H, "attn.attn_sink")) || mat(b, &L->wq_a, qr, dim, "attn.wq_a.weight") ||
        !(L->q_norm = vec(b, qr, "attn.q_norm.weight")) || mat(b, &L->wq_b, H * hd, qr, "attn.wq_b.weight") ||
        mat(b, &L->wkv, hd, dim, "attn.wkv.weight") || !(L->kv_norm = vec(b, hd, "attn.kv_norm.weight")) ||
        mat(b, &L->wo_a, G * orank, H * hd / G, "attn.wo_a.weight") ||
        mat(b, &L->wo_b, dim, G * orank, "attn.wo_b.weight"))
        return -1;
    L->wo_a.mode = AS_BF16;
    if (c->is_kv_source[l]) {
        if (mat(b, &L->comp_wkv, hd, dim, "attn.compressor.wkv.weight") ||
            (c->compress_ratio[l] > 1 && mat(b, &L->comp_wgate, hd, dim, "attn.compressor.wgate.weight")) ||
            !(L->comp_norm = vec(b, hd, "attn.compressor.norm.weight")) ||
            mat(b, &L->idx_wk, ihd, hd, "attn.indexer.wk.weight") ||
            !(L->idx_k_norm = vec(b, ihd, "attn.indexer.k_norm.weight")))
            return -1;
        if (c->compress_ratio[l] > 1) L->comp_wkv.mode = L->comp_wgate.mode = AS_F32;
    }
    if (c->is_index_source[l] && (mat(b, &L->idx_wq_b, IH * ihd, qr, "attn.indexer.wq_b.weight") ||
                                  mat(b, &L->idx_weights_proj, IH, dim, "attn.indexer.weights_proj.weight")))
        return -1;
    if (mat(b, &L->gate, E, dim, "ffn.gate.weight") || !(L->gate_bias = vec(b, E, "ffn.gate.bias"))) return -1;
    L->gate.mode = AS_F32; /* the gate scores float(x) against float(weight) */
    L->w1 = model_alloc(b->m, (size_t)E * sizeof(weight));
    L->w2 = model_alloc(b->m, (size_t)E * sizeof(weight));
    L->w3 = model_alloc(b->m, (size_t)E * sizeof(weight));
    if (!L->w1 || !L->w2 || !L->w3) return set_error("out of memory");
    for (int64_t e = 0; e < E; e++)
        if (mat(b, &L->w1[e], inter, dim, "ffn.experts.%lld.w1.weight", (long long)e) ||
            mat(b, &L->w2[e], dim, inter, "ffn.experts.%lld.w2.weight", (long long)e) ||
            mat(b, &L->w3[e], inter, dim, "ffn.experts.%lld.w3.weight", (long long)e))
            return -1;
    int64_t sh = (int64_t)c->n_shared_experts * inter;
    if (sh > 0 && (mat(b, &L->sw1, sh, dim, "ffn.shared_experts.w1.weight") ||
                   mat(b, &L->sw2, dim, sh, "ffn.shared_experts.w2.weight") ||
                   mat(b, &L->sw3, sh, dim, "ffn.shared_experts.w3.weight")))
        return -1;
    return 0;
}

/* The drafter: its stages in order, the tap projection with stage 0, the heads with the last. */
static int build_draft(builder *b) {
    dsv41_model *m = b->m;
    const config *c = &m->cfg;
    int64_t dim = c->dim, rank = c->dspark_markov_rank;
    dspark_weights *d = m->draft = model_alloc(m, sizeof *m->draft);
    if (!d || !(d->stages = model_alloc(m, (size_t)c->n_mtp_layers * sizeof *d->stages))) return set_error("out of memory");
    for (int32_t s = 0; s < c->n_mtp_layers; s++) {
        snprintf(b->prefix, sizeof b->prefix, "mtp.%d.", s);
        if (build_layer(b, &d->stages[s], c->n_layers + s, c->dspark_n_experts)) return -1;
        if (s == 0 && (mat(b, &d->main_proj, dim, c->dspark_n_targets * dim, "main_proj.weight") ||
                       !(d->main_norm = vec(b, dim, "main_norm.weight"))))
            return -1;
    }
    if (!(d->norm = vec(b, dim, "norm.weight")) || mat(b, &d->markov_embed, c->vocab_size, rank, "markov_head.embed.weight") ||
        mat(b, &d->markov_head, c->vocab_size, rank, "markov_head.head.weight") ||
        mat(b, &d->confidence, 1, dim + rank, "confidence_head.proj.weight"))
        return -1;
    /* the release holds the Markov head and the confidence projection in f32 */
    d->markov_head.mode = d->confidence.mode = AS_F32;
    return 0;
}

dsv41_model *model_build(const config *cfg, weight_source *src) {
    dsv41_model *m = calloc(1, sizeof *m);
    if (!m) { set_error("out of memory"); return NULL; }
    m->cfg = *cfg;
    m->part = (model_part){0, 1, 0, DSV41_SPLIT_EXPERTS};
    builder b = {m, src, ""};
    const config *c = &m->cfg;
    m->layers = model_alloc(m, (size_t)c->n_layers * sizeof *m->layers);
    if (!m->layers) { set_error("out of memory"); goto fail; }
    if (mat(&b, &m->embed, c->vocab_size, c->dim, "embed.weight") || !(m->norm = vec(&b, c->dim, "norm.weight")) ||
        mat(&b, &m->head, c->vocab_size, c->dim, "head.weight"))
        goto fail;
    m->head.mode = AS_F32;
    for (int32_t l = 0; l < c->n_layers; l++) {
        snprintf(b.prefix, sizeof b.prefix, "layers.%d.", l);
        if (build_layer(&b, &m->layers[l], l, c->n_routed_experts)) goto fail;
        progress_report("load: layers", l + 1, c->n_layers);
    }
    if (config_has_drafter(c) && build_draft(&b)) goto fail;
    if (rope_init(m)) goto fail;
    return m;
fail:
    m->cfg.engram_token_map = NULL; /* still owned by the caller's config */
    dsv41_model_free(m);
    return NULL;
}
