/* avx512.c - the AVX-512 set (F, BW, VL, DQ with VNNI and VBMI), chosen at run time.
 *
 * Every weight is read in its stored width and decoded in registers. Tiles are 4 rows by up to
 * 4 tokens (dense; f32 and bf16 at 5 to 8 tokens: 2 rows by 8) or QUANT_TT (quant), so each
 * decoded weight vector serves several tokens and each input vector 4 rows; each tile
 * prefetches the same bytes of a tile at least 4 KB ahead. Nothing is allocated: inputs are
 * prepared per call on the stack (about 33 KB per token of a tile: 270 KB at 8).
 *
 * quant, fp4: an e2m1 weight w becomes the byte 2w+12 (0..24) by a VBMI lookup; an input x (an
 * e4m3 value) becomes the integer k = 512x, split as 8 k' + r: k' in two signed base-256 digits
 * prepared once per call, r in [-4, 3] (0 unless |x| < 1/8, which act_quant's scaling makes
 * rare). VNNI byte dot products, one short chain per digit joined by shifts, give
 * sum((2w+12) k) over each block exactly in int32, the products of r only where some r is not
 * 0; subtracting 12 sum(k) leaves 1024 times the block's exact sum, which one int -> f32
 * conversion rounds once, as the reference's f64 sum rounded to f32.
 * quant, fp8, few tokens: the same integer idea, the weight split like the input (W = 16 W' +
 * Rw, Rw = 0 unless the weight is below 1/8) with W' in two base-256 digits (from byte tables;
 * its sign chooses the input's digits of k or -k): four dot products per 64 weights, lanes
 * holding whole blocks, each block's sum rounded once by one f32 FMA (see the fp8 section).
 * With 12 (fp8) or 16 (fp4) tokens or more, both keep integer sums with lanes holding 16
 * tokens and no horizontal sums, 32 products per 16-bit VNNI instruction: fp4's 2w against k' (see "quant, fp4, many
 * tokens"), fp8's W' against two digits of k, each block's sum rounded once by one f32 FMA, in
 * f64 past 2^36 or with a small weight (see "quant, fp8, many tokens").
 * Both: inputs outside the exact range (not k/512 with |k| <= 448 * 512) and NaN weight codes
 * hand the call to a kernel that takes them (in the end the scalar one), which gives the same
 * bits.
 * dense: the canonical order of scalar.c as it comes: one f32 FMA per column into the
 * lane of its column mod 16, the lanes joined once per row and token (drivers.h). */
#if defined(__x86_64__)
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"
#include "tile.h"
#include "numerics.h"

#define TGT __attribute__((target("avx512f,avx512bw,avx512vl,avx512dq,avx512vnni,avx512vbmi,fma,f16c")))
#define INL static inline __attribute__((always_inline)) TGT
/* Tokens per quant tile: a tile decodes its rows' weights once for up to 8 tokens (a batch of 8
 * streams, a verify block), which pass over the decoded digits one after the other. */
#define QUANT_TT 8

INL __mmask16 mask16(int64_t n) { return n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1); }
INL __mmask64 mask64(int64_t n) { return n >= 64 ? ~0ull : n <= 0 ? 0 : (__mmask64)((1ull << n) - 1); }

/* the first nr (1..4) of 4 consecutive outputs */
INL __m128 load_rows(const float *y, int nr) { return _mm_maskz_loadu_ps(mask16(nr), y); }
INL void store_rows(float *y, int nr, __m128 v) { _mm_mask_storeu_ps(y, mask16(nr), v); }

/* e8m0 codes (one per int32 lane) as f32, as e8m0_to_f32 */
INL __m512 e8m0_ps(__m512i c) {
    __m512i v = _mm512_slli_epi32(c, 23);
    v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(c, _mm512_setzero_si512()), _mm512_set1_epi32(0x00400000));
    v = _mm512_mask_mov_epi32(v, _mm512_cmpeq_epi32_mask(c, _mm512_set1_epi32(255)), _mm512_set1_epi32(0x7FC00000));
    return _mm512_castsi512_ps(v);
}

/* Block scales of 4 rows for blocks [b0, b0+n), interleaved: out[4k+i] = row i's scale of block
 * b0+k. sp[i] points at row i's scale row; out holds n rounded up to 16, times 4. */
INL void scales4(const uint8_t *const sp[RT], int64_t b0, int64_t n, float *out) {
    for (int64_t k = 0; k < n; k += 16) {
        __mmask16 m = mask16(n - k);
        __m128i r0 = _mm_maskz_loadu_epi8(m, sp[0] + b0 + k), r1 = _mm_maskz_loadu_epi8(m, sp[1] + b0 + k);
        __m128i r2 = _mm_maskz_loadu_epi8(m, sp[2] + b0 + k), r3 = _mm_maskz_loadu_epi8(m, sp[3] + b0 + k);
        __m128i a = _mm_unpacklo_epi8(r0, r1), b = _mm_unpacklo_epi8(r2, r3);
        __m128i c = _mm_unpackhi_epi8(r0, r1), d = _mm_unpackhi_epi8(r2, r3);
        _mm512_storeu_ps(out + 4 * k, e8m0_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi16(a, b))));
        _mm512_storeu_ps(out + 4 * k + 16, e8m0_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi16(a, b))));
        _mm512_storeu_ps(out + 4 * k + 32, e8m0_ps(_mm512_cvtepu8_epi32(_mm_unpacklo_epi16(c, d))));
        _mm512_storeu_ps(out + 4 * k + 48, e8m0_ps(_mm512_cvtepu8_epi32(_mm_unpackhi_epi16(c, d))));
    }
}

/* Per 128-bit lane q: [sum of a's 4 lanes, b's, c's, d's] */
INL __m512i treduce_epi32(__m512i a, __m512i b, __m512i c, __m512i d) {
    __m512i ab = _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
    __m512i cd = _mm512_add_epi32(_mm512_unpacklo_epi32(c, d), _mm512_unpackhi_epi32(c, d));
    return _mm512_add_epi32(_mm512_unpacklo_epi64(ab, cd), _mm512_unpackhi_epi64(ab, cd));
}

/* The sum of v's 16 lanes, wrapping (the compiler's _mm512_reduce_add_epi32 is plain int
 * arithmetic, undefined when it overflows) */
INL int32_t hsum_epi32(__m512i v) {
    __m256i s8 = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
    return _mm_cvtsi128_si32(_mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1))));
}

/* e4m3 bytes -> f16 patterns of value * 2^-8: sign to bit 15, the other 7 bits to 13..7 */
INL __m256i e4m3_f16(__m128i v) {
    return _mm256_and_si256(_mm256_slli_epi16(_mm256_cvtepi8_epi16(v), 7), _mm256_set1_epi16((short)0xBFFF));
}

/* ================================================================ dense */

/* 16 columns [c, c+16) of one row (pointer rp at the row's start, block scales from sp) as
 * f32, weights of type ty (F32, BF16, E4M3 or FP4); m masks the columns below cols, tail says
 * whether it is partial. An e4m3 row's codes go into *nan (its largest code with the sign set:
 * 0xFF only for a NaN, which the f16 decoding does not keep). */
INL __m512 dense_weights(const dtype ty, const uint8_t *rp, const uint8_t *sp, int64_t c, int64_t cols, __mmask16 m,
                         int tail, __m128i *nan) {
    const __m512 lut = _mm512_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f, -0.0f, -0.5f, -1.0f, -1.5f, -2.0f,
                                      -3.0f, -4.0f, -6.0f);
    if (ty == DT_F32) {
        const float *p = (const float *)rp + c;
        return tail ? _mm512_maskz_loadu_ps(m, p) : _mm512_loadu_ps(p);
    }
    if (ty == DT_BF16) {
        const uint16_t *p = (const uint16_t *)rp + c;
        __m256i h = tail ? _mm256_maskz_loadu_epi16(m, p) : _mm256_loadu_si256((const __m256i *)p);
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    if (ty == DT_E4M3) {
        const uint8_t *p = rp + c;
        __m128i b = tail ? _mm_maskz_loadu_epi8(m, p) : _mm_loadu_si128((const __m128i *)p);
        *nan = _mm_max_epu8(*nan, _mm_or_si128(b, _mm_set1_epi8((char)0x80)));
        __m512 wv = _mm512_mul_ps(_mm512_cvtph_ps(e4m3_f16(b)), _mm512_set1_ps(256.0f));
        return _mm512_mul_ps(wv, _mm512_set1_ps(e8m0_to_f32(sp[c / 32])));
    }
    /* 8 bytes, low nibble first: the 16 codes in column order, none past cols (with a scale of
     * 2^127 the odd row's spare nibble could be an infinity) */
    __m128i b = _mm_maskz_loadu_epi8(mask16(imin(8, (cols + 1) / 2 - c / 2)), rp + c / 2);
    __m128i lo = _mm_and_si128(b, _mm_set1_epi8(15)), hi = _mm_and_si128(_mm_srli_epi16(b, 4), _mm_set1_epi8(15));
    __m128i codes = _mm_maskz_mov_epi8(m, _mm_unpacklo_epi8(lo, hi));
    __m512 wv = _mm512_permutexvar_ps(_mm512_cvtepu8_epi32(codes), lut);
    return _mm512_mul_ps(wv, _mm512_set1_ps(e8m0_to_f32(sp[c / 32])));
}

/* Bytes per column of a dense type, times 2 (fp4 is half a byte) */
INL int64_t dense_esz2(const dtype ty) { return ty == DT_F32 ? 8 : ty == DT_BF16 ? 4 : ty == DT_E4M3 ? 2 : 1; }

/* The rows among n whose e4m3 codes met a NaN, a bit each */
INL int nan_rows(const dtype ty, const __m128i *nan, int n) {
    int rows = 0;
    if (ty == DT_E4M3)
        for (int i = 0; i < n; i++) rows |= (_mm_cmpeq_epi8_mask(nan[i], _mm_set1_epi8((char)0xFF)) != 0) << i;
    return rows;
}

/* One tile: rows rp[0..3] (pointers at the row start), tokens xp[0..nt-1]. The weights are
 * decoded 16 columns at a time, so lane j of a row's accumulator holds the canonical partial sum
 * of the columns j mod 16 (one FMA each, in column order). half[t][i] gets that accumulator's
 * two halves added (lane j + lane j+8: the first step of sum16) for the driver's join. Returns a
 * bit per row that holds a NaN e4m3 code (the caller hands such rows to the scalar kernel). */
