/* Pipeline schedules (src/parallel/pipeline/schedule.c) against Megatron-LM: worked examples (PP 4,
 * VPP 2, 8 microbatches; no pipelining) and Megatron's own docstrings spelled out, megatron-core
 * 0.16.1's functions' outputs (tests/golden/pp_schedule/schedule.json,
 * tools/reference/megatron_pp_schedule.py), invariants over every valid configuration up to P 8, V
 * 4, M 32, and every rejection. */
#include "test.h"

#include "golden_io.h"

#include "core/file.h"
#include "core/status.h"
#include "parallel/pipeline/p2p.h"
#include "parallel/pipeline/run.h"
#include "parallel/pipeline/schedule.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static mg_pp_schedule_params params(int p, int v, int m, int g) {
    mg_pp_schedule_params s = {p, v, m, g, false};
    return s;
}

/* Expects rank r's order to equal want (n entries). */
static void expect_order(mg_test_ctx *t, mg_pp_schedule_params s, int rank, const int *want,
                         int n) {
    int got[256];
    MG_EXPECT(n == 2 * s.microbatches * s.vpp, "test bug: %d entries for rank %d", n, rank);
    MG_EXPECT_OK(mg_pp_schedule_order(&s, rank, got));
    for (int i = 0; i < n; i++)
        if (got[i] != want[i]) {
            MG_EXPECT(0, "P %d V %d M %d rank %d: order[%d] = %d, want %d", s.pp, s.vpp,
                      s.microbatches, rank, i, got[i], want[i]);
            return;
        }
}

/* PP 4, VPP 2, 8 microbatches (G defaults to P = 4). Warm-up (P-r-1)*2 + (V-1)*G:
 * 10, 8, 6, 4. Rank 0's order, derived step by step. */
MG_TEST(schedule_interleaved_worked_example) {
    mg_pp_schedule_params s = params(4, 2, 8, 0);
    MG_EXPECT_OK(mg_pp_schedule_check(&s));
    static const int want_warmup[4] = {10, 8, 6, 4};
    for (int r = 0; r < 4; r++) {
        mg_pp_schedule_counts c;
        MG_EXPECT_OK(mg_pp_schedule_rank_counts(&s, r, &c));
        MG_EXPECT(c.total == 16 && c.warmup == want_warmup[r] && c.remaining == 16 - c.warmup &&
                      !c.all_warmup,
                  "rank %d: total %d warmup %d remaining %d", r, c.total, c.warmup, c.remaining);
    }
    /* table: chunk 0 for microbatches 0-3, chunk 1 for 0-3, then the same for 4-7 */
    mg_pp_schedule_entry table[16];
    MG_EXPECT_OK(mg_pp_schedule_table(&s, table));
    static const int tmb[16] = {0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7};
    static const int tch[16] = {0, 0, 0, 0, 1, 1, 1, 1, 0, 0, 0, 0, 1, 1, 1, 1};
    for (int k = 0; k < 16; k++)
        MG_EXPECT(table[k].microbatch == tmb[k] && table[k].chunk == tch[k],
                  "table[%d] = (%d, %d), want (%d, %d)", k, table[k].microbatch, table[k].chunk,
                  tmb[k], tch[k]);

    static const int r0[32] = {1,  1,  1,  1,  2,  2,  2,  2,  1,  1, /* warm-up: 10 forwards */
                               1,  -2, 1,  -2, 2,  -2, 2,  -2, 2,  -1, 2, -1, /* 1F1B */
                               -1, -1, -2, -2, -2, -2, -1, -1, -1, -1};       /* cool-down */
    static const int r1[32] = {1, 1,  1, 1,  2, 2,  2, 2,  1,  -2, 1,  -2, 1,  -2, 1,  -2,
                               2, -1, 2, -1, 2, -1, 2, -1, -2, -2, -2, -2, -1, -1, -1, -1};
    static const int r2[32] = {1, 1,  1, 1,  2, 2,  2, -2, 2, -2, 1,  -2, 1,  -2, 1,  -1,
                               1, -1, 2, -1, 2, -1, 2, -2, 2, -2, -2, -2, -1, -1, -1, -1};
    static const int r3[32] = {1, 1,  1, 1,  2, -2, 2, -2, 2, -2, 2, -2, 1,  -1, 1,  -1,
                               1, -1, 1, -1, 2, -2, 2, -2, 2, -2, 2, -2, -1, -1, -1, -1};
    expect_order(t, s, 0, r0, 32);
    expect_order(t, s, 1, r1, 32);
    expect_order(t, s, 2, r2, 32);
    expect_order(t, s, 3, r3, 32);

    /* Rank 0 decoded (microbatch, chunk): steady state F(6,0) B(0,1) F(7,0) B(1,1) F(4,1) B(2,1)
     * F(5,1) B(3,1) F(6,1) B(0,0) F(7,1) B(1,0); cool-down B (2,0) (3,0) (4..7,1) (4..7,0). */
    mg_pp_schedule_op ops[32];
    MG_EXPECT_OK(mg_pp_schedule_ops(&s, 0, ops));
    static const int mb[32] = {0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 0, 7, 1, 4, 2,
                               5, 3, 6, 0, 7, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7};
    for (int i = 0; i < 32; i++) {
        int ch = (r0[i] > 0 ? r0[i] : -r0[i]) - 1;
        MG_EXPECT(ops[i].microbatch == mb[i] && ops[i].chunk == ch && ops[i].forward == (r0[i] > 0),
                  "rank 0 op %d = %c(%d, %d), want %c(%d, %d)", i, ops[i].forward ? 'F' : 'B',
                  ops[i].microbatch, ops[i].chunk, r0[i] > 0 ? 'F' : 'B', mb[i], ch);
    }
    int slots;
    MG_EXPECT_OK(mg_pp_schedule_activation_slots(&s, 0, &slots));
    MG_EXPECT(slots == 11, "rank 0 holds %d activations at most, want warm-up 10 + 1", slots);
}

