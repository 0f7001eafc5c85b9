/* convert.c - writes a model as a checkpoint directory in the release layout.
 *
 * The model is built once through a recording weight source, so the writer sees every tensor
 * under the name and shape the loader will ask for, and a round trip through the loader is the
 * identity by construction. Dense bf16 matrices can be stored as the release stores them:
 * e4m3 with one e8m0 scale per 32x32 tile, routed experts as packed e2m1 with one e8m0 scale
 * per 32 inputs. Files go into a temporary directory that is renamed into place last.
 *
 * A skeleton is the release checkpoint's layout with no data: every tensor of the inventory
 * (inventory.c) at its real shape and dtype, in shards as the release has them, each data region a
 * hole of a sparse file. It costs a few megabytes of disk, reads as all-zero weights, and is
 * otherwise the real thing to the loader: names, offsets, sizes, memory, time to first token. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files.h"
#include "filler.h"
#include "golden.h"
#include "inventory.h"
#include "numerics.h"

typedef struct {
    char name[160];
    int32_t ndim;
    int64_t shape[2];
    weight w;                /* type, mode and geometry; data and scale are not kept */
    int has_scale;
} record;

/* Records what model_build asks for, answering from inner with memory it reuses for the next
 * tensor: the loader reads a tensor only before its next load, and the writer asks inner again
 * tensor by tensor, so converting never holds more than one tensor of the model. */
typedef struct {
    weight_source base;
    weight_source *inner;
    dsv41_model arena;       /* owns the tensor inner answered last */
    const volatile sig_atomic_t *cancel; /* polled before each tensor, or NULL */
    record *recs;
    size_t n, cap;
} recorder;

static void arena_clear(dsv41_model *a) {
    for (size_t i = 0; i < a->n_owned; i++) free(a->owned[i]);
    a->n_owned = 0;
}

static int record_load(weight_source *src, dsv41_model *m, const char *name, int32_t ndim, const int64_t *shape, weight *w) {
    (void)m;
    recorder *r = (recorder *)src;
    if (r->cancel && *r->cancel) return set_error("convert: cancelled");
    arena_clear(&r->arena);
    if (r->inner->load(r->inner, &r->arena, name, ndim, shape, w)) return -1;
    if (r->n == r->cap) {
        size_t cap = r->cap ? r->cap * 2 : 256;
        record *nr = realloc(r->recs, cap * sizeof *nr);
        if (!nr) return set_error("out of memory");
        r->recs = nr;
        r->cap = cap;
    }
    record *rec = &r->recs[r->n++];
    snprintf(rec->name, sizeof rec->name, "%s", name);
    rec->ndim = ndim;
    rec->shape[0] = shape[0];
    rec->shape[1] = ndim > 1 ? shape[1] : 1;
    rec->w = *w;
    rec->w.data = NULL;
    rec->w.scale = NULL;
    rec->has_scale = w->scale != NULL;
    return 0;
}

/* one tensor as it goes into a shard */
typedef struct {
    char name[168];
    const char *dtype;
    int32_t ndim;
    int64_t shape[2];
    size_t nbytes;
    int32_t shard;
    size_t rec;              /* the record it comes from: its weight, then its scale (none in a skeleton) */
} out_tensor;

typedef struct {
    out_tensor *t;
    size_t n, cap;
} out_list;

static int add_out(out_list *o, const char *name, const char *dtype, int32_t ndim, int64_t r, int64_t c, size_t nbytes,
                   int32_t shard, size_t rec) {
    if (o->n == o->cap) {
        size_t cap = o->cap ? o->cap * 2 : 256;
        out_tensor *nt = realloc(o->t, cap * sizeof *nt);
        if (!nt) return set_error("out of memory");
        o->t = nt;
        o->cap = cap;
    }
    out_tensor *t = &o->t[o->n++];
    snprintf(t->name, sizeof t->name, "%s", name);
    t->dtype = dtype;
    t->ndim = ndim;
    t->shape[0] = r;
    t->shape[1] = c;
    t->nbytes = nbytes;
    t->shard = shard;
    t->rec = rec;
    return 0;
}

