/* dist.h - the control of a model split across the ranks of a job (dist.c).
 *
 * Rank 0 leads: the public calls that change what the model or a session holds are sent to
 * the other ranks, which repeat them (dsv41_follow); the leader's hooks (runtime/lead.h) are
 * how those calls, low in the library, reach this file. The exchanges inside a forward are
 * model/collective.h. */
#ifndef DSV41_LIB_DIST_H
#define DSV41_LIB_DIST_H

#include "model.h"

/* What the leader tells the followers. */
enum { OP_END, OP_LOAD_DIR, OP_LOAD_GOLDEN, OP_LOAD_BUILTIN, OP_MODEL_FREE, OP_SESSION_NEW, OP_SESSION_FREE,
       OP_FORWARD, OP_THREADS, OP_REPORT, OP_DRAFT, OP_VERIFY, OP_SESSION_RESET, OP_SESSION_COPY, OP_PREFILL_ROWS,
       OP_SESSION_LOAD };

/* The public loaders' one path (open.c): op is one of the OP_LOAD_ ops; the model of dir, of
 * the golden at path (g: that golden, loaded) or the built-in one, loaded on every rank, which
 * then vote (path: what the followers load). */
dsv41_model *dist_load(int32_t op, const char *path, const dsv41_golden *g);

/* What each rank measured, for the benchmark. */
typedef struct {
    double triad_gbps;     /* this rank's triad, run on every rank at once */
    double peak_rss;       /* bytes */
    double decode_bytes;   /* weights this rank reads per decoded token (its shares) */
    double sent;           /* bytes this rank sent so far */
    double gathers;        /* all-gathers this rank took part in so far */
    double gather_s;       /* one all-gather of a token's dim activations (bf16, each rank its
                            * share), timed on every rank at once: the per-message cost */
} rank_report;
/* Every rank fills its report (measure 0: only resets the sent count); all [n_ranks]. */
void dist_report(const dsv41_model *m, int32_t measure, rank_report *all);

#endif
