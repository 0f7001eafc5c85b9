/* grammar.c - the GBNF-like grammar text compiled into grammar.h's byte-level rules.
 *
 * The form (docs/STRUCTURED_OUTPUT.md) is llama.cpp's: `name ::= alternatives`, literals,
 * classes, groups, `|`, `* + ? {m} {m,} {m,n}`, comments, and token terminals `<[id]>` and
 * `<spelling>`. A rule runs until the next `name ::=`, so rules may span lines.
 *
 * Everything is lowered to bytes here so that matching (constraint.c) never decodes UTF-8: a
 * class over code points becomes one byte set for its ASCII part plus one alternative per run of
 * UTF-8 byte ranges, split so that every byte position is a plain range. A repetition becomes
 * rules: x* is R ::= x R | "", x{m,n} is m copies then a chain of n - m optional ones. An
 * added token's spelling inside a literal matches the token or its bytes, so a grammar written
 * from the chat format's text (the DSML marker is an added token) accepts what the model emits.
 *
 * Left recursion is refused when the grammar is compiled (a rule that can reach itself before
 * consuming a byte would make matching loop), as is a repetition of something that can be
 * empty. Sizes are bounded (the limits below) so that no text can make compiling or matching
 * unbounded. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "grammar.h"
#include "tokenizer.h"

enum {
    MAX_TEXT = 4 << 20,       /* bytes of grammar text */
    MAX_RULES = 200000,       /* rules, the generated ones included */
    MAX_ELEMENTS = 4000000,   /* elements of all alternatives */
    MAX_REPEAT = 10000,       /* the m and n of {m,n} */
    MAX_NEST = 200,           /* nested groups */
};

typedef struct {
    gram_el *v; /* [n] */
    int32_t n, cap;
} elvec;

typedef struct {
    char *name;      /* NUL-terminated; generated rules are named after the rule they serve */
    elvec *alts;     /* [n_alts] */
    int32_t n_alts, cap_alts;
    int defined;
    size_t used_at;  /* the text offset of the first reference, for an undefined rule */
} prule;

typedef struct {
    const dsv41_tokenizer *tok;
    const char *s;   /* the text [n], at offset i */
    size_t n, i;
    prule *rules;    /* [n_rules] */
    int32_t n_rules, cap_rules;
    int32_t *named;  /* [cap_named] open addressing over the rules a text names: a rule or -1 */
    uint32_t cap_named, n_named;
    uint64_t (*sets)[4]; /* [n_sets] */
    int32_t n_sets, cap_sets;
    int64_t n_elements;
    int depth;       /* groups open */
    int failed;      /* an error is set */
} parser;

/* ---- errors and growth */

static void fail_at(parser *p, size_t at, const char *what, const char *detail) {
    if (p->failed) return;
    int line = 1, col = 1;
    for (size_t i = 0; i < at && i < p->n; i++) {
        if (p->s[i] == '\n') line++, col = 1;
        else if (((unsigned char)p->s[i] & 0xC0) != 0x80) col++;
    }
    set_error("grammar: %d:%d: %s%s", line, col, what, detail ? detail : "");
    p->failed = 1;
}

static void fail_oom(parser *p) {
    if (!p->failed) set_error("out of memory compiling a grammar");
    p->failed = 1;
}

/* Grows *v (of *cap items of size sz) to hold need; 0 or -1. */
static int grow(void **v, int32_t *cap, int32_t need, size_t sz) {
    if (need <= *cap) return 0;
    int32_t c = *cap ? *cap : 4;
    while (c < need) c = c > INT32_MAX / 2 ? need : c * 2;
    void *nv = realloc(*v, (size_t)c * sz);
    if (!nv) return -1;
    *v = nv;
    *cap = c;
    return 0;
}

static void el_push(parser *p, elvec *e, int32_t kind, int32_t arg) {
    if (p->failed) return;
    if (++p->n_elements > MAX_ELEMENTS) { fail_at(p, p->i, "the grammar has more than 4000000 elements", NULL); return; }
    if (grow((void **)&e->v, &e->cap, e->n + 1, sizeof *e->v)) { fail_oom(p); return; }
    e->v[e->n++] = (gram_el){kind, arg};
}

