/* test_grammar.c - constrained decoding on the real V4.1 tokenizer: grammars accept and refuse
 * what their text says, token by token and byte by byte (tokens that end inside a character);
 * every schema of tests/data/schema_cases.json accepts its valid documents and refuses its
 * invalid ones (cli_structured.sh checks those labels with python3-jsonschema); masks agree with
 * one-token checks on a fresh constraint (which walks the token's bytes, not the trie); stops
 * are held back until the grammar can end; the trigger frees the reply before it; bounded
 * schemas end by themselves under random logits at temperature 1; a copy and the draft check
 * walk as the original; bad grammars and schemas name the problem. Prints the per-token mask
 * time and a schema's compile time. */
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "testing.h"

static dsv41_tokenizer *tok;
static int32_t n_vocab, eos, byte_tok[256];

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static dsv41_grammar *grammar(const char *text) { return dsv41_grammar_new(tok, text, strlen(text)); }

/* Feeds text through a new constraint of g, as the tokenizer splits it (bytes: one byte token
 * each). Returns -1 when a token is refused, else the status at the end. */
static int feed(const dsv41_grammar *g, const char *text, size_t len, int bytes) {
    dsv41_constraint *c = dsv41_constraint_new(g, &eos, 1, -1);
    int32_t ids[4096];
    int64_t n = 0;
    if (bytes)
        for (size_t i = 0; i < len && n < 4096; i++) ids[n++] = byte_tok[(unsigned char)text[i]];
    else n = dsv41_tokenize(tok, text, len, 0, ids, 4096);
    int rc = c && n >= 0 && n <= 4096 ? 0 : -2;
    for (int64_t i = 0; i < n && rc == 0; i++)
        if (dsv41_constraint_accept(c, ids[i])) rc = -1;
    if (rc == 0) rc = dsv41_constraint_status(c);
    dsv41_constraint_free(c);
    return rc;
}

/* accepted and complete, both ways of splitting */
static void expect_match(const dsv41_grammar *g, const char *what, const char *text, int want) {
    for (int bytes = 0; bytes < 2; bytes++) {
        int st = feed(g, text, strlen(text), bytes);
        int got = st > DSV41_CONSTRAINT_OPEN;
        CHECK(got == want, "%s: '%s' %s (status %d, %s)", what, text, want ? "refused" : "accepted", st, bytes ? "bytes" : "tokens");
    }
}

static void test_grammars(void) {
    static const struct {
        const char *g;
        const char *yes[6], *no[6];
    } cases[] = {
        {"root ::= \"ab\" | \"cd\"", {"ab", "cd"}, {"a", "abc", "ac", ""}},
        {"# a comment\nroot ::= word (\" \" word)*  # trailing\nword ::= [a-z]+\n", {"a", "ab cd", "x y z"}, {"", " a", "a  b", "A"}},
        {"root ::= [^a-c]{2,3}", {"dd", "zz!", "éé", "字字字"}, {"a", "d", "dddd", "da"}},
        {"root ::= \"x\"{3}", {"xxx"}, {"xx", "xxxx"}},
        {"root ::= \"x\"{2,}", {"xx", "xxxxxxxx"}, {"x"}},
        {"root ::= (\"a\" | \"b\")? \"c\"", {"c", "ac", "bc"}, {"abc", "a"}},
        {"root ::= [\\u00e9\\x41-\\x43] \"\\n\" \"\\\"\\\\\"", {"é\n\"\\", "A\n\"\\"}, {"D\n\"\\", "e\n\"\\"}},
        {"root ::= . .", {"ab", "\n字", "😀x"}, {"a", "abc"}},
        {"root ::= [😀-😂]", {"😀", "😁", "😂"}, {"😃", "a"}},
        {"root ::= a\na ::= \"(\" a \")\" | \"\"\n", {"", "()", "((()))"}, {"(()", ")"}},
        {"root ::=\n  \"one\"\n  | \"two\"\nother ::= \"x\"", {"one", "two"}, {"x", "onetwo"}},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dsv41_grammar *g = grammar(cases[i].g);
        CHECK(g != NULL, "grammar %zu: %s", i, dsv41_error());
        if (!g) continue;
        for (int k = 0; k < 6 && cases[i].yes[k]; k++) expect_match(g, cases[i].g, cases[i].yes[k], 1);
        for (int k = 0; k < 6 && cases[i].no[k]; k++) expect_match(g, cases[i].g, cases[i].no[k], 0);
        dsv41_grammar_free(g);
    }
}

