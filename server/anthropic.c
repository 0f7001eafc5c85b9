/* anthropic.c - Anthropic's Messages API (POST /v1/messages, /v1/messages/count_tokens) over
 * the same jobs as OpenAI's routes (see api.h).
 *
 * A request is translated into the chat completions request it stands for (system text, text
 * turns, tool_use blocks as an assistant's tool_calls, tool_result blocks as tool messages,
 * tools with their input_schema as functions, thinking on or off, stop_sequences as stop), which
 * api_parse_generation then reads like any other: so one encoder, one sampler setup and one
 * context check serve both APIs, and the V4.1 DSML tool format renders and parses the tools of
 * either. The reply comes back as content blocks: thinking, text, tool_use. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

/* Seconds without an event after which a stream sends a ping (a long prefill, a slot's wait). */
#define PING_S 1.0

/* Each step below returns 0, or the HTTP status of the error it wrote to err. */

static int is_str(const dsv41_json *v) { return dsv41_json_type_of(v) == DSV41_JSON_STR; }

static const char *type_of(const dsv41_json *block) { return dsv41_json_str(dsv41_json_get(block, "type")); }

/* Text that is a string or text blocks (images and documents are not read). */
static int put_text(jbuf *o, const dsv41_json *v) { return api_put_text(o, v, (const char *const[]){"text", NULL}); }

/* One user turn's blocks: each text block a user message (the encoder joins consecutive ones),
 * each tool_result a tool message answering its tool_use_id. */
static int put_user(jbuf *o, const dsv41_json *content, int *first, jbuf *err) {
    for (size_t i = 0; i < dsv41_json_len(content); i++) {
        const dsv41_json *b = dsv41_json_at(content, i);
        const char *type = type_of(b);
        jb_puts(o, *first ? "" : ",");
        *first = 0;
        if (type && !strcmp(type, "text") && is_str(dsv41_json_get(b, "text"))) {
            jb_puts(o, "{\"role\":\"user\",\"content\":");
            jb_value(o, dsv41_json_get(b, "text"));
        } else if (type && !strcmp(type, "tool_result") && is_str(dsv41_json_get(b, "tool_use_id"))) {
            const dsv41_json *c = dsv41_json_get(b, "content");
            jb_puts(o, "{\"role\":\"tool\",\"tool_call_id\":");
            jb_value(o, dsv41_json_get(b, "tool_use_id"));
            jb_puts(o, ",\"content\":");
            if (!c) jb_puts(o, "\"\"");
            else if (put_text(o, c)) return api_bad(err, "messages", "a tool_result's content must be a string or text blocks");
        } else
            return api_bad(err, "messages", "a user turn's blocks must be text or tool_result (images and documents are not read)");
        jb_puts(o, "}");
    }
    return 0;
}

/* One assistant turn's blocks as one message: text joined as its content, thinking as its
 * reasoning_content, tool_use blocks as its tool_calls (input as the arguments object). */
