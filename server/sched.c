/* sched.c - slots, their prompt cache, the request queue and the scheduler thread (see sched.h).
 *
 * The prompt cache rests on two facts of the library. A session at position 0 takes a prefill
 * of any length; a session further on takes one token per call, and feeding tokens one at a
 * time is the same computation whether they were sampled or come from a prompt. So a slot
 * whose tokens are a prefix of a new prompt continues with the rest one token per step, and
 * a snapshot of an earlier state plus a replay of the tokens since gives exactly the state the
 * slot would have had. A prefill is not the same computation as those steps, which is why a
 * prompt equal to one the slot took before restores that prompt's snapshot (state and logits)
 * instead of replaying anything: it gets exactly the reply it got then. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "dsv41_dev.h"
#include "sched.h"

typedef struct {
    dsv41_session *session; /* the state at the end of an earlier prompt; NULL or position 0: none */
    uint64_t used;          /* the tick it was taken or last restored: the least recent goes first */
    int cold;               /* made by a prefill of the whole prompt (not by appending to a cache) */
} snapshot;

typedef struct {
    dsv41_session *session; /* the live state; NULL until first used */
    snapshot *snaps;        /* [n_snaps of sched] */
    job *job;               /* the request being served, NULL when free */
    int started;            /* the job's cache reuse is set up (scheduler thread only) */
    int held;               /* a slot action has the slot: no job goes to it (under the lock) */
    int32_t n_tokens;       /* tokens the live session holds, for /slots (under the lock) */
    uint64_t used;          /* the tick it last took a job: the least recent goes first */
    dsv41_sampler *sampler; /* the job's sampler, seeded per request */
    dsv41_constraint *constraint; /* the job's grammar's state, NULL: a free reply */
    float *logits;          /* [vocab] logits of the last token a prompt or a plain step fed */
    dsv41_utf8_stream utf8; /* the job's characters split across tokens */
    int32_t next;           /* the sampled token this step feeds */
    _Atomic int32_t prefill_layers; /* layers a long prefill running alone has done, -1: none (for /slots) */
    int picked;             /* next was picked (and handed to the job) by a speculative round */
    int32_t thought;        /* reasoning tokens of a job with a thinking budget, -1: none or ended */
    dsv41_draft_policy policy; /* the job's speculative rounds: their confidence cut and pause */
} slot;

/* A speculative round's picks: each is the slot's next token, drawn as sample_next draws it;
 * the one that ends the reply ends the block, so the session feeds what plain steps feed. */
typedef struct {
    sched *s;
    slot *sl;
    job_end end; /* how the picks ended the job, END_NONE: they did not */
} round_ctx;

struct sched {
    dsv41_model *model;
    const dsv41_tokenizer *tok;
    int32_t vocab, eos, ctx;
    int32_t unthink;           /* the id of </think>, which ends a reply's reasoning, -1: none */
    int32_t draft;             /* drafts a speculative round, 0: off */
    dsv41_draft_policy policy; /* what each reply's speculative rounds begin with */
    slot *slots;               /* [n_slots] */
    int32_t n_slots, n_snaps;  /* snapshots per slot */
    job *head, *tail;          /* waiting requests, oldest first */
    int32_t n_waiting, max_waiting;
    pthread_mutex_t mu;        /* guards the queue, every job's progress, slot->job and ->held, the counters */
    pthread_t mu_owner;        /* the thread holding mu, while mu_held (for the assertions) */
    int mu_held;               /* written by mu's holder only */
    pthread_t runner;          /* the scheduler thread, which alone changes slot->job and ->started */
    pthread_cond_t wake;       /* a request arrived, a slot action ended, or stop */
    pthread_t thread;
    int stopping;
    atomic_uint_fast64_t tick; /* ages of slots and snapshots */
    /* one step's call: [n_slots] each */
    dsv41_session **b_sess;
    const int32_t **b_ids;
    int32_t *b_n;
    float **b_logits;
    slot **b_slot;
    slot **spec;               /* [n_slots] the step's slots that decode by a speculative round */
    int32_t *r_ids;            /* [n_slots][draft + 1] each round's anchor and drafts */
    int32_t *r_proposed, *r_kept; /* [n_slots] each round's drafts proposed and kept */
    round_ctx *r_pick;         /* [n_slots] each round's picks */
    void **r_ctx;              /* [n_slots] &r_pick[i], as dsv41_batch_verify takes them */
    /* counters since start */
    uint64_t prompt_tokens, gen_tokens, cached_tokens; /* prompt tokens computed, generated, reused */
    uint64_t cold_tokens;                              /* of the prompt tokens, those of cold prefills */
    uint64_t steps, batched_tokens;                    /* forward calls, tokens they fed */
    int32_t last_batch;                                /* sessions in the latest step */
    uint64_t drafted, accepted;                        /* speculative drafts verified, and kept */
    double prefill_s, decode_s; /* seconds in steps with a cold prefill, and in the others */
};

