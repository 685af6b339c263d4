/* `megatron train`: the outer loop around mg_trainer — Megatron's log line every --log-interval,
 * validation every --eval-interval, checkpoints every --save-interval and at the end, and
 * --exit-interval.
 *
 * Host syncs: steps are enqueued with mg_trainer_step_async; the loss and grad norm stay on the
 * backend and are read (one sync) only where they are needed: the log line, and before a
 * checkpoint or an exit, so a non-finite loss or grad norm is caught at the next of those points
 * (at the latest every --log-interval iterations) and never saved. */
#include "config/flags.h"
#include "core/clock.h"
#include "core/log.h"
#include "backend/backend.h"
#include "model/fp8.h"
#include "train/run_control.h"
#include "train/tensorboard_log.h"
#include "train/trainer.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static void print_validation(const char *where, double loss) {
    char line[256];
    double ppl = exp(loss < 20 ? loss : 20);
    int n = snprintf(line, sizeof line,
                     " validation loss at %s | lm loss value: %.6E | lm loss PPL: %.6E | ", where,
                     loss, ppl);
    char dashes[300];
    int len = n + 1 < (int)sizeof dashes - 1 ? n + 1 : (int)sizeof dashes - 1;
    memset(dashes, '-', (size_t)len);
    dashes[len] = 0;
    mg_log_last("%s", dashes);
    mg_log_last("%s", line);
    mg_log_last("%s", dashes);
}

/* Validation (or, with test, the test split): Megatron's evaluate_and_print_results, which
 * writes the test split's result under the validation tags too. */
static mg_status evaluate_and_print(mg_trainer *t, const char *where, mg_tb_log *tb, bool test) {
    double loss;
    MG_CHECK(test ? mg_trainer_evaluate_test(t, &loss) : mg_trainer_evaluate(t, &loss));
    print_validation(where, loss);
    return mg_tb_log_validation(tb, t->state.iteration, t->state.consumed_train_samples, loss);
}

