/* The backend --device names, for every front end that trains (train/trainer.c, `megatron
 * bench`): cpu; cuda on the launcher's local rank's GPU, in fp16 with --fp16 and bf16 otherwise;
 * auto, the default, cuda when this build has the CUDA backend and a GPU can be used, else cpu.
 * Exports: mg_train_backend_create. Needs: backend, comm (launch). */
#ifndef MG_TRAIN_BACKEND_SELECT_H
#define MG_TRAIN_BACKEND_SELECT_H

#include "backend/backend.h"

/* Creates c->device's backend (the cpu backend with c->num_threads) and writes the one used
 * ("cpu" or "cuda") back into c->device, so a checkpoint records it. Only "no usable GPU" makes
 * auto fall back to cpu, with an info line saying so and what the run does instead (`purpose`,
 * e.g. "training"); a GPU that fails otherwise is an error. *gpu: the CUDA device, -1 on cpu. */
mg_status mg_train_backend_create(mg_config *c, const char *purpose, mg_backend **be, int *gpu);

#endif
