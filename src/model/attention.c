/* attention.c - DeepSeek-V4.1 attention for any compress ratio.
 *
 * One latent KV row per token serves as both key and value (MQA with K = V). Each query sees a
 * sliding window of the last window_size rows and, on compressed layers, the top-k compressed
 * entries the indexer picked; both lists go through one sparse softmax with a per-head sink
 * logit that joins the denominator only. The output is un-rotated, then projected by the
 * grouped low-rank wo_a (block-diagonal over o_groups) and wo_b.
 *
 * The window ring keeps position p in slot p % window_size. A prefill reads its own chunk
 * (each row sees its causal window inside the chunk) and then seeds the ring; a decode step
 * writes its slot first and reads the whole ring oldest first.
 *
 * A batch of sessions (dsv41_batch_forward) comes as their rows end to end: every projection,
 * the compressor's and the indexer's included, runs once over all of them; RoPE at each
 * session's positions, its ring, compressor pooling, indexer scores and top-k run per session;
 * the sparse attention of all of them is one pool job, each session's rows against its own
 * caches. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collective.h"
#include "model.h"
#include "numerics.h"
#include "pool.h"
#include "scratch.h"
#include "spec.h"

/* Rows of window keys as the ring stores them (packed) and as attention reads them (f32). */
typedef struct {
    float *kv;       /* [T][hd] */
    uint8_t *packed; /* [T][rb] */
    int32_t hd;
    size_t rb;
} key_rows;

/* rows [b, e): packed as act_quant rounds them, then kv rewritten as the values they hold */
static void pack_keys_range(void *ctx, int64_t b, int64_t e) {
    const key_rows *k = ctx;
    for (int64_t r = b; r < e; r++) {
        fp8_pack(k->kv + r * k->hd, (size_t)k->hd, k->packed + r * k->rb);
        fp8_unpack(k->packed + r * k->rb, (size_t)k->hd, k->kv + r * k->hd);
    }
}

/* kv [T][head_dim] quantized in place as the reference's act_quant does; returns the rows
 * packed for the ring [T][window_row_bytes], in the caller's scratch */
static uint8_t *pack_keys(const config *c, float *kv, int64_t T) {
    key_rows k = {kv, scratch_bytes((size_t)T * window_row_bytes(c)), c->head_dim, window_row_bytes(c)};
    pool_run(T, 2048 / c->head_dim + 1, pack_keys_range, &k);
    return k.packed;
}

/* Entries of the compressed cache unpacked into rows. */
typedef struct {
    const uint8_t *ckv;   /* [clen][rb] packed */
    const int32_t *entry; /* [n] the entry each row holds */
    int32_t hd;
    size_t rb;
    float *rows;          /* [n][hd] */
} gather_job;

static void gather_range(void *ctx, int64_t b, int64_t e) {
    const gather_job *g = ctx;
    for (int64_t r = b; r < e; r++) fp4_unpack_e4m3(g->ckv + (size_t)g->entry[r] * g->rb, (size_t)g->hd, g->rows + r * g->hd);
}

/* The compressed entries the T rows of idx [T][width] read (an id from nwin on names entry id -
 * nwin of ckv), unpacked once each into scratch rows in order of first use, and idx rewritten to
 * name those rows (from nwin on). A decode step reads its top-k entries, a prefill tile at most
 * the union of its rows', so no step copies or unpacks the whole cache. A single row's entries
 * are its top-k, distinct, so it takes them as they come, without the table over the whole
 * cache that finds the entries the rows of a tile share (were one repeated, its two rows would
 * hold the same values, read in the same order). */
static const float *gather_compressed(const config *c, const uint8_t *ckv, int64_t clen, int32_t *idx, int64_t T,
                                      int32_t width, int32_t nwin) {
    int32_t *row_of = T > 1 ? scratch_i32(clen) : NULL, n = 0; /* [clen] each entry's row, -1: none yet */
    int32_t *entry = scratch_i32(T == 1 ? width : clen < T * width ? clen : T * width);
    for (int64_t e = 0; row_of && e < clen; e++) row_of[e] = -1;
    for (int64_t i = 0; i < T * width; i++) {
        if (idx[i] < nwin) continue;
        int32_t e = idx[i] - nwin;
        if (!row_of) entry[n++] = e;
        else if (row_of[e] < 0) entry[row_of[e] = n++] = e;
        idx[i] = nwin + (row_of ? row_of[e] : n - 1);
    }
    gather_job g = {ckv, entry, c->head_dim, ckv_row_bytes(c), scratch_f32((int64_t)n * c->head_dim)};
    pool_run(n, 2048 / c->head_dim + 1, gather_range, &g);
    return g.rows;
}

