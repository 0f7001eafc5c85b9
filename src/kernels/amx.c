/* amx.c - the amx set: the exact fp8 / fp4 block sums on AMX tiles (TDPBSSD), through the
 * instructions where the CPU has them and Linux grants the tile data, else through their
 * emulation (amx_tiles.h), which every x86-64 host with AVX2 runs; both give the scalar set's
 * bits. The tiles run only for calls of at least AMX_MIN_TOKENS tokens; fewer tokens, dense
 * weights and act_quant are the best vector set's (kernels_best()), which gives the same bits.
 *
 * A block's exact sum is an integer sum of byte products. An input x (an e4m3 value) is the
 * integer k = 512x (|k| <= 448 * 512) and an fp8 weight W the integer j = 512W. An e4m3 value has
 * 4 significant bits, so k = 8k' + r with r = k & 7 nonzero only for |x| < 1/8 (rare after
 * act_quant, which puts each block's largest input near 448), and k' (|k'| <= 28672) is two signed
 * base-256 digits; the same for the weight: j = 8j' + v. An fp4 weight w is the signed byte 2w.
 * Then, per block, with C the byte-product sums of the tiles:
 *     fp8: sum j k = 64 (C0 + 256 C1 + 65536 C2) + 8 (D0 + 256 D1) + E
 *          C0 = k'lo j'lo, C1 = k'lo j'hi + k'hi j'lo, C2 = k'hi j'hi,
 *          D0 = r j'lo + k'lo v, D1 = r j'hi + k'hi v, E = r v
 *     fp4: sum 2w k = 8 (C0 + 256 C1) + D0, C0 = k'lo 2w, C1 = k'hi 2w, D0 = r 2w
 * The D and E products run only for a block whose tile of tokens has an r or whose tile of rows
 * has a v. The sum, carried into two int32 parts whose f32 values are exact, is rounded once by
 * one f32 FMA, as the reference rounds its f64 sum; the scales and the block order are then the
 * scalar kernel's, in the same f32 operations. Inputs that are not k / 512 with |k| <= 448 * 512
 * and NaN weight codes go to the vector set's kernel. */
#if defined(__x86_64__)
#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "avx2.h"
#include "kernels.h"
#include "numerics.h"
#include "scratch.h"
#include "tile.h"

#define TILE_NATIVE 0 /* the emulation first (amx_kernel.h includes the operations again) */
#include "amx_tiles.h"

#define AMX_VEC __attribute__((target("avx2,fma")))
#define AMX_INL static inline __attribute__((always_inline)) AMX_VEC

enum {
    AMX_ROWS = 16,   /* weight rows per tile: B's 16 dword columns, C's 16 columns */
    AMX_TOKENS = 16, /* tokens per tile: A's and C's 16 rows */
    AMX_BLOCKS = 8,  /* blocks of 32 columns per prepared chunk */
    AMX_K_MAX = 448 * 512, /* the largest |k| = 512 |x| of an e4m3 input, and |j| of a weight */
};

/* Calls of fewer tokens than this go to the vector set (the crossover table). A tile
 * instruction costs the same at one token as at 16 (docs/AMX_NOTES.md: 5.9 ns either way), and a
 * call decodes every weight once for its tiles whatever its token count, so a call of a few
 * tokens pays the decode and whole tiles, where the vector set's kernel pays its products per
 * token. The model (`bench --kernels amx`; the tile instructions at the Xeon's costs, the work
 * around them timed) on this project's AMD EPYC (AVX2 around the tiles), 2026-12-07, one thread,
 * weights in cache, against the avx2 kernel beside it:
 *
 *   tokens          1     4     8     16    32    64
 *   fp8 2048x1024   4.1x  1.9x  1.2x  0.41x 0.26x 0.12x  (amx model time / avx2 time)
 *   fp4 512x2048    3.0x  1.2x  0.75x 0.50x 0.46x 0.20x
 *
 * On an AMX host the vector set is avx512, about twice avx2's speed at a few tokens (issue 45's
 * readings: fp8 0.92 ms at 8 tokens, 1.66 at 16, one thread's share), which moves each crossover
 * up by about a doubling: fp8 from 16 tokens, fp4 from 8. (KTransformers switches to its AMX
 * path from about 4 tokens per expert, for plain int8 weights.) An AMX host's bench prints the
 * real tiles beside the model and avx512's table to set these by. */
