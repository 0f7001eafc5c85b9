/* avx2_many.c - the AVX2 set's quant kernels for calls of many tokens (a prefill, an expert
 * with several picks); avx2.c hands them every call of MANY_T tokens or more (avx2.h), and its
 * own tiles take what this returns. A file of its own so that it compiles beside avx2.c.
 *
 * The few-token tiles spend five instructions per 8 products (fp8) because AVX2 has no byte
 * dot product that keeps an exact sum cheaply. With many tokens both sides can become 16-bit
 * integers once per call, and vpmaddwd multiplies two columns of 8 tokens at a time into int32
 * lanes exactly:
 *   input  k = 512x (an integer, |k| <= 448 * 512) = 8k' + r: k' = k >> 3 fits 16 bits, and
 *          r = k & 7 (0..7) is 0 unless |x| < 1/8 (an e4m3 value of 1/8 or more is a multiple
 *          of 1/64), so its products run only for the blocks that have such an input;
 *   fp8    W = 512w = 128 Wh + Wl, Wh = W >> 7 in [-1792, 1792], Wl = W & 127: the block sum
 *          1024 sum(Wh k') + 8 sum(Wl k') + 128 sum(Wh r) + sum(Wl r) = 2^18 sum(w x), each of the
 *          four sums of 32 products inside int32 (|sum(Wh k')| <= 32 * 1792 * 28672 < 2^31),
 *          joined in f64 (exact below 2^53) and rounded once to f32 as the reference's f64 sum;
 *   fp4    2w in [-12, 12]: 8 sum(2w k') + sum(2w r) = 1024 sum(w x) fits int32, and one
 *          int -> f32 conversion rounds it once.
 * Then each block's part times the input scale times the weight's block scale is added to the
 * row's sum in block order, as the reference does.
 *
 * Layout: tokens go 8 to a vector ("group"), so a weight pair is one broadcast dword and no sum
 * is ever horizontal; the inputs are prepared once per chunk of MANY_TC tokens and MANY_CK
 * columns and serve every row, and the weights are decoded once per row block and chunk and
 * serve every token of it. A tile is 2 rows (fp8: a high and a low digit each) or 4 rows (fp4)
 * by 2 groups, which keeps its int32 sums, the two input vectors and a broadcast weight in the
 * 16 registers. Sums of a row and token live in y between column chunks. */

#if defined(__x86_64__)
#include <stdlib.h>

#include "avx2.h"
#include "numerics.h"
#include "tile.h"

enum {
    MANY_TC = 128,  /* tokens per prepared chunk */
    MANY_CK = 2048, /* columns per chunk: 64 blocks, 1024 pairs */
    MANY_RB = 16,   /* rows per decoded block */
};

/* A chunk's inputs: ng groups of 8 tokens (even; the last may be padding) by np column pairs. */
typedef struct {
    int64_t ng, np;
    int32_t *k;     /* [ng][np][8]: lane j, the pair (k'_c, k'_c+1) of the group's token j as int16 */
    int32_t *r;     /* [ng][np][8]: the same pair of r */
    uint8_t *small; /* [ng][np / 16]: whether a block has an r other than 0 */
    float *xs;      /* [ng][np / 16][8]: the tokens' input scales */
} many_in;

/* tokens [0, nt) of x (rows xstride apart, scales xs nb apart) for blocks [b0, b0 + np/16) of
 * cols columns; 0 if an input is not k/512 with |k| <= 448 * 512 */
