/* A run configuration for tests, from flags written as one string: the tiny models of the trainer
 * tests without one argv array each; and a trainer of it; flag lists parsed without validation,
 * alone or on a tiny base config. Exports: mg_test_config, mg_test_trainer, mg_test_trainer_free,
 * mg_test_parse, mg_test_parse_base. Needs: config/flags, train/trainer, tests/test.h. */
#ifndef MG_TESTS_CONFIG_TEST_UTIL_H
#define MG_TESTS_CONFIG_TEST_UTIL_H

#include "config/flags.h"
#include "test.h"
#include "train/trainer.h"

/* Megatron's defaults, then the space-separated flags of `flags` (no value contains a space),
 * then extra (NULL-terminated, may be NULL), parsed and validated as `megatron train` does. */
mg_status mg_test_config(mg_config *c, const char *flags, const char *const *extra);
/* A trainer of mg_test_config(flags, extra), or NULL with the failure recorded in t. */
mg_trainer *mg_test_trainer(mg_test_ctx *t, const char *flags, const char *const *extra);
/* Frees a trainer of mg_test_trainer (NULL: nothing). */
void mg_test_trainer_free(mg_trainer *tr);
/* Parses a NULL-terminated argument list into c (no defaults set, no validation). */
mg_status mg_test_parse(mg_config *c, const char *const *args);
/* Megatron's defaults, then a complete, valid tiny configuration without flag `drop` (and its
 * value; NULL: none), then extra (NULL-terminated, may be NULL), parsed, not validated. */
mg_status mg_test_parse_base(mg_config *c, const char *drop, const char *const *extra);

#endif
