/* ECHO expert offloading: the per-step plan that moves tokens from overloaded home experts into
 * spare expert slots, and the reroute of one EP rank's tokens by that plan. It is Megatron-LM's
 * echo planner (the MoE ECHO pull request, NVIDIA/Megatron-LM #2368, module
 * megatron.core.transformer.moe.offloading_planner, function gen_offloading_plan) step for step:
 *  1. tokens per expert over all source ranks; load per EP rank; avg = total / EP (floor);
 *     spare capacity of rank r = max(avg - load_r, 0);
 *  2. spillover: within a rank, experts sorted by load (ascending); the prefix sums minus avg,
 *     clamped at 0, differenced, give each expert's tokens above the rank's fair share;
 *  3. assignment of spillover to the spare capacity of the ranks, both sorted by size
 *     (descending): either one-shot greedy (lay both out on one line and take interval
 *     overlaps; each rank keeps the S/EP largest pieces, one per spare slot, largest first) or
 *     approximate bin packing (one spare slot per rank; ranks in order of spare capacity each take
 *     the largest remaining spillover, found through 8 size buckets, as far as it fits);
 *  4. one-shot greedy only, threshold > 0: reclaim, per rank, the smallest offloads that still
 *     fit under avg * (1 + threshold), and switch off the spare slots no rank still needs;
 *  5. breadth first: each spare slot's tokens split among the source ranks in proportion to what
 *     they send its home expert, floored (float32, as Megatron); depth first: what is left of a
 *     slot's capacity is filled by interval overlap of the remaining tokens, source rank order;
 *  6. reroute (per rank): of the tokens this rank routes to a home expert, in token order, the
 *     first ones go to the expert's first spare slot, the next to its next slot, and so on.
 * Output numbering (Megatron's, after its final interleave): EP rank r owns E/EP + S/EP experts,
 * its home experts then its spare slots: home expert e -> (e / L) * (L + P) + e % L, spare slot j
 * -> (j / P) * (L + P) + L + j % P, with L = E/EP and P = S/EP.
 *
 * Decisions where Megatron leaves the result unspecified or undefined:
 *  - Every sort and top-k is stable: equal keys keep index order (lower expert, rank, slot or
 *    token first). torch's sort/topk/argsort promise no order among equal keys (the CPU uses
 *    std::sort / nth_element, CUDA radix or bitonic sorts), so Megatron's choice among equal
 *    loads, spillovers, capacities or offload sizes, and which of an expert's tokens move, is
 *    not defined; here it is, and the goldens (tools/reference/echo_plan_golden.py) are made with
 *    stable sorts too.
 *  - Approximate bin packing divides by avg / 7, which is 0 when avg < 7 (torch on the CPU
 *    raises, CUDA gives garbage); here a zero interval counts as 1.
 * Precision: integer wherever Megatron's is integer. Megatron runs the breadth-first and
 * depth-first passes in float32 on integer-valued tensors; those sums are exact (so ours, in
 * integers, are identical) while every per-expert and per-rank token total stays below 2^24.
 * The proportional split divides and multiplies in float32 and floors, exactly as torch does
 * (IEEE division: build CUDA code without --use_fast_math). The reclaim threshold is float32
 * (float(threshold) * float(avg)), as torch promotes it.
 *
 * Why a header: the functions are static inline and host/device (MG_ECHO_FN, as in
 * core/step_rules.h) so a CUDA kernel can later plan on the device, one thread, with the same
 * code and no allocation (caller-provided scratch; insertion sorts, since E and EP are small).
 * echo_plan.c holds the host entry points that check shapes and report errors.
 * Exports: MG_ECHO_FN, mg_echo_method, mg_echo_params, mg_echo_plan, mg_echo_home_slot,
 * mg_echo_spare_slot, mg_echo_plan_scratch_ints, mg_echo_reroute_scratch_ints, mg_echo_plan_run,
 * mg_echo_reroute_run, and (echo_plan.c) mg_echo_params_check, mg_echo_plan_compute,
 * mg_echo_reroute. Needs: megatron.h (mg_status). */
