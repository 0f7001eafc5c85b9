/* test_oom.c - an allocation that fails anywhere in a call is an error return, never a crash.
 *
 * As SQLite tests its malloc failures: the program is linked with the allocator's entry points
 * wrapped (-Wl,--wrap=malloc,... in the Makefile, for this program only), so that allocation
 * number N of a scenario fails, for N = 1, 2, 3, ... The scenario opens a model, makes sessions,
 * prefills, decodes, traces, runs a batch, and drafts, verifies and speculates with the DSpark
 * model. Every failure must come back as -1 or NULL with dsv41_error() saying why, a session a
 * failed call ran must be where the header says (unchanged, or empty with no logits), and each
 * session must then, reset and fed again with nothing failing, give exactly the logits and
 * tokens of a run in which nothing failed: a cache the failed call left half written would show
 * there. The sanitizer build (make sanitize) adds that nothing leaks or is touched after free.
 *
 * Each scenario runs on a thread of its own, so the scratch arena (kept per thread between
 * calls) starts empty and its growth is among the allocations that fail. The sweep tries every
 * allocation site of the scenario at its first and last use and the first and last 20
 * allocations, so that it stays a matter of seconds under the sanitizers; a failure inside a pool
 * job on a worker thread, and a real allocation of more memory than exists, are checked apart. */
#include <execinfo.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <string.h>

#include "filler.h"
#include "pool.h"
#include "scratch.h"
#include "testing.h"

/* A sanitizer ends the program on an allocation larger than it serves; the library must see NULL */
#ifdef TEST_ASAN
const char *__asan_default_options(void);
const char *__asan_default_options(void) { return "allocator_may_return_null=1"; }
#endif
#ifdef TEST_TSAN
const char *__tsan_default_options(void);
const char *__tsan_default_options(void) { return "allocator_may_return_null=1"; }
#endif

/* ---- the allocator, wrapped */
void *__real_malloc(size_t n);
void *__real_calloc(size_t k, size_t n);
void *__real_realloc(void *p, size_t n);
void *__real_aligned_alloc(size_t a, size_t n);
char *__real_strdup(const char *s);

#define MAX_ALLOCS 200000
#define SITE_FRAMES 4

static atomic_int armed;       /* counting (and failing) the allocations */
static atomic_long count;      /* allocations since armed */
static long fail_at;           /* the one to fail, 1-based; 0: none */
static atomic_int injected;    /* it failed */
static int recording;          /* the reference run: each allocation's site into sites */
static uint64_t *sites;        /* [MAX_ALLOCS] a hash of the allocation's callers */

/* The callers of an allocation, hashed: a few frames, since many sites reach the allocator
 * through one helper (buffer_grow, scratch_bytes). */
static uint64_t site(void) {
    void *frames[SITE_FRAMES + 2];
    int n = backtrace(frames, SITE_FRAMES + 2);
    uint64_t h = 1469598103934665603u;
    for (int i = 2; i < n; i++) h = (h ^ (uint64_t)(uintptr_t)frames[i]) * 1099511628211u;
    return h;
}

static int fails(void) {
    if (!atomic_load(&armed)) return 0;
    long k = atomic_fetch_add(&count, 1) + 1;
    if (recording && k < MAX_ALLOCS) sites[k] = site();
    if (k != fail_at) return 0;
    atomic_store(&injected, 1);
    return 1;
}

void *__wrap_malloc(size_t n) { return fails() ? NULL : __real_malloc(n); }
void *__wrap_calloc(size_t k, size_t n) { return fails() ? NULL : __real_calloc(k, n); }
void *__wrap_realloc(void *p, size_t n) { return fails() ? NULL : __real_realloc(p, n); }
void *__wrap_aligned_alloc(size_t a, size_t n) { return fails() ? NULL : __real_aligned_alloc(a, n); }
char *__wrap_strdup(const char *s) { return fails() ? NULL : __real_strdup(s); }

/* ---- the scenario */
#define PREFILL 20 /* past the window (8) and several compressor groups: the indexer's rows grow */
#define DECODE 4
#define NDRAFT 4

static const int32_t SEQ[] = {5, 17, 33, 2, 60, 41, 9, 12, 55, 3, 27, 38, 19, 44, 8, 63, 21, 30, 11, 50,
                              7, 36, 14, 58, 25, 1, 47};

/* What a run ends with, compared bit for bit with the reference's */
typedef struct {
    float a[64], b[64], d[64]; /* the logits of session a (decoded, traced, batched), b (batched), d (speculated) */
    int32_t drafts[NDRAFT], kept, spec[NDRAFT + 1], nspec;
    int ok;                    /* every step ran */
} outcome;

