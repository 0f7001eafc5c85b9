/* main.c - dsv41-mpi: the dsv41 program with one model split across the ranks of an MPI job.
 *
 * Rank 0 runs the ordinary command line (cli/, built with its main renamed dsv41_cli_main):
 * it reads the input and prints. The other ranks follow its model calls (dsv41_follow). This
 * program is only the transport (transport.c): the library decides what is split and what
 * travels, and asks for two collectives, an in-place all-gather and a broadcast from rank 0. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "dsv41_dist.h"
#include "transport.h"

int dsv41_cli_main(int argc, char **argv);

int main(int argc, char **argv) {
    int rc;
    if (transport_start(&argc, &argv) == 0) {
        /* the one option of this program's own (the transport takes it out of argv) */
        if (argc == 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")))
            printf("dsv41-mpi: dsv41 with one model split across the ranks of an MPI job\n"
                   "  --split experts   (default) routed experts, Engram rows and the head split\n"
                   "  --split rows      every dense projection split by output rows too (one machine)\n\n");
        rc = dsv41_cli_main(argc, argv);
        dsv41_dist_end(rc);
    } else {
        signal(SIGINT, SIG_IGN); /* Ctrl-C is for rank 0's chat: it stops the reply */
        rc = dsv41_follow();
    }
    fflush(stdout);
    transport_end();
    return rc;
}