INL int dense_tile(const dtype ty, const uint8_t *const rp[RT], const uint8_t *const sp[RT], int64_t cols, int64_t pfd,
                   const float *const xp[TT], const int nt, __m256 half[TT][RT]) {
    const int64_t esz2 = dense_esz2(ty);
    __m512 acc[RT][TT];
#pragma GCC unroll 4
    for (int i = 0; i < RT; i++)
#pragma GCC unroll 4
        for (int t = 0; t < TT; t++) acc[i][t] = _mm512_setzero_ps();
    __m128i nan[RT];
#pragma GCC unroll 4
    for (int i = 0; i < RT; i++) nan[i] = _mm_setzero_si128();
    for (int64_t c = 0; c < cols; c += 16) {
        const int tail = cols - c < 16;
        __mmask16 m = mask16(cols - c);
        __m512 xv[TT];
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) xv[t] = tail ? _mm512_maskz_loadu_ps(m, xp[t] + c) : _mm512_loadu_ps(xp[t] + c);
#pragma GCC unroll 4
        for (int i = 0; i < RT; i++) {
            _mm_prefetch((const char *)(rp[i] + c * esz2 / 2 + pfd), _MM_HINT_T0);
            const __m512 wv = dense_weights(ty, rp[i], sp[i], c, cols, m, tail, &nan[i]);
#pragma GCC unroll 4
            for (int t = 0; t < nt; t++) acc[i][t] = _mm512_fmadd_ps(wv, xv[t], acc[i][t]);
        }
    }
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++)
#pragma GCC unroll 4
        for (int i = 0; i < RT; i++)
            half[t][i] = _mm256_add_ps(_mm512_castps512_ps256(acc[i][t]), _mm512_extractf32x8_ps(acc[i][t], 1));
    return nan_rows(ty, nan, RT);
}

/* ================================================================ dense, 5 to 8 tokens
 *
 * The 4 x 4 tiles take 5 to 8 tokens in two passes over a block of rows, the second converting
 * every weight again and running its FMAs apart from the first's memory stream; with a verify
 * block or the drafter at 5 or 6 rows, the bf16 LM head cost twice its one-row time. A tile of 2
 * rows by 8 tokens holds the same 16 accumulators in one pass, but 8 tokens' inputs over a row
 * of 2048 columns (64 KB) leave L1, and every pair of rows would read them again from L2. So the
 * columns go in spans of WIDE_SPAN (8 tokens' inputs: 16 KB), spans outermost in a block of
 * WIDE_ROWS rows: each pair of rows takes its accumulators from a parking buffer, runs the span
 * and parks them again. Every lane still sums its columns in column order, so the bits are the
 * 4 x 4 tiles', and each weight byte is read once. Only weights stored as f32 or bf16 (the
 * head, the mHC mixes) take it: the dequantized fp8 and fp4 ones are small and keep the tiles. */
#define WIDE_TT 8      /* tokens, at most */
#define WIDE_SPAN 512  /* columns a pass over the block takes */
#define WIDE_ROWS 32   /* rows a block: their parked sums, 32 x 8 x 64 bytes = 16 KB */

/* Columns [c0, c1) of rows rp[0], rp[1] (f32 or bf16, pointers at the row start) against nt
 * tokens into acc. xq holds the tokens' inputs of the span packed, vector v of token t at
 * xq + 16 (nt v + t) (one pointer for all the loads: with a pointer per token the loop ran out
 * of registers and rebuilt them every step), zero past the row's end; pfd: the bytes ahead to
 * prefetch (the same columns of a later pair). */
INL void dense_pair(const dtype ty, const uint8_t *const rp[2], int64_t c0, int64_t c1, int64_t cols, int64_t pfd,
                    const float *xq, const int nt, __m512 acc[2][WIDE_TT]) {
    const int64_t esz2 = dense_esz2(ty);
    __m128i nan; /* no NaN codes in these types */
    for (int64_t c = c0; c < c1; c += 16, xq += 16 * nt) {
        const int tail = cols - c < 16;
        const __mmask16 m = mask16(cols - c);
        __m512 wv[2];
#pragma GCC unroll 2
        for (int i = 0; i < 2; i++) {
            _mm_prefetch((const char *)(rp[i] + c * esz2 / 2 + pfd), _MM_HINT_T0);
            wv[i] = dense_weights(ty, rp[i], NULL, c, cols, m, tail, &nan);
        }
#pragma GCC unroll 8
        for (int t = 0; t < nt; t++) {
            const __m512 xv = _mm512_load_ps(xq + 16 * t);
            acc[0][t] = _mm512_fmadd_ps(wv[0], xv, acc[0][t]);
            acc[1][t] = _mm512_fmadd_ps(wv[1], xv, acc[1][t]);
        }
    }
}

/* ================================================================ quant, fp4 */

/* 2w+12 for each e2m1 code w, repeated over the 64 entries VBMI indexes */
/* clang-format off */
static const uint8_t FP4_LUT[64] = {
    12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0, 12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
    12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0, 12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
};
/* clang-format on */

/* One token's input prepared for a chunk, per group of 4 blocks (128 inputs, 64 weight bytes),
 * with k = 512x = 8 k' + r as in the fp8 tiles: dig the bytes of k' (high digit first) and of
 * r, each as [even inputs][odd inputs] in the order of the weight bytes' low and high nibbles;
 * r[g] whether some r of the group is not 0. Per block, by whether the group has r: c the
 * correction 12 sum(k) (12 sum(k') without r, the sums then in units of 8) and xs the input
 * scale times the units' 2^-10 (2^-7); as 16 lanes, lane 4q+i for block q (i: the tile's row). */
typedef struct {
    _Alignas(64) int8_t dig[FP4_CHUNK / 4][6][64];
    int32_t c[FP4_CHUNK / 4][16];
    float xs[FP4_CHUNK / 4][16];
    uint8_t r[FP4_CHUNK / 4];
} fp4_prep;

/* Blocks of 32 per prepared fp8 chunk: 2048 inputs, 12 KB per token. Each row of a tile passes
 * over every token's prepared chunk, so the four digit vectors the main pass reads (8 KB a token)
 * must stay in L1 from one row to the next: up to 4 tokens they do; more tokens take chunks of
 * half the size (at full size, 6 to 8 tokens of a 2048-column matrix took half as long again).
 * One token keeps the long chunk: each pass of a chunk over the rows reads a stripe of every
 * row, and fewer, longer stripes stream better from memory. */
enum { FP8V_CHUNK = 64 };

/* fp8 (see the fp8 section), per superblock of 16 blocks: with k = 512x = 8 k' + r, the bytes
 * of k' (low digit first) and r, and those of -k split the same way, in the weights' transposed
 * byte order [s][k'0, k'1, (-k)'0, (-k)'1, r, r of -k][byte]; r[sb] the mask of the vectors s
 * that hold some r that is not 0; and the input scales in lane order */
typedef struct {
    _Alignas(64) int8_t x[FP8V_CHUNK / 16][8][6][64];
    float xs[FP8V_CHUNK / 16][16];
    uint8_t r[FP8V_CHUNK / 16];
} fp8_prep;

/* one token's prepared input, of either kind */
typedef union {
    fp4_prep p4;
    fp8_prep p8;
} prep_u;

enum { E4M3_K_MAX = 448 * 512 }; /* the largest |k| = 512 |x| an e4m3 input x gives */

/* 16 inputs as k = 512x, rounded to an integer */
INL __m512i k_of(__m512 v) { return _mm512_cvtps_epi32(_mm512_mul_ps(v, _mm512_set1_ps(512.0f))); }

/* k_of(v); clears *ok when an input is not an integer k with |k| <= E4M3_K_MAX (what the integer
 * sums' digits hold) */
INL __m512i to_k(__m512 v, __mmask16 *ok) {
    const __m512i k = k_of(v);
    *ok &= _mm512_cmp_ps_mask(_mm512_cvtepi32_ps(k), _mm512_mul_ps(v, _mm512_set1_ps(512.0f)), _CMP_EQ_OQ) &
           _mm512_cmple_epu32_mask(_mm512_abs_epi32(k), _mm512_set1_epi32(E4M3_K_MAX));
    return k;
}

/* k = 8 k' + r with r in [-4, 3] (k mod 8, centred); returns k' */
INL __m512i split_k(__m512i k, __m512i *r) {
    const __m512i four = _mm512_set1_epi32(4);
    *r = _mm512_sub_epi32(_mm512_and_si512(_mm512_add_epi32(k, four), _mm512_set1_epi32(7)), four);
    return _mm512_srai_epi32(_mm512_sub_epi32(k, *r), 3);
}

/* k = 8 k' + r: the bytes of r, and k' = d1 * 256 + d0 with both digits in [-128, 127]
 * (|k| <= E4M3_K_MAX); returns r */
INL __m512i to_digits(__m512i k, int8_t *d1, int8_t *d0, int8_t *rb) {
    __m512i r;
    const __m512i k1 = split_k(k, &r);
    _mm_storeu_si128((__m128i *)d0, _mm512_cvtepi32_epi8(k1));
    _mm_storeu_si128((__m128i *)d1, _mm512_cvtepi32_epi8(_mm512_srai_epi32(_mm512_add_epi32(k1, _mm512_set1_epi32(128)), 8)));
    _mm_storeu_si128((__m128i *)rb, _mm512_cvtepi32_epi8(r));
    return r;
}

/* Prepares blocks [b0, b0+nblk) of one token. Returns 0 when an input is out of the exact range
 * or a scale is below 2^-116 (the units folded into it would leave f32's normal range). */
INL int fp4_prepare(const float *xt, const float *xst, int64_t cols, int64_t b0, int64_t nblk, fp4_prep *p) {
    const __m512i ie = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18, 20, 22, 24, 26, 28, 30);
    const __m512i io = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19, 21, 23, 25, 27, 29, 31);
    __mmask16 ok = 0xFFFF;
    int small = 0;
    for (int64_t g = 0; g < (nblk + 3) / 4; g++) {
        int32_t cq[4];
        float sq[4];
        __mmask16 any_r = 0;
        for (int q = 0; q < 4; q++) {
            int64_t b = b0 + 4 * g + q, c = b * 32;
            __m512 lo = _mm512_setzero_ps(), hi = _mm512_setzero_ps();
            if (c < cols) {
                lo = _mm512_maskz_loadu_ps(mask16(cols - c), xt + c);
                hi = _mm512_maskz_loadu_ps(mask16(cols - c - 16), xt + c + 16);
            }
            __m512i ke = to_k(_mm512_permutex2var_ps(lo, ie, hi), &ok);
            __m512i ko = to_k(_mm512_permutex2var_ps(lo, io, hi), &ok);
            __m512i re = to_digits(ke, &p->dig[g][0][16 * q], &p->dig[g][2][16 * q], &p->dig[g][4][16 * q]);
            __m512i ro = to_digits(ko, &p->dig[g][1][16 * q], &p->dig[g][3][16 * q], &p->dig[g][5][16 * q]);
            any_r |= _mm512_test_epi32_mask(_mm512_or_si512(re, ro), _mm512_or_si512(re, ro));
            /* wraps (unsigned) only for inputs out of range, which then fail ok and go elsewhere */
            cq[q] = (int32_t)(12u * (uint32_t)hsum_epi32(_mm512_add_epi32(ke, ko)));
            sq[q] = 4 * g + q < nblk ? xst[b] : 0.0f;
            small |= fabsf(sq[q]) < 0x1p-116f && sq[q] != 0.0f;
        }
        p->r[g] = any_r != 0;
        for (int q = 0; q < 4; q++) {
            if (!any_r) cq[q] /= 8; /* exact: every k is 8 k' */
            sq[q] *= any_r ? 0x1p-10f : 0x1p-7f;
        }
        _mm512_storeu_si512(p->c[g], _mm512_setr_epi32(cq[0], cq[0], cq[0], cq[0], cq[1], cq[1], cq[1], cq[1], cq[2],
                                                       cq[2], cq[2], cq[2], cq[3], cq[3], cq[3], cq[3]));
        _mm512_storeu_ps(p->xs[g], _mm512_setr_ps(sq[0], sq[0], sq[0], sq[0], sq[1], sq[1], sq[1], sq[1], sq[2], sq[2],
                                                  sq[2], sq[2], sq[3], sq[3], sq[3], sq[3]));
    }
    return ok == 0xFFFF && !small;
}

