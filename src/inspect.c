/* inspect.c - what a model is made of, what one decoded token reads from it, and what a token of
 * context takes in cache. */
#include <stdio.h>
#include <string.h>

#include "model.h"

size_t weight_bytes(const weight *w) {
    if (!w->data) return 0;
    static const int SZ[] = {4, 2, 1, 1, 1};
    size_t cols = (size_t)(w->type == DT_FP4 ? (w->cols + 1) / 2 : w->cols), n = (size_t)w->rows * cols * (size_t)SZ[w->type];
    if (w->scale) n += (size_t)((w->scale_rows == 1 ? w->rows : (w->rows + 31) / 32) * ((w->cols + 31) / 32));
    return n;
}

int layer_dense_weights(const layer_weights *L, const weight **out) {
    const weight *all[] = {&L->hc_attn_fn, &L->hc_ffn_fn, &L->wq_a, &L->wq_b, &L->wkv, &L->wo_a, &L->wo_b,
                           &L->comp_wkv, &L->comp_wgate, &L->idx_wq_b, &L->idx_weights_proj, &L->idx_wk,
                           &L->gate, &L->sw1, &L->sw2, &L->sw3, &L->eg_wkv};
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i]->data) out[n++] = all[i];
    return n;
}

typedef struct {
    size_t count[5], bytes[5];
} dtype_tally;

static void tally(dtype_tally *t, const weight *w) {
    if (!w->data) return;
    t->count[w->type]++;
    t->bytes[w->type] += weight_bytes(w);
}

/* share(n): the fraction of n items (experts, rows) this process owns; 1 for the whole model */
static double share(const dsv41_model *m, int64_t n, int whole) {
    const model_part *p = &m->part;
    return whole ? 1.0 : (double)(n * (p->rank + 1) / p->n_ranks - n * p->rank / p->n_ranks) / (double)n;
}

/* The dense matrices in full, the head, the active experts and the table rows by this
 * process's share of them (all of them when whole). */
static double decode_bytes(const dsv41_model *m, int whole) {
    const config *c = &m->cfg;
    double n = (double)(weight_bytes(&m->embed) / (size_t)c->vocab_size) + (double)weight_bytes(&m->head) * share(m, c->vocab_size, whole);
    for (int l = 0; l < c->n_layers; l++) {
        const layer_weights *L = &m->layers[l];
        const weight *dense[32];
        int k = layer_dense_weights(L, dense);
        for (int i = 0; i < k; i++) n += (double)weight_bytes(dense[i]);
        n += (double)c->n_activated_experts * share(m, c->n_routed_experts, whole) *
             (double)(weight_bytes(&L->w1[0]) + weight_bytes(&L->w2[0]) + weight_bytes(&L->w3[0]));
        if (L->engram >= 0)
            n += (double)(engram_cols(c) * weight_bytes(&L->eg_table) / (size_t)L->eg_table.rows) * share(m, L->eg_table.rows, whole);
    }
    return n;
}

size_t model_decode_bytes(const dsv41_model *m) { return (size_t)decode_bytes(m, 1); }
double part_decode_bytes(const dsv41_model *m) { return decode_bytes(m, 0); }

/* n bytes for a reader: "635822 bytes (621.0 KiB)" */
static const char *human(size_t n, char *buf, size_t cap) {
    static const char *UNIT[] = {"KiB", "MiB", "GiB", "TiB"};
    double v = (double)n / 1024.0;
    int u = 0;
    while (v >= 1024.0 && u < 3) v /= 1024.0, u++;
    snprintf(buf, cap, "%zu bytes (%.1f %s)", n, v, UNIT[u]);
    return buf;
}

