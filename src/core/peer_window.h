/* Memory that every rank of a group maps into its own address space (comm/comm.h's
 * mg_comm_peer_window_alloc): each rank's buffer as this process's kernels address it, so a
 * kernel writes straight into a peer's memory over NVLink or PCIe, with no collective call
 * (the backend's moe_put_rows). Each rank's buffer holds `bytes` of data, then the flags of a
 * barrier between the ranks that kernels run on the device:
 *   flags  (MG_PEER_MAX x MG_PEER_BARRIERS) uint32: row q is raised by rank q, entry b by the
 *          kernel's block b;
 *   epochs (MG_PEER_BARRIERS) uint32: how far this rank's block b has counted (read and
 *          written by this rank alone, so a replayed CUDA graph counts on).
 * All zero at allocation. Exports: mg_peer_window, MG_PEER_*. Needs: nothing. */
#ifndef MG_CORE_PEER_WINDOW_H
#define MG_CORE_PEER_WINDOW_H

#include <stddef.h>
#include <stdint.h>

#define MG_PEER_MAX        64 /* ranks of a group */
#define MG_PEER_BARRIERS   32 /* blocks of a kernel that meet the peers' */
#define MG_PEER_FLAG_BYTES ((size_t)(MG_PEER_MAX + 1) * MG_PEER_BARRIERS * 4)

typedef struct {
    int n, rank;             /* ranks of the group, this one's index */
    size_t bytes;            /* data bytes of each buffer; the flags follow */
    void *base[MG_PEER_MAX]; /* rank q's buffer, addressed from this process */
    /* a word the kernels' waits read (device-visible host memory), or NULL: nonzero once the
     * world failed (a peer gone, a timeout), so that a wait for a peer that will never come
     * gives up and the streams drain instead of holding the host for ever */
    const volatile uint32_t *abort;
    double timeout_s; /* a host's wait for a peer (the CPU backend's) gives up after this: the
                         world's timeout; 0: never */
    /* called now and then while a host waits for a peer (NULL: nothing): the MPI backend's
     * drives its progress, so that this rank's own messages in flight (a pipeline's sends) move
     * while it waits, and the peer it waits for is not itself waiting on them */
    void (*progress)(void *ctx);
    void *progress_ctx;
} mg_peer_window;

#endif
