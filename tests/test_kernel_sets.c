/* test_kernel_sets.c - one result on every kernel set: whole forwards under every set this CPU
 * runs give the scalar set's bits. For the shipped golden and for goldens the independent numpy
 * reference (tests/ref/golden_gen.py) writes of another geometry, batch 2 and a 40-token
 * prefill, every regime runs on fresh sessions (one per batch row) and every capture the trace
 * holds, and the last token's logits, must equal the scalar set's bit for bit, and the golden
 * check must give the same counts on every set: none failed on the shipped golden and the batch-2
 * ones. (The 40-token goldens are fragile, golden_gen.py's --require-robust says: some orders
 * the golden's bars allow fail some of their captures, so only their equality is asserted.) */
#include <string.h>
#include <unistd.h>

#include "golden.h"
#include "testing.h"

/* Everything one set computed for a golden: values laid end to end, and what each run is. */
typedef struct {
    double *v;
    int64_t n, cap;
    char (*label)[96]; /* [runs] "regime row capture" */
    int64_t *end;      /* [runs] the end of each run in v */
    int32_t runs, runs_cap;
} record;

static void add(record *r, const char *regime, int32_t b, const char *name, const double *v, int64_t n) {
    if (r->n + n > r->cap) {
        r->cap = 2 * (r->n + n);
        r->v = realloc(r->v, (size_t)r->cap * sizeof *r->v);
    }
    if (r->runs == r->runs_cap) {
        r->runs_cap = r->runs_cap ? 2 * r->runs_cap : 256;
        r->label = realloc(r->label, (size_t)r->runs_cap * sizeof *r->label);
        r->end = realloc(r->end, (size_t)r->runs_cap * sizeof *r->end);
    }
    memcpy(r->v + r->n, v, (size_t)n * sizeof *v);
    r->n += n;
    snprintf(r->label[r->runs], sizeof r->label[0], "%s row %d %s", regime, b, name);
    r->end[r->runs++] = r->n;
}

/* Runs every regime of g on m (the kernel set already chosen) into r; 0 on success. */
static int run_golden(const dsv41_golden *g, const dsv41_model *m, record *r) {
    const json *root = golden_root(g), *fx = json_get(root, "fixture"), *regimes = json_get(fx, "regimes");
    const json *bj = json_get(fx, "batch");
    int32_t B = bj ? (int32_t)json_i64(bj) : 1, V = dsv41_model_vocab_size(m);
    if (!regimes || B < 1 || B > 8) return -1;
    dsv41_session *ss[8];
    dsv41_trace *tr = dsv41_trace_new();
    float *logits = malloc((size_t)V * sizeof *logits);
    double *lv = malloc((size_t)V * sizeof *lv);
    for (int32_t b = 0; b < B; b++) ss[b] = dsv41_session_new(m);
    int rc = 0;
    for (size_t i = 0; rc == 0 && i < regimes->len; i++) {
        const char *regime = regimes->items[i].str;
        const json *ic = json_get(json_get(root, regime), "input_ids"), *data = json_get(ic, "data");
        int64_t L = data ? (int64_t)data->len / B : 0;
        int32_t ids[256];
        if (L < 1 || L > 256) { rc = -1; break; }
        for (int32_t b = 0; rc == 0 && b < B; b++) {
            for (int64_t t = 0; t < L; t++) ids[t] = (int32_t)json_i64(json_at(data, (size_t)(b * L + t)));
            dsv41_trace_clear(tr);
            if (dsv41_session_forward(ss[b], ids, (int32_t)L, logits, tr)) { rc = -1; break; }
            for (size_t c = 0; c < tr->n; c++) add(r, regime, b, tr->caps[c].name, tr->caps[c].v, tr->caps[c].n);
            for (int32_t k = 0; k < V; k++) lv[k] = logits[k];
            add(r, regime, b, "logits", lv, V);
        }
    }
    for (int32_t b = 0; b < B; b++) dsv41_session_free(ss[b]);
    dsv41_trace_free(tr);
    free(logits);
    free(lv);
    return rc;
}

static void record_free(record *r) {
    free(r->v);
    free(r->label);
    free(r->end);
}

/* Every set against scalar on the golden at path: bits of every capture, and the check's counts
 * (with none failed when must_pass). */
