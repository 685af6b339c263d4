/* src/comm on a world of one rank (no launcher, no MPI_Init): every collective is a copy, and
 * every bad argument is refused on the calling rank with MG_ERR_USAGE naming the call, its
 * number and the group, before anything could reach a peer. The multi-rank behaviour is tested
 * under mpirun by tests/dist. */
#include "test.h"

#include "comm/comm.h"
#include "core/status.h"

#include <stdint.h>
#include <string.h>

static mg_comm_world *world1(mg_test_ctx *t) {
    mg_launch_info li;
    memset(&li, 0, sizeof li);
    li.kind = MG_LAUNCH_SINGLE;
    snprintf(li.launcher, sizeof li.launcher, "single");
    li.world_size = li.local_world_size = 1;
    mg_comm_world *w = NULL;
    MG_EXPECT_OK(mg_comm_world_init(&li, MG_COMM_MPI, 30, &w));
    return w;
}

MG_TEST(comm_world_of_one_copies) {
    mg_comm_world *w = world1(t);
    if (!w) return;
    mg_comm *c = mg_comm_world_comm(w);
    MG_EXPECT(mg_comm_world_rank(w) == 0 && mg_comm_world_size(w) == 1, "rank/size");
    MG_EXPECT(mg_comm_rank(c) == 0 && mg_comm_size(c) == 1 && !strcmp(mg_comm_name(c), "world"),
              "world group %d/%d '%s'", mg_comm_rank(c), mg_comm_size(c), mg_comm_name(c));
    float a[5] = {1, -2, 3.5f, 4, 5}, b[5] = {0};
    MG_EXPECT_OK(mg_comm_all_reduce(c, a, b, 5, MG_F32, MG_REDUCE_AVG, NULL));
    MG_EXPECT(!memcmp(a, b, sizeof a), "all_reduce avg over one rank is a copy");
    MG_EXPECT_OK(mg_comm_all_reduce(c, a, a, 5, MG_F32, MG_REDUCE_SUM, NULL));
    MG_EXPECT(a[2] == 3.5f, "in place all_reduce changed the data");
    memset(b, 0, sizeof b);
    MG_EXPECT_OK(mg_comm_reduce_scatter(c, a, b, 5, MG_F32, MG_REDUCE_MAX, NULL));
    MG_EXPECT(!memcmp(a, b, sizeof a), "reduce_scatter over one rank is a copy");
    memset(b, 0, sizeof b);
    MG_EXPECT_OK(mg_comm_all_gather(c, a, b, 5, MG_F32, NULL));
    MG_EXPECT(!memcmp(a, b, sizeof a), "all_gather over one rank is a copy");
    MG_EXPECT_OK(mg_comm_broadcast(c, a, 5, MG_F32, 0, NULL));
    int64_t s[6] = {0, 0, 7, 8, 9, 0}, r[6] = {0};
    size_t cnt = 3, sd = 2, rd = 1;
    MG_EXPECT_OK(mg_comm_all_to_all(c, s, &cnt, &sd, r, &cnt, &rd, MG_I64, NULL));
    MG_EXPECT(r[0] == 0 && r[1] == 7 && r[2] == 8 && r[3] == 9 && r[4] == 0, "all_to_all %lld %lld",
              (long long)r[1], (long long)r[3]);
    /* a batch to itself: the k-th send pairs with the k-th receive */
    uint16_t x[2] = {1, 2}, y[3] = {3, 4, 5}, gx[2] = {0}, gy[3] = {0};
    mg_p2p_op ops[4] = {{false, 0, gx, 2, MG_BF16},
                        {true, 0, x, 2, MG_BF16},
                        {true, 0, y, 3, MG_F16},
                        {false, 0, gy, 3, MG_F16}};
    MG_EXPECT_OK(mg_comm_batch_p2p(c, ops, 4, NULL));
    MG_EXPECT(!memcmp(x, gx, sizeof x) && !memcmp(y, gy, sizeof y), "p2p to itself");
    MG_EXPECT_OK(mg_comm_barrier(c, NULL));
    MG_EXPECT_OK(mg_comm_sync(c, NULL));
    MG_EXPECT_OK(mg_comm_all_reduce(c, NULL, NULL, 0, MG_F32, MG_REDUCE_SUM, NULL));
    MG_EXPECT(!strcmp(mg_reduce_op_name(MG_REDUCE_AVG), "avg"), "op name");
    mg_comm_world_finalize(w);
}

