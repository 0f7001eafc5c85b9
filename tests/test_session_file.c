/* test_session_file.c - sessions saved and loaded (dsv41_session_save / _load), copied, reset.
 *
 * The reference for a restored or copied session is the original continuing: both are fed the
 * same tokens and must give the same logits bit for bit. Damaged files (every byte flipped, cut
 * at every length, other models, other versions) must be refused with the session untouched,
 * which the same continuation checks at the end. A file of format version 2, which kept the last
 * call's top-k and candidate rows (session_v2.h), still loads and continues alike. */
#include <dirent.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "filler.h"
#include "model.h"
#include "session_v2.h"
#include "testing.h"

static char tmpdir[64];

/* Feeds ids one token per call (or n at once when append), returning 0 when every logit
 * matches between a and b bit for bit. */
static int continue_both(dsv41_session *a, dsv41_session *b, const int32_t *ids, int32_t n, int append, int32_t V) {
    float *la = malloc((size_t)V * 4), *lb = malloc((size_t)V * 4);
    int diff = 0;
    for (int32_t i = 0; i < n && !diff; i += append ? n : 1) {
        int32_t k = append ? n : 1;
        if (dsv41_session_forward(a, ids + i, k, la, NULL) || dsv41_session_forward(b, ids + i, k, lb, NULL)) diff = 1;
        else diff = memcmp(la, lb, (size_t)V * 4) != 0;
    }
    free(la);
    free(lb);
    return diff;
}

/* 1 when a and b hold the same ids and last logits */
static int same_view(const dsv41_session *a, const dsv41_session *b, int32_t V) {
    int32_t na, nb;
    const int32_t *ta = dsv41_session_tokens(a, &na), *tb = dsv41_session_tokens(b, &nb);
    const float *la = dsv41_session_logits(a), *lb = dsv41_session_logits(b);
    return na == nb && !memcmp(ta, tb, (size_t)na * 4) && !la == !lb && (!la || !memcmp(la, lb, (size_t)V * 4));
}

static void fill_ids(int32_t *ids, int32_t n, int32_t V, int32_t salt) {
    for (int32_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 7 + salt * 13 + 3) % V);
}

/* Saves a session at each position shape, loads it into a session holding other state, and
 * continues both: one token at a time, then an append. */
static void test_round_trip(const dsv41_model *m, const char *name) {
    int32_t V = dsv41_model_vocab_size(m), ids[64], more[16];
    char path[128];
    snprintf(path, sizeof path, "%s/rt.session", tmpdir);
    /* prefill length, decode steps after it, whether the last call asked for logits */
    static const struct { int32_t prefill, decode, logits; } cases[] = {
        {0, 0, 0}, {1, 0, 1}, {3, 0, 1}, {5, 4, 1}, {6, 0, 0}, {12, 7, 1}, {20, 3, 1}, {1, 30, 1}, {40, 9, 1}};
    for (size_t c = 0; c < sizeof cases / sizeof *cases; c++) {
        dsv41_session *a = dsv41_session_new(m), *b = dsv41_session_new(m);
        float *lg = malloc((size_t)V * 4);
        fill_ids(ids, 64, V, (int32_t)c);
        int rc = 0;
        if (cases[c].prefill) rc |= dsv41_session_forward(a, ids, cases[c].prefill, cases[c].logits ? lg : NULL, NULL);
        for (int32_t i = 0; i < cases[c].decode; i++)
            rc |= dsv41_session_forward(a, ids + cases[c].prefill + i, 1, cases[c].logits ? lg : NULL, NULL);
        fill_ids(more, 16, V, 99);
        rc |= dsv41_session_forward(b, more, 16, lg, NULL); /* b holds more than a: the load must clear it */
        CHECK(rc == 0, "%s case %zu: feeding", name, c);
        CHECK(dsv41_session_save(a, path) == 0, "%s case %zu: save: %s", name, c, dsv41_error());
        CHECK(dsv41_session_load(b, path) == 0, "%s case %zu: load: %s", name, c, dsv41_error());
        CHECK(dsv41_session_pos(b) == dsv41_session_pos(a) && same_view(a, b, V), "%s case %zu: ids and logits", name, c);
        fill_ids(more, 16, V, 5 + (int32_t)c);
        if (dsv41_session_pos(a) == 0) {
            CHECK(continue_both(a, b, more, 6, 1, V) == 0, "%s case %zu: a prefill after loading position 0", name, c);
        } else {
            CHECK(continue_both(a, b, more, 6, 0, V) == 0, "%s case %zu: decode continues bit-identical", name, c);
            CHECK(continue_both(a, b, more + 6, 5, 1, V) == 0, "%s case %zu: an append continues bit-identical", name, c);
        }
        free(lg);
        dsv41_session_free(a);
        dsv41_session_free(b);
    }
}

