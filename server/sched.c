/* sched.c - slots, the request queue and the scheduler thread (see sched.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "sched.h"

typedef struct {
    dsv41_session *session; /* the slot's sequence state; NULL until first used */
    int32_t *ids;           /* [n_ids] token ids the session holds (kept for prompt reuse) */
    int32_t n_ids, cap_ids;
    job *job;               /* the request being served, NULL when free */
    int prefilled;          /* the job's prompt is in the session */
    dsv41_sampler *sampler; /* the job's sampler, seeded per request */
    float *logits;          /* [vocab] logits of the last fed token */
    dsv41_utf8_stream utf8; /* the job's characters split across tokens */
} slot;

struct sched {
    dsv41_model *model;
    const dsv41_tokenizer *tok;
    int32_t vocab, eos, ctx;
    slot *slots;               /* [n_slots] */
    int32_t n_slots;
    job *head, *tail;          /* waiting requests, oldest first */
    int32_t n_waiting, max_waiting;
    pthread_mutex_t mu;        /* guards the queue, every job's progress, slot->job, the counters */
    pthread_cond_t wake;       /* a request arrived, or stop */
    pthread_t thread;
    int stopping;
    uint64_t prompt_tokens, gen_tokens; /* totals since start */
    double prefill_s, decode_s;         /* seconds spent in prefill and in decode steps */
};

double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

job *job_new(const int32_t *prompt, int32_t n_prompt) {
    job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->prompt = malloc((size_t)(n_prompt > 0 ? n_prompt : 1) * sizeof *j->prompt);
    if (!j->prompt) {
        free(j);
        return NULL;
    }
    if (n_prompt > 0) memcpy(j->prompt, prompt, (size_t)n_prompt * sizeof *prompt);
    j->n_prompt = n_prompt;
    j->sp = (dsv41_sampler_params){1.0f, 0, 1.0f, 0.0f, 0};
    atomic_init(&j->cancel, 0);
    pthread_cond_init(&j->changed, NULL);
    return j;
}

void job_free(job *j) {
    if (!j) return;
    free(j->prompt);
    for (int i = 0; i < j->n_stops; i++) free(j->stops[i]);
    jb_free(&j->text);
    free(j->marks);
    pthread_cond_destroy(&j->changed);
    free(j);
}

/* With the lock held: drops one reference. */
static void unref(job *j) {
    if (--j->refs == 0) job_free(j);
}

void sched_lock(sched *s) { pthread_mutex_lock(&s->mu); }
void sched_unlock(sched *s) { pthread_mutex_unlock(&s->mu); }

void sched_wait(sched *s, job *j, int ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    pthread_cond_timedwait(&j->changed, &s->mu, &ts);
}

int sched_submit(sched *s, job *j) {
    sched_lock(s);
    int full = s->stopping || s->n_waiting >= s->max_waiting;
    if (!full) {
        j->refs = 2;
        j->t_submit = now_s();
        j->next = NULL;
        if (s->tail) s->tail->next = j;
        else s->head = j;
        s->tail = j;
        s->n_waiting++;
        pthread_cond_signal(&s->wake);
    }
    sched_unlock(s);
    return full ? -1 : 0;
}

void sched_release(sched *s, job *j) {
    atomic_store(&j->cancel, 1);
    sched_lock(s);
    unref(j);
    sched_unlock(s);
}

/* With the lock held: ends the slot's job and frees the slot. */
static void finish(slot *sl, job_end end, const char *error) {
    job *j = sl->job;
    if (sl->utf8.n > 0 && end != END_CANCEL) jb_put(&j->text, "\xEF\xBF\xBD", 3); /* a cut character */
    j->committed = j->text.n;
    j->end = end;
    if (error) snprintf(j->error, sizeof j->error, "%s", error);
    j->t_end = now_s();
    pthread_cond_broadcast(&j->changed);
    dsv41_sampler_free(sl->sampler);
    sl->sampler = NULL;
    sl->job = NULL;
    sl->prefilled = 0;
    unref(j);
}

/* With the lock held: the waiting jobs go to free slots, oldest first. */
static void assign(sched *s) {
    for (int32_t i = 0; i < s->n_slots && s->head; i++) {
        slot *sl = &s->slots[i];
        if (sl->job) continue;
        job *j = s->head;
        s->head = j->next;
        if (!s->head) s->tail = NULL;
        s->n_waiting--;
        j->t_start = now_s();
        sl->job = j;
        sl->prefilled = 0;
        memset(&sl->utf8, 0, sizeof sl->utf8);
    }
}

/* How many trailing bytes of text could still begin one of the stop strings. */
static size_t stop_tail(const job *j) {
    size_t keep = 0, n = j->text.n;
    for (int i = 0; i < j->n_stops; i++) {
        size_t sl = strlen(j->stops[i]);
        for (size_t k = sl - 1; k > keep; k--)
            if (k <= n && !memcmp(j->text.p + n - k, j->stops[i], k)) {
                keep = k;
                break;
            }
    }
    return keep;
}

