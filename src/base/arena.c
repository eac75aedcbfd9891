/* arena — bump allocation from 64-byte aligned blocks. See arena.h.
 *
 * Blocks are made lazily, newest first. Every allocation is rounded up to ARENA_ALIGN so the
 * next one stays aligned, and zeroed when handed out (not when the block is made), so reset
 * costs nothing and a block that is never filled is never touched. A request larger than a
 * quarter of the block size gets a block of its own, linked behind the current one so the
 * current block keeps serving small requests: a 40 KiB table between two 64 KiB blocks would
 * otherwise waste most of a block. Sizes are checked before any arithmetic, and requests
 * above PTRDIFF_MAX fail without calling malloc (pointer differences inside such an object
 * would be undefined anyway, and sanitizer allocators abort on them instead of returning NULL).
 */
#include "base/arena.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

struct arena_block {
  arena_block *next;
  size_t capacity; /* usable bytes after the header */
  size_t used;
};

/* The header padded to one alignment unit, so data starts aligned. */
#define BLOCK_HEADER        ((sizeof(arena_block) + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1))
#define DEFAULT_BLOCK_BYTES ((size_t)64 * 1024)
#define MAX_REQUEST         ((size_t)PTRDIFF_MAX - BLOCK_HEADER - ARENA_ALIGN)

static unsigned char *block_data(arena_block *b) { return (unsigned char *)b + BLOCK_HEADER; }

static size_t round_up(size_t n) { return (n + ARENA_ALIGN - 1) & ~(size_t)(ARENA_ALIGN - 1); }

void arena_init(arena *a, size_t block_bytes) {
  if (block_bytes == 0) block_bytes = DEFAULT_BLOCK_BYTES;
  if (block_bytes > MAX_REQUEST) block_bytes = MAX_REQUEST;
  a->head = NULL;
  a->block_bytes = round_up(block_bytes);
  a->n_system_allocs = 0;
  a->used_bytes = 0;
}

/* capacity must be a multiple of ARENA_ALIGN and at most MAX_REQUEST. */
static arena_block *new_block(arena *a, size_t capacity) {
  arena_block *b = aligned_alloc(ARENA_ALIGN, BLOCK_HEADER + capacity);
  if (!b) return NULL;
  a->n_system_allocs++;
  b->next = NULL;
  b->capacity = capacity;
  b->used = 0;
  return b;
}

void *arena_alloc(arena *a, size_t bytes) {
  if (!a || bytes > MAX_REQUEST) return NULL;
  /* bytes == 0 still takes one unit, so the pointer is unique. */
  size_t need = round_up(bytes ? bytes : 1);
  arena_block *b = a->head;
  if (!b || b->capacity - b->used < need) {
    if (need > a->block_bytes / 4 && b) {
      /* Dedicated block, behind the current one. */
      arena_block *big = new_block(a, need);
      if (!big) return NULL;
      big->next = b->next;
      b->next = big;
      b = big;
    } else {
      arena_block *fresh = new_block(a, need > a->block_bytes ? need : a->block_bytes);
      if (!fresh) return NULL;
      fresh->next = a->head;
      a->head = fresh;
      b = fresh;
    }
  }
  unsigned char *p = block_data(b) + b->used;
  b->used += need;
  a->used_bytes += need;
  memset(p, 0, bytes);
  return p;
}

char *arena_strndup(arena *a, const char *s, size_t n) {
  if (!s) return NULL;
  size_t len = strnlen(s, n);
  if (len == SIZE_MAX) return NULL;
  char *out = arena_alloc(a, len + 1);
  if (!out) return NULL;
  memcpy(out, s, len);
  out[len] = '\0';
  return out;
}

char *arena_strdup(arena *a, const char *s) { return s ? arena_strndup(a, s, strlen(s)) : NULL; }

void arena_reset(arena *a) {
  if (!a) return;
  arena_block *keep = NULL;
  for (arena_block *b = a->head; b; b = b->next)
    if (!keep || b->capacity > keep->capacity) keep = b;
  arena_block *b = a->head;
  while (b) {
    arena_block *next = b->next;
    if (b != keep) free(b);
    b = next;
  }
  if (keep) {
    keep->next = NULL;
    keep->used = 0;
  }
  a->head = keep;
  a->used_bytes = 0;
}

void arena_free(arena *a) {
  if (!a) return;
  arena_block *b = a->head;
  while (b) {
    arena_block *next = b->next;
    free(b);
    b = next;
  }
  a->head = NULL;
  a->used_bytes = 0;
}
