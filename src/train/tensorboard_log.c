#include "train/tensorboard_log.h"

#include "config/flags.h"
#include "core/log.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Megatron's write_args_to_tensorboard: add_text(arg, str(value), global_step=iteration) for
 * every argument; here every config key, its value as the config JSON writes it (strings bare). */
static mg_status write_config(mg_tb_log *l, const mg_config *c, int64_t iteration) {
    char *json = NULL;
    MG_CHECK(mg_config_to_json(c, &json));
    cJSON *root = cJSON_Parse(json);
    free(json);
    if (!root) return MG_FAIL(MG_ERR_NOMEM, "cannot parse the config JSON for TensorBoard");
    mg_status st = MG_OK;
    for (const cJSON *it = root->child; it; it = it->next) {
        char *printed = cJSON_IsString(it) ? NULL : cJSON_PrintUnformatted(it);
        const char *text = cJSON_IsString(it) ? it->valuestring : printed;
        st = text ? mg_tb_add_text(&l->w, it->string, text, iteration)
                  : MG_FAIL(MG_ERR_NOMEM, "cannot print config field %s", it->string);
        free(printed);
        if (st != MG_OK) break;
    }
    cJSON_Delete(root);
    return st;
}

mg_status mg_tb_log_open(mg_tb_log *l, const mg_trainer *t) {
    const mg_config *c = &t->cfg;
    memset(l, 0, sizeof *l);
    l->interval = c->tensorboard_log_interval > 0 ? c->tensorboard_log_interval : 1;
    l->loss_scale = !c->no_log_loss_scale_to_tensorboard;
    l->world_size = c->log_world_size_to_tensorboard;
    l->memory = c->log_memory_to_tensorboard;
    l->timers = c->log_timers_to_tensorboard;
    l->ppl = c->log_validation_ppl_to_tensorboard;
    l->world = c->world_size;
    const mg_arena *arenas[] = {&t->mem.plan.params, &t->mem.plan.master, &t->mem.plan.grads,
                                &t->mem.plan.optim,  &t->mem.plan.acts,   &t->mem.plan.work,
                                &t->mem.plan.io};
    for (size_t i = 0; i < sizeof arenas / sizeof *arenas; i++) l->mem_count += !!arenas[i]->base;
    l->mem_bytes = (double)t->mem.planned_bytes;
    /* Megatron: the SummaryWriter exists on the last rank only */
    MG_CHECK(mg_tb_open(&l->w, mg_log_is_logging_rank() ? c->tensorboard_dir : "",
                        c->tensorboard_queue_size));
    if (!l->w.f) return MG_OK;
    mg_log_last("> writing TensorBoard events to %s", l->w.path);
    MG_CHECK(write_config(l, c, t->state.iteration));
    return mg_tb_flush(&l->w);
}

bool mg_tb_log_due(const mg_tb_log *l, int64_t iteration) {
    return l->w.f && iteration % l->interval == 0;
}

/* add_scalar(name, v, iteration) and add_scalar(name + " vs samples", v, consumed samples) */
static mg_status pair(mg_tb_log *l, const char *name, double v, const mg_log_record *r) {
    char vs[96];
    snprintf(vs, sizeof vs, "%s vs samples", name);
    MG_CHECK(mg_tb_add_scalar(&l->w, name, v, r->iteration));
    return mg_tb_add_scalar(&l->w, vs, v, r->consumed_samples);
}

mg_status mg_tb_log_train(mg_tb_log *l, const mg_log_record *r) {
    if (!l->w.f) return MG_OK;
    /* training_log's order */
    if (!(r->lr < 0)) MG_CHECK(pair(l, "learning-rate", r->lr, r));
    MG_CHECK(pair(l, "batch-size", r->global_batch_size, r));
    MG_CHECK(pair(l, "lm loss", r->lm_loss, r));
    if (l->loss_scale) MG_CHECK(pair(l, "loss-scale", r->loss_scale, r));
    if (l->world_size) MG_CHECK(pair(l, "world-size", l->world, r));
    if (!(r->grad_norm < 0)) MG_CHECK(pair(l, "grad-norm", r->grad_norm, r));
    if (l->memory) {
        MG_CHECK(mg_tb_add_scalar(&l->w, "mem-reserved-bytes", l->mem_bytes, r->iteration));
        MG_CHECK(mg_tb_add_scalar(&l->w, "mem-allocated-bytes", l->mem_bytes, r->iteration));
        MG_CHECK(mg_tb_add_scalar(&l->w, "mem-max-allocated-bytes", l->mem_bytes, r->iteration));
        MG_CHECK(mg_tb_add_scalar(&l->w, "mem-allocated-count", l->mem_count, r->iteration));
    }
    /* the MoE metrics tracker's scalars, without their coefficients */
    if (r->moe && r->aux_name)
        MG_CHECK(mg_tb_add_scalar(&l->w, r->aux_name, r->aux_loss, r->iteration));
    if (r->moe && !(r->z_loss < 0))
        MG_CHECK(mg_tb_add_scalar(&l->w, "z_loss", r->z_loss, r->iteration));
    if (r->moe && !(r->ep_imbalance < 0))
        MG_CHECK(mg_tb_add_scalar(&l->w, "moe_ep_load_imbalance", r->ep_imbalance, r->iteration));
    if (r->moe && r->echo)
        MG_CHECK(mg_tb_add_scalar(&l->w, "moe_ep_load_imbalance_after_echo", r->ep_imbalance_after,
                                  r->iteration));
    if (r->moe && r->budget)
        MG_CHECK(mg_tb_add_scalar(&l->w, "moe_overflow_steps", r->overflow_steps, r->iteration));
    return MG_OK;
}

mg_status mg_tb_log_timing(mg_tb_log *l, const mg_log_record *r) {
    if (!l->w.f) return MG_OK;
    if (l->timers) {
        MG_CHECK(
            mg_tb_add_scalar(&l->w, "iteration-time", r->elapsed_ms_per_iter / 1e3, r->iteration));
        if (!(r->tflops_per_gpu < 0))
            MG_CHECK(mg_tb_add_scalar(&l->w, "throughput", r->tflops_per_gpu, r->iteration));
    }
    return mg_tb_flush(&l->w);
}

mg_status mg_tb_log_validation(mg_tb_log *l, int64_t iteration, int64_t consumed_samples,
                               double loss) {
    if (!l->w.f) return MG_OK;
    MG_CHECK(mg_tb_add_scalar(&l->w, "lm loss validation", loss, iteration));
    MG_CHECK(mg_tb_add_scalar(&l->w, "lm loss validation vs samples", loss, consumed_samples));
    if (l->ppl) {
        double ppl = exp(loss < 20 ? loss : 20); /* Megatron: math.exp(min(20, loss)) */
        MG_CHECK(mg_tb_add_scalar(&l->w, "lm loss validation ppl", ppl, iteration));
        MG_CHECK(
            mg_tb_add_scalar(&l->w, "lm loss validation ppl vs samples", ppl, consumed_samples));
    }
    return mg_tb_flush(&l->w);
}

mg_status mg_tb_log_close(mg_tb_log *l) {
    return mg_tb_close(&l->w);
}
