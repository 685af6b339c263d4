/* MoE routing on the GPU (CPU reference: cpu/cpu_router.c; contract: backend_ops.h, "mixture of
 * experts"): top-k routing with the score functions, group limits and expert bias, capacity
 * dropping, the aux-loss and z-loss statistics and gradients, and the expert bias update (the
 * router's logits products are in moe_router.cu). Nothing here reads a value back to the host,
 * synchronises or allocates: every size that varies per step stays on the device, and
 * temporaries come from the backend's workspace (mg_cuda_scratch).
 *
 * Routing: one group of W lanes per token (W = 8, 16 or 32: the smallest power of two >= E, at
 * least 8 and at most 32, so that small E does not leave most of a warp idle), the token's expert
 * row in shared memory, expert e held by lane e % W of its group. Top-k is k rounds of a group
 * argmax with ties to the lower index, exactly the CPU's selection; lane j then owns pair j (k <= E
 * <= W, or k <= 32), and E <= 256 (8 slots per lane at W = 32). Every group runs the same control
 * flow (a block's tokens past T repeat the last token and write nothing), so the shuffles over
 * the whole warp stay converged. Sums that the CPU takes in double are taken in double here too
 * (in another order: the last bit may differ). Capacity dropping: one stable radix sort (CUB) of
 * every pair by (expert, descending weight) or by expert alone, the pairs laid out in
 * Megatron's sequence-first order before the sort, so that stability breaks ties by position
 * exactly as the CPU's keep_order. The rank of a pair within its expert is its sorted index
 * minus the expert's first index (a binary search), and pairs ranked >= capacity are dropped.
 * The statistics: aux counts by integer atomics (exact; a block's counts gathered in shared
 * memory first), the loss sums by blocks over token ranges and then by the last block over their
 * partials, each in a fixed order, so every output repeats bitwise.
 * Exports: mg_cuda_moe_route, mg_cuda_moe_route_backward, mg_cuda_moe_expert_bias_update. */
#include "backend/cuda/cuda_common.cuh"

#include <cub/device/device_radix_sort.cuh>

#define MOE_MAX_E     256 /* experts a routing group holds: MOE_SLOTS per lane at W = 32 */
#define MOE_SLOTS     8
#define MOE_MAX_K     32  /* pairs per token: one per lane */
#define ROUTE_THREADS 256 /* ROUTE_THREADS / W tokens per block */
#define STATS_THREADS 256
#define FULL_MASK     0xffffffffu

/* ---------------------------------------------------------------- lane-group helpers */

/* W lanes per token: xor butterflies with offsets < W stay inside the aligned group. */
template <int W> static __device__ __forceinline__ int sub_lane() {
    return (int)(threadIdx.x & (W - 1));
}

