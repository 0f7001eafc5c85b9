/* structured.c - a request's structured-output fields as one grammar for its reply (see api.h).
 *
 * Every route reaches here with a chat completions-shaped request (Anthropic's and the
 * Responses API's are translated into one first), so one mapping serves all:
 *   - the answer: response_format json_object (any object) or json_schema (strict or not), a
 *     top-level json_schema (llama.cpp's completion field), or a raw grammar (the extension
 *     field `grammar`, whose start rule is the whole reply's);
 *   - the tool calls: a DSML calls block (the V4.1 template's form, which
 *     dsv41_chat_reply_calls parses back) whose invokes name the tools and whose parameters
 *     follow each constrained tool's schema: `strict: true` functions, and every tool of an
 *     Anthropic request. tool_choice "required" or a named function makes the reply nothing but
 *     that block; "none" leaves the tools out, and so no call can be written.
 * The grammar covers the answer after the reasoning: in thinking mode the reasoning up to
 * </think> is free (the constraint's trigger). A request with none of these fields gets no
 * grammar, and its reply is sampled as before.
 *
 * The grammar text is built here and compiled by the library (dsv41_grammar_new); JSON Schemas
 * become grammar text through dsv41_schema_grammar, whose rules get a prefix of their own per
 * use so that several fit in one grammar. */
#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api.h"

#define DSML "\xEF\xBD\x9C" "DSML" "\xEF\xBD\x9C" /* ｜DSML｜ */

/* Calls in one block at most: the template puts no bound, but on weights that do not close the
 * block (or do so late) an unbounded count would run to max_tokens; 16 is more than any reply
 * of a real agent holds. */
enum { MAX_CALLS = 16 };

/* How much a tool's arguments are held to its schema: not at all (a call of it is well formed,
 * its parameters any name and value), by request (OpenAI's strict: a schema outside the subset
 * is a 400), or by default (Anthropic's tools: a schema outside the subset falls back to well
 * formed, so that no agent's tool list is refused). */
typedef enum { HOLD_NONE, HOLD_DEFAULT, HOLD_STRICT } hold;

typedef struct {
    jbuf g;          /* the grammar text being written */
    const char *why; /* the request member a failure names */
} builder;

static int is(const char *s, const char *want) { return s && !strcmp(s, want); }

/* A grammar string literal of a name s [n] (a tool's, a property's) into b: every ASCII byte but
 * letters and digits as \xNN, so that no quote, backslash or control byte needs a rule of its
 * own; the bytes of other characters as they are. */
static void put_literal(jbuf *b, const char *s, size_t n) {
    jb_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80 && !isalnum(c)) jb_printf(b, "\\x%02X", c);
        else jb_put(b, s + i, 1);
    }
    jb_puts(b, "\"");
}

/* The grammar rules of the JSON Schema text [n], named prefix...root; 0, or -1 with dsv41_error(). */
static int put_schema_text(builder *b, const char *text, size_t n, const char *prefix) {
    char *rules = dsv41_schema_grammar(text, n, prefix);
    if (!rules) return -1;
    jb_puts(&b->g, rules);
    jb_puts(&b->g, "\n");
    free(rules);
    return 0;
}

/* The grammar rules of a JSON Schema (a parsed value), named prefix...root; with the root
 * schema's $defs / definitions given along, so that a property's "$ref": "#/$defs/x" finds its
 * target. 0, or -1 with dsv41_error() naming the problem. */
