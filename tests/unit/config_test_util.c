#include "config_test_util.h"

#include <stdlib.h>
#include <string.h>

#define MAX_ARGS 128

mg_status mg_test_config(mg_config *c, const char *flags, const char *const *extra) {
    char *copy = strdup(flags), *argv[MAX_ARGS];
    if (!copy) return MG_FAIL(MG_ERR_NOMEM, "out of memory");
    int argc = 0;
    for (char *w = strtok(copy, " "); w && argc < MAX_ARGS; w = strtok(NULL, " ")) argv[argc++] = w;
    for (int i = 0; extra && extra[i] && argc < MAX_ARGS; i++) argv[argc++] = (char *)extra[i];
    bool help = false;
    mg_config_defaults(c);
    mg_status st = mg_flags_parse(c, argc, argv, &help);
    if (st == MG_OK) st = mg_config_validate(c);
    free(copy);
    return st;
}
