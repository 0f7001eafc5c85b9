/* bench_spec.c - what speculative decoding costs and gains on this machine (bench --draft N).
 *
 * Three things, after the same 16-token prompt: one-token decode steps (the greedy continuation,
 * which the other runs reuse), verifies of draft+1 rows whose drafts are that continuation (so
 * every draft is accepted: the upper bound of a perfect drafter), and the model's own drafter
 * proposing and the verify judging: every draft, and with the default policy as `--draft N`
 * decodes (its confidence cut and pauses: POLICY_TOKENS spans two pauses of 64 tokens and the
 * rounds that start them, so a drafter whose drafts are not kept shows what it costs). Each is timed as the mean over its rounds, best of two
 * runs, so a moment of another tenant on a shared host does not decide a figure. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bench_spec.h"
#include "dspark.h"
#include "machine.h"
#include "numerics.h"

enum { POLICY_TOKENS = 160 };

/* a session after the prompt, its first pick in *first */
static dsv41_session *start(const dsv41_model *m, const int32_t *prompt, int32_t n, float *logits, int32_t *first) {
    dsv41_session *s = dsv41_session_new(m);
    if (s && dsv41_session_forward(s, prompt, n, logits, NULL)) {
        dsv41_session_free(s);
        return NULL;
    }
    *first = argmax_f32(logits, m->cfg.vocab_size);
    return s;
}

/* The model's own drafter decoding n greedy tokens after the prompt by speculative rounds of
 * `draft` drafts with policy (NULL: every draft verified, never a pause): its tokens per second
 * into *tok_s (keeping the faster) and the share of the verified drafts kept into *accept. */
static int own_run(const dsv41_model *m, int32_t draft, const int32_t *prompt, int32_t np, int32_t n, dsv41_draft_policy *policy,
                   float *logits, double *tok_s, double *accept) {
    int32_t anchor, out[MAX_DRAFTS + 1], made = 0, tried = 0, kept = 0, drafted;
    dsv41_session *s = start(m, prompt, np, logits, &anchor);
    if (!s) return -1;
    double t0 = machine_now_s();
    while (made < n) { /* the first block waits for one decoded token, as the release's does */
        int32_t got = dsv41_session_speculate(s, anchor, draft, policy, NULL, NULL, out, &drafted);
        if (got < 0) { dsv41_session_free(s); return -1; }
        tried += drafted;
        kept += got - 1;
        made += got;
        anchor = out[got - 1];
    }
    *tok_s = fmax(*tok_s, made / (machine_now_s() - t0));
    *accept = tried ? (double)kept / tried : 0.0;
    dsv41_session_free(s);
    return 0;
}

/* One run of each kind into r (keeping the faster figures); seq [rounds*(draft+1)+1]. */
static int bench_run(const dsv41_model *m, int32_t draft, const int32_t *prompt, int32_t np, int32_t rounds, int32_t *seq,
                     float *logits, spec_timing *r) {
    int32_t V = m->cfg.vocab_size, n = draft + 1, len = rounds * n + 1, ids[MAX_DRAFTS + 1], d[MAX_DRAFTS + 1];
    dsv41_session *s = start(m, prompt, np, logits, &seq[0]);
    if (!s) return -1;
    double t0 = machine_now_s();
    for (int32_t i = 1; i < len; i++) {
        if (dsv41_session_forward(s, &seq[i - 1], 1, logits, NULL)) { dsv41_session_free(s); return -1; }
        seq[i] = argmax_f32(logits, V);
    }
    r->row_s = fmin(r->row_s, (machine_now_s() - t0) / (len - 1));
    dsv41_session_free(s);

    int32_t first;
    if (!(s = start(m, prompt, np, logits, &first))) return -1;
    double tv = 0, td = 0;
    for (int32_t k = 0; k < rounds; k++) {
        memcpy(ids, seq + k * n, (size_t)n * sizeof *ids);
        double t1 = machine_now_s();
        if (m->draft && dsv41_session_draft(s, ids[0], draft < m->cfg.dspark_block_size ? draft : m->cfg.dspark_block_size, d,
                                            NULL, NULL)) {
            dsv41_session_free(s);
            return -1;
        }
        double t2 = machine_now_s();
        int32_t kept = dsv41_session_verify(s, ids, n, NULL, NULL, NULL);
        tv += machine_now_s() - t2;
        td += t2 - t1;
        if (kept != draft) {
            dsv41_session_free(s);
            return kept < 0 ? -1 : set_error("bench: %d of %d forced drafts kept (the verify differs from decoding)", kept, draft);
        }
    }
    r->verify_s = fmin(r->verify_s, tv / rounds);
    r->draft_s = fmin(r->draft_s, td / rounds);
    dsv41_session_free(s);

    if (!m->draft) return 0;
    double accept;
    dsv41_draft_policy policy = dsv41_draft_policy_default();
    int32_t room = m->cfg.max_seq_len - np - 1; /* a round at the end of the context is a plain step */
    if (own_run(m, draft, prompt, np, len - 1, NULL, logits, &r->own_tok_s, &r->own_accept) ||
        own_run(m, draft, prompt, np, POLICY_TOKENS < room ? POLICY_TOKENS : room, &policy, logits, &r->policy_tok_s, &accept))
        return -1;
    return 0;
}

int bench_speculative(const dsv41_model *m, int32_t draft, spec_timing *r) {
    const config *c = &m->cfg;
    int32_t np = 16, n = draft + 1, rounds = (c->max_seq_len - np - 2) / n;
    if (rounds > 8) rounds = 8;
    if (draft < 1 || draft > MAX_DRAFTS || n > c->window_size || rounds < 1)
        return set_error("bench: --draft %d does not fit this model (window %d, context %d)", draft, c->window_size, c->max_seq_len);
    *r = (spec_timing){1e30, 1e30, 1e30, 0, 0, 0, model_rows_bytes(m, n),
                       dspark_draft_bytes(m, draft < c->dspark_block_size ? draft : c->dspark_block_size)};
    int32_t *prompt = malloc((size_t)np * sizeof *prompt), *seq = malloc((size_t)(rounds * n + 1) * sizeof *seq);
    float *logits = malloc((size_t)c->vocab_size * sizeof *logits);
    int rc = prompt && seq && logits ? 0 : set_error("bench: out of memory");
    for (int32_t i = 0; i < np; i++) prompt[i] = (int32_t)((i * 7919 + 3) % c->vocab_size);
    for (int run = 0; rc == 0 && run < 2; run++) {
        rc = bench_run(m, draft, prompt, np, rounds, seq, logits, r);
        progress_report("bench: speculative runs", run + 1, 2);
    }
    free(prompt);
    free(seq);
    free(logits);
    return rc;
}
