/* Layer placement over pipeline ranks and virtual stages (src/parallel/pipeline/layers.c) against
 * Megatron: worked examples spelled out by hand, megatron-core 0.16.1's
 * get_transformer_layer_offset / get_num_layers_to_build / TransformerConfig checks
 * (tests/golden/pp_schedule/layers.json, from tools/reference/megatron_pp_schedule.py), the tiling
 * invariant over a large grid, and every rejection. */
#include "test.h"

#include "golden_io.h"

#include "core/file.h"
#include "core/status.h"
#include "parallel/pipeline/layers.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static mg_layers_params lp(int L, int P, int V) {
    mg_layers_params p = {L, P, V, 0, -1, -1, false, false, NULL};
    return p;
}

/* Expects the plan of p to be want[r*V + c] = {offset, count}. */
static void expect_plan(mg_test_ctx *t, mg_layers_params p, int want_v, const int (*want)[2]) {
    int v = -1;
    mg_layers_chunk plan[64];
    MG_EXPECT_OK(mg_layers_check(&p, &v));
    MG_EXPECT(v == want_v, "L %d P %d: V %d, want %d", p.num_layers, p.pp, v, want_v);
    if (v != want_v) return;
    MG_EXPECT_OK(mg_layers_plan(&p, plan));
    for (int i = 0; i < p.pp * v; i++)
        MG_EXPECT(plan[i].offset == want[i][0] && plan[i].count == want[i][1],
                  "L %d P %d V %d rank %d chunk %d: [%d, +%d), want [%d, +%d)", p.num_layers, p.pp,
                  v, i / v, i % v, plan[i].offset, plan[i].count, want[i][0], want[i][1]);
}

MG_TEST(layers_worked_examples) {
    /* 16 layers, PP 4, VPP 2: GPU 0 holds layers [1, 2] and [9, 10] (1-based) */
    static const int s16[8][2] = {{0, 2}, {8, 2},  {2, 2}, {10, 2},
                                  {4, 2}, {12, 2}, {6, 2}, {14, 2}};
    expect_plan(t, lp(16, 4, 2), 2, s16);
    /* Megatron's comment: 8 layers, 2 stages, 4 chunks: stage 0 [0] [2] [4] [6] */
    static const int s8v4[8][2] = {{0, 1}, {2, 1}, {4, 1}, {6, 1}, {1, 1}, {3, 1}, {5, 1}, {7, 1}};
    expect_plan(t, lp(8, 2, 4), 4, s8v4);
    /* ... and 2 chunks: stage 0 [0, 1] [4, 5], stage 1 [2, 3] [6, 7] */
    static const int s8v2[4][2] = {{0, 2}, {4, 2}, {2, 2}, {6, 2}};
    expect_plan(t, lp(8, 2, 2), 2, s8v2);
    /* 32 layers, PP 4, VPP 2: rank 0 layers 0-3 and 16-19, rank 3 12-15 and 28-31 */
    static const int s32[8][2] = {{0, 4}, {16, 4}, {4, 4},  {20, 4},
                                  {8, 4}, {24, 4}, {12, 4}, {28, 4}};
    expect_plan(t, lp(32, 4, 2), 2, s32);
    /* No interleaving: 8 layers on 2 stages, offset = rank * 4 */
    static const int s8[2][2] = {{0, 4}, {4, 4}};
    expect_plan(t, lp(8, 2, 0), 1, s8);

    /* uneven: 10 layers, first 1, last 3, the middle 6 over 2 ranks */
    mg_layers_params p = lp(10, 4, 1);
    p.first_stage_layers = 1;
    p.last_stage_layers = 3;
    static const int u10[4][2] = {{0, 1}, {1, 3}, {4, 3}, {7, 3}};
    expect_plan(t, p, 1, u10);
    /* uneven interleaved: 16 layers, P 4, V 2, first 2, last 2: per virtual stage 1 + 6/2 + 1 */
    p = lp(16, 4, 2);
    p.first_stage_layers = 2;
    p.last_stage_layers = 2;
    static const int u16[8][2] = {{0, 1}, {8, 1}, {1, 3}, {9, 3}, {4, 3}, {12, 3}, {7, 1}, {15, 1}};
    expect_plan(t, p, 2, u16);
    /* the embedding counts as a layer: 7 + 1 over 4 ranks, rank 0 builds one */
    p = lp(7, 4, 0);
    p.account_for_embedding = true;
    static const int e7[4][2] = {{0, 1}, {1, 2}, {3, 2}, {5, 2}};
    expect_plan(t, p, 1, e7);
    /* embedding and loss, interleaved: 14 + 2 = 16 over 4 x 2 chunks of 2 */
    p = lp(14, 4, 2);
    p.account_for_embedding = p.account_for_loss = true;
    static const int el14[8][2] = {{0, 1}, {7, 2},  {1, 2}, {9, 2},
                                   {3, 2}, {11, 2}, {5, 2}, {13, 1}};
    expect_plan(t, p, 2, el14);
    /* --num-layers-per-virtual-pipeline-stage 2 on 16 layers, P 4: V = 4 / 2 = 2; 4 gives V 1 */
    p = lp(16, 4, 0);
    p.layers_per_virtual_stage = 2;
    expect_plan(t, p, 2, s16);
    p.layers_per_virtual_stage = 4;
    static const int s16v1[4][2] = {{0, 4}, {4, 4}, {8, 4}, {12, 4}};
    expect_plan(t, p, 1, s16v1);

    mg_layers_chunk one;
    MG_EXPECT_OK(mg_layers_place(&p, 3, 0, &one));
    MG_EXPECT(one.offset == 12 && one.count == 4, "place(3, 0) = [%d, +%d)", one.offset, one.count);
}

