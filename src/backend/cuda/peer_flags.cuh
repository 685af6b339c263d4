/* Internal to the .cu files that signal between ranks through peer-mapped memory
 * (core/peer_window.h): where a window keeps its flags and epochs. moe_put.cu's barrier and
 * peer_reduce.cu's hand-offs. CUDA C++ only. */
#ifndef MG_BACKEND_CUDA_PEER_FLAGS_CUH
#define MG_BACKEND_CUDA_PEER_FLAGS_CUH

#include "core/peer_window.h"

#include <stddef.h>
#include <stdint.h>

/* Every rank's buffer as this process addresses it, and the world's abort word (core/
 * peer_window.h), by value for a kernel. */
typedef struct {
    char *base[MG_PEER_MAX];
    const volatile uint32_t *abort;
} mg_peer_bases;

/* pb from pw (entries past pw->n NULL); false where pw is no window. */
static inline bool mg_peer_bases_of(const mg_peer_window *pw, mg_peer_bases *pb) {
    if (!pw || pw->n < 1 || pw->n > MG_PEER_MAX || pw->rank < 0 || pw->rank >= pw->n) return false;
    for (int q = 0; q < MG_PEER_MAX; q++) pb->base[q] = q < pw->n ? (char *)pw->base[q] : NULL;
    pb->abort = pw->abort;
    return true;
}

/* Entry b of the flags rank q raises in the buffer at `base` (whose data is `bytes` long); q =
 * MG_PEER_MAX names the buffer owner's own epochs. */
static __device__ __forceinline__ volatile uint32_t *mg_peer_flag(char *base, size_t bytes, int q,
                                                                  int b) {
    return reinterpret_cast<volatile uint32_t *>(base + bytes) + (size_t)q * MG_PEER_BARRIERS + b;
}

/* Waits until `flag` has counted to `epoch` (wrapping compare), or the world failed: *abort
 * (host memory, read every 64 polls; NULL: never) is nonzero, and the peer will not come. */
static __device__ __forceinline__ void mg_peer_wait(volatile uint32_t *flag, uint32_t epoch,
                                                    const volatile uint32_t *abort) {
    for (unsigned i = 1; (int32_t)(*flag - epoch) < 0; i++)
        if ((i & 63u) == 0 && abort && *abort) return;
}

#endif
