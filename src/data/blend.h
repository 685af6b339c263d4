/* Megatron's data-mixing arithmetic (megatron/core/datasets: blended_megatron_dataset_config.py,
 * utils.py, blended_megatron_dataset_builder.py, helpers.cpp), reproduced to the bit:
 *
 * - --split "969, 30, 1": the numbers are re.findall(r"[.0-9]+") (so a '-' is ignored, as there),
 *   at most three, padded with zeros, normalised by numpy's pairwise sum; the split matrix holds
 *   the cumulative book-ends, None (absent) where a split has zero weight; a split takes the
 *   documents [int(round(begin * n)), int(round(end * n))) with round half to even.
 * - --data-path "A" | "A B C" | "0.3 A 0.7 B": get_blend_from_list. An odd count or entries whose
 *   every weight position is not a number is a list of prefixes without weights (blended by their
 *   sizes); an even count whose weight positions are all numbers is a weighted blend.
 * - normalize: w / numpy.sum(w) (numpy's pairwise summation order).
 * - per-dataset sample counts: ceil(ceil(target * weight) * (1 + 0.005)).
 * - build_blending_indices / build_exhaustive_blending_indices: the greedy "largest sampling
 *   error first" assignment of blend positions to datasets.
 * Exports: mg_split, mg_split_*, mg_blend, mg_blend_*, mg_np_sum, mg_normalize. Needs: core. */
#ifndef MG_DATA_BLEND_H
#define MG_DATA_BLEND_H

#include "core/status.h"

#include <stdbool.h>
#include <stdint.h>

enum { MG_SPLIT_TRAIN = 0, MG_SPLIT_VALID, MG_SPLIT_TEST, MG_SPLIT_COUNT };
extern const char *const mg_split_names[MG_SPLIT_COUNT]; /* "train", "valid", "test" */

/* Megatron's default mid_level_dataset_surplus (--mid-level-dataset-surplus). */
#define MG_BLEND_SURPLUS 0.005

typedef struct {
    double vector[MG_SPLIT_COUNT];    /* normalised weights */
    bool present[MG_SPLIT_COUNT];     /* split_matrix[i] is not None */
    double matrix[MG_SPLIT_COUNT][2]; /* book-ends; matrix[0][0] is Python's int 0 */
} mg_split;

/* Parses --split; errors (MG_ERR_USAGE) name the flag and the value. */
mg_status mg_split_parse(mg_split *s, const char *text);
/* The document range of split i over n elements; begin == end when absent or empty. */
void mg_split_range(const mg_split *s, int i, int64_t n, int64_t *begin, int64_t *end);

typedef struct {
    int n;           /* number of datasets */
    char **prefixes; /* (n) */
    double *weights; /* (n) normalised once, or NULL: no weights (blend by dataset lengths) */
} mg_blend;

/* Parses the --data-path value list (entries separated by whitespace). */
mg_status mg_blend_parse(mg_blend *b, const char *data_path);
void mg_blend_free(mg_blend *b);

/* numpy.sum of a float64 array (pairwise summation, as numpy orders it). */
double mg_np_sum(const double *a, int64_t n);
/* Megatron's normalize: out[i] = w[i] / numpy.sum(w). out may alias w. */
void mg_normalize(const double *w, int n, double *out);
/* int(math.ceil(math.ceil(target * weight) * (1 + surplus))) */
int64_t mg_blend_dataset_size(int64_t target, double weight, double surplus);

/* helpers.cpp build_blending_indices: `size` positions; dataset_index (size), sample (size). */
mg_status mg_blend_build_indices(const double *weights, int n, int64_t size, int16_t *dataset_index,
                                 int64_t *dataset_sample_index);
/* helpers.cpp build_exhaustive_blending_indices: exactly sizes[i] samples of dataset i; every
 * size must be positive. Outputs have sum(sizes) entries. */
mg_status mg_blend_build_exhaustive(const int64_t *sizes, int n, int16_t *dataset_index,
                                    int64_t *dataset_sample_index);

#endif