/* One tile over a chunk: rp[i] at the chunk's first byte of row i, ng groups, the last one with
 * `last` valid bytes (1..64), nblk blocks; ws from scales4. acc[t] holds the 4 rows' sums of
 * token t (nt of them, up to QUANT_TT). Each group's weights are decoded once, for the 4 rows, and
 * every token passes over them. A token's group where some r is not 0 sums (2w+12) k in units
 * of 1; any other sums (2w+12) k' (units of 8), one shift less per row. The blocks' products
 * wait in P and are added in order FP4_LAG groups behind: added as each group ends, that chain
 * tied every group's tail to the one before; added after the last group, its 4 adds a group
 * (a chain of one add's latency each, a tile of 2048 columns 64 long) ran alone, and a one-row
 * call took 15% longer than with no chain at all. Two groups behind, each group's adds wait on
 * nothing but the chain and run beside the next groups' products. */
enum { FP4_LAG = 2 };

/* acc[t] += the blocks of one group's products P[t] in order, nq of them (1 to 4) */
INL void fp4_chain(float P[QUANT_TT][16], int64_t nq, const int nt, __m128 *acc) {
#pragma GCC unroll 4
    for (int t = 0; t < nt; t++) {
        const __m512 p = _mm512_load_ps(P[t]);
        acc[t] = _mm_add_ps(acc[t], _mm512_castps512_ps128(p));
        if (nq > 1) acc[t] = _mm_add_ps(acc[t], _mm512_extractf32x4_ps(p, 1));
        if (nq > 2) acc[t] = _mm_add_ps(acc[t], _mm512_extractf32x4_ps(p, 2));
        if (nq > 3) acc[t] = _mm_add_ps(acc[t], _mm512_extractf32x4_ps(p, 3));
    }
}

/* sum((2w+12) k') of one row's group (wl, wh: its low and high nibbles' bytes) against one token's
 * digits D: two short chains, one per digit of k', joined by a shift */
INL __m512i fp4_products(__m512i wl, __m512i wh, const int8_t (*D)[64]) {
    __m512i a1 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wl, _mm512_load_si512(D[0]));
    __m512i a0 = _mm512_dpbusd_epi32(_mm512_setzero_si512(), wl, _mm512_load_si512(D[2]));
    a1 = _mm512_dpbusd_epi32(a1, wh, _mm512_load_si512(D[1]));
    a0 = _mm512_dpbusd_epi32(a0, wh, _mm512_load_si512(D[3]));
    return _mm512_add_epi32(_mm512_slli_epi32(a1, 8), a0);
}

INL void fp4_tile(const uint8_t *const rp[RT], int64_t pfd, int64_t ng, int64_t last, int64_t nblk, const prep_u *pp,
                  const int nt, const float *ws, __m128 *acc) {
    const __m512i lut = _mm512_loadu_si512(FP4_LUT);
    _Alignas(64) float P[FP4_CHUNK / 4][QUANT_TT][16]; /* [group][token]: lane 4q+i, block q of the group and row i */
    for (int64_t g = 0; g < ng; g++) {
        const int tail = g == ng - 1 && last < 64;
        __m512i wl[RT], wh[RT], A1[RT]; /* A1: with one token, its products, made as each row is decoded */
#pragma GCC unroll 4
        for (int i = 0; i < RT; i++) {
            _mm_prefetch((const char *)(rp[i] + 64 * g + pfd), _MM_HINT_T0); /* the next tile's rows */
            __m512i v =
                tail ? _mm512_maskz_loadu_epi8(mask64(last), rp[i] + 64 * g) : _mm512_loadu_si512(rp[i] + 64 * g);
            wl[i] = _mm512_permutexvar_epi8(v, lut);
            wh[i] = _mm512_permutexvar_epi8(_mm512_srli_epi16(v, 4), lut);
            if (nt == 1) A1[i] = fp4_products(wl[i], wh[i], pp[0].p4.dig[g]);
        }
        const __m512 ws16 = _mm512_loadu_ps(ws + 16 * g);
#pragma GCC unroll 4
        for (int t = 0; t < nt; t++) {
            const int8_t(*D)[64] = pp[t].p4.dig[g];
            __m512i A[RT];
#pragma GCC unroll 4
            for (int i = 0; i < RT; i++) A[i] = nt == 1 ? A1[i] : fp4_products(wl[i], wh[i], D);
            if (pp[t].p4.r[g]) { /* the same for every row: the branch follows the inputs */
                const __m512i d4 = _mm512_load_si512(D[4]), d5 = _mm512_load_si512(D[5]);
#pragma GCC unroll 4
                for (int i = 0; i < RT; i++)
                    A[i] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(_mm512_slli_epi32(A[i], 3), wl[i], d4), wh[i], d5);
            }
            const __m512i u = _mm512_sub_epi32(treduce_epi32(A[0], A[1], A[2], A[3]), _mm512_load_si512(pp[t].p4.c[g]));
            _mm512_store_ps(P[g][t], _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(u), _mm512_load_ps(pp[t].p4.xs[g])), ws16));
        }
        if (g >= FP4_LAG) fp4_chain(P[g - FP4_LAG], 4, nt, acc); /* a group before the last: whole */
    }
    for (int64_t g = ng > FP4_LAG ? ng - FP4_LAG : 0; g < ng; g++) fp4_chain(P[g], imin(4, nblk - 4 * g), nt, acc);
}

/* ================================================================ quant, fp8
 *
 * Integer dot products. In units of 2^-10 a weight's magnitude is an integer W below 2^19 and
 * in units of 2^-9 an input is an integer k with |k| <= 448 * 512, so a block's sum is an
 * integer below 2^43 that must be rounded to f32 once, as the reference rounds its f64 sum.
 *
 * An e4m3 value has 4 significant bits. So W = 16 W' + Rw with Rw = 0 unless the weight is below
 * 1/8 (magnitude codes below 0x20, rare next to the 448 a block is scaled to), and W' < 2^15
 * fits two base-256 digits; likewise k = 8 k' + r with r in [-4, 3], 0 unless |x| < 1/8, and k'
 * fits two signed digits. The main pass takes the four digit products of W' k' per 64 weights
 * (the full W and k took nine); the vectors of a superblock where some input has r != 0 take
 * W' r (the same for every row: the branch follows the inputs) and those where the row has a
 * small code take Rw k' and Rw r, in a second pass. W's digits come from 64-entry byte tables
 * indexed by the code's low 6 bits (3 exponent, 3 mantissa bits); the high exponent bit moves
 * the magnitude up by 256, which picks the tables. The weight's sign selects, per byte, the
 * digits of k or of -k, which the input preparation stores side by side, so VNNI's
 * unsigned-by-signed byte products see an unsigned weight. Per block the digit sums stay far
 * below 2^31 and join as sum(W k) = 128 (2^16 g2 + 2^8 g1 + g0) + E, E the second pass's
 * 16 sum(W' r) + 8 sum(Rw k') + sum(Rw r): carried into two int32 parts whose f32 values are
 * exact, so that one FMA rounds the sum once (round_join: no f64, whose conversions each way
 * were the costliest step of a tile at several tokens).
 *
 * Lanes hold blocks, not elements, so no block needs a horizontal sum: a superblock is 16
 * blocks (512 bytes of a row) loaded as 8 vectors; 128-bit shuffles gather the first and the
 * second halves of the blocks into two sets of 4 vectors, and an in-lane 4x4 transpose of
 * dwords turns each set into 4 vectors whose dword lane l holds block 4(l%4) + l/4. The inputs
 * are prepared in the same order by the same shuffles. */

/* The block in lane l of a superblock result, and the lane of block b: 4(l%4) + l/4 both ways. */
static const int32_t FP8_LANE_BLOCK[16] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};

/* A code's magnitude times 1024, by its low 6 bits (exponent e, mantissa m): V = (8+m) << e,
 * or 2m for e = 0 (subnormal); with the high exponent bit set it is 256 V', V' = (8+m) << e.
 * W' = (magnitude >> 4): V >> 4 (FP8_MID) without the high bit; with it the low digit
 * (V' & 15) << 4 (FP8_LOW4) and the high digit V' >> 4, which is FP8_MID again. FP8_RW is
 * Rw = V & 15 (the high bit set, it is 0). The NaN codes (high exponent bit and all low bits
 * set) get 255 in FP8_LOW4, a low digit no finite code has: the tile keeps the largest low digit
 * it met instead of testing every code. (Two-source lookups of 128-entry tables would take the 7
 * bits at once, but they run at half the rate of these.) */
/* clang-format off */
static const uint8_t FP8_MID[64] = {
    0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7, 8, 9, 10, 11, 12, 13,
    14, 15, 16, 18, 20, 22, 24, 26, 28, 30, 32, 36, 40, 44, 48, 52, 56, 60, 64, 72, 80, 88, 96, 104, 112, 120};
static const uint8_t FP8_LOW4[64] = {
    128, 144, 160, 176, 192, 208, 224, 240, 0, 32, 64, 96, 128, 160, 192, 224, 0, 64, 128, 192, 0, 64, 128, 192, 0, 128,
    0, 128, 0, 128, 0, 128, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
    255};
static const uint8_t FP8_RW[64] = {
    0, 2, 4, 6, 8, 10, 12, 14, 0, 2, 4, 6, 8, 10, 12, 14, 0, 4, 8, 12, 0, 4, 8, 12, 0, 8, 0, 8, 0, 8, 0, 8, 0, 0, 0, 0,
    0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};
/* clang-format on */

/* Four rows of dwords a, b, c, d -> per 128-bit lane, out[s] = [a_s, b_s, c_s, d_s] */
INL void transpose4(__m512i a, __m512i b, __m512i c, __m512i d, __m512i out[4]) {
    __m512i t0 = _mm512_unpacklo_epi32(a, b), t1 = _mm512_unpackhi_epi32(a, b);
    __m512i t2 = _mm512_unpacklo_epi32(c, d), t3 = _mm512_unpackhi_epi32(c, d);
    out[0] = _mm512_unpacklo_epi64(t0, t2);
    out[1] = _mm512_unpackhi_epi64(t0, t2);
    out[2] = _mm512_unpacklo_epi64(t1, t3);
    out[3] = _mm512_unpackhi_epi64(t1, t3);
}

/* A superblock's 8 vectors (64 bytes each, in row order) -> u[8]: u[s] and u[4+s] hold dword s
 * of the first and of the second half of block 4(l%4) + l/4 in lane l */
INL void fp8_transpose(const __m512i z[8], __m512i u[8]) {
    __m512i h[8];
#pragma GCC unroll 4
    for (int m = 0; m < 4; m++) {
        h[m] = _mm512_shuffle_i32x4(z[2 * m], z[2 * m + 1], _MM_SHUFFLE(2, 0, 2, 0));
        h[4 + m] = _mm512_shuffle_i32x4(z[2 * m], z[2 * m + 1], _MM_SHUFFLE(3, 1, 3, 1));
    }
    transpose4(h[0], h[1], h[2], h[3], u);
    transpose4(h[4], h[5], h[6], h[7], u + 4);
}

