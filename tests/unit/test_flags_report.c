/* What a user porting Megatron-LM's scripts meets: every refused flag of a command line reported
 * in one run (each on its own line, then one error naming them all), Megatron's retired spellings
 * answered in Megatron's words or with the flag that replaced them, flag families with one status,
 * and --logging-level, --no-check-for-nan-in-loss-and-grad, --use-rotary-position-embeddings. */
#include "test.h"

#include "config/flags.h"
#include "config/flags_command.h"
#include "config/flags_table.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Sends stderr to `to` (NULL: leaves it); returns what restores it (stderr_restore). */
static int stderr_to(FILE *to) {
    fflush(stderr);
    int saved = dup(2);
    if (to) dup2(fileno(to), 2);
    return saved;
}

static void stderr_restore(int saved) {
    fflush(stderr);
    if (saved >= 0) dup2(saved, 2), close(saved);
}

/* Parses `line` (arguments separated by single spaces) with stderr sent to a file; *err
 * (malloc'd, the caller frees; NULL when out of memory) receives what the parse printed there. */
static mg_status parse_capturing(mg_config *c, const char *line, char **err) {
    char *copy = strdup(line), *argv[64];
    int argc = 0;
    for (char *w = copy ? strtok(copy, " ") : NULL; w && argc < 64; w = strtok(NULL, " "))
        argv[argc++] = w;
    bool help = false;
    FILE *tmp = tmpfile();
    int saved = stderr_to(tmp);
    mg_status st = mg_flags_parse(c, argc, argv, &help);
    stderr_restore(saved);
    *err = calloc(1, 8192);
    if (tmp && *err) {
        rewind(tmp);
        size_t n = fread(*err, 1, 8191, tmp);
        (*err)[n] = '\0';
    }
    if (tmp) fclose(tmp);
    free(copy);
    return st;
}

static int count_lines(const char *s) {
    int n = 0;
    for (; s && *s; s++) n += *s == '\n';
    return n;
}

MG_TEST(flags_report_lists_every_refused_flag) {
    mg_config c, before;
    mg_config_defaults(&c);
    before = c;
    /* an unknown flag with values, a not-yet value, a retired spelling, an unknown flag with no
     * close match, a bad integer: five problems, each on its own line */
    const char *args = "--num-layers 2 --hiden-size 8 --wandb-project proj --DDP-impl local "
                       "--xyzzy 1 2 --seq-length x --swiglu";
    char *err = NULL;
    mg_error_clear();
    mg_status st = parse_capturing(&c, args, &err);
    if (!err) {
        MG_EXPECT(0, "out of memory");
        return;
    }
    MG_EXPECT(st == MG_ERR_USAGE, "status %s, want usage error", mg_status_name(st));
    const char *msg = mg_error_message();
    MG_EXPECT(strstr(msg,
                     "5 flags of the command line were refused (--hiden-size, --wandb-project, "
                     "--DDP-impl, --xyzzy, --seq-length)"),
              "final line: %s", msg);
    MG_EXPECT(!strchr(msg, '\n'), "the final error is one line: %s", msg);
    const char *lines[] = {
        "error: unknown flag '--hiden-size'; did you mean '--hidden-size'?\n",
        "error: --wandb-project proj is not supported yet by this build (Weights & Biases",
        "error: --DDP-impl was removed from Megatron-LM in 2023",
        "error: unknown flag '--xyzzy'; see `megatron train --help` for the flags\n",
        "error: --seq-length expects an integer, got 'x'\n",
    };
    for (int i = 0; i < 5; i++)
        MG_EXPECT(strstr(err, lines[i]), "stderr lacks '%s': %s", lines[i], err);
    /* in order, one line each, and the values of --xyzzy are not stray arguments */
    MG_EXPECT(strstr(err, "--hiden-size") < strstr(err, "--xyzzy"), "order: %s", err);
    MG_EXPECT(count_lines(err) == 5, "%d lines, want 5: %s", count_lines(err), err);
    MG_EXPECT(!strstr(err, "unexpected argument"), "values taken as arguments: %s", err);
    MG_EXPECT(!memcmp(&c, &before, sizeof c), "a failed parse must not change the config");
    free(err);

    /* one problem stays the one-line error it was, with its own status, and prints nothing */
    st = parse_capturing(&c, "--num-layers 2 --wandb-project proj", &err);
    MG_EXPECT(st == MG_ERR_UNSUPPORTED, "status %s", mg_status_name(st));
    MG_EXPECT(strstr(mg_error_message(), "--wandb-project proj is not supported yet"), "%s",
              mg_error_message());
    MG_EXPECT(err && !err[0], "a single problem printed '%s'", err);
    free(err);
}

