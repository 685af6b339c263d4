#include "parallel/pipeline/layers.h"
#include "parallel/pipeline/layer_layout.h"

#include "core/status.h"

#include <stdio.h>
#include <string.h>

#define FIRST_FLAG "--decoder-first-pipeline-num-layers"
#define LAST_FLAG  "--decoder-last-pipeline-num-layers"
#define LPVS_FLAG  "--num-layers-per-virtual-pipeline-stage"
#define VPP_FLAG   "--num-virtual-stages-per-pipeline-rank"
#define PP_FLAG    "--pipeline-model-parallel-size"

/* Megatron has no limits; this one keeps every sum and product here far from INT_MAX. */
#define MAX_VALUE (1 << 20)

typedef struct {
    char s[96];
} valid_list;

/* The values y >= lo with (y + shift) % mod == 0 nearest to `around`: one below, two above. */
static valid_list near_multiples(int around, long mod, int shift, int lo) {
    valid_list v = {""};
    int found[3], nf = 0;
    for (int y = around - 1; y >= lo && nf < 1; y--)
        if ((y + shift) % mod == 0) found[nf++] = y;
    for (int y = around + 1 > lo ? around + 1 : lo; y <= MAX_VALUE && nf < 3; y++)
        if ((y + shift) % mod == 0) found[nf++] = y;
    for (int i = 0; i < nf; i++) {
        size_t len = strlen(v.s);
        snprintf(v.s + len, sizeof v.s - len, "%s%d", i ? ", " : "", found[i]);
    }
    return v;
}

mg_layers_params mg_layers_params_of(const mg_config *c) {
    int vflag = c->virtual_pipeline_model_parallel_size;
    return (mg_layers_params){
        .num_layers = c->num_layers,
        .pp = c->pipeline_model_parallel_size > 0 ? c->pipeline_model_parallel_size : 1,
        .vpp = vflag > 0 ? vflag : 0,
        .layers_per_virtual_stage = c->num_layers_per_virtual_pipeline_stage > 0
                                        ? c->num_layers_per_virtual_pipeline_stage
                                        : 0,
        .first_stage_layers = c->decoder_first_pipeline_num_layers,
        .last_stage_layers = c->decoder_last_pipeline_num_layers,
        .account_for_embedding = c->account_for_embedding_in_pipeline_split,
        .account_for_loss = c->account_for_loss_in_pipeline_split,
        .layout = c->pipeline_model_parallel_layout,
    };
}

static bool has_layout(const mg_layers_params *p) {
    return p->layout && p->layout[0];
}

/* --pipeline-model-parallel-layout against the other placement flags (Megatron's arguments.py:
 * at most one of it, --num-layers-per-virtual-pipeline-stage and the virtual stages), then
 * parsed. */
static mg_status check_layout(const mg_layers_params *p, mg_layer_layout *lay, int *vpp) {
    if (p->vpp > 1 || p->layers_per_virtual_stage > 0)
        return MG_FAIL(
            MG_ERR_USAGE,
            "No more than one of the following arguments can be set at the same time: " LPVS_FLAG
            ", " VPP_FLAG ", --pipeline-model-parallel-layout (the layout "
            "gives the virtual stages)");
    if (p->first_stage_layers >= 0 || p->last_stage_layers >= 0 || p->account_for_embedding ||
        p->account_for_loss)
        return MG_FAIL(
            MG_ERR_USAGE,
            "--pipeline-model-parallel-layout places every layer itself; drop " FIRST_FLAG
            ", " LAST_FLAG " and the --account-for-* flags");
    MG_CHECK(mg_layer_layout_parse(p->layout, p->pp, p->num_layers, lay));
    *vpp = lay->n_stages / p->pp;
    return MG_OK;
}

static valid_list divisors(int n) {
    valid_list v = {""};
    for (int d = 1, k = 0; d <= n && k < 8; d++) {
        if (n % d) continue;
        size_t len = strlen(v.s);
        snprintf(v.s + len, sizeof v.s - len, "%s%d", k++ ? ", " : "", d);
    }
    return v;
}

static bool has_first(const mg_layers_params *p) {
    return p->first_stage_layers >= 0;
}
static bool has_last(const mg_layers_params *p) {
    return p->last_stage_layers >= 0;
}
static bool uneven(const mg_layers_params *p) {
    return has_first(p) || has_last(p);
}

