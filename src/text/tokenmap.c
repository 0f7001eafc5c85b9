/* tokenmap.c - the Engram compressed token map, built from a tokenizer as the release does.
 *
 * Tokens that mean the same text after normalization share one compressed id: each token is
 * decoded alone; if that is not clean UTF-8 its byte-level spelling is the key, otherwise the
 * text normalized by NFKC, NFD, accent stripping, lowercasing and whitespace collapsing (the
 * Hugging Face normalizer sequence engram.py builds, a lone space kept as a space). Ids are
 * handed out in order of first appearance. utf8proc supplies the Unicode tables. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "dsv41.h"
#include "error.h"
#include "tokenizer.h"

typedef struct {
    char *s;
    size_t n, cap;
} buf;

/* room for 4 more bytes (a code point's UTF-8) in b */
static int make_room(buf *b) {
    if (b->n + 4 >= b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        char *ns = realloc(b->s, cap);
        if (!ns) return -1;
        b->s = ns;
        b->cap = cap;
    }
    return 0;
}

static int put_cp(buf *b, int32_t cp) {
    if (make_room(b)) return -1;
    b->n += (size_t)utf8proc_encode_char(cp, (utf8proc_uint8_t *)b->s + b->n);
    return 0;
}

/* Rust's char::is_whitespace (the White_Space property), which the Strip normalizer uses */
static int white(int32_t c) {
    return (c >= 0x09 && c <= 0x0D) || c == 0x20 || c == 0x85 || c == 0xA0 || c == 0x1680 ||
           (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

static int cased(int32_t c) { return utf8proc_tolower(c) != c || utf8proc_toupper(c) != c; }

/* raw bytes -> the byte-level spelling (GPT-2 map: printable Latin-1 as itself, others U+0100..) */
static int spell(const unsigned char *p, size_t n, buf *out) {
    for (size_t i = 0; i < n; i++) {
        int b = p[i], printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE, k = 0;
        if (!printable)
            for (int x = 0; x < b; x++) k += !((x >= 0x21 && x <= 0x7E) || (x >= 0xA1 && x <= 0xAC) || x >= 0xAE);
        if (put_cp(out, printable ? b : 256 + k)) return -1;
    }
    return 0;
}

/* text (valid UTF-8) -> its key under NFKC, NFD, strip accents, lowercase, collapse, strip */
static int normalize(const unsigned char *p, size_t n, buf *out) {
    utf8proc_uint8_t *nfkc = NULL, *nfd = NULL;
    if (utf8proc_map(p, (utf8proc_ssize_t)n, &nfkc, UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT) < 0) return -1;
    utf8proc_ssize_t m = utf8proc_map(nfkc, (utf8proc_ssize_t)strlen((char *)nfkc), &nfd, UTF8PROC_STABLE | UTF8PROC_DECOMPOSE);
    free(nfkc);
    if (m < 0) return -1;
    int32_t *cp = malloc(((size_t)m + 1) * 2 * sizeof *cp);
    int32_t k = 0;
    if (!cp) { free(nfd); return -1; }
    for (utf8proc_ssize_t i = 0; i < m;) {
        utf8proc_int32_t c;
        i += utf8proc_iterate(nfd + i, m - i, &c);
        utf8proc_category_t cat = utf8proc_category(c); /* StripAccents drops every mark: Mn, Mc, Me */
        if (cat != UTF8PROC_CATEGORY_MN && cat != UTF8PROC_CATEGORY_MC && cat != UTF8PROC_CATEGORY_ME) cp[k++] = c;
    }
    free(nfd);
    /* lowercase as Rust's str::to_lowercase: U+0130 becomes "i" + combining dot, and a capital
     * sigma that ends a word becomes the final form */
    int32_t *lc = cp + (size_t)m + 1, nl = 0;
    for (int32_t i = 0; i < k; i++) {
        if (cp[i] == 0x130) { lc[nl++] = 'i'; lc[nl++] = 0x307; continue; }
        if (cp[i] == 0x3A3) {
            int before = i > 0 && cased(cp[i - 1]), after = i + 1 < k && cased(cp[i + 1]);
            lc[nl++] = before && !after ? 0x3C2 : 0x3C3;
            continue;
        }
        lc[nl++] = utf8proc_tolower(cp[i]);
    }
    int32_t n2 = 0; /* [ \t\r\n]+ -> one space */
    for (int32_t i = 0; i < nl; i++) {
        int ws = lc[i] == ' ' || lc[i] == '\t' || lc[i] == '\r' || lc[i] == '\n';
        if (ws && n2 > 0 && lc[n2 - 1] == ' ' && i > 0 && (lc[i - 1] == ' ' || lc[i - 1] == '\t' || lc[i - 1] == '\r' || lc[i - 1] == '\n'))
            continue;
        lc[n2++] = ws ? ' ' : lc[i];
    }
    int rc = 0;
    if (n2 == 1 && lc[0] == ' ') { /* a lone space survives the strip */
        rc = put_cp(out, ' ');
    } else {
        int32_t b = 0, e = n2;
        while (b < e && white(lc[b])) b++;
        while (e > b && white(lc[e - 1])) e--;
        for (int32_t i = b; rc == 0 && i < e; i++) rc = put_cp(out, lc[i]);
    }
    free(cp);
    return rc;
}

static uint64_t key_hash(const char *s, size_t n) {
    uint64_t h = 0xCBF29CE484222325ULL;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint8_t)s[i]) * 0x100000001B3ULL;
    return h;
}

int64_t engram_token_map(const dsv41_tokenizer *t, int32_t vocab, int64_t *map) {
    size_t cap = 1;
    while (cap < (size_t)vocab * 2) cap *= 2;
    struct { char *key; size_t n; int64_t id; } *tab = calloc(cap, sizeof *tab);
    if (!tab) return set_error("out of memory");
    int64_t next = 0;
    buf key = {0};
    for (int32_t id = 0; id < vocab; id++) {
        size_t n;
        const unsigned char *p = (const unsigned char *)dsv41_token_bytes(t, id, &n);
        if (!p) { next = set_error("engram token map: token id %d is not in the tokenizer", id); break; }
        key.n = 0;
        int clean = utf8proc_decompose((const utf8proc_uint8_t *)p, (utf8proc_ssize_t)n, NULL, 0, 0) >= 0;
        for (size_t i = 0; clean && i + 2 < n; i++) clean = !(p[i] == 0xEF && p[i + 1] == 0xBF && p[i + 2] == 0xBD);
        if (!clean ? spell(p, n, &key) : normalize(p, n, &key)) { next = set_error("out of memory"); break; }
        if (clean && key.n == 0) { /* nothing left after normalizing: the text itself */
            for (size_t i = 0; i < n && next >= 0; i++)
                if (make_room(&key)) next = set_error("out of memory");
                else key.s[key.n++] = (char)p[i];
            if (next < 0) break;
        }
        size_t h = (size_t)key_hash(key.s, key.n) & (cap - 1);
        while (tab[h].key && !(tab[h].n == key.n && !memcmp(tab[h].key, key.s, key.n))) h = (h + 1) & (cap - 1);
        if (!tab[h].key) {
            tab[h].key = malloc(key.n + 1);
            if (!tab[h].key) { next = set_error("out of memory"); break; }
            memcpy(tab[h].key, key.s, key.n);
            tab[h].n = key.n;
            tab[h].id = next++;
        }
        map[id] = tab[h].id;
    }
    for (size_t i = 0; i < cap; i++) free(tab[i].key);
    free(tab);
    free(key.s);
    return next;
}