INL int many_prepare(const float *x, const float *xs, int64_t xstride, int64_t nb, int64_t nt, int64_t cols,
                     int64_t b0, many_in *in) {
    const int64_t np = in->np, nblk = np / 16;
    __m256i bad = _mm256_setzero_si256();
    for (int64_t g = 0; g < in->ng; g++)
        for (int j = 0; j < 8; j++) {
            const int64_t t = 8 * g + j;
            for (int64_t b = 0; b < nblk; b++) {
                __m256i any = _mm256_setzero_si256();
                for (int q = 0; q < 4; q++) { /* 8 columns: 4 pairs */
                    const int64_t c = 32 * (b0 + b) + 8 * q, p = 16 * b + 4 * q;
                    __m256 v = t < nt ? loadf_partial(x + t * xstride + c, cols - c) : _mm256_setzero_ps();
                    __m256i k = to_k(v, 448 * 512, &bad);
                    __m256i kp = _mm256_srai_epi32(k, 3), r = _mm256_and_si256(k, _mm256_set1_epi32(7));
                    any = _mm256_or_si256(any, r);
                    _Alignas(16) int32_t pk[4], pr[4];
                    _mm_store_si128((__m128i *)pk, _mm_packs_epi32(_mm256_castsi256_si128(kp), _mm256_extracti128_si256(kp, 1)));
                    _mm_store_si128((__m128i *)pr, _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1)));
                    for (int i = 0; i < 4; i++) {
                        in->k[((g * np) + p + i) * 8 + j] = pk[i];
                        in->r[((g * np) + p + i) * 8 + j] = pr[i];
                    }
                }
                if (j == 0) in->small[g * nblk + b] = 0;
                in->small[g * nblk + b] |= !_mm256_testz_si256(any, any);
                in->xs[(g * nblk + b) * 8 + j] = t < nt ? xs[t * nb + b0 + b] : 0.0f;
            }
        }
    return _mm256_testz_si256(bad, bad);
}

/* Row r's columns [32 b0, 32 b0 + 2 np) decoded: fp8 to dwords [np][2] (the pairs of Wh, then of
 * Wl), fp4 to dwords [np] (the pair of 2w); its block scales to ws[np / 16]. Returns 0 for a
 * NaN code. */
INL int many_decode(const weight *w, int64_t r, int64_t b0, int64_t np, int32_t *out, float *ws) {
    const int64_t cols = w->cols, nb = (cols + 31) / 32;
    const uint8_t *sp = w->scale + (r / w->scale_rows) * nb + b0;
    for (int64_t b = 0; b < np / 16; b++) ws[b] = e8m0_to_f32(sp[b]);
    if (w->type == DT_FP4) {
        const __m256i m4 = _mm256_set1_epi8(15), /* code -> 2w */
            lut = _mm256_sub_epi8(_mm256_loadu_si256((const __m256i *)FP4_LUT), _mm256_set1_epi8(12));
        const int64_t rowbytes = (cols + 1) / 2, c0 = 16 * b0; /* a pair is a byte */
        const uint8_t *p = (const uint8_t *)w->data + r * rowbytes + c0;
        for (int64_t i = 0; i < np; i += 32) {
            const int64_t n = rowbytes - c0 - i;
            __m256i v = n >= 32 ? _mm256_loadu_si256((const __m256i *)(p + i)) : load_partial(p + i, n);
            __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4));
            __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
            __m256i a = _mm256_unpacklo_epi8(lo, hi), c = _mm256_unpackhi_epi8(lo, hi); /* pairs 0-7, 16-23 | 8-15, 24-31 */
            __m256i *o = (__m256i *)(out + i);
            _mm256_store_si256(o, _mm256_cvtepi8_epi16(_mm256_castsi256_si128(a)));
            _mm256_store_si256(o + 1, _mm256_cvtepi8_epi16(_mm256_castsi256_si128(c)));
            _mm256_store_si256(o + 2, _mm256_cvtepi8_epi16(_mm256_extracti128_si256(a, 1)));
            _mm256_store_si256(o + 3, _mm256_cvtepi8_epi16(_mm256_extracti128_si256(c, 1)));
        }
        return 1;
    }
    const int64_t c0 = 32 * b0;
    const uint8_t *p = (const uint8_t *)w->data + r * cols + c0;
    const __m256i order = _mm256_setr_epi32(0, 2, 1, 3, 4, 6, 5, 7);
    __m128i nan = _mm_setzero_si128();
    for (int64_t i = 0; i < 2 * np; i += 16) {
        __m128i b = bytes16(p + i, cols - c0 - i);
        nan = _mm_max_epu8(nan, _mm_or_si128(b, _mm_set1_epi8((char)0x80)));
        for (int half = 0; half < 2; half++) { /* W = 512w, exactly */
            __m256 v = e4m3_8(half ? _mm_unpackhi_epi64(b, b) : b);
            __m256i W = _mm256_cvtps_epi32(_mm256_mul_ps(v, _mm256_set1_ps(512.0f)));
            __m256i hl = _mm256_packs_epi32(_mm256_srai_epi32(W, 7), _mm256_and_si256(W, _mm256_set1_epi32(127)));
            _mm256_store_si256((__m256i *)(out + i + 8 * half), _mm256_permutevar8x32_epi32(hl, order));
        }
    }
    return _mm_movemask_epi8(_mm_cmpeq_epi8(nan, _mm_set1_epi8((char)0xFF))) == 0;
}

