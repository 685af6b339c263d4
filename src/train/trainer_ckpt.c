/* The trainer's checkpoint side (train/trainer_ckpt.h). */
#include "train/trainer_ckpt.h"

#include "core/clock.h"
#include "core/log.h"
#include "model/fp8.h"
#include "train/trainer_scaler.h"
#include "train/trainer_weights.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

/* Host staging of the fp32 state for checkpoints: the weights whole, the moments of this rank's
 * pieces (local coordinates, train/optimizer.h). */
static mg_status alloc_host_state(const mg_trainer *t, mg_checkpoint_tensors *h, float *block) {
    size_t n = t->model.params.numel, m = t->opt.numel;
    if (block) { /* the save staging (stage_block): weights, then the two moments */
        h->params = block;
        h->exp_avg = block + n;
        h->exp_avg_sq = block + n + m;
    } else {
        h->params = calloc(n, sizeof(float));
        h->exp_avg = calloc(m ? m : 1, sizeof(float));
        h->exp_avg_sq = calloc(m ? m : 1, sizeof(float));
    }
    h->pieces = t->opt.pieces;
    h->n_pieces = t->opt.n_pieces;
    h->optimizer = !t->cfg.no_save_optim; /* loading: replaced by load_or_init's request */
    h->stage = t->layout.pp_rank;
    h->n_stages = t->layout.pp_size;
    h->tp_rank = t->layout.tp_rank;
    h->tp_size = t->layout.tp_size;
    h->dp_rank = t->layout.dp_rank;
    h->dp_size = t->layout.dp_size;
    h->owns[0] = t->layout.dp_rank == 0;
    h->owns[1] = t->layout.edp_rank == 0;
    for (int b = 0; b < t->bufs.n; b++) h->sharded[t->bufs.b[b].expert] = t->opt.buf_sharded[b];
    if (t->model.cfg.moe.expert_bias && t->model.moe_ws.n_layers > 0) {
        h->n_bias = t->model.moe_ws.n_layers;
        h->n_experts = t->model.cfg.moe.E;
        h->expert_bias = calloc((size_t)h->n_bias * (size_t)h->n_experts, sizeof(float));
        if (!h->expert_bias) return MG_FAIL(MG_ERR_NOMEM, "out of memory (expert bias)");
    }
    if (t->model.ws.fp8_tensors > 0) { /* model/fp8.h: 3 tensors per fp8 linear */
        const mg_gpt *g = &t->model;
        const int per = mg_fp8_layer_linears(&g->cfg);
        h->n_fp8 = g->n_fp8;
        h->fp8_width = 3 * per * (1 + g->cfg.fp8_len);
        h->fp8 = calloc((size_t)h->n_fp8 * (size_t)h->fp8_width, sizeof(float));
        int *layers = calloc((size_t)h->n_fp8, sizeof *layers);
        h->fp8_layers = layers;
        if (!h->fp8 || !layers) return MG_FAIL(MG_ERR_NOMEM, "out of memory (fp8 scaling state)");
        for (int l = 0; l < g->n_layers; l++)
            if (g->layers[l].fp8 >= 0) layers[g->layers[l].fp8 / per] = g->layers[l].layer;
    }
    if (!h->params || !h->exp_avg || !h->exp_avg_sq)
        return MG_FAIL(MG_ERR_NOMEM, "cannot allocate %.1f MiB for checkpoint staging",
                       (double)(n + 2 * m) * 4 / 1048576.0);
    return MG_OK;
}

/* The expert biases between the model (backend) and the checkpoint staging (host). */
static mg_status copy_biases(mg_trainer *t, mg_checkpoint_tensors *h, bool to_host) {
    mg_backend *be = t->be;
    size_t bytes = (size_t)h->n_experts * sizeof(float);
    for (int i = 0; h->expert_bias && i < h->n_bias; i++) {
        float *host = h->expert_bias + (size_t)i * h->n_experts;
        float *dev = mg_gpt_moe_bias(&t->model, i);
        MG_CHECK(to_host ? be->copy_d2h(be, host, dev, bytes) : be->copy_h2d(be, dev, host, bytes));
    }
    return MG_OK;
}

/* The fp8 scaling state between the model (backend: [amax | scale | history] of every tensor)
 * and the checkpoint staging (host: per fp8 layer its tensors' scales, then their histories). */
