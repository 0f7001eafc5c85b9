/* model.h - the library's internal types: config, weights, per-sequence state, traces.
 *
 * Shapes are written as [rows][cols] in torch's order; every "bf16" activation below is an f32
 * array whose values are exact bf16 numbers (the reference's rounding points are explicit).
 * One session is one sequence: a batch of B sequences is B sessions, since no state or
 * arithmetic of the model crosses batch rows. */
#ifndef DSV41_MODEL_H
#define DSV41_MODEL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "dsv41.h"
#include "dsv41_dev.h"
#include "buffer.h"
#include "dsv41_dist.h"
#include "error.h"
#include "numerics.h"
#include "progress.h"
#include "weight.h"

#define MAX_LAYERS 128      /* capacity of the per-layer role arrays, not a model dimension */
#define MAX_DRAFTS 64       /* the most drafts a DSpark block holds (config.c checks dspark_block_size) */
#define MAX_ENGRAM 8        /* capacity: engram layers */
#define MAX_NGRAM 8         /* capacity: engram n-gram length */
#define MAX_HASH_COLS 64    /* capacity: (max_ngram-1) * engram heads */


/* ---- config: every geometry value, read from a fixture / config file */
typedef struct {
    int32_t vocab_size, dim, n_layers;
    int32_t n_heads, head_dim, rope_head_dim;       /* attention: heads of head_dim, RoPE on the tail */
    int32_t q_lora_rank, o_lora_rank, o_groups;
    int32_t window_size;
    int32_t compress_ratio[MAX_LAYERS];             /* [n_layers] 0, 1 or 2 */
    uint8_t is_kv_source[MAX_LAYERS];               /* [n_layers] owns compressor + index keys */
    uint8_t is_index_source[MAX_LAYERS];            /* [n_layers] runs the indexer */
    int32_t candidate_source_layer;                 /* -1: none */
    int32_t candidate_topk_blocks, candidate_block_size;
    int32_t index_n_heads, index_head_dim, index_topk;
    int32_t moe_inter_dim, n_routed_experts, n_shared_experts, n_activated_experts;
    float route_scale, swiglu_limit, gate_temp;
    int32_t norm_topk_prob;
    int32_t hc_mult, hc_sinkhorn_iters;
    float hc_eps, norm_eps;
    float rope_theta, compress_rope_theta, rope_factor, beta_fast, beta_slow;
    int32_t original_seq_len;
    int32_t max_seq_len;
    /* engram: hash tables consumed as given */
    int32_t n_engram;                               /* engram layers */
    int32_t engram_layer[MAX_ENGRAM];               /* [n_engram] layer ids, ascending */
    int32_t engram_max_ngram, engram_n_heads, engram_head_dim;
    int64_t engram_vocab_size;                      /* hash primes start above this - 1 */
    int64_t engram_compressed_vocab;                /* distinct compressed token ids */
    int32_t engram_pad_id;                          /* pad token id (uncompressed) */
    int64_t engram_rows[MAX_ENGRAM];                /* [n_engram] table rows */
    int64_t engram_pad;                             /* pad id in compressed space */
    int64_t *engram_token_map;                      /* [vocab_size] token -> compressed id */
    int64_t engram_mult[MAX_ENGRAM][MAX_NGRAM];     /* [n_engram][max_ngram] odd multipliers */
    int64_t engram_prime[MAX_ENGRAM][MAX_HASH_COLS];  /* [n_engram][cols] col = (n-2)*heads + h */
    int64_t engram_offset[MAX_ENGRAM][MAX_HASH_COLS]; /* [n_engram][cols] exclusive prefix sums */
    /* DSpark draft stages (mtp.N.*, dspark.c): a drafter when n_mtp_layers and dspark_block_size
     * are both set, as the release builds it */
    int32_t n_mtp_layers, dspark_n_experts;         /* stages; routed experts in each */
    int32_t dspark_n_targets, dspark_markov_rank;   /* layers main_proj concatenates; Markov head rank */
    int32_t dspark_n_activated;                     /* experts a draft row routes to */
    int32_t dspark_block_size;                      /* rows of a draft block: the anchor, then noise */
    int32_t dspark_noise_id;                        /* token id of the block's rows after the anchor */
    int32_t dspark_target[MAX_LAYERS];              /* [dspark_n_targets] tapped layers, ascending */
} config;