static int amx_min_tokens(dtype type) { return type == DT_FP4 ? 8 : 16; }

/* A chunk's inputs for every tile of tokens: in A's layout, a row of 64 bytes per token */
typedef struct {
    int8_t (*k)[64]; /* [block * tokens + t]: the digits of k', low then high, 32 bytes each */
    int8_t (*r)[64]; /* [block * tokens + t]: r = k & 7, twice (A's two halves meet either digit) */
    uint8_t *has_r;  /* [block * tiles + tile]: whether some r of the tile's tokens is nonzero */
    int64_t tokens;  /* rows per block: the call's tokens rounded up to whole tiles (the rest zero) */
} amx_inputs;

/* A chunk's weights for one tile of rows, in B's layout (row c / 4 of a group holds column c of
 * each weight row m at byte 4m + c % 4). The groups of 8 B rows are laid out so that each product
 * loads its B tile as two consecutive groups (16 rows): fp8 [0, hi, lo, 0, v, 0] gives [lo; 0]
 * (C0), [hi; lo] (C1), [0; hi] (C2), [v; 0] and [0; v]; fp4 [0, 2w, 0] gives [2w; 0] and
 * [0; 2w]. The zero groups are never written. */
typedef struct {
    _Alignas(64) int8_t g[AMX_BLOCKS][6][8][64]; /* [block][group][c / 4][4 m + c % 4] */
    float ws[AMX_BLOCKS][AMX_ROWS];               /* [block][m]: the block scales */
    uint8_t has_v[AMX_BLOCKS];                    /* [block]: whether some v is nonzero */
} amx_weights;

/* The tiles' configuration: every tile 16 rows of 64 bytes (a last tile of fewer tokens or rows
 * computes zeros there), so that one configuration serves a whole call */
static amx_tilecfg amx_config(void) {
    amx_tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < TILE_COUNT; i++) c.rows[i] = TILE_MAX_ROWS, c.colsb[i] = TILE_MAX_COLSB;
    return c;
}

