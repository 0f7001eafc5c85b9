/* progress.c - one progress line on stderr, only when stderr is a terminal.
 *
 * Long calls (synth, convert, load, bench phases) report units done of a total; the line shows
 * the share, the rate and the time left, redrawn at most ten times a second, and is erased
 * when the phase ends so that what follows starts on a clean line. Nothing is written when
 * stderr is a file or a pipe. */
#include <stdio.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "commands.h"

static double start_s, last_s;
static const char *phase;
static int shown;

void progress_clear(void) {
    if (shown) fprintf(stderr, "\r\033[K");
    shown = 0;
}

static void on_progress(void *ctx, const char *what, int64_t done, int64_t total) {
    (void)ctx;
    double t = now_s();
    if (what != phase || done == 0) { phase = what; start_s = t; last_s = 0; }
    if (done >= total) { phase = NULL; progress_clear(); return; }
    if (t - last_s < 0.1) return;
    last_s = t;
    double el = t - start_s, rate = el > 0 ? (double)done / el : 0;
    fprintf(stderr, "\r\033[K%s: %3.0f%% (%lld/%lld)", what, 100.0 * (double)done / (double)total, (long long)done,
            (long long)total);
    if (rate > 0 && el > 0.5) {
        long left = (long)((double)(total - done) / rate + 0.5);
        fprintf(stderr, ", %.1f/s, ETA %ld:%02ld", rate, left / 60, left % 60);
    }
    shown = 1;
}

void progress_on(void) {
    if (isatty(2)) dsv41_set_progress(on_progress, NULL);
}

void progress_layers(void *ctx, int32_t done, int32_t total) {
    on_progress(ctx, "prefill: layers", done, total);
}
