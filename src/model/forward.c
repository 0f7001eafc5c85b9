/* forward.c - sessions and Transformer.forward for one call.
 *
 * The residual stream is hc_mult bf16 copies per token. Each block mixes them with the delayed
 * pre-mix of V4.1: attention collapses the copies with the pre weights the previous block's FFN
 * computed (one-hot copy 0 for layer 0), and the FFN collapses with the pre weights its own
 * attention computed. The final collapse uses the last FFN's pre. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collective.h"
#include "dspark.h"
#include "lead.h"
#include "numerics.h"
#include "scratch.h"

/* The shared slots as the golden records them after a source layer: the used prefix of the
 * published caches and the current top-k / candidate rows. */
static void trace_shared(const dsv41_session *s, int32_t l, int64_t T, dsv41_trace *tr) {
    const config *c = &s->m->cfg;
    const shared_slots *sh = &s->shared;
    int64_t used = (s->pos + T) / c->compress_ratio[l];
    for (int keys = 0; keys < 2; keys++) { /* the packed caches as the values they hold */
        const uint8_t *rows = keys ? sh->index_k : sh->compress_kv;
        if (!rows) continue;
        scratch_mark mark = scratch_begin();
        int32_t n = keys ? c->index_head_dim : c->head_dim;
        float *v = scratch_f32(used * n);
        session_unpack_rows(c, rows, used, keys, v);
        trace_f32(tr, v, 3, (int64_t[]){1, used, n}, keys ? "shared.L%d.index_k" : "shared.L%d.compress_kv", l);
        scratch_end(mark);
    }
    if (sh->topk_rows)
        trace_i32(tr, sh->topk, 3, (int64_t[]){1, sh->topk_rows, sh->topk_width}, "shared.L%d.topk_idxs", l);
    if (sh->cand_rows) {
        scratch_mark mark = scratch_begin();
        int64_t n = (int64_t)sh->cand_rows * sh->cand_width, kb = cand_blocks(c, sh->cand_width);
        int32_t *v = scratch_i32(n);
        uint8_t *keep = scratch_bytes((size_t)sh->cand_width);
        for (int64_t r = 0; r < sh->cand_rows; r++) {
            cand_mask(c, sh->cand + r * kb, sh->cand_width, keep);
            for (int32_t i = 0; i < sh->cand_width; i++) v[r * sh->cand_width + i] = keep[i];
        }
        trace_i32(tr, v, 3, (int64_t[]){1, sh->cand_rows, sh->cand_width}, "shared.L%d.candidates", l);
        scratch_end(mark);
    }
}

/* One block over the rows of every session of seq: h [T][hc][dim] and pre_mix [T][hc] in
 * place. All but attention is row by row, so it runs once over the whole batch. */
