/* error.c - the thread's last error, for dsv41_error().
 *
 * Thread-local, so two application threads calling the library each read their own line. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

#include "dsv41_dev.h"
#include "error.h"

static _Thread_local char error_buf[512];

int set_error(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(error_buf, sizeof error_buf, fmt, ap);
    va_end(ap);
    return -1;
}

const char *dsv41_error(void) { return error_buf; }

void dsv41_assert_fail(const char *cond, const char *file, int line) {
    fprintf(stderr, "dsv41: %s:%d: assertion failed: %s\n", file, line, cond);
    abort();
}
