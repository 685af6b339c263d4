/* Data-parallel training (train/trainer.h, parallel/ddp.h) against the one-rank run: every rank
 * trains a tiny GPT twice, alone (the reference: the whole global batch on one rank) and as a
 * replica of the world's data-parallel group, 5 steps with gradient accumulation (16 samples per
 * step: 16 microbatches alone, 16/D in each replica; see global_batch), and compares the losses,
 * the grad norms and every parameter. The reduction order differs (microbatches accumulate on one
 * rank, replicas are summed by MPI), so the comparison is by normalised error with a tolerance of
 * 1e-6 in fp32; the replicas themselves must agree bit for bit. The model has no linear biases: the
 * key bias's true gradient is exactly zero (softmax ignores a constant added to every score), so
 * both runs hold rounding noise of ~1e-10 there, which Adam turns into steps of ~lr * g / eps whose
 * sign follows the summation order; no reduction order can make that parameter agree to 1e-6.
 * Dropout is on (Megatron's 0.1, explicit) with --layout-invariant-dropout: its masks are keyed
 * by a sequence's place in the global batch and the iteration (core/dropout.h), so each replica
 * drops exactly what the one rank drops for the same samples, and the tolerance stays the
 * reduction order's.
 * Variants: plain all-reduce, the distributed optimizer (reduce-scatter, sharded AdamW,
 * all-gather), each with one bucket and with several (--overlap-grad-reduce --ddp-bucket-size:
 * every bucket's reduction must start inside backward, from the model's hooks), and the
 * distributed optimizer with --overlap-param-gather (every bucket but the first gathered inside
 * the next forward, just before its first layer; on host buffers a bucket the hooks missed
 * would hold stale parameters and the losses would differ).
 * On host buffers (MPI) the cpu backend trains in fp32 with the tolerance above. On device
 * buffers (NCCL, `make test-nccl`) the cuda backend trains in bf16 with fp32 masters, gradients
 * and moments: the losses and the fp32 masters must agree with one GPU's within bf16 tolerance
 * (BF16_TOL), the replicas' bf16 parameters bit for bit, and the memory the model state took
 * (cudaMemGetInfo) must be Megatron's 18 B per parameter (its distributed optimizer's accounting),
 * 6 + 12/D with the distributed optimizer, within 5% (a model of ~100M parameters, where allocation
 * granularity is noise). */
#include "dist.h"

#include "config/flags.h"
#include "core/env.h"
#include "core/log.h"
#include "train/memory.h"
#include "train/trainer.h"

#include <ftw.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define STEPS    5
#define TOL      1e-6
#define BF16_TOL 2e-2 /* a few bf16 ulps (2^-8) of relative difference */

typedef struct {
    bool distopt, overlap;
    int64_t bucket; /* --ddp-bucket-size, 0: none */
    bool overlap_param;
    bool bf16_reduce; /* --grad-reduce-in-bf16: the one-rank run's within BF16_TOL */
} variant;

typedef struct {
    double loss[STEPS], norm[STEPS];
    float *w; /* (params.numel) the trainer's layout */
} run_out;

/* 16 samples per step (16/D microbatches per replica), or 4 microbatches per replica where D
 * does not divide 16 (MG_DIST_RANKS="3 6"). */
static int global_batch(const dist_ctx *t) {
    return 16 % t->size ? 4 * t->size : 16;
}

