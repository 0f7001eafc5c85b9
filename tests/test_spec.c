/* test_spec.c - speculative decoding emits exactly the tokens of token-by-token decoding, greedy
 * and sampled.
 *
 * Decoding one token at a time is the reference (test_golden holds it to the golden): greedy,
 * and sampled with a seed, temperature, top-k, top-p and a repeat penalty, where the verify's
 * picks must be the draws the sequential sampler makes (the same seed, the same tokens).
 * Drafts are forced: the reference's own continuation (all accepted), with the last one
 * corrupted, the first, a different one each round, and the drafter's own; at several draft
 * counts and prompt lengths (the verify's first row at either phase of the ratio-2 groups, the
 * window ring of 8 wrapping many times in each run). Every run must emit the reference's ids,
 * and leave every cache as one-token decoding leaves it at the same position: window rings,
 * compressor tails, compressed rows and index keys (zero past the closed groups), the published
 * index-key cache, the Engram history, the logits, the drafter's next block. The same with
 * every mode in its own session and a decoding one, all verified by one batch call a round.
 * Then the same at every kernel set and thread count. */
#include <math.h>
#include <string.h>

#include "filler.h"
#include "testing.h"

enum { ALL, LAST, FIRST, ROTATE, OWN, MODES };
static const char *MODE_NAME[] = {"all accepted", "last corrupted", "first corrupted", "one corrupted per round", "own drafts"};

static int32_t argmax(const float *v, int32_t n) {
    int32_t b = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[b]) b = i;
    return b;
}

static void prompt_ids(int32_t *p, int32_t n, int32_t V) {
    for (int32_t i = 0; i < n; i++) p[i] = (int32_t)((i * 37 + 11) % V);
}

/* The sampling of the sampled runs (the greedy ones pick the argmax, no penalties) */
static const dsv41_sampler_params SAMPLED = {.temperature = 0.9f, .top_k = 12, .top_p = 0.9f, .seed = 1234,
                                             .repeat_penalty = 1.3f, .penalty_last_n = 16};

/* The token after logits [V] at history [n]: the sampler's pick, or the argmax without one */
static int32_t pick(dsv41_sampler *smp, const float *logits, const int32_t *history, int32_t n, int32_t V) {
    float row[256];
    memcpy(row, logits, (size_t)V * sizeof *row);
    return smp ? dsv41_sample_pick(smp, row, history, n, NULL) : argmax(row, V);
}

/* The ids after the prompt, one token at a time (sampled with smp, else greedy): seq [n] */
static void sequential(const dsv41_model *m, dsv41_sampler *smp, const int32_t *prompt, int32_t np, int32_t n, int32_t *seq) {
    dsv41_session *s = dsv41_session_new(m);
    float *lg = malloc((size_t)dsv41_model_vocab_size(m) * sizeof *lg);
    dsv41_session_forward(s, prompt, np, lg, NULL);
    for (int32_t i = 0; i < n; i++) {
        int32_t k;
        const int32_t *hist = dsv41_session_tokens(s, &k);
        seq[i] = pick(smp, lg, hist, k, dsv41_model_vocab_size(m));
        if (i + 1 < n) dsv41_session_forward(s, &seq[i], 1, lg, NULL);
    }
    free(lg);
    dsv41_session_free(s);
}

/* n ids by speculative rounds of k drafts in the given mode into out (picked by smp, else
 * greedy); the session is left in *sp */
