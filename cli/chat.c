/* chat.c - text in, text out: `dsv41 run -p` and the interactive `dsv41 chat`.
 *
 * A conversation lives in one session, and every turn only appends: the first prompt is
 * rendered by the chat encoder; each later turn feeds just what closes the previous reply and
 * opens the next one (cut from the encoder's own rendering of a two-turn conversation), so the
 * tokens already in the caches are never prefilled again. Ctrl-C ends the reply being
 * generated, never the program. */
#include <editline/readline.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "commands.h"
#include "dsv41.h"

typedef struct {
    const char *dir, *prompt, *think, *system;
    dsv41_sampler_params sp;
    long n_new;
    const char *stops[8];
    int n_stops;
} gen_opts;

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int fail(const char *what) {
    fprintf(stderr, "dsv41: %s\n", what);
    return 1;
}

/* A number in [lo, hi] (NaN and infinities are in no range). Returns 0, or -1 after a message. */
static int num(const char *flag, const char *v, double lo, double hi, double *out) {
    char *end;
    *out = strtod(v, &end);
    if (*end || end == v || !(*out >= lo && *out <= hi)) {
        fprintf(stderr, "dsv41: %s wants a number in [%g, %g], not '%s'\n", flag, lo, hi, v);
        return -1;
    }
    return 0;
}

/* An integer in [0, hi], digits only. Returns 0, or -1 after a message. */
static int whole(const char *flag, const char *v, uint64_t lo, uint64_t hi, uint64_t *out) {
    char *end;
    errno = 0;
    unsigned long long u = v[0] >= '0' && v[0] <= '9' ? strtoull(v, &end, 10) : 0;
    if (!(v[0] >= '0' && v[0] <= '9') || *end || errno || u < lo || u > hi) {
        fprintf(stderr, "dsv41: %s wants an integer from %llu to %llu, not '%s'\n", flag, (unsigned long long)lo,
                (unsigned long long)hi, v);
        return -1;
    }
    *out = u;
    return 0;
}

/* Parses the flags run and chat share; returns 0, or 2 (usage) after a message. */
static int parse(int argc, char **argv, gen_opts *o, int allow_prompt) {
    *o = (gen_opts){.n_new = -1, .sp = {0.6f, 0, 0.95f, 0.0f, 0}};
    o->sp.seed = (uint64_t)time(NULL);
    for (int i = 0; i < argc; i += 2) { /* every flag takes a value */
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        double d;
        uint64_t u;
        if (!v) { fprintf(stderr, "dsv41: '%s' needs a value or is unknown\n", f); return 2; }
        if (!strcmp(f, "-m")) o->dir = v;
        else if (!strcmp(f, "-p") && allow_prompt) o->prompt = v;
        else if (!strcmp(f, "--system")) o->system = v;
        else if (!strcmp(f, "--think")) o->think = v;
        else if (!strcmp(f, "--stop") && o->n_stops < 8) o->stops[o->n_stops++] = v;
        else if (!strcmp(f, "-n")) { if (whole(f, v, 0, INT32_MAX, &u)) return 2; o->n_new = (long)u; }
        else if (!strcmp(f, "--temp")) { if (num(f, v, 0, 100, &d)) return 2; o->sp.temperature = (float)d; }
        else if (!strcmp(f, "--top-k")) { if (whole(f, v, 0, INT32_MAX, &u)) return 2; o->sp.top_k = (int32_t)u; }
        else if (!strcmp(f, "--top-p")) { if (num(f, v, 1e-6, 1, &d)) return 2; o->sp.top_p = (float)d; }
        else if (!strcmp(f, "--min-p")) { if (num(f, v, 0, 1, &d)) return 2; o->sp.min_p = (float)d; }
        else if (!strcmp(f, "--seed")) { if (whole(f, v, 0, UINT64_MAX, &u)) return 2; o->sp.seed = u; }
        else if (!strcmp(f, "-t")) { if (whole(f, v, 1, 256, &u) || dsv41_set_threads((int32_t)u)) return 2; }
        else { fprintf(stderr, "dsv41: unknown flag '%s'\n", f); return 2; }
    }
    if (!o->dir) { fprintf(stderr, "dsv41: give the checkpoint directory with -m DIR\n"); return 2; }
    return 0;
}

