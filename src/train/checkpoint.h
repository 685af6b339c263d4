/* Checkpoints, in Megatron's directory shape:
 *   DIR/latest_checkpointed_iteration.txt   the iteration of the newest complete checkpoint
 *   DIR/iter_0000005/state.json             iteration, consumed samples, scheduler and optimizer
 *                                           step counts, the RNG's seed and the dropout streams'
 *                                           offset, whether the optimizer state is
 *                                           there, the layout that wrote it, the full config
 *   DIR/iter_0000005/index.json             every tensor's global shape and pieces
 *   DIR/iter_0000005/rank-00003.safetensors each writing rank's pieces
 * (format version 2, train/checkpoint_store.h). The tensors are the fp32 master weights under
 * megatron-core's names (the tied embedding once, as the first stage's; an MoE layer's expert
 * bias as decoder.layers.L.mlp.router.expert_bias) and the Adam moments as
 * optimizer.exp_avg.<name> and optimizer.exp_avg_sq.<name>, each piece placed by its global
 * offsets: so a checkpoint saved under any tensor-, pipeline-, data- and expert-parallel layout,
 * with or without the distributed optimizer, loads under any other, every rank reading exactly
 * the slices it holds. Who writes what: a parameter's weights by the first data-parallel (for
 * an expert's, expert-data-parallel) rank among those holding the same copy, and a replicated
 * parameter's by tensor-parallel rank 0 only; its moments the same way, except that the
 * distributed optimizer's shards are each written by their own rank.
 * Version 1 checkpoints (before 2026-11-26) still load (train/checkpoint_v1.h).
 *
 * Nothing is lost on a crash: a checkpoint is written into iter_N.tmp-PID (rank 0's PID), every
 * file flushed; once all ranks agree that their parts are written, rank 0 merges the index,
 * renames the directory to iter_N (an older iter_N is replaced only then) and only then replaces
 * the tracker file (also through a temporary and a rename); everyone learns the outcome before
 * returning. A reader checks each file's size and each piece's XXH3 checksum, so a truncated,
 * corrupted or missing file is a one-line error naming the file and the tensor.
 * Exports: mg_train_state, mg_checkpoint_tensors, mg_checkpoint_groups, mg_checkpoint_*.
 * Needs: model, train/optimizer (pieces), train/checkpoint_store, comm, config/flags. */
#ifndef MG_TRAIN_CHECKPOINT_H
#define MG_TRAIN_CHECKPOINT_H

#include "backend/backend.h"
#include "comm/comm.h"
#include "model/gpt.h"
#include "train/lr_schedule.h"
#include "train/checkpoint_tensors.h"
#include "train/optimizer.h"

typedef struct {
    int64_t iteration;
    int64_t consumed_train_samples;
    int64_t consumed_valid_samples;
    int64_t lr_num_steps;   /* the scheduler's position, in samples */
    int64_t optimizer_step; /* Adam's step count */
    /* the loss scaler's state (train/grad_scaler.h; Megatron keeps it with the optimizer's):
     * loss_scale 0 when the run had no scaler or the checkpoint holds none */
    double loss_scale;
    int64_t growth_tracker, hysteresis_tracker;
    /* the lr schedule's values (Megatron's opt_param_scheduler state; train/lr_schedule.h),
     * checked against the command line's on resume; present: false for older checkpoints and
     * saves without a schedule */
    mg_lr_saved lr_scheduler;
    /* the dropout streams' offset (model/rng.h, the same for every rank's streams): rng_saved
     * false when the checkpoint holds none (--no-save-rng, or saved before it was kept) */
    uint64_t rng_offset;
    bool rng_saved;
} mg_train_state;

/* The groups whose members save together (not owned; NULL: one rank). Groups that move device
 * buffers (NCCL) exchange the save's few host values through `scratch`, 8 bytes of be's memory. */
typedef struct {
    mg_comm *dp, *pp, *tp;
    mg_backend *be;
    void *scratch;
} mg_checkpoint_groups;

/* Saves iteration s->iteration: every rank of the groups calls it with its own tensors. */
mg_status mg_checkpoint_save(const char *dir, const mg_train_state *s, const mg_config *cfg,
                             const mg_gpt *g, const mg_checkpoint_tensors *t,
                             const mg_checkpoint_groups *groups);
/* The same in two halves, so that the files are written while training goes on: begins the save
 * (rank 0 makes the temporary directory and everyone learns its name: collective over the groups)
 * and writes this rank's files, in a background thread when `background`. t, its buffers, cfg
 * and g belong to the save until mg_checkpoint_pending_free. mg_checkpoint_poll (collective)
 * says whether every rank's files are written; mg_checkpoint_finish (collective) waits for them,
 * then commits the checkpoint as mg_checkpoint_save does. */
typedef struct mg_checkpoint_pending mg_checkpoint_pending;
mg_status mg_checkpoint_save_async(const char *dir, const mg_train_state *s, const mg_config *cfg,
                                   const mg_gpt *g, const mg_checkpoint_tensors *t,
                                   const mg_checkpoint_groups *groups, bool background,
                                   mg_checkpoint_pending **out);
mg_status mg_checkpoint_poll(mg_checkpoint_pending *p, bool *done);
mg_status mg_checkpoint_finish(mg_checkpoint_pending *p);
/* The save's iteration, and this rank's writing: seconds and bytes (after finish). */
void mg_checkpoint_pending_stats(const mg_checkpoint_pending *p, int64_t *iteration,
                                 double *seconds, double *bytes);
/* Waits for this rank's writer (without committing: a save abandoned on an error) and frees. */
void mg_checkpoint_pending_free(mg_checkpoint_pending *p);
/* Saves the weights alone (fp32 host, g->params.numel, g built for one rank) as iteration 0
 * without optimizer state, recording cfg: a starting point (`convert --saver megatron`). */
mg_status mg_checkpoint_save_weights(const char *dir, const mg_config *cfg, const mg_gpt *g,
                                     const float *params);
/* *iteration = the tracker's iteration, or -1 when DIR holds no checkpoint yet. */
mg_status mg_checkpoint_latest(const char *dir, int64_t *iteration);
/* Loads iteration `it`: this rank's weights whole, and the moments of t's pieces when
 * t->optimizer asks for them and the checkpoint has them (t->optimizer then says whether they
 * were loaded; if not, they are left as they are).
 * Fails when the checkpoint's model shape differs from cfg's, or its files do not cover what
 * this rank needs. */
mg_status mg_checkpoint_load(const char *dir, int64_t it, mg_train_state *s, const mg_config *cfg,
                             const mg_gpt *g, mg_checkpoint_tensors *t);

/* The run configuration saved with checkpoint `it` (for tools that start from a checkpoint). */
mg_status mg_checkpoint_load_config(const char *dir, int64_t it, mg_config *cfg);
/* Only the weights of checkpoint `it` (fp32 host, parameter layout, g->params.numel). */
mg_status mg_checkpoint_load_weights(const char *dir, int64_t it, const mg_gpt *g, float *params);

#endif
