#include "train/memory.h"

#include "parallel/layout.h"
#include "parallel/pipeline/run.h"
#include "parallel/pipeline/schedule.h"
#include "train/buffers.h"

#include <string.h>

static mg_status reserve(mg_arena *a, size_t bytes, size_t *off) {
    return mg_arena_reserve(a, bytes, 0, off);
}

mg_status mg_memory_plan_reserve(mg_memory_plan *p, const mg_config *c, mg_gpt *g, mg_optimizer *o,
                                 mg_gpt_target target, int n_slots, size_t pipe_bytes,
                                 int staged_microbatches, size_t grad_stage_bytes) {
    memset(p, 0, sizeof *p);
    mg_arena_init(&p->params, "parameters");
    mg_arena_init(&p->master, "master weights");
    mg_arena_init(&p->grads, "gradients");
    mg_arena_init(&p->optim, "optimizer state");
    mg_arena_init(&p->acts, "activations");
    mg_arena_init(&p->work, "workspace");
    mg_arena_init(&p->io, "batch");
    size_t numel = g->params.numel, esz = mg_dtype_size(target.compute);
    size_t N = (size_t)c->micro_batch_size * (size_t)c->seq_length, slots = (size_t)n_slots;
    p->masters = target.compute != MG_F32;
    /* the compute-dtype values: every element, but of the fp8 buffers (--fp8-param-gather) only
     * this rank's (train/optimizer.h's params_numel) */
    MG_CHECK(reserve(&p->params, o->params_numel * esz, &p->off_params));
    /* --fp8-param-gather: the fp8 buffers' bytes (train/buffers.h: the last elements) */
    MG_CHECK(reserve(&p->params, numel - g->params.fp8_from, &p->off_params8));
    if (p->masters) MG_CHECK(reserve(&p->master, o->numel * sizeof(float), &p->off_master));
    MG_CHECK(reserve(&p->grads, numel * sizeof(float), &p->off_grads));
    p->grad_stage_bytes = grad_stage_bytes;
    MG_CHECK(reserve(&p->grads, grad_stage_bytes, &p->off_grad_stage));
    MG_CHECK(mg_optimizer_plan(o, &p->optim));
    /* activation slots: as many as the schedule holds at once (parallel/pipeline/schedule.h),
     * and the pipeline's buffers for input gradients on their way */
    MG_CHECK(mg_gpt_plan(g, target, c->micro_batch_size, n_slots, &p->acts, &p->work));
    MG_CHECK(reserve(&p->work, pipe_bytes, &p->off_pipe));
    MG_CHECK(reserve(&p->io, slots * N * sizeof(int32_t), &p->off_tokens));
    MG_CHECK(reserve(&p->io, slots * N * sizeof(int32_t), &p->off_targets));
    /* packed documents: each slot's positions and document starts (train/trainer_docs.h) */
    MG_CHECK(reserve(&p->io, c->reset_position_ids ? slots * N * sizeof(int32_t) : 0,
                     &p->off_positions));
    MG_CHECK(reserve(&p->io, c->reset_attention_mask ? slots * N * sizeof(int32_t) : 0,
                     &p->off_doc_starts));
    /* the loss weights: one array, or each slot's with a loss mask (train/trainer_loss.h); and
     * the weights a training head uses, times the loss scale of the step-control block */
    MG_CHECK(reserve(&p->io, ((c->eod_mask_loss ? 2 * slots : 1) + 1) * N * sizeof(float),
                     &p->off_dloss));
    /* a graphed step's inputs: every microbatch's ids, labels and packed-document arrays, copied
     * in before the graph runs (train/trainer_graph.h) */
    const bool present[MG_STAGED_ARRAYS] = {true,
                                            true,
                                            c->reset_position_ids,
                                            c->reset_attention_mask,
                                            c->eod_mask_loss,
                                            c->eod_mask_loss};
    for (int k = 0; k < MG_STAGED_ARRAYS; k++) {
        size_t bytes = present[k] ? (size_t)staged_microbatches * N * sizeof(int32_t) : 0;
        p->staged_array_bytes[k] = bytes;
        p->staged_bytes += bytes;
        MG_CHECK(reserve(&p->io, bytes, &p->off_staged[k]));
    }
    return reserve(&p->io, sizeof(mg_memory_stats_block), &p->off_stats);
}

void mg_memory_plan_arenas(mg_memory_plan *p, mg_arena *out[MG_MEMORY_ARENAS]) {
    mg_arena *a[MG_MEMORY_ARENAS] = {&p->params, &p->master, &p->grads, &p->optim,
                                     &p->acts,   &p->work,   &p->io};
    memcpy(out, a, sizeof a);
}

void mg_memory_plan_free(mg_memory_plan *p) {
    mg_arena *a[MG_MEMORY_ARENAS];
    mg_memory_plan_arenas(p, a);
    for (int i = 0; i < MG_MEMORY_ARENAS; i++) mg_arena_free(a[i]);
}

