/* logprob.c - the log-probability of a chosen token under the model's softmax.
 *
 * log p(id) = l[id] - max - log(sum exp(l - max)), summed in double so that a 128k-entry
 * vocabulary loses nothing to the order of the sum. */
#include <math.h>

#include "dsv41.h"
#include "error.h"

float dsv41_logprob(const float *logits, int32_t vocab, int32_t id) {
    if (id < 0 || id >= vocab) return -INFINITY;
    float mx = logits[0];
    for (int32_t i = 1; i < vocab; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0.0;
    for (int32_t i = 0; i < vocab; i++) sum += exp((double)logits[i] - mx);
    return (float)((double)logits[id] - mx - log(sum));
}
