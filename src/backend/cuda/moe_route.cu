/* MoE routing on the GPU (CPU reference: cpu/cpu_router.c; contract: backend.h, "mixture of
 * experts"): top-k routing with the score functions, group limits and expert bias, capacity
 * dropping, the aux-loss and z-loss statistics and gradients, and the expert bias update (the
 * router's logits products are in moe_router.cu). Nothing here reads a value back to the host,
 * synchronises or allocates: every size that varies per step stays on the device, and
 * temporaries come from the backend's workspace (mg_cuda_scratch).
 *
 * Routing: one warp per token, the token's expert row in shared memory, expert e held by lane
 * e % 32. Top-k is k rounds of a warp argmax with ties to the lower index, exactly the CPU's
 * selection; lane j then owns pair j (so k <= 32), and E <= 256 (8 slots per lane). Sums that the
 * CPU takes in double are taken in double here too (in another order: the last bit may differ).
 * Capacity dropping: one stable radix sort (CUB) of every pair by (expert, descending weight) or
 * by expert alone, the pairs laid out in Megatron's sequence-first order before the sort, so
 * that stability breaks ties by position exactly as the CPU's keep_order. The rank of a pair
 * within its expert is its sorted index minus the expert's first index (a binary search), and
 * pairs ranked >= capacity are dropped. The statistics: aux counts by integer atomics (exact),
 * the loss sums by one block in a fixed order, so every output repeats bitwise.
 * Exports: mg_cuda_moe_route, mg_cuda_moe_route_backward, mg_cuda_moe_expert_bias_update. */
#include "backend/cuda/cuda_common.cuh"

#include <cub/device/device_radix_sort.cuh>

#define MOE_MAX_E   256 /* experts a routing warp holds: MOE_SLOTS per lane */
#define MOE_SLOTS   (MOE_MAX_E / 32)
#define MOE_MAX_K   32 /* pairs per token: one per lane */
#define ROUTE_WARPS 4  /* tokens per block */
#define FULL_MASK   0xffffffffu

/* ---------------------------------------------------------------- warp helpers */

static __device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

static __device__ __forceinline__ float sigmoid_f(float x) {
    return 1.0f / (1.0f + expf(-x));
}

/* The index of the largest v[e], e in [lo, hi) with its slot bit set in `avail` (bit i: e = lane
 * + 32 i), ties to the lower index (the CPU's top_k); -1 if none. Every lane gets lane 0's answer,
 * so the warp always agrees. */
static __device__ int warp_argmax(const float *v, int lo, int hi, uint32_t avail) {
    int lane = threadIdx.x & 31, bi = -1;
    float bv = 0.0f;
    for (int i = 0; i < MOE_SLOTS; i++) {
        int e = lane + 32 * i;
        if (e >= hi) break;
        if (e < lo || !((avail >> i) & 1u)) continue;
        if (bi < 0 || v[e] > bv) bv = v[e], bi = e;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(FULL_MASK, bv, o);
        int oi = __shfl_xor_sync(FULL_MASK, bi, o);
        if (oi >= 0 && (bi < 0 || ov > bv || (ov == bv && oi < bi))) bv = ov, bi = oi;
    }
    return __shfl_sync(FULL_MASK, bi, 0);
}

static __device__ __forceinline__ void take(uint32_t *avail, int e) {
    if (e >= 0 && (int)(threadIdx.x & 31) == e % 32) *avail &= ~(1u << (e / 32));
}

/* The slot bits of e = lane + 32 i < n. */
static __device__ __forceinline__ uint32_t slots_below(int n) {
    uint32_t b = 0;
    for (int i = 0; i < MOE_SLOTS; i++)
        if ((int)(threadIdx.x & 31) + 32 * i < n) b |= 1u << i;
    return b;
}

/* out = softmax(l) over n, as the CPU's softmax_row: expf(l - max) in fp32, the sum in double,
 * each divided in double and rounded once. */
