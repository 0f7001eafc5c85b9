/* tokenizer.c - byte-level BPE read from a Hugging Face tokenizer.json.
 *
 * Encoding follows the file, not a hard-coded model: added tokens are cut out first
 * (leftmost-longest over a byte trie, only when special parsing is on), every remaining
 * stretch goes through the file's Split regexes in order, each step running over the pieces
 * the previous one made (PCRE2 with UTF + UCP), and every final piece is merged by BPE.
 * Two details keep PCRE2 equal to the Oniguruma engine the file was written for: `\s` and
 * `\S` are rewritten to Oniguruma's Unicode whitespace class (it counts U+0085 and not
 * U+180E; PCRE2's own \s differs between versions), and each piece is matched as a subject
 * of its own, so that a lookahead such as (?!\S) sees the piece's end.
 *
 * The BPE works on ids, not strings: the vocabulary is stored as the raw bytes each entry
 * stands for (the GPT-2 byte<->char map undone at load), merges become an (id, id) -> rank
 * hash map, and a piece starts as one id per byte. Merging pops the lowest (rank, position)
 * pair from a heap over a linked list of symbols, so a 100 KB word costs O(n log n), not the
 * O(n^2) of rescanning. Stale heap entries are recognized and skipped.
 *
 * Input must be valid UTF-8: an invalid byte, an overlong form, a code point above U+10FFFF
 * and a lone UTF-16 surrogate written as UTF-8 (WTF-8, ED A0..BF xx) are all errors naming
 * the byte offset, since none of them has a faithful tokenization. Decoding accepts any bytes:
 * each maximal invalid subsequence becomes one U+FFFD, as a lossy UTF-8 decoder does, and a
 * character split across tokens is held back until it is complete. */
#include <stdlib.h>
#include <string.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <pthread.h>

#include "dsv41.h"
#include "error.h"
#include "json.h"
#include "tokenizer.h"

#define MAX_SPLITS 8            /* capacity: Split steps in one pre-tokenizer */
#define MAX_TOKEN_ID (1 << 24)  /* sanity bound on ids read from a file */
#define BYTE_CHARS 324          /* the GPT-2 byte map uses code points below 256 + 68 */

/* Oniguruma's Unicode \s: TAB..CR, NEL and the Z categories (U+180E is not among them). */
#define ONIG_SPACE "\\t\\n\\x{0B}\\f\\r\\x{85}\\p{Z}"

enum { TOK_NONE, TOK_VOCAB, TOK_ADDED, TOK_SPECIAL };

/* One hash-table slot: a 64-bit key and two ints; a < 0 marks an empty slot. */
typedef struct {
    uint64_t key;
    int32_t a, b;
} slot;

typedef struct {
    slot *s;
    uint64_t mask;
} table;

/* A byte trie over the added-token spellings: children as sibling lists. */
typedef struct {
    int32_t child, sibling, id; /* id: the token ending here, or -1 */
    unsigned char byte;
} trie_node;

struct dsv41_tokenizer {
    int32_t n_vocab;
    char *text;             /* arena holding every token's decoded bytes */
    size_t text_len, text_cap;
    size_t *off;            /* [n_vocab] offset of each token's bytes in text */
    uint32_t *len;          /* [n_vocab] their length */
    uint8_t *kind;          /* [n_vocab] TOK_* */
    table bytes;            /* raw bytes of a byte-level vocabulary entry -> id (a) */
    table merges;           /* (left id, right id) -> rank (a), merged id (b) */
    int32_t byte_id[256];   /* the vocabulary id of each single byte */
    int16_t char_byte[BYTE_CHARS]; /* GPT-2 map inverse: code point -> byte, or -1 */
    trie_node *trie;        /* node 0 is the root */
    int32_t n_trie, cap_trie;
    pcre2_code *split[MAX_SPLITS];
    int32_t n_split;
    int32_t bos, eos;       /* begin / end of sentence ids, -1 when absent */
    pthread_mutex_t derived_lock; /* guards the next two, made on first use */
    void *derived;          /* data derived once from the tokens (constraint.c's tries), or NULL */
    void (*derived_free)(void *);
};

/* ---- UTF-8 */

/* The character at p[0..n): returns its length (1-4) when complete and valid. Otherwise
 * returns 0 with *bad = the length of the maximal invalid subpart (>= 1), or *bad = 0 when
 * p is a valid prefix cut short by n. */
static int utf8_char(const unsigned char *p, size_t n, size_t *bad) {
    unsigned c = p[0], lo = 0x80, hi = 0xBF;
    int need;
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) need = 2;
    else if (c >= 0xE0 && c <= 0xEF) { need = 3; lo = c == 0xE0 ? 0xA0 : 0x80; hi = c == 0xED ? 0x9F : 0xBF; }
    else if (c >= 0xF0 && c <= 0xF4) { need = 4; lo = c == 0xF0 ? 0x90 : 0x80; hi = c == 0xF4 ? 0x8F : 0xBF; }
    else { *bad = 1; return 0; }
    for (int k = 1; k < need; k++) {
        if ((size_t)k >= n) { *bad = 0; return 0; }
        unsigned b = p[k];
        if (b < (k == 1 ? lo : 0x80) || b > (k == 1 ? hi : 0xBF)) { *bad = (size_t)k; return 0; }
    }
    return need;
}