/* The examples in Megatron's own comments: convert_schedule_table_to_order's docstring (PP 2,
 * group 3, M 5, VP 2, warm-up 5 = rank 0's (2-0-1)*2 + 1*3) and
 * microbatch_group_size_per_vp_stage's (PP 2, VP 2, group 2, M 4: forwards run microbatches 0 1 0 1
 * 2 3 2 3). */
MG_TEST(schedule_megatron_docstring_examples) {
    mg_pp_schedule_params s = params(2, 2, 5, 3);
    MG_EXPECT_OK(mg_pp_schedule_check(&s));
    static const int want[20] = {1,  1, 1,  2, 2,  2,  -2, 1,  -2, 1,
                                 -2, 2, -1, 2, -1, -1, -2, -2, -1, -1};
    expect_order(t, s, 0, want, 20);
    mg_pp_schedule_entry table[10];
    MG_EXPECT_OK(mg_pp_schedule_table(&s, table));
    static const int mb5[10] = {0, 1, 2, 0, 1, 2, 3, 4, 3, 4},
                     ch5[10] = {0, 0, 0, 1, 1, 1, 0, 0, 1, 1};
    for (int k = 0; k < 10; k++)
        MG_EXPECT(table[k].microbatch == mb5[k] && table[k].chunk == ch5[k], "N3M5 table[%d]", k);

    s = params(2, 2, 4, 2);
    MG_EXPECT_OK(mg_pp_schedule_table(&s, table));
    static const int mb4[8] = {0, 1, 0, 1, 2, 3, 2, 3};
    for (int k = 0; k < 8; k++)
        MG_EXPECT(table[k].microbatch == mb4[k], "N2M4 table[%d].microbatch %d, want %d", k,
                  table[k].microbatch, mb4[k]);

    /* Non-interleaved 1F1B, P 4, M 8: rank 0 warms up with 3, rank 3 with none. */
    s = params(4, 1, 8, 0);
    static const int r0[16] = {1, 1, 1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, -1, -1, -1};
    static const int r3[16] = {1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1, 1, -1};
    expect_order(t, s, 0, r0, 16);
    expect_order(t, s, 3, r3, 16);
    /* Without pipelining: forward, backward per microbatch. */
    s = params(1, 1, 4, 0);
    static const int p1[8] = {1, -1, 1, -1, 1, -1, 1, -1};
    expect_order(t, s, 0, p1, 8);
}

/* ---- goldens from megatron-core ---- */

static int json_int(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(x) ? x->valueint : -999;
}
static const char *json_str(const cJSON *o, const char *key) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsString(x) ? x->valuestring : "";
}

/* The golden's order string: "1234" forward of chunk 0..3, "abcd" backward. */
static int decode_op(char ch) {
    return ch >= '1' && ch <= '4' ? ch - '0' : -(ch - 'a' + 1);
}

static const char *find_order(const cJSON *orders, int m, int v, int g, int w) {
    const cJSON *o;
    cJSON_ArrayForEach(o, orders) {
        if (json_int(o, "M") == m && json_int(o, "V") == v && json_int(o, "G") == g &&
            json_int(o, "W") == w)
            return json_str(o, "order");
    }
    return NULL;
}

