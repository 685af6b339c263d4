/* megatron: the command-line front end. Dispatches to one subcommand per file and is the only
 * place an mg_status becomes an exit code (usage errors exit 2, other failures 1). */
#include "cli/cli.h"

#include <stdio.h>
#include <string.h>

static void usage(FILE *f) {
    fprintf(f,
            "usage: megatron <command> [flags]\n\n"
            "commands:\n"
            "  train      train a GPT model (Megatron-LM's pretrain_gpt.py flags)\n"
            "  preprocess turn JSONL documents into a Megatron indexed dataset (.bin/.idx)\n"
            "  data       show the samples a dataset gives the model\n"
            "  generate   continue a prompt with a trained checkpoint\n"
            "  plan       show a parallel layout: process groups, pipeline schedule, layers\n"
            "  bench      time training steps of a GPT-2 shape: tokens/s, MFU, memory\n"
            "  convert    a checkpoint to a Hugging Face directory and back (--loader, --saver)\n"
            "  help       show this text; `megatron train --help` lists the training flags\n");
}

int main(int argc, char **argv) {
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "help") || !strcmp(cmd, "--help") || !strcmp(cmd, "-h")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "train")) return mg_cli_train(argc - 2, argv + 2);
    if (!strcmp(cmd, "preprocess")) return mg_cli_preprocess(argc - 2, argv + 2);
    if (!strcmp(cmd, "data")) return mg_cli_data(argc - 2, argv + 2);
    if (!strcmp(cmd, "generate")) return mg_cli_generate(argc - 2, argv + 2);
    if (!strcmp(cmd, "plan")) return mg_cli_plan(argc - 2, argv + 2);
    if (!strcmp(cmd, "bench")) return mg_cli_bench(argc - 2, argv + 2);
    if (!strcmp(cmd, "convert")) return mg_cli_convert(argc - 2, argv + 2);
    fprintf(stderr,
            "megatron: error: unknown command '%s'; commands: train, preprocess, data, generate, "
            "plan, bench, convert, help\n",
            cmd);
    return 2;
}