/* sum(Wh v) and sum(Wl v) over one block (16 pairs) of rows w[0..1] and groups V[0..1] */
INL void fp8_sums(const int32_t *const w[2], const __m256i *const V[2], __m256i H[2][2], __m256i L[2][2]) {
#pragma GCC unroll 2
    for (int i = 0; i < 2; i++)
#pragma GCC unroll 2
        for (int g = 0; g < 2; g++) H[i][g] = L[i][g] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int p = 0; p < 16; p++) {
        const __m256i v0 = _mm256_load_si256(V[0] + p), v1 = _mm256_load_si256(V[1] + p);
#pragma GCC unroll 2
        for (int i = 0; i < 2; i++) {
            const __m256i wh = _mm256_set1_epi32(w[i][2 * p]), wl = _mm256_set1_epi32(w[i][2 * p + 1]);
            H[i][0] = _mm256_add_epi32(H[i][0], _mm256_madd_epi16(wh, v0));
            H[i][1] = _mm256_add_epi32(H[i][1], _mm256_madd_epi16(wh, v1));
            L[i][0] = _mm256_add_epi32(L[i][0], _mm256_madd_epi16(wl, v0));
            L[i][1] = _mm256_add_epi32(L[i][1], _mm256_madd_epi16(wl, v1));
        }
    }
}

/* 4 lanes of h mh + l ml in f64: exact, as both are integers and the sum is below 2^53 */
INL __m256d join4(__m128i h, __m128i l, double mh, double ml) {
    return _mm256_fmadd_pd(_mm256_cvtepi32_pd(h), _mm256_set1_pd(mh), _mm256_mul_pd(_mm256_cvtepi32_pd(l), _mm256_set1_pd(ml)));
}

/* a block's part, 2^-18 (1024 sum(Wh k') + 8 sum(Wl k')) [+ 2^-18 (128 sum(Wh r) + sum(Wl r))],
 * rounded once to f32 */
INL __m256 fp8_part(__m256i h, __m256i l, const __m256i *ch, const __m256i *cl) {
    __m256d lo = join4(_mm256_castsi256_si128(h), _mm256_castsi256_si128(l), 0x1p-8, 0x1p-15);
    __m256d hi = join4(_mm256_extracti128_si256(h, 1), _mm256_extracti128_si256(l, 1), 0x1p-8, 0x1p-15);
    if (ch) {
        lo = _mm256_add_pd(lo, join4(_mm256_castsi256_si128(*ch), _mm256_castsi256_si128(*cl), 0x1p-11, 0x1p-18));
        hi = _mm256_add_pd(hi, join4(_mm256_extracti128_si256(*ch, 1), _mm256_extracti128_si256(*cl, 1), 0x1p-11, 0x1p-18));
    }
    return _mm256_insertf128_ps(_mm256_castps128_ps256(_mm256_cvtpd_ps(lo)), _mm256_cvtpd_ps(hi), 1);
}