/* With the lock held: drops one reference. */
static void unref(job *j) {
    if (--j->refs == 0) job_free(j);
}

/* The lock records its owner, so that the functions that need it held can assert it; a wait
 * on a condition gives the lock up meanwhile, so the owner is written again when it returns. */
static void own_lock(sched *s) {
    s->mu_owner = pthread_self();
    s->mu_held = 1;
}
static inline int holds_lock(const sched *s) { return s->mu_held && pthread_equal(s->mu_owner, pthread_self()); }
static inline int on_runner(const sched *s) { return pthread_equal(s->runner, pthread_self()); }

void sched_lock(sched *s) {
    pthread_mutex_lock(&s->mu);
    own_lock(s);
}

void sched_unlock(sched *s) {
    DSV41_ASSERT(holds_lock(s));
    s->mu_held = 0;
    pthread_mutex_unlock(&s->mu);
}

void sched_wait(sched *s, job *j, int ms) {
    DSV41_ASSERT(holds_lock(s));
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += (long)ms * 1000000L;
    ts.tv_sec += ts.tv_nsec / 1000000000L;
    ts.tv_nsec %= 1000000000L;
    s->mu_held = 0;
    pthread_cond_timedwait(&j->changed, &s->mu, &ts);
    own_lock(s);
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
    sched_lock(s);
    job_cancel(j);
    unref(j);
    sched_unlock(s);
}

/* With the lock held: ends the slot's job and frees the slot. */
static void finish(sched *s, slot *sl, job_end end, const char *error) {
    DSV41_ASSERT(holds_lock(s) && on_runner(s));
    job *j = sl->job;
    if (sl->utf8.n > 0 && end != END_CANCEL) jb_put(&j->text, "\xEF\xBF\xBD", 3); /* a cut character */
    j->committed = j->text.n;
    j->end = end;
    if (error) snprintf(j->error, sizeof j->error, "%s", error);
    j->t_end = now_s();
    pthread_cond_broadcast(&j->changed);
    dsv41_sampler_free(sl->sampler);
    sl->sampler = NULL;
    dsv41_constraint_free(sl->constraint);
    sl->constraint = NULL;
    sl->job = NULL;
    sl->started = 0;
    unref(j);
}

/* How many of the prompt's n tokens state st stands for: all of its tokens when they are a
 * prefix of the prompt (the whole prompt only when st kept the last token's logits), else 0. */
static int32_t usable(const dsv41_session *st, const int32_t *prompt, int32_t n) {
    int32_t k = 0;
    const int32_t *t = st ? dsv41_session_tokens(st, &k) : NULL;
    if (k == 0 || k > n || memcmp(t, prompt, (size_t)k * sizeof *t)) return 0;
    return k < n || dsv41_session_logits(st) ? k : 0;
}

/* The state of sl that j continues from: -1 for the live session, else a snapshot's index;
 * *k gets the prompt tokens it covers (0: a cold prefill). Of two that cover as much, a cold
 * prefill's snapshot goes before the live session. */
static int source(const sched *s, const slot *sl, const job *j, int32_t *k) {
    int src = -1;
    *k = 0;
    if (!j->cache_prompt) return src;
    *k = usable(sl->session, j->prompt, j->n_prompt);
    for (int32_t i = 0; i < s->n_snaps; i++) {
        int32_t u = usable(sl->snaps[i].session, j->prompt, j->n_prompt);
        if (u > *k || (u > 0 && u == *k && src < 0 && sl->snaps[i].cold)) *k = u, src = (int)i;
    }
    return src;
}

/* With the lock held: the waiting jobs go to free slots, oldest first; each to the slot it
 * names, else to the free slot that covers most of its prompt, else the least recently used
 * one. A job naming a busy slot waits for it and lets later jobs pass. */
static void assign(sched *s) {
    DSV41_ASSERT(holds_lock(s));
    job *prev = NULL;
    for (job *j = s->head, *next; j; j = next) {
        next = j->next;
        int32_t pick = -1, best = -1;
        for (int32_t i = 0; i < s->n_slots; i++) {
            slot *sl = &s->slots[i];
            if (sl->job || sl->held || (j->id_slot >= 0 && j->id_slot != i)) continue;
            int32_t k;
            source(s, sl, j, &k);
            if (k > best || (k == best && sl->used < s->slots[pick].used)) pick = i, best = k;
        }
        if (pick < 0) {
            prev = j;
            continue;
        }
        if (prev) prev->next = next;
        else s->head = next;
        if (s->tail == j) s->tail = prev;
        s->n_waiting--;
        slot *sl = &s->slots[pick];
        j->t_start = now_s();
        j->slot = pick;
        sl->job = j;
        sl->started = 0;
        sl->used = atomic_fetch_add(&s->tick, 1) + 1;
    }
}

