/* dspark.h - the DSpark drafter over a session (dspark.c): the release's forward_spec; its
 * state in a session (dspark_state.c). */
#ifndef DSV41_DSPARK_H
#define DSV41_DSPARK_H

#include "model.h"

typedef struct dspark_state {
    float *taps;                /* [window_size][n_targets*dim] taps of position p in slot p % window */
    int32_t lo, hi;             /* positions [lo, hi) have taps not yet in the rings; hi: the tapped end */
    float *rings;               /* [n_mtp_layers][window_size][head_dim] main keys, slot p % window */
} dspark_state;

/* dspark_state.c: a session's drafter state for m (which has a drafter), empty; NULL when out of memory. */
dspark_state *dspark_state_new(const dsv41_model *m);
void dspark_state_free(dspark_state *d);
/* Empties d as a new session's is. */
void dspark_state_clear(const dsv41_model *m, dspark_state *d);
/* dst as src is (both of model m). */
void dspark_state_copy(const dsv41_model *m, dspark_state *dst, const dspark_state *src);
/* Moves the waiting taps into the rings (before a verify, whose rejected rows' taps may take
 * the slots of positions still waiting). */
void dspark_flush(const dsv41_model *m, dspark_state *d);
/* Forgets the taps of positions from pos on (rows a verify rejected). */
void dspark_truncate(dspark_state *d, int32_t pos);
/* Records the taps of layer l's input h [T][hc][dim] for the sessions of seq that draft (l not
 * a target layer: nothing). Runs after the layer's Engram step, before its block. */
void dspark_tap(const batch_seq *seq, int32_t count, int32_t l, int64_t T, const float *h);
/* Bytes of weights a draft of n tokens reads (as model_rows_bytes counts a forward's); 0 for a
 * model without a drafter. */
double dspark_draft_bytes(const dsv41_model *m, int32_t n);

#endif
