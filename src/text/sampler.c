/* sampler.c - picking the next token from the logits.
 *
 * Greedy when the temperature is 0. Otherwise, by definition: order the vocabulary by logit
 * (the lower id first on a tie), keep the top_k largest, soften them by the temperature into
 * probabilities, keep the shortest prefix of that order whose mass reaches top_p, drop tokens
 * below min_p times the most likely one, and draw from what is left with a seeded generator, so
 * a seed makes a run repeatable.
 *
 * Sorting 129,280 logits per token costs more than a forward step of a small model, so nothing
 * is sorted. Every filter keeps a prefix of the order, and a prefix is a set above a threshold:
 *   - top-k: a quickselect finds the k-th token; the tokens up to it in the order are kept;
 *   - min-p: a weight at or above min_p (the top token's weight is exactly 1);
 *   - top-p: the tokens go into NB buckets of equal logit width, the top one first (a coarser
 *     form of the order), each bucket adding up its weight; the buckets before the one where
 *     the mass reaches top_p are kept whole, and a quickselect that carries the mass of the side
 *     it discards finds the end of the prefix inside that one bucket.
 * That is O(vocab) per token. The kept set is the definition's; the draw walks it bucket by
 * bucket, which gives each kept token the same probability as a sorted walk (the same seed
 * picks other tokens than a sorted walk would). All scratch lives in the sampler, so samplers
 * of different sessions run concurrently. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "dsv41.h"
#include "error.h"
#include "numerics.h"
#include "sampler.h"

enum {
    NB = 4096,       /* top-p buckets */
    OUT = NB,        /* the bucket of a token a filter drops */
    MAX_ROUNDS = 48, /* quickselect rounds before the rest of a range is simply sorted */
    SMALL = 16,      /* a range this short is sorted */
    BLOCK = 64,      /* logits weighed per vector loop */
};

typedef struct {
    float logit; /* the ordering key, with id breaking ties */
    int32_t id;  /* token id */
    float w;     /* exp((logit - max) / temperature) */
} cand;

struct dsv41_sampler {
    dsv41_sampler_params p;
    int32_t vocab;
    uint64_t state;   /* splitmix64 stream */
    float *w;         /* [vocab] weight of each token */
    uint16_t *bucket; /* [vocab] top-p bucket of each token, OUT when dropped */
    double *mass;     /* [NB + 1] weight of the tokens in each bucket, then of those min-p drops */
    cand *c;          /* [vocab] quickselect scratch */
};

void dsv41_sampler_free(dsv41_sampler *s) {
    if (!s) return;
    free(s->w);
    free(s->bucket);
    free(s->mass);
    free(s->c);
    free(s);
}

int32_t dsv41_sample_pick(void *sampler, float *logits, const int32_t *history, int32_t n, int *last) {
    dsv41_sampler *s = sampler;
    (void)last;
    return dsv41_apply_penalties(&s->p, history, n, logits, s->vocab) ? -1 : dsv41_sample(s, logits);
}

uint64_t dsv41_sampler_state(const dsv41_sampler *s) { return s->state; }
int32_t sampler_vocab(const dsv41_sampler *s) { return s->vocab; }
const dsv41_sampler_params *sampler_params(const dsv41_sampler *s) { return &s->p; }
void dsv41_sampler_set_state(dsv41_sampler *s, uint64_t state) { s->state = state; }

dsv41_sampler_params dsv41_sampler_params_default(void) {
    return (dsv41_sampler_params){.temperature = 0.6f, .top_k = 0, .top_p = 0.95f, .min_p = 0.0f, .seed = 0,
                                  .repeat_penalty = 1.0f, .presence_penalty = 0.0f, .frequency_penalty = 0.0f,
                                  .penalty_last_n = 64};
}

dsv41_sampler *dsv41_sampler_new(const dsv41_sampler_params *p, int32_t vocab) {
    if (!(p->temperature >= 0) || !(p->top_p > 0 && p->top_p <= 1) || !(p->min_p >= 0 && p->min_p <= 1) || p->top_k < 0) {
        set_error("sampler: temperature >= 0, 0 < top_p <= 1, 0 <= min_p <= 1 and top_k >= 0 are required");
        return NULL;
    }
    if (vocab < 1) {
        set_error("sampler: the vocabulary is empty");
        return NULL;
    }
    dsv41_sampler *s = calloc(1, sizeof *s);
    if (s) {
        s->w = malloc((size_t)vocab * sizeof *s->w);
        s->bucket = malloc((size_t)vocab * sizeof *s->bucket);
        s->mass = malloc((NB + 1) * sizeof *s->mass);
        s->c = malloc((size_t)vocab * sizeof *s->c);
    }
    if (!s || !s->w || !s->bucket || !s->mass || !s->c) {
        dsv41_sampler_free(s);
        set_error("out of memory");
        return NULL;
    }
    s->p = *p;
    s->vocab = vocab;
    s->state = p->seed;
    return s;
}

