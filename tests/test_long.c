/* test_long.c - long prompts: a prefill worked through in tiles of rows is the whole call.
 *
 * The reference prefills a prompt in one call; dsv41 takes each layer a tile of rows at a time
 * (dsv41_session_set_prefill_rows). Every tile size must leave the same bits as the call taken
 * whole: every position's logits, the window rings, the compressed caches, the index keys, the
 * compressor tails, and the decode steps after it; no call leaves its top-k or candidate rows in
 * the session (they are the call's: model.h). The prompts are random, on the tiny geometry
 * (window 8, top-k 6, candidates 3 blocks of 2, so every path switches on within a few dozen
 * positions) at its own context and at a longer one.
 * A prefill that wants only its last row's logits skips the rows no later layer's window reaches
 * (forward.c, layer_first_row): the traced call, which computes every row, must leave the same
 * last logits, caches and decode steps. */
#include <math.h>
#include <string.h>

#include "dspark.h"
#include "filler.h"
#include "json.h"
#include "pool.h"
#include "session_v2.h"
#include "testing.h"

/* The config of a fixture-shaped file into c; 0, or -1 */
static int fixture_config(const char *path, config *c) {
    FILE *f = fopen(path, "rb");
    if (!f) return -1;
    char text[1 << 14];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char err[200];
    json *j = json_parse(text, n, err, sizeof err);
    int rc = j ? config_from_fixture(c, j) : -1;
    json_free(j);
    return rc;
}

/* tiny.json with max_seq_len set to ctx; with `real`, V4.1-Flash's candidate settings (2,048
 * blocks of 8, so candidates select past 16,384 entries) and one index head, which keeps the
 * scoring of such prompts quick */
static dsv41_model *tiny_model(int32_t ctx, int real) {
    config c;
    if (fixture_config("models/tiny.json", &c)) return NULL;
    c.max_seq_len = ctx;
    if (real) {
        c.candidate_topk_blocks = 2048;
        c.candidate_block_size = 8;
        c.index_n_heads = 1;
    }
    dsv41_model *m = model_from_rule(&c);
    if (!m) config_free(&c);
    return m;
}

/* 0 when a and b hold the same state, bit for bit, and neither holds a call's top-k or
 * candidate rows, else the name of what differs */
static const char *state_diff(const dsv41_session *a, const dsv41_session *b) {
    const config *c = &a->m->cfg;
    if (a->pos != b->pos || a->has_logits != b->has_logits) return "position";
    if (memcmp(a->logits, b->logits, (size_t)c->vocab_size * sizeof *a->logits)) return "last logits";
    for (int32_t l = 0; l < c->n_layers; l++) {
        const layer_state *x = &a->layers[l], *y = &b->layers[l];
        if (memcmp(x->window, y->window, (size_t)c->window_size * window_row_bytes(c))) return "window ring";
        if (!c->is_kv_source[l]) continue;
        size_t r = (size_t)c->compress_ratio[l], used = (size_t)a->pos / r;
        if (memcmp(x->ckv, y->ckv, used * ckv_row_bytes(c))) return "compressed KV";
        if (memcmp(x->ik, y->ik, used * ik_row_bytes(c))) return "index keys";
        if (memcmp(x->kv_state, y->kv_state, r * c->head_dim * sizeof(float)) ||
            memcmp(x->score_state, y->score_state, r * c->head_dim * sizeof(float)))
            return "compressor tail";
    }
    const shared_slots *p = &a->shared, *q = &b->shared;
    if (slot_layer(a, p->compress_kv, 0) != slot_layer(b, q->compress_kv, 0) ||
        slot_layer(a, p->index_k, 1) != slot_layer(b, q->index_k, 1))
        return "shared slots";
    if (p->topk_rows || p->topk_width || p->cand_rows || p->cand_width || q->topk_rows || q->topk_width || q->cand_rows ||
        q->cand_width)
        return "a call's top-k or candidate rows left";
    return NULL;
}