static int speculate(const dsv41_model *m, dsv41_sampler *smp, const int32_t *prompt, int32_t np, int32_t n, int32_t k, int mode,
                     const int32_t *seq, int32_t *out, dsv41_session **sp) {
    int32_t V = dsv41_model_vocab_size(m), e = 0, ids[16], round = 0, next, pos;
    dsv41_session *s = *sp = dsv41_session_new(m);
    float *lg = malloc((size_t)V * sizeof *lg);
    if (dsv41_session_forward(s, prompt, np, lg, NULL)) return -1;
    out[e++] = pick(smp, lg, prompt, np, V);
    while (e < n) {
        int32_t kk = k < n - e ? k : n - e, own[8];
        ids[0] = out[e - 1];
        if (mode == OWN) {
            if (kk > dsv41_model_draft_size(m)) kk = dsv41_model_draft_size(m);
            if (dsv41_session_draft(s, ids[0], kk, own, NULL, NULL)) kk = 0;
        }
        for (int32_t i = 0; i < kk; i++) ids[1 + i] = mode == OWN ? own[i] : seq[e + i];
        int32_t bad = mode == LAST ? kk - 1 : mode == FIRST ? 0 : mode == ROTATE ? round % (kk > 0 ? kk : 1) : -1;
        if (bad >= 0 && bad < kk) ids[1 + bad] = (ids[1 + bad] + 1) % V;
        round++;
        int32_t got = kk > 0 ? dsv41_session_verify(s, ids, kk + 1, smp ? dsv41_sample_pick : NULL, smp, &next) : -1;
        if (got < 0) { /* too early or too late for a block: one plain step */
            if (dsv41_session_forward(s, ids, 1, lg, NULL)) return -1;
            got = 0;
            next = pick(smp, lg, dsv41_session_tokens(s, &pos), pos, V);
        }
        for (int32_t i = 0; i < got && e < n; i++) out[e++] = ids[1 + i];
        if (e < n) out[e++] = next;
    }
    free(lg);
    return 0;
}

/* a and b (one model) hold the same caches bit for bit */
static int same_state(const dsv41_session *a, const dsv41_session *b) {
    const config *c = &a->m->cfg;
    if (a->pos != b->pos || memcmp(a->logits, b->logits, (size_t)c->vocab_size * sizeof(float))) return 0;
    if (memcmp(a->ngram_cache, b->ngram_cache, (size_t)c->max_seq_len * sizeof *a->ngram_cache)) return 0;
    if (slot_layer(a, a->shared.index_k, 1) != slot_layer(b, b->shared.index_k, 1) ||
        slot_layer(a, a->shared.compress_kv, 0) != slot_layer(b, b->shared.compress_kv, 0))
        return 0;
    for (int32_t l = 0; l < c->n_layers; l++) {
        const layer_state *x = &a->layers[l], *y = &b->layers[l];
        if (memcmp(x->window, y->window, (size_t)c->window_size * window_row_bytes(c))) return 0;
        if (!c->is_kv_source[l]) continue;
        size_t r = (size_t)c->compress_ratio[l], g = (size_t)c->max_seq_len / r + 1;
        if (memcmp(x->ckv, y->ckv, g * ckv_row_bytes(c)) || memcmp(x->ik, y->ik, g * ik_row_bytes(c)) ||
            memcmp(x->kv_state, y->kv_state, r * c->head_dim * sizeof(float)) ||
            memcmp(x->score_state, y->score_state, r * c->head_dim * sizeof(float)))
            return 0;
    }
    return 1;
}

/* s against one-token decoding of the same ids to its position, and (with a drafter) the block
 * each drafts next */
static int same_as_sequential(const dsv41_model *m, dsv41_session *s, const int32_t *prompt, int32_t np, const int32_t *seq) {
    dsv41_session *r = dsv41_session_new(m);
    float *lg = malloc((size_t)dsv41_model_vocab_size(m) * sizeof *lg);
    dsv41_session_forward(r, prompt, np, lg, NULL);
    for (int32_t i = 0; r->pos < s->pos; i++) dsv41_session_forward(r, &seq[i], 1, lg, NULL);
    free(lg);
    int ok = same_state(s, r);
    if (ok && dsv41_model_draft_size(m) > 0) {
        int32_t B = dsv41_model_draft_size(m), V = dsv41_model_vocab_size(m), da[8], db[8];
        float *la = malloc((size_t)B * V * sizeof *la), *lb = malloc((size_t)B * V * sizeof *lb);
        int32_t anchor = argmax(dsv41_session_logits(r), V);
        int ra = dsv41_session_draft(s, anchor, B, da, la, NULL), rb = dsv41_session_draft(r, anchor, B, db, lb, NULL);
        ok = ra == rb && (ra < 0 || (!memcmp(da, db, (size_t)B * sizeof *da) && !memcmp(la, lb, (size_t)B * V * sizeof *la)));
        free(la);
        free(lb);
    }
    dsv41_session_free(r);
    return ok;
}

