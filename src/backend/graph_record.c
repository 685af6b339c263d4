/* Graph capture by recording calls (graph_record.h). Everything per entry is generated from
 * backend_ops.h's list (its params and args): the argument structure, the recorder that fills it
 * and the replayer that calls the entry with it. */
#include "backend/graph_record.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---- preprocessor helpers: a map over up to 20 list elements, and a test for a name ---- */
// clang-format off
#define REC_CAT_(a, b)     a##b
#define REC_CAT(a, b)      REC_CAT_(a, b)
#define REC_UNPAREN(...)   __VA_ARGS__
#define REC_DROP1_(x, ...) __VA_ARGS__
#define REC_DROP1(...)     REC_DROP1_(__VA_ARGS__)
#define REC_COUNT_(_1, _2, _3, _4, _5, _6, _7, _8, _9, _10, _11, _12, _13, _14, _15, _16, _17,   \
                   _18, _19, _20, n, ...) n
#define REC_COUNT(...)                                                                             \
    REC_COUNT_(__VA_ARGS__, 20, 19, 18, 17, 16, 15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2,  \
               1, 0)
// clang-format on
/* REC_MAP(f, c, x1, ..., xn) = f(c, x1) f(c, x2) ... f(c, xn) */
#define REC_MAP(f, c, ...)       REC_CAT(REC_MAP_, REC_COUNT(__VA_ARGS__))(f, c, __VA_ARGS__)
#define REC_MAP_1(f, c, x)       f(c, x)
#define REC_MAP_2(f, c, x, ...)  f(c, x) REC_MAP_1(f, c, __VA_ARGS__)
#define REC_MAP_3(f, c, x, ...)  f(c, x) REC_MAP_2(f, c, __VA_ARGS__)
#define REC_MAP_4(f, c, x, ...)  f(c, x) REC_MAP_3(f, c, __VA_ARGS__)
#define REC_MAP_5(f, c, x, ...)  f(c, x) REC_MAP_4(f, c, __VA_ARGS__)
#define REC_MAP_6(f, c, x, ...)  f(c, x) REC_MAP_5(f, c, __VA_ARGS__)
#define REC_MAP_7(f, c, x, ...)  f(c, x) REC_MAP_6(f, c, __VA_ARGS__)
#define REC_MAP_8(f, c, x, ...)  f(c, x) REC_MAP_7(f, c, __VA_ARGS__)
#define REC_MAP_9(f, c, x, ...)  f(c, x) REC_MAP_8(f, c, __VA_ARGS__)
#define REC_MAP_10(f, c, x, ...) f(c, x) REC_MAP_9(f, c, __VA_ARGS__)
#define REC_MAP_11(f, c, x, ...) f(c, x) REC_MAP_10(f, c, __VA_ARGS__)
#define REC_MAP_12(f, c, x, ...) f(c, x) REC_MAP_11(f, c, __VA_ARGS__)
#define REC_MAP_13(f, c, x, ...) f(c, x) REC_MAP_12(f, c, __VA_ARGS__)
#define REC_MAP_14(f, c, x, ...) f(c, x) REC_MAP_13(f, c, __VA_ARGS__)
#define REC_MAP_15(f, c, x, ...) f(c, x) REC_MAP_14(f, c, __VA_ARGS__)
#define REC_MAP_16(f, c, x, ...) f(c, x) REC_MAP_15(f, c, __VA_ARGS__)
#define REC_MAP_17(f, c, x, ...) f(c, x) REC_MAP_16(f, c, __VA_ARGS__)
#define REC_MAP_18(f, c, x, ...) f(c, x) REC_MAP_17(f, c, __VA_ARGS__)
#define REC_MAP_19(f, c, x, ...) f(c, x) REC_MAP_18(f, c, __VA_ARGS__)
#define REC_MAP_20(f, c, x, ...) f(c, x) REC_MAP_19(f, c, __VA_ARGS__)
/* REC_IF(REC_IS_<list>(name))(then, else): a name on one of the lists below picks `then` */
#define REC_SECOND_(a, b, ...) b
#define REC_SECOND(...)        REC_SECOND_(__VA_ARGS__)
#define REC_IF(c)              REC_CAT(REC_IF_, c)
#define REC_IF_1(t, f)         t
#define REC_IF_0(t, f)         f

