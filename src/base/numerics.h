/* numerics.h - the number formats of DeepSeek-V4.1 and the rounding points of its release code.
 *
 * Every tensor the reference keeps in bf16 is held here as an f32 whose value is exactly a bf16
 * (bf16_round); every fake-quant round trip (fp8 KV, fp4 latents and index keys) writes values
 * back the same way. The codecs reproduce torch's casts bit for bit, including tie rules. */
#ifndef DSV41_NUMERICS_H
#define DSV41_NUMERICS_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* 4 floats as one value: GCC and clang compile its arithmetic to the target's vectors (SSE2,
 * NEON) lane by lane, without reassociating, so a lane's sum keeps the scalar order */
typedef float f4 __attribute__((vector_size(16)));

static inline f4 load4(const float *p) {
    f4 v;
    memcpy(&v, p, sizeof v);
    return v;
}

/* Element i of an f32 or a bf16 tensor from a shard. Such tensors may sit at any byte offset
 * (an fp8 checkpoint packs them after byte-sized ones), so they are read with memcpy, never
 * through a typed pointer that would claim their alignment. */
static inline float f32_at(const void *p, int64_t i) {
    float v;
    memcpy(&v, (const char *)p + i * (int64_t)sizeof v, sizeof v);
    return v;
}
static inline uint16_t u16_at(const void *p, int64_t i) {
    uint16_t v;
    memcpy(&v, (const char *)p + i * (int64_t)sizeof v, sizeof v);
    return v;
}

/* 16 floats, the same way: four SSE2 / NEON registers, or one AVX-512 register in a function
 * compiled for it (such a function has a baseline twin, chosen at run time). LOAD16 reads one
 * from any float address. */
typedef float v16 __attribute__((vector_size(64)));
typedef float v16u __attribute__((vector_size(64), aligned(4), may_alias));
#define LOAD16(p) (*(const v16u *)(const void *)(p))

/* The one way 16 partial sums join (docs/NUMERICS.md): halves added lane by lane, lane j + lane
 * j+8, then j + j+4, j + j+2, j + j+1; p [16] is overwritten, the sum returned. Every dense dot
 * product of every kernel set and the f32 reductions that run over 16 lanes end with it. */
static inline float sum16(float p[16]) {
    for (int w = 8; w >= 1; w /= 2)
        for (int j = 0; j < w; j++) p[j] += p[j + w];
    return p[0];
}

/* ---- bf16: round to nearest even on the f32 bit pattern, NaN passes through (torch's cast) */
/* The index of the first largest of v [n]: greedy decoding's pick, the ties to the lowest id as
 * torch's argmax breaks them. */
