/* The training log line against Megatron's training_log format (megatron/training/training.py),
 * the metrics JSON lines read back with cJSON, and the FLOPs count against Megatron's
 * num_floating_point_operations. */
#include "test.h"

#include "train/trainer_moe.h"

#include "core/status.h"
#include "train/metrics.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static mg_log_record sample_record(void) {
    mg_log_record r = {
        .iteration = 10,
        .train_iters = 500,
        .consumed_samples = 80,
        .elapsed_ms_per_iter = 1234.56,
        .tflops_per_gpu = 0.4321,
        .tokens_per_s = 1659.1,
        .lr = 1.5e-4,
        .global_batch_size = 8,
        .lm_loss = 6.9314718,
        .loss_scale = 1.0,
        .grad_norm = 2.34567,
        .skipped_iters = 0,
        .nan_iters = 0,
    };
    return r;
}

/* The line Python builds from the same values: " [ts]" + ' iteration {:8d}/{:8d} |' + ..., plus
 * our tokens-per-second field and three decimals for TFLOP/s below 1. */
MG_TEST(metrics_line_matches_megatron) {
    mg_log_record r = sample_record();
    char line[1024];
    int n = mg_metrics_format_line_at(line, sizeof line, "2026-11-21 09:05:03.041250", &r);
    const char *want = " [2026-11-21 09:05:03.041250] iteration       10/     500 |"
                       " consumed samples:           80 |"
                       " elapsed time per iteration (ms): 1234.6 |"
                       " throughput per GPU (TFLOP/s/GPU): 0.432 |"
                       " tokens per second: 1659 |"
                       " learning rate: 1.500000E-04 |"
                       " global batch size:     8 |"
                       " lm loss: 6.931472E+00 |"
                       " loss scale: 1.0 |"
                       " grad norm: 2.346 |"
                       " number of skipped iterations:   0 |"
                       " number of nan iterations:   0 |";
    MG_EXPECT(strcmp(line, want) == 0, "line\n  got  '%s'\n  want '%s'", line, want);
    MG_EXPECT(n == (int)strlen(want), "returned %d, length %zu", n, strlen(want));
}

/* --log-num-zeros-in-grad and --log-params-norm: Python's f' num zeros: {num_zeros_in_grad} |'
 * of megatron-core 0.16.1's float count and f' params norm: {params_norm:.3f} |', after the grad
 * norm; and the JSON keys. */
MG_TEST(metrics_line_num_zeros_and_params_norm) {
    mg_log_record r = sample_record();
    r.log_num_zeros = true;
    r.num_zeros = 2048;
    r.log_params_norm = true;
    r.params_norm = 12.98251;
    char line[1024], json[1024];
    mg_metrics_format_line_at(line, sizeof line, "2026-11-21 09:05:03.041250", &r);
    const char *want = " grad norm: 2.346 | num zeros: 2048.0 | params norm: 12.983 |"
                       " number of skipped iterations:   0 |";
    MG_EXPECT(strstr(line, want) != NULL, "line '%s' lacks '%s'", line, want);
    mg_metrics_format_json(json, sizeof json, &r);
    cJSON *o = cJSON_Parse(json);
    cJSON *z = cJSON_GetObjectItem(o, "num_zeros"), *p = cJSON_GetObjectItem(o, "params_norm");
    MG_EXPECT(z && p && z->valuedouble == 2048.0 && p->valuedouble == 12.98251, "json %s", json);
    cJSON_Delete(o);
    r.log_num_zeros = r.log_params_norm = false; /* off: neither in the line nor the JSON */
    mg_metrics_format_line_at(line, sizeof line, "2026-11-21 09:05:03.041250", &r);
    mg_metrics_format_json(json, sizeof json, &r);
    MG_EXPECT(!strstr(line, "num zeros") && !strstr(line, "params norm") &&
                  !strstr(json, "num_zeros") && !strstr(json, "params_norm"),
              "flags off, yet '%s' / %s", line, json);
}