static void make_config(dist_ctx *t, mg_config *c, int world, const variant *v) {
    char gbs[16];
    snprintf(gbs, sizeof gbs, "%d", global_batch(t));
    char *argv[] = {"--num-layers",
                    "2",
                    "--hidden-size",
                    "32",
                    "--num-attention-heads",
                    "2",
                    "--seq-length",
                    "16",
                    "--vocab-size",
                    "96",
                    "--mock-data",
                    "--micro-batch-size",
                    "1",
                    "--global-batch-size",
                    gbs,
                    "--train-iters",
                    "5",
                    "--lr",
                    "3e-3",
                    "--eval-iters",
                    "0",
                    "--device",
                    dist_on_device(t) ? "cuda" : "cpu",
                    "--num-threads",
                    "1",
                    "--disable-bias-linear",
                    "--attention-dropout",
                    "0.1",
                    "--hidden-dropout",
                    "0.1",
                    "--layout-invariant-dropout"};
    bool help = false;
    mg_config_defaults(c);
    DOK(mg_flags_parse(c, (int)(sizeof argv / sizeof *argv), argv, &help));
    c->world_size = world;
    DOK(mg_config_validate(c));
    c->use_distributed_optimizer = v->distopt;
    c->overlap_grad_reduce = v->overlap;
    c->ddp_bucket_size = v->bucket > 0 ? v->bucket : -1;
    c->overlap_param_gather = v->overlap_param;
    c->grad_reduce_in_bf16 = v->bf16_reduce;
}

/* A trainer on dp (NULL: alone) with --save / --load `save` / `load` (NULL: none). */
static mg_trainer *start(dist_ctx *t, const variant *v, mg_comm *dp, const char *save,
                         const char *load) {
    mg_config c;
    make_config(t, &c, dp ? mg_comm_size(dp) : 1, v);
    if (save) snprintf(c.save, sizeof c.save, "%s", save);
    if (load) snprintf(c.load, sizeof c.load, "%s", load);
    mg_trainer *tr = calloc(1, sizeof *tr);
    DOK(tr ? MG_OK : MG_ERR_NOMEM);
    DOK(mg_trainer_init(tr, &c, &(mg_train_groups){.dp = dp}));
    return tr;
}

static void stop(mg_trainer *tr) {
    mg_trainer_free(tr);
    free(tr);
}

/* STEPS steps of a trainer on dp (NULL: alone); returns it for inspection (caller frees). */
static mg_trainer *train(dist_ctx *t, const variant *v, mg_comm *dp, run_out *out) {
    mg_trainer *tr = start(t, v, dp, NULL, NULL);
    for (int s = 0; s < STEPS; s++) DOK(mg_trainer_step(tr, &out->loss[s], &out->norm[s]));
    out->w = calloc(tr->model.params.numel, sizeof *out->w);
    DOK(out->w ? MG_OK : MG_ERR_NOMEM);
    /* the fp32 weights (the masters, gathered where sharded); every member calls it */
    DOK(mg_trainer_get_weights(tr, out->w));
    return tr;
}

static double rel(double a, double b) {
    return fabs(a - b) / fmax(fabs(b), 1e-30);
}

/* Worst normalised error ||a - b|| / ||b|| over the parameters, matched by registration index
 * (the two runs' layouts differ with the distributed optimizer's padding). */
static double worst_param_error(const mg_trainer *a, const float *wa, const mg_trainer *b,
                                const float *wb, const char **which) {
    double worst = 0;
    const mg_param_table *ta = &a->model.params, *tb = &b->model.params;
    for (int i = 0; i < ta->n; i++) {
        const float *x = wa + ta->p[i].offset, *y = wb + tb->p[i].offset;
        double d = 0, n = 0;
        for (int64_t j = 0; j < ta->p[i].numel; j++) {
            d += ((double)x[j] - y[j]) * ((double)x[j] - y[j]);
            n += (double)y[j] * y[j];
        }
        /* zero-initialised parameters (biases) are compared against the largest scale seen */
        double e = sqrt(d) / fmax(sqrt(n), 1e-3);
        if (e > worst) {
            worst = e;
            *which = ta->p[i].name;
        }
    }
    return worst;
}

/* host[0..n) from rank 0 to every rank, through the harness's buffers (host or device) */
static void broadcast0(dist_ctx *t, mg_comm *c, float *host, size_t n) {
    void *d = dist_alloc(t, n, MG_F32);
    dist_put(t, d, host, n, MG_F32);
    DOK(mg_comm_broadcast(c, d, n, MG_F32, 0, dist_stream(t)));
    DOK(mg_comm_sync(c, dist_stream(t)));
    dist_get(t, host, d, n, MG_F32);
    dist_free(t, d);
}

