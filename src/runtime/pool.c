/* pool.c - the worker threads (see pool.h).
 *
 * One job runs on the workers at a time, owned by the caller that posted it; a caller that
 * finds them busy (another application thread's job, or a job posted from inside a job) runs
 * its loop alone, which gives the same values. The job is cut into ranges that threads take
 * one at a time, and the caller takes ranges like any worker: it never waits for a worker
 * that has not started (one a busy host has descheduled, or one still waking up), only for
 * ranges already taken, so a late worker costs a job at most its share, never a stall. */
#include <pthread.h>
#include <sched.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "error.h"
#include "lead.h"
#include "scratch.h"
#include "pool.h"

#define MAX_THREADS 256

/* The ticket is the job's number, the next range to take and the job's range count in one
 * word, so that taking a range is one compare-and-swap that fails when the job it was read
 * from is over; a worker that reads a job and then sleeps through it takes nothing from the
 * next one. 40 bits of job number outlast any process (a wrap needs 2^40 jobs between a
 * worker's read and its swap). */
#define RANGE_BITS 12 /* ranges <= 4 * MAX_THREADS = 1024 < 2^12 */
#define RANGE_MASK ((1u << RANGE_BITS) - 1)
#define TICKET(job, next, ranges) ((job) << (2 * RANGE_BITS) | (uint64_t)(next) << RANGE_BITS | (uint64_t)(ranges))
#define TICKET_JOB(t) ((t) >> (2 * RANGE_BITS))
#define TICKET_NEXT(t) ((uint32_t)((t) >> RANGE_BITS) & RANGE_MASK)
#define TICKET_RANGES(t) ((uint32_t)(t) & RANGE_MASK)

static struct {
    pthread_mutex_t owner;      /* held by the caller whose job the workers run */
    pthread_mutex_t mu;         /* guards the sleeps below */
    pthread_cond_t work, done;  /* workers wait for a job; the owner for its last taken range */
    pthread_cond_t grow;        /* workers above the thread count wait for it to grow */
    pthread_t tid[MAX_THREADS];
    int32_t n;                  /* threads taking part, the caller included; 0 until first use */
    int32_t created;            /* worker threads started so far (they are kept when n shrinks) */
    uint64_t ticket;            /* job number << 24 | next range << 12 | ranges */
    uint32_t finished;          /* ranges of the current job done */
    int32_t sleepers;           /* workers blocked on `work` */
    int32_t owner_sleeps;       /* the owner is blocked on `done` */
    pool_fn fn;                 /* the job, written by its owner before the ticket and read only */
    void *ctx;                  /* by a thread holding one of its ranges, so never while the */
    int64_t items, per;         /* owner writes the next: [0, items) in ranges of `per` */
    int32_t failed;             /* a range of the current job ran out of memory (scratch.h) */
    size_t fail_bytes;          /* the first such range's failure, written by the thread */
    const char *fail_what;      /* that set `failed` and read by the owner after the job */
} P = {.owner = PTHREAD_MUTEX_INITIALIZER, .mu = PTHREAD_MUTEX_INITIALIZER, .work = PTHREAD_COND_INITIALIZER,
       .done = PTHREAD_COND_INITIALIZER, .grow = PTHREAD_COND_INITIALIZER};

typedef struct {
    int64_t begin, end;         /* the items of one range */
} range;

static void run_range(void *r) { P.fn(P.ctx, ((range *)r)->begin, ((range *)r)->end); }

/* A range that runs out of memory ends there and counts as done like any other (scratch.h): the
 * first such failure is kept for the owner, who raises it on its own thread once the job is
 * over and the pool is released. The failure is written before the range is counted in
 * `finished`, whose last count the owner reads, so the owner sees it. */