/* A prompt of n random ids prefilled whole and in tiles of each of `tiles`: the logits of every
 * position, the state, and 3 decode steps after it agree bit for bit. */
static void check_tiles(const dsv41_model *m, int32_t n, const int32_t *tiles, int nt, uint32_t seed) {
    int32_t V = dsv41_model_vocab_size(m), *ids = malloc((size_t)n * sizeof *ids);
    float *want = malloc((size_t)n * V * sizeof *want), *got = malloc((size_t)n * V * sizeof *got);
    float *dw = malloc((size_t)V * sizeof *dw), *dg = malloc((size_t)V * sizeof *dg);
    for (int32_t i = 0; i < n; i++) ids[i] = (int32_t)((seed = seed * 1664525u + 1013904223u) >> 8) % V;
    dsv41_session *whole = dsv41_session_new(m);
    CHECK(dsv41_session_set_prefill_rows(whole, n) == 0 && dsv41_session_forward_all(whole, ids, n, want) == 0,
          "prefill %d tokens whole: %s", n, dsv41_error());
    for (int k = 0; k < nt; k++) {
        dsv41_session *s = dsv41_session_new(m);
        CHECK(dsv41_session_set_prefill_rows(s, tiles[k]) == 0 && dsv41_session_forward_all(s, ids, n, got) == 0,
              "prefill %d tokens in tiles of %d: %s", n, tiles[k], dsv41_error());
        CHECK(!memcmp(want, got, (size_t)n * V * sizeof *got), "%d tokens, tiles of %d: every position's logits", n, tiles[k]);
        const char *diff = state_diff(whole, s);
        CHECK(!diff, "%d tokens, tiles of %d: the state after the prefill (%s differs)", n, tiles[k], diff ? diff : "");
        dsv41_session *w2 = dsv41_session_new(m);
        int same = dsv41_session_copy(w2, whole) == 0;
        for (int32_t step = 0; same && step < 3 && n + step < dsv41_model_max_seq_len(m); step++) {
            int32_t next = (int32_t)((seed + (uint32_t)step * 7919u) % (uint32_t)V);
            same = dsv41_session_forward(w2, &next, 1, dw, NULL) == 0 && dsv41_session_forward(s, &next, 1, dg, NULL) == 0 &&
                   !memcmp(dw, dg, (size_t)V * sizeof *dg) && !state_diff(w2, s);
        }
        CHECK(same, "%d tokens, tiles of %d: the decode steps after it", n, tiles[k]);
        dsv41_session_free(w2);
        dsv41_session_free(s);
    }
    dsv41_session_free(whole);
    free(ids);
    free(want);
    free(got);
    free(dw);
    free(dg);
}

/* RoPE at positions up to the release's 1,048,576: the reference forms each angle as the f32
 * product of the f32 position and the f32 frequency (torch.outer) and takes cos and sin of that
 * f32 angle. Checked here against the same in double precision (the product of two floats is
 * exact in a double, then rounded once to f32; cos and sin in double, rounded to f32), and shown
 * to differ from angles formed in double at such positions, which an engine must not do. */
