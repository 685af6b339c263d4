/* model/: parameter metadata, initialisation, the Hugging Face name mapping, and the mock data. */
#include "test.h"

#include "config/flags.h"
#include "core/rng.h"
#include "data/mock.h"
#include "convert/hf_names.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static mg_status make_config(mg_config *c, bool llama) {
    char *base[] = {"--num-layers",
                    "3",
                    "--hidden-size",
                    "40",
                    "--num-attention-heads",
                    "4",
                    "--seq-length",
                    "12",
                    "--vocab-size",
                    "100",
                    "--make-vocab-size-divisible-by",
                    "16",
                    "--train-iters",
                    "1",
                    "--lr",
                    "1e-3",
                    "--mock-data"};
    char *ll[] = {"--normalization",
                  "RMSNorm",
                  "--swiglu",
                  "--position-embedding-type",
                  "rope",
                  "--group-query-attention",
                  "--num-query-groups",
                  "2",
                  "--kv-channels",
                  "6",
                  "--ffn-hidden-size",
                  "24",
                  "--disable-bias-linear",
                  "--untie-embeddings-and-output-weights"};
    char *argv[64];
    int argc = 0;
    for (size_t i = 0; i < sizeof base / sizeof *base; i++) argv[argc++] = base[i];
    if (llama)
        for (size_t i = 0; i < sizeof ll / sizeof *ll; i++) argv[argc++] = ll[i];
    bool help;
    mg_config_defaults(c);
    MG_CHECK(mg_flags_parse(c, argc, argv, &help));
    return mg_config_validate(c);
}

MG_TEST(model_param_table_metadata) {
    for (int llama = 0; llama < 2; llama++) {
        mg_config c;
        MG_EXPECT_OK(make_config(&c, llama));
        mg_gpt g;
        MG_EXPECT_OK(mg_gpt_build(&g, &c, 0, 0, 0));
        int64_t total = 0;
        for (int i = 0; i < g.params.n; i++) {
            const mg_param_meta *p = &g.params.p[i];
            total += p->numel;
            MG_EXPECT(p->offset % MG_PARAM_ALIGN == 0, "%s offset %zu not aligned", p->name,
                      p->offset);
            if (i)
                MG_EXPECT(p->offset >= g.params.p[i - 1].offset + (size_t)g.params.p[i - 1].numel,
                          "%s overlaps its predecessor", p->name);
            /* Megatron: no weight decay on biases and norm weights (the 1-D parameters) */
            MG_EXPECT(p->weight_decay == (p->ndim == 2), "%s weight decay flag", p->name);
            MG_EXPECT(p->id == mg_param_id(p->name), "%s rng id", p->name);
        }
        MG_EXPECT(total == mg_model_config_num_params(&g.cfg), "param count %lld vs formula %lld",
                  (long long)total, (long long)mg_model_config_num_params(&g.cfg));
        MG_EXPECT(g.cfg.V == 112, "padded vocab %d, expected 112", g.cfg.V);
        const mg_param_meta *qkv = &g.params.p[g.layers[0].qkv_w];
        const mg_param_meta *proj = &g.params.p[g.layers[0].proj_w];
        const mg_param_meta *fc1 = &g.params.p[g.layers[0].fc1_w];
        MG_EXPECT(qkv->tp_split_dim == 0 && proj->tp_split_dim == 1, "TP split dims");
        MG_EXPECT(fc1->tp_split_chunks == (llama ? 2 : 1), "SwiGLU fc1 is two stacked blocks");
        if (llama) {
            MG_EXPECT(qkv->shape[0] == 2 * (2 + 2) * 6, "GQA qkv rows %lld",
                      (long long)qkv->shape[0]);
            MG_EXPECT(g.wpe < 0 && g.out_w != g.wte && g.layers[0].qkv_b < 0, "llama shape");
        } else {
            MG_EXPECT(g.out_w == g.wte && g.wpe >= 0, "GPT-2 ties the output layer");
        }
        mg_gpt_free(&g);
    }
}

MG_TEST(model_init_is_shardable_and_scaled) {
    mg_config c;
    MG_EXPECT_OK(make_config(&c, false));
    mg_gpt g;
    MG_EXPECT_OK(mg_gpt_build(&g, &c, 0, 0, 0));
    float *buf = calloc(g.params.numel, sizeof *buf);
    mg_params_init(&g.params, 42, buf);
    /* any slice equals what the counter-based RNG gives for those global indices */
    const mg_param_meta *p = &g.params.p[g.layers[1].fc1_w];
    for (int64_t j = p->numel / 3; j < p->numel / 3 + 50; j++)
        MG_EXPECT(buf[p->offset + j] == p->init_std * mg_rng_normal(42, p->id, (uint64_t)j),
                  "element %lld", (long long)j);
    /* Megatron's init: std for inputs, std/sqrt(2L) for output projections, 1 and 0 for norms */
    const mg_param_meta *fc2 = &g.params.p[g.layers[1].fc2_w];
    MG_EXPECT(fabsf(fc2->init_std - 0.02f / sqrtf(6.0f)) < 1e-7f, "scaled init std %g",
              fc2->init_std);
    const mg_param_meta *ln = &g.params.p[g.layers[0].ln1_w], *lb = &g.params.p[g.layers[0].ln1_b];
    MG_EXPECT(buf[ln->offset] == 1.0f && buf[lb->offset] == 0.0f, "norm init");
    free(buf);
    mg_gpt_free(&g);
}