/* JSON string literal of s into out (at most cap bytes); returns the length or -1. */
static long json_str(const char *s, char *out, long cap) {
    long n = 0;
    out[n++] = '"';
    for (; *s && n + 8 < cap; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') { out[n++] = '\\'; out[n++] = (char)c; }
        else if (c < 0x20) n += snprintf(out + n, (size_t)(cap - n), "\\u%04x", c);
        else out[n++] = (char)c;
    }
    if (*s) return -1;
    out[n++] = '"';
    out[n] = 0;
    return n;
}

/* Renders messages given as (role, content) pairs with the run's options. */
static char *render(const gen_opts *o, const char *const *msgs, int n) {
    size_t cap = 256;
    for (int i = 0; i < 2 * n; i++) cap += 6 * strlen(msgs[i]) + 64;
    if (o->system) cap += 6 * strlen(o->system) + 64;
    if (o->think) cap += 6 * strlen(o->think) + 64;
    char *js = malloc(cap), *tmp = malloc(cap);
    if (!js || !tmp) { free(js); free(tmp); return NULL; }
    size_t w = (size_t)snprintf(js, cap, "{\"messages\": [");
    int first = 1;
    if (o->system) {
        json_str(o->system, tmp, (long)cap);
        w += (size_t)snprintf(js + w, cap - w, "{\"role\": \"system\", \"content\": %s}", tmp);
        first = 0;
    }
    for (int i = 0; i < n; i++) {
        json_str(msgs[2 * i + 1], tmp, (long)cap);
        w += (size_t)snprintf(js + w, cap - w, "%s{\"role\": \"%s\", \"content\": %s}", first ? "" : ", ", msgs[2 * i], tmp);
        first = 0;
    }
    if (o->think) {
        char *end;
        long effort = strtol(o->think, &end, 10);
        if (*end || end == o->think) {
            json_str(o->think, tmp, (long)cap);
            w += (size_t)snprintf(js + w, cap - w, "], \"options\": {\"thinking_mode\": \"thinking\", \"reasoning_effort\": %s}}", tmp);
        }
        else w += (size_t)snprintf(js + w, cap - w, "], \"options\": {\"thinking_mode\": \"thinking\", \"reasoning_effort\": %ld}}", effort);
    } else {
        w += (size_t)snprintf(js + w, cap - w, "], \"options\": {\"thinking_mode\": \"chat\"}}");
    }
    char *text = dsv41_chat_render(js, w);
    free(js);
    free(tmp);
    return text;
}

typedef struct {
    dsv41_model *m;
    dsv41_tokenizer *tk;
    dsv41_session *s;
    dsv41_sampler *smp;
    float *logits;
    int32_t V, eos, ctx;
    int32_t prompt_tokens, gen_tokens;
    double prompt_s, gen_s;
} chat_state;

static void progress(void *ctx, int32_t done, int32_t total) {
    (void)ctx;
    fprintf(stderr, "\rprefill: layer %d/%d", done, total);
    if (done == total) fprintf(stderr, "\r%*s\r", 24, "");
}

/* Tokenizes text (special-token spellings included) and feeds it. Returns 0, 1 after an error
 * message, or 2 when a signal stopped it (a stopped prefill leaves the session empty, a stopped
 * append leaves part of the text in it). */
static int feed_text(chat_state *c, const char *text) {
    int64_t n = dsv41_tokenize(c->tk, text, strlen(text), 1, NULL, 0);
    if (n < 0) return fail(dsv41_error());
    if (n == 0) return 0;
    if (dsv41_session_pos(c->s) + n >= c->ctx) {
        fprintf(stderr, "dsv41: the conversation would need %lld tokens; the context holds %d (use /reset)\n",
                (long long)(dsv41_session_pos(c->s) + n), c->ctx);
        return 1;
    }
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    if (!ids) return fail("out of memory");
    dsv41_tokenize(c->tk, text, strlen(text), 1, ids, n);
    dsv41_session_set_progress(c->s, n >= 64 && isatty(2) ? progress : NULL, NULL);
    double t0 = now_s();
    int rc = cli_signal ? -1 : dsv41_session_forward(c->s, ids, (int32_t)n, c->logits, NULL);
    c->prompt_s += now_s() - t0;
    c->prompt_tokens += (int32_t)n;
    free(ids);
    if (rc && cli_signal) return fprintf(stderr, "\r%*s\r", 24, ""), 2;
    return rc ? fail(dsv41_error()) : 0;
}

/* How many trailing bytes of buf could still begin a stop string. */
static size_t held_back(const char *buf, size_t n, const gen_opts *o) {
    size_t keep = 0;
    for (int i = 0; i < o->n_stops; i++) {
        size_t sl = strlen(o->stops[i]);
        for (size_t k = sl - 1; k > keep && k > 0; k--)
            if (k <= n && !memcmp(buf + n - k, o->stops[i], k)) { keep = k; break; }
    }
    return keep;
}

