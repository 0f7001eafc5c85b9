/* indexer.c - the lightning indexer: which compressed entries each query attends.
 *
 * Index queries (fp4, per head) are scored against one fp4 index key per compressed entry;
 * rectified head scores are weighted and summed into a bf16 score per entry, and the top-k
 * entries are kept. Key owners (kv sources) produce keys from the pre-RoPE latent and publish
 * their key cache only when a group closed in this call; other index sources score against
 * whatever was published last, which on a decode step can be a later layer's keys from the
 * previous call. The release code does exactly this, so it is reproduced.
 *
 * Ties are common (bf16 scores, -inf for invisible entries), and torch's CPU topk resolves them
 * by whatever libstdc++'s introselect leaves in front, so that algorithm is emulated here step
 * for step; the golden's top-k indices depend on it. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "model.h"
#include "numerics.h"
#include "pool.h"
#include "scratch.h"

typedef struct {
    float v;
    int32_t i;
} pair;

/* torch's CPU comparator for largest=True: NaN first, then greater value */
static int before(pair a, pair b) { return (isnan(a.v) && !isnan(b.v)) || a.v > b.v; }

static int cmp_desc(const void *x, const void *y) {
    const pair *a = x, *b = y;
    if (before(*a, *b)) return -1;
    if (before(*b, *a)) return 1;
    return a->i - b->i;
}

/* libstdc++ std::nth_element(first, first+k-1, last) with the comparator above:
 * __introselect with __move_median_to_first / __unguarded_partition, finished by
 * __insertion_sort once at most 3 elements remain. When the depth limit runs out (never for
 * the row lengths torch sends here) the rest is sorted, lower index first on ties. */
static void nth_element(pair *q, int32_t n, int32_t nth) {
    int32_t first = 0, last = n, depth = 0;
    for (int32_t v = n; v > 1; v >>= 1) depth++;
    depth *= 2;
    while (last - first > 3) {
        if (depth-- == 0) {
            qsort(q + first, (size_t)(last - first), sizeof *q, cmp_desc);
            return;
        }
        int32_t a = first + 1, b = first + (last - first) / 2, c = last - 1, r;
        if (before(q[a], q[b])) r = before(q[b], q[c]) ? b : before(q[a], q[c]) ? c : a;
        else r = before(q[a], q[c]) ? a : before(q[b], q[c]) ? c : b;
        pair t = q[first]; q[first] = q[r]; q[r] = t;
        pair pivot = q[first];
        int32_t lo = first + 1, hi = last;
        for (;;) {
            while (before(q[lo], pivot)) lo++;
            hi--;
            while (before(pivot, q[hi])) hi--;
            if (lo >= hi) break;
            t = q[lo]; q[lo] = q[hi]; q[hi] = t;
            lo++;
        }
        if (lo <= nth) first = lo;
        else last = lo;
    }
    for (int32_t i = first + 1; i < last; i++) {
        pair v = q[i];
        if (before(v, q[first])) {
            memmove(q + first + 1, q + first, (size_t)(i - first) * sizeof *q);
            q[first] = v;
        } else {
            int32_t j = i;
            while (before(v, q[j - 1])) { q[j] = q[j - 1]; j--; }
            q[j] = v;
        }
    }
}

/* q [n] reordered so that its first k are the k first in cmp_desc's order (a total order: ties
 * go to the lower index), in some order. Which k those are does not depend on how they are
 * found, so a quickselect gives the set a full sort would in O(n); past its depth limit it
 * sorts what is left. */
static void select_first(pair *q, int32_t n, int32_t k) {
    int32_t lo = 0, hi = n, depth = 64;
    while (hi - lo > 16) {
        if (depth-- == 0) break;
        int32_t a = lo, b = lo + (hi - lo) / 2, c = hi - 1, m; /* median of three as the pivot */
        if (cmp_desc(&q[a], &q[b]) < 0) m = cmp_desc(&q[b], &q[c]) < 0 ? b : cmp_desc(&q[a], &q[c]) < 0 ? c : a;
        else m = cmp_desc(&q[a], &q[c]) < 0 ? a : cmp_desc(&q[b], &q[c]) < 0 ? c : b;
        pair pivot = q[m], t;
        q[m] = q[hi - 1];
        q[hi - 1] = pivot;
        int32_t s = lo;
        for (int32_t i = lo; i < hi - 1; i++)
            if (cmp_desc(&q[i], &pivot) < 0) { t = q[i]; q[i] = q[s]; q[s] = t; s++; }
        q[hi - 1] = q[s];
        q[s] = pivot;
        if (s == k || s + 1 == k) return;
        if (s > k) hi = s;
        else lo = s + 1;
    }
    qsort(q + lo, (size_t)(hi - lo), sizeof *q, cmp_desc);
}

