/* `megatron train`: flags → validated config → the trainer. Errors leave as one stderr line. */
#include "cli/cli.h"

#include "core/flags.h"
#include "comm/comm.h"
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
    /* Every rank of a multi-rank launch reaches this line and exits with the same message, so
     * nobody waits for a peer. Data parallelism (one replica per rank) lifts this. */
    mg_launch_info li;
    st = mg_launch_detect(&li);
    if (st == MG_OK && li.world_size > 1)
        st = MG_FAIL(MG_ERR_UNSUPPORTED,
                     "%s started %d ranks, but `megatron train` runs on one rank in this build "
                     "(data parallelism is not implemented yet); launch one process, or inspect "
                     "the layout with `megatron plan --world-size %d`",
                     li.launcher, li.world_size, li.world_size);
    if (st != MG_OK) return mg_cli_report(st);
    return mg_cli_report(mg_train_run(&cfg));
}