#ifndef MG_CORE_ECHO_PLAN_H
#define MG_CORE_ECHO_PLAN_H

#include "megatron.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __CUDACC__
#define MG_ECHO_FN static inline __host__ __device__
#else
#define MG_ECHO_FN static inline
#endif

/* A float32 product rounded on its own: nvcc would otherwise fuse it with a following add. */
#ifdef __CUDA_ARCH__
#define MG_ECHO_FMUL(a, b) __fmul_rn((a), (b))
#else
#define MG_ECHO_FMUL(a, b) ((a) * (b))
#endif

typedef enum { MG_ECHO_ONE_SHOT_GREEDY = 0, MG_ECHO_APPROX_BIN_PACKING = 1 } mg_echo_method;

enum { MG_ECHO_BUCKETS = 8 }; /* approximate bin packing's size classes (Megatron's default) */

typedef struct {
    int ep;      /* EP ranks */
    int experts; /* E home experts, E % ep == 0; rank r holds [r*E/ep, (r+1)*E/ep) */
    int spares;  /* S spare slots, S % ep == 0; slot j lives on rank j / (S/ep) */
    mg_echo_method method;
    double threshold; /* reclaim multiplier, one-shot greedy only; <= 0: no reclaim */
} mg_echo_params;

/* The plan, in caller memory. Identical on every rank (it depends on the counts only). */
typedef struct {
    int64_t avg;             /* tokens per EP rank, floor of the total / EP */
    int32_t *spillover;      /* (E) tokens above the rank's share, per home expert */
    int32_t *spare_capacity; /* (EP) max(avg - load, 0) */
    int32_t *home_to_spare;  /* (E, S) tokens home expert -> spare slot; <= 1 nonzero per column */
    int32_t *rank_to_spare;  /* (EP, S) tokens source rank -> spare slot */
    int32_t *rank_from_home; /* (EP, E) tokens source rank moves away from home expert */
    int32_t *rank_load;      /* (EP) tokens each EP rank computes after offloading */
} mg_echo_plan;

/* The interleaved expert number (see the top) of home expert e and of spare slot j. */
MG_ECHO_FN int mg_echo_home_slot(const mg_echo_params *p, int e) {
    int l = p->experts / p->ep, s = p->spares / p->ep;
    return (e / l) * (l + s) + e % l;
}
MG_ECHO_FN int mg_echo_spare_slot(const mg_echo_params *p, int j) {
    int l = p->experts / p->ep, s = p->spares / p->ep;
    return (j / s) * (l + s) + l + j % s;
}

/* int32 elements of scratch mg_echo_plan_run needs. */
MG_ECHO_FN size_t mg_echo_plan_scratch_ints(const mg_echo_params *p) {
    size_t e = (size_t)p->experts, r = (size_t)p->ep, s = (size_t)p->spares;
    return 4 * e + 2 * r + e * r + MG_ECHO_BUCKETS * (e + r + 2) + 4 * s + r * s + e * s + r * e;
}
/* int32 elements of scratch mg_echo_reroute_run needs. */
MG_ECHO_FN size_t mg_echo_reroute_scratch_ints(const mg_echo_params *p) {
    return (size_t)p->experts + 2 * (size_t)p->spares;
}

/* A plan in one int32 buffer (the backend's moe_echo_plan): avg, then spillover (E),
 * spare_capacity (EP), home_to_spare (E, S), rank_to_spare (EP, S), rank_from_home (EP, E),
 * rank_load (EP), then the planner's scratch. mg_echo_plan_ints: its length. */
