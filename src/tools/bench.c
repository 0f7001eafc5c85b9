/* bench.c - speed against the machine's own limits, measured in the same run.
 *
 * Decoding reads every active weight once per token, so its limit is the memory bandwidth
 * (a STREAM-like triad measured here) divided by the bytes one token reads; prefill multiplies
 * a chunk of tokens through each weight, so its limit is the FMA rate (a register-only FMA
 * loop measured here). Each figure is reported with its ratio to that limit. */
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#if defined(__x86_64__)
#include <immintrin.h>
#elif defined(__aarch64__)
#include <arm_neon.h>
#endif

#include "bench_spec.h"
#include "dist.h"
#include "kernels/kernels.h"
#include "machine.h"
#include "pool.h"

/* 12 independent FMA chains per thread, in the widest vectors the CPU has. The inner loops are
 * unrolled so the chains live in registers: through memory, a store-to-load round trip per FMA
 * would measure the store forwarding, not the FMA units. */
#define FMA_ITERS 20000000LL
#if defined(__x86_64__)
__attribute__((target("avx512f"))) static float fma_avx512(void) {
    __m512 acc[12], m = _mm512_set1_ps(0.999999f), a = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) acc[i] = _mm512_set1_ps((float)i);
    for (long long it = 0; it < FMA_ITERS; it++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) acc[i] = _mm512_fmadd_ps(acc[i], m, a);
    float s = 0;
    for (int i = 0; i < 12; i++) s += _mm512_reduce_add_ps(acc[i]);
    return s;
}

__attribute__((target("avx2,fma"))) static float fma_avx2(void) {
    __m256 acc[12], m = _mm256_set1_ps(0.999999f), a = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) acc[i] = _mm256_set1_ps((float)i);
    for (long long it = 0; it < FMA_ITERS; it++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) acc[i] = _mm256_fmadd_ps(acc[i], m, a);
    float out[8], s = 0;
    for (int i = 0; i < 12; i++) {
        _mm256_storeu_ps(out, acc[i]);
        for (int k = 0; k < 8; k++) s += out[k];
    }
    return s;
}
#elif defined(__aarch64__)
static float fma_neon(void) {
    float32x4_t acc[12], m = vdupq_n_f32(0.999999f), a = vdupq_n_f32(1e-7f);
    for (int i = 0; i < 12; i++) acc[i] = vdupq_n_f32((float)i);
    for (long long it = 0; it < FMA_ITERS; it++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) acc[i] = vfmaq_f32(a, acc[i], m);
    float s = 0;
    for (int i = 0; i < 12; i++) s += vaddvq_f32(acc[i]);
    return s;
}
#endif

#if !defined(__aarch64__)
static float fma_scalar(void) {
    float acc[12], s = 0;
    for (int i = 0; i < 12; i++) acc[i] = (float)i;
    for (long long it = 0; it < FMA_ITERS; it++)
#pragma GCC unroll 12
        for (int i = 0; i < 12; i++) acc[i] = fmaf(acc[i], 0.999999f, 1e-7f);
    for (int i = 0; i < 12; i++) s += acc[i];
    return s;
}
#endif

static int fma_lanes(void) {
#if defined(__x86_64__)
    if (__builtin_cpu_supports("avx512f")) return 16;
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return 8;
#elif defined(__aarch64__)
    return 4;
#endif
    return 1;
}

/* ctx: volatile float [items], where each item's result goes so that it is computed */
static void fma_range(void *ctx, int64_t b, int64_t e) {
    volatile float *sink = ctx;
    for (int64_t i = b; i < e; i++) {
#if defined(__x86_64__)
        int lanes = fma_lanes();
        sink[i] = lanes == 16 ? fma_avx512() : lanes == 8 ? fma_avx2() : fma_scalar();
#elif defined(__aarch64__)
        sink[i] = fma_neon();
#else
        sink[i] = fma_scalar();
#endif
    }
}

static double peak_gflops(void) {
    int32_t t = pool_threads();
    volatile float *sink = calloc((size_t)t, sizeof *sink);
    if (!sink) return 0.0;
    double t0 = machine_now_s();
    pool_run(t, 1, fma_range, (void *)sink);
    double dt = machine_now_s() - t0;
    free((void *)sink);
    return 2.0 * 12.0 * (double)fma_lanes() * (double)FMA_ITERS * t / dt / 1e9;
}

typedef struct {
    double tok_s, gflops;
} timing;

/* A decode being timed: `streams` sessions, each after `ctx` tokens of prefill (different
 * prompts), advanced a token each per step: one stream by dsv41_session_forward, more by one
 * dsv41_batch_forward; best is the fastest run's seconds per step. */