template <int W> static __device__ __forceinline__ float sub_max(float v) {
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

template <int W> static __device__ __forceinline__ double sub_sum_d(double v) {
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

static __device__ __forceinline__ float sigmoid_f(float x) {
    return 1.0f / (1.0f + expf(-x));
}

/* The index of the largest v[e], e in [lo, hi) with its slot bit set in `avail` (bit i: e = lane
 * + W i), ties to the lower index (the CPU's top_k); -1 if none. Every lane of the group gets
 * its lane 0's answer, so the group always agrees. */
template <int W> static __device__ int sub_argmax(const float *v, int lo, int hi, uint32_t avail) {
    int sl = sub_lane<W>(), bi = -1;
    float bv = 0.0f;
    for (int i = 0; i < MOE_SLOTS; i++) {
        int e = sl + W * i;
        if (e >= hi) break;
        if (e < lo || !((avail >> i) & 1u)) continue;
        if (bi < 0 || v[e] > bv) bv = v[e], bi = e;
    }
#pragma unroll
    for (int o = W / 2; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(FULL_MASK, bv, o);
        int oi = __shfl_xor_sync(FULL_MASK, bi, o);
        if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) bv = ov, bi = oi;
    }
    return __shfl_sync(FULL_MASK, bi, 0, W);
}

template <int W> static __device__ __forceinline__ void take(uint32_t *avail, int e) {
    if (e >= 0 && sub_lane<W>() == e % W) *avail &= ~(1u << (e / W));
}

/* The slot bits of e = lane + W i < n. */
template <int W> static __device__ __forceinline__ uint32_t slots_below(int n) {
    uint32_t b = 0;
    for (int i = 0; i < MOE_SLOTS; i++)
        if (sub_lane<W>() + W * i < n) b |= 1u << i;
    return b;
}

/* out = softmax(l) over n, as the CPU's softmax_row: expf(l - max) in fp32, the sum in double,
 * each divided in double and rounded once. */
template <int W> static __device__ void sub_softmax(float *out, const float *l, int n) {
    int sl = sub_lane<W>();
    float m = -INFINITY;
    for (int e = sl; e < n; e += W) m = fmaxf(m, l[e]);
    m = sub_max<W>(m);
    double s = 0.0;
    for (int e = sl; e < n; e += W) s += (double)(out[e] = expf(l[e] - m));
    s = sub_sum_d<W>(s);
    for (int e = sl; e < n; e += W) out[e] = (float)(out[e] / s);
    __syncwarp();
}

/* log(sum exp(l)) in double, as the CPU's z-loss. */
template <int W> static __device__ double sub_lse(const float *l, int n) {
    int sl = sub_lane<W>();
    float m = -INFINITY;
    for (int e = sl; e < n; e += W) m = fmaxf(m, l[e]);
    m = sub_max<W>(m);
    double s = 0.0;
    for (int e = sl; e < n; e += W) s += exp((double)l[e] - m);
    return m + log(sub_sum_d<W>(s));
}

/* The block's sum of v in a fixed order (warp butterflies, then the warps in order), valid in
 * thread 0; sh holds 32 doubles. Every thread of the block calls it. */
static __device__ double block_sum_d(double v, double *sh) {
    v = mg_warp_sum_d(v);
    if (threadIdx.x % 32 == 0) sh[threadIdx.x / 32] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        v = threadIdx.x < blockDim.x / 32 ? sh[threadIdx.x] : 0.0;
        v = mg_warp_sum_d(v);
    }
    __syncthreads();
    return v;
}

/* ---------------------------------------------------------------- routing */

/* Flags and constants the kernels take by value along with the routing. */
typedef struct {
    int aux, zloss, aux_n; /* aux loss on, z-loss on, tokens per aux group */
    double aux_w; /* backward: loss_weight x aux_coeff x the aux loss's factor (the kernel
                     multiplies in *loss_scale, which lives on the device) */
} route_flags;

/* Per token in shared memory: L, SC, SEL (E each), GS and CH (G each); then with the aux loss the
 * block's counts (at most one aux group per token: ROUTE_THREADS / W groups x E). */
template <int W> static size_t route_smem(int E, int G, bool aux) {
    size_t tpb = ROUTE_THREADS / W;
    return tpb * (3 * E + 2 * G) * sizeof(float) + (aux ? tpb * E * sizeof(int32_t) : 0);
}

/* One lane group per token: scores, group mask, top-k, weights; the aux loss's scores (to paux)
 * and top-k counts (shared-memory atomics, then one global atomic per count of the block), the
 * squared log-sum-exp (to zsq). */
