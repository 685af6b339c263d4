/* Delayed scaling of an fp8 tensor (Transformer Engine's recipe, Megatron's --fp8-recipe
 * delayed): each tensor that is cast to fp8 keeps a history of the largest magnitudes (amax) of
 * its recent steps and a scale; a step casts with the scale the earlier steps set, records its
 * own amax in the history's first entry, and then updates:
 *   amax  = the history's maximum (--fp8-amax-compute-algo max) or its first entry
 *           (most_recent);
 *   the history rolls one place toward its front (the first entry goes to the back) and its
 *   first entry becomes 0, ready for the next step;
 *   scale = (fp8_max / amax) / 2^margin (--fp8-margin), in fp32; kept as it was when amax is
 *           not positive or not finite; the largest fp32 value when the quotient overflows.
 * Inline for host C and CUDA device code alike (one thread per tensor), so both update exactly
 * the same way. Exports: mg_fp8_amax_algo, mg_fp8_delayed_update. Needs: core/half_bits.h. */
#ifndef MG_CORE_FP8_SCALING_H
#define MG_CORE_FP8_SCALING_H

#include "core/half_bits.h"

#include <float.h>
#include <math.h>

typedef enum { MG_FP8_AMAX_MAX = 0, MG_FP8_AMAX_MOST_RECENT = 1 } mg_fp8_amax_algo;

/* Updates one tensor's history (len entries, the step's amax in history[0]) and returns its new
 * scale (the old one: `scale`). */
MG_HB_FN float mg_fp8_delayed_update(float *history, int len, float scale, float fp8_max,
                                     int margin, mg_fp8_amax_algo algo) {
    float amax = history[0];
    if (algo == MG_FP8_AMAX_MAX)
        for (int i = 1; i < len; i++) /* a NaN anywhere makes the maximum NaN, as torch.max */
            if (isnan(history[i]) || history[i] > amax || isnan(amax))
                amax = isnan(amax) ? amax : history[i];
    float first = history[0];
    for (int i = 0; i + 1 < len; i++) history[i] = history[i + 1];
    if (len > 1) history[len - 1] = first;
    history[0] = 0.0f;
    if (!(amax > 0.0f) || !isfinite(amax)) return scale;
    float sf = (fp8_max / amax) / ldexpf(1.0f, margin);
    return isinf(sf) ? FLT_MAX : sf;
}

#endif
