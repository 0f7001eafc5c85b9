/* responses.c - OpenAI's Responses API (POST /v1/responses) over the same jobs as the other
 * routes (see api.h).
 *
 * As with Anthropic's API (anthropic.c), a request is translated into the chat completions
 * request it stands for: instructions as the system message, input items (messages, function
 * calls, their outputs, reasoning) as turns, function tools as tools, max_output_tokens as
 * max_tokens, reasoning.effort as reasoning_effort; api_parse_generation reads it. The reply
 * is a response object whose output holds a reasoning item, a message item and function_call
 * items; streamed, every change is a typed event with a sequence_number. Responses are not
 * stored: previous_response_id, background and the routes under /v1/responses/{id} are 4xx. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"


static int is_str(const dsv41_json *v) { return dsv41_json_type_of(v) == DSV41_JSON_STR; }

static const char *str_at(const dsv41_json *v, const char *key) { return dsv41_json_str(dsv41_json_get(v, key)); }

static int is(const char *s, const char *want) { return s && !strcmp(s, want); }

/* A message item's content: a string, or input_text / output_text parts (images and files are
 * not read). */
static int put_content(jbuf *o, const dsv41_json *v) {
    return api_put_text(o, v, (const char *const[]){"input_text", "output_text", NULL});
}

/* An assistant turn being gathered from consecutive items: its text, reasoning and calls. */
typedef struct {
    jbuf text, reasoning, calls;
    int any, n_calls, has_reasoning;
} turn;

static void flush(jbuf *o, turn *t, int *first) {
    if (t->any) {
        jb_puts(o, *first ? "{\"role\":\"assistant\",\"content\":" : ",{\"role\":\"assistant\",\"content\":");
        jb_str(o, t->text.p ? t->text.p : "", t->text.n);
        if (t->has_reasoning) {
            jb_puts(o, ",\"reasoning_content\":");
            jb_str(o, t->reasoning.p ? t->reasoning.p : "", t->reasoning.n);
        }
        if (t->n_calls) {
            jb_puts(o, ",\"tool_calls\":[");
            jb_put(o, t->calls.p, t->calls.n);
            jb_puts(o, "]");
        }
        jb_puts(o, "}");
        *first = 0;
    }
    jb_free(&t->text), jb_free(&t->reasoning), jb_free(&t->calls);
    *t = (turn){0};
}