static __device__ void warp_softmax(float *out, const float *l, int n) {
    int lane = threadIdx.x & 31;
    float m = -INFINITY;
    for (int e = lane; e < n; e += 32) m = fmaxf(m, l[e]);
    m = warp_max(m);
    double s = 0.0;
    for (int e = lane; e < n; e += 32) s += (double)(out[e] = expf(l[e] - m));
    s = mg_warp_sum_d(s);
    for (int e = lane; e < n; e += 32) out[e] = (float)(out[e] / s);
    __syncwarp();
}

/* log(sum exp(l)) in double, as the CPU's z-loss. */
static __device__ double warp_lse(const float *l, int n) {
    int lane = threadIdx.x & 31;
    float m = -INFINITY;
    for (int e = lane; e < n; e += 32) m = fmaxf(m, l[e]);
    m = warp_max(m);
    double s = 0.0;
    for (int e = lane; e < n; e += 32) s += exp((double)l[e] - m);
    return m + log(mg_warp_sum_d(s));
}

/* ---------------------------------------------------------------- routing */

/* Flags and constants the kernels take by value along with the routing. */
typedef struct {
    int aux, zloss, aux_n; /* aux loss on, z-loss on, tokens per aux group */
    double aux_w;          /* backward: loss_weight x aux_coeff x the aux loss's factor */
} route_flags;

/* Per warp in shared memory: L, SC, SEL (E each), GS and CH (G each). */
static size_t route_smem(int E, int G) {
    return (size_t)ROUTE_WARPS * (3 * E + 2 * G) * sizeof(float);
}

/* One warp per token: scores, group mask, top-k, weights; the aux loss's scores (to paux) and
 * top-k counts (atomics into aux_counts), the squared log-sum-exp (to zsq). */
