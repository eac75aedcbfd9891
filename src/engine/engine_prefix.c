/* engine_prefix — the engine's side of prefix caching (src/cache/prefix_cache.h,
 * docs/prefix-cache.md): the scheduler's admission hooks, what a step publishes, the figures,
 * the invariant check.
 *
 * Which positions are cacheable is decided here, from the chunk rule (scheduler.h): a request's
 * prompt runs in chunks ending at multiples of prefill_chunk, so the KV rows and state after a
 * full chunk ending at E are those of computing tokens [0, E) from nothing. Pages are published
 * after every such chunk; a snapshot of the state is taken at the request's deepest boundary
 * below its prompt's end (the next turn of a conversation or a resent prompt resumes there) and
 * at the boundary where its prompt leaves a chain others computed (the branch point of a shared
 * system prompt), never elsewhere: at 20 MB (0.8B) to 150 MB (27B) a snapshot, one per prompt
 * chunk would spend the budget on positions nobody resumes from.
 *
 * A request that needs every prompt position computed never takes a hit: one capturing every
 * position's logits (PH_CAPTURE_POSITIONS), and one drafting with the MTP head (the head catches
 * up on the target's hidden state of every prompt position). Both still publish.
 */
#include <stdlib.h>
#include <string.h>

#include "engine/engine_impl.h"

static int64_t gcd64(int64_t a, int64_t b) {
  while (b) {
    const int64_t t = a % b;
    a = b;
    b = t;
  }
  return a;
}

static int64_t hook_acquire(void *ctx, sched_req *w) {
  engine *e = ctx;
  request *r = REQUEST_OF(w);
  memset(&r->pm, 0, sizeof r->pm);
  r->pm.snapshot = -1;
  r->looked_up = !(r->capture == PH_CAPTURE_POSITIONS || r->sp.speculative.method == PH_DRAFT_MTP);
  if (!r->looked_up) return 0;
  diag local;
  if (prefix_cache_acquire(e->pc, r->tokens, r->n_prompt, &w->blocks, &r->pm, &local) != PH_OK)
    return 0; /* no memory to grow the table: it starts from token 0, as without the cache */
  return r->pm.n_tokens;
}

static ph_status hook_admitted(void *ctx, sched_req *w, diag *d) {
  engine *e = ctx;
  request *r = REQUEST_OF(w);
  FORWARD_IF_ERROR(prefix_cache_restore(e->pc, &r->pm, w->slot, d));
  if (r->looked_up) prefix_cache_count_lookup(e->pc, r->n_prompt, r->pm.n_tokens);
  r->n_cached = r->pm.n_tokens;
  const int64_t B = prefix_cache_boundary(e->pc);
  const int64_t deep = (r->n_prompt - 1) / B * B;
  r->snap_at[0] = deep > r->pm.n_tokens ? deep : 0;
  r->snap_at[1] = r->pm.branch > r->pm.n_tokens && r->pm.branch != deep ? r->pm.branch : 0;
  return PH_OK;
}

ph_status engine_prefix_open(engine *e, diag *d) {
  RETURN_ERROR_IF(e->p.prefix_cache < PH_PREFIX_CACHE_AUTO ||
                      e->p.prefix_cache > PH_PREFIX_CACHE_OFF || e->p.prefix_cache_bytes < 0,
                  d, PH_ERR_INVALID_ARGUMENT,
                  "engine params: prefix_cache %d (expected 0 auto, 1 on or 2 off), "
                  "prefix_cache_bytes %lld (>= 0)",
                  (int)e->p.prefix_cache, (long long)e->p.prefix_cache_bytes);
  hybrid_cache *c = paged_session_cache(e->s);
  e->page_holders = calloc((size_t)hybrid_cache_n_blocks(c), sizeof *e->page_holders);
  RETURN_ERROR_IF(!e->page_holders, d, PH_ERR_NO_MEMORY, "engine: out of memory");
  if (e->p.prefix_cache == PH_PREFIX_CACHE_OFF) {
    e->p.prefix_cache_bytes = 0;
    return PH_OK;
  }
  e->p.prefix_cache = PH_PREFIX_CACHE_ON;
  const int64_t bs = hybrid_cache_block_size(c);
  const int64_t chunk = e->p.prefill_chunk;
  prefix_cache_params pp = {0};
  pp.boundary = chunk / gcd64(chunk, bs) * bs; /* lcm: both a chunk end and a page end */
  if (e->p.prefix_cache_bytes == 0 && hybrid_cache_has_state(c)) {
    /* a quarter of the cache, and at least one snapshot per request that may hold state at
     * once (each running conversation keeps its deepest point); committed only as used */
    const int64_t one = state_pool_slot_bytes(hybrid_cache_states(c));
    const int64_t quarter = hybrid_cache_bytes(c) / 4;
    const int64_t per_request = (int64_t)(e->p.max_requests > 4 ? e->p.max_requests : 4) * one;
    e->p.prefix_cache_bytes = quarter > per_request ? quarter : per_request;
  }
  pp.snapshot_bytes = e->p.prefix_cache_bytes;
  FORWARD_IF_ERROR(prefix_cache_create(c, &pp, &e->pc, d));
  const sched_prefix_hooks h = {e, hook_acquire, hook_admitted};
  sched_set_prefix_hooks(e->sch, &h);
  engine_prefix_publish_stats(e);
  return PH_OK;
}