/* the modes below `modes`, the first nk draft counts and the first np prompt lengths on m,
 * greedy or sampled; returns the failures */
static int sweep(const dsv41_model *m, const char *what, int sampled, int modes, int nk, int np) {
    const int32_t ks[] = {5, 2, 1, 3, 7}, nps[] = {9, 10, 13};
    int32_t V = dsv41_model_vocab_size(m), n = 40, seq[64], out[64], prompt[16];
    int fails = 0;
    for (int pi = 0; pi < np; pi++) {
        prompt_ids(prompt, nps[pi], V);
        dsv41_sampler *ref = sampled ? dsv41_sampler_new(&SAMPLED, V) : NULL;
        sequential(m, ref, prompt, nps[pi], n + 8, seq);
        dsv41_sampler_free(ref);
        for (int mode = 0; mode < modes; mode++)
            for (int ki = 0; ki < nk; ki++) {
                dsv41_session *s = NULL;
                dsv41_sampler *smp = sampled ? dsv41_sampler_new(&SAMPLED, V) : NULL;
                int ok = speculate(m, smp, prompt, nps[pi], n, ks[ki], mode, seq, out, &s) == 0 &&
                         !memcmp(out, seq, (size_t)n * sizeof *out) && same_as_sequential(m, s, prompt, nps[pi], seq);
                dsv41_session_free(s);
                dsv41_sampler_free(smp);
                if (!ok) {
                    fails++;
                    fprintf(stderr, "%s%s: prompt %d, %d drafts, %s: differs from one-token decoding\n", what,
                            sampled ? " sampled" : "", nps[pi], ks[ki], MODE_NAME[mode]);
                }
            }
    }
    return fails;
}

/* Sessions of five prompt lengths, one per mode, and a sixth that decodes (one row a round),
 * advanced together by dsv41_batch_verify rounds of k drafts, greedy or sampled: each must emit
 * its one-token ids and end in its one-token state. Returns the failures. */