/* The code point of a valid sequence of length len. */
static uint32_t utf8_decode(const unsigned char *p, int len) {
    static const unsigned lead_mask[5] = {0, 0x7F, 0x1F, 0x0F, 0x07};
    uint32_t cp = p[0] & lead_mask[len];
    for (int k = 1; k < len; k++) cp = (cp << 6) | (p[k] & 0x3F);
    return cp;
}

size_t utf8_invalid_at(const char *text, size_t n, const char **why) {
    const unsigned char *p = (const unsigned char *)text;
    for (size_t i = 0; i < n;) {
        size_t bad;
        int l = utf8_char(p + i, n - i, &bad);
        if (l) { i += (size_t)l; continue; }
        if (p[i] == 0xED && i + 1 < n && p[i + 1] >= 0xA0 && p[i + 1] <= 0xBF) *why = " (a UTF-16 surrogate written as UTF-8)";
        else *why = bad ? "" : " (truncated character)";
        return i;
    }
    return n;
}

/* 0 when all n bytes are valid UTF-8; else -1 with an error naming the first bad offset. */
static int check_utf8(const unsigned char *p, size_t n) {
    const char *why;
    size_t at = utf8_invalid_at((const char *)p, n, &why);
    return at == n ? 0 : set_error("tokenize: invalid UTF-8 at byte offset %zu%s", at, why);
}

/* ---- hash table of 64-bit keys (open addressing, linear probing) */

static uint64_t mix64(uint64_t x) {
    x ^= x >> 30; x *= 0xBF58476D1CE4E5B9ULL;
    x ^= x >> 27; x *= 0x94D049BB133111EBULL;
    return x ^ (x >> 31);
}

static uint64_t hash_bytes(const void *p, size_t n) {
    const unsigned char *b = p;
    uint64_t h = 0xCBF29CE484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001B3ULL;
    return mix64(h);
}

static uint64_t pair_key(int32_t a, int32_t b) { return (uint64_t)(uint32_t)a << 32 | (uint32_t)b; }

/* Sizes the table for n items at a load of at most one half. */
static int table_init(table *t, size_t n) {
    size_t cap = 16;
    while (cap < 2 * n) cap *= 2;
    t->s = malloc(cap * sizeof *t->s);
    if (!t->s) return set_error("out of memory");
    for (size_t i = 0; i < cap; i++) t->s[i].a = -1;
    t->mask = cap - 1;
    return 0;
}

static void table_put(table *t, uint64_t key, int32_t a, int32_t b) {
    uint64_t i = mix64(key) & t->mask;
    while (t->s[i].a >= 0) i = (i + 1) & t->mask;
    t->s[i] = (slot){key, a, b};
}

/* The next slot holding key after `after` (NULL: the first), or NULL. */
static const slot *table_find(const table *t, uint64_t key, const slot *after) {
    uint64_t i = after ? ((uint64_t)(after - t->s) + 1) & t->mask : mix64(key) & t->mask;
    for (; t->s[i].a >= 0; i = (i + 1) & t->mask)
        if (t->s[i].key == key) return &t->s[i];
    return NULL;
}

/* ---- token storage */

/* The vocabulary id whose current bytes are p[0..n), or -1. */
static int32_t bytes_lookup(const dsv41_tokenizer *t, const void *p, size_t n) {
    uint64_t h = hash_bytes(p, n);
    for (const slot *s = table_find(&t->bytes, h, NULL); s; s = table_find(&t->bytes, h, s))
        if (t->len[s->a] == n && memcmp(t->text + t->off[s->a], p, n) == 0) return s->a;
    return -1;
}

/* Sets the bytes token id decodes to. */
static int store_text(dsv41_tokenizer *t, int32_t id, const void *p, size_t n) {
    if (!t->text || t->text_len + n > t->text_cap) { /* an empty token too: every token's bytes point into the buffer */
        size_t cap = t->text_cap ? t->text_cap : 1 << 20;
        while (cap < t->text_len + n) cap *= 2;
        char *nt = realloc(t->text, cap);
        if (!nt) return set_error("out of memory");
        t->text = nt;
        t->text_cap = cap;
    }
    if (n) memcpy(t->text + t->text_len, p, n);
    t->off[id] = t->text_len;
    t->len[id] = (uint32_t)n;
    t->text_len += n;
    return 0;
}

/* ---- the GPT-2 byte map: printable Latin-1 bytes stand for themselves, the other 68 bytes
 * for U+0100.. in byte order. */

static void byte_map_init(dsv41_tokenizer *t) {
    int extra = 0;
    for (int i = 0; i < BYTE_CHARS; i++) t->char_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE);
        t->char_byte[printable ? b : 256 + extra++] = (int16_t)b;
    }
}

/* Byte-level spelling s[0..n) -> the raw bytes it stands for (out holds n bytes). Returns the
 * raw length, or -1 when s has a character outside the map. */