MG_ECHO_FN size_t mg_echo_plan_ints(const mg_echo_params *p) {
    size_t e = (size_t)p->experts, r = (size_t)p->ep, s = (size_t)p->spares;
    return 1 + e + r + e * s + r * s + r * e + r + mg_echo_plan_scratch_ints(p);
}
/* The plan's arrays in such a buffer (avg is base[0]); *scratch: where the scratch starts. */
MG_ECHO_FN mg_echo_plan mg_echo_plan_carve(const mg_echo_params *p, int32_t *base,
                                           int32_t **scratch) {
    size_t e = (size_t)p->experts, r = (size_t)p->ep, s = (size_t)p->spares;
    mg_echo_plan q;
    int32_t *w = base + 1;
    q.avg = base[0];
    q.spillover = w, w += e;
    q.spare_capacity = w, w += r;
    q.home_to_spare = w, w += e * s;
    q.rank_to_spare = w, w += r * s;
    q.rank_from_home = w, w += r * e;
    q.rank_load = w, w += r;
    *scratch = w;
    return q;
}

typedef struct {
    int32_t *tot;                              /* (E) tokens per expert, all sources */
    int32_t *load;                             /* (EP) tokens per rank before offloading */
    int32_t *order, *sel, *remain;             /* (E) sort orders; bin packing's leftovers */
    int32_t *rorder;                           /* (EP) ranks by spare capacity */
    int32_t *assign;                           /* (E, EP) spillover -> rank, sorted order */
    int32_t *items, *heads, *tails;            /* (BUCKETS, E+EP), (BUCKETS), (BUCKETS) */
    int32_t *rowv, *rowi, *colmask, *supplier; /* (S) */
    int32_t *floors;                           /* (EP, S) breadth-first share */
    int32_t *left;                             /* (E, S) capacity left after breadth first */
    int32_t *after;                            /* (EP, E) tokens left on the home experts */
} mg_echo_work;

MG_ECHO_FN mg_echo_work mg_echo_work_carve(const mg_echo_params *p, int32_t *w) {
    int e = p->experts, r = p->ep, s = p->spares;
    mg_echo_work k;
    k.tot = w, w += e;
    k.order = w, w += e;
    k.sel = w, w += e;
    k.remain = w, w += e;
    k.load = w, w += r;
    k.rorder = w, w += r;
    k.assign = w, w += e * r;
    k.items = w, w += MG_ECHO_BUCKETS * (e + r);
    k.heads = w, w += MG_ECHO_BUCKETS;
    k.tails = w, w += MG_ECHO_BUCKETS;
    k.rowv = w, w += s;
    k.rowi = w, w += s;
    k.colmask = w, w += s;
    k.supplier = w, w += s;
    k.floors = w, w += r * s;
    k.left = w, w += e * s;
    k.after = w;
    return k;
}

/* idx[0..n) = 0..n-1 ordered by key[i * stride], ascending or (desc) descending, equal keys in
 * index order: a stable insertion sort. */
MG_ECHO_FN void mg_echo_sort(int32_t *idx, const int32_t *key, int stride, int n, int desc) {
    for (int i = 0; i < n; i++) {
        int32_t v = key[(size_t)i * stride];
        int j = i;
        for (; j > 0; j--) {
            int32_t u = key[(size_t)idx[j - 1] * stride];
            if (desc ? u >= v : u <= v) break;
            idx[j] = idx[j - 1];
        }
        idx[j] = i;
    }
}

