/* Point-to-point batches (a ring in both directions, pairs exchanging at once) and groups built
 * from parallel-layout-like lists (tp blocks, strided dp, partial and reordered lists). */
#include "dist.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void test_barrier_and_queries(dist_ctx *t) {
    mg_comm *world = mg_comm_world_comm(t->w);
    DEXPECT(world != NULL, "no world group");
    DEXPECT(mg_comm_size(world) == t->size, "world size %d, want %d", mg_comm_size(world), t->size);
    DEXPECT(mg_comm_rank(world) == t->rank, "world rank %d, want %d", mg_comm_rank(world), t->rank);
    DEXPECT(!strcmp(mg_comm_name(world), "world"), "world group named '%s'", mg_comm_name(world));
    for (int i = 0; i < t->size; i++)
        DEXPECT(mg_comm_global_rank(world, i) == i, "world group rank %d is global %d", i,
                mg_comm_global_rank(world, i));
    for (int i = 0; i < 3; i++) DOK(mg_comm_barrier(world, dist_stream(t)));
}

/* h[j] = the test value of element j on `rank` for `seed`, j < n. */
static void fill(void *h, mg_dtype dt, size_t n, int rank, int seed) {
    for (size_t j = 0; j < n; j++) host_set(h, dt, j, dist_value(dt, rank, j, seed));
}

/* Every rank sends 1001 elements to the right and 7 to the left and receives both in one batch
 * (with 2 ranks both go to the same peer, matched in posting order). */
void test_p2p_ring(dist_ctx *t) {
    static const mg_dtype dts[] = {MG_F32, MG_BF16, MG_I64};
    mg_comm *world = mg_comm_world_comm(t->w);
    int n = t->size, right = (t->rank + 1) % n, left = (t->rank + n - 1) % n;
    const size_t nr = 1001, nl = 7;
    for (int d = 0; d < 3; d++) {
        mg_dtype dt = dts[d];
        void *hr = host_alloc(nr, dt), *hl = host_alloc(nl, dt);
        void *wr = host_alloc(nr, dt), *wl = host_alloc(nl, dt);
        void *sr = dist_alloc(t, nr, dt), *sl = dist_alloc(t, nl, dt);
        void *rr = dist_alloc(t, nr, dt), *rl = dist_alloc(t, nl, dt);
        fill(hr, dt, nr, t->rank, 10 + d);
        fill(hl, dt, nl, t->rank, 20 + d);
        dist_put(t, sr, hr, nr, dt);
        dist_put(t, sl, hl, nl, dt);
        mg_p2p_op ops[4] = {
            {true, right, sr, nr, dt},
            {true, left, sl, nl, dt},
            {false, left, rr, nr, dt},  /* what the left neighbour sent right */
            {false, right, rl, nl, dt}, /* what the right neighbour sent left */
        };
        DOK(mg_comm_batch_p2p(world, ops, 4, dist_stream(t)));
        DOK(mg_comm_sync(world, dist_stream(t)));
        fill(wr, dt, nr, left, 10 + d);
        fill(wl, dt, nl, right, 20 + d);
        dist_get(t, hr, rr, nr, dt);
        dist_get(t, hl, rl, nl, dt);
        dist_compare(t, "p2p from the left", hr, wr, nr, dt);
        dist_compare(t, "p2p from the right", hl, wl, nl, dt);
        void *bufs[] = {sr, sl, rr, rl};
        for (int i = 0; i < 4; i++) dist_free(t, bufs[i]);
        free(hr);
        free(hl);
        free(wr);
        free(wl);
    }
}

/* Ranks 2k and 2k+1 send each other two messages (5 and 300 elements) at the same time; the
 * even rank posts its sends first, the odd one its receives first. */