/* Chunks in virtual-stage order (v major, then rank) tile [0, L) exactly. */
static int tiling_error(const mg_layers_params *p, int v, const mg_layers_chunk *plan) {
    int next = 0;
    for (int c = 0; c < v; c++)
        for (int r = 0; r < p->pp; r++) {
            const mg_layers_chunk *k = &plan[r * v + c];
            if (k->count < 0 || k->offset != next) return 1;
            next += k->count;
        }
    return next != p->num_layers;
}

/* Golden error kinds (Megatron's message, classified by the script) -> what our line says. */
static const struct {
    const char *kind, *needle1, *needle2;
} kinds[] = {
    {"uneven_with_account", "cannot be combined with --account-for-embedding", ""},
    {"first_not_positive", "--decoder-first-pipeline-num-layers must be larger than 0", ""},
    {"last_not_positive", "--decoder-last-pipeline-num-layers must be larger than 0", ""},
    {"first_not_divisible_vpp", "--decoder-first-pipeline-num-layers", "must be divisible by the"},
    {"last_not_divisible_vpp", "--decoder-last-pipeline-num-layers", "must be divisible by the"},
    {"middle_mismatch", "remain", "first and last stages"},
    {"middle_not_divisible_pp", "between the first and last stages are not divisible", ""},
    {"middle_rank_not_divisible_vpp", "on each middle pipeline stage are not divisible", ""},
    {"account_not_divisible_pp", "counting the", "is not divisible by --pipeline-model"},
    {"account_rank_not_divisible_vpp", "counting the", "virtual stages per pipeline rank"},
    {"not_divisible_pp", "is not divisible by --pipeline-model-parallel-size", ""},
    {"rank_not_divisible_vpp", "layers per pipeline stage", "virtual stages per pipeline rank"},
    {"lpvs_not_divisible_pp", "is not divisible by --pipeline-model-parallel-size", ""},
    {"lpvs_not_divisible", "--num-layers-per-virtual-pipeline-stage", "does not divide the"},
    {"lpvs_with_uneven", "--num-layers-per-virtual-pipeline-stage cannot be used with", ""},
};