/* One input item into o (or into the assistant turn t being gathered). */
static int put_item(jbuf *o, const dsv41_json *it, turn *t, int *first, jbuf *err) {
    const char *type = str_at(it, "type"), *role = str_at(it, "role");
    int custom = is(type, "custom_tool_call");
    if (is(type, "function_call") || custom) {
        const char *arg = custom ? "input" : "arguments";
        if (!is_str(dsv41_json_get(it, "call_id")) || !is_str(dsv41_json_get(it, "name")) || !is_str(dsv41_json_get(it, arg)))
            return api_bad(err, "input", custom ? "a custom_tool_call item needs call_id, name and input"
                                                : "a function_call item needs call_id, name and arguments");
        jb_puts(&t->calls, t->n_calls++ ? ",{\"id\":" : "{\"id\":");
        jb_value(&t->calls, dsv41_json_get(it, "call_id"));
        jb_puts(&t->calls, ",\"type\":\"function\",\"function\":{\"name\":");
        jb_value(&t->calls, dsv41_json_get(it, "name"));
        jb_puts(&t->calls, ",\"arguments\":");
        if (custom) { /* the call of the function a custom tool stands for: {"input": text} */
            jbuf args = {0};
            jb_puts(&args, "{\"input\":");
            jb_value(&args, dsv41_json_get(it, "input"));
            jb_puts(&args, "}");
            jb_str(&t->calls, args.p ? args.p : "", args.n);
            jb_free(&args);
        } else
            jb_value(&t->calls, dsv41_json_get(it, "arguments"));
        jb_puts(&t->calls, "}}");
        t->any = 1;
        return 0;
    }
    if (is(type, "reasoning")) {
        const dsv41_json *c = dsv41_json_get(it, "content");
        for (size_t i = 0; i < dsv41_json_len(c); i++) {
            const dsv41_json *text = dsv41_json_get(dsv41_json_at(c, i), "text");
            if (is_str(text)) jb_put(&t->reasoning, dsv41_json_str(text), dsv41_json_len(text));
        }
        t->has_reasoning = t->any = 1;
        return 0;
    }
    if (is(role, "assistant") && (!type || is(type, "message"))) {
        const dsv41_json *c = dsv41_json_get(it, "content");
        jbuf one = {0};
        if (put_content(&one, c)) return jb_free(&one), api_bad(err, "input", "a message's content must be a string or text parts");
        dsv41_json *s = dsv41_json_parse(one.p, one.n); /* the joined text, unescaped */
        jb_put(&t->text, dsv41_json_str(s), dsv41_json_len(s));
        dsv41_json_free(s);
        jb_free(&one);
        t->any = 1;
        return 0;
    }
    flush(o, t, first);
    jb_puts(o, *first ? "" : ",");
    *first = 0;
    if (is(type, "function_call_output") || is(type, "custom_tool_call_output")) {
        if (!is_str(dsv41_json_get(it, "call_id"))) return api_bad(err, "input", "a call's output item needs a call_id");
        jb_puts(o, "{\"role\":\"tool\",\"tool_call_id\":");
        jb_value(o, dsv41_json_get(it, "call_id"));
        jb_puts(o, ",\"content\":");
        if (put_content(o, dsv41_json_get(it, "output"))) return api_bad(err, "input", "a function_call_output's output must be text");
    } else if ((is(role, "user") || is(role, "system") || is(role, "developer")) && (!type || is(type, "message"))) {
        jb_printf(o, "{\"role\":\"%s\",\"content\":", role);
        if (put_content(o, dsv41_json_get(it, "content")))
            return api_bad(err, "input", "a message's content must be a string or text parts (images and files are not read)");
    } else
        return api_bad(err, "input", "input items must be messages, function_call, function_call_output or reasoning");
    jb_puts(o, "}");
    return 0;
}

static int put_input(jbuf *o, const dsv41_json *root, jbuf *err) {
    const dsv41_json *input = dsv41_json_get(root, "input"), *instructions = dsv41_json_get(root, "instructions");
    int first = 1, rc = 0;
    jb_puts(o, "\"messages\":[");
    if (is_str(instructions)) {
        jb_puts(o, "{\"role\":\"system\",\"content\":");
        jb_value(o, instructions);
        jb_puts(o, "}");
        first = 0;
    } else if (dsv41_json_type_of(instructions) != DSV41_JSON_NULL)
        return api_bad(err, "instructions", "'instructions' must be a string");
    if (is_str(input)) {
        jb_puts(o, first ? "{\"role\":\"user\",\"content\":" : ",{\"role\":\"user\",\"content\":");
        jb_value(o, input);
        jb_puts(o, "}");
    } else if (dsv41_json_type_of(input) == DSV41_JSON_ARR && dsv41_json_len(input)) {
        turn t = {0};
        for (size_t i = 0; rc == 0 && i < dsv41_json_len(input); i++) rc = put_item(o, dsv41_json_at(input, i), &t, &first, err);
        flush(o, &t, &first);
    } else
        return api_bad(err, "input", "'input' must be a string or a non-empty array of input items");
    jb_puts(o, "]");
    return rc;
}

/* A custom tool ({"type": "custom", "name", "description", "format"}: free-form text input, such
 * as Codex's apply_patch with its Lark grammar) goes to the model as a function of one string
 * parameter, input, which the template has the model write raw; a call of it comes back as a
 * custom_tool_call item whose input is that text. The format's grammar is not enforced. */
static const char custom_parameters[] =
    "{\"type\":\"object\",\"properties\":{\"input\":{\"type\":\"string\"}},\"required\":[\"input\"],\"additionalProperties\":false}";

