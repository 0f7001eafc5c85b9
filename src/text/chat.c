/* chat.c - DeepSeek-V4.1 chat encoding: a chat case (messages, tools, options) to prompt text.
 *
 * The rules are the release encoder's (TOKENIZER.md section 5), and the code keeps its three
 * passes so that each rule has one home:
 *   1. messages become turns: request-level tools go to the first system message (or to an
 *      empty one put in front), tool results and consecutive user messages merge into user
 *      turns, and tool results are put in the order of the calls that asked for them;
 *   2. in thinking mode with drop_thinking (and no tools anywhere), developer turns before the
 *      last user-like turn are removed, which shifts the indices the rendering sees;
 *   3. each turn is rendered at its index, followed by the generation header (or task token)
 *      that its successor calls for.
 * The prompt must match the release byte for byte, so Python's json.dumps (ensure_ascii=False,
 * ", " and ": " separators, key order kept, float repr) is reproduced for the tool schemas and
 * for non-string call arguments.
 *
 * Defaults: without options the mode is thinking, the effort "high" (75) and drop_thinking on.
 * Where the release would do something silent or Python-specific, this is an error instead:
 * case-level tools that would replace a system message's own tools, tool namespaces, unknown
 * content parts, an image placeholder written as text, and non-JSON-like values. */
#include <inttypes.h>
#include <math.h>
#include <stdarg.h>
#include <stdlib.h>
#include <string.h>

#include "dsv41.h"
#include "error.h"
#include "json.h"
#include "tokenizer.h"

#define BOS "<｜begin▁of▁sentence｜>"
#define EOS "<｜end▁of▁sentence｜>"
#define SYSTEM_TOKEN "<｜System｜>"
#define USER_TOKEN "<｜User｜>"
#define ASSISTANT_TOKEN "<｜Assistant｜>"
#define REMINDER_TOKEN "<｜latest_reminder｜>"
#define THINK "<think>"
#define UNTHINK "</think>"
#define IMAGE "<｜deepseek_image｜>"
#define DSML "｜DSML｜"

static const char tools_head[] =
    "## Tools\n\nYou have access to a set of tools to help answer the user's question. You can invoke tools by "
    "writing a \"<" DSML " calls>\" block like the following:\n\n"
    "<" DSML " calls>\n<" DSML " invoke name=\"$TOOL_NAME\">\n<" DSML " parameter name=\"$PARAMETER_NAME\" "
    "string=\"true|false\">$PARAMETER_VALUE</" DSML " parameter>\n...\n</" DSML " invoke>\n<" DSML
    " invoke name=\"$TOOL_NAME2\">\n...\n</" DSML " invoke>\n</" DSML " calls>\n\n"
    "String parameters should be specified as is and set `string=\"true\"`. For all other types (numbers, "
    "booleans, arrays, objects), pass the value in JSON format and set `string=\"false\"`.\n\n"
    "If thinking_mode is enabled (triggered by " THINK "), you MUST output your complete reasoning inside " THINK
    "..." UNTHINK " BEFORE any tool calls or final response.\n\n"
    "Otherwise, output directly after " UNTHINK " with tool calls or final response.\n\n"
    "### Available Tool Schemas\n\n";
static const char tools_tail[] =
    "\n\nYou MUST strictly follow the above defined tool name and parameter schemas to invoke tool calls.\n";
static const char response_format_head[] =
    "\n\n## Response Format:\n\nYou MUST strictly adhere to the following schema to reply:\n";

enum { ROLE_SYSTEM, ROLE_USER, ROLE_DEVELOPER, ROLE_ASSISTANT, ROLE_TOOL, ROLE_REMINDER, N_ROLES };
static const char *const role_names[N_ROLES] = {"system", "user", "developer", "assistant", "tool", "latest_reminder"};
static const char *const task_names[] = {"action", "query", "authority", "domain", "title", "read_url"};

/* ---- output text */

typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} strbuf;

static void put(strbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 4096;
        while (cap < b->n + n + 1) cap *= 2;
        char *np = realloc(b->p, cap);
        if (!np) { b->oom = 1; return; }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void puts_(strbuf *b, const char *s) { put(b, s, strlen(s)); }

/* A short formatted item (a number, an escape): at most 31 bytes. */
static void putf(strbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void putf(strbuf *b, const char *fmt, ...) {
    char tmp[32];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n > 0 && (size_t)n < sizeof tmp) put(b, tmp, (size_t)n);
}

/* ---- Python's json.dumps(value, ensure_ascii=False) */

static void put_py_string(strbuf *b, const char *s, size_t n) {
    put(b, "\"", 1);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = c == '"' ? "\\\"" : c == '\\' ? "\\\\" : c == '\n' ? "\\n" : c == '\r' ? "\\r"
                        : c == '\t' ? "\\t" : c == '\b' ? "\\b" : c == '\f' ? "\\f" : NULL;
        if (esc) puts_(b, esc);
        else if (c < 0x20) putf(b, "\\u%04x", c);
        else put(b, s + i, 1);
    }
    put(b, "\"", 1);
}

