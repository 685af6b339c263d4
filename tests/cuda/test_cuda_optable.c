/* The op table against the CUDA tests, walked from the one list of entries (backend_ops.h, as
 * mg_backend_entries):
 *  - the backend under test has every entry the CPU reference has (and passes validation);
 *  - every entry of the list has a row in `coverage` below naming the test of tests/cuda that
 *    runs it against the CPU backend (or, for entries with no CPU counterpart, exercises it), the
 *    named test exists in the named file and that file uses the entry; every row names an entry.
 *    An op added to the list without such a test fails here;
 *  - the entries no comparison test calls (destroy, the optional ones) are exercised where the
 *    backend under test has them.
 * The coverage check reads the test sources: run from the repository root, as `make test-cuda`
 * and tests/cuda/run.sh do. */
#include "cuda_test_util.h"

#include <string.h>

#include <math.h>
#include <stdio.h>

/* ---------------------------------------------------------------- the CPU table's entries */

MG_TEST(cuda_optable_has_every_cpu_entry) {
    CT_BACKENDS(cpu, gpu);
    MG_EXPECT_OK(mg_backend_validate(gpu));
    for (int i = 0; i < MG_BACKEND_N_ENTRIES; i++) {
        const mg_backend_entry *e = &mg_backend_entries[i];
        MG_EXPECT(!e->required || mg_backend_has(cpu, i), "the cpu table lacks required %s",
                  e->name);
        /* the fp8 grouped GEMM is CUTLASS's alone: absent without it (backend_ops.h) */
        bool capability = strncmp(e->name, "fp8_grouped_linear_", 19) == 0 &&
                          (gpu->compute_dtype != MG_BF16 ||
                           !mg_cuda_grouped_cutlass_available(mg_cuda_ctx_of(gpu)->device));
        MG_EXPECT(!mg_backend_has(cpu, i) || mg_backend_has(gpu, i) || capability,
                  "the %s backend lacks %s, which the cpu backend has", gpu->name, e->name);
        MG_EXPECT(!capability || !mg_backend_has(gpu, i),
                  "the %s backend has %s without CUTLASS's bf16 kernels", gpu->name, e->name);
    }
}

/* ---------------------------------------------------------------- every entry has a CUDA test */

typedef struct {
    const char *entry; /* an entry of backend_ops.h */
    const char *file;  /* under tests/cuda */
    const char *test;  /* an MG_TEST of that file */
} coverage_row;

