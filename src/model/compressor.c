/* compressor.c - pools the KV of `ratio` consecutive tokens into one latent (kv sources only).
 *
 * Ratio 1 is a plain projection and norm, one latent per token. Ratio 2 projects with f32
 * weights, softmaxes a learned gate over the group's members per channel and takes the
 * weighted sum. Groups close at positions ratio-1, 2*ratio-1, ...; the members of an open group
 * wait in the tail state across calls. The latent returned here is not yet rotated or
 * quantized: the indexer consumes it first. */
#include <math.h>
#include <string.h>

#include "model.h"
#include "numerics.h"
#include "scratch.h"

/* kv [ratio][hd], score [ratio][hd] -> out [hd]: per channel, softmax over the members */
static void pool_group(const float *kv, const float *score, int32_t ratio, int32_t hd, float *out) {
    for (int32_t d = 0; d < hd; d++) {
        float mx = -INFINITY, sum = 0.0f, acc = 0.0f, e[64];
        for (int32_t r = 0; r < ratio; r++) mx = fmaxf(mx, score[r * hd + d]);
        for (int32_t r = 0; r < ratio; r++) { e[r] = expf(score[r * hd + d] - mx); sum += e[r]; }
        for (int32_t r = 0; r < ratio; r++) acc += kv[r * hd + d] * (e[r] / sum);
        out[d] = bf16_round(acc);
    }
}

/* kv [T][hd] (comp_wkv x), score [T][hd] (comp_wgate x; ratio > 1) -> latent [n][hd] (bf16,
 * pre-RoPE); returns n, the groups closed by this call. The projections come computed: a batch
 * of sessions runs them once over all its rows. */
int64_t compressor_step(dsv41_session *s, int32_t l, const float *kv, const float *score, int64_t T, float *latent) {
    const config *c = &s->m->cfg;
    const layer_weights *L = &s->m->layers[l];
    layer_state *st = &s->layers[l];
    int32_t ratio = c->compress_ratio[l], hd = c->head_dim, pos = s->pos;
    scratch_mark mark = scratch_begin();
    float *pooled = scratch_f32(T * hd);
    int64_t n = 0;
    if (ratio == 1) {
        memcpy(pooled, kv, (size_t)(T * hd) * sizeof *kv);
        n = T;
    } else {
        size_t row = (size_t)hd * sizeof(float);
        if (pos == 0) {
            int64_t rem = T % ratio, cut = T - rem;
            memcpy(st->kv_state, kv + cut * hd, (size_t)rem * row);
            memcpy(st->score_state, score + cut * hd, (size_t)rem * row);
            for (n = 0; n < cut / ratio; n++)
                pool_group(kv + n * ratio * hd, score + n * ratio * hd, ratio, hd, pooled + n * hd);
        } else {
            memcpy(st->kv_state + (pos % ratio) * hd, kv, row);
            memcpy(st->score_state + (pos % ratio) * hd, score, row);
            if ((pos + 1) % ratio == 0) {
                pool_group(st->kv_state, st->score_state, ratio, hd, pooled);
                n = 1;
            }
        }
    }
    rms_norm(pooled, L->comp_norm, n, hd, c->norm_eps, latent);
    scratch_end(mark);
    return n;
}
