/* server.h - what the parts of `dsv41 serve` share: the loaded model, the scheduler, the
 * settings and the request counters. */
#ifndef SERVE_SERVER_H
#define SERVE_SERVER_H

#include <pthread.h>
#include <stdint.h>

#include "dsv41.h"
#include "sched.h"

enum { N_STATUS = 9 }; /* the statuses /metrics counts, see http.c */

typedef struct {
    char model_name[256];         /* the checkpoint directory's name */
    int32_t ctx;                  /* tokens of prompt plus reply a request may use */
    int32_t n_slots;              /* -np */
    const char *slot_dir;         /* --slot-save-path, resolved; NULL: slot files are off */
    int slot_dirfd;               /* that folder, open (O_DIRECTORY) */
    const dsv41_tokenizer *tok;
    sched *sched;
    const char *api_key;          /* NULL: no key required */
    size_t body_limit;            /* bytes of request body accepted */
    uint64_t next_id;             /* completion ids (under mu) */
    int32_t active;               /* requests begun and not yet completed (under mu) */
    pthread_mutex_t mu;           /* guards next_id and the counters */
    uint64_t by_status[N_STATUS]; /* finished requests per status */
} server;

#endif
