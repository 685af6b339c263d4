/* Megatron's process-group layout; see parallel_state.h for the model and the kinds. */
#include "parallel_state.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* A layout needs about 50 ints per rank; this keeps every index and count inside an int. */
#define MAX_WORLD (1 << 24)

#define BIT(d) (1u << (d))

static const char *const dim_names[MG_DIM_COUNT] = {"tp", "cp", "ep", "dp", "pp"};

/* Each kind: its name, whether it comes from the expert generator, and its dimensions (a set:
 * Megatron's get_mask ignores the order of the tokens in "tp-dp-cp"). The embedding kinds are
 * derived from the dense pp groups instead. */
static const struct {
    const char *name;
    int expert;
    unsigned dims;
} kinds[MG_GROUP_KIND_COUNT] = {
    [MG_GROUP_TP] = {"tp", 0, BIT(MG_DIM_TP)},
    [MG_GROUP_PP] = {"pp", 0, BIT(MG_DIM_PP)},
    [MG_GROUP_DP] = {"dp", 0, BIT(MG_DIM_DP)},
    [MG_GROUP_DP_CP] = {"dp_cp", 0, BIT(MG_DIM_DP) | BIT(MG_DIM_CP)},
    [MG_GROUP_CP] = {"cp", 0, BIT(MG_DIM_CP)},
    [MG_GROUP_MP] = {"mp", 0, BIT(MG_DIM_TP) | BIT(MG_DIM_PP)},
    [MG_GROUP_TP_DP] = {"tp_dp", 0, BIT(MG_DIM_TP) | BIT(MG_DIM_DP)},
    [MG_GROUP_TP_DP_CP] = {"tp_dp_cp", 0, BIT(MG_DIM_TP) | BIT(MG_DIM_DP) | BIT(MG_DIM_CP)},
    [MG_GROUP_TP_CP] = {"tp_cp", 0, BIT(MG_DIM_TP) | BIT(MG_DIM_CP)},
    [MG_GROUP_EMBEDDING] = {"embedding", 0, 0},
    [MG_GROUP_POSITION_EMBEDDING] = {"position_embedding", 0, 0},
    [MG_GROUP_EP] = {"ep", 1, BIT(MG_DIM_EP)},
    [MG_GROUP_EXPERT_TP] = {"expert_tp", 1, BIT(MG_DIM_TP)},
    [MG_GROUP_EXPERT_TP_EP] = {"expert_tp_ep", 1, BIT(MG_DIM_TP) | BIT(MG_DIM_EP)},
    [MG_GROUP_EXPERT_TP_EP_PP] = {"expert_tp_ep_pp", 1,
                                  BIT(MG_DIM_TP) | BIT(MG_DIM_EP) | BIT(MG_DIM_PP)},
    [MG_GROUP_EXPERT_DP] = {"expert_dp", 1, BIT(MG_DIM_DP)},
};

const char *mg_group_kind_name(mg_group_kind k) {
    return (unsigned)k < MG_GROUP_KIND_COUNT ? kinds[k].name : NULL;
}

int mg_group_kind_from_name(const char *name) {
    for (int k = 0; name && k < MG_GROUP_KIND_COUNT; k++)
        if (strcmp(kinds[k].name, name) == 0) return k;
    return -1;
}

/* ---- the rank generator ---- */

/* One of Megatron's RankGenerators: sizes per dimension and the order. stride[d] is the product
 * of the sizes of the dimensions before d in the order, so rank = sum(coord[d] * stride[d]). */
typedef struct {
    int world;
    int order[MG_DIM_COUNT];
    int size[MG_DIM_COUNT];   /* by dimension */
    int stride[MG_DIM_COUNT]; /* by dimension */
} rank_gen;

static void gen_init(rank_gen *g, const int order[MG_DIM_COUNT], int tp, int cp, int ep, int dp,
                     int pp) {
    memcpy(g->order, order, sizeof g->order);
    g->size[MG_DIM_TP] = tp;
    g->size[MG_DIM_CP] = cp;
    g->size[MG_DIM_EP] = ep;
    g->size[MG_DIM_DP] = dp;
    g->size[MG_DIM_PP] = pp;
    int s = 1;
    for (int i = 0; i < MG_DIM_COUNT; i++) {
        g->stride[order[i]] = s;
        s *= g->size[order[i]];
    }
    g->world = s;
}

