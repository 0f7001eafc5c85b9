/* dist.c - one model split across the ranks of a job: expert parallel (and, with --split
 * rows, row-split tensor parallel for the dense projections), bit-identical to one process.
 * The control: loads and their vote, the leader's hooks, the followers' loop.
 *
 * What is split and why (docs/DISTRIBUTED.md has the numbers): a decoded token reads every
 * dense matrix but only 6 of 384 experts per layer and 24 rows of each Engram table, so the
 * experts and the tables are what outgrow one machine, while the dense part fits on each.
 * Running the dense part on every rank costs no message: the ranks meet once per MoE layer
 * (the experts' outputs), once per Engram layer (the rows) and once for the head, whose rows
 * are split too because it is the largest matrix a token reads whole. Running attention on
 * rank 0 alone would add a broadcast of the MoE input per layer to the critical path and
 * leave the other ranks idle meanwhile. Within one machine, where a message costs about a
 * microsecond, splitting every dense projection by rows too (--split rows: ten exchanges a layer
 * instead of one) divides the dense reads by the rank count; the leader's load op carries the
 * split, so the followers need not be told it on their command lines.
 *
 * Exactness: the exchanges inside a forward, and why they keep one process's bits, are
 * model/collective.c; this file is the control around them.
 *
 * Control: rank 0 runs the program; the calls that change a model or a session go to the other
 * ranks as small ops (a decode step is one broadcast of 128 bytes), which they repeat in
 * dsv41_follow(). Loading ends with a vote, so a rank that cannot load, or loads other
 * weights, fails the load on every rank with one message on rank 0. */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collective.h"
#include "dist.h"
#include "kernels/kernels.h"
#include "lead.h"
#include "loader.h"
#include "machine.h"
#include "scratch.h"

static pthread_mutex_t lead = PTHREAD_MUTEX_INITIALIZER; /* leader: one distributed call at a time */
static int32_t last_id;                                   /* leader: the last handle given out */

static int leading(void) { return collective_net.n_ranks > 1 && collective_net.rank == 0; }

/* Ends the job with a one-line message: a follower that cannot repeat the leader's call would
 * leave the ranks' collectives out of step. */
static void fatal(const char *fmt, ...) {
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    collective_net.fail(collective_net.ctx, msg);
}

/* ---- ops: what the leader tells the followers */
#define INLINE_IDS 27

typedef struct {
    int32_t op, id;             /* what, on which model or session */
    int32_t n, flags;           /* op's count (tokens, threads, a new handle, the exit status) and flags */
    int32_t len;                /* bytes of payload broadcast after this header */
    int32_t ids[INLINE_IDS];    /* a forward's ids when they fit: a decode step is one broadcast */
} dist_op;

static void send_op(dist_op o, const void *payload) {
    collective_bcast(&o, sizeof o);
    if (o.len > 0) collective_bcast((void *)payload, o.len);
}

/* ---- loading, and the vote that ends it */
static dsv41_model *load_local(int32_t op, const char *path, const dsv41_golden *g) {
    if (op == OP_LOAD_DIR) return checkpoint_load(path);
    if (op == OP_LOAD_BUILTIN) return builtin_model();
    if (g) return golden_model(g);
    dsv41_golden *own = dsv41_golden_load(path);
    dsv41_model *m = own ? golden_model(own) : NULL;
    dsv41_golden_free(own);
    return m;
}

static void mix(uint64_t *h, const void *p, size_t n) {
    const uint8_t *b = p;
    for (size_t i = 0; i < n; i++) *h = (*h ^ b[i]) * 0x100000001B3ULL;
}

/* a weight's form and, when every rank reads it (split by rows: a row of it), the first bytes of
 * its row 0 and scale: one page beyond a rank's rows at most */
static void mix_weight(uint64_t *h, const weight *w, int whole) {
    int64_t form[5] = {w->type, w->mode, w->rows, w->cols, w->scale_rows};
    mix(h, form, sizeof form);
    if (!whole || !w->data) return;
    size_t n = weight_row_bytes(w);
    mix(h, w->data, n < 32 ? n : 32);
    if (w->scale) mix(h, w->scale, 1);
}