static void block(const batch_seq *seq, int32_t count, int32_t l, int64_t T, const int64_t *hashes, float *h,
                  float *pre_mix, dsv41_trace *tr) {
    const dsv41_model *m = seq[0].s->m;
    const config *c = &m->cfg;
    const layer_weights *L = &m->layers[l];
    int32_t hc = c->hc_mult, dim = c->dim, k = c->n_activated_experts;
    int64_t hsz = T * hc * dim;
    scratch_mark mark = scratch_begin();
    float *a_pre = scratch_f32(T * hc), *a_post = scratch_f32(T * hc), *a_comb = scratch_f32(T * hc * hc);
    float *f_pre = scratch_f32(T * hc), *f_post = scratch_f32(T * hc), *f_comb = scratch_f32(T * hc * hc);
    float *x = scratch_f32(T * dim), *xn = scratch_f32(T * dim), *y = scratch_f32(T * dim), *h_mid = scratch_f32(hsz);
    float *rw = scratch_f32(T * k);
    int32_t *ri = scratch_i32(T * k);

    if (L->engram >= 0) engram_forward(m, l, hashes, T, h, tr);
    if (m->draft) dspark_tap(seq, count, l, T, h); /* the drafter reads the inputs of its target layers */
    trace_f32(tr, h, 4, (int64_t[]){1, T, hc, dim}, "L%d.h_in", l);
    trace_f32(tr, pre_mix, 3, (int64_t[]){1, T, hc}, "L%d.pre_mix_in", l);

    hc_mixes(m, h, T, &L->hc_attn_fn, L->hc_attn_scale, L->hc_attn_base, a_pre, a_post, a_comb);
    hc_pre(h, pre_mix, T, hc, dim, x);
    rms_norm(x, L->attn_norm, T, dim, c->norm_eps, xn);
    trace_f32(tr, xn, 3, (int64_t[]){1, T, dim}, "L%d.attn_in", l);
    attention_forward(seq, count, l, xn, T, y, tr);
    trace_f32(tr, y, 3, (int64_t[]){1, T, dim}, "L%d.attn_out", l);
    hc_post(y, h, a_post, a_comb, T, hc, dim, h_mid);

    hc_mixes(m, h_mid, T, &L->hc_ffn_fn, L->hc_ffn_scale, L->hc_ffn_base, f_pre, f_post, f_comb);
    hc_pre(h_mid, a_pre, T, hc, dim, x);
    rms_norm(x, L->ffn_norm, T, dim, c->norm_eps, xn);
    trace_f32(tr, xn, 3, (int64_t[]){1, T, dim}, "L%d.ffn_in", l);
    moe_forward(m, l, xn, T, y, rw, ri);
    hc_post(y, h_mid, f_post, f_comb, T, hc, dim, h);
    memcpy(pre_mix, f_pre, (size_t)(T * hc) * sizeof *pre_mix);

    if (tr) {
        trace_f32(tr, a_pre, 3, (int64_t[]){1, T, hc}, "L%d.attn_pre", l);
        trace_f32(tr, a_post, 3, (int64_t[]){1, T, hc}, "L%d.attn_post", l);
        trace_f32(tr, a_comb, 4, (int64_t[]){1, T, hc, hc}, "L%d.attn_comb", l);
        trace_f32(tr, f_pre, 3, (int64_t[]){1, T, hc}, "L%d.ffn_pre", l);
        trace_f32(tr, f_post, 3, (int64_t[]){1, T, hc}, "L%d.ffn_post", l);
        trace_f32(tr, f_comb, 4, (int64_t[]){1, T, hc, hc}, "L%d.ffn_comb", l);
        trace_f32(tr, rw, 2, (int64_t[]){T, k}, "L%d.moe_weights", l);
        trace_i32(tr, ri, 2, (int64_t[]){T, k}, "L%d.moe_indices", l);
        trace_f32(tr, y, 3, (int64_t[]){1, T, dim}, "L%d.ffn_out", l);
        trace_f32(tr, h, 4, (int64_t[]){1, T, hc, dim}, "L%d.h_out", l);
        trace_f32(tr, pre_mix, 3, (int64_t[]){1, T, hc}, "L%d.pre_mix_out", l);
        if (c->is_kv_source[l] || c->is_index_source[l]) trace_shared(seq[0].s, l, T, tr);
    }
    scratch_end(mark);
}

/* A cancel request, taken (it stops one call). The ranks of a distributed model run the same
 * calls in step, so there a request is never taken. */
static int cancelled(dsv41_session *s) { return s->m->part.n_ranks == 1 && atomic_exchange(&s->cancel, 0); }

/* What dsv41_batch_forward checks before any session changes, and forward() keeps: the
 * sessions are distinct, each a prefill at position 0 or one token after it, or the rows of a
 * verify (s->verify set: spec.c), each of which computes what one token after it would. */
static inline int batch_valid(const batch_seq *seq, int32_t count) {
    for (int32_t i = 0; i < count; i++) {
        if (seq[i].s->pos > 0 && seq[i].T != 1 && !seq[i].s->verify) return 0;
        for (int32_t k = 0; k < i; k++)
            if (seq[k].s == seq[i].s) return 0;
    }
    return 1;
}

