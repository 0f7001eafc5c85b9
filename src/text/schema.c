/* schema.c - a JSON Schema as grammar text (grammar.c's form), for dsv41_schema_grammar.
 *
 * Each schema node becomes one rule, prefix + "root" for the document and prefix + "sN" for
 * the rest; a $ref names the rule of its target, compiled once, so recursive schemas are
 * recursive rules. The subset (docs/STRUCTURED_OUTPUT.md) is what the output can be held to
 * exactly; a keyword that would constrain the value in a way this cannot express is an error
 * naming it and its JSON pointer, never silently dropped. Annotations (title, description,
 * default, ...) and unknown keywords are ignored.
 *
 * Everything the grammar allows validates; some valid documents are not generated (the
 * conservative choices, all documented): property order is the schema's, required first;
 * whitespace is bounded ("", a space, or a newline and up to 20 spaces or tabs); integers and
 * integer parts have at most 16 digits, fractions 16, exponents 3; strings under a pattern
 * leave out escapes; additional keys leave out escapes and the named keys (a duplicate key
 * would let a parser keep the wrong value); without additionalProperties an object with
 * properties takes no other keys (as llama.cpp's converter). */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "error.h"
#include "json.h"
#include "pattern.h"
#include "strbuf.h"
#include "tokenizer.h"

enum {
    MAX_SCHEMA = 1 << 20,  /* bytes of schema text */
    MAX_OUT = 4 << 20,     /* bytes of grammar text (grammar.c's own limit) */
    MAX_VIEW = 16,         /* schemas merged by allOf and inherited by anyOf branches */
    MAX_REFS = 4096,       /* distinct $ref targets */
    MAX_DIGITS = 16,       /* digits of an integer part, as llama.cpp's converter */
};

/* The schemas one node is read from: allOf's parts and an anyOf branch's parent lend their
 * keywords; a keyword is taken from the first that has it. */
typedef struct {
    const json *s[MAX_VIEW];
    int n;
    const json *done; /* the anyOf / oneOf already expanded into this branch, or NULL */
} view;

typedef struct {
    const json *root;
    const char *prefix;
    strbuf out;                 /* the rules */
    int n_rules;
    const char *ref[MAX_REFS];/* $ref targets met, by text; ref_rule[i] their rules */
    int ref_rule[MAX_REFS], n_refs;
    const json *ref_node[MAX_REFS];
    int pending;              /* ref targets named but not compiled yet start here */
    char path[1024];          /* the JSON pointer of the node being compiled */
    int failed;
    int depth;                /* nodes being compiled, one inside another */
    unsigned used;            /* B_* rules referenced */
} ctx;

enum { B_WS = 1, B_STRING = 2, B_NUMBER = 4, B_INTEGER = 8, B_VALUE = 16, B_KEYCHAR = 32 };

/* Records "json schema: KEY WHAT at /pointer" (the first error only); returns -1. */
static int fail(ctx *c, const char *what, const char *key) {
    if (!c->failed) set_error("json schema: %s%s%s at '%s'", key ? key : "", key ? " " : "", what, c->path[0] ? c->path : "/");
    c->failed = 1;
    return -1;
}

static const json *get(const view *v, const char *key) {
    for (int i = 0; i < v->n; i++) {
        const json *x = json_get(v->s[i], key);
        if (x) return x;
    }
    return NULL;
}

/* Appends "/kw" and, when key is not NULL, "/key" (escaped as a JSON pointer) to the path;
 * returns the old length. */
static size_t path_push(ctx *c, const char *kw, const char *key) {
    size_t old = strlen(c->path), n = old;
    for (int part = 0; part < 2; part++) {
        const char *seg = part ? key : kw;
        if (!seg) break;
        if (n + 2 < sizeof c->path) c->path[n++] = '/';
        for (const char *p = seg; *p && n + 3 < sizeof c->path; p++) {
            if (part && *p == '~') c->path[n++] = '~', c->path[n++] = '0';
            else if (part && *p == '/') c->path[n++] = '~', c->path[n++] = '1';
            else c->path[n++] = *p;
        }
    }
    c->path[n] = 0;
    return old;
}

static void path_pop(ctx *c, size_t old) { c->path[old] = 0; }

static void rule_name(ctx *c, strbuf *b, int r) {
    if (r == 0) strbuf_fmt(b, "%sroot", c->prefix);
    else strbuf_fmt(b, "%ss%d", c->prefix, r);
}

static void base_name(ctx *c, strbuf *b, unsigned which, const char *name) {
    c->used |= which;
    strbuf_fmt(b, "%s%s", c->prefix, name);
}

/* v's JSON text, compact, as JSON writes strings (what a const or enum must produce). */
static void json_text(strbuf *b, const json *v) {
    switch (v->type) {
    case JSON_NULL: strbuf_str(b, "null"); break;
    case JSON_BOOL: strbuf_str(b, v->num != 0 ? "true" : "false"); break;
    case JSON_NUM:
        if (v->is_int && v->is_neg) strbuf_fmt(b, "%lld", (long long)(int64_t)v->bits);
        else if (v->is_int) strbuf_fmt(b, "%llu", (unsigned long long)v->bits);
        else { /* the shortest digits that read back as the same double */
            char t[40];
            for (int prec = 15; prec <= 17; prec++)
                if (snprintf(t, sizeof t, "%.*g", prec, v->num), strtod(t, NULL) == v->num) break;
            strbuf_str(b, t);
        }
        break;
    case JSON_STR:
        strbuf_str(b, "\"");
        for (size_t i = 0; i < v->len; i++) {
            unsigned char ch = (unsigned char)v->str[i];
            if (ch == '"' || ch == '\\') strbuf_fmt(b, "\\%c", ch);
            else if (ch < 0x20) strbuf_fmt(b, "\\u%04x", ch);
            else strbuf_put(b, (const char *)&ch, 1);
        }
        strbuf_str(b, "\"");
        break;
    case JSON_ARR:
    case JSON_OBJ:
        strbuf_str(b, v->type == JSON_ARR ? "[" : "{");
        for (size_t i = 0; i < v->len; i++) {
            if (i) strbuf_str(b, ",");
            if (v->type == JSON_OBJ) {
                json k = {.type = JSON_STR, .str = v->keys[i], .len = strlen(v->keys[i])};
                json_text(b, &k);
                strbuf_str(b, ":");
            }
            json_text(b, &v->items[i]);
        }
        strbuf_str(b, v->type == JSON_ARR ? "]" : "}");
        break;
    }
}