/* The ring's window_size rows from slot 0 unpacked into scratch rows [window_size + after]
 * [head_dim], the last `after` left to the caller */
static float *ring_rows(const config *c, const uint8_t *ring, int64_t after) {
    float *rows = scratch_f32((c->window_size + after) * c->head_dim);
    for (int32_t i = 0; i < c->window_size; i++)
        fp8_unpack(ring + i * window_row_bytes(c), (size_t)c->head_dim, rows + (int64_t)i * c->head_dim);
    return rows;
}

/* Scores and outputs are vectors of 16 f32 lanes (v16, numerics.h), so the order of every sum
 * is fixed by this code and every build and instruction set gives the same bits. */
typedef float v8 __attribute__((vector_size(32)));
typedef float v4 __attribute__((vector_size(16)));

enum { HB = 4 }; /* heads per job item: they share every KV row they read */

typedef struct {
    const float *q, *sink;
    const float *win, *ckv; /* rows [0, nwin): the window rows; from nwin on: the compressed rows it reads */
    const int32_t *idx;
    int64_t T;
    int32_t H, D, width, nwin;
    float scale, *o;
} attn_job;

/* the KV row of index id */
static inline const float *attn_row(const attn_job *j, int32_t id) {
    return id < j->nwin ? j->win + (int64_t)id * j->D : j->ckv + (int64_t)(id - j->nwin) * j->D;
}

/* q_h . row for nh (1..HB) heads: 16 interleaved partial sums per head, added pairwise at the
 * end (lanes 0-7 + 8-15, then halves again down to one) */
static inline __attribute__((always_inline)) void dots(const float *const qh[HB], int nh, const float *row, int32_t D,
                                                       float out[HB]) {
    v16 s[HB] = {0};
    int32_t i = 0;
    for (; i + 16 <= D; i += 16) {
        const v16 r = LOAD16(row + i);
#pragma GCC unroll 4
        for (int h = 0; h < nh; h++) s[h] += LOAD16(qh[h] + i) * r;
    }
    if (i == D) { /* the fold as vector halves: the same adds, lane by lane */
        for (int h = 0; h < nh; h++) {
            v8 a = __builtin_shufflevector(s[h], s[h], 0, 1, 2, 3, 4, 5, 6, 7) +
                   __builtin_shufflevector(s[h], s[h], 8, 9, 10, 11, 12, 13, 14, 15);
            v4 b = __builtin_shufflevector(a, a, 0, 1, 2, 3) + __builtin_shufflevector(a, a, 4, 5, 6, 7);
            out[h] = (b[0] + b[2]) + (b[1] + b[3]);
        }
        return;
    }
    for (int h = 0; h < nh; h++) {
        float a[16];
        memcpy(a, &s[h], sizeof a);
        for (int l = 0; i + l < D; l++) a[l] += qh[h][i + l] * row[i + l];
        out[h] = sum16(a);
    }
}

/* One item: token t, heads [h0, h0+nh). Inlined with nh = HB for full blocks, so the
 * accumulators of every head stay in registers. */
