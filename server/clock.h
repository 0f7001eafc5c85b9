/* clock.h - seconds on the monotonic clock: the server's request times, and the speeds and the
 * progress line of the CLI (which sees server/'s headers for `dsv41 serve`). */
#ifndef SERVE_CLOCK_H
#define SERVE_CLOCK_H

#include <time.h>

static inline double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

#endif
