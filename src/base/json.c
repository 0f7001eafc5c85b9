/* json.c - recursive-descent JSON parser into a node tree (see json.h). */
#include "json.h"
#include "error.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "files.h"

#define JSON_MAX_DEPTH 256

typedef struct {
    const char *p, *end, *start;
    char *err;
    size_t errlen;
    int failed;
} parser;

static void fail(parser *ps, const char *what) {
    if (ps->failed) return;
    ps->failed = 1;
    snprintf(ps->err, ps->errlen, "JSON error at byte %zu: %s", (size_t)(ps->p - ps->start), what);
}

static void skip_ws(parser *ps) {
    while (ps->p < ps->end && (*ps->p == ' ' || *ps->p == '\t' || *ps->p == '\n' || *ps->p == '\r'))
        ps->p++;
}

static int hex4(parser *ps, uint32_t *out) {
    if (ps->end - ps->p < 4) return 0;
    uint32_t v = 0;
    for (int i = 0; i < 4; i++) {
        char c = ps->p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (uint32_t)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (uint32_t)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (uint32_t)(c - 'A' + 10);
        else return 0;
    }
    ps->p += 4;
    *out = v;
    return 1;
}

static size_t put_utf8(char *o, uint32_t cp) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 0x3F)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (char)(0x80 | (cp & 0x3F)); return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (char)(0x80 | ((cp >> 6) & 0x3F)); o[3] = (char)(0x80 | (cp & 0x3F)); return 4;
}

/* A lone surrogate escape (\ud800 without its pair) is kept as its 3-byte WTF-8 form so that
 * tokenizer data holding one still round-trips byte for byte. */
static char *parse_string(parser *ps, size_t *outlen) {
    ps->p++; /* opening quote */
    const char *s = ps->p;
    size_t cap = 16;
    while (s < ps->end && *s != '"') { s += (*s == '\\' && s + 1 < ps->end) ? 2 : 1; cap += 2; } /* skip \" */
    char *o = malloc(cap + 1), *w = o;
    if (!o) { fail(ps, "out of memory"); return NULL; }
    while (ps->p < ps->end && *ps->p != '"') {
        unsigned char c = (unsigned char)*ps->p;
        if (c < 0x20) { fail(ps, "control character in string"); free(o); return NULL; }
        if (c != '\\') { *w++ = (char)c; ps->p++; continue; }
        ps->p++;
        if (ps->p >= ps->end) break;
        char e = *ps->p++;
        switch (e) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '/': *w++ = '/'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u': {
            uint32_t cp;
            if (!hex4(ps, &cp)) { fail(ps, "bad \\u escape"); free(o); return NULL; }
            if (cp >= 0xD800 && cp < 0xDC00 && ps->end - ps->p >= 6 && ps->p[0] == '\\' && ps->p[1] == 'u') {
                const char *save = ps->p;
                uint32_t lo;
                ps->p += 2;
                if (hex4(ps, &lo) && lo >= 0xDC00 && lo < 0xE000) cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                else ps->p = save;
            }
            w += put_utf8(w, cp);
            break;
        }
        default: fail(ps, "bad escape"); free(o); return NULL;
        }
    }
    if (ps->p >= ps->end) { fail(ps, "unterminated string"); free(o); return NULL; }
    ps->p++;
    *w = 0;
    *outlen = (size_t)(w - o);
    return o;
}

static void parse_value(parser *ps, json *out, int depth);

