#include "train/trainer.h"

#include "comm/comm.h"
#include "core/env.h"
#include "config/flags.h"
#include "core/log.h"
#include "data/tokenizer.h"
#include "parallel/layout.h"
#include "parallel/ddp.h"
#include "parallel/pipeline/placement.h"
#include "train/metrics.h"
#include "train/backend_select.h"
#include "train/trainer_batch.h"
#include "train/trainer_data.h"
#include "train/trainer_docs.h"
#include "train/trainer_fp8.h"
#include "train/trainer_graph.h"
#include "train/trainer_loss.h"
#include "train/trainer_moe.h"
#include "train/trainer_peer.h"
#include "train/trainer_scaler.h"

#include <inttypes.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- set-up ---- */

/* The vocabulary size a tokenizer implies when --vocab-size is not given. */
static mg_status resolve_vocab(mg_config *c) {
    if (c->vocab_size > 0) return MG_OK;
    if (!mg_tokenizer_known_type(c->tokenizer_type))
        return MG_FAIL(MG_ERR_USAGE, "--vocab-size is required with --tokenizer-type %s",
                       c->tokenizer_type);
    mg_tokenizer *tok;
    mg_tokenizer_spec spec = {.type = c->tokenizer_type,
                              .vocab_file = c->vocab_file,
                              .merge_file = c->merge_file,
                              .model = c->tokenizer_model};
    MG_CHECK(mg_tokenizer_load(&tok, &spec));
    c->vocab_size = mg_tokenizer_vocab_size(tok);
    mg_tokenizer_free(tok);
    return MG_OK;
}

static mg_status set_batch_shape(mg_trainer *t) {
    const mg_config *c = &t->cfg;
    int64_t per_step = (int64_t)c->micro_batch_size * t->layout.dp_size;
    if (c->global_batch_size % per_step) /* mg_config_validate says so first for a launch */
        return MG_FAIL(MG_ERR_USAGE,
                       "global batch size (%d) is not divisible by micro batch size (%d) times "
                       "data parallel size (%d); make --global-batch-size a multiple of %lld",
                       c->global_batch_size, c->micro_batch_size, t->layout.dp_size,
                       (long long)per_step);
    t->num_microbatches = (int)(c->global_batch_size / per_step); /* the most, planned for */
    return mg_trainer_batch_init(t); /* --rampup-batch-size, --train-samples */
}

/* The model's hooks (model/gpt.h) drive the data-parallel overlap (parallel/ddp.h) and, in the
 * step's last backward, the sequence-parallel gradient sync: a norm's weight and bias gradient
 * holds only this rank's tokens and is all-reduced over tp (Megatron's _allreduce_layernorm_grads)
 * before its bucket's data-parallel reduction starts: a hook's gradients in one grouped call as
 * soon as they are complete, or, where no data-parallel reduction overlaps the backward, all of
 * them in one call at its end (sync_sp_grads). */
static mg_status hook_params_needed(void *ctx, const int *idx, int n) {
    mg_trainer *t = ctx;
    for (int b = 0; b < t->bufs.n; b++)
        if (mg_trainer_buf_group(t, b)) MG_CHECK(mg_ddp_params_needed(&t->ddp[b], idx, n));
    return MG_OK;
}

/* Parameters whose gradients are complete, to every buffer's reduction (each takes its own). */
static mg_status grads_ready(mg_trainer *t, const int *idx, int n) {
    for (int b = 0; n > 0 && b < t->bufs.n; b++)
        if (mg_trainer_buf_group(t, b)) MG_CHECK(mg_ddp_grads_ready(&t->ddp[b], idx, n));
    return MG_OK;
}

static mg_status hook_grads_ready(void *ctx, const int *idx, int n) {
    mg_trainer *t = ctx;
    if (!t->grad_sync_live) return MG_OK;
    int ready[MG_GPT_HOOK_MAX], k = 0, m = 0;
    void *sums[MG_GPT_HOOK_MAX];
    size_t counts[MG_GPT_HOOK_MAX];
    for (int i = 0; i < n; i++) {
        const mg_param_meta *p = &t->model.params.p[idx[i]];
        if (p->sequence_parallel && !t->sp_grads_at_end) {
            sums[m] = mg_gpt_grad(&t->model, idx[i]);
            counts[m++] = (size_t)p->numel;
        }
        /* the embedding's copies are complete after the pipeline (sync_embedding_grads) */
        if (!p->embedding_group) ready[k++] = idx[i];
    }
    MG_CHECK(mg_tp_all_reduce_many(&t->model.tp, sums, counts, m, MG_F32, MG_REDUCE_SUM));
    return grads_ready(t, ready, k);
}