static void check_rope_far(const dsv41_model *m) {
    const config *c = &m->cfg;
    static const int64_t pos[] = {0, 1, 4095, 65535, 65536, 1000003, 1048575};
    int32_t half = c->rope_head_dim / 2, bad = 0, far_apart = 0;
    float cs[ROPE_MAX_HALF], sn[ROPE_MAX_HALF];
    for (int tbl = 0; tbl < 2; tbl++) {
        const rope_table *rt = tbl ? &m->rope_yarn : &m->rope_plain;
        for (size_t i = 0; i < sizeof pos / sizeof *pos; i++) {
            rope_angles(rt, half, pos[i], cs, sn);
            for (int32_t k = 0; k < half; k++) {
                double a = (double)(float)((double)(float)pos[i] * (double)rt->freq[k]); /* the f32 angle */
                float wc = (float)cos(a), ws = (float)sin(a);
                /* cosf / sinf are within an ulp of the value correctly rounded from double */
                bad += fabsf(cs[k] - wc) > 1.2e-7f * fmaxf(1.0f, fabsf(wc)) || fabsf(sn[k] - ws) > 1.2e-7f * fmaxf(1.0f, fabsf(ws));
                far_apart += (float)cos((double)pos[i] * (double)rt->freq[k]) != wc;
            }
        }
    }
    CHECK(bad == 0, "RoPE: %d angles up to position 1048575 are not the f32 angles of the reference", bad);
    CHECK(far_apart > 0, "RoPE: angles formed in double would differ at such positions (%d do)", far_apart);
}

/* The caches grow as the position needs them: decode steps across the room a new session starts
 * with give what a session that had the room from the start gives. */
static void check_growth(const dsv41_model *m) {
    int32_t V = dsv41_model_vocab_size(m), n = 4090, steps = 12, *ids = malloc(4200 * sizeof *ids);
    for (int32_t i = 0; i < 4200; i++) ids[i] = (int32_t)((i * 7919 + 5) % V);
    float *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b);
    dsv41_session *fresh = dsv41_session_new(m), *roomy = dsv41_session_new(m);
    CHECK(dsv41_session_forward(roomy, ids, 4200, NULL, NULL) == 0 && dsv41_session_reset(roomy) == 0 && roomy->cap >= 4200,
          "a session grown to 4200 positions and emptied: %s", dsv41_error());
    CHECK(fresh->cap < n + steps, "a new session starts with room for fewer positions (%d)", fresh->cap);
    int same = dsv41_session_forward(fresh, ids, n, a, NULL) == 0 && dsv41_session_forward(roomy, ids, n, b, NULL) == 0 &&
               !memcmp(a, b, (size_t)V * sizeof *a);
    for (int32_t i = 0; same && i < steps; i++)
        same = dsv41_session_forward(fresh, &ids[n + i], 1, a, NULL) == 0 &&
               dsv41_session_forward(roomy, &ids[n + i], 1, b, NULL) == 0 && !memcmp(a, b, (size_t)V * sizeof *a);
    const char *diff = state_diff(fresh, roomy);
    CHECK(same && !diff && fresh->cap >= n + steps, "decode steps across the first room: the same logits and state (%s)",
          diff ? diff : "");
    dsv41_session_free(fresh);
    dsv41_session_free(roomy);
    free(ids);
    free(a);
    free(b);
}

/* After a traced decode step of x (past 16,450 positions) on ids[0]: its candidate source keeps
 * 2,048 of the row's blocks (the candidates select), and x's file in the form version 2 wrote
 * (the step's rows put back from the trace: session_v2.h) loads and decodes x's next step. */
