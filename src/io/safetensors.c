/* safetensors.c - checkpoint shards, memory-mapped and used in place.
 *
 * A shard is an 8-byte little-endian header length, a JSON header naming each tensor's dtype,
 * shape and byte range, then the data. Shards are mapped read-only and weights point straight
 * into the mapping, so nothing the size of the experts or the Engram tables is copied: pages
 * are read from disk the first time a token touches them. Every header is validated before
 * use; an error names the file and the tensor. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "files.h"
#include "safetensors.h"

static int elem_size(const char *dt, dtype *out) {
    static const struct { const char *name; dtype t; int size; } T[] = {
        {"F32", DT_F32, 4}, {"BF16", DT_BF16, 2}, {"F8_E4M3", DT_E4M3, 1}, {"F8_E8M0", DT_E8M0, 1}, {"I8", DT_FP4, 1},
    };
    for (size_t i = 0; i < sizeof T / sizeof *T; i++)
        if (!strcmp(dt, T[i].name)) { *out = T[i].t; return T[i].size; }
    return 0;
}

static uint64_t name_hash(const char *s) {
    uint64_t h = 0xCBF29CE484222325ULL;
    for (; *s; s++) h = (h ^ (uint8_t)*s) * 0x100000001B3ULL;
    return h;
}

static st_tensor *find(const st_source *s, const char *name) {
    if (!s->cap) return NULL;
    for (size_t i = name_hash(name) & (s->cap - 1);; i = (i + 1) & (s->cap - 1)) {
        int32_t k = s->slots[i];
        if (k < 0) return NULL;
        if (!strcmp(s->tensors[k].name, name)) return &s->tensors[k];
    }
}

static int add_tensor(st_source *s, const st_tensor *t) {
    if (find(s, t->name)) return set_error("%s: tensor '%s' appears twice", s->shards[t->shard].path, t->name);
    if (s->n == s->cap_tensors) { /* doubling: a release checkpoint has ~96,000 tensors */
        size_t cap = s->cap_tensors ? s->cap_tensors * 2 : 1024;
        st_tensor *nt = realloc(s->tensors, cap * sizeof *nt);
        if (!nt) return set_error("out of memory");
        s->tensors = nt;
        s->cap_tensors = cap;
    }
    s->tensors[s->n++] = *t;
    if (s->n * 2 > s->cap) { /* rehash at half load */
        size_t cap = s->cap ? s->cap * 2 : 1024;
        int32_t *slots = malloc(cap * sizeof *slots);
        if (!slots) return set_error("out of memory");
        memset(slots, 0xFF, cap * sizeof *slots);
        for (size_t k = 0; k < s->n; k++) {
            size_t i = name_hash(s->tensors[k].name) & (cap - 1);
            while (slots[i] >= 0) i = (i + 1) & (cap - 1);
            slots[i] = (int32_t)k;
        }
        free(s->slots);
        s->slots = slots;
        s->cap = cap;
    } else {
        size_t i = name_hash(t->name) & (s->cap - 1);
        while (s->slots[i] >= 0) i = (i + 1) & (s->cap - 1);
        s->slots[i] = (int32_t)(s->n - 1);
    }
    return 0;
}

static int cmp_data(const void *a, const void *b) {
    const st_tensor *x = *(const st_tensor *const *)a, *y = *(const st_tensor *const *)b;
    return x->data < y->data ? -1 : x->data > y->data;
}

/* Two tensors of one shard must not share bytes: one would be the other's data reinterpreted. */
static int check_overlap(st_source *s, const st_shard *sh) {
    int32_t shard = (int32_t)(s->n_shards - 1);
    size_t first = s->n, n = 0;
    while (first > 0 && s->tensors[first - 1].shard == shard) first--;
    const st_tensor **v = malloc((s->n - first + 1) * sizeof *v);
    if (!v) return set_error("out of memory");
    for (size_t i = first; i < s->n; i++)
        if (s->tensors[i].nbytes) v[n++] = &s->tensors[i];
    qsort(v, n, sizeof *v, cmp_data);
    int rc = 0;
    for (size_t i = 1; rc == 0 && i < n; i++)
        if (v[i]->data < v[i - 1]->data + v[i - 1]->nbytes)
            rc = set_error("%s: tensors '%s' and '%s' overlap in the data", sh->path, v[i - 1]->name, v[i]->name);
    free(v);
    return rc;
}

static int shard_is_open(const st_source *s, const char *file) {
    for (size_t i = 0; i < s->n_shards; i++)
        if (!strcmp(s->shards[i].file, file)) return 1;
    return 0;
}

