/* The fp8 casts of the products' operands (backend_ops.h's fp8_cast on the CUDA backend) at
 * GPT-2 1.5B's micro-batch 4 (4096 tokens: hidden 1600, QKV 4800, MLP 6400), one form at a
 * time and together, against a device-to-device copy of the same input (the bandwidth a kernel
 * that reads and writes the same bytes can reach):
 *   build/fp8_cast_bench [--iters 50]
 * Forms: rows (the forward's operand alone: the flat cast), cols (the transpose alone), both,
 * both with the bias gradient's column sums (dbias), and both through a GELU's gradient with
 * the column sums (gelu: fc1's output gradient; it also reads gelu_pre). Each is run `iters`
 * times between two of the backend's timer points on the compute stream, after a warm-up call;
 * the report is microseconds a call and the bytes moved (read + written) per second. Where the
 * cast stays well under the copy's rate, the form that falls behind names the kernel's limit
 * (bench/NOTES.md, 2026-11-30: about 2 TB/s inside the training step).
 * Prints a table and one JSON line per measurement. */
#define BENCH_NAME "fp8_cast_bench"
#include "bench_backend.h"

#include "backend/backend.h"
#include "core/fp8.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* n values of the compute dtype: a sine over a spread of magnitudes (not all equal: the casts
 * round, and the amax must see something) */
static void *values(mg_backend *be, size_t n, double phase) {
    float *h = malloc(n * sizeof *h);
    if (!h) die("host memory");
    for (size_t i = 0; i < n; i++) h[i] = (float)(sin(0.37 * (double)i + phase) * (1.0 + i % 7));
    void *d = dev(be, n * 2);
    if (be->upload_f32(be, d, h, n) != MG_OK) die("upload");
    free(h);
    return d;
}

int main(int argc, char **argv) {
    int iters = 50;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iters") && i + 1 < argc)
            iters = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: fp8_cast_bench [--iters N]\n");
            return 2;
        }
    }
    mg_backend *be = NULL;
    if (mg_backend_cuda_create(&be, 0) != MG_OK) die("the CUDA backend");
    if (!be->timer_mark || !be->timer_seconds) die("timer points");
    static const int shapes[][2] = {{4096, 1600}, {4096, 4800}, {4096, 6400}};
    static const char *forms[] = {"copy", "rows", "cols", "both", "dbias", "gelu"};
    printf("| rows x cols | form | us per call | TB/s (read + written) |\n|---|---|---|---|\n");
    for (int s = 0; s < 3; s++) {
        const int rows = shapes[s][0], cols = shapes[s][1];
        const size_t n = (size_t)rows * cols;
        void *in = values(be, n, 0.0), *pre = values(be, n, 1.0), *copy = dev(be, n * 2);
        uint8_t *out = dev(be, n), *out_t = dev(be, n);
        float *scale = dev(be, 3 * sizeof(float)), *dbias = dev(be, (size_t)cols * sizeof(float));
        const float one[3] = {1.0f, 0.0f, 0.0f};
        if (be->copy_h2d(be, scale, one, sizeof one) != MG_OK) die("copy");
        for (int f = 0; f < 6; f++) {
            const bool gelu = f == 5, sums = f >= 4;
            uint8_t *o = f == 2 ? NULL : out, *ot = f == 1 ? NULL : out_t;
            /* bytes: the input (and pre) read, each form written, fp32 sums (small) ignored */
            double bytes = f == 0 ? 4.0 * (double)n
                                  : 2.0 * (double)n * (gelu ? 2 : 1) + (o ? (double)n : 0) +
                                        (ot ? (double)n : 0);
            double sec = 0.0;
            for (int pass = 0; pass < 2; pass++) { /* a warm-up call, then the timed ones */
                const int k = pass ? iters : 1;
                if (be->timer_mark(be, 0) != MG_OK) die("timer");
                for (int it = 0; it < k; it++) {
                    mg_status st = f == 0 ? be->copy_d2d(be, copy, in, n * 2)
                                          : be->fp8_cast(be, o, ot, in, rows, cols, scale,
                                                         scale + 1, scale + 2, MG_FP8_E4M3,
                                                         gelu ? pre : NULL, sums ? dbias : NULL);
                    if (st != MG_OK) die(forms[f]);
                }
                if (be->timer_mark(be, 1) != MG_OK || be->timer_seconds(be, 0, 1, &sec) != MG_OK)
                    die("timer");
            }
            const double us = 1e6 * sec / iters;
            printf("| %d x %d | %s | %.2f | %.2f |\n", rows, cols, forms[f], us, bytes / us * 1e-6);
            fprintf(
                stderr,
                "{\"rows\": %d, \"cols\": %d, \"form\": \"%s\", \"us\": %.3f, \"tbps\": %.3f}\n",
                rows, cols, forms[f], us, bytes / us * 1e-6);
        }
        be->free(be, in), be->free(be, pre), be->free(be, copy), be->free(be, out);
        be->free(be, out_t), be->free(be, scale), be->free(be, dbias);
    }
    be->destroy(be);
    return 0;
}
