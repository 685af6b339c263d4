/* The trainer's backend choice (--device) on whatever this machine has, and resume across
 * backends: --device auto becomes the backend actually created (cpu here unless a GPU is
 * usable), never stays "auto"; a checkpoint whose stored config names another device loads,
 * because resume compares only the model's shape, and gives back the saved fp32 weights bit for
 * bit. */
#include "test.h"

#include "config/flags.h"
#include "train/trainer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static mg_status tiny_config(mg_config *c, const char *device) {
    char dev[16];
    snprintf(dev, sizeof dev, "%s", device);
    char *argv[] = {"--num-layers",
                    "1",
                    "--hidden-size",
                    "32",
                    "--num-attention-heads",
                    "2",
                    "--seq-length",
                    "16",
                    "--vocab-size",
                    "64",
                    "--mock-data",
                    "--micro-batch-size",
                    "2",
                    "--global-batch-size",
                    "4",
                    "--train-iters",
                    "4",
                    "--lr",
                    "3e-3",
                    "--eval-iters",
                    "0",
                    "--num-threads",
                    "2",
                    "--device",
                    dev};
    bool help = false;
    mg_config_defaults(c);
    MG_CHECK(mg_flags_parse(c, (int)(sizeof argv / sizeof *argv), argv, &help));
    return mg_config_validate(c);
}

MG_TEST(trainer_device_auto_resolves_to_the_backend_used) {
    mg_config c;
    MG_EXPECT_OK(tiny_config(&c, "auto"));
    mg_trainer *tr = calloc(1, sizeof *tr);
    MG_EXPECT_OK(mg_trainer_init(tr, &c, NULL));
    if (!t->failures) {
        MG_EXPECT(!strcmp(tr->cfg.device, tr->be->name), "cfg.device '%s', backend '%s'",
                  tr->cfg.device, tr->be->name);
#ifndef MG_HAVE_CUDA
        MG_EXPECT(!strcmp(tr->be->name, "cpu"), "a build without CUDA chose '%s'", tr->be->name);
#endif
        /* fp32 masters exactly where the parameters are not fp32 */
        MG_EXPECT((tr->mem.master != NULL) == (tr->be->compute_dtype != MG_F32),
                  "master weights %p with compute dtype %s", (void *)tr->mem.master,
                  mg_dtype_name(tr->be->compute_dtype));
        MG_EXPECT((tr->gpu >= 0) == (tr->be->device == MG_DEVICE_CUDA), "gpu %d on %s", tr->gpu,
                  tr->be->name);
    }
    mg_trainer_free(tr);
    free(tr);
}

static void remove_ckpt(const char *dir, int64_t it) {
    static const char *files[] = {"model.safetensors", "optimizer.safetensors", "state.json"};
    char p[2200];
    for (int i = 0; i < 3; i++) {
        snprintf(p, sizeof p, "%s/iter_%07lld/%s", dir, (long long)it, files[i]);
        unlink(p);
    }
    snprintf(p, sizeof p, "%s/iter_%07lld", dir, (long long)it);
    rmdir(p);
    snprintf(p, sizeof p, "%s/latest_checkpointed_iteration.txt", dir);
    unlink(p);
    rmdir(dir);
}

MG_TEST(trainer_resume_ignores_the_stored_device) {
    char dir[] = "/tmp/mg_trainer_device_XXXXXX";
    MG_EXPECT(mkdtemp(dir) != NULL, "mkdtemp failed");
    if (t->failures) return;
    mg_config c;
    MG_EXPECT_OK(tiny_config(&c, "cpu"));
    snprintf(c.save, sizeof c.save, "%s", dir);
    mg_trainer *a = calloc(1, sizeof *a), *b = calloc(1, sizeof *b);
    float *wa = NULL, *wb = NULL;
    MG_EXPECT_OK(mg_trainer_init(a, &c, NULL));
    if (t->failures) goto done;
    size_t n = a->model.params.numel;
    wa = calloc(n, sizeof *wa);
    wb = calloc(n, sizeof *wb);
    for (int i = 0; i < 2; i++) {
        double loss, norm;
        MG_EXPECT_OK(mg_trainer_step(a, &loss, &norm));
    }
    /* as a CUDA run records it: the checkpoint's config says cuda */
    snprintf(a->cfg.device, sizeof a->cfg.device, "cuda");
    MG_EXPECT_OK(mg_trainer_save(a));
    MG_EXPECT_OK(mg_trainer_get_weights(a, wa));
    mg_config saved;
    MG_EXPECT_OK(mg_checkpoint_load_config(dir, 2, &saved));
    MG_EXPECT(!strcmp(saved.device, "cuda"), "stored device '%s'", saved.device);

    c.save[0] = 0;
    snprintf(c.load, sizeof c.load, "%s", dir);
    MG_EXPECT_OK(mg_trainer_init(b, &c, NULL));
    if (t->failures) goto done;
    MG_EXPECT(b->state.iteration == 2 && b->opt.step == 2, "resumed at iteration %lld, step %lld",
              (long long)b->state.iteration, (long long)b->opt.step);
    MG_EXPECT(!strcmp(b->cfg.device, "cpu"), "resumed on '%s'", b->cfg.device);
    MG_EXPECT_OK(mg_trainer_get_weights(b, wb));
    MG_EXPECT(!memcmp(wa, wb, n * sizeof *wa), "the loaded weights differ from the saved ones");
done:
    free(wa);
    free(wb);
    mg_trainer_free(a);
    mg_trainer_free(b);
    free(a);
    free(b);
    remove_ckpt(dir, 2);
}
