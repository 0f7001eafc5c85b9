/* neon.c - the arm64 NEON set (baseline AArch64 Advanced SIMD, no optional extensions).
 *
 * One row at a time, per token. The arithmetic is that of avx512.c:
 * quant fp4: weights become the bytes 2w+12 (a table lookup), inputs the three signed base-256
 * digits of k = 512x, and widening byte products summed in 16 and 32 bits give each block's
 * sum((2w+12) k) exactly; subtracting 12 sum(k) and one int -> f32 conversion round the exact
 * block sum once. quant fp8: each e4m3 byte becomes the f32 pattern sign | e,m << 20 (its value
 * times 2^-120), inputs are prepared as 2^112 x, and every product is split exactly into
 * t = fma(f, x, M) (summed as integer bit patterns) and the remainder (summed in f32), so the
 * block sum is exact until the one rounding that joins the two (with FPCR.FZ set, fp8 goes to the
 * scalar kernel). dense: f32 FMAs into 16 lanes, the canonical order of scalar.c.
 * Inputs outside the exact range and NaN weight codes go to the scalar kernel. */
#if defined(__aarch64__)
#include <arm_neon.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"
#include "numerics.h"

enum { CHUNK = 256 }; /* blocks of 32 prepared per pass, per token */

static int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

/* n (0..16) bytes from p, zero-filled */
static inline uint8x16_t load16(const uint8_t *p, int64_t n) {
    if (n >= 16) return vld1q_u8(p);
    uint8_t buf[16] = {0};
    if (n > 0) memcpy(buf, p, (size_t)n);
    return vld1q_u8(buf);
}

/* n (0..4) floats from p, zero-filled */
static inline float32x4_t loadf4(const float *p, int64_t n) {
    if (n >= 4) return vld1q_f32(p);
    float buf[4] = {0};
    if (n > 0) memcpy(buf, p, (size_t)n * sizeof *buf); /* a weight may sit at any byte offset (numerics.h) */
    return vld1q_f32(buf);
}

/* ================================================================ dense */

/* 16 e4m3 bytes -> 16 f32 values: f16 patterns of value * 2^-8, converted exactly, times 256 */
static inline void e4m3_16(uint8x16_t b, float32x4_t out[4]) {
    const int16x8_t m = vdupq_n_s16((int16_t)0xBFFF);
    int8x16_t s = vreinterpretq_s8_u8(b);
    int16x8_t lo = vandq_s16(vshlq_n_s16(vmovl_s8(vget_low_s8(s)), 7), m);
    int16x8_t hi = vandq_s16(vshlq_n_s16(vmovl_high_s8(s), 7), m);
    float16x8_t hl = vreinterpretq_f16_s16(lo), hh = vreinterpretq_f16_s16(hi);
    const float32x4_t k = vdupq_n_f32(256.0f);
    out[0] = vmulq_f32(vcvt_f32_f16(vget_low_f16(hl)), k);
    out[1] = vmulq_f32(vcvt_high_f32_f16(hl), k);
    out[2] = vmulq_f32(vcvt_f32_f16(vget_low_f16(hh)), k);
    out[3] = vmulq_f32(vcvt_high_f32_f16(hh), k);
}

/* 16 e2m1 codes (one per byte) -> 16 f32 values times 2 */
static inline void e2m1x2_16(uint8x16_t c, float32x4_t out[4]) {
    static const int8_t T[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};
    int8x16_t v = vqtbl1q_s8(vld1q_s8(T), c);
    int16x8_t lo = vmovl_s8(vget_low_s8(v)), hi = vmovl_high_s8(v);
    out[0] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(lo)));
    out[1] = vcvtq_f32_s32(vmovl_high_s16(lo));
    out[2] = vcvtq_f32_s32(vmovl_s16(vget_low_s16(hi)));
    out[3] = vcvtq_f32_s32(vmovl_high_s16(hi));
}

