/* Loss scaling (train/grad_scaler.h). */
#include "train/grad_scaler.h"

#include <stdio.h>

void mg_grad_scaler_init(mg_grad_scaler *s, const mg_config *c) {
    *s = (mg_grad_scaler){.scale = 1.0f, .min_scale = 1.0f};
    if (c->loss_scale > 0 && (c->fp16 || c->bf16 || c->use_distributed_optimizer)) {
        s->on = true;
        s->scale = (float)c->loss_scale;
    } else if (c->fp16) {
        s->on = s->dynamic = true;
        s->scale = (float)c->initial_loss_scale;
        s->min_scale = (float)c->min_loss_scale;
        s->growth_interval = c->loss_scale_window;
        s->hysteresis = c->hysteresis;
        s->hysteresis_tracker = c->hysteresis;
    }
}

void mg_grad_scaler_update(mg_grad_scaler *s, bool found_inf) {
    mg_step_scaler_update(s, found_inf);
}

void mg_grad_scaler_describe(const mg_grad_scaler *s, char *buf, size_t n) {
    if (!s->on)
        snprintf(buf, n, "no loss scaling");
    else if (!s->dynamic)
        snprintf(buf, n, "constant loss scale %g", (double)s->scale);
    else
        snprintf(buf, n,
                 "dynamic loss scaling: initial scale %g, minimum %g, x2 after %g clean "
                 "iterations, x0.5 after %d overflows",
                 (double)s->scale, (double)s->min_scale, s->growth_interval, s->hysteresis);
}