MG_TEST(schedule_golden_megatron_core) {
    cJSON *root = mg_golden_json(t, "tests/golden/pp_schedule/schedule.json");
    if (!root) return;
    const cJSON *tables = cJSON_GetObjectItemCaseSensitive(root, "tables");
    const cJSON *cases = cJSON_GetObjectItemCaseSensitive(root, "cases");
    const cJSON *orders = cJSON_GetObjectItemCaseSensitive(root, "orders");
    const cJSON *checks = cJSON_GetObjectItemCaseSensitive(root, "interleaving_checks");
    MG_EXPECT(cJSON_GetArraySize(tables) > 200 && cJSON_GetArraySize(cases) > 800 &&
                  cJSON_GetArraySize(orders) > 1000 && cJSON_GetArraySize(checks) == 192,
              "golden sizes: tables %d cases %d orders %d checks %d", cJSON_GetArraySize(tables),
              cJSON_GetArraySize(cases), cJSON_GetArraySize(orders), cJSON_GetArraySize(checks));

    static const char digits[] = "0123456789abcdefghijklmnopqrstuvwxyz";
    static mg_pp_schedule_entry table[128];
    const cJSON *o;
    int n_tables = 0, n_ranks = 0, n_checks = 0;
    cJSON_ArrayForEach(o, tables) {
        int m = json_int(o, "M"), v = json_int(o, "V"), g = json_int(o, "G");
        mg_pp_schedule_params s = params(1, v, m, g > 0 ? g : 1);
        const char *mb = json_str(o, "microbatch"), *ch = json_str(o, "chunk");
        MG_EXPECT_OK(mg_pp_schedule_table(&s, table));
        for (int k = 0; k < m * v; k++)
            if (table[k].microbatch >= 36 || mb[k] != digits[table[k].microbatch] ||
                ch[k] != '0' + table[k].chunk) {
                MG_EXPECT(0, "M %d V %d G %d: table[%d] = (%d, %d), megatron (%c, %c)", m, v, g, k,
                          table[k].microbatch, table[k].chunk, mb[k], ch[k]);
                break;
            }
        n_tables++;
    }
    static int order[256];
    cJSON_ArrayForEach(o, cases) {
        int p = json_int(o, "P"), v = json_int(o, "V"), m = json_int(o, "M"), g = json_int(o, "G");
        mg_pp_schedule_params s = params(p, v, m, g);
        const cJSON *warm = cJSON_GetObjectItemCaseSensitive(o, "warmup");
        const cJSON *rem = cJSON_GetObjectItemCaseSensitive(o, "remaining");
        const char *all = json_str(o, "all_warmup");
        for (int r = 0; r < p; r++) {
            mg_pp_schedule_counts c;
            MG_EXPECT_OK(mg_pp_schedule_rank_counts(&s, r, &c));
            int w = cJSON_GetArrayItem(warm, r)->valueint;
            MG_EXPECT(c.warmup == w && c.remaining == cJSON_GetArrayItem(rem, r)->valueint &&
                          c.all_warmup == (all[r] == '1') && c.total == m * v,
                      "P %d V %d M %d G %d rank %d: warmup %d remaining %d all %d, megatron %d", p,
                      v, m, g, r, c.warmup, c.remaining, c.all_warmup, w);
            const char *want = find_order(orders, m, v, v > 1 ? g : 0, w);
            MG_EXPECT(want && (int)strlen(want) == 2 * m * v, "no golden order for M %d V %d W %d",
                      m, v, w);
            if (!want) continue;
            MG_EXPECT_OK(mg_pp_schedule_order(&s, r, order));
            for (int i = 0; i < 2 * m * v; i++)
                if (order[i] != decode_op(want[i])) {
                    MG_EXPECT(0, "P %d V %d M %d G %d rank %d: order[%d] = %d, megatron %d", p, v,
                              m, g, r, i, order[i], decode_op(want[i]));
                    break;
                }
            n_ranks++;
        }
    }
    /* forward_backward_pipelining_with_interleaving's checks, G = 1..25 per (P, M): '.' accepted,
     * 'R' G outside [P, M], 'B' a last group shorter than P. With P = 1 megatron-core's function
     * accepts, but Megatron-LM's arguments.py refuses a virtual pipeline without pipelining
     * first, and so does mg_pp_schedule_check. */
    cJSON_ArrayForEach(o, checks) {
        int p = json_int(o, "P"), m = json_int(o, "M");
        const char *res = json_str(o, "G");
        for (int g = 1; g <= 25 && res[g - 1]; g++) {
            mg_pp_schedule_params s = params(p, 2, m, g);
            char want = res[g - 1];
            mg_error_clear();
            mg_status st = mg_pp_schedule_check(&s);
            const char *msg = mg_error_message();
            if (p == 1) {
                MG_EXPECT(st == MG_ERR_USAGE && strstr(msg, "needs --pipeline-model-parallel-size"),
                          "P 1 M %d G %d: %s", m, g, msg);
            } else if (want == '.') {
                MG_EXPECT(st == MG_OK, "P %d M %d G %d: megatron accepts, we say %s", p, m, g, msg);
            } else {
                const char *needle = want == 'B' ? "leave a last group of"
                                     : m < p     ? "interleaving needs at least"
                                                 : "must lie in";
                MG_EXPECT(st == MG_ERR_USAGE && strstr(msg, needle),
                          "P %d M %d G %d: megatron '%c', we say %s", p, m, g, want, msg);
            }
            n_checks++;
        }
    }
    MG_EXPECT(n_tables > 200 && n_ranks > 3000 && n_checks == 192 * 25,
              "compared %d tables, %d rank orders, %d checks", n_tables, n_ranks, n_checks);
    cJSON_Delete(root);
}

/* ---- invariants over every valid configuration ---- */

/* Calls fn for every (P, V, M, G) with P 1..8, V 1..4, M 1..32 that mg_pp_schedule_check accepts;
 * G = 0 (default) and, with interleaving, every valid explicit G. */
typedef void (*config_fn)(mg_test_ctx *t, mg_pp_schedule_params s);
static int for_each_config(mg_test_ctx *t, config_fn fn) {
    int n = 0;
    for (int p = 1; p <= 8; p++)
        for (int v = 1; v <= 4; v++)
            for (int m = 1; m <= 32; m++)
                for (int g = 0; g <= (v > 1 ? m : 0); g++) {
                    mg_pp_schedule_params s = params(p, v, m, g);
                    if (mg_pp_schedule_check(&s) != MG_OK) continue;
                    fn(t, s);
                    n++;
                }
    return n;
}

