/* The process-group layout against megatron-core itself (tests/golden/groups/megatron_groups.json,
 * written by tools/reference/megatron_groups.py from parallel_state.initialize_model_parallel),
 * the 16-GPU example of Megatron's docstring spelled out, invariants over every layout of up to 64
 * ranks (every order for up to 16), and every rejection. The invariants restate Megatron's
 * algorithm from its docstring equation rank = sum(coord[d] * stride[d]) independently of the
 * library's generator. */
#include "test.h"

#include "core/file.h"
#include "core/status.h"
#include "parallel/parallel_state.h"

#include <cjson/cJSON.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#define GROUPS_GOLDEN "tests/golden/groups/megatron_groups.json"

static mg_parallel_sizes sizes(int world, int tp, int pp, int cp, int ep, int etp,
                               const char *order) {
    mg_parallel_sizes s;
    memset(&s, 0, sizeof s);
    s.world_size = world;
    s.tp = tp;
    s.pp = pp;
    s.cp = cp;
    s.ep = ep;
    s.etp = etp;
    snprintf(s.order, sizeof s.order, "%s", order ? order : "");
    return s;
}

/* ---- golden ---- */

static cJSON *load_golden(mg_test_ctx *t) {
    char *text = NULL;
    size_t n = 0;
    if (mg_file_read(GROUPS_GOLDEN, &text, &n) != MG_OK) {
        MG_EXPECT(0, "cannot read %s: %s", GROUPS_GOLDEN, mg_error_message());
        return NULL;
    }
    cJSON *root = cJSON_Parse(text);
    free(text);
    MG_EXPECT(root != NULL, "%s is not JSON", GROUPS_GOLDEN);
    return root;
}

static int json_int(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return cJSON_IsNumber(v) ? v->valueint : -999;
}

static mg_parallel_sizes golden_sizes(const cJSON *lay) {
    const cJSON *order = cJSON_GetObjectItemCaseSensitive(lay, "order");
    return sizes(json_int(lay, "world_size"), json_int(lay, "tp"), json_int(lay, "pp"),
                 json_int(lay, "cp"), json_int(lay, "ep"), json_int(lay, "etp"),
                 cJSON_IsString(order) ? order->valuestring : "?");
}

/* Whether the groups of kind k are exactly Megatron's list of lists, in order. */
static bool groups_equal(mg_test_ctx *t, const char *name, const mg_parallel_layout *l, int k,
                         const cJSON *want) {
    const mg_group_list *gl = &l->groups[k];
    if (!cJSON_IsArray(want) || cJSON_GetArraySize(want) != gl->n_groups) {
        MG_EXPECT(0, "%s: %s has %d groups, Megatron %d", name, mg_group_kind_name(k), gl->n_groups,
                  cJSON_GetArraySize(want));
        return false;
    }
    int g = 0;
    const cJSON *grp;
    cJSON_ArrayForEach(grp, want) {
        int n = gl->offsets[g + 1] - gl->offsets[g], i = 0;
        bool same = cJSON_GetArraySize(grp) == n;
        const cJSON *r;
        cJSON_ArrayForEach(r, grp) {
            if (same && r->valueint != gl->ranks[gl->offsets[g] + i]) same = false;
            i++;
        }
        if (!same) {
            char *js = cJSON_PrintUnformatted(grp);
            MG_EXPECT(0, "%s: %s group %d differs from Megatron's %s (first rank %d, size %d)",
                      name, mg_group_kind_name(k), g, js, gl->ranks[gl->offsets[g]], n);
            free(js);
            return false;
        }
        g++;
    }
    return true;
}

