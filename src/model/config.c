#include "model/config.h"

#include "core/flags.h"

static int round_up(int x, int to) {
    return (x + to - 1) / to * to;
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
    if (tp_rank < 0 || tp_rank >= m->tp)
        return MG_FAIL(MG_ERR_INTERNAL, "tensor-parallel rank %d of %d", tp_rank, m->tp);
    /* Megatron pads the vocabulary to a multiple of make-vocab-size-divisible-by x TP */
    int div = c->make_vocab_size_divisible_by > 0 ? c->make_vocab_size_divisible_by : 1;
    m->V = round_up(c->vocab_size, div * m->tp);
    m->norm = c->normalization;
    m->pos = c->position_embedding;
    m->swiglu = c->swiglu;
    m->bias = !c->disable_bias_linear;
    m->tied = !c->untie_embeddings;
    m->eps = (float)c->norm_epsilon;
    m->rope_base = c->rotary_base;
    m->init_std = c->init_method_std;
    m->seed = (uint64_t)c->seed;
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
    return MG_OK;
}

int64_t mg_model_config_num_params(const mg_model_config *m) {
    int64_t H = m->H, nb = m->bias;
    int64_t norm = m->norm == MG_NORM_LAYERNORM ? 2 * H : H;
    int64_t layer = norm + H * m->qkv_dim + nb * m->qkv_dim + (int64_t)m->attn_dim * H + nb * H +
                    norm + (int64_t)m->fc1_dim * H + nb * m->fc1_dim + (int64_t)m->F * H + nb * H;
    int64_t n = (int64_t)m->V * H + m->L * layer + norm;
    if (m->pos == MG_POS_LEARNED) n += (int64_t)m->P * H;
    if (!m->tied) n += (int64_t)m->V * H;
    return n;
}
