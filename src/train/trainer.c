#include "train/trainer.h"

#include "comm/comm.h"
#include "core/env.h"
#include "config/flags.h"
#include "core/log.h"
#include "data/tokenizer.h"
#include "parallel/ddp.h"
#include "train/memory.h"
#include "train/trainer_batch.h"
#include "train/trainer_ckpt.h"
#include "train/trainer_docs.h"
#include "train/trainer_loader.h"
#include "train/trainer_loss.h"
#include "train/trainer_moe.h"
#include "train/trainer_scaler.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- set-up ---- */

/* --device: cpu, cuda on the local rank's GPU, or auto (cuda when this build has the CUDA
 * backend and the GPU can be used, else cpu). cfg.device receives the backend used, so the
 * checkpoint records it (resume compares only the model's shape: a run may resume on the
 * other backend). */
static mg_status create_backend(mg_trainer *t) {
    mg_config *c = &t->cfg;
    t->gpu = -1;
    /* a group settles auto: NCCL moves device buffers, MPI host buffers */
    mg_comm *group = t->dp ? t->dp : t->tp ? t->tp : t->pp;
    if (!strcmp(c->device, "auto") && group)
        snprintf(c->device, sizeof c->device, "%s", mg_comm_device_buffers(group) ? "cuda" : "cpu");
    if (group && mg_comm_device_buffers(group) != !strcmp(c->device, "cuda"))
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "the %s group moves %s buffers, but --device %s keeps the "
                       "training state in %s memory (NCCL goes with cuda, MPI with cpu)",
                       t->dp   ? "data-parallel"
                       : t->tp ? "tensor-parallel"
                               : "pipeline-parallel",
                       mg_comm_device_buffers(group) ? "device" : "host", c->device,
                       strcmp(c->device, "cuda") ? "host" : "device");
#ifdef MG_HAVE_CUDA
    const bool want_cuda = !strcmp(c->device, "cuda"), is_auto = !strcmp(c->device, "auto");
    if (want_cuda || is_auto) {
        mg_launch_info li;
        MG_CHECK(mg_launch_detect(&li));
        /* --fp16 computes in fp16 (loss scaling: train/grad_scaler.h), else bf16 */
        mg_status st =
            mg_backend_cuda_create_dtype(&t->be, li.local_rank, c->fp16 ? MG_F16 : MG_BF16);
        if (st == MG_OK) {
            t->gpu = li.local_rank;
            snprintf(c->device, sizeof c->device, "cuda");
            return MG_OK;
        }
        /* only "no usable GPU" falls back; a GPU that fails otherwise is an error */
        if (!is_auto || st != MG_ERR_UNSUPPORTED) return st;
        mg_log_info("> --device auto: %s; training on the cpu backend", mg_error_message());
        mg_error_clear();
    }
#else
    if (!strcmp(c->device, "cuda")) /* mg_config_validate already refuses it */
        return MG_FAIL(MG_ERR_UNSUPPORTED, "this build has no CUDA backend (nvcc/cuBLAS were not "
                                           "found when it was built); use --device cpu");
#endif
    snprintf(c->device, sizeof c->device, "cpu");
    return mg_backend_cpu_create(&t->be, c->num_threads);
}

/* Buffer b's reduction group (train/buffers.h): data-parallel for the dense buffer,
 * expert-data-parallel for the experts'; NULL: one rank, nothing to reduce. */
static mg_comm *buf_group(const mg_trainer *t, int b) {
    return t->bufs.b[b].expert ? t->edp : t->dp;
}

