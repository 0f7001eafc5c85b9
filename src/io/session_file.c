/* session_file.c - a session on disk (dsv41_session_save / dsv41_session_load).
 *
 * The layout is docs/SESSION_FORMAT.md: a fixed header (magic, version, the model's identity,
 * the counts), the state the position uses in a fixed order, the caller's data and a checksum
 * of everything before it. Every count of the body follows from the header and the model's
 * config, so one function, walk_state, both writes it and reads it: the reader runs it twice,
 * once to verify every size and value against the file and once, only when all is well, to
 * fill the session, which is how a failed load leaves the session exactly as it was. */
#include <errno.h>
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dspark.h"
#include "files.h"
#include "lead.h"
#include "model.h"
#include "numerics.h"

#define MAGIC "DSV41SES"
/* 2: the caches packed, the candidates as blocks, the drafter's section. 3: the layout of 2 with
 * no top-k or candidate rows (counts 0): a session drops them when its call ends (model.h). A
 * version 2 reader refuses such a file at any position past the first group (it wants the rows
 * the last call left), so the version says so instead; this build still reads version 2, checks
 * its rows as before and drops them. */
#define VERSION 3u
#define VERSION_ROWS 2u /* the last version that stored the rows */
#define BUF (1 << 16)     /* bytes a writer hashes and writes at once */
#define HEADER_BYTES 72 /* magic 8, version 4, flags 4, two identities 16, eight counts 32, data length 8 */

/* ---- the 64-bit checksum: little-endian 8-byte words, each mixed in by a bijection of the
 * state (xor, rotate, odd multiply), so that any change confined to one word always changes
 * the result; a tail word and the length close it, then splitmix64 spreads the bits. */
typedef struct {
    uint64_t h, n;   /* state; bytes taken */
    uint8_t tail[8]; /* the bytes of an unfinished word */
} hasher;

static uint64_t load_le64(const uint8_t *p) {
    uint64_t w = 0;
    for (int i = 7; i >= 0; i--) w = w << 8 | p[i];
    return w;
}

static void hash_word(hasher *hs, uint64_t w) {
    uint64_t x = hs->h ^ w;
    hs->h = (x << 27 | x >> 37) * 0x9E3779B97F4A7C15ULL;
}

static void hash_bytes(hasher *hs, const void *data, size_t n) {
    const uint8_t *p = data;
    if (hs->n % 8) {
        for (; n && hs->n % 8; n--) hs->tail[hs->n++ % 8] = *p++;
        if (hs->n % 8) return;
        hash_word(hs, load_le64(hs->tail));
        memset(hs->tail, 0, 8);
    }
    for (; n >= 8; n -= 8, p += 8, hs->n += 8) hash_word(hs, load_le64(p));
    for (; n; n--) hs->tail[hs->n++ % 8] = *p++;
}

static uint64_t hash_end(const hasher *hs) {
    hasher t = *hs;
    if (t.n % 8) hash_word(&t, load_le64(t.tail));
    hash_word(&t, t.n);
    return splitmix64(t.h);
}

/* hash_bytes fills a word before it mixes it, so the tail is kept at zero past its bytes */
static hasher hash_start(void) { return (hasher){0x6473763431736573ULL, 0, {0}}; }

uint64_t checksum64(const void *p, size_t n) {
    hasher hs = hash_start();
    hash_bytes(&hs, p, n);
    return hash_end(&hs);
}

/* ---- the model's identity */

/* The config values that define shapes and numerics: the struct's runs of fields without
 * padding between them, then the Engram token map (the one pointer). */