/* Token terminals, and text holding an added token's spelling: the DSML marker is an added
 * token, and a grammar written from the chat format's text must accept what the model emits. */
static void test_tokens(void) {
    int32_t think = dsv41_tokenizer_find(tok, "<think>"), end = dsv41_tokenizer_find(tok, "</think>");
    int32_t dsml = dsv41_tokenizer_find(tok, "｜DSML｜");
    CHECK(think >= 0 && end >= 0 && dsml >= 0, "the V4.1 added tokens");
    dsv41_grammar *g = grammar("root ::= <think> \"x\" </think> <[1]>? \"<｜DSML｜ calls>\"");
    CHECK(g != NULL, "token terminals: %s", dsv41_error());
    if (!g) return;
    dsv41_constraint *c = dsv41_constraint_new(g, NULL, 0, -1);
    int32_t x = byte_tok['x'];
    CHECK(dsv41_constraint_allows(c, think) && !dsv41_constraint_allows(c, end), "<think> first");
    CHECK(dsv41_constraint_accept(c, think) == 0 && dsv41_constraint_accept(c, x) == 0 && dsv41_constraint_accept(c, end) == 0,
          "<think> x </think>: %s", dsv41_error());
    CHECK(dsv41_constraint_allows(c, 1) && dsv41_constraint_allows(c, byte_tok['<']) && !dsv41_constraint_allows(c, think),
          "then <[1]> or the literal");
    dsv41_constraint *d = dsv41_constraint_new(g, NULL, 0, -1);
    CHECK(d && dsv41_constraint_copy(d, c) == 0, "copy: %s", dsv41_error());
    /* the marker as the model emits it (the added token) and as plain bytes */
    int32_t as_token[] = {byte_tok['<'], dsml}, calls[8];
    int64_t nc = dsv41_tokenize(tok, " calls>", 7, 0, calls, 8);
    int ok = 1;
    for (int i = 0; i < 2; i++) ok &= dsv41_constraint_accept(c, as_token[i]) == 0;
    for (int64_t i = 0; i < nc; i++) ok &= dsv41_constraint_accept(c, calls[i]) == 0;
    CHECK(ok && dsv41_constraint_status(c) == DSV41_CONSTRAINT_DONE, "the DSML marker as its added token");
    const char *spelled = "<｜DSML｜ calls>";
    for (const char *p = spelled; *p; p++) ok &= dsv41_constraint_accept(d, byte_tok[(unsigned char)*p]) == 0;
    CHECK(ok && dsv41_constraint_status(d) == DSV41_CONSTRAINT_DONE, "the DSML marker as bytes");
    dsv41_constraint_free(c);
    dsv41_constraint_free(d);
    dsv41_grammar_free(g);
    /* an added token never matches text: "<think>" spelled in a literal's class does not admit it */
    g = grammar("root ::= [<a-z>/]+");
    c = dsv41_constraint_new(g, NULL, 0, -1);
    CHECK(c && !dsv41_constraint_allows(c, think) && dsv41_constraint_allows(c, byte_tok['<']), "added tokens are not text");
    dsv41_constraint_free(c);
    dsv41_grammar_free(g);
}