MG_TEST(metrics_line_optional_and_nonfinite_fields) {
    /* Megatron leaves out throughput (no --log-throughput), lr and grad norm when None, and the
     * loss when its average is not >= 0 (NaN); a NaN grad norm prints as Python's "nan". */
    mg_log_record r = sample_record();
    r.tflops_per_gpu = -1;
    r.tokens_per_s = -1;
    r.lr = -1;
    r.lm_loss = NAN;
    r.grad_norm = -NAN; /* a negative NaN must still print "nan", not glibc's "-nan" */
    r.skipped_iters = 1;
    r.nan_iters = 12;
    r.iteration = 123456789; /* wider than {:8d}: Python widens, as printf does */
    char line[1024];
    mg_metrics_format_line_at(line, sizeof line, "TS", &r);
    const char *want = " [TS] iteration 123456789/     500 |"
                       " consumed samples:           80 |"
                       " elapsed time per iteration (ms): 1234.6 |"
                       " global batch size:     8 |"
                       " loss scale: 1.0 |"
                       " grad norm: nan |"
                       " number of skipped iterations:   1 |"
                       " number of nan iterations:  12 |";
    MG_EXPECT(strcmp(line, want) == 0, "line\n  got  '%s'\n  want '%s'", line, want);

    r = sample_record();
    r.lm_loss = INFINITY; /* inf >= 0: printed, as Python's {:.6E} writes it */
    r.loss_scale = 65536.0;
    mg_metrics_format_line_at(line, sizeof line, "TS", &r);
    MG_EXPECT(strstr(line, " lm loss: INF | loss scale: 65536.0 |") != NULL, "line: %s", line);
}

MG_TEST(metrics_line_truncates_like_snprintf) {
    mg_log_record r = sample_record();
    char full[1024], small[40];
    int n = mg_metrics_format_line_at(full, sizeof full, "TS", &r);
    int m = mg_metrics_format_line_at(small, sizeof small, "TS", &r);
    MG_EXPECT(m == n, "truncated call returned %d, full length %d", m, n);
    MG_EXPECT(strlen(small) == sizeof small - 1 && strncmp(small, full, sizeof small - 1) == 0,
              "truncated text '%s'", small);
}

MG_TEST(metrics_timestamp_shape) {
    char ts[64];
    mg_metrics_timestamp(ts, sizeof ts);
    /* "YYYY-MM-DD HH:MM:SS.ffffff" */
    MG_EXPECT(strlen(ts) == 26, "timestamp '%s'", ts);
    const char *shape = "dddd-dd-dd dd:dd:dd.dddddd";
    for (size_t i = 0; i < 26 && ts[i]; i++) {
        bool ok = shape[i] == 'd' ? (ts[i] >= '0' && ts[i] <= '9') : ts[i] == shape[i];
        MG_EXPECT(ok, "timestamp '%s' differs from the shape at %zu", ts, i);
    }
    mg_log_record r = sample_record();
    char line[1024];
    mg_metrics_format_line(line, sizeof line, &r);
    MG_EXPECT(line[0] == ' ' && line[1] == '[' && line[28] == ']' &&
                  strncmp(line + 29, " iteration ", 11) == 0,
              "stamped line '%s'", line);
}

static double json_num(cJSON *o, const char *key, mg_test_ctx *t) {
    cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    MG_EXPECT(v != NULL, "key %s missing", key);
    if (!v) return NAN;
    MG_EXPECT(cJSON_IsNumber(v), "key %s is not a number", key);
    return v->valuedouble;
}

static bool same_bits(double a, double b) {
    return memcmp(&a, &b, sizeof a) == 0;
}

