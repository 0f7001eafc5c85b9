/* fuzz_api.c - the server's API layer (server/api.c) on arbitrary requests and replies, with no
 * model and no socket: what a client sends and what the model writes back both reach it.
 *
 * The first byte picks the route: chat completions, completions, /tokenize or /detokenize. The
 * rest is the request body, and for the two generation routes optionally a generated reply after
 * FUZZ_REPLY_SEP. A request either parses into a job whose prompt and token budget fit the
 * context, or gets a 4xx/5xx whose body is an OpenAI error object. A parsed job then "generates"
 * the reply a few bytes per token through job_append, as the scheduler feeds it, up to its
 * max_tokens or a stop string: its text is exactly the bytes fed, cut before the earliest stop
 * string. It streams as the server streams it and is answered whole as well: every event and
 * the whole reply are valid JSON, and the streamed pieces of each field, laid end to end, are
 * exactly that field of the whole reply (a stream never takes back what it sent). Seeds:
 * seeds.sh's "api" section. */
#include "fuzz.h"

#include "api.h"
#include "job.h"

#define FUZZ_REPLY_SEP "\n--dsv41-fuzz-reply--\n"

static server sv;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *shared = getenv("DSV41_SHARED");
    char path[1024], added[1024];
    snprintf(path, sizeof path, "%s/tokenizer/deepseek-v3/tokenizer.json", shared && *shared ? shared : "../shared");
    snprintf(added, sizeof added, "%s/tokenizer/v41_added_tokens.json", shared && *shared ? shared : "../shared");
    if (!(sv.tok = dsv41_tokenizer_load_with_added(path, added))) { fprintf(stderr, "%s\n", dsv41_error()); abort(); }
    snprintf(sv.model_name, sizeof sv.model_name, "fuzz");
    sv.ctx = 4096;
    sv.n_slots = 4;
    pthread_mutex_init(&sv.mu, NULL);
    return 0;
}

/* An error reply: a 4xx or 5xx whose body is {"error": {...}} */
static void check_error(int status, const jbuf *b) {
    if (status < 400 || status > 599 || b->oom) abort();
    dsv41_json *e = dsv41_json_parse(b->p, b->n);
    if (!e || dsv41_json_type_of(dsv41_json_get(e, "error")) != DSV41_JSON_OBJ) abort();
    dsv41_json_free(e);
}

/* text of one field, appended: a string member of o (null and absent add nothing) */
static void add_field(jbuf *to, const dsv41_json *o, const char *key) {
    const dsv41_json *v = dsv41_json_get(o, key);
    if (dsv41_json_type_of(v) == DSV41_JSON_STR) jb_put(to, dsv41_json_str(v), dsv41_json_len(v));
    else if (dsv41_json_type_of(v) != DSV41_JSON_NULL) abort();
}

/* Every event in b[from, b->n) ("data: JSON\n\n", or the closing "data: [DONE]\n\n"): valid JSON,
 * its text fields appended to content and reasoning, its tool calls counted. Returns from past
 * the events; *done once [DONE] came. */
static size_t read_events(const jbuf *b, size_t from, gen_kind kind, jbuf *content, jbuf *reasoning, int *calls, int *done) {
    while (from < b->n) {
        const char *p = b->p + from, *end = memmem(p, b->n - from, "\n\n", 2);
        if (*done || !end || strncmp(p, "data: ", 6)) abort();
        size_t len = (size_t)(end - p) - 6;
        if (len == 6 && !memcmp(p + 6, "[DONE]", 6)) *done = 1;
        else {
            dsv41_json *ev = dsv41_json_parse(p + 6, len);
            if (!ev) abort();
            const dsv41_json *ch = dsv41_json_at(dsv41_json_get(ev, "choices"), 0);
            if (kind == GEN_COMPLETION) add_field(content, ch, "text");
            else {
                const dsv41_json *d = dsv41_json_get(ch, "delta");
                add_field(content, d, "content");
                add_field(reasoning, d, "reasoning_content");
                *calls += dsv41_json_type_of(dsv41_json_get(d, "tool_calls")) == DSV41_JSON_ARR;
            }
            dsv41_json_free(ev);
        }
        from = (size_t)(end - b->p) + 2;
    }
    return from;
}

