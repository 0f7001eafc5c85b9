/* hc.c - manifold hyper-connections (mHC): hc_mult residual copies, mixed per token.
 *
 * hc_mixes derives three coefficient sets from the stream itself: one projection of the
 * flattened [hc*dim] stream scaled by its RMS, split into pre (the collapse weights), post (the
 * expansion weights) and comb (an hc x hc matrix pushed towards doubly stochastic by Sinkhorn
 * iterations). All of it is f32; only the collapsed and expanded streams round to bf16.
 *
 * comb is [j][k]: output copy k sums residual copies j with weights comb[j][k]. */
#include <math.h>
#include <string.h>

#include "collective.h"
#include "model.h"
#include "numerics.h"
#include "pool.h"
#include "scratch.h"

static float sigmoidf(float x) { return 1.0f / (1.0f + expf(-x)); }

/* mix [(2+hc)*hc], scale [3], base [(2+hc)*hc] -> pre [hc], post [hc], comb [hc][hc] */
void hc_split_sinkhorn(const float *mix, const float *scale, const float *base, int32_t hc, int32_t iters,
                       float eps, float *pre, float *post, float *comb) {
    for (int32_t j = 0; j < hc; j++) {
        pre[j] = sigmoidf(mix[j] * scale[0] + base[j]) + eps;
        post[j] = 2.0f * sigmoidf(mix[hc + j] * scale[1] + base[hc + j]);
    }
    for (int32_t i = 0; i < hc * hc; i++) comb[i] = mix[2 * hc + i] * scale[2] + base[2 * hc + i];
    for (int32_t j = 0; j < hc; j++) { /* row softmax, then + eps */
        float *row = comb + j * hc, mx = -INFINITY, sum = 0.0f;
        for (int32_t k = 0; k < hc; k++) mx = fmaxf(mx, row[k]);
        for (int32_t k = 0; k < hc; k++) { row[k] = expf(row[k] - mx); sum += row[k]; }
        for (int32_t k = 0; k < hc; k++) row[k] = row[k] / sum + eps;
    }
    for (int32_t it = 0; it < iters; it++) {
        if (it > 0) /* the first round has only the column pass: the softmax normalized the rows */
            for (int32_t j = 0; j < hc; j++) {
                float s = 0.0f;
                for (int32_t k = 0; k < hc; k++) s += comb[j * hc + k];
                for (int32_t k = 0; k < hc; k++) comb[j * hc + k] /= s + eps;
            }
        for (int32_t k = 0; k < hc; k++) {
            float s = 0.0f;
            for (int32_t j = 0; j < hc; j++) s += comb[j * hc + k];
            for (int32_t j = 0; j < hc; j++) comb[j * hc + k] /= s + eps;
        }
    }
}

typedef struct {
    const float *h, *scale, *base;
    const config *c;
    float *mix, *pre, *post, *comb;
} mix_job;

/* tokens [b, e) of hc_mixes: the stream's rms scales the mix, then the Sinkhorn projection */
static void mix_range(void *ctx, int64_t b, int64_t e) {
    const mix_job *j = ctx;
    const int32_t hc = j->c->hc_mult, nmix = (2 + hc) * hc;
    const int64_t n = (int64_t)hc * j->c->dim;
    for (int64_t t = b; t < e; t++) {
        float *m = j->mix + t * nmix;
        float rs = 1.0f / sqrtf(rms_sum_squares(j->h + t * n, n) / (float)n + j->c->norm_eps);
        for (int32_t i = 0; i < nmix; i++) m[i] *= rs;
        hc_split_sinkhorn(m, j->scale, j->base, hc, j->c->hc_sinkhorn_iters, j->c->hc_eps, j->pre + t * hc,
                          j->post + t * hc, j->comb + t * hc * hc);
    }
}

/* h [T][hc][dim], fn [(2+hc)*hc][hc*dim] -> pre [T][hc], post [T][hc], comb [T][hc][hc] */
void hc_mixes(const dsv41_model *m, const float *h, int64_t T, const weight *fn, const float *scale, const float *base,
              float *pre, float *post, float *comb) {
    const config *c = &m->cfg;
    scratch_mark mark = scratch_begin();
    float *mix = scratch_f32(T * (2 + c->hc_mult) * c->hc_mult);
    collective_project(m, fn, h, T, mix); /* fn is f32: raw f32 sums */
    mix_job j = {h, scale, base, c, mix, pre, post, comb};
    pool_run(T, 4, mix_range, &j);
    scratch_end(mark);
}

