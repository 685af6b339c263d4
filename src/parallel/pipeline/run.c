#include "parallel/pipeline/run.h"
#include "core/clock.h"
#include "core/env.h"

#include "core/status.h"

#include <stdlib.h>
#include <string.h>
#include <time.h>

mg_pipe_comm mg_pipeline_comm(const mg_pp_schedule_params *s, bool overlap, bool tagged,
                              bool streams) {
    if (!overlap || s->pp == 1) return MG_PIPE_IN_ORDER;
    if (mg_env_int("MG_TEST_PP_STREAMED", 0) == 1) return MG_PIPE_STREAMED; /* run.h: a hook */
    return tagged ? MG_PIPE_TAGGED : streams && s->vpp > 1 ? MG_PIPE_STREAMED : MG_PIPE_IN_ORDER;
}

/* The communication plans of a training and of an evaluation pass of rank `rank` (async sends
 * when STREAMED: p2p.h), the slots the schedule holds and the gradient buffers the busier plan
 * needs. */
static mg_status plan_passes(const mg_pp_schedule_params *s, int rank, mg_pipe_comm comm,
                             mg_p2p_plan *train, mg_p2p_plan *eval, int *n_slots,
                             int *n_grad_bufs) {
    bool async = comm == MG_PIPE_STREAMED;
    MG_CHECK(mg_p2p_plan_build(s, false, async, rank, train));
    MG_CHECK(mg_p2p_plan_build(s, true, async, rank, eval));
    MG_CHECK(mg_pp_schedule_activation_slots(s, rank, n_slots));
    if (train->n_slots > *n_slots || eval->n_slots > *n_slots)
        return MG_FAIL(MG_ERR_INTERNAL, "pipeline plan holds %d slots, the schedule %d",
                       train->n_slots, *n_slots);
    *n_grad_bufs = train->n_grad_bufs > eval->n_grad_bufs ? train->n_grad_bufs : eval->n_grad_bufs;
    return MG_OK;
}

mg_status mg_pipeline_init(mg_pipeline *p, const mg_pp_schedule_params *s, int rank, mg_comm *group,
                           mg_backend *be, size_t numel, mg_dtype dt, bool overlap) {
    memset(p, 0, sizeof *p);
    MG_CHECK(mg_pp_schedule_check(s));
    if (s->pp > 1 ? !group || mg_comm_size(group) != s->pp || mg_comm_rank(group) != rank
                  : rank != 0)
        return MG_FAIL(MG_ERR_INTERNAL, "pipeline rank %d of %d with a group of %d", rank, s->pp,
                       group ? mg_comm_size(group) : 1);
    p->schedule = *s;
    p->rank = rank;
    p->group = s->pp > 1 ? group : NULL;
    p->be = be;
    p->numel = numel;
    p->dt = dt;
    p->comm = mg_pipeline_comm(s, overlap && p->group, p->group && mg_comm_p2p_async(p->group),
                               be && be->stream_handle && be->stream_wait && be->stream_mark &&
                                   be->stream_wait_mark);
    mg_status st = plan_passes(s, rank, p->comm, &p->train, &p->eval, &p->n_slots, &p->n_grad_bufs);
    size_t total = (size_t)s->microbatches * (size_t)s->vpp;
    if (st == MG_OK) {
        p->slot_of = malloc(total * sizeof *p->slot_of);
        p->free_slots = malloc((size_t)p->n_slots * sizeof *p->free_slots);
        p->slot_send = malloc((size_t)p->n_slots * sizeof *p->slot_send);
        p->buf_send = malloc(((size_t)p->n_grad_bufs + 1) * sizeof *p->buf_send);
        if (!p->slot_of || !p->free_slots || !p->slot_send || !p->buf_send)
            st = MG_FAIL(MG_ERR_NOMEM, "out of memory for a schedule of %zu forwards", total);
    }
    if (st != MG_OK) mg_pipeline_free(p);
    return st;
}

