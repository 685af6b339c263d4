/* The trainer's data sources (internal to train/trainer*.c): the three splits' samples, from
 * Megatron's mock streams (--mock-data) or its GPT datasets (--data-path, with the split sizes of
 * get_train_valid_test_num_samples), and the loaders over them.
 * Splits: --split decides which splits exist for either kind of data, as Megatron's dataset
 * builder does: a split of weight 0, or whose share of the documents is empty, has no dataset
 * (the mock data's documents are Megatron's MockGPTLowLevelDataset's 100000). Without training
 * documents the run stops; without validation documents evaluation is skipped (a warning);
 * without test documents there is no test evaluation.
 * Loaders: samples are addressed by position: the global batch that starts after c consumed
 * samples gives data-parallel rank r's microbatch m the positions c + (m D + r) M + b
 * (trainer.c's load_microbatch). --dataloader-type single, Megatron's default
 * MegatronPretrainingSampler, reads the split's sample at that position. --dataloader-type cyclic
 * wraps each split's source in Megatron's MegatronPretrainingRandomSampler
 * (data/cyclic_sampler.h; data sharding unless --no-data-sharding): a position reads the sample
 * that sampler gives rank r there, epoch after epoch. As Megatron builds its loaders once per
 * run, the train loader starts at the consumed train samples after the checkpoint load, the
 * validation loader at the consumed validation samples, the test loader at 0.
 * A split's length is its dataset's (mg_gpt_data_len); the endless --mock-data streams have the
 * sample counts Megatron asks its datasets for (train: --train-samples or iterations x global
 * batch; validation: evaluations x --eval-iters x global batch; test: --eval-iters x global
 * batch), Megatron's minimum sizes.
 * Exports: mg_train_data_open, mg_train_data_loaders_init, mg_train_data_free.
 * Needs: train/trainer_parts, data/mock, data/gpt_dataset, data/blend, data/cyclic_sampler. */
#ifndef MG_TRAIN_TRAINER_DATA_H
#define MG_TRAIN_TRAINER_DATA_H

#include "train/trainer_parts.h"

/* The sources of c's data for a run of train_iters iterations (the datasets' sample counts). */
mg_status mg_train_data_open(mg_train_data *d, const mg_config *c, int64_t train_iters);
/* After the checkpoint load (s: the consumed samples), the loaders of --dataloader-type cyclic
 * for dp_size data-parallel ranks; nothing for single. */
mg_status mg_train_data_loaders_init(mg_train_data *d, const mg_config *c, int64_t train_iters,
                                     int dp_size, const mg_train_state *s);
void mg_train_data_free(mg_train_data *d);

#endif
