/* test_tokenizer.c - the tokenizer, the streaming decoder and the chat encoder.
 *
 * The shared vectors are read at run time from the shared folder (missing data is a failure,
 * never a skip): every case of vectors.json on the V4.1 test tokenizer (the V3 tokenizer.json
 * with its added tokens replaced by v41_added_tokens.json), every case of chat_vectors.json.
 * Our own cases add what the vectors do not reach: invalid UTF-8 and lone surrogates, the
 * whitespace characters on which PCRE2 and Oniguruma disagree (ids checked against Hugging
 * Face tokenizers 0.23.2), long inputs under a time bound, every added token, characters split
 * across tokens when streaming, loader errors on small generated files, and chat rules taken
 * from the release encoder's tests. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "dsv41.h"
#include "json.h"
#include "testing.h"
#include "tokenizer.h"

#define FFFD "\xEF\xBF\xBD"

static char tok_path[1024], added_path[1024];

static void shared_path(char *out, size_t cap, const char *name) {
    snprintf(out, cap, "%s/tokenizer/%s", shared_dir(), name);
}

static json *load_shared_json(const char *name) {
    char path[1100], err[256];
    shared_path(path, sizeof path, name);
    json *j = json_load_file(path, err, sizeof err);
    CHECK(j != NULL, "shared data missing or unreadable: %s", err);
    return j;
}

/* Encodes s[0..n) into a malloc'd array (*ids); returns the count or -1. */
static int64_t encode(const dsv41_tokenizer *t, const char *s, size_t n, int special, int32_t **ids) {
    int64_t count = dsv41_tokenize(t, s, n, special, NULL, 0);
    *ids = count >= 0 ? malloc((size_t)(count + 1) * sizeof **ids) : NULL;
    if (*ids && dsv41_tokenize(t, s, n, special, *ids, count) != count) count = -1;
    return count;
}

static int ids_match(const int32_t *ids, int64_t n, const json *want) {
    if (!want || want->type != JSON_ARR || (int64_t)want->len != n) return 0;
    for (int64_t i = 0; i < n; i++)
        if (ids[i] != (int32_t)json_i64(&want->items[i])) return 0;
    return 1;
}

/* 1 when the tokens' bytes put together are s[0..n). */
static int decodes_to(const dsv41_tokenizer *t, const int32_t *ids, int64_t count, const char *s, size_t n) {
    size_t at = 0, len;
    for (int64_t i = 0; i < count; i++) {
        const char *b = dsv41_token_bytes(t, ids[i], &len);
        if (!b || at + len > n || memcmp(s + at, b, len) != 0) return 0;
        at += len;
    }
    return at == n;
}

/* ---- vectors.json: each case on the tokenizer its `tokenizer` field names */
static void test_vectors(const dsv41_tokenizer *t41, const dsv41_tokenizer *t3) {
    json *v = load_shared_json("vectors.json");
    CHECK(v && v->type == JSON_ARR && v->len > 0, "vectors.json: not a non-empty array");
    for (size_t i = 0; v && i < v->len; i++) {
        const json *c = &v->items[i], *text = json_get(c, "text"), *special = json_get(c, "parse_special");
        const json *which = json_get(c, "tokenizer");
        const dsv41_tokenizer *t = which && which->type == JSON_STR && !strncmp(which->str, "v3", 2) ? t3 : t41;
        int32_t *ids;
        int64_t n = encode(t, text->str, text->len, special && special->num != 0, &ids);
        CHECK(n >= 0 && ids_match(ids, n, json_get(c, "ids")), "vectors.json case %zu: wrong ids (%s)", i,
              n < 0 ? dsv41_error() : "mismatch");
        CHECK(n >= 0 && decodes_to(t, ids, n, text->str, text->len), "vectors.json case %zu: does not decode back", i);
        free(ids);
    }
    json_free(v);
}