MG_TEST(parallel_state_golden_layouts_match_megatron) {
    cJSON *root = load_golden(t);
    if (!root) return;
    /* the golden's kind list is our enum order and names */
    const cJSON *kinds_j = cJSON_GetObjectItemCaseSensitive(root, "kinds");
    MG_EXPECT(cJSON_GetArraySize(kinds_j) == MG_GROUP_KIND_COUNT, "golden has %d kinds",
              cJSON_GetArraySize(kinds_j));
    for (int k = 0; k < MG_GROUP_KIND_COUNT && k < cJSON_GetArraySize(kinds_j); k++) {
        const char *nm = cJSON_GetArrayItem(kinds_j, k)->valuestring;
        MG_EXPECT(strcmp(mg_group_kind_name(k), nm) == 0, "kind %d: %s, golden %s", k,
                  mg_group_kind_name(k), nm);
        MG_EXPECT(mg_group_kind_from_name(nm) == k, "from_name(%s)", nm);
    }
    /* per-rank coordinates in the golden: tp, cp, dp, pp, ep, etp, edp (Megatron's getters) */
    static const char *const coord_names[] = {"tp", "cp", "dp", "pp", "ep", "etp", "edp"};
    const cJSON *coords_j = cJSON_GetObjectItemCaseSensitive(root, "coords");
    for (int i = 0; i < 7; i++)
        MG_EXPECT(strcmp(cJSON_GetArrayItem(coords_j, i)->valuestring, coord_names[i]) == 0,
                  "golden coordinate %d is %s", i, cJSON_GetArrayItem(coords_j, i)->valuestring);

    int n_layouts = 0;
    const cJSON *lay;
    cJSON_ArrayForEach(lay, cJSON_GetObjectItemCaseSensitive(root, "layouts")) {
        const char *name = cJSON_GetObjectItemCaseSensitive(lay, "name")->valuestring;
        mg_parallel_sizes s = golden_sizes(lay);
        mg_parallel_layout l;
        if (mg_parallel_layout_build(&s, &l) != MG_OK) {
            MG_EXPECT(0, "%s: rejected: %s", name, mg_error_message());
            continue;
        }
        n_layouts++;
        MG_EXPECT(l.dp == json_int(lay, "dp") && l.edp == json_int(lay, "edp"),
                  "%s: dp %d edp %d, Megatron %d %d", name, l.dp, l.edp, json_int(lay, "dp"),
                  json_int(lay, "edp"));
        const cJSON *groups = cJSON_GetObjectItemCaseSensitive(lay, "groups");
        for (int k = 0; k < MG_GROUP_KIND_COUNT; k++)
            groups_equal(t, name, &l, k,
                         cJSON_GetObjectItemCaseSensitive(groups, mg_group_kind_name(k)));
        int r = 0;
        const cJSON *rc;
        cJSON_ArrayForEach(rc, cJSON_GetObjectItemCaseSensitive(lay, "ranks")) {
            mg_rank_coords c;
            MG_EXPECT_OK(mg_parallel_rank_coords(&l, r, &c));
            int got[7] = {c.tp, c.cp, c.dp, c.pp, c.ep, c.etp, c.edp};
            for (int i = 0; i < 7; i++)
                MG_EXPECT(got[i] == cJSON_GetArrayItem(rc, i)->valueint,
                          "%s: rank %d %s = %d, Megatron %d", name, r, coord_names[i], got[i],
                          cJSON_GetArrayItem(rc, i)->valueint);
            r++;
        }
        MG_EXPECT(r == s.world_size, "%s: %d ranks of coordinates", name, r);
        mg_parallel_layout_free(&l);
    }
    MG_EXPECT(n_layouts >= 20, "only %d golden layouts", n_layouts);

    /* Layouts Megatron rejects: we reject them for the same reason. */
    static const struct {
        const char *megatron, *ours;
    } reasons[] = {
        {"expert_tensor_model_pipeline_parallel size", "is not divisible by expert tensor"},
        {"is not divisible by", "is not divisible by tensor"},
        {"pp-last rank ordering", "does not end with pp"},
        {"Pipeline parallel groups are expected to be the same", "different pipeline groups"},
    };
    int n_rejected = 0;
    cJSON_ArrayForEach(lay, cJSON_GetObjectItemCaseSensitive(root, "rejected")) {
        const char *name = cJSON_GetObjectItemCaseSensitive(lay, "name")->valuestring;
        const char *err = cJSON_GetObjectItemCaseSensitive(lay, "error")->valuestring;
        mg_parallel_sizes s = golden_sizes(lay);
        const char *want = NULL;
        for (size_t i = 0; i < sizeof reasons / sizeof reasons[0] && !want; i++)
            if (strstr(err, reasons[i].megatron)) want = reasons[i].ours;
        MG_EXPECT(want != NULL, "%s: unknown Megatron error %s", name, err);
        mg_parallel_layout l;
        memset(&l, 0, sizeof l);
        if (want) MG_EXPECT_ERROR(mg_parallel_layout_build(&s, &l), MG_ERR_USAGE, want);
        MG_EXPECT(l.block == NULL && l.groups[0].ranks == NULL, "%s: layout not left empty", name);
        mg_parallel_layout_free(&l);
        n_rejected++;
    }
    MG_EXPECT(n_rejected >= 5, "only %d rejected golden layouts", n_rejected);
    cJSON_Delete(root);
}

/* ---- initialize_model_parallel's docstring: 16 GPUs, TP 2, PP 4 ---- */

static void expect_groups(mg_test_ctx *t, const mg_parallel_layout *l, mg_group_kind k,
                          int n_groups, int size, const int *want) {
    const mg_group_list *gl = &l->groups[k];
    MG_EXPECT(gl->n_groups == n_groups, "%s: %d groups, want %d", mg_group_kind_name(k),
              gl->n_groups, n_groups);
    if (gl->n_groups != n_groups) return;
    for (int g = 0; g < n_groups; g++) {
        int n = 0;
        const int *r = mg_parallel_group_ranks(l, k, g, &n);
        MG_EXPECT(n == size && memcmp(r, want + g * size, sizeof(int) * size) == 0,
                  "%s group %d differs", mg_group_kind_name(k), g);
    }
}

