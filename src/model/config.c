#include "model/config.h"

#include "config/flags.h"

#include <stdlib.h>
#include <string.h>

static int round_up(int x, int to) {
    return (x + to - 1) / to * to;
}

static mg_status moe_from(mg_moe_config *m, const mg_config *c, bool swiglu) {
    memset(m, 0, sizeof *m);
    m->ep = c->expert_model_parallel_size > 1 ? c->expert_model_parallel_size : 1;
    if (c->num_experts <= 0) return MG_OK;
    m->E = c->num_experts;
    m->k = c->moe_router_topk;
    m->F = c->moe_ffn_hidden_size > 0 ? c->moe_ffn_hidden_size : c->ffn_hidden_size;
    m->fc1 = swiglu ? 2 * m->F : m->F;
    m->shared_F =
        c->moe_shared_expert_intermediate_size > 0 ? c->moe_shared_expert_intermediate_size : 0;
    m->shared_fc1 = swiglu ? 2 * m->shared_F : m->shared_F;
    if (m->E % m->ep || m->k < 1 || m->k > m->E || m->F <= 0)
        return MG_FAIL(MG_ERR_USAGE, "MoE shape: %d experts, top-%d, FFN %d over %d ranks", m->E,
                       m->k, m->F, m->ep);
    m->E_l = m->E / m->ep;
    uint8_t *is_moe = malloc((size_t)c->num_layers);
    if (!is_moe) return MG_FAIL(MG_ERR_NOMEM, "out of memory");
    mg_status st = mg_config_moe_layers(c, is_moe, c->num_layers);
    for (int l = 0; st == MG_OK && l < c->num_layers; l++) m->n_layers += is_moe[l];
    free(is_moe);
    MG_CHECK(st);
    m->capacity_factor = c->moe_expert_capacity_factor;
    m->pad = c->moe_pad_expert_input_to_capacity;
    m->expert_bias = c->moe_router_enable_expert_bias;
    m->bias_rate = (float)c->moe_router_bias_update_rate;
    m->dispatcher = c->moe_token_dispatcher_type;
    m->force_balance = c->moe_router_force_load_balancing;
    const double budget = mg_config_rank_capacity(c);
    m->budget = budget > 0 ? budget : 0;
    m->echo = c->moe_enable_echo;
    m->shared_overlap = c->moe_shared_expert_overlap;
    if (m->echo) m->echo_p = mg_config_echo_params(c);
    m->route = (mg_moe_routing){
        .E = m->E,
        .k = m->k,
        .score = c->moe_router_score_function,
        .pre_softmax = c->moe_router_pre_softmax,
        .groups = c->moe_router_num_groups > 0 ? c->moe_router_num_groups : 0,
        .group_k = c->moe_router_group_topk > 0 ? c->moe_router_group_topk : 0,
        .scaling =
            c->moe_router_topk_scaling_factor > 0 ? (float)c->moe_router_topk_scaling_factor : 1.0f,
        .bias = m->expert_bias,
        .drop = c->moe_token_drop_policy,
        .balancing = c->moe_router_load_balancing_type,
        .aux_coeff = (float)c->moe_aux_loss_coeff,
        .z_coeff = (float)c->moe_z_loss_coeff,
    };
    return MG_OK;
}

