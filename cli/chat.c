/* chat.c - text in, text out: `dsv41 run -p` and the interactive `dsv41 chat`.
 *
 * A conversation lives in one session, and every turn only appends: the first prompt is
 * rendered by the chat encoder; each later turn feeds just what closes the previous reply and
 * opens the next one (cut from the encoder's own rendering of a two-turn conversation), so the
 * tokens already in the caches are never prefilled again. In chat, Ctrl-C ends the reply
 * being generated, never the program; in run it ends the program with status 130. */
#include <editline/readline.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "commands.h"

static int fail(const char *what) {
    fprintf(stderr, "dsv41: %s\n", what);
    return 1;
}

/* Renders user/assistant text pairs msgs [2 n] (role, content) after the run's system
 * message, in chat mode unless --think asks for thinking. */
static char *render(const gen_opts *o, const char *const *msgs, int n) {
    dsv41_chat_message m[8];
    int k = 0;
    if (o->system) m[k++] = (dsv41_chat_message){"system", o->system, NULL};
    for (int i = 0; i < n; i++) m[k++] = (dsv41_chat_message){msgs[2 * i], msgs[2 * i + 1], NULL};
    dsv41_chat_options opts = {o->effort > 0, o->effort};
    return dsv41_chat_render_messages(m, k, &opts);
}

typedef struct {
    dsv41_model *m;
    dsv41_tokenizer *tk;
    dsv41_session *s;
    dsv41_sampler *smp;
    float *logits;        /* [V] of the last token a prompt or a plain step fed: what the next pick reads */
    int32_t *hist;        /* [ctx] every token fed, for the penalties */
    int32_t V, eos, ctx;
    dsv41_grammar *grammar; /* --json-schema / --grammar: what every reply follows, or NULL */
    int32_t think_end;      /* the token after which a thinking reply's answer starts (the grammar's trigger), or -1 */
    int32_t prompt_tokens, gen_tokens;
    double prompt_s, gen_s;
} chat_state;

/* Tokenizes text (special-token spellings included) and feeds it. A prefill of 64 or more
 * tokens shows its layers on a terminal; the display is removed again before the reply, whose
 * one-token calls would otherwise redraw (and erase) the line being streamed. Returns 0, 1 after an error
 * message, or 2 when a signal stopped it (a stopped prefill leaves the session empty, a stopped
 * append leaves part of the text in it). */
static int feed_text(chat_state *c, const char *text) {
    int64_t n = dsv41_tokenize(c->tk, text, strlen(text), 1, NULL, 0);
    if (n < 0) return fail(dsv41_error());
    if (n == 0) return 0;
    int32_t pos = dsv41_session_pos(c->s);
    if (pos + n >= c->ctx) {
        fprintf(stderr, "dsv41: the conversation would need %lld tokens; the context holds %d (use /reset)\n",
                (long long)(pos + n), c->ctx);
        return 1;
    }
    dsv41_tokenize(c->tk, text, strlen(text), 1, c->hist + pos, n);
    dsv41_session_set_progress(c->s, n >= 64 && isatty(2) ? progress_layers : NULL, NULL);
    double t0 = now_s();
    int rc = cli_signal ? -1 : dsv41_session_forward(c->s, c->hist + pos, (int32_t)n, c->logits, NULL);
    dsv41_session_set_progress(c->s, NULL, NULL);
    progress_clear();
    c->prompt_s += now_s() - t0;
    c->prompt_tokens += (int32_t)n;
    if (rc && cli_signal) return 2;
    return rc ? fail(dsv41_error()) : 0;
}

/* A reply being generated: its text, how much of it is out, and how it ended. */
typedef struct {
    chat_state *c;
    const gen_opts *o;
    char *text;                 /* [cap] the reply's text, cut before a stop string */
    size_t len, printed, cap;   /* bytes of text, of those printed, of room */
    dsv41_utf8_stream st;       /* a character split across tokens */
    int64_t taken, limit;       /* tokens in the reply; the most it takes */
    int end;                    /* TAKE_* of the token that ended it; TAKE_ON while it goes on */
    int eos;                    /* it ended with EOS */
    dsv41_constrained_pick cp;  /* the reply's constraint (NULL without a grammar) and the sampler */
} reply_state;

