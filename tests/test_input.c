/* test_input.c - library calls that hostile or extreme input once broke: JSON numbers that do
 * not fit the integer asked for, a whitespace run past PCRE2's default match limit, NaN
 * logits, and cancelling a forward call. Each case failed (or was undefined) before its fix;
 * the expectations are stated independently of the code's current output. */
#include <math.h>
#include <string.h>
#include <unistd.h>

#include "json.h"
#include "model.h"
#include "testing.h"

/* ---- integers from JSON: a float, NaN or an out-of-range literal is refused, never cast */
static void test_json_ints(void) {
    static const char *refused[] = {"1e30", "NaN", "1e300", "-1e300", "1.5", "Infinity", "18446744073709551615", "\"7\""};
    char err[128];
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++) {
        json *j = json_parse(refused[i], strlen(refused[i]), err, sizeof err);
        int64_t v = 0;
        CHECK(j && json_int(j, INT64_MIN, INT64_MAX, &v) == -1 && json_i64(j) == INT64_MIN,
              "%s is not an int64 (got %lld)", refused[i], (long long)v);
        json_free(j);
    }
    json *j = json_parse("4294967298", 10, err, sizeof err); /* 2^32 + 2 would truncate to 2 as an int32 */
    int64_t v = 0;
    CHECK(j && json_int(j, 0, INT32_MAX, &v) == -1 && json_i64(j) == 4294967298LL, "2^32+2 is no int32");
    json_free(j);
    j = json_parse("-9223372036854775807", 20, err, sizeof err);
    CHECK(j && json_int(j, INT64_MIN, 0, &v) == 0 && v == -INT64_MAX, "a negative int64 reads exactly");
    json_free(j);
}

/* ---- a byte-level tokenizer with the V3 pre-tokenizer regex and no merges, written to a file */
static const char *write_tokenizer(char *path, size_t cap) {
    snprintf(path, cap, "/tmp/dsv41-input-XXXXXX");
    int fd = mkstemp(path);
    FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (!f) return NULL;
    fputs("{\"version\":\"1.0\",\"added_tokens\":[],\"normalizer\":null,\"pre_tokenizer\":{\"type\":\"Sequence\","
          "\"pretokenizers\":[{\"type\":\"Split\",\"pattern\":{\"Regex\":\"[^\\\\r\\\\n\\\\p{L}\\\\p{P}\\\\p{S}]?[\\\\p{L}"
          "\\\\p{M}]+| ?[\\\\p{P}\\\\p{S}]+[\\\\r\\\\n]*|\\\\s*[\\\\r\\\\n]+|\\\\s+(?!\\\\S)|\\\\s+\"},\"behavior\":"
          "\"Isolated\",\"invert\":false},{\"type\":\"ByteLevel\",\"add_prefix_space\":false,\"trim_offsets\":true,"
          "\"use_regex\":false}]},\"post_processor\":null,\"decoder\":{\"type\":\"ByteLevel\"},\"model\":{\"type\":"
          "\"BPE\",\"vocab\":{",
          f);
    /* the GPT-2 byte map: printable Latin-1 stands for itself, the rest for U+0100.. */
    int next = 256;
    for (int b = 0; b < 256; b++) {
        int printable = (b >= 0x21 && b <= 0x7E) || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
        int cp = printable ? b : next++;
        char u[8];
        if (cp < 0x80) snprintf(u, sizeof u, "%c", cp);
        else snprintf(u, sizeof u, "%c%c", 0xC0 | (cp >> 6), 0x80 | (cp & 0x3F));
        if (cp == '"' || cp == '\\') fprintf(f, "%s\"\\%s\":%d", b ? "," : "", u, b);
        else fprintf(f, "%s\"%s\":%d", b ? "," : "", u, b);
    }
    fputs("},\"merges\":[]}}", f);
    fclose(f);
    return path;
}

