/* dspark.c - the DSpark drafter: the release's forward_spec, on a session's taps.
 *
 * The target model's forward records, for every position, the mean over the hc copies of the
 * residual entering each target layer (after its Engram step): the "taps", concatenated in
 * layer order. The drafter projects them (main_proj, main_norm) into one main row per
 * position, and each stage keeps the window ring of its keys of those rows: kv_norm(wkv(row)),
 * rotated at the row's position and fp8 fake-quantized, slot p % window_size, exactly as a
 * backbone window ring. The draft tokens' own keys never enter a ring.
 *
 * A draft after position S (the last position fed) starts from the anchor, the token the
 * target picked at S and has not fed yet: the block [anchor, noise, ...] sits at positions
 * S+1.., goes through every stage (a backbone block whose attention reads the ring slots
 * filled so far plus the whole block, in both directions, and whose MoE has the drafter's
 * expert counts), then the LM head. The Markov head then picks the drafts in order: row i's
 * logits are the head's plus a rank-r bias of the token before it (the anchor for row 0), and
 * the pick is their argmax; the confidence logit of row i is a projection of the row's
 * collapsed hidden state (before the norm) and that token's Markov embedding.
 *
 * The rings advance lazily: the taps of positions not yet in the rings wait in a buffer of
 * window_size rows (older ones could only land in slots that newer ones overwrite), and a
 * draft first writes them in position order. A prefill's rows and one-token steps give the
 * same ring, since every row's arithmetic is its own. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "collective.h"
#include "dspark.h"
#include "lead.h"
#include "numerics.h"
#include "scratch.h"

void dspark_tap(const batch_seq *seq, int32_t count, int32_t l, int64_t T, const float *h) {
    (void)T;
    const config *c = &seq[0].s->m->cfg;
    int32_t j = 0, W = c->window_size, hc = c->hc_mult, dim = c->dim, ntd = c->dspark_n_targets * dim;
    while (j < c->dspark_n_targets && c->dspark_target[j] != l) j++;
    if (j == c->dspark_n_targets) return;
    for (int32_t i = 0; i < count; i++) {
        dspark_state *d = seq[i].s->draft;
        if (!d) continue;
        /* a tile of a prefill holds the call's rows [at, at + n); only the call's last W rows are
         * kept, so a tile before them taps nothing */
        int32_t pos = seq[i].s->pos, n = (int32_t)seq[i].T, at = (int32_t)seq[i].at, end = (int32_t)seq[i].call_T;
        /* torch's mean of bf16 copies: an f32 sum in copy order, divided, rounded once */
        for (int32_t t = end - W - at > 0 ? end - W - at : 0; t < n; t++) {
            const float *x = h + (seq[i].row0 + t) * hc * dim;
            float *tap = d->taps + (int64_t)((pos + at + t) % W) * ntd + (int64_t)j * dim;
            for (int32_t e = 0; e < dim; e++) {
                float sum = x[e];
                for (int32_t k = 1; k < hc; k++) sum += x[k * dim + e];
                tap[e] = bf16_round(sum / (float)hc);
            }
        }
        if (j == 0) { /* the first target layer of the call: these positions now wait for the rings */
            if (d->hi != pos) d->lo = pos; /* a session loaded from a file: no taps before this call */
            d->hi = pos + end;
            if (d->lo < d->hi - W) d->lo = d->hi - W;
        }
    }
}

/* Each stage's key of main rows mx [n][dim] at positions pos0.. -> k [n][head_dim]: kv_norm(wkv),
 * rotated, fp8 fake-quantized, as a backbone window key. */
static void stage_keys(const dsv41_model *m, const layer_weights *L, const float *x, int64_t n, int64_t pos0, float *k) {
    const config *c = &m->cfg;
    scratch_mark mark = scratch_begin();
    float *t = scratch_f32(n * c->head_dim);
    collective_project(m, &L->wkv, x, n, t);
    rms_norm(t, L->kv_norm, n, c->head_dim, c->norm_eps, k);
    rope_rows(&m->rope_plain, k, n, 1, c->head_dim, c->rope_head_dim, pos0, 0);
    fp8_fake_quant(k, (size_t)(n * c->head_dim));
    scratch_end(mark);
}