static int64_t byte_level_decode(const dsv41_tokenizer *t, const char *s, size_t n, char *out) {
    const unsigned char *p = (const unsigned char *)s;
    size_t o = 0, bad;
    for (size_t i = 0; i < n;) {
        int l = utf8_char(p + i, n - i, &bad);
        if (!l) return -1;
        uint32_t cp = utf8_decode(p + i, l);
        if (cp >= BYTE_CHARS || t->char_byte[cp] < 0) return -1;
        out[o++] = (char)t->char_byte[cp];
        i += (size_t)l;
    }
    return (int64_t)o;
}

/* The vocabulary id of a byte-level spelling, or -1. */
static int32_t spelling_lookup(const dsv41_tokenizer *t, const char *s, size_t n) {
    char stackbuf[256], *raw = n <= sizeof stackbuf ? stackbuf : malloc(n);
    if (!raw) return -1;
    int64_t rn = byte_level_decode(t, s, n, raw);
    int32_t id = rn < 0 ? -1 : bytes_lookup(t, raw, (size_t)rn);
    if (raw != stackbuf) free(raw);
    return id;
}

/* ---- added-token trie */

static int32_t trie_new_node(dsv41_tokenizer *t, unsigned char byte) {
    if (t->n_trie == t->cap_trie) {
        int32_t cap = t->cap_trie ? t->cap_trie * 2 : 1024;
        trie_node *n = realloc(t->trie, (size_t)cap * sizeof *n);
        if (!n) return set_error("out of memory");
        t->trie = n;
        t->cap_trie = cap;
    }
    t->trie[t->n_trie] = (trie_node){-1, -1, -1, byte};
    return t->n_trie++;
}

/* The child of node on byte b, or -1. */
static int32_t trie_child(const dsv41_tokenizer *t, int32_t node, unsigned char b) {
    int32_t c = t->trie[node].child;
    while (c >= 0 && t->trie[c].byte != b) c = t->trie[c].sibling;
    return c;
}

static int trie_insert(dsv41_tokenizer *t, const char *s, size_t n, int32_t id) {
    int32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char b = (unsigned char)s[i];
        int32_t c = trie_child(t, node, b);
        if (c < 0) {
            if ((c = trie_new_node(t, b)) < 0) return -1;
            t->trie[c].sibling = t->trie[node].child;
            t->trie[node].child = c;
        }
        node = c;
    }
    if (t->trie[node].id >= 0) return set_error("token %d repeats the spelling of %d", id, t->trie[node].id);
    t->trie[node].id = id;
    return 0;
}

/* The longest added token that p[0..n) starts with: its id (length in *mlen), or -1. */
static int32_t trie_longest(const dsv41_tokenizer *t, const unsigned char *p, size_t n, size_t *mlen) {
    int32_t node = 0, best = -1;
    for (size_t i = 0; i < n && (node = trie_child(t, node, p[i])) >= 0; i++)
        if (t->trie[node].id >= 0) { best = t->trie[node].id; *mlen = i + 1; }
    return best;
}

/* ---- loading */

/* A JSON value that turns a feature on: present and not null, false, 0 or "". */
static int is_set(const json *v) {
    if (!v || v->type == JSON_NULL) return 0;
    if (v->type == JSON_BOOL || v->type == JSON_NUM) return v->num != 0;
    if (v->type == JSON_STR) return v->len > 0;
    return 1;
}

static int str_is(const json *v, const char *s) { return v && v->type == JSON_STR && strcmp(v->str, s) == 0; }

/* A token id from JSON: an integer in [0, MAX_TOKEN_ID). */
static int32_t json_id(const json *v) {
    if (!v || v->type != JSON_NUM || !v->is_int || v->is_neg || v->bits >= MAX_TOKEN_ID) return -1;
    return (int32_t)v->bits;
}

/* Only a plain byte-level BPE is supported; anything that would change its output is refused. */
static int check_model(const json *root) {
    static const char *const off[] = {"dropout", "byte_fallback", "continuing_subword_prefix", "end_of_word_suffix",
                                      "ignore_merges"};
    const json *model = json_get(root, "model"), *norm = json_get(root, "normalizer"), *dec = json_get(root, "decoder");
    if (!str_is(json_get(model, "type"), "BPE")) return set_error("model: only type BPE is supported");
    for (size_t i = 0; i < sizeof off / sizeof off[0]; i++)
        if (is_set(json_get(model, off[i]))) return set_error("model: '%s' is not supported", off[i]);
    if (norm && norm->type != JSON_NULL &&
        !(str_is(json_get(norm, "type"), "Sequence") && json_get(norm, "normalizers") &&
          json_get(norm, "normalizers")->len == 0))
        return set_error("normalizer: only none or an empty Sequence is supported");
    if (dec && dec->type != JSON_NULL && !str_is(json_get(dec, "type"), "ByteLevel"))
        return set_error("decoder: only ByteLevel is supported");
    return 0;
}

/* Rewrites a regex so that \s and \S mean Oniguruma's whitespace (see ONIG_SPACE). Returns a
 * malloc'd pattern of *out_len bytes, or NULL. */
