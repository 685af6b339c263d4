/* ECHO on the device (backend_ops.h, moe_echo_plan and moe_echo_reroute), with core/echo_plan.h's
 * host/device functions, the CPU backend's code: the plan on one thread (E and EP are small: a
 * few sorts and passes over E x EP values), in order with the compute stream, so a step plans
 * without a host read and a graph replays the plan of each step's counts; the same plan bit for
 * bit (the float32 split rounds each product on its own: MG_ECHO_FMUL). The reroute: one thread
 * per routed pair, each expert's first row summed from the counts in shared memory. And the
 * receive budget's round counts (core/slab_rounds.h), one thread as well. */
#include "backend/cuda/cuda_common.cuh"

#include "core/echo_plan.h"
#include "core/slab_rounds.h"

static __global__ void echo_plan_kernel(int32_t *plan, float *after, const int32_t *counts,
                                        mg_echo_params p) {
    int32_t *scratch;
    mg_echo_plan q = mg_echo_plan_carve(&p, plan, &scratch);
    mg_echo_plan_run(&p, counts, &q, scratch);
    plan[0] = (int32_t)q.avg;
    for (int r = 0; after && r < p.ep; r++) after[r] += (float)q.rank_load[r];
}

extern "C" mg_status mg_cuda_moe_echo_plan(mg_backend *be, int32_t *plan, float *after,
                                           const int32_t *counts, const mg_echo_params *p) {
    echo_plan_kernel<<<1, 1, 0, mg_cuda_stream(be)>>>(plan, after, counts, *p);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

static __global__ void echo_reroute_kernel(int32_t *out, const int32_t *idx, const int32_t *pos,
                                           const int32_t *counts, const int32_t *plan,
                                           mg_echo_params p, int rank, int n) {
    extern __shared__ int32_t first[]; /* (E) each home expert's first row */
    if (threadIdx.x == 0)
        for (int e = 0, row = 0; e < p.experts; row += counts[e++]) first[e] = row;
    __syncthreads();
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    int32_t *scratch;
    const mg_echo_plan q = mg_echo_plan_carve(&p, (int32_t *)plan, &scratch);
    const int32_t e = idx[i];
    out[i] = e < 0 ? -1 : mg_echo_reroute_pair(&p, &q, rank, e, pos[i] - first[e]);
}

extern "C" mg_status mg_cuda_moe_echo_reroute(mg_backend *be, int32_t *out, const int32_t *idx,
                                              const int32_t *pos, const int32_t *counts,
                                              const int32_t *plan, const mg_echo_params *p,
                                              int rank, int n) {
    if (n <= 0) return MG_OK;
    const unsigned blocks = (unsigned)((n + MG_CUDA_THREADS - 1) / MG_CUDA_THREADS);
    echo_reroute_kernel<<<blocks, MG_CUDA_THREADS, (size_t)p->experts * sizeof(int32_t),
                          mg_cuda_stream(be)>>>(out, idx, pos, counts, plan, *p, rank, n);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

static __global__ void round_counts_kernel(int32_t *out, int32_t *rounds, const int32_t *counts,
                                           int P, int El, int slab, int first) {
    const int32_t n = mg_slab_round_counts(out, counts, P, El, slab, first);
    if (rounds) rounds[0] = n;
}

extern "C" mg_status mg_cuda_moe_round_counts(mg_backend *be, int32_t *out, int32_t *rounds,
                                              const int32_t *counts, int P, int El, int slab,
                                              int first) {
    round_counts_kernel<<<1, 1, 0, mg_cuda_stream(be)>>>(out, rounds, counts, P, El, slab, first);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* ECHO's expert copies: block (row, segment), its threads over the segment's elements; the
 * plan's home of each slot read by the block (E values). ADD_GRADS: several slots may clone one
 * home expert, so one block per segment takes the rows in order (each element's sum by one
 * thread, in the CPU's order). */
template <typename T>
static __global__ void echo_move_kernel(T *slab, void *const *table, const int32_t *plan,
                                        mg_echo_params p, int rank, size_t n1w, size_t n1b,
                                        size_t n2w, size_t n2b, int mode, int rows) {
    int32_t *scratch;
    const mg_echo_plan q = mg_echo_plan_carve(&p, (int32_t *)plan, &scratch);
    const int s = (int)blockIdx.y, El = p.experts / p.ep + p.spares / p.ep;
    const size_t seg[4] = {n1w, n1b, n2w, n2b}, width = n1w + n1b + n2w + n2b;
    size_t in_row = 0;
    for (int i = 0; i < s; i++) in_row += seg[i];
    const bool grads = mode == MG_ECHO_SEND_GRADS || mode == MG_ECHO_ADD_GRADS;
    const bool add = mode == MG_ECHO_ADD_GRADS;
    for (int r = add ? 0 : (int)blockIdx.x; r < (add ? rows : (int)blockIdx.x + 1); r++) {
        int at, local;
        if (!mg_echo_move_row(&p, &q, rank, mode, r, &at, &local)) continue;
        T *x = (T *)table[(size_t)((grads ? 4 : 0) + s) * El + local];
        T *row = slab + (size_t)at * width + in_row;
        for (size_t i = threadIdx.x; i < seg[s]; i += blockDim.x) {
            if (mode == MG_ECHO_SEND_WEIGHTS || mode == MG_ECHO_SEND_GRADS)
                row[i] = x[i];
            else if (add)
                x[i] = x[i] + row[i];
            else
                x[i] = row[i];
        }
    }
}

MG_CUDA_DTYPES(mg_status, moe_echo_move,
               (mg_backend * be, void *slab, void *const *table, const int32_t *plan,
                const mg_echo_params *p, int rank, size_t n1w, size_t n1b, size_t n2w, size_t n2b,
                int mode),
               (be, slab, table, plan, p, rank, n1w, n1b, n2w, n2b, mode)) {
    const int P = p->spares / p->ep;
    const int rows = mode == MG_ECHO_SEND_WEIGHTS || mode == MG_ECHO_ADD_GRADS ? p->ep * P : P;
    if (rows <= 0) return MG_OK;
    dim3 grid(mode == MG_ECHO_ADD_GRADS ? 1u : (unsigned)rows, 4);
    cudaStream_t st = mg_cuda_stream(be);
    if (mode == MG_ECHO_SEND_GRADS || mode == MG_ECHO_ADD_GRADS)
        echo_move_kernel<float><<<grid, 512, 0, st>>>((float *)slab, table, plan, *p, rank, n1w,
                                                      n1b, n2w, n2b, mode, rows);
    else
        echo_move_kernel<h16><<<grid, 512, 0, st>>>((h16 *)slab, table, plan, *p, rank, n1w, n1b,
                                                    n2w, n2b, mode, rows);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}
