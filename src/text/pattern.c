/* pattern.c - a JSON Schema "pattern" (a regex subset) as grammar text for a JSON string.
 *
 * The subset (docs/STRUCTURED_OUTPUT.md): literals, ".", classes and their escapes, groups,
 * alternation, quantifiers, "^" at the start and "$" at the end. The grammar produces the
 * string's JSON text, so what a class or "." generates leaves out what JSON must escape, and a
 * literal quote or backslash is written escaped. Whatever the grammar would refuse (a backwards
 * range, an unbounded repetition of what can match nothing, counts past its bound) is refused
 * here, so the error names the schema's pattern. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pattern.h"

typedef struct {
    const char *s;   /* the pattern, at offset i */
    size_t i;
    const char *why; /* the first error, or NULL */
} rx;

/* Records the first error; returns -1. */
static int rx_fail(rx *r, const char *why) {
    if (!r->why) r->why = why;
    return -1;
}

static int rx_alt(rx *r, strbuf *b);

/* The class members of \d \w \s (\s: a space, the one white space a JSON string holds unescaped). */
static const char *class_escape(char e) {
    switch (e) {
    case 'd': return "0-9";
    case 'w': return "a-zA-Z0-9_";
    case 's': return " ";
    default: return NULL;
    }
}

/* A literal character of the pattern into b as a grammar literal (JSON-escaped: the grammar
 * produces the JSON text of the string). */
static void rx_char(strbuf *b, const char *p, size_t n) {
    if (n == 1 && (p[0] == '"' || p[0] == '\\')) {
        char esc[3] = {'\\', p[0], 0};
        strbuf_lit(b, esc, 2);
    } else if (n == 1 && (unsigned char)p[0] < 0x20) {
        char esc[8];
        snprintf(esc, sizeof esc, "\\u%04x", p[0]);
        strbuf_lit(b, esc, 6);
    } else strbuf_lit(b, p, n);
}

/* The code point of the UTF-8 character at p (the schema was parsed, so it is valid). */
static int32_t utf8_code(const char *p) {
    const unsigned char *u = (const unsigned char *)p;
    int k = utf8_len(u[0]);
    int32_t v = k == 1 ? u[0] : u[0] & (0x3F >> (k - 1));
    for (int i = 1; i < k; i++) v = v << 6 | (u[i] & 0x3F);
    return v;
}

/* [...] of the pattern into b: a grammar class of the same characters, less those JSON must
 * escape (" \ and controls), which a string under a pattern leaves out. A range must run
 * forwards (checked here: the grammar would refuse it, and the error belongs to the schema). */
