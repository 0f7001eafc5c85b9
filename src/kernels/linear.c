/* linear.c - linear(): a batch of activations times a weight in its storage format (weight.c
 * reads single elements).
 *
 * linear() follows the release's dispatch on the weight's dtype: an f32 weight gives an f32
 * GEMM; a bf16 weight a bf16 GEMM (f32 accumulate, one rounding); an fp8 or fp4 weight first
 * quantizes the activation per 32-block to e4m3 with a power-of-two scale (act_quant), sums
 * exact products per 32-block, scales each block partial by both scales and adds the blocks in
 * increasing order, then rounds to bf16. */
#include <stdlib.h>

#include "kernels/kernels.h"
#include "numerics.h"
#include "pool.h"
#include "scratch.h"

static uint64_t macs;

uint64_t linear_macs(void) { return __atomic_load_n(&macs, __ATOMIC_RELAXED); }

int linear_rounds(const weight *w) { return !(w->mode == AS_F32 || (w->type == DT_F32 && w->mode == AS_STORED)); }

typedef struct {
    const weight *w;
    rows_fn fn;
    int64_t row0, n, T, xstride;
    const float *x, *xs;
    float *y;
    int round;
} linear_job;

static void linear_range(const linear_job *j, int64_t b, int64_t e) {
    j->fn(j->w, j->row0 + b, j->row0 + e, j->x, j->xs, j->T, j->xstride, j->y + b, j->n);
    if (j->round)
        for (int64_t t = 0; t < j->T; t++) bf16_round_n(j->y + t * j->n + b, e - b);
}

typedef struct {
    const linear_job *jobs;
    const int64_t *start; /* [n + 1]: the first row of each job in the concatenation */
    const int64_t *bound; /* [parts + 1]: the rows of part p are [bound[p], bound[p+1]) */
    int32_t n;
} batch_job;

/* rows [b, e) of the jobs' rows laid end to end */
static void batch_rows(const batch_job *bj, int64_t b, int64_t e) {
    for (int32_t i = 0; i < bj->n; i++) {
        int64_t lo = b > bj->start[i] ? b : bj->start[i], hi = e < bj->start[i + 1] ? e : bj->start[i + 1];
        if (lo < hi) linear_range(&bj->jobs[i], lo - bj->start[i], hi - bj->start[i]);
    }
}

static void batch_range(void *ctx, int64_t b, int64_t e) {
    const batch_job *bj = ctx;
    batch_rows(bj, bj->bound[b], bj->bound[e]);
}

/* The relative time a row takes per input column, by storage type, as measured for one token
 * on AVX-512 (f32 and bf16 stream from memory, fp8 and fp4 are heavier per byte). It only
 * balances the threads' shares of a batch that mixes types (an expert batch holds fp4 routed
 * experts and an fp8 shared one); no value depends on it. */
static double row_cost(const weight *w, int64_t T) {
    double per = w->type == DT_F32 ? 6.0 : w->type == DT_BF16 ? 3.0 : w->type == DT_E4M3 ? 2.3 : 1.0;
    return per * (double)(w->cols > 0 ? w->cols : 1) * (double)(T + 1);
}

/* Several linears as one pool job: a decode step is a few hundred small projections, and
 * every pool job costs a handshake and ends with one thread waiting for the other, so the
 * projections that read the same activations or run side by side (an MoE's experts) go
 * together. Each row is computed the same way whichever thread takes it. */
typedef struct {
    act_quant_fn fn;
    const float *x;
    int64_t xstride, cols;
    float *q, *s;
} quant_job;

/* tokens [b, e) of an activation quantized for the quant kernels */
static void quant_range(void *ctx, int64_t b, int64_t e) {
    const quant_job *j = ctx;
    const int64_t nb = (j->cols + 31) / 32;
    for (int64_t t = b; t < e; t++) j->fn(j->x + t * j->xstride, j->cols, j->q + t * j->cols, j->s + t * nb);
}

