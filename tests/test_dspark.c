/* test_dspark.c - the DSpark drafter against the independent numpy reference.
 *
 * tests/ref/dspark_ref.py ports the release's forward_spec and drafts after every decode step
 * of a prefill and greedy steps on models/tiny_dspark.json (window 8: the steps cross the
 * drafter's rings' wrap several times); the engine feeds the same tokens to the same model (the
 * filler's weights, as synth writes them) and must give the same draft ids exactly, and the
 * draft logits and confidence logits within the golden's bars, at every step the reference
 * found robust (its twin numerics keep the drafts and half the bars there). Every thread count
 * and kernel set gives the same bits; a session copy drafts as the original; bad calls are
 * refused. */
#include <math.h>
#include <string.h>

#include "filler.h"
#include "golden.h"
#include "testing.h"

static const char *CONFIG = "models/tiny_dspark.json";

/* A python3 that has numpy, or NULL. */
static const char *python(void) {
    static const char *cands[] = {"python3", "/usr/bin/python3"};
    for (size_t i = 0; i < sizeof cands / sizeof *cands; i++) {
        char cmd[256];
        snprintf(cmd, sizeof cmd, "%s -c 'import numpy' >/dev/null 2>&1", cands[i]);
        if (system(cmd) == 0) return cands[i];
    }
    return NULL;
}

/* Every step's drafts of the reference's run, fed to m: ids [steps][B], logits [steps][B][V],
 * confidence [steps][B]. 0 when every call worked. */
static int run_steps(const dsv41_model *m, const json *ref, int32_t *ids, float *logits, float *conf) {
    const json *pre = json_get(ref, "prefill"), *steps = json_get(ref, "steps");
    int32_t B = dsv41_model_draft_size(m), V = dsv41_model_vocab_size(m), n = (int32_t)pre->len;
    int32_t *p = malloc((size_t)n * sizeof *p);
    for (int32_t i = 0; i < n; i++) p[i] = (int32_t)json_i64(&pre->items[i]);
    dsv41_session *s = dsv41_session_new(m), *copy = dsv41_session_new(m);
    int rc = dsv41_session_forward(s, p, n, NULL, NULL);
    for (size_t k = 0; rc == 0 && k < steps->len; k++) {
        const json *st = &steps->items[k];
        int32_t tok = (int32_t)json_i64(json_get(st, "token")), anchor = (int32_t)json_i64(json_get(st, "anchor"));
        rc = dsv41_session_forward(s, &tok, 1, NULL, NULL);
        /* the drafts of a copy: the drafter's state travels with the session */
        if (rc == 0 && k % 2) rc = dsv41_session_copy(copy, s);
        if (rc == 0)
            rc = dsv41_session_draft(k % 2 ? copy : s, anchor, B, ids + k * B, logits + (int64_t)k * B * V, conf + k * B);
    }
    if (rc) fprintf(stderr, "run_steps: %s\n", dsv41_error());
    dsv41_session_free(s);
    dsv41_session_free(copy);
    free(p);
    return rc;
}

static void compare(const dsv41_model *m, const json *ref, const int32_t *ids, const float *logits, const float *conf) {
    const json *steps = json_get(ref, "steps");
    int32_t B = dsv41_model_draft_size(m), V = dsv41_model_vocab_size(m);
    int ids_ok = 1, logits_ok = 1, conf_ok = 1, robust = 0;
    double *v = malloc((size_t)B * V * sizeof *v);
    for (size_t k = 0; k < steps->len; k++) {
        const json *st = &steps->items[k], *want = json_get(st, "draft_ids");
        const json *rb = json_get(st, "robust");
        if (!rb || rb->type != JSON_BOOL || !rb->num) continue;
        robust++;
        char regime[32];
        snprintf(regime, sizeof regime, "draft at %lld", (long long)json_i64(json_get(st, "pos")));
        for (int32_t i = 0; i < B; i++)
            if (ids[k * B + i] != json_i64(&want->items[i])) {
                ids_ok = 0;
                fprintf(stderr, "%s: draft %d is %d, the reference's %lld (its margin %.3g)\n", regime, i, ids[k * B + i],
                        (long long)json_i64(&want->items[i]), json_at(json_get(st, "margins"), (size_t)i)->num);
            }
        for (int64_t i = 0; i < (int64_t)B * V; i++) v[i] = logits[k * B * V + i];
        logits_ok &= golden_compare(regime, "draft_logits", json_get(st, "draft_logits"), v, 2, (int64_t[]){B, V}, stderr) == 1;
        for (int32_t i = 0; i < B; i++) v[i] = conf[k * B + i];
        conf_ok &= golden_compare(regime, "confidence", json_get(st, "confidence"), v, 1, (int64_t[]){B}, stderr) == 1;
    }
    free(v);
    CHECK(robust >= 8, "%d of the reference's %zu steps are robust (at least 8)", robust, steps->len);
    CHECK(ids_ok, "the draft ids of %d blocks are the reference's", robust);
    CHECK(logits_ok, "the draft logits are the reference's within the golden's bars");
    CHECK(conf_ok, "the confidence logits are the reference's within the golden's bars");
}

