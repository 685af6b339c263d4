/* The control of a training step (backend_ops.h, step_control): core/step_rules.h's rule, run in
 * call order like every CPU op. */
#include "backend/cpu/cpu_ops.h"

mg_status mg_cpu_step_control(mg_backend *be, mg_step_ctl *ctl, const float *norm,
                              const float *loss, float *sums, const mg_step_rules *rules) {
    // ctl (1); norm, loss (1); sums (2); rules: host
    mg_step_control_apply(ctl, *norm, *loss, sums, rules);
    return MG_OK;
}