/* The sequence-parallel gradients' tp sums at the backward's end, grouped GROUP at a time. */
static mg_status sync_sp_grads(mg_trainer *t) {
    enum { GROUP = 64 };
    if (!t->sp_grads_at_end) return MG_OK;
    const mg_param_table *pt = &t->model.params;
    void *sums[GROUP];
    size_t counts[GROUP];
    int m = 0;
    for (int i = 0; i < pt->n; i++) {
        if (!pt->p[i].sequence_parallel) continue;
        if (m == GROUP) {
            MG_CHECK(mg_tp_all_reduce_many(&t->model.tp, sums, counts, m, MG_F32, MG_REDUCE_SUM));
            m = 0;
        }
        sums[m] = mg_gpt_grad(&t->model, i);
        counts[m++] = (size_t)pt->p[i].numel;
    }
    return mg_tp_all_reduce_many(&t->model.tp, sums, counts, m, MG_F32, MG_REDUCE_SUM);
}

/* The rank's place: its groups (a group of one rank counts as none), ranks and sizes. */
static void layout_init(mg_train_layout *l, const mg_train_groups *g) {
    l->dp = g->dp;
    l->dp_rank = l->dp ? mg_comm_rank(l->dp) : 0;
    l->dp_size = l->dp ? mg_comm_size(l->dp) : 1;
    l->tp = g->tp;
    l->tp_rank = l->tp ? mg_comm_rank(l->tp) : 0;
    l->tp_size = l->tp ? mg_comm_size(l->tp) : 1;
    l->pp = g->pp;
    l->pp_rank = l->pp ? mg_comm_rank(l->pp) : 0;
    l->pp_size = l->pp ? mg_comm_size(l->pp) : 1;
    l->embd = g->embedding && mg_comm_size(g->embedding) > 1 ? g->embedding : NULL;
    l->ep = g->ep && mg_comm_size(g->ep) > 1 ? g->ep : NULL;
    l->ep_rank = l->ep ? mg_comm_rank(l->ep) : 0;
    l->ep_size = l->ep ? mg_comm_size(l->ep) : 1;
    /* with one expert-parallel rank the experts are replicated like the dense weights */
    l->edp = l->ep_size == 1 && !g->edp ? l->dp : g->edp;
    l->edp = l->edp && mg_comm_size(l->edp) > 1 ? l->edp : NULL;
    l->edp_rank = l->edp ? mg_comm_rank(l->edp) : 0;
    l->edp_size = l->edp ? mg_comm_size(l->edp) : 1;
}

/* A group's size must be the layout's (a front end that starts one process, megatron bench,
 * meets this first); mp: the ranks of one model replica. */
static mg_status check_group_size(const char *flag, int want, int have, int mp) {
    if (want < 1) want = 1;
    if (have == want) return MG_OK;
    return MG_FAIL(MG_ERR_USAGE,
                   "%s %d needs %d ranks per model replica, this run has %d; train it with "
                   "mpirun -np %d build/megatron train ...",
                   flag, want, want, have, mp);
}

static mg_status check_layout(const mg_train_layout *l, const mg_config *c) {
    int mp = (c->tensor_model_parallel_size > 1 ? c->tensor_model_parallel_size : 1) *
             (c->pipeline_model_parallel_size > 1 ? c->pipeline_model_parallel_size : 1);
    MG_CHECK(check_group_size("--tensor-model-parallel-size", c->tensor_model_parallel_size,
                              l->tp_size, mp));
    MG_CHECK(check_group_size("--pipeline-model-parallel-size", c->pipeline_model_parallel_size,
                              l->pp_size, mp));
    if (l->ep_size != (c->expert_model_parallel_size > 1 ? c->expert_model_parallel_size : 1))
        return MG_FAIL(MG_ERR_USAGE,
                       "--expert-model-parallel-size %d needs an expert-parallel group of that "
                       "many ranks; this trainer has %d",
                       c->expert_model_parallel_size, l->ep_size);
    if (l->edp_size * l->ep_size != l->dp_size)
        return MG_FAIL(MG_ERR_USAGE,
                       "an expert-data-parallel group of %d ranks times expert-parallel size %d "
                       "should be the data-parallel size %d",
                       l->edp_size, l->ep_size, l->dp_size);
    return MG_OK;
}

