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

/* Parses a NULL-terminated argument list. */
mg_status mg_test_parse(mg_config *c, const char *const *args) {
    char *argv[64];
    int argc = 0;
    while (args[argc] && argc < 64) {
        argv[argc] = (char *)args[argc];
        argc++;
    }
    bool help = false;
    return mg_flags_parse(c, argc, argv, &help);
}

/* A complete, valid tiny configuration; `drop` removes one flag (and its value), `extra` appends.
 */
static const char *const k_base[] = {"--num-layers",
                                     "2",
                                     "--hidden-size",
                                     "64",
                                     "--num-attention-heads",
                                     "4",
                                     "--seq-length",
                                     "32",
                                     "--train-iters",
                                     "10",
                                     "--lr",
                                     "1e-3",
                                     "--mock-data",
                                     "--vocab-size",
                                     "100",
                                     NULL};

mg_status mg_test_parse_base(mg_config *c, const char *drop, const char *const *extra) {
    const char *args[64];
    int n = 0;
    for (int i = 0; k_base[i]; i++) {
        if (drop && !strcmp(k_base[i], drop)) {
            if (k_base[i + 1] && k_base[i + 1][0] != '-') i++; /* skip its value too */
            continue;
        }
        args[n++] = k_base[i];
    }
    for (int i = 0; extra && extra[i]; i++) args[n++] = extra[i];
    args[n] = NULL;
    mg_config_defaults(c);
    return mg_test_parse(c, args);
}