/* Samples until EOS, a stop string, the limit or Ctrl-C; streams the text. Returns 1 when the
 * reply ended with EOS (which is not fed: the next turn's text closes the reply), 0 when it was
 * cut, -1 on error. */
static int reply(chat_state *c, const gen_opts *o) {
    char out[256], *text = NULL;
    size_t len = 0, printed = 0, cap = 0;
    dsv41_utf8_stream st = {{0}, 0};
    long limit = o->n_new >= 0 ? o->n_new : (long)c->ctx;
    int ended = 0;
    double t0 = now_s();
    for (long i = 0; i < limit && !cli_signal; i++) {
        int32_t next = dsv41_sample(c->smp, c->logits);
        if (next == c->eos) { ended = 1; break; }
        if (dsv41_session_pos(c->s) + 1 >= c->ctx) {
            fprintf(stderr, "\ndsv41: the context of %d tokens is full\n", c->ctx);
            break;
        }
        if (dsv41_session_forward(c->s, &next, 1, c->logits, NULL)) {
            if (cli_signal) break; /* the signal cancelled this step: the reply ends here */
            free(text);
            return fail(dsv41_error()), -1;
        }
        c->gen_tokens++;
        int64_t n = dsv41_detokenize(c->tk, &st, next, out, sizeof out);
        if (n < 0) n = 0;
        if (len + (size_t)n + 1 > cap) {
            cap = (len + (size_t)n + 1) * 2;
            char *nt = realloc(text, cap);
            if (!nt) { free(text); return fail("out of memory"), -1; }
            text = nt;
        }
        memcpy(text + len, out, (size_t)n);
        len += (size_t)n;
        text[len] = 0;
        int stop = 0;
        for (int k = 0; k < o->n_stops; k++) {
            char *hit = strstr(text + (printed > 64 ? printed - 64 : 0), o->stops[k]);
            if (hit) { len = (size_t)(hit - text); stop = 1; }
        }
        size_t safe = stop ? len : len - held_back(text, len, o);
        if (safe > printed) fwrite(text + printed, 1, safe - printed, stdout), printed = safe;
        fflush(stdout);
        if (stop) break;
    }
    if (len > printed) fwrite(text + printed, 1, len - printed, stdout); /* what could have begun a stop string */
    if (st.n > 0) fputs("\xEF\xBF\xBD", stdout); /* a character the reply cut */
    printf("\n");
    fflush(stdout);
    c->gen_s += now_s() - t0;
    free(text);
    return ended;
}

static void stats(const chat_state *c) {
    fprintf(stderr, "prompt: %d tokens, %.1f tok/s | generated: %d tokens, %.1f tok/s\n", c->prompt_tokens,
            c->prompt_s > 0 ? c->prompt_tokens / c->prompt_s : 0.0, c->gen_tokens,
            c->gen_s > 0 ? c->gen_tokens / c->gen_s : 0.0);
}

static int open_chat(chat_state *c, const gen_opts *o) {
    memset(c, 0, sizeof *c);
    char path[1200];
    snprintf(path, sizeof path, "%s/tokenizer.json", o->dir);
    if (!(c->m = dsv41_model_load(o->dir))) return fail(dsv41_error());
    if (!(c->tk = dsv41_tokenizer_load(path))) return fail(dsv41_error());
    c->V = dsv41_model_vocab_size(c->m);
    if (dsv41_tokenizer_n_vocab(c->tk) > c->V) {
        fprintf(stderr, "dsv41: %s has %d tokens but the model only %d\n", path, dsv41_tokenizer_n_vocab(c->tk), c->V);
        return 1;
    }
    c->ctx = dsv41_model_max_seq_len(c->m);
    c->eos = dsv41_tokenizer_find(c->tk, "<｜end▁of▁sentence｜>");
    if (c->eos < 0) c->eos = 1;
    c->logits = malloc((size_t)c->V * sizeof *c->logits);
    if (!(c->smp = dsv41_sampler_new(&o->sp, c->V))) return fail(dsv41_error());
    if (!(c->s = dsv41_session_new(c->m)) || !c->logits) return fail(dsv41_error());
    cli_cancel_target(c->s);
    return 0;
}

static void close_chat(chat_state *c) {
    cli_cancel_target(NULL);
    free(c->logits);
    dsv41_sampler_free(c->smp);
    dsv41_session_free(c->s);
    dsv41_tokenizer_free(c->tk);
    dsv41_model_free(c->m);
}