static int gen_coord(const rank_gen *g, int rank, int dim) {
    return (rank / g->stride[dim]) % g->size[dim];
}

static int gen_group_size(const rank_gen *g, unsigned dims) {
    int n = 1;
    for (int d = 0; d < MG_DIM_COUNT; d++)
        if (dims & BIT(d)) n *= g->size[d];
    return n;
}

/* The i-th rank of the gi-th group of the kind spanning `dims` (generate_masked_orthogonal_
 * rank_groups): gi is split into the coordinates of the other dimensions and i into those of
 * `dims`, each mixed-radix with the earliest dimension of the order fastest. */
static int gen_rank(const rank_gen *g, unsigned dims, int gi, int i) {
    int rank = 0;
    for (int k = 0; k < MG_DIM_COUNT; k++) {
        int d = g->order[k];
        int *idx = (dims & BIT(d)) ? &i : &gi;
        rank += (*idx % g->size[d]) * g->stride[d];
        *idx /= g->size[d];
    }
    return rank;
}

/* ---- validation ---- */

/* The order for messages: control bytes would break the one-line error, so they become '?'.
 * Reads at most the order field's size: the caller's field need not hold a NUL. */
static void printable(char *dst, size_t cap, const char *src) {
    size_t i = 0;
    for (; i < MG_PARALLEL_ORDER_MAX && src[i] && i + 1 < cap; i++)
        dst[i] = (src[i] >= 0x20 && src[i] < 0x7f) ? src[i] : '?';
    dst[i] = 0;
}

#define ORDER_HINT                                                                                 \
    "it must be a dash-separated permutation of tp, cp, ep, dp, pp, "                              \
    "e.g. " MG_PARALLEL_ORDER_DEFAULT " (the default) or " MG_PARALLEL_ORDER_TP_PP_DP              \
    " (--use-tp-pp-dp-mapping)"

mg_status mg_parallel_order_parse(const char *order, const int sizes[MG_DIM_COUNT],
                                  int dims[MG_DIM_COUNT]) {
    if (!order || !order[0]) order = MG_PARALLEL_ORDER_DEFAULT;
    char shown[MG_PARALLEL_ORDER_MAX + 4];
    printable(shown, sizeof shown, order);
    if (strnlen(order, MG_PARALLEL_ORDER_MAX) >= MG_PARALLEL_ORDER_MAX)
        return MG_FAIL(MG_ERR_USAGE, "--parallel-order '%s...' is too long; " ORDER_HINT, shown);
    int seen = 0, n = 0;
    const char *p = order;
    for (;;) {
        size_t len = strcspn(p, "-");
        int d = -1;
        for (int k = 0; k < MG_DIM_COUNT; k++)
            if (len == 2 && strncmp(p, dim_names[k], 2) == 0) d = k;
        if (len == 0)
            return MG_FAIL(MG_ERR_USAGE, "--parallel-order '%s' has an empty token; " ORDER_HINT,
                           shown);
        if (d < 0)
            return MG_FAIL(MG_ERR_USAGE,
                           "--parallel-order '%s' has an unknown token '%.*s'; " ORDER_HINT, shown,
                           (int)len, shown + (p - order));
        if (seen & BIT(d))
            return MG_FAIL(MG_ERR_USAGE, "--parallel-order '%s' repeats '%s'; " ORDER_HINT, shown,
                           dim_names[d]);
        seen |= BIT(d);
        dims[n++] = d;
        if (!p[len]) break;
        p += len + 1;
    }
    /* RankGenerator: a dimension left out is appended when its size is 1, refused otherwise */
    for (int d = 0; d < MG_DIM_COUNT; d++) {
        if (seen & BIT(d)) continue;
        if (!sizes)
            return MG_FAIL(MG_ERR_USAGE, "--parallel-order '%s' lacks '%s'; " ORDER_HINT, shown,
                           dim_names[d]);
        if (sizes[d] != 1)
            return MG_FAIL(MG_ERR_USAGE,
                           "--parallel-order '%s' lacks '%s', whose size is %d; add it (" ORDER_HINT
                           ")",
                           shown, dim_names[d], sizes[d]);
        dims[n++] = d;
    }
    return MG_OK;
}

