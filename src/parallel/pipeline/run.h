/* The pipeline executor (Megatron's forward_backward_func): walks this rank's order (one walker
 * for every schedule: no pipelining, 1F1B, interleaved 1F1B, and the forwards alone for an
 * evaluation), hands each op an activation slot, and moves hidden states and gradients between
 * neighbouring stages as the plan of parallel/pipeline/p2p.h says. What an op computes is the
 * caller's (the trainer's model chunks), through mg_pipeline_stage.
 *
 * Slots: a forward takes a free slot and the backward of the same (microbatch, chunk) frees it
 * (an evaluation's forward frees its slot once its output is sent), so at most
 * mg_pp_schedule_activation_slots slots are held: activation memory set by the pipeline depth, not
 * by the number of microbatches (the slot count comes from simulating the schedule's order). A
 * received hidden state lands directly in the slot of the forward that needs it; an input gradient
 * waits in a buffer of its own until its receiver asks (the plan says how many such buffers there
 * are).
 *
 * Communication, three ways. In plan order (the plan's steps one by one, each message a
 * rendezvous): on the backend's compute stream, in order with compute (NCCL group calls), or MPI
 * Isend/Irecv completing in the call; with --no-overlap-p2p-communication, and on device buffers
 * of a backend without streams. Overlapped (Megatron's
 * default --overlap-p2p-communication, on groups with non-blocking messages: MPI): every send is
 * posted as soon as its op made the data, and the receive of the next op's input before the
 * current op runs (into a landing buffer; completed right before the next op and copied into its
 * slot or d(output)), so a message can move while both ranks compute. Each message is complete
 * by the plan's rendezvous at the latest: where the transport moves a large message only while
 * both ranks are inside MPI (Open MPI without cross-memory attach), it moves there, as in plan
 * order. Messages are tagged with what they carry, so they match whatever the posting order.
 * Posting earlier and waiting no later than the plan keeps its freedom from deadlock (every wait
 * is for a message whose rendezvous the plan puts at or before that point). bench/NOTES.md has
 * the CPU measurements against plan order, with and without cross-memory attach.
 * Streamed (the same flag, for an interleaved schedule, on a backend with streams whose group
 * has no non-blocking messages: NCCL, which matches a rank's messages by their order, not by
 * tags): the plan's messages (made with async sends, p2p.h) in its
 * order, one NCCL call each, on a stream of their own (MG_STREAM_PP), each after the compute work
 * enqueued before it. The compute stream waits only for the receive that the next op reads (the
 * plan puts it right before that op) and, before a buffer is written again, for the send that
 * reads it (stream marks in a ring). A send whose receiver is still inside an op then holds the
 * pipeline stream, not the sender's next op: the plan's cost where a message falls due while its
 * sender computes (p2p.h: up to 1.25x for interleaved schedules) goes. The pipeline stream keeps
 * the plan's order, so the plan's freedom from deadlock holds even if NCCL serialises a rank's
 * messages (every compute wait is for a message the plan puts before that point), and the host
 * never waits. MG_TEST_PP_STREAMED=1 (a test hook) makes every overlapped pipeline streamed, also
 * on MPI groups, whose messages then match in posting order as NCCL's do (one tag), and on
 * backends without streams, whose ops complete in call order: the CPU tests run this executor
 * and its plan (tests/dist/test_train_pp.c).
 * Shapes are fixed at set-up: every message is `numel` elements of `dt` (the micro-batch's
 * residual rows x hidden). A peer that fails or stalls ends the wait with MG_ERR_COMM naming it
 * (comm/comm.h): nobody hangs on a pending receive.
 *
 * Timing (the bubble): with `timed`, each run adds the seconds spent inside the stage's ops
 * (busy) and the whole run's seconds; the rest is time waiting for neighbours. The ops are timed
 * by the backend's timer points (timer_mark: on the compute stream on a device, the host clock on
 * the CPU), read once at the run's end, so the host is not held at every op (which would also
 * hold a streamed run's sends); a run of more ops than the points hold synchronises around every
 * op instead (a measurement mode either way: the caller turns it on). bubble = (total - busy) /
 * busy, comparable to Megatron's (P-1)/(m V).
 * Exports: mg_pipeline_stage, mg_pipeline, mg_pipeline_*. Needs: parallel/pipeline/schedule,
 * parallel/pipeline/p2p, comm, backend. */
#ifndef MG_PIPELINE_RUN_H
#define MG_PIPELINE_RUN_H

#include "backend/backend.h"
#include "comm/comm.h"
#include "parallel/pipeline/p2p.h"
#include "parallel/pipeline/schedule.h"

/* How a pipeline rank's messages move (above). */
typedef enum {
    MG_PIPE_IN_ORDER = 0, /* the plan's steps one by one, on the compute stream */
    MG_PIPE_TAGGED,       /* overlapped: non-blocking tagged messages (MPI) */
    MG_PIPE_STREAMED      /* overlapped: the plan's messages on the pipeline stream (NCCL) */
} mg_pipe_comm;

