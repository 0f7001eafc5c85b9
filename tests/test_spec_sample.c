/* test_spec_sample.c - speculative sampling keeps the target's distribution.
 *
 * The rule (spec.c): the drafter is greedy, so its q is one-hot on the draft d, and the standard
 * rule (accept with min(1, p(d)/q(d)), on a rejection draw from normalize(max(0, p - q)))
 * becomes: accept with probability p(d), else draw x != d with probability p(x) / (1 - p(d)).
 * The verify realises it by drawing x from p with the sampler and accepting exactly when x == d.
 *
 * Two statistical checks, against p computed here by the definition (sort, top-k, temperature,
 * top-p, min-p), not by the sampler:
 *   - the sampler's pick on a synthetic 6-token row, with d likely, unlikely and filtered out:
 *     the acceptance rate is p(d) within 6 standard deviations, the emitted token follows p and
 *     the rejections follow the residual normalize(max(0, p - onehot(d)));
 *   - end to end on the tiny DSpark model: a verify of [anchor, d] with a fresh seed each time
 *     emits as its first token d (accepted) or the residual's draw, and over the seeds that
 *     token follows the target row's filtered softmax; per seed it is the very token sequential
 *     sampling with that seed emits.
 * Each distribution check is Pearson's chi-square against its bound at a false-failure
 * probability of 1e-9 (cells expected to hold fewer than 5 draws are pooled into one); the
 * seeds are fixed, so the run is repeatable, and a chance failure of a correct sampler on them
 * would have had that probability. */
#include <math.h>
#include <string.h>

#include "filler.h"
#include "testing.h"

enum { MAXV = 64 };

/* chi-square's upper 1e-9 quantile for df = 1..9 */
static const double CHI2_1E9[] = {0, 37.32, 41.45, 44.84, 47.88, 50.69, 53.34, 55.87, 58.31, 60.66};

/* p [V]: the sampler's distribution for logits l [V] by its definition: order by logit (the
 * lower id first on a tie), keep the top_k, soften by the temperature, keep the shortest
 * prefix whose mass reaches top_p, drop what weighs under min_p of the top, normalise. */
static void filtered(const float *l, int32_t V, const dsv41_sampler_params *sp, double *p) {
    int32_t order[MAXV];
    for (int32_t i = 0; i < V; i++) order[i] = i;
    for (int32_t i = 1; i < V; i++) /* insertion sort: V is small */
        for (int32_t j = i; j > 0 && (l[order[j]] > l[order[j - 1]] || (l[order[j]] == l[order[j - 1]] && order[j] < order[j - 1])); j--) {
            int32_t t = order[j];
            order[j] = order[j - 1];
            order[j - 1] = t;
        }
    int32_t k = sp->top_k > 0 && sp->top_k < V ? sp->top_k : V;
    double w[MAXV], sum = 0, acc = 0, kept = 0;
    for (int32_t i = 0; i < k; i++) sum += w[i] = exp(((double)l[order[i]] - l[order[0]]) / sp->temperature);
    memset(p, 0, (size_t)V * sizeof *p);
    for (int32_t i = 0; i < k && (i == 0 || acc < sp->top_p * sum); i++) {
        acc += w[i];
        if (w[i] >= sp->min_p) kept += p[order[i]] = w[i];
    }
    for (int32_t i = 0; i < V; i++) p[i] /= kept;
}

/* Pearson's chi-square of counts [V] (n draws) against p [V], cells under 5 expected pooled;
 * 1 when under the 1e-9 bound. A draw where p is 0 fails outright. */
static int chi2_fits(const int64_t *counts, const double *p, int32_t V, int64_t n, const char *what) {
    double x2 = 0, pool_e = 0, pool_o = 0;
    int df = -1;
    for (int32_t i = 0; i < V; i++) {
        double e = p[i] * (double)n;
        if (p[i] == 0 && counts[i]) {
            fprintf(stderr, "%s: token %d drawn %lld times, probability 0\n", what, i, (long long)counts[i]);
            return 0;
        }
        if (e < 5) { pool_e += e, pool_o += (double)counts[i]; continue; }
        x2 += ((double)counts[i] - e) * ((double)counts[i] - e) / e, df++;
    }
    if (pool_e > 0) x2 += (pool_o - pool_e) * (pool_o - pool_e) / (pool_e > 1e-9 ? pool_e : 1e-9), df++;
    if (df < 1) return 1; /* one cell: nothing to compare */
    int ok = df <= 9 && x2 < CHI2_1E9[df];
    if (!ok) fprintf(stderr, "%s: chi-square %.2f with %d degrees of freedom (bound %.2f)\n", what, x2, df, df <= 9 ? CHI2_1E9[df] : 0);
    return ok;
}

/* n verify-rule draws on logits l [V] with draft d: acceptance within 6 sigma of p(d), the
 * emitted token ~ p, the rejections ~ the residual. */