mg_status mg_pipeline_sizes(const mg_pp_schedule_params *s, int rank, size_t numel, mg_dtype dt,
                            mg_pipe_comm comm, int *n_slots, size_t *buffer_bytes) {
    MG_CHECK(mg_pp_schedule_check(s));
    mg_p2p_plan train = {0}, eval = {0};
    int n_grad_bufs = 0;
    mg_status st = plan_passes(s, rank, comm, &train, &eval, n_slots, &n_grad_bufs);
    mg_p2p_plan_free(&train);
    mg_p2p_plan_free(&eval);
    *buffer_bytes = (size_t)mg_pipeline_buffer_count(n_grad_bufs, comm) * numel * mg_dtype_size(dt);
    return st;
}

static size_t message_bytes(const mg_pipeline *p) {
    return p->numel * mg_dtype_size(p->dt);
}

int mg_pipeline_buffer_count(int n_grad_bufs, mg_pipe_comm comm) {
    return n_grad_bufs + (comm == MG_PIPE_TAGGED ? 1 : 0);
}

size_t mg_pipeline_buffer_bytes(const mg_pipeline *p) {
    return (size_t)mg_pipeline_buffer_count(p->n_grad_bufs, p->comm) * message_bytes(p);
}

static void *grad_buf(const mg_pipeline *p, int k) {
    return (char *)p->grad_bufs + (size_t)k * message_bytes(p);
}

void mg_pipeline_bind(mg_pipeline *p, void *buffers) {
    p->grad_bufs = buffers;
    p->landing = p->comm == MG_PIPE_TAGGED ? grad_buf(p, p->n_grad_bufs) : NULL;
}

void mg_pipeline_timing_reset(mg_pipeline *p) {
    p->busy_s = p->total_s = 0;
    p->runs = 0;
}

void mg_pipeline_free(mg_pipeline *p) {
    mg_p2p_plan_free(&p->train);
    mg_p2p_plan_free(&p->eval);
    free(p->slot_of);
    free(p->free_slots);
    free(p->slot_send);
    free(p->buf_send);
    memset(p, 0, sizeof *p);
}

/* ---- slots ---- */

static int *slot_entry(mg_pipeline *p, const mg_pp_schedule_op *op) {
    return &p->slot_of[(size_t)op->microbatch * p->schedule.vpp + op->chunk];
}

/* The stream marks of a streamed run: the end of message `seq` on the pipeline stream, and the
 * end of op `op` on the compute stream. Rings: a slot recorded again belongs to a later message
 * (op), and waiting for that one waits for this one too. */
static int message_mark(int seq) {
    return MG_STREAM_MARKS_DDP + seq % MG_STREAM_MARKS_PP;
}
static int op_mark(int op) {
    return MG_STREAM_MARKS_DDP + MG_STREAM_MARKS_PP + op % MG_STREAM_MARKS_PP_OPS;
}

/* Streamed: the compute stream's later work waits until message seq of this run completed (and
 * every message before it: the pipeline stream runs them in order). */
static mg_status wait_message(mg_pipeline *p, int seq) {
    if (seq < 0 || seq <= p->waited) return MG_OK;
    if (p->be->stream_wait_mark) /* else the backend's ops complete in call order */
        MG_CHECK(p->be->stream_wait_mark(p->be, MG_STREAM_COMPUTE, message_mark(seq)));
    p->waited = seq;
    return MG_OK;
}

/* A send from a buffer in flight completes before the buffer is written again (streamed: the
 * compute stream waits for it; t holds the message's number). */
static mg_status settle(mg_pipeline *p, mg_p2p_ticket *t) {
    if (*t < 0) return MG_OK;
    mg_p2p_ticket k = *t;
    *t = -1;
    return p->comm == MG_PIPE_STREAMED ? wait_message(p, k) : mg_comm_p2p_wait(p->group, k);
}

static mg_status take_slot(mg_pipeline *p, const mg_pp_schedule_op *op) {
    int *e = slot_entry(p, op);
    if (*e < 0) { /* else taken by its receive */
        if (p->n_free == 0)
            return MG_FAIL(MG_ERR_INTERNAL,
                           "pipeline rank %d: no free activation slot of %d for microbatch %d, "
                           "chunk %d",
                           p->rank, p->n_slots, op->microbatch, op->chunk);
        *e = p->free_slots[--p->n_free];
    }
    return settle(p, &p->slot_send[*e]);
}

static void give_slot(mg_pipeline *p, const mg_pp_schedule_op *op) {
    int *e = slot_entry(p, op);
    if (*e >= 0) p->free_slots[p->n_free++] = *e;
    *e = -1;
}

