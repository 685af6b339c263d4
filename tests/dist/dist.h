/* The multi-rank test harness (tests/dist): every rank runs every test; a test counts the
 * mismatches this rank sees; main.c reduces the counts over the world (max) and rank 0 prints
 * PASS/FAIL lines and "N passed, N failed". A communication error inside a test is fatal for
 * the run: the rank reports it, calls mg_comm_world_fail (so its peers stop too) and exits 1.
 * Values are small integers (and halves for avg) exact in every dtype, so every element is
 * checked exactly, as nccl-tests do. Needs: comm/comm, dist_buf.h. */
#ifndef MG_DIST_H
#define MG_DIST_H

#include "comm/comm.h"
#include "core/status.h"
#include "dist_buf.h"

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    mg_comm_world *w;
    const dist_buf_ops *B;
    int rank, size; /* world */
    int failures;   /* this rank, this test */
    const char *name;
} dist_ctx;

typedef void (*dist_test_fn)(dist_ctx *t);

void dist_fail(dist_ctx *t, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Reports the library's error, tells the peers and exits 1. */
_Noreturn void dist_fatal(dist_ctx *t, const char *file, int line, const char *expr);

#define DEXPECT(cond, ...)                                                                         \
    do {                                                                                           \
        if (!(cond)) dist_fail(t, __FILE__, __LINE__, __VA_ARGS__);                                \
    } while (0)
#define DOK(expr)                                                                                  \
    do {                                                                                           \
        if ((expr) != MG_OK) dist_fatal(t, __FILE__, __LINE__, #expr);                             \
    } while (0)

/* Whether the run moves device buffers (--backend nccl) rather than host ones. */
static inline bool dist_on_device(const dist_ctx *t) {
    return strcmp(t->B->name, "host") != 0;
}

/* Device (or host) buffers through t->B; fatal on failure. */
void *dist_alloc(dist_ctx *t, size_t count, mg_dtype dt);
void dist_put(dist_ctx *t, void *dev, const void *host, size_t count, mg_dtype dt);
void dist_get(dist_ctx *t, void *host, const void *dev, size_t count, mg_dtype dt);
void dist_free(dist_ctx *t, void *dev);
void *dist_stream(dist_ctx *t);

/* The end of a failure scenario on a surviving rank (main.c, scenario_peer.c): with st MG_OK the
 * failure went unnoticed (a line saying `unnoticed`, exit status 0); else the one error line
 * run_nccl.sh reads ("dist_tests: rank R: error after S s: MESSAGE", S since t0), the world
 * failed with it (exit status 1). The world is finalized either way. */
int dist_scenario_end(mg_comm_world *w, mg_status st, double t0, const char *unnoticed);

/* Host arrays of any dtype, read and written as doubles (exact for the values used here). */
void *host_alloc(size_t count, mg_dtype dt);
void host_set(void *buf, mg_dtype dt, size_t i, double v);
double host_get(const void *buf, mg_dtype dt, size_t i);
/* The test value of element i on `rank` for test variant `seed`: an integer in [-6, 6], not
 * all zero; for I64 plus a multiple of 2^40 so the upper half of the word travels too. */
double dist_value(mg_dtype dt, int rank, size_t i, int seed);
/* v rounded to dt as the library rounds (fp32 first, then to nearest even). */
double dist_round(mg_dtype dt, double v);
/* Compares n elements of got with want; counts and reports (the first few) mismatches. */
void dist_compare(dist_ctx *t, const char *what, const void *got, const void *want, size_t n,
                  mg_dtype dt);

/* The tests (test_collectives.c, test_p2p_groups.c). */
void test_all_reduce(dist_ctx *t);
void test_ddp_bf16(dist_ctx *t);
void test_all_reduce_large(dist_ctx *t);
void test_all_reduce_many(dist_ctx *t);
void test_reduce_scatter(dist_ctx *t);
void test_all_gather(dist_ctx *t);
void test_all_to_all_uneven(dist_ctx *t);
void test_broadcast(dist_ctx *t);
void test_count_limits(dist_ctx *t);
void test_copy_engine(dist_ctx *t);
void test_p2p_ring(dist_ctx *t);
void test_p2p_pairs(dist_ctx *t);
void test_p2p_tagged(dist_ctx *t);
void test_groups_tp_dp(dist_ctx *t);
void test_groups_partial_and_order(dist_ctx *t);
void test_barrier_and_queries(dist_ctx *t);
/* test_train_dp.c: data-parallel training against the one-rank run */
void test_train_dp(dist_ctx *t);
void test_train_distopt(dist_ctx *t);
void test_train_resume(dist_ctx *t);
void test_train_memory(dist_ctx *t);
/* test_train_tp.c: tensor- and sequence-parallel training against the one-rank run */
void test_train_tp(dist_ctx *t);
/* test_train_rng.c: Megatron's dropout streams under tensor parallelism (what each rank draws,
 * training, reproducibility) */
void test_train_rng(dist_ctx *t);
/* test_train_pp.c: pipeline-parallel training (with tensor and data parallelism) against one rank
 */
void test_train_pp(dist_ctx *t);
/* test_train_ep.c: expert parallelism (an MoE model's experts over EP ranks) against one rank */
void test_train_ep(dist_ctx *t);
/* test_train_graph.c: full-iteration graphs on parallel layouts against eager steps */
void test_train_graph(dist_ctx *t);
/* test_train_loss.c: --eod-mask-loss, --calculate-per-token-loss, the params norm and zero count
 * across layouts against one rank */
void test_train_loss(dist_ctx *t);

#endif
