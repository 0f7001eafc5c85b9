/* moe.c - the routed mixture of experts with one shared expert.
 *
 * The gate scores experts with sqrt(softplus(x . w_e)); a per-expert bias only changes which
 * experts are picked, never their weights. The picked scores are normalized and scaled by
 * route_scale. Each expert is a SwiGLU whose up projection is clamped to +-swiglu_limit and
 * whose gate is clamped above only; the routing weight multiplies before the down projection.
 * Outputs are summed in f32 in increasing expert id, then the shared expert, then rounded once.
 *
 * Experts run over all the tokens routed to them at once, so a prefill reads each expert's
 * weights once; taking the experts in increasing id keeps every token's summation order. */
#include <math.h>
#include <string.h>

#include "collective.h"
#include "numerics.h"
#include "pool.h"
#include "scratch.h"

static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* scores [E] (raw gate dot products) -> weights [k], ids [k] in descending order of
 * score + bias, the lower id first on ties */
static void route(const config *c, int32_t E, int32_t k, const float *bias, float *s, float *weights, int32_t *ids) {
    for (int32_t e = 0; e < E; e++) s[e] = sqrtf(softplus(s[e] / c->gate_temp));
    float sum = 0.0f;
    for (int32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (int32_t e = 0; e < E; e++) {
            int taken = 0;
            for (int32_t i = 0; i < j; i++) taken |= ids[i] == e;
            if (!taken && (best < 0 || s[e] + bias[e] > s[best] + bias[best])) best = e;
        }
        ids[j] = best;
        weights[j] = s[best];
        sum += s[best];
    }
    if (c->norm_topk_prob && k > 1)
        for (int32_t j = 0; j < k; j++) weights[j] /= sum + 1e-20f;
    for (int32_t j = 0; j < k; j++) weights[j] *= c->route_scale;
}

typedef struct {
    const config *c;
    float *g;
    const float *u, *rw;
    int64_t inter;
} swiglu_job;

static void swiglu_range(void *ctx, int64_t b, int64_t e) {
    const swiglu_job *j = ctx;
    const float lim = j->c->swiglu_limit;
    const int64_t inter = j->inter;
    for (int64_t t = b; t < e; t++)
        for (int64_t i = 0; i < inter; i++) {
            float gi = j->g[t * inter + i], ui = j->u[t * inter + i];
            if (lim > 0.0f) {
                ui = ui < -lim ? -lim : ui > lim ? lim : ui;
                gi = gi > lim ? lim : gi;
            }
            float h = gi / (1.0f + expf(-gi)) * ui;
            j->g[t * inter + i] = bf16_round(j->rw ? h * j->rw[t] : h);
        }
}

typedef struct {
    const config *c;
    int32_t E, k;
    const float *bias;
    float *scores, *weights;
    int32_t *ids;
} route_job;

static void route_range(void *ctx, int64_t b, int64_t e) {
    const route_job *j = ctx;
    const int32_t E = j->E, k = j->k;
    for (int64_t t = b; t < e; t++) route(j->c, E, k, j->bias, j->scores + t * E, j->weights + t * k, j->ids + t * k);
}

/* g, u [n][inter] (w1 x and w3 x) -> g = bf16(silu(min(g, lim)) * clamp(u, +-lim) * rw), rw [n]
 * (NULL: 1), the input of w2; rows over the pool (a row is hundreds of expf: a decode step's
 * few picks split too) */
static void swiglu(const config *c, float *g, const float *u, int64_t n, int64_t inter, const float *rw) {
    swiglu_job j = {c, g, u, rw, inter};
    pool_run(n, 2, swiglu_range, &j);
}

/* Experts [e0, e1) (picks [first[e0], first[e1]) of xs, with route weights rw) and, when
 * `shared`, the shared expert over all T tokens: every up projection as one pool job, then
 * every down projection as another. ys [picks][dim], yss [T][dim]: the outputs. */