static void write_bytes(const char *path, const uint8_t *p, size_t n) {
    FILE *f = fopen(path, "wb");
    if (n) fwrite(p, 1, n, f);
    fclose(f);
}

/* A load of path into b fails with a message and leaves b as ref */
static int refused(dsv41_session *b, const dsv41_session *ref, const char *path, int32_t V) {
    return dsv41_session_load(b, path) == -1 && dsv41_error()[0] && !strchr(dsv41_error(), '\n') &&
           dsv41_session_pos(b) == dsv41_session_pos(ref) && same_view(b, ref, V);
}

static void test_damage(const dsv41_model *m) {
    int32_t V = dsv41_model_vocab_size(m), ids[32];
    char good[128], bad[128];
    snprintf(good, sizeof good, "%s/good.session", tmpdir);
    snprintf(bad, sizeof bad, "%s/bad.session", tmpdir);
    dsv41_session *a = dsv41_session_new(m), *b = dsv41_session_new(m), *ref = dsv41_session_new(m);
    dsv41_trace *tr = dsv41_trace_new();
    float *lg = malloc((size_t)V * 4);
    fill_ids(ids, 32, V, 1);
    dsv41_session_forward(a, ids, 13, lg, NULL);
    dsv41_session_forward(a, ids + 13, 1, lg, tr);
    dsv41_session_forward(b, ids + 3, 9, lg, NULL);
    dsv41_session_copy(ref, b);
    CHECK(dsv41_session_save(a, good) == 0, "save: %s", dsv41_error());
    size_t n = 0;
    uint8_t *bytes = (uint8_t *)test_read_file(good, &n);
    CHECK(bytes && n > 80, "the file has a header and a body (%zu bytes)", n);
    if (!bytes) return;
    printf("a session at position 14 of the built-in model: %zu bytes\n", n);
    size_t flips = 0, cuts = 0;
    for (size_t i = 0; i < n; i++) {
        bytes[i] ^= (uint8_t)(1u << (i % 8));
        write_bytes(bad, bytes, n);
        bytes[i] ^= (uint8_t)(1u << (i % 8));
        int ok = refused(b, ref, bad, V);
        flips += ok;
        if (!ok) CHECK(0, "a flipped bit at byte %zu is refused (%s)", i, dsv41_error());
    }
    CHECK(flips == n, "every one of %zu flipped bytes refused", n);
    for (size_t len = 0; len < n; len++) {
        write_bytes(bad, bytes, len);
        int ok = refused(b, ref, bad, V);
        cuts += ok;
        if (!ok) CHECK(0, "a file cut to %zu bytes is refused (%s)", len, dsv41_error());
    }
    CHECK(cuts == n, "every one of %zu truncations refused", n);
    write_bytes(bad, bytes, 0);
    CHECK(refused(b, ref, bad, V) && strstr(dsv41_error(), "empty"), "an empty file: %s", dsv41_error());
    uint8_t *longer = malloc(n + 1);
    memcpy(longer, bytes, n);
    longer[n] = 0;
    write_bytes(bad, longer, n + 1);
    CHECK(refused(b, ref, bad, V), "a byte appended is refused");
    free(longer);
    CHECK(bytes[8] == 3, "the format version is 3");
    bytes[8] = 4; /* a future format version */
    write_bytes(bad, bytes, n);
    CHECK(refused(b, ref, bad, V) && strstr(dsv41_error(), "version 4"), "a future version: %s", dsv41_error());
    bytes[8] = 1; /* version 1 held the caches as f32 and the candidates as a mask */
    write_bytes(bad, bytes, n);
    bytes[8] = 3;
    CHECK(refused(b, ref, bad, V) && strstr(dsv41_error(), "version 1") && strstr(dsv41_error(), "reads versions 2 and 3"),
          "an older version: %s", dsv41_error());
    /* version 3 holds no top-k or candidate rows: a file that claims the rows version 2 kept */
    size_t on = 0;
    uint8_t *old = session_file_v2(m, bytes, n, tr, &on);
    CHECK(old && on > n, "the version 2 form of the file (%zu bytes)", on);
    if (!old) return;
    old[8] = 3;
    session_reseal(old, on);
    write_bytes(bad, old, on);
    CHECK(refused(b, ref, bad, V) && strstr(dsv41_error(), "shared slots"), "version 3 with rows: %s", dsv41_error());
    old[8] = 2;
    session_reseal(old, on);
    /* a crafted version 2 file with a valid checksum: counts a position cannot have, a top-k
     * entry past the cache; the fields are the header's (docs/SESSION_FORMAT.md) */
    static const struct { size_t at; int32_t value; const char *msg; } crafted[] = {
        {32, 65, "position"}, {32, -1, "position"}, {36, 2, "logits"}, {40, 0, "layers"}, {44, 1, "layers"},
        {48, 7, "shared slots"}, {52, 5, "shared slots"}, {56, 0, "shared slots"}, {60, 3, "shared slots"},
        {64, 1, "sizes"}, {SIZE_MAX, 0, "top-k"}};
    for (size_t i = 0; i < sizeof crafted / sizeof *crafted; i++) {
        uint8_t *f = malloc(on);
        memcpy(f, old, on);
        uint32_t cnt[4]; /* topk rows, width, candidate rows, width: the top-k then the blocks end the state */
        for (int c = 0; c < 4; c++) cnt[c] = (uint32_t)f[48 + 4 * c] | (uint32_t)f[49 + 4 * c] << 8;
        size_t kb = cnt[2] ? (size_t)cand_blocks(&m->cfg, (int32_t)cnt[3]) : 0;
        size_t at = crafted[i].at != SIZE_MAX ? crafted[i].at : on - 8 - 4 * cnt[2] * kb - 4 * cnt[0] * cnt[1];
        uint32_t v = crafted[i].at != SIZE_MAX ? (uint32_t)crafted[i].value : 99;
        for (int b = 0; b < 4; b++) f[at + b] = (uint8_t)(v >> 8 * b);
        session_reseal(f, on);
        write_bytes(bad, f, on);
        free(f);
        CHECK(refused(b, ref, bad, V) && strstr(dsv41_error(), crafted[i].msg), "crafted case %zu: %s", i, dsv41_error());
    }
    /* candidate blocks no indexer leaves, with a valid checksum: the last row's last block past
     * the row, or below -1 */
    for (int bad_row = 0; bad_row < 2; bad_row++) {
        uint8_t *f = malloc(on);
        memcpy(f, old, on);
        uint32_t v = bad_row ? (uint32_t)-2 : 9999;
        for (int b = 0; b < 4; b++) f[on - 12 + b] = (uint8_t)(v >> 8 * b);
        session_reseal(f, on);
        write_bytes(bad, f, on);
        free(f);
        CHECK(refused(b, ref, bad, V) && strstr(dsv41_error(), "sizes"), "candidate blocks no indexer leaves (%d) are refused: %s",
              bad_row, dsv41_error());
    }
    char missing[128];
    snprintf(missing, sizeof missing, "%s/none.session", tmpdir);
    CHECK(refused(b, ref, missing, V) && strstr(dsv41_error(), missing), "a missing file: %s", dsv41_error());
    CHECK(refused(b, ref, tmpdir, V) && strstr(dsv41_error(), tmpdir), "a directory: %s", dsv41_error());
    CHECK(refused(b, ref, "", V), "an empty path");
    /* b went through every refusal above: it must still continue as its copy does */
    fill_ids(ids, 32, V, 4);
    CHECK(continue_both(b, ref, ids, 5, 0, V) == 0, "the session refusing all of that is unchanged");
    CHECK(dsv41_session_load(b, good) == 0 && same_view(a, b, V), "the good file still loads: %s", dsv41_error());
    write_bytes(bad, old, on);
    CHECK(dsv41_session_load(b, bad) == 0 && same_view(a, b, V) && !b->shared.topk_rows && !b->shared.cand_rows,
          "its version 2 form loads, without its rows: %s", dsv41_error());
    fill_ids(ids, 32, V, 5);
    CHECK(continue_both(a, b, ids, 5, 0, V) == 0, "and continues bit-identical");
    free(old);
    free(bytes);
    dsv41_trace_free(tr);
    free(lg);
    dsv41_session_free(a);
    dsv41_session_free(b);
    dsv41_session_free(ref);
}