MG_TEST(parallel_state_docstring_16_gpus_tp2_pp4) {
    mg_parallel_sizes s = sizes(16, 2, 4, 1, 1, -1, "");
    mg_parallel_layout l;
    MG_EXPECT_OK(mg_parallel_layout_build(&s, &l));
    MG_EXPECT(l.dp == 2 && strcmp(l.sizes.order, "tp-cp-ep-dp-pp") == 0 && l.sizes.etp == 2,
              "resolved dp %d order %s etp %d", l.dp, l.sizes.order, l.sizes.etp);
    /* "8 data_parallel groups: [g0, g2], [g1, g3], [g4, g6], ..." */
    static const int dp[] = {0, 2, 1, 3, 4, 6, 5, 7, 8, 10, 9, 11, 12, 14, 13, 15};
    /* "8 tensor model-parallel groups: [g0, g1], [g2, g3], ..." */
    static const int tp[] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
    /* "4 pipeline model-parallel groups: [g0, g4, g8, g12], [g1, g5, g9, g13], ..." */
    static const int pp[] = {0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15};
    /* the docstring's model-parallel groups (tp x pp): [0, 1, 4, 5, 8, 9, 12, 13], [2, 3, ...] */
    static const int mp[] = {0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15};
    /* embedding: first and last stage of each pipeline */
    static const int emb[] = {0, 12, 1, 13, 2, 14, 3, 15};
    static const int pos[] = {0, 1, 2, 3};
    expect_groups(t, &l, MG_GROUP_DP, 8, 2, dp);
    expect_groups(t, &l, MG_GROUP_DP_CP, 8, 2, dp);
    expect_groups(t, &l, MG_GROUP_EXPERT_DP, 8, 2, dp);
    expect_groups(t, &l, MG_GROUP_TP, 8, 2, tp);
    expect_groups(t, &l, MG_GROUP_EXPERT_TP, 8, 2, tp);
    expect_groups(t, &l, MG_GROUP_PP, 4, 4, pp);
    expect_groups(t, &l, MG_GROUP_MP, 2, 8, mp);
    expect_groups(t, &l, MG_GROUP_EXPERT_TP_EP_PP, 2, 8, mp);
    expect_groups(t, &l, MG_GROUP_EMBEDDING, 4, 2, emb);
    expect_groups(t, &l, MG_GROUP_POSITION_EMBEDDING, 4, 1, pos);
    /* rank 2 (the docstring's layout): tp group [2, 3], pipeline [2, 6, 10, 14], data [0, 2] */
    mg_rank_coords c;
    MG_EXPECT_OK(mg_parallel_rank_coords(&l, 2, &c));
    MG_EXPECT(c.tp == 0 && c.dp == 1 && c.pp == 0 && c.cp == 0 && c.ep == 0,
              "rank 2: tp %d dp %d pp %d", c.tp, c.dp, c.pp);
    MG_EXPECT(mg_parallel_group_of(&l, MG_GROUP_TP, 2) == 1, "rank 2 in tp group 1");
    MG_EXPECT(mg_parallel_group_of(&l, MG_GROUP_PP, 2) == 2, "rank 2 in pp group 2");
    MG_EXPECT(mg_parallel_group_of(&l, MG_GROUP_DP, 2) == 0, "rank 2 in dp group 0");
    MG_EXPECT(mg_parallel_group_of(&l, MG_GROUP_EMBEDDING, 6) == -1, "rank 6 has no embedding");
    MG_EXPECT(mg_parallel_group_of(&l, MG_GROUP_EMBEDDING, 14) == 2, "rank 14: embedding 2");
    MG_EXPECT(mg_parallel_group_of(&l, MG_GROUP_TP, 16) == -1, "rank 16 is outside");
    MG_EXPECT(mg_parallel_group_of(&l, MG_GROUP_KIND_COUNT, 0) == -1, "bad kind");
    int n = 0;
    MG_EXPECT(mg_parallel_group_ranks(&l, MG_GROUP_TP, 8, &n) == NULL, "tp group 8 is outside");
    MG_EXPECT_ERROR(mg_parallel_rank_coords(&l, 16, &c), MG_ERR_USAGE,
                    "rank 16 is outside the world of 16 ranks (0..15)");
    MG_EXPECT_ERROR(mg_parallel_rank_coords(&l, -1, &c), MG_ERR_USAGE, "rank -1 is outside");
    mg_parallel_layout_free(&l);
    mg_parallel_layout_free(&l); /* a freed layout frees again harmlessly */
}

/* ---- invariants over every layout ---- */

/* The test's own model: sizes and strides per dimension (tp, cp, ep, dp, pp) from the order. */
typedef struct {
    int size[5], stride[5];
} model;

static const char *const dim_tok[5] = {"tp", "cp", "ep", "dp", "pp"};

static void model_init(model *m, const char *order, int tp, int cp, int ep, int dp, int pp) {
    int sz[5] = {tp, cp, ep, dp, pp}, s = 1;
    memcpy(m->size, sz, sizeof sz);
    for (const char *p = order; *p; p += (p[2] == '-') ? 3 : 2) {
        for (int d = 0; d < 5; d++)
            if (strncmp(p, dim_tok[d], 2) == 0) {
                m->stride[d] = s;
                s *= sz[d];
            }
        if (!p[2]) break;
    }
}

static int model_coord(const model *m, int rank, int d) {
    return (rank / m->stride[d]) % m->size[d];
}

