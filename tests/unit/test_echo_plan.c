/* The ECHO offloading planner (src/core/echo_plan.h) against Megatron-LM's own planner: every
 * output of 200 plans and 50 reroutes in tests/golden/echo_plan/cases.json
 * (tools/reference/echo_plan_golden.py) must match exactly, from the host functions and from the
 * CPU backend's moe_echo_plan op. Also a worked example, invariants
 * (tokens conserved, no slot or rank over its capacity, the reroute moves exactly the planned
 * tokens) over the goldens and over seeded random cases, and every rejection. */
#include "test.h"

#include "golden_io.h"

#include "backend/backend.h"
#include "core/echo_plan.h"
#include "core/status.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <stdint.h>
#include <string.h>

enum { MAX_R = 8, MAX_E = 64, MAX_S = 32, MAX_T = 128, MAX_K = 8, SCRATCH = 1 << 14 };

typedef struct {
    int32_t spill[MAX_E], cap[MAX_R], h2s[MAX_E * MAX_S], r2s[MAX_R * MAX_S];
    int32_t rfh[MAX_R * MAX_E], load[MAX_R], scratch[SCRATCH];
    mg_echo_plan plan;
} plan_buf;

static mg_echo_plan *bind(plan_buf *b) {
    mg_echo_plan pl = {0, b->spill, b->cap, b->h2s, b->r2s, b->rfh, b->load};
    b->plan = pl;
    return &b->plan;
}

/* Checks what must hold for any plan of counts (EP, E); label names the case. */
static void expect_invariants(mg_test_ctx *t, const mg_echo_params *p, const int32_t *counts,
                              const mg_echo_plan *pl, const char *label) {
    int ne = p->experts, ns = p->spares, ep = p->ep, per = ns / ep;
    int64_t total = 0, after = 0;
    for (int i = 0; i < ep * ne; i++) total += counts[i];
    for (int r = 0; r < ep; r++) after += pl->rank_load[r];
    MG_EXPECT(after == total, "%s: %lld tokens after offloading, %lld before", label,
              (long long)after, (long long)total);
    int64_t rank_used[MAX_R] = {0};
    for (int j = 0; j < ns; j++) {
        int home = -1, homes = 0;
        for (int e = 0; e < ne; e++)
            if (pl->home_to_spare[e * ns + j] > 0) home = e, homes++;
        int64_t got = 0;
        for (int s = 0; s < ep; s++) got += pl->rank_to_spare[s * ns + j];
        int64_t cap = home < 0 ? 0 : pl->home_to_spare[home * ns + j];
        MG_EXPECT(homes <= 1 && got == cap, "%s: slot %d has %d homes, %lld tokens for %lld", label,
                  j, homes, (long long)got, (long long)cap);
        rank_used[j / per] += cap;
    }
    for (int r = 0; r < ep; r++)
        MG_EXPECT(rank_used[r] <= pl->spare_capacity[r], "%s: rank %d takes %lld, room %d", label,
                  r, (long long)rank_used[r], pl->spare_capacity[r]);
    for (int s = 0; s < ep; s++)
        for (int e = 0; e < ne; e++) {
            int64_t moved = 0;
            for (int j = 0; j < ns; j++)
                if (pl->home_to_spare[e * ns + j] > 0) moved += pl->rank_to_spare[s * ns + j];
            int32_t f = pl->rank_from_home[s * ne + e];
            MG_EXPECT(f == moved && f >= 0 && f <= counts[s * ne + e],
                      "%s: rank %d moves %d of expert %d's %d tokens, slots say %lld", label, s, f,
                      e, counts[s * ne + e], (long long)moved);
        }
}

/* Checks a reroute: each moved token went to a slot of its home expert, the slots got exactly
 * the plan's counts, every other entry is its home expert's new number. */
