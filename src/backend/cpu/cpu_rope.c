/* Rotary position embedding, rotate-half form, on the query and key heads of the fused qkv buffer
 * (layout in backend_ops.h: per group r query heads, then k, then v). Only the first rd channels of
 * a head rotate (Megatron's --rotary-percent: t[..., :rot_dim]); the rest pass through. Backward
 * applies the transposed (= inverse) rotation to the gradient. */
#include "backend/cpu/cpu_ops.h"

static mg_status rope_check(const int32_t *pos, int N, int S, int nq, int ng, int hd, int rd) {
    if (ng <= 0 || nq % ng != 0)
        return MG_FAIL(MG_ERR_INTERNAL, "rope: %d query heads do not split into %d groups", nq, ng);
    if (rd <= 0 || rd > hd || rd % 2 != 0)
        return MG_FAIL(MG_ERR_INTERNAL,
                       "rope: %d rotated channels of a head of %d (need even, "
                       "0 < rd <= hd)",
                       rd, hd);
    if (S <= 0) return MG_FAIL(MG_ERR_INTERNAL, "rope: sequence length %d", S);
    for (int i = 0; pos && i < N; i++)
        if (pos[i] < 0 || pos[i] >= S)
            return MG_FAIL(MG_ERR_INTERNAL, "rope: token %d has position %d outside [0, %d)", i,
                           (int)pos[i], S);
    return MG_OK;
}

/* sign = +1: forward rotation by the angle; sign = -1: inverse rotation. */
static void rope_apply(float *qkv, const float *cos_tab, const float *sin_tab, const int32_t *pos,
                       int N, int S, int nq, int ng, int hd, int rd, float sign) {
    int r = nq / ng, half = rd / 2;
    size_t C = (size_t)ng * (r + 2) * hd; /* row width */
#pragma omp parallel for schedule(static)
    for (int i = 0; i < N; i++) {
        size_t p = pos ? (size_t)pos[i] : (size_t)(i % S);
        const float *c = cos_tab + p * half; // (rd/2)
        const float *s = sin_tab + p * half; // (rd/2)
        float *row = qkv + (size_t)i * C;
        for (int g = 0; g < ng; g++) {
            /* the r query heads and the key head of the group are contiguous; v is left alone */
            for (int h = 0; h < r + 1; h++) {
                float *x = row + ((size_t)g * (r + 2) + h) * hd;
                for (int k = 0; k < half; k++) {
                    float x1 = x[k], x2 = x[k + half], sn = sign * s[k];
                    x[k] = x1 * c[k] - x2 * sn;
                    x[k + half] = x2 * c[k] + x1 * sn;
                }
            }
        }
    }
}

mg_status mg_cpu_rope_forward(mg_backend *be, void *qkv, const float *cos_tab, const float *sin_tab,
                              const int32_t *pos, int N, int S, int nq, int ng, int hd, int rd) {
    // qkv (N, ng*(r+2)*hd); cos_tab, sin_tab (S, rd/2); pos (N) or NULL
    (void)be;
    MG_CHECK(rope_check(pos, N, S, nq, ng, hd, rd));
    rope_apply(qkv, cos_tab, sin_tab, pos, N, S, nq, ng, hd, rd, 1.0f);
    return MG_OK;
}

mg_status mg_cpu_rope_backward(mg_backend *be, void *dqkv, const float *cos_tab,
                               const float *sin_tab, const int32_t *pos, int N, int S, int nq,
                               int ng, int hd, int rd) {
    // dqkv (N, ng*(r+2)*hd); cos_tab, sin_tab (S, rd/2); pos (N) or NULL
    (void)be;
    MG_CHECK(rope_check(pos, N, S, nq, ng, hd, rd));
    rope_apply(dqkv, cos_tab, sin_tab, pos, N, S, nq, ng, hd, rd, -1.0f);
    return MG_OK;
}
