/* http.c - the HTTP side of `dsv41 serve` on libmicrohttpd.
 *
 * One thread per connection (libmicrohttpd's own): a handler may block while its request waits
 * for the scheduler, and a streamed reply's reader blocks until the next token. Both wait in
 * short slices and look at the socket in between, so a client that hangs up cancels its job
 * within a decode step and its slot frees. Every request ends in one log line on stderr. */
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "api.h"
#include "http.h"

/* The statuses counted for /metrics, in the order of server.by_status (the last: any other). */
static const int counted[N_STATUS] = {200, 400, 401, 404, 405, 413, 500, 503, 0};

enum { WAIT_MS = 20 }; /* a waiting request looks at its socket this often */

typedef struct request {
    server *sv;
    struct MHD_Connection *conn;
    char method[16], path[256];
    jbuf body;
    int too_large;      /* the body went over the limit: 413 once it is read */
    int status;         /* the status sent */
    int32_t prompt_tokens, cached_tokens, gen_tokens;
    double t0;
    gen gen;            /* a generation request */
    jbuf out;           /* a stream's events not yet handed to libmicrohttpd */
    size_t out_at;      /* of which out[0, out_at) went */
    int done;           /* the stream sent [DONE] */
    int refs;           /* the connection and a streamed reply; freed at 0 (under sv->mu) */
} request;

static void request_unref(request *rq) {
    pthread_mutex_lock(&rq->sv->mu);
    int last = --rq->refs == 0;
    pthread_mutex_unlock(&rq->sv->mu);
    if (!last) return;
    if (rq->gen.job) sched_release(rq->sv->sched, rq->gen.job);
    jb_free(&rq->body);
    jb_free(&rq->out);
    free(rq);
}