/* The subcommands parse through the same loop: their refused flags are all listed too. */
MG_TEST(flags_report_lists_every_refused_flag_of_a_subcommand) {
    struct {
        int top_k;
    } a = {1};
    static const mg_flag_spec rows[] = {
        {"--top-k", MG_FLAG_GROUP(0), .kind = MG_FLAG_INT, .offset = 0, .size = sizeof(int),
         .key = "top_k", .arg = "K", .help = "k"},
    };
    static const char *const groups[] = {"sampling"};
    mg_flag_command cmd = MG_FLAG_COMMAND("demo", "usage: megatron demo\n", rows, groups, &a);
    char *argv[] = {"--topk", "2", "--top-k", "two", "--tempreature", "1", NULL};
    bool help = false;
    FILE *null = fopen("/dev/null", "w");
    int saved = stderr_to(null);
    mg_status st = mg_flags_parse_command(&cmd, 6, argv, &help);
    stderr_restore(saved);
    if (null) fclose(null);
    MG_EXPECT(st == MG_ERR_USAGE, "status %s", mg_status_name(st));
    MG_EXPECT(strstr(mg_error_message(),
                     "3 flags of the command line were refused (--topk, --top-k, --tempreature)"),
              "%s", mg_error_message());
    MG_EXPECT(strstr(mg_error_message(), "see `megatron demo --help`"), "%s", mg_error_message());
    MG_EXPECT(a.top_k == 1, "a failed parse changed the arguments");
}

/* Each retired spelling: refused (usage error), in Megatron's words where it still has them, else
 * naming the flag that replaced it. */
MG_TEST(flags_report_retired_spellings) {
    const struct {
        const char *args, *want;
    } cases[] = {
        {"--checkpoint-activations",
         "--checkpoint-activations is no longer valid, use --recompute-activations, or, for more "
         "control, --recompute-granularity and --recompute-method."},
        {"--batch-size 8",
         "--batch-size argument is no longer valid, use --micro-batch-size instead"},
        {"--warmup 100", "--warmup argument is no longer valid, use --lr-warmup-fraction "
                         "instead"},
        {"--model-parallel-size 2",
         "--model-parallel-size is no longer valid, use --tensor-model-parallel-size instead"},
        {"--activations-checkpoint-method uniform",
         "--activations-checkpoint-method is Megatron-LM's old name of --recompute-method"},
        {"--activations-checkpoint-num-layers 1",
         "--activations-checkpoint-num-layers is Megatron-LM's old name of --recompute-num-layers"},
        {"--checkpoint-num-layers 1",
         "--checkpoint-num-layers is Megatron-LM's oldest name of --recompute-num-layers"},
        {"--distribute-checkpointed-activations",
         "--distribute-checkpointed-activations is Megatron-LM's old name of "
         "--distribute-saved-activations"},
        {"--DDP-impl local", "--DDP-impl was removed from Megatron-LM in 2023"},
        {"--DDP-impl torch", "--DDP-impl was removed from Megatron-LM in 2023"},
        {"--use-contiguous-buffers-in-ddp",
         "--use-contiguous-buffers-in-ddp was removed from Megatron-LM in 2021"},
        {"--use-contiguous-buffers-in-local-ddp",
         "--use-contiguous-buffers-in-local-ddp is not a Megatron-LM flag"},
        {"--no-contiguous-buffers-in-local-ddp",
         "--no-contiguous-buffers-in-local-ddp was removed from Megatron-LM in 2023"},
    };
    int retired = 0;
    for (int i = 0; i < mg_flag_count; i++) retired += mg_flag_table[i].status == MG_FLAG_RETIRED;
    MG_EXPECT(retired == 12, "%d retired flags in the table; each needs a case here", retired);
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        mg_config c;
        mg_config_defaults(&c);
        char *err = NULL;
        MG_EXPECT_ERROR(parse_capturing(&c, cases[i].args, &err), MG_ERR_USAGE, cases[i].want);
        free(err);
    }
    /* what the messages point to is a flag that works here */
    const char *targets[] = {"--recompute-activations", "--recompute-granularity",
                             "--recompute-method", "--recompute-num-layers",
                             "--distribute-saved-activations"};
    for (int i = 0; i < 5; i++)
        MG_EXPECT(mg_flag_find(targets[i]) >= 0 &&
                      mg_flag_table[mg_flag_find(targets[i])].status == MG_FLAG_IMPLEMENTED,
                  "%s should be an implemented flag", targets[i]);
}

