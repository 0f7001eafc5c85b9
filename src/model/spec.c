/* spec.c - speculative decoding: verify a block of drafts in one forward, keep what greedy
 * decoding keeps.
 *
 * The target runs the anchor and the k drafts as k+1 rows of one forward at positions
 * pos..pos+k, and each row computes exactly what a one-token step at its position computes
 * (attend_verify in attention.c: its own window, compressor and indexer steps in row order, the
 * index keys and candidate mask that step would read); every projection, MoE and head reads its
 * weights once for all the rows, which is where the time goes. Row j's logits decide draft
 * j+1: greedy decoding would have fed it exactly when it is row j's argmax, so the rows up to
 * the first miss are kept and the session is put back to what those rows alone would have left:
 * the ring slots the rejected rows overwrote, the compressor tails as they were after the last
 * kept row, the compressed rows and index keys of the groups rejected rows closed (zero, as
 * never-written rows are), the published index-key cache as of the last kept step, the Engram
 * history, the drafter's taps. */
#include <stdlib.h>
#include <string.h>

#include "dspark.h"
#include "numerics.h"
#include "spec.h"

/* Whether every row's indexer finds, in the keys it reads, every entry it may see: a key cache
 * published in an earlier step by a later layer holds only the rows written before this call
 * (it has not run for the call's rows yet when the earlier layer does). */
static int owners_ready(const dsv41_session *s, int32_t n) {
    const config *c = &s->m->cfg;
    for (int32_t l = 0; l < c->n_layers; l++) {
        if (!c->is_index_source[l] || !c->compress_ratio[l]) continue;
        for (int32_t p = s->pos; p < s->pos + n; p++) {
            const uint8_t *own = spec_index_owner(s, p, l);
            int32_t k = slot_layer(s, own, 1);
            if (k > l && (p + 1) / c->compress_ratio[l] > s->pos / c->compress_ratio[k]) return 0;
            if (k < 0 && (p + 1) / c->compress_ratio[l] > 0) return 0;
        }
    }
    return 1;
}

static void journal_free(const config *c, spec_journal *j) {
    for (int32_t l = 0; j->tail && l < c->n_layers; l++) free(j->tail[l]);
    free(j->tail);
    free(j->ring_old);
    free(j->cand);
    free(j->cand_width);
}

static int journal_new(const dsv41_session *s, int32_t n, spec_journal *j) {
    const config *c = &s->m->cfg;
    memset(j, 0, sizeof *j);
    j->pos0 = s->pos;
    j->T = n;
    j->index_k0 = s->shared.index_k;
    j->cand_cap = c->candidate_topk_blocks > 0 ? c->candidate_topk_blocks : 1;
    j->ring_old = malloc((size_t)c->n_layers * n * window_row_bytes(c));
    j->tail = calloc((size_t)c->n_layers, sizeof *j->tail);
    j->cand = malloc((size_t)n * j->cand_cap * sizeof *j->cand);
    j->cand_width = calloc((size_t)n, sizeof *j->cand_width);
    int ok = j->ring_old && j->tail && j->cand && j->cand_width;
    for (int32_t l = 0; ok && l < c->n_layers; l++)
        if (c->is_kv_source[l] && c->compress_ratio[l] > 1)
            ok = (j->tail[l] = malloc((size_t)n * 2 * c->compress_ratio[l] * c->head_dim * sizeof(float))) != NULL;
    if (!ok) {
        journal_free(c, j);
        return set_error("out of memory verifying drafts");
    }
    return 0;
}