typedef struct {
    dsv41_session **s;   /* [streams] */
    int32_t *next;       /* [streams]: the token each one gets this step */
    const int32_t **ids; /* [streams]: &next[k] */
    int32_t *one;        /* [streams]: 1 */
    float *logits;       /* [streams, vocab] */
    float **lg;          /* [streams]: the rows of logits */
    int32_t streams, vocab, step;
    double best;
} decoder;

static void decoder_close(decoder *d) {
    for (int32_t k = 0; d->s && k < d->streams; k++) dsv41_session_free(d->s[k]);
    free(d->s);
    free(d->next);
    free(d->ids);
    free(d->one);
    free(d->logits);
    free(d->lg);
}

static int decoder_open(decoder *d, const dsv41_model *m, int32_t streams, int32_t ctx) {
    const int32_t V = m->cfg.vocab_size;
    *d = (decoder){.streams = streams, .vocab = V, .best = 1e30};
    d->s = calloc((size_t)streams, sizeof *d->s);
    d->next = malloc((size_t)streams * sizeof *d->next);
    d->ids = malloc((size_t)streams * sizeof *d->ids);
    d->one = malloc((size_t)streams * sizeof *d->one);
    d->logits = malloc((size_t)streams * V * sizeof *d->logits);
    d->lg = malloc((size_t)streams * sizeof *d->lg);
    int32_t *prompt = malloc((size_t)(ctx > 0 ? ctx : 1) * sizeof *prompt);
    int rc = d->s && d->next && d->ids && d->one && d->logits && d->lg && prompt ? 0 : set_error("bench: out of memory");
    for (int32_t k = 0; rc == 0 && k < streams; k++) {
        d->s[k] = dsv41_session_new(m);
        for (int32_t i = 0; i < ctx; i++) prompt[i] = (int32_t)((i * 7919 + 3 + k * 101) % V);
        rc = !d->s[k] || (ctx > 0 && dsv41_session_forward(d->s[k], prompt, ctx, NULL, NULL)) ? -1 : 0;
        d->ids[k] = &d->next[k];
        d->lg[k] = d->logits + (size_t)k * V;
        d->one[k] = 1;
    }
    free(prompt);
    if (rc) decoder_close(d);
    return rc;
}

/* One timed run of n steps. */
static int decoder_run(decoder *d, int32_t n) {
    double t0 = machine_now_s();
    for (int32_t i = 0; i < n; i++, d->step++) {
        for (int32_t k = 0; k < d->streams; k++) d->next[k] = (int32_t)((d->step * 104729 + 11 + k * 7) % d->vocab);
        int rc = d->streams == 1 ? dsv41_session_forward(d->s[0], d->next, 1, d->logits, NULL)
                                 : dsv41_batch_forward(d->s, d->ids, d->one, d->streams, d->lg);
        if (rc) return rc;
    }
    d->best = fmin(d->best, (machine_now_s() - t0) / n);
    return 0;
}

/* decode: `ctx` tokens of prefill, then n steps timed in 4 runs of n/4; the best run counts, as
 * the best triad pass does, so a moment of another tenant's traffic on a shared host does not
 * decide the figure. With parallel > 0 the runs of `parallel` sessions batched alternate with
 * the one session's, so that both meet the same host; par gets their tokens per second (all
 * the streams'). */
static timing time_decode(const dsv41_model *m, int32_t ctx, int32_t n, int32_t parallel, timing *par) {
    decoder one, many;
    timing r = {0, 0};
    if (decoder_open(&one, m, 1, ctx)) return r;
    if (parallel > 0 && decoder_open(&many, m, parallel, ctx)) {
        decoder_close(&one);
        return r;
    }
    int rc = 0;
    for (int run = 0; rc == 0 && run < 4; run++) {
        rc = decoder_run(&one, n / 4) || (parallel > 0 && decoder_run(&many, n / 4));
        progress_report(parallel > 0 ? "bench: decode runs, one stream and batched" : "bench: decode runs", run + 1, 4);
    }
    if (rc == 0) r.tok_s = 1.0 / one.best;
    if (parallel > 0) {
        if (rc == 0) par->tok_s = parallel / many.best;
        decoder_close(&many);
    }
    decoder_close(&one);
    return r;
}

static int64_t imax(int64_t a, int64_t b) { return a > b ? a : b; }

/* One linear over T rows, each call repeated so that from the second on its weights come from
 * cache: the best of 5, in seconds (0 for a matrix the model lacks). */