/* Prepares blocks [b0, b0+nblk) of one token. Returns 0 when an input is not k/512 with
 * |k| <= 448 * 512. */
INL int fp8_prepare(const float *xt, const float *xst, int64_t cols, int64_t b0, int64_t nblk, fp8_prep *p) {
    __mmask16 ok = 0xFFFF;
    _Alignas(64) int8_t nat[6][8][64]; /* a superblock in row order: [digit][vector][byte] */
    for (int64_t sb = 0; sb < (nblk + 15) / 16; sb++) {
        const int64_t base = 32 * (b0 + 16 * sb);
        for (int v = 0; v < 8; v++)
            for (int q = 0; q < 4; q++) {
                int64_t c = base + 64 * v + 16 * q;
                __m512 x = c < cols ? _mm512_maskz_loadu_ps(mask16(cols - c), xt + c) : _mm512_setzero_ps();
                __m512i k = to_k(x, &ok);
                to_digits(k, &nat[1][v][16 * q], &nat[0][v][16 * q], &nat[4][v][16 * q]);
                to_digits(_mm512_sub_epi32(_mm512_setzero_si512(), k), &nat[3][v][16 * q], &nat[2][v][16 * q], &nat[5][v][16 * q]);
            }
        p->r[sb] = 0;
        for (int d = 0; d < 6; d++) {
            __m512i z[8], u[8];
            for (int v = 0; v < 8; v++) z[v] = _mm512_load_si512(nat[d][v]);
            fp8_transpose(z, u);
            for (int s = 0; s < 8; s++) {
                _mm512_store_si512(p->x[sb][s][d], u[s]);
                if (d == 4) p->r[sb] |= (uint8_t)((_mm512_test_epi8_mask(u[s], u[s]) != 0) << s);
            }
        }
        for (int l = 0; l < 16; l++) {
            int64_t b = 16 * sb + FP8_LANE_BLOCK[l];
            p->xs[sb][l] = b < nblk ? xst[b0 + b] : 0.0f;
        }
    }
    return ok == 0xFFFF;
}

/* Adds the first nsb blocks of 4 rows' superblock products P[row][lane] to acc, in block order:
 * after the transpose, block b's 4 rows are 128-bit lane b%4 of q[b/4]. */
INL void fp8_accumulate(float P[RT][16], int64_t nsb, __m128 *acc) {
    __m512i q[4];
    transpose4(_mm512_load_si512(P[0]), _mm512_load_si512(P[1]), _mm512_load_si512(P[2]), _mm512_load_si512(P[3]), q);
    __m128 a = *acc;
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) {
        const __m512 v = _mm512_castsi512_ps(q[j]);
        if (4 * j < nsb) a = _mm_add_ps(a, _mm512_castps512_ps128(v));
        if (4 * j + 1 < nsb) a = _mm_add_ps(a, _mm512_extractf32x4_ps(v, 1));
        if (4 * j + 2 < nsb) a = _mm_add_ps(a, _mm512_extractf32x4_ps(v, 2));
        if (4 * j + 3 < nsb) a = _mm_add_ps(a, _mm512_extractf32x4_ps(v, 3));
    }
    *acc = a;
}

/* The exact f64 value of the 16 int32 lanes hi * 2^16 + lo, as two halves */
INL void join_pd(__m512i hi, __m512i lo, double scale, __m512d v[2]) {
    const __m512d sh = _mm512_set1_pd(scale);
    v[0] = _mm512_fmadd_pd(_mm512_cvtepi32_pd(_mm512_castsi512_si256(hi)), sh, _mm512_cvtepi32_pd(_mm512_castsi512_si256(lo)));
    v[1] = _mm512_fmadd_pd(_mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(hi, 1)), sh,
                           _mm512_cvtepi32_pd(_mm512_extracti64x4_epi64(lo, 1)));
}

/* The two f64 halves of 16 lanes, each rounded once to f32 */
INL __m512 round_pd(const __m512d v[2]) {
    return _mm512_insertf32x8(_mm512_castps256_ps512(_mm512_cvtpd_ps(v[0])), _mm512_cvtpd_ps(v[1]), 1);
}

/* The integer 2^k H + L of each lane rounded once to f32, as the reference rounds its f64 sum:
 * it is 2^k H' + L' with H' = H + (L >> k) and L' = L & (2^k - 1), both exact in f32 while
 * |H'| < 2^24, and one FMA of exact operands rounds the exact result once. The few-token fp8
 * tiles' sums stay far inside that: |sum(W' k')| < 2^35 (k = 16), |128 sum(W' k') + E| < 2^43
 * (k = 23); the many-token path checks |H'| first (k = 12). */
INL __m512 round_join(__m512i H, __m512i L, const int k) {
    const __m512i h = _mm512_add_epi32(H, _mm512_srai_epi32(L, k));
    const __m512 l = _mm512_cvtepi32_ps(_mm512_and_si512(L, _mm512_set1_epi32((1 << k) - 1)));
    return _mm512_fmadd_ps(_mm512_cvtepi32_ps(h), _mm512_set1_ps((float)(1 << k)), l);
}

/* A superblock vector's digits of W', low first, by the tables tab (FP8_MID, FP8_LOW4) */
INL void fp8_digits(__m512i u, const __m512i tab[3], __m512i d[2]) {
    const __mmask64 e3 = _mm512_test_epi8_mask(u, _mm512_set1_epi8(0x40));
    const __m512i mid = _mm512_permutexvar_epi8(u, tab[0]);
    d[0] = _mm512_mask_permutexvar_epi8(mid, e3, u, tab[1]);
    d[1] = _mm512_maskz_mov_epi8(e3, mid);
}

/* A[k] += the products of one vector's weight digits (d0, d1; negative where neg) with the
 * prepared input digits X, one sum per digit pair */
INL void fp8_products(__m512i d0, __m512i d1, __mmask64 neg, const int8_t (*X)[64], __m512i A[4]) {
    const __m512i x0 = _mm512_mask_blend_epi8(neg, _mm512_load_si512(X[0]), _mm512_load_si512(X[2]));
    const __m512i x1 = _mm512_mask_blend_epi8(neg, _mm512_load_si512(X[1]), _mm512_load_si512(X[3]));
    A[0] = _mm512_dpbusd_epi32(A[0], d0, x0);
    A[1] = _mm512_dpbusd_epi32(A[1], d0, x1);
    A[2] = _mm512_dpbusd_epi32(A[2], d1, x0);
    A[3] = _mm512_dpbusd_epi32(A[3], d1, x1);
}

/* One row's superblock u[8] (transposed codes) against nt tokens' prepared superblock sb:
 * P[t][row] = each block's sum of products, rounded once, times the input and weight scales.
 * The row's digits are decoded once, before the tokens pass over them, each keeping a sum per
 * digit pair (short dependency chains). The products of r and of Rw run in a second pass, only
 * over the vectors that hold some (for a token: its own r, and the row's small codes). */
INL void fp8_superblock(const __m512i u[8], const __m512i tab[3], const prep_u *pp, int64_t sb, const int nt, __m512 ws,
                        __m512i *nan, float (*P)[RT][16], int row) {
    const __m512i hi2 = _mm512_set1_epi8(0x60); /* magnitude codes below 0x20 have both clear */
    __m512i d0[8], d1[8];
    __m512i low = hi2; /* one token: per byte, the least of the codes' two high exponent bits */
    __mmask64 neg[8];
    unsigned small = 0; /* the vectors s with a code whose Rw may not be 0 */
    __m512i A1[4] = {_mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512(), _mm512_setzero_si512()};
#pragma GCC unroll 8
    for (int s = 0; s < 8; s++) {
        __m512i d[2];
        neg[s] = _mm512_movepi8_mask(u[s]);
        fp8_digits(u[s], tab, d);
        d0[s] = d[0];
        d1[s] = d[1];
        *nan = _mm512_max_epu8(*nan, d[0]);
        if (nt == 1) {
            low = _mm512_min_epu8(low, _mm512_and_si512(u[s], hi2));
            fp8_products(d0[s], d1[s], neg[s], pp[0].p8.x[sb][s], A1); /* as the digits come */
        } else {
            small |= (unsigned)(_mm512_testn_epi8_mask(u[s], hi2) != 0) << s;
        }
    }
    /* With one token the vectors with a small code are looked for only where the superblock has
     * one (a mask test and its bit for every vector cost that call 5 to 9% of its time); with
     * more, the register a running minimum takes cost more than the tests. */
    if (nt == 1 && _mm512_testn_epi8_mask(low, low))
#pragma GCC unroll 8
        for (int s = 0; s < 8; s++) small |= (unsigned)(_mm512_testn_epi8_mask(u[s], hi2) != 0) << s;
    for (int t = 0; t < nt; t++) {
        __m512i A[4] = {A1[0], A1[1], A1[2], A1[3]};
        if (nt > 1)
#pragma GCC unroll 8
            for (int s = 0; s < 8; s++) fp8_products(d0[s], d1[s], neg[s], pp[t].p8.x[sb][s], A);
        /* sum(W' k') = 2^16 hi + lo */
        const __m512i hi = A[3], lo = _mm512_add_epi32(A[0], _mm512_slli_epi32(_mm512_add_epi32(A[1], A[2]), 8));
        __m512 part;
        float unit = 0x1p-12f; /* 128 (W = 16 W' + Rw, k = 8 k' + r) times 2^-19 (the units of W and k) */
        const unsigned with_r = pp[t].p8.r[sb]; /* the vectors s where the token has an r that is not 0 */
        if (with_r | small) {
            __m512i E[5]; /* sums of W' r (two digits), Rw k' (two digits), Rw r */
#pragma GCC unroll 5
            for (int k = 0; k < 5; k++) E[k] = _mm512_setzero_si512();
            for (unsigned m = with_r | small; m; m &= m - 1) {
                const int s = __builtin_ctz(m);
                const int8_t(*X)[64] = pp[t].p8.x[sb][s];
                const __m512i xr = _mm512_mask_blend_epi8(neg[s], _mm512_load_si512(X[4]), _mm512_load_si512(X[5]));
                if (with_r >> s & 1) {
                    E[0] = _mm512_dpbusd_epi32(E[0], d0[s], xr);
                    E[1] = _mm512_dpbusd_epi32(E[1], d1[s], xr);
                }
                if (small >> s & 1) {
                    const __m512i rw = _mm512_maskz_permutexvar_epi8(_mm512_testn_epi8_mask(u[s], hi2), u[s], tab[2]);
                    E[2] = _mm512_dpbusd_epi32(E[2], rw, _mm512_mask_blend_epi8(neg[s], _mm512_load_si512(X[0]), _mm512_load_si512(X[2])));
                    E[3] = _mm512_dpbusd_epi32(E[3], rw, _mm512_mask_blend_epi8(neg[s], _mm512_load_si512(X[1]), _mm512_load_si512(X[3])));
                    E[4] = _mm512_dpbusd_epi32(E[4], rw, xr);
                }
            }
            /* E = 16 sum(W' r) + 8 sum(Rw k') + sum(Rw r), below 2^28 */
            const __m512i e = _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(E[0], 4), _mm512_slli_epi32(E[1], 12)),
                                               _mm512_add_epi32(_mm512_add_epi32(_mm512_slli_epi32(E[2], 3), _mm512_slli_epi32(E[3], 11)), E[4]));
            /* 128 (2^16 hi + lo) + e = 2^23 (hi + (lo >> 16)) + 128 (lo & 0xFFFF) + e */
            part = round_join(_mm512_add_epi32(hi, _mm512_srai_epi32(lo, 16)),
                              _mm512_add_epi32(_mm512_slli_epi32(_mm512_and_si512(lo, _mm512_set1_epi32(0xFFFF)), 7), e), 23);
            unit = 0x1p-19f;
        } else {
            part = round_join(hi, lo, 16);
        }
        part = _mm512_mul_ps(part, _mm512_set1_ps(unit)); /* exact: the integer sum is at least 1 */
        _mm512_store_ps(P[t][row], _mm512_mul_ps(_mm512_mul_ps(part, _mm512_load_ps(pp[t].p8.xs[sb])), ws));
    }
}

