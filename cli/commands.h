/* commands.h - the dsv41 subcommands and what they share. Each cmd_* takes the arguments
 * after its name and returns the process exit status. */
#ifndef DSV41_COMMANDS_H
#define DSV41_COMMANDS_H

#include <signal.h>

#include "args.h"
#include "dsv41.h"
#include "dsv41_dev.h"

/* What run and chat are asked to do (one table of flags in gen.c fills it). */
typedef struct {
    const char *dir;           /* -m: checkpoint directory, NULL: the built-in model (--ids only) */
    const char *prompt, *file; /* -p TEXT or -f FILE: the user message of run */
    const char *ids;           /* --ids A,B,C, @FILE or - (stdin): a prompt of token ids */
    const char *think, *system;
    int32_t effort;            /* --think as 1..100 (low 50, high 75, max 100), 0: chat mode */
    str_list stops;            /* --stop strings */
    dsv41_sampler_params sp;
    int temp_given, seed_given;
    int64_t n_new;             /* -n, -1: until EOS or the context */
    int32_t ctx;               /* -c, 0: the model's context */
    int32_t threads;           /* -t, 0: the library's default */
    const char *kernels;       /* --kernels, NULL: $DSV41_KERNELS or the fastest */
    int special;               /* --special: show special tokens */
    int32_t draft;             /* --draft N: drafts per speculative block (run --ids), 0: off */
    dsv41_draft_policy policy; /* --draft-p-min: which drafts a round verifies, when it drafts */
    const char *json_schema;   /* --json-schema FILE: every reply is JSON under this schema */
    const char *grammar;       /* --grammar FILE: every reply follows this grammar */
} gen_opts;

/* Parses run's (chat = 0) or chat's flags into o; returns -1 to go on, else the exit status. */
int gen_parse(int chat, int argc, char **argv, gen_opts *o);
/* The ids of --ids (ids.c): inline "A,B,C", "@FILE" or "-" (stdin), separated by commas and/or
 * white space, optionally in [ ]; *ids is malloc'd. 0, or -1 after a one-line error. */
int ids_read(const char *spec, int32_t **ids, int32_t *n);
/* Prints a seed taken from the clock on stderr, so that a sampled run can be repeated. */
void gen_note_seed(const gen_opts *o);

/* A progress line on stderr when it is a terminal: the library's long calls (rate and ETA)
 * and the prefill's layers. progress_on installs the hook for this thread. */
void progress_on(void);
void progress_layers(void *ctx, int32_t done, int32_t total);
void progress_clear(void);

int cmd_tokenize(int argc, char **argv);
int cmd_render(int argc, char **argv);
int cmd_run(int argc, char **argv);
int run_text(const gen_opts *o);
int cmd_chat(int argc, char **argv);
/* serve.c */
int cmd_serve(int argc, char **argv);
/* Chooses the kernel set (NULL: $DSV41_KERNELS or the fastest); returns 0, or 2 after a one-line
 * error */
int use_kernels(const char *name);

/* Signals (signals.c): the last one caught, 0 while none was */
extern volatile sig_atomic_t cli_signal;
/* Catch SIGINT, and with terminate_too SIGTERM and SIGHUP, into cli_signal. */
void cli_catch_signals(int terminate_too);
/* The session whose forward call a caught signal cancels (NULL: none). */
void cli_cancel_target(dsv41_session *s);

#endif
