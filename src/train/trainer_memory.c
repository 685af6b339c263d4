/* The trainer's memory (train/trainer_memory.h). */
#include "train/trainer_memory.h"
#include "train/trainer_graph.h"
#include "train/trainer_peer.h"

#include "core/log.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static mg_status sym_alloc(void *ctx, size_t bytes, void **out) {
    mg_train_memory *m = ctx;
    return mg_comm_sym_alloc(m->sym_groups, m->n_sym_groups, bytes, out);
}

static void sym_free(void *ctx, void *ptr) {
    mg_train_memory *m = ctx;
    (m->sym_abandon ? mg_comm_sym_abandon : mg_comm_sym_free)(m->sym_groups, m->n_sym_groups, ptr);
}

/* The groups whose all-gathers or equal all-to-alls can run on the copy engines (comm.h): the
 * tensor-parallel group's gathers under sequence parallelism, the data-parallel groups' gathers
 * of the distributed optimizer, the expert-parallel exchanges; none on the CPU backend or where
 * the world has no copy-engine collectives. */
static void sym_groups(mg_trainer *t) {
    mg_train_memory *m = &t->mem;
    const mg_train_layout *l = &t->layout;
    const mg_config *c = &t->cfg;
    mg_comm *want[4] = {
        l->tp_size > 1 && c->sequence_parallel ? l->tp : NULL,
        l->dp_size > 1 && c->use_distributed_optimizer ? l->dp : NULL,
        l->edp_size > 1 && c->use_distributed_optimizer ? l->edp : NULL,
        l->ep_size > 1 ? l->ep : NULL,
    };
    m->n_sym_groups = 0;
    if (t->be->device == MG_DEVICE_CPU) return;
    for (int i = 0; i < 4; i++) {
        bool seen = false;
        for (int k = 0; k < m->n_sym_groups; k++) seen |= m->sym_groups[k] == want[i];
        if (want[i] && !seen && mg_comm_copy_engine(want[i]))
            m->sym_groups[m->n_sym_groups++] = want[i];
    }
    m->sym_alloc = (mg_allocator){sym_alloc, sym_free, m};
    if (m->n_sym_groups == 0) return;
    char names[96] = "";
    for (int k = 0; k < m->n_sym_groups; k++)
        snprintf(names + strlen(names), sizeof names - strlen(names), "%s%s", k ? ", " : "",
                 mg_comm_name(m->sym_groups[k]));
    mg_log_self(l->tp_rank == 0 && l->dp_rank == 0,
                "> copy-engine collectives (MG_NCCL_COPY_ENGINE=1): weights, activations and "
                "workspace in symmetric memory; the all-gathers and equal all-to-alls of %s on "
                "the copy engines",
                names);
}

/* Commits the arenas (host memory on the CPU backend, the backend's allocation elsewhere; the
 * weights, activations and workspace in copy-engine memory where sym_groups found groups), the
 * model state (the first four) measured as the driver sees it where it can. */
static mg_status commit(mg_trainer *t) {
    mg_backend *be = t->be;
    mg_train_memory *m = &t->mem;
    m->arena_alloc = mg_backend_arena_allocator(be, &m->be_alloc);
    sym_groups(t);
    mg_arena *arenas[MG_MEMORY_ARENAS];
    mg_memory_plan_arenas(&m->plan, arenas);
    m->planned_bytes = 0;
    size_t free0 = 0, free1 = 0, total = 0;
    if (be->memory_info) MG_CHECK(be->memory_info(be, &free0, &total));
    m->used_before_arenas = total - free0;
    for (int i = 0; i < MG_MEMORY_ARENAS; i++) {
        if (arenas[i] != &m->plan.master || m->plan.masters) { /* else uncommitted: no memory */
            bool sym =
                m->n_sym_groups > 0 && (arenas[i] == &m->plan.params ||
                                        arenas[i] == &m->plan.acts || arenas[i] == &m->plan.work);
            const mg_allocator *peer = NULL; /* the SP gathers' destinations, mapped */
            if (!sym) MG_CHECK(mg_trainer_peer_arena(t, arenas[i], &peer));
            MG_CHECK(mg_arena_commit(arenas[i], sym    ? &m->sym_alloc
                                                : peer ? peer
                                                       : m->arena_alloc));
            m->planned_bytes += arenas[i]->size;
        }
        if (arenas[i] == &m->plan.optim && be->memory_info) {
            MG_CHECK(be->memory_info(be, &free1, &total));
            m->measured_state_bytes = free0 > free1 ? free0 - free1 : 0;
        }
    }
    return MG_OK;
}