/* Layers the split divides: L plus one per accounted embedding / loss. */
static int split_layers(const mg_layers_params *p) {
    return p->num_layers + (p->account_for_embedding ? 1 : 0) + (p->account_for_loss ? 1 : 0);
}

/* The "L + 1 (embedding) = 9" wording when account flags add to L. */
static const char *accounted(const mg_layers_params *p, char *buf, size_t n) {
    if (split_layers(p) == p->num_layers) {
        snprintf(buf, n, "--num-layers %d", p->num_layers);
    } else {
        snprintf(buf, n, "--num-layers %d + %d (counting the %s as a layer) = %d", p->num_layers,
                 split_layers(p) - p->num_layers,
                 p->account_for_embedding && p->account_for_loss ? "embedding and the loss"
                 : p->account_for_embedding                      ? "embedding"
                                                                 : "loss",
                 split_layers(p));
    }
    return buf;
}

static mg_status fail_not_divisible_pp(const mg_layers_params *p) {
    char what[128];
    int extra = split_layers(p) - p->num_layers;
    return MG_FAIL(
        MG_ERR_USAGE,
        "%s is not divisible by " PP_FLAG " %d; valid --num-layers: %s (or set " FIRST_FLAG
        "/" LAST_FLAG " for an uneven split)",
        accounted(p, what, sizeof what), p->pp, near_multiples(p->num_layers, p->pp, extra, 1).s);
}

/* Megatron-LM arguments.py: --num-layers-per-virtual-pipeline-stage fixes V. */
static mg_status resolve_vpp(const mg_layers_params *p, int *vpp) {
    int v = p->vpp > 1 ? p->vpp : 1;
    if (p->layers_per_virtual_stage > 0) {
        if (p->vpp > 1)
            return MG_FAIL(MG_ERR_USAGE,
                           "set at most one of " LPVS_FLAG " (%d) and " VPP_FLAG " (%d)",
                           p->layers_per_virtual_stage, p->vpp);
        if (uneven(p))
            return MG_FAIL(MG_ERR_USAGE,
                           LPVS_FLAG " cannot be used with " FIRST_FLAG "/" LAST_FLAG
                                     "; give the virtual stages with " VPP_FLAG " instead");
        if (split_layers(p) % p->pp) return fail_not_divisible_pp(p);
        int per_stage = split_layers(p) / p->pp;
        if (per_stage % p->layers_per_virtual_stage)
            return MG_FAIL(MG_ERR_USAGE,
                           LPVS_FLAG " %d does not divide the %d layers per pipeline stage; "
                                     "valid: %s",
                           p->layers_per_virtual_stage, per_stage, divisors(per_stage).s);
        v = per_stage / p->layers_per_virtual_stage;
    }
    *vpp = v;
    return MG_OK;
}

/* One of --decoder-first/last-pipeline-num-layers, when given: n layers over v virtual stages. */
static mg_status check_end_stage(const char *flag, int n, int v) {
    if (n == 0) return MG_FAIL(MG_ERR_USAGE, "%s must be larger than 0 (got 0)", flag);
    if (n % v)
        return MG_FAIL(MG_ERR_USAGE,
                       "%s %d must be divisible by the %d virtual stages per pipeline rank; "
                       "valid: %s",
                       flag, n, v, near_multiples(n, v, 0, 1).s);
    return MG_OK;
}

