/* session.c - a session's state: made, emptied, copied, freed.
 *
 * A session owns every cache of one sequence, the ids it was fed and the logits of the last
 * one. The caches that grow with the position start with room for a short conversation and
 * double as a call needs more, up to max_seq_len: a model of a million positions would
 * otherwise reserve gigabytes for every session. A copy moves only
 * what the position uses: the compressed caches fill from row 0 and the rows past the position's
 * closed groups are always zero, which is what makes a copy of a short sequence cheap at any
 * context size. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collective.h"
#include "dspark.h"
#include "lead.h"
#include "model.h"
#include "scratch.h"

/* The positions a new session has room for */
#define FIRST_CAP 4096

/* The rows a long prefill works through at a time by default: its working set grows with them,
 * and the weights are read once per tile, which costs little past a few hundred rows. */
#define PREFILL_TILE 512

/* The bytes of top-k or candidate rows a session keeps allocated between calls
 * (session_end_call): a decode step takes 2 KB of top-k and 8 KB of candidate blocks at
 * V4.1-Flash's geometry, a verify of a few dozen rows some 64 KB, so those steps reuse their
 * buffers; a prefill's rows (10 KB each there) are given back when its call ends. */
#define SLOT_KEEP_BYTES (64 << 10)

/* Compressed rows a kv-source layer of ratio `ratio` has closed at position pos. */
static size_t closed_groups(int32_t pos, int32_t ratio) { return (size_t)(pos / ratio); }

void session_clear(dsv41_session *s, int32_t reach) {
    const config *c = &s->m->cfg;
    for (int32_t l = 0; l < c->n_layers; l++) {
        layer_state *st = &s->layers[l];
        size_t ratio = (size_t)c->compress_ratio[l], used = ratio ? closed_groups(reach, (int32_t)ratio) : 0;
        memset(st->window, 0, (size_t)c->window_size * window_row_bytes(c));
        if (!c->is_kv_source[l]) continue;
        memset(st->ckv, 0, used * ckv_row_bytes(c));
        memset(st->ik, 0, used * ik_row_bytes(c));
        memset(st->kv_state, 0, ratio * c->head_dim * sizeof(float));
        for (size_t i = 0; i < ratio * c->head_dim; i++) st->score_state[i] = -INFINITY;
    }
    memset(s->ngram_cache, 0, (size_t)reach * sizeof *s->ngram_cache);
    if (s->draft) dspark_state_clear(s->m, s->draft);
    s->pos = 0;
    s->has_logits = 0;
    s->shared.compress_kv = s->shared.index_k = NULL;
    session_end_call(s);
}

/* *p (capacity *cap bytes) freed when it is larger than SLOT_KEEP_BYTES */
static void slot_trim(int32_t **p, size_t *cap) {
    if (*cap <= SLOT_KEEP_BYTES) return;
    free(*p);
    *p = NULL;
    *cap = 0;
}

void session_end_call(dsv41_session *s) {
    shared_slots *sh = &s->shared;
    sh->topk_rows = sh->topk_width = sh->cand_rows = sh->cand_width = 0;
    slot_trim(&sh->topk, &sh->topk_cap);
    slot_trim(&sh->cand, &sh->cand_cap);
}

int session_run(dsv41_session *const *s, int32_t count, void (*fn)(void *ctx), void *ctx) {
    if (scratch_run(fn, ctx) == 0) return 0;
    if (s[0]->m->part.n_ranks > 1) collective_net.fail(collective_net.ctx, dsv41_error());
    for (int32_t i = 0; i < count; i++) session_clear(s[i], s[i]->cap);
    return -1;
}

dsv41_session *dsv41_session_new(const dsv41_model *m) {
    const config *c = &m->cfg;
    dsv41_session *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    s->m = m;
    s->tile_rows = PREFILL_TILE;
    atomic_init(&s->cancel, 0);
    s->logits = calloc((size_t)c->vocab_size, sizeof *s->logits);
    s->layers = calloc((size_t)c->n_layers, sizeof *s->layers);
    if (!s->logits || !s->layers) goto oom;
    if (m->draft && !(s->draft = dspark_state_new(m))) goto oom;
    for (int32_t l = 0; l < c->n_layers; l++) {
        layer_state *st = &s->layers[l];
        int32_t ratio = c->compress_ratio[l];
        st->window = calloc((size_t)c->window_size, window_row_bytes(c));
        if (!st->window) goto oom;
        if (!c->is_kv_source[l]) continue;
        st->kv_state = calloc((size_t)ratio * c->head_dim, sizeof(float));
        st->score_state = malloc((size_t)ratio * c->head_dim * sizeof(float));
        if (!st->kv_state || !st->score_state) goto oom;
    }
    if (session_reserve(s, c->max_seq_len < FIRST_CAP ? c->max_seq_len : FIRST_CAP)) goto oom;
    session_clear(s, 0);
    lead_session_new(s);
    return s;
oom:
    set_error("out of memory creating a session");
    dsv41_session_free(s);
    return NULL;
}

void dsv41_session_free(dsv41_session *s) {
    if (!s) return;
    lead_session_free(s);
    for (int32_t l = 0; s->layers && l < s->m->cfg.n_layers; l++) {
        layer_state *st = &s->layers[l];
        free(st->window);
        free(st->ckv);
        free(st->ik);
        free(st->kv_state);
        free(st->score_state);
    }
    free(s->layers);
    dspark_state_free(s->draft);
    free(s->ngram_cache);
    free(s->tokens);
    free(s->logits);
    free(s->shared.topk);
    free(s->shared.cand);
    free(s);
}

int32_t dsv41_session_pos(const dsv41_session *s) { return s->pos; }