static void print_banner(const mg_trainer *t) {
    const mg_config *c = &t->cfg;
    const mg_model_config *m = &t->model.cfg;
    if (t->be->device == MG_DEVICE_CPU)
        mg_log_info("> megatron.c: training on the %s backend (%s), %d threads", t->be->name,
                    mg_dtype_name(t->be->compute_dtype), mg_backend_cpu_threads());
    else
        mg_log_info("> megatron.c: training on the %s backend, GPU %d (%s compute, fp32 master "
                    "weights, gradients and optimizer state)",
                    t->be->name, t->gpu, mg_dtype_name(t->be->compute_dtype));
    /* Megatron's line, from this rank's shards, by every rank of data-parallel rank 0 */
    mg_log_self(t->layout.dp_rank == 0,
                " > number of parameters on (tensor, pipeline) model parallel rank (%d, %d): "
                "%" PRId64,
                t->layout.tp_rank, t->layout.pp_rank, mg_params_count(&t->model.params));
    if (t->layout.pp_size > 1) {
        const mg_gpt *g = &t->model;
        char chunks[160] = "";
        for (int v = 0, n = 0; v < g->n_chunks && n < (int)sizeof chunks; v++)
            n += snprintf(chunks + n, sizeof chunks - (size_t)n, "%s[%d, %d)", v ? " " : "",
                          g->chunks[v].offset, g->chunks[v].offset + g->chunks[v].count);
        static const char *const comm[] = {
            [MG_PIPE_IN_ORDER] = "each a rendezvous in the schedule's order",
            [MG_PIPE_TAGGED] = "overlapped (tagged, receives posted an op ahead)",
            [MG_PIPE_STREAMED] = "overlapped (on a stream of their own)"};
        mg_log_self(
            t->layout.tp_rank == 0 && t->layout.dp_rank == 0,
            "> pipeline rank %d of %d (%s, %d microbatches): layers %s%s%s; %d "
            "activation slots; messages %s",
            t->layout.pp_rank, t->layout.pp_size, g->n_chunks > 1 ? "interleaved 1F1B" : "1F1B",
            t->num_microbatches, chunks, g->wte >= 0 ? ", the embedding" : "",
            g->lnf_w >= 0 ? ", the output layer and the loss" : "", g->n_slots, comm[t->pipe.comm]);
    }
    if (t->layout.tp_size > 1)
        mg_log_info("> tensor-parallel size %d%s: %" PRId64 " parameters in the whole model; "
                    "heads %d, query groups %d, ffn %d, vocabulary rows %d per rank",
                    t->layout.tp_size, m->sp ? ", sequence parallel" : "",
                    mg_model_config_num_params(m), m->nq_l, m->ng_l, m->F_l, m->V_l);
    mg_log_info("> model: %d layers, hidden %d, ffn %d, heads %d (query groups %d, head dim %d), "
                "seq %d, padded vocab %d, %s, %s, %s",
                m->L, m->H, m->F, m->nq, m->ng, m->hd, m->S, m->V,
                m->norm == MG_NORM_RMSNORM ? "RMSNorm" : "LayerNorm", m->swiglu ? "SwiGLU" : "GELU",
                m->pos == MG_POS_ROPE      ? "RoPE"
                : m->pos == MG_POS_LEARNED ? "learned positions"
                                           : "no positions");
    const mg_moe_config *e = &m->moe;
    if (e->E > 0) {
        char shared[48] = "";
        if (e->shared_F) snprintf(shared, sizeof shared, ", shared experts' ffn %d", e->shared_F);
        mg_log_info("> mixture of experts: %d of %d layers, %d experts (top-%d, %s%s), expert ffn "
                    "%d%s; expert-parallel size %d (%d experts per rank), %s",
                    e->n_layers, m->L, e->E, e->k,
                    e->route.score == MG_MOE_SCORE_SIGMOID ? "sigmoid" : "softmax",
                    e->route.groups ? ", group-limited" : "", e->F, shared, e->ep, e->E_l,
                    e->capacity_factor > 0 ? "capacity-limited" : "dropless");
    }
    if (t->model.n_fp8 > 0) { /* model/fp8.h */
        int layers = 0;
        for (int l = 0; l < m->L; l++) layers += mg_config_fp8_layer(c, l);
        const char *experts = "";
        if (e->E > 0)
            experts = !m->fp8_experts && m->fp8_block
                          ? ", routed experts in the compute dtype (no block-scaled grouped "
                            "products yet)"
                      : !m->fp8_experts ? ", routed experts in the compute dtype (ECHO)"
                      : mg_fp8_experts_on(&t->model.blk) ? ", routed experts included"
                                                         : ", routed experts in the compute dtype "
                                                           "(no fp8 grouped GEMM here: CUTLASS's, "
                                                           "bf16 compute, sm 9.0)";
        char scaling[96];
        if (m->fp8_current)
            snprintf(scaling, sizeof scaling, "tensorwise scaling");
        else if (m->fp8_block)
            snprintf(scaling, sizeof scaling,
                     "blockwise scaling (1 x 128 and 128 x 128 blocks, power-of-two scales)");
        else
            snprintf(scaling, sizeof scaling, "delayed scaling (amax history %d, %s, margin %d)",
                     m->fp8_len, m->fp8_algo == 0 ? "max" : "most_recent", m->fp8_margin);
        mg_log_info("> fp8: %s (%s gradients), %s; %d of %d layers%s%s", c->fp8_format,
                    m->fp8_bwd ? "e5m2" : "e4m3", scaling, layers, m->L, experts,
                    m->fp8_wgrad ? "" : "; weight gradients from the compute dtype");
    }
    mg_log_info("> batch: micro %d, global %d (%d microbatches per rank), %" PRId64 " iterations",
                c->micro_batch_size, c->global_batch_size, t->num_microbatches, t->train_iters);
    for (int b = 0; b < t->bufs.n; b++) {
        const mg_train_buffer *bf = &t->bufs.b[b];
        const mg_grad_buffer_layout *l = &bf->layout;
        int D = l->cfg.data_parallel_size;
        const char *reduce = D == 1 ? ""
                             : !t->opt.buf_sharded[b]
                                 ? "; per bucket an all-reduce of the gradients"
                             : bf->fp8 ? "; per bucket a reduce-scatter of the gradients and an "
                                         "all-gather of the parameters' fp8 bytes"
                                       : "; per bucket a reduce-scatter of the gradients and an "
                                         "all-gather of the parameters";
        char what[96];
        snprintf(what, sizeof what, "%s size %d%s",
                 bf->expert ? "expert-data-parallel" : "data-parallel", D,
                 bf->expert ? (bf->fp8 ? " (the experts' fp8 weights)" : " (experts)")
                            : (bf->fp8 ? " (the fp8 weights)" : ""));
        mg_log_info("> %s%s: gradient buffer of %" PRId64 " elements (%" PRId64
                    " used) in %d bucket%s%s%s",
                    what, c->use_distributed_optimizer ? ", distributed optimizer" : "", l->numel,
                    l->numel_unpadded, l->n_buckets, l->n_buckets == 1 ? "" : "s", reduce,
                    !c->overlap_grad_reduce || D == 1 ? ""
                    : t->be->device == MG_DEVICE_CPU
                        ? " after backward (--overlap-grad-reduce does not overlap on the cpu "
                          "backend)"
                        : ", the reductions started during backward (--overlap-grad-reduce)");
    }
    if (t->be->device == MG_DEVICE_CPU && (c->bf16 || c->fp16))
        mg_log_info("> note: the CPU backend computes in fp32; --%s sets the compute dtype of GPU "
                    "backends%s",
                    c->fp16 ? "fp16" : "bf16",
                    t->scaling.scaler.on ? " (the loss scaler below runs here as there)" : "");
    if (t->scaling.scaler.on) {
        char what[192];
        mg_grad_scaler_describe(&t->scaling.scaler, what, sizeof what);
        mg_log_info("> %s; a step whose gradients overflow is skipped", what);
    }
    /* Megatron's dropout defaults apply to scripts that omit the flags: say so once */
    const bool att = !mg_flags_seen("--attention-dropout") && c->attention_dropout == 0.1,
               hid = !mg_flags_seen("--hidden-dropout") && c->hidden_dropout == 0.1;
    if (att || hid)
        mg_log_info("> %s%s%s %s 0.1 as in Megatron; pass 0 to disable",
                    att ? "--attention-dropout" : "", att && hid ? " and " : "",
                    hid ? "--hidden-dropout" : "", att && hid ? "default to" : "defaults to");
}