/* The matrices the release keeps in fp8 (everything else dense stays bf16 / f32). */
static int stored_fp8(const char *name) {
    static const char *suffixes[] = {"attn.wq_a.weight", "attn.wq_b.weight", "attn.wkv.weight", "attn.wo_a.weight",
                                     "attn.wo_b.weight", "shared_experts.w1.weight", "shared_experts.w2.weight",
                                     "shared_experts.w3.weight", "indexer.wq_b.weight", "engram.wkv.weight",
                                     "main_proj.weight"};
    for (size_t i = 0; i < sizeof suffixes / sizeof *suffixes; i++)
        if (name_ends(name, suffixes[i])) return 1;
    return 0;
}

/* Held in f32 by the reference but stored bf16 in the release checkpoint (model.py promotes
 * them on load). */
static int promoted_f32(const char *name) {
    return !strcmp(name, "head.weight") || name_ends(name, "compressor.wkv.weight") || name_ends(name, "compressor.wgate.weight");
}

/* w [rows][cols] -> codes e4m3 [rows][cols], scale e8m0 [ceil(rows/32)][ceil(cols/32)] */
static void quant_fp8_tiles(const weight *w, uint8_t *codes, uint8_t *scale) {
    int64_t tr = (w->rows + 31) / 32, tc = (w->cols + 31) / 32;
    for (int64_t bi = 0; bi < tr; bi++)
        for (int64_t bj = 0; bj < tc; bj++) {
            float amax = 0.0f;
            for (int64_t r = bi * 32; r < w->rows && r < bi * 32 + 32; r++)
                for (int64_t c = bj * 32; c < w->cols && c < bj * 32 + 32; c++) amax = fmaxf(amax, fabsf(weight_get(w, r, c)));
            float s = pow2_ceil(fmaxf(amax, 0x1p-100f) / 448.0f);
            scale[bi * tc + bj] = f32_to_e8m0(s);
            for (int64_t r = bi * 32; r < w->rows && r < bi * 32 + 32; r++)
                for (int64_t c = bj * 32; c < w->cols && c < bj * 32 + 32; c++) codes[r * w->cols + c] = f32_to_e4m3(weight_get(w, r, c) / s);
        }
}

/* w [rows][cols] -> packed e2m1 [rows][ceil(cols/2)] (low nibble first), scale [rows][ceil(cols/32)] */
static void quant_fp4_rows(const weight *w, uint8_t *packed, uint8_t *scale) {
    int64_t pc = (w->cols + 1) / 2, bc = (w->cols + 31) / 32;
    for (int64_t r = 0; r < w->rows; r++)
        for (int64_t b = 0; b < bc; b++) {
            float amax = 0.0f;
            for (int64_t c = b * 32; c < w->cols && c < b * 32 + 32; c++) amax = fmaxf(amax, fabsf(weight_get(w, r, c)));
            float s = pow2_ceil(fmaxf(amax, 0x1p-100f) / 6.0f);
            scale[r * bc + b] = f32_to_e8m0(s);
            for (int64_t c = b * 32; c < w->cols && c < b * 32 + 32; c++) {
                uint8_t code = f32_to_e2m1(weight_get(w, r, c) / s);
                packed[r * pc + c / 2] |= (uint8_t)((c & 1) ? code << 4 : code);
            }
        }
}

static int32_t shard_of(const config *c, const char *name) {
    if (strstr(name, "engram.embed.")) return 2; /* the tables sit in the last shard, as in the release */
    int l;
    if (sscanf(name, "layers.%d.", &l) == 1) return l < c->n_layers / 2 ? 0 : 1;
    return strcmp(name, "embed.weight") == 0 ? 0 : 1;
}

/* How a recorded tensor is stored: as the source gave it, or as the release's fp8 layout has it */
typedef enum { KEEP, QUANT_FP8, QUANT_FP4, TO_BF16 } storing;

