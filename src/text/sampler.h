/* sampler.h - library-internal views of a sampler that the public API leaves out. */
#ifndef DSV41_SAMPLER_H
#define DSV41_SAMPLER_H

#include <stdint.h>

#include "dsv41.h"

/* The vocabulary size the sampler was made for: the length of the logits it reads. */
int32_t sampler_vocab(const dsv41_sampler *s);
/* The parameters the sampler was made with. */
const dsv41_sampler_params *sampler_params(const dsv41_sampler *s);

#endif
