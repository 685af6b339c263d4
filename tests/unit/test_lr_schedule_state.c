/* The lr schedule in checkpoints (train/lr_schedule_state.c): the saved values' JSON round trip,
 * Megatron's _check_and_set on resume (its messages, with values printed as Python prints them),
 * and what --override-opt-param-scheduler and --use-checkpoint-opt_param-scheduler leave. */
#include "test.h"

#include "core/status.h"
#include "train/lr_schedule.h"

#include <cjson/cJSON.h>
#include <string.h>

/* warm-up 2 iterations, 10 iterations of 4 samples, cosine from 3e-3 to 3e-4 */
static mg_lr_schedule schedule(double lr, double min_lr) {
    mg_config c;
    memset(&c, 0, sizeof c);
    c.train_iters = 10;
    c.global_batch_size = 4;
    c.micro_batch_size = 4;
    c.lr = lr;
    c.min_lr = min_lr;
    c.lr_decay_style = MG_LR_COSINE;
    c.lr_warmup_iters = 2;
    c.lr_warmup_fraction = -1;
    c.lr_decay_iters = -1;
    c.weight_decay = 0.01;
    c.start_weight_decay = c.end_weight_decay = -1;
    c.decoupled_lr = c.decoupled_min_lr = -1;
    mg_lr_schedule s;
    mg_lr_schedule_init(&s, &c);
    return s;
}

/* every field (struct padding aside) */
static bool same_schedule(const mg_lr_schedule *a, const mg_lr_schedule *b) {
    return a->max_lr == b->max_lr && a->min_lr == b->min_lr && a->init_lr == b->init_lr &&
           a->warmup_steps == b->warmup_steps && a->decay_steps == b->decay_steps &&
           a->style == b->style && a->wsd_decay_steps == b->wsd_decay_steps &&
           a->wsd_style == b->wsd_style && a->start_wd == b->start_wd && a->end_wd == b->end_wd &&
           a->wd_incr_steps == b->wd_incr_steps && a->wd_style == b->wd_style &&
           a->decoupled == b->decoupled && a->decoupled_max_lr == b->decoupled_max_lr &&
           a->decoupled_min_lr == b->decoupled_min_lr && a->num_steps == b->num_steps;
}

MG_TEST(lr_saved_json_round_trip) {
    mg_lr_schedule s = schedule(3e-3, 3e-4);
    s.decoupled = true;
    s.decoupled_max_lr = 1e-2;
    s.decoupled_min_lr = 1.0 / 3;
    s.warmup_steps = 0.1 * 40; /* a fraction's float */
    const mg_lr_saved a = mg_lr_schedule_saved(&s);
    char buf[700];
    MG_EXPECT_OK(mg_lr_saved_to_json(&a, buf, sizeof buf));
    cJSON *o = cJSON_Parse(buf);
    MG_EXPECT(o != NULL, "not JSON: %s", buf);
    mg_lr_saved b;
    MG_EXPECT_OK(mg_lr_saved_from_json(o, "state.json", &b));
    MG_EXPECT(b.present && b.max_lr == a.max_lr && b.min_lr == a.min_lr &&
                  b.warmup_steps == a.warmup_steps && b.decay_steps == 40 &&
                  b.style == MG_LR_COSINE && b.start_wd == 0.01 && b.end_wd == 0.01 &&
                  b.wd_incr_steps == 40 && b.wd_style == MG_WD_CONSTANT && b.decoupled &&
                  b.decoupled_max_lr == 1e-2 && b.decoupled_min_lr == 1.0 / 3,
              "round trip differs: %s", buf);
    cJSON_Delete(o);
    MG_EXPECT_ERROR(mg_lr_saved_to_json(&a, buf, 40), MG_ERR_INTERNAL, "needs more than 40 bytes");
    /* absent: nothing to check; garbage: one line naming the file and the key */
    MG_EXPECT_OK(mg_lr_saved_from_json(NULL, "state.json", &b));
    MG_EXPECT(!b.present, "an absent object is present");
    o = cJSON_Parse("{\"max_lr\": 1, \"min_lr\": 0, \"lr_warmup_steps\": 0, \"lr_decay_steps\": 4,"
                    " \"lr_decay_style\": \"cosine-ish\"}");
    MG_EXPECT_ERROR(mg_lr_saved_from_json(o, "x/state.json", &b), MG_ERR_FORMAT,
                    "x/state.json: opt_param_scheduler's 'lr_decay_style' is missing or unknown");
    cJSON_Delete(o);
    o = cJSON_Parse("{\"max_lr\": \"0.1\"}");
    MG_EXPECT_ERROR(mg_lr_saved_from_json(o, "x/state.json", &b), MG_ERR_FORMAT,
                    "opt_param_scheduler lacks the number 'max_lr'");
    cJSON_Delete(o);
}