/* A new rule named name (len bytes) plus suffix; its index, or -1. */
static int32_t rule_add(parser *p, const char *name, size_t len, const char *suffix) {
    if (p->n_rules >= MAX_RULES) { fail_at(p, p->i, "the grammar has more than 200000 rules", NULL); return -1; }
    if (grow((void **)&p->rules, &p->cap_rules, p->n_rules + 1, sizeof *p->rules)) { fail_oom(p); return -1; }
    size_t sl = strlen(suffix);
    char *nm = malloc(len + sl + 1);
    if (!nm) { fail_oom(p); return -1; }
    memcpy(nm, name, len);
    memcpy(nm + len, suffix, sl + 1);
    p->rules[p->n_rules] = (prule){.name = nm};
    return p->n_rules++;
}

static uint32_t name_hash(const char *name, size_t len) {
    uint32_t h = 2166136261u; /* FNV-1a */
    for (size_t i = 0; i < len; i++) h = (h ^ (unsigned char)name[i]) * 16777619u;
    return h;
}

/* The rule named name [len], made (undefined) at its first mention. */
static int32_t rule_find(parser *p, const char *name, size_t len) {
    if (p->n_named * 2 >= p->cap_named) { /* grow the table and place every named rule again */
        uint32_t cap = p->cap_named ? p->cap_named * 2 : 256;
        int32_t *t = malloc((size_t)cap * sizeof *t);
        if (!t) { fail_oom(p); return -1; }
        memset(t, 0xFF, (size_t)cap * sizeof *t);
        for (uint32_t k = 0; k < p->cap_named; k++) {
            int32_t r = p->named[k];
            if (r < 0) continue;
            uint32_t h = name_hash(p->rules[r].name, strlen(p->rules[r].name)) & (cap - 1);
            while (t[h] >= 0) h = (h + 1) & (cap - 1);
            t[h] = r;
        }
        free(p->named);
        p->named = t, p->cap_named = cap;
    }
    uint32_t m = p->cap_named - 1, h = name_hash(name, len) & m;
    for (; p->named[h] >= 0; h = (h + 1) & m) {
        const char *nm = p->rules[p->named[h]].name;
        if (!strncmp(nm, name, len) && nm[len] == 0) return p->named[h];
    }
    int32_t r = rule_add(p, name, len, "");
    if (r < 0) return -1;
    p->rules[r].used_at = p->i;
    p->named[h] = r;
    p->n_named++;
    return r;
}

/* Moves alternative e into rule r (e is emptied). */
static void alt_add(parser *p, int32_t r, elvec *e) {
    prule *ru = &p->rules[r];
    if (p->failed || grow((void **)&ru->alts, &ru->cap_alts, ru->n_alts + 1, sizeof *ru->alts)) {
        if (!p->failed) fail_oom(p);
        free(e->v);
    } else ru->alts[ru->n_alts++] = *e;
    *e = (elvec){0};
}

/* A generated rule serving rule `owner`. */
static int32_t rule_child(parser *p, int32_t owner) {
    const char *nm = owner >= 0 ? p->rules[owner].name : "root";
    char suffix[24];
    snprintf(suffix, sizeof suffix, ".%d", p->n_rules); /* '.' is no name character: never a user rule */
    int32_t r = rule_add(p, nm, strlen(nm), suffix);
    if (r >= 0) p->rules[r].defined = 1;
    return r;
}

/* The index of byte set m (deduplicated), or -1. */
static int32_t set_add(parser *p, const uint64_t m[4]) {
    for (int32_t k = p->n_sets - 1; k >= 0 && k >= p->n_sets - 64; k--)
        if (!memcmp(p->sets[k], m, sizeof p->sets[k])) return k;
    if (grow((void **)&p->sets, &p->cap_sets, p->n_sets + 1, sizeof *p->sets)) { fail_oom(p); return -1; }
    memcpy(p->sets[p->n_sets], m, sizeof p->sets[0]);
    return p->n_sets++;
}

static int32_t set_range(parser *p, unsigned lo, unsigned hi) {
    uint64_t m[4] = {0};
    for (unsigned b = lo; b <= hi; b++) m[b >> 6] |= 1ULL << (b & 63);
    return set_add(p, m);
}

/* ---- text */

static int at_end(parser *p) { return p->i >= p->n; }
static char peek(parser *p) { return p->i < p->n ? p->s[p->i] : 0; }