/* Position of the dims in `mask` (or not in it) of rank, counted fastest-first in the order:
 * Megatron's rank_in_group (or group_index). */
static int model_index(const model *m, const int *order_dims, int rank, unsigned mask, bool in) {
    int idx = 0, scale = 1;
    for (int k = 0; k < 5; k++) {
        int d = order_dims[k];
        if (((mask >> d) & 1) != in) continue;
        idx += model_coord(m, rank, d) * scale;
        scale *= m->size[d];
    }
    return idx;
}

#define M(d) (1u << (d))
static const struct {
    bool expert;
    unsigned mask;
} kind_dims[MG_GROUP_KIND_COUNT] = {
    [MG_GROUP_TP] = {0, M(0)},
    [MG_GROUP_PP] = {0, M(4)},
    [MG_GROUP_DP] = {0, M(3)},
    [MG_GROUP_DP_CP] = {0, M(3) | M(1)},
    [MG_GROUP_CP] = {0, M(1)},
    [MG_GROUP_MP] = {0, M(0) | M(4)},
    [MG_GROUP_TP_DP] = {0, M(0) | M(3)},
    [MG_GROUP_TP_DP_CP] = {0, M(0) | M(3) | M(1)},
    [MG_GROUP_TP_CP] = {0, M(0) | M(1)},
    [MG_GROUP_EP] = {1, M(2)},
    [MG_GROUP_EXPERT_TP] = {1, M(0)},
    [MG_GROUP_EXPERT_TP_EP] = {1, M(0) | M(2)},
    [MG_GROUP_EXPERT_TP_EP_PP] = {1, M(0) | M(2) | M(4)},
    [MG_GROUP_EXPERT_DP] = {1, M(3)},
};