static uint64_t config_identity(const config *c) {
    hasher hs = hash_start();
    hash_bytes(&hs, c, offsetof(config, engram_head_dim) + sizeof c->engram_head_dim);
    hash_bytes(&hs, &c->engram_vocab_size, sizeof c->engram_vocab_size + sizeof c->engram_compressed_vocab);
    hash_bytes(&hs, &c->engram_pad_id, sizeof c->engram_pad_id);
    hash_bytes(&hs, c->engram_rows, sizeof c->engram_rows + sizeof c->engram_pad);
    hash_bytes(&hs, c->engram_mult, sizeof c->engram_mult + sizeof c->engram_prime + sizeof c->engram_offset);
    hash_bytes(&hs, &c->n_mtp_layers, offsetof(config, dspark_target) + sizeof c->dspark_target -
                                          offsetof(config, n_mtp_layers));
    if (c->n_engram) hash_bytes(&hs, c->engram_token_map, (size_t)c->vocab_size * sizeof *c->engram_token_map);
    return hash_end(&hs);
}

/* 64 bytes at the start, at a third, at two thirds and at the end of p [n] */
static void hash_sample(hasher *hs, const uint8_t *p, size_t n) {
    if (n <= 256) { hash_bytes(hs, p, n); return; }
    size_t at[4] = {0, n / 3, 2 * (n / 3), n - 64};
    for (int i = 0; i < 4; i++) hash_bytes(hs, p + at[i], 64);
}

static void hash_weight(hasher *hs, const weight *w) {
    int64_t head[4] = {w->type, w->mode, w->rows, w->cols};
    hash_bytes(hs, head, sizeof head);
    hash_bytes(hs, &w->scale_rows, sizeof w->scale_rows);
    if (!w->data) return;
    size_t scale = w->scale ? (size_t)((w->scale_rows == 1 ? w->rows : (w->rows + 31) / 32) * ((w->cols + 31) / 32)) : 0;
    hash_sample(hs, w->data, weight_bytes(w) - scale);
    if (scale) hash_sample(hs, w->scale, scale);
}

static void hash_vector(hasher *hs, const float *v, int64_t n) {
    if (v) hash_bytes(hs, v, (size_t)n * sizeof *v);
}

/* Every matrix's dtype, shape and a sample of its bytes and scales, and every vector whole.
 * Sampled because hashing every byte of a large checkpoint would read all of it at each save;
 * computed once per model (two threads that race compute the same value). */
static uint64_t weights_identity(const dsv41_model *m) {
    uint64_t id = atomic_load(&((dsv41_model *)m)->identity);
    if (id) return id;
    const config *c = &m->cfg;
    int64_t mix = (2 + c->hc_mult) * c->hc_mult;
    hasher hs = hash_start();
    hash_weight(&hs, &m->embed);
    hash_weight(&hs, &m->head);
    hash_vector(&hs, m->norm, c->dim);
    for (int32_t l = 0; l < c->n_layers; l++) {
        const layer_weights *L = &m->layers[l];
        const weight *dense[32];
        int n = layer_dense_weights(L, dense);
        for (int i = 0; i < n; i++) hash_weight(&hs, dense[i]);
        for (int32_t e = 0; L->w1 && e < c->n_routed_experts; e++) {
            hash_weight(&hs, &L->w1[e]);
            hash_weight(&hs, &L->w2[e]);
            hash_weight(&hs, &L->w3[e]);
        }
        hash_weight(&hs, &L->eg_table);
        hash_vector(&hs, L->hc_attn_base, mix);
        hash_vector(&hs, L->hc_ffn_base, mix);
        hash_vector(&hs, L->hc_attn_scale, 3);
        hash_vector(&hs, L->hc_ffn_scale, 3);
        hash_vector(&hs, L->attn_norm, c->dim);
        hash_vector(&hs, L->ffn_norm, c->dim);
        hash_vector(&hs, L->attn_sink, c->n_heads);
        hash_vector(&hs, L->q_norm, c->q_lora_rank);
        hash_vector(&hs, L->kv_norm, c->head_dim);
        hash_vector(&hs, L->comp_norm, c->head_dim);
        hash_vector(&hs, L->idx_k_norm, c->index_head_dim);
        hash_vector(&hs, L->gate_bias, c->n_routed_experts);
        hash_vector(&hs, L->eg_qk, (int64_t)c->hc_mult * c->dim);
    }
    id = hash_end(&hs) | 1; /* never 0, which means "not yet" */
    atomic_store(&((dsv41_model *)m)->identity, id);
    return id;
}

