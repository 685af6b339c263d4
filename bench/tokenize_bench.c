/* Tokenizer throughput on one thread, for bench/tokenizer_bench.sh:
 *   tokenize_bench TYPE FILE1 FILE2 TEXT [whole|paras] [min_seconds] [label]
 * TYPE is a --tokenizer-type (data/tokenizer.h); FILE1 FILE2 are GPT2BPETokenizer's vocabulary
 * and merges, or --tokenizer-model and "-" for the other types. Encodes TEXT (as one text, or split
 * after every blank line into paragraphs, each encoded by its own call), once with a fresh worker
 * (cold word cache), then again until min_seconds have passed (at least 3 passes, warm cache).
 * Prints one JSON line: MB/s of the cold pass and of the best and median warm passes by process CPU
 * time and by wall time, the id count and an FNV-1a checksum of the ids, which the script compares
 * with Hugging Face's. */
#include "data/tokenizer.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(clockid_t c) {
    struct timespec ts;
    clock_gettime(c, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* One pass over the units; the ids of the pass end up in *ids (n). */
static mg_status pass(mg_tokenizer_worker *w, const char *text, const size_t *cut, size_t units,
                      int32_t **ids, size_t *n, size_t *cap) {
    *n = 0;
    for (size_t u = 0; u < units; u++)
        MG_CHECK(mg_tokenizer_encode(w, text + cut[u], cut[u + 1] - cut[u], ids, n, cap));
    return MG_OK;
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: %s TYPE FILE1 FILE2 TEXT [whole|paras] [min_seconds] [label]\n",
                argv[0]);
        return 2;
    }
    const char *mode = argc > 5 ? argv[5] : "whole", *label = argc > 7 ? argv[7] : argv[1];
    double min_s = argc > 6 ? atof(argv[6]) : 2.0;
    FILE *f = fopen(argv[4], "rb");
    if (!f) {
        fprintf(stderr, "cannot open %s\n", argv[4]);
        return 1;
    }
    fseek(f, 0, SEEK_END);
    size_t len = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    char *text = malloc(len + 1);
    size_t *cut = malloc((len + 2) * sizeof *cut), units = 0;
    if (!text || !cut || fread(text, 1, len, f) != len) return 1;
    fclose(f);
    cut[0] = 0;
    if (strcmp(mode, "paras") == 0) { /* a unit ends after each "\n\n" */
        for (size_t i = 0; i + 1 < len; i++)
            if (text[i] == '\n' && text[i + 1] == '\n') cut[++units] = i + 2, i++;
        if (cut[units] < len) cut[++units] = len;
    } else {
        cut[++units] = len;
    }

    mg_tokenizer *tok = NULL;
    mg_tokenizer_worker *w = NULL;
    double t0 = now(CLOCK_MONOTONIC);
    mg_tokenizer_spec spec = {
        .type = argv[1], .vocab_file = argv[2], .merge_file = argv[3], .model = argv[2]};
    if (mg_tokenizer_load(&tok, &spec) != MG_OK || mg_tokenizer_worker_create(tok, &w) != MG_OK) {
        fprintf(stderr, "%s\n", mg_error_message());
        return 1;
    }
    double load_s = now(CLOCK_MONOTONIC) - t0;
    int32_t *ids = NULL;
    size_t n = 0, cap = 0;
    enum { MAX_PASSES = 1000 };
    double cpu[MAX_PASSES], wall[MAX_PASSES];
    int passes = 0;
    double start = now(CLOCK_MONOTONIC);
    while (passes < MAX_PASSES && (passes < 4 || now(CLOCK_MONOTONIC) - start < min_s)) {
        double c0 = now(CLOCK_PROCESS_CPUTIME_ID), w0 = now(CLOCK_MONOTONIC);
        if (pass(w, text, cut, units, &ids, &n, &cap) != MG_OK) {
            fprintf(stderr, "%s\n", mg_error_message());
            return 1;
        }
        cpu[passes] = now(CLOCK_PROCESS_CPUTIME_ID) - c0;
        wall[passes] = now(CLOCK_MONOTONIC) - w0;
        passes++;
    }
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (uint64_t)(uint32_t)ids[i]) * 1099511628211ull;
    double mb = (double)len / 1e6;
    int warm = passes - 1;
    qsort(cpu + 1, (size_t)warm, sizeof *cpu, cmp_double);
    qsort(wall + 1, (size_t)warm, sizeof *wall, cmp_double);
    const char *text_name = strrchr(argv[4], '/') ? strrchr(argv[4], '/') + 1 : argv[4];
    printf("{\"impl\": \"megatron.c\", \"tokenizer\": \"%s\", \"text\": \"%s\", "
           "\"mode\": \"%s\", \"units\": %zu, \"bytes\": %zu, "
           "\"ids\": %zu, \"fnv\": \"%016llx\", \"load_s\": %.3f, \"cold_cpu_mb_s\": %.2f, "
           "\"best_cpu_mb_s\": %.2f, \"median_cpu_mb_s\": %.2f, \"best_wall_mb_s\": %.2f, "
           "\"median_wall_mb_s\": %.2f, \"passes\": %d}\n",
           label, text_name, mode, units, len, n, (unsigned long long)h, load_s, mb / cpu[0],
           mb / cpu[1], mb / cpu[1 + warm / 2], mb / wall[1], mb / wall[1 + warm / 2], passes);
    free(ids);
    free(text);
    free(cut);
    mg_tokenizer_worker_free(w);
    mg_tokenizer_free(tok);
    return 0;
}
