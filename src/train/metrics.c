#include "train/metrics.h"

#include "config/flags.h"

#include "core/status.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <stdarg.h>
#include <string.h>
#include <time.h>

/* ---- a bounded string builder with snprintf's return convention ---- */

typedef struct {
    char *buf;
    size_t cap, len; /* len: what the full text needs, even past cap */
    bool bad;        /* an encoding error happened */
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    char *dst = b->len < b->cap ? b->buf + b->len : NULL;
    size_t room = b->len < b->cap ? b->cap - b->len : 0;
    int n = vsnprintf(dst, room, fmt, ap);
    va_end(ap);
    if (n < 0)
        b->bad = true;
    else
        b->len += (size_t)n;
}

static int sb_result(const sbuf *b) {
    if (b->cap > 0 && b->len >= b->cap) b->buf[b->cap - 1] = '\0';
    return b->bad ? -1 : (int)b->len;
}

/* A float the way Python's format() writes it: finite values through printf (both round the
 * exact binary value correctly), non-finite ones as nan/inf (NAN/INF for 'E'), never "-nan". */
static void sb_float(sbuf *b, const char *fmt, bool upper, double v) {
    if (isnan(v))
        sb_printf(b, "%s", upper ? "NAN" : "nan");
    else if (isinf(v))
        sb_printf(b, "%s%s", v < 0 ? "-" : "", upper ? "INF" : "inf");
    else
        sb_printf(b, fmt, v);
}

/* ---- the log line ---- */

void mg_metrics_timestamp(char *buf, size_t cap) {
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    localtime_r(&ts.tv_sec, &tm);
    char day[32];
    strftime(day, sizeof day, "%Y-%m-%d %H:%M:%S", &tm);
    snprintf(buf, cap, "%s.%06ld", day, ts.tv_nsec / 1000);
}

int mg_metrics_format_line_at(char *buf, size_t cap, const char *timestamp,
                              const mg_log_record *r) {
    sbuf b = {buf, cap, 0, false};
    if (cap > 0) buf[0] = '\0';
    /* Field order and formats follow training_log; optional fields are left out exactly where
     * Megatron leaves them out. */
    sb_printf(&b, " [%s]", timestamp);
    sb_printf(&b, " iteration %8lld/%8lld |", (long long)r->iteration, (long long)r->train_iters);
    sb_printf(&b, " consumed samples: %12lld |", (long long)r->consumed_samples);
    sb_printf(&b, " elapsed time per iteration (ms): ");
    sb_float(&b, "%.1f", false, r->elapsed_ms_per_iter);
    sb_printf(&b, " |");
    if (!(r->tflops_per_gpu < 0)) {
        sb_printf(&b, " throughput per GPU (TFLOP/s/GPU): ");
        /* Megatron's {:.1f}; below 1 TFLOP/s (CPU runs) three decimals keep it readable */
        sb_float(&b, r->tflops_per_gpu < 1.0 ? "%.3f" : "%.1f", false, r->tflops_per_gpu);
        sb_printf(&b, " |");
    }
    if (!(r->tokens_per_s < 0)) { /* ours, not Megatron's: the speed users compare */
        sb_printf(&b, " tokens per second: ");
        sb_float(&b, "%.0f", false, r->tokens_per_s);
        sb_printf(&b, " |");
    }
    if (!(r->lr < 0)) {
        sb_printf(&b, " learning rate: ");
        sb_float(&b, "%.6E", true, r->lr);
        sb_printf(&b, " |");
    }
    sb_printf(&b, " global batch size: %5d |", r->global_batch_size);
    if (r->lm_loss >= 0.0) { /* Megatron: `if avg >= 0.0` — a NaN loss is not printed */
        sb_printf(&b, " lm loss: ");
        sb_float(&b, "%.6E", true, r->lm_loss);
        sb_printf(&b, " |");
    }
    sb_printf(&b, " loss scale: ");
    sb_float(&b, "%.1f", false, r->loss_scale);
    sb_printf(&b, " |");
    if (!(r->grad_norm < 0)) { /* NaN is present (printed "nan"); only negative means None */
        sb_printf(&b, " grad norm: ");
        sb_float(&b, "%.3f", false, r->grad_norm);
        sb_printf(&b, " |");
    }
    if (r->log_num_zeros) { /* a float's repr: an integer below 2^53 prints as "N.0" */
        sb_printf(&b, " num zeros: ");
        sb_float(&b, "%.1f", false, r->num_zeros);
        sb_printf(&b, " |");
    }
    if (r->log_params_norm) {
        sb_printf(&b, " params norm: ");
        sb_float(&b, "%.3f", false, r->params_norm);
        sb_printf(&b, " |");
    }
    sb_printf(&b, " number of skipped iterations: %3d |", r->skipped_iters);
    sb_printf(&b, " number of nan iterations: %3d |", r->nan_iters);
    const struct {
        const char *name;
        double v;
        bool on;
    } moe[] = {{r->aux_name, r->aux_loss, r->moe && r->aux_name},
               {"z_loss", r->z_loss, r->moe && !(r->z_loss < 0)},
               {"expert load (max/mean)", r->expert_load, r->moe},
               {"moe_ep_load_imbalance", r->ep_imbalance, r->moe && !(r->ep_imbalance < 0)},
               {"moe_ep_load_imbalance_after_echo", r->ep_imbalance_after, r->moe && r->echo}};
    for (size_t i = 0; i < sizeof moe / sizeof *moe; i++)
        if (moe[i].on) {
            sb_printf(&b, " %s: ", moe[i].name);
            sb_float(&b, "%.2f", false, moe[i].v);
            sb_printf(&b, " |");
        }
    if (r->moe && r->budget) sb_printf(&b, " moe_overflow_steps: %d |", r->overflow_steps);
    return sb_result(&b);
}

