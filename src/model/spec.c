/* spec.c - speculative decoding: verify a block of drafts in one forward, keep what token-by-
 * token decoding keeps.
 *
 * The target runs the anchor and the k drafts as k+1 rows of one forward at positions
 * pos..pos+k, and each row computes exactly what a one-token step at its position computes
 * (attend_verify in attention.c: its own window, compressor and indexer steps in row order, the
 * index keys and candidate mask that step would read); every projection, MoE and head reads its
 * weights once for all the rows, which is where the time goes. Row j's logits decide draft
 * j+1: decoding would have fed it exactly when it is the token picked from row j (the argmax
 * when greedy, a sampler's draw otherwise: see dsv41_session_verify), so the rows up to
 * the first miss are kept and the session is put back to what those rows alone would have left:
 * the ring slots the rejected rows overwrote, the compressor tails as they were after the last
 * kept row, the compressed rows and index keys of the groups rejected rows closed (zero, as
 * never-written rows are), the published index-key cache as of the last kept step, the Engram
 * history, the drafter's taps. */
#include <stdlib.h>
#include <string.h>

#include "collective.h"
#include "dspark.h"
#include "lead.h"
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
    memset(j, 0, sizeof *j); /* freed twice is a no-op: a failed journal_new has freed its own */
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

/* A batch's verify forward and its result, for session_run */
typedef struct {
    dsv41_session *const *s;
    const int32_t *const *ids;  /* [count][rows[i]] */
    const int32_t *rows;        /* [count] */
    int32_t count;
    float **logits;             /* [count][rows[i]][vocab] */
    int rc;
} verify_call;

static void run_verify(void *p) {
    verify_call *v = p;
    for (int32_t i = 0; i < v->count; i++)
        if (v->s[i]->verify && v->s[i]->draft) dspark_flush(v->s[i]->m, v->s[i]->draft);
    v->rc = forward_verify(v->s, v->ids, v->rows, v->count, v->logits);
}

/* The token after a row: pick's on a copy of the row's logits (row_copy [vocab]), history the n
 * ids fed up to the row; the row's argmax without a pick. */
static int32_t pick_next(const dsv41_session *s, dsv41_pick_fn pick, void *ctx, const float *row, int32_t n, float *row_copy,
                         int *last) {
    int64_t V = s->m->cfg.vocab_size;
    if (!pick) return argmax_f32(row, V);
    memcpy(row_copy, row, (size_t)V * sizeof *row);
    int32_t t = pick(ctx, row_copy, s->tokens, n, last);
    if (t < 0 || t >= V) return set_error("speculative decoding: the pick failed or gave %d", t), -1;
    return t;
}

/* Why session s cannot verify n rows now (set as the error), or 0 */
static int verify_refused(const dsv41_session *s, int32_t n) {
    const config *c = &s->m->cfg;
    if (n < 1 || n > c->window_size) return set_error("verify: %d rows (1 to the window's %d)", n, c->window_size);
    if (s->pos < 1) return set_error("verify: the session needs its prefill first");
    if ((int64_t)s->pos + n > c->max_seq_len)
        return set_error("verify: %d rows at position %d exceed the context of %d tokens", n, s->pos, c->max_seq_len);
    return 0;
}

/* Why the verify of count sessions cannot run (set as the error), or 0 */
static int verify_checked(dsv41_session *const *s, const int32_t *n, int32_t count) {
    if (count < 1) return set_error("verify: no sessions");
    for (int32_t i = 0; i < count; i++) {
        if (verify_refused(s[i], n[i])) return -1;
        if (s[i]->m != s[0]->m) return set_error("verify: session %d belongs to another model", i);
        for (int32_t k = 0; k < i; k++)
            if (s[k] == s[i]) return set_error("verify: session %d appears twice", i);
    }
    return 0;
}