/* Whether c has a drafter: stages and a block size (the release builds none without both). */
static inline int config_has_drafter(const config *c) { return c->n_mtp_layers > 0 && c->dspark_block_size > 0; }

static inline int32_t engram_cols(const config *c) { return (c->engram_max_ngram - 1) * c->engram_n_heads; }
int config_engram_index(const config *c, int32_t layer); /* -1 when not an engram layer */

struct dsv41_json;
/* Fill c from a golden-fixture-shaped object (the golden's "fixture", models/tiny.json). */
int config_from_fixture(config *c, const struct dsv41_json *fx);
/* Fill c from a checkpoint's config.json (served form with text_config, or the flat
 * inference/config.json form); the Engram tables come after, from the token map. */
int config_from_checkpoint(config *c, const struct dsv41_json *root);
/* The Engram primes, offsets and multipliers as the release computes them, and the compressed
 * token map [vocab_size] (copied, entries in [0, engram_compressed_vocab)); frees c on failure. */
int config_set_token_map(config *c, const int64_t *token_map);
void config_free(config *c);

/* Bytes of weights one decoded token reads (dense matrices, active experts, rows); the part
 * variant: what this rank reads on average, with its shares of experts, table rows and head. */
size_t model_decode_bytes(const dsv41_model *m);
double part_decode_bytes(const dsv41_model *m);
/* Reads a byte of every page of this rank's share of the weights a decoded token reads (its
 * rows of the dense projections and of the head, its experts; not the Engram tables, which a
 * token samples) on the pool's threads: the first touch puts a page on the NUMA node of the
 * thread that makes it, so a rank bound to one node (mpirun --bind-to numa) holds its share in
 * its own memory from the start. For a model split by rows. */
int part_touch(const dsv41_model *m);
/* The same for one forward of `rows` tokens (a verify block): the dense matrices and the head
 * once, the experts the rows reach (model_experts_reached), each row's table rows. */
double model_rows_bytes(const dsv41_model *m, int32_t rows);
/* How many of E experts `rows` tokens of k picks each reach on average under uniform routing:
 * E (1 - (1 - k/E)^rows), k for one row. */
double model_experts_reached(int32_t E, int32_t k, int32_t rows);
/* Bytes a session holds per token of context: the compressed KV and index keys of the kv
 * sources, packed at the precision the release rounds them to (FP4 e2m1 latents with an e4m3
 * scale per 16, FP4 index keys with a ue8m0 scale per 32: 890 bytes on V4.1-Flash, the release
 * figure), plus the token's id and n-gram id unless release. */
double cache_bytes_per_token(const config *c, int release);