/* What a picked token does to the reply: it goes on; it ends without the token (EOS, or no room
 * in the context: the token is not fed); it ends with the token (a stop string, the limit: the
 * token is fed, as every token of a reply is); or out of memory. */
enum { TAKE_ON, TAKE_DROP, TAKE_FEED, TAKE_ERROR };

/* The token picked for position pos joins the reply: its text is streamed up to what a stop
 * string could still take back. */
static int take(reply_state *r, int32_t tok, int32_t pos) {
    chat_state *c = r->c;
    const gen_opts *o = r->o;
    if (tok == c->eos) return r->eos = 1, TAKE_DROP;
    if (pos + 1 >= c->ctx) {
        fprintf(stderr, "\nnote: the context of %d tokens is full\n", c->ctx);
        return TAKE_DROP;
    }
    c->hist[pos] = tok;
    c->gen_tokens++;
    r->taken++;
    char out[256];
    int shown = o->special || dsv41_token_in_reply(c->tk, tok);
    int64_t n = shown ? dsv41_detokenize(c->tk, &r->st, tok, out, sizeof out) : 0;
    if (n < 0) n = 0;
    if (r->len + (size_t)n + 1 > r->cap) {
        size_t cap = (r->len + (size_t)n + 1) * 2;
        char *nt = realloc(r->text, cap);
        if (!nt) return TAKE_ERROR;
        r->text = nt, r->cap = cap;
    }
    memcpy(r->text + r->len, out, (size_t)n);
    size_t held, prev = r->len;
    r->len += (size_t)n;
    int64_t cut = dsv41_stop_find(r->text, r->len, prev, (const char *const *)o->stops.v, o->stops.n, &held);
    if (cut >= 0) r->len = (size_t)cut;
    size_t safe = r->len - held;
    if (safe > r->printed) fwrite(r->text + r->printed, 1, safe - r->printed, stdout), r->printed = safe;
    fflush(stdout);
    return cut >= 0 || r->taken >= r->limit ? TAKE_FEED : TAKE_ON;
}

/* The dsv41_pick_fn of a reply: the sampler's pick (penalties, then a draw), taken into the
 * reply; a token that ends it ends the speculative block there too, so the session feeds
 * exactly what one-token decoding feeds. */
static int32_t pick(void *ctx, float *logits, const int32_t *history, int32_t n, int *last) {
    reply_state *r = ctx;
    int done = 0; /* a grammar that is complete with nothing to follow ends the reply after this token */
    int32_t tok = r->cp.constraint ? dsv41_constraint_pick(&r->cp, logits, history, n, &done)
                                   : dsv41_sample_pick(r->c->smp, logits, history, n, NULL);
    if (tok < 0 || (r->end = take(r, tok, n)) == TAKE_ERROR) return -1;
    if (done && r->end == TAKE_ON) r->end = TAKE_FEED;
    *last = r->end != TAKE_ON;
    return tok;
}

/* One speculative round of a reply under a grammar: dsv41_session_speculate's round, with the
 * block cut before the first draft the grammar forbids. No pick could keep that draft, so
 * verifying its rows (and those after it) would cost forward work for nothing; the tokens are
 * the same either way. next is the token picked from the session's last logits (not fed);
 * returns the token picked after the round's last kept row (not fed), or -1. */
static int32_t round_constrained(chat_state *c, reply_state *r, int32_t next, int32_t nd, dsv41_draft_policy *policy) {
    int32_t ids[65], proposed, kept = -1, after = -1, pos = dsv41_session_pos(c->s); /* --draft is at most 64 */
    int32_t n = dsv41_session_propose(c->s, next, nd, policy, ids, &proposed);
    if (n < 0) return -1;
    n = 1 + dsv41_constraint_drafts(r->cp.constraint, ids + 1, n - 1);
    if (n > 1 && (kept = dsv41_session_verify(c->s, ids, n, pick, r, &after)) < 0) {
        if (dsv41_session_pos(c->s) != pos) return -1; /* a pick failed after the verify moved the session */
        proposed = 0;
    }
    if (kept < 0) { /* no block to verify: the anchor alone, then the pick from its logits */
        int last = 0;
        if (dsv41_session_forward(c->s, &next, 1, c->logits, NULL)) return -1;
        if ((after = pick(r, c->logits, c->hist, dsv41_session_pos(c->s), &last)) < 0) return -1;
        kept = 0;
    }
    dsv41_draft_policy_record(policy, proposed, kept);
    return after;
}

