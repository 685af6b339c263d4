#include "parallel/pipeline/p2p.h"

#include "core/status.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

mg_status mg_p2p_rank_ops(const mg_pp_schedule_params *s, int rank, bool forward_only,
                          mg_pp_schedule_op *ops, int *n) {
    MG_CHECK(mg_pp_schedule_ops(s, rank, ops));
    int total = 2 * s->microbatches * s->vpp;
    *n = total;
    if (!forward_only) return MG_OK;
    /* the forwards keep their order (virtual-microbatch ids 0..M*V-1) */
    int k = 0;
    for (int i = 0; i < total; i++)
        if (ops[i].forward) ops[k++] = ops[i];
    *n = k;
    return MG_OK;
}

/* ---- the simulation ---- */

typedef struct {
    int dest, mb, chunk; /* the receiver and its op's (microbatch, chunk) */
    bool grad;
    int op, grad_buf; /* the producing op on the sender; its gradient buffer */
    double ready;     /* when the producing op ended */
} pending;

typedef struct {
    mg_pp_schedule_op *ops;
    int n, pc;
    double clock;  /* the end of the rank's last op, or of its wait for a message */
    double sclock; /* async sends: the end of the rank's last message (they go one by one) */
    mg_p2p_step *steps;
    int n_steps;
    pending *out; /* messages made and not yet sent */
    int n_out;
    int slots, max_slots; /* slots held now, at most */
    bool have_input;      /* the next op's message arrived (and, for a forward, took its slot) */
    unsigned char *buf_used;
    int max_bufs;
} sim_rank;

typedef struct {
    const mg_pp_schedule_params *s;
    bool fwd_only;
    bool async_sends; /* a send does not hold its sender (mg_p2p_plan_build) */
    int slot_cap;     /* forward-only: the slots a rank may hold (its training count) */
    sim_rank *r;
} sim;

static bool first_virtual(const sim *S, int r, int c) {
    return r == 0 && c == 0;
}
static bool last_virtual(const sim *S, int r, int c) {
    return r == S->s->pp - 1 && c == S->s->vpp - 1;
}

static void emit(sim_rank *r, mg_p2p_step st) {
    r->steps[r->n_steps++] = st;
}

/* The pending message rank `from` holds for op (mb, chunk) of rank `to`, or -1. */
static int find_pending(const sim_rank *from, int to, bool grad, int mb, int chunk) {
    for (int k = 0; k < from->n_out; k++) {
        const pending *p = &from->out[k];
        if (p->dest == to && p->grad == grad && p->mb == mb && p->chunk == chunk) return k;
    }
    return -1;
}

/* Whether rank r's next op needs a message it does not have yet. */
static bool needs_message(const sim *S, int r) {
    const sim_rank *R = &S->r[r];
    const mg_pp_schedule_op *op = &R->ops[R->pc];
    if (R->have_input) return false;
    return op->forward ? !first_virtual(S, r, op->chunk) : !last_virtual(S, r, op->chunk);
}

/* An evaluation's forward that must wait for a slot (it takes one when its input arrives). */
static bool slot_blocked(const sim *S, int r) {
    const sim_rank *R = &S->r[r];
    return R->ops[R->pc].forward && S->fwd_only && !R->have_input && R->slots >= S->slot_cap;
}

static int take_buf(sim_rank *R) {
    int b = 0;
    while (R->buf_used[b]) b++;
    R->buf_used[b] = 1;
    if (b + 1 > R->max_bufs) R->max_bufs = b + 1;
    return b;
}

static void take_slot(sim_rank *R) {
    if (++R->slots > R->max_slots) R->max_slots = R->slots;
}

/* When the message pending at src (index k) can meet rank r, which waits for it from r's clock:
 * with blocking sends, when both ranks are at a boundary between ops (the later clock); with
 * async sends, once the message exists and both ranks' previous messages are done. */
static double meet_time(const sim *S, int r, int src, int k) {
    const sim_rank *R = &S->r[r], *Q = &S->r[src];
    if (!S->async_sends) return fmax(R->clock, Q->clock);
    return fmax(fmax(R->clock, Q->out[k].ready), fmax(R->sclock, Q->sclock));
}

/* The rendezvous of rank r's next op's message, pending at src (index k), at meet_time (the
 * sender's clock moves only with blocking sends). A forward's input takes its slot now. */
static void rendezvous(sim *S, int r, int src, int k) {
    sim_rank *R = &S->r[r], *Q = &S->r[src];
    double t = meet_time(S, r, src, k);
    pending m = Q->out[k];
    Q->out[k] = Q->out[--Q->n_out];
    R->clock = R->sclock = Q->sclock = t;
    if (!S->async_sends) Q->clock = t;
    emit(Q, (mg_p2p_step){MG_P2P_SEND, m.op, r, m.grad, m.grad ? m.grad_buf : -1});
    emit(R, (mg_p2p_step){MG_P2P_RECV, R->pc, src, m.grad, -1});
    if (m.grad) Q->buf_used[m.grad_buf] = 0;
    if (!m.grad && S->fwd_only) Q->slots--;
    R->have_input = true;
    if (R->ops[R->pc].forward) take_slot(R);
}

