/* machine.h - what this machine can do, measured in the run that reports against it
 * (machine.c): the benchmark's limits and each rank's report in a split job. */
#ifndef DSV41_MACHINE_H
#define DSV41_MACHINE_H

/* Seconds on the monotonic clock. */
double machine_now_s(void);
/* The memory bandwidth in GB/s: the best of 5 passes of a STREAM-like triad over the pool. */
double machine_triad_gbps(void);
/* The peak resident memory of this process in bytes, since the last machine_peak_reset().
 * Linux keeps a resettable high-water mark (clear_refs 5 sets VmHWM to the present resident
 * size); where it is missing this is the whole run's peak. */
double machine_peak_rss(void);
void machine_peak_reset(void);

#endif