/* 32 int32 lanes (each within a byte) as 32 bytes in order */
AMX_INL __m256i amx_pack_bytes(__m256i a, __m256i b, __m256i c, __m256i d) {
    const __m256i v = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    return _mm256_permutevar8x32_epi32(v, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* An integer n as 8k' + r and k' as signed base-256 digits: lo (low byte, signed) and hi */
AMX_INL void amx_split(__m256i n, __m256i *lo, __m256i *hi, __m256i *r) {
    const __m256i np = _mm256_srai_epi32(n, 3);
    *r = _mm256_and_si256(n, _mm256_set1_epi32(7));
    *lo = _mm256_srai_epi32(_mm256_slli_epi32(np, 24), 24);
    *hi = _mm256_srai_epi32(_mm256_sub_epi32(np, *lo), 8);
}

/* Prepares blocks [b0, b0+nblk) of the call's T tokens. Returns 0 when an input is not k / 512
 * with |k| <= AMX_K_MAX. */
AMX_VEC static int amx_prepare(const float *x, int64_t xstride, int64_t T, int64_t cols, int64_t b0, int nblk,
                               amx_inputs *in) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    const int64_t tiles = in->tokens / AMX_TOKENS;
    __m256i bad = _mm256_setzero_si256();
    memset(in->has_r, 0, (size_t)(nblk * tiles));
    for (int b = 0; b < nblk; b++) {
        const int64_t c0 = (b0 + b) * 32;
        for (int64_t t = 0; t < in->tokens; t++) {
            int8_t *k = in->k[b * in->tokens + t], *r = in->r[b * in->tokens + t];
            if (t >= T) {
                memset(k, 0, 64);
                memset(r, 0, 64);
                continue;
            }
            __m256i lo[4], hi[4], rr[4], any = _mm256_setzero_si256();
            for (int q = 0; q < 4; q++) {
                const int64_t n = cols - c0 - 8 * q; /* inputs left in the row from this vector */
                const __m256i m = _mm256_cmpgt_epi32(_mm256_set1_epi32((int)(n < 8 ? (n > 0 ? n : 0) : 8)), lane);
                const __m256i kk = to_k(_mm256_maskload_ps(x + t * xstride + c0 + 8 * q, m), AMX_K_MAX, &bad);
                amx_split(kk, &lo[q], &hi[q], &rr[q]);
                any = _mm256_or_si256(any, rr[q]);
            }
            _mm256_storeu_si256((__m256i *)k, amx_pack_bytes(lo[0], lo[1], lo[2], lo[3]));
            _mm256_storeu_si256((__m256i *)(k + 32), amx_pack_bytes(hi[0], hi[1], hi[2], hi[3]));
            const __m256i rb = amx_pack_bytes(rr[0], rr[1], rr[2], rr[3]);
            _mm256_storeu_si256((__m256i *)r, rb);
            _mm256_storeu_si256((__m256i *)(r + 32), rb);
            in->has_r[b * tiles + t / AMX_TOKENS] |= !_mm256_testz_si256(any, any);
        }
    }
    return _mm256_testz_si256(bad, bad);
}

/* Eight rows' 32 bytes (their digits of one kind for one block) to B's layout: dword c / 4 of
 * row m to row c / 4 of the group, at byte 4m, for rows m0..m0+7 (an 8 x 8 transpose of dwords) */
AMX_INL void amx_scatter8(int8_t (*group)[64], int m0, const __m256i r[8]) {
    __m256i a[8], b[8];
    for (int i = 0; i < 8; i += 2) {
        a[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
        a[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
    }
    for (int i = 0; i < 8; i += 4)
        for (int j = 0; j < 2; j++) {
            b[i + j] = _mm256_unpacklo_epi64(a[i + j], a[i + j + 2]);
            b[i + j + 2] = _mm256_unpackhi_epi64(a[i + j], a[i + j + 2]);
        }
    /* b[4g + x]: lane l of 128-bit half L holds row 4g + l's dword 4L + k, k = 0, 2, 1, 3 for x = 0..3 */
    for (int k = 0; k < 4; k++) {
        const int x = 2 * (k & 1) + (k >> 1);
        _mm256_storeu_si256((__m256i *)&group[k][4 * m0], _mm256_permute2x128_si256(b[x], b[4 + x], 0x20));
        _mm256_storeu_si256((__m256i *)&group[k + 4][4 * m0], _mm256_permute2x128_si256(b[x], b[4 + x], 0x31));
    }
}

/* the signed bytes 2w of each e2m1 code */
static const int8_t FP4_2W[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* 2^(e-4) for an e4m3 exponent e >= 4 (else 0), low and high bytes; 2^max(e-1, 0) for e < 4 */
static const uint8_t FP8_BIG_LO[16] = {0, 0, 0, 0, 1, 2, 4, 8, 16, 32, 64, 128, 0, 0, 0, 0};
static const uint8_t FP8_BIG_HI[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 2, 4, 8};
static const uint8_t FP8_SMALL[16] = {1, 1, 2, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0};

/* 16 e4m3 codes (16-bit lanes) as j = 512 W = 8 j' + v (v = j & 7): the bytes of j' (lo signed,
 * hi) and v; *nan gets a lane set for a NaN code. |j'| = (8 + m) 2^(e-4) from e = 4 on, else
 * ((8 + m or m) 2^max(e-1, 0)) >> 3 with v its low bits; a negative j takes the floor. */
AMX_INL void amx_fp8_digits(__m256i c, __m256i *lo, __m256i *hi, __m256i *v, __m256i *nan) {
    const __m256i lo_t = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)FP8_BIG_LO));
    const __m256i hi_t = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)FP8_BIG_HI));
    const __m256i sm_t = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)FP8_SMALL));
    const __m256i e = _mm256_and_si256(_mm256_srli_epi16(c, 3), _mm256_set1_epi16(15));
    const __m256i idx = _mm256_or_si256(e, _mm256_set1_epi16((short)0x8000)); /* high bytes look up nothing */
    const __m256i base = _mm256_or_si256(_mm256_and_si256(c, _mm256_set1_epi16(7)),
                                         _mm256_and_si256(_mm256_cmpgt_epi16(e, _mm256_setzero_si256()), _mm256_set1_epi16(8)));
    const __m256i big = _mm256_or_si256(_mm256_shuffle_epi8(lo_t, idx), _mm256_slli_epi16(_mm256_shuffle_epi8(hi_t, idx), 8));
    const __m256i small = _mm256_mullo_epi16(base, _mm256_shuffle_epi8(sm_t, idx));
    const __m256i mag = _mm256_add_epi16(_mm256_mullo_epi16(base, big), _mm256_srli_epi16(small, 3));
    const __m256i low = _mm256_and_si256(small, _mm256_set1_epi16(7));
    const __m256i neg = _mm256_srai_epi16(_mm256_slli_epi16(c, 8), 15);
    /* -(8 mag + low) = 8 (-mag - 1) + (8 - low) where low > 0 */
    const __m256i t = _mm256_sub_epi16(mag, _mm256_and_si256(neg, _mm256_cmpgt_epi16(low, _mm256_setzero_si256())));
    const __m256i jp = _mm256_sub_epi16(_mm256_xor_si256(t, neg), neg);
    *v = _mm256_and_si256(_mm256_sub_epi16(_mm256_xor_si256(low, neg), neg), _mm256_set1_epi16(7));
    *lo = _mm256_srai_epi16(_mm256_slli_epi16(jp, 8), 8);
    *hi = _mm256_srai_epi16(_mm256_sub_epi16(jp, *lo), 8);
    *nan = _mm256_or_si256(*nan, _mm256_cmpeq_epi16(_mm256_and_si256(c, _mm256_set1_epi16(0x7F)), _mm256_set1_epi16(0x7F)));
}