/* The residual stream of n tokens ids as the model's input: h [n][hc][dim], the embedding in
 * every copy. Split by rows each row comes from the rank owning it, as an Engram row does: a
 * rank maps no pages of the others' rows (the kernel maps whole folios around a row it reads). */
static void embed_rows(const dsv41_model *m, const int32_t *ids, int64_t n, float *h) {
    int32_t hc = m->cfg.hc_mult, dim = m->cfg.dim;
    scratch_mark mark = scratch_begin();
    float *rows = NULL;
    if (m->part.n_ranks > 1 && m->part.rows == DSV41_SPLIT_ROWS) {
        int64_t *at = scratch_i64(n);
        for (int64_t t = 0; t < n; t++) at[t] = ids[t];
        collective_table_rows(m, &m->embed, at, n, 0, rows = scratch_f32(n * dim));
    }
    for (int64_t t = 0; t < n; t++) {
        float *ht = h + t * hc * dim;
        for (int32_t d = 0; d < dim; d++) ht[d] = rows ? rows[t * dim + d] : weight_get(&m->embed, ids[t], d);
        for (int32_t k = 1; k < hc; k++) memcpy(ht + k * dim, ht, (size_t)dim * sizeof *h);
    }
    scratch_end(mark);
}

/* The rows a session's part of a call takes through a layer at a time: all of them, or for a
 * prefill longer than its session's tile setting, tiles of that many rows rounded down to a
 * multiple of every compress ratio (a tile closes whole compressor groups). A trace records
 * whole calls. */
static int64_t seq_tile(const batch_seq *sq, const dsv41_trace *tr) {
    const dsv41_session *s = sq->s;
    const config *c = &s->m->cfg;
    if (s->pos > 0 || tr || sq->T <= s->tile_rows) return sq->T;
    int64_t unit = 1;
    for (int32_t l = 0; l < c->n_layers; l++) /* ratios are 0, 1 or 2 (config), so this is 1 or 2 */
        if (c->compress_ratio[l] > 1 && unit % c->compress_ratio[l]) unit *= c->compress_ratio[l];
    int64_t tile = s->tile_rows / unit * unit;
    return tile > unit ? tile : unit;
}

/* Exact row skipping (the "dependency halo" of bounded replay). A prefill must leave the last
 * row's logits and the caches: each layer's window ring (the KV of its last W = window_size
 * rows, each a function of that row's input alone), the kv sources' compressed KV, index keys
 * and compressor tails, the candidate source's candidates, the Engram history (read from the
 * ids) and the drafter's taps (the last W rows' inputs of its target layers). A kv source reads
 * every row of its input into its caches, and its keys and compressed rows are read by every
 * later row of every later compressed layer; the candidate source keeps a row of candidates per
 * row. Past the last of these layers (`full`), a row reaches another row only through the
 * window of some later layer: the norms, mHC, MoE and Engram work row by row, and an index
 * source there scores its own row's query against keys and candidates already complete. Row r
 * of a layer attends the KV of rows r - W + 1 .. r (itself included), so a layer that starts
 * at row s gives exact outputs from row s + W - 1 on (the rows before see a window cut short by
 * the rows it skipped; nothing reads their outputs, they run for their KV), and the layer after
 * it can start there. The last layer starts at T - W (its ring; its last row then has its whole
 * window), so layer l starts (W - 1) rows earlier per layer after it: at
 * T - W - (n_layers - 1 - l)(W - 1), and the first layer past `full` keeps
 * W + (D - 1)(W - 1) rows of D trimmed layers. Every row each layer computes is what the whole
 * call computes for it (the tiles' rule), so the results are the same bits. The published top-k
 * of a row is then the one of the last index source that computed the row: a slot of the call,
 * dropped when it ends (session_end_call). */