/* How many bytes of reply[0, n) come before the earliest of j's stop strings (n: none). */
static size_t before_stops(const job *j, const char *reply, size_t n) {
    size_t cut = n;
    for (int i = 0; i < j->n_stops; i++) {
        const char *hit = memmem(reply, n, j->stops[i], strlen(j->stops[i]));
        if (hit && (size_t)(hit - reply) < cut) cut = (size_t)(hit - reply);
    }
    return cut;
}

/* The job of a parsed request is given reply, step bytes per token, as the scheduler gives it
 * (up to its max_tokens, or a stop string), streamed; then the whole reply. */
static void generate(gen *g, const char *reply, size_t n, size_t step) {
    job *j = g->job;
    if (j->n_prompt < 1 || j->n_prompt >= sv.ctx || j->max_tokens < 1 || j->n_prompt + j->max_tokens > sv.ctx) abort();
    jbuf s = {0}, content = {0}, reasoning = {0}, whole = {0};
    size_t seen = 0, fed = 0;
    int calls = 0, done = 0, stop = 0;
    for (; fed < n && !stop && j->n_gen < j->max_tokens; fed += step) {
        size_t k = n - fed < step ? n - fed : step;
        if ((stop = job_append(j, j->n_gen, reply + fed, k)) < 0) abort();
        if (j->committed > j->text.n) abort();
        api_stream(&sv, g, &s);
        seen = read_events(&s, seen, g->kind, &content, &reasoning, &calls, &done);
    }
    /* the text is what was fed, cut before the earliest stop string */
    fed = fed < n ? fed : n;
    if (j->text.n != (stop ? before_stops(j, reply, fed) : fed) || (j->text.n && memcmp(j->text.p, reply, j->text.n)) ||
        (!stop && before_stops(j, reply, fed) != fed))
        abort();
    j->end = stop || fed == n ? END_STOP : END_LENGTH;
    if (!api_stream(&sv, g, &s)) abort();
    read_events(&s, seen, g->kind, &content, &reasoning, &calls, &done);
    if (!done || api_reply(&sv, g, &whole) != 200 || s.oom || whole.oom) abort();
    /* the whole reply, and the stream's fields against it */
    dsv41_json *r = dsv41_json_parse(whole.p, whole.n);
    if (!r) abort();
    const dsv41_json *ch = dsv41_json_at(dsv41_json_get(r, "choices"), 0), *m = dsv41_json_get(ch, "message");
    jbuf want = {0}, want_r = {0};
    add_field(&want, g->kind == GEN_COMPLETION ? ch : m, g->kind == GEN_COMPLETION ? "text" : "content");
    add_field(&want_r, m, "reasoning_content");
    int want_calls = dsv41_json_type_of(dsv41_json_get(m, "tool_calls")) == DSV41_JSON_ARR;
    if (want.n != content.n || (want.n && memcmp(want.p, content.p, want.n)) || want_r.n != reasoning.n ||
        (want_r.n && memcmp(want_r.p, reasoning.p, want_r.n)) || calls != want_calls)
        abort();
    dsv41_json_free(r);
    jb_free(&want);
    jb_free(&want_r);
    jb_free(&s);
    jb_free(&content);
    jb_free(&reasoning);
    jb_free(&whole);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int route = data[0] & 3;
    const char *body = (const char *)data + 1, *sep = memmem(body, size - 1, FUZZ_REPLY_SEP, strlen(FUZZ_REPLY_SEP));
    size_t n = sep ? (size_t)(sep - body) : size - 1;
    jbuf out = {0};
    if (route >= 2) {
        int status = route == 2 ? api_tokenize(&sv, body, n, &out) : api_detokenize(&sv, body, n, &out);
        if (status == 200) {
            dsv41_json *r = dsv41_json_parse(out.p, out.n);
            if (!r || out.oom) abort();
            dsv41_json_free(r);
        } else check_error(status, &out);
    } else {
        gen g;
        int status = api_parse_generation(&sv, route == 0 ? GEN_CHAT : GEN_COMPLETION, body, n, &g, &out);
        if (status) check_error(status, &out);
        else {
            const char *reply = sep ? sep + strlen(FUZZ_REPLY_SEP) : "";
            generate(&g, reply, sep ? size - 1 - n - strlen(FUZZ_REPLY_SEP) : 0, 1 + (data[0] >> 2) % 7);
            job_free(g.job);
        }
    }
    jb_free(&out);
    return 0;
}
