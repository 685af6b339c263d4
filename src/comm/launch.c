/* mg_launch_detect: who launched this process, read from the launcher's environment variables.
 * Nothing is initialised here; comm.c decides what to do with the answer.
 *
 * Launchers recognised (first match in each family):
 *   torchrun-style  RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT
 *                   (torchrun, or set by hand as Megatron users do)               -> MG_LAUNCH_ENV
 *   Open MPI        OMPI_COMM_WORLD_RANK/_SIZE/_LOCAL_RANK/_LOCAL_SIZE            -> MPI, "mpirun"
 *   PMIx / PMI      PMIX_RANK or PMI_RANK (+ PMI_SIZE; MPICH's MPI_LOCALRANKID/MPI_LOCALNRANKS)
 *                   -> MPI, "srun" when a Slurm step with the same rank surrounds it, else "mpirun"
 *   Slurm srun      SLURM_PROCID with SLURM_STEP_ID (srun sets the step id; an sbatch/salloc shell
 *                   has SLURM_JOB_ID and even SLURM_PROCID=0 but no step, so a plain process in an
 *                   allocation stays a single rank), SLURM_STEP_NUM_TASKS or SLURM_NTASKS,
 *                   SLURM_LOCALID, and the node's task count from SLURM_GTIDS,
 *                   SLURM_STEP_TASKS_PER_NODE/SLURM_TASKS_PER_NODE ("2(x3),1") or
 *                   SLURM_NTASKS_PER_NODE                                          -> MPI, "srun"
 *                   A one-task step is a single rank (MG_LAUNCH_SINGLE, launcher "srun").
 *   none            rank 0 of 1, "single".
 *
 * Precedence, innermost launcher first:
 *   1. torchrun-style variables (RANK and WORLD_SIZE both set) win over MPI and Slurm ones,
 *      because torchrun is normally started once per node by srun or mpirun and its children
 *      inherit the outer launcher's variables, which then describe the node, not the process.
 *      Exception: when RANK and WORLD_SIZE equal the MPI/Slurm rank and size, they only mirror the
 *      outer launch (job scripts often export RANK=$SLURM_PROCID) and the launch is MPI.
 *   2. Open MPI before PMIx/PMI before Slurm: mpirun inside an allocation starts its daemons with
 *      srun, so its processes carry a Slurm step of their own (one task per node).
 * Where a launcher gives no node-local rank, local_rank = rank and local_world_size = world_size
 * (one node): on several nodes that names a GPU index the node lacks, which fails loudly at device
 * selection instead of silently stacking ranks on GPU 0.
 * Values that are present but wrong are MG_ERR_USAGE naming the variable and the fix. Empty
 * strings count as present (an unset shell variable expanded into RANK= is a broken script). */
#include "comm/launch.h"

#include <errno.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *env(const char *name) {
    return getenv(name);
}

/* v as it may appear in a one-line message: control characters become '?', long values are cut. */
static const char *shown(const char *v, char *buf, size_t cap) {
    size_t i = 0;
    for (; v[i] && i + 4 < cap; i++) buf[i] = (unsigned char)v[i] < 32 ? '?' : v[i];
    snprintf(buf + i, cap - i, "%s", v[i] ? "..." : "");
    return buf;
}

/* Parses a whole decimal integer >= min_value; MG_ERR_USAGE "NAME='v' ..." with `fix` otherwise. */
static mg_status env_int(const char *name, const char *v, long min_value, const char *fix,
                         int *out) {
    if (!v) return MG_FAIL(MG_ERR_USAGE, "%s is not set; %s", name, fix);
    char *end = NULL;
    errno = 0;
    long x = strtol(v, &end, 10);
    bool ok = *v && end != v && errno == 0 && x <= INT_MAX && x >= INT_MIN;
    while (ok && (*end == ' ' || *end == '\t' || *end == '\n')) end++;
    char buf[48];
    if (!ok || *end)
        return MG_FAIL(MG_ERR_USAGE, "%s='%s' is not an integer; %s", name,
                       shown(v, buf, sizeof buf), fix);
    if (x < min_value)
        return MG_FAIL(MG_ERR_USAGE, "%s=%ld must be at least %ld; %s", name, x, min_value, fix);
    *out = (int)x;
    return MG_OK;
}

/* Which variable gave each number, for messages. */
typedef struct {
    const char *rank, *size, *local_rank, *local_size;
} var_names;