/* repr(float): the shortest digits d1d2... that read back to x, with x = 0.d1d2... * 10^decpt;
 * fixed notation when -4 < decpt <= 16 (".0" added when integral), else d1.d2...e+XX. */
static void put_py_float(strbuf *b, double x) {
    if (isnan(x)) { puts_(b, "NaN"); return; }
    if (isinf(x)) { puts_(b, x < 0 ? "-Infinity" : "Infinity"); return; }
    char sci[40], digits[24];
    for (int prec = 0; prec < 17; prec++) {
        snprintf(sci, sizeof sci, "%.*e", prec, x);
        if (strtod(sci, NULL) == x) break;
    }
    const char *p = sci + (sci[0] == '-');
    size_t nd = 0;
    for (; *p != 'e'; p++)
        if (*p != '.') digits[nd++] = *p;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int decpt = atoi(p + 1) + 1; /* digits d1 d2 ... stand for 0.d1d2... * 10^decpt */
    if (sci[0] == '-') put(b, "-", 1);
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            put(b, "0.", 2);
            for (int i = 0; i < -decpt; i++) put(b, "0", 1);
            put(b, digits, nd);
        } else if ((size_t)decpt >= nd) {
            put(b, digits, nd);
            for (size_t i = nd; i < (size_t)decpt; i++) put(b, "0", 1);
            put(b, ".0", 2);
        } else {
            put(b, digits, (size_t)decpt);
            put(b, ".", 1);
            put(b, digits + decpt, nd - (size_t)decpt);
        }
    } else {
        put(b, digits, 1);
        if (nd > 1) { put(b, ".", 1); put(b, digits + 1, nd - 1); }
        putf(b, "e%c%02d", decpt - 1 < 0 ? '-' : '+', abs(decpt - 1));
    }
}

static void put_py_json(strbuf *b, const json *v) {
    switch (v->type) {
    case JSON_NULL: puts_(b, "null"); break;
    case JSON_BOOL: puts_(b, v->num != 0 ? "true" : "false"); break;
    case JSON_NUM:
        if (v->is_int && v->is_neg) putf(b, "%" PRId64, (int64_t)v->bits);
        else if (v->is_int) putf(b, "%" PRIu64, v->bits);
        else put_py_float(b, v->num);
        break;
    case JSON_STR: put_py_string(b, v->str, v->len); break;
    case JSON_ARR:
    case JSON_OBJ:
        put(b, v->type == JSON_ARR ? "[" : "{", 1);
        for (size_t i = 0; i < v->len; i++) {
            if (i) put(b, ", ", 2);
            if (v->keys) { put_py_string(b, v->keys[i], strlen(v->keys[i])); put(b, ": ", 2); }
            put_py_json(b, &v->items[i]);
        }
        put(b, v->type == JSON_ARR ? "]" : "}", 1);
        break;
    }
}

/* ---- the conversation as turns */

typedef struct {
    const json *content;  /* a user message's content, or a tool message's content */
    const char *call_id;  /* tool results: their tool_call_id ("" when none); NULL for text */
} block;

typedef struct {
    int role;
    int index;            /* the message's position in the case; -1 for an inserted system turn */
    const json *msg;      /* the message; NULL for an inserted turn or one opened by a tool result */
    const json *tools;    /* tools carried by this turn, or NULL */
    const char *task;     /* NULL or one of task_names */
    size_t first_block, n_blocks; /* user turns: their blocks */
} turn;

typedef struct {
    turn *turns;
    size_t n;
    block *blocks;
    size_t n_blocks;
    int thinking, effort, drop_thinking;
} convo;

/* Python truthiness of a JSON value (absent counts as false). */
static int truthy(const json *v) {
    if (!v || v->type == JSON_NULL) return 0;
    if (v->type == JSON_BOOL || v->type == JSON_NUM) return v->num != 0;
    return v->len != 0;
}

static const char *string_of(const json *v) { return v && v->type == JSON_STR ? v->str : NULL; }

static int chat_error(int index, const char *what) {
    if (index < 0) return set_error("chat: %s", what);
    return set_error("chat: message %d: %s", index, what);
}