/* A version 2 file saved after a prefill (its rows: one per position) loads into a session
 * holding other state and continues as the saved session does */
static void test_version2_prefill(const dsv41_model *m) {
    int32_t V = dsv41_model_vocab_size(m), ids[32];
    char path[128];
    snprintf(path, sizeof path, "%s/v2.session", tmpdir);
    dsv41_session *a = dsv41_session_new(m), *b = dsv41_session_new(m);
    dsv41_trace *tr = dsv41_trace_new();
    fill_ids(ids, 32, V, 3);
    dsv41_session_forward(b, ids + 20, 7, NULL, NULL);
    size_t n = 0, on = 0;
    uint8_t *bytes = NULL, *old = NULL;
    int ok = dsv41_session_forward(a, ids, 17, NULL, tr) == 0 && dsv41_session_save(a, path) == 0 &&
             (bytes = (uint8_t *)test_read_file(path, &n)) != NULL && (old = session_file_v2(m, bytes, n, tr, &on)) != NULL;
    uint32_t rows = old ? (uint32_t)old[48] | (uint32_t)old[49] << 8 : 0;
    CHECK(ok && rows == 17, "a version 2 file after a prefill of 17 (%u rows)", rows);
    if (ok) write_bytes(path, old, on);
    CHECK(ok && dsv41_session_load(b, path) == 0 && same_view(a, b, V), "it loads: %s", dsv41_error());
    CHECK(ok && continue_both(a, b, ids + 17, 6, 0, V) == 0, "and continues bit-identical");
    free(bytes);
    free(old);
    dsv41_trace_free(tr);
    dsv41_session_free(a);
    dsv41_session_free(b);
}