/* ---- the state, written or read by one walk */

/* A byte stream: a writer (f set) hashes and writes what it is given through a buffer; a reader
 * takes from p [n]. */
typedef struct {
    FILE *f;
    hasher hs;
    uint8_t *buf;     /* writer: [BUF] */
    size_t used;
    int failed;
    const uint8_t *p; /* reader */
    size_t n, at;
} stream;

static void out_bytes(stream *st, const void *data, size_t n) {
    const uint8_t *p = data;
    while (n) {
        size_t k = BUF - st->used < n ? BUF - st->used : n;
        memcpy(st->buf + st->used, p, k);
        st->used += k, p += k, n -= k;
        if (st->used == BUF) {
            hash_bytes(&st->hs, st->buf, st->used);
            if (fwrite(st->buf, 1, st->used, st->f) != st->used) st->failed = 1;
            st->used = 0;
        }
    }
}

static void out_flush(stream *st) {
    hash_bytes(&st->hs, st->buf, st->used);
    if (st->used && fwrite(st->buf, 1, st->used, st->f) != st->used) st->failed = 1;
    st->used = 0;
}

/* The next n bytes of a reader, or NULL when the file has fewer left. */
static const uint8_t *in_bytes(stream *st, size_t n) {
    if (n > st->n - st->at) return NULL;
    st->at += n;
    return st->p + st->at - n;
}

static void put_u32(uint8_t *b, uint32_t v) {
    for (int i = 0; i < 4; i++) b[i] = (uint8_t)(v >> 8 * i);
}
static void put_u64(uint8_t *b, uint64_t v) {
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(v >> 8 * i);
}
static uint32_t get_u32(const uint8_t *b) { return (uint32_t)b[0] | (uint32_t)b[1] << 8 | (uint32_t)b[2] << 16 | (uint32_t)b[3] << 24; }

/* n elements of `size` bytes (4 or 8) of mem written little-endian, or read into mem when apply
 * (only checked to be there otherwise). -1 when the file is short. */
static int walk_array(stream *st, void *mem, size_t n, size_t size, int apply) {
    uint8_t chunk[4096];
    size_t per = sizeof chunk / size;
    for (size_t i = 0; i < n; i += per) {
        size_t k = n - i < per ? n - i : per;
        uint8_t *m = (uint8_t *)mem + i * size;
        if (st->f) {
            for (size_t j = 0; j < k; j++) {
                uint64_t v = 0;
                if (size == 4) { uint32_t u; memcpy(&u, m + 4 * j, 4); v = u; } else memcpy(&v, m + 8 * j, 8);
                size == 4 ? put_u32(chunk + 4 * j, (uint32_t)v) : put_u64(chunk + 8 * j, v);
            }
            out_bytes(st, chunk, k * size);
            continue;
        }
        const uint8_t *b = in_bytes(st, k * size);
        if (!b) return -1;
        for (size_t j = 0; apply && j < k; j++) {
            if (size == 4) { uint32_t u = get_u32(b + 4 * j); memcpy(m + 4 * j, &u, 4); }
            else { uint64_t v = load_le64(b + 8 * j); memcpy(m + 8 * j, &v, 8); }
        }
    }
    return 0;
}

/* n bytes of mem written as they are, or read into mem when apply (checked to be there
 * otherwise): the packed cache rows, whose layout is bytes. -1 when the file is short. */
static int walk_bytes(stream *st, void *mem, size_t n, int apply) {
    if (st->f) {
        out_bytes(st, mem, n);
        return 0;
    }
    const uint8_t *b = in_bytes(st, n);
    if (!b) return -1;
    if (apply && n) memcpy(mem, b, n);
    return 0;
}

/* 0 when kept [k] is a row of candidate blocks of a row of `width` entries as the indexer
 * leaves it: distinct blocks of the row in ascending order, then -1s. */
static int check_blocks(const config *c, const int32_t *kept, int32_t k, int32_t width) {
    int32_t nb = (width + c->candidate_block_size - 1) / c->candidate_block_size, prev = -1;
    for (int32_t j = 0; j < k; j++) {
        if (kept[j] == -1) { prev = nb; continue; }
        if (kept[j] <= prev || kept[j] >= nb) return -1;
        prev = kept[j];
    }
    return 0;
}

