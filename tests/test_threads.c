/* test_threads.c - results do not depend on the thread count or the kernel set: a model big
 * enough that every projection is split across threads gives the same logits bit for bit at 1, 2
 * and 3 threads and on every kernel set this CPU runs, for prefills short and long (the
 * many-token kernels; 40 tokens is the prompt) and the decode steps after each, and a
 * projection's raw f32 sums at several token counts; and the golden still passes at 3 threads.
 * Nor on other application threads: two threads with their own sessions on one model, run at
 * the same time while a third changes the worker count, get their sequential logits bit for
 * bit, round after round. */
#include <pthread.h>
#include <string.h>

#include "golden.h"
#include "testing.h"

/* the prefills: below and above the 16 tokens from which kernels put tokens in lanes */
enum { LONG = 70 };
static const int32_t PREFILL[] = {9, 40, LONG};
#define RUNS (int)(sizeof PREFILL / sizeof *PREFILL)

/* logits [RUNS][4][V]: each prefill into a fresh session, its last token's logits and 3 decode
 * steps' */
static float *run(const dsv41_model *m, int32_t threads) {
    dsv41_set_threads(threads);
    int32_t V = dsv41_model_vocab_size(m), ids[LONG];
    for (int i = 0; i < LONG; i++) ids[i] = (i * 37 + 5) % V;
    float *out = malloc((size_t)(RUNS * 4 * V) * sizeof *out);
    for (int run = 0; run < RUNS; run++) {
        dsv41_session *s = dsv41_session_new(m);
        float *o = out + 4 * run * V;
        dsv41_session_forward(s, ids, PREFILL[run], o, NULL);
        for (int i = 1; i < 4; i++) dsv41_session_forward(s, &ids[i], 1, o + i * V, NULL);
        dsv41_session_free(s);
    }
    return out;
}

/* linear() of an f32 weight (raw f32 sums, nothing rounded away) at T tokens with `threads`
 * threads */
static float *linear_at(const weight *w, const float *x, int64_t T, int32_t threads) {
    dsv41_set_threads(threads);
    float *y = malloc((size_t)(T * w->rows) * sizeof *y);
    linear(w, x, T, y);
    return y;
}