/* Steps 1-2: totals, avg, spare capacity, spillover per home expert. */
MG_ECHO_FN void mg_echo_spillover(const mg_echo_params *p, const int32_t *counts /* (EP, E) */,
                                  mg_echo_plan *plan, mg_echo_work *w) {
    int ne = p->experts, ep = p->ep, l = ne / ep;
    int64_t total = 0;
    for (int e = 0; e < ne; e++) {
        int64_t t = 0;
        for (int r = 0; r < ep; r++) t += counts[(size_t)r * ne + e];
        w->tot[e] = (int32_t)t;
    }
    for (int r = 0; r < ep; r++) {
        int64_t t = 0;
        for (int i = 0; i < l; i++) t += w->tot[r * l + i];
        w->load[r] = (int32_t)t;
        total += t;
    }
    plan->avg = total / ep;
    for (int r = 0; r < ep; r++) {
        int64_t gap = plan->avg - w->load[r];
        plan->spare_capacity[r] = (int32_t)(gap > 0 ? gap : 0);
        mg_echo_sort(w->order, w->tot + r * l, 1, l, 0);
        int64_t cum = 0, prev = 0;
        for (int i = 0; i < l; i++) {
            int e = r * l + w->order[i];
            cum += w->tot[e];
            int64_t over = cum > plan->avg ? cum - plan->avg : 0;
            plan->spillover[e] = (int32_t)(over - prev);
            prev = over;
        }
    }
}

/* Step 3, one-shot greedy: overlaps of the sorted spillover and capacity intervals, then each
 * rank's S/EP largest pieces into its slots, largest in the rank's first slot. */
MG_ECHO_FN void mg_echo_greedy(const mg_echo_params *p, mg_echo_plan *plan, mg_echo_work *w) {
    int ne = p->experts, ep = p->ep, ns = p->spares, per = ns / ep;
    int64_t cs = 0;
    for (int i = 0; i < ne; i++) {
        int64_t ce = cs + plan->spillover[w->order[i]], bs = 0;
        for (int b = 0; b < ep; b++) {
            int64_t be = bs + plan->spare_capacity[w->rorder[b]];
            int64_t lo = cs > bs ? cs : bs, hi = ce < be ? ce : be;
            w->assign[(size_t)i * ep + b] = (int32_t)(hi > lo ? hi - lo : 0);
            bs = be;
        }
        cs = ce;
    }
    for (int b = 0; b < ep; b++) {
        mg_echo_sort(w->sel, w->assign + b, ep, ne, 1);
        for (int k = 0; k < per; k++) {
            int i = w->sel[k];
            int col = w->rorder[b] * per + k;
            plan->home_to_spare[(size_t)w->order[i] * ns + col] = w->assign[(size_t)i * ep + b];
        }
    }
}

/* Step 4: rank r may take back its smallest offloads while the running sum stays within
 * avg * (1 + threshold) - (its load after offloading); a slot stays on when some rank keeps it. */
MG_ECHO_FN void mg_echo_reclaim(const mg_echo_params *p, mg_echo_plan *plan, mg_echo_work *w) {
    int ne = p->experts, ep = p->ep, ns = p->spares, l = ne / ep;
    float avg = (float)plan->avg;
    float max_load = avg + MG_ECHO_FMUL((float)p->threshold, avg);
    for (int j = 0; j < ns; j++) w->colmask[j] = 0;
    for (int r = 0; r < ep; r++) {
        int64_t used = 0;
        for (int j = 0; j < ns; j++) {
            int64_t v = 0;
            for (int i = 0; i < l; i++) v += plan->home_to_spare[(size_t)(r * l + i) * ns + j];
            w->rowv[j] = (int32_t)v;
            used += v;
        }
        float room = max_load - (float)(w->load[r] - used);
        mg_echo_sort(w->rowi, w->rowv, 1, ns, 0);
        int64_t cum = 0;
        int k = 0;
        for (; k < ns; k++) {
            cum += w->rowv[w->rowi[k]];
            if ((float)cum > room) break;
        }
        for (; k < ns; k++) w->colmask[w->rowi[k]] = 1;
    }
    for (int e = 0; e < ne; e++)
        for (int j = 0; j < ns; j++)
            if (!w->colmask[j]) plan->home_to_spare[(size_t)e * ns + j] = 0;
}

/* Approximate bin packing's size class of a spillover v: 0 for v >= m, then classes of width
 * `width` below m, the last one open-ended; MG_ECHO_BUCKETS means "nothing to place". */