static void json_lit(strbuf *b, const json *v) {
    strbuf t = {0};
    json_text(&t, v);
    if (t.oom) b->oom = 1;
    else strbuf_lit(b, t.s, t.n);
    free(t.s);
}

static int compile(ctx *c, const view *v);

/* The rule of one subschema (at kw, or kw/key, of the current node). */
static int sub(ctx *c, const json *schema, const char *kw, const char *key) {
    size_t old = path_push(c, kw, key);
    view v = {{schema}, 1, NULL};
    int r = compile(c, &v);
    path_pop(c, old);
    return r;
}

/* ---- integers as digit grammars */

/* The digits of [lo, hi] (same length, as text), into b. */
static void digit_range(strbuf *b, const char *lo, const char *hi, int n) {
    if (n == 0) return;
    if (lo[0] == hi[0]) {
        strbuf_fmt(b, "\"%c\" ", lo[0]);
        digit_range(b, lo + 1, hi + 1, n - 1);
        return;
    }
    int lo_zeros = 1, hi_nines = 1;
    for (int i = 1; i < n; i++) lo_zeros &= lo[i] == '0', hi_nines &= hi[i] == '9';
    char nines[24], zeros[24];
    memset(nines, '9', sizeof nines), memset(zeros, '0', sizeof zeros);
    strbuf_str(b, "(");
    char a = lo[0], z = hi[0];
    int first = 1;
    if (!lo_zeros) {
        strbuf_fmt(b, "\"%c\" ", lo[0]);
        digit_range(b, lo + 1, nines, n - 1);
        a++;
        first = 0;
    }
    char zz = hi_nines ? z : (char)(z - 1);
    if (a <= zz) {
        strbuf_fmt(b, "%s[%c-%c]", first ? "" : " | ", a, zz);
        if (n > 1) strbuf_fmt(b, " [0-9]{%d}", n - 1);
        first = 0;
    }
    if (!hi_nines) {
        strbuf_fmt(b, "%s\"%c\" ", first ? "" : " | ", z);
        digit_range(b, zeros, hi + 1, n - 1);
    }
    strbuf_str(b, ")");
}

/* The decimal digits of the non-negative integers [lo, hi] (no leading zeros), into b as
 * alternatives; nothing when lo > hi. Returns how many alternatives were written. */
static int uint_range(strbuf *b, int64_t lo, int64_t hi, int first) {
    int n = 0;
    int64_t p = 1;
    for (int d = 1; d <= 18 && lo <= hi; d++, p *= 10) {
        int64_t top = p * 10 - 1, a = lo > (d == 1 ? 0 : p) ? lo : (d == 1 ? 0 : p), z = hi < top ? hi : top;
        if (a > z) continue;
        char sa[24], sz[24];
        snprintf(sa, sizeof sa, "%lld", (long long)a);
        snprintf(sz, sizeof sz, "%lld", (long long)z);
        strbuf_str(b, first && !n ? "" : " | ");
        digit_range(b, sa, sz, d);
        n++;
    }
    return n;
}

/* Integers in [lo, hi] (either may be "none": INT64_MIN / INT64_MAX mean unbounded, held to
 * MAX_DIGITS digits). Returns the alternatives written. */
static int int_range(strbuf *b, int64_t lo, int64_t hi) {
    const int64_t cap = 9999999999999999LL; /* MAX_DIGITS nines */
    if (lo < -cap) lo = -cap;
    if (hi > cap) hi = cap;
    int n = 0;
    if (hi >= 0) n += uint_range(b, lo > 0 ? lo : 0, hi, 1);
    if (lo < 0) { /* "-" then the magnitudes [max(1, -hi), -lo] */
        strbuf t = {0};
        int k = uint_range(&t, hi < 0 ? -hi : 1, -lo, 1);
        if (k) strbuf_fmt(b, "%s\"-\" (%s)", n ? " | " : "", t.s), n++;
        if (t.oom) b->oom = 1;
        free(t.s);
    }
    return n;
}

/* A bound of the node (minimum / exclusiveMinimum or the maxima) as a double; 0 when absent. */
static int bound(ctx *c, const view *v, const char *incl, const char *excl, double *out, int *exclusive) {
    const json *a = get(v, incl), *e = get(v, excl);
    int have = 0;
    *exclusive = 0;
    if (a) {
        if (a->type != JSON_NUM) return fail(c, "must be a number", incl);
        *out = a->num, have = 1;
    }
    if (e && e->type == JSON_BOOL) { /* draft 4: a flag on the other */
        if (e->num != 0 && !have) return fail(c, "is true without the bound it qualifies", excl);
        *exclusive = e->num != 0;
    } else if (e) {
        if (e->type != JSON_NUM) return fail(c, "must be a number", excl);
        int is_min = incl[1] == 'i';
        if (!have || (is_min ? e->num >= *out : e->num <= *out)) *out = e->num, *exclusive = 1;
        have = 1;
    }
    if (have && !isfinite(*out)) return fail(c, "must be finite", incl);
    return have;
}

/* The integer bounds of the node as [lo, hi] (INT64_MIN / INT64_MAX: none); -1 after an error. */
static int int_bounds(ctx *c, const view *v, int64_t *lo, int64_t *hi) {
    double x;
    int ex, h;
    *lo = INT64_MIN, *hi = INT64_MAX;
    if ((h = bound(c, v, "minimum", "exclusiveMinimum", &x, &ex)) < 0) return -1;
    if (h) {
        if (fabs(x) > 9e15) return fail(c, "is beyond 16 digits", "minimum");
        double f = ceil(x);
        *lo = (int64_t)(ex && f == x ? f + 1 : f);
    }
    if ((h = bound(c, v, "maximum", "exclusiveMaximum", &x, &ex)) < 0) return -1;
    if (h) {
        if (fabs(x) > 9e15) return fail(c, "is beyond 16 digits", "maximum");
        double f = floor(x);
        *hi = (int64_t)(ex && f == x ? f - 1 : f);
    }
    return 0;
}