static void check_golden(const char *path, const char *what, int must_pass) {
    dsv41_golden *g = dsv41_golden_load(path);
    dsv41_model *m = g ? dsv41_model_from_golden(g) : NULL;
    CHECK(m != NULL, "%s: load: %s", what, m ? "" : dsv41_error());
    if (!m) { dsv41_golden_free(g); return; }
    const char *sets[8];
    int32_t ns = dsv41_kernel_sets(sets, 8);
    record ref = {0};
    int32_t passed0 = 0, failed0 = 0;
    FILE *sink = fopen("/dev/null", "w");
    for (int32_t k = 0; k < ns; k++) { /* sets[0] is scalar */
        CHECK(dsv41_set_kernels(sets[k]) == 0 && !strcmp(dsv41_kernels(), sets[k]), "use kernel set %s", sets[k]);
        record r = {0};
        CHECK(run_golden(g, m, &r) == 0, "%s on %s: the regimes run", what, sets[k]);
        if (k == 0) {
            ref = r;
        } else {
            int32_t bad = -1;
            for (int32_t i = 0; bad < 0 && i < r.runs && i < ref.runs; i++)
                if (strcmp(r.label[i], ref.label[i]) || r.end[i] != ref.end[i] ||
                    memcmp(r.v + (i ? r.end[i - 1] : 0), ref.v + (i ? ref.end[i - 1] : 0),
                           (size_t)(r.end[i] - (i ? r.end[i - 1] : 0)) * sizeof *r.v))
                    bad = i;
            CHECK(r.runs == ref.runs && bad < 0, "%s: %s gives scalar's bits in all %d captures and logits (first differing: %s)",
                  what, sets[k], ref.runs, bad < 0 ? "none" : r.label[bad]);
            record_free(&r);
        }
        int32_t passed = 0, failed = -1;
        CHECK(dsv41_golden_check(g, m, sink, &passed, &failed) == 0 && passed > 0, "%s: the check runs on %s", what, sets[k]);
        if (k == 0) passed0 = passed, failed0 = failed;
        CHECK(passed == passed0 && failed == failed0 && (!must_pass || failed == 0),
              "%s on %s: %d passed, %d failed (scalar: %d, %d)", what, sets[k], passed, failed, passed0, failed0);
    }
    fclose(sink);
    record_free(&ref);
    dsv41_set_kernels(NULL);
    dsv41_model_free(m);
    dsv41_golden_free(g);
}

/* python3 with numpy, for the reference goldens; NULL when there is none */
static const char *python(void) {
    static const char *const cands[] = {"python3", "/usr/bin/python3"};
    for (size_t i = 0; i < sizeof cands / sizeof *cands; i++) {
        char cmd[128];
        snprintf(cmd, sizeof cmd, "%s -c 'import numpy' 2>/dev/null", cands[i]);
        if (system(cmd) == 0) return cands[i];
    }
    return NULL;
}

int main(void) {
    check_golden(golden_path(), "the shipped golden", 1);
    /* geometry, batch, prefill, decode steps, input seed: the shipped geometry at batch 2 (its
     * prefill of 12 takes the fp8 / fp4 many-token paths), the other geometry at batch 2, and
     * prefills of 40 on both, past every path's token threshold */
    static const struct { const char *geo; int b, l, n, seed, must_pass; } gens[] = {
        {"tiny", 2, 12, 4, 0, 1}, {"alt", 2, 9, 3, 2313, 1}, {"tiny", 1, 40, 3, 0, 0}, {"alt", 1, 40, 3, 0, 0}};
    const char *py = python();
    CHECK(py != NULL, "python3 with numpy is needed for the reference goldens");
    char dir[] = "/tmp/dsv41-sets-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "temporary directory");
    for (size_t i = 0; py && i < sizeof gens / sizeof *gens; i++) {
        char path[256], cmd[512], what[96];
        snprintf(path, sizeof path, "%s/g%zu.json", dir, i);
        snprintf(cmd, sizeof cmd,
                 "%s tests/ref/golden_gen.py -q --no-twin --out %s --geometry %s --batch %d --prefill %d --decode %d "
                 "--seed-ids %d >/dev/null 2>&1",
                 py, path, gens[i].geo, gens[i].b, gens[i].l, gens[i].n, gens[i].seed);
        snprintf(what, sizeof what, "golden %s batch %d prefill %d decode %d", gens[i].geo, gens[i].b, gens[i].l, gens[i].n);
        int ok = system(cmd) == 0;
        CHECK(ok, "%s: golden_gen.py writes it", what);
        if (ok) check_golden(path, what, gens[i].must_pass);
        unlink(path);
    }
    rmdir(dir);
    return test_summary();
}