int mg_metrics_format_line(char *buf, size_t cap, const mg_log_record *r) {
    char ts[64];
    mg_metrics_timestamp(ts, sizeof ts);
    return mg_metrics_format_line_at(buf, cap, ts, r);
}

/* ---- the metrics file ---- */

/* %.17g round-trips every double through strtod; JSON has no NaN/Inf, so those are null, and so
 * is a field the record marks absent (negative lr, grad norm, TFLOP/s). */
static void sb_json_num(sbuf *b, const char *key, double v, bool negative_is_absent) {
    if (!isfinite(v) || (negative_is_absent && v < 0))
        sb_printf(b, "\"%s\": null", key);
    else
        sb_printf(b, "\"%s\": %.17g", key, v);
}

int mg_metrics_format_json(char *buf, size_t cap, const mg_log_record *r) {
    sbuf b = {buf, cap, 0, false};
    if (cap > 0) buf[0] = '\0';
    sb_printf(&b, "{\"iteration\": %lld, ", (long long)r->iteration);
    sb_json_num(&b, "lm_loss", r->lm_loss, false);
    sb_printf(&b, ", ");
    sb_json_num(&b, "lr", r->lr, true);
    sb_printf(&b, ", ");
    sb_json_num(&b, "grad_norm", r->grad_norm, true);
    sb_printf(&b, ", ");
    sb_json_num(&b, "tokens_per_s", r->tokens_per_s, false);
    sb_printf(&b, ", ");
    sb_json_num(&b, "ms_per_iter", r->elapsed_ms_per_iter, false);
    sb_printf(&b, ", \"consumed_samples\": %lld, ", (long long)r->consumed_samples);
    sb_json_num(&b, "tflops", r->tflops_per_gpu, true);
    if (r->moe && r->aux_name) {
        sb_printf(&b, ", ");
        sb_json_num(&b, r->aux_name, r->aux_loss, false);
    }
    if (r->moe && !(r->z_loss < 0)) {
        sb_printf(&b, ", ");
        sb_json_num(&b, "z_loss", r->z_loss, false);
    }
    if (r->moe) {
        sb_printf(&b, ", ");
        sb_json_num(&b, "expert_load", r->expert_load, false);
    }
    if (r->moe && !(r->ep_imbalance < 0)) {
        sb_printf(&b, ", ");
        sb_json_num(&b, "moe_ep_load_imbalance", r->ep_imbalance, false);
    }
    if (r->moe && r->echo) {
        sb_printf(&b, ", ");
        sb_json_num(&b, "moe_ep_load_imbalance_after_echo", r->ep_imbalance_after, false);
    }
    if (r->moe && r->budget) sb_printf(&b, ", \"moe_overflow_steps\": %d", r->overflow_steps);
    if (r->log_num_zeros) {
        sb_printf(&b, ", ");
        sb_json_num(&b, "num_zeros", r->num_zeros, false);
    }
    if (r->log_params_norm) {
        sb_printf(&b, ", ");
        sb_json_num(&b, "params_norm", r->params_norm, false);
    }
    sb_printf(&b, "}");
    return sb_result(&b);
}

mg_status mg_metrics_open(mg_metrics_file *m, const char *path, bool append) {
    m->f = NULL;
    m->path[0] = '\0';
    if (!path || !path[0]) return MG_OK;
    if (strlen(path) >= sizeof m->path)
        return MG_FAIL(MG_ERR_USAGE, "--metrics-file path is longer than %zu bytes",
                       sizeof m->path - 1);
    FILE *f = fopen(path, append ? "a" : "w");
    if (!f)
        return MG_FAIL(MG_ERR_IO, "cannot open metrics file %s for %s: %s", path,
                       append ? "appending" : "writing", strerror(errno));
    m->f = f;
    snprintf(m->path, sizeof m->path, "%s", path);
    return MG_OK;
}

