/* avx2.c - the AVX2 set (AVX2, FMA, F16C), chosen at run time.
 *
 * The same schemes as avx512.c on 256-bit registers (see there for the arithmetic):
 * quant fp4 turns weights into the bytes 2w+12 and inputs into three signed base-256 digits of
 * 512x and sums exact byte products in int32 (vpmaddubsw cannot saturate here: 2 * 24 * 128 fits
 * 16 bits); quant fp8 keeps one block per lane and splits each product exactly into an integer
 * part (summed as bit patterns) and a remainder (summed in f32); from MANY_T tokens both take
 * 16-bit integer products with tokens in lanes instead (avx2_many.c); dense uses f32 FMAs. AVX2 has
 * no byte-masked loads, so a row's last partial vector is copied to a zeroed stack buffer.
 * Inputs outside the exact range and NaN weight codes go to the scalar kernel. */
#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"
#include "tile.h"
#include "numerics.h"
#include "avx2.h"


INL __m256 e8m0_ps(__m256i c) {
    __m256i v = _mm256_slli_epi32(c, 23);
    v = _mm256_blendv_epi8(v, _mm256_set1_epi32(0x00400000), _mm256_cmpeq_epi32(c, _mm256_setzero_si256()));
    v = _mm256_blendv_epi8(v, _mm256_set1_epi32(0x7FC00000), _mm256_cmpeq_epi32(c, _mm256_set1_epi32(255)));
    return _mm256_castsi256_ps(v);
}

/* 8 bytes (zero past n) as 8 int32 lanes */
INL __m256i bytes8(const uint8_t *p, int64_t n) {
    uint64_t v = 0;
    if (n > 0) memcpy(&v, p, (size_t)(n < 8 ? n : 8));
    return _mm256_cvtepu8_epi32(_mm_cvtsi64_si128((long long)v));
}

/* per 128-bit lane: [sum of a's 4 lanes, b's, c's, d's] */
INL __m256i treduce_epi32(__m256i a, __m256i b, __m256i c, __m256i d) {
    __m256i ab = _mm256_add_epi32(_mm256_unpacklo_epi32(a, b), _mm256_unpackhi_epi32(a, b));
    __m256i cd = _mm256_add_epi32(_mm256_unpacklo_epi32(c, d), _mm256_unpackhi_epi32(c, d));
    return _mm256_add_epi32(_mm256_unpacklo_epi64(ab, cd), _mm256_unpackhi_epi64(ab, cd));
}

/* four rows of dwords -> per 128-bit lane, out[s] = [a_s, b_s, c_s, d_s] */
INL void transpose4(__m256i a, __m256i b, __m256i c, __m256i d, __m256i out[4]) {
    __m256i t0 = _mm256_unpacklo_epi32(a, b), t1 = _mm256_unpackhi_epi32(a, b);
    __m256i t2 = _mm256_unpacklo_epi32(c, d), t3 = _mm256_unpackhi_epi32(c, d);
    out[0] = _mm256_unpacklo_epi64(t0, t2);
    out[1] = _mm256_unpackhi_epi64(t0, t2);
    out[2] = _mm256_unpacklo_epi64(t1, t3);
    out[3] = _mm256_unpackhi_epi64(t1, t3);
}

INL void store_rows(float *y, int nr, __m128 v) {
    _Alignas(16) float tmp[4];
    _mm_store_ps(tmp, v);
    for (int i = 0; i < nr; i++) y[i] = tmp[i];
}

INL __m128 load_rows(const float *y, int nr) {
    _Alignas(16) float tmp[4] = {0};
    for (int i = 0; i < nr; i++) tmp[i] = y[i];
    return _mm_load_ps(tmp);
}

/* ================================================================ dense */


/* e2m1 codes in the low 4 bits of each lane -> f32 */
INL __m256 e2m1_8(__m256i c) {
    const __m256 mag = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    __m256 v = _mm256_permutevar8x32_ps(mag, c);
    __m256i sign = _mm256_and_si256(_mm256_slli_epi32(c, 28), _mm256_set1_epi32((int)0x80000000u));
    return _mm256_or_ps(v, _mm256_castsi256_ps(sign));
}