static void test_bad_grammars(void) {
    static const struct {
        const char *g, *err;
    } cases[] = {
        {"root ::= \"a", "1:10: a literal is not closed"},
        {"root ::= a", "no rule defines a"},
        {"x ::= \"a\"", "no rule 'root'"},
        {"root ::= root \"a\" | \"b\"", "left-recursive"},
        {"root ::= (\"\")*", "left-recursive"},
        {"root ::= \"a\"{3,2}", "n below m"},
        {"root ::= \"a\"{20000}", "above 10000"},
        {"root ::= \"\\q\"", "unknown escape"},
        {"root ::= [^\\x00-\\U0010FFFF]", "no character"},
        {"root ::= <nosuchtoken>", "no token is spelled"},
        {"root ::= <[999999]>", "outside the vocabulary"},
        {"root ::= \"a\"\nroot ::= \"b\"", "2:1: a rule is defined twice"},
        {"root ::= \"a\" )", "1:14: expected a rule"},
        {"root ::= \"a\" @", "1:14: unexpected character"},
        {"root ::= [b-a]", "backwards"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        dsv41_grammar *g = grammar(cases[i].g);
        CHECK(!g && strstr(dsv41_error(), cases[i].err) && strstr(dsv41_error(), "grammar: "), "'%.40s': want '%s', got '%s'",
              cases[i].g, cases[i].err, g ? "(compiled)" : dsv41_error());
        dsv41_grammar_free(g);
    }
    char deep[400] = "root ::= ";
    memset(deep + 9, '(', 300);
    dsv41_grammar *g = grammar(deep);
    CHECK(!g && strstr(dsv41_error(), "deeper than 200"), "300 nested groups: %s", dsv41_error());
    g = dsv41_grammar_new(tok, "root ::= \"\xff\"", 13);
    CHECK(!g && strstr(dsv41_error(), "not UTF-8"), "invalid UTF-8: %s", dsv41_error());
    /* a state past the stack bound is a dead end with an error, never an unbounded step */
    size_t cap = 5000 * 6 + 16;
    char *big = malloc(cap);
    int n = snprintf(big, cap, "root ::=");
    for (int k = 0; k < 5000; k++) n += snprintf(big + n, cap - (size_t)n, " \"a\"*");
    g = grammar(big);
    dsv41_constraint *c = g ? dsv41_constraint_new(g, NULL, 0, -1) : NULL;
    float *logits = calloc((size_t)n_vocab, sizeof *logits);
    CHECK(g && !c && strstr(dsv41_error(), "ambiguous"), "5000 nullable repetitions: %s", dsv41_error());
    free(big);
    free(logits);
    dsv41_constraint_free(c);
    dsv41_grammar_free(g);
}

static void write_str(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        if (ch == '"' || ch == '\\') fprintf(f, "\\%c", ch);
        else if (ch < 0x20) fprintf(f, "\\u%04x", ch);
        else fputc(ch, f);
    }
    fputc('"', f);
}

/* v as JSON text to f (the case file holds schemas as values; the compiler reads text) */
static void json_write(FILE *f, const dsv41_json *v) {
    dsv41_json_type t = dsv41_json_type_of(v);
    int is_int;
    double x = dsv41_json_num(v, &is_int);
    if (t == DSV41_JSON_NULL) fputs("null", f);
    else if (t == DSV41_JSON_BOOL) fputs(x != 0 ? "true" : "false", f);
    else if (t == DSV41_JSON_NUM) fprintf(f, is_int ? "%.0f" : "%.17g", x);
    else if (t == DSV41_JSON_STR) write_str(f, dsv41_json_str(v), dsv41_json_len(v));
    else {
        fputc(t == DSV41_JSON_OBJ ? '{' : '[', f);
        for (size_t i = 0; i < dsv41_json_len(v); i++) {
            if (i) fputc(',', f);
            if (t == DSV41_JSON_OBJ) {
                write_str(f, dsv41_json_key(v, i), strlen(dsv41_json_key(v, i)));
                fputc(':', f);
            }
            json_write(f, dsv41_json_at(v, i));
        }
        fputc(t == DSV41_JSON_OBJ ? '}' : ']', f);
    }
}

/* The schema at key "schema" of case cs compiled for the tokenizer, or NULL (error set). */
static dsv41_grammar *case_grammar(const dsv41_json *cs, char **gtext) {
    char *stext = NULL;
    size_t slen = 0;
    FILE *m = open_memstream(&stext, &slen);
    json_write(m, dsv41_json_get(cs, "schema"));
    fclose(m);
    *gtext = dsv41_schema_grammar(stext, slen, NULL);
    free(stext);
    return *gtext ? grammar(*gtext) : NULL;
}

