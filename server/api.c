/* api.c - OpenAI's request and reply shapes over the library (see api.h).
 *
 * A chat request becomes a chat case for the V4.1 encoder: its messages and tools pass through
 * as they came (the encoder takes OpenAI's message schema), the options say chat or thinking
 * mode. The reply is split back with dsv41_chat_reply_parts: reasoning_content, content, and
 * a DSML tool-call block turned into tool_calls. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "api.h"

int api_error(jbuf *out, int status, const char *param, const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    const char *type = status == 401 ? "authentication_error" : status == 404 ? "not_found_error"
                     : status == 501 ? "not_supported_error" : status >= 500 ? "server_error" : "invalid_request_error";
    const char *code = status == 401 ? "invalid_api_key" : status == 404 ? "not_found" : status == 405 ? "method_not_allowed"
                     : status == 409 ? "slot_busy" : status == 413 ? "request_too_large" : status == 503 ? "server_busy" : NULL;
    out->n = 0;
    jb_puts(out, "{\"error\":{\"message\":");
    jb_str(out, msg, strlen(msg));
    jb_printf(out, ",\"type\":\"%s\",\"param\":", type);
    if (param) jb_str(out, param, strlen(param));
    else jb_puts(out, "null");
    jb_puts(out, ",\"code\":");
    if (code) jb_printf(out, "\"%s\"", code);
    else jb_puts(out, "null");
    jb_puts(out, "}}");
    return status;
}

/* ---- reading request fields: each returns 0, or -1 after writing a 400 to err */

static int bad_type(jbuf *err, const char *key, const char *want) {
    return api_error(err, 400, key, "'%s' must be %s", key, want), -1;
}

/* A number in [lo, hi] into *out (left alone when the key is absent or null). */
static int get_float(const dsv41_json *root, const char *key, double lo, double hi, float *out, jbuf *err) {
    const dsv41_json *v = dsv41_json_get(root, key);
    if (dsv41_json_type_of(v) == DSV41_JSON_NULL) return 0;
    double x = dsv41_json_num(v, NULL);
    if (dsv41_json_type_of(v) != DSV41_JSON_NUM || x < lo || x > hi) {
        char want[64];
        snprintf(want, sizeof want, "a number from %g to %g", lo, hi);
        return bad_type(err, key, want);
    }
    *out = (float)x;
    return 0;
}

/* An integer in [lo, hi] into *out (left alone when absent or null). */
static int get_int(const dsv41_json *root, const char *key, double lo, double hi, int64_t *out, jbuf *err) {
    const dsv41_json *v = dsv41_json_get(root, key);
    if (dsv41_json_type_of(v) == DSV41_JSON_NULL) return 0;
    int is_int;
    double x = dsv41_json_num(v, &is_int);
    if (dsv41_json_type_of(v) != DSV41_JSON_NUM || !is_int || x < lo || x > hi) {
        char want[64];
        snprintf(want, sizeof want, "an integer from %.0f to %.0f", lo, hi);
        return bad_type(err, key, want);
    }
    *out = (int64_t)x;
    return 0;
}

/* A boolean into *out (left alone when absent or null). */
static int get_bool(const dsv41_json *root, const char *key, int *out, jbuf *err) {
    const dsv41_json *v = dsv41_json_get(root, key);
    if (dsv41_json_type_of(v) == DSV41_JSON_NULL) return 0;
    if (dsv41_json_type_of(v) != DSV41_JSON_BOOL) return bad_type(err, key, "true or false");
    *out = dsv41_json_num(v, NULL) != 0;
    return 0;
}

/* skip_special_tokens (vLLM's name; default true): false keeps every special token in the
 * reply's text, else only those dsv41_token_in_reply keeps, as the CLI without --special. */
static int get_skip_special(const dsv41_json *root, job *j, jbuf *err) {
    int skip = 1;
    if (get_bool(root, "skip_special_tokens", &skip, err)) return -1;
    j->special = !skip;
    return 0;
}