/* The counts of the header: what the body's sizes follow from. */
typedef struct {
    int32_t pos, has_logits, kv_layer, ik_layer; /* kv_layer, ik_layer: shared slot targets, -1 none */
    int32_t topk_rows, topk_width, cand_rows, cand_width;
} counts;

/* The body after the header, in its order: ids [pos] i32, logits
 * [vocab] f32 when has_logits, per layer the window ring's used rows and, for a kv source, its
 * closed compressed rows and index-key rows (packed rows as the session holds them) and its
 * compressor tail, then (version 2) the last call's topk [rows][width] i32 and candidate blocks
 * [rows][kb] i32.
 * Writes s (st->f), or checks that the file holds it (apply 0) or reads it into s (apply 1,
 * after session_clear). */
static int walk_state(stream *st, dsv41_session *s, const counts *k, int apply) {
    const config *c = &s->m->cfg;
    size_t pos = (size_t)k->pos;
    if (walk_array(st, s->tokens, pos, 4, apply)) return -1;
    if (k->has_logits && walk_array(st, s->logits, (size_t)c->vocab_size, 4, apply)) return -1;
    for (int32_t l = 0; l < c->n_layers; l++) {
        layer_state *L = &s->layers[l];
        size_t win = pos < (size_t)c->window_size ? pos : (size_t)c->window_size, hd = (size_t)c->head_dim;
        if (walk_bytes(st, L->window, win * window_row_bytes(c), apply)) return -1;
        if (!c->is_kv_source[l]) continue;
        size_t ratio = (size_t)c->compress_ratio[l], used = ratio ? pos / ratio : 0;
        if (walk_bytes(st, L->ckv, used * ckv_row_bytes(c), apply) || walk_bytes(st, L->ik, used * ik_row_bytes(c), apply) ||
            walk_array(st, L->kv_state, ratio * hd, 4, apply) || walk_array(st, L->score_state, ratio * hd, 4, apply))
            return -1;
    }
    /* a version 2 file's top-k and candidate blocks (a version 3 file and a writer have none):
     * checked to be there and, the blocks, to be blocks an indexer leaves; never applied */
    size_t nt = (size_t)k->topk_rows * (size_t)k->topk_width, kb = k->cand_rows ? (size_t)cand_blocks(c, k->cand_width) : 0;
    if (walk_bytes(st, NULL, 4 * nt, 0)) return -1;
    if (apply || !k->cand_rows) return walk_bytes(st, NULL, 4 * (size_t)k->cand_rows * kb, 0);
    int32_t *row = malloc((kb > 0 ? kb : 1) * sizeof *row);
    if (!row) return set_error("session: out of memory");
    int rc = 0;
    for (int32_t r = 0; rc == 0 && r < k->cand_rows; r++)
        rc = walk_array(st, row, kb, 4, 1) || check_blocks(c, row, (int32_t)kb, k->cand_width) ? -1 : 0;
    free(row);
    return rc;
}

/* The drafter's section, for a model with DSpark stages, after the state: the range [lo, hi) of
 * positions whose taps wait for the rings (i32 lo, hi), then the taps [window][n_targets * dim]
 * and the rings [n_mtp_layers][window][head_dim] f32, whole: what the drafter's next block reads,
 * so a loaded session drafts exactly as the saved one would. A reader checks 0 <= lo <= hi <=
 * pos and hi - lo <= window before it applies anything. */
static int walk_draft(stream *st, dsv41_session *s, int32_t pos, int apply) {
    dspark_state *d = s->draft;
    if (!d) return 0;
    const config *c = &s->m->cfg;
    int32_t range[2] = {d->lo, d->hi};
    if (walk_array(st, range, 2, 4, 1)) return -1;
    if (range[0] < 0 || range[0] > range[1] || range[1] > pos || range[1] - range[0] > c->window_size) return -1;
    if (walk_array(st, d->taps, (size_t)c->window_size * c->dspark_n_targets * c->dim, 4, apply) ||
        walk_array(st, d->rings, (size_t)c->n_mtp_layers * c->window_size * c->head_dim, 4, apply))
        return -1;
    if (apply) d->lo = range[0], d->hi = range[1];
    return 0;
}