/* ---- one op ---- */

static bool is_last_stage(const mg_pipeline *p, const mg_pp_schedule_op *op) {
    return p->rank == p->schedule.pp - 1 && op->chunk == p->schedule.vpp - 1;
}
static bool is_first_stage(const mg_pipeline *p, const mg_pp_schedule_op *op) {
    return p->rank == 0 && op->chunk == 0;
}

/* Runs op k of the plan in its slot (a forward takes one, a backward frees its forward's); a
 * backward whose input gradient is sent leaves it in gradient buffer grad_buf. Timed between
 * timer points 1 + 2k and 2 + 2k (mg_pipeline_run), or by the host clock around synchronisations
 * where those do not fit. */
static mg_status run_op(mg_pipeline *p, const mg_pipeline_stage *st, const mg_p2p_plan *plan, int k,
                        int grad_buf_k, bool forward_only) {
    const mg_pp_schedule_op *op = &plan->ops[k];
    /* the bubble is the training step's */
    bool timing = p->timed && !forward_only && !p->on_timer;
    double t0 = 0;
    if (timing) {
        if (p->be->stream_handle) MG_CHECK(p->be->synchronize(p->be));
        t0 = mg_clock_seconds();
    }
    if (p->on_timer) MG_CHECK(p->be->timer_mark(p->be, 1 + 2 * k));
    if (op->forward) {
        MG_CHECK(take_slot(p, op));
        MG_CHECK(st->forward(st->ctx, op->microbatch, op->chunk, *slot_entry(p, op)));
        /* an evaluation keeps a slot only while its output waits to be sent */
        if (forward_only && is_last_stage(p, op)) give_slot(p, op);
    } else {
        int slot = *slot_entry(p, op);
        if (slot < 0)
            return MG_FAIL(MG_ERR_INTERNAL,
                           "backward of microbatch %d, chunk %d before its forward", op->microbatch,
                           op->chunk);
        MG_CHECK(settle(p, &p->slot_send[slot]));
        MG_CHECK(st->backward(st->ctx, op->microbatch, op->chunk, slot));
        give_slot(p, op);
        if (grad_buf_k >= 0) {
            MG_CHECK(settle(p, &p->buf_send[grad_buf_k]));
            MG_CHECK(p->be->copy_d2d(p->be, grad_buf(p, grad_buf_k), st->dinput(st->ctx),
                                     message_bytes(p)));
        }
    }
    if (p->on_timer) MG_CHECK(p->be->timer_mark(p->be, 2 + 2 * k));
    if (timing) {
        if (p->be->stream_handle) MG_CHECK(p->be->synchronize(p->be));
        p->busy_s += mg_clock_seconds() - t0;
    }
    return MG_OK;
}

/* ---- in plan order ---- */

/* The messages between two ops of the plan go as one batch (Megatron's batched
 * send_forward_recv_backward): posted together, complete together. That only relaxes the plan's
 * one-by-one rendezvous (each message still completes before the next op), so it keeps its
 * freedom from deadlock, and a send and a receive with different neighbours proceed at once. */
enum { MAX_BATCH = 8 };

static mg_status flush(mg_pipeline *p, const mg_pipeline_stage *st, const mg_p2p_plan *plan,
                       const int *idx, int n, bool forward_only) {
    if (n == 0) return MG_OK;
    mg_p2p_op m[MAX_BATCH];
    for (int i = 0; i < n; i++) {
        const mg_p2p_step *step = &plan->steps[idx[i]];
        const mg_pp_schedule_op *op = &plan->ops[step->op];
        void *buf;
        if (step->kind == MG_P2P_SEND) {
            buf = step->grad ? grad_buf(p, step->grad_buf)
                             : st->output(st->ctx, op->chunk, *slot_entry(p, op));
        } else if (step->grad) {
            buf = st->dout(st->ctx);
        } else {
            MG_CHECK(take_slot(p, op));
            buf = st->input(st->ctx, op->chunk, *slot_entry(p, op));
        }
        m[i] = (mg_p2p_op){step->kind == MG_P2P_SEND, step->peer, buf, p->numel, p->dt};
    }
    void *stream = p->be->stream_handle ? p->be->stream_handle(p->be, MG_STREAM_COMPUTE) : NULL;
    p->messages += n;
    MG_CHECK(mg_comm_batch_p2p(p->group, m, n, stream));
    for (int i = 0; i < n && forward_only; i++) { /* an evaluation's sent output frees its slot */
        const mg_p2p_step *step = &plan->steps[idx[i]];
        if (step->kind == MG_P2P_SEND && !step->grad) give_slot(p, &plan->ops[step->op]);
    }
    return MG_OK;
}