/* No "*.tmp-*" left in dir */
static int no_temp_files(const char *dir) {
    DIR *d = opendir(dir);
    int clean = d != NULL;
    for (struct dirent *e; d && (e = readdir(d));)
        if (strstr(e->d_name, ".tmp-")) clean = 0;
    if (d) closedir(d);
    return clean;
}

static void test_failed_saves(const dsv41_model *m) {
    int32_t V = dsv41_model_vocab_size(m), ids[8];
    char dir[128], path[160], sub[160], nodir[160];
    snprintf(dir, sizeof dir, "%s/saves", tmpdir);
    snprintf(path, sizeof path, "%s/keep.session", dir);
    snprintf(sub, sizeof sub, "%s/adir", dir);
    snprintf(nodir, sizeof nodir, "%s/no/such/dir/x.session", tmpdir);
    mkdir(dir, 0755);
    mkdir(sub, 0755);
    dsv41_session *a = dsv41_session_new(m), *b = dsv41_session_new(m), *c = dsv41_session_new(m);
    fill_ids(ids, 8, V, 2);
    dsv41_session_forward(a, ids, 5, NULL, NULL);
    dsv41_session_forward(b, ids, 8, NULL, NULL);
    CHECK(dsv41_session_save(a, path) == 0, "the first save: %s", dsv41_error());
    size_t n0 = 0, n1 = 0;
    uint8_t *before = (uint8_t *)test_read_file(path, &n0);
    CHECK(dsv41_session_save(b, sub) == -1 && strstr(dsv41_error(), sub), "a path that is a directory: %s", dsv41_error());
    CHECK(dsv41_session_save(b, nodir) == -1 && strstr(dsv41_error(), nodir), "a missing directory: %s", dsv41_error());
    CHECK(dsv41_session_save(b, "") == -1, "an empty path");
    if (geteuid() != 0) {
        chmod(dir, 0555);
        CHECK(dsv41_session_save(b, path) == -1 && strstr(dsv41_error(), path), "a read-only directory: %s", dsv41_error());
        chmod(dir, 0755);
    } else {
        printf("the read-only directory case is skipped: root writes into one\n");
    }
    uint8_t *after = (uint8_t *)test_read_file(path, &n1);
    CHECK(before && after && n0 == n1 && !memcmp(before, after, n0), "the earlier file is intact");
    CHECK(no_temp_files(dir), "no temporary file is left behind");
    CHECK(dsv41_session_load(c, path) == 0 && same_view(a, c, V), "the earlier file loads");
    CHECK(dsv41_session_save(b, path) == 0 && dsv41_session_load(c, path) == 0 && same_view(b, c, V) && no_temp_files(dir),
          "a save over it replaces it");
    free(before);
    free(after);
    dsv41_session_free(a);
    dsv41_session_free(b);
    dsv41_session_free(c);
}