/* TransformerConfig.__post_init__ for --decoder-first/last-pipeline-num-layers. */
static mg_status check_uneven(const mg_layers_params *p, int v) {
    int f = p->first_stage_layers, l = p->last_stage_layers, L = p->num_layers;
    if (p->account_for_embedding || p->account_for_loss)
        return MG_FAIL(MG_ERR_USAGE,
                       FIRST_FLAG "/" LAST_FLAG " cannot be combined with "
                                  "--account-for-embedding-in-pipeline-split or "
                                  "--account-for-loss-in-pipeline-split; use one or the other");
    if (p->pp < 2)
        return MG_FAIL(MG_ERR_USAGE, FIRST_FLAG "/" LAST_FLAG " need " PP_FLAG " > 1 (got %d)",
                       p->pp);
    if (has_first(p)) MG_CHECK(check_end_stage(FIRST_FLAG, f, v));
    if (has_last(p)) MG_CHECK(check_end_stage(LAST_FLAG, l, v));
    int ends = (has_first(p) ? f : 0) + (has_last(p) ? l : 0);
    int middle = L - ends, middle_ranks = p->pp - has_first(p) - has_last(p);
    if (middle < 0)
        return MG_FAIL(MG_ERR_USAGE,
                       "the first and last pipeline stages take %d layers (" FIRST_FLAG
                       "/" LAST_FLAG "), more than --num-layers %d",
                       ends, L);
    if (middle > 0 && middle_ranks == 0)
        return MG_FAIL(MG_ERR_USAGE,
                       "%d layers remain after the first and last stages but " PP_FLAG
                       " %d leaves no middle pipeline stage for them; valid --num-layers: %d",
                       middle, p->pp, ends);
    if (middle == 0 && middle_ranks > 0)
        return MG_FAIL(MG_ERR_USAGE,
                       "no layers remain for the %d middle pipeline stage%s after the first and "
                       "last stages take all %d; valid --num-layers: %s",
                       middle_ranks, middle_ranks > 1 ? "s" : "", L,
                       near_multiples(L, middle_ranks, -ends, ends + 1).s);
    if (middle_ranks > 0 && middle % middle_ranks)
        return MG_FAIL(MG_ERR_USAGE,
                       "the %d layers between the first and last stages are not divisible by the "
                       "%d middle pipeline stages; valid --num-layers: %s",
                       middle, middle_ranks, near_multiples(L, middle_ranks, -ends, ends + 1).s);
    if (middle_ranks > 0 && (middle / middle_ranks) % v)
        return MG_FAIL(MG_ERR_USAGE,
                       "the %d layers on each middle pipeline stage are not divisible by the %d "
                       "virtual stages per pipeline rank; valid --num-layers: %s",
                       middle / middle_ranks, v,
                       near_multiples(L, (long)middle_ranks * v, -ends, ends + 1).s);
    return MG_OK;
}

/* mg_layers_check, a layout parsed into *lay (*lay_out: lay, or NULL without a layout). */
static mg_status check(const mg_layers_params *p, int *vpp, mg_layer_layout *lay,
                       const mg_layer_layout **lay_out) {
    *lay_out = NULL;
    if (p->num_layers < 1)
        return MG_FAIL(MG_ERR_USAGE, "--num-layers must be >= 1 (got %d)", p->num_layers);
    if (p->pp < 1) return MG_FAIL(MG_ERR_USAGE, PP_FLAG " must be >= 1 (got %d)", p->pp);
    if (p->vpp < 0) return MG_FAIL(MG_ERR_USAGE, VPP_FLAG " must be >= 1 (got %d)", p->vpp);
    if (p->layers_per_virtual_stage < 0)
        return MG_FAIL(MG_ERR_USAGE, LPVS_FLAG " must be >= 1 (got %d)",
                       p->layers_per_virtual_stage);
    if (p->first_stage_layers < -1)
        return MG_FAIL(MG_ERR_USAGE, FIRST_FLAG " must be larger than 0 (got %d)",
                       p->first_stage_layers);
    if (p->last_stage_layers < -1)
        return MG_FAIL(MG_ERR_USAGE, LAST_FLAG " must be larger than 0 (got %d)",
                       p->last_stage_layers);
    const struct {
        const char *flag;
        int value;
    } sizes[] = {{"--num-layers", p->num_layers},
                 {PP_FLAG, p->pp},
                 {VPP_FLAG, p->vpp},
                 {LPVS_FLAG, p->layers_per_virtual_stage},
                 {FIRST_FLAG, p->first_stage_layers},
                 {LAST_FLAG, p->last_stage_layers}};
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
        if (sizes[i].value > MAX_VALUE)
            return MG_FAIL(MG_ERR_USAGE, "%s %d is too large (at most %d)", sizes[i].flag,
                           sizes[i].value, MAX_VALUE);
    int v = 1;
    if (has_layout(p)) {
        MG_CHECK(check_layout(p, lay, &v));
        *lay_out = lay;
    } else {
        MG_CHECK(resolve_vpp(p, &v));
    }
    if (v > 1 && p->pp < 2)
        return MG_FAIL(MG_ERR_USAGE,
                       "a virtual pipeline (%d stages per rank) needs " PP_FLAG " > 1 (got %d)", v,
                       p->pp);
    if (*lay_out) { /* the layout places every chunk itself */
        if (vpp) *vpp = v;
        return MG_OK;
    }
    if (uneven(p)) {
        MG_CHECK(check_uneven(p, v));
    } else {
        /* Megatron checks the accounted split in TransformerConfig and the plain one in
         * arguments.py / get_num_layers_to_build: the same rule, L [+1] [+1] divisible. */
        char what[128];
        if (split_layers(p) % p->pp) return fail_not_divisible_pp(p);
        int per_rank = split_layers(p) / p->pp;
        if (per_rank % v)
            return MG_FAIL(
                MG_ERR_USAGE,
                "the %d layers per pipeline stage (%s over %d stages) are not "
                "divisible by the %d virtual stages per pipeline rank; valid "
                "--num-layers: %s",
                per_rank, accounted(p, what, sizeof what), p->pp, v,
                near_multiples(p->num_layers, (long)p->pp * v, split_layers(p) - p->num_layers, 1)
                    .s);
    }
    if (vpp) *vpp = v;
    return MG_OK;
}