static int32_t last_full_layer(const config *c) {
    int32_t full = c->candidate_source_layer;
    for (int32_t l = 0; l < c->n_layers; l++)
        if (c->is_kv_source[l] && l > full) full = l;
    return full;
}

/* The first of a prefill's T rows that layer l computes (the rows before it skips), past layer `full` */
static int64_t layer_first_row(const config *c, int32_t full, int32_t l, int64_t T) {
    int64_t W = c->window_size, first = T - W - (int64_t)(c->n_layers - 1 - l) * (W - 1);
    return l <= full || first < 0 ? 0 : first;
}

/* The call's stream and what block() takes with it, for layer_tiles */
typedef struct {
    const int32_t *ids;     /* [T] the call's ids, the first layer's input */
    const int64_t *hashes;  /* [T][n_engram * engram_cols] */
    uint16_t *hb;           /* [T][hc][dim] the stream between layers, bf16 */
    float *pre_mix;         /* [T][hc] */
    const int64_t *tile;    /* [count] each session's tile rows (seq_tile) */
    int32_t full;           /* the last layer that computes every row (layer_first_row) */
    int64_t ncols;          /* n_engram * engram_cols: a row's hashes */
    int64_t hrow;           /* hc * dim: a row of the stream */
} call_stream;

/* Layer l over the rows of seq that it computes, in rounds: in each, every session takes its
 * next tile of them, in order, and the tiles of all the sessions go through block() together
 * (each weight read once a round), from h [sum of tiles][hc][dim] and buffers of that many rows. */
static void layer_tiles(const batch_seq *seq, int32_t count, int32_t l, const call_stream *cs, float *h) {
    const dsv41_model *m = seq[0].s->m;
    const config *c = &m->cfg;
    int32_t hc = c->hc_mult;
    int64_t hrow = cs->hrow, ncols = cs->ncols, cap = 0;
    for (int32_t i = 0; i < count; i++) cap += cs->tile[i];
    scratch_mark mark = scratch_begin();
    batch_seq *rs = scratch_bytes((size_t)count * sizeof *rs);
    int64_t *hashes = scratch_i64(cap * (ncols ? ncols : 1)), *first = scratch_i64(count);
    int32_t *who = scratch_i32(count); /* the session of each of a round's tiles */
    float *pre_mix = scratch_f32(cap * hc);
    for (int32_t i = 0; i < count; i++) first[i] = seq[i].s->pos == 0 ? layer_first_row(c, cs->full, l, seq[i].T) : 0;
    for (int64_t k = 0;; k++) {
        int32_t n = 0;
        int64_t R = 0;
        for (int32_t i = 0; i < count; i++) {
            int64_t r0 = first[i] + k * cs->tile[i], g = seq[i].row0 + r0;
            if (r0 >= seq[i].T) continue;
            int64_t rows = seq[i].T - r0 < cs->tile[i] ? seq[i].T - r0 : cs->tile[i];
            who[n] = i;
            rs[n++] = (batch_seq){seq[i].s, R, rows, r0, seq[i].T};
            if (l == 0) embed_rows(m, cs->ids + g, rows, h + R * hrow);
            else for (int64_t e = 0; e < rows * hrow; e++) h[R * hrow + e] = bf16_to_f32(cs->hb[g * hrow + e]);
            memcpy(hashes + R * ncols, cs->hashes + g * ncols, (size_t)(rows * ncols) * sizeof *hashes);
            memcpy(pre_mix + R * hc, cs->pre_mix + g * hc, (size_t)(rows * hc) * sizeof *pre_mix);
            R += rows;
        }
        if (n == 0) break;
        block(rs, n, l, R, hashes, h, pre_mix, NULL);
        for (int32_t j = 0; j < n; j++) {
            int64_t g = seq[who[j]].row0 + rs[j].at;
            for (int64_t e = 0; e < rs[j].T * hrow; e++) cs->hb[g * hrow + e] = f32_to_bf16(h[rs[j].row0 * hrow + e]);
            memcpy(cs->pre_mix + g * hc, pre_mix + rs[j].row0 * hc, (size_t)(rs[j].T * hc) * sizeof *pre_mix);
        }
    }
    scratch_end(mark);
}