/* "1, 2, 3, 6": the divisors of n, cut short with ", ..." if they do not fit. */
static const char *divisors(char *buf, size_t cap, int64_t n) {
    size_t len = 0;
    buf[0] = 0;
    for (int64_t d = 1; d <= n; d++) {
        if (n % d) continue;
        int w = snprintf(buf + len, cap - len, "%s%lld", len ? ", " : "", (long long)d);
        if (w < 0 || (size_t)w >= cap - len - 5) {
            snprintf(buf + len, cap - len, ", ...");
            break;
        }
        len += (size_t)w;
    }
    return buf;
}

static mg_status check_size(const char *what, const char *flag, int v) {
    if (v >= 1) return MG_OK;
    return MG_FAIL(MG_ERR_USAGE, "%s size %d must be at least 1 (%s)", what, v, flag);
}

/* a * b * c for sizes in [1, INT_MAX], saturated at INT64_MAX (which no world size divides). */
static int64_t mul3(int64_t a, int64_t b, int64_t c) {
    return a * b > INT64_MAX / c ? INT64_MAX : a * b * c;
}

/* The product for a message; a saturated one is only "huge". */
static const char *product(char *buf, size_t cap, int64_t v) {
    if (v == INT64_MAX) return "more than 2^63";
    snprintf(buf, cap, "%lld", (long long)v);
    return buf;
}

/* The "...: 1, 2, 4" tail of a not-divisible message: the sizes of the first candidate that can
 * fix w % product alone (others[i]: the product of the sizes it leaves fixed), else the divisors
 * of w that the product must be. */
typedef struct {
    const char *name;
    int64_t others;
} fix_one;

static const char *fix_choices(char *buf, size_t cap, int64_t w, const fix_one *c, int n) {
    char list[2048];
    for (int i = 0; i < n; i++)
        if (w % c[i].others == 0) {
            snprintf(buf, cap, "%s sizes that divide %lld with these: %s", c[i].name, (long long)w,
                     divisors(list, sizeof list, w / c[i].others));
            return buf;
        }
    snprintf(buf, cap, "their product must be a divisor of %lld: %s", (long long)w,
             divisors(list, sizeof list, w));
    return buf;
}

/* initialize_model_parallel: world_size % (tp * pp * cp). The choices vary the first size that
 * can be fixed alone (tp, then pp, then cp). */
static mg_status check_dense(int64_t w, int64_t tp, int64_t pp, int64_t cp) {
    if (w % mul3(tp, pp, cp) == 0) return MG_OK;
    char choices[2200], prod[32];
    const fix_one fix[] = {{"tensor-model-parallel", pp * cp},
                           {"pipeline-model-parallel", tp * cp},
                           {"context-parallel", tp * pp}};
    return MG_FAIL(MG_ERR_USAGE,
                   "world size %lld is not divisible by tensor (%lld) x pipeline (%lld) x "
                   "context (%lld) = %s; %s",
                   (long long)w, (long long)tp, (long long)pp, (long long)cp,
                   product(prod, sizeof prod, mul3(tp, pp, cp)),
                   fix_choices(choices, sizeof choices, w, fix, 3));
}

/* initialize_model_parallel: world_size % (etp * ep * pp), the expert generator's. */
static mg_status check_expert(int64_t w, int64_t etp, int etp_default, int64_t ep, int64_t pp) {
    if (w % mul3(etp, ep, pp) == 0) return MG_OK;
    char choices[2200], prod[32];
    const fix_one fix[] = {{"expert-model-parallel", etp * pp},
                           {"expert-tensor-parallel", ep * pp}};
    return MG_FAIL(MG_ERR_USAGE,
                   "world size %lld is not divisible by expert tensor (%lld%s) x expert model "
                   "(%lld) x pipeline (%lld) = %s; %s",
                   (long long)w, (long long)etp,
                   etp_default ? ", the tensor-model-parallel size" : "", (long long)ep,
                   (long long)pp, product(prod, sizeof prod, mul3(etp, ep, pp)),
                   fix_choices(choices, sizeof choices, w, fix, 2));
}

/* Megatron asserts that an order not ending in pp keeps the attention and MoE data-parallel sizes
 * equal when pp > 1 (i.e. etp * ep == tp * cp). The choices list every such (etp, ep). */
