/* bench_comm: collective bandwidth through megatron.c's comm layer on the NCCL backend, measured
 * as nccl-tests measure it, with a raw-NCCL baseline in the same run. One process per GPU under
 * mpirun (or any launcher mg_launch_detect knows); bench/comm.sh runs it on 2 and 4 GPUs.
 *   bench_comm [--min-bytes 1M] [--max-bytes 1G] [--factor 2] [--warmup 5] [--iters 20]
 *              [--ops all_reduce,reduce_scatter,all_gather,all_to_all] [--dtypes bf16,f32]
 *              [--no-baseline] [--zero-cta] [--timeout S]
 *
 * What is measured: for every (op, dtype, size) `warmup` calls, a barrier, then `iters` calls
 * between two CUDA events on one stream; time = elapsed / iters, the maximum over ranks. The
 * calls go through mg_comm_* (argument checks, call numbering, the watchdog's event recorded
 * behind every call: src/comm/nccl.c), so small sizes show that host overhead; the baseline path
 * ("nccl") makes the same calls straight on a blocking ncclComm_t of the same GPUs and stream, so
 * ours/nccl is the cost of our path. Sizes follow nccl-tests: `bytes` is the whole buffer
 * (all-reduce: the buffer; reduce-scatter: the send buffer, n x the result; all-gather: the receive
 * buffer, n x each rank's part; all-to-all: the send buffer, n parts of bytes/n). algbw = bytes /
 * time; busbw = algbw x 2(n-1)/n for all-reduce and x (n-1)/n for the others (nccl-tests'
 * PERFORMANCE.md), comparable with nccl-tests' output on the same machine.
 *
 * In place: every size is also run in place where the operation has that form (NCCL's
 * conventions, comm.h): all-reduce send == recv; reduce-scatter recv = send + rank*count;
 * all-gather send = recv + rank*count. All-to-all has none ("inplace": null). NCCL reads and
 * writes the same amount either way, so in-place and out-of-place should agree within noise; a
 * gap points at a copy our layer added.
 *
 * --zero-cta: the baseline communicator is made with NCCL's zero-CTA policy (NCCL_CTA_POLICY_ZERO,
 * NCCL >= 2.28) and both buffers come from ncclMemAlloc, registered on it as symmetric windows
 * (ncclCommWindowRegister, NCCL_WIN_COLL_SYMMETRIC); the baseline's all-to-all is then
 * ncclAlltoAll. On one node NCCL runs all-gather and all-to-all on such windows with the GPU's
 * copy engines, using no multiprocessors; the "nccl" column then shows those transfers beside
 * the kernel-driven ones of our path (the same buffers), in and out of place (JSON lines).
 *
 * Output (rank 0): one JSON line per (op, dtype, bytes, path, inplace) and a table. Values in the
 * buffers are a fixed byte pattern; nothing is checked here (tests/dist checks results). */
#ifdef MG_HAVE_NCCL

#include "comm/comm.h"
#include "core/status.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { OP_ALL_REDUCE, OP_REDUCE_SCATTER, OP_ALL_GATHER, OP_ALL_TO_ALL, N_OPS };
static const char *const OP_NAMES[N_OPS] = {"all_reduce", "reduce_scatter", "all_gather",
                                            "all_to_all"};
enum { DT_BF16, DT_F32, N_DTS };
static const char *const DT_NAMES[N_DTS] = {"bf16", "f32"};
static const mg_dtype DT_MG[N_DTS] = {MG_BF16, MG_F32};
static const ncclDataType_t DT_NCCL[N_DTS] = {ncclBfloat16, ncclFloat32};

typedef struct {
    size_t min_bytes, max_bytes;
    int factor, warmup, iters;
    bool op_on[N_OPS], dt_on[N_DTS];
    bool baseline, zero_cta;
    double timeout_s;
} opts;

typedef struct {
    mg_comm_world *w;
    mg_comm *world;
    int rank, n;
    cudaStream_t stream;
    char *a, *b;               /* (max_bytes) each */
    size_t *counts, *displs;   /* (n) all-to-all parts, in elements */
    ncclComm_t raw;            /* blocking communicator of the baseline, or NULL */
    ncclWindow_t win_a, win_b; /* --zero-cta: a and b registered on raw, else NULL */
    cudaEvent_t t0, t1;
    float *dev_time; /* (1,) per-iteration time, reduced with max over ranks */
    char device[256];
} bench;

