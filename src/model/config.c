/* config.c - the model config, read from a fixture-shaped JSON object.
 *
 * The golden's "fixture" and the built-in models/tiny.json share one schema (ModelArgs field
 * names plus an "engram" object holding the hash tables), so one reader serves both. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json.h"
#include "model.h"
#include "nprandom.h"

/* Where config keys come from: a fixture-shaped object (ModelArgs names), or a served HF
 * config.json whose text_config spells them differently (V41_REFERENCE.md section 1.2). */
typedef struct {
    const json *flat;   /* ModelArgs-named object, or NULL */
    const json *text;   /* served text_config, or NULL */
} cfg_src;

static const struct { const char *key, *served; } ALIASES[] = {
    {"dim", "hidden_size"}, {"moe_inter_dim", "moe_intermediate_size"}, {"n_layers", "num_hidden_layers"},
    {"n_heads", "num_attention_heads"}, {"rope_head_dim", "qk_rope_head_dim"}, {"norm_eps", "rms_norm_eps"},
    {"n_activated_experts", "num_experts_per_tok"}, {"score_func", "scoring_func"},
    {"route_scale", "routed_scaling_factor"}, {"window_size", "sliding_window"},
    {"kv_source_layers", "kv_source_layer_ids"}, {"index_source_layers", "index_source_layer_ids"},
    {"candidate_source_layer", "candidate_source_layer_id"}, {"engram_pad_id", "engram_pad_token_id"},
    {"n_mtp_layers", "num_nextn_predict_layers"}, {"dspark_n_activated_experts", "dspark_num_experts_per_tok"},
};
static const struct { const char *key, *sub; } ROPE_SCALING[] = {
    {"rope_factor", "factor"}, {"original_seq_len", "original_max_position_embeddings"},
    {"beta_fast", "beta_fast"}, {"beta_slow", "beta_slow"},
};
/* ModelArgs defaults for keys a config.json may leave out */
static const json DEFAULT_MAX_SEQ = {.type = JSON_NUM, .num = 4096, .is_int = 1, .bits = 4096};
static const json DEFAULT_ONE = {.type = JSON_NUM, .num = 1.0};
static const json DEFAULT_TRUE = {.type = JSON_BOOL, .num = 1};

static const json *lookup(const cfg_src *src, const char *key) {
    const json *v = NULL;
    if (src->flat) v = json_get(src->flat, key);
    if (!v && src->text) {
        v = json_get(src->text, key);
        for (size_t i = 0; !v && i < sizeof ALIASES / sizeof *ALIASES; i++)
            if (!strcmp(key, ALIASES[i].key)) v = json_get(src->text, ALIASES[i].served);
        for (size_t i = 0; !v && i < sizeof ROPE_SCALING / sizeof *ROPE_SCALING; i++)
            if (!strcmp(key, ROPE_SCALING[i].key)) v = json_get(json_get(src->text, "rope_scaling"), ROPE_SCALING[i].sub);
    }
    if (!v && !strcmp(key, "max_seq_len")) v = &DEFAULT_MAX_SEQ;
    if (!v && !strcmp(key, "gate_temp")) v = &DEFAULT_ONE;
    if (!v && !strcmp(key, "norm_topk_prob")) v = &DEFAULT_TRUE;
    return v;
}

/* The key as the file spells it, for messages: the served name when the value came from one. */
static const char *spelled(const cfg_src *src, const char *key) {
    if (src->text && !json_get(src->text, key))
        for (size_t i = 0; i < sizeof ALIASES / sizeof *ALIASES; i++)
            if (!strcmp(key, ALIASES[i].key) && json_get(src->text, ALIASES[i].served)) return ALIASES[i].served;
    return key;
}

static const json *need(const cfg_src *o, const char *key, json_type t) {
    const json *v = lookup(o, key);
    if (!v) { set_error("config: missing key '%s'", key); return NULL; }
    if (v->type != t && !(t == JSON_NUM && v->type == JSON_BOOL)) {
        set_error("config: key '%s' has the wrong type", spelled(o, key));
        return NULL;
    }
    return v;
}