/* v [n] -> out [k]: the index set torch.topk(v, k) returns on CPU, in its order where the order
 * matters. torch runs nth_element when k*64 > n, reproduced step for step (its ties depend on
 * it); otherwise a partial sort, whose set is the first k by value with ties to the lower
 * index, in an order no caller uses (they sort the indices or take the set). */
void topk_torch_cpu(const float *v, int32_t n, int32_t k, int32_t *out) {
    scratch_mark mark = scratch_begin();
    pair *q = scratch_bytes((size_t)n * sizeof *q);
    for (int32_t i = 0; i < n; i++) q[i] = (pair){v[i], i};
    if ((int64_t)k * 64 > n) nth_element(q, n, k - 1);
    else select_first(q, n, k);
    for (int32_t i = 0; i < k; i++) out[i] = q[i].i;
    scratch_end(mark);
}

/* score [T][width] (-inf: unreachable), visible [T] -> kept [T][k]: each row keeps the top
 * `topk_blocks` blocks of `block` entries by block max, the newest visible block pinned; the
 * blocks are listed ascending, -1 after. A list, not a mask of every entry: the rows of a long
 * prefill keep it from the candidate layer to the last index source, and a mask would grow
 * with the square of the prompt. */
void select_candidate_blocks(const float *score, int64_t T, int32_t width, const int32_t *visible,
                             int32_t topk_blocks, int32_t block, int32_t *kept) {
    int32_t nb = (width + block - 1) / block, k = topk_blocks < nb ? topk_blocks : nb;
    scratch_mark mark = scratch_begin();
    float *bs = scratch_f32(nb);
    int32_t *pick = scratch_i32(k);
    uint8_t *on = scratch_bytes((size_t)nb);
    for (int64_t t = 0; t < T; t++) {
        const float *row = score + t * width;
        for (int32_t b = 0; b < nb; b++) {
            bs[b] = -INFINITY;
            for (int32_t i = b * block; i < (b + 1) * block && i < width; i++) bs[b] = fmaxf(bs[b], row[i]);
        }
        if (visible[t] > 0 && (visible[t] - 1) / block < nb) bs[(visible[t] - 1) / block] = INFINITY;
        topk_torch_cpu(bs, nb, k, pick);
        memset(on, 0, (size_t)nb);
        for (int32_t j = 0; j < k; j++) on[pick[j]] = bs[pick[j]] != -INFINITY;
        int32_t *out = kept + t * k, n = 0;
        for (int32_t b = 0; b < nb; b++)
            if (on[b]) out[n++] = b;
        while (n < k) out[n++] = -1;
    }
    scratch_end(mark);
}

int32_t cand_blocks(const config *c, int32_t width) {
    int32_t nb = (width + c->candidate_block_size - 1) / c->candidate_block_size;
    return c->candidate_topk_blocks < nb ? c->candidate_topk_blocks : nb;
}

void cand_mask(const config *c, const int32_t *kept, int32_t width, uint8_t *keep) {
    int32_t block = c->candidate_block_size, k = cand_blocks(c, width);
    memset(keep, 0, (size_t)width);
    for (int32_t j = 0; j < k && kept[j] >= 0; j++)
        for (int32_t i = kept[j] * block; i < (kept[j] + 1) * block && i < width; i++) keep[i] = 1;
}

static int cmp_i32(const void *a, const void *b) { return *(const int32_t *)a - *(const int32_t *)b; }

typedef struct {
    const float *q, *w;        /* q [T][IH][ihd], w [T][IH] */
    const uint8_t *keys;       /* [width][ik_row_bytes] packed */
    const int32_t *visible;    /* [T] */
    int64_t T;
    int32_t IH, ihd, width;
    int32_t seen;              /* the most entries any token sees: keys past it are not written yet */
    size_t key_bytes;          /* of a packed key */
    float *score;              /* [T][width] */
} score_job;

/* the index scores a call holds at most, a row at least: 16 MB (indexer_select) */
enum { SCORE_FLOATS = 1 << 22 };

/* Entries [16 b, 16 e), 16 to an item, for every token: score[t][p] = bf16(sum_h bf16(relu(
 * bf16(q_h . k_p)) w_h)) for visible entries, -inf for the rest. The lanes run over 16 entries:
 * their keys are unpacked once, transposed to [d][entry], and every token of the call scores
 * against them, each lane summing its dot over d in order and adding the heads in order, so a
 * lane holds the bits one dot at a time gives. Keys are unpacked per item, never all at once: a
 * copy would grow with the context. A relu of -0 may give +0 where fmaxf gives -0; the sum starts
 * at +0 and x + (-0) = x + 0, so no score sees the difference. */