template <int W>
static __global__ void __launch_bounds__(ROUTE_THREADS)
    moe_route_kernel(mg_moe_routing r, route_flags f, int32_t *idx, float *probs,
                     int32_t *aux_counts, float *paux, double *zsq, unsigned *ticket,
                     const float *logits, const float *bias) {
    extern __shared__ float sm[];
    if (ticket && blockIdx.x == 0 && threadIdx.x == 0) *ticket = 0; /* for route_stats_kernel */
    constexpr int TPB = ROUTE_THREADS / W;
    int sub = threadIdx.x / W, sl = sub_lane<W>();
    int E = r.E, k = r.k, G = r.groups, t0 = blockIdx.x * TPB, t = t0 + sub;
    bool live = t < r.T;
    if (!live) t = r.T - 1; /* the same work, nothing written */
    float *L = sm + (size_t)sub * (3 * E + 2 * G), *SC = L + E, *SEL = SC + E, *GS = SEL + E;
    float *CH = GS + G;
    int32_t *bcnt = (int32_t *)(sm + (size_t)TPB * (3 * E + 2 * G));
    int g0 = f.aux ? t0 / f.aux_n : 0; /* the block's first aux group */
    if (f.aux) {
        for (int i = threadIdx.x; i < TPB * E; i += ROUTE_THREADS) bcnt[i] = 0;
        __syncthreads();
    }
    bool softmax = r.score == MG_MOE_SCORE_SOFTMAX;
    for (int e = sl; e < E; e += W) L[e] = logits[(size_t)t * E + e];
    __syncwarp();
    if (softmax) {
        if (r.pre_softmax || f.aux) sub_softmax<W>(SC, L, E);
        for (int e = sl; e < E; e += W) SEL[e] = r.pre_softmax ? SC[e] : L[e];
    } else {
        for (int e = sl; e < E; e += W) {
            SC[e] = sigmoid_f(L[e]);
            SEL[e] = SC[e] + (r.bias && bias ? bias[e] : 0.0f);
        }
    }
    __syncwarp();
    uint32_t all = slots_below<W>(E), avail = all;
    if (G > 0) { /* Megatron's group_limited_topk */
        int per = E / G, kk = k / r.group_k;
        for (int g = 0; g < G; g++) {
            uint32_t gav = all;
            double s = 0.0;
            for (int i = 0; i < kk; i++) {
                int e = sub_argmax<W>(SEL, g * per, (g + 1) * per, gav);
                if (e >= 0) s += SEL[e];
                take<W>(&gav, e);
            }
            if (sl == 0) GS[g] = (float)s, CH[g] = 0.0f;
        }
        __syncwarp();
        uint32_t gav = slots_below<W>(G);
        for (int i = 0; i < r.group_k; i++) {
            int g = sub_argmax<W>(GS, 0, G, gav);
            take<W>(&gav, g);
            if (sl == 0 && g >= 0) CH[g] = 1.0f;
        }
        __syncwarp();
        avail = 0;
        for (int i = 0; i < MOE_SLOTS; i++) {
            int e = sl + W * i;
            if (e < E && CH[e / per] != 0.0f) avail |= 1u << i;
        }
    }
    int mine = -1; /* lane j: the expert of pair j */
    for (int j = 0; j < k; j++) {
        int e = sub_argmax<W>(SEL, 0, E, avail);
        if (sl == j) mine = e;
        take<W>(&avail, e);
    }
    bool has = sl < k && mine >= 0;
    float pr;
    if (softmax && !r.pre_softmax) { /* softmax over the k selected logits */
        float slg = has ? L[mine] : -INFINITY, m = sub_max<W>(slg);
        float x = has ? expf(slg - m) : 0.0f;
        pr = (float)(x / sub_sum_d<W>((double)x));
    } else {
        pr = has ? SC[mine] : 0.0f;
        double z = sub_sum_d<W>((double)pr);
        if (!softmax && k > 1) pr = (float)(pr / (z + 1e-20));
    }
    if (live && sl < k) {
        idx[(size_t)t * k + sl] = mine;
        probs[(size_t)t * k + sl] = pr * r.scaling;
    }
    if (f.aux) { /* the aux loss's scores P (into SEL) and their top-k */
        __syncwarp();
        if (softmax) {
            for (int e = sl; e < E; e += W) SEL[e] = SC[e];
        } else {
            double z = 0.0;
            for (int e = sl; e < E; e += W) z += SC[e];
            z = sub_sum_d<W>(z);
            for (int e = sl; e < E; e += W) SEL[e] = (float)(SC[e] / (z + 1e-20));
        }
        __syncwarp();
        if (live)
            for (int e = sl; e < E; e += W) paux[(size_t)t * E + e] = SEL[e];
        int32_t *cnt = bcnt + (size_t)(t / f.aux_n - g0) * E;
        uint32_t av = all;
        for (int j = 0; j < k; j++) {
            int e = sub_argmax<W>(SEL, 0, E, av);
            take<W>(&av, e);
            if (live && sl == 0 && e >= 0) atomicAdd(&cnt[e], 1);
        }
    }
    if (f.zloss) {
        double lse = sub_lse<W>(L, E);
        if (live && sl == 0) zsq[t] = lse * lse;
    }
    if (f.aux) { /* the block's counts: groups g0 .. g0 + TPB - 1 at most, within the T / aux_n */
        __syncthreads();
        int groups = r.T / f.aux_n, n = min(TPB, groups - g0) * E;
        for (int i = threadIdx.x; i < n; i += ROUTE_THREADS)
            if (bcnt[i] != 0) atomicAdd(&aux_counts[(size_t)g0 * E + i], bcnt[i]);
    }
}