/* One tile over a chunk: rp[i] at the chunk's first byte of row i, `bytes` of it valid, nblk
 * blocks; sp[i] at row i's scale of the chunk's first block; nt (1 to QUANT_TT) tokens. Returns 0 if
 * it met a NaN code. The rows go one after the other, each over the whole chunk, so the tile
 * reads its bytes in memory order (one stream per page for the prefetchers, where
 * superblock-major order interleaved the rows); every superblock's partials wait in P until
 * the blocks are added in order. */
INL int fp8_tile(const uint8_t *const rp[RT], int64_t pfd, int64_t bytes, int64_t nblk, const uint8_t *const sp[RT],
                 const prep_u *pp, const int nt, __m128 *acc) {
    const __m512i tab[3] = {_mm512_loadu_si512(FP8_MID), _mm512_loadu_si512(FP8_LOW4), _mm512_loadu_si512(FP8_RW)};
    __m512i nan = _mm512_setzero_si512(); /* the largest low digit: 255 only for a NaN code */
    const int64_t nsbs = (nblk + 15) / 16;
    _Alignas(64) float P[FP8V_CHUNK / 16][QUANT_TT][RT][16];
    __m512 ws[FP8V_CHUNK / 16];
    for (int i = 0; i < RT; i++)
        for (int64_t sb = 0; sb < nsbs; sb++) {
            const int64_t nsb = imin(16, nblk - 16 * sb);
            const int full = 512 * (sb + 1) <= bytes;
            __m512i z[8], u[8];
            const uint8_t *row = rp[i] + 512 * sb;
            if (full)
#pragma GCC unroll 8
                for (int v = 0; v < 8; v++) z[v] = _mm512_loadu_si512(row + 64 * v);
            else
                for (int v = 0; v < 8; v++) z[v] = _mm512_maskz_loadu_epi8(mask64(bytes - 512 * sb - 64 * v), row + 64 * v);
#pragma GCC unroll 8
            for (int v = 0; v < 8; v++) _mm_prefetch((const char *)(row + 64 * v + pfd), _MM_HINT_T0);
            fp8_transpose(z, u);
            if (i == 0 || sp[i] != sp[i - 1]) /* rows of one 32-row scale block share it */
                ws[sb] = e8m0_ps(_mm512_permutexvar_epi32(_mm512_loadu_si512(FP8_LANE_BLOCK),
                                                      _mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask16(nsb), sp[i] + 16 * sb))));
            fp8_superblock(u, tab, pp, sb, nt, ws[sb], &nan, P[sb], i);
            if (i == RT - 1) /* the blocks' in-order sums, a long chain, run beside the next superblock */
#pragma GCC unroll 4
                for (int t = 0; t < nt; t++) fp8_accumulate(P[sb][t], nsb, &acc[t]);
        }
    return _mm512_cmpeq_epi8_mask(nan, _mm512_set1_epi8((char)0xFF)) == 0;
}

/* ================================================================ quant, fp8, many tokens
 *
 * With 12 tokens or more, fp8 keeps integer sums with lanes holding 16 tokens, in 16-bit pairs
 * (VPDPWSSD): a lane's dword holds one digit of two consecutive inputs of its token, the row's
 * two weights are broadcast to every lane, and one instruction makes 32 multiply-adds with no
 * horizontal sum.
 *
 * A weight w (an e4m3 value) is the integer W = 1024 w, |W| <= 448 * 1024, split as
 * W = 16 W' + Rw with W' = sign (|W| >> 4) in 16 bits and Rw = sign (|W| & 15), which is 0 unless
 * |w| < 1/8 (2^-12 of the 448 a block is scaled to: magnitude codes below 0x20). An input is
 * k = 512 x = 4096 kh + kl with kl in [-2048, 2047] and kh in [-56, 56]. Per block,
 *     sum(W k) = 16 (4096 H + L) + X,  H = sum(W' kh), L = sum(W' kl), X = sum(Rw k),
 * H and L int32 sums (|L| <= 32 * 28672 * 2048 < 2^31), X taken in a second pass only over a
 * row's blocks that hold a small code. S = 4096 H + L can pass 2^31, but with H' = H + (L >> 12)
 * and L' = L & 4095 it is 4096 H' + L', and while |H'| < 2^24 (|S| below about 2^36, far past
 * what real sums reach) both are exact in f32 and one FMA rounds S once, as the reference's f64
 * sum is rounded; otherwise, and in the blocks with X, the join runs in f64. The 2^-15 that
 * makes S the block's sum rides on the input scale (declined below 2^-111, where that product
 * would leave f32's normal range). Two instructions per pair of columns make 64 products (an
 * f64 FMA makes 8); the join is the price, once per block.
 *
 * The inputs of a chunk of W8_COLS columns for 32 tokens are laid out [pair][digit][token]
 * (32 KB, in L1); each tile decodes its 4 rows' codes of the chunk to W' (the few-token tile's
 * digits, the sign applied after) and passes over the inputs, the rows' running f32 sums kept in
 * acc [row][token] (L2) until the row block is done. */

/* The gather offsets of 16 tokens' rows (lane t: t xstride), and the mask of the tokens of
 * vector v (tokens 16v..16v+15) among nt */
INL __m512i token_offsets(int64_t xstride) {
    return _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15), _mm512_set1_epi32((int)xstride));
}
INL __mmask16 token_mask(int nt, int v) {
    const int left = nt - 16 * v;
    return left >= 16 ? 0xFFFF : left > 0 ? (__mmask16)((1u << left) - 1) : 0;
}

/* The e8m0 scales s [n] (n <= 16) of one row's blocks as f32, into out [16]. */
INL void row_scales(const uint8_t *s, int64_t n, float *out) {
    _mm512_storeu_ps(out, e8m0_ps(_mm512_cvtepu8_epi32(_mm_maskz_loadu_epi8(mask16(n), s))));
}

/* acc [n][ld] (rows of ld tokens, ld a multiple of 16, n rounded up to 4 readable) ->
 * y [t * ystride + r] for rows r < n and tokens t < nt: 4 rows x 16 tokens per transpose */
INL void store_transposed(const float *acc, int64_t n, int ld, int nt, float *y, int64_t ystride) {
    for (int64_t r = 0; r < n; r += 4) {
        const __mmask16 m = mask16(n - r);
        for (int t0 = 0; t0 < nt; t0 += 16) {
            __m512i q[4];
            transpose4(_mm512_load_si512(acc + r * ld + t0), _mm512_load_si512(acc + (r + 1) * ld + t0),
                       _mm512_load_si512(acc + (r + 2) * ld + t0), _mm512_load_si512(acc + (r + 3) * ld + t0), q);
            for (int t = t0; t < t0 + 16 && t < nt; t++) {
                const __m512i v = q[t % 4];
                __m128i x;
                switch ((t - t0) / 4) {
                case 0: x = _mm512_castsi512_si128(v); break;
                case 1: x = _mm512_extracti32x4_epi32(v, 1); break;
                case 2: x = _mm512_extracti32x4_epi32(v, 2); break;
                default: x = _mm512_extracti32x4_epi32(v, 3); break;
                }
                _mm_mask_storeu_epi32(y + t * ystride + r, m, x);
            }
        }
    }
}

enum {
    W8_MIN_T = 12,   /* tokens from which fp8 takes this path: below, the tiles' passes of 4 tokens
                      * cost less (8 tokens: 4.2 times one token's time against 5.7) */
    W8_COLS = 256,   /* columns per chunk of prepared inputs */
    W8_ROWS = 512,   /* rows per row block */
    W8_TOKENS = 32,  /* tokens per pass: 2 vectors of 16 lanes */
    W8_AHEAD = 4,    /* tiles ahead that the weights are prefetched */
};

/* 64 weights' low and high bytes l and h -> their 64 words (two vectors, in column order),
 * negated where neg */
INL void w8_words(__m512i l, __m512i h, __mmask64 neg, __m512i il0, __m512i il1, int16_t *out) {
    const __m512i w0 = _mm512_permutex2var_epi8(l, il0, h), w1 = _mm512_permutex2var_epi8(l, il1, h);
    _mm512_store_si512(out, _mm512_mask_sub_epi16(w0, (__mmask32)neg, _mm512_setzero_si512(), w0));
    _mm512_store_si512(out + 32, _mm512_mask_sub_epi16(w1, (__mmask32)(neg >> 32), _mm512_setzero_si512(), w1));
}

/* Prepares nc columns of nt tokens (x at the first token's first column): K [pair][digit]
 * [token] the dwords (kh or kl of column 2p, of column 2p+1) in 16-bit halves, zero past them. */
INL void w8_prepare(const float *x, int64_t xstride, int nt, int64_t nc, int32_t *K) {
    const __m512i off = token_offsets(xstride);
    const __m512i lo16 = _mm512_set1_epi32(0xFFFF), half = _mm512_set1_epi32(2048);
    for (int v = 0; v < (nt + 15) / 16; v++) { /* the vectors a pass uses */
        const __mmask16 m = token_mask(nt, v);
        const float *xv = x + 16 * v * xstride;
        for (int64_t p = 0; p < W8_COLS / 2; p++) {
            __m512i hi[2], lo[2];
            for (int e = 0; e < 2; e++) {
                const int64_t c = 2 * p + e;
                const __m512 g = c < nc ? _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, off, xv + c, 4) : _mm512_setzero_ps();
                const __m512i k = k_of(g); /* checked before (w8_inputs_ok) */
                hi[e] = _mm512_srai_epi32(_mm512_add_epi32(k, half), 12);
                lo[e] = _mm512_sub_epi32(k, _mm512_slli_epi32(hi[e], 12));
            }
            const __m512i kh = _mm512_or_si512(_mm512_and_si512(hi[0], lo16), _mm512_slli_epi32(hi[1], 16));
            const __m512i kl = _mm512_or_si512(_mm512_and_si512(lo[0], lo16), _mm512_slli_epi32(lo[1], 16));
            _mm512_store_si512(K + (2 * p) * W8_TOKENS + 16 * v, kh);
            _mm512_store_si512(K + (2 * p + 1) * W8_TOKENS + 16 * v, kl);
        }
    }
}