/* Samples until EOS, a stop string, the limit, the context or Ctrl-C; streams the text. With
 * --draft the tokens come by speculative rounds, the same tokens. Returns 1 when the reply ended
 * with EOS (which is not fed: the next turn's text closes the reply), 0 when it was cut, -1 on
 * error. */
static int reply(chat_state *c, const gen_opts *o) {
    reply_state r = {.c = c, .o = o, .limit = o->n_new >= 0 ? o->n_new : (int64_t)c->ctx, .cp = {NULL, c->smp}};
    int32_t *out = o->draft ? malloc((size_t)(o->draft + 1) * sizeof *out) : NULL, next = -1; /* next: picked, not fed */
    int rc = o->draft && !out ? fail("out of memory") : 0, last = 0;
    if (rc == 0 && c->grammar && !(r.cp.constraint = dsv41_constraint_new(c->grammar, &c->eos, c->eos >= 0, c->think_end)))
        rc = fail(dsv41_error());
    dsv41_draft_policy policy = o->policy; /* each reply starts without a pause */
    double t0 = now_s();
    while (rc == 0) {
        int32_t pos = dsv41_session_pos(c->s);
        if (cli_signal) {
            if (next < 0) break;
            if (r.end == TAKE_ON) r.end = TAKE_FEED;
        }
        if (next < 0 && r.taken >= r.limit) break;
        if (next < 0 && (next = pick(&r, c->logits, c->hist, pos, &last)) < 0) { rc = fail(dsv41_error()); break; }
        if (r.end == TAKE_DROP) break;
        int64_t nd = r.end == TAKE_ON ? o->draft : 0;
        nd = nd < r.limit - r.taken ? nd : r.limit - r.taken;
        nd = nd < c->ctx - pos - 2 ? nd : c->ctx - pos - 2;
        if (nd > 0 && r.cp.constraint) { /* the same, with the block cut to what the grammar allows */
            if ((next = round_constrained(c, &r, next, (int32_t)nd, &policy)) < 0) {
                rc = r.end == TAKE_ERROR ? fail("out of memory") : fail(dsv41_error());
                break;
            }
            continue;
        }
        if (nd > 0) { /* feeds next and the drafts kept; picks the token after them */
            int32_t got = dsv41_session_speculate(c->s, next, (int32_t)nd, &policy, pick, &r, out, NULL);
            if (got < 0) { rc = r.end == TAKE_ERROR ? fail("out of memory") : fail(dsv41_error()); break; }
            next = out[got - 1]; /* picked from the round's last kept row: c->logits are not read for it */
            continue;
        }
        /* a Ctrl-C never stops this step: a one-token append has no point between tokens to stop
         * at (dsv41_session_cancel), so the token shown is always the token the session holds */
        if (dsv41_session_forward(c->s, &next, 1, c->logits, NULL)) { rc = fail(dsv41_error()); break; }
        next = -1;
        if (r.end != TAKE_ON) break;
    }
    free(out);
    dsv41_constraint_free(r.cp.constraint);
    if (rc) { free(r.text); return -1; }
    if (r.len > r.printed) fwrite(r.text + r.printed, 1, r.len - r.printed, stdout); /* what could have begun a stop string */
    if (r.st.n > 0) fputs("\xEF\xBF\xBD", stdout); /* a character the reply cut */
    printf("\n");
    fflush(stdout);
    c->gen_s += now_s() - t0;
    free(r.text);
    return r.eos;
}

static void stats(const chat_state *c) {
    fprintf(stderr, "prompt: %d tokens, %.1f tok/s | generated: %d tokens, %.1f tok/s\n", c->prompt_tokens,
            c->prompt_s > 0 ? c->prompt_tokens / c->prompt_s : 0.0, c->gen_tokens,
            c->gen_s > 0 ? c->gen_tokens / c->gen_s : 0.0);
}

static char *read_file(const char *path);

/* The grammar of --grammar FILE, or of the JSON Schema in --json-schema FILE; NULL after a
 * one-line message (the file, or the problem and where it is). */