/* Keeps the live state, whose prompt just went in, as a snapshot; cold: it came from a prefill
 * of the whole prompt. The same tokens kept already only refresh that snapshot's age, unless
 * this state is a cold prefill's and that one was appended: a prompt's cold state is the one
 * a repeated prompt should restore. Else the least recently used snapshot is replaced. A
 * snapshot that cannot be made is none. */
static void keep_snapshot(sched *s, slot *sl, int cold) {
    DSV41_ASSERT(sl->held || on_runner(s)); /* the slot's owner: a slot action, or the scheduler */
    if (!s->n_snaps) return;
    int32_t n;
    const int32_t *t = dsv41_session_tokens(sl->session, &n);
    snapshot *old = &sl->snaps[0];
    for (int32_t i = 0; i < s->n_snaps; i++) {
        snapshot *sn = &sl->snaps[i];
        int32_t m = 0;
        const int32_t *u = sn->session ? dsv41_session_tokens(sn->session, &m) : NULL;
        if (m == n && !memcmp(u, t, (size_t)n * sizeof *t)) {
            if (sn->cold || !cold) {
                sn->used = atomic_fetch_add(&s->tick, 1) + 1;
                return;
            }
            old = sn;
            break;
        }
        if (sn->used < old->used) old = sn;
    }
    if (!old->session && !(old->session = dsv41_session_new(s->model))) return;
    if (dsv41_session_copy(old->session, sl->session)) {
        dsv41_session_reset(old->session);
        old->used = 0;
        return;
    }
    old->used = atomic_fetch_add(&s->tick, 1) + 1;
    old->cold = cold;
}

/* Empties the slot's snapshots. */
static void drop_snapshots(slot *sl, int32_t n_snaps) {
    for (int32_t i = 0; i < n_snaps; i++) {
        if (sl->snaps[i].session) dsv41_session_reset(sl->snaps[i].session);
        sl->snaps[i].used = 0;
    }
}

/* Sets up a new job on its slot: the live session continues from the best cached state (a
 * snapshot copied in, or itself), or is emptied for a cold prefill. A prompt the cache holds
 * whole goes straight to sampling from the kept logits. NULL, or what failed. */
static const char *start(sched *s, slot *sl) {
    job *j = sl->job;
    int32_t k;
    int src = source(s, sl, j, &k);
    if (!sl->session && !(sl->session = dsv41_session_new(s->model))) return dsv41_error();
    if (!(sl->sampler = dsv41_sampler_new(&j->sp, s->vocab))) return dsv41_error();
    if (j->grammar && !(sl->constraint = dsv41_constraint_new(j->grammar, &s->eos, 1, j->trigger))) return dsv41_error();
    if (src >= 0) {
        if (dsv41_session_copy(sl->session, sl->snaps[src].session)) return dsv41_error();
        sl->snaps[src].used = atomic_fetch_add(&s->tick, 1) + 1;
    } else if (k == 0 && dsv41_session_pos(sl->session) > 0 && dsv41_session_reset(sl->session))
        return dsv41_error();
    memset(&sl->utf8, 0, sizeof sl->utf8);
    sl->picked = 0;
    sl->policy = s->policy;
    sl->thought = j->think_budget > 0 && s->unthink >= 0 ? 0 : -1;
    if (k == j->n_prompt) {
        memcpy(sl->logits, dsv41_session_logits(sl->session), (size_t)s->vocab * sizeof *sl->logits);
        keep_snapshot(s, sl, 0);
    }
    sched_lock(s);
    j->n_cached = k;
    s->cached_tokens += (uint64_t)k;
    sl->started = 1;
    sl->n_tokens = dsv41_session_pos(sl->session);
    sched_unlock(s);
    return NULL;
}

/* Hands token id, picked for position pos, and its text to the slot's job: END_NONE when the
 * reply goes on (id is to be fed), else how the job ends (the caller ends it). */
