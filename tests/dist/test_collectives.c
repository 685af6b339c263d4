/* Collectives on the world group: every op x dtype x reduce op on exactly predictable values,
 * sizes 1, odd and large, in-place forms, uneven all-to-all, broadcast from non-zero roots. */
#include "dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const mg_dtype DTYPES[] = {MG_F32, MG_BF16, MG_F16, MG_I32, MG_I64, MG_U8};
enum { N_DTYPES = sizeof DTYPES / sizeof DTYPES[0] };
static const mg_reduce_op OPS[] = {MG_REDUCE_SUM, MG_REDUCE_AVG, MG_REDUCE_MAX};

static bool is_int(mg_dtype dt) {
    return dt == MG_I32 || dt == MG_I64 || dt == MG_U8;
}

/* op over ranks 0..size-1 of dist_value(dt, r, i, seed), as the library computes it: sums of
 * these small integers are exact in every dtype; avg divides the exact sum once in fp32. */
static double reduce_ref(dist_ctx *t, mg_dtype dt, mg_reduce_op op, size_t i, int seed) {
    double acc = op == MG_REDUCE_MAX ? -1e300 : 0;
    for (int r = 0; r < t->size; r++) {
        double v = dist_value(dt, r, i, seed);
        acc = op == MG_REDUCE_MAX ? (v > acc ? v : acc) : acc + v;
    }
    if (op == MG_REDUCE_AVG) acc = (double)((float)acc / (float)t->size);
    return dist_round(dt, acc);
}

static void check_all_reduce(dist_ctx *t, mg_dtype dt, mg_reduce_op op, size_t n, bool in_place,
                             int seed) {
    mg_comm *world = mg_comm_world_comm(t->w);
    void *h = host_alloc(n, dt), *want = host_alloc(n, dt);
    for (size_t i = 0; i < n; i++) {
        host_set(h, dt, i, dist_value(dt, t->rank, i, seed));
        host_set(want, dt, i, reduce_ref(t, dt, op, i, seed));
    }
    void *send = dist_alloc(t, n, dt), *recv = in_place ? send : dist_alloc(t, n, dt);
    dist_put(t, send, h, n, dt);
    DOK(mg_comm_all_reduce(world, send, recv, n, dt, op, dist_stream(t)));
    DOK(mg_comm_sync(world, dist_stream(t)));
    dist_get(t, h, recv, n, dt);
    char what[96];
    snprintf(what, sizeof what, "all_reduce %s%s", mg_reduce_op_name(op),
             in_place ? " in place" : "");
    dist_compare(t, what, h, want, n, dt);
    if (!in_place) dist_free(t, recv);
    dist_free(t, send);
    free(h);
    free(want);
}

void test_all_reduce(dist_ctx *t) {
    static const size_t sizes[] = {1, 7, 1001, 65537};
    int seed = 0;
    for (int d = 0; d < N_DTYPES; d++)
        for (int o = 0; o < 3; o++) {
            if (is_int(DTYPES[d]) && OPS[o] == MG_REDUCE_AVG) continue; /* a usage error */
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
                check_all_reduce(t, DTYPES[d], OPS[o], sizes[s], false, seed++);
            check_all_reduce(t, DTYPES[d], OPS[o], 1001, true, seed++);
        }
}

/* The one large case: 2^20 fp32 elements, summed in place. */
void test_all_reduce_large(dist_ctx *t) {
    check_all_reduce(t, MG_F32, MG_REDUCE_SUM, 1u << 20, true, 3);
}

/* Several buffers in one grouped call (sizes 1, 0, odd, large; sum, max; fp32 and bf16): each
 * as its own all_reduce would leave it. */
void test_all_reduce_many(dist_ctx *t) {
    enum { K = 4 };
    static const size_t sizes[K] = {1, 0, 1001, 65537};
    static const mg_dtype dts[] = {MG_F32, MG_BF16};
    mg_comm *world = mg_comm_world_comm(t->w);
    int seed = 40;
    for (int d = 0; d < 2; d++)
        for (int o = 0; o < 3; o += 2) {
            const mg_dtype dt = dts[d];
            void *bufs[K], *want[K];
            for (int k = 0; k < K; k++) {
                void *h = host_alloc(sizes[k], dt);
                want[k] = host_alloc(sizes[k], dt);
                for (size_t i = 0; i < sizes[k]; i++) {
                    host_set(h, dt, i, dist_value(dt, t->rank, i, seed + k));
                    host_set(want[k], dt, i, reduce_ref(t, dt, OPS[o], i, seed + k));
                }
                bufs[k] = dist_alloc(t, sizes[k] ? sizes[k] : 1, dt);
                dist_put(t, bufs[k], h, sizes[k], dt);
                free(h);
            }
            DOK(mg_comm_all_reduce_many(world, bufs, sizes, K, dt, OPS[o], dist_stream(t)));
            DOK(mg_comm_sync(world, dist_stream(t)));
            for (int k = 0; k < K; k++) {
                void *h = host_alloc(sizes[k], dt);
                dist_get(t, h, bufs[k], sizes[k], dt);
                char what[96];
                snprintf(what, sizeof what, "all_reduce_many %s, buffer %d of %zu",
                         mg_reduce_op_name(OPS[o]), k, sizes[k]);
                dist_compare(t, what, h, want[k], sizes[k], dt);
                free(h);
                free(want[k]);
                dist_free(t, bufs[k]);
            }
            seed += K;
        }
}

