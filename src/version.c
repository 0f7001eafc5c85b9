/* version.c - what the program linked: the library's version and this CPU's kernel sets. */
#include "kernels.h"

const char *dsv41_version(void) { return DSV41_VERSION; }

int32_t dsv41_kernel_sets(const char **names, int32_t cap) {
    static const char *const ALL[] = {"scalar", "avx2", "avx512", "neon"};
    int32_t n = 0;
    for (size_t i = 0; i < sizeof ALL / sizeof *ALL; i++)
        if (kernels_find(ALL[i])) {
            if (n < cap) names[n] = ALL[i];
            n++;
        }
    return n;
}
