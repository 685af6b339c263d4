/* The trainer's memory: the plan of train/memory.h (the same reservations `megatron plan`
 * predicts from), committed once in the backend's memory (device memory on CUDA) and logged, the
 * buffers bound into it, and the reports against it.
 * Exports: mg_trainer_memory_init, mg_trainer_memory_free, mg_memory_per_param,
 * mg_trainer_memory_per_param, mg_trainer_log_memory. Needs: train/trainer_parts, train/memory. */
#ifndef MG_TRAIN_TRAINER_MEMORY_H
#define MG_TRAIN_TRAINER_MEMORY_H

#include "train/trainer_parts.h"

/* After the model, the buffers and the pipeline walker exist: initialises the optimizer's shards
 * (this rank's of each buffer's group), reserves and commits the plan, logs it, and binds the
 * parameters, gradients, masters, optimizer state, pipeline buffers, batch arrays and the model to
 * it; allocates the host staging of a microbatch. */
mg_status mg_trainer_memory_init(mg_trainer *t);
/* The arenas back to the backend (before it is destroyed) and the host staging freed. */
void mg_trainer_memory_free(mg_train_memory *m);
/* Bytes per model parameter of each state, from the committed arenas (padding included):
 * Megatron's accounting (fp32 params and grads: 4 + 4 + 8 = 16 B without the distributed
 * optimizer, 4 + 4 + 8/D with it; bf16 params with fp32 masters: 2 + 4 + 12, or 2 + 4 + 12/D
 * where the masters are sharded too). */
typedef struct {
    int64_t params;                           /* the model's parameters */
    double weights, grads, master, optimizer; /* bytes per parameter */
} mg_memory_per_param;
mg_memory_per_param mg_trainer_memory_per_param(const mg_trainer *t);
/* Logs the device memory in use (backends with memory_info; nothing on CPU) next to the plan. */
mg_status mg_trainer_log_memory(mg_trainer *t, const char *when);

#endif