static int put_assistant(jbuf *o, const dsv41_json *content, jbuf *err) {
    jbuf text = {0}, thinking = {0}, calls = {0};
    int n_calls = 0, rc = 0, any_thinking = 0;
    for (size_t i = 0; rc == 0 && i < dsv41_json_len(content); i++) {
        const dsv41_json *b = dsv41_json_at(content, i), *t;
        const char *type = type_of(b);
        if (type && !strcmp(type, "text") && is_str(t = dsv41_json_get(b, "text"))) jb_put(&text, dsv41_json_str(t), dsv41_json_len(t));
        else if (type && !strcmp(type, "thinking") && is_str(t = dsv41_json_get(b, "thinking"))) {
            jb_put(&thinking, dsv41_json_str(t), dsv41_json_len(t));
            any_thinking = 1;
        } else if (type && !strcmp(type, "redacted_thinking")) continue; /* nothing this model can read */
        else if (type && !strcmp(type, "tool_use") && is_str(dsv41_json_get(b, "id")) && is_str(dsv41_json_get(b, "name")) &&
                 dsv41_json_type_of(dsv41_json_get(b, "input")) == DSV41_JSON_OBJ) {
            jb_puts(&calls, n_calls++ ? ",{\"id\":" : "{\"id\":");
            jb_value(&calls, dsv41_json_get(b, "id"));
            jb_puts(&calls, ",\"type\":\"function\",\"function\":{\"name\":");
            jb_value(&calls, dsv41_json_get(b, "name"));
            jb_puts(&calls, ",\"arguments\":");
            jb_value(&calls, dsv41_json_get(b, "input"));
            jb_puts(&calls, "}}");
        } else
            rc = api_bad(err, "messages", "an assistant turn's blocks must be text, thinking or tool_use (with id, name and an input object)");
    }
    jb_puts(o, "{\"role\":\"assistant\",\"content\":");
    jb_str(o, text.p ? text.p : "", text.n);
    if (any_thinking) {
        jb_puts(o, ",\"reasoning_content\":");
        jb_str(o, thinking.p, thinking.n);
    }
    if (n_calls) {
        jb_puts(o, ",\"tool_calls\":[");
        jb_put(o, calls.p, calls.n);
        jb_puts(o, "]");
    }
    jb_puts(o, "}");
    jb_free(&text);
    jb_free(&thinking);
    jb_free(&calls);
    return rc;
}

/* Claude Code's first system block, "x-anthropic-billing-header: cc_version=...; cch=...", is
 * different in every request: rendered, it would make each prompt differ from the last one
 * within its first tokens, and no slot's cache could serve a second turn. It says nothing to
 * the model, so it is left out (as llama.cpp's server does). */
static const char billing_header[] = "x-anthropic-billing-header:";

static int is_billing_block(const dsv41_json *b) {
    const char *text = dsv41_json_str(dsv41_json_get(b, "text"));
    return text && !strncmp(text, billing_header, sizeof billing_header - 1);
}

/* The system prompt as one system message's content: a string, or its text blocks joined,
 * without the billing header. Nothing is written when nothing is left; 0, or a 400. */
static int put_system(jbuf *o, const dsv41_json *sys, int *first, jbuf *err) {
    static const char what[] = "'system' must be a string or an array of text blocks";
    jbuf kept = {0};
    dsv41_json *blocks = NULL;
    if (dsv41_json_type_of(sys) == DSV41_JSON_ARR) {
        jb_puts(&kept, "[");
        for (size_t i = 0, n = 0; i < dsv41_json_len(sys); i++) {
            if (is_billing_block(dsv41_json_at(sys, i))) continue;
            jb_puts(&kept, n++ ? "," : "");
            jb_value(&kept, dsv41_json_at(sys, i));
        }
        jb_puts(&kept, "]");
        if (kept.oom || !(blocks = dsv41_json_parse(kept.p, kept.n))) return jb_free(&kept), api_error(err, 500, NULL, "out of memory");
        jb_free(&kept);
        sys = blocks;
    }
    int rc = 0;
    if (dsv41_json_type_of(sys) != DSV41_JSON_NULL && !(blocks && !dsv41_json_len(blocks))) {
        jb_puts(o, "{\"role\":\"system\",\"content\":");
        rc = put_text(o, sys) ? api_bad(err, "system", what) : 0;
        jb_puts(o, "}");
        *first = 0;
    }
    dsv41_json_free(blocks);
    return rc;
}

/* system and messages as chat completions' messages array. A system message among the
 * messages (Claude Code sends its reminders so) stays where it stands: the V4.1 template renders
 * a system turn after the first as <｜System｜> and its text at that place. */
