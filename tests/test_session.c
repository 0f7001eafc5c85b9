/* test_session.c - sessions that append chunks after the prefill, and the sampler.
 *
 * The golden's decode regimes are one-token calls; appending both tokens as one chunk must give
 * the same state: the last position's captures pass the decode13 bars and the first position's
 * logits the decode12 bars. */
#include <math.h>
#include <string.h>

#include "golden.h"
#include "testing.h"

static void test_chunked_append(const dsv41_golden *g, const dsv41_model *m) {
    const json *root = golden_root(g), *d12 = json_get(root, "decode12"), *d13 = json_get(root, "decode13");
    static const int32_t prompt[12] = {2, 17, 47, 13, 32, 59, 39, 29, 42, 31, 36, 6}, chunk[2] = {27, 8};
    dsv41_session *a = dsv41_session_new(m), *b = dsv41_session_new(m);
    dsv41_trace *tr = dsv41_trace_new();
    int32_t V = dsv41_model_vocab_size(m);
    float *logits = malloc((size_t)(2 * V) * sizeof *logits);
    CHECK(dsv41_session_forward(a, prompt, 12, NULL, NULL) == 0 && dsv41_session_forward(a, chunk, 2, NULL, tr) == 0,
          "prefill then a 2-token append");
    CHECK(dsv41_session_pos(a) == 14, "the append advanced the position to 14");
    /* decode13's shared.L2.candidates is the reference's slot as the first position left it
     * (the candidate source is layer 4); the engine drops it when that position's call ends and
     * the golden check compares it with what that call recorded (golden_check.c) */
    int32_t passed = 0, total = 0;
    for (size_t i = 0; i < d13->len; i++) {
        if (!strcmp(d13->keys[i], "shared.L2.candidates")) continue;
        const capture *c = trace_find(tr, d13->keys[i]);
        total++;
        if (c && golden_compare("append", d13->keys[i], &d13->items[i], c->v, c->ndim, c->shape, stderr) == 1) passed++;
    }
    CHECK(passed == total && total == 147, "the append's last position passes decode13: %d of %d captures", passed, total);
    CHECK(dsv41_session_forward(b, prompt, 12, NULL, NULL) == 0 && dsv41_session_forward_all(b, chunk, 2, logits) == 0,
          "the same append with every position's logits");
    double *first = malloc((size_t)V * sizeof *first);
    for (int32_t v = 0; v < V; v++) first[v] = logits[v];
    CHECK(golden_compare("append", "logits_full", json_get(d12, "logits_full"), first, 3, (int64_t[]){1, 1, V}, stderr) == 1,
          "the append's first position's logits pass decode12");
    int32_t too_long[64] = {0};
    CHECK(dsv41_session_forward(b, too_long, 64, NULL, NULL) != 0 && strstr(dsv41_error(), "context") != NULL,
          "an append past the context is refused: %s", dsv41_error());
    free(first);
    free(logits);
    dsv41_trace_free(tr);
    dsv41_session_free(a);
    dsv41_session_free(b);
}

static void test_sampler(void) {
    enum { V = 8, N = 20000 };
    float logits[V] = {1.0f, 3.0f, 2.0f, 2.9f, -1.0f, 0.5f, 3.0f, 0.0f};
    dsv41_sampler_params greedy = {.temperature = 0.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 1};
    dsv41_sampler *s = dsv41_sampler_new(&greedy, V);
    CHECK(s && dsv41_sample(s, logits) == 1, "greedy picks the largest logit, the lower id on a tie");
    dsv41_sampler_free(s);

    dsv41_sampler_params p = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 42};
    dsv41_sampler *a = dsv41_sampler_new(&p, V), *b = dsv41_sampler_new(&p, V);
    int same = 1, counts[V] = {0};
    for (int i = 0; i < N; i++) {
        int32_t x = dsv41_sample(a, logits);
        same &= x == dsv41_sample(b, logits);
        counts[x]++;
    }
    CHECK(same, "the same seed draws the same tokens");
    double z = 0;
    for (int i = 0; i < V; i++) z += exp(logits[i]);
    int close = 1;
    for (int i = 0; i < V; i++) {
        double want = N * exp(logits[i]) / z, sd = sqrt(want) + 1;
        close &= fabs(counts[i] - want) < 5 * sd;
    }
    CHECK(close, "temperature 1 draws follow the softmax");
    dsv41_sampler_free(a);
    dsv41_sampler_free(b);

    dsv41_sampler_params k2 = {.temperature = 1.0f, .top_k = 2, .top_p = 1.0f, .min_p = 0.0f, .seed = 7},
                         tp = {.temperature = 1.0f, .top_k = 0, .top_p = 0.5f, .min_p = 0.0f, .seed = 7},
                         mp = {.temperature = 1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.5f, .seed = 7};
    dsv41_sampler *sk = dsv41_sampler_new(&k2, V), *sp = dsv41_sampler_new(&tp, V), *sm = dsv41_sampler_new(&mp, V);
    int ok_k = 1, ok_p = 1, ok_m = 1;
    for (int i = 0; i < 2000; i++) {
        int32_t x = dsv41_sample(sk, logits), y = dsv41_sample(sp, logits), w = dsv41_sample(sm, logits);
        ok_k &= x == 1 || x == 6;                 /* the two largest (a tie at 3.0) */
        ok_p &= y == 1 || y == 6;                 /* 3.0, 3.0 already hold more than half the mass */
        ok_m &= w == 1 || w == 6 || w == 3;       /* within half of the top probability: e^-0.1 ok, e^-1 not */
    }
    CHECK(ok_k, "top-k 2 keeps the two largest");
    CHECK(ok_p, "top-p 0.5 keeps the smallest set holding half the mass");
    CHECK(ok_m, "min-p 0.5 drops tokens below half the top probability");
    dsv41_sampler_free(sk);
    dsv41_sampler_free(sp);
    dsv41_sampler_free(sm);
    dsv41_sampler_params bad = {.temperature = -1.0f, .top_k = 0, .top_p = 1.0f, .min_p = 0.0f, .seed = 0};
    CHECK(dsv41_sampler_new(&bad, V) == NULL, "a negative temperature is refused");
}