/* a block's dense weights whole, its E experts and Engram table by form */
static void mix_layer(uint64_t *h, const config *c, const layer_weights *L, int32_t E) {
    const weight *dense[32];
    int n = layer_dense_weights(L, dense);
    for (int i = 0; i < n; i++) mix_weight(h, dense[i], 1);
    for (int32_t e = 0; e < E; e++) {
        mix_weight(h, &L->w1[e], 0);
        mix_weight(h, &L->w2[e], 0);
        mix_weight(h, &L->w3[e], 0);
    }
    if (L->engram >= 0) mix_weight(h, &L->eg_table, 0);
    mix(h, L->attn_norm, (size_t)c->dim * sizeof *L->attn_norm);
    mix(h, L->ffn_norm, (size_t)c->dim * sizeof *L->ffn_norm);
}

/* A digest of the config and the weights (the drafter's too), without touching what a rank
 * does not own: two directories with different models give different digests. */
static uint64_t fingerprint(const dsv41_model *m) {
    const config *c = &m->cfg;
    uint64_t h = 0xCBF29CE484222325ULL;
    const int32_t ints[] = {c->vocab_size, c->dim, c->n_layers, c->n_heads, c->head_dim, c->rope_head_dim,
                            c->q_lora_rank, c->o_lora_rank, c->o_groups, c->window_size, c->candidate_source_layer,
                            c->candidate_topk_blocks, c->candidate_block_size, c->index_n_heads, c->index_head_dim,
                            c->index_topk, c->moe_inter_dim, c->n_routed_experts, c->n_shared_experts,
                            c->n_activated_experts, c->norm_topk_prob, c->hc_mult, c->hc_sinkhorn_iters,
                            c->original_seq_len, c->max_seq_len, c->n_engram, c->engram_max_ngram,
                            c->engram_n_heads, c->engram_head_dim, c->engram_pad_id, c->n_mtp_layers,
                            c->dspark_n_experts, c->dspark_n_activated, c->dspark_markov_rank, c->dspark_block_size,
                            c->dspark_noise_id, c->dspark_n_targets};
    const float floats[] = {c->route_scale, c->swiglu_limit, c->gate_temp, c->hc_eps, c->norm_eps, c->rope_theta,
                            c->compress_rope_theta, c->rope_factor, c->beta_fast, c->beta_slow};
    mix(&h, ints, sizeof ints);
    mix(&h, floats, sizeof floats);
    mix(&h, c->compress_ratio, (size_t)c->n_layers * sizeof *c->compress_ratio);
    mix(&h, c->is_kv_source, (size_t)c->n_layers);
    mix(&h, c->is_index_source, (size_t)c->n_layers);
    mix(&h, c->engram_rows, (size_t)c->n_engram * sizeof *c->engram_rows);
    mix(&h, c->engram_mult, sizeof c->engram_mult);
    if (c->engram_token_map) mix(&h, c->engram_token_map, (size_t)c->vocab_size * sizeof *c->engram_token_map);
    mix_weight(&h, &m->embed, 1);
    mix_weight(&h, &m->head, 1);
    mix(&h, m->norm, (size_t)c->dim * sizeof *m->norm);
    for (int32_t l = 0; l < c->n_layers; l++) mix_layer(&h, c, &m->layers[l], c->n_routed_experts);
    if (m->draft) {
        const dspark_weights *d = m->draft;
        mix(&h, c->dspark_target, (size_t)c->dspark_n_targets * sizeof *c->dspark_target);
        for (int32_t s = 0; s < c->n_mtp_layers; s++) mix_layer(&h, c, &d->stages[s], c->dspark_n_experts);
        mix_weight(&h, &d->main_proj, 1);
        mix_weight(&h, &d->markov_embed, 1);
        mix_weight(&h, &d->markov_head, 1);
        mix_weight(&h, &d->confidence, 1);
        mix(&h, d->main_norm, (size_t)c->dim * sizeof *d->main_norm);
        mix(&h, d->norm, (size_t)c->dim * sizeof *d->norm);
    }
    return h;
}

typedef struct {
    int32_t ok;
    char kernels[12];      /* the kernel set: the ranks must round alike to route alike */
    uint64_t print;        /* fingerprint() */
    char msg[240];         /* why the load failed */
} vote;

/* Runs fn(ctx), a step of collectives over scratch memory, under scratch_run: a rank out of
 * memory inside one ends the job, since the other ranks are inside the same collective. */
static void run_or_end(void (*fn)(void *ctx), void *ctx) {
    if (scratch_run(fn, ctx)) fatal("rank %d: %s", collective_net.rank, dsv41_error());
}