/* A 10 MB whitespace run is valid text: before, PCRE2's default match limit refused it. */
static void test_long_whitespace(void) {
    char path[64];
    dsv41_tokenizer *t = write_tokenizer(path, sizeof path) ? dsv41_tokenizer_load(path) : NULL;
    CHECK(t != NULL, "the test tokenizer loads: %s", t ? "" : dsv41_error());
    unlink(path);
    if (!t) return;
    size_t n = 10u << 20;
    char *s = malloc(n + 1);
    memset(s, ' ', n);
    s[n] = 'x';
    /* \s+(?!\S) takes all but the space before x; " x" is one piece; no merges: one id per byte */
    int64_t got = dsv41_tokenize(t, s, n + 1, 0, NULL, 0);
    CHECK(got == (int64_t)n + 1, "10 MB of spaces and x tokenize to one id per byte: %lld %s", (long long)got,
          got < 0 ? dsv41_error() : "");
    free(s);
    dsv41_tokenizer_free(t);
}

/* ---- NaN logits are an error, not a silent token 0 */
static void test_nan_logits(void) {
    dsv41_model *m = dsv41_model_builtin();
    dsv41_session *s = m ? dsv41_session_new(m) : NULL;
    if (!s) { CHECK(0, "the built-in model: %s", dsv41_error()); dsv41_model_free(m); return; }
    float *logits = malloc((size_t)m->cfg.vocab_size * sizeof *logits);
    m->norm[0] = NAN; /* one non-finite weight, as a corrupt checkpoint holds */
    int32_t ids[3] = {2, 17, 47};
    int rc = dsv41_session_forward(s, ids, 3, logits, NULL);
    CHECK(rc == -1 && strstr(dsv41_error(), "NaN"), "NaN logits fail the call: rc %d, '%s'", rc, dsv41_error());
    free(logits);
    dsv41_session_free(s);
    dsv41_model_free(m);
}

/* ---- cancelling: from the progress callback, as a signal handler or another thread would */
typedef struct {
    dsv41_session *s;
    int32_t at; /* cancel after this many layers */
} cancel_at;

static void cancel_progress(void *ctx, int32_t done, int32_t total) {
    (void)total;
    cancel_at *c = ctx;
    if (done == c->at) dsv41_session_cancel(c->s);
}

static void test_cancel(void) {
    dsv41_model *m = dsv41_model_builtin();
    if (!m) { CHECK(0, "the built-in model: %s", dsv41_error()); return; }
    int32_t V = m->cfg.vocab_size, ids[8] = {2, 17, 47, 5, 9, 33, 12, 60};
    float *want = malloc((size_t)V * sizeof *want), *got = malloc((size_t)V * sizeof *got);
    dsv41_session *ref = dsv41_session_new(m), *s = dsv41_session_new(m);
    dsv41_session_forward(ref, ids, 6, want, NULL); /* a fresh session's prefill */

    cancel_at c = {s, 2};
    dsv41_session_set_progress(s, cancel_progress, &c);
    int rc = dsv41_session_forward(s, ids, 6, got, NULL);
    CHECK(rc == -1 && strstr(dsv41_error(), "cancelled") && dsv41_session_pos(s) == 0,
          "a cancelled prefill fails and leaves the session empty: rc %d, pos %d", rc, dsv41_session_pos(s));
    dsv41_session_set_progress(s, NULL, NULL);
    rc = dsv41_session_forward(s, ids, 6, got, NULL);
    CHECK(rc == 0 && !memcmp(got, want, (size_t)V * sizeof *got), "after it, a prefill equals a fresh session's");

    dsv41_session_cancel(s); /* no call running: no effect */
    rc = dsv41_session_forward(s, ids + 6, 1, got, NULL);
    CHECK(rc == 0 && dsv41_session_pos(s) == 7, "a request made between calls stops nothing");

    c.at = 1; /* during an append of two tokens: the first runs whole, the second never starts */
    dsv41_session_set_progress(s, cancel_progress, &c);
    rc = dsv41_session_forward(s, ids, 2, got, NULL);
    CHECK(rc == -1 && dsv41_session_pos(s) == 8, "a cancelled append keeps the tokens fed: pos %d", dsv41_session_pos(s));
    free(want);
    free(got);
    dsv41_session_free(ref);
    dsv41_session_free(s);
    dsv41_model_free(m);
}

int main(void) {
    test_json_ints();
    test_long_whitespace();
    test_nan_logits();
    test_cancel();
    return test_summary();
}