/* The definition by brute force: sort the whole vocabulary, apply top-k, top-p and min-p in
 * that order; returns how many of order[] are kept and fills prob[] (renormalized). */
static const float *ref_logits;
static int ref_order(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    if (ref_logits[x] != ref_logits[y]) return ref_logits[x] > ref_logits[y] ? -1 : 1;
    return x - y;
}
static int32_t ref_keep(const float *logits, int32_t V, const dsv41_sampler_params *p, int32_t *order, double *prob) {
    for (int32_t i = 0; i < V; i++) order[i] = i;
    ref_logits = logits;
    qsort(order, (size_t)V, sizeof *order, ref_order);
    int32_t n = p->top_k > 0 && p->top_k < V ? p->top_k : V, keep = 0;
    double sum = 0.0, mass = 0.0, total = 0.0;
    for (int32_t i = 0; i < n; i++) sum += prob[i] = exp((logits[order[i]] - logits[order[0]]) / p->temperature);
    while (keep < n && (keep == 0 || (mass < p->top_p && prob[keep] >= p->min_p))) mass += prob[keep++] / sum;
    for (int32_t i = 0; i < keep; i++) total += prob[i];
    for (int32_t i = 0; i < keep; i++) prob[i] /= total;
    return keep;
}

/* At vocabulary scale with many tied logits (values on a coarse grid, as bf16 logits are): every
 * draw is in the definition's kept set, and each of the most likely tokens is drawn as often as
 * its probability says. */
static void test_sampler_vocab(void) {
    enum { V = 129280, N = 1000 };
    float *logits = malloc(V * sizeof *logits);
    int32_t *order = malloc(V * sizeof *order), *rank = malloc(V * sizeof *rank), *counts = calloc(V, sizeof *counts);
    double *prob = malloc(V * sizeof *prob);
    uint64_t x = 12345;
    for (int32_t i = 0; i < V; i++) {
        x = x * 6364136223846793005ULL + 1442695040888963407ULL;
        logits[i] = (float)((x >> 40) % 600) / 64.0f - 4.0f; /* 600 values: ties everywhere */
    }
    logits[777] = 6.0f; /* a clear top token */
    static const dsv41_sampler_params cases[] = {
        {.temperature = 0.8f, .top_k = 0, .top_p = 0.95f, .min_p = 0.0f, .seed = 1},
        {.temperature = 0.5f, .top_k = 0, .top_p = 0.3f, .min_p = 0.0f, .seed = 2},
        {.temperature = 1.0f, .top_k = 50, .top_p = 0.9f, .min_p = 0.0f, .seed = 3},
        {.temperature = 0.7f, .top_k = 0, .top_p = 1.0f, .min_p = 0.02f, .seed = 4},
        {.temperature = 0.05f, .top_k = 0, .top_p = 0.99f, .min_p = 0.0f, .seed = 5},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int32_t keep = ref_keep(logits, V, &cases[c], order, prob);
        for (int32_t i = 0; i < V; i++) rank[i] = -1, counts[i] = 0;
        for (int32_t i = 0; i < keep; i++) rank[order[i]] = i;
        dsv41_sampler *s = dsv41_sampler_new(&cases[c], V);
        int inside = s != NULL;
        for (int i = 0; inside && i < N; i++) {
            int32_t t = dsv41_sample(s, logits);
            inside = t >= 0 && t < V && rank[t] >= 0;
            if (inside) counts[rank[t]]++;
        }
        int close = 1;
        for (int32_t i = 0; i < keep && i < 20; i++) {
            double want = N * prob[i], sd = sqrt(want) + 1;
            close &= fabs(counts[i] - want) < 5 * sd;
        }
        CHECK(inside, "case %zu: every draw is in the definition's kept set (%d tokens)", c, keep);
        CHECK(close, "case %zu: the most likely tokens are drawn as often as the definition says", c);
        dsv41_sampler_free(s);
    }
    free(logits);
    free(order);
    free(rank);
    free(counts);
    free(prob);
}

int main(void) {
    dsv41_golden *g = dsv41_golden_load(golden_path());
    CHECK(g != NULL, "golden loads: %s", g ? "" : dsv41_error());
    dsv41_model *m = g ? dsv41_model_from_golden(g) : NULL;
    if (m) test_chunked_append(g, m);
    dsv41_model_free(m);
    dsv41_golden_free(g);
    test_sampler();
    test_sampler_vocab();
    return test_summary();
}