static void skip_space(parser *p) {
    while (!at_end(p)) {
        char c = peek(p);
        if (c == '#') while (!at_end(p) && peek(p) != '\n') p->i++;
        else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') p->i++;
        else break;
    }
}

static int is_name_char(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'; }

static size_t name_len(parser *p, size_t at) {
    size_t k = at;
    while (k < p->n && is_name_char(p->s[k])) k++;
    return k - at;
}

/* 1 when a rule definition `name ::=` starts at the cursor. */
static int at_definition(parser *p) {
    size_t k = p->i + name_len(p, p->i);
    if (k == p->i) return 0;
    while (k < p->n && (p->s[k] == ' ' || p->s[k] == '\t')) k++;
    return k + 3 <= p->n && !memcmp(p->s + k, "::=", 3);
}

static int hex_val(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* The next character of a literal or class (escapes decoded) as a code point, or -1. */
static int32_t read_char(parser *p) {
    size_t at = p->i;
    unsigned char c = (unsigned char)p->s[p->i++];
    if (c == '\\') {
        if (at_end(p)) { fail_at(p, at, "an escape at the end of the text", NULL); return -1; }
        char e = p->s[p->i++];
        int digits = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (digits) {
            uint32_t v = 0;
            for (int k = 0; k < digits; k++) {
                int h = p->i < p->n ? hex_val(p->s[p->i]) : -1;
                if (h < 0) { fail_at(p, at, "a \\x, \\u or \\U escape needs 2, 4 or 8 hex digits", NULL); return -1; }
                v = v << 4 | (uint32_t)h;
                p->i++;
            }
            if (v > 0x10FFFF || (v >= 0xD800 && v <= 0xDFFF)) { fail_at(p, at, "an escape names no character", NULL); return -1; }
            return (int32_t)v;
        }
        switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '0': return 0;
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': case '.': return e;
        default: fail_at(p, at, "unknown escape", NULL); return -1;
        }
    }
    if (c < 0x80) return c;
    int len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : 2; /* the text was checked to be UTF-8 */
    uint32_t v = c & (0x3F >> (len - 1));
    for (int k = 1; k < len; k++) v = v << 6 | ((unsigned char)p->s[p->i++] & 0x3F);
    return (int32_t)v;
}

static int utf8_put(uint32_t c, unsigned char *out) {
    if (c < 0x80) { out[0] = (unsigned char)c; return 1; }
    if (c < 0x800) { out[0] = (unsigned char)(0xC0 | c >> 6); out[1] = (unsigned char)(0x80 | (c & 0x3F)); return 2; }
    if (c < 0x10000) {
        out[0] = (unsigned char)(0xE0 | c >> 12);
        out[1] = (unsigned char)(0x80 | (c >> 6 & 0x3F));
        out[2] = (unsigned char)(0x80 | (c & 0x3F));
        return 3;
    }
    out[0] = (unsigned char)(0xF0 | c >> 18);
    out[1] = (unsigned char)(0x80 | (c >> 12 & 0x3F));
    out[2] = (unsigned char)(0x80 | (c >> 6 & 0x3F));
    out[3] = (unsigned char)(0x80 | (c & 0x3F));
    return 4;
}

/* ---- elements */

/* A literal's bytes into item; an added token's spelling inside it matches the token or its bytes. */
static void parse_literal(parser *p, int32_t owner, elvec *item) {
    size_t at = p->i++;
    unsigned char *buf = NULL;
    int32_t n = 0, cap = 0;
    while (!p->failed && !at_end(p) && peek(p) != '"') {
        int32_t c = read_char(p);
        if (c < 0) break;
        if (grow((void **)&buf, &cap, n + 4, 1)) { fail_oom(p); break; }
        n += utf8_put((uint32_t)c, buf + n);
    }
    if (!p->failed && at_end(p)) fail_at(p, at, "a literal is not closed", NULL);
    p->i++;
    for (int32_t k = 0; k < n && !p->failed;) {
        size_t len = 0;
        int32_t id = tokenizer_added_at(p->tok, (const char *)buf + k, (size_t)(n - k), &len);
        if (id < 0) { el_push(p, item, G_BYTES, set_range(p, buf[k], buf[k])); k++; continue; }
        int32_t r = rule_child(p, owner);
        if (r < 0) break;
        elvec tok = {0}, bytes = {0};
        el_push(p, &tok, G_TOKEN, id);
        for (size_t j = 0; j < len; j++) el_push(p, &bytes, G_BYTES, set_range(p, buf[k + j], buf[k + j]));
        alt_add(p, r, &tok);
        alt_add(p, r, &bytes);
        el_push(p, item, G_RULE, r);
        k += (int32_t)len;
    }
    free(buf);
}

typedef struct {
    uint32_t lo, hi;
} cp_range;

static int by_lo(const void *a, const void *b) {
    const cp_range *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

/* UTF-8 sequences of the code points [lo, hi] (no surrogates) as alternatives of rule r: split
 * until the two ends differ in whole trailing 6-bit groups, where each byte is a plain range. */
static void utf8_ranges(parser *p, int32_t r, uint32_t lo, uint32_t hi) {
    static const uint32_t len_max[] = {0x7F, 0x7FF, 0xFFFF, 0x10FFFF};
    for (int k = 0; k < 3; k++)
        if (lo <= len_max[k] && hi > len_max[k]) {
            utf8_ranges(p, r, lo, len_max[k]);
            utf8_ranges(p, r, len_max[k] + 1, hi);
            return;
        }
    unsigned char a[4], b[4];
    int n = utf8_put(lo, a);
    utf8_put(hi, b);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if (lo & m) { utf8_ranges(p, r, lo, lo | m); utf8_ranges(p, r, (lo | m) + 1, hi); return; }
            if ((hi & m) != m) { utf8_ranges(p, r, lo, (hi & ~m) - 1); utf8_ranges(p, r, hi & ~m, hi); return; }
        }
    }
    elvec seq = {0};
    for (int i = 0; i < n; i++) el_push(p, &seq, G_BYTES, set_range(p, a[i], b[i]));
    alt_add(p, r, &seq);
}

