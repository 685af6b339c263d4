/* Pipeline schedules as pure arithmetic: Megatron-LM's 1F1B and interleaved 1F1B orders, their
 * warm-up counts, validity rules, activation-slot count and a timeline simulation. Nothing here
 * communicates or keeps state, so everything is tested exhaustively and `megatron plan` prints it.
 *
 * Vocabulary (Megatron's). P pipeline ranks, V model chunks per rank (V = 1: plain 1F1B; V > 1:
 * interleaved, "virtual pipeline"), M microbatches per iteration. Chunk c of rank r is virtual
 * stage c*P + r. A rank runs M*V forwards and M*V backwards; the k-th forward and the k-th
 * backward on a rank have virtual-microbatch id k. G is --microbatch-group-size-per-virtual-
 * pipeline-stage: how many consecutive microbatches run through one chunk before the next chunk.
 *
 * Schedule table (Megatron's get_schedule_table), the same on every rank: for each group of G
 * microbatches (the last group takes whatever is left, 1..G), chunk 0 for each microbatch of the
 * group, then chunk 1, ... Entry k = (microbatch, chunk) of forward k. Backward k runs microbatch
 * table[k].microbatch on chunk V-1-table[k].chunk: backwards visit chunks in reverse (Megatron's
 * get_model_chunk_id(k, forward=False)).
 *
 * Warm-up forwards before the first backward on rank r (Megatron's get_pp_rank_microbatches):
 *   P == 1:           0 (no pipelining: F B F B ...)
 *   V == 1:           min(P - r - 1, M)
 *   V > 1:            min((P - r - 1) * 2 + (V - 1) * G, M * V)
 * and remaining = M*V - warmup steady-state forward/backward pairs.
 *
 * Order (Megatron's convert_schedule_table_to_order encoding, what pipeline/run walks): chunk + 1
 * for a forward, -(chunk + 1) for a backward; warmup forwards, then `remaining` pairs (forward
 * warmup + i, backward i), then the last `warmup` backwards. Length 2*M*V.
 *
 * Validity (mg_pp_schedule_check; MG_ERR_USAGE, one line naming the valid choices):
 *   P, V, M >= 1, G >= 0 (0 means the default, P);
 *   interleaving (V > 1) needs P > 1, or P > 2 with --no-overlap-p2p-communication (Megatron-LM
 *   arguments.py), P <= G <= M, and a last group of 0 or >= P microbatches (M % G == 0 or
 *   M % G >= P: otherwise Megatron refuses the "dependency bubbles"). V == 1 ignores G.
 * The other functions need only P, V, M >= 1 and G >= 0 and compute what Megatron's functions
 * compute even for configurations its schedule would refuse; they return MG_ERR_USAGE for bad
 * sizes and MG_ERR_INTERNAL for a rank or id out of range (a caller bug).
 *
 * Exports: mg_pp_schedule_params, mg_pp_schedule_entry, mg_pp_schedule_op, mg_pp_schedule_counts,
 *   mg_pp_schedule_check, mg_pp_schedule_group,
 * mg_pp_schedule_rank_counts, mg_pp_schedule_table, mg_pp_schedule_lookup, mg_pp_schedule_order,
 * mg_pp_schedule_ops, mg_pp_schedule_activation_slots, mg_pp_schedule_ops_encode,
 * mg_pp_schedule_ops_slots, mg_pp_schedule_timeline, mg_pp_schedule_timeline_build,
 * mg_pp_schedule_timeline_weighted,
 * mg_pp_schedule_timeline_free. Needs: core/status. */
#ifndef MG_PIPELINE_SCHEDULE_H
#define MG_PIPELINE_SCHEDULE_H

#include "megatron.h"

#include <stdbool.h>

typedef struct {
    int pp;              /* P: --pipeline-model-parallel-size */
    int vpp;             /* V: model chunks per rank; 1 = no interleaving */
    int microbatches;    /* M: microbatches per iteration (global batch / (micro batch * DP)) */
    int group;           /* G: --microbatch-group-size-per-virtual-pipeline-stage; 0 = P */
    bool no_overlap_p2p; /* --no-overlap-p2p-communication (Megatron's default overlaps) */
} mg_pp_schedule_params;

typedef struct {
    int microbatch; /* 0..M-1 */
    int chunk;      /* 0..V-1, the rank's local model chunk */
} mg_pp_schedule_entry;

typedef struct {
    int microbatch, chunk;
    bool forward;
    int vid; /* virtual-microbatch id: this is the vid-th forward (or backward) on the rank */
} mg_pp_schedule_op;

typedef struct {
    int total;       /* M * V forwards (and as many backwards) on the rank */
    int warmup;      /* forwards before the first backward */
    int remaining;   /* total - warmup: steady-state forward/backward pairs */
    bool all_warmup; /* the warm-up formula reached total (Megatron's are_all_..._in_warmup) */
} mg_pp_schedule_counts;

/* Megatron's validity rules for the schedule (above). MG_OK or MG_ERR_USAGE. */
mg_status mg_pp_schedule_check(const mg_pp_schedule_params *s);

