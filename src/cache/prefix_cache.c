/* prefix_cache — the page index (open addressing over page ids, linear probing, backward-shift
 * deletion), the page records and the snapshot pool. See prefix_cache.h for the contract. */
#include "cache/prefix_cache.h"

#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"

#define ROOT_PARENT (-1)

struct prefix_cache {
  block_pool *pool;
  state_pool *states; /* NULL without fixed state */
  int32_t n_blocks, block_size;
  int64_t boundary;

  /* page records, [n_blocks] */
  uint8_t *published;
  uint64_t *hash;
  int32_t *parent;
  uint32_t *parent_gen;
  uint32_t *gen;
  int32_t *snap;   /* the snapshot anchored at the page's end, -1 none */
  int64_t *tokens; /* [n_blocks, block_size] */
  int32_t n_published;

  /* the index: page ids, 0 = empty */
  int32_t *table;
  uint64_t mask;

  int32_t *scratch; /* [n_blocks] ids found by a lookup */

  /* snapshots */
  int32_t snap_max;
  int64_t snap_bytes; /* one snapshot */
  uint8_t *snap_mem;  /* [snap_max, snap_bytes], committed as used */
  size_t snap_mem_bytes;
  int32_t *snap_page;  /* [snap_max] anchor page, -1 free */
  uint64_t *snap_used; /* [snap_max] last use (LRU tick) */
  uint64_t tick;
  int32_t n_snaps;

  int64_t page_bytes;           /* one page's KV over every attention layer */
  ph_prefix_cache_stats counts; /* the counters (the gauges are filled when read) */
};

/* ---- hashing ------------------------------------------------------------------------------ */

static uint64_t mix(uint64_t h, uint64_t v) {
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 31;
  h *= 0xbf58476d1ce4e5b9ull;
  return h ^ (h >> 29);
}

static uint64_t key_hash(const prefix_cache *pc, int32_t parent, uint32_t pgen,
                         const int64_t *tok) {
  uint64_t h = mix((uint64_t)pc->block_size, (uint64_t)(uint32_t)parent);
  h = mix(h, pgen);
  for (int32_t i = 0; i < pc->block_size; i++) h = mix(h, (uint64_t)tok[i]);
  return h;
}

static const int64_t *page_tokens(const prefix_cache *pc, int32_t id) {
  return pc->tokens + (size_t)id * (size_t)pc->block_size;
}

static int32_t index_find(const prefix_cache *pc, int32_t parent, uint32_t pgen,
                          const int64_t *tok) {
  const uint64_t h = key_hash(pc, parent, pgen, tok);
  for (uint64_t i = h & pc->mask;; i = (i + 1) & pc->mask) {
    const int32_t id = pc->table[i];
    if (id == 0) return -1;
    if (pc->hash[id] == h && pc->parent[id] == parent && pc->parent_gen[id] == pgen &&
        memcmp(page_tokens(pc, id), tok, (size_t)pc->block_size * sizeof *tok) == 0)
      return id;
  }
}

static void index_insert(prefix_cache *pc, int32_t id) {
  uint64_t i = pc->hash[id] & pc->mask;
  while (pc->table[i] != 0) i = (i + 1) & pc->mask;
  pc->table[i] = id;
}

static void index_remove(prefix_cache *pc, int32_t id) {
  uint64_t i = pc->hash[id] & pc->mask;
  while (pc->table[i] != id) i = (i + 1) & pc->mask;
  /* backward shift: move later entries of the run into the hole when their home allows */
  for (uint64_t j = (i + 1) & pc->mask;; j = (j + 1) & pc->mask) {
    const int32_t e = pc->table[j];
    if (e == 0) break;
    const uint64_t home = pc->hash[e] & pc->mask;
    /* e may fill the hole at i when its home is not in (i, j] (cyclically) */
    const int in_range = i <= j ? (home > i && home <= j) : (home > i || home <= j);
    if (!in_range) {
      pc->table[i] = e;
      i = j;
    }
  }
  pc->table[i] = 0;
}

/* ---- snapshots ---------------------------------------------------------------------------- */