static storing how_stored(const record *rc, int fp8) {
    if (fp8 && rc->w.type == DT_BF16 && strstr(rc->name, ".ffn.experts.")) return QUANT_FP4;
    if (fp8 && rc->w.type == DT_BF16 && stored_fp8(rc->name)) return QUANT_FP8;
    if (fp8 && rc->w.type == DT_F32 && promoted_f32(rc->name)) return TO_BF16; /* the release stores these bf16 */
    return KEEP;
}

/* The shard layout from the records alone: names, dtypes, shapes and byte counts. */
static int plan(const config *c, const recorder *r, int fp8, out_list *o) {
    static const char *DT[] = {"F32", "BF16", "F8_E4M3", "F8_E8M0", "I8"};
    static const int SZ[] = {4, 2, 1, 1, 1};
    for (size_t i = 0; i < r->n; i++) {
        const record *rc = &r->recs[i];
        const weight *w = &rc->w;
        int32_t sh = shard_of(c, rc->name);
        int64_t rows = w->rows, cols = w->cols, sc = (cols + 31) / 32;
        char sname[180];
        snprintf(sname, sizeof sname, "%.*s.scale", (int)strlen(rc->name) - 7, rc->name);
        storing how = how_stored(rc, fp8);
        int rc_err = 0;
        if (how == QUANT_FP8 || how == QUANT_FP4) {
            int64_t sr = how == QUANT_FP4 ? rows : (rows + 31) / 32, dc = how == QUANT_FP4 ? (cols + 1) / 2 : cols;
            rc_err = add_out(o, rc->name, how == QUANT_FP4 ? "I8" : "F8_E4M3", 2, rows, dc, (size_t)(rows * dc), sh, i) ||
                     add_out(o, sname, "F8_E8M0", 2, sr, sc, (size_t)(sr * sc), sh, i);
        } else if (how == TO_BF16) {
            rc_err = add_out(o, rc->name, "BF16", rc->ndim, rc->shape[0], rc->shape[1], (size_t)(rows * cols) * 2, sh, i);
        } else {
            size_t nb = (size_t)(rows * (w->type == DT_FP4 ? (cols + 1) / 2 : cols)) * (size_t)SZ[w->type];
            int64_t sr = w->scale_rows == 1 ? rows : (rows + 31) / 32;
            rc_err = add_out(o, rc->name, DT[w->type], rc->ndim, rc->shape[0], rc->shape[1], nb, sh, i) ||
                     (rc->has_scale && add_out(o, sname, "F8_E8M0", 2, sr, sc, (size_t)(sr * sc), sh, i));
        }
        if (rc_err) return -1;
    }
    return 0;
}

/* a growable text buffer for headers and JSON files; oom is set once a put could not grow it */
typedef struct {
    char *s;
    size_t n, cap;
    int oom;
} text;

static void put(text *t, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    int need = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (need < 0 || t->oom) return;
    if (t->n + (size_t)need + 1 > t->cap) {
        size_t cap = (t->n + (size_t)need + 1) * 2;
        char *ns = realloc(t->s, cap);
        if (!ns) { t->oom = 1; return; }
        t->s = ns;
        t->cap = cap;
    }
    va_start(ap, fmt);
    vsnprintf(t->s + t->n, (size_t)need + 1, fmt, ap);
    va_end(ap);
    t->n += (size_t)need;
}

/* Flushes f to the disk and closes it: a renamed checkpoint must not be missing its data after
 * a crash. Returns 0 or -1 with a message naming path. */
static int close_synced(FILE *f, const char *path, int ok) {
    ok = ok && fflush(f) == 0 && fsync(fileno(f)) == 0;
    ok = fclose(f) == 0 && ok;
    return ok ? 0 : set_error("%s: write failed: %s", path, strerror(errno));
}

static int write_text(const char *dir, const char *file, const text *t) {
    char path[1400];
    snprintf(path, sizeof path, "%s/%s", dir, file);
    if (t->oom) return set_error("%s: out of memory", path);
    FILE *f = fopen(path, "wb");
    if (!f) return set_error("%s: cannot create: %s", path, strerror(errno));
    return close_synced(f, path, fwrite(t->s, 1, t->n, f) == t->n);
}

