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
#include "tokentrie.h"

enum { G_END, G_BYTES, G_RULE, G_TOKEN };

typedef struct {
    int32_t kind; /* G_* */
    int32_t arg;  /* G_BYTES: a set in sets; G_RULE: a rule; G_TOKEN: a token id */
} gram_el;

struct dsv41_grammar {
    const dsv41_tokenizer *tok;
    gram_el *el;        /* [n_el] every alternative's elements, each run ending with G_END */
    int32_t *alt;       /* [n_alt] where each alternative starts in el */
    int32_t *rule_alt;  /* [n_rule + 1] rule r's alternatives are alt[rule_alt[r], rule_alt[r + 1]) */
    uint64_t (*sets)[4];/* [n_set] byte sets, 256 bits each */
    int32_t n_el, n_alt, n_rule, n_set;
    int32_t root;       /* the start rule */
    int32_t n_vocab;    /* the tokenizer's ids */
    uint8_t byte_class[256]; /* bytes of one class are in the same sets: one transition serves them all */
    int32_t n_class;
    const tokentrie *tt;/* the tokenizer's tokens as tries and plain-text bitmaps (the tokenizer's) */
};

static inline int grammar_set_has(const dsv41_grammar *g, int32_t set, uint8_t b) { return (int)(g->sets[set][b >> 6] >> (b & 63) & 1); }

#endif
