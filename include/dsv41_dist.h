/* dsv41_dist.h - one model split across the ranks of a job: the transport a program gives the
 * library (dsv41-mpi gives one over MPI) and the calls that lead and follow. */
#ifndef DSV41_DIST_H
#define DSV41_DIST_H

#include <stdint.h>

#include "dsv41.h"

#if defined(__GNUC__)
#pragma GCC visibility push(default)
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- distribution: one model split across the ranks of a job
 *
 * With a transport set (dsv41-mpi sets one over MPI), rank 0 leads: every model it loads,
 * session it opens, frees, empties, copies or loads and forward it runs is repeated by the
 * other ranks, which sit in dsv41_follow() until rank 0 calls dsv41_dist_end(). A model loaded
 * this way keeps only its rank's share of the routed experts, Engram table rows and head rows
 * in use. Split by experts (the default) attention, the dense projections and the shared expert
 * run whole on every rank; split by rows each rank computes its share of the output rows of
 * every dense projection too, and the rows are all-gathered. Results are bit-identical to one
 * process: partial outputs travel whole and are added in the single process's order. */
enum { DSV41_SPLIT_EXPERTS, DSV41_SPLIT_ROWS };
typedef struct {
    int32_t rank, n_ranks;  /* this process, of n_ranks >= 1 */
    void *ctx;              /* passed to the calls below */
    /* In place: buf holds every rank's part end to end in rank order (counts [n_ranks] bytes);
     * on entry this rank's part is filled, on return all are. */
    void (*allgather)(void *ctx, void *buf, const int64_t *counts);
    /* n bytes of rank 0's buf to every rank. */
    void (*broadcast)(void *ctx, void *buf, int64_t n);
    /* Ends the whole job after printing msg (one line) for this rank. Never returns. The calls
     * above do the same when the transport fails: a rank cannot leave a collective half done. */
    void (*fail)(void *ctx, const char *msg);
    int32_t split;          /* DSV41_SPLIT_EXPERTS or DSV41_SPLIT_ROWS: rank 0's decides */
} dsv41_dist;
/* Sets the transport for models loaded from now on (before any model is loaded). */
int dsv41_set_dist(const dsv41_dist *d);
/* Ranks other than 0: repeats rank 0's calls until it calls dsv41_dist_end; returns its status. */
int32_t dsv41_follow(void);
/* Rank 0: releases the followers, which return status from dsv41_follow. */
void dsv41_dist_end(int32_t status);

#ifdef __cplusplus
}
#endif

#if defined(__GNUC__)
#pragma GCC visibility pop
#endif

#endif