/* The 8-byte length and the JSON header of one shard; *end is the file's full length. */
static int write_header(FILE *f, const char *path, const out_list *o, int32_t shard, off_t *end) {
    text h = {0};
    put(&h, "{\"__metadata__\":{\"format\":\"pt\"}");
    size_t off = 0;
    for (size_t i = 0; i < o->n; i++) {
        const out_tensor *t = &o->t[i];
        if (t->shard != shard) continue;
        put(&h, ",\"%s\":{\"dtype\":\"%s\",\"shape\":[%lld", t->name, t->dtype, (long long)t->shape[0]);
        if (t->ndim > 1) put(&h, ",%lld", (long long)t->shape[1]);
        put(&h, "],\"data_offsets\":[%zu,%zu]}", off, off + t->nbytes);
        off += t->nbytes;
    }
    put(&h, "}");
    while (h.n % 8) put(&h, " ");
    uint8_t len[8];
    for (int i = 0; i < 8; i++) len[i] = (uint8_t)((uint64_t)h.n >> (8 * i));
    *end = (off_t)(8 + h.n + off);
    int rc = h.oom ? set_error("%s: out of memory", path)
             : fwrite(len, 1, 8, f) == 8 && fwrite(h.s, 1, h.n, f) == h.n ? 0 : set_error("%s: write failed", path);
    free(h.s);
    return rc;
}

/* Every tensor's bytes into its shard, in the plan's order: each record's tensor is asked of
 * the source again, quantized when the plan says so, written and dropped. */
static int write_tensors(recorder *r, const out_list *o, int fp8, FILE **f, char (*paths)[1400]) {
    int rc = 0;
    for (size_t i = 0, k = 0; rc == 0 && i < r->n; i++) {
        const record *rec = &r->recs[i];
        if (r->cancel && *r->cancel) return set_error("convert: cancelled");
        progress_report("write: tensors", (int64_t)i, (int64_t)r->n);
        weight w;
        arena_clear(&r->arena);
        if (r->inner->load(r->inner, &r->arena, rec->name, rec->ndim, rec->shape, &w)) return -1;
        storing how = how_stored(rec, fp8);
        const out_tensor *t = &o->t[k], *ts = k + 1 < o->n && o->t[k + 1].rec == i ? &o->t[k + 1] : NULL;
        uint8_t *data = how == KEEP ? NULL : calloc(1, t->nbytes + 1), *scale = ts && how != KEEP ? calloc(1, ts->nbytes + 1) : NULL;
        if ((how != KEEP && !data) || (ts && how != KEEP && !scale)) rc = set_error("out of memory");
        else if (how == QUANT_FP4) quant_fp4_rows(&w, data, scale);
        else if (how == QUANT_FP8) quant_fp8_tiles(&w, data, scale);
        else if (how == TO_BF16)
            for (int64_t e = 0; e < w.rows * w.cols; e++) ((uint16_t *)data)[e] = f32_to_bf16(((const float *)w.data)[e]);
        if (rc == 0 && fwrite(how == KEEP ? w.data : data, 1, t->nbytes, f[t->shard]) != t->nbytes)
            rc = set_error("%s: write failed: %s", paths[t->shard], strerror(errno));
        if (rc == 0 && ts && fwrite(how == KEEP ? w.scale : scale, 1, ts->nbytes, f[ts->shard]) != ts->nbytes)
            rc = set_error("%s: write failed: %s", paths[ts->shard], strerror(errno));
        k += ts ? 2 : 1;
        free(data);
        free(scale);
    }
    arena_clear(&r->arena);
    if (rc == 0) progress_report("write: tensors", (int64_t)r->n, (int64_t)r->n);
    return rc;
}

static void shard_file(char *buf, size_t cap, int32_t s, int32_t nshards) {
    snprintf(buf, cap, "model-%05d-of-%05d.safetensors", s + 1, nshards);
}