/* The backend --device names (train/backend_select.h), once a group settled auto: NCCL moves
 * device buffers, MPI host buffers. cfg.device receives the backend used, so the checkpoint
 * records it (resume compares only the model's shape: a run may resume on the other backend). */
static mg_status create_backend(mg_trainer *t) {
    mg_config *c = &t->cfg;
    const mg_train_layout *l = &t->layout;
    mg_comm *group = l->dp ? l->dp : l->tp ? l->tp : l->pp;
    if (!strcmp(c->device, "auto") && group)
        snprintf(c->device, sizeof c->device, "%s", mg_comm_device_buffers(group) ? "cuda" : "cpu");
    if (group && mg_comm_device_buffers(group) != !strcmp(c->device, "cuda"))
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "the %s group moves %s buffers, but --device %s keeps the "
                       "training state in %s memory (NCCL goes with cuda, MPI with cpu)",
                       l->dp   ? "data-parallel"
                       : l->tp ? "tensor-parallel"
                               : "pipeline-parallel",
                       mg_comm_device_buffers(group) ? "device" : "host", c->device,
                       strcmp(c->device, "cuda") ? "host" : "device");
    MG_CHECK(mg_train_backend_create(c, "training", &t->be, &t->gpu));
    return mg_backend_validate(t->be);
}

/* A pipeline's split in the schedule's model (parallel/pipeline/placement.h): one line with each
 * rank's idle share; the search for a faster split is `megatron plan`'s (seconds at large P x V,
 * too long for every start-up). */
static mg_status log_placement(const mg_config *c, const mg_pp_schedule_params *s) {
    const double out_layers = mg_output_layer_cost(c);
    if (s->pp < 2 || !(out_layers > 0) || mg_log_rank() != 0) return MG_OK; /* mg_log_info's */
    mg_layers_params lp = mg_layers_params_of(c);
    mg_layers_chunk *chunks = calloc((size_t)(s->pp * s->vpp), sizeof *chunks);
    mg_pp_placement pl = {0};
    mg_status st = chunks ? MG_OK : MG_FAIL(MG_ERR_NOMEM, "out of memory");
    if (st == MG_OK) st = mg_layers_plan(&lp, chunks);
    if (st == MG_OK) st = mg_pp_placement_model(s, chunks, out_layers, false, &pl);
    if (st == MG_OK) {
        char idle[256];
        size_t at = 0;
        for (int r = 0; r < s->pp && at + 12 < sizeof idle; r++)
            at += (size_t)snprintf(idle + at, sizeof idle - at, " %.1f%%", 100.0 * pl.idle[r]);
        mg_log_info("> pipeline split, in the schedule's model (the output layer and loss %.2f "
                    "layers): idle%s per rank (`megatron plan` with the same flags searches for "
                    "a faster split)",
                    out_layers, idle);
    }
    mg_pp_placement_free(&pl);
    free(chunks);
    return st;
}

/* The schedule of a step: Megatron's, from the layout and the microbatch count, and its
 * communication plan (messages of one micro-batch's residual rows x hidden). */
static mg_status plan_schedule(mg_trainer *t) {
    const mg_config *c = &t->cfg;
    const mg_model_config *m = &t->model.cfg;
    const mg_train_layout *l = &t->layout;
    const mg_pp_schedule_params s = mg_layout_schedule(c, t->model.n_chunks, t->num_microbatches);
    size_t hidden = (size_t)mg_model_config_rows(m, c->micro_batch_size * m->S) * (size_t)m->H;
    MG_CHECK(mg_pipeline_init(&t->pipe, &s, l->pp_rank, l->pp, t->be, hidden, t->be->compute_dtype,
                              !c->no_overlap_p2p_communication));
    MG_CHECK(log_placement(c, &s));
    /* the bubble is measured around each op by the backend's timer points: free on the cpu
     * backend (the host clock), a measurement mode on a device (one host sync per step) */
    const char *timing = mg_env_str("MG_PP_TIMING", "0");
    if (strcmp(timing, "0") != 0 && strcmp(timing, "1") != 0)
        return MG_FAIL(MG_ERR_USAGE, "MG_PP_TIMING=%s: expected 0 or 1 (default 0)", timing);
    t->pipe.timed = l->pp_size > 1 && (t->be->device == MG_DEVICE_CPU || strcmp(timing, "1") == 0);
    return MG_OK;
}

/* Each buffer's collectives over its group (parallel/ddp.h), and the model's hooks that drive
 * them. */
