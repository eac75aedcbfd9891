/* block_pool — a LIFO stack of free ids plus a reference count per id.
 *
 * Why a stack: KV pages are committed lazily (base/fmap.h pages_alloc_zeroed). Handing out the
 * most recently freed id reuses a page that is already resident, so the memory a run commits
 * follows the most pages ever in use at once. A FIFO queue walked through every id of the pool
 * (100k one-page requests touched 100k pages: ~9 KB of resident memory per request on the tiny
 * model, up to the whole pool budget).
 *
 * Prefix caching adds a second home for a free id: an id marked cached (its contents are findable
 * by the prefix cache, src/cache/prefix_cache.h) waits at refcount 0 on an LRU list, and is
 * taken back by a reference (incref) or, when the stack is empty, evicted by an allocation (the
 * evict hook tells the prefix cache first). The stack is drained before the LRU, so cached pages
 * stay findable as long as uncached memory remains. */
#include "cache/block_pool.h"

#include <stdlib.h>
#include <string.h>

struct block_pool {
  int32_t n_blocks;  /* ids [0, n_blocks); 0 is the null block */
  int32_t *refcount; /* [n_blocks] */
  int32_t *stack;    /* [n_blocks - 1] free ids; stack[n_free - 1] is handed out next */
  int32_t n_free;    /* ids on the stack */
  /* cached ids (prefix caching): findable by their contents; at refcount 0 they wait on the
   * LRU list (head evicted first) instead of the stack */
  uint8_t *cached;              /* [n_blocks] */
  int32_t *lru_prev, *lru_next; /* [n_blocks], -1 at the ends */
  int32_t lru_head, lru_tail, n_lru;
  block_pool_evict_fn evict;
  void *evict_ctx;
};

ph_status block_pool_create(int32_t n_blocks, block_pool **out, diag *d) {
  RETURN_ERROR_IF(!out, d, PH_ERR_INVALID_ARGUMENT, "block_pool_create: out is NULL");
  *out = NULL;
  RETURN_ERROR_IF(n_blocks < 1, d, PH_ERR_INVALID_ARGUMENT,
                  "block_pool_create: n_blocks %d must be >= 1 (block 0 is the null block)",
                  (int)n_blocks);
  block_pool *p = calloc(1, sizeof *p);
  if (!p) return diag_set(d, PH_ERR_NO_MEMORY, "block_pool_create: pool struct");
  p->refcount = calloc((size_t)n_blocks, sizeof *p->refcount);
  p->stack = malloc((size_t)n_blocks * sizeof *p->stack);
  p->cached = calloc((size_t)n_blocks, 1);
  p->lru_prev = malloc((size_t)n_blocks * sizeof *p->lru_prev);
  p->lru_next = malloc((size_t)n_blocks * sizeof *p->lru_next);
  if (!p->refcount || !p->stack || !p->cached || !p->lru_prev || !p->lru_next) {
    block_pool_free(p);
    return diag_set(d, PH_ERR_NO_MEMORY, "block_pool_create: %d blocks", (int)n_blocks);
  }
  p->n_blocks = n_blocks;
  /* ascending from the top at start: the first allocations get 1, 2, 3, ... */
  for (int32_t i = 1; i < n_blocks; i++) p->stack[n_blocks - 1 - i] = i;
  p->n_free = n_blocks - 1;
  for (int32_t i = 0; i < n_blocks; i++) p->lru_prev[i] = p->lru_next[i] = -1;
  p->lru_head = p->lru_tail = -1;
  *out = p;
  return PH_OK;
}

void block_pool_free(block_pool *pool) {
  if (!pool) return;
  free(pool->refcount);
  free(pool->stack);
  free(pool->cached);
  free(pool->lru_prev);
  free(pool->lru_next);
  free(pool);
}

int32_t block_pool_n_blocks(const block_pool *pool) { return pool->n_blocks; }
int32_t block_pool_free_count(const block_pool *pool) { return pool->n_free + pool->n_lru; }
int32_t block_pool_used_count(const block_pool *pool) {
  return pool->n_blocks - 1 - pool->n_free - pool->n_lru;
}
int32_t block_pool_evictable_count(const block_pool *pool) { return pool->n_lru; }

void block_pool_set_evict_fn(block_pool *pool, block_pool_evict_fn fn, void *ctx) {
  pool->evict = fn;
  pool->evict_ctx = ctx;
}

int block_pool_is_cached(const block_pool *pool, int32_t id) {
  return id > 0 && id < pool->n_blocks && pool->cached[id];
}

