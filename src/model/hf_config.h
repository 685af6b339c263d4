/* The Hugging Face config.json of a model, for `megatron convert --saver hf`: the family (and so
 * the transformers class) that holds the same function, and its fields from the Megatron flags.
 *   GPT2LMHeadModel     LayerNorm, learned positions, tanh-GELU MLP, biases, no GQA, dense
 *   LlamaForCausalLM    RMSNorm, RoPE, SwiGLU, dense (biases as attention_bias / mlp_bias)
 *   MixtralForCausalLM  as Llama without biases, every layer MoE with softmax top-k routing
 *                       renormalised over the k (Megatron's default), no shared experts, no
 *                       expert bias, no group-limited routing or top-k scaling
 * A model none of them holds is refused with a one-line error naming what differs, since
 * transformers would load its weights into a different function without a word.
 * Exports: mg_hf_config_json. Needs: model/gpt, core/status. */
#ifndef MG_MODEL_HF_CONFIG_H
#define MG_MODEL_HF_CONFIG_H

#include "model/gpt.h"

/* config.json's text (malloc'd, *json) for g under cfg (the run's flags: tokenizer ids, init std),
 * with torch_dtype `dtype` ("float32", "bfloat16"). gpt2_tokenizer: the run used the GPT-2
 * tokenizer, whose <|endoftext|> (50256) becomes bos/eos. *family gets the class's name. */
mg_status mg_hf_config_json(const mg_gpt *g, const mg_config *cfg, const char *dtype,
                            bool gpt2_tokenizer, char **json, const char **family);

#endif
