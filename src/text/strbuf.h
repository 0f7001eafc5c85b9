/* strbuf.h - a growing NUL-terminated text, as the schema compiler writes grammar text
 * (strbuf.c). A failed allocation sets oom and makes every later append do nothing, so a writer
 * checks once at the end. */
#ifndef DSV41_STRBUF_H
#define DSV41_STRBUF_H

#include <stddef.h>

typedef struct {
    char *s;      /* [cap] the text, NUL-terminated; NULL while empty */
    size_t n, cap;
    int oom;      /* an allocation failed: the text is incomplete */
} strbuf;

void strbuf_put(strbuf *b, const char *p, size_t n);
void strbuf_str(strbuf *b, const char *s);
void strbuf_fmt(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* p [n] as a grammar literal (grammar.c's form: quotes, with " \ and controls escaped). */
void strbuf_lit(strbuf *b, const char *p, size_t n);

/* The length of the UTF-8 character whose first byte is ch (1 for a byte that starts none). */
static inline int utf8_len(unsigned char ch) { return ch < 0x80 ? 1 : ch >= 0xF0 ? 4 : ch >= 0xE0 ? 3 : ch >= 0xC0 ? 2 : 1; }

#endif
