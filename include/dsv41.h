/* dsv41.h - the DeepSeek-V4.1 inference library: the one header a program that embeds it
 * includes. The developer tools (traces, goldens, convert, synth, bench, describe) are declared
 * in dsv41_dev.h and the transport of a model split across ranks in dsv41_dist.h; the same
 * library defines all three.
 *
 * A model holds a config and its weights; a session is one sequence's state (caches, rings,
 * the shared slots) and advances by forward calls: a prefill of n >= 1 tokens at position 0,
 * then one token per decode call. Every function that can fail returns NULL or a negative
 * value and leaves a one-line message in dsv41_error().
 *
 * Memory. An allocation that fails anywhere in the library is such a failure, never an abort:
 * dsv41_error() says "out of memory: N bytes for ..." (or names what could not be grown). A
 * call that fails so before it changes anything (growing a session's caches, a verify's
 * journal) leaves its sessions as they were. One that runs out of memory while it computes (a
 * forward, forward_all or batch, a draft, verify or speculate) may have half written the
 * caches, so it empties every session it ran: position 0, no logits, as dsv41_session_reset
 * leaves it (the way a cancelled prefill does); feed it again to go on. A trace passed to a
 * failed call holds what was recorded before the failure. On a model split over ranks the
 * job ends instead, through the transport's fail (the other ranks are inside the call).
 *
 * Threads. Loaded models, tokenizers and goldens are read-only: any number of threads may use
 * one at once. A session, sampler, trace or UTF-8 stream belongs to one thread at a time; two
 * threads may run forward calls on two sessions of one model at the same time and each gets
 * exactly the results it would get alone. A model is freed only after its sessions. The worker
 * threads serve one forward call at a time; a call that finds them busy runs on its caller's
 * thread alone (same results: they never depend on the thread count). dsv41_set_threads and
 * dsv41_error may be called from any thread at any time; the error is the calling thread's. */
#ifndef DSV41_H
#define DSV41_H

#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

/* The library's version; dsv41_version() is the one the program linked against. */
#define DSV41_VERSION "0.1.0"

