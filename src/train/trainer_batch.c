#include "train/trainer_batch.h"

#include "parallel/layout.h"

#include "core/log.h"
#include "train/trainer_moe.h"

#include <inttypes.h>
#include <stdio.h>

float mg_trainer_token_weight(const mg_trainer *t) {
    return 1.0f / (float)((size_t)t->model.blk.N * (size_t)t->num_microbatches *
                          (size_t)t->layout.dp_size);
}

mg_status mg_trainer_upload_loss_weights(mg_trainer *t) {
    size_t n = (size_t)t->model.blk.N;
    float w = mg_trainer_token_weight(t); /* the loss scale: on the device (trainer_loss.h) */
    for (size_t i = 0; i < n; i++) t->mem.host_dloss[i] = w;
    MG_CHECK(t->be->copy_h2d(t->be, t->mem.dloss, t->mem.host_dloss, n * sizeof(float)));
    if (t->model.n_moe > 0) mg_trainer_moe_set_weights(t);
    return MG_OK;
}

/* The schedule of m microbatches on this rank's pipeline (the walker's parameters otherwise). */
static mg_pp_schedule_params schedule_of(const mg_trainer *t, int m) {
    return mg_layout_schedule(&t->cfg, t->model.n_chunks, m);
}

/* mg_batch_schedule_walk's check of each global batch a rampup reaches: its pipeline schedule is
 * one Megatron runs (the final one is checked by the front end and plan_schedule). */
static mg_status check_reached(void *ctx, int64_t global_batch) {
    const mg_trainer *t = ctx;
    if (!t->batch.rampup || t->layout.pp_size == 1) return MG_OK;
    int m = (int)(global_batch / (t->cfg.micro_batch_size * (int64_t)t->layout.dp_size));
    const mg_pp_schedule_params s = schedule_of(t, m);
    mg_status st = mg_pp_schedule_check(&s);
    if (st == MG_OK) return MG_OK;
    char why[400];
    snprintf(why, sizeof why, "%s", mg_error_message());
    return MG_FAIL(st,
                   "--rampup-batch-size reaches a global batch of %" PRId64
                   " (%d microbatches per rank): %s",
                   global_batch, m, why);
}

mg_status mg_trainer_batch_init(mg_trainer *t) {
    const mg_config *c = &t->cfg;
    MG_CHECK(mg_batch_schedule_init(&t->batch, c, t->layout.dp_size));
    t->train_iters = mg_batch_schedule_train_iters(&t->batch, c);
    t->eval_microbatches = t->num_microbatches;
    if (c->train_samples > 0 && t->train_iters <= 0)
        return MG_FAIL(MG_ERR_USAGE,
                       "--train-samples %" PRId64 " makes no iteration of global batch %d; raise "
                       "it to at least the global batch size",
                       c->train_samples, c->global_batch_size);
    MG_CHECK(mg_batch_schedule_walk(&t->batch, t->train_iters, check_reached, t));
    if (t->batch.rampup)
        mg_log_info("> batch-size rampup: global batch from %" PRId64 " by %" PRId64 " to %" PRId64
                    " over %" PRId64 " samples (%.6g samples per increment)",
                    t->batch.start, t->batch.increment, t->batch.global_batch_size,
                    t->batch.rampup_samples, t->batch.samples_per_increment);
    if (c->train_samples > 0)
        mg_log_info("setting training iterations to %" PRId64, t->train_iters);
    return MG_OK;
}

/* The walker for m microbatches, on the buffers planned for the largest count. */
static mg_status rebuild_pipeline(mg_trainer *t, int m) {
    mg_pipeline *p = &t->pipe, np;
    const mg_pp_schedule_params s = schedule_of(t, m);
    MG_CHECK(mg_pipeline_init(&np, &s, p->rank, t->layout.pp, t->be, p->numel, p->dt,
                              !t->cfg.no_overlap_p2p_communication));
    if (np.n_slots > t->model.n_slots || mg_pipeline_buffer_bytes(&np) > t->mem.pipe_bytes) {
        int slots = np.n_slots;
        mg_pipeline_free(&np);
        return MG_FAIL(MG_ERR_INTERNAL,
                       "pipeline of %d microbatches needs %d activation slots or more buffers than "
                       "the %d planned for %d",
                       m, slots, t->model.n_slots, p->schedule.microbatches);
    }
    np.timed = p->timed;
    np.busy_s = p->busy_s;
    np.total_s = p->total_s;
    np.runs = p->runs;
    np.messages = p->messages;
    mg_pipeline_bind(&np, t->mem.pipe_buffers);
    mg_pipeline_free(p);
    *p = np;
    return MG_OK;
}

mg_status mg_trainer_set_microbatches(mg_trainer *t, int m) {
    if (m == t->num_microbatches) return MG_OK;
    if (m < 1 || m > t->eval_microbatches)
        return MG_FAIL(MG_ERR_INTERNAL, "%d microbatches per rank, planned for 1..%d", m,
                       t->eval_microbatches);
    MG_CHECK(rebuild_pipeline(t, m));
    t->num_microbatches = m;
    return mg_trainer_upload_loss_weights(t);
}

mg_status mg_trainer_batch_begin(mg_trainer *t, int64_t *global_batch) {
    int64_t g = mg_batch_schedule_global(&t->batch, t->state.consumed_train_samples);
    int64_t per = (int64_t)t->cfg.micro_batch_size * t->layout.dp_size;
    if (g % per) /* mg_trainer_batch_init checked every size the run reaches */
        return MG_FAIL(MG_ERR_INTERNAL, "global batch %" PRId64 " is not a multiple of %" PRId64, g,
                       per);
    MG_CHECK(mg_trainer_set_microbatches(t, (int)(g / per)));
    t->step_global_batch = g;
    *global_batch = g;
    return MG_OK;
}

mg_status mg_trainer_load_microbatch(mg_trainer *t, const mg_sample_source *src, int64_t first,
                                     int mb, int32_t *tokens, int32_t *targets) {
    const mg_config *c = &t->cfg;
    size_t S = (size_t)c->seq_length;
    int64_t start =
        first + ((int64_t)mb * t->layout.dp_size + t->layout.dp_rank) * c->micro_batch_size;
    for (int b = 0; b < c->micro_batch_size; b++)
        MG_CHECK(src->sample(src->ctx, start + b, t->mem.host_tokens + b * S,
                             t->mem.host_targets + b * S));
    size_t bytes = (size_t)t->model.blk.N * sizeof(int32_t);
    if (tokens) MG_CHECK(t->be->copy_h2d(t->be, tokens, t->mem.host_tokens, bytes));
    if (targets) MG_CHECK(t->be->copy_h2d(t->be, targets, t->mem.host_targets, bytes));
    return MG_OK;
}
