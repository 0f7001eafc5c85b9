/* sched.h - the server's slots and the one thread that runs the model for them.
 *
 * A slot is a session with the token ids it holds, the request it serves and that request's
 * sampler. Requests wait in a FIFO queue until a slot is free. All model calls happen on the
 * scheduler thread, one slot's step at a time in turn (a prefill, or one sampled and decoded
 * token), so the library's sessions and its thread pool are only ever used by one caller, and a
 * later batched step (one forward over every busy slot) fits the same loop. A request's side
 * (an HTTP connection thread) reads the job's progress under the scheduler's lock and waits on
 * the job's condition variable. */
#ifndef SERVE_SCHED_H
#define SERVE_SCHED_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "dsv41.h"
#include "jbuf.h"

enum { MAX_STOPS = 8 };

typedef enum { END_NONE, END_STOP, END_LENGTH, END_CANCEL, END_ERROR } job_end;

typedef struct job {
    /* the request: set before sched_submit, read-only afterwards */
    int32_t *prompt;          /* [n_prompt] token ids */
    int32_t n_prompt;
    int32_t max_tokens;       /* tokens to generate at most */
    dsv41_sampler_params sp;
    char *stops[MAX_STOPS];   /* [n_stops] stop strings (owned) */
    int n_stops;
    /* progress: written by the scheduler, read under the lock */
    jbuf text;                /* the reply: whole characters, cut before a stop string */
    size_t committed;         /* text[0, committed) is final: no stop string can take it back */
    size_t *marks;            /* [n_marks] text length after each token that added text */
    int32_t n_marks, cap_marks;
    int32_t n_gen;            /* tokens generated (an EOS is not counted) */
    int32_t n_cached;         /* prompt tokens the slot already held */
    job_end end;              /* END_NONE while the job runs */
    char error[256];          /* END_ERROR: what failed */
    double t_submit, t_start, t_end; /* seconds on the monotonic clock */
    /* control */
    atomic_int cancel;        /* the request side gave up: the next step ends the job */
    int refs;                 /* the request side and the scheduler; freed at 0 */
    pthread_cond_t changed;   /* signalled after each step that changed the progress */
    struct job *next;         /* the queue */
} job;

typedef struct sched sched;

/* Starts the scheduler with n_slots sessions of m; ctx bounds prompt plus reply; at most
 * max_waiting requests wait for a slot. NULL with a message on stderr on failure. */
sched *sched_start(dsv41_model *m, const dsv41_tokenizer *tk, int32_t n_slots, int32_t max_waiting, int32_t ctx);
/* Refuses new jobs from now on and cancels every queued and running one. */
void sched_shutdown(sched *s);
/* Shuts down, joins the thread and frees the slots (not the model or tokenizer). */
void sched_stop(sched *s);

/* A job with its prompt (copied) and parameters; the caller fills stops and limits. */
job *job_new(const int32_t *prompt, int32_t n_prompt);
/* Queues j; 0, or -1 when the queue is full or the server stops (j stays the caller's). */
int sched_submit(sched *s, job *j);
/* The request side is done with j: it is cancelled if it still runs, and freed when the
 * scheduler is done with it too. */
void sched_release(sched *s, job *j);
/* Frees a job that was never submitted. */
void job_free(job *j);

void sched_lock(sched *s);
void sched_unlock(sched *s);
/* With the lock held: waits for j's progress, at most ms milliseconds. */
void sched_wait(sched *s, job *j, int ms);

/* Prometheus lines for tokens, speeds, waiting requests and busy slots. */
void sched_metrics(sched *s, jbuf *out);

double now_s(void);

#endif
