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

#include "model.h"
#include "numerics.h"
#include "scratch.h"

static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* scores [E] (raw gate dot products) -> weights [k], ids [k] in descending order of
 * score + bias, the lower id first on ties */
static void route(const config *c, const float *bias, float *s, float *weights, int32_t *ids) {
    int32_t E = c->n_routed_experts, k = c->n_activated_experts;
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

/* x [n][dim], rw [n] (NULL: 1) -> y [n][dim] = w2(bf16(silu(min(w1 x, lim)) * clamp(w3 x, +-lim) * rw)) */
static void expert(const config *c, const weight *w1, const weight *w2, const weight *w3, const float *x, int64_t n,
                   const float *rw, float *y) {
    int64_t inter = w1->rows;
    scratch_mark mark = scratch_begin();
    float *g = scratch_f32(n * inter), *u = scratch_f32(n * inter);
    linear(w1, x, n, g);
    linear(w3, x, n, u);
    float lim = c->swiglu_limit;
    for (int64_t t = 0; t < n; t++)
        for (int64_t i = 0; i < inter; i++) {
            float gi = g[t * inter + i], ui = u[t * inter + i];
            if (lim > 0.0f) {
                ui = ui < -lim ? -lim : ui > lim ? lim : ui;
                gi = gi > lim ? lim : gi;
            }
            float h = gi / (1.0f + expf(-gi)) * ui;
            g[t * inter + i] = bf16_round(rw ? h * rw[t] : h);
        }
    linear(w2, g, n, y);
    scratch_end(mark);
}

/* x [T][dim] -> y [T][dim], route_w [T][k], route_idx [T][k] */
void moe(const dsv41_model *m, int32_t l, const float *x, int64_t T, float *y, float *route_w, int32_t *route_idx) {
    const config *c = &m->cfg;
    const layer_weights *L = &m->layers[l];
    int32_t k = c->n_activated_experts, E = c->n_routed_experts, dim = c->dim;
    scratch_mark mark = scratch_begin();
    float *acc = scratch_f32(T * dim), *scores = scratch_f32(T * E), *xs = scratch_f32(T * dim);
    float *ys = scratch_f32(T * dim), *rw = scratch_f32(T);
    int32_t *rows = scratch_i32(T);
    linear(&L->gate, x, T, scores);
    for (int64_t t = 0; t < T; t++) route(c, L->gate_bias, scores + t * E, route_w + t * k, route_idx + t * k);
    memset(acc, 0, (size_t)(T * dim) * sizeof *acc);
    for (int32_t e = 0; e < E; e++) {
        int64_t n = 0;
        for (int64_t t = 0; t < T; t++)
            for (int32_t j = 0; j < k; j++)
                if (route_idx[t * k + j] == e) {
                    rows[n] = (int32_t)t;
                    rw[n] = route_w[t * k + j];
                    memcpy(xs + n * dim, x + t * dim, (size_t)dim * sizeof *x);
                    n++;
                }
        if (n == 0) continue;
        expert(c, &L->w1[e], &L->w2[e], &L->w3[e], xs, n, rw, ys);
        for (int64_t i = 0; i < n; i++)
            for (int32_t d = 0; d < dim; d++) acc[rows[i] * dim + d] += ys[i * dim + d];
    }
    if (c->n_shared_experts > 0) {
        expert(c, &L->sw1, &L->sw2, &L->sw3, x, T, NULL, ys);
        for (int64_t i = 0; i < T * dim; i++) acc[i] += ys[i];
    }
    for (int64_t i = 0; i < T * dim; i++) y[i] = bf16_round(acc[i]);
    scratch_end(mark);
}