static void expect_reroute(mg_test_ctx *t, const mg_echo_params *p, const mg_echo_plan *pl,
                           int rank, int tokens, int k, const int32_t *ids, const int32_t *out,
                           const char *label) {
    int ns = p->spares;
    int32_t got[MAX_S] = {0};
    for (int i = 0; i < tokens * k; i++) {
        if (out[i] == mg_echo_home_slot(p, ids[i])) continue;
        int j = 0;
        while (j < ns && mg_echo_spare_slot(p, j) != out[i]) j++;
        MG_EXPECT(j < ns && pl->home_to_spare[ids[i] * ns + j] > 0,
                  "%s: token %d sent from expert %d to %d", label, i / k, ids[i], out[i]);
        if (j < ns) got[j]++;
    }
    for (int j = 0; j < ns; j++)
        MG_EXPECT(got[j] == pl->rank_to_spare[rank * ns + j], "%s: slot %d got %d, plan %d", label,
                  j, got[j], pl->rank_to_spare[rank * ns + j]);
}

/* EP 2, one expert per rank, one slot per rank. counts [[6, 2], [4, 0]]: expert 0 holds 10,
 * expert 1 holds 2; avg 6, so expert 0 spills 4 into rank 1's slot (j = 1). Breadth first splits
 * the 4 by 6:4 -> floor(2.4) = 2, floor(1.6) = 1; depth first gives the last one to rank 0. */
MG_TEST(echo_plan_worked_example) {
    mg_echo_params p = {2, 2, 2, MG_ECHO_ONE_SHOT_GREEDY, 0.0};
    int32_t counts[4] = {6, 2, 4, 0};
    plan_buf b;
    mg_echo_plan *pl = bind(&b);
    MG_EXPECT_OK(mg_echo_plan_compute(&p, counts, pl, b.scratch, SCRATCH));
    static const int32_t spill[2] = {4, 0}, cap[2] = {0, 4}, h2s[4] = {0, 4, 0, 0};
    static const int32_t r2s[4] = {0, 3, 0, 1}, rfh[4] = {3, 0, 1, 0}, load[2] = {6, 6};
    MG_EXPECT(pl->avg == 6 && !memcmp(pl->spillover, spill, sizeof spill) &&
                  !memcmp(pl->spare_capacity, cap, sizeof cap) &&
                  !memcmp(pl->home_to_spare, h2s, sizeof h2s),
              "avg %lld spill %d %d cap %d %d", (long long)pl->avg, b.spill[0], b.spill[1],
              b.cap[0], b.cap[1]);
    MG_EXPECT(!memcmp(pl->rank_to_spare, r2s, sizeof r2s) &&
                  !memcmp(pl->rank_from_home, rfh, sizeof rfh) &&
                  !memcmp(pl->rank_load, load, sizeof load),
              "rank_to_spare %d %d %d %d load %d %d", b.r2s[0], b.r2s[1], b.r2s[2], b.r2s[3],
              b.load[0], b.load[1]);
    /* Rank 0's 8 tokens, top-1. Numbering: home 0 -> 0, slot 0 -> 1, home 1 -> 2, slot 1 -> 3.
     * Its first three tokens of expert 0 (tokens 0, 2, 3) move to slot 1. */
    int32_t ids[8] = {0, 1, 0, 0, 1, 0, 0, 0}, out[8];
    static const int32_t want[8] = {3, 2, 3, 3, 2, 0, 0, 0};
    MG_EXPECT_OK(mg_echo_reroute(&p, pl, 0, 8, 1, ids, out, b.scratch, SCRATCH));
    MG_EXPECT(!memcmp(out, want, sizeof want), "rerouted %d %d %d %d %d %d %d %d", out[0], out[1],
              out[2], out[3], out[4], out[5], out[6], out[7]);
}

/* Flattens a (nested) JSON array of integers; returns the count or -1 past max. */
static int flatten(const cJSON *a, int32_t *out, int max) {
    int n = 0;
    const cJSON *x;
    cJSON_ArrayForEach(x, a) {
        if (cJSON_IsArray(x)) {
            int m = flatten(x, out + n, max - n);
            if (m < 0) return -1;
            n += m;
        } else {
            if (n >= max) return -1;
            out[n++] = (int32_t)x->valuedouble;
        }
    }
    return n;
}