static void test_refused(const dsv41_model *m, const json *ref) {
    dsv41_session *s = dsv41_session_new(m);
    int32_t ids[16], tok = (int32_t)json_i64(&json_get(ref, "prefill")->items[0]);
    CHECK(dsv41_session_draft(s, 1, 5, ids, NULL, NULL) < 0, "an empty session does not draft");
    dsv41_session_forward(s, &tok, 1, NULL, NULL);
    CHECK(dsv41_session_draft(s, 1, 5, ids, NULL, NULL) < 0, "a session after its prefill alone does not draft");
    dsv41_session_forward(s, &tok, 1, NULL, NULL);
    CHECK(dsv41_session_draft(s, 1, 5, ids, NULL, NULL) == 0, "one decoded token later it drafts");
    int32_t few[2];
    float lg2[2 * 64];
    CHECK(dsv41_session_draft(s, 1, 2, few, lg2, NULL) == 0 && !memcmp(few, ids, sizeof few),
          "two drafts are the block's first two");
    CHECK(dsv41_session_draft(s, -1, 5, ids, NULL, NULL) < 0 && dsv41_session_draft(s, 1 << 20, 5, ids, NULL, NULL) < 0,
          "an anchor outside the vocabulary is refused");
    CHECK(dsv41_session_draft(s, 1, 0, ids, NULL, NULL) < 0 && dsv41_session_draft(s, 1, 6, ids, NULL, NULL) < 0,
          "a draft count outside the block is refused");
    dsv41_session_free(s);
    dsv41_model *plain = dsv41_model_builtin();
    s = dsv41_session_new(plain);
    dsv41_session_forward(s, (int32_t[]){2, 17, 47}, 3, NULL, NULL);
    dsv41_session_forward(s, &tok, 1, NULL, NULL);
    CHECK(dsv41_model_draft_size(plain) == 0 && dsv41_session_draft(s, 1, 1, ids, NULL, NULL) < 0,
          "a model without stages has no drafter");
    dsv41_session_free(s);
    dsv41_model_free(plain);
}

int main(void) {
    const char *py = python();
    CHECK(py != NULL, "python3 with numpy is needed for the reference");
    dsv41_model *m = model_from_config_file(CONFIG);
    CHECK(m != NULL && dsv41_model_draft_size(m) == 5, "%s builds with a drafter of 5: %s", CONFIG, m ? "" : dsv41_error());
    if (!py || !m) return test_summary();
    char tmp[] = "/tmp/dsv41_dspark_XXXXXX", cmd[512], path[64], err[256];
    if (!mkdtemp(tmp)) return 1;
    snprintf(path, sizeof path, "%s/ref.json", tmp);
    snprintf(cmd, sizeof cmd, "%s tests/ref/dspark_ref.py --config %s --out %s --seed-ids 8 >/dev/null", py, CONFIG, path);
    json *ref = system(cmd) == 0 ? json_load_file(path, err, sizeof err) : NULL;
    CHECK(ref != NULL, "the reference ran");
    if (!ref) return test_summary();
    size_t n = json_get(ref, "steps")->len;
    int32_t B = dsv41_model_draft_size(m), V = dsv41_model_vocab_size(m);
    int32_t *ids = calloc(n * B, sizeof *ids), *ids2 = calloc(n * B, sizeof *ids2);
    float *lg = calloc(n * B * V, sizeof *lg), *lg2 = calloc(n * B * V, sizeof *lg2);
    float *cf = calloc(n * B, sizeof *cf), *cf2 = calloc(n * B, sizeof *cf2);
    CHECK(run_steps(m, ref, ids, lg, cf) == 0, "the engine drafts after every step");
    compare(m, ref, ids, lg, cf);

    const char *sets[8];
    int32_t ns = dsv41_kernel_sets(sets, 8);
    for (int32_t k = 0; k < ns; k++)
        for (int32_t th = 1; th <= 3; th += 2) {
            dsv41_set_kernels(sets[k]);
            dsv41_set_threads(th);
            int ok = run_steps(m, ref, ids2, lg2, cf2) == 0 && !memcmp(ids, ids2, n * B * sizeof *ids) &&
                     !memcmp(lg, lg2, n * B * V * sizeof *lg) && !memcmp(cf, cf2, n * B * sizeof *cf);
            CHECK(ok, "kernel set %s, %d threads: the same drafts, logits and confidence bits", sets[k], th);
        }
    dsv41_set_kernels(NULL);
    test_refused(m, ref);
    free(ids); free(ids2); free(lg); free(lg2); free(cf); free(cf2);
    json_free(ref);
    dsv41_model_free(m);
    unlink(path);
    rmdir(tmp);
    return test_summary();
}