static job_end take_token(sched *s, slot *sl, int32_t id, int32_t pos) {
    job *j = sl->job;
    char piece[4096];
    int shown = id != s->eos && (j->special || dsv41_token_in_reply(s->tok, id));
    if (sl->thought >= 0) sl->thought = id == s->unthink ? -1 : sl->thought + 1;
    int64_t n = shown ? dsv41_detokenize(s->tok, &sl->utf8, id, piece, sizeof piece) : 0;
    sched_lock(s);
    int stop = id == s->eos ? 1 : job_append(j, id, piece, n > 0 ? (size_t)n : 0);
    s->gen_tokens += id != s->eos;
    pthread_cond_broadcast(&j->changed);
    int more = !stop && j->n_gen < j->max_tokens && pos + 1 < s->ctx;
    sched_unlock(s);
    sl->next = id;
    return more ? END_NONE : stop < 0 ? END_ERROR : stop ? END_STOP : END_LENGTH;
}

/* The slot's next token from logits (the row after history [n]): sampled, under the job's
 * grammar when it has one, or </think> once the reasoning has used up the job's thinking budget,
 * which ends it as the chat template's assistant turn does (the answer follows; the grammar,
 * free until </think>, takes it too). Plain steps and speculative rounds both pick here, so a
 * verify compares its drafts with the token a plain step would feed, forced or sampled, and the
 * reply stays the same. *done is set when the grammar says the reply is complete; -1: the
 * grammar allows no token (the reply ends as END_DEAD). */
static int32_t pick(sched *s, slot *sl, float *logits, const int32_t *history, int32_t n, int *done) {
    if (sl->thought >= 0 && sl->thought >= sl->job->think_budget) {
        if (sl->constraint) dsv41_constraint_accept(sl->constraint, s->unthink);
        return s->unthink;
    }
    if (!sl->constraint) return dsv41_sample(sl->sampler, logits);
    dsv41_constrained_pick cp = {sl->constraint, sl->sampler};
    return dsv41_constraint_pick(&cp, logits, history, n, done);
}

/* With the lock held: ends the slot's job as take_token said. */
static void end_job(sched *s, slot *sl, job_end end) { finish(s, sl, end, end == END_ERROR ? "out of memory" : NULL); }

/* Samples the slot's next token (unless a speculative round picked it already) and hands its
 * text to the job; 1 when the token is to be fed (the reply goes on), 0 when the job ended. */
static int sample_next(sched *s, slot *sl) {
    if (sl->picked) {
        sl->picked = 0;
        return 1;
    }
    int32_t n, done = 0;
    const int32_t *history = dsv41_session_tokens(sl->session, &n);
    int32_t id = pick(s, sl, sl->logits, history, n, &done);
    job_end end = id < 0 ? END_DEAD : take_token(s, sl, id, dsv41_session_pos(sl->session));
    if (end == END_NONE && done) end = END_STOP;
    if (end != END_NONE) {
        sched_lock(s);
        end_job(s, sl, end);
        sched_unlock(s);
    }
    return end == END_NONE;
}

/* A verify's pick: as a plain step's. A dead end is not a failed pick (which would fail the
 * whole batch's verify): it ends this block at a token that is not fed, and its job. */
static int32_t pick_token(void *ctx, float *logits, const int32_t *history, int32_t n, int *last) {
    round_ctx *r = ctx;
    int done = 0;
    int32_t id = pick(r->s, r->sl, logits, history, n, &done);
    if (id < 0) {
        r->end = END_DEAD;
        *last = 1;
        return r->s->eos;
    }
    r->end = take_token(r->s, r->sl, id, n);
    if (r->end == END_NONE && done) r->end = END_STOP;
    *last = r->end != END_NONE;
    return id;
}

/* The speculative rounds of the step's decoding slots, in one forward: each feeds its picked
 * token and the confident prefix of the drafts its drafter proposes (a decode step where it
 * proposes none or its policy pauses, see dsv41_draft_policy); the drafts kept are the slot's
 * next tokens, and the token picked after them waits for the next step (sl->picked). */
