#include "parallel/pipeline/schedule.h"

#include "core/status.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Sizes are ints throughout: 2*M*V ops per rank and P*M*V dependency slots must fit, which this
 * bound keeps far away from INT_MAX (a real run has M*V in the hundreds). */
#define MAX_VIRTUAL_MICROBATCHES (1 << 24)

int mg_pp_schedule_group(const mg_pp_schedule_params *s) {
    return s->group > 0 ? s->group : s->pp;
}

/* What every function needs: sizes that make sense. */
static mg_status check_sizes(const mg_pp_schedule_params *s) {
    if (s->pp < 1)
        return MG_FAIL(MG_ERR_USAGE, "--pipeline-model-parallel-size must be >= 1 (got %d)", s->pp);
    if (s->vpp < 1)
        return MG_FAIL(MG_ERR_USAGE,
                       "the number of virtual pipeline stages per rank must be >= 1 (got %d)",
                       s->vpp);
    if (s->microbatches < 1)
        return MG_FAIL(MG_ERR_USAGE,
                       "the number of microbatches (global batch / (micro batch * data-parallel "
                       "size)) must be >= 1 (got %d)",
                       s->microbatches);
    if (s->group < 0)
        return MG_FAIL(MG_ERR_USAGE,
                       "--microbatch-group-size-per-virtual-pipeline-stage must be >= 1 (got %d)",
                       s->group);
    if (s->microbatches > MAX_VIRTUAL_MICROBATCHES / s->vpp ||
        s->pp > MAX_VIRTUAL_MICROBATCHES / (s->microbatches * s->vpp))
        return MG_FAIL(MG_ERR_USAGE,
                       "pipeline schedule too large: %d ranks x %d microbatches x %d chunks", s->pp,
                       s->microbatches, s->vpp);
    return MG_OK;
}

static mg_status check_rank(const mg_pp_schedule_params *s, int rank) {
    MG_CHECK(check_sizes(s));
    if (rank < 0 || rank >= s->pp)
        return MG_FAIL(MG_ERR_INTERNAL, "pipeline rank %d out of range [0, %d)", rank, s->pp);
    return MG_OK;
}

/* ---- validity ---- */

/* Megatron accepts group size g for m microbatches on p ranks when p <= g <= m and the last
 * group is empty or holds at least p microbatches. */
static bool group_ok(int p, int m, int g) {
    int r = m % g;
    return g >= p && g <= m && (r == 0 || r >= p);
}

/* Appends to buf the valid values nearest to `around` (one below, two above, at most), searching
 * [lo, hi]: the "valid: ..." tail of an error line. */
static void nearest_valid(char *buf, size_t n, int around, int lo, int hi, int p, int fixed,
                          bool vary_m) {
    int found[3], nf = 0;
    for (int x = around - 1 < hi ? around - 1 : hi; x >= lo && nf < 1; x--)
        if (vary_m ? group_ok(p, x, fixed) : group_ok(p, fixed, x)) found[nf++] = x;
    for (int x = around + 1 > lo ? around + 1 : lo; x <= hi && nf < 3; x++)
        if (vary_m ? group_ok(p, x, fixed) : group_ok(p, fixed, x)) found[nf++] = x;
    size_t len = strlen(buf);
    if (nf == 0) snprintf(buf + len, n - len, "none");
    for (int i = 0; i < nf; i++) {
        len = strlen(buf);
        snprintf(buf + len, n - len, "%s%d", i ? ", " : "", found[i]);
    }
}