/* ---- the node kinds */

static void emit_integer(ctx *c, const view *v, strbuf *b) {
    int64_t lo, hi;
    if (int_bounds(c, v, &lo, &hi)) return;
    if (lo == INT64_MIN && hi == INT64_MAX) { base_name(c, b, B_INTEGER, "integer"); return; }
    strbuf_str(b, "(");
    if (!int_range(b, lo, hi)) fail(c, "leave no integer", "minimum/maximum");
    strbuf_str(b, ")");
}

/* A number under bounds: an integer part n and an optional fraction, where [n, n + 1) (or
 * (-(n + 1), -n]) lies inside the bounds, or n alone where n does; no exponent. A value between
 * a fractional bound and the next integer is left out. */
static void emit_number(ctx *c, const view *v, strbuf *b) {
    double lo = -INFINITY, hi = INFINITY, x;
    int lo_ex = 0, hi_ex = 0, h;
    if ((h = bound(c, v, "minimum", "exclusiveMinimum", &x, &lo_ex)) < 0) return;
    if (h) lo = x;
    if ((h = bound(c, v, "maximum", "exclusiveMaximum", &x, &hi_ex)) < 0) return;
    if (h) hi = x;
    if (!isfinite(lo) && !isfinite(hi)) { base_name(c, b, B_NUMBER, "number"); return; }
    if (fabs(lo) > 9e15 && isfinite(lo)) { fail(c, "is beyond 16 digits", "minimum"); return; }
    if (fabs(hi) > 9e15 && isfinite(hi)) { fail(c, "is beyond 16 digits", "maximum"); return; }
    const double cap = 9999999999999999.0;
    double L = isfinite(lo) ? lo : -cap - 1, H = isfinite(hi) ? hi : cap + 1;
    /* integers k inside: L <= k <= H (strict where exclusive) */
    double klo = ceil(L), khi = floor(H);
    if (lo_ex && klo == L) klo++;
    if (hi_ex && khi == H) khi--;
    /* n >= 0 with any fraction: n >= L (n > L when exclusive... n itself must be in: n >= klo) and n + 1 <= H */
    double flo = klo > 0 ? klo : 0, fhi = floor(H) - 1;
    /* -n (n >= 1) with any fraction: -(n + 1) >= L and -n in range: n <= floor(-L) - 1, n >= -khi */
    double glo = -khi > 1 ? -khi : 1, ghi = floor(-L) - 1;
    if (fhi > cap) fhi = cap;
    if (ghi > cap) ghi = cap;
    strbuf_str(b, "(");
    int n = int_range(b, (int64_t)klo, (int64_t)khi);
    if (flo <= fhi) {
        strbuf_str(b, n ? " | (" : "(");
        uint_range(b, (int64_t)flo, (int64_t)fhi, 1);
        strbuf_str(b, ") \".\" [0-9]{1,16}");
        n++;
    }
    if (glo <= ghi) {
        strbuf_str(b, n ? " | \"-\" (" : "\"-\" (");
        uint_range(b, (int64_t)glo, (int64_t)ghi, 1);
        strbuf_str(b, ") \".\" [0-9]{1,16}");
        n++;
    }
    strbuf_str(b, ")");
    if (!n) fail(c, "leave no number", "minimum/maximum");
}

/* A nonnegative integer keyword, or def when absent; -1 after an error. */
static int64_t count_kw(ctx *c, const view *v, const char *key, int64_t def) {
    const json *x = get(v, key);
    if (!x) return def;
    int64_t n;
    if (json_int(x, 0, 100000, &n)) return fail(c, "must be an integer from 0 to 100000", key);
    return n;
}


static void emit_string(ctx *c, const view *v, strbuf *b) {
    const json *fmt = get(v, "format"), *pat = get(v, "pattern");
    int64_t lo = count_kw(c, v, "minLength", 0), hi = count_kw(c, v, "maxLength", -1);
    if (c->failed) return;
    if ((fmt || pat) && (get(v, "minLength") || get(v, "maxLength")))
        { fail(c, "minLength / maxLength together with pattern or format is not supported", NULL); return; }
    if (fmt && pat) { fail(c, "together with pattern is not supported", "format"); return; }
    if (pat) {
        if (pat->type != JSON_STR) { fail(c, "must be a string", "pattern"); return; }
        const char *why;
        size_t old = path_push(c, "pattern", NULL);
        if (pattern_grammar(pat->str, b, &why)) fail(c, why, "pattern");
        path_pop(c, old);
        return;
    }
    if (fmt) {
        static const char *const formats[][2] = {
            {"date", "DATE"},
            {"time", "TIME"},
            {"date-time", "DATE \"T\" TIME"},
            {"uuid", "H{8} \"-\" H{4} \"-\" H{4} \"-\" H{4} \"-\" H{12}"},
            {"email", "[a-zA-Z0-9_+-] [a-zA-Z0-9._+-]{0,31} \"@\" [a-zA-Z0-9] [a-zA-Z0-9-]{0,30} (\".\" [a-zA-Z] [a-zA-Z0-9-]{0,30}){1,3}"},
        };
        const char *date = "([1-9] [0-9]{3} | \"0\" [1-9] [0-9]{2} | \"00\" [1-9] [0-9] | \"000\" [1-9]) \"-\" "
                           "((\"0\" [13578] | \"1\" [02]) \"-\" (\"0\" [1-9] | [12] [0-9] | \"3\" [01]) | "
                           "(\"0\" [469] | \"11\") \"-\" (\"0\" [1-9] | [12] [0-9] | \"30\") | "
                           "\"02-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" [0-8]))";
        const char *time = "([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,6})? "
                           "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])";
        if (fmt->type != JSON_STR) { fail(c, "must be a string", "format"); return; }
        for (size_t i = 0; i < sizeof formats / sizeof formats[0]; i++) {
            if (strcmp(fmt->str, formats[i][0])) continue;
            strbuf_str(b, "\"\\\"\" ");
            for (const char *p = formats[i][1]; *p; p++) {
                if (!strncmp(p, "DATE", 4)) strbuf_fmt(b, "(%s)", date), p += 3;
                else if (!strncmp(p, "TIME", 4)) strbuf_fmt(b, "(%s)", time), p += 3;
                else if (*p == 'H') strbuf_str(b, "[0-9a-f]");
                else strbuf_put(b, p, 1);
            }
            strbuf_str(b, " \"\\\"\"");
            return;
        }
        fail(c, "is not one of the supported formats (date, time, date-time, uuid, email)", "format");
        return;
    }
    if (hi >= 0 && hi < lo) { fail(c, "is below minLength", "maxLength"); return; }
    if (lo == 0 && hi < 0) { base_name(c, b, B_STRING, "string"); return; }
    strbuf_str(b, "\"\\\"\" ");
    base_name(c, b, B_STRING, "char");
    if (hi < 0) strbuf_fmt(b, "{%lld,}", (long long)lo);
    else strbuf_fmt(b, "{%lld,%lld}", (long long)lo, (long long)hi);
    strbuf_str(b, " \"\\\"\"");
}

