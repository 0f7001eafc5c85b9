/* kernels.h - the dot-product kernels under linear(), one set per instruction set.
 *
 * A kernel computes raw f32 dot products of weight rows [r0, r1) with T activation rows:
 *     y[t * ystride + (r - r0)] = x[t] . W[r]
 * dense: f32 and bf16 weights, and fp8 / fp4 weights the loader dequantized (mode != AS_STORED),
 *        against f32 activations, in the one canonical order of scalar.c: column i into
 *        partial sum i mod 16 by a fused multiply-add, the 16 joined by sum16 (numerics.h). Every
 *        correct kernel agrees bit for bit, whatever its tiles and the call's token count.
 * quant: fp8 / fp4 weights (AS_STORED) against an act-quantized activation: x holds e4m3
 *        values as f32 and xs their per-32 scales [T][ceil(cols/32)]. Each 32-block's partial
 *        is the EXACT sum of its products rounded once to f32 (products of these formats are
 *        exact in f32 and their sums in f64), times xs and the weight's block scale, and the
 *        blocks are added in increasing order, so every correct kernel agrees bit for bit.
 * Every set is checked against the scalar set (tests/test_kernels.c). */
#ifndef DSV41_KERNELS_H
#define DSV41_KERNELS_H

#include "weight.h"

typedef void (*rows_fn)(const weight *w, int64_t r0, int64_t r1, const float *x, const float *xs, int64_t T,
                        int64_t xstride, float *y, int64_t ystride);

/* act_quant(x, 32, ue8m0) as the quant kernels want their input: per block of 32 of x [n],
 * s[b] = pow2_ceil(max(amax, 1e-4) / 448) and q[i] = e4m3(clamp(x[i] / s, +-448)) as f32. Every
 * set gives the scalar set's bits (non-finite blocks and the last partial block may go to it). */
typedef void (*act_quant_fn)(const float *x, int64_t n, float *q, float *s);

typedef struct {
    const char *name;
    rows_fn dense, quant;
    act_quant_fn act_quant;
} kernel_set;

extern const kernel_set kernels_scalar;
/* The fast sets; each is defined only where its architecture is (x86-64: avx2, avx512; arm64:
 * neon), and kernels_find() says whether this CPU runs it. */
extern const kernel_set kernels_avx2, kernels_avx512, kernels_neon;
/* x86-64: the AMX tile set (amx.c), on the tile instructions where amx_native() says the CPU and
 * the OS allow them, else on their emulation; and the same set always on the emulation, for the
 * tests to compare the two where both run. */
extern const kernel_set kernels_amx, kernels_amx_emulated;
int amx_native(void);
/* The amx model (amx.c), for `bench` on hosts without AMX and beside the real tiles where they
 * are: kernels_amx_model runs each call the tiles would take twice, once with the tile
 * instructions counted and not run (the work around them timed for real, its results thrown
 * away) and once on the vector set for the results; amx_tally_read gives the totals so far of
 * every thread, and amx_tally_tile_seconds prices the instructions counted between two readings
 * at the costs AMX_NOTES.md measured on a Xeon core. */
extern const kernel_set kernels_amx_model;
typedef struct {
    uint64_t config, zero, load, store, dp; /* tile instructions counted */
    uint64_t outside_ns;                    /* the counted kernels' own time: the work around the tiles */
    uint64_t vector_ns;                     /* the vector set's kernels run after them for the results */
} amx_tally;
void amx_tally_read(amx_tally *t);
double amx_tally_tile_seconds(const amx_tally *a, const amx_tally *b);
/* Whether this CPU (and its OS) runs the vector set k, and the best vector set it runs, chosen
 * at run time (cpu.c). The amx set needs AVX2 for the work around its tiles (select.c asks). */
int kernels_supported(const kernel_set *k);
const kernel_set *kernels_best(void);
/* A set by name ("scalar", "avx2", "avx512", "neon", "amx"), NULL when absent or unsupported
 * here (dsv41_set_kernels is the public way in). */
const kernel_set *kernels_find(const char *name);
/* The integer multiply-adds per second one thread does in a register-only loop of the
 * instruction k's integer products use (byte products: vpdpbusd for avx512, tdpbusd for amx on
 * the tiles; 16-bit: vpmaddwd with its vpaddd for avx2), or 0 where k has none here (peak.c):
 * the limit `bench` weighs each quant kernel against. */
double kernels_int8_rate(const kernel_set *k);
/* What linear() uses until told otherwise: the set $DSV41_KERNELS names when this CPU runs it,
 * else amx where it runs on the tiles, else kernels_best(). */
const kernel_set *kernels_default(void);
/* The set linear() uses (default kernels_default()). */
void kernels_use(const kernel_set *k);
const kernel_set *kernels_current(void);

#endif