/* Rows rp[0..nr-1] of a tile against tokens xp[0..nt-1], 16 columns at a time in two vectors, so
 * that lane j of the pair is the canonical partial sum of the columns j mod 16 (one FMA each, in
 * column order, as scalar.c); half[t][i] gets the pair added (lane j + lane j+8, sum16's
 * first step) for the driver's join. Returns a bit per row with a NaN e4m3 code. */
INL int dense_rows(const dtype ty, const uint8_t *const *rp, const uint8_t *const *sp, int64_t cols, int64_t pfd,
                   const float *const *xp, const int nt, const int nr, __m256 (*half)[RT]) {
    const int64_t esz2 = ty == DT_F32 ? 8 : ty == DT_BF16 ? 4 : ty == DT_E4M3 ? 2 : 1; /* twice the bytes per column */
    __m256 acc[RT][TT][2];
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++)
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++) acc[i][t][0] = acc[i][t][1] = _mm256_setzero_ps();
    __m128i nan[RT];
#pragma GCC unroll 4
    for (int i = 0; i < nr; i++) nan[i] = _mm_setzero_si128();
    for (int64_t c = 0; c < cols; c += 16) {
        const int tail = cols - c < 16;
        __m256 xv[TT][2];
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++)
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++)
                xv[t][h] = tail ? loadf_partial(xp[t] + c + 8 * h, cols - c - 8 * h) : _mm256_loadu_ps(xp[t] + c + 8 * h);
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++) {
            const uint8_t *p = rp[i] + c * esz2 / 2;
            _mm_prefetch((const char *)(p + pfd), _MM_HINT_T0);
            __m256 wv[2];
            if (ty == DT_F32) {
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++)
                    wv[h] = tail ? loadf_partial((const float *)p + 8 * h, cols - c - 8 * h) : _mm256_loadu_ps((const float *)p + 8 * h);
            } else if (ty == DT_BF16) {
                __m256i v = tail ? load_partial(p, 2 * (cols - c)) : _mm256_loadu_si256((const __m256i *)p);
                wv[0] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_castsi256_si128(v)), 16));
                wv[1] = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(_mm256_extracti128_si256(v, 1)), 16));
            } else if (ty == DT_E4M3) {
                __m128i b = tail ? bytes16(p, cols - c) : _mm_loadu_si128((const __m128i *)p);
                nan[i] = _mm_max_epu8(nan[i], _mm_or_si128(b, _mm_set1_epi8((char)0x80)));
                const __m256 s = _mm256_set1_ps(e8m0_to_f32(sp[i][c / 32]));
                wv[0] = _mm256_mul_ps(e4m3_8(b), s);
                wv[1] = _mm256_mul_ps(e4m3_8(_mm_unpackhi_epi64(b, b)), s);
            } else { /* 8 bytes, low nibble first: the 16 codes in column order, none past cols (with
                      * a scale of 2^127 the odd row's spare nibble could be an infinity) */
                __m128i b = _mm256_castsi256_si128(load_partial(p, imin(8, (cols + 1) / 2 - c / 2)));
                __m128i lo = _mm_and_si128(b, _mm_set1_epi8(15)), hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(15));
                __m128i codes = _mm_unpacklo_epi8(lo, hi);
                if (tail)
                    codes = _mm_and_si128(codes, _mm_cmpgt_epi8(_mm_set1_epi8((char)(cols - c)),
                                                                 _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15)));
                const __m256 s = _mm256_set1_ps(e8m0_to_f32(sp[i][c / 32]));
                wv[0] = _mm256_mul_ps(e2m1_8(_mm256_cvtepu8_epi32(codes)), s);
                wv[1] = _mm256_mul_ps(e2m1_8(_mm256_cvtepu8_epi32(_mm_unpackhi_epi64(codes, codes))), s);
            }
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++)
#pragma GCC unroll 2
                for (int h = 0; h < 2; h++) acc[i][t][h] = _mm256_fmadd_ps(wv[h], xv[t][h], acc[i][t][h]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
#pragma GCC unroll 4
        for (int i = 0; i < nr; i++) half[t][i] = _mm256_add_ps(acc[i][t][0], acc[i][t][1]);
    int rows_nan = 0;
    if (ty == DT_E4M3)
        for (int i = 0; i < nr; i++)
            rows_nan |= (_mm_movemask_epi8(_mm_cmpeq_epi8(nan[i], _mm_set1_epi8((char)0xFF))) != 0) << i;
    return rows_nan;
}

