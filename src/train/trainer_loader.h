/* The trainer's data loaders (internal to train/trainer*.c). Samples are addressed by position:
 * the global batch that starts after c consumed samples gives data-parallel rank r's microbatch
 * m the positions c + (m D + r) M + b (trainer.c's load_microbatch). --dataloader-type single,
 * Megatron's default MegatronPretrainingSampler, reads the split's sample at that position.
 * --dataloader-type cyclic wraps each split's source in Megatron's MegatronPretrainingRandomSampler
 * (data/cyclic_sampler.h; data sharding unless --no-data-sharding): a position reads the sample
 * that sampler gives rank r there, epoch after epoch. As Megatron builds its loaders once per
 * run, the train loader starts at the consumed train samples after the checkpoint load, the
 * validation loader at the consumed validation samples, the test loader at 0.
 * A split's length is its dataset's (mg_gpt_data_len); the endless --mock-data streams have the
 * sample counts Megatron asks its datasets for (train: --train-samples or iterations x global
 * batch; validation: evaluations x --eval-iters x global batch; test: --eval-iters x global
 * batch), Megatron's minimum sizes.
 * Exports: mg_trainer_loaders_init, mg_trainer_loaders_free. Needs: train/trainer,
 * data/cyclic_sampler. */
#ifndef MG_TRAIN_TRAINER_LOADER_H
#define MG_TRAIN_TRAINER_LOADER_H

#include "train/trainer.h"

/* After mg_trainer_load_or_init (t->state holds the consumed samples); nothing for single. */
mg_status mg_trainer_loaders_init(mg_trainer *t);
void mg_trainer_loaders_free(mg_trainer *t);

#endif
