/* fuzz_api.c - the server's API layer (server/api.c, anthropic.c, responses.c) on arbitrary
 * requests and replies, with no model and no socket: what a client sends and what the model
 * writes back both reach it.
 *
 * The first byte picks the route: its low two bits chat completions, completions, /tokenize or
 * /detokenize, or, when its top two bits are 1, 2 or 3, /v1/messages, /v1/responses or
 * /v1/messages/count_tokens; its bits 2-5 the bytes per generated token. The rest is the
 * request body, and for the generation routes optionally a generated reply after
 * FUZZ_REPLY_SEP. A request either parses into a job whose prompt and token budget fit the
 * context, or gets a 4xx/5xx whose body is the route's error object (OpenAI's, or Anthropic's
 * {"type": "error", "error": {...}}). A parsed job then "generates" the reply a few bytes per
 * token through job_append, as the scheduler feeds it, up to its max_tokens or a stop string:
 * its text is exactly the bytes fed, cut before the earliest stop string. It streams as the
 * server streams it and is answered whole as well: every event and the whole reply are valid
 * JSON (a typed event's JSON names its event's type; a response's events are numbered in
 * order), and the streamed pieces of the answer, the reasoning and the tool calls, laid end to
 * end, are exactly those of the whole reply (a stream never takes back what it sent). Seeds:
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

/* The text of a content part or block, appended to content or reasoning by its type */
static void add_part(const dsv41_json *part, jbuf *content, jbuf *reasoning, int *calls) {
    const dsv41_json *type = dsv41_json_get(part, "type");
    const char *t = dsv41_json_type_of(type) == DSV41_JSON_STR ? dsv41_json_str(type) : "";
    if (!strcmp(t, "text") || !strcmp(t, "output_text")) add_field(content, part, "text");
    else if (!strcmp(t, "thinking")) add_field(reasoning, part, "thinking");
    else if (!strcmp(t, "reasoning_text")) add_field(reasoning, part, "text");
    else if (!strcmp(t, "tool_use") || !strcmp(t, "function_call")) ++*calls;
}

/* The typed events ("event: TYPE\ndata: JSON\n\n", the JSON's "type" TYPE) of a messages or a
 * responses stream in b[from, b->n): their deltas appended, the tool calls counted, a
 * response's sequence numbers checked against *seq. Returns from past the events. */
static size_t read_typed(const jbuf *b, size_t from, gen_kind kind, jbuf *content, jbuf *reasoning, int *calls, int *seq) {
    while (from < b->n) {
        const char *p = b->p + from, *end = memmem(p, b->n - from, "\n\n", 2), *nl = memchr(p, '\n', b->n - from);
        if (!end || !nl || nl >= end || strncmp(p, "event: ", 7) || strncmp(nl + 1, "data: ", 6)) abort();
        dsv41_json *ev = dsv41_json_parse(nl + 7, (size_t)(end - nl - 7));
        const dsv41_json *type = dsv41_json_get(ev, "type");
        size_t tn = (size_t)(nl - p) - 7;
        if (!ev || dsv41_json_type_of(type) != DSV41_JSON_STR || dsv41_json_len(type) != tn || memcmp(dsv41_json_str(type), p + 7, tn))
            abort();
        const char *t = dsv41_json_str(type);
        if (kind == GEN_RESPONSE && dsv41_json_num(dsv41_json_get(ev, "sequence_number"), NULL) != (*seq)++) abort();
        const dsv41_json *d = dsv41_json_get(ev, "delta"), *dt = dsv41_json_get(d, "type");
        const char *dtype = dsv41_json_type_of(dt) == DSV41_JSON_STR ? dsv41_json_str(dt) : "";
        if (!strcmp(t, "content_block_delta") && !strcmp(dtype, "text_delta")) add_field(content, d, "text");
        else if (!strcmp(t, "content_block_delta") && !strcmp(dtype, "thinking_delta")) add_field(reasoning, d, "thinking");
        else if (!strcmp(t, "content_block_start")) add_part(dsv41_json_get(ev, "content_block"), content, reasoning, calls);
        else if (!strcmp(t, "response.output_text.delta")) add_field(content, ev, "delta");
        else if (!strcmp(t, "response.reasoning_text.delta")) add_field(reasoning, ev, "delta");
        else if (!strcmp(t, "response.output_item.added")) add_part(dsv41_json_get(ev, "item"), content, reasoning, calls);
        dsv41_json_free(ev);
        from = (size_t)(end - b->p) + 2;
    }
    return from;
}