static char *onig_pattern(const char *p, size_t n, size_t *out_len) {
    char *o = malloc(n * sizeof ONIG_SPACE + 1), *w = o;
    int in_class = 0;
    if (!o) { set_error("out of memory"); return NULL; }
    for (size_t i = 0; i < n; i++) {
        if (p[i] == '\\' && i + 1 < n && (p[i + 1] == 's' || p[i + 1] == 'S')) {
            if (in_class && p[i + 1] == 'S') { free(o); set_error("regex: \\S inside a class is not supported"); return NULL; }
            w += sprintf(w, in_class ? "%s" : p[i + 1] == 's' ? "[%s]" : "[^%s]", ONIG_SPACE);
            i++;
        } else if (p[i] == '\\' && i + 1 < n) {
            *w++ = p[i++];
            *w++ = p[i];
        } else if (!in_class && p[i] == '[') {
            in_class = 1;
            *w++ = p[i];
            if (i + 1 < n && p[i + 1] == '^') *w++ = p[++i];
            if (i + 1 < n && p[i + 1] == ']') *w++ = p[++i]; /* a leading ] is literal */
        } else {
            if (in_class && p[i] == ']') in_class = 0;
            *w++ = p[i];
        }
    }
    *out_len = (size_t)(w - o);
    return o;
}

/* One Split step: pattern {"Regex": ...} or {"String": ...}, behavior Isolated. */
static int load_split(dsv41_tokenizer *t, const json *step) {
    const json *pat = json_get(step, "pattern"), *re = json_get(pat, "Regex"), *lit = json_get(pat, "String");
    if (!str_is(json_get(step, "behavior"), "Isolated") || is_set(json_get(step, "invert")))
        return set_error("pre_tokenizer: only Split with behavior Isolated and invert false is supported");
    if ((re && re->type != JSON_STR) || (lit && lit->type != JSON_STR) || !(re || lit))
        return set_error("pre_tokenizer: Split pattern must be {\"Regex\": ...} or {\"String\": ...}");
    if (t->n_split == MAX_SPLITS) return set_error("pre_tokenizer: more than %d Split steps", MAX_SPLITS);
    size_t n = lit ? lit->len : 0;
    char *rewritten = lit ? NULL : onig_pattern(re->str, re->len, &n);
    if (!lit && !rewritten) return -1;
    int code;
    PCRE2_SIZE at;
    uint32_t opts = lit ? PCRE2_UTF | PCRE2_LITERAL : PCRE2_UTF | PCRE2_UCP;
    pcre2_code *c = pcre2_compile((PCRE2_SPTR)(lit ? lit->str : rewritten), n, opts, &code, &at, NULL);
    free(rewritten);
    if (!c) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(code, msg, sizeof msg);
        return set_error("pre_tokenizer: regex error at %zu: %s", (size_t)at, (const char *)msg);
    }
    pcre2_jit_compile(c, PCRE2_JIT_COMPLETE); /* an interpreter fallback remains if JIT is unavailable */
    t->split[t->n_split++] = c;
    return 0;
}

static int load_pre_step(dsv41_tokenizer *t, const json *step) {
    if (str_is(json_get(step, "type"), "Split")) return load_split(t, step);
    if (str_is(json_get(step, "type"), "ByteLevel")) {
        if (is_set(json_get(step, "use_regex")) || is_set(json_get(step, "add_prefix_space")))
            return set_error("pre_tokenizer: ByteLevel with use_regex or add_prefix_space is not supported");
        return 0; /* the byte map itself is applied by the BPE */
    }
    return set_error("pre_tokenizer: step type is not supported (Split and ByteLevel are)");
}

/* The pre-tokenizer: absent, one step, or a Sequence of steps. */
static int load_pre_tokenizer(dsv41_tokenizer *t, const json *pt) {
    if (!pt || pt->type == JSON_NULL) return 0;
    if (!str_is(json_get(pt, "type"), "Sequence")) return load_pre_step(t, pt);
    const json *steps = json_get(pt, "pretokenizers");
    if (!steps || steps->type != JSON_ARR) return set_error("pre_tokenizer: Sequence without pretokenizers");
    for (size_t i = 0; i < steps->len; i++)
        if (load_pre_step(t, json_at(steps, i))) return -1;
    return 0;
}

/* Every vocabulary entry: byte-level spellings are stored as their raw bytes and indexed for
 * the BPE; other spellings (the BOS/EOS names) are kept verbatim. */
static int load_vocab(dsv41_tokenizer *t, const json *vocab) {
    if (table_init(&t->bytes, vocab->len)) return -1;
    for (size_t i = 0; i < vocab->len; i++) {
        int32_t id = json_id(&vocab->items[i]);
        const char *key = vocab->keys[i];
        size_t n = strlen(key);
        if (id < 0) return set_error("vocab: '%s' has no valid id", key);
        if (t->kind[id] != TOK_NONE) return set_error("vocab: id %d appears twice", id);
        char *raw = malloc(n + 1);
        if (!raw) return set_error("out of memory");
        int64_t rn = byte_level_decode(t, key, n, raw);
        int rc = rn < 0 ? store_text(t, id, key, n) : store_text(t, id, raw, (size_t)rn);
        free(raw);
        if (rc) return -1;
        if (rn >= 0) table_put(&t->bytes, hash_bytes(t->text + t->off[id], t->len[id]), id, 0);
        t->kind[id] = TOK_VOCAB;
    }
    for (int b = 0; b < 256; b++) {
        unsigned char c = (unsigned char)b;
        if ((t->byte_id[b] = bytes_lookup(t, &c, 1)) < 0) return set_error("vocab: no entry for byte 0x%02X", b);
    }
    return 0;
}

