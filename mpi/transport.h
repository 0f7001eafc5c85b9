/* transport.h - the library's transport over MPI (transport.c), for dsv41-mpi and the MPI
 * tests: MPI started, the collectives the library asks for (an in-place all-gather and a
 * broadcast from rank 0) and the call that ends the job. */
#ifndef DSV41_MPI_TRANSPORT_H
#define DSV41_MPI_TRANSPORT_H

/* Starts MPI and gives the library its transport (dsv41_set_dist), split as `--split experts`
 * or `--split rows` on the command line says (taken out of it; experts without); returns this
 * process's rank. A failure prints one line and ends the job. */
int transport_start(int *argc, char ***argv);
/* Ends MPI (after rank 0's dsv41_dist_end and the others' dsv41_follow). */
void transport_end(void);

#endif
