/* Dropout masks (Megatron's --attention-dropout and --hidden-dropout), drawn with Philox-4x32-10
 * (core/philox.h) by C (CPU backend) and CUDA code alike: the same integer computation gives the
 * same mask bit for bit on both. Two kinds, chosen by the mask's `mode`:
 *
 * MG_DROPOUT_STREAM (the default, Megatron's semantics). Each op draws from a random stream, a
 * (seed, offset) pair kept in backend memory (on the device for CUDA) and named by `state`:
 * Megatron's CudaRNGStatesTracker keeps a "default" stream (shared by the tensor-parallel ranks)
 * and a "model-parallel" one (a different seed on each tensor-parallel rank). An op's draws use
 * offset state[1] + use, where `use` numbers the op within the training step; the step's end
 * moves state[1] on (the backend's rng_advance, on the device), so no host value changes from
 * step to step and a step can be replayed as a CUDA graph. The mask is keyed by the op's local
 * tensor, so it depends on the parallel layout, as Megatron's does. Element draws:
 *   counter = (e / 4, c1, offset lo, offset hi), key = (seed lo, seed hi)
 *   hidden:    e = i H + h (the op's row i, hidden index h), c1 = 0 (needs N H < 2^34)
 *   attention: e = s S + t (query s, key t), c1 = b << 16 | h (the op's sequence b, local head h)
 * cuDNN's fused attention draws its own mask from the same (seed, offset) (attention_cudnn.cu):
 * the same stream, not the same bits.
 *
 * MG_DROPOUT_POSITIONAL (--layout-invariant-dropout, a megatron.c extension). Whether an element
 * is kept is a pure function of what the element is in the unsharded model and the global batch:
 * (seed, iteration, layer, site, sequence of the global batch, position, hidden index, or head
 * and key). Hence tensor, sequence, pipeline and data parallelism and the micro-batch size do
 * not change the mask (every layout trains the same model), and a resumed run draws the masks
 * the uninterrupted run drew (the checkpoint restores the iteration). In training the iteration
 * is read from backend memory (iteration_at, advanced on the device), so a CUDA graph replays
 * with each step's own masks. Element draws:
 *   counter = (e / 4, sample, iteration, layer << 20 | site << 16 | head), key = (seed, salt)
 *   hidden:    e = s H + h   (position s of the sequence, hidden index h; head 0)
 *   attention: e = s S + t   (query s, key t <= s, of global head `head`)
 * Limits that keep the fields apart (mg_config_validate checks them when dropout is on): seq
 * length <= 65536, fewer than 4096 layers and 65536 heads, S x H < 2^34; iterations count
 * modulo 2^32.
 *
 * Both: lane e % 4 of a Philox block is element e's draw; it is dropped when the draw is below
 * threshold = floor(p 2^32) (probability p to within 2^-32) and kept elements are scaled by
 * 1 / (1 - p), as torch.nn.functional.dropout. A backward recomputes its forward's mask (no
 * memory), given the forward's mg_dropout.
 *
 * Kernels go through rows: mg_dropout_hidden_row / mg_dropout_attention_row give the counter and
 * key words that stay fixed along a row (reading the stream's state once), and
 * mg_dropout_row_block / mg_dropout_row_factor the draws of its elements.
 * Exports: mg_dropout, mg_dropout_row, MG_DROPOUT_*, mg_dropout_init, mg_dropout_stream_init,
 * mg_dropout_factor, mg_dropout_hidden, mg_dropout_attention, mg_dropout_positional_row,
 * mg_dropout_hidden_row, mg_dropout_attention_row, mg_dropout_row_block, mg_dropout_row_factor.
 * Needs: core/philox.h. */
#ifndef MG_DROPOUT_H
#define MG_DROPOUT_H

#include "core/philox.h"

#include <stdint.h>
#include <string.h>