static int put_schema(builder *b, const dsv41_json *schema, const dsv41_json *root, const char *prefix) {
    jbuf s = {0};
    const dsv41_json *defs = dsv41_json_get(root, "$defs"), *definitions = dsv41_json_get(root, "definitions");
    if (schema != root && dsv41_json_type_of(schema) == DSV41_JSON_OBJ && (defs || definitions)) {
        jb_puts(&s, "{");
        size_t n = 0;
        for (size_t i = 0; i < dsv41_json_len(schema); i++) {
            const char *key = dsv41_json_key(schema, i);
            if (is(key, "$defs") || is(key, "definitions")) continue;
            jb_puts(&s, n++ ? "," : "");
            jb_str(&s, key, strlen(key));
            jb_puts(&s, ":");
            jb_value(&s, dsv41_json_at(schema, i));
        }
        if (defs) jb_puts(&s, n++ ? ",\"$defs\":" : "\"$defs\":"), jb_value(&s, defs);
        if (definitions) jb_puts(&s, n++ ? ",\"definitions\":" : "\"definitions\":"), jb_value(&s, definitions);
        jb_puts(&s, "}");
    } else
        jb_value(&s, schema);
    int rc = s.oom ? -1 : put_schema_text(b, s.p, s.n, prefix);
    jb_free(&s);
    return rc;
}

/* ---- the tool calls */

/* A string property with no keyword that bounds its text: the template writes such a value raw
 * (string="true"); any other value is JSON (string="false"), which parses back the same. */
static int is_plain_string(const dsv41_json *schema) {
    static const char *const free_keys[] = {"type", "description", "title", "default", "examples", "$comment", NULL};
    if (!is(dsv41_json_str(dsv41_json_get(schema, "type")), "string")) return 0;
    for (size_t i = 0; i < dsv41_json_len(schema); i++) {
        const char *const *k = free_keys;
        while (*k && strcmp(*k, dsv41_json_key(schema, i))) k++;
        if (!*k) return 0;
    }
    return 1;
}

/* The rules every block shares: raw text (no special token, and no ｜, so that no value can
 * spell the closing tag), any JSON value, a parameter of any name with any value. */
static int put_shared_rules(builder *b) {
    jb_puts(&b->g, "dsml-raw ::= [^\xEF\xBD\x9C]*\n"
                   "dsml-any-param ::= \"<" DSML " parameter name=\\\"\" [^\"\xEF\xBD\x9C\\n]+ \"\\\" string=\\\"\" "
                   "(\"true\\\">\" dsml-raw | \"false\\\">\" dsml-any-root) \"</" DSML " parameter>\"\n"
                   "dsml-any-params ::= (dsml-any-param (\"\\n\" dsml-any-param)*)?\n");
    return put_schema_text(b, "{}", 2, "dsml-any-");
}

/* What put_params made of a schema. */
enum { PARAMS_HELD, PARAMS_ANY, PARAMS_OUTSIDE };

/* Tool k's parameters held to schema: rule tK-params. Each property is a parameter rule tK-pI;
 * they come in the schema's order, the required ones always and the optional ones maybe, each
 * after a newline but the first (as the template writes them). tK-rI is what may follow once
 * something was written, from property I on. PARAMS_HELD; PARAMS_ANY for an object schema that
 * names no property and does not forbid others (any parameters are valid: nothing written);
 * PARAMS_OUTSIDE for a schema that is not an object of properties (nothing written); -1 with
 * dsv41_error() set when a property's schema cannot be compiled. */