/* One tile: rows rp[0..3], tokens xp[0..nt-1]. Two accumulators per row and token leave room in
 * 16 registers for 4 rows of up to 2 tokens; more tokens go in two passes over the rows. */
INL int dense_tile(const dtype ty, const uint8_t *const rp[RT], const uint8_t *const sp[RT], int64_t cols, int64_t pfd,
                   const float *const xp[TT], const int nt, __m256 half[TT][RT]) {
    if (nt <= 2) return dense_rows(ty, rp, sp, cols, pfd, xp, nt, 4, half);
    return dense_rows(ty, rp, sp, cols, pfd, xp, 2, 4, half) | dense_rows(ty, rp, sp, cols, pfd, xp + 2, nt - 2, 4, half + 2);
}

/* ================================================================ quant, fp4 */

/* one token's prepared input per group of 2 blocks (64 inputs, 32 weight bytes): the digits
 * of k = 512x, high first, as [even inputs][odd inputs]; 12 sum(k) and the input scale of
 * each block as 8 lanes, lane 4q+i for block q of the group */
typedef struct {
    _Alignas(32) int8_t dig[FP4_CHUNK / 2][6][32];
    int32_t c[FP4_CHUNK / 2][8];
    float xs[FP4_CHUNK / 2][8];
} fp4_prep;

/* fp8 (see the fp8 section): [superblock][half][dword][byte][lane] = 2^112 x, and the input
 * scales in lane order */
typedef struct {
    _Alignas(32) float x[FP8_CHUNK / 8][2][4][4][8]; /* [superblock][half][dword][byte][lane] */
    float xs[FP8_CHUNK / 8][8];
} fp8_prep;

/* one token's prepared input, of either kind */
typedef union {
    fp4_prep p4;
    fp8_prep p8;
} prep_u;

/* 8 int32 lanes -> 8 bytes at p (truncating) */
INL void store8(int8_t *p, __m256i v) {
    const __m256i pick = _mm256_setr_epi8(0, 4, 8, 12, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, 0, 4, 8, 12, -1,
                                          -1, -1, -1, -1, -1, -1, -1, -1, -1, -1, -1);
    __m256i b = _mm256_shuffle_epi8(v, pick);
    int32_t lo = _mm_cvtsi128_si32(_mm256_castsi256_si128(b)), hi = _mm_cvtsi128_si32(_mm256_extracti128_si256(b, 1));
    memcpy(p, &lo, 4);
    memcpy(p + 4, &hi, 4);
}

INL void to_digits(__m256i k, int8_t *d2, int8_t *d1, int8_t *d0) {
    const __m256i h = _mm256_set1_epi32(128);
    __m256i k1 = _mm256_srai_epi32(_mm256_add_epi32(k, h), 8);
    __m256i k2 = _mm256_srai_epi32(_mm256_add_epi32(k1, h), 8);
    store8(d0, _mm256_sub_epi32(k, _mm256_slli_epi32(k1, 8)));
    store8(d1, _mm256_sub_epi32(k1, _mm256_slli_epi32(k2, 8)));
    store8(d2, k2);
}

INL int32_t hsum_epi32(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
    return _mm_cvtsi128_si32(s);
}

