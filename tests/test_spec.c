/* test_spec.c - speculative decoding emits exactly the tokens of token-by-token greedy decoding.
 *
 * Greedy decoding one token at a time is the reference (test_golden holds it to the golden).
 * Drafts are forced: the reference's own continuation (all accepted), with the last one
 * corrupted, the first, a different one each round, and the drafter's own; at several draft
 * counts and prompt lengths (the verify's first row at either phase of the ratio-2 groups, the
 * window ring of 8 wrapping many times in each run). Every run must emit the reference's ids,
 * and leave every cache as one-token decoding leaves it at the same position: window rings,
 * compressor tails, compressed rows and index keys (zero past the closed groups), the published
 * index-key cache, the Engram history, the logits, the drafter's next block. Then the same at
 * every kernel set and thread count. */
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

/* The greedy ids after the prompt, one token at a time: seq [n] */
static void greedy(const dsv41_model *m, const int32_t *prompt, int32_t np, int32_t n, int32_t *seq) {
    dsv41_session *s = dsv41_session_new(m);
    float *lg = malloc((size_t)dsv41_model_vocab_size(m) * sizeof *lg);
    dsv41_session_forward(s, prompt, np, lg, NULL);
    for (int32_t i = 0; i < n; i++) {
        seq[i] = argmax(lg, dsv41_model_vocab_size(m));
        if (i + 1 < n) dsv41_session_forward(s, &seq[i], 1, lg, NULL);
    }
    free(lg);
    dsv41_session_free(s);
}

/* n ids by speculative rounds of k drafts in the given mode into out; the session is left in *sp */
static int speculate(const dsv41_model *m, const int32_t *prompt, int32_t np, int32_t n, int32_t k, int mode,
                     const int32_t *seq, int32_t *out, dsv41_session **sp) {
    int32_t V = dsv41_model_vocab_size(m), e = 0, ids[16], round = 0;
    dsv41_session *s = *sp = dsv41_session_new(m);
    float *lg = malloc((size_t)V * sizeof *lg);
    if (dsv41_session_forward(s, prompt, np, lg, NULL)) return -1;
    out[e++] = argmax(lg, V);
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
        int32_t got = kk > 0 ? dsv41_session_verify(s, ids, kk + 1) : -1;
        if (got < 0) { /* too early or too late for a block: one plain step */
            if (dsv41_session_forward(s, ids, 1, lg, NULL)) return -1;
            got = 0;
        }
        for (int32_t i = 0; i < got && e < n; i++) out[e++] = ids[1 + i];
        if (e < n) out[e++] = argmax(dsv41_session_logits(s), V);
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

/* the modes below `modes`, the first nk draft counts and the first np prompt lengths on m;
 * returns the failures */
static int sweep(const dsv41_model *m, const char *what, int modes, int nk, int np) {
    const int32_t ks[] = {5, 2, 1, 3, 7}, nps[] = {9, 10, 13};
    int32_t V = dsv41_model_vocab_size(m), n = 40, seq[64], out[64], prompt[16];
    int fails = 0;
    for (int pi = 0; pi < np; pi++) {
        prompt_ids(prompt, nps[pi], V);
        greedy(m, prompt, nps[pi], n + 8, seq);
        for (int mode = 0; mode < modes; mode++)
            for (int ki = 0; ki < nk; ki++) {
                dsv41_session *s = NULL;
                int ok = speculate(m, prompt, nps[pi], n, ks[ki], mode, seq, out, &s) == 0 &&
                         !memcmp(out, seq, (size_t)n * sizeof *out) && same_as_sequential(m, s, prompt, nps[pi], seq);
                dsv41_session_free(s);
                if (!ok) {
                    fails++;
                    fprintf(stderr, "%s: prompt %d, %d drafts, %s: differs from one-token decoding\n", what, nps[pi], ks[ki], MODE_NAME[mode]);
                }
            }
    }
    return fails;
}

int main(void) {
    dsv41_model *tiny = dsv41_model_builtin(), *dm = model_from_config_file("models/tiny_dspark.json");
    CHECK(tiny && dm, "the models load");
    if (!tiny || !dm) return test_summary();
    CHECK(sweep(tiny, "tiny", OWN, 5, 3) == 0, "tiny model: forced drafts in 4 modes x 5 draft counts x 3 prompts emit the greedy ids");
    CHECK(sweep(dm, "tiny_dspark", MODES, 5, 3) == 0, "with a drafter: 5 modes x 5 draft counts x 3 prompts emit the greedy ids");

    const char *sets[8];
    int32_t ns = dsv41_kernel_sets(sets, 8);
    for (int32_t k = 0; k < ns; k++)
        for (int32_t th = 1; th <= 3; th += 2) {
            dsv41_set_kernels(sets[k]);
            dsv41_set_threads(th);
            CHECK(sweep(dm, sets[k], MODES, 1, 2) == 0, "kernel set %s, %d threads: every mode emits the greedy ids", sets[k], th);
        }
    dsv41_set_kernels(NULL);

    dsv41_session *s = dsv41_session_new(tiny);
    int32_t ids[9] = {1, 2, 3, 4, 5, 6, 7, 8, 9};
    CHECK(dsv41_session_verify(s, ids, 3) < 0, "an empty session does not verify");
    dsv41_session_forward(s, ids, 2, NULL, NULL);
    CHECK(dsv41_session_verify(s, ids, 9) < 0, "more rows than the window are refused");
    CHECK(dsv41_session_verify(s, ids, 0) < 0, "no rows are refused");
    dsv41_session_free(s);
    dsv41_model_free(tiny);
    dsv41_model_free(dm);
    return test_summary();
}
