/* api.h - the OpenAI-shaped requests and replies: parsing a generation request into a job,
 * and writing the reply, whole or as server-sent events. The HTTP side (http.c) moves the
 * bytes and waits for the scheduler; nothing here touches a socket. */
#ifndef SERVE_API_H
#define SERVE_API_H

#include "jbuf.h"
#include "server.h"

typedef enum { GEN_CHAT, GEN_COMPLETION } gen_kind;

typedef struct {
    gen_kind kind;
    job *job;              /* submitted by the caller */
    int stream;            /* reply as server-sent events */
    int include_usage;     /* stream_options.include_usage */
    int return_tokens;     /* the reply carries the generated ids as "tokens" (a stream: each chunk its own) */
    int flags;             /* DSV41_REPLY_THINKING / _TOOLS: how the reply splits */
    char id[48];           /* chatcmpl-... or cmpl-... */
    long long created;     /* unix seconds */
    /* streaming progress */
    int sent_head;         /* the chunk with the role went out */
    int32_t sent_marks;    /* tokens whose text went out */
    size_t sent_reasoning; /* bytes of text sent as reasoning */
    size_t sent_content;   /* end of the text sent as content (an offset into the text) */
    int32_t sent_ids;      /* generated ids that went out in chunks' "tokens" */
} gen;

/* Parses a /v1/chat/completions or /v1/completions body into g (a job not yet submitted).
 * Returns 0, or an HTTP status with the error reply in err. */
int api_parse_generation(server *sv, gen_kind kind, const char *body, size_t n, gen *g, jbuf *err);
/* With the scheduler's lock held: the whole reply of an ended job. Returns the HTTP status. */
int api_reply(server *sv, gen *g, jbuf *out);
/* With the lock held: SSE events for the job's new progress, ending with [DONE] once the job
 * ended. Returns 1 when the stream is complete. */
int api_stream(server *sv, gen *g, jbuf *out);
/* POST /tokenize and /detokenize; GET /v1/models. Return the HTTP status. */
int api_tokenize(server *sv, const char *body, size_t n, jbuf *out);
int api_detokenize(server *sv, const char *body, size_t n, jbuf *out);
int api_models(server *sv, jbuf *out);
/* GET /slots, and POST /slots/{id}?action=save|restore|erase with {"filename": NAME} for the
 * slot id given as text (slots.c). Return the HTTP status. */
int api_slots(server *sv, jbuf *out);
int api_slot_action(server *sv, const char *id, const char *action, const char *body, size_t n, jbuf *out);
/* {"error": {"message", "type", "param", "code"}} for status; returns status. */
int api_error(jbuf *out, int status, const char *param, const char *fmt, ...) __attribute__((format(printf, 4, 5)));

#endif