/* 32 int16 lanes (each within a byte; a: columns 0..15, b: 16..31) as 32 bytes in order */
AMX_INL __m256i amx_pack16(__m256i a, __m256i b) {
    return _mm256_permute4x64_epi64(_mm256_packs_epi16(a, b), _MM_SHUFFLE(3, 1, 2, 0));
}

/* Decodes blocks [b0, b0+nblk) of rows [r, r+nr) into wt (the tile's other rows zero). Returns 0
 * for a NaN fp8 code. */
AMX_VEC static int amx_decode(const weight *w, int64_t r, int nr, int64_t b0, int nblk, amx_weights *wt) {
    const int fp4 = w->type == DT_FP4;
    const int64_t cols = w->cols, rowbytes = fp4 ? (cols + 1) / 2 : cols;
    const __m128i lut = _mm_loadu_si128((const __m128i *)FP4_2W), col = _mm_setr_epi8(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    __m256i nan = _mm256_setzero_si256();
    const uint8_t *sp[AMX_ROWS]; /* each row's block scales from b0 on */
    for (int m = 0; m < nr; m++) sp[m] = w->scale + ((r + m) / w->scale_rows) * ((cols + 31) / 32) + b0;
    for (int b = 0; b < nblk; b++) {
        const int64_t c0 = (b0 + b) * 32, n = imin(32, cols - c0); /* the block's columns */
        __m256i anyv = _mm256_setzero_si256();
        for (int m = 0; m < AMX_ROWS; m++) wt->ws[b][m] = m < nr ? e8m0_to_f32(sp[m][b]) : 0.0f;
        for (int h = 0; h < AMX_ROWS / 8; h++) {
            __m256i d[3][8]; /* fp8: hi, lo, v; fp4: 2w */
            for (int i = 0; i < 8; i++) {
                const int m = 8 * h + i;
                const uint8_t *src = (const uint8_t *)w->data + (r + m) * rowbytes + (fp4 ? c0 / 2 : c0);
                if (m >= nr) {
                    d[0][i] = d[1][i] = d[2][i] = _mm256_setzero_si256();
                    continue;
                }
                _Alignas(32) uint8_t raw[32]; /* a last block's bytes, zero past the row */
                if (n < 32) {
                    memset(raw, 0, sizeof raw);
                    memcpy(raw, src, (size_t)(fp4 ? (n + 1) / 2 : n));
                    src = raw;
                }
                if (fp4) {
                    const __m128i bytes = _mm_loadu_si128((const __m128i *)src), m4 = _mm_set1_epi8(15);
                    const __m128i lo = _mm_and_si128(bytes, m4), hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), m4);
                    /* columns past the row's end are zero (the odd row's spare nibble too) */
                    const __m128i a = _mm_and_si128(_mm_shuffle_epi8(lut, _mm_unpacklo_epi8(lo, hi)),
                                                    _mm_cmpgt_epi8(_mm_set1_epi8((char)n), col));
                    const __m128i c = _mm_and_si128(_mm_shuffle_epi8(lut, _mm_unpackhi_epi8(lo, hi)),
                                                    _mm_cmpgt_epi8(_mm_set1_epi8((char)n), _mm_add_epi8(col, _mm_set1_epi8(16))));
                    d[0][i] = _mm256_setr_m128i(a, c);
                    continue;
                }
                const __m256i codes = _mm256_loadu_si256((const __m256i *)src);
                __m256i lo[2], hi[2], v[2];
                amx_fp8_digits(_mm256_cvtepu8_epi16(_mm256_castsi256_si128(codes)), &lo[0], &hi[0], &v[0], &nan);
                amx_fp8_digits(_mm256_cvtepu8_epi16(_mm256_extracti128_si256(codes, 1)), &lo[1], &hi[1], &v[1], &nan);
                d[0][i] = amx_pack16(hi[0], hi[1]);
                d[1][i] = amx_pack16(lo[0], lo[1]);
                d[2][i] = amx_pack16(v[0], v[1]);
                anyv = _mm256_or_si256(anyv, d[2][i]);
            }
            amx_scatter8(wt->g[b][1], 8 * h, d[0]);
            if (!fp4) {
                amx_scatter8(wt->g[b][2], 8 * h, d[1]);
                amx_scatter8(wt->g[b][4], 8 * h, d[2]);
            }
        }
        wt->has_v[b] = !_mm256_testz_si256(anyv, anyv);
    }
    return _mm256_testz_si256(nan, nan);
}

