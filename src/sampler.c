/* sampler.c - picking the next token from the logits.
 *
 * Greedy when the temperature is 0. Otherwise: keep the top_k largest logits, soften by the
 * temperature into probabilities, keep the smallest set whose mass reaches top_p, drop tokens
 * below min_p times the most likely one, and draw from what is left with a seeded generator,
 * so a seed makes a run repeatable. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "numerics.h"

struct dsv41_sampler {
    dsv41_sampler_params p;
    int32_t vocab;
    uint64_t state;     /* splitmix64 stream */
    int32_t *idx;       /* [vocab] candidate ids, sorted by logit */
    float *prob;        /* [vocab] */
};

dsv41_sampler *dsv41_sampler_new(const dsv41_sampler_params *p, int32_t vocab) {
    if (p->temperature < 0 || p->top_p <= 0 || p->top_p > 1 || p->min_p < 0 || p->min_p > 1 || p->top_k < 0) {
        set_error("sampler: temperature >= 0, 0 < top_p <= 1, 0 <= min_p <= 1 and top_k >= 0 are required");
        return NULL;
    }
    dsv41_sampler *s = calloc(1, sizeof *s);
    if (s) {
        s->idx = malloc((size_t)vocab * sizeof *s->idx);
        s->prob = malloc((size_t)vocab * sizeof *s->prob);
    }
    if (!s || !s->idx || !s->prob) {
        dsv41_sampler_free(s);
        set_error("out of memory");
        return NULL;
    }
    s->p = *p;
    s->vocab = vocab;
    s->state = p->seed;
    return s;
}

void dsv41_sampler_free(dsv41_sampler *s) {
    if (!s) return;
    free(s->idx);
    free(s->prob);
    free(s);
}

static double uniform(dsv41_sampler *s) {
    s->state += 0x9E3779B97F4A7C15ULL;
    return (double)(splitmix64(s->state - 0x9E3779B97F4A7C15ULL) >> 11) * 0x1p-53;
}

static const float *sort_logits;
static int by_logit(const void *a, const void *b) {
    float x = sort_logits[*(const int32_t *)a], y = sort_logits[*(const int32_t *)b];
    if (x != y) return x > y ? -1 : 1;
    return *(const int32_t *)a - *(const int32_t *)b;
}

int32_t dsv41_sample(dsv41_sampler *s, const float *logits) {
    int32_t V = s->vocab, best = 0;
    for (int32_t i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i;
    if (s->p.temperature == 0.0f) return best;
    for (int32_t i = 0; i < V; i++) s->idx[i] = i;
    sort_logits = logits;
    qsort(s->idx, (size_t)V, sizeof *s->idx, by_logit);
    int32_t n = s->p.top_k > 0 && s->p.top_k < V ? s->p.top_k : V;
    double sum = 0.0;
    for (int32_t i = 0; i < n; i++) {
        s->prob[i] = expf((logits[s->idx[i]] - logits[s->idx[0]]) / s->p.temperature);
        sum += s->prob[i];
    }
    double mass = 0.0, floor = s->p.min_p * s->prob[0] / sum;
    int32_t keep = 0;
    while (keep < n && (keep == 0 || (mass < s->p.top_p && s->prob[keep] / sum >= floor))) mass += s->prob[keep++] / sum;
    double total = 0.0;
    for (int32_t i = 0; i < keep; i++) total += s->prob[i];
    double u = uniform(s) * total;
    for (int32_t i = 0; i < keep; i++) {
        u -= s->prob[i];
        if (u < 0) return s->idx[i];
    }
    return s->idx[keep - 1];
}