static mg_status run_in_order(mg_pipeline *p, const mg_pipeline_stage *st, const mg_p2p_plan *plan,
                              bool forward_only) {
    int batch[MAX_BATCH], n = 0;
    for (int i = 0; i < plan->n_steps; i++) {
        const mg_p2p_step *step = &plan->steps[i];
        if (step->kind != MG_P2P_OP) {
            /* an evaluation's slot is free only once its send completed: a receive that may take
             * it goes in the next batch */
            bool after_free = false;
            for (int k = 0; k < n && forward_only && step->kind == MG_P2P_RECV && !step->grad; k++)
                after_free |=
                    plan->steps[batch[k]].kind == MG_P2P_SEND && !plan->steps[batch[k]].grad;
            if (n == MAX_BATCH || after_free) {
                MG_CHECK(flush(p, st, plan, batch, n, forward_only));
                n = 0;
            }
            batch[n++] = i;
            continue;
        }
        MG_CHECK(flush(p, st, plan, batch, n, forward_only));
        n = 0;
        MG_CHECK(run_op(p, st, plan, step->op, step->grad_buf, forward_only));
    }
    return flush(p, st, plan, batch, n, forward_only);
}

/* ---- overlapped ---- */

/* A message's tag: what it carries, named by the receiving op (microbatch, chunk) and whether it
 * is a gradient; both ends compute it. Wraps at MG_P2P_TAGS: equal tags are then thousands of
 * messages apart, and those match in order. */
static int message_tag(const mg_pipeline *p, int mb, int chunk, bool grad) {
    return (int)((((int64_t)mb * p->schedule.vpp + chunk) * 2 + grad) % MG_P2P_TAGS);
}

/* The message op receives before it runs, if any: *peer and *grad. */
static bool op_receives(const mg_pipeline *p, const mg_pp_schedule_op *op, int *peer, bool *grad) {
    int P = p->schedule.pp;
    *grad = !op->forward;
    *peer = op->forward ? (p->rank - 1 + P) % P : (p->rank + 1) % P;
    return op->forward ? !is_first_stage(p, op) : !is_last_stage(p, op);
}

/* Posts the receive of op's input into the landing buffer. */
static mg_status post_receive(mg_pipeline *p, const mg_pp_schedule_op *op, mg_p2p_ticket *t) {
    int peer;
    bool grad;
    *t = -1;
    if (!op_receives(p, op, &peer, &grad)) return MG_OK;
    mg_p2p_op m = {false, peer, p->landing, p->numel, p->dt};
    p->messages++;
    return mg_comm_p2p_post(p->group, &m, message_tag(p, op->microbatch, op->chunk, grad), t);
}

/* Completes op's receive and moves the message where the op reads it. */
static mg_status finish_receive(mg_pipeline *p, const mg_pipeline_stage *st,
                                const mg_pp_schedule_op *op, mg_p2p_ticket t) {
    if (t < 0) return MG_OK;
    MG_CHECK(mg_comm_p2p_wait(p->group, t));
    void *dst;
    if (op->forward) {
        MG_CHECK(take_slot(p, op));
        dst = st->input(st->ctx, op->chunk, *slot_entry(p, op));
    } else {
        dst = st->dout(st->ctx);
    }
    return p->be->copy_d2d(p->be, dst, p->landing, message_bytes(p));
}

/* Posts the send of what op just made: a hidden state from its slot, or its input gradient
 * from gradient buffer k; the ticket stays with that buffer. */
