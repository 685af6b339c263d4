/* Launch detection: who started this process and which rank it is, from the launcher's
 * environment variables only (launch.c; nothing is initialised). comm.c builds the world from
 * the answer; the public interface is comm.h, which includes this header.
 * Exports: mg_launch_kind, mg_launch_info, mg_launch_detect. Needs: core/status. */
#ifndef MG_COMM_LAUNCH_H
#define MG_COMM_LAUNCH_H

#include "core/status.h"

typedef enum {
    MG_LAUNCH_SINGLE = 0, /* plain `megatron ...`: one rank, no MPI_Init */
    MG_LAUNCH_MPI, /* mpirun/mpiexec (OMPI_COMM_WORLD_*, PMIX_RANK, PMI_RANK) or srun (SLURM_*) */
    MG_LAUNCH_ENV, /* torchrun-style RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR, MASTER_PORT */
} mg_launch_kind;

typedef struct {
    mg_launch_kind kind;
    char launcher[16]; /* "single", "mpirun", "srun", "torchrun" */
    int rank, world_size;
    int local_rank, local_world_size; /* selects the GPU: device = local_rank */
    char master_addr[256];            /* MG_LAUNCH_ENV */
    int master_port;                  /* MG_LAUNCH_ENV */
} mg_launch_info;

/* Reads the launcher's variables; rejects inconsistent ones (RANK >= WORLD_SIZE, a missing
 * MASTER_ADDR with WORLD_SIZE > 1, ...) with MG_ERR_USAGE naming the variable. */
mg_status mg_launch_detect(mg_launch_info *out);

#endif