/* Map one shard and index its tensors. */
static int open_shard(st_source *s, const char *file) {
    st_shard *ns = realloc(s->shards, (s->n_shards + 1) * sizeof *ns);
    if (!ns) return set_error("out of memory");
    s->shards = ns;
    st_shard *sh = &s->shards[s->n_shards];
    memset(sh, 0, sizeof *sh);
    snprintf(sh->file, sizeof sh->file, "%s", file);
    snprintf(sh->path, sizeof sh->path, "%s/%s", s->dir, file);
    char oerr[1400];
    int fd = file_open_regular(sh->path, oerr, sizeof oerr);
    if (fd < 0) return set_error("%s", oerr);
    struct stat stt;
    if (fstat(fd, &stt) || stt.st_size < 8) { close(fd); return set_error("%s: truncated shard (no header)", sh->path); }
    sh->len = (size_t)stt.st_size;
    sh->addr = mmap(NULL, sh->len, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (sh->addr == MAP_FAILED) { sh->addr = NULL; return set_error("%s: cannot map: %s", sh->path, strerror(errno)); }
    s->n_shards++;
    const uint8_t *p = sh->addr;
    uint64_t hlen = 0;
    for (int i = 7; i >= 0; i--) hlen = hlen << 8 | p[i];
    if (hlen > sh->len - 8) return set_error("%s: truncated shard (header of %llu bytes)", sh->path, (unsigned long long)hlen);
    char err[256];
    sh->header = json_parse((const char *)p + 8, (size_t)hlen, err, sizeof err);
    if (!sh->header || sh->header->type != JSON_OBJ)
        return set_error("%s: bad header JSON: %s", sh->path, sh->header ? "not an object" : err);
    const uint8_t *data = p + 8 + hlen;
    size_t data_len = sh->len - 8 - (size_t)hlen;
    for (size_t i = 0; i < sh->header->len; i++) {
        const char *name = sh->header->keys[i];
        const json *e = &sh->header->items[i], *dt = json_get(e, "dtype"), *shp = json_get(e, "shape"),
                   *off = json_get(e, "data_offsets");
        if (!strcmp(name, "__metadata__")) {
            if (e->type != JSON_OBJ) return set_error("%s: __metadata__ must be an object", sh->path);
            continue;
        }
        st_tensor t = {.name = name, .shard = (int32_t)(s->n_shards - 1)};
        int esz = dt && dt->type == JSON_STR ? elem_size(dt->str, &t.type) : 0;
        if (!esz) return set_error("%s: tensor '%s' has an unsupported dtype", sh->path, name);
        if (!shp || shp->type != JSON_ARR || shp->len > 4 || !off || off->type != JSON_ARR || off->len != 2)
            return set_error("%s: tensor '%s' needs a shape and two data_offsets", sh->path, name);
        uint64_t n = (uint64_t)esz; /* bytes; a shape whose size overflows cannot match the offsets */
        t.ndim = (int32_t)shp->len;
        for (size_t d = 0; d < shp->len; d++) {
            const json *v = &shp->items[d];
            /* no dimension or element count can pass the bytes the shard holds */
            if (v->type != JSON_NUM || !v->is_int || v->is_neg || (v->bits && n > data_len / v->bits))
                return set_error("%s: tensor '%s' has a bad shape (more elements than the shard holds?)", sh->path, name);
            n *= v->bits;
            t.shape[d] = (int64_t)v->bits;
        }
        const json *b = &off->items[0], *en = &off->items[1];
        if (b->type != JSON_NUM || en->type != JSON_NUM || !b->is_int || !en->is_int || b->is_neg || en->is_neg ||
            en->bits < b->bits || en->bits > data_len || en->bits - b->bits != n)
            return set_error("%s: tensor '%s': data offsets out of range or not its size (truncated shard?)", sh->path, name);
        t.data = data + b->bits;
        t.nbytes = (size_t)(en->bits - b->bits);
        if (add_tensor(s, &t)) return -1;
    }
    return check_overlap(s, sh);
}

static const char *dtype_name(dtype t) {
    static const char *N[] = {"F32", "BF16", "F8_E4M3", "F8_E8M0", "I8"};
    return N[t];
}

static int shape_is(const st_tensor *t, int32_t ndim, const int64_t *shape) {
    if (t->ndim != ndim) return 0;
    for (int i = 0; i < ndim; i++)
        if (t->shape[i] != shape[i]) return 0;
    return 1;
}

static int wrong_shape(const st_source *s, const st_tensor *t, int32_t ndim, const int64_t *shape) {
    char got[80] = "", want[80] = "";
    for (int i = 0; i < t->ndim; i++) snprintf(got + strlen(got), sizeof got - strlen(got), "%s%lld", i ? "," : "", (long long)t->shape[i]);
    for (int i = 0; i < ndim; i++) snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? "," : "", (long long)shape[i]);
    return set_error("%s: tensor '%s' is %s [%s], the config implies [%s]", s->shards[t->shard].path, t->name,
                     dtype_name(t->type), got, want);
}