static void parse_number(parser *ps, json *out) {
    const char *s = ps->p;
    int neg = 0, integral = 1;
    if (ps->p < ps->end && *ps->p == '-') { neg = 1; ps->p++; }
    const char *digits = ps->p;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
    if (ps->p == digits) { fail(ps, "bad number"); return; }
    if (ps->p < ps->end && *ps->p == '.') {
        integral = 0; ps->p++;
        const char *f = ps->p;
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
        if (ps->p == f) { fail(ps, "bad number"); return; }
    }
    if (ps->p < ps->end && (*ps->p == 'e' || *ps->p == 'E')) {
        integral = 0; ps->p++;
        if (ps->p < ps->end && (*ps->p == '+' || *ps->p == '-')) ps->p++;
        const char *f = ps->p;
        while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') ps->p++;
        if (ps->p == f) { fail(ps, "bad number"); return; }
    }
    char buf[64];
    size_t n = (size_t)(ps->p - s);
    char *tmp = n < sizeof buf ? buf : malloc(n + 1);
    if (!tmp) { fail(ps, "out of memory"); return; }
    memcpy(tmp, s, n);
    tmp[n] = 0;
    out->type = JSON_NUM;
    out->num = strtod(tmp, NULL);
    if (integral) {
        errno = 0;
        unsigned long long u = strtoull(tmp + neg, NULL, 10);
        if (errno == 0 && (!neg || u <= (1ULL << 63))) {
            out->is_int = 1;
            out->is_neg = neg;
            out->bits = neg ? (uint64_t)0 - (uint64_t)u : (uint64_t)u;
        }
    }
    if (tmp != buf) free(tmp);
}

static int match_word(parser *ps, const char *w) {
    size_t n = strlen(w);
    if ((size_t)(ps->end - ps->p) >= n && memcmp(ps->p, w, n) == 0) { ps->p += n; return 1; }
    return 0;
}

static void parse_container(parser *ps, json *out, int depth, int is_obj) {
    char close = is_obj ? '}' : ']';
    size_t cap = 0;
    out->type = is_obj ? JSON_OBJ : JSON_ARR;
    ps->p++;
    skip_ws(ps);
    if (ps->p < ps->end && *ps->p == close) { ps->p++; return; }
    for (;;) {
        if (out->len == cap) {
            cap = cap ? cap * 2 : 8;
            json *ni = realloc(out->items, cap * sizeof *ni);
            if (!ni) { fail(ps, "out of memory"); return; }
            out->items = ni;
            if (is_obj) {
                char **nk = realloc(out->keys, cap * sizeof *nk);
                if (!nk) { fail(ps, "out of memory"); return; }
                out->keys = nk;
            }
        }
        json *item = &out->items[out->len];
        memset(item, 0, sizeof *item);
        if (is_obj) {
            out->keys[out->len] = NULL;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != '"') { out->len++; fail(ps, "expected object key"); return; }
            size_t kl;
            out->keys[out->len] = parse_string(ps, &kl);
            out->len++;
            if (ps->failed) return;
            skip_ws(ps);
            if (ps->p >= ps->end || *ps->p != ':') { fail(ps, "expected ':'"); return; }
            ps->p++;
        } else {
            out->len++;
        }
        parse_value(ps, item, depth + 1);
        if (ps->failed) return;
        skip_ws(ps);
        if (ps->p < ps->end && *ps->p == ',') { ps->p++; continue; }
        if (ps->p < ps->end && *ps->p == close) { ps->p++; return; }
        fail(ps, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
        return;
    }
}

/* Python's json.dump writes NaN / Infinity for non-finite floats; they are accepted. */
static void parse_value(parser *ps, json *out, int depth) {
    if (depth > JSON_MAX_DEPTH) { fail(ps, "nesting too deep"); return; }
    skip_ws(ps);
    if (ps->p >= ps->end) { fail(ps, "unexpected end of input"); return; }
    char c = *ps->p;
    if (c == '{' || c == '[') parse_container(ps, out, depth, c == '{');
    else if (c == '"') { out->type = JSON_STR; out->str = parse_string(ps, &out->len); }
    else if (match_word(ps, "-Infinity")) { out->type = JSON_NUM; out->num = -strtod("inf", NULL); }
    else if (c == '-' || (c >= '0' && c <= '9')) parse_number(ps, out);
    else if (match_word(ps, "true")) { out->type = JSON_BOOL; out->num = 1; }
    else if (match_word(ps, "false")) { out->type = JSON_BOOL; out->num = 0; }
    else if (match_word(ps, "null")) out->type = JSON_NULL;
    else if (match_word(ps, "NaN")) { out->type = JSON_NUM; out->num = strtod("nan", NULL); }
    else if (match_word(ps, "Infinity")) { out->type = JSON_NUM; out->num = strtod("inf", NULL); }
    else fail(ps, "unexpected character");
}

