/* A run configuration for tests, from flags written as one string: the tiny models of the trainer
 * tests without one argv array each. Exports: mg_test_config. Needs: core/flags. */
#ifndef MG_TESTS_CONFIG_TEST_UTIL_H
#define MG_TESTS_CONFIG_TEST_UTIL_H

#include "core/flags.h"

/* Megatron's defaults, then the space-separated flags of `flags` (no value contains a space),
 * then extra (NULL-terminated, may be NULL), parsed and validated as `megatron train` does. */
mg_status mg_test_config(mg_config *c, const char *flags, const char *const *extra);

#endif