const int32_t *dsv41_session_tokens(const dsv41_session *s, int32_t *n) {
    *n = s->pos;
    return s->tokens;
}

const float *dsv41_session_logits(const dsv41_session *s) { return s->has_logits ? s->logits : NULL; }

int dsv41_session_reset(dsv41_session *s) {
    session_clear(s, s->pos);
    lead_session_reset(s);
    return 0;
}

/* *p [old][row] grown to [n][row], the new rows zero */
static int grow_rows(void *p, size_t old, size_t n, size_t row) {
    void *q = realloc(*(void **)p, n * row);
    if (!q) return -1;
    memset((char *)q + old * row, 0, (n - old) * row);
    *(void **)p = q;
    return 0;
}

int session_reserve(dsv41_session *s, int32_t n) {
    const config *c = &s->m->cfg;
    if (n <= s->cap) return 0;
    int32_t cap = s->cap > c->max_seq_len / 2 ? c->max_seq_len : 2 * s->cap > n ? 2 * s->cap : n, lk, li;
    /* the shared slots point into the caches that move: told by layer, as a copy does */
    lk = slot_layer(s, s->shared.compress_kv, 0);
    li = slot_layer(s, s->shared.index_k, 1);
    int rc = grow_rows(&s->ngram_cache, (size_t)s->cap, (size_t)cap, sizeof *s->ngram_cache) ||
             grow_rows(&s->tokens, (size_t)s->cap, (size_t)cap, sizeof *s->tokens);
    for (int32_t l = 0; rc == 0 && l < c->n_layers; l++) {
        if (!c->is_kv_source[l]) continue;
        int32_t r = c->compress_ratio[l];
        size_t was = s->cap ? closed_groups(s->cap, r) + 1 : 0, now = closed_groups(cap, r) + 1;
        rc = grow_rows(&s->layers[l].ckv, was, now, ckv_row_bytes(c)) || grow_rows(&s->layers[l].ik, was, now, ik_row_bytes(c));
    }
    s->shared.compress_kv = lk >= 0 ? s->layers[lk].ckv : NULL;
    s->shared.index_k = li >= 0 ? s->layers[li].ik : NULL;
    if (rc) return set_error("out of memory growing a session to %d positions", cap);
    s->cap = cap;
    return 0;
}

void session_unpack_rows(const config *c, const uint8_t *rows, int64_t n, int index_keys, float *out) {
    size_t d = (size_t)(index_keys ? c->index_head_dim : c->head_dim), rb = index_keys ? ik_row_bytes(c) : ckv_row_bytes(c);
    for (int64_t r = 0; r < n; r++) {
        if (index_keys) fp4_unpack_e8m0(rows + r * rb, d, out + r * d);
        else fp4_unpack_e4m3(rows + r * rb, d, out + r * d);
    }
}

int32_t slot_layer(const dsv41_session *s, const uint8_t *p, int index_keys) {
    for (int32_t l = 0; p && l < s->m->cfg.n_layers; l++)
        if (p == (index_keys ? s->layers[l].ik : s->layers[l].ckv)) return l;
    return -1;
}

int dsv41_session_copy(dsv41_session *dst, const dsv41_session *src) {
    const config *c = &src->m->cfg;
    if (dst->m != src->m) return set_error("session: a copy needs two sessions of one model");
    if (dst == src) return 0;
    if (session_reserve(dst, src->pos)) return -1;
    session_clear(dst, dst->pos);
    for (int32_t l = 0; l < c->n_layers; l++) {
        layer_state *d = &dst->layers[l];
        const layer_state *sr = &src->layers[l];
        memcpy(d->window, sr->window, (size_t)c->window_size * window_row_bytes(c));
        if (!c->is_kv_source[l]) continue;
        size_t ratio = (size_t)c->compress_ratio[l], used = closed_groups(src->pos, (int32_t)ratio);
        memcpy(d->ckv, sr->ckv, used * ckv_row_bytes(c));
        memcpy(d->ik, sr->ik, used * ik_row_bytes(c));
        memcpy(d->kv_state, sr->kv_state, ratio * c->head_dim * sizeof(float));
        memcpy(d->score_state, sr->score_state, ratio * c->head_dim * sizeof(float));
    }
    if (src->draft) dspark_state_copy(src->m, dst->draft, src->draft);
    memcpy(dst->ngram_cache, src->ngram_cache, (size_t)src->pos * sizeof *src->ngram_cache);
    memcpy(dst->tokens, src->tokens, (size_t)src->pos * sizeof *src->tokens);
    memcpy(dst->logits, src->logits, (size_t)c->vocab_size * sizeof *src->logits);
    dst->has_logits = src->has_logits;
    dst->pos = src->pos;
    /* the slots that point into the caches, told by layer; the per-call rows are empty between
     * calls (session_end_call), in both */
    int32_t lk = slot_layer(src, src->shared.compress_kv, 0), li = slot_layer(src, src->shared.index_k, 1);
    dst->shared.compress_kv = lk >= 0 ? dst->layers[lk].ckv : NULL;
    dst->shared.index_k = li >= 0 ? dst->layers[li].ik : NULL;
    lead_session_copy(dst, src);
    return 0;
}

void dsv41_session_cancel(dsv41_session *s) { atomic_store(&s->cancel, 1); }

int dsv41_session_set_prefill_rows(dsv41_session *s, int32_t rows) {
    if (rows < 1) return set_error("session: prefill rows must be at least 1, not %d", rows);
    s->tile_rows = rows;
    lead_prefill_rows(s, rows);
    return 0;
}

void dsv41_session_set_progress(dsv41_session *s, void (*fn)(void *ctx, int32_t done, int32_t total), void *ctx) {
    s->progress = fn;
    s->progress_ctx = ctx;
}
