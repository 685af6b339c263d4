/* A per-kernel GPU time profile of any CUDA process, for machines without Nsight Systems.
 *
 * A CUDA injection library (CUPTI's activity API): the CUDA driver loads it into the process
 * named by CUDA_INJECTION64_PATH and calls InitializeInjection before the first context exists;
 * from then on CUPTI records every kernel, memset and memcpy with its device start and end times.
 * At exit the records of a window are summed by name and printed, longest first:
 *
 *     CUDA_INJECTION64_PATH=$PWD/build/kernel_profile.so KPROF_LAST_MS=600 KPROF_STEPS=10 \
 *         build/megatron bench ...                       (or python3 bench/baselines/...)
 *
 * Environment:
 *   KPROF_MARK     a substring of the name of a kernel launched once per step (e.g.
 *                  clip_coef_kernel for megatron): the window is exactly the last KPROF_STEPS
 *                  steps, from the start of that kernel's (KPROF_STEPS + 1)-th last launch to the
 *                  start of its last one, so the warm-up (compilation, autotuning,
 *                  initialisation) is left out.
 *   KPROF_LAST_MS  without KPROF_MARK: the records starting in the last this many ms of device
 *                  activity (default: all).
 *   KPROF_STEPS    the steps the window holds: times are shown divided by it (default 1).
 *   KPROF_OUT      the file the table goes to (default stderr); KPROF_TOP rows (default 40).
 *   KPROF_TRACE    a path prefix: the window's last step (between the last two KPROF_MARK
 *                  launches, else the last span / KPROF_STEPS), record by record, goes to
 *                  PREFIX.PID.tsv (start and end in us from the step's start, the stream's
 *                  id, the name), to read a timeline where the tables do not say enough.
 * The header line gives the window's span, the time some kernel or copy was running (the union
 * of the intervals: span - busy is the device waiting for the host, or for another device) and
 * the summed kernel time. Two more tables charge that idle time, gap by gap, to the record that
 * ends each gap and to the one that ran just before it (KPROF_TOP_IDLE rows, default 12).
 * Names are as the driver reports them (C++ names mangled: pipe through c++filt).
 *
 * Build (not part of `make`: it needs CUPTI, which the CUDA toolkit's extras or PyPI's
 * nvidia-cuda-cupti provide): make kernel-profile CUPTI_DIR=DIR (DIR/include/cupti.h and
 * DIR/lib64 or DIR/lib holding libcupti). */
#include <cupti.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#define KP_BUF_BYTES (8u << 20)

typedef struct {
    uint64_t start, end;
    int name;        /* index into g_names */
    uint32_t stream; /* the stream's CUPTI id */
} kp_rec;

typedef struct {
    char *name;
    double total_ns;
    long calls;
    double idle_before_ns, idle_after_ns; /* the device idle just before it starts / after it */
    long gaps_before, gaps_after;
} kp_name;

static kp_rec *g_recs;
static size_t g_n, g_cap;
static kp_name *g_names;
static int g_n_names, g_cap_names;

static int name_id(const char *name) {
    for (int i = g_n_names - 1; i >= 0; i--) /* recent names first: kernels repeat in order */
        if (strcmp(g_names[i].name, name) == 0) return i;
    if (g_n_names == g_cap_names) {
        g_cap_names = g_cap_names ? 2 * g_cap_names : 256;
        g_names = realloc(g_names, (size_t)g_cap_names * sizeof *g_names);
        if (!g_names) abort();
    }
    g_names[g_n_names] = (kp_name){strdup(name), 0.0, 0, 0.0, 0.0, 0, 0};
    return g_n_names++;
}

static void add(uint64_t start, uint64_t end, const char *name, uint32_t stream) {
    if (g_n == g_cap) {
        g_cap = g_cap ? 2 * g_cap : 65536;
        g_recs = realloc(g_recs, g_cap * sizeof *g_recs);
        if (!g_recs) abort();
    }
    g_recs[g_n++] = (kp_rec){start, end, name_id(name ? name : "?"), stream};
}

static void CUPTIAPI buffer_requested(uint8_t **buf, size_t *size, size_t *max_records) {
    *buf = aligned_alloc(8, KP_BUF_BYTES);
    *size = *buf ? KP_BUF_BYTES : 0;
    *max_records = 0;
}

