/* collective.c - the data plane of a model split across ranks: the exchanges inside a forward
 * (dist.c in lib/ holds the control: the loads, the leader's ops, the followers' loop).
 *
 * Exactness: one process adds the expert outputs in f32 in increasing expert id. A reduction
 * across ranks would add them in an order MPI chooses, so each rank's outputs travel whole
 * (bf16 values, sent as bf16) and every rank adds all of them in the one process's order.
 * Routing is computed on every rank from identical inputs, so the ranks agree on who sends
 * what without asking. Every share is contiguous ([n r / K, n (r+1) / K) of the experts, table
 * rows, head rows), so a rank's part of an exchange lands where one process would have it. */
#include <string.h>

#include "collective.h"
#include "kernels/kernels.h"
#include "numerics.h"
#include "scratch.h"

dsv41_dist collective_net = {0, 1, NULL, NULL, NULL, NULL};
static uint64_t sent_total; /* bytes this rank sent to the others */

uint64_t collective_sent(void) { return __atomic_load_n(&sent_total, __ATOMIC_RELAXED); }

void collective_gather(void *buf, const int64_t *counts) {
    const dsv41_dist *d = &collective_net;
    __atomic_fetch_add(&sent_total, (uint64_t)counts[d->rank] * (uint64_t)(d->n_ranks - 1), __ATOMIC_RELAXED);
    d->allgather(d->ctx, buf, counts);
}

void collective_bcast(void *buf, int64_t n) {
    const dsv41_dist *d = &collective_net;
    if (d->rank == 0) __atomic_fetch_add(&sent_total, (uint64_t)n * (uint64_t)(d->n_ranks - 1), __ATOMIC_RELAXED);
    d->broadcast(d->ctx, buf, n);
}

/* ---- the exchanges inside a forward */
void collective_share_picks(const dsv41_model *m, int32_t E, const int64_t *first, int32_t e0, int32_t e1, float *ys) {
    const model_part *p = &m->part;
    const int32_t K = p->n_ranks;
    const int64_t dim = m->cfg.dim, p0 = first[e0], np = first[e1] - p0;
    if (np == 0) return; /* every rank sees the same routing, so all skip it */
    scratch_mark mark = scratch_begin();
    int64_t *counts = scratch_i64(K), mine0 = 0, mine1 = 0;
    for (int32_t r = 0; r < K; r++) {
        int32_t lo = (int32_t)((int64_t)E * r / K), hi = (int32_t)((int64_t)E * (r + 1) / K);
        lo = lo < e0 ? e0 : lo > e1 ? e1 : lo;
        hi = hi < e0 ? e0 : hi > e1 ? e1 : hi;
        counts[r] = (first[hi] - first[lo]) * dim * 2;
        if (r == p->rank) mine0 = first[lo] - p0, mine1 = first[hi] - p0;
    }
    uint16_t *buf = scratch_bytes((size_t)(np * dim) * sizeof *buf);
    for (int64_t i = mine0 * dim; i < mine1 * dim; i++) buf[i] = f32_to_bf16(ys[i]); /* exact: ys are bf16 */
    collective_gather(buf, counts);
    for (int64_t i = 0; i < np * dim; i++)
        if (i < mine0 * dim || i >= mine1 * dim) ys[i] = bf16_to_f32(buf[i]);
    scratch_end(mark);
}

/* the rank owning row of n rows */
static int32_t owner(int64_t row, int64_t n, int32_t K) {
    int32_t r = (int32_t)(row * K / n);
    while (r + 1 < K && n * (r + 1) / K <= row) r++;
    while (r > 0 && n * r / K > row) r--;
    return r;
}

void collective_table_rows(const dsv41_model *m, const weight *table, const int64_t *rows, int64_t n, float *out) {
    const int32_t K = m->part.n_ranks, me = m->part.rank;
    const int64_t hd = table->cols, nb = (hd + 31) / 32, rb = hd + nb; /* a row as stored: e4m3 codes, e8m0 scales */
    scratch_mark mark = scratch_begin();
    int32_t *own = scratch_i32(n);
    int64_t *counts = scratch_i64(K), *cnt = scratch_i64(K), *at = scratch_i64(K), *next = scratch_i64(K);
    memset(cnt, 0, (size_t)K * sizeof *cnt);
    for (int64_t i = 0; i < n; i++) cnt[own[i] = owner(rows[i], table->rows, K)]++;
    for (int32_t r = 0; r < K; r++) {
        counts[r] = cnt[r] * rb;
        at[r] = r ? at[r - 1] + counts[r - 1] : 0;
        next[r] = 0;
    }
    uint8_t *buf = scratch_bytes((size_t)(n * rb) + 1);
    /* this rank's part: its rows' codes in slot order, then their scales */
    uint8_t *codes = buf + at[me], *scales = codes + cnt[me] * hd;
    for (int64_t i = 0, j = 0; i < n; i++) {
        if (own[i] != me) continue;
        memcpy(codes + j * hd, (const uint8_t *)table->data + rows[i] * hd, (size_t)hd);
        memcpy(scales + j * nb, table->scale + (rows[i] / table->scale_rows) * nb, (size_t)nb);
        j++;
    }
    collective_gather(buf, counts);
    for (int64_t i = 0; i < n; i++) {
        int32_t r = own[i];
        weight part = {DT_E4M3, AS_STORED, cnt[r], hd, buf + at[r], buf + at[r] + cnt[r] * hd, 1};
        for (int64_t d = 0; d < hd; d++) out[i * hd + d] = bf16_round(weight_get(&part, next[r], d));
        next[r]++;
    }
    scratch_end(mark);
}

void collective_linear(const dsv41_model *m, const weight *w, const float *x, int64_t T, float *y) {
    const int32_t K = m->part.n_ranks, me = m->part.rank;
    const int64_t R = w->rows;
    scratch_mark mark = scratch_begin();
    int64_t *counts = scratch_i64(K);
    float *buf = scratch_f32(T * R); /* rank r's part: [T][its rows] */
    for (int32_t r = 0; r < K; r++) counts[r] = T * (R * (r + 1) / K - R * r / K) * (int64_t)sizeof *buf;
    int64_t lo = R * me / K, n = R * (me + 1) / K - lo;
    if (n > 0) {
        linear_item it = {w, lo, n, x, T, w->cols, buf + T * lo};
        linear_batch(&it, 1);
    }
    collective_gather(buf, counts);
    for (int32_t r = 0; r < K; r++) {
        int64_t r0 = R * r / K, nr = R * (r + 1) / K - r0;
        for (int64_t t = 0; t < T; t++) memcpy(y + t * R + r0, buf + T * r0 + t * nr, (size_t)nr * sizeof *y);
    }
    scratch_end(mark);
}
