/* A subcommand's flags through the same parser as `megatron train`'s (config/flags.c): the
 * subcommand declares a small table of mg_flag_spec rows whose offsets point into its own
 * argument struct, and gets --help/-h (its usage, then its flags grouped with metavariables,
 * defaults and help), `--flag value` and `--flag=value`, typed values (int, int64, double, bool,
 * string, choices) with the train parser's one-line errors, and an unknown flag named with the
 * closest known one ("did you mean '--max-new-tokens'?"). A subcommand that also takes
 * Megatron's train flags (plan, bench) sets `megatron`: both tables are parsed in one pass, its
 * own first, and suggestions come from both.
 *
 * Typical use (src/cli/generate.c):
 *   static const mg_flag_spec rows[] = {
 *       {"--top-k", MG_FLAG_GROUP(G_SAMPLING), .kind = MG_FLAG_INT, MG_FLAG_FIELD(gen_args, top_k),
 *        .arg = "K", .help = "sample among the K most likely tokens"}, ...};
 *   gen_args a = {.top_k = 1};  // the defaults, shown by --help
 *   mg_flag_command cmd = MG_FLAG_COMMAND("generate", usage, rows, groups, &a);
 *   MG_CHECK(mg_flags_parse_command(&cmd, argc, argv, &help));  // help: print, stop
 * Required flags and domain ranges stay the subcommand's checks after the parse.
 *
 * Exports: mg_flag_command, MG_FLAG_FIELD, MG_FLAG_GROUP, MG_FLAG_COMMAND, mg_flags_parse_command,
 * mg_flags_command_seen, mg_flags_command_print_help. Needs: config/flags_table.h. */
#ifndef MG_FLAGS_COMMAND_H
#define MG_FLAGS_COMMAND_H

#include "config/flags_table.h"
#include "core/status.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>

#define MG_FLAG_COMMAND_MAX 32 /* rows of one subcommand's table */

/* A row's field in the subcommand's struct `type` (offset, size, key). */
#define MG_FLAG_FIELD(type, field)                                                                 \
    .offset = offsetof(type, field), .size = sizeof(((type *)0)->field), .key = #field

/* A row's --help section: an index into the command's groups (its own enum, not mg_flag_group). */
#define MG_FLAG_GROUP(g) .group = (mg_flag_group)(g)

typedef struct {
    const char *name;  /* "generate": messages say `megatron generate` */
    const char *usage; /* printed first by --help: the usage lines and what the command does */
    const mg_flag_spec *flags; /* (n_flags) rows; offsets into *target; .group indexes groups */
    int n_flags;
    const char *const *groups; /* (n_groups) headings of the --help sections */
    int n_groups;
    void *target; /* the subcommand's argument struct, holding its defaults before the parse */
    size_t target_size;  /* sizeof *target */
    mg_config *megatron; /* non-NULL: Megatron's train flags are accepted too, parsed into it */
    bool seen[MG_FLAG_COMMAND_MAX]; /* out: the rows given on the last successful parse */
} mg_flag_command;

#define MG_FLAG_COUNT(a) ((int)(sizeof(a) / sizeof((a)[0])))
#define MG_FLAG_COMMAND(name_, usage_, rows, group_names, target_)                                 \
    (mg_flag_command) {                                                                            \
        .name = (name_), .usage = (usage_), .flags = (rows), .n_flags = MG_FLAG_COUNT(rows),       \
        .groups = (group_names), .n_groups = MG_FLAG_COUNT(group_names), .target = (target_),      \
        .target_size = sizeof *(target_)                                                           \
    }

/* Parses argv (the subcommand name excluded) into cmd->target (and cmd->megatron when set) with
 * mg_flags_parse's rules. --help or -h anywhere sets *help_requested and parses nothing. On
 * error (MG_ERR_USAGE, one line) the target and the config are left untouched. */
mg_status mg_flags_parse_command(mg_flag_command *cmd, int argc, char **argv, bool *help_requested);

/* Whether `flag` (e.g. "--seed") of the command's own table was given on its last successful
 * parse. */
bool mg_flags_command_seen(const mg_flag_command *cmd, const char *flag);

/* The usage text, then each group's flags: flag and metavariable, default (from *cmd->target,
 * which holds the defaults until a parse), one-line help; then --help. */
void mg_flags_command_print_help(const mg_flag_command *cmd, FILE *f);

#endif