static double uniform(dsv41_sampler *s) {
    s->state += 0x9E3779B97F4A7C15ULL;
    return (double)(splitmix64(s->state - 0x9E3779B97F4A7C15ULL) >> 11) * 0x1p-53;
}

/* a comes before b in the definition's order: the larger logit, the lower id on a tie */
static int before(const cand *a, const cand *b) { return a->logit > b->logit || (a->logit == b->logit && a->id < b->id); }

static int by_order(const void *a, const void *b) { return before(a, b) ? -1 : before(b, a) ? 1 : 0; }

static void swap(cand *a, cand *b) {
    cand t = *a;
    *a = *b;
    *b = t;
}

/* Partitions c[lo, hi) (hi - lo >= 3) around the median of its first, middle and last items:
 * returns m with every item before the pivot in c[lo, m), the pivot at c[m], the rest after.
 * *mass gets the sum of w over c[lo, m). */
static int32_t partition(cand *c, int32_t lo, int32_t hi, double *mass) {
    int32_t mid = lo + (hi - lo) / 2, last = hi - 1;
    if (before(&c[mid], &c[lo])) swap(&c[mid], &c[lo]);
    if (before(&c[last], &c[lo])) swap(&c[last], &c[lo]);
    if (before(&c[mid], &c[last])) swap(&c[mid], &c[last]); /* the median now sits at last */
    cand pivot = c[last];
    int32_t store = lo;
    double sum = 0.0;
    for (int32_t i = lo; i < last; i++)
        if (before(&c[i], &pivot)) {
            sum += c[i].w;
            swap(&c[i], &c[store++]);
        }
    swap(&c[store], &c[last]);
    *mass = sum;
    return store;
}

/* The k-th item (1-based) of c[0, n) in the order; c is reordered. */
static cand select_kth(cand *c, int32_t n, int32_t k) {
    int32_t lo = 0, hi = n;
    double unused;
    for (int round = 0; hi - lo > SMALL && round < MAX_ROUNDS; round++) {
        int32_t m = partition(c, lo, hi, &unused);
        if (m + 1 == k) return c[m];
        if (k <= m) hi = m;
        else lo = m + 1;
    }
    qsort(c + lo, (size_t)(hi - lo), sizeof *c, by_order);
    return c[k - 1];
}

/* The length of the shortest prefix of c[0, n) in the order whose w adds up to target (n when
 * none does), with that prefix moved to the front of c. */
static int32_t select_mass(cand *c, int32_t n, double target) {
    int32_t lo = 0, hi = n; /* c[0, lo) is inside the prefix with mass acc; its end is in (lo, hi] */
    double acc = 0.0, upper;
    for (int round = 0; hi - lo > SMALL && round < MAX_ROUNDS; round++) {
        int32_t m = partition(c, lo, hi, &upper);
        if (acc + upper >= target) {
            hi = m;
            continue;
        }
        acc += upper + c[m].w;
        lo = m + 1;
        if (acc >= target) return lo;
    }
    qsort(c + lo, (size_t)(hi - lo), sizeof *c, by_order);
    while (lo < hi && acc < target) acc += c[lo++].w;
    return lo;
}

/* w[i] = exp((l[i] - top) / t) for a block of logits at or below top: exp as 2^n * p(r), n the
 * nearest integer to x / ln 2 and r what is left (|r| <= ln 2 / 2, taken off in two parts so
 * that it is exact), p the degree-7 polynomial of Cephes' expf (within 2 ulp). Plain float
 * operations in a loop of a fixed count, which the compiler turns into vector code; the bits do
 * not depend on the vector width, the kernel set or the C library. An x below -87 (where
 * 2^n would leave the normal range) gives 0: its share of a sum that holds the top token's 1
 * is under 2^-125. */
static void weigh(const float *l, float top, float t, float *w) {
    for (int32_t i = 0; i < BLOCK; i++) {
        float x = (l[i] - top) / t, xc = x > -87.0f ? x : -87.0f;
        float n = (xc * 1.44269504f + 12582912.0f) - 12582912.0f; /* 1.5 * 2^23 rounds to an integer */
        float r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
        float p = 1.9875691500e-4f;
        p = p * r + 1.3981999507e-3f;
        p = p * r + 8.3334519073e-3f;
        p = p * r + 4.1665795894e-2f;
        p = p * r + 1.6666665459e-1f;
        p = p * r + 5.0000001201e-1f;
        p = p * (r * r) + r + 1.0f;
        uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;
        float scale;
        memcpy(&scale, &bits, sizeof scale);
        w[i] = x > -87.0f ? p * scale : 0.0f;
    }
}