static void check_rank_orders(mg_test_ctx *t, mg_pp_schedule_params s) {
    int p = s.pp, v = s.vpp, m = s.microbatches, total = m * v, g = mg_pp_schedule_group(&s);
    static mg_pp_schedule_op ops[256];
    static int order[256], f_at[32 * 4], b_at[32 * 4], last_mb_f[4], last_mb_b[4];
    static mg_pp_schedule_entry table[128];
    MG_EXPECT_OK(mg_pp_schedule_table(&s, table));
    for (int k = 0; k < total; k++) {
        mg_pp_schedule_entry e, eb;
        MG_EXPECT_OK(mg_pp_schedule_lookup(&s, k, true, &e));
        MG_EXPECT_OK(mg_pp_schedule_lookup(&s, k, false, &eb));
        MG_EXPECT(e.microbatch == table[k].microbatch && e.chunk == table[k].chunk &&
                      eb.microbatch == e.microbatch && eb.chunk == v - 1 - e.chunk,
                  "P %d V %d M %d G %d: lookup(%d) disagrees with the table", p, v, m, g, k);
    }
    for (int r = 0; r < p; r++) {
        mg_pp_schedule_counts c;
        MG_EXPECT_OK(mg_pp_schedule_rank_counts(&s, r, &c));
        /* the warm-up formula, restated */
        int w = p == 1 ? 0 : v == 1 ? p - r - 1 : 2 * (p - r - 1) + (v - 1) * g;
        if (w > total) w = total;
        MG_EXPECT(c.total == total && c.warmup == w && c.remaining == total - w &&
                      c.all_warmup == (w == total),
                  "P %d V %d M %d G %d rank %d: warmup %d, want %d", p, v, m, g, r, c.warmup, w);
        MG_EXPECT_OK(mg_pp_schedule_ops(&s, r, ops));
        MG_EXPECT_OK(mg_pp_schedule_order(&s, r, order));
        for (int i = 0; i < total; i++) f_at[i] = b_at[i] = -1;
        for (int i = 0; i < v; i++) last_mb_f[i] = last_mb_b[i] = -1;
        int nf = 0, nb = 0, live = 0, most = 0, first_b = -1;
        for (int i = 0; i < 2 * total; i++) {
            mg_pp_schedule_op op = ops[i];
            int key = op.microbatch * v + op.chunk;
            MG_EXPECT(order[i] == (op.forward ? op.chunk + 1 : -(op.chunk + 1)),
                      "order and ops disagree at %d", i);
            if (op.forward) {
                MG_EXPECT(f_at[key] < 0 && op.vid == nf++, "forward (%d, %d) twice or vid %d",
                          op.microbatch, op.chunk, op.vid);
                f_at[key] = i;
                /* each chunk sees its microbatches in increasing order ... */
                MG_EXPECT(op.microbatch > last_mb_f[op.chunk], "forward order of chunk %d",
                          op.chunk);
                last_mb_f[op.chunk] = op.microbatch;
                live++;
            } else {
                if (first_b < 0) first_b = i;
                MG_EXPECT(b_at[key] < 0 && op.vid == nb++, "backward (%d, %d) twice or vid %d",
                          op.microbatch, op.chunk, op.vid);
                MG_EXPECT(f_at[key] >= 0,
                          "P %d V %d M %d G %d rank %d: backward (%d, %d) at %d "
                          "before its forward",
                          p, v, m, g, r, op.microbatch, op.chunk, i);
                b_at[key] = i;
                /* ... and so do its backwards: FIFO, as Megatron pops input_tensors[chunk][0] */
                MG_EXPECT(op.microbatch > last_mb_b[op.chunk], "backward order of chunk %d",
                          op.chunk);
                last_mb_b[op.chunk] = op.microbatch;
                live--;
            }
            if (live > most) most = live;
        }
        MG_EXPECT(nf == total && nb == total, "rank %d: %d forwards, %d backwards of %d", r, nf, nb,
                  total);
        MG_EXPECT(first_b == c.warmup + (c.remaining > 0 ? 1 : 0),
                  "rank %d: first backward at %d, warm-up %d", r, first_b, c.warmup);
        int slots;
        MG_EXPECT_OK(mg_pp_schedule_activation_slots(&s, r, &slots));
        MG_EXPECT(slots == most && slots <= c.warmup + 1 &&
                      slots == (c.remaining > 0 ? c.warmup + 1 : c.total),
                  "P %d V %d M %d G %d rank %d: %d slots, simulated %d, warm-up %d", p, v, m, g, r,
                  slots, most, c.warmup);
    }
}

MG_TEST(schedule_invariants_every_config) {
    int n = for_each_config(t, check_rank_orders);
    MG_EXPECT(n > 5000, "only %d configurations", n);
}

/* Timeline: ops of a rank never overlap and run in its order, every op starts after its input
 * exists, durations are exact; and, measured over the whole grid and three duration ratios, the
 * makespan is exactly (M*V + P - 1) * (t_fwd + t_bwd): the bubble is P - 1 forward+backward
 * times, idle / busy = (P-1)/(V*M), Megatron's analytic ratio, and idle / total =
 * (P-1)/(M*V + P-1). Integer durations keep all times exact in double. */
static const double durations[3][2] = {{1, 2}, {1, 1}, {2, 3}};

/* Every op of timeline tl (ops of chunk c on rank r taking weight[r * V + c] times tf or tb;
 * weight NULL: 1) is the schedule's op in its order, lasts its duration, and starts exactly when
 * both its rank is free and its input exists (the list-scheduling rule, derived again here from
 * the ops' end times). Returns whether all held. */