static int parse_effort(const json *e, int *out) {
    static const struct { const char *name; int value; } named[] = {{"low", 50}, {"high", 75}, {"max", 100}};
    if (!e || e->type == JSON_NULL) { *out = 75; return 0; }
    for (size_t i = 0; e->type == JSON_STR && i < sizeof named / sizeof named[0]; i++)
        if (strcmp(e->str, named[i].name) == 0) { *out = named[i].value; return 0; }
    if (e->type == JSON_NUM && e->is_int && !e->is_neg && e->bits >= 1 && e->bits <= 100) { *out = (int)e->bits; return 0; }
    return set_error("chat: reasoning_effort must be \"low\", \"high\", \"max\" or an integer from 1 to 100");
}

/* options {thinking_mode, reasoning_effort, drop_thinking}, all optional. */
static int parse_options(convo *c, const json *o) {
    c->thinking = 1;
    c->drop_thinking = 1;
    if (o && o->type != JSON_OBJ && o->type != JSON_NULL) return set_error("chat: options must be an object");
    for (size_t i = 0; o && o->type == JSON_OBJ && i < o->len; i++) {
        const char *k = o->keys[i];
        const json *v = &o->items[i];
        if (strcmp(k, "thinking_mode") == 0) {
            const char *m = string_of(v);
            if (!m || (strcmp(m, "thinking") && strcmp(m, "chat")))
                return set_error("chat: thinking_mode must be \"thinking\" or \"chat\"");
            c->thinking = strcmp(m, "thinking") == 0;
        } else if (strcmp(k, "drop_thinking") == 0) {
            if (v->type != JSON_BOOL) return set_error("chat: drop_thinking must be true or false");
            c->drop_thinking = v->num != 0;
        } else if (strcmp(k, "reasoning_effort") != 0) {
            return set_error("chat: unknown option '%s'", k);
        }
    }
    return parse_effort(json_get(o, "reasoning_effort"), &c->effort);
}

static int role_of(const json *m, int index) {
    const char *r = string_of(json_get(m, "role"));
    for (int i = 0; r && i < N_ROLES; i++)
        if (strcmp(r, role_names[i]) == 0) return i;
    return chat_error(index, "role must be system, user, developer, assistant, tool or latest_reminder");
}

/* The message's task into *task (NULL when absent); returns -1 for an invalid one. */
static int task_of(const json *m, int index, const char **task) {
    const json *t = json_get(m, "task");
    *task = NULL;
    if (!t || t->type == JSON_NULL) return 0;
    for (size_t i = 0; t->type == JSON_STR && i < sizeof task_names / sizeof task_names[0]; i++)
        if (strcmp(t->str, task_names[i]) == 0) { *task = task_names[i]; return 0; }
    return chat_error(index, "task must be action, query, authority, domain, title or read_url");
}

static turn *push_turn(convo *c, int role, int index, const json *msg, const json *tools, const char *task) {
    turn *t = &c->turns[c->n++];
    *t = (turn){role, index, msg, tools, task, c->n_blocks, 0};
    return t;
}

static void push_block(convo *c, turn *t, const json *content, const char *call_id) {
    c->blocks[c->n_blocks++] = (block){content, call_id};
    t->n_blocks++;
}

/* The message that receives the case-level tools: the first system message, or -1. */
static int tools_target(const json *messages) {
    for (size_t i = 0; i < messages->len; i++)
        if (json_get(&messages->items[i], "role") && role_of(&messages->items[i], (int)i) == ROLE_SYSTEM) return (int)i;
    return -1;
}

/* Pass 1: messages -> turns, with tool results and consecutive user messages merged. */
static int build_turns(convo *c, const json *messages, const json *tools) {
    int target = truthy(tools) ? tools_target(messages) : -2;
    c->turns = calloc(messages->len + 1, sizeof *c->turns);
    c->blocks = calloc(messages->len + 1, sizeof *c->blocks);
    if (!c->turns || !c->blocks) return set_error("out of memory");
    if (target == -1) push_turn(c, ROLE_SYSTEM, -1, NULL, tools, NULL);
    for (size_t i = 0; i < messages->len; i++) {
        const json *m = &messages->items[i];
        const char *task;
        int idx = (int)i, role = m->type == JSON_OBJ ? role_of(m, idx) : chat_error(idx, "not an object");
        if (role < 0 || task_of(m, idx, &task)) return -1;
        turn *last = c->n ? &c->turns[c->n - 1] : NULL;
        const json *own_tools = json_get(m, "tools");
        if (own_tools && own_tools->type != JSON_NULL && own_tools->type != JSON_ARR)
            return chat_error(idx, "tools must be an array");
        if (idx == target && truthy(own_tools)) return chat_error(idx, "has tools and the case gives tools too");
        if (role == ROLE_TOOL) {
            const char *id = string_of(json_get(m, "tool_call_id"));
            if (!last || last->role != ROLE_USER) last = push_turn(c, ROLE_USER, idx, NULL, NULL, NULL);
            push_block(c, last, json_get(m, "content"), id ? id : "");
        } else if (role == ROLE_USER && last && last->role == ROLE_USER && !last->task) {
            push_block(c, last, json_get(m, "content"), NULL);
        } else {
            turn *t = push_turn(c, role, idx, m, idx == target ? tools : own_tools, task);
            if (role == ROLE_USER) push_block(c, t, json_get(m, "content"), NULL);
        }
    }
    return 0;
}