static mg_status plan_memory(mg_trainer *t) {
    const mg_config *c = &t->cfg;
    mg_backend *be = t->be;
    mg_gpt *g = &t->model;
    size_t numel = g->params.numel, esz = mg_dtype_size(be->compute_dtype);
    size_t N = (size_t)c->micro_batch_size * c->seq_length;
    /* fp32 masters only where the parameters are not fp32 themselves */
    const bool masters = be->compute_dtype != MG_F32;
    mg_arena_init(&t->a_params, "parameters");
    mg_arena_init(&t->a_master, "master weights");
    mg_arena_init(&t->a_grads, "gradients");
    mg_arena_init(&t->a_optim, "optimizer state");
    mg_arena_init(&t->a_acts, "activations");
    mg_arena_init(&t->a_work, "workspace");
    mg_arena_init(&t->a_io, "batch");
    mg_optim_groups og = {.tp = t->tp, .pp = t->pp, .ep = t->ep};
    for (int b = 0; b < t->bufs.n; b++) {
        og.group[b] = buf_group(t, b);
        og.rank[b] = og.group[b] ? mg_comm_rank(og.group[b]) : 0;
    }
    MG_CHECK(mg_optimizer_init(&t->opt, c, &g->params, &t->bufs, &og));
    MG_CHECK(mg_arena_reserve(&t->a_params, numel * esz, 0, &t->off_params));
    if (masters)
        MG_CHECK(mg_arena_reserve(&t->a_master, t->opt.numel * sizeof(float), 0, &t->off_master));
    MG_CHECK(mg_arena_reserve(&t->a_grads, numel * sizeof(float), 0, &t->off_grads));
    MG_CHECK(mg_optimizer_plan(&t->opt, &t->a_optim));
    /* activation slots: as many as the schedule holds at once (parallel/pipeline/schedule.h),
     * and the pipeline's buffers for input gradients on their way */
    MG_CHECK(mg_gpt_plan(g, be, c->micro_batch_size, t->pipe.n_slots, &t->a_acts, &t->a_work));
    size_t off_pipe, slots = (size_t)t->pipe.n_slots;
    MG_CHECK(mg_arena_reserve(&t->a_work, mg_pipeline_buffer_bytes(&t->pipe), 0, &off_pipe));
    MG_CHECK(mg_arena_reserve(&t->a_io, slots * N * sizeof(int32_t), 0, &t->off_tokens));
    MG_CHECK(mg_arena_reserve(&t->a_io, slots * N * sizeof(int32_t), 0, &t->off_targets));
    /* packed documents: each slot's positions and document starts (train/trainer_docs.h) */
    MG_CHECK(mg_arena_reserve(&t->a_io, c->reset_position_ids ? slots * N * sizeof(int32_t) : 0, 0,
                              &t->off_positions));
    MG_CHECK(mg_arena_reserve(&t->a_io, c->reset_attention_mask ? slots * N * sizeof(int32_t) : 0,
                              0, &t->off_doc_starts));
    /* the loss weights: one array, or each slot's with a loss mask (train/trainer_loss.h) */
    size_t dloss_n = (c->eod_mask_loss ? slots : 1) * N;
    MG_CHECK(mg_arena_reserve(&t->a_io, dloss_n * sizeof(float), 0, &t->off_dloss));
    MG_CHECK(mg_arena_reserve(&t->a_io, MG_MEMORY_STATS * sizeof(float), 0, &t->off_stats));

    /* host memory on the CPU backend (as before), the backend's allocation elsewhere */
    t->arena_alloc = mg_backend_arena_allocator(be, &t->be_alloc);
    mg_arena *arenas[] = {&t->a_params, &t->a_master, &t->a_grads, &t->a_optim,
                          &t->a_acts,   &t->a_work,   &t->a_io};
    t->planned_bytes = 0;
    /* the model state (the first four arenas) is measured as the driver sees it, where it can */
    size_t free0 = 0, free1 = 0, total = 0;
    if (be->memory_info) MG_CHECK(be->memory_info(be, &free0, &total));
    t->used_before_arenas = total - free0;
    for (size_t i = 0; i < sizeof arenas / sizeof *arenas; i++) {
        if (arenas[i] != &t->a_master || masters) { /* else uncommitted: no memory */
            MG_CHECK(mg_arena_commit(arenas[i], t->arena_alloc));
            t->planned_bytes += arenas[i]->size;
        }
        if (arenas[i] == &t->a_optim && be->memory_info) {
            MG_CHECK(be->memory_info(be, &free1, &total));
            t->measured_state_bytes = free0 > free1 ? free0 - free1 : 0;
        }
    }
    const double MiB = 1048576.0;
    /* one line per pipeline stage, from its first rank: the stages differ */
    char stage[48] = "";
    if (t->pp_size > 1) snprintf(stage, sizeof stage, ", pipeline rank %d", t->pp_rank);
    mg_log_self(t->tp_rank == 0 && t->dp_rank == 0,
                "> memory plan (%s, %s%s): parameters %.1f MiB, master weights %.1f MiB, "
                "gradients %.1f MiB, optimizer %.1f MiB, activations %.1f MiB (%d slots x %.2f "
                "MiB), workspace %.1f MiB, batch %.1f MiB, total %.1f MiB",
                be->name, be->device == MG_DEVICE_CPU ? "host memory" : "device memory", stage,
                t->a_params.size / MiB, masters ? t->a_master.size / MiB : 0.0,
                t->a_grads.size / MiB, t->a_optim.size / MiB, t->a_acts.size / MiB, g->n_slots,
                g->slot_bytes / MiB, t->a_work.size / MiB, t->a_io.size / MiB,
                t->planned_bytes / MiB);
    if (be->memory_info) /* nothing is allocated after this point: the peak is known now */
        mg_log_self(t->tp_rank == 0 && t->dp_rank == 0,
                    "> predicted peak device memory%s: %.1f MiB (arenas %.1f MiB + %.1f MiB in use "
                    "before them: the CUDA context, the backend's workspace, libraries)",
                    stage, (double)(t->used_before_arenas + t->planned_bytes) / MiB,
                    t->planned_bytes / MiB, (double)t->used_before_arenas / MiB);
    mg_memory_per_param b = mg_trainer_memory_per_param(t);
    mg_log_info("> memory per parameter (%" PRId64 " parameters, from the arenas): weights %.2f B, "
                "gradients %.2f B, master weights %.2f B, optimizer state %.2f B%s, total %.2f B",
                b.params, b.weights, b.grads, b.master, b.optimizer,
                t->opt.sharded ? " (this rank's shard of the distributed optimizer)" : "",
                b.weights + b.grads + b.master + b.optimizer);
    if (be->memory_info) {
        int D = t->opt.sharded ? t->dp_size : 1;
        mg_log_info("> memory per parameter (%s, cudaMemGetInfo around the weight, gradient, "
                    "master and optimizer arenas): %.2f B; %s %.2f B",
                    be->name, (double)t->measured_state_bytes / (double)b.params,
                    D > 1 ? "the distributed optimizer's 6 + 12/d is" : "Megatron's table says",
                    6.0 + 12.0 / D);
    }
    t->params = mg_arena_ptr(&t->a_params, t->off_params);
    t->master = masters ? mg_arena_ptr(&t->a_master, t->off_master) : NULL;
    t->grads = mg_arena_ptr(&t->a_grads, t->off_grads);
    mg_optimizer_bind(&t->opt, &t->a_optim);
    t->pipe_buffers = mg_arena_ptr(&t->a_work, off_pipe);
    t->pipe_bytes = mg_pipeline_buffer_bytes(&t->pipe);
    mg_pipeline_bind(&t->pipe, t->pipe_buffers);
    t->tokens = mg_arena_ptr(&t->a_io, t->off_tokens);
    t->targets = mg_arena_ptr(&t->a_io, t->off_targets);
    t->positions = c->reset_position_ids ? mg_arena_ptr(&t->a_io, t->off_positions) : NULL;
    t->doc_starts = c->reset_attention_mask ? mg_arena_ptr(&t->a_io, t->off_doc_starts) : NULL;
    t->dloss = mg_arena_ptr(&t->a_io, t->off_dloss);
    t->stats = mg_arena_ptr(&t->a_io, t->off_stats);
    t->loss = &t->stats[MG_STAT_LOSS];
    MG_CHECK(mg_gpt_bind(g, be, t->params, t->grads, t->tp));
    t->host_tokens = malloc(N * sizeof(int32_t));
    t->host_targets = malloc(N * sizeof(int32_t));
    t->host_dloss = malloc(N * sizeof(float));
    if (!t->host_tokens || !t->host_targets || !t->host_dloss)
        return MG_FAIL(MG_ERR_NOMEM, "cannot allocate the batch staging buffers");
    return MG_OK;
}

