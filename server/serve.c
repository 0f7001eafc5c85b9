/* serve.c - `dsv41 serve`: the flags, loading, and an orderly stop on SIGINT / SIGTERM.
 *
 * The signals are blocked in every thread and taken by sigwait on the main thread, so no
 * handler runs in the middle of a model call or a lock. On a stop signal the listener stops
 * accepting, every request is cancelled (a streamed one still gets its closing events), the
 * connections close once their handlers return, and the program exits 0. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "commands.h"
#include "http.h"

static const char usage[] =
    "serve -m DIR [--host 127.0.0.1] [--port 8080] [-np N] [-c CTX] [-t N] [--api-key KEY] [--timeout S] [--queue N] [--kernels SET]";

/* flag's value as an integer in [lo, hi]; -1 after a message */
static long long flag_int(const char *flag, const char *v, long long lo, long long hi) {
    char *end;
    long long x = strtoll(v, &end, 10);
    if (end == v || *end || x < lo || x > hi) {
        fprintf(stderr, "dsv41: serve: %s wants an integer from %lld to %lld, not '%s'\n", flag, lo, hi, v);
        return -1;
    }
    return x;
}

int cmd_serve(int argc, char **argv) {
    const char *dir = NULL, *host = "127.0.0.1", *key = NULL, *kernels = NULL;
    long long port = 8080, slots = 1, ctx = 0, threads = 0, timeout = 600, queue = 64;
    for (int i = 0; i < argc; i += 2) { /* every flag takes a value */
        const char *f = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        long long *num = !strcmp(f, "--port") ? &port : !strcmp(f, "-np") ? &slots : !strcmp(f, "-c") ? &ctx
                       : !strcmp(f, "-t") ? &threads : !strcmp(f, "--timeout") ? &timeout : !strcmp(f, "--queue") ? &queue : NULL;
        if (!v) {
            fprintf(stderr, "dsv41: serve: '%s' needs a value or is unknown (usage: dsv41 %s)\n", f, usage);
            return 2;
        }
        if (!strcmp(f, "-m")) dir = v;
        else if (!strcmp(f, "--host")) host = v;
        else if (!strcmp(f, "--api-key")) key = v;
        else if (!strcmp(f, "--kernels")) kernels = v;
        else if (!num) {
            fprintf(stderr, "dsv41: serve: unknown flag '%s' (usage: dsv41 %s)\n", f, usage);
            return 2;
        } else {
            long long lo = num == &port ? 0 : 1, hi = num == &port ? 65535 : num == &threads ? 256 : 1000000000;
            if ((*num = flag_int(f, v, lo, hi)) < 0) return 2;
        }
    }
    if (!dir) {
        fprintf(stderr, "dsv41: serve: give the checkpoint directory with -m DIR (usage: dsv41 %s)\n", usage);
        return 2;
    }
    if (key && !*key) {
        fprintf(stderr, "dsv41: serve: --api-key is empty\n");
        return 2;
    }
    if (use_kernels(kernels)) return 2;
    if (threads && dsv41_set_threads((int32_t)threads)) {
        fprintf(stderr, "dsv41: serve: %s\n", dsv41_error());
        return 2;
    }

    server sv = {0};
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    dsv41_model *m = dsv41_model_load(dir);
    dsv41_tokenizer *tk = m ? dsv41_tokenizer_load(path) : NULL;
    int rc = 1;
    if (!m || !tk) fprintf(stderr, "dsv41: serve: %s\n", dsv41_error());
    else if (dsv41_tokenizer_n_vocab(tk) > dsv41_model_vocab_size(m))
        fprintf(stderr, "dsv41: serve: %s has %d tokens but the model only %d\n", path, dsv41_tokenizer_n_vocab(tk),
                dsv41_model_vocab_size(m));
    else if (ctx > dsv41_model_max_seq_len(m))
        fprintf(stderr, "dsv41: serve: -c %lld is over the model's context of %d tokens\n", ctx, dsv41_model_max_seq_len(m));
    else rc = 0;
    if (rc) {
        dsv41_tokenizer_free(tk);
        dsv41_model_free(m);
        return 1;
    }
    size_t len = strlen(dir);
    while (len > 1 && dir[len - 1] == '/') len--;
    size_t start = len;
    while (start > 0 && dir[start - 1] != '/') start--;
    snprintf(sv.model_name, sizeof sv.model_name, "%.*s", (int)(len - start), dir + start);
    sv.ctx = ctx ? (int32_t)ctx : dsv41_model_max_seq_len(m);
    sv.tok = tk;
    sv.api_key = key;
    sv.body_limit = 8u << 20;
    pthread_mutex_init(&sv.mu, NULL);

    /* blocked here, before any thread starts, so every thread inherits the mask */
    sigset_t stop;
    sigemptyset(&stop);
    sigaddset(&stop, SIGINT);
    sigaddset(&stop, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stop, NULL);
    signal(SIGPIPE, SIG_IGN);

    int bound = 0;
    struct MHD_Daemon *d = NULL;
    sv.sched = sched_start(m, tk, (int32_t)slots, (int32_t)queue, sv.ctx);
    if (sv.sched) d = http_start(&sv, host, (int)port, (int)timeout, &bound);
    if (d) {
        fprintf(stderr, "dsv41 serve: %s on http://%s:%d (%lld slots, context %d tokens)\n", sv.model_name, host, bound, slots, sv.ctx);
        int sig = 0;
        sigwait(&stop, &sig);
        fprintf(stderr, "dsv41 serve: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
        http_quiesce(d);
        sched_shutdown(sv.sched);
        http_stop(&sv, d);
    }
    if (sv.sched) sched_stop(sv.sched);
    pthread_mutex_destroy(&sv.mu);
    dsv41_tokenizer_free(tk);
    dsv41_model_free(m);
    return d ? 0 : 1;
}