INL int fp4_prepare(const float *xt, const float *xst, int64_t cols, int64_t b0, int64_t nblk, fp4_prep *p) {
    const __m256i ie = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    __m256i bad = _mm256_setzero_si256();
    for (int64_t g = 0; g < (nblk + 1) / 2; g++) {
        int32_t cq[2];
        float sq[2];
        for (int q = 0; q < 2; q++) {
            int64_t b = b0 + 2 * g + q, c = 32 * b;
            __m256i ke[2], ko[2];
            for (int h = 0; h < 2; h++) { /* 16 inputs -> 8 even, 8 odd */
                __m256 lo = _mm256_permutevar8x32_ps(loadf_partial(xt + c + 16 * h, cols - c - 16 * h), ie);
                __m256 hi = _mm256_permutevar8x32_ps(loadf_partial(xt + c + 16 * h + 8, cols - c - 16 * h - 8), ie);
                ke[h] = to_k(_mm256_permute2f128_ps(lo, hi, 0x20), 1 << 21, &bad);
                ko[h] = to_k(_mm256_permute2f128_ps(lo, hi, 0x31), 1 << 21, &bad);
                to_digits(ke[h], &p->dig[g][0][16 * q + 8 * h], &p->dig[g][2][16 * q + 8 * h],
                          &p->dig[g][4][16 * q + 8 * h]);
                to_digits(ko[h], &p->dig[g][1][16 * q + 8 * h], &p->dig[g][3][16 * q + 8 * h],
                          &p->dig[g][5][16 * q + 8 * h]);
            }
            /* wraps (unsigned) only for inputs out of range, which then set bad and go elsewhere */
            cq[q] = (int32_t)(12u * (uint32_t)hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(ke[0], ke[1]),
                                                                          _mm256_add_epi32(ko[0], ko[1]))));
            sq[q] = 2 * g + q < nblk ? xst[b] : 0.0f;
        }
        _mm256_store_si256((__m256i *)p->c[g],
                           _mm256_setr_epi32(cq[0], cq[0], cq[0], cq[0], cq[1], cq[1], cq[1], cq[1]));
        _mm256_store_ps(p->xs[g], _mm256_setr_ps(sq[0], sq[0], sq[0], sq[0], sq[1], sq[1], sq[1], sq[1]));
    }
    return _mm256_testz_si256(bad, bad);
}

/* Block scales of 4 rows for blocks [b0, b0+n), interleaved: out[4k + i] = row i's scale of block
 * b0+k; out holds n rounded up to 8, times 4. */
INL void scales4(const uint8_t *const sp[RT], int64_t b0, int64_t n, float *out) {
    for (int64_t k = 0; k < n; k += 8) {
        __m128i r[RT];
        for (int i = 0; i < RT; i++) {
            uint64_t v = 0;
            memcpy(&v, sp[i] + b0 + k, (size_t)(n - k < 8 ? n - k : 8));
            r[i] = _mm_cvtsi64_si128((long long)v);
        }
        __m128i a = _mm_unpacklo_epi16(_mm_unpacklo_epi8(r[0], r[1]), _mm_unpacklo_epi8(r[2], r[3]));
        __m128i b = _mm_unpackhi_epi16(_mm_unpacklo_epi8(r[0], r[1]), _mm_unpacklo_epi8(r[2], r[3]));
        _mm256_storeu_ps(out + 4 * k, e8m0_ps(_mm256_cvtepu8_epi32(a)));
        _mm256_storeu_ps(out + 4 * k + 8, e8m0_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(a, 8))));
        _mm256_storeu_ps(out + 4 * k + 16, e8m0_ps(_mm256_cvtepu8_epi32(b)));
        _mm256_storeu_ps(out + 4 * k + 24, e8m0_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(b, 8))));
    }
}

INL void fp4_tile(const uint8_t *const rp[RT], int64_t pfd, int64_t ng, int64_t last, int64_t nblk, const prep_u *pp,
                  const int nt, const float *ws, __m128 acc[TT]) {
    const __m256i lut = _mm256_loadu_si256((const __m256i *)FP4_LUT), m4 = _mm256_set1_epi8(0x0F);
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t g = 0; g < ng; g++) {
        __m256i A[RT][TT];
        const int tail = g == ng - 1 && last < 32;
#pragma GCC unroll 4
        for (int i = 0; i < RT; i++) {
            _mm_prefetch((const char *)(rp[i] + 32 * g + pfd), _MM_HINT_T0);
            __m256i v =
                tail ? load_partial(rp[i] + 32 * g, last) : _mm256_loadu_si256((const __m256i *)(rp[i] + 32 * g));
            __m256i wl = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4));
            __m256i wh = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                const int8_t(*D)[32] = pp[t].p4.dig[g];
                __m256i a[3];