static mg_status check_pp_last(const mg_parallel_sizes *s, const char *order, int etp, int dp,
                               int edp) {
    size_t n = strlen(order);
    if ((n >= 2 && strcmp(order + n - 2, "pp") == 0) || s->pp == 1 || dp == edp) return MG_OK;
    char pairs[2048];
    size_t len = 0;
    int span = s->tp * s->cp;
    pairs[0] = 0;
    for (int a = 1; a <= span && len + 32 < sizeof pairs; a++)
        if (span % a == 0)
            len += (size_t)snprintf(pairs + len, sizeof pairs - len, "%s(%d, %d)", len ? ", " : "",
                                    a, span / a);
    return MG_FAIL(
        MG_ERR_USAGE,
        "order %s does not end with pp and the pipeline size is %d, so Megatron requires "
        "the expert data-parallel size %d / (expert tensor %d x expert model %d x "
        "pipeline %d) = %d to equal the data-parallel size %d / (tensor %d x pipeline "
        "%d x context %d) = %d; (expert-tensor, expert-model) sizes that do: %s; or use "
        "an order ending in pp, e.g. " MG_PARALLEL_ORDER_DEFAULT,
        order, s->pp, s->world_size, etp, s->ep, s->pp, edp, s->world_size, s->tp, s->pp, s->cp, dp,
        pairs);
}

/* Megatron asserts decoder.get_ranks("pp") == expert.get_ranks("pp"). Both lists are compared
 * rank by rank, as Megatron does; they differ only when the dimensions before pp in the order span
 * different numbers of ranks in the two generators (possible with custom orders only). */
static mg_status check_same_pp(const rank_gen *dense, const rank_gen *expert, const char *order) {
    int size = dense->size[MG_DIM_PP], n = dense->world / size;
    for (int g = 0; g < n; g++)
        for (int i = 0; i < size; i++) {
            if (gen_rank(dense, BIT(MG_DIM_PP), g, i) == gen_rank(expert, BIT(MG_DIM_PP), g, i))
                continue;
            return MG_FAIL(
                MG_ERR_USAGE,
                "order %s gives the dense and expert layouts different pipeline groups (group %d "
                "is [%d, %d, ...] vs [%d, %d, ...]), which Megatron rejects: the dimensions before "
                "pp span %d ranks in the dense layout but %d in the expert one; use an order "
                "ending in pp (e.g. " MG_PARALLEL_ORDER_DEFAULT ") or sizes that make both equal",
                order, g, gen_rank(dense, BIT(MG_DIM_PP), g, 0),
                gen_rank(dense, BIT(MG_DIM_PP), g, 1), gen_rank(expert, BIT(MG_DIM_PP), g, 0),
                gen_rank(expert, BIT(MG_DIM_PP), g, 1), dense->stride[MG_DIM_PP],
                expert->stride[MG_DIM_PP]);
        }
    return MG_OK;
}

/* Validates and resolves s into the two generators (and the resolved sizes). */
static mg_status resolve(const mg_parallel_sizes *s, mg_parallel_sizes *r, int order[MG_DIM_COUNT],
                         rank_gen *dense, rank_gen *expert) {
    if (s->world_size < 1)
        return MG_FAIL(MG_ERR_USAGE, "world size %d must be at least 1", s->world_size);
    if (s->world_size > MAX_WORLD)
        return MG_FAIL(MG_ERR_USAGE, "world size %d is larger than the %d ranks supported",
                       s->world_size, MAX_WORLD);
    MG_CHECK(check_size("tensor-model-parallel", "--tensor-model-parallel-size", s->tp));
    MG_CHECK(check_size("pipeline-model-parallel", "--pipeline-model-parallel-size", s->pp));
    MG_CHECK(check_size("context-parallel", "--context-parallel-size", s->cp));
    MG_CHECK(check_size("expert-model-parallel", "--expert-model-parallel-size", s->ep));
    if (s->etp < 1 && s->etp != -1)
        return MG_FAIL(MG_ERR_USAGE,
                       "expert-tensor-parallel size %d must be at least 1, or -1 for the "
                       "tensor-model-parallel size (--expert-tensor-parallel-size)",
                       s->etp);
    *r = *s;
    if (!r->order[0]) snprintf(r->order, sizeof r->order, "%s", MG_PARALLEL_ORDER_DEFAULT);
    r->etp = s->etp == -1 ? s->tp : s->etp;
    int64_t w = s->world_size;
    MG_CHECK(check_dense(w, s->tp, s->pp, s->cp));
    MG_CHECK(check_expert(w, r->etp, s->etp == -1, s->ep, s->pp));
    int dp = (int)(w / ((int64_t)s->tp * s->pp * s->cp));
    int edp = (int)(w / ((int64_t)r->etp * s->ep * s->pp));
    /* a dimension may be left out of the order only where both generators give it size 1 (the
     * dense one has ep 1, the expert one cp 1 and its own tp and dp) */
    const int sizes[MG_DIM_COUNT] = {[MG_DIM_TP] = s->tp == 1 && r->etp == 1 ? 1 : 2,
                                     [MG_DIM_CP] = s->cp,
                                     [MG_DIM_EP] = s->ep,
                                     [MG_DIM_DP] = dp == 1 && edp == 1 ? 1 : (dp > 1 ? dp : edp),
                                     [MG_DIM_PP] = s->pp};
    MG_CHECK(mg_parallel_order_parse(s->order, sizes, order));
    MG_CHECK(check_pp_last(s, r->order, r->etp, dp, edp));

    /* As in initialize_model_parallel: the dense generator has ep = 1, the expert one cp = 1. */
    gen_init(dense, order, s->tp, s->cp, 1, dp, s->pp);
    gen_init(expert, order, r->etp, 1, s->ep, edp, s->pp);
    MG_CHECK(check_same_pp(dense, expert, r->order));
    return MG_OK;
}