/* One call of the reference for every session of seq: a prefill (pos 0, any n) or one decode
 * token each, their rows end to end (T in all). logits[i] (or NULL) gets session i's last
 * token's [vocab], or with `all` every token's [n][vocab]. A single session's prefill polls the
 * cancel request between layers and, when asked, empties the session and returns -1; a
 * one-token call after it runs whole (stopping inside it would leave its layers out of step).
 *
 * A long prefill keeps only its residual stream (and the shared top-k and candidate rows, until
 * its layers are done) for all of its rows: each layer works through the rows a tile at a time,
 * in order, so what a row reads of the rows before it (the window ring, the compressed caches,
 * the index keys) is already written, and every row computes exactly what the whole call would.
 * Between layers the stream is bf16, as the reference keeps it (every block ends in a bf16
 * rounding), so it is stored as bf16 there; the first layer's tiles take their rows from the
 * embedding. A batch does the same, its sessions' tiles side by side (layer_tiles). */
static int forward_rows(const batch_seq *seq, int32_t count, int64_t T, const int32_t *const *ids,
                        float *const *logits, int all, dsv41_trace *tr) {
    DSV41_ASSERT(batch_valid(seq, count));
    const dsv41_model *m = seq[0].s->m;
    const config *c = &m->cfg;
    int32_t hc = c->hc_mult, dim = c->dim, cols = engram_cols(c);
    int64_t ncols = (int64_t)c->n_engram * cols, hrow = (int64_t)hc * dim, cap = 0;
    scratch_mark mark = scratch_begin();
    int64_t *hashes = scratch_i64(T * ncols), *tile = scratch_i64(count);
    int32_t *all_ids = scratch_i32(T);
    /* a prefill that wants only its last row skips rows (layer_first_row); a trace records, and
     * `all` returns, every row of every layer */
    int32_t full = tr || all ? c->n_layers : last_full_layer(c), tiled = 0;
    for (int32_t i = 0; i < count; i++) {
        tile[i] = seq_tile(&seq[i], tr);
        cap += tile[i];
        tiled |= tile[i] < seq[i].T || (seq[i].s->pos == 0 && layer_first_row(c, full, c->n_layers - 1, seq[i].T) > 0);
    }
    float *h = scratch_f32(cap * hrow), *pre_mix = scratch_f32(T * hc);
    uint16_t *hb = tiled ? scratch_bytes((size_t)(T * hrow) * sizeof *hb) : NULL; /* [T][hc][dim] between layers */
    call_stream cs = {all_ids, hashes, hb, pre_mix, tile, full, ncols, hrow};

    for (int32_t i = 0; i < count; i++) { /* the n-gram hashes read each session's own history */
        memcpy(all_ids + seq[i].row0, ids[i], (size_t)seq[i].T * sizeof *all_ids);
        if (c->n_engram) engram_hash(seq[i].s, ids[i], seq[i].T, hashes + seq[i].row0 * ncols);
    }
    trace_i32(tr, all_ids, 2, (int64_t[]){1, T}, "input_ids");
    if (c->n_engram) trace_i64(tr, hashes, 4, (int64_t[]){1, T, c->n_engram, cols}, "engram_hashes");
    for (int64_t i = 0; i < T * hc; i++) pre_mix[i] = i % hc == 0 ? 1.0f : 0.0f;
    if (!hb) embed_rows(m, all_ids, T, h);
    if (tr) { /* copy 0 of each row */
        float *x = scratch_f32(T * dim);
        for (int64_t t = 0; t < T; t++) memcpy(x + t * dim, h + t * hc * dim, (size_t)dim * sizeof *x);
        trace_f32(tr, x, 3, (int64_t[]){1, T, dim}, "embed");
    }
    for (int32_t l = 0; l < c->n_layers; l++) {
        dsv41_session *s0 = seq[0].s;
        if (count == 1 && s0->pos == 0 && cancelled(s0)) {
            scratch_end(mark);
            session_clear(s0, s0->pos + (int32_t)T); /* the layers done wrote rows up to pos + T */
            return set_error("forward: cancelled");
        }
        if (hb) layer_tiles(seq, count, l, &cs, h);
        else block(seq, count, l, T, hashes, h, pre_mix, tr);
        for (int32_t i = 0; i < count; i++)
            if (seq[i].s->progress) seq[i].s->progress(seq[i].s->progress_ctx, l + 1, c->n_layers);
    }
    for (int32_t i = 0; i < count; i++) session_end_call(seq[i].s); /* no later call reads the call's rows */
    /* the head runs over the rows wanted, a tile of them at a time: sampling needs only each
     * session's last position; a trace or `all` asks for every one, a session without logits
     * for none. Session i's wanted rows are rows [wrow[i], wrow[i] + n_i) of the R wanted. */
    int64_t V = c->vocab_size, R = 0, *first = scratch_i64(count), *wrow = scratch_i64(count);
    for (int32_t i = 0; i < count; i++) {
        int want = tr || logits[i];
        first[i] = !want ? seq[i].T : tr || all ? 0 : seq[i].T - 1;
        wrow[i] = R;
        R += seq[i].T - first[i];
    }
    int64_t chunk = R < cap ? R : cap;
    float *x = scratch_f32(chunk * dim), *xn = scratch_f32(chunk * dim), *lg = scratch_f32(chunk * V);
    for (int64_t j0 = 0; j0 < R; j0 += chunk) {
        int64_t n = R - j0 < chunk ? R - j0 : chunk;
        for (int32_t i = 0; i < count; i++) { /* session i's wanted rows [lo, hi) in this chunk */
            int64_t lo = wrow[i] > j0 ? wrow[i] : j0, end = wrow[i] + seq[i].T - first[i], hi = end < j0 + n ? end : j0 + n;
            int64_t r = seq[i].row0 + first[i] + lo - wrow[i]; /* its row in the stream */
            if (lo >= hi) continue;
            const float *hr = h + r * hrow;
            if (hb) { /* its rows into the tiles' buffer */
                for (int64_t e = 0; e < (hi - lo) * hrow; e++) h[e] = bf16_to_f32(hb[r * hrow + e]);
                hr = h;
            }
            hc_pre(hr, pre_mix + r * hc, hi - lo, hc, dim, x + (lo - j0) * dim);
        }
        rms_norm(x, m->norm, n, dim, c->norm_eps, xn);
        trace_f32(tr, x, 3, (int64_t[]){1, T, dim}, "h_final");
        trace_f32(tr, xn, 3, (int64_t[]){1, T, dim}, "head_in");
        if (m->part.n_ranks > 1) collective_linear(m, &m->head, xn, n, lg);
        else linear(&m->head, xn, n, lg);
        trace_f32(tr, lg, 3, (int64_t[]){1, T, V}, "logits_full");
        for (int32_t i = 0; i < count; i++) {
            int64_t lo = wrow[i] > j0 ? wrow[i] : j0, end = wrow[i] + seq[i].T - first[i], hi = end < j0 + n ? end : j0 + n;
            if (lo >= hi) continue;
            if (all && logits[i]) memcpy(logits[i] + (lo - wrow[i]) * V, lg + (lo - j0) * V, (size_t)((hi - lo) * V) * sizeof *lg);
            if (hi == end) { /* the session's last token */
                if (logits[i] && !all) memcpy(logits[i], lg + (hi - 1 - j0) * V, (size_t)V * sizeof *lg);
                memcpy(seq[i].s->logits, lg + (hi - 1 - j0) * V, (size_t)V * sizeof *lg);
            }
        }
    }
    for (int32_t i = 0; i < count; i++) {
        dsv41_session *s = seq[i].s;
        s->has_logits = first[i] < seq[i].T;
        memcpy(s->tokens + s->pos, ids[i], (size_t)seq[i].T * sizeof *ids[i]);
        s->pos += (int32_t)seq[i].T;
    }
    scratch_end(mark);
    return 0;
}

