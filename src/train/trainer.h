/* The training loop: Megatron's iteration (microbatches with gradient accumulation, global-norm
 * clipping, AdamW, the lr schedule), evaluation, logging, checkpointing, exit interval.
 * The trainer owns the memory plan: one arena per lifetime class (parameters, gradients,
 * optimizer state, activations, workspace), sized before the first step and committed once.
 * Exports: mg_trainer, mg_trainer_*, mg_train_run. Needs: model, the train modules, data, backend. */
#ifndef MG_TRAIN_TRAINER_H
#define MG_TRAIN_TRAINER_H

#include "data/gpt_dataset.h"
#include "data/mock.h"
#include "model/gpt.h"
#include "train/checkpoint.h"
#include "train/lr_schedule.h"
#include "train/metrics.h"
#include "train/optimizer.h"

/* Where samples come from: sample `index` of a split as (S) input ids and (S) target ids.
 * The mock data is one source; the indexed datasets of the data issue are another; tests plug in
 * fixed batches. */
typedef struct {
    mg_status (*sample)(void *ctx, int64_t index, int32_t *tokens, int32_t *targets);
    void *ctx;
} mg_sample_source;

typedef struct {
    mg_config cfg;
    mg_backend *be;
    mg_gpt model;
    mg_optimizer opt;
    mg_lr_schedule lr;
    mg_arena a_params, a_grads, a_optim, a_acts, a_work, a_io;
    size_t off_params, off_grads, off_tokens, off_targets, off_dloss, off_loss;
    void *params;      /* (numel) compute dtype */
    float *grads;      /* (numel) fp32 */
    int32_t *tokens;   /* (N) backend */
    int32_t *targets;  /* (N) backend */
    float *dloss;      /* (N) backend: d(loss)/d(token loss) = 1 / (N * microbatches) */
    float *loss;       /* (1) backend accumulator */
    int32_t *host_tokens, *host_targets; /* (N) */
    mg_mock_data train_data, valid_data;   /* --mock-data */
    mg_gpt_data *gpt_data;                 /* --data-path: Megatron's GPT datasets */
    struct mg_gpt_split_source {
        mg_gpt_data *data;
        int split;
    } train_split, valid_split;
    mg_sample_source train_src, valid_src; /* one of the two above; tests may plug in others */
    bool have_valid;                       /* false when the validation split is empty */
    mg_train_state state;
    int num_microbatches;
    mg_metrics_file metrics;
} mg_trainer;

/* Builds the model and the memory plan, initialises or loads the weights. */
mg_status mg_trainer_init(mg_trainer *t, const mg_config *cfg);
/* Forward (+ backward) over the global batch of samples [first, first + gbs) from src:
 * the mean loss lands in t->loss; gradients ACCUMULATE into t->grads. */
mg_status mg_trainer_forward_backward(mg_trainer *t, const mg_sample_source *src, int64_t first,
                                      bool backward);
/* One iteration: returns the mean lm loss and the pre-clipping gradient norm. */
mg_status mg_trainer_step(mg_trainer *t, double *loss, double *grad_norm);
/* Mean loss over eval_iters global batches of the validation stream. */
mg_status mg_trainer_evaluate(mg_trainer *t, double *loss);
mg_status mg_trainer_save(mg_trainer *t);
void mg_trainer_free(mg_trainer *t);

/* The whole `megatron train` run. */
mg_status mg_train_run(const mg_config *cfg);

#endif