MG_ECHO_FN int mg_echo_bucket(int32_t v, int32_t m, int32_t width) {
    if (v <= 0) return MG_ECHO_BUCKETS;
    if (v >= m) return 0;
    int32_t b = (m - v) / width + 1;
    return b < MG_ECHO_BUCKETS - 1 ? b : MG_ECHO_BUCKETS - 1;
}

/* Finds the next expert to place for one rank: the head of the first non-empty class from *cur
 * on (each class is a queue in spillover order), or -1. */
MG_ECHO_FN int mg_echo_bp_pop(mg_echo_work *w, int cap, int *cur) {
    for (int b = *cur; b < MG_ECHO_BUCKETS; b++) {
        if (w->heads[b] >= w->tails[b]) {
            *cur = b + 1;
            continue;
        }
        int i = w->items[b * cap + w->heads[b]++];
        if (w->remain[i] > 0) {
            *cur = b;
            return i;
        }
    }
    return -1;
}

/* Step 3, approximate bin packing (one slot per rank): ranks by spare capacity, largest first,
 * each take the largest remaining spillover (up to its capacity); a piece left over goes back
 * into the queue of its new size class. Stops at the first rank without capacity or when
 * nothing is left to place. */
MG_ECHO_FN void mg_echo_bin_pack(const mg_echo_params *p, mg_echo_plan *plan, mg_echo_work *w) {
    int ne = p->experts, ep = p->ep, ns = p->spares, cap = ne + ep;
    int32_t m = (int32_t)plan->avg, width = m / (MG_ECHO_BUCKETS - 1);
    if (width == 0) width = 1; /* Megatron divides by zero here */
    for (int b = 0; b < MG_ECHO_BUCKETS; b++) w->heads[b] = w->tails[b] = 0;
    for (int i = 0; i < ne; i++) {
        w->remain[i] = plan->spillover[w->order[i]];
        int b = mg_echo_bucket(w->remain[i], m, width);
        if (b < MG_ECHO_BUCKETS) w->items[b * cap + w->tails[b]++] = i;
        for (int r = 0; r < ep; r++) w->assign[(size_t)i * ep + r] = 0;
    }
    int cur = 0;
    for (int k = 0; k < ep; k++) {
        int32_t room = plan->spare_capacity[w->rorder[k]];
        if (room <= 0) break;
        int i = mg_echo_bp_pop(w, cap, &cur);
        if (i < 0) break;
        int32_t put = w->remain[i] < room ? w->remain[i] : room;
        w->assign[(size_t)i * ep + k] = put;
        w->remain[i] -= put;
        int b = mg_echo_bucket(w->remain[i], m, width);
        if (b < MG_ECHO_BUCKETS) w->items[b * cap + w->tails[b]++] = i;
    }
    for (int i = 0; i < ne; i++)
        for (int k = 0; k < ep; k++)
            plan->home_to_spare[(size_t)w->order[i] * ns + w->rorder[k]] =
                w->assign[(size_t)i * ep + k];
}

/* The first row holding the column's largest value (torch's argmax). */
MG_ECHO_FN int mg_echo_argmax_col(const int32_t *a, int rows, int cols, int j) {
    int best = 0;
    for (int e = 1; e < rows; e++)
        if (a[(size_t)e * cols + j] > a[(size_t)best * cols + j]) best = e;
    return best;
}

/* Step 5a, breadth first: slot j's capacity c (its home expert h = the column's argmax) split
 * over source ranks by counts[s][h] / sum_s counts[s][h], floored, all in float32. */
