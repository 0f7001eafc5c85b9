/* nprandom.h - numpy's Generator stream, for the Engram multipliers. */
#ifndef DSV41_NPRANDOM_H
#define DSV41_NPRANDOM_H

#include <stdint.h>

/* out [n] = numpy.random.default_rng(seed).integers(0, bound, size=n, dtype=int64), seed < 2^64, bound >= 1 */
void np_rng_integers(uint64_t seed, int64_t bound, int32_t n, int64_t *out);

#endif