/* Appends " ws \",\" ws " or the like: the separators of arrays and objects. */
static void sep(ctx *c, strbuf *b, const char *ch) {
    strbuf_str(b, " ");
    base_name(c, b, B_WS, "ws");
    strbuf_fmt(b, " \"%s\" ", ch);
    base_name(c, b, B_WS, "ws");
    strbuf_str(b, " ");
}

static void emit_array(ctx *c, const view *v, strbuf *b) {
    const json *items = get(v, "items"), *prefix = get(v, "prefixItems");
    int64_t lo = count_kw(c, v, "minItems", 0), hi = count_kw(c, v, "maxItems", -1);
    if (c->failed) return;
    if (prefix && prefix->type != JSON_ARR) { fail(c, "must be an array of schemas", "prefixItems"); return; }
    if (items && items->type == JSON_ARR) { prefix = items, items = get(v, "additionalItems"); } /* draft 4 tuples */
    int k = prefix ? (int)prefix->len : 0, rest = -1; /* rest: the rule of the items after the prefix, -1 none allowed */
    int *pr = malloc((size_t)(k + 1) * sizeof *pr);
    if (!pr) { c->failed = 1, set_error("out of memory"); return; }
    for (int i = 0; i < k && !c->failed; i++) {
        char idx[24];
        snprintf(idx, sizeof idx, "%d", i);
        pr[i] = sub(c, &prefix->items[i], "prefixItems", idx);
    }
    if (!(items && items->type == JSON_BOOL && items->num == 0)) {
        json any = {.type = JSON_BOOL, .num = 1};
        rest = sub(c, items ? items : &any, "items", NULL);
    } else if (hi < 0 || hi > k) hi = k;
    if (c->failed) { free(pr); return; }
    if (hi >= 0 && hi < lo) { fail(c, "is below minItems (or what items allow)", "maxItems"); free(pr); return; }
    strbuf_str(b, "\"[\" ");
    base_name(c, b, B_WS, "ws");
    strbuf_str(b, " ");
    /* element i, i from 0: present if i < lo, else optional with everything after it */
    int opened = 0;
    int64_t i = 0;
    for (; i < k && (hi < 0 || i < hi); i++) {
        if (i >= lo) strbuf_str(b, "("), opened++;
        if (i > 0) sep(c, b, ",");
        rule_name(c, b, pr[i]);
        strbuf_str(b, " ");
    }
    if (rest >= 0 && (hi < 0 || i < hi)) {
        int64_t need = lo > i ? lo - i : 0, room = hi < 0 ? -1 : hi - i;
        if (i == 0) { /* the first element has no separator */
            if (need == 0) strbuf_str(b, "("), opened++;
            rule_name(c, b, rest);
            need = need > 0 ? need - 1 : 0;
            room = room < 0 ? -1 : room - 1;
        }
        if (room != 0) {
            strbuf_str(b, " (");
            sep(c, b, ",");
            rule_name(c, b, rest);
            if (room < 0) strbuf_fmt(b, "){%lld,}", (long long)need);
            else strbuf_fmt(b, "){%lld,%lld}", (long long)need, (long long)room);
        }
    }
    for (; opened > 0; opened--) strbuf_str(b, ")?");
    strbuf_str(b, " ");
    base_name(c, b, B_WS, "ws");
    strbuf_str(b, " \"]\"");
    free(pr);
}

/* A key that is none of keys [n] and holds no escape (so its text is its value): a walk of the
 * keys' trie by character from byte offset depth. Each next character of a key leads further
 * down; any other character leaves every key behind, after which anything may follow; the key
 * may end here unless the prefix so far is itself one of the keys. */
static void except_keys(ctx *c, strbuf *b, const char *const *keys, int n, size_t depth) {
    const char **group = malloc((size_t)(n ? n : 1) * sizeof *group);
    if (!group) { c->failed = 1, set_error("out of memory"); return; }
    strbuf cls = {0};
    int ends = 0, first = 1;
    strbuf_str(b, "(");
    for (int i = 0; i < n && !c->failed; i++) {
        size_t len = strlen(keys[i]);
        if (len == depth) { ends = 1; continue; }
        int k = utf8_len((unsigned char)keys[i][depth]), seen = 0;
        for (int j = 0; j < i && !seen; j++) seen = strlen(keys[j]) > depth && !strncmp(keys[j] + depth, keys[i] + depth, (size_t)k);
        if (seen) continue;
        int g = 0;
        for (int j = 0; j < n; j++)
            if (strlen(keys[j]) > depth && !strncmp(keys[j] + depth, keys[i] + depth, (size_t)k)) group[g++] = keys[j];
        strbuf_str(b, first ? "" : " | ");
        first = 0;
        strbuf_lit(b, keys[i] + depth, (size_t)k);
        strbuf_str(b, " ");
        except_keys(c, b, group, g, depth + (size_t)k);
        unsigned char u = (unsigned char)keys[i][depth];
        if (u == ']' || u == '\\' || u == '^' || u == '-') strbuf_fmt(&cls, "\\%c", u);
        else if (u >= 0x20 && u != '"') strbuf_put(&cls, keys[i] + depth, (size_t)k);
    }
    free(group);
    strbuf_fmt(b, "%s[^\"\\\\\\x00-\\x1F%s] ", first ? "" : " | ", cls.s ? cls.s : "");
    base_name(c, b, B_KEYCHAR, "keychar*");
    if (!ends) strbuf_str(b, " | \"\""); /* the prefix so far is no excluded key: the key may end here */
    strbuf_str(b, ")");
    if (cls.oom) b->oom = 1;
    free(cls.s);
}

