/* test_pool.c - the worker pool under stress: many short jobs with pauses between them long
 * enough that the workers fall asleep (so every next job must wake them), jobs where one range
 * is slow (so the owner goes to sleep waiting for it), the thread count changing between jobs
 * (workers parking and coming back), jobs posted from inside a job, and two application threads
 * posting at once. Every item of every job must be handled exactly once, and nothing may hang:
 * a watchdog ends the program with a FAIL line when the whole run takes far too long. The
 * suite runs it natively, under qemu-user for arm64 (tests/neon.sh) and under ThreadSanitizer
 * (make tsan). */
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <string.h>
#include <time.h>

#include "pool.h"
#include "testing.h"

enum { MAX_ITEMS = 512, WATCHDOG_S = 300 };

typedef struct {
    atomic_int hits[MAX_ITEMS]; /* [n] times each item was handled */
    int64_t n;                  /* items of the job */
    int64_t slow;               /* the item whose range sleeps (-1: none) */
    int nested;                 /* each range posts a job of its own, which runs inline */
} job;

static void sleep_us(long us) { nanosleep(&(struct timespec){0, us * 1000L}, NULL); }

static void count_inner(void *ctx, int64_t b, int64_t e) {
    atomic_int *c = ctx;
    atomic_fetch_add_explicit(c, (int)(e - b), memory_order_relaxed);
}

static void mark(void *ctx, int64_t b, int64_t e) {
    job *j = ctx;
    for (int64_t i = b; i < e; i++) atomic_fetch_add_explicit(&j->hits[i], 1, memory_order_relaxed);
    if (j->slow >= b && j->slow < e) sleep_us(300);
    if (j->nested) {
        atomic_int inner = 0;
        pool_run(40, 1, count_inner, &inner);
        if (atomic_load(&inner) != 40) atomic_fetch_add(&j->hits[b], 1000); /* shows as a wrong count */
    }
}

/* Runs one job of n items and returns how many items were not handled exactly once. */
static int64_t run_job(job *j, int64_t n, int64_t slow, int nested) {
    for (int64_t i = 0; i < n; i++) atomic_store_explicit(&j->hits[i], 0, memory_order_relaxed);
    j->n = n, j->slow = slow, j->nested = nested;
    pool_run(n, 1, mark, j);
    int64_t wrong = 0;
    for (int64_t i = 0; i < n; i++) wrong += atomic_load_explicit(&j->hits[i], memory_order_relaxed) != 1;
    return wrong;
}

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint32_t draw(uint32_t below) {
    rng ^= rng << 13, rng ^= rng >> 7, rng ^= rng << 17;
    return (uint32_t)(rng >> 32) % below;
}

static job shared_job;

/* Short jobs, with a pause longer than the workers' spin before every 16th: each of those finds
 * them asleep and must wake them. */
static void test_sleep_wake(int jobs) {
    int64_t wrong = 0;
    for (int k = 0; k < jobs; k++) {
        if (k % 16 == 0) sleep_us(80 + draw(200));
        wrong += run_job(&shared_job, 2 + draw(MAX_ITEMS - 2), -1, 0);
    }
    CHECK(wrong == 0, "short jobs across sleeps: %lld items not handled exactly once", (long long)wrong);
}

/* One range sleeps past the owner's spin, so the owner blocks until the worker holding it is done. */
static void test_owner_sleeps(int jobs) {
    int64_t wrong = 0;
    for (int k = 0; k < jobs; k++) {
        int64_t n = 8 + draw(120);
        wrong += run_job(&shared_job, n, draw((uint32_t)n), 0);
    }
    CHECK(wrong == 0, "jobs with a slow range: %lld items not handled exactly once", (long long)wrong);
}

/* The thread count changes between jobs: workers above it park, and come back when it grows. */
static void test_resize(int jobs) {
    static const int32_t counts[] = {1, 3, 2, 4, 1, 8, 2, 4};
    int64_t wrong = 0, refused = 0;
    for (int k = 0; k < jobs; k++) {
        if (k % 8 == 0) refused += dsv41_set_threads(counts[(k / 8) % 8]) != 0;
        wrong += run_job(&shared_job, 2 + draw(200), k % 5 == 0 ? 1 : -1, k % 7 == 0);
    }
    CHECK(refused == 0, "%lld thread counts refused", (long long)refused);
    CHECK(wrong == 0, "jobs across thread counts: %lld items not handled exactly once", (long long)wrong);
    dsv41_set_threads(4);
}

typedef struct {
    job j;
    int jobs;
    int64_t wrong;
    uint32_t seed;
} app;

/* An application thread: its jobs run on the workers when it gets them, else inline. */
static void *app_run(void *arg) {
    app *a = arg;
    for (int k = 0; k < a->jobs; k++) {
        a->seed = a->seed * 1103515245u + 12345u;
        if (k % 32 == 0) sleep_us(100);
        a->wrong += run_job(&a->j, 2 + (a->seed >> 8) % 300, -1, 0);
    }
    return NULL;
}

static void test_two_callers(int jobs) {
    static app apps[2];
    pthread_t th[2];
    for (int i = 0; i < 2; i++) {
        apps[i].jobs = jobs, apps[i].wrong = 0, apps[i].seed = 7u + (uint32_t)i;
        CHECK(pthread_create(&th[i], NULL, app_run, &apps[i]) == 0, "start an application thread");
    }
    for (int i = 0; i < 2; i++) pthread_join(th[i], NULL);
    CHECK(apps[0].wrong == 0 && apps[1].wrong == 0, "two callers at once: %lld and %lld items wrong", (long long)apps[0].wrong,
          (long long)apps[1].wrong);
}

static void hung(int sig) {
    (void)sig;
    static const char msg[] = "FAIL: the pool hung (the watchdog went off)\n";
    (void)!write(2, msg, sizeof msg - 1);
    _exit(1);
}

int main(void) {
    signal(SIGALRM, hung);
    alarm(WATCHDOG_S);
    CHECK(dsv41_set_threads(4) == 0, "4 threads");
    /* about 2 s natively, 3 s under qemu-aarch64 and 4 s under TSan on the 2-core machine */
    test_sleep_wake(20000);
    test_owner_sleeps(1500);
    test_resize(4000);
    test_two_callers(5000);
    return test_summary();
}