static dsv41_grammar *load_grammar(const dsv41_tokenizer *tk, const gen_opts *o) {
    const char *path = o->grammar ? o->grammar : o->json_schema;
    char *text = read_file(path), *gtext = NULL;
    if (!text) return NULL;
    if (o->json_schema && !(gtext = dsv41_schema_grammar(text, strlen(text), NULL))) {
        fprintf(stderr, "dsv41: %s: %s\n", path, dsv41_error());
        free(text);
        return NULL;
    }
    const char *g = gtext ? gtext : text;
    dsv41_grammar *gr = dsv41_grammar_new(tk, g, strlen(g));
    if (!gr) fprintf(stderr, "dsv41: %s: %s\n", path, dsv41_error());
    free(text);
    free(gtext);
    return gr;
}

static int open_chat(chat_state *c, const gen_opts *o) {
    memset(c, 0, sizeof *c);
    progress_on();
    /* the tokenizer and a grammar first: a bad schema fails before minutes of loading */
    if (!(c->tk = dsv41_tokenizer_load_dir(o->dir))) return fail(dsv41_error());
    c->eos = dsv41_tokenizer_eos(c->tk);
    c->think_end = o->effort > 0 ? dsv41_tokenizer_find(c->tk, "</think>") : -1;
    if ((o->json_schema || o->grammar) && !(c->grammar = load_grammar(c->tk, o))) return 1;
    c->m = dsv41_model_load(o->dir);
    dsv41_set_progress(NULL, NULL);
    if (!c->m) return fail(dsv41_error());
    c->V = dsv41_model_vocab_size(c->m);
    if (dsv41_tokenizer_n_vocab(c->tk) > c->V) {
        fprintf(stderr, "dsv41: %s/tokenizer.json has %d tokens but the model only %d\n", o->dir,
                dsv41_tokenizer_n_vocab(c->tk), c->V);
        return 1;
    }
    c->ctx = dsv41_model_max_seq_len(c->m);
    if (o->ctx && o->ctx < c->ctx) c->ctx = o->ctx;
    c->logits = malloc((size_t)c->V * sizeof *c->logits);
    c->hist = malloc((size_t)c->ctx * sizeof *c->hist);
    if (!(c->smp = dsv41_sampler_new(&o->sp, c->V))) return fail(dsv41_error());
    if (!(c->s = dsv41_session_new(c->m)) || !c->logits || !c->hist) return fail("out of memory");
    cli_cancel_target(c->s);
    return 0;
}

static void close_chat(chat_state *c) {
    cli_cancel_target(NULL);
    dsv41_grammar_free(c->grammar);
    free(c->logits);
    free(c->hist);
    dsv41_sampler_free(c->smp);
    dsv41_session_free(c->s);
    dsv41_tokenizer_free(c->tk);
    dsv41_model_free(c->m);
}

/* The whole file at path, NUL-terminated, or NULL after a message. */
static char *read_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { fprintf(stderr, "dsv41: run: %s: %s\n", path, strerror(errno)); return NULL; }
    char *buf = NULL;
    size_t n = 0, cap = 0, got;
    do {
        if (n + 4096 > cap) {
            char *nb = realloc(buf, cap = 2 * cap + 4096);
            if (!nb) { free(buf); fclose(f); fail("out of memory"); return NULL; }
            buf = nb;
        }
        n += got = fread(buf + n, 1, cap - n - 1, f);
    } while (got > 0);
    int bad = ferror(f);
    fclose(f);
    if (bad) { free(buf); fprintf(stderr, "dsv41: run: %s: read error\n", path); return NULL; }
    buf[n] = 0;
    return buf;
}

/* 1 when the user's text is valid UTF-8; else 0 after a message naming the offset in it (not
 * in the rendered prompt, which the user never saw). */
static int checked_utf8(chat_state *c, const char *what, const char *text) {
    if (dsv41_tokenize(c->tk, text, strlen(text), 0, NULL, 0) >= 0) return 1;
    fprintf(stderr, "dsv41: the %s text: %s\n", what, dsv41_error());
    return 0;
}

