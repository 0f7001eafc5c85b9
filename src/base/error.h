/* error.h - the library's error channel: one line per thread, read with dsv41_error().
 *
 * Every layer reports through it, so it sits at the bottom: a failing call records why and
 * returns -1 or NULL, and the public entry point hands that on unchanged. */
#ifndef DSV41_ERROR_H
#define DSV41_ERROR_H

/* Record a one-line error for dsv41_error(); returns -1 so callers can `return set_error(...)`. */
int set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