/* Where in a layer a mask applies (the counter's site field). */
enum {
    MG_DROPOUT_ATTENTION = 1, /* the attention probabilities (--attention-dropout) */
    MG_DROPOUT_ATTN_OUT = 2,  /* the attention block's output, before the residual add */
    MG_DROPOUT_MLP_OUT = 3    /* the MLP's (or MoE layer's) output, before the residual add */
};
#define MG_DROPOUT_SALT 0x64726F70u /* "drop": keeps these streams apart from initialisation's */

/* The mask kinds (mg_dropout.mode). */
enum { MG_DROPOUT_STREAM = 0, MG_DROPOUT_POSITIONAL = 1 };

/* One op's dropout: the mask's kind and key, and where the op's rows or heads sit. */
typedef struct {
    uint32_t mode;      /* MG_DROPOUT_STREAM or MG_DROPOUT_POSITIONAL */
    uint32_t threshold; /* dropped when the element's draw is below it: floor(p 2^32) */
    float scale;        /* 1 / (1 - p) */
    /* MG_DROPOUT_STREAM */
    const uint64_t *state; /* backend memory: {seed, offset} of the op's stream */
    uint64_t use;          /* the op's number in the step: it draws at offset state[1] + use */
    /* MG_DROPOUT_POSITIONAL */
    uint32_t seed;               /* --seed */
    uint32_t iteration;          /* the training iteration (completed steps before this one) */
    const int64_t *iteration_at; /* backend memory holding the iteration instead (NULL: the
                                    field above): in training the step-control block's count,
                                    which the step advances on the device, so a graph replays */
    uint32_t site;               /* layer << 20 | site << 16 */
    int32_t sample0; /* the microbatch's first sequence: its index in the global batch */
    int32_t first;   /* hidden: the microbatch row (b S + s) of the op's row 0 (sequence
                        parallelism); attention: the global number of the op's head 0 (tensor
                        parallelism) */
} mg_dropout;

/* The Philox words fixed along one row of an op's mask, and the row's first element number. */
typedef struct {
    uint32_t c1, c2, c3, k0, k1;
    uint64_t e0;
} mg_dropout_row;

static inline void mg_dropout_set_p(mg_dropout *d, double p) {
    double t = p * 4294967296.0;
    d->threshold = t <= 0 ? 0u : t >= 4294967295.0 ? 4294967295u : (uint32_t)t;
    d->scale = (float)(1.0 / (1.0 - p));
}

/* A stream dropout of probability p in [0, 1): the op numbered `use` in the step draws from the
 * stream whose {seed, offset} is at `state` (backend memory). */
static inline mg_dropout mg_dropout_stream_init(double p, const uint64_t *state, uint64_t use) {
    mg_dropout d;
    memset(&d, 0, sizeof d);
    d.mode = MG_DROPOUT_STREAM;
    mg_dropout_set_p(&d, p);
    d.state = state;
    d.use = use;
    return d;
}

/* A positional (layout-invariant) dropout of probability p in [0, 1) at `site` of global layer
 * `layer`. */
static inline mg_dropout mg_dropout_init(double p, uint64_t seed, int64_t iteration, int layer,
                                         int site, int sample0, int first) {
    mg_dropout d;
    memset(&d, 0, sizeof d);
    d.mode = MG_DROPOUT_POSITIONAL;
    mg_dropout_set_p(&d, p);
    d.seed = (uint32_t)seed;
    d.iteration = (uint32_t)iteration;
    d.site = (uint32_t)layer << 20 | (uint32_t)site << 16;
    d.sample0 = sample0;
    d.first = first;
    return d;
}

/* A stream row: the stream's key and offset (read from backend memory once per row). */
MG_PHILOX_FN mg_dropout_row mg_dropout_stream_row(const mg_dropout *d, uint32_t c1, uint64_t e0) {
    mg_dropout_row r;
    const uint64_t seed = d->state[0], off = d->state[1] + d->use;
    r.c1 = c1, r.c2 = (uint32_t)off, r.c3 = (uint32_t)(off >> 32);
    r.k0 = (uint32_t)seed, r.k1 = (uint32_t)(seed >> 32);
    r.e0 = e0;
    return r;
}