static double time_matrix(const weight *w, const float *x, int64_t T, float *y) {
    double best = 1e30;
    for (int run = 0; w->data && run < 5; run++) {
        double t0 = machine_now_s();
        linear(w, x, T, y);
        best = fmin(best, machine_now_s() - t0);
    }
    return w->data ? best : 0.0;
}

/* What the projections of one decode step of `streams` sessions cost with the memory traffic
 * taken out: every matrix the step multiplies (the dense ones of each layer, the shared and
 * the routed experts, the head) timed alone at the step's row count with its weights in cache
 * (time_matrix; only the head, larger than any cache, still streams). Batching pays where one
 * stream waits on memory; where its arithmetic alone already takes most of its step, the
 * arithmetic of `streams` rows sets the step's time instead, and this says how much of it there
 * is. A batch's routed experts are the picks of `streams` tokens spread as evenly as they go over
 * the E (1 - (1 - k/E)^streams) experts uniform routing reaches on average (35 of 64 for 8
 * streams of 6 picks). Seconds per step, or a negative value when out of memory. */
static double time_projections(const dsv41_model *m, int32_t streams) {
    const config *c = &m->cfg;
    int64_t cols = imax(m->head.rows, m->head.cols); /* the widest input or output of any matrix */
    for (int32_t l = 0; l < c->n_layers; l++) {
        const weight *dense[32];
        int n = layer_dense_weights(&m->layers[l], dense);
        for (int i = 0; i < n; i++) cols = imax(cols, imax(dense[i]->rows, dense[i]->cols));
        if (c->n_routed_experts > 0) cols = imax(cols, imax(m->layers[l].w2[0].rows, m->layers[l].w2[0].cols));
    }
    float *x = malloc((size_t)(streams * cols) * sizeof *x), *y = malloc((size_t)(streams * cols) * sizeof *y);
    if (!x || !y) {
        free(x);
        free(y);
        return -1.0;
    }
    for (int64_t i = 0; i < streams * cols; i++) x[i] = (float)((i * 7919) % 2001) / 1000.0f - 1.0f;
    int32_t E = c->n_routed_experts, k = c->n_activated_experts;
    int32_t reached = (int32_t)lround(E * (1.0 - pow(1.0 - (double)k / E, streams))); /* E >= k >= 1 (config) */
    int32_t picks = streams * k, used = reached < 1 ? 1 : reached > picks ? picks : reached;
    double t = time_matrix(&m->head, x, streams, y);
    for (int32_t l = 0; l < c->n_layers; l++) {
        const layer_weights *L = &m->layers[l];
        const weight *dense[32];
        int n = layer_dense_weights(L, dense);
        for (int i = 0; i < n; i++) t += time_matrix(dense[i], x, streams, y);
        for (int32_t e = 0; e < used; e++) {
            int64_t rows = picks / used + (e < picks % used); /* the expert's tokens */
            t += time_matrix(&L->w1[e], x, rows, y) + time_matrix(&L->w3[e], x, rows, y) + time_matrix(&L->w2[e], x, rows, y);
        }
    }
    free(x);
    free(y);
    return t;
}

/* prefill: n tokens into a fresh session, the best of 3 runs (as for decode) */
static timing time_prefill(const dsv41_model *m, int32_t n) {
    int32_t V = m->cfg.vocab_size, *ids = malloc((size_t)n * sizeof *ids);
    float *logits = malloc((size_t)V * sizeof *logits);
    for (int32_t i = 0; i < n; i++) ids[i] = (int32_t)((i * 7919 + 3) % V);
    timing r = {0, 0};
    for (int run = 0; run < 3; run++) {
        dsv41_session *s = dsv41_session_new(m);
        uint64_t macs0 = linear_macs();
        double t0 = machine_now_s();
        dsv41_session_forward(s, ids, n, logits, NULL);
        double dt = machine_now_s() - t0;
        if (n / dt > r.tok_s) r = (timing){n / dt, 2.0 * (double)(linear_macs() - macs0) / dt / 1e9};
        dsv41_session_free(s);
        progress_report("bench: prefill runs", run + 1, 3);
    }
    free(ids);
    free(logits);
    return r;
}

/* compressed KV and index keys per token of context (f32 in the caches), plus the n-gram id */
static double kv_bytes_per_token(const config *c) {
    double b = 8.0;
    for (int l = 0; l < c->n_layers; l++)
        if (c->is_kv_source[l]) b += 4.0 * (c->head_dim + c->index_head_dim) / c->compress_ratio[l];
    return b;
}