static void log_plan(const mg_trainer *t) {
    const mg_backend *be = t->be;
    const mg_train_memory *m = &t->mem;
    const mg_memory_plan *p = &m->plan;
    const mg_train_layout *l = &t->layout;
    const double MiB = 1048576.0;
    /* one line per pipeline stage, from its first rank: the stages differ */
    char stage[48] = "";
    if (l->pp_size > 1) snprintf(stage, sizeof stage, ", pipeline rank %d", l->pp_rank);
    mg_log_self(l->tp_rank == 0 && l->dp_rank == 0,
                "> memory plan (%s, %s%s): parameters %.1f MiB, master weights %.1f MiB, "
                "gradients %.1f MiB, optimizer %.1f MiB, activations %.1f MiB (%d slots x %.2f "
                "MiB + %.2f MiB shared), workspace %.1f MiB, batch %.1f MiB, total %.1f MiB",
                be->name, be->device == MG_DEVICE_CPU ? "host memory" : "device memory", stage,
                p->params.size / MiB, p->masters ? p->master.size / MiB : 0.0, p->grads.size / MiB,
                p->optim.size / MiB, p->acts.size / MiB, t->model.n_slots,
                t->model.slot_bytes / MiB, t->model.rc_bytes / MiB, p->work.size / MiB,
                p->io.size / MiB, m->planned_bytes / MiB);
    if (be->memory_info) /* nothing is allocated after this point: the peak is known now */
        mg_log_self(l->tp_rank == 0 && l->dp_rank == 0,
                    "> predicted peak device memory%s: %.1f MiB (arenas %.1f MiB + %.1f MiB in use "
                    "before them: the CUDA context, the backend's workspace, libraries)",
                    stage, (double)(m->used_before_arenas + m->planned_bytes) / MiB,
                    m->planned_bytes / MiB, (double)m->used_before_arenas / MiB);
    mg_memory_per_param b = mg_trainer_memory_per_param(t);
    mg_log_info("> memory per parameter (%" PRId64 " parameters, from the arenas): weights %.2f B, "
                "gradients %.2f B, master weights %.2f B, optimizer state %.2f B%s, total %.2f B",
                b.params, b.weights, b.grads, b.master, b.optimizer,
                t->opt.sharded ? " (this rank's shard of the distributed optimizer)" : "",
                b.weights + b.grads + b.master + b.optimizer);
    if (be->memory_info) {
        int D = t->opt.sharded ? l->dp_size : 1;
        mg_log_info("> memory per parameter (%s, cudaMemGetInfo around the weight, gradient, "
                    "master and optimizer arenas): %.2f B; %s %.2f B",
                    be->name, (double)m->measured_state_bytes / (double)b.params,
                    D > 1 ? "the distributed optimizer's 6 + 12/d is" : "Megatron's table says",
                    6.0 + 12.0 / D);
    }
}

/* The buffers' places in the committed plan. */
static void bind(mg_trainer *t) {
    const mg_config *c = &t->cfg;
    mg_train_memory *m = &t->mem;
    mg_memory_plan *p = &m->plan;
    m->params = mg_arena_ptr(&p->params, p->off_params);
    m->params8 = t->model.params.fp8_from < t->model.params.numel
                     ? mg_arena_ptr(&p->params, p->off_params8)
                     : NULL;
    m->master = p->masters ? mg_arena_ptr(&p->master, p->off_master) : NULL;
    m->grads = mg_arena_ptr(&p->grads, p->off_grads);
    m->grad_stage = p->grad_stage_bytes ? mg_arena_ptr(&p->grads, p->off_grad_stage) : NULL;
    mg_optimizer_bind(&t->opt, &p->optim);
    m->pipe_buffers = mg_arena_ptr(&p->work, p->off_pipe);
    m->pipe_bytes = mg_pipeline_buffer_bytes(&t->pipe);
    mg_pipeline_bind(&t->pipe, m->pipe_buffers);
    m->tokens = mg_arena_ptr(&p->io, p->off_tokens);
    m->targets = mg_arena_ptr(&p->io, p->off_targets);
    m->positions = c->reset_position_ids ? mg_arena_ptr(&p->io, p->off_positions) : NULL;
    m->doc_starts = c->reset_attention_mask ? mg_arena_ptr(&p->io, p->off_doc_starts) : NULL;
    m->dloss = mg_arena_ptr(&p->io, p->off_dloss);
    const size_t N = (size_t)c->micro_batch_size * (size_t)c->seq_length,
                 slots = (size_t)t->pipe.n_slots;
    m->loss_w = c->eod_mask_loss ? m->dloss + slots * N : NULL;
    m->dloss_scaled = m->dloss + (c->eod_mask_loss ? 2 * slots : 1) * N;
    mg_memory_stats_block *sb = mg_arena_ptr(&p->io, p->off_stats);
    m->stats = sb->stats;
    m->ctl = &sb->ctl;
    m->loss = &m->stats[MG_STAT_LOSS];
}

