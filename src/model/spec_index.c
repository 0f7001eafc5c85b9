/* spec_index.c - the index-key cache a verify row reads. Apart from the verify (spec.c), which
 * runs a forward, because attention.c asks it for every row of a verify. */
#include "spec.h"

const uint8_t *spec_index_owner(const dsv41_session *s, int32_t p, int32_t l) {
    const config *c = &s->m->cfg;
    const spec_journal *j = s->verify;
    for (int32_t q = p; q >= j->pos0; q--)
        for (int32_t k = (q == p ? l : c->n_layers) - 1; k >= 0; k--)
            if (c->is_kv_source[k] && (q + 1) % c->compress_ratio[k] == 0) return s->layers[k].ik;
    return j->index_k0;
}