typedef struct {
    dsv41_model *m;             /* this rank's load, or NULL */
    int bad;                    /* -1: some rank failed or disagrees, or the vote could not be held */
} ballot;

static void vote_on(void *ctx) {
    ballot *b = ctx;
    dsv41_model *m = b->m;
    scratch_mark mark = scratch_begin();
    vote *v = scratch_bytes((size_t)collective_net.n_ranks * sizeof *v);
    int64_t *counts = scratch_i64(collective_net.n_ranks);
    memset(v, 0, (size_t)collective_net.n_ranks * sizeof *v);
    vote *me = &v[collective_net.rank];
    me->ok = m != NULL;
    snprintf(me->kernels, sizeof me->kernels, "%s", kernels_current()->name);
    if (m) me->print = fingerprint(m);
    else snprintf(me->msg, sizeof me->msg, "%s", dsv41_error());
    for (int32_t r = 0; r < collective_net.n_ranks; r++) counts[r] = sizeof *v;
    collective_gather(v, counts);
    int bad = 0;
    for (int32_t r = 0; r < collective_net.n_ranks && !bad; r++) {
        if (!v[r].ok) bad = r ? set_error("rank %d: %s", r, v[r].msg) : set_error("%s", v[r].msg);
        else if (v[r].print != v[0].print)
            bad = set_error("rank %d loaded a different model than rank 0 (the config or the weights differ)", r);
        else if (strcmp(v[r].kernels, v[0].kernels))
            bad = set_error("rank %d computes with the %s kernels and rank 0 with %s: the ranks would route differently",
                            r, v[r].kernels, v[0].kernels);
    }
    scratch_end(mark);
    b->bad = bad;
}

/* Every rank says whether it loaded m and what; on any failure or disagreement every rank
 * drops its model and the leader's error names the first rank at fault. split: the leader's. */
static dsv41_model *agree(dsv41_model *m, int32_t id, int32_t split) {
    ballot b = {m, -1}; /* stays bad if the vote itself fails (a transport whose fail returns) */
    run_or_end(vote_on, &b);
    if (b.bad) {
        dsv41_model_free(m);
        return NULL;
    }
    m->part = (model_part){collective_net.rank, collective_net.n_ranks, id, split};
    if (split == DSV41_SPLIT_ROWS && part_touch(m)) fatal("rank %d: %s", collective_net.rank, dsv41_error());
    return m;
}

dsv41_model *dist_load(int32_t op, const char *path, const dsv41_golden *g) {
    if (!leading()) return load_local(op, path, g);
    pthread_mutex_lock(&lead);
    dist_op o = {.op = op, .id = ++last_id, .flags = collective_net.split, .len = (int32_t)strlen(path) + 1};
    send_op(o, path);
    dsv41_model *m = agree(load_local(op, path, g), o.id, o.flags);
    pthread_mutex_unlock(&lead);
    return m;
}

/* ---- leader hooks */
static int leads(const dsv41_model *m) { return leading() && m && m->part.n_ranks > 1; }

static void tell(dist_op o) {
    pthread_mutex_lock(&lead);
    send_op(o, NULL);
    pthread_mutex_unlock(&lead);
}

static void hook_model_free(const dsv41_model *m) {
    if (leads(m)) tell((dist_op){.op = OP_MODEL_FREE, .id = m->part.id});
}

static void hook_session_new(dsv41_session *s) {
    if (!leads(s->m)) return;
    pthread_mutex_lock(&lead);
    s->dist_id = ++last_id;
    send_op((dist_op){.op = OP_SESSION_NEW, .id = s->m->part.id, .n = s->dist_id}, NULL);
    pthread_mutex_unlock(&lead);
}

static void hook_session_free(const dsv41_session *s) {
    if (leads(s->m) && s->dist_id) tell((dist_op){.op = OP_SESSION_FREE, .id = s->dist_id}); /* 0: never announced */
}

static void hook_threads(int32_t n) {
    if (leading()) tell((dist_op){.op = OP_THREADS, .n = n});
}

/* Locks the leader for a call on session s and sends it: o with its n ids inline when they fit,
 * else after it. */