/* With the lock held: appends a token's text; returns 1 when a stop string ended the reply. */
static int append(job *j, const char *piece, size_t n) {
    size_t from = j->text.n;
    jb_put(&j->text, piece, n);
    j->n_gen++;
    if (j->n_marks == j->cap_marks) {
        int32_t cap = j->cap_marks ? 2 * j->cap_marks : 64;
        size_t *nm = realloc(j->marks, (size_t)cap * sizeof *nm);
        if (!nm) return 0; /* the marks only split the stream into chunks */
        j->marks = nm;
        j->cap_marks = cap;
    }
    j->marks[j->n_marks++] = j->text.n;
    for (int i = 0; i < j->n_stops; i++) {
        size_t sl = strlen(j->stops[i]), start = from >= sl ? from - sl + 1 : 0;
        char *hit = j->text.n ? memmem(j->text.p + start, j->text.n - start, j->stops[i], sl) : NULL;
        if (hit) {
            j->text.n = (size_t)(hit - j->text.p);
            j->text.p[j->text.n] = 0;
            return 1;
        }
    }
    j->committed = j->text.n - stop_tail(j);
    return 0;
}

/* Records the ids the slot's session now holds. */
static int keep_ids(slot *sl, const int32_t *ids, int32_t n) {
    if (sl->n_ids + n > sl->cap_ids) {
        int32_t cap = sl->cap_ids ? sl->cap_ids : 256;
        while (cap < sl->n_ids + n) cap *= 2;
        int32_t *ni = realloc(sl->ids, (size_t)cap * sizeof *ni);
        if (!ni) return -1;
        sl->ids = ni;
        sl->cap_ids = cap;
    }
    memcpy(sl->ids + sl->n_ids, ids, (size_t)n * sizeof *ids);
    sl->n_ids += n;
    return 0;
}

/* A fresh session with the job's prompt. (Reusing a slot's cached prefix is the prompt cache's
 * business: a prefill and an append of the same tokens are not the same computation.) */
static void prefill(sched *s, slot *sl) {
    job *j = sl->job;
    double t0 = now_s();
    const char *err = NULL;
    if (!sl->session || dsv41_session_pos(sl->session) > 0) {
        dsv41_session_free(sl->session);
        sl->session = dsv41_session_new(s->model);
        sl->n_ids = 0;
    }
    if (!sl->session) err = dsv41_error();
    else if (!(sl->sampler = dsv41_sampler_new(&j->sp, s->vocab))) err = dsv41_error();
    else if (dsv41_session_forward(sl->session, j->prompt, j->n_prompt, sl->logits, NULL)) err = dsv41_error();
    else if (keep_ids(sl, j->prompt, j->n_prompt)) err = "out of memory";
    sched_lock(s);
    if (err) finish(sl, END_ERROR, err);
    else {
        sl->prefilled = 1;
        s->prompt_tokens += (uint64_t)j->n_prompt;
        s->prefill_s += now_s() - t0;
    }
    sched_unlock(s);
}

/* One token: sample, hand its text to the job, and feed it unless the reply ends here. */
static void decode(sched *s, slot *sl) {
    job *j = sl->job;
    double t0 = now_s();
    int32_t id = dsv41_sample(sl->sampler, sl->logits);
    if (id == s->eos) {
        sched_lock(s);
        finish(sl, END_STOP, NULL);
        sched_unlock(s);
        return;
    }
    char piece[4096];
    int64_t n = dsv41_detokenize(s->tok, &sl->utf8, id, piece, sizeof piece);
    sched_lock(s);
    int stop = append(j, piece, n > 0 ? (size_t)n : 0);
    pthread_cond_broadcast(&j->changed);
    int more = !stop && j->n_gen < j->max_tokens && dsv41_session_pos(sl->session) + 1 < s->ctx;
    if (!more) finish(sl, stop ? END_STOP : END_LENGTH, NULL);
    sched_unlock(s);
    if (!more) return;
    const char *err = NULL;
    if (dsv41_session_forward(sl->session, &id, 1, sl->logits, NULL)) err = dsv41_error();
    else if (keep_ids(sl, &id, 1)) err = "out of memory";
    sched_lock(s);
    if (err) finish(sl, END_ERROR, err);
    s->gen_tokens++;
    s->decode_s += now_s() - t0;
    sched_unlock(s);
}