/* The answer, reasoning and tool calls of a whole messages or responses reply */
static void read_whole(const dsv41_json *r, gen_kind kind, jbuf *content, jbuf *reasoning, int *calls) {
    const dsv41_json *items = dsv41_json_get(r, kind == GEN_MESSAGES ? "content" : "output");
    if (dsv41_json_type_of(items) != DSV41_JSON_ARR) abort();
    for (size_t i = 0; i < dsv41_json_len(items); i++) {
        const dsv41_json *it = dsv41_json_at(items, i), *parts = dsv41_json_get(it, "content");
        if (kind == GEN_MESSAGES || dsv41_json_type_of(parts) != DSV41_JSON_ARR) add_part(it, content, reasoning, calls);
        else
            for (size_t k = 0; k < dsv41_json_len(parts); k++) add_part(dsv41_json_at(parts, k), content, reasoning, calls);
    }
}

/* The route's stream and whole reply */
static int stream(gen *g, jbuf *out) {
    return g->kind == GEN_MESSAGES ? anthropic_stream(&sv, g, out) : g->kind == GEN_RESPONSE ? responses_stream(&sv, g, out) : api_stream(&sv, g, out);
}
static int reply(gen *g, jbuf *out) {
    return g->kind == GEN_MESSAGES ? anthropic_reply(&sv, g, out) : g->kind == GEN_RESPONSE ? responses_reply(&sv, g, out) : api_reply(&sv, g, out);
}
static size_t read_stream(const jbuf *b, size_t from, gen_kind kind, jbuf *content, jbuf *reasoning, int *calls, int *done, int *seq) {
    return kind == GEN_MESSAGES || kind == GEN_RESPONSE ? read_typed(b, from, kind, content, reasoning, calls, seq)
                                                         : read_events(b, from, kind, content, reasoning, calls, done);
}

/* The job of a parsed request is given reply, step bytes per token, as the scheduler gives it
 * (up to its max_tokens, or a stop string), streamed; then the whole reply. */