mg_status mg_pp_schedule_check(const mg_pp_schedule_params *s) {
    MG_CHECK(check_sizes(s));
    if (s->vpp == 1) return MG_OK; /* the non-interleaved schedule takes any M and ignores G */
    int p = s->pp, m = s->microbatches, g = mg_pp_schedule_group(s), v = s->vpp;
    if (p < 2 || (s->no_overlap_p2p && p < 3))
        return MG_FAIL(MG_ERR_USAGE,
                       "interleaving (%d virtual stages per rank) needs --pipeline-model-parallel-"
                       "size > %d%s (got %d); or use one model chunk per rank",
                       v, s->no_overlap_p2p ? 2 : 1,
                       s->no_overlap_p2p ? " with --no-overlap-p2p-communication" : "", p);
    char valid[128] = "";
    if (g < p || g > m) {
        /* The group must be at least P (deep enough to keep every stage busy) and at most M. */
        if (m < p) {
            /* No group size can work: M itself is too small. */
            nearest_valid(valid, sizeof valid, m, 1, 4 * p + 2 * m, p, g < p ? p : g, true);
            return MG_FAIL(MG_ERR_USAGE,
                           "interleaving needs at least --pipeline-model-parallel-size %d "
                           "microbatches per iteration, got %d; valid microbatch counts: %s",
                           p, m, valid);
        }
        nearest_valid(valid, sizeof valid, g, p, m, p, m, false);
        return MG_FAIL(MG_ERR_USAGE,
                       "--microbatch-group-size-per-virtual-pipeline-stage %d must lie in "
                       "[--pipeline-model-parallel-size %d, microbatches %d]; valid for %d "
                       "microbatches: %s",
                       g, p, m, m, valid);
    }
    int last = m % g;
    if (last != 0 && last < p) {
        /* A last group shorter than P leaves stages waiting on each other: Megatron refuses. */
        char groups[128] = "";
        nearest_valid(valid, sizeof valid, m, g, m + 4 * g, p, g, true);
        nearest_valid(groups, sizeof groups, g, p, m, p, m, false);
        return MG_FAIL(MG_ERR_USAGE,
                       "%d microbatches in groups of %d (--microbatch-group-size-per-virtual-"
                       "pipeline-stage) leave a last group of %d, fewer than "
                       "--pipeline-model-parallel-size %d (a dependency bubble); valid "
                       "microbatch counts: %s; or group sizes: %s",
                       m, g, last, p, valid, groups);
    }
    return MG_OK;
}

/* ---- counts, table, order ---- */

mg_status mg_pp_schedule_rank_counts(const mg_pp_schedule_params *s, int rank,
                                     mg_pp_schedule_counts *out) {
    MG_CHECK(check_rank(s, rank));
    int total = s->microbatches * s->vpp;
    long warmup;
    if (s->pp == 1)
        warmup = 0; /* Megatron's no-pipelining path: forward, backward, forward, ... */
    else if (s->vpp == 1)
        warmup = s->pp - rank - 1;
    else /* every rank first fills V-1 chunks for one group, later stages start 1F1B sooner */
        warmup = 2L * (s->pp - rank - 1) + (long)(s->vpp - 1) * mg_pp_schedule_group(s);
    out->all_warmup = warmup >= total;
    out->total = total;
    out->warmup = out->all_warmup ? total : (int)warmup;
    out->remaining = total - out->warmup;
    return MG_OK;
}

/* Entry k of the table, in closed form: groups before the last are full (G microbatches, so
 * G*V entries), hence group k / (G*V) starts at microbatch (k / (G*V)) * G; within a group the
 * chunk is the slow index. Any G >= M is one group, so G is clamped to M (no overflow in G*V). */
static mg_pp_schedule_entry table_entry(int m, int v, int g, int k) {
    if (g > m) g = m;
    int start = (k / (g * v)) * g;
    int size = start + g >= m ? m - start : g; /* Megatron: the group with start + G >= M is last */
    int idx = k - start * v;
    mg_pp_schedule_entry e = {start + idx % size, idx / size};
    return e;
}

mg_status mg_pp_schedule_table(const mg_pp_schedule_params *s, mg_pp_schedule_entry *table) {
    MG_CHECK(check_sizes(s));
    int total = s->microbatches * s->vpp, g = mg_pp_schedule_group(s);
    for (int k = 0; k < total; k++) table[k] = table_entry(s->microbatches, s->vpp, g, k);
    return MG_OK;
}

/* Forward or backward vid (taken modulo M*V) as (microbatch, chunk). Backward k pops the oldest
 * saved forward of chunk V-1-c, c = table[k].chunk; forwards of one chunk run in microbatch
 * order, so that is microbatch table[k].microbatch. */
static mg_pp_schedule_entry lookup(const mg_pp_schedule_params *s, int vid, bool forward) {
    mg_pp_schedule_entry e = table_entry(s->microbatches, s->vpp, mg_pp_schedule_group(s),
                                         vid % (s->microbatches * s->vpp));
    if (!forward) e.chunk = s->vpp - 1 - e.chunk;
    return e;
}

