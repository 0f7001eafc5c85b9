/* select.c - choosing the kernel set for this CPU.
 *
 * x86-64 has the avx2 set (AVX2, FMA, F16C) and the avx512 set (AVX-512 F/BW/VL/DQ with VNNI
 * and VBMI), each compiled with function-level target attributes and used only when the CPU
 * (and the OS, for the wider registers) supports it, and the amx set (amx.c), which runs on
 * every x86-64 CPU with AVX2: on the tile instructions where they exist, else on their
 * emulation. It is listed last and taken by name only, even where the CPU has the tiles: it runs
 * them only for the calls they win against the vector set and that set's kernels for the rest,
 * but bench's model puts its 512-row fp8 kernel at about twice avx512's time on a Xeon (the
 * per-block combines around the tiles dominate: docs/PERFORMANCE.md), so nothing yet says it
 * wins a prefill there. arm64 always has NEON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv41.h"
#include "error.h"
#include "kernels.h"

#if defined(__x86_64__)
static const kernel_set *const ALL[] = {&kernels_scalar, &kernels_avx2, &kernels_avx512, &kernels_amx};
#elif defined(__aarch64__)
static const kernel_set *const ALL[] = {&kernels_scalar, &kernels_neon};
#else
static const kernel_set *const ALL[] = {&kernels_scalar};
#endif

/* Whether this CPU runs set k: the amx set needs AVX2 beside its tiles (or their emulation).
 * Here rather than in cpu.c, which amx.c uses for its vector fallback: amx.o stays out of it. */
static int set_runs(const kernel_set *k) {
#if defined(__x86_64__)
    if (k == &kernels_amx) k = &kernels_avx2;
#endif
    return kernels_supported(k);
}

const kernel_set *kernels_find(const char *name) {
    for (size_t i = 0; i < sizeof ALL / sizeof *ALL; i++)
        if (!strcmp(ALL[i]->name, name)) return set_runs(ALL[i]) ? ALL[i] : NULL;
    return NULL;
}

const kernel_set *kernels_default(void) {
    const char *name = getenv("DSV41_KERNELS");
    const kernel_set *k = name && *name ? kernels_find(name) : NULL;
    return k ? k : kernels_best();
}

int dsv41_kernels_emulated(const char *name) {
#if defined(__x86_64__)
    return name && !strcmp(name, "amx") && !amx_native();
#else
    (void)name;
    return 0;
#endif
}

int32_t dsv41_kernel_sets(const char **names, int32_t cap) {
    int32_t n = 0;
    for (size_t i = 0; i < sizeof ALL / sizeof *ALL; i++)
        if (set_runs(ALL[i])) {
            if (n < cap) names[n] = ALL[i]->name;
            n++;
        }
    return n;
}

int dsv41_set_kernels(const char *name) {
    if (!name || !*name) name = getenv("DSV41_KERNELS");
    if (!name || !*name) {
        kernels_use(kernels_best());
        return 0;
    }
    const kernel_set *k = kernels_find(name);
    if (k) {
        kernels_use(k);
        return 0;
    }
    char list[64] = "";
    for (size_t i = 0; i < sizeof ALL / sizeof *ALL; i++)
        if (set_runs(ALL[i])) snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", *list ? " " : "", ALL[i]->name);
    return set_error("no kernel set '%.40s' on this CPU (it runs: %s)", name, list);
}

const char *dsv41_kernels(void) { return kernels_current()->name; }

static const kernel_set *active;

/* Application threads may make their first call at the same time: each picks the same set. */
const kernel_set *kernels_current(void) {
    const kernel_set *k = __atomic_load_n(&active, __ATOMIC_ACQUIRE);
    if (!k) __atomic_store_n(&active, k = kernels_default(), __ATOMIC_RELEASE);
    return k;
}
void kernels_use(const kernel_set *k) { __atomic_store_n(&active, k, __ATOMIC_RELEASE); }
