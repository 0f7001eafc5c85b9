/* golden_check.c - the capture-by-capture check of a model against a golden (GOLDEN.md §2).
 *
 * Each regime is one call on persistent sessions (one per batch row); every capture the
 * regime holds is compared on its strided sample (max abs error) and on its index-weighted
 * checksum over the whole tensor, with the bar its kind calls for. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "golden.h"

typedef enum { BAR_EXACT, BAR_F32, BAR_BF16 } bar_kind;

/* The bar of a capture follows from its last name component (model_tests.rs in the reference). */
static bar_kind bar_of(const char *name) {
    static const char *ints[] = {"input_ids", "engram_hashes", "engram_hash_ids", "sa_topk_idxs", "moe_indices",
                                 "topk_idxs", "candidates"};
    static const char *f32s[] = {"attn_pre", "attn_post", "attn_comb", "ffn_pre", "ffn_post", "ffn_comb",
                                 "pre_mix_in", "pre_mix_out", "moe_weights"};
    const char *dot = strrchr(name, '.'), *base = dot ? dot + 1 : name;
    for (size_t i = 0; i < sizeof ints / sizeof *ints; i++)
        if (strcmp(base, ints[i]) == 0) return BAR_EXACT;
    for (size_t i = 0; i < sizeof f32s / sizeof *f32s; i++)
        if (strcmp(base, f32s[i]) == 0) return BAR_F32;
    return BAR_BF16;
}

/* Integer item i of a in [lo, hi]; clears *ok for anything else (a float is never truncated). */
static int64_t num_at(const json *a, size_t i, int64_t lo, int64_t hi, int *ok) {
    int64_t v = 0;
    if (json_int(json_at(a, i), lo, hi, &v)) *ok = 0;
    return v;
}

int golden_compare(const char *regime, const char *name, const json *cap, const double *got, int32_t ndim,
                   const int64_t *shape, FILE *report) {
    const json *sh = json_get(cap, "shape"), *st = json_get(cap, "stride"), *ck = json_get(cap, "ck"),
               *data = json_get(cap, "data");
    if (!sh || sh->type != JSON_ARR || !st || st->type != JSON_NUM || !ck || ck->type != JSON_NUM || !data ||
        data->type != JSON_ARR)
        return set_error("golden: %s %s: needs shape, stride, ck and data", regime, name);
    int ok = 1, same = sh->len == (size_t)ndim;
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) {
        n *= shape[i];
        if (same && num_at(sh, (size_t)i, 0, INT64_MAX, &ok) != shape[i]) same = 0;
    }
    if (!ok || !same) {
        char want[96] = "[";
        for (int i = 0; i < ndim; i++) snprintf(want + strlen(want), sizeof want - strlen(want), "%s%lld", i ? "," : "", (long long)shape[i]);
        return set_error("golden: %s %s: shape disagrees with the model's %s]", regime, name, want);
    }
    int64_t stride;
    if (json_int(st, 1, INT64_MAX, &stride)) return set_error("golden: %s %s: stride must be a positive integer", regime, name);
    if ((int64_t)data->len != n / stride + (n % stride != 0))
        return set_error("golden: %s %s: %zu samples do not fit %lld elements at stride %lld", regime, name, data->len,
                         (long long)n, (long long)stride);
    double smax = 0.0, err = 0.0, ckg = 0.0, wsum = 0.0;
    for (size_t i = 0; i < data->len; i++) {
        const json *v = &data->items[i];
        if (v->type != JSON_NUM) return set_error("golden: %s %s: data[%zu] is not a number", regime, name, i);
        smax = fmax(smax, fabs(v->num));
        double e = fabs(got[(int64_t)i * stride] - v->num);
        err = isnan(e) || e > err ? e : err;
    }
    for (int64_t i = 0; i < n; i++) {
        ckg += got[i] * (double)(i + 1);
        wsum += fabs(got[i]) * (double)(i + 1);
    }
    bar_kind kind = bar_of(name);
    double tol = kind == BAR_EXACT ? 1e-12 : kind == BAR_F32 ? 1e-4 : 2.0 * 0x1p-8 * smax + 1e-6;
    double ck_rel = kind == BAR_EXACT ? 1e-12 : kind == BAR_F32 ? 1e-4 : 0x1p-7;
    double ck_err = fabs(ckg - ck->num), ck_bar = ck_rel * fmax(1.0, wsum);
    if (err <= tol && ck_err <= ck_bar) return 1;
    fprintf(report, "FAIL %s %s: max error %.3g (bar %.3g), checksum error %.3g (bar %.3g)\n", regime, name, err, tol,
            ck_err, ck_bar);
    return 0;
}