/* Checks one built layout; returns false (after one message) at the first broken invariant. */
static bool check_invariants(mg_test_ctx *t, const mg_parallel_sizes *s,
                             const mg_parallel_layout *l) {
    char name[160];
    snprintf(name, sizeof name, "world %d tp %d pp %d cp %d ep %d etp %d order %s", s->world_size,
             s->tp, s->pp, s->cp, s->ep, s->etp, l->sizes.order);
#define FAIL_IF(cond, ...)                                                                         \
    do {                                                                                           \
        if (cond) {                                                                                \
            char msg_[256];                                                                        \
            snprintf(msg_, sizeof msg_, __VA_ARGS__);                                              \
            MG_EXPECT(0, "%s: %s", name, msg_);                                                    \
            return false;                                                                          \
        }                                                                                          \
    } while (0)
    int w = s->world_size, etp = s->etp == -1 ? s->tp : s->etp;
    int dp = w / (s->tp * s->pp * s->cp), edp = w / (etp * s->ep * s->pp);
    FAIL_IF(l->dp != dp || l->edp != edp || l->sizes.etp != etp, "dp %d edp %d etp %d", l->dp,
            l->edp, l->sizes.etp);
    model dense, expert;
    model_init(&dense, l->sizes.order, s->tp, s->cp, 1, dp, s->pp);
    model_init(&expert, l->sizes.order, etp, 1, s->ep, edp, s->pp);
    int order_dims[5];
    for (int k = 0; k < 5; k++) {
        for (int d = 0; d < 5; d++)
            if (strncmp(l->sizes.order + 3 * k, dim_tok[d], 2) == 0) order_dims[k] = d;
        FAIL_IF(l->order[k] != order_dims[k], "order position %d", k);
    }

    /* coordinates: the model's, and each grid visited exactly once */
    char *seen = calloc(2 * (size_t)w, 1);
    for (int r = 0; r < w; r++) {
        mg_rank_coords c;
        if (mg_parallel_rank_coords(l, r, &c) != MG_OK) break;
        int dc[5] = {c.tp, c.cp, 0, c.dp, c.pp}, ec[5] = {c.etp, 0, c.ep, c.edp, c.pp};
        int dr = 0, er = 0;
        for (int d = 0; d < 5; d++) {
            if (dc[d] != model_coord(&dense, r, d) || ec[d] != model_coord(&expert, r, d)) {
                free(seen);
                FAIL_IF(1, "rank %d: coordinate %s differs from rank = sum(coord * stride)", r,
                        dim_tok[d]);
            }
            dr += dc[d] * dense.stride[d];
            er += ec[d] * expert.stride[d];
        }
        if (dr != r || er != r || seen[dr]++ || seen[w + er]++) {
            free(seen);
            FAIL_IF(1, "rank %d: coordinates are not a bijection", r);
        }
    }
    free(seen);

    /* every orthogonal kind: a partition in Megatron's order, consistent with the coordinates */
    for (int k = 0; k < MG_GROUP_KIND_COUNT; k++) {
        if (k == MG_GROUP_EMBEDDING || k == MG_GROUP_POSITION_EMBEDDING) continue;
        const model *m = kind_dims[k].expert ? &expert : &dense;
        unsigned mask = kind_dims[k].mask;
        int size = 1;
        for (int d = 0; d < 5; d++)
            if (mask & M(d)) size *= m->size[d];
        const mg_group_list *gl = &l->groups[k];
        const char *kn = mg_group_kind_name(k);
        FAIL_IF(gl->n_groups * size != w || gl->offsets[gl->n_groups] != w,
                "%s: %d groups of size %d for %d ranks", kn, gl->n_groups, size, w);
        for (int g = 0; g < gl->n_groups; g++) {
            FAIL_IF(gl->offsets[g + 1] - gl->offsets[g] != size, "%s group %d size", kn, g);
            for (int i = 0; i < size; i++) {
                int r = gl->ranks[gl->offsets[g] + i];
                FAIL_IF(r < 0 || r >= w, "%s: rank %d", kn, r);
                FAIL_IF(model_index(m, order_dims, r, mask, true) != i ||
                            model_index(m, order_dims, r, mask, false) != g,
                        "%s: rank %d is at group %d position %d, Megatron's order says %d, %d", kn,
                        r, g, i, model_index(m, order_dims, r, mask, false),
                        model_index(m, order_dims, r, mask, true));
                FAIL_IF(mg_parallel_group_of(l, k, r) != g, "%s: group_of(%d)", kn, r);
            }
        }
    }
    /* a rank's coordinate is its index in its group of that kind */
    static const struct {
        int kind;
        size_t off;
    } own[] = {
        {MG_GROUP_TP, offsetof(mg_rank_coords, tp)},
        {MG_GROUP_CP, offsetof(mg_rank_coords, cp)},
        {MG_GROUP_DP, offsetof(mg_rank_coords, dp)},
        {MG_GROUP_PP, offsetof(mg_rank_coords, pp)},
        {MG_GROUP_EP, offsetof(mg_rank_coords, ep)},
        {MG_GROUP_EXPERT_TP, offsetof(mg_rank_coords, etp)},
        {MG_GROUP_EXPERT_DP, offsetof(mg_rank_coords, edp)},
    };
    for (int r = 0; r < w; r++) {
        mg_rank_coords c;
        mg_parallel_rank_coords(l, r, &c);
        for (size_t j = 0; j < sizeof own / sizeof own[0]; j++) {
            int n = 0, v = *(const int *)((const char *)&c + own[j].off);
            const int *g = mg_parallel_group_ranks(l, own[j].kind,
                                                   mg_parallel_group_of(l, own[j].kind, r), &n);
            FAIL_IF(!g || v >= n || g[v] != r, "rank %d: coordinate is not its index in %s", r,
                    mg_group_kind_name(own[j].kind));
        }
    }
    /* embedding groups: first and last stage of each pp group; position: first stage */
    const mg_group_list *pp = &l->groups[MG_GROUP_PP];
    for (int g = 0; g < pp->n_groups; g++) {
        const int *pr = pp->ranks + pp->offsets[g];
        int n = 0;
        const int *e = mg_parallel_group_ranks(l, MG_GROUP_EMBEDDING, g, &n);
        FAIL_IF(!e || n != (s->pp > 1 ? 2 : 1) || e[0] != pr[0] || e[n - 1] != pr[s->pp - 1],
                "embedding group %d", g);
        const int *ps = mg_parallel_group_ranks(l, MG_GROUP_POSITION_EMBEDDING, g, &n);
        FAIL_IF(!ps || n != 1 || ps[0] != pr[0], "position embedding group %d", g);
    }
    FAIL_IF(l->groups[MG_GROUP_EMBEDDING].n_groups != pp->n_groups ||
                l->groups[MG_GROUP_POSITION_EMBEDDING].n_groups != pp->n_groups,
            "embedding group counts");
    for (int r = 0; r < w; r++) {
        int stage = model_coord(&dense, r, 4);
        bool in_emb = stage == 0 || stage == s->pp - 1;
        FAIL_IF((mg_parallel_group_of(l, MG_GROUP_EMBEDDING, r) >= 0) != in_emb ||
                    (mg_parallel_group_of(l, MG_GROUP_POSITION_EMBEDDING, r) >= 0) != (stage == 0),
                "rank %d (stage %d): embedding membership", r, stage);
    }
#undef FAIL_IF
    return true;
}

/* The product of the sizes before pp in the order: the stride of the pipeline groups. */
static int span_before_pp(const char *order, const int size[5]) {
    int s = 1;
    for (const char *p = order; strncmp(p, "pp", 2) != 0; p += 3)
        for (int d = 0; d < 5; d++)
            if (strncmp(p, dim_tok[d], 2) == 0) s *= size[d];
    return s;
}

typedef struct {
    int built, pp_last, pp_groups;
} tally;

/* Builds one layout that passes the divisibility checks; checks the invariants, or that the
 * rejection is the one Megatron's two order rules predict. */