static int put_params(builder *b, int k, const dsv41_json *schema) {
    const dsv41_json *props = dsv41_json_get(schema, "properties"), *required = dsv41_json_get(schema, "required");
    const dsv41_json *more = dsv41_json_get(schema, "additionalProperties");
    const char *type = dsv41_json_str(dsv41_json_get(schema, "type"));
    if (dsv41_json_type_of(schema) != DSV41_JSON_OBJ || (type && strcmp(type, "object")) ||
        (props && dsv41_json_type_of(props) != DSV41_JSON_OBJ) || dsv41_json_get(schema, "anyOf") ||
        dsv41_json_get(schema, "oneOf") || dsv41_json_get(schema, "allOf") || dsv41_json_get(schema, "$ref"))
        return PARAMS_OUTSIDE;
    if (!dsv41_json_len(props)) {
        if (dsv41_json_type_of(more) != DSV41_JSON_BOOL || dsv41_json_num(more, NULL) != 0) return PARAMS_ANY;
        jb_printf(&b->g, "t%d-params ::= \"\"\n", k); /* a tool without parameters */
        return PARAMS_HELD;
    }
    size_t n = dsv41_json_len(props);
    int first_required = -1;
    char prefix[48];
    for (size_t i = 0; i < n; i++) {
        const char *name = dsv41_json_key(props, i);
        const dsv41_json *p = dsv41_json_at(props, i);
        int req = 0;
        for (size_t r = 0; r < dsv41_json_len(required); r++) req |= is(dsv41_json_str(dsv41_json_at(required, r)), name);
        if (req && first_required < 0) first_required = (int)i;
        /* the parameter */
        jb_printf(&b->g, "t%d-p%zu ::= \"<" DSML " parameter name=\\\"\" ", k, i);
        put_literal(&b->g, name, strlen(name));
        if (is_plain_string(p)) jb_puts(&b->g, " \"\\\" string=\\\"true\\\">\" dsml-raw");
        else jb_printf(&b->g, " \"\\\" string=\\\"false\\\">\" t%d-v%zu-root", k, i);
        jb_puts(&b->g, " \"</" DSML " parameter>\"\n");
        if (!is_plain_string(p)) {
            snprintf(prefix, sizeof prefix, "t%d-v%zu-", k, i);
            if (put_schema(b, p, schema, prefix)) return -1;
        }
        /* what may follow once something was written */
        jb_printf(&b->g, "t%d-r%zu ::= %s\"\\n\" t%d-p%zu%s", k, i, req ? "" : "(", k, i, req ? "" : ")?");
        if (i + 1 < n) jb_printf(&b->g, " t%d-r%zu", k, i + 1);
        jb_puts(&b->g, "\n");
    }
    /* the first parameter written is one of those up to the first required one (or none, when
     * every one is optional) */
    size_t last = first_required < 0 ? n - 1 : (size_t)first_required;
    jb_printf(&b->g, "t%d-params ::= (", k);
    for (size_t i = 0; i <= last; i++) {
        jb_printf(&b->g, "%st%d-p%zu", i ? " | " : "", k, i);
        if (i + 1 < n) jb_printf(&b->g, " t%d-r%zu", k, i + 1);
    }
    jb_puts(&b->g, first_required < 0 ? ")?\n" : ")\n");
    return PARAMS_HELD;
}

/* The strictness a tool asked for. */
static hold tool_hold(const dsv41_json *fn, hold dflt) {
    const dsv41_json *strict = dsv41_json_get(fn, "strict");
    if (dsv41_json_type_of(strict) == DSV41_JSON_BOOL) return dsv41_json_num(strict, NULL) != 0 ? HOLD_STRICT : dflt;
    return dflt;
}

/* One invoke rule per tool (t0-invoke...), the ones the reply may call joined as dsml-invoke;
 * only: the one tool a named tool_choice allows (NULL: all). 0, or a 400 in err. */
