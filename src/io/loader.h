/* loader.h - weight sources and the model builder (loader.c, filler.c). */
#ifndef DSV41_LOADER_H
#define DSV41_LOADER_H

#include "model.h"

/* Something that can produce named tensors: load() fills w with the tensor `name` of the given
 * shape (ndim 1 or 2), in its storage format, with its e8m0 block scales attached when it has
 * them, or returns -1 with a message naming the tensor. model_build reads a tensor's values
 * only before its next load call, so a source may reuse the memory then. */
typedef struct weight_source {
    int (*load)(struct weight_source *src, dsv41_model *m, const char *name, int32_t ndim, const int64_t *shape,
                weight *w);
} weight_source;

/* The loaders of one process (checkpoint.c, golden.c, filler.c); lib/open.c's public ones
 * load through them on every rank of a job. golden_filename: the file g was loaded from. */
dsv41_model *checkpoint_load(const char *dir);
dsv41_model *golden_model(const dsv41_golden *g);
const char *golden_filename(const dsv41_golden *g);
dsv41_model *builtin_model(void);

/* Builds a model over cfg (the model takes ownership of cfg's buffers on success). */
dsv41_model *model_build(const config *cfg, weight_source *src);

#endif