int run_text(const gen_opts *o) {
    char *file_text = o->file ? read_file(o->file) : NULL;
    if (o->file && !file_text) return 1;
    chat_state c;
    if (open_chat(&c, o)) { close_chat(&c); free(file_text); return 1; }
    const char *user = file_text ? file_text : o->prompt, *msgs[2] = {"user", user};
    char *text = NULL;
    int rc = 0;
    if (!checked_utf8(&c, o->file ? "-f" : "-p", user) || (o->system && !checked_utf8(&c, "--system", o->system))) rc = 1;
    else if (!(text = render(o, msgs, 1))) rc = fail(dsv41_error());
    else rc = feed_text(&c, text);
    free(text);
    free(file_text);
    if (rc == 0) gen_note_seed(o);
    if (rc == 0 && !cli_signal && reply(&c, o) < 0) rc = 1;
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

/* One line of input without its newline (malloc'd), or NULL at the end of input. */
static char *next_line(int tty, const char *prompt) {
    if (tty) {
        char *line = readline(prompt);
        if (line && *line) add_history(line);
        return line;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) { free(line); return NULL; }
    if (n > 0 && line[n - 1] == '\n') line[n - 1] = 0;
    return line;
}

/* Appends b and a newline to *a (which may be NULL); returns 0 or -1. */
static int append_line(char **a, const char *b) {
    size_t an = *a ? strlen(*a) : 0, bn = strlen(b);
    char *r = realloc(*a, an + bn + 2);
    if (!r) return -1;
    memcpy(r + an, b, bn);
    r[an + bn] = '\n';
    r[an + bn + 1] = 0;
    *a = r;
    return 0;
}

/* A message: one line; lines ending in a backslash go on; a line of """ opens a block up to
 * the next """. Returns NULL at the end of input. */
static char *read_message(int tty) {
    char *line = next_line(tty, "> ");
    if (!line) return NULL;
    int block = !strcmp(line, "\"\"\""), cont = !block && *line && line[strlen(line) - 1] == '\\';
    if (!block && !cont) return line;
    char *msg = NULL;
    if (cont) { line[strlen(line) - 1] = 0; append_line(&msg, line); }
    free(line);
    while ((line = next_line(tty, ". "))) {
        int end = block ? !strcmp(line, "\"\"\"") : !(*line && line[strlen(line) - 1] == '\\');
        if (block && end) { free(line); break; }
        if (!block && !end) line[strlen(line) - 1] = 0;
        if (append_line(&msg, line)) { free(line); break; }
        free(line);
        if (end) break;
    }
    if (msg && *msg && msg[strlen(msg) - 1] == '\n') msg[strlen(msg) - 1] = 0;
    return msg ? msg : strdup("");
}

static const char CHAT_HELP[] =
    "/help          this text\n"
    "/reset         start a new conversation\n"
    "/save NAME     save the conversation to the file NAME\n"
    "/load NAME     continue the conversation saved in the file NAME\n"
    "/quit          leave (so does Ctrl-D)\n"
    "a line ending in \\ continues on the next line; \"\"\" on its own line opens and closes a block\n"
    "Ctrl-C stops a reply\n";

/* A new empty session in place of the conversation's. Returns 0, or 1 after a message. */
static int restart(chat_state *c) {
    cli_cancel_target(NULL); /* the handler must never see the session being freed */
    dsv41_session_free(c->s);
    c->s = dsv41_session_new(c->m);
    if (!c->s) return fail(dsv41_error());
    cli_cancel_target(c->s);
    return 0;
}

/* What a saved conversation keeps beside the session, as the file's own data: a tag and the
 * sampler's stream state (little-endian), so that a loaded conversation samples the next reply
 * as the original would. The session holds the rest: every id fed (the penalties' history) and
 * the last logits; the text of the turns is not needed, since a turn only appends. */
#define SAVE_TAG "dsv41cht"
enum { SAVE_BYTES = 16 };

/* The argument of `/cmd ARG`, or NULL when line is not that command ("" when ARG is missing). */
static const char *command_arg(const char *line, const char *cmd) {
    size_t n = strlen(cmd);
    if (strncmp(line, cmd, n) || (line[n] && line[n] != ' ')) return NULL;
    for (line += n; *line == ' ';) line++;
    return line;
}

static void save_chat(chat_state *c, const char *name) {
    uint8_t data[SAVE_BYTES];
    uint64_t st = dsv41_sampler_state(c->smp);
    memcpy(data, SAVE_TAG, 8);
    for (int i = 0; i < 8; i++) data[8 + i] = (uint8_t)(st >> 8 * i);
    if (dsv41_session_save_data(c->s, name, data, sizeof data)) fail(dsv41_error());
    else fprintf(stderr, "(saved %d tokens to %s)\n", dsv41_session_pos(c->s), name);
}

/* Loads into a new session and takes it only when all of it fits this chat: on any error the
 * conversation goes on as it was. Returns 1 when loaded. */
static int load_chat(chat_state *c, const char *name) {
    dsv41_session *s = dsv41_session_new(c->m);
    void *data = NULL;
    size_t n = 0;
    int32_t pos = 0, ok = 0;
    if (!s || dsv41_session_load_data(s, name, &data, &n)) fail(dsv41_error());
    else if (n != SAVE_BYTES || memcmp(data, SAVE_TAG, 8)) fprintf(stderr, "dsv41: %s: not saved by dsv41 chat\n", name);
    else if ((pos = dsv41_session_pos(s)) >= c->ctx)
        fprintf(stderr, "dsv41: %s: holds %d tokens; the context here is %d\n", name, pos, c->ctx);
    else if (pos > 0 && !dsv41_session_logits(s)) fprintf(stderr, "dsv41: %s: has no logits to continue from\n", name);
    else ok = 1;
    if (!ok) { free(data); dsv41_session_free(s); return 0; }
    uint64_t st = 0;
    for (int i = 7; i >= 0; i--) st = st << 8 | ((const uint8_t *)data)[8 + i];
    free(data);
    dsv41_sampler_set_state(c->smp, st);
    int32_t n_ids;
    const int32_t *ids = dsv41_session_tokens(s, &n_ids);
    memcpy(c->hist, ids, (size_t)n_ids * sizeof *c->hist);
    if (pos > 0) memcpy(c->logits, dsv41_session_logits(s), (size_t)c->V * sizeof *c->logits);
    cli_cancel_target(NULL); /* the handler must never see the session being freed */
    dsv41_session_free(c->s);
    c->s = s;
    cli_cancel_target(c->s);
    fprintf(stderr, "(loaded %d tokens from %s)\n", pos, name);
    return 1;
}

int cmd_chat(int argc, char **argv) {
    gen_opts o;
    int rc = gen_parse(1, argc, argv, &o);
    if (rc >= 0) return rc;
    rc = 0;
    chat_state c;
    cli_catch_signals(0);
    if (open_chat(&c, &o)) { close_chat(&c); return 1; }
    gen_note_seed(&o);
    int tty = isatty(0), started = 0;
    if (tty) fprintf(stderr, "dsv41 chat: /help lists the commands, /quit leaves, Ctrl-C stops a reply\n");
    for (char *line; (cli_signal = 0, line = read_message(tty)); free(line)) {
        if (!strcmp(line, "/quit")) { free(line); break; }
        if (!strcmp(line, "/help")) { fputs(CHAT_HELP, stderr); continue; }
        const char *save = command_arg(line, "/save"), *load = command_arg(line, "/load"), *arg = save ? save : load;
        if (arg && !*arg) { fprintf(stderr, "usage: %s NAME\n", save ? "/save" : "/load"); continue; }
        if (save) { save_chat(&c, save); continue; }
        if (load) { if (load_chat(&c, load)) started = dsv41_session_pos(c.s) > 0; continue; }
        if (!strcmp(line, "/reset")) {
            if (restart(&c)) { rc = 1; free(line); break; }
            started = 0;
            fprintf(stderr, "(conversation cleared)\n");
            continue;
        }
        if (line[0] == '/' && line[1] && !strchr(line, ' ') && !strchr(line, '\n')) {
            fprintf(stderr, "unknown command %s (/help lists them)\n", line);
            continue;
        }
        if (!*line) continue;
        const char *msgs[2] = {"user", line};
        char *text = started ? turn_text(&o, line) : render(&o, msgs, 1);
        if (!text) { fail(dsv41_error()); continue; }
        int frc = feed_text(&c, text);
        free(text);
        if (frc == 2 && started) { /* part of the turn is in the caches: the conversation cannot go on */
            if (restart(&c)) { rc = 1; free(line); break; }
            started = 0;
            fprintf(stderr, "(interrupted: conversation cleared)\n");
        }
        if (frc) continue;
        started = 1;
        if (reply(&c, &o) < 0) { rc = 1; free(line); break; }
    }
    stats(&c);
    close_chat(&c);
    return rc == 0 && cli_signal ? 130 : rc; /* Ctrl-C at the prompt leaves as a signal would */
}
