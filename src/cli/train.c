/* `megatron train`: flags → validated config → the trainer. Errors leave as one stderr line.
 *
 * A multi-rank launch (mpirun, srun, torchrun variables) trains tensor- and data-parallel: every
 * rank validates the same flags and the layout (a bad one stops every rank with the same line
 * before any communication, so nobody waits for a peer), then the ranks meet
 * (mg_comm_world_init: NCCL on GPUs, any launcher; MPI on the cpu backend, mpirun/srun; the TCP
 * rendezvous is the failure channel) and build Megatron's data-parallel and tensor-parallel
 * groups (parallel/parallel_state.h). A rank whose run fails prints its line and tells its peers
 * (mg_comm_world_fail), which then stop with "rank R failed: ..." instead of waiting.
 *
 * With --load DIR holding a checkpoint, the model's shape flags not on the command line come from
 * the checkpoint's saved configuration (Megatron's --use-checkpoint-args, here by default and
 * flag by flag): `megatron train --load CKPT` continues a run, or trains a converted Hugging Face
 * model, without repeating them; a shape flag given with another value is refused when the
 * checkpoint loads. */
#include "cli/cli.h"

#include "backend/backend.h"
#include "comm/comm.h"
#include "config/flags.h"
#include "core/log.h"
#include "core/status.h"
#include "parallel/layout.h"
#include "parallel/parallel_state.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

#include <inttypes.h>
#include <stdio.h>
#include <string.h>

/* The groups a training rank uses, among Megatron's groups of the layout (the last two, the
 * expert-parallel and expert-data-parallel groups, only for MoE models) */
#define N_TRAIN_GROUPS 6
static const struct {
    mg_group_kind kind;
    const char *name;
} train_groups[N_TRAIN_GROUPS] = {{MG_GROUP_DP, "dp"}, {MG_GROUP_TP, "tp"},
                                  {MG_GROUP_PP, "pp"}, {MG_GROUP_EMBEDDING, "embd"},
                                  {MG_GROUP_EP, "ep"}, {MG_GROUP_EXPERT_DP, "edp"}};

static mg_comm **group_slot(mg_train_groups *g, int i) {
    mg_comm **slots[N_TRAIN_GROUPS] = {&g->dp, &g->tp, &g->pp, &g->embedding, &g->ep, &g->edp};
    return slots[i];
}

static void free_groups(mg_train_groups *g) {
    for (int i = 0; i < N_TRAIN_GROUPS; i++)
        if (*group_slot(g, i)) {
            mg_comm_group_free(*group_slot(g, i));
            *group_slot(g, i) = NULL;
        }
}

/* This rank's data-parallel, tensor-parallel, pipeline and embedding groups, and for MoE models
 * the expert groups (every rank creates every list, in the same order). A group of one rank is
 * left NULL. */
static mg_status make_groups(mg_comm_world *w, const mg_config *c, mg_train_groups *out) {
    mg_parallel_sizes s;
    MG_CHECK(mg_layout_sizes(c, mg_comm_world_size(w), &s));
    mg_parallel_layout l;
    MG_CHECK(mg_parallel_layout_build(&s, &l));
    mg_status st = MG_OK;
    int n = c->num_experts > 0 ? N_TRAIN_GROUPS : N_TRAIN_GROUPS - 2;
    for (int i = 0; i < n && st == MG_OK; i++) {
        const mg_group_list *g = &l.groups[train_groups[i].kind];
        st = mg_comm_group_create(w, train_groups[i].name, g->n_groups, g->offsets, g->ranks,
                                  group_slot(out, i));
    }
    mg_parallel_layout_free(&l);
    for (int i = 0; i < n; i++) {
        mg_comm **g = group_slot(out, i);
        if (*g && mg_comm_size(*g) == 1) {
            mg_comm_group_free(*g);
            *g = NULL;
        }
    }
    return st;
}

/* The communication backend follows the device: NCCL moves the CUDA backend's device buffers,
 * MPI the cpu backend's host buffers. --device auto is settled here, before the ranks meet (the
 * trainer then creates what cfg->device names): cuda when this build has it and the launcher's
 * local rank has a usable GPU, else cpu. */
static mg_status pick_device(const mg_launch_info *li, mg_config *cfg, mg_comm_backend *backend) {
    if (!strcmp(cfg->device, "auto")) {
        mg_status st = mg_backend_cuda_probe(li->local_rank);
        if (st != MG_OK) {
            if (st != MG_ERR_UNSUPPORTED) return st;
            mg_error_clear();
        }
        snprintf(cfg->device, sizeof cfg->device, "%s", st == MG_OK ? "cuda" : "cpu");
    }
    *backend = strcmp(cfg->device, "cuda") ? MG_COMM_MPI : MG_COMM_NCCL;
    /* every rank says so at once: nobody waits for a peer */
    if (*backend == MG_COMM_MPI && li->kind != MG_LAUNCH_MPI)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "%s started %d ranks, but data-parallel training on the cpu backend runs "
                       "over MPI: start it with mpirun -np %d (or srun)",
                       li->launcher, li->world_size, li->world_size);
    return MG_OK;
}