/* Code point ranges [n] (sorted, merged, no surrogates) as one element of item: a byte set when
 * all are ASCII, else a rule of their byte sequences. */
static void class_element(parser *p, int32_t owner, const cp_range *rg, int32_t n, elvec *item) {
    uint64_t ascii[4] = {0};
    int wide = 0;
    for (int32_t k = 0; k < n; k++) {
        for (uint32_t c = rg[k].lo; c <= rg[k].hi && c < 0x80; c++) ascii[c >> 6] |= 1ULL << (c & 63);
        wide |= rg[k].hi >= 0x80;
    }
    if (!wide) { el_push(p, item, G_BYTES, set_add(p, ascii)); return; }
    int32_t r = rule_child(p, owner);
    if (r < 0) return;
    if (ascii[0] | ascii[1]) {
        elvec one = {0};
        el_push(p, &one, G_BYTES, set_add(p, ascii));
        alt_add(p, r, &one);
    }
    for (int32_t k = 0; k < n; k++)
        if (rg[k].hi >= 0x80) utf8_ranges(p, r, rg[k].lo < 0x80 ? 0x80 : rg[k].lo, rg[k].hi);
    el_push(p, item, G_RULE, r);
}

/* Sorts and merges rg [*n], complements it within Unicode when negate, and takes out the
 * surrogates. rg has room for *n + 2. */
static void class_normalize(cp_range *rg, int32_t *n, int negate) {
    qsort(rg, (size_t)*n, sizeof *rg, by_lo);
    int32_t m = 0;
    for (int32_t k = 0; k < *n; k++)
        if (m && rg[k].lo <= rg[m - 1].hi + 1) { if (rg[k].hi > rg[m - 1].hi) rg[m - 1].hi = rg[k].hi; }
        else rg[m++] = rg[k];
    if (negate) {
        uint32_t next = 0;
        int32_t c = 0;
        for (int32_t k = 0; k < m; k++) {
            cp_range here = rg[k];
            if (here.lo > next) rg[c++] = (cp_range){next, here.lo - 1};
            next = here.hi + 1;
        }
        if (next <= 0x10FFFF) rg[c++] = (cp_range){next, 0x10FFFF};
        m = c;
    }
    int32_t c = 0;
    cp_range out[2];
    for (int32_t k = 0; k < m; k++) { /* cut [D800, DFFF] out; one range may split in two */
        int32_t o = 0;
        if (rg[k].lo < 0xD800) out[o++] = (cp_range){rg[k].lo, rg[k].hi < 0xD800 ? rg[k].hi : 0xD7FF};
        if (rg[k].hi > 0xDFFF) out[o++] = (cp_range){rg[k].lo > 0xDFFF ? rg[k].lo : 0xE000, rg[k].hi};
        if (o == 2) { memmove(rg + k + 2, rg + k + 1, (size_t)(m - k - 1) * sizeof *rg); m++; }
        for (int32_t j = 0; j < o; j++) rg[c++] = out[j];
        k += o == 2;
    }
    *n = c;
}

