/* Autoregressive sampling from a trained GPT: greedy (top_k = 1) or top-k with temperature.
 * Each step runs the model's ordinary forward over a window of the last S tokens (left-aligned,
 * padded after: causal attention makes the padding invisible to the last real position) and
 * samples from that position's logits. No KV cache: this is for demos and smoke tests.
 * Exports: mg_generate_options, mg_gpt_generate, mg_gpt_prompt_logits. Needs: model/gpt, backend,
 * core/rng. */
#ifndef MG_MODEL_GENERATE_H
#define MG_MODEL_GENERATE_H

#include "model/gpt.h"

typedef struct {
    int max_new_tokens;
    int top_k;          /* 1: greedy */
    float temperature;  /* > 0 */
    uint64_t seed;      /* sampling draws come from Philox keyed by (seed, step) */
    int32_t stop_token; /* < 0: none */
    int32_t
        vocab_limit; /* sample only ids < vocab_limit (the padded vocabulary rows are not words) */
} mg_generate_options;

/* g must be planned with micro-batch 1. ids (host) holds *n prompt tokens and has room for
 * *n + max_new_tokens; generated ids are appended and *n updated. tokens_dev: backend int32 (S). */
mg_status mg_gpt_generate(mg_gpt *g, mg_backend *be, int32_t *tokens_dev, int32_t *ids, size_t *n,
                          const mg_generate_options *o);

/* The logits at every position of a prompt of n <= S tokens (one forward; causal attention makes
 * row i the prediction after ids[0..i]): out (n, vocab) fp32 host, the first vocab <= V columns
 * of each row (the padded vocabulary's extra rows are not words). Same planning as above. */
mg_status mg_gpt_prompt_logits(mg_gpt *g, mg_backend *be, int32_t *tokens_dev, const int32_t *ids,
                               size_t n, int vocab, float *out);

#endif