/* The waiting taps into the rings, oldest first. */
void dspark_flush(const dsv41_model *m, dspark_state *d) {
    const config *c = &m->cfg;
    const dspark_weights *dw = m->draft;
    int32_t W = c->window_size, hd = c->head_dim, dim = c->dim, ntd = c->dspark_n_targets * dim, n = d->hi - d->lo;
    if (n <= 0) return;
    scratch_mark mark = scratch_begin();
    float *x = scratch_f32((int64_t)n * ntd), *t = scratch_f32((int64_t)n * dim), *mx = scratch_f32((int64_t)n * dim);
    float *k = scratch_f32((int64_t)n * hd);
    for (int32_t i = 0; i < n; i++) memcpy(x + (int64_t)i * ntd, d->taps + (int64_t)((d->lo + i) % W) * ntd, (size_t)ntd * sizeof *x);
    collective_project(m, &dw->main_proj, x, n, t);
    rms_norm(t, dw->main_norm, n, dim, c->norm_eps, mx);
    for (int32_t s = 0; s < c->n_mtp_layers; s++) {
        stage_keys(m, &dw->stages[s], mx, n, d->lo, k);
        float *ring = d->rings + (int64_t)s * W * hd;
        for (int32_t i = 0; i < n; i++) memcpy(ring + (int64_t)((d->lo + i) % W) * hd, k + (int64_t)i * hd, (size_t)hd * sizeof *k);
    }
    d->lo = d->hi;
    scratch_end(mark);
}

void dspark_truncate(dspark_state *d, int32_t pos) {
    if (d->hi > pos) d->hi = pos;
    if (d->lo > pos) d->lo = pos;
}

/* A stage's attention for the block x [B][dim] at positions S+1..: every row reads the ring
 * slots filled so far (positions S-W+1..S) and all the block's rows. */
static void stage_attention(const dsv41_model *m, const layer_weights *L, const float *ring, int32_t S, const float *x,
                            int32_t B, float *out) {
    const config *c = &m->cfg;
    int32_t H = c->n_heads, hd = c->head_dim, rd = c->rope_head_dim, W = c->window_size, qrank = c->q_lora_rank;
    int32_t nring = S + 1 < W ? S + 1 : W, width = nring + B;
    scratch_mark mark = scratch_begin();
    float *tq = scratch_f32((int64_t)B * qrank), *qr = scratch_f32((int64_t)B * qrank), *q = scratch_f32((int64_t)B * H * hd);
    float *rows = scratch_f32((int64_t)(W + B) * hd), *o = scratch_f32((int64_t)B * H * hd);
    int32_t *idx = scratch_i32((int64_t)B * width);
    collective_project(m, &L->wq_a, x, B, tq);
    rms_norm(tq, L->q_norm, B, qrank, c->norm_eps, qr);
    collective_project(m, &L->wq_b, qr, B, q);
    rope_rows(&m->rope_plain, q, (int64_t)B * H, H, hd, rd, S + 1, 0);
    memcpy(rows, ring, (size_t)W * hd * sizeof *rows);
    stage_keys(m, L, x, B, S + 1, rows + (int64_t)W * hd);
    for (int32_t t = 0; t < B; t++)
        for (int32_t i = 0; i < width; i++) idx[t * width + i] = i < nring ? i : W + i - nring;
    attention_sparse(c, L, q, rows, W + B, idx, width, B, o);
    rope_rows(&m->rope_plain, o, (int64_t)B * H, H, hd, rd, S + 1, 1);
    attention_project(m, L, o, B, out);
    scratch_end(mark);
}

/* One stage over the block: h [B][hc][dim] and pre_mix [B][hc] in place, as a backbone block
 * (no Engram). */