mg_status mg_parallel_sizes_check(const mg_parallel_sizes *s, int *dp, int *edp) {
    mg_parallel_sizes r;
    int order[MG_DIM_COUNT];
    rank_gen dense, expert;
    MG_CHECK(resolve(s, &r, order, &dense, &expert));
    if (dp) *dp = dense.size[MG_DIM_DP];
    if (edp) *edp = expert.size[MG_DIM_DP];
    return MG_OK;
}

/* ---- building ---- */

/* Number of groups and of ranks listed for kind k (the sizing pass). */
static void kind_counts(const rank_gen *dense, const rank_gen *expert, int k, int *groups,
                        int *ranks) {
    int pp = dense->size[MG_DIM_PP], world = dense->world;
    if (k == MG_GROUP_EMBEDDING || k == MG_GROUP_POSITION_EMBEDDING) {
        *groups = world / pp; /* one per pp group (default_embedding_ranks and friends) */
        *ranks = *groups * (k == MG_GROUP_EMBEDDING && pp > 1 ? 2 : 1);
        return;
    }
    const rank_gen *g = kinds[k].expert ? expert : dense;
    *groups = world / gen_group_size(g, kinds[k].dims);
    *ranks = world;
}

static void add_group_rank(mg_parallel_layout *l, int k, int g, int rank) {
    mg_group_list *gl = &l->groups[k];
    gl->ranks[gl->offsets[g + 1]++] = rank;
    l->member[(size_t)k * l->sizes.world_size + rank] = g;
}

