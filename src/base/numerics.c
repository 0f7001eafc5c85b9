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

/* The scales of one block as act_quant and fp4_act_quant derive them. */
static float fp8_scale(const float *x) { return pow2_ceil(fmaxf(block_amax(x, FP8_BLOCK), 1e-4f) / 448.0f); }
static float fp4_scale_e8m0(const float *x, size_t n) { return pow2_ceil(fmaxf(block_amax(x, n), 6.0f * 0x1p-126f) / 6.0f); }
static uint8_t fp4_scale_e4m3(const float *x, size_t n) {
    return f32_to_e4m3(fmaxf(block_amax(x, n), 6.0f * 0x1p-9f) / 6.0f);
}
static uint8_t fp8_code(float x, float s) { return f32_to_e4m3(clampf(x / s, -448.0f, 448.0f)); }
static uint8_t fp4_code(float x, float s) { return f32_to_e2m1(clampf(x / s, -6.0f, 6.0f)); }

void fp8_fake_quant(float *x, size_t n) {
    for (size_t b = 0; b < n; b += FP8_BLOCK) {
        float s = fp8_scale(x + b);
        for (size_t i = b; i < b + FP8_BLOCK; i++) x[i] = bf16_round(e4m3_to_f32(fp8_code(x[i], s)) * s);
    }
}

static void fp4_fake_quant_block(float *x, size_t n, float s) {
    for (size_t i = 0; i < n; i++) x[i] = bf16_round(e2m1_to_f32(fp4_code(x[i], s)) * s);
}

void fp4_fake_quant_e8m0(float *x, size_t n, size_t block) {
    for (size_t b = 0; b < n; b += block) fp4_fake_quant_block(x + b, block, fp4_scale_e8m0(x + b, block));
}

void fp4_fake_quant_e4m3(float *x, size_t n, size_t block) {
    for (size_t b = 0; b < n; b += block) fp4_fake_quant_block(x + b, block, e4m3_to_f32(fp4_scale_e4m3(x + b, block)));
}

/* Packed rows. A scale is a power of two (pow2_ceil's, never a subnormal) kept as its f32
 * exponent field, or an e4m3 code; a value is code times scale, which is exact in f32 and in
 * bf16 (at most 3 significant bits times a power of two, or 2 times 4), so unpacking gives the
 * fake-quantized values bit for bit. Unpacking is on the decode path (every index key a step
 * scores), so it works on 16 codes at a time in vectors and rebuilds each value from its fields
 * instead of a table: a code's magnitude as an integer, converted, is exact for the subnormal
 * codes too. */
typedef uint8_t u8x8 __attribute__((vector_size(8)));
typedef uint8_t u8x16 __attribute__((vector_size(16)));

/* 16 e4m3 codes times s -> y [16] (codes 0x7F and 0xFF: NaN): 2^9 times the code's magnitude
 * as an integer (m, or (8 + m) << (e - 1)), converted and scaled by 2^-9 exactly, the code's
 * sign, then times s; from integers, as e2m1_decode16, for threads with denormals-are-zero */
static inline void e4m3_unpack16(const uint8_t *q, float s, float *y) {
    u8x16 c;
    memcpy(&c, q, sizeof c);
    u32x16 w = __builtin_convertvector(c, u32x16), nan = (u32x16)((w & 0x7F) == 0x7F), e = w >> 3 & 15, m = w & 7;
    u32x16 sub = (u32x16)(e == 0), u;
    v16 v = __builtin_convertvector((i32x16)((m & sub) | ((8 | m) << ((e - 1) & 15) & ~sub)), v16) * 0x1p-9f;
    memcpy(&u, &v, sizeof u);
    u = ((u | (w & 0x80) << 24) & ~nan) | (nan & 0x7FC00000u);
    memcpy(&v, &u, sizeof v);
    v *= s;
    memcpy(y, &v, sizeof v);
}