static inline __attribute__((always_inline)) void attn_item(const attn_job *j, int64_t t, int32_t h0, const int nh,
                                                            float *score) {
    const int32_t D = j->D, width = j->width;
    const int32_t *ids = j->idx + t * width;
    const float *qh[HB];
    float mx[HB], denom[HB];
    for (int h = 0; h < HB; h++) qh[h] = j->q + (t * j->H + h0 + (h < nh ? h : 0)) * D;
    for (int h = 0; h < nh; h++) mx[h] = j->sink[h0 + h];
    for (int32_t k = 0; k < width; k++) {
        if (ids[k] < 0) {
            for (int h = 0; h < nh; h++) score[h * width + k] = -INFINITY;
            continue;
        }
        float d[HB];
        dots(qh, nh, attn_row(j, ids[k]), D, d);
        for (int h = 0; h < nh; h++) {
            score[h * width + k] = d[h] * j->scale;
            mx[h] = fmaxf(mx[h], score[h * width + k]);
        }
    }
    for (int h = 0; h < nh; h++) {
        float *sc = score + h * width;
        denom[h] = expf(j->sink[h0 + h] - mx[h]);
        for (int32_t k = 0; k < width; k++) {
            sc[k] = expf(sc[k] - mx[h]);
            denom[h] += sc[k];
        }
        for (int32_t k = 0; k < width; k++) sc[k] = ids[k] < 0 ? 0.0f : sc[k] / denom[h];
    }
    /* 32 elements of every head at a time */
    for (int32_t d0 = 0; d0 < D; d0 += 32) {
        v16 acc[HB][2] = {{{0}}};
        const int full = d0 + 32 <= D;
        for (int32_t k = 0; k < width; k++) {
            if (ids[k] < 0) continue;
            const float *kr = attn_row(j, ids[k]) + d0;
            if (full) {
                const v16 r0 = LOAD16(kr), r1 = LOAD16(kr + 16);
#pragma GCC unroll 4
                for (int h = 0; h < nh; h++) {
                    const float p = score[h * width + k];
                    acc[h][0] += p * r0;
                    acc[h][1] += p * r1;
                }
            } else {
                for (int h = 0; h < nh; h++)
                    for (int32_t i = 0; i < D - d0; i++) acc[h][i / 16][i % 16] += score[h * width + k] * kr[i];
            }
        }
        for (int h = 0; h < nh; h++) {
            float *ov = j->o + (t * j->H + h0 + h) * D + d0;
            float a[32];
            memcpy(a, acc[h], sizeof a);
            memcpy(ov, a, (size_t)(full ? 32 : D - d0) * sizeof(float));
        }
    }
    for (int h = 0; h < nh; h++) bf16_round_n(j->o + (t * j->H + h0 + h) * D, D);
}

/* Items [b, e) of (block of HB heads, token): softmax over the picked rows with the sink in the
 * max and the denominator only, then o = sum_k p_k row_k in increasing k per element. Each item
 * is computed the same way whichever thread takes it. Always inlined into attn_range and its
 * AVX-512 twin (through batch_items), which differ only in the registers the compiler uses. */
static inline __attribute__((always_inline)) void attn_items(const attn_job *j, int64_t b, int64_t e) {
    scratch_mark mark = scratch_begin();
    float *score = scratch_f32((int64_t)HB * j->width); /* [HB][width] */
    for (int64_t it = b; it < e; it++) {
        /* head block major: each thread's share holds early and late tokens alike (a prefill's
         * early tokens see fewer window rows) */
        const int64_t t = it % j->T;
        const int32_t h0 = (int32_t)(it / j->T) * HB;
        if (j->H - h0 >= HB) attn_item(j, t, h0, HB, score);
        else attn_item(j, t, h0, j->H - h0, score);
    }
    scratch_end(mark);
}

/* The jobs of several sessions end to end: job i's items are [first[i], first[i + 1]). */
typedef struct {
    const attn_job *jobs;
    const int64_t *first; /* [n + 1] */
    int32_t n;
} attn_batch;

/* Items [b, e) of the batch, each in its own session's job */
static inline __attribute__((always_inline)) void batch_items(const attn_batch *a, int64_t b, int64_t e) {
    for (int32_t i = 0; i < a->n; i++) {
        int64_t lo = b > a->first[i] ? b : a->first[i], hi = e < a->first[i + 1] ? e : a->first[i + 1];
        if (lo < hi) attn_items(&a->jobs[i], lo - a->first[i], hi - a->first[i]);
    }
}

static void attn_range(void *ctx, int64_t b, int64_t e) { batch_items(ctx, b, e); }

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static void attn_range_avx512(void *ctx, int64_t b, int64_t e) {
    batch_items(ctx, b, e);
}
#endif