/* tools ({type: "function", name, description, parameters}, or custom) and tool_choice; the names
 * of the custom tools into custom, each NUL-terminated. */
static int put_tools(jbuf *o, const dsv41_json *root, jbuf *custom, jbuf *err) {
    const dsv41_json *tools = dsv41_json_get(root, "tools"), *choice = dsv41_json_get(root, "tool_choice");
    if (dsv41_json_type_of(tools) == DSV41_JSON_ARR) {
        jb_puts(o, ",\"tools\":[");
        for (size_t i = 0; i < dsv41_json_len(tools); i++) {
            const dsv41_json *t = dsv41_json_at(tools, i);
            int is_custom = is(str_at(t, "type"), "custom");
            if ((!is_custom && !is(str_at(t, "type"), "function")) || !is_str(dsv41_json_get(t, "name")))
                return api_bad(err, "tools", "only function and custom tools (with a name) are supported");
            jb_puts(o, i ? ",{\"type\":\"function\",\"function\":{\"name\":" : "{\"type\":\"function\",\"function\":{\"name\":");
            jb_value(o, dsv41_json_get(t, "name"));
            api_copy_keys(o, t, is_custom ? (const char *const[]){"description", NULL} : (const char *const[]){"description", "parameters", "strict", NULL});
            if (is_custom) {
                jb_printf(o, ",\"parameters\":%s", custom_parameters);
                jb_put(custom, str_at(t, "name"), strlen(str_at(t, "name")) + 1);
            }
            jb_puts(o, "}}");
        }
        jb_puts(o, "]");
    } else if (dsv41_json_type_of(tools) != DSV41_JSON_NULL)
        return api_bad(err, "tools", "'tools' must be an array of tools");
    if (dsv41_json_type_of(choice) == DSV41_JSON_OBJ) {
        if ((!is(str_at(choice, "type"), "function") && !is(str_at(choice, "type"), "custom")) || !is_str(dsv41_json_get(choice, "name")))
            return api_bad(err, "tool_choice", "'tool_choice' must be none, auto, required or {\"type\": \"function\" | \"custom\", \"name\"}");
        jb_puts(o, ",\"tool_choice\":{\"type\":\"function\",\"function\":{\"name\":");
        jb_value(o, dsv41_json_get(choice, "name"));
        jb_puts(o, "}}");
    } else
        api_copy_keys(o, root, (const char *const[]){"tool_choice", NULL});
    return 0;
}

/* text.format as chat completions' response_format: json_schema is flat here ({"type", "name",
 * "schema", "strict"}) and wrapped there. */
static int put_format(jbuf *o, const dsv41_json *root, jbuf *err) {
    const dsv41_json *format = dsv41_json_get(dsv41_json_get(root, "text"), "format");
    const char *type = str_at(format, "type");
    if (dsv41_json_type_of(format) == DSV41_JSON_NULL || is(type, "text")) return 0;
    if (is(type, "json_object")) jb_puts(o, ",\"response_format\":{\"type\":\"json_object\"}");
    else if (is(type, "json_schema")) {
        jb_puts(o, ",\"response_format\":{\"type\":\"json_schema\",\"json_schema\":{\"name\":\"output\"");
        api_copy_keys(o, format, (const char *const[]){"schema", "strict", NULL});
        jb_puts(o, "}}");
    } else
        return api_bad(err, "text.format", "text.format.type must be text, json_object or json_schema");
    return 0;
}