/* Megatron's arithmetic, once p is valid (lay: the parsed layout, where p has one). */
static mg_layers_chunk place(const mg_layers_params *p, const mg_layer_layout *lay, int v, int r,
                             int c) {
    mg_layers_chunk out = {0, 0};
    int P = p->pp;
    if (lay) { /* stage c * P + r; the stages before it hold the layers before it */
        const int s = c * P + r;
        for (int k = 0; k < s; k++) out.offset += lay->layers[k];
        out.count = lay->layers[s];
        return out;
    }
    if (uneven(p)) {
        int f = has_first(p) ? p->first_stage_layers : 0;
        int l = has_last(p) ? p->last_stage_layers : 0;
        int middle_ranks = P - has_first(p) - has_last(p);
        int per_middle = middle_ranks > 0 ? (p->num_layers - f - l) / middle_ranks : 0;
        int per_rank = r == 0 && has_first(p) ? f : r == P - 1 && has_last(p) ? l : per_middle;
        /* One virtual stage holds f/V + (middle)/V + l/V layers across all ranks; rank r's chunk
         * c follows the first stage's part and the r - 1 (or r) middle ranks before it. (With
         * P = 2, V > 1 and both f and l Megatron divides by zero middle ranks here; the middle
         * term is 0 then, which is what the tiling needs.) */
        int middle_rank = has_first(p) ? r - 1 : r;
        int stage_layers = f / v + (p->num_layers - f - l) / v + l / v;
        out.offset =
            r == 0 ? c * stage_layers : c * stage_layers + f / v + middle_rank * (per_middle / v);
        out.count = per_rank / v;
        return out;
    }
    int n = split_layers(p), per_chunk = n / P / v;
    bool first_chunk = r == 0 && c == 0, last_chunk = r == P - 1 && c == v - 1;
    /* The embedding occupies the first slot of chunk (0, 0), so every later chunk starts one
     * layer earlier; the loss occupies the last slot of the last chunk. */
    out.offset = c * (n / v) + r * per_chunk - (p->account_for_embedding && !first_chunk ? 1 : 0);
    out.count = per_chunk - (p->account_for_embedding && first_chunk ? 1 : 0) -
                (p->account_for_loss && last_chunk ? 1 : 0);
    return out;
}

mg_status mg_layers_check(const mg_layers_params *p, int *vpp) {
    mg_layer_layout lay;
    const mg_layer_layout *l;
    return check(p, vpp, &lay, &l);
}

mg_status mg_layers_place(const mg_layers_params *p, int rank, int chunk, mg_layers_chunk *out) {
    int v;
    mg_layer_layout lay;
    const mg_layer_layout *l;
    MG_CHECK(check(p, &v, &lay, &l));
    if (rank < 0 || rank >= p->pp || chunk < 0 || chunk >= v)
        return MG_FAIL(MG_ERR_INTERNAL, "chunk (rank %d, virtual stage %d) outside %d x %d", rank,
                       chunk, p->pp, v);
    *out = place(p, l, v, rank, chunk);
    return MG_OK;
}

mg_status mg_layers_plan(const mg_layers_params *p, mg_layers_chunk *out) {
    int v;
    mg_layer_layout lay;
    const mg_layer_layout *l;
    MG_CHECK(check(p, &v, &lay, &l));
    for (int r = 0; r < p->pp; r++)
        for (int c = 0; c < v; c++) out[r * v + c] = place(p, l, v, r, c);
    return MG_OK;
}