static inline __attribute__((always_inline)) void score_items(const score_job *j, int64_t b, int64_t e) {
    const int32_t IH = j->IH, ihd = j->ihd;
    scratch_mark mark = scratch_begin();
    v16 *kT = scratch_bytes((size_t)ihd * sizeof *kT); /* [d]: 16 entries' k[d] */
    uint8_t *none = scratch_bytes(j->key_bytes);            /* the key of an entry not written yet */
    float out[16];
    const v16 zero = {0};
    memset(none, 0, j->key_bytes);
    for (int64_t i = b; i < e; i++) {
        const int32_t p0 = (int32_t)i * 16, n = j->width - p0 < 16 ? j->width - p0 : 16;
        const uint8_t *key[16];
        for (int32_t p = 0; p < 16; p++) key[p] = p < n && p0 + p < j->seen ? j->keys + (size_t)(p0 + p) * j->key_bytes : none;
        /* the keys unpacked straight into [d][entry], a lane per entry, to the values
         * fp4_unpack_e8m0 gives: a byte holds d (low bits) and d + 1, a scale byte per block */
        v16 sc = zero;
        for (int32_t d = 0; d < ihd; d += 2) {
            u32x16 w, hi;
            if (d % FP4_E8M0_BLOCK == 0) {
                for (int32_t p = 0; p < 16; p++) w[p] = (uint32_t)key[p][ihd / 2 + d / FP4_E8M0_BLOCK] << 23;
                memcpy(&sc, &w, sizeof sc);
            }
            for (int32_t p = 0; p < 16; p++) w[p] = key[p][d / 2];
            hi = w >> 4;
            e2m1_decode16(&w, &sc, &kT[d]);
            e2m1_decode16(&hi, &sc, &kT[d + 1]);
        }
        for (int64_t t = 0; t < j->T; t++) {
            float *row = j->score + t * j->width + p0;
            int32_t vis = j->visible[t] - p0;
            if (vis <= 0) {
                for (int32_t p = 0; p < n; p++) row[p] = -INFINITY;
                continue;
            }
            v16 acc = zero;
            for (int32_t h = 0; h < IH; h++) {
                const float *q = j->q + (t * IH + h) * ihd;
                v16 dot = zero;
                for (int32_t d = 0; d < ihd; d++) dot += q[d] * kT[d];
                bf16_round16(&dot);
                i32x16 pos = dot > zero;
                u32x16 bits;
                memcpy(&bits, &dot, sizeof bits);
                bits &= (u32x16)pos;
                memcpy(&dot, &bits, sizeof dot);
                dot *= j->w[t * IH + h];
                bf16_round16(&dot);
                acc += dot;
            }
            bf16_round16(&acc);
            memcpy(out, &acc, sizeof out);
            for (int32_t p = 0; p < n; p++) row[p] = p < vis ? out[p] : -INFINITY;
        }
    }
    scratch_end(mark);
}

#if defined(__x86_64__)
__attribute__((target("avx512f"))) static void score_range_avx512(void *ctx, int64_t b, int64_t e) { score_items(ctx, b, e); }
#endif

static void score_range(void *ctx, int64_t b, int64_t e) { score_items(ctx, b, e); }

typedef struct {
    const float *score;     /* [T][width] */
    const int32_t *visible; /* [T] */
    int32_t *topk;          /* [T][k] */
    int32_t width, k, offset;
} topk_job;

/* tokens [b, e): the k best entries in ascending order, window-offset (-1: not visible) */
static void topk_range(void *ctx, int64_t b, int64_t e) {
    const topk_job *j = ctx;
    for (int64_t t = b; t < e; t++) {
        int32_t *row = j->topk + t * j->k;
        topk_torch_cpu(j->score + t * j->width, j->width, j->k, row);
        qsort(row, (size_t)j->k, sizeof *row, cmp_i32);
        for (int32_t i = 0; i < j->k; i++) row[i] = row[i] < j->visible[t] ? row[i] + j->offset : -1;
    }
}

/* blocks [b, e) of 32 of the floats at ctx, fp4 fake-quantized with e8m0 scales */
static void fp4_fake_quant_range(void *ctx, int64_t b, int64_t e) {
    fp4_fake_quant_e8m0((float *)ctx + 32 * b, (size_t)(32 * (e - b)), 32);
}

/* Writes index keys for new latents [n_latent][head_dim] (key owners), then publishes
 * shared.topk [T][k] of window-offset entry indices (-1: not visible) for the queries q
 * [T][IH][ihd] (idx_wq_b qr) and head weights w [T][IH] (idx_weights_proj x) of the rows sq,
 * both rewritten in place (rotated and quantized, scaled). Returns k. A prefill tile scores its
 * rows against the whole call's width of entries (the later ones invisible), so that each row's
 * top-k, ties included, is the one the whole call gives it; its rows of the published top-k
 * and candidates are the call's rows [at, at + T). */
