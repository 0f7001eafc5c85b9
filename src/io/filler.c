/* filler.c - weights made by the golden's deterministic filler.
 *
 * Two sources share one generator: the golden's weights_meta (scale, offset, kind and storage
 * dtype per tensor, as the reference generator recorded them) and the generator's own naming
 * rule, which the built-in tiny model uses so that it needs no file. A test checks that the
 * rule reproduces every weights_meta entry. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "filler.h"
#include "json.h"
#include "numerics.h"

static int shape_str(char *o, size_t n, int32_t ndim, const int64_t *shape) {
    int w = snprintf(o, n, "[");
    for (int i = 0; i < ndim; i++) w += snprintf(o + w, n - (size_t)w, "%s%lld", i ? "," : "", (long long)shape[i]);
    return w + snprintf(o + w, n - (size_t)w, "]");
}

static dtype spec_dtype(const fill_spec *sp) {
    if (strcmp(sp->dtype, "float32") == 0) return DT_F32;
    if (strcmp(sp->dtype, "bfloat16") == 0) return DT_BF16;
    if (strcmp(sp->dtype, "float8_e4m3fn") == 0) return DT_E4M3;
    return DT_E8M0;
}

int fill_tensor(dsv41_model *m, const char *name, int32_t ndim, const int64_t *shape, const fill_spec *sp, weight *w) {
    int known = !strcmp(sp->dtype, "float32") || !strcmp(sp->dtype, "bfloat16") || !strcmp(sp->dtype, "float8_e4m3fn") ||
                !strcmp(sp->dtype, "float8_e8m0fnu");
    if (!known) return set_error("%s: unsupported filler dtype '%s'", name, sp->dtype);
    memset(w, 0, sizeof *w);
    w->type = spec_dtype(sp);
    w->rows = shape[0];
    w->cols = ndim > 1 ? shape[1] : 1;
    int64_t n = w->rows * w->cols;
    size_t esz = w->type == DT_F32 ? 4 : w->type == DT_BF16 ? 2 : 1;
    void *data = model_alloc(m, (size_t)n * esz);
    if (!data) return set_error("%s: out of memory", name);
    uint64_t salt = fnv1a64(name);
    for (int64_t i = 0; i < n; i++) {
        double u = (double)(splitmix64(salt ^ ((uint64_t)i * 0x9E3779B97F4A7C15ULL)) >> 40) / 16777216.0;
        float v = (float)((2.0 * u - 1.0) * sp->scale + sp->offset);
        switch (w->type) {
        case DT_F32: ((float *)data)[i] = v; break;
        case DT_BF16: ((uint16_t *)data)[i] = f32_to_bf16(v); break;
        case DT_E4M3: ((uint8_t *)data)[i] = f32_to_e4m3(v); break;
        default: ((uint8_t *)data)[i] = f32_to_e8m0(v); break;
        }
    }
    w->data = data;
    return 0;
}

int name_ends(const char *s, const char *suffix) {
    size_t a = strlen(s), b = strlen(suffix);
    return a >= b && strcmp(s + a - b, suffix) == 0;
}

/* The ratio of the layer a "layers.N." name belongs to, 0 for global names. */
static int32_t layer_ratio(const config *c, const char *name) {
    int l;
    if (sscanf(name, "layers.%d.", &l) == 1 && l >= 0 && l < c->n_layers) return c->compress_ratio[l];
    return 0;
}

