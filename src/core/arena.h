/* The arena: all memory of one lifetime class (parameters, gradients, optimizer state,
 * activations, workspace) is sized first, then allocated once. Usage:
 *   mg_arena a; mg_arena_init(&a, "activations");
 *   size_t off; mg_arena_reserve(&a, bytes, 0, &off);   // sizing pass: offsets only
 *   mg_arena_commit(&a, NULL);                           // one allocation (host when NULL)
 *   float *p = mg_arena_ptr(&a, off);                    // fixed address from now on
 * Offsets are aligned to at least MG_ARENA_ALIGN bytes; addresses never move after commit, so a
 * whole step can later be captured in a CUDA graph.
 * Exports: mg_arena, mg_allocator, mg_arena_*. Needs: core/status. */
#ifndef MG_ARENA_H
#define MG_ARENA_H

#include "core/status.h"

#include <stddef.h>

#define MG_ARENA_ALIGN 256

/* Where an arena's one block comes from. NULL allocator means zeroed, aligned host memory. */
typedef struct {
    mg_status (*alloc)(void *ctx, size_t bytes, void **out); /* must return zeroed memory */
    void (*free)(void *ctx, void *ptr);
    void *ctx;
} mg_allocator;

typedef struct {
    const char *name;   /* for messages and the memory report */
    size_t size;        /* bytes reserved so far (the committed size after commit) */
    unsigned char *base; /* NULL until commit */
    const mg_allocator *allocator;
} mg_arena;

void mg_arena_init(mg_arena *a, const char *name);
/* Reserves bytes at an offset aligned to max(align, MG_ARENA_ALIGN). Fails after commit. */
mg_status mg_arena_reserve(mg_arena *a, size_t bytes, size_t align, size_t *offset_out);
/* Allocates the arena's single block (size rounded up to the alignment), zeroed. */
mg_status mg_arena_commit(mg_arena *a, const mg_allocator *allocator);
/* The bytes the arena takes once committed (its reservations rounded up to MG_ARENA_ALIGN). */
size_t mg_arena_committed_size(const mg_arena *a);
/* Address of a reserved offset; only valid after commit. */
void *mg_arena_ptr(const mg_arena *a, size_t offset);
void mg_arena_free(mg_arena *a);

#endif
