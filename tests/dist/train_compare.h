/* Model-parallel training against the one-rank run (tests/dist/test_train_tp.c,
 * test_train_pp.c): a tiny GPT config from flags, a trainer on given groups run for some steps
 * (losses, grad norms, the weights afterwards), this rank's groups of a layout, and the
 * comparison of this rank's parameters with the matching elements of the one-rank model's —
 * by name (global layer numbers), through mg_param_global_index for tensor-parallel shards, and
 * with a pipeline stage's copy of the tied embedding compared with the embedding itself.
 * Needs: dist.h, train/trainer, parallel/parallel_state. */
#ifndef MG_DIST_TRAIN_COMPARE_H
#define MG_DIST_TRAIN_COMPARE_H

#include "dist.h"
#include "parallel/parallel_state.h"
#include "train/trainer.h"

#define TC_MAX_STEPS 20

/* Flags (NULL-terminated) for full recomputation of every layer, each alone. */
extern const char *const tc_recompute_full[];

typedef struct {
    double loss[TC_MAX_STEPS], norm[TC_MAX_STEPS];
    double eval[TC_MAX_STEPS]; /* tc_train_eval's validation loss after step s + 1 */
    float *w;                  /* this rank's fp32 weights after the steps (parameter layout) */
    mg_trainer *tr;
} tc_run;

/* cfg from flags (NULL-terminated lists, model flags then layout flags), validated for a world
 * of `world` ranks. */
void tc_config(dist_ctx *t, mg_config *c, const char *const *model, const char *const *layout,
               int world);
/* Trains `steps` steps on groups g (NULL: one rank) and reads the weights back. */
void tc_train(dist_ctx *t, const mg_config *c, const mg_train_groups *g, int steps, tc_run *out);
/* The same with an evaluation (mg_trainer_evaluate, its loss in out->eval[s]) after each step
 * s + 1 whose bit s is set in evals. */
void tc_train_eval(dist_ctx *t, const mg_config *c, const mg_train_groups *g, int steps,
                   unsigned evals, tc_run *out);
void tc_release(tc_run *r);
/* This rank's group of kind k in layout l (NULL when it has one rank); collective. */
mg_comm *tc_group(dist_ctx *t, const mg_parallel_layout *l, mg_group_kind k);
/* The dp, tp, pp and embedding groups of the layout of these sizes, and with s.ep > 1 the
 * expert-parallel and expert-data-parallel groups; tc_free_groups frees. */
void tc_groups(dist_ctx *t, mg_parallel_sizes s, mg_train_groups *g);
void tc_free_groups(mg_train_groups *g);
/* The comparison of the layout tests: `steps` steps of c1 on one rank into *ref, then of cL on
 * the groups of sizes s (left in *g for the caller's checks: tc_free_groups) into *got. */
void tc_train_both(dist_ctx *t, const mg_config *c1, const mg_config *cL, mg_parallel_sizes s,
                   int steps, mg_train_groups *g, tc_run *ref, tc_run *got);
double tc_rel(double a, double b);
/* On a device backend: one more step of tr (step_async) neither synchronises with the host nor
 * allocates (the backend's counters), then the parameters are synchronised. Nothing elsewhere. */
void tc_expect_steady_step(dist_ctx *t, const char *label, mg_trainer *tr);
/* Losses (on the rank that computes them: the last pipeline stage) and grad norms of `steps`
 * steps within tol (loss) and norm_tol relative. */
void tc_expect_steps(dist_ctx *t, const char *label, const tc_run *got, const tc_run *ref,
                     int steps, double tol, double norm_tol);
/* Normalised error ||x - y|| / ||y|| of this rank's parameters x against the matching elements
 * y of the one-rank model's, over all of them; *which: the tensor with the largest error of its
 * own. Elements where skip() is true are left out (may be NULL). */
double tc_model_error(const tc_run *got, const tc_run *ref, const char **which,
                      bool (*skip)(const mg_param_meta *m, const mg_model_config *c, int64_t g));

#endif