void engine_prefix_close(engine *e) {
  prefix_cache_free(e->pc);
  e->pc = NULL;
  free(e->page_holders);
  e->page_holders = NULL;
}

ph_status engine_prefix_after_step(engine *e, const sched_batch *b, diag *d) {
  if (!e->pc) return PH_OK;
  for (int32_t k = 0; k < b->n_entries; k++) {
    const sched_entry *en = &b->entries[k];
    const sched_req *sr = en->req;
    request *r = REQUEST_OF(sr);
    /* a prompt chunk that ended at a chunk boundary (a full chunk), of a request whose logits
     * were finite */
    const int64_t end = sr->n_computed;
    if (sr->state != SCHED_RUNNING || en->start >= r->n_prompt || end > r->n_prompt ||
        end % e->p.prefill_chunk != 0 || r->finish_next == PH_FINISH_ERROR)
      continue;
    const int snap = end == r->snap_at[0] || end == r->snap_at[1];
    FORWARD_IF_ERROR(prefix_cache_publish(e->pc, r->tokens, end, &sr->blocks, sr->slot, snap, d));
  }
  return PH_OK;
}

void engine_prefix_publish_stats(engine *e) {
  if (e->pc)
    prefix_cache_get_stats(e->pc, &e->pc_stats);
  else
    memset(&e->pc_stats, 0, sizeof e->pc_stats);
}

void engine_prefix_stats(engine *e, ph_prefix_cache_stats *out) {
  pthread_mutex_lock(&e->mu);
  *out = e->pc_stats;
  pthread_mutex_unlock(&e->mu);
}

ph_status engine_prefix_clear(engine *e, diag *d) {
  (void)d;
  if (!e->pc) return PH_OK;
  prefix_cache_clear(e->pc);
  pthread_mutex_lock(&e->mu);
  engine_prefix_publish_stats(e);
  pthread_mutex_unlock(&e->mu);
  return PH_OK;
}

/* Adds one to counts[id] for each page of bt; PH_ERR_INTERNAL for an id out of range. */
static ph_status count_pages(const block_table *bt, int32_t n_blocks, int32_t *counts, int64_t id,
                             diag *d) {
  for (int32_t j = 0; j < bt->n_blocks; j++) {
    const int32_t p = bt->ids[j];
    RETURN_ERROR_IF(p <= 0 || p >= n_blocks, d, PH_ERR_INTERNAL,
                    "engine: request %lld holds page id %d (of %d)", (long long)id, (int)p,
                    (int)n_blocks);
    counts[p]++;
  }
  return PH_OK;
}

ph_status engine_prefix_check(engine *e, diag *d) {
  hybrid_cache *c = paged_session_cache(e->s);
  block_pool *bp = hybrid_cache_blocks(c);
  const int32_t n = block_pool_n_blocks(bp);
  int32_t *counts = e->page_holders;
  memset(counts, 0, (size_t)n * sizeof *counts);
  ph_status st = e->pc ? prefix_cache_check(e->pc, d) : block_pool_check(bp, d);
  for (const sched_req *r = sched_running_first(e->sch); st == PH_OK && r; r = r->next)
    st = count_pages(&r->blocks, n, counts, r->id, d);
  for (const sched_req *r = sched_waiting_first(e->sch); st == PH_OK && r; r = r->next)
    if (r->blocks.n_blocks != 0 || r->slot >= 0)
      st = diag_set(d, PH_ERR_INTERNAL, "engine: waiting request %lld holds %d pages, slot %d",
                    (long long)r->id, (int)r->blocks.n_blocks, (int)r->slot);
  for (int32_t id = 1; st == PH_OK && id < n; id++)
    if (block_pool_refcount(bp, id) != counts[id])
      st = diag_set(d, PH_ERR_INTERNAL,
                    "engine: page %d has refcount %d but %d running requests hold it", (int)id,
                    (int)block_pool_refcount(bp, id), (int)counts[id]);
  return st;
}
