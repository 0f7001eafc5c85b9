/* fuzz_tokenize.c - the DeepSeek-V3 tokenizer on arbitrary bytes: the first byte picks
 * special-token parsing; valid UTF-8 encodes, anything else fails with an error; the ids decode
 * back, through the streaming decoder, to exactly the input. Seeds: vectors.json's texts. */
#include "fuzz.h"

static dsv41_tokenizer *tok;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *shared = getenv("DSV41_SHARED");
    char path[1024];
    snprintf(path, sizeof path, "%s/tokenizer/deepseek-v3/tokenizer.json", shared && *shared ? shared : "../shared");
    if (!(tok = dsv41_tokenizer_load(path))) { fprintf(stderr, "%s\n", dsv41_error()); abort(); }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int special = data[0] & 1;
    const char *text = (const char *)data + 1;
    size_t len = size - 1;
    int64_t n = dsv41_tokenize(tok, text, len, special, NULL, 0);
    if (n < 0) return 0;
    int32_t *ids = malloc((size_t)(n ? n : 1) * sizeof *ids);
    if (dsv41_tokenize(tok, text, len, special, ids, n) != n) abort();
    /* decoding gives the text back byte for byte (special spellings are their own bytes) */
    char *back = malloc(len + 64), out[4096];
    size_t got = 0;
    dsv41_utf8_stream st = {{0}, 0};
    for (int64_t i = 0; i < n; i++) {
        int64_t k = dsv41_detokenize(tok, &st, ids[i], out, sizeof out);
        if (k < 0 || got + (size_t)k > len) abort();
        memcpy(back + got, out, (size_t)k);
        got += (size_t)k;
    }
    if (st.n != 0 || got != len || memcmp(back, text, len)) abort();
    free(back);
    free(ids);
    return 0;
}