/* A set of strings (the names of an object's properties): open addressing, sized once for at
 * most cap / 2 of them, so that thousands of properties cost no quadratic scans. */
typedef struct {
    const char **slot; /* [cap] a name or NULL */
    size_t cap;
} strset;

static size_t strset_hash(const char *k) {
    size_t h = 14695981039346656037ULL & SIZE_MAX;
    for (; *k; k++) h = (h ^ (unsigned char)*k) * (size_t)1099511628211ULL;
    return h;
}

/* 1 when k is in the set; with add, puts it in when it is not (and returns 0). */
static int strset_has(strset *s, const char *k, int add) {
    size_t i = strset_hash(k) & (s->cap - 1);
    for (; s->slot[i]; i = (i + 1) & (s->cap - 1))
        if (!strcmp(s->slot[i], k)) return 1;
    if (add) s->slot[i] = k;
    return 0;
}

static int trivial(const json *s) { return (s->type == JSON_BOOL && s->num != 0) || (s->type == JSON_OBJ && s->len == 0); }

/* What the members of v say of key k (NULL: of a key none of them names): the one schema that
 * constrains it (NULL when none does: any value); *banned when one member's
 * additionalProperties false leaves it out. Every member applies to every key (its properties
 * or else its additionalProperties), so two that constrain one key would ask for an
 * intersection: an error. */
static const json *key_schema(ctx *c, const view *v, const char *k, int *banned) {
    const json *only = NULL;
    *banned = 0;
    for (int i = 0; i < v->n; i++) {
        if (v->s[i]->type != JSON_OBJ) continue;
        const json *p = json_get(v->s[i], "properties"), *a = json_get(v->s[i], "additionalProperties");
        const json *x = k && p ? json_get(p, k) : NULL;
        if (!x) x = a;
        if (!x || trivial(x)) continue;
        if (x->type == JSON_BOOL) { *banned = 1; continue; }
        if (only && only != x) { fail(c, "is constrained by two merged schemas (allOf / anyOf): intersections are not supported", k ? k : "additionalProperties"); return NULL; }
        only = x;
    }
    return only;
}

