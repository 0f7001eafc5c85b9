/* sched.h - the server's slots, their prompt cache, and the one thread that runs the model.
 *
 * A slot is a session (the live state), a few snapshots of earlier states (each taken when a
 * prompt was fully in), the request it serves and that request's sampler. Requests wait in a
 * FIFO queue until a slot is free. All model calls happen on the scheduler thread: each step
 * gathers every busy slot that has a token to feed (a sampled token, or the next token of a
 * prompt that extends the slot's cached tokens) plus at most one cold prefill, and advances them
 * all with one dsv41_batch_forward call (a long prefill runs alone right after it, where a
 * cancel can stop it). With drafts (serve --draft) the slots that decode go through one
 * dsv41_batch_verify call instead, each with its picked token and its drafter's drafts, and
 * each reply is the one plain steps give. A request's side (an HTTP connection thread) reads the
 * job's progress under the scheduler's lock and waits on the job's condition variable. */
#ifndef SERVE_SCHED_H
#define SERVE_SCHED_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#include "dsv41.h"
#include "clock.h"
#include "jbuf.h"
#include "job.h"

typedef struct sched sched;

/* Starts the scheduler with n_slots sessions of m, each keeping up to n_snaps snapshots; ctx
 * bounds prompt plus reply; at most max_waiting requests wait for a slot; draft > 0 decodes
 * replies by speculative rounds of that many drafts (the same tokens), each reply beginning with
 * policy. NULL with a message on stderr on failure. */
sched *sched_start(dsv41_model *m, const dsv41_tokenizer *tk, int32_t n_slots, int32_t n_snaps, int32_t max_waiting,
                   int32_t ctx, int32_t draft, dsv41_draft_policy policy);
/* Refuses new jobs from now on and cancels every queued and running one. */
void sched_shutdown(sched *s);
/* Shuts down, joins the thread and frees the slots (not the model or tokenizer). */
void sched_stop(sched *s);

/* Queues j; 0, or -1 when the queue is full or the server stops (j stays the caller's). */
int sched_submit(sched *s, job *j);
/* The request side is done with j: it is cancelled if it still runs, and freed when the
 * scheduler is done with it too. */
void sched_release(sched *s, job *j);

void sched_lock(sched *s);
void sched_unlock(sched *s);
/* With the lock held: waits for j's progress, at most ms milliseconds. */
void sched_wait(sched *s, job *j, int ms);

/* ---- a slot's cache as a file, and its list. Each action takes the slot away from the
 * scheduler while it runs (other slots keep stepping) and answers SLOT_BUSY while a request
 * holds it; *n_tokens gets the tokens saved, restored or erased. */
typedef enum { SLOT_OK, SLOT_BUSY, SLOT_FAILED } slot_result;
typedef enum { SLOT_SAVE, SLOT_RESTORE, SLOT_ERASE } slot_action;
/* SLOT_FAILED leaves dsv41_error() set and the slot as it was. */
slot_result sched_slot_action(sched *s, int32_t id, slot_action action, const char *path, int32_t *n_tokens);
/* A JSON array of {"id", "busy", "n_tokens"}. */
void sched_slots_json(sched *s, jbuf *out);

/* Prometheus lines for tokens, speeds, the step's batch, speculative drafts, waiting requests and
 * busy slots. */
void sched_metrics(sched *s, jbuf *out);

#endif