/* forward_rows for one session */
static int forward_call(dsv41_session *s, const int32_t *ids, int64_t T, float *logits, int all, dsv41_trace *tr) {
    return forward_rows(&(batch_seq){s, 0, T, 0, T}, 1, T, &ids, &logits, all, tr);
}

static int check_call(const dsv41_session *s, const int32_t *ids, int32_t n) {
    const config *c = &s->m->cfg;
    if (n < 1) return set_error("forward: no tokens");
    if ((int64_t)s->pos + n > c->max_seq_len)
        return set_error("forward: %d tokens at position %d exceed the context of %d tokens", n, s->pos, c->max_seq_len);
    for (int32_t t = 0; t < n; t++)
        if (ids[t] < 0 || ids[t] >= c->vocab_size)
            return set_error("forward: token id %d is outside the vocabulary [0, %d)", ids[t], c->vocab_size);
    return 0;
}

/* NaN logits come from non-finite weights or config values: an error, never a silent token 0 */
static int check_logits(const float *logits, int64_t n) {
    for (int64_t i = 0; logits && i < n; i++)
        if (isnan(logits[i])) return set_error("forward: the logits hold NaN (non-finite weights in the model?)");
    return 0;
}

/* One public forward's arguments and its result, for session_run */
typedef struct {
    dsv41_session *s;
    const int32_t *ids;         /* [n] */
    int32_t n;
    float *logits;              /* as forward() takes them */
    int all;
    dsv41_trace *tr;
    int rc;                     /* 0, or -1 when cancelled */
} steps;