static void begin(const dsv41_session *s, dist_op o, const int32_t *ids, int32_t n) {
    if (!leads(s->m)) return;
    pthread_mutex_lock(&lead);
    o.id = s->dist_id;
    o.len = n > INLINE_IDS ? 4 * n : 0;
    if (n <= INLINE_IDS) memcpy(o.ids, ids, (size_t)n * sizeof *ids);
    send_op(o, ids);
}

static void hook_forward_begin(const dsv41_session *s, const int32_t *ids, int32_t n, int32_t flags) {
    begin(s, (dist_op){.op = OP_FORWARD, .n = n, .flags = flags}, ids, n);
}

static void hook_forward_end(const dsv41_session *s) {
    if (leads(s->m)) pthread_mutex_unlock(&lead);
}

static void hook_draft_begin(const dsv41_session *s, int32_t anchor, int32_t n) {
    begin(s, (dist_op){.op = OP_DRAFT, .n = n}, &anchor, 1);
}

static void hook_verify_begin(const dsv41_session *s, const int32_t *ids, int32_t n, int32_t plain) {
    begin(s, (dist_op){.op = OP_VERIFY, .n = n, .flags = plain}, ids, n);
}

static void hook_session_reset(const dsv41_session *s) {
    if (leads(s->m)) tell((dist_op){.op = OP_SESSION_RESET, .id = s->dist_id});
}

static void hook_session_copy(const dsv41_session *dst, const dsv41_session *src) {
    if (leads(dst->m)) tell((dist_op){.op = OP_SESSION_COPY, .id = dst->dist_id, .n = src->dist_id});
}

static void hook_prefill_rows(const dsv41_session *s, int32_t rows) {
    if (leads(s->m)) tell((dist_op){.op = OP_PREFILL_ROWS, .id = s->dist_id, .n = rows});
}

/* The file's bytes follow the op whole (a payload's length is 32 bits; a file may be larger),
 * their count in ids[0..1]. */
static void hook_session_load(const dsv41_session *s, const void *bytes, size_t n) {
    if (!leads(s->m)) return;
    dist_op o = {.op = OP_SESSION_LOAD, .id = s->dist_id};
    int64_t len = (int64_t)n;
    memcpy(o.ids, &len, sizeof len);
    pthread_mutex_lock(&lead);
    send_op(o, NULL);
    collective_bcast((void *)bytes, len);
    pthread_mutex_unlock(&lead);
}

static const lead_hooks hooks = {hook_model_free,   hook_session_new,   hook_session_free, hook_threads,
                                 hook_forward_begin, hook_forward_end,  hook_draft_begin,  hook_verify_begin,
                                 hook_session_reset, hook_session_copy, hook_prefill_rows, hook_session_load};

int dsv41_set_dist(const dsv41_dist *d) {
    if (d->n_ranks < 1 || d->rank < 0 || d->rank >= d->n_ranks)
        return set_error("distribution: rank %d of %d ranks", d->rank, d->n_ranks);
    if (d->n_ranks > 1 && (!d->allgather || !d->broadcast || !d->fail))
        return set_error("distribution: the transport needs allgather, broadcast and fail");
    if (d->split != DSV41_SPLIT_EXPERTS && d->split != DSV41_SPLIT_ROWS)
        return set_error("distribution: split %d is neither experts nor rows", d->split);
    collective_net = *d;
    lead_active = leading() ? &hooks : NULL;
    return 0;
}

void dsv41_dist_end(int32_t status) {
    if (leading()) tell((dist_op){.op = OP_END, .n = status});
}

/* ---- the benchmark's per-rank figures */
typedef struct {
    const dsv41_model *m;
    int32_t measure;
    rank_report *all;           /* [n_ranks] */
} report_call;

/* Seconds per all-gather of dim bf16 values, each rank sending its share: what a split
 * projection's exchange costs for one token. The best of 5 runs of 100 (the first warms the
 * transport); every rank runs the same loop. */
static double time_gather(int64_t dim) {
    const int32_t K = collective_net.n_ranks;
    scratch_mark mark = scratch_begin();
    int64_t *counts = scratch_i64(K);
    uint16_t *buf = scratch_bytes((size_t)dim * sizeof *buf);
    memset(buf, 0, (size_t)dim * sizeof *buf);
    for (int32_t r = 0; r < K; r++) counts[r] = (dim * (r + 1) / K - dim * r / K) * 2;
    double best = 1e30;
    for (int run = 0; run < 6; run++) {
        double t0 = machine_now_s();
        for (int i = 0; i < 100; i++) collective_net.allgather(collective_net.ctx, buf, counts);
        double dt = (machine_now_s() - t0) / 100;
        if (run > 0 && dt < best) best = dt;
    }
    scratch_end(mark);
    return best;
}

