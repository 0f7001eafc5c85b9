/* test_server.c - the server's three reply shapes (chat completions, Anthropic's messages,
 * OpenAI's responses) on replies written here, with no model and no socket: a request with
 * tools parses into a job, the job is given a reply holding a DSML tool-call block (and, in
 * thinking mode, reasoning) a few bytes per token as the scheduler gives it, and both the
 * stream and the whole reply must carry the answer, the reasoning and the call, its arguments
 * parsed back into the object the model wrote. The model with filler weights never writes such
 * a block, so this is where the parse-back of each API is checked. */
#include <string.h>

#include "api.h"
#include "job.h"
#include "testing.h"

#define DSML "\xEF\xBD\x9C" "DSML" "\xEF\xBD\x9C" /* ｜DSML｜ */
static const char calls[] = "\n\n<" DSML " calls>\n<" DSML " invoke name=\"get_weather\">\n<" DSML
                            " parameter name=\"city\" string=\"true\">Paris</" DSML " parameter>\n</" DSML " invoke>\n</" DSML " calls>";

static server sv;

/* The text of a string member, or "" */
static const char *str(const dsv41_json *o, const char *key) {
    const char *s = dsv41_json_str(dsv41_json_get(o, key));
    return s ? s : "";
}

/* 1 when args (JSON text, or an object) is {"city": "Paris"} */
static int paris(const dsv41_json *args) {
    dsv41_json *parsed = dsv41_json_type_of(args) == DSV41_JSON_STR ? dsv41_json_parse(dsv41_json_str(args), dsv41_json_len(args)) : NULL;
    const dsv41_json *o = parsed ? parsed : args;
    int ok = dsv41_json_len(o) == 1 && !strcmp(str(o, "city"), "Paris");
    dsv41_json_free(parsed);
    return ok;
}

/* What a stream carried: the answer and the reasoning laid end to end, the calls' names and
 * arguments (as JSON text), the closing reason. */
typedef struct {
    jbuf content, reasoning, name, args;
    char finish[32];
    int events, bad;
} streamed;

/* Reads one event's JSON (an SSE block's data line) into s. */
static void read_event(gen_kind kind, const dsv41_json *e, streamed *s) {
    const char *type = str(e, "type");
    const dsv41_json *v;
    s->events++;
    if (kind == GEN_CHAT) {
        const dsv41_json *ch = dsv41_json_at(dsv41_json_get(e, "choices"), 0), *d = dsv41_json_get(ch, "delta");
        if ((v = dsv41_json_get(d, "content")) && dsv41_json_str(v)) jb_put(&s->content, dsv41_json_str(v), dsv41_json_len(v));
        if ((v = dsv41_json_get(d, "reasoning_content"))) jb_put(&s->reasoning, dsv41_json_str(v), dsv41_json_len(v));
        const dsv41_json *fn = dsv41_json_get(dsv41_json_at(dsv41_json_get(d, "tool_calls"), 0), "function");
        if (fn) jb_puts(&s->name, str(fn, "name")), jb_puts(&s->args, str(fn, "arguments"));
        if (*str(ch, "finish_reason")) snprintf(s->finish, sizeof s->finish, "%s", str(ch, "finish_reason"));
    } else if (kind == GEN_MESSAGES) {
        const dsv41_json *d = dsv41_json_get(e, "delta"), *b = dsv41_json_get(e, "content_block");
        if (!strcmp(type, "content_block_delta")) {
            const char *dt = str(d, "type");
            if (!strcmp(dt, "text_delta")) jb_puts(&s->content, str(d, "text"));
            else if (!strcmp(dt, "thinking_delta")) jb_puts(&s->reasoning, str(d, "thinking"));
            else if (!strcmp(dt, "input_json_delta")) jb_puts(&s->args, str(d, "partial_json"));
            else s->bad++;
        } else if (!strcmp(type, "content_block_start") && !strcmp(str(b, "type"), "tool_use"))
            jb_puts(&s->name, str(b, "name"));
        else if (!strcmp(type, "message_delta"))
            snprintf(s->finish, sizeof s->finish, "%s", str(d, "stop_reason"));
    } else {
        if (!strcmp(type, "response.output_text.delta")) jb_puts(&s->content, str(e, "delta"));
        else if (!strcmp(type, "response.reasoning_text.delta")) jb_puts(&s->reasoning, str(e, "delta"));
        else if (!strcmp(type, "response.function_call_arguments.done")) jb_puts(&s->args, str(e, "arguments"));
        else if (!strcmp(type, "response.custom_tool_call_input.done")) jb_puts(&s->args, str(e, "input"));
        else if (!strcmp(type, "response.output_item.done") && (!strcmp(str(dsv41_json_get(e, "item"), "type"), "function_call") ||
                                                                 !strcmp(str(dsv41_json_get(e, "item"), "type"), "custom_tool_call")))
            jb_puts(&s->name, str(dsv41_json_get(e, "item"), "name"));
        else if (!strcmp(type, "response.completed") || !strcmp(type, "response.incomplete"))
            snprintf(s->finish, sizeof s->finish, "%s", type + 9);
    }
}