static void *run(void *arg) {
    sched *s = arg;
    sched_lock(s);
    for (;;) {
        assign(s);
        int busy = 0;
        for (int32_t i = 0; i < s->n_slots; i++) busy |= s->slots[i].job != NULL;
        if (!busy) {
            if (s->stopping) break;
            pthread_cond_wait(&s->wake, &s->mu);
            continue;
        }
        sched_unlock(s);
        /* slot->job changes only on this thread, so it is read here without the lock */
        for (int32_t i = 0; i < s->n_slots; i++) {
            slot *sl = &s->slots[i];
            if (!sl->job) continue;
            if (atomic_load(&sl->job->cancel)) {
                sched_lock(s);
                finish(sl, END_CANCEL, NULL);
                sched_unlock(s);
            } else if (!sl->prefilled) prefill(s, sl);
            else decode(s, sl);
        }
        sched_lock(s);
    }
    sched_unlock(s);
    return NULL;
}

sched *sched_start(dsv41_model *m, const dsv41_tokenizer *tk, int32_t n_slots, int32_t max_waiting, int32_t ctx) {
    sched *s = calloc(1, sizeof *s);
    if (!s || !(s->slots = calloc((size_t)n_slots, sizeof *s->slots))) {
        free(s);
        fprintf(stderr, "dsv41: serve: out of memory\n");
        return NULL;
    }
    s->model = m;
    s->tok = tk;
    s->vocab = dsv41_model_vocab_size(m);
    s->eos = dsv41_tokenizer_find(tk, "<｜end▁of▁sentence｜>");
    if (s->eos < 0) s->eos = 1;
    s->ctx = ctx;
    s->n_slots = n_slots;
    s->max_waiting = max_waiting;
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    int ok = 1;
    for (int32_t i = 0; i < n_slots; i++) ok &= (s->slots[i].logits = malloc((size_t)s->vocab * sizeof(float))) != NULL;
    int rc = ok ? pthread_create(&s->thread, NULL, run, s) : ENOMEM;
    if (rc) {
        fprintf(stderr, "dsv41: serve: cannot start the scheduler: %s\n", strerror(rc));
        for (int32_t i = 0; i < n_slots; i++) free(s->slots[i].logits);
        free(s->slots);
        free(s);
        return NULL;
    }
    return s;
}

void sched_shutdown(sched *s) {
    sched_lock(s);
    s->stopping = 1;
    while (s->head) { /* waiting jobs end without a slot */
        job *j = s->head;
        s->head = j->next;
        j->end = END_CANCEL;
        j->t_end = now_s();
        pthread_cond_broadcast(&j->changed);
        unref(j);
    }
    s->tail = NULL;
    s->n_waiting = 0;
    for (int32_t i = 0; i < s->n_slots; i++)
        if (s->slots[i].job) atomic_store(&s->slots[i].job->cancel, 1);
    pthread_cond_signal(&s->wake);
    sched_unlock(s);
}

void sched_stop(sched *s) {
    sched_shutdown(s);
    pthread_join(s->thread, NULL);
    for (int32_t i = 0; i < s->n_slots; i++) {
        dsv41_session_free(s->slots[i].session);
        free(s->slots[i].ids);
        free(s->slots[i].logits);
    }
    free(s->slots);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    free(s);
}

void sched_metrics(sched *s, jbuf *out) {
    sched_lock(s);
    int32_t busy = 0;
    for (int32_t i = 0; i < s->n_slots; i++) busy += s->slots[i].job != NULL;
    jb_printf(out,
              "# HELP dsv41_prompt_tokens_total Prompt tokens prefilled.\n# TYPE dsv41_prompt_tokens_total counter\n"
              "dsv41_prompt_tokens_total %llu\n"
              "# HELP dsv41_generated_tokens_total Tokens generated.\n# TYPE dsv41_generated_tokens_total counter\n"
              "dsv41_generated_tokens_total %llu\n"
              "# HELP dsv41_prefill_tokens_per_second Prompt tokens per second of prefill, since start.\n"
              "# TYPE dsv41_prefill_tokens_per_second gauge\ndsv41_prefill_tokens_per_second %.3f\n"
              "# HELP dsv41_decode_tokens_per_second Generated tokens per second of decode, since start.\n"
              "# TYPE dsv41_decode_tokens_per_second gauge\ndsv41_decode_tokens_per_second %.3f\n"
              "# HELP dsv41_requests_waiting Requests waiting for a slot.\n# TYPE dsv41_requests_waiting gauge\n"
              "dsv41_requests_waiting %d\n"
              "# HELP dsv41_slots_busy Slots serving a request.\n# TYPE dsv41_slots_busy gauge\ndsv41_slots_busy %d\n"
              "# HELP dsv41_slots Slots in all.\n# TYPE dsv41_slots gauge\ndsv41_slots %d\n",
              (unsigned long long)s->prompt_tokens, (unsigned long long)s->gen_tokens,
              s->prefill_s > 0 ? (double)s->prompt_tokens / s->prefill_s : 0.0,
              s->decode_s > 0 ? (double)s->gen_tokens / s->decode_s : 0.0, s->n_waiting, busy, s->n_slots);
    sched_unlock(s);
}
