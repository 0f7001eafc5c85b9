/* tokenizer.h - library-internal views of a loaded tokenizer that the public API leaves out. */
#ifndef DSV41_TOKENIZER_H
#define DSV41_TOKENIZER_H

#include <stddef.h>
#include <stdint.h>

#include "dsv41.h"

/* 1 when id is an added token flagged special (what skip_special_tokens would drop), else 0.
 * A replacement table without flags keeps the base file's flag for the same spelling and
 * marks spellings the base file lacks as special. */
int tokenizer_is_special(const dsv41_tokenizer *t, int32_t id);
/* 1 when id is an added token (special or not): its spelling is never ordinary text. */
int tokenizer_is_added(const dsv41_tokenizer *t, int32_t id);
/* The longest added token whose spelling p [n] starts with: its id (spelling length in *len),
 * or -1 (then *len is not set). */
int32_t tokenizer_added_at(const dsv41_tokenizer *t, const char *p, size_t n, size_t *len);
/* Data derived once from t's tokens, shared by every user of t: made by make(t) on the first
 * call (under t's lock, so concurrent callers wait and then share it) and freed with t by
 * free_fn. One kind of data per tokenizer (the constraints' token tries). NULL when make failed
 * (its error set); a later call tries again. */
void *tokenizer_derived(const dsv41_tokenizer *t, void *(*make)(const dsv41_tokenizer *), void (*free_fn)(void *));
/* Sets the begin / end of sentence ids (-1: none); returns -1 for an id outside. */
int tokenizer_set_ends(dsv41_tokenizer *t, int32_t bos, int32_t eos);
/* The offset of the first byte of text [n] that is not valid UTF-8 (an overlong form, a code
 * point past U+10FFFF, a surrogate written as UTF-8, a cut character), with why naming the
 * kind (" (...)" or ""); n when all of it is valid. */
size_t utf8_invalid_at(const char *text, size_t n, const char **why);
/* The Engram (tokenmap.c) compressed token map of a tokenizer: map [vocab]; returns the number of distinct
 * compressed ids, or -1. */
int64_t engram_token_map(const dsv41_tokenizer *t, int32_t vocab, int64_t *map);

#endif