/* ---- our own id vectors, checked against Hugging Face tokenizers 0.23.2 */
static void test_own_ids(const dsv41_tokenizer *t41) {
    static const struct {
        const char *text;
        int special;
        int32_t ids[20];
        int n;
    } cases[] = {
        /* Oniguruma's \s counts U+0085 but not U+180E; PCRE2's own \s differs by version */
        {"a \xC2\x85 b", 1, {67, 1203, 230, 291}, 4},
        {"a \xE1\xA0\x8E b", 1, {67, 223, 115522, 239, 291}, 5},
        {"a \xE2\x80\xA8 b", 1, {67, 663, 104, 291}, 4},
        {"x\xE3\x80\x80 y", 1, {90, 18524, 383}, 3},
        {"x\xC2\xA0\xC2\xA0y", 1, {90, 2162, 2162, 91}, 4},
        {"a\xE2\x80\x83\xE2\x80\x83" "b", 1, {67, 77469, 77469, 68}, 4},
        {"tab\there\r\n", 1, {14278, 200, 1036, 204, 201}, 5},
        {"\xC2\xB2\xE2\x85\xA3 12345", 1, {1628, 23603, 99, 223, 6895, 1883}, 6},
        {"\xED\x95\x9C\xEA\xB5\xAD\xEC\x96\xB4 \xED\x85\x8D\xEC\x8A\xA4\xED\x8A\xB8", 1, {5634, 17564, 9227, 61291, 238, 45652}, 6},
        /* added tokens only with special parsing */
        {"x<think>y</think>", 1, {90, 128821, 91, 128822}, 4},
        {"x<think>y</think>", 0, {90, 30, 37947, 32, 91, 1718, 37947, 32}, 8},
        {"<\xEF\xBD\x9CUser\xEF\xBD\x9C>Hi", 0, {30, 28217, 6756, 28217, 32, 23166}, 6},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int32_t *ids;
        int64_t n = encode(t41, cases[i].text, strlen(cases[i].text), cases[i].special, &ids);
        int same = n == cases[i].n;
        for (int k = 0; same && k < n; k++) same = ids[k] == cases[i].ids[k];
        CHECK(same, "own id case %zu: wrong ids", i);
        free(ids);
    }
}

/* ---- invalid UTF-8 is an error naming the offset */
static void test_invalid_utf8(const dsv41_tokenizer *t) {
    static const struct {
        const char *text, *offset, *also;
    } cases[] = {
        {"ab\xFF", "offset 2", ""},
        {"\xC0\x80", "offset 0", ""},                  /* overlong NUL */
        {"ok\xE2\x82", "offset 2", "truncated"},       /* cut short */
        {"\xF4\x90\x80\x80", "offset 0", ""},          /* above U+10FFFF */
        {"x\x80y", "offset 1", ""},                    /* stray continuation byte */
        {"lone \xED\xA0\x80 high", "offset 5", "surrogate"},
        {"lone \xED\xBF\xBF low", "offset 5", "surrogate"},
        {"\xED\xA0\xBD\xED\xB8\x80", "offset 0", "surrogate"}, /* a pair in CESU-8 form */
    };
    int32_t ids[8];
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int64_t n = dsv41_tokenize(t, cases[i].text, strlen(cases[i].text), 1, ids, 8);
        CHECK(n == -1 && strstr(dsv41_error(), cases[i].offset) && strstr(dsv41_error(), cases[i].also),
              "invalid UTF-8 case %zu: got %lld, '%s'", i, (long long)n, dsv41_error());
    }
    CHECK(dsv41_tokenize(t, "", 0, 1, NULL, 0) == 0, "empty text gives no ids");
    CHECK(dsv41_tokenize(t, "a\0b", 3, 1, ids, 8) == 3, "an embedded NUL is text");
}

/* ---- long inputs: linear-time BPE and splitting */
static void test_long_inputs(const dsv41_tokenizer *t) {
    static const char *const unit[] = {"a", " ", "1", "\xE4\xB8\xAD", "\xF0\x9F\x98\x80", "ab",
                                       "The quick brown fox, \xE6\xAF\x95\xE8\x80\x81\xE5\xB8\x88 1314151 jumps! \n"};
    const size_t size = 100000;
    char *s = malloc(size + 64);
    for (size_t u = 0; s && u < sizeof unit / sizeof unit[0]; u++) {
        size_t n = 0, ul = strlen(unit[u]);
        while (n + ul <= size) { memcpy(s + n, unit[u], ul); n += ul; }
        int32_t *ids;
        clock_t c0 = clock();
        int64_t count = encode(t, s, n, 1, &ids);
        double secs = (double)(clock() - c0) / CLOCKS_PER_SEC;
        CHECK(count > 0 && decodes_to(t, ids, count, s, n), "long input %zu: bad encoding", u);
        CHECK(secs < 1.0 * TEST_SLOWDOWN, "long input %zu (%zu bytes) took %.2f s", u, n, secs);
        free(ids);
    }
    free(s);
}

