/* Building cuDNN backend-API graphs (graph descriptors, tensors, pointwise, matmul, reduction,
 * reshape, random-number operations) as a straight list of calls: the first failing call records the status and
 * where it failed, later ones do nothing, and the graph is checked once. Every descriptor made is
 * kept in the caller's array, to be destroyed with the plans built from it. Used by the fused
 * attention (attention_cudnn.cu). Header-only (static inline): CUDA C++ inside the backend.
 * Exports: cd_graph, CD_TRY, cd_new, cd_set, cd_set_desc, cd_finalize, cd_add_op, cd_tensor,
 * cd_scalar, cd_pointwise, cd_matmul, cd_reduce, cd_reshape, cd_rng_bernoulli. Needs: cudnn.h. */
#ifndef MG_BACKEND_CUDA_CUDNN_GRAPH_CUH
#define MG_BACKEND_CUDA_CUDNN_GRAPH_CUH

#include <cudnn.h>
#include <stdint.h>

#define CD_MAX_OPS 48 /* operations of one graph */

/* A graph under construction. The first failing call records where and why; later calls do
 * nothing, so the build reads as a straight list of operations and is checked once. */
typedef struct {
    cudnnBackendDescriptor_t *descs; /* (max_descs) every descriptor made, kept by the caller */
    int *ndescs, max_descs;
    cudnnStatus_t st;
    const char *file;
    int line;
    cudnnBackendDescriptor_t ops[CD_MAX_OPS];
    int nops;
    int64_t next_uid;
} cd_graph;

#define CD_TRY(g, call)                                                                            \
    do {                                                                                           \
        if ((g)->st == CUDNN_STATUS_SUCCESS) {                                                     \
            cudnnStatus_t s_ = (call);                                                             \
            if (s_ != CUDNN_STATUS_SUCCESS)                                                        \
                (g)->st = s_, (g)->file = __FILE__, (g)->line = __LINE__;                          \
        }                                                                                          \
    } while (0)

static inline cudnnBackendDescriptor_t cd_new(cd_graph *g, cudnnBackendDescriptorType_t type) {
    cudnnBackendDescriptor_t d = NULL;
    if (g->st != CUDNN_STATUS_SUCCESS) return NULL;
    if (*g->ndescs >= g->max_descs) {
        g->st = CUDNN_STATUS_INTERNAL_ERROR, g->file = __FILE__, g->line = __LINE__;
        return NULL;
    }
    CD_TRY(g, cudnnBackendCreateDescriptor(type, &d));
    if (d) g->descs[(*g->ndescs)++] = d;
    return d;
}

static inline void cd_set(cd_graph *g, cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
                          cudnnBackendAttributeType_t type, int64_t n, const void *v) {
    CD_TRY(g, cudnnBackendSetAttribute(d, name, type, n, v));
}

static inline void cd_set_desc(cd_graph *g, cudnnBackendDescriptor_t d,
                               cudnnBackendAttributeName_t name, cudnnBackendDescriptor_t v) {
    cd_set(g, d, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, &v);
}

static inline void cd_finalize(cd_graph *g, cudnnBackendDescriptor_t d) {
    CD_TRY(g, cudnnBackendFinalize(d));
}

static inline void cd_add_op(cd_graph *g, cudnnBackendDescriptor_t op) {
    if (g->st != CUDNN_STATUS_SUCCESS) return;
    if (g->nops >= CD_MAX_OPS) {
        g->st = CUDNN_STATUS_INTERNAL_ERROR, g->file = __FILE__, g->line = __LINE__;
        return;
    }
    cd_finalize(g, op);
    g->ops[g->nops++] = op;
}

/* A 4-D tensor. uid 0: a new virtual (graph-internal) tensor. */
static inline cudnnBackendDescriptor_t cd_tensor(cd_graph *g, int64_t uid, cudnnDataType_t dt,
                                                 const int64_t dim[4], const int64_t stride[4]) {
    cudnnBackendDescriptor_t t = cd_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    bool virt = uid == 0;
    int64_t align = 16;
    if (virt) uid = g->next_uid++;
    cd_set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    cd_set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    cd_set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    cd_set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, dim);
    cd_set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, stride);
    cd_set(g, t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, 1, &virt);
    cd_finalize(g, t);
    return t;
}

/* A scalar passed by value at execution (host pointer in the variant pack). */
static inline cudnnBackendDescriptor_t cd_scalar(cd_graph *g, int64_t uid) {
    static const int64_t one[4] = {1, 1, 1, 1};
    cudnnBackendDescriptor_t t = cd_new(g, CUDNN_BACKEND_TENSOR_DESCRIPTOR);
    cudnnDataType_t dt = CUDNN_DATA_FLOAT;
    bool by_value = true;
    int64_t align = 16;
    cd_set(g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, 1, &uid);
    cd_set(g, t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &dt);
    cd_set(g, t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, 1, &align);
    cd_set(g, t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, 4, one);
    cd_set(g, t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, 4, one);
    cd_set(g, t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, 1, &by_value);
    cd_finalize(g, t);
    return t;
}