static __global__ void __launch_bounds__(ROUTE_WARPS * 32)
    moe_route_kernel(mg_moe_routing r, route_flags f, int32_t *idx, float *probs,
                     int32_t *aux_counts, float *paux, double *zsq, const float *logits,
                     const float *bias) {
    extern __shared__ float sm[];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int t = blockIdx.x * ROUTE_WARPS + warp, E = r.E, k = r.k, G = r.groups;
    if (t >= r.T) return; /* the whole warp */
    float *L = sm + (size_t)warp * (3 * E + 2 * G), *SC = L + E, *SEL = SC + E, *GS = SEL + E;
    float *CH = GS + G;
    bool softmax = r.score == MG_MOE_SCORE_SOFTMAX;
    for (int e = lane; e < E; e += 32) L[e] = logits[(size_t)t * E + e];
    __syncwarp();
    if (softmax) {
        if (r.pre_softmax || f.aux) warp_softmax(SC, L, E);
        for (int e = lane; e < E; e += 32) SEL[e] = r.pre_softmax ? SC[e] : L[e];
    } else {
        for (int e = lane; e < E; e += 32) {
            SC[e] = sigmoid_f(L[e]);
            SEL[e] = SC[e] + (r.bias && bias ? bias[e] : 0.0f);
        }
    }
    __syncwarp();
    uint32_t all = slots_below(E), avail = all;
    if (G > 0) { /* Megatron's group_limited_topk */
        int per = E / G, kk = k / r.group_k;
        for (int g = 0; g < G; g++) {
            uint32_t gav = all;
            double s = 0.0;
            for (int i = 0; i < kk; i++) {
                int e = warp_argmax(SEL, g * per, (g + 1) * per, gav);
                if (e >= 0) s += SEL[e];
                take(&gav, e);
            }
            if (lane == 0) GS[g] = (float)s, CH[g] = 0.0f;
        }
        __syncwarp();
        uint32_t gav = slots_below(G);
        for (int i = 0; i < r.group_k; i++) {
            int g = warp_argmax(GS, 0, G, gav);
            take(&gav, g);
            if (lane == 0 && g >= 0) CH[g] = 1.0f;
        }
        __syncwarp();
        avail = 0;
        for (int i = 0; i < MOE_SLOTS; i++) {
            int e = lane + 32 * i;
            if (e < E && CH[e / per] != 0.0f) avail |= 1u << i;
        }
    }
    int mine = -1; /* lane j: the expert of pair j */
    for (int j = 0; j < k; j++) {
        int e = warp_argmax(SEL, 0, E, avail);
        if (lane == j) mine = e;
        take(&avail, e);
    }
    bool has = lane < k && mine >= 0;
    float pr;
    if (softmax && !r.pre_softmax) { /* softmax over the k selected logits */
        float sl = has ? L[mine] : -INFINITY, m = warp_max(sl);
        float x = has ? expf(sl - m) : 0.0f;
        pr = (float)(x / mg_warp_sum_d((double)x));
    } else {
        pr = has ? SC[mine] : 0.0f;
        double z = mg_warp_sum_d((double)pr);
        if (!softmax && k > 1) pr = (float)(pr / (z + 1e-20));
    }
    if (lane < k) {
        idx[(size_t)t * k + lane] = mine;
        probs[(size_t)t * k + lane] = pr * r.scaling;
    }
    if (f.aux) { /* the aux loss's scores P (into SEL) and their top-k */
        __syncwarp();
        if (softmax) {
            for (int e = lane; e < E; e += 32) SEL[e] = SC[e];
        } else {
            double z = 0.0;
            for (int e = lane; e < E; e += 32) z += SC[e];
            z = mg_warp_sum_d(z);
            for (int e = lane; e < E; e += 32) SEL[e] = (float)(SC[e] / (z + 1e-20));
        }
        __syncwarp();
        for (int e = lane; e < E; e += 32) paux[(size_t)t * E + e] = SEL[e];
        int32_t *cnt = aux_counts + (size_t)(t / f.aux_n) * E;
        uint32_t av = all;
        for (int j = 0; j < k; j++) {
            int e = warp_argmax(SEL, 0, E, av);
            take(&av, e);
            if (lane == 0 && e >= 0) atomicAdd(&cnt[e], 1);
        }
    }
    if (f.zloss) {
        double lse = warp_lse(L, E);
        if (lane == 0) zsq[t] = lse * lse;
    }
}

/* One block: stats[0] += aux_scale x sum_{t,e} counts[group(t), e] P[t,e] (= the CPU's sum over
 * groups of counts x the group's column sums), stats[1] += stat_weight x sum_t lse^2 / T. */
