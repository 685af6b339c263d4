#include "parallel/pipeline/run.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>

mg_status mg_pipeline_init(mg_pipeline *p, const mg_schedule_params *s, int rank, mg_comm *group,
                           mg_backend *be, size_t numel, mg_dtype dt) {
    memset(p, 0, sizeof *p);
    MG_CHECK(mg_schedule_check(s));
    if (s->pp > 1 ? !group || mg_comm_size(group) != s->pp || mg_comm_rank(group) != rank
                  : rank != 0)
        return MG_FAIL(MG_ERR_INTERNAL, "pipeline rank %d of %d with a group of %d", rank, s->pp,
                       group ? mg_comm_size(group) : 1);
    p->sched = *s;
    p->rank = rank;
    p->group = s->pp > 1 ? group : NULL;
    p->be = be;
    p->numel = numel;
    p->dt = dt;
    mg_status st = mg_p2p_plan_build(s, false, rank, &p->train);
    if (st == MG_OK) st = mg_p2p_plan_build(s, true, rank, &p->eval);
    if (st == MG_OK) st = mg_schedule_activation_slots(s, rank, &p->n_slots);
    if (st == MG_OK && (p->train.n_slots > p->n_slots || p->eval.n_slots > p->n_slots))
        st = MG_FAIL(MG_ERR_INTERNAL, "pipeline plan holds %d slots, the schedule %d",
                     p->train.n_slots, p->n_slots);
    p->n_grad_bufs =
        p->train.n_grad_bufs > p->eval.n_grad_bufs ? p->train.n_grad_bufs : p->eval.n_grad_bufs;
    size_t total = (size_t)s->microbatches * (size_t)s->vpp;
    if (st == MG_OK) {
        p->slot_of = malloc(total * sizeof *p->slot_of);
        p->free_slots = malloc((size_t)p->n_slots * sizeof *p->free_slots);
        if (!p->slot_of || !p->free_slots)
            st = MG_FAIL(MG_ERR_NOMEM, "out of memory for a schedule of %zu forwards", total);
    }
    if (st != MG_OK) mg_pipeline_free(p);
    return st;
}

size_t mg_pipeline_buffer_bytes(const mg_pipeline *p) {
    return (size_t)p->n_grad_bufs * p->numel * mg_dtype_size(p->dt);
}

void mg_pipeline_bind(mg_pipeline *p, void *grad_bufs) {
    p->grad_bufs = grad_bufs;
}

void mg_pipeline_free(mg_pipeline *p) {
    mg_p2p_plan_free(&p->train);
    mg_p2p_plan_free(&p->eval);
    free(p->slot_of);
    free(p->free_slots);
    memset(p, 0, sizeof *p);
}

static int *slot_entry(mg_pipeline *p, const mg_schedule_op *op) {
    return &p->slot_of[(size_t)op->microbatch * p->sched.vpp + op->chunk];
}

static mg_status take_slot(mg_pipeline *p, const mg_schedule_op *op) {
    if (*slot_entry(p, op) >= 0) return MG_OK; /* taken by its receive */
    if (p->n_free == 0)
        return MG_FAIL(MG_ERR_INTERNAL,
                       "pipeline rank %d: no free activation slot of %d for microbatch %d, "
                       "chunk %d",
                       p->rank, p->n_slots, op->microbatch, op->chunk);
    *slot_entry(p, op) = p->free_slots[--p->n_free];
    return MG_OK;
}

static void give_slot(mg_pipeline *p, const mg_schedule_op *op) {
    int *e = slot_entry(p, op);
    if (*e >= 0) p->free_slots[p->n_free++] = *e;
    *e = -1;
}

static void *grad_buf(const mg_pipeline *p, int k) {
    return (char *)p->grad_bufs + (size_t)k * p->numel * mg_dtype_size(p->dt);
}

/* One message: a rendezvous with the neighbour (parallel/pipeline/p2p.h). */
static mg_status transfer(mg_pipeline *p, bool is_send, int peer, void *buf) {
    void *stream = p->be->stream_handle ? p->be->stream_handle(p->be, MG_STREAM_COMPUTE) : NULL;
    mg_p2p_op m = {is_send, peer, buf, p->numel, p->dt};
    p->messages++;
    return mg_comm_batch_p2p(p->group, &m, 1, stream);
}

static mg_status run_op(mg_pipeline *p, const mg_pipeline_stage *st, const mg_schedule_op *op,
                        const mg_p2p_step *step, bool forward_only) {
    if (op->forward) {
        MG_CHECK(take_slot(p, op));
        MG_CHECK(st->forward(st->ctx, op->microbatch, op->chunk, *slot_entry(p, op)));
        /* an evaluation keeps a slot only while its output waits to be sent */
        bool last = p->rank == p->sched.pp - 1 && op->chunk == p->sched.vpp - 1;
        if (forward_only && last) give_slot(p, op);
        return MG_OK;
    }
    int slot = *slot_entry(p, op);
    if (slot < 0)
        return MG_FAIL(MG_ERR_INTERNAL, "backward of microbatch %d, chunk %d before its forward",
                       op->microbatch, op->chunk);
    MG_CHECK(st->backward(st->ctx, op->microbatch, op->chunk, slot));
    give_slot(p, op);
    if (step->grad_buf < 0) return MG_OK;
    return p->be->copy_d2d(p->be, grad_buf(p, step->grad_buf), st->dinput(st->ctx),
                           p->numel * mg_dtype_size(p->dt));
}

mg_status mg_pipeline_run(mg_pipeline *p, const mg_pipeline_stage *st, bool forward_only) {
    const mg_p2p_plan *plan = forward_only ? &p->eval : &p->train;
    for (size_t k = 0; k < (size_t)p->sched.microbatches * p->sched.vpp; k++) p->slot_of[k] = -1;
    p->n_free = p->n_slots;
    for (int k = 0; k < p->n_slots; k++) p->free_slots[k] = p->n_slots - 1 - k;
    for (int i = 0; i < plan->n_steps; i++) {
        const mg_p2p_step *step = &plan->steps[i];
        const mg_schedule_op *op = &plan->ops[step->op];
        switch (step->kind) {
        case MG_P2P_OP:
            MG_CHECK(run_op(p, st, op, step, forward_only));
            break;
        case MG_P2P_SEND:
            if (step->grad) {
                MG_CHECK(transfer(p, true, step->peer, grad_buf(p, step->grad_buf)));
            } else {
                MG_CHECK(transfer(p, true, step->peer,
                                  st->output(st->ctx, op->chunk, *slot_entry(p, op))));
                if (forward_only) give_slot(p, op);
            }
            break;
        case MG_P2P_RECV:
            if (step->grad) {
                MG_CHECK(transfer(p, false, step->peer, st->dout(st->ctx)));
            } else {
                MG_CHECK(take_slot(p, op));
                MG_CHECK(transfer(p, false, step->peer,
                                  st->input(st->ctx, op->chunk, *slot_entry(p, op))));
            }
            break;
        }
    }
    return MG_OK;
}