/* One block's part for 8 rows of one token, from its sums s[i] (C0, C1, C2, D0, D1, E at 8
 * rows each; the D and E only with fix): the exact sum S rounded once to f32, in units of the
 * block's products (2^-10 fp4, 2^-18 fp8). fp8: S = 64 C0 + 8 D0 + E + 256 (64 C1 + 8 D1) + 2^22
 * C2; fp4: S = 8 C0 + D0 + 2048 C1. Carried into S = 2^24 H + L (0 <= L < 2^24, |H| < 2^18),
 * both exact in f32, fma(H, 2^24 unit, L unit) rounds it once. */
AMX_INL __m256 amx_part(const int32_t *const s[6], const int fp4, const int fix) {
#define AMX_SUM(i) _mm256_loadu_si256((const __m256i *)s[i])
    const __m256i c1 = AMX_SUM(1);
    __m256i a0, s0, H; /* a0: the sum's low terms, S = a0 + 2^8 a1 + 2^16 a2 for the a1 and a2 below */
    if (fp4) { /* a1 = 8 C1, a2 = 0 */
        a0 = _mm256_slli_epi32(AMX_SUM(0), 3);
        if (fix) a0 = _mm256_add_epi32(a0, AMX_SUM(3));
        s0 = _mm256_add_epi32(a0, _mm256_slli_epi32(_mm256_and_si256(c1, _mm256_set1_epi32(0x1FFF)), 11));
        H = _mm256_add_epi32(_mm256_srai_epi32(s0, 24), _mm256_srai_epi32(c1, 13));
    } else { /* a1 = 64 C1 + 8 D1, a2 = 64 C2 */
        const __m256i c2 = AMX_SUM(2);
        a0 = _mm256_slli_epi32(AMX_SUM(0), 6);
        __m256i a1 = _mm256_slli_epi32(c1, 6);
        if (fix) {
            a0 = _mm256_add_epi32(a0, _mm256_add_epi32(_mm256_slli_epi32(AMX_SUM(3), 3), AMX_SUM(5)));
            a1 = _mm256_add_epi32(a1, _mm256_slli_epi32(AMX_SUM(4), 3));
        }
        s0 = _mm256_add_epi32(_mm256_add_epi32(a0, _mm256_slli_epi32(_mm256_and_si256(a1, _mm256_set1_epi32(0xFFFF)), 8)),
                              _mm256_slli_epi32(_mm256_and_si256(c2, _mm256_set1_epi32(3)), 22));
        H = _mm256_add_epi32(_mm256_add_epi32(_mm256_srai_epi32(s0, 24), _mm256_srai_epi32(a1, 16)), _mm256_srai_epi32(c2, 2));
    }
#undef AMX_SUM
    const float unit = fp4 ? 0x1p-10f : 0x1p-18f;
    const __m256 L = _mm256_cvtepi32_ps(_mm256_and_si256(s0, _mm256_set1_epi32(0xFFFFFF)));
    return _mm256_fmadd_ps(_mm256_cvtepi32_ps(H), _mm256_set1_ps(unit * 0x1p24f), _mm256_mul_ps(L, _mm256_set1_ps(unit)));
}

