/* Fuzz harness bodies, shared by the libFuzzer targets (tests/fuzz/) and the unit tests that
 * replay every corpus and regression file, so a crasher is re-run through exactly the code the
 * fuzzer ran. Needs: data/indexed_dataset, data/jsonl, core/status (not the test harness). */
#ifndef MG_FUZZ_HARNESS_H
#define MG_FUZZ_HARNESS_H

#include <stddef.h>
#include <stdint.h>

/* indexed: data[0] picks how the .bin is derived, data[1..] is the .idx; writes the pair into
 * dir, opens it and reads a few sequences. Returns 1 when the open succeeded, 0 for a clean
 * error, -1 when an invariant broke (an error message of more than one line, a read that
 * disagrees with the bytes, a read past a sequence that succeeded). */
int mg_fuzz_indexed_one(const uint8_t *data, size_t size, const char *dir);
/* jsonl: data is a file of lines; splits and extracts every line with two key sets. Returns the
 * number of lines that extracted cleanly, or -1 when an invariant broke (a string outside the
 * decoded text, decoded text that is not UTF-8, an error column past the line). */
int mg_fuzz_jsonl_one(const uint8_t *data, size_t size);

#endif
