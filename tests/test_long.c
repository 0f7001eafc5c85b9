/* test_long.c - long prompts: a prefill worked through in tiles of rows is the whole call.
 *
 * The reference prefills a prompt in one call; dsv41 takes each layer a tile of rows at a time
 * (dsv41_session_set_prefill_rows). Every tile size must leave the same bits as the call taken
 * whole: every position's logits, the window rings, the compressed caches, the index keys, the
 * compressor tails, the published top-k and candidate rows, and the decode steps after it. The
 * prompts are random, on the tiny geometry (window 8, top-k 6, candidates 3 blocks of 2, so
 * every path switches on within a few dozen positions) at its own context and at a longer one. */
#include <math.h>
#include <string.h>

#include "filler.h"
#include "json.h"
#include "pool.h"
#include "testing.h"

/* tiny.json with max_seq_len set to ctx; with `real`, V4.1-Flash's candidate settings (2,048
 * blocks of 8, so candidates select past 16,384 entries) and one index head, which keeps the
 * scoring of such prompts quick */
static dsv41_model *tiny_model(int32_t ctx, int real) {
    FILE *f = fopen("models/tiny.json", "rb");
    if (!f) return NULL;
    char text[1 << 14];
    size_t n = fread(text, 1, sizeof text - 1, f);
    fclose(f);
    text[n] = '\0';
    char err[200];
    json *j = json_parse(text, n, err, sizeof err);
    config c;
    int rc = j ? config_from_fixture(&c, j) : -1;
    json_free(j);
    if (rc) return NULL;
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

/* 0 when a and b hold the same state, bit for bit, else the name of what differs */
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
    if (p->topk_rows != q->topk_rows || p->topk_width != q->topk_width ||
        memcmp(p->topk, q->topk, (size_t)p->topk_rows * p->topk_width * sizeof *p->topk))
        return "published top-k";
    if (p->cand_rows != q->cand_rows || p->cand_width != q->cand_width ||
        memcmp(p->cand, q->cand, (size_t)p->cand_rows * (p->cand_rows ? cand_blocks(c, p->cand_width) : 0) * sizeof *p->cand))
        return "candidates";
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

/* Past the real candidate window: a prompt of 16,450 positions (the candidate layer selects 2,048
 * of its 2,057 blocks), prefilled in tiles of 512 rows at the default threads and kernels, and in
 * tiles of 3,000 on one thread with the scalar kernels, then decode steps: the same bits. The
 * tiles were checked against the whole call above; a whole call here would hold 1 GB of scores.
 * The server's paths to the same state share the prefill: its prompt cache (a copy of the
 * prefilled session, then one token per step) and a saved slot (the session file, loaded into a
 * fresh session) must hold the same state and decode the same bits. */
static void check_far(const dsv41_model *m) {
    int32_t n = 16450, V = dsv41_model_vocab_size(m), threads = pool_threads(), *ids = malloc((size_t)n * sizeof *ids);
    uint32_t seed = 11;
    for (int32_t i = 0; i < n; i++) ids[i] = (int32_t)((seed = seed * 1664525u + 1013904223u) >> 8) % V;
    float *a = malloc((size_t)V * sizeof *a), *b = malloc((size_t)V * sizeof *b);
    dsv41_session *x = dsv41_session_new(m), *y = dsv41_session_new(m);
    int ok = dsv41_session_forward(x, ids, n, a, NULL) == 0;
    ok = ok && dsv41_set_threads(1) == 0 && dsv41_set_kernels("scalar") == 0 && dsv41_session_set_prefill_rows(y, 3000) == 0 &&
         dsv41_session_forward(y, ids, n, b, NULL) == 0;
    const char *diff = ok ? state_diff(x, y) : "a call";
    CHECK(ok && !memcmp(a, b, (size_t)V * sizeof *a) && !diff, "16,450 positions, real candidate blocks: the prefill (%s)",
          diff ? diff : "logits");
    CHECK(x->shared.cand_rows == n && x->shared.cand[(int64_t)(n - 1) * 2048 + 2047] >= 0 &&
              cand_blocks(&m->cfg, x->shared.cand_width) == 2048,
          "the last row keeps 2,048 blocks");
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
    printf("a session file at 16,450 positions of this geometry: %ld bytes\n", bytes);
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
        same = same && dsv41_set_threads(1) == 0 && dsv41_set_kernels("scalar") == 0;
    }
    CHECK(same && !state_diff(x, y), "16,450 positions: the decode steps after it");
    CHECK(served && !state_diff(x, cached) && !state_diff(x, slot),
          "16,450 positions: the prompt cache's copy and the saved slot decode the same bits");
    dsv41_session_free(cached);
    dsv41_session_free(slot);
    free(c);
    free(d);
    dsv41_set_kernels(NULL);
    dsv41_set_threads(threads);
    dsv41_session_free(x);
    dsv41_session_free(y);
    free(ids);
    free(a);
    free(b);
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
