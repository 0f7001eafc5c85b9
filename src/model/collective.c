/* collective.c - the data plane of a model split across ranks: the exchanges inside a forward
 * (dist.c in lib/ holds the control: the loads, the leader's ops, the followers' loop).
 *
 * Exactness: one process adds the expert outputs in f32 in increasing expert id. A reduction
 * across ranks would add them in an order MPI chooses, so each rank's outputs travel whole
 * (bf16 values, sent as bf16) and every rank adds all of them in the one process's order.
 * Routing is computed on every rank from identical inputs, so the ranks agree on who sends
 * what without asking. Every share is contiguous ([n r / K, n (r+1) / K) of the experts, table
 * rows, head rows, and split by rows of each dense projection's rows), so a rank's part of an
 * exchange is a contiguous range of the one-process result. A row of a projection is computed
 * whole by its owner, never summed across ranks, so its bits are the one-process bits. */
#include <string.h>

#include "collective.h"
#include "kernels/kernels.h"
#include "numerics.h"
#include "scratch.h"

dsv41_dist collective_net = {0, 1, NULL, NULL, NULL, NULL, DSV41_SPLIT_EXPERTS};
static uint64_t sent_total;    /* bytes this rank sent to the others */
static uint64_t gathers_total; /* all-gathers this rank took part in */

uint64_t collective_sent(void) { return __atomic_load_n(&sent_total, __ATOMIC_RELAXED); }
uint64_t collective_gathers(void) { return __atomic_load_n(&gathers_total, __ATOMIC_RELAXED); }

void collective_gather(void *buf, const int64_t *counts) {
    const dsv41_dist *d = &collective_net;
    __atomic_fetch_add(&gathers_total, 1, __ATOMIC_RELAXED);
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

void collective_table_rows(const dsv41_model *m, const weight *table, const int64_t *rows, int64_t n, int round, float *out) {
    const int32_t K = m->part.n_ranks, me = m->part.rank;
    /* a row as stored: its codes, then its e8m0 block scales if it has them */
    const int64_t hd = table->cols, nb = table->scale ? (hd + 31) / 32 : 0, cb = (int64_t)weight_row_bytes(table), rb = cb + nb;
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
    uint8_t *codes = buf + at[me], *scales = codes + cnt[me] * cb;
    for (int64_t i = 0, j = 0; i < n; i++) {
        if (own[i] != me) continue;
        memcpy(codes + j * cb, (const uint8_t *)table->data + rows[i] * cb, (size_t)cb);
        if (nb) memcpy(scales + j * nb, table->scale + (rows[i] / table->scale_rows) * nb, (size_t)nb);
        j++;
    }
    collective_gather(buf, counts);
    for (int64_t i = 0; i < n; i++) {
        int32_t r = own[i];
        weight part = {table->type, AS_STORED, cnt[r], hd, buf + at[r], nb ? buf + at[r] + cnt[r] * cb : NULL, 1};
        for (int64_t d = 0; d < hd; d++) {
            float v = weight_get(&part, next[r], d);
            out[i * hd + d] = round ? bf16_round(v) : v;
        }
        next[r]++;
    }
    scratch_end(mark);
}

/* Runs items as linear_batch does, with items [local, n) cut by output rows: each rank computes
 * rows [n_i r / K, n_i (r+1) / K) of item i's n_i whole (a row's bits do not depend on which
 * rows run beside it), and the rows travel as values, bf16 where linear() rounds to bf16, so
 * every rank ends with every item's one-process output. Items [0, local) are this rank's own
 * (its experts), run in the same pool job. */
static void gather_rows(const dsv41_model *m, const linear_item *items, int32_t n, int32_t local) {
    const int32_t K = m->part.n_ranks, me = m->part.rank;
    scratch_mark mark = scratch_begin();
    int64_t *at = scratch_i64(K + 1), *counts = scratch_i64(K), mine = 0; /* bytes; this rank's values */
    at[0] = 0;
    for (int32_t r = 0; r < K; r++) {
        counts[r] = 0;
        for (int32_t i = local; i < n; i++) {
            int64_t nr = items[i].n * (r + 1) / K - items[i].n * r / K;
            counts[r] += items[i].T * nr * (linear_rounds(items[i].w) ? 2 : 4);
            if (r == me) mine += items[i].T * nr;
        }
        at[r + 1] = at[r] + counts[r];
    }
    uint8_t *buf = scratch_bytes((size_t)at[K] + 1);
    float *ys = scratch_f32(mine + 1); /* this rank's rows, item after item, each [T][its rows] */
    linear_item *run = scratch_bytes((size_t)n * sizeof *run);
    int32_t nrun = 0;
    int64_t off = 0;
    for (int32_t i = 0; i < local; i++) run[nrun++] = items[i];
    for (int32_t i = local; i < n; i++) {
        int64_t lo = items[i].n * me / K, nr = items[i].n * (me + 1) / K - lo;
        if (nr > 0) run[nrun++] = (linear_item){items[i].w, items[i].row0 + lo, nr, items[i].x, items[i].T, items[i].xstride, ys + off};
        off += items[i].T * nr;
    }
    linear_batch(run, nrun);
    uint8_t *p = buf + at[me];
    off = 0;
    for (int32_t i = local; i < n; i++) {
        int64_t nv = items[i].T * (items[i].n * (me + 1) / K - items[i].n * me / K);
        if (linear_rounds(items[i].w))
            for (int64_t v = 0; v < nv; v++, p += 2) { uint16_t b = f32_to_bf16(ys[off + v]); memcpy(p, &b, 2); } /* exact */
        else
            memcpy(p, ys + off, (size_t)nv * 4), p += nv * 4;
        off += nv;
    }
    collective_gather(buf, counts);
    for (int32_t r = 0; r < K; r++) {
        p = buf + at[r];
        for (int32_t i = local; i < n; i++) {
            const linear_item *it = &items[i];
            int64_t lo = it->n * r / K, nr = it->n * (r + 1) / K - lo;
            for (int64_t t = 0; t < it->T; t++) {
                float *y = it->y + t * it->n + lo;
                if (linear_rounds(it->w))
                    for (int64_t j = 0; j < nr; j++, p += 2) { uint16_t b; memcpy(&b, p, 2); y[j] = bf16_to_f32(b); }
                else
                    memcpy(y, p, (size_t)nr * 4), p += nr * 4;
            }
        }
    }
    scratch_end(mark);
}

void collective_linear(const dsv41_model *m, const weight *w, const float *x, int64_t T, float *y) {
    gather_rows(m, &(linear_item){w, 0, w->rows, x, T, w->cols, y}, 1, 0);
}

void collective_linear_rows(const dsv41_model *m, const linear_item *items, int32_t n, int32_t local) {
    if (m->part.n_ranks > 1 && m->part.rows == DSV41_SPLIT_ROWS && n > local) gather_rows(m, items, n, local);
    else linear_batch(items, n);
}

void collective_project(const dsv41_model *m, const weight *w, const float *x, int64_t T, float *y) {
    collective_linear_rows(m, &(linear_item){w, 0, w->rows, x, T, w->cols, y}, 1, 0);
}
