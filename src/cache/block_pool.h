/* block_pool — the KV block pool and per-sequence block tables: pure bookkeeping of block ids.
 *
 * Owns: which KV page ids are free and how many holders each used id has (reference counts, so
 * a prefix can later be shared between sequences). One id indexes every full-attention layer's
 * page buffer (src/cache/kv_buffers.h), so the pool never sees layers, bytes or dtypes.
 * Block 0 is the NULL block: it is never handed out, and padded entries of a step's packed
 * `block_table int32 [B, max_blocks]` point at it. Free ids sit on a LIFO stack (the most
 * recently freed id is handed out first, so lazily committed KV pages are reused rather than a
 * new page touched per allocation), and every sequence of calls gives the same ids.
 * Must never: touch KV memory, compute, or know about requests beyond a block_table of ids.
 * Not thread-safe: the engine loop is the only caller.
 *
 * Errors: PH_ERR_LIMIT when too few blocks are free (nothing is allocated: all or nothing);
 * PH_ERR_INVALID_ARGUMENT for a bad id, the null block, or a double free (message names the id).
 */
#ifndef PH_CACHE_BLOCK_POOL_H
#define PH_CACHE_BLOCK_POOL_H

#include <stdint.h>

#include "base/diag.h"

#define BLOCK_POOL_NULL_ID 0

typedef struct block_pool block_pool;

/* Creates a pool of n_blocks ids [0, n_blocks); id 0 is the null block, so n_blocks - 1 are
 * allocatable, initially queued in ascending order. n_blocks in [1, INT32_MAX].
 * *out is owned by the caller (block_pool_free). PH_ERR_INVALID_ARGUMENT, PH_ERR_NO_MEMORY. */
ph_status block_pool_create(int32_t n_blocks, block_pool **out, diag *d);

/* Frees the pool (NULL is a no-op). Ids still held by block tables become meaningless. */
void block_pool_free(block_pool *pool);

/* Prefix caching: an id marked cached is findable by its contents; when its last holder lets go
 * it waits on an LRU list (still free: counted by block_pool_free_count) instead of the free
 * stack. block_pool_incref_n takes it back; an allocation that finds the stack empty evicts the
 * LRU's head, calling fn(ctx, id) once (the id is no longer cached by then) before handing it
 * out. fn NULL: no hook. */
typedef void (*block_pool_evict_fn)(void *ctx, int32_t id);
void block_pool_set_evict_fn(block_pool *pool, block_pool_evict_fn fn, void *ctx);

/* Marks id cached (1: it must be held, refcount > 0) or not (0: an evictable id goes to the free
 * stack). PH_ERR_INVALID_ARGUMENT for a bad id or caching a free one. */
ph_status block_pool_set_cached(block_pool *pool, int32_t id, int cached, diag *d);
int block_pool_is_cached(const block_pool *pool, int32_t id);

/* Ids waiting on the LRU (cached, refcount 0), and the list from the next evicted on (-1 at the
 * end). */
int32_t block_pool_evictable_count(const block_pool *pool);
int32_t block_pool_lru_first(const block_pool *pool);
int32_t block_pool_lru_next(const block_pool *pool, int32_t id);

/* Checks the pool's own invariants (the stack holds exactly the uncached ids at refcount 0, the
 * LRU exactly the cached ones, links consistent); PH_ERR_INTERNAL naming the first broken one. */
ph_status block_pool_check(const block_pool *pool, diag *d);

/* Total ids including the null block. */
int32_t block_pool_n_blocks(const block_pool *pool);

/* Ids that can be allocated now (refcount 0, excluding the null block): the free stack plus the
 * evictable cached ids. */
int32_t block_pool_free_count(const block_pool *pool);

/* Ids with refcount > 0. Always free_count + used_count == n_blocks - 1. */
int32_t block_pool_used_count(const block_pool *pool);

