/* main.c - the dsv41 command-line program. It uses only the public header. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dsv41.h"
#include "commands.h"

static int usage(void) {
    fprintf(stderr,
            "usage: dsv41 <command> [options]\n"
            "  check GOLDEN.json [-m DIR] [-t N]\n"
            "                              run a golden file's regimes and compare every capture\n"
            "                              (weights from the checkpoint DIR instead of the golden's filler)\n"
            "  run [-m DIR] --ids A,B,C [-n N] [-t N]\n"
            "                              prefill the ids, decode N tokens greedily (built-in tiny model by default)\n"
            "  run -m DIR -p TEXT [-n N] [--temp T] [--top-k K] [--top-p P] [--min-p M] [--seed S]\n"
            "      [--think low|high|max|N] [--system TEXT] [--stop STR] [-t THREADS]\n"
            "                              answer one user message, streaming the reply\n"
            "  chat -m DIR [the same options]   an interactive conversation (/reset, /quit; Ctrl-C stops a reply)\n"
            "  serve -m DIR [--host 127.0.0.1] [--port 8080] [-np N] [-c CTX] [-t N] [--api-key KEY] [--timeout S] [--queue N]\n"
            "                              an OpenAI-compatible HTTP server (chat, completions, streaming, tool calls)\n"
            "  convert --golden GOLDEN.json --dtype bf16|fp8 -o DIR\n"
            "                              write the golden's model as a checkpoint in the release layout\n"
            "  synth --config FILE -o DIR [--dtype bf16|fp8]\n"
            "                              write a checkpoint of any geometry with filler weights\n"
            "  synth --skeleton --config RELEASE_CONFIG.json -o DIR\n"
            "                              the release checkpoint's full layout with every data region a hole (no disk)\n"
            "  inspect DIR                 config, layer roles, tensor bytes per dtype, bytes read per decoded token\n"
            "  tokenize --tokenizer FILE [--added ADDED.json] [--special] TEXT\n"
            "                              print the token ids of TEXT as a JSON array\n"
            "  render --chat CASE.json     print the DeepSeek-V4.1 prompt of a chat case (no newline added)\n"
            "  bench -m DIR [-t N] [--json]\n"
            "                              prefill and decode speed against the measured triad bandwidth and FMA peak\n"
            "-t N sets the worker threads (default: one per core); results do not depend on it.\n");
    return 2;
}

static int fail(const char *what) {
    fprintf(stderr, "dsv41: %s\n", what);
    return 1;
}

/* "-t N": N threads in [1, 256]; returns N, or 0 after printing what is wrong */
static int32_t parse_threads(const char *v) {
    char *end;
    errno = 0;
    long n = strtol(v, &end, 10);
    if (end == v || *end || errno || n < 1 || n > 256) {
        fprintf(stderr, "dsv41: -t wants a thread count from 1 to 256, not '%s'\n", v);
        return 0;
    }
    return (int32_t)n;
}

static int cmd_check(int argc, char **argv) {
    const char *golden = NULL, *dir = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) {
            int32_t t = parse_threads(argv[++i]);
            if (!t || dsv41_set_threads(t)) return 2;
        } else if (!golden && argv[i][0] != '-') golden = argv[i];
        else { fprintf(stderr, "usage: dsv41 check GOLDEN.json [-m DIR] [-t N]\n"); return 2; }
    }
    if (!golden) { fprintf(stderr, "usage: dsv41 check GOLDEN.json [-m DIR] [-t N]\n"); return 2; }
    dsv41_golden *g = dsv41_golden_load(golden);
    if (!g) return fail(dsv41_error());
    dsv41_model *m = dir ? dsv41_model_load(dir) : dsv41_model_from_golden(g);
    if (!m) { dsv41_golden_free(g); return fail(dsv41_error()); }
    int32_t passed, failed;
    int rc = dsv41_golden_check(g, m, stdout, &passed, &failed);
    dsv41_model_free(m);
    dsv41_golden_free(g);
    if (rc) return fail(dsv41_error());
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