/* rank < size and local_rank < local_size <= size: the invariants every launcher must satisfy. */
static mg_status check_ranks(const mg_launch_info *li, const var_names *v) {
    if (li->rank >= li->world_size)
        return MG_FAIL(MG_ERR_USAGE, "%s=%d is not below %s=%d; ranks run from 0 to %s-1", v->rank,
                       li->rank, v->size, li->world_size, v->size);
    if (li->local_world_size > li->world_size)
        return MG_FAIL(MG_ERR_USAGE,
                       "%s (%d) exceeds %s=%d; a node cannot hold more ranks than the job",
                       v->local_size, li->local_world_size, v->size, li->world_size);
    if (li->local_rank >= li->local_world_size)
        return MG_FAIL(MG_ERR_USAGE,
                       "%s=%d is not below %s (%d); local ranks run from 0 to %d on each node",
                       v->local_rank, li->local_rank, v->local_size, li->local_world_size,
                       li->local_world_size - 1);
    return MG_OK;
}

/* Slurm's compressed per-node task counts, "2(x3),1": the count of node `node`, or -1. */
static int slurm_tasks_on_node(const char *s, int node) {
    int seen = 0;
    while (s && *s) {
        char *end;
        long count = strtol(s, &end, 10), reps = 1;
        if (end == s || count < 1) return -1;
        if (strncmp(end, "(x", 2) == 0) {
            char *e2;
            reps = strtol(end + 2, &e2, 10);
            if (e2 == end + 2 || *e2 != ')' || reps < 1) return -1;
            end = e2 + 1;
        }
        if (node < seen + reps) return (int)count;
        seen += (int)reps;
        if (*end != ',') return -1;
        s = end + 1;
    }
    return -1;
}

/* Local rank and size from Slurm's variables (*found false outside an srun step); *size_name
 * says where the node's task count came from. */
static mg_status slurm_local(int *local_rank, int *local_size, const char **size_name,
                             bool *found) {
    *found = false;
    const char *v = env("SLURM_LOCALID");
    if (!v || !env("SLURM_PROCID") || !(env("SLURM_STEP_ID") || env("SLURM_STEPID"))) return MG_OK;
    const char *fix = "it is set by srun; do not set it by hand";
    MG_CHECK(env_int("SLURM_LOCALID", v, 0, fix, local_rank));
    int n = -1;
    const char *gtids = env("SLURM_GTIDS"); /* global ids of the tasks on this node: "4,5,6,7" */
    if (gtids && *gtids) {
        n = 1;
        for (const char *p = gtids; *p; p++) n += *p == ',';
        *size_name = "the number of tasks in SLURM_GTIDS";
    }
    const char *nodeid = env("SLURM_NODEID");
    int node = nodeid ? atoi(nodeid) : 0;
    if (n < 0 && (n = slurm_tasks_on_node(env("SLURM_STEP_TASKS_PER_NODE"), node)) > 0)
        *size_name = "this node's SLURM_STEP_TASKS_PER_NODE";
    if (n < 0 && (n = slurm_tasks_on_node(env("SLURM_TASKS_PER_NODE"), node)) > 0)
        *size_name = "this node's SLURM_TASKS_PER_NODE";
    if (n < 0 && env("SLURM_NTASKS_PER_NODE")) {
        MG_CHECK(env_int("SLURM_NTASKS_PER_NODE", env("SLURM_NTASKS_PER_NODE"), 1, fix, &n));
        *size_name = "SLURM_NTASKS_PER_NODE";
    }
    *local_size = n;
    *found = true;
    return MG_OK;
}