/* A model split across ranks: each rank's triad (all at once), peak memory, weights read and
 * bytes sent per decoded token (8 steps after a 16-token prefill). */
static int report_ranks(const dsv41_model *m, int json, FILE *out) {
    int32_t K = m->part.n_ranks, V = m->cfg.vocab_size, steps = 8, ids[16];
    rank_report *before = calloc((size_t)K, sizeof *before), *after = calloc((size_t)K, sizeof *after);
    float *logits = malloc((size_t)V * sizeof *logits);
    dsv41_session *s = dsv41_session_new(m);
    int rc = before && after && logits && s ? 0 : set_error("bench: out of memory");
    for (int32_t i = 0; i < 16; i++) ids[i] = (int32_t)((i * 7919 + 3) % V);
    if (rc == 0 && 16 + steps <= m->cfg.max_seq_len) {
        rc = dsv41_session_forward(s, ids, 16, logits, NULL);
        dist_report(m, 0, before);
        for (int32_t i = 0; rc == 0 && i < steps; i++) rc = dsv41_session_forward(s, &ids[i], 1, logits, NULL);
        dist_report(m, 1, after);
    }
    for (int32_t r = 0; rc == 0 && r < K; r++) {
        const rank_report *a = &after[r];
        double sent = (a->sent - before[r].sent) / steps;
        if (json)
            fprintf(out, "%s{\"rank\": %d, \"triad_gbps\": %.3f, \"weight_bytes_per_token\": %.0f, "
                         "\"sent_bytes_per_token\": %.0f, \"peak_rss_bytes\": %.0f}%s", r ? ", " : "\"ranks\": [", r,
                    a->triad_gbps, a->decode_bytes, sent, a->peak_rss, r == K - 1 ? "], " : "");
        else
            fprintf(out, "rank %2d: triad %.1f GB/s (all ranks at once), weights read per decoded token %.1f MB, "
                         "sent %.1f KB per token, peak resident memory %.0f MB\n", r, a->triad_gbps,
                    a->decode_bytes / 1e6, sent / 1e3, a->peak_rss / 1e6);
    }
    dsv41_session_free(s);
    free(logits);
    free(before);
    free(after);
    return rc;
}

