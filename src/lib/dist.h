/* dist.h - the library's side of a model split across the ranks of a job (dist.c).
 *
 * Rank 0 leads: the public calls that change what the model or a session holds are sent to
 * the other ranks, which repeat them (dsv41_follow). Inside a forward every rank computes the
 * same replicated values, runs its share of the experts, table rows and head rows, and the
 * shares are exchanged whole, so every rank ends each step with the same bits. */
#ifndef DSV41_DIST_H
#define DSV41_DIST_H

#include "model.h"

/* The local loaders the public ones wrap (checkpoint.c, golden.c, filler.c). */
dsv41_model *checkpoint_load(const char *dir);
dsv41_model *golden_model(const dsv41_golden *g);
const char *golden_path(const dsv41_golden *g);
dsv41_model *builtin_model(void);

/* Leader hooks: each tells the followers (nothing on a follower or for a whole model). */
void dist_model_free(const dsv41_model *m);
void dist_session_new(dsv41_session *s);
void dist_session_free(const dsv41_session *s);
void dist_threads(int32_t n);
/* Around a forward of n ids: flags say what the leader's call asks for (the followers ask the
 * same, so every rank runs the same collectives). end unlocks what begin locked. */
enum { FWD_LOGITS = 1, FWD_ALL = 2, FWD_TRACE = 4 };
void dist_forward_begin(const dsv41_session *s, const int32_t *ids, int32_t n, int32_t flags);
void dist_forward_end(const dsv41_session *s);

/* MoE: ys [first[e1] - first[e0]][dim] holds the outputs of this rank's picks among experts
 * [e0, e1) (first as in moe.c); on return, every pick's. The outputs are bf16 values and travel
 * as bf16. */
void dist_share_picks(const dsv41_model *m, const int64_t *first, int32_t e0, int32_t e1, float *ys);
/* out [n][table cols] = bf16(table row rows[i]) for every i, each row read by its owner and
 * sent as stored (e4m3 and its e8m0 scales). */
void dist_table_rows(const dsv41_model *m, const weight *table, const int64_t *rows, int64_t n, float *out);
/* y [T][w rows] = linear(w, x): each rank computes its share of the rows, all ranks get all. */
void dist_linear(const dsv41_model *m, const weight *w, const float *x, int64_t T, float *y);

/* What each rank measured, for the benchmark. */
typedef struct {
    double triad_gbps;     /* this rank's triad, run on every rank at once */
    double peak_rss;       /* bytes */
    double decode_bytes;   /* weights this rank reads per decoded token (its shares) */
    double sent;           /* bytes this rank sent since the previous report */
} rank_report;
/* Every rank fills its report (measure 0: only resets the sent count); all [n_ranks]. */
void dist_report(const dsv41_model *m, int32_t measure, rank_report *all);
/* bench.c: the triad and the peak resident memory of this process */
double bench_triad_gbps(void);
double bench_peak_rss(void);

#endif
