/* engram.c - Engram n-gram hash memory, applied to the residual streams before a layer.
 *
 * Each position hashes the compressed ids of itself and up to max_ngram-1 predecessors
 * (n-grams of size 2..max_ngram, engram_n_heads hashes each) into rows of a large fp8 table.
 * The gathered rows are projected to one key per residual copy plus a shared value; each copy
 * adds the value scaled by a sigmoid gate on its normalized dot product with its key. The id
 * cache persists across calls so a decode step looks back into the prefill. */
#include <math.h>
#include <string.h>

#include "collective.h"
#include "numerics.h"
#include "pool.h"
#include "scratch.h"

/* ids [T] at s->pos -> out [T][n_engram][cols] global table rows */
void engram_hash(dsv41_session *s, const int32_t *ids, int64_t T, int64_t *out) {
    const config *c = &s->m->cfg;
    int32_t ng = c->engram_max_ngram, nh = c->engram_n_heads, cols = engram_cols(c);
    for (int64_t t = 0; t < T; t++) s->ngram_cache[s->pos + t] = c->engram_token_map[ids[t]];
    for (int64_t t = 0; t < T; t++) {
        int64_t pos = s->pos + t, tok[MAX_NGRAM];
        int blocked = 0; /* once a look-back is blocked, every further one is pad */
        for (int32_t sh = 0; sh < ng; sh++) {
            int64_t src = s->ngram_cache[pos >= sh ? pos - sh : 0];
            blocked = blocked || pos < sh || src == -1;
            tok[sh] = blocked ? c->engram_pad : src;
        }
        for (int32_t li = 0; li < c->n_engram; li++) {
            uint64_t rolling = (uint64_t)tok[0] * (uint64_t)c->engram_mult[li][0];
            int64_t *o = out + (t * c->n_engram + li) * cols;
            for (int32_t i = 1; i < ng; i++) {
                rolling ^= (uint64_t)tok[i] * (uint64_t)c->engram_mult[li][i];
                for (int32_t h = 0; h < nh; h++) {
                    int32_t col = (i - 1) * nh + h;
                    int64_t p = c->engram_prime[li][col], r = (int64_t)rolling % p;
                    o[col] = (r < 0 ? r + p : r) + c->engram_offset[li][col];
                }
            }
        }
    }
}

typedef struct {
    const config *c;
    const layer_weights *L;
    const int64_t *hashes;
    int64_t *ids;
    float *emb, *h;
    const float *kv;
} engram_job;

/* tokens [b, e): their table rows into ids [T][cols] and, unless the table is split across
 * ranks, gathered into emb [T][cols][ehd] (bf16) */
static void gather_range(void *ctx, int64_t b, int64_t e) {
    const engram_job *j = ctx;
    const config *c = j->c;
    int32_t cols = engram_cols(c), ehd = c->engram_head_dim;
    for (int64_t t = b; t < e; t++)
        for (int32_t k = 0; k < cols; k++) {
            int64_t row = j->hashes[(t * c->n_engram + j->L->engram) * cols + k];
            j->ids[t * cols + k] = row;
            for (int32_t d = 0; d < ehd && j->emb; d++) j->emb[(t * cols + k) * ehd + d] = bf16_round(weight_get(&j->L->eg_table, row, d));
        }
}

/* tokens [b, e): each residual copy adds the value scaled by its gate (kv [T][(hc + 1) dim]) */
static void gate_range(void *ctx, int64_t b, int64_t e) {
    const engram_job *j = ctx;
    const config *c = j->c;
    int32_t hc = c->hc_mult, dim = c->dim;
    int64_t kvw = (int64_t)dim * (hc + 1);
    float inv_sqrt_dim = powf((float)dim, -0.5f);
    for (int64_t t = b; t < e; t++) {
        const float *value = j->kv + t * kvw + (int64_t)hc * dim;
        for (int32_t cp = 0; cp < hc; cp++) {
            float *x = j->h + (t * hc + cp) * dim;
            const float *key = j->kv + t * kvw + (int64_t)cp * dim, *qk = j->L->eg_qk + (int64_t)cp * dim;
            float xx = 0.0f, kk = 0.0f, dot = 0.0f;
            for (int32_t d = 0; d < dim; d++) {
                xx += x[d] * x[d];
                kk += key[d] * key[d];
                dot += x[d] * qk[d] * key[d];
            }
            float rstd = (1.0f / sqrtf(xx / (float)dim + c->norm_eps)) * (1.0f / sqrtf(kk / (float)dim + c->norm_eps));
            dot = dot * rstd * inv_sqrt_dim;
            float g = copysignf(sqrtf(fmaxf(fabsf(dot), 1e-6f)), dot); /* signed square root */
            float gate = 1.0f / (1.0f + expf(-g));
            for (int32_t d = 0; d < dim; d++) x[d] = bf16_round(x[d] + gate * value[d]);
        }
    }
}

/* h [T][hc][dim] in place, hashes [T][n_engram][cols] */
void engram_forward(const dsv41_model *m, int32_t l, const int64_t *hashes, int64_t T, float *h, dsv41_trace *tr) {
    const config *c = &m->cfg;
    const layer_weights *L = &m->layers[l];
    int32_t hc = c->hc_mult, dim = c->dim, cols = engram_cols(c), ehd = c->engram_head_dim;
    int64_t kvw = (int64_t)dim * (hc + 1);
    scratch_mark mark = scratch_begin();
    float *emb = scratch_f32(T * cols * ehd), *kv = scratch_f32(T * kvw);
    int split = m->part.n_ranks > 1;
    engram_job j = {c, L, hashes, scratch_i64(T * cols), split ? NULL : emb, h, kv};
    trace_f32(tr, h, 4, (int64_t[]){1, T, hc, dim}, "L%d.engram_in", l);
    pool_run(T, 16, gather_range, &j);
    if (split) collective_table_rows(m, &L->eg_table, j.ids, T * cols, 1, emb); /* each row from its owner */
    collective_project(m, &L->eg_wkv, emb, T, kv);
    trace_i64(tr, j.ids, 3, (int64_t[]){1, T, cols}, "L%d.engram_hash_ids", l);
    trace_f32(tr, emb, 4, (int64_t[]){1, T, cols, ehd}, "L%d.engram_embed", l);
    trace_f32(tr, kv, 3, (int64_t[]){1, T, kvw}, "L%d.engram_kv", l);
    pool_run(T, 16, gate_range, &j);
    trace_f32(tr, h, 4, (int64_t[]){1, T, hc, dim}, "L%d.engram_out", l);
    scratch_end(mark);
}
