/* ECHO's plan on the device (backend_ops.h, moe_echo_plan): core/echo_plan.h's host/device
 * functions on one thread (E and EP are small: the planner is a few sorts and passes over E x
 * EP values), in order with the compute stream, so a step plans without a host read and a graph
 * replays the plan of each step's counts. The same code as the CPU backend's, so the same plan,
 * bit for bit (the float32 split rounds each product on its own: MG_ECHO_FMUL). */
#include "backend/cuda/cuda_common.cuh"

#include "core/echo_plan.h"

static __global__ void echo_plan_kernel(int32_t *plan, const int32_t *counts, mg_echo_params p) {
    int32_t *scratch;
    mg_echo_plan q = mg_echo_plan_carve(&p, plan, &scratch);
    mg_echo_plan_run(&p, counts, &q, scratch);
    plan[0] = (int32_t)q.avg;
}

extern "C" mg_status mg_cuda_moe_echo_plan(mg_backend *be, int32_t *plan, const int32_t *counts,
                                           const mg_echo_params *p) {
    echo_plan_kernel<<<1, 1, 0, mg_cuda_stream(be)>>>(plan, counts, *p);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}