/* Each job: q [T][H][D], window rows win [nwin][D] then the compressed cache ckv, sink [H], idx
 * [T][width] (-1: none) -> o [T][H][D] bf16. The jobs of all the sessions of a batch go to the
 * pool as one, split by (session, head block, token): a decode step's session alone is a few
 * items, and a pool job each would make a handshake per session and layer. Of the compressed
 * cache a job holds only the rows its indices pick, unpacked (gather_compressed): at long
 * contexts the whole cache would cost more than the attention over the few rows picked. */
static void sparse_attn(const attn_job *jobs, int32_t n) {
    scratch_mark mark = scratch_begin();
    int64_t *first = scratch_i64(n + 1);
    first[0] = 0;
    for (int32_t i = 0; i < n; i++) first[i + 1] = first[i] + jobs[i].T * ((jobs[i].H + HB - 1) / HB);
    attn_batch a = {jobs, first, n};
    void (*range)(void *, int64_t, int64_t) = attn_range;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) range = attn_range_avx512;
#endif
    pool_run(first[n], 1, range, &a);
    scratch_end(mark);
}

/* The projections of one layer's rows that attention, the compressor and the indexer read. */
typedef struct {
    float *q;     /* [T][H][hd] wq_b(q_norm(wq_a x)), rotated in place */
    float *kv;    /* [T][hd] kv_norm(wkv x), rotated and quantized in place */
    float *ckv;   /* kv source: [T][hd] comp_wkv x, else NULL */
    float *cgate; /* kv source at ratio > 1: [T][hd] comp_wgate x, else NULL */
    float *iq;    /* index source: [T][index_n_heads][index_head_dim] idx_wq_b qr, else NULL */
    float *iw;    /* index source: [T][index_n_heads] idx_weights_proj x, else NULL */
} attn_rows;

/* The window rows before a prefill tile starting at row `at` that its first row sees. */
static int64_t window_before(int64_t at, int32_t W) { return at < W - 1 ? at : W - 1; }

/* Write this call's KV rows (kv, and packed pk) into the ring and return the rows attention
 * reads, *n of them: in a prefill the tile's own rows after the window rows before it (from the
 * ring, where the tiles before wrote them), in a decode the whole ring. idx [T][stride] gets the
 * window indices. */
static const float *window_update(const batch_seq *sq, int32_t l, const float *kv, const uint8_t *pk, int32_t *idx,
                                  int32_t stride, int32_t *n) {
    dsv41_session *s = sq->s;
    const config *c = &s->m->cfg;
    int32_t W = c->window_size, hd = c->head_dim, pos = s->pos;
    int64_t T = sq->T, at = sq->at;
    size_t row = (size_t)hd * sizeof *kv, rb = window_row_bytes(c);
    uint8_t *ring = s->layers[l].window;
    if (pos == 0) {
        int64_t prev = window_before(at, W);
        const float *rows = kv;
        if (prev > 0) { /* read before the tile's rows overwrite the ring */
            float *r = scratch_f32((prev + T) * hd);
            for (int64_t p = at - prev; p < at; p++) fp8_unpack(ring + (p % W) * rb, (size_t)hd, r + (p - at + prev) * hd);
            memcpy(r + prev * hd, kv, (size_t)T * row);
            rows = r;
        }
        for (int64_t p = at + T - W > at ? at + T - W : at; p < at + T; p++) memcpy(ring + (p % W) * rb, pk + (p - at) * rb, rb);
        int32_t width = prev + T < W ? (int32_t)(prev + T) : W;
        for (int64_t t = 0; t < T; t++) {
            int64_t g = at + t, base = g - W + 1 > 0 ? g - W + 1 : 0;
            for (int32_t j = 0; j < width; j++) idx[t * stride + j] = base + j <= g ? (int32_t)(base + j - at + prev) : -1;
        }
        *n = (int32_t)(prev + T);
        return rows;
    }
    memcpy(ring + (pos % W) * rb, pk, rb);
    for (int32_t j = 0; j < W; j++) {
        int32_t slot = (pos % W + 1 + j) % W;
        idx[j] = slot > pos ? -1 : slot;
    }
    *n = W;
    return ring_rows(c, ring, 0);
}

/* One session's part of a layer's attention, on its rows of the projections p (offset to its
 * first row): RoPE at its positions, its window ring, compressor and indexer, and the job of
 * its sparse attention over its own caches into o [T][H][hd]. The job's indices and rows stay
 * in the caller's scratch. */