static int batch_sweep(const dsv41_model *m, int sampled, int32_t k) {
    enum { NS = MODES + 1, N = 30 };
    int32_t V = dsv41_model_vocab_size(m), np[NS], prompt[NS][16], seq[NS][N + 8], out[NS][N], e[NS], round = 0, fails = 0;
    int32_t rows[NS][16], nr[NS], kept[NS], next[NS], *idp[NS];
    dsv41_session *s[NS], *bs[NS];
    dsv41_sampler *smp[NS];
    void *ctx[NS];
    float *lg = malloc((size_t)V * sizeof *lg);
    for (int32_t i = 0; i < NS; i++) {
        np[i] = 9 + i;
        prompt_ids(prompt[i], np[i], V);
        dsv41_sampler *ref = sampled ? dsv41_sampler_new(&SAMPLED, V) : NULL;
        sequential(m, ref, prompt[i], np[i], N + 8, seq[i]);
        dsv41_sampler_free(ref);
        s[i] = dsv41_session_new(m);
        smp[i] = sampled ? dsv41_sampler_new(&SAMPLED, V) : NULL;
        dsv41_session_forward(s[i], prompt[i], np[i], lg, NULL);
        out[i][0] = pick(smp[i], lg, prompt[i], np[i], V);
        e[i] = 1;
    }
    for (int busy = NS; busy > 0; round++) {
        busy = 0;
        for (int32_t i = 0; i < NS; i++) {
            if (e[i] >= N) continue;
            int mode = i < MODES ? i : -1;
            int32_t kk = mode < 0 ? 0 : k < N - e[i] ? k : N - e[i], own[8], *ids = rows[i];
            ids[0] = out[i][e[i] - 1];
            if (mode == OWN) {
                if (kk > dsv41_model_draft_size(m)) kk = dsv41_model_draft_size(m);
                if (dsv41_session_draft(s[i], ids[0], kk, own, NULL, NULL)) kk = 0;
            }
            for (int32_t d = 0; d < kk; d++) ids[1 + d] = mode == OWN ? own[d] : seq[i][e[i] + d];
            int32_t bad = mode == LAST ? kk - 1 : mode == FIRST ? 0 : mode == ROTATE ? round % (kk > 0 ? kk : 1) : -1;
            if (bad >= 0 && bad < kk) ids[1 + bad] = (ids[1 + bad] + 1) % V;
            bs[busy] = s[i], idp[busy] = ids, nr[busy] = kk + 1, ctx[busy++] = smp[i];
        }
        /* greedy, every other round asks for no next: it is then the argmax of the logits the
         * verify leaves (those of the last kept row) */
        const int no_next = !sampled && round % 2;
        if (busy && dsv41_batch_verify(bs, (const int32_t *const *)idp, nr, busy, sampled ? dsv41_sample_pick : NULL, ctx, kept,
                                       no_next ? NULL : next)) {
            fprintf(stderr, "batch verify: %s\n", dsv41_error());
            fails++;
            break;
        }
        for (int32_t b = 0, i = 0; b < busy; b++, i++) {
            while (s[i] != bs[b]) i++;
            for (int32_t d = 0; d < kept[b] && e[i] < N; d++) out[i][e[i]++] = idp[b][1 + d];
            if (no_next) next[b] = argmax(dsv41_session_logits(s[i]), V);
            if (e[i] < N) out[i][e[i]++] = next[b];
        }
    }
    for (int32_t i = 0; i < NS; i++) {
        if (memcmp(out[i], seq[i], sizeof out[i]) || !same_as_sequential(m, s[i], prompt[i], np[i], seq[i])) {
            fails++;
            fprintf(stderr, "batch%s, %d drafts: session %d (%s) differs from one-token decoding\n", sampled ? " sampled" : "", k, i,
                    i < MODES ? MODE_NAME[i] : "decode");
        }
        dsv41_session_free(s[i]);
        dsv41_sampler_free(smp[i]);
    }
    free(lg);
    return fails;
}

/* A greedy pick that ends the block at its second call (a reply ending there) */
static int32_t pick_two(void *ctx, float *logits, const int32_t *history, int32_t n, int *last) {
    int *calls = ctx;
    (void)history, (void)n;
    *last = ++*calls == 2;
    return argmax(logits, 64);
}

/* A block of drafts that would all be kept, cut by the pick at its second token: the session
 * holds the anchor and one draft, as one-token decoding of those, and the pick is the next. */
static int last_cuts(const dsv41_model *m) {
    int32_t V = dsv41_model_vocab_size(m), prompt[16], seq[16], ids[5], next = -1, calls = 0;
    prompt_ids(prompt, 12, V);
    sequential(m, NULL, prompt, 12, 8, seq);
    dsv41_session *s = dsv41_session_new(m);
    dsv41_session_forward(s, prompt, 12, NULL, NULL);
    dsv41_session_forward(s, seq, 1, NULL, NULL);
    memcpy(ids, seq + 1, sizeof ids);
    int32_t kept = dsv41_session_verify(s, ids, 5, pick_two, &calls, &next);
    int ok = V == 64 && kept == 1 && next == seq[3] && calls == 2 && dsv41_session_pos(s) == 15 && same_as_sequential(m, s, prompt, 12, seq);
    dsv41_session_free(s);
    return ok;
}