/* X [i][token] = sum(Rw k) = 4096 sum(Rw kh) + sum(Rw kl) over block b (inputs Kb), below 2^27,
 * for the rows i in the mask `rows` (rare: kept out of the tile's registers) */
TGT __attribute__((noinline)) static void w8_rare(const int16_t rw[RT][W8_COLS], unsigned rows, const int32_t *Kb, int b,
                                                  int V, int32_t X[RT][W8_TOKENS]) {
    for (int i = 0; i < RT; i++) {
        if (!(rows >> i & 1)) continue;
        for (int v = 0; v < V; v++) {
            __m512i xh = _mm512_setzero_si512(), xl = _mm512_setzero_si512();
            for (int j = 0; j < 16; j++) {
                int32_t r2;
                memcpy(&r2, rw[i] + 32 * b + 2 * j, 4);
                const __m512i br = _mm512_set1_epi32(r2);
                xh = _mm512_dpwssd_epi32(xh, br, _mm512_load_si512(Kb + (2 * j) * W8_TOKENS + 16 * v));
                xl = _mm512_dpwssd_epi32(xl, br, _mm512_load_si512(Kb + (2 * j + 1) * W8_TOKENS + 16 * v));
            }
            _mm512_store_si512(X[i] + 16 * v, _mm512_add_epi32(_mm512_slli_epi32(xh, 12), xl));
        }
    }
}

/* S = 4096 H + L (+ X / 16 where X is not NULL) rounded once to f32, in f64 (see above) */
TGT __attribute__((noinline)) static __m512 w8_join_f64(__m512i H, __m512i L, const int32_t *X) {
    __m512d d[2];
    join_pd(H, L, 4096.0, d);
    if (X)
        for (int half = 0; half < 2; half++)
            d[half] = _mm512_fmadd_pd(_mm512_cvtepi32_pd(_mm256_load_si256((const __m256i *)(X + 8 * half))),
                                      _mm512_set1_pd(0.0625), d[half]);
    return round_pd(d);
}

/* One tile: 4 rows of words wq[i] (W', W8_COLS each, zero past the matrix) and rw[i] (Rw, valid
 * in the blocks of small[i]), V vectors of 16 tokens, nblk blocks; adds each block's scaled
 * sum to acc rows in order. */
INL void w8_tile(const int16_t wq[RT][W8_COLS], const int16_t rw[RT][W8_COLS], const uint32_t small[RT], const int32_t *K,
                 const float *xsv, const float ws[RT][16], int nblk, const int V, float *acc[RT]) {
    for (int b = 0; b < nblk; b++) {
        const int32_t *Kb = K + 32 * b * W8_TOKENS;
        __m512i h[RT][2], l[RT][2];
#pragma GCC unroll 4
        for (int i = 0; i < RT; i++)
#pragma GCC unroll 2
            for (int v = 0; v < 2; v++) h[i][v] = l[i][v] = _mm512_setzero_si512();
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) { /* constant trip count: fully unrolled */
            __m512i kh[2], kl[2];
#pragma GCC unroll 2
            for (int v = 0; v < V; v++) {
                kh[v] = _mm512_load_si512(Kb + (2 * j) * W8_TOKENS + 16 * v);
                kl[v] = _mm512_load_si512(Kb + (2 * j + 1) * W8_TOKENS + 16 * v);
            }
#pragma GCC unroll 4
            for (int i = 0; i < RT; i++) {
                int32_t w2;
                memcpy(&w2, wq[i] + 32 * b + 2 * j, 4);
                const __m512i bw = _mm512_set1_epi32(w2);
#pragma GCC unroll 2
                for (int v = 0; v < V; v++) {
                    h[i][v] = _mm512_dpwssd_epi32(h[i][v], bw, kh[v]);
                    l[i][v] = _mm512_dpwssd_epi32(l[i][v], bw, kl[v]);
                }
            }
        }
        unsigned rare = 0;
        for (int i = 0; i < RT; i++) rare |= (small[i] >> b & 1u) << i;
        _Alignas(64) int32_t X[RT][W8_TOKENS];
        if (rare) w8_rare(rw, rare, Kb, b, V, X);
#pragma GCC unroll 4
        for (int i = 0; i < RT; i++) {
            const __m512 s = _mm512_set1_ps(ws[i][b]);
#pragma GCC unroll 2
            for (int v = 0; v < V; v++) {
                /* S = 4096 H' + L' with both exact in f32 (see above), or in f64 */
                const __m512i H = _mm512_add_epi32(h[i][v], _mm512_srai_epi32(l[i][v], 12));
                const __m512 f = !(rare >> i & 1) && _mm512_cmplt_epu32_mask(_mm512_abs_epi32(H), _mm512_set1_epi32(1 << 24)) == 0xFFFF
                                     ? round_join(h[i][v], l[i][v], 12)
                                     : w8_join_f64(h[i][v], l[i][v], rare >> i & 1 ? X[i] + 16 * v : NULL);
                const __m512 p = _mm512_mul_ps(_mm512_mul_ps(f, _mm512_load_ps(xsv + (b * 2 + v) * 16)), s);
                _mm512_store_ps(acc[i] + 16 * v, _mm512_add_ps(_mm512_load_ps(acc[i] + 16 * v), p));
            }
        }
    }
}

/* Whether every input of tokens [0, T) is k/512 with |k| <= E4M3_K_MAX and every input scale is
 * 0 or at least 2^-111 (what the exact sums and the folded units need). */
INL int w8_inputs_ok(const float *x, const float *xs, int64_t cols, int64_t T, int64_t xstride) {
    __mmask16 ok = 0xFFFF;
    const int64_t nb = (cols + 31) / 32;
    for (int64_t t = 0; t < T; t++) {
        for (int64_t c = 0; c < cols; c += 16)
            to_k(_mm512_maskz_loadu_ps(mask16(cols - c), x + t * xstride + c), &ok);
        for (int64_t b = 0; b < nb; b++)
            if (fabsf(xs[t * nb + b]) < 0x1p-111f && xs[t * nb + b] != 0.0f) return 0;
    }
    return ok == 0xFFFF;
}

/* fp8 quant for T >= W8_MIN_T (see above); returns 0 when an input is out of the exact range or
 * a weight code is NaN, for the caller to take another kernel (which writes every output). */
TGT static int w8_quant(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T,
                        int64_t xstride, float *y, int64_t ystride) {
    const int64_t cols = w->cols, nb = (cols + 31) / 32;
    if (!w8_inputs_ok(x, xs, cols, T, xstride)) return 0;
    const __m512i tab[3] = {_mm512_loadu_si512(FP8_MID), _mm512_loadu_si512(FP8_LOW4), _mm512_loadu_si512(FP8_RW)};
    _Alignas(64) int32_t K[W8_COLS * W8_TOKENS];
    _Alignas(64) float xsv[W8_COLS / 32 * W8_TOKENS];
    _Alignas(64) float acc[W8_ROWS][W8_TOKENS];
    _Alignas(64) int16_t wq[RT][W8_COLS], rw[RT][W8_COLS];
    _Alignas(64) float ws[RT][16];
    /* bytes [lo0, hi0, lo1, hi1, ...] of the first and the second 32 bytes of lo and hi */
    _Alignas(64) uint8_t ilv[2][64];
    for (int i = 0; i < 64; i++) {
        ilv[0][i] = (uint8_t)((i & 1) * 64 + i / 2);
        ilv[1][i] = (uint8_t)((i & 1) * 64 + 32 + i / 2);
    }
    const __m512i il0 = _mm512_load_si512(ilv[0]), il1 = _mm512_load_si512(ilv[1]);
    const __m512i low7 = _mm512_set1_epi8(0x7F), hi2 = _mm512_set1_epi8(0x60);
    const uint8_t *sc = w->scale;
    for (int64_t t0 = 0; t0 < T; t0 += W8_TOKENS) {
        const int nt = (int)imin(W8_TOKENS, T - t0), V = nt > 16 ? 2 : 1;
        for (int64_t rb = r0; rb < r1; rb += W8_ROWS) {
            const int64_t rb1 = imin(r1, rb + W8_ROWS);
            memset(acc, 0, (size_t)((rb1 - rb + 3) / 4 * 4) * sizeof acc[0]); /* store_transposed reads 4 rows at a time */
            for (int64_t c0 = 0; c0 < cols; c0 += W8_COLS) {
                const int64_t nc = imin(W8_COLS, cols - c0);
                const int nblk = (int)((nc + 31) / 32);
                w8_prepare(x + t0 * xstride + c0, xstride, nt, nc, K);
                for (int b = 0; b < nblk; b++)
                    for (int t = 0; t < W8_TOKENS; t++)
                        xsv[b * W8_TOKENS + t] = t < nt ? xs[(t0 + t) * nb + c0 / 32 + b] * 0x1p-15f : 0.0f;
                for (int64_t r = rb; r < rb1; r += RT) {
                    const int nr = (int)imin(RT, rb1 - r);
                    int64_t ri[RT];
                    tile_rows(r, nr, ri);
                    __m512i nan = _mm512_setzero_si512(); /* the largest low digit: 255 only for a NaN code */
                    uint32_t small[RT];
                    float *ap[RT];
                    for (int i = 0; i < RT; i++) {
                        const uint8_t *row = (const uint8_t *)w->data + ri[i] * cols + c0;
                        small[i] = 0;
                        for (int v = 0; v < W8_COLS; v += 64) {
                            _mm_prefetch((const char *)(row + v + W8_AHEAD * RT * cols), _MM_HINT_T0);
                            const __m512i z = _mm512_maskz_loadu_epi8(mask64(nc - v), row + v);
                            const __mmask64 neg = _mm512_movepi8_mask(z);
                            __m512i d[2];
                            fp8_digits(z, tab, d);
                            nan = _mm512_max_epu8(nan, d[0]);
                            w8_words(d[0], d[1], neg, il0, il1, wq[i] + v);
                            /* magnitude codes 1..0x1F may have Rw != 0: the block takes the second pass */
                            const __mmask64 sm = _mm512_testn_epi8_mask(z, hi2) & _mm512_test_epi8_mask(z, low7);
                            if (sm) {
                                w8_words(_mm512_maskz_permutexvar_epi8(sm, z, tab[2]), _mm512_setzero_si512(), neg, il0, il1, rw[i] + v);
                                small[i] |= (uint32_t)((uint32_t)sm != 0) << (v / 32) | (uint32_t)((sm >> 32) != 0) << (v / 32 + 1);
                            }
                        }
                        row_scales(sc + (ri[i] / w->scale_rows) * nb + c0 / 32, nblk, ws[i]);
                        ap[i] = acc[ri[i] - rb];
                    }
                    if (_mm512_cmpeq_epi8_mask(nan, _mm512_set1_epi8((char)0xFF))) return 0;
                    /* a short tile repeats its last row: let the repeats add to a spare row */
                    float spare[W8_TOKENS] __attribute__((aligned(64)));
                    for (int i = nr; i < RT; i++) ap[i] = spare;
                    if (V == 1) w8_tile(wq, rw, small, K, xsv, ws, nblk, 1, ap);
                    else w8_tile(wq, rw, small, K, xsv, ws, nblk, 2, ap);
                }
            }
            store_transposed(&acc[0][0], rb1 - rb, W8_TOKENS, nt, y + t0 * ystride + (rb - r0), ystride);
        }
    }
    return 1;
}