static attn_job attend(const batch_seq *sq, int32_t l, const attn_rows *p, float *o, dsv41_trace *tr) {
    dsv41_session *s = sq->s;
    const dsv41_model *m = s->m;
    const config *c = &m->cfg;
    const layer_weights *L = &m->layers[l];
    int32_t H = c->n_heads, hd = c->head_dim, rd = c->rope_head_dim, W = c->window_size, ratio = c->compress_ratio[l];
    int32_t pos = s->pos;
    int64_t T = sq->T, first = pos + sq->at; /* the position of the first row */
    const rope_table *rt = ratio ? &m->rope_yarn : &m->rope_plain;
    int64_t clen = ratio ? (first + T) / ratio : 0, cend = ratio ? (pos + sq->call_T) / ratio : 0;
    /* the indexer's top-k never holds more than the compressed entries of the whole call */
    int32_t wwidth = pos == 0 ? (int32_t)(window_before(sq->at, W) + T < W ? window_before(sq->at, W) + T : W) : W;
    int32_t cmax = (int32_t)(c->index_topk < cend ? c->index_topk : cend), stride = wwidth + cmax;
    int32_t *idx = scratch_i32(T * stride);
    float *q = p->q, *kv = p->kv;
    rope_rows(rt, q, T * H, H, hd, rd, first, 0);
    rope_rows(rt, kv, T, 1, hd, rd, first, 0);
    uint8_t *pk = pack_keys(c, kv, T);
    int32_t nrows, width = wwidth;
    const float *win = window_update(sq, l, kv, pk, idx, stride, &nrows);
    size_t crb = ckv_row_bytes(c);

    if (ratio) {
        shared_slots *sh = &s->shared;
        float *latent = scratch_f32(T * hd);
        int64_t nlat = 0;
        if (c->is_kv_source[l]) {
            nlat = compressor_step(s, l, p->ckv, p->cgate, T, latent);
            sh->compress_kv = s->layers[l].ckv;
        }
        /* the indexer scores the latent before it is rotated and quantized. It publishes the
         * entries offset by the window rows of the whole call (a prefill's own rows), which a
         * tile's job, whose window rows start W - 1 rows before it, shifts to its own */
        int32_t whole = pos == 0 ? (int32_t)sq->call_T : nrows, shift = nrows - whole;
        if (c->is_index_source[l] && clen > 0) indexer_select(sq, l, p->iq, p->iw, latent, nlat, whole);
        if (nlat > 0) {
            for (int64_t g = 0; g < nlat; g++)
                rope_apply(rt, latent + g * hd, hd, rd, pos == 0 ? (first / ratio + g) * ratio : pos + 1 - ratio, 0);
            for (int64_t g = 0; g < nlat; g++)
                fp4_pack_e4m3(latent + g * hd, (size_t)hd, s->layers[l].ckv + (size_t)(first / ratio + g) * crb);
        }
        int32_t cw = sh->topk_rows == sq->call_T ? sh->topk_width : 0;
        for (int64_t t = 0; t < T && cw > 0; t++) { /* none yet (a prefill too short to compress): topk may be NULL */
            const int32_t *from = sh->topk + (sq->at + t) * cw;
            for (int32_t j = 0; j < cw; j++) idx[t * stride + wwidth + j] = from[j] < 0 ? -1 : from[j] + shift;
        }
        width = wwidth + cw;
    }
    if (width < stride) /* pack rows of `width` entries */
        for (int64_t t = 1; t < T; t++) memmove(idx + t * width, idx + t * stride, (size_t)width * sizeof *idx);
    trace_f32(tr, q, 4, (int64_t[]){1, T, H, hd}, "L%d.sa_q", l);
    if (tr) { /* the golden's sa_kv: the window rows, then the compressed cache */
        float *rows = scratch_f32((nrows + clen) * hd);
        memcpy(rows, win, (size_t)nrows * hd * sizeof *rows);
        session_unpack_rows(c, s->shared.compress_kv, clen, 0, rows + (int64_t)nrows * hd);
        trace_f32(tr, rows, 3, (int64_t[]){1, nrows + clen, hd}, "L%d.sa_kv", l);
    }
    trace_i32(tr, idx, 3, (int64_t[]){1, T, width}, "L%d.sa_topk_idxs", l);
    const float *crows = clen > 0 ? gather_compressed(c, s->shared.compress_kv, clen, idx, T, width, nrows) : NULL;
    return (attn_job){q, L->attn_sink, win, crows, idx, T, H, hd, width, nrows, powf((float)hd, -0.5f), o};
}

