/* amx_tiles.h - the AMX tile operations the amx kernel set is written over, in three
 * implementations: the instructions themselves, a plain C emulation of what the instruction set
 * defines them to do (so that every host runs the tile code and checks its bits), and a count of
 * them that does nothing else (so that `bench` can time everything around the tiles for real on
 * any host and price the tile instructions by their measured costs; docs/AMX_NOTES.md in the
 * shared data has the facts all three follow).
 *
 * The state is eight tiles of at most 16 rows of 64 bytes, shaped by a 64-byte palette-1
 * configuration. The kernel uses seven operations, each a macro whose tile numbers are literals
 * (the instructions encode them): TILE_CONFIG(ts, cfg), TILE_ZERO(ts, i), TILE_LOAD(ts, i, base,
 * stride), TILE_STORE(ts, i, base, stride), TILE_DPBUSD(ts, c, a, b) (unsigned A, signed B),
 * TILE_DPBSSD(ts, c, a, b) (both signed) and TILE_RELEASE(ts). TILE_STATE(ts, tally) declares ts:
 * the emulation's amx_emu (the caller's, so calls share nothing), or the counts' amx_count tally
 * points at; the instructions ignore both. Including code defines TILE_NATIVE to 1 for the
 * instructions (in functions compiled with TILE_TGT), 0 for the emulation or 2 for the counts. */
#ifndef DSV41_KERNELS_AMX_TILES_H
#define DSV41_KERNELS_AMX_TILES_H

#include <stdint.h>
#include <string.h>

enum {
    TILE_COUNT = 8,    /* tiles palette 1 names */
    TILE_MAX_ROWS = 16, /* rows per tile, at most */
    TILE_MAX_COLSB = 64, /* bytes per row, at most */
};

/* The configuration ldtilecfg reads, byte for byte (palette 1). */
typedef struct {
    uint8_t palette;      /* 1; 0 would release the tiles */
    uint8_t start_row;    /* 0: the row an interrupted load or store resumes at */
    uint8_t reserved[14]; /* zero */
    uint16_t colsb[16];   /* [tile] bytes per row; tiles 8..15 and unused tiles 0 */
    uint8_t rows[16];     /* [tile] rows; tiles 8..15 and unused tiles 0 */
} amx_tilecfg;

_Static_assert(sizeof(amx_tilecfg) == 64, "ldtilecfg reads 64 bytes");

/* Whether ldtilecfg takes c: palette 1 from row 0, reserved bytes zero, every named tile within
 * 16 rows of 64 bytes and either both shapes set or neither, the unnamed ones zero. (The
 * instruction faults on a configuration it refuses; the kernel checks its own before loading.) */
static inline int amx_tilecfg_valid(const amx_tilecfg *c) {
    if (c->palette != 1 || c->start_row != 0) return 0;
    for (int i = 0; i < 14; i++)
        if (c->reserved[i]) return 0;
    for (int i = 0; i < 16; i++) {
        if (i >= TILE_COUNT && (c->rows[i] || c->colsb[i])) return 0;
        if (c->rows[i] > TILE_MAX_ROWS || c->colsb[i] > TILE_MAX_COLSB || !c->rows[i] != !c->colsb[i]) return 0;
    }
    return 1;
}

/* ---- the emulation: a tile's bytes past its configured rows and columns are always zero, as
 * the instructions leave them */
typedef struct {
    amx_tilecfg cfg;                                        /* the loaded configuration */
    _Alignas(64) uint8_t t[TILE_COUNT][TILE_MAX_ROWS][TILE_MAX_COLSB]; /* [tile][row][byte] */
} amx_emu;

/* ldtilecfg: the configuration taken, every tile zeroed (where the instruction would fault on a
 * configuration it refuses, the emulation stays unconfigured: every operation then does nothing) */
static inline void amx_emu_config(amx_emu *s, const amx_tilecfg *c) {
    memset(s, 0, sizeof *s);
    if (amx_tilecfg_valid(c)) s->cfg = *c;
}

/* tilezero (past the configured shape the bytes are zero already) */
static inline void amx_emu_zero(amx_emu *s, int i) {
    for (int r = 0; r < s->cfg.rows[i]; r++) memset(s->t[i][r], 0, s->cfg.colsb[i]);
}

/* tileloadd: rows[i] rows of colsb[i] bytes, row r from base + r * stride (the bytes past them
 * are zero already) */
static inline void amx_emu_load(amx_emu *s, int i, const void *base, int64_t stride) {
    for (int r = 0; r < s->cfg.rows[i]; r++) memcpy(s->t[i][r], (const uint8_t *)base + r * stride, s->cfg.colsb[i]);
}

/* tilestored: the configured rows and bytes of tile i */
static inline void amx_emu_store(const amx_emu *s, int i, void *base, int64_t stride) {
    for (int r = 0; r < s->cfg.rows[i]; r++) memcpy((uint8_t *)base + r * stride, s->t[i][r], s->cfg.colsb[i]);
}

/* tdpbusd / tdpbssd c, a, b: for each row m of c and dword n of its row, the dword of c plus,
 * for each dword k of a's row m, the four products of a's bytes (unsigned for tdpbusd, signed
 * for tdpbssd) with the signed bytes of dword n of b's row k; 32-bit sums that wrap. Bounds are
 * the configured shapes: M = rows[c], N = colsb[c] / 4, K = colsb[a] / 4. Here a's rows are
 * widened to int16 once, b's dwords n of rows k < K are gathered into one int16 column, and each
 * row of a is multiplied with it over all 64 bytes (past 4K both are zero, so those products add
 * nothing; int16 products a compiler can vectorize): at most 64 x 255 x 128 in size, the dot
 * product is exact in int32, and added to the dword in uint32_t, where wrapping is defined (and
 * gives the same sum in any order). */