/* The position of call id in an assistant message's tool_calls (the last one wins), or 0. */
static int call_position(const json *assistant, const char *id) {
    const json *calls = json_get(assistant, "tool_calls");
    for (size_t k = calls && calls->type == JSON_ARR ? calls->len : 0; k-- > 0;) {
        const json *call = &calls->items[k];
        const char *cid = string_of(json_get(call, "id"));
        if (!cid || !*cid) cid = string_of(json_get(json_get(call, "function"), "id"));
        if (cid && *cid && strcmp(cid, id) == 0) return (int)k;
    }
    return 0;
}

/* Puts the tool results of each user turn in the order of the latest assistant's calls
 * (stable; results whose id is unknown count as position 0). */
static void order_tool_results(convo *c) {
    const json *caller = NULL;
    for (size_t i = 0; i < c->n; i++) {
        turn *t = &c->turns[i];
        if (t->role == ROLE_ASSISTANT && truthy(json_get(t->msg, "tool_calls"))) caller = t->msg;
        if (t->role != ROLE_USER || !caller) continue;
        block *bl = c->blocks + t->first_block;
        for (size_t a = 1; a < t->n_blocks; a++) { /* insertion sort; text blocks keep their places */
            if (!bl[a].call_id) continue;
            size_t cur = a;
            for (size_t b = a; b-- > 0;) {
                if (!bl[b].call_id) continue;
                if (call_position(caller, bl[b].call_id) <= call_position(caller, bl[cur].call_id)) break;
                block tmp = bl[cur];
                bl[cur] = bl[b];
                bl[b] = tmp;
                cur = b;
            }
        }
    }
}

static int user_like(const convo *c, size_t i) {
    int r = c->turns[i].role;
    return r == ROLE_USER || r == ROLE_DEVELOPER || (r == ROLE_SYSTEM && i > 0);
}

/* The index of the last user-like turn, or -1. */
static int last_user_like(const convo *c) {
    for (size_t i = c->n; i-- > 0;)
        if (user_like(c, i)) return (int)i;
    return -1;
}

/* Pass 2: tools anywhere turn dropping off; otherwise developer turns before the last
 * user-like turn are removed (earlier reasoning is dropped at rendering). */
static void drop_turns(convo *c) {
    for (size_t i = 0; i < c->n; i++)
        if (truthy(c->turns[i].tools)) c->drop_thinking = 0;
    if (!c->thinking || !c->drop_thinking) return;
    int last = last_user_like(c);
    size_t kept = 0;
    for (size_t i = 0; i < c->n; i++)
        if (c->turns[i].role != ROLE_DEVELOPER || (int)i >= last) c->turns[kept++] = c->turns[i];
    c->n = kept;
}

/* ---- rendering */

static int is_image_part(const char *type) {
    return type && (!strcmp(type, "image") || !strcmp(type, "image_url") || !strcmp(type, "input_image"));
}

static int put_text(strbuf *b, const json *s, int index) {
    if (memmem(s->str, s->len, IMAGE, strlen(IMAGE)))
        return chat_error(index, "the image placeholder " IMAGE " appears as text");
    put(b, s->str, s->len);
    return 0;
}

/* The string of a {"type": "text", "text": "..."} part, or NULL. */
static const json *text_of_part(const json *part) {
    const char *type = string_of(json_get(part, "type"));
    const json *text = json_get(part, "text");
    return type && !strcmp(type, "text") && text && text->type == JSON_STR ? text : NULL;
}

/* A message content: a string, null, or parts (text; images as the placeholder) joined by a
 * blank line. */
static int put_content(strbuf *b, const json *content, int index) {
    if (!content || content->type == JSON_NULL) return 0;
    if (content->type == JSON_STR) return put_text(b, content, index);
    if (content->type != JSON_ARR) return chat_error(index, "content must be a string, null or a list of parts");
    for (size_t i = 0; i < content->len; i++) {
        const json *part = &content->items[i], *text = text_of_part(part);
        if (i) put(b, "\n\n", 2);
        if (is_image_part(string_of(json_get(part, "type")))) puts_(b, IMAGE);
        else if (!text) return chat_error(index, "content parts must be text (with a string) or an image");
        else if (put_text(b, text, index)) return -1;
    }
    return 0;
}

