/* `megatron plan`'s grad buffer section: Megatron's contiguous gradient buffer, its buckets and the
 * distributed optimizer's shards (src/parallel/grad_buffer.h), for
 *   --param-sizes A,B,C [--shared-embedding-param I[,J..]]   one buffer of parameters of those
 * sizes, or a model (--num-layers, --hidden-size, ...)         one buffer per model chunk, as
 * Megatron wraps each chunk in its own DDP. The buffer is reduced over the data-parallel group with
 * context parallelism: D = dp x cp of the layout (the world size when no other parallelism is
 * given).
 *
 * A model chunk (pipeline rank r, virtual stage v) holds, in the registration order of
 * src/model/gpt.c (megatron-core's GPTModel): the embeddings on the first chunk of the first stage,
 * its transformer layers (named by their global layer number), the final norm and the output layer
 * on the last chunk of the last stage. Sizes are per tensor-parallel rank: a split dimension is
 * divided by TP, and the vocabulary is padded to a multiple of make-vocab-size-divisible-by x TP,
 * as Megatron pads it. As in Megatron-LM's training.get_model, only the first chunk of pipeline
 * rank 0 is bucketed (--overlap-grad-reduce); every other chunk is one bucket. With tied
 * embeddings and PP > 1 (LanguageModule.setup_embeddings_and_output_layer) the first stage's word
 * embedding and the last stage's copy of it, output_layer.weight, are the shared embedding. */
#include "cli/plan.h"

#include "config/flags.h"
#include "model/gpt.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_PARAM_SIZES (1 << 20)

/* A comma list of integers in [lo, 2^53] ("10,20,30": digits and commas, nothing else), for
 * --param-sizes and --shared-embedding-param; `what` completes "FLAG expects WHAT, got 'V'". */
static mg_status parse_list(const char *flag, const char *what, const char *v, long long lo,
                            int64_t **out, int *n_out) {
    *out = NULL;
    *n_out = 0;
    int n = 1;
    for (const char *c = v; *c; c++) n += *c == ',';
    if (n > MAX_PARAM_SIZES)
        return MG_FAIL(MG_ERR_USAGE, "%s lists %d values; at most %d", flag, n, MAX_PARAM_SIZES);
    int64_t *vals = malloc((size_t)n * sizeof *vals);
    if (!vals) return MG_FAIL(MG_ERR_NOMEM, "out of memory for %d values of %s", n, flag);
    const char *s = v;
    for (int i = 0; i < n; i++) {
        char *end;
        errno = 0;
        long long x = *s >= '0' && *s <= '9' ? strtoll(s, &end, 10) : -1;
        if (x < lo || errno || (*end != ',' && *end != '\0') || x > ((int64_t)1 << 53)) {
            free(vals);
            return MG_FAIL(MG_ERR_USAGE, "%s expects %s, got '%s'", flag, what, v);
        }
        vals[i] = x;
        s = end + (*end == ',');
    }
    *out = vals;
    *n_out = n;
    return MG_OK;
}

/* expert: the experts' buffer, reduced over the expert-data-parallel group */
static mg_grad_buffer_config buffer_config(const mg_plan *p, bool disable_bucketing,
                                           const bool *shared, bool expert) {
    const mg_config *c = &p->cfg;
    return (mg_grad_buffer_config){
        .data_parallel_size = expert ? p->layout.edp : p->layout.dp * p->layout.sizes.cp,
        .use_distributed_optimizer = c->use_distributed_optimizer,
        .overlap_grad_reduce = c->overlap_grad_reduce,
        .bucket_size = c->ddp_bucket_size > 0 ? c->ddp_bucket_size : 0,
        .pad_for_high_nccl_busbw = c->ddp_pad_buckets_for_high_nccl_busbw,
        .disable_bucketing = disable_bucketing,
        .shared_embedding = shared};
}

static mg_status grad_from_sizes(mg_plan *p) {
    p->grad = calloc(1, sizeof *p->grad);
    if (!p->grad) return MG_FAIL(MG_ERR_NOMEM, "out of memory for the grad buffer plan");
    p->n_grad = 1;
    mg_plan_grad_buffer *b = &p->grad[0];
    b->pp_rank = b->vp_stage = -1;
    MG_CHECK(parse_list("--param-sizes", "comma-separated positive element counts (e.g. 10,20,30)",
                        p->param_sizes, 1, &b->numel, &b->n));
    int64_t *idx = NULL;
    int n_idx = 0;
    if (p->shared_embedding_param)
        MG_CHECK(parse_list("--shared-embedding-param",
                            "parameter indices (0, 1, ...; a comma list)",
                            p->shared_embedding_param, 0, &idx, &n_idx));
    mg_status st;
    bool *shared = calloc((size_t)b->n, sizeof *shared);
    if (!shared) {
        st = MG_FAIL(MG_ERR_NOMEM, "out of memory for the grad buffer plan");
        goto done;
    }
    for (int i = 0; i < n_idx; i++) {
        if (idx[i] >= b->n) {
            st = MG_FAIL(MG_ERR_USAGE,
                         "--shared-embedding-param %lld is out of range: --param-sizes lists %d "
                         "parameters (0..%d)",
                         (long long)idx[i], b->n, b->n - 1);
            goto done;
        }
        shared[idx[i]] = true;
    }
    mg_grad_buffer_config gc = buffer_config(p, false, shared, false);
    st = mg_grad_buffer_layout_build(b->numel, b->n, &gc, &b->layout);
done:
    free(shared);
    free(idx);
    return st;
}

