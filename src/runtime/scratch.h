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
void *scratch_bytes(size_t n); /* 64-byte aligned, uninitialized; aborts on out-of-memory */
static inline float *scratch_f32(int64_t n) { return (float *)scratch_bytes((size_t)n * sizeof(float)); }
static inline int32_t *scratch_i32(int64_t n) { return (int32_t *)scratch_bytes((size_t)n * sizeof(int32_t)); }
static inline int64_t *scratch_i64(int64_t n) { return (int64_t *)scratch_bytes((size_t)n * sizeof(int64_t)); }

#endif
