/* api.h - the OpenAI-shaped requests and replies: parsing a generation request into a job,
 * and writing the reply, whole or as server-sent events. The HTTP side (http.c) moves the
 * bytes and waits for the scheduler; nothing here touches a socket. */
#ifndef SERVE_API_H
#define SERVE_API_H

#include "jbuf.h"
#include "server.h"

/* The route a generation came by: its request and reply shapes. Every kind but a completion
 * renders messages with the chat encoder. */
typedef enum { GEN_CHAT, GEN_COMPLETION, GEN_MESSAGES, GEN_RESPONSE } gen_kind;

typedef struct {
    gen_kind kind;
    job *job;              /* submitted by the caller */
    int stream;            /* reply as server-sent events */
    int include_usage;     /* stream_options.include_usage */
    int return_tokens;     /* the reply carries the generated ids as "tokens" (a stream: each chunk its own) */
    int flags;             /* DSV41_REPLY_THINKING / _TOOLS: how the reply splits */
    char id[48];           /* chatcmpl-..., cmpl-..., msg_... or resp_... */
    long long created;     /* unix seconds */
    /* streaming progress */
    int sent_head;         /* the opening event(s) went out */
    int32_t sent_marks;    /* tokens whose text went out */
    size_t sent_reasoning; /* bytes of text sent as reasoning */
    size_t sent_content;   /* end of the text sent as content (an offset into the text) */
    int32_t sent_ids;      /* generated ids that went out in chunks' "tokens" */
    int blocks;            /* content blocks (messages) or output items (responses) begun */
    int open;              /* the part whose block or item is open (a reply_part), -1: none */
    int32_t seq;           /* the next event's sequence_number (responses) */
    double last_event;     /* when an event last went out (monotonic seconds), for pings */
} gen;

/* The parts of a chat reply's text, as the stream hands them on. */
typedef enum { PART_REASONING, PART_CONTENT } reply_part;

/* A whole reply's text apart: its reasoning text[0, reasoning_end), its answer
 * text[content_start, content_end) and its tool calls ([{"name", "arguments"}] with arguments
 * as JSON text; NULL when there are none, or when the block does not parse and stays answer). */
typedef struct {
    size_t reasoning_end, content_start, content_end;
    dsv41_json *calls; /* owned: free with dsv41_json_free */
} reply_split;

/* Writes the event(s) that carry text[a, b) of one part of the reply, as of its first n_tok tokens. */
typedef void (*put_delta)(server *sv, gen *g, jbuf *out, reply_part part, const char *text, size_t a, size_t b, int32_t n_tok);

/* Parses a /v1/chat/completions or /v1/completions body into g (a job not yet submitted).
 * Returns 0, or an HTTP status with the error reply in err. */
int api_parse_generation(server *sv, gen_kind kind, const char *body, size_t n, gen *g, jbuf *err);
/* With the scheduler's lock held: the whole reply of an ended job. Returns the HTTP status. */
int api_reply(server *sv, gen *g, jbuf *out);
/* With the lock held: SSE events for the job's new progress, ending with [DONE] once the job
 * ended. Returns 1 when the stream is complete. */
int api_stream(server *sv, gen *g, jbuf *out);

/* ---- what the routes' shapes share (anthropic.c, responses.c) */
/* The ended job's text apart into r (chat kinds; a completion is all answer). */
void api_split_reply(const gen *g, reply_split *r);
/* With the lock held: hands put the reasoning and answer text that the job's tokens made final
 * since the last call, token by token; once the job ended (not in error), the rest up to the
 * answer's end, and returns 1 with *end holding the whole reply apart (free its calls). */
int api_stream_text(server *sv, gen *g, jbuf *out, put_delta put, reply_split *end);
/* The id's serial part (after "chatcmpl-", "msg_"...), which the ids of tool calls reuse. */
const char *api_id_serial(const gen *g);
/* The reply's reasoning tokens: in thinking mode, those up to and including the first </think>
 * (all of them when it never came); 0 otherwise. */
int32_t api_reasoning_tokens(const server *sv, const gen *g);
/* The stop string that ended the job's reply, or NULL (EOS, length, no stop). */
const char *api_stop_hit(const gen *g);
/* Text that is a string or an array of parts {"type", "text"} whose type is one of types
 * (NULL-terminated), joined, as one JSON string into o; 0, or -1 when it is neither. */
int api_put_text(jbuf *o, const dsv41_json *v, const char *const *types);
/* A 400 whose message is what; returns 400. */
int api_bad(jbuf *err, const char *param, const char *what);
/* Copies the keys of src named in keys (NULL-terminated) into the object being written to o,
 * each after a comma: the options a translated request passes on as they are. */
void api_copy_keys(jbuf *o, const dsv41_json *src, const char *const *keys);

/* ---- structured output (structured.c) */
/* The grammar that request root (chat completions-shaped: Anthropic's and the Responses API's
 * are translated first; kind the route it came by, flags how its reply splits) asks its reply to
 * follow, compiled into j->grammar with j->trigger; j->grammar stays NULL when the reply is
 * free. 0, or an HTTP status with the error reply in err. */
int structured_grammar(server *sv, const dsv41_json *root, gen_kind kind, int flags, job *j, jbuf *err);

/* POST /v1/messages and /v1/messages/count_tokens (anthropic.c): Anthropic's Messages API. */
int anthropic_parse(server *sv, const char *body, size_t n, gen *g, jbuf *err);
int anthropic_reply(server *sv, gen *g, jbuf *out);
int anthropic_stream(server *sv, gen *g, jbuf *out);
int anthropic_count_tokens(server *sv, const char *body, size_t n, jbuf *out);
/* POST /v1/responses (responses.c): OpenAI's Responses API, without stored responses. */
int responses_parse(server *sv, const char *body, size_t n, gen *g, jbuf *err);
int responses_reply(server *sv, gen *g, jbuf *out);
int responses_stream(server *sv, gen *g, jbuf *out);
/* Rewrites an error reply of api_error's shape in b as Anthropic's
 * {"type": "error", "error": {"type", "message"}}. */
void anthropic_error_shape(jbuf *b, int status);
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