/* A family of Megatron flags has one status: the profiling group (nsys, PyTorch's profiler and
 * memory history) has no effect here, all of it. */
MG_TEST(flags_report_profiling_family_has_one_status) {
    const char *family[] = {"--profile",
                            "--profile-step-start",
                            "--profile-step-end",
                            "--profile-ranks",
                            "--use-pytorch-profiler",
                            "--pytorch-profiler-collect-shapes",
                            "--pytorch-profiler-collect-callstack",
                            "--pytorch-profiler-collect-chakra",
                            "--record-memory-history",
                            "--memory-snapshot-path",
                            "--record-shapes",
                            "--nvtx-ranges"};
    const int n = (int)(sizeof family / sizeof family[0]);
    for (int i = 0; i < n; i++) {
        int k = mg_flag_find(family[i]);
        MG_EXPECT(k >= 0 && mg_flag_table[k].status == MG_FLAG_IGNORED,
                  "%s should be accepted with no effect", family[i]);
    }
    /* and every flag of the table named like them belongs to it */
    for (int k = 0; k < mg_flag_count; k++) {
        const char *name = mg_flag_table[k].name;
        if (!strncmp(name, "--profile", 9) || strstr(name, "profiler"))
            MG_EXPECT(mg_flag_table[k].status == MG_FLAG_IGNORED, "%s differs from --profile",
                      name);
    }
    mg_config c, before;
    mg_config_defaults(&c);
    before = c;
    const char *args = "--profile --profile-step-start 3 --profile-step-end=5 --profile-ranks 0 1 "
                       "--use-pytorch-profiler --pytorch-profiler-collect-shapes "
                       "--pytorch-profiler-collect-callstack --pytorch-profiler-collect-chakra "
                       "--record-memory-history --memory-snapshot-path /tmp/x.pickle "
                       "--record-shapes --nvtx-ranges";
    char *err = NULL;
    MG_EXPECT_OK(parse_capturing(&c, args, &err));
    free(err);
    MG_EXPECT(!memcmp(&c, &before, sizeof c), "flags with no effect changed the config");
    char seen[1024];
    MG_EXPECT(mg_flags_no_effect_seen(seen, sizeof seen) == (size_t)n, "listed: %s", seen);
    MG_EXPECT(strstr(seen, "--profile-ranks") && strstr(seen, "--nvtx-ranges"), "listed: %s", seen);
}

