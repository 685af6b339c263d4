/* Internal to src/comm: the MPI process under an MPI launch (mpirun/srun), whichever backend
 * moves the data (mpi_bootstrap.c): MPI_Init/MPI_Finalize, the exchange that opens the world's
 * failure channel, and the pacing between two MPI_Tests. comm.c calls the bootstrap and the
 * shutdown; the MPI backend (mpi.c) calls the pacing. Only with MG_HAVE_MPI.
 * Exports: mg_comm_mpi_bootstrap, mg_comm_mpi_shutdown, mg_comm_mpi_backoff*.
 * Needs: comm/launch, comm/health, Open MPI. */
#ifndef MG_COMM_MPI_BOOTSTRAP_H
#define MG_COMM_MPI_BOOTSTRAP_H
#ifdef MG_HAVE_MPI

#include "comm/health.h"
#include "comm/launch.h"
#include "core/status.h"

#include <stdbool.h>

/* MPI_Init_thread unless MPI is initialised, checks MPI's rank and size against the launch, then
 * rank 0 reserves a free port and MPI_Bcasts "host port"; every rank opens the channel there.
 * Bounded by timeout_s. */
mg_status mg_comm_mpi_bootstrap(const mg_launch_info *li, double timeout_s, mg_comm_health **out);
/* MPI_Finalize when bootstrap initialised MPI and clean; after a failure it is skipped, since
 * Open MPI's MPI_Finalize synchronises with peers that may be gone. */
void mg_comm_mpi_shutdown(bool clean);

/* Between two MPI_Tests of an unfinished operation (iter: tests so far; waited: seconds since it
 * started): returns at once, yields or sleeps (mpi_bootstrap.c says when). */
void mg_comm_mpi_backoff(int iter, double waited);
/* Sleeps only where this host runs more ranks (local_world_size) than it has cores. */
void mg_comm_mpi_backoff_setup(int local_world_size);

#endif
#endif