/* ---- every added token: alone it is its id with special parsing, plain text without */
static void test_added_tokens(const dsv41_tokenizer *t) {
    json *table = json_load_file(added_path, (char[256]){0}, 256);
    const json *tokens = json_get(table, "tokens");
    CHECK(tokens && tokens->len == 1283, "v41_added_tokens.json: expected 1283 tokens");
    size_t bad_alone = 0, bad_find = 0, bad_plain = 0;
    for (size_t i = 0; tokens && i < tokens->len; i++) {
        const json *content = json_get(&tokens->items[i], "content");
        int32_t id = (int32_t)json_i64(json_get(&tokens->items[i], "id")), got[4], *plain;
        int64_t n = dsv41_tokenize(t, content->str, content->len, 1, got, 4);
        if (n != 1 || got[0] != id) bad_alone++;
        size_t len;
        const char *b = dsv41_token_bytes(t, id, &len);
        if (dsv41_tokenizer_find(t, content->str) != id || !b || len != content->len || memcmp(b, content->str, len)) bad_find++;
        int64_t pn = encode(t, content->str, content->len, 0, &plain);
        if (pn < 2 || !decodes_to(t, plain, pn, content->str, content->len)) bad_plain++;
        free(plain);
    }
    CHECK(bad_alone == 0, "%zu added tokens do not encode to their own id", bad_alone);
    CHECK(bad_find == 0, "%zu added tokens are not found by spelling or decode wrongly", bad_find);
    CHECK(bad_plain == 0, "%zu added tokens are not plain text without special parsing", bad_plain);
    CHECK(dsv41_tokenizer_find(t, "\xC4\xA0" "calls") == 10699, "vocabulary spelling Ġcalls -> 10699");
    CHECK(dsv41_tokenizer_find(t, "no such token spelling") == -1, "unknown spelling -> -1");
    json_free(table);
}

/* ---- vocabulary sizes and special flags */
static void test_tables(const dsv41_tokenizer *t41, const dsv41_tokenizer *t3) {
    CHECK(dsv41_tokenizer_n_vocab(t41) == 129280, "V4.1 test tokenizer: n_vocab %d", dsv41_tokenizer_n_vocab(t41));
    CHECK(dsv41_tokenizer_n_vocab(t3) == 128815, "V3 tokenizer: n_vocab %d", dsv41_tokenizer_n_vocab(t3));
    CHECK(tokenizer_is_special(t3, 0) && !tokenizer_is_special(t3, 128803) && tokenizer_is_special(t3, 128799),
          "V3 flags: BOS and placeholders special, <｜User｜> not");
    CHECK(tokenizer_is_special(t41, 1) && !tokenizer_is_special(t41, 128804) && tokenizer_is_special(t41, 128799) &&
              tokenizer_is_special(t41, 128821) && !tokenizer_is_special(t41, 19923),
          "V4.1 flags: inherited by spelling, new tokens special, vocabulary not");
    int32_t think = dsv41_tokenizer_find(t41, "<think>"), unthink = dsv41_tokenizer_find(t41, "</think>");
    int32_t dsml = dsv41_tokenizer_find(t41, "｜DSML｜"), eos = dsv41_tokenizer_find(t41, "<｜end▁of▁sentence｜>");
    CHECK(tokenizer_is_special(t41, think) && tokenizer_is_special(t41, unthink) && tokenizer_is_special(t41, dsml) &&
              dsv41_token_in_reply(t41, think) && dsv41_token_in_reply(t41, unthink) && dsv41_token_in_reply(t41, dsml) &&
              !dsv41_token_in_reply(t41, eos) && !dsv41_token_in_reply(t41, 128799) && dsv41_token_in_reply(t41, 19923),
          "reply text: the special tokens that mark its parts kept, the others left out, the vocabulary kept");
    size_t len;
    CHECK(dsv41_token_bytes(t41, 129280, &len) == NULL && dsv41_token_bytes(t41, -1, &len) == NULL,
          "ids outside the vocabulary have no bytes");
    CHECK(dsv41_token_bytes(t3, 128900, &len) == NULL, "the V3 file has no token 128900");
}

/* ---- streaming decode */

static int32_t byte_token(const dsv41_tokenizer *t, unsigned char b) {
    size_t len;
    for (int32_t id = 0; id < dsv41_tokenizer_n_vocab(t); id++) {
        const char *p = dsv41_token_bytes(t, id, &len);
        if (p && len == 1 && (unsigned char)p[0] == b) return id;
    }
    return -1;
}

