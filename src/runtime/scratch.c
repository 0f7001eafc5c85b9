/* scratch.c - the per-thread bump arena (see scratch.h). */
#include "dsv41_dev.h"
#include "scratch.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#define SCRATCH_BLOCKS 64
#define SCRATCH_MIN (1u << 20)

typedef struct {
    unsigned char *base;
    size_t size;
} block;

static _Thread_local block blocks[SCRATCH_BLOCKS];
static _Thread_local scratch_mark top;

/* A thread's blocks go when the thread ends (a server's request threads come and go): the key's
 * destructor runs in the ending thread, before its thread-locals are gone. */
static pthread_key_t owner;
static pthread_once_t owner_once = PTHREAD_ONCE_INIT;

static void release_blocks(void *unused) {
    (void)unused;
    for (int i = 0; i < SCRATCH_BLOCKS; i++) {
        free(blocks[i].base);
        blocks[i] = (block){0};
    }
    top = (scratch_mark){0};
}

static void make_owner(void) { pthread_key_create(&owner, release_blocks); }

scratch_mark scratch_begin(void) { return top; }

/* Marks are restored in the reverse order they were taken: an inner function's end comes
 * before its caller's, so a mark never lies above the top it resets. */
void scratch_end(scratch_mark mark) {
    DSV41_ASSERT(mark.block < top.block || (mark.block == top.block && mark.used <= top.used));
    top = mark;
}

void *scratch_bytes(size_t n) {
    n = (n + 63) & ~(size_t)63;
    for (;;) {
        block *b = &blocks[top.block];
        if (b->base && top.used + n <= b->size) {
            void *p = b->base + top.used;
            top.used += n;
            return p;
        }
        if (!b->base || top.used == 0) { /* an empty block too small for n: replace it */
            /* at least twice the block before, so the 64 blocks never run out before memory */
            size_t want = top.block > 0 ? 2 * blocks[top.block - 1].size : SCRATCH_MIN;
            if (!b->base && top.block == 0) { /* the thread's first block: free them all when it ends */
                pthread_once(&owner_once, make_owner);
                pthread_setspecific(owner, blocks);
            }
            free(b->base);
            b->size = n > want ? n : want;
            b->base = aligned_alloc(64, b->size);
            if (!b->base) {
                fprintf(stderr, "dsv41: out of memory for %zu bytes of scratch\n", n);
                abort();
            }
            continue;
        }
        if (top.block + 1 >= SCRATCH_BLOCKS) {
            fprintf(stderr, "dsv41: scratch arena exhausted\n");
            abort();
        }
        top.block++;
        top.used = 0;
    }
}