/* A file from one model is refused by a session of another */
static void test_wrong_model(const dsv41_model *from, const dsv41_model *to, const char *what) {
    char path[128];
    snprintf(path, sizeof path, "%s/model.session", tmpdir);
    dsv41_session *a = dsv41_session_new(from), *b = dsv41_session_new(to);
    int32_t ids[4] = {1, 2, 3, 4};
    dsv41_session_forward(a, ids, 4, NULL, NULL);
    dsv41_session_forward(b, ids, 2, NULL, NULL);
    CHECK(dsv41_session_save(a, path) == 0, "%s: save", what);
    CHECK(dsv41_session_load(b, path) == -1 && strstr(dsv41_error(), "another model") && dsv41_session_pos(b) == 2,
          "%s: refused (%s)", what, dsv41_error());
    dsv41_session_free(a);
    dsv41_session_free(b);
}

/* The golden's model is the built-in one (same config, same filler weights) loaded apart: the
 * identity is the model's content, so a file moves between them and continues alike. */
static void test_same_model(const dsv41_model *a_m, const dsv41_model *b_m) {
    char path[128];
    snprintf(path, sizeof path, "%s/same.session", tmpdir);
    int32_t V = dsv41_model_vocab_size(a_m), ids[16];
    fill_ids(ids, 16, V, 6);
    dsv41_session *a = dsv41_session_new(a_m), *b = dsv41_session_new(b_m);
    dsv41_session_forward(a, ids, 7, NULL, NULL);
    CHECK(dsv41_session_save(a, path) == 0 && dsv41_session_load(b, path) == 0, "built-in to golden model: %s", dsv41_error());
    CHECK(continue_both(a, b, ids + 7, 5, 0, V) == 0, "and it continues alike");
    dsv41_session_free(a);
    dsv41_session_free(b);
}

static void test_user_data(const dsv41_model *m) {
    char path[128];
    snprintf(path, sizeof path, "%s/data.session", tmpdir);
    dsv41_session *a = dsv41_session_new(m), *b = dsv41_session_new(m);
    int32_t ids[3] = {7, 8, 9};
    dsv41_session_forward(a, ids, 3, NULL, NULL);
    const char blob[] = "caller's own bytes";
    void *got = NULL;
    size_t n = 0;
    CHECK(dsv41_session_save_data(a, path, blob, sizeof blob) == 0, "save with data: %s", dsv41_error());
    CHECK(dsv41_session_load_data(b, path, &got, &n) == 0 && n == sizeof blob && got && !memcmp(got, blob, n),
          "the data comes back");
    free(got);
    CHECK(dsv41_session_load(b, path) == 0 && dsv41_session_pos(b) == 3, "a plain load ignores it");
    CHECK(dsv41_session_save(a, path) == 0 && dsv41_session_load_data(b, path, &got, &n) == 0 && got == NULL && n == 0,
          "no data: NULL and 0");
    dsv41_session_free(a);
    dsv41_session_free(b);
}

