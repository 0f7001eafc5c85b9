/* args.h - the one argument parser every dsv41 subcommand uses.
 *
 * A subcommand is a table of options: each names its spellings ("-n|--n-predict", the
 * llama.cpp ones as aliases), the kind of value it takes and where the value goes, its range,
 * its default as the user should read it, and a line of help. The parser fills the targets,
 * collects positional arguments, and handles -h/--help (usage with the defaults on stdout,
 * exit 0) and every mistake (one `dsv41: ...` line on stderr, exit 2) the same way for all
 * subcommands. A new flag is one more table row. */
#ifndef DSV41_ARGS_H
#define DSV41_ARGS_H

#include <stdint.h>

typedef enum {
    OPT_FLAG,   /* no value: *(int *)dst = 1 */
    OPT_STR,    /* *(const char **)dst = the value */
    OPT_LIST,   /* repeatable: appended to (str_list *)dst */
    OPT_I32,    /* *(int32_t *)dst, an integer in [lo, hi] */
    OPT_I64,    /* *(int64_t *)dst, an integer in [lo, hi] */
    OPT_U64,    /* *(uint64_t *)dst, any unsigned 64-bit integer */
    OPT_F32,    /* *(float *)dst, a finite number in [lo, hi] */
} opt_kind;

#define STR_LIST_CAP 8
typedef struct {
    const char *v[STR_LIST_CAP]; /* [n] values in the order given */
    int n;
} str_list;

typedef struct {
    const char *names;   /* spellings separated by '|', e.g. "-c|--ctx-size" */
    const char *value;   /* the value's name in the usage ("N", "DIR"), NULL for a flag */
    opt_kind kind;
    void *dst;           /* where the value goes */
    double lo, hi;       /* range of a numeric value */
    int *seen;           /* set to 1 when given, or NULL */
    const char *def;     /* the default as shown in --help, NULL, or OPT_REQUIRED */
    const char *help;    /* one line */
} cli_opt;

/* The def of an option that must be given (an OPT_STR): the parser checks it is there. */
extern const char OPT_REQUIRED[];

typedef struct {
    const char *name;       /* "run" */
    const char *synopsis;   /* what follows "dsv41 run" in the usage line */
    const char *about;      /* one or two lines */
    const cli_opt *opts;
    int n_opts;
    const char **pos;       /* [max_pos] positional arguments, in order */
    int min_pos, max_pos;
    int *n_pos;             /* how many were given */
} cli_cmd;

#define N_OPTS(a) ((int)(sizeof(a) / sizeof *(a)))

/* Parses argv (the arguments after the subcommand's name). Returns -1 when the command should
 * run, or the exit status to leave with: 0 after --help, 2 after a one-line error. "--"
 * ends the options; "--name=value" works for every long spelling. */
int args_parse(const cli_cmd *c, int argc, char **argv);

/* The shared -t/--threads row and its action: 0 keeps the library's default. */
#define OPT_THREADS(dst) \
    {"-t|--threads", "N", OPT_I32, (dst), 1, 256, NULL, "one per core", "worker threads; results do not depend on it"}
/* The shared --kernels row; its value goes to use_kernels() (NULL: $DSV41_KERNELS or the fastest). */
#define OPT_KERNELS(dst) \
    {"--kernels", "SET", OPT_STR, (dst), 0, 0, NULL, "$DSV41_KERNELS, else amx on AMX tiles, else the fastest", \
     "the kernel set: scalar, avx2, avx512, neon or amx (dsv41 kernels lists this CPU's); results do not depend on it"}
/* The shared --draft and --draft-p-min rows of the commands that decode (run, chat, serve). */
#define OPT_DRAFT(dst) \
    {"--draft", "N", OPT_I32, (dst), 0, 64, NULL, "0, off", \
     "speculative decoding with the model's DSpark drafter, N drafts a block (the same tokens)"}
#define OPT_DRAFT_P_MIN(dst) \
    {"--draft-p-min", "P", OPT_F32, (dst), 0, 1, NULL, "0.5", \
     "verify the drafts before the first whose confidence is under P (0: all)"}
/* Applies a -t value (0: not given); returns 0, or 2 after a one-line error. */
int args_apply_threads(int32_t threads);

#endif