static mg_status post_send(mg_pipeline *p, const mg_pipeline_stage *st, const mg_pp_schedule_op *op,
                           int k) {
    int P = p->schedule.pp;
    mg_p2p_op m = {true, 0, NULL, p->numel, p->dt};
    mg_p2p_ticket *t;
    int tag;
    if (op->forward) {
        if (is_last_stage(p, op)) return MG_OK;
        int slot = *slot_entry(p, op);
        m.peer = (p->rank + 1) % P;
        m.buf = st->output(st->ctx, op->chunk, slot);
        tag = message_tag(p, op->microbatch, op->chunk + (p->rank == P - 1), false);
        t = &p->slot_send[slot];
    } else {
        if (k < 0) return MG_OK; /* the first stage's backward sends nothing */
        m.peer = (p->rank - 1 + P) % P;
        m.buf = grad_buf(p, k);
        tag = message_tag(p, op->microbatch, op->chunk - (p->rank == 0), true);
        t = &p->buf_send[k];
    }
    p->messages++;
    return mg_comm_p2p_post(p->group, &m, tag, t);
}

static mg_status run_overlapped(mg_pipeline *p, const mg_pipeline_stage *st,
                                const mg_p2p_plan *plan, bool forward_only) {
    /* the plan's OP steps run plan->ops in order, so the op after op k is ops[k + 1] */
    mg_p2p_ticket pending = -1;
    if (plan->n_ops > 0) MG_CHECK(post_receive(p, &plan->ops[0], &pending));
    for (int i = 0; i < plan->n_steps; i++) {
        const mg_p2p_step *step = &plan->steps[i];
        const mg_pp_schedule_op *op = &plan->ops[step->op];
        if (step->kind == MG_P2P_SEND) {
            /* posted when made; complete by the plan's rendezvous at the latest (see run.h); an
             * evaluation's slot is free now */
            MG_CHECK(settle(p, step->grad ? &p->buf_send[step->grad_buf]
                                          : &p->slot_send[*slot_entry(p, op)]));
            if (!step->grad && forward_only) give_slot(p, op);
            continue;
        }
        if (step->kind != MG_P2P_OP) continue; /* receives: posted one op ahead */
        MG_CHECK(finish_receive(p, st, op, pending));
        pending = -1; /* the next op's input, on its way */
        if (step->op + 1 < plan->n_ops) MG_CHECK(post_receive(p, op + 1, &pending));
        MG_CHECK(run_op(p, st, plan, step->op, step->grad_buf, forward_only));
        MG_CHECK(post_send(p, st, op, step->grad_buf));
    }
    /* every send completes before the run returns: the buffers are the caller's again */
    for (int s = 0; s < p->n_slots; s++) MG_CHECK(settle(p, &p->slot_send[s]));
    for (int k = 0; k < p->n_grad_bufs; k++) MG_CHECK(settle(p, &p->buf_send[k]));
    return MG_OK;
}

/* ---- streamed ---- */

/* Enqueues one message on the pipeline stream and marks its end (*seq: its number): a send after
 * the op that made its data (the plan may have put later ops before it: p2p.h's async sends), a
 * receive after the compute stream's work so far (its buffer is no longer read). Were the op's
 * mark recorded again by a later op, that one is also before this step: the wait is longer, never
 * a cycle. */
static mg_status post_streamed(mg_pipeline *p, const mg_p2p_step *step, void *buf, int *seq) {
    mg_backend *be = p->be;
    bool streams = be->stream_handle != NULL; /* else ops complete in call order (a test hook) */
    if (streams)
        MG_CHECK(step->kind == MG_P2P_SEND
                     ? be->stream_wait_mark(be, MG_STREAM_PP, op_mark(step->op))
                     : be->stream_wait(be, MG_STREAM_PP, MG_STREAM_COMPUTE));
    mg_p2p_op m = {step->kind == MG_P2P_SEND, step->peer, buf, p->numel, p->dt};
    p->messages++;
    MG_CHECK(
        mg_comm_batch_p2p(p->group, &m, 1, streams ? be->stream_handle(be, MG_STREAM_PP) : NULL));
    *seq = p->posted++;
    return streams ? be->stream_mark(be, MG_STREAM_PP, message_mark(*seq)) : MG_OK;
}

/* The plan's messages (made with async sends) one by one in its order, on the pipeline stream;
 * the compute stream waits only for the receive of the op it runs next (the plan puts it right
 * before) and, before a buffer is written again, for the send that reads it. So a send whose
 * receiver is inside an op holds the pipeline stream, not the sender's next op. */
