/* chat_messages.c - the chat encoder for callers holding messages as C structs.
 *
 * The messages are written as the JSON case dsv41_chat_render reads, so there is one encoder
 * and one set of rules; this file only escapes strings. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"

typedef struct {
    char *p;        /* [cap] NUL-terminated text */
    size_t n, cap;
    int oom;
} jbuf;

static void jput(jbuf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *p = realloc(b->p, cap);
        if (!p) { b->oom = 1; return; }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static void jputs(jbuf *b, const char *s) { jput(b, s, strlen(s)); }

/* s as a JSON string literal: quotes, backslashes and control bytes escaped. */
static void jstring(jbuf *b, const char *s) {
    jputs(b, "\"");
    for (const char *run = s;; s++) {
        unsigned char c = (unsigned char)*s;
        if (c && c != '"' && c != '\\' && c >= 0x20) continue;
        jput(b, run, (size_t)(s - run));
        if (!c) break;
        char esc[8];
        snprintf(esc, sizeof esc, c == '"' || c == '\\' ? "\\%c" : "\\u%04x", c);
        jputs(b, esc);
        run = s + 1;
    }
    jputs(b, "\"");
}

char *dsv41_chat_render_messages(const dsv41_chat_message *msgs, int32_t n, const dsv41_chat_options *opts) {
    if (n < 0 || (n > 0 && !msgs)) { set_error("chat: no messages"); return NULL; }
    jbuf b = {0};
    jputs(&b, "{\"messages\": [");
    for (int32_t i = 0; i < n; i++) {
        if (!msgs[i].role || !msgs[i].content) {
            free(b.p);
            set_error("chat: message %d: role and content are required", i);
            return NULL;
        }
        jputs(&b, i ? ", {\"role\": " : "{\"role\": ");
        jstring(&b, msgs[i].role);
        jputs(&b, ", \"content\": ");
        jstring(&b, msgs[i].content);
        if (msgs[i].reasoning_content) {
            jputs(&b, ", \"reasoning_content\": ");
            jstring(&b, msgs[i].reasoning_content);
        }
        jputs(&b, "}");
    }
    jputs(&b, "]");
    if (opts) {
        char o[96];
        snprintf(o, sizeof o, ", \"options\": {\"thinking_mode\": \"%s\"", opts->thinking ? "thinking" : "chat");
        jputs(&b, o);
        if (opts->reasoning_effort) {
            snprintf(o, sizeof o, ", \"reasoning_effort\": %d", opts->reasoning_effort);
            jputs(&b, o);
        }
        jputs(&b, "}");
    }
    jputs(&b, "}");
    if (b.oom) { free(b.p); set_error("out of memory"); return NULL; }
    char *text = dsv41_chat_render(b.p, b.n);
    free(b.p);
    return text;
}