mg_status mg_model_config_from(mg_model_config *m, const mg_config *c, int tp_rank) {
    m->L = c->num_layers;
    m->H = c->hidden_size;
    m->nq = c->num_attention_heads;
    m->ng = c->group_query_attention && c->num_query_groups > 0 ? c->num_query_groups : m->nq;
    m->hd = c->kv_channels > 0 ? c->kv_channels : (m->nq ? m->H / m->nq : 0);
    m->F = c->ffn_hidden_size > 0 ? c->ffn_hidden_size : 4 * m->H;
    m->S = c->seq_length;
    m->P = c->max_position_embeddings > 0 ? c->max_position_embeddings : m->S;
    MG_CHECK(mg_config_check_tp(c));
    m->tp = c->tensor_model_parallel_size;
    m->tp_rank = tp_rank;
    m->sp = c->sequence_parallel && m->tp > 1;
    /* the bulk wgrad overlap is a reordering with the same sums: on under TP unless refused */
    m->tp_bulk_wgrad = !c->no_tp_comm_bulk_wgrad && m->tp > 1;
    m->tp_overlap_ag = c->tp_comm_overlap && !c->no_tp_comm_overlap_ag && m->sp;
    m->tp_overlap_rs = c->tp_comm_overlap && !c->no_tp_comm_overlap_rs && m->tp > 1;
    if (tp_rank < 0 || tp_rank >= m->tp)
        return MG_FAIL(MG_ERR_INTERNAL, "tensor-parallel rank %d of %d", tp_rank, m->tp);
    /* Megatron pads the vocabulary to a multiple of make-vocab-size-divisible-by x TP */
    int div = c->make_vocab_size_divisible_by > 0 ? c->make_vocab_size_divisible_by : 1;
    m->V = round_up(c->vocab_size, div * m->tp);
    m->norm = c->normalization;
    m->norm_1p = c->apply_layernorm_1p;
    m->pos = c->position_embedding;
    m->swiglu = c->swiglu;
    m->bias = !c->disable_bias_linear;
    m->tied = !c->untie_embeddings;
    m->eps = (float)c->norm_epsilon;
    m->rope_base = c->rotary_base;
    m->init_std = c->init_method_std;
    m->seed = (uint64_t)c->seed;
    m->attn_dropout = c->attention_dropout;
    m->hidden_dropout = c->hidden_dropout;
    m->dropout_positional = c->layout_invariant_dropout;
    m->fp8_bwd = strcmp(c->fp8_format, "hybrid") == 0; /* e5m2 */
    m->fp8_len = c->fp8_amax_history_len;
    m->fp8_margin = c->fp8_margin;
    m->fp8_algo = strcmp(c->fp8_amax_compute_algo, "max") == 0 ? 0 : 1; /* mg_fp8_amax_algo */
    m->fp8_current = strcmp(c->fp8_recipe, "tensorwise") == 0;
    m->fp8_block = strcmp(c->fp8_recipe, "blockwise") == 0;
    m->fp8_wgrad = !c->no_fp8_wgrad;
    m->fp8_params = c->fp8_param_gather && mg_config_fp8(c);
    m->rc_modules = mg_config_recompute_modules(c);
    m->rc_full = !mg_config_recompute_full(c)                  ? MG_RC_NONE
                 : strcmp(c->recompute_method, "uniform") == 0 ? MG_RC_UNIFORM
                                                               : MG_RC_BLOCK;
    m->rc_layers = c->recompute_num_layers;
    m->rc_distribute = c->distribute_saved_activations && m->tp > 1 && !m->sp;
    if (m->L <= 0 || m->H <= 0 || m->nq <= 0 || m->hd <= 0 || m->S <= 0 || m->V <= 0 || m->F <= 0)
        return MG_FAIL(MG_ERR_USAGE,
                       "model shape incomplete: layers %d, hidden %d, heads %d, "
                       "seq %d, vocab %d must all be positive",
                       m->L, m->H, m->nq, m->S, m->V);
    if (m->nq % m->ng)
        return MG_FAIL(MG_ERR_USAGE,
                       "--num-attention-heads %d is not divisible by "
                       "--num-query-groups %d",
                       m->nq, m->ng);
    if (m->pos == MG_POS_ROPE && m->hd % 2)
        return MG_FAIL(MG_ERR_USAGE, "rotary embeddings need an even head dimension, got %d",
                       m->hd);
    m->rd = mg_config_rotary_dim(m->hd, c->rotary_percent);
    if (m->pos == MG_POS_ROPE && (m->rd < 2 || m->rd % 2 || m->rd > m->hd))
        return MG_FAIL(MG_ERR_USAGE,
                       "--rotary-percent %g gives %d rotated channels of a head of %d; they must "
                       "be even and positive",
                       c->rotary_percent, m->rd, m->hd);
    m->qkv_dim = m->ng * (m->nq / m->ng + 2) * m->hd;
    m->attn_dim = m->nq * m->hd;
    m->fc1_dim = m->swiglu ? 2 * m->F : m->F;
    m->nq_l = m->nq / m->tp;
    m->ng_l = m->ng / m->tp;
    m->qkv_l = m->qkv_dim / m->tp;
    m->attn_l = m->attn_dim / m->tp;
    m->F_l = m->F / m->tp;
    m->fc1_l = m->fc1_dim / m->tp;
    m->V_l = m->V / m->tp;
    m->v0 = tp_rank * m->V_l;
    MG_CHECK(moe_from(&m->moe, c, m->swiglu));
    /* the routed experts compute in fp8 with the rest of an fp8 layer, but not with ECHO (its
     * spare slots' weights arrive during the layer), nor with blockwise scaling (no block-scaled
     * grouped products yet) */
    m->fp8_experts = mg_config_fp8(c) && m->moe.E > 0 && !m->moe.echo && !m->fp8_block;
    return MG_OK;
}

void mg_model_config_set_ep(mg_model_config *m, int ep_rank) {
    m->moe.ep_rank = ep_rank;
    m->moe.e0 = ep_rank * m->moe.E_l;
}

int64_t mg_model_config_num_params(const mg_model_config *m) {
    int64_t H = m->H, nb = m->bias;
    int64_t norm = m->norm == MG_NORM_LAYERNORM ? 2 * H : H;
    int64_t layer = norm + H * m->qkv_dim + nb * m->qkv_dim + (int64_t)m->attn_dim * H + nb * H +
                    norm + (int64_t)m->fc1_dim * H + nb * m->fc1_dim + (int64_t)m->F * H + nb * H;
    /* an MoE layer's MLP: the router, E experts, the shared experts */
    const mg_moe_config *e = &m->moe;
    int64_t dense_mlp = (int64_t)m->fc1_dim * H + nb * m->fc1_dim + (int64_t)m->F * H + nb * H;
    int64_t moe_mlp = (int64_t)e->E * H +
                      e->E * ((int64_t)e->fc1 * H + nb * e->fc1 + (int64_t)e->F * H + nb * H) +
                      (e->shared_F ? (int64_t)e->shared_fc1 * H + nb * e->shared_fc1 +
                                         (int64_t)e->shared_F * H + nb * H
                                   : 0);
    int64_t n =
        (int64_t)m->V * H + m->L * layer + norm + (int64_t)e->n_layers * (moe_mlp - dense_mlp);
    if (m->pos == MG_POS_LEARNED) n += (int64_t)m->P * H;
    if (!m->tied) n += (int64_t)m->V * H;
    return n;
}
