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
#include "scratch.h"

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

/* The amx model (kernels.h): with kernels_amx_model in use, each call the tiles would take runs
 * once with its tile instructions only counted and once on the vector set for its results. A
 * stretch of dt seconds between the tallies a and b then models as dt less the vector set's time
 * plus the counted instructions at their measured costs, both spread evenly over the threads
 * (the pool splits each projection's rows among them). Elsewhere it is dt. */
typedef struct {
#if defined(__x86_64__)
    amx_tally t;
#endif
    int on; /* whether the model's set is in use */
} model_mark;

static model_mark model_begin(void) {
    model_mark k = {0};
#if defined(__x86_64__)
    k.on = kernels_current() == &kernels_amx_model;
    if (k.on) amx_tally_read(&k.t);
#endif
    return k;
}

static double model_seconds(const model_mark *k, double dt) {
#if defined(__x86_64__)
    if (k->on) {
        amx_tally now;
        amx_tally_read(&now);
        const double threads = pool_threads();
        return dt - 1e-9 * (double)(now.vector_ns - k->t.vector_ns) / threads + amx_tally_tile_seconds(&k->t, &now) / threads;
    }
#else
    (void)k;
#endif
    return dt;
}

typedef struct {
    const weight *w;
    const float *x;             /* [T][w cols] */
    int64_t T;
    float *y;                   /* [T][w rows] */
} matrix_call;

static void run_linear(void *ctx) {
    const matrix_call *c = ctx;
    linear(c->w, c->x, c->T, c->y);
}

/* One linear over T rows, each call repeated so that from the second on its weights come from
 * cache: the best of 5, in seconds (0 for a matrix the model lacks, -infinity when out of memory,
 * which makes any sum of them negative). */
