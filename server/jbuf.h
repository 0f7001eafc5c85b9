/* jbuf.h - a growable byte buffer and the JSON the server writes into it.
 *
 * Every writer appends; a failed allocation sets oom and turns later appends into no-ops, so a
 * reply is built without checking each step and checked once at the end. */
#ifndef SERVE_JBUF_H
#define SERVE_JBUF_H

#include <stddef.h>
#include <stdint.h>

#include "dsv41.h"

typedef struct {
    char *p;    /* [n] bytes, NUL-terminated when cap > 0 */
    size_t n;   /* bytes written */
    size_t cap; /* bytes allocated */
    int oom;    /* an allocation failed: the content is incomplete */
} jbuf;

void jb_put(jbuf *b, const char *s, size_t n);
void jb_puts(jbuf *b, const char *s);
void jb_printf(jbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* A JSON string literal of n bytes (UTF-8 passes through; control bytes are escaped). */
void jb_str(jbuf *b, const char *s, size_t n);
/* Any parsed value, compact; numbers keep their exact value. */
void jb_value(jbuf *b, const dsv41_json *v);
void jb_free(jbuf *b);

#endif