/* one row, one token, in the canonical order of scalar.c (16 columns per step, column
 * c + 4k + j to lane j of acc[k] by one FMA); returns 0 if the row holds a NaN e4m3 code */
static int dense_row(const weight *w, int64_t r, const float *xt, float *out) {
    const int64_t cols = w->cols, nb = (cols + 31) / 32;
    const uint8_t *sp = w->scale ? w->scale + (r / w->scale_rows) * nb : NULL;
    float32x4_t acc[4] = {vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0), vdupq_n_f32(0)};
    uint8x16_t nan = vdupq_n_u8(0);
    for (int64_t c = 0; c < cols; c += 16) { /* 16 inputs */
        float32x4_t wv[4], xv[4];
        for (int k = 0; k < 4; k++) xv[k] = loadf4(xt + c + 4 * k, cols - c - 4 * k);
        switch (w->type) {
        case DT_F32: {
            const float *p = (const float *)w->data + r * cols + c;
            for (int k = 0; k < 4; k++) wv[k] = loadf4(p + 4 * k, cols - c - 4 * k);
            break;
        }
        case DT_BF16: {
            const uint16_t *p = (const uint16_t *)w->data + r * cols + c;
            uint8x16_t b0 = load16((const uint8_t *)p, 2 * (cols - c)), b1 = load16((const uint8_t *)(p + 8), 2 * (cols - c - 8));
            uint16x8_t h0 = vreinterpretq_u16_u8(b0), h1 = vreinterpretq_u16_u8(b1);
            wv[0] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h0), 16));
            wv[1] = vreinterpretq_f32_u32(vshll_high_n_u16(h0, 16));
            wv[2] = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(h1), 16));
            wv[3] = vreinterpretq_f32_u32(vshll_high_n_u16(h1, 16));
            break;
        }
        case DT_E4M3: {
            uint8x16_t b = load16((const uint8_t *)w->data + r * cols + c, cols - c);
            nan = vorrq_u8(nan, vceqq_u8(vandq_u8(b, vdupq_n_u8(0x7F)), vdupq_n_u8(0x7F)));
            e4m3_16(b, wv);
            const float32x4_t s = vdupq_n_f32(e8m0_to_f32(sp[c / 32]));
            for (int k = 0; k < 4; k++) wv[k] = vmulq_f32(wv[k], s);
            break;
        }
        default: { /* DT_FP4: 8 bytes, low nibble first */
            const int64_t rb = (cols + 1) / 2;
            uint8x16_t b = load16((const uint8_t *)w->data + r * rb + c / 2, imin(8, rb - c / 2));
            uint8x8_t lo = vand_u8(vget_low_u8(b), vdup_n_u8(15)), hi = vshr_n_u8(vget_low_u8(b), 4);
            uint8x16_t codes = vcombine_u8(vzip1_u8(lo, hi), vzip2_u8(lo, hi));
            if (cols - c < 16) { /* none past cols: with a scale of 2^127 the spare nibble could be an infinity */
                static const uint8_t IOTA[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
                codes = vandq_u8(codes, vcltq_u8(vld1q_u8(IOTA), vdupq_n_u8((uint8_t)(cols - c))));
            }
            e2m1x2_16(codes, wv);
            const float32x4_t s = vdupq_n_f32(0.5f * e8m0_to_f32(sp[c / 32]));
            for (int k = 0; k < 4; k++) wv[k] = vmulq_f32(wv[k], s);
            break;
        }
        }
        for (int k = 0; k < 4; k++) acc[k] = vfmaq_f32(acc[k], wv[k], xv[k]);
    }
    /* lane j of acc[k] holds partial 4k+j: sum16's steps 8 and 4, then 2 and 1 */
    float32x4_t q = vaddq_f32(vaddq_f32(acc[0], acc[2]), vaddq_f32(acc[1], acc[3]));
    *out = vpadds_f32(vadd_f32(vget_low_f32(q), vget_high_f32(q)));
    return vmaxvq_u8(nan) == 0;
}