static void free_node(json *j) {
    if (j->type == JSON_STR) free(j->str);
    if (j->type == JSON_ARR || j->type == JSON_OBJ) {
        for (size_t i = 0; i < j->len; i++) {
            free_node(&j->items[i]);
            if (j->keys) free(j->keys[i]);
        }
        free(j->items);
        free(j->keys);
    }
}

void json_free(json *j) {
    if (!j) return;
    free_node(j);
    free(j);
}

json *json_parse(const char *text, size_t len, char *err, size_t errlen) {
    parser ps = {text, text + len, text, err, errlen, 0};
    json *root = calloc(1, sizeof *root);
    if (!root) { snprintf(err, errlen, "out of memory"); return NULL; }
    parse_value(&ps, root, 0);
    if (!ps.failed) {
        skip_ws(&ps);
        if (ps.p != ps.end) fail(&ps, "trailing characters after the document");
    }
    if (ps.failed) { json_free(root); return NULL; }
    return root;
}

json *json_load_file(const char *path, char *err, size_t errlen) {
    size_t len;
    char *buf = file_read_all(path, &len, err, errlen);
    if (!buf) return NULL;
    char msg[256];
    json *j = json_parse(buf, len, msg, sizeof msg);
    free(buf);
    if (!j) snprintf(err, errlen, "%s: %s", path, msg);
    return j;
}

const json *json_get(const json *o, const char *key) {
    if (!o || o->type != JSON_OBJ) return NULL;
    for (size_t i = 0; i < o->len; i++)
        if (strcmp(o->keys[i], key) == 0) return &o->items[i];
    return NULL;
}

const json *json_at(const json *a, size_t i) {
    if (!a || a->type != JSON_ARR || i >= a->len) return NULL;
    return &a->items[i];
}

static int fits_i64(const json *n) {
    return n && n->type == JSON_NUM && n->is_int && (n->is_neg || n->bits <= (uint64_t)INT64_MAX);
}

int64_t json_i64(const json *n) { return fits_i64(n) ? (int64_t)n->bits : INT64_MIN; }

int json_int(const json *n, int64_t lo, int64_t hi, int64_t *out) {
    if (!fits_i64(n) || (int64_t)n->bits < lo || (int64_t)n->bits > hi) return -1;
    *out = (int64_t)n->bits;
    return 0;
}

/* ---- the public face: dsv41_json is this parser's node */

dsv41_json *dsv41_json_parse(const char *text, size_t len) {
    char err[256];
    json *j = json_parse(text, len, err, sizeof err);
    if (!j) set_error("%s", err);
    return j;
}

void dsv41_json_free(dsv41_json *root) { json_free(root); }

dsv41_json_type dsv41_json_type_of(const dsv41_json *v) { return v ? v->type : DSV41_JSON_NULL; }

const dsv41_json *dsv41_json_get(const dsv41_json *obj, const char *key) { return json_get(obj, key); }

const dsv41_json *dsv41_json_at(const dsv41_json *v, size_t i) {
    return v && (v->type == JSON_ARR || v->type == JSON_OBJ) && i < v->len ? &v->items[i] : NULL;
}

size_t dsv41_json_len(const dsv41_json *v) {
    return v && (v->type == JSON_STR || v->type == JSON_ARR || v->type == JSON_OBJ) ? v->len : 0;
}

const char *dsv41_json_key(const dsv41_json *obj, size_t i) {
    return obj && obj->type == JSON_OBJ && i < obj->len ? obj->keys[i] : NULL;
}

const char *dsv41_json_str(const dsv41_json *v) { return v && v->type == JSON_STR ? v->str : NULL; }

double dsv41_json_num(const dsv41_json *v, int *is_int) {
    int num = v && (v->type == JSON_NUM || v->type == JSON_BOOL);
    if (is_int) *is_int = num && v->type == JSON_NUM && v->is_int;
    return num ? v->num : 0.0;
}
