/* config.json for Hugging Face transformers (hf_config.h has the families and their conditions). */
#include "model/hf_config.h"

#include <cjson/cJSON.h>
#include <stdlib.h>

#define GPT2_EOD 50256 /* <|endoftext|> of the GPT-2 tokenizer */

/* What keeps model c out of a family, or NULL when it fits. */
static const char *gpt2_mismatch(const mg_model_config *c) {
    if (c->moe.E > 0) return "it has MoE layers (GPT2LMHeadModel has none)";
    if (c->norm != MG_NORM_LAYERNORM) return "GPT-2 uses LayerNorm, this model RMSNorm";
    if (c->swiglu) return "GPT-2's MLP is GELU, this model's SwiGLU";
    if (!c->bias) return "GPT-2 has biases; this model was trained with --disable-bias-linear";
    if (c->ng != c->nq) return "GPT-2 has no grouped-query attention";
    if (c->hd * c->nq != c->H) return "GPT-2's head size is hidden / heads (--kv-channels differs)";
    return NULL;
}

static const char *llama_mismatch(const mg_model_config *c) {
    if (c->norm != MG_NORM_RMSNORM) return "Llama uses RMSNorm, this model LayerNorm";
    if (c->pos != MG_POS_ROPE)
        return "Llama uses rotary embeddings (--position-embedding-type rope)";
    if (!c->swiglu) return "Llama's MLP is SwiGLU (--swiglu)";
    return NULL;
}

static const char *mixtral_mismatch(const mg_model_config *c) {
    const mg_moe_config *m = &c->moe;
    if (m->n_layers != c->L) return "Mixtral has MoE layers only (--moe-layer-freq 1)";
    if (c->bias) return "Mixtral has no biases (--disable-bias-linear)";
    if (m->route.score != MG_MOE_SCORE_SOFTMAX || m->route.pre_softmax)
        return "Mixtral routes by a softmax over the top k (no --moe-router-pre-softmax, "
               "--moe-router-score-function softmax)";
    if (m->route.groups > 0) return "Mixtral has no group-limited routing";
    if (m->route.scaling != 1.0f) return "Mixtral has no --moe-router-topk-scaling-factor";
    if (m->expert_bias) return "Mixtral has no expert bias (--moe-router-enable-expert-bias)";
    if (m->shared_F > 0) return "Mixtral has no shared experts";
    return NULL;
}

static void add_common(cJSON *j, const mg_model_config *c, const char *dtype, bool gpt2_tokenizer) {
    cJSON_AddNumberToObject(j, "vocab_size", c->V);
    cJSON_AddNumberToObject(j, "initializer_range", c->init_std);
    cJSON_AddBoolToObject(j, "tie_word_embeddings", c->tied);
    cJSON_AddBoolToObject(j, "use_cache", true);
    cJSON_AddStringToObject(j, "torch_dtype", dtype);
    if (gpt2_tokenizer) {
        cJSON_AddNumberToObject(j, "bos_token_id", GPT2_EOD);
        cJSON_AddNumberToObject(j, "eos_token_id", GPT2_EOD);
    }
}

/* Llama's and Mixtral's shared fields. */
static void add_llama_like(cJSON *j, const mg_model_config *c, const mg_config *cfg, int ffn) {
    cJSON_AddNumberToObject(j, "hidden_size", c->H);
    cJSON_AddNumberToObject(j, "intermediate_size", ffn);
    cJSON_AddNumberToObject(j, "num_hidden_layers", c->L);
    cJSON_AddNumberToObject(j, "num_attention_heads", c->nq);
    cJSON_AddNumberToObject(j, "num_key_value_heads", c->ng);
    cJSON_AddNumberToObject(j, "head_dim", c->hd);
    cJSON_AddNumberToObject(j, "max_position_embeddings", c->S);
    cJSON_AddNumberToObject(j, "rms_norm_eps", cfg->norm_epsilon);
    cJSON_AddNumberToObject(j, "rope_theta", c->rope_base);
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    cJSON_AddNumberToObject(j, "attention_dropout", 0.0);
}

mg_status mg_hf_config_json(const mg_gpt *g, const mg_config *cfg, const char *dtype,
                            bool gpt2_tokenizer, char **json, const char **family) {
    const mg_model_config *c = &g->cfg;
    *json = NULL;
    /* the family the model's shape points to, and what keeps it out, if anything */
    const char *why;
    if (c->pos == MG_POS_LEARNED)
        *family = "GPT2LMHeadModel", why = gpt2_mismatch(c);
    else if (c->moe.E > 0)
        *family = "MixtralForCausalLM", why = llama_mismatch(c),
        why = why ? why : mixtral_mismatch(c);
    else
        *family = "LlamaForCausalLM", why = llama_mismatch(c);
    if (why)
        return MG_FAIL(MG_ERR_UNSUPPORTED, "this %smodel has no Hugging Face equivalent (%s): %s",
                       c->moe.E > 0 ? "MoE " : "", *family, why);
    cJSON *j = cJSON_CreateObject();
    cJSON_AddItemToArray(cJSON_AddArrayToObject(j, "architectures"), cJSON_CreateString(*family));
    if (c->pos == MG_POS_LEARNED) {
        cJSON_AddStringToObject(j, "model_type", "gpt2");
        cJSON_AddNumberToObject(j, "n_embd", c->H);
        cJSON_AddNumberToObject(j, "n_layer", c->L);
        cJSON_AddNumberToObject(j, "n_head", c->nq);
        cJSON_AddNumberToObject(j, "n_inner", c->F);
        cJSON_AddNumberToObject(j, "n_positions", c->P);
        cJSON_AddNumberToObject(j, "n_ctx", c->P);
        cJSON_AddStringToObject(j, "activation_function", "gelu_new"); /* the tanh form */
        cJSON_AddNumberToObject(j, "layer_norm_epsilon", cfg->norm_epsilon);
        cJSON_AddNumberToObject(j, "resid_pdrop", 0.0);
        cJSON_AddNumberToObject(j, "embd_pdrop", 0.0);
        cJSON_AddNumberToObject(j, "attn_pdrop", 0.0);
    } else if (c->moe.E > 0) {
        cJSON_AddStringToObject(j, "model_type", "mixtral");
        add_llama_like(j, c, cfg, c->moe.F);
        cJSON_AddNumberToObject(j, "num_local_experts", c->moe.E);
        cJSON_AddNumberToObject(j, "num_experts_per_tok", c->moe.k);
        cJSON_AddNumberToObject(j, "router_aux_loss_coef", cfg->moe_aux_loss_coeff);
        cJSON_AddBoolToObject(j, "output_router_logits", false);
        cJSON_AddNullToObject(j, "sliding_window");
    } else {
        cJSON_AddStringToObject(j, "model_type", "llama");
        add_llama_like(j, c, cfg, c->F);
        cJSON_AddBoolToObject(j, "attention_bias", c->bias);
        cJSON_AddBoolToObject(j, "mlp_bias", c->bias);
    }
    add_common(j, c, dtype, gpt2_tokenizer);
    *json = cJSON_Print(j);
    cJSON_Delete(j);
    return *json ? MG_OK : MG_FAIL(MG_ERR_NOMEM, "out of memory writing config.json");
}
