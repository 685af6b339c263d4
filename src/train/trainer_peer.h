/* Internal to train/: which exchanges go through peer-mapped memory (comm.h's
 * mg_comm_peer_window_alloc), and the windows they use: expert parallelism's stores into the
 * peers' receive slabs (model/moe_dispatch.c, MG_MOE_EXCHANGE) and sequence parallelism's
 * gathers and reduce-scatters as copies (parallel/tensor_parallel.h, MG_TP_EXCHANGE). Each is the
 * default where the backend and the group can do it, and one log line says which way each
 * exchange goes. Exports: mg_trainer_peer_bind. Needs: train/trainer_parts. */
#ifndef MG_TRAIN_TRAINER_PEER_H
#define MG_TRAIN_TRAINER_PEER_H

#include "train/trainer_parts.h"

/* After the memory plan and the MoE layers' binding (their group): maps each window the
 * exchanges use and binds it to the model (freed by mg_trainer_memory_free). A bad MG_MOE_EXCHANGE
 * or MG_TP_EXCHANGE value: MG_ERR_USAGE. */
mg_status mg_trainer_peer_bind(mg_trainer *t);
/* The allocator the memory's commit gives arena a (the activations' or the workspace's) where the
 * sequence-parallel gathers can write straight into the peers' memory: the arena in peer-mapped
 * memory over the tensor-parallel group (its ranks commit the same plan, so a buffer lies at the
 * same offset on each), or the backend's where the group cannot map it (one log line); NULL
 * where that does not apply (the caller's allocator then). A bad MG_TP_EXCHANGE: MG_ERR_USAGE. */
mg_status mg_trainer_peer_arena(mg_trainer *t, const mg_arena *a, const mg_allocator **out);

#endif