static bool check_ops(mg_test_ctx *t, const mg_pp_schedule_params *s,
                      const mg_pp_schedule_timeline *tl, double tf, double tb,
                      const double *weight) {
    int p = s->pp, v = s->vpp, m = s->microbatches;
    static double f_end[8 * 32 * 4], b_end[8 * 32 * 4];
#define END(a, r, mb, c) (a)[((r)*m + (mb)) * v + (c)]
    for (int r = 0; r < p; r++)
        for (int i = 0; i < tl->ops_per_rank; i++) {
            const mg_pp_schedule_timed_op *o = &tl->ops[r * tl->ops_per_rank + i];
            END(o->op.forward ? f_end : b_end, r, o->op.microbatch, o->op.chunk) = o->end;
        }
    int bad = 0;
    for (int r = 0; r < p && !bad; r++) {
        static mg_pp_schedule_op ops[256];
        MG_EXPECT_OK(mg_pp_schedule_ops(s, r, ops));
        double prev_end = 0;
        for (int i = 0; i < tl->ops_per_rank && !bad; i++) {
            const mg_pp_schedule_timed_op *o = &tl->ops[r * tl->ops_per_rank + i];
            int mb = o->op.microbatch, c = o->op.chunk;
            double dep = 0, w = weight ? weight[r * v + c] : 1.0;
            if (o->op.forward)
                dep = r > 0 ? END(f_end, r - 1, mb, c) : c > 0 ? END(f_end, p - 1, mb, c - 1) : 0;
            else
                dep = r < p - 1   ? END(b_end, r + 1, mb, c)
                      : c < v - 1 ? END(b_end, 0, mb, c + 1)
                                  : END(f_end, r, mb, c);
            bad = o->op.microbatch != ops[i].microbatch || o->op.chunk != ops[i].chunk ||
                  o->op.forward != ops[i].forward || o->op.vid != ops[i].vid ||
                  o->start != fmax(prev_end, dep) ||
                  o->end - o->start != (o->op.forward ? tf : tb) * w ||
                  (!o->op.forward && o->start < END(f_end, r, mb, c));
            MG_EXPECT(!bad, "P %d V %d M %d G %d rank %d op %d: start %g end %g prev %g dep %g", p,
                      v, m, s->group, r, i, o->start, o->end, prev_end, dep);
            prev_end = o->end;
        }
    }
#undef END
    return !bad;
}

static void check_timeline(mg_test_ctx *t, mg_pp_schedule_params s) {
    int p = s.pp, v = s.vpp, m = s.microbatches;
    for (int d = 0; d < 3; d++) {
        double tf = durations[d][0], tb = durations[d][1];
        mg_pp_schedule_timeline tl;
        MG_EXPECT_OK(mg_pp_schedule_timeline_build(&s, tf, tb, &tl));
        if (!tl.ops) return;
        MG_EXPECT(tl.pp == p && tl.ops_per_rank == 2 * m * v, "timeline shape");
        check_ops(t, &s, &tl, tf, tb, NULL);
        double want = (m * v + p - 1) * (tf + tb);
        MG_EXPECT(tl.makespan == want && tl.busy == m * v * (tf + tb),
                  "P %d V %d M %d G %d (%g/%g): makespan %g, want (MV+P-1)(F+B) = %g", p, v, m,
                  s.group, tf, tb, tl.makespan, want);
        MG_EXPECT(fabs(tl.bubble_ratio - tl.analytic_ratio) < 1e-12 &&
                      fabs(tl.analytic_ratio - (double)(p - 1) / (v * m)) < 1e-15 &&
                      fabs(tl.bubble_fraction - (double)(p - 1) / (m * v + p - 1)) < 1e-12,
                  "P %d V %d M %d: bubble %g ratio %g analytic %g", p, v, m, tl.bubble_fraction,
                  tl.bubble_ratio, tl.analytic_ratio);
        mg_pp_schedule_timeline_free(&tl);
        MG_EXPECT(tl.ops == NULL, "free leaves ops");
    }
}

/* Uneven chunks (mg_pp_schedule_timeline_weighted): with integer weights, 0 included (an
 * embedding-only chunk), every op obeys the list-scheduling rule with its weighted duration;
 * each rank's busy time is its weights' sum times M (F + B); the makespan is at least the
 * busiest rank's time and at least microbatch 0's chain through every chunk; equal weights k
 * give k times the unweighted timeline. */
static void check_weighted(mg_test_ctx *t, mg_pp_schedule_params s) {
    int p = s.pp, v = s.vpp, m = s.microbatches;
    double w[8 * 4], busy[8], ones[8 * 4];
    for (int k = 0; k < p * v; k++) w[k] = (double)((k * 5 + 3) % 4), ones[k] = 3.0;
    mg_pp_schedule_timeline tl, base, tri;
    MG_EXPECT_OK(mg_pp_schedule_timeline_weighted(&s, 1, 2, w, busy, &tl));
    MG_EXPECT_OK(mg_pp_schedule_timeline_build(&s, 1, 2, &base));
    MG_EXPECT_OK(mg_pp_schedule_timeline_weighted(&s, 1, 2, ones, NULL, &tri));
    if (!tl.ops || !base.ops || !tri.ops) goto done;
    check_ops(t, &s, &tl, 1, 2, w);
    double chain = 0, most = 0;
    for (int r = 0; r < p; r++) {
        double b = 0;
        for (int c = 0; c < v; c++) b += m * 3.0 * w[r * v + c], chain += 3.0 * w[r * v + c];
        MG_EXPECT(busy[r] == b, "P %d V %d M %d: rank %d busy %g, want %g", p, v, m, r, busy[r], b);
        most = fmax(most, b);
    }
    MG_EXPECT(tl.busy == most && tl.makespan >= most && tl.makespan >= chain,
              "P %d V %d M %d: makespan %g, busiest %g (%g), chain %g", p, v, m, tl.makespan, most,
              tl.busy, chain);
    MG_EXPECT(tri.makespan == 3.0 * base.makespan && tri.busy == 3.0 * base.busy,
              "P %d V %d M %d: weights 3 give makespan %g, unweighted %g", p, v, m, tri.makespan,
              base.makespan);
done:
    mg_pp_schedule_timeline_free(&tl);
    mg_pp_schedule_timeline_free(&base);
    mg_pp_schedule_timeline_free(&tri);
}

