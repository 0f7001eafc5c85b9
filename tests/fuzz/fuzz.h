/* fuzz.h - what the libFuzzer harnesses share: a private scratch folder and writing an input
 * (or a part of one) to a file in it, since the library reads checkpoints, tokenizers and
 * goldens from paths. */
#ifndef DSV41_FUZZ_H
#define DSV41_FUZZ_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dsv41_dev.h"

/* A folder of this process's own, made once (in /dev/shm when there is one: the harnesses
 * write a file per input). */
static inline const char *fuzz_dir(void) {
    static char dir[64];
    if (!dir[0]) {
        snprintf(dir, sizeof dir, "%s/dsv41-fuzz-XXXXXX", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
        if (!mkdtemp(dir)) abort();
    }
    return dir;
}

/* Writes n bytes to dir/name (dir: fuzz_dir()), or removes it when n is SIZE_MAX. Returns the path. */
static inline const char *fuzz_file(const char *name, const uint8_t *p, size_t n) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    unlink(path);
    if (n == SIZE_MAX) return path;
    FILE *f = fopen(path, "wb");
    if (!f || (n && fwrite(p, 1, n, f) != n)) abort();
    fclose(f);
    return path;
}

/* The V4.1 tokenizer (the V3 tokenizer.json with the V4.1 added tokens) from $DSV41_SHARED or
 * ../shared; aborts when it cannot be read. */
static inline dsv41_tokenizer *fuzz_v41_tokenizer(void) {
    const char *shared = getenv("DSV41_SHARED");
    char path[1024], added[1024];
    snprintf(path, sizeof path, "%s/tokenizer/deepseek-v3/tokenizer.json", shared && *shared ? shared : "../shared");
    snprintf(added, sizeof added, "%s/tokenizer/v41_added_tokens.json", shared && *shared ? shared : "../shared");
    dsv41_tokenizer *t = dsv41_tokenizer_load_with_added(path, added);
    if (!t) { fprintf(stderr, "%s\n", dsv41_error()); abort(); }
    return t;
}

/* Drives a constraint of g through a few steps, each picking the allowed token that pick [n]
 * (cycled) numbers: the mask's count must be its finite logits, the pick must be allowed and
 * accepted, and a token the mask refused must be refused by allows and accept. */
static inline void fuzz_constraint_walk(const dsv41_tokenizer *tok, const dsv41_grammar *g, const uint8_t *pick, size_t n) {
    int32_t V = dsv41_tokenizer_n_vocab(tok), eos = dsv41_tokenizer_eos(tok);
    float *logits = malloc((size_t)V * sizeof *logits);
    dsv41_constraint *c = dsv41_constraint_new(g, &eos, 1, -1); /* NULL: a start past a limit, an error */
    for (size_t step = 0; c && logits && step < 8 && dsv41_constraint_status(c) != DSV41_CONSTRAINT_DONE; step++) {
        for (int32_t i = 0; i < V; i++) logits[i] = 0.0f;
        int32_t allowed = dsv41_constraint_mask(c, logits, V), count = 0, chosen = -1, refused = -1;
        uint32_t want = n ? pick[step % n] : 0;
        for (int32_t i = 0; i < V; i++) {
            if (isinf(logits[i])) {
                if (refused < 0 || i % 7 == (int32_t)(want % 7)) refused = i;
            } else if ((uint32_t)count++ == want || chosen < 0) chosen = i;
        }
        if (count != allowed) abort();
        if (allowed == 0) break;
        if (refused >= 0 && (dsv41_constraint_allows(c, refused) || dsv41_constraint_accept(c, refused) == 0)) abort();
        if (!dsv41_constraint_allows(c, chosen) || dsv41_constraint_accept(c, chosen)) abort();
        if (chosen == eos) break;
    }
    dsv41_constraint_free(c);
    free(logits);
}

#endif
