/* gen.c - the flags of the commands that generate (run and chat), so that run.c and chat.c
 * share them without needing each other.
 *
 * One table holds the generation flags, so run --ids, run -p and chat take the same sampling
 * flags with the same defaults, under their own and llama.cpp's spellings. With --ids the
 * default is greedy (the ids are a probe of the model, and the built-in model has no
 * tokenizer); a text prompt samples at temperature 0.6 unless told otherwise. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "commands.h"

/* --think's value as the encoder's effort: low 50, high 75, max 100, or 1..100; -1 if bad */
static int32_t effort_of(const char *think) {
    if (!strcmp(think, "low")) return 50;
    if (!strcmp(think, "high")) return 75;
    if (!strcmp(think, "max")) return 100;
    char *end;
    long v = strtol(think, &end, 10);
    return *end || end == think || v < 1 || v > 100 ? -1 : (int32_t)v;
}

/* The table is built per call because its rows point into o; chat leaves out the prompt rows. */
int gen_parse(int chat, int argc, char **argv, gen_opts *o) {
    *o = (gen_opts){.n_new = -1, .sp = dsv41_sampler_params_default(), .policy = dsv41_draft_policy_default()};
    o->sp.seed = (uint64_t)time(NULL);
    cli_opt t[32];
    int n = 0;
    t[n++] = (cli_opt){"-m|--model", "DIR", OPT_STR, &o->dir, 0, 0, NULL, chat ? NULL : "the built-in tiny model (--ids only)",
                       "checkpoint directory (config.json, safetensors, tokenizer.json)"};
    if (!chat) {
        t[n++] = (cli_opt){"--ids", "A,B,C|@FILE|-", OPT_STR, &o->ids, 0, 0, NULL, NULL,
                           "a prompt of token ids, inline, in FILE or on stdin (-); prints the generated ids"};
        t[n++] = (cli_opt){"-p|--prompt", "TEXT", OPT_STR, &o->prompt, 0, 0, NULL, NULL, "the user message, rendered as a V4.1 chat"};
        t[n++] = (cli_opt){"-f|--file", "FILE", OPT_STR, &o->file, 0, 0, NULL, NULL, "read the user message from FILE"};
    }
    t[n++] = (cli_opt){"-n|--n-predict", "N", OPT_I64, &o->n_new, 0, 1e9, NULL,
                       chat ? "until EOS or the context" : "16 with --ids, else until EOS or the context", "tokens to generate"};
    t[n++] = (cli_opt){"-c|--ctx-size", "N", OPT_I32, &o->ctx, 1, 2147483647.0, NULL, "the model's max_seq_len",
                       "stop when the sequence reaches N tokens"};
    t[n++] = (cli_opt){"--temp|--temperature", "T", OPT_F32, &o->sp.temperature, 0, 100, &o->temp_given,
                       chat ? "0.6" : "0.6; 0 with --ids", "sampling temperature, 0: greedy"};
    t[n++] = (cli_opt){"--top-k", "K", OPT_I32, &o->sp.top_k, 0, 2147483647.0, NULL, "0, off", "keep the K most likely tokens"};
    t[n++] = (cli_opt){"--top-p", "P", OPT_F32, &o->sp.top_p, 1e-6, 1, NULL, "0.95", "keep the smallest set holding P of the probability"};
    t[n++] = (cli_opt){"--min-p", "M", OPT_F32, &o->sp.min_p, 0, 1, NULL, "0, off", "drop tokens below M times the top probability"};
    t[n++] = (cli_opt){"-s|--seed", "S", OPT_U64, &o->sp.seed, 0, 0, &o->seed_given, "the clock, printed on stderr", "sampling seed"};
    t[n++] = (cli_opt){"--repeat-penalty", "R", OPT_F32, &o->sp.repeat_penalty, 1e-3, 100, NULL, "1, off",
                       "divide a recent token's logit by R (multiply when negative)"};
    t[n++] = (cli_opt){"--presence-penalty", "P", OPT_F32, &o->sp.presence_penalty, -100, 100, NULL, "0, off",
                       "subtract P from a recent token's logit"};
    t[n++] = (cli_opt){"--frequency-penalty", "F", OPT_F32, &o->sp.frequency_penalty, -100, 100, NULL, "0, off",
                       "subtract F per occurrence of a recent token"};
    t[n++] = (cli_opt){"--repeat-last-n", "N", OPT_I32, &o->sp.penalty_last_n, 0, 2147483647.0, NULL, "64",
                       "how many recent tokens the penalties look at"};
    t[n++] = (cli_opt){"--think", "low|high|max|N", OPT_STR, &o->think, 0, 0, NULL, "off: chat mode", "thinking mode at this effort"};
    t[n++] = (cli_opt){"--system", "TEXT", OPT_STR, &o->system, 0, 0, NULL, NULL, "a system message first"};
    t[n++] = (cli_opt){"--stop", "STR", OPT_LIST, &o->stops, 0, 0, NULL, NULL, "end the reply at STR (up to 8 times)"};
    t[n++] = (cli_opt){"-j|--json-schema", "FILE", OPT_STR, &o->json_schema, 0, 0, NULL, NULL,
                       "the reply is JSON valid under the JSON Schema in FILE (after the thinking with --think)"};
    t[n++] = (cli_opt){"--grammar", "FILE", OPT_STR, &o->grammar, 0, 0, NULL, NULL,
                       "the reply follows the grammar in FILE (docs/STRUCTURED_OUTPUT.md; after the thinking with --think)"};
    t[n++] = (cli_opt){"--special", NULL, OPT_FLAG, &o->special, 0, 0, NULL, "hidden", "print the reply's special tokens"};
    t[n++] = (cli_opt)OPT_DRAFT(&o->draft);
    t[n++] = (cli_opt)OPT_DRAFT_P_MIN(&o->policy.p_min);
    t[n++] = (cli_opt)OPT_THREADS(&o->threads);
    t[n++] = (cli_opt)OPT_KERNELS(&o->kernels);
    const char *about = chat ? "An interactive conversation in one session (/help lists the commands; Ctrl-C stops a reply).\n"
                               "Generated text goes to stdout; timings and progress to stderr."
                             : "Prefill a prompt and generate: token ids in, ids out (--ids), or a user message in, the\n"
                               "streamed reply out (-p, -f). Generated text alone goes to stdout; timings and progress to stderr.";
    const cli_cmd cmd = {.name = chat ? "chat" : "run",
                         .synopsis = chat ? "-m DIR [options]"
                                          : "[-m DIR] --ids A,B,C [options]  |  dsv41 run -m DIR (-p TEXT | -f FILE) [options]",
                         .about = about, .opts = t, .n_opts = n};
    int rc = args_parse(&cmd, argc, argv);
    if (rc >= 0) return rc;
    if (args_apply_threads(o->threads) || use_kernels(o->kernels)) return 2;
    if (!chat && !!o->ids + !!o->prompt + !!o->file != 1) {
        fprintf(stderr, "dsv41: run: give exactly one prompt: --ids A,B,C, -p TEXT or -f FILE\n");
        return 2;
    }
    if (!o->dir && !o->ids) {
        fprintf(stderr, "dsv41: %s: give the checkpoint directory with -m DIR\n", cmd.name);
        return 2;
    }
    if (o->think && (o->effort = effort_of(o->think)) < 0) {
        fprintf(stderr, "dsv41: %s: --think wants low, high, max or an effort from 1 to 100, not '%s'\n", cmd.name, o->think);
        return 2;
    }
    if (o->json_schema && o->grammar) {
        fprintf(stderr, "dsv41: %s: give --json-schema or --grammar, not both\n", cmd.name);
        return 2;
    }
    if (o->ids && (o->json_schema || o->grammar)) {
        fprintf(stderr, "dsv41: run: --json-schema and --grammar need a text prompt (-p or -f), not --ids\n");
        return 2;
    }
    if (o->ids && !o->temp_given) o->sp.temperature = 0.0f;
    return -1;
}

void gen_note_seed(const gen_opts *o) {
    if (!o->seed_given && o->sp.temperature > 0.0f) fprintf(stderr, "seed: %llu\n", (unsigned long long)o->sp.seed);
}