static uint8_t *snap_ptr(const prefix_cache *pc, int32_t s) {
  return pc->snap_mem + (size_t)s * (size_t)pc->snap_bytes;
}

static void snap_drop(prefix_cache *pc, int32_t s, int evicted) {
  const int32_t page = pc->snap_page[s];
  if (page < 0) return;
  pc->snap[page] = -1;
  pc->snap_page[s] = -1;
  pc->n_snaps--;
  if (evicted) pc->counts.snapshots_evicted++;
}

/* A free snapshot, evicting the least recently used one when the budget is full; -1 when the
 * budget holds none. */
static int32_t snap_take(prefix_cache *pc) {
  int32_t lru = -1;
  for (int32_t s = 0; s < pc->snap_max; s++) {
    if (pc->snap_page[s] < 0) return s;
    if (lru < 0 || pc->snap_used[s] < pc->snap_used[lru]) lru = s;
  }
  if (lru >= 0) snap_drop(pc, lru, 1);
  return lru;
}

/* ---- pages -------------------------------------------------------------------------------- */

/* Takes id out of the index (it was published): its snapshot goes, its generation moves on so
 * children keyed under it are unreachable. The pool's cached mark is the caller's business. */
static void unpublish(prefix_cache *pc, int32_t id) {
  index_remove(pc, id);
  if (pc->snap[id] >= 0) snap_drop(pc, pc->snap[id], 1);
  pc->published[id] = 0;
  pc->gen[id]++;
  pc->n_published--;
}

static void on_evict(void *ctx, int32_t id) {
  prefix_cache *pc = ctx;
  if (!pc->published[id]) return;
  unpublish(pc, id);
  pc->counts.pages_evicted++;
}

/* ---- create / free ------------------------------------------------------------------------ */

void prefix_cache_free(prefix_cache *pc) {
  if (!pc) return;
  if (pc->pool) {
    block_pool_set_evict_fn(pc->pool, NULL, NULL);
    for (int32_t id = 1; id < pc->n_blocks; id++)
      if (pc->published && pc->published[id]) (void)block_pool_set_cached(pc->pool, id, 0, NULL);
  }
  free(pc->published);
  free(pc->hash);
  free(pc->parent);
  free(pc->parent_gen);
  free(pc->gen);
  free(pc->snap);
  free(pc->tokens);
  free(pc->table);
  free(pc->scratch);
  pages_free(pc->snap_mem, pc->snap_mem_bytes);
  free(pc->snap_page);
  free(pc->snap_used);
  free(pc);
}

