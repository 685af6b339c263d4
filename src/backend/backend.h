/* The backend op table. Model code calls these and never a device API.
 *
 * The entries, their contracts (shapes, what accumulates, the buffer contract, the fused QKV
 * layout) and which are optional are listed once, in backend_ops.h; the struct below, the
 * validation and both backends' tables are generated from that list. Optional entries may be
 * NULL; mg_backend_validate() lists missing required ones at init.
 * Exports: mg_backend, mg_backend_cpu_create, mg_backend_cuda_create(_dtype),
 * mg_backend_validate, mg_backend_require_moe. Needs: core. */
#ifndef MG_BACKEND_H
#define MG_BACKEND_H

#include "core/arena.h"
#include "core/dropout.h"
#include "core/echo_plan.h"
#include "core/peer_window.h"
#include "core/status.h"
#include "core/step_rules.h"
#include "core/tensor.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct mg_backend mg_backend;

/* Top-k routing of one MoE layer's tokens (Megatron's topk_routing_with_score_function,
 * apply_router_token_dropping, the aux losses and the z-loss; the ops moe_route and
 * moe_route_backward). T tokens, in sequences of S (T = B x S, batch-major rows). */
typedef struct {
    int T, S, E, k;      /* tokens, sequence length, experts, experts per token */
    mg_moe_score score;  /* softmax or sigmoid */
    bool pre_softmax;    /* softmax: over all E logits before the top-k (else over the k) */
    int groups, group_k; /* group-limited routing: the best group_k of `groups` groups; 0: off */
    float scaling;       /* routing weights are multiplied by it (1: none) */
    bool bias;           /* sigmoid: selection on scores + expert bias (aux-loss-free) */
    int capacity;        /* tokens kept per expert; 0: dropless */
    mg_moe_drop drop;    /* over capacity: keep the largest weights or the earliest positions */
    mg_moe_balancing balancing; /* aux loss over the T tokens, per sequence, or none */
    float aux_coeff, z_coeff;   /* 0: that loss is off */
    float loss_weight;          /* d(training objective) / d(aux loss or z-loss) */
    const float *loss_scale;    /* backend memory: the loss scale, a factor of loss_weight in the
                                   backward (the step-control block's); NULL: 1 */
    float stat_weight;          /* the logged values (loss / coeff) accumulate at this weight */
} mg_moe_routing;

/* One run of elements of an AdamW call (backend_ops.h, adamw) with one learning rate and weight
 * decay: rates[lr] and rates[wd] (wd < 0: no decay) of the call's rate array. */
typedef struct {
    size_t param_off, grad_off, state_off, n; /* the parameter's offset, the gradient's, the
                                                 master's and moments'; elements */
    int lr, wd;
} mg_adamw_span;

/* How an fp8 operand is scaled (mg_fp8_tensor.block; core/fp8_block.h): one scale for the
 * tensor; a scale per 1 x 128 block along each form's rows (the blockwise recipe's inputs and
 * gradients); a scale per 128 x 128 tile (its weights). */
typedef enum { MG_FP8_SCALE_TENSOR = 0, MG_FP8_SCALE_ROWS, MG_FP8_SCALE_TILES } mg_fp8_scaling;

/* An fp8 operand of a linear (backend_ops.h's fp8 ops; core/fp8.h's formats): the bytes of a
 * compute-dtype tensor (rows, cols) times its scale, cast saturating to `format`
 * (mg_fp8_format), row-major as the tensor (`data`) and/or transposed, (cols, rows)
 * (`data_t`); NULL where the op does not read that form. scale_inv (backend memory): 1 / the
 * scale, what a product of fp8 values is multiplied by to undo it:
 *   block MG_FP8_SCALE_TENSOR: (1) for both forms;
 *   MG_FP8_SCALE_ROWS: data's rows x ceil(cols / 128), and scale_inv_t data_t's cols x
 *     ceil(rows / 128): each form cast on its own, in blocks along its rows;
 *   MG_FP8_SCALE_TILES: data's tile grid, and scale_inv_t data_t's (the same bytes transposed,
 *     the same scales in the transpose's grid).
 * The layouts are core/fp8_block.h's (cuBLASLt's). */
