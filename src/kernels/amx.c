/* amx.c - the amx set: the exact fp8 / fp4 block sums on AMX tiles (TDPBUSD), through the
 * instructions where the CPU has them and Linux grants the tile data, else through their
 * emulation (amx_tiles.h), which every x86-64 host runs; both give the scalar set's bits.
 *
 * A block's exact sum is an integer sum of byte products. An input x (an e4m3 value) is the
 * integer k = 512x (|k| <= 448 * 512), in three signed base-256 digits. An fp4 weight w is the
 * unsigned byte 2w + 12 (0..24); an fp8 weight W the integer j = 512W shifted to J0 + j (0 ..
 * 2 J0, J0 = 448 * 512) in three unsigned digits. Digit products weigh 256^(a + d) and gather in
 * one int32 tile per weight (C_s at most 3 x 32 x 255 x 128 < 2^22, so nothing wraps); joined in
 * int64 and less the shift times sum(k), they give 1024 sum(w x) (fp4) or 2^18 sum(W x) (fp8)
 * exactly, which one f64 -> f32 conversion rounds as the reference rounds its f64 sum. Then the
 * scales and the block order are the scalar kernel's, in the same f32 operations.
 * Inputs that are not k / 512 with |k| <= 448 * 512 and NaN weight codes go to the vector set's
 * kernel (which gives the same bits); dense weights and act_quant are the vector set's. */
#if defined(__x86_64__)
#include <cpuid.h>
#include <math.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "kernels.h"
#include "numerics.h"
#include "tile.h"

#define TILE_NATIVE 0 /* the emulation first (amx_kernel.h includes the operations again) */
#include "amx_tiles.h"

enum {
    AMX_ROWS = 16,   /* weight rows per tile */
    AMX_TOKENS = 16, /* tokens per tile, at most */
    AMX_GROUP = 4,   /* token tiles whose inputs are prepared together */
    AMX_BLOCKS = 8,  /* blocks of 32 columns per prepared chunk */
    AMX_DIGITS = 3,  /* base-256 digits of k, and of an fp8 weight */
    AMX_K_MAX = 448 * 512, /* the largest |k| = 512 |x| of an e4m3 input, and |j| of a weight */
};

/* A chunk's inputs for up to AMX_GROUP tiles of tokens: b the digits of k in B's layout (row
 * c / 4 holds column c of each token n at byte 4 n + c % 4), sumk each block's sum of k, xs the
 * input scales */
typedef struct {
    _Alignas(64) int8_t b[AMX_GROUP][AMX_BLOCKS][AMX_DIGITS][8][64]; /* [tile][block][digit][c / 4][4 n + c % 4] */
    int32_t sumk[AMX_GROUP][AMX_BLOCKS][AMX_TOKENS];                   /* [tile][block][n] */
    float xs[AMX_GROUP][AMX_BLOCKS][AMX_TOKENS];                       /* [tile][block][n] */
} amx_inputs;

/* A chunk's weights for one tile of rows: a the digits in A's layout, ws the block scales */
typedef struct {
    _Alignas(64) uint8_t a[AMX_BLOCKS][AMX_DIGITS][AMX_ROWS][32]; /* [block][digit][row][column in the block] */
    float ws[AMX_ROWS][AMX_BLOCKS];                                /* [row][block] */
} amx_weights;

/* The shapes of amx_kernel.h's tiles for nt tokens: A 16 x 32 bytes, B 8 x 4 nt, C 16 x 4 nt */
static amx_tilecfg amx_config(int nt) {
    amx_tilecfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    c.rows[0] = AMX_ROWS;
    c.colsb[0] = 32;
    c.rows[1] = 8;
    c.colsb[1] = (uint16_t)(4 * nt);
    for (int i = 2; i < 7; i++) {
        c.rows[i] = AMX_ROWS;
        c.colsb[i] = (uint16_t)(4 * nt);
    }
    return c;
}