/* Reads the events in b[*from, b->n) into s. */
static void read_events(gen_kind kind, const jbuf *b, size_t *from, streamed *s) {
    while (*from < b->n) {
        const char *p = b->p + *from, *end = strstr(p, "\n\n"), *data = strstr(p, "data: ");
        if (!end || !data || data > end) { s->bad++; return; }
        *from = (size_t)(end - b->p) + 2;
        if (!strncmp(data + 6, "[DONE]", 6)) continue;
        dsv41_json *e = dsv41_json_parse(data + 6, (size_t)(end - data - 6));
        if (!e) { s->bad++; continue; }
        read_event(kind, e, s);
        dsv41_json_free(e);
    }
}

typedef int (*stream_fn)(server *, gen *, jbuf *);
typedef int (*reply_fn)(server *, gen *, jbuf *);

/* Parses body as kind, gives the job reply 3 bytes per token, streaming as it goes; then the
 * whole reply, parsed. NULL when the request does not parse. */
static dsv41_json *run(gen_kind kind, const char *body, const char *reply, streamed *s) {
    gen g;
    jbuf err = {0}, out = {0}, whole = {0};
    int status = kind == GEN_MESSAGES ? anthropic_parse(&sv, body, strlen(body), &g, &err)
               : kind == GEN_RESPONSE ? responses_parse(&sv, body, strlen(body), &g, &err)
                                      : api_parse_generation(&sv, kind, body, strlen(body), &g, &err);
    CHECK(status == 0, "kind %d: the request parses: %s", kind, err.p ? err.p : "");
    jb_free(&err);
    if (status) return NULL;
    stream_fn stream = kind == GEN_MESSAGES ? anthropic_stream : kind == GEN_RESPONSE ? responses_stream : api_stream;
    reply_fn answer = kind == GEN_MESSAGES ? anthropic_reply : kind == GEN_RESPONSE ? responses_reply : api_reply;
    size_t from = 0, n = strlen(reply);
    for (size_t fed = 0; fed < n; fed += 3) {
        job_append(g.job, (int32_t)fed, reply + fed, n - fed < 3 ? n - fed : 3);
        stream(&sv, &g, &out);
        read_events(kind, &out, &from, s);
    }
    g.job->end = END_STOP;
    CHECK(stream(&sv, &g, &out) == 1, "kind %d: the stream ends with the job", kind);
    read_events(kind, &out, &from, s);
    CHECK(answer(&sv, &g, &whole) == 200, "kind %d: the whole reply", kind);
    dsv41_json *r = dsv41_json_parse(whole.p, whole.n);
    CHECK(r != NULL, "kind %d: the whole reply is JSON: %s", kind, whole.p);
    jb_free(&out);
    jb_free(&whole);
    job_free(g.job);
    return r;
}