typedef struct {
    const uint8_t *data, *data_t;
    const float *scale_inv;
    int format;
    int block;                /* mg_fp8_scaling */
    const float *scale_inv_t; /* MG_FP8_SCALE_ROWS: data_t's */
} mg_fp8_tensor;

/* The backend's queues: every op runs on the compute stream; collectives (mg_comm calls) go to
 * the communication stream so they overlap computation (a bucket's reduction runs while backward
 * goes on: docs/architecture.md); the tensor-parallel reductions that overlap a weight
 * gradient's GEMM (parallel/tensor_parallel.h) have a stream of their own, so they never queue
 * behind a data-parallel bucket; so do the pipeline's messages (parallel/pipeline/run.h), whose
 * sends wait for a neighbour that may be busy for a whole op. */
typedef enum {
    MG_STREAM_COMPUTE = 0,
    MG_STREAM_COMM = 1,
    MG_STREAM_TP = 2,
    MG_STREAM_PP = 3
} mg_stream_id;
#define MG_STREAMS 4
/* stream_mark's slots: the first MG_STREAM_MARKS_DDP for the data-parallel gathers
 * (parallel/ddp.c), the next MG_STREAM_MARKS_PP for the pipeline's messages and then
 * MG_STREAM_MARKS_PP_OPS for the ends of its ops (two rings: parallel/pipeline/run.c). */
#define MG_STREAM_MARKS_DDP    8
#define MG_STREAM_MARKS_PP     32
#define MG_STREAM_MARKS_PP_OPS 16
#define MG_STREAM_MARKS        (MG_STREAM_MARKS_DDP + MG_STREAM_MARKS_PP + MG_STREAM_MARKS_PP_OPS)
#define MG_TIMER_POINTS        1024 /* timer_mark's points (backend_ops.h) */

/* A captured sequence of ops, replayed by graph_launch (backend_ops.h's graph entries): a CUDA
 * graph on the CUDA backend, the recorded calls on the CPU backend (backend/graph_record.h). */
typedef struct mg_graph mg_graph;
typedef struct {
    size_t nodes; /* the graph's operations (CUDA: its nodes; CPU: the recorded calls) */
    size_t bytes; /* memory the graph itself holds (CUDA: device memory taken by instantiating
                     it, as the driver's free memory shows; CPU: the recorded arguments) */
} mg_graph_info;
struct mg_graph_rec; /* a capture under way on a backend that records (backend/graph_record.h) */

/* The entries' function types, mg_backend_<name>_fn (backend_ops.h): the fields below and the
 * backends' declarations of their implementations. */
#define MG_OP(name, need, kind, ret, params, args) typedef ret mg_backend_##name##_fn params;
#include "backend/backend_ops.h"

struct mg_backend {
    const char *name; /* "cpu", "cuda" */
    mg_dtype compute_dtype;
    mg_device device;
    void *ctx; /* backend private state */
    /* the capture under way on a recording backend (graph_begin .. graph_end), else NULL */
    struct mg_graph_rec *recording;

    /* the entries, declared in backend_ops.h (their contracts are there) */
#define MG_OP(name, need, kind, ret, params, args) mg_backend_##name##_fn *name;
#include "backend/backend_ops.h"
};

/* The entries as data, for code that walks the table (validation, the coverage test of
 * tests/cuda): MG_BACKEND_ENTRY_<name> is the entry's index in mg_backend_entries, in
 * backend_ops.h's order. */
enum {
#define MG_OP(name, need, kind, ret, params, args) MG_BACKEND_ENTRY_##name,
#include "backend/backend_ops.h"
    MG_BACKEND_N_ENTRIES
};
typedef enum { MG_BACKEND_RT, MG_BACKEND_OP, MG_BACKEND_MOE } mg_backend_kind; /* `kind` */
typedef struct {
    const char *name;     /* the field's name */
    bool required;        /* need REQ */
    mg_backend_kind kind; /* RT, OP or MOE */
} mg_backend_entry;
extern const mg_backend_entry mg_backend_entries[MG_BACKEND_N_ENTRIES];
/* Whether entry i (an MG_BACKEND_ENTRY_* index) of be is set. */
bool mg_backend_has(const mg_backend *be, int i);