/* stop: a string or an array of strings; empty strings are ignored. */
static int get_stops(const dsv41_json *root, job *j, jbuf *err) {
    const dsv41_json *v = dsv41_json_get(root, "stop");
    dsv41_json_type t = dsv41_json_type_of(v);
    if (t == DSV41_JSON_NULL) return 0;
    size_t n = t == DSV41_JSON_STR ? 1 : dsv41_json_len(v);
    if ((t != DSV41_JSON_STR && t != DSV41_JSON_ARR) || n > MAX_STOPS) return bad_type(err, "stop", "a string or an array of up to 8 strings");
    for (size_t i = 0; i < n; i++) {
        const dsv41_json *s = t == DSV41_JSON_STR ? v : dsv41_json_at(v, i);
        if (dsv41_json_type_of(s) != DSV41_JSON_STR) return bad_type(err, "stop", "a string or an array of up to 8 strings");
        if (!dsv41_json_len(s) || strlen(dsv41_json_str(s)) != dsv41_json_len(s)) continue;
        if (!(j->stops[j->n_stops] = strdup(dsv41_json_str(s)))) return api_error(err, 500, NULL, "out of memory"), -1;
        j->n_stops++;
    }
    return 0;
}

/* ---- the chat case for the encoder */

/* thinking: true/false, or {"type": "enabled" | "disabled"}; reasoning_effort: OpenAI's names
 * mapped onto the encoder's low / high / max. Writes the case's options object. */
static int put_options(const dsv41_json *root, jbuf *c, int *thinking, jbuf *err) {
    const dsv41_json *th = dsv41_json_get(root, "thinking"), *re = dsv41_json_get(root, "reasoning_effort");
    int on = -1; /* not said */
    if (dsv41_json_type_of(th) == DSV41_JSON_BOOL) on = dsv41_json_num(th, NULL) != 0;
    else if (dsv41_json_type_of(th) == DSV41_JSON_OBJ) {
        const char *type = dsv41_json_str(dsv41_json_get(th, "type"));
        if (!type || (strcmp(type, "enabled") && strcmp(type, "disabled")))
            return bad_type(err, "thinking", "true, false or {\"type\": \"enabled\" | \"disabled\"}");
        on = !strcmp(type, "enabled");
    } else if (dsv41_json_type_of(th) != DSV41_JSON_NULL)
        return bad_type(err, "thinking", "true, false or {\"type\": \"enabled\" | \"disabled\"}");
    const char *effort = NULL;
    if (dsv41_json_type_of(re) != DSV41_JSON_NULL) {
        static const char *const names[][2] = {{"minimal", "low"}, {"low", "low"}, {"medium", "high"},
                                               {"high", "high"}, {"max", "max"}, {"xhigh", "max"}};
        const char *s = dsv41_json_str(re);
        for (size_t i = 0; s && i < sizeof names / sizeof names[0]; i++)
            if (!strcmp(s, names[i][0])) effort = names[i][1];
        if (!effort) return bad_type(err, "reasoning_effort", "one of minimal, low, medium, high, max");
        if (on < 0) on = 1;
    }
    *thinking = on == 1;
    if (!*thinking) jb_puts(c, "{\"thinking_mode\":\"chat\"}");
    else if (effort) jb_printf(c, "{\"thinking_mode\":\"thinking\",\"reasoning_effort\":\"%s\"}", effort);
    else jb_puts(c, "{\"thinking_mode\":\"thinking\"}");
    return 0;
}

/* tools and tool_choice: "none" drops the tools, a named function keeps only that one. Writes
 * the case's tools array (or nothing) and says whether any tool went in. */
static int put_tools(const dsv41_json *root, jbuf *c, int *any, jbuf *err) {
    const dsv41_json *tools = dsv41_json_get(root, "tools"), *choice = dsv41_json_get(root, "tool_choice");
    *any = 0;
    if (dsv41_json_type_of(tools) == DSV41_JSON_NULL) return 0;
    if (dsv41_json_type_of(tools) != DSV41_JSON_ARR) return bad_type(err, "tools", "an array of tools");
    const char *only = NULL;
    if (dsv41_json_type_of(choice) == DSV41_JSON_STR) {
        const char *s = dsv41_json_str(choice);
        if (!strcmp(s, "none")) return 0;
        if (strcmp(s, "auto") && strcmp(s, "required")) return bad_type(err, "tool_choice", "none, auto, required or a function");
    } else if (dsv41_json_type_of(choice) == DSV41_JSON_OBJ) {
        only = dsv41_json_str(dsv41_json_get(dsv41_json_get(choice, "function"), "name"));
        if (!only) return bad_type(err, "tool_choice", "none, auto, required or a function");
    } else if (dsv41_json_type_of(choice) != DSV41_JSON_NULL)
        return bad_type(err, "tool_choice", "none, auto, required or a function");
    jb_puts(c, ",\"tools\":[");
    for (size_t i = 0; i < dsv41_json_len(tools); i++) {
        const dsv41_json *t = dsv41_json_at(tools, i);
        if (dsv41_json_type_of(t) != DSV41_JSON_OBJ) return bad_type(err, "tools", "an array of tool objects");
        const char *name = dsv41_json_str(dsv41_json_get(dsv41_json_get(t, "function"), "name"));
        if (only && (!name || strcmp(name, only))) continue;
        if (*any) jb_puts(c, ",");
        jb_value(c, t);
        *any = 1;
    }
    jb_puts(c, "]");
    if (only && !*any) return api_error(err, 400, "tool_choice", "tool_choice names '%s', which is not among the tools", only), -1;
    return 0;
}

