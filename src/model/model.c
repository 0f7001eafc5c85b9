/* model.c - a model in memory: the buffers it owns, its public accessors, and what one
 * decoded token reads from it (the benchmark's limit, a session file's identity and each
 * rank's report all count it) or a block of rows, as a verify feeds. */
#include <math.h>
#include <stdlib.h>
#include <sys/mman.h>

#include "lead.h"
#include "model.h"
#include "pool.h"

void *model_alloc(dsv41_model *m, size_t bytes) {
    if (m->n_owned == m->cap_owned) {
        size_t cap = m->cap_owned ? m->cap_owned * 2 : 256;
        void **n = realloc(m->owned, cap * sizeof *n);
        if (!n) return NULL;
        m->owned = n;
        m->cap_owned = cap;
    }
    void *p = calloc(1, bytes ? bytes : 1);
    if (p) m->owned[m->n_owned++] = p;
    return p;
}

void dsv41_model_free(dsv41_model *m) {
    if (!m) return;
    lead_model_free(m);
    for (size_t i = 0; i < m->n_owned; i++) free(m->owned[i]);
    free(m->owned);
    for (size_t i = 0; i < m->n_maps; i++) munmap(m->maps[i].addr, m->maps[i].len);
    free(m->maps);
    config_free(&m->cfg);
    free(m);
}

int32_t dsv41_model_vocab_size(const dsv41_model *m) { return m->cfg.vocab_size; }
int32_t dsv41_model_max_seq_len(const dsv41_model *m) { return m->cfg.max_seq_len; }

int layer_dense_weights(const layer_weights *L, const weight **out) {
    const weight *all[] = {&L->hc_attn_fn, &L->hc_ffn_fn, &L->wq_a, &L->wq_b, &L->wkv, &L->wo_a, &L->wo_b,
                           &L->comp_wkv, &L->comp_wgate, &L->idx_wq_b, &L->idx_weights_proj, &L->idx_wk,
                           &L->gate, &L->sw1, &L->sw2, &L->sw3, &L->eg_wkv};
    int n = 0;
    for (size_t i = 0; i < sizeof all / sizeof *all; i++)
        if (all[i]->data) out[n++] = all[i];
    return n;
}

/* share(n): the fraction of n items (experts, rows) this process owns; 1 for the whole model */
static double share(const dsv41_model *m, int64_t n, int whole) {
    const model_part *p = &m->part;
    return whole ? 1.0 : (double)(n * (p->rank + 1) / p->n_ranks - n * p->rank / p->n_ranks) / (double)n;
}

double model_experts_reached(int32_t E, int32_t k, int32_t rows) {
    return rows == 1 ? (double)k : (double)E * (1.0 - pow(1.0 - (double)k / E, rows));
}

/* Bytes of layer L a forward reads: `experts` routed experts and its dense matrices, of which a
 * model split by rows reads its share of each one's rows (wo_a's groups are split one by one;
 * idx_wk, run once per compressed group, stays whole on every rank). m NULL: the whole layer. */
static double layer_bytes(const dsv41_model *m, const layer_weights *L, double experts) {
    const weight *dense[32];
    int k = layer_dense_weights(L, dense);
    double n = 0.0;
    for (int i = 0; i < k; i++) {
        double b = (double)weight_bytes(dense[i]);
        if (m && m->part.rows == DSV41_SPLIT_ROWS && dense[i] != &L->idx_wk)
            b *= share(m, dense[i] == &L->wo_a ? m->cfg.o_lora_rank : dense[i]->rows, 0);
        n += b;
    }
    return n + experts * (double)(weight_bytes(&L->w1[0]) + weight_bytes(&L->w2[0]) + weight_bytes(&L->w3[0]));
}

double model_layer_bytes(const layer_weights *L, double experts) { return layer_bytes(NULL, L, experts); }

/* The dense matrices and the embedding rows (split by rows: this process's rows of them), the head, the experts `rows` tokens reach and their table rows by
 * this process's share of them (all of them when whole). */
static double rows_bytes(const dsv41_model *m, int whole, int32_t rows) {
    const config *c = &m->cfg;
    double n = (double)rows * (double)(weight_bytes(&m->embed) / (size_t)c->vocab_size) *
                   share(m, c->vocab_size, whole || m->part.rows != DSV41_SPLIT_ROWS) +
               (double)weight_bytes(&m->head) * share(m, c->vocab_size, whole);
    for (int l = 0; l < c->n_layers; l++) {
        const layer_weights *L = &m->layers[l];
        n += layer_bytes(whole ? NULL : m, L,
                         model_experts_reached(c->n_routed_experts, c->n_activated_experts, rows) *
                             share(m, c->n_routed_experts, whole));
        if (L->engram >= 0)
            n += (double)rows * (double)(engram_cols(c) * weight_bytes(&L->eg_table) / (size_t)L->eg_table.rows) *
                 share(m, L->eg_table.rows, whole);
    }
    return n;
}

/* ---- a rank's first touch of its share */
typedef struct {
    const uint8_t *p;
    size_t n;
} span;

typedef struct {
    span *spans;
    int64_t n, cap;
    uint64_t sum; /* what the reads saw, kept so that they are made */
} touch_list;