static int cmd_convert(int argc, char **argv) {
    const char *golden = NULL, *dtype = NULL, *out = NULL;
    for (int i = 0; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--golden")) golden = argv[i + 1];
        else if (!strcmp(argv[i], "--dtype")) dtype = argv[i + 1];
        else if (!strcmp(argv[i], "-o")) out = argv[i + 1];
        else break;
    }
    if (!golden || !dtype || !out || argc != 6) {
        fprintf(stderr, "usage: dsv41 convert --golden GOLDEN.json --dtype bf16|fp8 -o DIR\n");
        return 2;
    }
    dsv41_golden *g = dsv41_golden_load(golden);
    if (!g) return fail(dsv41_error());
    cli_catch_signals(1);
    int rc = dsv41_convert_golden(g, dtype, out, &cli_signal);
    dsv41_golden_free(g);
    return cli_signal ? 128 + cli_signal : rc ? fail(dsv41_error()) : 0;
}

/* The release checkpoint has 48 shards; a skeleton is sharded the same way. */
enum { RELEASE_SHARDS = 48 };

static int cmd_synth(int argc, char **argv) {
    const char *cfg = NULL, *dtype = NULL, *out = NULL;
    int skeleton = 0, i = 0;
    for (; i < argc; i++) {
        if (!strcmp(argv[i], "--skeleton")) skeleton = 1;
        else if (i + 1 == argc) break;
        else if (!strcmp(argv[i], "--config")) cfg = argv[++i];
        else if (!strcmp(argv[i], "--dtype")) dtype = argv[++i];
        else if (!strcmp(argv[i], "-o")) out = argv[++i];
        else break;
    }
    if (!cfg || !out || i != argc || (skeleton && dtype)) {
        fprintf(stderr, "usage: dsv41 synth --config FILE -o DIR [--dtype bf16|fp8]\n"
                        "       dsv41 synth --skeleton --config RELEASE_CONFIG.json -o DIR\n");
        return 2;
    }
    cli_catch_signals(1);
    int rc = skeleton ? dsv41_synth_skeleton(cfg, RELEASE_SHARDS, out)
                      : dsv41_synth(cfg, dtype ? dtype : "bf16", out, &cli_signal);
    return cli_signal ? 128 + cli_signal : rc ? fail(dsv41_error()) : 0;
}

static int cmd_bench(int argc, char **argv) {
    const char *dir = NULL;
    int32_t threads = 0;
    int json = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) {
            if (!(threads = parse_threads(argv[++i]))) return 2;
        } else if (!strcmp(argv[i], "--json")) json = 1;
        else { fprintf(stderr, "usage: dsv41 bench -m DIR [-t N] [--json]\n"); return 2; }
    }
    if (!dir) { fprintf(stderr, "usage: dsv41 bench -m DIR [-t N] [--json]\n"); return 2; }
    dsv41_model *m = dsv41_model_load(dir);
    if (!m) return fail(dsv41_error());
    int rc = dsv41_bench(m, threads, json, stdout);
    dsv41_model_free(m);
    return rc ? fail(dsv41_error()) : 0;
}