static bool run_one(mg_test_ctx *t, int w, int tp, int pp, int cp, int ep, int etp,
                    const char *order, tally *n) {
    mg_parallel_sizes s = sizes(w, tp, pp, cp, ep, etp, order);
    int e = etp == -1 ? tp : etp, dp = w / (tp * pp * cp), edp = w / (e * ep * pp);
    int dense_size[5] = {tp, cp, 1, dp, pp}, expert_size[5] = {e, 1, ep, edp, pp};
    bool ends_pp = strcmp(order + strlen(order) - 2, "pp") == 0;
    bool bad_pp_last = !ends_pp && pp > 1 && edp != dp;
    bool bad_pp_groups =
        pp > 1 && span_before_pp(order, dense_size) != span_before_pp(order, expert_size);
    mg_parallel_layout l;
    mg_error_clear();
    mg_status st = mg_parallel_layout_build(&s, &l);
    bool ok = true;
    if (bad_pp_last || bad_pp_groups) {
        const char *want = bad_pp_last ? "does not end with pp" : "different pipeline groups";
        ok = st == MG_ERR_USAGE && strstr(mg_error_message(), want);
        MG_EXPECT(ok, "world %d tp %d pp %d cp %d ep %d etp %d %s: want '%s', got %s: %s", w, tp,
                  pp, cp, ep, etp, order, want, mg_status_name(st), mg_error_message());
        n->pp_last += bad_pp_last;
        n->pp_groups += !bad_pp_last;
    } else if (st != MG_OK) {
        MG_EXPECT(0, "world %d tp %d pp %d cp %d ep %d etp %d %s rejected: %s", w, tp, pp, cp, ep,
                  etp, order, mg_error_message());
        ok = false;
    } else {
        ok = check_invariants(t, &s, &l);
        n->built++;
    }
    mg_parallel_layout_free(&l);
    return ok;
}

/* Every (tp, pp, cp, ep, etp) that passes the divisibility checks for world w (etp -1 and every
 * explicit etp), under each of orders[0..n_orders). Stops at the first failure. */
static bool run_world(mg_test_ctx *t, int w, const char *const *orders, int n_orders, tally *n) {
    for (int tp = 1; tp <= w; tp++)
        for (int pp = 1; w % tp == 0 && pp <= w / tp; pp++)
            for (int cp = 1; (w / tp) % pp == 0 && cp <= w / (tp * pp); cp++) {
                if ((w / (tp * pp)) % cp) continue;
                for (int ep = 1; ep <= w / pp; ep++)
                    for (int etp = -1; etp <= w / pp; etp++) {
                        int e = etp == -1 ? tp : etp;
                        if (etp == 0 || (w / pp) % ep || (w / pp / ep) % e ||
                            (etp == tp && etp != -1))
                            continue;
                        for (int o = 0; o < n_orders; o++)
                            if (!run_one(t, w, tp, pp, cp, ep, etp, orders[o], n)) return false;
                    }
            }
    return true;
}

MG_TEST(parallel_state_invariants_every_layout_to_64_ranks) {
    static const char *const orders[] = {MG_PARALLEL_ORDER_DEFAULT, MG_PARALLEL_ORDER_TP_PP_DP};
    tally n = {0};
    for (int w = 1; w <= 64; w++)
        if (!run_world(t, w, orders, 2, &n)) return;
    MG_EXPECT(n.built > 5000 && n.pp_last > 100, "built %d, rejected for pp-last %d", n.built,
              n.pp_last);
    MG_EXPECT(n.pp_groups == 0, "the two standard orders never give different pipeline groups");
}

MG_TEST(parallel_state_invariants_every_order_to_16_ranks) {
    /* all 120 permutations of the five tokens */
    static char orders[120][16];
    const char *order_ptr[120];
    int n_orders = 0;
    for (int a = 0; a < 5; a++)
        for (int b = 0; b < 5; b++)
            for (int c = 0; c < 5; c++)
                for (int d = 0; d < 5; d++)
                    for (int e = 0; e < 5; e++) {
                        int p[5] = {a, b, c, d, e}, used = 0;
                        for (int i = 0; i < 5; i++) used |= 1 << p[i];
                        if (used != 31) continue;
                        snprintf(orders[n_orders], sizeof orders[0], "%s-%s-%s-%s-%s",
                                 dim_tok[p[0]], dim_tok[p[1]], dim_tok[p[2]], dim_tok[p[3]],
                                 dim_tok[p[4]]);
                        order_ptr[n_orders] = orders[n_orders];
                        n_orders++;
                    }
    MG_EXPECT(n_orders == 120, "%d orders", n_orders);
    tally n = {0};
    for (int w = 1; w <= 16; w++)
        if (!run_world(t, w, order_ptr, n_orders, &n)) return;
    MG_EXPECT(n.built > 10000 && n.pp_last > 1000 && n.pp_groups > 100,
              "built %d, rejected: pp-last %d, pipeline groups %d", n.built, n.pp_last,
              n.pp_groups);
}

/* ---- rejections ---- */

#define EXPECT_REJECT(s, substr)                                                                   \
    do {                                                                                           \
        mg_parallel_sizes s_ = (s);                                                                \
        mg_parallel_layout l_;                                                                     \
        MG_EXPECT_ERROR(mg_parallel_layout_build(&s_, &l_), MG_ERR_USAGE, substr);                 \
        MG_EXPECT(l_.block == NULL && l_.groups[MG_GROUP_TP].ranks == NULL,                        \
                  "failed build left data");                                                       \
        mg_parallel_layout_free(&l_);                                                              \
        MG_EXPECT_ERROR(mg_parallel_sizes_check(&s_, NULL, NULL), MG_ERR_USAGE, substr);           \
    } while (0)

