/* scalar.c - the reference kernels: plain loops, one element at a time. */
#include <math.h>

#include "kernels.h"
#include "numerics.h"

/* The canonical dense order (docs/NUMERICS.md): column i goes to partial sum i mod 16 as one
 * fused multiply-add, the columns of a partial in increasing order, and sum16 joins the 16.
 * Every other set computes exactly this, however it tiles rows, tokens and columns. */
static void scalar_dense(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T,
                         int64_t xstride, float *y, int64_t ystride) {
    (void)xs;
    for (int64_t t = 0; t < T; t++)
        for (int64_t r = r0; r < r1; r++) {
            const float *xt = x + t * xstride;
            float p[16] = {0.0f};
            for (int64_t i = 0; i < w->cols; i++) {
                float v = w->type == DT_F32    ? f32_at(w->data, r * w->cols + i)
                          : w->type == DT_BF16 ? bf16_to_f32(u16_at(w->data, r * w->cols + i))
                                               : weight_get(w, r, i);
                p[i % 16] = fmaf(xt[i], v, p[i % 16]);
            }
            y[t * ystride + (r - r0)] = sum16(p);
        }
}

static void scalar_quant(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T,
                         int64_t xstride, float *y, int64_t ystride) {
    int64_t nb = (w->cols + 31) / 32;
    for (int64_t t = 0; t < T; t++)
        for (int64_t r = r0; r < r1; r++) {
            const float *xt = x + t * xstride;
            float acc = 0.0f;
            for (int64_t b = 0; b < nb; b++) {
                double part = 0.0;
                for (int64_t i = b * 32; i < w->cols && i < b * 32 + 32; i++) part += (double)(xt[i] * weight_raw(w, r, i));
                acc += (float)part * xs[t * nb + b] * weight_block_scale(w, r, b);
            }
            y[t * ystride + (r - r0)] = acc;
        }
}

static void scalar_act_quant(const float *x, int64_t n, float *q, float *s) {
    for (int64_t b = 0; b < n; b += 32) {
        int64_t e = b + 32 < n ? b + 32 : n;
        float amax = 0.0f;
        for (int64_t i = b; i < e; i++) amax = fmaxf(amax, fabsf(x[i]));
        float sc = pow2_ceil(fmaxf(amax, 1e-4f) * (1.0f / 448.0f));
        s[b / 32] = sc;
        for (int64_t i = b; i < e; i++) {
            float v = x[i] / sc;
            v = v < -448.0f ? -448.0f : v > 448.0f ? 448.0f : v;
            q[i] = e4m3_to_f32(f32_to_e4m3(v));
        }
    }
}

const kernel_set kernels_scalar = {"scalar", scalar_dense, scalar_quant, scalar_act_quant};