static void neon_dense(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T,
                       int64_t xstride, float *y, int64_t ystride) {
    if (w->type != DT_F32 && w->type != DT_BF16 && w->type != DT_E4M3 && w->type != DT_FP4) {
        kernels_scalar.dense(w, r0, r1, x, xs, T, xstride, y, ystride);
        return;
    }
    for (int64_t r = r0; r < r1; r++)
        for (int64_t t = 0; t < T; t++)
            if (!dense_row(w, r, x + t * xstride, y + t * ystride + (r - r0))) {
                /* a NaN code: the reference's element-wise path for this row */
                kernels_scalar.dense(w, r, r + 1, x, xs, T, xstride, y + (r - r0), ystride);
                break;
            }
}

/* ================================================================ quant */

/* one token's inputs for a chunk. fp4: per block the digits of k = 512x (high first), each as 16
 * even then 16 odd inputs, and 12 sum(k); fp8: 2^112 x per input. Both: the input scales. */
typedef struct {
    union {
        int8_t dig[CHUNK][6][16];
        float x[CHUNK][32];
    } u;
    int32_t c[CHUNK];
    float xs[CHUNK];
} prep;

/* Returns 0 when an input is not an integer k = 512x with |k| <= kmax. */
static int prepare(int fp4, const float *xt, const float *xst, int64_t cols, int64_t b0, int64_t nblk, prep *p) {
    const float kmax = fp4 ? 2097152.0f : 262144.0f;
    for (int64_t b = 0; b < nblk; b++) {
        int32_t ksum = 0;
        for (int j = 0; j < 32; j++) {
            int64_t c = 32 * (b0 + b) + j;
            float v = c < cols ? xt[c] : 0.0f, f = v * 512.0f;
            if (!(fabsf(f) <= kmax) || f != truncf(f)) return 0;
            int32_t k = (int32_t)f;
            if (fp4) {
                int32_t k1 = (k + 128) >> 8, k2 = (k1 + 128) >> 8;
                int e = j & 1, m = j >> 1;
                p->u.dig[b][0 + e][m] = (int8_t)k2;
                p->u.dig[b][2 + e][m] = (int8_t)(k1 - k2 * 256);
                p->u.dig[b][4 + e][m] = (int8_t)(k - k1 * 256);
                ksum += k;
            } else {
                p->u.x[b][j] = v * 0x1p112f;
            }
        }
        p->c[b] = 12 * ksum;
        p->xs[b] = xst[b0 + b];
    }
    return 1;
}

/* sum over a block of (2w+12) times the digit bytes d (16 even, 16 odd) */
static inline int32x4_t fp4_dot(uint8x16_t wl, uint8x16_t wh, const int8_t *de, const int8_t *dd) {
    int8x16_t a = vreinterpretq_s8_u8(wl), b = vreinterpretq_s8_u8(wh), e = vld1q_s8(de), o = vld1q_s8(dd);
    int16x8_t m = vmull_s8(vget_low_s8(a), vget_low_s8(e));
    m = vmlal_high_s8(m, a, e);
    m = vmlal_s8(m, vget_low_s8(b), vget_low_s8(o));
    m = vmlal_high_s8(m, b, o); /* each lane: 4 products, |.| <= 4 * 24 * 128 */
    return vpaddlq_s16(m);
}