typedef struct {
    weight hc_attn_fn, hc_ffn_fn;           /* [(2+hc)*hc][hc*dim] f32 */
    float *hc_attn_base, *hc_ffn_base;      /* [(2+hc)*hc] */
    float *hc_attn_scale, *hc_ffn_scale;    /* [3] */
    float *attn_norm, *ffn_norm;            /* [dim] */
    float *attn_sink;                       /* [n_heads] */
    weight wq_a;                            /* [q_lora_rank][dim] */
    float *q_norm;                          /* [q_lora_rank] */
    weight wq_b;                            /* [n_heads*head_dim][q_lora_rank] */
    weight wkv;                             /* [head_dim][dim] */
    float *kv_norm;                         /* [head_dim] */
    weight wo_a;                            /* [o_groups*o_lora_rank][n_heads*head_dim/o_groups] */
    weight wo_b;                            /* [dim][o_groups*o_lora_rank] */
    weight comp_wkv;                        /* kv source: [head_dim][dim] (f32 at ratio 2) */
    weight comp_wgate;                      /* kv source, ratio > 1: [head_dim][dim] */
    float *comp_norm;                       /* kv source: [head_dim] */
    weight idx_wq_b;                        /* index source: [index_n_heads*index_head_dim][q_lora_rank] */
    weight idx_weights_proj;                /* index source: [index_n_heads][dim] */
    weight idx_wk;                          /* key owner: [index_head_dim][head_dim] */
    float *idx_k_norm;                      /* key owner: [index_head_dim] */
    weight gate;                            /* [n_routed_experts][dim] */
    float *gate_bias;                       /* [n_routed_experts] */
    weight *w1, *w2, *w3;                   /* [n_routed_experts]: w1,w3 [inter][dim], w2 [dim][inter] */
    weight sw1, sw2, sw3;                   /* shared expert: [n_shared*inter][dim], [dim][n_shared*inter] */
    int32_t engram;                         /* index into config engram arrays, -1: none */
    weight eg_table;                        /* engram: [rows][engram_head_dim] e4m3, e8m0 per 32 */
    weight eg_wkv;                          /* engram: [dim*(hc+1)][cols*engram_head_dim] */
    float *eg_qk;                           /* engram: [hc*dim] q_weight * k_weight */
} layer_weights;

/* The matrices every token reads in full in layer L (routed experts and the Engram table aside)
 * into out [32]; returns their count. */
int layer_dense_weights(const layer_weights *L, const weight **out);
/* Bytes of layer L a forward reads: its dense matrices in full and `experts` routed experts. */
double model_layer_bytes(const layer_weights *L, double experts);

/* The DSpark drafter's weights: its stages are layers without compressor, indexer or Engram and
 * with dspark_n_experts routed experts; the first stage projects the taps, the last holds the
 * heads. Embedding and LM head are the backbone's. */
typedef struct {
    layer_weights *stages;                  /* [n_mtp_layers] */
    weight main_proj;                       /* [dim][dspark_n_targets*dim] */
    float *main_norm;                       /* [dim] */
    float *norm;                            /* [dim] before the LM head */
    weight markov_embed;                    /* [vocab_size][dspark_markov_rank] */
    weight markov_head;                     /* [vocab_size][dspark_markov_rank], computed in f32 */
    weight confidence;                      /* [1][dim + dspark_markov_rank], computed in f32 */
} dspark_weights;

/* The angle of position p in pair k is (float)p * freq[k] in f32, as the reference forms it
 * (torch.outer of the positions and the f32 frequencies); cos and sin are taken of that f32
 * angle when a row is rotated, so nothing here grows with the context. */
typedef struct {
    float *freq;                            /* [rope_head_dim/2] */
} rope_table;

/* A model's place in a job split across ranks (dist.c): this rank owns the contiguous share
 * [n r / K, n (r+1) / K) of the routed experts (n = n_routed_experts), of each Engram table's
 * rows and of the head's rows; split by rows, also of the output rows of every dense projection
 * a forward runs through collective_linear_rows (n = the projection's rows). */
typedef struct {
    int32_t rank, n_ranks;                  /* n_ranks 1: the whole model in one process */
    int32_t id;                             /* the leader's handle, the same on every rank */
    int32_t rows;                           /* DSV41_SPLIT_ROWS: the dense projections split too */
} model_part;

/* Whether rank p owns item i of n (an expert, a table row, a head row). */
static inline int part_owns(const model_part *p, int64_t n, int64_t i) {
    return i >= n * p->rank / p->n_ranks && i < n * (p->rank + 1) / p->n_ranks;
}

struct dsv41_model {
    config cfg;
    model_part part;                        /* which share of the work this process does */
    weight embed;                           /* [vocab_size][dim] */
    float *norm;                            /* [dim] */
    weight head;                            /* [vocab_size][dim] */
    layer_weights *layers;                  /* [n_layers] */
    dspark_weights *draft;                  /* the drafter, or NULL (config_has_drafter) */
    rope_table rope_plain, rope_yarn;       /* ratio-0 layers / compressed layers */
    void **owned;                           /* buffers the model frees */
    size_t n_owned, cap_owned;
    struct mapping { void *addr; size_t len; } *maps; /* [n_maps] memory-mapped checkpoint shards */
    size_t n_maps;
    struct { int64_t tensors, unread, bytes; int32_t shards; } file; /* a loaded checkpoint: all its tensors, those
                                                                      * the text pass leaves unread, data bytes */
    _Atomic uint64_t identity;              /* weights_identity() once computed, 0 before (session_file.c) */
};