static mg_status init_ddp(mg_trainer *t) {
    const mg_config *c = &t->cfg;
    const size_t esz = mg_dtype_size(t->be->compute_dtype);
    for (int b = 0; b < t->bufs.n; b++) {
        const mg_train_buffer *bf = &t->bufs.b[b];
        /* an fp8 buffer gathers the bytes of its weights (train/buffers.h) */
        void *params = bf->fp8 ? (void *)(t->mem.params8 + (bf->base - t->model.params.fp8_from))
                               : (char *)t->mem.params + bf->base * esz;
        if (mg_trainer_buf_group(t, b))
            MG_CHECK(mg_ddp_init(&t->ddp[b], &bf->layout, bf->index, t->model.params.n,
                                 mg_trainer_buf_group(t, b), t->be, t->mem.grads + bf->base, params,
                                 bf->fp8 ? MG_U8 : t->be->compute_dtype, c->overlap_grad_reduce,
                                 c->overlap_param_gather, t->mem.grad_stage));
    }
    if (t->layout.dp || t->model.cfg.sp || t->layout.embd)
        t->model.hooks = (mg_gpt_hooks){hook_params_needed, hook_grads_ready, t};
    /* no buffer's reduction overlaps the backward: the sums can wait for its end */
    t->sp_grads_at_end = t->model.cfg.sp && t->layout.tp_size > 1;
    for (int b = 0; b < t->bufs.n; b++)
        if (mg_trainer_buf_group(t, b) && c->overlap_grad_reduce) t->sp_grads_at_end = false;
    return MG_OK;
}

mg_status mg_trainer_init(mg_trainer *t, const mg_config *cfg, const mg_train_groups *g) {
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    const mg_config *c = &t->cfg;
    const mg_train_layout *l = &t->layout;
    layout_init(&t->layout, g ? g : &(mg_train_groups){0});
    MG_CHECK(check_layout(l, c));
    MG_CHECK(resolve_vocab(&t->cfg));
    MG_CHECK(create_backend(t));
    MG_CHECK(mg_gpt_build(&t->model, c, l->tp_rank, l->pp_rank, l->ep_rank));
    /* --fp8-param-gather: the fp8 weights, which get buffers of their own */
    mg_gpt_mark_fp8_weights(&t->model,
                            mg_gpt_target_of(&t->model, t->be, c->micro_batch_size).fp8_grouped);
    MG_CHECK(
        mg_train_buffers_build(&t->model.params, c, l->dp_size, l->edp_size, l->pp_rank, &t->bufs));
    MG_CHECK(mg_lr_schedule_init(&t->lr, c));
    mg_grad_scaler_init(&t->scaling.scaler, c);
    MG_CHECK(set_batch_shape(t));
    MG_CHECK(plan_schedule(t));
    MG_CHECK(mg_trainer_memory_init(t));
    MG_CHECK(init_ddp(t));
    if (t->model.n_moe > 0) MG_CHECK(mg_trainer_moe_bind(t));
    MG_CHECK(mg_trainer_peer_bind(t));
    MG_CHECK(mg_train_data_open(&t->data, c, t->train_iters));
    MG_CHECK(mg_trainer_loss_init(t));
    MG_CHECK(mg_trainer_docs_init(t));
    MG_CHECK(mg_trainer_graph_init(t));
    MG_CHECK(mg_trainer_load_or_init(t));
    /* from the consumed samples: after a load */
    MG_CHECK(mg_train_data_loaders_init(&t->data, c, t->train_iters, l->dp_size, &t->state));
    /* Megatron averages the loss over every token of the global batch: 1/(tokens x microbatches)
     * per token, and the gradients are scaled by 1/D before they are summed over the group
     * (gradient_scaling_factor). Both factors are folded into one weight here; with D a power of
     * two that is bit for bit Megatron's product, and every microbatch's gradient equals the one
     * a single rank computes for the same samples. The loss scale multiplies it on the device
     * (Megatron scales the loss before backward; train/trainer_loss.h); with a power-of-two scale
     * that too is exact. */
    MG_CHECK(mg_trainer_upload_loss_weights(t));
    /* the step control from the initial or loaded state (train/trainer_scaler.h) */
    return mg_trainer_ctl_upload(t);
}

/* ---- one iteration ---- */

/* MG_FAULT_EXIT=R:I (tests): rank R dies in iteration I, in the middle of
 * the pipeline step (its first chunk's forward of the middle microbatch), telling nobody. */