static void rx_class(rx *r, strbuf *b) {
    r->i++;
    int neg = r->s[r->i] == '^';
    if (neg) r->i++;
    strbuf m = {0};
    int n = 0;
    int32_t last = -1, from = -1; /* the last single character; a range's start while its end is read */
    while (!r->why && r->s[r->i] && (r->s[r->i] != ']' || n == 0)) {
        unsigned char ch = (unsigned char)r->s[r->i];
        int32_t cp = -1; /* the single character this item adds, if it is one */
        n++;
        if (ch == '-' && last >= 0 && r->s[r->i + 1] && r->s[r->i + 1] != ']') {
            from = last;
            strbuf_str(&m, "-");
            r->i++;
            continue;
        }
        if (ch == '\\') {
            char e = r->s[r->i + 1];
            const char *ce = class_escape(e);
            if (!e) break;
            if (ce) strbuf_str(&m, ce);
            else if (e == 'D' || e == 'W' || e == 'S') { rx_fail(r, "negated class escapes inside [...] are not supported"); break; }
            else if (e == 'b' || (e >= '1' && e <= '9')) { rx_fail(r, "backreferences are not supported"); break; }
            else if (e == 'u' || e == 'x') {
                int digits = e == 'u' ? 4 : 2;
                cp = 0;
                for (int k = 0; k < digits; k++) {
                    char h = r->s[r->i + 2 + k];
                    int v = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
                    if (v < 0) { rx_fail(r, "a \\u or \\x escape needs hex digits"); break; }
                    cp = cp << 4 | v;
                }
                if (r->why) break;
                if (cp >= 0x20 && cp != '"' && cp != '\\' && !(cp >= 0xD800 && cp <= 0xDFFF)) strbuf_fmt(&m, "\\u%04X", (unsigned)cp);
                else if (from >= 0) { rx_fail(r, "a class range ends at a character a JSON string escapes"); break; }
                r->i += (size_t)digits;
            } else if (e == 'n' || e == 't' || e == 'r' || e == 'f' || e == 'v' || e == '"' || e == '\\') {
                if (from >= 0) { rx_fail(r, "a class range ends at a character a JSON string escapes"); break; }
            } else {
                strbuf_fmt(&m, "\\%c", e);
                cp = (unsigned char)e;
            }
            r->i += 2;
        } else if (ch == '"' || ch < 0x20) { /* left out: a string under a pattern holds no escapes */
            if (from >= 0) { rx_fail(r, "a class range ends at a character a JSON string escapes"); break; }
            r->i++;
        } else {
            int k = utf8_len(ch);
            cp = utf8_code(r->s + r->i);
            if (ch == '[' || ch == ']' || ch == '^') strbuf_fmt(&m, "\\%c", ch);
            else strbuf_put(&m, r->s + r->i, (size_t)k);
            r->i += (size_t)k;
        }
        if (from >= 0 && cp >= 0 && cp < from) { rx_fail(r, "has a class range that runs backwards"); break; }
        last = from >= 0 ? -1 : cp; /* a range's end starts no range */
        from = -1;
    }
    if (!r->why && r->s[r->i] != ']') rx_fail(r, "a class is not closed");
    else r->i++;
    if (r->why) {
    } else if (neg) strbuf_fmt(b, "[^\"\\\\\\x00-\\x1F%s]", m.s ? m.s : "");
    else if (!m.s) rx_fail(r, "a class holds no character a JSON string can hold unescaped");
    else strbuf_fmt(b, "[%s]", m.s);
    free(m.s);
}

/* One atom of the pattern and its quantifier into b; 1 when it can match nothing. An unbounded
 * repetition of what can match nothing is an error (the grammar would refuse it as left
 * recursion, and the error belongs to the schema). */