static void emit_object(ctx *c, const view *v, strbuf *b) {
    int any_props = 0, any_add = 0;
    size_t cap = 1;
    for (int i = 0; i < v->n; i++) {
        if (v->s[i]->type != JSON_OBJ) continue;
        const json *p = json_get(v->s[i], "properties"), *r = json_get(v->s[i], "required");
        if (p && p->type != JSON_OBJ) { fail(c, "must be an object", "properties"); return; }
        if (r && r->type != JSON_ARR) { fail(c, "must be an array of names", "required"); return; }
        for (size_t j = 0; r && j < r->len; j++)
            if (r->items[j].type != JSON_STR) { fail(c, "must be an array of names", "required"); return; }
        any_props |= p != NULL, any_add |= json_get(v->s[i], "additionalProperties") != NULL;
        cap += (p ? p->len : 0) + (r ? r->len : 0);
    }
    const char **name = malloc(cap * sizeof *name);
    int *rule = malloc(cap * sizeof *rule), *is_req = calloc(cap, sizeof *is_req);
    size_t set_cap = 16;
    while (set_cap < 2 * cap) set_cap *= 2;
    strset req = {calloc(set_cap, sizeof(char *)), set_cap}, seen = {calloc(set_cap, sizeof(char *)), set_cap};
    if (!name || !rule || !is_req || !req.slot || !seen.slot) { c->failed = 1, set_error("out of memory"); goto out; }
    for (int i = 0; i < v->n; i++) {
        const json *r = v->s[i]->type == JSON_OBJ ? json_get(v->s[i], "required") : NULL;
        for (size_t j = 0; r && j < r->len; j++) strset_has(&req, r->items[j].str, 1);
    }
    /* required ones in the order of properties, then required ones none lists, then the optional ones */
    size_t n = 0;
    for (int pass = 0; pass < 3; pass++)
        for (int i = 0; i < v->n; i++) {
            if (v->s[i]->type != JSON_OBJ) continue;
            const json *list = json_get(v->s[i], pass == 1 ? "required" : "properties");
            for (size_t j = 0; list && j < list->len; j++) {
                const char *k = pass == 1 ? list->items[j].str : list->keys[j];
                int in_req = pass == 1 || strset_has(&req, k, 0);
                if (in_req == (pass < 2) && !strset_has(&seen, k, 1)) name[n] = k, is_req[n++] = in_req;
            }
        }
    size_t kept = 0;
    for (size_t i = 0; i < n && !c->failed; i++) {
        int banned;
        const json *ks = key_schema(c, v, name[i], &banned);
        if (c->failed) break;
        if (banned && is_req[i]) { fail(c, "is required but additionalProperties false leaves it out", name[i]); break; }
        if (banned) continue;
        json anyv = {.type = JSON_BOOL, .num = 1};
        name[kept] = name[i], is_req[kept] = is_req[i];
        rule[kept++] = sub(c, ks ? ks : &anyv, "properties", name[i]);
    }
    n = kept;
    /* keys no member names: as every member's additionalProperties allow; none given and no
     * properties: any object; none given beside properties: none (as llama.cpp's converter) */
    int add_rule = -1, banned = 0;
    const json *add = key_schema(c, v, NULL, &banned);
    if (!c->failed && !banned && (any_add || !any_props)) {
        json anyv = {.type = JSON_BOOL, .num = 1};
        add_rule = sub(c, add ? add : &anyv, "additionalProperties", NULL);
    }
    if (c->failed) goto out;
    strbuf key = {0}; /* the grammar of an additional key */
    if (add_rule >= 0) {
        /* the named keys an additional key could spell (one holding what JSON escapes never is one) */
        const char **plain = malloc((n + 1) * sizeof *plain);
        int np = 0;
        if (!plain) { free(key.s); c->failed = 1, set_error("out of memory"); goto out; }
        for (size_t i = 0; i < n; i++) {
            int ok = 1;
            for (const unsigned char *p = (const unsigned char *)name[i]; *p && ok; p++) ok = *p >= 0x20 && *p != '"' && *p != '\\';
            if (ok) plain[np++] = name[i];
        }
        strbuf_str(&key, "\"\\\"\" ");
        except_keys(c, &key, plain, np, 0);
        free(plain);
        strbuf_str(&key, " \"\\\"\"");
    }
    /* kv_i: "name" ws ":" ws value */
    strbuf *kv = calloc(n + 2, sizeof *kv);
    if (!kv) { free(key.s); c->failed = 1, set_error("out of memory"); goto out; }
    for (size_t i = 0; i < n; i++) {
        json k = {.type = JSON_STR, .str = (char *)name[i], .len = strlen(name[i])};
        json_lit(&kv[i], &k);
        sep(c, &kv[i], ":");
        rule_name(c, &kv[i], rule[i]);
    }
    if (add_rule >= 0) {
        strbuf_str(&kv[n], "(");
        strbuf_put(&kv[n], key.s, key.n);
        strbuf_str(&kv[n], ")");
        sep(c, &kv[n], ":");
        rule_name(c, &kv[n], add_rule);
    }
    size_t n_req = 0;
    while (n_req < n && is_req[n_req]) n_req++;
    strbuf_str(b, "\"{\" ");
    base_name(c, b, B_WS, "ws");
    strbuf_str(b, " ");
    /* the optional tail from property i on, a rule each so the text stays linear in the
     * properties: T_i ::= (sep kv_i)? T_(i+1), and T_n ::= (sep add)* or nothing */
    int tail = c->n_rules;
    c->n_rules += (int)(n - n_req) + 1;
    for (size_t i = n_req; i <= n; i++) {
        rule_name(c, &c->out, tail + (int)(i - n_req));
        strbuf_str(&c->out, " ::= ");
        if (i < n || add_rule >= 0) {
            strbuf_str(&c->out, "(");
            sep(c, &c->out, ",");
            strbuf_put(&c->out, kv[i].s, kv[i].n);
            strbuf_str(&c->out, i < n ? ")? " : ")*");
        }
        if (i < n) rule_name(c, &c->out, tail + (int)(i - n_req) + 1);
        else if (add_rule < 0) strbuf_str(&c->out, "\"\"");
        strbuf_str(&c->out, "\n");
    }
    if (n_req > 0) {
        for (size_t i = 0; i < n_req; i++) {
            if (i) sep(c, b, ",");
            strbuf_put(b, kv[i].s, kv[i].n);
        }
        strbuf_str(b, " ");
        rule_name(c, b, tail);
    } else if (n > 0 || add_rule >= 0) {
        /* no required key: the first key written is any of them, the later ones follow it in order */
        strbuf_str(b, "(");
        for (size_t i = 0; i < n + (add_rule >= 0); i++) {
            strbuf_str(b, i ? " | " : "");
            strbuf_put(b, kv[i].s, kv[i].n);
            strbuf_str(b, " ");
            rule_name(c, b, tail + (int)(i < n ? i + 1 : n));
        }
        strbuf_str(b, ")?");
    }
    strbuf_str(b, " ");
    base_name(c, b, B_WS, "ws");
    strbuf_str(b, " \"}\"");
    for (size_t i = 0; i <= n; i++) free(kv[i].s);
    free(kv);
    free(key.s);
out:
    free(name);
    free(rule);
    free(is_req);
    free(req.slot);
    free(seen.slot);
}

/* ---- $ref */

/* The node a local reference points at, or NULL after an error. */
static const json *resolve(ctx *c, const char *ref) {
    if (ref[0] != '#') { fail(c, "only local references ('#...') are supported", "$ref"); return NULL; }
    const json *at = c->root;
    const char *p = ref + 1;
    if (*p && *p != '/') { fail(c, "names no node of this schema (anchors are not supported)", "$ref"); return NULL; }
    while (*p == '/' && at) {
        p++;
        char seg[512];
        size_t n = 0;
        for (; *p && *p != '/' && n + 1 < sizeof seg; p++) {
            if (*p == '~' && p[1] == '0') seg[n++] = '~', p++;
            else if (*p == '~' && p[1] == '1') seg[n++] = '/', p++;
            else seg[n++] = *p;
        }
        seg[n] = 0;
        if (at->type == JSON_ARR) {
            char *e;
            long i = strtol(seg, &e, 10);
            at = *e || e == seg ? NULL : json_at(at, (size_t)i);
        } else at = json_get(at, seg);
    }
    if (!at) fail(c, "names no node of this schema", "$ref");
    return at;
}

/* The rule of a $ref target: named now, compiled once (after the node that met it). */
static int ref_rule(ctx *c, const char *ref) {
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->ref[i], ref)) return c->ref_rule[i];
    if (c->n_refs == MAX_REFS) return fail(c, "more than 4096 distinct references", "$ref");
    const json *node = resolve(c, ref);
    if (!node) return -1;
    if (node == c->root) return 0;
    int i = c->n_refs++;
    c->ref[i] = ref, c->ref_node[i] = node, c->ref_rule[i] = c->n_rules++;
    return c->ref_rule[i];
}

/* 1 when s is a reference and annotations only: its rule is the target's. */
static int only_ref(const json *s) {
    const json *ref = s->type == JSON_OBJ ? json_get(s, "$ref") : NULL;
    int only = ref && ref->type == JSON_STR;
    for (size_t i = 0; only && i < s->len; i++) {
        const char *k = s->keys[i];
        only = !strcmp(k, "$ref") || !strcmp(k, "description") || !strcmp(k, "title") || !strcmp(k, "$comment") ||
               !strcmp(k, "default") || !strcmp(k, "examples");
    }
    return only;
}

/* ---- one node */

