/* amx_kernel.h - the amx set's quant kernel, written once over the tile operations of
 * amx_tiles.h and compiled three times by amx.c: with TILE_NATIVE 1 (the instructions), 0 (their
 * emulation) and 2 (the instructions counted, nothing computed: the model's timing run). Defines
 * before including: TILE_NATIVE and AMX_QUANT (the function to define). The work around the
 * tiles (amx_prepare, amx_decode, amx_combine) is amx.c's, shared by all three.
 *
 * Tiles (all 16 x 64 bytes, one configuration a call): 0 holds A, 16 tokens' digits of k' for one
 * block ([k'lo | k'hi], 64 bytes a token) or their r ([r | r]); 1, 2, 3 the B windows of the
 * block's weights for C0, C1, C2 (fp8: [j'lo; 0], [j'hi; j'lo], [0; j'hi]; fp4: [2w; 0], [0; 2w]),
 * loaded once per tile of rows and block and kept for all its tiles of tokens; 4, 5, 6 the sums
 * C0, C1, C2 (16 tokens by 16 rows of int32), then the D0, D1, E of a block that needs them; 7
 * the weights' v windows. A block's sums leave the tiles after each block, since every block
 * has its own two scales. Loops: chunks of AMX_BLOCKS blocks (every token's inputs prepared once
 * a call), tiles of 16 rows (every weight decoded once a call), blocks, tiles of tokens. */

#include "amx_tiles.h"

TILE_TGT static int AMX_QUANT(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T,
                              int64_t xstride, float *y, int64_t ystride, amx_count *tally) {
    const int fp4 = w->type == DT_FP4;
    const int64_t nb = (w->cols + 31) / 32, tiles = (T + AMX_TOKENS - 1) / AMX_TOKENS;
    const scratch_mark mark = scratch_begin();
    amx_inputs in = {scratch_bytes((size_t)(AMX_BLOCKS * tiles * AMX_TOKENS * 64)),
                     scratch_bytes((size_t)(AMX_BLOCKS * tiles * AMX_TOKENS * 64)),
                     scratch_bytes((size_t)(AMX_BLOCKS * tiles)), tiles * AMX_TOKENS};
    amx_weights *wt = scratch_bytes(sizeof *wt);
    memset(wt, 0, sizeof *wt);
    _Alignas(64) int32_t sums[6][AMX_TOKENS][AMX_ROWS];
    memset(sums, 0, sizeof sums); /* what the counted kernel's combine reads */
    TILE_STATE(ts, tally);
    const amx_tilecfg cfg = amx_config();
    TILE_CONFIG(ts, &cfg);
    int ok = 1;
    for (int64_t b0 = 0; ok && b0 < nb; b0 += AMX_BLOCKS) {
        const int nblk = (int)imin(AMX_BLOCKS, nb - b0);
        ok = amx_prepare(x, xstride, T, w->cols, b0, nblk, &in);
        for (int64_t r = r0; ok && r < r1; r += AMX_ROWS) {
            const int nr = (int)imin(AMX_ROWS, r1 - r);
            ok = amx_decode(w, r, nr, b0, nblk, wt);
            for (int b = 0; ok && b < nblk; b++) {
                const int8_t(*g)[8][64] = wt->g[b];
                const int has_v = wt->has_v[b];
                if (fp4) {
                    TILE_LOAD(ts, 1, g[1], 64);
                    TILE_LOAD(ts, 2, g[0], 64);
                } else {
                    TILE_LOAD(ts, 1, g[2], 64);
                    TILE_LOAD(ts, 2, g[1], 64);
                    TILE_LOAD(ts, 3, g[0], 64);
                }
                for (int64_t tile = 0; tile < tiles; tile++) {
                    const int nt = (int)imin(AMX_TOKENS, T - tile * AMX_TOKENS);
                    const int64_t row = b * in.tokens + tile * AMX_TOKENS;
                    const int has_r = in.has_r[b * tiles + tile];
                    TILE_LOAD(ts, 0, in.k[row], 64);
                    TILE_ZERO(ts, 4);
                    TILE_ZERO(ts, 5);
                    TILE_DPBSSD(ts, 4, 0, 1);
                    TILE_DPBSSD(ts, 5, 0, 2);
                    TILE_STORE(ts, 4, sums[0], sizeof sums[0][0]);
                    TILE_STORE(ts, 5, sums[1], sizeof sums[0][0]);
                    if (!fp4) {
                        TILE_ZERO(ts, 6);
                        TILE_DPBSSD(ts, 6, 0, 3);
                        TILE_STORE(ts, 6, sums[2], sizeof sums[0][0]);
                    }
                    if (has_r || has_v) { /* D0, D1 and E in tiles 4, 5, 6 */
                        TILE_ZERO(ts, 4);
                        TILE_ZERO(ts, 5);
                        TILE_ZERO(ts, 6);
                        if (has_v) { /* k'hi v and k'lo v; tile 7 keeps [v; 0] for r v */
                            TILE_LOAD(ts, 7, g[3], 64);
                            TILE_DPBSSD(ts, 5, 0, 7);
                            TILE_LOAD(ts, 7, g[4], 64);
                            TILE_DPBSSD(ts, 4, 0, 7);
                        }
                        if (has_r) { /* r j'lo (fp4: r 2w), r j'hi, r v */
                            TILE_LOAD(ts, 0, in.r[row], 64);
                            TILE_DPBSSD(ts, 4, 0, 1);
                            if (!fp4) TILE_DPBSSD(ts, 5, 0, 3);
                            if (has_v) TILE_DPBSSD(ts, 6, 0, 7);
                        }
                        TILE_STORE(ts, 4, sums[3], sizeof sums[0][0]);
                        if (!fp4) {
                            TILE_STORE(ts, 5, sums[4], sizeof sums[0][0]);
                            TILE_STORE(ts, 6, sums[5], sizeof sums[0][0]);
                        }
                    }
                    amx_combine(sums, fp4, has_r || has_v, nr, nt, xs + tile * AMX_TOKENS * nb + b0 + b, nb, wt->ws[b],
                                b0 + b == 0, y + tile * AMX_TOKENS * ystride + (r - r0), ystride);
                }
            }
        }
    }
    TILE_RELEASE(ts);
    scratch_end(mark);
    return ok;
}