int32_t dsv41_sample(dsv41_sampler *s, const float *logits) {
    int32_t V = s->vocab;
    if (s->p.temperature == 0.0f) return argmax_f32(logits, V);
    /* the range of the logits in four independent lanes (a max is exact in any order); a
     * masked logit (-INFINITY, a constraint's) is left out of the low end, where it would
     * stretch the top-p buckets to infinity and put every token into the first */
    float top4[4] = {logits[0], logits[0], logits[0], logits[0]}, low4[4] = {INFINITY, INFINITY, INFINITY, INFINITY};
    for (int32_t i = 0; i < V; i += 4)
        for (int32_t j = 0; j < 4 && i + j < V; j++) {
            top4[j] = logits[i + j] > top4[j] ? logits[i + j] : top4[j];
            low4[j] = logits[i + j] < low4[j] && logits[i + j] != -INFINITY ? logits[i + j] : low4[j];
        }
    float top = top4[0], low = low4[0];
    for (int j = 1; j < 4; j++) {
        top = top4[j] > top ? top4[j] : top;
        low = low4[j] < low ? low4[j] : low;
    }
    if (low > top) low = top; /* every logit masked */
    /* top-k: the k-th token of the order; a token is kept when it is not after it */
    int topk = s->p.top_k > 0 && s->p.top_k < V;
    cand kth = {0};
    if (topk) {
        for (int32_t i = 0; i < V; i++) s->c[i] = (cand){logits[i], i, 0.0f};
        kth = select_kth(s->c, V, s->p.top_k);
    }
    /* The weights, and the mass of each bucket: buckets split [low, top] evenly, bucket 0
     * holding the top, and mass[OUT] gathers what min-p drops of the top-k set (the
     * normalization is over all of it). A weight below expf's smallest denormal is the 0 expf
     * would give. The first top token is found on the way: it is the greedy choice, and the
     * last resort when rounding leaves a draw past every kept weight. */
    float t = s->p.temperature, range = top - low;
    float scale = range > 0 && isfinite(range) ? (float)(NB - 1) / range : 0.0f;
    memset(s->mass, 0, (NB + 1) * sizeof *s->mass);
    int32_t full = V - V % BLOCK;
    for (int32_t i = 0; i < full; i += BLOCK) weigh(logits + i, top, t, s->w + i);
    if (full < V) {
        float l[BLOCK], w[BLOCK];
        for (int32_t i = 0; i < BLOCK; i++) l[i] = full + i < V ? logits[full + i] : top;
        weigh(l, top, t, w);
        memcpy(s->w + full, w, (size_t)(V - full) * sizeof *w);
    }
    int32_t best = -1;
    for (int32_t i = 0; i < V; i++) {
        cand me = {logits[i], i, 0.0f};
        if (best < 0 && logits[i] == top) best = i;
        s->bucket[i] = OUT;
        if (topk && before(&kth, &me)) continue;
        /* a masked logit (a constraint's -INFINITY) has probability 0: it stays out of the top-p
         * buckets, where a sparse mask would otherwise put the whole vocabulary into the last
         * one (one slow select a token) and a rounding fallback could return it */
        if (logits[i] == -INFINITY) continue;
        float d = (top - logits[i]) * scale;
        uint16_t b = s->w[i] < s->p.min_p ? OUT : d < (float)(NB - 1) ? (uint16_t)d : NB - 1;
        s->bucket[i] = b;
        s->mass[b] += s->w[i];
    }
    if (best < 0) best = 0; /* NaN logits: no token equals the top */
    double sum = 0.0;
    for (int32_t b = 0; b <= NB; b++) sum += s->mass[b];
    /* top-p: the bucket where the mass reaches it, then the prefix's end inside that bucket */
    double target = s->p.top_p < 1 ? s->p.top_p * sum : INFINITY, acc = 0.0;
    int32_t edge = 0;
    while (edge < NB && acc + s->mass[edge] < target) acc += s->mass[edge++];
    int32_t n_edge = 0, keep = 0;
    if (edge < NB) {
        for (int32_t i = 0; i < V; i++)
            if (s->bucket[i] == edge) s->c[n_edge++] = (cand){logits[i], i, s->w[i]};
        keep = select_mass(s->c, n_edge, target - acc);
    }
    double tail = 0.0;
    for (int32_t i = 0; i < keep; i++) tail += s->c[i].w;
    if (acc + tail <= 0) return best; /* nothing with weight: only the top token is left */
    double u = uniform(s) * (acc + tail);
    if (u >= acc) {
        u -= acc;
        for (int32_t i = 0; i < keep; i++) {
            u -= s->c[i].w;
            if (u < 0) return s->c[i].id;
        }
        return s->c[keep - 1].id;
    }
    int32_t b = 0;
    while (b + 1 < edge && u >= s->mass[b]) u -= s->mass[b++];
    int32_t last = best;
    for (int32_t i = 0; i < V; i++)
        if (s->bucket[i] == b) {
            last = i;
            u -= s->w[i];
            if (u < 0) return i;
        }
    return last;
}
