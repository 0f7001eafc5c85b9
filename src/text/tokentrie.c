/* tokentrie.c - the tries and plain-text bitmaps of tokentrie.h, built once per tokenizer (the
 * first grammar pays about 0.2 s; the tokenizer keeps them for the rest).
 *
 * Tokens are sorted by their bytes (an 8-byte big-endian prefix compared as an integer first,
 * which settles most comparisons), and a trie is laid out from the sorted list in one pass:
 * each token adds the nodes past its common prefix with the one before. */
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "tokenizer.h"
#include "tokentrie.h"

typedef struct {
    uint64_t key; /* the first 8 bytes, big-endian, zero-padded */
    const char *p;
    uint32_t len;
    int32_t id;
    int32_t q;    /* plain characters, or -1 when not plain */
} tok_ref;

static int by_bytes(const void *a, const void *b) {
    const tok_ref *x = a, *y = b;
    if (x->key != y->key) return x->key < y->key ? -1 : 1;
    uint32_t n = x->len < y->len ? x->len : y->len;
    int c = n > 8 ? memcmp(x->p + 8, y->p + 8, n - 8) : 0;
    if (c) return c;
    if (x->len != y->len) return x->len < y->len ? -1 : 1;
    return x->id < y->id ? -1 : x->id > y->id;
}

/* The characters of a plain token (a cut last one counts), or -1 when p [n] is not plain. */
static int32_t plain_chars(const unsigned char *p, uint32_t n) {
    int32_t q = 0;
    for (uint32_t i = 0; i < n; q++) {
        unsigned char b = p[i];
        if (b < 0x80) {
            if (!tokentrie_plain_ascii(b)) return -1;
            i++;
            continue;
        }
        /* a multi-byte character: its lead fixes the length and the first continuation's range */
        uint32_t len;
        unsigned char lo = 0x80, hi = 0xBF;
        if (b >= 0xC2 && b <= 0xDF) len = 2;
        else if (b >= 0xE0 && b <= 0xEF) len = 3, lo = b == 0xE0 ? 0xA0 : 0x80, hi = b == 0xED ? 0x9F : 0xBF;
        else if (b >= 0xF0 && b <= 0xF4) len = 4, lo = b == 0xF0 ? 0x90 : 0x80, hi = b == 0xF4 ? 0x8F : 0xBF;
        else return -1;
        for (uint32_t k = 1; k < len; k++) {
            if (i + k == n) return q + 1 > PLAIN_MAX ? -1 : q + 1; /* cut: the token ends inside it */
            unsigned char c = p[i + k];
            if (c < (k == 1 ? lo : 0x80) || c > (k == 1 ? hi : 0xBF)) return -1;
        }
        i += len;
    }
    return q > PLAIN_MAX ? -1 : q;
}

static void trie_free(byte_trie *tr) {
    free(tr->byte);
    free(tr->depth);
    free(tr->next);
    free(tr->tok);
    free(tr->ntok);
    free(tr->ids);
    memset(tr, 0, sizeof *tr);
}

static void tokentrie_free(void *p) {
    tokentrie *tt = p;
    if (!tt) return;
    trie_free(&tt->all);
    trie_free(&tt->rest);
    free(tt->plain);
    free(tt);
}

/* The trie of the sorted refs [n] that keep selects (plain ones left out when rest_only). */
static int trie_build(byte_trie *tr, const tok_ref *refs, int32_t n, int rest_only, size_t total, int32_t *path) {
    memset(tr, 0, sizeof *tr);
    tr->byte = malloc(total);
    tr->depth = malloc(total * sizeof *tr->depth);
    tr->next = malloc(total * sizeof *tr->next);
    tr->tok = malloc(total * sizeof *tr->tok);
    tr->ntok = calloc(total, sizeof *tr->ntok);
    tr->ids = malloc((size_t)(n ? n : 1) * sizeof *tr->ids);
    if (!tr->byte || !tr->depth || !tr->next || !tr->tok || !tr->ntok || !tr->ids) return set_error("out of memory building the token trie");
    int32_t nodes = 1, depth = 0, k = 0; /* path[d]: the node at depth d on the current branch */
    const tok_ref *prev = NULL;
    path[0] = 0;
    tr->byte[0] = 0, tr->depth[0] = 0, tr->tok[0] = 0;
    for (int32_t r = 0; r < n; r++) {
        const tok_ref *t = &refs[r];
        if (rest_only && t->q >= 0) continue;
        uint32_t lcp = 0;
        if (prev)
            while (lcp < prev->len && lcp < t->len && prev->p[lcp] == t->p[lcp]) lcp++;
        while (depth > (int32_t)lcp) tr->next[path[depth--]] = nodes;
        for (uint32_t d = lcp; d < t->len; d++) {
            int32_t i = nodes++;
            tr->byte[i] = (uint8_t)t->p[d];
            tr->depth[i] = (uint16_t)(d + 1);
            tr->tok[i] = 0;
            path[++depth] = i;
        }
        int32_t at = path[depth];
        if (tr->ntok[at] == 0) tr->tok[at] = k;
        tr->ntok[at]++;
        tr->ids[k++] = t->id;
        if (depth > tr->max_depth) tr->max_depth = depth;
        prev = t;
    }
    while (depth >= 0) tr->next[path[depth--]] = nodes;
    tr->n = nodes;
    return 0;
}

static void *tokentrie_build(const dsv41_tokenizer *t) {
    int32_t V = dsv41_tokenizer_n_vocab(t), n = 0;
    tokentrie *tt = calloc(1, sizeof *tt);
    if (!tt) { set_error("out of memory building the token trie"); return NULL; }
    tt->words = (V + 31) / 32;
    tok_ref *refs = malloc((size_t)(V > 0 ? V : 1) * sizeof *refs);
    int32_t *path = malloc((UINT16_MAX + 2) * sizeof *path);
    tt->plain = calloc((size_t)(PLAIN_MAX + 1) * (size_t)tt->words, sizeof *tt->plain);
    if (!refs || !path || !tt->plain) {
        free(refs);
        free(path);
        tokentrie_free(tt);
        set_error("out of memory building the token trie");
        return NULL;
    }
    size_t total = 1;
    for (int32_t id = 0; id < V; id++) {
        size_t len;
        const char *b = tokenizer_is_added(t, id) ? NULL : dsv41_token_bytes(t, id, &len);
        if (!b || len == 0 || len > UINT16_MAX) continue;
        uint64_t key = 0;
        for (size_t i = 0; i < 8; i++) key = key << 8 | (i < len ? (unsigned char)b[i] : 0);
        int32_t q = plain_chars((const unsigned char *)b, (uint32_t)len);
        refs[n++] = (tok_ref){key, b, (uint32_t)len, id, q};
        total += len;
        for (int32_t k = q; k >= 0 && k <= PLAIN_MAX; k++) tt->plain[(size_t)k * (size_t)tt->words + (size_t)(id >> 5)] |= 1u << (id & 31);
    }
    qsort(refs, (size_t)n, sizeof *refs, by_bytes);
    int rc = trie_build(&tt->all, refs, n, 0, total, path) || trie_build(&tt->rest, refs, n, 1, total, path) ? -1 : 0;
    free(refs);
    free(path);
    if (rc) {
        tokentrie_free(tt);
        return NULL;
    }
    return tt;
}

const tokentrie *tokentrie_get(const dsv41_tokenizer *t) { return tokenizer_derived(t, tokentrie_build, tokentrie_free); }
