/* trace.c - named captures of intermediates. Every recorder returns at once when the trace is
 * NULL, so a forward without a trace does no copying. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "scratch.h"

dsv41_trace *dsv41_trace_new(void) {
    dsv41_trace *t = calloc(1, sizeof *t);
    if (!t) set_error("out of memory: %zu bytes for a trace", sizeof *t);
    return t;
}

void dsv41_trace_clear(dsv41_trace *t) {
    if (!t) return;
    for (size_t i = 0; i < t->n; i++) free(t->caps[i].v);
    t->n = 0;
}

void dsv41_trace_free(dsv41_trace *t) {
    if (!t) return;
    dsv41_trace_clear(t);
    free(t->caps);
    free(t);
}

/* A new capture with the formatted name; a capture of the same name is replaced. Its values
 * are allocated before the trace changes, so a failure (scratch_oom) leaves it as it was. */
static capture *put(dsv41_trace *tr, int32_t ndim, const int64_t *shape, int is_int, const char *fmt, va_list ap) {
    char name[64];
    vsnprintf(name, sizeof name, fmt, ap);
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    double *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) scratch_oom((size_t)(n ? n : 1) * sizeof *v, "a trace capture");
    capture *c = (capture *)trace_find(tr, name);
    if (c) {
        free(c->v);
    } else {
        if (tr->n == tr->cap) {
            size_t cap = tr->cap ? tr->cap * 2 : 256;
            capture *grown = realloc(tr->caps, cap * sizeof *grown);
            if (!grown) {
                free(v);
                scratch_oom(cap * sizeof *grown, "a trace's list of captures");
            }
            tr->caps = grown;
            tr->cap = cap;
        }
        c = &tr->caps[tr->n++];
    }
    memset(c, 0, sizeof *c);
    snprintf(c->name, sizeof c->name, "%s", name);
    c->ndim = ndim;
    c->n = n;
    for (int i = 0; i < ndim; i++) c->shape[i] = shape[i];
    c->is_int = is_int;
    c->v = v;
    return c;
}

#define TRACE_BODY(is_int)                                    \
    if (!tr) return;                                          \
    va_list ap;                                               \
    va_start(ap, fmt);                                        \
    capture *c = put(tr, ndim, shape, is_int, fmt, ap);       \
    va_end(ap);                                               \
    for (int64_t i = 0; i < c->n; i++) c->v[i] = (double)x[i];

void trace_f32(dsv41_trace *tr, const float *x, int32_t ndim, const int64_t *shape, const char *fmt, ...) { TRACE_BODY(0) }
void trace_i32(dsv41_trace *tr, const int32_t *x, int32_t ndim, const int64_t *shape, const char *fmt, ...) { TRACE_BODY(1) }
void trace_i64(dsv41_trace *tr, const int64_t *x, int32_t ndim, const int64_t *shape, const char *fmt, ...) { TRACE_BODY(1) }

const capture *trace_find(const dsv41_trace *tr, const char *name) {
    for (size_t i = 0; i < tr->n; i++)
        if (strcmp(tr->caps[i].name, name) == 0) return &tr->caps[i];
    return NULL;
}