static void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream, uint8_t *buf, size_t size,
                                      size_t valid) {
    (void)ctx, (void)stream, (void)size;
    CUpti_Activity *r = NULL;
    while (cuptiActivityGetNextRecord(buf, valid, &r) == CUPTI_SUCCESS) {
        switch (r->kind) {
        case CUPTI_ACTIVITY_KIND_KERNEL:
        case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
            /* start, end and name sit at the same place in every kernel record version */
            const CUpti_ActivityKernel9 *k = (const CUpti_ActivityKernel9 *)r;
            add(k->start, k->end, k->name, k->streamId);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMSET: {
            const CUpti_ActivityMemset4 *m = (const CUpti_ActivityMemset4 *)r;
            add(m->start, m->end, "[memset]", m->streamId);
            break;
        }
        case CUPTI_ACTIVITY_KIND_MEMCPY: {
            const CUpti_ActivityMemcpy6 *m = (const CUpti_ActivityMemcpy6 *)r;
            static const char *kinds[] = {"[memcpy ?]",    "[memcpy HtoD]", "[memcpy DtoH]",
                                          "[memcpy HtoA]", "[memcpy AtoH]", "[memcpy AtoA]",
                                          "[memcpy AtoD]", "[memcpy DtoA]", "[memcpy DtoD]",
                                          "[memcpy HtoH]", "[memcpy PtoP]"};
            add(m->start, m->end, m->copyKind < 11 ? kinds[m->copyKind] : kinds[0], m->streamId);
            break;
        }
        default:
            break;
        }
    }
    free(buf);
}

static int by_start(const void *a, const void *b) {
    const kp_rec *x = a, *y = b;
    return x->start < y->start ? -1 : x->start > y->start;
}

/* qsort's order, largest first */
static int desc(double x, double y) {
    return x < y ? 1 : x > y ? -1 : 0;
}

static int by_total(const void *a, const void *b) {
    return desc(((const kp_name *)a)->total_ns, ((const kp_name *)b)->total_ns);
}

static double env_num(const char *name, double dflt) {
    const char *s = getenv(name);
    return s && *s ? atof(s) : dflt;
}

static int by_idle_before(const void *a, const void *b) {
    return desc(((const kp_name *)a)->idle_before_ns, ((const kp_name *)b)->idle_before_ns);
}

static int by_idle_after(const void *a, const void *b) {
    return desc(((const kp_name *)a)->idle_after_ns, ((const kp_name *)b)->idle_after_ns);
}

/* The device's idle time (idle_ns over the window) by the record that ends each gap (after = 0)
 * or whose end begins it (after = 1), the KPROF_TOP_IDLE (default 12) largest. Sorts g_names. */
static void idle_table(FILE *f, double steps, double idle_ns, int after) {
    qsort(g_names, (size_t)g_n_names, sizeof *g_names, after ? by_idle_after : by_idle_before);
    int top = (int)env_num("KPROF_TOP_IDLE", 12.0);
    fprintf(f, "kernel_profile: device idle %.3f ms per step, by what %s each gap:\n",
            idle_ns * 1e-6 / steps, after ? "ran just before" : "ends");
    fprintf(f, "%10s %8s %9s %10s  %s\n", "ms/step", "share", "gaps/st", "us/gap", "name");
    for (int i = 0; i < g_n_names && i < top; i++) {
        const kp_name *nm = &g_names[i];
        const double ns = after ? nm->idle_after_ns : nm->idle_before_ns;
        const long gaps = after ? nm->gaps_after : nm->gaps_before;
        if (gaps == 0) break;
        fprintf(f, "%10.3f %7.1f%% %9.1f %10.2f  %s\n", ns * 1e-6 / steps,
                idle_ns > 0 ? 100.0 * ns / idle_ns : 0.0, (double)gaps / steps,
                ns * 1e-3 / (double)gaps, nm->name);
    }
}

/* KPROF_TRACE: the records starting in [from, end), sorted by start already. */
static void write_trace(const char *prefix, uint64_t from, uint64_t end) {
    char path[4096];
    snprintf(path, sizeof path, "%s.%ld.tsv", prefix, (long)getpid());
    FILE *t = fopen(path, "w");
    if (!t) {
        fprintf(stderr, "kernel_profile: cannot write the trace %s\n", path);
        return;
    }
    fprintf(t, "start_us\tend_us\tstream\tname\n");
    for (size_t i = 0; i < g_n; i++) {
        const kp_rec *r = &g_recs[i];
        if (r->start < from || r->start >= end) continue;
        fprintf(t, "%.2f\t%.2f\t%u\t%s\n", (double)(r->start - from) * 1e-3,
                (double)(r->end - from) * 1e-3, r->stream, g_names[r->name].name);
    }
    fclose(t);
}

