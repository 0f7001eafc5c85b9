/* run.c - `dsv41 run`: a prompt of token ids (--ids) or of text (-p / -f), and the flags run
 * and chat share.
 *
 * One table holds the generation flags, so run --ids, run -p and chat take the same sampling
 * flags with the same defaults, under their own and llama.cpp's spellings. With --ids the
 * default is greedy (the ids are a probe of the model, and the built-in model has no
 * tokenizer); a text prompt samples at temperature 0.6 unless told otherwise. */
#include <errno.h>
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
    *o = (gen_opts){.n_new = -1, .sp = dsv41_sampler_params_default()};
    o->sp.seed = (uint64_t)time(NULL);
    cli_opt t[32];
    int n = 0;
    t[n++] = (cli_opt){"-m|--model", "DIR", OPT_STR, &o->dir, 0, 0, NULL, chat ? NULL : "the built-in tiny model (--ids only)",
                       "checkpoint directory (config.json, safetensors, tokenizer.json)"};
    if (!chat) {
        t[n++] = (cli_opt){"--ids", "A,B,C", OPT_STR, &o->ids, 0, 0, NULL, NULL, "a prompt of token ids; prints the generated ids"};
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
    t[n++] = (cli_opt){"--special", NULL, OPT_FLAG, &o->special, 0, 0, NULL, "hidden", "print the reply's special tokens"};
    if (!chat)
        t[n++] = (cli_opt){"--draft", "N", OPT_I32, &o->draft, 0, 64, NULL, "0, off",
                           "speculative decoding with the model's DSpark drafter, N drafts a block (greedy --ids)"};
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
    if (o->ids && !o->temp_given) o->sp.temperature = 0.0f;
    if (o->draft && (!o->ids || o->sp.temperature != 0.0f || o->sp.repeat_penalty != 1.0f ||
                     o->sp.presence_penalty != 0.0f || o->sp.frequency_penalty != 0.0f)) {
        fprintf(stderr, "dsv41: run: --draft decodes greedily: it takes --ids without --temp or penalties\n");
        return 2;
    }
    return -1;
}

void gen_note_seed(const gen_opts *o) {
    if (!o->seed_given && o->sp.temperature > 0.0f) fprintf(stderr, "seed: %llu\n", (unsigned long long)o->sp.seed);
}

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* "2,17,47" -> ids [cap]; returns the count or -1 */
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

static int fail(const char *what) {
    fprintf(stderr, "dsv41: %s\n", what);
    return 1;
}

/* Prefills the ids and samples n_new more (greedy unless told), printing them as one line of
 * comma-separated ids. Stops at the context with a note; Ctrl-C exits 130 (128 + the signal). */
static int run_ids(const gen_opts *o) {
    int cap = 1;
    for (const char *p = o->ids; *p; p++) cap += *p == ',';
    int32_t *hist = malloc((size_t)cap * sizeof *hist);
    if (!hist) return fail("out of memory");
    int n_ids = parse_ids(o->ids, hist, cap);
    if (n_ids <= 0) { free(hist); return fail("run: --ids wants comma-separated non-negative integers"); }
    progress_on();
    dsv41_model *m = o->dir ? dsv41_model_load(o->dir) : dsv41_model_builtin();
    if (!m) { free(hist); return fail(dsv41_error()); }
    int32_t V = dsv41_model_vocab_size(m), ctx = dsv41_model_max_seq_len(m);
    if (o->ctx && o->ctx < ctx) ctx = o->ctx;
    int64_t n_new = o->n_new < 0 ? 16 : o->n_new;
    if (n_ids > ctx) {
        fprintf(stderr, "dsv41: run: %d prompt tokens exceed the context of %d tokens\n", n_ids, ctx);
        free(hist);
        dsv41_model_free(m);
        return 1;
    }
    if (n_ids + n_new > ctx) {
        n_new = ctx - n_ids;
        fprintf(stderr, "note: stopping at the context of %d tokens, after %lld new tokens\n", ctx, (long long)n_new);
    }
    int32_t *grown = realloc(hist, (size_t)(n_ids + n_new) * sizeof *hist);
    if (!grown) { free(hist); dsv41_model_free(m); return fail("out of memory"); }
    hist = grown;
    dsv41_session *s = dsv41_session_new(m);
    dsv41_sampler *smp = dsv41_sampler_new(&o->sp, V);
    float *logits = malloc((size_t)V * sizeof *logits);
    int rc = !s || !smp || !logits ? fail(dsv41_error()) : 0;
    double t0 = now_s();
    if (rc == 0 && dsv41_session_forward(s, hist, n_ids, logits, NULL)) rc = fail(dsv41_error());
    if (rc == 0) gen_note_seed(o);
    double t1 = now_s();
    int64_t done = 0, rounds = 0;
    if (rc == 0 && o->draft > 0 && n_new > 0) { /* speculative rounds: the same ids, several a forward */
        int32_t *out = malloc((size_t)(o->draft + 1) * sizeof *out), anchor = dsv41_sample(smp, logits);
        if (!out) rc = fail("out of memory");
        else printf("%d", anchor);
        for (done = 1; rc == 0 && done < n_new && !cli_signal; rounds++) {
            int64_t room = n_new - done - 1;
            int32_t got = dsv41_session_speculate(s, anchor, room < o->draft ? (int32_t)room : o->draft, out);
            if (got < 0) { rc = fail(dsv41_error()); break; }
            for (int32_t i = 0; i < got; i++) printf(",%d", out[i]);
            fflush(stdout);
            done += got;
            anchor = out[got - 1];
        }
        free(out);
    }
    for (; rc == 0 && o->draft == 0 && done < n_new && !cli_signal; done++) {
        if (dsv41_apply_penalties(&o->sp, hist, n_ids + (int32_t)done, logits, V)) { rc = fail(dsv41_error()); break; }
        int32_t next = dsv41_sample(smp, logits);
        hist[n_ids + done] = next;
        printf("%s%d", done ? "," : "", next);
        fflush(stdout);
        if (done + 1 < n_new && dsv41_session_forward(s, &next, 1, logits, NULL)) rc = fail(dsv41_error());
    }
    double t2 = now_s();
    if (done) printf("\n");
    if (rc == 0) {
        double gen = done > 1 ? (double)(done - 1) / (t2 - t1) : 0.0;
        fprintf(stderr, "prompt: %d tokens, %.1f tok/s | generated: %lld tokens, %.1f tok/s\n", n_ids, n_ids / (t1 - t0),
                (long long)done, gen);
        if (rounds) fprintf(stderr, "speculative: %lld forwards for %lld tokens (%.2f a forward)\n", (long long)rounds,
                            (long long)(done - 1), (double)(done - 1) / (double)rounds);
    }
    free(logits);
    free(hist);
    dsv41_sampler_free(smp);
    dsv41_session_free(s);
    dsv41_model_free(m);
    return cli_signal ? 128 + cli_signal : rc;
}

int cmd_run(int argc, char **argv) {
    gen_opts o;
    int rc = gen_parse(0, argc, argv, &o);
    if (rc >= 0) return rc;
    cli_catch_signals(1); /* from here Ctrl-C ends the run with 130, after the call in progress */
    return o.ids ? run_ids(&o) : run_text(&o);
}