static __global__ void route_stats_kernel(mg_moe_routing r, route_flags f, double aux_scale,
                                          float *stats, const int32_t *aux_counts,
                                          const float *paux, const double *zsq) {
    __shared__ double part[32];
    double s[2] = {0.0, 0.0};
    for (int t = threadIdx.x; t < r.T; t += blockDim.x) {
        if (f.aux) {
            const int32_t *cnt = aux_counts + (size_t)(t / f.aux_n) * r.E;
            const float *p = paux + (size_t)t * r.E;
            for (int e = 0; e < r.E; e++) s[0] += (double)cnt[e] * p[e];
        }
        if (f.zloss) s[1] += zsq[t];
    }
    for (int q = 0; q < 2; q++) {
        double v = mg_warp_sum_d(s[q]);
        if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
        __syncthreads();
        if (threadIdx.x < 32) {
            v = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0;
            s[q] = mg_warp_sum_d(v);
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        if (f.aux) stats[0] += (float)((double)r.stat_weight * s[0] * aux_scale);
        if (f.zloss) stats[1] += (float)((double)r.stat_weight * s[1] / r.T);
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

extern "C" mg_status mg_cuda_moe_route(mg_backend *be, const mg_moe_routing *r, int32_t *idx,
                                       float *probs, int32_t *aux_counts, float *stats,
                                       const float *logits, const float *bias) {
    // idx, probs (T,k); aux_counts (T/aux_n, E); stats (2); logits (T,E); bias (E) or NULL
    if (r->T <= 0) return MG_OK;
    MG_CHECK(check_routing(r));
    cudaStream_t st = mg_cuda_stream(be);
    route_flags f = flags_of(r);
    int T = r->T, E = r->E, n = T * r->k;
    bool cap = r->capacity > 0;
    int shift = cap && r->drop == MG_MOE_DROP_PROBS ? 32 : 0;
    int end_bit = shift + bits_for((unsigned long long)(E - 1));
    /* workspace: P (T,E) | lse^2 (T) | keys, sorted keys (n) | pairs, sorted pairs (n) | CUB */
    uint64_t *keys = NULL, *keys_s = NULL;
    int32_t *vals = NULL, *vals_s = NULL;
    size_t sort_bytes = 0;
    if (cap)
        MG_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(NULL, sort_bytes, keys, keys_s, vals, vals_s,
                                                      n, 0, end_bit, st));
    size_t o_paux = 0, o_zsq = o_paux + align256(f.aux ? (size_t)T * E * sizeof(float) : 0);
    size_t o_keys = o_zsq + align256(f.zloss ? (size_t)T * sizeof(double) : 0);
    size_t o_vals = o_keys + align256(cap ? 2 * (size_t)n * sizeof(uint64_t) : 0);
    size_t o_sort = o_vals + align256(cap ? 2 * (size_t)n * sizeof(int32_t) : 0);
    char *ws = NULL;
    MG_CHECK(mg_cuda_scratch(be, o_sort + sort_bytes, (void **)&ws, "moe route"));
    float *paux = (float *)(ws + o_paux);
    double *zsq = (double *)(ws + o_zsq);
    if (f.aux)
        MG_CUDA_CHECK(
            cudaMemsetAsync(aux_counts, 0, (size_t)(T / f.aux_n) * E * sizeof(int32_t), st));
    unsigned grid = (unsigned)((T + ROUTE_WARPS - 1) / ROUTE_WARPS);
    moe_route_kernel<<<grid, ROUTE_WARPS * 32, route_smem(E, r->groups), st>>>(
        *r, f, idx, probs, aux_counts, paux, zsq, logits, bias);
    MG_CUDA_CHECK_LAUNCH();
    if (f.aux || f.zloss) {
        double n_aux = f.aux_n, groups = (double)T / n_aux;
        double aux_scale = (double)E / ((double)r->k * n_aux * n_aux * groups);
        route_stats_kernel<<<1, 1024, 0, st>>>(*r, f, aux_scale, stats, aux_counts, paux, zsq);
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

/* One warp per token: the gradient through the weights, then the aux loss's and the z-loss's,
 * added into the token's row DL in the CPU's order. Per warp in shared memory: L, DL, X, Y. */
static __global__ void __launch_bounds__(ROUTE_WARPS * 32)
    moe_route_backward_kernel(mg_moe_routing r, route_flags f, float *dlogits, const float *dprobs,
                              const float *logits, const int32_t *idx, const int32_t *aux_counts) {
    extern __shared__ float sm[];
    int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    int t = blockIdx.x * ROUTE_WARPS + warp, E = r.E, k = r.k;
    if (t >= r.T) return;
    float *L = sm + (size_t)warp * 4 * E, *DL = L + E, *X = DL + E, *Y = X + E;
    bool softmax = r.score == MG_MOE_SCORE_SOFTMAX;
    for (int e = lane; e < E; e += 32) {
        L[e] = logits[(size_t)t * E + e];
        DL[e] = Y[e] = 0.0f;
    }
    __syncwarp();
    bool has = lane < k;
    int sel = 0;
    float dq = 0.0f;
    if (has) {
        int32_t i = idx[(size_t)t * k + lane];
        sel = i >= 0 ? i : -1 - i;
        dq = dprobs[(size_t)t * k + lane] * r.scaling;
    }
    if (softmax && !r.pre_softmax) { /* softmax over the k selected logits */
        float sl = has ? L[sel] : -INFINITY, m = warp_max(sl);
        float x = has ? expf(sl - m) : 0.0f;
        float q = (float)(x / mg_warp_sum_d((double)x));
        double dot = mg_warp_sum_d(has ? (double)q * dq : 0.0);
        if (has) DL[sel] += (float)(q * (dq - dot));
    } else if (softmax) { /* softmax over all E, gradient dq at the selected */
        warp_softmax(X, L, E);
        if (has) Y[sel] += dq;
        __syncwarp();
        double dot = 0.0;
        for (int e = lane; e < E; e += 32) dot += (double)X[e] * Y[e];
        dot = mg_warp_sum_d(dot);
        for (int e = lane; e < E; e += 32) DL[e] += (float)(X[e] * (Y[e] - dot));
    } else { /* sigmoid, normalised over the k when k > 1 */
        float s = has ? sigmoid_f(L[sel]) : 0.0f;
        double z = mg_warp_sum_d((double)s) + 1e-20, dot = mg_warp_sum_d((double)dq * s);
        double ds = k > 1 ? dq / z - dot / (z * z) : (double)dq;
        if (has) DL[sel] += (float)(ds * s * (1.0f - s));
    }
    __syncwarp();
    if (f.aux) {
        const int32_t *cnt = aux_counts + (size_t)(t / f.aux_n) * E;
        double dot = 0.0, z = 0.0;
        if (softmax)
            warp_softmax(X, L, E);
        else
            for (int e = lane; e < E; e += 32) z += (double)(X[e] = sigmoid_f(L[e]));
        z = mg_warp_sum_d(z) + 1e-20;
        for (int e = lane; e < E; e += 32) dot += (double)(float)(f.aux_w * cnt[e]) * X[e];
        dot = mg_warp_sum_d(dot);
        for (int e = lane; e < E; e += 32) {
            float dp = (float)(f.aux_w * cnt[e]);
            if (softmax)
                DL[e] += (float)(X[e] * (dp - dot));
            else
                DL[e] += (float)((dp / z - dot / (z * z)) * X[e] * (1.0f - X[e]));
        }
    }
    if (f.zloss) {
        double lse = warp_lse(L, E);
        double w = (double)r.loss_weight * r.z_coeff * 2.0 * lse / r.T;
        for (int e = lane; e < E; e += 32) DL[e] += (float)(w * exp((double)L[e] - lse));
    }
    for (int e = lane; e < E; e += 32) dlogits[(size_t)t * E + e] = DL[e];
}

extern "C" mg_status mg_cuda_moe_route_backward(mg_backend *be, const mg_moe_routing *r,
                                                float *dlogits, const float *dprobs,
                                                const float *logits, const int32_t *idx,
                                                const float *probs, const int32_t *aux_counts,
                                                const float *bias) {
    // dlogits, logits (T,E); dprobs, idx, probs (T,k); aux_counts (T/aux_n, E)
    (void)probs, (void)bias;
    if (r->T <= 0) return MG_OK;
    MG_CHECK(check_routing(r));
    unsigned grid = (unsigned)((r->T + ROUTE_WARPS - 1) / ROUTE_WARPS);
    size_t smem = (size_t)ROUTE_WARPS * 4 * r->E * sizeof(float);
    moe_route_backward_kernel<<<grid, ROUTE_WARPS * 32, smem, mg_cuda_stream(be)>>>(
        *r, flags_of(r), dlogits, dprobs, logits, idx, aux_counts);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
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

extern "C" mg_status mg_cuda_moe_expert_bias_update(mg_backend *be, float *bias, const float *load,
                                                    int E, float rate) {
    // bias, load (E)
    if (E <= 0) return MG_OK;
    expert_bias_update_kernel<<<1, 256, 0, mg_cuda_stream(be)>>>(bias, load, E, rate);
    MG_CUDA_CHECK_LAUNCH();
    return MG_OK;
}
