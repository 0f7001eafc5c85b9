/* spec.h - verifying drafts (spec.c): k+1 rows in one forward, each row seeing exactly what a
 * one-token step at its position would, and a rollback to the accepted rows. attention.c runs
 * the rows of a verify through attend_verify, which fills this journal. */
#ifndef DSV41_SPEC_H
#define DSV41_SPEC_H

#include "model.h"

typedef struct spec_journal {
    int32_t pos0, T;            /* the call's first position and its rows */
    const uint8_t *index_k0;    /* shared.index_k when the call began */
    uint8_t *ring_old;          /* [n_layers][T][window_row_bytes] the ring slots the rows overwrote */
    float **tail;               /* [n_layers] kv sources at ratio > 1: [T][2][ratio][head_dim] the
                                 * compressor tail (kv, score) after each row; NULL elsewhere */
    int32_t *cand;              /* [T][cand_cap] the candidate source's kept blocks of each row
                                 * (cand_blocks of its width, ascending, -1 after) */
    int32_t *cand_width;        /* [T] the entries each row's blocks cover */
    int32_t cand_cap;           /* blocks of a cand row: the most a row keeps */
} spec_journal;

/* spec_index.c: the index-key cache a one-token step at position p would read at layer l: the
 * last one published before it (by a layer before l at p, else by the latest step before), from the
 * rows of the call or, before them, what was published when it began. */
const uint8_t *spec_index_owner(const dsv41_session *s, int32_t p, int32_t l);

#endif
