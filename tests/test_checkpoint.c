/* test_checkpoint.c - checkpoints in the release layout: the loader path equals the filler
 * path, the fp8 / fp4 kernels equal a naive reference bit for bit, an fp8 checkpoint stays close
 * to the bf16 model, the Engram tables computed from a config equal the shipped ones, and
 * loading maps the big tensors instead of reading them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "golden.h"
#include "nprandom.h"
#include "numerics.h"
#include "testing.h"

static char tmpdir[256];

static uint64_t rng_state = 0x1234567;
static float frand(void) { /* uniform in [-1, 1) */
    rng_state = rng_state * 6364136223846793005ULL + 1442695040888963407ULL;
    return (float)((rng_state >> 40) / 8388608.0 - 1.0);
}

/* The reference for a quantized GEMM row, written from the release's description: quantize
 * the activation per 32-block to e4m3 with a power-of-two scale, decode the weight, sum exact
 * products per block in f32, scale, add blocks in order, round to bf16. */
static float naive_row(const float *x, int64_t cols, const float *wq, const float *ws) {
    float acc = 0.0f;
    for (int64_t b = 0; b < cols; b += 32) {
        float amax = 0.0f, part = 0.0f;
        int64_t e = b + 32 < cols ? b + 32 : cols;
        for (int64_t i = b; i < e; i++) amax = fmaxf(amax, fabsf(x[i]));
        float s = pow2_ceil(fmaxf(amax, 1e-4f) * (1.0f / 448.0f));
        for (int64_t i = b; i < e; i++) {
            float q = x[i] / s;
            q = q > 448.0f ? 448.0f : q < -448.0f ? -448.0f : q;
            part += e4m3_to_f32(f32_to_e4m3(q)) * wq[i];
        }
        acc += part * s * ws[b / 32];
    }
    return bf16_round(acc);
}

static void test_quant_kernels(void) {
    static const int64_t shapes[][2] = {{1, 32}, {33, 64}, {7, 45}, {64, 100}, {40, 31}, {3, 257}};
    for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
        int64_t R = shapes[si][0], C = shapes[si][1], tr = (R + 31) / 32, tc = (C + 31) / 32, T = 3;
        uint8_t *codes = malloc((size_t)(R * C)), *tile = malloc((size_t)(tr * tc)), *rows = malloc((size_t)(R * tc));
        uint8_t *packed = calloc((size_t)(R * ((C + 1) / 2)), 1);
        float *x = malloc((size_t)(T * C) * 4), *y8 = malloc((size_t)(T * R) * 4), *y4 = malloc((size_t)(T * R) * 4);
        float *wq = malloc((size_t)C * 4), *ws = malloc((size_t)tc * 4);
        for (int64_t i = 0; i < R * C; i++) codes[i] = f32_to_e4m3(frand() * 300.0f);
        for (int64_t i = 0; i < tr * tc; i++) tile[i] = (uint8_t)(120 + i % 9);
        for (int64_t i = 0; i < R * tc; i++) rows[i] = (uint8_t)(118 + i % 11);
        for (int64_t r = 0; r < R; r++)
            for (int64_t c = 0; c < C; c++) packed[r * ((C + 1) / 2) + c / 2] |= (uint8_t)(f32_to_e2m1(frand() * 6.0f) << ((c & 1) * 4));
        for (int64_t i = 0; i < T * C; i++) x[i] = bf16_round(frand() * (i % 7 == 0 ? 40.0f : 1.0f));
        weight w8 = {DT_E4M3, AS_STORED, R, C, codes, tile, 32}, w4 = {DT_FP4, AS_STORED, R, C, packed, rows, 1};
        linear(&w8, x, T, y8);
        linear(&w4, x, T, y4);
        int same8 = 1, same4 = 1;
        for (int64_t t = 0; t < T; t++)
            for (int64_t r = 0; r < R; r++) {
                for (int64_t c = 0; c < C; c++) wq[c] = e4m3_to_f32(codes[r * C + c]);
                for (int64_t b = 0; b < tc; b++) ws[b] = e8m0_to_f32(tile[(r / 32) * tc + b]);
                same8 &= f32_bits(naive_row(x + t * C, C, wq, ws)) == f32_bits(y8[t * R + r]);
                for (int64_t c = 0; c < C; c++) wq[c] = e2m1_to_f32((packed[r * ((C + 1) / 2) + c / 2] >> ((c & 1) * 4)) & 15);
                for (int64_t b = 0; b < tc; b++) ws[b] = e8m0_to_f32(rows[r * tc + b]);
                same4 &= f32_bits(naive_row(x + t * C, C, wq, ws)) == f32_bits(y4[t * R + r]);
            }
        CHECK(same8, "fp8 x fp8 GEMM equals the naive reference bit for bit at [%lld x %lld]", (long long)R, (long long)C);
        CHECK(same4, "fp4 x fp8 GEMM equals the naive reference bit for bit at [%lld x %lld]", (long long)R, (long long)C);
        free(codes); free(tile); free(rows); free(packed); free(x); free(y8); free(y4); free(wq); free(ws);
    }
}

