/* fuzz_grammar.c - grammar text as dsv41_grammar_new reads it, on the V4.1 tokenizer: it compiles
 * or fails with a "grammar: " message, never more; a compiled grammar drives a constraint a few
 * steps (fuzz.h's walk, its picks taken from the input's last 4 bytes). Seeds: the grammars of
 * tests/fuzz/seeds.sh. */
#include "fuzz.h"

static dsv41_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    tok = fuzz_v41_tokenizer();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    size_t n_pick = size > 8 ? 4 : 0, len = size - n_pick;
    dsv41_grammar *g = dsv41_grammar_new(tok, (const char *)data, len);
    if (!g) {
        if (strncmp(dsv41_error(), "grammar: ", 9) && strncmp(dsv41_error(), "out of memory", 13)) abort();
        return 0;
    }
    fuzz_constraint_walk(tok, g, data + len, n_pick);
    dsv41_grammar_free(g);
    return 0;
}