/* Prepares blocks [b0, b0+nblk) of ng tokens (x, xs at the first): every byte a B tile of up
 * to ng tokens loads. Returns 0 when an input is not k / 512 with |k| <= AMX_K_MAX. */
static int amx_prepare(const float *x, int64_t xstride, const float *xs, int64_t nb, int64_t cols, int ng, int64_t b0,
                       int nblk, amx_inputs *in) {
    for (int t = 0; t < ng; t++) {
        const int g = t / AMX_TOKENS, n = t % AMX_TOKENS;
        for (int b = 0; b < nblk; b++) {
            int32_t sum = 0;
            for (int j = 0; j < 32; j++) {
                const int64_t c = (b0 + b) * 32 + j;
                const float v = c < cols ? x[t * xstride + c] * 512.0f : 0.0f;
                if (!(fabsf(v) <= (float)AMX_K_MAX) || v != (float)(int32_t)v) return 0;
                const int32_t k = (int32_t)v, d0 = (int8_t)(uint8_t)k, k1 = (k - d0) / 256, d1 = (int8_t)(uint8_t)k1;
                in->b[g][b][0][j / 4][4 * n + j % 4] = (int8_t)d0;
                in->b[g][b][1][j / 4][4 * n + j % 4] = (int8_t)d1;
                in->b[g][b][2][j / 4][4 * n + j % 4] = (int8_t)((k1 - d1) / 256);
                sum += k;
            }
            in->sumk[g][b][n] = sum;
            in->xs[g][b][n] = xs[t * nb + b0 + b];
        }
    }
    return 1;
}

/* 2w + 12 for each e2m1 code w */
static const uint8_t FP4_A[16] = {12, 13, 14, 15, 16, 18, 20, 24, 12, 11, 10, 9, 8, 6, 4, 0};

/* Decodes blocks [b0, b0+nblk) of rows [r, r+nr) (the tile's other rows zero). Returns 0 for
 * a NaN fp8 code. */
static int amx_decode(const weight *w, int64_t r, int nr, int64_t b0, int nblk, amx_weights *wt) {
    const int fp4 = w->type == DT_FP4;
    const int64_t cols = w->cols, rowbytes = fp4 ? (cols + 1) / 2 : cols;
    memset(wt->a, 0, (size_t)nblk * sizeof wt->a[0]);
    for (int i = 0; i < nr; i++) {
        const uint8_t *row = (const uint8_t *)w->data + (r + i) * rowbytes;
        for (int b = 0; b < nblk; b++) {
            wt->ws[i][b] = weight_block_scale(w, r + i, b0 + b);
            for (int j = 0; j < 32; j++) {
                const int64_t c = (b0 + b) * 32 + j;
                if (c >= cols) break;
                if (fp4) {
                    wt->a[b][0][i][j] = FP4_A[(c & 1) ? row[c / 2] >> 4 : row[c / 2] & 15];
                    continue;
                }
                const uint8_t code = row[c];
                const int e = code >> 3 & 15, m = code & 7;
                if (e == 15 && m == 7) return 0;
                const int32_t mag = e ? (8 + m) << (e - 1) : m, u = AMX_K_MAX + (code & 0x80 ? -mag : mag);
                wt->a[b][0][i][j] = (uint8_t)u;
                wt->a[b][1][i][j] = (uint8_t)(u >> 8);
                wt->a[b][2][i][j] = (uint8_t)(u >> 16);
            }
        }
    }
    return 1;
}

/* Adds block b of the chunk to nr rows by nt tokens of y (y[n * ystride + i]), from its digit
 * sums: the exact block sum rounded once, times the input scale and the weight's block scale,
 * added to the earlier blocks (to 0 for the first), as scalar_quant does. */
