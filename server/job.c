/* job.c - a generation request and its reply text (see job.h). */
#include <stdlib.h>
#include <string.h>

#include "job.h"

job *job_new(const int32_t *prompt, int32_t n_prompt) {
    job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->prompt = malloc((size_t)(n_prompt > 0 ? n_prompt : 1) * sizeof *j->prompt);
    if (!j->prompt) {
        free(j);
        return NULL;
    }
    if (n_prompt > 0) memcpy(j->prompt, prompt, (size_t)n_prompt * sizeof *prompt);
    j->n_prompt = n_prompt;
    j->sp = (dsv41_sampler_params){.temperature = 1.0f, .top_p = 1.0f, .repeat_penalty = 1.0f};
    j->id_slot = -1;
    j->cache_prompt = 1;
    j->slot = -1;
    j->stop_hit = -1;
    j->trigger = -1;
    atomic_init(&j->cancel, 0);
    pthread_cond_init(&j->changed, NULL);
    return j;
}

void job_free(job *j) {
    if (!j) return;
    free(j->prompt);
    for (int i = 0; i < j->n_stops; i++) free(j->stops[i]);
    jb_free(&j->text);
    jb_free(&j->echo);
    jb_free(&j->custom);
    dsv41_grammar_free(j->grammar);
    free(j->marks);
    free(j->ids);
    pthread_cond_destroy(&j->changed);
    free(j);
}

void job_cancel(job *j) { atomic_store(&j->cancel, 1); }

int job_append(job *j, int32_t id, const char *piece, size_t n) {
    if (j->n_gen == j->cap_ids) {
        int32_t cap = j->cap_ids ? 2 * j->cap_ids : 64;
        size_t *nm = realloc(j->marks, (size_t)cap * sizeof *nm);
        if (nm) j->marks = nm;
        int32_t *ni = nm ? realloc(j->ids, (size_t)cap * sizeof *ni) : NULL;
        if (!ni) return -1;
        j->ids = ni;
        j->cap_ids = cap;
    }
    size_t from = j->text.n, held;
    jb_put(&j->text, piece, n);
    if (j->text.oom) return -1;
    j->ids[j->n_gen] = id;
    j->marks[j->n_gen++] = j->text.n;
    int64_t cut = dsv41_stop_find(j->text.p, j->text.n, from, (const char *const *)j->stops, j->n_stops, &held);
    if (cut >= 0) {
        for (int i = 0; i < j->n_stops && j->stop_hit < 0; i++) /* the stop that begins at the cut */
            if (j->text.n - (size_t)cut >= strlen(j->stops[i]) && !memcmp(j->text.p + cut, j->stops[i], strlen(j->stops[i])))
                j->stop_hit = i;
        j->text.n = (size_t)cut;
        j->text.p[j->text.n] = 0;
        return 1;
    }
    j->committed = j->text.n - held;
    return 0;
}
