/* `megatron train`: flags → validated config → the trainer. Errors leave as one stderr line.
 *
 * A multi-rank launch (mpirun, srun, torchrun variables) trains tensor- and data-parallel: every
 * rank validates the same flags and the layout (a bad one stops every rank with the same line
 * before any communication, so nobody waits for a peer), then the ranks meet
 * (mg_comm_world_init: NCCL on GPUs, any launcher; MPI on the cpu backend, mpirun/srun; the TCP
 * rendezvous is the failure channel) and build Megatron's data-parallel and tensor-parallel
 * groups (parallel/parallel_state.h). A rank whose run fails prints its line and tells its peers
 * (mg_comm_world_fail), which then stop with "rank R failed: ..." instead of waiting. */
#include "cli/cli.h"

#include "backend/backend.h"
#include "comm/comm.h"
#include "core/flags.h"
#include "core/log.h"
#include "core/status.h"
#include "parallel/parallel_state.h"
#include "train/trainer.h"

#include <stdio.h>
#include <string.h>

int mg_cli_report(int status) {
    if (status == MG_OK) return 0;
    if (mg_log_world() > 1)
        fprintf(stderr, "[rank %d] megatron: error: %s\n", mg_log_rank(), mg_error_message());
    else
        fprintf(stderr, "megatron: error: %s\n", mg_error_message());
    return status == MG_ERR_USAGE ? 2 : 1;
}

static mg_parallel_sizes layout_sizes(const mg_config *c, int world_size) {
    mg_parallel_sizes s = {.world_size = world_size,
                           .tp = c->tensor_model_parallel_size,
                           .pp = c->pipeline_model_parallel_size,
                           .cp = c->context_parallel_size,
                           .ep = c->expert_model_parallel_size,
                           .etp = c->expert_tensor_parallel_size};
    snprintf(s.order, sizeof s.order, "%s",
             c->parallel_order[0]      ? c->parallel_order
             : c->use_tp_pp_dp_mapping ? MG_PARALLEL_ORDER_TP_PP_DP
                                       : "");
    return s;
}

/* This rank's data-parallel and tensor-parallel groups among Megatron's groups of the layout
 * (every rank creates both lists, in the same order). A group of one rank is left NULL. */
static mg_status make_groups(mg_comm_world *w, const mg_config *c, mg_comm **dp, mg_comm **tp) {
    mg_parallel_sizes s = layout_sizes(c, mg_comm_world_size(w));
    mg_parallel_layout l;
    MG_CHECK(mg_parallel_layout_build(&s, &l));
    const mg_group_list *g = &l.groups[MG_GROUP_DP], *t = &l.groups[MG_GROUP_TP];
    mg_status st = mg_comm_group_create(w, "dp", g->n_groups, g->offsets, g->ranks, dp);
    if (st == MG_OK) st = mg_comm_group_create(w, "tp", t->n_groups, t->offsets, t->ranks, tp);
    mg_parallel_layout_free(&l);
    MG_CHECK(st);
    mg_comm **groups[2] = {dp, tp};
    for (int i = 0; i < 2; i++)
        if (*groups[i] && mg_comm_size(*groups[i]) == 1) {
            mg_comm_group_free(*groups[i]);
            *groups[i] = NULL;
        }
    return MG_OK;
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

static int train_ranks(const mg_launch_info *li, mg_config *cfg) {
    mg_comm_world *w = NULL;
    mg_comm *dp = NULL, *tp = NULL;
    mg_comm_backend backend;
    mg_status st = pick_device(li, cfg, &backend);
    if (st != MG_OK) return mg_cli_report(st);
    st = mg_comm_world_init(li, backend, cfg->distributed_timeout_minutes * 60.0, &w);
    if (st != MG_OK) return mg_cli_report(st); /* the world told the peers already */
    st = make_groups(w, cfg, &dp, &tp);
    if (st == MG_OK) st = mg_train_run(cfg, dp, tp);
    int rc = mg_cli_report(st);
    if (st != MG_OK) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", mg_error_message());
        mg_comm_world_fail(w, msg);
    }
    if (dp) mg_comm_group_free(dp);
    if (tp) mg_comm_group_free(tp);
    mg_comm_world_finalize(w);
    return rc;
}

int mg_cli_train(int argc, char **argv) {
    mg_config cfg;
    mg_config_defaults(&cfg);
    bool help = false;
    mg_status st = mg_flags_parse(&cfg, argc, argv, &help);
    if (st != MG_OK) return mg_cli_report(st);
    if (help) {
        mg_flags_print_help(stdout);
        return 0;
    }
    mg_launch_info li;
    st = mg_launch_detect(&li);
    if (st != MG_OK) return mg_cli_report(st);
    mg_log_init(li.rank, li.world_size);
    cfg.world_size = li.world_size;
    st = mg_config_validate(&cfg);
    if (st != MG_OK) return mg_cli_report(st);
    /* the layout's own checks (Megatron's initialize_model_parallel) before the ranks meet */
    mg_parallel_sizes sizes = layout_sizes(&cfg, li.world_size);
    st = mg_parallel_sizes_check(&sizes, NULL, NULL);
    if (st != MG_OK) return mg_cli_report(st);
    if (li.world_size == 1) return mg_cli_report(mg_train_run(&cfg, NULL, NULL));
    return train_ranks(&li, &cfg);
}