/* Splits merge i ("a b" or ["a", "b"]) into its two spellings. */
static int merge_parts(const json *m, size_t i, const char **a, size_t *an, const char **b, size_t *bn) {
    if (m->type == JSON_ARR && m->len == 2 && m->items[0].type == JSON_STR && m->items[1].type == JSON_STR) {
        *a = m->items[0].str; *an = m->items[0].len;
        *b = m->items[1].str; *bn = m->items[1].len;
        return 0;
    }
    const char *sp = m->type == JSON_STR ? memchr(m->str, ' ', m->len) : NULL;
    if (!sp) return set_error("merges: entry %zu is not \"a b\" or [\"a\", \"b\"]", i);
    *a = m->str; *an = (size_t)(sp - m->str);
    *b = sp + 1; *bn = m->len - *an - 1;
    return 0;
}

/* The merge list: its position is the rank; each pair maps to the id of its concatenation. */
static int load_merges(dsv41_tokenizer *t, const json *merges) {
    if (table_init(&t->merges, merges->len)) return -1;
    for (size_t i = 0; i < merges->len; i++) {
        const char *a = NULL, *b = NULL;
        size_t an = 0, bn = 0;
        if (merge_parts(&merges->items[i], i, &a, &an, &b, &bn)) return -1;
        int32_t ia = spelling_lookup(t, a, an), ib = spelling_lookup(t, b, bn);
        if (ia < 0 || ib < 0) return set_error("merges: entry %zu names a token not in the vocabulary", i);
        size_t la = t->len[ia], lb = t->len[ib];
        char *cat = malloc(la + lb + 1); /* never malloc(0): a part may be an empty token */
        if (!cat) return set_error("out of memory");
        memcpy(cat, t->text + t->off[ia], la);
        memcpy(cat + la, t->text + t->off[ib], lb);
        int32_t im = bytes_lookup(t, cat, la + lb);
        free(cat);
        if (im < 0) return set_error("merges: the result of entry %zu is not in the vocabulary", i);
        if (!table_find(&t->merges, pair_key(ia, ib), NULL)) table_put(&t->merges, pair_key(ia, ib), (int32_t)i, im);
    }
    return 0;
}

/* The special flag of an added-token entry: its own "special", else that of the base file's
 * entry with the same spelling, else special. */
static int added_special(const json *entry, const json *base) {
    const json *sp = json_get(entry, "special"), *content = json_get(entry, "content");
    if (sp) return is_set(sp);
    for (size_t i = 0; base && i < base->len; i++) {
        const json *c = json_get(&base->items[i], "content");
        if (c && c->type == JSON_STR && c->len == content->len && memcmp(c->str, content->str, c->len) == 0)
            return is_set(json_get(&base->items[i], "special"));
    }
    return 1;
}

/* Added tokens [{id, content, special?}, ...] (from `where`): they decode to their spelling
 * verbatim. base, when not NULL, is the list they replace. */
static int load_added(dsv41_tokenizer *t, const json *list, const json *base, const char *where) {
    for (size_t i = 0; list && i < list->len; i++) {
        const json *e = &list->items[i], *content = json_get(e, "content");
        int32_t id = json_id(json_get(e, "id"));
        if (id < 0 || !content || content->type != JSON_STR || content->len == 0)
            return set_error("%s: entry %zu needs an id and a non-empty content", where, i);
        if (t->kind[id] == TOK_ADDED || t->kind[id] == TOK_SPECIAL) return set_error("%s: id %d appears twice", where, id);
        if (store_text(t, id, content->str, content->len)) return -1;
        if (trie_insert(t, content->str, content->len, id)) return set_error("%s: %s", where, dsv41_error());
        t->kind[id] = added_special(e, base) ? TOK_SPECIAL : TOK_ADDED;
    }
    return 0;
}

/* The size of the id space: one past the largest id of the vocabulary and the added list. */
static int32_t id_space(const json *vocab, const json *added) {
    int32_t n = 0;
    for (size_t i = 0; i < vocab->len; i++)
        if (json_id(&vocab->items[i]) >= n) n = json_id(&vocab->items[i]) + 1;
    for (size_t i = 0; added && i < added->len; i++)
        if (json_id(json_get(&added->items[i], "id")) >= n) n = json_id(json_get(&added->items[i], "id")) + 1;
    return n;
}

/* Builds t from a parsed tokenizer.json and, when given, a replacement added-token table read
 * from added_path. */