int32_t block_pool_lru_first(const block_pool *pool) { return pool->lru_head; }
int32_t block_pool_lru_next(const block_pool *pool, int32_t id) {
  return id > 0 && id < pool->n_blocks ? pool->lru_next[id] : -1;
}

static void lru_unlink(block_pool *p, int32_t id) {
  const int32_t a = p->lru_prev[id], b = p->lru_next[id];
  if (a >= 0)
    p->lru_next[a] = b;
  else
    p->lru_head = b;
  if (b >= 0)
    p->lru_prev[b] = a;
  else
    p->lru_tail = a;
  p->lru_prev[id] = p->lru_next[id] = -1;
  p->n_lru--;
}

static void lru_push_back(block_pool *p, int32_t id) {
  p->lru_prev[id] = p->lru_tail;
  p->lru_next[id] = -1;
  if (p->lru_tail >= 0)
    p->lru_next[p->lru_tail] = id;
  else
    p->lru_head = id;
  p->lru_tail = id;
  p->n_lru++;
}

int32_t block_pool_refcount(const block_pool *pool, int32_t id) {
  if (id < 0 || id >= pool->n_blocks) return -1;
  return pool->refcount[id];
}

static void stack_push(block_pool *p, int32_t id) { p->stack[p->n_free++] = id; }

ph_status block_pool_alloc_n(block_pool *pool, int32_t n, int32_t *out_ids, diag *d) {
  RETURN_ERROR_IF(n < 0 || (n > 0 && !out_ids), d, PH_ERR_INVALID_ARGUMENT,
                  "block_pool_alloc_n: bad count %d or NULL out_ids", (int)n);
  RETURN_ERROR_IF(n > pool->n_free + pool->n_lru, d, PH_ERR_LIMIT,
                  "block_pool_alloc_n: %d blocks requested, %d free of %d", (int)n,
                  (int)(pool->n_free + pool->n_lru), (int)(pool->n_blocks - 1));
  for (int32_t i = 0; i < n; i++) {
    int32_t id;
    if (pool->n_free > 0) {
      id = pool->stack[--pool->n_free];
    } else { /* evict the least recently released cached id */
      id = pool->lru_head;
      lru_unlink(pool, id);
      pool->cached[id] = 0;
      if (pool->evict) pool->evict(pool->evict_ctx, id);
    }
    pool->refcount[id] = 1;
    out_ids[i] = id;
  }
  return PH_OK;
}

ph_status block_pool_incref_n(block_pool *pool, int32_t n, const int32_t *ids, diag *d) {
  RETURN_ERROR_IF(n < 0 || (n > 0 && !ids), d, PH_ERR_INVALID_ARGUMENT,
                  "block_pool_incref_n: bad count %d or NULL ids", (int)n);
  for (int32_t i = 0; i < n; i++) {
    int32_t id = ids[i];
    RETURN_ERROR_IF(id <= 0 || id >= pool->n_blocks, d, PH_ERR_INVALID_ARGUMENT,
                    "block_pool_incref_n: block id %d is not in [1, %d)", (int)id,
                    (int)pool->n_blocks);
    RETURN_ERROR_IF(pool->refcount[id] <= 0 && !pool->cached[id], d, PH_ERR_INVALID_ARGUMENT,
                    "block_pool_incref_n: block id %d is free (refcount 0)", (int)id);
    RETURN_ERROR_IF(pool->refcount[id] == INT32_MAX, d, PH_ERR_LIMIT,
                    "block_pool_incref_n: block id %d refcount overflow", (int)id);
  }
  for (int32_t i = 0; i < n; i++) {
    if (pool->refcount[ids[i]] == 0) lru_unlink(pool, ids[i]); /* a cached id taken back */
    pool->refcount[ids[i]]++;
  }
  return PH_OK;
}

