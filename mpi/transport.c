/* transport.c - the library's transport over MPI (transport.h).
 *
 * Failure: MPI calls return their errors (MPI_ERRORS_RETURN) and every one is checked; an
 * error, or a follower that cannot repeat the leader's call, prints one line naming the rank
 * and aborts the whole job (MPI_Abort), since the other ranks would wait in the next
 * collective forever. A rank that dies is reported by mpirun, which ends the job. */
#include <limits.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dsv41_dist.h"
#include "transport.h"

static int rank; /* this process's, for the messages */

static void fail(void *ctx, const char *msg) {
    (void)ctx;
    fprintf(stderr, "dsv41: %s\n", msg);
    fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
    exit(1); /* MPI_Abort does not return; this keeps the promise if it did */
}

static void check(int rc, const char *what) {
    if (rc == MPI_SUCCESS) return;
    char err[MPI_MAX_ERROR_STRING], msg[MPI_MAX_ERROR_STRING + 128];
    int len = 0;
    if (MPI_Error_string(rc, err, &len) != MPI_SUCCESS) snprintf(err, sizeof err, "error code %d", rc);
    snprintf(msg, sizeof msg, "rank %d: MPI %s failed: %s", rank, what, err);
    fail(NULL, msg);
}

/* Parts above INT_MAX bytes (MPI counts are int) go as broadcasts of at most 1 GiB each. */
static void allgather(void *ctx, void *buf, const int64_t *counts) {
    int size;
    check(MPI_Comm_size(MPI_COMM_WORLD, &size), "Comm_size");
    int64_t total = 0;
    for (int r = 0; r < size; r++) total += counts[r];
    if (total <= INT_MAX) {
        int *cnt = malloc((size_t)size * sizeof *cnt), *off = malloc((size_t)size * sizeof *off);
        if (!cnt || !off) fail(ctx, "out of memory in allgather");
        for (int r = 0, at = 0; r < size; at += cnt[r], r++) cnt[r] = (int)counts[r], off[r] = at;
        check(MPI_Allgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, buf, cnt, off, MPI_BYTE, MPI_COMM_WORLD), "Allgatherv");
        free(cnt);
        free(off);
        return;
    }
    char *p = buf;
    for (int r = 0; r < size; p += counts[r], r++)
        for (int64_t done = 0; done < counts[r]; done += 1 << 30) {
            int64_t n = counts[r] - done < (1 << 30) ? counts[r] - done : 1 << 30;
            check(MPI_Bcast(p + done, (int)n, MPI_BYTE, r, MPI_COMM_WORLD), "Bcast");
        }
}

static void broadcast(void *ctx, void *buf, int64_t n) {
    (void)ctx;
    for (int64_t done = 0; done < n; done += 1 << 30) {
        int64_t k = n - done < (1 << 30) ? n - done : 1 << 30;
        check(MPI_Bcast((char *)buf + done, (int)k, MPI_BYTE, 0, MPI_COMM_WORLD), "Bcast");
    }
}

/* Takes `--split experts|rows` out of the command line, wherever it stands: rank 0's decides
 * (the load tells the others), so only rank 0 checks the word. */
static int32_t split_option(int *argc, char **argv) {
    int32_t split = DSV41_SPLIT_EXPERTS;
    for (int i = 1; i < *argc; i++) {
        if (strcmp(argv[i], "--split")) continue;
        const char *v = i + 1 < *argc ? argv[i + 1] : "";
        if (!strcmp(v, "rows")) split = DSV41_SPLIT_ROWS;
        else if (!strcmp(v, "experts")) split = DSV41_SPLIT_EXPERTS;
        else if (rank == 0) {
            char msg[160];
            snprintf(msg, sizeof msg, "--split takes experts or rows, not '%.60s'", v);
            fail(NULL, msg);
        }
        int n = i + 1 < *argc ? 2 : 1;
        for (int j = i; j + n <= *argc; j++) argv[j] = argv[j + n]; /* argv[argc] (NULL) moves too */
        *argc -= n;
        i--;
    }
    return split;
}

int transport_start(int *argc, char ***argv) {
    int provided, size;
    /* serialized: rank 0's library calls MPI from whichever thread runs a forward, one at a time */
    if (MPI_Init_thread(argc, argv, MPI_THREAD_SERIALIZED, &provided) != MPI_SUCCESS) {
        fprintf(stderr, "dsv41: MPI could not start\n");
        exit(1);
    }
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    check(MPI_Comm_rank(MPI_COMM_WORLD, &rank), "Comm_rank");
    check(MPI_Comm_size(MPI_COMM_WORLD, &size), "Comm_size");
    if (provided < MPI_THREAD_SERIALIZED) fail(NULL, "this MPI does not allow calls from more than one thread");
    dsv41_dist d = {rank, size, NULL, allgather, broadcast, fail, split_option(argc, *argv)};
    if (dsv41_set_dist(&d)) fail(NULL, dsv41_error());
    return rank;
}

void transport_end(void) { check(MPI_Finalize(), "Finalize"); }