/* One table row: a size of an (op, dtype); times in microseconds, < 0 when not run. */
typedef struct {
    int op, dt;
    size_t bytes;
    double us_oop, us_ip, us_raw;
} row;

static void die(bench *b, const char *what) {
    char msg[1024];
    snprintf(msg, sizeof msg, "%s", mg_error_message());
    fprintf(stderr, "bench_comm: rank %d: %s: %s\n", b->rank, what, msg);
    fflush(stderr);
    mg_comm_world_fail(b->w, msg);
    mg_comm_world_finalize(b->w);
    exit(1);
}

#define BOK(b, expr)                                                                               \
    do {                                                                                           \
        if ((expr) != MG_OK) die((b), #expr);                                                      \
    } while (0)

#define BCUDA(b, expr)                                                                             \
    do {                                                                                           \
        cudaError_t e_ = (expr);                                                                   \
        if (e_ != cudaSuccess) {                                                                   \
            MG_FAIL(MG_ERR_INTERNAL, "%s: %s", #expr, cudaGetErrorString(e_));                     \
            die((b), #expr);                                                                       \
        }                                                                                          \
    } while (0)

#define BNCCL(b, expr)                                                                             \
    do {                                                                                           \
        ncclResult_t r_ = (expr);                                                                  \
        if (r_ != ncclSuccess) {                                                                   \
            MG_FAIL(MG_ERR_COMM, "%s: %s: %s", #expr, ncclGetErrorString(r_),                      \
                    ncclGetLastError(NULL));                                                       \
            die((b), #expr);                                                                       \
        }                                                                                          \
    } while (0)

static double bus_factor(int op, int n) {
    return op == OP_ALL_REDUCE ? 2.0 * (n - 1) / n : (double)(n - 1) / n;
}

/* One call of op on `bytes` (see the header for what bytes means per op). */
static void enqueue(bench *b, int op, int dt, size_t bytes, bool inplace, bool raw) {
    size_t es = mg_dtype_size(DT_MG[dt]), total = bytes / es, per = total / (size_t)b->n;
    char *mine = b->a + (size_t)b->rank * per * es; /* this rank's part of a */
    mg_dtype t = DT_MG[dt];
    ncclDataType_t nt = DT_NCCL[dt];
    switch (op) {
    case OP_ALL_REDUCE: {
        void *recv = inplace ? b->a : b->b;
        if (raw)
            BNCCL(b, ncclAllReduce(b->a, recv, total, nt, ncclSum, b->raw, b->stream));
        else
            BOK(b, mg_comm_all_reduce(b->world, b->a, recv, total, t, MG_REDUCE_SUM, b->stream));
        break;
    }
    case OP_REDUCE_SCATTER: { /* send a (total), recv per */
        void *recv = inplace ? mine : b->b;
        if (raw)
            BNCCL(b, ncclReduceScatter(b->a, recv, per, nt, ncclSum, b->raw, b->stream));
        else
            BOK(b, mg_comm_reduce_scatter(b->world, b->a, recv, per, t, MG_REDUCE_SUM, b->stream));
        break;
    }
    case OP_ALL_GATHER: { /* recv a (total), send per */
        void *send = inplace ? mine : b->b;
        if (raw)
            BNCCL(b, ncclAllGather(send, b->a, per, nt, b->raw, b->stream));
        else
            BOK(b, mg_comm_all_gather(b->world, send, b->a, per, t, b->stream));
        break;
    }
    case OP_ALL_TO_ALL:
        if (raw &&
            b->win_a) { /* equal parts: NCCL's own all-to-all, which has a copy-engine form */
            BNCCL(b, ncclAlltoAll(b->a, b->b, per, nt, b->raw, b->stream));
        } else if (raw) {
            BNCCL(b, ncclGroupStart());
            for (int p = 0; p < b->n; p++) {
                BNCCL(b, ncclSend(b->a + (size_t)p * per * es, per, nt, p, b->raw, b->stream));
                BNCCL(b, ncclRecv(b->b + (size_t)p * per * es, per, nt, p, b->raw, b->stream));
            }
            BNCCL(b, ncclGroupEnd());
        } else {
            for (int p = 0; p < b->n; p++) b->counts[p] = per, b->displs[p] = (size_t)p * per;
            BOK(b, mg_comm_all_to_all(b->world, b->a, b->counts, b->displs, b->b, b->counts,
                                      b->displs, t, b->stream));
        }
        break;
    }
}

/* Microseconds per call, the maximum over ranks. */
static double measure(bench *b, const opts *o, int op, int dt, size_t bytes, bool inplace,
                      bool raw) {
    for (int i = 0; i < o->warmup; i++) enqueue(b, op, dt, bytes, inplace, raw);
    BOK(b, mg_comm_barrier(b->world, b->stream)); /* also waits for the warm-up */
    BCUDA(b, cudaEventRecord(b->t0, b->stream));
    for (int i = 0; i < o->iters; i++) enqueue(b, op, dt, bytes, inplace, raw);
    BCUDA(b, cudaEventRecord(b->t1, b->stream));
    BOK(b, mg_comm_sync(b->world, b->stream));
    float ms = 0;
    BCUDA(b, cudaEventElapsedTime(&ms, b->t0, b->t1));
    float us = 1000.0f * ms / (float)o->iters;
    BCUDA(b, cudaMemcpyAsync(b->dev_time, &us, sizeof us, cudaMemcpyHostToDevice, b->stream));
    BOK(b, mg_comm_all_reduce(b->world, b->dev_time, b->dev_time, 1, MG_F32, MG_REDUCE_MAX,
                              b->stream));
    BOK(b, mg_comm_sync(b->world, b->stream));
    BCUDA(b, cudaMemcpyAsync(&us, b->dev_time, sizeof us, cudaMemcpyDeviceToHost, b->stream));
    BCUDA(b, cudaStreamSynchronize(b->stream)); /* idle: synced just above */
    return us;
}

static void print_json(const bench *b, const opts *o, int op, int dt, size_t bytes,
                       const char *path, int inplace, double us) {
    double algbw = (double)bytes / (us * 1e-6) / 1e9;
    printf("{\"bench\":\"comm\",\"op\":\"%s\",\"dtype\":\"%s\",\"bytes\":%zu,\"ranks\":%d,"
           "\"path\":\"%s\",\"inplace\":%s,\"warmup\":%d,\"iters\":%d,\"time_us\":%.2f,"
           "\"algbw_GBps\":%.2f,\"busbw_GBps\":%.2f,\"device\":\"%s\"}\n",
           OP_NAMES[op], DT_NAMES[dt], bytes, b->n, path,
           inplace < 0 ? "null"
           : inplace   ? "true"
                       : "false",
           o->warmup, o->iters, us, algbw, algbw * bus_factor(op, b->n), b->device);
    fflush(stdout);
}

static double busbw(const bench *b, int op, size_t bytes, double us) {
    return us > 0 ? (double)bytes / (us * 1e-6) / 1e9 * bus_factor(op, b->n) : 0;
}

static void print_table(const bench *b, const row *rows, int n_rows) {
    printf("\n%d ranks, %s; time in us, busbw in GB/s (nccl-tests' definition); nccl = raw "
           "blocking NCCL baseline\n",
           b->n, b->device);
    printf("%-15s %-5s %12s | %10s %8s | %10s %8s | %10s %8s | %8s\n", "op", "dtype", "bytes",
           "oop time", "busbw", "ip time", "busbw", "nccl time", "busbw", "ours/nccl");
    for (int i = 0; i < n_rows; i++) {
        const row *r = &rows[i];
        char ip_t[16] = "n/a", ip_b[16] = "n/a", raw_t[16] = "-", raw_b[16] = "-", ratio[16] = "-";
        if (r->us_ip > 0) {
            snprintf(ip_t, sizeof ip_t, "%.1f", r->us_ip);
            snprintf(ip_b, sizeof ip_b, "%.1f", busbw(b, r->op, r->bytes, r->us_ip));
        }
        if (r->us_raw > 0) {
            snprintf(raw_t, sizeof raw_t, "%.1f", r->us_raw);
            snprintf(raw_b, sizeof raw_b, "%.1f", busbw(b, r->op, r->bytes, r->us_raw));
            snprintf(ratio, sizeof ratio, "%.3f", r->us_raw / r->us_oop); /* = busbw ratio */
        }
        printf("%-15s %-5s %12zu | %10.1f %8.1f | %10s %8s | %10s %8s | %8s\n", OP_NAMES[r->op],
               DT_NAMES[r->dt], r->bytes, r->us_oop, busbw(b, r->op, r->bytes, r->us_oop), ip_t,
               ip_b, raw_t, raw_b, ratio);
    }
    fflush(stdout);
}

/* ---- set-up ---- */

static size_t parse_bytes(const char *s) {
    char *end;
    double v = strtod(s, &end);
    switch (*end) {
    case 'K':
    case 'k':
        v *= 1024;
        break;
    case 'M':
    case 'm':
        v *= 1024 * 1024;
        break;
    case 'G':
    case 'g':
        v *= 1024.0 * 1024 * 1024;
        break;
    case '\0':
        break;
    default:
        return 0;
    }
    return v > 0 ? (size_t)v : 0;
}

static bool parse_list(const char *s, const char *const *names, int n, bool *on) {
    for (int i = 0; i < n; i++) on[i] = false;
    char buf[256];
    snprintf(buf, sizeof buf, "%s", s);
    for (char *tok = strtok(buf, ","); tok; tok = strtok(NULL, ",")) {
        int k = 0;
        while (k < n && strcmp(tok, names[k]) != 0) k++;
        if (k == n) return false;
        on[k] = true;
    }
    return true;
}

static void usage(void) {
    fprintf(stderr,
            "usage: bench_comm [--min-bytes 1M] [--max-bytes 1G] [--factor 2] [--warmup 5]\n"
            "                  [--iters 20] [--ops all_reduce,reduce_scatter,all_gather,"
            "all_to_all]\n"
            "                  [--dtypes bf16,f32] [--no-baseline] [--zero-cta] [--timeout "
            "SECONDS]\n");
    exit(2);
}

static opts parse(int argc, char **argv) {
    opts o = {1u << 20,     1u << 30, 2,     5,  20, {true, true, true, true},
              {true, true}, true,     false, 300};
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        if (!strcmp(a, "--no-baseline")) {
            o.baseline = false;
            continue;
        }
        if (!strcmp(a, "--zero-cta")) {
            o.zero_cta = true;
            continue;
        }
        const char *v = i + 1 < argc ? argv[++i] : NULL;
        if (!v) usage();
        if (!strcmp(a, "--min-bytes"))
            o.min_bytes = parse_bytes(v);
        else if (!strcmp(a, "--max-bytes"))
            o.max_bytes = parse_bytes(v);
        else if (!strcmp(a, "--factor"))
            o.factor = atoi(v);
        else if (!strcmp(a, "--warmup"))
            o.warmup = atoi(v);
        else if (!strcmp(a, "--iters"))
            o.iters = atoi(v);
        else if (!strcmp(a, "--timeout"))
            o.timeout_s = atof(v);
        else if (!strcmp(a, "--ops")) {
            if (!parse_list(v, OP_NAMES, N_OPS, o.op_on)) usage();
        } else if (!strcmp(a, "--dtypes")) {
            if (!parse_list(v, DT_NAMES, N_DTS, o.dt_on)) usage();
        } else
            usage();
    }
    if (!o.min_bytes || o.max_bytes < o.min_bytes || o.factor < 2 || o.warmup < 0 || o.iters < 1 ||
        (o.zero_cta && !o.baseline))
        usage();
    return o;
}

/* The baseline's blocking communicator (with --zero-cta NCCL's zero-CTA policy); its unique id
 * travels through our own broadcast. */
static void raw_init(bench *b, bool zero_cta) {
    ncclUniqueId id;
    memset(&id, 0, sizeof id);
    if (b->rank == 0) BNCCL(b, ncclGetUniqueId(&id));
    void *dev;
    BCUDA(b, cudaMalloc(&dev, sizeof id));
    BCUDA(b, cudaMemcpyAsync(dev, &id, sizeof id, cudaMemcpyHostToDevice, b->stream));
    BOK(b, mg_comm_broadcast(b->world, dev, sizeof id / 4, MG_I32, 0, b->stream));
    BOK(b, mg_comm_sync(b->world, b->stream));
    BCUDA(b, cudaMemcpyAsync(&id, dev, sizeof id, cudaMemcpyDeviceToHost, b->stream));
    BCUDA(b, cudaStreamSynchronize(b->stream));
    BCUDA(b, cudaFree(dev));
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 1;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
    if (zero_cta) cfg.CTAPolicy = NCCL_CTA_POLICY_ZERO;
#else
    if (zero_cta) {
        MG_FAIL(MG_ERR_UNSUPPORTED, "--zero-cta needs NCCL 2.28 or newer (built with %d)",
                NCCL_VERSION_CODE);
        die(b, "raw_init");
    }
#endif
    BNCCL(b, ncclCommInitRankConfig(&b->raw, b->n, id, b->rank, &cfg));
}

/* Two buffers of `bytes`: ncclMemAlloc'd and registered on the baseline's communicator as
 * symmetric windows with --zero-cta (the copy engines' path), else cudaMalloc'd. */
static bool buffers_alloc(bench *b, size_t bytes, bool zero_cta) {
    if (!zero_cta)
        return cudaMalloc((void **)&b->a, bytes) == cudaSuccess &&
               cudaMalloc((void **)&b->b, bytes) == cudaSuccess;
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
    BNCCL(b, ncclMemAlloc((void **)&b->a, bytes));
    BNCCL(b, ncclMemAlloc((void **)&b->b, bytes));
    BNCCL(b, ncclCommWindowRegister(b->raw, b->a, bytes, &b->win_a, NCCL_WIN_COLL_SYMMETRIC));
    BNCCL(b, ncclCommWindowRegister(b->raw, b->b, bytes, &b->win_b, NCCL_WIN_COLL_SYMMETRIC));
    return true;
#else
    return false;
#endif
}

static void buffers_free(bench *b) {
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 28, 0)
    if (b->win_a) {
        ncclCommWindowDeregister(b->raw, b->win_a);
        ncclCommWindowDeregister(b->raw, b->win_b);
        ncclMemFree(b->a);
        ncclMemFree(b->b);
        return;
    }
#endif
    cudaFree(b->a);
    cudaFree(b->b);
}

int main(int argc, char **argv) {
    opts o = parse(argc, argv);
    /* The GPU machines this runs on must never use NVLink multicast (NVLS): off unless the
     * environment says otherwise explicitly (bench/comm.sh sets it to 0 as well). */
    setenv("NCCL_NVLS_ENABLE", "0", 0);
    bench B = {0}, *b = &B;
    mg_launch_info li;
    if (mg_launch_detect(&li) != MG_OK ||
        mg_comm_world_init(&li, MG_COMM_NCCL, o.timeout_s, &b->w) != MG_OK) {
        fprintf(stderr, "bench_comm: %s\n", mg_error_message());
        return 1;
    }
    b->rank = mg_comm_world_rank(b->w);
    b->n = mg_comm_world_size(b->w);
    b->world = mg_comm_world_comm(b->w);
    int dev = 0, nccl_version = 0;
    struct cudaDeviceProp prop;
    BCUDA(b, cudaGetDevice(&dev));
    BCUDA(b, cudaGetDeviceProperties(&prop, dev));
    snprintf(b->device, sizeof b->device, "%s", prop.name);
    ncclGetVersion(&nccl_version);
    BCUDA(b, cudaStreamCreateWithFlags(&b->stream, cudaStreamNonBlocking));
    BCUDA(b, cudaEventCreate(&b->t0));
    BCUDA(b, cudaEventCreate(&b->t1));
    if (o.baseline) raw_init(b, o.zero_cta);
    if (!buffers_alloc(b, o.max_bytes, o.zero_cta)) {
        MG_FAIL(MG_ERR_IO, "cannot allocate 2 x %zu bytes on the GPU: lower --max-bytes",
                o.max_bytes);
        die(b, "cudaMalloc");
    }
    BCUDA(b, cudaMalloc((void **)&b->dev_time, sizeof(float)));
    BCUDA(b, cudaMemsetAsync(b->a, 0x3c, o.max_bytes, b->stream)); /* bf16/f32 ~0.0115 */
    BCUDA(b, cudaMemsetAsync(b->b, 0x3c, o.max_bytes, b->stream));
    b->counts = calloc((size_t)b->n, sizeof *b->counts);
    b->displs = calloc((size_t)b->n, sizeof *b->displs);
    if (!b->counts || !b->displs) {
        MG_FAIL(MG_ERR_IO, "out of memory");
        die(b, "calloc");
    }
    if (b->rank == 0) {
        const char *nvls = getenv("NCCL_NVLS_ENABLE");
        printf("bench_comm: %d ranks, %s, NCCL %d, sizes %zu..%zu bytes x%d, warmup %d, iters "
               "%d, NCCL_NVLS_ENABLE=%s%s\n",
               b->n, b->device, nccl_version, o.min_bytes, o.max_bytes, o.factor, o.warmup, o.iters,
               nvls, o.zero_cta ? "; baseline: zero-CTA policy on symmetric windows" : "");
        if (strcmp(nvls, "0") != 0)
            fprintf(stderr,
                    "bench_comm: warning: NCCL_NVLS_ENABLE=%s; these machines must not "
                    "use NVLink multicast\n",
                    nvls);
        fflush(stdout);
    }

    int cap = 0, n_rows = 0;
    row *rows = NULL;
    for (int op = 0; op < N_OPS; op++) {
        if (!o.op_on[op]) continue;
        for (int dt = 0; dt < N_DTS; dt++) {
            if (!o.dt_on[dt]) continue;
            size_t es = mg_dtype_size(DT_MG[dt]);
            for (size_t bytes = o.min_bytes; bytes <= o.max_bytes; bytes *= (size_t)o.factor) {
                /* whole elements, divisible into n parts */
                size_t total = bytes / es / (size_t)b->n * (size_t)b->n;
                if (!total) continue;
                size_t nbytes = total * es;
                row r = {op, dt, nbytes, -1, -1, -1};
                r.us_oop = measure(b, &o, op, dt, nbytes, false, false);
                if (b->rank == 0)
                    print_json(b, &o, op, dt, nbytes, "mg_comm", op == OP_ALL_TO_ALL ? -1 : 0,
                               r.us_oop);
                if (op != OP_ALL_TO_ALL) {
                    r.us_ip = measure(b, &o, op, dt, nbytes, true, false);
                    if (b->rank == 0) print_json(b, &o, op, dt, nbytes, "mg_comm", 1, r.us_ip);
                }
                if (o.baseline) {
                    r.us_raw = measure(b, &o, op, dt, nbytes, false, true);
                    if (b->rank == 0)
                        print_json(b, &o, op, dt, nbytes, "nccl", op == OP_ALL_TO_ALL ? -1 : 0,
                                   r.us_raw);
                    if (o.zero_cta && op == OP_ALL_GATHER) { /* in place on the windows too */
                        double us = measure(b, &o, op, dt, nbytes, true, true);
                        if (b->rank == 0) print_json(b, &o, op, dt, nbytes, "nccl", 1, us);
                    }
                }
                if (n_rows == cap) {
                    cap = cap ? 2 * cap : 64;
                    row *g = realloc(rows, (size_t)cap * sizeof *g);
                    if (!g) {
                        MG_FAIL(MG_ERR_IO, "out of memory");
                        die(b, "realloc");
                    }
                    rows = g;
                }
                rows[n_rows++] = r;
            }
        }
    }
    if (b->rank == 0) print_table(b, rows, n_rows);
    free(rows);
    buffers_free(b);
    if (b->raw) ncclCommDestroy(b->raw);
    cudaFree(b->dev_time);
    free(b->counts);
    free(b->displs);
    mg_comm_world_finalize(b->w);
    cudaStreamDestroy(b->stream);
    return 0;
}

#else
#include <stdio.h>
int main(void) {
    fprintf(stderr, "bench_comm: this build has no NCCL (needs CUDA's nvcc, nccl.h and libnccl)\n");
    return 2;
}
#endif