#pragma GCC unroll 3
                for (int d = 0; d < 3; d++) {
                    __m256i s16 =
                        _mm256_add_epi16(_mm256_maddubs_epi16(wl, _mm256_load_si256((const __m256i *)D[2 * d])),
                                         _mm256_maddubs_epi16(wh, _mm256_load_si256((const __m256i *)D[2 * d + 1])));
                    a[d] = _mm256_madd_epi16(s16, ones);
                }
                A[i][t] =
                    _mm256_add_epi32(_mm256_slli_epi32(_mm256_add_epi32(_mm256_slli_epi32(a[0], 8), a[1]), 8), a[2]);
            }
        }
        const int64_t nq = imin(2, nblk - 2 * g);
        const __m256 ws8 = _mm256_loadu_ps(ws + 8 * g);
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            __m256i u = _mm256_sub_epi32(treduce_epi32(A[0][t], A[1][t], A[2][t], A[3][t]),
                                         _mm256_load_si256((const __m256i *)pp[t].p4.c[g]));
            __m256 part = _mm256_mul_ps(_mm256_cvtepi32_ps(u), _mm256_set1_ps(0x1p-10f));
            __m256 p = _mm256_mul_ps(_mm256_mul_ps(part, _mm256_load_ps(pp[t].p4.xs[g])), ws8);
            acc[t] = _mm_add_ps(acc[t], _mm256_castps256_ps128(p));
            if (nq > 1) acc[t] = _mm_add_ps(acc[t], _mm256_extractf128_ps(p, 1));
        }
    }
}

/* ================================================================ quant, fp8
 * A superblock is 8 blocks (one 32-byte load each); an in-lane 4x4 transpose of 4 loads gives
 * vectors whose dword lanes each stay in one half-block. Decoding and the exact split are those
 * of avx512.c: f = e4m3 * 2^-120 as an f32 pattern, x prepared as 2^112 x, t = fma(f, x, M),
 * h = t - M, l = fma(f, x, -h), block sum = sum(bits t - bits M) + 256 sum(l). */

INL int fp8_prepare(const float *xt, const float *xst, int64_t cols, int64_t b0, int64_t nblk, fp8_prep *p) {
    __m256i bad = _mm256_setzero_si256();
    _Alignas(32) float tmp[256];
    for (int64_t sb = 0; sb < (nblk + 7) / 8; sb++) {
        const int64_t base = 32 * (b0 + 8 * sb);
        for (int k = 0; k < 32; k++) {
            __m256 v = loadf_partial(xt + base + 8 * k, cols - base - 8 * k);
            to_k(v, 1 << 18, &bad);
            _mm256_store_ps(tmp + 8 * k, _mm256_mul_ps(v, _mm256_set1_ps(0x1p112f)));
        }
        /* element 32(4G+m) + 16L + 4s + q goes to [G][s][q][4L+m] */
        float *dst = &p->x[sb][0][0][0][0];
        for (int G = 0; G < 2; G++)
            for (int m = 0; m < 4; m++)
                for (int L = 0; L < 2; L++)
                    for (int sq = 0; sq < 16; sq++)
                        dst[128 * G + 8 * sq + 4 * L + m] = tmp[32 * (4 * G + m) + 16 * L + sq];
        for (int l = 0; l < 8; l++) p->xs[sb][l] = 8 * sb + l < nblk ? xst[b0 + 8 * sb + l] : 0.0f;
    }
    return _mm256_testz_si256(bad, bad);
}

INL void fp8_decode(__m256i u, __m256 f[4]) {
    const __m256i mask = _mm256_set1_epi32((int)0x87F00000u);
    __m256i a = _mm256_srai_epi16(u, 4), b = _mm256_srai_epi16(_mm256_slli_epi16(u, 8), 4);
    f[0] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(b, 16), mask));
    f[1] = _mm256_castsi256_ps(_mm256_and_si256(_mm256_slli_epi32(a, 16), mask));
    f[2] = _mm256_castsi256_ps(_mm256_and_si256(b, mask));
    f[3] = _mm256_castsi256_ps(_mm256_and_si256(a, mask));
}