ph_status prefix_cache_create(hybrid_cache *c, const prefix_cache_params *p, prefix_cache **out,
                              diag *d) {
  RETURN_ERROR_IF(!c || !p || !out, d, PH_ERR_INVALID_ARGUMENT, "prefix_cache_create: NULL %s",
                  !c   ? "cache"
                  : !p ? "params"
                       : "out");
  *out = NULL;
  const int32_t bs = hybrid_cache_block_size(c);
  RETURN_ERROR_IF(p->boundary < 1 || p->boundary % bs != 0, d, PH_ERR_INVALID_ARGUMENT,
                  "prefix_cache_create: boundary %lld must be a positive multiple of the page "
                  "size %d",
                  (long long)p->boundary, (int)bs);
  RETURN_ERROR_IF(p->snapshot_bytes < 0, d, PH_ERR_INVALID_ARGUMENT,
                  "prefix_cache_create: snapshot budget %lld bytes is negative",
                  (long long)p->snapshot_bytes);
  prefix_cache *pc = calloc(1, sizeof *pc);
  RETURN_ERROR_IF(!pc, d, PH_ERR_NO_MEMORY, "prefix_cache_create: out of memory");
  pc->n_blocks = hybrid_cache_n_blocks(c);
  pc->block_size = bs;
  pc->boundary = p->boundary;
  const size_t n = (size_t)pc->n_blocks;
  uint64_t cap = 16;
  while (cap < 2 * (uint64_t)n) cap *= 2;
  pc->mask = cap - 1;
  pc->published = calloc(n, 1);
  pc->hash = calloc(n, sizeof *pc->hash);
  pc->parent = calloc(n, sizeof *pc->parent);
  pc->parent_gen = calloc(n, sizeof *pc->parent_gen);
  pc->gen = calloc(n, sizeof *pc->gen);
  pc->snap = malloc(n * sizeof *pc->snap);
  pc->tokens = calloc(n * (size_t)bs, sizeof *pc->tokens);
  pc->table = calloc(cap, sizeof *pc->table);
  pc->scratch = malloc(n * sizeof *pc->scratch);
  int ok = pc->published && pc->hash && pc->parent && pc->parent_gen && pc->gen && pc->snap &&
           pc->tokens && pc->table && pc->scratch;
  if (ok) {
    for (size_t i = 0; i < n; i++) pc->snap[i] = -1;
    if (hybrid_cache_has_state(c)) {
      pc->states = hybrid_cache_states(c);
      pc->snap_bytes = state_pool_slot_bytes(pc->states);
      int64_t k = pc->snap_bytes > 0 ? p->snapshot_bytes / pc->snap_bytes : 0;
      if (k > INT32_MAX / 2) k = INT32_MAX / 2;
      pc->snap_max = (int32_t)k;
    }
    if (pc->snap_max > 0) {
      pc->snap_mem_bytes = (size_t)pc->snap_max * (size_t)pc->snap_bytes;
      pc->snap_mem = pages_alloc_zeroed(pc->snap_mem_bytes);
      pc->snap_page = malloc((size_t)pc->snap_max * sizeof *pc->snap_page);
      pc->snap_used = calloc((size_t)pc->snap_max, sizeof *pc->snap_used);
      ok = pc->snap_mem && pc->snap_page && pc->snap_used;
      for (int32_t s = 0; ok && s < pc->snap_max; s++) pc->snap_page[s] = -1;
    }
  }
  if (!ok) {
    prefix_cache_free(pc);
    return diag_set(d, PH_ERR_NO_MEMORY, "prefix_cache_create: %d pages, %lld snapshot bytes",
                    (int)n, (long long)p->snapshot_bytes);
  }
  pc->pool = hybrid_cache_blocks(c);
  pc->page_bytes = kv_buffers_bytes_per_block(hybrid_cache_kv(c));
  pc->counts.snapshot_budget_bytes = p->snapshot_bytes;
  block_pool_set_evict_fn(pc->pool, on_evict, pc);
  *out = pc;
  return PH_OK;
}

/* ---- lookup ------------------------------------------------------------------------------- */

ph_status prefix_cache_acquire(prefix_cache *pc, const int64_t *tokens, int64_t n_prompt,
                               block_table *bt, prefix_match *m, diag *d) {
  memset(m, 0, sizeof *m);
  m->snapshot = -1;
  RETURN_ERROR_IF(bt->n_blocks != 0, d, PH_ERR_INVALID_ARGUMENT,
                  "prefix_cache_acquire: the table already holds %d pages", (int)bt->n_blocks);
  const int64_t bs = pc->block_size;
  const int stateless = pc->states == NULL;
  int32_t parent = ROOT_PARENT, j = 0;
  uint32_t pgen = 0;
  /* page j covers [j*bs, (j+1)*bs); a hit must end below n_prompt */
  for (; (int64_t)(j + 1) * bs < n_prompt && j < pc->n_blocks - 1; j++) {
    const int32_t id = index_find(pc, parent, pgen, tokens + (size_t)j * (size_t)bs);
    if (id < 0) break;
    pc->scratch[j] = id;
    const int64_t end = (int64_t)(j + 1) * bs;
    if (end % pc->boundary == 0 && (stateless || pc->snap[id] >= 0)) {
      m->n_tokens = end;
      m->n_pages = j + 1;
      m->snapshot = stateless ? -1 : pc->snap[id];
    }
    parent = id;
    pgen = pc->gen[id];
  }
  m->n_matched = (int64_t)j * bs;
  m->branch = m->n_matched / pc->boundary * pc->boundary; /* < n_prompt: n_matched is */
  if (m->n_pages > 0) {
    ph_status st = block_table_share(bt, pc->pool, m->n_pages, pc->scratch, d);
    if (st != PH_OK) {
      memset(m, 0, sizeof *m);
      m->snapshot = -1;
      return st;
    }
    if (m->snapshot >= 0) pc->snap_used[m->snapshot] = ++pc->tick;
  }
  return PH_OK;
}