static int build(dsv41_tokenizer *t, const json *root, const json *replacement, const char *added_path) {
    const json *model = json_get(root, "model"), *vocab = json_get(model, "vocab"), *merges = json_get(model, "merges");
    const json *base_added = json_get(root, "added_tokens");
    const json *added = replacement ? json_get(replacement, "tokens") : base_added;
    if (check_model(root) || load_pre_tokenizer(t, json_get(root, "pre_tokenizer"))) return -1;
    if (!vocab || vocab->type != JSON_OBJ || !merges || merges->type != JSON_ARR)
        return set_error("model: needs a vocab object and a merges array");
    if ((added && added->type != JSON_ARR) || (replacement && !added))
        return set_error("%s: expected an array of {\"id\", \"content\"}", replacement ? added_path : "added_tokens");
    t->n_vocab = id_space(vocab, added);
    t->off = calloc((size_t)t->n_vocab, sizeof *t->off);
    t->len = calloc((size_t)t->n_vocab, sizeof *t->len);
    t->kind = calloc((size_t)t->n_vocab, sizeof *t->kind);
    if (!t->off || !t->len || !t->kind || trie_new_node(t, 0) < 0) return set_error("out of memory");
    byte_map_init(t);
    if (load_vocab(t, vocab) || load_merges(t, merges)) return -1;
    return replacement ? load_added(t, added, base_added, added_path) : load_added(t, added, NULL, "added_tokens");
}

/* Loads path (and the replacement table added_path, when not NULL); errors name the file. */
static dsv41_tokenizer *load(const char *path, const char *added_path) {
    char err[512];
    json *root = json_load_file(path, err, sizeof err), *rep = NULL;
    if (!root) { set_error("tokenizer: %s", err); return NULL; }
    if (added_path && !(rep = json_load_file(added_path, err, sizeof err))) {
        json_free(root);
        set_error("tokenizer: %s", err);
        return NULL;
    }
    dsv41_tokenizer *t = calloc(1, sizeof *t);
    if (t) pthread_mutex_init(&t->derived_lock, NULL);
    int rc = t ? build(t, root, rep, added_path) : set_error("out of memory");
    json_free(root);
    json_free(rep);
    if (rc) {
        snprintf(err, sizeof err, "%s", dsv41_error());
        set_error("tokenizer: %s: %s", path, err);
        dsv41_tokenizer_free(t);
        return NULL;
    }
    t->bos = dsv41_tokenizer_find(t, "<｜begin▁of▁sentence｜>");
    t->eos = dsv41_tokenizer_find(t, "<｜end▁of▁sentence｜>");
    return t;
}

dsv41_tokenizer *dsv41_tokenizer_load(const char *path) { return load(path, NULL); }

dsv41_tokenizer *dsv41_tokenizer_load_with_added(const char *path, const char *added_tokens_path) {
    if (!added_tokens_path) { set_error("tokenizer: no added-token table given"); return NULL; }
    return load(path, added_tokens_path);
}

void dsv41_tokenizer_free(dsv41_tokenizer *t) {
    if (!t) return;
    for (int32_t i = 0; i < t->n_split; i++) pcre2_code_free(t->split[i]);
    free(t->bytes.s);
    free(t->merges.s);
    free(t->trie);
    free(t->text);
    free(t->off);
    free(t->len);
    free(t->kind);
    if (t->derived) t->derived_free(t->derived);
    pthread_mutex_destroy(&t->derived_lock);
    free(t);
}

void *tokenizer_derived(const dsv41_tokenizer *t, void *(*make)(const dsv41_tokenizer *), void (*free_fn)(void *)) {
    dsv41_tokenizer *w = (dsv41_tokenizer *)t; /* the slot is the one thing a shared tokenizer changes, under its lock */
    pthread_mutex_lock(&w->derived_lock);
    if (!w->derived && (w->derived = make(t))) w->derived_free = free_fn;
    void *d = w->derived;
    pthread_mutex_unlock(&w->derived_lock);
    return d;
}

int32_t dsv41_tokenizer_n_vocab(const dsv41_tokenizer *t) { return t->n_vocab; }

int32_t dsv41_tokenizer_find(const dsv41_tokenizer *t, const char *spelling) {
    size_t n = strlen(spelling), mlen = 0;
    int32_t id = trie_longest(t, (const unsigned char *)spelling, n, &mlen);
    return id >= 0 && mlen == n ? id : spelling_lookup(t, spelling, n);
}

int tokenizer_is_special(const dsv41_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->kind[id] == TOK_SPECIAL;
}

int dsv41_token_is_special(const dsv41_tokenizer *t, int32_t id) { return tokenizer_is_special(t, id); }

int tokenizer_is_added(const dsv41_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && (t->kind[id] == TOK_ADDED || t->kind[id] == TOK_SPECIAL);
}

int32_t tokenizer_added_at(const dsv41_tokenizer *t, const char *p, size_t n, size_t *len) {
    return trie_longest(t, (const unsigned char *)p, n, len);
}

/* The special tokens that mark a reply's parts: the start and end of its reasoning and the DSML
 * tool-call marker. Reply text keeps them even when it leaves special tokens out, because its
 * readers split the reply on them (the server into reasoning, answer and tool calls; a person
 * reading the CLI sees where the thinking ends), so every caller shows the same text. */
static const char *const reply_marks[] = {"<think>", "</think>", "｜DSML｜"};

int dsv41_token_in_reply(const dsv41_tokenizer *t, int32_t id) {
    if (!tokenizer_is_special(t, id)) return 1;
    for (size_t i = 0; i < sizeof reply_marks / sizeof reply_marks[0]; i++)
        if (t->len[id] == strlen(reply_marks[i]) && !memcmp(t->text + t->off[id], reply_marks[i], t->len[id])) return 1;
    return 0;
}