/* The loss sums, block b over tokens [b per, (b + 1) per): part[b] = {sum_{t,e} counts[group(t),
 * e] P[t,e] (the CPU's sum over groups of counts x the group's column sums), sum_t lse^2}, each in
 * double, threads strided and then block_sum_d. The last block to finish (a ticket, zeroed by the
 * routing kernel) sums the partials in block order and applies them: stats[0] += aux_scale x the
 * first sum, stats[1] += stat_weight x the second / T. The order never depends on which block
 * is last, so the result repeats bitwise. */
static __global__ void __launch_bounds__(STATS_THREADS)
    route_stats_kernel(mg_moe_routing r, route_flags f, double aux_scale, float *stats,
                       double *part, unsigned *ticket, const int32_t *aux_counts, const float *paux,
                       const double *zsq, int per) {
    __shared__ double sh[32];
    __shared__ bool last;
    int tb0 = blockIdx.x * per, tb1 = min(r.T, tb0 + per);
    double s0 = 0.0, s1 = 0.0;
    if (f.aux)
        for (size_t i = (size_t)tb0 * r.E + threadIdx.x; i < (size_t)tb1 * r.E; i += blockDim.x) {
            size_t t = i / r.E, e = i - t * r.E;
            s0 += (double)aux_counts[(t / f.aux_n) * r.E + e] * paux[i];
        }
    if (f.zloss)
        for (int t = tb0 + threadIdx.x; t < tb1; t += blockDim.x) s1 += zsq[t];
    s0 = block_sum_d(s0, sh);
    s1 = block_sum_d(s1, sh);
    if (threadIdx.x == 0) {
        part[2 * blockIdx.x] = s0, part[2 * blockIdx.x + 1] = s1;
        __threadfence(); /* the partials are visible before the ticket is taken */
        last = atomicAdd(ticket, 1u) == gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    s0 = s1 = 0.0;
    for (int b = threadIdx.x; b < (int)gridDim.x; b += blockDim.x)
        s0 += __ldcg(&part[2 * b]), s1 += __ldcg(&part[2 * b + 1]);
    s0 = block_sum_d(s0, sh);
    s1 = block_sum_d(s1, sh);
    if (threadIdx.x == 0) {
        if (f.aux) stats[0] += (float)((double)r.stat_weight * s0 * aux_scale);
        if (f.zloss) stats[1] += (float)((double)r.stat_weight * s1 / r.T);
    }
}

/* ---------------------------------------------------------------- capacity dropping */

/* Ascending in the key = descending in the weight (-0 taken as +0, as the CPU's float compare). */
static __device__ __forceinline__ uint32_t desc_key(float x) {
    uint32_t u = __float_as_uint(x + 0.0f);
    u = (u & 0x80000000u) ? ~u : (u | 0x80000000u);
    return ~u;
}

/* Pair p = t k + j goes to slot (sequence-first position of t) k + j with key expert | (policy
 * probs) descending weight; the stable sort then keeps equal keys in position order. */
static __global__ void capacity_keys_kernel(uint64_t *keys, int32_t *vals, const int32_t *idx,
                                            const float *probs, int n, int k, int S, int B,
                                            int by_prob) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t p = (size_t)blockIdx.x * blockDim.x + threadIdx.x; p < (size_t)n; p += stride) {
        int t = (int)(p / k), j = (int)(p % k);
        size_t q = ((size_t)(t % S) * B + t / S) * k + j;
        uint64_t key = (uint64_t)(uint32_t)idx[p];
        if (by_prob) key = key << 32 | desc_key(probs[p]);
        keys[q] = key;
        vals[q] = (int32_t)p;
    }
}

