/* peak.c - the instruction-bound rate of a kernel set's integer products, for `bench` to
 * weigh each kernel against: the byte multiply-adds one thread does per second in a loop of
 * the instruction alone, on registers only, with enough independent accumulators to hide its
 * latency (an upper bound for a kernel, which also loads, converts and scales).
 *
 * avx512: vpdpbusd on zmm registers (64 byte products each), 12 chains. amx on the tiles:
 * tdpbusd of full 16 x 64 by 16 x 64 tiles (16 x 16 x 64 products each) into four
 * accumulator tiles. Other sets and the emulated amx have no such instruction: 0. */
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