static float fp4_row(const uint8_t *row, const uint8_t *sp, int64_t bytes, int64_t nblk, const prep *p, float acc) {
    static const uint8_t LUT[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
    const uint8x16_t lut = vld1q_u8(LUT);
    for (int64_t b = 0; b < nblk; b++) {
        uint8x16_t v = load16(row + 16 * b, bytes - 16 * b);
        uint8x16_t wl = vqtbl1q_u8(lut, vandq_u8(v, vdupq_n_u8(15))), wh = vqtbl1q_u8(lut, vshrq_n_u8(v, 4));
        int32x4_t s2 = fp4_dot(wl, wh, p->u.dig[b][0], p->u.dig[b][1]);
        int32x4_t s1 = fp4_dot(wl, wh, p->u.dig[b][2], p->u.dig[b][3]);
        int32x4_t s0 = fp4_dot(wl, wh, p->u.dig[b][4], p->u.dig[b][5]);
        int32x4_t s = vaddq_s32(vshlq_n_s32(vaddq_s32(vshlq_n_s32(s2, 8), s1), 8), s0);
        float part = (float)(vaddvq_s32(s) - p->c[b]) * 0x1p-10f;
        acc += part * p->xs[b] * e8m0_to_f32(sp[b]);
    }
    return acc;
}

/* Returns 0 if the row holds a NaN code. */
static int fp8_row(const uint8_t *row, const uint8_t *sp, int64_t bytes, int64_t nblk, const prep *p, float *acc) {
    const float32x4_t M = vdupq_n_f32(49152.0f);
    const int32x4_t mask = vdupq_n_s32((int32_t)0x87F00000u);
    uint8x16_t nan = vdupq_n_u8(0);
    for (int64_t b = 0; b < nblk; b++) {
        int32x4_t H = vdupq_n_s32(0);
        float32x4_t Ln[2] = {vdupq_n_f32(0), vdupq_n_f32(0)};
        for (int h = 0; h < 2; h++) {
            uint8x16_t v = load16(row + 32 * b + 16 * h, bytes - 32 * b - 16 * h);
            nan = vorrq_u8(nan, vceqq_u8(vandq_u8(v, vdupq_n_u8(0x7F)), vdupq_n_u8(0x7F)));
            int8x16_t s = vreinterpretq_s8_u8(v);
            int16x8_t w16[2] = {vmovl_s8(vget_low_s8(s)), vmovl_high_s8(s)};
            for (int k = 0; k < 4; k++) {
                int32x4_t w32 = k & 1 ? vmovl_high_s16(w16[k >> 1]) : vmovl_s16(vget_low_s16(w16[k >> 1]));
                float32x4_t f = vreinterpretq_f32_s32(vandq_s32(vshlq_n_s32(w32, 20), mask));
                float32x4_t X = vld1q_f32(p->u.x[b] + 16 * h + 4 * k);
                float32x4_t t = vfmaq_f32(M, f, X);
                H = vaddq_s32(H, vreinterpretq_s32_f32(t));
                Ln[k & 1] = vaddq_f32(Ln[k & 1], vfmsq_f32(vsubq_f32(t, M), f, X)); /* h - f x = -l */
            }
        }
        /* 32 patterns of t, each bits(M) + 256 h */
        int32_t hint = (int32_t)((uint32_t)vaddvq_s32(H) - 32u * 0x47400000u);
        float l = -vaddvq_f32(vaddq_f32(Ln[0], Ln[1]));
        float part = (float)hint + 256.0f * l;
        *acc += part * p->xs[b] * e8m0_to_f32(sp[b]);
    }
    return vmaxvq_u8(nan) == 0;
}

static void neon_quant(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T,
                       int64_t xstride, float *y, int64_t ystride) {
    const int fp4 = w->type == DT_FP4;
    uint64_t fpcr;
    __asm__ volatile("mrs %0, fpcr" : "=r"(fpcr));
    /* the fp8 path computes with subnormal f32 patterns, which flush-to-zero (FPCR.FZ) would flush */
    if ((!fp4 && w->type != DT_E4M3) || !w->scale || w->cols == 0 || (!fp4 && (fpcr >> 24 & 1))) {
        kernels_scalar.quant(w, r0, r1, x, xs, T, xstride, y, ystride);
        return;
    }
    const int64_t cols = w->cols, nb = (cols + 31) / 32, rowbytes = fp4 ? (cols + 1) / 2 : cols, bpb = fp4 ? 16 : 32;
    prep p;
    for (int64_t b0 = 0; b0 < nb; b0 += CHUNK) {
        const int64_t nblk = imin(CHUNK, nb - b0), bytes = imin(rowbytes - bpb * b0, bpb * nblk);
        for (int64_t t = 0; t < T; t++) {
            if (!prepare(fp4, x + t * xstride, xs + t * nb, cols, b0, nblk, &p)) {
                kernels_scalar.quant(w, r0, r1, x, xs, T, xstride, y, ystride);
                return;
            }
            for (int64_t r = r0; r < r1; r++) {
                const uint8_t *row = (const uint8_t *)w->data + r * rowbytes + bpb * b0;
                const uint8_t *sp = w->scale + (r / w->scale_rows) * nb + b0;
                float *out = y + t * ystride + (r - r0), acc = b0 == 0 ? 0.0f : *out;
                if (fp4) {
                    acc = fp4_row(row, sp, bytes, nblk, &p, acc);
                } else if (!fp8_row(row, sp, bytes, nblk, &p, &acc)) {
                    kernels_scalar.quant(w, r0, r1, x, xs, T, xstride, y, ystride);
                    return;
                }
                *out = acc;
            }
        }
    }
}

/* act_quant: (|v| + C) - C with C = 1.5 * 2^(e+20) rounds |v| in [2^e, 2^(e+1)) to the e4m3
 * grid (step 2^(e-3), 2^-9 below 2^-6) to nearest even; the sign goes back on afterwards so
 * that values rounding to zero keep it. */
static inline float32x4_t e4m3_round(float32x4_t v) {
    uint32x4_t a = vandq_u32(vreinterpretq_u32_f32(v), vdupq_n_u32(0x7FFFFFFFu));
    uint32x4_t e = vmaxq_u32(vandq_u32(a, vdupq_n_u32(0x7F800000u)), vdupq_n_u32(121u << 23));
    float32x4_t c = vreinterpretq_f32_u32(vorrq_u32(vaddq_u32(e, vdupq_n_u32(20u << 23)), vdupq_n_u32(0x00400000u)));
    float32x4_t r = vsubq_f32(vaddq_f32(vreinterpretq_f32_u32(a), c), c);
    uint32x4_t sign = vandq_u32(vreinterpretq_u32_f32(v), vdupq_n_u32(0x80000000u));
    return vreinterpretq_f32_u32(vorrq_u32(vreinterpretq_u32_f32(r), sign));
}

static void neon_act_quant(const float *x, int64_t n, float *q, float *s) {
    const float32x4_t lim = vdupq_n_f32(448.0f), nlim = vdupq_n_f32(-448.0f);
    int64_t b = 0;
    for (; b + 32 <= n; b += 32) {
        float32x4_t v[8], a = vdupq_n_f32(0.0f);
        uint32x4_t finite = vdupq_n_u32(0xFFFFFFFFu);
        for (int k = 0; k < 8; k++) {
            v[k] = vld1q_f32(x + b + 4 * k);
            float32x4_t ak = vabsq_f32(v[k]);
            finite = vandq_u32(finite, vcltq_f32(ak, vdupq_n_f32(INFINITY))); /* false for NaN too */
            a = vmaxq_f32(a, ak);
        }
        if (vminvq_u32(finite) == 0) { /* a NaN or an infinity: the scalar set's bits */
            kernels_scalar.act_quant(x + b, 32, q + b, s + b / 32);
            continue;
        }
        float sc = pow2_ceil(fmaxf(vmaxvq_f32(a), 1e-4f) * (1.0f / 448.0f));
        s[b / 32] = sc;
        float32x4_t inv = vdupq_n_f32(1.0f / sc); /* exact: sc is a power of two in [2^-22, 2^120] */
        for (int k = 0; k < 8; k++) vst1q_f32(q + b + 4 * k, e4m3_round(vminq_f32(vmaxq_f32(vmulq_f32(v[k], inv), nlim), lim)));
    }
    if (b < n) kernels_scalar.act_quant(x + b, n - b, q + b, s + b / 32);
}

const kernel_set kernels_neon = {"neon", neon_dense, neon_quant, neon_act_quant};

#endif
