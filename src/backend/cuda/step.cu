/* The control of a training step (backend_ops.h, step_control): core/step_rules.h's rule on one
 * device thread, in order with the compute stream, so the skip decision, Adam's step count, the
 * rates and the loss scale are known to the next kernels without a host read. */
#include "backend/cuda/cuda_common.cuh"

static __global__ void step_control_kernel(mg_step_ctl *ctl, const float *norm, const float *loss,
                                           float *sums, mg_step_rules rules) {
    mg_step_control_apply(ctl, *norm, *loss, sums, &rules);
}

MG_CUDA_DTYPES(mg_status, step_control,
               (mg_backend * be, mg_step_ctl *ctl, const float *norm, const float *loss,
                float *sums, const mg_step_rules *rules),
               (be, ctl, norm, loss, sums, rules)) {
    // ctl (1), norm (1), loss (1), sums (2) device; rules host, passed by value
    step_control_kernel<<<1, 1, 0, mg_cuda_stream(be)>>>(ctl, norm, loss, sums, *rules);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}