void test_p2p_pairs(dist_ctx *t) {
    mg_comm *world = mg_comm_world_comm(t->w);
    int partner = t->rank ^ 1;
    if (partner >= t->size) partner = t->rank; /* odd world: the last rank talks to itself */
    const mg_dtype dt = MG_F16;
    const size_t na = 5, nb = 300;
    void *ha = host_alloc(na, dt), *hb = host_alloc(nb, dt);
    void *wa = host_alloc(na, dt), *wb = host_alloc(nb, dt);
    void *sa = dist_alloc(t, na, dt), *sb = dist_alloc(t, nb, dt);
    void *ra = dist_alloc(t, na, dt), *rb = dist_alloc(t, nb, dt);
    fill(ha, dt, na, t->rank, 30);
    fill(hb, dt, nb, t->rank, 31);
    dist_put(t, sa, ha, na, dt);
    dist_put(t, sb, hb, nb, dt);
    mg_p2p_op sends[2] = {{true, partner, sa, na, dt}, {true, partner, sb, nb, dt}};
    mg_p2p_op recvs[2] = {{false, partner, ra, na, dt}, {false, partner, rb, nb, dt}};
    mg_p2p_op ops[4];
    bool even = t->rank % 2 == 0;
    memcpy(ops, even ? sends : recvs, sizeof sends);
    memcpy(ops + 2, even ? recvs : sends, sizeof sends);
    DOK(mg_comm_batch_p2p(world, ops, 4, dist_stream(t)));
    DOK(mg_comm_sync(world, dist_stream(t)));
    fill(wa, dt, na, partner, 30);
    fill(wb, dt, nb, partner, 31);
    dist_get(t, ha, ra, na, dt);
    dist_get(t, hb, rb, nb, dt);
    dist_compare(t, "pair exchange, first message", ha, wa, na, dt);
    dist_compare(t, "pair exchange, second message", hb, wb, nb, dt);
    void *bufs[] = {sa, sb, ra, rb};
    for (int i = 0; i < 4; i++) dist_free(t, bufs[i]);
    free(ha);
    free(hb);
    free(wa);
    free(wb);
}

/* Non-blocking tagged messages (MPI groups): ranks 2k and 2k+1 each post three sends of
 * different lengths with tags 7, 8 and 32767, and the three receives in the opposite order
 * (tag 32767 first); each receive must get the message of its tag, not the first to arrive.
 * Then the bad tickets: a tag out of range and a peer that is this rank are usage errors. */
void test_p2p_tagged(dist_ctx *t) {
    mg_comm *world = mg_comm_world_comm(t->w);
    int partner = t->rank ^ 1;
    if (!mg_comm_p2p_async(world) || partner >= t->size) {
        DEXPECT(mg_comm_p2p_async(world) == !mg_comm_device_buffers(world) || t->size == 1,
                "non-blocking messages on a %s group",
                mg_comm_device_buffers(world) ? "device" : "host");
        return;
    }
    const int tags[3] = {7, 8, MG_P2P_TAGS - 1};
    const size_t n[3] = {3, 1000, 17};
    float *send[3], *recv[3];
    mg_p2p_ticket ts[3], tr[3];
    for (int m = 0; m < 3; m++) {
        send[m] = malloc(n[m] * sizeof(float));
        recv[m] = calloc(n[m], sizeof(float));
        for (size_t i = 0; i < n[m]; i++)
            send[m][i] = (float)(t->rank * 10000 + m * 1000) + (float)i;
        DOK(mg_comm_p2p_post(world, &(mg_p2p_op){true, partner, send[m], n[m], MG_F32}, tags[m],
                             &ts[m]));
    }
    for (int m = 2; m >= 0; m--)
        DOK(mg_comm_p2p_post(world, &(mg_p2p_op){false, partner, recv[m], n[m], MG_F32}, tags[m],
                             &tr[m]));
    for (int m = 0; m < 3; m++) DOK(mg_comm_p2p_wait(world, tr[m]));
    for (int m = 0; m < 3; m++) DOK(mg_comm_p2p_wait(world, ts[m]));
    for (int m = 0; m < 3; m++) {
        size_t bad = n[m];
        for (size_t i = 0; i < n[m] && bad == n[m]; i++)
            if (recv[m][i] != (float)(partner * 10000 + m * 1000) + (float)i) bad = i;
        DEXPECT(bad == n[m], "tag %d: element %zu is %g", tags[m], bad,
                bad < n[m] ? recv[m][bad] : 0.0);
        free(send[m]);
        free(recv[m]);
    }
    float x = 0;
    mg_p2p_ticket k;
    mg_status st =
        mg_comm_p2p_post(world, &(mg_p2p_op){true, partner, &x, 1, MG_F32}, MG_P2P_TAGS, &k);
    DEXPECT(st == MG_ERR_USAGE, "tag %d accepted (status %d)", MG_P2P_TAGS, st);
    st = mg_comm_p2p_post(world, &(mg_p2p_op){false, t->rank, &x, 1, MG_F32}, 1, &k);
    DEXPECT(st == MG_ERR_USAGE, "a receive from this rank accepted (status %d)", st);
    st = mg_comm_p2p_wait(world, 1 << 20);
    DEXPECT(st == MG_ERR_USAGE && strstr(mg_error_message(), "was never posted"),
            "a wait on a ticket never posted: status %d", st);
    DOK(mg_comm_barrier(world, NULL));
}

