/* serve.c - `dsv41 serve`: the flags, loading, and an orderly stop on SIGINT / SIGTERM.
 *
 * The signals are blocked in every thread and taken by sigwait on the main thread, so no
 * handler runs in the middle of a model call or a lock. On a stop signal the listener stops
 * accepting, every request is cancelled (a streamed one still gets its closing events), the
 * connections close once their handlers return, and the program exits 0. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "commands.h"
#include "http.h"

int cmd_serve(int argc, char **argv) {
    const char *dir = NULL, *host = "127.0.0.1", *key = NULL, *kernels = NULL, *slot_dir = NULL;
    int32_t port = 8080, slots = 1, ctx = 0, threads = 0, timeout = 600, queue = 64, snaps = 4, draft = 0;
    dsv41_draft_policy policy = dsv41_draft_policy_default();
    const cli_opt opts[] = {
        {"-m|--model", "DIR", OPT_STR, &dir, 0, 0, NULL, OPT_REQUIRED, "the checkpoint to serve (with its tokenizer.json)"},
        {"--host", "ADDR", OPT_STR, &host, 0, 0, NULL, "127.0.0.1", "the address to bind"},
        {"--port", "N", OPT_I32, &port, 0, 65535, NULL, "8080", "the port; 0 takes any free one (the first line names it)"},
        {"-np|--parallel", "N", OPT_I32, &slots, 1, 1000000000, NULL, "1", "slots: requests served at once"},
        {"-c|--ctx-size", "N", OPT_I32, &ctx, 1, 1000000000, NULL, "the model's max_seq_len", "the most tokens of prompt plus reply"},
        OPT_THREADS(&threads),
        {"--api-key", "KEY", OPT_STR, &key, 0, 0, NULL, "none", "require this key as a Bearer token"},
        {"--timeout", "S", OPT_I32, &timeout, 1, 1000000000, NULL, "600", "close a connection idle for S seconds"},
        {"--queue", "N", OPT_I32, &queue, 1, 1000000000, NULL, "64", "requests that may wait for a slot (then 503)"},
        {"--slot-snapshots", "N", OPT_I32, &snaps, 0, 1000, NULL, "4", "states kept per slot for the prompt cache"},
        {"--slot-save-path", "DIR", OPT_STR, &slot_dir, 0, 0, NULL, "none", "the folder of slot files (POST /slots/ID)"},
        OPT_DRAFT(&draft),
        OPT_DRAFT_P_MIN(&policy.p_min),
        OPT_KERNELS(&kernels),
    };
    const cli_cmd cmd = {.name = "serve",
                         .synopsis = "-m DIR [options]",
                         .about = "An OpenAI-compatible HTTP server: chat and raw completions, streaming, tool calls, a chat\n"
                                  "page at /. One log line per request on stderr; SIGINT or SIGTERM stops it.",
                         .opts = opts,
                         .n_opts = N_OPTS(opts)};
    int rc = args_parse(&cmd, argc, argv);
    if (rc >= 0) return rc;
    if (key && !*key) {
        fprintf(stderr, "dsv41: serve: --api-key is empty\n");
        return 2;
    }
    if (args_apply_threads(threads) || use_kernels(kernels)) return 2;
    /* the slot folder, made when missing, resolved once: every slot file is named relative to it */
    char slot_real[PATH_MAX];
    int slot_fd = -1;
    if (slot_dir) {
        if (mkdir(slot_dir, 0700) && errno != EEXIST) {
            fprintf(stderr, "dsv41: serve: --slot-save-path %s: %s\n", slot_dir, strerror(errno));
            return 1;
        }
        if (!realpath(slot_dir, slot_real) || (slot_fd = open(slot_real, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0) {
            fprintf(stderr, "dsv41: serve: --slot-save-path %s: %s\n", slot_dir, strerror(errno));
            return 1;
        }
    }

    server sv = {0};
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    dsv41_model *m = dsv41_model_load(dir);
    dsv41_tokenizer *tk = m ? dsv41_tokenizer_load(path) : NULL;
    rc = 1;
    if (!m || !tk) fprintf(stderr, "dsv41: serve: %s\n", dsv41_error());
    else if (dsv41_tokenizer_n_vocab(tk) > dsv41_model_vocab_size(m))
        fprintf(stderr, "dsv41: serve: %s has %d tokens but the model only %d\n", path, dsv41_tokenizer_n_vocab(tk),
                dsv41_model_vocab_size(m));
    else if (ctx > dsv41_model_max_seq_len(m))
        fprintf(stderr, "dsv41: serve: -c %d is over the model's context of %d tokens\n", ctx, dsv41_model_max_seq_len(m));
    else rc = 0;
    if (rc) {
        if (slot_fd >= 0) close(slot_fd);
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
    sv.n_slots = slots;
    sv.slot_dir = slot_dir ? slot_real : NULL;
    sv.slot_dirfd = slot_fd;
    sv.api_key = key;
    /* a prompt of token ids as long as the context must fit: 16 bytes an id is room for
     * "129279, " and then some */
    sv.body_limit = (size_t)sv.ctx * 16 > (8u << 20) ? (size_t)sv.ctx * 16 : 8u << 20;
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
    sv.sched = sched_start(m, tk, (int32_t)slots, (int32_t)snaps, (int32_t)queue, sv.ctx, draft, policy);
    if (sv.sched) d = http_start(&sv, host, (int)port, (int)timeout, &bound);
    if (d) {
        fprintf(stderr, "dsv41 serve: %s on http://%s:%d (%d slots, context %d tokens)\n", sv.model_name, host, bound, slots, sv.ctx);
        int sig = 0;
        sigwait(&stop, &sig);
        fprintf(stderr, "dsv41 serve: %s: stopping\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
        http_quiesce(d);
        sched_shutdown(sv.sched);
        http_stop(&sv, d);
    }
    if (sv.sched) sched_stop(sv.sched);
    pthread_mutex_destroy(&sv.mu);
    if (slot_fd >= 0) close(slot_fd);
    dsv41_tokenizer_free(tk);
    dsv41_model_free(m);
    return d ? 0 : 1;
}