static mg_status copy_fp8(mg_trainer *t, mg_checkpoint_tensors *h, bool to_host) {
    if (!h->fp8) return MG_OK;
    mg_backend *be = t->be;
    const size_t nt = (size_t)t->model.ws.fp8_tensors, len = (size_t)t->model.cfg.fp8_len;
    const size_t per = 3 * (size_t)mg_fp8_layer_linears(&t->model.cfg), n = (2 + len) * nt;
    float *dev = mg_block_ws_ptr(&t->model.blk, t->model.ws.fp8_state);
    float *all = malloc(n * sizeof *all);
    if (!all) return MG_FAIL(MG_ERR_NOMEM, "out of memory (fp8 scaling state)");
    mg_status st = be->copy_d2h(be, all, dev, n * sizeof *all); /* the amaxes kept on a load */
    for (int k = 0; st == MG_OK && k < h->n_fp8; k++) {
        float *row = h->fp8 + (size_t)k * h->fp8_width, *scale = all + nt + k * per;
        float *hist = all + 2 * nt + k * per * len;
        if (to_host) {
            memcpy(row, scale, per * sizeof *row);
            memcpy(row + per, hist, per * len * sizeof *row);
        } else {
            memcpy(scale, row, per * sizeof *row);
            memcpy(hist, row + per, per * len * sizeof *row);
        }
    }
    if (st == MG_OK && !to_host) st = be->copy_h2d(be, dev, all, n * sizeof *all);
    free(all);
    return st;
}

static void free_host_state(const mg_trainer *t, mg_checkpoint_tensors *h) {
    free(h->expert_bias);
    free(h->fp8);
    free((int *)h->fp8_layers);
    if (h->params == t->ckpt.stage) return; /* the save staging stays for the next save */
    free(h->params);
    free(h->exp_avg);
    free(h->exp_avg_sq);
}

/* The checkpoint staging: one block for the weights and the moments, page-locked where the
 * backend can (the copy out of the device then runs at the link's speed, which is what
 * --async-save stalls training for), else mapped with its pages populated at once (zeroed in
 * bulk: faulting 12 bytes per parameter in one page at a time costs more than the copy). Made at
 * the first use and kept until mg_trainer_free (or release_stage). */
static mg_status stage_block(mg_trainer *t, float **out) {
    mg_backend *be = t->be;
    if (!t->ckpt.stage) {
        size_t bytes = (t->model.params.numel + 2 * t->opt.numel + 1) * sizeof(float);
        void *p = NULL;
        if (be->alloc_pinned) {
            MG_CHECK(be->alloc_pinned(be, bytes, &p));
        } else {
            p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
            if (p == MAP_FAILED)
                return MG_FAIL(MG_ERR_NOMEM, "cannot allocate %.1f MiB for checkpoint staging",
                               (double)bytes / 1048576.0);
        }
        t->ckpt.stage = p;
        t->ckpt.stage_bytes = bytes;
    }
    *out = t->ckpt.stage;
    return MG_OK;
}

static void release_stage(mg_trainer *t) {
    if (!t->ckpt.stage) return;
    if (t->be && t->be->free_pinned)
        t->be->free_pinned(t->be, t->ckpt.stage);
    else
        munmap(t->ckpt.stage, t->ckpt.stage_bytes);
    t->ckpt.stage = NULL;
}

/* The loaded checkpoint's dropout stream offset into the model's streams (model/rng.h), as
 * Megatron restores its generators' states unless --no-load-rng or --finetune; otherwise the
 * streams stay as seeded, offset 0. */
static mg_status restore_rng(mg_trainer *t) {
    const mg_config *c = &t->cfg;
    const mg_model_config *m = &t->model.cfg;
    const bool drops = !m->dropout_positional && (m->attn_dropout > 0 || m->hidden_dropout > 0);
    if (c->no_load_rng || c->finetune) {
        if (drops)
            mg_log_info("> %s: the dropout streams start from their seeds",
                        c->no_load_rng ? "--no-load-rng" : "--finetune");
        t->state.rng_offset = 0;
        return MG_OK;
    }
    if (!t->state.rng_saved) {
        if (drops)
            mg_log_warn("the checkpoint holds no dropout stream position (saved with "
                        "--no-save-rng or by an older megatron.c); the streams start from their "
                        "seeds");
        t->state.rng_offset = 0;
        return MG_OK;
    }
    return mg_model_rng_set_offset(&t->model.rng, t->state.rng_offset);
}