/* Streams ids and returns the text put together (static buffer); *ok is cleared when any
 * chunk is not valid UTF-8 on its own. */
static const char *stream(const dsv41_tokenizer *t, dsv41_utf8_stream *st, const int32_t *ids, int64_t n, int *ok) {
    static char all[4096];
    char chunk[512];
    size_t at = 0;
    *ok = 1;
    for (int64_t i = 0; i < n; i++) {
        int64_t m = dsv41_detokenize(t, st, ids[i], chunk, sizeof chunk);
        if (m < 0 || at + (size_t)m >= sizeof all || dsv41_tokenize(t, chunk, (size_t)m, 0, NULL, 0) < 0) { *ok = 0; break; }
        memcpy(all + at, chunk, (size_t)m);
        at += (size_t)m;
    }
    all[at] = 0;
    return all;
}

static void test_stream(const dsv41_tokenizer *t) {
    const char *text = "h\xC3\xA9llo \xE4\xB8\xAD\xE6\x96\x87 \xF0\x9F\x98\x80\xF0\x9F\xA6\x99 ok <think>";
    int32_t *ids;
    int64_t n = encode(t, text, strlen(text), 1, &ids);
    int split = 0, ok;
    for (int64_t i = 0; i < n; i++) {
        size_t len;
        const char *b = dsv41_token_bytes(t, ids[i], &len);
        split |= b && dsv41_tokenize(t, b, len, 0, NULL, 0) < 0;
    }
    CHECK(split, "the stream text has a character split across tokens");
    dsv41_utf8_stream st = {{0}, 0};
    const char *out = stream(t, &st, ids, n, &ok);
    CHECK(ok && st.n == 0 && strcmp(out, text) == 0, "streamed text differs: '%s'", out);
    free(ids);

    int32_t c3 = byte_token(t, 0xC3), e4 = byte_token(t, 0xE4), b8 = byte_token(t, 0xB8), ad = byte_token(t, 0xAD);
    int32_t f0 = byte_token(t, 0xF0), x9f = byte_token(t, 0x9F), x80 = byte_token(t, 0x80), e0 = byte_token(t, 0xE0);
    int32_t a = byte_token(t, 'A');
    static const char *const expect[] = {"\xE4\xB8\xAD", FFFD "A", FFFD "<think>", FFFD, FFFD FFFD, ""};
    const int32_t seqs[][3] = {{e4, b8, ad}, {c3, a, -1}, {c3, 128821, -1}, {x80, -1, -1}, {e0, x80, -1}, {f0, x9f, -1}};
    const int32_t pending[] = {0, 0, 0, 0, 0, 2};
    for (size_t k = 0; k < sizeof seqs / sizeof seqs[0]; k++) {
        int64_t len = seqs[k][2] >= 0 ? 3 : seqs[k][1] >= 0 ? 2 : 1;
        st = (dsv41_utf8_stream){{0}, 0};
        out = stream(t, &st, seqs[k], len, &ok);
        CHECK(ok && strcmp(out, expect[k]) == 0 && st.n == pending[k], "stream sequence %zu: '%s', %d pending", k, out, st.n);
    }
    char small[4];
    st = (dsv41_utf8_stream){{0}, 0};
    CHECK(dsv41_detokenize(t, &st, 128821, small, sizeof small) == -1, "a too small output buffer is an error");
    CHECK(dsv41_detokenize(t, &st, 1 << 30, small, sizeof small) == -1, "an unknown id is an error");
}

/* ---- loader errors, on small generated tokenizer files */

/* Writes a byte-level tokenizer.json: the 256 byte tokens (id = byte), "ab" = 256 with merge
 * "a b", and the given normalizer, pre_tokenizer and extra model members (placed first, so a
 * member given there wins); vocab_first (NULL: none) opens the vocabulary. */