static int rule_fits(const float *l, int32_t V, const dsv41_sampler_params *sp, int32_t d, int64_t n) {
    double p[MAXV], res[MAXV], q_d = 1.0;
    filtered(l, V, sp, p);
    double rest = 0;
    for (int32_t i = 0; i < V; i++) rest += res[i] = fmax(0.0, p[i] - (i == d ? q_d : 0.0));
    for (int32_t i = 0; i < V; i++) res[i] = rest > 0 ? res[i] / rest : 0;
    dsv41_sampler *smp = dsv41_sampler_new(sp, V);
    int64_t out[MAXV] = {0}, rejected[MAXV] = {0}, accepted = 0;
    for (int64_t k = 0; k < n; k++) {
        float row[MAXV];
        memcpy(row, l, (size_t)V * sizeof *row);
        int32_t x = dsv41_sample_pick(smp, row, NULL, 0, NULL);
        if (x == d) accepted++;
        else rejected[x]++;
        out[x]++;
    }
    dsv41_sampler_free(smp);
    double sd = sqrt(p[d] * (1 - p[d]) / (double)n), rate = (double)accepted / (double)n;
    int ok = fabs(rate - p[d]) <= 6 * sd + 1e-12;
    if (!ok) fprintf(stderr, "acceptance %.4f, p(d) %.4f\n", rate, p[d]);
    return ok && chi2_fits(out, p, V, n, "emitted") && chi2_fits(rejected, res, V, n - accepted, "rejected");
}

int main(void) {
    /* the sampler level */
    const float l[6] = {0.3f, 2.0f, -1.2f, 1.1f, 1.5f, -0.4f};
    dsv41_sampler_params plain = {.temperature = 1.0f, .top_p = 1.0f, .seed = 11, .repeat_penalty = 1.0f};
    dsv41_sampler_params cut = {.temperature = 0.7f, .top_k = 4, .top_p = 0.9f, .min_p = 0.05f, .seed = 12, .repeat_penalty = 1.0f};
    double pc[6];
    filtered(l, 6, &cut, pc);
    CHECK(pc[2] == 0 && pc[5] == 0 && pc[1] > pc[4] && pc[4] > 0, "the reference's filters keep what the definition keeps");
    CHECK(rule_fits(l, 6, &plain, 4, 20000), "no filters, a likely draft: acceptance p(d), output p, rejections the residual");
    CHECK(rule_fits(l, 6, &plain, 2, 20000), "no filters, an unlikely draft");
    CHECK(rule_fits(l, 6, &cut, 3, 20000), "temperature, top-k, top-p, min-p: a kept draft");
    CHECK(rule_fits(l, 6, &cut, 5, 20000), "a draft the filters drop is never accepted, and the output is still p");

    /* end to end: the first token a verify emits, over many seeds */
    dsv41_model *m = model_from_config_file("models/tiny_dspark.json");
    CHECK(m && dsv41_model_vocab_size(m) <= MAXV, "the tiny DSpark model builds");
    if (!m || dsv41_model_vocab_size(m) > MAXV) return test_summary();
    int32_t V = dsv41_model_vocab_size(m), prompt[12], anchor;
    for (int32_t i = 0; i < 12; i++) prompt[i] = (i * 37 + 11) % V;
    dsv41_session *base = dsv41_session_new(m), *row = dsv41_session_new(m), *s = dsv41_session_new(m);
    float lg[MAXV], target[MAXV];
    dsv41_session_forward(base, prompt, 12, lg, NULL);
    anchor = 0;
    for (int32_t i = 1; i < V; i++) anchor = lg[i] > lg[anchor] ? i : anchor;
    dsv41_session_copy(row, base);
    dsv41_session_forward(row, &anchor, 1, target, NULL);
    dsv41_sampler_params sp = {.temperature = 1.0f, .top_k = 5, .top_p = 1.0f, .repeat_penalty = 1.0f};
    double p[MAXV];
    filtered(target, V, &sp, p);
    int32_t d = 0; /* the second most likely token: accepted and rejected often */
    for (int32_t i = 0, best = 0; i < V; i++) {
        if (p[i] > p[best]) d = best, best = i;
        else if (i != best && p[i] > p[d]) d = i;
    }
    int64_t counts[MAXV] = {0}, n = 1500, same = 0, kept = 0;
    for (int64_t k = 0; k < n; k++) {
        sp.seed = (uint64_t)k + 1;
        dsv41_sampler *a = dsv41_sampler_new(&sp, V), *b = dsv41_sampler_new(&sp, V);
        int32_t ids[2] = {anchor, d}, next = -1, hist_n;
        dsv41_session_copy(s, base);
        int32_t got = dsv41_session_verify(s, ids, 2, dsv41_sample_pick, a, &next);
        int32_t first = got == 1 ? d : next;
        memcpy(lg, target, sizeof lg);
        same += first == dsv41_sample_pick(b, lg, dsv41_session_tokens(row, &hist_n), hist_n, NULL);
        kept += got == 1;
        if (first >= 0 && first < V) counts[first]++;
        dsv41_sampler_free(a);
        dsv41_sampler_free(b);
    }
    CHECK(same == n, "per seed, the verify emits the token sequential sampling emits (%lld of %lld)", (long long)same, (long long)n);
    CHECK(kept > 0 && kept < n, "the draft is accepted %lld times of %lld", (long long)kept, (long long)n);
    CHECK(chi2_fits(counts, p, V, n, "first token"), "over 1500 seeds the first emitted token follows the target's filtered softmax");
    dsv41_session_free(base);
    dsv41_session_free(row);
    dsv41_session_free(s);
    dsv41_model_free(m);
    return test_summary();
}