/* 16 e2m1 codes of 8 bytes (the even element low) times s -> y [16] */
static inline void e2m1_unpack16(const uint8_t *q, float s, float *y) {
    u8x8 p;
    memcpy(&p, q, sizeof p);
    u8x8 lo = p & 15, hi = p >> 4;
    u8x16 c = __builtin_shufflevector(lo, hi, 0, 8, 1, 9, 2, 10, 3, 11, 4, 12, 5, 13, 6, 14, 7, 15);
    u32x16 w = __builtin_convertvector(c, u32x16);
    v16 v, sv = {0};
    sv += s;
    e2m1_decode16(&w, &sv, &v);
    memcpy(y, &v, sizeof v);
}

void fp8_pack(const float *x, size_t n, uint8_t *row) {
    for (size_t b = 0; b < n; b += FP8_BLOCK) {
        float s = fp8_scale(x + b);
        for (size_t i = b; i < b + FP8_BLOCK; i++) row[i] = fp8_code(x[i], s);
        row[n + b / FP8_BLOCK] = (uint8_t)(f32_bits(s) >> 23);
    }
}

void fp8_unpack(const uint8_t *row, size_t n, float *y) {
    for (size_t b = 0; b < n; b += FP8_BLOCK) {
        float s = bits_f32((uint32_t)row[n + b / FP8_BLOCK] << 23);
        for (size_t i = b; i < b + FP8_BLOCK; i += 16) e4m3_unpack16(row + i, s, y + i);
    }
}

/* the codes of one fp4 block at scale s into row (two a byte, the even element low) */
static void fp4_pack_block(const float *x, size_t b, size_t block, float s, uint8_t *row) {
    for (size_t i = b; i < b + block; i += 2) row[i / 2] = (uint8_t)(fp4_code(x[i], s) | fp4_code(x[i + 1], s) << 4);
}

static void fp4_unpack_block(const uint8_t *row, size_t b, size_t block, float s, float *y) {
    for (size_t i = b; i < b + block; i += 16) e2m1_unpack16(row + i / 2, s, y + i);
}

void fp4_pack_e8m0(const float *x, size_t n, uint8_t *row) {
    for (size_t b = 0; b < n; b += FP4_E8M0_BLOCK) {
        float s = fp4_scale_e8m0(x + b, FP4_E8M0_BLOCK);
        fp4_pack_block(x, b, FP4_E8M0_BLOCK, s, row);
        row[n / 2 + b / FP4_E8M0_BLOCK] = (uint8_t)(f32_bits(s) >> 23);
    }
}

void fp4_unpack_e8m0(const uint8_t *row, size_t n, float *y) {
    for (size_t b = 0; b < n; b += FP4_E8M0_BLOCK)
        fp4_unpack_block(row, b, FP4_E8M0_BLOCK, bits_f32((uint32_t)row[n / 2 + b / FP4_E8M0_BLOCK] << 23), y);
}

void fp4_pack_e4m3(const float *x, size_t n, uint8_t *row) {
    for (size_t b = 0; b < n; b += FP4_E4M3_BLOCK) {
        uint8_t sc = fp4_scale_e4m3(x + b, FP4_E4M3_BLOCK);
        fp4_pack_block(x, b, FP4_E4M3_BLOCK, e4m3_to_f32(sc), row);
        row[n / 2 + b / FP4_E4M3_BLOCK] = sc;
    }
}

void fp4_unpack_e4m3(const uint8_t *row, size_t n, float *y) {
    for (size_t b = 0; b < n; b += FP4_E4M3_BLOCK)
        fp4_unpack_block(row, b, FP4_E4M3_BLOCK, e4m3_to_f32(row[n / 2 + b / FP4_E4M3_BLOCK]), y);
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

/* 16 lanes: four SSE2 / NEON registers, or one AVX-512 register in the x86-64 twin */
static inline __attribute__((always_inline)) void round_n(float *x, int64_t n) {
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        v16 v;
        memcpy(&v, x + i, sizeof v);
        bf16_round16(&v);
        memcpy(x + i, &v, sizeof v);
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