void dsv41_model_describe(const dsv41_model *m, FILE *out) {
    char hb[64];
    const config *c = &m->cfg;
    fprintf(out, "config: vocab %d, dim %d, %d layers, %d heads x %d (RoPE on %d), q/o rank %d/%d in %d groups\n",
            c->vocab_size, c->dim, c->n_layers, c->n_heads, c->head_dim, c->rope_head_dim, c->q_lora_rank,
            c->o_lora_rank, c->o_groups);
    fprintf(out, "        window %d, experts %d routed (%d active) + %d shared of %d, hc %d, indexer %d x %d top %d, context %d\n",
            c->window_size, c->n_routed_experts, c->n_activated_experts, c->n_shared_experts, c->moe_inter_dim,
            c->hc_mult, c->index_n_heads, c->index_head_dim, c->index_topk, c->max_seq_len);
    fprintf(out, "layer  ratio  roles\n");
    int kv_src = -1, idx_src = -1;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->is_kv_source[l]) kv_src = l;
        if (c->is_index_source[l]) idx_src = l;
        char roles[200] = "";
        if (c->compress_ratio[l] == 0) snprintf(roles, sizeof roles, "window only");
        else snprintf(roles, sizeof roles, "compressed KV of layer %d, top-k of layer %d", kv_src, idx_src);
        if (c->is_kv_source[l]) strcat(roles, ", kv source");
        if (c->is_index_source[l]) strcat(roles, ", index source");
        if (l == c->candidate_source_layer) strcat(roles, ", candidate source");
        if (c->is_index_source[l] && c->candidate_source_layer >= 0 && c->candidate_source_layer < l)
            strcat(roles, ", masked by candidates");
        if (config_engram_index(c, l) >= 0) strcat(roles, ", engram");
        fprintf(out, "%5d  %5d  %s\n", l, c->compress_ratio[l], roles);
    }
    dtype_tally t = {{0}, {0}};
    tally(&t, &m->embed);
    tally(&t, &m->head);
    for (int l = 0; l < c->n_layers; l++) {
        const layer_weights *L = &m->layers[l];
        const weight *dense[32];
        int n = layer_dense_weights(L, dense);
        for (int i = 0; i < n; i++) tally(&t, dense[i]);
        for (int e = 0; e < c->n_routed_experts; e++) {
            tally(&t, &L->w1[e]);
            tally(&t, &L->w2[e]);
            tally(&t, &L->w3[e]);
        }
        if (L->engram >= 0) tally(&t, &L->eg_table);
    }
    static const char *DT[] = {"F32", "BF16", "F8_E4M3", "F8_E8M0", "FP4 (I8)"};
    size_t total = 0;
    fprintf(out, "matrices by storage dtype (with their block scales):\n");
    for (int d = 0; d < 5; d++)
        if (t.count[d]) {
            fprintf(out, "  %-9s %6zu tensors %14s\n", DT[d], t.count[d], human(t.bytes[d], hb, sizeof hb));
            total += t.bytes[d];
        }
    fprintf(out, "  %-23s %s\n", "total", human(total, hb, sizeof hb));
    if (m->file.tensors)
        fprintf(out, "checkpoint: %lld tensors in %d shards, %lld bytes of data; %lld tensors the text pass leaves unread "
                     "(DSpark, vision, image-span gate biases)\n", (long long)m->file.tensors, m->file.shards,
                (long long)m->file.bytes, (long long)m->file.unread);
    fprintf(out, "one decoded token reads %s of weights (dense layers, %d of %d experts per layer, "
                 "one embedding row, engram rows, the head)\n", human(model_decode_bytes(m), hb, sizeof hb),
            c->n_activated_experts, c->n_routed_experts);
    fprintf(out, "cache per token of context: %.0f bytes as held (f32), %.0f at the release's precision (FP4 compressed "
                 "KV and index keys)\n", cache_bytes_per_token(c, 0), cache_bytes_per_token(c, 1));
}

double cache_bytes_per_token(const config *c, int release) {
    double b = release ? 0.0 : 8.0;
    for (int l = 0; l < c->n_layers; l++) {
        if (!c->is_kv_source[l]) continue;
        double kv = release ? c->head_dim / 2.0 + c->head_dim / 16.0 : 4.0 * c->head_dim;
        double ik = release ? c->index_head_dim / 2.0 + c->index_head_dim / 32.0 : 4.0 * c->index_head_dim;
        b += (kv + ik) / c->compress_ratio[l];
    }
    return b;
}
