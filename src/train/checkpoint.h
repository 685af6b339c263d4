/* Checkpoints, in Megatron's directory shape:
 *   DIR/latest_checkpointed_iteration.txt        the iteration of the newest complete checkpoint
 *   DIR/iter_0000005/model.safetensors           weights, Hugging Face names (model/hf_names.h)
 *   DIR/iter_0000005/optimizer.safetensors       Adam moments: exp_avg.<name>, exp_avg_sq.<name>
 *   DIR/iter_0000005/state.json                  iteration, consumed samples, scheduler and
 *                                                optimizer step counts, RNG, the full config
 * Nothing is lost on a crash: a checkpoint is written into iter_N.tmp-PID, flushed, renamed to
 * iter_N, and only then is the tracker file replaced (also through a temporary and a rename).
 * Exports: mg_train_state, mg_checkpoint_*. Needs: model, core/safetensors, core/flags. */
#ifndef MG_TRAIN_CHECKPOINT_H
#define MG_TRAIN_CHECKPOINT_H

#include "model/gpt.h"

typedef struct {
    int64_t iteration;
    int64_t consumed_train_samples;
    int64_t consumed_valid_samples;
    int64_t lr_num_steps;   /* the scheduler's position, in samples */
    int64_t optimizer_step; /* Adam's step count */
} mg_train_state;

/* Host fp32 copies, each (g->params.numel) in the parameter buffer's layout. */
typedef struct {
    float *params, *exp_avg, *exp_avg_sq;
} mg_checkpoint_tensors;

mg_status mg_checkpoint_save(const char *dir, const mg_train_state *s, const mg_config *cfg,
                             const mg_gpt *g, const mg_checkpoint_tensors *t);
/* *iteration = the tracker's iteration, or -1 when DIR holds no checkpoint yet. */
mg_status mg_checkpoint_latest(const char *dir, int64_t *iteration);
/* Loads iteration `it`; fails when the checkpoint's model shape differs from cfg's. */
mg_status mg_checkpoint_load(const char *dir, int64_t it, mg_train_state *s, const mg_config *cfg,
                             const mg_gpt *g, mg_checkpoint_tensors *t);

/* The run configuration saved with checkpoint `it` (for tools that start from a checkpoint). */
mg_status mg_checkpoint_load_config(const char *dir, int64_t it, mg_config *cfg);
/* Only the weights of checkpoint `it` (fp32 host, parameter layout, g->params.numel). */
mg_status mg_checkpoint_load_weights(const char *dir, int64_t it, const mg_gpt *g, float *params);

#endif