/* All shards are open at once because the records come in model order, not shard order. Without
 * a recorder (a skeleton) nothing is written after the headers: each file is sized with
 * ftruncate, so its data regions are holes and a 100 GB table costs no disk. */
static int write_shards(const char *dir, recorder *r, const out_list *o, int fp8, int32_t nshards) {
    FILE **f = calloc((size_t)nshards, sizeof *f);
    char (*paths)[1400] = calloc((size_t)nshards, sizeof *paths);
    off_t *end = calloc((size_t)nshards, sizeof *end);
    int rc = f && paths && end ? 0 : set_error("out of memory");
    for (int32_t s = 0; rc == 0 && s < nshards; s++) {
        char file[64];
        shard_file(file, sizeof file, s, nshards);
        snprintf(paths[s], sizeof paths[s], "%s/%s", dir, file);
        if (!(f[s] = fopen(paths[s], "wb"))) rc = set_error("%s: cannot create: %s", paths[s], strerror(errno));
        else rc = write_header(f[s], paths[s], o, s, &end[s]);
    }
    if (rc == 0 && r) rc = write_tensors(r, o, fp8, f, paths);
    for (int32_t s = 0; rc == 0 && !r && s < nshards; s++)
        if (fflush(f[s]) != 0 || ftruncate(fileno(f[s]), end[s]) != 0) rc = set_error("%s: write failed: %s", paths[s], strerror(errno));
    for (int32_t s = 0; f && s < nshards; s++)
        if (f[s] && close_synced(f[s], paths[s], rc == 0) && rc == 0) rc = -1;
    free(f);
    free(paths);
    free(end);
    return rc;
}

static void put_list(text *t, const char *key, const int32_t *v, int n) {
    put(t, ",\n    \"%s\": [", key);
    for (int i = 0; i < n; i++) put(t, "%s%d", i ? ", " : "", v[i]);
    put(t, "]");
}