MG_TEST(metrics_json_round_trips_and_nan_is_null) {
    char path[] = "/tmp/mg_test_metrics_XXXXXX";
    int fd = mkstemp(path);
    MG_EXPECT(fd >= 0, "mkstemp failed");
    if (fd < 0) return;
    close(fd);

    /* Doubles with long expansions: %.17g must give strtod the same bits back. */
    mg_log_record a = sample_record();
    a.lm_loss = 10.123456789012345678;
    a.lr = 0.1 + 0.2; /* 0.30000000000000004 */
    a.grad_norm = 1.0 / 3.0;
    a.tokens_per_s = 12345.678901234567;
    a.elapsed_ms_per_iter = 2.0 / 7.0;
    a.tflops_per_gpu = 1e-300;
    a.consumed_samples = 8000000000LL; /* beyond int32 */
    mg_log_record b = sample_record();
    b.iteration = 11;
    b.lm_loss = NAN;
    b.grad_norm = INFINITY;
    b.lr = 3e-4;

    mg_metrics_file m;
    MG_EXPECT_OK(mg_metrics_open(&m, path, false));
    MG_EXPECT_OK(mg_metrics_write(&m, &a));
    MG_EXPECT_OK(mg_metrics_write(&m, &b));
    mg_metrics_close(&m);

    FILE *f = fopen(path, "r");
    char line[2][1024] = {{0}};
    int nlines = 0;
    char tmp[1024];
    while (f && fgets(tmp, sizeof tmp, f)) {
        if (nlines < 2) snprintf(line[nlines], sizeof line[nlines], "%s", tmp);
        nlines++;
    }
    if (f) fclose(f);
    MG_EXPECT(nlines == 2, "%d lines, want 2", nlines);

    cJSON *o = cJSON_Parse(line[0]);
    MG_EXPECT(o != NULL, "line 1 is not JSON: %s", line[0]);
    if (o) {
        MG_EXPECT(json_num(o, "iteration", t) == 10, "iteration");
        MG_EXPECT(same_bits(json_num(o, "lm_loss", t), a.lm_loss), "lm_loss bits");
        MG_EXPECT(same_bits(json_num(o, "lr", t), a.lr), "lr bits");
        MG_EXPECT(same_bits(json_num(o, "grad_norm", t), a.grad_norm), "grad_norm bits");
        MG_EXPECT(same_bits(json_num(o, "tokens_per_s", t), a.tokens_per_s), "tokens_per_s bits");
        MG_EXPECT(same_bits(json_num(o, "ms_per_iter", t), a.elapsed_ms_per_iter), "ms bits");
        MG_EXPECT(same_bits(json_num(o, "tflops", t), a.tflops_per_gpu), "tflops bits");
        MG_EXPECT(json_num(o, "consumed_samples", t) == 8e9, "consumed_samples");
        cJSON_Delete(o);
    }
    o = cJSON_Parse(line[1]);
    MG_EXPECT(o != NULL, "line 2 (NaN loss) is not valid JSON: %s", line[1]);
    if (o) {
        MG_EXPECT(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "lm_loss")), "NaN → null");
        MG_EXPECT(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "grad_norm")), "Inf → null");
        MG_EXPECT(same_bits(json_num(o, "lr", t), 3e-4), "lr bits");
        cJSON_Delete(o);
    }

    /* append = true keeps what is there (resume); append = false truncates (fresh run). */
    MG_EXPECT_OK(mg_metrics_open(&m, path, true));
    MG_EXPECT_OK(mg_metrics_write(&m, &a));
    mg_metrics_close(&m);
    f = fopen(path, "r");
    nlines = 0;
    while (f && fgets(tmp, sizeof tmp, f)) nlines++;
    if (f) fclose(f);
    MG_EXPECT(nlines == 3, "after append: %d lines, want 3", nlines);

    MG_EXPECT_OK(mg_metrics_open(&m, path, false));
    MG_EXPECT_OK(mg_metrics_write(&m, &b));
    mg_metrics_close(&m);
    f = fopen(path, "r");
    nlines = 0;
    while (f && fgets(tmp, sizeof tmp, f)) nlines++;
    if (f) fclose(f);
    MG_EXPECT(nlines == 1, "after truncating open: %d lines, want 1", nlines);
    unlink(path);
}