ph_status prefix_cache_restore(prefix_cache *pc, const prefix_match *m, int32_t slot, diag *d) {
  if (m->snapshot < 0 || !pc->states) return PH_OK;
  RETURN_ERROR_IF(m->snapshot >= pc->snap_max || pc->snap_page[m->snapshot] < 0, d, PH_ERR_INTERNAL,
                  "prefix_cache_restore: snapshot %d is not held", (int)m->snapshot);
  return state_pool_load_slot(pc->states, slot, snap_ptr(pc, m->snapshot), d);
}

void prefix_cache_count_lookup(prefix_cache *pc, int64_t n_prompt, int64_t n_hit) {
  pc->counts.lookups++;
  pc->counts.hits += n_hit > 0;
  pc->counts.tokens_looked_up += n_prompt;
  pc->counts.tokens_saved += n_hit;
}

/* ---- publish ------------------------------------------------------------------------------ */

ph_status prefix_cache_publish(prefix_cache *pc, const int64_t *tokens, int64_t n_computed,
                               const block_table *bt, int32_t slot, int take_snapshot, diag *d) {
  const int64_t bs = pc->block_size;
  int64_t n_pages = n_computed / bs;
  RETURN_ERROR_IF(n_pages > bt->n_blocks, d, PH_ERR_INVALID_ARGUMENT,
                  "prefix_cache_publish: %lld tokens need %lld pages, the table holds %d",
                  (long long)n_computed, (long long)n_pages, (int)bt->n_blocks);
  RETURN_ERROR_IF(take_snapshot && (n_computed % pc->boundary != 0 || n_computed == 0), d,
                  PH_ERR_INVALID_ARGUMENT,
                  "prefix_cache_publish: a snapshot at %lld tokens is not at a boundary (%lld)",
                  (long long)n_computed, (long long)pc->boundary);
  int32_t parent = ROOT_PARENT;
  uint32_t pgen = 0;
  for (int64_t j = 0; j < n_pages; j++) {
    const int64_t *tok = tokens + (size_t)j * (size_t)bs;
    int32_t id = index_find(pc, parent, pgen, tok);
    if (id < 0) {
      /* our own page becomes canonical (re-keyed when it was published under a parent that has
       * since left the index) */
      id = bt->ids[j];
      if (pc->published[id]) unpublish(pc, id);
      pc->hash[id] = key_hash(pc, parent, pgen, tok);
      pc->parent[id] = parent;
      pc->parent_gen[id] = pgen;
      memcpy(pc->tokens + (size_t)id * (size_t)bs, tok, (size_t)bs * sizeof *tok);
      pc->published[id] = 1;
      pc->n_published++;
      index_insert(pc, id);
      FORWARD_IF_ERROR(block_pool_set_cached(pc->pool, id, 1, d));
    }
    parent = id;
    pgen = pc->gen[id];
  }
  if (!take_snapshot || !pc->states || n_pages == 0) return PH_OK;
  /* parent is the canonical page ending at n_computed */
  if (pc->snap[parent] >= 0) {
    pc->snap_used[pc->snap[parent]] = ++pc->tick;
    return PH_OK;
  }
  const int32_t s = snap_take(pc);
  if (s < 0) return PH_OK; /* a budget of no snapshots */
  FORWARD_IF_ERROR(state_pool_save_slot(pc->states, slot, snap_ptr(pc, s), d));
  pc->snap_page[s] = parent;
  pc->snap_used[s] = ++pc->tick;
  pc->snap[parent] = s;
  pc->n_snaps++;
  pc->counts.snapshots_taken++;
  return PH_OK;
}