/* The sizes of a reserved plan, as its commit takes them. */
static void stage_sizes(mg_memory_plan *p, mg_memory_stage *out) {
    out->weights = mg_arena_committed_size(&p->params);
    out->master_weights = p->masters ? mg_arena_committed_size(&p->master) : 0;
    out->grads = mg_arena_committed_size(&p->grads);
    out->optimizer = mg_arena_committed_size(&p->optim);
    out->activations = mg_arena_committed_size(&p->acts);
    out->workspace = mg_arena_committed_size(&p->work);
    out->batch = mg_arena_committed_size(&p->io);
    out->graph_inputs = p->staged_bytes;
    out->total = out->weights + out->grads + out->master_weights + out->optimizer +
                 out->activations + out->workspace + out->batch;
}

size_t mg_memory_tp_window_bytes(const mg_gpt *g, int mbs, mg_dtype compute) {
    const mg_model_config *m = &g->cfg;
    if (!m->sp || m->tp < 2) return 0;
    return (size_t)m->tp * (size_t)mg_model_config_rows(m, mbs * m->S) * (size_t)m->H *
           mg_dtype_size(compute);
}

size_t mg_memory_ep_window_bytes(const mg_gpt *g, mg_dtype compute) {
    if (g->cfg.moe.ep < 2 || g->moe_ws.n_layers == 0) return 0;
    return (size_t)g->moe_ws.R * (size_t)g->cfg.H * mg_dtype_size(compute);
}

size_t mg_memory_dp_window_bytes(const mg_grad_buffer_layout *l) {
    if (!l->cfg.use_distributed_optimizer || l->cfg.data_parallel_size < 2 ||
        !l->cfg.overlap_grad_reduce || l->n_buckets < 2)
        return 0;
    int64_t n = mg_grad_buffer_largest_bucket(l);
    return (size_t)(n < MG_MEMORY_DP_WINDOW_MAX ? n : MG_MEMORY_DP_WINDOW_MAX) * sizeof(float);
}

mg_status mg_memory_stage_estimate(const mg_config *c, int pp_rank, int dp_size, mg_dtype compute,
                                   mg_memory_stage *out) {
    memset(out, 0, sizeof *out);
    out->pp_rank = pp_rank;
    mg_gpt g;
    mg_train_buffers l = {0};
    mg_optimizer o = {0};
    mg_memory_plan p = {0};
    /* the backend: fp32 is the cpu backend's, anything else a cuda backend's */
    const mg_device device = compute == MG_F32 ? MG_DEVICE_CPU : MG_DEVICE_CUDA;
    const int ep = c->expert_model_parallel_size > 1 ? c->expert_model_parallel_size : 1;
    const int mbs = c->micro_batch_size;
    size_t pipe_bytes = 0;
    mg_status st = mg_gpt_build(&g, c, 0, pp_rank, 0);
    if (st != MG_OK) goto done;
    mg_gpt_mark_fp8_weights(&g, mg_gpt_target_for(&g, device, compute, mbs).fp8_grouped);
    MG_CHECK_GOTO(mg_train_buffers_build(&g.params, c, dp_size, dp_size >= ep ? dp_size / ep : 1,
                                         pp_rank, &l),
                  st, done);
    MG_CHECK_GOTO(mg_optimizer_init(&o, c, &g.params, &l, &(mg_optim_groups){0}), st, done);
    const mg_pp_schedule_params s =
        mg_layout_schedule(c, g.n_chunks, c->global_batch_size / (mbs * dp_size));
    /* the messages: tagged on the cpu backend's groups (MPI), on the pipeline stream on a
     * device's (NCCL) */
    const size_t hidden = (size_t)mg_model_config_rows(&g.cfg, mbs * g.cfg.S) * (size_t)g.cfg.H;
    const mg_pipe_comm comm = mg_pipeline_comm(&s, !c->no_overlap_p2p_communication,
                                               device == MG_DEVICE_CPU, device != MG_DEVICE_CPU);
    MG_CHECK_GOTO(mg_pipeline_sizes(&s, pp_rank, hidden, compute, comm, &out->slots, &pipe_bytes),
                  st, done);
    const int staged = c->cuda_graph_impl == MG_GRAPH_FULL_ITERATION
                           ? (int)(c->global_batch_size / (mbs * dp_size))
                           : 0;
    MG_CHECK_GOTO(mg_memory_plan_reserve(&p, c, &g, &o, mg_gpt_target_for(&g, device, compute, mbs),
                                         out->slots, pipe_bytes, staged,
                                         mg_train_buffers_bf16_stage(&l, c)),
                  st, done);
    out->params = mg_params_count(&g.params);
    out->slot_bytes = g.slot_bytes;
    out->recompute_bytes = g.rc_bytes;
    stage_sizes(&p, out);
    /* the expert-parallel stores are a device's alone; the sequence-parallel copies also run on
     * MPI's cpu ranks of one node */
    out->peer_windows = mg_memory_tp_window_bytes(&g, mbs, compute) +
                        (device != MG_DEVICE_CPU ? mg_memory_ep_window_bytes(&g, compute) : 0);
    for (int b = 0; b < l.n; b++) out->peer_windows += mg_memory_dp_window_bytes(&l.b[b].layout);
done:
    mg_memory_plan_free(&p);
    mg_optimizer_free(&o);
    mg_train_buffers_free(&l);
    mg_gpt_free(&g);
    return st;
}