static void parse_class(parser *p, int32_t owner, elvec *item) {
    size_t at = p->i++;
    int negate = peek(p) == '^';
    if (negate) p->i++;
    cp_range *rg = NULL;
    int32_t n = 0, cap = 0;
    while (!p->failed && !at_end(p) && peek(p) != ']') {
        int32_t lo = read_char(p), hi = lo;
        if (lo >= 0 && peek(p) == '-' && p->i + 1 < p->n && p->s[p->i + 1] != ']') {
            p->i++;
            hi = read_char(p);
            if (hi >= 0 && hi < lo) fail_at(p, at, "a class range runs backwards", NULL);
        }
        if (p->failed) break;
        if (grow((void **)&rg, &cap, n + 3, sizeof *rg)) { fail_oom(p); break; }
        rg[n++] = (cp_range){(uint32_t)lo, (uint32_t)hi};
    }
    if (!p->failed && at_end(p)) fail_at(p, at, "a class is not closed", NULL);
    p->i++;
    if (!p->failed && grow((void **)&rg, &cap, n + 3, sizeof *rg)) fail_oom(p);
    if (!p->failed) {
        class_normalize(rg, &n, negate);
        if (n == 0) fail_at(p, at, "the class holds no character", NULL);
        else class_element(p, owner, rg, n, item);
    }
    free(rg);
}

static void parse_alternatives(parser *p, int32_t r, int in_group);

/* <[id]> or <spelling>: the spelling with its brackets (<think>) or, failing that, within them
 * (<｜DSML｜>). An added token is matched as that token; an ordinary one as its text. */
static void parse_token(parser *p, elvec *item) {
    size_t at = p->i;
    const char *end = memchr(p->s + p->i, '>', p->n - p->i);
    if (!end) { fail_at(p, at, "a token terminal is not closed with '>'", NULL); return; }
    size_t len = (size_t)(end - (p->s + at)) + 1;
    int32_t id = -1;
    if (len > 3 && p->s[at + 1] == '[' && p->s[at + len - 2] == ']') {
        char *e;
        long v = strtol(p->s + at + 2, &e, 10);
        if (e != p->s + at + len - 2 || v < 0 || v >= dsv41_tokenizer_n_vocab(p->tok)) {
            fail_at(p, at, "a token id outside the vocabulary", NULL);
            return;
        }
        id = (int32_t)v;
    } else {
        char *sp = malloc(len + 1);
        if (!sp) { fail_oom(p); return; }
        memcpy(sp, p->s + at, len);
        sp[len] = 0;
        id = dsv41_tokenizer_find(p->tok, sp);
        if (id < 0) { sp[len - 1] = 0; id = dsv41_tokenizer_find(p->tok, sp + 1); }
        free(sp);
        if (id < 0) { fail_at(p, at, "no token is spelled ", "like this terminal"); return; }
    }
    p->i = at + len;
    if (tokenizer_is_added(p->tok, id)) {
        el_push(p, item, G_TOKEN, id);
        return;
    }
    /* an ordinary token stands for its text (which other splits of the same bytes match too) */
    size_t n;
    const char *bytes = dsv41_token_bytes(p->tok, id, &n);
    if (!bytes || n == 0) { fail_at(p, at, "the token terminal names a token without text", NULL); return; }
    for (size_t k = 0; k < n; k++) el_push(p, item, G_BYTES, set_range(p, (unsigned char)bytes[k], (unsigned char)bytes[k]));
}