static void maybe_fault_exit(const mg_trainer *t) {
    const char *v = mg_env_str("MG_FAULT_EXIT", "");
    int rank, it;
    if (*v && sscanf(v, "%d:%d", &rank, &it) == 2 && rank == mg_log_rank() &&
        it == t->state.iteration + 1) {
        fprintf(stderr, "[rank %d] MG_FAULT_EXIT: exiting in iteration %d\n", rank, it);
        _exit(3);
    }
}

/* ---- the schedule's ops (parallel/pipeline/run.h) on this rank's model chunks ---- */

static int32_t *slot_tokens(const mg_trainer *t, int slot) {
    return t->mem.tokens + (size_t)slot * (size_t)t->model.blk.N;
}
static int32_t *slot_targets(const mg_trainer *t, int slot) {
    return t->mem.targets + (size_t)slot * (size_t)t->model.blk.N;
}

/* The final norm, logits and loss of the microbatch in slot s (train/trainer_loss.h's weights;
 * training: the gradient weights times the step-control block's loss scale, on the device). */
static mg_status head_loss(mg_trainer *t, int slot) {
    const float *dloss, *loss_w;
    float scale;
    mg_trainer_loss_args(t, slot, &dloss, &loss_w, &scale);
    if (!t->forward_only) {
        MG_CHECK(t->be->scale_f32(t->be, t->mem.dloss_scaled, dloss, (size_t)t->model.blk.N,
                                  &t->mem.ctl->scale));
        dloss = t->mem.dloss_scaled;
    }
    return mg_gpt_head_loss(&t->model, t->be, slot, slot_targets(t, slot), dloss, loss_w,
                            t->mem.loss, scale);
}

static mg_status stage_forward(void *ctx, int mb, int chunk, int slot) {
    mg_trainer *t = ctx;
    const mg_gpt_chunk *ch = &t->model.chunks[chunk];
    int32_t *tokens = slot_tokens(t, slot), *targets = slot_targets(t, slot);
    if (!t->forward_only && mb == t->num_microbatches / 2 && chunk == 0) maybe_fault_exit(t);
    /* packed documents: every stage reads the ids (on the host) for its positions and masks */
    if (t->graph.staged) { /* a graphed step: the inputs were staged before it (trainer_graph.h) */
        MG_CHECK(mg_trainer_graph_inputs(t, mb, slot));
    } else {
        if (ch->pre || ch->post || mg_trainer_docs_on(t))
            MG_CHECK(mg_trainer_load_microbatch(t, t->pass_src, t->pass_first, mb,
                                                ch->pre ? tokens : NULL,
                                                ch->post ? targets : NULL));
        MG_CHECK(mg_trainer_docs_microbatch(t, slot));
    }
    /* dropout masks (training only): Megatron's streams at the microbatch's uses in this rank's
     * step (model/rng.h), or with --layout-invariant-dropout keyed by the iteration and the
     * microbatch's place in the global batch (load_microbatch's samples), the same for every
     * layout (core/dropout.h) */
    mg_gpt_set_dropout(&t->model, slot, !t->forward_only, mb, &t->mem.ctl->iteration,
                       (mb * t->layout.dp_size + t->layout.dp_rank) * t->cfg.micro_batch_size);
    MG_CHECK(mg_gpt_chunk_forward(&t->model, t->be, chunk, slot, tokens));
    /* an evaluation's loss; training computes it in the backward (model/gpt.h: the lazy head) */
    if (ch->post && !t->graph.staged) MG_CHECK(mg_trainer_loss_microbatch(t, slot));
    if (ch->post && t->forward_only) MG_CHECK(head_loss(t, slot));
    return MG_OK;
}

static mg_status stage_backward(void *ctx, int mb, int chunk, int slot) {
    mg_trainer *t = ctx;
    const mg_gpt_chunk *ch = &t->model.chunks[chunk];
    /* a chunk's last microbatch completes its gradients (Megatron's no_sync before it) */
    t->grad_sync_live = mb == t->num_microbatches - 1;
    if (t->grad_sync_live && !t->grad_sync_armed) {
        for (int b = 0; b < t->bufs.n; b++)
            if (mg_trainer_buf_group(t, b)) MG_CHECK(mg_ddp_start_grad_sync(&t->ddp[b]));
        t->grad_sync_armed = true;
    }
    if (ch->post) MG_CHECK(head_loss(t, slot));
    mg_status st = mg_gpt_chunk_backward(&t->model, t->be, chunk, slot, slot_tokens(t, slot));
    t->grad_sync_live = false;
    return st;
}