/* Concatenate the batch rows' captures of `name` along the first dimension. */
static double *merge(dsv41_trace **tr, int32_t B, const char *name, int32_t *ndim, int64_t *shape) {
    const capture *c0 = trace_find(tr[0], name);
    if (!c0) return NULL;
    double *v = malloc((size_t)(c0->n * B + 1) * sizeof *v);
    if (!v) return NULL;
    for (int32_t b = 0; b < B; b++) {
        const capture *cb = trace_find(tr[b], name);
        memcpy(v + b * c0->n, cb->v, (size_t)c0->n * sizeof *v);
    }
    *ndim = c0->ndim;
    memcpy(shape, c0->shape, sizeof c0->shape);
    shape[0] *= B;
    return v;
}

/* A golden capture shared.L{l}.candidates of a layer before the candidate source is the
 * reference's slot as an earlier call left it: it keeps the slots in module globals (GOLDEN.md),
 * where the engine drops a call's candidates when its layers are done (model.h). So it is what
 * the engine recorded after the candidate source in the previous call, in prev, merged as merge
 * does; NULL for any other name. */
static double *earlier_candidates(const dsv41_model *m, dsv41_trace **prev, int32_t B, const char *name, int32_t *ndim,
                                  int64_t *shape) {
    int32_t l, end = 0, cs = m->cfg.candidate_source_layer;
    if (sscanf(name, "shared.L%d.candidates%n", &l, &end) != 1 || name[end] || l >= cs) return NULL;
    char src[64];
    snprintf(src, sizeof src, "shared.L%d.candidates", cs);
    return merge(prev, B, src, ndim, shape);
}

