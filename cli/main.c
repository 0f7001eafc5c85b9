/* main.c - the dsv41 command-line program: the subcommand table and the commands that are
 * one library call each. It uses only the public header. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"

static int fail(void) {
    fprintf(stderr, "dsv41: %s\n", dsv41_error());
    return 1;
}

/* A checkpoint, with the load's progress on a terminal. */
static dsv41_model *load_model(const char *dir) {
    progress_on();
    return dsv41_model_load(dir);
}

int use_kernels(const char *name) {
    if (!dsv41_set_kernels(name)) return 0;
    fprintf(stderr, "dsv41: %s\n", dsv41_error());
    return 2;
}

static int cmd_kernels(int argc, char **argv) {
    (void)argv;
    if (argc != 0) { fprintf(stderr, "usage: dsv41 kernels\n"); return 2; }
    const char *names[16];
    int32_t n = dsv41_kernel_sets(names, 16);
    const char *def = dsv41_kernels();
    for (int32_t i = 0; i < n && i < 16; i++) printf("%s%s%s", i ? " " : "", names[i], strcmp(names[i], def) ? "" : "*");
    printf("\n");
    for (int32_t i = 0; i < n && i < 16; i++)
        if (dsv41_kernels_emulated(names[i]))
            fprintf(stderr, "dsv41: %s runs on an emulation of its instructions here (exact, and slow)\n", names[i]);
    return 0;
}

static int cmd_check(int argc, char **argv) {
    const char *golden = NULL, *dir = NULL, *kernels = NULL;
    int32_t threads = 0;
    const cli_opt opts[] = {
        {"-m|--model", "DIR", OPT_STR, &dir, 0, 0, NULL, "the golden's filler weights", "take the weights from this checkpoint"},
        OPT_THREADS(&threads),
        OPT_KERNELS(&kernels),
    };
    const cli_cmd cmd = {.name = "check",
                         .synopsis = "GOLDEN.json [options]",
                         .about = "Run every regime of a golden file on one model and compare every capture with its bars;\n"
                                  "prints one line per failing capture, then \"N passed, N failed\". Exit 0 only if none failed.\n"
                                  "A checkpoint stored in fp8 is expected to fail the bf16 bars.",
                         .opts = opts,
                         .n_opts = N_OPTS(opts),
                         .pos = &golden,
                         .min_pos = 1,
                         .max_pos = 1};
    int rc = args_parse(&cmd, argc, argv);
    if (rc >= 0) return rc;
    if (args_apply_threads(threads) || use_kernels(kernels)) return 2;
    dsv41_golden *g = dsv41_golden_load(golden);
    if (!g) return fail();
    dsv41_model *m = dir ? load_model(dir) : dsv41_model_from_golden(g);
    if (!m) { dsv41_golden_free(g); return fail(); }
    int32_t passed, failed;
    rc = dsv41_golden_check(g, m, stdout, &passed, &failed);
    dsv41_model_free(m);
    dsv41_golden_free(g);
    if (rc) return fail();
    printf("%d passed, %d failed\n", passed, failed);
    return failed ? 1 : 0;
}

static int cmd_convert(int argc, char **argv) {
    const char *golden = NULL, *dtype = NULL, *out = NULL;
    const cli_opt opts[] = {
        {"--golden", "GOLDEN.json", OPT_STR, &golden, 0, 0, NULL, OPT_REQUIRED, "the golden whose fixture model is written"},
        {"--dtype", "bf16|fp8", OPT_STR, &dtype, 0, 0, NULL, OPT_REQUIRED, "storage: bf16, or the release's fp8/fp4"},
        {"-o|--output", "DIR", OPT_STR, &out, 0, 0, NULL, OPT_REQUIRED, "the new checkpoint directory; must not exist"},
    };
    const cli_cmd cmd = {.name = "convert",
                         .synopsis = "--golden GOLDEN.json --dtype bf16|fp8 -o DIR",
                         .about = "Write the golden's model as a checkpoint in the release layout (written under a temporary\n"
                                  "name and renamed, never over an existing directory).",
                         .opts = opts,
                         .n_opts = N_OPTS(opts)};
    int rc = args_parse(&cmd, argc, argv);
    if (rc >= 0) return rc;
    dsv41_golden *g = dsv41_golden_load(golden);
    if (!g) return fail();
    progress_on();
    cli_catch_signals(1);
    rc = dsv41_convert_golden(g, dtype, out, &cli_signal);
    dsv41_golden_free(g);
    return cli_signal ? 128 + cli_signal : rc ? fail() : 0;
}