static __global__ void capacity_drop_kernel(int32_t *idx, const uint64_t *ks, const int32_t *vs,
                                            int n, int shift, int capacity) {
    size_t stride = (size_t)gridDim.x * blockDim.x;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < (size_t)n; i += stride) {
        int e = (int)(ks[i] >> shift);
        uint64_t first_key = (uint64_t)e << shift;
        size_t lo = 0, hi = i; /* the expert's first sorted index */
        while (lo < hi) {
            size_t mid = (lo + hi) / 2;
            if (ks[mid] < first_key)
                lo = mid + 1;
            else
                hi = mid;
        }
        if (i - lo >= (size_t)capacity) idx[vs[i]] = -1 - e;
    }
}

static int bits_for(unsigned long long v) { /* bits to hold 0..v */
    int b = 1;
    while (b < 64 && (v >> b) != 0) b++;
    return b;
}

static size_t align256(size_t b) {
    return (b + 255) & ~(size_t)255;
}

/* ---------------------------------------------------------------- the entries */

static bool aux_on(const mg_moe_routing *r) {
    return r->balancing != MG_MOE_LB_NONE && r->aux_coeff > 0;
}

static route_flags flags_of(const mg_moe_routing *r) {
    route_flags f;
    f.aux = aux_on(r);
    f.zloss = r->z_coeff > 0;
    f.aux_n = r->balancing == MG_MOE_LB_SEQ_AUX ? r->S : r->T;
    double n = f.aux_n, groups = (double)r->T / n;
    double factor = (double)r->E / ((double)r->k * n * n * groups);
    f.aux_w = (double)r->loss_weight * r->aux_coeff * factor;
    return f;
}

static mg_status check_routing(const mg_moe_routing *r) {
    if (r->E < 1 || r->E > MOE_MAX_E || r->k < 1 || r->k > MOE_MAX_K || r->k > r->E)
        return MG_FAIL(MG_ERR_UNSUPPORTED,
                       "%d experts, top-%d: the CUDA router handles 1 <= k <= min(E, %d), E <= %d",
                       r->E, r->k, MOE_MAX_K, MOE_MAX_E);
    if (r->S < 1 || r->T % r->S != 0)
        return MG_FAIL(MG_ERR_INTERNAL, "moe route: %d tokens are not sequences of %d", r->T, r->S);
    if (r->groups > 0 && (r->group_k < 1 || r->E % r->groups != 0))
        return MG_FAIL(MG_ERR_INTERNAL, "moe route: %d groups (top %d) of %d experts", r->groups,
                       r->group_k, r->E);
    return MG_OK;
}

/* The lanes per token: the smallest power of two >= E, from 8 to 32. */
static int route_width(int E) {
    return E <= 8 ? 8 : E <= 16 ? 16 : 32;
}

