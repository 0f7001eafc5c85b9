/* job.h - one generation request as the scheduler serves it: the request, and its reply as the
 * tokens come. The reply's text is cut before the first stop string, and the part that no stop
 * string can take back any more is marked final, so a stream never sends what a stop would
 * remove. The scheduler (sched.c) feeds a job; the API layer (api.c) reads it. */
#ifndef SERVE_JOB_H
#define SERVE_JOB_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "dsv41.h"
#include "jbuf.h"

enum { MAX_STOPS = 8 };

/* END_DEAD: the grammar allowed no token (a grammar that cannot go on, or one of its limits) */
typedef enum { END_NONE, END_STOP, END_LENGTH, END_CANCEL, END_ERROR, END_DEAD } job_end;

typedef struct job {
    /* the request: set before sched_submit, read-only afterwards */
    int32_t *prompt;          /* [n_prompt] token ids */
    int32_t n_prompt;
    int32_t max_tokens;       /* tokens to generate at most */
    dsv41_sampler_params sp;
    char *stops[MAX_STOPS];   /* [n_stops] stop strings (owned) */
    int n_stops;
    int32_t id_slot;          /* the slot asked for, -1: any */
    int cache_prompt;         /* reuse what the slot holds (else a cold prefill) */
    int special;              /* the text keeps every special token (else dsv41_token_in_reply's rule) */
    int32_t think_budget;     /* thinking mode: reasoning tokens after which </think> is fed instead
                               * of a sampled token, 0: the model ends its reasoning itself */
    dsv41_grammar *grammar;   /* the reply's answer and calls follow it (owned); NULL: a free reply */
    int32_t trigger;          /* the token before which the reply is free (</think>), -1: none */
    jbuf echo;                /* the request's members its reply repeats (",\"key\":value"...), for
                               * the Responses API's response object */
    jbuf custom;              /* the Responses API: the names of the request's custom tools, each
                               * NUL-terminated (their calls come back as custom_tool_call items) */
    /* progress: written by the scheduler, read under the lock */
    jbuf text;                /* the reply: whole characters, cut before a stop string */
    size_t committed;         /* text[0, committed) is final: no stop string can take it back */
    size_t *marks;            /* [n_gen] text length after each generated token */
    int32_t *ids;             /* [n_gen] the generated token ids (an EOS is not one) */
    int32_t n_gen, cap_ids;   /* tokens generated; room in marks and ids */
    int32_t n_cached;         /* prompt tokens reused from the slot's cache, not computed */
    int32_t n_drafted;        /* speculative drafts its verifies checked */
    int32_t n_accepted;       /* of those, the ones kept */
    int32_t slot;             /* the slot that serves it, -1 until one does */
    job_end end;              /* END_NONE while the job runs */
    int stop_hit;             /* the stop string (an index in stops) that ended the reply, -1: none */
    char error[256];          /* END_ERROR: what failed */
    double t_submit, t_start, t_end; /* seconds on the monotonic clock */
    /* control */
    atomic_int cancel;        /* the request side gave up: the next step ends the job, and a cold
                               * prefill running alone stops at its next layer */
    int refs;                 /* the request side and the scheduler; freed at 0 */
    pthread_cond_t changed;   /* signalled after each step that changed the progress */
    struct job *next;         /* the queue */
} job;

/* A job with its prompt (copied) and parameters; the caller fills stops and limits. */
job *job_new(const int32_t *prompt, int32_t n_prompt);
/* Frees a job that was never submitted (or that nobody refers to any more). */
void job_free(job *j);
/* The request side gives up on j (any thread): the scheduler's next step ends it, and a cold
 * prefill of it that runs alone stops at its next layer. */
void job_cancel(job *j);
/* Appends a generated token and its text (the scheduler, with its lock held). Returns 1 when a
 * stop string ended the reply (the text is cut before the earliest one), 0 when it goes on, -1
 * out of memory. */
int job_append(job *j, int32_t id, const char *piece, size_t n);

#endif