static void stage_forward(const dsv41_model *m, const layer_weights *L, const float *ring, int32_t S, int32_t B, float *h,
                          float *pre_mix) {
    const config *c = &m->cfg;
    int32_t hc = c->hc_mult, dim = c->dim, k = c->dspark_n_activated;
    scratch_mark mark = scratch_begin();
    float *a_pre = scratch_f32(B * hc), *a_post = scratch_f32(B * hc), *a_comb = scratch_f32(B * hc * hc);
    float *f_pre = scratch_f32(B * hc), *f_post = scratch_f32(B * hc), *f_comb = scratch_f32(B * hc * hc);
    float *x = scratch_f32(B * dim), *xn = scratch_f32(B * dim), *y = scratch_f32(B * dim), *mid = scratch_f32(B * hc * dim);
    float *rw = scratch_f32(B * k);
    int32_t *ri = scratch_i32(B * k);
    hc_mixes(m, h, B, &L->hc_attn_fn, L->hc_attn_scale, L->hc_attn_base, a_pre, a_post, a_comb);
    hc_pre(h, pre_mix, B, hc, dim, x);
    rms_norm(x, L->attn_norm, B, dim, c->norm_eps, xn);
    stage_attention(m, L, ring, S, xn, B, y);
    hc_post(y, h, a_post, a_comb, B, hc, dim, mid);
    hc_mixes(m, mid, B, &L->hc_ffn_fn, L->hc_ffn_scale, L->hc_ffn_base, f_pre, f_post, f_comb);
    hc_pre(mid, a_pre, B, hc, dim, x);
    rms_norm(x, L->ffn_norm, B, dim, c->norm_eps, xn);
    moe_layer(m, L, c->dspark_n_experts, k, xn, B, y, rw, ri);
    hc_post(y, mid, f_post, f_comb, B, hc, dim, h);
    memcpy(pre_mix, f_pre, (size_t)(B * hc) * sizeof *pre_mix);
    scratch_end(mark);
}

/* main_proj once (the taps of every row since the last draft in one pass); per stage its dense
 * matrices and the experts the block's rows reach; the block's embedding rows, the head, and
 * per draft a Markov embedding row, a pass of the Markov head and the confidence row. */
double dspark_draft_bytes(const dsv41_model *m, int32_t n) {
    const config *c = &m->cfg;
    const dspark_weights *dw = m->draft;
    if (!dw) return 0.0;
    double b = (double)weight_bytes(&dw->main_proj) + (double)weight_bytes(&m->head) +
               (double)c->dspark_block_size * (double)(weight_bytes(&m->embed) / (size_t)c->vocab_size) +
               (double)n * ((double)(weight_bytes(&dw->markov_embed) / (size_t)c->vocab_size) +
                            (double)weight_bytes(&dw->markov_head) + (double)weight_bytes(&dw->confidence));
    for (int32_t st = 0; st < c->n_mtp_layers; st++)
        b += model_layer_bytes(&dw->stages[st], model_experts_reached(c->dspark_n_experts, c->dspark_n_activated, c->dspark_block_size));
    return b;
}

/* the block, or fewer where the window is shorter: a verify feeds the anchor and the drafts as
 * rows within one window */
int32_t dsv41_model_draft_size(const dsv41_model *m) {
    int32_t B = m->cfg.dspark_block_size, W = m->cfg.window_size - 1;
    return !m->draft ? 0 : B < W ? B : W;
}

/* A draft's arguments, for session_run */
typedef struct {
    dsv41_session *s;
    int32_t anchor, n;
    int32_t *ids;               /* [n] */
    float *logits, *confidence; /* [n][vocab], [n] or NULL */
} draft_call;

