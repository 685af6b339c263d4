/* The CPU attention tests' reference (test_cpu_attention.c, test_dropout.c): naive causal
 * attention in double over the fused QKV layout of backend.h.
 * Exports: mg_test_qkv_width, mg_test_attention_naive. Needs: core/dropout. */
#ifndef MG_TESTS_ATTENTION_TEST_UTIL_H
#define MG_TESTS_ATTENTION_TEST_UTIL_H

#include "core/dropout.h"

#include <stddef.h>

/* Elements of one token's fused QKV row: ng groups of (nq/ng queries, k, v) heads of hd. */
size_t mg_test_qkv_width(int nq, int ng, int hd);

/* out (B*S, nq*hd) = softmax(q k^T / sqrt(hd), causal) v, query head h reading the k, v of group
 * h / (nq/ng), each probability times its dropout factor (core/dropout.h; d NULL: none). S <= 256.
 */
void mg_test_attention_naive(float *out, const float *qkv, int B, int S, int nq, int ng, int hd,
                             const mg_dropout *d);

#endif