static mg_status run_streamed(mg_pipeline *p, const mg_pipeline_stage *st, const mg_p2p_plan *plan,
                              bool forward_only) {
    int input = -1; /* the newest receive: the next op's input */
    p->posted = 0;
    p->waited = -1;
    for (int i = 0; i < plan->n_steps; i++) {
        const mg_p2p_step *step = &plan->steps[i];
        const mg_pp_schedule_op *op = &plan->ops[step->op];
        if (step->kind == MG_P2P_OP) {
            MG_CHECK(wait_message(p, input));
            MG_CHECK(run_op(p, st, plan, step->op, step->grad_buf, forward_only));
            if (p->be->stream_mark)
                MG_CHECK(p->be->stream_mark(p->be, MG_STREAM_COMPUTE, op_mark(step->op)));
            continue;
        }
        void *buf;
        int seq;
        if (step->kind == MG_P2P_SEND) {
            buf = step->grad ? grad_buf(p, step->grad_buf)
                             : st->output(st->ctx, op->chunk, *slot_entry(p, op));
            MG_CHECK(post_streamed(p, step, buf, &seq));
            if (step->grad) {
                p->buf_send[step->grad_buf] = seq;
            } else {
                p->slot_send[*slot_entry(p, op)] = seq;
                if (forward_only) give_slot(p, op); /* reused after a wait for this send */
            }
        } else {
            if (!step->grad) MG_CHECK(take_slot(p, op));
            buf =
                step->grad ? st->dout(st->ctx) : st->input(st->ctx, op->chunk, *slot_entry(p, op));
            MG_CHECK(post_streamed(p, step, buf, &input));
        }
    }
    /* every message completes before the compute stream goes on: the buffers are the caller's */
    return p->be->stream_wait ? p->be->stream_wait(p->be, MG_STREAM_COMPUTE, MG_STREAM_PP) : MG_OK;
}

mg_status mg_pipeline_run(mg_pipeline *p, const mg_pipeline_stage *st, bool forward_only) {
    const mg_p2p_plan *plan = forward_only ? &p->eval : &p->train;
    for (size_t k = 0; k < (size_t)p->schedule.microbatches * p->schedule.vpp; k++)
        p->slot_of[k] = -1;
    p->n_free = p->n_slots;
    for (int k = 0; k < p->n_slots; k++) {
        p->free_slots[k] = p->n_slots - 1 - k;
        p->slot_send[k] = -1;
    }
    for (int k = 0; k <= p->n_grad_bufs; k++) p->buf_send[k] = -1;
    bool timing = p->timed && !forward_only;
    /* the bubble from the backend's timer points around each op (their gaps are the waits): no
     * host sync at every op, which would also hold a streamed run's sends; the host clock around
     * synchronisations where the points do not fit */
    p->on_timer = timing && p->be->timer_mark && p->be->timer_seconds &&
                  2 * plan->n_ops + 1 <= MG_TIMER_POINTS;
    double t0 = 0;
    if (p->on_timer) {
        MG_CHECK(p->be->timer_mark(p->be, 0));
    } else if (timing) {
        if (p->be->stream_handle) MG_CHECK(p->be->synchronize(p->be));
        t0 = mg_clock_seconds();
    }
    switch (p->comm) {
    case MG_PIPE_TAGGED:
        MG_CHECK(run_overlapped(p, st, plan, forward_only));
        break;
    case MG_PIPE_STREAMED:
        MG_CHECK(run_streamed(p, st, plan, forward_only));
        break;
    default:
        MG_CHECK(run_in_order(p, st, plan, forward_only));
    }
    if (p->on_timer) {
        double total = 0, s = 0;
        for (int k = 0; k < plan->n_ops; k++) {
            MG_CHECK(p->be->timer_seconds(p->be, 1 + 2 * k, 2 + 2 * k, &s));
            p->busy_s += s;
        }
        MG_CHECK(p->be->timer_seconds(p->be, 0, 2 * plan->n_ops, &total));
        p->total_s += total;
        p->runs++;
        p->on_timer = false;
    } else if (timing) {
        if (p->be->stream_handle) MG_CHECK(p->be->synchronize(p->be));
        p->total_s += mg_clock_seconds() - t0;
        p->runs++;
    }
    return MG_OK;
}