static int get_int(const cfg_src *o, const char *key, int32_t lo, int32_t hi, int32_t *out) {
    const json *v = need(o, key, JSON_NUM);
    if (!v) return -1;
    if (!v->is_int || json_i64(v) < lo || json_i64(v) > hi)
        return set_error("config: '%s' must be an integer in [%d, %d]", spelled(o, key), lo, hi);
    *out = (int32_t)json_i64(v);
    return 0;
}

static int get_float(const cfg_src *o, const char *key, float *out) {
    const json *v = need(o, key, JSON_NUM);
    if (!v) return -1;
    if (!isfinite(v->num) || !isfinite((float)v->num))
        return set_error("config: '%s' must be a finite number", spelled(o, key));
    *out = (float)v->num;
    return 0;
}

/* A key only some configs have (the release's DSpark geometry): 0 when absent. */
static int get_opt_int(const cfg_src *o, const char *key, int32_t *out) {
    *out = 0;
    return lookup(o, key) ? get_int(o, key, 0, 1 << 30, out) : 0;
}

/* An integer list of at most cap entries with values in [lo, hi]; returns its length or -1. */
static int get_int_list(const cfg_src *o, const char *key, int64_t lo, int64_t hi, int64_t *out, int cap) {
    const json *v = need(o, key, JSON_ARR);
    if (!v) return -1;
    if ((int)v->len > cap) return set_error("config: '%s' has more than %d entries", key, cap);
    for (size_t i = 0; i < v->len; i++) {
        const json *e = &v->items[i];
        if (e->type != JSON_NUM || !e->is_int || json_i64(e) < lo || json_i64(e) > hi)
            return set_error("config: '%s'[%zu] must be an integer in [%lld, %lld]", spelled(o, key), i, (long long)lo,
                             (long long)hi);
        out[i] = json_i64(e);
    }
    return (int)v->len;
}

int config_engram_index(const config *c, int32_t layer) {
    for (int i = 0; i < c->n_engram; i++)
        if (c->engram_layer[i] == layer) return i;
    return -1;
}

static int read_engram_geometry(config *c, const cfg_src *fx) {
    int64_t tmp[MAX_LAYERS];
    int n = get_int_list(fx, "engram_layer_ids", 0, c->n_layers - 1, tmp, MAX_ENGRAM);
    if (n < 0) return -1;
    c->n_engram = n;
    for (int i = 0; i < n; i++) {
        c->engram_layer[i] = (int32_t)tmp[i];
        if (i > 0 && tmp[i] <= tmp[i - 1]) return set_error("config: engram_layer_ids must ascend");
    }
    if (get_int(fx, "engram_max_ngram_size", 2, MAX_NGRAM, &c->engram_max_ngram) ||
        get_int(fx, "engram_n_heads", 1, MAX_HASH_COLS, &c->engram_n_heads) ||
        get_int(fx, "engram_head_dim", 32, 1 << 16, &c->engram_head_dim))
        return -1;
    if (c->engram_head_dim % 32) return set_error("config: engram_head_dim must be a multiple of 32");
    int cols = engram_cols(c);
    if (cols > MAX_HASH_COLS) return set_error("config: too many engram hash columns (%d)", cols);
    if (n == 0) return 0;
    if (get_int_list(fx, "engram_num_embeddings", 1, INT64_MAX, c->engram_rows, MAX_ENGRAM) != n)
        return set_error("config: engram_num_embeddings must have one entry per engram layer");
    int32_t vs, cv;
    if (get_int(fx, "engram_vocab_size", 1, INT32_MAX, &vs) || get_int(fx, "engram_compressed_vocab_size", 1, INT32_MAX, &cv) ||
        get_int(fx, "engram_pad_id", 0, c->vocab_size - 1, &c->engram_pad_id))
        return -1;
    c->engram_vocab_size = vs;
    c->engram_compressed_vocab = cv;
    return 0;
}

static const json *need_in(const json *o, const char *key, json_type t) {
    cfg_src src = {o, NULL};
    return need(&src, key, t);
}

/* The hash tables as a fixture ships them: {pad_id_compressed, token_map?, multipliers,
 * primes, offsets}; token_map absent means the identity. */
