/* jbuf.c - the server's output buffer and JSON writer. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jbuf.h"

void jb_put(jbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = 1;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void jb_puts(jbuf *b, const char *s) { jb_put(b, s, strlen(s)); }

void jb_printf(jbuf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) {
        jb_put(b, tmp, (size_t)n);
        return;
    }
    char *big = malloc((size_t)n + 1);
    if (!big) {
        b->oom = 1;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    jb_put(b, big, (size_t)n);
    free(big);
}

void jb_str(jbuf *b, const char *s, size_t n) {
    jb_put(b, "\"", 1);
    size_t run = 0; /* bytes copied as they are, flushed before each escape */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        jb_put(b, s + run, i - run);
        run = i + 1;
        if (c == '"') jb_put(b, "\\\"", 2);
        else if (c == '\\') jb_put(b, "\\\\", 2);
        else if (c == '\n') jb_put(b, "\\n", 2);
        else if (c == '\r') jb_put(b, "\\r", 2);
        else if (c == '\t') jb_put(b, "\\t", 2);
        else jb_printf(b, "\\u%04x", c);
    }
    jb_put(b, s + run, n - run);
    jb_put(b, "\"", 1);
}

void jb_value(jbuf *b, const dsv41_json *v) {
    int is_int;
    double x;
    switch (dsv41_json_type_of(v)) {
    case DSV41_JSON_NULL: jb_puts(b, "null"); break;
    case DSV41_JSON_BOOL: jb_puts(b, dsv41_json_num(v, NULL) != 0 ? "true" : "false"); break;
    case DSV41_JSON_NUM:
        x = dsv41_json_num(v, &is_int);
        /* %.17g reads back to the same double; integers that fit a double exactly as integers */
        if (is_int && fabs(x) < 9007199254740992.0) jb_printf(b, "%" PRId64, (int64_t)x);
        else jb_printf(b, "%.17g", x);
        break;
    case DSV41_JSON_STR: jb_str(b, dsv41_json_str(v), dsv41_json_len(v)); break;
    case DSV41_JSON_ARR:
        jb_put(b, "[", 1);
        for (size_t i = 0; i < dsv41_json_len(v); i++) {
            if (i) jb_put(b, ",", 1);
            jb_value(b, dsv41_json_at(v, i));
        }
        jb_put(b, "]", 1);
        break;
    case DSV41_JSON_OBJ:
        jb_put(b, "{", 1);
        for (size_t i = 0; i < dsv41_json_len(v); i++) {
            const char *k = dsv41_json_key(v, i);
            if (i) jb_put(b, ",", 1);
            jb_str(b, k, strlen(k));
            jb_put(b, ":", 1);
            jb_value(b, dsv41_json_at(v, i));
        }
        jb_put(b, "}", 1);
        break;
    }
}

void jb_free(jbuf *b) {
    free(b->p);
    *b = (jbuf){0};
}
