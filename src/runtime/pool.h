/* pool.h - a fixed set of worker threads that split loops into contiguous ranges.
 *
 * Work is split by output rows, and every row is computed the same way whatever thread takes
 * it, so results never depend on the thread count. */
#ifndef DSV41_POOL_H
#define DSV41_POOL_H

#include <stdint.h>

/* fn handles items [begin, end) */
typedef void (*pool_fn)(void *ctx, int64_t begin, int64_t end);

/* Runs fn over [0, n) in up to 4 ranges per thread of at least min_per_thread items, which
 * the pool's threads (the caller is one of them) take in turn as they get free; small loops
 * run inline. Returns when every range is done; a range that ran out of memory raises again
 * here, on the caller's thread (scratch.h). */
void pool_run(int64_t n, int64_t min_per_thread, pool_fn fn, void *ctx);
int32_t pool_threads(void);

#endif