/* The layer number of "decoder.layers.<L>.*", or -1. */
static int layer_of(const char *name) {
    const char *pre = "decoder.layers.";
    if (strncmp(name, pre, strlen(pre))) return -1;
    return atoi(name + strlen(pre));
}

static bool starts_with(const char *s, const char *pre) {
    return !strncmp(s, pre, strlen(pre));
}

/* Adds the dense (or the experts') parameters of chunk (r, v) to b, in registration order. */
static mg_status chunk_params(const mg_plan *p, const mg_gpt *g, int r, int v,
                              mg_plan_grad_buffer *b, bool *shared) {
    const bool expert = b->expert;
    int pp = p->cfg.pipeline_model_parallel_size;
    const mg_layers_chunk *ch = &p->chunks[r * p->vpp + v];
    bool pre = r == 0 && v == 0, post = r == pp - 1 && v == p->vpp - 1;
    const mg_param_table *t = &g->params;
    b->n = 0;
    for (int i = 0; i < t->n; i++) {
        const mg_param_meta *m = &t->p[i];
        int layer = layer_of(m->name);
        bool here = layer >= 0 ? layer >= ch->offset && layer < ch->offset + ch->count
                    : starts_with(m->name, "embedding.") ? pre
                                                         : post;
        if (!here || m->expert != expert || (m->fp8_tensor >= 0) != b->fp8) continue;
        b->numel[b->n] = m->numel; /* this tensor-parallel rank's shard */
        snprintf(b->names[b->n], MG_PLAN_PARAM_NAME, "%s", m->name);
        shared[b->n++] = i == g->wte && g->cfg.tied && pp > 1;
    }
    /* The last stage's copy of a tied embedding (megatron-core's output_layer.weight there). */
    if (post && g->cfg.tied && pp > 1 && !expert && !b->fp8) {
        b->numel[b->n] = t->p[g->wte].numel;
        snprintf(b->names[b->n], MG_PLAN_PARAM_NAME, "output_layer.weight");
        shared[b->n++] = true;
    }
    return MG_OK;
}

/* The model's weights with their tensor-parallel split (`plan` shows the per-rank layout). */
static mg_status weights_from_model(mg_plan *p, const mg_gpt *g) {
    const mg_param_table *t = &g->params;
    p->weights = calloc((size_t)t->n, sizeof *p->weights);
    if (!p->weights) return MG_FAIL(MG_ERR_NOMEM, "out of memory for the weight table");
    p->n_weights = t->n;
    p->params_total = mg_model_config_num_params(&g->cfg);
    p->params_tp = mg_params_count(t);
    for (int i = 0; i < t->n; i++) p->params_expert += t->p[i].expert ? t->p[i].numel : 0;
    for (int i = 0; i < t->n; i++) {
        const mg_param_meta *m = &t->p[i];
        mg_plan_weight *w = &p->weights[i];
        snprintf(w->name, sizeof w->name, "%s", m->name);
        w->ndim = m->ndim;
        for (int d = 0; d < 2; d++) {
            w->global_shape[d] = m->global_shape[d];
            w->local_shape[d] = m->shape[d];
        }
        w->split_dim = m->tp_split_dim;
        w->split_chunks = m->tp_split_chunks;
        w->sequence_parallel = m->sequence_parallel;
        w->vocab = i == g->wte || i == g->out_w;
    }
    return MG_OK;
}

/* The token dispatch's static buffers of one microbatch (model/moe.h), with a batch given. */
static mg_status moe_dispatch_plan(mg_plan *p, const mg_gpt *g) {
    int mbs = p->cfg.micro_batch_size > 0 ? p->cfg.micro_batch_size : 1;
    if (g->n_moe == 0 || p->cfg.seq_length < 1) return MG_OK;
    return mg_gpt_moe_rows(g, mbs * p->cfg.seq_length, &p->moe);
}

