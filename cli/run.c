/* run.c - `dsv41 run`: a prompt of token ids (--ids) or of text (-p / -f, through chat.c's
 * run_text); its flags are gen.c's, shared with chat. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "clock.h"
#include "commands.h"

static int fail(const char *what) {
    fprintf(stderr, "dsv41: %s\n", what);
    return 1;
}

/* Prefills the ids and samples n_new more (greedy unless told), printing them as one line of
 * comma-separated ids. Stops at the context with a note; Ctrl-C exits 130 (128 + the signal). */
static int run_ids(const gen_opts *o) {
    int32_t *hist, n_ids;
    if (ids_read(o->ids, &hist, &n_ids)) return 1;
    progress_on();
    dsv41_model *m = o->dir ? dsv41_model_load(o->dir) : dsv41_model_builtin();
    if (!m) { free(hist); return fail(dsv41_error()); }
    int32_t V = dsv41_model_vocab_size(m), ctx = dsv41_model_max_seq_len(m);
    if (o->ctx && o->ctx < ctx) ctx = o->ctx;
    int64_t n_new = o->n_new < 0 ? 16 : o->n_new;
    if (n_ids > ctx) {
        fprintf(stderr, "dsv41: run: %d prompt tokens exceed the context of %d tokens\n", n_ids, ctx);
        free(hist);
        dsv41_model_free(m);
        return 1;
    }
    if (n_ids + n_new > ctx) {
        n_new = ctx - n_ids;
        fprintf(stderr, "note: stopping at the context of %d tokens, after %lld new tokens\n", ctx, (long long)n_new);
    }
    int32_t *grown = realloc(hist, (size_t)(n_ids + n_new) * sizeof *hist);
    if (!grown) { free(hist); dsv41_model_free(m); return fail("out of memory"); }
    hist = grown;
    dsv41_session *s = dsv41_session_new(m);
    dsv41_sampler *smp = dsv41_sampler_new(&o->sp, V);
    float *logits = malloc((size_t)V * sizeof *logits);
    int rc = !s || !smp || !logits ? fail(dsv41_error()) : 0;
    double t0 = now_s();
    if (rc == 0 && dsv41_session_forward(s, hist, n_ids, logits, NULL)) rc = fail(dsv41_error());
    if (rc == 0) gen_note_seed(o);
    double t1 = now_s();
    int64_t done = 0, rounds = 0, n_drafted = 0, n_kept = 0;
    dsv41_draft_policy policy = o->policy;
    if (rc == 0 && o->draft > 0 && n_new > 0) { /* speculative rounds: the same ids, several a forward */
        int32_t *out = malloc((size_t)(o->draft + 1) * sizeof *out), anchor = dsv41_sample_pick(smp, logits, hist, n_ids, NULL);
        if (!out || anchor < 0) rc = fail(out ? dsv41_error() : "out of memory");
        else printf("%d", anchor);
        for (done = 1; rc == 0 && done < n_new && !cli_signal; rounds++) {
            int64_t room = n_new - done - 1;
            int32_t drafted, got = dsv41_session_speculate(s, anchor, room < o->draft ? (int32_t)room : o->draft, &policy,
                                                            dsv41_sample_pick, smp, out, &drafted);
            if (got < 0) { rc = fail(dsv41_error()); break; }
            for (int32_t i = 0; i < got; i++) printf(",%d", out[i]);
            fflush(stdout);
            done += got;
            anchor = out[got - 1];
            n_drafted += drafted, n_kept += got - 1;
        }
        free(out);
    }
    for (; rc == 0 && o->draft == 0 && done < n_new && !cli_signal; done++) {
        int32_t next = dsv41_sample_pick(smp, logits, hist, n_ids + (int32_t)done, NULL);
        if (next < 0) { rc = fail(dsv41_error()); break; }
        hist[n_ids + done] = next;
        printf("%s%d", done ? "," : "", next);
        fflush(stdout);
        if (done + 1 < n_new && dsv41_session_forward(s, &next, 1, logits, NULL)) rc = fail(dsv41_error());
    }
    double t2 = now_s();
    if (done) printf("\n");
    fflush(stdout); /* the line ends before the timings reach stderr, on a terminal too */
    if (rc == 0) {
        double gen = done > 1 ? (double)(done - 1) / (t2 - t1) : 0.0;
        fprintf(stderr, "prompt: %d tokens, %.1f tok/s | generated: %lld tokens, %.1f tok/s\n", n_ids, n_ids / (t1 - t0),
                (long long)done, gen);
        if (rounds)
            fprintf(stderr, "speculative: %lld forwards for %lld tokens (%.2f a forward), %lld drafts, %lld accepted\n",
                    (long long)rounds, (long long)(done - 1), (double)(done - 1) / (double)rounds, (long long)n_drafted,
                    (long long)n_kept);
    }
    free(logits);
    free(hist);
    dsv41_sampler_free(smp);
    dsv41_session_free(s);
    dsv41_model_free(m);
    return cli_signal ? 128 + cli_signal : rc;
}

int cmd_run(int argc, char **argv) {
    gen_opts o;
    int rc = gen_parse(0, argc, argv, &o);
    if (rc >= 0) return rc;
    cli_catch_signals(1); /* from here Ctrl-C ends the run with 130, after the call in progress */
    return o.ids ? run_ids(&o) : run_text(&o);
}