/* After the prefill the reference only defines one-token calls (its window ring, compressor
 * tail and stale index keys all follow decode semantics), so a chunk appended later is exactly
 * that sequence of calls; the trace keeps the last one's captures. */
static void run_steps(void *p) {
    steps *a = p;
    dsv41_session *s = a->s;
    int64_t V = s->m->cfg.vocab_size;
    if (s->pos == 0 || a->n == 1) {
        a->rc = forward_call(s, a->ids, a->n, a->logits, a->all, a->tr);
        return;
    }
    for (int32_t i = 0; i < a->n; i++) {
        if (cancelled(s)) {
            a->rc = set_error("forward: cancelled");
            return;
        }
        float *out = !a->logits ? NULL : a->all ? a->logits + i * V : i == a->n - 1 ? a->logits : NULL;
        forward_call(s, a->ids + i, 1, out, 0, a->tr);
    }
}

static int forward(dsv41_session *s, const int32_t *ids, int32_t n, float *logits, int all, dsv41_trace *tr) {
    if (check_call(s, ids, n) || session_reserve(s, s->pos + n)) return -1;
    atomic_store(&s->cancel, 0); /* only a request made during this call stops it */
    steps a = {s, ids, n, logits, all, tr, 0};
    lead_forward_begin(s, ids, n, (logits ? FWD_LOGITS : 0) | (all ? FWD_ALL : 0) | (tr ? FWD_TRACE : 0));
    int rc = session_run(&s, 1, run_steps, &a) || a.rc;
    lead_forward_end(s);
    if (rc) return -1;
    return check_logits(logits, all ? n * s->m->cfg.vocab_size : s->m->cfg.vocab_size);
}

int forward_check(dsv41_session *s, const int32_t *ids, int32_t n) {
    return check_call(s, ids, n) || session_reserve(s, s->pos + n) ? -1 : 0;
}

/* The sessions' rows end to end in one forward_rows, and their logits checked: a batch (`all`
 * 0, logits NULL or each session's last token's) and a verify (`all` 1, every row's). Neither
 * is cancelled: a request made before it is void. */
