/* avx2.h - what the AVX2 set's two files share: their target, the partial loads (AVX2 has no
 * byte-masked load, so a row's last partial vector goes through a zeroed stack buffer), the
 * inputs' integer form (also amx.c's, around its tiles), and the many-token quant kernel avx2.c
 * hands calls of MANY_T tokens or more to. x86-64 only. */
#ifndef DSV41_KERNELS_AVX2_H
#define DSV41_KERNELS_AVX2_H

#include <immintrin.h>
#include <stdint.h>
#include <string.h>

#include "weight.h"

#define TGT __attribute__((target("avx2,fma,f16c")))
#define INL static inline __attribute__((always_inline)) TGT

enum { MANY_T = 10 }; /* tokens from which a call takes avx2_many.c (below it, the few-token tiles are as fast) */

/* The quant kernel (kernels.h) for T >= MANY_T; returns 0, leaving y to be written again, where
 * the call needs the few-token tiles (an input out of range, a NaN code, no memory). */
int avx2_many_quant(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T, int64_t xstride,
                    float *y, int64_t ystride);

/* 8 inputs as k = 512x, setting the lanes of *bad where k is not an integer with |k| <= bound:
 * a fraction, a NaN, an infinity, or a value past int32, which the conversion turns into
 * INT32_MIN (so is -2^22 itself, exactly). AVX2 alone, so that amx.c's kernels inline it too. */
static inline __attribute__((always_inline, target("avx2"))) __m256i to_k(__m256 v, int32_t bound, __m256i *bad) {
    __m256 f = _mm256_mul_ps(v, _mm256_set1_ps(512.0f));
    __m256i k = _mm256_cvtps_epi32(f);
    __m256i b = _mm256_castps_si256(_mm256_cmp_ps(_mm256_cvtepi32_ps(k), f, _CMP_NEQ_UQ));
    b = _mm256_or_si256(b, _mm256_cmpgt_epi32(_mm256_abs_epi32(k), _mm256_set1_epi32(bound)));
    b = _mm256_or_si256(b, _mm256_cmpeq_epi32(k, _mm256_set1_epi32(INT32_MIN)));
    *bad = _mm256_or_si256(*bad, b);
    return k;
}

/* an e2m1 code (the table twice, for both 128-bit lanes of vpshufb) -> 2w + 12, 0..24 */
/* clang-format off */
static const uint8_t FP4_LUT[32] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0,
                                    12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};
/* clang-format on */

/* 8 e4m3 bytes -> f32 values (e4m3 * 2^-8 as f16 patterns, converted exactly, times 256) */
INL __m256 e4m3_8(__m128i b) {
    __m128i h = _mm_and_si128(_mm_slli_epi16(_mm_cvtepi8_epi16(b), 7), _mm_set1_epi16((short)0xBFFF));
    return _mm256_mul_ps(_mm256_cvtph_ps(h), _mm256_set1_ps(256.0f));
}

/* n (0..32) bytes from p, zero-filled to 32 */
INL __m256i load_partial(const uint8_t *p, int64_t n) {
    _Alignas(32) uint8_t buf[32] = {0};
    if (n > 0) memcpy(buf, p, (size_t)(n < 32 ? n : 32));
    return _mm256_load_si256((const __m256i *)buf);
}

/* n (0..8) floats from p, zero-filled to 8 */
INL __m256 loadf_partial(const float *p, int64_t n) {
    const __m256i idx = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    if (n <= 0) return _mm256_setzero_ps();
    if (n >= 8) return _mm256_loadu_ps(p);
    return _mm256_maskload_ps(p, _mm256_cmpgt_epi32(_mm256_set1_epi32((int)n), idx));
}

/* 16 bytes (zero past n) */
INL __m128i bytes16(const uint8_t *p, int64_t n) {
    if (n >= 16) return _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_si128(load_partial(p, n));
}

#endif