/* Adds a block to nr rows by nt tokens of y (y[n * ystride + m]) from its tiles' sums
 * s[i][n][m]: each part times the input scale xs[n * nb] and the weight's block scale ws[m],
 * added to the earlier blocks (to 0 for the first), as scalar_quant does. Whole tiles of rows
 * take plain loads and stores (masked ones are slow on some CPUs). */
AMX_INL void amx_combine_as(const int32_t s[6][AMX_TOKENS][AMX_ROWS], const int fp4, const int fix, int nr, int nt,
                            const float *xs, int64_t nb, const float *ws, int first, float *y, int64_t ystride) {
    const __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    for (int h = 0; h < AMX_ROWS / 8 && 8 * h < nr; h++) {
        const int whole = nr >= 8 * h + 8;
        const __m256i mask = _mm256_cmpgt_epi32(_mm256_set1_epi32(nr - 8 * h), lane);
        const __m256 wsv = _mm256_loadu_ps(ws + 8 * h);
        for (int n = 0; n < nt; n++) {
            const int32_t *const sn[6] = {&s[0][n][8 * h], &s[1][n][8 * h], &s[2][n][8 * h],
                                          &s[3][n][8 * h], &s[4][n][8 * h], &s[5][n][8 * h]};
            const __m256 v = _mm256_mul_ps(_mm256_mul_ps(amx_part(sn, fp4, fix), _mm256_set1_ps(xs[n * nb])), wsv);
            float *o = y + n * ystride + 8 * h;
            if (whole) _mm256_storeu_ps(o, _mm256_add_ps(first ? _mm256_setzero_ps() : _mm256_loadu_ps(o), v));
            else _mm256_maskstore_ps(o, mask, _mm256_add_ps(first ? _mm256_setzero_ps() : _mm256_maskload_ps(o, mask), v));
        }
    }
}

