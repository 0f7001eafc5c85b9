/* test_batch.c - dsv41_batch_forward: one call advancing several sessions gives each the bits
 * it gets alone.
 *
 * Nine sessions join one at a time, each with a prefill that joins the others' decode steps,
 * decode greedily for a few steps each and leave, so batches of 1 to 9 sessions mix prefills of
 * 1 to 20 tokens (above the 16 from which the kernels put tokens in lanes) with decode steps at
 * positions inside and past the window and across compressor groups. Every session's logits
 * and greedy tokens must equal, bit for bit, those of the same session run alone with
 * dsv41_session_forward. On the built-in model and on an fp8 checkpoint of another geometry
 * (quantized kernels, every projection big enough to split over threads), on every kernel set
 * this CPU runs, and at 1 and 2 worker threads. Wrong input is refused with no session changed. */
#include <string.h>

#include "testing.h"

enum { NS = 9, MAXSTEPS = 32 };
static const int32_t PROMPT[NS] = {5, 1, 20, 3, 9, 2, 17, 7, 12}; /* session i's prefill */

/* session i decodes this many tokens after its prefill */
static int32_t decode_steps(int32_t i) { return 9 + (i % 4) * 2; }

static int32_t argmax(const float *v, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

/* The record of one schedule: logits [NS][MAXSTEPS][V] of each session's calls in order (its
 * prefill, then each decode step) and its ids [NS][MAXSTEPS] fed after the prefill. */
typedef struct {
    float *logits;
    int32_t ids[NS][MAXSTEPS];
} record;

static void prompt_ids(int32_t i, int32_t V, int32_t *ids) {
    for (int32_t t = 0; t < PROMPT[i]; t++) ids[t] = (int32_t)((i * 131 + t * 37 + 5) % V);
}

/* Each session alone: its prefill, then greedy decode steps. */
static int run_alone(const dsv41_model *m, record *r) {
    int32_t V = dsv41_model_vocab_size(m), ids[64];
    int rc = 0;
    for (int32_t i = 0; i < NS; i++) {
        dsv41_session *s = dsv41_session_new(m);
        float *lg = r->logits + (size_t)i * MAXSTEPS * V;
        prompt_ids(i, V, ids);
        rc |= !s || dsv41_session_forward(s, ids, PROMPT[i], lg, NULL);
        for (int32_t k = 0; k < decode_steps(i); k++) {
            r->ids[i][k] = argmax(lg + (size_t)k * V, V);
            rc |= dsv41_session_forward(s, &r->ids[i][k], 1, lg + (size_t)(k + 1) * V, NULL);
        }
        dsv41_session_free(s);
    }
    return rc;
}

/* The staggered schedule: session i joins with its prefill at step i and leaves after its
 * decode steps; each step is one dsv41_batch_forward of every session active then. Counts the
 * batch sizes seen into sizes[count]. */
static int run_batched(const dsv41_model *m, record *r, int32_t sizes[NS + 1]) {
    int32_t V = dsv41_model_vocab_size(m), prompts[NS][64], calls[NS] = {0};
    dsv41_session *s[NS];
    int rc = 0;
    for (int32_t i = 0; i < NS; i++) {
        s[i] = dsv41_session_new(m);
        rc |= !s[i];
        prompt_ids(i, V, prompts[i]);
    }
    for (int32_t step = 0; rc == 0; step++) {
        dsv41_session *bs[NS];
        const int32_t *bids[NS];
        int32_t bn[NS], count = 0;
        float *blg[NS];
        for (int32_t i = 0; i < NS; i++) {
            if (i > step || calls[i] > decode_steps(i)) continue;
            float *lg = r->logits + ((size_t)i * MAXSTEPS + calls[i]) * V;
            bs[count] = s[i];
            if (calls[i] == 0) {
                bids[count] = prompts[i];
                bn[count] = PROMPT[i];
            } else {
                r->ids[i][calls[i] - 1] = argmax(lg - V, V);
                bids[count] = &r->ids[i][calls[i] - 1];
                bn[count] = 1;
            }
            blg[count++] = lg;
            calls[i]++;
        }
        if (count == 0) break;
        sizes[count]++;
        rc |= dsv41_batch_forward(bs, bids, bn, count, blg);
    }
    for (int32_t i = 0; i < NS; i++) dsv41_session_free(s[i]);
    return rc;
}

static record record_new(int32_t V) {
    record r;
    memset(&r, 0, sizeof r);
    r.logits = calloc((size_t)NS * MAXSTEPS * V, sizeof *r.logits);
    return r;
}

/* The first session whose logits or ids differ between a and b, or -1 */
static int32_t first_difference(const record *a, const record *b, int32_t V) {
    for (int32_t i = 0; i < NS; i++)
        if (memcmp(a->logits + (size_t)i * MAXSTEPS * V, b->logits + (size_t)i * MAXSTEPS * V,
                   (size_t)(decode_steps(i) + 1) * V * sizeof *a->logits) ||
            memcmp(a->ids[i], b->ids[i], (size_t)decode_steps(i) * sizeof *a->ids[i]))
            return i;
    return -1;
}

/* Every kernel set, and 1 and 2 threads: the batched schedule gives every session its bits alone.
 * A sanitizer build looks for memory and thread errors, not at numerics (the normal build compares
 * the sets): it runs the default set only, as the many times slower runs of every set would
 * take minutes of CI. */
static void check_model(const dsv41_model *m, const char *what) {
    int32_t V = dsv41_model_vocab_size(m);
    const char *sets[8];
    int32_t ns = dsv41_kernel_sets(sets, 8), first = 0;
    dsv41_set_kernels(NULL);
    for (int32_t k = 0; TEST_SLOWDOWN > 1.0 && k < ns; k++) /* the default set only */
        if (!strcmp(sets[k], dsv41_kernels())) first = k, ns = k + 1;
    record threads1 = {.logits = NULL}; /* the 2-thread run on the first set, for the 1-thread one */
    for (int32_t k = first; k < ns; k++) {
        CHECK(dsv41_set_kernels(sets[k]) == 0, "%s: use kernel set %s", what, sets[k]);
        for (int32_t th = 2; th >= 1; th--) {
            dsv41_set_threads(th);
            record alone = record_new(V), batched = record_new(V);
            int32_t sizes[NS + 1] = {0};
            CHECK(run_alone(m, &alone) == 0, "%s on %s, %d threads: the sessions alone run", what, sets[k], th);
            CHECK(run_batched(m, &batched, sizes) == 0, "%s on %s, %d threads: the batches run: %s", what, sets[k], th,
                  dsv41_error());
            int all_sizes = 1;
            for (int32_t c = 1; c <= NS; c++) all_sizes &= sizes[c] > 0;
            CHECK(all_sizes, "%s: the schedule has batches of every size 1..%d", what, NS);
            int32_t d = first_difference(&alone, &batched, V);
            CHECK(d < 0, "%s on %s, %d threads: every session's logits and greedy tokens equal its own run's bit for bit "
                         "(first differing: session %d)", what, sets[k], th, d);
            if (k == first && th == 2) {
                threads1 = batched;
                batched.logits = NULL;
            } else if (k == first) {
                CHECK(first_difference(&threads1, &batched, V) < 0, "%s: a batch gives the same bits at 1 and 2 threads", what);
            }
            free(alone.logits);
            free(batched.logits);
        }
    }
    free(threads1.logits);
    dsv41_set_kernels(NULL);
    dsv41_set_threads(2);
}

/* The state a wrong batch must leave alone: each session's position, ids and last logits. */
typedef struct {
    int32_t pos, ids[64];
    float logits[64];
    int has_logits;
} snapshot;

static snapshot snap(const dsv41_session *s, int32_t V) {
    snapshot p;
    memset(&p, 0, sizeof p);
    int32_t n;
    const int32_t *ids = dsv41_session_tokens(s, &n);
    const float *lg = dsv41_session_logits(s);
    p.pos = dsv41_session_pos(s);
    memcpy(p.ids, ids, (size_t)n * sizeof *ids);
    p.has_logits = lg != NULL;
    if (lg) memcpy(p.logits, lg, (size_t)V * sizeof *lg);
    return p;
}

static void check_errors(const dsv41_model *m) {
    int32_t V = dsv41_model_vocab_size(m), prompt[4] = {3, 4, 5, 6}, one = 7, two[2] = {8, 9}, bad = V;
    CHECK(V <= 64, "the built-in model's vocabulary fits the snapshot");
    dsv41_session *a = dsv41_session_new(m), *b = dsv41_session_new(m), *c = dsv41_session_new(m);
    dsv41_session_forward(a, prompt, 4, NULL, NULL);
    dsv41_session_forward(b, prompt, 3, NULL, NULL);
    float la[64], lb[64], lc[64], *lg[3] = {la, lb, lc};
    snapshot sa = snap(a, V), sb = snap(b, V), sc = snap(c, V);
    struct {
        const char *what;
        dsv41_session *s[3];
        const int32_t *ids[3];
        int32_t n[3], count;
    } cases[] = {
        {"a duplicate session", {a, b, a}, {&one, &one, &one}, {1, 1, 1}, 3},
        {"several tokens after a prefill", {a, b, c}, {&one, two, prompt}, {1, 2, 4}, 3},
        {"an id outside the vocabulary", {a, b, c}, {&one, &one, &bad}, {1, 1, 1}, 3},
        {"an id outside the vocabulary in a prefill", {c, a, b}, {two, &one, &one}, {2, 1, 1}, 3},
        {"a NULL session", {a, NULL, c}, {&one, &one, prompt}, {1, 1, 4}, 3},
        {"NULL ids", {a, b, c}, {&one, NULL, prompt}, {1, 1, 4}, 3},
        {"no tokens", {a, b, c}, {&one, &one, prompt}, {1, 0, 4}, 3},
        {"no sessions", {a, b, c}, {&one, &one, prompt}, {1, 1, 4}, 0},
    };
    two[1] = V + 3; /* the prefill case's second id; the append case fails on its count first */
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        int rc = dsv41_batch_forward(cases[i].s, cases[i].ids, cases[i].n, cases[i].count, lg);
        snapshot na = snap(a, V), nb = snap(b, V), nc = snap(c, V);
        CHECK(rc == -1 && !memcmp(&na, &sa, sizeof na) && !memcmp(&nb, &sb, sizeof nb) && !memcmp(&nc, &sc, sizeof nc),
              "%s: refused (%s) and no session changed", cases[i].what, dsv41_error());
    }
    CHECK(dsv41_batch_forward(NULL, NULL, NULL, 2, NULL) == -1, "NULL arrays are refused");
    /* and a right batch after them runs, with no logits asked */
    dsv41_session *ok[3] = {a, b, c};
    const int32_t *ids[3] = {&one, &one, prompt};
    int32_t n[3] = {1, 1, 4};
    CHECK(dsv41_batch_forward(ok, ids, n, 3, NULL) == 0 && dsv41_session_pos(a) == 5 && dsv41_session_pos(b) == 4 &&
              dsv41_session_pos(c) == 4 && dsv41_session_logits(a) == NULL,
          "the same sessions then batch without logits: %s", dsv41_error());
    dsv41_session_free(a);
    dsv41_session_free(b);
    dsv41_session_free(c);
}

int main(void) {
    char dir[] = "/tmp/dsv41-batch-XXXXXX", model[300];
    CHECK(test_synth_wide(dir, model) == 0, "synth an fp8 model");
    dsv41_model *tiny = dsv41_model_builtin();
    CHECK(tiny != NULL, "the built-in model");
    if (tiny) {
        check_model(tiny, "built-in");
        check_errors(tiny);
    }
    dsv41_model_free(tiny);

    dsv41_model *m = dsv41_model_load(model);
    CHECK(m != NULL, "load it: %s", m ? "" : dsv41_error());
    if (m) check_model(m, "fp8 512-wide");
    dsv41_model_free(m);
    char cmd[100];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
    return test_summary();
}
