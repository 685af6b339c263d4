/* Internal to train/: packed documents, Megatron's --reset-position-ids and --reset-attention-mask
 * (megatron/core/datasets/gpt_dataset.py, _get_ltor_masks_and_position_ids). A sequence of the
 * GPT dataset packs several documents, each ending with the end-of-document token (the
 * tokenizer's eod, the id --eod-mask-loss masks: mg_trainer_eod_for). Looking at the INPUT ids
 * of a sequence, after an eod at index i:
 *  - --reset-position-ids: the positions of tokens i+1.. restart at 0 (the learned position
 *    embedding's row and RoPE's angle; model/block.h's pass.pos);
 *  - --reset-attention-mask: tokens i+1.. do not attend to tokens 0..i (the block-diagonal causal
 *    mask; the eod belongs to the document it ends; pass.doc_start).
 * Both are functions of the sequence alone, so they are computed on the host from the ids as each
 * microbatch loads, on every pipeline stage (the middle stages load the ids for this alone), and
 * uploaded into the activation slot's own (N) arrays: a slot's backward sees its forward's. Every
 * tensor- and pipeline-parallel layout so trains the one-rank model. Without the flags nothing is
 * allocated, loaded or computed. (Megatron-LM hands the middle pipeline stages no attention mask
 * and no positions: its middle stages attend plainly causally. Here every stage masks alike.
 * And megatron-core's GPTModel feeds position_ids to the learned embedding only: its RoPE angles
 * are 0..S-1 whatever the flags. Here RoPE takes the reset positions too; with both flags the
 * scores are the same up to rounding (RoPE depends on the distance between two tokens of one
 * document), with --reset-position-ids alone on a RoPE model they differ.)
 * Exports: mg_docs_compute, mg_trainer_docs_init, mg_trainer_docs_on, mg_trainer_docs_microbatch.
 * Needs: train/trainer_parts, train/trainer_loss (the eod id). */
#ifndef MG_TRAIN_TRAINER_DOCS_H
#define MG_TRAIN_TRAINER_DOCS_H

#include "train/trainer_parts.h"

/* B sequences of S input ids (host, (B*S)), documents ending with `eod`: pos[j] (or NULL) =
 * j's position in its document, doc_start[j] (or NULL) = the index in its sequence of its
 * document's first token, i.e. one past the last eod before j, else 0; pos[j] = j % S -
 * doc_start[j]. */
void mg_docs_compute(const int32_t *tokens, int B, int S, int32_t eod, int32_t *pos,
                     int32_t *doc_start);
/* After the memory plan and the data: with either flag, the eod id (a tokenizer without one is
 * MG_ERR_USAGE), the slots' arrays handed to the model (mg_gpt_set_documents), one log line. */
mg_status mg_trainer_docs_init(mg_trainer *t);
/* Whether this run packs documents (either flag). */
bool mg_trainer_docs_on(const mg_trainer *t);
/* After the microbatch's samples were loaded into t->mem.host_tokens: its positions and document
 * starts into activation slot `slot`'s arrays (backend memory). */
mg_status mg_trainer_docs_microbatch(mg_trainer *t, int slot);

#endif
