/* weight.c - a weight's elements in its storage format, read one at a time (embedding rows,
 * table gathers, the scalar kernels), and its size. linear.c multiplies by whole weights. */
#include "kernels/kernels.h"
#include "numerics.h"

size_t weight_row_bytes(const weight *w) {
    static const int SZ[] = {4, 2, 1, 1, 1};
    return (size_t)(w->type == DT_FP4 ? (w->cols + 1) / 2 : w->cols) * (size_t)SZ[w->type];
}

size_t weight_bytes(const weight *w) {
    if (!w->data) return 0;
    size_t n = (size_t)w->rows * weight_row_bytes(w);
    if (w->scale) n += (size_t)((w->scale_rows == 1 ? w->rows : (w->rows + 31) / 32) * ((w->cols + 31) / 32));
    return n;
}

float weight_block_scale(const weight *w, int64_t r, int64_t b) {
    return e8m0_to_f32(w->scale[(r / w->scale_rows) * ((w->cols + 31) / 32) + b]);
}

float weight_raw(const weight *w, int64_t r, int64_t c) {
    int64_t i = r * w->cols + c;
    switch (w->type) {
    case DT_F32: return f32_at(w->data, i);
    case DT_BF16: return bf16_to_f32(u16_at(w->data, i));
    case DT_E4M3: return e4m3_to_f32(((const uint8_t *)w->data)[i]);
    case DT_E8M0: return e8m0_to_f32(((const uint8_t *)w->data)[i]);
    case DT_FP4: {
        uint8_t b = ((const uint8_t *)w->data)[r * ((w->cols + 1) / 2) + c / 2];
        return e2m1_to_f32((c & 1) ? b >> 4 : b & 15);
    }
    }
    return 0.0f;
}

float weight_get(const weight *w, int64_t r, int64_t c) {
    float v = weight_raw(w, r, c);
    return w->scale ? v * weight_block_scale(w, r, c / 32) : v;
}
