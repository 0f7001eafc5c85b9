/* penalties.c - the penalties on recently seen tokens.
 *
 * The penalties are a step of their own before dsv41_sample: they only need the logits and
 * the token history, and kept apart they leave the sampler a pure function of its logits.
 * repeat_penalty is llama.cpp's (a seen token's logit divided by it when positive, multiplied
 * when negative); presence and frequency penalties are OpenAI's (logit -= presence + count *
 * frequency). Each seen id is adjusted once, whatever order the history has. */
#include <stdlib.h>

#include "dsv41.h"
#include "error.h"

static int by_id(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

int dsv41_apply_penalties(const dsv41_sampler_params *p, const int32_t *history, int32_t n, float *logits, int32_t vocab) {
    int repeat = p->repeat_penalty != 1.0f && p->repeat_penalty != 0.0f;
    if (p->repeat_penalty < 0.0f) return set_error("penalties: repeat_penalty must be positive (1: off)");
    if ((!repeat && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f) || p->penalty_last_n <= 0 || n <= 0)
        return 0;
    int32_t k = n < p->penalty_last_n ? n : p->penalty_last_n;
    int32_t *ids = malloc((size_t)k * sizeof *ids);
    if (!ids) return set_error("out of memory");
    for (int32_t i = 0; i < k; i++) {
        ids[i] = history[n - k + i];
        if (ids[i] < 0 || ids[i] >= vocab) {
            free(ids);
            return set_error("penalties: token id %d is outside the vocabulary [0, %d)", history[n - k + i], vocab);
        }
    }
    qsort(ids, (size_t)k, sizeof *ids, by_id);
    for (int32_t i = 0; i < k;) {
        int32_t j = i;
        while (j < k && ids[j] == ids[i]) j++;
        float *l = &logits[ids[i]];
        if (repeat) *l = *l > 0 ? *l / p->repeat_penalty : *l * p->repeat_penalty;
        *l -= p->presence_penalty + (float)(j - i) * p->frequency_penalty;
        i = j;
    }
    free(ids);
    return 0;
}