static void run_experts(const dsv41_model *m, const layer_weights *L, int32_t E, const int64_t *first, int32_t e0,
                        int32_t e1, const float *xs, const float *rw, const float *x, int64_t T, int shared, float *ys,
                        float *yss) {
    const config *c = &m->cfg;
    int64_t dim = c->dim, inter = c->moe_inter_dim, sinter = shared ? L->sw1.rows : 0;
    int64_t p0 = first[e0], n = first[e1] - p0;
    scratch_mark mark = scratch_begin();
    float *g = scratch_f32(n * inter + T * sinter), *u = scratch_f32(n * inter + T * sinter);
    float *gs = g + n * inter, *us = u + n * inter; /* the shared expert's */
    linear_item *items = scratch_bytes((size_t)(2 * (e1 - e0) + 2) * sizeof *items);
    int32_t ni = 0;
    for (int32_t e = e0; e < e1; e++) {
        int64_t cnt = first[e + 1] - first[e], f = first[e] - p0;
        if (cnt == 0 || !part_owns(&m->part, E, e)) continue;
        items[ni++] = (linear_item){&L->w1[e], 0, inter, xs + f * dim, cnt, dim, g + f * inter};
        items[ni++] = (linear_item){&L->w3[e], 0, inter, xs + f * dim, cnt, dim, u + f * inter};
    }
    int32_t own = ni; /* the shared expert's items after this rank's experts' */
    if (shared) {
        items[ni++] = (linear_item){&L->sw1, 0, sinter, x, T, dim, gs};
        items[ni++] = (linear_item){&L->sw3, 0, sinter, x, T, dim, us};
    }
    collective_linear_rows(m, items, ni, own);
    swiglu(c, g, u, n, inter, rw);
    if (shared) swiglu(c, gs, us, T, sinter, NULL);
    ni = 0;
    for (int32_t e = e0; e < e1; e++) {
        int64_t cnt = first[e + 1] - first[e], f = first[e] - p0;
        if (cnt > 0 && part_owns(&m->part, E, e)) items[ni++] = (linear_item){&L->w2[e], 0, dim, g + f * inter, cnt, inter, ys + f * dim};
    }
    own = ni;
    if (shared) items[ni++] = (linear_item){&L->sw2, 0, dim, gs, T, sinter, yss};
    collective_linear_rows(m, items, ni, own);
    scratch_end(mark);
}

typedef struct {
    float *acc;
    const float *ys;
    const int64_t *picks; /* [T][k]: each token's picks, ascending */
    int64_t p0, np;
    int32_t k, dim;
} scatter_job;

/* tokens [b, e): acc[t] += ys[p - p0] for each of t's picks p in [p0, p0 + np), in order */
static void scatter_range(void *ctx, int64_t b, int64_t e) {
    const scatter_job *j = ctx;
    for (int64_t t = b; t < e; t++)
        for (int32_t i = 0; i < j->k; i++) {
            int64_t p = j->picks[t * j->k + i] - j->p0;
            if (p < 0 || p >= j->np) continue;
            float *a = j->acc + t * j->dim;
            const float *y = j->ys + p * j->dim;
            for (int32_t d = 0; d < j->dim; d++) a[d] += y[d];
        }
}

typedef struct {
    float *dst;
    const float *src;
    const int32_t *rows;
    int32_t dim;
} gather_job;

/* dst rows [b, e) = src rows rows[b..e) */
static void gather_range(void *ctx, int64_t b, int64_t e) {
    const gather_job *j = ctx;
    for (int64_t i = b; i < e; i++) memcpy(j->dst + i * j->dim, j->src + (int64_t)j->rows[i] * j->dim, (size_t)j->dim * sizeof *j->src);
}

typedef struct {
    const float *acc, *yss;
    float *y;
    int32_t dim;
} finish_job;

