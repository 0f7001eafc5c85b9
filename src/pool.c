/* pool.c - the worker threads (see pool.h). One job runs at a time; workers sleep on a
 * condition variable between jobs, and the caller works on the job too. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "dist.h"
#include "pool.h"

#define MAX_THREADS 256

static struct {
    pthread_mutex_t mu;
    pthread_cond_t work, done;
    pthread_t tid[MAX_THREADS];
    int32_t n;             /* threads taking part, the caller included; 0 until first use */
    int32_t created;       /* worker threads started so far (they are kept when n shrinks) */
    uint64_t generation;   /* bumped per job */
    int32_t pending;       /* workers still running this job */
    int32_t sleepers;      /* workers blocked on `work` */
    pool_fn fn;
    void *ctx;
    int64_t items, per;    /* the job: [0, items) in ranges of `per` */
    int64_t next;          /* the next range to hand out */
} P = {.mu = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER, .done = PTHREAD_COND_INITIALIZER};

/* Takes ranges until none is left: a thread that a neighbour on the host slows down, or that
 * wakes late, takes fewer, so nobody waits long for it. Which thread runs a range never
 * changes what the range computes. */
static void run_ranges(void) {
    for (;;) {
        int64_t b = __atomic_fetch_add(&P.next, 1, __ATOMIC_RELAXED) * P.per;
        if (b >= P.items) return;
        P.fn(P.ctx, b, b + P.per < P.items ? b + P.per : P.items);
    }
}

/* A decode step calls the pool a few hundred times with microseconds of serial work between
 * calls, and a prefill has stretches of a few milliseconds on one thread (routing, the Engram
 * hashes); waking a blocked worker costs a few hundred microseconds on a virtual machine, which
 * the other thread spends waiting at the end of the next job. So both sides spin for a while,
 * measured in time (a pause takes 16 ns on one CPU and 140 cycles on another), before they
 * block. */
#define SPIN_NS 5000000

static inline void relax(void) {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ volatile("yield");
#endif
}

static int64_t mono_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int generation_moved(uint64_t seen) { return __atomic_load_n(&P.generation, __ATOMIC_ACQUIRE) != seen; }
static int workers_done(uint64_t unused) { return (void)unused, __atomic_load_n(&P.pending, __ATOMIC_ACQUIRE) <= 0; }

/* Spins until done(arg) or for SPIN_NS; returns done(arg). */
static int spin_until(int (*done)(uint64_t), uint64_t arg) {
    int64_t until = 0;
    for (int i = 0; !done(arg); i++) {
        relax();
        if ((i & 255) == 255) { /* the clock costs about a pause: read it now and then */
            int64_t t = mono_ns();
            if (!until) until = t + SPIN_NS;
            else if (t > until) return done(arg);
        }
    }
    return 1;
}

static void *worker(void *arg) {
    int32_t id = (int32_t)(intptr_t)arg;
    uint64_t seen = 0;
    for (;;) {
        if (!spin_until(generation_moved, seen)) {
            pthread_mutex_lock(&P.mu);
            P.sleepers++;
            while (P.generation == seen) pthread_cond_wait(&P.work, &P.mu);
            P.sleepers--;
            pthread_mutex_unlock(&P.mu);
        }
        seen = __atomic_load_n(&P.generation, __ATOMIC_ACQUIRE);
        if (id >= P.n) continue; /* parked: the pool was resized below this worker */
        run_ranges();
        if (__atomic_sub_fetch(&P.pending, 1, __ATOMIC_ACQ_REL) == 0) {
            pthread_mutex_lock(&P.mu);
            pthread_cond_signal(&P.done);
            pthread_mutex_unlock(&P.mu);
        }
    }
    return NULL;
}

static int set_threads(int32_t n) {
    if (n < 1 || n > MAX_THREADS) return set_error("threads must be in [1, %d], not %d", MAX_THREADS, n);
    pthread_mutex_lock(&P.mu);
    if (P.created == 0) P.created = 1; /* slot 0 is the caller */
    while (P.created < n && pthread_create(&P.tid[P.created], NULL, worker, (void *)(intptr_t)P.created) == 0)
        pthread_detach(P.tid[P.created++]);
    P.n = P.created < n ? P.created : n;
    pthread_mutex_unlock(&P.mu);
    return 0;
}

/* a count the program sets is every rank's; the default is each rank's own cores */
int dsv41_set_threads(int32_t n) {
    if (set_threads(n)) return -1;
    dist_threads(n);
    return 0;
}

int32_t pool_threads(void) {
    if (P.n == 0) {
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
        set_threads(cores > 0 ? (int32_t)cores : 1);
    }
    return P.n;
}

void pool_run(int64_t n, int64_t min_per_thread, pool_fn fn, void *ctx) {
    int32_t t = pool_threads();
    if (min_per_thread < 1) min_per_thread = 1;
    if (t == 1 || n < 2 * min_per_thread) {
        if (n > 0) fn(ctx, 0, n);
        return;
    }
    pthread_mutex_lock(&P.mu);
    /* up to 4 ranges per thread, each at least min_per_thread items */
    int64_t ranges = n / min_per_thread < 4 * t ? n / min_per_thread : 4 * t;
    P.fn = fn;
    P.ctx = ctx;
    P.items = n;
    P.per = (n + ranges - 1) / ranges;
    P.next = 0;
    __atomic_store_n(&P.pending, t - 1, __ATOMIC_RELEASE);
    __atomic_add_fetch(&P.generation, 1, __ATOMIC_ACQ_REL);
    if (P.sleepers) pthread_cond_broadcast(&P.work);
    pthread_mutex_unlock(&P.mu);
    run_ranges();
    if (!spin_until(workers_done, 0)) {
        pthread_mutex_lock(&P.mu);
        while (__atomic_load_n(&P.pending, __ATOMIC_ACQUIRE) > 0) pthread_cond_wait(&P.done, &P.mu);
        pthread_mutex_unlock(&P.mu);
    }
}
