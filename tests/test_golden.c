/* test_golden.c - the golden file against the pieces of the engine, one at a time.
 *
 * Components are fed the golden's own full-resolution inputs (layer 0 and the engram layers
 * are stored whole) so that each is checked in isolation; then the whole forward runs through
 * the check, with the golden's model, with the built-in model (which must be the same model),
 * and with a planted weight error that the check must catch. */
#include <math.h>
#include <string.h>

#include "filler.h"
#include "golden.h"
#include "numerics.h"
#include "testing.h"

static const json *fixture;

/* A capture's data as f32 (stride-1 captures only), or NULL. */
static float *full(const json *cap, int64_t *n) {
    const json *d = json_get(cap, "data"), *st = json_get(cap, "stride");
    if (!d || !st || json_i64(st) != 1) return NULL;
    float *v = malloc(d->len * sizeof *v);
    for (size_t i = 0; i < d->len; i++) v[i] = (float)d->items[i].num;
    *n = (int64_t)d->len;
    return v;
}

static int cmp_f32(const char *regime, const char *name, const json *R, const float *x, int32_t ndim, const int64_t *shape) {
    int64_t n = 1;
    for (int i = 0; i < ndim; i++) n *= shape[i];
    double *v = malloc((size_t)n * sizeof *v);
    for (int64_t i = 0; i < n; i++) v[i] = x[i];
    int r = golden_compare(regime, name, json_get(R, name), v, ndim, shape, stderr);
    free(v);
    if (r < 0) fprintf(stderr, "%s\n", dsv41_error());
    return r == 1;
}

static int cmp_trace(const char *regime, const char *name, const json *R, const dsv41_trace *tr) {
    const capture *c = trace_find(tr, name);
    if (!c) return 0;
    int r = golden_compare(regime, name, json_get(R, name), c->v, c->ndim, c->shape, stderr);
    return r == 1;
}

static void test_weights_meta(const json *meta, const config *cfg) {
    int n_ok = 0, rule_ok = 1;
    dsv41_model scratch = {0};
    for (size_t i = 0; i < meta->len; i++) {
        const char *name = meta->keys[i];
        const json *e = &meta->items[i], *sh = json_get(e, "shape");
        int64_t shape[2] = {json_i64(&sh->items[0]), sh->len > 1 ? json_i64(&sh->items[1]) : 1};
        fill_spec sp = {json_get(e, "scale")->num, json_get(e, "offset")->num, json_get(e, "kind")->str,
                        json_get(e, "dtype")->str};
        fill_spec rule = filler_rule(cfg, name, (int32_t)sh->len, shape);
        if (fabs(rule.scale - sp.scale) > 1e-12 * sp.scale || rule.offset != sp.offset || strcmp(rule.kind, sp.kind) ||
            strcmp(rule.dtype, sp.dtype)) {
            rule_ok = 0;
            fprintf(stderr, "rule differs for %s\n", name);
        }
        weight w;
        if (fill_tensor(&scratch, name, (int32_t)sh->len, shape, &sp, &w)) continue;
        double ck = 0.0;
        for (int64_t r = 0; r < w.rows; r++)
            for (int64_t c = 0; c < w.cols; c++) ck += (double)weight_get(&w, r, c) * (double)(r * w.cols + c + 1);
        double want = json_get(e, "ck")->num;
        if (fabs(ck - want) <= 1e-9 * fmax(1.0, fabs(want))) n_ok++;
        else fprintf(stderr, "checksum of %s: %.17g, want %.17g\n", name, ck, want);
    }
    for (size_t i = 0; i < scratch.n_owned; i++) free(scratch.owned[i]);
    free(scratch.owned);
    CHECK(n_ok == (int)meta->len && n_ok >= 200, "%d of %zu weights_meta checksums regenerate", n_ok, meta->len);
    CHECK(rule_ok, "the filler's naming rule reproduces every weights_meta entry");
}

static void test_fixture_tables(const config *cfg) {
    const json *probe = json_get(fixture, "lcg_probe"), *scales = json_get(json_get(fixture, "engram"), "scales");
    int ok = probe && probe->len == 8;
    for (size_t i = 0; ok && i < 8; i++) ok = probe->items[i].bits == fixed_raw("probe", i);
    CHECK(ok, "lcg_probe regenerates");
    int n_ok = 0, n = 0;
    for (int li = 0; li < cfg->n_engram; li++) {
        char name[64];
        snprintf(name, sizeof name, "layers.%d.engram.embed.scale", cfg->engram_layer[li]);
        for (int64_t r = 0; r < cfg->engram_rows[li]; r++, n++)
            n_ok += e8m0_to_f32(f32_to_e8m0(fixed_value(name, (uint64_t)r, 1.0, 1.0))) ==
                    (float)json_at(json_at(scales, (size_t)li), (size_t)r)->num;
    }
    CHECK(n > 0 && n_ok == n, "%d of %d engram scales regenerate", n_ok, n);
}

