/* select.c - choosing the kernel set for this CPU.
 *
 * x86-64 has the avx2 set (AVX2, FMA, F16C) and the avx512 set (AVX-512 F/BW/VL/DQ with VNNI
 * and VBMI), each compiled with function-level target attributes and used only when the CPU
 * (and the OS, for the wider registers) supports it, and the amx set (amx.c), which runs on
 * every x86-64 CPU: on the tile instructions where they exist, else on their emulation. It is
 * listed last and taken by name only, never as the default: emulated it is the slowest set, and
 * on the tiles it has not been measured against avx512 yet. arm64 always has NEON. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>

static const kernel_set *const ALL[] = {&kernels_scalar, &kernels_avx2, &kernels_avx512, &kernels_amx};

/* F16C (CPUID.1:ECX bit 29); not every compiler's __builtin_cpu_supports knows it */
static int has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}

/* __builtin_cpu_supports also checks that the OS saves the wider registers */
static int supported(const kernel_set *k) {
    __builtin_cpu_init();
    if (k == &kernels_avx2) return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && has_f16c();
    if (k == &kernels_avx512)
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
               __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vbmi") &&
               __builtin_cpu_supports("fma") && has_f16c();
    return 1;
}
#elif defined(__aarch64__)
static const kernel_set *const ALL[] = {&kernels_scalar, &kernels_neon};

static int supported(const kernel_set *k) { (void)k; return 1; }
#else
static const kernel_set *const ALL[] = {&kernels_scalar};

static int supported(const kernel_set *k) { (void)k; return 1; }
#endif

const kernel_set *kernels_find(const char *name) {
    for (size_t i = 0; i < sizeof ALL / sizeof *ALL; i++)
        if (!strcmp(ALL[i]->name, name)) return supported(ALL[i]) ? ALL[i] : NULL;
    return NULL;
}

/* The last supported set in ALL but amx: ALL lists the vector sets from slowest to fastest. */
const kernel_set *kernels_best(void) {
    for (size_t i = sizeof ALL / sizeof *ALL; i-- > 0;)
        if (supported(ALL[i]) && strcmp(ALL[i]->name, "amx")) return ALL[i];
    return &kernels_scalar;
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
        if (supported(ALL[i])) {
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
        if (supported(ALL[i])) snprintf(list + strlen(list), sizeof list - strlen(list), "%s%s", *list ? " " : "", ALL[i]->name);
    return set_error("no kernel set '%.40s' on this CPU (it runs: %s)", name, list);
}

const char *dsv41_kernels(void) { return kernels_current()->name; }
