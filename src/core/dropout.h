/* Counter-based dropout masks (Megatron's --attention-dropout and --hidden-dropout), the same on
 * every backend and every parallel layout.
 *
 * Whether an element is kept is a pure function of what the element is in the unsharded model
 * and the global batch — (seed, iteration, layer, site, sequence of the global batch, position,
 * hidden index, or head and key) — drawn with Philox-4x32-10 (core/philox.h). Hence:
 *  - tensor, sequence, pipeline and data parallelism and the micro-batch size do not change the
 *    mask: a rank draws exactly the one-rank model's mask for its heads, rows and sequences, and
 *    the layouts still train the same model (docs/architecture.md, "Principles");
 *  - a backward recomputes its forward's mask instead of keeping it (no memory, no state);
 *  - the mask changes every iteration, and a run resumed from a checkpoint (which restores the
 *    iteration) draws the masks the uninterrupted run drew;
 *  - C (CPU backend) and CUDA code include this header: the same integer computation gives the
 *    same mask bit for bit.
 *
 * One Philox block gives the 32-bit draws of 4 consecutive elements e = 4 c0 + lane:
 *   counter = (e / 4, sample, iteration, layer << 20 | site << 16 | head), key = (seed, salt)
 *   hidden:    e = s H + h   (position s of the sequence, hidden index h; head 0)
 *   attention: e = s S + t   (query s, key t <= s, of global head `head`)
 * An element is dropped when its draw is below threshold = floor(p 2^32) (probability p to within
 * 2^-32) and kept elements are scaled by 1 / (1 - p), as torch.nn.functional.dropout.
 * Limits that keep the fields apart (mg_config_validate checks them when dropout is on): seq length
 * <= 65536, fewer than 4096 layers and 65536 heads, S x H < 2^34; iterations count modulo 2^32.
 * Exports: mg_dropout, MG_DROPOUT_*, mg_dropout_init, mg_dropout_block, mg_dropout_hidden,
 * mg_dropout_attention. Needs: core/philox.h. */
#ifndef MG_DROPOUT_H
#define MG_DROPOUT_H

#include "core/philox.h"

#include <stdint.h>

/* Where in a layer a mask applies (the counter's site field). */
enum {
    MG_DROPOUT_ATTENTION = 1, /* the attention probabilities (--attention-dropout) */
    MG_DROPOUT_ATTN_OUT = 2,  /* the attention block's output, before the residual add */
    MG_DROPOUT_MLP_OUT = 3    /* the MLP's (or MoE layer's) output, before the residual add */
};
#define MG_DROPOUT_SALT 0x64726F70u /* "drop": keeps these streams apart from initialisation's */

/* One op's dropout: the mask's key and where the op's rows or heads sit in the global batch. */
typedef struct {
    uint32_t seed;      /* --seed */
    uint32_t iteration; /* the training iteration (completed steps before this one) */
    uint32_t site;      /* layer << 20 | site << 16 */
    uint32_t threshold; /* dropped when the element's draw is below it: floor(p 2^32) */
    float scale;        /* 1 / (1 - p) */
    int32_t sample0;    /* the microbatch's first sequence: its index in the global batch */
    int32_t first;      /* hidden: the microbatch row (b S + s) of the op's row 0 (sequence
                           parallelism); attention: the global number of the op's head 0 (tensor
                           parallelism) */
} mg_dropout;

/* A dropout of probability p in [0, 1) at `site` of global layer `layer`. */
static inline mg_dropout mg_dropout_init(double p, uint64_t seed, int64_t iteration, int layer,
                                         int site, int sample0, int first) {
    mg_dropout d;
    d.seed = (uint32_t)seed;
    d.iteration = (uint32_t)iteration;
    d.site = (uint32_t)layer << 20 | (uint32_t)site << 16;
    double t = p * 4294967296.0;
    d.threshold = t <= 0 ? 0u : t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
    d.scale = (float)(1.0 / (1.0 - p));
    d.sample0 = sample0;
    d.first = first;
    return d;
}

/* The draws of elements 4 block .. 4 block + 3 of (sample, head). */
MG_PHILOX_FN void mg_dropout_block(const mg_dropout *d, uint32_t sample, uint32_t head,
                                   uint32_t block, uint32_t out[4]) {
    const uint32_t ctr[4] = {block, sample, d->iteration, d->site | head};
    const uint32_t key[2] = {d->seed, MG_DROPOUT_SALT};
    mg_philox4x32_10(ctr, key, out);
}

/* The factor of element e of (sample, head): scale if kept, 0 if dropped. */
MG_PHILOX_FN float mg_dropout_factor(const mg_dropout *d, uint32_t sample, uint32_t head,
                                     uint64_t e) {
    uint32_t r[4];
    mg_dropout_block(d, sample, head, (uint32_t)(e >> 2), r);
    uint32_t l = (uint32_t)e & 3u, v = l == 0 ? r[0] : l == 1 ? r[1] : l == 2 ? r[2] : r[3];
    return v >= d->threshold ? d->scale : 0.0f;
}

/* Hidden dropout: the factor of hidden index h of the op's row i, the microbatch row
 * d->first + i of sequences of S tokens, H wide. */
MG_PHILOX_FN float mg_dropout_hidden(const mg_dropout *d, int i, int h, int S, int H) {
    int row = d->first + i, b = row / S, s = row % S;
    return mg_dropout_factor(d, (uint32_t)(d->sample0 + b), 0u, (uint64_t)s * (uint64_t)H + h);
}

/* Attention dropout: the factor of probability (query s, key t) of the op's sequence b and
 * local head h, sequences of S tokens. */
MG_PHILOX_FN float mg_dropout_attention(const mg_dropout *d, int b, int h, int s, int t, int S) {
    return mg_dropout_factor(d, (uint32_t)(d->sample0 + b), (uint32_t)(d->first + h),
                             (uint64_t)s * (uint64_t)S + (uint64_t)t);
}

#endif