fill_spec filler_rule(const config *c, const char *name, int32_t ndim, const int64_t *shape) {
    fill_spec sp = {0.05, 0.0, "f32", "bfloat16"};
    int engram = strstr(name, "engram") != NULL;
    const char *last_dot = strrchr(name, '.'), *prev = last_dot;
    while (prev && prev > name && prev[-1] != '.') prev--;
    int norm_comp = last_dot && prev && memmem(prev, (size_t)(last_dot - prev), "norm", 4) != NULL;
    if (name_ends(name, "embed.scale")) return (fill_spec){1.0, 1.0, "e8m0", "float8_e8m0fnu"};
    if (name_ends(name, "embed.weight") && engram) return (fill_spec){0.5, 0.0, "fp8", "float8_e4m3fn"};
    if (strcmp(name, "embed.weight") == 0) sp.scale = 0.5;
    else if (name_ends(name, "attn_sink")) sp.scale = 0.1;
    else if (name_ends(name, "hc_attn_scale") || name_ends(name, "hc_ffn_scale")) sp.offset = 1.0;
    else if (name_ends(name, "hc_attn_base") || name_ends(name, "hc_ffn_base")) sp.scale = 0.1;
    else if ((name_ends(name, "q_weight") || name_ends(name, "k_weight")) && engram) sp.offset = 1.0;
    else if (name_ends(name, "gate.bias")) sp.scale = 0.05;
    else if (norm_comp || name_ends(name, "norm.weight")) sp.offset = 1.0;
    else if (ndim >= 2) sp.scale = pow((double)shape[ndim - 1], -0.5);
    /* the reference holds these in f32 (model.py promotes the ratio-2 compressor on load) */
    int f32 = name_ends(name, "hc_attn_fn") || name_ends(name, "hc_ffn_fn") || name_ends(name, "hc_attn_base") ||
              name_ends(name, "hc_ffn_base") || name_ends(name, "hc_attn_scale") || name_ends(name, "hc_ffn_scale") ||
              name_ends(name, "attn_sink") || name_ends(name, "gate.bias") || strcmp(name, "head.weight") == 0 ||
              ((name_ends(name, "compressor.wkv.weight") || name_ends(name, "compressor.wgate.weight")) && layer_ratio(c, name) > 1);
    if (f32) sp.dtype = "float32";
    return sp;
}

/* ---- the golden's weights_meta */
typedef struct {
    weight_source base;
    const json *meta;
    uint8_t *used; /* [meta->len] */
} meta_source;

static int meta_exists(weight_source *src, const char *name, int64_t *rows) {
    const json *e = json_get(((meta_source *)src)->meta, name), *sh = json_get(e, "shape");
    if (!sh || sh->type != JSON_ARR || sh->len < 1) return 0;
    *rows = json_i64(&sh->items[0]);
    return 1;
}

/* "X.weight" of an e4m3 tensor takes its block scales from "X.scale": [rows][cols/32] per-row
 * blocks (engram tables) or [rows/32][cols/32] tiles (dense fp8 weights). */
static int attach_scale(weight_source *src, dsv41_model *m, const char *name, weight *w) {
    if (w->type != DT_E4M3 || !name_ends(name, ".weight")) return 0;
    char sname[200];
    snprintf(sname, sizeof sname, "%.*s.scale", (int)(strlen(name) - 7), name);
    int64_t srows;
    if (!meta_exists(src, sname, &srows)) return 0;
    int64_t per_row = (w->cols + 31) / 32, tile_rows = (w->rows + 31) / 32;
    int64_t shape[2] = {srows == w->rows ? w->rows : tile_rows, per_row};
    weight s;
    if (src->load(src, m, sname, 2, shape, &s)) return -1;
    if (s.type != DT_E8M0) return set_error("%s: block scales must be e8m0", sname);
    w->scale = s.data;
    w->scale_rows = srows == w->rows ? 1 : 32;
    return 0;
}

static int meta_load(weight_source *src, dsv41_model *m, const char *name, int32_t ndim, const int64_t *shape, weight *w) {
    meta_source *ms = (meta_source *)src;
    const json *e = json_get(ms->meta, name);
    if (!e) return set_error("golden: weights_meta has no '%s', which the config implies", name);
    ms->used[e - ms->meta->items] = 1;
    const json *sh = json_get(e, "shape"), *kind = json_get(e, "kind"), *dt = json_get(e, "dtype"),
               *sc = json_get(e, "scale"), *of = json_get(e, "offset");
    if (!sh || sh->type != JSON_ARR || !kind || kind->type != JSON_STR || !dt || dt->type != JSON_STR || !sc ||
        sc->type != JSON_NUM || !of || of->type != JSON_NUM)
        return set_error("golden: weights_meta '%s' lacks shape, kind, dtype, scale or offset", name);
    int same = sh->len == (size_t)ndim;
    for (int i = 0; same && i < ndim; i++) same = sh->items[i].type == JSON_NUM && json_i64(&sh->items[i]) == shape[i];
    if (!same) {
        char want[64], got[64] = "[?]";
        int64_t gs[6];
        for (size_t i = 0; i < sh->len && i < 6; i++) gs[i] = json_i64(&sh->items[i]);
        shape_str(want, sizeof want, ndim, shape);
        if (sh->len <= 6) shape_str(got, sizeof got, (int32_t)sh->len, gs);
        return set_error("golden: weights_meta '%s' has shape %s but the config implies %s", name, got, want);
    }
    fill_spec sp = {sc->num, of->num, kind->str, dt->str};
    if (strcmp(kind->str, "f32") && strcmp(kind->str, "fp8") && strcmp(kind->str, "e8m0"))
        return set_error("golden: weights_meta '%s' has unknown kind '%s'", name, kind->str);
    if (fill_tensor(m, name, ndim, shape, &sp, w)) return -1;
    return attach_scale(src, m, name, w);
}