/* The chat completions request a Responses request stands for, into o. */
static int translate(const dsv41_json *root, jbuf *o, jbuf *custom, jbuf *err) {
    if (dsv41_json_type_of(root) != DSV41_JSON_OBJ) return api_bad(err, NULL, "the body must be a JSON object");
    if (dsv41_json_type_of(dsv41_json_get(root, "previous_response_id")) != DSV41_JSON_NULL)
        return api_bad(err, "previous_response_id", "responses are not stored here: send the whole conversation in 'input'");
    if (dsv41_json_num(dsv41_json_get(root, "background"), NULL) != 0)
        return api_bad(err, "background", "background responses are not supported: responses are not stored here");
    if (dsv41_json_type_of(dsv41_json_get(root, "conversation")) != DSV41_JSON_NULL)
        return api_bad(err, "conversation", "conversations are not stored here: send the whole conversation in 'input'");
    jb_puts(o, "{");
    int rc = put_input(o, root, err);
    if (rc || (rc = put_tools(o, root, custom, err)) || (rc = put_format(o, root, err))) return rc;
    const dsv41_json *max = dsv41_json_get(root, "max_output_tokens"), *effort = dsv41_json_get(dsv41_json_get(root, "reasoning"), "effort");
    if (max) {
        jb_puts(o, ",\"max_tokens\":");
        jb_value(o, max);
    }
    if (dsv41_json_type_of(effort) != DSV41_JSON_NULL) {
        jb_puts(o, ",\"reasoning_effort\":");
        jb_value(o, effort);
    }
    static const char *const same[] = {"temperature", "top_p", "top_k", "stream", "seed", "min_p", "stop", "cache_prompt",
                                       "id_slot", "skip_special_tokens", "parallel_tool_calls", "grammar", NULL};
    api_copy_keys(o, root, same);
    jb_puts(o, "}");
    return o->oom ? api_error(err, 500, NULL, "out of memory") : 0;
}

/* The members of the response object that repeat the request: what it set, else the value
 * this server used (store is always false: nothing is stored; include and prompt_cache_key
 * change nothing here, the prompt cache finds a shared prefix by itself). */
static void put_echo(jbuf *o, const dsv41_json *root) {
    static const char *const members[][2] = {
        {"instructions", "null"}, {"parallel_tool_calls", "true"}, {"tool_choice", "\"auto\""}, {"tools", "[]"},
        {"text", "{\"format\":{\"type\":\"text\"}}"}, {"reasoning", "{\"effort\":null,\"summary\":null}"},
        {"temperature", NULL}, {"top_p", NULL}, {"metadata", "{}"}, {"prompt_cache_key", NULL}, {"user", NULL},
        {"truncation", NULL}, {"service_tier", NULL}};
    jb_puts(o, ",\"store\":false");
    for (size_t i = 0; i < sizeof members / sizeof members[0]; i++) {
        const dsv41_json *v = dsv41_json_get(root, members[i][0]);
        if (!v && !members[i][1]) continue;
        jb_printf(o, ",\"%s\":", members[i][0]);
        if (v) jb_value(o, v);
        else jb_puts(o, members[i][1]);
    }
}

int responses_parse(server *sv, const char *body, size_t n, gen *g, jbuf *err) {
    dsv41_json *root = dsv41_json_parse(body, n);
    if (!root) return api_error(err, 400, NULL, "malformed JSON: %s", dsv41_error());
    jbuf chat = {0}, custom = {0};
    int status = translate(root, &chat, &custom, err);
    if (!status) status = api_parse_generation(sv, GEN_RESPONSE, chat.p, chat.n, g, err);
    if (!status) {
        put_echo(&g->job->echo, root);
        g->job->custom = custom, custom = (jbuf){0};
        if (g->job->echo.oom || g->job->custom.oom) status = api_error(err, 500, NULL, "out of memory");
        if (status) job_free(g->job), g->job = NULL;
    }
    dsv41_json_free(root);
    jb_free(&chat);
    jb_free(&custom);
    return status;
}

/* ---- replies */

/* The items of the output, in order: reasoning (thinking mode), the message, the calls. */
static void put_reasoning_item(jbuf *o, const gen *g, const char *text, size_t n) {
    jb_printf(o, "{\"id\":\"rs_%s\",\"type\":\"reasoning\",\"summary\":[],\"content\":[{\"type\":\"reasoning_text\",\"text\":", api_id_serial(g));
    jb_str(o, text, n);
    jb_puts(o, "}]}");
}

static void put_text_part(jbuf *o, const char *text, size_t n) {
    jb_puts(o, "{\"type\":\"output_text\",\"text\":");
    jb_str(o, text, n);
    jb_puts(o, ",\"annotations\":[],\"logprobs\":[]}");
}

