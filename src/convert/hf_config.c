/* config.json for Hugging Face transformers, both ways (hf_config.h has the families and their
 * conditions). */
#include "convert/hf_config.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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
    if (c->rd != c->hd)
        return "Llama's RoPE rotates whole heads; this model was trained with --rotary-percent "
               "below 1";
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

/* A float field, written as one (10000.0, not 10000): transformers 5 checks the JSON types of its
 * config fields, and an integer where a float belongs fails to load. The shortest form that
 * reads back exactly. */
static void add_float(cJSON *j, const char *key, double v) {
    char buf[40];
    for (int digits = 15; digits <= 17; digits++) {
        snprintf(buf, sizeof buf, "%.*g", digits, v);
        if (strtod(buf, NULL) == v) break;
    }
    if (!strpbrk(buf, ".eEn")) strcat(buf, ".0"); /* integral: 10000 -> 10000.0 */
    cJSON_AddRawToObject(j, key, buf);
}

static void add_common(cJSON *j, const mg_model_config *c, const char *dtype, bool gpt2_tokenizer) {
    cJSON_AddNumberToObject(j, "vocab_size", c->V);
    add_float(j, "initializer_range", c->init_std);
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
    add_float(j, "rms_norm_eps", cfg->norm_epsilon);
    add_float(j, "rope_theta", c->rope_base);
    cJSON_AddStringToObject(j, "hidden_act", "silu");
    add_float(j, "attention_dropout", 0.0);
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
        add_float(j, "layer_norm_epsilon", cfg->norm_epsilon);
        add_float(j, "resid_pdrop", 0.0);
        add_float(j, "embd_pdrop", 0.0);
        add_float(j, "attn_pdrop", 0.0);
    } else if (c->moe.E > 0) {
        cJSON_AddStringToObject(j, "model_type", "mixtral");
        add_llama_like(j, c, cfg, c->moe.F);
        cJSON_AddNumberToObject(j, "num_local_experts", c->moe.E);
        cJSON_AddNumberToObject(j, "num_experts_per_tok", c->moe.k);
        add_float(j, "router_aux_loss_coef", cfg->moe_aux_loss_coeff);
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

/* ---- config.json -> flags (mg_hf_config_parse) ---- */

typedef enum { HF_GPT2 = 0, HF_LLAMA, HF_MISTRAL, HF_MIXTRAL } hf_kind;

static const struct {
    const char *model_type, *cls;
    double rms_eps, rope_theta; /* transformers' defaults for absent fields */
} hf_families[] = {
    {"gpt2", "GPT2LMHeadModel", 0, 0},
    {"llama", "LlamaForCausalLM", 1e-6, 10000.0},
    {"mistral", "MistralForCausalLM", 1e-6, 10000.0},
    {"mixtral", "MixtralForCausalLM", 1e-5, 1e6},
};

typedef struct {
    const cJSON *j;
    const char *path;
} hf_reader;

/* The member `key`; NULL when absent or null (transformers' None: its default applies). */
static const cJSON *member(const cJSON *j, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(j, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* A positive integer; def <= 0: required. */
static mg_status read_int(const hf_reader *r, const char *key, int def, int *out) {
    const cJSON *v = member(r->j, key);
    if (!v && def <= 0)
        return MG_FAIL(MG_ERR_FORMAT, "%s: '%s' is missing; the model's shape needs it", r->path,
                       key);
    if (!v) {
        *out = def;
        return MG_OK;
    }
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (d != floor(d) || d < 1 || d > INT_MAX)
        return MG_FAIL(MG_ERR_FORMAT, "%s: '%s' should be a positive integer", r->path, key);
    *out = (int)d;
    return MG_OK;
}

static mg_status read_double(const cJSON *j, const char *path, const char *key, double def,
                             double *out) {
    const cJSON *v = member(j, key);
    if (v && (!cJSON_IsNumber(v) || !isfinite(v->valuedouble)))
        return MG_FAIL(MG_ERR_FORMAT, "%s: '%s' should be a number", path, key);
    *out = v ? v->valuedouble : def;
    return MG_OK;
}

static mg_status read_bool(const hf_reader *r, const char *key, bool def, bool *out) {
    const cJSON *v = member(r->j, key);
    if (v && !cJSON_IsBool(v))
        return MG_FAIL(MG_ERR_FORMAT, "%s: '%s' should be true or false", r->path, key);
    *out = v ? cJSON_IsTrue(v) : def;
    return MG_OK;
}

static mg_status read_string(const cJSON *j, const char *path, const char *key, const char *def,
                             const char **out) {
    const cJSON *v = member(j, key);
    if (v && !cJSON_IsString(v))
        return MG_FAIL(MG_ERR_FORMAT, "%s: '%s' should be a string", path, key);
    *out = v ? v->valuestring : def;
    return MG_OK;
}

/* A boolean of transformers' whose value other than `def` changes the function (so no flag
 * here computes it). */
static mg_status refuse_true(const hf_reader *r, const char *key, bool def, const char *why) {
    bool v;
    MG_CHECK(read_bool(r, key, def, &v));
    if (v != def)
        return MG_FAIL(MG_ERR_UNSUPPORTED, "%s: %s %s is not supported: %s", r->path, key,
                       v ? "true" : "false", why);
    return MG_OK;
}

/* GPT2Config: LayerNorm, learned positions, tanh-GELU MLP of n_inner, biases everywhere. */
static mg_status parse_gpt2(const hf_reader *r, mg_config *c) {
    int P;
    MG_CHECK(read_int(r, "n_layer", 0, &c->num_layers));
    MG_CHECK(read_int(r, "n_embd", 0, &c->hidden_size));
    MG_CHECK(read_int(r, "n_head", 0, &c->num_attention_heads));
    MG_CHECK(read_int(r, "n_positions", 0, &P));
    MG_CHECK(read_int(r, "n_inner", 4 * c->hidden_size, &c->ffn_hidden_size));
    const char *act;
    MG_CHECK(read_string(r->j, r->path, "activation_function", "gelu_new", &act));
    /* gelu_pytorch_tanh is gelu_new's formula; "gelu" is the erf form, which differs */
    if (strcmp(act, "gelu_new") && strcmp(act, "gelu_pytorch_tanh"))
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "%s: activation_function '%s' is not supported: GPT-2 models convert "
                       "with the tanh GELU (gelu_new or gelu_pytorch_tanh) of the MLP here",
                       r->path, act);
    MG_CHECK(read_double(r->j, r->path, "layer_norm_epsilon", 1e-5, &c->norm_epsilon));
    bool tied;
    MG_CHECK(read_bool(r, "tie_word_embeddings", true, &tied));
    MG_CHECK(refuse_true(r, "scale_attn_weights", true,
                         "attention here always scales by 1/sqrt(head size)"));
    MG_CHECK(refuse_true(r, "scale_attn_by_inverse_layer_idx", false,
                         "attention here has no per-layer scaling"));
    MG_CHECK(refuse_true(r, "add_cross_attention", false, "the model here is decoder-only"));
    c->untie_embeddings = !tied;
    c->max_position_embeddings = c->seq_length = P;
    c->normalization = MG_NORM_LAYERNORM;
    c->position_embedding = MG_POS_LEARNED;
    c->swiglu = false;
    c->disable_bias_linear = false;
    return MG_OK;
}

/* Llama-family attention in transformers rotates whole heads: a partial_rotary_factor (in j)
 * other than 1 is refused (partial RoPE, --rotary-percent here, is GPT-NeoX's or Phi's). */
static mg_status whole_head_rotary(const cJSON *j, const char *path) {
    double f;
    MG_CHECK(read_double(j, path, "partial_rotary_factor", 1.0, &f));
    if (f != 1.0)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "%s: partial_rotary_factor %g is not supported: Llama-family models "
                       "rotate whole heads",
                       path, f);
    return MG_OK;
}

/* RoPE's base from transformers 4's rope_theta / rope_scaling or 5's rope_parameters; anything
 * but plain RoPE (linear, dynamic, yarn, llama3 scaling, a partial rotary factor) is refused. */
static mg_status parse_rope(const hf_reader *r, double def_theta, mg_config *c) {
    MG_CHECK(read_double(r->j, r->path, "rope_theta", def_theta, &c->rotary_base));
    const char *keys[2] = {"rope_scaling", "rope_parameters"};
    for (int k = 0; k < 2; k++) {
        const cJSON *s = member(r->j, keys[k]);
        if (!s) continue;
        if (!cJSON_IsObject(s))
            return MG_FAIL(MG_ERR_FORMAT, "%s: '%s' should be an object or null", r->path, keys[k]);
        const char *type, *old;
        MG_CHECK(read_string(s, r->path, "type", "default", &old));
        MG_CHECK(read_string(s, r->path, "rope_type", old, &type));
        if (strcmp(type, "default"))
            return MG_FAIL(MG_ERR_UNSUPPORTED,
                           "%s: %s of type '%s' is not implemented (only plain RoPE, rope_type "
                           "default); convert a model without RoPE scaling",
                           r->path, keys[k], type);
        MG_CHECK(read_double(s, r->path, "rope_theta", c->rotary_base, &c->rotary_base));
        MG_CHECK(whole_head_rotary(s, r->path));
    }
    return whole_head_rotary(r->j, r->path);
}

/* LlamaConfig, MistralConfig, MixtralConfig: RMSNorm, RoPE, SwiGLU (silu), GQA. */
static mg_status parse_llama_like(const hf_reader *r, hf_kind kind, mg_config *c) {
    int kv, hd, ffn;
    MG_CHECK(read_int(r, "num_hidden_layers", 0, &c->num_layers));
    MG_CHECK(read_int(r, "hidden_size", 0, &c->hidden_size));
    MG_CHECK(read_int(r, "num_attention_heads", 0, &c->num_attention_heads));
    MG_CHECK(read_int(r, "intermediate_size", 0, &ffn));
    MG_CHECK(read_int(r, "max_position_embeddings", 0, &c->max_position_embeddings));
    MG_CHECK(read_int(r, "num_key_value_heads", c->num_attention_heads, &kv));
    if (!member(r->j, "head_dim") && c->hidden_size % c->num_attention_heads)
        return MG_FAIL(MG_ERR_FORMAT,
                       "%s: hidden_size %d is not divisible by num_attention_heads %d and "
                       "there is no head_dim",
                       r->path, c->hidden_size, c->num_attention_heads);
    MG_CHECK(read_int(r, "head_dim", c->hidden_size / c->num_attention_heads, &hd));
    const char *act;
    MG_CHECK(read_string(r->j, r->path, "hidden_act", "silu", &act));
    if (strcmp(act, "silu"))
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "%s: hidden_act '%s' is not supported: %s models convert with the SwiGLU "
                       "(silu) MLP here",
                       r->path, act, hf_families[kind].cls);
    MG_CHECK(
        read_double(r->j, r->path, "rms_norm_eps", hf_families[kind].rms_eps, &c->norm_epsilon));
    MG_CHECK(parse_rope(r, hf_families[kind].rope_theta, c));
    bool tied, attn_bias = false, mlp_bias = false;
    MG_CHECK(read_bool(r, "tie_word_embeddings", false, &tied));
    if (kind == HF_LLAMA) {
        MG_CHECK(read_bool(r, "attention_bias", false, &attn_bias));
        MG_CHECK(read_bool(r, "mlp_bias", false, &mlp_bias));
        if (attn_bias != mlp_bias)
            return MG_FAIL(MG_ERR_UNSUPPORTED,
                           "%s: attention_bias %s with mlp_bias %s is not supported: every "
                           "linear layer here has a bias or none does (--disable-bias-linear)",
                           r->path, attn_bias ? "true" : "false", mlp_bias ? "true" : "false");
    } else {
        /* a window that covers every position changes nothing */
        int window;
        MG_CHECK(read_int(r, "sliding_window", INT_MAX, &window));
        if (window < c->max_position_embeddings)
            return MG_FAIL(MG_ERR_UNSUPPORTED,
                           "%s: sliding_window %d is not implemented (attention here sees every "
                           "earlier position); convert a model whose sliding_window is null",
                           r->path, window);
    }
    if (kind == HF_MIXTRAL) {
        MG_CHECK(read_int(r, "num_local_experts", 8, &c->num_experts));
        MG_CHECK(read_int(r, "num_experts_per_tok", 2, &c->moe_router_topk));
        if (c->moe_router_topk > c->num_experts)
            return MG_FAIL(MG_ERR_FORMAT, "%s: num_experts_per_tok %d exceeds num_local_experts %d",
                           r->path, c->moe_router_topk, c->num_experts);
        MG_CHECK(read_double(r->j, r->path, "router_aux_loss_coef", 0.001, &c->moe_aux_loss_coeff));
        /* every layer MoE; Megatron's softmax over the top k = Mixtral's renormalised top k */
        c->moe_ffn_hidden_size = ffn;
        snprintf(c->moe_layer_freq, sizeof c->moe_layer_freq, "1");
        c->moe_router_score_function = MG_MOE_SCORE_SOFTMAX;
        c->moe_router_pre_softmax = false;
    }
    c->ffn_hidden_size = ffn;
    c->kv_channels = hd;
    c->group_query_attention = kv != c->num_attention_heads;
    c->num_query_groups = kv;
    c->untie_embeddings = !tied;
    c->seq_length = c->max_position_embeddings;
    c->normalization = MG_NORM_RMSNORM;
    c->position_embedding = MG_POS_ROPE;
    c->swiglu = true;
    c->disable_bias_linear = !attn_bias;
    return MG_OK;
}