static void report(void) {
    cuptiActivityFlushAll(1);
    const char *path = getenv("KPROF_OUT");
    FILE *f = path && *path ? fopen(path, "w") : stderr;
    if (!f) f = stderr;
    if (g_n == 0) {
        fprintf(f, "kernel_profile: no device activity recorded\n");
        return;
    }
    qsort(g_recs, g_n, sizeof *g_recs, by_start);
    uint64_t last = 0;
    for (size_t i = 0; i < g_n; i++)
        if (g_recs[i].end > last) last = g_recs[i].end;
    double last_ms = env_num("KPROF_LAST_MS", 0.0), steps = env_num("KPROF_STEPS", 1.0);
    uint64_t from = 0, to = UINT64_MAX, step_from = 0; /* step_from: the last step's start */
    const char *mark = getenv("KPROF_MARK");
    if (mark && *mark) {
        size_t n_mark = 0, want = (size_t)(steps < 1 ? 1 : steps) + 1;
        for (size_t i = g_n; i-- > 0;)
            if (strstr(g_names[g_recs[i].name].name, mark) && ++n_mark <= want) {
                if (n_mark == 1) to = g_recs[i].start;
                if (n_mark == 2) step_from = g_recs[i].start;
                from = g_recs[i].start;
            }
        if (n_mark < want) {
            fprintf(f, "kernel_profile: KPROF_MARK %s launched %zu times, %zu needed\n", mark,
                    n_mark, want);
            return;
        }
        last = to;
    } else if (last_ms > 0 && (double)last > last_ms * 1e6) {
        from = last - (uint64_t)(last_ms * 1e6);
    }
    /* the window's records: busy time as the union of their intervals, totals by name; each
     * gap of the union (the device running nothing) charged to the record that ends it and to
     * the one whose end began it */
    uint64_t first = 0, cover_end = 0, busy = 0;
    double kernel_ns = 0.0;
    size_t n_in = 0;
    int cover_name = -1;
    for (size_t i = 0; i < g_n; i++) {
        const kp_rec *r = &g_recs[i];
        if (r->start < from || r->start >= to) continue;
        if (n_in++ == 0) first = r->start, cover_end = r->start;
        if (r->start > cover_end && cover_name >= 0) {
            const double gap = (double)(r->start - cover_end);
            g_names[r->name].idle_before_ns += gap;
            g_names[r->name].gaps_before++;
            g_names[cover_name].idle_after_ns += gap;
            g_names[cover_name].gaps_after++;
        }
        if (r->end > cover_end) {
            busy += r->end - (r->start > cover_end ? r->start : cover_end);
            cover_end = r->end;
            cover_name = r->name;
        }
        kp_name *nm = &g_names[r->name];
        nm->total_ns += (double)(r->end - r->start);
        nm->calls++;
        if (nm->name[0] != '[') kernel_ns += (double)(r->end - r->start);
    }
    if (steps < 1) steps = 1;
    double span = (double)(last - first);
    /* before g_names is sorted: the records name it by index */
    const char *trace = getenv("KPROF_TRACE");
    if (trace && *trace)
        write_trace(trace, step_from ? step_from : last - (uint64_t)(span / steps), last);
    fprintf(f,
            "kernel_profile: %zu records in a window of %.3f ms (%.3f ms per step over %g): "
            "device busy %.3f ms per step (%.1f%%), kernels %.3f ms per step\n",
            n_in, span * 1e-6, span * 1e-6 / steps, steps, (double)busy * 1e-6 / steps,
            span > 0 ? 100.0 * (double)busy / span : 0.0, kernel_ns * 1e-6 / steps);
    qsort(g_names, (size_t)g_n_names, sizeof *g_names, by_total);
    int top = (int)env_num("KPROF_TOP", 40.0);
    fprintf(f, "%10s %8s %9s %10s  %s\n", "ms/step", "share", "calls/st", "us/call", "name");
    for (int i = 0; i < g_n_names && i < top; i++) {
        const kp_name *nm = &g_names[i];
        if (nm->calls == 0) break;
        fprintf(f, "%10.3f %7.1f%% %9.1f %10.2f  %s\n", nm->total_ns * 1e-6 / steps,
                kernel_ns > 0 ? 100.0 * nm->total_ns / kernel_ns : 0.0, (double)nm->calls / steps,
                nm->total_ns * 1e-3 / (double)nm->calls, nm->name);
    }
    idle_table(f, steps, (double)(span - (double)busy), 0);
    idle_table(f, steps, (double)(span - (double)busy), 1);
    if (f != stderr) fclose(f);
}

/* Called by the CUDA driver (CUDA_INJECTION64_PATH) before the first context is made. */
int InitializeInjection(void) {
    if (cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed) != CUPTI_SUCCESS)
        return 0;
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET);
    cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY);
    atexit(report);
    return 1;
}