static const char *const unsupported[] = {
    "not", "if", "then", "else", "contains", "minContains", "maxContains", "uniqueItems", "patternProperties",
    "propertyNames", "dependentSchemas", "dependentRequired", "dependencies", "minProperties", "maxProperties",
    "unevaluatedProperties", "unevaluatedItems", "multipleOf", "$dynamicRef", "$recursiveRef",
};

/* The alternatives of the node's types into b. */
static void emit_types(ctx *c, const view *v, strbuf *b) {
    const json *type = get(v, "type");
    const char *types[8];
    int nt = 0;
    if (type && type->type == JSON_STR) types[nt++] = type->str;
    else if (type && type->type == JSON_ARR) {
        for (size_t i = 0; i < type->len && nt < 8; i++) {
            if (type->items[i].type != JSON_STR) { fail(c, "must be a type name or an array of them", "type"); return; }
            types[nt++] = type->items[i].str;
        }
    } else if (type) { fail(c, "must be a type name or an array of them", "type"); return; }
    else { /* no type: what the keywords imply, else any value */
        if (get(v, "properties") || get(v, "additionalProperties") || get(v, "required")) types[nt++] = "object";
        else if (get(v, "items") || get(v, "prefixItems") || get(v, "minItems") || get(v, "maxItems")) types[nt++] = "array";
        else if (get(v, "minLength") || get(v, "maxLength") || get(v, "pattern") || get(v, "format")) types[nt++] = "string";
        else if (get(v, "minimum") || get(v, "maximum") || get(v, "exclusiveMinimum") || get(v, "exclusiveMaximum")) types[nt++] = "number";
        else { base_name(c, b, B_VALUE, "value"); return; }
    }
    if (nt == 0) { fail(c, "lists no type", "type"); return; }
    strbuf_str(b, "(");
    for (int i = 0; i < nt && !c->failed; i++) {
        strbuf_str(b, i ? " | " : "");
        const char *t = types[i];
        if (!strcmp(t, "null")) strbuf_str(b, "\"null\"");
        else if (!strcmp(t, "boolean")) strbuf_str(b, "\"true\" | \"false\"");
        else if (!strcmp(t, "integer")) emit_integer(c, v, b);
        else if (!strcmp(t, "number")) emit_number(c, v, b);
        else if (!strcmp(t, "string")) emit_string(c, v, b);
        else if (!strcmp(t, "array")) emit_array(c, v, b);
        else if (!strcmp(t, "object")) emit_object(c, v, b);
        else fail(c, "is not a JSON Schema type", t);
    }
    strbuf_str(b, ")");
}

/* Adds schema s (its allOf parts too) to view v. */
static int view_add(ctx *c, view *v, const json *s) {
    const json *ref = json_get(s, "$ref");
    if (ref) {
        if (ref->type != JSON_STR) return fail(c, "must be a string", "$ref");
        const json *t = resolve(c, ref->str);
        if (!t) return -1;
        /* a reference beside other keywords: both apply (the target joins the view) */
        if (t->type == JSON_OBJ && json_get(t, "$ref") == NULL && v->n < MAX_VIEW) v->s[v->n++] = t;
        else if (t != s && v->n < MAX_VIEW) v->s[v->n++] = t;
    }
    if (v->n == MAX_VIEW) return fail(c, "nests allOf and references more than 16 deep", "allOf");
    v->s[v->n++] = s;
    const json *all = json_get(s, "allOf");
    if (all) {
        if (all->type != JSON_ARR) return fail(c, "must be an array of schemas", "allOf");
        for (size_t i = 0; i < all->len; i++) {
            if (all->items[i].type == JSON_BOOL && all->items[i].num != 0) continue;
            if (all->items[i].type != JSON_OBJ) return fail(c, "must be an array of schema objects", "allOf");
            if (view_add(c, v, &all->items[i])) return -1;
        }
    }
    return 0;
}

/* The node's rule body into b. */
static void emit_node(ctx *c, const view *v, strbuf *b) {
    for (int i = 0; i < v->n; i++) {
        if (v->s[i]->type == JSON_BOOL) {
            if (v->s[i]->num == 0) { fail(c, "the schema false matches nothing", NULL); return; }
            continue;
        }
        if (v->s[i]->type != JSON_OBJ) { fail(c, "a schema must be an object or a boolean", NULL); return; }
        for (size_t k = 0; k < sizeof unsupported / sizeof unsupported[0]; k++)
            if (json_get(v->s[i], unsupported[k])) { fail(c, "is not supported", unsupported[k]); return; }
    }
    const json *cst = get(v, "const"), *en = get(v, "enum");
    /* oneOf as anyOf: a value matching two branches is not ruled out */
    const char *kw = "anyOf";
    const json *any = get(v, kw);
    if (!any || any == v->done) any = get(v, kw = "oneOf");
    if (any == v->done) any = NULL;
    if (cst) { json_lit(b, cst); return; }
    if (en) {
        if (en->type != JSON_ARR || en->len == 0) { fail(c, "must be a non-empty array", "enum"); return; }
        strbuf_str(b, "(");
        for (size_t i = 0; i < en->len; i++) {
            strbuf_str(b, i ? " | " : "");
            json_lit(b, &en->items[i]);
        }
        strbuf_str(b, ")");
        return;
    }
    if (any) {
        if (any->type != JSON_ARR || any->len == 0) { fail(c, "must be a non-empty array of schemas", kw); return; }
        strbuf_str(b, "(");
        for (size_t i = 0; i < any->len && !c->failed; i++) {
            /* each branch inherits the node's other keywords (type beside anyOf, ...) */
            view bv = {{0}, 0, any};
            char idx[24];
            snprintf(idx, sizeof idx, "%zu", i);
            size_t old = path_push(c, kw, idx);
            int ref = only_ref(&any->items[i]);
            if (ref) { /* a branch that is a reference alone is its target's rule (recursion goes through it) */
                path_pop(c, old);
                int r = ref_rule(c, json_get(&any->items[i], "$ref")->str);
                if (r < 0) return;
                strbuf_str(b, i ? " | " : "");
                rule_name(c, b, r);
                continue;
            }
            if (any->items[i].type == JSON_BOOL) bv.s[bv.n++] = &any->items[i];
            else if (view_add(c, &bv, &any->items[i])) { path_pop(c, old); return; }
            for (int j = 0; j < v->n && bv.n < MAX_VIEW; j++) bv.s[bv.n++] = v->s[j]; /* the parent's keywords after the branch's */
            int r = c->n_rules++;
            strbuf body = {0};
            emit_node(c, &bv, &body);
            rule_name(c, &c->out, r);
            strbuf_str(&c->out, " ::= ");
            strbuf_put(&c->out, body.s ? body.s : "\"\"", body.s ? body.n : 2);
            strbuf_str(&c->out, "\n");
            if (body.oom) c->out.oom = 1;
            free(body.s);
            path_pop(c, old);
            strbuf_str(b, i ? " | " : "");
            rule_name(c, b, r);
        }
        strbuf_str(b, ")");
        return;
    }
    emit_types(c, v, b);
}