/* x{m,n} of the single element x appended to seq (n < 0: no upper bound). */
static void repeat(parser *p, int32_t owner, gram_el x, int32_t m, int32_t n, elvec *seq) {
    for (int32_t k = 0; k < m; k++) el_push(p, seq, x.kind, x.arg);
    if (n < 0) { /* R ::= x R | "" */
        int32_t r = rule_child(p, owner);
        if (r < 0) return;
        elvec a = {0}, b = {0};
        el_push(p, &a, x.kind, x.arg);
        el_push(p, &a, G_RULE, r);
        alt_add(p, r, &a);
        alt_add(p, r, &b);
        el_push(p, seq, G_RULE, r);
        return;
    }
    int32_t inner = -1; /* O_k ::= x O_(k-1) | "" */
    for (int32_t k = 0; k < n - m && !p->failed; k++) {
        int32_t r = rule_child(p, owner);
        if (r < 0) return;
        elvec a = {0}, b = {0};
        el_push(p, &a, x.kind, x.arg);
        if (inner >= 0) el_push(p, &a, G_RULE, inner);
        alt_add(p, r, &a);
        alt_add(p, r, &b);
        inner = r;
    }
    if (inner >= 0) el_push(p, seq, G_RULE, inner);
}

/* A number of {m,n}; -1 after an error. */
static int32_t read_count(parser *p, size_t at) {
    if (peek(p) < '0' || peek(p) > '9') { fail_at(p, at, "a repetition wants {m}, {m,} or {m,n}", NULL); return -1; }
    int64_t v = 0;
    while (peek(p) >= '0' && peek(p) <= '9' && v <= MAX_REPEAT) v = v * 10 + (p->s[p->i++] - '0');
    if (v > MAX_REPEAT) { fail_at(p, at, "a repetition count above 10000", NULL); return -1; }
    return (int32_t)v;
}

/* One element and its repetition operators, appended to seq. */
static void parse_element(parser *p, int32_t owner, elvec *seq) {
    size_t at = p->i;
    elvec item = {0};
    char c = peek(p);
    if (c == '"') parse_literal(p, owner, &item);
    else if (c == '[') parse_class(p, owner, &item);
    else if (c == '.') {
        p->i++;
        cp_range all[4] = {{0, 0x10FFFF}};
        int32_t n = 1;
        class_normalize(all, &n, 0);
        class_element(p, owner, all, n, &item);
    } else if (c == '<') parse_token(p, &item);
    else if (c == '(') {
        if (++p->depth > MAX_NEST) { fail_at(p, at, "groups nest deeper than 200", NULL); return; }
        p->i++;
        int32_t r = rule_child(p, owner);
        if (r >= 0) parse_alternatives(p, r, 1);
        skip_space(p);
        if (!p->failed && peek(p) != ')') fail_at(p, at, "a group is not closed with ')'", NULL);
        p->i++;
        p->depth--;
        if (!p->failed) {
            prule *g = &p->rules[r];
            if (g->n_alts == 1 && g->alts[0].n == 1) el_push(p, &item, g->alts[0].v[0].kind, g->alts[0].v[0].arg);
            else el_push(p, &item, G_RULE, r);
        }
    } else if (is_name_char(c)) {
        size_t len = name_len(p, p->i);
        int32_t r = rule_find(p, p->s + p->i, len);
        p->i += len;
        if (r >= 0) el_push(p, &item, G_RULE, r);
    } else {
        fail_at(p, at, "unexpected character", NULL);
    }
    while (!p->failed && (peek(p) == '*' || peek(p) == '+' || peek(p) == '?' || peek(p) == '{')) {
        size_t op_at = p->i;
        char op = p->s[p->i++];
        int32_t m = op == '+', n = op == '?' ? 1 : -1;
        if (op == '{') {
            m = read_count(p, op_at);
            n = m;
            if (!p->failed && peek(p) == ',') {
                p->i++;
                n = peek(p) == '}' ? -1 : read_count(p, op_at);
                if (!p->failed && n >= 0 && n < m) fail_at(p, op_at, "a repetition {m,n} with n below m", NULL);
            }
            if (!p->failed && peek(p) != '}') fail_at(p, op_at, "a repetition wants {m}, {m,} or {m,n}", NULL);
            p->i++;
        }
        if (p->failed) break;
        gram_el x = item.n == 1 ? item.v[0] : (gram_el){G_RULE, -1};
        if (item.n != 1) { /* a literal of several bytes repeats as one rule */
            int32_t r = rule_child(p, owner);
            if (r < 0) break;
            alt_add(p, r, &item);
            x.arg = r;
        }
        elvec out = {0};
        repeat(p, owner, x, m, n, &out);
        free(item.v);
        item = out;
    }
    for (int32_t k = 0; k < item.n; k++) el_push(p, seq, item.v[k].kind, item.v[k].arg);
    p->n_elements -= item.n; /* counted once, when made */
    free(item.v);
}

