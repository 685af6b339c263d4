/* The trainer's weights as fp32 host values (params.numel, parameter layout), for the checkpoint
 * side (train/trainer_ckpt.h), tests and tools. set_weights writes the masters and the parameters
 * (their rounding to the compute dtype); get_weights reads the masters (the parameters themselves
 * on CPU; masters sharded over the data-parallel group are all-gathered: every member must call
 * it).
 * Exports: mg_trainer_set_weights, mg_trainer_get_weights, mg_trainer_sync_params,
 * mg_trainer_params_graph_edge.
 * Needs: train/trainer_parts, parallel/ddp. */
#ifndef MG_TRAIN_TRAINER_WEIGHTS_H
#define MG_TRAIN_TRAINER_WEIGHTS_H

#include "train/trainer_parts.h"

mg_status mg_trainer_set_weights(mg_trainer *t, const float *host);
/* With --overlap-param-gather the parameter buffer is complete only once the next forward
 * gathered every bucket: this gathers (and orders) what is left, for readers outside forward.
 * get_weights and save call it. */
mg_status mg_trainer_sync_params(mg_trainer *t);
/* Before a full-iteration graph's capture and after each launch (train/trainer_graph.h): every
 * buffer's gathers brought to the state each replay starts from (parallel/ddp.h's
 * mg_ddp_graph_boundary). */
mg_status mg_trainer_params_graph_edge(mg_trainer *t);
mg_status mg_trainer_get_weights(mg_trainer *t, float *host);

#endif