/* copy, reset, tokens and logits */
static void test_copy_reset(const dsv41_model *m) {
    int32_t V = dsv41_model_vocab_size(m), ids[40], n = 0;
    float *lg = malloc((size_t)V * 4), *lf = malloc((size_t)V * 4);
    dsv41_session *a = dsv41_session_new(m), *b = dsv41_session_new(m), *f = dsv41_session_new(m);
    fill_ids(ids, 40, V, 8);
    dsv41_session_forward(b, ids + 20, 17, NULL, NULL);
    dsv41_session_forward(a, ids, 11, NULL, NULL);
    CHECK(dsv41_session_logits(a) == NULL, "no logits when the call asked for none");
    dsv41_session_forward(a, ids + 11, 1, lg, NULL);
    const float *sl = dsv41_session_logits(a);
    CHECK(sl && !memcmp(sl, lg, (size_t)V * 4), "the logits of the last token");
    const int32_t *t = dsv41_session_tokens(a, &n);
    CHECK(n == 12 && !memcmp(t, ids, 12 * 4), "the ids fed");
    CHECK(dsv41_session_copy(b, a) == 0 && same_view(a, b, V), "copy: %s", dsv41_error());
    CHECK(continue_both(a, b, ids + 12, 8, 0, V) == 0, "a copy continues bit-identical");
    CHECK(continue_both(a, b, ids + 20, 4, 1, V) == 0, "a copy's append is bit-identical");
    CHECK(dsv41_session_reset(a) == 0 && dsv41_session_pos(a) == 0 && dsv41_session_logits(a) == NULL, "reset");
    dsv41_session_tokens(a, &n);
    CHECK(n == 0, "reset leaves no ids");
    CHECK(continue_both(a, f, ids + 3, 9, 1, V) == 0 && continue_both(a, f, ids + 5, 6, 0, V) == 0,
          "a reset session is a new one");
    free(lg);
    free(lf);
    dsv41_session_free(a);
    dsv41_session_free(b);
    dsv41_session_free(f);
}

/* A geometry of its own with compressed layers of both ratios and a small window, written by
 * dsv41_synth in bf16 and fp8 (same config, other weights). */
static dsv41_model *synth_model(const char *dtype) {
    char cfg[128], dir[128];
    snprintf(cfg, sizeof cfg, "%s/geo.json", tmpdir);
    snprintf(dir, sizeof dir, "%s/geo-%s", tmpdir, dtype);
    FILE *f = fopen(cfg, "w");
    fprintf(f, "{\"vocab_size\": 96, \"dim\": 64, \"n_layers\": 4, \"n_heads\": 2, \"head_dim\": 32, \"rope_head_dim\": 8,"
               "\"q_lora_rank\": 32, \"o_lora_rank\": 16, \"o_groups\": 2, \"window_size\": 4, \"moe_inter_dim\": 32,"
               "\"n_routed_experts\": 4, \"n_shared_experts\": 1, \"n_activated_experts\": 2, \"score_func\": \"sqrtsoftplus\","
               "\"route_scale\": 1.5, \"norm_topk_prob\": true, \"swiglu_limit\": 10.0, \"compress_ratios\": [2, 0, 1, 1],"
               "\"kv_source_layers\": [0, 2], \"index_source_layers\": [0, 2, 3], \"candidate_source_layer\": 2,"
               "\"candidate_topk_blocks\": 2, \"candidate_block_size\": 2, \"index_n_heads\": 2, \"index_head_dim\": 32,"
               "\"index_topk\": 4, \"hc_mult\": 4, \"hc_sinkhorn_iters\": 20, \"hc_eps\": 1e-6, \"engram_layer_ids\": [1],"
               "\"engram_max_ngram_size\": 3, \"engram_vocab_size\": 96, \"engram_n_heads\": 2, \"engram_head_dim\": 32,"
               "\"engram_pad_id\": 2, \"engram_compressed_vocab_size\": 96, \"engram_num_embeddings\": [408],"
               "\"rope_theta\": 10000, \"compress_rope_theta\": 40000, \"rope_factor\": 2, \"original_seq_len\": 32,"
               "\"beta_fast\": 32, \"beta_slow\": 1, \"norm_eps\": 1e-20, \"gate_temp\": 1.0, \"max_seq_len\": 96}\n");
    fclose(f);
    if (dsv41_synth(cfg, dtype, dir, NULL)) { CHECK(0, "synth %s: %s", dtype, dsv41_error()); return NULL; }
    dsv41_model *m = dsv41_model_load(dir);
    CHECK(m != NULL, "load the %s geometry: %s", dtype, m ? "" : dsv41_error());
    return m;
}

/* A session of a model with DSpark stages restores its drafter: the loaded session drafts the
 * block the saved one drafts (ids and logits bit for bit) and speculates alike; a crafted tap
 * range is refused. */