MG_TEST(parallel_state_rejects_bad_sizes) {
    EXPECT_REJECT(sizes(0, 1, 1, 1, 1, -1, ""), "world size 0 must be at least 1");
    EXPECT_REJECT(sizes(1 << 25, 1, 1, 1, 1, -1, ""),
                  "world size 33554432 is larger than the 16777216 ranks supported");
    EXPECT_REJECT(sizes(8, 0, 1, 1, 1, -1, ""),
                  "tensor-model-parallel size 0 must be at least 1 (--tensor-model-parallel-size)");
    EXPECT_REJECT(sizes(8, 1, -2, 1, 1, -1, ""),
                  "pipeline-model-parallel size -2 must be at least 1 "
                  "(--pipeline-model-parallel-size)");
    EXPECT_REJECT(sizes(8, 1, 1, 0, 1, -1, ""),
                  "context-parallel size 0 must be at least 1 (--context-parallel-size)");
    EXPECT_REJECT(sizes(8, 1, 1, 1, 0, -1, ""),
                  "expert-model-parallel size 0 must be at least 1 (--expert-model-parallel-size)");
    EXPECT_REJECT(sizes(8, 1, 1, 1, 1, 0, ""),
                  "expert-tensor-parallel size 0 must be at least 1, or -1 for the "
                  "tensor-model-parallel size (--expert-tensor-parallel-size)");
    EXPECT_REJECT(sizes(8, 1, 1, 1, 1, -2, ""), "expert-tensor-parallel size -2 must be");
}

MG_TEST(parallel_state_rejects_bad_orders) {
    const char *hint = "it must be a dash-separated permutation of tp, cp, ep, dp, pp, e.g. "
                       "tp-cp-ep-dp-pp (the default) or tp-cp-ep-pp-dp (--use-tp-pp-dp-mapping)";
    /* Megatron's RankGenerator appends a dimension left out when its size is 1 ... */
    mg_parallel_sizes ok = sizes(8, 2, 2, 1, 1, -1, "tp-dp-pp");
    MG_EXPECT_OK(mg_parallel_sizes_check(&ok, NULL, NULL));
    /* ... and refuses it otherwise: ep 2, cp 2, and dp 8 left out */
    EXPECT_REJECT(sizes(8, 1, 1, 1, 2, -1, "tp-cp-dp-pp"),
                  "--parallel-order 'tp-cp-dp-pp' lacks 'ep', whose size is 2");
    EXPECT_REJECT(sizes(8, 1, 1, 2, 1, -1, "tp-dp-pp"), "lacks 'cp', whose size is 2");
    EXPECT_REJECT(sizes(8, 1, 1, 1, 1, -1, "tp-cp-ep-pp"), "lacks 'dp', whose size is 8");
    EXPECT_REJECT(sizes(8, 1, 1, 1, 2, -1, "tp-cp-dp-pp"), hint);
    EXPECT_REJECT(sizes(8, 1, 1, 1, 1, -1, "tp-cp-ep-dp-pp-tp"),
                  "--parallel-order 'tp-cp-ep-dp-pp-tp' repeats 'tp'");
    EXPECT_REJECT(sizes(8, 1, 1, 1, 1, -1, "tp-cp-xx-dp-pp"),
                  "--parallel-order 'tp-cp-xx-dp-pp' has an unknown token 'xx'");
    EXPECT_REJECT(sizes(8, 1, 1, 1, 1, -1, "TP-CP-EP-DP-PP"), "unknown token 'TP'");
    EXPECT_REJECT(sizes(8, 1, 1, 1, 1, -1, "tp-cp-ep-dp-ppp"), "unknown token 'ppp'");
    EXPECT_REJECT(sizes(8, 1, 1, 1, 1, -1, "tp--cp-ep-dp-pp"), "has an empty token");
    EXPECT_REJECT(sizes(8, 1, 1, 1, 1, -1, "tp-cp-ep-dp-pp-"), "has an empty token");
    EXPECT_REJECT(sizes(8, 1, 1, 1, 1, -1, "-"), "has an empty token");
    EXPECT_REJECT(sizes(8, 1, 1, 1, 1, -1, "tp-cp\n-ep-dp-pp"), "'tp-cp?-ep-dp-pp'");
    mg_parallel_sizes s = sizes(8, 1, 1, 1, 1, -1, "");
    memset(s.order, 'a', sizeof s.order); /* no terminating NUL inside the field */
    EXPECT_REJECT(s, "is too long");

    int dims[MG_DIM_COUNT];
    MG_EXPECT_OK(mg_parallel_order_parse("", NULL, dims));
    MG_EXPECT(dims[0] == MG_DIM_TP && dims[1] == MG_DIM_CP && dims[2] == MG_DIM_EP &&
                  dims[3] == MG_DIM_DP && dims[4] == MG_DIM_PP,
              "default order");
    MG_EXPECT_OK(mg_parallel_order_parse("pp-dp-ep-cp-tp", NULL, dims));
    MG_EXPECT(dims[0] == MG_DIM_PP && dims[4] == MG_DIM_TP, "reversed order");
}