/* s back to the first `keep` rows of the call the journal describes */
static void rollback(dsv41_session *s, const spec_journal *j, int32_t keep) {
    const config *c = &s->m->cfg;
    int32_t hd = c->head_dim, W = c->window_size, end = j->pos0 + j->T, at = j->pos0 + keep;
    size_t wb = window_row_bytes(c);
    for (int32_t l = 0; l < c->n_layers; l++) {
        layer_state *st = &s->layers[l];
        for (int32_t t = keep; t < j->T; t++)
            memcpy(st->window + ((j->pos0 + t) % W) * wb, j->ring_old + ((int64_t)l * j->T + t) * wb, wb);
        if (!c->is_kv_source[l]) continue;
        int32_t r = c->compress_ratio[l];
        if (j->tail[l]) {
            const float *tail = j->tail[l] + (int64_t)(keep - 1) * 2 * r * hd;
            memcpy(st->kv_state, tail, (size_t)r * hd * sizeof(float));
            memcpy(st->score_state, tail + r * hd, (size_t)r * hd * sizeof(float));
        }
        for (int32_t g = at / r; g < end / r; g++) {
            memset(st->ckv + g * ckv_row_bytes(c), 0, ckv_row_bytes(c));
            memset(st->ik + g * ik_row_bytes(c), 0, ik_row_bytes(c));
        }
    }
    s->shared.index_k = spec_index_owner(s, at - 1, c->n_layers);
    memset(s->ngram_cache + at, 0, (size_t)(end - at) * sizeof *s->ngram_cache);
    if (s->draft) dspark_truncate(s->draft, at);
    s->pos = at;
}

int32_t dsv41_session_verify(dsv41_session *s, const int32_t *ids, int32_t n) {
    const config *c = &s->m->cfg;
    int64_t V = c->vocab_size;
    if (n < 1 || n > c->window_size) return set_error("verify: %d rows (1 to the window's %d)", n, c->window_size);
    if (s->m->part.n_ranks > 1) return set_error("verify: not supported on a model split over ranks");
    if (s->pos < 1) return set_error("verify: the session needs its prefill first");
    if ((int64_t)s->pos + n > c->max_seq_len)
        return set_error("verify: %d rows at position %d exceed the context of %d tokens", n, s->pos, c->max_seq_len);
    spec_journal j;
    if (journal_new(s, n, &j)) return -1;
    s->verify = &j;
    if (!owners_ready(s, n)) {
        s->verify = NULL;
        journal_free(c, &j);
        return set_error("verify: %d rows at position %d would read index keys not written yet (too early)", n, s->pos);
    }
    if (s->draft) dspark_flush(s->m, s->draft);
    float *logits = malloc((size_t)(n * V) * sizeof *logits);
    int rc = logits ? forward_verify(s, ids, n, logits) : set_error("out of memory verifying drafts");
    int32_t m = 0;
    if (rc == 0) {
        while (m + 1 < n && argmax_f32(logits + m * V, V) == ids[m + 1]) m++;
        if (m + 1 < n) rollback(s, &j, m + 1);
        memcpy(s->logits, logits + m * V, (size_t)V * sizeof *logits);
        s->has_logits = 1;
    }
    s->verify = NULL;
    journal_free(c, &j);
    free(logits);
    return rc ? -1 : m;
}

int32_t dsv41_session_speculate(dsv41_session *s, int32_t anchor, int32_t n_draft, int32_t *out) {
    const config *c = &s->m->cfg;
    int32_t B = dsv41_model_draft_size(s->m), ids[MAX_LAYERS], n = n_draft < B ? n_draft : B;
    if (n_draft < 0) return set_error("speculate: %d drafts", n_draft);
    if (n > c->window_size - 1) n = c->window_size - 1;
    ids[0] = anchor;
    int32_t m = n > 0 && dsv41_session_draft(s, anchor, n, ids + 1, NULL, NULL) == 0 ? dsv41_session_verify(s, ids, n + 1) : -1;
    if (m < 0) { /* no block here (the first step after a prefill, the end of the context): one token */
        if (dsv41_session_forward(s, &anchor, 1, s->logits, NULL)) return -1;
        m = 0;
    }
    memcpy(out, ids + 1, (size_t)m * sizeof *out);
    out[m] = argmax_f32(s->logits, c->vocab_size);
    return m + 1;
}
