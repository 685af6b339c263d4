/* The backend --device names (train/backend_select.h). */
#include "train/backend_select.h"

#include "comm/comm.h"
#include "core/log.h"

#include <stdio.h>
#include <string.h>

#ifdef MG_HAVE_CUDA
/* What the CUDA backend cannot run, said before any GPU work: attention's head size (cuDNN's
 * fused attention and our kernels both stop at 256). */
static mg_status cuda_limits(const mg_config *c) {
    if (c->kv_channels > MG_CUDA_ATTENTION_MAX_HD)
        return MG_FAIL(MG_ERR_USAGE,
                       "--kv-channels %d: attention on CUDA takes head sizes 1 to %d; use more "
                       "--num-attention-heads for this --hidden-size, or --device cpu",
                       c->kv_channels, MG_CUDA_ATTENTION_MAX_HD);
    return MG_OK;
}
#endif

mg_status mg_train_backend_create(mg_config *c, const char *purpose, mg_backend **be, int *gpu) {
    *gpu = -1;
#ifdef MG_HAVE_CUDA
    const bool want_cuda = !strcmp(c->device, "cuda"), is_auto = !strcmp(c->device, "auto");
    if (want_cuda) MG_CHECK(cuda_limits(c));
    if (want_cuda || is_auto) {
        mg_launch_info li;
        MG_CHECK(mg_launch_detect(&li));
        /* --fp16 computes in fp16 (loss scaling: train/grad_scaler.h), else bf16 */
        mg_status st = mg_backend_cuda_create_dtype(be, li.local_rank, c->fp16 ? MG_F16 : MG_BF16);
        if (st == MG_OK && is_auto && cuda_limits(c) != MG_OK) {
            (*be)->destroy(*be);
            *be = NULL;
            return MG_ERR_USAGE;
        }
        if (st == MG_OK) {
            *gpu = li.local_rank;
            snprintf(c->device, sizeof c->device, "cuda");
            return MG_OK;
        }
        /* only "no usable GPU" falls back; a GPU that fails otherwise is an error */
        if (!is_auto || st != MG_ERR_UNSUPPORTED) return st;
        mg_log_info("> --device auto: %s; %s on the cpu backend", mg_error_message(), purpose);
        mg_error_clear();
    }
#else
    if (!strcmp(c->device, "cuda")) /* mg_config_validate already refuses it */
        return MG_FAIL(MG_ERR_UNSUPPORTED, "this build has no CUDA backend (nvcc/cuBLAS were not "
                                           "found when it was built); use --device cpu");
#endif
    snprintf(c->device, sizeof c->device, "cpu");
    return mg_backend_cpu_create(be, c->num_threads);
}
