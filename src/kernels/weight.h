/* weight.h - a weight in its storage format (weight.c reads its elements) and linear(), which
 * multiplies activations by it (linear.c, over the kernel sets of kernels.h). */
#ifndef DSV41_WEIGHT_H
#define DSV41_WEIGHT_H

#include <stddef.h>
#include <stdint.h>

typedef enum { DT_F32, DT_BF16, DT_E4M3, DT_E8M0, DT_FP4 } dtype;

/* How the release computes with a weight: by its storage dtype, or as the loader converted it
 * (model.py holds the head and the ratio-2 compressor in f32 and dequantizes wo_a to bf16). */
typedef enum { AS_STORED, AS_F32, AS_BF16 } weight_mode;

typedef struct {
    dtype type;
    weight_mode mode;
    int64_t rows, cols;       /* [out][in], as torch stores it */
    const void *data;         /* row-major elements; DT_FP4 packs two per byte, low nibble first */
    const uint8_t *scale;     /* e8m0 block scales for E4M3/FP4, NULL otherwise */
    int32_t scale_rows;       /* rows per scale block: 32 for dense 32x32 tiles, 1 for per-row */
} weight;

/* F.linear as the release dispatches it: y[t][o] = x[t] . W[o]. An f32 (or AS_F32) weight gives
 * an f32 result; fp8 / fp4 weights act-quantize x and sum per 32-block; everything else is a
 * bf16 GEMM with a bf16 result. */
void linear(const weight *w, const float *x, int64_t T, float *y);
/* One projection of a batch: y [T][n] = x (rows xstride apart) times rows [row0, row0+n) of W. */
typedef struct {
    const weight *w;
    int64_t row0, n;
    const float *x;
    int64_t T, xstride;
    float *y;
} linear_item;
/* Every item's projection, as linear() computes it, in one job for the thread pool. */
void linear_batch(const linear_item *items, int32_t n);
/* Whether linear() rounds w's results to bf16 (all but the f32 GEMMs), so they travel as bf16. */
int linear_rounds(const weight *w);
/* Multiply-adds done by linear() so far, all threads (for FLOP rates). */
uint64_t linear_macs(void);
/* Bytes of w's elements and its block scales; of one row's elements. */
size_t weight_bytes(const weight *w);
size_t weight_row_bytes(const weight *w);
/* Element (r, c) of w as f32 (embedding rows, table gathers). */
float weight_get(const weight *w, int64_t r, int64_t c);
/* The same without its block scale, and the e8m0 scale of row r's 32-block b. */
float weight_raw(const weight *w, int64_t r, int64_t c);
float weight_block_scale(const weight *w, int64_t r, int64_t b);

#endif