static int read_engram_tables(config *c, const json *e) {
    int n = c->n_engram, cols = engram_cols(c);
    if (n == 0) return 0;
    if (!e || e->type != JSON_OBJ) return set_error("config: missing key 'engram' (the hash tables)");
    const json *pad = need_in(e, "pad_id_compressed", JSON_NUM), *mult = need_in(e, "multipliers", JSON_ARR),
               *primes = need_in(e, "primes", JSON_ARR), *offs = need_in(e, "offsets", JSON_ARR);
    if (!pad || !mult || !primes || !offs) return -1;
    if (json_int(pad, 0, INT64_MAX, &c->engram_pad))
        return set_error("config: engram pad_id_compressed must be a non-negative integer");
    if (mult->len != (size_t)n || primes->len != (size_t)n || offs->len != (size_t)n)
        return set_error("config: engram tables must have one entry per engram layer");
    c->engram_token_map = malloc((size_t)c->vocab_size * sizeof *c->engram_token_map);
    if (!c->engram_token_map) return set_error("config: out of memory");
    const json *tm = json_get(e, "token_map");
    for (int32_t i = 0; i < c->vocab_size; i++) {
        const json *v = tm ? json_at(tm, (size_t)i) : NULL;
        c->engram_token_map[i] = i; /* absent: the identity map */
        if (tm && (tm->len != (size_t)c->vocab_size || json_int(v, 0, INT64_MAX, &c->engram_token_map[i])))
            return set_error("config: engram token_map must hold vocab_size non-negative integers");
    }
    for (int li = 0; li < n; li++) {
        const json *ml = &mult->items[li], *pl = &primes->items[li], *ol = &offs->items[li];
        if (ml->type != JSON_ARR || ml->len != (size_t)c->engram_max_ngram)
            return set_error("config: engram multipliers[%d] must have max_ngram_size entries", li);
        for (int i = 0; i < c->engram_max_ngram; i++)
            if (json_int(&ml->items[i], INT64_MIN, INT64_MAX, &c->engram_mult[li][i]))
                return set_error("config: engram multipliers[%d][%d] must be a 64-bit integer", li, i);
        if (pl->type != JSON_ARR || pl->len != (size_t)(c->engram_max_ngram - 1))
            return set_error("config: engram primes[%d] must have max_ngram_size-1 entries", li);
        if (ol->type != JSON_ARR || ol->len != (size_t)cols)
            return set_error("config: engram offsets[%d] must have %d entries", li, cols);
        int64_t rows = 0;
        for (int g = 0; g < c->engram_max_ngram - 1; g++) {
            const json *ph = &pl->items[g];
            if (ph->type != JSON_ARR || ph->len != (size_t)c->engram_n_heads)
                return set_error("config: engram primes[%d][%d] must have n_heads entries", li, g);
            for (int h = 0; h < c->engram_n_heads; h++) {
                int col = g * c->engram_n_heads + h;
                if (json_int(&ph->items[h], 1, INT64_MAX - rows, &c->engram_prime[li][col]) ||
                    json_int(&ol->items[col], rows, rows, &c->engram_offset[li][col]))
                    return set_error("config: engram offsets[%d] are not the prefix sums of its primes", li);
                rows += c->engram_prime[li][col];
            }
        }
        if (rows != c->engram_rows[li])
            return set_error("config: engram layer %d has %lld rows but its primes sum to %lld", c->engram_layer[li],
                             (long long)c->engram_rows[li], (long long)rows);
    }
    return 0;
}

/* kv / index sources are the layers that own the compressor and the indexer; every compressed
 * layer reads the most recent source at or before it, so one must exist. */