/* ---- save */

static int write_file(const dsv41_session *s, FILE *f, const void *data, size_t data_n) {
    const config *c = &s->m->cfg;
    const shared_slots *sh = &s->shared;
    stream stb = {.f = f, .hs = hash_start(), .buf = malloc(BUF)}, *st = &stb;
    if (!st->buf) return -1;
    counts k = {s->pos, s->has_logits, slot_layer(s, sh->compress_kv, 0), slot_layer(s, sh->index_k, 1), 0, 0, 0, 0};
    uint8_t h[HEADER_BYTES];
    memcpy(h, MAGIC, 8);
    put_u32(h + 8, VERSION);
    put_u32(h + 12, 0);
    put_u64(h + 16, config_identity(c));
    put_u64(h + 24, weights_identity(s->m));
    const int32_t v[8] = {k.pos, k.has_logits, k.kv_layer, k.ik_layer, k.topk_rows, k.topk_width, k.cand_rows, k.cand_width};
    for (int i = 0; i < 8; i++) put_u32(h + 32 + 4 * i, (uint32_t)v[i]);
    put_u64(h + 64, data_n);
    out_bytes(st, h, sizeof h);
    walk_state(st, (dsv41_session *)s, &k, 0);
    walk_draft(st, (dsv41_session *)s, k.pos, 0);
    if (data_n) out_bytes(st, data, data_n);
    out_flush(st);
    uint8_t sum[8];
    put_u64(sum, hash_end(&st->hs));
    int rc = st->failed || fwrite(sum, 1, 8, f) != 8 ? -1 : 0;
    free(st->buf);
    return rc;
}

int dsv41_session_save_data(const dsv41_session *s, const char *path, const void *data, size_t n) {
    if (!path || !*path) return set_error("session: save needs a path");
    size_t len = strlen(path);
    char *tmp = malloc(len + 16), *dir = malloc(len + 1);
    if (!tmp || !dir) { free(tmp); free(dir); return set_error("out of memory saving a session"); }
    snprintf(tmp, len + 16, "%s.tmp-XXXXXX", path);
    int fd = mkstemp(tmp), rc = 0;
    FILE *f = fd >= 0 ? fdopen(fd, "wb") : NULL;
    if (!f) {
        rc = set_error("%s: cannot create a temporary file beside it: %s", path, strerror(errno));
        if (fd >= 0) { close(fd); unlink(tmp); }
        free(tmp);
        free(dir);
        return rc;
    }
    int wrc = write_file(s, f, data, n), e = errno;
    if (wrc == 0 && (fflush(f) != 0 || fsync(fileno(f)) != 0)) wrc = -1, e = errno;
    if (fclose(f) != 0 && wrc == 0) wrc = -1, e = errno;
    if (wrc) rc = set_error("%s: cannot write the session: %s", path, strerror(e));
    else if (rename(tmp, path) != 0) rc = set_error("%s: cannot rename into place: %s", path, strerror(errno));
    if (rc) unlink(tmp);
    memcpy(dir, path, len + 1);
    if (rc == 0 && file_sync_dir(dirname(dir)) != 0) rc = set_error("%s: cannot sync its directory: %s", path, strerror(errno));
    free(tmp);
    free(dir);
    return rc;
}

int dsv41_session_save(const dsv41_session *s, const char *path) { return dsv41_session_save_data(s, path, NULL, 0); }

/* ---- load */

/* The last layer at or below n_layers whose role is `kv` (a kv source) or else an index source
 * that scored something at position pos (its compressed entries pos / ratio > 0); -1: none. */
static int32_t last_layer(const config *c, int kv, int32_t pos) {
    for (int32_t l = c->n_layers - 1; l >= 0; l--) {
        int32_t r = c->compress_ratio[l];
        if (r > 0 && (kv ? c->is_kv_source[l] : c->is_index_source[l] && pos / r > 0)) return l;
    }
    return -1;
}