void linear_batch(const linear_item *items, int32_t n) {
    const kernel_set *k = kernels_current();
    scratch_mark mark = scratch_begin();
    linear_job *jobs = scratch_bytes((size_t)n * sizeof *jobs);
    int64_t *start = scratch_bytes((size_t)(n + 1) * sizeof *start), macs_all = 0;
    start[0] = 0;
    for (int32_t i = 0; i < n; i++) {
        const linear_item *it = &items[i];
        const weight *w = it->w;
        int quant = (w->type == DT_E4M3 || w->type == DT_FP4) && w->mode == AS_STORED;
        jobs[i] = (linear_job){w, quant ? k->quant : k->dense, it->row0, it->n, it->T, it->xstride, it->x, NULL, it->y,
                               linear_rounds(w)};
        start[i + 1] = start[i] + it->n;
        macs_all += it->n * it->T * w->cols;
    }
    /* The activations are quantized once, before the rows are split: a job with the previous
     * one's input (w1 and w3) shares its quantization, and a run of jobs whose inputs lie end to
     * end in one matrix (an MoE's experts over their picks) is quantized as one pool job. */
    for (int32_t i = 0, e; i < n; i = e) {
        const linear_item *it = &items[i];
        const weight *w = it->w;
        const int64_t cols = w->cols, nb = (cols + 31) / 32;
        e = i + 1;
        if (jobs[i].fn != k->quant) continue;
        int64_t rows = it->T; /* activation rows quantized together */
        for (; e < n && jobs[e].fn == k->quant && items[e].w->cols == cols && items[e].xstride == it->xstride; e++) {
            if (items[e].x == items[e - 1].x && items[e].T == items[e - 1].T) continue; /* w1 and w3 */
            if (it->xstride != cols || items[e].x != it->x + rows * cols) break;
            rows += items[e].T;
        }
        float *q = scratch_f32(rows * cols), *sc = scratch_f32(rows * nb);
        quant_job qj = {k->act_quant, it->x, it->xstride, cols, q, sc};
        pool_run(rows, 16, quant_range, &qj);
        for (int32_t j = i; j < e; j++) {
            int64_t off = (items[j].x - it->x) / (it->xstride > 0 ? it->xstride : 1);
            jobs[j].x = q + off * cols;
            jobs[j].xs = sc + off * nb;
            jobs[j].xstride = cols;
        }
    }
    /* one part per thread, cut at equal estimated time, each with at least ~64k multiply-adds
     * so tiny projections stay on one thread */
    int64_t parts = macs_all / 65536, threads = pool_threads();
    parts = parts < 1 ? 1 : parts > threads ? threads : parts;
    int64_t *bound = scratch_bytes((size_t)(parts + 1) * sizeof *bound);
    double *cost = scratch_bytes((size_t)n * sizeof *cost), total = 0.0; /* per row of each job */
    for (int32_t i = 0; i < n; i++) {
        cost[i] = row_cost(items[i].w, items[i].T);
        total += cost[i] * (double)items[i].n;
    }
    bound[0] = 0;
    double before = 0.0; /* the cost of the jobs before job i */
    for (int64_t p = 1, i = 0; p <= parts; p++) {
        double target = total * (double)p / (double)parts;
        for (; i < n && before + cost[i] * (double)items[i].n < target; i++) before += cost[i] * (double)items[i].n;
        int64_t r = p == parts || i == n ? start[n] : start[i] + (int64_t)((target - before) / cost[i]);
        r = r > start[n] ? start[n] : r;
        bound[p] = r < bound[p - 1] ? bound[p - 1] : r;
    }
    batch_job bj = {jobs, start, bound, n};
    if (parts == 1) batch_rows(&bj, 0, start[n]);
    else pool_run(parts, 1, batch_range, &bj);
    __atomic_fetch_add(&macs, (uint64_t)macs_all, __ATOMIC_RELAXED);
    scratch_end(mark);
}

void linear(const weight *w, const float *x, int64_t T, float *y) {
    linear_item it = {w, 0, w->rows, x, T, w->cols, y};
    linear_batch(&it, 1);
}
