/* Model-internal: the two sublayers of a transformer block and the norm dispatch, shared by
 * gpt.c, attention.c and mlp.c. Not exported beyond src/model/. */
#ifndef MG_MODEL_LAYERS_H
#define MG_MODEL_LAYERS_H

#include "model/gpt.h"

/* Address of an activation-arena / workspace offset. */
static inline void *mg_gpt_act(const mg_gpt *g, size_t off) { return mg_arena_ptr(g->acts, off); }
static inline void *mg_gpt_ws(const mg_gpt *g, size_t off) { return mg_arena_ptr(g->work, off); }
static inline const void *mg_gpt_param_or_null(const mg_gpt *g, int i) {
    return i < 0 ? NULL : mg_gpt_param(g, i);
}
static inline float *mg_gpt_grad_or_null(const mg_gpt *g, int i) {
    return i < 0 ? NULL : mg_gpt_grad(g, i);
}

/* LayerNorm or RMSNorm as configured. mean is unused by RMSNorm. */
mg_status mg_gpt_norm_forward(mg_gpt *g, mg_backend *be, void *out, float *mean, float *rstd,
                              const void *x, int w, int b);
/* dx accumulates. */
mg_status mg_gpt_norm_backward(mg_gpt *g, mg_backend *be, void *dx, const void *dout, const void *x,
                               const float *mean, const float *rstd, int w, int b);

/* x -> mid = x + proj(attention(norm1(x))) */
mg_status mg_attention_forward(mg_gpt *g, mg_backend *be, int layer);
/* dres (N,H) holds d(mid) on entry and d(x) on exit. */
mg_status mg_attention_backward(mg_gpt *g, mg_backend *be, int layer, void *dres);
/* mid -> out = mid + fc2(act(fc1(norm2(mid)))) */
mg_status mg_mlp_forward(mg_gpt *g, mg_backend *be, int layer, void *out);
/* dres holds d(out) on entry and d(mid) on exit. */
mg_status mg_mlp_backward(mg_gpt *g, mg_backend *be, int layer, void *dres);

#endif