/* Megatron's assertion text, values as Python's repr prints them */
MG_TEST(lr_restore_mismatch_messages) {
    static const struct {
        double cls, ckpt;
        const char *text;
    } cases[] = {
        {1e-3, 3e-3, "class input value 0.001 and checkpoint value 0.003 for learning rate"},
        {3.0, 2.5, "class input value 3.0 and checkpoint value 2.5 for learning rate"},
        {1e-5, 1.5e-4, "class input value 1e-05 and checkpoint value 0.00015 for learning rate"},
        {1e16, 123456789.0, "class input value 1e+16 and checkpoint value 123456789.0 for"},
        {0.1 + 0.2, 0.0001, "class input value 0.30000000000000004 and checkpoint value 0.0001"},
        {6e-5, 2.5e+20, "class input value 6e-05 and checkpoint value 2.5e+20 for"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        mg_lr_schedule s = schedule(cases[i].cls, 0), ck = schedule(cases[i].ckpt, 0);
        const mg_lr_saved saved = mg_lr_schedule_saved(&ck);
        MG_EXPECT_ERROR(mg_lr_schedule_restore(&s, &saved, false, false), MG_ERR_FORMAT,
                        cases[i].text);
        MG_EXPECT(s.max_lr == cases[i].cls, "a failed restore changed the schedule");
    }
    mg_lr_schedule s = schedule(3e-3, 3e-4), ck = schedule(3e-3, 3e-4);
    ck.decay_steps = 48;
    ck.wd_style = MG_WD_LINEAR;
    mg_lr_saved saved = mg_lr_schedule_saved(&ck);
    MG_EXPECT_ERROR(mg_lr_schedule_restore(&s, &saved, false, false), MG_ERR_FORMAT,
                    "OptimizerParamScheduler: class input value 40 and checkpoint value 48 for "
                    "total number of iterations do not match; pass --override-opt-param-scheduler "
                    "to use the command line's or --use-checkpoint-opt_param-scheduler to use the "
                    "checkpoint's");
    ck.decay_steps = 40;
    saved = mg_lr_schedule_saved(&ck);
    MG_EXPECT_ERROR(mg_lr_schedule_restore(&s, &saved, false, false), MG_ERR_FORMAT,
                    "class input value constant and checkpoint value linear for weight decay "
                    "incr style");
}

MG_TEST(lr_restore_override_and_use_checkpoint) {
    mg_lr_schedule ck = schedule(3e-3, 3e-4);
    ck.decay_steps = 48;
    ck.style = MG_LR_LINEAR;
    ck.start_wd = 0.0;
    ck.wd_incr_steps = 48;
    ck.wd_style = MG_WD_LINEAR;
    ck.decoupled = true;
    ck.decoupled_max_lr = 5e-3;
    ck.decoupled_min_lr = 5e-4;
    const mg_lr_saved saved = mg_lr_schedule_saved(&ck);
    const mg_lr_schedule cmd = schedule(1e-3, 1e-4);
    mg_lr_schedule s = cmd;
    s.decoupled = true;
    s.decoupled_max_lr = 2e-3;
    s.decoupled_min_lr = 2e-4;
    const mg_lr_schedule cmd_dec = s;
    /* override: the command line's values, every one */
    MG_EXPECT_OK(mg_lr_schedule_restore(&s, &saved, true, false));
    MG_EXPECT(same_schedule(&s, &cmd_dec), "--override-opt-param-scheduler changed the schedule");
    /* use the checkpoint: its values, and its decoupled bounds (Megatron's param groups) */
    MG_EXPECT_OK(mg_lr_schedule_restore(&s, &saved, false, true));
    MG_EXPECT(s.max_lr == 3e-3 && s.min_lr == 3e-4 && s.warmup_steps == 8 && s.decay_steps == 48 &&
                  s.style == MG_LR_LINEAR && s.start_wd == 0.0 && s.end_wd == 0.01 &&
                  s.wd_incr_steps == 48 && s.wd_style == MG_WD_LINEAR &&
                  s.decoupled_max_lr == 5e-3 && s.decoupled_min_lr == 5e-4,
              "--use-checkpoint-opt_param-scheduler did not take the checkpoint's values");
    MG_EXPECT(s.init_lr == cmd.init_lr && s.wsd_decay_steps == cmd.wsd_decay_steps &&
                  s.num_steps == cmd.num_steps,
              "values Megatron does not save changed");
    /* matching values pass unchanged; a checkpoint without values is not checked */
    s = cmd;
    const mg_lr_saved same = mg_lr_schedule_saved(&cmd);
    MG_EXPECT_OK(mg_lr_schedule_restore(&s, &same, false, false));
    MG_EXPECT(same_schedule(&s, &cmd), "a matching restore changed the schedule");
    const mg_lr_saved none = {0};
    MG_EXPECT_OK(mg_lr_schedule_restore(&s, &none, false, false));
    MG_EXPECT(same_schedule(&s, &cmd), "restoring nothing changed the schedule");
}

MG_TEST(lr_restore_flags_exclusive) {
    mg_config c;
    memset(&c, 0, sizeof c);
    c.train_iters = 10;
    c.global_batch_size = 4;
    c.lr = 1e-3;
    c.lr_warmup_fraction = -1;
    c.lr_decay_iters = -1;
    c.decoupled_lr = c.decoupled_min_lr = -1;
    c.override_opt_param_scheduler = c.use_checkpoint_opt_param_scheduler = true;
    mg_lr_schedule s;
    MG_EXPECT_ERROR(mg_lr_schedule_init(&s, &c), MG_ERR_USAGE,
                    "--override-opt-param-scheduler and --use-checkpoint-opt_param-scheduler are "
                    "both set");
}
