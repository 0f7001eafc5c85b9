/* cpu.c - which vector kernel sets this CPU runs, and the fastest of them.
 *
 * Apart from select.c because the amx set falls back on the fastest vector set for the shapes
 * its tiles decline, while select.c lists amx among the sets: both use this file, and neither
 * the other. */
#include "kernels.h"

#if defined(__x86_64__)
#include <cpuid.h>

/* the vector sets from slowest to fastest */
static const kernel_set *const VECTOR[] = {&kernels_scalar, &kernels_avx2, &kernels_avx512};

/* F16C (CPUID.1:ECX bit 29); not every compiler's __builtin_cpu_supports knows it */
static int has_f16c(void) {
    unsigned a, b, c, d;
    return __get_cpuid(1, &a, &b, &c, &d) && (c >> 29 & 1);
}

/* __builtin_cpu_supports also checks that the OS saves the wider registers */
int kernels_supported(const kernel_set *k) {
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
static const kernel_set *const VECTOR[] = {&kernels_scalar, &kernels_neon};

int kernels_supported(const kernel_set *k) { (void)k; return 1; }
#else
static const kernel_set *const VECTOR[] = {&kernels_scalar};

int kernels_supported(const kernel_set *k) { (void)k; return 1; }
#endif

const kernel_set *kernels_best(void) {
    for (size_t i = sizeof VECTOR / sizeof *VECTOR; i-- > 0;)
        if (kernels_supported(VECTOR[i])) return VECTOR[i];
    return &kernels_scalar;
}