static int expect_field(mg_test_ctx *t, const cJSON *plan, const char *key, const int32_t *got,
                        int n, int idx) {
    int32_t want[MAX_E * MAX_S];
    int m = flatten(cJSON_GetObjectItemCaseSensitive(plan, key), want, MAX_E * MAX_S);
    for (int i = 0; i < n && m == n; i++)
        if (got[i] != want[i]) {
            MG_EXPECT(0, "case %d: %s[%d] = %d, Megatron %d", idx, key, i, got[i], want[i]);
            return 0;
        }
    MG_EXPECT(m == n, "case %d: %s has %d values, want %d", idx, key, m, n);
    return m == n;
}

/* One golden case: its plan field by field, invariants, and its reroute when it has one. */
static mg_backend *g_cpu; /* the golden test's CPU backend */

/* The backend op (the CPU backend's moe_echo_plan, one buffer in mg_echo_plan_carve's layout)
 * gives the plan the host functions give; *out: the buffer (the caller frees it). */
static int expect_op_plan(mg_test_ctx *t, mg_backend *be, const mg_echo_params *p,
                          const int32_t *counts, const mg_echo_plan *want, int idx, int32_t **out) {
    size_t n = mg_echo_plan_ints(p), head = n - mg_echo_plan_scratch_ints(p);
    int32_t *buf = malloc(n * sizeof *buf), *scratch;
    int ok = buf != NULL;
    float *after = calloc((size_t)p->ep, sizeof *after);
    ok = ok && after;
    if (ok) MG_EXPECT_OK(be->moe_echo_plan(be, buf, after, counts, p));
    for (int r = 0; ok && r < p->ep; r++) ok = after[r] == (float)want->rank_load[r];
    free(after);
    if (ok) {
        mg_echo_plan got = mg_echo_plan_carve(p, buf, &scratch);
        ok = got.avg == want->avg && (size_t)(scratch - buf) == head &&
             !memcmp(got.spillover, want->spillover, sizeof(int32_t) * p->experts) &&
             !memcmp(got.spare_capacity, want->spare_capacity, sizeof(int32_t) * p->ep) &&
             !memcmp(got.home_to_spare, want->home_to_spare,
                     sizeof(int32_t) * p->experts * p->spares) &&
             !memcmp(got.rank_to_spare, want->rank_to_spare, sizeof(int32_t) * p->ep * p->spares) &&
             !memcmp(got.rank_from_home, want->rank_from_home,
                     sizeof(int32_t) * p->ep * p->experts) &&
             !memcmp(got.rank_load, want->rank_load, sizeof(int32_t) * p->ep);
    }
    MG_EXPECT(ok, "case %d: the backend's moe_echo_plan differs from the planner's", idx);
    *out = buf;
    return ok;
}

/* The backend's parallel reroute (moe_echo_reroute, from moe_permute's rows and counts, made
 * here as moe_permute makes them: experts in order, token order within one) gives the pairs the
 * sequential reroute gives. */
static void expect_op_reroute(mg_test_ctx *t, mg_backend *be, const mg_echo_params *p,
                              const int32_t *plan, int rank, int tokens, int k, const int32_t *ids,
                              const int32_t *want, int idx) {
    int32_t counts[MAX_E] = {0}, first[MAX_E], pos[MAX_T * MAX_K], got[MAX_T * MAX_K];
    const int n = tokens * k;
    for (int i = 0; i < n; i++) counts[ids[i]]++;
    for (int e = 0, row = 0; e < p->experts; row += counts[e++]) first[e] = row;
    for (int i = 0; i < n; i++) pos[i] = first[ids[i]]++;
    MG_EXPECT_OK(be->moe_echo_reroute(be, got, ids, pos, counts, plan, p, rank, n));
    MG_EXPECT(!memcmp(got, want, sizeof(int32_t) * n),
              "case %d: the backend's moe_echo_reroute differs from the sequential reroute", idx);
}