/* The MPI or Slurm launch around this process, if any (*found). */
static mg_status detect_mpi(mg_launch_info *li, bool *found) {
    *found = false;
    int lrank = -1, lsize = -1;
    var_names names = {NULL, NULL, NULL, NULL};
    if (env("OMPI_COMM_WORLD_RANK")) {
        const char *fix = "it is set by Open MPI's mpirun; do not set it by hand";
        names = (var_names){"OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE",
                            "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE"};
        MG_CHECK(env_int(names.rank, env(names.rank), 0, fix, &li->rank));
        MG_CHECK(env_int(names.size, env(names.size), 1, fix, &li->world_size));
        if (env(names.local_rank))
            MG_CHECK(env_int(names.local_rank, env(names.local_rank), 0, fix, &lrank));
        if (env(names.local_size))
            MG_CHECK(env_int(names.local_size, env(names.local_size), 1, fix, &lsize));
        snprintf(li->launcher, sizeof li->launcher, "mpirun");
    } else if (env("PMIX_RANK") || env("PMI_RANK")) {
        const char *fix = "it is set by the MPI launcher; do not set it by hand";
        names.rank = env("PMIX_RANK") ? "PMIX_RANK" : "PMI_RANK";
        names.size = env("PMI_SIZE")               ? "PMI_SIZE"
                     : env("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS"
                     : env("SLURM_NTASKS")         ? "SLURM_NTASKS"
                                                   : NULL;
        MG_CHECK(env_int(names.rank, env(names.rank), 0, fix, &li->rank));
        if (!names.size)
            return MG_FAIL(MG_ERR_USAGE,
                           "%s is set but no variable gives the number of ranks (PMI_SIZE, "
                           "SLURM_STEP_NUM_TASKS); launch with Open MPI's mpirun, MPICH's mpiexec "
                           "or srun, or unset %s for a single-rank run",
                           names.rank, names.rank);
        MG_CHECK(env_int(names.size, env(names.size), 1, fix, &li->world_size));
        if (env("MPI_LOCALRANKID") && env("MPI_LOCALNRANKS")) { /* MPICH / Intel MPI (hydra) */
            names.local_rank = "MPI_LOCALRANKID";
            names.local_size = "MPI_LOCALNRANKS";
            MG_CHECK(env_int(names.local_rank, env(names.local_rank), 0, fix, &lrank));
            MG_CHECK(env_int(names.local_size, env(names.local_size), 1, fix, &lsize));
        }
        /* srun --mpi=pmix/pmi2 sets the step's variables with the same rank; MPICH's mpiexec
         * under Slurm runs inside a step of its daemons, whose SLURM_PROCID is the node's. */
        bool in_slurm = false;
        int slr = -1, sls = -1;
        const char *sls_name = NULL;
        MG_CHECK(slurm_local(&slr, &sls, &sls_name, &in_slurm));
        const char *procid = env("SLURM_PROCID");
        bool srun = in_slurm && procid && atoi(procid) == li->rank;
        if (srun && lrank < 0 && sls > 0) {
            lrank = slr, lsize = sls;
            names.local_rank = "SLURM_LOCALID";
            names.local_size = sls_name;
        }
        snprintf(li->launcher, sizeof li->launcher, "%s", srun ? "srun" : "mpirun");
    } else if (env("SLURM_PROCID") && (env("SLURM_STEP_ID") || env("SLURM_STEPID"))) {
        const char *fix = "it is set by srun; do not set it by hand";
        names.rank = "SLURM_PROCID";
        names.size = env("SLURM_STEP_NUM_TASKS") ? "SLURM_STEP_NUM_TASKS" : "SLURM_NTASKS";
        MG_CHECK(env_int(names.rank, env(names.rank), 0, fix, &li->rank));
        if (!env(names.size))
            return MG_FAIL(MG_ERR_USAGE,
                           "SLURM_PROCID is set inside an srun step but neither "
                           "SLURM_STEP_NUM_TASKS nor SLURM_NTASKS is; run under srun -n N");
        MG_CHECK(env_int(names.size, env(names.size), 1, fix, &li->world_size));
        bool in_slurm;
        names.local_rank = "SLURM_LOCALID";
        MG_CHECK(slurm_local(&lrank, &lsize, &names.local_size, &in_slurm));
        snprintf(li->launcher, sizeof li->launcher, "srun");
    } else {
        return MG_OK;
    }
    if (lrank < 0 || lsize < 0) { /* no node-local variables: one node */
        lrank = li->rank, lsize = li->world_size;
        names.local_rank = names.rank, names.local_size = names.size;
    }
    li->local_rank = lrank;
    li->local_world_size = lsize;
    li->kind = MG_LAUNCH_MPI;
    MG_CHECK(check_ranks(li, &names));
    /* A one-task srun step needs no communication at all; mpirun -np 1 asked for MPI. */
    if (!strcmp(li->launcher, "srun") && li->world_size == 1) li->kind = MG_LAUNCH_SINGLE;
    *found = true;
    return MG_OK;
}

/* torchrun-style variables; RANK and WORLD_SIZE are already parsed into li. */
static mg_status detect_env(mg_launch_info *li) {
    const char *fix_local = "torchrun sets it; by hand, set LOCAL_RANK to the rank on this node";
    li->kind = MG_LAUNCH_ENV;
    snprintf(li->launcher, sizeof li->launcher, "torchrun");
    const char *lr = env("LOCAL_RANK"), *lws = env("LOCAL_WORLD_SIZE");
    li->local_rank = li->rank; /* one node unless told otherwise (see the top comment) */
    li->local_world_size = li->world_size;
    if (lr) MG_CHECK(env_int("LOCAL_RANK", lr, 0, fix_local, &li->local_rank));
    if (lws)
        MG_CHECK(env_int("LOCAL_WORLD_SIZE", lws, 1, "set it to the number of ranks on this node",
                         &li->local_world_size));
    const var_names names = {"RANK", "WORLD_SIZE", "LOCAL_RANK",
                             lws ? "LOCAL_WORLD_SIZE" : "WORLD_SIZE"};
    MG_CHECK(check_ranks(li, &names));

    const char *addr = env("MASTER_ADDR"), *port = env("MASTER_PORT");
    if (addr && !*addr) addr = NULL;
    if (port && !*port) port = NULL;
    if (li->world_size > 1 && (!addr || !port))
        return MG_FAIL(MG_ERR_USAGE,
                       "WORLD_SIZE=%d but %s is not set; every rank needs MASTER_ADDR (the host "
                       "of rank 0) and MASTER_PORT (a free TCP port there, e.g. 29500) for the "
                       "rendezvous",
                       li->world_size, !addr ? "MASTER_ADDR" : "MASTER_PORT");
    if (addr && strlen(addr) >= sizeof li->master_addr)
        return MG_FAIL(MG_ERR_USAGE,
                       "MASTER_ADDR is %zu characters long; a host name has at most %zu",
                       strlen(addr), sizeof li->master_addr - 1);
    /* One rank alone needs no agreed address: loopback and any free port (0) do. */
    snprintf(li->master_addr, sizeof li->master_addr, "%s", addr ? addr : "127.0.0.1");
    li->master_port = 0;
    if (port) {
        const char *fix = "choose a free TCP port such as 29500";
        MG_CHECK(env_int("MASTER_PORT", port, 1, fix, &li->master_port));
        if (li->master_port > 65535)
            return MG_FAIL(MG_ERR_USAGE, "MASTER_PORT=%d is not a TCP port (1..65535); %s",
                           li->master_port, fix);
    }
    return MG_OK;
}

mg_status mg_launch_detect(mg_launch_info *out) {
    mg_launch_info li;
    memset(&li, 0, sizeof li);
    const char *rank = env("RANK"), *size = env("WORLD_SIZE");
    if (rank && size) {
        MG_CHECK(env_int("RANK", rank, 0, "set RANK to this process's rank, 0 .. WORLD_SIZE-1",
                         &li.rank));
        MG_CHECK(env_int("WORLD_SIZE", size, 1, "set WORLD_SIZE to the number of processes",
                         &li.world_size));
        /* Mirror check: errors in the outer launcher's variables do not matter here, since the
         * torchrun-style ones decide whenever they do not mirror it. */
        mg_launch_info mpi;
        memset(&mpi, 0, sizeof mpi);
        bool found = false;
        if (detect_mpi(&mpi, &found) != MG_OK) {
            found = false;
            mg_error_clear();
        }
        if (found && mpi.rank == li.rank && mpi.world_size == li.world_size) {
            *out = mpi;
            return MG_OK;
        }
        MG_CHECK(detect_env(&li));
        *out = li;
        return MG_OK;
    }
    bool found = false;
    MG_CHECK(detect_mpi(&li, &found));
    if (!found && (rank || size))
        return MG_FAIL(MG_ERR_USAGE,
                       "%s is set but %s is not; a torchrun-style launch needs RANK, WORLD_SIZE, "
                       "MASTER_ADDR and MASTER_PORT (or unset %s for a single-rank run)",
                       rank ? "RANK" : "WORLD_SIZE", rank ? "WORLD_SIZE" : "RANK",
                       rank ? "RANK" : "WORLD_SIZE");
    if (!found) {
        li.kind = MG_LAUNCH_SINGLE;
        li.rank = 0;
        li.world_size = 1;
        li.local_rank = 0;
        li.local_world_size = 1;
        snprintf(li.launcher, sizeof li.launcher, "single");
    }
    *out = li;
    return MG_OK;
}
