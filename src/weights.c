/* weights.c - element access to weights in their storage formats, and linear().
 *
 * linear() follows the release's dispatch on the weight's dtype: an f32 weight gives an f32
 * GEMM; a bf16 weight a bf16 GEMM (f32 accumulate, one rounding); an fp8 or fp4 weight first
 * quantizes the activation per 32-block to e4m3 with a power-of-two scale (act_quant), sums
 * exact products per 32-block, scales each block partial by both scales and adds the blocks in
 * increasing order, then rounds to bf16. */
#include <stdlib.h>

#include "kernels.h"
#include "numerics.h"
#include "pool.h"
#include "scratch.h"

float weight_block_scale(const weight *w, int64_t r, int64_t b) {
    return e8m0_to_f32(w->scale[(r / w->scale_rows) * ((w->cols + 31) / 32) + b]);
}

float weight_raw(const weight *w, int64_t r, int64_t c) {
    int64_t i = r * w->cols + c;
    switch (w->type) {
    case DT_F32: return ((const float *)w->data)[i];
    case DT_BF16: return bf16_to_f32(((const uint16_t *)w->data)[i]);
    case DT_E4M3: return e4m3_to_f32(((const uint8_t *)w->data)[i]);
    case DT_E8M0: return e8m0_to_f32(((const uint8_t *)w->data)[i]);
    case DT_FP4: {
        uint8_t b = ((const uint8_t *)w->data)[r * ((w->cols + 1) / 2) + c / 2];
        return e2m1_to_f32((c & 1) ? b >> 4 : b & 15);
    }
    }
    return 0.0f;
}

float weight_get(const weight *w, int64_t r, int64_t c) {
    float v = weight_raw(w, r, c);
    return w->scale ? v * weight_block_scale(w, r, c / 32) : v;
}

static const kernel_set *active;
static uint64_t macs;

uint64_t linear_macs(void) { return __atomic_load_n(&macs, __ATOMIC_RELAXED); }

const kernel_set *kernels_current(void) { return active ? active : (active = kernels_best()); }
void kernels_use(const kernel_set *k) { active = k; }

typedef struct {
    const weight *w;
    rows_fn fn;
    int64_t row0, n, T, xstride;
    const float *x, *xs;
    float *y;
    int round;
} linear_job;

static void linear_range(void *ctx, int64_t b, int64_t e) {
    const linear_job *j = ctx;
    j->fn(j->w, j->row0 + b, j->row0 + e, j->x, j->xs, j->T, j->xstride, j->y + b, j->n);
    if (j->round)
        for (int64_t t = 0; t < j->T; t++)
            for (int64_t o = b; o < e; o++) j->y[t * j->n + o] = bf16_round(j->y[t * j->n + o]);
}

void linear_rows(const weight *w, int64_t row0, int64_t n, const float *x, int64_t T, int64_t xstride, float *y) {
    const kernel_set *k = kernels_current();
    int quant = (w->type == DT_E4M3 || w->type == DT_FP4) && w->mode == AS_STORED;
    linear_job j = {w, quant ? k->quant : k->dense, row0, n, T, xstride, x, NULL, y,
                    !(w->mode == AS_F32 || (w->type == DT_F32 && w->mode == AS_STORED))};
    scratch_mark mark = scratch_begin();
    if (quant) { /* the activation is quantized once per token, before the rows are split */
        int64_t nb = (w->cols + 31) / 32;
        float *q = scratch_f32(T * w->cols), *s = scratch_f32(T * nb);
        for (int64_t t = 0; t < T; t++) k->act_quant(x + t * xstride, w->cols, q + t * w->cols, s + t * nb);
        j.x = q;
        j.xs = s;
        j.xstride = w->cols;
    }
    /* a thread gets at least ~64k multiply-adds, so tiny projections stay on one thread */
    int64_t per = (65536 + w->cols * T - 1) / (w->cols * T);
    pool_run(n, per, linear_range, &j);
    __atomic_fetch_add(&macs, (uint64_t)(n * T * w->cols), __ATOMIC_RELAXED);
    scratch_end(mark);
}

void linear(const weight *w, const float *x, int64_t T, float *y) { linear_rows(w, 0, w->rows, x, T, w->cols, y); }