static void check_reduce_scatter(dist_ctx *t, mg_dtype dt, mg_reduce_op op, size_t n, bool in_place,
                                 int seed) {
    mg_comm *world = mg_comm_world_comm(t->w);
    size_t total = n * (size_t)t->size;
    void *h = host_alloc(total, dt), *want = host_alloc(n, dt), *got = host_alloc(n, dt);
    for (size_t i = 0; i < total; i++) host_set(h, dt, i, dist_value(dt, t->rank, i, seed));
    for (size_t j = 0; j < n; j++)
        host_set(want, dt, j, reduce_ref(t, dt, op, (size_t)t->rank * n + j, seed));
    void *send = dist_alloc(t, total, dt);
    void *recv =
        in_place ? (char *)send + (size_t)t->rank * n * mg_dtype_size(dt) : dist_alloc(t, n, dt);
    dist_put(t, send, h, total, dt);
    DOK(mg_comm_reduce_scatter(world, send, recv, n, dt, op, dist_stream(t)));
    DOK(mg_comm_sync(world, dist_stream(t)));
    dist_get(t, got, recv, n, dt);
    char what[96];
    snprintf(what, sizeof what, "reduce_scatter %s%s", mg_reduce_op_name(op),
             in_place ? " in place" : "");
    dist_compare(t, what, got, want, n, dt);
    if (!in_place) dist_free(t, recv);
    dist_free(t, send);
    free(h);
    free(want);
    free(got);
}

void test_reduce_scatter(dist_ctx *t) {
    static const size_t sizes[] = {1, 7, 1001};
    int seed = 100;
    for (int d = 0; d < N_DTYPES; d++)
        for (int o = 0; o < 3; o++) {
            if (is_int(DTYPES[d]) && OPS[o] == MG_REDUCE_AVG) continue;
            for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
                check_reduce_scatter(t, DTYPES[d], OPS[o], sizes[s], false, seed++);
            check_reduce_scatter(t, DTYPES[d], OPS[o], 7, true, seed++);
        }
}

static void check_all_gather(dist_ctx *t, mg_dtype dt, size_t n, bool in_place, int seed) {
    mg_comm *world = mg_comm_world_comm(t->w);
    size_t total = n * (size_t)t->size, es = mg_dtype_size(dt);
    void *mine = host_alloc(n, dt), *want = host_alloc(total, dt), *got = host_alloc(total, dt);
    for (size_t j = 0; j < n; j++) host_set(mine, dt, j, dist_value(dt, t->rank, j, seed));
    for (int r = 0; r < t->size; r++)
        for (size_t j = 0; j < n; j++)
            host_set(want, dt, (size_t)r * n + j, dist_value(dt, r, j, seed));
    void *recv = dist_alloc(t, total, dt);
    void *send = in_place ? (char *)recv + (size_t)t->rank * n * es : dist_alloc(t, n, dt);
    dist_put(t, send, mine, n, dt);
    DOK(mg_comm_all_gather(world, send, recv, n, dt, dist_stream(t)));
    DOK(mg_comm_sync(world, dist_stream(t)));
    dist_get(t, got, recv, total, dt);
    dist_compare(t, in_place ? "all_gather in place" : "all_gather", got, want, total, dt);
    if (!in_place) dist_free(t, send);
    dist_free(t, recv);
    free(mine);
    free(want);
    free(got);
}

void test_all_gather(dist_ctx *t) {
    static const size_t sizes[] = {1, 7, 1001, 65537};
    int seed = 200;
    for (int d = 0; d < N_DTYPES; d++) {
        for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++)
            check_all_gather(t, DTYPES[d], sizes[s], false, seed++);
        check_all_gather(t, DTYPES[d], 1001, true, seed++);
    }
}

/* Uneven all-to-all: rank s sends count(s, d) elements to d, some zero, packed with gaps; every
 * received element and every gap (which must keep its sentinel) is checked. */