/* 1 when the user's text is valid UTF-8; else 0 after a message naming the offset in it (not
 * in the rendered prompt, which the user never saw). */
static int checked_utf8(chat_state *c, const char *what, const char *text) {
    if (dsv41_tokenize(c->tk, text, strlen(text), 0, NULL, 0) >= 0) return 1;
    fprintf(stderr, "dsv41: the %s text: %s\n", what, dsv41_error());
    return 0;
}

int cmd_run_text(int argc, char **argv) {
    gen_opts o;
    int rc = parse(argc, argv, &o, 1);
    if (rc) return rc;
    if (!o.prompt) { fprintf(stderr, "dsv41: run needs -p TEXT (or --ids)\n"); return 2; }
    chat_state c;
    cli_catch_signals(1);
    if (open_chat(&c, &o)) { close_chat(&c); return 1; }
    const char *msgs[2] = {"user", o.prompt};
    char *text = NULL;
    if (!checked_utf8(&c, "-p", o.prompt) || (o.system && !checked_utf8(&c, "--system", o.system))) rc = 1;
    else if (!(text = render(&o, msgs, 1))) rc = fail(dsv41_error());
    else rc = feed_text(&c, text);
    free(text);
    if (rc == 0 && reply(&c, &o) < 0) rc = 1;
    if (rc == 0 && !cli_signal) stats(&c);
    close_chat(&c);
    if (cli_signal) { fprintf(stderr, "dsv41: interrupted\n"); return 128 + cli_signal; }
    return rc;
}

/* What the encoder puts between the end of a reply and the next reply: rendered from a
 * conversation with a placeholder reply, cut after the placeholder. */
static char *turn_text(const gen_opts *o, const char *user) {
    static const char *MARK = "\x01reply\x01";
    const char *msgs[6] = {"user", "hi", "assistant", MARK, "user", user};
    char *full = render(o, msgs, 3), *cut = full ? strstr(full, MARK) : NULL;
    char *t = cut ? strdup(cut + strlen(MARK)) : NULL; /* a sampled EOS was never fed: the template's closes the turn */
    free(full);
    return t;
}

/* A new empty session in place of the conversation's. Returns 0, or 1 after a message. */
static int restart(chat_state *c) {
    cli_cancel_target(NULL); /* the handler must never see the session being freed */
    dsv41_session_free(c->s);
    c->s = dsv41_session_new(c->m);
    if (!c->s) return fail(dsv41_error());
    cli_cancel_target(c->s);
    return 0;
}

int cmd_chat(int argc, char **argv) {
    gen_opts o;
    int rc = parse(argc, argv, &o, 0);
    if (rc) return rc;
    chat_state c;
    cli_catch_signals(0);
    if (open_chat(&c, &o)) { close_chat(&c); return 1; }
    int tty = isatty(0), started = 0;
    char *buf = NULL;
    size_t buf_cap = 0;
    if (tty) fprintf(stderr, "dsv41 chat: /reset starts over, /quit leaves, Ctrl-C stops a reply\n");
    for (;;) {
        cli_signal = 0;
        char *line = tty ? readline("> ") : NULL;
        if (!tty) { /* one turn per line, however long */
            ssize_t got = getline(&buf, &buf_cap, stdin);
            if (got < 0) break;
            if (got > 0 && buf[got - 1] == '\n') buf[got - 1] = 0;
            line = strdup(buf);
        }
        if (!line) break;
        if (tty && *line) add_history(line);
        if (!strcmp(line, "/quit")) { free(line); break; }
        if (!strcmp(line, "/reset")) {
            free(line);
            if (restart(&c)) { rc = 1; break; }
            started = 0;
            fprintf(stderr, "(conversation cleared)\n");
            continue;
        }
        if (!*line) { free(line); continue; }
        const char *msgs[2] = {"user", line};
        char *text = started ? turn_text(&o, line) : render(&o, msgs, 1);
        free(line);
        if (!text) { fail(dsv41_error()); continue; }
        int frc = feed_text(&c, text);
        free(text);
        if (frc == 2 && started) { /* part of the turn is in the caches: the conversation cannot go on */
            if (restart(&c)) { rc = 1; break; }
            started = 0;
            fprintf(stderr, "(interrupted: conversation cleared)\n");
        }
        if (frc) continue;
        started = 1;
        if (reply(&c, &o) < 0) { rc = 1; break; }
    }
    free(buf);
    stats(&c);
    close_chat(&c);
    return rc;
}