mg_status mg_pp_schedule_lookup(const mg_pp_schedule_params *s, int vid, bool forward,
                                mg_pp_schedule_entry *out) {
    MG_CHECK(check_sizes(s));
    if (vid < 0) return MG_FAIL(MG_ERR_INTERNAL, "virtual microbatch id %d is negative", vid);
    *out = lookup(s, vid, forward);
    return MG_OK;
}

static mg_pp_schedule_op make_op(const mg_pp_schedule_params *s, int vid, bool forward) {
    mg_pp_schedule_entry e = lookup(s, vid, forward);
    return (mg_pp_schedule_op){e.microbatch, e.chunk, forward, vid};
}

mg_status mg_pp_schedule_ops(const mg_pp_schedule_params *s, int rank, mg_pp_schedule_op *ops) {
    mg_pp_schedule_counts c;
    MG_CHECK(mg_pp_schedule_rank_counts(s, rank, &c));
    int n = 0;
    for (int f = 0; f < c.warmup; f++) ops[n++] = make_op(s, f, true);
    for (int i = 0; i < c.remaining; i++) {
        ops[n++] = make_op(s, c.warmup + i, true);
        ops[n++] = make_op(s, i, false);
    }
    for (int b = c.remaining; b < c.total; b++) ops[n++] = make_op(s, b, false);
    return MG_OK;
}

void mg_pp_schedule_ops_encode(const mg_pp_schedule_op *ops, int n, int *order) {
    for (int i = 0; i < n; i++) order[i] = ops[i].forward ? ops[i].chunk + 1 : -(ops[i].chunk + 1);
}

int mg_pp_schedule_ops_slots(const mg_pp_schedule_op *ops, int n) {
    /* Each backward frees the slot of its own forward, which the order always ran earlier
     * (tested), so a counter is the whole simulation. */
    int live = 0, most = 0;
    for (int i = 0; i < n; i++) {
        live += ops[i].forward ? 1 : -1;
        if (live > most) most = live;
    }
    return most;
}

/* Rank r's ops in a malloc'd (2*M*V) array, for the functions that only need them briefly. */
static mg_status rank_ops(const mg_pp_schedule_params *s, int rank, mg_pp_schedule_op **out,
                          int *n) {
    MG_CHECK(check_rank(s, rank));
    *n = 2 * s->microbatches * s->vpp;
    mg_pp_schedule_op *ops = malloc((size_t)*n * sizeof *ops);
    if (!ops) return MG_FAIL(MG_ERR_NOMEM, "out of memory for a pipeline order of %d ops", *n);
    mg_status st = mg_pp_schedule_ops(s, rank, ops);
    if (st != MG_OK) {
        free(ops);
        return st;
    }
    *out = ops;
    return MG_OK;
}

mg_status mg_pp_schedule_order(const mg_pp_schedule_params *s, int rank, int *order) {
    mg_pp_schedule_op *ops;
    int n;
    MG_CHECK(rank_ops(s, rank, &ops, &n));
    mg_pp_schedule_ops_encode(ops, n, order);
    free(ops);
    return MG_OK;
}

mg_status mg_pp_schedule_activation_slots(const mg_pp_schedule_params *s, int rank, int *slots) {
    mg_pp_schedule_op *ops;
    int n;
    MG_CHECK(rank_ops(s, rank, &ops, &n));
    *slots = mg_pp_schedule_ops_slots(ops, n);
    free(ops);
    return MG_OK;
}

/* ---- timeline ---- */

void mg_pp_schedule_timeline_free(mg_pp_schedule_timeline *t) {
    free(t->ops);
    memset(t, 0, sizeof *t);
}

mg_status mg_pp_schedule_timeline_build(const mg_pp_schedule_params *s, double t_fwd, double t_bwd,
                                        mg_pp_schedule_timeline *out) {
    return mg_pp_schedule_timeline_weighted(s, t_fwd, t_bwd, NULL, NULL, out);
}