/* A failure after the ranks met is printed here, before this rank tells its peers (which then
 * stop the job): the prologue prints no second line. */
static mg_status train_ranks(mg_cli_context *cx) {
    const mg_launch_info *li = &cx->launch;
    mg_config *cfg = &cx->cfg;
    mg_comm_world *w = NULL;
    mg_train_groups groups = {0};
    mg_comm_backend backend;
    MG_CHECK(pick_device(li, cfg, &backend));
    /* on failure the world told the peers already */
    MG_CHECK(mg_comm_world_init(li, backend, cfg->distributed_timeout_minutes * 60.0, &w));
    mg_status st = make_groups(w, cfg, &groups);
    if (st == MG_OK) st = mg_train_run(cfg, &groups);
    if (st != MG_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", mg_error_message());
        mg_cli_print_error();
        cx->error_printed = true;
        mg_comm_world_fail(w, msg);
    }
    free_groups(&groups);
    mg_comm_world_finalize(w);
    return st;
}

/* The flags that describe the model's function and shape (what the checkpoint's weights mean),
 * as against the run's: layout, data, optimizer, schedule. */
static const char *const model_flags[] = {"--num-layers",
                                          "--hidden-size",
                                          "--ffn-hidden-size",
                                          "--num-attention-heads",
                                          "--kv-channels",
                                          "--group-query-attention",
                                          "--num-query-groups",
                                          "--seq-length",
                                          "--max-position-embeddings",
                                          "--position-embedding-type",
                                          "--rotary-base",
                                          "--rotary-percent",
                                          "--normalization",
                                          "--norm-epsilon",
                                          "--apply-layernorm-1p",
                                          "--swiglu",
                                          "--disable-bias-linear",
                                          "--untie-embeddings-and-output-weights",
                                          "--vocab-size",
                                          "--make-vocab-size-divisible-by",
                                          "--num-experts",
                                          "--moe-layer-freq",
                                          "--moe-ffn-hidden-size",
                                          "--moe-router-topk",
                                          "--moe-router-score-function",
                                          "--moe-router-pre-softmax",
                                          "--moe-router-topk-scaling-factor",
                                          "--moe-router-num-groups",
                                          "--moe-router-group-topk",
                                          "--moe-router-enable-expert-bias",
                                          "--moe-shared-expert-intermediate-size"};

/* The model flags the command line left out, from the newest checkpoint in --load (none there:
 * nothing, the trainer then warns and initialises). --seq-length comes along when absent, though
 * the checkpoint does not fix it, so that a bare `train --load` has one. */
static mg_status take_checkpoint_model(mg_config *cfg) {
    int64_t it;
    MG_CHECK(mg_checkpoint_latest(cfg->load, &it));
    if (it < 0) return MG_OK;
    mg_config saved;
    MG_CHECK(mg_checkpoint_load_config(cfg->load, it, &saved));
    const int n = (int)(sizeof model_flags / sizeof model_flags[0]);
    MG_CHECK(mg_flags_take_unseen(cfg, &saved, model_flags, n));
    char taken[1024] = "";
    for (int i = 0, used = 0; i < n && used < (int)sizeof taken; i++)
        if (!mg_flags_seen(model_flags[i]))
            used += snprintf(taken + used, sizeof taken - (size_t)used, " %s", model_flags[i]);
    if (taken[0])
        mg_log_info("> model flags from %s (iteration %" PRId64 "):%s", cfg->load, it, taken);
    return MG_OK;
}

/* After the prologue (the flags, the launcher's ranks, the log lines of this rank). */
static mg_status train_run(mg_cli_context *cx) {
    mg_config *cfg = &cx->cfg;
    /* --logging-level: after the prologue's mg_log_init, which sets this rank's default */
    if (cfg->logging_level >= 0) mg_log_set_level(mg_config_log_level(cfg));
    char ignored[2048];
    if (mg_flags_no_effect_seen(ignored, sizeof ignored) > 0)
        mg_log_info("> no effect here (they tune Megatron's Python internals or select what this "
                    "build always does; train --help says why): %s",
                    ignored);
    cfg->world_size = cx->launch.world_size;
    if (cfg->load[0]) MG_CHECK(take_checkpoint_model(cfg));
    MG_CHECK(mg_config_validate(cfg));
    /* the layout's own checks (Megatron's initialize_model_parallel), the layer placement and
     * the pipeline schedule, before the ranks meet: the same flags give every rank the same
     * one-line refusal, so nobody waits for a peer */
    MG_CHECK(mg_layout_check(cfg, cx->launch.world_size));
    if (cx->launch.world_size == 1) return mg_train_run(cfg, NULL);
    return train_ranks(cx);
}

const mg_cli_command mg_cli_train = {.run = train_run};