static void generate(gen *g, const char *text, size_t n, size_t step) {
    job *j = g->job;
    int typed = g->kind == GEN_MESSAGES || g->kind == GEN_RESPONSE;
    if (j->n_prompt < 1 || j->n_prompt >= sv.ctx || j->max_tokens < 1 || j->n_prompt + j->max_tokens > sv.ctx) abort();
    jbuf s = {0}, content = {0}, reasoning = {0}, whole = {0};
    size_t seen = 0, fed = 0;
    int calls = 0, done = typed, stop = 0, seq = 0;
    for (; fed < n && !stop && j->n_gen < j->max_tokens; fed += step) {
        size_t k = n - fed < step ? n - fed : step;
        if ((stop = job_append(j, j->n_gen, text + fed, k)) < 0) abort();
        if (j->committed > j->text.n) abort();
        stream(g, &s);
        seen = read_stream(&s, seen, g->kind, &content, &reasoning, &calls, &done, &seq);
    }
    /* the text is what was fed, cut before the earliest stop string */
    fed = fed < n ? fed : n;
    if (j->text.n != (stop ? before_stops(j, text, fed) : fed) || (j->text.n && memcmp(j->text.p, text, j->text.n)) ||
        (!stop && before_stops(j, text, fed) != fed))
        abort();
    j->end = stop || fed == n ? END_STOP : END_LENGTH;
    if (!stream(g, &s)) abort();
    read_stream(&s, seen, g->kind, &content, &reasoning, &calls, &done, &seq);
    if (!done || reply(g, &whole) != 200 || s.oom || whole.oom) abort();
    /* the whole reply, and the stream's fields against it */
    dsv41_json *r = dsv41_json_parse(whole.p, whole.n);
    if (!r) abort();
    jbuf want = {0}, want_r = {0};
    int want_calls = 0;
    if (typed) read_whole(r, g->kind, &want, &want_r, &want_calls);
    else {
        const dsv41_json *ch = dsv41_json_at(dsv41_json_get(r, "choices"), 0), *m = dsv41_json_get(ch, "message");
        add_field(&want, g->kind == GEN_COMPLETION ? ch : m, g->kind == GEN_COMPLETION ? "text" : "content");
        add_field(&want_r, m, "reasoning_content");
        want_calls = dsv41_json_type_of(dsv41_json_get(m, "tool_calls")) == DSV41_JSON_ARR;
    }
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

/* An Anthropic error: {"type": "error", "error": {...}} */
static void check_anthropic_error(int status, jbuf *b) {
    anthropic_error_shape(b, status);
    dsv41_json *e = dsv41_json_parse(b->p, b->n);
    const dsv41_json *t = dsv41_json_get(e, "type");
    if (status < 400 || status > 599 || b->oom || !e || dsv41_json_type_of(t) != DSV41_JSON_STR || strcmp(dsv41_json_str(t), "error") ||
        dsv41_json_type_of(dsv41_json_get(e, "error")) != DSV41_JSON_OBJ)
        abort();
    dsv41_json_free(e);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    int route = data[0] & 3, family = data[0] >> 6; /* family 0: route; 1 messages, 2 responses, 3 count_tokens */
    const char *body = (const char *)data + 1, *sep = memmem(body, size - 1, FUZZ_REPLY_SEP, strlen(FUZZ_REPLY_SEP));
    size_t n = sep ? (size_t)(sep - body) : size - 1;
    jbuf out = {0};
    if (family == 3) {
        int status = anthropic_count_tokens(&sv, body, n, &out);
        if (status == 200) {
            dsv41_json *r = dsv41_json_parse(out.p, out.n);
            int is_int = 0;
            if (!r || out.oom || dsv41_json_num(dsv41_json_get(r, "input_tokens"), &is_int) < 1 || !is_int) abort();
            dsv41_json_free(r);
        } else check_anthropic_error(status, &out);
    } else if (family == 0 && route >= 2) {
        int status = route == 2 ? api_tokenize(&sv, body, n, &out) : api_detokenize(&sv, body, n, &out);
        if (status == 200) {
            dsv41_json *r = dsv41_json_parse(out.p, out.n);
            if (!r || out.oom) abort();
            dsv41_json_free(r);
        } else check_error(status, &out);
    } else {
        gen g;
        gen_kind kind = family == 1 ? GEN_MESSAGES : family == 2 ? GEN_RESPONSE : route == 0 ? GEN_CHAT : GEN_COMPLETION;
        int status = kind == GEN_MESSAGES ? anthropic_parse(&sv, body, n, &g, &out)
                   : kind == GEN_RESPONSE ? responses_parse(&sv, body, n, &g, &out)
                                          : api_parse_generation(&sv, kind, body, n, &g, &out);
        if (status && kind == GEN_MESSAGES) check_anthropic_error(status, &out);
        else if (status) check_error(status, &out);
        else {
            const char *text = sep ? sep + strlen(FUZZ_REPLY_SEP) : "";
            generate(&g, text, sep ? size - 1 - n - strlen(FUZZ_REPLY_SEP) : 0, 1 + ((data[0] >> 2) & 15) % 7);
            job_free(g.job);
        }
    }
    jb_free(&out);
    return 0;
}