static int check_case(mg_test_ctx *t, const cJSON *c, int idx, int *reroutes) {
    const char *method = cJSON_GetObjectItemCaseSensitive(c, "method")->valuestring;
    mg_echo_params p = {cJSON_GetObjectItemCaseSensitive(c, "ep")->valueint,
                        cJSON_GetObjectItemCaseSensitive(c, "experts")->valueint,
                        cJSON_GetObjectItemCaseSensitive(c, "spares")->valueint,
                        strcmp(method, "approx_bin_packing") ? MG_ECHO_ONE_SHOT_GREEDY
                                                             : MG_ECHO_APPROX_BIN_PACKING,
                        cJSON_GetObjectItemCaseSensitive(c, "threshold")->valuedouble};
    int32_t counts[MAX_R * MAX_E];
    int ne = p.experts, ep = p.ep, ns = p.spares;
    if (flatten(cJSON_GetObjectItemCaseSensitive(c, "counts"), counts, MAX_R * MAX_E) != ep * ne) {
        MG_EXPECT(0, "case %d: bad counts", idx);
        return 0;
    }
    static plan_buf b;
    mg_echo_plan *pl = bind(&b);
    mg_status st = mg_echo_plan_compute(&p, counts, pl, b.scratch, SCRATCH);
    MG_EXPECT(st == MG_OK, "case %d: %s", idx, mg_error_message());
    if (st != MG_OK) return 0;
    const cJSON *want = cJSON_GetObjectItemCaseSensitive(c, "plan");
    const cJSON *avg = cJSON_GetObjectItemCaseSensitive(want, "avg");
    int ok = pl->avg == (int64_t)avg->valuedouble;
    MG_EXPECT(ok, "case %d: avg %lld, Megatron %.0f", idx, (long long)pl->avg, avg->valuedouble);
    ok &= expect_field(t, want, "spillover", pl->spillover, ne, idx);
    ok &= expect_field(t, want, "spare_capacity", pl->spare_capacity, ep, idx);
    ok &= expect_field(t, want, "home_to_spare", pl->home_to_spare, ne * ns, idx);
    ok &= expect_field(t, want, "rank_to_spare", pl->rank_to_spare, ep * ns, idx);
    ok &= expect_field(t, want, "rank_from_home", pl->rank_from_home, ep * ne, idx);
    ok &= expect_field(t, want, "rank_load", pl->rank_load, ep, idx);
    if (!g_cpu) MG_EXPECT_OK(mg_backend_cpu_create(&g_cpu, 1)); /* one for every case */
    int32_t *op_plan = NULL;
    if (g_cpu) ok &= expect_op_plan(t, g_cpu, &p, counts, pl, idx, &op_plan);
    char label[32];
    snprintf(label, sizeof label, "case %d", idx);
    expect_invariants(t, &p, counts, pl, label);
    const cJSON *ids_j = cJSON_GetObjectItemCaseSensitive(c, "ids");
    if (!ids_j) {
        free(op_plan);
        return ok;
    }
    int rank = cJSON_GetObjectItemCaseSensitive(c, "rank")->valueint;
    int k = cJSON_GetObjectItemCaseSensitive(c, "topk")->valueint,
        tokens = cJSON_GetArraySize(ids_j);
    int32_t ids[MAX_T * MAX_K], out[MAX_T * MAX_K], rows[MAX_T * MAX_K];
    if (flatten(ids_j, ids, MAX_T * MAX_K) != tokens * k ||
        flatten(cJSON_GetObjectItemCaseSensitive(c, "rerouted"), rows, MAX_T * MAX_K) !=
            tokens * k) {
        MG_EXPECT(0, "case %d: bad routing", idx);
        free(op_plan);
        return 0;
    }
    MG_EXPECT_OK(mg_echo_reroute(&p, pl, rank, tokens, k, ids, out, b.scratch, SCRATCH));
    if (op_plan) expect_op_reroute(t, g_cpu, &p, op_plan, rank, tokens, k, ids, out, idx);
    free(op_plan);
    expect_reroute(t, &p, pl, rank, tokens, k, ids, out, label);
    for (int i = 0; i < tokens; i++) { /* Megatron's rows are ascending column lists */
        int32_t *o = out + i * k;
        for (int a = 1; a < k; a++)
            for (int z = a; z > 0 && o[z - 1] > o[z]; z--) {
                int32_t tmp = o[z];
                o[z] = o[z - 1], o[z - 1] = tmp;
            }
    }
    int same = !memcmp(out, rows, sizeof(int32_t) * tokens * k);
    MG_EXPECT(same, "case %d: rerouted map differs from Megatron's", idx);
    *reroutes += same;
    return ok && same;
}