mg_memory_per_param mg_trainer_memory_per_param(const mg_trainer *t) {
    int64_t n = mg_params_count(&t->model.params);
    double p = n > 0 ? (double)n : 1.0;
    /* the master arena is never committed where the parameters are the fp32 masters */
    return (mg_memory_per_param){
        .params = n,
        .weights = (double)t->a_params.size / p,
        .grads = (double)t->a_grads.size / p,
        .master = t->be->compute_dtype != MG_F32 ? (double)t->a_master.size / p : 0.0,
        .optimizer = (double)t->a_optim.size / p,
    };
}

mg_status mg_trainer_set_weights(mg_trainer *t, const float *host) {
    mg_backend *be = t->be;
    size_t n = t->model.params.numel;
    if (t->master) /* this rank's shards, from the full host copy */
        for (int s = 0; s < t->opt.n_shards; s++) {
            const mg_optim_shard *sh = &t->opt.shards[s];
            MG_CHECK(
                be->copy_h2d(be, t->master + sh->local, host + sh->world, sh->n * sizeof(float)));
        }
    /* the same rounding (to nearest even) as AdamW's write of the updated master */
    return be->upload_f32(be, t->params, host, n);
}

mg_status mg_trainer_sync_params(mg_trainer *t) {
    for (int b = 0; b < t->bufs.n; b++)
        if (buf_group(t, b)) MG_CHECK(mg_ddp_finish_param_sync(&t->ddp[b]));
    return MG_OK;
}

mg_status mg_trainer_get_weights(mg_trainer *t, float *host) {
    mg_backend *be = t->be;
    size_t n = t->model.params.numel;
    MG_CHECK(mg_trainer_sync_params(t));
    if (!t->master) return be->download_f32(be, host, t->params, n);
    for (int b = 0; b < t->bufs.n; b++) {
        const mg_optimizer *o = &t->opt;
        float *dst = host + t->bufs.b[b].base, *src = t->master + o->buf_local[b];
        /* sharded fp32 masters: every rank's shards, gathered; unsharded, the buffer's local
         * coordinates are its own */
        if (o->buf_sharded[b])
            MG_CHECK(mg_ddp_gather_shards_f32(&t->ddp[b], src, dst));
        else
            MG_CHECK(be->copy_d2h(be, dst, src, o->buf_numel[b] * sizeof(float)));
    }
    return MG_OK;
}

mg_status mg_trainer_log_memory(mg_trainer *t, const char *when) {
    mg_backend *be = t->be;
    if (!be->memory_info) return MG_OK;
    size_t free_b = 0, total_b = 0;
    MG_CHECK(be->memory_info(be, &free_b, &total_b));
    const double MiB = 1048576.0;
    double used = (double)(total_b - free_b),
           predicted = (double)(t->used_before_arenas + t->planned_bytes);
    char stage[32] = ""; /* the stages differ: one line each, from its first rank */
    if (t->pp_size > 1) snprintf(stage, sizeof stage, " (pipeline rank %d)", t->pp_rank);
    mg_log_self(t->tp_rank == 0 && t->dp_rank == 0,
                "> %s device memory%s %s: %.1f MiB used of %.1f MiB, predicted %.1f MiB (%+.1f%%: "
                "what libraries allocated on first use, and other processes)",
                be->name, stage, when, used / MiB, (double)total_b / MiB, predicted / MiB,
                100.0 * (used - predicted) / predicted);
    return MG_OK;
}

static mg_status gpt_split_sample(void *ctx, int64_t index, int32_t *tokens, int32_t *targets) {
    struct mg_gpt_split_source *s = ctx;
    return mg_gpt_data_sample_pair(s->data, s->split, index, tokens, targets);
}

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

/* Train and validation samples: Megatron's mock streams or its GPT datasets, with the split
 * sizes of get_train_valid_test_num_samples. */