static int read_roles(config *c, const cfg_src *fx) {
    int64_t tmp[MAX_LAYERS];
    if (get_int_list(fx, "compress_ratios", 0, 64, tmp, MAX_LAYERS) < c->n_layers)
        return set_error("config: compress_ratios must have at least n_layers entries");
    for (int l = 0; l < c->n_layers; l++) c->compress_ratio[l] = (int32_t)tmp[l];
    int n = get_int_list(fx, "kv_source_layers", 0, c->n_layers - 1, tmp, MAX_LAYERS);
    if (n < 0) return -1;
    for (int i = 0; i < n; i++) c->is_kv_source[tmp[i]] = 1;
    n = get_int_list(fx, "index_source_layers", 0, c->n_layers - 1, tmp, MAX_LAYERS);
    if (n < 0) return -1;
    for (int i = 0; i < n; i++) c->is_index_source[tmp[i]] = 1;
    int kv_src = -1, idx_src = -1;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->is_kv_source[l]) kv_src = l;
        if (c->is_index_source[l]) idx_src = l;
        if (c->compress_ratio[l] == 0) {
            if (c->is_kv_source[l] || c->is_index_source[l])
                return set_error("config: layer %d is a kv/index source but has compress ratio 0", l);
            continue;
        }
        if (kv_src < 0 || idx_src < 0)
            return set_error("config: compressed layer %d has no kv source and index source at or before it", l);
        if (c->compress_ratio[kv_src] != c->compress_ratio[l])
            return set_error("config: layer %d's ratio differs from its kv source %d", l, kv_src);
        if (c->is_kv_source[l] && !c->is_index_source[l])
            return set_error("config: kv source %d must also be an index source", l);
    }
    /* absent, null or -1: no candidate source */
    const json *cs = lookup(fx, "candidate_source_layer");
    int64_t csl = -1;
    if (cs && cs->type != JSON_NULL && json_int(cs, -1, c->n_layers - 1, &csl))
        return set_error("config: %s must be -1 or a layer id in [0, %d)", spelled(fx, "candidate_source_layer"), c->n_layers);
    c->candidate_source_layer = (int32_t)csl;
    if (csl >= 0 && !c->is_index_source[csl]) return set_error("config: candidate_source_layer must be an index source");
    return 0;
}

/* The DSpark geometry (keys only some configs have). Stage s is layer n_layers + s to the
 * release: its compress ratio, when the list gives one, must be 0 (plain window attention), and
 * its expert counts default to the backbone's. The taps are the inputs of the target layers,
 * concatenated in layer order, so the list must ascend. */
static int read_dspark(config *c, const cfg_src *fx) {
    if (get_opt_int(fx, "n_mtp_layers", &c->n_mtp_layers) || get_opt_int(fx, "dspark_n_routed_experts", &c->dspark_n_experts) ||
        get_opt_int(fx, "dspark_n_activated_experts", &c->dspark_n_activated) ||
        get_opt_int(fx, "dspark_markov_rank", &c->dspark_markov_rank) ||
        get_opt_int(fx, "dspark_block_size", &c->dspark_block_size) ||
        get_opt_int(fx, "dspark_noise_token_id", &c->dspark_noise_id))
        return -1;
    if (c->n_mtp_layers > MAX_LAYERS - c->n_layers)
        return set_error("config: n_layers + n_mtp_layers must be at most %d", MAX_LAYERS);
    if (c->dspark_n_experts == 0) c->dspark_n_experts = c->n_routed_experts;
    if (c->dspark_n_activated == 0) c->dspark_n_activated = c->n_activated_experts;
    if (c->dspark_n_activated > c->dspark_n_experts)
        return set_error("config: dspark_n_activated_experts exceeds dspark_n_routed_experts");
    int64_t tmp[MAX_LAYERS];
    if (lookup(fx, "dspark_target_layer_ids")) {
        int n = get_int_list(fx, "dspark_target_layer_ids", 0, c->n_layers - 1, tmp, MAX_LAYERS);
        if (n < 0) return -1;
        for (int i = 0; i < n; i++) {
            if (i > 0 && tmp[i] <= tmp[i - 1]) return set_error("config: dspark_target_layer_ids must ascend");
            c->dspark_target[i] = (int32_t)tmp[i];
        }
        c->dspark_n_targets = n;
    }
    if (c->dspark_block_size > MAX_DRAFTS) return set_error("config: dspark_block_size must be at most %d", MAX_DRAFTS);
    if (!config_has_drafter(c)) return 0;
    if (c->dspark_n_targets < 1) return set_error("config: a DSpark drafter needs dspark_target_layer_ids");
    if (c->dspark_markov_rank < 1) return set_error("config: a DSpark drafter needs dspark_markov_rank");
    if (c->dspark_noise_id >= c->vocab_size)
        return set_error("config: dspark_noise_token_id must be a token id in [0, %d)", c->vocab_size);
    int n = get_int_list(fx, "compress_ratios", 0, 64, tmp, MAX_LAYERS);
    for (int i = c->n_layers; i < n && i < c->n_layers + c->n_mtp_layers; i++)
        if (tmp[i] != 0) return set_error("config: DSpark stage %d (layer %d) must have compress ratio 0", i - c->n_layers, i);
    return 0;
}