mg_status mg_trainer_memory_init(mg_trainer *t) {
    const mg_config *c = &t->cfg;
    mg_backend *be = t->be;
    mg_train_memory *m = &t->mem;
    const mg_train_layout *l = &t->layout;
    mg_optim_groups og = {.tp = l->tp, .pp = l->pp, .ep = l->ep};
    for (int b = 0; b < t->bufs.n; b++) {
        og.group[b] = mg_trainer_buf_group(t, b);
        og.rank[b] = og.group[b] ? mg_comm_rank(og.group[b]) : 0;
    }
    MG_CHECK(mg_optimizer_init(&t->opt, c, &t->model.params, &t->bufs, &og));
    MG_CHECK(mg_memory_plan_reserve(&m->plan, c, &t->model, &t->opt,
                                    mg_gpt_target_of(&t->model, be, c->micro_batch_size),
                                    t->pipe.n_slots, mg_pipeline_buffer_bytes(&t->pipe),
                                    mg_trainer_graph_on(t) ? t->eval_microbatches : 0,
                                    mg_train_buffers_bf16_stage(&t->bufs, c)));
    MG_CHECK(commit(t));
    log_plan(t);
    bind(t);
    MG_CHECK(mg_gpt_bind(&t->model, be, m->params, m->grads, l->tp));
    mg_gpt_bind_fp8_params(&t->model, m->params8);
    size_t N = (size_t)c->micro_batch_size * (size_t)c->seq_length;
    m->host_tokens = malloc(N * sizeof(int32_t));
    m->host_targets = malloc(N * sizeof(int32_t));
    m->host_dloss = malloc(N * sizeof(float));
    if (!m->host_tokens || !m->host_targets || !m->host_dloss)
        return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the batch staging buffers");
    return MG_OK;
}

void mg_trainer_memory_free(mg_train_memory *m) {
    for (int k = 0; k < MG_TRAIN_PEERS; k++) {
        if (m->peer_group[k])
            mg_comm_peer_window_free(m->peer_group[k], &m->peer[k], m->sym_abandon);
        m->peer_group[k] = NULL;
    }
    mg_memory_plan_free(&m->plan);
    free(m->host_tokens);
    free(m->host_targets);
    free(m->host_dloss);
    free(m->host_docs);
}

mg_memory_per_param mg_trainer_memory_per_param(const mg_trainer *t) {
    const mg_memory_plan *p = &t->mem.plan;
    int64_t n = mg_params_count(&t->model.params);
    double d = n > 0 ? (double)n : 1.0;
    /* the master arena is never committed where the parameters are the fp32 masters */
    return (mg_memory_per_param){
        .params = n,
        .weights = (double)p->params.size / d,
        .grads = (double)p->grads.size / d,
        .master = p->masters ? (double)p->master.size / d : 0.0,
        .optimizer = (double)p->optim.size / d,
    };
}

mg_status mg_trainer_log_memory(mg_trainer *t, const char *when) {
    mg_backend *be = t->be;
    if (!be->memory_info) return MG_OK;
    size_t free_b = 0, total_b = 0;
    MG_CHECK(be->memory_info(be, &free_b, &total_b));
    const double MiB = 1048576.0;
    const mg_train_layout *l = &t->layout;
    double used = (double)(total_b - free_b),
           predicted = (double)(t->mem.used_before_arenas + t->mem.planned_bytes);
    char stage[32] = ""; /* the stages differ: one line each, from its first rank */
    if (l->pp_size > 1) snprintf(stage, sizeof stage, " (pipeline rank %d)", l->pp_rank);
    mg_log_self(l->tp_rank == 0 && l->dp_rank == 0,
                "> %s device memory%s %s: %.1f MiB used of %.1f MiB, predicted %.1f MiB (%+.1f%%: "
                "what libraries allocated on first use, and other processes)",
                be->name, stage, when, used / MiB, (double)total_b / MiB, predicted / MiB,
                100.0 * (used - predicted) / predicted);
    return MG_OK;
}