static double time_matrix(const weight *w, const float *x, int64_t T, float *y) {
    double best = 1e30;
    for (int run = 0; w->data && run < 5; run++) {
        const model_mark mk = model_begin();
        double t0 = machine_now_s();
        if (scratch_run(run_linear, &(matrix_call){w, x, T, y})) return -INFINITY;
        best = fmin(best, model_seconds(&mk, machine_now_s() - t0));
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
    int32_t reached = (int32_t)lround(model_experts_reached(E, k, streams)); /* E >= k >= 1 (config) */
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

/* The quant kernels alone at the row counts that matter: a decode step (1), a batch of streams
 * or a verify block (8, 16) and a prefill chunk, each call repeated with its weights in cache
 * (time_matrix), for the largest fp8 matrix of the first layer and the first routed expert's up
 * projection (fp4). Each is weighed against the instruction-bound rate of the set's integer
 * products measured in the same run on every thread (int8_peak), counting one product (bytes,
 * or 16-bit integers for avx2's vpmaddwd) per weight and row: the ratio says how far a kernel is
 * from what its instruction alone could do, however many products per weight its exact sums
 * take (avx2's many-token kernels: 2 for fp8, 1 for fp4). */
enum { KT_COUNTS = 4 };

typedef struct {
    const char *type;          /* "fp8" or "fp4" */
    int64_t rows, cols;        /* the matrix's shape */
    int64_t T[KT_COUNTS];      /* the row counts timed */
    double secs[KT_COUNTS];    /* [count]: the best time of one call */
    double model[KT_COUNTS];   /* [count]: the amx model's time of one call (amx only, else 0) */
} kernel_timing;

/* Whether the set in use is amx, whose figures come with the model's beside them */
static int amx_in_use(void) {
#if defined(__x86_64__)
    return kernels_current() == &kernels_amx;
#else
    return 0;
#endif
}

/* With amx in use, t measured again under the model's set (amx's own again after) */
#if defined(__x86_64__)
#define WITH_MODEL(stmt)                    \
    do {                                    \
        kernels_use(&kernels_amx_model);    \
        stmt;                               \
        kernels_use(&kernels_amx);          \
    } while (0)
#else
#define WITH_MODEL(stmt) ((void)0)
#endif

/* ctx: double [threads], where each thread's rate goes */
static void int8_range(void *ctx, int64_t b, int64_t e) {
    double *rate = ctx;
    for (int64_t i = b; i < e; i++) rate[i] = kernels_int8_rate(kernels_current());
}

/* byte multiply-adds per second of all threads at once in the set's integer instruction; 0 for
 * a set without one */
static double int8_peak(void) {
    int32_t t = pool_threads();
    double *rate = calloc((size_t)t, sizeof *rate), sum = 0.0;
    if (!rate) return 0.0;
    pool_run(t, 1, int8_range, rate);
    for (int32_t i = 0; i < t; i++) sum += rate[i];
    free(rate);
    return sum;
}

/* Fills kt (up to 2) for the model's fp8 and fp4 matrices; returns how many, or -1 when out of
 * memory. */
static int time_kernels(const dsv41_model *m, int32_t n_pre, kernel_timing kt[2]) {
    const weight *pick[2] = {NULL, NULL};
    const weight *dense[32];
    int nd = m->cfg.n_layers > 0 ? layer_dense_weights(&m->layers[0], dense) : 0;
    for (int i = 0; i < nd; i++)
        if (dense[i]->type == DT_E4M3 && dense[i]->mode == AS_STORED &&
            (!pick[0] || dense[i]->rows * dense[i]->cols > pick[0]->rows * pick[0]->cols))
            pick[0] = dense[i];
    if (m->cfg.n_layers > 0 && m->cfg.n_routed_experts > 0 && m->layers[0].w1[0].type == DT_FP4 &&
        m->layers[0].w1[0].mode == AS_STORED)
        pick[1] = &m->layers[0].w1[0];
    int n = 0;
    for (int p = 0; p < 2; p++) {
        const weight *w = pick[p];
        if (!w || !w->data) continue;
        const int64_t T[KT_COUNTS] = {1, 8, 16, n_pre};
        float *x = malloc((size_t)(n_pre * w->cols) * sizeof *x), *y = malloc((size_t)(n_pre * w->rows) * sizeof *y);
        if (!x || !y) {
            free(x);
            free(y);
            return -1;
        }
        for (int64_t i = 0; i < n_pre * w->cols; i++) x[i] = (float)((i * 7919) % 2001) / 1000.0f - 1.0f;
        kt[n] = (kernel_timing){p ? "fp4" : "fp8", w->rows, w->cols, {0}, {0}, {0}};
        const int model = amx_in_use();
        for (int k = 0; k < KT_COUNTS; k++) {
            kt[n].T[k] = T[k];
            kt[n].secs[k] = time_matrix(w, x, T[k], y);
            if (model) WITH_MODEL(kt[n].model[k] = time_matrix(w, x, T[k], y));
        }
        free(x);
        free(y);
        n++;
    }
    return n;
}

static void print_kernels(const kernel_timing *kt, int n, double peak, int json, FILE *out) {
    const char *set = kernels_current()->name;
    if (json) {
        fprintf(out, "\"kernels\": {\"set\": \"%s\", \"int8_peak_macs\": %.6g, \"matrices\": [", set, peak);
        for (int i = 0; i < n; i++) {
            fprintf(out, "%s{\"type\": \"%s\", \"rows\": %lld, \"cols\": %lld", i ? ", " : "", kt[i].type,
                    (long long)kt[i].rows, (long long)kt[i].cols);
            const char *keys[5] = {"tokens", "seconds", "macs_per_s", "limit_ratio", "model_seconds"};
            for (int f = 0; f < (kt[i].model[0] > 0 ? 5 : 4); f++) {
                fprintf(out, ", \"%s\": [", keys[f]);
                for (int k = 0; k < KT_COUNTS; k++) {
                    double macs = (double)kt[i].T[k] * kt[i].rows * kt[i].cols / kt[i].secs[k];
                    double v = f == 0 ? (double)kt[i].T[k] : f == 1 ? kt[i].secs[k] : f == 2 ? macs : f == 4 ? kt[i].model[k]
                               : peak > 0 ? macs / peak : 0.0;
                    fprintf(out, "%s%.6g", k ? ", " : "", v);
                }
                fprintf(out, "]");
            }
            fprintf(out, "}");
        }
        fprintf(out, "]}, ");
        return;
    }
    if (peak > 0)
        fprintf(out, "  quant kernels (%s, weights in cache), against %s at %.1f G %s multiply-adds/s:\n", set,
                !strcmp(set, "amx") ? "tdpbusd" : !strcmp(set, "avx2") ? "vpmaddwd + vpaddd" : "vpdpbusd", peak / 1e9,
                !strcmp(set, "avx2") ? "16-bit" : "byte");
    else
        fprintf(out, "  quant kernels (%s, weights in cache; this set has no integer instruction to weigh them against):\n", set);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < KT_COUNTS; k++) {
            double macs = (double)kt[i].T[k] * kt[i].rows * kt[i].cols / kt[i].secs[k];
            fprintf(out, "    %s %5lldx%-5lld %4lld %s: %9.3f ms  %7.2f G MAC/s", kt[i].type, (long long)kt[i].rows,
                    (long long)kt[i].cols, (long long)kt[i].T[k], kt[i].T[k] == 1 ? "row " : "rows", 1e3 * kt[i].secs[k],
                    macs / 1e9);
            if (peak > 0) fprintf(out, "  %5.1f%% of the limit", 100.0 * macs / peak);
            fprintf(out, "  (%.2fx one row's time)", kt[i].secs[k] / kt[i].secs[0]);
            if (kt[i].model[k] > 0) fprintf(out, "  model %9.3f ms", 1e3 * kt[i].model[k]);
            fprintf(out, "\n");
        }
    if (n > 0 && kt[0].model[0] > 0)
        fprintf(out, "    (model: the tile instructions counted, at the costs AMX_NOTES.md measured on a Xeon core, "
                     "and the rest of the amx kernels timed here%s)\n",
                dsv41_kernels_emulated(set) ? "; the times beside it are the emulation's" : "");
}

/* prefill: n tokens into a fresh session, the best of 3 runs (as for decode) */
static timing time_prefill(const dsv41_model *m, int32_t n) {
    int32_t V = m->cfg.vocab_size, *ids = malloc((size_t)n * sizeof *ids);
    float *logits = malloc((size_t)V * sizeof *logits);
    timing r = {0, 0};
    for (int32_t i = 0; ids && i < n; i++) ids[i] = (int32_t)((i * 7919 + 3) % V);
    for (int run = 0; ids && logits && run < 3; run++) { /* out of memory: no figure (0) */
        dsv41_session *s = dsv41_session_new(m);
        if (!s) break;
        uint64_t macs0 = linear_macs();
        const model_mark mk = model_begin();
        double t0 = machine_now_s();
        dsv41_session_forward(s, ids, n, logits, NULL);
        double dt = model_seconds(&mk, machine_now_s() - t0);
        if (n / dt > r.tok_s) r = (timing){n / dt, 2.0 * (double)(linear_macs() - macs0) / dt / 1e9};
        dsv41_session_free(s);
        progress_report("bench: prefill runs", run + 1, 3);
    }
    free(ids);
    free(logits);
    return r;
}

static double kv_bytes_per_token(const config *c) { return cache_bytes_per_token(c, 0); }

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
        double sent = (a->sent - before[r].sent) / steps, gathers = (a->gathers - before[r].gathers) / steps;
        if (json)
            fprintf(out, "%s{\"rank\": %d, \"triad_gbps\": %.3f, \"weight_bytes_per_token\": %.0f, "
                         "\"sent_bytes_per_token\": %.0f, \"allgathers_per_token\": %.1f, \"allgather_s\": %.9f, "
                         "\"peak_rss_bytes\": %.0f}%s", r ? ", " : "\"ranks\": [", r, a->triad_gbps, a->decode_bytes,
                    sent, gathers, a->gather_s, a->peak_rss, r == K - 1 ? "], " : "");
        else
            fprintf(out, "rank %2d: triad %.1f GB/s (all ranks at once), weights read per decoded token %.1f MB, "
                         "sent %.1f KB in %.0f all-gathers per token (one of %d bf16 values: %.1f us), peak resident "
                         "memory %.0f MB\n", r, a->triad_gbps, a->decode_bytes / 1e6, sent / 1e3, gathers,
                    m->cfg.dim, 1e6 * a->gather_s, a->peak_rss / 1e6);
    }
    dsv41_session_free(s);
    free(logits);
    free(before);
    free(after);
    return rc;
}