static void put_message_item(jbuf *o, const gen *g, const char *status, const char *text, size_t n) {
    jb_printf(o, "{\"id\":\"msg_%s\",\"type\":\"message\",\"status\":\"%s\",\"role\":\"assistant\",\"content\":[", api_id_serial(g), status);
    if (text) put_text_part(o, text, n);
    jb_puts(o, "]}");
}

/* Whether the call is of one of the request's custom tools. */
static int is_custom_call(const gen *g, const dsv41_json *call) {
    const char *name = dsv41_json_str(dsv41_json_get(call, "name"));
    const jbuf *c = &g->job->custom;
    for (size_t at = 0; name && at < c->n; at += strlen(c->p + at) + 1)
        if (!strcmp(c->p + at, name)) return 1;
    return 0;
}

/* A custom tool's input: the call's "input" parameter, as JSON text (a string); the arguments
 * text as a string when the model wrote something else. */
static void put_custom_input(jbuf *o, const dsv41_json *call) {
    const dsv41_json *args = dsv41_json_get(call, "arguments");
    dsv41_json *parsed = dsv41_json_parse(dsv41_json_str(args), dsv41_json_len(args));
    const dsv41_json *input = dsv41_json_get(parsed, "input");
    jb_value(o, is_str(input) ? input : args);
    dsv41_json_free(parsed);
}

static void put_call_item(jbuf *o, const gen *g, const dsv41_json *call, size_t i, int done) {
    if (is_custom_call(g, call)) {
        jb_printf(o, "{\"id\":\"ctc_%s_%zu\",\"type\":\"custom_tool_call\",\"status\":\"%s\",\"call_id\":\"call_%s_%zu\",\"name\":",
                  api_id_serial(g), i, done ? "completed" : "in_progress", api_id_serial(g), i);
        jb_value(o, dsv41_json_get(call, "name"));
        jb_puts(o, ",\"input\":");
        if (done) put_custom_input(o, call);
        else jb_puts(o, "\"\"");
        jb_puts(o, "}");
        return;
    }
    jb_printf(o, "{\"id\":\"fc_%s_%zu\",\"type\":\"function_call\",\"status\":\"%s\",\"call_id\":\"call_%s_%zu\",\"name\":",
              api_id_serial(g), i, done ? "completed" : "in_progress", api_id_serial(g), i);
    jb_value(o, dsv41_json_get(call, "name"));
    jb_puts(o, ",\"arguments\":");
    if (done) jb_value(o, dsv41_json_get(call, "arguments"));
    else jb_puts(o, "\"\"");
    jb_puts(o, "}");
}

/* The status of the reply's last item, and of the response, once it ended: a reply cut by its
 * token limit is incomplete, and so is the message it was writing. */
static const char *end_status(const gen *g) { return g->job->end == END_LENGTH || g->job->end == END_DEAD ? "incomplete" : "completed"; }