/* Creates the CPU reference backend (fp32, OpenMP; OpenBLAS for GEMM). num_threads <= 0 keeps the
 * OpenMP default. */
mg_status mg_backend_cpu_create(mg_backend **out, int num_threads);
/* The threads the process's OpenMP loops use (the cpu backend's ops, after its --num-threads): 1
 * without OpenMP. */
int mg_backend_cpu_threads(void);
/* Creates the CUDA backend on GPU `device` computing in `compute`: MG_BF16 or MG_F16 (fp16, for
 * --fp16 with loss scaling: an overflow becomes Inf, nothing clamps); src/backend/cuda,
 * docs/architecture.md. Another dtype is MG_ERR_USAGE (checked first, in every build).
 * MG_ERR_UNSUPPORTED with a "no CUDA device: ..." line when no usable GPU is present, and in
 * builds without the CUDA backend (built without nvcc, or `make CUDA=0`: no MG_HAVE_CUDA). */
mg_status mg_backend_cuda_create_dtype(mg_backend **out, int device, mg_dtype compute);
/* The largest attention head size the CUDA backend runs (cuDNN's fused attention and our
 * kernels, attention_generic.cu, both stop here); the trainer refuses a larger one up front. */
#define MG_CUDA_ATTENTION_MAX_HD 256
/* mg_backend_cuda_create_dtype with MG_BF16. */
mg_status mg_backend_cuda_create(mg_backend **out, int device);
/* Whether GPU `device` can carry the CUDA backend (present, Hopper or newer) without creating
 * anything: MG_OK, or MG_ERR_UNSUPPORTED with the same "no CUDA device: ..." line. */
mg_status mg_backend_cuda_probe(int device);
/* A collective between compute work: the stream to hand to mg_comm (the communication stream,
 * after the compute stream's work so far; NULL on backends without streams), then, once it is
 * enqueued, mg_backend_comm_end makes the compute stream's later work wait for it. */
mg_status mg_backend_comm_begin(mg_backend *be, void **stream);
mg_status mg_backend_comm_end(mg_backend *be);
/* An all-gather through the peer-mapped window pw on stream s (backend_ops.h's peer_push and
 * peer_take): part (bytes) goes to every peer's slot, then every rank's block into place in
 * whole (size blocks of bytes; part may already lie at whole + rank x bytes). */
mg_status mg_backend_peer_gather(mg_backend *be, const mg_peer_window *pw, void *whole,
                                 const void *part, size_t bytes, mg_stream_id s);
/* Whether peer_sum's row tail (backend_ops.h: bias, residual, rows of H) fits its n values: with
 * a bias or a residual, H > 0 dividing n. MG_ERR_INTERNAL naming the sizes if not. */
mg_status mg_peer_sum_rows_check(size_t n, const void *bias, const void *residual, int H);
/* Where arenas (core/arena.h) of this backend get their memory: NULL (host memory) on the CPU
 * backend, else an allocator built in *storage that calls be->alloc and be->free (storage must
 * outlive the arenas). */
const mg_allocator *mg_backend_arena_allocator(mg_backend *be, mg_allocator *storage);
/* Checks that every required entry is present; the message names the missing ones. */
mg_status mg_backend_validate(const mg_backend *be);
/* Checks that be has every MoE op (kind MOE), for models with experts: MG_ERR_UNSUPPORTED naming
 * the missing ones otherwise. */
mg_status mg_backend_require_moe(const mg_backend *be);
/* What attention saves for its backward on each device, in bytes (the backends'
 * attention_saved_bytes, and memory plans made without a device): the CPU keeps the softmax
 * (B, nq, S, S) fp32, CUDA its log-sum-exp (B, nq, S) fp32. */
size_t mg_backend_attention_saved_bytes(mg_device device, int B, int S, int nq, int hd);

#ifdef __cplusplus
}
#endif

#endif