static mg_status open_data(mg_trainer *t) {
    const mg_config *c = &t->cfg;
    t->have_valid = c->eval_iters > 0;
    if (!c->data_path[0]) {
        MG_CHECK(mg_mock_init(&t->train_data, (uint64_t)c->seed, 0, c->vocab_size, c->seq_length));
        MG_CHECK(mg_mock_init(&t->valid_data, (uint64_t)c->seed, 1, c->vocab_size, c->seq_length));
        /* Megatron's mock data has a test split too: evaluated after training */
        MG_CHECK(mg_mock_init(&t->test_data, (uint64_t)c->seed, 2, c->vocab_size, c->seq_length));
        t->test_src = (mg_sample_source){mg_mock_source, &t->test_data};
        t->have_test = c->eval_iters > 0;
        t->train_src = (mg_sample_source){mg_mock_source, &t->train_data};
        t->valid_src = (mg_sample_source){mg_mock_source, &t->valid_data};
        return MG_OK;
    }
    int64_t gbs = c->global_batch_size;
    int64_t evals = c->eval_interval > 0 ? t->train_iters / c->eval_interval + 1 : 1;
    mg_gpt_data_config dc = {
        .data_path = c->data_path,
        .split = c->split,
        .seq_length = c->seq_length,
        .seed = (uint64_t)c->seed,
        .cache_path = c->data_cache_path,
        /* get_train_valid_test_num_samples: the test split is one evaluation, built only when
         * it is evaluated (so a weighted blend needs no count for it otherwise) */
        .num_samples = {c->train_samples > 0 ? c->train_samples : t->train_iters * gbs,
                        evals * c->eval_iters * gbs,
                        c->eval_iters > 0 ? (int64_t)c->eval_iters * gbs : MG_GPT_SPLIT_UNUSED},
        /* a tiny test share of a small corpus may hold no document (Megatron would not finish
         * building it): then there is no test evaluation */
        .may_be_empty = {false, false, true},
    };
    MG_CHECK(mg_gpt_data_build(&t->gpt_data, &dc));
    t->train_split = (struct mg_gpt_split_source){t->gpt_data, 0};
    t->valid_split = (struct mg_gpt_split_source){t->gpt_data, 1};
    t->train_src = (mg_sample_source){gpt_split_sample, &t->train_split};
    t->valid_src = (mg_sample_source){gpt_split_sample, &t->valid_split};
    t->test_split = (struct mg_gpt_split_source){t->gpt_data, 2};
    t->test_src = (mg_sample_source){gpt_split_sample, &t->test_split};
    /* as Megatron's do_test: a split without documents or weight has no dataset */
    t->have_test = c->eval_iters > 0 && mg_gpt_data_len(t->gpt_data, 2) > 0;
    if (mg_gpt_data_len(t->gpt_data, 0) == 0)
        return MG_FAIL(MG_ERR_USAGE, "--split %s leaves no training documents in %s", c->split,
                       c->data_path);
    if (t->have_valid && mg_gpt_data_len(t->gpt_data, 1) == 0) {
        mg_log_warn("--split %s leaves no validation documents; evaluation is skipped", c->split);
        t->have_valid = false;
    }
    mg_log_info("> datasets: train %" PRId64 " samples (%d epochs), valid %" PRId64
                " samples, test %" PRId64 " samples",
                mg_gpt_data_len(t->gpt_data, 0), mg_gpt_data_num_epochs(t->gpt_data, 0),
                mg_gpt_data_len(t->gpt_data, 1), mg_gpt_data_len(t->gpt_data, 2));
    return MG_OK;
}

static mg_status set_batch_shape(mg_trainer *t) {
    const mg_config *c = &t->cfg;
    int64_t per_step = (int64_t)c->micro_batch_size * t->dp_size;
    if (c->global_batch_size % per_step) /* mg_config_validate says so first for a launch */
        return MG_FAIL(MG_ERR_USAGE,
                       "global batch size (%d) is not divisible by micro batch size (%d) times "
                       "data parallel size (%d); make --global-batch-size a multiple of %lld",
                       c->global_batch_size, c->micro_batch_size, t->dp_size, (long long)per_step);
    t->num_microbatches = (int)(c->global_batch_size / per_step); /* the most, planned for */
    return mg_trainer_batch_init(t); /* --rampup-batch-size, --train-samples */
}

/* The model's hooks (model/gpt.h) drive the data-parallel overlap (parallel/ddp.h) and, in the
 * step's last backward, the sequence-parallel gradient sync: a norm weight's gradient holds only
 * this rank's tokens and is all-reduced over tp as soon as it is complete (Megatron's
 * _allreduce_layernorm_grads), before its bucket's data-parallel reduction starts. */
static mg_status hook_params_needed(void *ctx, const int *idx, int n) {
    mg_trainer *t = ctx;
    for (int b = 0; b < t->bufs.n; b++)
        if (buf_group(t, b)) MG_CHECK(mg_ddp_params_needed(&t->ddp[b], idx, n));
    return MG_OK;
}

/* Parameters whose gradients are complete, to every buffer's reduction (each takes its own). */
static mg_status grads_ready(mg_trainer *t, const int *idx, int n) {
    for (int b = 0; n > 0 && b < t->bufs.n; b++)
        if (buf_group(t, b)) MG_CHECK(mg_ddp_grads_ready(&t->ddp[b], idx, n));
    return MG_OK;
}