/* Entries left in place during a capture: they return no status (the frees, the queries) or
 * they end the capture (graph_end) or run outside it (graph_free). */
#define REC_PASS_free                  ~, 1
#define REC_PASS_destroy               ~, 1
#define REC_PASS_free_pinned           ~, 1
#define REC_PASS_memory_info           ~, 1
#define REC_PASS_stream_handle         ~, 1
#define REC_PASS_attention_saved_bytes ~, 1
#define REC_PASS_graph_end             ~, 1
#define REC_PASS_graph_free            ~, 1
#define REC_IS_PASS(name)              REC_SECOND(REC_PASS_##name, 0, ~)

/* Entries refused inside a capture (backend_ops.h): a host copy, read or wait, an allocation,
 * a measurement, a nested capture or launch. */
static bool rec_refused(int entry) {
    switch (entry) {
    case MG_BACKEND_ENTRY_alloc:
    case MG_BACKEND_ENTRY_alloc_pinned:
    case MG_BACKEND_ENTRY_copy_h2d:
    case MG_BACKEND_ENTRY_copy_d2h:
    case MG_BACKEND_ENTRY_upload_f32:
    case MG_BACKEND_ENTRY_download_f32:
    case MG_BACKEND_ENTRY_synchronize:
    case MG_BACKEND_ENTRY_matmul_peak_tflops:
    case MG_BACKEND_ENTRY_graph_begin:
    case MG_BACKEND_ENTRY_graph_launch:
        return true;
    default:
        return false;
    }
}

/* ---- the recording ---- */
#define REC_ALIGN 16

/* A recorded call: its entry, then its argument structure at the next REC_ALIGN boundary. */
typedef struct {
    int entry;
    size_t size; /* bytes of the argument structure, rounded up to REC_ALIGN */
} rec_head;
#define REC_HEAD ((sizeof(rec_head) + REC_ALIGN - 1) / REC_ALIGN * REC_ALIGN)

struct mg_graph {
    unsigned char *buf; /* the calls, one after the other */
    size_t len, cap, calls;
    void **kept; /* the copied structures the calls' arguments point to */
    size_t n_kept, cap_kept, kept_bytes;
};

struct mg_graph_rec {
    mg_backend saved; /* the table before the capture */
    mg_graph *g;
    bool host_calls; /* mg_graph_rec_accept_host_calls: collectives come as host calls */
    mg_status err;   /* the first failure in the capture, MG_OK while none */
    char msg[256];
};

static mg_status rec_fail(mg_backend *be, mg_status st) {
    struct mg_graph_rec *r = be->recording;
    if (r->err == MG_OK) {
        r->err = st;
        snprintf(r->msg, sizeof r->msg, "%s", mg_error_message());
    }
    return st;
}

mg_status mg_graph_rec_refuse(mg_backend *be, const char *what) {
    return rec_fail(be, MG_FAIL(MG_ERR_UNSUPPORTED,
                                "%s inside a graph capture: a graph can only hold work that needs "
                                "no host wait or allocation (backend_ops.h)",
                                what));
}

/* Replaces *slot (a pointer to `size` bytes of host structure, or NULL) by a copy the graph
 * keeps. */
static void rec_keep(mg_backend *be, void *slot, size_t size) {
    const void **p = (const void **)slot;
    if (size == 0 || !*p) return;
    mg_graph *g = be->recording->g;
    if (g->n_kept == g->cap_kept) {
        size_t cap = g->cap_kept ? 2 * g->cap_kept : 16;
        void **k = realloc(g->kept, cap * sizeof *k);
        if (!k) {
            rec_fail(be, MG_FAIL(MG_ERR_NOMEM, "graph capture: out of host memory"));
            return;
        }
        g->kept = k, g->cap_kept = cap;
    }
    void *copy = malloc(size);
    if (!copy) {
        rec_fail(be, MG_FAIL(MG_ERR_NOMEM, "graph capture: out of host memory"));
        return;
    }
    memcpy(copy, *p, size);
    g->kept[g->n_kept++] = copy;
    g->kept_bytes += size;
    *p = copy;
}