mg_status mg_pp_schedule_timeline_weighted(const mg_pp_schedule_params *s, double t_fwd,
                                           double t_bwd, const double *weight, double *rank_busy,
                                           mg_pp_schedule_timeline *out) {
    memset(out, 0, sizeof *out);
    MG_CHECK(mg_pp_schedule_check(s));
    if (!(t_fwd > 0 && t_bwd > 0 && isfinite(t_fwd) && isfinite(t_bwd)))
        return MG_FAIL(MG_ERR_USAGE,
                       "op durations must be positive and finite (forward %g, "
                       "backward %g)",
                       t_fwd, t_bwd);
    int p = s->pp, m = s->microbatches, v = s->vpp, per = 2 * m * v;
    for (int k = 0; weight && k < p * v; k++)
        if (!(weight[k] >= 0 && isfinite(weight[k])))
            return MG_FAIL(MG_ERR_USAGE, "pipeline chunk weight %d is %g: expected >= 0, finite", k,
                           weight[k]);
    size_t slots = (size_t)p * m * v;
    /* f_end / b_end: (P, M, V) end time of each forward / backward, -1 until it has run. */
    double *f_end = malloc(slots * sizeof *f_end), *b_end = malloc(slots * sizeof *b_end);
    int *next = calloc((size_t)p, sizeof *next);
    double *clock = calloc((size_t)p, sizeof *clock);
    mg_pp_schedule_op *ops = malloc((size_t)per * sizeof *ops); /* (2*M*V) one rank's order */
    out->ops = malloc((size_t)p * per * sizeof *out->ops);
    mg_status st = MG_OK;
    if (!f_end || !b_end || !next || !clock || !ops || !out->ops) {
        st = MG_FAIL(MG_ERR_NOMEM, "out of memory for a %d-rank pipeline timeline", p);
        goto done;
    }
    for (size_t i = 0; i < slots; i++) f_end[i] = b_end[i] = -1.0;
    out->pp = p;
    out->ops_per_rank = per;
    for (int r = 0; r < p; r++) {
        MG_CHECK_GOTO(mg_pp_schedule_ops(s, r, ops), st, done);
        for (int i = 0; i < per; i++) out->ops[(size_t)r * per + i].op = ops[i];
    }
#define AT(arr, r, mb, c) (arr)[((size_t)(r)*m + (mb)) * v + (c)]
    /* List scheduling on fixed orders: sweep the ranks, each running ops while their inputs
     * exist. Start times depend only on the inputs' end times, so the sweep order does not
     * matter; a sweep without progress before the end is a deadlock. */
    int done = 0, total = p * per;
    while (done < total) {
        int progressed = 0;
        for (int r = 0; r < p; r++) {
            while (next[r] < per) {
                mg_pp_schedule_timed_op *t = &out->ops[(size_t)r * per + next[r]];
                int mb = t->op.microbatch, c = t->op.chunk;
                double ready;
                if (t->op.forward) {
                    ready = r > 0   ? AT(f_end, r - 1, mb, c)
                            : c > 0 ? AT(f_end, p - 1, mb, c - 1)
                                    : 0;
                } else {
                    ready = r < p - 1   ? AT(b_end, r + 1, mb, c)
                            : c < v - 1 ? AT(b_end, 0, mb, c + 1)
                                        : AT(f_end, r, mb, c);
                }
                if (ready < 0) break; /* the input has not been produced yet */
                t->start = fmax(clock[r], ready);
                t->end =
                    t->start + (t->op.forward ? t_fwd : t_bwd) * (weight ? weight[r * v + c] : 1.0);
                clock[r] = t->end;
                AT(t->op.forward ? f_end : b_end, r, mb, c) = t->end;
                next[r]++;
                done++;
                progressed = 1;
            }
        }
        if (!progressed) {
            st = MG_FAIL(MG_ERR_INTERNAL,
                         "pipeline orders deadlock (P %d, V %d, M %d, G %d) after %d of %d ops", p,
                         v, m, mg_pp_schedule_group(s), done, total);
            goto done;
        }
    }
#undef AT
    for (int r = 0; r < p; r++) out->makespan = fmax(out->makespan, clock[r]);
    out->busy = 0.0;
    for (int r = 0; r < p; r++) { /* the busiest rank's compute (with weights, ranks differ) */
        double b = 0.0;
        for (int c = 0; c < v; c++)
            b += (double)m * (t_fwd + t_bwd) * (weight ? weight[r * v + c] : 1.0);
        if (rank_busy) rank_busy[r] = b;
        out->busy = fmax(out->busy, b);
    }
    out->bubble_fraction = 1.0 - out->busy / out->makespan;
    out->bubble_ratio = out->makespan / out->busy - 1.0;
    out->analytic_ratio = (double)(p - 1) / ((double)v * m);
done:
    free(f_end);
    free(b_end);
    free(next);
    free(clock);
    free(ops);
    if (st != MG_OK) mg_pp_schedule_timeline_free(out);
    return st;
}