static void check_far_v2(const dsv41_model *m, dsv41_session *x, const int32_t *ids) {
    int32_t V = dsv41_model_vocab_size(m), block = m->cfg.candidate_block_size;
    float *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b);
    dsv41_trace *tr = dsv41_trace_new();
    dsv41_session *old = dsv41_session_new(m);
    char name[64], path[] = "/tmp/dsv41-long-v2-XXXXXX";
    snprintf(name, sizeof name, "shared.L%d.candidates", m->cfg.candidate_source_layer);
    int ok = dsv41_session_forward(x, ids, 1, a, tr) == 0;
    const capture *cd = ok ? trace_find(tr, name) : NULL;
    int64_t kept = 0, blocks = cd ? (cd->shape[2] + block - 1) / block : 0;
    for (int64_t i = 0; cd && i < cd->n; i++) kept += cd->v[i] != 0;
    CHECK(cd && cd->shape[1] == 1 && blocks > 2048 && kept > 2047 * block && kept <= 2048 * block,
          "a decode step at %d positions: the candidate source keeps 2,048 of %lld blocks (%lld entries)", x->pos,
          (long long)blocks, (long long)kept);
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    size_t n = 0, on = 0;
    uint8_t *bytes = NULL, *v2 = NULL;
    ok = ok && fd >= 0 && dsv41_session_save(x, path) == 0 && (bytes = (uint8_t *)test_read_file(path, &n)) != NULL &&
         (v2 = session_file_v2(m, bytes, n, tr, &on)) != NULL;
    FILE *f = ok ? fopen(path, "wb") : NULL;
    ok = f && fwrite(v2, 1, on, f) == on;
    if (f) fclose(f);
    ok = ok && dsv41_session_load(old, path) == 0 && dsv41_session_forward(x, ids + 1, 1, a, NULL) == 0 &&
         dsv41_session_forward(old, ids + 1, 1, b, NULL) == 0 && !memcmp(a, b, (size_t)V * sizeof *a) && !state_diff(x, old);
    CHECK(ok && on == n + 4 * (size_t)(blocks > 2048 ? 2048 + m->cfg.index_topk : 0),
          "its file in version 2's form (%zu bytes, a row of top-k and of candidate blocks more) loads and decodes the "
          "same bits: %s", on, ok ? "" : dsv41_error());
    if (fd >= 0) unlink(path);
    free(bytes);
    free(v2);
    dsv41_session_free(old);
    dsv41_trace_free(tr);
    free(a);
    free(b);
}

/* Past the real candidate window: a prompt of 16,450 positions (the candidate layer selects 2,048
 * of its 2,057 blocks), prefilled in tiles of 512 rows at the default threads and kernels, and in
 * tiles of 3,000 on one thread with the scalar kernels (the default ones under a sanitizer), then
 * decode steps: the same bits. The
 * tiles were checked against the whole call above; a whole call here would hold 1 GB of scores.
 * The server's paths to the same state share the prefill: its prompt cache (a copy of the
 * prefilled session, then one token per step) and a saved slot (the session file, loaded into a
 * fresh session) must hold the same state and decode the same bits. */