/* The MoE values of the log line: the losses Megatron tracks (those enabled) and, with `load`,
 * the expert load and, with expert parallelism, the expert-parallel imbalance (else -1). */
static void moe_record(mg_trainer *t, const mg_step_stats *s, bool load, mg_log_record *r) {
    const mg_moe_routing *q = &t->model.cfg.moe.route;
    r->moe = true;
    r->aux_name = q->balancing == MG_MOE_LB_NONE || !(q->aux_coeff > 0) ? NULL
                  : q->balancing == MG_MOE_LB_SEQ_AUX                   ? "seq_load_balancing_loss"
                                                                        : "load_balancing_loss";
    r->aux_loss = s->moe_aux;
    r->z_loss = q->z_coeff > 0 ? s->moe_z : -1;
    r->expert_load = r->ep_imbalance = -1;
    r->echo = t->model.cfg.moe.echo && load;
    if (load) mg_trainer_moe_loads(t, &r->expert_load, &r->ep_imbalance, &r->ep_imbalance_after);
    if (t->model.cfg.moe.ep < 2) r->ep_imbalance = -1; /* one rank: nothing to balance */
    r->budget = t->model.moe_ws.budget;
    r->overflow_steps = (int)s->moe_overflow_steps;
}

/* TensorBoard's scalars of this iteration, as Megatron's training_log writes them every
 * --tensorboard-log-interval: the last step's loss and grad norm, read (one host sync) without
 * resetting the sums behind the log line. */
