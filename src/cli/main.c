/* megatron: the command-line front end. One table names every subcommand: its one-line help,
 * its entry (cli/cli.h) and what the shared prologue sets up for it. The table drives the usage
 * text, the dispatch and the unknown-command error (with the closest name); the prologue parses
 * the flags, answers --help, reads the launcher where asked, runs the entry and is the only place
 * an mg_status becomes an exit code (usage errors exit 2, other failures 1). */
#include "cli/cli.h"

#include "config/flags.h"
#include "core/log.h"
#include "core/text.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const struct {
    const char *name, *help;
    const mg_cli_command *entry; /* NULL: `megatron help` */
    unsigned needs;              /* mg_cli_needs */
} commands[] = {
    {"train", "train a GPT model (Megatron-LM's pretrain_gpt.py flags)", &mg_cli_train,
     MG_CLI_TRAIN_FLAGS | MG_CLI_LAUNCH},
    {"preprocess", "turn JSONL documents into a Megatron indexed dataset (.bin/.idx)",
     &mg_cli_preprocess, 0},
    {"data", "show the samples a dataset gives the model", &mg_cli_data, 0},
    {"generate", "continue a prompt with a trained checkpoint", &mg_cli_generate, 0},
    {"plan", "show a parallel layout: process groups, pipeline schedule, layers", &mg_cli_plan,
     MG_CLI_TRAIN_FLAGS},
    {"bench", "time training steps of a GPT-2 shape: tokens/s, MFU, memory", &mg_cli_bench,
     MG_CLI_TRAIN_FLAGS},
    {"convert", "a checkpoint to a Hugging Face directory and back (--loader, --saver)",
     &mg_cli_convert, 0},
    {"help", "show this text; `megatron train --help` lists the training flags", NULL, 0},
};
#define N_COMMANDS ((int)(sizeof commands / sizeof commands[0]))

static void usage(FILE *f) {
    fprintf(f, "usage: megatron <command> [flags]\n\ncommands:\n");
    for (int i = 0; i < N_COMMANDS; i++)
        fprintf(f, "  %-10s %s\n", commands[i].name, commands[i].help);
}

static int find_command(const char *name) {
    for (int i = 0; i < N_COMMANDS; i++)
        if (!strcmp(commands[i].name, name)) return i;
    return -1;
}

/* "commands: train, ..., help", and the closest name when one is near (mg_text_near, as for
 * flags). */
static mg_status unknown_command(const char *name) {
    char list[256] = "", hint[64] = "";
    size_t used = 0, best_d = SIZE_MAX;
    for (int i = 0; i < N_COMMANDS; i++) {
        const char *c = commands[i].name;
        used += (size_t)snprintf(list + used, sizeof list - used, "%s%s", i ? ", " : "", c);
        size_t d = mg_text_near(name, c);
        if (d < best_d) {
            best_d = d;
            snprintf(hint, sizeof hint, "; did you mean '%s'?", c);
        }
    }
    return MG_FAIL(MG_ERR_USAGE, "unknown command '%s'; commands: %s%s", name, list, hint);
}

/* The shared prologue of every subcommand (cli/cli.h). */
static mg_status run_command(const mg_cli_command *e, unsigned needs, mg_cli_context *cx, int argc,
                             char **argv, bool *help) {
    if (e->args_size) {
        cx->args = calloc(1, e->args_size);
        if (!cx->args) return MG_FAIL(MG_ERR_NOMEM, "out of memory for the flags");
    }
    if (needs & MG_CLI_TRAIN_FLAGS) mg_config_defaults(&cx->cfg);
    if (e->prepare) e->prepare(cx);
    if (cx->flags.flags) {
        if (needs & MG_CLI_TRAIN_FLAGS) cx->flags.megatron = &cx->cfg;
        MG_CHECK(mg_flags_parse_command(&cx->flags, argc, argv, help));
    } else {
        MG_CHECK(mg_flags_parse(&cx->cfg, argc, argv, help));
    }
    if (*help) {
        if (cx->flags.flags)
            mg_flags_command_print_help(&cx->flags, stdout);
        else
            mg_flags_print_help(stdout);
        return MG_OK;
    }
    if (needs & MG_CLI_LAUNCH) {
        MG_CHECK(mg_launch_detect(&cx->launch));
        mg_log_init(cx->launch.rank, cx->launch.world_size);
    }
    return e->run(cx);
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *name = argv[1];
    if (!strcmp(name, "--help") || !strcmp(name, "-h")) name = "help";
    int i = find_command(name);
    if (i >= 0 && !commands[i].entry) {
        usage(stdout);
        return 0;
    }
    mg_cli_context cx;
    memset(&cx, 0, sizeof cx);
    bool help = false;
    mg_status st =
        i < 0 ? unknown_command(name)
              : run_command(commands[i].entry, commands[i].needs, &cx, argc - 2, argv + 2, &help);
    free(cx.args);
    if (st != MG_OK && !cx.error_printed) mg_cli_print_error();
    return st == MG_OK ? 0 : st == MG_ERR_USAGE ? 2 : 1;
}
