/* fuzz_schema.c - JSON Schema text as dsv41_schema_grammar reads it: grammar text or a
 * "json schema: " message, never more; the grammar of any schema compiles on the V4.1 tokenizer
 * (or names a documented limit), its start rule carries the prefix when one is given (odd-sized
 * inputs), and it drives a constraint a few steps (fuzz.h's walk). Seeds: the schemas of
 * tests/data/schema_cases.json. */
#include "fuzz.h"

static dsv41_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    tok = fuzz_v41_tokenizer();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    int prefixed = size % 2;
    char *text = dsv41_schema_grammar((const char *)data, size, prefixed ? "p-" : NULL);
    if (!text) {
        if (strncmp(dsv41_error(), "json schema: ", 13) && strncmp(dsv41_error(), "out of memory", 13)) abort();
        return 0;
    }
    size_t n = strlen(text);
    char *full = malloc(n + 32);
    if (!full) abort();
    memcpy(full, text, n);
    strcpy(full + n, prefixed ? "root ::= p-root\n" : ""); /* a prefixed grammar is a part: give it a root */
    if (prefixed && !strstr(text, "p-root ::= ")) abort();
    dsv41_grammar *g = dsv41_grammar_new(tok, full, strlen(full));
    if (!g && !strstr(dsv41_error(), "more than") && !strstr(dsv41_error(), "above 10000") && !strstr(dsv41_error(), "out of memory") &&
        !strstr(dsv41_error(), "bytes of text")) {
        fprintf(stderr, "%s\n%s\n", dsv41_error(), full);
        abort();
    }
    if (g) fuzz_constraint_walk(tok, g, data, size < 4 ? size : 4);
    dsv41_grammar_free(g);
    free(full);
    free(text);
    return 0;
}