static int put_messages(jbuf *o, const dsv41_json *root, jbuf *err) {
    const dsv41_json *msgs = dsv41_json_get(root, "messages");
    if (dsv41_json_type_of(msgs) != DSV41_JSON_ARR || !dsv41_json_len(msgs))
        return api_bad(err, "messages", "'messages' must be a non-empty array of messages");
    int first = 1;
    jb_puts(o, "\"messages\":[");
    int rc = put_system(o, dsv41_json_get(root, "system"), &first, err);
    if (rc) return rc;
    for (size_t i = 0; i < dsv41_json_len(msgs); i++) {
        const dsv41_json *m = dsv41_json_at(msgs, i), *content = dsv41_json_get(m, "content");
        const char *role = dsv41_json_str(dsv41_json_get(m, "role"));
        int user = role && !strcmp(role, "user");
        if (role && !strcmp(role, "system")) {
            jb_puts(o, first ? "{\"role\":\"system\",\"content\":" : ",{\"role\":\"system\",\"content\":");
            if (put_text(o, content)) return api_bad(err, "messages", "a system message's content must be a string or text blocks");
            jb_puts(o, "}");
            first = 0;
            continue;
        }
        if (!user && (!role || strcmp(role, "assistant")))
            return api_bad(err, "messages", "each message's role must be user, assistant or system");
        if (is_str(content)) {
            jb_printf(o, "%s{\"role\":\"%s\",\"content\":", first ? "" : ",", role);
            jb_value(o, content);
            jb_puts(o, "}");
            first = 0;
        } else if (dsv41_json_type_of(content) != DSV41_JSON_ARR)
            return api_bad(err, "messages", "each message's content must be a string or an array of content blocks");
        else if (user) {
            int rc = put_user(o, content, &first, err);
            if (rc) return rc;
        } else {
            jb_puts(o, first ? "" : ",");
            first = 0;
            int rc = put_assistant(o, content, err);
            if (rc) return rc;
        }
    }
    jb_puts(o, "]");
    return 0;
}

/* tools ({name, description, input_schema}) as functions, and tool_choice. */
static int put_tools(jbuf *o, const dsv41_json *root, jbuf *err) {
    const dsv41_json *tools = dsv41_json_get(root, "tools"), *choice = dsv41_json_get(root, "tool_choice");
    if (dsv41_json_type_of(tools) == DSV41_JSON_NULL) return 0;
    if (dsv41_json_type_of(tools) != DSV41_JSON_ARR) return api_bad(err, "tools", "'tools' must be an array of tools");
    jb_puts(o, ",\"tools\":[");
    for (size_t i = 0; i < dsv41_json_len(tools); i++) {
        const dsv41_json *t = dsv41_json_at(tools, i), *schema = dsv41_json_get(t, "input_schema");
        const char *type = type_of(t);
        if (type && strcmp(type, "custom"))
            return api_error(err, 400, "tools", "tool type '%s' is not supported: only tools with an input_schema", type);
        if (!is_str(dsv41_json_get(t, "name")) || dsv41_json_type_of(schema) != DSV41_JSON_OBJ)
            return api_bad(err, "tools", "each tool needs a name and an input_schema object");
        jb_puts(o, i ? ",{\"type\":\"function\",\"function\":{\"name\":" : "{\"type\":\"function\",\"function\":{\"name\":");
        jb_value(o, dsv41_json_get(t, "name"));
        if (is_str(dsv41_json_get(t, "description"))) {
            jb_puts(o, ",\"description\":");
            jb_value(o, dsv41_json_get(t, "description"));
        }
        jb_puts(o, ",\"parameters\":");
        jb_value(o, schema);
        api_copy_keys(o, t, (const char *const[]){"strict", NULL});
        jb_puts(o, "}}");
    }
    jb_puts(o, "]");
    if (dsv41_json_type_of(choice) == DSV41_JSON_NULL) return 0;
    const char *type = type_of(choice), *name = dsv41_json_str(dsv41_json_get(choice, "name"));
    if (type && !strcmp(type, "auto")) jb_puts(o, ",\"tool_choice\":\"auto\"");
    else if (type && !strcmp(type, "any")) jb_puts(o, ",\"tool_choice\":\"required\"");
    else if (type && !strcmp(type, "none")) jb_puts(o, ",\"tool_choice\":\"none\"");
    else if (type && !strcmp(type, "tool") && name) {
        jb_puts(o, ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":");
        jb_value(o, dsv41_json_get(choice, "name"));
        jb_puts(o, "}}");
    } else
        return api_bad(err, "tool_choice", "'tool_choice' must be {\"type\": \"auto\" | \"any\" | \"none\"} or {\"type\": \"tool\", \"name\"}");
    /* one call at most (auto), exactly one (any, tool): the grammar's calls block holds one */
    if (dsv41_json_num(dsv41_json_get(choice, "disable_parallel_tool_use"), NULL) != 0) jb_puts(o, ",\"parallel_tool_calls\":false");
    return 0;
}