/* ================================================================ quant, fp4, many tokens
 *
 * With lanes holding 16 tokens, fp4 sums in 16-bit pairs (VPDPWSSD) as fp8 does: a lane's
 * dword holds two inputs of its token, the row's two weights 2w (integers in [-12, 12]) are
 * broadcast to every lane, and one instruction makes 32 multiply-adds with no horizontal sum.
 * An input is k = 512x = 8 k' + r with k' in 16 bits and r in [-4, 3], 0 unless |x| < 1/8
 * (see the fp4 tiles), so a block's sum(2w k) = 8 sum(2w k') + sum(2w r), the second only over
 * the pairs where some token of the pass has r != 0, which a per-block mask lists. Both sums
 * stay below 2^24 (32 * 12 * 28672), and 8 A + Ar, 1024 times the block's exact sum, is
 * rounded once by the int -> f32 conversion; a block without r takes A alone, its units (2^-7
 * or 2^-10) riding on the input scale (declined below 2^-116).
 *
 * A byte of codes holds the columns 2j (low nibble) and 2j+1 (high nibble); the lookups give
 * all the low nibbles' 2w and all the high ones' as bytes, whose sign extension makes words,
 * so the pairs are columns (4m, 4m+2) and (4m+1, 4m+3) rather than neighbours. Per 128
 * columns the slots (dwords) run [low nibbles of columns 0..63][high nibbles of 0..63][the
 * same for 64..127], each part 16 pairs: block b of the 128 takes slots 32 (b/2) + 8 (b%2)
 * + [0, 8) and the same plus 16. The inputs are prepared in that order, [slot][token] for 32
 * tokens with the r dwords beside them (32 KB, in L1); rows pass over them 4 at a time, their
 * running f32 sums kept in acc [row][token] until the row block is done. */

enum {
    W4_MIN_T = 16,   /* tokens from which fp4 takes this path: below, the tiles' passes of 4 tokens
                      * cost less (8 tokens: 5.3 times one token's time against 8.4) */
    W4_COLS = 256,   /* columns per chunk of prepared inputs */
    W4_ROWS = 2048,  /* rows per row block: an expert's down projection in one, its inputs prepared once */
    W4_TOKENS = 32,  /* tokens per pass: 2 vectors of 16 lanes */
};

/* 2w for each e2m1 code w, repeated over the 64 entries VBMI indexes */
/* clang-format off */
static const int8_t FP4_2W[64] = {
    0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
    0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12, 0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12,
};
/* clang-format on */

/* The first slot of block b's two runs of 8 (the second starts 16 later) */
INL int w4_slot(int b) { return 32 * (b / 2) + 8 * (b % 2); }

/* The two columns of slot s (in a chunk) */
INL void w4_slot_cols(int s, int64_t c[2]) {
    const int64_t base = 64 * (s / 32) + ((s / 16) & 1) + 4 * (s % 16);
    c[0] = base;
    c[1] = base + 2;
}

/* Prepares nc columns of nt tokens (x at the first token's first column): K [slot][token] the
 * dwords of k' and R [slot][token] those of r, in 16-bit halves, zero past them; rq [block] the
 * mask of the block's 16 slots (its first run low) with some r != 0 among the tokens, xsv
 * [block][token] the input scales times 2^-10 (with r) or 2^-7 (xs at the first token's chunk
 * scales, nb per token). Returns 0 when an input is not k/512 with |k| <= E4M3_K_MAX or a scale
 * is below 2^-116. */
INL int w4_prepare(const float *x, int64_t xstride, const float *xs, int64_t nb, int nt, int64_t nc, int32_t *K,
                   int32_t *R, uint16_t *rq, float *xsv) {
    const __m512i off = token_offsets(xstride), lo16 = _mm512_set1_epi32(0xFFFF);
    __mmask16 ok = 0xFFFF;
    const int nblk = (int)((nc + 31) / 32);
    for (int b = 0; b < nblk; b++) rq[b] = 0;
    for (int v = 0; v < (nt + 15) / 16; v++) { /* the vectors a pass uses */
        const __mmask16 m = token_mask(nt, v);
        const float *xv = x + 16 * v * xstride;
        for (int s = 0; s < W4_COLS / 2; s++) {
            int64_t c[2];
            w4_slot_cols(s, c);
            __m512i k1[2], r[2];
            for (int e = 0; e < 2; e++) {
                const __m512 g = c[e] < nc ? _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, off, xv + c[e], 4) : _mm512_setzero_ps();
                k1[e] = split_k(to_k(g, &ok), &r[e]);
            }
            const __m512i kk = _mm512_or_si512(_mm512_and_si512(k1[0], lo16), _mm512_slli_epi32(k1[1], 16));
            const __m512i rr = _mm512_or_si512(_mm512_and_si512(r[0], lo16), _mm512_slli_epi32(r[1], 16));
            _mm512_store_si512(K + s * W4_TOKENS + 16 * v, kk);
            _mm512_store_si512(R + s * W4_TOKENS + 16 * v, rr);
            if (_mm512_test_epi32_mask(rr, rr)) {
                const int blk = 2 * (s / 32) + (s % 16) / 8, bit = (s % 8) + 8 * ((s / 16) & 1);
                rq[blk] |= (uint16_t)(1u << bit);
            }
        }
    }
    int small = 0;
    for (int b = 0; b < nblk; b++)
        for (int t = 0; t < W4_TOKENS; t++) {
            const float v = t < nt ? xs[t * nb + b] : 0.0f;
            small |= fabsf(v) < 0x1p-116f && v != 0.0f;
            xsv[b * W4_TOKENS + t] = v * (rq[b] ? 0x1p-10f : 0x1p-7f);
        }
    return ok == 0xFFFF && !small;
}

/* 64 code bytes z -> the 128 words 2w of their columns in slot order (see above) */
INL void w4_words(__m512i z, __m512i lut, int16_t *out) {
    const __m512i l = _mm512_permutexvar_epi8(z, lut), h = _mm512_permutexvar_epi8(_mm512_srli_epi16(z, 4), lut);
    _mm512_store_si512(out, _mm512_cvtepi8_epi16(_mm512_castsi512_si256(l)));
    _mm512_store_si512(out + 32, _mm512_cvtepi8_epi16(_mm512_castsi512_si256(h)));
    _mm512_store_si512(out + 64, _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(l, 1)));
    _mm512_store_si512(out + 96, _mm512_cvtepi8_epi16(_mm512_extracti64x4_epi64(h, 1)));
}

/* One tile: 4 rows of words wq[i] (2w in slot order, W4_COLS each), V vectors of 16 tokens,
 * nblk blocks; adds each block's scaled sum to acc rows in order. */
INL void w4_tile(const int16_t wq[RT][W4_COLS], const int32_t *K, const int32_t *R, const uint16_t *rq,
                 const float *xsv, const float ws[RT][16], int nblk, const int V, float *acc[RT]) {
    for (int b = 0; b < nblk; b++) {
        const int s0 = w4_slot(b);
        /* two chains per row and vector (the two runs of slots), joined after: with one, a
         * single vector of tokens would wait on the instruction's latency */
        __m512i a[RT][2], a2[RT][2];
#pragma GCC unroll 4
        for (int i = 0; i < RT; i++) a[i][0] = a[i][1] = a2[i][0] = a2[i][1] = _mm512_setzero_si512();
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) { /* constant trip count: fully unrolled */
            __m512i kv[2], kv2[2];
#pragma GCC unroll 2
            for (int v = 0; v < V; v++) {
                kv[v] = _mm512_load_si512(K + (s0 + j) * W4_TOKENS + 16 * v);
                kv2[v] = _mm512_load_si512(K + (s0 + 16 + j) * W4_TOKENS + 16 * v);
            }
#pragma GCC unroll 4
            for (int i = 0; i < RT; i++) {
                int32_t w2, w2b;
                memcpy(&w2, wq[i] + 2 * (s0 + j), 4);
                memcpy(&w2b, wq[i] + 2 * (s0 + 16 + j), 4);
                const __m512i bw = _mm512_set1_epi32(w2), bw2 = _mm512_set1_epi32(w2b);
#pragma GCC unroll 2
                for (int v = 0; v < V; v++) {
                    a[i][v] = _mm512_dpwssd_epi32(a[i][v], bw, kv[v]);
                    a2[i][v] = _mm512_dpwssd_epi32(a2[i][v], bw2, kv2[v]);
                }
            }
        }
#pragma GCC unroll 4
        for (int i = 0; i < RT; i++)
#pragma GCC unroll 2
            for (int v = 0; v < V; v++) a[i][v] = _mm512_add_epi32(a[i][v], a2[i][v]);
        if (rq[b]) { /* the same for every row: the branch follows the inputs */
            __m512i ar[RT][2];
#pragma GCC unroll 4
            for (int i = 0; i < RT; i++) ar[i][0] = ar[i][1] = _mm512_setzero_si512();
            for (unsigned mq = rq[b]; mq; mq &= mq - 1) {
                const int j = __builtin_ctz(mq), s = s0 + j % 8 + 16 * (j / 8);
#pragma GCC unroll 4
                for (int i = 0; i < RT; i++) {
                    int32_t w2;
                    memcpy(&w2, wq[i] + 2 * s, 4);
                    const __m512i bw = _mm512_set1_epi32(w2);
#pragma GCC unroll 2
                    for (int v = 0; v < V; v++)
                        ar[i][v] = _mm512_dpwssd_epi32(ar[i][v], bw, _mm512_load_si512(R + s * W4_TOKENS + 16 * v));
                }
            }
#pragma GCC unroll 4
            for (int i = 0; i < RT; i++)
#pragma GCC unroll 2
                for (int v = 0; v < V; v++) a[i][v] = _mm512_add_epi32(_mm512_slli_epi32(a[i][v], 3), ar[i][v]);
        }
#pragma GCC unroll 4
        for (int i = 0; i < RT; i++) {
            const __m512 s = _mm512_set1_ps(ws[i][b]);
#pragma GCC unroll 2
            for (int v = 0; v < V; v++) {
                const __m512 p = _mm512_mul_ps(_mm512_mul_ps(_mm512_cvtepi32_ps(a[i][v]), _mm512_load_ps(xsv + b * W4_TOKENS + 16 * v)), s);
                _mm512_store_ps(acc[i] + 16 * v, _mm512_add_ps(_mm512_load_ps(acc[i] + 16 * v), p));
            }
        }
    }
}

/* fp4 quant for T >= W4_MIN_T (see above); returns 0 when an input is out of the exact range,
 * for the caller to take another kernel (which writes every output). */
