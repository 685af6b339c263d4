/* The edit distance that the "did you mean" suggestions rank names by: a mistyped flag
 * (config/flags.c) and a mistyped subcommand (cli/main.c) are matched to the closest known name
 * by one measure.
 * Exports: mg_text_edit_distance, mg_text_near. Needs: nothing. */
#ifndef MG_CORE_TEXT_H
#define MG_CORE_TEXT_H

#include <stddef.h>

#define MG_TEXT_EDIT_MAX 128 /* longest b measured; a longer one is SIZE_MAX away */

/* Levenshtein distance between a and b: the fewest single-character insertions, deletions and
 * substitutions that turn a into b. */
size_t mg_text_edit_distance(const char *a, const char *b);
/* The edit distance from what was typed to a known name when it is near enough to suggest that
 * name (within max(2, strlen(known) / 4)), else SIZE_MAX. */
size_t mg_text_near(const char *typed, const char *known);

#endif