/* Speculative sampling. The standard rule accepts draft d with probability min(1, p(d) / q(d))
 * (p the target's filtered distribution at the row, q the drafter's) and on a rejection draws
 * from normalize(max(0, p - q)). The drafter here is greedy, so q is one-hot on d: d is accepted
 * with probability p(d), and a rejection draws x != d with probability p(x) / (1 - p(d)). Drawing
 * x from p and accepting d exactly when x == d is that rule: P(x == d) = p(d), and given
 * x != d, x has that residual law. So each row is one ordinary draw of the caller's pick, in
 * order, on the logits a one-token step would give: the emitted tokens are the ones token-by-
 * token decoding with the same sampler (seed, stream position) emits, not only their law.
 *
 * The verifies of count sessions in one forward (see dsv41_batch_verify). Each session's block
 * starts its journal; one whose block cannot run yet (too early for the index keys) feeds its
 * first id alone, as a decode step, when plain allows it, else the call fails untouched. Then
 * each session's picks, in row order, keep the drafts that equal them and the rest is rolled
 * back.
 *
 * On a model split over ranks (count 1 there: see dsv41_batch_verify) the other ranks repeat
 * the leader's call (lead_verify_begin) and run the same forward; the picks run on the leader
 * alone, and its decision, the rows kept and the token after them, goes to every rank, so all
 * roll back alike. */
static int verify_batch(dsv41_session *const *s, const int32_t *const *ids, const int32_t *n, int32_t count, dsv41_pick_fn pick,
                        void *const *ctx, int32_t *kept, int32_t *next, int plain) {
    if (verify_checked(s, n, count)) return -1;
    const config *c = &s[0]->m->cfg;
    const model_part *part = &s[0]->m->part;
    int64_t V = c->vocab_size;
    spec_journal *j = calloc((size_t)count, sizeof *j);
    int32_t *rows = malloc((size_t)count * sizeof *rows), *decision = malloc((size_t)count * 2 * sizeof *decision);
    float **logits = calloc((size_t)count, sizeof *logits), *row = malloc((size_t)V * sizeof *row);
    int rc = j && rows && decision && logits && row ? 0 : set_error("out of memory verifying drafts");
    for (int32_t i = 0; rc == 0 && i < count; i++) {
        rows[i] = n[i];
        if (journal_new(s[i], n[i], &j[i])) { rc = -1; break; }
        s[i]->verify = &j[i];
        if (!owners_ready(s[i], n[i])) {
            s[i]->verify = NULL;
            rows[i] = 1;
            if (!plain) rc = set_error("verify: %d rows at position %d would read index keys not written yet (too early)", n[i], s[i]->pos);
        }
        if (rc == 0 && !(logits[i] = malloc((size_t)(rows[i] * V) * sizeof *logits[i]))) rc = set_error("out of memory verifying drafts");
        if (rc == 0 && forward_check(s[i], ids[i], rows[i])) rc = -1; /* here, before the other ranks are told */
    }
    int ran = 0;
    if (rc == 0) {
        lead_verify_begin(s[0], ids[0], n[0], plain);
        verify_call v = {s, ids, rows, count, logits, 0};
        ran = (rc = session_run(s, count, run_verify, &v) ? -1 : v.rc) == 0;
        for (int32_t i = 0; ran && part->rank == 0 && i < count; i++) { /* every session's picks, even after one failed */
            int32_t m = 0, t, pos0 = s[i]->pos - rows[i];
            int last = 0;
            while ((t = pick_next(s[i], pick, ctx ? ctx[i] : NULL, logits[i] + m * V, pos0 + m + 1, row, &last)) >= 0 && !last &&
                   m + 1 < rows[i] && t == ids[i][m + 1])
                m++;
            decision[2 * i] = m;
            decision[2 * i + 1] = t;
            if (t < 0) rc = -1;
        }
        if (ran && part->n_ranks > 1) collective_bcast(decision, (int64_t)count * 2 * (int64_t)sizeof *decision);
        lead_forward_end(s[0]);
    }
    for (int32_t i = 0; ran && i < count; i++) {
        int32_t m = decision[2 * i];
        if (s[i]->verify && m + 1 < rows[i]) rollback(s[i], &j[i], m + 1);
        memcpy(s[i]->logits, logits[i] + m * V, (size_t)V * sizeof *row);
        s[i]->has_logits = 1;
        kept[i] = m;
        if (next) next[i] = decision[2 * i + 1];
    }
    for (int32_t i = 0; i < count; i++) {
        if (j && j[i].ring_old) s[i]->verify = NULL, journal_free(c, &j[i]);
        if (logits) free(logits[i]);
    }
    free(j);
    free(rows);
    free(decision);
    free(logits);
    free(row);
    return rc;
}