/* output_config.format (or the beta's output_format): {"type": "json_schema", "schema"} as
 * chat completions' response_format, which holds the answer to the schema. */
static int put_format(jbuf *o, const dsv41_json *root, jbuf *err) {
    const dsv41_json *format = dsv41_json_get(dsv41_json_get(root, "output_config"), "format");
    const char *param = "output_config.format";
    if (dsv41_json_type_of(format) == DSV41_JSON_NULL) format = dsv41_json_get(root, "output_format"), param = "output_format";
    if (dsv41_json_type_of(format) == DSV41_JSON_NULL) return 0;
    const dsv41_json *schema = dsv41_json_get(format, "schema");
    if (!is_str(dsv41_json_get(format, "type")) || strcmp(type_of(format), "json_schema") || dsv41_json_type_of(schema) != DSV41_JSON_OBJ)
        return api_error(err, 400, param, "'%s' must be {\"type\": \"json_schema\", \"schema\": {...}}", param);
    jb_puts(o, ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"output\",\"strict\":true,\"schema\":");
    jb_value(o, schema);
    jb_puts(o, "}}");
    return 0;
}

/* thinking's budget_tokens into *budget (0 when absent): an integer below max_tokens, whose
 * 1024 floor in Anthropic's API is not kept, so a small model's test can end its thinking early. */
static int get_budget(const dsv41_json *thinking, const dsv41_json *max, int32_t *budget, jbuf *err) {
    const dsv41_json *v = dsv41_json_get(thinking, "budget_tokens");
    *budget = 0;
    if (dsv41_json_type_of(v) == DSV41_JSON_NULL) return 0;
    int is_int;
    double x = dsv41_json_num(v, &is_int), m = dsv41_json_num(max, NULL);
    if (dsv41_json_type_of(v) != DSV41_JSON_NUM || !is_int || x < 1 || x > INT32_MAX)
        return api_bad(err, "thinking.budget_tokens", "'thinking.budget_tokens' must be a positive integer");
    if (dsv41_json_type_of(max) == DSV41_JSON_NUM && x >= m)
        return api_bad(err, "thinking.budget_tokens", "'thinking.budget_tokens' must be less than 'max_tokens'");
    *budget = (int32_t)x;
    return 0;
}

/* The chat completions request that an Anthropic request stands for, into o, and the thinking
 * budget in *budget (0: none). count: for count_tokens, where max_tokens is not asked for. */