static void check_stream(gen_kind kind, streamed *s, const char *reasoning, const char *finish) {
    CHECK(s->bad == 0 && s->events > 2, "kind %d: %d events, %d unreadable", kind, s->events, s->bad);
    CHECK(s->content.p && !strcmp(s->content.p, "Let me check."), "kind %d: streamed answer '%s'", kind, s->content.p);
    CHECK(!strcmp(s->reasoning.p ? s->reasoning.p : "", reasoning), "kind %d: streamed reasoning '%s'", kind, s->reasoning.p);
    dsv41_json *args = s->args.p ? dsv41_json_parse(s->args.p, s->args.n) : NULL;
    CHECK(s->name.p && !strcmp(s->name.p, "get_weather") && args && paris(args), "kind %d: streamed call %s(%s)", kind, s->name.p, s->args.p);
    CHECK(!strcmp(s->finish, finish), "kind %d: streamed finish '%s', not '%s'", kind, s->finish, finish);
    dsv41_json_free(args);
    jb_free(&s->content), jb_free(&s->reasoning), jb_free(&s->name), jb_free(&s->args);
}

static const char tool_json[] = "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}";

static void test_chat(void) {
    char body[1024], reply[1024];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"reasoning_effort\":\"high\",\"stream\":true,"
             "\"tools\":[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":%s}}]}", tool_json);
    snprintf(reply, sizeof reply, "I should look.</think>Let me check.%s", calls);
    streamed s = {0};
    dsv41_json *r = run(GEN_CHAT, body, reply, &s);
    const dsv41_json *ch = dsv41_json_at(dsv41_json_get(r, "choices"), 0), *m = dsv41_json_get(ch, "message");
    const dsv41_json *fn = dsv41_json_get(dsv41_json_at(dsv41_json_get(m, "tool_calls"), 0), "function");
    CHECK(!strcmp(str(m, "content"), "Let me check.") && !strcmp(str(m, "reasoning_content"), "I should look.") &&
              !strcmp(str(fn, "name"), "get_weather") && paris(dsv41_json_get(fn, "arguments")) &&
              !strcmp(str(ch, "finish_reason"), "tool_calls"),
          "chat completions: answer, reasoning and the call");
    check_stream(GEN_CHAT, &s, "I should look.", "tool_calls");
    dsv41_json_free(r);
}

static void test_messages(void) {
    char body[1024], reply[1024];
    snprintf(body, sizeof body, "{\"max_tokens\":500,\"messages\":[{\"role\":\"user\",\"content\":\"Weather?\"}],\"stream\":true,"
             "\"thinking\":{\"type\":\"enabled\",\"budget_tokens\":100},\"tools\":[{\"name\":\"get_weather\",\"input_schema\":%s}]}", tool_json);
    snprintf(reply, sizeof reply, "I should look.</think>Let me check.%s", calls);
    streamed s = {0};
    dsv41_json *r = run(GEN_MESSAGES, body, reply, &s);
    const dsv41_json *c = dsv41_json_get(r, "content");
    const dsv41_json *b0 = dsv41_json_at(c, 0), *b1 = dsv41_json_at(c, 1), *b2 = dsv41_json_at(c, 2);
    CHECK(dsv41_json_len(c) == 3 && !strcmp(str(b0, "type"), "thinking") && !strcmp(str(b0, "thinking"), "I should look.") &&
              !strcmp(str(b1, "type"), "text") && !strcmp(str(b1, "text"), "Let me check.") && !strcmp(str(b2, "type"), "tool_use") &&
              !strcmp(str(b2, "name"), "get_weather") && dsv41_json_type_of(dsv41_json_get(b2, "input")) == DSV41_JSON_OBJ &&
              paris(dsv41_json_get(b2, "input")) && !strncmp(str(b2, "id"), "toolu_", 6) && !strcmp(str(r, "stop_reason"), "tool_use"),
          "messages: thinking, text and tool_use blocks");
    check_stream(GEN_MESSAGES, &s, "I should look.", "tool_use");
    dsv41_json_free(r);
}

