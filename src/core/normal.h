/* Standard normal draws from a random stream (core/dropout.h's {seed, offset} pairs in backend
 * memory), computed by C (CPU backend) and CUDA code from the same integer Philox-4x32-10 bits:
 * element i of a draw takes Philox block b = i / 4 at
 *   counter = (b lo, b hi, offset lo, offset hi), offset = state[1] + use,
 *   key = (seed lo ^ MG_NORMAL_SALT, seed hi)
 * (the salt keeps these draws apart from the dropout masks drawn from the same streams), whose
 * four words give two Box-Muller pairs: with u = (word >> 8 + 1/2) 2^-24 in (0, 1) (exact in
 * fp32), r = sqrt(-2 ln u0), t = 2 pi u1, the normals r cos t and r sin t; element i is the
 * (i % 4)-th of (r01 cos t01, r01 sin t01, r23 cos t23, r23 sin t23). The uniforms are the same
 * bits everywhere; the normals agree to the last few bits of each libm's logf, cosf and sinf.
 * Megatron's --moe-router-force-load-balancing draws its random router logits this way here.
 * Exports: MG_NORMAL_SALT, mg_normal_block. Needs: core/philox.h. */
#ifndef MG_NORMAL_H
#define MG_NORMAL_H

#include "core/philox.h"

#include <math.h>
#include <stdint.h>

#define MG_NORMAL_SALT 0x6E6F726Du /* "norm" */

/* The four normals of block b of the draw at `offset` of the stream seeded `seed`. */
MG_PHILOX_FN void mg_normal_block(uint64_t seed, uint64_t offset, uint64_t b, float z[4]) {
    const uint32_t ctr[4] = {(uint32_t)b, (uint32_t)(b >> 32), (uint32_t)offset,
                             (uint32_t)(offset >> 32)};
    const uint32_t key[2] = {(uint32_t)seed ^ MG_NORMAL_SALT, (uint32_t)(seed >> 32)};
    uint32_t w[4];
    mg_philox4x32_10(ctr, key, w);
    for (int p = 0; p < 2; p++) {
        const float u0 = ((float)(w[2 * p] >> 8) + 0.5f) * 5.9604644775390625e-8f; /* 2^-24 */
        const float u1 = ((float)(w[2 * p + 1] >> 8) + 0.5f) * 5.9604644775390625e-8f;
        const float r = sqrtf(-2.0f * logf(u0)), t = 6.28318530717958647692f * u1;
        z[2 * p] = r * cosf(t);
        z[2 * p + 1] = r * sinf(t);
    }
}

#endif