static void check_variant(dist_ctx *t, const variant *v, const char *label) {
    mg_comm *world = mg_comm_world_comm(t->w);
    run_out ref = {0}, dp = {0};
    mg_trainer *a = train(t, v, NULL, &ref);
    mg_trainer *b = train(t, v, world, &dp);
    int D = t->size;
    const double tol = dist_on_device(t) || v->bf16_reduce ? BF16_TOL : TOL;
    DEXPECT(b->layout.dp_size == D && b->num_microbatches == global_batch(t) / D,
            "%s: dp %d, %d microbatches", label, b->layout.dp_size, b->num_microbatches);
    /* MG_DP_EXCHANGE=copies (the default): the distributed optimizer's exchanges went by
     * copies through peer-mapped memory where its buckets overlap the backward (the tests' ranks
     * share a node, so they can map each other's), and without a window where one bucket holds
     * everything (train/memory.h's mg_memory_dp_window_bytes) */
    const char *how = getenv("MG_DP_EXCHANGE");
    const bool copies = (!how || strcmp(how, "copies") == 0) && D > 1 &&
                        mg_memory_dp_window_bytes(&b->bufs.b[0].layout) > 0;
    DEXPECT(!copies || b->ddp[0].peer != NULL,
            "%s: MG_DP_EXCHANGE=copies, but the buckets went through the collectives", label);
    DEXPECT(copies || b->ddp[0].peer == NULL, "%s: a window where the collectives were due", label);
    for (int s = 0; s < STEPS; s++) {
        DEXPECT(rel(dp.loss[s], ref.loss[s]) <= tol, "%s step %d: loss %.9g, one rank %.9g", label,
                s + 1, dp.loss[s], ref.loss[s]);
        DEXPECT(rel(dp.norm[s], ref.norm[s]) <= tol, "%s step %d: grad norm %.9g, one rank %.9g",
                label, s + 1, dp.norm[s], ref.norm[s]);
    }
    const char *which = "";
    double e = worst_param_error(b, dp.w, a, ref.w, &which);
    /* the sum of D replicas rounds D - 1 partial sums (bf16's coarsely; fp32's in an order of
     * their own: the group's collectives', or rank order by copies, neither one rank's order of
     * accumulation), and Adam turns a small gradient's rounding into a whole step of a small
     * parameter (4% of the LayerNorm biases' size after 5 steps at D 8 in bf16): the
     * parameters' bound grows with the roundings */
    const double ptol = fmax(tol, tol * (D - 1) / 2);
    DEXPECT(e <= ptol, "%s: parameters after %d steps differ from one rank's by %.3g (%s)", label,
            STEPS, e, which);
    /* the replicas agree bit for bit: compare the parameters (fp32 on the cpu backend, bf16 on
     * cuda: the values forward reads) with rank 0's */
    size_t n = b->model.params.numel;
    float *mine = host_alloc(n, MG_F32), *w0 = host_alloc(n, MG_F32);
    DOK(mg_trainer_sync_params(b));
    DOK(b->be->download_f32(b->be, mine, b->mem.params, n));
    memcpy(w0, mine, n * sizeof *w0);
    broadcast0(t, world, w0, n);
    DEXPECT(!memcmp(w0, mine, n * sizeof *w0), "%s: rank %d's parameters differ from rank 0's",
            label, t->rank);
    /* ZeRO-1: the moments hold this rank's shard only */
    size_t want = v->distopt ? (size_t)b->bufs.b[0].layout.numel / (size_t)D
                             : (size_t)b->bufs.b[0].layout.numel;
    DEXPECT(b->opt.numel == want, "%s: optimizer state of %zu elements, want %zu", label,
            b->opt.numel, want);
    DEXPECT(!v->overlap || !v->bucket || b->bufs.b[0].layout.n_buckets > 1, "%s: %d bucket(s)",
            label, b->bufs.b[0].layout.n_buckets);
    /* the overlap happened where it should: every reduction started inside backward, every
     * bucket but forward's first gathered inside the next forward (over more than one rank:
     * alone, the optimizer updates the whole buffer and nothing is gathered) */
    int nb = b->bufs.b[0].layout.n_buckets;
    int want_reduces = v->overlap ? STEPS * nb : 0;
    int want_gathers = v->overlap_param && D > 1 ? (STEPS - 1) * (nb - 1) : 0; /* 1: unsharded */
    DEXPECT(b->ddp[0].overlapped_reduces == want_reduces &&
                b->ddp[0].overlapped_gathers == want_gathers,
            "%s: %d reductions started in backward (want %d), %d gathers in forward (want %d)",
            label, b->ddp[0].overlapped_reduces, want_reduces, b->ddp[0].overlapped_gathers,
            want_gathers);
    if (!dist_on_device(t)) {
        /* the memory report: 4 B weights and gradients per buffer element, 8 B of moments per
         * element of this rank's shard (plus the optimizer's scalars and arena alignment) */
        mg_memory_per_param mp = mg_trainer_memory_per_param(b);
        double P = (double)mp.params, opt_bytes = mp.optimizer * P;
        /* --grad-reduce-in-bf16: and the bf16 copy of the largest bucket (arena-aligned) */
        const double stage = (double)mg_train_buffers_bf16_stage(&b->bufs, &b->cfg);
        DEXPECT(mp.weights * P == 4.0 * (double)b->bufs.b[0].layout.numel &&
                    mp.grads * P >= mp.weights * P + stage &&
                    mp.grads * P <= mp.weights * P + stage + 1024 &&
                    (stage > 0) == (v->bf16_reduce && D > 1) && mp.master == 0 &&
                    opt_bytes >= 8.0 * (double)want && opt_bytes <= 8.0 * (double)want + 1024,
                "%s: per parameter: weights %.3f grads %.3f master %.3f optimizer %.3f B", label,
                mp.weights, mp.grads, mp.master, mp.optimizer);
    }
    free(mine);
    free(w0);
    free(ref.w);
    free(dp.w);
    mg_trainer_free(a);
    mg_trainer_free(b);
    free(a);
    free(b);
}