static void amx_combine(const int32_t sums[AMX_DIGITS + 2][AMX_ROWS][AMX_TOKENS], int fp4, int nr, int nt,
                        const int32_t *sumk, const float *xs, const amx_weights *wt, int b, int first, float *y,
                        int64_t ystride) {
    const int ns = fp4 ? AMX_DIGITS : AMX_DIGITS + 2;
    const int64_t shift = fp4 ? 12 : AMX_K_MAX; /* what the weights' bytes add to each weight */
    const double unit = fp4 ? 0x1p-10 : 0x1p-18;   /* the sums count 2w k and j k */
    for (int n = 0; n < nt; n++)
        for (int i = 0; i < nr; i++) {
            int64_t s = 0;
            for (int d = ns - 1; d >= 0; d--) s = s * 256 + sums[d][i][n];
            const float part = (float)((double)(s - shift * sumk[n]) * unit);
            float *o = y + n * ystride + i;
            *o = (first ? 0.0f : *o) + part * xs[n] * wt->ws[i][b];
        }
}

#define AMX_QUANT amx_quant_emulated
#include "amx_kernel.h"
#undef AMX_QUANT
#undef TILE_NATIVE

#define TILE_NATIVE 1
#define AMX_QUANT amx_quant_native
#include "amx_kernel.h"
#undef AMX_QUANT
#undef TILE_NATIVE

/* CPUID.(7, 0):EDX bits 24 (AMX-TILE) and 25 (AMX-INT8), and Linux's permission for the tile
 * data (arch_prctl ARCH_REQ_XCOMP_PERM for XFEATURE_XTILEDATA), which covers the whole process;
 * a refusal means no AMX, never an error. A build with DSV41_AMX_EMULATE defined never uses the
 * instructions: it runs the whole suite through the emulation on any host. */
static int amx_probe(void) {
#if defined(DSV41_AMX_EMULATE)
    return 0;
#else
    unsigned a, b, c, d;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d >> 24 & 1) || !(d >> 25 & 1)) return 0;
    return syscall(SYS_arch_prctl, 0x1023 /* ARCH_REQ_XCOMP_PERM */, 18 /* XFEATURE_XTILEDATA */) == 0;
#endif
}

int amx_native(void) {
    static int state; /* 0 not asked yet, 1 no, 2 yes: the host's answer, the same for every thread */
    int s = __atomic_load_n(&state, __ATOMIC_ACQUIRE);
    if (!s) {
        s = amx_probe() ? 2 : 1;
        __atomic_store_n(&state, s, __ATOMIC_RELEASE);
    }
    return s == 2;
}

/* the tile kernel (native or emulated), or the vector set's where it declines */
static void amx_quant_with(int native, const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs,
                           int64_t T, int64_t xstride, float *y, int64_t ystride) {
    const int tiles = (w->type == DT_FP4 || w->type == DT_E4M3) && w->scale && w->cols > 0;
    if (tiles && (native ? amx_quant_native : amx_quant_emulated)(w, r0, r1, x, xs, T, xstride, y, ystride)) return;
    kernels_best()->quant(w, r0, r1, x, xs, T, xstride, y, ystride);
}

static void amx_quant(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T,
                      int64_t xstride, float *y, int64_t ystride) {
    amx_quant_with(amx_native(), w, r0, r1, x, xs, T, xstride, y, ystride);
}

static void amx_quant_emulation(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T,
                                int64_t xstride, float *y, int64_t ystride) {
    amx_quant_with(0, w, r0, r1, x, xs, T, xstride, y, ystride);
}

static void amx_dense(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T,
                      int64_t xstride, float *y, int64_t ystride) {
    kernels_best()->dense(w, r0, r1, x, xs, T, xstride, y, ystride);
}

static void amx_act_quant(const float *x, int64_t n, float *q, float *s) { kernels_best()->act_quant(x, n, q, s); }

const kernel_set kernels_amx = {"amx", amx_dense, amx_quant, amx_act_quant};
const kernel_set kernels_amx_emulated = {"amx (emulated)", amx_dense, amx_quant_emulation, amx_act_quant};

#endif