static int feed(dsv41_session *s, int32_t to, dsv41_trace *tr) {
    while (dsv41_session_pos(s) < to) {
        int32_t p = dsv41_session_pos(s), n = p == 0 ? PREFILL : 1;
        if (dsv41_session_forward(s, SEQ + p, n, NULL, p + n == to ? tr : NULL)) return -1;
    }
    return 0;
}

/* The drafter's steps on d from where it is: to one decode after the prefill, a draft and a
 * verify there, then a round of speculation. */
static int speculate(dsv41_session *d, outcome *o) {
    if (dsv41_session_pos(d) <= PREFILL + 1) {
        int32_t anchor = SEQ[PREFILL + 1], ids[NDRAFT + 1] = {anchor};
        if (feed(d, PREFILL + 1, NULL) || dsv41_session_draft(d, anchor, NDRAFT, o->drafts, NULL, NULL)) return -1;
        memcpy(ids + 1, o->drafts, sizeof o->drafts);
        if ((o->kept = dsv41_session_verify(d, ids, NDRAFT + 1, NULL, NULL, NULL)) < 0) return -1;
    }
    if ((o->nspec = dsv41_session_speculate(d, SEQ[PREFILL + 3], NDRAFT, NULL, NULL, NULL, o->spec, NULL)) < 0) return -1;
    memcpy(o->d, dsv41_session_logits(d), sizeof o->d);
    return 0;
}

/* Session a from where it is to PREFILL + DECODE (the last step traced), then a batch of a's
 * next token and b's prefill. */
static int steps(dsv41_session *a, dsv41_session *b, dsv41_trace *tr, outcome *o) {
    if (feed(a, PREFILL + DECODE, tr)) return -1;
    const int32_t *ids[2] = {SEQ + PREFILL + DECODE, SEQ};
    int32_t n[2] = {1, PREFILL};
    float *lg[2] = {o->a, o->b};
    return dsv41_batch_forward((dsv41_session *[]){a, b}, ids, n, 2, lg);
}

/* A session after a failed call is where it was, or empty with no logits. */
static int where_documented(const dsv41_session *s) {
    return !s || dsv41_session_pos(s) > 0 || dsv41_session_logits(s) == NULL;
}

static const outcome *want; /* the reference, once it ran */
static int bad_errors, bad_states, bad_results, failed_runs;

/* After a failure, with nothing failing any more: each session made goes on from where the
 * failure left it (o holds what the run computed before it) and must end as the reference. A
 * session left half changed would end elsewhere. */
static void recover(dsv41_session *a, dsv41_session *b, dsv41_session *d, dsv41_trace *tr, const outcome *o) {
    outcome r = *o;
    if (a && b && dsv41_session_pos(b) == 0 && steps(a, b, tr, &r)) bad_results++;
    if (d && speculate(d, &r)) bad_results++;
    if (!a || !b || !d) return;
    if (memcmp(r.a, want->a, sizeof r.a) || memcmp(r.b, want->b, sizeof r.b) || memcmp(r.d, want->d, sizeof r.d) ||
        memcmp(r.drafts, want->drafts, sizeof r.drafts) || r.kept != want->kept || r.nspec != want->nspec ||
        memcmp(r.spec, want->spec, sizeof r.spec))
        bad_results++;
}

/* One run: fails allocation number fail_at (none when 0). Fills *o on the reference run. */
static void *scenario(void *arg) {
    outcome *o = arg;
    dsv41_model *m = NULL, *dm = NULL;
    dsv41_session *a = NULL, *b = NULL, *d = NULL;
    dsv41_trace *tr = NULL;
    atomic_store(&count, 0);
    atomic_store(&injected, 0);
    atomic_store(&armed, 1);
    int rc = !(m = dsv41_model_builtin()) || !(dm = model_from_config_file("models/tiny_dspark.json")) ||
             !(a = dsv41_session_new(m)) || !(b = dsv41_session_new(m)) || !(d = dsv41_session_new(dm)) ||
             !(tr = dsv41_trace_new());
    if (!rc) {
        rc = steps(a, b, tr, o);
        if (rc == 0) rc = speculate(d, o);
    }
    atomic_store(&armed, 0);
    o->ok = rc == 0;
    if (rc) {
        failed_runs++;
        if (!atomic_load(&injected) || !strstr(dsv41_error(), "out of memory")) {
            bad_errors++;
            fprintf(stderr, "allocation %ld: a failure that says \"%s\"\n", fail_at, dsv41_error());
        }
        if (!where_documented(a) || !where_documented(b) || !where_documented(d)) bad_states++;
        if (want) recover(a, b, d, tr, o);
    }
    dsv41_trace_free(tr);
    dsv41_session_free(a);
    dsv41_session_free(b);
    dsv41_session_free(d);
    dsv41_model_free(m);
    dsv41_model_free(dm);
    return NULL;
}

