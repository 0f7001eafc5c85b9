/* open.c - the public loaders: a checkpoint directory, a golden's model, the built-in model.
 * Each loads through dist.c, which loads on every rank of a split job and ends with a vote. */
#include "dist.h"
#include "loader.h"

dsv41_model *dsv41_model_load(const char *dir) { return dist_load(OP_LOAD_DIR, dir, NULL); }
dsv41_model *dsv41_model_from_golden(const dsv41_golden *g) { return dist_load(OP_LOAD_GOLDEN, golden_filename(g), g); }
dsv41_model *dsv41_model_builtin(void) { return dist_load(OP_LOAD_BUILTIN, "", NULL); }