/* A tool result's content: a string, null, or items joined by a blank line (text parts as
 * text, other parts as "[Unsupported TYPE]", strings as themselves). */
static int put_tool_content(strbuf *b, const json *content, int index) {
    if (!content || content->type != JSON_ARR) return put_content(b, content, index);
    for (size_t i = 0; i < content->len; i++) {
        const json *item = &content->items[i], *text = item->type == JSON_STR ? item : text_of_part(item);
        const char *type = string_of(json_get(item, "type"));
        if (i) put(b, "\n\n", 2);
        if (text) { if (put_text(b, text, index)) return -1; }
        else if (item->type != JSON_OBJ || (type && !strcmp(type, "text")))
            return chat_error(index, "tool content items must be strings, text parts with a string, or parts");
        else { puts_(b, "[Unsupported "); puts_(b, type ? type : "None"); puts_(b, "]"); }
    }
    return 0;
}

/* A user turn: its blocks joined by a blank line, tool results wrapped in <tool_result>. */
static int put_user_blocks(strbuf *b, const convo *c, const turn *t) {
    for (size_t i = 0; i < t->n_blocks; i++) {
        const block *bl = &c->blocks[t->first_block + i];
        if (i) put(b, "\n\n", 2);
        if (!bl->call_id) { if (put_content(b, bl->content, t->index)) return -1; continue; }
        puts_(b, "<tool_result>");
        if (put_tool_content(b, bl->content, t->index)) return -1;
        puts_(b, "</tool_result>");
    }
    return 0;
}

/* The tools block and the response-format block of a system or developer turn. */
static int put_system_extras(strbuf *b, const turn *t) {
    const json *rf = json_get(t->msg, "response_format");
    if (truthy(t->tools)) {
        put(b, "\n\n", 2);
        puts_(b, tools_head);
        for (size_t i = 0; i < t->tools->len; i++) {
            const json *tool = &t->tools->items[i], *fn = json_get(tool, "function");
            if (!fn || fn->type != JSON_OBJ) return chat_error(t->index, "each tool needs a \"function\" object");
            if (json_get(tool, "namespace") || json_get(fn, "namespace"))
                return chat_error(t->index, "tool namespaces are not supported");
            if (i) put(b, "\n", 1);
            put_py_json(b, fn);
        }
        puts_(b, tools_tail);
    }
    if (truthy(rf)) {
        puts_(b, response_format_head);
        put_py_json(b, rf);
    }
    return 0;
}

/* One DSML parameter: strings raw with string="true", anything else as JSON. */
static void put_parameter(strbuf *b, const char *name, const json *value) {
    puts_(b, "<" DSML " parameter name=\"");
    puts_(b, name);
    puts_(b, value->type == JSON_STR ? "\" string=\"true\">" : "\" string=\"false\">");
    if (value->type == JSON_STR) put(b, value->str, value->len);
    else put_py_json(b, value);
    puts_(b, "</" DSML " parameter>");
}

/* A call's arguments as parameters: an object, or a string holding (possibly doubly encoded)
 * JSON of one; anything else becomes a single parameter named "arguments". */
static void put_arguments(strbuf *b, const json *args) {
    json *parsed[2] = {NULL, NULL};
    const json *obj = args;
    char err[8];
    for (int k = 0; k < 2 && obj->type == JSON_STR; k++) {
        if (!(parsed[k] = json_parse(obj->str, obj->len, err, sizeof err))) break;
        obj = parsed[k];
    }
    if (obj->type == JSON_OBJ) {
        for (size_t i = 0; i < obj->len; i++) {
            if (i) put(b, "\n", 1);
            put_parameter(b, obj->keys[i], &obj->items[i]);
        }
    } else {
        put_parameter(b, "arguments", args);
    }
    json_free(parsed[0]);
    json_free(parsed[1]);
}

/* An assistant's tool calls as a DSML calls block (nothing for none). */
static int put_calls(strbuf *b, const turn *t) {
    const json *calls = json_get(t->msg, "tool_calls");
    if (!truthy(calls)) return 0;
    if (calls->type != JSON_ARR) return chat_error(t->index, "tool_calls must be an array");
    puts_(b, "\n\n<" DSML " calls>\n");
    for (size_t i = 0; i < calls->len; i++) {
        const json *fn = json_get(&calls->items[i], "function"), *args = json_get(fn, "arguments");
        const char *name = string_of(json_get(fn, "name"));
        if (!name || !args) return chat_error(t->index, "each tool call needs function.name and function.arguments");
        if (i) put(b, "\n", 1);
        puts_(b, "<" DSML " invoke name=\"");
        puts_(b, name);
        puts_(b, "\">\n");
        put_arguments(b, args);
        puts_(b, "\n</" DSML " invoke>");
    }
    puts_(b, "\n</" DSML " calls>");
    return 0;
}