static mg_status hook_grads_ready(void *ctx, const int *idx, int n) {
    mg_trainer *t = ctx;
    if (!t->grad_sync_live) return MG_OK;
    int ready[MG_GPT_HOOK_MAX], k = 0;
    for (int i = 0; i < n; i++) {
        const mg_param_meta *m = &t->model.params.p[idx[i]];
        if (m->sequence_parallel)
            MG_CHECK(mg_tp_all_reduce(&t->model.tp, mg_gpt_grad(&t->model, idx[i]),
                                      (size_t)m->numel, MG_F32, MG_REDUCE_SUM));
        /* the embedding's copies are complete after the pipeline (sync_embedding_grads) */
        if (!m->embedding_group) ready[k++] = idx[i];
    }
    return grads_ready(t, ready, k);
}

mg_status mg_trainer_init(mg_trainer *t, const mg_config *cfg) {
    return mg_trainer_init_groups(t, cfg, NULL);
}

mg_status mg_trainer_init_dp(mg_trainer *t, const mg_config *cfg, mg_comm *dp) {
    return mg_trainer_init_groups(t, cfg, &(mg_train_groups){.dp = dp});
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

/* The schedule of a step: Megatron's, from the layout and the microbatch count, and its
 * communication plan (messages of one micro-batch's residual rows x hidden). */
static mg_status plan_schedule(mg_trainer *t) {
    const mg_config *c = &t->cfg;
    const mg_model_config *m = &t->model.cfg;
    mg_pp_schedule_params s = {
        .pp = t->pp_size,
        .vpp = t->model.n_chunks,
        .microbatches = t->num_microbatches,
        .group =
            c->microbatch_group_size_per_vp_stage > 0 ? c->microbatch_group_size_per_vp_stage : 0,
        .no_overlap_p2p = c->no_overlap_p2p_communication,
    };
    size_t hidden = (size_t)mg_model_config_rows(m, c->micro_batch_size * m->S) * (size_t)m->H;
    MG_CHECK(mg_pipeline_init(&t->pipe, &s, t->pp_rank, t->pp, t->be, hidden, t->be->compute_dtype,
                              !c->no_overlap_p2p_communication));
    /* the bubble is measured by the host clock around each op: free on the cpu backend, whose ops
     * complete in the call; a measurement mode (a synchronisation per op) on a device */
    const char *timing = mg_env_str("MG_PP_TIMING", "0");
    if (strcmp(timing, "0") != 0 && strcmp(timing, "1") != 0)
        return MG_FAIL(MG_ERR_USAGE, "MG_PP_TIMING=%s: expected 0 or 1 (default 0)", timing);
    t->pipe.timed = t->pp_size > 1 && (t->be->device == MG_DEVICE_CPU || strcmp(timing, "1") == 0);
    return MG_OK;
}

mg_status mg_trainer_init_groups(mg_trainer *t, const mg_config *cfg, const mg_train_groups *gr) {
    memset(t, 0, sizeof *t);
    t->cfg = *cfg;
    mg_train_groups none = {0};
    if (!gr) gr = &none;
    t->dp = gr->dp;
    t->dp_rank = t->dp ? mg_comm_rank(t->dp) : 0;
    t->dp_size = t->dp ? mg_comm_size(t->dp) : 1;
    t->tp = gr->tp;
    t->tp_rank = t->tp ? mg_comm_rank(t->tp) : 0;
    t->tp_size = t->tp ? mg_comm_size(t->tp) : 1;
    t->pp = gr->pp;
    t->pp_rank = t->pp ? mg_comm_rank(t->pp) : 0;
    t->pp_size = t->pp ? mg_comm_size(t->pp) : 1;
    t->embd = gr->embedding && mg_comm_size(gr->embedding) > 1 ? gr->embedding : NULL;
    t->ep = gr->ep && mg_comm_size(gr->ep) > 1 ? gr->ep : NULL;
    t->ep_rank = t->ep ? mg_comm_rank(t->ep) : 0;
    t->ep_size = t->ep ? mg_comm_size(t->ep) : 1;
    /* with one expert-parallel rank the experts are replicated like the dense weights */
    t->edp = t->ep_size == 1 && !gr->edp ? t->dp : gr->edp;
    t->edp = t->edp && mg_comm_size(t->edp) > 1 ? t->edp : NULL;
    t->edp_rank = t->edp ? mg_comm_rank(t->edp) : 0;
    t->edp_size = t->edp ? mg_comm_size(t->edp) : 1;
    int mp = (cfg->tensor_model_parallel_size > 1 ? cfg->tensor_model_parallel_size : 1) *
             (cfg->pipeline_model_parallel_size > 1 ? cfg->pipeline_model_parallel_size : 1);
    MG_CHECK(check_group_size("--tensor-model-parallel-size", cfg->tensor_model_parallel_size,
                              t->tp_size, mp));
    MG_CHECK(check_group_size("--pipeline-model-parallel-size", cfg->pipeline_model_parallel_size,
                              t->pp_size, mp));
    MG_CHECK(resolve_vocab(&t->cfg));
    const mg_config *c = &t->cfg;
    MG_CHECK(create_backend(t));
    MG_CHECK(mg_backend_validate(t->be));
    if (t->ep_size != (cfg->expert_model_parallel_size > 1 ? cfg->expert_model_parallel_size : 1))
        return MG_FAIL(MG_ERR_USAGE,
                       "--expert-model-parallel-size %d needs an expert-parallel group of that "
                       "many ranks; this trainer has %d",
                       cfg->expert_model_parallel_size, t->ep_size);
    if (t->edp_size * t->ep_size != t->dp_size)
        return MG_FAIL(MG_ERR_USAGE,
                       "an expert-data-parallel group of %d ranks times expert-parallel size %d "
                       "should be the data-parallel size %d",
                       t->edp_size, t->ep_size, t->dp_size);
    MG_CHECK(mg_gpt_build_ep(&t->model, c, t->tp_rank, t->pp_rank, t->ep_rank));
    MG_CHECK(
        mg_train_buffers_build(&t->model.params, c, t->dp_size, t->edp_size, t->pp_rank, &t->bufs));
    MG_CHECK(mg_lr_schedule_init(&t->lr, c));
    mg_grad_scaler_init(&t->scaler, c);
    MG_CHECK(set_batch_shape(t));
    MG_CHECK(plan_schedule(t));
    MG_CHECK(plan_memory(t));
    for (int b = 0; b < t->bufs.n; b++) {
        const mg_train_buffer *bf = &t->bufs.b[b];
        size_t esz = mg_dtype_size(t->be->compute_dtype);
        if (buf_group(t, b))
            MG_CHECK(mg_ddp_init(&t->ddp[b], &bf->layout, bf->index, t->model.params.n,
                                 buf_group(t, b), t->be, t->grads + bf->base,
                                 (char *)t->params + bf->base * esz, t->be->compute_dtype,
                                 c->overlap_grad_reduce, c->overlap_param_gather));
    }
    if (t->dp || t->model.cfg.sp || t->embd)
        t->model.hooks = (mg_gpt_hooks){hook_params_needed, hook_grads_ready, t};
    if (t->model.n_moe > 0) MG_CHECK(mg_trainer_moe_bind(t));
    MG_CHECK(open_data(t));
    MG_CHECK(mg_trainer_loss_init(t));
    MG_CHECK(mg_trainer_docs_init(t));
    MG_CHECK(mg_trainer_load_or_init(t));
    MG_CHECK(mg_trainer_loaders_init(t)); /* from the consumed samples: after a load */
    /* Megatron averages the loss over every token of the global batch: 1/(tokens x microbatches)
     * per token, and the gradients are scaled by 1/D before they are summed over the group
     * (gradient_scaling_factor). Both factors are folded into one weight here; with D a power of
     * two that is bit for bit Megatron's product, and every microbatch's gradient equals the one
     * a single rank computes for the same samples. The loss scale multiplies it (Megatron scales
     * the loss before backward); with a power-of-two scale that too is exact. */
    t->dloss_scale = t->scaler.scale;
    return mg_trainer_upload_loss_weights(t);
}

/* ---- one iteration ---- */

/* Loads this rank's microbatch mb of the global batch starting at sample `first`: Megatron's
 * MegatronPretrainingSampler gives dp rank r the samples [first + (mb*D + r)*mbs, +mbs). Only
 * what the stage uses is copied: input ids (tokens, first stage) and labels (targets, last). */
static mg_status load_microbatch(mg_trainer *t, const mg_sample_source *src, int64_t first, int mb,
                                 int32_t *tokens, int32_t *targets) {
    const mg_config *c = &t->cfg;
    size_t S = (size_t)c->seq_length;
    int64_t start = first + ((int64_t)mb * t->dp_size + t->dp_rank) * c->micro_batch_size;
    for (int b = 0; b < c->micro_batch_size; b++)
        MG_CHECK(src->sample(src->ctx, start + b, t->host_tokens + b * S, t->host_targets + b * S));
    size_t bytes = (size_t)t->model.blk.N * sizeof(int32_t);
    if (tokens) MG_CHECK(t->be->copy_h2d(t->be, tokens, t->host_tokens, bytes));
    if (targets) MG_CHECK(t->be->copy_h2d(t->be, targets, t->host_targets, bytes));
    return MG_OK;
}

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
    return t->tokens + (size_t)slot * (size_t)t->model.blk.N;
}
static int32_t *slot_targets(const mg_trainer *t, int slot) {
    return t->targets + (size_t)slot * (size_t)t->model.blk.N;
}

