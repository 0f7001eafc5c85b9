/* peak.c - the instruction-bound rate of a kernel set's integer products, for `bench` to
 * weigh each kernel against: the integer multiply-adds one thread does per second in a loop of
 * the instruction alone, on registers only, with enough independent accumulators to hide its
 * latency (an upper bound for a kernel, which also loads, converts and scales).
 *
 * avx512: vpdpbusd on zmm registers (64 byte products each), 12 chains. amx on the tiles:
 * tdpbusd of full 16 x 64 by 16 x 64 tiles (16 x 16 x 64 products each) into four
 * accumulator tiles. avx2: vpmaddwd on ymm registers (16 products of 16-bit integers each), each
 * added by vpaddd into one of 10 chains, the pair its many-token kernels repeat (AVX2 has no
 * multiply-accumulate on integers, so the add is part of the instruction's cost). Other sets
 * and the emulated amx have no such instruction: 0. */
#include <stdint.h>

#include "kernels.h"

#if defined(__x86_64__)
#include <immintrin.h>
#include <time.h>

#define TILE_NATIVE 1
#include "amx_tiles.h"

static double seconds(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

enum { VNNI_ITERS = 4000000, TILE_ITERS = 200000 };

/* returns a value of the sums so that the loop is computed */
__attribute__((target("avx512f,avx512vnni"))) static int32_t vnni_loop(void) {
    __m512i acc[12], a = _mm512_set1_epi8(3), b = _mm512_set1_epi8(-5);
    for (int i = 0; i < 12; i++) acc[i] = _mm512_set1_epi32(i);
    for (int it = 0; it < VNNI_ITERS; it++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) acc[i] = _mm512_dpbusd_epi32(acc[i], a, b);
    uint32_t out[16], s = 0;
    for (int i = 0; i < 12; i++) {
        _mm512_storeu_si512(out, acc[i]);
        s += out[i];
    }
    return (int32_t)s;
}

enum { MADD_ITERS = 4000000 };

/* in assembly: compilers keep an array of ymm accumulators partly on the stack */
static int32_t madd_loop(void) {
    int32_t out[8];
    long n = MADD_ITERS;
    __asm__ volatile("vpcmpeqd %%ymm15, %%ymm15, %%ymm15\n\t"
                     "vpxor %%xmm0, %%xmm0, %%xmm0\n\t"
                     "vmovdqa %%ymm0, %%ymm1\n\t vmovdqa %%ymm0, %%ymm2\n\t vmovdqa %%ymm0, %%ymm3\n\t"
                     "vmovdqa %%ymm0, %%ymm4\n\t vmovdqa %%ymm0, %%ymm5\n\t vmovdqa %%ymm0, %%ymm6\n\t"
                     "vmovdqa %%ymm0, %%ymm7\n\t vmovdqa %%ymm0, %%ymm8\n\t vmovdqa %%ymm0, %%ymm9\n\t"
                     "1:\n\t"
                     "vpmaddwd %%ymm15, %%ymm0, %%ymm10\n\t"
                     "vpaddd %%ymm10, %%ymm0, %%ymm0\n\t"
                     "vpmaddwd %%ymm15, %%ymm1, %%ymm11\n\t"
                     "vpaddd %%ymm11, %%ymm1, %%ymm1\n\t"
                     "vpmaddwd %%ymm15, %%ymm2, %%ymm12\n\t"
                     "vpaddd %%ymm12, %%ymm2, %%ymm2\n\t"
                     "vpmaddwd %%ymm15, %%ymm3, %%ymm13\n\t"
                     "vpaddd %%ymm13, %%ymm3, %%ymm3\n\t"
                     "vpmaddwd %%ymm15, %%ymm4, %%ymm14\n\t"
                     "vpaddd %%ymm14, %%ymm4, %%ymm4\n\t"
                     "vpmaddwd %%ymm15, %%ymm5, %%ymm10\n\t"
                     "vpaddd %%ymm10, %%ymm5, %%ymm5\n\t"
                     "vpmaddwd %%ymm15, %%ymm6, %%ymm11\n\t"
                     "vpaddd %%ymm11, %%ymm6, %%ymm6\n\t"
                     "vpmaddwd %%ymm15, %%ymm7, %%ymm12\n\t"
                     "vpaddd %%ymm12, %%ymm7, %%ymm7\n\t"
                     "vpmaddwd %%ymm15, %%ymm8, %%ymm13\n\t"
                     "vpaddd %%ymm13, %%ymm8, %%ymm8\n\t"
                     "vpmaddwd %%ymm15, %%ymm9, %%ymm14\n\t"
                     "vpaddd %%ymm14, %%ymm9, %%ymm9\n\t"
                     "dec %[n]\n\t"
                     "jnz 1b\n\t"
                     "vpaddd %%ymm1, %%ymm0, %%ymm0\n\t"
                     "vmovdqu %%ymm0, %[out]\n\t"
                     "vzeroupper\n\t"
                     : [n] "+r"(n), [out] "=m"(out)
                     :
                     : "xmm0", "xmm1", "xmm2", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "xmm11", "xmm12",
                       "xmm13", "xmm14", "xmm15", "cc");
    return out[0];
}

TILE_TGT static int32_t tile_loop(void) {
    amx_tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < TILE_COUNT; i++) c.rows[i] = 16, c.colsb[i] = 64;
    _Alignas(64) static const int8_t ones[16][64] = {{1}};
    _Alignas(64) int32_t out[16][16];
    TILE_STATE(ts, NULL);
    TILE_CONFIG(ts, &c);
    TILE_LOAD(ts, 4, ones, 64);
    TILE_LOAD(ts, 5, ones, 64);
    TILE_LOAD(ts, 6, ones, 64);
    TILE_LOAD(ts, 7, ones, 64);
    TILE_ZERO(ts, 0);
    TILE_ZERO(ts, 1);
    TILE_ZERO(ts, 2);
    TILE_ZERO(ts, 3);
    for (int it = 0; it < TILE_ITERS; it++) {
        TILE_DPBUSD(ts, 0, 4, 5);
        TILE_DPBUSD(ts, 1, 4, 6);
        TILE_DPBUSD(ts, 2, 7, 5);
        TILE_DPBUSD(ts, 3, 7, 6);
    }
    TILE_STORE(ts, 0, out, 64);
    TILE_RELEASE(ts);
    return out[0][0];
}

double kernels_int8_rate(const kernel_set *k) {
    volatile int32_t sink;
    double t0 = seconds();
    if (k == &kernels_avx512) {
        sink = vnni_loop();
        (void)sink;
        return 64.0 * 12.0 * VNNI_ITERS / (seconds() - t0);
    }
    if (k == &kernels_avx2 && kernels_supported(k)) {
        sink = madd_loop();
        (void)sink;
        return 16.0 * 10.0 * MADD_ITERS / (seconds() - t0);
    }
    if (k == &kernels_amx && amx_native()) {
        sink = tile_loop();
        (void)sink;
        return 16.0 * 16.0 * 64.0 * 4.0 * TILE_ITERS / (seconds() - t0);
    }
    return 0.0;
}
#else
double kernels_int8_rate(const kernel_set *k) {
    (void)k;
    return 0.0;
}
#endif