int dsv41_bench(const dsv41_model *m, int32_t threads, int32_t parallel, int32_t draft, int json, FILE *out) {
    const config *c = &m->cfg;
    int32_t n_pre = 512 < c->max_seq_len ? 512 : c->max_seq_len / 2, n_dec = 128;
    int32_t ctxs[3] = {16, n_pre, 2 * n_pre};
    if (threads < 1) threads = pool_threads();
    double bytes = (double)model_decode_bytes(m);
    if (!json)
        fprintf(out, "kernels: %s; weights read per decoded token: %.1f MB; KV cache: %.0f bytes per token\n",
                kernels_current()->name, bytes / 1e6, kv_bytes_per_token(c));
    double triad = 0, peak = 0;
    timing dec = {0, 0}, pre = {0, 0}, par = {0, 0};
    double proj[2] = {0, 0}; /* the projections alone per step: one stream, `parallel` streams */
    spec_timing sp = {0, 0, 0, 0, 0};
    int32_t counts[2] = {1, threads};
    for (int pass = threads > 1 ? 0 : 1; pass < 2; pass++) {
        if (dsv41_set_threads(counts[pass])) return -1;
        /* the limits are measured before and after the runs and the higher reading counts: on a
         * shared host a neighbour can take a core or the memory bus for a while, and a low
         * limit would flatter the ratios */
        triad = machine_triad_gbps();
        peak = peak_gflops();
        pre = time_prefill(m, n_pre);
        timing d[3] = {{0, 0}, {0, 0}, {0, 0}};
        /* the batched decode beside the one-stream decode at the first context, at the last
         * thread count only */
        const int32_t batched = pass == 1 && ctxs[0] + n_dec <= c->max_seq_len ? parallel : 0;
        for (int k = 0; k < 3; k++)
            if (ctxs[k] + n_dec <= c->max_seq_len) d[k] = time_decode(m, ctxs[k], n_dec, k == 0 ? batched : 0, &par);
        dec = d[0];
        if (batched > 0) {
            if (par.tok_s <= 0) return -1;
            if (m->part.n_ranks == 1) { /* one process's arithmetic: a split model's is spread over its ranks */
                proj[0] = time_projections(m, 1);
                proj[1] = time_projections(m, parallel);
            }
            if (proj[0] < 0 || proj[1] < 0) return set_error("bench: out of memory");
        }
        if (pass == 1 && draft > 0 && bench_speculative(m, draft, &sp)) return -1;
        triad = fmax(triad, machine_triad_gbps());
        peak = fmax(peak, peak_gflops());
        if (json) continue;
        fprintf(out, "threads %d: triad %.1f GB/s, FMA peak %.1f GFLOP/s\n", counts[pass], triad, peak);
        fprintf(out, "  prefill %4d tokens: %8.1f tok/s  %7.1f GFLOP/s  (%.0f%% of peak)\n", n_pre, pre.tok_s,
                pre.gflops, 100.0 * pre.gflops / peak);
        for (int k = 0; k < 3; k++)
            if (d[k].tok_s > 0)
                fprintf(out, "  decode at %5d: %8.1f tok/s  %7.2f GB/s  (%.0f%% of triad)\n", ctxs[k], d[k].tok_s,
                        d[k].tok_s * bytes / 1e9, 100.0 * d[k].tok_s * bytes / 1e9 / triad);
        if (par.tok_s > 0)
            fprintf(out, "  decode at %5d, %d streams batched: %8.1f tok/s in all  (%.2fx one stream)\n", ctxs[0],
                    parallel, par.tok_s, par.tok_s / dec.tok_s);
        if (proj[1] > 0)
            fprintf(out, "  projections alone, weights in cache: %.2f ms a step for one stream, %.2f ms for %d  (%.2fx)\n",
                    1e3 * proj[0], 1e3 * proj[1], parallel, parallel * proj[0] / proj[1]);
        if (sp.row_s > 0)
            fprintf(out, "  speculative, %d drafts: verify of %d rows %.2fx one decode step, draft %.2fx; all accepted "
                         "%.1f tok/s (%.2fx); own drafter %.1f tok/s, %.0f%% of drafts kept\n", draft, draft + 1,
                    sp.verify_s / sp.row_s, sp.draft_s / sp.row_s, (draft + 1) / (sp.verify_s + sp.draft_s),
                    (draft + 1) * sp.row_s / (sp.verify_s + sp.draft_s), sp.own_tok_s, 100.0 * sp.own_accept);
        fflush(out);
    }
    double rss = machine_peak_rss();
    if (json) fprintf(out, "{");
    if (m->part.n_ranks > 1 && report_ranks(m, json, out)) return -1;
    if (json && par.tok_s > 0) {
        fprintf(out, "\"decode_parallel\": {\"streams\": %d, \"tokens_per_s\": %.3f, \"speedup\": %.4f", parallel,
                par.tok_s, par.tok_s / dec.tok_s);
        if (proj[1] > 0)
            fprintf(out, ", \"projections_alone_s\": [%.9f, %.9f], \"projections_alone_speedup\": %.4f", proj[0],
                    proj[1], parallel * proj[0] / proj[1]);
        fprintf(out, "}, ");
    }
    if (json && draft > 0)
        fprintf(out, "\"speculative\": {\"draft\": %d, \"verify_rows_cost\": %.4f, \"drafter_cost\": %.4f, "
                     "\"accept_all_tokens_per_s\": %.3f, \"speedup_accept_all\": %.4f, \"own_acceptance\": %.4f, "
                     "\"own_tokens_per_s\": %.3f, \"decode_step_s\": %.9f}, ", draft, sp.verify_s / sp.row_s,
                sp.draft_s / sp.row_s, (draft + 1) / (sp.verify_s + sp.draft_s),
                (draft + 1) * sp.row_s / (sp.verify_s + sp.draft_s), sp.own_accept, sp.own_tok_s, sp.row_s);
    if (json)
        fprintf(out,
                "\"decode\": {\"tokens_per_s\": %.3f, \"bytes_per_token\": %.0f, \"effective_gbps\": %.3f, "
                "\"triad_gbps\": %.3f, \"roofline_ratio\": %.4f}, \"prefill\": {\"tokens_per_s\": %.3f, "
                "\"gflops\": %.3f, \"peak_gflops\": %.3f, \"flops_ratio\": %.4f}, \"threads\": %d, "
                "\"kv_bytes_per_token\": %.0f, \"peak_rss_bytes\": %.0f}\n",
                dec.tok_s, bytes, dec.tok_s * bytes / 1e9, triad, dec.tok_s * bytes / 1e9 / triad, pre.tok_s,
                pre.gflops, peak, pre.gflops / peak, threads, kv_bytes_per_token(c), rss);
    else
        fprintf(out, "peak resident memory: %.0f MB\n", rss / 1e6);
    return 0;
}
