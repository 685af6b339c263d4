/* libFuzzer target: the input is a .idx (after one mode byte that derives the .bin), written to a
 * tmpfs directory, opened and read (tests/unit/fuzz_harness.c). An invariant break aborts so the
 * fuzzer records it; crashes are found by ASan/UBSan. Build: make fuzz. Run:
 *   build-fuzz/fuzz_indexed_dataset -max_total_time=600 tests/fuzz/corpus/indexed */
#include "fuzz_harness.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static char g_dir[128];

static void cleanup(void) {
    char p[256];
    snprintf(p, sizeof p, "%s/fuzz.idx", g_dir), unlink(p);
    snprintf(p, sizeof p, "%s/fuzz.bin", g_dir), unlink(p);
    rmdir(g_dir);
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
    snprintf(g_dir, sizeof g_dir, "%s/mg_fuzz_idx_%ld", base, (long)getpid());
    mkdir(g_dir, 0700);
    atexit(cleanup);
    return 0;
}

int LLVMFuzzerTestOneInput(const unsigned char *data, size_t size) {
    if (mg_fuzz_indexed_one(data, size, g_dir) < 0) abort();
    return 0;
}