static int translate(const dsv41_json *root, int count, jbuf *o, int32_t *budget, jbuf *err) {
    if (dsv41_json_type_of(root) != DSV41_JSON_OBJ) return api_bad(err, NULL, "the body must be a JSON object");
    const dsv41_json *max = dsv41_json_get(root, "max_tokens"), *stops = dsv41_json_get(root, "stop_sequences");
    const dsv41_json *thinking = dsv41_json_get(root, "thinking");
    if (!count && dsv41_json_type_of(max) == DSV41_JSON_NULL) return api_bad(err, "max_tokens", "'max_tokens' is required");
    if (dsv41_json_type_of(stops) != DSV41_JSON_NULL && dsv41_json_type_of(stops) != DSV41_JSON_ARR)
        return api_bad(err, "stop_sequences", "'stop_sequences' must be an array of strings");
    const char *think = dsv41_json_str(dsv41_json_get(thinking, "type"));
    if (dsv41_json_type_of(thinking) != DSV41_JSON_NULL &&
        (!think || (strcmp(think, "enabled") && strcmp(think, "disabled") && strcmp(think, "adaptive"))))
        return api_bad(err, "thinking", "'thinking' must be {\"type\": \"enabled\", \"budget_tokens\": N}, {\"type\": \"adaptive\"} or {\"type\": \"disabled\"}");
    /* adaptive thinking leaves the reasoning's length to the model: thinking mode, no budget */
    int on = think && strcmp(think, "disabled");
    const dsv41_json *config = dsv41_json_get(root, "output_config"), *effort = dsv41_json_get(config, "effort");
    if (dsv41_json_type_of(config) != DSV41_JSON_NULL && dsv41_json_type_of(config) != DSV41_JSON_OBJ)
        return api_bad(err, "output_config", "'output_config' must be an object");
    *budget = 0;
    int rc = think && !strcmp(think, "enabled") ? get_budget(thinking, max, budget, err) : 0;
    if (rc) return rc;
    jb_puts(o, "{");
    rc = put_messages(o, root, err);
    if (rc || (rc = put_tools(o, root, err)) || (rc = put_format(o, root, err))) return rc;
    jb_printf(o, ",\"thinking\":{\"type\":\"%s\"}", on ? "enabled" : "disabled");
    /* the effort sets the V4.1 template's reasoning effort; without thinking there is no reasoning
     * for it to set, and it is ignored */
    if (on && dsv41_json_type_of(effort) != DSV41_JSON_NULL) {
        jb_puts(o, ",\"reasoning_effort\":");
        jb_value(o, effort);
    }
    if (stops) {
        jb_puts(o, ",\"stop\":");
        jb_value(o, stops);
    }
    /* the sampling options keep their names, and so do this server's own extensions */
    static const char *const same[] = {"max_tokens", "temperature", "top_p", "top_k", "stream", "seed", "min_p",
                                       "cache_prompt", "id_slot", "skip_special_tokens", "return_tokens", NULL};
    api_copy_keys(o, root, count ? same + 1 : same);
    jb_puts(o, "}");
    return o->oom ? api_error(err, 500, NULL, "out of memory") : 0;
}

/* Parses body and translates it; the chat completions request in o, the thinking budget in *budget. */
static int read_request(const char *body, size_t n, int count, jbuf *o, int32_t *budget, jbuf *err) {
    dsv41_json *root = dsv41_json_parse(body, n);
    if (!root) return api_error(err, 400, NULL, "malformed JSON: %s", dsv41_error());
    int status = translate(root, count, o, budget, err);
    dsv41_json_free(root);
    return status;
}

int anthropic_parse(server *sv, const char *body, size_t n, gen *g, jbuf *err) {
    jbuf chat = {0};
    int32_t budget;
    int status = read_request(body, n, 0, &chat, &budget, err);
    if (!status) status = api_parse_generation(sv, GEN_MESSAGES, chat.p, chat.n, g, err);
    if (!status && (g->flags & DSV41_REPLY_THINKING)) g->job->think_budget = budget;
    jb_free(&chat);
    return status;
}

int anthropic_count_tokens(server *sv, const char *body, size_t n, jbuf *out) {
    jbuf chat = {0};
    gen g;
    int32_t budget;
    int status = read_request(body, n, 1, &chat, &budget, out);
    if (!status) status = api_parse_generation(sv, GEN_MESSAGES, chat.p, chat.n, &g, out);
    jb_free(&chat);
    if (status) return status;
    jb_printf(out, "{\"input_tokens\":%d}", g.job->n_prompt);
    job_free(g.job);
    return 200;
}

/* ---- replies */

static const char *stop_reason(const gen *g, const reply_split *r) {
    if (r->calls) return "tool_use";
    return g->job->end == END_LENGTH ? "max_tokens" : g->job->end == END_DEAD ? "grammar_dead_end" : api_stop_hit(g) ? "stop_sequence" : "end_turn";
}

/* input_tokens counts what was computed: Anthropic's total input is it plus the cached part. */
static void put_usage(jbuf *o, const job *j) {
    jb_printf(o, "\"usage\":{\"input_tokens\":%d,\"cache_creation_input_tokens\":0,\"cache_read_input_tokens\":%d,\"output_tokens\":%d}",
              j->n_prompt - j->n_cached, j->n_cached, j->n_gen);
}