/* attend for the T rows of a verify (s->verify, spec.c) at positions pos..: each row sees what a
 * one-token step at its position would. Its window is its own last window_size positions, read
 * from the ring as the call found it and from the call's rows (the ring then gets every row);
 * the compressor and the indexer run row by row at their positions, each indexer row against
 * the index keys that step would read and, past the candidate source, its own row's mask; the
 * top-k rows of each position go to the shared slots for the layers that reuse them. The
 * journal keeps the overwritten ring slots, the compressor tail after each row and the masks. */
static attn_job attend_verify(dsv41_session *s, int32_t l, const attn_rows *p, int64_t T, float *o) {
    const dsv41_model *m = s->m;
    const config *c = &m->cfg;
    const layer_weights *L = &m->layers[l];
    spec_journal *jn = s->verify;
    shared_slots *sh = &s->shared;
    int32_t H = c->n_heads, hd = c->head_dim, rd = c->rope_head_dim, W = c->window_size, ratio = c->compress_ratio[l];
    int32_t pos = s->pos, IH = c->index_n_heads, ihd = c->index_head_dim, nwin = W + (int32_t)T;
    const rope_table *rt = ratio ? &m->rope_yarn : &m->rope_plain;
    int64_t clen = ratio ? (pos + T) / ratio : 0;
    int32_t kmax = (int32_t)(c->index_topk < clen ? c->index_topk : clen), width = W + kmax;
    int32_t *idx = scratch_i32(T * width);
    uint8_t *ring = s->layers[l].window;
    size_t rb = window_row_bytes(c);
    rope_rows(rt, p->q, T * H, H, hd, rd, pos, 0);
    rope_rows(rt, p->kv, T, 1, hd, rd, pos, 0);
    const uint8_t *pk = pack_keys(c, p->kv, T);
    float *rows = ring_rows(c, ring, T); /* the ring's rows, then the call's */
    memcpy(rows + (int64_t)W * hd, p->kv, (size_t)(T * hd) * sizeof *rows);
    for (int64_t t = 0; t < T; t++) {
        memcpy(jn->ring_old + ((int64_t)l * T + t) * rb, ring + ((pos + t) % W) * rb, rb);
        memcpy(ring + ((pos + t) % W) * rb, pk + t * rb, rb);
        for (int32_t j = 0; j < width; j++) { /* positions p-W+1..p oldest first, as the decode ring reads them */
            int64_t q = pos + t - W + 1 + j;
            idx[t * width + j] = j >= W || q < 0 ? -1 : q >= pos ? (int32_t)(W + q - pos) : (int32_t)(q % W);
        }
    }
    if (ratio) {
        float *latent = scratch_f32(hd);
        int32_t *topk = scratch_i32(T * kmax);
        for (int64_t i = 0; i < T * kmax; i++) topk[i] = -1;
        for (int64_t t = 0; t < T; t++) {
            int32_t at = pos + (int32_t)t;
            int64_t nlat = 0;
            s->pos = at; /* the compressor and the indexer work at the row's position */
            if (c->is_kv_source[l]) {
                nlat = compressor_step(s, l, p->ckv + t * hd, p->cgate ? p->cgate + t * hd : NULL, 1, latent);
                sh->compress_kv = s->layers[l].ckv;
                if (jn->tail[l]) {
                    memcpy(jn->tail[l] + t * 2 * ratio * hd, s->layers[l].kv_state, (size_t)ratio * hd * sizeof(float));
                    memcpy(jn->tail[l] + (t * 2 + 1) * ratio * hd, s->layers[l].score_state, (size_t)ratio * hd * sizeof(float));
                }
            }
            if (c->is_index_source[l] && (at + 1) / ratio > 0) {
                sh->index_k = spec_index_owner(s, at, l);
                int cs = c->candidate_source_layer;
                if (cs >= 0 && cs < l) { /* row t's candidate blocks, as its own step's source layer left them */
                    int32_t kb = cand_blocks(c, jn->cand_width[t]);
                    if (buffer_grow((void **)&sh->cand, &sh->cand_cap, (size_t)jn->cand_cap * sizeof *sh->cand))
                        scratch_oom((size_t)jn->cand_cap * sizeof *sh->cand, "the candidate blocks");
                    memcpy(sh->cand, jn->cand + t * jn->cand_cap, (size_t)kb * sizeof *sh->cand);
                    sh->cand_rows = 1;
                    sh->cand_width = jn->cand_width[t];
                }
                int32_t k = indexer_select(&(batch_seq){s, 0, 1, 0, 1}, l, p->iq + t * IH * ihd, p->iw + t * IH, latent,
                                           nlat, nwin);
                memcpy(topk + t * kmax, sh->topk, (size_t)k * sizeof *topk);
                if (l == cs) {
                    memcpy(jn->cand + t * jn->cand_cap, sh->cand, (size_t)cand_blocks(c, sh->cand_width) * sizeof *sh->cand);
                    jn->cand_width[t] = sh->cand_width;
                }
            }
            if (nlat > 0) {
                rope_apply(rt, latent, hd, rd, at + 1 - ratio, 0);
                fp4_pack_e4m3(latent, (size_t)hd, s->layers[l].ckv + (size_t)(at / ratio) * ckv_row_bytes(c));
            }
        }
        s->pos = pos;
        if (c->is_index_source[l]) { /* every row's top-k, for the layers after this one */
            if (buffer_grow((void **)&sh->topk, &sh->topk_cap, (size_t)(T * kmax) * sizeof *sh->topk))
                scratch_oom((size_t)(T * kmax) * sizeof *sh->topk, "the top-k rows");
            memcpy(sh->topk, topk, (size_t)(T * kmax) * sizeof *topk);
            sh->topk_rows = (int32_t)T;
            sh->topk_width = kmax;
        }
        for (int64_t t = 0; t < T; t++)
            memcpy(idx + t * width + W, sh->topk + t * sh->topk_width, (size_t)kmax * sizeof *idx);
    }
    const float *crows = clen > 0 ? gather_compressed(c, sh->compress_kv, clen, idx, T, width, nwin) : NULL;
    return (attn_job){p->q, L->attn_sink, rows, crows, idx, T, H, hd, width, nwin, powf((float)hd, -0.5f), o};
}