static void write_tiny(const char *path, const char *normalizer, const char *pre, const char *model_extra, const char *vocab_first) {
    FILE *f = fopen(path, "w");
    if (!f) return;
    fprintf(f, "{\"normalizer\": %s, \"pre_tokenizer\": %s, \"model\": {%s \"type\": \"BPE\", \"vocab\": {%s",
            normalizer, pre, model_extra, vocab_first ? vocab_first : "");
    for (int b = 0, extra = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || b >= 0xAE;
        unsigned cp = printable ? (unsigned)b : 256u + (unsigned)extra++;
        if (cp == '"' || cp == '\\') fprintf(f, "\"\\%c\": %d, ", cp, b);
        else if (cp < 0x80) fprintf(f, "\"%c\": %d, ", cp, b);
        else fprintf(f, "\"%c%c\": %d, ", 0xC0 | (cp >> 6), 0x80 | (cp & 0x3F), b);
    }
    fprintf(f, "\"ab\": 256}, \"merges\": [\"a b\"]}}");
    fclose(f);
}

static void test_loader(void) {
    char path[] = "/tmp/dsv41_tok_XXXXXX";
    int fd = mkstemp(path);
    CHECK(fd >= 0, "cannot make a temporary file");
    if (fd < 0) return;
    close(fd);
    static const char split_space[] = "{\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, \"behavior\": \"Isolated\", \"invert\": false}";
    static const struct {
        const char *normalizer, *pre, *model_extra, *error; /* error NULL: loads */
        const char *vocab_first;                            /* entries before the byte tokens, or NULL */
    } cases[] = {
        {"null", split_space, "", NULL, NULL},
        {"null", "null", "", NULL, NULL},
        /* a pattern that matches only empty, at the end */
        {"null", "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"$\"}, \"behavior\": \"Isolated\"}", "", NULL, NULL},
        {"null", "null", "\"type\": \"WordPiece\",", "only type BPE", NULL},
        {"null", "null", "\"byte_fallback\": true,", "byte_fallback", NULL},
        {"{\"type\": \"NFC\"}", "null", "", "normalizer", NULL},
        {"null", "{\"type\": \"Whitespace\"}", "", "not supported", NULL},
        {"null", "{\"type\": \"ByteLevel\", \"use_regex\": true}", "", "use_regex", NULL},
        {"null", "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, \"behavior\": \"Isolated\"}", "", "regex error", NULL},
        {"null", "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, \"behavior\": \"Removed\"}", "", "Isolated", NULL},
        {"null", "null", "\"merges\": [\"a zz\"],", "not in the vocabulary", NULL},
        /* an empty-string token, stored before any other (no text buffer yet), and a merge with
         * it as a part: they load, and no piece ever holds an empty symbol */
        {"null", "null", "", NULL, "\"\": 257, "},
        {"null", "null", "\"merges\": [\"a \", \"a b\"],", NULL, "\"\": 257, "},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        write_tiny(path, cases[i].normalizer, cases[i].pre, cases[i].model_extra, cases[i].vocab_first);
        dsv41_tokenizer *t = dsv41_tokenizer_load(path);
        if (cases[i].error) {
            CHECK(!t && strstr(dsv41_error(), cases[i].error) && strstr(dsv41_error(), path), "loader case %zu: '%s'", i,
                  t ? "loaded" : dsv41_error());
        } else {
            int32_t ids[8];
            int64_t n = t ? dsv41_tokenize(t, "ab ab", 5, 0, ids, 8) : -1;
            CHECK(n == 3 && ids[0] == 256 && ids[1] == ' ' && ids[2] == 256, "loader case %zu: 'ab ab' encodes wrongly", i);
        }
        dsv41_tokenizer_free(t);
    }
    FILE *f = fopen(path, "w");
    if (f) { fputs("{\"model\": {", f); fclose(f); }
    CHECK(!dsv41_tokenizer_load(path) && strstr(dsv41_error(), "JSON"), "truncated JSON: '%s'", dsv41_error());
    remove(path);
    CHECK(!dsv41_tokenizer_load("/nonexistent/tokenizer.json") && strstr(dsv41_error(), "/nonexistent/tokenizer.json"),
          "a missing file names itself: '%s'", dsv41_error());
    CHECK(!dsv41_tokenizer_load_with_added(tok_path, "/nonexistent/added.json") && strstr(dsv41_error(), "added.json"),
          "a missing added-token table names itself: '%s'", dsv41_error());
}

/* ---- chat encoding */

/* The raw text of each element of the top-level array in s (strings skipped when matching
 * brackets); returns how many were found, at most cap. */