/* Runs rank r's next op (its input is there). */
static void run(sim *S, int r) {
    sim_rank *R = &S->r[r];
    int P = S->s->pp;
    const mg_pp_schedule_op *op = &R->ops[R->pc];
    int grad_buf = -1;
    bool sends = op->forward ? !last_virtual(S, r, op->chunk) : !first_virtual(S, r, op->chunk);
    if (op->forward) {
        if (!R->have_input) take_slot(R); /* the first virtual stage: no message brought one */
    } else {
        R->slots--;
    }
    if (sends && !op->forward) grad_buf = take_buf(R);
    emit(R, (mg_p2p_step){MG_P2P_OP, R->pc, -1, false, grad_buf});
    R->clock += op->forward ? 1.0 : 2.0;
    if (sends) {
        int dest = op->forward ? (r + 1) % P : (r - 1 + P) % P;
        int chunk = op->chunk + (op->forward ? (r == P - 1) : -(r == 0));
        R->out[R->n_out++] =
            (pending){dest, op->microbatch, chunk, !op->forward, R->pc, grad_buf, R->clock};
    } else if (op->forward && S->fwd_only) {
        R->slots--; /* the loss: nothing to keep */
    }
    R->have_input = false;
    R->pc++;
}

static void sim_free(sim *S) {
    for (int r = 0; S->r && r < S->s->pp; r++) {
        free(S->r[r].ops);
        free(S->r[r].steps);
        free(S->r[r].out);
        free(S->r[r].buf_used);
    }
    free(S->r);
}

static mg_status sim_run(sim *S) {
    const mg_pp_schedule_params *s = S->s;
    int P = s->pp;
    size_t total = 2 * (size_t)s->microbatches * (size_t)s->vpp;
    S->r = calloc((size_t)P, sizeof *S->r);
    if (!S->r) return MG_FAIL(MG_ERR_NOMEM, "out of memory");
    for (int r = 0; r < P; r++) {
        sim_rank *R = &S->r[r];
        R->ops = malloc(total * sizeof *R->ops);
        R->steps = malloc(3 * total * sizeof *R->steps);
        R->out = malloc(total * sizeof *R->out);
        R->buf_used = calloc(total + 1, 1);
        if (!R->ops || !R->steps || !R->out || !R->buf_used)
            return MG_FAIL(MG_ERR_NOMEM, "out of memory");
        MG_CHECK(mg_p2p_rank_ops(s, r, S->fwd_only, R->ops, &R->n));
    }
    if (S->fwd_only) { /* the training count of the rank with the fewest */
        S->slot_cap = 1 << 30;
        for (int r = 0; r < P; r++) {
            int n;
            MG_CHECK(mg_pp_schedule_activation_slots(s, r, &n));
            if (n < S->slot_cap) S->slot_cap = n;
        }
    }
    /* Events in time order: a rendezvous (a rank waits at a boundary for a message its
     * neighbour holds; both are at boundaries, so it happens at the later clock) or an op (a
     * rank whose input is there starts at its clock). At equal times the messages go first, so a
     * message made earlier is sent at the first boundary where its receiver waits, before the
     * sender starts another op: stages do not wait on each other's next op. */
    for (;;) {
        int best = -1, best_src = -1, best_k = -1, left = 0;
        double best_t = 0;
        bool best_msg = false;
        for (int r = 0; r < P; r++) {
            sim_rank *R = &S->r[r];
            if (R->pc >= R->n) continue;
            left++;
            if (slot_blocked(S, r)) continue;
            const mg_pp_schedule_op *op = &R->ops[R->pc];
            int src = -1, k = -1;
            double t = R->clock;
            bool msg = needs_message(S, r);
            if (msg) {
                src = op->forward ? (r - 1 + P) % P : (r + 1) % P;
                k = find_pending(&S->r[src], r, !op->forward, op->microbatch, op->chunk);
                if (k < 0) continue;
                t = meet_time(S, r, src, k);
            }
            if (best < 0 || t < best_t || (t == best_t && msg && !best_msg)) {
                best = r;
                best_src = src;
                best_k = k;
                best_t = t;
                best_msg = msg;
            }
        }
        if (!left) break;
        if (best < 0)
            return MG_FAIL(MG_ERR_INTERNAL,
                           "pipeline p2p plan (P %d, V %d, M %d, G %d): the ranks wait for each "
                           "other",
                           s->pp, s->vpp, s->microbatches, mg_pp_schedule_group(s));
        if (best_msg)
            rendezvous(S, best, best_src, best_k);
        else
            run(S, best);
    }
    for (int r = 0; r < P; r++)
        if (S->r[r].n_out)
            return MG_FAIL(MG_ERR_INTERNAL, "pipeline p2p plan: rank %d keeps %d unsent messages",
                           r, S->r[r].n_out);
    return MG_OK;
}

mg_status mg_p2p_plan_build(const mg_pp_schedule_params *s, bool forward_only, bool async_sends,
                            int rank, mg_p2p_plan *out) {
    memset(out, 0, sizeof *out);
    MG_CHECK(mg_pp_schedule_check(s));
    if (rank < 0 || rank >= s->pp)
        return MG_FAIL(MG_ERR_INTERNAL, "pipeline rank %d of %d", rank, s->pp);
    sim S = {.s = s, .fwd_only = forward_only, .async_sends = async_sends};
    mg_status st = sim_run(&S);
    if (st == MG_OK) {
        sim_rank *R = &S.r[rank];
        out->rank = rank;
        out->n_ops = R->n;
        out->ops = R->ops;
        out->steps = R->steps;
        out->n_steps = R->n_steps;
        out->n_slots = R->max_slots;
        out->n_grad_bufs = R->max_bufs;
        for (int r = 0; r < s->pp; r++)
            if (S.r[r].clock > out->makespan) out->makespan = S.r[r].clock;
        R->ops = NULL; /* now the plan's */
        R->steps = NULL;
    }
    sim_free(&S);
    return st;
}

void mg_p2p_plan_free(mg_p2p_plan *p) {
    free(p->ops);
    free(p->steps);
    memset(p, 0, sizeof *p);
}
