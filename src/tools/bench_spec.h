/* bench_spec.h - the speculative decoding figures of bench --draft (bench_spec.c). */
#ifndef DSV41_BENCH_SPEC_H
#define DSV41_BENCH_SPEC_H

#include "model.h"

typedef struct {
    double row_s, verify_s, draft_s; /* seconds: one decode step, one verify of draft+1 rows, one draft */
    double own_tok_s, own_accept;    /* the model's own drafter, every draft verified: tokens per second, share kept */
    double policy_tok_s;             /* the same with the default dsv41_draft_policy (as --draft N runs): tokens per second */
    double verify_bytes, draft_bytes; /* weight bytes a verify of draft+1 rows and a draft read (model_rows_bytes,
                                       * dspark_draft_bytes): against draft+1 decode steps' bytes, the speedup
                                       * with every draft kept where all three read at one rate */
} spec_timing;

/* Measures r for blocks of `draft` drafts at the threads set now; 0, or -1 with the error. */
int bench_speculative(const dsv41_model *m, int32_t draft, spec_timing *r);

#endif