/* The final norm, logits and loss of the microbatch in slot s (train/trainer_loss.h's weights). */
static mg_status head_loss(mg_trainer *t, int slot) {
    const float *dloss, *loss_w;
    float scale;
    mg_trainer_loss_args(t, slot, &dloss, &loss_w, &scale);
    return mg_gpt_head_loss(&t->model, t->be, slot, slot_targets(t, slot), dloss, loss_w, t->loss,
                            scale);
}

static mg_status stage_forward(void *ctx, int mb, int chunk, int slot) {
    mg_trainer *t = ctx;
    const mg_gpt_chunk *ch = &t->model.chunks[chunk];
    int32_t *tokens = slot_tokens(t, slot), *targets = slot_targets(t, slot);
    if (!t->forward_only && mb == t->num_microbatches / 2 && chunk == 0) maybe_fault_exit(t);
    /* packed documents: every stage reads the ids (on the host) for its positions and masks */
    if (ch->pre || ch->post || mg_trainer_docs_on(t))
        MG_CHECK(load_microbatch(t, t->pass_src, t->pass_first, mb, ch->pre ? tokens : NULL,
                                 ch->post ? targets : NULL));
    MG_CHECK(mg_trainer_docs_microbatch(t, slot));
    /* dropout masks (training only) keyed by the iteration and the microbatch's place in the
     * global batch (load_microbatch's samples): the same for every layout (core/dropout.h) */
    mg_gpt_set_dropout(&t->model, slot, !t->forward_only, t->state.iteration,
                       (mb * t->dp_size + t->dp_rank) * t->cfg.micro_batch_size);
    MG_CHECK(mg_gpt_chunk_forward(&t->model, t->be, chunk, slot, tokens));
    /* an evaluation's loss; training computes it in the backward (model/gpt.h: the lazy head) */
    if (ch->post) MG_CHECK(mg_trainer_loss_microbatch(t, slot));
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
            if (buf_group(t, b)) MG_CHECK(mg_ddp_start_grad_sync(&t->ddp[b]));
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
    MG_CHECK(be->memset_zero(be, t->loss, sizeof(float)));
    MG_CHECK(mg_trainer_loss_pass(t, src, first)); /* the global batch's unmasked tokens */
    t->pass_src = src;
    t->pass_first = first;
    t->forward_only = !backward;
    t->grad_sync_armed = false;
    t->model.moe_ws.train = backward;
    const mg_pipeline_stage stage = {
        stage_forward, stage_backward, stage_input, stage_output, stage_dout, stage_dinput, t};
    MG_CHECK(mg_pipeline_run(&t->pipe, &stage, !backward));
    if (t->dp) {
        void *stream;
        MG_CHECK(mg_backend_comm_begin(be, &stream));
        MG_CHECK(mg_comm_all_reduce(t->dp, t->loss, t->loss, 1, MG_F32, MG_REDUCE_SUM, stream));
        MG_CHECK(mg_backend_comm_end(be));
    }
    return MG_OK;
}