static mg_status parse_family(const hf_reader *r, hf_kind *kind) {
    const char *type;
    MG_CHECK(read_string(r->j, r->path, "model_type", "", &type));
    if (!type[0])
        return MG_FAIL(MG_ERR_FORMAT,
                       "%s has no model_type; is it a Hugging Face config.json (save_pretrained)?",
                       r->path);
    int n = (int)(sizeof hf_families / sizeof hf_families[0]), k = 0;
    while (k < n && strcmp(type, hf_families[k].model_type)) k++;
    if (k == n)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "%s: model_type '%s' is not supported; convert reads gpt2, llama, "
                       "mistral and mixtral",
                       r->path, type);
    /* a base model (GPT2Model, LlamaModel) has no language-model head and other tensor names */
    const cJSON *arch = member(r->j, "architectures");
    if (arch) {
        bool found = false;
        const cJSON *a;
        cJSON_ArrayForEach(a, arch) found |=
            cJSON_IsString(a) && !strcmp(a->valuestring, hf_families[k].cls);
        const cJSON *first = cJSON_IsArray(arch) ? cJSON_GetArrayItem(arch, 0) : NULL;
        if (!found)
            return MG_FAIL(MG_ERR_UNSUPPORTED,
                           "%s: architectures names %s, not %s; convert reads causal language "
                           "models (with their head)",
                           r->path, cJSON_IsString(first) ? first->valuestring : "no class",
                           hf_families[k].cls);
    }
    *kind = (hf_kind)k;
    return MG_OK;
}