static void run_caught(int64_t b, int64_t e) {
    if (scratch_run(run_range, &(range){b, e}) == 0) return;
    int32_t no = 0;
    if (__atomic_compare_exchange_n(&P.failed, &no, 1, 0, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        scratch_last_oom(&P.fail_bytes, &P.fail_what);
}

/* Takes ranges of the job that ticket t was read from until none is left or the job is over. */
static void run_ranges(uint64_t t) {
    const uint64_t job = TICKET_JOB(t);
    for (;;) {
        if (TICKET_JOB(t) != job || TICKET_NEXT(t) >= TICKET_RANGES(t)) return;
        if (!__atomic_compare_exchange_n(&P.ticket, &t, t + (1u << RANGE_BITS), 1, __ATOMIC_ACQUIRE,
                                         __ATOMIC_ACQUIRE))
            continue; /* t now holds the ticket's value */
        int64_t b = TICKET_NEXT(t) * P.per;
        run_caught(b, b + P.per < P.items ? b + P.per : P.items);
        t += 1u << RANGE_BITS;
        if (__atomic_add_fetch(&P.finished, 1, __ATOMIC_SEQ_CST) == TICKET_RANGES(t) &&
            __atomic_load_n(&P.owner_sleeps, __ATOMIC_SEQ_CST)) {
            pthread_mutex_lock(&P.mu);
            pthread_cond_signal(&P.done);
            pthread_mutex_unlock(&P.mu);
        }
    }
}

/* A decode step calls the pool a few hundred times with microseconds of serial work between
 * calls, so a thread that finishes a job spins (pause) for SPIN_NS before it blocks, and the next
 * job finds it awake. It then blocks rather than spinning on: a prefill's stretches of a few
 * milliseconds on one thread (routing, the Engram hashes) would make a long spin burn a core
 * the caller or another process could use, and on a busy host every spinning thread takes a
 * share of the CPUs from the threads doing work. A worker that wakes late (a few hundred
 * microseconds on a virtual machine) costs little: the caller takes its ranges meanwhile.
 * Yielding while polling was tried and was slower under load. Measured on the clock (a pause
 * takes 16 ns on one CPU and 140 cycles on another). */
#define SPIN_NS 50000

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

/* Going to sleep is a handshake of two sides, each storing its own flag, then loading the
 * other's: a worker counts itself in `sleepers` and then looks for a new ticket, the owner
 * stores the ticket and then looks at `sleepers`; the owner sets `owner_sleeps` and then looks
 * at `finished`, a worker adds to `finished` and then looks at `owner_sleeps`. Each needs that
 * at least one side sees the other's store, or a thread sleeps with nobody to wake it. C11
 * promises that only when all four accesses are seq_cst: they then fall in one total order,
 * and whichever load comes later in it sees the other side's store. An acquire load is outside
 * that order and may read a value older than a seq_cst store that came before it (on arm64 an
 * LDAPR may pass an earlier STLR), so the loads below are seq_cst too, not acquire; on x86 the
 * two compile to the same instruction, on arm64 to LDAR instead of LDAPR. */
static int job_posted(uint64_t seen) { return TICKET_JOB(__atomic_load_n(&P.ticket, __ATOMIC_SEQ_CST)) != seen; }
static int job_finished(uint64_t ranges) { return __atomic_load_n(&P.finished, __ATOMIC_SEQ_CST) == ranges; }

/* Spins until done(arg) or for SPIN_NS; returns done(arg). */
static int spin_until(int (*done)(uint64_t), uint64_t arg) {
    int64_t until = 0;
    for (int i = 0; !done(arg); i++) {
        relax();
        if ((i & 63) == 63) { /* the clock costs about a pause: read it now and then */
            int64_t t = mono_ns();
            if (!until) until = t + SPIN_NS;
            else if (t > until) return done(arg);
        }
    }
    return 1;
}

static void *worker(void *arg) {
    int32_t id = (int32_t)(intptr_t)arg;
    uint64_t seen = 0; /* the last job number this worker looked at */
    for (;;) {
        if (id >= __atomic_load_n(&P.n, __ATOMIC_RELAXED)) { /* parked: the pool shrank */
            pthread_mutex_lock(&P.mu);
            while (id >= P.n) pthread_cond_wait(&P.grow, &P.mu);
            pthread_mutex_unlock(&P.mu);
        }
        if (!spin_until(job_posted, seen)) {
            pthread_mutex_lock(&P.mu);
            __atomic_add_fetch(&P.sleepers, 1, __ATOMIC_SEQ_CST);
            while (!job_posted(seen)) pthread_cond_wait(&P.work, &P.mu);
            __atomic_sub_fetch(&P.sleepers, 1, __ATOMIC_SEQ_CST);
            pthread_mutex_unlock(&P.mu);
        }
        uint64_t t = __atomic_load_n(&P.ticket, __ATOMIC_ACQUIRE);
        seen = TICKET_JOB(t);
        run_ranges(t);
    }
    return NULL;
}

/* with P.mu held */
static void set_threads(int32_t n) {
    if (P.created == 0) P.created = 1; /* slot 0 is the caller */
    while (P.created < n && pthread_create(&P.tid[P.created], NULL, worker, (void *)(intptr_t)P.created) == 0)
        pthread_detach(P.tid[P.created++]);
    __atomic_store_n(&P.n, P.created < n ? P.created : n, __ATOMIC_RELAXED);
    pthread_cond_broadcast(&P.grow);
}

/* a count the program sets is every rank's; the default is each rank's own cores */
int dsv41_set_threads(int32_t n) {
    if (n < 1 || n > MAX_THREADS) return set_error("threads must be in [1, %d], not %d", MAX_THREADS, n);
    pthread_mutex_lock(&P.mu);
    set_threads(n);
    pthread_mutex_unlock(&P.mu);
    lead_threads(n);
    return 0;
}

int32_t pool_threads(void) {
    int32_t n = __atomic_load_n(&P.n, __ATOMIC_RELAXED);
    if (n) return n;
    pthread_mutex_lock(&P.mu);
    if (P.n == 0) { /* the first use, unless another thread's came first */
        long cores = sysconf(_SC_NPROCESSORS_ONLN);
#ifdef CPU_COUNT
        /* the cores this process may run on: a rank bound to one NUMA node (mpirun --bind-to
         * numa) runs a thread per core of that node, not of the machine */
        cpu_set_t set;
        if (sched_getaffinity(0, sizeof set, &set) == 0 && CPU_COUNT(&set) > 0) cores = CPU_COUNT(&set);
#endif
        set_threads(cores < 1 ? 1 : cores > MAX_THREADS ? MAX_THREADS : (int32_t)cores);
    }
    n = P.n;
    pthread_mutex_unlock(&P.mu);
    return n;
}

void pool_run(int64_t n, int64_t min_per_thread, pool_fn fn, void *ctx) {
    int32_t t = pool_threads();
    if (min_per_thread < 1) min_per_thread = 1;
    if (t == 1 || n < 2 * min_per_thread || pthread_mutex_trylock(&P.owner)) {
        if (n > 0) fn(ctx, 0, n);
        return;
    }
    /* up to 4 ranges per thread, each at least min_per_thread items */
    int64_t ranges = n / min_per_thread < 4 * t ? n / min_per_thread : 4 * t;
    P.fn = fn;
    P.ctx = ctx;
    P.items = n;
    P.per = (n + ranges - 1) / ranges;
    ranges = (n + P.per - 1) / P.per; /* rounding `per` up may leave fewer */
    __atomic_store_n(&P.finished, 0, __ATOMIC_RELAXED);
    __atomic_store_n(&P.failed, 0, __ATOMIC_RELAXED);
    uint64_t ticket = TICKET(TICKET_JOB(__atomic_load_n(&P.ticket, __ATOMIC_RELAXED)) + 1, 0, ranges);
    __atomic_store_n(&P.ticket, ticket, __ATOMIC_SEQ_CST);
    if (__atomic_load_n(&P.sleepers, __ATOMIC_SEQ_CST)) {
        pthread_mutex_lock(&P.mu);
        pthread_cond_broadcast(&P.work);
        pthread_mutex_unlock(&P.mu);
    }
    run_ranges(ticket);
    if (!spin_until(job_finished, (uint64_t)ranges)) {
        pthread_mutex_lock(&P.mu);
        __atomic_store_n(&P.owner_sleeps, 1, __ATOMIC_SEQ_CST);
        while (!job_finished((uint64_t)ranges)) pthread_cond_wait(&P.done, &P.mu);
        __atomic_store_n(&P.owner_sleeps, 0, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&P.mu);
    }
    int32_t failed = __atomic_load_n(&P.failed, __ATOMIC_RELAXED);
    size_t bytes = P.fail_bytes;
    const char *what = P.fail_what;
    pthread_mutex_unlock(&P.owner);
    if (failed) scratch_oom(bytes, what);
}