/* y = mode(x[, b][, t]) with math precision `prec`; axis >= 0 for GEN_INDEX. */
static inline void cd_pointwise(cd_graph *g, cudnnPointwiseMode_t mode, cudnnDataType_t prec,
                                cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                                cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
                                int64_t axis) {
    cudnnBackendDescriptor_t pw = cd_new(g, CUDNN_BACKEND_POINTWISE_DESCRIPTOR);
    cd_set(g, pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, 1, &mode);
    cd_set(g, pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1, &prec);
    if (axis >= 0) cd_set(g, pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, 1, &axis);
    cd_finalize(g, pw);
    cudnnBackendDescriptor_t op = cd_new(g, CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR);
    const float one = 1.0f;
    cd_set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR, pw);
    cd_set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, x);
    if (b) cd_set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC, b);
    if (t) cd_set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC, t);
    cd_set_desc(g, op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, y);
    cd_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA1, CUDNN_TYPE_FLOAT, 1, &one);
    cd_set(g, op, CUDNN_ATTR_OPERATION_POINTWISE_ALPHA2, CUDNN_TYPE_FLOAT, 1, &one);
    cd_add_op(g, op);
}

/* c = a b over the last two dims (batch dims broadcast: GQA), fp32 accumulation. */
static inline void cd_matmul(cd_graph *g, cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                             cudnnBackendDescriptor_t c) {
    cudnnBackendDescriptor_t mm = cd_new(g, CUDNN_BACKEND_MATMUL_DESCRIPTOR);
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cd_set(g, mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    cd_finalize(g, mm);
    cudnnBackendDescriptor_t op = cd_new(g, CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR);
    cd_set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, a);
    cd_set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, b);
    cd_set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, c);
    cd_set_desc(g, op, CUDNN_ATTR_OPERATION_MATMUL_DESC, mm);
    cd_add_op(g, op);
}

/* y = reduce(x) over the dims where y has extent 1. */
static inline void cd_reduce(cd_graph *g, cudnnReduceTensorOp_t mode, cudnnBackendDescriptor_t x,
                             cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t rd = cd_new(g, CUDNN_BACKEND_REDUCTION_DESCRIPTOR);
    cudnnDataType_t comp = CUDNN_DATA_FLOAT;
    cd_set(g, rd, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE, 1, &mode);
    cd_set(g, rd, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp);
    cd_finalize(g, rd);
    cudnnBackendDescriptor_t op = cd_new(g, CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR);
    cd_set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, rd);
    cd_set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, x);
    cd_set_desc(g, op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, y);
    cd_add_op(g, op);
}

/* y = x seen with other dims/strides (a transpose here): no data movement. */
static inline void cd_reshape(cd_graph *g, cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = cd_new(g, CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR);
    cd_set_desc(g, op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, x);
    cd_set_desc(g, op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, y);
    cd_add_op(g, op);
}

/* y = Bernoulli(prob) draws (1 with probability prob, else 0) of cuDNN's Philox generator keyed
 * by the seed and offset tensors (int64 scalars in device memory, read at execution). */
static inline void cd_rng_bernoulli(cd_graph *g, double prob, cudnnBackendDescriptor_t seed,
                                    cudnnBackendDescriptor_t offset, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t rd = cd_new(g, CUDNN_BACKEND_RNG_DESCRIPTOR);
    cudnnRngDistribution_t dist = CUDNN_RNG_DISTRIBUTION_BERNOULLI;
    cd_set(g, rd, CUDNN_ATTR_RNG_DISTRIBUTION, CUDNN_TYPE_RNG_DISTRIBUTION, 1, &dist);
    cd_set(g, rd, CUDNN_ATTR_RNG_BERNOULLI_DIST_PROBABILITY, CUDNN_TYPE_DOUBLE, 1, &prob);
    cd_finalize(g, rd);
    cudnnBackendDescriptor_t op = cd_new(g, CUDNN_BACKEND_OPERATION_RNG_DESCRIPTOR);
    cd_set_desc(g, op, CUDNN_ATTR_OPERATION_RNG_YDESC, y);
    cd_set_desc(g, op, CUDNN_ATTR_OPERATION_RNG_DESC, rd);
    cd_set_desc(g, op, CUDNN_ATTR_OPERATION_RNG_SEED, seed);
    cd_set_desc(g, op, CUDNN_ATTR_OPERATION_RNG_OFFSET_DESC, offset);
    cd_add_op(g, op);
}

#endif
