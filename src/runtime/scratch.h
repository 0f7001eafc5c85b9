/* scratch.h - a per-thread bump arena for the forward pass's temporaries.
 *
 * Blocks are kept between calls, so after the first forward of a given size no call
 * allocates: a decode step reuses the same memory every token. A function takes a mark on
 * entry, allocates freely, and resets to the mark on exit. */
#ifndef DSV41_SCRATCH_H
#define DSV41_SCRATCH_H

#include <stddef.h>
#include <stdint.h>

typedef struct {
    int32_t block;
    size_t used;
} scratch_mark;

scratch_mark scratch_begin(void);
void scratch_end(scratch_mark mark);
void *scratch_bytes(size_t n); /* 64-byte aligned, uninitialized; scratch_oom when out of memory */
static inline float *scratch_f32(int64_t n) { return (float *)scratch_bytes((size_t)n * sizeof(float)); }
static inline int32_t *scratch_i32(int64_t n) { return (int32_t *)scratch_bytes((size_t)n * sizeof(int32_t)); }
static inline int64_t *scratch_i64(int64_t n) { return (int64_t *)scratch_bytes((size_t)n * sizeof(int64_t)); }

/* Out of memory: an allocation that fails inside a computation ends the call, never the process.
 *
 * A forward takes memory in a few hundred places: its scratch arena (below), the shared
 * top-k and candidate rows that grow with a call (indexer.c, attention.c), a trace's captures;
 * many of them in pool jobs on worker threads. A return code checked at every one of them would
 * thread an error through every kernel and job for an event that ends the call anyway. So a
 * failed allocation raises instead: scratch_oom jumps to the innermost scratch_run of its thread,
 * which puts the thread's scratch back where that scratch_run began and returns -1 with
 * dsv41_error() naming the bytes and what they were for.
 *
 * Why that is safe, by construction rather than by care at each site:
 *  - a jump never leaves its thread, and every thread that computes has a catch point: each
 *    public entry that runs the layers (forward.c, spec.c, dspark.c) runs them under scratch_run,
 *    and the pool runs every range of a job under its own (pool.c). A worker's failure ends its
 *    range, which still counts as done, so the job ends as every job does, the pool's locks are
 *    released by the code that took them, and the job's owner raises again on its own thread
 *    after it has let go of the pool; a job run inside a job raises into the enclosing range.
 *  - between a catch point and any raise, no lock is held (the lead's lock of a model over
 *    ranks is taken and released outside the catch) and no memory is owned by a local alone:
 *    the scratch goes back to its mark, and what grows on the way (the session's shared rows,
 *    the trace's captures) belongs to a session or a trace that frees it.
 *  - what a jump leaves half written is the sessions' caches, so the entry empties every
 *    session the call ran (session_run), as a cancelled prefill does (include/dsv41.h): no later call reads
 *    a half-written row.
 * A raise with no catch point on its thread is a missing scratch_run, a bug: it asserts. */

/* Runs fn(ctx); 0, or -1 when an allocation inside it failed (dsv41_error() says which). */
int scratch_run(void (*fn)(void *ctx), void *ctx);
/* Ends the computation: `bytes` for `what` (a string literal) could not be had. */
_Noreturn void scratch_oom(size_t bytes, const char *what);
/* The thread's last failure, as scratch_oom was given it (for raising it again on another thread) */
void scratch_last_oom(size_t *bytes, const char **what);

#endif
