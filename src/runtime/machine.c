/* machine.c - the machine's limits, measured: the clock, the memory bandwidth and the peak
 * resident memory. The benchmark reports its figures against them, and each rank of a split
 * job measures its own for the benchmark's per-rank report. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include "machine.h"
#include "pool.h"
#include "progress.h"

double machine_now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

typedef struct {
    double *a, *b, *c;
} triad_job;

static void triad_range(void *ctx, int64_t b, int64_t e) {
    triad_job *j = ctx;
    for (int64_t i = b; i < e; i++) j->a[i] = j->b[i] + 3.0 * j->c[i];
}

/* best of 5 passes of a[i] = b[i] + s*c[i] over 3 x 128 MiB, counting 24 bytes per element */
double machine_triad_gbps(void) {
    int64_t n = 16 << 20;
    triad_job j = {malloc((size_t)n * 8), malloc((size_t)n * 8), malloc((size_t)n * 8)};
    if (!j.a || !j.b || !j.c) { free(j.a); free(j.b); free(j.c); return 0.0; }
    for (int64_t i = 0; i < n; i++) j.a[i] = 0.0, j.b[i] = 1.0, j.c[i] = 2.0;
    double best = 1e30;
    for (int rep = 0; rep < 5; rep++) {
        double t0 = machine_now_s();
        pool_run(n, 1 << 16, triad_range, &j);
        best = fmin(best, machine_now_s() - t0);
        progress_report("bench: triad passes", rep + 1, 5);
    }
    free(j.a); free(j.b); free(j.c);
    return 24.0 * (double)n / best / 1e9;
}

double machine_peak_rss(void) {
    FILE *f = fopen("/proc/self/status", "r");
    char line[256];
    double kb = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kb = atof(line + 6);
    if (f) fclose(f);
    if (kb >= 0) return kb * 1024.0;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_maxrss * 1024.0;
}

void machine_peak_reset(void) {
    FILE *f = fopen("/proc/self/clear_refs", "w");
    if (f) {
        fputs("5", f);
        fclose(f);
    }
}
