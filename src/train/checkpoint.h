/* Checkpoints, in Megatron's directory shape:
 *   DIR/latest_checkpointed_iteration.txt        the iteration of the newest complete checkpoint
 *   DIR/iter_0000005/model.safetensors           weights, Hugging Face names (model/hf_names.h)
 *   DIR/iter_0000005/optimizer.safetensors       Adam moments: exp_avg.<name>, exp_avg_sq.<name>
 *   DIR/iter_0000005/optimizer-00001-of-00004.safetensors   ... or, with the distributed
 *                                                optimizer, one file per data-parallel rank
 *                                                holding that rank's shard (below)
 *   DIR/iter_0000005/state.json                  iteration, consumed samples, scheduler and
 *                                                optimizer step counts, RNG, the number of
 *                                                optimizer shard files (0: one whole file),
 *                                                the pipeline stages, the full config
 * With P > 1 pipeline stages each stage writes its own tensors: model-00001-of-0000P.safetensors
 * (stage 1 of P, Hugging Face's shard naming) and optimizer-pp000[-...].safetensors (stage 0).
 * With expert parallelism (EP ranks) each stage's weights are EP files: model file
 * stage x EP + e + 1 of P x EP holds expert-parallel rank e's experts (global expert numbers in
 * their names), the first of them also the dense weights; the optimizer state is one file per
 * data-parallel rank, each holding the moments that rank owns (below).
 * Names keep global layer numbers, and a stage's copy of the tied embedding is stored once, as
 * the embedding (the first stage's), so every stage reads what it needs from all the files:
 * a checkpoint loads under any pipeline (and data-parallel) layout.
 * A shard file holds, for every parameter that meets the rank's shard, the 1-D run of elements
 * [a, b) of its flattened moments as exp_avg.<name> and exp_avg_sq.<name> (the whole tensor, in
 * its shape, where the shard covers it), and "<name>": "a:b" in the file's __metadata__. Loading
 * takes whatever pieces the files hold, so a checkpoint loads on any data-parallel size, with or
 * without the distributed optimizer.
 *
 * Nothing is lost on a crash: a checkpoint is written into iter_N.tmp-PID (rank 0's PID), flushed,
 * renamed to iter_N, and only then is the tracker file replaced (also through a temporary and a
 * rename). Data-parallel rank 0 of each stage writes the stage's dense weights (and the whole
 * optimizer file), expert-data-parallel rank 0 of each expert-parallel rank its experts' weights,
 * the first stage's rank 0 also the state; with shard files every rank writes its own (the
 * moments of a sharded buffer, or of the weights it writes); all agree (over the data-parallel
 * and pipeline groups) that every part was written before rank 0 renames, and nobody returns
 * before the checkpoint is complete.
 * Exports: mg_train_state, mg_checkpoint_tensors, mg_checkpoint_*.
 * Needs: model, train/optimizer (pieces), comm, core/safetensors, core/flags. */
#ifndef MG_TRAIN_CHECKPOINT_H
#define MG_TRAIN_CHECKPOINT_H

#include "comm/comm.h"
#include "model/gpt.h"
#include "train/optimizer.h"

typedef struct {
    int64_t iteration;
    int64_t consumed_train_samples;
    int64_t consumed_valid_samples;
    int64_t lr_num_steps;   /* the scheduler's position, in samples */
    int64_t optimizer_step; /* Adam's step count */
} mg_train_state;

/* Host fp32 copies: the weights (g->params.numel, the parameter buffer's layout) and the Adam
 * moments of this rank's pieces (train/optimizer.h: param range [a, b) of parameter `index` at
 * `local` in exp_avg and exp_avg_sq). Unsharded, the pieces are every parameter whole. */
typedef struct {
    float *params;                /* (g->params.numel) */
    float *exp_avg, *exp_avg_sq;  /* local coordinates */
    const mg_optim_piece *pieces; /* (n_pieces) */
    int n_pieces;
    int n_shards; /* optimizer shard files (the data-parallel size); 0: one file */
    int stage, n_stages; /* this rank's pipeline stage of n_stages (0, 1: no pipeline) */
    int ep_rank, ep_size; /* this rank's expert-parallel rank of ep_size (0, 1: none) */
    /* [0] the dense parameters, [1] the experts': owns, this rank writes their weights (one
     * rank of those holding the same copy); sharded, their moments are this rank's alone (the
     * distributed optimizer over > 1 ranks), so it writes them whether it owns them or not */
    bool owns[2], sharded[2];
    /* aux-loss-free routing: this stage's MoE layers' expert bias (host fp32, n_bias x E, layer
     * after layer in the model's order), stored with the dense weights under megatron-core's
     * buffer names (decoder.layers.L.mlp.router.expert_bias); NULL: none */
    float *expert_bias;
    int n_bias, n_experts;
} mg_checkpoint_tensors;

/* Saves iteration s->iteration. dp: the data-parallel group whose members all call this with
 * their own tensors (rank r writes shard r + 1 of t->n_shards), or NULL for one rank. Without
 * shards every member holds the same state and rank 0 alone writes it. pp: the pipeline group
 * (NULL: one stage), every stage t->stage of t->n_stages calling it too. */
mg_status mg_checkpoint_save(const char *dir, const mg_train_state *s, const mg_config *cfg,
                             const mg_gpt *g, const mg_checkpoint_tensors *t, mg_comm *dp,
                             mg_comm *pp);
/* *iteration = the tracker's iteration, or -1 when DIR holds no checkpoint yet. */
mg_status mg_checkpoint_latest(const char *dir, int64_t *iteration);
/* Loads iteration `it`: the weights whole, the moments of t's pieces (from the whole file or
 * from every shard file, whatever data-parallel size wrote them). Fails when the checkpoint's
 * model shape differs from cfg's, or its files do not cover a piece. */
mg_status mg_checkpoint_load(const char *dir, int64_t it, mg_train_state *s, const mg_config *cfg,
                             const mg_gpt *g, mg_checkpoint_tensors *t);

/* The run configuration saved with checkpoint `it` (for tools that start from a checkpoint). */
mg_status mg_checkpoint_load_config(const char *dir, int64_t it, mg_config *cfg);
/* Only the weights of checkpoint `it` (fp32 host, parameter layout, g->params.numel). */
mg_status mg_checkpoint_load_weights(const char *dir, int64_t it, const mg_gpt *g, float *params);

#endif