static mg_status tensorboard_iteration(mg_trainer *t, mg_tb_log *tb) {
    mg_step_stats s;
    MG_CHECK(mg_trainer_read_stats(t, &s, false));
    mg_log_record r = {
        .iteration = t->state.iteration,
        .consumed_samples = t->state.consumed_train_samples,
        .lr = mg_lr_schedule_lr(&t->lr),
        .global_batch_size = (int)t->step_global_batch, /* grows with --rampup-batch-size */
        .lm_loss = s.loss,
        .loss_scale = s.loss_scale,
        .grad_norm = s.last_skipped ? -1 : s.grad_norm,
    };
    /* the loads (a second read) only for the one load value TensorBoard gets, with EP > 1 */
    if (t->model.cfg.moe.E > 0) moe_record(t, &s, t->model.cfg.moe.ep > 1, &r);
    return mg_tb_log_train(tb, &r);
}

/* The pipeline bubble this stage measured (parallel/pipeline/run.h: time waiting for neighbours
 * over time in its ops, the steps after the first) against the schedule's (P-1)/(m V). One line
 * per stage, from its first rank; bench/pp_bench.sh reads them. */
static void print_bubble(const mg_trainer *t) {
    const mg_pipeline *p = &t->pipe;
    if (!p->timed || p->runs == 0 || p->busy_s <= 0) return;
    double wait = p->total_s > p->busy_s ? p->total_s - p->busy_s : 0;
    double theory =
        (double)(p->schedule.pp - 1) / ((double)p->schedule.microbatches * p->schedule.vpp);
    mg_log_self(t->layout.tp_rank == 0 && t->layout.dp_rank == 0,
                "> pipeline rank %d of %d: %" PRId64 " steps after the first, busy %.3f s, "
                "waiting %.3f s per step: bubble (waiting / busy) %.2f%%, the schedule's "
                "(P-1)/(m V) %.2f%%",
                p->rank, p->schedule.pp, p->runs, p->busy_s / (double)p->runs,
                wait / (double)p->runs, 100.0 * wait / p->busy_s, 100.0 * theory);
}

/* --log-num-zeros-in-grad and --log-params-norm: the step's values, as Megatron computes them
 * after its optimizer step (collectives: every rank is here at every log line). */
static mg_status grad_and_params_stats(mg_trainer *t, mg_log_record *r) {
    if (t->cfg.log_num_zeros_in_grad) {
        int64_t zeros;
        MG_CHECK(mg_trainer_num_zeros(t, &zeros));
        r->log_num_zeros = true;
        r->num_zeros = (double)zeros;
    }
    if (t->cfg.log_params_norm) {
        MG_CHECK(mg_trainer_params_norm(t, &r->params_norm));
        r->log_params_norm = true;
    }
    return MG_OK;
}

/* Reads the statistics (one host sync) and fails on a non-finite loss or grad norm since the
 * last reset. */
static mg_status read_checked(mg_trainer *t, int64_t since, mg_step_stats *s, bool reset) {
    MG_CHECK(mg_trainer_read_stats(t, s, reset));
    if (t->cfg.no_check_for_nan_in_loss_and_grad) return MG_OK; /* Megatron's switch */
    if (!isfinite(s->loss_sum) || !isfinite(s->grad_norm_sum))
        return MG_FAIL(MG_ERR_NUMERIC,
                       "iterations %" PRId64 "..%" PRId64 ": lm loss %g, grad norm %g is not "
                       "finite (checked at each log, save and exit point); lower --lr or raise "
                       "--clip-grad's effect (smaller --clip-grad)",
                       since + 1, t->state.iteration, s->loss, s->grad_norm);
    return MG_OK;
}

