/* numerics.c - codecs, fake-quant round trips and the weight filler (see numerics.h). */
#include "numerics.h"

#include <math.h>
#include <string.h>

/* On the bit pattern: the 23 mantissa bits round to 3, ties to even; the activation
 * quantizer calls this for every element, so no double or libm call is involved. */
uint8_t f32_to_e4m3(float x) {
    if (isnan(x)) return 0x7F;
    uint32_t b = f32_bits(x);
    uint8_t sign = (uint8_t)((b >> 24) & 0x80);
    b &= 0x7FFFFFFFu;
    if ((b >> 23) == 0) return sign; /* f32 subnormal: far below e4m3's 2^-9 */
    if (bits_f32(b) > 448.0f) return sign | 0x7E;
    int e = (int)(b >> 23) - 127;
    if (e < -6) return sign | (uint8_t)nearbyintf(bits_f32(b) * 512.0f); /* exact scaling; 8 carries into 0x08 */
    uint32_t m = b & 0x7FFFFF, r = m >> 20, rest = m & 0xFFFFF;
    if (rest > 0x80000 || (rest == 0x80000 && (r & 1))) r++;
    if (r == 8) { e += 1; r = 0; }
    return sign | (uint8_t)((e + 7) << 3) | (uint8_t)r;
}

float e4m3_to_f32(uint8_t code) {
    uint32_t sign = (uint32_t)(code & 0x80) << 24, e = (code >> 3) & 0x0F, m = code & 7;
    if (e == 15 && m == 7) return NAN;
    if (e == 0) return bits_f32(sign | f32_bits((float)m * 0x1p-9f));
    return bits_f32(sign | ((e + 120) << 23) | (m << 20));
}

uint8_t f32_to_e8m0(float x) {
    uint32_t b = f32_bits(x);
    uint32_t e = (b >> 23) & 0xFF, m = b & 0x7FFFFF;
    if (m > 0x400000 || (m == 0x400000 && (e & 1))) e += 1;
    return (uint8_t)(e > 255 ? 255 : e);
}

static const float E2M1_VALUES[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

uint8_t f32_to_e2m1(float x) {
    float a = fabsf(x);
    int lo = 0;
    for (int i = 0; i < 8; i++)
        if (E2M1_VALUES[i] <= a) lo = i;
    int hi = lo < 7 ? lo + 1 : 7;
    float dlo = a - E2M1_VALUES[lo], dhi = E2M1_VALUES[hi] - a;
    int pick_hi = dhi < dlo || (dhi == dlo && hi % 2 == 0 && lo % 2 == 1);
    return (uint8_t)((signbit(x) ? 8 : 0) | (pick_hi ? hi : lo));
}

float e2m1_to_f32(uint8_t code) {
    float v = E2M1_VALUES[code & 7];
    return (code & 8) ? -v : v;
}

float pow2_ceil(float v) {
    uint32_t b = f32_bits(v);
    int e = (int)((b >> 23) & 0xFF) - 127 + ((b & 0x7FFFFF) != 0);
    return bits_f32((uint32_t)(e + 127) << 23);
}

static float block_amax(const float *x, size_t n) {
    float m = 0.0f;
    for (size_t i = 0; i < n; i++) m = fmaxf(m, fabsf(x[i]));
    return m;
}

static float clampf(float v, float lo, float hi) { return v < lo ? lo : v > hi ? hi : v; }

void fp8_fake_quant(float *x, size_t n) {
    for (size_t b = 0; b < n; b += 32) {
        float s = pow2_ceil(fmaxf(block_amax(x + b, 32), 1e-4f) / 448.0f);
        for (size_t i = b; i < b + 32; i++)
            x[i] = bf16_round(e4m3_to_f32(f32_to_e4m3(clampf(x[i] / s, -448.0f, 448.0f))) * s);
    }
}

static void fp4_fake_quant_block(float *x, size_t n, float s) {
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(e2m1_to_f32(f32_to_e2m1(clampf(x[i] / s, -6.0f, 6.0f))) * s);
}

void fp4_fake_quant_e8m0(float *x, size_t n, size_t block) {
    for (size_t b = 0; b < n; b += block)
        fp4_fake_quant_block(x + b, block, pow2_ceil(fmaxf(block_amax(x + b, block), 6.0f * 0x1p-126f) / 6.0f));
}

void fp4_fake_quant_e4m3(float *x, size_t n, size_t block) {
    for (size_t b = 0; b < n; b += block)
        fp4_fake_quant_block(x + b, block, e4m3_to_f32(f32_to_e4m3(fmaxf(block_amax(x + b, block), 6.0f * 0x1p-9f) / 6.0f)));
}

#define GOLD 0x9E3779B97F4A7C15ULL

uint64_t fnv1a64(const char *s) {
    uint64_t h = 0xCBF29CE484222325ULL;
    for (; *s; s++) { h ^= (uint8_t)*s; h *= 0x100000001B3ULL; }
    return h;
}

uint64_t splitmix64(uint64_t z) {
    z += GOLD;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

uint64_t fixed_raw(const char *name, uint64_t i) { return splitmix64(fnv1a64(name) ^ (i * GOLD)); }

float fixed_value(const char *name, uint64_t i, double scale, double offset) {
    double u = (double)(fixed_raw(name, i) >> 40) / 16777216.0;
    return (float)((2.0 * u - 1.0) * scale + offset);
}

uint64_t fixed_int(const char *name, uint64_t i, uint64_t m) { return fixed_raw(name, i) % m; }

typedef uint32_t u32x16 __attribute__((vector_size(64)));

/* 16 lanes: four SSE2 / NEON registers, or one AVX-512 register in the x86-64 twin */
static inline __attribute__((always_inline)) void round_n(float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        u32x16 b;
        memcpy(&b, x + i, sizeof b);
        /* as f32_to_bf16: NaNs keep their sign and high payload and become quiet, the rest round
         * to nearest even */
        u32x16 nan = (b & 0x7FFFFFFFu) > 0x7F800000u;
        u32x16 r = ((b | 0x400000u) & nan) | ((b + 0x7FFFu + ((b >> 16) & 1u)) & ~nan);
        r &= 0xFFFF0000u;
        memcpy(x + i, &r, sizeof r);
    }
    for (; i < n; i++) x[i] = bf16_round(x[i]);
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static void round_n_avx512(float *x, int64_t n) { round_n(x, n); }
#endif

void bf16_round_n(float *x, int64_t n) {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) {
        round_n_avx512(x, n);
        return;
    }
#endif
    round_n(x, n);
}
