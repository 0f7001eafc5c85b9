/* progress.c - the progress hook of long calls (synth, convert, model load, bench phases).
 *
 * A setting of the calling thread, like dsv41_error(): the calls report through it without
 * taking an extra argument, and two threads loading two models each see their own. */
#include "dsv41.h"
#include "progress.h"

static _Thread_local dsv41_progress_fn hook;
static _Thread_local void *hook_ctx;

void dsv41_set_progress(dsv41_progress_fn fn, void *ctx) {
    hook = fn;
    hook_ctx = ctx;
}

void progress_report(const char *what, int64_t done, int64_t total) {
    if (hook && total > 0) hook(hook_ctx, what, done, total);
}