/* p's rows from row r on */
static attn_rows rows_from(const attn_rows *p, const config *c, int64_t r) {
    int64_t hd = c->head_dim, ihd = c->index_head_dim, IH = c->index_n_heads;
    return (attn_rows){p->q + r * c->n_heads * hd, p->kv + r * hd, p->ckv ? p->ckv + r * hd : NULL,
                       p->cgate ? p->cgate + r * hd : NULL, p->iq ? p->iq + r * IH * ihd : NULL,
                       p->iw ? p->iw + r * IH : NULL};
}

/* x [T][dim] (attn_in, the rows of every session of seq end to end) -> out [T][dim]; advances
 * each session's ring, caches and shared slots. The projections read only their own row, so
 * they run once over all the rows (each weight read once for the batch); what reads a
 * session's caches runs per session. */
void attention_forward(const batch_seq *seq, int32_t count, int32_t l, const float *x, int64_t T, float *out, dsv41_trace *tr) {
    const dsv41_model *m = seq[0].s->m;
    const config *c = &m->cfg;
    const layer_weights *L = &m->layers[l];
    int32_t H = c->n_heads, hd = c->head_dim, ratio = c->compress_ratio[l], dim = c->dim, qrank = c->q_lora_rank;
    int32_t IH = c->index_n_heads;
    int kvs = ratio && c->is_kv_source[l], ixs = ratio && c->is_index_source[l];
    const rope_table *rt = ratio ? &m->rope_yarn : &m->rope_plain;
    scratch_mark mark = scratch_begin();
    float *tq = scratch_f32(T * qrank), *tkv = scratch_f32(T * hd), *qr = scratch_f32(T * qrank);
    attn_rows p = {scratch_f32(T * H * hd), scratch_f32(T * hd), kvs ? scratch_f32(T * hd) : NULL,
                   kvs && ratio > 1 ? scratch_f32(T * hd) : NULL, ixs ? scratch_f32(T * IH * c->index_head_dim) : NULL,
                   ixs ? scratch_f32(T * IH) : NULL};
    float *o = scratch_f32(T * H * hd);

    /* the quantized projections of x first, side by side, so they share one act_quant */
    linear_item items[5];
    int32_t ni = 0;
    items[ni++] = (linear_item){&L->wq_a, 0, qrank, x, T, dim, tq};
    items[ni++] = (linear_item){&L->wkv, 0, hd, x, T, dim, tkv};
    if (ixs) items[ni++] = (linear_item){&L->idx_weights_proj, 0, IH, x, T, dim, p.iw};
    if (kvs) items[ni++] = (linear_item){&L->comp_wkv, 0, hd, x, T, dim, p.ckv};
    if (p.cgate) items[ni++] = (linear_item){&L->comp_wgate, 0, hd, x, T, dim, p.cgate};
    collective_linear_rows(m, items, ni, 0);
    rms_norm(tq, L->q_norm, T, qrank, c->norm_eps, qr);
    ni = 0;
    items[ni++] = (linear_item){&L->wq_b, 0, (int64_t)H * hd, qr, T, qrank, p.q};
    if (ixs) items[ni++] = (linear_item){&L->idx_wq_b, 0, (int64_t)IH * c->index_head_dim, qr, T, qrank, p.iq};
    collective_linear_rows(m, items, ni, 0);
    rms_norm(tkv, L->kv_norm, T, hd, c->norm_eps, p.kv);

    attn_job *jobs = scratch_bytes((size_t)count * sizeof *jobs);
    for (int32_t i = 0; i < count; i++) {
        attn_rows pi = rows_from(&p, c, seq[i].row0);
        jobs[i] = seq[i].s->verify ? attend_verify(seq[i].s, l, &pi, seq[i].T, o + seq[i].row0 * H * hd)
                                   : attend(&seq[i], l, &pi, o + seq[i].row0 * H * hd, tr);
    }
    sparse_attn(jobs, count);
    trace_f32(tr, o, 4, (int64_t[]){1, T, H, hd}, "L%d.sa_o", l);
    for (int32_t i = 0; i < count; i++) /* un-rotated at each session's positions */
        rope_rows(rt, o + seq[i].row0 * H * hd, seq[i].T * H, H, hd, c->rope_head_dim, seq[i].s->pos + seq[i].at, 1);
    attention_project(m, L, o, T, out);
    scratch_end(mark);
}