MG_TEST(comm_bad_arguments_name_the_call) {
    mg_comm_world *w = world1(t);
    if (!w) return;
    mg_comm *c = mg_comm_world_comm(w);
    int32_t i[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    float f[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    MG_EXPECT_OK(mg_comm_barrier(c, NULL)); /* #1 */
    MG_EXPECT_ERROR(mg_comm_all_reduce(c, i, i, 8, MG_I32, MG_REDUCE_AVG, NULL), MG_ERR_USAGE,
                    "all_reduce #2 on group 'world': avg is defined for F32, BF16 and F16 only, "
                    "not I32");
    MG_EXPECT_ERROR(mg_comm_reduce_scatter(c, i, i, 8, MG_I64, MG_REDUCE_AVG, NULL), MG_ERR_USAGE,
                    "not I64");
    MG_EXPECT_ERROR(mg_comm_all_reduce(c, f, f, 8, MG_F32, (mg_reduce_op)7, NULL), MG_ERR_USAGE,
                    "unknown reduce op 7");
    MG_EXPECT_ERROR(mg_comm_all_gather(c, f, f, 8, (mg_dtype)9, NULL), MG_ERR_USAGE,
                    "unknown dtype 9");
    MG_EXPECT_ERROR(mg_comm_all_reduce(c, NULL, f, 8, MG_F32, MG_REDUCE_SUM, NULL), MG_ERR_USAGE,
                    "send buffer is NULL");
    MG_EXPECT_ERROR(mg_comm_all_reduce(c, f, f + 1, 4, MG_F32, MG_REDUCE_SUM, NULL), MG_ERR_USAGE,
                    "overlap without being equal");
    MG_EXPECT_ERROR(mg_comm_reduce_scatter(c, f, f + 1, 4, MG_F32, MG_REDUCE_SUM, NULL),
                    MG_ERR_USAGE, "in place means recv == send + rank*count");
    MG_EXPECT_ERROR(mg_comm_all_gather(c, f + 2, f, 4, MG_F32, NULL), MG_ERR_USAGE,
                    "in place means send == recv + rank*count");
    MG_EXPECT_ERROR(mg_comm_all_reduce(c, f, f, SIZE_MAX / 2, MG_F32, MG_REDUCE_SUM, NULL),
                    MG_ERR_USAGE, "overflows");
    MG_EXPECT_ERROR(mg_comm_broadcast(c, f, 8, MG_F32, 1, NULL), MG_ERR_USAGE,
                    "broadcast #11 on group 'world': root 1 is out of range (group size 1");
    MG_EXPECT_ERROR(mg_comm_broadcast(c, f, 8, MG_F32, -1, NULL), MG_ERR_USAGE, "root -1");
    size_t three = 3, two = 2, zero = 0;
    MG_EXPECT_ERROR(mg_comm_all_to_all(c, f, &three, &zero, f + 4, &two, &zero, MG_F32, NULL),
                    MG_ERR_USAGE, "sends 3 elements to itself but expects to receive 2");
    MG_EXPECT_ERROR(mg_comm_all_to_all(c, f, &three, &zero, f + 4, &three, NULL, MG_F32, NULL),
                    MG_ERR_USAGE, "recv_displs is NULL");
    MG_EXPECT_ERROR(mg_comm_all_to_all(c, f, &three, &zero, f + 1, &three, &zero, MG_F32, NULL),
                    MG_ERR_USAGE, "no in-place form");
    mg_p2p_op bad_peer = {true, 1, f, 8, MG_F32};
    MG_EXPECT_ERROR(mg_comm_batch_p2p(c, &bad_peer, 1, NULL), MG_ERR_USAGE,
                    "op 0 (send) names peer 1, out of range (group size 1");
    mg_p2p_op lonely = {true, 0, f, 8, MG_F32};
    MG_EXPECT_ERROR(mg_comm_batch_p2p(c, &lonely, 1, NULL), MG_ERR_USAGE, "1 sends and 0 receives");
    mg_p2p_op mismatch[2] = {{true, 0, f, 4, MG_F32}, {false, 0, f + 4, 3, MG_F32}};
    MG_EXPECT_ERROR(mg_comm_batch_p2p(c, mismatch, 2, NULL), MG_ERR_USAGE,
                    "op 0 sends 4 F32 but its matching receive (op 1) expects 3 F32");
    MG_EXPECT_ERROR(mg_comm_batch_p2p(c, NULL, 2, NULL), MG_ERR_USAGE, "2 ops");
    MG_EXPECT_ERROR(mg_comm_barrier(NULL, NULL), MG_ERR_USAGE, "barrier: the group is NULL");
    /* bad arguments fail locally: the world is still usable */
    MG_EXPECT_OK(mg_comm_all_reduce(c, f, f, 8, MG_F32, MG_REDUCE_SUM, NULL));
    mg_comm_world_finalize(w);
}

MG_TEST(comm_group_lists_are_checked) {
    mg_comm_world *w = world1(t);
    if (!w) return;
    mg_comm *g = (mg_comm *)1;
    int off1[2] = {0, 1}, off_empty[3] = {0, 1, 1}, off_dup[3] = {0, 1, 2};
    int r0[2] = {0, 0}, r5[1] = {5};
    MG_EXPECT_ERROR(mg_comm_group_create(w, "tp", 1, off1, r5, &g), MG_ERR_USAGE,
                    "group 'tp': rank 5 in group 0 is out of range (world size 1)");
    MG_EXPECT(g == NULL, "*out is set to NULL on failure");
    MG_EXPECT_ERROR(mg_comm_group_create(w, "dp", 2, off_dup, r0, &g), MG_ERR_USAGE,
                    "group 'dp': rank 0 appears twice");
    MG_EXPECT_ERROR(mg_comm_group_create(w, "pp", 2, off_empty, r0, &g), MG_ERR_USAGE,
                    "group 'pp': group 1 is empty");
    MG_EXPECT_ERROR(mg_comm_group_create(w, "ep", 0, off1, r0, &g), MG_ERR_USAGE,
                    "a list needs at least one group");
    MG_EXPECT_ERROR(
        mg_comm_group_create(w, "a_name_much_longer_than_the_limit_of_31", 1, off1, r0, &g),
        MG_ERR_USAGE, "longer than 31 characters");
    MG_EXPECT_OK(mg_comm_group_create(w, "tp", 1, off1, r0, &g));
    MG_EXPECT(g && mg_comm_size(g) == 1 && mg_comm_global_rank(g, 0) == 0 &&
                  mg_comm_global_rank(g, 1) == -1 && !strcmp(mg_comm_name(g), "tp"),
              "tp group");
    float f[2] = {1, 2};
    MG_EXPECT_ERROR(mg_comm_broadcast(g, f, 2, MG_F32, 3, NULL), MG_ERR_USAGE,
                    "broadcast #1 on group 'tp'");
    mg_comm_group_free(g);
    /* the world's group outlives a free of it; finalize frees groups left open */
    mg_comm_group_free(mg_comm_world_comm(w));
    MG_EXPECT_OK(mg_comm_group_create(w, "left_open", 1, off1, r0, &g));
    MG_EXPECT_OK(mg_comm_barrier(mg_comm_world_comm(w), NULL));
    mg_comm_world_finalize(w);
}

MG_TEST(comm_after_failure_only_fail_and_finalize) {
    mg_comm_world_fail(NULL, "nothing to tell"); /* safe before init */
    mg_comm_world_finalize(NULL);
    mg_comm_world *w = world1(t);
    if (!w) return;
    mg_comm *c = mg_comm_world_comm(w);
    mg_comm_world_fail(w, "test failure");
    MG_EXPECT_ERROR(mg_comm_barrier(c, NULL), MG_ERR_COMM,
                    "barrier #1 on group 'world' on rank 0: refused after an earlier "
                    "communication error");
    MG_EXPECT_ERROR(mg_comm_sync(c, NULL), MG_ERR_COMM, "refused");
    mg_comm_world_finalize(w);
}

MG_TEST(comm_world_init_checks_its_arguments) {
    mg_launch_info li;
    memset(&li, 0, sizeof li);
    snprintf(li.launcher, sizeof li.launcher, "torchrun");
    li.kind = MG_LAUNCH_ENV;
    li.world_size = 2;
    li.rank = 2;
    mg_comm_world *w = (mg_comm_world *)1;
    MG_EXPECT_ERROR(mg_comm_world_init(&li, MG_COMM_MPI, 10, &w), MG_ERR_USAGE,
                    "rank 2 of 2 ranks");
    MG_EXPECT(w == NULL, "*out is set to NULL on failure");
    li.rank = 0;
    MG_EXPECT_ERROR(mg_comm_world_init(&li, MG_COMM_MPI, 0, &w), MG_ERR_USAGE,
                    "timeout 0 s must be positive");
    MG_EXPECT_ERROR(mg_comm_world_init(&li, MG_COMM_MPI, 10, &w), MG_ERR_UNSUPPORTED,
                    "the MPI backend needs an MPI launch (mpirun or srun) for 2 ranks");
    MG_EXPECT_ERROR(mg_comm_world_init(&li, (mg_comm_backend)5, 10, &w), MG_ERR_USAGE,
                    "unknown communication backend 5");
    MG_EXPECT_ERROR(mg_comm_world_init(NULL, MG_COMM_MPI, 10, &w), MG_ERR_USAGE,
                    "launch info is NULL");
#ifndef MG_HAVE_MPI
    li.kind = MG_LAUNCH_MPI;
    MG_EXPECT_ERROR(mg_comm_world_init(&li, MG_COMM_MPI, 10, &w), MG_ERR_UNSUPPORTED,
                    "install libopenmpi-dev");
#endif
#ifndef MG_HAVE_NCCL
    li.world_size = 1;
    MG_EXPECT_ERROR(mg_comm_world_init(&li, MG_COMM_NCCL, 10, &w), MG_ERR_UNSUPPORTED,
                    "this build has no NCCL");
#endif
}