/* Appends a call of `entry` with its arguments: `pre` (pre_size bytes, may be 0) then args. */
static mg_status rec_take(mg_backend *be, int entry, const void *pre, size_t pre_size,
                          const void *args, size_t args_size) {
    const size_t size = pre_size + args_size;
    struct mg_graph_rec *r = be->recording;
    if (r->err != MG_OK) return r->err; /* spoilt: nothing more is recorded */
    mg_graph *g = r->g;
    size_t padded = (size + REC_ALIGN - 1) / REC_ALIGN * REC_ALIGN;
    size_t need = g->len + REC_HEAD + padded;
    if (need > g->cap) {
        size_t cap = g->cap ? g->cap : 4096;
        while (cap < need) cap *= 2;
        unsigned char *b = realloc(g->buf, cap);
        if (!b) return rec_fail(be, MG_FAIL(MG_ERR_NOMEM, "graph capture: out of host memory"));
        g->buf = b, g->cap = cap;
    }
    rec_head h = {entry, padded};
    memcpy(g->buf + g->len, &h, sizeof h);
    if (pre_size) memcpy(g->buf + g->len + REC_HEAD, pre, pre_size);
    memcpy(g->buf + g->len + REC_HEAD + pre_size, args, args_size);
    g->len = need;
    g->calls++;
    return MG_OK;
}

/* A host call's record: the function, then its arguments (entry REC_HOST_CALL). */
#define REC_HOST_CALL MG_BACKEND_N_ENTRIES
typedef mg_status (*rec_host_fn)(const void *args);
typedef struct {
    rec_host_fn fn;
} rec_host_head;
#define REC_HOST_HEAD ((sizeof(rec_host_head) + REC_ALIGN - 1) / REC_ALIGN * REC_ALIGN)

void mg_graph_rec_accept_host_calls(mg_backend *be) {
    if (be->recording) be->recording->host_calls = true;
}

bool mg_graph_rec_takes_host_calls(const mg_backend *be) {
    return be->recording && be->recording->host_calls;
}

mg_status mg_graph_rec_host_call(mg_backend *be, mg_status (*fn)(const void *args),
                                 const void *args, size_t size) {
    if (!mg_graph_rec_takes_host_calls(be))
        return MG_FAIL(MG_ERR_INTERNAL, "a host call recorded outside an accepting capture");
    unsigned char head[REC_HOST_HEAD] = {0};
    const rec_host_head h = {fn};
    memcpy(head, &h, sizeof h);
    return rec_take(be, REC_HOST_CALL, head, sizeof head, args, size);
}

/* The size to copy behind an argument: the structures a pointer argument designates (host memory,
 * usually the caller's stack), 0 for every other argument. */
#define REC_SIZE(x)                                                                                \
    _Generic((x),                                                                                  \
        const mg_dropout *: sizeof(mg_dropout),                                                    \
        const mg_moe_routing *: sizeof(mg_moe_routing),                                            \
        const mg_step_rules *: sizeof(mg_step_rules),                                              \
        const mg_echo_params *: sizeof(mg_echo_params),                                            \
        const mg_fp8_tensor *: sizeof(mg_fp8_tensor),                                              \
        default: (size_t)0)

/* ---- per entry: the argument structure, the recorder, the replayer ---- */
#define REC_FIELD(c, decl)     decl;
#define REC_KEEP(a, x)         rec_keep(be, (void *)&(a).x, REC_SIZE((a).x));
#define REC_ARG(a, x)          , (a)->x
#define REC_CALL_ARGS(a, args) REC_DROP1(~REC_MAP(REC_ARG, a, REC_UNPAREN args))