static void *stage_input(void *ctx, int chunk, int slot) {
    return mg_gpt_chunk_input(&((mg_trainer *)ctx)->model, chunk, slot);
}
static void *stage_output(void *ctx, int chunk, int slot) {
    return mg_gpt_chunk_output(&((mg_trainer *)ctx)->model, chunk, slot);
}
static void *stage_dout(void *ctx) {
    return mg_gpt_chunk_dout(&((mg_trainer *)ctx)->model);
}
static const void *stage_dinput(void *ctx) {
    return mg_gpt_chunk_dinput(&((mg_trainer *)ctx)->model);
}

mg_status mg_trainer_forward_backward(mg_trainer *t, const mg_sample_source *src, int64_t first,
                                      bool backward) {
    mg_backend *be = t->be;
    MG_CHECK(be->memset_zero(be, t->mem.loss, sizeof(float)));
    /* the global batch's unmasked tokens; a staged pass counted them with its inputs */
    if (!t->graph.staged) MG_CHECK(mg_trainer_loss_pass(t, src, first));
    t->pass_src = src;
    t->pass_first = first;
    t->forward_only = !backward;
    t->grad_sync_armed = false;
    t->model.moe_ws.train = backward;
    const mg_pipeline_stage stage = {
        stage_forward, stage_backward, stage_input, stage_output, stage_dout, stage_dinput, t};
    MG_CHECK(mg_pipeline_run(&t->pipe, &stage, !backward));
    if (backward) MG_CHECK(sync_sp_grads(t));
    if (t->layout.dp) {
        void *stream;
        MG_CHECK(mg_backend_comm_begin(be, &stream));
        MG_CHECK(mg_comm_all_reduce(t->layout.dp, t->mem.loss, t->mem.loss, 1, MG_F32,
                                    MG_REDUCE_SUM, stream));
        MG_CHECK(mg_backend_comm_end(be));
    }
    return MG_OK;
}

/* Megatron's _allreduce_word_embedding_grads: the first stage's embedding and the last stage's
 * copy sum their gradients over the embedding group, then join the data-parallel reduction. */
static mg_status sync_embedding_grads(mg_trainer *t) {
    if (!t->layout.embd) return MG_OK;
    const mg_param_table *pt = &t->model.params;
    void *stream;
    MG_CHECK(mg_backend_comm_begin(t->be, &stream));
    for (int i = 0; i < pt->n; i++)
        if (pt->p[i].embedding_group)
            MG_CHECK(mg_comm_all_reduce(t->layout.embd, mg_gpt_grad(&t->model, i),
                                        mg_gpt_grad(&t->model, i), (size_t)pt->p[i].numel, MG_F32,
                                        MG_REDUCE_SUM, stream));
    MG_CHECK(mg_backend_comm_end(t->be));
    for (int i = 0; t->grad_sync_armed && i < pt->n; i++)
        if (pt->p[i].embedding_group) MG_CHECK(grads_ready(t, &i, 1));
    return MG_OK;
}

/* A training step's device work, from zeroing the gradients to the statistics' copy: what a
 * full-iteration graph holds (train/trainer_graph.h). */
