/* arena — bump allocation from large blocks, freed all at once.
 *
 * For objects that live exactly as long as their owner (parsed configs, tensor tables, graph
 * nodes, per-run scratch). Allocations are aligned to ARENA_ALIGN (64 bytes: one cache line,
 * one zmm register). arena_reset() keeps the largest block for reuse, so a per-step arena stops
 * allocating after warm-up; arena_stats() reports the number of system allocations made so
 * tests can assert that.
 */
#ifndef PH_BASE_ARENA_H
#define PH_BASE_ARENA_H

#include <stddef.h>

#define ARENA_ALIGN 64

typedef struct arena_block arena_block;

typedef struct arena {
  arena_block *head;      /* newest block first */
  size_t block_bytes;     /* default size of new blocks */
  size_t n_system_allocs; /* malloc calls made over the arena's life */
  size_t used_bytes;      /* bytes handed out since the last reset */
} arena;

/* block_bytes 0 picks 64 KiB. Never fails: blocks are allocated lazily. */
void arena_init(arena *a, size_t block_bytes);

/* Returns zeroed memory aligned to ARENA_ALIGN, or NULL when out of memory (or bytes overflow).
 * bytes == 0 returns a valid unique pointer. */
void *arena_alloc(arena *a, size_t bytes);

/* Copies a string (NULL on out of memory). */
char *arena_strdup(arena *a, const char *s);
char *arena_strndup(arena *a, const char *s, size_t n);

/* Drops everything allocated; keeps the largest block for reuse. */
void arena_reset(arena *a);

/* Frees all blocks; the arena may be reused after arena_init(). NULL-safe. */
void arena_free(arena *a);

#endif /* PH_BASE_ARENA_H */
