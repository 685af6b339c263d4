/* libFuzzer target: the input is a JSONL file; every line is split and extracted with two key
 * sets (tests/unit/fuzz_harness.c). An invariant break aborts; crashes are found by ASan/UBSan.
 * Build: make fuzz. Run:
 *   build-fuzz/fuzz_jsonl -max_total_time=600 -dict=tests/fuzz/jsonl.dict tests/fuzz/corpus/jsonl
 */
#include "fuzz_harness.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    if (mg_fuzz_jsonl_one(data, size) < 0) abort();
    return 0;
}