/* Log as the ranks of a launch (set-up lines from rank 0 alone). */
static void quiet(dist_ctx *t) {
    mg_log_init(t->rank, t->size);
}

void test_train_dp(dist_ctx *t) {
    quiet(t);
    check_variant(t, &(variant){false, false, 0, false, false}, "all-reduce, one bucket");
    check_variant(t, &(variant){false, true, 5000, false, false}, "all-reduce, buckets of 5000");
    check_variant(t, &(variant){false, true, 5000, false, true},
                  "all-reduce in bf16, buckets of 5000");
}

/* The buckets' exchanges by copies through peer-mapped memory (MG_DP_EXCHANGE=copies: MPI's
 * shared-memory windows on CPU ranks, CUDA IPC on GPUs of one host) against the group's
 * collectives, the same variant: the copies' path is the one taken, and the losses, norms and
 * weights agree within twice the variant's tolerance (the same sums, in another order). */
static void check_exchange(dist_ctx *t, const variant *v, const char *label) {
    if (t->size < 2) return;
    const char *env = getenv("MG_DP_EXCHANGE");
    mg_comm *world = mg_comm_world_comm(t->w);
    run_out coll = {0}, copies = {0};
    setenv("MG_DP_EXCHANGE", "collectives", 1);
    mg_env_forget();
    mg_trainer *a = train(t, v, world, &coll);
    setenv("MG_DP_EXCHANGE", "copies", 1);
    mg_env_forget();
    mg_trainer *b = train(t, v, world, &copies);
    DEXPECT(b->ddp[0].peer != NULL && a->ddp[0].peer == NULL,
            "%s: the exchange paths are not the ones asked for (copies %s, collectives %s)", label,
            b->ddp[0].peer ? "on" : "off", a->ddp[0].peer ? "on" : "off");
    /* each run is within the variant's tolerance of one rank (check_variant), so within twice it
     * of the other: the sums of more than two ranks run in another order */
    const double tol = 2 * (dist_on_device(t) || v->bf16_reduce ? BF16_TOL : TOL);
    for (int s = 0; s < STEPS; s++) {
        DEXPECT(rel(copies.loss[s], coll.loss[s]) <= tol,
                "%s step %d: loss %.9g by copies, %.9g by the collectives", label, s + 1,
                copies.loss[s], coll.loss[s]);
        DEXPECT(rel(copies.norm[s], coll.norm[s]) <= tol,
                "%s step %d: grad norm %.9g by copies, %.9g by the collectives", label, s + 1,
                copies.norm[s], coll.norm[s]);
    }
    const char *which = "";
    double e = worst_param_error(b, copies.w, a, coll.w, &which);
    DEXPECT(e <= tol, "%s: parameters by copies differ from the collectives' by %.3g (%s)", label,
            e, which);
    if (env)
        setenv("MG_DP_EXCHANGE", env, 1);
    else
        unsetenv("MG_DP_EXCHANGE");
    mg_env_forget();
    free(coll.w);
    free(copies.w);
    stop(a);
    stop(b);
}

