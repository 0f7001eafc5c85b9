/* dsv41_dev.h - the library's developer tools: traces of a forward's intermediates, golden
 * files and their capture-by-capture check, checkpoints written from a golden or a config
 * (convert, synth, skeleton), the benchmark and a model's description, and the assertions of
 * the library's invariants. The dsv41 program's tools use it; an embedding program needs only
 * dsv41.h. */
#ifndef DSV41_DEV_H
#define DSV41_DEV_H

#include <signal.h>
#include <stdio.h>

#include "dsv41.h"

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#ifdef __cplusplus
extern "C" {
#endif

typedef struct dsv41_golden dsv41_golden;

/* ---- models for development */
/* The model a golden file describes: its fixture config and weights_meta filler weights. */
dsv41_model *dsv41_model_from_golden(const dsv41_golden *g);
/* Prints the config, the layer roles, tensor counts and bytes per storage dtype, a loaded
 * checkpoint's tensor, shard and byte counts (and how many tensors the text pass leaves unread),
 * and the bytes of weights one decoded token reads. */
void dsv41_model_describe(const dsv41_model *m, FILE *out);

/* ---- traces */
dsv41_trace *dsv41_trace_new(void);
void dsv41_trace_free(dsv41_trace *t);
void dsv41_trace_clear(dsv41_trace *t);

/* ---- golden files (format: GOLDEN.md) */
dsv41_golden *dsv41_golden_load(const char *path);
void dsv41_golden_free(dsv41_golden *g);
/* Runs every regime of g in order on fresh sessions of m (one per batch row) and compares
 * every capture against the golden's bars. Writes one line per failing capture to report.
 * Returns 0 with the counts filled, or -1 when the golden is malformed or disagrees with m. */
int dsv41_golden_check(const dsv41_golden *g, const dsv41_model *m, FILE *report, int32_t *passed, int32_t *failed);
/* Writes the golden's fixture model as a checkpoint directory in the release layout. dtype
 * "bf16" keeps every value the filler's; "fp8" stores dense weights as e4m3 with 32x32 e8m0
 * scales and routed experts as packed e2m1 with per-32 e8m0 scales, as the release does. The
 * directory appears whole (written under a temporary name, synced, then renamed) or not at
 * all. Tensors are written one at a time, so memory stays near the largest tensor. cancel, when
 * not NULL, is polled between tensors (a signal handler may set it): once non-zero, the
 * temporary directory is removed and -1 returned with "convert: cancelled". */
int dsv41_convert_golden(const dsv41_golden *g, const char *dtype, const char *out_dir, const volatile sig_atomic_t *cancel);
/* Writes a checkpoint of any geometry with filler weights (the golden generator's naming rule)
 * in the release formats, as dsv41_convert_golden does. config_path is a fixture-shaped JSON
 * config such as models/tiny.json. */
int dsv41_synth(const char *config_path, const char *dtype, const char *out_dir, const volatile sig_atomic_t *cancel);
/* Writes the layout of the release checkpoint that config_path (a release config.json, served or
 * flat form, copied verbatim) describes: every tensor with its real name, dtype and shape, in
 * n_shards shards with the Engram tables last, and every data region a hole of a sparse file
 * (nothing is written there, so the weights read as zeros and take no disk). The Engram token
 * map is a placeholder. Written under a temporary name and renamed, like dsv41_synth. */
int dsv41_synth_skeleton(const char *config_path, int32_t n_shards, const char *out_dir);

/* ---- benchmark: decode and prefill speed against the machine's triad bandwidth and FMA peak,
 * measured in the same run, at 1 thread and at `threads` (<= 0: one per core). parallel > 0
 * also measures the decode of that many sessions batched by dsv41_batch_forward, at `threads`,
 * beside the one-session decode (tokens of all the streams per second, and the ratio). draft > 0
 * measures speculative decoding with blocks of that many drafts at `threads`: a verify of
 * draft+1 rows and a draft against one decode step, the tokens per second when every draft is
 * accepted (the bound a perfect drafter reaches, its drafting time included) and with the
 * model's own drafter (the share of its drafts kept). n_ctxs > 0 measures instead, at `threads`,
 * a prefill of each of the context lengths ctxs [n_ctxs] in one call, the decode after it and
 * the peak resident memory of each ("long_context" in the JSON). json != 0 prints one JSON
 * object instead of the table. */
int dsv41_bench(const dsv41_model *m, int32_t threads, int32_t parallel, int32_t draft, const int32_t *ctxs,
                int32_t n_ctxs, int json, FILE *out);

/* ---- assertions: an invariant the code relies on and no input can break (a lock held, the
 * thread that owns a structure, scratch marks restored in order). Checked unless NDEBUG is
 * defined, like assert(): in the default build, the tests and the sanitizer builds; a release
 * build that adds -DNDEBUG compiles them out. A failure prints the condition and its place and
 * aborts, since the program is already wrong. */
#if defined(__GNUC__)
__attribute__((noreturn))
#endif
void dsv41_assert_fail(const char *cond, const char *file, int line);
#ifdef NDEBUG
#define DSV41_ASSERT(cond) ((void)(0 && (cond))) /* never evaluated; its names stay used */
#else
#define DSV41_ASSERT(cond) ((cond) ? (void)0 : dsv41_assert_fail(#cond, __FILE__, __LINE__))
#endif

#ifdef __cplusplus
}
#endif

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