mg_status mg_parallel_layout_build(const mg_parallel_sizes *s, mg_parallel_layout *out) {
    memset(out, 0, sizeof *out);
    mg_parallel_sizes r;
    int order[MG_DIM_COUNT];
    rank_gen dense, expert;
    MG_CHECK(resolve(s, &r, order, &dense, &expert));
    int world = r.world_size;

    /* Size first, then one allocation: offsets and ranks of every kind, then the member table. */
    int n_groups[MG_GROUP_KIND_COUNT], n_ranks[MG_GROUP_KIND_COUNT];
    size_t total = (size_t)MG_GROUP_KIND_COUNT * world;
    for (int k = 0; k < MG_GROUP_KIND_COUNT; k++) {
        kind_counts(&dense, &expert, k, &n_groups[k], &n_ranks[k]);
        total += (size_t)n_groups[k] + 1 + (size_t)n_ranks[k];
    }
    int *block = malloc(total * sizeof *block);
    if (!block)
        return MG_FAIL(MG_ERR_NOMEM, "parallel layout of %d ranks: out of memory (%zu bytes)",
                       world, total * sizeof *block);
    out->sizes = r;
    out->dp = dense.size[MG_DIM_DP];
    out->edp = expert.size[MG_DIM_DP];
    memcpy(out->order, order, sizeof out->order);
    out->block = block;
    out->member = block;
    for (size_t i = 0; i < (size_t)MG_GROUP_KIND_COUNT * world; i++) out->member[i] = -1;
    int *p = block + (size_t)MG_GROUP_KIND_COUNT * world;
    for (int k = 0; k < MG_GROUP_KIND_COUNT; k++) {
        mg_group_list *gl = &out->groups[k];
        gl->n_groups = n_groups[k];
        gl->offsets = p;
        gl->ranks = p + n_groups[k] + 1;
        p += n_groups[k] + 1 + n_ranks[k];
        gl->offsets[0] = 0;
    }

    for (int k = 0; k < MG_GROUP_KIND_COUNT; k++) {
        mg_group_list *gl = &out->groups[k];
        if (k == MG_GROUP_EMBEDDING || k == MG_GROUP_POSITION_EMBEDDING) continue;
        const rank_gen *g = kinds[k].expert ? &expert : &dense;
        int size = gen_group_size(g, kinds[k].dims);
        for (int gi = 0; gi < gl->n_groups; gi++) {
            gl->offsets[gi + 1] = gl->offsets[gi];
            for (int i = 0; i < size; i++)
                add_group_rank(out, k, gi, gen_rank(g, kinds[k].dims, gi, i));
        }
    }
    /* Megatron builds both embedding groups inside its pp-group loop, from each pp group's ranks:
     * default_embedding_ranks (first and last stage) and default_position_embedding_ranks. */
    const mg_group_list *pp = &out->groups[MG_GROUP_PP];
    mg_group_list *emb = &out->groups[MG_GROUP_EMBEDDING];
    mg_group_list *pos = &out->groups[MG_GROUP_POSITION_EMBEDDING];
    for (int gi = 0; gi < pp->n_groups; gi++) {
        const int *ranks = pp->ranks + pp->offsets[gi];
        int n = pp->offsets[gi + 1] - pp->offsets[gi];
        emb->offsets[gi + 1] = emb->offsets[gi];
        add_group_rank(out, MG_GROUP_EMBEDDING, gi, ranks[0]);
        if (n > 1) add_group_rank(out, MG_GROUP_EMBEDDING, gi, ranks[n - 1]);
        pos->offsets[gi + 1] = pos->offsets[gi];
        add_group_rank(out, MG_GROUP_POSITION_EMBEDDING, gi, ranks[0]);
    }
    return MG_OK;
}

void mg_parallel_layout_free(mg_parallel_layout *l) {
    if (!l) return;
    free(l->block);
    memset(l, 0, sizeof *l);
}

mg_status mg_parallel_rank_coords(const mg_parallel_layout *l, int rank, mg_rank_coords *c) {
    const mg_parallel_sizes *s = &l->sizes;
    if (rank < 0 || rank >= s->world_size)
        return MG_FAIL(MG_ERR_USAGE, "rank %d is outside the world of %d ranks (0..%d)", rank,
                       s->world_size, s->world_size - 1);
    rank_gen dense, expert;
    gen_init(&dense, l->order, s->tp, s->cp, 1, l->dp, s->pp);
    gen_init(&expert, l->order, s->etp, 1, s->ep, l->edp, s->pp);
    c->tp = gen_coord(&dense, rank, MG_DIM_TP);
    c->cp = gen_coord(&dense, rank, MG_DIM_CP);
    c->dp = gen_coord(&dense, rank, MG_DIM_DP);
    c->pp = gen_coord(&dense, rank, MG_DIM_PP);
    c->ep = gen_coord(&expert, rank, MG_DIM_EP);
    c->etp = gen_coord(&expert, rank, MG_DIM_TP);
    c->edp = gen_coord(&expert, rank, MG_DIM_DP);
    return MG_OK;
}

int mg_parallel_group_of(const mg_parallel_layout *l, mg_group_kind k, int rank) {
    if ((unsigned)k >= MG_GROUP_KIND_COUNT || rank < 0 || rank >= l->sizes.world_size) return -1;
    return l->member[(size_t)k * l->sizes.world_size + rank];
}

const int *mg_parallel_group_ranks(const mg_parallel_layout *l, mg_group_kind k, int g, int *n) {
    if ((unsigned)k >= MG_GROUP_KIND_COUNT || g < 0 || g >= l->groups[k].n_groups) return NULL;
    const mg_group_list *gl = &l->groups[k];
    *n = gl->offsets[g + 1] - gl->offsets[g];
    return gl->ranks + gl->offsets[g];
}