/* amx_combine_as for the block's kind: fp4 or fp8, with or without the D and E sums */
AMX_VEC static void amx_combine(const int32_t s[6][AMX_TOKENS][AMX_ROWS], int fp4, int fix, int nr, int nt,
                                const float *xs, int64_t nb, const float *ws, int first, float *y, int64_t ystride) {
    if (fp4) {
        if (fix) amx_combine_as(s, 1, 1, nr, nt, xs, nb, ws, first, y, ystride);
        else amx_combine_as(s, 1, 0, nr, nt, xs, nb, ws, first, y, ystride);
    } else {
        if (fix) amx_combine_as(s, 0, 1, nr, nt, xs, nb, ws, first, y, ystride);
        else amx_combine_as(s, 0, 0, nr, nt, xs, nb, ws, first, y, ystride);
    }
}

#define AMX_QUANT amx_quant_emulated
#include "amx_kernel.h"
#undef AMX_QUANT
#undef TILE_NATIVE

#define TILE_NATIVE 1
#define AMX_QUANT amx_quant_native
#include "amx_kernel.h"
#undef AMX_QUANT
#undef TILE_NATIVE

#define TILE_NATIVE 2
#define AMX_QUANT amx_quant_counted
#include "amx_kernel.h"
#undef AMX_QUANT
#undef TILE_NATIVE

/* CPUID.(7, 0):EDX bits 24 (AMX-TILE) and 25 (AMX-INT8), and Linux's permission for the tile
 * data (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA), which covers the whole process;
 * a refusal means no AMX, never an error. A build with DSV41_AMX_EMULATE defined never uses the
 * instructions: it runs the whole suite through the emulation on any host. */
static int amx_probe(void) {
#if defined(DSV41_AMX_EMULATE)
    return 0;
#else
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 24 & 1) || !(d >> 25 & 1)) return 0;
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#endif
}

int amx_native(void) {
    static int state; /* 0 not asked yet, 1 no, 2 yes: the host's answer, the same for every thread */
    int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
    if (!s) {
        s = amx_probe() ? 2 : 1;
        __atomic_store_n(&state, s, __ATOMIC_RELEASE);
    }
    return s == 2;
}

/* the way a call goes: 0 to the vector set, else to the tiles */
static int amx_takes(const weight *w, int64_t T) {
    return (w->type == DT_FP4 || w->type == DT_E4M3) && w->scale && w->cols > 0 && T >= amx_min_tokens(w->type);
}

/* the tile kernel (native or emulated) where it takes the call, else or where it declines the
 * vector set's */
static void amx_quant_with(int native, const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs,
                           int64_t T, int64_t xstride, float *y, int64_t ystride) {
    if (amx_takes(w, T) && (native ? amx_quant_native : amx_quant_emulated)(w, r0, r1, x, xs, T, xstride, y, ystride, NULL))
        return;
    kernels_best()->quant(w, r0, r1, x, xs, T, xstride, y, ystride);
}

static void amx_quant(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T,
                      int64_t xstride, float *y, int64_t ystride) {
    amx_quant_with(amx_native(), w, r0, r1, x, xs, T, xstride, y, ystride);
}

static void amx_quant_emulation(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T,
                                int64_t xstride, float *y, int64_t ystride) {
    amx_quant_with(0, w, r0, r1, x, xs, T, xstride, y, ystride);
}

/* ---- the model: what a call would take on the tiles of the Xeon AMX_NOTES.md measured */

/* Nanoseconds per tile instruction on one core of that Xeon (docs/AMX_NOTES.md in the shared
 * data, "Instruction costs", register-only loops, 2026-12-07): tdpbusd of full tiles into four
 * independent accumulators, taken for tdpbssd too (the same unit; not measured apart); tileloadd
 * of 16 x 64 bytes from L1; tilestored; tilezero; ldtilecfg with its tilezero and tilerelease. */