MG_TEST(parallel_state_rejects_megatrons_layouts) {
    /* initialize_model_parallel: world_size % (tp * pp * cp); the choices vary tp, then pp,
     * then cp, whichever can fix it alone */
    EXPECT_REJECT(sizes(6, 4, 1, 1, 1, -1, ""),
                  "world size 6 is not divisible by tensor (4) x pipeline (1) x context (1) = 4; "
                  "tensor-model-parallel sizes that divide 6 with these: 1, 2, 3, 6");
    EXPECT_REJECT(sizes(16, 2, 3, 1, 1, -1, ""),
                  "world size 16 is not divisible by tensor (2) x pipeline (3) x context (1) = 6; "
                  "pipeline-model-parallel sizes that divide 16 with these: 1, 2, 4, 8");
    EXPECT_REJECT(sizes(8, 2, 1, 3, 1, -1, ""),
                  "= 6; context-parallel sizes that divide 8 with these: 1, 2, 4");
    EXPECT_REJECT(sizes(8, 3, 3, 1, 1, -1, ""),
                  "= 9; their product must be a divisor of 8: 1, 2, 4, 8");
    /* sizes far beyond the world: the product saturates instead of overflowing */
    EXPECT_REJECT(sizes(8, 2147483647, 2147483647, 2147483647, 1, -1, ""),
                  "context (2147483647) = more than 2^63; their product must be a divisor of 8");
    EXPECT_REJECT(sizes(8, 1, 1, 1, 2147483647, 2147483647, ""),
                  "= 4611686014132420609; their product must be a divisor of 8: 1, 2, 4, 8");
    EXPECT_REJECT(sizes(4, 8, 1, 1, 1, -1, ""), "tensor-model-parallel sizes that divide 4 with "
                                                "these: 1, 2, 4");
    /* ... and world_size % (etp * ep * pp) */
    EXPECT_REJECT(sizes(8, 2, 1, 1, 3, -1, ""),
                  "world size 8 is not divisible by expert tensor (2, the tensor-model-parallel "
                  "size) x expert model (3) x pipeline (1) = 6; expert-model-parallel sizes that "
                  "divide 8 with these: 1, 2, 4");
    EXPECT_REJECT(sizes(8, 2, 2, 1, 2, 4, ""),
                  "expert tensor (4) x expert model (2) x pipeline (2) = 16; expert-model-parallel "
                  "sizes that divide 8 with these: 1");
    EXPECT_REJECT(sizes(12, 1, 1, 1, 3, 8, ""),
                  "= 24; expert-tensor-parallel sizes that divide 12 with these: 1, 2, 4");
    EXPECT_REJECT(sizes(12, 1, 1, 1, 5, 8, ""),
                  "= 40; their product must be a divisor of 12: 1, 2, 3, 4, 6, 12");
    /* an order not ending in pp needs equal dense and expert data-parallel sizes when pp > 1 */
    EXPECT_REJECT(sizes(16, 2, 2, 1, 4, 1, MG_PARALLEL_ORDER_TP_PP_DP),
                  "order tp-cp-ep-pp-dp does not end with pp and the pipeline size is 2, so "
                  "Megatron requires the expert data-parallel size 16 / (expert tensor 1 x expert "
                  "model 4 x pipeline 2) = 2 to equal the data-parallel size 16 / (tensor 2 x "
                  "pipeline 2 x context 1) = 4; (expert-tensor, expert-model) sizes that do: (1, "
                  "2), (2, 1); or use an order ending in pp, e.g. tp-cp-ep-dp-pp");
    /* the same sizes are fine with pp last, or with pp = 1 */
    mg_parallel_sizes ok = sizes(16, 2, 2, 1, 4, 1, "");
    MG_EXPECT_OK(mg_parallel_sizes_check(&ok, NULL, NULL));
    ok = sizes(16, 2, 1, 1, 4, 1, MG_PARALLEL_ORDER_TP_PP_DP);
    int dp = 0, edp = 0;
    MG_EXPECT_OK(mg_parallel_sizes_check(&ok, &dp, &edp));
    MG_EXPECT(dp == 8 && edp == 4, "dp %d edp %d", dp, edp);
    /* dense and expert pipeline groups must be equal (custom orders only) */
    EXPECT_REJECT(sizes(8, 2, 2, 1, 2, 1, "tp-dp-pp-cp-ep"),
                  "order tp-dp-pp-cp-ep gives the dense and expert layouts different pipeline "
                  "groups (group 0 is [0, 4, ...] vs [0, 2, ...]), which Megatron rejects: the "
                  "dimensions before pp span 4 ranks in the dense layout but 2 in the expert one; "
                  "use an order ending in pp (e.g. tp-cp-ep-dp-pp) or sizes that make both equal");
}