static void run(long n, outcome *o) {
    pthread_t t;
    fail_at = n;
    if (pthread_create(&t, NULL, scenario, o) == 0) pthread_join(t, NULL);
}

/* ---- a failure on a worker thread, and a real one */
static atomic_int job_sum;
static void raise_range(void *ctx, int64_t b, int64_t e) {
    (void)ctx;
    for (int64_t i = b; i < e; i++) {
        if (i == 5) scratch_oom(12345, "a test range");
        (void)scratch_f32(1000); /* the worker's own arena */
        atomic_fetch_add(&job_sum, (int)i);
    }
}
static void sum_range(void *ctx, int64_t b, int64_t e) {
    (void)ctx;
    for (int64_t i = b; i < e; i++) atomic_fetch_add(&job_sum, (int)i);
}
static void raising_job(void *ctx) { pool_run(16, 1, raise_range, ctx); }
/* a piece of the block in use, then more than any machine has: a block after it is asked for */
static void huge(void *ctx) {
    (void)ctx;
    (void)scratch_bytes(64);
    (void)scratch_bytes(SIZE_MAX / 4);
}
/* and then the arena grows by a block as usual */
static void grow(void *ctx) {
    unsigned char *p = scratch_bytes(64), *q = scratch_bytes(3u << 20);
    memset(p, 1, 64);
    memset(q, 2, 3u << 20);
    *(int *)ctx = p[63] + q[(3u << 20) - 1];
}

int main(void) {
    void *warm[1];
    backtrace(warm, 1); /* backtrace loads its unwinder on first use, which allocates */
    sites = calloc(MAX_ALLOCS, sizeof *sites);
    dsv41_set_threads(3);
    int rc = scratch_run(raising_job, NULL);
    CHECK(rc == -1 && strstr(dsv41_error(), "out of memory: 12345 bytes for a test range"),
          "a pool job whose range runs out of memory is an error of the call that posted it: %s", dsv41_error());
    atomic_store(&job_sum, 0);
    pool_run(100, 1, sum_range, NULL);
    CHECK(atomic_load(&job_sum) == 4950, "the pool runs the next job whole");
    CHECK(scratch_run(huge, NULL) == -1 && strstr(dsv41_error(), "out of memory"),
          "scratch beyond the machine's memory is an error: %s", dsv41_error());
    int got = 0;
    CHECK(scratch_run(grow, &got) == 0 && got == 3, "the arena grows after it");
    dsv41_set_threads(1); /* the sweep's allocations come in one order */

    static outcome ref;
    recording = 1;
    run(0, &ref);
    recording = 0;
    long total = atomic_load(&count);
    CHECK(ref.ok && total > 0 && total < MAX_ALLOCS, "the scenario runs with nothing failing (%ld allocations): %s", total,
          dsv41_error());
    if (!ref.ok || total >= MAX_ALLOCS) return test_summary();
    want = &ref;

    /* the allocations to fail: each site's first and last, the first and last 20 */
    char *pick = calloc((size_t)total + 2, 1);
    for (long k = 1; k <= total; k++) {
        int first = 1, last = 1;
        for (long j = 1; j < k && first; j++) first = sites[j] != sites[k];
        for (long j = k + 1; j <= total && last; j++) last = sites[j] != sites[k];
        pick[k] = first || last || k <= 20 || k > total - 20;
    }
    long tried = 0;
    for (long k = 1; k <= total; k++) {
        if (!pick[k]) continue;
        outcome o = {0};
        run(k, &o);
        tried++;
        if (o.ok && (memcmp(o.a, ref.a, sizeof o.a) || memcmp(o.d, ref.d, sizeof o.d))) bad_results++;
    }
    printf("%ld allocations, %ld of them failed one at a time, %ld calls failed\n", total, tried, (long)failed_runs);
    /* a few are absorbed: speculation whose journal cannot be had decodes one token instead */
    CHECK(failed_runs > tried * 9 / 10, "the failures reach the calls (%d of %ld)", failed_runs, tried);
    CHECK(bad_errors == 0, "every failure is -1 or NULL with an out-of-memory message (%d are not)", bad_errors);
    CHECK(bad_states == 0, "every session a failed call ran is unchanged or empty (%d are not)", bad_states);
    CHECK(bad_results == 0, "after every failure the sessions, run again, give the reference's logits (%d do not)",
          bad_results);

    /* the run after the last allocation: nothing fails and the results are the reference's */
    outcome o = {0};
    run(total + 1, &o);
    CHECK(o.ok && !memcmp(o.a, ref.a, sizeof o.a) && !memcmp(o.d, ref.d, sizeof o.d),
          "with no allocation failing the scenario ends as the reference");
    free(pick);
    free(sites);
    return test_summary();
}
