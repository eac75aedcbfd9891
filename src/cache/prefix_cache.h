/* prefix_cache — exact prefix caching for hybrid models: finds the KV pages and the linear
 * layers' state that an earlier request computed for the same leading tokens
 * (docs/prefix-cache.md).
 *
 * Pages: a full KV page is identified by its tokens chained to its parent page (the page before
 * it in the sequence; the first page's parent is the root). The model and every option that
 * affects the numbers are those of the one engine the cache belongs to, so they need no place in
 * the key; a cache shared between engines would have to key by them. The index keys a page by
 * (parent id, parent generation, tokens) and compares all three on a match, so a hash collision can
 * never hand out the wrong page; a page's generation changes whenever it leaves the index, so
 * children keyed under an evicted parent are unreachable. Published pages are reference counted by
 * the block pool like any other; at refcount 0 they wait on the pool's LRU until an allocation
 * needs them (block_pool.h).
 *
 * Snapshots: the GatedDeltaNet conv and recurrent state cannot be derived from the pages, so at
 * chosen positions S the prefix cache copies a slot's state into a snapshot (its own memory
 * budget, LRU eviction). A snapshot is anchored to the page ending at S and dies with it. A
 * lookup only stops where a snapshot exists (a model without linear layers needs none).
 *
 * Exactness: the state at S and the KV rows before it are bit-identical to computing from
 * nothing only when S is a boundary of the request's own chunking and the chunks before it were
 * full (the GatedDeltaNet result depends on the split). So every S the cache publishes or hits is
 * a multiple of `boundary` (a multiple of the page size and of the prefill chunk), at or below a
 * position the request reached with full prompt chunks, and a hit stays below the prompt's end
 * (the last prompt token is always computed: its logits are sampled). The caller (the engine)
 * guarantees the "reached with full chunks" part by publishing only after such a chunk.
 *
 * Owns: the index, the page records (tokens, chain links, generations), the snapshot memory and
 * its LRU, the counters. Borrows the hybrid cache (its block pool, whose evict hook it sets, and
 * its state pool).
 * Must never: decide who runs, compute, or write a page's KV memory.
 * Not thread-safe: the engine loop is the only caller.
 */
#ifndef PH_CACHE_PREFIX_CACHE_H
#define PH_CACHE_PREFIX_CACHE_H

#include <stdint.h>

#include "base/diag.h"
#include "cache/hybrid_cache.h"

typedef struct prefix_cache_params {
  int64_t boundary;       /* hits and snapshots sit at multiples of it: a multiple of the page
                             size, >= 1 (the engine passes lcm(prefill_chunk, page size)) */
  int64_t snapshot_bytes; /* budget for snapshots (0 holds none: no hits on a model with linear
                             layers) */
} prefix_cache_params;

typedef struct prefix_cache prefix_cache;

/* Creates the cache over c (borrowed: it must outlive the prefix cache) and hooks its block pool's
 * eviction. *out owned by the caller. PH_ERR_INVALID_ARGUMENT, PH_ERR_NO_MEMORY. */
ph_status prefix_cache_create(hybrid_cache *c, const prefix_cache_params *p, prefix_cache **out,
                              diag *d);
/* Unhooks the pool, forgets every page (held pages stay held, now as ordinary pages) and frees.
 * NULL is a no-op. */
void prefix_cache_free(prefix_cache *pc);

/* What a lookup found for a prompt. */
typedef struct prefix_match {
  int64_t n_tokens;  /* the hit: tokens [0, n_tokens) are cached (0: none) */
  int32_t n_pages;   /* pages covering them */
  int32_t snapshot;  /* the snapshot at n_tokens (-1: none, or a model without state) */
  int64_t n_matched; /* tokens whose pages are cached, with or without a snapshot (>= n_tokens) */
  int64_t branch;    /* the deepest boundary <= n_matched and < n_prompt: where a snapshot would
                        let the next request with this prefix hit deeper (0: none) */
} prefix_match;

/* Finds the longest cached prefix of tokens[0, n_prompt) that ends at a boundary below n_prompt
 * with a snapshot there, and appends its pages to bt (one reference each: a cached page nobody
 * held leaves the LRU). bt must hold no pages. *m describes the hit. Errors only from the block
 * table (PH_ERR_NO_MEMORY); nothing is taken then. */
ph_status prefix_cache_acquire(prefix_cache *pc, const int64_t *tokens, int64_t n_prompt,
                               block_table *bt, prefix_match *m, diag *d);

/* Copies snapshot m->snapshot into slot's published state (no-op without a snapshot). Call
 * before any eviction can run (in the same admission as prefix_cache_acquire). */
ph_status prefix_cache_restore(prefix_cache *pc, const prefix_match *m, int32_t slot, diag *d);

/* Publishes a sequence's computed pages: tokens[0, n_computed) are in bt's pages, computed with
 * full chunks of the request's own chunking; the floor(n_computed / page) full pages become
 * findable (a page equal to one already cached is left unpublished: the cached one stays
 * canonical). take_snapshot: n_computed is a multiple of the boundary, and slot's state (after
 * exactly those tokens) is copied into a snapshot at that page unless one is there (evicting the
 * least recently used snapshot when the budget is full). */
ph_status prefix_cache_publish(prefix_cache *pc, const int64_t *tokens, int64_t n_computed,
                               const block_table *bt, int32_t slot, int take_snapshot, diag *d);

/* Drops every evictable page (to the free stack) and every snapshot. */
void prefix_cache_clear(prefix_cache *pc);

/* Counts the engine adds to at admission: one lookup of n_prompt tokens, n_hit served. */
void prefix_cache_count_lookup(prefix_cache *pc, int64_t n_prompt, int64_t n_hit);

/* The public figures (include/pagedhybrid.h), every field filled: the counters since creation and
 * the gauges now (page_bytes_held: the evictable pages' KV memory). */
void prefix_cache_get_stats(const prefix_cache *pc, ph_prefix_cache_stats *out);
int64_t prefix_cache_boundary(const prefix_cache *pc);

/* Checks the index, the page records, the snapshots and the block pool against one another
 * (block_pool_check included); PH_ERR_INTERNAL naming the first broken invariant. */
ph_status prefix_cache_check(const prefix_cache *pc, diag *d);

#endif /* PH_CACHE_PREFIX_CACHE_H */