/* Creates the list of n_groups groups whose ranks follow each other in `ranks`, group g holding
 * sizes[g] of them; this rank's group or NULL. */
static mg_comm *make_groups(dist_ctx *t, const char *name, int n_groups, const int *sizes,
                            const int *ranks) {
    int *offsets = malloc((size_t)(n_groups + 1) * sizeof *offsets);
    offsets[0] = 0;
    for (int g = 0; g < n_groups; g++) offsets[g + 1] = offsets[g] + sizes[g];
    mg_comm *c = NULL;
    DOK(mg_comm_group_create(t->w, name, n_groups, offsets, ranks, &c));
    free(offsets);
    return c;
}

/* Sum over the group of (global rank + 1) * 3, as I32, and as BF16 of small values. */
static void check_group_sum(dist_ctx *t, mg_comm *c, const int *members, int n) {
    int32_t want = 0, v = (t->rank + 1) * 3, got = 0;
    for (int i = 0; i < n; i++) want += (members[i] + 1) * 3;
    int32_t *buf = dist_alloc(t, 1, MG_I32);
    dist_put(t, buf, &v, 1, MG_I32);
    DOK(mg_comm_all_reduce(c, buf, buf, 1, MG_I32, MG_REDUCE_SUM, dist_stream(t)));
    DOK(mg_comm_sync(c, dist_stream(t)));
    dist_get(t, &got, buf, 1, MG_I32);
    DEXPECT(got == want, "group '%s': sum %d, want %d", mg_comm_name(c), got, want);
    dist_free(t, buf);
    DEXPECT(mg_comm_size(c) == n, "group '%s' has size %d, want %d", mg_comm_name(c),
            mg_comm_size(c), n);
    for (int i = 0; i < n; i++) {
        if (members[i] == t->rank)
            DEXPECT(mg_comm_rank(c) == i, "group '%s': rank %d, want %d", mg_comm_name(c),
                    mg_comm_rank(c), i);
        DEXPECT(mg_comm_global_rank(c, i) == members[i], "group '%s': member %d is %d, want %d",
                mg_comm_name(c), i, mg_comm_global_rank(c, i), members[i]);
    }
}

/* Megatron-like: tp blocks of 2 ([0,1],[2,3],...) and strided dp ([0,2,4,..],[1,3,5,..]), used
 * interleaved; a broadcast inside tp from group rank 1. */
void test_groups_tp_dp(dist_ctx *t) {
    int n = t->size, tp = n % 2 == 0 ? 2 : 1, dp = n / tp;
    int *tp_sizes = malloc((size_t)dp * sizeof(int)), *dp_sizes = malloc((size_t)tp * sizeof(int));
    int *tp_ranks = malloc((size_t)n * sizeof(int)), *dp_ranks = malloc((size_t)n * sizeof(int));
    for (int g = 0; g < dp; g++) tp_sizes[g] = tp;
    for (int g = 0; g < tp; g++) dp_sizes[g] = dp;
    for (int r = 0; r < n; r++) tp_ranks[r] = r; /* group r / tp */
    for (int g = 0, k = 0; g < tp; g++)          /* group r % tp */
        for (int j = 0; j < dp; j++) dp_ranks[k++] = g + j * tp;
    mg_comm *tpc = make_groups(t, "tp", dp, tp_sizes, tp_ranks);
    mg_comm *dpc = make_groups(t, "dp", tp, dp_sizes, dp_ranks);
    DEXPECT(tpc && dpc, "rank %d got no tp or dp group", t->rank);
    if (tpc && dpc) {
        const int *my_tp = tp_ranks + (t->rank / tp) * tp, *my_dp = dp_ranks + (t->rank % tp) * dp;
        check_group_sum(t, tpc, my_tp, tp);
        check_group_sum(t, dpc, my_dp, dp);
        check_group_sum(t, tpc, my_tp, tp);
        /* broadcast inside tp from its last member */
        int root = tp - 1;
        float v[3] = {(float)t->rank, 1.5f, -2.0f}, want = (float)my_tp[root], got[3];
        float *buf = dist_alloc(t, 3, MG_F32);
        dist_put(t, buf, v, 3, MG_F32);
        DOK(mg_comm_broadcast(tpc, buf, 3, MG_F32, root, dist_stream(t)));
        DOK(mg_comm_sync(tpc, dist_stream(t)));
        dist_get(t, got, buf, 3, MG_F32);
        DEXPECT(got[0] == want && got[1] == 1.5f && got[2] == -2.0f,
                "tp broadcast from group rank %d: got %g, want %g", root, got[0], want);
        dist_free(t, buf);
    }
    mg_comm_group_free(tpc);
    mg_comm_group_free(dpc);
    free(tp_sizes);
    free(dp_sizes);
    free(tp_ranks);
    free(dp_ranks);
}