static mg_status train_loop(mg_trainer *t, mg_tb_log *tb, mg_run_control *rc) {
    const mg_config *c = &t->cfg;
    double t_last = mg_clock_seconds();
    int64_t logged_iters = 0;
    /* a non-finite loss or grad norm stops the run, except in the steps the loss scaler skips
     * (counted in the log line, as Megatron's skipped and nan iterations) */
    bool saved_last = false;
    int64_t start_iteration = t->state.iteration, checked = t->state.iteration;
    mg_step_stats s;
    MG_CHECK(mg_trainer_read_stats(t, &s, true)); /* zero the running sums */
    while (t->state.iteration < t->train_iters) {
        /* Megatron saves before the first iteration of a new microbatch count (rampup) */
        if (mg_run_control_batch_changes(rc, t) && c->save[0] && !saved_last) {
            MG_CHECK(read_checked(t, checked, &s, false));
            MG_CHECK(mg_trainer_save(t));
        }
        MG_CHECK(mg_trainer_step_async(t));
        int64_t it = t->state.iteration;
        saved_last = false;
        logged_iters++;
        if (it == start_iteration + 1) {
            MG_CHECK(mg_trainer_log_memory(t, "after the first step"));
            mg_pipeline_timing_reset(&t->pipe); /* the bubble of the steady state */
        }
        if (mg_tb_log_due(tb, it)) MG_CHECK(tensorboard_iteration(t, tb));
        if (it % c->log_interval == 0 || it == t->train_iters) {
            MG_CHECK(read_checked(t, checked, &s, true));
            checked = it;
            double t_now = mg_clock_seconds();
            double sec = (t_now - t_last) / (double)logged_iters;
            const int64_t gbs = t->step_global_batch; /* Megatron: the last iteration's */
            double flops = mg_flops_per_iteration(c, gbs);
            mg_log_record r = {
                .iteration = it,
                .train_iters = t->train_iters,
                .consumed_samples = t->state.consumed_train_samples,
                .elapsed_ms_per_iter = sec * 1e3,
                .tflops_per_gpu =
                    flops / sec / 1e12 /
                    (t->layout.dp_size * t->layout.tp_size * t->layout.pp_size), /* a rank a GPU */
                .tokens_per_s = (double)gbs * c->seq_length / sec,
                .lr = mg_lr_schedule_lr(&t->lr), /* Megatron logs the lr after the step */
                .global_batch_size = (int)gbs,
                /* Megatron averages over the iterations that advanced (at least 1) */
                .lm_loss = s.loss_sum / (double)(logged_iters - s.skipped_iters > 0
                                                     ? logged_iters - s.skipped_iters
                                                     : 1),
                .loss_scale = s.loss_scale,
                .grad_norm = s.last_skipped ? -1 : s.grad_norm,
                .skipped_iters = (int)s.skipped_iters,
                .nan_iters = (int)s.nan_iters,
            };
            if (t->model.cfg.moe.E > 0) moe_record(t, &s, true, &r);
            MG_CHECK(grad_and_params_stats(t, &r));
            MG_CHECK(mg_trainer_save_poll(t)); /* a background save, committed once written */
            char line[1024];
            mg_metrics_format_line(line, sizeof line, &r);
            mg_log_last("%s", line);
            if (mg_log_is_logging_rank()) MG_CHECK(mg_metrics_write(&t->metrics, &r));
            MG_CHECK(mg_tb_log_timing(tb, &r));
            logged_iters = 0;
            t_last = mg_clock_seconds();
        }
        if (t->data.have_valid && c->eval_interval > 0 && it % c->eval_interval == 0 &&
            it < t->train_iters) {
            char where[64];
            snprintf(where, sizeof where, "iteration %" PRId64, it);
            /* evaluation time does not count as iteration time; the steps still queued on the
             * device do, so they are drained first */
            MG_CHECK(t->be->synchronize(t->be));
            double t0 = mg_clock_seconds();
            MG_CHECK(evaluate_and_print(t, where, tb, false));
            t_last += mg_clock_seconds() - t0;
        }
        mg_stop_reason stop; /* --exit-signal-handler, --exit-duration-in-mins: all ranks agree */
        MG_CHECK(mg_run_control_stop(rc, t, &stop));
        const bool exiting =
            stop != MG_STOP_NONE ||
            (c->exit_interval > 0 && it % c->exit_interval == 0 && it < t->train_iters);
        const bool saving = c->save[0] && ((c->save_interval > 0 && it % c->save_interval == 0) ||
                                           (exiting && !saved_last));
        if (saving || exiting) MG_CHECK(read_checked(t, checked, &s, false)); /* never save NaN */
        if (saving) { /* the read above drained the device: the time is the save's own */
            double t0 = mg_clock_seconds();
            MG_CHECK(mg_trainer_save(t));
            saved_last = true;
            t_last += mg_clock_seconds() - t0;
        }
        if (exiting) {
            MG_CHECK(mg_trainer_save_wait(t));
            if (stop != MG_STOP_NONE)
                mg_run_control_log_stop(rc, stop);
            else
                mg_log_info("exiting program at iteration %" PRId64, it);
            return MG_OK;
        }
    }
    print_bubble(t);
    /* Megatron's pretrain: the final checkpoint, then the validation and test evaluations */
    if (c->save[0] && !saved_last && t->state.iteration > start_iteration)
        MG_CHECK(mg_trainer_save(t));
    char where[80];
    snprintf(where, sizeof where, "iteration %" PRId64 " on validation set", t->state.iteration);
    if (t->data.have_valid) MG_CHECK(evaluate_and_print(t, where, tb, false));
    snprintf(where, sizeof where, "iteration %" PRId64 " on test set", t->state.iteration);
    if (t->data.have_test) MG_CHECK(evaluate_and_print(t, where, tb, true));
    return mg_trainer_save_wait(t);
}