static void parse_alternatives(parser *p, int32_t r, int in_group) {
    for (;;) {
        elvec seq = {0};
        for (;;) {
            skip_space(p);
            char c = peek(p);
            if (p->failed || at_end(p) || c == '|' || c == ')' || (!in_group && at_definition(p))) break;
            parse_element(p, r, &seq);
        }
        alt_add(p, r, &seq);
        if (p->failed || peek(p) != '|') return;
        p->i++;
    }
}

static void parse_grammar(parser *p) {
    for (skip_space(p); !p->failed && !at_end(p); skip_space(p)) {
        size_t at = p->i, len = name_len(p, p->i);
        if (!at_definition(p)) { fail_at(p, at, "expected a rule: name ::= ...", NULL); return; }
        int32_t r = rule_find(p, p->s + at, len);
        if (r < 0) return;
        if (p->rules[r].defined) { fail_at(p, at, "a rule is defined twice: ", p->rules[r].name); return; }
        p->rules[r].defined = 1;
        for (p->i = at + len; peek(p) == ' ' || peek(p) == '\t';) p->i++;
        p->i += 3; /* "::=" */
        parse_alternatives(p, r, 0);
    }
}

/* ---- checks on the flat form */

/* Refuses a rule that reaches itself before consuming a byte: a depth-first walk over the
 * edges A -> B where B stands in an alternative of A after nullable elements only. */
static int check_left_recursion(dsv41_grammar *g, const prule *rules) {
    int32_t R = g->n_rule;
    uint8_t *nullable = calloc((size_t)R, 1), *color = calloc((size_t)R, 1);
    int32_t *first = malloc((size_t)(R + 1) * sizeof *first), *edge = malloc((size_t)(g->n_el + 1) * sizeof *edge);
    int32_t *stack = malloc((size_t)R * 2 * sizeof *stack), n_edge = 0;
    int rc = 0;
    if (!nullable || !color || !first || !edge || !stack) { rc = set_error("out of memory compiling a grammar"); goto out; }
    for (int changed = 1; changed;) {
        changed = 0;
        for (int32_t r = 0; r < R; r++)
            for (int32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1] && !nullable[r]; a++) {
                const gram_el *e = g->el + g->alt[a];
                while (e->kind == G_RULE && nullable[e->arg]) e++;
                if (e->kind == G_END) nullable[r] = 1, changed = 1;
            }
    }
    for (int32_t r = 0; r < R; r++) { /* the edges of r: rules at a left position of its alternatives */
        first[r] = n_edge;
        for (int32_t a = g->rule_alt[r]; a < g->rule_alt[r + 1]; a++)
            for (const gram_el *e = g->el + g->alt[a]; e->kind == G_RULE; e++) {
                edge[n_edge++] = e->arg;
                if (!nullable[e->arg]) break;
            }
    }
    first[R] = n_edge;
    for (int32_t s = 0; s < R && !rc; s++) { /* stack: (rule, its next edge) pairs; color 1 on it, 2 done */
        if (color[s]) continue;
        int32_t top = 0;
        stack[0] = s, stack[1] = first[s], color[s] = 1;
        while (top >= 0) {
            int32_t r = stack[2 * top];
            if (stack[2 * top + 1] == first[r + 1]) { color[r] = 2; top--; continue; }
            int32_t c = edge[stack[2 * top + 1]++];
            if (color[c] == 1) {
                rc = set_error("grammar: rule '%s' is left-recursive: it can reach itself before matching a byte "
                               "(a repetition of something that can be empty does too)", rules[c].name);
                break;
            }
            if (color[c] == 0) { color[c] = 1; top++; stack[2 * top] = c, stack[2 * top + 1] = first[c]; }
        }
    }
out:
    free(nullable);
    free(color);
    free(first);
    free(edge);
    free(stack);
    return rc;
}

/* ---- the public calls */

static void parser_free(parser *p) {
    for (int32_t r = 0; r < p->n_rules; r++) {
        for (int32_t a = 0; a < p->rules[r].n_alts; a++) free(p->rules[r].alts[a].v);
        free(p->rules[r].alts);
        free(p->rules[r].name);
    }
    free(p->rules);
    free(p->named);
    free(p->sets);
}

