/* tile.h - the tiling the SIMD kernel sets share: a tile is RT weight rows against up
 * to TT tokens, and the dense kernels walk rows in cache-sized blocks. Plain C, no ISA. */
#ifndef DSV41_KERNELS_TILE_H
#define DSV41_KERNELS_TILE_H

#include <stdint.h>

enum {
    RT = 4, /* rows per tile */
    TT = 4, /* tokens per tile, at most */
    FP4_CHUNK = 256, /* blocks of 32 per prepared fp4 chunk: 8192 inputs */
    FP8_CHUNK = 256, /* blocks of 32 per prepared fp8 chunk: 8192 inputs */
};

static inline int64_t imin(int64_t a, int64_t b) { return a < b ? a : b; }

/* Rows per cache block of the dense kernel: with several token tiles, all of them pass over a
 * block of rows small enough to stay in L2, so each weight byte comes from memory once. */
static inline int64_t row_block(int64_t rowbytes, int64_t rows, int64_t T) {
    if (T <= TT || rowbytes <= 0) return rows > 0 ? rows : 1;
    int64_t rb = (384 * 1024 / rowbytes) / RT * RT;
    return rb < RT ? RT : rb;
}

/* Rows r..r+RT-1 clamped to the last valid one (a short tile repeats it and stores less). */
static inline void tile_rows(int64_t r, int nr, int64_t out[RT]) {
#pragma GCC unroll 4
    for (int i = 0; i < RT; i++) out[i] = r + (i < nr ? i : nr - 1);
}

#endif