/* the schema table (valid / invalid / outside), and the bad schemas */
static void test_schemas(void) {
    size_t len;
    char *text = test_read_file("tests/data/schema_cases.json", &len);
    dsv41_json *root = text ? dsv41_json_parse(text, len) : NULL;
    CHECK(root != NULL, "read tests/data/schema_cases.json: %s", text ? dsv41_error() : "missing");
    if (!root) { free(text); return; }
    const dsv41_json *cases = dsv41_json_get(root, "cases"), *bad = dsv41_json_get(root, "bad");
    for (size_t i = 0; i < dsv41_json_len(cases); i++) {
        const dsv41_json *cs = dsv41_json_at(cases, i);
        char *gtext;
        dsv41_grammar *g = case_grammar(cs, &gtext);
        CHECK(g != NULL, "schema case %zu: %s", i, dsv41_error());
        static const char *const lists[] = {"valid", "invalid", "outside"};
        for (int l = 0; g && l < 3; l++) {
            const dsv41_json *docs = dsv41_json_get(cs, lists[l]);
            for (size_t k = 0; k < dsv41_json_len(docs); k++) {
                const dsv41_json *d = dsv41_json_at(docs, k);
                for (int bytes = 0; bytes < 2; bytes++) {
                    int st = feed(g, dsv41_json_str(d), dsv41_json_len(d), bytes);
                    CHECK((st > DSV41_CONSTRAINT_OPEN) == (l == 0), "schema case %zu, %s document '%s': status %d (%s)\n%s", i,
                          lists[l], dsv41_json_str(d), st, bytes ? "bytes" : "tokens", gtext);
                }
            }
        }
        free(gtext);
        dsv41_grammar_free(g);
    }
    for (size_t i = 0; i < dsv41_json_len(bad); i++) {
        const dsv41_json *cs = dsv41_json_at(bad, i);
        char *gtext;
        dsv41_grammar *g = case_grammar(cs, &gtext);
        const char *want = dsv41_json_str(dsv41_json_get(cs, "error"));
        CHECK(!gtext && strstr(dsv41_error(), want) && strstr(dsv41_error(), "json schema: "), "bad schema %zu: want '%s', got '%s'", i,
              want, gtext ? "(compiled)" : dsv41_error());
        free(gtext);
        dsv41_grammar_free(g);
    }
    dsv41_json_free(root);
    free(text);
}

/* stop gating, the trigger, copies and the draft check */
static void test_stops(void) {
    int32_t end = dsv41_tokenizer_find(tok, "</think>"), a = byte_tok['a'], b = byte_tok['b'], z = byte_tok['z'];
    dsv41_grammar *g = grammar("root ::= \"a\" \"b\"?");
    dsv41_constraint *c = dsv41_constraint_new(g, &eos, 1, -1);
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    for (int32_t i = 0; i < n_vocab; i++) logits[i] = 0.0f;
    int32_t ab;
    CHECK(dsv41_tokenize(tok, "ab", 2, 0, &ab, 1) == 1, "'ab' is one token");
    CHECK(dsv41_constraint_mask(c, logits, n_vocab) == 2 && logits[a] == 0.0f && logits[ab] == 0.0f && isinf(logits[eos]),
          "only 'a' and 'ab' first, EOS held back");
    CHECK(dsv41_constraint_accept(c, eos) != 0 && dsv41_constraint_status(c) == DSV41_CONSTRAINT_OPEN, "EOS refused while open");
    CHECK(dsv41_constraint_accept(c, a) == 0 && dsv41_constraint_status(c) == DSV41_CONSTRAINT_CAN_END, "after 'a' it may end");
    CHECK(dsv41_constraint_allows(c, eos) && dsv41_constraint_allows(c, b) && !dsv41_constraint_allows(c, a), "EOS or 'b'");
    CHECK(dsv41_constraint_accept(c, b) == 0 && dsv41_constraint_status(c) == DSV41_CONSTRAINT_DONE, "after 'ab' it is done");
    for (int32_t i = 0; i < n_vocab; i++) logits[i] = 0.0f;
    CHECK(dsv41_constraint_mask(c, logits, n_vocab) == 1 && logits[eos] == 0.0f, "only EOS once done");
    /* a longer vocabulary than the tokenizer's (the model's logits): the ids past it are masked */
    float *wide = calloc((size_t)n_vocab + 64, sizeof *wide);
    CHECK(dsv41_constraint_mask(c, wide, n_vocab + 64) == 1 && isinf(wide[n_vocab + 10]), "ids past the tokenizer");
    free(wide);
    dsv41_constraint_free(c);
    /* the trigger: free text (no EOS) until </think>, then the grammar */
    c = dsv41_constraint_new(g, &eos, 1, end);
    for (int32_t i = 0; i < n_vocab; i++) logits[i] = 0.0f;
    CHECK(dsv41_constraint_mask(c, logits, n_vocab) == n_vocab - 1 && isinf(logits[eos]), "free before the trigger, but no EOS");
    CHECK(dsv41_constraint_accept(c, z) == 0 && dsv41_constraint_accept(c, end) == 0, "z </think>");
    CHECK(dsv41_constraint_allows(c, a) && !dsv41_constraint_allows(c, z) && !dsv41_constraint_allows(c, eos), "the grammar after it");
    /* a copy stands where the original stands; the draft check walks without moving it */
    dsv41_constraint *d = dsv41_constraint_new(g, &eos, 1, end);
    CHECK(d && dsv41_constraint_copy(d, c) == 0 && dsv41_constraint_allows(d, a) && !dsv41_constraint_allows(d, z), "copy");
    int32_t drafts[] = {a, b, eos, z};
    CHECK(dsv41_constraint_drafts(c, drafts, 4) == 3 && dsv41_constraint_status(c) == DSV41_CONSTRAINT_OPEN, "drafts a b EOS, not z");
    CHECK(dsv41_constraint_drafts(c, drafts + 1, 3) == 0, "no draft b first");
    dsv41_constraint_free(d);
    dsv41_constraint_free(c);
    free(logits);
    dsv41_grammar_free(g);
}