/* The group size in effect: G, or P when G is 0. */
int mg_pp_schedule_group(const mg_pp_schedule_params *s);

/* Warm-up / remaining counts of rank r (0 <= r < P). */
mg_status mg_pp_schedule_rank_counts(const mg_pp_schedule_params *s, int rank,
                                     mg_pp_schedule_counts *out);

/* The schedule table, table: (M*V). */
mg_status mg_pp_schedule_table(const mg_pp_schedule_params *s, mg_pp_schedule_entry *table);

/* Virtual-microbatch id -> (microbatch, chunk) of the forward (forward = true) or backward with
 * that id, without building the table. Like Megatron, vid is taken modulo M*V (its lookahead asks
 * for id M*V); vid < 0 is an error. */
mg_status mg_pp_schedule_lookup(const mg_pp_schedule_params *s, int vid, bool forward,
                                mg_pp_schedule_entry *out);

/* Rank r's order in Megatron's encoding, order: (2*M*V). */
mg_status mg_pp_schedule_order(const mg_pp_schedule_params *s, int rank, int *order);

/* The same order decoded, ops: (2*M*V), with each op's microbatch and virtual id. */
mg_status mg_pp_schedule_ops(const mg_pp_schedule_params *s, int rank, mg_pp_schedule_op *ops);

/* Activation slots rank r needs: walking its order, a forward takes a slot and the backward of
 * the same (microbatch, chunk) frees it; the most held at once. Equals warmup + 1 when there is a
 * steady state (remaining > 0), else total. Megatron's max_outstanding_backprops is the same
 * warmup + 1. */
mg_status mg_pp_schedule_activation_slots(const mg_pp_schedule_params *s, int rank, int *slots);

/* What mg_pp_schedule_order and mg_pp_schedule_activation_slots compute, from ops a caller already
 * has (mg_pp_schedule_ops of one rank, n = 2*M*V), so it builds them once. order: (n). */
void mg_pp_schedule_ops_encode(const mg_pp_schedule_op *ops, int n, int *order);
int mg_pp_schedule_ops_slots(const mg_pp_schedule_op *ops, int n);

/* ---- timeline: when each op runs, for `megatron plan` ----
 * Model: every forward takes t_fwd and every backward t_bwd time units (per op, i.e. per chunk:
 * to compare V = 1 with V = 2 on the same model pass t / V); a rank runs its order one op at a
 * time; an op starts when the rank is free and its input exists: the forward of (m, c) on rank r
 * waits for that forward on rank r-1, or on rank P-1 for chunk c-1 when r == 0; the backward of
 * (m, c) waits for that backward on rank r+1, or on rank 0 for chunk c+1 when r == P-1, and the
 * very last stage's backward waits for its own forward. Communication is free.
 * Measured (tests, every valid schedule up to P 8, V 4, M 32, three duration ratios): the makespan
 * is exactly (M*V + P - 1) * (t_fwd + t_bwd), so bubble_ratio == analytic_ratio and
 * bubble_fraction == (P-1) / (M*V + P-1). Many configurations mg_pp_schedule_check refuses take
 * longer or deadlock in this model (a one-off measurement, not a test), so the timeline insists
 * on a valid one. */
typedef struct {
    mg_pp_schedule_op op;
    double start, end;
} mg_pp_schedule_timed_op;

typedef struct {
    int pp, ops_per_rank; /* P, 2*M*V */
    mg_pp_schedule_timed_op
        *ops;               /* (P, 2*M*V): rank r's ops in its order, at ops[r*ops_per_rank] */
    double makespan;        /* end of the last op (every rank starts at 0) */
    double busy;            /* compute time of one rank: M*V*(t_fwd + t_bwd) */
    double bubble_fraction; /* idle / (P * makespan) = 1 - busy / makespan */
    double bubble_ratio;    /* idle / busy = makespan / busy - 1, Megatron's measure */
    double analytic_ratio;  /* Megatron's (P - 1) / (V * M) */
} mg_pp_schedule_timeline;

/* Simulates the schedule (mg_pp_schedule_check must pass; t_fwd, t_bwd > 0 and finite) into *out,
 * whose ops array is malloc'd; release with mg_pp_schedule_timeline_free. MG_ERR_INTERNAL if the
 * orders deadlock (they never do for a valid schedule). */
mg_status mg_pp_schedule_timeline_build(const mg_pp_schedule_params *s, double t_fwd, double t_bwd,
                                        mg_pp_schedule_timeline *out);
/* The same with chunk c's ops on rank r taking weight[r * V + c] (>= 0; NULL: 1) times t_fwd or
 * t_bwd: uneven placements (a layout's chunks of different layer counts, the embedding on the
 * first, the output layer and loss on the last). busy is then the busiest rank's compute, and
 * rank_busy (P, may be NULL) each rank's; a rank's idle share of the makespan is
 * 1 - rank_busy[r] / makespan. */
mg_status mg_pp_schedule_timeline_weighted(const mg_pp_schedule_params *s, double t_fwd,
                                           double t_bwd, const double *weight, double *rank_busy,
                                           mg_pp_schedule_timeline *out);
void mg_pp_schedule_timeline_free(mg_pp_schedule_timeline *t);

#endif