MG_TEST(schedule_timeline_weighted) {
    int n = for_each_config(t, check_weighted);
    MG_EXPECT(n > 5000, "only %d configurations", n);
    mg_pp_schedule_params s = params(2, 1, 4, 0);
    mg_pp_schedule_timeline tl;
    MG_EXPECT_ERROR(mg_pp_schedule_timeline_weighted(&s, 1, 2, (double[]){1, -1}, NULL, &tl),
                    MG_ERR_USAGE, "pipeline chunk weight 1 is -1");
}

MG_TEST(schedule_timeline_every_config) {
    int n = for_each_config(t, check_timeline);
    MG_EXPECT(n > 5000, "only %d configurations", n);
}

/* ---- rejections ---- */

MG_TEST(schedule_rejections) {
    mg_pp_schedule_params s;
    int order[64], slots;
    mg_pp_schedule_counts c;
    mg_pp_schedule_entry e;
    mg_pp_schedule_timeline tl;

    s = params(0, 1, 4, 0);
    MG_EXPECT_ERROR(mg_pp_schedule_check(&s), MG_ERR_USAGE,
                    "--pipeline-model-parallel-size must be >= 1 (got 0)");
    s = params(2, 0, 4, 0);
    MG_EXPECT_ERROR(mg_pp_schedule_order(&s, 0, order), MG_ERR_USAGE,
                    "virtual pipeline stages per rank must be >= 1 (got 0)");
    s = params(2, 1, 0, 0);
    MG_EXPECT_ERROR(mg_pp_schedule_rank_counts(&s, 0, &c), MG_ERR_USAGE,
                    "number of microbatches (global batch / (micro batch * data-parallel size)) "
                    "must be >= 1 (got 0)");
    s = params(2, 2, 4, -3);
    MG_EXPECT_ERROR(mg_pp_schedule_table(&s, NULL), MG_ERR_USAGE,
                    "--microbatch-group-size-per-virtual-pipeline-stage must be >= 1 (got -3)");
    s = params(64, 64, 1 << 20, 0);
    MG_EXPECT_ERROR(mg_pp_schedule_check(&s), MG_ERR_USAGE, "pipeline schedule too large");

    /* caller bugs */
    s = params(4, 1, 8, 0);
    MG_EXPECT_ERROR(mg_pp_schedule_order(&s, 4, order), MG_ERR_INTERNAL,
                    "pipeline rank 4 out of range [0, 4)");
    MG_EXPECT_ERROR(mg_pp_schedule_activation_slots(&s, -1, &slots), MG_ERR_INTERNAL,
                    "pipeline rank -1 out of range");
    MG_EXPECT_ERROR(mg_pp_schedule_lookup(&s, -1, true, &e), MG_ERR_INTERNAL,
                    "virtual microbatch id -1 is negative");
    MG_EXPECT_OK(mg_pp_schedule_lookup(&s, 8, true, &e)); /* Megatron's lookahead: id M*V wraps */
    MG_EXPECT(e.microbatch == 0 && e.chunk == 0, "lookup(M*V) = (%d, %d)", e.microbatch, e.chunk);

    /* interleaving rules */
    s = params(1, 2, 8, 0);
    MG_EXPECT_ERROR(mg_pp_schedule_check(&s), MG_ERR_USAGE,
                    "interleaving (2 virtual stages per rank) needs --pipeline-model-parallel-size "
                    "> 1 (got 1); or use one model chunk per rank");
    s = params(2, 2, 9, 0);
    s.no_overlap_p2p = true;
    MG_EXPECT_ERROR(mg_pp_schedule_check(&s), MG_ERR_USAGE,
                    "needs --pipeline-model-parallel-size > 2 with --no-overlap-p2p-communication "
                    "(got 2)");
    s.pp = 3;
    MG_EXPECT_OK(mg_pp_schedule_check(&s));
    s = params(4, 2, 3, 0);
    MG_EXPECT_ERROR(mg_pp_schedule_check(&s), MG_ERR_USAGE,
                    "interleaving needs at least --pipeline-model-parallel-size 4 microbatches per "
                    "iteration, got 3; valid microbatch counts: 4, 8, 12");
    s = params(4, 2, 8, 2);
    MG_EXPECT_ERROR(mg_pp_schedule_check(&s), MG_ERR_USAGE,
                    "--microbatch-group-size-per-virtual-pipeline-stage 2 must lie in "
                    "[--pipeline-model-parallel-size 4, microbatches 8]; valid for 8 microbatches: "
                    "4, 8");
    s = params(4, 2, 6, 8);
    MG_EXPECT_ERROR(mg_pp_schedule_check(&s), MG_ERR_USAGE,
                    "--microbatch-group-size-per-virtual-pipeline-stage 8 must lie in "
                    "[--pipeline-model-parallel-size 4, microbatches 6]; valid for 6 microbatches: "
                    "6");
    /* the brief's example: 6 microbatches on 4 ranks in groups of 4 leave 2 */
    s = params(4, 2, 6, 0);
    MG_EXPECT_ERROR(mg_pp_schedule_check(&s), MG_ERR_USAGE,
                    "6 microbatches in groups of 4 (--microbatch-group-size-per-virtual-pipeline-"
                    "stage) leave a last group of 2, fewer than --pipeline-model-parallel-size 4 "
                    "(a dependency bubble); valid microbatch counts: 4, 8, 12; or group sizes: 6");
    s = params(4, 3, 7, 5);
    MG_EXPECT_ERROR(mg_pp_schedule_check(&s), MG_ERR_USAGE,
                    "valid microbatch counts: 5, 9, 10; or group sizes: 7");
    /* a huge G: the message stays quick, and the table is M's (one group) */
    s = params(4, 2, 6, 1 << 30);
    MG_EXPECT_ERROR(mg_pp_schedule_check(&s), MG_ERR_USAGE,
                    "--microbatch-group-size-per-virtual-pipeline-stage 1073741824 must lie in "
                    "[--pipeline-model-parallel-size 4, microbatches 6]; valid for 6 microbatches: "
                    "6");
    mg_pp_schedule_entry big[12], one_group[12];
    MG_EXPECT_OK(mg_pp_schedule_table(&s, big));
    s.group = 6;
    MG_EXPECT_OK(mg_pp_schedule_table(&s, one_group));
    MG_EXPECT(!memcmp(big, one_group, sizeof big), "G > M is one group of M");
    /* V = 1 takes any M and ignores G */
    s = params(4, 1, 3, 2);
    MG_EXPECT_OK(mg_pp_schedule_check(&s));

    /* the timeline checks first, then the durations */
    s = params(4, 2, 6, 0);
    MG_EXPECT_ERROR(mg_pp_schedule_timeline_build(&s, 1, 2, &tl), MG_ERR_USAGE,
                    "leave a last group");
    MG_EXPECT(tl.ops == NULL && tl.pp == 0, "a failed build leaves an empty timeline");
    s = params(4, 2, 8, 0);
    MG_EXPECT_ERROR(mg_pp_schedule_timeline_build(&s, 0, 2, &tl), MG_ERR_USAGE,
                    "op durations must be positive and finite (forward 0, backward 2)");
    MG_EXPECT_ERROR(mg_pp_schedule_timeline_build(&s, 1, INFINITY, &tl), MG_ERR_USAGE,
                    "backward inf");
    MG_EXPECT_ERROR(mg_pp_schedule_timeline_build(&s, NAN, 1, &tl), MG_ERR_USAGE, "forward nan");
}

