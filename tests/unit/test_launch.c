/* comm/launch: mg_launch_detect under each launcher's variables, their nesting, and every kind
 * of bad value. Each test starts from an environment without any launch variable and puts the
 * original one back at the end (the suite itself may run under mpirun or srun). */
#include "test.h"

#include "comm/comm.h"
#include "core/status.h"

#include <stdlib.h>
#include <string.h>

static const char *const VARS[] = {"RANK",
                                   "WORLD_SIZE",
                                   "LOCAL_RANK",
                                   "LOCAL_WORLD_SIZE",
                                   "MASTER_ADDR",
                                   "MASTER_PORT",
                                   "OMPI_COMM_WORLD_RANK",
                                   "OMPI_COMM_WORLD_SIZE",
                                   "OMPI_COMM_WORLD_LOCAL_RANK",
                                   "OMPI_COMM_WORLD_LOCAL_SIZE",
                                   "PMIX_RANK",
                                   "PMI_RANK",
                                   "PMI_SIZE",
                                   "MPI_LOCALRANKID",
                                   "MPI_LOCALNRANKS",
                                   "SLURM_JOB_ID",
                                   "SLURM_PROCID",
                                   "SLURM_STEP_ID",
                                   "SLURM_STEPID",
                                   "SLURM_STEP_NUM_TASKS",
                                   "SLURM_NTASKS",
                                   "SLURM_LOCALID",
                                   "SLURM_GTIDS",
                                   "SLURM_NODEID",
                                   "SLURM_STEP_TASKS_PER_NODE",
                                   "SLURM_TASKS_PER_NODE",
                                   "SLURM_NTASKS_PER_NODE"};
enum { N_VARS = sizeof VARS / sizeof VARS[0] };

typedef struct {
    char *saved[N_VARS];
} env_guard;

static void env_begin(env_guard *g) {
    for (int i = 0; i < N_VARS; i++) {
        const char *v = getenv(VARS[i]);
        g->saved[i] = v ? strdup(v) : NULL;
        unsetenv(VARS[i]);
    }
}

static void env_end(env_guard *g) {
    for (int i = 0; i < N_VARS; i++) {
        if (g->saved[i])
            setenv(VARS[i], g->saved[i], 1);
        else
            unsetenv(VARS[i]);
        free(g->saved[i]);
    }
}

/* Clears every launch variable, then sets "NAME", "value", ... pairs (NULL ends the list). */
static void env_only(const char *const *kv) {
    for (int i = 0; i < N_VARS; i++) unsetenv(VARS[i]);
    for (; kv && kv[0]; kv += 2) setenv(kv[0], kv[1], 1);
}

static bool same(const mg_launch_info *li, mg_launch_kind kind, const char *launcher, int rank,
                 int world, int lrank, int lworld) {
    return li->kind == kind && !strcmp(li->launcher, launcher) && li->rank == rank &&
           li->world_size == world && li->local_rank == lrank && li->local_world_size == lworld;
}

#define EXPECT_LAUNCH(kv, kind_, launcher_, rank_, world_, lrank_, lworld_)                        \
    do {                                                                                           \
        const char *const kv_[] = {kv, NULL};                                                      \
        env_only(kv_);                                                                             \
        mg_launch_info li_;                                                                        \
        memset(&li_, 0x5a, sizeof li_);                                                            \
        MG_EXPECT_OK(mg_launch_detect(&li_));                                                      \
        MG_EXPECT(same(&li_, kind_, launcher_, rank_, world_, lrank_, lworld_),                    \
                  "%s: got kind %d '%s' rank %d/%d local %d/%d", #kv, (int)li_.kind, li_.launcher, \
                  li_.rank, li_.world_size, li_.local_rank, li_.local_world_size);                 \
    } while (0)

#define ARGS(...) __VA_ARGS__

