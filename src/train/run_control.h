/* What `megatron train`'s outer loop (train/run.c) decides between iterations, as Megatron's
 * train() and checkpoint_and_decide_exit do:
 *   - --exit-signal-handler: SIGTERM sets a flag (Megatron's DistributedSignalHandler, installed
 *     before the trainer starts, restored at the end); at each iteration boundary every rank
 *     learns whether any rank got it, and all save (with --save) and exit 0 together;
 *   - --exit-duration-in-mins: at each iteration boundary, whether any rank has run longer than
 *     that since mg_run_control_init (Megatron's _TRAIN_START_TIME: the process start; here the
 *     start of the run); then all save (with --save) and exit 0;
 *   - a batch-size rampup changing the number of microbatches: Megatron saves a checkpoint
 *     before the first iteration of the new count (with --save; not at iteration 0).
 * The agreement is a MAX over the data-, tensor- and pipeline-parallel groups, which together
 * span every rank; it runs only when one of the two flags is given and the run has more than
 * one rank (one small collective per iteration, a host sync on device backends, as Megatron's
 * all_gather of the flag and .item() are).
 * Exports: mg_stop_reason, mg_run_control, mg_run_control_init, mg_run_control_bind,
 * mg_run_control_batch_changes, mg_run_control_stop, mg_run_control_log_stop,
 * mg_run_control_free. Needs: train/trainer, comm. */
#ifndef MG_TRAIN_RUN_CONTROL_H
#define MG_TRAIN_RUN_CONTROL_H

#include "train/trainer.h"

#include <signal.h>

typedef enum { MG_STOP_NONE = 0, MG_STOP_SIGNAL, MG_STOP_DURATION } mg_stop_reason;

typedef struct {
    double start_s;       /* monotonic seconds at init */
    double minutes;       /* --exit-duration-in-mins, 0: never */
    bool signals;         /* --exit-signal-handler: the handler is installed */
    struct sigaction old; /* the handler it replaced */
    int64_t last_global;  /* the global batch of the iteration before */
    mg_backend *be;       /* for the scratch */
    void *scratch;      /* (2) int64 backend memory: the agreement over groups on device buffers */
    double elapsed_min; /* at the last mg_run_control_stop */
} mg_run_control;

/* Before the trainer starts: the start time, and the SIGTERM handler with
 * --exit-signal-handler. */
mg_status mg_run_control_init(mg_run_control *rc, const mg_config *c);
/* Once the trainer is up: the scratch for the agreement (groups on device buffers), the global
 * batch of the first iteration to run. */
mg_status mg_run_control_bind(mg_run_control *rc, mg_trainer *t);
/* Whether the iteration about to run has another global batch than the one before (not for the
 * first iteration of the run, nor at iteration 0). */
bool mg_run_control_batch_changes(mg_run_control *rc, const mg_trainer *t);
/* After an iteration: why every rank stops now (MG_STOP_NONE: go on); the same on every rank. */
mg_status mg_run_control_stop(mg_run_control *rc, mg_trainer *t, mg_stop_reason *why);
/* Megatron's line for the exit. */
void mg_run_control_log_stop(const mg_run_control *rc, mg_stop_reason why);
/* Restores the signal handler, frees the scratch. */
void mg_run_control_free(mg_run_control *rc);

#endif