mg_status mg_hf_config_parse(const char *json, const char *path, mg_config *cfg,
                             const char **family) {
    cJSON *j = cJSON_Parse(json);
    if (!cJSON_IsObject(j)) {
        cJSON_Delete(j);
        return MG_FAIL(MG_ERR_FORMAT, "%s: not a JSON object", path);
    }
    hf_reader r = {j, path};
    mg_config c = *cfg;
    hf_kind kind = HF_GPT2;
    mg_status st = MG_OK;
    MG_CHECK_GOTO(parse_family(&r, &kind), st, done);
    MG_CHECK_GOTO(kind == HF_GPT2 ? parse_gpt2(&r, &c) : parse_llama_like(&r, kind, &c), st, done);
    MG_CHECK_GOTO(read_int(&r, "vocab_size", 0, &c.vocab_size), st, done);
    MG_CHECK_GOTO(read_double(j, path, "initializer_range", 0.02, &c.init_method_std), st, done);
done:
    cJSON_Delete(j);
    if (st != MG_OK) return st;
    /* The padded vocabulary, vocab_size rounded up to a multiple of this x TP, must be
     * vocab_size itself: the embedding's rows are the Hugging Face ones. 1 keeps it so at every
     * tensor-parallel size that divides vocab_size; any larger divisor (Megatron's 128) would
     * only narrow those sizes, and the rows are what they are. */
    c.make_vocab_size_divisible_by = 1;
    *cfg = c;
    *family = hf_families[kind].cls;
    return MG_OK;
}
