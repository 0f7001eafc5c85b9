/* weights.c - the reference (scalar) kernels over weights in their storage formats.
 *
 * linear() follows the release's dispatch on the weight's dtype: an f32 weight gives an f32
 * GEMM; a bf16 weight a bf16 GEMM (f32 accumulate, one rounding); an fp8 or fp4 weight first
 * quantizes the activation per 32-block to e4m3 with a power-of-two scale (act_quant), sums
 * exact products per 32-block, scales each block partial by both scales and adds the blocks in
 * increasing order, then rounds to bf16. */
#include <math.h>
#include <stdlib.h>

#include "model.h"
#include "numerics.h"

static float scale_of(const weight *w, int64_t r, int64_t c) {
    int64_t per_row = (w->cols + 31) / 32;
    return e8m0_to_f32(w->scale[(r / w->scale_rows) * per_row + c / 32]);
}

/* The weight's stored element as f32, without its block scale. */
static float raw_get(const weight *w, int64_t r, int64_t c) {
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
    float v = raw_get(w, r, c);
    return w->scale ? v * scale_of(w, r, c) : v;
}

float weight_dot(const weight *w, int64_t row, const float *x) {
    float acc = 0.0f;
    if (w->type == DT_F32) {
        const float *p = (const float *)w->data + row * w->cols;
        for (int64_t i = 0; i < w->cols; i++) acc += x[i] * p[i];
    } else if (w->type == DT_BF16) {
        const uint16_t *p = (const uint16_t *)w->data + row * w->cols;
        for (int64_t i = 0; i < w->cols; i++) acc += x[i] * bf16_to_f32(p[i]);
    } else {
        for (int64_t i = 0; i < w->cols; i++) acc += x[i] * weight_get(w, row, i);
    }
    return acc;
}

/* act_quant(x, 32, ue8m0) in GEMM mode: q holds the e4m3 values (as f32), s one scale per block. */
static void act_quant_blocks(const float *x, int64_t n, float *q, float *s) {
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

static float quant_dot(const weight *w, int64_t row, const float *q, const float *s) {
    float acc = 0.0f;
    for (int64_t b = 0; b < w->cols; b += 32) {
        int64_t e = b + 32 < w->cols ? b + 32 : w->cols;
        float part = 0.0f;
        for (int64_t i = b; i < e; i++) part += q[i] * raw_get(w, row, i);
        acc += part * s[b / 32] * scale_of(w, row, b);
    }
    return acc;
}

void linear_rows(const weight *w, int64_t row0, int64_t n, const float *x, int64_t T, int64_t xstride, float *y) {
    int quant = (w->type == DT_E4M3 || w->type == DT_FP4) && w->mode == AS_STORED;
    int f32_out = w->mode == AS_F32 || (w->type == DT_F32 && w->mode == AS_STORED);
    float *q = NULL, *s = NULL;
    if (quant) {
        q = malloc((size_t)w->cols * sizeof *q);
        s = malloc((size_t)((w->cols + 31) / 32) * sizeof *s);
        if (!q || !s) abort();
    }
    for (int64_t t = 0; t < T; t++) {
        const float *xt = x + t * xstride;
        if (quant) act_quant_blocks(xt, w->cols, q, s);
        for (int64_t o = 0; o < n; o++) {
            float acc = quant ? quant_dot(w, row0 + o, q, s) : weight_dot(w, row0 + o, xt);
            y[t * n + o] = f32_out ? acc : bf16_round(acc);
        }
    }
    free(q);
    free(s);
}

void linear(const weight *w, const float *x, int64_t T, float *y) { linear_rows(w, 0, w->rows, x, T, w->cols, y); }