/* The p2p plan (src/parallel/pipeline/p2p.c), for every valid schedule of the grid, training
 * and evaluation, checked independently of how it was made: each rank runs every op of its order
 * once and in order; a receive comes before the op that needs it (no op between) and brings what
 * the neighbour's matching op made (hidden state of the same microbatch, next virtual stage; or the
 * gradient, previous virtual stage); sends and receives pair up in order per pair of ranks; and
 * replaying all ranks' steps with blocking rendezvous (NCCL's rule: a rank's steps in order, a
 * send waits for its receive) finishes. Training holds exactly mg_pp_schedule_activation_slots
 * slots. And the messages' placement costs no time in the simulation's model (forward 1,
 * backward 2, blocking rendezvous) for 1F1B: the makespan is the schedule's own
 * ((M + P - 1) x 3, mg_pp_schedule_timeline); interleaved schedules, where a message can be due
 * while its sender is inside an op, stay within 1.25x of it (measured worst over the grid 1.246;
 * the plan before sending at the first boundary where the receiver waits: 2.7x, and 1.6x for
 * 1F1B). The plan for async sends (the streamed executor's) passes the same checks, a send
 * after the op that made it, and costs nothing for any schedule of the grid: a message then
 * never waits for its sender's next op. */
static void check_p2p(mg_test_ctx *t, mg_pp_schedule_params s) {
    int P = s.pp, V = s.vpp;
    for (int fo = 0; fo < 4; fo++) {
        bool async = fo >= 2;
        mg_p2p_plan plan[8];
        int at[8] = {0};
        for (int r = 0; r < P; r++) {
            MG_EXPECT_OK(mg_p2p_plan_build(&s, fo & 1, async, r, &plan[r]));
            if (!plan[r].steps) return;
            int want;
            MG_EXPECT_OK(mg_pp_schedule_activation_slots(&s, r, &want));
            MG_EXPECT(fo & 1 ? plan[r].n_slots <= want : plan[r].n_slots == want,
                      "P %d V %d M %d rank %d: %d slots, schedule %d", P, V, s.microbatches, r,
                      plan[r].n_slots, want);
            int next_op = 0;
            for (int i = 0; i < plan[r].n_steps; i++) {
                const mg_p2p_step *st = &plan[r].steps[i];
                if (st->kind == MG_P2P_OP) MG_EXPECT(st->op == next_op++, "op order");
                if (st->kind == MG_P2P_SEND)
                    MG_EXPECT(st->op < next_op, "a send after the op that made it");
                if (st->kind == MG_P2P_RECV) { /* the next op is the one that needs it */
                    int j = i + 1;
                    while (j < plan[r].n_steps && plan[r].steps[j].kind != MG_P2P_OP) j++;
                    MG_EXPECT(j < plan[r].n_steps && plan[r].steps[j].op == st->op,
                              "a receive before its op, no op between");
                }
            }
            MG_EXPECT(next_op == plan[r].n_ops, "rank %d ran %d of %d ops", r, next_op,
                      plan[r].n_ops);
        }
        if (!(fo & 1)) { /* what the placement of messages costs in the simulation's model */
            mg_pp_schedule_timeline tl;
            MG_EXPECT_OK(mg_pp_schedule_timeline_build(&s, 1, 2, &tl));
            double e = plan[0].makespan / tl.makespan;
            MG_EXPECT(V == 1 || async ? e <= 1 + 1e-12 : e <= 1.25,
                      "P %d V %d M %d G %d%s: the plan's makespan %.1f, the schedule's %.1f", P, V,
                      s.microbatches, s.group, async ? " (async sends)" : "", plan[0].makespan,
                      tl.makespan);
            mg_pp_schedule_timeline_free(&tl);
        }
        /* the blocking replay */
        for (bool progress = true; progress;) {
            progress = false;
            for (int r = 0; r < P; r++) {
                while (at[r] < plan[r].n_steps && plan[r].steps[at[r]].kind == MG_P2P_OP) {
                    at[r]++;
                    progress = true;
                }
                if (at[r] >= plan[r].n_steps) continue;
                const mg_p2p_step *a = &plan[r].steps[at[r]];
                int q = a->peer;
                if (at[q] >= plan[q].n_steps) continue;
                const mg_p2p_step *b = &plan[q].steps[at[q]];
                if (b->kind == MG_P2P_OP || b->peer != r ||
                    (b->kind == MG_P2P_SEND) == (a->kind == MG_P2P_SEND))
                    continue;
                const mg_p2p_step *snd = a->kind == MG_P2P_SEND ? a : b;
                const mg_p2p_step *rcv = a->kind == MG_P2P_SEND ? b : a;
                int sr = a->kind == MG_P2P_SEND ? r : q, rr = a->kind == MG_P2P_SEND ? q : r;
                const mg_pp_schedule_op *so = &plan[sr].ops[snd->op], *ro = &plan[rr].ops[rcv->op];
                int dc = so->forward ? (sr == P - 1) : -(sr == 0);
                MG_EXPECT(snd->grad == rcv->grad && so->forward == !snd->grad &&
                              ro->forward == so->forward && ro->microbatch == so->microbatch &&
                              ro->chunk == so->chunk + dc &&
                              rr == (so->forward ? (sr + 1) % P : (sr - 1 + P) % P),
                          "P %d V %d M %d: rank %d's message lands in the wrong op of rank %d", P,
                          V, s.microbatches, sr, rr);
                at[r]++;
                at[q]++;
                progress = true;
            }
        }
        for (int r = 0; r < P; r++) {
            MG_EXPECT(at[r] == plan[r].n_steps,
                      "P %d V %d M %d G %d %s%s: rank %d stops at step %d "
                      "of %d",
                      P, V, s.microbatches, s.group, fo & 1 ? "eval" : "train",
                      async ? " (async sends)" : "", r, at[r], plan[r].n_steps);
            mg_p2p_plan_free(&plan[r]);
        }
        (void)V;
    }
}