/* Long contexts: for each of ctxs, a prefill of that many tokens in one call into a fresh
 * session, then decode steps after it timed in 4 runs (the best counts), and the peak resident
 * memory of the two. One pass each: a long prefill takes long enough that a neighbour's burst
 * on a shared host moves it little. */
static int bench_contexts(const dsv41_model *m, const int32_t *ctxs, int32_t n_ctxs, int json, FILE *out) {
    const int32_t V = m->cfg.vocab_size, n_dec = 32;
    for (int32_t i = 0; i < n_ctxs; i++)
        if (ctxs[i] < 1 || (int64_t)ctxs[i] + n_dec > m->cfg.max_seq_len)
            return set_error("bench: a context of %d tokens and %d decode steps after it do not fit the model's "
                             "max_seq_len of %d", ctxs[i], n_dec, m->cfg.max_seq_len);
    if (json) fprintf(out, "{\"long_context\": [");
    for (int32_t i = 0; i < n_ctxs; i++) {
        int32_t n = ctxs[i], *ids = malloc((size_t)n * sizeof *ids);
        float *logits = malloc((size_t)V * sizeof *logits);
        machine_peak_reset();
        dsv41_session *s = dsv41_session_new(m);
        int rc = ids && logits && s ? 0 : -1;
        for (int32_t k = 0; rc == 0 && k < n; k++) ids[k] = (int32_t)(((int64_t)k * 7919 + 3) % V);
        double t0 = machine_now_s();
        if (rc == 0) rc = dsv41_session_forward(s, ids, n, logits, NULL);
        double prefill = machine_now_s() - t0, best = 1e30;
        for (int run = 0; rc == 0 && run < 4; run++) {
            double t1 = machine_now_s();
            for (int32_t k = 0; rc == 0 && k < n_dec / 4; k++) {
                int32_t next = (int32_t)((int64_t)(run * n_dec + k) * 104729 % V);
                rc = dsv41_session_forward(s, &next, 1, logits, NULL);
            }
            best = fmin(best, (machine_now_s() - t1) / (n_dec / 4));
        }
        double peak = machine_peak_rss();
        dsv41_session_free(s);
        free(ids);
        free(logits);
        if (rc) return ids && logits && s ? -1 : set_error("bench: out of memory");
        progress_report("bench: contexts", i + 1, n_ctxs);
        if (json)
            fprintf(out, "%s{\"ctx\": %d, \"prefill_tokens_per_s\": %.3f, \"decode_tokens_per_s\": %.3f, "
                    "\"peak_rss_mb\": %.1f}", i ? ", " : "", n, n / prefill, 1.0 / best, peak / 1e6);
        else
            fprintf(out, "  context %7d: prefill %8.1f tok/s  decode after it %7.1f tok/s  peak resident memory %.0f MB\n",
                    n, n / prefill, 1.0 / best, peak / 1e6);
        fflush(out);
    }
    if (json) fprintf(out, "], ");
    return 0;
}