static const coverage_row coverage[] = {
    {"alloc", "test_cuda_backend.c", "cuda_memory_entries"},
    {"free", "test_cuda_backend.c", "cuda_memory_entries"},
    {"copy_h2d", "test_cuda_backend.c", "cuda_memory_entries"},
    {"copy_d2h", "test_cuda_backend.c", "cuda_memory_entries"},
    {"copy_d2d", "test_cuda_backend.c", "cuda_memory_entries"},
    {"memset_zero", "test_cuda_backend.c", "cuda_memory_entries"},
    {"convert_bf16", "test_cuda_backend.c", "cuda_convert_bf16_matches_cpu"},
    {"upload_f32", "test_cuda_backend.c", "cuda_upload_rounds_like_the_host"},
    {"download_f32", "test_cuda_backend.c", "cuda_upload_download_span_workspace_chunks"},
    {"synchronize", "test_cuda_backend.c", "cuda_memory_entries"},
    {"destroy", "test_cuda_optable.c", "cuda_optable_entries_without_a_comparison"},
    {"memory_info", "test_cuda_optable.c", "cuda_optable_entries_without_a_comparison"},
    {"alloc_pinned", "test_cuda_optable.c", "cuda_optable_entries_without_a_comparison"},
    {"free_pinned", "test_cuda_optable.c", "cuda_optable_entries_without_a_comparison"},
    {"stream_handle", "test_cuda_backend.c", "cuda_comm_stream_ordered_by_events"},
    {"stream_wait", "test_cuda_backend.c", "cuda_comm_stream_ordered_by_events"},
    {"stream_mark", "test_cuda_backend.c", "cuda_stream_marks_order_streams"},
    {"stream_wait_mark", "test_cuda_backend.c", "cuda_stream_marks_order_streams"},
    {"timer_mark", "test_cuda_backend.c", "cuda_timer_measures_the_compute_stream"},
    {"timer_seconds", "test_cuda_backend.c", "cuda_timer_measures_the_compute_stream"},
    {"graph_begin", "test_cuda_graph.c", "cuda_graph_replay_equals_eager"},
    {"graph_end", "test_cuda_graph.c", "cuda_graph_replay_equals_eager"},
    {"graph_launch", "test_cuda_graph.c", "cuda_graph_replay_equals_eager"},
    {"graph_free", "test_cuda_graph.c", "cuda_graph_replay_equals_eager"},
    {"embedding_forward", "test_cuda_embedding.c", "cuda_embedding_forward_matches_cpu"},
    {"embedding_backward", "test_cuda_embedding.c",
     "cuda_embedding_backward_matches_cpu_and_repeats"},
    {"layernorm_forward", "test_cuda_norm.c", "cuda_layernorm_matches_cpu_and_repeats"},
    {"layernorm_backward", "test_cuda_norm.c", "cuda_layernorm_matches_cpu_and_repeats"},
    {"rmsnorm_forward", "test_cuda_norm.c", "cuda_rmsnorm_matches_cpu_and_repeats"},
    {"rmsnorm_backward", "test_cuda_norm.c", "cuda_rmsnorm_matches_cpu_and_repeats"},
    {"linear_forward", "test_cuda_linear.c", "cuda_linear_forward_matches_cpu"},
    {"linear_gelu_forward", "test_cuda_linear.c", "cuda_linear_gelu_forward_matches_cpu"},
    {"linear_backward", "test_cuda_linear.c", "cuda_linear_backward_matches_cpu_and_repeats"},
    {"gelu_forward", "test_cuda_activation.c", "cuda_gelu_matches_cpu"},
    {"gelu_backward", "test_cuda_activation.c", "cuda_gelu_matches_cpu"},
    {"swiglu_forward", "test_cuda_activation.c", "cuda_swiglu_matches_cpu"},
    {"swiglu_backward", "test_cuda_activation.c", "cuda_swiglu_matches_cpu"},
    {"rope_forward", "test_cuda_rope.c", "cuda_rope_matches_cpu"},
    {"rope_backward", "test_cuda_rope.c", "cuda_rope_matches_cpu"},
    {"attention_saved_bytes", "test_cuda_attention.c", "cuda_attention_matches_cpu_and_repeats"},
    {"attention_forward", "test_cuda_attention.c", "cuda_attention_matches_cpu_and_repeats"},
    {"attention_backward", "test_cuda_attention.c", "cuda_attention_matches_cpu_and_repeats"},
    {"cross_entropy_fused", "test_cuda_cross_entropy.c",
     "cuda_cross_entropy_matches_cpu_and_repeats"},
    {"cross_entropy_max", "test_cuda_cross_entropy.c",
     "cuda_cross_entropy_vocab_parallel_matches_cpu_and_repeats"},
    {"cross_entropy_sums", "test_cuda_cross_entropy.c",
     "cuda_cross_entropy_vocab_parallel_matches_cpu_and_repeats"},
    {"cross_entropy_finish", "test_cuda_cross_entropy.c",
     "cuda_cross_entropy_vocab_parallel_matches_cpu_and_repeats"},
    {"add", "test_cuda_elementwise.c", "cuda_add_matches_cpu"},
    {"bias_residual_add", "test_cuda_elementwise.c", "cuda_bias_residual_add_matches_cpu"},
    {"dropout_add", "test_cuda_dropout.c", "cuda_dropout_hidden_mask_matches_cpu"},
    {"dropout_backward", "test_cuda_dropout.c", "cuda_dropout_hidden_mask_matches_cpu"},
    {"rng_advance", "test_cuda_dropout.c", "cuda_rng_advance_matches_cpu"},
    {"normal_f32", "test_cuda_dropout.c", "cuda_normal_f32_matches_cpu"},
    {"fp8_cast", "test_cuda_fp8.c", "cuda_fp8_cast_matches_cpu"},
    {"fp8_transpose", "test_cuda_fp8.c", "cuda_fp8_transpose_matches_cpu"},
    {"fp8_cast_blocks", "test_cuda_fp8.c", "cuda_fp8_cast_blocks_matches_cpu"},
    {"fp8_linear_forward", "test_cuda_fp8.c", "cuda_fp8_linear_matches_cpu"},
    {"fp8_linear_backward", "test_cuda_fp8.c", "cuda_fp8_linear_matches_cpu"},
    {"fp8_update", "test_cuda_fp8.c", "cuda_fp8_update_matches_cpu"},
    {"fp8_cast_grouped", "test_cuda_fp8_grouped.c", "cuda_fp8_cast_grouped_matches_cpu"},
    {"fp8_grouped_linear_forward", "test_cuda_fp8_grouped.c",
     "cuda_fp8_grouped_linear_matches_cpu"},
    {"fp8_grouped_linear_backward", "test_cuda_fp8_grouped.c",
     "cuda_fp8_grouped_linear_matches_cpu"},
    {"sum_f32", "test_cuda_elementwise.c", "cuda_sum_and_sumsq_match_cpu_and_repeat"},
    {"sumsq_f32", "test_cuda_elementwise.c", "cuda_sum_and_sumsq_match_cpu_and_repeat"},
    {"count_zeros_f32", "test_cuda_elementwise.c", "cuda_count_zeros_matches_cpu"},
    {"clip_coef", "test_cuda_elementwise.c", "cuda_clip_coef_matches_cpu"},
    {"step_control", "test_cuda_step_control.c", "cuda_step_control_matches_cpu"},
    {"scale_f32", "test_cuda_step_control.c", "cuda_scale_f32_matches_cpu"},
    {"adamw", "test_cuda_adamw.c", "cuda_adamw_matches_cpu"},
    {"router_forward", "test_cuda_moe.c", "cuda_moe_router_matches_cpu"},
    {"router_backward", "test_cuda_moe.c", "cuda_moe_router_matches_cpu"},
    {"moe_route", "test_cuda_moe.c", "cuda_moe_route_matches_cpu"},
    {"moe_route_backward", "test_cuda_moe.c", "cuda_moe_route_matches_cpu"},
    {"moe_permute", "test_cuda_moe.c", "cuda_moe_permute_unpermute_match_cpu"},
    {"moe_permute_backward", "test_cuda_moe.c", "cuda_moe_permute_unpermute_match_cpu"},
    {"moe_unpermute", "test_cuda_moe.c", "cuda_moe_permute_unpermute_match_cpu"},
    {"moe_unpermute_backward", "test_cuda_moe.c", "cuda_moe_permute_unpermute_match_cpu"},
    {"grouped_linear_forward", "test_cuda_grouped.c", "cuda_grouped_linear_matches_cpu"},
    {"grouped_linear_backward", "test_cuda_grouped.c", "cuda_grouped_linear_matches_cpu"},
    {"grouped_activation_forward", "test_cuda_moe.c", "cuda_moe_grouped_activations_match_cpu"},
    {"grouped_swiglu_backward", "test_cuda_moe.c", "cuda_moe_grouped_activations_match_cpu"},
    {"moe_regroup", "test_cuda_moe.c", "cuda_moe_regroup_matches_cpu"},
    {"moe_round_counts", "test_cuda_moe.c", "cuda_moe_regroup_matches_cpu"},
    {"moe_put_rows", "test_cuda_moe.c", "cuda_moe_put_rows_matches_the_slab_exchange"},
    {"peer_push", "test_cuda_peer_reduce.c", "cuda_peer_push_sum_and_take"},
    {"peer_sum", "test_cuda_peer_reduce.c", "cuda_peer_push_sum_and_take"},
    {"peer_take", "test_cuda_peer_reduce.c", "cuda_peer_push_sum_and_take"},
    {"peer_put", "test_cuda_peer_reduce.c", "cuda_peer_push_sum_and_take"},
    {"moe_expert_bias_update", "test_cuda_moe.c", "cuda_moe_expert_bias_update_matches_cpu"},
    {"moe_echo_plan", "test_cuda_moe.c", "cuda_moe_echo_plan_matches_cpu"},
    {"moe_echo_reroute", "test_cuda_moe.c", "cuda_moe_echo_reroute_matches_cpu"},
    {"moe_echo_move", "test_cuda_moe.c", "cuda_moe_echo_move_matches_cpu"},
    {"matmul_peak_tflops", "test_cuda_optable.c", "cuda_optable_entries_without_a_comparison"},
};
#define N_COVERAGE ((int)(sizeof coverage / sizeof *coverage))