static int rx_atom(rx *r, strbuf *b) {
    const char *s = r->s;
    char ch = s[r->i];
    int empty = 0;
    if (ch == '(') {
        r->i++;
        if (s[r->i] == '?') {
            if (s[r->i + 1] != ':') return rx_fail(r, "lookaround and named groups are not supported");
            r->i += 2;
        }
        strbuf_str(b, "(");
        empty = rx_alt(r, b);
        if (s[r->i] != ')') return rx_fail(r, "a group is not closed");
        r->i++;
        strbuf_str(b, ")");
    } else if (ch == '[') rx_class(r, b);
    else if (ch == '.') { strbuf_str(b, "[^\"\\\\\\x00-\\x1F]"); r->i++; }
    else if (ch == '\\') {
        char e = s[r->i + 1];
        const char *ce = class_escape(e);
        if (!e) return rx_fail(r, "ends with a backslash");
        if (ce) strbuf_fmt(b, "[%s]", ce);
        else if (e == 'D') strbuf_str(b, "[^\"\\\\\\x00-\\x1F0-9]");
        else if (e == 'W') strbuf_str(b, "[^\"\\\\\\x00-\\x1Fa-zA-Z0-9_]");
        else if (e == 'S') strbuf_str(b, "[^\"\\\\\\x00-\\x20]");
        else if (e == 'b' || e == 'B' || (e >= '1' && e <= '9') || e == 'k') return rx_fail(r, "backreferences and word boundaries are not supported");
        else if (e == 'n') strbuf_str(b, "\"\\\\n\"");
        else if (e == 't') strbuf_str(b, "\"\\\\t\"");
        else rx_char(b, &e, 1);
        r->i += 2;
    } else if (ch == '*' || ch == '+' || ch == '?' || ch == '{') {
        return rx_fail(r, "a quantifier follows nothing");
    } else {
        int k = utf8_len((unsigned char)ch);
        rx_char(b, s + r->i, (size_t)k);
        r->i += (size_t)k;
    }
    if (r->why) return -1;
    char q = s[r->i];
    long m = q == '+', n = q == '?' ? 1 : -1; /* the repetition {m,n}, n -1 unbounded */
    if (q == '*' || q == '+' || q == '?') { strbuf_put(b, &q, 1); r->i++; }
    else if (q == '{') { /* {m}, {m,}, {m,n} with m <= n <= 10000 (grammar.c's bound) */
        char *e;
        m = n = strtol(s + r->i + 1, &e, 10);
        if (e == s + r->i + 1 || m < 0) return rx_fail(r, "a quantifier {m,n} is malformed");
        if (*e == ',') n = e[1] == '}' ? -1 : strtol(e + 1, &e, 10), e += n < 0;
        if (*e != '}' || m > 10000 || n > 10000 || (n >= 0 && n < m)) return rx_fail(r, "a quantifier {m,n} is malformed or above 10000");
        strbuf_put(b, s + r->i, (size_t)(e - (s + r->i)) + 1);
        r->i = (size_t)(e - s) + 1;
    } else return empty;
    if (empty && n < 0) return rx_fail(r, "repeats without bound something that can match nothing");
    if (s[r->i] == '?' || s[r->i] == '+') r->i++; /* lazy / possessive: the same language */
    strbuf_str(b, " ");
    return empty || m == 0;
}

/* A run of atoms; 1 when all of them can match nothing. */
static int rx_seq(rx *r, strbuf *b) {
    int empty = 1;
    while (!r->why && r->s[r->i] && r->s[r->i] != '|' && r->s[r->i] != ')') {
        if (r->s[r->i] == '^' || r->s[r->i] == '$') return rx_fail(r, "anchors are supported only at the start and end");
        empty &= rx_atom(r, b) == 1;
        strbuf_str(b, " ");
    }
    return empty;
}

/* Alternatives; 1 when one of them can match nothing. */
static int rx_alt(rx *r, strbuf *b) {
    strbuf_str(b, "(\"\" ");
    int empty = rx_seq(r, b) == 1;
    while (!r->why && r->s[r->i] == '|') {
        r->i++;
        strbuf_str(b, ") | (\"\" ");
        empty |= rx_seq(r, b) == 1;
    }
    strbuf_str(b, ")");
    return empty;
}

int pattern_grammar(const char *re, strbuf *b, const char **why) {
    size_t n = strlen(re);
    int start = n && re[0] == '^', end = n > (size_t)start && re[n - 1] == '$' && (n < 2 || re[n - 2] != '\\');
    char *core = strndup(re + start, n - (size_t)start - (size_t)end); /* the pattern inside its anchors */
    if (!core) { *why = "out of memory"; return -1; }
    rx r = {core, 0, NULL};
    strbuf_str(b, "\"\\\"\" ");
    if (!start) strbuf_str(b, "[^\"\\\\\\x00-\\x1F]* "); /* an unanchored pattern matches anywhere */
    strbuf_str(b, "(");
    rx_alt(&r, b);
    if (!r.why && core[r.i]) rx_fail(&r, "has an unmatched ')'");
    strbuf_str(b, ")");
    if (!end) strbuf_str(b, " [^\"\\\\\\x00-\\x1F]*");
    strbuf_str(b, " \"\\\"\"");
    free(core);
    *why = r.why;
    return r.why ? -1 : 0;
}