typedef struct {
    const float *x;    /* hc_post: [T][dim] the block's output */
    const float *res;  /* [T][hc][dim] the residual copies */
    const float *wts;  /* [T][hc] hc_pre's pre or hc_post's post weights */
    const float *comb; /* hc_post: [T][hc][hc] */
    int32_t hc, dim;
    float *y;
} hc_job;

/* tokens [b, e) of hc_pre: 4 channels at a time, each summed over the copies in order */
static void pre_range(void *ctx, int64_t b, int64_t e) {
    const hc_job *j = ctx;
    const int32_t hc = j->hc, dim = j->dim;
    for (int64_t t = b; t < e; t++) {
        const float *w = j->wts + t * hc, *res = j->res + t * hc * dim;
        float *y = j->y + t * dim;
        int32_t d = 0;
        for (; d + 4 <= dim; d += 4) {
            f4 acc = {0.0f, 0.0f, 0.0f, 0.0f};
            for (int32_t c = 0; c < hc; c++) acc += w[c] * load4(res + c * dim + d);
            memcpy(y + d, &acc, sizeof acc);
        }
        for (; d < dim; d++) {
            float acc = 0.0f;
            for (int32_t c = 0; c < hc; c++) acc += w[c] * res[c * dim + d];
            y[d] = acc;
        }
        bf16_round_n(y, dim);
    }
}

/* h [T][hc][dim], pre [T][hc] -> y [T][dim] = bf16(sum_c pre[c] * h[c]), tokens over the pool */
void hc_pre(const float *h, const float *pre, int64_t T, int32_t hc, int32_t dim, float *y) {
    hc_job j = {NULL, h, pre, NULL, hc, dim, y};
    pool_run(T, 8, pre_range, &j);
}

/* rows [b, e) of hc_post, a row being one output copy k of one token t (b = t hc + k); 4
 * channels at a time as in pre_range */
/* rows [b, e) of hc_post, 16 channels at a time; inlined into post_range and its AVX-512 twin */
static inline __attribute__((always_inline)) void post_rows(const hc_job *j, int64_t b, int64_t e) {
    const int32_t hc = j->hc, dim = j->dim;
    for (int64_t r = b; r < e; r++) {
        const int64_t t = r / hc, k = r % hc;
        const float *comb = j->comb + t * hc * hc + k, *res = j->res + t * hc * dim, *x = j->x + t * dim;
        const float post = j->wts[r];
        float *y = j->y + r * dim;
        int32_t d = 0;
        for (; d + 16 <= dim; d += 16) {
            v16 mix = {0.0f};
            for (int32_t i = 0; i < hc; i++) mix += comb[i * hc] * LOAD16(res + i * dim + d);
            v16 v = post * LOAD16(x + d) + mix;
            memcpy(y + d, &v, sizeof v);
        }
        for (; d < dim; d++) {
            float mix = 0.0f;
            for (int32_t i = 0; i < hc; i++) mix += comb[i * hc] * res[i * dim + d];
            y[d] = post * x[d] + mix;
        }
        bf16_round_n(y, dim);
    }
}

static void post_range(void *ctx, int64_t b, int64_t e) { post_rows(ctx, b, e); }

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static void post_range_avx512(void *ctx, int64_t b, int64_t e) {
    post_rows(ctx, b, e);
}
#endif

/* x [T][dim], res [T][hc][dim], post [T][hc], comb [T][hc][hc]
 * -> y [T][hc][dim] = bf16(post[k] * x + sum_j comb[j][k] * res[j]); the sum over j is formed
 * first, as torch.sum does, and only then added to post * x. Rows go over the pool. */
void hc_post(const float *x, const float *res, const float *post, const float *comb, int64_t T, int32_t hc,
             int32_t dim, float *y) {
    hc_job j = {x, res, post, comb, hc, dim, y};
    pool_fn range = post_range;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) range = post_range_avx512;
#endif
    pool_run(T * hc, 2 * hc, range, &j); /* a decode step's few rows stay on this thread */
}
