/* dist.c - one model split across the ranks of a job: expert parallel, bit-identical to one
 * process.
 *
 * What is split and why (docs/DISTRIBUTED.md has the numbers): a decoded token reads every
 * dense matrix but only 6 of 384 experts per layer and 24 rows of each Engram table, so the
 * experts and the tables are what outgrow one machine, while the dense part fits on each.
 * Running the dense part on every rank costs no message: the ranks meet once per MoE layer
 * (the experts' outputs), once per Engram layer (the rows) and once for the head, whose rows
 * are split too because it is the largest matrix a token reads whole. Running attention on
 * rank 0 alone would add a broadcast of the MoE input per layer to the critical path and
 * leave the other ranks idle meanwhile.
 *
 * Exactness: one process adds the expert outputs in f32 in increasing expert id. A reduction
 * across ranks would add them in an order MPI chooses, so each rank's outputs travel whole
 * (bf16 values, sent as bf16) and every rank adds all of them in the one process's order.
 * Routing is computed on every rank from identical inputs, so the ranks agree on who sends
 * what without asking. Every share is contiguous ([n r / K, n (r+1) / K) of the experts, table
 * rows, head rows), so a rank's part of an exchange lands where one process would have it.
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

#include "dist.h"
#include "kernels/kernels.h"
#include "numerics.h"
#include "scratch.h"

static dsv41_dist D = {0, 1, NULL, NULL, NULL, NULL};
static pthread_mutex_t lead = PTHREAD_MUTEX_INITIALIZER; /* leader: one distributed call at a time */
static int32_t last_id;                                   /* leader: the last handle given out */
static uint64_t sent_total;                               /* bytes this rank sent to the others */

int dsv41_set_dist(const dsv41_dist *d) {
    if (d->n_ranks < 1 || d->rank < 0 || d->rank >= d->n_ranks)
        return set_error("distribution: rank %d of %d ranks", d->rank, d->n_ranks);
    if (d->n_ranks > 1 && (!d->allgather || !d->broadcast || !d->fail))
        return set_error("distribution: the transport needs allgather, broadcast and fail");
    D = *d;
    return 0;
}

static int leading(void) { return D.n_ranks > 1 && D.rank == 0; }

/* Ends the job with a one-line message: a follower that cannot repeat the leader's call would
 * leave the ranks' collectives out of step. */
static void fatal(const char *fmt, ...) {
    char msg[700];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    D.fail(D.ctx, msg);
}

static void gather(void *buf, const int64_t *counts) {
    __atomic_fetch_add(&sent_total, (uint64_t)counts[D.rank] * (uint64_t)(D.n_ranks - 1), __ATOMIC_RELAXED);
    D.allgather(D.ctx, buf, counts);
}

static void bcast(void *buf, int64_t n) {
    if (D.rank == 0) __atomic_fetch_add(&sent_total, (uint64_t)n * (uint64_t)(D.n_ranks - 1), __ATOMIC_RELAXED);
    D.broadcast(D.ctx, buf, n);
}

/* ---- ops: what the leader tells the followers */
enum { OP_END, OP_LOAD_DIR, OP_LOAD_GOLDEN, OP_LOAD_BUILTIN, OP_MODEL_FREE, OP_SESSION_NEW, OP_SESSION_FREE,
       OP_FORWARD, OP_THREADS, OP_REPORT };
#define INLINE_IDS 27

typedef struct {
    int32_t op, id;             /* what, on which model or session */
    int32_t n, flags;           /* op's count (tokens, threads, a new handle, the exit status) and flags */
    int32_t len;                /* bytes of payload broadcast after this header */
    int32_t ids[INLINE_IDS];    /* a forward's ids when they fit: a decode step is one broadcast */
} dist_op;