MG_TEST(model_hf_mapping_round_trip_and_qkv_layout) {
    for (int llama = 0; llama < 2; llama++) {
        mg_config c;
        MG_EXPECT_OK(make_config(&c, llama));
        mg_gpt g;
        MG_EXPECT_OK(mg_gpt_build(&g, &c, 0, 0, 0));
        size_t n = g.params.numel;
        float *a = calloc(n, sizeof *a), *b = calloc(n, sizeof *b);
        for (int i = 0; i < g.params.n; i++)
            for (int64_t j = 0; j < g.params.p[i].numel; j++)
                a[g.params.p[i].offset + j] = (float)(i * 100000 + j);
        mg_hf_export_set set;
        MG_EXPECT_OK(mg_hf_export(&g, a, &set));
        char path[64];
        snprintf(path, sizeof path, "/tmp/mg_test_hf_%d.safetensors", (int)getpid());
        MG_EXPECT_OK(mg_safetensors_write(path, set.tensors, set.n, NULL));
        mg_safetensors st;
        MG_EXPECT_OK(mg_safetensors_open(&st, path));
        MG_EXPECT_OK(mg_hf_import(&g, &st, path, b));
        MG_EXPECT(memcmp(a, b, n * sizeof *a) == 0, "export then import is not the identity");
        if (llama) {
            /* HF k_proj row (group 1, dim 2) sits in Megatron's group 1 after its 2 query heads */
            const mg_st_entry *k =
                mg_safetensors_find(&st, "model.layers.0.self_attn.k_proj.weight");
            const mg_param_meta *qkv = &g.params.p[g.layers[0].qkv_w];
            int hd = 6, r = 2, H = 40;
            int64_t our_row = (1 * (r + 2) + r) * hd + 2, hf_row = 1 * hd + 2;
            MG_EXPECT(k && ((const float *)k->data)[hf_row * H + 5] ==
                               a[qkv->offset + our_row * H + 5],
                      "k_proj row mapping");
        } else {
            /* GPT-2 Conv1D: c_attn.weight is stored (in, out) */
            const mg_st_entry *w = mg_safetensors_find(&st, "transformer.h.0.attn.c_attn.weight");
            MG_EXPECT(w && w->shape[0] == 40 && w->shape[1] == 120, "c_attn shape");
            MG_EXPECT(mg_safetensors_find(&st, "lm_head.weight") == NULL, "tied lm_head exported");
        }
        mg_safetensors_close(&st);
        unlink(path);
        mg_hf_export_free(&set);
        free(a), free(b);
        mg_gpt_free(&g);
    }
}

MG_TEST(model_hf_import_rejects_wrong_shapes) {
    mg_config c;
    MG_EXPECT_OK(make_config(&c, false));
    mg_gpt g;
    MG_EXPECT_OK(mg_gpt_build(&g, &c, 0, 0, 0));
    float *buf = calloc(g.params.numel, sizeof *buf);
    mg_safetensors st;
    MG_EXPECT_OK(mg_safetensors_open(&st, "tests/golden/gpt2.safetensors")); /* hidden 48, not 40 */
    MG_EXPECT(mg_hf_import(&g, &st, "gpt2.safetensors", buf) == MG_ERR_FORMAT, "accepted");
    MG_EXPECT(strstr(mg_error_message(), "has shape") != NULL, "message: %s", mg_error_message());
    mg_safetensors_close(&st);
    free(buf);
    mg_gpt_free(&g);
}