MG_TEST(layers_golden_megatron_core) {
    cJSON *root = mg_golden_json(t, "tests/golden/pp_schedule/layers.json");
    if (!root) return;
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases"), *row;
    int n_ok = 0, n_err = 0, n_div0 = 0;
    cJSON_ArrayForEach(row, cases) {
        int f[8];
        for (int i = 0; i < 8; i++) f[i] = cJSON_GetArrayItem(row, i)->valueint;
        mg_layers_params p = {f[0], f[1], f[2], f[7], f[3], f[4], f[5] != 0, f[6] != 0, NULL};
        if (f[7]) p.vpp = 0; /* the V column is 1 when --num-layers-per-virtual-... is given */
        const cJSON *res = cJSON_GetArrayItem(row, 8);
        int v = -1;
        mg_error_clear();
        mg_status st = mg_layers_check(&p, &v);
        const char *msg = mg_error_message();
        if (cJSON_IsString(res) && strcmp(res->valuestring, "megatron_zero_division") != 0) {
            const char *n1 = NULL, *n2 = "";
            for (size_t k = 0; k < sizeof kinds / sizeof kinds[0]; k++)
                if (!strcmp(kinds[k].kind, res->valuestring))
                    n1 = kinds[k].needle1, n2 = kinds[k].needle2;
            MG_EXPECT(n1 != NULL, "unknown golden error kind %s", res->valuestring);
            MG_EXPECT(st == MG_ERR_USAGE && n1 && strstr(msg, n1) && strstr(msg, n2) &&
                          !strchr(msg, '\n'),
                      "L %d P %d V %d first %d last %d emb %d loss %d lpvs %d: megatron %s, we "
                      "say (%d) %s",
                      f[0], f[1], f[2], f[3], f[4], f[5], f[6], f[7], res->valuestring, st, msg);
            n_err++;
            continue;
        }
        mg_layers_chunk plan[64];
        MG_EXPECT(st == MG_OK, "L %d P %d V %d first %d last %d emb %d loss %d lpvs %d: %s", f[0],
                  f[1], f[2], f[3], f[4], f[5], f[6], f[7], msg);
        if (st != MG_OK) continue;
        MG_EXPECT_OK(mg_layers_plan(&p, plan));
        if (cJSON_IsString(res)) {
            /* Megatron divides by zero middle ranks (P 2, V > 1, first and last); ours tiles. */
            MG_EXPECT(!tiling_error(&p, v, plan), "L %d P %d V %d: no tiling", f[0], f[1], v);
            n_div0++;
            continue;
        }
        const cJSON *place = cJSON_GetArrayItem(row, 9);
        MG_EXPECT(v == res->valueint && cJSON_GetArraySize(place) == 2 * p.pp * v,
                  "L %d P %d lpvs %d: V %d, megatron %d", f[0], f[1], f[7], v, res->valueint);
        if (v != res->valueint) continue;
        for (int i = 0; i < p.pp * v; i++) {
            int o = cJSON_GetArrayItem(place, 2 * i)->valueint;
            int c = cJSON_GetArrayItem(place, 2 * i + 1)->valueint;
            MG_EXPECT(plan[i].offset == o && plan[i].count == c,
                      "L %d P %d V %d first %d last %d emb %d loss %d: rank %d chunk %d [%d, +%d), "
                      "megatron [%d, +%d)",
                      f[0], f[1], v, f[3], f[4], f[5], f[6], i / v, i % v, plan[i].offset,
                      plan[i].count, o, c);
        }
        n_ok++;
    }
    MG_EXPECT(n_ok > 1500 && n_err > 400 && n_div0 > 0,
              "compared %d placements, %d errors, %d "
              "zero divisions",
              n_ok, n_err, n_div0);
    cJSON_Delete(root);
}

/* Every accepted configuration of a large grid tiles the layers; the shapes Megatron promises
 * hold (even split; f / l per chunk on the end ranks; the embedding / loss chunk one short). */
