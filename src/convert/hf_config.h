/* The Hugging Face config.json of a model, for `megatron convert --saver hf`: the family (and so
 * the transformers class) that holds the same function, and its fields from the Megatron flags.
 *   GPT2LMHeadModel     LayerNorm, learned positions, tanh-GELU MLP, biases, no GQA, dense
 *   LlamaForCausalLM    RMSNorm, RoPE, SwiGLU, dense (biases as attention_bias / mlp_bias)
 *   MixtralForCausalLM  as Llama without biases, every layer MoE with softmax top-k routing
 *                       renormalised over the k (Megatron's default), no shared experts, no
 *                       expert bias, no group-limited routing or top-k scaling
 * A model none of them holds is refused with a one-line error naming what differs, since
 * transformers would load its weights into a different function without a word.
 * The other way, `megatron convert --loader hf`: a config.json of model_type gpt2, llama,
 * mistral (Llama's function without biases) or mixtral becomes the Megatron flags of the same
 * model, transformers' defaults standing in for absent fields; what no flag here computes is
 * refused (RoPE scaling, a partial rotary factor, an activation other than the family's, a
 * sliding window shorter than the positions, biases on attention but not the MLP, a base model
 * without its head, any other model_type).
 * Exports: mg_hf_config_json, mg_hf_config_parse. Needs: model/gpt, core/status, cJSON. */
#ifndef MG_MODEL_HF_CONFIG_H
#define MG_MODEL_HF_CONFIG_H

#include "model/gpt.h"

/* config.json's text (malloc'd, *json) for g under cfg (the run's flags: tokenizer ids, init std),
 * with torch_dtype `dtype` ("float32", "bfloat16"). gpt2_tokenizer: the run used the GPT-2
 * tokenizer, whose <|endoftext|> (50256) becomes bos/eos. *family gets the class's name. */
mg_status mg_hf_config_json(const mg_gpt *g, const mg_config *cfg, const char *dtype,
                            bool gpt2_tokenizer, char **json, const char **family);

/* The model flags of config.json's text `json` (`path` names it in errors) into cfg, which holds
 * mg_config_defaults or more: layers, hidden, ffn, heads, query groups, kv channels, positions
 * (also the sequence length), norm, epsilon, RoPE base, SwiGLU, biases, tying, vocabulary (with
 * --make-vocab-size-divisible-by 1, so the padded vocabulary is vocab_size), the experts, the
 * init std. *family gets the transformers class. On error (MG_ERR_FORMAT: malformed;
 * MG_ERR_UNSUPPORTED: no equivalent here) cfg is untouched. */
mg_status mg_hf_config_parse(const char *json, const char *path, mg_config *cfg,
                             const char **family);

#endif