/* "X.weight" of an fp8 / fp4 tensor takes its e8m0 block scales from "X.scale". */
static int attach_scale(st_source *s, const st_tensor *t, weight *w) {
    char sname[256];
    size_t n = strlen(t->name);
    if (n < 7 || strcmp(t->name + n - 7, ".weight")) return set_error("%s: tensor '%s' is quantized but has no scale name", s->shards[t->shard].path, t->name);
    snprintf(sname, sizeof sname, "%.*s.scale", (int)(n - 7), t->name);
    st_tensor *sc = find(s, sname);
    if (!sc) return set_error("%s: tensor '%s' is missing (the scales of '%s')", s->dir, sname, t->name);
    int64_t per_row = (w->cols + 31) / 32, rows_tile[2] = {(w->rows + 31) / 32, per_row}, rows_each[2] = {w->rows, per_row};
    int tiles = w->type == DT_E4M3 && shape_is(sc, 2, rows_tile), each = shape_is(sc, 2, rows_each);
    if (sc->type != DT_E8M0 || (!tiles && !each)) return wrong_shape(s, sc, 2, w->type == DT_E4M3 ? rows_tile : rows_each);
    sc->used = 1;
    w->scale = sc->data;
    w->scale_rows = each ? 1 : 32;
    return 0;
}

static int st_load(weight_source *src, dsv41_model *m, const char *name, int32_t ndim, const int64_t *shape, weight *w) {
    (void)m;
    st_source *s = (st_source *)src;
    st_tensor *t = find(s, name);
    if (!t) return set_error("%s: tensor '%s' is missing", s->dir, name);
    memset(w, 0, sizeof *w);
    w->type = t->type;
    w->rows = shape[0];
    w->cols = ndim > 1 ? shape[1] : 1;
    w->data = t->data;
    if (t->type == DT_FP4) { /* two e2m1 values per byte along the input dimension */
        int64_t packed[2] = {w->rows, (w->cols + 1) / 2};
        if (ndim != 2 || !shape_is(t, 2, packed)) return wrong_shape(s, t, 2, packed);
    } else if (t->type == DT_E8M0 || !shape_is(t, ndim, shape)) {
        return wrong_shape(s, t, ndim, shape);
    }
    t->used = 1;
    return t->type == DT_E4M3 || t->type == DT_FP4 ? attach_scale(s, t, w) : 0;
}

int st_open(st_source *s, const char *dir) {
    memset(s, 0, sizeof *s);
    s->base.load = st_load;
    snprintf(s->dir, sizeof s->dir, "%s", dir);
    char path[1200], err[512];
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    if (access(path, F_OK) != 0) return open_shard(s, "model.safetensors");
    json *idx = json_load_file(path, err, sizeof err);
    if (!idx) return set_error("%s", err);
    const json *map = json_get(idx, "weight_map");
    int rc = map && map->type == JSON_OBJ ? 0 : set_error("%s: no weight_map object", path);
    for (size_t i = 0; rc == 0 && i < map->len; i++) {
        const json *f = &map->items[i];
        if (f->type != JSON_STR || strchr(f->str, '/')) { rc = set_error("%s: bad shard name for '%s'", path, map->keys[i]); break; }
        char shard[1300];
        snprintf(shard, sizeof shard, "%s/%s", dir, f->str);
        if (shard_is_open(s, f->str)) continue;
        if (access(shard, F_OK) != 0) rc = set_error("%s: names shard %s for tensor '%s', but it is missing", path, f->str, map->keys[i]);
        else rc = open_shard(s, f->str);
    }
    for (size_t i = 0; rc == 0 && i < map->len; i++) {
        const st_tensor *t = find(s, map->keys[i]);
        if (!t || strcmp(s->shards[t->shard].file, map->items[i].str))
            rc = set_error("%s: tensor '%s' is not in its shard %s", path, map->keys[i], map->items[i].str);
    }
    json_free(idx);
    return rc;
}

const st_tensor *st_first_unused(const st_source *s) {
    for (size_t i = 0; i < s->n; i++)
        if (!s->tensors[i].used) return &s->tensors[i];
    return NULL;
}

void st_close(st_source *s, dsv41_model *keep_maps) {
    for (size_t i = 0; i < s->n_shards; i++) {
        st_shard *sh = &s->shards[i];
        json_free(sh->header);
        if (!sh->addr) continue;
        struct mapping *nm = keep_maps ? realloc(keep_maps->maps, (keep_maps->n_maps + 1) * sizeof *nm) : NULL;
        if (nm) {
            keep_maps->maps = nm;
            nm[keep_maps->n_maps++] = (struct mapping){sh->addr, sh->len};
        } else {
            munmap(sh->addr, sh->len);
        }
    }
    free(s->shards);
    free(s->tensors);
    free(s->slots);
    memset(s, 0, sizeof *s);
}
