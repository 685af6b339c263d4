/* Megatron's defaults of every mg_config field and the one-process layout (declared in
 * config/flags.h). */
#include "config/flags.h"

#include <stdio.h>
#include <string.h>

void mg_config_single_process(mg_config *c) {
    c->world_size = 1;
    c->tensor_model_parallel_size = 1;
    c->sequence_parallel = false;
    c->pipeline_model_parallel_size = 1;
    c->virtual_pipeline_model_parallel_size = -1;
    c->num_layers_per_virtual_pipeline_stage = -1;
    c->microbatch_group_size_per_vp_stage = -1;
    c->decoder_first_pipeline_num_layers = -1;
    c->recompute_num_layers = -1;
    snprintf(c->fp8_recipe, sizeof c->fp8_recipe, "delayed");
    snprintf(c->fp8_amax_compute_algo, sizeof c->fp8_amax_compute_algo, "most_recent");
    c->fp8_amax_history_len = 1;
    c->num_layers_at_start_in_bf16 = 1;
    c->num_layers_at_end_in_bf16 = 1;
    c->decoder_last_pipeline_num_layers = -1;
    c->account_for_embedding_in_pipeline_split = false;
    c->account_for_loss_in_pipeline_split = false;
    c->context_parallel_size = 1;
    c->expert_model_parallel_size = 1;
    c->expert_tensor_parallel_size = -1;
}

void mg_config_defaults(mg_config *c) {
    memset(c, 0, sizeof *c); /* also zeroes padding and string tails: configs compare bytewise */
    c->num_layers = -1;
    c->hidden_size = -1;
    c->ffn_hidden_size = -1;
    c->num_attention_heads = -1;
    c->kv_channels = -1;
    c->group_query_attention = false;
    c->num_query_groups = -1;
    c->seq_length = -1;
    c->max_position_embeddings = -1;
    c->position_embedding = MG_POS_LEARNED;
    c->rotary_base = 10000;
    c->rotary_percent = 1.0;
    c->normalization = MG_NORM_LAYERNORM;
    c->norm_epsilon = 1e-5;
    c->init_method_std = 0.02;
    c->vocab_size = -1;
    c->make_vocab_size_divisible_by = 128;

    c->micro_batch_size = 1;
    c->global_batch_size = -1;
    c->train_iters = -1;
    c->lr = -1; /* required: Megatron's None */
    c->min_lr = 0;
    c->lr_decay_style = MG_LR_LINEAR;
    snprintf(c->ckpt_format, sizeof c->ckpt_format, "torch_dist");
    c->lr_warmup_iters = 0;
    c->lr_warmup_fraction = -1;
    c->lr_warmup_init = 0;
    c->lr_decay_iters = -1;
    c->train_samples = -1;
    c->lr_decay_samples = -1;
    c->lr_wsd_decay_iters = -1;
    c->lr_wsd_decay_samples = -1;
    c->decoupled_lr = -1;
    c->decoupled_min_lr = -1;
    c->start_weight_decay = -1;
    c->end_weight_decay = -1;
    c->weight_decay = 0.01;
    c->adam_beta1 = 0.9;
    c->adam_beta2 = 0.999;
    c->adam_eps = 1e-8;
    c->clip_grad = 1.0;
    c->attention_dropout = 0.1;
    c->hidden_dropout = 0.1;
    c->seed = 1234;
    c->cuda_graph_warmup_steps = 3;
    c->initial_loss_scale = 4294967296.0; /* 2^32 */
    c->min_loss_scale = 1.0;
    c->loss_scale_window = 1000;
    c->hysteresis = 2;

    c->log_interval = 100;
    c->logging_level = -1;
    c->tensorboard_log_interval = 1;
    c->tensorboard_queue_size = 1000;
    c->eval_interval = 1000;
    c->eval_iters = 100;
    c->exit_interval = -1;
    c->save_interval = -1;
    c->mock_data = false;
    strcpy(c->split, "969, 30, 1"); /* Megatron's legacy default with --data-path */
    strcpy(c->device, "auto");      /* resolved by the trainer (train/trainer.c) */
    c->num_threads = -1;
    c->distributed_timeout_minutes = 10;
    mg_config_single_process(c);
    c->ddp_bucket_size = -1;

    c->num_experts = 0;
    strcpy(c->moe_layer_freq, "1");
    c->moe_ffn_hidden_size = -1;
    c->moe_router_topk = 2;
    c->moe_router_bias_update_rate = 1e-3;
    c->moe_expert_capacity_factor = -1;
    c->moe_expert_rank_capacity_factor = -1;
    c->moe_received_token_capacity = -1;
    c->moe_num_echo_experts = -1;
}