void *model_alloc(dsv41_model *m, size_t bytes); /* zeroed, freed with the model */
int rope_init(dsv41_model *m);
#define ROPE_MAX_HALF 1024 /* capacity: rope_head_dim / 2 */
/* cs, sn [half]: the cos and sin of position pos's angles */
void rope_angles(const rope_table *rt, int32_t half, int64_t pos, float *cs, float *sn);
void rope_apply(const rope_table *rt, float *x, int64_t row_len, int32_t rope_dim, int64_t pos, int inverse);
/* rope_apply on rows [n][row_len] of x over the pool, row r at position pos0 + r / per (per: the
 * heads that share a token's position) */
void rope_rows(const rope_table *rt, float *x, int64_t n, int32_t per, int64_t row_len, int32_t rope_dim, int64_t pos0,
               int inverse);

/* ---- per-sequence state */
/* The window rings, the compressed KV and the index keys hold rows packed at the precision the
 * release rounds them to (numerics.h): the values the reference stores, a fraction of the bytes.
 * Their readers unpack the rows they read (attention, the indexer). */
typedef struct {
    uint8_t *window;                        /* [window_size][window_row_bytes] ring, slot = pos % window */
    float *kv_state, *score_state;          /* kv source, ratio > 1: [ratio][head_dim] compressor tail */
    uint8_t *ckv;                           /* kv source: [cap/ratio + 1][ckv_row_bytes] compressed KV */
    uint8_t *ik;                            /* kv source: [cap/ratio + 1][ik_row_bytes] index keys */
} layer_state;

/* Bytes of one packed row: a window key (fp8, ue8m0 per 32), a compressed latent (fp4, e4m3 per
 * 16), an index key (fp4, ue8m0 per 32). */
static inline size_t window_row_bytes(const config *c) { return fp8_row_bytes((size_t)c->head_dim); }
static inline size_t ckv_row_bytes(const config *c) { return fp4_row_bytes((size_t)c->head_dim, FP4_E4M3_BLOCK); }
static inline size_t ik_row_bytes(const config *c) { return fp4_row_bytes((size_t)c->index_head_dim, FP4_E8M0_BLOCK); }

/* The slots source layers publish and later layers read. The two that point into the caches
 * survive across calls: a decode step that closes no group reads index keys published by a
 * later layer in an earlier call. The top-k and candidate rows (one per row of the call) are
 * read only by the layers after their source in the same call, which always run after it (every
 * compressed layer has an index source at or before it, of its own ratio: config.c), so they
 * are dropped when the call's layers are done (session_end_call): a prefill of T rows would
 * otherwise leave T rows of them (10 KB a row at V4.1-Flash's geometry) in the session, its
 * copies and its files. The reference keeps them in module globals, so its traces show the
 * candidates of an earlier call before this call's source runs (golden_check.c). */
typedef struct {
    const uint8_t *compress_kv;             /* -> a kv source's ckv */
    const uint8_t *index_k;                 /* -> a kv source's ik */
    int32_t *topk;                          /* [topk_rows][topk_width] offset indices, -1 unused */
    int32_t topk_rows, topk_width;          /* 0 between calls */
    int32_t *cand;                          /* [cand_rows][cand_blocks()] the blocks of a keep mask of
                                             * [cand_rows][cand_width] entries, ascending, -1 after */
    int32_t cand_rows, cand_width;          /* 0 between calls */
    size_t topk_cap, cand_cap;              /* bytes allocated at topk and cand */
} shared_slots;