static void check_far(const dsv41_model *m) {
    /* under a sanitizer (20x slower) the second run keeps the default kernels: the kernel sets are
     * compared bit for bit at every size elsewhere, and this run is there for the lengths */
    const char *second = TEST_SLOWDOWN > 1.0 ? NULL : "scalar";
    int32_t n = 16450, V = dsv41_model_vocab_size(m), threads = pool_threads(), *ids = malloc((size_t)n * sizeof *ids);
    uint32_t seed = 11;
    for (int32_t i = 0; i < n; i++) ids[i] = (int32_t)((seed = seed * 1664525u + 1013904223u) >> 8) % V;
    float *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b);
    dsv41_session *x = dsv41_session_new(m), *y = dsv41_session_new(m);
    int ok = dsv41_session_forward(x, ids, n, a, NULL) == 0;
    ok = ok && dsv41_set_threads(1) == 0 && dsv41_set_kernels(second) == 0 && dsv41_session_set_prefill_rows(y, 3000) == 0 &&
         dsv41_session_forward(y, ids, n, b, NULL) == 0;
    const char *diff = ok ? state_diff(x, y) : "a call";
    CHECK(ok && !memcmp(a, b, (size_t)V * sizeof *a) && !diff, "16,450 positions, real candidate blocks: the prefill (%s)",
          diff ? diff : "logits");
    /* the call's top-k and candidate blocks (8 KB a row here) went with it, buffers included */
    CHECK(ok && x->shared.cand_cap < (size_t)n * sizeof(int32_t) && x->shared.topk_cap < (size_t)n * sizeof(int32_t),
          "16,450 positions: the session holds no top-k or candidate rows after the prefill (%zu and %zu bytes kept)",
          x->shared.topk_cap, x->shared.cand_cap);
    char path[] = "/tmp/dsv41-long-XXXXXX";
    int fd = mkstemp(path);
    if (fd >= 0) close(fd);
    dsv41_session *cached = dsv41_session_new(m), *slot = dsv41_session_new(m);
    int held = ok && fd >= 0 && dsv41_session_copy(cached, x) == 0 && dsv41_session_save(x, path) == 0 &&
               dsv41_session_load(slot, path) == 0;
    const char *dc = held ? state_diff(x, cached) : "a call", *ds = held ? state_diff(x, slot) : "a call";
    CHECK(held && !dc && !ds, "16,450 positions: the prompt cache's copy and a saved slot hold the state (%s, %s)",
          dc ? dc : "copy same", ds ? ds : "file same");
    FILE *sf = fopen(path, "rb");
    long bytes = sf && fseek(sf, 0, SEEK_END) == 0 ? ftell(sf) : -1;
    if (sf) fclose(sf);
    /* a file is its caches: the id and the packed rows of each position, and what does not grow
     * with them (the header, the last logits, the window rings, the compressor tails) */
    const config *cf = &m->cfg;
    double per = cache_bytes_per_token(cf, 1) + sizeof(int32_t), fixed = 4.0 * cf->vocab_size + 65536.0 +
                 (double)cf->n_layers * cf->window_size * window_row_bytes(cf);
    printf("a session file at 16,450 positions of this geometry: %ld bytes\n", bytes);
    CHECK(bytes >= per * n - 65536.0 && bytes <= per * n + fixed,
          "a session file at 16,450 positions of this geometry: %ld bytes, %.1f a position and %.0f more at most", bytes, per,
          fixed);
    unlink(path);
    float *c = malloc((size_t)V * sizeof *c), *d = malloc((size_t)V * sizeof *d);
    int same = ok, served = held;
    for (int32_t i = 0; same && i < 4; i++) {
        int32_t next = ids[i];
        same = dsv41_session_forward(y, &next, 1, b, NULL) == 0 && dsv41_set_kernels(NULL) == 0 &&
               dsv41_set_threads(threads) == 0 && dsv41_session_forward(x, &next, 1, a, NULL) == 0 &&
               !memcmp(a, b, (size_t)V * sizeof *a);
        served = served && same && dsv41_session_forward(cached, &next, 1, c, NULL) == 0 &&
                 dsv41_session_forward(slot, &next, 1, d, NULL) == 0 && !memcmp(a, c, (size_t)V * sizeof *a) &&
                 !memcmp(a, d, (size_t)V * sizeof *a);
        same = same && dsv41_set_threads(1) == 0 && dsv41_set_kernels(second) == 0;
    }
    CHECK(same && !state_diff(x, y), "16,450 positions: the decode steps after it");
    CHECK(served && !state_diff(x, cached) && !state_diff(x, slot),
          "16,450 positions: the prompt cache's copy and the saved slot decode the same bits");
    dsv41_set_kernels(NULL);
    dsv41_set_threads(threads);
    check_far_v2(m, x, ids + 10);
    dsv41_session_free(cached);
    dsv41_session_free(slot);
    free(c);
    free(d);
    dsv41_session_free(x);
    dsv41_session_free(y);
    free(ids);
    free(a);
    free(b);
}

/* tiny_dspark.json with one kv source, layer 2 (the candidate source too, ratio 2 from it on):
 * layers 3-5 lie past it, with the index sources 4 and 5, the Engram layer 4 and the drafter's
 * three targets. A prefill of n rows then needs layer l from row n - 8 - (5 - l) x 7 on (window
 * 8): 22 rows of layer 3, 15 of layer 4, 8 of layer 5. */
static dsv41_model *halo_model(void) {
    config c;
    if (fixture_config("models/tiny_dspark.json", &c)) return NULL;
    c.max_seq_len = 512;
    for (int32_t l = 3; l < c.n_layers; l++) c.compress_ratio[l] = 2;
    c.is_kv_source[4] = 0;
    c.candidate_source_layer = 2;
    dsv41_model *m = model_from_rule(&c);
    if (!m) config_free(&c);
    return m;
}

