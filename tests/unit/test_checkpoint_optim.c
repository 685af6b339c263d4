/* The optimizer files of a checkpoint (train/checkpoint_optim.c): pieces written as shards load
 * back into any other split of the same elements, and every malformed or incomplete file set is
 * one line naming the file and the problem. Also mg_params_relayout's refusals. */
#include "test.h"

#include "core/flags.h"
#include "core/safetensors.h"
#include "model/gpt.h"
#include "train/checkpoint_optim.h"

#include <ftw.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static mg_status tiny_model(mg_gpt *g) {
    char *argv[] = {"--num-layers",
                    "1",
                    "--hidden-size",
                    "16",
                    "--num-attention-heads",
                    "2",
                    "--seq-length",
                    "8",
                    "--vocab-size",
                    "32",
                    "--make-vocab-size-divisible-by",
                    "8",
                    "--train-iters",
                    "1",
                    "--lr",
                    "1e-3",
                    "--mock-data"};
    mg_config c;
    bool help;
    mg_config_defaults(&c);
    MG_CHECK(mg_flags_parse(&c, (int)(sizeof argv / sizeof *argv), argv, &help));
    MG_CHECK(mg_config_validate(&c));
    return mg_gpt_build(g, &c, 0, 0);
}

/* Moments of element j of parameter i: distinct values, so a misplaced copy shows. */
static float value(int i, int64_t j, int k) {
    return (float)(1000 * i + j) + (k ? 0.5f : 0.25f);
}

/* A rank's tensors for the given pieces, filled with value(). */
static void fill(const mg_gpt *g, mg_optim_piece *pc, int n, mg_checkpoint_tensors *t,
                 int n_shards) {
    size_t local = 0;
    for (int i = 0; i < n; i++) {
        pc[i].local = local;
        local += (size_t)(pc[i].param_end - pc[i].param_start);
    }
    *t = (mg_checkpoint_tensors){.exp_avg = calloc(local + 1, sizeof(float)),
                                 .exp_avg_sq = calloc(local + 1, sizeof(float)),
                                 .pieces = pc,
                                 .n_pieces = n,
                                 .n_shards = n_shards,
                                 /* each rank writes every piece it holds */
                                 .owns = {true, true}};
    for (int i = 0; i < n; i++)
        for (int64_t j = pc[i].param_start; j < pc[i].param_end; j++) {
            t->exp_avg[pc[i].local + (size_t)(j - pc[i].param_start)] = value(pc[i].index, j, 0);
            t->exp_avg_sq[pc[i].local + (size_t)(j - pc[i].param_start)] = value(pc[i].index, j, 1);
        }
}

static int remove_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw) {
    return remove(path);
}