MG_TEST(metrics_file_disabled_and_bad_path) {
    mg_metrics_file m;
    mg_log_record r = sample_record();
    MG_EXPECT_OK(mg_metrics_open(&m, "", false));
    MG_EXPECT(m.f == NULL, "empty path must disable the file");
    MG_EXPECT_OK(mg_metrics_write(&m, &r));
    mg_metrics_close(&m);

    mg_status s = mg_metrics_open(&m, "/nonexistent-dir-mg/metrics.jsonl", false);
    MG_EXPECT(s == MG_ERR_IO, "bad directory gave %d", (int)s);
    MG_EXPECT(strstr(mg_error_message(), "/nonexistent-dir-mg/metrics.jsonl") != NULL,
              "message names the path: %s", mg_error_message());
    MG_EXPECT(m.f == NULL, "failed open left a file handle");
}

static mg_config gpt_config(int L, int H, int NH, int S, int V) {
    mg_config c;
    memset(&c, 0, sizeof c);
    c.num_layers = L;
    c.hidden_size = H;
    c.num_attention_heads = NH;
    c.seq_length = S;
    c.vocab_size = V;
    c.make_vocab_size_divisible_by = 128;
    c.ffn_hidden_size = 4 * H;
    c.kv_channels = H / NH;
    c.num_query_groups = NH;
    return c;
}

MG_TEST(metrics_flops_gpt2_124m) {
    /* GPT-2 124M: L 12, H 768, NH 12, S 1024, V 50257 → padded 50304, F 3072, kv 64, G 12.
     * Per token (6 = 3 passes * 2 for multiply-add):
     *   MLP      6 * 768 * 3072 * 2 * 12           = 339,738,624
     *   QKV+out  6 * (768 * 2304 + 768 * 768) * 12 = 169,869,312
     *   logits   6 * 768 * 50304                   = 231,800,832
     *   sum 741,408,768; * 1024 tokens             = 759,202,578,432
     * core attention: B*S^2 * 6 * Q * L = 1,048,576 * 6 * 768 * 12 = 57,982,058,496
     * total 817,184,636,928 — the value Megatron's num_floating_point_operations returns for
     * these args and batch 1 (checked by running its function on a namespace of these args). */
    mg_config c = gpt_config(12, 768, 12, 1024, 50257);
    double f1 = mg_flops_per_iteration(&c, 1);
    MG_EXPECT(f1 == 817184636928.0, "flops %.17g, want 817184636928", f1);
    double f8 = mg_flops_per_iteration(&c, 8);
    MG_EXPECT(f8 == 6537477095424.0, "batch 8: %.17g, want 8 * the above", f8);

    /* Unresolved fields resolve as Megatron does: kv = H/NH, F = 4H, G = NH without GQA. */
    c.ffn_hidden_size = -1;
    c.kv_channels = -1;
    c.num_query_groups = 3; /* ignored: --group-query-attention is off */
    MG_EXPECT(mg_flops_per_iteration(&c, 1) == f1, "unresolved config gave %.17g",
              mg_flops_per_iteration(&c, 1));
}

MG_TEST(metrics_flops_moe) {
    /* The GPT-2 124M shape with 8 experts, top-2, expert ffn 3072 (Megatron's MLP term:
     * F x dense layers + (moe F x topk + shared F) x MoE layers). Every layer MoE: the MLP's
     * 339,738,624 per token doubles: (679,477,248 + 169,869,312 + 231,800,832) x 1024
     * + 57,982,058,496 = 1,165,076,987,904. */
    mg_config c = gpt_config(12, 768, 12, 1024, 50257);
    c.num_experts = 8;
    c.moe_router_topk = 2;
    c.moe_ffn_hidden_size = 3072;
    snprintf(c.moe_layer_freq, sizeof c.moe_layer_freq, "1");
    double f = mg_flops_per_iteration(&c, 1);
    MG_EXPECT(f == 1165076987904.0, "all-MoE flops %.17g", f);
    /* every 2nd layer MoE with a shared expert of 1024: MLP 6*768*2*(3072*6 + (6144+1024)*6)
     * = 566,231,040 per token: (566,231,040 + 169,869,312 + 231,800,832) x 1024 + core */
    snprintf(c.moe_layer_freq, sizeof c.moe_layer_freq, "2");
    c.moe_shared_expert_intermediate_size = 1024;
    f = mg_flops_per_iteration(&c, 1);
    MG_EXPECT(f == 1049112870912.0, "half-MoE flops %.17g", f);
}