MG_TEST(layers_invariants_grid) {
    int accepted = 0, rejected = 0;
    mg_layers_chunk plan[64];
    for (int L = 1; L <= 40; L++)
        for (int P = 1; P <= 8; P++)
            for (int V = 0; V <= 4; V++)
                for (int f = -1; f <= 6; f++)
                    for (int l = -1; l <= 6; l++)
                        for (int acc = 0; acc < 4; acc++) {
                            mg_layers_params p = {L, P, V, 0, f, l, acc & 1, (acc >> 1) & 1, NULL};
                            int v;
                            mg_error_clear();
                            if (mg_layers_check(&p, &v) != MG_OK) {
                                const char *msg = mg_error_message();
                                MG_EXPECT(msg[0] && !strchr(msg, '\n'), "bad message '%s'", msg);
                                rejected++;
                                continue;
                            }
                            accepted++;
                            MG_EXPECT_OK(mg_layers_plan(&p, plan));
                            MG_EXPECT(!tiling_error(&p, v, plan),
                                      "L %d P %d V %d f %d l %d acc %d: chunks do not tile", L, P,
                                      V, f, l, acc);
                            int n = L + (acc & 1) + ((acc >> 1) & 1);
                            for (int r = 0; r < P; r++)
                                for (int c = 0; c < v; c++) {
                                    int want;
                                    if (f >= 0 && r == 0)
                                        want = f / v;
                                    else if (l >= 0 && r == P - 1)
                                        want = l / v;
                                    else if (f >= 0 || l >= 0)
                                        want = (L - (f > 0 ? f : 0) - (l > 0 ? l : 0)) /
                                               (P - (f >= 0) - (l >= 0)) / v;
                                    else
                                        want = n / P / v - ((acc & 1) && r == 0 && c == 0) -
                                               ((acc & 2) && r == P - 1 && c == v - 1);
                                    mg_layers_chunk one;
                                    MG_EXPECT_OK(mg_layers_place(&p, r, c, &one));
                                    MG_EXPECT(plan[r * v + c].count == want &&
                                                  one.offset == plan[r * v + c].offset &&
                                                  one.count == want,
                                              "L %d P %d V %d f %d l %d acc %d rank %d chunk %d: "
                                              "%d layers, want %d",
                                              L, P, V, f, l, acc, r, c, plan[r * v + c].count,
                                              want);
                                }
                        }
    MG_EXPECT(accepted > 9000 && rejected > 100000, "%d accepted, %d rejected", accepted, rejected);
}

