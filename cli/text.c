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
#include "dsv41.h"

/* A library failure: its message already names what failed. */
static int lib_fail(void) {
    fprintf(stderr, "dsv41: %s\n", dsv41_error());
    return 1;
}

static int text_usage(const char *what, const char *arg, const char *usage) {
    fprintf(stderr, "dsv41: %s%s (usage: dsv41 %s)\n", what, arg, usage);
    return 2;
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
    static const char usage[] = "tokenize --tokenizer FILE [--added ADDED.json] [--special] [--] TEXT";
    const char *tok_path = NULL, *added = NULL, *text = NULL;
    int special = 0;
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "--tokenizer") && i + 1 < argc) tok_path = argv[++i];
        else if (!strcmp(argv[i], "--added") && i + 1 < argc) added = argv[++i];
        else if (!strcmp(argv[i], "--special")) special = 1;
        else if (argv[i][0] == '-' && strcmp(argv[i], "--")) return text_usage("tokenize: unknown option or missing value: ", argv[i], usage);
        else if (text) return text_usage("tokenize: more than one text: ", argv[i], usage);
        else text = !strcmp(argv[i], "--") && i + 1 < argc ? argv[++i] : argv[i]; /* -- TEXT: text may start with - */
    }
    if (!tok_path || !text) return text_usage("tokenize: needs --tokenizer FILE and the text", "", usage);
    dsv41_tokenizer *t = added ? dsv41_tokenizer_load_with_added(tok_path, added) : dsv41_tokenizer_load(tok_path);
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
    static const char usage[] = "render --chat CASE.json";
    if (argc != 2 || strcmp(argv[0], "--chat")) return text_usage("render: needs exactly --chat CASE.json", "", usage);
    size_t len;
    char *json = read_all("render", argv[1], &len);
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