MG_TEST(flags_report_logging_level) {
    mg_config c;
    mg_config_defaults(&c);
    MG_EXPECT(mg_config_log_level(&c) == -1, "no --logging-level: MG_LOG_LEVEL decides");
    const struct {
        const char *value;
        int level;
    } cases[] = {{"0", 2}, {"10", 2}, {"20", 1}, {"30", 1}, {"40", 0}, {"50", 0}};
    for (int i = 0; i < 6; i++) {
        char args[64], *err = NULL;
        snprintf(args, sizeof args, "--logging-level %s", cases[i].value);
        mg_config_defaults(&c);
        MG_EXPECT_OK(parse_capturing(&c, args, &err));
        free(err);
        MG_EXPECT(mg_config_log_level(&c) == cases[i].level,
                  "--logging-level %s: level %d, want %d", cases[i].value, mg_config_log_level(&c),
                  cases[i].level);
    }
    mg_config_defaults(&c);
    c.num_layers = 2, c.hidden_size = 64, c.num_attention_heads = 4, c.seq_length = 16;
    c.train_iters = 1, c.lr = 1e-3, c.mock_data = true, c.vocab_size = 128;
    c.logging_level = -5;
    MG_EXPECT_ERROR(mg_config_validate(&c), MG_ERR_USAGE,
                    "--logging-level must be a Python logging level");
}

MG_TEST(flags_report_megatron_switches) {
    mg_config c;
    mg_config_defaults(&c);
    MG_EXPECT(!c.no_check_for_nan_in_loss_and_grad, "the NaN check is on by default");
    char *err = NULL;
    MG_EXPECT_OK(parse_capturing(&c, "--no-check-for-nan-in-loss-and-grad", &err));
    free(err);
    MG_EXPECT(c.no_check_for_nan_in_loss_and_grad, "--no-check-for-nan-in-loss-and-grad not set");
    /* Megatron's legacy RoPE switch wins over the type, and counts as the type given */
    mg_config_defaults(&c);
    MG_EXPECT_OK(parse_capturing(
        &c, "--position-embedding-type learned_absolute --use-rotary-position-embeddings", &err));
    free(err);
    MG_EXPECT(c.position_embedding == MG_POS_ROPE, "position embedding %d, want rope",
              (int)c.position_embedding);
    MG_EXPECT(mg_flags_seen("--position-embedding-type"), "the type counts as given");
    /* --disable-* is Megatron's other spelling of its --no-* switches */
    mg_config_defaults(&c);
    MG_EXPECT_OK(parse_capturing(&c, "--disable-log-loss-scale-to-tensorboard", &err));
    free(err);
    MG_EXPECT(c.no_log_loss_scale_to_tensorboard, "--disable-log-loss-scale-to-tensorboard");
}

/* Layout sizes `megatron train` runs only at 1: parsed and stored (plan takes any), tagged
 * "[only 1]" in --help and docs/flags.md, refused by validation with the reason. */
MG_TEST(flags_report_partial_layout_flags) {
    const char *names[] = {"--context-parallel-size", "--expert-tensor-parallel-size"};
    for (int i = 0; i < 2; i++) {
        int k = mg_flag_find(names[i]);
        char tag[48] = "";
        if (k >= 0) mg_flag_status_tag(&mg_flag_table[k], tag, sizeof tag);
        MG_EXPECT(!strcmp(tag, "[only 1]"), "%s tagged '%s'", names[i], tag);
    }
    mg_config c;
    mg_config_defaults(&c);
    char *err = NULL;
    MG_EXPECT_OK(parse_capturing(&c, "--context-parallel-size 2", &err));
    free(err);
    MG_EXPECT(c.context_parallel_size == 2, "stored %d", c.context_parallel_size);
    c.num_layers = 2, c.hidden_size = 64, c.num_attention_heads = 4, c.seq_length = 16;
    c.train_iters = 1, c.lr = 1e-3, c.mock_data = true, c.vocab_size = 128, c.world_size = 2;
    MG_EXPECT_ERROR(mg_config_validate(&c), MG_ERR_UNSUPPORTED,
                    "--context-parallel-size 2 is not supported yet by `megatron train`");
}