static void spec_step(sched *s, int32_t count) {
    const char *err = NULL;
    for (int32_t i = 0; !err && i < count; i++) {
        slot *sl = s->spec[i];
        int32_t pos = dsv41_session_pos(sl->session), *ids = s->r_ids + (int64_t)i * (s->draft + 1);
        int64_t nd = s->draft, room = (int64_t)sl->job->max_tokens - sl->job->n_gen - 1;
        nd = nd < room ? nd : room;
        nd = nd < s->ctx - pos - 2 ? nd : s->ctx - pos - 2;
        s->b_n[i] = dsv41_session_propose(sl->session, sl->next, nd > 0 ? (int32_t)nd : 0, &sl->policy, ids, &s->r_proposed[i]);
        if (s->b_n[i] < 0) err = dsv41_error();
        /* drafts the grammar forbids could never be kept: the block ends before the first */
        else if (sl->constraint) s->b_n[i] = 1 + dsv41_constraint_drafts(sl->constraint, ids + 1, s->b_n[i] - 1);
        s->r_pick[i] = (round_ctx){s, sl, END_NONE};
        s->r_ctx[i] = &s->r_pick[i];
        s->b_sess[i] = sl->session, s->b_ids[i] = ids;
    }
    double t0 = now_s();
    if (!err && dsv41_batch_verify(s->b_sess, s->b_ids, s->b_n, count, pick_token, s->r_ctx, s->r_kept, NULL))
        err = dsv41_error();
    double dt = now_s() - t0;
    /* no copy of the logits: a round picked each slot's next token (sl->picked), and with drafts
     * a slot decodes by rounds until its job ends, so no plain step reads them */
    for (int32_t i = 0; err && i < count; i++) dsv41_session_reset(s->spec[i]->session); /* not known: nothing is cached */
    sched_lock(s);
    s->steps++;
    s->last_batch = count;
    s->decode_s += dt;
    for (int32_t i = 0; i < count; i++) {
        slot *sl = s->spec[i];
        int32_t kept = s->r_kept[i], drafted = s->b_n[i] - 1;
        sl->n_tokens = dsv41_session_pos(sl->session);
        if (err) {
            if (sl->job) finish(s, sl, END_ERROR, err);
            continue;
        }
        s->batched_tokens += (uint64_t)(kept + 1);
        s->drafted += (uint64_t)drafted, s->accepted += (uint64_t)kept;
        sl->job->n_drafted += drafted, sl->job->n_accepted += kept;
        dsv41_draft_policy_record(&sl->policy, s->r_proposed[i], kept);
        if (s->r_pick[i].end != END_NONE) end_job(s, sl, s->r_pick[i].end);
        else sl->picked = 1;
    }
    sched_unlock(s);
}

/* The step's batch call over b_*[0, count): cold is the slot of the cold prefill among them
 * (-1: none) with its cold_n tokens; prompt_tokens and sampled count what the call feeds. */
static void batch_step(sched *s, int32_t count, int32_t cold, int32_t cold_n, int32_t prompt_tokens, int32_t sampled) {
    double t0 = now_s();
    int rc = dsv41_batch_forward(s->b_sess, s->b_ids, s->b_n, count, s->b_logits);
    double dt = now_s() - t0;
    const char *err = rc ? dsv41_error() : NULL;
    for (int32_t i = 0; i < count; i++) {
        slot *sl = s->b_slot[i];
        if (err) dsv41_session_reset(sl->session); /* its state is not known: nothing is cached */
        else if (dsv41_session_pos(sl->session) == sl->job->n_prompt) keep_snapshot(s, sl, cold >= 0 && sl == &s->slots[cold]);
    }
    sched_lock(s);
    for (int32_t i = 0; i < count; i++) {
        slot *sl = s->b_slot[i];
        sl->n_tokens = dsv41_session_pos(sl->session);
        if (err) finish(s, sl, END_ERROR, err);
    }
    s->steps++;
    s->last_batch = count;
    s->batched_tokens += (uint64_t)(prompt_tokens + sampled);
    s->prompt_tokens += (uint64_t)prompt_tokens;
    if (cold >= 0) s->prefill_s += dt, s->cold_tokens += (uint64_t)cold_n;
    else s->decode_s += dt;
    sched_unlock(s);
}

/* A cold prefill of up to this many tokens joins the step's batch call, where it shares the
 * reads of every weight with the other slots' tokens; a longer one is mostly its own arithmetic
 * and runs alone right after, as a one-session call, the only kind the library stops on a
 * cancel: a request that gives up during a long prompt frees its slot within a layer. */
enum { PREFILL_JOIN = 64 };

/* After each layer of a prefill running alone: the layers done go to /slots, and a job given up
 * stops the call. Looking at the
 * job's flag from inside the call, rather than asking the session to stop from the request's
 * thread, loses no request: the library drops one made just before a call begins. */
static void stop_if_given_up(void *ctx, int32_t done, int32_t total) {
    (void)total;
    slot *sl = ctx;
    atomic_store(&sl->prefill_layers, done);
    if (atomic_load(&sl->job->cancel)) dsv41_session_cancel(sl->session);
}

/* The slot's long cold prefill, alone (see PREFILL_JOIN). A job given up before it starts skips
 * it and ends at the next step; one given up during it stops it at the next layer, which leaves
 * the session empty. */