MG_ECHO_FN void mg_echo_breadth(const mg_echo_params *p, const int32_t *counts, mg_echo_plan *plan,
                                mg_echo_work *w) {
    int ne = p->experts, ep = p->ep, ns = p->spares;
    for (size_t i = 0; i < (size_t)ep * ne; i++) w->after[i] = counts[i];
    for (size_t i = 0; i < (size_t)ne * ns; i++) w->left[i] = plan->home_to_spare[i];
    for (int j = 0; j < ns; j++) {
        int h = mg_echo_argmax_col(plan->home_to_spare, ne, ns, j);
        int32_t c = plan->home_to_spare[(size_t)h * ns + j];
        int active = 0;
        for (int e = 0; e < ne; e++) active |= plan->home_to_spare[(size_t)e * ns + j] > 0;
        int64_t den = 0, given = 0;
        for (int s = 0; s < ep; s++) den += counts[(size_t)s * ne + h];
        for (int s = 0; s < ep; s++) {
            int32_t f = 0;
            if (active && den > 0) {
                float share = (float)counts[(size_t)s * ne + h] / (float)den;
                f = (int32_t)floorf(MG_ECHO_FMUL(share, (float)c));
            }
            w->floors[(size_t)s * ns + j] = f;
            w->after[(size_t)s * ne + h] -= f;
            given += f;
        }
        w->left[(size_t)h * ns + j] -= (int32_t)given;
    }
}

/* Step 5b, depth first: per home expert, the sources' remaining tokens (in rank order) against
 * its slots' remaining capacity (in slot order), by interval overlap; then the totals. */
MG_ECHO_FN void mg_echo_depth(const mg_echo_params *p, const int32_t *counts, mg_echo_plan *plan,
                              mg_echo_work *w) {
    int ne = p->experts, ep = p->ep, ns = p->spares, l = ne / ep, per = ns / ep;
    for (size_t i = 0; i < (size_t)ep * ns; i++) plan->rank_to_spare[i] = w->floors[i];
    for (int e = 0; e < ne; e++) {
        int64_t xs = 0;
        for (int s = 0; s < ep; s++) {
            int64_t xe = xs + w->after[(size_t)s * ne + e], ys = 0;
            for (int j = 0; j < ns; j++) {
                int64_t ye = ys + w->left[(size_t)e * ns + j];
                int64_t lo = xs > ys ? xs : ys, hi = xe < ye ? xe : ye;
                if (hi > lo) plan->rank_to_spare[(size_t)s * ns + j] += (int32_t)(hi - lo);
                ys = ye;
            }
            xs = xe;
        }
    }
    for (int j = 0; j < ns; j++) {
        int h = mg_echo_argmax_col(w->left, ne, ns, j);
        for (int s = 0; s < ep; s++)
            w->after[(size_t)s * ne + h] -=
                plan->rank_to_spare[(size_t)s * ns + j] - w->floors[(size_t)s * ns + j];
    }
    for (int r = 0; r < ep; r++) plan->rank_load[r] = 0;
    for (int s = 0; s < ep; s++) {
        for (int e = 0; e < ne; e++) {
            size_t i = (size_t)s * ne + e;
            plan->rank_from_home[i] = counts[i] - w->after[i];
            plan->rank_load[e / l] += w->after[i];
        }
        for (int j = 0; j < ns; j++)
            plan->rank_load[j / per] += plan->rank_to_spare[(size_t)s * ns + j];
    }
}

/* The whole plan from counts (EP, E): tokens each source rank routes to each home expert.
 * Shapes must have passed mg_echo_params_check; scratch holds mg_echo_plan_scratch_ints ints. */
MG_ECHO_FN void mg_echo_plan_run(const mg_echo_params *p, const int32_t *counts, mg_echo_plan *plan,
                                 int32_t *scratch) {
    mg_echo_work w = mg_echo_work_carve(p, scratch);
    mg_echo_spillover(p, counts, plan, &w);
    for (size_t i = 0; i < (size_t)p->experts * p->spares; i++) plan->home_to_spare[i] = 0;
    mg_echo_sort(w.order, plan->spillover, 1, p->experts, 1);
    mg_echo_sort(w.rorder, plan->spare_capacity, 1, p->ep, 1);
    if (p->method == MG_ECHO_APPROX_BIN_PACKING) {
        mg_echo_bin_pack(p, plan, &w);
    } else {
        mg_echo_greedy(p, plan, &w);
        if (p->threshold > 0) mg_echo_reclaim(p, plan, &w);
    }
    mg_echo_breadth(p, counts, plan, &w);
    mg_echo_depth(p, counts, plan, &w);
}