/* The response object; r: the ended reply apart (NULL while it runs: no output, no usage). */
static void put_response(server *sv, const gen *g, jbuf *o, const reply_split *r) {
    const job *j = g->job;
    const char *status = !r ? "in_progress" : end_status(g);
    jb_printf(o, "{\"id\":\"%s\",\"object\":\"response\",\"created_at\":%lld,\"status\":\"%s\",\"model\":", g->id, g->created, status);
    jb_str(o, sv->model_name, strlen(sv->model_name));
    jb_puts(o, ",\"output\":[");
    const char *text = j->text.p ? j->text.p : "";
    int n = 0;
    if (r && (g->flags & DSV41_REPLY_THINKING)) put_reasoning_item(o, g, text, r->reasoning_end), n++;
    if (r && (r->content_end > r->content_start || !r->calls)) {
        jb_puts(o, n++ ? "," : "");
        put_message_item(o, g, end_status(g), text + r->content_start, r->content_end - r->content_start);
    }
    for (size_t i = 0; r && i < dsv41_json_len(r->calls); i++) {
        jb_puts(o, n++ ? "," : "");
        put_call_item(o, g, dsv41_json_at(r->calls, i), i, 1);
    }
    jb_printf(o, "],\"incomplete_details\":%s,\"error\":null",
              !r ? "null" : j->end == END_LENGTH ? "{\"reason\":\"max_output_tokens\"}" : j->end == END_DEAD ? "{\"reason\":\"grammar_dead_end\"}" : "null");
    if (j->echo.n) jb_put(o, j->echo.p, j->echo.n);
    jb_printf(o, ",\"max_output_tokens\":%d,\"usage\":", j->max_tokens);
    if (r) jb_printf(o, "{\"input_tokens\":%d,\"input_tokens_details\":{\"cached_tokens\":%d},\"output_tokens\":%d,"
                        "\"output_tokens_details\":{\"reasoning_tokens\":%d},\"total_tokens\":%d}",
                     j->n_prompt, j->n_cached, j->n_gen, api_reasoning_tokens(sv, g), j->n_prompt + j->n_gen);
    else jb_puts(o, "null");
    jb_puts(o, "}");
}

int responses_reply(server *sv, gen *g, jbuf *out) {
    if (g->job->end == END_ERROR) return api_error(out, 500, NULL, "generation failed: %s", g->job->error);
    reply_split r;
    api_split_reply(g, &r);
    put_response(sv, g, out, &r);
    dsv41_json_free(r.calls);
    return 200;
}

/* Opens an event of the given type: "event: TYPE\ndata: {"type":TYPE,"sequence_number":N"; the
 * caller writes the rest and closes it with end(). */
static void event(gen *g, jbuf *o, const char *type) {
    jb_printf(o, "event: %s\ndata: {\"type\":\"%s\",\"sequence_number\":%d", type, type, g->seq++);
}
static void end(jbuf *o) { jb_puts(o, "}\n\n"); }

/* The item ids of the two text parts, and their content type. */
static const char *item_prefix(reply_part part) { return part == PART_REASONING ? "rs" : "msg"; }

/* Closes the open text item whose whole text is text[a, b). */
static void close_item(gen *g, jbuf *o, const char *text, size_t a, size_t b) {
    if (g->open < 0) return;
    reply_part part = (reply_part)g->open;
    int index = g->blocks - 1;
    event(g, o, part == PART_REASONING ? "response.reasoning_text.done" : "response.output_text.done");
    jb_printf(o, ",\"item_id\":\"%s_%s\",\"output_index\":%d,\"content_index\":0,\"text\":", item_prefix(part), api_id_serial(g), index);
    jb_str(o, text + a, b - a);
    end(o);
    event(g, o, "response.content_part.done");
    jb_printf(o, ",\"item_id\":\"%s_%s\",\"output_index\":%d,\"content_index\":0,\"part\":", item_prefix(part), api_id_serial(g), index);
    if (part == PART_REASONING) {
        jb_puts(o, "{\"type\":\"reasoning_text\",\"text\":");
        jb_str(o, text + a, b - a);
        jb_puts(o, "}");
    } else
        put_text_part(o, text + a, b - a);
    end(o);
    event(g, o, "response.output_item.done");
    jb_printf(o, ",\"output_index\":%d,\"item\":", index);
    if (part == PART_REASONING) put_reasoning_item(o, g, text + a, b - a);
    else put_message_item(o, g, end_status(g), text + a, b - a);
    end(o);
    g->open = -1;
}

