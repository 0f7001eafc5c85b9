/* generate.c - embedding dsv41: the smallest program that generates with the library.
 *
 *   generate                 the built-in tiny model: prompt ids 2,17,47, 16 greedy tokens;
 *                            prints the ids on one line and their log-probabilities on the next
 *   generate DIR TEXT        a checkpoint with its tokenizer: TEXT as a user message in chat
 *                            mode, the reply streamed with the default sampler (seed 1)
 *
 * Build against an installed library with
 *   cc generate.c $(pkg-config --cflags --libs dsv41) -o generate */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv41.h"

static int fail(void) {
    fprintf(stderr, "generate: %s\n", dsv41_error());
    return 1;
}

/* Greedy decoding of n tokens after the prompt, with each chosen token's log-probability. */
static int ids_demo(void) {
    dsv41_model *m = dsv41_model_builtin();
    if (!m) return fail();
    int32_t V = dsv41_model_vocab_size(m), prompt[3] = {2, 17, 47}, ids[16];
    float lp[16], *logits = malloc((size_t)V * sizeof *logits);
    dsv41_sampler_params p = dsv41_sampler_params_default();
    p.temperature = 0.0f; /* greedy */
    dsv41_session *s = dsv41_session_new(m);
    dsv41_sampler *smp = dsv41_sampler_new(&p, V);
    int rc = !logits || !s || !smp || dsv41_session_forward(s, prompt, 3, logits, NULL);
    for (int i = 0; !rc && i < 16; i++) {
        ids[i] = dsv41_sample(smp, logits);
        lp[i] = dsv41_logprob(logits, V, ids[i]);
        if (i < 15) rc = dsv41_session_forward(s, &ids[i], 1, logits, NULL);
    }
    if (!rc) {
        for (int i = 0; i < 16; i++) printf("%s%d", i ? "," : "", ids[i]);
        printf("\n");
        for (int i = 0; i < 16; i++) printf("%s%.4f", i ? "," : "", lp[i]);
        printf("\n");
    }
    dsv41_sampler_free(smp);
    dsv41_session_free(s);
    free(logits);
    dsv41_model_free(m);
    return rc ? fail() : 0;
}

/* A chat reply: render, tokenize, prefill, then sample with penalties until EOS. */
static int chat_demo(const char *dir, const char *text) {
    dsv41_model *m = dsv41_model_load(dir);
    dsv41_tokenizer *t = m ? dsv41_tokenizer_load_dir(dir) : NULL;
    if (!t) { dsv41_model_free(m); return fail(); }
    dsv41_chat_message msg = {"user", text, NULL};
    dsv41_chat_options chat_mode = {0, 0};
    char *prompt = dsv41_chat_render_messages(&msg, 1, &chat_mode);
    int32_t V = dsv41_model_vocab_size(m), ctx = dsv41_model_max_seq_len(m);
    int32_t *hist = malloc((size_t)ctx * sizeof *hist);
    float *logits = malloc((size_t)V * sizeof *logits);
    dsv41_sampler_params p = dsv41_sampler_params_default();
    p.seed = 1;
    p.repeat_penalty = 1.1f;
    dsv41_session *s = dsv41_session_new(m);
    dsv41_sampler *smp = dsv41_sampler_new(&p, V);
    int64_t n = prompt ? dsv41_tokenize(t, prompt, strlen(prompt), 1, hist, ctx) : -1;
    int rc = !hist || !logits || !s || !smp || n < 1 || n >= ctx || dsv41_session_forward(s, hist, (int32_t)n, logits, NULL);
    dsv41_utf8_stream st = {{0}, 0};
    char out[256];
    for (int32_t pos = (int32_t)n; !rc && pos < ctx; pos++) {
        if (dsv41_apply_penalties(&p, hist, pos, logits, V)) { rc = 1; break; }
        int32_t next = dsv41_sample(smp, logits);
        if (next == dsv41_tokenizer_eos(t)) break;
        hist[pos] = next;
        int64_t k = dsv41_detokenize(t, &st, next, out, sizeof out); /* special tokens too, as run --special */
        if (k > 0) fwrite(out, 1, (size_t)k, stdout);
        rc = dsv41_session_forward(s, &next, 1, logits, NULL);
    }
    if (st.n > 0) fputs("\xEF\xBF\xBD", stdout); /* a character cut off at the end shows as U+FFFD */
    printf("\n");
    dsv41_sampler_free(smp);
    dsv41_session_free(s);
    free(logits);
    free(hist);
    free(prompt);
    dsv41_tokenizer_free(t);
    dsv41_model_free(m);
    return rc ? fail() : 0;
}

int main(int argc, char **argv) {
    if (argc == 1) return ids_demo();
    if (argc == 3) return chat_demo(argv[1], argv[2]);
    fprintf(stderr, "usage: generate [DIR TEXT]   (dsv41 %s)\n", dsv41_version());
    return 2;
}