static size_t a2a_count(int s, int d, int variant) {
    return (size_t)((s * 5 + d * 3 + variant) % 4) * (variant ? 37 : 1);
}
static double a2a_value(mg_dtype dt, int s, int d, size_t j) {
    double v = (double)((long)(((size_t)s * 31 + (size_t)d * 7 + j) % 200) - 100);
    if (dt == MG_U8) return v + 100; /* bytes: 0 .. 199 */
    return dt == MG_I64 ? v + (double)s * 1099511627776.0 : v;
}
static const double SENTINEL = 120.5; /* outside the values' range, exact in every type */

static void check_all_to_all(dist_ctx *t, mg_dtype dt, int variant) {
    mg_comm *world = mg_comm_world_comm(t->w);
    int n = t->size, me = t->rank;
    size_t *sc = calloc((size_t)n, sizeof *sc), *sd = calloc((size_t)n, sizeof *sd);
    size_t *rc = calloc((size_t)n, sizeof *rc), *rd = calloc((size_t)n, sizeof *rd);
    size_t send_n = 0, recv_n = 0;
    for (int p = 0; p < n; p++) {
        sd[p] = send_n;
        sc[p] = a2a_count(me, p, variant);
        send_n += sc[p] + 2; /* gaps between segments */
        rd[p] = recv_n + 1;
        rc[p] = a2a_count(p, me, variant);
        recv_n += rc[p] + 3;
    }
    void *hs = host_alloc(send_n, dt), *want = host_alloc(recv_n, dt),
         *got = host_alloc(recv_n, dt);
    for (size_t i = 0; i < send_n; i++) host_set(hs, dt, i, -SENTINEL);
    for (size_t i = 0; i < recv_n; i++) host_set(want, dt, i, SENTINEL);
    for (int p = 0; p < n; p++) {
        for (size_t j = 0; j < sc[p]; j++) host_set(hs, dt, sd[p] + j, a2a_value(dt, me, p, j));
        for (size_t j = 0; j < rc[p]; j++) host_set(want, dt, rd[p] + j, a2a_value(dt, p, me, j));
    }
    void *send = dist_alloc(t, send_n, dt), *recv = dist_alloc(t, recv_n, dt);
    dist_put(t, send, hs, send_n, dt);
    for (size_t i = 0; i < recv_n; i++) host_set(got, dt, i, SENTINEL);
    dist_put(t, recv, got, recv_n, dt);
    DOK(mg_comm_all_to_all(world, send, sc, sd, recv, rc, rd, dt, dist_stream(t)));
    DOK(mg_comm_sync(world, dist_stream(t)));
    dist_get(t, got, recv, recv_n, dt);
    dist_compare(t, "all_to_all uneven", got, want, recv_n, dt);
    dist_free(t, send);
    dist_free(t, recv);
    free(hs);
    free(want);
    free(got);
    free(sc);
    free(sd);
    free(rc);
    free(rd);
}

void test_all_to_all_uneven(dist_ctx *t) {
    for (int d = 0; d < N_DTYPES; d++)
        for (int variant = 0; variant < 2; variant++) check_all_to_all(t, DTYPES[d], variant);
}

static void check_broadcast(dist_ctx *t, mg_dtype dt, size_t n, int root, int seed) {
    mg_comm *world = mg_comm_world_comm(t->w);
    void *h = host_alloc(n, dt), *want = host_alloc(n, dt);
    for (size_t j = 0; j < n; j++) {
        host_set(want, dt, j, dist_value(dt, root, j, seed));
        /* non-roots start from other values, so a missed broadcast shows */
        host_set(h, dt, j, t->rank == root ? dist_value(dt, root, j, seed) : SENTINEL);
    }
    void *buf = dist_alloc(t, n, dt);
    dist_put(t, buf, h, n, dt);
    DOK(mg_comm_broadcast(world, buf, n, dt, root, dist_stream(t)));
    DOK(mg_comm_sync(world, dist_stream(t)));
    dist_get(t, h, buf, n, dt);
    char what[64];
    snprintf(what, sizeof what, "broadcast from root %d", root);
    dist_compare(t, what, h, want, n, dt);
    dist_free(t, buf);
    free(h);
    free(want);
}

void test_broadcast(dist_ctx *t) {
    int seed = 300;
    for (int d = 0; d < N_DTYPES; d++) {
        check_broadcast(t, DTYPES[d], 1, t->size - 1, seed++);
        check_broadcast(t, DTYPES[d], 1001, 1 % t->size, seed++);
    }
    check_broadcast(t, MG_F32, 65537, t->size / 2, seed++);
}

/* MPI counts are ints: a reduce-scatter or all-gather block beyond INT_MAX elements is refused
 * with MG_ERR_UNSUPPORTED on every rank, before any memory is touched (the in-place forms keep
 * the argument checks from reading these fake 8 GiB extents as overlaps); the world stays
 * usable. The NCCL backend takes such counts, and one rank only copies (here: nothing, in
 * place), so this runs on host buffers with more than one rank only. */