mg_status mg_trainer_load_or_init(mg_trainer *t) {
    const mg_config *c = &t->cfg;
    mg_backend *be = t->be;
    size_t m = t->opt.numel;
    mg_checkpoint_tensors h = {0};
    /* a checkpoint loads through the staging, which a run that saves keeps from the start (its
     * first save, too, then stalls only for the copy) */
    float *block = NULL;
    mg_status st = c->save[0] || c->load[0] ? stage_block(t, &block) : MG_OK;
    if (st == MG_OK) st = alloc_host_state(t, &h, block);
    int64_t it = -1;
    if (st == MG_OK && c->load[0]) st = mg_checkpoint_latest(c->load, &it);
    if (st == MG_OK && c->load[0] && it < 0 && c->exit_on_missing_checkpoint)
        st = MG_FAIL(MG_ERR_IO,
                     "--exit-on-missing-checkpoint: %s holds no checkpoint (no "
                     "latest_checkpointed_iteration.txt)",
                     c->load);
    if (st == MG_OK && c->load[0] && it < 0)
        mg_log_warn("could not find a checkpoint in %s (no latest_checkpointed_iteration.txt); "
                    "starting from random initialisation",
                    c->load);
    if (st == MG_OK && it >= 0) {
        const double t0 = mg_clock_seconds();
        h.optimizer = !c->no_load_optim && !c->finetune; /* in: whether to load the moments */
        /* fp8 scaling the checkpoint lacks keeps the model's (scales at 1) */
        st = copy_fp8(t, &h, true);
        if (st == MG_OK) st = mg_checkpoint_load(c->load, it, &t->state, c, &t->model, &h);
        /* Megatron: without the optimizer state the scheduler is not loaded either (it starts
         * anew); --finetune also starts the iteration and the samples at 0 */
        if (!h.optimizer) t->state.optimizer_step = t->state.lr_num_steps = 0;
        if (c->finetune) t->state = (mg_train_state){0};
        const double sec = mg_clock_seconds() - t0,
                     gb = 4e-9 *
                          (double)(mg_params_count(&t->model.params) + (h.optimizer ? 2 * m : 0));
        if (st == MG_OK) {
            st = be->copy_h2d(be, t->opt.m, h.exp_avg, m * sizeof(float));
            if (st == MG_OK) st = be->copy_h2d(be, t->opt.v, h.exp_avg_sq, m * sizeof(float));
            if (st == MG_OK) st = copy_biases(t, &h, false);
            if (st == MG_OK) st = copy_fp8(t, &h, false);
            t->opt.step = t->state.optimizer_step;
            t->lr.num_steps = t->state.lr_num_steps;
            mg_log_info("> loaded checkpoint from %s at iteration %" PRId64, c->load, it);
            mg_log_info("> checkpoint load: this rank read %.3f GB in %.2f s (%.2f GB/s)", gb, sec,
                        sec > 0 ? gb / sec : 0.0);
            if (!h.optimizer)
                mg_log_info("> %s: Adam starts from zero moments and the LR schedule from its "
                            "start%s",
                            c->finetune        ? "--finetune"
                            : c->no_load_optim ? "--no-load-optim"
                                               : "the checkpoint holds no optimizer state",
                            c->finetune ? ", at iteration 0" : "");
        }
    } else if (st == MG_OK) {
        mg_params_init(&t->model.params, (uint64_t)c->seed, h.params);
    }
    if (st == MG_OK && it >= 0) st = restore_rng(t);
    if (st == MG_OK) mg_trainer_scaler_restore(t, it >= 0 && h.optimizer);
    /* Megatron loads the schedule with the optimizer state: its values against the command
     * line's (--override-opt-param-scheduler, --use-checkpoint-opt_param-scheduler) */
    if (st == MG_OK && it >= 0 && h.optimizer)
        st = mg_lr_schedule_restore(&t->lr, &t->state.lr_scheduler, c->override_opt_param_scheduler,
                                    c->use_checkpoint_opt_param_scheduler);
    if (st == MG_OK) t->state.lr_scheduler = mg_lr_schedule_saved(&t->lr); /* what saves record */
    /* the checkpoint's weights are the fp32 masters: resume continues exactly */
    if (st == MG_OK) st = mg_trainer_set_weights(t, h.params);
    free_host_state(t, &h);
    if (!c->save[0]) release_stage(t);
    return st;
}