/* The policy's rules against values worked out by hand: the confident prefix (sigmoid(c) under
 * p_min ends it; exactly p_min does not; a NaN does), and the pause after fewer than 6 kept of
 * the latest 10 proposed drafts, 64 plain tokens long, counted afresh after it. */
static int policy_rules(void) {
    const float c[4] = {2.0f, 0.5f, -0.1f, 3.0f}, zero[2] = {0.0f, -1.0f}, nan[2] = {NAN, 5.0f}; /* sigmoids .881 .622 .475 .953 */
    dsv41_draft_policy p = dsv41_draft_policy_default(), q = {.p_min = 0.0f}, r = {.p_min = 0.7f};
    int ok = p.p_min == 0.5f && p.pause == 0 && dsv41_draft_policy_cut(&p, c, 4) == 2 && dsv41_draft_policy_cut(&q, c, 4) == 4 &&
             dsv41_draft_policy_cut(&r, c, 4) == 1 && dsv41_draft_policy_cut(&p, zero, 2) == 1 && dsv41_draft_policy_cut(&q, nan, 2) == 0;
    dsv41_draft_policy_record(&p, 5, 5);
    ok = ok && p.pause == 0;
    dsv41_draft_policy_record(&p, 5, 0); /* 5 of the latest 10 kept */
    ok = ok && p.pause == 64;
    for (int i = 0; i < 63; i++) dsv41_draft_policy_record(&p, 0, 0);
    ok = ok && p.pause == 1;
    dsv41_draft_policy_record(&p, 0, 0);
    dsv41_draft_policy_record(&p, 5, 0); /* afresh: 5 proposed are too few to judge */
    ok = ok && p.pause == 0;
    dsv41_draft_policy_record(&p, 5, 3); /* the latest 10: 3 of 5 after none of 5 */
    ok = ok && p.pause == 64;
    for (int i = 0; i < 64; i++) dsv41_draft_policy_record(&p, 0, 0);
    dsv41_draft_policy_record(&p, 5, 3);
    dsv41_draft_policy_record(&p, 5, 5);
    dsv41_draft_policy_record(&p, 2, 1); /* the latest 10: the last 3 of the first 5 (1, 0, 0), then 5 of 5, 1 of 2: 7 */
    ok = ok && p.pause == 0;
    dsv41_draft_policy_record(&p, 4, 0); /* the last 4 of the 5 (all kept), 1 of 2, 0 of 4: 5 */
    return ok && p.pause == 64 && p.p_min == 0.5f;
}

/* dsv41_session_speculate with a policy, greedy or sampled, on the drafter's own drafts: the
 * tokens of one-token decoding, each round verifying the drafts before the first whose
 * confidence (from dsv41_session_draft, its sigmoid computed here) is under p_min (0.6: on this
 * model's filler weights some blocks are cut at their first draft, some inside, some not at
 * all, and all three must occur), and no draft while the policy pauses. fresh starts each round
 * with a new policy (the cut alone); otherwise one policy runs the reply and its pauses must
 * come. Returns the failures. */