template <int W>
static mg_status launch_route(const mg_moe_routing *r, route_flags f, int32_t *idx, float *probs,
                              int32_t *aux_counts, float *paux, double *zsq, unsigned *ticket,
                              const float *logits, const float *bias, cudaStream_t st) {
    unsigned grid = (unsigned)((r->T + ROUTE_THREADS / W - 1) / (ROUTE_THREADS / W));
    moe_route_kernel<W><<<grid, ROUTE_THREADS, route_smem<W>(r->E, r->groups, f.aux), st>>>(
        *r, f, idx, probs, aux_counts, paux, zsq, ticket, logits, bias);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, moe_route,
               (mg_backend * be, const mg_moe_routing *r, int32_t *idx, float *probs,
                int32_t *aux_counts, float *stats, const float *logits, const float *bias),
               (be, r, idx, probs, aux_counts, stats, logits, bias)) {
    // idx, probs (T,k); aux_counts (T/aux_n, E); stats (2); logits (T,E); bias (E) or NULL
    if (r->T <= 0) return MG_OK;
    MG_CHECK(check_routing(r));
    cudaStream_t st = mg_cuda_stream(be);
    route_flags f = flags_of(r);
    int T = r->T, E = r->E, n = T * r->k;
    bool cap = r->capacity > 0;
    int shift = cap && r->drop == MG_MOE_DROP_PROBS ? 32 : 0;
    int end_bit = shift + bits_for((unsigned long long)(E - 1));
    /* the loss sums' blocks: at least 64 tokens each, about two per multiprocessor */
    int per = (T + 2 * mg_cuda_ctx_of(be)->num_sms - 1) / (2 * mg_cuda_ctx_of(be)->num_sms);
    if (per < 64) per = 64;
    int nb = (T + per - 1) / per;
    /* workspace: P (T,E) | lse^2 (T) | loss partials (nb, 2), ticket | keys, sorted keys (n) |
     * pairs, sorted pairs (n) | CUB */
    uint64_t *keys = NULL, *keys_s = NULL;
    int32_t *vals = NULL, *vals_s = NULL;
    size_t sort_bytes = 0;
    if (cap)
        MG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(NULL, sort_bytes, keys, keys_s, vals, vals_s,
                                                      n, 0, end_bit, st));
    bool sums = f.aux || f.zloss;
    size_t o_paux = 0, o_zsq = o_paux + align256(f.aux ? (size_t)T * E * sizeof(float) : 0);
    size_t o_part = o_zsq + align256(f.zloss ? (size_t)T * sizeof(double) : 0);
    size_t o_keys = o_part + align256(sums ? (size_t)nb * 2 * sizeof(double) + 8 : 0);
    size_t o_vals = o_keys + align256(cap ? 2 * (size_t)n * sizeof(uint64_t) : 0);
    size_t o_sort = o_vals + align256(cap ? 2 * (size_t)n * sizeof(int32_t) : 0);
    char *ws = NULL;
    MG_CHECK(mg_cuda_scratch(be, o_sort + sort_bytes, (void **)&ws, "moe route"));
    float *paux = (float *)(ws + o_paux);
    double *zsq = (double *)(ws + o_zsq), *part = (double *)(ws + o_part);
    unsigned *ticket = sums ? (unsigned *)(part + 2 * nb) : NULL;
    if (f.aux)
        MG_CUDA_CHECK(
            cudaMemsetAsync(aux_counts, 0, (size_t)(T / f.aux_n) * E * sizeof(int32_t), st));
    switch (route_width(E)) {
    case 8:
        MG_CHECK(
            launch_route<8>(r, f, idx, probs, aux_counts, paux, zsq, ticket, logits, bias, st));
        break;
    case 16:
        MG_CHECK(
            launch_route<16>(r, f, idx, probs, aux_counts, paux, zsq, ticket, logits, bias, st));
        break;
    default:
        MG_CHECK(
            launch_route<32>(r, f, idx, probs, aux_counts, paux, zsq, ticket, logits, bias, st));
    }
    if (sums) {
        double n_aux = f.aux_n, groups = (double)T / n_aux;
        double aux_scale = (double)E / ((double)r->k * n_aux * n_aux * groups);
        route_stats_kernel<<<(unsigned)nb, STATS_THREADS, 0, st>>>(
            *r, f, aux_scale, stats, part, ticket, aux_counts, paux, zsq, per);
        MG_CUDA_CHECK_LAUNCH();
    }
    if (!cap) return MG_OK;
    keys = (uint64_t *)(ws + o_keys), keys_s = keys + n;
    vals = (int32_t *)(ws + o_vals), vals_s = vals + n;
    unsigned pgrid = mg_cuda_blocks((size_t)n, MG_CUDA_THREADS);
    capacity_keys_kernel<<<pgrid, MG_CUDA_THREADS, 0, st>>>(keys, vals, idx, probs, n, r->k, r->S,
                                                            T / r->S, shift > 0);
    MG_CUDA_CHECK_LAUNCH();
    MG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(ws + o_sort, sort_bytes, keys, keys_s, vals,
                                                  vals_s, n, 0, end_bit, st));
    capacity_drop_kernel<<<pgrid, MG_CUDA_THREADS, 0, st>>>(idx, keys_s, vals_s, n, shift,
                                                            r->capacity);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