/* Step 6 for one pair, in parallel form: the new expert (numbered as at the top) of a pair this
 * EP rank routes to home expert e, the n-th such pair in token order (n from 0). The plan's
 * spare slots of e take consecutive shares of e's pairs, slot after slot in slot order, each
 * rank_to_spare[rank][j] pairs long: the pair moves to the slot whose share holds n, else stays
 * home. What mg_echo_reroute_run gives for the same pair. */
MG_ECHO_FN int32_t mg_echo_reroute_pair(const mg_echo_params *p, const mg_echo_plan *plan, int rank,
                                        int32_t e, int32_t n) {
    const int ns = p->spares;
    const int32_t *moves = plan->rank_to_spare + (size_t)rank * ns;
    int32_t start = 0;
    for (int j = 0; j < ns; j++) {
        if (plan->home_to_spare[(size_t)e * ns + j] <= 0) continue; /* slot j serves another */
        if (n >= start && n < start + moves[j]) return mg_echo_spare_slot(p, j);
        start += moves[j];
    }
    return mg_echo_home_slot(p, e);
}

enum { MG_ECHO_REROUTE_OK = 0, MG_ECHO_REROUTE_BAD_ID = 1, MG_ECHO_REROUTE_SHORT = 2 };

/* The home expert spare slot j serves under the plan (the one nonzero of its home_to_spare
 * column), -1 when it serves none. */
MG_ECHO_FN int mg_echo_slot_home(const mg_echo_params *p, const mg_echo_plan *plan, int j) {
    for (int e = 0; e < p->experts; e++)
        if (plan->home_to_spare[(size_t)e * p->spares + j] > 0) return e;
    return -1;
}

/* The copies that put home experts' weights into the spare slots and bring the slots' gradients
 * back (the backend's moe_echo_move), over slabs of EP x S/EP rows, one expert per row:
 *  SEND_WEIGHTS  row q P + i (spare slot j = q P + i of rank q) = the weights of j's home expert,
 *                written by the rank that holds it;
 *  TAKE_WEIGHTS  this rank's spare slot i (j = rank P + i) takes row (home / L) P + i, what the
 *                home's rank sent it;
 *  SEND_GRADS    row (home / L) P + i = this rank's spare slot i's gradients, to the home's rank;
 *  ADD_GRADS     each home expert here += row q P + i for every slot j = q P + i it served.
 * (L = E/EP, P = S/EP; the rows travel by an all-to-all of P rows per peer between SEND and
 * TAKE / ADD.) */
enum { MG_ECHO_SEND_WEIGHTS = 0, MG_ECHO_TAKE_WEIGHTS, MG_ECHO_SEND_GRADS, MG_ECHO_ADD_GRADS };

/* The slab row and the local expert of one copy: for slab row `row` (SEND_WEIGHTS, ADD_GRADS:
 * any of EP x P; TAKE_WEIGHTS, SEND_GRADS: this rank's slot i = row < P), whether this rank takes
 * part, the row of the slab and the expert's local index in the table (home: h % L; spare slot
 * i: L + i). */
MG_ECHO_FN int mg_echo_move_row(const mg_echo_params *p, const mg_echo_plan *plan, int rank,
                                int mode, int row, int *slab_row, int *local) {
    const int L = p->experts / p->ep, P = p->spares / p->ep;
    const bool mine = mode == MG_ECHO_TAKE_WEIGHTS || mode == MG_ECHO_SEND_GRADS;
    const int j = mine ? rank * P + row : row;
    const int h = mg_echo_slot_home(p, plan, j);
    if (h < 0) return 0;
    if (mine) {
        *slab_row = (h / L) * P + row;
        *local = L + row;
        return 1;
    }
    if (h / L != rank) return 0;
    *slab_row = row;
    *local = h % L;
    return 1;
}