static int policy_speculate(const dsv41_model *m, int sampled, int fresh) {
    int32_t V = dsv41_model_vocab_size(m), np = 9, n = 50, prompt[16], seq[64], out[64], got[8], e = 0, drafted, seen[3] = {0};
    const float p_min = 0.6f;
    prompt_ids(prompt, np, V);
    dsv41_sampler *ref = sampled ? dsv41_sampler_new(&SAMPLED, V) : NULL, *smp = sampled ? dsv41_sampler_new(&SAMPLED, V) : NULL;
    sequential(m, ref, prompt, np, n, seq);
    dsv41_session *s = dsv41_session_new(m);
    float lg[256], conf[8];
    dsv41_session_forward(s, prompt, np, lg, NULL);
    out[e++] = pick(smp, lg, prompt, np, V);
    dsv41_draft_policy pol = {.p_min = p_min};
    int fails = 0, paused = 0;
    while (e < n && !fails) {
        int32_t k = n - e - 1 < 5 ? n - e - 1 : 5, ids[8], want = 0;
        if (fresh) pol = (dsv41_draft_policy){.p_min = p_min};
        int pause = pol.pause > 0;
        if (!pause && k > 0 && dsv41_session_draft(s, out[e - 1], k, ids, NULL, conf) == 0)
            while (want < k && 1.0 / (1.0 + exp(-(double)conf[want])) >= p_min) want++;
        int32_t r = dsv41_session_speculate(s, out[e - 1], k, &pol, sampled ? dsv41_sample_pick : NULL, smp, got, &drafted);
        if (r < 1 || drafted != want || (pause && r != 1)) fails++;
        seen[want == 0 ? 0 : want < k ? 1 : 2] += !pause && k == 5;
        paused += pause;
        for (int32_t i = 0; i < r && e < n; i++) out[e++] = got[i];
    }
    if (memcmp(out, seq, (size_t)n * sizeof *out)) fails++;
    if (fresh ? !seen[0] || !seen[1] || !seen[2] || paused : !paused) fails++;
    if (fails)
        fprintf(stderr, "policy%s%s: cuts at 0 / inside / none %d %d %d, %d paused, %d failures\n", sampled ? " sampled" : "",
                fresh ? " (fresh each round)" : "", seen[0], seen[1], seen[2], paused, fails);
    dsv41_session_free(s);
    dsv41_sampler_free(ref);
    dsv41_sampler_free(smp);
    return fails;
}

/* dsv41_session_propose against dsv41_session_draft on the same session: the anchor, then the
 * drafter's ids, as many rows as the drafts before the first confidence under p_min (its
 * sigmoid computed here) plus one, the whole block when the room asks for more; one row and
 * none proposed in a pause, with no room, or before a prefill; -1 and one line for
 * wrong arguments. Returns the failures. */
static int propose(const dsv41_model *m) {
    int32_t V = dsv41_model_vocab_size(m), B = dsv41_model_draft_size(m), prompt[9], ids[65], own[64], proposed = -1, fails = 0;
    float conf[64];
    prompt_ids(prompt, 9, V);
    dsv41_session *s = dsv41_session_new(m);
    dsv41_draft_policy cut = {.p_min = 0.6f}, paused = {.p_min = 0.0f, .pause = 3};
    fails += dsv41_session_propose(s, 5, B, NULL, ids, &proposed) != 1 || proposed != 0 || ids[0] != 5; /* no prefill yet */
    dsv41_session_forward(s, prompt, 9, NULL, NULL);
    for (int32_t a = 0; a < 8; a++) {
        int32_t want = 0;
        dsv41_session_draft(s, a, B, own, NULL, conf);
        while (want < B && 1.0 / (1.0 + exp(-(double)conf[want])) >= 0.6) want++;
        int32_t rows = dsv41_session_propose(s, a, B, &cut, ids, &proposed);
        fails += rows != want + 1 || proposed != B || ids[0] != a || memcmp(ids + 1, own, (size_t)B * sizeof *own);
        rows = dsv41_session_propose(s, a, 64, NULL, ids, &proposed);
        fails += rows != B + 1 || proposed != B || memcmp(ids + 1, own, (size_t)B * sizeof *own);
        fails += dsv41_session_propose(s, a, 2, NULL, ids, &proposed) != 3 || proposed != 2 || memcmp(ids + 1, own, 2 * sizeof *own);
    }
    fails += dsv41_session_propose(s, 3, B, &paused, ids, &proposed) != 1 || proposed != 0 || ids[0] != 3;
    fails += dsv41_session_propose(s, 3, 0, NULL, ids, &proposed) != 1 || proposed != 0;
    const char *e;
    fails += dsv41_session_propose(s, 3, -1, NULL, ids, NULL) != -1 || !*(e = dsv41_error()) || strchr(e, '\n');
    fails += dsv41_session_propose(s, V, B, NULL, ids, NULL) != -1 || !*(e = dsv41_error()) || strchr(e, '\n');
    fails += dsv41_session_pos(s) != 9;
    dsv41_session_free(s);
    return fails;
}