/* An assistant turn: kept reasoning, content, calls, EOS. */
static int put_assistant(strbuf *b, const convo *c, size_t i, int last_user) {
    const turn *t = &c->turns[i];
    const json *reasoning = json_get(t->msg, "reasoning_content");
    int after_task = i > 0 && c->turns[i - 1].task;
    if (c->thinking && !after_task && (!c->drop_thinking || (int)i > last_user)) {
        if (truthy(reasoning) && reasoning->type != JSON_STR) return chat_error(t->index, "reasoning_content must be a string");
        if (truthy(reasoning)) put(b, reasoning->str, reasoning->len);
        puts_(b, UNTHINK);
    }
    if (put_content(b, json_get(t->msg, "content"), t->index) || put_calls(b, t)) return -1;
    puts_(b, EOS);
    return 0;
}

/* What follows turn i when the next turn is the model's (or there is none): the task token,
 * or the Assistant header with <think> / </think>. */
static void put_header(strbuf *b, const convo *c, size_t i, int last_user) {
    const turn *t = &c->turns[i];
    if (i + 1 < c->n && c->turns[i + 1].role != ROLE_ASSISTANT && c->turns[i + 1].role != ROLE_REMINDER) return;
    if (t->task) {
        if (!strcmp(t->task, "action")) puts_(b, c->thinking ? ASSISTANT_TOKEN THINK : ASSISTANT_TOKEN UNTHINK);
        puts_(b, "<｜");
        puts_(b, t->task);
        puts_(b, "｜>");
    } else if (user_like(c, i)) {
        int think = c->thinking && (!c->drop_thinking || (int)i >= last_user);
        puts_(b, think ? ASSISTANT_TOKEN THINK : ASSISTANT_TOKEN UNTHINK);
    }
}

/* Pass 3, one turn: the leading System token and effort line at index 0, the turn itself,
 * then its header. */
static int put_turn(strbuf *b, const convo *c, size_t i, int last_user) {
    const turn *t = &c->turns[i];
    const json *content = json_get(t->msg, "content");
    if (i == 0 && (c->thinking || t->role == ROLE_SYSTEM)) puts_(b, SYSTEM_TOKEN);
    if (i == 0 && c->thinking) {
        puts_(b, "Reasoning Effort: ");
        putf(b, "%d", c->effort);
        puts_(b, " (range 1-100, the higher the value, the more thorough the reasoning)\n\n");
    }
    int rc = 0;
    switch (t->role) {
    case ROLE_SYSTEM:
        if (i > 0) puts_(b, SYSTEM_TOKEN);
        rc = put_content(b, content, t->index) || put_system_extras(b, t);
        break;
    case ROLE_DEVELOPER: {
        puts_(b, USER_TOKEN);
        size_t start = b->n;
        rc = put_content(b, content, t->index);
        if (!rc && b->n == start) rc = chat_error(t->index, "a developer message needs content");
        rc = rc || put_system_extras(b, t);
        break;
    }
    case ROLE_USER: puts_(b, USER_TOKEN); rc = put_user_blocks(b, c, t); break;
    case ROLE_REMINDER: puts_(b, REMINDER_TOKEN); rc = put_content(b, content, t->index); break;
    default: rc = put_assistant(b, c, i, last_user); break;
    }
    if (rc) return -1;
    put_header(b, c, i, last_user);
    return 0;
}

static char *render(convo *c, const json *root) {
    const json *messages = json_get(root, "messages"), *tools = json_get(root, "tools");
    if (root->type != JSON_OBJ || !messages || messages->type != JSON_ARR) {
        set_error("chat: the case must be an object with a \"messages\" array");
        return NULL;
    }
    if (tools && tools->type != JSON_NULL && tools->type != JSON_ARR) {
        set_error("chat: tools must be an array");
        return NULL;
    }
    if (parse_options(c, json_get(root, "options")) || build_turns(c, messages, tools)) return NULL;
    order_tool_results(c);
    drop_turns(c);
    strbuf b = {0};
    int last_user = last_user_like(c);
    puts_(&b, BOS);
    for (size_t i = 0; i < c->n; i++)
        if (put_turn(&b, c, i, last_user)) { free(b.p); return NULL; }
    if (b.oom) { free(b.p); set_error("out of memory"); return NULL; }
    return b.p;
}