mg_status mg_train_run(const mg_config *cfg, const mg_train_groups *g) {
    mg_run_control rc; /* the start time and SIGTERM handler, before the trainer starts */
    MG_CHECK(mg_run_control_init(&rc, cfg));
    mg_trainer *t = calloc(1, sizeof *t);
    mg_tb_log *tb = calloc(1, sizeof *tb); /* holds its event buffer: off the stack */
    if (!t || !tb) {
        free(t);
        free(tb);
        mg_run_control_free(&rc);
        return MG_FAIL(MG_ERR_NOMEM, "out of memory");
    }
    mg_status st = mg_trainer_init(t, cfg, g);
    if (st == MG_OK) {
        print_banner(t);
        bool resumed = t->state.iteration > 0;
        st = mg_metrics_open(&t->metrics, mg_log_is_logging_rank() ? cfg->metrics_file : "",
                             resumed);
    }
    if (st == MG_OK) st = mg_tb_log_open(tb, t);
    if (st == MG_OK) st = mg_run_control_bind(&rc, t);
    if (st == MG_OK) {
        if (t->state.iteration >= t->train_iters)
            mg_log_info("> checkpoint is at iteration %" PRId64 " >= the %" PRId64
                        " training iterations; nothing to train",
                        t->state.iteration, t->train_iters);
        st = train_loop(t, tb, &rc);
    }
    mg_status closed = mg_tb_log_close(tb); /* what was logged before an error stays readable */
    if (st == MG_OK) st = closed;
    mg_run_control_free(&rc); /* its scratch is the backend's: before the trainer goes */
    /* after a failure the peers may never reach a collective deregistration of the copy
     * engines' memory (comm.h): freed without it, the communicators are aborted next */
    t->mem.sym_abandon = st != MG_OK;
    mg_trainer_free(t);
    free(t);
    free(tb);
    return st;
}