MG_TEST(schedule_p2p_plan_every_config) {
    int n = for_each_config(t, check_p2p);
    MG_EXPECT(n > 5000, "only %d configurations", n);
}

/* How a pipeline's messages move (parallel/pipeline/run.h): in the schedule's order without
 * overlap or one stage; tagged where the group has non-blocking tagged messages (MPI); on a
 * stream of their own for interleaved schedules on a backend with streams (NCCL), 1F1B in order
 * there; and the buffers each way takes: a landing buffer only when tagged, and the streamed
 * plan's gradient buffers (sends that do not hold their sender may keep more waiting). */
MG_TEST(pipeline_comm_mode_and_buffers) {
    mg_pp_schedule_params one = params(1, 1, 4, 0), f1b = params(2, 1, 8, 0),
                          il = params(2, 2, 8, 0);
    MG_EXPECT(mg_pipeline_comm(&il, false, true, true) == MG_PIPE_IN_ORDER, "no overlap");
    MG_EXPECT(mg_pipeline_comm(&one, true, true, true) == MG_PIPE_IN_ORDER, "one stage");
    MG_EXPECT(mg_pipeline_comm(&f1b, true, true, false) == MG_PIPE_TAGGED, "MPI 1F1B");
    MG_EXPECT(mg_pipeline_comm(&il, true, true, true) == MG_PIPE_TAGGED, "MPI interleaved");
    MG_EXPECT(mg_pipeline_comm(&f1b, true, false, true) == MG_PIPE_IN_ORDER, "NCCL 1F1B");
    MG_EXPECT(mg_pipeline_comm(&il, true, false, true) == MG_PIPE_STREAMED, "NCCL interleaved");
    MG_EXPECT(mg_pipeline_comm(&il, true, false, false) == MG_PIPE_IN_ORDER, "no streams");
    for (int r = 0; r < 2; r++) {
        int slots[3];
        size_t bytes[3];
        const mg_pipe_comm ways[3] = {MG_PIPE_IN_ORDER, MG_PIPE_TAGGED, MG_PIPE_STREAMED};
        for (int k = 0; k < 3; k++)
            MG_EXPECT_OK(mg_pipeline_sizes(&il, r, 100, MG_F32, ways[k], &slots[k], &bytes[k]));
        mg_p2p_plan blocking, async;
        MG_EXPECT_OK(mg_p2p_plan_build(&il, false, false, r, &blocking));
        MG_EXPECT_OK(mg_p2p_plan_build(&il, false, true, r, &async));
        MG_EXPECT(slots[0] == slots[1] && slots[1] == slots[2], "rank %d: slots %d %d %d", r,
                  slots[0], slots[1], slots[2]);
        MG_EXPECT(bytes[1] == bytes[0] + 400, "rank %d: tagged %zu bytes, in order %zu", r,
                  bytes[1], bytes[0]);
        MG_EXPECT(bytes[2] == (size_t)async.n_grad_bufs * 400 &&
                      bytes[0] == (size_t)blocking.n_grad_bufs * 400,
                  "rank %d: streamed %zu bytes for %d buffers, in order %zu for %d", r, bytes[2],
                  async.n_grad_bufs, bytes[0], blocking.n_grad_bufs);
        mg_p2p_plan_free(&blocking);
        mg_p2p_plan_free(&async);
    }
}