/* The client closed its end (or the connection broke). */
static int hung_up(struct MHD_Connection *conn) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(conn, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci) return 1;
    struct pollfd p = {ci->connect_fd, POLLIN | POLLRDHUP, 0};
    if (poll(&p, 1, 0) <= 0) return 0;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return 1;
    char c;
    return (p.revents & POLLIN) && recv(ci->connect_fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* The route's API: its requests and replies, its errors' shape. */
static int is_anthropic(const request *rq) { return !strncmp(rq->path, "/v1/messages", 12); }

static enum MHD_Result send_buf(request *rq, int status, jbuf *b, const char *type) {
    if (b->oom) {
        jb_free(b);
        api_error(b, 500, NULL, "out of memory");
        status = 500;
    }
    if (status >= 400 && is_anthropic(rq)) anthropic_error_shape(b, status);
    struct MHD_Response *r = b->p ? MHD_create_response_from_buffer(b->n, b->p, MHD_RESPMEM_MUST_FREE)
                                  : MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    b->p = NULL;
    *b = (jbuf){0};
    MHD_add_response_header(r, "Content-Type", type);
    rq->status = status;
    enum MHD_Result ok = MHD_queue_response(rq->conn, (unsigned)status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result send_json(request *rq, int status, jbuf *b) { return send_buf(rq, status, b, "application/json"); }

static enum MHD_Result send_error(request *rq, int status, const char *param, const char *msg) {
    jbuf b = {0};
    api_error(&b, status, param, "%s", msg);
    return send_json(rq, status, &b);
}

/* Waits for a job to end (or for the client to leave: then the job is cancelled). With the
 * lock held on return; 1 when the client is still there. */
static int await_end(request *rq) {
    sched *s = rq->sv->sched;
    job *j = rq->gen.job;
    sched_lock(s);
    while (j->end == END_NONE) {
        sched_wait(s, j, WAIT_MS);
        if (j->end != END_NONE) break;
        sched_unlock(s);
        int gone = hung_up(rq->conn);
        sched_lock(s);
        if (gone) {
            job_cancel(j);
            return 0;
        }
    }
    return 1;
}

/* Each kind's request and reply shapes (api.c, anthropic.c, responses.c). */
static int parse_as(server *sv, gen_kind kind, const char *body, size_t n, gen *g, jbuf *err) {
    return kind == GEN_MESSAGES ? anthropic_parse(sv, body, n, g, err)
         : kind == GEN_RESPONSE ? responses_parse(sv, body, n, g, err) : api_parse_generation(sv, kind, body, n, g, err);
}
static int reply_as(server *sv, gen *g, jbuf *out) {
    return g->kind == GEN_MESSAGES ? anthropic_reply(sv, g, out) : g->kind == GEN_RESPONSE ? responses_reply(sv, g, out) : api_reply(sv, g, out);
}
static int stream_as(server *sv, gen *g, jbuf *out) {
    return g->kind == GEN_MESSAGES ? anthropic_stream(sv, g, out) : g->kind == GEN_RESPONSE ? responses_stream(sv, g, out) : api_stream(sv, g, out);
}

/* libmicrohttpd asks for the next bytes of a streamed reply: hands over what is queued, else
 * waits for the job's progress and turns it into events. */
static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    (void)pos;
    request *rq = cls;
    sched *s = rq->sv->sched;
    job *j = rq->gen.job;
    while (rq->out_at == rq->out.n) {
        if (rq->done) return MHD_CONTENT_READER_END_OF_STREAM;
        rq->out.n = rq->out_at = 0;
        sched_lock(s);
        rq->done = stream_as(rq->sv, &rq->gen, &rq->out);
        if (!rq->done && rq->out.n == 0) { /* nothing new: wait a slice, then look again */
            sched_wait(s, j, WAIT_MS);
            rq->done = stream_as(rq->sv, &rq->gen, &rq->out);
        }
        rq->gen_tokens = j->n_gen;
        rq->cached_tokens = j->n_cached;
        sched_unlock(s);
        if (rq->out.oom) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (rq->out.n == 0 && hung_up(rq->conn)) {
            sched_lock(s);
            job_cancel(j);
            sched_unlock(s);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
    }
    size_t n = rq->out.n - rq->out_at < max ? rq->out.n - rq->out_at : max;
    memcpy(buf, rq->out.p + rq->out_at, n);
    rq->out_at += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) { request_unref(cls); }

static enum MHD_Result generate(request *rq, gen_kind kind) {
    server *sv = rq->sv;
    jbuf out = {0};
    int status = parse_as(sv, kind, rq->body.p ? rq->body.p : "", rq->body.n, &rq->gen, &out);
    if (status) return send_json(rq, status, &out);
    job *j = rq->gen.job;
    rq->prompt_tokens = j->n_prompt;
    if (sched_submit(sv->sched, j)) {
        job_free(j);
        rq->gen.job = NULL;
        return send_error(rq, 503, NULL, "every slot is busy and the queue is full; try again later");
    }
    if (rq->gen.stream) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, rq, stream_free);
        if (!r) return MHD_NO;
        pthread_mutex_lock(&sv->mu);
        rq->refs++;
        pthread_mutex_unlock(&sv->mu);
        MHD_add_response_header(r, "Content-Type", "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        rq->status = 200;
        enum MHD_Result ok = MHD_queue_response(rq->conn, 200, r);
        MHD_destroy_response(r);
        return ok;
    }
    int here = await_end(rq);
    if (here) status = reply_as(sv, &rq->gen, &out);
    rq->gen_tokens = j->n_gen;
    rq->cached_tokens = j->n_cached;
    sched_unlock(sv->sched);
    if (!here) return MHD_NO; /* nobody to answer */
    return send_json(rq, status, &out);
}

/* A key compared in time that depends only on the lengths, never on where they differ. */
static int key_matches(const char *given, const char *key) {
    size_t n = strlen(given), m = strlen(key);
    unsigned char diff = (unsigned char)(n != m);
    for (size_t i = 0; i < m; i++) diff |= (unsigned char)(key[i] ^ (i < n ? given[i] : 0));
    return diff == 0;
}

/* The chat page's files, embedded at build time (build/ui_*.c). They need no key: the page
 * asks for one and sends it with its API calls. The policy allows only this origin's files, so
 * no inline script or style and nothing from elsewhere can run. */
extern const char ui_index_html[], ui_chat_js[], ui_chat_css[];
static const struct { const char *path, *type, *body; } pages[] = {
    {"/", "text/html; charset=utf-8", ui_index_html},
    {"/chat.js", "text/javascript; charset=utf-8", ui_chat_js},
    {"/chat.css", "text/css; charset=utf-8", ui_chat_css},
};

static enum MHD_Result send_page(request *rq, size_t i) {
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(pages[i].body), (void *)pages[i].body, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", pages[i].type);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    rq->status = 200;
    enum MHD_Result ok = MHD_queue_response(rq->conn, 200, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result route(request *rq) {
    server *sv = rq->sv;
    const char *p = rq->path, *m = rq->method;
    int get = !strcmp(m, "GET") || !strcmp(m, "HEAD"), post = !strcmp(m, "POST");
    jbuf out = {0};
    for (size_t i = 0; get && i < sizeof pages / sizeof pages[0]; i++)
        if (!strcmp(p, pages[i].path)) return send_page(rq, i);
    if (get && !strcmp(p, "/favicon.ico")) return send_buf(rq, 204, &out, "image/x-icon"); /* none: a browser asks anyway */
    if (sv->api_key && strcmp(p, "/health")) { /* OpenAI's clients send the key as a bearer token, Anthropic's as x-api-key */
        const char *auth = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "Authorization");
        const char *key = MHD_lookup_connection_value(rq->conn, MHD_HEADER_KIND, "x-api-key");
        if (!(auth && !strncmp(auth, "Bearer ", 7) && key_matches(auth + 7, sv->api_key)) && !(key && key_matches(key, sv->api_key)))
            return send_error(rq, 401, NULL, "a valid API key is required (Authorization: Bearer KEY, or x-api-key: KEY)");
    }
    const char *body = rq->body.p ? rq->body.p : "";
    if (!strncmp(p, "/slots/", 7)) {
        if (!post) return send_error(rq, 405, NULL, "use POST");
        const char *action = MHD_lookup_connection_value(rq->conn, MHD_GET_ARGUMENT_KIND, "action");
        return send_json(rq, api_slot_action(sv, p + 7, action, body, rq->body.n, &out), &out);
    }
    if (!strncmp(p, "/v1/responses/", 14)) /* a stored response, its input items, a cancel */
        return send_error(rq, 404, NULL, "responses are not stored here: there is nothing to retrieve, list or cancel");
    static const struct { const char *path; int post; } routes[] = {
        {"/health", 0}, {"/v1/models", 0}, {"/metrics", 0}, {"/v1/chat/completions", 1},
        {"/v1/completions", 1}, {"/tokenize", 1}, {"/detokenize", 1}, {"/slots", 0},
        {"/v1/messages", 1}, {"/v1/messages/count_tokens", 1}, {"/v1/responses", 1},
    };
    size_t r = 0, n_routes = sizeof routes / sizeof routes[0];
    while (r < n_routes && strcmp(p, routes[r].path)) r++;
    if (r == n_routes) return send_error(rq, 404, NULL, "no such route");
    if (routes[r].post ? !post : !get) return send_error(rq, 405, NULL, routes[r].post ? "use POST" : "use GET");
    switch (r) {
    case 0: jb_puts(&out, "{\"status\":\"ok\"}"); return send_json(rq, 200, &out);
    case 1: return send_json(rq, api_models(sv, &out), &out);
    case 2:
        pthread_mutex_lock(&sv->mu);
        jb_puts(&out, "# HELP dsv41_requests_total Requests answered, by HTTP status.\n# TYPE dsv41_requests_total counter\n");
        for (int i = 0; i < N_STATUS; i++)
            if (counted[i]) jb_printf(&out, "dsv41_requests_total{status=\"%d\"} %llu\n", counted[i], (unsigned long long)sv->by_status[i]);
            else jb_printf(&out, "dsv41_requests_total{status=\"other\"} %llu\n", (unsigned long long)sv->by_status[i]);
        pthread_mutex_unlock(&sv->mu);
        sched_metrics(sv->sched, &out);
        return send_buf(rq, 200, &out, "text/plain; version=0.0.4");
    case 3: return generate(rq, GEN_CHAT);
    case 4: return generate(rq, GEN_COMPLETION);
    case 5: return send_json(rq, api_tokenize(sv, body, rq->body.n, &out), &out);
    case 6: return send_json(rq, api_detokenize(sv, body, rq->body.n, &out), &out);
    case 7: return send_json(rq, api_slots(sv, &out), &out);
    case 8: return generate(rq, GEN_MESSAGES);
    case 9: return send_json(rq, anthropic_count_tokens(sv, body, rq->body.n, &out), &out);
    default: return generate(rq, GEN_RESPONSE);
    }
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *conn, const char *url, const char *method,
                              const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    (void)version;
    server *sv = cls;
    request *rq = *con_cls;
    if (!rq) { /* the headers are in: set up, and refuse a body announced too large at once */
        if (!(rq = calloc(1, sizeof *rq))) return MHD_NO;
        rq->sv = sv;
        rq->conn = conn;
        rq->refs = 1;
        rq->t0 = now_s();
        pthread_mutex_lock(&sv->mu);
        sv->active++;
        pthread_mutex_unlock(&sv->mu);
        snprintf(rq->method, sizeof rq->method, "%s", method);
        snprintf(rq->path, sizeof rq->path, "%s", url);
        *con_cls = rq;
        const char *cl = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > sv->body_limit) rq->too_large = 1;
        else return MHD_YES;
    }
    if (*upload_size) {
        if (rq->body.n + *upload_size > sv->body_limit) rq->too_large = 1;
        if (!rq->too_large) jb_put(&rq->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (rq->status) return MHD_YES; /* answered already */
    if (rq->too_large) {
        char msg[96];
        snprintf(msg, sizeof msg, "the body is over the limit of %zu bytes", sv->body_limit);
        return send_error(rq, 413, NULL, msg);
    }
    if (rq->body.oom) return send_error(rq, 500, NULL, "out of memory");
    return route(rq);
}

/* The request's log line and its count for /metrics. */
static void completed(void *cls, struct MHD_Connection *conn, void **con_cls, enum MHD_RequestTerminationCode toe) {
    (void)conn;
    server *sv = cls;
    request *rq = *con_cls;
    if (!rq) return;
    int i = 0;
    while (i < N_STATUS - 1 && counted[i] != rq->status) i++;
    pthread_mutex_lock(&sv->mu);
    sv->by_status[i]++;
    sv->active--;
    pthread_mutex_unlock(&sv->mu);
    fprintf(stderr, "%s %s %d prompt=%d cached=%d generated=%d %.1f ms%s\n", rq->method, rq->path, rq->status, rq->prompt_tokens,
            rq->cached_tokens, rq->gen_tokens, 1e3 * (now_s() - rq->t0), toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (client gone)");
    *con_cls = NULL;
    request_unref(rq);
}

struct MHD_Daemon *http_start(server *sv, const char *host, int port, int timeout_s, int *bound) {
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char port_s[16];
    snprintf(port_s, sizeof port_s, "%d", port);
    int rc = getaddrinfo(host, port_s, &hints, &ai);
    if (rc) {
        fprintf(stderr, "dsv41: serve: --host %s: %s\n", host, gai_strerror(rc));
        return NULL;
    }
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d = MHD_start_daemon(flags, (uint16_t)port, NULL, NULL, handle, sv,
                                            MHD_OPTION_SOCK_ADDR, ai->ai_addr,
                                            MHD_OPTION_NOTIFY_COMPLETED, completed, sv,
                                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)timeout_s,
                                            MHD_OPTION_CONNECTION_LIMIT, 256u,
                                            MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d) {
        fprintf(stderr, "dsv41: serve: cannot listen on %s port %d (in use, or not an address of this machine)\n", host, port);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    *bound = info ? info->port : port;
    return d;
}

void http_quiesce(struct MHD_Daemon *d) { MHD_quiesce_daemon(d); }

void http_stop(server *sv, struct MHD_Daemon *d) {
    /* the requests in flight end first (their jobs are cancelled by now), so that streams get
     * their closing events before the connections close; a client that stops reading is not
     * waited for longer than a few seconds */
    for (int waited = 0; waited < 500; waited++) {
        pthread_mutex_lock(&sv->mu);
        int32_t active = sv->active;
        pthread_mutex_unlock(&sv->mu);
        if (!active) break;
        nanosleep(&(struct timespec){0, 10000000L}, NULL);
    }
    MHD_stop_daemon(d);
}