int32_t dsv41_session_verify(dsv41_session *s, const int32_t *ids, int32_t n, dsv41_pick_fn pick, void *ctx, int32_t *next) {
    int32_t kept, t;
    if (verify_batch(&s, &ids, &n, 1, pick, &ctx, &kept, &t, 0)) return -1;
    if (next) *next = t;
    return kept;
}

/* A model split over ranks verifies the sessions one after another, as dsv41_batch_forward
 * runs them: its ranks follow the leader's calls one session at a time. */
int dsv41_batch_verify(dsv41_session *const *s, const int32_t *const *ids, const int32_t *n, int32_t count, dsv41_pick_fn pick,
                       void *const *ctx, int32_t *kept, int32_t *next) {
    if (count < 2 || s[0]->m->part.n_ranks == 1) return verify_batch(s, ids, n, count, pick, ctx, kept, next, 1);
    if (verify_checked(s, n, count)) return -1;
    for (int32_t i = 0; i < count; i++)
        if (verify_batch(s + i, ids + i, n + i, 1, pick, ctx ? ctx + i : NULL, kept + i, next ? next + i : NULL, 1)) return -1;
    return 0;
}

int32_t dsv41_session_propose(dsv41_session *s, int32_t anchor, int32_t n_draft, const dsv41_draft_policy *policy, int32_t *ids,
                              int32_t *proposed) {
    int32_t B = dsv41_model_draft_size(s->m), n = n_draft < B ? n_draft : B, pos = s->pos, k = 0;
    float conf[MAX_DRAFTS];
    if (n_draft < 0) return set_error("propose: %d drafts", n_draft);
    if (anchor < 0 || anchor >= s->m->cfg.vocab_size)
        return set_error("propose: token id %d is outside the vocabulary [0, %d)", anchor, s->m->cfg.vocab_size);
    if (policy && policy->pause > 0) n = 0;
    ids[0] = anchor;
    if (n > 0 && dsv41_session_draft(s, anchor, n, ids + 1, NULL, conf) == 0)
        k = policy ? dsv41_draft_policy_cut(policy, conf, n) : n;
    else if (s->pos != pos) return -1; /* a draft that ran out of memory emptied s */
    else n = 0;                        /* no block here: the first step after a prefill, the end of the context */
    if (proposed) *proposed = n;
    return k + 1;
}

int32_t dsv41_session_speculate(dsv41_session *s, int32_t anchor, int32_t n_draft, dsv41_draft_policy *policy, dsv41_pick_fn pick,
                                void *ctx, int32_t *out, int32_t *drafted) {
    const config *c = &s->m->cfg;
    int32_t ids[MAX_DRAFTS + 1], next = -1, proposed, m = -1, pos = s->pos;
    int32_t n = dsv41_session_propose(s, anchor, n_draft, policy, ids, &proposed);
    if (n < 0) return -1;
    /* a block cut to no draft is judged without a verify; one that cannot be verified is not */
    if (n > 1 && (m = dsv41_session_verify(s, ids, n, pick, ctx, &next)) < 0) proposed = 0;
    /* a verify that ran out of memory emptied s; a pick that failed after it moved s */
    if (m < 0 && s->pos != pos) return -1;
    if (m < 0) { /* no block here (the first step after a prefill, the end of the context, a pause): one token */
        if (dsv41_session_forward(s, &anchor, 1, s->logits, NULL)) return -1;
        float *row = pick ? malloc((size_t)c->vocab_size * sizeof *row) : NULL;
        int last = 0;
        next = pick && !row ? set_error("out of memory") : pick_next(s, pick, ctx, s->logits, s->pos, row, &last);
        free(row);
        if (next < 0) return -1;
        m = 0;
        n = 1;
    }
    if (policy) dsv41_draft_policy_record(policy, proposed, m);
    if (drafted) *drafted = n - 1;
    memcpy(out, ids + 1, (size_t)m * sizeof *out);
    out[m] = next;
    return m + 1;
}