MG_TEST(layers_rejections) {
    mg_layers_params p;
    int v;
    mg_layers_chunk one, plan[8];

    p = lp(0, 1, 0);
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE, "--num-layers must be >= 1 (got 0)");
    p = lp(8, 0, 0);
    MG_EXPECT_ERROR(mg_layers_plan(&p, plan), MG_ERR_USAGE,
                    "--pipeline-model-parallel-size must be >= 1 (got 0)");
    p = lp(8, 2, -1);
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "--num-virtual-stages-per-pipeline-rank must be >= 1 (got -1)");
    p = lp(8, 2, 0);
    p.layers_per_virtual_stage = -2;
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "--num-layers-per-virtual-pipeline-stage must be >= 1 (got -2)");
    p = lp(8, 2, 0);
    p.first_stage_layers = -3;
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "--decoder-first-pipeline-num-layers must be larger than 0 (got -3)");
    p = lp(8, 2, 0);
    p.last_stage_layers = 0;
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "--decoder-last-pipeline-num-layers must be larger than 0 (got 0)");
    p.last_stage_layers = -7;
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "--decoder-last-pipeline-num-layers must be larger than 0 (got -7)");
    p = lp(8, 2, 0);
    p.first_stage_layers = 0;
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "--decoder-first-pipeline-num-layers must be larger than 0 (got 0)");

    /* arguments.py: --num-layers-per-virtual-pipeline-stage */
    p = lp(16, 4, 2);
    p.layers_per_virtual_stage = 2;
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "set at most one of --num-layers-per-virtual-pipeline-stage (2) and "
                    "--num-virtual-stages-per-pipeline-rank (2)");
    p = lp(16, 4, 0);
    p.layers_per_virtual_stage = 2;
    p.first_stage_layers = 4;
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "--num-layers-per-virtual-pipeline-stage cannot be used with "
                    "--decoder-first-pipeline-num-layers/--decoder-last-pipeline-num-layers; give "
                    "the virtual stages with --num-virtual-stages-per-pipeline-rank instead");
    p = lp(15, 4, 0);
    p.layers_per_virtual_stage = 2;
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "--num-layers 15 is not divisible by --pipeline-model-parallel-size 4; valid "
                    "--num-layers: 12, 16, 20");
    p = lp(24, 4, 0);
    p.layers_per_virtual_stage = 4;
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "--num-layers-per-virtual-pipeline-stage 4 does not divide the 6 layers per "
                    "pipeline stage; valid: 1, 2, 3, 6");
    p = lp(8, 1, 2);
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "a virtual pipeline (2 stages per rank) needs --pipeline-model-parallel-size > "
                    "1 (got 1)");

    /* uneven splits */
    p = lp(8, 4, 0);
    p.first_stage_layers = 2;
    p.account_for_loss = true;
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "--decoder-first-pipeline-num-layers/--decoder-last-pipeline-num-layers "
                    "cannot be combined with --account-for-embedding-in-pipeline-split or "
                    "--account-for-loss-in-pipeline-split; use one or the other");
    p = lp(8, 1, 0);
    p.last_stage_layers = 8;
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "--decoder-first-pipeline-num-layers/--decoder-last-pipeline-num-layers need "
                    "--pipeline-model-parallel-size > 1 (got 1)");
    p = lp(12, 4, 2);
    p.first_stage_layers = 3;
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "--decoder-first-pipeline-num-layers 3 must be divisible by the 2 virtual "
                    "stages per pipeline rank; valid: 2, 4, 6");
    p = lp(12, 4, 3);
    p.last_stage_layers = 4;
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "--decoder-last-pipeline-num-layers 4 must be divisible by the 3 virtual "
                    "stages per pipeline rank; valid: 3, 6, 9");
    p = lp(8, 4, 0);
    p.first_stage_layers = 5;
    p.last_stage_layers = 4;
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "the first and last pipeline stages take 9 layers "
                    "(--decoder-first-pipeline-num-layers/--decoder-last-pipeline-num-layers), "
                    "more than --num-layers 8");
    p = lp(8, 2, 0);
    p.first_stage_layers = 3;
    p.last_stage_layers = 3;
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "2 layers remain after the first and last stages but "
                    "--pipeline-model-parallel-size 2 leaves no middle pipeline stage for them; "
                    "valid --num-layers: 6");
    p = lp(8, 3, 0);
    p.first_stage_layers = 8;
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "no layers remain for the 2 middle pipeline stages after the first and last "
                    "stages take all 8; valid --num-layers: 10, 12, 14");
    p = lp(11, 4, 0);
    p.first_stage_layers = 2;
    p.last_stage_layers = 2;
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "the 7 layers between the first and last stages are not divisible by the 2 "
                    "middle pipeline stages; valid --num-layers: 10, 12, 14");
    p = lp(10, 4, 2);
    p.first_stage_layers = 2;
    p.last_stage_layers = 2;
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "the 3 layers on each middle pipeline stage are not divisible by the 2 "
                    "virtual stages per pipeline rank; valid --num-layers: 8, 12, 16");

    /* even splits */
    p = lp(10, 4, 0);
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "--num-layers 10 is not divisible by --pipeline-model-parallel-size 4; valid "
                    "--num-layers: 8, 12, 16 (or set --decoder-first-pipeline-num-layers/"
                    "--decoder-last-pipeline-num-layers for an uneven split)");
    p = lp(8, 4, 0);
    p.account_for_embedding = p.account_for_loss = true;
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "--num-layers 8 + 2 (counting the embedding and the loss as a layer) = 10 is "
                    "not divisible by --pipeline-model-parallel-size 4; valid --num-layers: 6, 10, "
                    "14");
    p = lp(12, 4, 2);
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "the 3 layers per pipeline stage (--num-layers 12 over 4 stages) are not "
                    "divisible by the 2 virtual stages per pipeline rank; valid --num-layers: 8, "
                    "16, 24");
    p = lp(11, 4, 2);
    p.account_for_embedding = true;
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "the 3 layers per pipeline stage (--num-layers 11 + 1 (counting the embedding "
                    "as a layer) = 12 over 4 stages) are not divisible by the 2 virtual stages "
                    "per pipeline rank; valid --num-layers: 7, 15, 23");

    p = lp(8, 2, 0);
    p.first_stage_layers = 1 << 30;
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "--decoder-first-pipeline-num-layers 1073741824 is too large (at most "
                    "1048576)");
    p = lp(1 << 20, 7, 0);
    MG_EXPECT_ERROR(mg_layers_check(&p, &v), MG_ERR_USAGE,
                    "--num-layers 1048576 is not divisible by --pipeline-model-parallel-size 7; "
                    "valid --num-layers: 1048572 (or set");

    /* caller bugs */
    p = lp(8, 2, 2);
    MG_EXPECT_ERROR(mg_layers_place(&p, 2, 0, &one), MG_ERR_INTERNAL,
                    "chunk (rank 2, virtual stage 0) outside 2 x 2");
    MG_EXPECT_ERROR(mg_layers_place(&p, 0, 2, &one), MG_ERR_INTERNAL,
                    "chunk (rank 0, virtual stage 2) outside 2 x 2");
}

