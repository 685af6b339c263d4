/* The edit distance of "did you mean" suggestions (text.h). */
#include "core/text.h"

#include <stdint.h>
#include <string.h>

size_t mg_text_edit_distance(const char *a, const char *b) {
    size_t n = strlen(b), row[MG_TEXT_EDIT_MAX];
    if (n >= MG_TEXT_EDIT_MAX) return SIZE_MAX;
    for (size_t j = 0; j <= n; j++) row[j] = j;
    for (size_t i = 1; a[i - 1]; i++) { /* row: distances of a[0..i) to each prefix of b */
        size_t diag = row[0];
        row[0] = i;
        for (size_t j = 1; j <= n; j++) {
            size_t up = row[j];
            size_t best = diag + (a[i - 1] != b[j - 1]);
            if (up + 1 < best) best = up + 1;
            if (row[j - 1] + 1 < best) best = row[j - 1] + 1;
            row[j] = best;
            diag = up;
        }
    }
    return row[n];
}

size_t mg_text_near(const char *typed, const char *known) {
    size_t d = mg_text_edit_distance(typed, known), len = strlen(known);
    return d <= (len / 4 > 2 ? len / 4 : 2) ? d : SIZE_MAX;
}
