/* tokenizer_dir.c - the tokenizer that comes with a checkpoint directory.
 *
 * tokenizer.json holds the vocabulary; which ids begin and end a sentence is the model's
 * choice, so it is read where a Hugging Face checkpoint writes it: config.json's
 * bos_token_id / eos_token_id (at the top or in text_config), else tokenizer_config.json's
 * bos_token / eos_token spellings (a string or {"content": ...}). Without either, the V4.1
 * spellings the tokenizer load found stay. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "dsv41.h"
#include "error.h"
#include "json.h"
#include "tokenizer.h"

/* An id member of o: -2 when absent, -1 for null, else the id (or -3 when not an integer). */
static int64_t id_member(const json *o, const char *key) {
    const json *v = json_get(o, key);
    if (!v) return -2;
    if (v->type == JSON_NULL) return -1;
    return v->type == JSON_NUM && v->is_int && !v->is_neg && v->bits < 0x7FFFFFFF ? (int64_t)v->bits : -3;
}

/* bos / eos from config.json; returns 1 when it names them, 0 when not, -1 on error. */
static int ends_from_config(const char *path, int32_t *bos, int32_t *eos) {
    char err[512];
    if (access(path, F_OK) != 0) return 0;
    json *root = json_load_file(path, err, sizeof err);
    if (!root) return set_error("tokenizer: %s", err);
    const json *tc = json_get(root, "text_config"), *o = id_member(root, "eos_token_id") != -2 ? root : tc;
    int64_t b = id_member(o, "bos_token_id"), e = id_member(o, "eos_token_id");
    json_free(root);
    if (b == -3 || e == -3) return set_error("tokenizer: %s: bos_token_id / eos_token_id must be token ids", path);
    if (e == -2) return 0;
    *bos = b < 0 ? -1 : (int32_t)b;
    *eos = (int32_t)e;
    return 1;
}

/* The id of tokenizer_config.json's key (a spelling or {"content": spelling}); -2 absent. */
static int32_t spelling_member(const dsv41_tokenizer *t, const json *o, const char *key) {
    const json *v = json_get(o, key);
    if (v && v->type == JSON_OBJ) v = json_get(v, "content");
    return v && v->type == JSON_STR ? dsv41_tokenizer_find(t, v->str) : -2;
}

static int ends_from_tokenizer_config(const dsv41_tokenizer *t, const char *path, int32_t *bos, int32_t *eos) {
    char err[512];
    if (access(path, F_OK) != 0) return 0;
    json *root = json_load_file(path, err, sizeof err);
    if (!root) return set_error("tokenizer: %s", err);
    int32_t b = spelling_member(t, root, "bos_token"), e = spelling_member(t, root, "eos_token");
    json_free(root);
    if (e == -2) return 0;
    if (e < 0 || b == -1) return set_error("tokenizer: %s: bos_token / eos_token is not in the vocabulary", path);
    *bos = b < 0 ? -1 : b;
    *eos = e;
    return 1;
}

dsv41_tokenizer *dsv41_tokenizer_load_dir(const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/tokenizer.json", dir) >= (int)sizeof path) {
        set_error("tokenizer: directory name too long");
        return NULL;
    }
    dsv41_tokenizer *t = dsv41_tokenizer_load(path);
    if (!t) return NULL;
    int32_t bos = dsv41_tokenizer_bos(t), eos = dsv41_tokenizer_eos(t);
    snprintf(path, sizeof path, "%s/config.json", dir);
    int found = ends_from_config(path, &bos, &eos);
    if (found == 0) {
        snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
        found = ends_from_tokenizer_config(t, path, &bos, &eos);
    }
    if (found < 0 || tokenizer_set_ends(t, bos, eos)) {
        dsv41_tokenizer_free(t);
        return NULL;
    }
    return t;
}