static void test_linear_threads(void) {
    enum { ROWS = 64, COLS = 300, MAXT = 100 };
    float *wd = malloc(ROWS * COLS * sizeof *wd), *x = malloc(MAXT * COLS * sizeof *x);
    uint32_t r = 12345;
    for (int i = 0; i < ROWS * COLS; i++) wd[i] = (float)((r = r * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    for (int i = 0; i < MAXT * COLS; i++) x[i] = (float)((r = r * 1664525u + 1013904223u) >> 8) / 16777216.0f - 0.5f;
    weight w = {.type = DT_F32, .mode = AS_STORED, .rows = ROWS, .cols = COLS, .data = wd};
    const int64_t Ts[] = {9, 40, 70, 100};
    for (size_t k = 0; k < sizeof Ts / sizeof *Ts; k++) {
        float *one = linear_at(&w, x, Ts[k], 1);
        for (int32_t t = 2; t <= 3; t++) {
            float *y = linear_at(&w, x, Ts[k], t);
            CHECK(!memcmp(one, y, (size_t)(Ts[k] * ROWS) * sizeof *y), "linear at T=%lld: %d threads give 1 thread's bits",
                  (long long)Ts[k], t);
            free(y);
        }
        free(one);
    }
    free(wd);
    free(x);
}

/* One application thread's work: a prefill of `prefill` tokens and DECODES decode steps in its
 * own session, every step's logits kept. */
enum { DECODES = 5, ROUNDS = 6 };
typedef struct {
    const dsv41_model *m;
    int32_t prefill;
    float *logits;               /* [1 + DECODES][V] */
    pthread_barrier_t *start;    /* NULL when run alone */
    int ok;
} app_job;

static void *app_run(void *arg) {
    app_job *j = arg;
    int32_t V = dsv41_model_vocab_size(j->m), ids[LONG];
    for (int i = 0; i < LONG; i++) ids[i] = (i * 53 + j->prefill) % V;
    dsv41_session *s = dsv41_session_new(j->m);
    if (j->start) pthread_barrier_wait(j->start);
    j->ok = s && !dsv41_session_forward(s, ids, j->prefill, j->logits, NULL);
    for (int i = 1; j->ok && i <= DECODES; i++) j->ok = !dsv41_session_forward(s, &ids[i], 1, j->logits + i * V, NULL);
    dsv41_session_free(s);
    return NULL;
}

typedef struct {
    pthread_barrier_t *start;
    int stop;
} resizer;

/* changes the worker count until told to stop */
static void *resize_run(void *arg) {
    resizer *r = arg;
    pthread_barrier_wait(r->start);
    for (int32_t i = 0; !__atomic_load_n(&r->stop, __ATOMIC_ACQUIRE); i++) {
        dsv41_set_threads(1 + i % 3);
        usleep(200);
    }
    return NULL;
}

static void test_app_threads(const dsv41_model *m) {
    enum { APPS = 2 };
    const int32_t prefill[APPS] = {40, 9}; /* a many-token and a few-token prefill side by side */
    size_t n = (size_t)((1 + DECODES) * dsv41_model_vocab_size(m)) * sizeof(float);
    float *alone[APPS];
    dsv41_set_threads(2);
    for (int a = 0; a < APPS; a++) {
        app_job j = {m, prefill[a], alone[a] = malloc(n), NULL, 0};
        app_run(&j);
        CHECK(j.ok, "app thread %d's work alone: %s", a, dsv41_error());
    }
    int same = 1, ok = 1;
    for (int round = 0; round < ROUNDS; round++) {
        pthread_barrier_t start;
        pthread_barrier_init(&start, NULL, APPS + 1);
        app_job jobs[APPS];
        pthread_t tid[APPS + 1];
        resizer rs = {&start, 0};
        for (int a = 0; a < APPS; a++) {
            jobs[a] = (app_job){m, prefill[a], malloc(n), &start, 0};
            pthread_create(&tid[a], NULL, app_run, &jobs[a]);
        }
        pthread_create(&tid[APPS], NULL, resize_run, &rs);
        for (int a = 0; a < APPS; a++) pthread_join(tid[a], NULL);
        __atomic_store_n(&rs.stop, 1, __ATOMIC_RELEASE);
        pthread_join(tid[APPS], NULL);
        pthread_barrier_destroy(&start);
        for (int a = 0; a < APPS; a++) {
            ok &= jobs[a].ok;
            same &= jobs[a].ok && !memcmp(jobs[a].logits, alone[a], n);
            free(jobs[a].logits);
        }
    }
    CHECK(ok, "two app threads' sessions run side by side");
    CHECK(same, "two app threads get their sequential logits bit for bit in each of %d rounds", ROUNDS);
    for (int a = 0; a < APPS; a++) free(alone[a]);
}

int main(void) {
    char dir[] = "/tmp/dsv41-threads-XXXXXX", model[300];
    CHECK(test_synth_wide(dir, model) == 0, "synth an fp8 model");
    dsv41_model *m = dsv41_model_load(model);
    CHECK(m != NULL, "load it: %s", m ? "" : dsv41_error());
    if (m) {
        size_t n = (size_t)(RUNS * 4 * dsv41_model_vocab_size(m)) * sizeof(float);
        /* more threads first: a session's buffers may reuse a freed one's memory, and a range
         * a thread skipped would then hold the values an earlier run left there */
        float *three = run(m, 3), *two = run(m, 2), *one = run(m, 1);
        CHECK(!memcmp(one, two, n), "1 and 2 threads give the same logits bit for bit");
        CHECK(!memcmp(one, three, n), "1 and 3 threads give the same logits bit for bit");
        const char *sets[8];
        int32_t ns = dsv41_kernel_sets(sets, 8);
        for (int32_t k = 0; k < ns; k++) {
            /* under a sanitizer not the tile emulation, 10x slower there (test_kernels and
             * test_kernel_sets take it under the sanitizers) */
            if (TEST_SLOWDOWN > 1.0 && dsv41_kernels_emulated(sets[k])) continue;
            dsv41_set_kernels(sets[k]);
            float *other = run(m, 2);
            CHECK(!memcmp(one, other, n), "kernel set %s gives the default set's logits bit for bit", sets[k]);
            free(other);
        }
        dsv41_set_kernels(NULL);
        free(one); free(two); free(three);
        test_app_threads(m);
    }
    dsv41_model_free(m);
    test_linear_threads(); /* after the fork above: a child of a process with workers has none */
    dsv41_golden *g = dsv41_golden_load(golden_path());
    dsv41_model *gm = g ? dsv41_model_from_golden(g) : NULL;
    int32_t passed = 0, failed = -1;
    dsv41_set_threads(3);
    FILE *sink = fopen("/dev/null", "w");
    if (gm) dsv41_golden_check(g, gm, sink, &passed, &failed);
    fclose(sink);
    CHECK(passed == 443 && failed == 0, "the golden at 3 threads: %d passed, %d failed", passed, failed);
    dsv41_model_free(gm);
    dsv41_golden_free(g);
    char cmd[100];
    snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
    CHECK(system(cmd) == 0, "cleanup");
    return test_summary();
}
