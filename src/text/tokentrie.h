/* tokentrie.h - a tokenizer's ordinary tokens arranged for masking (tokentrie.c).
 *
 * A mask is a walk of a byte trie of the tokens. Most of a vocabulary is plain text: printable
 * characters without '"' or '\', whole or with the last one cut. Inside a JSON string, or any
 * run of such characters a grammar allows whatever they are, the fate of a plain token
 * depends only on how many characters it holds, so those tokens are kept aside as bitmaps by
 * that count, and a second trie holds only the rest, which is all a walk then visits. */
#ifndef DSV41_TOKENTRIE_H
#define DSV41_TOKENTRIE_H

#include <stdint.h>

#include "dsv41.h"

enum { PLAIN_MAX = 32 }; /* plain tokens hold at most this many characters (a cut one counts) */

/* A byte trie stored flat in depth-first order: node i's subtree is [i, next[i]); node 0 is
 * the root. */
typedef struct {
    uint8_t *byte;   /* [n] the byte leading into node i */
    uint16_t *depth; /* [n] bytes from the root */
    int32_t *next;   /* [n] the first node after i's subtree */
    int32_t *tok;    /* [n] the first of node i's tokens in ids (ntok[i] of them) */
    int32_t *ntok;   /* [n] how many tokens end at node i */
    int32_t *ids;    /* the token ids in trie order */
    int32_t n, max_depth;
} byte_trie;

typedef struct {
    byte_trie all;   /* every ordinary token (not added, not empty) */
    byte_trie rest;  /* the ordinary tokens that are not plain */
    uint32_t *plain; /* [PLAIN_MAX + 1][words]: plain[q] marks the plain tokens of at most q characters */
    int32_t words;   /* 32-bit words of a bitmap over the tokenizer's ids */
} tokentrie;

/* 1 when byte b may be a whole plain character (printable ASCII but '"' and '\'). */
static inline int tokentrie_plain_ascii(int b) { return b >= 0x20 && b < 0x7F && b != '"' && b != '\\'; }

/* The tries and bitmaps of t's tokens, built on the first call and kept with t (freed with
 * it), so every grammar of a tokenizer shares them; NULL with the error set. */
const tokentrie *tokentrie_get(const dsv41_tokenizer *t);

#endif