struct dsv41_session {
    const dsv41_model *m;
    int32_t pos;                            /* tokens consumed so far */
    int32_t cap;                            /* positions the caches have room for, grown up to max_seq_len */
    int64_t *ngram_cache;                   /* [cap] compressed ids */
    int32_t *tokens;                        /* [cap] the ids fed so far, [pos] of them */
    float *logits;                          /* [vocab_size] the last fed token's logits, when has_logits */
    int32_t has_logits;                     /* the call that fed it computed them */
    layer_state *layers;                    /* [n_layers] */
    shared_slots shared;
    int32_t dist_id;                        /* the leader's handle when the model is split */
    void (*progress)(void *ctx, int32_t done, int32_t total); /* per layer, or NULL */
    void *progress_ctx;
    atomic_int cancel;                      /* a dsv41_session_cancel request not yet served */
    int32_t tile_rows;                      /* a longer prefill goes through each layer this many rows at a time */
    struct dspark_state *draft;             /* the drafter's taps and rings (dspark_state.c), or NULL */
    struct spec_journal *verify;            /* during a verify call (spec.c): what rows rewrite, else NULL */
};

/* One session's share of a batched forward: rows [row0, row0 + T) of every activation, its
 * prefill (at position 0) or its one decode token. A long prefill goes through each layer a
 * tile of rows at a time: then these T rows are the call's rows [at, at + T) of call_T. */
typedef struct {
    dsv41_session *s;
    int64_t row0, T;                        /* its first row and its rows */
    int64_t at, call_T;                     /* the tile's first row in the call, the call's rows (0, T: whole) */
} batch_seq;

/* Grows s's caches to hold n positions (n <= max_seq_len); 0, or -1 when out of memory. */
int session_reserve(dsv41_session *s, int32_t n);
/* Whether s can be fed the n ids now (else -1, the reason set as the error), its caches grown
 * for them: a call's checks, made before a model split over ranks tells the other ranks. */
int forward_check(dsv41_session *s, const int32_t *ids, int32_t n);
/* For each of count distinct sessions s[i] at position > 0, its n[i] rows in one forward, each
 * computed as a one-token step at its position would be (s[i]->verify set: spec.c; a session
 * without one feeds one token, a decode step); logits[i] [n[i]][vocab] get every row's. Each
 * session's call passed forward_check. */
int forward_verify(dsv41_session *const *s, const int32_t *const *ids, const int32_t *n, int32_t count, float *const *logits);

/* Ends s's part of a call: its top-k and candidate rows are emptied, and their buffers freed
 * unless small (session.c), so no later call reads them and a session holds only its caches. */
void session_end_call(dsv41_session *s);
/* Empties s to position 0 as a new session is. Compressed rows are zeroed up to position reach
 * only: rows past the closed groups of every position a call reached are zero already. */
void session_clear(dsv41_session *s, int32_t reach);
/* Runs fn(ctx), a computation on the sessions s [count], under scratch_run (scratch.h): 0, or -1 when
 * an allocation inside it failed, and then each s[i] is emptied (session_clear to its capacity,
 * as far as the call could have written), since the call may have left its caches half
 * written. On a model split over ranks the job ends instead (the transport's fail): the other
 * ranks are inside the call's collectives. */
int session_run(dsv41_session *const *s, int32_t count, void (*fn)(void *ctx), void *ctx);
/* n packed rows of a kv source's compressed KV (index_keys 0) or index keys (1) -> out [n][head_dim
 * or index_head_dim], the values they hold. */
void session_unpack_rows(const config *c, const uint8_t *rows, int64_t n, int index_keys, float *out);
/* The kv-source layer whose cache p points into (index_keys: its ik, else its ckv), or -1: what
 * the shared slots point to, told by layer so a copy or a file can point into its own caches. */
int32_t slot_layer(const dsv41_session *s, const uint8_t *p, int index_keys);
/* The 64-bit checksum a session file ends with, of p [n] (session_file.c). */
uint64_t checksum64(const void *p, size_t n);
/* A session file's n bytes into s, as dsv41_session_load_data (path: the name its messages
 * give); the followers of a split model load the leader's bytes through it (session_file.c). */
