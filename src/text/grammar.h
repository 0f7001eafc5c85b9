/* grammar.h - a compiled grammar, as grammar.c builds it and constraint.c walks it.
 *
 * The grammar works on bytes: a character class becomes the alternatives of its UTF-8 byte
 * sequences, so a token's bytes (which may end inside a character) advance it one at a time
 * and no partial-character state exists beside the parse stacks. Each rule is a list of
 * alternatives; an alternative is a run of elements in el ending with G_END. Repetitions and
 * groups are rules of their own. */
#ifndef DSV41_GRAMMAR_H
#define DSV41_GRAMMAR_H

#include <stdint.h>

#include "dsv41.h"

enum { G_END, G_BYTES, G_RULE, G_TOKEN };

typedef struct {
    int32_t kind; /* G_* */
    int32_t arg;  /* G_BYTES: a set in sets; G_RULE: a rule; G_TOKEN: a token id */
} gram_el;

/* The tokenizer's ordinary tokens (not added ones, not empty) in a byte trie, stored flat in
 * depth-first order: node i's subtree is [i, next[i]); node 0 is the root. */
typedef struct {
    uint8_t *byte;    /* [n] the byte leading into node i */
    uint16_t *depth;  /* [n] bytes from the root */
    int32_t *next;    /* [n] the first node after i's subtree */
    int32_t *tok;     /* [n] the first of node i's tokens in ids (ntok[i] of them) */
    int32_t *ntok;    /* [n] how many tokens end at node i */
    int32_t *ids;     /* the token ids in trie order */
    int32_t n;
    int32_t max_depth;
} gram_trie;

struct dsv41_grammar {
    const dsv41_tokenizer *tok;
    gram_el *el;        /* [n_el] every alternative's elements, each run ending with G_END */
    int32_t *alt;       /* [n_alt] where each alternative starts in el */
    int32_t *rule_alt;  /* [n_rule + 1] rule r's alternatives are alt[rule_alt[r], rule_alt[r + 1]) */
    uint64_t (*sets)[4];/* [n_set] byte sets, 256 bits each */
    int32_t n_el, n_alt, n_rule, n_set;
    int32_t root;       /* the start rule */
    int32_t n_vocab;    /* the tokenizer's ids */
    gram_trie trie;
};

static inline int gram_set_has(const dsv41_grammar *g, int32_t set, uint8_t b) { return (int)(g->sets[set][b >> 6] >> (b & 63) & 1); }

/* The byte trie of t's ordinary tokens into tr; 0, or -1 with the error set. */
int grammar_trie_build(const dsv41_tokenizer *t, gram_trie *tr);
void grammar_trie_free(gram_trie *tr);

#endif