/* tokens [b, e): y = bf16(acc + yss) (yss NULL: no shared expert) */
static void finish_range(void *ctx, int64_t b, int64_t e) {
    const finish_job *j = ctx;
    for (int64_t i = b * j->dim; i < e * j->dim; i++) j->y[i] = bf16_round(j->yss ? j->acc[i] + j->yss[i] : j->acc[i]);
}

/* x [T][dim] -> y [T][dim], route_w [T][k], route_idx [T][k]. Experts run in consecutive groups
 * of at most max(T, 64) picks, so a decode step makes two pool jobs per layer and a prefill's
 * scratch stays a few activations' worth. */
void moe_forward(const dsv41_model *m, int32_t l, const float *x, int64_t T, float *y, float *route_w, int32_t *route_idx) {
    moe_layer(m, &m->layers[l], m->cfg.n_routed_experts, m->cfg.n_activated_experts, x, T, y, route_w, route_idx);
}

void moe_layer(const dsv41_model *m, const layer_weights *L, int32_t E, int32_t k, const float *x, int64_t T, float *y,
               float *route_w, int32_t *route_idx) {
    const config *c = &m->cfg;
    int32_t dim = c->dim;
    int64_t n = T * k, cap = T > 64 ? T : 64;
    scratch_mark mark = scratch_begin();
    float *acc = scratch_f32(T * dim), *scores = scratch_f32(T * E), *rw = scratch_f32(n);
    int32_t *rows = scratch_i32(n);
    int64_t *first = scratch_bytes((size_t)(E + 1) * sizeof *first); /* expert e: picks [first[e], first[e+1]) */
    collective_project(m, &L->gate, x, T, scores);
    route_job rj = {c, E, k, L->gate_bias, scores, route_w, route_idx};
    pool_run(T, 16, route_range, &rj);
    /* the picks grouped by expert, tokens in order within each: a counting sort */
    int64_t *fill = scratch_bytes((size_t)E * sizeof *fill);
    memset(first, 0, (size_t)(E + 1) * sizeof *first);
    for (int64_t i = 0; i < n; i++) first[route_idx[i] + 1]++;
    for (int32_t e = 0; e < E; e++) {
        first[e + 1] += first[e];
        fill[e] = first[e];
    }
    int64_t *picks = scratch_bytes((size_t)n * sizeof *picks); /* [T][k] positions, ascending per token */
    for (int64_t i = 0; i < n; i++) {
        int64_t p = fill[route_idx[i]]++;
        rows[p] = (int32_t)(i / k);
        rw[p] = route_w[i];
    }
    int32_t *taken = scratch_i32(T); /* picks of each token placed so far */
    memset(taken, 0, (size_t)T * sizeof *taken);
    for (int64_t p = 0; p < n; p++) picks[rows[p] * k + taken[rows[p]]++] = p;
    int shared = c->n_shared_experts > 0;
    float *xs = scratch_f32(cap * dim), *ys = scratch_f32(cap * dim), *yss = scratch_f32(shared ? T * dim : 0);
    memset(acc, 0, (size_t)(T * dim) * sizeof *acc);
    /* in f32, in increasing expert id, then the shared expert, rounded once */
    for (int32_t e0 = 0, e1; e0 < E; e0 = e1) {
        for (e1 = e0 + 1; e1 < E && first[e1 + 1] - first[e0] <= cap; e1++) {}
        int64_t p0 = first[e0], np = first[e1] - p0;
        gather_job gj = {xs, x, rows + p0, dim};
        pool_run(np, 64, gather_range, &gj);
        run_experts(m, L, E, first, e0, e1, xs, rw + p0, x, T, shared && e1 == E, ys, yss);
        if (m->part.n_ranks > 1) collective_share_picks(m, E, first, e0, e1, ys); /* the other ranks' experts */
        scatter_job sj = {acc, ys, picks, p0, np, k, dim};
        pool_run(T, 16, scatter_range, &sj);
    }
    finish_job fj = {acc, shared ? yss : NULL, y, dim};
    pool_run(T, 16, finish_range, &fj);
    scratch_end(mark);
}