static void add_span(touch_list *t, const weight *w, int64_t lo, int64_t hi) {
    DSV41_ASSERT(t->n < t->cap);
    if (!w->data || hi <= lo) return;
    size_t rb = weight_row_bytes(w);
    t->spans[t->n++] = (span){(const uint8_t *)w->data + (size_t)lo * rb, (size_t)(hi - lo) * rb};
}

/* rows [lo, hi) of rows [r0, r1) of w are this rank's: to touch; the rest of [r0, r1) to let go */
static void add_share(touch_list *own, touch_list *other, const weight *w, int64_t r0, int64_t r1, int64_t lo, int64_t hi) {
    add_span(own, w, lo, hi);
    add_span(other, w, r0, lo);
    add_span(other, w, hi, r1);
}

static void touch_range(void *ctx, int64_t b, int64_t e) {
    touch_list *t = ctx;
    uint64_t sum = 0;
    for (int64_t i = b; i < e; i++)
        for (size_t off = 0; off < t->spans[i].n; off += 4096) sum += ((const volatile uint8_t *)t->spans[i].p)[off];
    __atomic_fetch_add(&t->sum, sum, __ATOMIC_RELAXED);
}

/* The kernel maps whole page-cache folios around the pages a process reads, so touching a
 * rank's rows maps pages of its neighbours' rows too; the pages wholly inside the others'
 * ranges are unmapped again. Only in the checkpoint's mappings, which a later read fills again
 * from the file: memory of the model's own (a golden's weights) would read back as zeros. */
static void let_go(const dsv41_model *m, const touch_list *t) {
    const uintptr_t page = 4096;
    for (int64_t i = 0; i < t->n; i++) {
        uintptr_t b = ((uintptr_t)t->spans[i].p + page - 1) & ~(page - 1), e = ((uintptr_t)t->spans[i].p + t->spans[i].n) & ~(page - 1);
        for (size_t k = 0; b < e && k < m->n_maps; k++)
            if (b >= (uintptr_t)m->maps[k].addr && e <= (uintptr_t)m->maps[k].addr + m->maps[k].len)
                madvise((void *)b, e - b, MADV_DONTNEED);
    }
}

int part_touch(const dsv41_model *m) {
    const config *c = &m->cfg;
    const model_part *p = &m->part;
    const int32_t K = p->n_ranks, r = p->rank, E = c->n_routed_experts;
    const int64_t cap = (int64_t)c->n_layers * (32 + c->o_groups + 3 * (int64_t)E) + 1, V = c->vocab_size; /* spans at most */
    touch_list own = {malloc((size_t)cap * sizeof(span)), 0, cap, 0}, other = {malloc((size_t)cap * 2 * sizeof(span)), 0, 2 * cap, 0};
    if (!own.spans || !other.spans) {
        free(own.spans);
        free(other.spans);
        return set_error("out of memory");
    }
    add_share(&own, &other, &m->head, 0, V, V * r / K, V * (r + 1) / K);
    for (int32_t l = 0; l < c->n_layers; l++) {
        const layer_weights *L = &m->layers[l];
        const weight *dense[32];
        int n = layer_dense_weights(L, dense);
        for (int i = 0; i < n; i++) {
            const weight *w = dense[i];
            if (w == &L->idx_wk) add_span(&own, w, 0, w->rows); /* whole on every rank */
            else if (w == &L->wo_a)
                for (int64_t g = 0, o = c->o_lora_rank; g < c->o_groups; g++)
                    add_share(&own, &other, w, g * o, (g + 1) * o, g * o + o * r / K, g * o + o * (r + 1) / K);
            else add_share(&own, &other, w, 0, w->rows, w->rows * r / K, w->rows * (r + 1) / K);
        }
        for (int32_t e = 0; e < E; e++) {
            int64_t mine = e >= E * r / K && e < E * (r + 1) / K, rows = L->w1[e].rows;
            add_share(&own, &other, &L->w1[e], 0, rows, 0, mine ? rows : 0);
            add_share(&own, &other, &L->w2[e], 0, L->w2[e].rows, 0, mine ? L->w2[e].rows : 0);
            add_share(&own, &other, &L->w3[e], 0, rows, 0, mine ? rows : 0);
        }
    }
    pool_run(own.n, 1, touch_range, &own);
    let_go(m, &other);
    free(own.spans);
    free(other.spans);
    return 0;
}

size_t model_decode_bytes(const dsv41_model *m) { return (size_t)rows_bytes(m, 1, 1); }
double part_decode_bytes(const dsv41_model *m) { return rows_bytes(m, 0, 1); }
double model_rows_bytes(const dsv41_model *m, int32_t rows) { return rows_bytes(m, 1, rows); }

double cache_bytes_per_token(const config *c, int release) {
    double b = release ? 0.0 : (double)(sizeof(int64_t) + sizeof(int32_t));
    for (int l = 0; l < c->n_layers; l++)
        if (c->is_kv_source[l]) b += (double)(ckv_row_bytes(c) + ik_row_bytes(c)) / c->compress_ratio[l];
    return b;
}