static uint64_t rng_state;
static float rng_logit(void) { /* a splitmix64 draw, spread like a filler model's logits */
    uint64_t z = (rng_state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    z ^= z >> 31;
    return (float)((double)(z >> 11) * 0x1p-53 * 8.0 - 4.0);
}

/* Random logits at temperature 1 under a bounded schema: every reply ends by itself, inside a
 * bound of tokens; the masks of the first replies agree with one-token checks on a fresh copy
 * (which walks each token's bytes through the parse, not the trie and the plain bitmaps).
 * Prints the mask time per token. */
static void test_generate(void) {
    static const char schema[] =
        "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 12},"
        " \"id\": {\"type\": \"integer\", \"minimum\": -50, \"maximum\": 5000}, \"tags\": {\"type\": \"array\","
        " \"items\": {\"enum\": [\"x\", \"yz\"]}, \"maxItems\": 3}, \"note\": {\"type\": \"string\", \"pattern\": \"^[a-z ]{1,8}$\"},"
        " \"when\": {\"type\": \"string\", \"format\": \"date\"}, \"ok\": {\"type\": \"boolean\"}},"
        " \"required\": [\"name\", \"id\", \"tags\", \"ok\"], \"additionalProperties\": false}";
    double t0 = now_s();
    char *gtext = dsv41_schema_grammar(schema, strlen(schema), NULL);
    dsv41_grammar *g = gtext ? grammar(gtext) : NULL;
    double compile_ms = (now_s() - t0) * 1e3;
    CHECK(g != NULL, "the generation schema: %s", dsv41_error());
    free(gtext);
    if (!g) return;
    float *logits = malloc((size_t)n_vocab * sizeof *logits);
    double mask_s = 0.0;
    int64_t steps = 0, checked = 0, disagree = 0;
    int ended = 0, seeds = 24;
    for (int seed = 0; seed < seeds; seed++) {
        dsv41_sampler_params sp = dsv41_sampler_params_default();
        sp.temperature = 1.0f, sp.top_p = 1.0f, sp.seed = (uint64_t)seed;
        dsv41_sampler *smp = dsv41_sampler_new(&sp, n_vocab);
        dsv41_constraint *c = dsv41_constraint_new(g, &eos, 1, -1), *fresh = dsv41_constraint_new(g, &eos, 1, -1);
        rng_state = (uint64_t)seed * 7919;
        int last = 0, step;
        for (step = 0; step < 400 && !last; step++) {
            for (int32_t i = 0; i < n_vocab; i++) logits[i] = rng_logit();
            if (seed < 2 && step % 3 == 0) { /* the mask against one-token checks, on a copy with empty caches */
                float *m = malloc((size_t)n_vocab * sizeof *m);
                memcpy(m, logits, (size_t)n_vocab * sizeof *m);
                int32_t allowed = dsv41_constraint_mask(c, m, n_vocab), count = 0;
                dsv41_constraint_copy(fresh, c);
                for (int32_t i = 0; i < n_vocab; i++) {
                    count += !isinf(m[i]);
                    if (i % 11 == 0 || !isinf(m[i])) {
                        checked++;
                        disagree += dsv41_constraint_allows(fresh, i) != !isinf(m[i]);
                    }
                }
                CHECK(allowed == count, "the mask's count %d, its finite logits %d", allowed, count);
                free(m);
            }
            double t1 = now_s();
            int32_t allowed = dsv41_constraint_mask(c, logits, n_vocab);
            mask_s += now_s() - t1;
            steps++;
            dsv41_constrained_pick cp = {c, smp}; /* masks again: the cached bitmap of this state */
            int32_t t = allowed > 0 ? dsv41_constraint_pick(&cp, logits, NULL, 0, &last) : -1;
            if (t < 0) { CHECK(0, "seed %d step %d: %s", seed, step, dsv41_error()); break; }
        }
        ended += last && dsv41_constraint_status(c) == DSV41_CONSTRAINT_DONE;
        dsv41_constraint_free(c);
        dsv41_constraint_free(fresh);
        dsv41_sampler_free(smp);
    }
    CHECK(ended == seeds, "%d of %d replies under a bounded schema ended by themselves within 400 tokens", ended, seeds);
    CHECK(checked > 10000 && disagree == 0, "%lld of %lld mask bits disagree with one-token checks", (long long)disagree, (long long)checked);
    /* greedy: the pick checks the argmax before it masks; the same tokens as masking first (a
     * plain argmax over the masked logits, the first of the largest) */
    int same = 1;
    for (int seed = 0; seed < 6 && same; seed++) {
        dsv41_sampler_params sp = dsv41_sampler_params_default();
        sp.temperature = 0.0f;
        dsv41_sampler *smp = dsv41_sampler_new(&sp, n_vocab);
        dsv41_constraint *a = dsv41_constraint_new(g, &eos, 1, -1), *b = dsv41_constraint_new(g, &eos, 1, -1);
        float *copy = malloc((size_t)n_vocab * sizeof *copy);
        rng_state = (uint64_t)seed * 104729;
        int last = 0;
        for (int step = 0; step < 400 && !last && same; step++) {
            for (int32_t i = 0; i < n_vocab; i++) copy[i] = logits[i] = rng_logit();
            dsv41_constrained_pick cp = {a, smp};
            int32_t ta = dsv41_constraint_pick(&cp, logits, NULL, 0, &last), tb = -1;
            dsv41_constraint_mask(b, copy, n_vocab);
            for (int32_t i = 0; i < n_vocab; i++)
                if (tb < 0 || copy[i] > copy[tb]) tb = i;
            same = ta == tb && dsv41_constraint_accept(b, tb) == 0;
            CHECK(same, "greedy seed %d step %d: the pick %d, the masked argmax %d", seed, step, ta, tb);
        }
        free(copy);
        dsv41_constraint_free(a);
        dsv41_constraint_free(b);
        dsv41_sampler_free(smp);
    }
    printf("mask: %.1f us a token over %lld tokens of %d replies (random logits, temperature 1); the schema compiled in %.2f ms\n",
           mask_s / (double)steps * 1e6, (long long)steps, seeds, compile_ms);
    free(logits);
    dsv41_grammar_free(g);
}

/* Two threads on a fresh tokenizer: both compile at once (the token tries are built once, under
 * the tokenizer's lock) and share one grammar, each with its own constraint: the same masks as
 * one thread alone. */
typedef struct {
    const dsv41_tokenizer *t;
    dsv41_grammar *g;         /* in: NULL to compile one; out: the grammar used */
    const dsv41_grammar *use; /* the shared grammar, once both compiled */
    int64_t sum;              /* out: a digest of the masks of a fixed walk */
} thread_job;

static const char thread_grammar[] = "root ::= \"{\" [ ]? \"\\\"k\\\": \\\"\" [^\"\\\\]{0,20} \"\\\"}\"";

static void *compile_job(void *arg) {
    thread_job *j = arg;
    j->g = dsv41_grammar_new(j->t, thread_grammar, strlen(thread_grammar));
    return NULL;
}

static void *mask_job(void *arg) {
    thread_job *j = arg;
    int32_t V = dsv41_tokenizer_n_vocab(j->t), e = dsv41_tokenizer_eos(j->t);
    float *l = malloc((size_t)V * sizeof *l);
    dsv41_constraint *c = dsv41_constraint_new(j->use, &e, 1, -1);
    j->sum = 0;
    for (int step = 0; step < 12 && dsv41_constraint_status(c) != DSV41_CONSTRAINT_DONE; step++) {
        for (int32_t i = 0; i < V; i++) l[i] = 0.0f;
        j->sum = j->sum * 31 + dsv41_constraint_mask(c, l, V);
        int32_t pick = -1; /* the largest allowed id: a fixed walk */
        for (int32_t i = V - 1; i >= 0 && pick < 0; i--)
            if (!isinf(l[i])) pick = i;
        if (pick < 0 || dsv41_constraint_accept(c, pick)) break;
        j->sum = j->sum * 31 + pick;
    }
    dsv41_constraint_free(c);
    free(l);
    return NULL;
}

static void test_threads(const char *tpath, const char *apath) {
    dsv41_tokenizer *t = dsv41_tokenizer_load_with_added(tpath, apath);
    CHECK(t != NULL, "a second tokenizer: %s", dsv41_error());
    if (!t) return;
    thread_job j[2] = {{t, NULL, NULL, 0}, {t, NULL, NULL, 0}};
    pthread_t th[2];
    for (int k = 0; k < 2; k++) pthread_create(&th[k], NULL, compile_job, &j[k]);
    for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
    CHECK(j[0].g && j[1].g, "two grammars compiled at once on a fresh tokenizer");
    if (j[0].g && j[1].g) {
        thread_job alone = {t, NULL, j[0].g, 0};
        mask_job(&alone);
        j[0].use = j[1].use = j[0].g;
        for (int k = 0; k < 2; k++) pthread_create(&th[k], NULL, mask_job, &j[k]);
        for (int k = 0; k < 2; k++) pthread_join(th[k], NULL);
        CHECK(alone.sum != 0 && j[0].sum == alone.sum && j[1].sum == alone.sum, "two threads on one grammar: %lld %lld, alone %lld",
              (long long)j[0].sum, (long long)j[1].sum, (long long)alone.sum);
    }
    dsv41_grammar_free(j[0].g);
    dsv41_grammar_free(j[1].g);
    dsv41_tokenizer_free(t);
}

int main(void) {
    char tpath[1100], apath[1100];
    snprintf(tpath, sizeof tpath, "%s/tokenizer/deepseek-v3/tokenizer.json", shared_dir());
    snprintf(apath, sizeof apath, "%s/tokenizer/v41_added_tokens.json", shared_dir());
    tok = dsv41_tokenizer_load_with_added(tpath, apath);
    CHECK(tok != NULL, "the V4.1 tokenizer: %s", dsv41_error());
    if (!tok) return test_summary();
    n_vocab = dsv41_tokenizer_n_vocab(tok);
    eos = dsv41_tokenizer_eos(tok);
    for (int32_t id = 0; id < n_vocab; id++) {
        size_t len;
        const char *b = dsv41_token_is_special(tok, id) ? NULL : dsv41_token_bytes(tok, id, &len);
        if (b && len == 1 && !byte_tok[(unsigned char)b[0]]) byte_tok[(unsigned char)b[0]] = id;
    }
    double t1 = now_s();
    dsv41_grammar_free(grammar("root ::= \"x\""));
    printf("the first grammar of a tokenizer: %.0f ms (its token tries, kept with it)\n", (now_s() - t1) * 1e3);
    test_grammars();
    test_tokens();
    test_stops();
    test_generate();
    test_threads(tpath, apath);
    test_bad_grammars();
    test_schemas();
    dsv41_tokenizer_free(tok);
    return test_summary();
}
