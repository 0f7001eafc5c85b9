/* fuzz_checkpoint.c - checkpoint directories. The input is the directory's files joined by
 * SEP in a fixed order (config.json, the index, three shards, engram_token_map.json); a part
 * left out is a missing file. Any directory loads or fails with an error; a model that loads
 * runs a prefill and a decode step without fault. Seeds: the shared golden converted to bf16
 * and to fp8 checkpoints. */
#include "fuzz.h"

#define SEP "\n--dsv41-fuzz-file--\n"

static const char *FILES[] = {"config.json", "model.safetensors.index.json", "model-00001-of-00003.safetensors",
                              "model-00002-of-00003.safetensors", "model-00003-of-00003.safetensors",
                              "engram_token_map.json"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *p = data, *end = data + size;
    size_t sep = strlen(SEP);
    for (size_t i = 0; i < sizeof FILES / sizeof *FILES; i++) {
        const uint8_t *cut = p ? memmem(p, (size_t)(end - p), SEP, sep) : NULL, *stop = cut ? cut : end;
        fuzz_file(FILES[i], p, p ? (size_t)(stop - p) : SIZE_MAX);
        p = cut ? cut + sep : NULL;
    }
    dsv41_model *m = dsv41_model_load(fuzz_dir());
    if (!m) return 0;
    int32_t V = dsv41_model_vocab_size(m), ids[3] = {0, V > 1 ? 1 : 0, V - 1};
    float *logits = malloc((size_t)V * sizeof *logits);
    dsv41_session *s = dsv41_session_new(m);
    if (s && dsv41_model_max_seq_len(m) >= 4 && dsv41_session_forward(s, ids, 3, logits, NULL) == 0)
        dsv41_session_forward(s, ids, 1, logits, NULL);
    dsv41_session_free(s);
    free(logits);
    dsv41_model_free(m);
    return 0;
}