static void test_engram_tables(const dsv41_model *golden_model, const dsv41_model *ckpt) {
    const config *a = &golden_model->cfg, *b = &ckpt->cfg;
    int same = a->n_engram == b->n_engram && a->engram_pad == b->engram_pad;
    for (int li = 0; same && li < a->n_engram; li++) {
        for (int i = 0; i < a->engram_max_ngram; i++) same &= a->engram_mult[li][i] == b->engram_mult[li][i];
        for (int col = 0; col < engram_cols(a); col++)
            same &= a->engram_prime[li][col] == b->engram_prime[li][col] && a->engram_offset[li][col] == b->engram_offset[li][col];
    }
    CHECK(same, "primes, offsets and multipliers computed from config.json equal the fixture's");
    /* the full-size model's multipliers (V41_REFERENCE.md 9.2), from numpy's stream */
    static const int64_t want[2][4] = {{76632096046245, 4839876093313, 35959672319349, 73987337458391},
                                       {67716810739261, 51510806800915, 30921347202721, 82619226485591}};
    int64_t got[4];
    int ok = 1;
    for (int li = 0; li < 2; li++) {
        np_rng_integers(10007u * (li ? 14u : 1u), (INT64_MAX / 99092) / 2, 4, got);
        for (int i = 0; i < 4; i++) ok &= got[i] * 2 + 1 == want[li][i];
    }
    CHECK(ok, "numpy PCG64 multipliers of the full-size model");
}

/* Greedy-free comparison: the same ids through both models, logits of every step. */
static double logits_gap(const dsv41_model *a, const dsv41_model *b, double *scale) {
    static const int32_t ids[14] = {2, 17, 47, 13, 32, 59, 39, 29, 42, 31, 36, 6, 27, 8};
    int32_t V = dsv41_model_vocab_size(a);
    float *la = malloc((size_t)V * 4), *lb = malloc((size_t)V * 4);
    dsv41_session *sa = dsv41_session_new(a), *sb = dsv41_session_new(b);
    double gap = 0.0;
    *scale = 0.0;
    for (int step = 0; step < 3; step++) {
        const int32_t *p = step == 0 ? ids : ids + 11 + step;
        int n = step == 0 ? 12 : 1;
        dsv41_session_forward(sa, p, n, la, NULL);
        dsv41_session_forward(sb, p, n, lb, NULL);
        for (int32_t v = 0; v < V; v++) {
            gap = fmax(gap, fabs((double)la[v] - lb[v]));
            *scale = fmax(*scale, fabs((double)la[v]));
        }
    }
    dsv41_session_free(sa);
    dsv41_session_free(sb);
    free(la);
    free(lb);
    return gap;
}

static long status_kb(const char *key) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    long v = -1;
    size_t n = strlen(key);
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, key, n)) v = atol(line + n + 1);
    if (f) fclose(f);
    return v;
}

/* A model whose routed experts dominate (about 100 MB of bf16), written by a child process so
 * that this process's memory holds nothing of it before the load. */
