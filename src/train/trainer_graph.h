/* Internal to train/: the full-iteration graph (--cuda-graph-impl full_iteration). A training
 * step runs eagerly for --cuda-graph-warmup-steps steps (they build the GEMM and attention plans
 * and size the workspace), is then captured once through the backend's graph entries (a CUDA
 * graph; on the CPU backend the recorded calls, backend/graph_record.h) and replayed every step
 * after: the forward and backward of every microbatch, the gradient reductions, clipping, the
 * step control, AdamW and the parameter all-gather, one launch.
 * Nothing per step is in the graph: before each step (eager, captured or replayed alike) every
 * microbatch's input ids, labels and packed-document arrays are copied into static staged
 * buffers, from which the step copies microbatch mb into its activation slot on the device; the
 * learning rate, weight decay, Adam's step, the loss scale and the dropout offsets are the
 * step-control block's and the streams' (backend memory, advanced by kernels). A change of the
 * microbatch count (--rampup-batch-size) drops the graph: the step runs eagerly again for the
 * warm-up steps and is captured anew (the log says so). An evaluation batch (the forward of every
 * microbatch and the loss sum) has its own graph, captured after as many eager batches. The
 * parameter gathers a step leaves to the next (--overlap-param-gather) are brought to the state
 * every replay starts from before each capture and after each launch
 * (train/trainer_weights.h's mg_trainer_params_graph_edge).
 * With --cuda-graph-impl local or transformer_engine the graphs are per layer instead
 * (model/layer_graphs.h; the trainer makes them and logs their captures).
 * Exports: mg_trainer_graph_on, mg_trainer_graph_init, mg_trainer_graph_run,
 * mg_trainer_graph_inputs, mg_trainer_graph_note, mg_trainer_graph_free.
 * Needs: train/trainer_parts, train/trainer_weights, backend. */
#ifndef MG_TRAIN_TRAINER_GRAPH_H
#define MG_TRAIN_TRAINER_GRAPH_H

#include "train/trainer_parts.h"

bool mg_trainer_graph_on(const mg_trainer *t);
/* After the memory plan: the staged buffers bound (memory.h's off_staged); a layout whose graph
 * the backend cannot hold refused (the CPU backend's records hold no collective: one rank). */
mg_status mg_trainer_graph_init(mg_trainer *t);
/* The device work of a pass, which a graph of `kind` holds: a training step's (from zeroing the
 * gradients to the statistics' copy) or an evaluation batch's. */
typedef mg_status (*mg_trainer_graph_body)(mg_trainer *t, void *ctx);
/* A pass over the global batch from sample `first` of src with graphs: its inputs staged, then
 * body run eagerly (the warm-up), or captured and launched, or kind's graph launched. */
mg_status mg_trainer_graph_run(mg_trainer *t, mg_graph_kind kind, const mg_sample_source *src,
                               int64_t first, mg_trainer_graph_body body, void *ctx);
/* In a staged pass: microbatch mb's inputs copied into activation slot `slot` on the device
 * (tokens, targets and the packed-document arrays, those the trainer has). */
mg_status mg_trainer_graph_inputs(mg_trainer *t, int mb, int slot);
/* After a training step with per-layer graphs: logs the graphs captured in it, if any. */
void mg_trainer_graph_note(mg_trainer *t);
void mg_trainer_graph_free(mg_trainer *t);

#endif