#ifdef __cplusplus
extern "C" {
#endif

/* The library is built with hidden visibility; what this header declares is its interface. */
#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

typedef struct dsv41_model dsv41_model;
typedef struct dsv41_session dsv41_session;
typedef struct dsv41_trace dsv41_trace;

/* The last error of this thread, one line without a newline. */
const char *dsv41_error(void);

/* DSV41_VERSION of the library in use. */
const char *dsv41_version(void);
/* Long calls of this thread (dsv41_synth, dsv41_convert_golden, dsv41_model_load, each phase
 * of dsv41_bench) report through fn: what is being done, and done of total units (total > 0;
 * done == total ends the phase). NULL turns it off. The setting is the calling thread's own. */
typedef void (*dsv41_progress_fn)(void *ctx, const char *what, int64_t done, int64_t total);
void dsv41_set_progress(dsv41_progress_fn fn, void *ctx);

/* Worker threads for the kernels (default: one per online core), for every later call of any
 * thread. Results do not depend on it. */
int dsv41_set_threads(int32_t n);

/* The kernel set the projections run on: "scalar", "avx2", "avx512", "neon" or "amx" (x86-64: AMX
 * tiles, emulated where the CPU has none). NULL or "" takes $DSV41_KERNELS when it is set and not
 * empty, else the default: the fastest vector set (amx, which runs the tiles only for the calls
 * of many tokens and that set's kernels for the rest, is taken by name only).
 * Without a call, the first projection takes what a call with NULL would (an unknown
 * $DSV41_KERNELS then gives the fastest). Returns 0, or -1 with dsv41_error() for a set that is
 * unknown or that this CPU cannot run. Results do not depend on it: every set computes the same
 * bits. */
int dsv41_set_kernels(const char *name);
/* The name of the kernel set in use. */
const char *dsv41_kernels(void);
/* The sets this CPU runs, scalar first, then the vector sets from slowest to fastest, then amx
 * (x86-64 with AVX2): writes up to cap names (static strings) to names and returns how many there are. */
int32_t dsv41_kernel_sets(const char **names, int32_t cap);
/* 1 when the named set runs here on an emulation of its instructions (amx where the CPU has no
 * AMX tiles or Linux refuses them: exact, and slow), else 0. */
int dsv41_kernels_emulated(const char *name);

/* ---- models */
/* The built-in tiny model: the golden fixture's geometry with filler weights (no files). */
dsv41_model *dsv41_model_builtin(void);
/* A checkpoint directory in the release layout: config.json, model.safetensors.index.json and
 * its shards (or one model.safetensors), engram_token_map.json when the model has Engram
 * layers. Tensors are memory-mapped and used in place. */
dsv41_model *dsv41_model_load(const char *dir);
void dsv41_model_free(dsv41_model *m);
int32_t dsv41_model_vocab_size(const dsv41_model *m);
int32_t dsv41_model_max_seq_len(const dsv41_model *m);

/* ---- sessions */
dsv41_session *dsv41_session_new(const dsv41_model *m);
void dsv41_session_free(dsv41_session *s);
int32_t dsv41_session_pos(const dsv41_session *s);
/* Feed n >= 1 token ids at the session's position: a prefill at position 0, or an append later
 * (a new turn), which gives exactly what feeding the tokens one by one would. logits, when not
 * NULL, receives the f32 logits [vocab_size] of the last token. trace, when not NULL, records
 * every intermediate the golden names (of the last call for an append). Returns 0, or -1 on bad
 * input or when the context would overflow. */
int dsv41_session_forward(dsv41_session *s, const int32_t *ids, int32_t n, float *logits, dsv41_trace *trace);
/* The same, with the logits of every fed token: logits [n][vocab_size]. */
int dsv41_session_forward_all(dsv41_session *s, const int32_t *ids, int32_t n, float *logits);
/* Several sessions of one model advanced by one call: session s[i] is fed its n[i] tokens ids[i]
 * (a prefill of any n[i] >= 1 at position 0, else exactly one token), and logits[i], when
 * logits and logits[i] are not NULL, receives the f32 logits [vocab_size] of its last token. Every
 * projection runs once over all the call's tokens and the MoE takes each expert once for every
 * token routed to it, so a step of many sessions reads the weights about once; attention runs
 * per session on its own caches. Each session ends with exactly the state and logits that
 * dsv41_session_forward of the same tokens would give it alone. The sessions must be distinct.
 * A batch of several sessions runs whole (dsv41_session_cancel does not stop it), and on a model
 * split over ranks the sessions run one after another. Returns 0, or -1 with no session changed
 * when an input is wrong. */
int dsv41_batch_forward(dsv41_session *const *s, const int32_t *const *ids, const int32_t *n, int32_t count,
                        float *const *logits);
/* The ids the session was fed, oldest first; *n gets dsv41_session_pos(s). Valid until the next
 * call that changes s. */
const int32_t *dsv41_session_tokens(const dsv41_session *s, int32_t *n);
/* The logits [vocab_size] of the last token fed, when the call that fed it computed them (asked
 * for logits or a trace); else NULL. Valid until the next call that changes s. */
const float *dsv41_session_logits(const dsv41_session *s);
/* Empties s to position 0, as dsv41_session_new leaves a session. */
int dsv41_session_reset(dsv41_session *s);
/* Makes dst (a session of src's model) an exact copy of src: every cache, the ids and the last
 * logits, so that both continue alike. Costs what src's position uses, not the full context. */
int dsv41_session_copy(dsv41_session *dst, const dsv41_session *src);

/* The model's DSpark drafter (the release's mtp.N stages): the most drafts a speculative round
 * proposes, the drafts of one block (fewer when the window is shorter: a verify's rows fit in one
 * window), 0 when the model has none. */
int32_t dsv41_model_draft_size(const dsv41_model *m);
/* The block the drafter proposes after s's last token, as the release's forward_spec computes it
 * at temperature 0: anchor is the token picked from s's last logits (not fed yet); ids [n] get
 * the first n (1 to the block) greedy drafts for the positions after it, logits [n][vocab] (or
 * NULL) the drafter's logits of each and confidence [n] (or NULL) its confidence logits. Needs
 * a session that fed at least one token after its prefill. s is not advanced. */
int dsv41_session_draft(dsv41_session *s, int32_t anchor, int32_t n, int32_t *ids, float *logits, float *confidence);
/* How speculative decoding picks the token after a row: logits [vocab_size] are the row's (a
 * copy the function may change, e.g. by penalties), history [n] the ids fed up to and including
 * the row (prompt and output, oldest first). Returns the token, or -1 to fail the call. Setting
 * *last (0 on entry) ends the block at this token: it is returned as the next token and not fed,
 * even when it equals the next draft (a reply that ends at it). dsv41_sample_pick is the pick
 * of a sampler; NULL is greedy (the row's argmax, no penalties). */
typedef int32_t (*dsv41_pick_fn)(void *ctx, float *logits, const int32_t *history, int32_t n, int *last);
/* Speculative decoding's verify: feeds ids[0] (the token picked from s's last logits) and the
 * drafts ids[1..n-1] as n rows of one forward, picks the token after each row in order, keeps
 * each draft that equals the pick before it (up to the first that does not) and returns how
 * many drafts that is; *next (when not NULL) gets the pick after the last kept row. Picks are
 * made exactly as token-by-token decoding makes them, on bit-identical logits, so the kept
 * drafts and next are the tokens it would emit (with a sampler: the same seed gives the same
 * tokens; a sampler's draw accepting a greedy draft is speculative sampling's rule, see spec.c).
 * s is then exactly as if the kept tokens had been fed one at a time, its logits those of the
 * last kept one. n is at most the model's window; -1 when the call cannot verify (too close to
 * the start of the sequence, past the context: decode one token then), or when pick fails (s
 * then holds the rows before the failing pick: dsv41_session_pos). */
int32_t dsv41_session_verify(dsv41_session *s, const int32_t *ids, int32_t n, dsv41_pick_fn pick, void *ctx, int32_t *next);
/* The verifies of several sessions of one model in one forward, as dsv41_batch_forward batches
 * decode steps: session s[i] feeds ids[i] [n[i]] (its picked token, then n[i] - 1 drafts; n[i]
 * 1 is a decode step) and gets what dsv41_session_verify would give it alone: kept[i] drafts
 * kept and next[i] (next not NULL) the pick after them, made by pick with ctx[i] (ctx NULL: NULL
 * for all). A
 * session whose block cannot be verified yet (too close to the start) feeds ids[i][0] alone.
 * The sessions must be distinct. Returns 0, or -1 with no session changed when an input is
 * wrong, or after a failing pick (that session then holds the rows before it; the others are
 * complete). */
int dsv41_batch_verify(dsv41_session *const *s, const int32_t *const *ids, const int32_t *n, int32_t count, dsv41_pick_fn pick,
                       void *const *ctx, int32_t *kept, int32_t *next);
/* Which drafts speculative decoding verifies, and when it drafts at all: the state of one stream
 * (a reply), begun by dsv41_draft_policy_default (or zero state and a p_min). Neither rule
 * changes a token, since the picks decide and drafts only save forwards:
 * - the confident prefix: a draft's confidence logit c estimates the chance that it is kept when
 *   the drafts before it are, so a block verifies only the drafts before the first whose
 *   sigmoid(c) is under p_min (the choice of draft j reads c_1..c_j only: DSpark's lossless rule);
 * - a pause: when fewer than 6 of the latest 10 drafts proposed were kept (a drafter that does
 *   not fit the text, a high temperature), the next 64 tokens are decoded plain, without the
 *   drafter's cost, and the count starts again. */
typedef struct {
    float p_min;        /* the confidence a draft needs to be verified, 0 to 1 (0: every draft) */
    int32_t pause;      /* plain tokens still to decode before the next block */
    int32_t n_proposed; /* drafts proposed since the last pause, counted up to 10 */
    uint32_t kept;      /* bit i: whether the i-th latest of them was kept */
} dsv41_draft_policy;
/* p_min 0.5 (the DSpark engines' default), no pause, nothing counted. */
dsv41_draft_policy dsv41_draft_policy_default(void);
/* How many of n drafts to verify: those before the first whose confidence [n] (the logits of
 * dsv41_session_draft) has a sigmoid under p->p_min (a NaN counts as under). */
int32_t dsv41_draft_policy_cut(const dsv41_draft_policy *p, const float *confidence, int32_t n);
/* Records a round into p: proposed drafts drafted (0: a plain step, which counts a pause down)
 * and kept of them kept; starts a pause where the latest 10 keep fewer than 6. */
void dsv41_draft_policy_record(dsv41_draft_policy *p, int32_t proposed, int32_t kept);
/* The drafting half of a speculative round, for a caller that verifies it itself (the server
 * verifies many sessions' rounds in one dsv41_batch_verify): ids [n_draft + 1] get anchor, the
 * token picked from s's last logits (not fed yet), then the drafts the drafter proposes after
 * it, up to n_draft (the caller's room: tokens still wanted, context; at most the block).
 * Returns the rows to verify, ids[0..rows): the anchor and the confident prefix of the drafts
 * (1: none), or -1 (n_draft negative, anchor outside the vocabulary, or a draft that failed
 * and emptied s). *proposed (when not NULL) gets how many drafts the drafter proposed, what
 * dsv41_draft_policy_record takes with the kept count once the round is verified. policy
 * (NULL: every draft, never a pause) cuts the block at its confident prefix and pauses it; it
 * is read, not changed. Where no block can be drafted (the step after a prefill, the end of the
 * context, no drafter, n_draft 0, a pause) it is 1 row and 0 proposed. s is not advanced. */
int32_t dsv41_session_propose(dsv41_session *s, int32_t anchor, int32_t n_draft, const dsv41_draft_policy *policy, int32_t *ids,
                              int32_t *proposed);
/* One round of speculative decoding: anchor is the token picked from s's last logits (not fed
 * yet); the drafter proposes up to n_draft tokens (at most its block), one verify keeps those
 * decoding would feed, and out [n_draft + 1] gets the tokens decoding picks next: the kept
 * drafts, then the pick after them (the next anchor, not fed). Returns their count, or -1;
 * *drafted (when not NULL) gets how many drafts the verify checked. policy (NULL: every draft,
 * never a pause) cuts the block at its confident prefix, pauses the drafting and records the
 * round. Where no block can be drafted or verified (the step after a prefill, the end of the
 * context, no drafter, n_draft 0, a pause, no confident draft) it is one plain step: the anchor
 * fed, one token picked, no draft verified. */
int32_t dsv41_session_speculate(dsv41_session *s, int32_t anchor, int32_t n_draft, dsv41_draft_policy *policy, dsv41_pick_fn pick,
                                void *ctx, int32_t *out, int32_t *drafted);
/* Writes s to path as one self-checking file: a magic and format version, the identity of the
 * model (its config and a checksum of its weights), the ids, every piece of state and a checksum
 * of the whole. The file appears whole or not at all (written under a temporary name, synced,
 * renamed), so a crash mid-save leaves an earlier file at path intact. */
int dsv41_session_save(const dsv41_session *s, const char *path);
/* Reads a file dsv41_session_save wrote into s. Every part is verified first (format, model
 * identity, sizes, checksum); on any mismatch it returns -1 with a one-line message and s is
 * left as it was. */
int dsv41_session_load(dsv41_session *s, const char *path);
/* The same with n bytes of the caller's own data stored in the file (covered by its checksum),
 * and read back into *data (malloc'd, NULL when n is 0; the caller frees it) and *n. A program
 * that keeps state beside the session (a chat's sampler) saves both in one file that appears
 * whole or not at all. load_data with data NULL ignores the stored bytes. */
int dsv41_session_save_data(const dsv41_session *s, const char *path, const void *data, size_t n);
int dsv41_session_load_data(dsv41_session *s, const char *path, void **data, size_t *n);
/* Calls fn after each layer of every forward call (a progress line for long prefills) until it
 * is set again; NULL turns it off. */
void dsv41_session_set_progress(dsv41_session *s, void (*fn)(void *ctx, int32_t done, int32_t total), void *ctx);
/* Asks the forward call running on s to stop; safe from any thread and from a signal handler.
 * A prefill stops between layers and leaves the session empty (position 0); an append stops
 * between tokens and keeps the tokens fed so far (dsv41_session_pos). The stopped call returns
 * -1 with dsv41_error() "forward: cancelled". A request made while no call runs has no
 * effect, and neither has one on a model split over ranks (its ranks run every call in step). */
void dsv41_session_cancel(dsv41_session *s);
/* A prefill longer than `rows` (default 512) goes through each layer that many rows at a time
 * (rounded down to a multiple of the compress ratios), so that beyond the weights and the
 * caches it holds only its residual stream and a working set of `rows` rows. The results are
 * the same bit for bit at any setting; fewer rows take less memory and, below a few hundred,
 * more time. 0, or -1 for rows < 1. */
int dsv41_session_set_prefill_rows(dsv41_session *s, int32_t rows);

/* ---- sampling */
typedef struct {
    float temperature;  /* 0: greedy */
    int32_t top_k;      /* 0: off */
    float top_p;        /* 1: off */
    float min_p;        /* 0: off */
    uint64_t seed;      /* the same seed, logits and parameters give the same tokens */
    /* penalties on tokens of the recent history, applied by dsv41_apply_penalties */
    float repeat_penalty;    /* 1 (or 0): off; a seen token's positive logit is divided by it, a negative one multiplied */
    float presence_penalty;  /* 0: off; subtracted once from a seen token's logit */
    float frequency_penalty; /* 0: off; subtracted once per occurrence */
    int32_t penalty_last_n;  /* how many of the latest tokens count (0: none) */
} dsv41_sampler_params;
/* Temperature 0.6, top-p 0.95, no top-k or min-p, seed 0, penalties off over the last 64. */
dsv41_sampler_params dsv41_sampler_params_default(void);
typedef struct dsv41_sampler dsv41_sampler;
dsv41_sampler *dsv41_sampler_new(const dsv41_sampler_params *p, int32_t vocab_size);
void dsv41_sampler_free(dsv41_sampler *s);
int32_t dsv41_sample(dsv41_sampler *s, const float *logits);
/* A dsv41_pick_fn for speculative decoding with sampler (a dsv41_sampler *): applies its
 * parameters' penalties for history, then dsv41_sample. */
int32_t dsv41_sample_pick(void *sampler, float *logits, const int32_t *history, int32_t n, int *last);
/* The sampler's random stream position, and setting it back: a saved conversation restores it
 * so that its next draws are the ones the original would make. */
uint64_t dsv41_sampler_state(const dsv41_sampler *s);
void dsv41_sampler_set_state(dsv41_sampler *s, uint64_t state);
/* Applies p's penalties to logits [vocab_size] in place, for the tokens among the last
 * p->penalty_last_n of history [n] (prompt and generated ids, oldest first); call it before
 * dsv41_sample. Returns 0, or -1 for an id outside the vocabulary or out of memory. */
int dsv41_apply_penalties(const dsv41_sampler_params *p, const int32_t *history, int32_t n, float *logits, int32_t vocab_size);
/* The natural log of token id's probability under the softmax of logits [vocab_size] (the
 * model's distribution, before temperature or penalties); -INFINITY for an id outside. */
float dsv41_logprob(const float *logits, int32_t vocab_size, int32_t id);

/* ---- stop strings: a reply ends before the earliest occurrence of any of them */
/* For text [len], a reply that has grown a piece at a time: the offset of the earliest
 * occurrence of any of stops [n] (NULL and empty strings never match), or -1 when there is
 * none. prev is the text's length when it was last searched (0 the first time): the text before
 * it held no occurrence, so only occurrences that end after it are looked for. *held (when not
 * NULL) gets how many trailing bytes could still begin a stop string (0 once one occurred): a
 * stream sends text[0, len - held) and holds the rest back until a later piece decides. */
int64_t dsv41_stop_find(const char *text, size_t len, size_t prev, const char *const *stops, int32_t n, size_t *held);

/* ---- tokenizer: byte-level BPE read from a Hugging Face tokenizer.json */
typedef struct dsv41_tokenizer dsv41_tokenizer;
dsv41_tokenizer *dsv41_tokenizer_load(const char *path);
/* As dsv41_tokenizer_load, with the file's added tokens replaced by the table in
 * added_tokens_path ({"tokens": [{"id": N, "content": "spelling", "special": B?}, ...]}, the
 * layout of v41_added_tokens.json), as the V4.1 test tokenizer is built. */
dsv41_tokenizer *dsv41_tokenizer_load_with_added(const char *path, const char *added_tokens_path);
/* The tokenizer of a checkpoint directory: dir/tokenizer.json, with BOS and EOS from
 * dir/config.json (bos_token_id, eos_token_id; top level or text_config), else from
 * dir/tokenizer_config.json (bos_token, eos_token), else the V4.1 spellings. */
dsv41_tokenizer *dsv41_tokenizer_load_dir(const char *dir);
void dsv41_tokenizer_free(dsv41_tokenizer *t);
/* The begin- and end-of-sentence ids (-1 when the tokenizer has none). */
int32_t dsv41_tokenizer_bos(const dsv41_tokenizer *t);
int32_t dsv41_tokenizer_eos(const dsv41_tokenizer *t);
/* 1 when id is a special token (a control token a reply shows only on request), else 0. */
int dsv41_token_is_special(const dsv41_tokenizer *t, int32_t id);
/* 1 when reply text shows id unless asked for special tokens: every token that is not special,
 * and the special tokens that mark a reply's parts (<think>, </think> and the DSML tool-call
 * marker). The one rule of the CLI (--special), the server (skip_special_tokens) and the Python
 * module (special=) for what a reply's text holds. */
int dsv41_token_in_reply(const dsv41_tokenizer *t, int32_t id);
int32_t dsv41_tokenizer_n_vocab(const dsv41_tokenizer *t);
/* The id of a token spelling (added, or vocabulary as written in tokenizer.json: "Ġcalls"), or -1. */
int32_t dsv41_tokenizer_find(const dsv41_tokenizer *t, const char *spelling);
/* Encodes len bytes of UTF-8. With special != 0, added-token spellings in the text become their
 * ids; otherwise they are ordinary text. Writes at most cap ids and returns the full count, or
 * -1 with dsv41_error() (invalid UTF-8 is an error naming the byte offset). */
int64_t dsv41_tokenize(const dsv41_tokenizer *t, const char *text, size_t len, int special, int32_t *ids, int64_t cap);
/* The raw bytes token id stands for (byte-level decoded), or NULL for an unknown id. */
const char *dsv41_token_bytes(const dsv41_tokenizer *t, int32_t id, size_t *len);
/* Streaming decode: bytes of a character split across tokens are held back until it is
 * complete; a sequence that can never be valid UTF-8 is emitted as U+FFFD. Start from a zeroed
 * stream; n > 0 when the stream ends means an incomplete character: show it as U+FFFD. */
typedef struct {
    unsigned char pending[8]; /* bytes of an incomplete character */
    int32_t n;                /* how many are pending */
} dsv41_utf8_stream;
/* Appends token id to the stream; writes the now-complete text to out and returns its length,
 * or -1 for an unknown id or a cap that might not hold it (3 * (token bytes + 3) always does). */
int64_t dsv41_detokenize(const dsv41_tokenizer *t, dsv41_utf8_stream *st, int32_t id, char *out, int64_t cap);

/* ---- chat encoding of DeepSeek-V4.1 */
/* Renders a chat case, JSON text {"messages": [...], "tools": [...]?, "options": {...}?} with
 * the schema of chat_vectors.json, to the prompt text. Returns a malloc'd NUL-terminated
 * string, or NULL with dsv41_error() for an invalid case. */
char *dsv41_chat_render(const char *case_json, size_t len);
/* One message of a conversation. */
typedef struct {
    const char *role;              /* "system", "user", "developer", "assistant" or "tool" */
    const char *content;           /* UTF-8 text */
    const char *reasoning_content; /* an assistant's thinking, or NULL */
} dsv41_chat_message;
typedef struct {
    int32_t thinking;          /* 1: thinking mode, 0: chat mode */
    int32_t reasoning_effort;  /* 1 to 100 (low 50, high 75, max 100); 0: high */
} dsv41_chat_options;
/* Renders messages [n] as dsv41_chat_render renders the same case; opts NULL is the encoder's
 * default (thinking mode, effort high). Returns a malloc'd string, or NULL with dsv41_error(). */
char *dsv41_chat_render_messages(const dsv41_chat_message *msgs, int32_t n, const dsv41_chat_options *opts);

/* A generated reply's parts, as byte offsets into its text: the reasoning text[0,
 * reasoning_end) (thinking mode: the prompt ended with <think>), the answer text[content_start,
 * content_end), and a DSML tool-call block from calls_start on (-1: none). Without
 * DSV41_REPLY_FINAL the reply is still streaming: a tail that could grow into a marker (and,
 * with tools, whitespace before a possible block) is left out of both parts, so that the parts
 * of a longer text only ever extend those of a shorter one. */
typedef struct {
    int64_t reasoning_end;
    int64_t content_start, content_end;
    int64_t calls_start;
} dsv41_reply_parts;
enum { DSV41_REPLY_THINKING = 1, DSV41_REPLY_TOOLS = 2, DSV41_REPLY_FINAL = 4 };
void dsv41_chat_reply_parts(const char *text, size_t len, int flags, dsv41_reply_parts *out);
/* The calls of a tool-call block (text starting at calls_start) as a JSON array
 * [{"name": N, "arguments": "JSON object text"}, ...], malloc'd; NULL with dsv41_error() when
 * the block is malformed or holds no complete call. */
char *dsv41_chat_reply_calls(const char *text, size_t len);

/* ---- constrained decoding: replies that follow a grammar or a JSON Schema
 * (docs/STRUCTURED_OUTPUT.md: the grammar form, the schema subset, the cost, the limits) */
/* A grammar compiled for one tokenizer: read-only, so any number of threads and constraints
 * may share it. The tokenizer must outlive it. */
typedef struct dsv41_grammar dsv41_grammar;
/* One reply's state under a grammar (a cursor and its caches): one thread at a time. */
typedef struct dsv41_constraint dsv41_constraint;
/* Compiles grammar text (the GBNF-like form of docs/STRUCTURED_OUTPUT.md; start rule "root")
 * for tokenizer t. NULL with dsv41_error() naming the line:column and the problem. Text size,
 * rules, repetitions and elements are bounded (documented limits). */
dsv41_grammar *dsv41_grammar_new(const dsv41_tokenizer *t, const char *text, size_t len);
/* The grammar text of a JSON Schema (JSON text; {} or true: any JSON value), its rules named
 * with prefix ("args-" gives the start rule "args-root"; NULL or "": "root"), so that a caller
 * can embed it in a larger grammar. malloc'd NUL-terminated text; NULL with dsv41_error()
 * naming the unsupported keyword or bad value and its JSON pointer. */
char *dsv41_schema_grammar(const char *schema, size_t len, const char *prefix);
void dsv41_grammar_free(dsv41_grammar *g);
/* A reply's constraint. stop [n_stop]: ids that end the reply (EOS, the chat's end of turn):
 * masked until the grammar can end, and the only tokens allowed once it is complete with no
 * continuation. trigger: -1 = constrained from the first token; else a token id (</think>)
 * before which the reply is free (only the stops are masked, so a reply cannot end inside the
 * free part) and after which the grammar applies. NULL with dsv41_error() on a bad argument. */
dsv41_constraint *dsv41_constraint_new(const dsv41_grammar *g, const int32_t *stop, int32_t n_stop, int32_t trigger);
void dsv41_constraint_free(dsv41_constraint *c);
/* Makes dst (a constraint of the same grammar) stand where src stands; 0, or -1 with
 * dsv41_error(). */
int dsv41_constraint_copy(dsv41_constraint *dst, const dsv41_constraint *src);
/* Sets logits[id] = -INFINITY for every id of [vocab_size] the grammar forbids now; returns
 * how many stay allowed (0: no token can continue, or a limit was reached (dsv41_error() says
 * which): the caller ends the reply with a clear finish reason). */
int32_t dsv41_constraint_mask(dsv41_constraint *c, float *logits, int32_t vocab_size);
/* 1 when id is allowed now, 0 when not. */
int dsv41_constraint_allows(dsv41_constraint *c, int32_t id);
/* Advances by id: 0, or -1 with dsv41_error() when id is not allowed (the state unchanged). */
int dsv41_constraint_accept(dsv41_constraint *c, int32_t id);
/* How many of drafts [n] (the tokens proposed after those accepted) the grammar allows in a
 * row: a speculative block is cut before the first it forbids, which no pick could keep. c is
 * not changed. */
int32_t dsv41_constraint_drafts(dsv41_constraint *c, const int32_t *drafts, int32_t n);
enum {
    DSV41_CONSTRAINT_OPEN = 0,    /* incomplete: the reply must go on */
    DSV41_CONSTRAINT_CAN_END = 1, /* complete, and it may go on */
    DSV41_CONSTRAINT_DONE = 2     /* complete, nothing can follow (or a stop was accepted): end the reply */
};
int dsv41_constraint_status(const dsv41_constraint *c);
/* A dsv41_pick_fn (speculative decoding's pick) for a {constraint, sampler} pair: the
 * sampler's penalties, the mask, its draw, then accept; sets *last when the reply must end
 * (the grammar is done, a stop was picked). Fails (-1) when no token can continue. The token
 * is always the draw from the fully masked logits (a greedy pick checks the argmax first, which
 * is the same token), so a seed gives the same tokens with or without drafts. */
typedef struct {
    dsv41_constraint *constraint;
    dsv41_sampler *sampler;
} dsv41_constrained_pick;
int32_t dsv41_constraint_pick(void *ctx /* dsv41_constrained_pick * */, float *logits, const int32_t *history, int32_t n, int *last);

/* ---- JSON reading (the library's own parser, for programs that take JSON requests) */
typedef struct dsv41_json dsv41_json;
typedef enum { DSV41_JSON_NULL, DSV41_JSON_BOOL, DSV41_JSON_NUM, DSV41_JSON_STR, DSV41_JSON_ARR, DSV41_JSON_OBJ } dsv41_json_type;
/* Parses len bytes of JSON text (nesting depth is bounded); NULL with dsv41_error() naming the
 * problem and its byte offset. Free the root with dsv41_json_free; nodes live as long as it. */
dsv41_json *dsv41_json_parse(const char *text, size_t len);
void dsv41_json_free(dsv41_json *root);
/* The type of v; a NULL v (an absent member) reads as DSV41_JSON_NULL. */
dsv41_json_type dsv41_json_type_of(const dsv41_json *v);
/* Member key of an object (the first one of that name), or NULL (absent, or not an object). */
const dsv41_json *dsv41_json_get(const dsv41_json *obj, const char *key);
/* Item i of an array, or the value of member i of an object (its key: dsv41_json_key), or NULL. */
const dsv41_json *dsv41_json_at(const dsv41_json *v, size_t i);
/* Items of an array or members of an object; bytes of a string; 0 otherwise. */
size_t dsv41_json_len(const dsv41_json *v);
/* The key of member i of an object, or NULL. */
const char *dsv41_json_key(const dsv41_json *obj, size_t i);
/* A string's NUL-terminated UTF-8 (it may hold NULs: see dsv41_json_len), or NULL. */
const char *dsv41_json_str(const dsv41_json *v);
/* A number's value (a boolean as 0 or 1; 0 for other types). *is_int, when not NULL, says
 * whether the literal was an integer that fits 64 bits. */
double dsv41_json_num(const dsv41_json *v, int *is_int);

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#ifdef __cplusplus
}
#endif

#endif