int32_t dsv41_tokenizer_bos(const dsv41_tokenizer *t) { return t->bos; }
int32_t dsv41_tokenizer_eos(const dsv41_tokenizer *t) { return t->eos; }

int tokenizer_set_ends(dsv41_tokenizer *t, int32_t bos, int32_t eos) {
    if (bos < -1 || bos >= t->n_vocab || eos < -1 || eos >= t->n_vocab)
        return set_error("tokenizer: bos %d / eos %d outside the vocabulary of %d", bos, eos, t->n_vocab);
    t->bos = bos;
    t->eos = eos;
    return 0;
}

const char *dsv41_token_bytes(const dsv41_tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab || t->kind[id] == TOK_NONE) {
        set_error("token id %d is not in the vocabulary", id);
        return NULL;
    }
    *len = t->len[id];
    return t->text + t->off[id];
}

/* ---- encoding */

/* A candidate merge of symbols left and right into merged (right's id was rid when queued). */
typedef struct {
    int32_t rank, left, right, rid, merged;
} candidate;

/* The state of one dsv41_tokenize call: output, regex match data and BPE scratch. */
typedef struct {
    const dsv41_tokenizer *t;
    int32_t *ids;
    int64_t cap, n;
    pcre2_match_data *md;
    pcre2_match_context *mctx;  /* the match limit, sized to the text */
    candidate *heap;            /* [3 * scratch], owning the block the next three live in */
    int32_t *sym, *prev, *next; /* [scratch] a piece's symbols: id (-1 once merged away), links */
    size_t heap_n, scratch;
} encoder;

static void emit(encoder *e, int32_t id) {
    if (e->n < e->cap) e->ids[e->n] = id;
    e->n++;
}

static int before(const candidate *x, const candidate *y) {
    return x->rank < y->rank || (x->rank == y->rank && x->left < y->left);
}

