/* The parallel layout's arithmetic and Megatron's rules for splitting a model over tensor
 * parallelism: the helpers the config checks (config_check.c, config_moe.c), the model
 * (model/config.c) and the front ends share. Calls nothing of the other config checks, so they
 * can all call it. Exports: mg_config_check_tp, mg_config_data_parallel_size. Needs: core/status.
 */
#include "config/flags.h"

#include <stdint.h>

#define USAGE(...) MG_FAIL(MG_ERR_USAGE, __VA_ARGS__)

mg_status mg_config_check_tp(const mg_config *c) {
    const int T = c->tensor_model_parallel_size;
    if (T < 1) return USAGE("--tensor-model-parallel-size must be positive, got %d", T);
    const int heads = c->num_attention_heads;
    const int groups = c->num_query_groups > 0 ? c->num_query_groups : heads;
    /* Megatron's TransformerConfig words */
    const struct {
        const char *what;
        int v;
    } dims[] = {{"num_attention_heads", heads}, {"num_query_groups", groups}};
    for (int i = 0; i < 2; i++)
        if (dims[i].v % T)
            return USAGE("%s (%d) must be a multiple of tensor_model_parallel_size (%d); choose a "
                         "--tensor-model-parallel-size that divides it",
                         dims[i].what, dims[i].v, T);
    if (c->ffn_hidden_size > 0 && c->ffn_hidden_size % T)
        return USAGE(
            "--ffn-hidden-size %d is not divisible by --tensor-model-parallel-size %d (the "
            "MLP is split over the tensor-parallel ranks)",
            c->ffn_hidden_size, T);
    if (c->sequence_parallel && T > 1 && c->seq_length % T)
        return USAGE("--sequence-parallel splits the sequence over the tensor-parallel ranks: "
                     "--seq-length %d is not divisible by --tensor-model-parallel-size %d",
                     c->seq_length, T);
    return MG_OK;
}

int mg_config_data_parallel_size(const mg_config *c) {
    int64_t mp = (int64_t)c->tensor_model_parallel_size * c->pipeline_model_parallel_size *
                 c->context_parallel_size;
    /* sizes the layout checks refuse later (check_runtime) count as one rank */
    if (c->world_size < 1 || mp < 1 || c->world_size % mp) return 1;
    return (int)(c->world_size / mp);
}