static int put_invokes(builder *b, const dsv41_json *tools, const char *only, hold dflt, jbuf *err) {
    int any = 0;
    jbuf alts = {0};
    for (size_t k = 0; k < dsv41_json_len(tools); k++) {
        const dsv41_json *fn = dsv41_json_get(dsv41_json_at(tools, k), "function");
        const char *name = dsv41_json_str(dsv41_json_get(fn, "name"));
        if (!name || (only && strcmp(name, only))) continue;
        hold h = tool_hold(fn, dflt);
        size_t at = b->g.n;
        int rc = h == HOLD_NONE ? PARAMS_ANY : put_params(b, (int)k, dsv41_json_get(fn, "parameters"));
        if (rc < 0 && b->g.p) b->g.p[b->g.n = at] = 0; /* the rules begun are dropped */
        if ((rc < 0 || rc == PARAMS_OUTSIDE) && h == HOLD_STRICT) {
            jb_free(&alts);
            if (rc > 0) return api_error(err, 400, "tools", "tool '%s' is strict, and its parameters must be an object schema of properties", name);
            return api_error(err, 400, "tools", "tool '%s': %s", name, dsv41_error());
        }
        if (rc != PARAMS_HELD) rc = PARAMS_ANY; /* outside the subset, by default: well formed only */
        jb_printf(&b->g, "t%zu-invoke ::= \"<" DSML " invoke name=\\\"\" ", k);
        put_literal(&b->g, name, strlen(name));
        if (rc == PARAMS_ANY) jb_puts(&b->g, " \"\\\">\\n\" dsml-any-params");
        else jb_printf(&b->g, " \"\\\">\\n\" t%zu-params", k);
        jb_puts(&b->g, " \"\\n</" DSML " invoke>\"\n");
        jb_printf(&alts, "%st%zu-invoke", any++ ? " | " : "", k);
    }
    if (any) jb_printf(&b->g, "dsml-invoke ::= %s\n", alts.p);
    jb_free(&alts);
    return 0;
}

/* ---- the request */

/* The request member a route's clients know the answer's format by (Anthropic's and the
 * Responses API's are translated onto response_format). */
static const char *format_param(gen_kind kind) {
    return kind == GEN_MESSAGES ? "output_config.format" : kind == GEN_RESPONSE ? "text.format" : "response_format";
}

/* The answer's grammar, when the request asks for one: rules whose start is answer-root, or (a
 * raw grammar) the caller's own, whose start is root. *raw says which; *any 1 when there is one.
 * 0, or a 400 in err. */
static int put_answer(builder *b, const dsv41_json *root, gen_kind kind, int *any, int *raw, jbuf *err) {
    const dsv41_json *rf = dsv41_json_get(root, "response_format"), *schema = dsv41_json_get(root, "json_schema");
    const dsv41_json *grammar = dsv41_json_get(root, "grammar");
    const char *type = dsv41_json_str(dsv41_json_get(rf, "type"));
    int asked = (is(type, "json_object") || is(type, "json_schema")) + (dsv41_json_type_of(schema) != DSV41_JSON_NULL) +
                (dsv41_json_type_of(grammar) != DSV41_JSON_NULL);
    *any = *raw = 0;
    if (dsv41_json_type_of(rf) != DSV41_JSON_NULL && !is(type, "text") && !is(type, "json_object") && !is(type, "json_schema"))
        return api_error(err, 400, "response_format", "response_format.type must be text, json_object or json_schema");
    if (asked > 1)
        return api_error(err, 400, "response_format", "give one of response_format (json_object or json_schema), json_schema and grammar");
    if (!asked) return 0;
    *any = 1;
    if (dsv41_json_type_of(grammar) != DSV41_JSON_NULL) {
        if (dsv41_json_type_of(grammar) != DSV41_JSON_STR || !dsv41_json_len(grammar))
            return api_error(err, 400, "grammar", "'grammar' must be a non-empty string (GBNF, start rule root)");
        jb_put(&b->g, dsv41_json_str(grammar), dsv41_json_len(grammar));
        jb_puts(&b->g, "\n");
        b->why = "grammar";
        *raw = 1;
        return 0;
    }
    if (is(type, "json_schema")) {
        schema = dsv41_json_get(dsv41_json_get(rf, "json_schema"), "schema");
        if (dsv41_json_type_of(schema) != DSV41_JSON_OBJ && dsv41_json_type_of(schema) != DSV41_JSON_BOOL)
            return api_error(err, 400, format_param(kind), "the format's schema must be a JSON Schema (an object)");
    } else if (!is(type, "json_object") && dsv41_json_type_of(schema) != DSV41_JSON_OBJ && dsv41_json_type_of(schema) != DSV41_JSON_BOOL)
        return api_error(err, 400, "json_schema", "'json_schema' must be a JSON Schema (an object)");
    b->why = is(type, "json_object") || is(type, "json_schema") ? format_param(kind) : "json_schema";
    if (is(type, "json_object")) {
        static const char object[] = "{\"type\":\"object\",\"additionalProperties\":true}";
        return put_schema_text(b, object, sizeof object - 1, "answer-") ? api_error(err, 500, NULL, "%s", dsv41_error()) : 0;
    }
    if (put_schema(b, schema, schema, "answer-")) return api_error(err, 400, b->why, "%s", dsv41_error());
    return 0;
}