/* Entries a test file calls through a shared header of tests/ that it includes. */
static const struct {
    const char *entry, *header;
} via_header[] = {{"graph_launch", "graph_step.h"}, {"graph_free", "graph_step.h"}};

static const char *header_of(const char *entry) {
    for (size_t i = 0; i < sizeof via_header / sizeof *via_header; i++)
        if (!strcmp(via_header[i].entry, entry)) return via_header[i].header;
    return NULL;
}

/* The whole file tests/cuda/<name> (NUL-terminated, caller frees), or NULL. */
static char *read_source(const char *name) {
    char path[256];
    snprintf(path, sizeof path, "tests/cuda/%s", name);
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *text = NULL;
    long n = fseek(f, 0, SEEK_END) == 0 ? ftell(f) : -1;
    if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (text = malloc((size_t)n + 1)) != NULL) {
        size_t got = fread(text, 1, (size_t)n, f);
        text[got] = '\0';
    }
    fclose(f);
    return text;
}

static bool ident_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* Whether `word` occurs in text as a whole identifier, right after `before` ("" for anywhere). */
static bool has_word(const char *text, const char *before, const char *word) {
    char pat[128];
    snprintf(pat, sizeof pat, "%s%s", before, word);
    size_t n = strlen(pat);
    for (const char *p = strstr(text, pat); p; p = strstr(p + 1, pat)) {
        bool start = p == text || !ident_char(p[-1]) || *before;
        if (start && !ident_char(p[n])) return true;
    }
    return false;
}