static size_t array_elements(const char *s, size_t n, size_t *start, size_t *len, size_t cap) {
    size_t count = 0, i = 0;
    while (i < n && s[i] != '[') i++;
    for (i++; i < n && count < cap;) {
        while (i < n && (s[i] == ' ' || s[i] == '\n' || s[i] == '\r' || s[i] == '\t' || s[i] == ',')) i++;
        if (i >= n || s[i] == ']') break;
        size_t b = i;
        int depth = 0, in_str = 0;
        for (; i < n; i++) {
            if (in_str) { if (s[i] == '\\') i++; else if (s[i] == '"') in_str = 0; continue; }
            if (s[i] == '"') in_str = 1;
            else if (s[i] == '{' || s[i] == '[') depth++;
            else if ((s[i] == '}' || s[i] == ']') && --depth == 0) { i++; break; }
        }
        start[count] = b;
        len[count++] = i - b;
    }
    return count;
}

static int ends_with(const char *s, const char *suffix, size_t n) {
    size_t sl = strlen(s);
    return sl >= n && memcmp(s + sl - n, suffix, n) == 0;
}

/* Checks one rendered case against its "expect" object. */
static void check_expect(const dsv41_tokenizer *t, const char *name, const char *out, const json *e) {
    const json *error = json_get(e, "error"), *exact = json_get(e, "exact"), *derived = json_get(e, "exact_derived");
    const json *end = json_get(e, "endswith"), *has = json_get(e, "contains"), *hasnt = json_get(e, "not_contains");
    if (error && error->num != 0) {
        CHECK(!out && !strchr(dsv41_error(), '\n') && strlen(dsv41_error()) > 0, "chat %s: expected an error", name);
        return;
    }
    CHECK(out != NULL, "chat %s: %s", name, out ? "" : dsv41_error());
    if (!out) return;
    CHECK(!exact || strcmp(out, exact->str) == 0, "chat %s: not the exact text", name);
    CHECK(!derived || strcmp(out, derived->str) == 0, "chat %s: not the derived exact text", name);
    CHECK(!end || ends_with(out, end->str, end->len), "chat %s: wrong ending", name);
    for (size_t k = 0; has && k < has->len; k++) CHECK(strstr(out, has->items[k].str), "chat %s: misses contains[%zu]", name, k);
    for (size_t k = 0; hasnt && k < hasnt->len; k++) CHECK(!strstr(out, hasnt->items[k].str), "chat %s: has not_contains[%zu]", name, k);
    if (json_get(e, "ids")) {
        int32_t *ids;
        int64_t n = encode(t, out, strlen(out), 1, &ids);
        CHECK(ids_match(ids, n, json_get(e, "ids")), "chat %s: the prompt tokenizes to other ids", name);
        free(ids);
    }
}

static void test_chat_vectors(const dsv41_tokenizer *t) {
    char path[1100], err[256];
    size_t len, start[256], lens[256];
    shared_path(path, sizeof path, "chat_vectors.json");
    char *text = test_read_file(path, &len);
    CHECK(text != NULL, "shared data missing: %s", path);
    if (!text) return;
    size_t n = array_elements(text, len, start, lens, 256);
    json *all = json_parse(text, len, err, sizeof err);
    CHECK(all && all->type == JSON_ARR && all->len == n && n > 0, "chat_vectors.json: %zu cases sliced", n);
    for (size_t i = 0; all && i < n && i < all->len; i++) {
        const json *c = &all->items[i], *name = json_get(c, "name");
        char *out = dsv41_chat_render(text + start[i], lens[i]);
        check_expect(t, name ? name->str : "?", out, json_get(c, "expect"));
        free(out);
    }
    json_free(all);
    free(text);
}

/* Own chat cases: the release encoder's test assertions that chat_vectors.json leaves out,
 * and our rules for bad input. expect: the exact text, or "!" + a substring that must appear,
 * or "$" + the ending, or NULL for an error. */