MG_TEST(metrics_flops_gqa_swiglu_large) {
    /* Reference values from Megatron's num_floating_point_operations run on these args. */
    /* Llama-3-8B shape: GQA 8 groups, SwiGLU F 14336, vocab 128256, S 4096, batch 1024. */
    mg_config c = gpt_config(32, 4096, 32, 4096, 128256);
    c.group_query_attention = true;
    c.num_query_groups = 8;
    c.kv_channels = 128;
    c.ffn_hidden_size = 14336;
    c.swiglu = true;
    double f = mg_flops_per_iteration(&c, 1024);
    MG_EXPECT(f == 2.0237171216193946e+17, "8B flops %.17g", f);

    /* Llama-3-405B shape, S 8192, batch 2048: the token-linear product passes 2^63, so this
     * checks the exact 128-bit product and Megatron's single rounding. */
    c = gpt_config(126, 16384, 128, 8192, 128256);
    c.group_query_attention = true;
    c.num_query_groups = 8;
    c.kv_channels = 128;
    c.ffn_hidden_size = 53248;
    c.swiglu = true;
    f = mg_flops_per_iteration(&c, 2048);
    MG_EXPECT(f == 4.234495475886273e+19, "405B flops %.17g", f);
}

/* The MoE fields: ours after Megatron's, ECHO's imbalance only when set (expert parallelism). */
MG_TEST(metrics_moe_fields) {
    mg_log_record r = sample_record();
    r.moe = true, r.aux_name = "load_balancing_loss", r.aux_loss = 1.25, r.z_loss = -1;
    r.expert_load = 1.5, r.ep_imbalance = 1.125;
    char line[1024], json[1024];
    MG_EXPECT(mg_metrics_format_line_at(line, sizeof line, "ts", &r) > 0, "line");
    MG_EXPECT(strstr(line, " load_balancing_loss: 1.25 | expert load (max/mean): 1.50 | "
                           "moe_ep_load_imbalance: 1.12 |") != NULL,
              "MoE fields of the line: %s", line);
    MG_EXPECT(mg_metrics_format_json(json, sizeof json, &r) > 0 &&
                  strstr(json, "\"expert_load\": 1.5, \"moe_ep_load_imbalance\": 1.125") != NULL,
              "MoE fields of the JSON: %s", json);
    r.ep_imbalance = -1; /* one expert-parallel rank */
    MG_EXPECT(mg_metrics_format_line_at(line, sizeof line, "ts", &r) > 0 &&
                  mg_metrics_format_json(json, sizeof json, &r) > 0 && !strstr(line, "imbalance") &&
                  !strstr(json, "imbalance"),
              "an imbalance without expert parallelism: %s / %s", line, json);
}

/* By hand, E 4 over 2 ranks: layer 0 loads 10 30 | 20 40: experts 40 / 25 = 1.6, ranks 60 / 50
 * = 1.2; layer 1 even: 1, 1; layer 2 routed nothing and does not count. */
MG_TEST(metrics_moe_load_stats) {
    const float loads[12] = {10, 30, 20, 40, 5, 5, 5, 5, 0, 0, 0, 0};
    double load, imb;
    mg_moe_load_stats(loads, 3, 4, 2, &load, &imb);
    MG_EXPECT(fabs(load - 1.6) < 1e-12 && fabs(imb - 1.1) < 1e-12,
              "expert load %.17g (want 1.6), imbalance %.17g (want 1.1)", load, imb);
    mg_moe_load_stats(loads, 3, 4, 1, &load, &imb);
    MG_EXPECT(fabs(imb - 1.0) < 1e-12, "one rank: imbalance %.17g (want 1)", imb);
}
