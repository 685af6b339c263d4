/* The exchanges through peer-mapped memory (train/trainer_peer.h). */
#include "train/trainer_peer.h"

#include "core/env.h"
#include "core/log.h"
#include "parallel/ddp.h"
#include "train/memory.h"

#include <string.h>

/* Env switch `name`: true for `peer` (the default), false for `other`; else MG_ERR_USAGE. */
static mg_status choice(const char *name, const char *peer, const char *other, bool *out) {
    const char *how = mg_env_str(name, peer);
    *out = strcmp(how, peer) == 0;
    if (!*out && strcmp(how, other) != 0)
        return MG_FAIL(MG_ERR_USAGE, "%s=%s: expected %s (the default) or %s", name, how, peer,
                       other);
    return MG_OK;
}

/* Whether group g's memory is the backend's kind, as a window over it must be: device memory
 * for a device backend (NCCL), host memory for the cpu backend (MPI). */
static bool backend_memory(const mg_trainer *t, const mg_comm *g) {
    return mg_comm_device_buffers(g) == (t->be->device != MG_DEVICE_CPU);
}

/* Window k of `bytes` per rank over group g, or NULL with *why saying why not (the group cannot
 * map its peers' memory: the error's message; a failure of another kind stops the run). */
static mg_status window(mg_train_memory *m, int k, mg_comm *g, size_t bytes,
                        const mg_peer_window **out, const char **why) {
    *out = NULL;
    mg_status st = mg_comm_peer_window_alloc(g, bytes, &m->peer[k]);
    if (st == MG_OK) {
        m->peer_group[k] = g;
        *out = &m->peer[k];
        return MG_OK;
    }
    if (st != MG_ERR_UNSUPPORTED) return st;
    *why = mg_error_message();
    return MG_OK;
}

/* MG_MOE_EXCHANGE (docs/environment.md): "stores" puts the expert-parallel rows straight into
 * the peers' receive slabs, "all-to-all" always sends the slabs through the group's all-to-all. */
static mg_status bind_ep(mg_trainer *t) {
    mg_moe_ws *w = &t->model.moe_ws;
    w->peer = NULL;
    bool stores;
    MG_CHECK(choice("MG_MOE_EXCHANGE", "stores", "all-to-all", &stores));
    if (!w->ep || w->n_layers == 0 || !mg_comm_device_buffers(w->ep)) return MG_OK; /* MPI: host */
    const char *why = "MG_MOE_EXCHANGE=all-to-all";
    if (stores && !t->be->moe_put_rows) why = "the backend stores into no peer's memory";
    size_t bytes = mg_memory_ep_window_bytes(&t->model, t->be->compute_dtype);
    if (stores && t->be->moe_put_rows)
        MG_CHECK(window(&t->mem, MG_TRAIN_PEER_EP, w->ep, bytes, &w->peer, &why));
    const bool self = t->layout.ep_rank == 0 && t->layout.dp_rank == 0;
    if (w->peer)
        mg_log_self(self,
                    "> expert-parallel exchange: each rank stores its rows straight into the "
                    "peers' receive slabs (peer-mapped memory, %.1f MiB per rank)",
                    (double)bytes / 1048576.0);
    else
        mg_log_self(self, "> expert-parallel exchange: whole slabs by the group's all-to-all (%s)",
                    why);
    mg_error_clear();
    return MG_OK;
}

/* ---- the activations' and the workspace's arenas in peer-mapped memory ---- */

static mg_status arena_alloc(void *ctx, size_t bytes, void **out) {
    mg_peer_arena *a = ctx;
    const mg_peer_window *pw = NULL;
    const char *why = "";
    MG_CHECK(window(a->memory, a->k, a->group, bytes, &pw, &why));
    a->mapped = pw != NULL;
    if (pw) {
        *out = pw->base[pw->rank];
        return MG_OK;
    }
    mg_log_self(a->log, "> sequence-parallel gathers: through the window's slots (the %s: %s)",
                a->name, why);
    mg_error_clear();
    return a->fallback->alloc(a->fallback->ctx, bytes, out);
}

static void arena_free(void *ctx, void *ptr) {
    mg_peer_arena *a = ctx;
    mg_train_memory *m = a->memory;
    if (!a->mapped) {
        a->fallback->free(a->fallback->ctx, ptr);
    } else if (m->peer_group[a->k]) { /* else freed with the other windows already */
        mg_comm_peer_window_free(m->peer_group[a->k], &m->peer[a->k], m->sym_abandon);
        m->peer_group[a->k] = NULL;
    }
}

/* Whether the sequence-parallel exchanges go by copies where the group can (MG_TP_EXCHANGE). */
static mg_status tp_copies(bool *copies) {
    return choice("MG_TP_EXCHANGE", "copies", "collectives", copies);
}