MG_TEST(model_mock_data_samples) {
    mg_mock_data d;
    MG_EXPECT_OK(mg_mock_init(&d, 3, 0, 50, 16));
    int32_t a[17], b[17], again[17];
    int eods = 0;
    for (int64_t i = 0; i < 200; i++) {
        MG_EXPECT_OK(mg_mock_sample(&d, i, a));
        MG_EXPECT_OK(mg_mock_sample(&d, i + 1, b));
        MG_EXPECT(a[16] == b[0], "samples %lld and %lld do not overlap by one token", (long long)i,
                  (long long)i + 1);
        for (int k = 0; k < 17; k++) {
            MG_EXPECT(a[k] >= 1 && a[k] < 50, "token %d out of range", a[k]);
            eods += a[k] == 49;
            /* inside a document the tokens count up */
            if (k && a[k - 1] != 49 && a[k] != 49) MG_EXPECT(a[k] == a[k - 1] + 1, "not counting");
        }
    }
    MG_EXPECT(eods > 10, "too few documents: %d", eods);
    MG_EXPECT_OK(mg_mock_sample(&d, 5, again)); /* random access gives the same sample */
    mg_mock_data d2;
    MG_EXPECT_OK(mg_mock_init(&d2, 3, 0, 50, 16));
    MG_EXPECT_OK(mg_mock_sample(&d2, 5, a));
    MG_EXPECT(memcmp(a, again, sizeof a) == 0, "sample depends on access order");
    mg_mock_free(&d);
    mg_mock_free(&d2);
}

/* Tensor parallelism: every rank's shards are exact slices of the whole model's initial values
 * (the same padded vocabulary on both sides), the split follows Megatron's layout (whole query
 * groups of the fused QKV, SwiGLU's gate and up halves split each, row-parallel columns), the
 * shards tile each split tensor once, and sequence parallelism marks exactly the norms. */
MG_TEST(model_tp_shards_are_slices_of_the_whole) {
    for (int llama = 0; llama < 2; llama++) {
        mg_config c;
        MG_EXPECT_OK(make_config(&c, llama));
        c.make_vocab_size_divisible_by = 32; /* whole: 128 rows; TP 2 pads to 16 x 2: 128 too */
        mg_gpt whole;
        MG_EXPECT_OK(mg_gpt_build(&whole, &c, 0, 0, 0));
        float *w = calloc(whole.params.numel, sizeof *w);
        mg_params_init(&whole.params, 7, w);
        c.make_vocab_size_divisible_by = 16;
        c.tensor_model_parallel_size = 2;
        c.sequence_parallel = true;
        int64_t *covered = calloc((size_t)whole.params.n, sizeof *covered);
        for (int r = 0; r < 2; r++) {
            mg_gpt g;
            MG_EXPECT_OK(mg_gpt_build(&g, &c, r, 0, 0));
            MG_EXPECT(g.cfg.V == whole.cfg.V && g.cfg.V_l == g.cfg.V / 2 && g.cfg.v0 == r * 64,
                      "vocabulary %d, rows [%d, +%d)", g.cfg.V, g.cfg.v0, g.cfg.V_l);
            float *s = calloc(g.params.numel, sizeof *s);
            mg_params_init(&g.params, 7, s);
            int bad = 0;
            for (int i = 0; i < g.params.n; i++) {
                const mg_param_meta *m = &g.params.p[i], *mw = &whole.params.p[i];
                for (int64_t j = 0; j < m->numel; j++)
                    bad += s[m->offset + j] != w[mw->offset + mg_param_global_index(m, j)];
                covered[i] += m->tp_split_dim >= 0 ? m->numel : 0;
                bool norm = strstr(m->name, "layernorm") != NULL;
                MG_EXPECT(m->sequence_parallel == norm, "%s sequence_parallel %d", m->name,
                          m->sequence_parallel);
            }
            MG_EXPECT(bad == 0, "rank %d: %d shard elements differ from the whole model's", r, bad);
            /* the layout: rank r's first QKV row is group r's first row; fc1's local rows
             * [F/2, F) are the up half's [F + r F/2, ...); proj's columns are r's heads */
            const mg_model_config *m = &g.cfg;
            const mg_param_meta *qkv = &g.params.p[g.layers[0].qkv_w];
            const mg_param_meta *fc1 = &g.params.p[g.layers[0].fc1_w];
            const mg_param_meta *proj = &g.params.p[g.layers[0].proj_w];
            int64_t gsz = (int64_t)(m->nq / m->ng + 2) * m->hd;
            MG_EXPECT(mg_param_global_index(qkv, 0) == (int64_t)r * m->ng_l * gsz * m->H,
                      "qkv row 0 of rank %d", r);
            if (llama)
                MG_EXPECT(mg_param_global_index(fc1, (int64_t)m->F_l * m->H) ==
                              ((int64_t)m->F + r * m->F_l) * m->H,
                          "fc1 up half of rank %d", r);
            MG_EXPECT(mg_param_global_index(proj, (int64_t)proj->shape[1] + 1) ==
                          proj->global_shape[1] + r * proj->shape[1] + 1,
                      "proj row 1 column 1 of rank %d", r);
            free(s);
            mg_gpt_free(&g);
        }
        for (int i = 0; i < whole.params.n; i++)
            if (covered[i])
                MG_EXPECT(covered[i] == whole.params.p[i].numel, "%s: shards hold %lld of %lld",
                          whole.params.p[i].name, (long long)covered[i],
                          (long long)whole.params.p[i].numel);
        free(covered);
        free(w);
        mg_gpt_free(&whole);
    }
}