MG_TEST(cuda_optable_every_entry_has_a_cuda_test) {
    for (int i = 0; i < MG_BACKEND_N_ENTRIES; i++) {
        int rows = 0;
        for (int r = 0; r < N_COVERAGE; r++)
            rows += strcmp(coverage[r].entry, mg_backend_entries[i].name) == 0;
        MG_EXPECT(rows == 1,
                  "entry %s has %d rows in the coverage table of test_cuda_optable.c (want 1: "
                  "the test of tests/cuda that runs it against the cpu backend)",
                  mg_backend_entries[i].name, rows);
    }
    for (int r = 0; r < N_COVERAGE; r++) {
        const coverage_row *c = &coverage[r];
        bool known = false;
        for (int i = 0; i < MG_BACKEND_N_ENTRIES; i++)
            known |= strcmp(c->entry, mg_backend_entries[i].name) == 0;
        MG_EXPECT(known, "coverage row %s: no such entry in backend_ops.h", c->entry);
        char *text = read_source(c->file);
        MG_EXPECT(text != NULL,
                  "coverage row %s: cannot read tests/cuda/%s (run from the "
                  "repository root)",
                  c->entry, c->file);
        if (!text) continue;
        MG_EXPECT(has_word(text, "MG_TEST(", c->test), "coverage row %s: %s has no test %s",
                  c->entry, c->file, c->test);
        /* this file names every entry in its table: here the entry must be called */
        bool self = strcmp(c->file, "test_cuda_optable.c") == 0;
        const char *header = header_of(c->entry);
        char *callers = text;
        if (header) {
            char inc[96], path[96];
            snprintf(inc, sizeof inc, "#include \"%s\"", header);
            MG_EXPECT(strstr(text, inc) != NULL, "coverage row %s: %s does not include %s",
                      c->entry, c->file, header);
            snprintf(path, sizeof path, "../%s", header);
            callers = read_source(path);
            MG_EXPECT(callers != NULL, "coverage row %s: cannot read tests/%s", c->entry, header);
        }
        if (callers)
            MG_EXPECT(has_word(callers, self ? "->" : "", c->entry),
                      "coverage row %s: %s never uses it", c->entry, header ? header : c->file);
        if (callers != text) free(callers);
        free(text);
    }
}

/* ---------------------------------------------------------------- entries no comparison calls */

/* destroy (on a second backend of the kind under test), and the optional entries where the
 * backend under test has them: the device's memory figures, pinned host memory that copy_d2h
 * fills, and the matmul peak on a small product. */
MG_TEST(cuda_optable_entries_without_a_comparison) {
    mg_backend *g = ct_gpu(t);
    if (!g) return;
    mg_backend *other = NULL;
    MG_EXPECT_OK(g->device == MG_DEVICE_CPU
                     ? mg_backend_cpu_create(&other, 0)
                     : mg_backend_cuda_create_dtype(&other, 0, g->compute_dtype));
    if (other) other->destroy(other);
    if (g->memory_info) {
        size_t free_bytes = 0, total = 0;
        MG_EXPECT_OK(g->memory_info(g, &free_bytes, &total));
        MG_EXPECT(total > 0 && free_bytes <= total, "memory_info: %zu free of %zu", free_bytes,
                  total);
    }
    if (g->alloc_pinned) {
        enum { N = 4096 };
        unsigned char src[N], *host = NULL;
        void *dev = NULL;
        for (int i = 0; i < N; i++) src[i] = (unsigned char)(i * 29 + 3);
        MG_EXPECT_OK(g->alloc_pinned(g, N, (void **)&host));
        MG_EXPECT_OK(g->alloc(g, N, &dev));
        if (host && dev) {
            int nz = 0;
            for (int i = 0; i < N; i++) nz += host[i] != 0;
            MG_EXPECT(nz == 0, "alloc_pinned: %d non-zero bytes", nz);
            MG_EXPECT_OK(g->copy_h2d(g, dev, src, N));
            MG_EXPECT_OK(g->copy_d2h(g, host, dev, N));
            MG_EXPECT(memcmp(host, src, N) == 0, "copy_d2h into pinned memory");
        }
        if (dev) g->free(g, dev);
        if (host) g->free_pinned(g, host);
    }
    if (g->matmul_peak_tflops) {
        double tflops = 0;
        MG_EXPECT_OK(g->matmul_peak_tflops(g, 256, &tflops));
        MG_EXPECT(isfinite(tflops) && tflops > 0, "matmul_peak_tflops: %g", tflops);
    }
}