/* Step 6 for EP rank `rank`: ids (T, K) are each token's K distinct home experts (top-k order);
 * out (T, K) gets the same slots renumbered as described at the top, a moved token's entry
 * pointing at its spare slot (so a probability kept per (token, k) moves with it). Returns
 * MG_ECHO_REROUTE_BAD_ID for an id outside [0, E) or repeated in a row, MG_ECHO_REROUTE_SHORT
 * when the plan moves more of a home expert's tokens than ids route to it (with *bad set to the
 * expert or token); scratch holds mg_echo_reroute_scratch_ints ints. */
MG_ECHO_FN int mg_echo_reroute_run(const mg_echo_params *p, const mg_echo_plan *plan, int rank,
                                   int tokens, int k, const int32_t *ids, int32_t *out,
                                   int32_t *scratch, int *bad) {
    int ne = p->experts, ns = p->spares;
    int32_t *seen = scratch, *home = scratch + ne, *off = home + ns;
    const int32_t *moves = plan->rank_to_spare + (size_t)rank * ns;
    for (int e = 0; e < ne; e++) seen[e] = 0;
    for (int j = 0; j < ns; j++) { /* off: where slot j's run starts among e's tokens */
        int h = -1;
        for (int e = 0; e < ne && h < 0; e++)
            h = plan->home_to_spare[(size_t)e * ns + j] > 0 ? e : -1;
        home[j] = h;
        off[j] = h < 0 ? 0 : seen[h];
        if (h >= 0) seen[h] += moves[j];
    }
    for (int e = 0; e < ne; e++) seen[e] = 0;
    for (int t = 0; t < tokens; t++) {
        for (int q = 0; q < k; q++) {
            int32_t e = ids[(size_t)t * k + q];
            int dup = 0;
            for (int u = 0; u < q; u++) dup |= ids[(size_t)t * k + u] == e;
            if (e < 0 || e >= ne || dup) {
                *bad = t;
                return MG_ECHO_REROUTE_BAD_ID;
            }
            int32_t n = seen[e]++, slot = mg_echo_home_slot(p, e);
            for (int j = 0; j < ns; j++)
                if (home[j] == e && n >= off[j] && n < off[j] + moves[j])
                    slot = mg_echo_spare_slot(p, j);
            out[(size_t)t * k + q] = slot;
        }
    }
    for (int j = 0; j < ns; j++)
        if (home[j] >= 0 && off[j] + moves[j] > seen[home[j]]) {
            *bad = home[j];
            return MG_ECHO_REROUTE_SHORT;
        }
    return MG_ECHO_REROUTE_OK;
}

/* Host entry points (echo_plan.c). */
#ifdef __cplusplus
extern "C" {
#endif

/* Checks the shapes: ep >= 1, experts and spares multiples of ep, 1 <= spares/ep <= experts
 * (Megatron's top-k over the experts), one slot per rank for bin packing, a finite threshold. */
mg_status mg_echo_params_check(const mg_echo_params *p);
/* Checks p and the counts (non-negative), then runs the plan. scratch_ints: its length. */
mg_status mg_echo_plan_compute(const mg_echo_params *p, const int32_t *counts /* (EP, E) */,
                               mg_echo_plan *plan, int32_t *scratch, size_t scratch_ints);
/* Reroutes rank `rank`'s tokens by the plan (see mg_echo_reroute_run), reporting bad ids and a
 * routing that disagrees with the plan's counts. */
mg_status mg_echo_reroute(const mg_echo_params *p, const mg_echo_plan *plan, int rank, int tokens,
                          int k, const int32_t *ids /* (T, K) */, int32_t *out /* (T, K) */,
                          int32_t *scratch, size_t scratch_ints);

#ifdef __cplusplus
}
#endif

#endif