/* config.json in the served form: text_config under the HF names, quantization_config when fp8 */
static void config_json(const config *c, int fp8, text *t) {
    int32_t kv[MAX_LAYERS], ix[MAX_LAYERS], nkv = 0, nix = 0;
    for (int l = 0; l < c->n_layers; l++) {
        if (c->is_kv_source[l]) kv[nkv++] = l;
        if (c->is_index_source[l]) ix[nix++] = l;
    }
    put(t, "{\n  \"architectures\": [\"DeepseekV41ForCausalLM\"],\n  \"model_type\": \"deepseek_v41\",\n");
    put(t, "  \"bos_token_id\": 0,\n  \"eos_token_id\": 1,\n  \"pad_token_id\": 2,\n  \"dtype\": \"bfloat16\",\n");
    if (fp8)
        put(t, "  \"quantization_config\": {\"quant_method\": \"fp8\", \"activation_scheme\": \"dynamic\", "
               "\"weight_block_size\": [32, 32], \"scale_fmt\": \"ue8m0\", \"expert_dtype\": \"fp4\"},\n");
    put(t, "  \"text_config\": {\n    \"model_type\": \"deepseek_v41_text\",\n    \"vocab_size\": %d", c->vocab_size);
    put(t, ",\n    \"hidden_size\": %d,\n    \"num_hidden_layers\": %d,\n    \"num_attention_heads\": %d", c->dim, c->n_layers, c->n_heads);
    put(t, ",\n    \"num_key_value_heads\": 1,\n    \"head_dim\": %d,\n    \"qk_rope_head_dim\": %d", c->head_dim, c->rope_head_dim);
    put(t, ",\n    \"q_lora_rank\": %d,\n    \"o_lora_rank\": %d,\n    \"o_groups\": %d", c->q_lora_rank, c->o_lora_rank, c->o_groups);
    put(t, ",\n    \"moe_intermediate_size\": %d,\n    \"n_routed_experts\": %d", c->moe_inter_dim, c->n_routed_experts);
    put(t, ",\n    \"n_shared_experts\": %d,\n    \"num_experts_per_tok\": %d", c->n_shared_experts, c->n_activated_experts);
    put(t, ",\n    \"scoring_func\": \"sqrtsoftplus\",\n    \"routed_scaling_factor\": %.9g", c->route_scale);
    put(t, ",\n    \"norm_topk_prob\": %s,\n    \"swiglu_limit\": %.9g", c->norm_topk_prob ? "true" : "false", c->swiglu_limit);
    put(t, ",\n    \"gate_temp\": %.9g,\n    \"sliding_window\": %d", c->gate_temp, c->window_size);
    put_list(t, "compress_ratios", c->compress_ratio, c->n_layers + (config_has_drafter(c) ? c->n_mtp_layers : 0));
    put_list(t, "kv_source_layer_ids", kv, nkv);
    put_list(t, "index_source_layer_ids", ix, nix);
    put(t, ",\n    \"candidate_source_layer_id\": %d,\n    \"candidate_topk_blocks\": %d", c->candidate_source_layer, c->candidate_topk_blocks);
    put(t, ",\n    \"candidate_block_size\": %d,\n    \"index_n_heads\": %d", c->candidate_block_size, c->index_n_heads);
    put(t, ",\n    \"index_head_dim\": %d,\n    \"index_topk\": %d", c->index_head_dim, c->index_topk);
    put(t, ",\n    \"hc_mult\": %d,\n    \"hc_sinkhorn_iters\": %d,\n    \"hc_eps\": %.9g", c->hc_mult, c->hc_sinkhorn_iters, c->hc_eps);
    put_list(t, "engram_layer_ids", c->engram_layer, c->n_engram);
    if (c->n_engram) {
        put(t, ",\n    \"engram_max_ngram_size\": %d,\n    \"engram_vocab_size\": %lld", c->engram_max_ngram, (long long)c->engram_vocab_size);
        put(t, ",\n    \"engram_n_heads\": %d,\n    \"engram_head_dim\": %d", c->engram_n_heads, c->engram_head_dim);
        put(t, ",\n    \"engram_pad_token_id\": %d,\n    \"engram_compressed_vocab_size\": %lld", c->engram_pad_id,
            (long long)c->engram_compressed_vocab);
        put(t, ",\n    \"engram_num_embeddings\": [");
        for (int i = 0; i < c->n_engram; i++) put(t, "%s%lld", i ? ", " : "", (long long)c->engram_rows[i]);
        put(t, "]");
    } else {
        put(t, ",\n    \"engram_max_ngram_size\": %d,\n    \"engram_n_heads\": %d,\n    \"engram_head_dim\": %d",
            c->engram_max_ngram, c->engram_n_heads, c->engram_head_dim);
    }
    if (config_has_drafter(c)) {
        put(t, ",\n    \"num_nextn_predict_layers\": %d,\n    \"dspark_block_size\": %d", c->n_mtp_layers, c->dspark_block_size);
        put(t, ",\n    \"dspark_noise_token_id\": %d", c->dspark_noise_id);
        put_list(t, "dspark_target_layer_ids", c->dspark_target, c->dspark_n_targets);
        put(t, ",\n    \"dspark_markov_rank\": %d,\n    \"dspark_n_routed_experts\": %d", c->dspark_markov_rank, c->dspark_n_experts);
        put(t, ",\n    \"dspark_num_experts_per_tok\": %d", c->dspark_n_activated);
    }
    put(t, ",\n    \"rope_theta\": %.9g,\n    \"compress_rope_theta\": %.9g", c->rope_theta, c->compress_rope_theta);
    put(t, ",\n    \"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": %.9g, \"original_max_position_embeddings\": %d, "
           "\"beta_fast\": %.9g, \"beta_slow\": %.9g}", c->rope_factor, c->original_seq_len, c->beta_fast, c->beta_slow);
    put(t, ",\n    \"rms_norm_eps\": %.9g,\n    \"max_seq_len\": %d\n  }\n}\n", c->norm_eps, c->max_seq_len);
}

static void remove_tree(const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    struct dirent *e;
    char path[1400];
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
            snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
            unlink(path);
        }
    closedir(d);
    rmdir(dir);
}