/* 0 when the header's counts are those a session of s's model can have at the position, else
 * -1 after a message. compress_kv names the last kv source; only the index-key slot depends on
 * older calls, so it is checked to name a kv source. A version 3 file has no top-k or candidate
 * rows. A version 2 file has what the last call left: its last indexer's top-k
 * [T][min(index_topk, pos / ratio)] and the candidate layer's mask [T][pos / ratio], T being 1
 * (a decode or append) or pos (a prefill). These checks keep a crafted file (the checksum is no
 * signature) from sizing what a load reads. */
static int check_counts(const dsv41_session *s, const counts *k, uint32_t version, const char *path) {
    const config *c = &s->m->cfg;
    int32_t pos = k->pos, pub = last_layer(c, 0, pos), cl = c->candidate_source_layer, kv = pos ? last_layer(c, 1, pos) : -1;
    if (pos < 0 || pos > c->max_seq_len || (k->has_logits != 0 && k->has_logits != (pos > 0)))
        return set_error("session: %s: bad position %d or logits flag %d", path, pos, k->has_logits);
    int rows_kept = version == VERSION_ROWS && pub >= 0; /* version 2, where an indexer has scored */
    int cand = rows_kept && cl >= 0 && cl < c->n_layers && c->is_index_source[cl] && c->compress_ratio[cl] > 0 &&
               pos / c->compress_ratio[cl] > 0;
    int32_t rows = rows_kept ? k->topk_rows : 0, topk = rows_kept ? pos / c->compress_ratio[pub] : 0;
    if (topk > c->index_topk) topk = c->index_topk;
    if (k->kv_layer != kv || k->ik_layer < -1 || k->ik_layer >= c->n_layers || (k->ik_layer >= 0 && !c->is_kv_source[k->ik_layer]) ||
        (pos == 0 && k->ik_layer != -1))
        return set_error("session: %s: its shared slots name layers %d and %d, which this model cannot have there", path,
                         k->kv_layer, k->ik_layer);
    if (k->topk_rows != rows || (rows_kept && rows != 1 && rows != pos) || k->topk_width != topk ||
        k->cand_rows != (cand ? rows : 0) || k->cand_width != (cand ? pos / c->compress_ratio[cl] : 0))
        return set_error("session: %s: its shared slots are not what position %d leaves", path, pos);
    return 0;
}

/* 0 when every top-k entry of the file is -1 or one of the rows the call that wrote it could
 * attend: its window rows (the ring, or a prefill's own tokens), then the compressed entries. */
static int check_topk(const dsv41_session *s, const counts *k, const uint8_t *p) {
    const config *c = &s->m->cfg;
    int32_t pub = last_layer(c, 0, k->pos);
    int64_t rows = k->pos > c->window_size ? k->pos : c->window_size;
    int64_t bound = pub < 0 ? 0 : rows + k->pos / c->compress_ratio[pub];
    for (size_t i = 0; i < (size_t)k->topk_rows * (size_t)k->topk_width; i++) {
        int32_t e = (int32_t)get_u32(p + 4 * i);
        if (e < -1 || e >= bound) return -1;
    }
    return 0;
}

