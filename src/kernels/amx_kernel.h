/* amx_kernel.h - the amx set's quant kernel, written once over the tile operations of
 * amx_tiles.h and compiled twice by amx.c: once with TILE_NATIVE 1 (the instructions) and once
 * with TILE_NATIVE 0 (their emulation). Defines before including: TILE_NATIVE and AMX_QUANT (the
 * function to define). The plain C around the tiles (amx_prepare, amx_decode, amx_combine) is
 * amx.c's, shared by both.
 *
 * Tiles: 0 holds one weight digit of 16 rows by one block of 32 columns (A, unsigned bytes), 1
 * one input digit of the same block for up to 16 tokens (B, 8 rows of 4 columns per token), 2..6
 * the products whose digits weigh 256^s, s = 0..4 (C, 16 rows by up to 16 tokens of int32). A
 * block's sums leave the tiles after each block, since every block has its own two scales. */

#include "amx_tiles.h"

/* C tile 2 + s += tile 0 . tile 1 (the instructions encode tile numbers: one case each) */
#define AMX_DP(ts, s)                                       \
    switch (s) {                                            \
    case 0: TILE_DPBUSD(ts, 2, 0, 1); break;                \
    case 1: TILE_DPBUSD(ts, 3, 0, 1); break;                \
    case 2: TILE_DPBUSD(ts, 4, 0, 1); break;                \
    case 3: TILE_DPBUSD(ts, 5, 0, 1); break;                \
    default: TILE_DPBUSD(ts, 6, 0, 1); break;               \
    }

TILE_TGT static int AMX_QUANT(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T,
                              int64_t xstride, float *y, int64_t ystride) {
    const int fp4 = w->type == DT_FP4, nwd = fp4 ? 1 : AMX_DIGITS; /* weight digits */
    const int64_t nb = (w->cols + 31) / 32;
    amx_inputs in;
    amx_weights wt;
    _Alignas(64) int32_t sums[AMX_DIGITS + 2][AMX_ROWS][AMX_TOKENS];
    TILE_STATE(ts);
    int conf = 0; /* the tokens per tile the loaded configuration is for, 0 before the first */
    int ok = 1;
    for (int64_t t0 = 0; ok && t0 < T; t0 += AMX_GROUP * AMX_TOKENS) {
        const int ng = (int)imin(AMX_GROUP * AMX_TOKENS, T - t0);
        for (int64_t b0 = 0; ok && b0 < nb; b0 += AMX_BLOCKS) {
            const int nblk = (int)imin(AMX_BLOCKS, nb - b0);
            ok = amx_prepare(x + t0 * xstride, xstride, xs + t0 * nb, nb, w->cols, ng, b0, nblk, &in);
            for (int64_t r = r0; ok && r < r1; r += AMX_ROWS) {
                const int nr = (int)imin(AMX_ROWS, r1 - r);
                ok = amx_decode(w, r, nr, b0, nblk, &wt);
                for (int g = 0; ok && g * AMX_TOKENS < ng; g++) {
                    const int nt = (int)imin(AMX_TOKENS, ng - g * AMX_TOKENS);
                    if (nt != conf) {
                        const amx_tilecfg c = amx_config(nt);
                        TILE_CONFIG(ts, &c);
                        conf = nt;
                    }
                    for (int b = 0; b < nblk; b++) {
                        TILE_ZERO(ts, 2);
                        TILE_ZERO(ts, 3);
                        TILE_ZERO(ts, 4);
                        if (!fp4) {
                            TILE_ZERO(ts, 5);
                            TILE_ZERO(ts, 6);
                        }
                        for (int a = 0; a < nwd; a++) {
                            TILE_LOAD(ts, 0, wt.a[b][a], 32);
                            for (int d = 0; d < AMX_DIGITS; d++) {
                                TILE_LOAD(ts, 1, in.b[g][b][d], 64);
                                AMX_DP(ts, a + d);
                            }
                        }
                        TILE_STORE(ts, 2, sums[0], sizeof sums[0][0]);
                        TILE_STORE(ts, 3, sums[1], sizeof sums[0][0]);
                        TILE_STORE(ts, 4, sums[2], sizeof sums[0][0]);
                        if (!fp4) {
                            TILE_STORE(ts, 5, sums[3], sizeof sums[0][0]);
                            TILE_STORE(ts, 6, sums[4], sizeof sums[0][0]);
                        }
                        amx_combine(sums, fp4, nr, nt, in.sumk[g][b], in.xs[g][b], &wt, b, b0 + b == 0,
                                    y + (t0 + g * AMX_TOKENS) * ystride + (r - r0), ystride);
                    }
                }
            }
        }
    }
    if (conf) TILE_RELEASE(ts);
    return ok;
}

#undef AMX_DP