mg_status mg_trainer_peer_arena(mg_trainer *t, const mg_arena *a, const mg_allocator **out) {
    mg_train_memory *m = &t->mem;
    const mg_train_layout *l = &t->layout;
    *out = NULL;
    bool copies;
    MG_CHECK(tp_copies(&copies));
    const int i = a == &m->plan.acts ? 0 : a == &m->plan.work ? 1 : -1;
    if (i < 0 || !copies || !m->arena_alloc || l->tp_size < 2 || !t->cfg.sequence_parallel ||
        !t->be->peer_put || !t->be->peer_push || !mg_comm_device_buffers(l->tp) ||
        mg_comm_copy_engine(l->tp))
        return MG_OK;
    mg_peer_arena *pa = &m->peer_arena[i];
    *pa = (mg_peer_arena){.alloc = {arena_alloc, arena_free, pa},
                          .memory = m,
                          .k = i == 0 ? MG_TRAIN_PEER_ACTS : MG_TRAIN_PEER_WORK,
                          .name = i == 0 ? "activations" : "workspace",
                          .group = l->tp,
                          .fallback = m->arena_alloc,
                          .log = l->tp_rank == 0 && l->dp_rank == 0 && l->pp_rank == 0};
    *out = &pa->alloc;
    return MG_OK;
}

/* MG_TP_EXCHANGE (docs/environment.md): under sequence parallelism, "copies" moves the
 * tensor-parallel gathers and a bf16 layer's reduce-scatters by copies into the peers' memory
 * beside the GEMMs, "collectives" through the group's collectives. */
static mg_status bind_tp(mg_trainer *t) {
    const mg_model_config *mc = &t->model.cfg;
    mg_tp *tp = &t->model.tp;
    mg_tp_bind_peer(tp, NULL);
    bool copies;
    MG_CHECK(tp_copies(&copies));
    if (!mc->sp || tp->size == 1 || !t->layout.tp || !backend_memory(t, t->layout.tp)) return MG_OK;
    const char *why = "MG_TP_EXCHANGE=collectives";
    const bool can = t->be->peer_push && t->be->peer_sum;
    if (copies && !can) why = "the backend copies into no peer's memory";
    size_t bytes =
        mg_memory_tp_window_bytes(&t->model, t->cfg.micro_batch_size, t->be->compute_dtype);
    const mg_peer_window *pw = NULL;
    if (copies && can) MG_CHECK(window(&t->mem, MG_TRAIN_PEER_TP, t->layout.tp, bytes, &pw, &why));
    mg_tp_bind_peer(tp, pw);
    const mg_train_memory *m = &t->mem;
    mg_tp_bind_direct(
        tp, pw && m->peer_group[MG_TRAIN_PEER_ACTS] ? &m->peer[MG_TRAIN_PEER_ACTS] : NULL,
        pw && m->peer_group[MG_TRAIN_PEER_WORK] ? &m->peer[MG_TRAIN_PEER_WORK] : NULL);
    const bool self = t->layout.tp_rank == 0 && t->layout.dp_rank == 0 && t->layout.pp_rank == 0;
    if (pw)
        mg_log_self(self,
                    "> sequence-parallel exchanges: gathers and reduce-scatters by copies into "
                    "the peers' memory beside the GEMMs (peer-mapped memory, %.1f MiB per rank)",
                    (double)bytes / 1048576.0);
    else
        mg_log_self(self, "> sequence-parallel exchanges: the group's collectives (%s)", why);
    mg_error_clear();
    return MG_OK;
}

/* MG_DP_EXCHANGE (docs/environment.md): with the distributed optimizer, "copies" (the default)
 * moves each buffer's reduce-scatters and parameter gathers through peer-mapped memory
 * (parallel/ddp.h's mg_ddp_bind_peer), "collectives" through the group's. */
static mg_status bind_dp(mg_trainer *t) {
    bool copies;
    MG_CHECK(choice("MG_DP_EXCHANGE", "copies", "collectives", &copies));
    if (!copies || !t->cfg.use_distributed_optimizer) return MG_OK;
    const bool can = t->be->peer_push && t->be->peer_sum && t->be->peer_take;
    for (int b = 0; b < t->bufs.n; b++) {
        mg_comm *g = mg_trainer_buf_group(t, b);
        if (!g || !t->ddp[b].l || !backend_memory(t, g)) continue; /* one rank */
        size_t bytes = mg_memory_dp_window_bytes(&t->bufs.b[b].layout);
        const char *why = bytes == 0 ? "one bucket: nothing beside it to hide"
                                     : "the backend copies into no peer's memory";
        const mg_peer_window *pw = NULL;
        if (can && bytes > 0) MG_CHECK(window(&t->mem, MG_TRAIN_PEER_DP + b, g, bytes, &pw, &why));
        mg_ddp_bind_peer(&t->ddp[b], pw);
        const bool self = mg_comm_rank(g) == 0 && t->layout.tp_rank == 0 && t->layout.pp_rank == 0;
        /* a bucket above the window's size goes through the group's collectives */
        const bool whole =
            mg_grad_buffer_largest_bucket(&t->bufs.b[b].layout) <= MG_MEMORY_DP_WINDOW_MAX;
        if (pw)
            mg_log_self(self,
                        "> data-parallel exchanges (buffer %d): reduce-scatters and gathers by "
                        "copies into the peers' memory (peer-mapped memory, %.1f MiB per rank)%s",
                        b, (double)bytes / 1048576.0,
                        whole ? ""
                              : "; buckets above 2^28 elements through the group's collectives");
        else
            mg_log_self(self, "> data-parallel exchanges (buffer %d): the group's collectives (%s)",
                        b, why);
        mg_error_clear();
    }
    return MG_OK;
}

mg_status mg_trainer_peer_bind(mg_trainer *t) {
    MG_CHECK(bind_ep(t));
    MG_CHECK(bind_tp(t));
    return bind_dp(t);
}