INL int fp8_tile(const uint8_t *const rp[RT], int64_t pfd, int64_t bytes, int64_t nblk, const uint8_t *const sp[RT],
                 const prep_u *pp, const int nt, __m128 acc[TT]) {
    const __m256 M = _mm256_set1_ps(49152.0f);
    const __m256i bias = _mm256_set1_epi32((int)(16u * 0x47400000u));
    const __m256i hb = _mm256_set1_epi8((char)0x80);
    __m256i nan = _mm256_setzero_si256();
    for (int64_t sb = 0; sb < (nblk + 7) / 8; sb++) {
        _Alignas(32) float P[TT][RT][8];
        const int64_t nsb = imin(8, nblk - 8 * sb);
        const int full = 256 * (sb + 1) <= bytes;
        for (int i = 0; i < RT; i++) {
            __m256i H[2][TT];
            __m256 L[2][TT][2];
#pragma GCC unroll 2
            for (int G = 0; G < 2; G++) {
                const uint8_t *row = rp[i] + 256 * sb + 128 * G;
                __m256i z[4], u[4];
#pragma GCC unroll 4
                for (int m = 0; m < 4; m++) {
                    const int64_t off = 256 * sb + 128 * G + 32 * m;
                    _mm_prefetch((const char *)(row + 32 * m + pfd), _MM_HINT_T0);
                    z[m] = full ? _mm256_loadu_si256((const __m256i *)(row + 32 * m))
                                : load_partial(row + 32 * m, bytes - off);
                    nan = _mm256_max_epu8(nan, _mm256_or_si256(z[m], hb));
                }
                transpose4(z[0], z[1], z[2], z[3], u);
#pragma GCC unroll 4
                for (int t = 0; t < nt; t++) {
                    H[G][t] = _mm256_setzero_si256();
                    L[G][t][0] = L[G][t][1] = _mm256_setzero_ps();
                }
#pragma GCC unroll 4
                for (int s = 0; s < 4; s++) {
                    __m256 f[4];
                    fp8_decode(u[s], f);
#pragma GCC unroll 4
                    for (int q = 0; q < 4; q++)
#pragma GCC unroll 4
                        for (int t = 0; t < nt; t++) {
                            const __m256 X = _mm256_load_ps(pp[t].p8.x[sb][G][s][q]);
                            __m256 tt = _mm256_fmadd_ps(f[q], X, M);
                            __m256 l = _mm256_fmsub_ps(f[q], X, _mm256_sub_ps(tt, M));
                            H[G][t] = _mm256_add_epi32(H[G][t], _mm256_castps_si256(tt));
                            L[G][t][q & 1] = _mm256_add_ps(L[G][t][q & 1], l);
                        }
                }
            }
            __m256 ws = e8m0_ps(bytes8(sp[i] + 8 * sb, nsb));
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++) {
                /* lanes 4L+m: half L of block 4G+m; add the halves, then G=0 | G=1 */
                __m256i h0 = _mm256_sub_epi32(H[0][t], bias), h1 = _mm256_sub_epi32(H[1][t], bias);
                __m256 l0 = _mm256_add_ps(L[0][t][0], L[0][t][1]), l1 = _mm256_add_ps(L[1][t][0], L[1][t][1]);
                __m256i hh =
                    _mm256_add_epi32(_mm256_permute2x128_si256(h0, h1, 0x20), _mm256_permute2x128_si256(h0, h1, 0x31));
                __m256 ll = _mm256_add_ps(_mm256_permute2f128_ps(l0, l1, 0x20), _mm256_permute2f128_ps(l0, l1, 0x31));
                __m256 part = _mm256_add_ps(_mm256_cvtepi32_ps(hh), _mm256_mul_ps(ll, _mm256_set1_ps(256.0f)));
                _mm256_store_ps(P[t][i], _mm256_mul_ps(_mm256_mul_ps(part, _mm256_load_ps(pp[t].p8.xs[sb])), ws));
            }
        }
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            __m256i q[4];
            transpose4(_mm256_load_si256((const __m256i *)P[t][0]), _mm256_load_si256((const __m256i *)P[t][1]),
                       _mm256_load_si256((const __m256i *)P[t][2]), _mm256_load_si256((const __m256i *)P[t][3]), q);
            /* block b: the 4 rows in 128-bit lane b/4 of q[b%4] */
            for (int b = 0; b < nsb; b++) {
                __m256 v = _mm256_castsi256_ps(q[b & 3]);
                acc[t] = _mm_add_ps(acc[t], b < 4 ? _mm256_castps256_ps128(v) : _mm256_extractf128_ps(v, 1));
            }
        }
    }
    return _mm256_movemask_epi8(_mm256_cmpeq_epi8(nan, _mm256_set1_epi8((char)0xFF))) == 0;
}