static mg_status step_body(mg_trainer *t, void *ctx) {
    (void)ctx;
    mg_backend *be = t->be;
    const int64_t gbs = t->step_global_batch;
    if (t->zero_spans)
        MG_CHECK(mg_trainer_moe_zero_grads(t));
    else
        MG_CHECK(be->memset_zero(be, t->mem.grads, t->model.params.numel * sizeof(float)));
    if (t->model.n_moe > 0) MG_CHECK(mg_trainer_moe_step_begin(t));
    MG_CHECK(
        mg_trainer_forward_backward(t, &t->data.train_src, t->state.consumed_train_samples, true));
    /* the step's masks are drawn: the dropout streams move on past its uses, on the device, also
     * when the update is skipped below (Megatron's generators advance regardless) */
    MG_CHECK(mg_model_rng_advance(&t->model.rng,
                                  mg_model_rng_step_uses(t->model.cfg.L, t->num_microbatches)));
    if (t->model.n_moe > 0) MG_CHECK(mg_trainer_moe_step_end(t));
    MG_CHECK(mg_trainer_fp8_step_end(t)); /* the scales of the next step */
    MG_CHECK(sync_embedding_grads(t));
    /* sum the buckets over the group: every rank gets them whole (all-reduce), or its shard of
     * each (reduce-scatter, distributed optimizer); with --overlap-grad-reduce most started
     * during backward */
    for (int b = 0; b < t->bufs.n; b++)
        if (mg_trainer_buf_group(t, b)) MG_CHECK(mg_ddp_finish_grad_sync(&t->ddp[b]));
    MG_CHECK(mg_trainer_fault_overflow(t));
    /* the gradient norm of the gradients unscaled by the block's loss scale, then the step's
     * control on the device (train/trainer_scaler.h): with a scaler a non-finite norm skips the
     * step (no update, no Adam step, no scheduler step; the iteration and the samples advance,
     * its loss and norm join no average: Megatron's training_log); the update uses the lr and
     * weight decay before this iteration's scheduler step. Nothing waits for the device. */
    MG_CHECK(mg_optimizer_norm(&t->opt, be, t->mem.grads, &t->mem.ctl->inv_scale));
    MG_CHECK(mg_trainer_step_control(t, gbs));
    MG_CHECK(mg_optimizer_update(&t->opt, be, t->mem.params, t->mem.master, t->mem.grads,
                                 t->mem.ctl->rate));
    MG_CHECK(mg_trainer_fp8_params(t)); /* --fp8-param-gather: the updated weights' fp8 bytes */
    /* each rank updated its shards: gather the buckets' parameters (now, or during the next
     * forward with --overlap-param-gather) */
    for (int b = 0; b < t->bufs.n; b++)
        if (t->opt.buf_sharded[b]) MG_CHECK(mg_ddp_start_param_sync(&t->ddp[b]));
    float *s = t->mem.stats;
    return be->copy_d2d(be, &s[MG_STAT_GRAD_NORM], &t->opt.scalars[1], sizeof(float));
}

mg_status mg_trainer_step_async(mg_trainer *t) {
    int64_t gbs; /* this iteration's global batch (it grows with --rampup-batch-size) */
    MG_CHECK(mg_trainer_batch_begin(t, &gbs));
    MG_CHECK(mg_trainer_fault_arm(t)); /* tests: the step's injected overflow, before any graph */
    if (mg_trainer_graph_on(t))
        MG_CHECK(mg_trainer_graph_run(t, MG_GRAPH_TRAIN, &t->data.train_src,
                                      t->state.consumed_train_samples, step_body, NULL));
    else
        MG_CHECK(step_body(t, NULL));
    t->state.iteration++;
    if (t->model.blk.graphs) mg_trainer_graph_note(t);
    t->state.consumed_train_samples += gbs;
    return MG_OK;
}

mg_status mg_trainer_read_stats(mg_trainer *t, mg_step_stats *out, bool reset_sums) {
    mg_backend *be = t->be;
    /* the statistics and the step control after them: one copy, the one host sync */
    mg_memory_stats_block h;
    _Static_assert(offsetof(mg_memory_stats_block, ctl) == MG_MEMORY_STATS * sizeof(float),
                   "the control block follows the statistics");
    MG_CHECK(be->copy_d2h(be, &h, t->mem.stats, sizeof h));
    const float *v = h.stats;
    mg_trainer_ctl_take(t, &h.ctl);
    out->skipped_iters = h.ctl.skipped_iters;
    out->nan_iters = h.ctl.nan_iters;
    out->last_skipped = h.ctl.last_skipped != 0;
    out->loss_scale = h.ctl.scale;
    out->loss = v[MG_STAT_LOSS];
    out->grad_norm = v[MG_STAT_GRAD_NORM];
    out->loss_sum = v[MG_STAT_LOSS_SUM];
    out->grad_norm_sum = v[MG_STAT_GRAD_NORM_SUM];
    out->moe_aux = v[MG_STAT_MOE_AUX];
    out->moe_z = v[MG_STAT_MOE_Z];
    out->moe_overflow_steps = t->moe_overflow_steps;
    _Static_assert(MG_STAT_GRAD_NORM_SUM == MG_STAT_LOSS_SUM + 1, "the sums are adjacent");
    _Static_assert(MG_STAT_END <= MG_MEMORY_STATS, "the batch arena holds the statistics");
    if (reset_sums) { /* the sums, and the counts of skipped, nan and over-budget iterations */
        t->moe_overflow_steps = 0;
        MG_CHECK(be->memset_zero(be, &t->mem.stats[MG_STAT_LOSS_SUM], 2 * sizeof(float)));
        _Static_assert(offsetof(mg_step_ctl, nan_iters) ==
                           offsetof(mg_step_ctl, skipped_iters) + sizeof(int64_t),
                       "the counts are adjacent");
        MG_CHECK(be->memset_zero(be, &t->mem.ctl->skipped_iters, 2 * sizeof(int64_t)));
    }
    return MG_OK;
}

