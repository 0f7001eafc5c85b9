/* safetensors.h - a weight source over memory-mapped safetensors shards. */
#ifndef DSV41_SAFETENSORS_H
#define DSV41_SAFETENSORS_H

#include "json.h"
#include "loader.h"

typedef struct {
    char file[256];          /* name inside the checkpoint directory */
    char path[1300];         /* dir/file, for messages */
    void *addr;              /* the mapping, NULL when closed */
    size_t len;
    json *header;            /* parsed header; tensor names point into it */
} st_shard;

typedef struct {
    const char *name;
    dtype type;              /* DT_FP4 for I8 (two e2m1 per byte) */
    int32_t ndim;
    int64_t shape[4];        /* as stored (fp4: [rows][cols/2]) */
    const uint8_t *data;
    size_t nbytes;
    int32_t shard;
    uint8_t used;
} st_tensor;

typedef struct {
    weight_source base;
    char dir[1024];
    st_shard *shards;        /* [n_shards] */
    size_t n_shards;
    st_tensor *tensors;      /* [n] of cap_tensors */
    size_t n, cap_tensors;
    int32_t *slots;          /* [cap] open-addressing index into tensors, -1 empty */
    size_t cap;
} st_source;

/* Opens dir/model.safetensors.index.json and its shards, or dir/model.safetensors. */
int st_open(st_source *s, const char *dir);
const st_tensor *st_first_unused(const st_source *s);
/* Releases the source; its mappings move to keep_maps when given, else are unmapped. */
void st_close(st_source *s, dsv41_model *keep_maps);

#endif