static void report_run(void *ctx) {
    const report_call *c = ctx;
    rank_report *all = c->all;
    scratch_mark mark = scratch_begin();
    int64_t *counts = scratch_i64(collective_net.n_ranks);
    memset(all, 0, (size_t)collective_net.n_ranks * sizeof *all);
    rank_report *me = &all[collective_net.rank];
    me->sent = (double)collective_sent();
    me->gathers = (double)collective_gathers();
    if (c->measure) {
        me->triad_gbps = machine_triad_gbps();
        me->peak_rss = machine_peak_rss();
        me->decode_bytes = part_decode_bytes(c->m);
        me->gather_s = time_gather(c->m->cfg.dim);
    }
    for (int32_t r = 0; r < collective_net.n_ranks; r++) counts[r] = sizeof *all;
    collective_gather(all, counts);
    scratch_end(mark);
}

static void report(const dsv41_model *m, int32_t measure, rank_report *all) {
    run_or_end(report_run, &(report_call){m, measure, all});
}

void dist_report(const dsv41_model *m, int32_t measure, rank_report *all) {
    if (!leads(m)) {
        all[0] = (rank_report){measure ? machine_triad_gbps() : 0, measure ? machine_peak_rss() : 0,
                               measure ? part_decode_bytes(m) : 0, 0, 0, 0};
        return;
    }
    pthread_mutex_lock(&lead);
    send_op((dist_op){.op = OP_REPORT, .id = m->part.id, .n = measure}, NULL);
    report(m, measure, all);
    pthread_mutex_unlock(&lead);
}

/* ---- followers */
typedef struct {
    int32_t id;
    void *p;                /* a dsv41_model or a dsv41_session */
} handle;

typedef struct {
    handle *held;           /* [n] what the leader's handles stand for here */
    size_t n;
    float *logits;          /* [cap] a forward's logits, thrown away */
    size_t cap;
    dsv41_trace *trace;     /* a forward's trace, thrown away */
} follower;

static void *find(const follower *f, int32_t id) {
    for (size_t i = 0; i < f->n; i++)
        if (f->held[i].id == id) return f->held[i].p;
    fatal("rank %d: rank 0 named handle %d, which this rank does not hold", collective_net.rank, id);
    return NULL;
}

static void hold(follower *f, int32_t id, void *p) {
    handle *h = realloc(f->held, (f->n + 1) * sizeof *h);
    if (!h) { fatal("rank %d: out of memory", collective_net.rank); return; }
    f->held = h;
    f->held[f->n++] = (handle){id, p};
}

static void drop(follower *f, int32_t id) {
    for (size_t i = 0; i < f->n; i++)
        if (f->held[i].id == id) { f->held[i] = f->held[--f->n]; return; }
}

static void follow_forward(follower *f, const dist_op *o, const int32_t *payload) {
    dsv41_session *s = find(f, o->id);
    const int32_t *ids = o->len ? payload : o->ids;
    size_t need = (o->flags & FWD_LOGITS) ? (size_t)s->m->cfg.vocab_size * (size_t)(o->flags & FWD_ALL ? o->n : 1) : 0;
    if (need > f->cap) {
        free(f->logits);
        f->cap = 0;
        if (!(f->logits = malloc(need * sizeof *f->logits))) { fatal("rank %d: out of memory", collective_net.rank); return; }
        f->cap = need;
    }
    if ((o->flags & FWD_TRACE) && !f->trace && !(f->trace = dsv41_trace_new())) { fatal("rank %d: out of memory", collective_net.rank); return; }
    if (f->trace) dsv41_trace_clear(f->trace);
    float *lg = need ? f->logits : NULL;
    int rc = o->flags & FWD_ALL ? dsv41_session_forward_all(s, ids, o->n, lg)
                                : dsv41_session_forward(s, ids, o->n, lg, o->flags & FWD_TRACE ? f->trace : NULL);
    if (rc) fatal("rank %d: forward: %s", collective_net.rank, dsv41_error());
}