/* The way for schedule s with --overlap-p2p-communication (`overlap`) on a group with
 * non-blocking tagged messages (`tagged`) and a backend with streams (`streams`): TAGGED, else
 * STREAMED for interleaved schedules, else (and without overlap) IN_ORDER. 1F1B stays in order
 * on streams: its plan costs nothing there (p2p.h), and measured on 2 H200s (GPT-2 1.5B, 32
 * microbatches) the stream of its own was 6% slower (bench/NOTES.md, 2026-11-30). */
mg_pipe_comm mg_pipeline_comm(const mg_pp_schedule_params *s, bool overlap, bool tagged,
                              bool streams);

/* The caller's side of an op. forward: (microbatch, chunk) in slot, its input already received
 * into input(chunk, slot) unless it is the first virtual stage; backward: the same op's backward,
 * its output gradient already received into dout() unless it is the last virtual stage;
 * afterwards dinput() holds the input's gradient. */
typedef struct {
    mg_status (*forward)(void *ctx, int microbatch, int chunk, int slot);
    mg_status (*backward)(void *ctx, int microbatch, int chunk, int slot);
    void *(*input)(void *ctx, int chunk, int slot);
    void *(*output)(void *ctx, int chunk, int slot);
    void *(*dout)(void *ctx);
    const void *(*dinput)(void *ctx);
    void *ctx;
} mg_pipeline_stage;

typedef struct {
    mg_pp_schedule_params schedule;
    int rank;       /* pipeline rank */
    mg_comm *group; /* the pipeline group; NULL with one stage */
    mg_backend *be; /* its streams carry the messages */
    size_t numel;   /* elements per message */
    mg_dtype dt;
    mg_p2p_plan train, eval; /* the steps of a training and of an evaluation pass */
    int n_slots;             /* activation slots: the training plan's (== the schedule's count) */
    int n_grad_bufs; /* input-gradient buffers waiting to be sent, the most either plan needs */
    void *grad_bufs; /* (n_grad_bufs, numel) dt, from mg_pipeline_bind */
    int *slot_of;    /* (M*V) [microbatch * V + chunk] -> slot, -1 when none */
    int *free_slots; /* (n_slots) stack */
    int n_free;
    int64_t messages;  /* sent and received since set-up (tests) */
    mg_pipe_comm comm; /* how the messages move (see above) */
    /* overlapped communication (see above) */
    void *landing;            /* (numel) dt, TAGGED: the next op's input on its way, from bind */
    mg_p2p_ticket *slot_send; /* (n_slots) a send from the slot's output in flight, or -1 */
    mg_p2p_ticket *buf_send;  /* (n_grad_bufs) a send from the gradient buffer, or -1 */
    /* STREAMED: the tickets above hold message numbers of the run */
    int posted, waited; /* messages of this run enqueued; the newest the compute stream waited */
    /* timing (see above) */
    bool timed;
    bool on_timer;          /* this run times its ops on the backend's timer points */
    double busy_s, total_s; /* summed over the runs since mg_pipeline_timing_reset */
    int64_t runs;
} mg_pipeline;

/* Checks the schedule (mg_pp_schedule_check), plans its communication (parallel/pipeline/p2p.h)
 * and sizes the slots and gradient buffers. group: the pipeline group (its size must be s->pp;
 * NULL only for s->pp == 1). numel: elements of one hidden state. overlap: overlap the messages
 * with the ops (--overlap-p2p-communication), TAGGED or STREAMED as the group and the backend
 * allow (mg_pipeline_comm). */
mg_status mg_pipeline_init(mg_pipeline *p, const mg_pp_schedule_params *s, int rank, mg_comm *group,
                           mg_backend *be, size_t numel, mg_dtype dt, bool overlap);
/* What mg_pipeline_init gives rank `rank` of schedule s, without a group (a memory plan made
 * before, or without, the run: train/memory.h): its activation slots and the bytes of its message
 * buffers when its messages move as `comm` says. */
mg_status mg_pipeline_sizes(const mg_pp_schedule_params *s, int rank, size_t numel, mg_dtype dt,
                            mg_pipe_comm comm, int *n_slots, size_t *buffer_bytes);
/* Message buffers a pipeline rank holds: its gradient buffers, then the landing buffer when its
 * messages are TAGGED. */
int mg_pipeline_buffer_count(int n_grad_bufs, mg_pipe_comm comm);
/* Bytes of backend memory the gradient buffers (and the landing buffer) need (0 with one stage),
 * and their binding. */
size_t mg_pipeline_buffer_bytes(const mg_pipeline *p);
void mg_pipeline_bind(mg_pipeline *p, void *buffers);
/* Starts a new timing window (busy_s, total_s, runs = 0). */
void mg_pipeline_timing_reset(mg_pipeline *p);
/* Runs every op of the rank's order (forward_only: its forwards, for an evaluation). */
mg_status mg_pipeline_run(mg_pipeline *p, const mg_pipeline_stage *stage, bool forward_only);
void mg_pipeline_free(mg_pipeline *p);

#endif