static void prefill_alone(sched *s, slot *sl) {
    job *j = sl->job;
    if (atomic_load(&j->cancel)) return;
    double t0 = now_s();
    atomic_store(&sl->prefill_layers, 0);
    dsv41_session_set_progress(sl->session, stop_if_given_up, sl);
    int rc = dsv41_session_forward(sl->session, j->prompt, j->n_prompt, sl->logits, NULL);
    dsv41_session_set_progress(sl->session, NULL, NULL);
    atomic_store(&sl->prefill_layers, -1);
    double dt = now_s() - t0;
    const char *err = rc ? dsv41_error() : NULL;
    if (err) dsv41_session_reset(sl->session); /* stopped or failed: nothing is cached */
    else keep_snapshot(s, sl, 1);
    sched_lock(s);
    sl->n_tokens = dsv41_session_pos(sl->session);
    if (err && atomic_load(&j->cancel)) finish(s, sl, END_CANCEL, NULL);
    else if (err) finish(s, sl, END_ERROR, err);
    s->steps++;
    if (!err) {
        s->batched_tokens += (uint64_t)j->n_prompt;
        s->prompt_tokens += (uint64_t)j->n_prompt;
        s->prefill_s += dt, s->cold_tokens += (uint64_t)j->n_prompt;
    }
    sched_unlock(s);
}

/* One step: every busy slot with a token to feed (a sampled one, or the next of a prompt that
 * extends its cache) and at most one cold prefill, the oldest waiting, go through one forward
 * call (a long prefill right after it, alone); the other cold prefills wait for the next step,
 * so a running stream waits at most one prefill per token. Then the slots whose prompt just
 * went in keep a snapshot. */
static void step(sched *s) {
    DSV41_ASSERT(on_runner(s) && !holds_lock(s));
    int32_t count = 0, cold = -1, cold_n = 0, prompt_tokens = 0, sampled = 0, n_spec = 0;
    /* slot->job changes only on this thread, so it is read here without the lock */
    for (int32_t i = 0; i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        if (!sl->job) continue;
        const char *err = NULL;
        if (atomic_load(&sl->job->cancel)) {
            sched_lock(s);
            finish(s, sl, END_CANCEL, NULL);
            sched_unlock(s);
            continue;
        }
        if (!sl->started && (err = start(s, sl))) {
            sched_lock(s);
            finish(s, sl, END_ERROR, err);
            sched_unlock(s);
            continue;
        }
        job *j = sl->job;
        int32_t pos = dsv41_session_pos(sl->session);
        if (pos == 0) {
            if (cold < 0 || j->t_start < s->slots[cold].job->t_start) cold = i;
            continue;
        }
        const int32_t *ids = pos < j->n_prompt ? &j->prompt[pos] : &sl->next;
        if (pos < j->n_prompt) prompt_tokens++;
        else if (!sample_next(s, sl)) continue;
        else if (s->draft > 0) {
            s->spec[n_spec++] = sl;
            continue;
        } else sampled++;
        s->b_slot[count] = sl, s->b_sess[count] = sl->session, s->b_ids[count] = ids, s->b_n[count] = 1;
        s->b_logits[count++] = sl->logits;
    }
    slot *alone = cold >= 0 && s->slots[cold].job->n_prompt > PREFILL_JOIN ? &s->slots[cold] : NULL;
    if (alone) cold = -1;
    if (cold >= 0) {
        slot *sl = &s->slots[cold];
        s->b_slot[count] = sl, s->b_sess[count] = sl->session, s->b_ids[count] = sl->job->prompt;
        prompt_tokens += cold_n = s->b_n[count] = sl->job->n_prompt;
        s->b_logits[count++] = sl->logits;
    }
    if (count) batch_step(s, count, cold, cold_n, prompt_tokens, sampled);
    if (n_spec) spec_step(s, n_spec);
    if (alone) prefill_alone(s, alone);
}

static void *run(void *arg) {
    sched *s = arg;
    s->runner = pthread_self(); /* before its first lock: every other thread reads it after one */
    sched_lock(s);
    for (;;) {
        assign(s);
        int busy = 0;
        for (int32_t i = 0; i < s->n_slots; i++) busy |= s->slots[i].job != NULL;
        if (!busy) {
            if (s->stopping) break;
            s->mu_held = 0;
            pthread_cond_wait(&s->wake, &s->mu);
            own_lock(s);
            continue;
        }
        sched_unlock(s);
        step(s);
        sched_lock(s);
    }
    sched_unlock(s);
    return NULL;
}