/* Layer 0 and the engram layers, component by component, over the regimes in order. */
static void test_components(const dsv41_model *m, const json *root) {
    const config *c = &m->cfg;
    dsv41_session *s = dsv41_session_new(m), *hs = dsv41_session_new(m);
    dsv41_trace *tr = dsv41_trace_new();
    const json *regimes = json_get(fixture, "regimes");
    const layer_weights *L = &m->layers[0];
    int32_t hc = c->hc_mult, dim = c->dim, k = c->n_activated_experts;
    for (size_t ri = 0; ri < regimes->len; ri++) {
        const char *rg = regimes->items[ri].str;
        const json *R = json_get(root, rg);
        int64_t n, T = json_i64(&json_get(json_get(R, "input_ids"), "shape")->items[1]);
        float *h_in = full(json_get(R, "L0.h_in"), &n), *pre_in = full(json_get(R, "L0.pre_mix_in"), &n);
        float *attn_in = full(json_get(R, "L0.attn_in"), &n), *attn_out = full(json_get(R, "L0.attn_out"), &n);
        float *ffn_in = full(json_get(R, "L0.ffn_in"), &n), *ffn_out = full(json_get(R, "L0.ffn_out"), &n);
        float *a_pre = malloc(T * hc * 4), *a_post = malloc(T * hc * 4), *a_comb = malloc(T * hc * hc * 4);
        float *f_pre = malloc(T * hc * 4), *f_post = malloc(T * hc * 4), *f_comb = malloc(T * hc * hc * 4);
        float *x = malloc(T * dim * 4), *y = malloc(T * dim * 4), *mid = malloc(T * hc * dim * 4), *hout = malloc(T * hc * dim * 4);
        float *rw = malloc(T * k * 4);
        int32_t *ri32 = malloc(T * k * 4);
        int64_t s3[3] = {1, T, hc}, s4[4] = {1, T, hc, hc}, sd[3] = {1, T, dim}, sh[4] = {1, T, hc, dim}, sk[2] = {T, k};

        hc_mixes(m, h_in, T, &L->hc_attn_fn, L->hc_attn_scale, L->hc_attn_base, a_pre, a_post, a_comb);
        CHECK(cmp_f32(rg, "L0.attn_pre", R, a_pre, 3, s3) && cmp_f32(rg, "L0.attn_post", R, a_post, 3, s3) &&
                  cmp_f32(rg, "L0.attn_comb", R, a_comb, 4, s4), "%s: hc_mixes on L0.h_in", rg);
        hc_pre(h_in, pre_in, T, hc, dim, y);
        rms_norm(y, L->attn_norm, T, dim, c->norm_eps, x);
        CHECK(cmp_f32(rg, "L0.attn_in", R, x, 3, sd), "%s: hc_pre + attn_norm", rg);

        dsv41_trace_clear(tr);
        attention_forward(&(batch_seq){s, 0, T, 0, T}, 1, 0, attn_in, T, y, tr);
        CHECK(cmp_f32(rg, "L0.attn_out", R, y, 3, sd), "%s: attention on L0.attn_in", rg);
        CHECK(cmp_trace(rg, "L0.sa_q", R, tr) && cmp_trace(rg, "L0.sa_kv", R, tr) &&
                  cmp_trace(rg, "L0.sa_topk_idxs", R, tr) && cmp_trace(rg, "L0.sa_o", R, tr),
              "%s: attention internals (q, window rows, indices, o)", rg);

        hc_post(attn_out, h_in, a_post, a_comb, T, hc, dim, mid);
        hc_mixes(m, mid, T, &L->hc_ffn_fn, L->hc_ffn_scale, L->hc_ffn_base, f_pre, f_post, f_comb);
        hc_pre(mid, a_pre, T, hc, dim, y);
        rms_norm(y, L->ffn_norm, T, dim, c->norm_eps, x);
        CHECK(cmp_f32(rg, "L0.ffn_pre", R, f_pre, 3, s3) && cmp_f32(rg, "L0.ffn_comb", R, f_comb, 4, s4) &&
                  cmp_f32(rg, "L0.ffn_in", R, x, 3, sd), "%s: hc_post + ffn mixes + ffn_norm", rg);

        moe_forward(m, 0, ffn_in, T, y, rw, ri32);
        CHECK(cmp_f32(rg, "L0.ffn_out", R, y, 3, sd), "%s: moe on L0.ffn_in", rg);
        double *idx = malloc(T * k * sizeof *idx);
        for (int64_t i = 0; i < T * k; i++) idx[i] = ri32[i];
        CHECK(golden_compare(rg, "L0.moe_indices", json_get(R, "L0.moe_indices"), idx, 2, sk, stderr) == 1 &&
                  cmp_f32(rg, "L0.moe_weights", R, rw, 2, sk), "%s: routing", rg);
        int sums = 1;
        for (int64_t t = 0; t < T; t++) {
            float w = 0;
            for (int j = 0; j < k; j++) w += rw[t * k + j];
            sums &= fabsf(w - c->route_scale) <= 1e-5f;
        }
        CHECK(sums, "%s: routing weights sum to route_scale", rg);
        hc_post(ffn_out, mid, f_post, f_comb, T, hc, dim, hout);
        CHECK(cmp_f32(rg, "L0.h_out", R, hout, 4, sh), "%s: hc_post after the ffn", rg);

        int32_t *ids = malloc(T * 4);
        const json *idj = json_get(json_get(R, "input_ids"), "data");
        for (int64_t t = 0; t < T; t++) ids[t] = (int32_t)json_i64(&idj->items[t]);
        int64_t *hashes = malloc((size_t)(T * c->n_engram * engram_cols(c)) * sizeof *hashes);
        engram_hash(hs, ids, T, hashes);
        hs->pos += (int32_t)T;
        dsv41_trace_clear(tr);
        trace_i64(tr, hashes, 4, (int64_t[]){1, T, c->n_engram, engram_cols(c)}, "engram_hashes");
        CHECK(cmp_trace(rg, "engram_hashes", R, tr), "%s: engram hashes", rg);
        for (int li = 0; li < c->n_engram; li++) {
            int32_t l = c->engram_layer[li];
            char name[64];
            snprintf(name, sizeof name, "L%d.engram_in", l);
            float *eh = full(json_get(R, name), &n);
            engram_forward(m, l, hashes, T, eh, tr);
            char a[64], b[64], cc[64], d[64];
            snprintf(a, sizeof a, "L%d.engram_hash_ids", l);
            snprintf(b, sizeof b, "L%d.engram_embed", l);
            snprintf(cc, sizeof cc, "L%d.engram_kv", l);
            snprintf(d, sizeof d, "L%d.engram_out", l);
            CHECK(cmp_trace(rg, a, R, tr) && cmp_trace(rg, b, R, tr) && cmp_trace(rg, cc, R, tr) && cmp_trace(rg, d, R, tr),
                  "%s: engram layer %d on its golden input", rg, l);
            free(eh);
        }
        s->pos += (int32_t)T;
        free(ids); free(hashes); free(idx);
        free(h_in); free(pre_in); free(attn_in); free(attn_out); free(ffn_in); free(ffn_out);
        free(a_pre); free(a_post); free(a_comb); free(f_pre); free(f_post); free(f_comb);
        free(x); free(y); free(mid); free(hout); free(rw); free(ri32);
    }
    dsv41_trace_free(tr);
    dsv41_session_free(s);
    dsv41_session_free(hs);
}

