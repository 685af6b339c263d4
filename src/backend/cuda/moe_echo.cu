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

/* ECHO's expert copies. Block (chunk, segment, row): ECHO_CHUNK elements of one segment of one
 * slab row, so a copy of a few experts' weights spreads over the whole GPU. ADD_GRADS: several
 * slots may clone one home expert, so the rows are not split over blocks: each thread adds every
 * row into its element in row order (the CPU's order, no race). Thread 0 finds the rows' places
 * (the plan's home of each slot: E x S values) once per block, in shared memory. */
#define ECHO_THREADS 256
#define ECHO_CHUNK   (ECHO_THREADS * 16)

template <typename T>
static __global__ void echo_move_kernel(T *slab, void *const *table, const int32_t *plan,
                                        mg_echo_params p, int rank, size_t n1w, size_t n1b,
                                        size_t n2w, size_t n2b, int mode, int rows) {
    extern __shared__ int32_t place[]; /* (rows of this block) slab row, local expert; -1: none */
    const int s = (int)blockIdx.y, El = p.experts / p.ep + p.spares / p.ep;
    const size_t seg[4] = {n1w, n1b, n2w, n2b}, width = n1w + n1b + n2w + n2b;
    const size_t first = (size_t)blockIdx.x * ECHO_CHUNK;
    if (first >= seg[s]) return;
    const bool add = mode == MG_ECHO_ADD_GRADS;
    const int r0 = add ? 0 : (int)blockIdx.z, nr = add ? rows : 1;
    if (threadIdx.x == 0) {
        int32_t *scratch;
        const mg_echo_plan q = mg_echo_plan_carve(&p, (int32_t *)plan, &scratch);
        for (int r = 0; r < nr; r++) {
            int at, local;
            const bool on = mg_echo_move_row(&p, &q, rank, mode, r0 + r, &at, &local);
            place[2 * r] = on ? at : -1;
            place[2 * r + 1] = local;
        }
    }
    __syncthreads();
    size_t in_row = 0;
    for (int i = 0; i < s; i++) in_row += seg[i];
    const bool grads = mode == MG_ECHO_SEND_GRADS || add;
    const size_t end = first + ECHO_CHUNK < seg[s] ? first + ECHO_CHUNK : seg[s];
    void *const *col = table + (size_t)((grads ? 4 : 0) + s) * El;
    if (add) {
        for (size_t i = first + threadIdx.x; i < end; i += ECHO_THREADS) {
            for (int r = 0; r < nr; r++) {
                if (place[2 * r] < 0) continue;
                float *x = (float *)col[place[2 * r + 1]];
                const float v = ((const float *)slab)[(size_t)place[2 * r] * width + in_row + i];
                x[i] = x[i] + v;
            }
        }
        return;
    }
    if (place[0] < 0) return;
    T *x = (T *)col[place[1]];
    T *row = slab + (size_t)place[0] * width + in_row;
    const bool to_slab = mode == MG_ECHO_SEND_WEIGHTS || mode == MG_ECHO_SEND_GRADS;
    for (size_t i = first + threadIdx.x; i < end; i += ECHO_THREADS) {
        if (to_slab)
            row[i] = x[i];
        else
            x[i] = row[i];
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
    size_t widest = n1w > n2w ? n1w : n2w;
    widest = widest > n1b ? widest : n1b;
    widest = widest > n2b ? widest : n2b;
    const bool add = mode == MG_ECHO_ADD_GRADS;
    dim3 grid((unsigned)((widest + ECHO_CHUNK - 1) / ECHO_CHUNK), 4, add ? 1u : (unsigned)rows);
    const size_t shm = (size_t)(add ? rows : 1) * 2 * sizeof(int32_t);
    cudaStream_t st = mg_cuda_stream(be);
    if (mode == MG_ECHO_SEND_GRADS || add)
        echo_move_kernel<float><<<grid, ECHO_THREADS, shm, st>>>(
            (float *)slab, table, plan, *p, rank, n1w, n1b, n2w, n2b, mode, rows);
    else
        echo_move_kernel<h16><<<grid, ECHO_THREADS, shm, st>>>((h16 *)slab, table, plan, *p, rank,
                                                               n1w, n1b, n2w, n2b, mode, rows);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}
