/* buffer.c - growing a malloc'd buffer (buffer.h). */
#include <stdlib.h>

#include "buffer.h"

int buffer_grow(void **buf, size_t *cap, size_t n) {
    if (n <= *cap) return 0;
    void *p = realloc(*buf, n);
    if (!p) return -1;
    *buf = p;
    *cap = n;
    return 0;
}