/* One tool call as a tool_use block; streamed (stream != 0), its input comes in the delta that
 * follows instead. */
static void put_tool_use(jbuf *o, const gen *g, const dsv41_json *call, size_t i, int stream) {
    jb_printf(o, "{\"type\":\"tool_use\",\"id\":\"toolu_%s_%zu\",\"name\":", api_id_serial(g), i);
    jb_value(o, dsv41_json_get(call, "name"));
    jb_puts(o, ",\"input\":");
    const dsv41_json *args = dsv41_json_get(call, "arguments");
    dsv41_json *input = stream ? NULL : dsv41_json_parse(dsv41_json_str(args), dsv41_json_len(args));
    if (input) jb_value(o, input);
    else jb_puts(o, "{}");
    dsv41_json_free(input);
    jb_puts(o, "}");
}

static void put_stop(jbuf *o, const gen *g, const reply_split *r) {
    const char *hit = api_stop_hit(g);
    jb_printf(o, "\"stop_reason\":\"%s\",\"stop_sequence\":", stop_reason(g, r));
    if (hit && !r->calls) jb_str(o, hit, strlen(hit));
    else jb_puts(o, "null");
}

int anthropic_reply(server *sv, gen *g, jbuf *out) {
    job *j = g->job;
    if (j->end == END_ERROR) return api_error(out, 500, NULL, "generation failed: %s", j->error);
    const char *text = j->text.p ? j->text.p : "";
    reply_split r;
    api_split_reply(g, &r);
    jb_printf(out, "{\"id\":\"%s\",\"type\":\"message\",\"role\":\"assistant\",\"model\":", g->id);
    jb_str(out, sv->model_name, strlen(sv->model_name));
    jb_puts(out, ",\"content\":[");
    int n = 0;
    if (g->flags & DSV41_REPLY_THINKING) {
        jb_puts(out, "{\"type\":\"thinking\",\"thinking\":");
        jb_str(out, text, r.reasoning_end);
        jb_puts(out, ",\"signature\":\"\"}");
        n++;
    }
    if (r.content_end > r.content_start || !r.calls) {
        jb_puts(out, n++ ? ",{\"type\":\"text\",\"text\":" : "{\"type\":\"text\",\"text\":");
        jb_str(out, text + r.content_start, r.content_end - r.content_start);
        jb_puts(out, "}");
    }
    for (size_t i = 0; i < dsv41_json_len(r.calls); i++) {
        jb_puts(out, n++ ? "," : "");
        put_tool_use(out, g, dsv41_json_at(r.calls, i), i, 0);
    }
    jb_puts(out, "],");
    put_stop(out, g, &r);
    jb_puts(out, ",");
    put_usage(out, j);
    jb_puts(out, "}");
    dsv41_json_free(r.calls);
    return 200;
}

/* One server-sent event of the given type; data is the JSON after {"type":TYPE, (or none). */
static void event(gen *g, jbuf *o, const char *type, const char *data) {
    jb_printf(o, "event: %s\ndata: {\"type\":\"%s\"%s%s}\n\n", type, type, *data ? "," : "", data);
    g->last_event = now_s();
}

static void block_stop(gen *g, jbuf *o) {
    if (g->open < 0) return;
    jb_printf(o, "event: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":%d}\n\n", g->blocks - 1);
    g->open = -1;
}

/* The deltas of a thinking or a text block, the block opened first when it is not the one open. */
static void put_block_delta(server *sv, gen *g, jbuf *o, reply_part part, const char *text, size_t a, size_t b, int32_t n_tok) {
    (void)sv, (void)n_tok;
    int thinking = part == PART_REASONING;
    if (g->open != (int)part) {
        block_stop(g, o);
        jb_printf(o, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":%d,\"content_block\":%s}\n\n",
                  g->blocks++, thinking ? "{\"type\":\"thinking\",\"thinking\":\"\",\"signature\":\"\"}" : "{\"type\":\"text\",\"text\":\"\"}");
        g->open = (int)part;
    }
    jb_printf(o, "event: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":%d,\"delta\":{\"type\":\"%s\",\"%s\":",
              g->blocks - 1, thinking ? "thinking_delta" : "text_delta", thinking ? "thinking" : "text");
    jb_str(o, text + a, b - a);
    jb_puts(o, "}}\n\n");
    g->last_event = now_s();
}