static inline int32_t argmax_f32(const float *v, int64_t n) {
    int64_t best = 0;
    for (int64_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return (int32_t)best;
}

static inline uint32_t f32_bits(float x) { union { float f; uint32_t u; } v = {x}; return v.u; }
static inline float bits_f32(uint32_t u) { union { uint32_t u; float f; } v = {u}; return v.f; }
static inline uint16_t f32_to_bf16(float x) {
    uint32_t b = f32_bits(x);
    if ((b & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((b >> 16) | 0x40);
    return (uint16_t)((b + 0x7FFFu + ((b >> 16) & 1u)) >> 16);
}
static inline float bf16_to_f32(uint16_t h) { return bits_f32((uint32_t)h << 16); }
static inline float bf16_round(float x) { return bf16_to_f32(f32_to_bf16(x)); }
typedef uint32_t u32x16 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));
/* bf16_round on 16 lanes in place, the same bits: NaNs keep their sign and high payload and become
 * quiet, the rest round to nearest even */
static inline __attribute__((always_inline)) void bf16_round16(v16 *x) {
    u32x16 b;
    memcpy(&b, x, sizeof b);
    u32x16 nan = (b & 0x7FFFFFFFu) > 0x7F800000u;
    u32x16 r = (((b | 0x400000u) & nan) | ((b + 0x7FFFu + ((b >> 16) & 1u)) & ~nan)) & 0xFFFF0000u;
    memcpy(x, &r, sizeof *x);
}
/* bf16_round over x [n] in place, 4 at a time in vectors the compiler maps to SSE2 or NEON */
void bf16_round_n(float *x, int64_t n);

/* 16 e2m1 codes (in the low 4 bits of each lane of w) times the lanes of s -> y: twice the code's
 * magnitude as an integer (m, or (2 + m) << (e - 1)), converted and halved exactly, the code's
 * sign, then times s. Built from integers rather than from an f32's fields shifted into place:
 * 0.5 would be a subnormal pattern, which a thread with denormals-are-zero reads as 0. */
static inline __attribute__((always_inline)) void e2m1_decode16(const u32x16 *w, const v16 *s, v16 *y) {
    u32x16 e = *w >> 1 & 3, m = *w & 1, sub = (u32x16)(e == 0), u;
    *y = __builtin_convertvector((i32x16)((m & sub) | ((2 | m) << ((e - 1) & 3) & ~sub)), v16) * 0.5f;
    memcpy(&u, y, sizeof u);
    u |= (*w & 8) << 28;
    memcpy(y, &u, sizeof u);
    *y *= *s;
}

/* ---- fp8 e4m3fn (bias 7, max 448, no inf, 0x7F/0xFF NaN), RNE, saturating above 448 */
uint8_t f32_to_e4m3(float x);
float e4m3_to_f32(uint8_t code);
/* ---- e8m0 (a power of two 2^(code-127); 255 is NaN): torch's cast rounds to the nearest
 * exponent with an exact 1.5*2^k going to the even exponent */
uint8_t f32_to_e8m0(float x);
static inline float e8m0_to_f32(uint8_t code) {
    return code == 0 ? bits_f32(0x00400000u) : code == 255 ? bits_f32(0x7FC00000u) : bits_f32((uint32_t)code << 23);
}
/* ---- fp4 e2m1: magnitudes {0,.5,1,1.5,2,3,4,6}, bit 3 the sign; ties go to the even code */
uint8_t f32_to_e2m1(float x);
float e2m1_to_f32(uint8_t code);

/* 2^ceil(log2 v) for a positive normal f32, from its fields (kernel.py fast_log2_ceil/pow2) */
float pow2_ceil(float v);

/* act_quant in place: per block of 32, s = pow2_ceil(max(amax,1e-4)/448),
 * x = bf16(e4m3(clamp(x/s, +-448)) * s). n must be a multiple of 32. */
void fp8_fake_quant(float *x, size_t n);
/* fp4_act_quant in place with e8m0 scales: s = pow2_ceil(max(amax, 6*2^-126)/6). */
void fp4_fake_quant_e8m0(float *x, size_t n, size_t block);
/* fp4_act_quant in place with e4m3 scales: s = e4m3(max(amax, 6*2^-9)/6). */
void fp4_fake_quant_e4m3(float *x, size_t n, size_t block);

/* ---- cache rows packed at the precision the release rounds them to: a row of n values is its
 * codes, then one scale per block. fp8: n e4m3 codes, then n/32 ue8m0 scales (act_quant's);
 * fp4: n/2 bytes of e2m1 codes (the even element in the low nibble), then n/32 ue8m0 scales
 * (e8m0) or n/16 e4m3 scales (e4m3), as fp4_act_quant's. A pack quantizes x exactly as the
 * fake-quant above; its unpack gives the fake-quantized values bit for bit. n: a multiple of
 * 32. An all-zero row unpacks to zeros. */
enum { FP8_BLOCK = 32, FP4_E8M0_BLOCK = 32, FP4_E4M3_BLOCK = 16 };
static inline size_t fp8_row_bytes(size_t n) { return n + n / FP8_BLOCK; }
static inline size_t fp4_row_bytes(size_t n, size_t block) { return n / 2 + n / block; }
void fp8_pack(const float *x, size_t n, uint8_t *row);
void fp8_unpack(const uint8_t *row, size_t n, float *y);
void fp4_pack_e8m0(const float *x, size_t n, uint8_t *row);
void fp4_unpack_e8m0(const uint8_t *row, size_t n, float *y);
void fp4_pack_e4m3(const float *x, size_t n, uint8_t *row);
void fp4_unpack_e4m3(const uint8_t *row, size_t n, float *y);

/* ---- the golden's deterministic filler (FNV-1a salt + splitmix64) */
uint64_t fnv1a64(const char *s);
uint64_t splitmix64(uint64_t z);
uint64_t fixed_raw(const char *name, uint64_t i);
float fixed_value(const char *name, uint64_t i, double scale, double offset);
uint64_t fixed_int(const char *name, uint64_t i, uint64_t m);

#endif