/* Reference count of id (0 when free); -1 for an out-of-range id. The null block reads 0. */
int32_t block_pool_refcount(const block_pool *pool, int32_t id);

/* Allocates n ids (n >= 0) from the top of the free stack into out_ids[n], each with
 * refcount 1; once the stack is empty, from the head of the LRU (evicting cached ids). All or
 * nothing: PH_ERR_LIMIT (and out_ids untouched) when fewer than n are free. */
ph_status block_pool_alloc_n(block_pool *pool, int32_t n, int32_t *out_ids, diag *d);

/* Adds one holder to each of ids[n] (prefix sharing). Every id must be in use (refcount > 0) or
 * cached (an evictable id leaves the LRU); otherwise PH_ERR_INVALID_ARGUMENT naming the id and
 * nothing changes. */
ph_status block_pool_incref_n(block_pool *pool, int32_t n, const int32_t *ids, diag *d);

/* Drops one holder from each of ids[n] (an id may repeat); the ids reaching refcount 0 go on
 * the free stack so that the next allocation returns them in their order in ids. All or nothing: a
 * bad id, the null block, or more drops than holders (double free) is PH_ERR_INVALID_ARGUMENT
 * naming the id, and nothing changes. */
ph_status block_pool_decref_n(block_pool *pool, int32_t n, const int32_t *ids, diag *d);

/* ---- block tables: the ids of one sequence, in token order ---------------------------------- */

/* ids[n_blocks] owned by the table (heap, grown on demand); block b holds tokens
 * [b*block_size, (b+1)*block_size). Zero-initialise or block_table_init before use. */
typedef struct block_table {
  int32_t *ids;     /* [capacity]; the first n_blocks are held (one reference each) */
  int32_t n_blocks; /* held blocks */
  int32_t capacity; /* allocated entries of ids */
} block_table;

/* Sets bt to the empty table (no memory). */
void block_table_init(block_table *bt);

/* Blocks needed for n_tokens tokens: ceil(n_tokens / block_size); -1 if an argument is < 0 or
 * block_size is 0 or the result does not fit int32. */
int32_t block_table_blocks_for(int64_t n_tokens, int32_t block_size);

/* Makes bt hold enough blocks for n_tokens_total tokens, allocating only the missing ones from
 * pool (appended in allocation order). Never shrinks. All or nothing: PH_ERR_LIMIT when the
 * pool is short, PH_ERR_NO_MEMORY, PH_ERR_INVALID_ARGUMENT for bad sizes; bt is unchanged on
 * failure. */
ph_status block_table_reserve(block_table *bt, block_pool *pool, int64_t n_tokens_total,
                              int32_t block_size, diag *d);

/* Appends ids[n] already in use elsewhere to bt, taking one reference each (a shared prefix).
 * bt is unchanged on failure. */
ph_status block_table_share(block_table *bt, block_pool *pool, int32_t n, const int32_t *ids,
                            diag *d);

/* Drops bt's reference on each of its blocks and frees its storage; bt is empty afterwards.
 * Fails (bt untouched) only if the pool disagrees with bt (PH_ERR_INVALID_ARGUMENT). */
ph_status block_table_release(block_table *bt, block_pool *pool, diag *d);

/* Writes a step's packed block_table rows: out[b * max_blocks + j] = tables[b]->ids[j] for
 * j < n_blocks, BLOCK_POOL_NULL_ID after. tables[batch]; out[batch * max_blocks] owned by the
 * caller. PH_ERR_LIMIT (naming the row) when a table holds more than max_blocks ids. */
ph_status block_tables_pack(const block_table *const *tables, int32_t batch, int32_t max_blocks,
                            int32_t *out, diag *d);

/* The largest n_blocks over tables[batch] (0 for batch 0): the smallest valid max_blocks. */
int32_t block_tables_max_blocks(const block_table *const *tables, int32_t batch);

#endif /* PH_CACHE_BLOCK_POOL_H */