/* The parsed rules as the flat arrays of g (sets handed over). */
static int flatten(parser *p, dsv41_grammar *g) {
    int64_t n_el = 0, n_alt = 0;
    for (int32_t r = 0; r < p->n_rules; r++) {
        n_alt += p->rules[r].n_alts;
        for (int32_t a = 0; a < p->rules[r].n_alts; a++) n_el += p->rules[r].alts[a].n + 1;
    }
    g->el = malloc((size_t)(n_el + 1) * sizeof *g->el);
    g->alt = malloc((size_t)(n_alt + 1) * sizeof *g->alt);
    g->rule_alt = malloc((size_t)(p->n_rules + 1) * sizeof *g->rule_alt);
    if (!g->el || !g->alt || !g->rule_alt) return set_error("out of memory compiling a grammar");
    int32_t e = 0, a = 0;
    for (int32_t r = 0; r < p->n_rules; r++) {
        g->rule_alt[r] = a;
        for (int32_t k = 0; k < p->rules[r].n_alts; k++) {
            g->alt[a++] = e;
            if (p->rules[r].alts[k].n) memcpy(g->el + e, p->rules[r].alts[k].v, (size_t)p->rules[r].alts[k].n * sizeof *g->el);
            e += p->rules[r].alts[k].n;
            g->el[e++] = (gram_el){G_END, 0};
        }
    }
    g->rule_alt[p->n_rules] = a;
    g->n_el = e, g->n_alt = a, g->n_rule = p->n_rules;
    g->sets = p->sets, g->n_set = p->n_sets;
    p->sets = NULL;
    /* byte classes: bytes in exactly the same sets act alike everywhere (refined set by set) */
    uint8_t next[256];
    int32_t n_class = 1;
    memset(g->byte_class, 0, sizeof g->byte_class);
    for (int32_t k = 0; k < g->n_set; k++) {
        int16_t map[256][2];
        memset(map, 0xFF, sizeof map);
        int32_t n = 0;
        for (int b = 0; b < 256; b++) {
            int in = grammar_set_has(g, k, (uint8_t)b);
            int16_t *m = &map[g->byte_class[b]][in];
            if (*m < 0) *m = (int16_t)n++;
            next[b] = (uint8_t)*m;
        }
        memcpy(g->byte_class, next, sizeof next);
        n_class = n;
    }
    g->n_class = n_class;
    return 0;
}

void dsv41_grammar_free(dsv41_grammar *g) {
    if (!g) return;
    free(g->el);
    free(g->alt);
    free(g->rule_alt);
    free(g->sets);
    free(g);
}

dsv41_grammar *dsv41_grammar_new(const dsv41_tokenizer *t, const char *text, size_t len) {
    if (!t || (!text && len)) { set_error("grammar: bad arguments"); return NULL; }
    if (len > MAX_TEXT) { set_error("grammar: %zu bytes of text (at most %d)", len, MAX_TEXT); return NULL; }
    const char *why;
    size_t bad = utf8_invalid_at(text, len, &why);
    parser p = {.tok = t, .s = text, .n = bad};
    if (bad < len) {
        fail_at(&p, bad, "the text is not UTF-8", why);
        return NULL;
    }
    parse_grammar(&p);
    int32_t root = -1;
    for (int32_t r = 0; r < p.n_rules && !p.failed; r++) {
        if (!p.rules[r].defined) fail_at(&p, p.rules[r].used_at, "no rule defines ", p.rules[r].name);
        if (!strcmp(p.rules[r].name, "root")) root = r;
    }
    if (!p.failed && root < 0) { set_error("grammar: no rule 'root' (the start rule)"); p.failed = 1; }
    dsv41_grammar *g = p.failed ? NULL : calloc(1, sizeof *g);
    if (!p.failed && !g) set_error("out of memory compiling a grammar");
    if (g) {
        g->tok = t;
        g->root = root;
        g->n_vocab = dsv41_tokenizer_n_vocab(t);
        if (flatten(&p, g) || check_left_recursion(g, p.rules) || !(g->tt = tokentrie_get(t))) {
            dsv41_grammar_free(g);
            g = NULL;
        }
    }
    parser_free(&p);
    return g;
}
