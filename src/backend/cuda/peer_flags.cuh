/* Internal to the .cu files that signal between ranks through peer-mapped memory
 * (core/peer_window.h): where a window keeps its flags and epochs. moe_put.cu's barrier and
 * peer_reduce.cu's hand-offs. CUDA C++ only. */
#ifndef MG_BACKEND_CUDA_PEER_FLAGS_CUH
#define MG_BACKEND_CUDA_PEER_FLAGS_CUH

#include "core/peer_window.h"

#include <stddef.h>
#include <stdint.h>

/* Entry b of the flags rank q raises in the buffer at `base` (whose data is `bytes` long); q =
 * MG_PEER_MAX names the buffer owner's own epochs. */
static __device__ __forceinline__ volatile uint32_t *mg_peer_flag(char *base, size_t bytes, int q,
                                                                  int b) {
    return reinterpret_cast<volatile uint32_t *>(base + bytes) + (size_t)q * MG_PEER_BARRIERS + b;
}

/* Waits until `flag` has counted to `epoch` (wrapping compare). */
static __device__ __forceinline__ void mg_peer_wait(volatile uint32_t *flag, uint32_t epoch) {
    while ((int32_t)(*flag - epoch) < 0) {
    }
}

#endif
