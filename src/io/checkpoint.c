/* checkpoint.c - a DeepSeek-V4.1 checkpoint directory in the release layout.
 *
 * config.json (served or flat form) gives the config; the Engram hash tables are computed from
 * it, with the compressed token map read from engram_token_map.json (a JSON array, one
 * compressed id per token id) or, without that file, built from tokenizer.json. Tensors come from the mapped safetensors shards. Layer roles
 * are cross-checked against the tensors: a tensor the config does not account for is an
 * error, since it means the config and the weights describe different models. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "loader.h"
#include "safetensors.h"
#include "tokenizer.h"

/* Parts of a release checkpoint that the text forward pass does not use, accepted as they are:
 * the DSpark draft blocks, the vision tower, its aligner and the image marker embeddings, and
 * each backbone layer's gate bias for image-span tokens (V41_REFERENCE.md section 11). Anything
 * else the config does not account for stays an error. */
static int ignored(const config *c, const char *name) {
    static const char *prefixes[] = {"mtp.", "vision.", "aligner.", "image_"};
    for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++)
        if (!strncmp(name, prefixes[i], strlen(prefixes[i]))) return 1;
    int l, end = 0;
    return sscanf(name, "layers.%d.ffn.gate.bias_vl%n", &l, &end) == 1 && end > 0 && !name[end] && l >= 0 &&
           l < c->n_layers;
}

/* The token map from dir/tokenizer.json, normalized as engram.py does; its size must be the
 * config's engram_compressed_vocab_size. */
static int64_t *token_map_from_tokenizer(const char *dir, int32_t vocab, int64_t want) {
    char path[1200];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    dsv41_tokenizer *t = dsv41_tokenizer_load(path);
    if (!t) return NULL;
    int64_t *map = malloc((size_t)vocab * sizeof *map), n = -1;
    if (!map) set_error("out of memory");
    else if (dsv41_tokenizer_n_vocab(t) < vocab) set_error("%s: %d tokens, the model has %d", path, dsv41_tokenizer_n_vocab(t), vocab);
    else if ((n = engram_token_map(t, vocab, map)) >= 0 && n != want)
        set_error("%s: the Engram token map has %lld ids, the config says %lld", path, (long long)n, (long long)want);
    dsv41_tokenizer_free(t);
    if (n != want) { free(map); return NULL; }
    return map;
}

static int64_t *read_token_map(const char *dir, int32_t vocab, int64_t want) {
    char path[1200], err[512];
    snprintf(path, sizeof path, "%s/engram_token_map.json", dir);
    if (access(path, F_OK) != 0) return token_map_from_tokenizer(dir, vocab, want);
    json *j = json_load_file(path, err, sizeof err);
    if (!j) { set_error("%s", err); return NULL; }
    int64_t *map = NULL;
    if (j->type != JSON_ARR || j->len != (size_t)vocab) {
        set_error("%s: must be an array of %d compressed ids (the config's vocab_size)", path, vocab);
    } else if (!(map = malloc((size_t)vocab * sizeof *map))) {
        set_error("out of memory");
    } else {
        for (int32_t i = 0; map && i < vocab; i++)
            if (json_int(&j->items[i], 0, want - 1, &map[i])) {
                set_error("%s: entry %d is not a compressed id in [0, %lld) (the config's engram_compressed_vocab_size)",
                          path, i, (long long)want);
                free(map);
                map = NULL;
            }
    }
    json_free(j);
    return map;
}

/* A config error, prefixed with the file it came from. */
static int config_error(const char *path) {
    char msg[600];
    snprintf(msg, sizeof msg, "%s", dsv41_error());
    return set_error("%s: %s", path, msg);
}

/* The config is read and checked first, so that a bad vocab_size is blamed on config.json and
 * a bad token map on its own file. */
dsv41_model *checkpoint_load(const char *dir) {
    char path[1200], err[512];
    snprintf(path, sizeof path, "%s/config.json", dir);
    json *cj = json_load_file(path, err, sizeof err);
    if (!cj) { set_error("%s", err); return NULL; }
    config c;
    int rc = config_from_checkpoint(&c, cj);
    json_free(cj);
    if (rc) { config_error(path); return NULL; }
    if (c.n_engram) {
        int64_t *token_map = read_token_map(dir, c.vocab_size, c.engram_compressed_vocab);
        if (!token_map) return NULL;
        rc = config_set_token_map(&c, token_map);
        free(token_map);
        if (rc) { config_error(path); return NULL; }
    }
    st_source src;
    if (st_open(&src, dir)) {
        st_close(&src, NULL);
        config_free(&c);
        return NULL;
    }
    dsv41_model *m = model_build(&c, &src.base);
    const st_tensor *extra = NULL;
    for (size_t i = 0; m && i < src.n; i++) {
        const st_tensor *t = &src.tensors[i];
        if (!t->used && !ignored(&c, t->name)) extra = t;
        m->file.tensors++;
        m->file.unread += !t->used;
        m->file.bytes += (int64_t)t->nbytes;
    }
    if (m) m->file.shards = (int32_t)src.n_shards;
    if (extra) {
        set_error("%s: tensor '%s' is not used by the config's layer roles", src.shards[extra->shard].path, extra->name);
        dsv41_model_free(m); /* frees the token map c shares with it */
        m = NULL;
        c.engram_token_map = NULL;
    }
    st_close(&src, m);
    if (!m) config_free(&c);
    return m;
}