/* rows w[0..1] (decoded, with block scales ws[0..1]) by groups g, g+1 over the chunk's blocks */
INL void fp8_many_tile(const int32_t *const w[2], const float *const ws[2], const many_in *in, int64_t g, __m256 acc[2][2]) {
    const int64_t np = in->np, nblk = np / 16;
    for (int64_t b = 0; b < nblk; b++) {
        const int32_t *wb[2] = {w[0] + 32 * b, w[1] + 32 * b};
        const __m256i *K[2] = {(const __m256i *)in->k + g * np + 16 * b, (const __m256i *)in->k + (g + 1) * np + 16 * b};
        __m256i H[2][2], L[2][2], CH[2][2], CL[2][2];
        fp8_sums(wb, K, H, L);
        const int small = in->small[g * nblk + b] | in->small[(g + 1) * nblk + b];
        if (small) {
            const __m256i *R[2] = {(const __m256i *)in->r + g * np + 16 * b, (const __m256i *)in->r + (g + 1) * np + 16 * b};
            fp8_sums(wb, R, CH, CL);
        }
#pragma GCC unroll 2
        for (int gg = 0; gg < 2; gg++) {
            const __m256 xs = _mm256_load_ps(in->xs + ((g + gg) * nblk + b) * 8);
#pragma GCC unroll 2
            for (int i = 0; i < 2; i++) {
                __m256 part = small ? fp8_part(H[i][gg], L[i][gg], &CH[i][gg], &CL[i][gg]) : fp8_part(H[i][gg], L[i][gg], NULL, NULL);
                acc[i][gg] = _mm256_add_ps(acc[i][gg], _mm256_mul_ps(_mm256_mul_ps(part, xs), _mm256_set1_ps(ws[i][b])));
            }
        }
    }
}

/* sum(2w v) over one block (16 pairs) of rows w[0..3] and groups V[0..1] */
INL void fp4_sums(const int32_t *const w[4], const __m256i *const V[2], __m256i A[4][2]) {
#pragma GCC unroll 4
    for (int i = 0; i < 4; i++) A[i][0] = A[i][1] = _mm256_setzero_si256();
#pragma GCC unroll 4
    for (int p = 0; p < 16; p++) {
        const __m256i v0 = _mm256_load_si256(V[0] + p), v1 = _mm256_load_si256(V[1] + p);
#pragma GCC unroll 4
        for (int i = 0; i < 4; i++) {
            const __m256i wv = _mm256_set1_epi32(w[i][p]);
            A[i][0] = _mm256_add_epi32(A[i][0], _mm256_madd_epi16(wv, v0));
            A[i][1] = _mm256_add_epi32(A[i][1], _mm256_madd_epi16(wv, v1));
        }
    }
}

/* rows w[0..3] by groups g, g+1 over the chunk's blocks */
INL void fp4_many_tile(const int32_t *const w[4], const float *const ws[4], const many_in *in, int64_t g, __m256 acc[4][2]) {
    const int64_t np = in->np, nblk = np / 16;
    for (int64_t b = 0; b < nblk; b++) {
        const int32_t *wb[4] = {w[0] + 16 * b, w[1] + 16 * b, w[2] + 16 * b, w[3] + 16 * b};
        const __m256i *K[2] = {(const __m256i *)in->k + g * np + 16 * b, (const __m256i *)in->k + (g + 1) * np + 16 * b};
        __m256i A[4][2], C[4][2];
        fp4_sums(wb, K, A);
        if (in->small[g * nblk + b] | in->small[(g + 1) * nblk + b]) {
            const __m256i *R[2] = {(const __m256i *)in->r + g * np + 16 * b, (const __m256i *)in->r + (g + 1) * np + 16 * b};
            fp4_sums(wb, R, C);
        } else
            for (int i = 0; i < 4; i++) C[i][0] = C[i][1] = _mm256_setzero_si256();
        for (int gg = 0; gg < 2; gg++) {
            const __m256 xs = _mm256_load_ps(in->xs + ((g + gg) * nblk + b) * 8);
            for (int i = 0; i < 4; i++) {
                __m256i s = _mm256_add_epi32(_mm256_slli_epi32(A[i][gg], 3), C[i][gg]);
                __m256 part = _mm256_mul_ps(_mm256_cvtepi32_ps(s), _mm256_set1_ps(0x1p-10f));
                acc[i][gg] = _mm256_add_ps(acc[i][gg], _mm256_mul_ps(_mm256_mul_ps(part, xs), _mm256_set1_ps(ws[i][b])));
            }
        }
    }
}

/* y's sums so far (0 before the first chunk) of tile rows k (rows i + k of the row block at rb, whose
 * first row is y's column rb - r0) and groups g, g+1 of the tokens from t0, into acc[k][0..1] */