static void heap_push(encoder *e, candidate c) {
    size_t i = e->heap_n++;
    while (i > 0 && before(&c, &e->heap[(i - 1) / 2])) {
        e->heap[i] = e->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->heap[i] = c;
}

static candidate heap_pop(encoder *e) {
    candidate top = e->heap[0], last = e->heap[--e->heap_n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= e->heap_n) break;
        if (c + 1 < e->heap_n && before(&e->heap[c + 1], &e->heap[c])) c++;
        if (!before(&e->heap[c], &last)) break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (e->heap_n) e->heap[i] = last;
    return top;
}

/* Queues the merge of symbols l and r if the pair has one. */
static void queue_pair(encoder *e, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return;
    const slot *m = table_find(&e->t->merges, pair_key(e->sym[l], e->sym[r]), NULL);
    if (m) heap_push(e, (candidate){m->a, l, r, e->sym[r], m->b});
}

/* Makes room for a piece of n bytes: symbols and links [n], heap [3n] (each merge queues at
 * most two candidates). The old contents are not kept. */
static int grow_scratch(encoder *e, size_t n) {
    if (n <= e->scratch) return 0;
    size_t cap = e->scratch ? e->scratch : 64;
    while (cap < n) cap *= 2;
    free(e->heap);
    e->scratch = 0;
    if (!(e->heap = malloc(cap * (3 * sizeof(candidate) + 3 * sizeof(int32_t))))) return set_error("out of memory");
    e->sym = (int32_t *)(e->heap + 3 * cap);
    e->prev = e->sym + cap;
    e->next = e->prev + cap;
    e->scratch = cap;
    return 0;
}

/* BPE over one piece: lowest-rank pair first, leftmost among equal ranks. */
static int bpe_piece(encoder *e, const unsigned char *p, size_t n) {
    if (n == 1) { emit(e, e->t->byte_id[p[0]]); return 0; }
    if (grow_scratch(e, n)) return -1;
    for (size_t i = 0; i < n; i++) {
        e->sym[i] = e->t->byte_id[p[i]];
        e->prev[i] = (int32_t)i - 1;
        e->next[i] = i + 1 < n ? (int32_t)i + 1 : -1;
    }
    e->heap_n = 0;
    for (size_t i = 0; i + 1 < n; i++) queue_pair(e, (int32_t)i, (int32_t)i + 1);
    while (e->heap_n) {
        candidate c = heap_pop(e);
        if (e->sym[c.left] < 0 || e->next[c.left] != c.right || e->sym[c.right] != c.rid) continue; /* stale */
        e->sym[c.left] = c.merged;
        e->sym[c.right] = -1;
        e->next[c.left] = e->next[c.right];
        if (e->next[c.left] >= 0) e->prev[e->next[c.left]] = c.left;
        queue_pair(e, e->prev[c.left], c.left);
        queue_pair(e, c.left, e->next[c.left]);
    }
    for (int32_t i = 0; i >= 0; i = e->next[i]) emit(e, e->sym[i]);
    return 0;
}

/* Runs Split step `step` over s[0..n): matches and the stretches between them are each passed
 * on to the next step; after the last step each piece is BPE-encoded. */
static int split_piece(encoder *e, const char *s, size_t n, int32_t step) {
    if (n == 0) return 0;
    if (step == e->t->n_split) return bpe_piece(e, (const unsigned char *)s, n);
    const pcre2_code *re = e->t->split[step];
    size_t done = 0, at = 0;
    while (at < n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, at, PCRE2_NO_UTF_CHECK, e->md, e->mctx);
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) {
            PCRE2_UCHAR msg[160];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return set_error("tokenize: regex failed: %s", (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        size_t m0 = ov[0], m1 = ov[1];
        if (m1 == m0) { /* an empty match makes no piece: step one character on */
            size_t bad;
            if (m0 >= n) break;
            at = m0 + (size_t)utf8_char((const unsigned char *)s + m0, n - m0, &bad);
            continue;
        }
        if (split_piece(e, s + done, m0 - done, step + 1) || split_piece(e, s + m0, m1 - m0, step + 1)) return -1;
        done = at = m1;
    }
    return split_piece(e, s + done, n - done, step + 1);
}

/* Special parsing: added-token spellings (leftmost, longest) become their ids; the text
 * between them is split and BPE-encoded. */
static int split_added(encoder *e, const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t done = 0;
    for (size_t i = 0; i < n; i++) {
        size_t mlen = 0;
        int32_t id = trie_longest(e->t, p + i, n - i, &mlen);
        if (id < 0) continue;
        if (split_piece(e, s + done, i - done, 0)) return -1;
        emit(e, id);
        done = i + mlen;
        i = done - 1;
    }
    return split_piece(e, s + done, n - done, 0);
}

int64_t dsv41_tokenize(const dsv41_tokenizer *t, const char *text, size_t len, int special, int32_t *ids, int64_t cap) {
    if (!t || (!text && len) || cap < 0 || (cap > 0 && !ids)) return set_error("tokenize: bad arguments");
    if (check_utf8((const unsigned char *)text, len)) return -1;
    encoder e = {.t = t, .ids = ids, .cap = cap};
    e.md = pcre2_match_data_create(1, NULL);
    e.mctx = pcre2_match_context_create(NULL);
    if (!e.md || !e.mctx) {
        pcre2_match_data_free(e.md);
        pcre2_match_context_free(e.mctx);
        return set_error("out of memory");
    }
    /* A whitespace run is matched by backtracking over it (\s*[\r\n]+ before \s+(?!\S)), a few
     * steps per byte: PCRE2's fixed default of 10 million steps refuses a valid run of a few MB,
     * so the limit grows with the text and still stops a pattern that would never finish. */
    uint64_t limit = 10000000 + 64 * (uint64_t)len;
    pcre2_set_match_limit(e.mctx, limit > UINT32_MAX ? UINT32_MAX : (uint32_t)limit);
    int rc = special ? split_added(&e, text, len) : split_piece(&e, text, len, 0);
    pcre2_match_data_free(e.md);
    pcre2_match_context_free(e.mctx);
    free(e.heap);
    return rc ? -1 : e.n;
}

/* ---- streaming decode */

static const char replacement_char[3] = {(char)0xEF, (char)0xBF, (char)0xBD}; /* U+FFFD */

/* Decodes p[0..n) into out: valid characters are copied, each maximal invalid subpart becomes
 * U+FFFD, and an incomplete tail is left for the caller. Returns the bytes consumed. */
static size_t decode_run(const unsigned char *p, size_t n, char *out, size_t *o) {
    size_t i = 0, bad;
    while (i < n) {
        int l = utf8_char(p + i, n - i, &bad);
        if (l) { memcpy(out + *o, p + i, (size_t)l); *o += (size_t)l; i += (size_t)l; continue; }
        if (!bad) break;
        memcpy(out + *o, replacement_char, 3);
        *o += 3;
        i += bad;
    }
    return i;
}

int64_t dsv41_detokenize(const dsv41_tokenizer *t, dsv41_utf8_stream *st, int32_t id, char *out, int64_t cap) {
    size_t n, o = 0;
    const unsigned char *b = (const unsigned char *)dsv41_token_bytes(t, id, &n);
    if (!b) return -1;
    if (st->n < 0 || st->n > 3) return set_error("detokenize: corrupt stream state");
    if (cap < 0 || (uint64_t)cap < 3 * (n + (size_t)st->n)) return set_error("detokenize: output buffer too small");
    size_t from = 0;
    if (st->n) { /* finish the held-back character with the first bytes of this token */
        unsigned char head[8];
        size_t k = (size_t)st->n, take = n < 4 - k ? n : 4 - k;
        memcpy(head, st->pending, k);
        memcpy(head + k, b, take);
        size_t used = decode_run(head, k + take, out, &o);
        if (used == 0) { /* still incomplete: the whole token is held back too */
            memcpy(st->pending + k, b, n);
            st->n += (int32_t)n;
            return 0;
        }
        from = used - k; /* the pending bytes were a valid prefix, so used > k */
    }
    size_t used = from + decode_run(b + from, n - from, out, &o);
    memcpy(st->pending, b + used, n - used);
    st->n = (int32_t)(n - used);
    return (int64_t)o;
}