static void test_drafter(void) {
    char path[128], bad[128];
    snprintf(path, sizeof path, "%s/draft.session", tmpdir);
    snprintf(bad, sizeof bad, "%s/draft_bad.session", tmpdir);
    dsv41_model *m = model_from_config_file("models/tiny_dspark.json");
    CHECK(m && dsv41_model_draft_size(m) > 0, "the tiny DSpark model");
    if (!m) return;
    int32_t V = dsv41_model_vocab_size(m), B = dsv41_model_draft_size(m), ids[16], da[8], db[8], oa[8], ob[8];
    fill_ids(ids, 16, V, 9);
    dsv41_session *a = dsv41_session_new(m), *b = dsv41_session_new(m);
    dsv41_session_forward(a, ids, 10, NULL, NULL);
    for (int32_t i = 10; i < 14; i++) dsv41_session_forward(a, ids + i, 1, NULL, NULL);
    float *la = malloc((size_t)B * V * sizeof *la), *lb = malloc((size_t)B * V * sizeof *lb);
    CHECK(dsv41_session_save(a, path) == 0 && dsv41_session_load(b, path) == 0, "save and load: %s", dsv41_error());
    int ra = dsv41_session_draft(a, 5, B, da, la, NULL), rb = dsv41_session_draft(b, 5, B, db, lb, NULL);
    CHECK(ra == 0 && rb == 0 && !memcmp(da, db, (size_t)B * sizeof *da) && !memcmp(la, lb, (size_t)B * V * sizeof *la),
          "the loaded session drafts the saved one's block, ids and logits bit for bit");
    int32_t na = dsv41_session_speculate(a, 5, 3, NULL, NULL, NULL, oa, NULL), nb = dsv41_session_speculate(b, 5, 3, NULL, NULL, NULL, ob, NULL);
    CHECK(na > 0 && na == nb && !memcmp(oa, ob, (size_t)na * sizeof *oa) && same_view(a, b, V), "and speculates alike");
    size_t n = 0, section = session_draft_bytes(m);
    uint8_t *bytes = (uint8_t *)test_read_file(path, &n);
    for (int k = 0; bytes && k < 2; k++) { /* lo past hi, hi past the position */
        size_t at = n - 8 - section + 4 * (size_t)k;
        uint32_t v = k ? 99u : 20u;
        for (int i = 0; i < 4; i++) bytes[at + i] = (uint8_t)(v >> 8 * i);
        session_reseal(bytes, n);
        write_bytes(bad, bytes, n);
        CHECK(dsv41_session_load(b, bad) == -1 && strstr(dsv41_error(), "sizes"), "a crafted tap range (%d) is refused: %s", k,
              dsv41_error());
    }
    free(bytes);
    free(la);
    free(lb);
    dsv41_session_free(a);
    dsv41_session_free(b);
    dsv41_model_free(m);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dsv41-sessfile-XXXXXX");
    if (!mkdtemp(tmpdir)) { CHECK(0, "temporary directory"); return test_summary(); }
    dsv41_model *m = dsv41_model_builtin();
    CHECK(m != NULL, "the built-in model");
    if (!m) return test_summary();
    test_round_trip(m, "built-in");
    test_copy_reset(m);
    test_user_data(m);
    test_damage(m);
    test_version2_prefill(m);
    test_failed_saves(m);
    test_drafter();
    dsv41_model *bf = synth_model("bf16"), *f8 = synth_model("fp8");
    if (bf) test_round_trip(bf, "bf16 geometry");
    if (bf) test_wrong_model(m, bf, "built-in into another geometry");
    if (bf && f8) test_wrong_model(bf, f8, "bf16 into fp8 of the same config");
    dsv41_golden *g = dsv41_golden_load(golden_path());
    dsv41_model *gm = g ? dsv41_model_from_golden(g) : NULL;
    CHECK(gm != NULL, "the golden's model: %s", gm ? "" : dsv41_error());
    if (gm) test_same_model(m, gm);
    dsv41_model_free(gm);
    dsv41_golden_free(g);
    dsv41_model_free(bf);
    dsv41_model_free(f8);
    dsv41_model_free(m);
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    CHECK(system(cmd) == 0, "clean up");
    return test_summary();
}