ph_status block_pool_decref_n(block_pool *pool, int32_t n, const int32_t *ids, diag *d) {
  RETURN_ERROR_IF(n < 0 || (n > 0 && !ids), d, PH_ERR_INVALID_ARGUMENT,
                  "block_pool_decref_n: bad count %d or NULL ids", (int)n);
  /* Tentative pass: decrement, rolling back on the first bad id, so failure changes nothing. */
  for (int32_t i = 0; i < n; i++) {
    int32_t id = ids[i];
    const char *why = NULL;
    if (id == BLOCK_POOL_NULL_ID)
      why = "is the null block";
    else if (id < 0 || id >= pool->n_blocks)
      why = "is out of range";
    else if (pool->refcount[id] <= 0)
      why = "is already free (double free)";
    if (why) {
      for (int32_t j = 0; j < i; j++) pool->refcount[ids[j]]++;
      return diag_set(d, PH_ERR_INVALID_ARGUMENT, "block_pool_decref_n: block id %d %s (of %d)",
                      (int)id, why, (int)pool->n_blocks);
    }
    pool->refcount[id]--;
  }
  /* Commit: each id that reached 0 is pushed once, last occurrence first, so the next
   * allocation hands a released table's ids out again in their order (-1 marks "pushed" during
   * this loop, then goes back to 0). A cached id goes to the LRU's tail instead, also last
   * first: a released chain's deepest page is evicted before its parents. */
  for (int32_t i = n - 1; i >= 0; i--) {
    if (pool->refcount[ids[i]] != 0) continue;
    if (pool->cached[ids[i]])
      lru_push_back(pool, ids[i]);
    else
      stack_push(pool, ids[i]);
    pool->refcount[ids[i]] = -1;
  }
  for (int32_t i = 0; i < n; i++)
    if (pool->refcount[ids[i]] < 0) pool->refcount[ids[i]] = 0;
  return PH_OK;
}

ph_status block_pool_set_cached(block_pool *pool, int32_t id, int cached, diag *d) {
  RETURN_ERROR_IF(id <= 0 || id >= pool->n_blocks, d, PH_ERR_INVALID_ARGUMENT,
                  "block_pool_set_cached: block id %d is not in [1, %d)", (int)id,
                  (int)pool->n_blocks);
  if (!!cached == pool->cached[id]) return PH_OK;
  if (cached) {
    RETURN_ERROR_IF(pool->refcount[id] <= 0, d, PH_ERR_INVALID_ARGUMENT,
                    "block_pool_set_cached: block id %d is free: only a held block can be cached",
                    (int)id);
    pool->cached[id] = 1;
    return PH_OK;
  }
  pool->cached[id] = 0;
  if (pool->refcount[id] == 0) { /* no longer findable: an ordinary free id */
    lru_unlink(pool, id);
    stack_push(pool, id);
  }
  return PH_OK;
}

ph_status block_pool_check(const block_pool *pool, diag *d) {
  int32_t n_lru = 0, n_zero = 0;
  for (int32_t id = pool->lru_head, prev = -1; id >= 0; prev = id, id = pool->lru_next[id]) {
    RETURN_ERROR_IF(id <= 0 || id >= pool->n_blocks || n_lru >= pool->n_blocks, d, PH_ERR_INTERNAL,
                    "block_pool: the LRU list is broken at id %d", (int)id);
    RETURN_ERROR_IF(pool->lru_prev[id] != prev, d, PH_ERR_INTERNAL,
                    "block_pool: LRU id %d links back to %d, not %d", (int)id,
                    (int)pool->lru_prev[id], (int)prev);
    RETURN_ERROR_IF(pool->refcount[id] != 0 || !pool->cached[id], d, PH_ERR_INTERNAL,
                    "block_pool: LRU id %d has refcount %d, cached %d (expected 0 and 1)", (int)id,
                    (int)pool->refcount[id], (int)pool->cached[id]);
    n_lru++;
  }
  RETURN_ERROR_IF(n_lru != pool->n_lru, d, PH_ERR_INTERNAL,
                  "block_pool: %d ids on the LRU list, count says %d", (int)n_lru,
                  (int)pool->n_lru);
  for (int32_t i = 0; i < pool->n_free; i++) {
    const int32_t id = pool->stack[i];
    RETURN_ERROR_IF(id <= 0 || id >= pool->n_blocks || pool->refcount[id] != 0 || pool->cached[id],
                    d, PH_ERR_INTERNAL,
                    "block_pool: free id %d has refcount %d, cached %d (expected 0 and 0)", (int)id,
                    id > 0 && id < pool->n_blocks ? (int)pool->refcount[id] : -1,
                    id > 0 && id < pool->n_blocks ? (int)pool->cached[id] : -1);
  }
  for (int32_t id = 1; id < pool->n_blocks; id++) {
    RETURN_ERROR_IF(pool->refcount[id] < 0, d, PH_ERR_INTERNAL, "block_pool: id %d has refcount %d",
                    (int)id, (int)pool->refcount[id]);
    n_zero += pool->refcount[id] == 0;
  }
  RETURN_ERROR_IF(n_zero != pool->n_free + pool->n_lru, d, PH_ERR_INTERNAL,
                  "block_pool: %d ids at refcount 0, but %d free and %d evictable", (int)n_zero,
                  (int)pool->n_free, (int)pool->n_lru);
  return PH_OK;
}

/* ---- block tables ------------------------------------------------------------------------- */