static int cmd_inspect(int argc, char **argv) {
    if (argc != 1) { fprintf(stderr, "usage: dsv41 inspect DIR\n"); return 2; }
    dsv41_model *m = dsv41_model_load(argv[0]);
    if (!m) return fail(dsv41_error());
    dsv41_model_describe(m, stdout);
    dsv41_model_free(m);
    return 0;
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "2,17,47" -> ids; returns the count or -1 */
static int parse_ids(const char *s, int32_t *ids, int cap) {
    int n = 0;
    while (*s) {
        char *end;
        errno = 0;
        long v = strtol(s, &end, 10);
        if (end == s || errno || v < 0 || v > 0x7FFFFFFF || n == cap || (*end && *end != ',')) return -1;
        ids[n++] = (int32_t)v;
        s = *end ? end + 1 : end;
    }
    return n;
}

static int32_t argmax(const float *v, int32_t n) {
    int32_t best = 0;
    for (int32_t i = 1; i < n; i++)
        if (v[i] > v[best]) best = i;
    return best;
}

static int cmd_run(int argc, char **argv) {
    for (int i = 0; i < argc; i++)
        if (!strcmp(argv[i], "-p")) return cmd_run_text(argc, argv);
    int32_t ids[4096];
    int n_ids = 0;
    long n_new = 16;
    const char *dir = NULL;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) {
            dir = argv[++i];
        } else if (!strcmp(argv[i], "--ids") && i + 1 < argc) {
            n_ids = parse_ids(argv[++i], ids, 4096);
            if (n_ids <= 0) return fail("run: --ids wants comma-separated non-negative integers");
        } else if (!strcmp(argv[i], "-n") && i + 1 < argc) {
            char *end, *v = argv[++i];
            errno = 0;
            n_new = strtol(v, &end, 10);
            if (end == v || *end || errno || n_new < 0 || n_new > INT32_MAX) /* the context check adds it to ints */
                return fail("run: -n wants an integer from 0 to 2147483647");
        } else if (!strcmp(argv[i], "-t") && i + 1 < argc) {
            int32_t t = parse_threads(argv[++i]);
            if (!t || dsv41_set_threads(t)) return 2;
        } else {
            fprintf(stderr, "dsv41: run: unknown argument '%s'\n", argv[i]);
            return 2;
        }
    }
    if (n_ids == 0) return fail("run: give the prompt as --ids A,B,C");
    dsv41_model *m = dir ? dsv41_model_load(dir) : dsv41_model_builtin();
    if (!m) return fail(dsv41_error());
    int32_t V = dsv41_model_vocab_size(m), ctx = dsv41_model_max_seq_len(m);
    if ((long)n_ids + n_new > ctx) {
        fprintf(stderr, "dsv41: run: %d prompt tokens + %ld new tokens exceed the context of %d\n", n_ids, n_new, ctx);
        dsv41_model_free(m);
        return 1;
    }
    dsv41_session *s = dsv41_session_new(m);
    float *logits = malloc((size_t)V * sizeof *logits);
    if (!s || !logits) { free(logits); dsv41_session_free(s); dsv41_model_free(m); return fail("out of memory"); }
    int rc = 0;
    double t0 = now_s();
    if (dsv41_session_forward(s, ids, n_ids, logits, NULL)) rc = fail(dsv41_error());
    double t1 = now_s();
    for (long i = 0; rc == 0 && i < n_new; i++) {
        int32_t next = argmax(logits, V);
        printf("%s%d", i ? "," : "", next);
        if (i + 1 < n_new && dsv41_session_forward(s, &next, 1, logits, NULL)) rc = fail(dsv41_error());
    }
    double t2 = now_s();
    if (rc == 0) {
        printf("%s", n_new ? "\n" : "");
        double gen = n_new > 1 ? (double)(n_new - 1) / (t2 - t1) : 0.0;
        printf("prompt: %d tokens, %.1f tok/s | generated: %ld tokens, %.1f tok/s\n", n_ids, n_ids / (t1 - t0), n_new, gen);
    }
    free(logits);
    dsv41_session_free(s);
    dsv41_model_free(m);
    return rc;
}

int main(int argc, char **argv) {
    if (argc < 2) return usage();
    if (!strcmp(argv[1], "check")) return cmd_check(argc - 2, argv + 2);
    if (!strcmp(argv[1], "run")) return cmd_run(argc - 2, argv + 2);
    if (!strcmp(argv[1], "tokenize")) return cmd_tokenize(argc - 2, argv + 2);
    if (!strcmp(argv[1], "render")) return cmd_render(argc - 2, argv + 2);
    if (!strcmp(argv[1], "convert")) return cmd_convert(argc - 2, argv + 2);
    if (!strcmp(argv[1], "inspect")) return cmd_inspect(argc - 2, argv + 2);
    if (!strcmp(argv[1], "synth")) return cmd_synth(argc - 2, argv + 2);
    if (!strcmp(argv[1], "bench")) return cmd_bench(argc - 2, argv + 2);
    if (!strcmp(argv[1], "chat")) return cmd_chat(argc - 2, argv + 2);
    if (!strcmp(argv[1], "serve")) return cmd_serve(argc - 2, argv + 2);
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) { usage(); return 0; }
    fprintf(stderr, "dsv41: unknown command '%s' (dsv41 --help lists them)\n", argv[1]);
    return 2;
}