/* A positional row of (global sample, global head) from element e0 (head 0 for hidden dropout). */
MG_PHILOX_FN mg_dropout_row mg_dropout_positional_row(const mg_dropout *d, uint32_t sample,
                                                      uint32_t head, uint64_t e0) {
    mg_dropout_row r;
    r.c1 = sample, r.c3 = d->site | head;
    r.c2 = d->iteration_at ? (uint32_t)*d->iteration_at : d->iteration;
    r.k0 = d->seed, r.k1 = MG_DROPOUT_SALT;
    r.e0 = e0;
    return r;
}

/* Row i of an op's hidden-dropout mask over (N, H): microbatch rows of S tokens. */
MG_PHILOX_FN mg_dropout_row mg_dropout_hidden_row(const mg_dropout *d, int i, int S, int H) {
    if (d->mode == MG_DROPOUT_STREAM) return mg_dropout_stream_row(d, 0u, (uint64_t)i * H);
    const int row = d->first + i, b = row / S, s = row % S;
    return mg_dropout_positional_row(d, (uint32_t)(d->sample0 + b), 0u, (uint64_t)s * (uint64_t)H);
}

/* Query s's row of the attention-dropout mask of the op's sequence b, local head h. */
MG_PHILOX_FN mg_dropout_row mg_dropout_attention_row(const mg_dropout *d, int b, int h, int s,
                                                     int S) {
    const uint64_t e0 = (uint64_t)s * (uint64_t)S;
    if (d->mode == MG_DROPOUT_STREAM)
        return mg_dropout_stream_row(d, (uint32_t)b << 16 | (uint32_t)h, e0);
    return mg_dropout_positional_row(d, (uint32_t)(d->sample0 + b), (uint32_t)(d->first + h), e0);
}

/* The draws of the row's elements e = 4 blk .. 4 blk + 3 (blk = e / 4, e counted from the
 * mask's origin, not the row's). */
MG_PHILOX_FN void mg_dropout_row_block(const mg_dropout_row *r, uint32_t blk, uint32_t out[4]) {
    const uint32_t ctr[4] = {blk, r->c1, r->c2, r->c3};
    const uint32_t key[2] = {r->k0, r->k1};
    mg_philox4x32_10(ctr, key, out);
}

/* The factor (scale if kept, 0 if dropped) of the row's element j (e = e0 + j). */
MG_PHILOX_FN float mg_dropout_row_factor(const mg_dropout *d, const mg_dropout_row *r, uint32_t j) {
    uint32_t v[4];
    const uint64_t e = r->e0 + j;
    mg_dropout_row_block(r, (uint32_t)(e >> 2), v);
    const uint32_t l = (uint32_t)e & 3u, x = l == 0 ? v[0] : l == 1 ? v[1] : l == 2 ? v[2] : v[3];
    return x >= d->threshold ? d->scale : 0.0f;
}

/* Positional masks: the factor of element e of (global sample, global head). */
MG_PHILOX_FN float mg_dropout_factor(const mg_dropout *d, uint32_t sample, uint32_t head,
                                     uint64_t e) {
    const mg_dropout_row r = mg_dropout_positional_row(d, sample, head, e);
    return mg_dropout_row_factor(d, &r, 0u);
}

/* Hidden dropout: the factor of hidden index h of the op's row i (N, H), sequences of S tokens. */
MG_PHILOX_FN float mg_dropout_hidden(const mg_dropout *d, int i, int h, int S, int H) {
    const mg_dropout_row r = mg_dropout_hidden_row(d, i, S, H);
    return mg_dropout_row_factor(d, &r, (uint32_t)h);
}

/* Attention dropout: the factor of probability (query s, key t) of the op's sequence b and
 * local head h, sequences of S tokens. */
MG_PHILOX_FN float mg_dropout_attention(const mg_dropout *d, int b, int h, int s, int t, int S) {
    const mg_dropout_row r = mg_dropout_attention_row(d, b, h, s, S);
    return mg_dropout_row_factor(d, &r, (uint32_t)t);
}

#endif
