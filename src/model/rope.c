/* rope.c - rotary position embeddings: the tables, and rotating rows by them.
 *
 * Two sets of frequencies per model, made once at load: plain RoPE (rope_theta) for the layers
 * without compression, and YaRN-scaled RoPE (compress_rope_theta, rope_factor) for the
 * compressed ones, whose compressor and indexer rotate by it too. The angles are formed per
 * row, in f32 as the reference forms them, instead of a table per position: at the release's
 * 1,048,576 positions the tables would take 512 MB. Attention, the compressor and the indexer
 * all rotate through here, so none of them reaches into another for it. */
#include <math.h>

#include "model.h"
#include "numerics.h"
#include "pool.h"

static int rope_table_init(dsv41_model *m, rope_table *rt, float base, int yarn) {
    const config *c = &m->cfg;
    int32_t half = c->rope_head_dim / 2;
    if (half > ROPE_MAX_HALF) return set_error("config: rope_head_dim too large");
    float *freq = rt->freq = model_alloc(m, (size_t)(half > 0 ? half : 1) * sizeof *freq);
    if (!freq) return set_error("out of memory");
    for (int32_t k = 0; k < half; k++) freq[k] = 1.0f / powf(base, (float)(2 * k) / (float)c->rope_head_dim);
    if (yarn) {
        /* YaRN: pairs that rotate faster than beta_fast turns over original_seq_len keep their
         * frequency, slower than beta_slow are divided by rope_factor, a linear ramp between */
        const double two_pi = 6.283185307179586;
        double dim = c->rope_head_dim, orig = c->original_seq_len, lb = log((double)base);
        double lo = floor(dim * log(orig / ((double)c->beta_fast * two_pi)) / (2.0 * lb));
        double hi = ceil(dim * log(orig / ((double)c->beta_slow * two_pi)) / (2.0 * lb));
        float low = (float)(lo < 0 ? 0 : lo), high = (float)(hi > dim - 1 ? dim - 1 : hi);
        for (int32_t k = 0; k < half; k++) {
            float ramp = ((float)k - low) / fmaxf(high - low, 1e-3f);
            ramp = ramp < 0.0f ? 0.0f : ramp > 1.0f ? 1.0f : ramp;
            float smooth = 1.0f - ramp;
            freq[k] = freq[k] / c->rope_factor * (1.0f - smooth) + freq[k] * smooth;
        }
    }
    return 0;
}

int rope_init(dsv41_model *m) {
    const config *c = &m->cfg;
    return rope_table_init(m, &m->rope_plain, c->rope_theta, 0) ||
           rope_table_init(m, &m->rope_yarn, c->compress_rope_theta, c->original_seq_len > 0);
}

void rope_angles(const rope_table *rt, int32_t half, int64_t pos, float *cs, float *sn) {
    for (int32_t k = 0; k < half; k++) {
        float a = (float)pos * rt->freq[k]; /* exact in the position below 2^24 */
        cs[k] = cosf(a);
        sn[k] = sinf(a);
    }
}

/* x [row_len]: rotate the last rope_dim values as interleaved (re, im) pairs by the angles cs,
 * sn (or their conjugate), in f32, each result rounded to bf16 */
static void rotate(float *x, int64_t row_len, int32_t rope_dim, const float *cs, const float *sn, int inverse) {
    int32_t half = rope_dim / 2;
    float *tail = x + row_len - rope_dim;
    for (int32_t k = 0; k < half; k++) {
        float c = cs[k], s = inverse ? -sn[k] : sn[k], a = tail[2 * k], b = tail[2 * k + 1];
        tail[2 * k] = bf16_round(a * c - b * s);
        tail[2 * k + 1] = bf16_round(a * s + b * c);
    }
}

void rope_apply(const rope_table *rt, float *x, int64_t row_len, int32_t rope_dim, int64_t pos, int inverse) {
    float cs[ROPE_MAX_HALF], sn[ROPE_MAX_HALF];
    rope_angles(rt, rope_dim / 2, pos, cs, sn);
    rotate(x, row_len, rope_dim, cs, sn, inverse);
}

typedef struct {
    const rope_table *rt;
    float *x;
    int32_t per, rope_dim, inverse;
    int64_t row_len, pos0;
} rope_job;

/* rows [b, e): the angles once per position, for the `per` rows that share it */
static void rope_range(void *ctx, int64_t b, int64_t e) {
    const rope_job *j = ctx;
    float cs[ROPE_MAX_HALF], sn[ROPE_MAX_HALF];
    for (int64_t r = b, at = -1; r < e; r++) {
        if (r / j->per != at) rope_angles(j->rt, j->rope_dim / 2, j->pos0 + (at = r / j->per), cs, sn);
        rotate(j->x + r * j->row_len, j->row_len, j->rope_dim, cs, sn, j->inverse);
    }
}

void rope_rows(const rope_table *rt, float *x, int64_t n, int32_t per, int64_t row_len, int32_t rope_dim, int64_t pos0,
               int inverse) {
    rope_job j = {rt, x, per, rope_dim, inverse, row_len, pos0};
    pool_run(n, 128, rope_range, &j);
}