/* Frees the slots and the step's arrays. */
static void free_slots(sched *s) {
    for (int32_t i = 0; s->slots && i < s->n_slots; i++) {
        slot *sl = &s->slots[i];
        dsv41_session_free(sl->session);
        for (int32_t k = 0; sl->snaps && k < s->n_snaps; k++) dsv41_session_free(sl->snaps[k].session);
        free(sl->snaps);
        free(sl->logits);
    }
    free(s->slots);
    free(s->b_sess);
    free(s->b_ids);
    free(s->b_n);
    free(s->b_logits);
    free(s->b_slot);
    free(s->spec);
    free(s->r_ids);
    free(s->r_proposed);
    free(s->r_kept);
    free(s->r_pick);
    free(s->r_ctx);
}

sched *sched_start(dsv41_model *m, const dsv41_tokenizer *tk, int32_t n_slots, int32_t n_snaps, int32_t max_waiting,
                   int32_t ctx, int32_t draft, dsv41_draft_policy policy) {
    sched *s = calloc(1, sizeof *s);
    if (!s) {
        fprintf(stderr, "dsv41: serve: out of memory\n");
        return NULL;
    }
    s->model = m;
    s->tok = tk;
    s->vocab = dsv41_model_vocab_size(m);
    s->eos = dsv41_tokenizer_find(tk, "<｜end▁of▁sentence｜>");
    if (s->eos < 0) s->eos = 1;
    s->unthink = dsv41_tokenizer_find(tk, "</think>");
    s->ctx = ctx;
    s->draft = draft;
    s->policy = policy;
    s->n_slots = n_slots;
    s->n_snaps = n_snaps;
    s->max_waiting = max_waiting;
    atomic_init(&s->tick, 0);
    size_t n = (size_t)n_slots;
    int ok = (s->slots = calloc(n, sizeof *s->slots)) && (s->b_sess = calloc(n, sizeof *s->b_sess)) &&
             (s->b_ids = calloc(n, sizeof *s->b_ids)) && (s->b_n = calloc(n, sizeof *s->b_n)) &&
             (s->b_logits = calloc(n, sizeof *s->b_logits)) && (s->b_slot = calloc(n, sizeof *s->b_slot)) &&
             (s->spec = calloc(n, sizeof *s->spec)) && (s->r_ids = calloc(n * (size_t)(draft + 1), sizeof *s->r_ids)) &&
             (s->r_proposed = calloc(n, sizeof *s->r_proposed)) && (s->r_kept = calloc(n, sizeof *s->r_kept)) &&
             (s->r_pick = calloc(n, sizeof *s->r_pick)) &&
             (s->r_ctx = calloc(n, sizeof *s->r_ctx));
    for (int32_t i = 0; ok && i < n_slots; i++) {
        atomic_init(&s->slots[i].prefill_layers, -1);
        ok = (s->slots[i].logits = malloc((size_t)s->vocab * sizeof(float))) &&
             (s->slots[i].snaps = calloc((size_t)(n_snaps ? n_snaps : 1), sizeof *s->slots[i].snaps));
    }
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->wake, NULL);
    int rc = ok ? pthread_create(&s->thread, NULL, run, s) : ENOMEM;
    if (rc) {
        fprintf(stderr, "dsv41: serve: cannot start the scheduler: %s\n", strerror(rc));
        free_slots(s);
        pthread_mutex_destroy(&s->mu);
        pthread_cond_destroy(&s->wake);
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
        if (s->slots[i].job) job_cancel(s->slots[i].job);
    pthread_cond_signal(&s->wake);
    sched_unlock(s);
}

void sched_stop(sched *s) {
    sched_shutdown(s);
    pthread_join(s->thread, NULL);
    free_slots(s);
    pthread_mutex_destroy(&s->mu);
    pthread_cond_destroy(&s->wake);
    free(s);
}

/* The slot is taken from the scheduler (no job, held) for the action's file work, so the other
 * slots go on stepping meanwhile; the scheduler never touches a held slot. A restore verifies
 * the whole file before it changes anything (the library's load), and then the slot's
 * snapshots, made from other states, give way to one of the restored state. */
slot_result sched_slot_action(sched *s, int32_t id, slot_action action, const char *path, int32_t *n_tokens) {
    slot *sl = &s->slots[id];
    sched_lock(s);
    int busy = sl->job || sl->held;
    if (!busy) sl->held = 1;
    sched_unlock(s);
    if (busy) return SLOT_BUSY;
    int rc = 0;
    *n_tokens = 0;
    if (!sl->session && !(sl->session = dsv41_session_new(s->model))) rc = -1;
    else if (action == SLOT_SAVE) rc = dsv41_session_save(sl->session, path);
    else if (action == SLOT_RESTORE && !(rc = dsv41_session_load(sl->session, path))) {
        drop_snapshots(sl, s->n_snaps);
        if (dsv41_session_pos(sl->session) > 0) keep_snapshot(s, sl, 0);
    }
    if (!rc && sl->session) *n_tokens = dsv41_session_pos(sl->session);
    if (!rc && action == SLOT_ERASE) {
        dsv41_session_reset(sl->session);
        drop_snapshots(sl, s->n_snaps);
    }
    sched_lock(s);
    sl->held = 0;
    sl->n_tokens = sl->session ? dsv41_session_pos(sl->session) : 0;
    pthread_cond_signal(&s->wake);
    sched_unlock(s);
    return rc ? SLOT_FAILED : SLOT_OK;
}

