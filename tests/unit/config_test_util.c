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

mg_trainer *mg_test_trainer(mg_test_ctx *t, const char *flags, const char *const *extra) {
    mg_config c;
    MG_EXPECT_OK(mg_test_config(&c, flags, extra));
    if (t->failures) return NULL;
    mg_trainer *tr = calloc(1, sizeof *tr);
    MG_EXPECT(tr != NULL, "out of memory");
    if (!tr) return NULL;
    MG_EXPECT_OK(mg_trainer_init(tr, &c, NULL));
    if (t->failures) {
        mg_test_trainer_free(tr);
        return NULL;
    }
    return tr;
}

void mg_test_trainer_free(mg_trainer *tr) {
    if (!tr) return;
    mg_trainer_free(tr);
    free(tr);
}
