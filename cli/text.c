/* text.c - the text commands: `tokenize` (text -> ids) and `render` (chat case -> prompt).
 *
 * Both are thin shells over the library so that scripts and tests can reach the tokenizer and
 * the chat encoder byte for byte: tokenize prints one JSON array line, render prints the
 * prompt with nothing added. Every failure is one `dsv41: ...` line on stderr and a non-zero
 * exit (2 for usage, 1 for bad input). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"

/* A library failure: its message already names what failed. */
static int lib_fail(void) {
    fprintf(stderr, "dsv41: %s\n", dsv41_error());
    return 1;
}

/* The whole file at path (NUL-terminated, length in *len), or NULL with a message on stderr. */
static char *read_all(const char *cmd, const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        fprintf(stderr, "dsv41: %s: %s: %s\n", cmd, path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n == cap) {
            cap = cap ? 2 * cap : 1 << 16;
            char *nb = realloc(buf, cap + 1);
            if (!nb) { free(buf); fclose(f); fprintf(stderr, "dsv41: %s: out of memory\n", cmd); return NULL; }
            buf = nb;
        }
        got = fread(buf + n, 1, cap - n, f);
        n += got;
    } while (got > 0);
    int bad = ferror(f);
    fclose(f);
    if (bad) { free(buf); fprintf(stderr, "dsv41: %s: %s: read error\n", cmd, path); return NULL; }
    buf[n] = 0;
    *len = n;
    return buf;
}

/* Prints ids as [a,b,c] and a newline. */
static void print_ids(const int32_t *ids, int64_t n) {
    putchar('[');
    for (int64_t i = 0; i < n; i++) printf("%s%d", i ? "," : "", ids[i]);
    puts("]");
}

int cmd_tokenize(int argc, char **argv) {
    const char *tok_path = NULL, *dir = NULL, *added = NULL, *text = NULL;
    int special = 0;
    const cli_opt opts[] = {
        {"--tokenizer", "FILE", OPT_STR, &tok_path, 0, 0, NULL, NULL, "a Hugging Face tokenizer.json"},
        {"-m|--model", "DIR", OPT_STR, &dir, 0, 0, NULL, NULL, "or the tokenizer of this checkpoint directory"},
        {"--added", "ADDED.json", OPT_STR, &added, 0, 0, NULL, NULL, "replace the added tokens with this table"},
        {"--special", NULL, OPT_FLAG, &special, 0, 0, NULL, "off: plain text", "special-token spellings become their ids"},
    };
    const cli_cmd cmd = {.name = "tokenize",
                         .synopsis = "(--tokenizer FILE | -m DIR) [options] [--] TEXT",
                         .about = "Print the token ids of TEXT as a JSON array (\"--\" lets TEXT start with '-').",
                         .opts = opts,
                         .n_opts = N_OPTS(opts),
                         .pos = &text,
                         .min_pos = 1,
                         .max_pos = 1};
    int rc = args_parse(&cmd, argc, argv);
    if (rc >= 0) return rc;
    if (!tok_path == !dir || (dir && added)) {
        fprintf(stderr, "dsv41: tokenize: give --tokenizer FILE or -m DIR (--added goes with --tokenizer)\n");
        return 2;
    }
    dsv41_tokenizer *t = dir ? dsv41_tokenizer_load_dir(dir)
                         : added ? dsv41_tokenizer_load_with_added(tok_path, added) : dsv41_tokenizer_load(tok_path);
    if (!t) return lib_fail();
    size_t len = strlen(text);
    int64_t n = dsv41_tokenize(t, text, len, special, NULL, 0);
    int32_t *ids = n >= 0 ? malloc((size_t)(n ? n : 1) * sizeof *ids) : NULL;
    int ok = ids && dsv41_tokenize(t, text, len, special, ids, n) == n;
    if (ok) print_ids(ids, n);
    else if (n >= 0 && !ids) fprintf(stderr, "dsv41: tokenize: out of memory\n");
    else lib_fail();
    free(ids);
    dsv41_tokenizer_free(t);
    return ok ? 0 : 1;
}

int cmd_render(int argc, char **argv) {
    const char *path = NULL;
    const cli_opt opts[] = {{"--chat", "CASE.json", OPT_STR, &path, 0, 0, NULL, OPT_REQUIRED, "the chat case"}};
    const cli_cmd cmd = {.name = "render",
                         .synopsis = "--chat CASE.json",
                         .about = "Print the DeepSeek-V4.1 prompt of a chat case ({\"messages\", \"tools\"?, \"options\"?}) exactly,\n"
                                  "with no newline added. Without options the encoder's default is thinking mode, effort high\n"
                                  "(run and chat default to chat mode).",
                         .opts = opts,
                         .n_opts = N_OPTS(opts)};
    int rc = args_parse(&cmd, argc, argv);
    if (rc >= 0) return rc;
    size_t len;
    char *json = read_all("render", path, &len);
    if (!json) return 1;
    char *prompt = dsv41_chat_render(json, len);
    free(json);
    if (!prompt) return lib_fail();
    fputs(prompt, stdout);
    free(prompt);
    if (fflush(stdout) == 0) return 0;
    fprintf(stderr, "dsv41: render: write error\n");
    return 1;
}