/* A list naming only the two end ranks, in reverse order (the others get NULL); the world
 * reversed (group rank i is world rank n-1-i); a list of a one-rank group and the rest. */
void test_groups_partial_and_order(dist_ctx *t) {
    int n = t->size;
    int ends[2] = {n - 1, 0}, two = n > 1 ? 2 : 1;
    mg_comm *e = make_groups(t, "ends", 1, &two, ends);
    bool in_ends = t->rank == 0 || t->rank == n - 1;
    DEXPECT((e != NULL) == in_ends, "rank %d: ends group %p", t->rank, (void *)e);
    if (e) {
        int32_t mine = t->rank, got[2] = {-1, -1};
        int32_t *recv = dist_alloc(t, 2, MG_I32), *send = dist_alloc(t, 1, MG_I32);
        dist_put(t, send, &mine, 1, MG_I32);
        DOK(mg_comm_all_gather(e, send, recv, 1, MG_I32, dist_stream(t)));
        DOK(mg_comm_sync(e, dist_stream(t)));
        dist_get(t, got, recv, 2, MG_I32);
        DEXPECT(got[0] == n - 1 && (n == 1 || got[1] == 0), "ends all_gather: %d %d", got[0],
                got[1]);
        dist_free(t, recv);
        dist_free(t, send);
    }
    mg_comm_group_free(e);

    int *rev = malloc((size_t)n * sizeof *rev);
    for (int i = 0; i < n; i++) rev[i] = n - 1 - i;
    mg_comm *r = make_groups(t, "reversed", 1, &n, rev);
    DEXPECT(r && mg_comm_rank(r) == n - 1 - t->rank, "reversed: group rank %d", mg_comm_rank(r));
    if (r) {
        /* block i of the reduce-scatter input goes to group rank i = world rank n-1-i */
        int32_t *h = malloc((size_t)n * sizeof *h), got = -1;
        for (int i = 0; i < n; i++) h[i] = rev[i] * 100 + t->rank;
        int32_t *send = dist_alloc(t, (size_t)n, MG_I32), *recv = dist_alloc(t, 1, MG_I32);
        dist_put(t, send, h, (size_t)n, MG_I32);
        DOK(mg_comm_reduce_scatter(r, send, recv, 1, MG_I32, MG_REDUCE_SUM, dist_stream(t)));
        DOK(mg_comm_sync(r, dist_stream(t)));
        dist_get(t, &got, recv, 1, MG_I32);
        int32_t want = t->rank * 100 * n + n * (n - 1) / 2;
        DEXPECT(got == want, "reversed reduce_scatter: %d, want %d", got, want);
        dist_free(t, send);
        dist_free(t, recv);
        free(h);
    }
    mg_comm_group_free(r);

    int *all = malloc((size_t)n * sizeof *all), sizes[2] = {1, n - 1};
    for (int i = 0; i < n; i++) all[i] = i;
    mg_comm *u = make_groups(t, "uneven", n > 1 ? 2 : 1, sizes, all);
    if (u) check_group_sum(t, u, t->rank == 0 ? all : all + 1, t->rank == 0 ? 1 : n - 1);
    mg_comm_group_free(u);
    free(all);
    free(rev);
}
