/* Internal to attention.cu and attention_generic.cu: our attention kernels for any head dim from 1
 * to MG_ATT_GENERIC_MAX_HD, which attention.cu runs for the head dims its tensor-core kernels are
 * not built for (the contract of both entries: backend_ops.h's attention_forward and
 * attention_backward). `lse` is the same (B, nq, S) fp32 base-2 logsumexp attention.cu keeps in
 * `saved`; D (B, nq, S) fp32 is dO . O per row, computed by attention.cu's backward before it
 * calls the generic one. Instantiated for __nv_bfloat16 and __half. No allocation, no host
 * synchronisation; every pointer needs only its element's natural alignment.
 * Exports: MG_ATT_GENERIC_MAX_HD, mg_cuda_attention_generic_forward,
 * mg_cuda_attention_generic_backward. Needs: cuda_common.cuh, core/dropout.h. CUDA C++ only. */
#ifndef MG_BACKEND_CUDA_ATTENTION_GENERIC_CUH
#define MG_BACKEND_CUDA_ATTENTION_GENERIC_CUH

#include "backend/cuda/cuda_common.cuh"

#include "backend/backend.h"
#include "core/dropout.h"

#include <stdint.h>

#define MG_ATT_GENERIC_MAX_HD MG_CUDA_ATTENTION_MAX_HD /* backend/backend.h */

/* out (B*S, nq*hd) and lse (B, nq, S) from qkv (B*S, ng*(r+2)*hd); 1 <= hd <= 256. */
template <typename h16>
mg_status mg_cuda_attention_generic_forward(mg_backend *be, h16 *out, float *lse, const h16 *qkv,
                                            int B, int S, int nq, int ng, int hd,
                                            const mg_dropout *drop, const int32_t *doc_start);

/* dqkv (B*S, ng*(r+2)*hd), every element overwritten, from dout, qkv, the forward's lse and
 * D = rowsum(dO * O). */
template <typename h16>
mg_status mg_cuda_attention_generic_backward(mg_backend *be, h16 *dqkv, const h16 *dout,
                                             const h16 *qkv, const float *lse, const float *D,
                                             int B, int S, int nq, int ng, int hd,
                                             const mg_dropout *drop, const int32_t *doc_start);

#endif