mg_status mg_trainer_step(mg_trainer *t, double *loss, double *grad_norm) {
    MG_CHECK(mg_trainer_step_async(t));
    mg_step_stats s;
    MG_CHECK(mg_trainer_read_stats(t, &s, false));
    *loss = s.loss;
    *grad_norm = s.grad_norm;
    return MG_OK;
}

/* One evaluation batch: the forward of the global batch from sample ctx->first of ctx->src, its
 * mean loss added to the sum at the weight of its unmasked tokens (a graph of MG_GRAPH_EVAL holds
 * it). */
typedef struct {
    const mg_sample_source *src;
    int64_t first;
} eval_batch;

static float eval_weight(const mg_trainer *t) {
    const double full = (double)t->cfg.global_batch_size * t->cfg.seq_length;
    return (float)((double)t->pass_tokens / full);
}

static mg_status eval_body(mg_trainer *t, void *ctx) {
    const eval_batch *e = ctx;
    MG_CHECK(mg_trainer_forward_backward(t, e->src, e->first, false));
    return t->be->sum_f32(t->be, &t->mem.stats[MG_STAT_EVAL_SUM], t->mem.loss, NULL, 1,
                          eval_weight(t));
}

/* Mean loss over eval_iters global batches of src from sample *next (advanced past them).
 * Megatron sums every batch's (loss sum, token count) and divides at the end: each batch's mean
 * weighs its unmasked tokens over a whole batch's (1 without a loss mask, which is what lets a
 * graph hold an evaluation batch). */
static mg_status evaluate_stream(mg_trainer *t, const mg_sample_source *src, int64_t *next,
                                 double *loss) {
    mg_backend *be = t->be;
    float *sum = &t->mem.stats[MG_STAT_EVAL_SUM];
    MG_CHECK(be->memset_zero(be, sum, sizeof(float)));
    /* Megatron evaluates whole --global-batch-size batches, whatever a rampup trains with */
    MG_CHECK(mg_trainer_set_microbatches(t, t->eval_microbatches));
    double weights = 0;
    for (int i = 0; i < t->cfg.eval_iters; i++) {
        eval_batch e = {src, *next};
        /* with a loss mask a batch weighs its unmasked tokens, a host value: eager */
        if (mg_trainer_graph_on(t) && t->eod_id < 0)
            MG_CHECK(mg_trainer_graph_run(t, MG_GRAPH_EVAL, src, *next, eval_body, &e));
        else
            MG_CHECK(eval_body(t, &e));
        *next += t->cfg.global_batch_size;
        weights += eval_weight(t); /* pass_tokens: this batch's, or the captured one's (the same) */
    }
    float v = 0;
    if (t->cfg.eval_iters > 0) MG_CHECK(be->copy_d2h(be, &v, sum, sizeof v));
    *loss = t->cfg.eval_iters > 0 ? (double)v / (weights > 0 ? weights : 1.0) : NAN;
    return MG_OK;
}

mg_status mg_trainer_evaluate(mg_trainer *t, double *loss) {
    /* Megatron draws validation batches from a running position in the validation set */
    return evaluate_stream(t, &t->data.valid_src, &t->state.consumed_valid_samples, loss);
}

mg_status mg_trainer_evaluate_test(mg_trainer *t, double *loss) {
    int64_t first = 0; /* build_pretraining_data_loader(test_ds, 0) */
    return evaluate_stream(t, &t->data.test_src, &first, loss);
}

void mg_trainer_free(mg_trainer *t) {
    mg_trainer_graph_free(t); /* before the backend and the buffers it points into */
    mg_trainer_ckpt_free(t);  /* before the backend: its staging and scratch are the backend's */
    mg_metrics_close(&t->metrics);
    mg_train_data_free(&t->data);
    mg_gpt_free(&t->model);
    mg_pipeline_free(&t->pipe);
    mg_optimizer_free(&t->opt);
    for (int b = 0; b < MG_TRAIN_BUFFERS_MAX; b++) mg_ddp_free(&t->ddp[b]);
    mg_train_buffers_free(&t->bufs);
    mg_trainer_memory_free(&t->mem); /* the arenas go back to the backend before it goes */
    free(t->zero_spans);
    if (t->be) t->be->destroy(t->be);
    memset(t, 0, sizeof *t);
}