static const struct {
    double dp, load, store, zero, config;
} AMX_NS = {5.9, 2.3, 4.2, 0.15, 52.0};

/* What the model calls have counted and timed since the process began, all threads */
static amx_tally tally;

static uint64_t amx_now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* A call the tiles take runs twice: the kernel with its tile instructions only counted (the work
 * around them done for real, its results thrown away), then the vector set's kernel for the
 * results the rest of the forward needs; the two times go to the tally apart. */
static void amx_quant_model(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T,
                            int64_t xstride, float *y, int64_t ystride) {
    if (!amx_takes(w, T)) {
        kernels_best()->quant(w, r0, r1, x, xs, T, xstride, y, ystride);
        return;
    }
    amx_count n = {0, 0, 0, 0, 0};
    const uint64_t t0 = amx_now_ns();
    const int took = amx_quant_counted(w, r0, r1, x, xs, T, xstride, y, ystride, &n);
    const uint64_t t1 = amx_now_ns();
    kernels_best()->quant(w, r0, r1, x, xs, T, xstride, y, ystride);
    const uint64_t t2 = amx_now_ns();
    /* a call the tiles decline costs its preparation and the vector kernel, both for real */
    __atomic_fetch_add(&tally.outside_ns, t1 - t0 + (took ? 0 : t2 - t1), __ATOMIC_RELAXED);
    __atomic_fetch_add(&tally.vector_ns, took ? t2 - t1 : 0, __ATOMIC_RELAXED);
    __atomic_fetch_add(&tally.config, n.config, __ATOMIC_RELAXED);
    __atomic_fetch_add(&tally.zero, n.zero, __ATOMIC_RELAXED);
    __atomic_fetch_add(&tally.load, n.load, __ATOMIC_RELAXED);
    __atomic_fetch_add(&tally.store, n.store, __ATOMIC_RELAXED);
    __atomic_fetch_add(&tally.dp, n.dp, __ATOMIC_RELAXED);
}

void amx_tally_read(amx_tally *t) {
    t->config = __atomic_load_n(&tally.config, __ATOMIC_RELAXED);
    t->zero = __atomic_load_n(&tally.zero, __ATOMIC_RELAXED);
    t->load = __atomic_load_n(&tally.load, __ATOMIC_RELAXED);
    t->store = __atomic_load_n(&tally.store, __ATOMIC_RELAXED);
    t->dp = __atomic_load_n(&tally.dp, __ATOMIC_RELAXED);
    t->outside_ns = __atomic_load_n(&tally.outside_ns, __ATOMIC_RELAXED);
    t->vector_ns = __atomic_load_n(&tally.vector_ns, __ATOMIC_RELAXED);
}

double amx_tally_tile_seconds(const amx_tally *a, const amx_tally *b) {
    return 1e-9 * ((double)(b->dp - a->dp) * AMX_NS.dp + (double)(b->load - a->load) * AMX_NS.load +
                   (double)(b->store - a->store) * AMX_NS.store + (double)(b->zero - a->zero) * AMX_NS.zero +
                   (double)(b->config - a->config) * AMX_NS.config);
}

static void amx_dense(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T,
                      int64_t xstride, float *y, int64_t ystride) {
    kernels_best()->dense(w, r0, r1, x, xs, T, xstride, y, ystride);
}

static void amx_act_quant(const float *x, int64_t n, float *q, float *s) { kernels_best()->act_quant(x, n, q, s); }

const kernel_set kernels_amx = {"amx", amx_dense, amx_quant, amx_act_quant};
const kernel_set kernels_amx_emulated = {"amx (emulated)", amx_dense, amx_quant_emulation, amx_act_quant};
const kernel_set kernels_amx_model = {"amx (model)", amx_dense, amx_quant_model, amx_act_quant};

#endif