INL void sums_load(const float *y, int64_t ystride, int64_t T, int64_t t0, int64_t g, int64_t col, int first, __m256 acc[2]) {
    for (int gg = 0; gg < 2; gg++) {
        _Alignas(32) float v[8] = {0};
        for (int j = 0; j < 8 && !first; j++) {
            const int64_t t = t0 + 8 * (g + gg) + j;
            if (t < T) v[j] = y[t * ystride + col];
        }
        acc[gg] = _mm256_load_ps(v);
    }
}

INL void sums_store(float *y, int64_t ystride, int64_t T, int64_t t0, int64_t g, int64_t col, const __m256 acc[2]) {
    for (int gg = 0; gg < 2; gg++) {
        _Alignas(32) float v[8];
        _mm256_store_ps(v, acc[gg]);
        for (int j = 0; j < 8; j++) {
            const int64_t t = t0 + 8 * (g + gg) + j;
            if (t < T) y[t * ystride + col] = v[j];
        }
    }
}

/* avx2.h: from MANY_T tokens, or 0 to leave the call to the few-token tiles */
TGT int avx2_many_quant(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T,
                          int64_t xstride, float *y, int64_t ystride) {
    enum { NG = (MANY_TC + 15) / 16 * 2, NP = MANY_CK / 2, NB = NP / 16 };
    const int fp4 = w->type == DT_FP4, R = fp4 ? 4 : 2, dw = fp4 ? 1 : 2; /* rows per tile, dwords per pair */
    const int64_t cols = w->cols, nb = (cols + 31) / 32;
    /* one allocation, each part a multiple of 32 bytes: k, r, xs, the decoded rows, their scales, small */
    const size_t kb = (size_t)NG * NP * 32, xsb = (size_t)NG * NB * 32, wdb = (size_t)MANY_RB * NP * 8, wsb = (size_t)MANY_RB * NB * 4;
    uint8_t *mem = aligned_alloc(32, (2 * kb + xsb + wdb + wsb + NG * NB + 31) / 32 * 32);
    if (!mem) return 0;
    many_in in = {0, 0, (int32_t *)mem, (int32_t *)(mem + kb), mem + 2 * kb + xsb + wdb + wsb, (float *)(mem + 2 * kb)};
    int32_t *wd = (int32_t *)(mem + 2 * kb + xsb);   /* [MANY_RB][NP * dw] */
    float *wsd = (float *)(mem + 2 * kb + xsb + wdb); /* [MANY_RB][NB] */
    int ok = 1;
    for (int64_t t0 = 0; ok && t0 < T; t0 += MANY_TC) {
        const int64_t nt = imin(MANY_TC, T - t0);
        in.ng = (nt + 15) / 16 * 2;
        for (int64_t b0 = 0; ok && b0 < nb; b0 += NB) {
            in.np = 16 * imin(NB, nb - b0);
            if (!(ok = many_prepare(x + t0 * xstride, xs + t0 * nb, xstride, nb, nt, cols, b0, &in))) break;
            for (int64_t rb = r0; ok && rb < r1; rb += MANY_RB) {
                const int64_t nr = imin(MANY_RB, r1 - rb);
                for (int64_t i = 0; ok && i < nr; i++) ok = many_decode(w, rb + i, b0, in.np, wd + i * NP * dw, wsd + i * NB);
                for (int64_t g = 0; ok && g < in.ng; g += 2)
                    for (int64_t i = 0; i < nr; i += R) {
                        const int32_t *wr[4];
                        const float *sr[4];
                        __m256 acc[4][2];
                        for (int k = 0; k < R; k++) {
                            const int64_t ri = imin(i + k, nr - 1); /* a short tile repeats its last row */
                            wr[k] = wd + ri * NP * dw;
                            sr[k] = wsd + ri * NB;
                            sums_load(y, ystride, T, t0, g, rb + ri - r0, b0 == 0, acc[k]);
                        }
                        if (fp4)
                            fp4_many_tile(wr, sr, &in, g, acc);
                        else
                            fp8_many_tile(wr, sr, &in, g, acc);
                        for (int k = 0; k < R && i + k < nr; k++) sums_store(y, ystride, T, t0, g, rb + i + k - r0, acc[k]);
                    }
            }
        }
    }
    free(mem);
    return ok;
}

#endif