static void test_responses(void) {
    char body[1024], reply[1024];
    snprintf(body, sizeof body, "{\"input\":\"Weather?\",\"reasoning\":{\"effort\":\"high\"},\"stream\":true,"
             "\"tools\":[{\"type\":\"function\",\"name\":\"get_weather\",\"parameters\":%s}]}", tool_json);
    snprintf(reply, sizeof reply, "I should look.</think>Let me check.%s", calls);
    streamed s = {0};
    dsv41_json *r = run(GEN_RESPONSE, body, reply, &s);
    const dsv41_json *o = dsv41_json_get(r, "output");
    const dsv41_json *i0 = dsv41_json_at(o, 0), *i1 = dsv41_json_at(o, 1), *i2 = dsv41_json_at(o, 2);
    CHECK(dsv41_json_len(o) == 3 && !strcmp(str(i0, "type"), "reasoning") &&
              !strcmp(str(dsv41_json_at(dsv41_json_get(i0, "content"), 0), "text"), "I should look.") &&
              !strcmp(str(i1, "type"), "message") && !strcmp(str(dsv41_json_at(dsv41_json_get(i1, "content"), 0), "text"), "Let me check.") &&
              !strcmp(str(i2, "type"), "function_call") && !strcmp(str(i2, "name"), "get_weather") && paris(dsv41_json_get(i2, "arguments")) &&
              !strcmp(str(r, "status"), "completed"),
          "responses: reasoning, message and function_call items");
    check_stream(GEN_RESPONSE, &s, "I should look.", "completed");
    dsv41_json_free(r);
}

/* A custom tool (Codex's apply_patch): the model calls the function of one string parameter it
 * stands for, and the call comes back as a custom_tool_call item whose input is that string. */
static void test_responses_custom(void) {
    static const char body[] = "{\"input\":\"Patch it\",\"stream\":true,\"tools\":[{\"type\":\"custom\",\"name\":\"apply_patch\","
                               "\"description\":\"Edit files\",\"format\":{\"type\":\"grammar\",\"syntax\":\"lark\",\"definition\":\"start: /.+/\"}}]}";
    static const char patch[] = "*** Begin Patch\n*** End Patch";
    static const char reply[] = "\n\n<" DSML " calls>\n<" DSML " invoke name=\"apply_patch\">\n<" DSML " parameter name=\"input\" string=\"true\">"
                                "*** Begin Patch\n*** End Patch</" DSML " parameter>\n</" DSML " invoke>\n</" DSML " calls>";
    streamed s = {0};
    dsv41_json *r = run(GEN_RESPONSE, body, reply, &s);
    const dsv41_json *item = dsv41_json_at(dsv41_json_get(r, "output"), 0);
    CHECK(dsv41_json_len(dsv41_json_get(r, "output")) == 1 && !strcmp(str(item, "type"), "custom_tool_call") &&
              !strcmp(str(item, "name"), "apply_patch") && !strcmp(str(item, "input"), patch) && !strcmp(str(item, "status"), "completed") &&
              !strncmp(str(item, "call_id"), "call_", 5),
          "responses: a custom tool's call is a custom_tool_call item with its input");
    CHECK(s.bad == 0 && s.name.p && !strcmp(s.name.p, "apply_patch") && s.args.p && !strcmp(s.args.p, patch),
          "responses, streamed: the custom_tool_call and its input (%s)", s.args.p);
    jb_free(&s.content), jb_free(&s.reasoning), jb_free(&s.name), jb_free(&s.args);
    dsv41_json_free(r);
}

int main(void) {
    const char *shared = getenv("DSV41_SHARED");
    char path[1024], added[1024];
    snprintf(path, sizeof path, "%s/tokenizer/deepseek-v3/tokenizer.json", shared && *shared ? shared : "../shared");
    snprintf(added, sizeof added, "%s/tokenizer/v41_added_tokens.json", shared && *shared ? shared : "../shared");
    dsv41_tokenizer *tok = dsv41_tokenizer_load_with_added(path, added);
    CHECK(tok != NULL, "the V4.1 test tokenizer: %s", dsv41_error());
    if (!tok) return test_summary();
    sv.tok = tok;
    snprintf(sv.model_name, sizeof sv.model_name, "test");
    sv.ctx = 4096;
    sv.n_slots = 1;
    pthread_mutex_init(&sv.mu, NULL);
    test_chat();
    test_messages();
    test_responses();
    test_responses_custom();
    dsv41_tokenizer_free(tok);
    return test_summary();
}