void prefix_cache_clear(prefix_cache *pc) {
  for (int32_t s = 0; s < pc->snap_max; s++) snap_drop(pc, s, 0);
  for (int32_t id = block_pool_lru_first(pc->pool); id > 0; id = block_pool_lru_first(pc->pool)) {
    unpublish(pc, id);
    (void)block_pool_set_cached(pc->pool, id, 0, NULL); /* to the free stack */
  }
}

/* ---- inspection --------------------------------------------------------------------------- */

void prefix_cache_get_stats(const prefix_cache *pc, ph_prefix_cache_stats *out) {
  *out = pc->counts;
  out->enabled = 1;
  out->misses = out->lookups - out->hits;
  out->pages_cached = pc->n_published;
  out->pages_evictable = block_pool_evictable_count(pc->pool);
  out->page_bytes_held = (int64_t)out->pages_evictable * pc->page_bytes;
  out->snapshots = pc->n_snaps;
  out->snapshots_max = pc->snap_max;
  out->snapshot_bytes = (int64_t)pc->n_snaps * pc->snap_bytes;
}

int64_t prefix_cache_boundary(const prefix_cache *pc) { return pc->boundary; }

ph_status prefix_cache_check(const prefix_cache *pc, diag *d) {
  FORWARD_IF_ERROR(block_pool_check(pc->pool, d));
  int32_t n_pub = 0, n_in_table = 0, n_snaps = 0;
  for (uint64_t i = 0; i <= pc->mask; i++) n_in_table += pc->table[i] != 0;
  for (int32_t id = 1; id < pc->n_blocks; id++) {
    const int pub = pc->published[id];
    n_pub += pub;
    RETURN_ERROR_IF(pub != block_pool_is_cached(pc->pool, id), d, PH_ERR_INTERNAL,
                    "prefix_cache: page %d is %spublished but the pool has it %scached", (int)id,
                    pub ? "" : "not ", block_pool_is_cached(pc->pool, id) ? "" : "not ");
    RETURN_ERROR_IF(!pub && pc->snap[id] >= 0, d, PH_ERR_INTERNAL,
                    "prefix_cache: unpublished page %d anchors snapshot %d", (int)id,
                    (int)pc->snap[id]);
    if (!pub) continue;
    RETURN_ERROR_IF(index_find(pc, pc->parent[id], pc->parent_gen[id], page_tokens(pc, id)) != id,
                    d, PH_ERR_INTERNAL, "prefix_cache: page %d is not found under its own key",
                    (int)id);
    RETURN_ERROR_IF(pc->hash[id] !=
                        key_hash(pc, pc->parent[id], pc->parent_gen[id], page_tokens(pc, id)),
                    d, PH_ERR_INTERNAL, "prefix_cache: page %d's hash is stale", (int)id);
    if (pc->snap[id] >= 0)
      RETURN_ERROR_IF(pc->snap[id] >= pc->snap_max || pc->snap_page[pc->snap[id]] != id, d,
                      PH_ERR_INTERNAL, "prefix_cache: page %d's snapshot %d is anchored elsewhere",
                      (int)id, (int)pc->snap[id]);
  }
  RETURN_ERROR_IF(n_pub != pc->n_published || n_in_table != n_pub, d, PH_ERR_INTERNAL,
                  "prefix_cache: %d pages published, count says %d, index holds %d", (int)n_pub,
                  (int)pc->n_published, (int)n_in_table);
  for (int32_t s = 0; s < pc->snap_max; s++) {
    const int32_t page = pc->snap_page[s];
    if (page < 0) continue;
    n_snaps++;
    RETURN_ERROR_IF(page >= pc->n_blocks || !pc->published[page] || pc->snap[page] != s, d,
                    PH_ERR_INTERNAL, "prefix_cache: snapshot %d's anchor page %d does not hold it",
                    (int)s, (int)page);
  }
  RETURN_ERROR_IF(n_snaps != pc->n_snaps, d, PH_ERR_INTERNAL,
                  "prefix_cache: %d snapshots held, count says %d", (int)n_snaps, (int)pc->n_snaps);
  return PH_OK;
}
