/* version.c - what the program linked: the library's version and this CPU's kernel sets. */
#include <string.h>

#include "kernels.h"

const char *dsv41_version(void) { return DSV41_VERSION; }

/* The names are fixed and the CPU does not change, so the answer is built once per call into
 * a constant-size buffer owned by the caller's thread. */
const char *dsv41_kernel_sets(void) {
    static const char *const NAMES[] = {"scalar", "avx2", "avx512", "neon"};
    static _Thread_local char out[64];
    out[0] = 0;
    for (size_t i = 0; i < sizeof NAMES / sizeof *NAMES; i++)
        if (kernels_find(NAMES[i])) {
            if (out[0]) strcat(out, " ");
            strcat(out, NAMES[i]);
        }
    return out;
}