MG_TEST(checkpoint_optim_shards_reload_in_any_split) {
    mg_gpt g;
    MG_EXPECT_OK(tiny_model(&g));
    if (t->failures) return;
    char dir[] = "/tmp/mg_ckpt_optim_XXXXXX", path[256];
    MG_EXPECT(mkdtemp(dir) != NULL, "mkdtemp");
    const int64_t n1 = g.params.p[1].numel;
    /* shard 0: parameter 0 whole and the first 5 elements of parameter 1; shard 1: the rest */
    mg_optim_piece a[2] = {{.index = 0, .param_start = 0, .param_end = g.params.p[0].numel},
                           {.index = 1, .param_start = 0, .param_end = 5}};
    mg_optim_piece b[1] = {{.index = 1, .param_start = 5, .param_end = n1}};
    mg_checkpoint_tensors ta, tb;
    fill(&g, a, 2, &ta, 2);
    fill(&g, b, 1, &tb, 2);
    snprintf(path, sizeof path, "%s/optimizer-00001-of-00002.safetensors", dir);
    MG_EXPECT_OK(mg_checkpoint_optim_write(path, &g, &ta, 0));
    snprintf(path, sizeof path, "%s/optimizer-00002-of-00002.safetensors", dir);
    MG_EXPECT_OK(mg_checkpoint_optim_write(path, &g, &tb, 1));

    /* another split: parameter 1 whole at local 0, parameter 0's tail after it */
    mg_optim_piece c[2] = {{.index = 1, .param_start = 0, .param_end = n1},
                           {.index = 0, .param_start = 3, .param_end = g.params.p[0].numel}};
    mg_checkpoint_tensors tc;
    fill(&g, c, 2, &tc, 2);
    size_t len = (size_t)(n1 + g.params.p[0].numel - 3);
    float *want_m = malloc(len * sizeof(float)), *want_v = malloc(len * sizeof(float));
    memcpy(want_m, tc.exp_avg, len * sizeof(float));
    memcpy(want_v, tc.exp_avg_sq, len * sizeof(float));
    memset(tc.exp_avg, 0, len * sizeof(float));
    memset(tc.exp_avg_sq, 0, len * sizeof(float));
    MG_EXPECT_OK(mg_checkpoint_optim_load(dir, 1, 2, &g, &tc));
    MG_EXPECT(!memcmp(tc.exp_avg, want_m, len * sizeof(float)) &&
                  !memcmp(tc.exp_avg_sq, want_v, len * sizeof(float)),
              "resharded moments differ");

    /* a piece no file covers entirely: one line naming the parameter and the count */
    mg_optim_piece d[1] = {{.index = 2, .param_start = 0, .param_end = 4}};
    mg_checkpoint_tensors td;
    fill(&g, d, 1, &td, 2);
    char msg[256];
    snprintf(msg, sizeof msg, "hold 0 of the 4 moment elements [0, 4) of %s this rank needs",
             g.params.p[2].name);
    MG_EXPECT_ERROR(mg_checkpoint_optim_load(dir, 1, 2, &g, &td), MG_ERR_FORMAT, msg);
    /* a shard file missing */
    MG_EXPECT_ERROR(mg_checkpoint_optim_load(dir, 1, 3, &g, &tc), MG_ERR_IO,
                    "optimizer-00001-of-00003.safetensors");

    /* a range that is not "a:b" within the parameter */
    float x[4] = {1, 2, 3, 4};
    char name[2][160];
    snprintf(name[0], sizeof name[0], "exp_avg.%s", g.params.p[1].name);
    snprintf(name[1], sizeof name[1], "exp_avg_sq.%s", g.params.p[1].name);
    mg_st_tensor ts[2] = {{name[0], MG_F32, 1, {4}, x}, {name[1], MG_F32, 1, {4}, x}};
    char meta[256];
    snprintf(meta, sizeof meta, "{\"%s\": \"7:3\"}", g.params.p[1].name);
    snprintf(path, sizeof path, "%s/optimizer-00002-of-00002.safetensors", dir);
    MG_EXPECT_OK(mg_safetensors_write(path, ts, 2, meta));
    MG_EXPECT_ERROR(mg_checkpoint_optim_load(dir, 1, 2, &g, &tc), MG_ERR_FORMAT,
                    "should be the range 'a:b'");
    /* a range whose size is not the tensor's */
    snprintf(meta, sizeof meta, "{\"%s\": \"5:12\"}", g.params.p[1].name);
    MG_EXPECT_OK(mg_safetensors_write(path, ts, 2, meta));
    MG_EXPECT_ERROR(mg_checkpoint_optim_load(dir, 1, 2, &g, &tc), MG_ERR_FORMAT,
                    "has the wrong dtype or size");
    /* one moment without the other */
    snprintf(meta, sizeof meta, "{\"%s\": \"5:9\"}", g.params.p[1].name);
    MG_EXPECT_OK(mg_safetensors_write(path, ts, 1, meta));
    snprintf(msg, sizeof msg, "'exp_avg_sq.%s' is missing", g.params.p[1].name);
    MG_EXPECT_ERROR(mg_checkpoint_optim_load(dir, 1, 2, &g, &tc), MG_ERR_FORMAT, msg);

    free(want_m);
    free(want_v);
    mg_checkpoint_tensors *all[] = {&ta, &tb, &tc, &td};
    for (int i = 0; i < 4; i++) {
        free(all[i]->exp_avg);
        free(all[i]->exp_avg_sq);
    }
    nftw(dir, remove_entry, 4, FTW_DEPTH | FTW_PHYS);
    mg_gpt_free(&g);
}

MG_TEST(params_relayout_refuses_overlap) {
    mg_gpt g;
    MG_EXPECT_OK(tiny_model(&g));
    if (t->failures) return;
    int n = g.params.n;
    size_t *off = calloc((size_t)n, sizeof *off), total = 0;
    /* reverse order, packed: valid */
    for (int i = n - 1; i >= 0; i--) {
        off[i] = total;
        total += (size_t)g.params.p[i].numel;
    }
    MG_EXPECT_OK(mg_params_relayout(&g.params, off, total));
    MG_EXPECT(g.params.numel == total && g.params.p[n - 1].offset == 0, "relayout not applied");
    size_t kept = g.params.p[0].offset;
    off[0] += 1; /* parameter 0 (the last one in the buffer) now ends past it */
    MG_EXPECT_ERROR(mg_params_relayout(&g.params, off, total), MG_ERR_INTERNAL,
                    "ends past the buffer");
    off[0] -= 1;
    off[1] = off[0]; /* two parameters at one place */
    MG_EXPECT_ERROR(mg_params_relayout(&g.params, off, total), MG_ERR_INTERNAL,
                    "overlaps the next parameter");
    MG_EXPECT(g.params.p[0].offset == kept && g.params.numel == total,
              "a refused relayout changed the table");
    free(off);
    mg_gpt_free(&g);
}
