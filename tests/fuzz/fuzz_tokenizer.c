/* fuzz_tokenizer.c - loading tokenizer.json: any file loads or fails with an error; a loaded
 * tokenizer tokenizes and decodes a fixed text without fault. Seeds: small byte-level
 * tokenizers and a cut-down DeepSeek-V3 tokenizer.json (its pre-tokenizer, normalizer, added
 * tokens and first vocabulary entries). */
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    dsv41_tokenizer *t = dsv41_tokenizer_load(fuzz_file("tokenizer.json", data, size));
    if (!t) return 0;
    static const char text[] = "Hello, world! 123 <｜User｜>héllo\n\n  x";
    int32_t ids[256];
    int64_t n = dsv41_tokenize(t, text, sizeof text - 1, 1, ids, 256);
    char out[4096];
    dsv41_utf8_stream st = {{0}, 0};
    for (int64_t i = 0; i < n && i < 256; i++) dsv41_detokenize(t, &st, ids[i], out, sizeof out);
    for (int32_t id = 0; id < dsv41_tokenizer_n_vocab(t) && id < 512; id++) {
        size_t len;
        dsv41_token_bytes(t, id, &len);
    }
    dsv41_tokenizer_free(t);
    return 0;
}