int anthropic_stream(server *sv, gen *g, jbuf *out) {
    job *j = g->job;
    size_t before = out->n;
    if (!g->sent_head) {
        jbuf m = {0};
        jb_printf(&m, "\"message\":{\"id\":\"%s\",\"type\":\"message\",\"role\":\"assistant\",\"model\":", g->id);
        jb_str(&m, sv->model_name, strlen(sv->model_name));
        jb_puts(&m, ",\"content\":[],\"stop_reason\":null,\"stop_sequence\":null,");
        put_usage(&m, j);
        jb_puts(&m, "}");
        event(g, out, "message_start", m.p ? m.p : "");
        /* a ping at once, before the prompt's prefill: a client sees the stream is alive however
         * long the prefill takes, and then one every PING_S while nothing else is sent */
        event(g, out, "ping", "");
        jb_free(&m);
        g->sent_head = 1;
        g->open = -1;
    }
    reply_split r;
    int ended = api_stream_text(sv, g, out, put_block_delta, &r);
    if (j->end == END_NONE) {
        if (out->n == before && now_s() - g->last_event >= PING_S) event(g, out, "ping", "");
        return 0;
    }
    if (!ended) {
        jbuf e = {0};
        api_error(&e, 500, NULL, "generation failed: %s", j->error);
        anthropic_error_shape(&e, 500);
        jb_printf(out, "event: error\ndata: %s\n\n", e.p ? e.p : "{}");
        jb_free(&e);
        return 1;
    }
    if (!g->blocks && !r.calls) put_block_delta(sv, g, out, PART_CONTENT, "", 0, 0, j->n_gen); /* an empty answer is a text block */
    block_stop(g, out);
    for (size_t i = 0; i < dsv41_json_len(r.calls); i++) {
        const dsv41_json *call = dsv41_json_at(r.calls, i);
        jb_printf(out, "event: content_block_start\ndata: {\"type\":\"content_block_start\",\"index\":%d,\"content_block\":", g->blocks);
        put_tool_use(out, g, call, i, 1);
        jb_printf(out, "}\n\nevent: content_block_delta\ndata: {\"type\":\"content_block_delta\",\"index\":%d,"
                       "\"delta\":{\"type\":\"input_json_delta\",\"partial_json\":", g->blocks);
        jb_value(out, dsv41_json_get(call, "arguments"));
        jb_printf(out, "}}\n\nevent: content_block_stop\ndata: {\"type\":\"content_block_stop\",\"index\":%d}\n\n", g->blocks++);
    }
    jbuf d = {0};
    jb_puts(&d, "\"delta\":{");
    put_stop(&d, g, &r);
    jb_puts(&d, "},");
    put_usage(&d, j);
    event(g, out, "message_delta", d.p ? d.p : "");
    event(g, out, "message_stop", "");
    jb_free(&d);
    dsv41_json_free(r.calls);
    return 1;
}

void anthropic_error_shape(jbuf *b, int status) {
    dsv41_json *e = b->p ? dsv41_json_parse(b->p, b->n) : NULL;
    const dsv41_json *msg = dsv41_json_get(dsv41_json_get(e, "error"), "message");
    const char *type = status == 401 ? "authentication_error" : status == 403 ? "permission_error"
                     : status == 404 || status == 405 ? "not_found_error" : status == 413 ? "request_too_large"
                     : status == 429 ? "rate_limit_error" : status == 503 ? "overloaded_error"
                     : status >= 500 ? "api_error" : "invalid_request_error";
    jbuf o = {0};
    jb_printf(&o, "{\"type\":\"error\",\"error\":{\"type\":\"%s\",\"message\":", type);
    if (msg) jb_value(&o, msg);
    else jb_puts(&o, "\"error\"");
    jb_puts(&o, "}}");
    dsv41_json_free(e);
    jb_free(b);
    *b = o;
}
