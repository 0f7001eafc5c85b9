/* rms.c - RMSNorm, and the sum of squares that it and mHC's mixes (hc.c) share. */
#include <math.h>
#include <string.h>

#include "model.h"
#include "numerics.h"
#include "pool.h"

/* sum of x[i]^2 over i < n in a fixed order: 16 running sums (lane j takes i = j mod 16 in
 * order), then halved pairwise. The order depends on n only, so a row gives the same bits in a
 * prefill and in a decode step and on any thread; one index-order chain made a decode step wait
 * 4 cycles per element (torch sums in its own order too, which the golden's bars allow for). */
float rms_sum_squares(const float *x, int64_t n) {
    v16 acc = {0.0f};
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const v16 v = LOAD16(x + i);
        acc += v * v;
    }
    float lane[16];
    memcpy(lane, &acc, sizeof lane);
    for (; i < n; i++) lane[i % 16] += x[i] * x[i];
    return sum16(lane);
}

typedef struct {
    const float *x, *w;
    int32_t n;
    float eps, *y;
} norm_job;

/* rows [b, e) of rms_norm */
static void norm_range(void *ctx, int64_t b, int64_t e) {
    const norm_job *j = ctx;
    const int32_t n = j->n;
    for (int64_t t = b; t < e; t++) {
        const float *r = j->x + t * n;
        float rs = 1.0f / sqrtf(rms_sum_squares(r, n) / (float)n + j->eps);
        for (int32_t i = 0; i < n; i++) j->y[t * n + i] = bf16_round(j->w[i] * (r[i] * rs));
    }
}

/* x [T][n], w [n] -> y [T][n] = bf16(w * (x * rsqrt(mean(x^2) + eps))), rows over the pool */
void rms_norm(const float *x, const float *w, int64_t T, int32_t n, float eps, float *y) {
    norm_job j = {x, w, n, eps, y};
    pool_run(T, 8, norm_range, &j);
}