/* One lane group per token: the gradient through the weights, then the aux loss's and the
 * z-loss's, added into the token's row DL in the CPU's order. Per token in shared memory: L, DL,
 * X, Y. */
template <int W>
static __global__ void __launch_bounds__(ROUTE_THREADS)
    moe_route_backward_kernel(mg_moe_routing r, route_flags f, float *dlogits, const float *dprobs,
                              const float *logits, const int32_t *idx, const int32_t *aux_counts) {
    extern __shared__ float sm[];
    int sub = threadIdx.x / W, sl = sub_lane<W>();
    int t = blockIdx.x * (ROUTE_THREADS / W) + sub, E = r.E, k = r.k;
    bool live = t < r.T;
    if (!live) t = r.T - 1; /* the same work, nothing written */
    float *L = sm + (size_t)sub * 4 * E, *DL = L + E, *X = DL + E, *Y = X + E;
    bool softmax = r.score == MG_MOE_SCORE_SOFTMAX;
    const double ls = r.loss_scale ? (double)*r.loss_scale : 1.0; /* the loss scale */
    const double aux_w = f.aux_w * ls;
    for (int e = sl; e < E; e += W) {
        L[e] = logits[(size_t)t * E + e];
        DL[e] = Y[e] = 0.0f;
    }
    __syncwarp();
    bool has = sl < k;
    int sel = 0;
    float dq = 0.0f;
    if (has) {
        int32_t i = idx[(size_t)t * k + sl];
        sel = i >= 0 ? i : -1 - i;
        dq = dprobs[(size_t)t * k + sl] * r.scaling;
    }
    if (softmax && !r.pre_softmax) { /* softmax over the k selected logits */
        float slg = has ? L[sel] : -INFINITY, m = sub_max<W>(slg);
        float x = has ? expf(slg - m) : 0.0f;
        float q = (float)(x / sub_sum_d<W>((double)x));
        double dot = sub_sum_d<W>(has ? (double)q * dq : 0.0);
        if (has) DL[sel] += (float)(q * (dq - dot));
    } else if (softmax) { /* softmax over all E, gradient dq at the selected */
        sub_softmax<W>(X, L, E);
        if (has) Y[sel] += dq;
        __syncwarp();
        double dot = 0.0;
        for (int e = sl; e < E; e += W) dot += (double)X[e] * Y[e];
        dot = sub_sum_d<W>(dot);
        for (int e = sl; e < E; e += W) DL[e] += (float)(X[e] * (Y[e] - dot));
    } else { /* sigmoid, normalised over the k when k > 1 */
        float s = has ? sigmoid_f(L[sel]) : 0.0f;
        double z = sub_sum_d<W>((double)s) + 1e-20, dot = sub_sum_d<W>((double)dq * s);
        double ds = k > 1 ? dq / z - dot / (z * z) : (double)dq;
        if (has) DL[sel] += (float)(ds * s * (1.0f - s));
    }
    __syncwarp();
    if (f.aux) {
        const int32_t *cnt = aux_counts + (size_t)(t / f.aux_n) * E;
        double dot = 0.0, z = 0.0;
        if (softmax)
            sub_softmax<W>(X, L, E);
        else
            for (int e = sl; e < E; e += W) z += (double)(X[e] = sigmoid_f(L[e]));
        z = sub_sum_d<W>(z) + 1e-20;
        for (int e = sl; e < E; e += W) dot += (double)(float)(aux_w * cnt[e]) * X[e];
        dot = sub_sum_d<W>(dot);
        for (int e = sl; e < E; e += W) {
            float dp = (float)(aux_w * cnt[e]);
            if (softmax)
                DL[e] += (float)(X[e] * (dp - dot));
            else
                DL[e] += (float)((dp / z - dot / (z * z)) * X[e] * (1.0f - X[e]));
        }
    }
    if (f.zloss) {
        double lse = sub_lse<W>(L, E);
        double w = (double)r.loss_weight * ls * r.z_coeff * 2.0 * lse / r.T;
        for (int e = sl; e < E; e += W) DL[e] += (float)(w * exp((double)L[e] - lse));
    }
    if (live)
        for (int e = sl; e < E; e += W) dlogits[(size_t)t * E + e] = DL[e];
}