static void test_chat_own(void) {
    static const struct {
        const char *json, *expect;
    } cases[] = {
        {"{\"messages\": [{\"role\": \"system\", \"content\": \"sys\"}, {\"role\": \"user\", \"content\": \"q1\"},"
         " {\"role\": \"assistant\", \"content\": \"a1\", \"reasoning_content\": \"r1\"}, {\"role\": \"system\", \"content\": \"mid sys\"}],"
         " \"options\": {\"thinking_mode\": \"thinking\", \"reasoning_effort\": 88}}",
         "<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 88 (range 1-100, the higher the value, the more thorough the "
         "reasoning)\n\nsys<｜User｜>q1<｜Assistant｜></think>a1<｜end▁of▁sentence｜><｜System｜>mid sys<｜Assistant｜><think>"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"q1\"}, {\"role\": \"assistant\", \"content\": \"a1\", \"reasoning_content\": \"r1\"},"
         " {\"role\": \"user\", \"content\": \"q2\"}], \"options\": {\"thinking_mode\": \"thinking\", \"reasoning_effort\": \"low\"}}",
         "<｜begin▁of▁sentence｜><｜System｜>Reasoning Effort: 50 (range 1-100, the higher the value, the more thorough the "
         "reasoning)\n\n<｜User｜>q1<｜Assistant｜></think>a1<｜end▁of▁sentence｜><｜User｜>q2<｜Assistant｜><think>"},
        /* tool results follow the order of the calls, and merge with a following user message */
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": ["
         "{\"id\": \"b\", \"function\": {\"name\": \"f\", \"arguments\": {}}}, {\"id\": \"a\", \"function\": {\"name\": \"g\", \"arguments\": \"[1]\"}}]},"
         " {\"role\": \"tool\", \"tool_call_id\": \"a\", \"content\": \"A\"}, {\"role\": \"tool\", \"tool_call_id\": \"b\", \"content\": [{\"type\": \"text\", \"text\": \"B\"}, {\"type\": \"image\"}]},"
         " {\"role\": \"user\", \"content\": \"more\"}], \"options\": {\"thinking_mode\": \"chat\"}}",
         "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜></think>\n\n<｜DSML｜ calls>\n<｜DSML｜ invoke name=\"f\">\n\n</｜DSML｜ invoke>\n"
         "<｜DSML｜ invoke name=\"g\">\n<｜DSML｜ parameter name=\"arguments\" string=\"true\">[1]</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n"
         "</｜DSML｜ calls><｜end▁of▁sentence｜><｜User｜><tool_result>B\n\n[Unsupported image]</tool_result>\n\n<tool_result>A</tool_result>"
         "\n\nmore<｜Assistant｜></think>"},
        {"{\"messages\": [{\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"id\": \"c\", \"function\": {\"name\": \"f\", \"arguments\": {}}},"
         " {\"id\": \"a\", \"function\": {\"name\": \"f\", \"arguments\": {}}}, {\"id\": \"b\", \"function\": {\"name\": \"f\", \"arguments\": {}}}]},"
         " {\"role\": \"tool\", \"tool_call_id\": \"a\", \"content\": \"A\"}, {\"role\": \"tool\", \"tool_call_id\": \"b\", \"content\": \"B\"},"
         " {\"role\": \"tool\", \"tool_call_id\": \"c\", \"content\": \"C\"}], \"options\": {\"thinking_mode\": \"chat\"}}",
         "$<｜User｜><tool_result>C</tool_result>\n\n<tool_result>A</tool_result>\n\n<tool_result>B</tool_result><｜Assistant｜></think>"},
        /* non-string arguments as Python's json.dumps writes them; a doubly encoded JSON string */
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": \"\", \"tool_calls\": [{\"function\": "
         "{\"name\": \"f\", \"arguments\": {\"x\": 1.0, \"y\": 1e-05, \"z\": [true, null, \"\\u00e9\\n\"], \"s\": \"a\\\"b\"}}}, "
         "{\"function\": {\"name\": \"g\", \"arguments\": \"\\\"{\\\\\\\"k\\\\\\\": 2}\\\"\"}}]}], \"options\": {\"thinking_mode\": \"chat\"}}",
         "$<｜DSML｜ parameter name=\"x\" string=\"false\">1.0</｜DSML｜ parameter>\n<｜DSML｜ parameter name=\"y\" string=\"false\">1e-05</｜DSML｜ parameter>\n"
         "<｜DSML｜ parameter name=\"z\" string=\"false\">[true, null, \"é\\n\"]</｜DSML｜ parameter>\n"
         "<｜DSML｜ parameter name=\"s\" string=\"true\">a\"b</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n"
         "<｜DSML｜ invoke name=\"g\">\n<｜DSML｜ parameter name=\"k\" string=\"false\">2</｜DSML｜ parameter>\n</｜DSML｜ invoke>\n"
         "</｜DSML｜ calls><｜end▁of▁sentence｜>"},
        /* case-level tools without a system message: an empty one is put in front */
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}], \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}],"
         " \"options\": {\"thinking_mode\": \"chat\"}}",
         "!<｜begin▁of▁sentence｜><｜System｜>\n\n## Tools\n\n"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"latest_reminder\", \"content\": \"today\"}], \"options\": {\"thinking_mode\": \"chat\"}}",
         "<｜begin▁of▁sentence｜><｜User｜>q<｜Assistant｜></think><｜latest_reminder｜>today"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"q\", \"task\": \"action\"}], \"options\": {\"thinking_mode\": \"thinking\", \"reasoning_effort\": \"max\"}}",
         "$<｜User｜>q<｜Assistant｜><think><｜action｜>"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}, {\"role\": \"assistant\", \"content\": \"a\", \"task\": \"title\"}], \"options\": {\"thinking_mode\": \"chat\"}}",
         "$a<｜end▁of▁sentence｜><｜title｜>"},
        {"{\"messages\": [{\"role\": \"developer\", \"content\": \"dev\", \"response_format\": {\"type\": \"json\"}}], \"options\": {\"thinking_mode\": \"chat\"}}",
         "<｜begin▁of▁sentence｜><｜User｜>dev\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n"
         "{\"type\": \"json\"}<｜Assistant｜></think>"},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}]}", "$<｜User｜>q<｜Assistant｜><think>"},
        {"{\"messages\": []}", "<｜begin▁of▁sentence｜>"},
        /* errors */
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"hi <｜deepseek_image｜>\"}], \"options\": {\"thinking_mode\": \"chat\"}}", NULL},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}], \"options\": {\"thinking_mode\": \"fast\"}}", NULL},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}], \"options\": {\"temperature\": 1}}", NULL},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"q\"}], \"options\": {\"reasoning_effort\": 75.0}}", NULL},
        {"{\"messages\": [{\"role\": \"user\", \"content\": \"q\", \"task\": \"nap\"}]}", NULL},
        {"{\"messages\": [{\"role\": \"developer\", \"content\": \"\"}]}", NULL},
        {"{\"messages\": [{\"role\": \"assistant\", \"tool_calls\": [{\"function\": {\"arguments\": \"{}\"}}]}]}", NULL},
        {"{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"audio\"}]}]}", NULL},
        {"{\"messages\": [{\"role\": \"system\", \"content\": \"s\", \"tools\": [{\"function\": {\"name\": \"f\"}}]}],"
         " \"tools\": [{\"function\": {\"name\": \"g\"}}]}", NULL},
        {"{\"messages\": {\"role\": \"user\"}}", NULL},
        {"{\"messages\": [\"user\"]}", NULL},
        {"{\"messages\": [{\"role\": \"user\", \"content\": 5}]}", NULL},
        {"{\"messages\": [", NULL},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *out = dsv41_chat_render(cases[i].json, strlen(cases[i].json));
        const char *e = cases[i].expect;
        if (!e) CHECK(!out && !strchr(dsv41_error(), '\n'), "own chat case %zu: expected an error", i);
        else if (!out) CHECK(0, "own chat case %zu: %s", i, dsv41_error());
        else if (e[0] == '!') CHECK(strstr(out, e + 1) != NULL, "own chat case %zu: missing text in '%s'", i, out);
        else if (e[0] == '$') CHECK(ends_with(out, e + 1, strlen(e + 1)), "own chat case %zu: wrong ending in '%s'", i, out);
        else CHECK(strcmp(out, e) == 0, "own chat case %zu: got '%s'", i, out);
        free(out);
    }
}

int main(void) {
    shared_path(tok_path, sizeof tok_path, "deepseek-v3/tokenizer.json");
    shared_path(added_path, sizeof added_path, "v41_added_tokens.json");
    dsv41_tokenizer *t41 = dsv41_tokenizer_load_with_added(tok_path, added_path);
    CHECK(t41 != NULL, "V4.1 test tokenizer: %s", dsv41_error());
    dsv41_tokenizer *t3 = dsv41_tokenizer_load(tok_path);
    CHECK(t3 != NULL, "V3 tokenizer: %s", dsv41_error());
    if (t41 && t3) {
        test_vectors(t41, t3);
        test_own_ids(t41);
        test_invalid_utf8(t41);
        test_long_inputs(t41);
        test_added_tokens(t41);
        test_tables(t41, t3);
        test_stream(t41);
        test_chat_vectors(t41);
    }
    test_loader();
    test_chat_own();
    dsv41_tokenizer_free(t41);
    dsv41_tokenizer_free(t3);
    return test_summary();
}