mg_status mg_metrics_write(mg_metrics_file *m, const mg_log_record *r) {
    if (!m->f) return MG_OK;
    char line[1024];
    int n = mg_metrics_format_json(line, sizeof line, r);
    if (n < 0 || (size_t)n >= sizeof line)
        return MG_FAIL(MG_ERR_INTERNAL, "metrics line does not fit in %zu bytes", sizeof line);
    if (fputs(line, m->f) < 0 || fputc('\n', m->f) == EOF || fflush(m->f) != 0)
        return MG_FAIL(MG_ERR_IO, "cannot write metrics file %s: %s", m->path, strerror(errno));
    return MG_OK;
}

void mg_metrics_close(mg_metrics_file *m) {
    if (m->f) fclose(m->f);
    m->f = NULL;
}

/* ---- FLOPs ---- */

double mg_output_layer_cost(const mg_config *c) {
    if (c->num_layers <= 0 || c->vocab_size <= 0 || c->hidden_size <= 0) return 0.0;
    mg_config none = *c;
    none.num_layers = 0;
    double all = mg_flops_per_iteration(c, 1), logits = mg_flops_per_iteration(&none, 1);
    double layer = (all - logits) / c->num_layers;
    return layer > 0 ? logits / layer : 0.0;
}

double mg_flops_per_iteration(const mg_config *c, int64_t batch_size) {
    /* Resolve what may still be -1, with Megatron's rules (arguments.py). */
    int64_t H = c->hidden_size, NH = c->num_attention_heads, L = c->num_layers;
    int64_t S = c->seq_length;
    int64_t kv = c->kv_channels > 0 ? c->kv_channels : H / NH;
    int64_t G = c->group_query_attention && c->num_query_groups > 0 ? c->num_query_groups : NH;
    int64_t F = c->ffn_hidden_size > 0 ? c->ffn_hidden_size
                : c->swiglu            ? (int64_t)((4.0 * (double)H * 2.0 / 3.0) / 64.0) * 64
                                       : 4 * H;
    int64_t mult = c->make_vocab_size_divisible_by > 0 ? c->make_vocab_size_divisible_by : 1;
    int64_t Vp = (c->vocab_size + mult - 1) / mult * mult;
    int64_t Q = kv * NH, K = kv * G;
    int64_t ffn_expansion = c->swiglu ? 3 : 2; /* h->ffn (x2 when gated) and ffn->h GEMMs */

    /* MoE (Megatron's dense / routed / shared split): an MoE layer's MLP runs top-k experts of
     * --moe-ffn-hidden-size and the shared experts; the router is not counted */
    int64_t moe_layers = 0, routed = 0, shared = 0;
    if (c->num_experts > 0 && L > 0) {
        uint8_t *is_moe = malloc((size_t)L);
        if (is_moe && mg_config_moe_layers(c, is_moe, (int)L) == MG_OK)
            for (int64_t l = 0; l < L; l++) moe_layers += is_moe[l];
        else
            mg_error_clear();
        free(is_moe);
        routed =
            (int64_t)(c->moe_ffn_hidden_size > 0 ? c->moe_ffn_hidden_size : F) * c->moe_router_topk;
        shared =
            c->moe_shared_expert_intermediate_size > 0 ? c->moe_shared_expert_intermediate_size : 0;
    }
    int64_t mlp = F * (L - moe_layers) + (routed + shared) * moe_layers;
    /* Token-linear FLOPs per token: 3 (fwd, dgrad, wgrad) * 2 (multiply-add) * GEMM sizes. */
    int64_t per_token = 6 * H * (mlp * ffn_expansion)       /* MLP */
                        + 6 * (H * (Q + K + K) + Q * H) * L /* QKV + output projections */
                        + 6 * H * Vp;                       /* logits */
    /* Megatron multiplies Python ints exactly and rounds once when the float core term joins;
     * 128-bit arithmetic reproduces that (the product overflows int64 for large runs). */
    __extension__ unsigned __int128 tokens = (unsigned __int128)(batch_size * S);
    double linear = (double)(tokens * (unsigned __int128)per_token);
    /* Core attention: QK^T and PV, 6*Q per token pair, halved by the causal mask, times 2 GEMMs;
     * sum of L_i^2 over the batch is B*S^2 for BSHD. */
    double core = (double)(batch_size * S * S) * (double)(6 * Q * L);
    return linear + core;
}