void sched_slots_json(sched *s, jbuf *out) {
    sched_lock(s);
    jb_puts(out, "[");
    for (int32_t i = 0; i < s->n_slots; i++) {
        const slot *sl = &s->slots[i];
        jb_printf(out, "%s{\"id\":%d,\"busy\":%s,\"n_tokens\":%d", i ? "," : "", i, sl->job || sl->held ? "true" : "false",
                  sl->n_tokens);
        int32_t layers = atomic_load(&sl->prefill_layers);
        if (layers >= 0) jb_printf(out, ",\"prefill_layers_done\":%d", layers);
        jb_puts(out, "}");
    }
    jb_puts(out, "]");
    sched_unlock(s);
}

void sched_metrics(sched *s, jbuf *out) {
    sched_lock(s);
    int32_t busy = 0;
    for (int32_t i = 0; i < s->n_slots; i++) busy += s->slots[i].job != NULL;
    jb_printf(out,
              "# HELP dsv41_prompt_tokens_total Prompt tokens computed (a cold prefill, or an extension of a cached prompt).\n"
              "# TYPE dsv41_prompt_tokens_total counter\ndsv41_prompt_tokens_total %llu\n"
              "# HELP dsv41_cached_tokens_total Prompt tokens reused from a slot's cache.\n"
              "# TYPE dsv41_cached_tokens_total counter\ndsv41_cached_tokens_total %llu\n"
              "# HELP dsv41_generated_tokens_total Tokens generated.\n# TYPE dsv41_generated_tokens_total counter\n"
              "dsv41_generated_tokens_total %llu\n"
              "# HELP dsv41_steps_total Forward calls of the scheduler, each over every slot with work.\n"
              "# TYPE dsv41_steps_total counter\ndsv41_steps_total %llu\n"
              "# HELP dsv41_batched_tokens_total Tokens fed by the scheduler's forward calls.\n"
              "# TYPE dsv41_batched_tokens_total counter\ndsv41_batched_tokens_total %llu\n"
              "# HELP dsv41_batch_size Sessions advanced by the latest step.\n# TYPE dsv41_batch_size gauge\n"
              "dsv41_batch_size %d\n"
              "# HELP dsv41_prefill_tokens_per_second Cold prefill tokens per second of the steps with one, since start.\n"
              "# TYPE dsv41_prefill_tokens_per_second gauge\ndsv41_prefill_tokens_per_second %.3f\n"
              "# HELP dsv41_decode_tokens_per_second Generated tokens per second of the other steps, since start.\n"
              "# TYPE dsv41_decode_tokens_per_second gauge\ndsv41_decode_tokens_per_second %.3f\n"
              "# HELP dsv41_draft_tokens_total Speculative drafts checked by a verify (serve --draft).\n"
              "# TYPE dsv41_draft_tokens_total counter\ndsv41_draft_tokens_total %llu\n"
              "# HELP dsv41_draft_accepted_tokens_total Speculative drafts kept.\n"
              "# TYPE dsv41_draft_accepted_tokens_total counter\ndsv41_draft_accepted_tokens_total %llu\n"
              "# HELP dsv41_requests_waiting Requests waiting for a slot.\n# TYPE dsv41_requests_waiting gauge\n"
              "dsv41_requests_waiting %d\n"
              "# HELP dsv41_slots_busy Slots serving a request.\n# TYPE dsv41_slots_busy gauge\ndsv41_slots_busy %d\n"
              "# HELP dsv41_slots Slots in all.\n# TYPE dsv41_slots gauge\ndsv41_slots %d\n",
              (unsigned long long)s->prompt_tokens, (unsigned long long)s->cached_tokens,
              (unsigned long long)s->gen_tokens, (unsigned long long)s->steps, (unsigned long long)s->batched_tokens,
              s->last_batch, s->prefill_s > 0 ? (double)s->cold_tokens / s->prefill_s : 0.0,
              s->decode_s > 0 ? (double)s->gen_tokens / s->decode_s : 0.0, (unsigned long long)s->drafted,
              (unsigned long long)s->accepted, s->n_waiting, busy, s->n_slots);
    sched_unlock(s);
}