static mg_status grad_from_model(mg_plan *p) {
    mg_config m = p->cfg;
    MG_CHECK(mg_config_resolve_model(&m));
    if (m.vocab_size < 1)
        return MG_FAIL(MG_ERR_USAGE,
                       "the grad buffer of a model needs --vocab-size N (the embedding's rows); "
                       "or give --param-sizes");
    if (m.make_vocab_size_divisible_by < 1)
        return MG_FAIL(MG_ERR_USAGE, "--make-vocab-size-divisible-by must be >= 1, got %d",
                       m.make_vocab_size_divisible_by);
    /* tensor-parallel rank 0's shards (every rank's are the same size); the build applies
     * Megatron's checks (heads and query groups split over TP) and pads the vocabulary to a
     * multiple of make-vocab-size-divisible-by x TP */
    m.tensor_model_parallel_size = p->layout.sizes.tp;
    m.expert_model_parallel_size = p->layout.sizes.ep; /* expert-parallel rank 0's experts */
    /* the whole model (one stage), cut into the chunks' parameters below */
    m.pipeline_model_parallel_size = 1;
    m.virtual_pipeline_model_parallel_size = m.num_layers_per_virtual_pipeline_stage = -1;
    m.decoder_first_pipeline_num_layers = m.decoder_last_pipeline_num_layers = -1;
    m.account_for_embedding_in_pipeline_split = m.account_for_loss_in_pipeline_split = false;
    m.pipeline_model_parallel_layout[0] = '\0'; /* (its stages are the chunks cut below) */
    mg_gpt g;
    int pp = p->cfg.pipeline_model_parallel_size, n_chunks = pp * p->vpp;
    mg_status st;
    bool *shared = NULL; /* (params) a chunk's shared_embedding flags */
    /* clears g first: safe to free */
    MG_CHECK_GOTO(mg_gpt_build(&g, &m, 0, 0, 0), st, done);
    shared = calloc((size_t)g.params.n + 1, sizeof *shared);
    if (!shared) {
        st = MG_FAIL(MG_ERR_NOMEM, "out of memory for the grad buffer plan");
        goto done;
    }
    MG_CHECK_GOTO(moe_dispatch_plan(p, &g), st, done);
    /* --fp8-param-gather: the fp8 weights (the routed experts' too, as on a GPU with the fp8
     * grouped GEMM) in buffers of their own */
    mg_gpt_mark_fp8_weights(&g, true);
    /* per chunk its dense buffer and, for MoE models, its experts'; each twice with
     * --fp8-param-gather: the fp8 weights' buffer after the rest's */
    const int kinds = g.n_moe > 0 ? 2 : 1, per_chunk = kinds * (g.cfg.fp8_params ? 2 : 1);
    n_chunks *= per_chunk;
    p->grad = calloc((size_t)n_chunks, sizeof *p->grad);
    if (!p->grad) {
        st = MG_FAIL(MG_ERR_NOMEM, "out of memory for the grad buffer plan");
        goto done;
    }
    p->n_grad = n_chunks;
    MG_CHECK_GOTO(weights_from_model(p, &g), st, done);
    for (int r = 0; r < pp; r++)
        for (int v = 0; v < p->vpp; v++)
            for (int e = 0; e < per_chunk; e++) {
                mg_plan_grad_buffer *b = &p->grad[(r * p->vpp + v) * per_chunk + e];
                b->expert = e % kinds == 1;
                b->fp8 = e >= kinds;
                b->pp_rank = r;
                b->vp_stage = p->vpp > 1 ? v : -1;
                b->numel = malloc(((size_t)g.params.n + 1) * sizeof *b->numel);
                b->names = malloc(((size_t)g.params.n + 1) * sizeof *b->names);
                if (!b->numel || !b->names) {
                    st = MG_FAIL(MG_ERR_NOMEM, "out of memory for the grad buffer plan");
                    goto done;
                }
                MG_CHECK_GOTO(chunk_params(p, &g, r, v, b, shared), st, done);
                if (b->n == 0) continue; /* a chunk without parameters has no buffer */
                mg_grad_buffer_config gc = buffer_config(p, r > 0 || v > 0, shared, b->expert);
                MG_CHECK_GOTO(mg_grad_buffer_layout_build(b->numel, b->n, &gc, &b->layout), st,
                              done);
            }
done:
    free(shared);
    mg_gpt_free(&g);
    return st;
}

mg_status mg_plan_build_grad(mg_plan *p) {
    const mg_config *c = &p->cfg;
    if (c->ddp_bucket_size != -1 && c->ddp_bucket_size < 1)
        return MG_FAIL(MG_ERR_USAGE, "--ddp-bucket-size must be positive, got %lld",
                       (long long)c->ddp_bucket_size);
    if (p->shared_embedding_param && !p->param_sizes)
        return MG_FAIL(MG_ERR_USAGE,
                       "--shared-embedding-param needs --param-sizes (a model's shared embedding "
                       "follows from the model)");
    if (p->param_sizes) return grad_from_sizes(p);
    if (c->hidden_size == -1) return MG_OK; /* no model given: no grad buffer section */
    p->grad_from_model = true;
    return grad_from_model(p);
}

void mg_plan_free_grad(mg_plan *p) {
    for (int i = 0; i < p->n_grad; i++) {
        free(p->grad[i].numel);
        free(p->grad[i].names);
        mg_grad_buffer_layout_free(&p->grad[i].layout);
    }
    free(p->grad);
    p->grad = NULL;
    p->n_grad = 0;
    free(p->weights);
    p->weights = NULL;
    p->n_weights = 0;
}