/* The release checkpoint has 48 shards; a skeleton is sharded the same way. */
enum { RELEASE_SHARDS = 48 };

static int cmd_synth(int argc, char **argv) {
    const char *cfg = NULL, *dtype = NULL, *out = NULL;
    int skeleton = 0;
    const cli_opt opts[] = {
        {"--config", "FILE", OPT_STR, &cfg, 0, 0, NULL, OPT_REQUIRED, "a fixture-shaped config, e.g. models/tiny.json"},
        {"--dtype", "bf16|fp8", OPT_STR, &dtype, 0, 0, NULL, "bf16", "storage: bf16, or the release's fp8/fp4"},
        {"-o|--output", "DIR", OPT_STR, &out, 0, 0, NULL, OPT_REQUIRED, "the new checkpoint directory; must not exist"},
        {"--skeleton", NULL, OPT_FLAG, &skeleton, 0, 0, NULL, NULL,
         "the release layout of a release config.json, every data region a hole (no disk, no --dtype)"},
    };
    const cli_cmd cmd = {.name = "synth",
                         .synopsis = "--config FILE -o DIR [options]",
                         .about = "Write a checkpoint of any geometry with filler weights in the release formats.",
                         .opts = opts,
                         .n_opts = N_OPTS(opts)};
    int rc = args_parse(&cmd, argc, argv);
    if (rc >= 0) return rc;
    if (skeleton && dtype) {
        fprintf(stderr, "dsv41: synth: --skeleton takes no --dtype\n");
        return 2;
    }
    progress_on();
    cli_catch_signals(1);
    rc = skeleton ? dsv41_synth_skeleton(cfg, RELEASE_SHARDS, out) : dsv41_synth(cfg, dtype ? dtype : "bf16", out, &cli_signal);
    return cli_signal ? 128 + cli_signal : rc ? fail() : 0;
}

static int cmd_bench(int argc, char **argv) {
    const char *dir = NULL, *kernels = NULL, *ctx_list = NULL;
    int32_t threads = 0, parallel = 0, draft = 0, ctxs[64], n_ctxs = 0;
    int json = 0;
    const cli_opt opts[] = {
        {"-m|--model", "DIR", OPT_STR, &dir, 0, 0, NULL, OPT_REQUIRED, "the checkpoint to measure"},
        {"-t|--threads", "N", OPT_I32, &threads, 1, 256, NULL, "one per core", "the second thread count measured"},
        {"--parallel", "N", OPT_I32, &parallel, 1, 256, NULL, "none", "also decode N sessions batched, beside one"},
        {"--ctx", "N[,N...]", OPT_STR, &ctx_list, 0, 0, NULL, "none",
         "instead: a prefill of N tokens, the decode after it and the peak memory, for each N"},
        {"--draft", "N", OPT_I32, &draft, 1, 64, NULL, "none", "also measure speculative decoding, N drafts a block"},
        {"--json", NULL, OPT_FLAG, &json, 0, 0, NULL, "a table", "print one JSON object"},
        OPT_KERNELS(&kernels),
    };
    const cli_cmd cmd = {.name = "bench",
                         .synopsis = "-m DIR [options]",
                         .about = "Prefill and decode speed at 1 thread and at -t threads, against the triad bandwidth and the\n"
                                  "FMA peak measured in the same run; with --parallel N, the decode of N sessions batched\n"
                                  "into one forward per step, beside one session's, at -t threads. Progress on stderr when it is a terminal.",
                         .opts = opts,
                         .n_opts = N_OPTS(opts)};
    int rc = args_parse(&cmd, argc, argv);
    if (rc >= 0) return rc;
    if (use_kernels(kernels)) return 2;
    for (const char *p = ctx_list; p && *p; n_ctxs++) {
        char *end;
        long v = strtol(p, &end, 10);
        if (end == p || v < 1 || v > 0x7FFFFFFF || (*end && *end != ',') || n_ctxs == 64 || (*end == ',' && !end[1])) {
            fprintf(stderr, "dsv41: bench: --ctx wants up to 64 comma-separated positive token counts, not '%s'\n", ctx_list);
            return 2;
        }
        ctxs[n_ctxs] = (int32_t)v;
        p = *end ? end + 1 : end;
    }
    if (ctx_list && (n_ctxs == 0 || parallel || draft)) {
        fprintf(stderr, "dsv41: bench: %s\n", n_ctxs ? "--ctx measures apart from --parallel and --draft: give one"
                                                      : "--ctx wants at least one token count");
        return 2;
    }
    dsv41_model *m = load_model(dir);
    if (!m) return fail();
    rc = dsv41_bench(m, threads, parallel, draft, ctxs, n_ctxs, json, stdout);
    dsv41_model_free(m);
    return rc ? fail() : 0;
}

