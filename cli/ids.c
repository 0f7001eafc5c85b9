/* ids.c - the token ids of `run --ids`: given inline (A,B,C), from a file (@FILE) or from
 * stdin (-).
 *
 * A long prompt cannot be an argument (the system caps one near 128 KB), so a file or a pipe
 * carries it. The ids are separated by commas and/or white space, optionally inside one pair
 * of brackets, so that `dsv41 tokenize`'s JSON array reads back as it is. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"

/* The whole of f in a malloc'd, NUL-terminated buffer of *n bytes; NULL on a read error or no
 * memory. */
static char *read_all(FILE *f, size_t *n) {
    size_t cap = 1 << 16;
    char *buf = malloc(cap);
    *n = 0;
    for (size_t got; buf && (got = fread(buf + *n, 1, cap - *n - 1, f)) > 0;) {
        *n += got;
        if (*n + 1 < cap) continue;
        char *p = cap > ((size_t)-1) / 2 ? NULL : realloc(buf, cap * 2);
        if (!p) break;
        buf = p;
        cap *= 2;
    }
    if (!buf || *n + 1 == cap || ferror(f)) {
        free(buf);
        return NULL;
    }
    buf[*n] = '\0';
    return buf;
}

static int is_space(char ch) { return ch == ' ' || ch == '\t' || ch == '\n' || ch == '\r'; }

static const char *skip_space(const char *p, const char *end) {
    while (p < end && is_space(*p)) p++;
    return p;
}

/* A one-line error about the text at p (up to the next separator); returns -1. */
static int bad_at(const char *from, const char *p, const char *end, size_t k) {
    const char *w = p + (p < end);
    while (w < end && !is_space(*w) && *w != ',') w++;
    if (p == end) fprintf(stderr, "dsv41: run: --ids %s: a comma after id %zu with no id after it\n", from, k);
    else fprintf(stderr, "dsv41: run: --ids %s: '%.*s' (id %zu) is not a token id (a non-negative integer)\n", from,
                 (int)(w - p > 40 ? 40 : w - p), p, k + 1);
    return -1;
}

/* text [len] -> *ids [*n], malloc'd; `from` names the source in errors. 0, or -1 after a
 * one-line message on stderr. */
static int parse_list(const char *text, size_t len, const char *from, int32_t **ids, int32_t *n) {
    const char *end = text + len;
    if (memchr(text, '\0', len)) {
        fprintf(stderr, "dsv41: run: --ids %s holds a NUL byte: not a list of token ids\n", from);
        return -1;
    }
    const char *p = skip_space(text, end);
    while (end > p && is_space(end[-1])) end--;
    if (p < end && *p == '[') {
        if (end[-1] != ']') {
            fprintf(stderr, "dsv41: run: --ids %s: a '[' without its closing ']'\n", from);
            return -1;
        }
        p = skip_space(p + 1, --end);
    }
    if (p == end) {
        fprintf(stderr, "dsv41: run: --ids %s holds no token ids\n", from);
        return -1;
    }
    if ((size_t)(end - p) / 2 + 1 > (size_t)0x7FFFFFFF) {
        fprintf(stderr, "dsv41: run: --ids %s is too long\n", from);
        return -1;
    }
    size_t cap = (size_t)(end - p) / 2 + 1, k = 0; /* an id and a separator take 2 bytes at least */
    int32_t *out = malloc(cap * sizeof *out);
    if (!out) {
        fprintf(stderr, "dsv41: run: out of memory reading --ids %s\n", from);
        return -1;
    }
    while (p < end) {
        char *stop = (char *)p;
        errno = 0;
        long long v = *p >= '0' && *p <= '9' ? strtoll(p, &stop, 10) : -1;
        if (v < 0 || errno || v > 0x7FFFFFFF || (stop < end && !is_space(*stop) && *stop != ',')) {
            free(out);
            return bad_at(from, p, end, k);
        }
        out[k++] = (int32_t)v;
        p = skip_space(stop, end);
        if (p < end && *p == ',' && (p = skip_space(p + 1, end)) == end) {
            free(out);
            return bad_at(from, p, end, k);
        }
    }
    *ids = out;
    *n = (int32_t)k;
    return 0;
}

int ids_read(const char *spec, int32_t **ids, int32_t *n) {
    if (spec[0] != '@' && strcmp(spec, "-")) return parse_list(spec, strlen(spec), "list", ids, n);
    const char *path = spec[0] == '@' ? spec + 1 : NULL;
    FILE *f = path ? fopen(path, "rb") : stdin;
    if (!f) {
        fprintf(stderr, "dsv41: run: --ids @%s: %s\n", path, strerror(errno));
        return -1;
    }
    size_t len;
    char *text = read_all(f, &len);
    if (path) fclose(f);
    char from[96];
    snprintf(from, sizeof from, "%s%.80s", path ? "@" : "", path ? path : "- (stdin)");
    if (!text) {
        fprintf(stderr, "dsv41: run: --ids %s: cannot read it (a directory, or out of memory)\n", from);
        return -1;
    }
    int rc = parse_list(text, len, from, ids, n);
    free(text);
    return rc;
}
