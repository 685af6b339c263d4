#include "cli/cli.h"

#include "core/status.h"

#include <stdio.h>

int mg_cli_report(int status) {
    if (status == MG_OK) return 0;
    fprintf(stderr, "megatron: error: %s\n", mg_error_message());
    return status == MG_ERR_USAGE ? 2 : 1;
}

int mg_cli_train(int argc, char **argv) {
    (void)argc, (void)argv;
    return mg_cli_report(MG_FAIL(MG_ERR_UNSUPPORTED, "train: not wired yet"));
}