static int sync_dir(const char *dir) {
    return file_sync_dir(dir) ? set_error("%s: cannot sync the directory: %s", dir, strerror(errno)) : 0;
}

/* The directory: o's tensors in nshards shards (their data from r, or holes without one), the
 * index, config.json with the text given, and c's Engram token map. It appears whole under
 * out_dir or not at all. */
static int write_checkpoint(const config *c, recorder *r, const out_list *o, int fp8, int32_t nshards, const text *cfg,
                            const char *out_dir) {
    struct stat st;
    if (stat(out_dir, &st) == 0) return set_error("%s: already exists (convert never overwrites)", out_dir);
    char tmp[1100], parent[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp-XXXXXX", out_dir);
    if (!mkdtemp(tmp)) return set_error("%s: cannot create a temporary directory: %s", out_dir, strerror(errno));
    int rc = write_shards(tmp, r, o, fp8, nshards);
    text t = {0};
    if (rc == 0) {
        size_t total = 0;
        char file[64];
        for (size_t i = 0; i < o->n; i++) total += o->t[i].nbytes;
        put(&t, "{\n  \"metadata\": {\"total_size\": %zu},\n  \"weight_map\": {", total);
        for (size_t i = 0; i < o->n; i++) {
            shard_file(file, sizeof file, o->t[i].shard, nshards);
            put(&t, "%s\n    \"%s\": \"%s\"", i ? "," : "", o->t[i].name, file);
        }
        put(&t, "\n  }\n}\n");
        rc = write_text(tmp, "model.safetensors.index.json", &t);
        t.n = 0;
    }
    if (rc == 0) rc = write_text(tmp, "config.json", cfg);
    if (rc == 0 && c->n_engram) {
        put(&t, "[");
        for (int32_t i = 0; i < c->vocab_size; i++) put(&t, "%s%lld", i ? "," : "", (long long)c->engram_token_map[i]);
        put(&t, "]\n");
        rc = write_text(tmp, "engram_token_map.json", &t);
    }
    if (rc == 0 && r && r->cancel && *r->cancel) rc = set_error("convert: cancelled");
    if (rc == 0) rc = sync_dir(tmp);
    if (rc == 0 && rename(tmp, out_dir) != 0) rc = set_error("%s: cannot rename into place: %s", out_dir, strerror(errno));
    if (rc) remove_tree(tmp);
    snprintf(parent, sizeof parent, "%s", out_dir);
    if (rc == 0) rc = sync_dir(dirname(parent));
    free(t.s);
    return rc;
}

/* Builds the model of c through a recorder over inner and writes what was recorded. */
static int convert(config *c, weight_source *inner, const char *dtype, const char *out_dir, const volatile sig_atomic_t *cancel) {
    int fp8 = !strcmp(dtype, "fp8");
    if (!fp8 && strcmp(dtype, "bf16")) { config_free(c); return set_error("convert: --dtype must be bf16 or fp8, not '%s'", dtype); }
    recorder r = {.base = {record_load}, .inner = inner, .cancel = cancel};
    dsv41_model *m = model_build(c, &r.base);
    out_list o = {0};
    text cfg = {0};
    int rc = m ? plan(&m->cfg, &r, fp8, &o) : -1;
    if (rc == 0) {
        config_json(&m->cfg, fp8, &cfg);
        rc = write_checkpoint(&m->cfg, &r, &o, fp8, m->cfg.n_engram ? 3 : 2, &cfg, out_dir);
    }
    free(o.t);
    free(cfg.s);
    if (!m) config_free(c);
    dsv41_model_free(m);
    arena_clear(&r.arena);
    free(r.arena.owned);
    free(r.recs);
    return rc;
}

/* The last error, prefixed with the file it is about; returns -1. */
static int error_in(const char *path) {
    char msg[600];
    snprintf(msg, sizeof msg, "%s", dsv41_error());
    return set_error("%s: %s", path, msg);
}

int dsv41_convert_golden(const dsv41_golden *g, const char *dtype, const char *out_dir, const volatile sig_atomic_t *cancel) {
    const json *root = golden_root(g);
    config c;
    if (config_from_fixture(&c, json_get(root, "fixture"))) return -1;
    weight_source *meta = meta_source_new(json_get(root, "weights_meta"));
    if (!meta) { config_free(&c); return -1; }
    int rc = convert(&c, meta, dtype, out_dir, cancel);
    meta_source_free(meta);
    return rc;
}

int dsv41_synth(const char *config_path, const char *dtype, const char *out_dir, const volatile sig_atomic_t *cancel) {
    char err[512];
    json *j = json_load_file(config_path, err, sizeof err);
    if (!j) return set_error("%s", err);
    config c;
    int rc = config_from_fixture(&c, j);
    json_free(j);
    if (rc) return error_in(config_path);
    weight_source *rule = rule_source_new(&c);
    if (!rule) { config_free(&c); return -1; }
    rc = convert(&c, rule, dtype, out_dir, cancel);
    free(rule);
    return rc;
}

/* The release's layout: each Engram table (weight, then its scales) in a shard of its own at the
 * end, everything else in file order over the n_other shards before them, cut where the running
 * byte count passes an equal share of `rest`. */
static int32_t skeleton_shard(const char *name, int64_t before, int64_t rest, int32_t n_other, int32_t *tables) {
    if (name_ends(name, ".engram.embed.weight")) return n_other + (*tables)++;
    if (name_ends(name, ".engram.embed.scale")) return n_other + *tables - 1;
    int64_t s = rest > 0 ? (int64_t)((double)before / (double)rest * n_other) : 0;
    return (int32_t)(s < n_other ? s : n_other - 1);
}

int dsv41_synth_skeleton(const char *config_path, int32_t n_shards, const char *out_dir) {
    char err[512];
    size_t len;
    text cfg = {0};
    cfg.s = file_read_all(config_path, &len, err, sizeof err);
    if (!cfg.s) return set_error("%s", err);
    cfg.n = cfg.cap = len;
    json *j = json_parse(cfg.s, len, err, sizeof err);
    if (!j) {
        free(cfg.s);
        return set_error("%s: %s", config_path, err);
    }
    config c;
    int rc = config_from_checkpoint(&c, j);
    json_free(j);
    if (rc) {
        free(cfg.s);
        return error_in(config_path);
    }
    inventory inv = {0};
    out_list o = {0};
    if (n_shards <= c.n_engram) rc = set_error("skeleton: %d shards cannot hold %d Engram tables and the rest", n_shards, c.n_engram);
    else rc = inventory_build(&c, &inv);
    int64_t rest = 0, before = 0;
    for (size_t i = 0; rc == 0 && i < inv.n; i++)
        if (!strstr(inv.t[i].name, ".engram.embed.")) rest += inv.t[i].nbytes;
    int32_t tables = 0;
    for (size_t i = 0; rc == 0 && i < inv.n; i++) {
        const inv_tensor *t = &inv.t[i];
        int32_t sh = skeleton_shard(t->name, before, rest, n_shards - c.n_engram, &tables);
        if (!strstr(t->name, ".engram.embed.")) before += t->nbytes;
        rc = add_out(&o, t->name, t->dtype, t->ndim, t->shape[0], t->shape[1], (size_t)t->nbytes, sh, 0);
    }
    /* The release derives the Engram token map from its tokenizer; a skeleton has none, so it
     * gets a placeholder in range (token i -> i mod the compressed vocabulary). */
    if (rc == 0 && c.n_engram) {
        c.engram_token_map = malloc((size_t)c.vocab_size * sizeof *c.engram_token_map);
        if (!c.engram_token_map) rc = set_error("out of memory");
        for (int32_t i = 0; rc == 0 && i < c.vocab_size; i++) c.engram_token_map[i] = i % c.engram_compressed_vocab;
    }
    if (rc == 0) rc = write_checkpoint(&c, NULL, &o, 0, n_shards, &cfg, out_dir);
    inventory_free(&inv);
    free(o.t);
    config_free(&c);
    free(cfg.s);
    return rc;
}