void attention_project(const dsv41_model *m, const layer_weights *L, const float *o, int64_t T, float *out) {
    const config *c = &m->cfg;
    int32_t H = c->n_heads, hd = c->head_dim, G = c->o_groups, orank = c->o_lora_rank, gw = H * hd / G;
    scratch_mark mark = scratch_begin();
    float *og = scratch_f32(T * G * orank), *part = scratch_f32(G * T * orank);
    /* wo_a is block-diagonal: group g's rows see only group g's slice of every head row */
    linear_item *gitems = scratch_bytes((size_t)G * sizeof *gitems);
    for (int32_t g = 0; g < G; g++)
        gitems[g] = (linear_item){&L->wo_a, (int64_t)g * orank, orank, o + g * gw, T, (int64_t)H * hd, part + g * T * orank};
    collective_linear_rows(m, gitems, G, 0);
    for (int32_t g = 0; g < G; g++)
        for (int64_t t = 0; t < T; t++)
            memcpy(og + (t * G + g) * orank, part + (g * T + t) * orank, (size_t)orank * sizeof *part);
    collective_project(m, &L->wo_b, og, T, out);
    scratch_end(mark);
}

void attention_sparse(const config *c, const layer_weights *L, const float *q, const float *rows, int32_t nrows,
                      const int32_t *idx, int32_t width, int64_t T, float *o) {
    attn_job j = {q, L->attn_sink, rows, NULL, idx, T, c->n_heads, c->head_dim, width, nrows,
                  powf((float)c->head_dim, -0.5f), o};
    sparse_attn(&j, 1);
}