void test_train_distopt(dist_ctx *t) {
    quiet(t);
    check_variant(t, &(variant){true, false, 0, false, false}, "distributed optimizer, one bucket");
    check_variant(t, &(variant){true, true, 5000, false, false},
                  "distributed optimizer, buckets of 5000");
    check_variant(t, &(variant){true, true, 5000, true, false},
                  "distributed optimizer, buckets of 5000, parameter gather in forward");
    check_variant(t, &(variant){true, false, 0, false, true},
                  "distributed optimizer, reduce-scatter in bf16, one bucket");
    check_exchange(t, &(variant){true, true, 5000, true, false},
                   "distributed optimizer, buckets of 5000, both overlaps, by copies");
}

/* ---- the memory report against Megatron's bytes-per-parameter table (device buffers) ---- */

void test_train_memory(dist_ctx *t) {
    quiet(t);
    if (!dist_on_device(t)) return; /* on the cpu backend check_variant checks the arenas' bytes */
    mg_comm *world = mg_comm_world_comm(t->w);
    for (int distopt = 0; distopt < 2; distopt++) {
        mg_config c;
        make_config(t, &c, t->size, &(variant){distopt != 0, false, 0, false, false});
        c.num_layers = 4;
        c.hidden_size = 1024;
        c.num_attention_heads = 16;
        c.ffn_hidden_size = 4096;
        c.seq_length = c.max_position_embeddings = 128;
        c.vocab_size = 50304;
        DOK(mg_config_validate(&c));
        mg_trainer *tr = calloc(1, sizeof *tr);
        DOK(tr ? MG_OK : MG_ERR_NOMEM);
        DOK(mg_trainer_init(tr, &c, &(mg_train_groups){.dp = t->size > 1 ? world : NULL}));
        int D = distopt && t->size > 1 ? t->size : 1;
        double got =
            (double)tr->mem.measured_state_bytes / (double)mg_trainer_memory_per_param(tr).params;
        double want = 6.0 + 12.0 / D;
        DEXPECT(fabs(got - want) <= 0.05 * want,
                "%s over %d ranks: the model state took %.3f B per parameter "
                "(cudaMemGetInfo), Megatron's accounting says %.3f B",
                distopt ? "distributed optimizer" : "all-reduce", t->size, got, want);
        stop(tr);
    }
}

/* ---- checkpoints ---- */

static float *copy_of(const float *x, size_t n) {
    float *y = host_alloc(n, MG_F32);
    memcpy(y, x, n * sizeof *y);
    return y;
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    return remove(path);
}

/* 4 steps straight against 2 steps, a checkpoint, a resume (each rank its own shard) and 2 more
 * steps: losses, parameters and this rank's moments agree bit for bit. Then one rank alone
 * (unsharded) loads the same checkpoint and finds every moment the replicas saved. */
