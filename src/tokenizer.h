/* tokenizer.h - library-internal views of a loaded tokenizer that the public API leaves out. */
#ifndef DSV41_TOKENIZER_H
#define DSV41_TOKENIZER_H

#include <stdint.h>

#include "dsv41.h"

/* 1 when id is an added token flagged special (what skip_special_tokens would drop), else 0.
 * A replacement table without flags keeps the base file's flag for the same spelling and
 * marks spellings the base file lacks as special. */
int tokenizer_is_special(const dsv41_tokenizer *t, int32_t id);
/* Sets the begin / end of sentence ids (-1: none); returns -1 for an id outside. */
int tokenizer_set_ends(dsv41_tokenizer *t, int32_t bos, int32_t eos);

#endif
