/* buffer.h - a malloc'd buffer that grows on demand (buffer.c): the session's caches and the
 * shared slots grow with the position instead of being sized for the whole context up front. */
#ifndef DSV41_BUFFER_H
#define DSV41_BUFFER_H

#include <stddef.h>

/* Grows the malloc'd *buf (capacity *cap bytes) to hold n bytes; its contents stay. 0 or -1. */
int buffer_grow(void **buf, size_t *cap, size_t n);

#endif
