/* The subcommands of `megatron` and the one prologue they share (cli/main.c).
 *
 * main.c's table names each subcommand with its one-line help (the usage text), its entry below
 * and what the prologue sets up before the entry runs (mg_cli_needs). The prologue, for every
 * subcommand alike:
 *   1. parses the flags: the subcommand's own table over its argument struct
 *      (config/flags_command.h), Megatron's training flags into cx->cfg (MG_CLI_TRAIN_FLAGS), or
 *      both in one pass; --help or -h prints the subcommand's help and exits 0;
 *   2. MG_CLI_LAUNCH: reads the launcher's ranks (mpirun, srun, torchrun) into cx->launch and
 *      sets the log lines up for this rank;
 *   3. runs the entry and turns its mg_status into the one error line on stderr
 *      (mg_cli_print_error) and the exit code: 0, usage errors 2, other failures 1.
 * A subcommand file keeps its own work only: its flags and their defaults (prepare), its checks
 * after the parse and what it does (run).
 *
 * Exports: mg_cli_needs, mg_cli_context, mg_cli_command, the entries mg_cli_train ...
 * mg_cli_convert, mg_cli_print_error. Needs: comm/comm (mg_launch_info), config/flags_command,
 * core/status. */
#ifndef MG_CLI_H
#define MG_CLI_H

#include "comm/comm.h"
#include "config/flags_command.h"
#include "core/status.h"

#include <stdbool.h>
#include <stddef.h>

typedef enum {
    MG_CLI_TRAIN_FLAGS = 1 << 0, /* Megatron's training flags (`megatron train --help`) */
    MG_CLI_LAUNCH = 1 << 1,      /* the launcher's ranks; log lines set up per rank */
} mg_cli_needs;

typedef struct {
    void *args;            /* the subcommand's argument struct: args_size bytes, zeroed */
    mg_flag_command flags; /* its own flags over args, from prepare (.flags NULL: none) */
    mg_config cfg;         /* MG_CLI_TRAIN_FLAGS: Megatron's defaults, prepare's, then argv's */
    mg_launch_info launch; /* MG_CLI_LAUNCH */
    bool error_printed;    /* run printed its error line itself (train's ranks, before they tell
                              their peers): the prologue prints no second one */
} mg_cli_context;

typedef struct {
    size_t args_size; /* sizeof its argument struct (0: none) */
    /* Before the parse: cx->flags (MG_FLAG_COMMAND over cx->args) and the defaults in cx->args
     * and cx->cfg. NULL: no flags of its own (train: Megatron's alone). */
    void (*prepare)(mg_cli_context *cx);
    /* After the parse, unless --help was given: the subcommand's checks and its work. */
    mg_status (*run)(mg_cli_context *cx);
} mg_cli_command;

extern const mg_cli_command mg_cli_train;      /* cli/train.c: flags -> config -> trainer */
extern const mg_cli_command mg_cli_preprocess; /* cli/preprocess.c: JSONL -> .bin/.idx */
extern const mg_cli_command mg_cli_data;       /* cli/data.c: show a dataset's samples */
extern const mg_cli_command mg_cli_generate;   /* cli/generate.c: sample from a checkpoint */
extern const mg_cli_command mg_cli_plan;       /* cli/plan.c: groups, schedule, layers */
extern const mg_cli_command mg_cli_bench;      /* cli/bench.c: training step throughput, MFU */
extern const mg_cli_command mg_cli_convert;    /* cli/convert.c: checkpoints <-> Hugging Face */

/* The error recorded by the library as the one line of a failed command on stderr:
 * "megatron: error: MESSAGE", "[rank R] " in front on a run of several ranks (cli/report.c). */
void mg_cli_print_error(void);

#endif
