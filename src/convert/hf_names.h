/* Hugging Face names for the model's parameters, both ways. Checkpoints store weights as
 * safetensors under these names, so a checkpoint opens in `transformers`, and HF weights load here.
 * Family: GPT-2 names (transformer.h.N.attn.c_attn, Conv1D layout (in, out)) when the model is
 * GPT-2 shaped (LayerNorm, learned positions, GELU, biases); Llama names (model.layers.N.self_attn.
 * q_proj/k_proj/v_proj, mlp.gate_proj/up_proj/down_proj) otherwise.
 * Our fused tensors are assembled from several HF tensors: QKV from [Q | K | V] rows regrouped into
 * Megatron's per-group layout (backend.h), SwiGLU's fc1 from [gate; up]. Norm weights of a
 * model with --apply-layernorm-1p are stored zero-centred (w); Hugging Face's are 1 + w (export
 * adds 1, import subtracts it).
 * Exports: mg_hf_import, mg_hf_import_files, mg_hf_export, mg_hf_export_free,
 * mg_hf_weights_file. Needs: model/gpt,
 * core/safetensors. */
#ifndef MG_MODEL_HF_NAMES_H
#define MG_MODEL_HF_NAMES_H

#include "core/safetensors.h"
#include "model/gpt.h"

/* Fills `params` (fp32 host, g->params.numel elements, Megatron layout) from the file. Every
 * expected tensor must be present with the expected shape (F32, BF16 or F16). */
mg_status mg_hf_import(const mg_gpt *g, const mg_safetensors *st, const char *path, float *params);
/* The same from several files (a pipeline-parallel checkpoint's stages): each tensor is taken
 * from the first file that has it. A pipeline stage's copy of the tied embedding (metadata
 * `shared`) is read from the embedding's tensor; mg_hf_export leaves it out. */
mg_status mg_hf_import_files(const mg_gpt *g, const mg_safetensors *files, const char *const *paths,
                             int n_files, float *params);

typedef struct {
    mg_st_tensor *tensors; /* HF-named fp32 tensors in HF layout, ready for mg_safetensors_write */
    int n;
    float *storage;
} mg_hf_export_set;

mg_status mg_hf_export(const mg_gpt *g, const float *params, mg_hf_export_set *out);
/* The same for part of the parameters: the dense ones (every parameter but the experts') and/or
 * the experts' (metadata `expert`). */
mg_status mg_hf_export_parts(const mg_gpt *g, const float *params, bool dense, bool experts,
                             mg_hf_export_set *out);
void mg_hf_export_free(mg_hf_export_set *s);
/* Hugging Face's weight file names: model.safetensors alone, else file i of n as
 * model-0000(i+1)-of-0000n.safetensors. */
void mg_hf_weights_file(char *out, size_t cap, int i, int n);

#endif
