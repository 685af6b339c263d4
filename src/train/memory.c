#include "train/memory.h"

#include "core/arena.h"
#include "parallel/pipeline/p2p.h"
#include "parallel/pipeline/run.h"
#include "parallel/pipeline/schedule.h"
#include "train/optimizer.h"

#include <stdlib.h>
#include <string.h>

static size_t stub_saved_bytes(mg_backend *be, int B, int S, int nq, int hd) {
    return mg_backend_attention_saved_bytes(be->device, B, S, nq, hd);
}

static size_t committed(size_t bytes) {
    mg_arena a;
    mg_arena_init(&a, "size");
    size_t off;
    mg_arena_reserve(&a, bytes, 0, &off);
    return mg_arena_committed_size(&a);
}

static mg_status reserve(mg_arena *a, size_t bytes) {
    size_t off;
    return mg_arena_reserve(a, bytes, 0, &off);
}

mg_status mg_memory_stage_estimate(const mg_config *c, int pp_rank, int dp_size, mg_dtype compute,
                                   mg_memory_stage *out) {
    memset(out, 0, sizeof *out);
    out->pp_rank = pp_rank;
    mg_gpt g;
    mg_train_buffers l = {0};
    mg_optimizer o = {0};
    mg_arena optim, acts, work;
    mg_arena_init(&optim, "optimizer state");
    mg_arena_init(&acts, "activations");
    mg_arena_init(&work, "workspace");
    int ep = c->expert_model_parallel_size > 1 ? c->expert_model_parallel_size : 1;
    mg_status st = mg_gpt_build_ep(&g, c, 0, pp_rank, 0);
    if (st == MG_OK)
        st = mg_train_buffers_build(&g.params, c, dp_size, dp_size >= ep ? dp_size / ep : 1,
                                    pp_rank, &l);
    if (st == MG_OK) st = mg_optimizer_init(&o, c, &g.params, &l, &(mg_optim_groups){0});
    if (st == MG_OK) st = mg_optimizer_plan(&o, &optim);
    mg_pp_schedule_params s = {
        .pp = g.pp,
        .vpp = g.n_chunks,
        .microbatches = c->global_batch_size / (c->micro_batch_size * dp_size),
        .group =
            c->microbatch_group_size_per_vp_stage > 0 ? c->microbatch_group_size_per_vp_stage : 0,
        .no_overlap_p2p = c->no_overlap_p2p_communication,
    };
    if (st == MG_OK) st = mg_pp_schedule_activation_slots(&s, pp_rank, &out->slots);
    /* the model reads only the compute dtype and the attention's saved bytes of its backend
     * while planning: fp32 is the cpu backend's, bf16 the cuda backend's */
    mg_backend stub;
    memset(&stub, 0, sizeof stub);
    stub.compute_dtype = compute;
    stub.device = compute == MG_F32 ? MG_DEVICE_CPU : MG_DEVICE_CUDA;
    stub.attention_saved_bytes = stub_saved_bytes;
    if (st == MG_OK) st = mg_gpt_plan(&g, &stub, c->micro_batch_size, out->slots, &acts, &work);
    int grad_bufs = 0;
    for (int fo = 0; st == MG_OK && fo < 2 && s.pp > 1; fo++) {
        mg_p2p_plan plan;
        st = mg_p2p_plan_build(&s, fo, pp_rank, &plan);
        if (plan.n_grad_bufs > grad_bufs) grad_bufs = plan.n_grad_bufs;
        mg_p2p_plan_free(&plan);
    }
    if (st == MG_OK) {
        size_t esz = mg_dtype_size(compute), numel = g.params.numel;
        size_t N = (size_t)c->micro_batch_size * (size_t)c->seq_length;
        /* messages overlap on groups with non-blocking point-to-point: MPI, the fp32 cpu
         * backend's (parallel/pipeline/run.h) */
        bool overlap = s.pp > 1 && !c->no_overlap_p2p_communication && compute == MG_F32;
        int bufs = mg_pipeline_buffer_count(grad_bufs, overlap);
        st = reserve(&work, (size_t)bufs * mg_gpt_hidden_numel(&g) * esz);
        /* every part as the trainer's arena commits it (train/trainer.c plan_memory) */
        size_t master = compute != MG_F32 ? o.numel * sizeof(float) : 0;
        size_t ids = (size_t)out->slots * N * sizeof(int32_t);
        size_t io_parts[6] = {ids,
                              ids, /* input ids, labels; positions, document starts */
                              c->reset_position_ids ? ids : 0,
                              c->reset_attention_mask ? ids : 0,
                              (c->eod_mask_loss ? (size_t)out->slots : 1) * N * sizeof(float),
                              MG_MEMORY_STATS * sizeof(float)};
        mg_arena io;
        mg_arena_init(&io, "batch");
        for (int k = 0; st == MG_OK && k < 6; k++) st = reserve(&io, io_parts[k]);
        out->params = mg_params_count(&g.params);
        out->weights = committed(numel * esz);
        out->grads = committed(numel * sizeof(float));
        out->master_weights = master ? committed(master) : 0;
        out->optimizer = mg_arena_committed_size(&optim);
        out->slot_bytes = g.slot_bytes;
        out->activations = mg_arena_committed_size(&acts);
        out->workspace = mg_arena_committed_size(&work);
        out->batch = mg_arena_committed_size(&io);
        out->total = out->weights + out->grads + out->master_weights + out->optimizer +
                     out->activations + out->workspace + out->batch;
    }
    mg_optimizer_free(&o);
    mg_train_buffers_free(&l);
    mg_gpt_free(&g);
    return st;
}