/* ================================================================ drivers */

/* the fp8 tile computes with subnormal f32 patterns, which denormals-are-zero would flush */
INL int fp8_usable(void) { return !(_mm_getcsr() & 0x0040); }

#define DENSE_NAME avx2_dense
#define QUANT_NAME avx2_quant_few
#define QUANT_TT TT
#define QUANT_FP8_CHUNK(T) FP8_CHUNK
#define FP4_GROUP 32
#include "drivers.h"

TGT static void avx2_quant(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T,
                           int64_t xstride, float *y, int64_t ystride) {
    const int many = T >= MANY_T && w->scale && w->cols > 0 && (w->type == DT_FP4 || (w->type == DT_E4M3 && fp8_usable()));
    if (!many || !avx2_many_quant(w, r0, r1, x, xs, T, xstride, y, ystride)) avx2_quant_few(w, r0, r1, x, xs, T, xstride, y, ystride);
}

/* ================================================================ act_quant
 * as in avx512.c: (|v| + C) - C with C = 1.5 * 2^(e+20) rounds to the e4m3 grid */

/* |v| <= 448 on the e4m3 grid, with v's sign */
INL __m256 e4m3_round(__m256 v) {
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    __m256 a = _mm256_andnot_ps(sign, v);
    __m256i e = _mm256_and_si256(_mm256_castps_si256(a), _mm256_set1_epi32(0x7F800000));
    e = _mm256_max_epi32(e, _mm256_set1_epi32(121 << 23)); /* 2^-6: the subnormal grid below */
    __m256 c = _mm256_castsi256_ps(_mm256_or_si256(_mm256_add_epi32(e, _mm256_set1_epi32(20 << 23)),
                                                   _mm256_set1_epi32(0x00400000)));
    __m256 r = _mm256_sub_ps(_mm256_add_ps(a, c), c);
    return _mm256_or_ps(r, _mm256_and_ps(v, sign));
}

TGT static void avx2_act_quant(const float *x, int64_t n, float *q, float *s) {
    const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32((int)0x80000000u));
    const __m256 inf = _mm256_set1_ps(INFINITY), lim = _mm256_set1_ps(448.0f), nlim = _mm256_set1_ps(-448.0f);
    int64_t b = 0;
    for (; b + 32 <= n; b += 32) {
        __m256 v[4], a = _mm256_setzero_ps(), bad = _mm256_setzero_ps();
        for (int k = 0; k < 4; k++) {
            v[k] = _mm256_loadu_ps(x + b + 8 * k);
            __m256 ak = _mm256_andnot_ps(sign, v[k]);
            bad = _mm256_or_ps(bad, _mm256_cmp_ps(ak, inf, _CMP_NLT_UQ));
            a = _mm256_max_ps(a, ak);
        }
        if (_mm256_movemask_ps(bad)) { /* a NaN or an infinity: the scalar set's bits */
            kernels_scalar.act_quant(x + b, 32, q + b, s + b / 32);
            continue;
        }
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
        float sc = pow2_ceil(fmaxf(_mm_cvtss_f32(m4), 1e-4f) * (1.0f / 448.0f));
        s[b / 32] = sc;
        __m256 inv = _mm256_set1_ps(1.0f / sc); /* exact: sc is a power of two in [2^-22, 2^120] */
        for (int k = 0; k < 4; k++)
            _mm256_storeu_ps(q + b + 8 * k, e4m3_round(_mm256_min_ps(_mm256_max_ps(_mm256_mul_ps(v[k], inv), nlim), lim)));
    }
    if (b < n) kernels_scalar.act_quant(x + b, n - b, q + b, s + b / 32);
}

const kernel_set kernels_avx2 = {"avx2", avx2_dense, avx2_quant, avx2_act_quant};

#endif