static int forward_batch(dsv41_session *const *s, const int32_t *const *ids, const int32_t *n, int32_t count,
                         float *const *logits, int all) {
    scratch_mark mark = scratch_begin();
    batch_seq *seq = scratch_bytes((size_t)count * sizeof *seq);
    float **lg = scratch_bytes((size_t)count * sizeof *lg);
    int64_t T = 0, V = s[0]->m->cfg.vocab_size;
    for (int32_t i = 0; i < count; i++) {
        atomic_store(&s[i]->cancel, 0);
        seq[i] = (batch_seq){s[i], T, n[i], 0, n[i]};
        lg[i] = logits ? logits[i] : NULL;
        T += n[i];
    }
    int rc = forward_rows(seq, count, T, ids, lg, all, NULL);
    for (int32_t i = 0; rc == 0 && i < count; i++) rc = check_logits(lg[i], (all ? n[i] : 1) * V);
    scratch_end(mark);
    return rc;
}

int forward_verify(dsv41_session *const *s, const int32_t *const *ids, const int32_t *n, int32_t count, float *const *logits) {
    return forward_batch(s, ids, n, count, logits, 1);
}

int dsv41_session_forward(dsv41_session *s, const int32_t *ids, int32_t n, float *logits, dsv41_trace *tr) {
    return forward(s, ids, n, logits, 0, tr);
}

int dsv41_session_forward_all(dsv41_session *s, const int32_t *ids, int32_t n, float *logits) {
    return forward(s, ids, n, logits, 1, NULL);
}

/* Every session's tokens checked before any runs, so a wrong input changes none of them. */
static int check_batch(dsv41_session *const *s, const int32_t *const *ids, const int32_t *n, int32_t count) {
    if (count < 1 || !s || !ids || !n) return set_error("batch: no sessions");
    for (int32_t i = 0; i < count; i++) {
        if (!s[i] || !ids[i]) return set_error("batch: session %d is missing", i);
        if (s[i]->m != s[0]->m) return set_error("batch: session %d belongs to another model", i);
        for (int32_t k = 0; k < i; k++)
            if (s[k] == s[i]) return set_error("batch: session %d appears twice", i);
        if (s[i]->pos > 0 && n[i] != 1)
            return set_error("batch: session %d is at position %d and feeds %d tokens (one token after a prefill)", i,
                             s[i]->pos, n[i]);
        if (check_call(s[i], ids[i], n[i]) || session_reserve(s[i], s[i]->pos + n[i]))
            return set_error("batch: session %d: %s", i, dsv41_error());
    }
    return 0;
}

/* A batch's arguments and its result, for session_run */
typedef struct {
    dsv41_session *const *s;    /* [count] */
    const int32_t *const *ids;  /* [count][n[i]] */
    const int32_t *n;           /* [count] */
    int32_t count;
    float *const *logits;       /* [count] or NULL */
    int rc;
} batch_call;

static void run_batch(void *p) {
    batch_call *b = p;
    b->rc = forward_batch(b->s, b->ids, b->n, b->count, b->logits, 0);
}

/* One pass over the layers for all the sessions. A model split over ranks runs them one after
 * another: its ranks follow the leader's calls one session at a time. */
int dsv41_batch_forward(dsv41_session *const *s, const int32_t *const *ids, const int32_t *n, int32_t count,
                        float *const *logits) {
    if (check_batch(s, ids, n, count)) return -1;
    if (count == 1 || s[0]->m->part.n_ranks > 1) {
        for (int32_t i = 0; i < count; i++)
            if (forward(s[i], ids[i], n[i], logits ? logits[i] : NULL, 0, NULL)) return -1;
        return 0;
    }
    batch_call b = {s, ids, n, count, logits, 0};
    return session_run(s, count, run_batch, &b) || b.rc ? -1 : 0;
}