static void test_resident_memory(void) {
    char cfgpath[300], dir[300];
    snprintf(cfgpath, sizeof cfgpath, "%s/big.json", tmpdir);
    snprintf(dir, sizeof dir, "%s/big", tmpdir);
    FILE *f = fopen(cfgpath, "w");
    fprintf(f, "{\"vocab_size\": 256, \"dim\": 256, \"n_layers\": 2, \"n_heads\": 2, \"head_dim\": 64, \"rope_head_dim\": 16,"
               "\"q_lora_rank\": 64, \"o_lora_rank\": 32, \"o_groups\": 2, \"window_size\": 16, \"moe_inter_dim\": 512,"
               "\"n_routed_experts\": 96, \"n_shared_experts\": 1, \"n_activated_experts\": 2, \"score_func\": \"sqrtsoftplus\","
               "\"route_scale\": 1.5, \"norm_topk_prob\": true, \"swiglu_limit\": 10.0, \"compress_ratios\": [0, 1],"
               "\"kv_source_layers\": [1], \"index_source_layers\": [1], \"candidate_source_layer\": 1,"
               "\"candidate_topk_blocks\": 4, \"candidate_block_size\": 4, \"index_n_heads\": 2, \"index_head_dim\": 32,"
               "\"index_topk\": 8, \"hc_mult\": 4, \"hc_sinkhorn_iters\": 20, \"hc_eps\": 1e-6, \"engram_layer_ids\": [1],"
               "\"engram_max_ngram_size\": 3, \"engram_vocab_size\": 20000, \"engram_n_heads\": 2, \"engram_head_dim\": 64,"
               "\"engram_pad_id\": 2, \"engram_compressed_vocab_size\": 256, \"engram_num_embeddings\": [80084],"
               "\"rope_theta\": 10000, \"compress_rope_theta\": 40000, \"rope_factor\": 2, \"original_seq_len\": 32,"
               "\"beta_fast\": 32, \"beta_slow\": 1, \"norm_eps\": 1e-20, \"gate_temp\": 1.0, \"max_seq_len\": 64}\n");
    fclose(f);
    pid_t pid = fork();
    if (pid == 0) _exit(dsv41_synth(cfgpath, "bf16", dir, NULL) ? (fprintf(stderr, "%s\n", dsv41_error()), 1) : 0);
    int st = 0;
    waitpid(pid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0, "synth of a 100 MB model");
    long anon0 = status_kb("RssAnon:"), file0 = status_kb("RssFile:");
    dsv41_model *m = dsv41_model_load(dir);
    CHECK(m != NULL, "the synthesized checkpoint loads: %s", m ? "" : dsv41_error());
    if (!m) return;
    long anon1 = status_kb("RssAnon:"), file1 = status_kb("RssFile:");
    printf("resident after load: +%ld kB anonymous, +%ld kB file-backed (model files about 100000 kB)\n", anon1 - anon0,
           file1 - file0);
#ifdef TEST_ASAN
    printf("resident memory after load not checked under AddressSanitizer\n");
#else
    CHECK(anon1 - anon0 < 4096 && file1 - file0 < 4096, "loading maps the tensors instead of reading them");
#endif
    dsv41_session *s = dsv41_session_new(m);
    int32_t ids[3] = {5, 6, 7};
    float *lg = malloc(256 * 4);
    dsv41_session_forward(s, ids, 3, lg, NULL);
    long file2 = status_kb("RssFile:");
    printf("resident after a 3-token prefill: +%ld kB file-backed\n", file2 - file0);
    CHECK(file2 - file0 < 60000, "a forward touches only the routed experts it uses");
    free(lg);
    dsv41_session_free(s);
    dsv41_model_free(m);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/dsv41-ckpt-XXXXXX");
    CHECK(mkdtemp(tmpdir) != NULL, "temporary directory");
    dsv41_golden *g = dsv41_golden_load(golden_path());
    CHECK(g != NULL, "golden loads: %s", g ? "" : dsv41_error());
    if (!g) return test_summary();
    char bf[300], f8[300];
    snprintf(bf, sizeof bf, "%s/bf16", tmpdir);
    snprintf(f8, sizeof f8, "%s/fp8", tmpdir);
    CHECK(dsv41_convert_golden(g, "bf16", bf, NULL) == 0, "convert --dtype bf16: %s", dsv41_error());
    CHECK(dsv41_convert_golden(g, "fp8", f8, NULL) == 0, "convert --dtype fp8: %s", dsv41_error());
    CHECK(dsv41_convert_golden(g, "bf16", bf, NULL) != 0, "convert refuses to overwrite");
    dsv41_model *gm = dsv41_model_from_golden(g), *mb = dsv41_model_load(bf), *m8 = dsv41_model_load(f8);
    CHECK(gm && mb && m8, "the models load: %s", dsv41_error());
    if (gm && mb && m8) {
        int32_t passed = 0, failed = -1;
        FILE *sink = fopen("/dev/null", "w");
        dsv41_golden_check(g, mb, sink, &passed, &failed);
        fclose(sink);
        CHECK(passed == 443 && failed == 0, "the bf16 checkpoint passes the golden (%d passed, %d failed)", passed, failed);
        test_engram_tables(gm, mb);
        double scale, gap = logits_gap(mb, m8, &scale);
        printf("fp8 checkpoint vs bf16: max |logit difference| %.4f over 3 calls, max |logit| %.4f\n", gap, scale);
        /* measured on the tiny golden model: 0.31 with max |logit| 1.96; the bound leaves room */
        CHECK(gap > 0.0 && gap < 0.35 * scale, "fp8 logits stay close to bf16 (gap %.3f, scale %.3f)", gap, scale);
    }
    dsv41_model_free(gm);
    dsv41_model_free(mb);
    dsv41_model_free(m8);
    dsv41_golden_free(g);
    test_quant_kernels();
    test_resident_memory();
    char cmd[400];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    CHECK(system(cmd) == 0, "cleanup");
    return test_summary();
}