MG_TEST(echo_plan_golden_megatron) {
    cJSON *root = mg_golden_json(t, MG_GOLDEN_DIR "/echo_plan/cases.json");
    if (!root) return;
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases"), *c;
    int n = 0, passed = 0, reroutes = 0;
    cJSON_ArrayForEach(c, cases) passed += check_case(t, c, n++, &reroutes);
    if (g_cpu) g_cpu->destroy(g_cpu);
    g_cpu = NULL;
    MG_EXPECT(n == 208 && passed == n && reroutes == 50, "%d of %d cases, %d of 50 reroutes",
              passed, n, reroutes);
    cJSON_Delete(root);
}

static uint64_t next(uint64_t *s) { /* xorshift64* */
    *s ^= *s >> 12, *s ^= *s << 25, *s ^= *s >> 27;
    return (*s * 2685821657736338717ull) >> 33;
}

/* Seeded random plans of both methods (bin packing with averages below 7 too, where Megatron
 * would divide by zero) and random top-k routings: invariants and reroutes. */
MG_TEST(echo_plan_random_invariants) {
    uint64_t seed = 0x5eed1234abcdull;
    static plan_buf b;
    for (int it = 0; it < 400; it++) {
        mg_echo_params p = {2 << (next(&seed) % 3), 0, 0, MG_ECHO_ONE_SHOT_GREEDY, 0.0};
        p.experts = p.ep << (next(&seed) % 4);
        int per = 1 << (next(&seed) % 3);
        per = per > p.experts ? 1 : per;
        p.spares = p.ep * per;
        if (per == 1 && next(&seed) % 2)
            p.method = MG_ECHO_APPROX_BIN_PACKING;
        else
            p.threshold = (double)(next(&seed) % 5) / 4.0;
        int ne = p.experts, rank = (int)(next(&seed) % p.ep),
            tokens = 1 + (int)(next(&seed) % MAX_T);
        int k = 1 + (int)(next(&seed) % (ne < 4 ? ne : 4)), scale = 1 + (int)(next(&seed) % 3);
        int32_t counts[MAX_R * MAX_E] = {0}, ids[MAX_T * MAX_K], out[MAX_T * MAX_K];
        for (int tk = 0; tk < tokens; tk++) /* k distinct experts, skewed to the low ids */
            for (int q = 0; q < k; q++) {
                int32_t e;
                int dup;
                do {
                    e = (int32_t)(next(&seed) % ne);
                    e = next(&seed) % 2 ? e / scale : e;
                    dup = 0;
                    for (int u = 0; u < q; u++) dup |= ids[tk * k + u] == e;
                } while (dup);
                ids[tk * k + q] = e;
                counts[rank * ne + e]++;
            }
        for (int r = 0; r < p.ep; r++)
            for (int e = 0; r != rank && e < ne; e++)
                counts[r * ne + e] = (int32_t)(next(&seed) % (1 + (e < 2 ? 40 * scale : 8)));
        mg_echo_plan *pl = bind(&b);
        char label[32];
        snprintf(label, sizeof label, "random %d", it);
        MG_EXPECT_OK(mg_echo_plan_compute(&p, counts, pl, b.scratch, SCRATCH));
        expect_invariants(t, &p, counts, pl, label);
        MG_EXPECT_OK(mg_echo_reroute(&p, pl, rank, tokens, k, ids, out, b.scratch, SCRATCH));
        expect_reroute(t, &p, pl, rank, tokens, k, ids, out, label);
        if (t->failures) return;
    }
}