int main(void) {
    dsv41_model *tiny = dsv41_model_builtin(), *dm = model_from_config_file("models/tiny_dspark.json");
    CHECK(tiny && dm, "the models load");
    if (!tiny || !dm) return test_summary();
    CHECK(sweep(tiny, "tiny", 0, OWN, 5, 3) == 0, "tiny model: forced drafts in 4 modes x 5 draft counts x 3 prompts emit the greedy ids");
    CHECK(sweep(dm, "tiny_dspark", 0, MODES, 5, 3) == 0, "with a drafter: 5 modes x 5 draft counts x 3 prompts emit the greedy ids");
    CHECK(sweep(dm, "tiny_dspark", 1, MODES, 2, 2) == 0,
          "sampled (seed, temperature, top-k, top-p, repeat penalty): 5 modes x 2 draft counts x 2 prompts emit the sequential draws");

    CHECK(batch_sweep(dm, 0, 3) == 0 && batch_sweep(dm, 0, 5) == 0,
          "one batch verify a round for 5 modes and a decoding session: each emits its greedy ids");
    CHECK(batch_sweep(dm, 1, 3) == 0, "the same sampled: each emits its sequential draws");
    CHECK(last_cuts(dm), "a pick that ends the reply ends the block: the drafts after it are not fed");
    CHECK(policy_rules(), "the draft policy: the confident prefix and the pause, by hand");
    CHECK(policy_speculate(dm, 0, 1) == 0 && policy_speculate(dm, 1, 1) == 0,
          "speculate verifies the confident prefix only (cut at the first draft, inside, none): the greedy and sampled ids");
    CHECK(policy_speculate(dm, 0, 0) == 0 && policy_speculate(dm, 1, 0) == 0,
          "a reply's policy pauses drafting when few drafts are kept: the greedy and sampled ids");
    CHECK(propose(dm) == 0, "propose: the anchor, the drafter's ids, cut at the first unconfident one; none in a pause; -1 when wrong");

    const char *sets[8];
    int32_t ns = dsv41_kernel_sets(sets, 8);
    for (int32_t k = 0; k < ns; k++) /* under a sanitizer (10x slower) 3 threads only */
        for (int32_t th = TEST_SLOWDOWN > 1.0 ? 3 : 1; th <= 3; th += 2) {
            dsv41_set_kernels(sets[k]);
            dsv41_set_threads(th);
            CHECK(sweep(dm, sets[k], 0, MODES, 1, 2) == 0, "kernel set %s, %d threads: every mode emits the greedy ids", sets[k], th);
            if (th > 1)
                CHECK(sweep(dm, sets[k], 1, MODES, 1, 1) == 0, "kernel set %s, %d threads: every mode emits the sampled ids", sets[k], th);
        }
    dsv41_set_kernels(NULL);

    dsv41_session *s = dsv41_session_new(tiny);
    int32_t ids[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    CHECK(dsv41_session_verify(s, ids, 3, NULL, NULL, NULL) < 0, "an empty session does not verify");
    dsv41_session_forward(s, ids, 2, NULL, NULL);
    CHECK(dsv41_session_verify(s, ids, 9, NULL, NULL, NULL) < 0, "more rows than the window are refused");
    CHECK(dsv41_session_verify(s, ids, 0, NULL, NULL, NULL) < 0, "no rows are refused");
    dsv41_session_free(s);
    dsv41_model_free(tiny);
    dsv41_model_free(dm);
    return test_summary();
}