/* One regime's call on each session, its captures in tr (those of the regime before in prev) */
static int run_regime(const char *regime, const json *R, const dsv41_model *m, dsv41_session **ss, dsv41_trace **tr,
                      dsv41_trace **prev, int32_t B, FILE *report, int32_t *passed, int32_t *failed) {
    if (!R || R->type != JSON_OBJ) return set_error("golden: regime '%s' is missing or not an object", regime);
    const json *ic = json_get(R, "input_ids"), *sh = json_get(ic, "shape"), *data = json_get(ic, "data"),
               *st = json_get(ic, "stride");
    int ok = 1;
    if (!sh || !data || data->type != JSON_ARR || sh->len != 2 || num_at(sh, 0, B, B, &ok) != B || !ok ||
        json_i64(st) != 1)
        return set_error("golden: %s: input_ids must be a whole [batch, tokens] capture", regime);
    int64_t L = num_at(sh, 1, 1, INT32_MAX / B, &ok); /* B * L stays an int32 count */
    if (!ok || (int64_t)data->len != B * L) return set_error("golden: %s: input_ids holds the wrong count", regime);
    int32_t *ids = malloc((size_t)(B * L) * sizeof *ids);
    if (!ids) return set_error("out of memory");
    for (int64_t i = 0; i < B * L; i++) ids[i] = (int32_t)num_at(data, (size_t)i, 0, INT32_MAX, &ok);
    for (int32_t b = 0; ok && b < B; b++) {
        dsv41_trace_clear(tr[b]);
        if (dsv41_session_forward(ss[b], ids + b * L, (int32_t)L, NULL, tr[b])) {
            char msg[512];
            snprintf(msg, sizeof msg, "%s", dsv41_error());
            free(ids);
            return set_error("golden: %s: %s", regime, msg);
        }
    }
    free(ids);
    if (!ok) return set_error("golden: %s: input_ids holds something other than a token id", regime);
    for (size_t i = 0; i < R->len; i++) {
        const char *name = R->keys[i];
        int32_t ndim;
        int64_t shape[6];
        double *got = merge(tr, B, name, &ndim, shape);
        if (!got) got = earlier_candidates(m, prev, B, name, &ndim, shape);
        if (!got) {
            fprintf(report, "FAIL %s %s: the model produces no such capture\n", regime, name);
            (*failed)++;
            continue;
        }
        int r = golden_compare(regime, name, &R->items[i], got, ndim, shape, report);
        free(got);
        if (r < 0) return -1;
        if (r) (*passed)++;
        else (*failed)++;
    }
    /* a capture the golden lacks would go unchecked: a golden that lost one must not pass */
    for (size_t i = 0; i < tr[0]->n; i++)
        if (!json_get(R, tr[0]->caps[i].name)) {
            fprintf(report, "FAIL %s %s: the golden has no such capture\n", regime, tr[0]->caps[i].name);
            (*failed)++;
        }
    return 0;
}

int dsv41_golden_check(const dsv41_golden *g, const dsv41_model *m, FILE *report, int32_t *passed, int32_t *failed) {
    const json *fx = json_get(golden_root(g), "fixture"), *regimes = json_get(fx, "regimes"), *bj = json_get(fx, "batch");
    int64_t batch = 1;
    if (bj && json_int(bj, 1, 4096, &batch)) return set_error("golden: fixture batch must be an integer in [1, 4096]");
    int32_t B = (int32_t)batch;
    if (regimes && regimes->type != JSON_ARR) return set_error("golden: fixture regimes must be a list");
    *passed = *failed = 0;
    dsv41_session **ss = calloc((size_t)B, sizeof *ss);
    dsv41_trace **tr = calloc((size_t)B, sizeof *tr), **prev = calloc((size_t)B, sizeof *prev);
    int rc = ss && tr && prev ? 0 : set_error("out of memory");
    for (int32_t b = 0; rc == 0 && b < B; b++)
        if (!(ss[b] = dsv41_session_new(m)) || !(tr[b] = dsv41_trace_new()) || !(prev[b] = dsv41_trace_new())) rc = -1;
    /* regimes run in the fixture's order; without a list, every top-level key but the two headers */
    size_t n = regimes ? regimes->len : golden_root(g)->len;
    for (size_t i = 0; rc == 0 && i < n; i++) {
        const char *name;
        if (regimes) {
            if (regimes->items[i].type != JSON_STR) { rc = set_error("golden: fixture regimes must be names"); break; }
            name = regimes->items[i].str;
        } else {
            name = golden_root(g)->keys[i];
            if (!strcmp(name, "fixture") || !strcmp(name, "weights_meta")) continue;
        }
        rc = run_regime(name, json_get(golden_root(g), name), m, ss, tr, prev, B, report, passed, failed);
        dsv41_trace **t = prev; /* this regime's captures are the next one's earlier call */
        prev = tr;
        tr = t;
    }
    if (rc == 0 && *passed + *failed == 0) rc = set_error("golden: it holds no captures to check"); /* a vacuous pass */
    for (int32_t b = 0; b < B; b++) {
        if (ss) dsv41_session_free(ss[b]);
        if (tr) dsv41_trace_free(tr[b]);
        if (prev) dsv41_trace_free(prev[b]);
    }
    free(ss);
    free(tr);
    free(prev);
    return rc;
}