static int compute_engram_tables(config *c, const int64_t *token_map);

static int config_read(config *c, const cfg_src *fx) {
    const int32_t BIG = 1 << 30;
    if (get_int(fx, "vocab_size", 1, BIG, &c->vocab_size) || get_int(fx, "dim", 32, BIG, &c->dim) ||
        get_int(fx, "n_layers", 1, MAX_LAYERS, &c->n_layers) || get_int(fx, "n_heads", 1, BIG, &c->n_heads) ||
        get_int(fx, "head_dim", 32, BIG, &c->head_dim) || get_int(fx, "rope_head_dim", 2, BIG, &c->rope_head_dim) ||
        get_int(fx, "q_lora_rank", 1, BIG, &c->q_lora_rank) || get_int(fx, "o_lora_rank", 1, BIG, &c->o_lora_rank) ||
        get_int(fx, "o_groups", 1, BIG, &c->o_groups) || get_int(fx, "window_size", 1, BIG, &c->window_size) ||
        get_int(fx, "moe_inter_dim", 1, BIG, &c->moe_inter_dim) ||
        get_int(fx, "n_routed_experts", 1, BIG, &c->n_routed_experts) ||
        get_int(fx, "n_shared_experts", 0, BIG, &c->n_shared_experts) ||
        get_int(fx, "n_activated_experts", 1, BIG, &c->n_activated_experts) ||
        get_int(fx, "candidate_topk_blocks", 1, BIG, &c->candidate_topk_blocks) ||
        get_int(fx, "candidate_block_size", 1, BIG, &c->candidate_block_size) ||
        get_int(fx, "index_n_heads", 1, BIG, &c->index_n_heads) ||
        get_int(fx, "index_head_dim", 32, BIG, &c->index_head_dim) ||
        get_int(fx, "index_topk", 1, BIG, &c->index_topk) || get_int(fx, "hc_mult", 1, 64, &c->hc_mult) ||
        get_int(fx, "hc_sinkhorn_iters", 1, 1000, &c->hc_sinkhorn_iters) ||
        get_int(fx, "original_seq_len", 0, BIG, &c->original_seq_len) ||
        get_int(fx, "max_seq_len", 1, BIG, &c->max_seq_len) || get_float(fx, "route_scale", &c->route_scale) ||
        get_float(fx, "swiglu_limit", &c->swiglu_limit) || get_float(fx, "gate_temp", &c->gate_temp) ||
        get_float(fx, "hc_eps", &c->hc_eps) || get_float(fx, "norm_eps", &c->norm_eps) ||
        get_float(fx, "rope_theta", &c->rope_theta) || get_float(fx, "compress_rope_theta", &c->compress_rope_theta) ||
        get_float(fx, "rope_factor", &c->rope_factor) || get_float(fx, "beta_fast", &c->beta_fast) ||
        get_float(fx, "beta_slow", &c->beta_slow))
        return -1;
    const json *ntp = need(fx, "norm_topk_prob", JSON_BOOL), *sf = need(fx, "score_func", JSON_STR);
    if (!ntp || !sf) return -1;
    c->norm_topk_prob = ntp->num != 0;
    if (strcmp(sf->str, "sqrtsoftplus") != 0)
        return set_error("config: score_func '%s' is not supported (only sqrtsoftplus)", sf->str);
    if (c->head_dim % 32 || c->index_head_dim % 32)
        return set_error("config: head_dim and index_head_dim must be multiples of 32 (quant blocks)");
    if (c->rope_head_dim % 2 || c->rope_head_dim > c->head_dim || c->rope_head_dim > c->index_head_dim)
        return set_error("config: rope_head_dim must be even and fit in head_dim and index_head_dim");
    /* the widths products of these make are int32 throughout the code */
    if ((int64_t)c->n_heads * c->head_dim > BIG || (int64_t)c->index_n_heads * c->index_head_dim > BIG ||
        (int64_t)c->hc_mult * c->dim > BIG)
        return set_error("config: n_heads*head_dim, index_n_heads*index_head_dim and hc_mult*dim must be at most %d", BIG);
    if ((c->n_heads * c->head_dim) % c->o_groups)
        return set_error("config: n_heads*head_dim must divide into o_groups");
    if (c->n_activated_experts > c->n_routed_experts)
        return set_error("config: n_activated_experts exceeds n_routed_experts");
    /* the window ring is allocated whole per layer and read whole by each decode step: a window
     * longer than the context would only cost memory no token can use (sizes come from a file) */
    if (c->window_size > c->max_seq_len)
        return set_error("config: '%s' %d exceeds the context '%s' %d", spelled(fx, "window_size"), c->window_size,
                         spelled(fx, "max_seq_len"), c->max_seq_len);
    return read_roles(c, fx) || read_engram_geometry(c, fx) || read_dspark(c, fx) ? -1 : 0;
}