TGT static int w4_quant(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T,
                        int64_t xstride, float *y, int64_t ystride) {
    const int64_t cols = w->cols, nb = (cols + 31) / 32, rowbytes = (cols + 1) / 2;
    _Alignas(64) int32_t K[W4_COLS / 2 * W4_TOKENS], R[W4_COLS / 2 * W4_TOKENS];
    _Alignas(64) uint16_t rq[W4_COLS / 32];
    _Alignas(64) float xsv[W4_COLS / 32 * W4_TOKENS];
    _Alignas(64) float acc[W4_ROWS][W4_TOKENS];
    _Alignas(64) int16_t wq[RT][W4_COLS];
    _Alignas(64) float ws[RT][16];
    const __m512i lut = _mm512_loadu_si512(FP4_2W);
    const uint8_t *sc = w->scale;
    for (int64_t t0 = 0; t0 < T; t0 += W4_TOKENS) {
        const int nt = (int)imin(W4_TOKENS, T - t0), V = nt > 16 ? 2 : 1;
        for (int64_t rb = r0; rb < r1; rb += W4_ROWS) {
            const int64_t rb1 = imin(r1, rb + W4_ROWS);
            memset(acc, 0, (size_t)((rb1 - rb + 3) / 4 * 4) * sizeof acc[0]); /* store_transposed reads 4 rows at a time */
            for (int64_t c0 = 0; c0 < cols; c0 += W4_COLS) {
                const int64_t nc = imin(W4_COLS, cols - c0), bytes = imin(W4_COLS / 2, rowbytes - c0 / 2);
                const int nblk = (int)((nc + 31) / 32);
                if (!w4_prepare(x + t0 * xstride + c0, xstride, xs + t0 * nb + c0 / 32, nb, nt, nc, K, R, rq, xsv))
                    return 0;
                for (int64_t r = rb; r < rb1; r += RT) {
                    const int nr = (int)imin(RT, rb1 - r);
                    int64_t ri[RT];
                    tile_rows(r, nr, ri);
                    float *ap[RT];
                    for (int i = 0; i < RT; i++) {
                        const uint8_t *row = (const uint8_t *)w->data + ri[i] * rowbytes + c0 / 2;
                        for (int v = 0; v < W4_COLS / 2; v += 64) {
                            _mm_prefetch((const char *)(row + v + 4 * RT * rowbytes), _MM_HINT_T0);
                            w4_words(_mm512_maskz_loadu_epi8(mask64(bytes - v), row + v), lut, wq[i] + 2 * v);
                        }
                        row_scales(sc + (ri[i] / w->scale_rows) * nb + c0 / 32, nblk, ws[i]);
                        ap[i] = acc[ri[i] - rb];
                    }
                    float spare[W4_TOKENS] __attribute__((aligned(64)));
                    for (int i = nr; i < RT; i++) ap[i] = spare;
                    if (V == 1) w4_tile(wq, K, R, rq, xsv, ws, nblk, 1, ap);
                    else w4_tile(wq, K, R, rq, xsv, ws, nblk, 2, ap);
                }
            }
            store_transposed(&acc[0][0], rb1 - rb, W4_TOKENS, nt, y + t0 * ystride + (rb - r0), ystride);
        }
    }
    return 1;
}

/* ================================================================ act_quant
 *
 * Rounding to the e4m3 grid is one add and one subtract: for |v| in [2^e, 2^(e+1)) the grid
 * step is 2^(e-3) (2^-9 below 2^-6), and adding C = 1.5 * 2^(e+20) leaves exactly that step
 * as the ulp, so (|v| + C) - C rounds to nearest even like f32_to_e4m3. The sign is put back
 * afterwards so that values rounding to zero keep it. */

/* |v| <= 448 on the e4m3 grid, with v's sign */
INL __m512 e4m3_round(__m512 v) {
    const __m512i sign = _mm512_set1_epi32((int)0x80000000u);
    __m512 a = _mm512_abs_ps(v);
    __m512i e = _mm512_and_si512(_mm512_castps_si512(a), _mm512_set1_epi32(0x7F800000));
    e = _mm512_max_epi32(e, _mm512_set1_epi32(121 << 23)); /* 2^-6: the subnormal grid below */
    __m512 c = _mm512_castsi512_ps(_mm512_or_si512(_mm512_add_epi32(e, _mm512_set1_epi32(20 << 23)),
                                                   _mm512_set1_epi32(0x00400000)));
    __m512 r = _mm512_sub_ps(_mm512_add_ps(a, c), c);
    return _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(r), _mm512_and_si512(_mm512_castps_si512(v), sign)));
}

TGT static void avx512_act_quant(const float *x, int64_t n, float *q, float *s) {
    const __m512 inf = _mm512_set1_ps(INFINITY), lim = _mm512_set1_ps(448.0f);
    int64_t b = 0;
    for (; b + 32 <= n; b += 32) {
        __m512 v0 = _mm512_loadu_ps(x + b), v1 = _mm512_loadu_ps(x + b + 16);
        __m512 a = _mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1));
        /* a NaN or an infinity: the scalar set's bits */
        if (_mm512_cmp_ps_mask(_mm512_abs_ps(v0), inf, _CMP_NLT_UQ) | _mm512_cmp_ps_mask(_mm512_abs_ps(v1), inf, _CMP_NLT_UQ)) {
            kernels_scalar.act_quant(x + b, 32, q + b, s + b / 32);
            continue;
        }
        float sc = pow2_ceil(fmaxf(_mm512_reduce_max_ps(a), 1e-4f) * (1.0f / 448.0f));
        s[b / 32] = sc;
        __m512 inv = _mm512_set1_ps(1.0f / sc); /* exact: sc is a power of two in [2^-22, 2^120] */
        v0 = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v0, inv), _mm512_sub_ps(_mm512_setzero_ps(), lim)), lim);
        v1 = _mm512_min_ps(_mm512_max_ps(_mm512_mul_ps(v1, inv), _mm512_sub_ps(_mm512_setzero_ps(), lim)), lim);
        _mm512_storeu_ps(q + b, e4m3_round(v0));
        _mm512_storeu_ps(q + b + 16, e4m3_round(v1));
    }
    if (b < n) kernels_scalar.act_quant(x + b, n - b, q + b, s + b / 32);
}

/* ================================================================ drivers */

INL int fp8_usable(void) { return 1; } /* integers and exact f64: no denormal on the way */

#define DENSE_NAME avx512_dense_tiles
#define QUANT_NAME avx512_quant_tiles
#define QUANT_FP8_CHUNK(T) ((T) <= 4 ? FP8V_CHUNK : FP8V_CHUNK / 2)
#define FP4_GROUP 64
#include "drivers.h"

/* Rows [r0, r1) of an f32 or bf16 weight against nt tokens (both constants where it is
 * inlined): in blocks of WIDE_ROWS, each block's spans in order, its pairs of rows parking their
 * sums between spans; then the sums of 4 rows at a time joined as the 4 x 4 tiles join theirs. */
INL void dense_wide_rows(const dtype ty, const weight *w, int64_t r0, int64_t r1, const float *x, const int nt,
                         int64_t xstride, float *y, int64_t ystride) {
    const int64_t cols = w->cols, rowbytes = dense_esz2(ty) * cols / 2;
    _Alignas(64) float park[WIDE_ROWS][WIDE_TT][16];
    _Alignas(64) float xq[WIDE_SPAN * WIDE_TT]; /* the span's inputs, packed for dense_pair */
    for (int64_t rb = r0; rb < r1; rb += WIDE_ROWS) {
        const int64_t rb1 = imin(r1, rb + WIDE_ROWS);
        for (int64_t c0 = 0; c0 == 0 || c0 < cols; c0 += WIDE_SPAN) { /* once with no columns: zero sums */
            const int64_t c1 = imin(cols, c0 + WIDE_SPAN);
            for (int64_t c = c0; c < c1; c += 16)
                for (int t = 0; t < nt; t++)
                    _mm512_store_ps(xq + 16 * (nt * ((c - c0) / 16) + t), _mm512_maskz_loadu_ps(mask16(cols - c), x + t * xstride + c));
            for (int64_t r = rb; r < rb1; r += 2) {
                const int64_t ri[2] = {r, imin(r + 1, rb1 - 1)};
                const uint8_t *rp[2] = {(const uint8_t *)w->data + ri[0] * rowbytes, (const uint8_t *)w->data + ri[1] * rowbytes};
                __m512 acc[2][WIDE_TT];
#pragma GCC unroll 2
                for (int i = 0; i < 2; i++)
#pragma GCC unroll 8
                    for (int t = 0; t < nt; t++) acc[i][t] = c0 > 0 ? _mm512_load_ps(park[ri[i] - rb][t]) : _mm512_setzero_ps();
                dense_pair(ty, rp, c0, c1, cols, 4 * rowbytes, xq, nt, acc);
#pragma GCC unroll 2
                for (int i = 0; i < 2; i++)
#pragma GCC unroll 8
                    for (int t = 0; t < nt; t++) _mm512_store_ps(park[ri[i] - rb][t], acc[i][t]);
            }
        }
        for (int64_t r = rb; r < rb1; r += RT) {
            const int nr = (int)imin(RT, rb1 - r);
            int64_t ri[RT];
            tile_rows(r, nr, ri);
            for (int t = 0; t < nt; t++) {
                __m256 half[RT];
                for (int i = 0; i < RT; i++) {
                    const __m512 a = _mm512_load_ps(park[ri[i] - rb][t]);
                    half[i] = _mm256_add_ps(_mm512_castps512_ps256(a), _mm512_extractf32x8_ps(a, 1));
                }
                store_rows(y + t * ystride + (r - r0), nr, join_rows(half));
            }
        }
    }
}

/* 5 to 8 tokens of an f32 or bf16 weight (see "dense, 5 to 8 tokens"), the type and the token
 * count made constants for the tile */
TGT static void dense_wide(const weight *w, int64_t r0, int64_t r1, const float *x, int64_t T, int64_t xstride, float *y,
                           int64_t ystride) {
#define WIDE_CASE(TY)                                                               \
    switch (T) {                                                                    \
    case 5: dense_wide_rows(TY, w, r0, r1, x, 5, xstride, y, ystride); break;       \
    case 6: dense_wide_rows(TY, w, r0, r1, x, 6, xstride, y, ystride); break;       \
    case 7: dense_wide_rows(TY, w, r0, r1, x, 7, xstride, y, ystride); break;       \
    default: dense_wide_rows(TY, w, r0, r1, x, WIDE_TT, xstride, y, ystride); break; \
    }
    if (w->type == DT_F32) WIDE_CASE(DT_F32)
    else WIDE_CASE(DT_BF16)
#undef WIDE_CASE
}

TGT static void avx512_dense(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T,
                             int64_t xstride, float *y, int64_t ystride) {
    if (T > TT && T <= WIDE_TT && (w->type == DT_F32 || w->type == DT_BF16))
        dense_wide(w, r0, r1, x, T, xstride, y, ystride);
    else
        avx512_dense_tiles(w, r0, r1, x, xs, T, xstride, y, ystride);
}

/* many tokens: the paths with tokens in the lanes; otherwise (or when they decline) the tiles */
TGT static void avx512_quant(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T,
                             int64_t xstride, float *y, int64_t ystride) {
    if (w->type == DT_E4M3 && w->scale && w->cols > 0 && T >= W8_MIN_T &&
        w8_quant(w, r0, r1, x, xs, T, xstride, y, ystride))
        return;
    if (w->type == DT_FP4 && w->scale && w->cols > 0 && T >= W4_MIN_T &&
        w4_quant(w, r0, r1, x, xs, T, xstride, y, ystride))
        return;
    avx512_quant_tiles(w, r0, r1, x, xs, T, xstride, y, ystride);
}

const kernel_set kernels_avx512 = {"avx512", avx512_dense, avx512_quant, avx512_act_quant};

#endif