/* Megatron's _allreduce_word_embedding_grads: the first stage's embedding and the last stage's
 * copy sum their gradients over the embedding group, then join the data-parallel reduction. */
static mg_status sync_embedding_grads(mg_trainer *t) {
    if (!t->embd) return MG_OK;
    const mg_param_table *pt = &t->model.params;
    void *stream;
    MG_CHECK(mg_backend_comm_begin(t->be, &stream));
    for (int i = 0; i < pt->n; i++)
        if (pt->p[i].embedding_group)
            MG_CHECK(mg_comm_all_reduce(t->embd, mg_gpt_grad(&t->model, i),
                                        mg_gpt_grad(&t->model, i), (size_t)pt->p[i].numel, MG_F32,
                                        MG_REDUCE_SUM, stream));
    MG_CHECK(mg_backend_comm_end(t->be));
    for (int i = 0; t->grad_sync_armed && i < pt->n; i++)
        if (pt->p[i].embedding_group) MG_CHECK(grads_ready(t, &i, 1));
    return MG_OK;
}

mg_status mg_trainer_step_async(mg_trainer *t) {
    mg_backend *be = t->be;
    int64_t gbs; /* this iteration's global batch (it grows with --rampup-batch-size) */
    MG_CHECK(mg_trainer_batch_begin(t, &gbs));
    if (t->zero_spans)
        MG_CHECK(mg_trainer_moe_zero_grads(t));
    else
        MG_CHECK(be->memset_zero(be, t->grads, t->model.params.numel * sizeof(float)));
    if (t->model.n_moe > 0) MG_CHECK(mg_trainer_moe_step_begin(t));
    MG_CHECK(mg_trainer_forward_backward(t, &t->train_src, t->state.consumed_train_samples, true));
    if (t->model.n_moe > 0) MG_CHECK(mg_trainer_moe_step_end(t));
    MG_CHECK(sync_embedding_grads(t));
    /* sum the buckets over the group: every rank gets them whole (all-reduce), or its shard of
     * each (reduce-scatter, distributed optimizer); with --overlap-grad-reduce most started
     * during backward */
    for (int b = 0; b < t->bufs.n; b++)
        if (buf_group(t, b)) MG_CHECK(mg_ddp_finish_grad_sync(&t->ddp[b]));
    MG_CHECK(mg_trainer_fault_overflow(t));
    /* Megatron: the update uses the lr and weight decay before this iteration's scheduler step */
    const mg_optim_rates rates = {mg_lr_schedule_lr(&t->lr), mg_lr_schedule_decoupled_lr(&t->lr),
                                  mg_lr_schedule_wd(&t->lr),
                                  /* Megatron's inv_scale: the reciprocal in double, then fp32 */
                                  (float)(1.0 / (double)t->dloss_scale)};
    MG_CHECK(mg_optimizer_step(&t->opt, be, t->params, t->master, t->grads, &rates));
    /* each rank updated its shards: gather the buckets' parameters (now, or during the next
     * forward with --overlap-param-gather) */
    for (int b = 0; b < t->bufs.n; b++)
        if (t->opt.buf_sharded[b]) MG_CHECK(mg_ddp_start_param_sync(&t->ddp[b]));
    /* statistics, in stream order on the backend: nothing waits for the device here (unless the
     * loss scaler must know whether the step was skipped) */
    float *s = t->stats;
    MG_CHECK(be->copy_d2d(be, &s[MG_STAT_GRAD_NORM], &t->opt.scalars[1], sizeof(float)));
    bool skipped = false;
    if (t->scaler.on) MG_CHECK(mg_trainer_scaler_step(t, &skipped));
    /* Megatron: a skipped step does not move the scheduler; the iteration and samples advance */
    if (!skipped) mg_lr_schedule_step(&t->lr, gbs);
    t->state.iteration++;
    t->state.consumed_train_samples += gbs;
    t->state.lr_num_steps = t->lr.num_steps;
    t->state.optimizer_step = t->opt.step;
    if (skipped) return MG_OK; /* its loss and norm join no average (Megatron's training_log) */
    MG_CHECK(be->sum_f32(be, &s[MG_STAT_LOSS_SUM], &s[MG_STAT_LOSS], NULL, 1, 1.0f));
    MG_CHECK(be->sum_f32(be, &s[MG_STAT_GRAD_NORM_SUM], &s[MG_STAT_GRAD_NORM], NULL, 1, 1.0f));
    return MG_OK;
}