static int cmd_inspect(int argc, char **argv) {
    const char *dir = NULL;
    const cli_cmd cmd = {.name = "inspect",
                         .synopsis = "DIR",
                         .about = "Describe a checkpoint: the config, the layer roles, tensor counts and sizes per storage\n"
                                  "dtype, and the bytes of weights one decoded token reads.",
                         .pos = &dir,
                         .min_pos = 1,
                         .max_pos = 1};
    int rc = args_parse(&cmd, argc, argv);
    if (rc >= 0) return rc;
    dsv41_model *m = load_model(dir);
    if (!m) return fail();
    dsv41_model_describe(m, stdout);
    dsv41_model_free(m);
    return 0;
}

typedef struct {
    const char *name;
    int (*fn)(int argc, char **argv);
    const char *what;
} command;

static const command COMMANDS[] = {
    {"run", cmd_run, "generate from token ids (--ids) or answer a message (-p), streaming"},
    {"chat", cmd_chat, "an interactive conversation"},
    {"serve", cmd_serve, "an OpenAI-compatible HTTP server (chat, completions, streaming, tool calls)"},
    {"check", cmd_check, "run a golden file and compare every capture"},
    {"tokenize", cmd_tokenize, "print the token ids of a text"},
    {"render", cmd_render, "print the V4.1 prompt of a chat case"},
    {"convert", cmd_convert, "write a golden's model as a checkpoint"},
    {"synth", cmd_synth, "write a checkpoint of any geometry with filler weights"},
    {"inspect", cmd_inspect, "describe a checkpoint"},
    {"bench", cmd_bench, "measure prefill and decode speed"},
    {"kernels", cmd_kernels, "the kernel sets this CPU runs, the default marked"},
};

static void usage(FILE *f) {
    fprintf(f, "usage: dsv41 <command> [options]   (dsv41 <command> --help for its options and defaults)\n\n");
    for (size_t i = 0; i < sizeof COMMANDS / sizeof *COMMANDS; i++) fprintf(f, "  %-10s %s\n", COMMANDS[i].name, COMMANDS[i].what);
    fprintf(f, "\n  dsv41 --version   the version and the kernel sets this CPU runs\n"
               "Start with: dsv41 run --ids 2,17,47 -n 16   (the built-in tiny model, no files needed)\n");
}

int main(int argc, char **argv) {
    if (argc < 2) { usage(stderr); return 2; }
    if (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help")) { usage(stdout); return 0; }
    if (!strcmp(argv[1], "--version")) {
        const char *sets[8];
        int32_t n = dsv41_kernel_sets(sets, 8);
        printf("dsv41 %s\nkernel sets:", dsv41_version());
        for (int32_t i = 0; i < n && i < 8; i++) printf(" %s", sets[i]);
        printf(" (default: %s)\n", dsv41_kernels());
        return 0;
    }
    for (size_t i = 0; i < sizeof COMMANDS / sizeof *COMMANDS; i++)
        if (!strcmp(argv[1], COMMANDS[i].name)) return COMMANDS[i].fn(argc - 2, argv + 2);
    fprintf(stderr, "dsv41: unknown command '%s' (dsv41 --help lists them)\n", argv[1]);
    return 2;
}