static void run_draft(void *p) {
    const draft_call *a = p;
    dsv41_session *s = a->s;
    const dsv41_model *m = s->m;
    const config *c = &m->cfg;
    const dspark_weights *dw = m->draft;
    dspark_state *d = s->draft;
    int32_t B = c->dspark_block_size, S = s->pos - 1, hc = c->hc_mult, dim = c->dim, rank = c->dspark_markov_rank;
    int32_t anchor = a->anchor, n = a->n, *ids = a->ids;
    int64_t V = c->vocab_size;
    dspark_flush(m, d);
    scratch_mark mark = scratch_begin();
    float *h = scratch_f32((int64_t)B * hc * dim), *pre_mix = scratch_f32(B * hc), *z = scratch_f32((int64_t)B * dim);
    float *zn = scratch_f32((int64_t)B * dim), *lg = scratch_f32(B * V), *bias = scratch_f32(V);
    float *cat = scratch_f32((int64_t)B * (dim + rank)), *conf = scratch_f32(B);
    for (int32_t t = 0; t < B; t++) {
        int32_t id = t == 0 ? anchor : c->dspark_noise_id;
        for (int32_t k = 0; k < hc; k++) {
            for (int32_t e = 0; e < dim; e++) h[((int64_t)t * hc + k) * dim + e] = weight_get(&m->embed, id, e);
            pre_mix[t * hc + k] = k == 0 ? 1.0f : 0.0f;
        }
    }
    for (int32_t st = 0; st < c->n_mtp_layers; st++)
        stage_forward(m, &dw->stages[st], d->rings + (int64_t)st * c->window_size * c->head_dim, S, B, h, pre_mix);
    hc_pre(h, pre_mix, B, hc, dim, z);
    rms_norm(z, dw->norm, B, dim, c->norm_eps, zn);
    /* the rows of the block all take part in its attention, but only the drafts asked for need
     * the head and the Markov chain (each row's logits are its own); on ranks each computes
     * its share of the head's rows, as the target's head */
    if (m->part.n_ranks > 1) collective_linear(m, &m->head, zn, n, lg);
    else linear(&m->head, zn, n, lg);
    /* the Markov chain: each pick's bias comes from the token before it */
    for (int32_t t = 0, prev = anchor; t < n; t++) {
        float *e = cat + (int64_t)t * (dim + rank) + dim, *row = lg + t * V;
        memcpy(cat + (int64_t)t * (dim + rank), z + (int64_t)t * dim, (size_t)dim * sizeof *z);
        for (int32_t r = 0; r < rank; r++) e[r] = weight_get(&dw->markov_embed, prev, r);
        linear(&dw->markov_head, e, 1, bias);
        for (int64_t v = 0; v < V; v++) row[v] += bias[v];
        ids[t] = prev = argmax_f32(row, V);
    }
    linear(&dw->confidence, cat, n, conf);
    if (a->logits) memcpy(a->logits, lg, (size_t)(n * V) * sizeof *lg);
    if (a->confidence) memcpy(a->confidence, conf, (size_t)n * sizeof *conf);
    scratch_end(mark);
}

int dsv41_session_draft(dsv41_session *s, int32_t anchor, int32_t n, int32_t *ids, float *logits, float *confidence) {
    const dsv41_model *m = s->m;
    const config *c = &m->cfg;
    const dspark_weights *dw = m->draft;
    dspark_state *d = s->draft;
    int32_t B = c->dspark_block_size, S = s->pos - 1;
    int64_t V = c->vocab_size;
    if (!dw || !d) return set_error("draft: the model has no DSpark drafter");
    if (S < 1 || d->hi != s->pos) return set_error("draft: needs a session that decoded a token after its prefill");
    if ((int64_t)S + B >= c->max_seq_len)
        return set_error("draft: a block after position %d passes the context of %d tokens", S, c->max_seq_len);
    if (anchor < 0 || anchor >= V) return set_error("draft: token id %d is outside the vocabulary [0, %lld)", anchor, (long long)V);
    if (n < 1 || n > B) return set_error("draft: %d drafts (1 to the block's %d)", n, B);
    lead_draft_begin(s, anchor, n); /* on ranks the others run the same draft */
    int rc = session_run(&s, 1, run_draft, &(draft_call){s, anchor, n, ids, logits, confidence});
    lead_forward_end(s);
    return rc;
}