/* Compiles the node seen through v into a new rule (or the rule of its $ref); its index. */
static int compile(ctx *c, const view *v) {
    if (c->failed) return -1;
    if (c->depth >= 64) return fail(c, "nests more than 64 deep (a reference that includes itself beside other keywords?)", "schema");
    if (v->n == 1 && only_ref(v->s[0])) return ref_rule(c, json_get(v->s[0], "$ref")->str);
    view full = {{0}, 0, NULL};
    for (int i = 0; i < v->n; i++)
        if (v->s[i]->type != JSON_OBJ) full.s[full.n++] = v->s[i];
        else if (view_add(c, &full, v->s[i])) return -1;
    int r = c->n_rules++;
    strbuf body = {0};
    c->depth++;
    emit_node(c, &full, &body);
    c->depth--;
    if (body.oom || c->out.oom) { free(body.s); c->failed = 1; set_error("out of memory"); return -1; }
    if (c->out.n + body.n > MAX_OUT) { free(body.s); return fail(c, "the grammar passes 4 MiB (a schema too large)", NULL); }
    rule_name(c, &c->out, r);
    strbuf_str(&c->out, " ::= ");
    strbuf_put(&c->out, body.s ? body.s : "\"\"", body.s ? body.n : 2);
    strbuf_str(&c->out, "\n");
    free(body.s);
    return c->failed ? -1 : r;
}

/* ---- the public call */

char *dsv41_schema_grammar(const char *schema, size_t len, const char *prefix) {
    if (!schema && len) { set_error("json schema: bad arguments"); return NULL; }
    if (len > MAX_SCHEMA) { set_error("json schema: %zu bytes (at most %d)", len, MAX_SCHEMA); return NULL; }
    if (!prefix) prefix = "";
    for (const char *p = prefix; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_')) {
            set_error("json schema: the rule prefix '%s' holds a character rule names cannot", prefix);
            return NULL;
        }
    const char *why;
    size_t bad = utf8_invalid_at(schema, len, &why);
    if (bad < len) { set_error("json schema: the text is not UTF-8 at byte %zu%s", bad, why); return NULL; }
    char err[256];
    json *root = json_parse(schema, len, err, sizeof err);
    if (!root) { set_error("json schema: %s", err); return NULL; }
    ctx *c = calloc(1, sizeof *c);
    if (!c) { json_free(root); set_error("out of memory"); return NULL; }
    c->root = root;
    c->prefix = prefix;
    view v = {{root}, 1, NULL};
    compile(c, &v);
    for (int i = 0; !c->failed && i < c->n_refs; i++) { /* the targets met, each once (more may be met meanwhile) */
        view rv = {{0}, 0, NULL};
        snprintf(c->path, sizeof c->path, "%s", c->ref[i] + 1);
        if (c->ref_node[i]->type == JSON_OBJ && view_add(c, &rv, c->ref_node[i])) break;
        if (c->ref_node[i]->type != JSON_OBJ) rv.s[rv.n++] = c->ref_node[i];
        strbuf body = {0};
        emit_node(c, &rv, &body);
        rule_name(c, &c->out, c->ref_rule[i]);
        strbuf_str(&c->out, " ::= ");
        strbuf_put(&c->out, body.s ? body.s : "\"\"", body.s ? body.n : 2);
        strbuf_str(&c->out, "\n");
        free(body.s);
    }
    /* the shared rules */
    strbuf *o = &c->out;
    const char *P = prefix;
    if (c->used & B_VALUE) c->used |= B_WS | B_STRING | B_NUMBER;
    if (c->used & B_WS) strbuf_fmt(o, "%sws ::= (\" \" | \"\\n\" [ \\t]{0,20})?\n", P);
    if (c->used & B_STRING) {
        strbuf_fmt(o, "%sstring ::= \"\\\"\" %schar* \"\\\"\"\n", P, P);
        strbuf_fmt(o, "%schar ::= [^\"\\\\\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n", P);
    }
    if (c->used & B_KEYCHAR) strbuf_fmt(o, "%skeychar ::= [^\"\\\\\\x00-\\x1F]\n", P);
    if (c->used & (B_NUMBER | B_INTEGER)) strbuf_fmt(o, "%sinteger ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15})\n", P);
    if (c->used & B_NUMBER) strbuf_fmt(o, "%snumber ::= %sinteger (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})?\n", P, P);
    if (c->used & B_VALUE) {
        strbuf_fmt(o, "%svalue ::= %sobject | %sarray | %sstring | %snumber | \"true\" | \"false\" | \"null\"\n", P, P, P, P, P);
        strbuf_fmt(o, "%sobject ::= \"{\" %sws (%sstring %sws \":\" %sws %svalue (%sws \",\" %sws %sstring %sws \":\" %sws %svalue)*)? %sws \"}\"\n",
               P, P, P, P, P, P, P, P, P, P, P, P, P);
        strbuf_fmt(o, "%sarray ::= \"[\" %sws (%svalue (%sws \",\" %sws %svalue)*)? %sws \"]\"\n", P, P, P, P, P, P, P);
    }
    char *out = NULL;
    if (c->out.oom) set_error("out of memory");
    else if (!c->failed) out = c->out.s, c->out.s = NULL;
    free(c->out.s);
    free(c);
    json_free(root);
    return out;
}