/* The rule, stated here on its own: the first row of n that a layer past layer full_to needs */
static int64_t halo_first(const config *c, int32_t full_to, int32_t l, int64_t n) {
    int64_t first = n - c->window_size - (int64_t)(c->n_layers - 1 - l) * (c->window_size - 1);
    return l <= full_to || first < 0 ? 0 : first;
}

/* A prompt of n random ids prefilled by a traced call (which computes every row of every layer)
 * and by plain calls that want the last row's logits (which skip the rows the rule leaves out),
 * on every kernel set, 1 and 3 threads and tiles of n, 7 and 64 rows (`matrix`; else the default
 * alone): the same last logits and caches (window rings, compressed KV, index keys, compressor
 * tails, candidates, Engram history, the drafter's taps), and the same logits, state and drafts
 * over 3 decode steps after it. The top-k rows a call publishes are dropped when it ends, but a
 * buffer this small stays allocated (session_end_call) holding them as the call left them: each
 * row's must be the one the last index source that computed the row published, read from the
 * trace; *skipped gets whether that differs from the full call's on some row (so the check tells
 * a skip from none). */
static void check_skip(const dsv41_model *m, int32_t n, uint32_t seed, int matrix, int *skipped) {
    const config *c = &m->cfg;
    int32_t V = c->vocab_size, W = c->window_size, B = dsv41_model_draft_size(m), full_to = 2, last = 0, threads = pool_threads();
    int32_t *ids = malloc((size_t)n * sizeof *ids), dw[8], dg[8];
    float *want = malloc((size_t)V * sizeof *want), *got = malloc((size_t)V * sizeof *got);
    float *lw = malloc((size_t)(B + 1) * V * sizeof *lw), *lg = malloc((size_t)(B + 1) * V * sizeof *lg);
    for (int32_t i = 0; i < n; i++) ids[i] = (int32_t)((seed = seed * 1664525u + 1013904223u) >> 8) % V;
    for (int32_t l = 0; l < c->n_layers; l++)
        if (c->is_index_source[l]) last = l;
    dsv41_trace *tr = dsv41_trace_new();
    dsv41_session *full = dsv41_session_new(m);
    CHECK(dsv41_session_forward(full, ids, n, want, tr) == 0, "%d tokens traced: %s", n, dsv41_error());
    /* row r's top-k as the index source that last computed it published it */
    char lname[64];
    snprintf(lname, sizeof lname, "shared.L%d.topk_idxs", last);
    const capture *lcap = trace_find(tr, lname);
    int32_t width = lcap ? (int32_t)lcap->shape[2] : 0, *expect = malloc((size_t)n * (width ? width : 1) * sizeof *expect);
    int kept = lcap && lcap->shape[1] == n && full->shared.topk_cap >= (size_t)n * width * sizeof *expect;
    CHECK(kept, "%d tokens traced: the last index source's top-k, in a buffer kept", n);
    *skipped = 0;
    for (int32_t l = 0; l < c->n_layers; l++) {
        char name[64];
        snprintf(name, sizeof name, "shared.L%d.topk_idxs", l);
        const capture *cap = c->is_index_source[l] ? trace_find(tr, name) : NULL;
        for (int64_t r = halo_first(c, full_to, l, n); cap && r < n; r++)
            for (int32_t k = 0; k < width; k++) expect[r * width + k] = (int32_t)cap->v[r * width + k];
    }
    for (int64_t i = 0; kept && i < (int64_t)n * width; i++) *skipped |= expect[i] != full->shared.topk[i];
    const char *sets[8];
    int32_t ns = matrix ? dsv41_kernel_sets(sets, 8) : 1, tiles[] = {n, 7, 64};
    for (int32_t k = 0; k < ns * (matrix ? 6 : 1); k++) {
        int32_t th = k % 2 ? 3 : 1, tile = tiles[k / 2 % 3];
        CHECK(!matrix || (dsv41_set_kernels(sets[k / 6]) == 0 && dsv41_set_threads(th) == 0), "kernel set %s, %d threads",
              matrix ? sets[k / 6] : "default", th);
        dsv41_session *s = dsv41_session_new(m), *w2 = dsv41_session_new(m);
        int ok = dsv41_session_set_prefill_rows(s, tile) == 0 && dsv41_session_forward(s, ids, n, got, NULL) == 0;
        dsv41_set_kernels(NULL);
        dsv41_set_threads(threads);
        const char *diff = ok ? state_diff(full, s) : "a call";
        if (!diff && memcmp(full->draft->taps, s->draft->taps, (size_t)W * c->dspark_n_targets * c->dim * sizeof(float)))
            diff = "drafter taps";
        if (!diff && (s->shared.topk_cap < (size_t)n * width * sizeof *expect ||
                      memcmp(s->shared.topk, expect, (size_t)n * width * sizeof *expect)))
            diff = "published top-k";
        CHECK(ok && !memcmp(want, got, (size_t)V * sizeof *got) && !diff,
              "%d tokens, set %s, %d threads, tiles of %d: the last logits and the state after the prefill (%s)", n,
              matrix ? sets[k / 6] : "default", matrix ? th : threads, tile, diff ? diff : "logits");
        int same = dsv41_session_copy(w2, full) == 0;
        for (int32_t step = 0; same && step < 3; step++) {
            int32_t next = (int32_t)((seed + (uint32_t)step * 7919u) % (uint32_t)V);
            same = dsv41_session_forward(w2, &next, 1, lw, NULL) == 0 && dsv41_session_forward(s, &next, 1, lg, NULL) == 0 &&
                   !memcmp(lw, lg, (size_t)V * sizeof *lg) && !state_diff(w2, s) &&
                   dsv41_session_draft(w2, next, B, dw, lw, NULL) == 0 && dsv41_session_draft(s, next, B, dg, lg, NULL) == 0 &&
                   !memcmp(dw, dg, (size_t)B * sizeof *dw) && !memcmp(lw, lg, (size_t)B * V * sizeof *lg);
        }
        CHECK(same, "%d tokens, set %s, tiles of %d: 3 decode steps and drafts after it", n, matrix ? sets[k / 6] : "default", tile);
        dsv41_session_free(w2);
        dsv41_session_free(s);
    }
    dsv41_trace_free(tr);
    dsv41_session_free(full);
    free(expect);
    free(ids);
    free(want);
    free(got);
    free(lw);
    free(lg);
}