static inline void amx_emu_dp(amx_emu *s, int c, int a, int b, int a_signed) {
    const int M = s->cfg.rows[c], N = s->cfg.colsb[c] / 4, K = s->cfg.colsb[a] / 4;
    int16_t av[TILE_MAX_ROWS][TILE_MAX_COLSB]; /* [m][i]: a's bytes as the instruction reads them */
    for (int m = 0; m < M; m++)
        for (int i = 0; i < TILE_MAX_COLSB; i++) av[m][i] = a_signed ? (int8_t)s->t[a][m][i] : s->t[a][m][i];
    for (int n = 0; n < N; n++) {
        int16_t col[TILE_MAX_COLSB] = {0};
        for (int k = 0; k < K; k++)
            for (int j = 0; j < 4; j++) col[4 * k + j] = (int8_t)s->t[b][k][4 * n + j];
        for (int m = 0; m < M; m++) {
            int32_t dot = 0;
            for (int i = 0; i < TILE_MAX_COLSB; i++) dot += av[m][i] * col[i];
            uint32_t acc;
            memcpy(&acc, &s->t[c][m][4 * n], 4);
            acc += (uint32_t)dot;
            memcpy(&s->t[c][m][4 * n], &acc, 4);
        }
    }
}

/* tilerelease: back to the initial state */
static inline void amx_emu_release(amx_emu *s) { memset(s, 0, sizeof *s); }

/* ---- the counts: what a kernel's tile instructions would be, with nothing done. Tiles stay
 * whatever memory a store would have written held before. */
typedef struct {
    uint64_t config; /* ldtilecfg, each with its tilerelease */
    uint64_t zero;   /* tilezero */
    uint64_t load;   /* tileloadd of a full 16 x 64-byte tile */
    uint64_t store;  /* tilestored of a full tile */
    uint64_t dp;     /* tdpbusd / tdpbssd of full tiles: 16 x 64 by 16 x 64 bytes */
} amx_count;

#endif

/* The operations, for this inclusion's TILE_NATIVE (a file may include this more than once) */
#undef TILE_TGT
#undef TILE_STATE
#undef TILE_CONFIG
#undef TILE_ZERO
#undef TILE_LOAD
#undef TILE_STORE
#undef TILE_DPBUSD
#undef TILE_DPBSSD
#undef TILE_RELEASE
#if TILE_NATIVE == 1
#include <immintrin.h>

/* The asm reads the whole configuration: gcc 12 dropped the stores to a configuration whose
 * only reader was _tile_loadconfig, which then left the tiles unconfigured (AMX_NOTES.md). */
#define TILE_TGT __attribute__((target("amx-tile,amx-int8")))
#define TILE_STATE(ts, tally) int ts = ((void)(tally), 0)
#define TILE_CONFIG(ts, c) \
    ((void)(ts), __extension__({ __asm__ volatile("" : : "m"(*(const amx_tilecfg *)(c)) : "memory"); }), _tile_loadconfig(c))
#define TILE_ZERO(ts, i) _tile_zero(i)
#define TILE_LOAD(ts, i, base, stride) _tile_loadd(i, base, stride)
#define TILE_STORE(ts, i, base, stride) _tile_stored(i, base, stride)
#define TILE_DPBUSD(ts, c, a, b) _tile_dpbusd(c, a, b)
#define TILE_DPBSSD(ts, c, a, b) _tile_dpbssd(c, a, b)
#define TILE_RELEASE(ts) _tile_release()
#elif TILE_NATIVE == 2
#define TILE_TGT
#define TILE_STATE(ts, tally) amx_count *ts = (tally)
#define TILE_CONFIG(ts, c) ((void)(c), ts->config++)
#define TILE_ZERO(ts, i) ts->zero++
#define TILE_LOAD(ts, i, base, stride) ((void)(base), ts->load++)
#define TILE_STORE(ts, i, base, stride) ((void)(base), ts->store++)
#define TILE_DPBUSD(ts, c, a, b) ts->dp++
#define TILE_DPBSSD(ts, c, a, b) ts->dp++
#define TILE_RELEASE(ts) ((void)0)
#else
/* AVX2 (which the amx set needs anyway) lets the compiler vectorize the emulated products */
#define TILE_TGT __attribute__((target("avx2")))
#define TILE_STATE(ts, tally) amx_emu ts##_emu, *ts = ((void)(tally), &ts##_emu)
#define TILE_CONFIG(ts, c) amx_emu_config(ts, c)
#define TILE_ZERO(ts, i) amx_emu_zero(ts, i)
#define TILE_LOAD(ts, i, base, stride) amx_emu_load(ts, i, base, stride)
#define TILE_STORE(ts, i, base, stride) amx_emu_store(ts, i, base, stride)
#define TILE_DPBUSD(ts, c, a, b) amx_emu_dp(ts, c, a, b, 0)
#define TILE_DPBSSD(ts, c, a, b) amx_emu_dp(ts, c, a, b, 1)
#define TILE_RELEASE(ts) amx_emu_release(ts)
#endif