int32_t indexer_select(const batch_seq *sq, int32_t l, float *q, float *w, const float *latent, int64_t n_latent,
                int32_t offset) {
    dsv41_session *s = sq->s;
    const dsv41_model *m = s->m;
    const config *c = &m->cfg;
    const layer_weights *L = &m->layers[l];
    shared_slots *sh = &s->shared;
    int32_t IH = c->index_n_heads, ihd = c->index_head_dim, rd = c->rope_head_dim, ratio = c->compress_ratio[l];
    int64_t T = sq->T, at = sq->at, rows = sq->call_T;
    int32_t pos = s->pos, first = pos + (int32_t)at, width = (pos + (int32_t)rows) / ratio;
    scratch_mark mark = scratch_begin();
    if (n_latent > 0 && c->is_kv_source[l]) {
        float *tmp = scratch_f32(n_latent * ihd), *k = scratch_f32(n_latent * ihd);
        linear(&L->idx_wk, latent, n_latent, tmp);
        rms_norm(tmp, L->idx_k_norm, n_latent, ihd, c->norm_eps, k);
        for (int64_t g = 0; g < n_latent; g++)
            rope_apply(&m->rope_yarn, k + g * ihd, ihd, rd, pos == 0 ? (first / ratio + g) * ratio : pos + 1 - ratio, 0);
        for (int64_t g = 0; g < n_latent; g++)
            fp4_pack_e8m0(k + g * ihd, (size_t)ihd, s->layers[l].ik + (size_t)(first / ratio + g) * ik_row_bytes(c));
        sh->index_k = s->layers[l].ik;
    }
    int32_t *visible = scratch_i32(T);
    rope_rows(&m->rope_yarn, q, T * IH, IH, ihd, rd, first, 0);
    pool_run(T * IH * ihd / 32, 64, fp4_fake_quant_range, q);
    float wscale = (float)(pow(ihd, -0.5) * pow(IH, -0.5)); /* one python-float scalar in the release */
    for (int64_t i = 0; i < T * IH; i++) w[i] = bf16_round(w[i] * wscale);
    for (int64_t t = 0; t < T; t++) visible[t] = pos == 0 ? (int32_t)(at + t + 1) / ratio : width;
    int32_t kb = cand_blocks(c, width), k = c->index_topk < width ? c->index_topk : width;
    int is_source = l == c->candidate_source_layer;
    int masked = !is_source && c->candidate_source_layer >= 0 && c->candidate_source_layer < l && sh->cand_rows == rows &&
                 sh->cand_width == width;
    if (is_source && buffer_grow((void **)&sh->cand, &sh->cand_cap, (size_t)(rows * kb) * sizeof *sh->cand))
        scratch_oom((size_t)(rows * kb) * sizeof *sh->cand, "the candidate blocks");
    if (buffer_grow((void **)&sh->topk, &sh->topk_cap, (size_t)(rows * k) * sizeof *sh->topk))
        scratch_oom((size_t)(rows * k) * sizeof *sh->topk, "the top-k rows");
    /* The scores go a chunk of rows at a time, so that they take at most SCORE_FLOATS (one row at
     * least) however long the context: each row's candidates and top-k read its own scores only. */
    int64_t chunk = width > 0 ? SCORE_FLOATS / width : T;
    chunk = chunk < 1 ? 1 : chunk < T ? chunk : T;
    float *score = scratch_f32(chunk * width);
    void (*range)(void *, int64_t, int64_t) = score_range;
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) range = score_range_avx512;
#endif
    uint8_t *keep = masked ? scratch_bytes((size_t)width) : NULL;
    for (int64_t t0 = 0; t0 < T; t0 += chunk) {
        int64_t n = chunk < T - t0 ? chunk : T - t0;
        score_job sj = {q + t0 * IH * ihd, w + t0 * IH, sh->index_k, visible + t0, n, IH, ihd, width, visible[t0 + n - 1],
                        ik_row_bytes(c), score};
        pool_run((width + 15) / 16, 2, range, &sj);
        if (is_source)
            select_candidate_blocks(score, n, width, visible + t0, c->candidate_topk_blocks, c->candidate_block_size,
                                    sh->cand + (at + t0) * kb);
        for (int64_t t = 0; masked && t < n; t++) {
            cand_mask(c, sh->cand + (at + t0 + t) * kb, width, keep);
            for (int32_t i = 0; i < width; i++)
                if (!keep[i]) score[t * width + i] = -INFINITY;
        }
        topk_job tj = {score, visible + t0, sh->topk + (at + t0) * k, width, k, offset};
        pool_run(n, 16, topk_range, &tj);
    }
    if (is_source) {
        sh->cand_rows = (int32_t)rows;
        sh->cand_width = width;
    }
    sh->topk_rows = (int32_t)rows;
    sh->topk_width = k;
    scratch_end(mark);
    return k;
}
