/* moe.c - the routed mixture of experts with one shared expert.
 *
 * The gate scores experts with sqrt(softplus(x . w_e)); a per-expert bias only changes which
 * experts are picked, never their weights. The picked scores are normalized and scaled by
 * route_scale. Each expert is a SwiGLU whose up projection is clamped to +-swiglu_limit and
 * whose gate is clamped above only; the routing weight multiplies before the down projection.
 * Outputs are summed in f32 in increasing expert id, then the shared expert, then rounded once. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "numerics.h"
#include "scratch.h"

static float softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* x [dim] -> weights [k], ids [k] in descending order of score + bias (lower id first on ties) */
static void route(const dsv41_model *m, int32_t l, const float *x, float *weights, int32_t *ids) {
    const config *c = &m->cfg;
    const layer_weights *L = &m->layers[l];
    int32_t E = c->n_routed_experts, k = c->n_activated_experts;
    scratch_mark mark = scratch_begin();
    float *s = scratch_f32(E);
    uint8_t *taken = scratch_bytes((size_t)E);
    memset(taken, 0, (size_t)E);
    for (int32_t e = 0; e < E; e++) s[e] = sqrtf(softplus(weight_dot(&L->gate, e, x) / c->gate_temp));
    float sum = 0.0f;
    for (int32_t j = 0; j < k; j++) {
        int32_t best = -1;
        for (int32_t e = 0; e < E; e++)
            if (!taken[e] && (best < 0 || s[e] + L->gate_bias[e] > s[best] + L->gate_bias[best])) best = e;
        taken[best] = 1;
        ids[j] = best;
        weights[j] = s[best];
        sum += s[best];
    }
    if (c->norm_topk_prob && k > 1)
        for (int32_t j = 0; j < k; j++) weights[j] /= sum + 1e-20f;
    for (int32_t j = 0; j < k; j++) weights[j] *= c->route_scale;
    scratch_end(mark);
}

/* x [dim] -> acc [dim] += w2(bf16(silu(min(w1 x, lim)) * clamp(w3 x, +-lim) * rw)) */
static void expert_add(const config *c, const weight *w1, const weight *w2, const weight *w3, const float *x, float rw,
                       float *acc) {
    int64_t inter = w1->rows;
    scratch_mark mark = scratch_begin();
    float *g = scratch_f32(inter), *u = scratch_f32(inter), *y = scratch_f32(c->dim);
    linear(w1, x, 1, g);
    linear(w3, x, 1, u);
    float lim = c->swiglu_limit;
    for (int64_t i = 0; i < inter; i++) {
        float gi = g[i], ui = u[i];
        if (lim > 0.0f) {
            ui = ui < -lim ? -lim : ui > lim ? lim : ui;
            gi = gi > lim ? lim : gi;
        }
        g[i] = bf16_round(gi / (1.0f + expf(-gi)) * ui * rw);
    }
    linear(w2, g, 1, y);
    for (int32_t d = 0; d < c->dim; d++) acc[d] += y[d];
    scratch_end(mark);
}

static int cmp_i32(const void *a, const void *b) { return *(const int32_t *)a - *(const int32_t *)b; }

/* x [T][dim] -> y [T][dim], route_w [T][k], route_idx [T][k] */
void moe(const dsv41_model *m, int32_t l, const float *x, int64_t T, float *y, float *route_w, int32_t *route_idx) {
    const config *c = &m->cfg;
    const layer_weights *L = &m->layers[l];
    int32_t k = c->n_activated_experts;
    scratch_mark mark = scratch_begin();
    float *acc = scratch_f32(c->dim);
    int32_t *order = scratch_i32(k);
    for (int64_t t = 0; t < T; t++) {
        const float *xt = x + t * c->dim;
        float *w = route_w + t * k;
        int32_t *ids = route_idx + t * k;
        route(m, l, xt, w, ids);
        memcpy(order, ids, (size_t)k * sizeof *ids);
        qsort(order, (size_t)k, sizeof *order, cmp_i32);
        memset(acc, 0, (size_t)c->dim * sizeof *acc);
        for (int32_t j = 0; j < k; j++) {
            int32_t e = order[j], slot = 0;
            while (ids[slot] != e) slot++;
            expert_add(c, &L->w1[e], &L->w2[e], &L->w3[e], xt, w[slot], acc);
        }
        if (c->n_shared_experts > 0) expert_add(c, &L->sw1, &L->sw2, &L->sw3, xt, 1.0f, acc);
        for (int32_t d = 0; d < c->dim; d++) y[t * c->dim + d] = bf16_round(acc[d]);
    }
    scratch_end(mark);
}