static int32_t check_failures(const dsv41_golden *g, const dsv41_model *m, int32_t *passed) {
    int32_t failed = -1;
    FILE *sink = fopen("/dev/null", "w");
    if (dsv41_golden_check(g, m, sink, passed, &failed)) fprintf(stderr, "check: %s\n", dsv41_error());
    fclose(sink);
    return failed;
}

int main(void) {
    dsv41_golden *g = dsv41_golden_load(golden_path());
    CHECK(g != NULL, "golden loads from %s: %s", golden_path(), g ? "" : dsv41_error());
    if (!g) return test_summary();
    const json *root = golden_root(g);
    fixture = json_get(root, "fixture");
    dsv41_model *m = dsv41_model_from_golden(g);
    CHECK(m != NULL, "the golden's model builds: %s", m ? "" : dsv41_error());
    if (!m) return test_summary();
    test_weights_meta(json_get(root, "weights_meta"), &m->cfg);
    test_fixture_tables(&m->cfg);
    test_components(m, root);

    int32_t passed;
    CHECK(check_failures(g, m, &passed) == 0 && passed == 443, "whole golden: %d passed", passed);
    dsv41_model *b = dsv41_model_builtin();
    CHECK(b && check_failures(g, b, &passed) == 0 && passed == 443, "the built-in model is the golden's model");
    dsv41_model_free(b);

    /* planted errors: one f32 weight, one bf16 weight, each moved by 1e-3 */
    float *base = m->layers[3].hc_attn_base;
    base[0] += 1e-3f;
    CHECK(check_failures(g, m, &passed) > 0, "a 1e-3 error in layers.3.hc_attn_base is caught");
    base[0] -= 1e-3f;
    CHECK(check_failures(g, m, &passed) == 0, "restoring the weight restores the pass");
    uint16_t *emb = (uint16_t *)m->embed.data + 2 * m->cfg.dim, saved = emb[0]; /* token 2 opens the prompt */
    emb[0] = f32_to_bf16(bf16_to_f32(saved) + 1e-3f);
    CHECK(emb[0] != saved && check_failures(g, m, &passed) > 0, "a 1e-3 error in embed.weight[2][0] is caught");
    emb[0] = saved;
    dsv41_model_free(m);
    dsv41_golden_free(g);
    return test_summary();
}