/* The case's messages. A JSON response_format (json_object, json_schema) goes with the first
 * system message (one is put in front when there is none), where the V4.1 template renders it as
 * its "## Response Format" block: the model reads the schema its reply is held to (structured.c).
 * A system message with a response_format of its own keeps that one. */
static void put_messages(const dsv41_json *root, jbuf *c) {
    const dsv41_json *msgs = dsv41_json_get(root, "messages"), *rf = dsv41_json_get(root, "response_format");
    const char *type = dsv41_json_str(dsv41_json_get(rf, "type"));
    if (!type || (strcmp(type, "json_object") && strcmp(type, "json_schema"))) {
        jb_value(c, msgs);
        return;
    }
    size_t n = dsv41_json_len(msgs), at = 0;
    while (at < n && strcmp(dsv41_json_str(dsv41_json_get(dsv41_json_at(msgs, at), "role")), "system")) at++;
    jb_puts(c, at == n ? "[{\"role\":\"system\",\"content\":\"\",\"response_format\":" : "[");
    if (at == n) jb_value(c, rf), jb_puts(c, "}");
    for (size_t i = 0; i < n; i++) {
        const dsv41_json *m = dsv41_json_at(msgs, i);
        jb_puts(c, i || at == n ? "," : "");
        if (i != at || dsv41_json_get(m, "response_format")) {
            jb_value(c, m);
            continue;
        }
        jb_puts(c, "{");
        for (size_t k = 0; k < dsv41_json_len(m); k++) {
            jb_puts(c, k ? "," : "");
            jb_str(c, dsv41_json_key(m, k), strlen(dsv41_json_key(m, k)));
            jb_puts(c, ":");
            jb_value(c, dsv41_json_at(m, k));
        }
        jb_puts(c, ",\"response_format\":");
        jb_value(c, rf);
        jb_puts(c, "}");
    }
    jb_puts(c, "]");
}

/* The prompt text of a chat request, malloc'd. */
static char *chat_prompt(const dsv41_json *root, int *flags, jbuf *err) {
    const dsv41_json *msgs = dsv41_json_get(root, "messages");
    if (dsv41_json_type_of(msgs) != DSV41_JSON_ARR || dsv41_json_len(msgs) == 0)
        return bad_type(err, "messages", "a non-empty array of messages"), NULL;
    for (size_t i = 0; i < dsv41_json_len(msgs); i++)
        if (dsv41_json_type_of(dsv41_json_get(dsv41_json_at(msgs, i), "role")) != DSV41_JSON_STR)
            return bad_type(err, "messages", "an array of objects with a string 'role'"), NULL;
    jbuf c = {0};
    int thinking = 0, tools = 0;
    jb_puts(&c, "{\"messages\":");
    put_messages(root, &c);
    int rc = put_tools(root, &c, &tools, err);
    if (rc == 0) {
        jb_puts(&c, ",\"options\":");
        rc = put_options(root, &c, &thinking, err);
        jb_puts(&c, "}");
    }
    char *text = NULL;
    if (rc == 0 && c.oom) api_error(err, 500, NULL, "out of memory");
    else if (rc == 0 && !(text = dsv41_chat_render(c.p, c.n))) api_error(err, 400, "messages", "%s", dsv41_error());
    jb_free(&c);
    *flags = text ? (thinking ? DSV41_REPLY_THINKING : 0) | (tools ? DSV41_REPLY_TOOLS : 0) : 0;
    return text;
}

/* Token ids of text (special-token spellings included), malloc'd; -1 after a 400. */
static int64_t tokenize(server *sv, const char *text, size_t len, int32_t **ids, const char *param, jbuf *err) {
    int64_t n = dsv41_tokenize(sv->tok, text, len, 1, NULL, 0);
    if (n < 0) return api_error(err, 400, param, "%s", dsv41_error()), -1;
    *ids = malloc((size_t)(n ? n : 1) * sizeof **ids);
    if (!*ids) return api_error(err, 500, NULL, "out of memory"), -1;
    dsv41_tokenize(sv->tok, text, len, 1, *ids, n);
    return n;
}

