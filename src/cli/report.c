/* The one error line of a failed command (cli/cli.h): printed by main.c's prologue, or by an
 * entry that must say it before it stops its peers (cli/train.c). */
#include "cli/cli.h"

#include "core/log.h"

#include <stdio.h>

void mg_cli_print_error(void) {
    if (mg_log_world() > 1)
        fprintf(stderr, "[rank %d] megatron: error: %s\n", mg_log_rank(), mg_error_message());
    else
        fprintf(stderr, "megatron: error: %s\n", mg_error_message());
}