static void send_op(dist_op o, const void *payload) {
    bcast(&o, sizeof o);
    if (o.len > 0) bcast((void *)payload, o.len);
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

/* a weight's form and, when every rank reads it whole, its first bytes and scale */
static void mix_weight(uint64_t *h, const weight *w, int whole) {
    int64_t form[5] = {w->type, w->mode, w->rows, w->cols, w->scale_rows};
    mix(h, form, sizeof form);
    if (!whole || !w->data) return;
    int64_t n = w->rows * w->cols / 2;
    mix(h, w->data, (size_t)(n < 32 ? n : 32));
    if (w->scale) mix(h, w->scale, 1);
}

/* A digest of the config and the weights, without touching what a rank does not own: two
 * directories with different models give different digests. */
static uint64_t fingerprint(const dsv41_model *m) {
    const config *c = &m->cfg;
    uint64_t h = 0xCBF29CE484222325ULL;
    const int32_t ints[] = {c->vocab_size, c->dim, c->n_layers, c->n_heads, c->head_dim, c->rope_head_dim,
                            c->q_lora_rank, c->o_lora_rank, c->o_groups, c->window_size, c->candidate_source_layer,
                            c->candidate_topk_blocks, c->candidate_block_size, c->index_n_heads, c->index_head_dim,
                            c->index_topk, c->moe_inter_dim, c->n_routed_experts, c->n_shared_experts,
                            c->n_activated_experts, c->norm_topk_prob, c->hc_mult, c->hc_sinkhorn_iters,
                            c->original_seq_len, c->max_seq_len, c->n_engram, c->engram_max_ngram,
                            c->engram_n_heads, c->engram_head_dim, c->engram_pad_id};
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
    for (int32_t l = 0; l < c->n_layers; l++) {
        const layer_weights *L = &m->layers[l];
        const weight *dense[32];
        int n = layer_dense_weights(L, dense);
        for (int i = 0; i < n; i++) mix_weight(&h, dense[i], 1);
        for (int32_t e = 0; e < c->n_routed_experts; e++) {
            mix_weight(&h, &L->w1[e], 0);
            mix_weight(&h, &L->w2[e], 0);
            mix_weight(&h, &L->w3[e], 0);
        }
        if (L->engram >= 0) mix_weight(&h, &L->eg_table, 0);
        mix(&h, L->attn_norm, (size_t)c->dim * sizeof *L->attn_norm);
        mix(&h, L->ffn_norm, (size_t)c->dim * sizeof *L->ffn_norm);
    }
    return h;
}

typedef struct {
    int32_t ok;
    char kernels[12];      /* the kernel set: the ranks must round alike to route alike */
    uint64_t print;        /* fingerprint() */
    char msg[240];         /* why the load failed */
} vote;

/* Every rank says whether it loaded m and what; on any failure or disagreement every rank
 * drops its model and the leader's error names the first rank at fault. */
static dsv41_model *agree(dsv41_model *m, int32_t id) {
    scratch_mark mark = scratch_begin();
    vote *v = scratch_bytes((size_t)D.n_ranks * sizeof *v);
    int64_t *counts = scratch_i64(D.n_ranks);
    memset(v, 0, (size_t)D.n_ranks * sizeof *v);
    vote *me = &v[D.rank];
    me->ok = m != NULL;
    snprintf(me->kernels, sizeof me->kernels, "%s", kernels_current()->name);
    if (m) me->print = fingerprint(m);
    else snprintf(me->msg, sizeof me->msg, "%s", dsv41_error());
    for (int32_t r = 0; r < D.n_ranks; r++) counts[r] = sizeof *v;
    gather(v, counts);
    int bad = 0;
    for (int32_t r = 0; r < D.n_ranks && !bad; r++) {
        if (!v[r].ok) bad = r ? set_error("rank %d: %s", r, v[r].msg) : set_error("%s", v[r].msg);
        else if (v[r].print != v[0].print)
            bad = set_error("rank %d loaded a different model than rank 0 (the config or the weights differ)", r);
        else if (strcmp(v[r].kernels, v[0].kernels))
            bad = set_error("rank %d computes with the %s kernels and rank 0 with %s: the ranks would route differently",
                            r, v[r].kernels, v[0].kernels);
    }
    scratch_end(mark);
    if (bad) {
        dsv41_model_free(m);
        return NULL;
    }
    m->part = (model_part){D.rank, D.n_ranks, id};
    return m;
}

static dsv41_model *load(int32_t op, const char *path, const dsv41_golden *g) {
    if (!leading()) return load_local(op, path, g);
    pthread_mutex_lock(&lead);
    dist_op o = {.op = op, .id = ++last_id, .len = (int32_t)strlen(path) + 1};
    send_op(o, path);
    dsv41_model *m = agree(load_local(op, path, g), o.id);
    pthread_mutex_unlock(&lead);
    return m;
}

dsv41_model *dsv41_model_load(const char *dir) { return load(OP_LOAD_DIR, dir, NULL); }
dsv41_model *dsv41_model_from_golden(const dsv41_golden *g) { return load(OP_LOAD_GOLDEN, golden_path(g), g); }
dsv41_model *dsv41_model_builtin(void) { return load(OP_LOAD_BUILTIN, "", NULL); }

/* ---- leader hooks */
static int leads(const dsv41_model *m) { return leading() && m && m->part.n_ranks > 1; }

static void tell(dist_op o) {
    pthread_mutex_lock(&lead);
    send_op(o, NULL);
    pthread_mutex_unlock(&lead);
}

void dist_model_free(const dsv41_model *m) {
    if (leads(m)) tell((dist_op){.op = OP_MODEL_FREE, .id = m->part.id});
}

void dist_session_new(dsv41_session *s) {
    if (!leads(s->m)) return;
    pthread_mutex_lock(&lead);
    s->dist_id = ++last_id;
    send_op((dist_op){.op = OP_SESSION_NEW, .id = s->m->part.id, .n = s->dist_id}, NULL);
    pthread_mutex_unlock(&lead);
}

void dist_session_free(const dsv41_session *s) {
    if (leads(s->m) && s->dist_id) tell((dist_op){.op = OP_SESSION_FREE, .id = s->dist_id}); /* 0: never announced */
}

void dist_threads(int32_t n) {
    if (leading()) tell((dist_op){.op = OP_THREADS, .n = n});
}

void dist_forward_begin(const dsv41_session *s, const int32_t *ids, int32_t n, int32_t flags) {
    if (!leads(s->m)) return;
    pthread_mutex_lock(&lead);
    dist_op o = {.op = OP_FORWARD, .id = s->dist_id, .n = n, .flags = flags, .len = n > INLINE_IDS ? 4 * n : 0};
    if (n <= INLINE_IDS) memcpy(o.ids, ids, (size_t)n * sizeof *ids);
    send_op(o, ids);
}

void dist_forward_end(const dsv41_session *s) {
    if (leads(s->m)) pthread_mutex_unlock(&lead);
}

void dsv41_dist_end(int32_t status) {
    if (leading()) tell((dist_op){.op = OP_END, .n = status});
}

/* ---- the exchanges inside a forward */
void dist_share_picks(const dsv41_model *m, const int64_t *first, int32_t e0, int32_t e1, float *ys) {
    const model_part *p = &m->part;
    const int32_t K = p->n_ranks, E = m->cfg.n_routed_experts;
    const int64_t dim = m->cfg.dim, p0 = first[e0], np = first[e1] - p0;
    if (np == 0) return; /* every rank sees the same routing, so all skip it */
    scratch_mark mark = scratch_begin();
    int64_t *counts = scratch_i64(K), mine0 = 0, mine1 = 0;
    for (int32_t r = 0; r < K; r++) {
        int32_t lo = (int32_t)((int64_t)E * r / K), hi = (int32_t)((int64_t)E * (r + 1) / K);
        lo = lo < e0 ? e0 : lo > e1 ? e1 : lo;
        hi = hi < e0 ? e0 : hi > e1 ? e1 : hi;
        counts[r] = (first[hi] - first[lo]) * dim * 2;
        if (r == p->rank) mine0 = first[lo] - p0, mine1 = first[hi] - p0;
    }
    uint16_t *buf = scratch_bytes((size_t)(np * dim) * sizeof *buf);
    for (int64_t i = mine0 * dim; i < mine1 * dim; i++) buf[i] = f32_to_bf16(ys[i]); /* exact: ys are bf16 */
    gather(buf, counts);
    for (int64_t i = 0; i < np * dim; i++)
        if (i < mine0 * dim || i >= mine1 * dim) ys[i] = bf16_to_f32(buf[i]);
    scratch_end(mark);
}

/* the rank owning row of n rows */
static int32_t owner(int64_t row, int64_t n, int32_t K) {
    int32_t r = (int32_t)(row * K / n);
    while (r + 1 < K && n * (r + 1) / K <= row) r++;
    while (r > 0 && n * r / K > row) r--;
    return r;
}

void dist_table_rows(const dsv41_model *m, const weight *table, const int64_t *rows, int64_t n, float *out) {
    const int32_t K = m->part.n_ranks, me = m->part.rank;
    const int64_t hd = table->cols, nb = (hd + 31) / 32, rb = hd + nb; /* a row as stored: e4m3 codes, e8m0 scales */
    scratch_mark mark = scratch_begin();
    int32_t *own = scratch_i32(n);
    int64_t *counts = scratch_i64(K), *cnt = scratch_i64(K), *at = scratch_i64(K), *next = scratch_i64(K);
    memset(cnt, 0, (size_t)K * sizeof *cnt);
    for (int64_t i = 0; i < n; i++) cnt[own[i] = owner(rows[i], table->rows, K)]++;
    for (int32_t r = 0; r < K; r++) {
        counts[r] = cnt[r] * rb;
        at[r] = r ? at[r - 1] + counts[r - 1] : 0;
        next[r] = 0;
    }
    uint8_t *buf = scratch_bytes((size_t)(n * rb) + 1);
    /* this rank's part: its rows' codes in slot order, then their scales */
    uint8_t *codes = buf + at[me], *scales = codes + cnt[me] * hd;
    for (int64_t i = 0, j = 0; i < n; i++) {
        if (own[i] != me) continue;
        memcpy(codes + j * hd, (const uint8_t *)table->data + rows[i] * hd, (size_t)hd);
        memcpy(scales + j * nb, table->scale + (rows[i] / table->scale_rows) * nb, (size_t)nb);
        j++;
    }
    gather(buf, counts);
    for (int64_t i = 0; i < n; i++) {
        int32_t r = own[i];
        weight part = {DT_E4M3, AS_STORED, cnt[r], hd, buf + at[r], buf + at[r] + cnt[r] * hd, 1};
        for (int64_t d = 0; d < hd; d++) out[i * hd + d] = bf16_round(weight_get(&part, next[r], d));
        next[r]++;
    }
    scratch_end(mark);
}

void dist_linear(const dsv41_model *m, const weight *w, const float *x, int64_t T, float *y) {
    const int32_t K = m->part.n_ranks, me = m->part.rank;
    const int64_t R = w->rows;
    scratch_mark mark = scratch_begin();
    int64_t *counts = scratch_i64(K);
    float *buf = scratch_f32(T * R); /* rank r's part: [T][its rows] */
    for (int32_t r = 0; r < K; r++) counts[r] = T * (R * (r + 1) / K - R * r / K) * (int64_t)sizeof *buf;
    int64_t lo = R * me / K, n = R * (me + 1) / K - lo;
    if (n > 0) {
        linear_item it = {w, lo, n, x, T, w->cols, buf + T * lo};
        linear_batch(&it, 1);
    }
    gather(buf, counts);
    for (int32_t r = 0; r < K; r++) {
        int64_t r0 = R * r / K, nr = R * (r + 1) / K - r0;
        for (int64_t t = 0; t < T; t++) memcpy(y + t * R + r0, buf + T * r0 + t * nr, (size_t)nr * sizeof *y);
    }
    scratch_end(mark);
}

/* ---- the benchmark's per-rank figures */
static void report(const dsv41_model *m, int32_t measure, rank_report *all) {
    scratch_mark mark = scratch_begin();
    int64_t *counts = scratch_i64(D.n_ranks);
    memset(all, 0, (size_t)D.n_ranks * sizeof *all);
    rank_report *me = &all[D.rank];
    me->sent = (double)__atomic_load_n(&sent_total, __ATOMIC_RELAXED);
    if (measure) {
        me->triad_gbps = bench_triad_gbps();
        me->peak_rss = bench_peak_rss();
        me->decode_bytes = part_decode_bytes(m);
    }
    for (int32_t r = 0; r < D.n_ranks; r++) counts[r] = sizeof *all;
    gather(all, counts);
    scratch_end(mark);
}

void dist_report(const dsv41_model *m, int32_t measure, rank_report *all) {
    if (!leads(m)) {
        all[0] = (rank_report){measure ? bench_triad_gbps() : 0, measure ? bench_peak_rss() : 0,
                               measure ? part_decode_bytes(m) : 0, 0};
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
    fatal("rank %d: rank 0 named handle %d, which this rank does not hold", D.rank, id);
    return NULL;
}

static void hold(follower *f, int32_t id, void *p) {
    handle *h = realloc(f->held, (f->n + 1) * sizeof *h);
    if (!h) { fatal("rank %d: out of memory", D.rank); return; }
    f->held = h;
    f->held[f->n++] = (handle){id, p};
}

static void drop(follower *f, int32_t id) {
    for (size_t i = 0; i < f->n; i++)
        if (f->held[i].id == id) { f->held[i] = f->held[--f->n]; return; }
}

static void follow_forward(follower *f, const dist_op *o, const int32_t *payload) {
    dsv41_session *s = find(f, o->id);
    const int32_t *ids = o->n > INLINE_IDS ? payload : o->ids;
    size_t need = (o->flags & FWD_LOGITS) ? (size_t)s->m->cfg.vocab_size * (size_t)(o->flags & FWD_ALL ? o->n : 1) : 0;
    if (need > f->cap) {
        free(f->logits);
        f->cap = 0;
        if (!(f->logits = malloc(need * sizeof *f->logits))) { fatal("rank %d: out of memory", D.rank); return; }
        f->cap = need;
    }
    if ((o->flags & FWD_TRACE) && !f->trace && !(f->trace = dsv41_trace_new())) { fatal("rank %d: out of memory", D.rank); return; }
    if (f->trace) dsv41_trace_clear(f->trace);
    float *lg = need ? f->logits : NULL;
    int rc = o->flags & FWD_ALL ? dsv41_session_forward_all(s, ids, o->n, lg)
                                : dsv41_session_forward(s, ids, o->n, lg, o->flags & FWD_TRACE ? f->trace : NULL);
    if (rc) fatal("rank %d: forward: %s", D.rank, dsv41_error());
}

int32_t dsv41_follow(void) {
    if (D.n_ranks < 2 || D.rank == 0) return set_error("dsv41_follow: only ranks other than 0 of a distribution follow");
    follower f = {NULL, 0, NULL, 0, NULL};
    for (;;) {
        dist_op o;
        bcast(&o, sizeof o);
        char *payload = NULL;
        if (o.len > 0) {
            if (!(payload = malloc((size_t)o.len))) { fatal("rank %d: out of memory", D.rank); return -1; }
            bcast(payload, o.len);
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
            dsv41_model *m = agree(load_local(o.op, payload, NULL), o.id);
            if (m) hold(&f, o.id, m);
            break;
        }
        case OP_MODEL_FREE: dsv41_model_free(find(&f, o.id)); drop(&f, o.id); break;
        case OP_SESSION_NEW:
            if (!(s = dsv41_session_new(find(&f, o.id)))) { fatal("rank %d: %s", D.rank, dsv41_error()); return -1; }
            s->dist_id = o.n;
            hold(&f, o.n, s);
            break;
        case OP_SESSION_FREE: dsv41_session_free(find(&f, o.id)); drop(&f, o.id); break;
        case OP_FORWARD: follow_forward(&f, &o, (const int32_t *)payload); break;
        case OP_THREADS: dsv41_set_threads(o.n); break;
        case OP_REPORT: {
            rank_report *all = calloc((size_t)D.n_ranks, sizeof *all);
            if (!all) { fatal("rank %d: out of memory", D.rank); return -1; }
            report(find(&f, o.id), o.n, all);
            free(all);
            break;
        }
        default: fatal("rank %d: unknown op %d from rank 0", D.rank, o.op);
        }
        free(payload);
    }
}
