/* kernels.c - choosing the kernel set for this CPU. */
#include <string.h>

#include "kernels.h"

static const kernel_set *const ALL[] = {&kernels_scalar};

const kernel_set *kernels_find(const char *name) {
    for (size_t i = 0; i < sizeof ALL / sizeof *ALL; i++)
        if (!strcmp(ALL[i]->name, name)) return ALL[i];
    return NULL;
}

const kernel_set *kernels_best(void) { return &kernels_scalar; }