weight_source *meta_source_new(const json *meta) {
    if (!meta || meta->type != JSON_OBJ) { set_error("golden: weights_meta is missing or not an object"); return NULL; }
    meta_source *ms = calloc(1, sizeof *ms);
    if (ms) ms->used = calloc(meta->len + 1, 1);
    if (!ms || !ms->used) { free(ms); set_error("out of memory"); return NULL; }
    ms->base.load = meta_load;
    ms->meta = meta;
    return &ms->base;
}

void meta_source_free(weight_source *src) {
    if (!src) return;
    free(((meta_source *)src)->used);
    free(src);
}

dsv41_model *model_from_meta(const config *c, const json *meta) {
    weight_source *src = meta_source_new(meta);
    if (!src) return NULL;
    meta_source *ms = (meta_source *)src;
    dsv41_model *m = model_build(c, src);
    for (size_t i = 0; m && i < meta->len; i++)
        if (!ms->used[i]) {
            set_error("golden: weights_meta has '%s', which the config does not use", meta->keys[i]);
            m->cfg.engram_token_map = NULL;
            dsv41_model_free(m);
            m = NULL;
        }
    meta_source_free(src);
    return m;
}

/* ---- the generator's naming rule (built-in models) */
typedef struct {
    weight_source base;
    const config *cfg;
} rule_source;

/* Engram tables are the only e4m3 tensors here; their per-row scales are "X.scale". */
static int rule_load(weight_source *src, dsv41_model *m, const char *name, int32_t ndim, const int64_t *shape, weight *w) {
    rule_source *rs = (rule_source *)src;
    fill_spec sp = filler_rule(rs->cfg, name, ndim, shape);
    if (fill_tensor(m, name, ndim, shape, &sp, w)) return -1;
    if (w->type != DT_E4M3) return 0;
    int64_t sshape[2] = {w->rows, (w->cols + 31) / 32};
    char sname[200];
    snprintf(sname, sizeof sname, "%.*s.scale", (int)(strlen(name) - 7), name);
    fill_spec ss = filler_rule(rs->cfg, sname, 2, sshape);
    weight s;
    if (fill_tensor(m, sname, 2, sshape, &ss, &s)) return -1;
    w->scale = s.data;
    w->scale_rows = 1;
    return 0;
}

weight_source *rule_source_new(const config *c) {
    rule_source *rs = malloc(sizeof *rs);
    if (!rs) { set_error("out of memory"); return NULL; }
    *rs = (rule_source){{rule_load}, c};
    return &rs->base;
}

dsv41_model *model_from_rule(const config *c) {
    rule_source rs = {{rule_load}, c};
    return model_build(c, &rs.base);
}

/* The rule's model of the fixture-shaped config j (freed here), or NULL. */
static dsv41_model *model_from_fixture(json *j) {
    config c;
    int rc = config_from_fixture(&c, j);
    json_free(j);
    if (rc) return NULL;
    dsv41_model *m = model_from_rule(&c);
    if (!m) config_free(&c);
    return m;
}

dsv41_model *model_from_config_file(const char *path) {
    char err[256];
    json *j = json_load_file(path, err, sizeof err);
    if (!j) { set_error("%s", err); return NULL; }
    return model_from_fixture(j);
}

/* ---- the built-in tiny model: models/tiny.json, embedded at build time */
extern const char tiny_model_json[];

dsv41_model *builtin_model(void) {
    char err[256];
    json *j = json_parse(tiny_model_json, strlen(tiny_model_json), err, sizeof err);
    if (!j) { set_error("built-in model: %s", err); return NULL; }
    return model_from_fixture(j);
}