/* --pipeline-model-parallel-layout (parallel/pipeline/layer_layout.h): Megatron's string gives
 * every chunk's layers, in virtual-stage order (stage s is rank s % P's chunk s / P), V the
 * stages over P; repetition by x*n and (...)*n, commas ignored. */
static mg_layers_params with_layout(int L, int P, const char *layout) {
    mg_layers_params p = lp(L, P, 0);
    p.layout = layout;
    return p;
}

MG_TEST(layers_layout_places_each_stage) {
    /* the even split, written out */
    static const int even[][2] = {{0, 4}, {4, 4}};
    expect_plan(t, with_layout(8, 2, "Et*4|t*4L"), 1, even);
    /* an interleaved pipeline with its last rank's chunks a layer short (48 layers, P 2, V 2) */
    static const int uneven[][2] = {{0, 13}, {24, 13}, {13, 11}, {37, 11}};
    expect_plan(t, with_layout(48, 2, "Et*13|t*11|t*13|t*11L"), 2, uneven);
    /* Megatron's documented DeepSeek-V3 layout with a transformer layer for its MTP one: 62
     * layers over P 16, V 2; groups and commas */
    mg_layers_params p = with_layout(62, 16, "Et*3|(tt|)*29,t|L");
    int v = 0;
    mg_layers_chunk c0, c30, c31;
    MG_EXPECT_OK(mg_layers_check(&p, &v));
    MG_EXPECT(v == 2, "V %d, want 2", v);
    MG_EXPECT_OK(mg_layers_place(&p, 0, 0, &c0));
    MG_EXPECT_OK(mg_layers_place(&p, 14, 1, &c30)); /* stage 30 = rank 14's chunk 1 */
    MG_EXPECT_OK(mg_layers_place(&p, 15, 1, &c31)); /* stage 31: the loss alone */
    MG_EXPECT(c0.offset == 0 && c0.count == 3 && c30.offset == 61 && c30.count == 1 &&
                  c31.offset == 62 && c31.count == 0,
              "stages 0, 30, 31: {%d,%d} {%d,%d} {%d,%d}", c0.offset, c0.count, c30.offset,
              c30.count, c31.offset, c31.count);
}

MG_TEST(layers_layout_rejections) {
    static const struct {
        int L, P, V, first;
        const char *layout, *want;
    } cases[] = {
        {8, 2, 0, -1, "Et*4|t*3L", "holds 7 transformer layers (t), --num-layers is 8"},
        {8, 2, 0, -1, "Et*4|t*2|t*2L", "must be divisible by pipeline_model_parallel_size"},
        {8, 2, 0, -1, "tEt*3|t*4L", "the embedding (E) must be the first layer"},
        {8, 2, 0, -1, "Et*4|Lt*4", "the loss (L) must be the last layer"},
        {8, 2, 0, -1, "Et*4|t*4", "must begin with the embedding (E) and end with the loss (L)"},
        {8, 2, 0, -1, "Et*4|t*3mL", "m (a multi-token-prediction layer) is not supported"},
        {8, 2, 0, -1, "Et*4|t*3xL", "invalid layer character 'x' in stage 1"},
        {8, 2, 2, -1, "Et*4|t*4L", "No more than one of the following arguments"},
        {8, 2, 0, 4, "Et*4|t*4L", "places every layer itself"},
        {8, 1, 0, -1, "Et*4|t*4L", "a virtual pipeline (2 stages per rank) needs"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mg_layers_params p = with_layout(cases[i].L, cases[i].P, cases[i].layout);
        p.vpp = cases[i].V;
        p.first_stage_layers = cases[i].first;
        int v;
        mg_error_clear();
        mg_status st = mg_layers_check(&p, &v);
        const char *msg = mg_error_message();
        MG_EXPECT(st == MG_ERR_USAGE && msg && strstr(msg, cases[i].want),
                  "layout \"%s\" (P %d, V %d): status %d, \"%s\"; want \"%s\"", cases[i].layout,
                  cases[i].P, cases[i].V, (int)st, msg ? msg : "", cases[i].want);
    }
}