static mg_status finish_save(mg_trainer *t) {
    mg_checkpoint_pending *p = t->ckpt.pending_save;
    mg_status st = mg_checkpoint_finish(p);
    int64_t it;
    double sec, bytes;
    mg_checkpoint_pending_stats(p, &it, &sec, &bytes);
    mg_checkpoint_pending_free(p);
    free_host_state(t, t->ckpt.pending_host);
    free(t->ckpt.pending_host);
    t->ckpt.pending_save = NULL;
    t->ckpt.pending_host = NULL;
    MG_CHECK(st);
    mg_log_info("  successfully saved checkpoint from iteration %7" PRId64 " to %s", it,
                t->cfg.save);
    mg_log_info("> checkpoint save: this rank wrote %.3f GB in %.2f s (%.2f GB/s)%s", bytes / 1e9,
                sec, sec > 0 ? bytes / 1e9 / sec : 0.0,
                t->cfg.async_save ? " in the background" : "");
    return MG_OK;
}

mg_status mg_trainer_save(mg_trainer *t) {
    if (t->ckpt.pending_save) MG_CHECK(finish_save(t)); /* one save in flight at a time */
    mg_backend *be = t->be;
    size_t m = t->opt.numel;
    const double t0 = mg_clock_seconds();
    mg_checkpoint_tensors *h = calloc(1, sizeof *h);
    if (!h) return MG_FAIL(MG_ERR_NOMEM, "out of memory saving a checkpoint");
    float *block = NULL;
    mg_status st = stage_block(t, &block);
    if (st == MG_OK) st = alloc_host_state(t, h, block);
    if (st == MG_OK) st = mg_trainer_get_weights(t, h->params);
    if (st == MG_OK) st = be->copy_d2h(be, h->exp_avg, t->opt.m, m * sizeof(float));
    if (st == MG_OK) st = be->copy_d2h(be, h->exp_avg_sq, t->opt.v, m * sizeof(float));
    if (st == MG_OK) st = copy_biases(t, h, true);
    if (st == MG_OK) st = copy_fp8(t, h, true);
    if (st == MG_OK) st = mg_model_rng_offset(&t->model.rng, &t->state.rng_offset);
    /* Adam's step, the schedule's position and the loss scaler: the device's step control */
    if (st == MG_OK) st = mg_trainer_ctl_read(t);
    /* every rank calls it: each writes the pieces it holds alone or first */
    if (!t->ckpt.scratch) MG_CHECK(be->alloc(be, sizeof(int64_t), &t->ckpt.scratch));
    const mg_checkpoint_groups groups = {t->layout.dp, t->layout.pp, t->layout.tp, be,
                                         t->ckpt.scratch};
    if (st == MG_OK)
        st = mg_checkpoint_save_async(t->cfg.save, &t->state, &t->cfg, &t->model, h, &groups,
                                      t->cfg.async_save, &t->ckpt.pending_save);
    if (st != MG_OK) {
        free_host_state(t, h);
        free(h);
        return st;
    }
    t->ckpt.pending_host = h;
    if (!t->cfg.async_save) return finish_save(t);
    mg_log_info("> saving checkpoint from iteration %" PRId64 " in the background; training "
                "stalled %.2f s for the copy",
                t->state.iteration, mg_clock_seconds() - t0);
    return MG_OK;
}

mg_status mg_trainer_save_poll(mg_trainer *t) {
    bool done = false;
    if (t->ckpt.pending_save) MG_CHECK(mg_checkpoint_poll(t->ckpt.pending_save, &done));
    return done ? finish_save(t) : MG_OK;
}

mg_status mg_trainer_save_wait(mg_trainer *t) {
    return t->ckpt.pending_save ? finish_save(t) : MG_OK;
}

void mg_trainer_ckpt_free(mg_trainer *t) {
    mg_checkpoint_pending_free(t->ckpt.pending_save);
    if (t->ckpt.pending_host) free_host_state(t, t->ckpt.pending_host);
    free(t->ckpt.pending_host);
    release_stage(t);
    if (t->ckpt.scratch && t->be) t->be->free(t->be, t->ckpt.scratch);
}