/* A batch (dsv41_batch_forward) of prefills of 150 rows in tiles of 7, 61 rows in tiles of 16 and
 * 5 rows, beside a decode step of a session 40 tokens in, and then two batched decode steps: each
 * session's logits and state are those of the same calls made alone. */
static void check_batch(const dsv41_model *m) {
    enum { N = 4 };
    int32_t V = dsv41_model_vocab_size(m), len[N] = {150, 61, 1, 5}, tiles[N] = {7, 16, 512, 512}, *buf[N];
    const int32_t *ids[N];
    dsv41_session *b[N], *a[N];
    float *lb[N], *la[N];
    int ok = 1;
    for (int i = 0; i < N; i++) {
        ids[i] = buf[i] = malloc(160 * sizeof *buf[i]);
        for (int32_t k = 0; k < 160; k++) buf[i][k] = (k * 37 + i * 11 + 5) % V;
        b[i] = dsv41_session_new(m);
        a[i] = dsv41_session_new(m);
        lb[i] = malloc((size_t)V * sizeof *lb[i]);
        la[i] = malloc((size_t)V * sizeof *la[i]);
        ok &= dsv41_session_set_prefill_rows(b[i], tiles[i]) == 0 && dsv41_session_set_prefill_rows(a[i], tiles[i]) == 0;
    }
    ok &= dsv41_session_forward(b[2], buf[2] + 1, 40, NULL, NULL) == 0 && dsv41_session_forward(a[2], buf[2] + 1, 40, NULL, NULL) == 0;
    for (int step = 0; ok && step < 3; step++) {
        ok = dsv41_batch_forward(b, ids, len, N, lb) == 0;
        for (int i = 0; ok && i < N; i++) {
            const char *diff = dsv41_session_forward(a[i], ids[i], len[i], la[i], NULL) ? "a call" : state_diff(a[i], b[i]);
            if (!diff && memcmp(la[i], lb[i], (size_t)V * sizeof *la[i])) diff = "logits";
            if (!diff && memcmp(a[i]->draft->taps, b[i]->draft->taps,
                                (size_t)m->cfg.window_size * m->cfg.dspark_n_targets * m->cfg.dim * sizeof(float)))
                diff = "drafter taps";
            CHECK(!diff, "batch call %d, session %d (%d tokens at %d): as alone (%s differs)", step, i, len[i],
                  a[i]->pos - len[i], diff ? diff : "");
            ok = !diff;
            ids[i] = buf[i] + 151 + step; /* the next calls feed one token each */
            len[i] = 1;
        }
    }
    CHECK(ok, "a batch of tiled prefills and a decode step, then decode steps: as each session alone");
    for (int i = 0; i < N; i++) {
        dsv41_session_free(a[i]);
        dsv41_session_free(b[i]);
        free(la[i]);
        free(lb[i]);
        free(buf[i]);
    }
}