/* The token ids of a JSON array, malloc'd; -1 after a 400 naming the first one that is not an
 * id of this model. */
static int64_t token_ids(server *sv, const dsv41_json *arr, int32_t **ids, const char *param, jbuf *err) {
    size_t n = dsv41_json_len(arr);
    if (!(*ids = malloc((n ? n : 1) * sizeof **ids))) return api_error(err, 500, NULL, "out of memory"), -1;
    for (size_t i = 0; i < n; i++) {
        const dsv41_json *t = dsv41_json_at(arr, i);
        int is_int;
        double id = dsv41_json_num(t, &is_int);
        size_t len;
        if (dsv41_json_type_of(t) != DSV41_JSON_NUM || !is_int || id < 0 || id > INT32_MAX ||
            !dsv41_token_bytes(sv->tok, (int32_t)id, &len)) {
            free(*ids);
            *ids = NULL;
            return api_error(err, 400, param, "%s[%zu] is not a token id of this model", param, i), -1;
        }
        (*ids)[i] = (int32_t)id;
    }
    return (int64_t)n;
}

int api_parse_generation(server *sv, gen_kind kind, const char *body, size_t n, gen *g, jbuf *err) {
    memset(g, 0, sizeof *g);
    g->kind = kind;
    dsv41_json *root = dsv41_json_parse(body, n);
    if (!root) return api_error(err, 400, NULL, "malformed JSON: %s", dsv41_error());
    int status = 0;
    char *text = NULL;
    int32_t *ids = NULL;
    int64_t n_ids = -1;
    if (dsv41_json_type_of(root) != DSV41_JSON_OBJ) status = api_error(err, 400, NULL, "the body must be a JSON object");
    else if (kind != GEN_COMPLETION) {
        if ((text = chat_prompt(root, &g->flags, err))) n_ids = tokenize(sv, text, strlen(text), &ids, "messages", err);
    } else {
        const dsv41_json *p = dsv41_json_get(root, "prompt");
        if (dsv41_json_type_of(p) == DSV41_JSON_STR) n_ids = tokenize(sv, dsv41_json_str(p), dsv41_json_len(p), &ids, "prompt", err);
        else if (dsv41_json_type_of(p) == DSV41_JSON_ARR) n_ids = token_ids(sv, p, &ids, "prompt", err);
        else bad_type(err, "prompt", "a string or an array of token ids");
    }
    free(text);
    if (!status && n_ids < 0) status = 400; /* err holds the reply */
    if (!status && n_ids == 0) status = api_error(err, 400, kind != GEN_COMPLETION ? "messages" : "prompt", "the prompt is empty");
    if (!status && n_ids >= sv->ctx)
        status = api_error(err, 400, kind != GEN_COMPLETION ? "messages" : "prompt",
                           "the prompt has %lld tokens; the context holds %d", (long long)n_ids, sv->ctx);
    job *j = status ? NULL : job_new(ids, (int32_t)n_ids);
    free(ids);
    if (!status && !j) status = api_error(err, 500, NULL, "out of memory");
    int64_t max_tokens = -1, cmax = -1, top_k = 0, seed = -1, n_choices = 1, id_slot = -1;
    if (!status) {
        j->sp = dsv41_sampler_params_default();
        const char *max_key = dsv41_json_get(root, "max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
        if (get_int(root, "max_tokens", 1, 1e9, &max_tokens, err) || get_int(root, "max_completion_tokens", 1, 1e9, &cmax, err) ||
            get_float(root, "temperature", 0, 2, &j->sp.temperature, err) || get_float(root, "top_p", 1e-6, 1, &j->sp.top_p, err) ||
            get_int(root, "top_k", 0, 1e9, &top_k, err) || get_float(root, "min_p", 0, 1, &j->sp.min_p, err) ||
            get_int(root, "seed", -1, 1.8e19, &seed, err) || get_int(root, "n", 1, 1, &n_choices, err) ||
            get_bool(root, "stream", &g->stream, err) || get_stops(root, j, err) ||
            get_bool(root, "cache_prompt", &j->cache_prompt, err) || get_int(root, "id_slot", -1, sv->n_slots - 1, &id_slot, err) ||
            get_bool(root, "return_tokens", &g->return_tokens, err) || get_skip_special(root, j, err))
            status = 400;
        const dsv41_json *so = dsv41_json_get(root, "stream_options");
        if (!status && dsv41_json_type_of(so) != DSV41_JSON_NULL && dsv41_json_type_of(so) != DSV41_JSON_OBJ)
            status = (bad_type(err, "stream_options", "an object"), 400);
        if (!status && get_bool(so, "include_usage", &g->include_usage, err)) status = 400;
        if (cmax > 0) max_tokens = cmax;
        if (!status && max_tokens > 0 && n_ids + max_tokens > sv->ctx)
            status = api_error(err, 400, max_key, "the prompt has %lld tokens and %s asks for %lld more: %lld in all, over the context of %d",
                               (long long)n_ids, max_key, (long long)max_tokens, (long long)(n_ids + max_tokens), sv->ctx);
    }
    if (!status) status = structured_grammar(sv, root, kind, g->flags, j, err);
    if (!status) {
        j->sp.top_k = (int32_t)top_k;
        j->id_slot = (int32_t)id_slot;
        j->max_tokens = max_tokens > 0 ? (int32_t)max_tokens : sv->ctx - (int32_t)n_ids;
        pthread_mutex_lock(&sv->mu);
        uint64_t serial = ++sv->next_id;
        pthread_mutex_unlock(&sv->mu);
        g->created = (long long)time(NULL);
        /* no seed: one from the clock and the request's serial number */
        j->sp.seed = seed >= 0 ? (uint64_t)seed : ((uint64_t)g->created << 20) ^ (serial * 0x9E3779B97F4A7C15ULL);
        static const char *const prefix[] = {"chatcmpl-", "cmpl-", "msg_", "resp_"};
        snprintf(g->id, sizeof g->id, "%s%llx%06llx", prefix[kind], (unsigned long long)g->created, (unsigned long long)serial);
        g->job = j;
    } else job_free(j);
    dsv41_json_free(root);
    return status;
}

/* ---- replies */

/* A reply that its grammar let no token continue ends as "grammar_dead_end" on every route:
 * its text is not what the grammar describes, and no client should take it for a whole one. */
static const char *finish_name(job_end end) { return end == END_LENGTH ? "length" : end == END_DEAD ? "grammar_dead_end" : "stop"; }

const char *api_stop_hit(const gen *g) { return g->job->stop_hit >= 0 ? g->job->stops[g->job->stop_hit] : NULL; }

const char *api_id_serial(const gen *g) { return g->id + strcspn(g->id, "-_") + 1; }

void api_copy_keys(jbuf *o, const dsv41_json *src, const char *const *keys) {
    for (; *keys; keys++) {
        const dsv41_json *v = dsv41_json_get(src, *keys);
        if (!v) continue;
        jb_printf(o, ",\"%s\":", *keys);
        jb_value(o, v);
    }
}

int api_put_text(jbuf *o, const dsv41_json *v, const char *const *types) {
    if (dsv41_json_type_of(v) == DSV41_JSON_STR) return jb_value(o, v), 0;
    if (dsv41_json_type_of(v) != DSV41_JSON_ARR) return -1;
    jbuf t = {0};
    for (size_t i = 0; i < dsv41_json_len(v); i++) {
        const dsv41_json *part = dsv41_json_at(v, i), *text = dsv41_json_get(part, "text");
        const char *type = dsv41_json_str(dsv41_json_get(part, "type"));
        const char *const *k = types;
        while (*k && (!type || strcmp(type, *k))) k++;
        if (!*k || dsv41_json_type_of(text) != DSV41_JSON_STR) return jb_free(&t), -1;
        jb_put(&t, dsv41_json_str(text), dsv41_json_len(text));
    }
    jb_str(o, t.p ? t.p : "", t.n);
    jb_free(&t);
    return 0;
}

int api_bad(jbuf *err, const char *param, const char *what) { return api_error(err, 400, param, "%s", what); }

void api_split_reply(const gen *g, reply_split *r) {
    const job *j = g->job;
    const char *text = j->text.p ? j->text.p : "";
    size_t len = j->text.n;
    *r = (reply_split){0, 0, len, NULL};
    if (g->kind == GEN_COMPLETION) return;
    dsv41_reply_parts p;
    dsv41_chat_reply_parts(text, len, g->flags | DSV41_REPLY_FINAL, &p);
    r->reasoning_end = (size_t)p.reasoning_end;
    r->content_start = (size_t)p.content_start;
    r->content_end = (size_t)p.content_end;
    if (p.calls_start < 0) return;
    char *calls = dsv41_chat_reply_calls(text + p.calls_start, len - (size_t)p.calls_start);
    r->calls = calls ? dsv41_json_parse(calls, strlen(calls)) : NULL;
    free(calls);
    if (!r->calls) r->content_end = len; /* a broken block stays text, with the whitespace before it */
}

int32_t api_reasoning_tokens(const server *sv, const gen *g) {
    const job *j = g->job;
    if (!(g->flags & DSV41_REPLY_THINKING)) return 0;
    int32_t unthink = dsv41_tokenizer_find(sv->tok, "</think>");
    for (int32_t i = 0; i < j->n_gen; i++)
        if (j->ids[i] == unthink) return i + 1;
    return j->n_gen;
}

/* The usage, and llama.cpp's timings member with the speculative counts (drafts checked by a
 * verify, and of those the ones kept) */
static void put_usage(jbuf *o, const server *sv, const gen *g) {
    const job *j = g->job;
    jb_printf(o, "\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d,"
                 "\"prompt_tokens_details\":{\"cached_tokens\":%d},\"completion_tokens_details\":{\"reasoning_tokens\":%d}},"
                 "\"timings\":{\"draft_n\":%d,\"draft_n_accepted\":%d}",
              j->n_prompt, j->n_gen, j->n_prompt + j->n_gen, j->n_cached, api_reasoning_tokens(sv, g), j->n_drafted, j->n_accepted);
}

/* The tool calls of a reply in OpenAI's shape, "tool_calls":[...], with ids made from the
 * completion's; index adds each call's position (streamed deltas carry it). */
static void put_tool_calls(jbuf *o, const gen *g, const dsv41_json *calls, int index) {
    jb_puts(o, "\"tool_calls\":[");
    for (size_t i = 0; i < dsv41_json_len(calls); i++) {
        const dsv41_json *c = dsv41_json_at(calls, i);
        jb_printf(o, "%s{", i ? "," : "");
        if (index) jb_printf(o, "\"index\":%zu,", i);
        jb_printf(o, "\"id\":\"call_%s_%zu\",\"type\":\"function\",\"function\":{\"name\":", api_id_serial(g), i);
        jb_value(o, dsv41_json_get(c, "name"));
        jb_puts(o, ",\"arguments\":");
        jb_value(o, dsv41_json_get(c, "arguments"));
        jb_puts(o, "}}");
    }
    jb_puts(o, "]");
}

int api_reply(server *sv, gen *g, jbuf *out) {
    job *j = g->job;
    if (j->end == END_ERROR) return api_error(out, 500, NULL, "generation failed: %s", j->error);
    const char *text = j->text.p ? j->text.p : "";
    const char *finish = finish_name(j->end);
    reply_split r;
    api_split_reply(g, &r);
    jb_printf(out, "{\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":", g->id,
              g->kind == GEN_CHAT ? "chat.completion" : "text_completion", g->created);
    jb_str(out, sv->model_name, strlen(sv->model_name));
    jb_puts(out, ",\"choices\":[{\"index\":0,");
    if (g->kind == GEN_COMPLETION) {
        jb_puts(out, "\"text\":");
        jb_str(out, text, j->text.n);
    } else {
        jb_puts(out, "\"message\":{\"role\":\"assistant\",\"content\":");
        if (r.calls && r.content_end == r.content_start) jb_puts(out, "null");
        else jb_str(out, text + r.content_start, r.content_end - r.content_start);
        if (g->flags & DSV41_REPLY_THINKING) {
            jb_puts(out, ",\"reasoning_content\":");
            jb_str(out, text, r.reasoning_end);
        }
        if (r.calls) {
            jb_puts(out, ",");
            put_tool_calls(out, g, r.calls, 0);
            finish = "tool_calls";
        }
        jb_puts(out, "}");
    }
    dsv41_json_free(r.calls);
    jb_printf(out, ",\"logprobs\":null,\"finish_reason\":\"%s\"}],", finish);
    if (g->return_tokens) {
        jb_puts(out, "\"tokens\":[");
        for (int32_t i = 0; i < j->n_gen; i++) jb_printf(out, "%s%d", i ? "," : "", j->ids[i]);
        jb_puts(out, "],");
    }
    put_usage(out, sv, g);
    jb_puts(out, "}");
    return 200;
}

/* The opening of one chunk event, up to the choice's fields. */
static void chunk_head(server *sv, const gen *g, jbuf *o) {
    jb_printf(o, "data: {\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":", g->id,
              g->kind == GEN_CHAT ? "chat.completion.chunk" : "text_completion", g->created);
    jb_str(o, sv->model_name, strlen(sv->model_name));
    jb_puts(o, ",\"choices\":[{\"index\":0,");
}

/* Closes a chunk after its choices: with return_tokens, the ids of tokens [sent_ids, n_tok) that
 * no chunk carried yet ride on this one, so the chunks' "tokens" laid end to end are the
 * generated ids in order (a token whose text is not out yet waits for the chunk that has it). */
static void chunk_close(gen *g, jbuf *o, int32_t n_tok) {
    jb_puts(o, "]");
    if (g->return_tokens && n_tok > g->sent_ids) {
        jb_puts(o, ",\"tokens\":[");
        for (int32_t i = g->sent_ids; i < n_tok; i++) jb_printf(o, "%s%d", i > g->sent_ids ? "," : "", g->job->ids[i]);
        jb_puts(o, "]");
        g->sent_ids = n_tok;
    }
    jb_puts(o, "}\n\n");
}

/* One chunk with text[a, b) as "content", "reasoning_content" or, for completions, "text". */
static void chunk_text(server *sv, gen *g, jbuf *o, reply_part part, const char *text, size_t a, size_t b, int32_t n_tok) {
    chunk_head(sv, g, o);
    if (g->kind == GEN_CHAT) jb_printf(o, "\"delta\":{\"%s\":", part == PART_REASONING ? "reasoning_content" : "content");
    else jb_puts(o, "\"text\":");
    jb_str(o, text + a, b - a);
    jb_puts(o, g->kind == GEN_CHAT ? "},\"logprobs\":null,\"finish_reason\":null}" : ",\"logprobs\":null,\"finish_reason\":null}");
    chunk_close(g, o, n_tok);
}

/* Hands put what the parts of text[0, len), the text of the first n_tok tokens, add to what
 * went out before; end: the whole reply apart (the job ended), else NULL. */
static void stream_parts(server *sv, gen *g, jbuf *o, put_delta put, size_t len, int32_t n_tok, const reply_split *end) {
    const char *text = g->job->text.p ? g->job->text.p : "";
    size_t reasoning_end = len, content_start = 0, content_end = len;
    if (end) reasoning_end = end->reasoning_end, content_start = end->content_start, content_end = end->content_end;
    else if (g->kind != GEN_COMPLETION) {
        dsv41_reply_parts p;
        dsv41_chat_reply_parts(text, len, g->flags, &p);
        reasoning_end = (size_t)p.reasoning_end, content_start = (size_t)p.content_start, content_end = (size_t)p.content_end;
    }
    if (g->kind != GEN_COMPLETION) {
        if (reasoning_end > g->sent_reasoning) put(sv, g, o, PART_REASONING, text, g->sent_reasoning, reasoning_end, n_tok);
        if (reasoning_end > g->sent_reasoning) g->sent_reasoning = reasoning_end;
    }
    /* the answer resumes past what went out, and never before it starts */
    size_t from = g->sent_content > content_start ? g->sent_content : content_start;
    if (content_end > from) {
        put(sv, g, o, PART_CONTENT, text, from, content_end, n_tok);
        g->sent_content = content_end;
    }
}

int api_stream_text(server *sv, gen *g, jbuf *out, put_delta put, reply_split *end) {
    job *j = g->job;
    /* one event per token, as far as the text is final */
    for (; g->sent_marks < j->n_gen && j->marks[g->sent_marks] <= j->committed; g->sent_marks++)
        stream_parts(sv, g, out, put, j->marks[g->sent_marks], g->sent_marks + 1, NULL);
    if (j->end == END_NONE || j->end == END_ERROR) return 0;
    api_split_reply(g, end);
    stream_parts(sv, g, out, put, j->text.n, j->n_gen, end);
    return 1;
}

int api_stream(server *sv, gen *g, jbuf *out) {
    job *j = g->job;
    if (!g->sent_head && g->kind == GEN_CHAT) {
        chunk_head(sv, g, out);
        jb_puts(out, "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},\"logprobs\":null,\"finish_reason\":null}]}\n\n");
    }
    g->sent_head = 1;
    reply_split r;
    int ended = api_stream_text(sv, g, out, chunk_text, &r);
    if (j->end == END_NONE) return 0;
    if (!ended) {
        jbuf e = {0};
        api_error(&e, 500, NULL, "generation failed: %s", j->error);
        jb_printf(out, "data: %s\n\n", e.p ? e.p : "{}");
        jb_free(&e);
    } else {
        const char *finish = finish_name(j->end);
        if (r.calls) {
            chunk_head(sv, g, out);
            jb_puts(out, "\"delta\":{");
            put_tool_calls(out, g, r.calls, 1);
            jb_puts(out, "},\"logprobs\":null,\"finish_reason\":null}");
            chunk_close(g, out, j->n_gen);
            finish = "tool_calls";
        }
        dsv41_json_free(r.calls);
        chunk_head(sv, g, out);
        jb_printf(out, "%s,\"logprobs\":null,\"finish_reason\":\"%s\"}", g->kind == GEN_CHAT ? "\"delta\":{}" : "\"text\":\"\"", finish);
        chunk_close(g, out, j->n_gen);
        if (g->include_usage) {
            jb_printf(out, "data: {\"id\":\"%s\",\"object\":\"%s\",\"created\":%lld,\"model\":", g->id,
                      g->kind == GEN_CHAT ? "chat.completion.chunk" : "text_completion", g->created);
            jb_str(out, sv->model_name, strlen(sv->model_name));
            jb_puts(out, ",\"choices\":[],");
            put_usage(out, sv, g);
            jb_puts(out, "}\n\n");
        }
    }
    jb_puts(out, "data: [DONE]\n\n");
    return 1;
}

/* ---- tokens and models */

int api_tokenize(server *sv, const char *body, size_t n, jbuf *out) {
    dsv41_json *root = dsv41_json_parse(body, n);
    if (!root) return api_error(out, 400, NULL, "malformed JSON: %s", dsv41_error());
    const dsv41_json *content = dsv41_json_get(root, "content");
    int special = 1, status = 200;
    int32_t *ids = NULL;
    int64_t n_ids = -1;
    if (dsv41_json_type_of(content) != DSV41_JSON_STR) status = (bad_type(out, "content", "a string"), 400);
    else if (get_bool(root, "parse_special", &special, out)) status = 400;
    else {
        int64_t want = dsv41_tokenize(sv->tok, dsv41_json_str(content), dsv41_json_len(content), special, NULL, 0);
        if (want < 0) status = api_error(out, 400, "content", "%s", dsv41_error());
        else if (!(ids = malloc((size_t)(want ? want : 1) * sizeof *ids))) status = api_error(out, 500, NULL, "out of memory");
        else n_ids = dsv41_tokenize(sv->tok, dsv41_json_str(content), dsv41_json_len(content), special, ids, want);
    }
    if (status == 200) {
        jb_puts(out, "{\"tokens\":[");
        for (int64_t i = 0; i < n_ids; i++) jb_printf(out, "%s%d", i ? "," : "", ids[i]);
        jb_puts(out, "]}");
    }
    free(ids);
    dsv41_json_free(root);
    return status;
}

int api_detokenize(server *sv, const char *body, size_t n, jbuf *out) {
    dsv41_json *root = dsv41_json_parse(body, n);
    if (!root) return api_error(out, 400, NULL, "malformed JSON: %s", dsv41_error());
    const dsv41_json *tokens = dsv41_json_get(root, "tokens");
    int status = 200;
    jbuf text = {0};
    dsv41_utf8_stream st = {{0}, 0};
    int32_t *ids = NULL;
    int64_t n_ids = 0;
    if (dsv41_json_type_of(tokens) != DSV41_JSON_ARR) status = (bad_type(out, "tokens", "an array of token ids"), 400);
    else if ((n_ids = token_ids(sv, tokens, &ids, "tokens", out)) < 0) status = 400;
    for (int64_t i = 0; status == 200 && i < n_ids; i++) {
        size_t len;
        dsv41_token_bytes(sv->tok, ids[i], &len);
        char *piece = malloc(3 * (len + 3));
        int64_t got = piece ? dsv41_detokenize(sv->tok, &st, ids[i], piece, (int64_t)(3 * (len + 3))) : -1;
        if (got > 0) jb_put(&text, piece, (size_t)got);
        free(piece);
        if (got < 0) status = api_error(out, 500, NULL, "out of memory");
    }
    if (status == 200) {
        if (st.n > 0) jb_put(&text, "\xEF\xBF\xBD", 3); /* an incomplete character at the end */
        jb_puts(out, "{\"content\":");
        jb_str(out, text.p ? text.p : "", text.n);
        jb_puts(out, "}");
    }
    free(ids);
    jb_free(&text);
    dsv41_json_free(root);
    return status;
}

int api_models(server *sv, jbuf *out) {
    jb_puts(out, "{\"object\":\"list\",\"data\":[{\"id\":");
    jb_str(out, sv->model_name, strlen(sv->model_name));
    jb_printf(out, ",\"object\":\"model\",\"created\":0,\"owned_by\":\"dsv41\",\"context_length\":%d}]}", sv->ctx);
    return 200;
}
