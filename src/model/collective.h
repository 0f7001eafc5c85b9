/* collective.h - the exchanges a forward makes when its model is split across the ranks of a
 * job (collective.c), over the transport the program gave dsv41_set_dist.
 *
 * Inside a forward every rank computes the same replicated values, runs its share of the
 * experts, table rows and head rows (split by rows also of every dense projection's rows), and
 * the shares are exchanged whole, so every rank ends each step with the same bits. */
#ifndef DSV41_COLLECTIVE_H
#define DSV41_COLLECTIVE_H

#include "model.h"

/* The transport this process runs over: rank 0 of 1 until dsv41_set_dist sets another. */
extern dsv41_dist collective_net;
/* Every rank's part of buf (counts [n_ranks] bytes, end to end in rank order) to every rank. */
void collective_gather(void *buf, const int64_t *counts);
/* Rank 0's n bytes of buf to every rank. */
void collective_bcast(void *buf, int64_t n);
/* Bytes this rank sent to the others so far, and all-gathers it took part in. */
uint64_t collective_sent(void);
uint64_t collective_gathers(void);

/* MoE of E experts (the target's or the drafter's): ys [first[e1] - first[e0]][dim] holds the
 * outputs of this rank's picks among experts [e0, e1) (first as in moe.c); on return, every
 * pick's. The outputs are bf16 values and travel as bf16. */
void collective_share_picks(const dsv41_model *m, int32_t E, const int64_t *first, int32_t e0, int32_t e1, float *ys);
/* out [n][table cols] = table row rows[i] for every i (rounded to bf16 if round, as the Engram
 * rows are), each row read by its owner (rank r of K owns rows [R r / K, R (r+1) / K)) and sent
 * as stored: its codes and, for e4m3, its e8m0 scales. */
void collective_table_rows(const dsv41_model *m, const weight *table, const int64_t *rows, int64_t n, int round,
                           float *out);
/* y [T][w rows] = linear(w, x): each rank computes its share of the rows, all ranks get all. */
void collective_linear(const dsv41_model *m, const weight *w, const float *x, int64_t T, float *y);
/* linear_batch(items, n) where items [0, local) are this rank's own (its experts) and items
 * [local, n) the dense projections every rank needs whole: on a model split by rows each rank
 * computes its share of each such item's rows and all ranks get all of them (one all-gather);
 * otherwise every rank computes them whole. */
void collective_linear_rows(const dsv41_model *m, const linear_item *items, int32_t n, int32_t local);
/* y [T][w rows] = linear(w, x), a dense projection: collective_linear_rows of it alone. */
void collective_project(const dsv41_model *m, const weight *w, const float *x, int64_t T, float *y);

#endif
