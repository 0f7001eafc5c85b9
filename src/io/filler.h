/* filler.h - filler-generated weights (the golden's weights_meta, or the generator's rule). */
#ifndef DSV41_FILLER_H
#define DSV41_FILLER_H

#include "loader.h"

typedef struct {
    double scale, offset; /* v = (2u-1)*scale + offset */
    const char *kind;     /* "f32", "fp8" (e4m3 of v) or "e8m0" (e8m0 of v) */
    const char *dtype;    /* storage: "float32", "bfloat16", "float8_e4m3fn", "float8_e8m0fnu" */
} fill_spec;

/* 1 when the tensor name s ends with suffix */
int name_ends(const char *s, const char *suffix);
fill_spec filler_rule(const config *c, const char *name, int32_t ndim, const int64_t *shape);
int fill_tensor(dsv41_model *m, const char *name, int32_t ndim, const int64_t *shape, const fill_spec *sp, weight *w);

struct dsv41_json;
dsv41_model *model_from_meta(const config *c, const struct dsv41_json *meta);
/* The weights_meta source on its own (convert wraps it to record what the loader asks for). */
weight_source *meta_source_new(const struct dsv41_json *meta);
void meta_source_free(weight_source *src);
dsv41_model *model_from_rule(const config *c);
/* The naming rule's model of a fixture-shaped config file (models/tiny_dspark.json): what synth
 * writes, without the files. */
dsv41_model *model_from_config_file(const char *path);
/* The naming-rule source on its own, for c (which must outlive it); free() it. */
weight_source *rule_source_new(const config *c);

#endif