MG_TEST(echo_plan_rejects_bad_input) {
    static plan_buf b;
    mg_echo_plan *pl = bind(&b);
    int32_t counts[8] = {6, 2, 4, 0, 1, 1, 1, 1};
    mg_echo_params bad_e = {2, 3, 2, MG_ECHO_ONE_SHOT_GREEDY, 0.0};
    MG_EXPECT_ERROR(mg_echo_params_check(&bad_e), MG_ERR_USAGE, "do not split evenly over EP 2");
    mg_echo_params bad_s = {2, 2, 3, MG_ECHO_ONE_SHOT_GREEDY, 0.0};
    MG_EXPECT_ERROR(mg_echo_params_check(&bad_s), MG_ERR_USAGE, "3 spare expert slots");
    mg_echo_params no_s = {2, 2, 0, MG_ECHO_ONE_SHOT_GREEDY, 0.0};
    MG_EXPECT_ERROR(mg_echo_params_check(&no_s), MG_ERR_USAGE, "at least one per rank");
    mg_echo_params wide = {2, 2, 6, MG_ECHO_ONE_SHOT_GREEDY, 0.0};
    MG_EXPECT_ERROR(mg_echo_params_check(&wide), MG_ERR_USAGE, "exceed the 2 experts");
    mg_echo_params bp = {2, 4, 4, MG_ECHO_APPROX_BIN_PACKING, 0.0};
    MG_EXPECT_ERROR(mg_echo_params_check(&bp), MG_ERR_USAGE, "one spare slot per EP rank");
    mg_echo_params nan_t = {2, 2, 2, MG_ECHO_ONE_SHOT_GREEDY, NAN};
    MG_EXPECT_ERROR(mg_echo_params_check(&nan_t), MG_ERR_USAGE, "not finite");
    mg_echo_params zero = {0, 2, 2, MG_ECHO_ONE_SHOT_GREEDY, 0.0};
    MG_EXPECT_ERROR(mg_echo_params_check(&zero), MG_ERR_USAGE, "EP size 0");
    mg_echo_params one = {1, 2, 1, MG_ECHO_ONE_SHOT_GREEDY, 0.0}; /* plans; callers refuse it */
    MG_EXPECT_OK(mg_echo_plan_compute(&one, counts, pl, b.scratch, SCRATCH));
    mg_echo_params p = {2, 2, 2, MG_ECHO_ONE_SHOT_GREEDY, 0.0};
    MG_EXPECT_ERROR(mg_echo_plan_compute(&p, counts, pl, b.scratch, 4), MG_ERR_INTERNAL,
                    "plan scratch of 4 ints");
    int32_t neg[4] = {6, -2, 4, 0};
    MG_EXPECT_ERROR(mg_echo_plan_compute(&p, neg, pl, b.scratch, SCRATCH), MG_ERR_INTERNAL,
                    "negative token count -2 (rank 0, expert 1)");
    MG_EXPECT_OK(mg_echo_plan_compute(&p, counts, pl, b.scratch, SCRATCH));
    int32_t ids[8] = {0, 1, 0, 0, 1, 0, 0, 0}, out[8];
    int32_t dup[4] = {0, 1, 1, 1}, range[2] = {0, 2};
    MG_EXPECT_ERROR(mg_echo_reroute(&p, pl, 0, 2, 2, dup, out, b.scratch, SCRATCH), MG_ERR_INTERNAL,
                    "token 1's expert ids");
    MG_EXPECT_ERROR(mg_echo_reroute(&p, pl, 0, 2, 1, range, out, b.scratch, SCRATCH),
                    MG_ERR_INTERNAL, "out of [0, 2)");
    MG_EXPECT_ERROR(mg_echo_reroute(&p, pl, 0, 2, 1, ids, out, b.scratch, SCRATCH), MG_ERR_INTERNAL,
                    "moves more of expert 0's tokens than rank 0 routes");
    MG_EXPECT_ERROR(mg_echo_reroute(&p, pl, 2, 8, 1, ids, out, b.scratch, SCRATCH), MG_ERR_USAGE,
                    "rank 2 outside EP size 2");
    MG_EXPECT_ERROR(mg_echo_reroute(&p, pl, 0, 8, 3, ids, out, b.scratch, SCRATCH), MG_ERR_USAGE,
                    "top-3 of 2 experts");
}