void test_count_limits(dist_ctx *t) {
    if (t->B != &dist_buf_host || t->size == 1) return;
    mg_comm *world = mg_comm_world_comm(t->w);
    size_t count = (size_t)1 << 31;
    static float base[1];
    char *p = (char *)base, *mine = p + (size_t)t->rank * count * sizeof(float);
    mg_status st = mg_comm_reduce_scatter(world, p, mine, count, MG_F32, MG_REDUCE_SUM, NULL);
    DEXPECT(st == MG_ERR_UNSUPPORTED && strstr(mg_error_message(), "exceeds MPI's limit"),
            "reduce_scatter of 2^31 per rank: %s: %s", mg_status_name(st), mg_error_message());
    st = mg_comm_all_gather(world, mine, p, count, MG_F32, NULL);
    DEXPECT(st == MG_ERR_UNSUPPORTED && strstr(mg_error_message(), "exceeds MPI's limit"),
            "all_gather of 2^31 per rank: %s: %s", mg_status_name(st), mg_error_message());
    DOK(mg_comm_barrier(world, NULL));
}

/* Copy-engine collectives (comm.h): where the world has them (NCCL >= 2.28 with
 * MG_NCCL_COPY_ENGINE=1, run_nccl.sh's copy-engine pass), an all-gather out of place and in
 * place and an all-to-all of equal parts inside mg_comm_sym_alloc's memory give the exact values
 * the kernels' tests above check; elsewhere mg_comm_sym_alloc refuses with MG_ERR_UNSUPPORTED. */
void test_copy_engine(dist_ctx *t) {
    mg_comm *world = mg_comm_world_comm(t->w);
    void *mem = NULL;
    if (!mg_comm_copy_engine(world)) {
        mg_status st = mg_comm_sym_alloc(&world, 1, 4096, &mem);
        DEXPECT(st == MG_ERR_UNSUPPORTED && !mem &&
                    strstr(mg_error_message(), "MG_NCCL_COPY_ENGINE"),
                "sym_alloc without copy engines: status %d (%s)", (int)st, mg_error_message());
        return;
    }
    const mg_dtype dt = MG_BF16;
    const size_t n = 65537, total = n * (size_t)t->size, es = mg_dtype_size(dt);
    size_t seg = (total * es + 4095) / 4096 * 4096; /* each buffer on a page of its own */
    DOK(mg_comm_sym_alloc(&world, 1, 3 * seg, &mem));
    if (!mem) return;
    char *recv = mem, *send = recv + seg, *recv2 = send + seg;
    void *mine = host_alloc(total, dt), *want = host_alloc(total, dt), *got = host_alloc(total, dt);
    for (int pass = 0; pass < 3; pass++) { /* all-gather, in place, all-to-all of equal parts */
        int seed = 900 + pass;
        if (pass < 2) {
            for (size_t j = 0; j < n; j++) host_set(mine, dt, j, dist_value(dt, t->rank, j, seed));
            for (int r = 0; r < t->size; r++)
                for (size_t j = 0; j < n; j++)
                    host_set(want, dt, (size_t)r * n + j, dist_value(dt, r, j, seed));
            char *src = pass ? recv + (size_t)t->rank * n * es : send;
            dist_put(t, src, mine, n, dt);
            DOK(mg_comm_all_gather(world, src, recv, n, dt, dist_stream(t)));
        } else { /* part p of rank s: dist_value(s, p * n + j) */
            size_t *cnt = calloc((size_t)t->size, sizeof *cnt),
                   *dsp = calloc((size_t)t->size, sizeof *dsp);
            for (int p = 0; p < t->size; p++) cnt[p] = n, dsp[p] = (size_t)p * n;
            for (size_t i = 0; i < total; i++)
                host_set(mine, dt, i, dist_value(dt, t->rank, i, seed));
            for (int s = 0; s < t->size; s++)
                for (size_t j = 0; j < n; j++)
                    host_set(want, dt, (size_t)s * n + j,
                             dist_value(dt, s, (size_t)t->rank * n + j, seed));
            dist_put(t, send, mine, total, dt);
            DOK(mg_comm_all_to_all(world, send, cnt, dsp, recv2, cnt, dsp, dt, dist_stream(t)));
            free(cnt);
            free(dsp);
        }
        DOK(mg_comm_sync(world, dist_stream(t)));
        dist_get(t, got, pass < 2 ? recv : recv2, total, dt);
        dist_compare(t,
                     pass == 0   ? "copy-engine all_gather"
                     : pass == 1 ? "copy-engine all_gather in place"
                                 : "copy-engine all_to_all",
                     got, want, total, dt);
    }
    mg_comm_sym_free(&world, 1, mem);
    free(mine);
    free(want);
    free(got);
}
