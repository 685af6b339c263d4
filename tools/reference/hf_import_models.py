#!/usr/bin/env python3
"""Tiny random Hugging Face models for `megatron convert --loader hf` (tests/cli/test_convert.sh),
written with save_pretrained as a user would, and transformers' own greedy continuation of a fixed
prompt on each, to compare with `megatron generate` on the imported checkpoint.
  hf_import_models.py OUT_DIR "5 6 7 8" N [--gpt2-tokenizer VOCAB_JSON MERGES_TXT]
Writes OUT_DIR/{llama, llama_bf16, llama_fp16, llama_bias, gpt2, gpt2_base, mixtral} and prints
one JSON line {"llama": {"ids": [N greedy ids], "gap": the smallest top-1 minus top-2 logit on
the way}, ...}.
  llama       LlamaForCausalLM, GQA (4 heads, 2 key/value heads), untied, fp32
  llama_bf16  the same weights rounded to bf16, saved as bf16 (ids: of the rounded weights in fp32)
  llama_fp16  the same in fp16
  llama_bias  LlamaForCausalLM with attention and MLP biases (random, not zero) and tied
              embeddings, fp32
  gpt2        GPT2LMHeadModel, tied, fp32, GPT-2's vocabulary (50257) and, with --gpt2-tokenizer,
              its vocab.json / merges.txt
  gpt2_base   the same weights under the base model's names (no "transformer." prefix, as the
              Hub's gpt2 files) and no lm_head; ids: gpt2's
  mixtral     MixtralForCausalLM, 4 experts, top-2, GQA, untied, fp32
Weights are drawn with a fixed torch seed and a larger init std than the default (0.02 gives
logits so close that a rounding difference could flip a greedy choice); the script stops if a
greedy step is won by less than 1e-3. Exit 3 when transformers or torch is missing (the test then
skips), 1 on any other failure."""
import json
import os
import shutil
import sys

try:
    import torch
    from safetensors.torch import load_file, save_file
    from transformers import (AutoModelForCausalLM, GPT2Config, GPT2LMHeadModel, LlamaConfig,
                              LlamaForCausalLM, MixtralConfig, MixtralForCausalLM)
except ImportError as e:  # the test skips
    print(f"hf_import_models: {e}", file=sys.stderr)
    sys.exit(3)

STD = 0.2


def greedy(path, prompt, n):
    """transformers' greedy continuation (one token at a time over the whole sequence, fp32) and
    the smallest margin of a greedy choice."""
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    ids, gap = torch.tensor([prompt]), float("inf")
    with torch.no_grad():
        for _ in range(n):
            logits = model(ids).logits[0, -1]
            top = torch.topk(logits, 2).values
            gap = min(gap, float(top[0] - top[1]))
            ids = torch.cat([ids, logits.argmax().view(1, 1)], dim=1)
    return {"ids": ids[0, len(prompt):].tolist(), "gap": gap}


def make(cls, config, path, seed):
    torch.manual_seed(seed)
    model = cls(config)
    model.save_pretrained(path)
    return model


def main():
    out, prompt, n = sys.argv[1], [int(x) for x in sys.argv[2].split()], int(sys.argv[3])
    torch.set_num_threads(2)
    llama_cfg = dict(vocab_size=96, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                     tie_word_embeddings=False, initializer_range=STD, rms_norm_eps=1e-5)
    llama = make(LlamaForCausalLM, LlamaConfig(**llama_cfg), f"{out}/llama", 1)
    llama.to(torch.bfloat16).save_pretrained(f"{out}/llama_bf16")
    llama.to(torch.float32).to(torch.float16).save_pretrained(f"{out}/llama_fp16")
    torch.manual_seed(4)
    bias = LlamaForCausalLM(LlamaConfig(**{**llama_cfg, "tie_word_embeddings": True,
                                           "attention_bias": True, "mlp_bias": True}))
    with torch.no_grad():  # transformers initialises biases to zero
        for name, p in bias.named_parameters():
            if name.endswith(".bias"):
                p.normal_(0.0, STD)
    bias.save_pretrained(f"{out}/llama_bias")
    gpt2 = GPT2Config(vocab_size=50257, n_embd=64, n_layer=2, n_head=4, n_positions=64,
                      initializer_range=STD)
    make(GPT2LMHeadModel, gpt2, f"{out}/gpt2", 2)
    if len(sys.argv) > 6 and sys.argv[4] == "--gpt2-tokenizer":
        shutil.copy(sys.argv[5], f"{out}/gpt2/vocab.json")
        shutil.copy(sys.argv[6], f"{out}/gpt2/merges.txt")
    os.makedirs(f"{out}/gpt2_base")
    shutil.copy(f"{out}/gpt2/config.json", f"{out}/gpt2_base/config.json")
    tensors = load_file(f"{out}/gpt2/model.safetensors")
    save_file({k.removeprefix("transformer."): v for k, v in tensors.items() if k != "lm_head.weight"},
              f"{out}/gpt2_base/model.safetensors", metadata={"format": "pt"})
    mixtral = MixtralConfig(vocab_size=96, hidden_size=64, intermediate_size=48, num_hidden_layers=2,
                            num_attention_heads=4, num_key_value_heads=2, num_local_experts=4,
                            num_experts_per_tok=2, max_position_embeddings=64,
                            initializer_range=STD)
    make(MixtralForCausalLM, mixtral, f"{out}/mixtral", 3)
    result = {name: greedy(f"{out}/{name}", prompt, n)
              for name in ("llama", "llama_bf16", "llama_fp16", "llama_bias", "gpt2", "mixtral")}
    for name, r in result.items():
        if r["gap"] < 1e-3:
            sys.exit(f"hf_import_models: {name}'s greedy choice is won by only {r['gap']:.2e}; "
                     "pick another seed")
    result["gpt2_base"] = result["gpt2"]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
