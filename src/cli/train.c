/* `megatron train`: flags → validated config → the trainer. Errors leave as one stderr line. */
#include "cli/cli.h"

#include "core/flags.h"
#include "core/status.h"
#include "train/trainer.h"

#include <stdio.h>

int mg_cli_report(int status) {
    if (status == MG_OK) return 0;
    fprintf(stderr, "megatron: error: %s\n", mg_error_message());
    return status == MG_ERR_USAGE ? 2 : 1;
}

int mg_cli_train(int argc, char **argv) {
    mg_config cfg;
    mg_config_defaults(&cfg);
    bool help = false;
    mg_status st = mg_flags_parse(&cfg, argc, argv, &help);
    if (st != MG_OK) return mg_cli_report(st);
    if (help) {
        mg_flags_print_help(stdout);
        return 0;
    }
    st = mg_config_validate(&cfg);
    if (st != MG_OK) return mg_cli_report(st);
    return mg_cli_report(mg_train_run(&cfg));
}