int main(void) {
    dsv41_model *m = tiny_model(64, 0);
    CHECK(m != NULL, "the tiny model: %s", dsv41_error());
    if (m) {
        static const int32_t tiles[] = {1, 2, 3, 6, 8, 10, 30};
        check_tiles(m, 64, tiles, 7, 1u);
        check_tiles(m, 61, tiles, 7, 2u); /* an odd prompt: the compressor's tail in the last tile */
        check_rope_far(m);
        dsv41_session *s = dsv41_session_new(m);
        CHECK(dsv41_session_set_prefill_rows(s, 0) == -1 && strstr(dsv41_error(), "at least 1"), "0 rows are refused");
        dsv41_session_free(s);
    }
    dsv41_model_free(m);
    m = tiny_model(1200, 0);
    CHECK(m != NULL, "the tiny model at a context of 1200: %s", dsv41_error());
    if (m) {
        static const int32_t tiles[] = {16, 100, 512};
        check_tiles(m, 1100, tiles, 3, 3u);
    }
    dsv41_model_free(m);
    m = halo_model();
    CHECK(m != NULL, "the tiny model with one kv source: %s", dsv41_error());
    if (m) {
        int skipped;
        check_skip(m, 150, 4u, 1, &skipped);
        CHECK(skipped, "150 tokens: the last index source skipped rows (its top-k differs from the full call's)");
        check_skip(m, 97, 5u, 0, &skipped); /* an odd prompt: the compressor's tail */
        check_skip(m, 22, 6u, 0, &skipped); /* the halo: layer 3 computes every row */
        check_skip(m, 8, 7u, 0, &skipped);  /* the window: every layer computes every row */
        check_batch(m);
    }
    dsv41_model_free(m);
    m = tiny_model(8192, 0);
    CHECK(m != NULL, "the tiny model at a context of 8192: %s", dsv41_error());
    if (m) check_growth(m);
    dsv41_model_free(m);
    m = tiny_model(16600, 1);
    CHECK(m != NULL, "the tiny model with the real candidate settings: %s", dsv41_error());
    if (m) check_far(m);
    dsv41_model_free(m);
    return test_summary();
}
