/* lead.h - what the leader of a model split across ranks does around the public calls that
 * change a model, a session or the thread count: it tells the other ranks, which repeat the
 * call (lib/dist.c).
 *
 * The calls live low in the library (pool.c, model.c, session.c, forward.c) and the control of
 * the ranks high above them, beside the loaders it replays. So the control installs its hooks
 * here when this process leads a job of several ranks (dsv41_set_dist), the way SQLite's core
 * reaches the OS through the VFS it is given: the dependency stays downward, and in one
 * process each call costs the test of one pointer. */
#ifndef DSV41_LEAD_H
#define DSV41_LEAD_H

#include <stddef.h>
#include <stdint.h>

#include "dsv41.h"

/* What a leader's forward asks for (the followers ask the same, so every rank runs the same
 * collectives). */
enum { FWD_LOGITS = 1, FWD_ALL = 2, FWD_TRACE = 4 };

typedef struct {
    void (*model_free)(const dsv41_model *m);
    void (*session_new)(dsv41_session *s);
    void (*session_free)(const dsv41_session *s);
    void (*threads)(int32_t n);
    /* around a forward of n ids; end unlocks what begin locked */
    void (*forward_begin)(const dsv41_session *s, const int32_t *ids, int32_t n, int32_t flags);
    void (*forward_end)(const dsv41_session *s);
    /* before a draft of n tokens after anchor, and before a verify of the n rows ids (plain: as
     * dsv41_batch_verify, which may feed one row); forward_end ends them too, the verify's after
     * the leader's decision of the rows kept */
    void (*draft_begin)(const dsv41_session *s, int32_t anchor, int32_t n);
    void (*verify_begin)(const dsv41_session *s, const int32_t *ids, int32_t n, int32_t plain);
    /* after the leader emptied s, copied src into dst, set s's prefill rows or loaded the n
     * bytes of a session file into s, each only once it succeeded: the followers' copies of
     * the sessions change the same way, so they stay identical */
    void (*session_reset)(const dsv41_session *s);
    void (*session_copy)(const dsv41_session *dst, const dsv41_session *src);
    void (*prefill_rows)(const dsv41_session *s, int32_t rows);
    void (*session_load)(const dsv41_session *s, const void *bytes, size_t n);
} lead_hooks;

/* The hooks in force: NULL unless this process leads a job of ranks. Set by dsv41_set_dist,
 * which a program calls before any other. */
extern const lead_hooks *lead_active;

static inline void lead_model_free(const dsv41_model *m) { if (lead_active) lead_active->model_free(m); }
static inline void lead_session_new(dsv41_session *s) { if (lead_active) lead_active->session_new(s); }
static inline void lead_session_free(const dsv41_session *s) { if (lead_active) lead_active->session_free(s); }
static inline void lead_threads(int32_t n) { if (lead_active) lead_active->threads(n); }
static inline void lead_forward_begin(const dsv41_session *s, const int32_t *ids, int32_t n, int32_t flags) {
    if (lead_active) lead_active->forward_begin(s, ids, n, flags);
}
static inline void lead_forward_end(const dsv41_session *s) { if (lead_active) lead_active->forward_end(s); }
static inline void lead_draft_begin(const dsv41_session *s, int32_t anchor, int32_t n) {
    if (lead_active) lead_active->draft_begin(s, anchor, n);
}
static inline void lead_verify_begin(const dsv41_session *s, const int32_t *ids, int32_t n, int32_t plain) {
    if (lead_active) lead_active->verify_begin(s, ids, n, plain);
}
static inline void lead_session_reset(const dsv41_session *s) { if (lead_active) lead_active->session_reset(s); }
static inline void lead_session_copy(const dsv41_session *dst, const dsv41_session *src) {
    if (lead_active) lead_active->session_copy(dst, src);
}
static inline void lead_prefill_rows(const dsv41_session *s, int32_t rows) { if (lead_active) lead_active->prefill_rows(s, rows); }
static inline void lead_session_load(const dsv41_session *s, const void *bytes, size_t n) {
    if (lead_active) lead_active->session_load(s, bytes, n);
}

#endif