static void check_resume(dist_ctx *t, const variant *v, const char *label) {
    mg_comm *world = mg_comm_world_comm(t->w);
    int32_t dir[64] = {0}; /* a path, broadcast as 256 bytes */
    if (t->rank == 0) {
        snprintf((char *)dir, sizeof dir, "/tmp/mg_dist_resume_XXXXXX");
        DOK(mkdtemp((char *)dir) ? MG_OK : MG_ERR_IO);
    }
    DOK(mg_comm_broadcast(world, dir, 64, MG_I32, 0, NULL));
    const char *path = (const char *)dir;
    double loss[4], norm[4], l2[2], n2[2];

    mg_trainer *a = start(t, v, world, NULL, NULL);
    for (int s = 0; s < 4; s++) DOK(mg_trainer_step(a, &loss[s], &norm[s]));
    mg_trainer *b = start(t, v, world, path, NULL);
    for (int s = 0; s < 2; s++) DOK(mg_trainer_step(b, &l2[0], &n2[0]));
    DOK(mg_trainer_save(b));
    size_t m = b->opt.numel;
    float *bm = copy_of(b->opt.m, m), *bv = copy_of(b->opt.v, m);
    mg_trainer *c = start(t, v, world, NULL, path);
    DEXPECT(c->state.iteration == 2 && c->opt.step == 2, "%s: resumed at iteration %lld step %lld",
            label, (long long)c->state.iteration, (long long)c->opt.step);
    for (int s = 0; s < 2; s++) {
        DOK(mg_trainer_step(c, &l2[s], &n2[s]));
        DEXPECT(l2[s] == loss[2 + s] && n2[s] == norm[2 + s],
                "%s step %d: resumed loss %.9g norm %.9g, straight %.9g %.9g", label, 3 + s, l2[s],
                n2[s], loss[2 + s], norm[2 + s]);
    }
    size_t n = a->model.params.numel;
    DEXPECT(!memcmp(a->mem.params, c->mem.params, n * sizeof(float)),
            "%s: resumed parameters differ", label);
    DEXPECT(!memcmp(a->opt.m, c->opt.m, m * sizeof(float)) &&
                !memcmp(a->opt.v, c->opt.v, m * sizeof(float)),
            "%s: rank %d's resumed moments differ", label, t->rank);

    /* resharding: one rank, no distributed optimizer, reads every rank's shard */
    mg_trainer *d = start(t, &(variant){false, false, 0, false, false}, NULL, NULL, path);
    int wrong = 0;
    for (int i = 0; i < b->opt.n_pieces; i++) {
        const mg_optim_piece *pc = &b->opt.pieces[i];
        size_t at = d->model.params.p[pc->index].offset + (size_t)pc->param_start;
        size_t len = (size_t)(pc->param_end - pc->param_start);
        wrong += memcmp(d->opt.m + at, bm + pc->local, len * sizeof(float)) != 0;
        wrong += memcmp(d->opt.v + at, bv + pc->local, len * sizeof(float)) != 0;
    }
    DEXPECT(!wrong, "%s: one rank loading the checkpoint finds %d of rank %d's pieces changed",
            label, wrong, t->rank);
    free(bm);
    free(bv);
    stop(a);
    stop(b);
    stop(c);
    stop(d);
    DOK(mg_comm_barrier(world, NULL));
    if (t->rank == 0) nftw(path, remove_entry, 8, FTW_DEPTH | FTW_PHYS);
}

/* Host buffers: the resumed state is compared in place (the trainer's buffers are host memory). */
void test_train_resume(dist_ctx *t) {
    quiet(t);
    if (dist_on_device(t)) return;
    check_resume(t, &(variant){false, false, 0, false, false}, "all-reduce");
    check_resume(t, &(variant){true, true, 5000, true, false},
                 "distributed optimizer, buckets of 5000, parameter gather in forward");
}
