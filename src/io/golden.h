/* golden.h - internal access to a loaded golden file, for the check and the tests. */
#ifndef DSV41_GOLDEN_H
#define DSV41_GOLDEN_H

#include <stdio.h>

#include "json.h"
#include "model.h"

const json *golden_root(const dsv41_golden *g);
/* Compares model values got [prod(shape)] with a capture record {shape, stride, ck, data} at
 * the bar its name calls for. Returns 1 pass, 0 fail (one line written to report), -1 when the
 * record is malformed or its shape disagrees (message in dsv41_error()). */
int golden_compare(const char *regime, const char *name, const json *cap, const double *got, int32_t ndim,
                   const int64_t *shape, FILE *report);

#endif
