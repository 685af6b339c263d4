/* Pipeline point-to-point communication as a plan: when each rank sends and receives the hidden
 * states and gradients its schedule (parallel/pipeline/schedule.h) moves between neighbouring
 * stages. Pure arithmetic, computed once at set-up; pipeline/run.c replays it.
 *
 * Neighbours (Megatron's ring): rank r receives hidden states from r-1 and sends them to r+1;
 * gradients flow the other way. Chunk c of rank r is virtual stage c*P + r: rank P-1's chunk c
 * feeds rank 0's chunk c+1. The first virtual stage (rank 0, chunk 0) receives no hidden state
 * (it embeds tokens) and sends no gradient; the last (rank P-1, chunk V-1) sends no hidden state
 * (it computes the loss) and receives no gradient.
 *
 * Why a plan. A blocking send meets its receive only when both ranks reach them (NCCL's rule:
 * a rank's communication runs in order; a send waits for the matching receive). Exchanging at
 * fixed points of every rank's order (Megatron's send_forward_recv_backward pairs) deadlocks
 * for many interleaved schedules under that rule: measured with this file's simulation, 9093 of
 * the grid's 10834 schedule checks (P 2..8, V 2..4) when every boundary between two ops batches
 * the previous op's sends with the next op's receives. So the plan is made by simulating all
 * ranks together in time order (a forward costs 1, a backward 2), as events: an op starts when
 * its rank is free and its input is there; a message moves as a rendezvous when its receiver
 * waits for it at a boundary between ops, at the sender's first boundary from then on (the later
 * of the two clocks); at equal times messages go before ops, so a sender hands over what it holds
 * before starting its next op. Every message is one rendezvous of two ranks, and every rank's
 * steps are a subsequence of one global order, so the replay cannot deadlock (the earliest
 * unfinished rendezvous always has both ranks waiting at it) and a message always lands in the
 * op it belongs to. A receive comes before the op that needs it with no op between (other
 * messages of the same boundary may). Cost in the model (tests/unit/test_pp_schedule.c): none for
 * 1F1B (the makespan is the schedule's (M + P - 1) x 3); at most 1.25x for interleaved schedules,
 * where a message can be due while its sender is inside an op (the overlapped executor of
 * run.h does not wait for that).
 *
 * Async sends (run.h's streamed executor: the messages on a stream of their own, beside the
 * compute): a send no longer holds its sender, so a message meets its receiver once it exists
 * (its op ended), the receiver waits for it, and both ranks' previous messages are done (a rank's
 * messages still go one by one, in the plan's order: the global order, and with it the freedom
 * from deadlock, stays). The sender's ops go on meanwhile, so its SEND step may come after ops
 * that followed the one that made the message (the executor has the send wait for its own op
 * only), and a gradient may wait in more buffers. In the model every schedule of the grid then
 * takes exactly the schedule's own time, interleaved ones included (test_pp_schedule.c).
 *
 * Buffers. A hidden state is sent from the slot of the forward that made it (held until that
 * forward's backward, which cannot run before the next stage received it; an evaluation frees
 * the slot once it is sent) and received into the slot of the forward that needs it. An input
 * gradient waits in one of n_grad_bufs buffers from its backward until it is sent; an output
 * gradient is received at the boundary before its backward. n_slots: the most slots held at once,
 * which equals mg_pp_schedule_activation_slots for training (a forward takes its slot right before
 * it runs); an evaluation's forwards wait for a free slot among as many. Exports: mg_p2p_step_kind,
 * mg_p2p_step, mg_p2p_plan, mg_p2p_plan_build, mg_p2p_plan_free, mg_p2p_rank_ops. Needs:
 * parallel/pipeline/schedule, core/status. */
#ifndef MG_PIPELINE_P2P_H
#define MG_PIPELINE_P2P_H

#include "parallel/pipeline/schedule.h"

typedef enum { MG_P2P_OP = 0, MG_P2P_SEND, MG_P2P_RECV } mg_p2p_step_kind;

typedef struct {
    mg_p2p_step_kind kind;
    int op;       /* the rank's op this step runs (OP), sends the result of (SEND) or receives the
                     input of (RECV) */
    int peer;     /* SEND, RECV: the pipeline rank at the other end */
    bool grad;    /* SEND, RECV: a gradient (else a hidden state) */
    int grad_buf; /* a backward's input gradient: the buffer it waits in until sent (OP of a
                     backward that sends, SEND of a gradient); else -1 */
} mg_p2p_step;

typedef struct {
    int rank, n_ops;
    mg_pp_schedule_op *ops; /* (n_ops) the rank's order: training, or the forwards alone */
    mg_p2p_step *steps;     /* (n_steps) */
    int n_steps;
    int n_slots;     /* activation slots the plan holds at most (see above) */
    int n_grad_bufs; /* input-gradient buffers */
    double makespan; /* simulated, forward 1, backward 2 (all ranks) */
} mg_p2p_plan;

/* Rank r's ops: the training order (mg_pp_schedule_ops, 2*M*V), or with forward_only its M*V
 * forwards in order. ops must hold 2*M*V; *n receives the count. */
mg_status mg_p2p_rank_ops(const mg_pp_schedule_params *s, int rank, bool forward_only,
                          mg_pp_schedule_op *ops, int *n);

/* The plan of rank `rank` (simulating every rank), with blocking or async sends (above). s must
 * pass mg_pp_schedule_check. Fails with MG_ERR_INTERNAL, naming the schedule, if the simulation
 * cannot finish (it always does for a valid schedule: tests/unit/test_pp_schedule.c checks the
 * grid). Free with mg_p2p_plan_free. */
mg_status mg_p2p_plan_build(const mg_pp_schedule_params *s, bool forward_only, bool async_sends,
                            int rank, mg_p2p_plan *out);
void mg_p2p_plan_free(mg_p2p_plan *p);

#endif