/* Every string of the case (keys too) must be text the prompt can hold: valid UTF-8 with no NUL,
 * since a \u0000 would cut the prompt and a lone surrogate escape or a raw invalid byte would
 * reach the tokenizer. path names the value for the error ("messages[0].content"). */
static int check_strings(const json *j, char *path, size_t cap) {
    size_t at = strlen(path);
    const char *why;
    if (j->type == JSON_STR) {
        if (strlen(j->str) != j->len) return set_error("chat: %s holds a NUL character", path);
        size_t bad = utf8_invalid_at(j->str, j->len, &why);
        if (bad != j->len) return set_error("chat: %s: invalid UTF-8 at byte offset %zu%s", path, bad, why);
    }
    if (j->type != JSON_ARR && j->type != JSON_OBJ) return 0;
    for (size_t i = 0; i < j->len; i++) {
        if (j->keys) {
            if (utf8_invalid_at(j->keys[i], strlen(j->keys[i]), &why) != strlen(j->keys[i]))
                return set_error("chat: a key in %s is not valid UTF-8", at ? path : "the case");
            snprintf(path + at, cap - at, "%s%s", at ? "." : "", j->keys[i]);
        } else {
            snprintf(path + at, cap - at, "[%zu]", i);
        }
        if (check_strings(&j->items[i], path, cap)) return -1;
        path[at] = 0;
    }
    return 0;
}

char *dsv41_chat_render(const char *case_json, size_t len) {
    char err[256], path[256] = "";
    json *root = json_parse(case_json, len, err, sizeof err);
    if (!root) { set_error("chat: %s", err); return NULL; }
    if (check_strings(root, path, sizeof path)) { json_free(root); return NULL; }
    convo c = {0};
    char *out = render(&c, root);
    free(c.turns);
    free(c.blocks);
    json_free(root);
    return out;
}

/* ---- generated replies: reasoning, answer and tool calls apart
 *
 * The model writes its reasoning up to </think> (in thinking mode the prompt ends with
 * <think>), then the answer, then possibly a DSML calls block. While a reply streams, the tail
 * that could still become a marker is held back, and so is trailing whitespace before a
 * possible calls block, so that what was shown never has to be taken back. */

static const char calls_open[] = "<" DSML " calls>";

/* The first occurrence of marker in text[from, len), or -1. */
static int64_t find_marker(const char *text, size_t len, size_t from, const char *marker) {
    size_t m = strlen(marker);
    for (size_t i = from; i + m <= len; i++)
        if (text[i] == marker[0] && !memcmp(text + i, marker, m)) return (int64_t)i;
    return -1;
}

/* How many bytes at the end of text[from, len) could begin marker. */
static size_t marker_tail(const char *text, size_t len, size_t from, const char *marker) {
    size_t m = strlen(marker);
    for (size_t k = m - 1; k > 0; k--)
        if (k <= len - from && !memcmp(text + len - k, marker, k)) return k;
    return 0;
}

void dsv41_chat_reply_parts(const char *text, size_t len, int flags, dsv41_reply_parts *out) {
    int final = flags & DSV41_REPLY_FINAL;
    *out = (dsv41_reply_parts){0, 0, 0, -1};
    size_t start = 0;
    if (flags & DSV41_REPLY_THINKING) {
        int64_t end = find_marker(text, len, 0, UNTHINK);
        if (end < 0) {
            out->reasoning_end = out->content_start = out->content_end =
                (int64_t)(len - (final ? 0 : marker_tail(text, len, 0, UNTHINK)));
            return;
        }
        out->reasoning_end = end;
        start = (size_t)end + strlen(UNTHINK);
    }
    out->content_start = (int64_t)start;
    size_t end = len;
    if (flags & DSV41_REPLY_TOOLS) {
        int64_t calls = find_marker(text, len, start, calls_open);
        out->calls_start = calls;
        if (calls >= 0) end = (size_t)calls;
        else if (!final) end -= marker_tail(text, len, start, calls_open);
        if (calls >= 0 || !final)
            while (end > start && strchr(" \t\r\n", text[end - 1])) end--;
    }
    out->content_end = (int64_t)end;
}

/* Consumes literal at *p (after optional whitespace); 0 when it is there. */
static int expect(const char **p, const char *end, const char *literal) {
    while (*p < end && strchr(" \t\r\n", **p) && **p) (*p)++;
    size_t n = strlen(literal);
    if ((size_t)(end - *p) < n || memcmp(*p, literal, n)) return -1;
    *p += n;
    return 0;
}

