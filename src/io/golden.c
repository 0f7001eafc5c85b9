/* golden.c - the golden file: loaded, freed, and the model its fixture and weights_meta make
 * (tools/golden_check.c compares a model with its captures). */
#include <stdlib.h>
#include <string.h>

#include "golden.h"
#include "loader.h"

#include "filler.h"

struct dsv41_golden {
    json *root;
    char *path;   /* as given to dsv41_golden_load: other ranks load the same file */
};

dsv41_golden *dsv41_golden_load(const char *path) {
    char err[512];
    json *root = json_load_file(path, err, sizeof err);
    if (!root) { set_error("%s", err); return NULL; }
    if (root->type != JSON_OBJ || !json_get(root, "fixture") || !json_get(root, "weights_meta")) {
        set_error("%s: not a golden file (needs 'fixture' and 'weights_meta')", path);
        json_free(root);
        return NULL;
    }
    dsv41_golden *g = malloc(sizeof *g);
    char *p = strdup(path);
    if (!g || !p) { free(g); free(p); json_free(root); set_error("out of memory"); return NULL; }
    g->root = root;
    g->path = p;
    return g;
}

const json *golden_root(const dsv41_golden *g) { return g->root; }
const char *golden_filename(const dsv41_golden *g) { return g->path; }

void dsv41_golden_free(dsv41_golden *g) {
    if (!g) return;
    json_free(g->root);
    free(g->path);
    free(g);
}

dsv41_model *golden_model(const dsv41_golden *g) {
    config c;
    if (config_from_fixture(&c, json_get(g->root, "fixture"))) return NULL;
    dsv41_model *m = model_from_meta(&c, json_get(g->root, "weights_meta"));
    if (!m) config_free(&c);
    return m;
}
