/* Subcommand entry points: each takes the arguments after its name and returns the exit code. */
#ifndef MG_CLI_H
#define MG_CLI_H

#include "megatron.h"

int mg_cli_train(int argc, char **argv);
int mg_cli_preprocess(int argc, char **argv); /* cli/preprocess.c: JSONL -> .bin/.idx */
int mg_cli_data(int argc, char **argv);       /* cli/data.c: show a dataset's samples */
int mg_cli_generate(int argc, char **argv);   /* cli/generate.c: sample from a checkpoint */
int mg_cli_plan(int argc, char **argv);       /* cli/plan.c: groups, schedule, layers */
int mg_cli_bench(int argc, char **argv);      /* cli/bench.c: training step throughput, MFU */
int mg_cli_convert(int argc, char **argv);    /* cli/convert.c: checkpoints <-> Hugging Face */
/* Prints the error recorded by the library as one line and maps the status to an exit code. */
int mg_cli_report(int status);

#endif