MG_TEST(launch_single_without_launcher) {
    env_guard g;
    env_begin(&g);
    EXPECT_LAUNCH(ARGS(NULL, NULL), MG_LAUNCH_SINGLE, "single", 0, 1, 0, 1);
    /* An sbatch or salloc shell has job variables, even SLURM_PROCID=0, but no step: one rank. */
    EXPECT_LAUNCH(ARGS("SLURM_JOB_ID", "4711", "SLURM_PROCID", "0", "SLURM_NTASKS", "8",
                       "SLURM_LOCALID", "0", "SLURM_NODEID", "0", "SLURM_TASKS_PER_NODE", "4(x2)",
                       "SLURM_GTIDS", "0"),
                  MG_LAUNCH_SINGLE, "single", 0, 1, 0, 1);
    /* srun -n 1: a step of one task needs no communication. */
    EXPECT_LAUNCH(ARGS("SLURM_JOB_ID", "4711", "SLURM_STEP_ID", "0", "SLURM_PROCID", "0",
                       "SLURM_STEP_NUM_TASKS", "1", "SLURM_NTASKS", "1", "SLURM_LOCALID", "0",
                       "SLURM_GTIDS", "0"),
                  MG_LAUNCH_SINGLE, "srun", 0, 1, 0, 1);
    env_end(&g);
}

MG_TEST(launch_torchrun_variables) {
    env_guard g;
    env_begin(&g);
    const char *const kv[] = {
        "RANK", "5",           "WORLD_SIZE", "8",           "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE",
        "4",    "MASTER_ADDR", "node-a",     "MASTER_PORT", "29500",      NULL};
    env_only(kv);
    mg_launch_info li;
    MG_EXPECT_OK(mg_launch_detect(&li));
    MG_EXPECT(same(&li, MG_LAUNCH_ENV, "torchrun", 5, 8, 1, 4), "rank %d/%d local %d/%d", li.rank,
              li.world_size, li.local_rank, li.local_world_size);
    MG_EXPECT(!strcmp(li.master_addr, "node-a") && li.master_port == 29500, "%s:%d", li.master_addr,
              li.master_port);
    /* By hand, Megatron style: no LOCAL_* means one node; an IPv6 literal is a fine address. */
    const char *const hand[] = {"RANK", "1",           "WORLD_SIZE", "2", "MASTER_ADDR",
                                "::1",  "MASTER_PORT", "6000",       NULL};
    env_only(hand);
    MG_EXPECT_OK(mg_launch_detect(&li));
    MG_EXPECT(same(&li, MG_LAUNCH_ENV, "torchrun", 1, 2, 1, 2) && !strcmp(li.master_addr, "::1") &&
                  li.master_port == 6000,
              "rank %d/%d local %d/%d at %s:%d", li.rank, li.world_size, li.local_rank,
              li.local_world_size, li.master_addr, li.master_port);
    /* One rank alone needs no address: loopback and any port. */
    const char *const one[] = {"RANK", "0", "WORLD_SIZE", "1", NULL};
    env_only(one);
    MG_EXPECT_OK(mg_launch_detect(&li));
    MG_EXPECT(same(&li, MG_LAUNCH_ENV, "torchrun", 0, 1, 0, 1) &&
                  !strcmp(li.master_addr, "127.0.0.1") && li.master_port == 0,
              "%s:%d", li.master_addr, li.master_port);
    /* LOCAL_RANK without LOCAL_WORLD_SIZE: the node is bounded by the world. */
    EXPECT_LAUNCH(ARGS("RANK", "6", "WORLD_SIZE", "8", "LOCAL_RANK", "2", "MASTER_ADDR", "h",
                       "MASTER_PORT", "1"),
                  MG_LAUNCH_ENV, "torchrun", 6, 8, 2, 8);
    env_end(&g);
}

