/* session_v2.h - a session file as a version 2 build wrote it, for the tests that read one.
 *
 * Version 2 (docs/SESSION_FORMAT.md) kept the last call's top-k and candidate blocks at the end
 * of the state; version 3 has the same layout with no such rows. A version 2 file of a session is
 * its version 3 file with those rows put back, read from a trace of the session's last call: the
 * slots as the last source layer left them. */
#ifndef DSV41_SESSION_V2_H
#define DSV41_SESSION_V2_H

#include <stdlib.h>
#include <string.h>

#include "model.h"

static void v2_put(uint8_t **p, uint32_t v) {
    for (int i = 0; i < 4; i++) *(*p)++ = (uint8_t)(v >> 8 * i);
}

/* The bytes of the drafter's section that ends m's session file before its checksum
 * (docs/SESSION_FORMAT.md): lo and hi, the taps and the per-stage key rings; 0 for a model
 * without DSpark stages */
static size_t session_draft_bytes(const dsv41_model *m) {
    const config *c = &m->cfg;
    return m->draft ? 8 + 4 * ((size_t)c->window_size * c->dspark_n_targets * c->dim +
                               (size_t)c->n_mtp_layers * c->window_size * c->head_dim) : 0;
}

/* The checksum that ends the session file f [n] written anew, after a test's edit */
static void session_reseal(uint8_t *f, size_t n) {
    uint64_t sum = checksum64(f, n - 8);
    for (int i = 0; i < 8; i++) f[n - 8 + i] = (uint8_t)(sum >> 8 * i);
}

/* The version 2 file of the session whose version 3 file is v3 [n] and whose last call tr traced
 * (*out_n its length; NULL when out of memory). */
static uint8_t *session_file_v2(const dsv41_model *m, const uint8_t *v3, size_t n, const dsv41_trace *tr, size_t *out_n) {
    const config *c = &m->cfg;
    int32_t last = -1, cs = c->candidate_source_layer, block = c->candidate_block_size;
    for (int32_t l = 0; l < c->n_layers; l++)
        if (c->is_index_source[l]) last = l;
    char name[64];
    snprintf(name, sizeof name, "shared.L%d.topk_idxs", last);
    const capture *tk = last >= 0 ? trace_find(tr, name) : NULL;
    snprintf(name, sizeof name, "shared.L%d.candidates", cs);
    const capture *cd = cs >= 0 ? trace_find(tr, name) : NULL;
    int64_t rows = tk ? tk->shape[1] : 0, width = tk ? tk->shape[2] : 0, crows = cd ? cd->shape[1] : 0;
    int32_t cwidth = cd ? (int32_t)cd->shape[2] : 0, kb = crows ? cand_blocks(c, cwidth) : 0;
    uint64_t dn = 0;
    for (int i = 7; i >= 0; i--) dn = dn << 8 | v3[64 + i];
    size_t at = n - 8 - dn - session_draft_bytes(m), add = 4 * (size_t)(rows * width + crows * kb); /* the state ends at `at` */
    uint8_t *f = malloc(n + add), *p = f + at;
    if (!f) return NULL;
    memcpy(f, v3, at);
    for (int64_t i = 0; i < rows * width; i++) v2_put(&p, (uint32_t)(int32_t)tk->v[i]);
    for (int64_t r = 0; r < crows; r++) { /* the mask's kept blocks ascending, then -1 */
        int32_t j = 0;
        for (int32_t b = 0; b * block < cwidth && j < kb; b++)
            if (cd->v[r * cwidth + b * block] != 0) v2_put(&p, (uint32_t)b), j++;
        for (; j < kb; j++) v2_put(&p, (uint32_t)-1);
    }
    memcpy(p, v3 + at, n - 8 - at);
    p = f + 8;
    v2_put(&p, 2);
    p = f + 48;
    v2_put(&p, (uint32_t)rows);
    v2_put(&p, (uint32_t)width);
    v2_put(&p, (uint32_t)crows);
    v2_put(&p, (uint32_t)cwidth);
    session_reseal(f, n + add);
    *out_n = n + add;
    return f;
}

#endif
