/* testing.h - the few helpers every test program uses. Each CHECK counts one case; the program
 * ends with test_summary(), which prints the recognized "N passed, N failed" line. */
#ifndef DSV41_TESTING_H
#define DSV41_TESTING_H

#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "dsv41_dev.h"

/* The sanitizer builds (make sanitize, make tsan): ASan's allocator keeps resident bookkeeping of
 * its own, and every sanitizer runs code several times slower, so the checks of memory and time
 * that guard against a wrong algorithm allow for them. */
#if defined(__SANITIZE_ADDRESS__)
#define TEST_ASAN 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define TEST_ASAN 1
#endif
#endif
#if defined(__SANITIZE_THREAD__)
#define TEST_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TEST_TSAN 1
#endif
#endif
/* The arm64 build of the tests (the Makefile's build/aarch64/test_*) runs under qemu-user
 * (tests/neon.sh), as slow as a sanitizer. */
#if defined(TEST_ASAN) || defined(TEST_TSAN) || defined(TEST_QEMU)
#define TEST_SLOWDOWN 20.0
#else
#define TEST_SLOWDOWN 1.0
#endif

static int test_passed, test_failed;

#define CHECK(cond, ...)                                                   \
    do {                                                                   \
        if (cond) {                                                        \
            test_passed++;                                                 \
        } else {                                                           \
            test_failed++;                                                 \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);           \
            fprintf(stderr, __VA_ARGS__);                                  \
            fputc('\n', stderr);                                           \
        }                                                                  \
    } while (0)

static inline int test_summary(void) {
    printf("%d passed, %d failed\n", test_passed, test_failed);
    return test_failed != 0;
}

/* A whole file, NUL-terminated (its length in *len), malloc'd; NULL when it cannot be read. */
static inline char *test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) { free(buf); buf = NULL; }
    fclose(f);
    if (buf) { buf[n] = 0; *len = (size_t)n; }
    return buf;
}

/* The shared data folder: $DSV41_SHARED, or ../shared beside the checkout. */
static inline const char *shared_dir(void) {
    const char *s = getenv("DSV41_SHARED");
    return s && *s ? s : "../shared";
}

/* The golden: $DSV41_GOLDEN, or the shared golden. A missing golden fails the suite. */
static inline const char *golden_path(void) {
    static char buf[1024];
    const char *g = getenv("DSV41_GOLDEN");
    if (g && *g) return g;
    snprintf(buf, sizeof buf, "%s/golden/ds41_tiny_golden.json", shared_dir());
    return buf;
}

/* A geometry wide enough that every projection splits over threads, with a window of 8, ratio-2
 * and ratio-1 compressed layers and an Engram layer: the config tests synthesize their fp8
 * checkpoint from (test_synth_wide). */
#define TEST_WIDE_CONFIG                                                                                             \
    "{\"vocab_size\": 512, \"dim\": 512, \"n_layers\": 4, \"n_heads\": 4, \"head_dim\": 64, \"rope_head_dim\": 16," \
    "\"q_lora_rank\": 128, \"o_lora_rank\": 64, \"o_groups\": 2, \"window_size\": 8, \"moe_inter_dim\": 256," \
    "\"n_routed_experts\": 8, \"n_shared_experts\": 1, \"n_activated_experts\": 2, \"score_func\": \"sqrtsoftplus\"," \
    "\"route_scale\": 1.5, \"norm_topk_prob\": true, \"swiglu_limit\": 10.0, \"compress_ratios\": [0, 2, 1, 1]," \
    "\"kv_source_layers\": [1, 2], \"index_source_layers\": [1, 2, 3], \"candidate_source_layer\": 2," \
    "\"candidate_topk_blocks\": 2, \"candidate_block_size\": 2, \"index_n_heads\": 2, \"index_head_dim\": 64," \
    "\"index_topk\": 4, \"hc_mult\": 4, \"hc_sinkhorn_iters\": 20, \"hc_eps\": 1e-6, \"engram_layer_ids\": [1]," \
    "\"engram_max_ngram_size\": 3, \"engram_vocab_size\": 1000, \"engram_n_heads\": 2, \"engram_head_dim\": 64," \
    "\"engram_pad_id\": 2, \"engram_compressed_vocab_size\": 512, \"engram_num_embeddings\": [4062]," \
    "\"rope_theta\": 10000, \"compress_rope_theta\": 40000, \"rope_factor\": 2, \"original_seq_len\": 16," \
    "\"beta_fast\": 32, \"beta_slow\": 1, \"norm_eps\": 1e-20, \"gate_temp\": 1.0, \"max_seq_len\": 128}\n"

/* An fp8 checkpoint of TEST_WIDE_CONFIG at dir/m (dir a mkdtemp template, made here; model [300]
 * gets the path), written by a child process so that this one starts with its default pool (a
 * child of a process with pool workers would have none): call it first. Returns 0 when written. */
static inline int test_synth_wide(char *dir, char *model) {
    char cfg[300];
    if (!mkdtemp(dir)) return -1;
    snprintf(cfg, sizeof cfg, "%s/cfg.json", dir);
    snprintf(model, 300, "%s/m", dir);
    FILE *f = fopen(cfg, "w");
    if (!f) return -1;
    fputs(TEST_WIDE_CONFIG, f);
    fclose(f);
    pid_t pid = fork();
    if (pid == 0) _exit(dsv41_synth(cfg, "fp8", model, NULL) ? (fprintf(stderr, "%s\n", dsv41_error()), 1) : 0);
    int st = 0;
    waitpid(pid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -1;
}

#endif