mg_status mg_trainer_read_stats(mg_trainer *t, mg_step_stats *out, bool reset_sums) {
    mg_backend *be = t->be;
    float v[MG_STAT_COUNT];
    MG_CHECK(be->copy_d2h(be, v, t->stats, sizeof v)); /* the one host sync */
    out->loss = v[MG_STAT_LOSS];
    out->grad_norm = v[MG_STAT_GRAD_NORM];
    out->loss_sum = v[MG_STAT_LOSS_SUM];
    out->grad_norm_sum = v[MG_STAT_GRAD_NORM_SUM];
    out->moe_aux = v[MG_STAT_MOE_AUX];
    out->moe_z = v[MG_STAT_MOE_Z];
    _Static_assert(MG_STAT_GRAD_NORM_SUM == MG_STAT_LOSS_SUM + 1, "the sums are adjacent");
    _Static_assert(MG_STAT_END <= MG_MEMORY_STATS, "the batch arena holds the statistics");
    if (reset_sums) MG_CHECK(be->memset_zero(be, &t->stats[MG_STAT_LOSS_SUM], 2 * sizeof(float)));
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

/* Mean loss over eval_iters global batches of src from sample *next (advanced past them).
 * Megatron sums every batch's (loss sum, token count) and divides at the end: each batch's mean
 * weighs its unmasked tokens over a whole batch's (1 without a loss mask). */
static mg_status evaluate_stream(mg_trainer *t, const mg_sample_source *src, int64_t *next,
                                 double *loss) {
    mg_backend *be = t->be;
    float *sum = &t->stats[MG_STAT_EVAL_SUM];
    MG_CHECK(be->memset_zero(be, sum, sizeof(float)));
    /* Megatron evaluates whole --global-batch-size batches, whatever a rampup trains with */
    MG_CHECK(mg_trainer_set_microbatches(t, t->eval_microbatches));
    const double full = (double)t->cfg.global_batch_size * t->cfg.seq_length;
    double weights = 0;
    for (int i = 0; i < t->cfg.eval_iters; i++) {
        MG_CHECK(mg_trainer_forward_backward(t, src, *next, false));
        *next += t->cfg.global_batch_size;
        float w = (float)((double)t->pass_tokens / full);
        weights += w;
        MG_CHECK(be->sum_f32(be, sum, t->loss, NULL, 1, w));
    }
    float v = 0;
    if (t->cfg.eval_iters > 0) MG_CHECK(be->copy_d2h(be, &v, sum, sizeof v));
    *loss = t->cfg.eval_iters > 0 ? (double)v / (weights > 0 ? weights : 1.0) : NAN;
    return MG_OK;
}

mg_status mg_trainer_evaluate(mg_trainer *t, double *loss) {
    /* Megatron draws validation batches from a running position in the validation set */
    return evaluate_stream(t, &t->valid_src, &t->state.consumed_valid_samples, loss);
}

mg_status mg_trainer_evaluate_test(mg_trainer *t, double *loss) {
    int64_t first = 0; /* build_pretraining_data_loader(test_ds, 0) */
    return evaluate_stream(t, &t->test_src, &first, loss);
}

/* Commits the pending save (collective) and reports it. */
void mg_trainer_free(mg_trainer *t) {
    mg_trainer_ckpt_free(t); /* before the backend: its staging and scratch are the backend's */
    mg_trainer_loaders_free(t);
    mg_metrics_close(&t->metrics);
    mg_mock_free(&t->train_data);
    mg_mock_free(&t->valid_data);
    mg_mock_free(&t->test_data);
    free(t->slot_denom);
    if (t->gpt_data) mg_gpt_data_free(t->gpt_data);
    mg_gpt_free(&t->model);
    mg_pipeline_free(&t->pipe);
    mg_optimizer_free(&t->opt);
    for (int b = 0; b < MG_TRAIN_BUFFERS_MAX; b++) mg_ddp_free(&t->ddp[b]);
    mg_train_buffers_free(&t->bufs);
    /* the arenas go back to the backend before it is destroyed */
    mg_arena *arenas[] = {&t->a_params, &t->a_master, &t->a_grads, &t->a_optim,
                          &t->a_acts,   &t->a_work,   &t->a_io};
    for (size_t i = 0; i < sizeof arenas / sizeof *arenas; i++) mg_arena_free(arenas[i]);
    free(t->host_tokens);
    free(t->host_targets);
    free(t->host_dloss);
    free(t->host_docs);
    free(t->zero_spans);
    if (t->be) t->be->destroy(t->be);
    memset(t, 0, sizeof *t);
}