template <int W>
static mg_status launch_route_backward(const mg_moe_routing *r, float *dlogits, const float *dprobs,
                                       const float *logits, const int32_t *idx,
                                       const int32_t *aux_counts, cudaStream_t st) {
    unsigned grid = (unsigned)((r->T + ROUTE_THREADS / W - 1) / (ROUTE_THREADS / W));
    size_t smem = (size_t)(ROUTE_THREADS / W) * 4 * r->E * sizeof(float);
    moe_route_backward_kernel<W><<<grid, ROUTE_THREADS, smem, st>>>(
        *r, flags_of(r), dlogits, dprobs, logits, idx, aux_counts);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}

MG_CUDA_DTYPES(mg_status, moe_route_backward,
               (mg_backend * be, const mg_moe_routing *r, float *dlogits, const float *dprobs,
                const float *logits, const int32_t *idx, const float *probs,
                const int32_t *aux_counts, const float *bias),
               (be, r, dlogits, dprobs, logits, idx, probs, aux_counts, bias)) {
    // dlogits, logits (T,E); dprobs, idx, probs (T,k); aux_counts (T/aux_n, E)
    (void)probs, (void)bias;
    if (r->T <= 0) return MG_OK;
    MG_CHECK(check_routing(r));
    cudaStream_t st = mg_cuda_stream(be);
    switch (route_width(r->E)) {
    case 8:
        return launch_route_backward<8>(r, dlogits, dprobs, logits, idx, aux_counts, st);
    case 16:
        return launch_route_backward<16>(r, dlogits, dprobs, logits, idx, aux_counts, st);
    default:
        return launch_route_backward<32>(r, dlogits, dprobs, logits, idx, aux_counts, st);
    }
}

/* bias[e] += rate x sign(mean(load) - load[e]); the mean in double in expert order (the CPU's). */
static __global__ void expert_bias_update_kernel(float *bias, const float *load, int E,
                                                 float rate) {
    __shared__ double mean;
    if (threadIdx.x == 0) {
        double s = 0.0;
        for (int e = 0; e < E; e++) s += load[e];
        mean = s / E;
    }
    __syncthreads();
    for (int e = threadIdx.x; e < E; e += blockDim.x) {
        double off = mean - load[e];
        bias[e] += rate * (float)((off > 0) - (off < 0));
    }
}

MG_CUDA_DTYPES(mg_status, moe_expert_bias_update,
               (mg_backend * be, float *bias, const float *load, int E, float rate),
               (be, bias, load, E, rate)) {
    // bias, load (E)
    if (E <= 0) return MG_OK;
    expert_bias_update_kernel<<<1, 256, 0, mg_cuda_stream(be)>>>(bias, load, E, rate);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}