/* The leader's draft: the same ids here, thrown away. */
static void follow_draft(follower *f, const dist_op *o) {
    int32_t *ids = malloc((size_t)(o->n > 0 ? o->n : 1) * sizeof *ids);
    if (!ids) { fatal("rank %d: out of memory", collective_net.rank); return; }
    if (dsv41_session_draft(find(f, o->id), o->ids[0], o->n, ids, NULL, NULL))
        fatal("rank %d: draft: %s", collective_net.rank, dsv41_error());
    free(ids);
}

/* The leader's verify: the same forward, then the rows the leader's picks keep (spec.c). */
static void follow_verify(follower *f, const dist_op *o, const int32_t *payload) {
    dsv41_session *s = find(f, o->id);
    const int32_t *ids = o->len ? payload : o->ids;
    int32_t kept, next;
    if (o->flags ? dsv41_batch_verify(&s, &ids, &o->n, 1, NULL, NULL, &kept, &next)
                 : dsv41_session_verify(s, ids, o->n, NULL, NULL, &next) < 0)
        fatal("rank %d: verify: %s", collective_net.rank, dsv41_error());
}

/* The leader's session file, from its bytes; the leader loaded them, so they load here too. */
static void follow_load(follower *f, const dist_op *o) {
    int64_t n;
    memcpy(&n, o->ids, sizeof n);
    uint8_t *buf = malloc(n > 0 ? (size_t)n : 1);
    if (!buf) { fatal("rank %d: out of memory", collective_net.rank); return; }
    collective_bcast(buf, n);
    if (session_file_load(find(f, o->id), "rank 0's session file", buf, (size_t)n, NULL, NULL))
        fatal("rank %d: %s", collective_net.rank, dsv41_error());
    free(buf);
}

int32_t dsv41_follow(void) {
    if (collective_net.n_ranks < 2 || collective_net.rank == 0) return set_error("dsv41_follow: only ranks other than 0 of a distribution follow");
    follower f = {NULL, 0, NULL, 0, NULL};
    for (;;) {
        dist_op o;
        collective_bcast(&o, sizeof o);
        char *payload = NULL;
        if (o.len > 0) {
            if (!(payload = malloc((size_t)o.len))) { fatal("rank %d: out of memory", collective_net.rank); return -1; }
            collective_bcast(payload, o.len);
        }
        dsv41_session *s;
        switch (o.op) {
        case OP_END:
            free(f.held);
            free(f.logits);
            dsv41_trace_free(f.trace);
            return o.n;
        case OP_LOAD_DIR:
        case OP_LOAD_GOLDEN:
        case OP_LOAD_BUILTIN: {
            dsv41_model *m = agree(load_local(o.op, payload, NULL), o.id, o.flags);
            if (m) hold(&f, o.id, m);
            break;
        }
        case OP_MODEL_FREE: dsv41_model_free(find(&f, o.id)); drop(&f, o.id); break;
        case OP_SESSION_NEW:
            if (!(s = dsv41_session_new(find(&f, o.id)))) { fatal("rank %d: %s", collective_net.rank, dsv41_error()); return -1; }
            s->dist_id = o.n;
            hold(&f, o.n, s);
            break;
        case OP_SESSION_FREE: dsv41_session_free(find(&f, o.id)); drop(&f, o.id); break;
        case OP_FORWARD: follow_forward(&f, &o, (const int32_t *)payload); break;
        case OP_DRAFT: follow_draft(&f, &o); break;
        case OP_VERIFY: follow_verify(&f, &o, (const int32_t *)payload); break;
        case OP_SESSION_RESET: dsv41_session_reset(find(&f, o.id)); break;
        case OP_SESSION_COPY:
            if (dsv41_session_copy(find(&f, o.id), find(&f, o.n))) fatal("rank %d: copy: %s", collective_net.rank, dsv41_error());
            break;
        case OP_PREFILL_ROWS: dsv41_session_set_prefill_rows(find(&f, o.id), o.n); break;
        case OP_SESSION_LOAD: follow_load(&f, &o); break;
        case OP_THREADS: dsv41_set_threads(o.n); break;
        case OP_REPORT: {
            rank_report *all = calloc((size_t)collective_net.n_ranks, sizeof *all);
            if (!all) { fatal("rank %d: out of memory", collective_net.rank); return -1; }
            report(find(&f, o.id), o.n, all);
            free(all);
            break;
        }
        default: fatal("rank %d: unknown op %d from rank 0", collective_net.rank, o.op);
        }
        free(payload);
    }
}