/* A text delta of the reasoning or the message item, the item opened first when it is not. */
static void put_item_delta(server *sv, gen *g, jbuf *o, reply_part part, const char *text, size_t a, size_t b, int32_t n_tok) {
    (void)sv, (void)n_tok;
    if (g->open != (int)part) {
        close_item(g, o, text, 0, g->sent_reasoning); /* only the reasoning closes before the end */
        event(g, o, "response.output_item.added");
        jb_printf(o, ",\"output_index\":%d,\"item\":", g->blocks);
        if (part == PART_REASONING) jb_printf(o, "{\"id\":\"rs_%s\",\"type\":\"reasoning\",\"summary\":[],\"content\":[]}", api_id_serial(g));
        else put_message_item(o, g, "in_progress", NULL, 0);
        end(o);
        event(g, o, "response.content_part.added");
        jb_printf(o, ",\"item_id\":\"%s_%s\",\"output_index\":%d,\"content_index\":0,\"part\":", item_prefix(part), api_id_serial(g), g->blocks);
        if (part == PART_REASONING) jb_puts(o, "{\"type\":\"reasoning_text\",\"text\":\"\"}");
        else put_text_part(o, "", 0);
        end(o);
        g->open = (int)part;
        g->blocks++;
    }
    if (b <= a) return;
    event(g, o, part == PART_REASONING ? "response.reasoning_text.delta" : "response.output_text.delta");
    jb_printf(o, ",\"item_id\":\"%s_%s\",\"output_index\":%d,\"content_index\":0,\"delta\":", item_prefix(part), api_id_serial(g), g->blocks - 1);
    jb_str(o, text + a, b - a);
    jb_puts(o, part == PART_CONTENT ? ",\"logprobs\":[]" : "");
    end(o);
}

int responses_stream(server *sv, gen *g, jbuf *out) {
    job *j = g->job;
    if (!g->sent_head) {
        g->open = -1;
        for (int k = 0; k < 2; k++) {
            event(g, out, k ? "response.in_progress" : "response.created");
            jb_puts(out, ",\"response\":");
            put_response(sv, g, out, NULL);
            end(out);
        }
        g->sent_head = 1;
    }
    reply_split r;
    int ended = api_stream_text(sv, g, out, put_item_delta, &r);
    if (j->end == END_NONE) return 0;
    if (!ended) {
        event(g, out, "error");
        jb_puts(out, ",\"code\":\"server_error\",\"message\":");
        char msg[320];
        snprintf(msg, sizeof msg, "generation failed: %s", j->error);
        jb_str(out, msg, strlen(msg));
        jb_puts(out, ",\"param\":null");
        end(out);
        return 1;
    }
    const char *text = j->text.p ? j->text.p : "";
    if (g->open != PART_CONTENT && !r.calls) put_item_delta(sv, g, out, PART_CONTENT, text, 0, 0, j->n_gen); /* an empty answer */
    if (g->open == PART_REASONING) close_item(g, out, text, 0, g->sent_reasoning);
    if (g->open == PART_CONTENT) close_item(g, out, text, r.content_start, r.content_end);
    for (size_t i = 0; i < dsv41_json_len(r.calls); i++) {
        const dsv41_json *call = dsv41_json_at(r.calls, i);
        int index = g->blocks++;
        event(g, out, "response.output_item.added");
        jb_printf(out, ",\"output_index\":%d,\"item\":", index);
        put_call_item(out, g, call, i, 0);
        end(out);
        int custom = is_custom_call(g, call);
        for (int k = 0; k < 2; k++) {
            if (custom) event(g, out, k ? "response.custom_tool_call_input.done" : "response.custom_tool_call_input.delta");
            else event(g, out, k ? "response.function_call_arguments.done" : "response.function_call_arguments.delta");
            jb_printf(out, ",\"item_id\":\"%s_%s_%zu\",\"output_index\":%d,\"%s\":", custom ? "ctc" : "fc", api_id_serial(g), i, index,
                      k ? (custom ? "input" : "arguments") : "delta");
            if (custom) put_custom_input(out, call);
            else jb_value(out, dsv41_json_get(call, "arguments"));
            end(out);
        }
        event(g, out, "response.output_item.done");
        jb_printf(out, ",\"output_index\":%d,\"item\":", index);
        put_call_item(out, g, call, i, 1);
        end(out);
    }
    event(g, out, !strcmp(end_status(g), "incomplete") ? "response.incomplete" : "response.completed");
    jb_puts(out, ",\"response\":");
    put_response(sv, g, out, &r);
    end(out);
    dsv41_json_free(r.calls);
    return 1;
}