void block_table_init(block_table *bt) { memset(bt, 0, sizeof *bt); }

int32_t block_table_blocks_for(int64_t n_tokens, int32_t block_size) {
  if (n_tokens < 0 || block_size <= 0) return -1;
  /* n_tokens / K rounded up without forming n_tokens + K - 1 (overflow near INT64_MAX) */
  int64_t n = n_tokens / block_size + (n_tokens % block_size != 0);
  return n > INT32_MAX ? -1 : (int32_t)n;
}

static ph_status table_grow(block_table *bt, int32_t need, diag *d) {
  if (need <= bt->capacity) return PH_OK;
  int64_t cap = bt->capacity ? (int64_t)bt->capacity * 2 : 8;
  if (cap < need) cap = need;
  if (cap > INT32_MAX) cap = INT32_MAX;
  int32_t *ids = realloc(bt->ids, (size_t)cap * sizeof *ids);
  RETURN_ERROR_IF(!ids, d, PH_ERR_NO_MEMORY, "block_table: growing to %lld ids", (long long)cap);
  bt->ids = ids;
  bt->capacity = (int32_t)cap;
  return PH_OK;
}

ph_status block_table_reserve(block_table *bt, block_pool *pool, int64_t n_tokens_total,
                              int32_t block_size, diag *d) {
  int32_t need = block_table_blocks_for(n_tokens_total, block_size);
  RETURN_ERROR_IF(need < 0, d, PH_ERR_INVALID_ARGUMENT,
                  "block_table_reserve: %lld tokens with block_size %d", (long long)n_tokens_total,
                  (int)block_size);
  if (need <= bt->n_blocks) return PH_OK;
  int32_t missing = need - bt->n_blocks;
  RETURN_ERROR_IF(missing > block_pool_free_count(pool), d, PH_ERR_LIMIT,
                  "block_table_reserve: %lld tokens need %d more blocks, %d free",
                  (long long)n_tokens_total, (int)missing, (int)block_pool_free_count(pool));
  FORWARD_IF_ERROR(table_grow(bt, need, d));
  FORWARD_IF_ERROR(block_pool_alloc_n(pool, missing, bt->ids + bt->n_blocks, d));
  bt->n_blocks = need;
  return PH_OK;
}

ph_status block_table_share(block_table *bt, block_pool *pool, int32_t n, const int32_t *ids,
                            diag *d) {
  RETURN_ERROR_IF(n < 0 || n > INT32_MAX - bt->n_blocks, d, PH_ERR_INVALID_ARGUMENT,
                  "block_table_share: bad count %d", (int)n);
  FORWARD_IF_ERROR(table_grow(bt, bt->n_blocks + n, d));
  FORWARD_IF_ERROR(block_pool_incref_n(pool, n, ids, d));
  memcpy(bt->ids + bt->n_blocks, ids, (size_t)n * sizeof *ids);
  bt->n_blocks += n;
  return PH_OK;
}

ph_status block_table_release(block_table *bt, block_pool *pool, diag *d) {
  FORWARD_IF_ERROR(block_pool_decref_n(pool, bt->n_blocks, bt->ids, d));
  free(bt->ids);
  block_table_init(bt);
  return PH_OK;
}

int32_t block_tables_max_blocks(const block_table *const *tables, int32_t batch) {
  int32_t m = 0;
  for (int32_t b = 0; b < batch; b++)
    if (tables[b]->n_blocks > m) m = tables[b]->n_blocks;
  return m;
}

ph_status block_tables_pack(const block_table *const *tables, int32_t batch, int32_t max_blocks,
                            int32_t *out, diag *d) {
  RETURN_ERROR_IF(batch < 0 || max_blocks < 0, d, PH_ERR_INVALID_ARGUMENT,
                  "block_tables_pack: batch %d, max_blocks %d", (int)batch, (int)max_blocks);
  for (int32_t b = 0; b < batch; b++)
    RETURN_ERROR_IF(tables[b]->n_blocks > max_blocks, d, PH_ERR_LIMIT,
                    "block_tables_pack: row %d holds %d blocks, max_blocks is %d", (int)b,
                    (int)tables[b]->n_blocks, (int)max_blocks);
  for (int32_t b = 0; b < batch; b++) {
    int32_t *row = out + (size_t)b * (size_t)max_blocks;
    int32_t n = tables[b]->n_blocks;
    if (n) memcpy(row, tables[b]->ids, (size_t)n * sizeof *row);
    for (int32_t j = n; j < max_blocks; j++) row[j] = BLOCK_POOL_NULL_ID;
  }
  return PH_OK;
}