MG_TEST(launch_mpi_launchers) {
    env_guard g;
    env_begin(&g);
    EXPECT_LAUNCH(ARGS("OMPI_COMM_WORLD_RANK", "3", "OMPI_COMM_WORLD_SIZE", "4",
                       "OMPI_COMM_WORLD_LOCAL_RANK", "1", "OMPI_COMM_WORLD_LOCAL_SIZE", "2"),
                  MG_LAUNCH_MPI, "mpirun", 3, 4, 1, 2);
    EXPECT_LAUNCH(ARGS("OMPI_COMM_WORLD_RANK", "0", "OMPI_COMM_WORLD_SIZE", "1"), MG_LAUNCH_MPI,
                  "mpirun", 0, 1, 0, 1);
    EXPECT_LAUNCH(ARGS("OMPI_COMM_WORLD_RANK", "2", "OMPI_COMM_WORLD_SIZE", "3"), MG_LAUNCH_MPI,
                  "mpirun", 2, 3, 2, 3); /* no local variables: one node */
    /* MPICH / Intel MPI (hydra). */
    EXPECT_LAUNCH(
        ARGS("PMI_RANK", "3", "PMI_SIZE", "4", "MPI_LOCALRANKID", "1", "MPI_LOCALNRANKS", "2"),
        MG_LAUNCH_MPI, "mpirun", 3, 4, 1, 2);
    /* srun --mpi=pmix: the step's own variables give the size and the node. */
    EXPECT_LAUNCH(ARGS("PMIX_RANK", "2", "SLURM_JOB_ID", "9", "SLURM_STEP_ID", "0", "SLURM_PROCID",
                       "2", "SLURM_STEP_NUM_TASKS", "4", "SLURM_NTASKS", "4", "SLURM_LOCALID", "0",
                       "SLURM_NODEID", "1", "SLURM_GTIDS", "2,3"),
                  MG_LAUNCH_MPI, "srun", 2, 4, 0, 2);
    /* Plain srun: the node's task count from SLURM_GTIDS, else the compressed list. */
    EXPECT_LAUNCH(ARGS("SLURM_JOB_ID", "9", "SLURM_STEP_ID", "3", "SLURM_PROCID", "5",
                       "SLURM_STEP_NUM_TASKS", "8", "SLURM_NTASKS", "8", "SLURM_LOCALID", "1",
                       "SLURM_NODEID", "1", "SLURM_GTIDS", "4,5,6,7"),
                  MG_LAUNCH_MPI, "srun", 5, 8, 1, 4);
    EXPECT_LAUNCH(ARGS("SLURM_STEPID", "3", "SLURM_PROCID", "6", "SLURM_NTASKS", "7",
                       "SLURM_LOCALID", "0", "SLURM_NODEID", "2", "SLURM_STEP_TASKS_PER_NODE",
                       "3,2(x2)"),
                  MG_LAUNCH_MPI, "srun", 6, 7, 0, 2);
    EXPECT_LAUNCH(ARGS("SLURM_STEP_ID", "0", "SLURM_PROCID", "1", "SLURM_NTASKS", "4",
                       "SLURM_LOCALID", "1", "SLURM_NTASKS_PER_NODE", "2"),
                  MG_LAUNCH_MPI, "srun", 1, 4, 1, 2);
    env_end(&g);
}