/* The text up to closer (which is consumed), as [*s, *s + *n); 0 when the closer is there. */
static int until(const char **p, const char *end, const char *closer, const char **s, size_t *n) {
    int64_t at = find_marker(*p, (size_t)(end - *p), 0, closer);
    if (at < 0) return -1;
    *s = *p;
    *n = (size_t)at;
    *p += at + (int64_t)strlen(closer);
    return 0;
}

/* One invoke's parameters as a JSON object text: string="true" values as strings, the others
 * as the JSON they hold (or as strings when they hold none). */
static int put_invoke_arguments(strbuf *args, const char **p, const char *end) {
    puts_(args, "{");
    for (int first = 1;; first = 0) {
        if (!expect(p, end, "</" DSML " invoke>")) break;
        const char *name, *kind, *value;
        size_t n_name, n_kind, n_value;
        if (expect(p, end, "<" DSML " parameter name=\"") || until(p, end, "\" string=\"", &name, &n_name) ||
            until(p, end, "\">", &kind, &n_kind) || until(p, end, "</" DSML " parameter>", &value, &n_value))
            return set_error("chat: a tool call's parameter is cut or malformed");
        if (!first) puts_(args, ", ");
        put_py_string(args, name, n_name);
        puts_(args, ": ");
        char err[8];
        json *v = n_kind == 5 && !memcmp(kind, "false", 5) ? json_parse(value, n_value, err, sizeof err) : NULL;
        if (v) put_py_json(args, v);
        else put_py_string(args, value, n_value);
        json_free(v);
    }
    puts_(args, "}");
    return 0;
}

char *dsv41_chat_reply_calls(const char *text, size_t len) {
    const char *p = text, *end = text + len;
    strbuf out = {0}, args = {0};
    int rc = expect(&p, end, calls_open) ? set_error("chat: the reply has no tool-call block") : 0;
    puts_(&out, "[");
    for (int n = 0; rc == 0; n++) {
        if (!expect(&p, end, "</" DSML " calls>") || p == end) break; /* closed, or the reply ended */
        const char *name;
        size_t n_name;
        if (expect(&p, end, "<" DSML " invoke name=\"") || until(&p, end, "\">", &name, &n_name)) {
            rc = set_error("chat: a tool call is cut or malformed");
            break;
        }
        args.n = 0;
        if ((rc = put_invoke_arguments(&args, &p, end))) break;
        puts_(&out, n ? ", {\"name\": " : "{\"name\": ");
        put_py_string(&out, name, n_name);
        puts_(&out, ", \"arguments\": ");
        put_py_string(&out, args.p ? args.p : "{}", args.n);
        puts_(&out, "}");
    }
    puts_(&out, "]");
    free(args.p);
    if (rc == 0 && (out.oom || args.oom)) rc = set_error("out of memory");
    if (rc == 0 && out.n == 2) rc = set_error("chat: the tool-call block holds no call");
    if (rc) { free(out.p); return NULL; }
    return out.p;
}

/* Messages as structs: written as the JSON case above reads (one encoder, one set of rules). */
char *dsv41_chat_render_messages(const dsv41_chat_message *msgs, int32_t n, const dsv41_chat_options *opts) {
    if (n < 0 || (n > 0 && !msgs)) { set_error("chat: no messages"); return NULL; }
    strbuf b = {0};
    puts_(&b, "{\"messages\": [");
    for (int32_t i = 0; i < n; i++) {
        const dsv41_chat_message *m = &msgs[i];
        if (!m->role || !m->content) {
            free(b.p);
            chat_error(i, "role and content are required");
            return NULL;
        }
        puts_(&b, i ? ", {\"role\": " : "{\"role\": ");
        put_py_string(&b, m->role, strlen(m->role));
        puts_(&b, ", \"content\": ");
        put_py_string(&b, m->content, strlen(m->content));
        if (m->reasoning_content) {
            puts_(&b, ", \"reasoning_content\": ");
            put_py_string(&b, m->reasoning_content, strlen(m->reasoning_content));
        }
        puts_(&b, "}");
    }
    puts_(&b, "]");
    if (opts) {
        puts_(&b, opts->thinking ? ", \"options\": {\"thinking_mode\": \"thinking\"" : ", \"options\": {\"thinking_mode\": \"chat\"");
        if (opts->reasoning_effort) putf(&b, ", \"reasoning_effort\": %d", opts->reasoning_effort);
        puts_(&b, "}");
    }
    puts_(&b, "}");
    if (b.oom) { free(b.p); set_error("out of memory"); return NULL; }
    char *text = dsv41_chat_render(b.p, b.n);
    free(b.p);
    return text;
}