int session_file_load(dsv41_session *s, const char *path, const uint8_t *buf, size_t n, void **data, size_t *data_n);

/* ---- traces: named captures of the golden's intermediates */
typedef struct {
    char name[64];
    int32_t ndim;
    int64_t shape[6];
    int64_t n;
    int is_int;
    double *v;                              /* [n] values */
} capture;

struct dsv41_trace {
    capture *caps;
    size_t n, cap;
};

void trace_f32(dsv41_trace *tr, const float *x, int32_t ndim, const int64_t *shape, const char *fmt, ...);
void trace_i32(dsv41_trace *tr, const int32_t *x, int32_t ndim, const int64_t *shape, const char *fmt, ...);
void trace_i64(dsv41_trace *tr, const int64_t *x, int32_t ndim, const int64_t *shape, const char *fmt, ...);
const capture *trace_find(const dsv41_trace *tr, const char *name);

/* ---- components (one op per function, shapes above each definition) */
void rms_norm(const float *x, const float *w, int64_t T, int32_t n, float eps, float *y);
float rms_sum_squares(const float *x, int64_t n); /* in a fixed order, the same at any n (rms.c) */
void hc_mixes(const dsv41_model *m, const float *h, int64_t T, const weight *fn, const float *scale,
              const float *base, float *pre, float *post, float *comb);
void hc_split_sinkhorn(const float *mix, const float *scale, const float *base, int32_t hc, int32_t iters,
                       float eps, float *pre, float *post, float *comb);
void hc_pre(const float *h, const float *pre, int64_t T, int32_t hc, int32_t dim, float *y);
void hc_post(const float *x, const float *res, const float *post, const float *comb, int64_t T, int32_t hc,
             int32_t dim, float *y);
void engram_hash(dsv41_session *s, const int32_t *ids, int64_t T, int64_t *out);
void engram_forward(const dsv41_model *m, int32_t l, const int64_t *hashes, int64_t T, float *h, dsv41_trace *tr);
void attention_forward(const batch_seq *seq, int32_t count, int32_t l, const float *x, int64_t T, float *out, dsv41_trace *tr);
int64_t compressor_step(dsv41_session *s, int32_t l, const float *kv, const float *score, int64_t T, float *latent);
int32_t indexer_select(const batch_seq *q_rows, int32_t l, float *q, float *w, const float *latent, int64_t n_latent,
                       int32_t offset);
void topk_torch_cpu(const float *v, int32_t n, int32_t k, int32_t *out);
void select_candidate_blocks(const float *score, int64_t T, int32_t width, const int32_t *visible,
                             int32_t topk_blocks, int32_t block, int32_t *kept);
/* The candidate mask as blocks: a row of `width` entries keeps at most cand_blocks(c, width)
 * blocks; cand_mask expands a row of them to its keep mask [width]. */
int32_t cand_blocks(const config *c, int32_t width);
void cand_mask(const config *c, const int32_t *kept, int32_t width, uint8_t *keep);
void moe_forward(const dsv41_model *m, int32_t l, const float *x, int64_t T, float *y, float *route_w, int32_t *route_idx);
/* moe_forward over the weights L with E routed experts of which each row takes k (the DSpark stages) */
void moe_layer(const dsv41_model *m, const layer_weights *L, int32_t E, int32_t k, const float *x, int64_t T, float *y,
               float *route_w, int32_t *route_idx);
/* Sparse attention of q [T][H][head_dim] over rows [nrows][head_dim], row t reading the rows idx
 * [T][width] names (-1: none), with L's sink: o [T][H][head_dim] bf16, as attention_forward() does. */
void attention_sparse(const config *c, const layer_weights *L, const float *q, const float *rows, int32_t nrows,
                      const int32_t *idx, int32_t width, int64_t T, float *o);
/* The output projections of attention: o [T][H][head_dim] (un-rotated) -> out [T][dim]. */
void attention_project(const dsv41_model *m, const layer_weights *L, const float *o, int64_t T, float *out);

#endif