MG_TEST(launch_precedence_innermost_first) {
    env_guard g;
    env_begin(&g);
    /* torchrun started by srun on each of 2 nodes: srun's variables describe the node. */
    EXPECT_LAUNCH(ARGS("SLURM_STEP_ID", "0", "SLURM_PROCID", "1", "SLURM_STEP_NUM_TASKS", "2",
                       "SLURM_LOCALID", "0", "SLURM_GTIDS", "1", "RANK", "5", "WORLD_SIZE", "8",
                       "LOCAL_RANK", "1", "LOCAL_WORLD_SIZE", "4", "MASTER_ADDR", "node-a",
                       "MASTER_PORT", "29500"),
                  MG_LAUNCH_ENV, "torchrun", 5, 8, 1, 4);
    /* A job script exporting RANK=$OMPI_COMM_WORLD_RANK: the same launch, MPI (no address
     * needed), even when the mirror is only half there. */
    EXPECT_LAUNCH(ARGS("OMPI_COMM_WORLD_RANK", "3", "OMPI_COMM_WORLD_SIZE", "4", "RANK", "3",
                       "WORLD_SIZE", "4"),
                  MG_LAUNCH_MPI, "mpirun", 3, 4, 3, 4);
    EXPECT_LAUNCH(ARGS("OMPI_COMM_WORLD_RANK", "3", "OMPI_COMM_WORLD_SIZE", "4", "RANK", "3"),
                  MG_LAUNCH_MPI, "mpirun", 3, 4, 3, 4);
    /* mpirun inside an allocation starts its daemons with srun (one task per node): Open MPI's
     * variables win over the daemons' step. */
    EXPECT_LAUNCH(ARGS("SLURM_JOB_ID", "9", "SLURM_STEP_ID", "1", "SLURM_PROCID", "0",
                       "SLURM_STEP_NUM_TASKS", "2", "SLURM_LOCALID", "0", "OMPI_COMM_WORLD_RANK",
                       "5", "OMPI_COMM_WORLD_SIZE", "8", "OMPI_COMM_WORLD_LOCAL_RANK", "1",
                       "OMPI_COMM_WORLD_LOCAL_SIZE", "4"),
                  MG_LAUNCH_MPI, "mpirun", 5, 8, 1, 4);
    /* MPICH's mpiexec under Slurm: the PMI rank differs from the daemon's step rank. */
    EXPECT_LAUNCH(ARGS("SLURM_STEP_ID", "1", "SLURM_PROCID", "1", "SLURM_STEP_NUM_TASKS", "2",
                       "SLURM_LOCALID", "0", "PMI_RANK", "6", "PMI_SIZE", "8", "MPI_LOCALRANKID",
                       "2", "MPI_LOCALNRANKS", "4"),
                  MG_LAUNCH_MPI, "mpirun", 6, 8, 2, 4);
    /* torchrun-style variables with broken Slurm ones around: the inner launch decides. */
    EXPECT_LAUNCH(ARGS("SLURM_STEP_ID", "0", "SLURM_PROCID", "x", "RANK", "1", "WORLD_SIZE", "2",
                       "MASTER_ADDR", "h", "MASTER_PORT", "29500"),
                  MG_LAUNCH_ENV, "torchrun", 1, 2, 1, 2);
    env_end(&g);
}

