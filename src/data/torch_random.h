/* torch.randperm on the CPU with a seeded generator, bit for bit: what Megatron's cyclic sampler
 * (MegatronPretrainingRandomSampler) draws each epoch with
 *   g = torch.Generator(); g.manual_seed(epoch); torch.randperm(n, generator=g).
 * The generator is ATen's CPUGeneratorImpl: an MT19937 seeded with the low 32 bits of the seed by
 * the reference init_genrand (the engine of numpy's RandomState, data/numpy_random.h); random()
 * is one 32-bit output, random64() two, the first in the high half. randperm_cpu
 * (aten/src/ATen/native/TensorFactories.cpp, torch 2.x) fills 0..n-1 and, for
 * n < UINT32_MAX / 20, swaps a[i] with a[i + random() % (n - i)] for i = 0 .. n-2; for larger n
 * it builds the permutation inside out: for i = 0 .. n-1, z = random64() % (i + 1),
 * a[i] = a[z], a[z] = i. The element type does not change the draws.
 * Exports: mg_torch_randperm_i64, mg_torch_randperm_u32, MG_TORCH_RANDPERM_SMALL.
 * Needs: data/numpy_random (the engine). */
#ifndef MG_DATA_TORCH_RANDOM_H
#define MG_DATA_TORCH_RANDOM_H

#include <stdint.h>

/* randperm_cpu's bound between the two algorithms: n below it swaps forward with 32-bit draws */
#define MG_TORCH_RANDPERM_SMALL ((int64_t)(UINT32_MAX / 20))

/* out (n): torch.randperm(n, generator=torch.Generator().manual_seed(seed)). n >= 0. */
void mg_torch_randperm_i64(uint64_t seed, int64_t n, int64_t *out);
/* The same into 32-bit elements (half the memory); n <= 2^32. */
void mg_torch_randperm_u32(uint64_t seed, int64_t n, uint32_t *out);

#endif