int session_file_load(dsv41_session *s, const char *path, const uint8_t *buf, size_t n, void **data, size_t *data_n) {
    int rc = -1;
    counts k;
    stream st = {.p = buf, .n = n > 8 ? n - 8 : 0};
    const config *c = &s->m->cfg;
    void *copy = NULL;
    if (n == 0) { set_error("session: %s: the file is empty", path); goto out; }
    if (n < 8 || memcmp(buf, MAGIC, 8)) { set_error("session: %s: not a dsv41 session file", path); goto out; }
    uint32_t version = n >= 16 ? get_u32(buf + 8) : 0;
    if (n >= 16 && ((version != VERSION && version != VERSION_ROWS) || get_u32(buf + 12) != 0)) {
        set_error("session: %s: format version %u (flags %u); this build reads versions %u and %u", path, version,
                  get_u32(buf + 12), VERSION_ROWS, VERSION);
        goto out;
    }
    if (n < HEADER_BYTES + 8) { set_error("session: %s: truncated (%zu bytes)", path, n); goto out; }
    if (checksum64(buf, n - 8) != load_le64(buf + n - 8)) { set_error("session: %s: checksum mismatch (the file is damaged or truncated)", path); goto out; }
    if (load_le64(buf + 16) != config_identity(c) || load_le64(buf + 24) != weights_identity(s->m)) {
        set_error("session: %s: saved with another model (its config or weights differ)", path);
        goto out;
    }
    int32_t v[8];
    for (int i = 0; i < 8; i++) v[i] = (int32_t)get_u32(buf + 32 + 4 * i);
    k = (counts){v[0], v[1], v[2], v[3], v[4], v[5], v[6], v[7]};
    uint64_t dn = load_le64(buf + 64);
    st.at = HEADER_BYTES;
    if (check_counts(s, &k, version, path)) goto out;
    /* every count is now bounded by the model (rows <= max_seq_len, widths <= max_seq_len), so
     * no product below overflows */
    size_t state_end = 0;
    if (walk_state(&st, s, &k, 0) || (state_end = st.at, walk_draft(&st, s, k.pos, 0)) || dn != st.n - st.at) {
        set_error("session: %s: its sizes do not match its contents", path);
        goto out;
    }
    size_t nt = (size_t)k.topk_rows * (size_t)k.topk_width * sizeof(int32_t);
    size_t nc = (size_t)k.cand_rows * (k.cand_rows ? (size_t)cand_blocks(c, k.cand_width) : 0) * sizeof(int32_t);
    if (check_topk(s, &k, buf + state_end - nc - nt)) { /* the top-k section ends the state, before the blocks */
        set_error("session: %s: a top-k entry points outside the cache", path);
        goto out;
    }
    if ((data && dn && !(copy = malloc(dn))) || session_reserve(s, k.pos)) {
        set_error("session: %s: out of memory", path);
        goto out;
    }
    for (int32_t i = 0; i < k.pos; i++) {
        int32_t id = (int32_t)get_u32(buf + HEADER_BYTES + 4 * (size_t)i);
        if (id < 0 || id >= c->vocab_size) { set_error("session: %s: token id %d outside the vocabulary", path, id); goto out; }
    }
    /* everything is verified: from here the session changes and nothing fails */
    session_clear(s, s->pos);
    st.at = HEADER_BYTES;
    walk_state(&st, s, &k, 1);
    walk_draft(&st, s, k.pos, 1);
    for (int32_t i = 0; c->n_engram && i < k.pos; i++) s->ngram_cache[i] = c->engram_token_map[s->tokens[i]];
    s->pos = k.pos;
    s->has_logits = k.has_logits;
    s->shared.compress_kv = k.kv_layer >= 0 ? s->layers[k.kv_layer].ckv : NULL;
    s->shared.index_k = k.ik_layer >= 0 ? s->layers[k.ik_layer].ik : NULL;
    if (data) {
        if (dn) memcpy(copy, buf + st.at, dn);
        *data = copy;
        *data_n = dn;
        copy = NULL;
    }
    rc = 0;
out:
    free(copy);
    return rc;
}

/* The leader of a split model sends the file's bytes, not its path: the other ranks may be
 * on machines that do not see the file. */
int dsv41_session_load_data(dsv41_session *s, const char *path, void **data, size_t *data_n) {
    if (!path || !*path) return set_error("session: load needs a path");
    char err[512];
    size_t n = 0;
    uint8_t *buf = (uint8_t *)file_read_all(path, &n, err, sizeof err);
    if (!buf) return set_error("session: %s", err);
    int rc = session_file_load(s, path, buf, n, data, data_n);
    if (rc == 0) lead_session_load(s, buf, n);
    free(buf);
    return rc;
}

int dsv41_session_load(dsv41_session *s, const char *path) { return dsv41_session_load_data(s, path, NULL, NULL); }