int dsv41_bench(const dsv41_model *m, int32_t threads, int32_t parallel, int32_t draft, const int32_t *long_ctx,
                int32_t n_long, int json, FILE *out) {
    const config *c = &m->cfg;
    int32_t n_pre = 512 < c->max_seq_len ? 512 : c->max_seq_len / 2, n_dec = 128;
    int32_t ctxs[3] = {16, n_pre, 2 * n_pre};
    if (threads < 1) threads = pool_threads();
    double bytes = (double)model_decode_bytes(m);
    if (!json)
        fprintf(out, "kernels: %s; weights read per decoded token: %.1f MB; KV cache: %.0f bytes per token\n",
                kernels_current()->name, bytes / 1e6, kv_bytes_per_token(c));
    if (n_long > 0) { /* the long contexts alone, at `threads` */
        if (dsv41_set_threads(threads)) return -1;
        if (!json) fprintf(out, "threads %d:\n", threads);
        if (bench_contexts(m, long_ctx, n_long, json, out)) return -1;
        if (json) fprintf(out, "\"threads\": %d, \"kv_bytes_per_token\": %.0f}\n", threads, kv_bytes_per_token(c));
        return 0;
    }
    double triad = 0, peak = 0;
    timing dec = {0, 0}, pre = {0, 0}, par = {0, 0}, pre_model = {0, 0}; /* pre_model: amx only */
    double proj[2] = {0, 0}; /* the projections alone per step: one stream, `parallel` streams */
    kernel_timing kt[2];
    int nkt = 0;
    double int8 = 0;
    spec_timing sp = {0, 0, 0, 0, 0, 0, 0, 0};
    int32_t counts[2] = {1, threads};
    for (int pass = threads > 1 ? 0 : 1; pass < 2; pass++) {
        if (dsv41_set_threads(counts[pass])) return -1;
        /* the limits are measured before and after the runs and the higher reading counts: on a
         * shared host a neighbour can take a core or the memory bus for a while, and a low
         * limit would flatter the ratios */
        triad = machine_triad_gbps();
        peak = peak_gflops();
        pre = time_prefill(m, n_pre);
        if (amx_in_use()) WITH_MODEL(pre_model = time_prefill(m, n_pre));
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
        if (pass == 1) { /* the kernels alone, between two readings of their limit */
            int8 = int8_peak();
            if ((nkt = time_kernels(m, n_pre, kt)) < 0) return set_error("bench: out of memory");
            int8 = fmax(int8, int8_peak());
        }
        if (pass == 1 && draft > 0 && bench_speculative(m, draft, &sp)) return -1;
        triad = fmax(triad, machine_triad_gbps());
        peak = fmax(peak, peak_gflops());
        if (json) continue;
        fprintf(out, "threads %d: triad %.1f GB/s, FMA peak %.1f GFLOP/s\n", counts[pass], triad, peak);
        fprintf(out, "  prefill %4d tokens: %8.1f tok/s  %7.1f GFLOP/s  (%.0f%% of peak)%s\n", n_pre, pre.tok_s,
                pre.gflops, 100.0 * pre.gflops / peak,
                pre_model.tok_s > 0 && dsv41_kernels_emulated(kernels_current()->name) ? "  on the emulated tiles" : "");
        if (pre_model.tok_s > 0)
            fprintf(out, "  prefill %4d tokens, amx model: %8.1f tok/s  %7.1f GFLOP/s  (%.0f%% of peak; the tile "
                         "instructions at AMX_NOTES.md's Xeon costs, the rest timed here)\n",
                    n_pre, pre_model.tok_s, pre_model.gflops, 100.0 * pre_model.gflops / peak);
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
        if (pass == 1) print_kernels(kt, nkt, int8, 0, out);
        if (sp.row_s > 0)
            fprintf(out, "  speculative, %d drafts: verify of %d rows %.2fx one decode step, draft %.2fx; all accepted "
                         "%.1f tok/s (%.2fx); own drafter %.1f tok/s, %.0f%% of drafts kept, %.1f tok/s with its "
                         "confidence cut and pauses (plain decoding %.1f); by weight bytes, all accepted could reach "
                         "%.2fx\n", draft, draft + 1,
                    sp.verify_s / sp.row_s, sp.draft_s / sp.row_s, (draft + 1) / (sp.verify_s + sp.draft_s),
                    (draft + 1) * sp.row_s / (sp.verify_s + sp.draft_s), sp.own_tok_s, 100.0 * sp.own_accept, sp.policy_tok_s,
                    1.0 / sp.row_s, (draft + 1) * bytes / (sp.verify_bytes + sp.draft_bytes));
        fflush(out);
    }
    double rss = machine_peak_rss();
    if (json) fprintf(out, "{");
    if (m->part.n_ranks > 1 && report_ranks(m, json, out)) return -1;
    if (json) print_kernels(kt, nkt, int8, 1, out);
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
                     "\"own_tokens_per_s\": %.3f, \"own_policy_tokens_per_s\": %.3f, \"decode_step_s\": %.9f, "
                     "\"verify_bytes\": %.0f, \"draft_bytes\": %.0f, \"bytes_bound_speedup\": %.4f}, ", draft,
                sp.verify_s / sp.row_s, sp.draft_s / sp.row_s, (draft + 1) / (sp.verify_s + sp.draft_s),
                (draft + 1) * sp.row_s / (sp.verify_s + sp.draft_s), sp.own_accept, sp.own_tok_s, sp.policy_tok_s, sp.row_s,
                sp.verify_bytes, sp.draft_bytes, (draft + 1) * bytes / (sp.verify_bytes + sp.draft_bytes));
    if (json)
        fprintf(out,
                "\"decode\": {\"tokens_per_s\": %.3f, \"bytes_per_token\": %.0f, \"effective_gbps\": %.3f, "
                "\"triad_gbps\": %.3f, \"roofline_ratio\": %.4f}, \"prefill\": {\"tokens_per_s\": %.3f, "
                "\"gflops\": %.3f, \"peak_gflops\": %.3f, \"flops_ratio\": %.4f, \"model_tokens_per_s\": %.3f, "
                "\"model_flops_ratio\": %.4f}, \"threads\": %d, "
                "\"kv_bytes_per_token\": %.0f, \"peak_rss_bytes\": %.0f}\n",
                dec.tok_s, bytes, dec.tok_s * bytes / 1e9, triad, dec.tok_s * bytes / 1e9 / triad, pre.tok_s,
                pre.gflops, peak, pre.gflops / peak, pre_model.tok_s, pre_model.gflops / peak, threads, kv_bytes_per_token(c), rss);
    else
        fprintf(out, "peak resident memory: %.0f MB\n", rss / 1e6);
    return 0;
}
