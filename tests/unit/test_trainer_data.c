/* The trainer's cyclic loader (train/trainer_data.h) wired to its data: with --mock-data, 4
 * iterations of 4 samples make a train split of 16, and the trainer's train source reads, at
 * each position, the mock sample Megatron's sampler names there (tests/golden/sampler/
 * cyclic.json, over several epochs; with and without --no-data-sharding, which one rank draws
 * alike: tests/cli/test_dataloader.sh tells them apart under data parallelism); the single
 * loader reads the position itself. And the splits --mock-data builds: --split decides which
 * splits exist as it does for the indexed data. */
#include "test.h"

#include "config_test_util.h"

#include "core/file.h"
#include "core/status.h"
#include "train/trainer.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

#define BASE                                                                                       \
    "--num-layers 1 --hidden-size 32 --num-attention-heads 2 --seq-length 16 --vocab-size 64 "     \
    "--mock-data --micro-batch-size 2 --global-batch-size 4 --train-iters 4 --eval-iters 0 "       \
    "--num-threads 1 --device cpu --seed 11 --lr 1e-3 "

/* The golden case of a 16-sample split, micro batch 2, one rank, from 0 consumed samples. */
static const cJSON *golden_case(const cJSON *root, bool sharding) {
    const cJSON *c;
    cJSON_ArrayForEach(c, cJSON_GetObjectItemCaseSensitive(root, "cases")) {
        if (cJSON_GetObjectItemCaseSensitive(c, "total")->valueint == 16 &&
            cJSON_GetObjectItemCaseSensitive(c, "mbs")->valueint == 2 &&
            cJSON_GetObjectItemCaseSensitive(c, "dp")->valueint == 1 &&
            cJSON_GetObjectItemCaseSensitive(c, "consumed")->valueint == 0 &&
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(c, "sharding")) == sharding)
            return c;
    }
    return NULL;
}

/* Reads positions [0, n) from the trainer's train source and compares each with the mock sample
 * index[pos] (index NULL: the position itself). */
static void expect_reads(mg_test_ctx *t, mg_trainer *tr, const int64_t *index, int n) {
    const int S = tr->cfg.seq_length;
    int32_t *tok = malloc((size_t)S * sizeof *tok), *tgt = malloc((size_t)S * sizeof *tgt);
    int32_t *want = malloc((size_t)(S + 1) * sizeof *want);
    for (int p = 0; p < n; p++) {
        const int64_t i = index ? index[p] : p;
        MG_EXPECT_OK(tr->data.train_src.sample(tr->data.train_src.ctx, p, tok, tgt));
        MG_EXPECT_OK(mg_mock_sample(&tr->data.train_data, i, want));
        if (memcmp(tok, want, (size_t)S * sizeof *tok) ||
            memcmp(tgt, want + 1, (size_t)S * sizeof *tgt)) {
            MG_EXPECT(0, "position %d does not read mock sample %lld", p, (long long)i);
            break;
        }
    }
    free(tok);
    free(tgt);
    free(want);
}

MG_TEST(trainer_cyclic_loader_reads_megatrons_samples) {
    char *text = NULL;
    MG_EXPECT_OK(mg_file_read("tests/golden/sampler/cyclic.json", &text, NULL));
    cJSON *root = text ? cJSON_Parse(text) : NULL;
    free(text);
    if (!root) return;
    for (int sharding = 0; sharding < 2; sharding++) {
        const cJSON *c = golden_case(root, sharding);
        MG_EXPECT(c != NULL, "no golden case (16 samples, micro batch 2, sharding %d)", sharding);
        if (!c) continue;
        const cJSON *batches =
            cJSON_GetArrayItem(cJSON_GetObjectItemCaseSensitive(c, "batches"), 0);
        int n = 0;
        int64_t index[256];
        const cJSON *b, *i;
        cJSON_ArrayForEach(b, batches) {
            cJSON_ArrayForEach(i, b) {
                if (n < 256) index[n++] = (int64_t)i->valuedouble;
            }
        }
        MG_EXPECT(n > 32, "the golden case spans %d samples, not several epochs", n);
        const char *flags[] = {"--dataloader-type", "cyclic",
                               sharding ? NULL : "--no-data-sharding", NULL};
        mg_config cfg;
        MG_EXPECT_OK(mg_test_config(&cfg, BASE, flags));
        mg_trainer *tr = calloc(1, sizeof *tr);
        MG_EXPECT_OK(mg_trainer_init(tr, &cfg, NULL));
        if (!t->failures) expect_reads(t, tr, index, n);
        mg_trainer_free(tr);
        free(tr);
    }
    cJSON_Delete(root);
    /* single: position p is sample p */
    mg_config cfg;
    MG_EXPECT_OK(mg_test_config(&cfg, BASE, NULL));
    mg_trainer *tr = calloc(1, sizeof *tr);
    MG_EXPECT_OK(mg_trainer_init(tr, &cfg, NULL));
    if (!t->failures) {
        MG_EXPECT(tr->data.cyclic == NULL, "the single loader has cyclic samplers");
        expect_reads(t, tr, NULL, 40);
    }
    mg_trainer_free(tr);
    free(tr);
}

/* --mock-data honours --split: a split of weight 0 has no dataset, so it is not evaluated. */
static void expect_mock_splits(mg_test_ctx *t, const char *split, bool valid, bool test) {
    const char *extra[] = {"--split", split, NULL};
    mg_trainer *tr = mg_test_trainer(t, BASE "--eval-iters 2 --eval-interval 1", extra);
    if (!tr) return;
    MG_EXPECT(tr->data.have_valid == valid && tr->data.have_test == test,
              "--split %s: validation %d, test %d; expected %d, %d", split, tr->data.have_valid,
              tr->data.have_test, valid, test);
    mg_test_trainer_free(tr);
}

MG_TEST(train_mock_data_honours_split) {
    expect_mock_splits(t, "969,30,1", true, true);
    expect_mock_splits(t, "100,0,0", false, false);
    expect_mock_splits(t, "98,2,0", true, false);
    expect_mock_splits(t, "98,0,2", false, true);
    /* Megatron's arithmetic over its 100000 mock documents: a share under half a document is
     * empty */
    expect_mock_splits(t, "1,0.000004,0", false, false);
}

MG_TEST(train_mock_data_without_training_split_is_an_error) {
    mg_config c;
    const char *extra[] = {"--split", "0,50,50", NULL};
    MG_EXPECT_OK(mg_test_config(&c, BASE "--eval-iters 1", extra));
    mg_trainer tr;
    mg_status st = mg_trainer_init(&tr, &c, NULL);
    MG_EXPECT(st == MG_ERR_USAGE &&
                  strstr(mg_error_message(), "--split 0,50,50 leaves no training documents in "
                                             "the mock data"),
              "status %d: %s", (int)st, mg_error_message());
    mg_error_clear();
    mg_trainer_free(&tr);
}
