/* The CPU attention tests' reference (test_cpu_attention.c, test_dropout.c): naive causal
 * attention in double over the fused QKV layout of backend.h.
 * Exports: mg_test_qkv_width, mg_test_attention_naive, mg_test_attention_naive_doc. Needs:
 * core/dropout. */
#ifndef MG_TESTS_ATTENTION_TEST_UTIL_H
#define MG_TESTS_ATTENTION_TEST_UTIL_H

#include "core/dropout.h"

#include <stddef.h>
#include <stdint.h>

/* Elements of one token's fused QKV row: ng groups of (nq/ng queries, k, v) heads of hd. */
size_t mg_test_qkv_width(int nq, int ng, int hd);

/* out (B*S, nq*hd) = softmax(q k^T / sqrt(hd), causal) v, query head h reading the k, v of group
 * h / (nq/ng), each probability times its dropout factor (core/dropout.h; d NULL: none). S <= 256.
 */
void mg_test_attention_naive(float *out, const float *qkv, int B, int S, int nq, int ng, int hd,
                             const mg_dropout *d);
/* The same with the document mask of packed sequences (doc_start (B*S) or NULL: causal): query s
 * of sequence b sees keys doc_start[b*S + s] .. s (backend.h). */
void mg_test_attention_naive_doc(float *out, const float *qkv, int B, int S, int nq, int ng, int hd,
                                 const mg_dropout *d, const int32_t *doc_start);

#endif