int structured_grammar(server *sv, const dsv41_json *root, gen_kind kind, int flags, job *j, jbuf *err) {
    const dsv41_json *tools = dsv41_json_get(root, "tools"), *choice = dsv41_json_get(root, "tool_choice");
    builder b = {{0}, "tools"};
    int answer, raw;
    int rc = put_answer(&b, root, kind, &answer, &raw, err);
    if (rc) return jb_free(&b.g), rc;
    /* which calls the reply may or must make: none when there are no tools (or "none"); forced
     * by "required" or a named function; held to their schemas by strict (every Anthropic tool) */
    const char *c = dsv41_json_str(choice), *only = dsv41_json_str(dsv41_json_get(dsv41_json_get(choice, "function"), "name"));
    int n_tools = (flags & DSV41_REPLY_TOOLS) ? (int)dsv41_json_len(tools) : 0;
    int forced = n_tools && (is(c, "required") || only);
    hold dflt = kind == GEN_MESSAGES ? HOLD_DEFAULT : HOLD_NONE;
    int held = dflt != HOLD_NONE;
    for (int k = 0; k < n_tools; k++) held |= tool_hold(dsv41_json_get(dsv41_json_at(tools, (size_t)k), "function"), dflt) != HOLD_NONE;
    int calls = n_tools && (forced || held || answer);
    if (!answer && !calls) return 0;
    if (raw && calls)
        return jb_free(&b.g), api_error(err, 400, "grammar", "a raw grammar is the whole reply: it cannot be combined with tools (leave them out, or use tool_choice none)");
    if (calls) {
        int single = dsv41_json_num(dsv41_json_get(root, "parallel_tool_calls"), NULL) == 0 &&
                     dsv41_json_type_of(dsv41_json_get(root, "parallel_tool_calls")) == DSV41_JSON_BOOL;
        if ((rc = put_invokes(&b, tools, only, dflt, err)) || put_shared_rules(&b)) {
            if (!rc) rc = api_error(err, 500, NULL, "%s", dsv41_error());
            return jb_free(&b.g), rc;
        }
        jb_printf(&b.g, "dsml-calls ::= \"\\n\\n<" DSML " calls>\\n\" dsml-invoke");
        if (!single) jb_printf(&b.g, " (\"\\n\" dsml-invoke){0,%d}", MAX_CALLS - 1);
        jb_puts(&b.g, " \"\\n</" DSML " calls>\"\n");
        /* a forced call is the whole answer (no text before it); otherwise the answer, free or
         * held to its format, or a call in its place (free text may precede a call, as the
         * template writes it) */
        if (forced) jb_puts(&b.g, "root ::= dsml-calls\n");
        else if (answer) jb_puts(&b.g, "root ::= answer-root | dsml-calls\n");
        else jb_puts(&b.g, "root ::= [^\\x00]* dsml-calls?\n");
    } else if (!raw)
        jb_puts(&b.g, "root ::= answer-root\n");
    if (b.g.oom) return jb_free(&b.g), api_error(err, 500, NULL, "out of memory");
    j->grammar = dsv41_grammar_new(sv->tok, b.g.p, b.g.n);
    jb_free(&b.g);
    if (!j->grammar) return api_error(err, 400, b.why, "%s", dsv41_error());
    j->trigger = (flags & DSV41_REPLY_THINKING) ? dsv41_tokenizer_find(sv->tok, "</think>") : -1;
    return 0;
}
