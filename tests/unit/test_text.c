/* The edit distance of the "did you mean" suggestions (src/core/text.c). */
#include "test.h"

#include "core/text.h"

#include <stdint.h>
#include <string.h>

MG_TEST(text_edit_distance) {
    static const struct {
        const char *a, *b;
        size_t want;
    } cases[] = {
        {"", "", 0},           {"", "abc", 3},           {"abc", "", 3},
        {"train", "train", 0}, {"trian", "train", 2}, /* a swap is two substitutions */
        {"plna", "plan", 2},   {"kitten", "sitting", 3}, {"--hiden-size", "--hidden-size", 1},
        {"Train", "train", 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t d = mg_text_edit_distance(cases[i].a, cases[i].b);
        MG_EXPECT(d == cases[i].want, "'%s' -> '%s': %zu, want %zu", cases[i].a, cases[i].b, d,
                  cases[i].want);
        MG_EXPECT(mg_text_edit_distance(cases[i].b, cases[i].a) == d, "'%s' <-> '%s' asymmetric",
                  cases[i].a, cases[i].b);
    }
    char longer[MG_TEXT_EDIT_MAX + 1];
    memset(longer, 'x', MG_TEXT_EDIT_MAX);
    longer[MG_TEXT_EDIT_MAX] = '\0';
    MG_EXPECT(mg_text_edit_distance("x", longer) == SIZE_MAX, "a name past the cap is not near");
}

/* Near enough to suggest: within max(2, strlen(known) / 4) edits, else SIZE_MAX. */
MG_TEST(text_near) {
    MG_EXPECT(mg_text_near("trian", "train") == 2, "two edits from a short name are near");
    MG_EXPECT(mg_text_near("tr", "train") == SIZE_MAX, "three edits from a 5-letter name are not");
    /* 16 letters: up to 4 edits */
    MG_EXPECT(mg_text_near("--hidden-sise", "--hidden-size-xx") == 4, "four edits of 16 letters");
    MG_EXPECT(mg_text_near("--hiden-sise", "--hidden-size-xx") == SIZE_MAX, "five are not near");
}
