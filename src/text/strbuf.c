/* strbuf.c - the growing text of strbuf.h. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "buffer.h"
#include "strbuf.h"

void strbuf_put(strbuf *b, const char *p, size_t n) {
    if (b->oom || n == 0) return;
    if (b->n + n + 1 > b->cap) { /* doubling, so a long text costs amortized O(1) an append */
        size_t c = b->cap ? b->cap : 256;
        while (c < b->n + n + 1) c *= 2;
        void *s = b->s;
        if (buffer_grow(&s, &b->cap, c)) { b->oom = 1; return; }
        b->s = s;
    }
    memcpy(b->s + b->n, p, n);
    b->n += n;
    b->s[b->n] = 0;
}

void strbuf_str(strbuf *b, const char *s) { strbuf_put(b, s, strlen(s)); }

void strbuf_fmt(strbuf *b, const char *fmt, ...) {
    char tmp[256];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    if ((size_t)n < sizeof tmp) { strbuf_put(b, tmp, (size_t)n); return; }
    char *big = malloc((size_t)n + 1); /* a long item (a format's rule): formatted again at its size */
    if (!big) { b->oom = 1; return; }
    va_start(ap, fmt);
    vsnprintf(big, (size_t)n + 1, fmt, ap);
    va_end(ap);
    strbuf_put(b, big, (size_t)n);
    free(big);
}

void strbuf_lit(strbuf *b, const char *p, size_t n) {
    strbuf_str(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)p[i];
        if (ch == '"' || ch == '\\') strbuf_fmt(b, "\\%c", ch);
        else if (ch < 0x20 || ch == 0x7F) strbuf_fmt(b, "\\x%02X", ch);
        else strbuf_put(b, (const char *)&ch, 1);
    }
    strbuf_str(b, "\"");
}
