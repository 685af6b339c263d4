#include "core/arena.h"

#include <stdlib.h>
#include <string.h>

void mg_arena_init(mg_arena *a, const char *name) {
    memset(a, 0, sizeof *a);
    a->name = name;
}

static size_t round_up(size_t x, size_t to) { return (x + to - 1) / to * to; }

mg_status mg_arena_reserve(mg_arena *a, size_t bytes, size_t align, size_t *offset_out) {
    if (a->base)
        return MG_FAIL(MG_ERR_INTERNAL, "arena '%s': reserve after commit (all memory must be "
                                        "planned before the first allocation)", a->name);
    if (align < MG_ARENA_ALIGN) align = MG_ARENA_ALIGN;
    if (align & (align - 1))
        return MG_FAIL(MG_ERR_INTERNAL, "arena '%s': alignment %zu is not a power of two",
                       a->name, align);
    size_t off = round_up(a->size, align);
    if (off + bytes < off)
        return MG_FAIL(MG_ERR_NOMEM, "arena '%s': size overflow", a->name);
    a->size = off + bytes;
    *offset_out = off;
    return MG_OK;
}

size_t mg_arena_committed_size(const mg_arena *a) {
    return a->base ? a->size : round_up(a->size ? a->size : 1, MG_ARENA_ALIGN);
}

mg_status mg_arena_commit(mg_arena *a, const mg_allocator *allocator) {
    if (a->base) return MG_FAIL(MG_ERR_INTERNAL, "arena '%s': committed twice", a->name);
    size_t bytes = mg_arena_committed_size(a);
    a->allocator = allocator;
    if (allocator) {
        void *p = NULL;
        MG_CHECK(allocator->alloc(allocator->ctx, bytes, &p));
        a->base = p;
    } else {
        a->base = aligned_alloc(MG_ARENA_ALIGN, bytes);
        if (!a->base)
            return MG_FAIL(MG_ERR_NOMEM, "arena '%s': cannot allocate %.1f MiB of host memory",
                           a->name, (double)bytes / (1 << 20));
        memset(a->base, 0, bytes);
    }
    a->size = bytes;
    return MG_OK;
}

void *mg_arena_ptr(const mg_arena *a, size_t offset) { return a->base ? a->base + offset : NULL; }

void mg_arena_free(mg_arena *a) {
    if (a->base) {
        if (a->allocator) a->allocator->free(a->allocator->ctx, a->base);
        else free(a->base);
    }
    a->base = NULL;
    a->size = 0;
}