int config_from_fixture(config *c, const json *fx) {
    memset(c, 0, sizeof *c);
    if (!fx || fx->type != JSON_OBJ) return set_error("config: not a JSON object");
    cfg_src src = {fx, NULL};
    if (config_read(c, &src)) return -1;
    const json *tables = json_get(fx, "engram");
    int rc = 0;
    if (tables || c->n_engram == 0) {
        rc = read_engram_tables(c, tables);
    } else { /* no shipped tables: derive them as a checkpoint's loader does, token map the identity */
        int64_t *ident = malloc((size_t)c->vocab_size * sizeof *ident);
        if (!ident) return set_error("out of memory");
        for (int32_t i = 0; i < c->vocab_size; i++) ident[i] = i;
        rc = compute_engram_tables(c, ident);
        free(ident);
    }
    if (rc) config_free(c);
    return rc;
}

static int is_prime(int64_t n) {
    if (n < 2) return 0;
    for (int64_t d = 2; d * d <= n; d++)
        if (n % d == 0) return 0;
    return 1;
}

/* The release's layout: each (layer, n-gram size, head) takes the next prime above
 * engram_vocab_size-1 not handed out yet; offsets restart at 0 per layer; the multipliers are
 * numpy's default_rng(10007*layer).integers(0, bound, max_ngram) * 2 + 1. */
static int compute_engram_tables(config *c, const int64_t *token_map) {
    int64_t p = c->engram_vocab_size - 1, bound = (INT64_MAX / c->engram_compressed_vocab) / 2;
    int cols = engram_cols(c);
    for (int li = 0; li < c->n_engram; li++) {
        int64_t rows = 0;
        for (int col = 0; col < cols; col++) {
            do p++; while (!is_prime(p));
            c->engram_prime[li][col] = p;
            c->engram_offset[li][col] = rows;
            rows += p;
        }
        if (rows != c->engram_rows[li])
            return set_error("config: engram layer %d has %lld rows but its primes sum to %lld", c->engram_layer[li],
                             (long long)c->engram_rows[li], (long long)rows);
        np_rng_integers(10007u * (uint64_t)c->engram_layer[li], bound < 1 ? 1 : bound, c->engram_max_ngram, c->engram_mult[li]);
        for (int i = 0; i < c->engram_max_ngram; i++) c->engram_mult[li][i] = c->engram_mult[li][i] * 2 + 1;
    }
    c->engram_token_map = malloc((size_t)c->vocab_size * sizeof *c->engram_token_map);
    if (!c->engram_token_map) return set_error("out of memory");
    for (int32_t i = 0; i < c->vocab_size; i++) {
        if (token_map[i] < 0 || token_map[i] >= c->engram_compressed_vocab)
            return set_error("config: engram token map entry %d is outside [0, %lld)", i, (long long)c->engram_compressed_vocab);
        c->engram_token_map[i] = token_map[i];
    }
    c->engram_pad = c->engram_token_map[c->engram_pad_id];
    return 0;
}

int config_from_checkpoint(config *c, const json *root) {
    memset(c, 0, sizeof *c);
    if (!root || root->type != JSON_OBJ) return set_error("config.json: not a JSON object");
    const json *text = json_get(root, "text_config");
    cfg_src src = {text ? NULL : root, text};
    return config_read(c, &src);
}

int config_set_token_map(config *c, const int64_t *token_map) {
    if (compute_engram_tables(c, token_map)) { config_free(c); return -1; }
    return 0;
}

void config_free(config *c) {
    free(c->engram_token_map);
    c->engram_token_map = NULL;
}
