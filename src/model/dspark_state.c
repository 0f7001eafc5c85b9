/* dspark_state.c - a session's DSpark drafter state: made, emptied, copied, freed. Apart from
 * the drafter's forward (dspark.c), which runs attention over the session, because the session
 * owns this state and sits below attention. */
#include <stdlib.h>
#include <string.h>

#include "dspark.h"

static size_t taps_size(const config *c) { return (size_t)c->window_size * c->dspark_n_targets * c->dim; }
static size_t rings_size(const config *c) { return (size_t)c->n_mtp_layers * c->window_size * c->head_dim; }

dspark_state *dspark_state_new(const dsv41_model *m) {
    dspark_state *d = calloc(1, sizeof *d);
    if (!d) return NULL;
    d->taps = calloc(taps_size(&m->cfg), sizeof *d->taps);
    d->rings = calloc(rings_size(&m->cfg), sizeof *d->rings);
    if (!d->taps || !d->rings) {
        dspark_state_free(d);
        return NULL;
    }
    return d;
}

void dspark_state_free(dspark_state *d) {
    if (!d) return;
    free(d->taps);
    free(d->rings);
    free(d);
}

void dspark_state_clear(const dsv41_model *m, dspark_state *d) {
    memset(d->rings, 0, rings_size(&m->cfg) * sizeof *d->rings);
    d->lo = d->hi = 0;
}

void dspark_state_copy(const dsv41_model *m, dspark_state *dst, const dspark_state *src) {
    memcpy(dst->taps, src->taps, taps_size(&m->cfg) * sizeof *dst->taps);
    memcpy(dst->rings, src->rings, rings_size(&m->cfg) * sizeof *dst->rings);
    dst->lo = src->lo;
    dst->hi = src->hi;
}