#define REC_WRAP(name, params, args)                                                               \
    typedef struct {                                                                               \
        REC_MAP(REC_FIELD, ~, REC_UNPAREN params)                                                  \
    } rec_args_##name;                                                                             \
    static mg_status rec_##name params {                                                           \
        if (rec_refused(MG_BACKEND_ENTRY_##name)) return mg_graph_rec_refuse(be, #name);           \
        rec_args_##name rec_v = {REC_UNPAREN args};                                                \
        REC_MAP(REC_KEEP, rec_v, REC_UNPAREN args)                                                 \
        return rec_take(be, MG_BACKEND_ENTRY_##name, NULL, 0, &rec_v, sizeof rec_v);               \
    }                                                                                              \
    static mg_status rep_##name(const void *rec_in) {                                              \
        const rec_args_##name *rec_p = rec_in;                                                     \
        return rec_p->be->name(REC_CALL_ARGS(rec_p, args));                                        \
    }
#define REC_NONE(name, params, args)
#define MG_OP(name, need, kind, ret, params, args)                                                 \
    REC_IF(REC_IS_PASS(name))(REC_NONE, REC_WRAP)(name, params, args)
#include "backend/backend_ops.h"

typedef mg_status (*rec_replay_fn)(const void *args);
static const rec_replay_fn k_replay[MG_BACKEND_N_ENTRIES] = {
#define REC_REP(name) [MG_BACKEND_ENTRY_##name] = rep_##name,
#define REC_NOREP(name)
#define MG_OP(name, need, kind, ret, params, args)                                                 \
    REC_IF(REC_IS_PASS(name))(REC_NOREP, REC_REP)(name)
#include "backend/backend_ops.h"
};

mg_status mg_graph_rec_begin(mg_backend *be) {
    if (be->recording) return MG_FAIL(MG_ERR_UNSUPPORTED, "graph_begin inside a graph capture");
    struct mg_graph_rec *r = calloc(1, sizeof *r);
    mg_graph *g = calloc(1, sizeof *g);
    if (!r || !g) {
        free(r), free(g);
        return MG_FAIL(MG_ERR_NOMEM, "graph capture: out of host memory");
    }
    r->saved = *be;
    r->g = g;
    r->err = MG_OK;
    be->recording = r;
    /* the present entries that do work become recorders; absent ones stay absent */
#define REC_SWAP(name)                                                                             \
    if (be->name) be->name = rec_##name;
#define REC_NOSWAP(name)
#define MG_OP(name, need, kind, ret, params, args)                                                 \
    REC_IF(REC_IS_PASS(name))(REC_NOSWAP, REC_SWAP)(name)
#include "backend/backend_ops.h"
    return MG_OK;
}

mg_status mg_graph_rec_end(mg_backend *be, mg_graph **out, mg_graph_info *info) {
    *out = NULL;
    if (info) *info = (mg_graph_info){0, 0};
    struct mg_graph_rec *r = be->recording;
    if (!r) return MG_FAIL(MG_ERR_UNSUPPORTED, "graph_end without graph_begin");
    *be = r->saved; /* the table back (recording NULL, as it was) */
    mg_status st = r->err;
    mg_graph *g = r->g;
    if (st != MG_OK) {
        mg_graph_rec_free(g);
        st = MG_FAIL(st, "graph capture abandoned: %s", r->msg);
        free(r);
        return st;
    }
    free(r);
    if (info) *info = (mg_graph_info){g->calls, g->len + g->kept_bytes};
    *out = g;
    return MG_OK;
}

mg_status mg_graph_rec_launch(mg_backend *be, mg_graph *g) {
    if (be->recording) return mg_graph_rec_refuse(be, "graph_launch");
    for (size_t off = 0; off < g->len;) {
        rec_head h;
        memcpy(&h, g->buf + off, sizeof h);
        const unsigned char *args = g->buf + off + REC_HEAD;
        if (h.entry == REC_HOST_CALL) {
            rec_host_head hh;
            memcpy(&hh, args, sizeof hh);
            MG_CHECK(hh.fn(args + REC_HOST_HEAD));
        } else {
            MG_CHECK(k_replay[h.entry](args));
        }
        off += REC_HEAD + h.size;
    }
    return MG_OK;
}

void mg_graph_rec_free(mg_graph *g) {
    if (!g) return;
    for (size_t i = 0; i < g->n_kept; i++) free(g->kept[i]);
    free(g->kept);
    free(g->buf);
    free(g);
}