/* Sets the variables, expects MG_ERR_USAGE with substr, and that *out was not touched. */
#define EXPECT_BAD(kv, substr)                                                                     \
    do {                                                                                           \
        const char *const kv_[] = {kv, NULL};                                                      \
        env_only(kv_);                                                                             \
        mg_launch_info li_, before_;                                                               \
        memset(&li_, 0x5a, sizeof li_);                                                            \
        before_ = li_;                                                                             \
        MG_EXPECT_ERROR(mg_launch_detect(&li_), MG_ERR_USAGE, substr);                             \
        MG_EXPECT(!memcmp(&li_, &before_, sizeof li_), "%s: output written on error", #kv);        \
    } while (0)

MG_TEST(launch_bad_values_name_the_variable) {
    env_guard g;
    env_begin(&g);
    char long_addr[301];
    memset(long_addr, 'a', 300);
    long_addr[300] = '\0';
#define ADDR "MASTER_ADDR", "h", "MASTER_PORT", "29500"
    EXPECT_BAD(ARGS("RANK", "abc", "WORLD_SIZE", "2", ADDR),
               "RANK='abc' is not an integer; set RANK to this process's rank");
    EXPECT_BAD(ARGS("RANK", "", "WORLD_SIZE", "2", ADDR), "RANK='' is not an integer");
    EXPECT_BAD(ARGS("RANK", "1\nx", "WORLD_SIZE", "2", ADDR), "RANK='1?x' is not an integer");
    EXPECT_BAD(ARGS("RANK", "99999999999", "WORLD_SIZE", "2", ADDR),
               "RANK='99999999999' is not an integer");
    EXPECT_BAD(ARGS("RANK", "-1", "WORLD_SIZE", "2", ADDR), "RANK=-1 must be at least 0");
    EXPECT_BAD(ARGS("RANK", "0", "WORLD_SIZE", "0", ADDR), "WORLD_SIZE=0 must be at least 1");
    EXPECT_BAD(ARGS("RANK", "2", "WORLD_SIZE", "2", ADDR),
               "RANK=2 is not below WORLD_SIZE=2; ranks run from 0 to WORLD_SIZE-1");
    EXPECT_BAD(ARGS("RANK", "0", "WORLD_SIZE", "2", "MASTER_PORT", "29500"),
               "WORLD_SIZE=2 but MASTER_ADDR is not set; every rank needs MASTER_ADDR");
    EXPECT_BAD(ARGS("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "", "MASTER_PORT", "29500"),
               "WORLD_SIZE=2 but MASTER_ADDR is not set");
    EXPECT_BAD(ARGS("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "h"),
               "WORLD_SIZE=2 but MASTER_PORT is not set");
    EXPECT_BAD(ARGS("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "70000"),
               "MASTER_PORT=70000 is not a TCP port (1..65535); choose a free TCP port");
    EXPECT_BAD(ARGS("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "0"),
               "MASTER_PORT=0 must be at least 1");
    EXPECT_BAD(ARGS("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", "h", "MASTER_PORT", "29500x"),
               "MASTER_PORT='29500x' is not an integer");
    EXPECT_BAD(ARGS("RANK", "0", "WORLD_SIZE", "2", "MASTER_ADDR", long_addr, "MASTER_PORT", "1"),
               "MASTER_ADDR is 300 characters long; a host name has at most 255");
    EXPECT_BAD(
        ARGS("RANK", "3", "WORLD_SIZE", "8", "LOCAL_RANK", "4", "LOCAL_WORLD_SIZE", "4", ADDR),
        "LOCAL_RANK=4 is not below LOCAL_WORLD_SIZE (4); local ranks run from 0 to 3 on each node");
    EXPECT_BAD(ARGS("RANK", "3", "WORLD_SIZE", "8", "LOCAL_RANK", "-2", ADDR),
               "LOCAL_RANK=-2 must be at least 0");
    EXPECT_BAD(
        ARGS("RANK", "3", "WORLD_SIZE", "8", "LOCAL_RANK", "0", "LOCAL_WORLD_SIZE", "16", ADDR),
        "LOCAL_WORLD_SIZE (16) exceeds WORLD_SIZE=8");
    EXPECT_BAD(ARGS("RANK", "1", ADDR), "RANK is set but WORLD_SIZE is not");
    EXPECT_BAD(ARGS("WORLD_SIZE", "2", ADDR), "WORLD_SIZE is set but RANK is not");
    EXPECT_BAD(ARGS("OMPI_COMM_WORLD_RANK", "4", "OMPI_COMM_WORLD_SIZE", "4"),
               "OMPI_COMM_WORLD_RANK=4 is not below OMPI_COMM_WORLD_SIZE=4");
    EXPECT_BAD(ARGS("OMPI_COMM_WORLD_RANK", "0"), "OMPI_COMM_WORLD_SIZE is not set");
    EXPECT_BAD(ARGS("OMPI_COMM_WORLD_RANK", "1", "OMPI_COMM_WORLD_SIZE", "4",
                    "OMPI_COMM_WORLD_LOCAL_RANK", "two"),
               "OMPI_COMM_WORLD_LOCAL_RANK='two' is not an integer");
    EXPECT_BAD(ARGS("PMIX_RANK", "1"),
               "PMIX_RANK is set but no variable gives the number of ranks");
    EXPECT_BAD(ARGS("SLURM_STEP_ID", "0", "SLURM_PROCID", "x", "SLURM_NTASKS", "2"),
               "SLURM_PROCID='x' is not an integer; it is set by srun");
    EXPECT_BAD(ARGS("SLURM_STEP_ID", "0", "SLURM_PROCID", "1", "SLURM_LOCALID", "0"),
               "neither SLURM_STEP_NUM_TASKS nor SLURM_NTASKS is");
    EXPECT_BAD(ARGS("SLURM_STEP_ID", "0", "SLURM_PROCID", "3", "SLURM_NTASKS", "4", "SLURM_LOCALID",
                    "2", "SLURM_GTIDS", "2,3"),
               "SLURM_LOCALID=2 is not below the number of tasks in SLURM_GTIDS (2)");
#undef ADDR
    env_end(&g);
}
