/* scratch.c - the per-thread bump arena and the catch points of a failed allocation (see
 * scratch.h). */
#include "dsv41_dev.h"
#include "error.h"
#include "scratch.h"

#include <pthread.h>
#include <setjmp.h>
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
            size_t want = top.block > 0 ? 2 * blocks[top.block - 1].size : SCRATCH_MIN, size = n > want ? n : want;
            if (!b->base && top.block == 0) { /* the thread's first block: free them all when it ends */
                pthread_once(&owner_once, make_owner);
                pthread_setspecific(owner, blocks);
            }
            free(b->base);
            b->size = 0; /* as the block is, should the next line fail */
            b->base = aligned_alloc(64, size);
            if (!b->base) scratch_oom(size, "the scratch arena");
            b->size = size;
            continue;
        }
        if (top.block + 1 >= SCRATCH_BLOCKS) scratch_oom(n, "the scratch arena (all its blocks in use)");
        top.block++;
        top.used = 0;
    }
}

/* ---- out of memory */
typedef struct catch_point {
    jmp_buf env;               /* where scratch_oom returns to */
    struct catch_point *outer; /* the catch point this one is inside, or NULL */
    scratch_mark mark;         /* the thread's scratch when it was set */
} catch_point;

static _Thread_local catch_point *innermost;      /* the thread's catch points, innermost first */
static _Thread_local struct {
    size_t bytes;              /* the allocation that failed last on this thread */
    const char *what;
} last;

/* Nothing the jump returns to changes after setjmp: c is written before it and only read
 * after, so no local needs to be volatile. */
int scratch_run(void (*fn)(void *ctx), void *ctx) {
    catch_point c = {.outer = innermost, .mark = scratch_begin()};
    innermost = &c;
    if (setjmp(c.env) == 0) {
        fn(ctx);
        innermost = c.outer;
        return 0;
    }
    innermost = c.outer;
    scratch_end(c.mark);
    return set_error("out of memory: %zu bytes for %s", last.bytes, last.what);
}

_Noreturn void scratch_oom(size_t bytes, const char *what) {
    last.bytes = bytes;
    last.what = what;
    if (!innermost) dsv41_assert_fail("a raise inside scratch_run", __FILE__, __LINE__); /* even under NDEBUG */
    longjmp(innermost->env, 1);
}

void scratch_last_oom(size_t *bytes, const char **what) {
    *bytes = last.bytes;
    *what = last.what;
}
