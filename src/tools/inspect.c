/* inspect.c - what a model is made of and what a token of context takes in cache, for
 * dsv41_model_describe (model.c counts what one decoded token reads). */
#include <stdio.h>
#include <string.h>

#include "model.h"

typedef struct {
    size_t count[5], bytes[5];
} dtype_tally;

static void tally(dtype_tally *t, const weight *w) {
    if (!w->data) return;
    t->count[w->type]++;
    t->bytes[w->type] += weight_bytes(w);
}

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
    fprintf(out, "cache per token of context: %.0f bytes as a session holds it, %.0f of them the compressed KV and index "
                 "keys packed at the release's precision (FP4)\n", cache_bytes_per_token(c, 0), cache_bytes_per_token(c, 1));
}
