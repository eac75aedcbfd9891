/* hybrid_cache — the block pool, the page buffers and the slot pool behind one owner. See
 * hybrid_cache.h. */
#include "cache/hybrid_cache.h"

#include <stdlib.h>

struct hybrid_cache {
  block_pool *blocks;
  kv_buffers *kv;
  state_pool *states;
  int32_t block_size;
  int stateless;       /* no linear layers: sequences hold no slot, the state pool has none */
  int stateless_bound; /* stateless: a step is bound (release and compaction are refused) */
};

ph_status hybrid_cache_create(const hybrid_cache_params *p, hybrid_cache **out, diag *d) {
  RETURN_ERROR_IF(!out, d, PH_ERR_INVALID_ARGUMENT, "hybrid_cache_create: out is NULL");
  *out = NULL;
  RETURN_ERROR_IF(!p, d, PH_ERR_INVALID_ARGUMENT, "hybrid_cache_create: params are NULL");
  kv_geometry kg = p->kv;
  state_geometry sgv = p->state;
  const state_geometry *sg = &sgv;
  /* no fixed state, no slots: a sequence is its block table alone */
  if (sgv.n_linear == 0) sgv.max_slots = 0;
  RETURN_ERROR_IF(p->state_banks < 0 || p->state_banks > 2 ||
                      (p->state_banks > 0 && sgv.banks > 0 && p->state_banks != sgv.banks),
                  d, PH_ERR_INVALID_ARGUMENT,
                  "hybrid_cache_create: state_banks %d (0, 1 or 2; state.banks is %d)",
                  (int)p->state_banks, (int)sgv.banks);
  if (p->state_banks > 0) sgv.banks = p->state_banks;
  if (kg.n_blocks == 0) { /* size the pages from the memory budget left after the slots */
    RETURN_ERROR_IF(p->memory_bytes <= 0, d, PH_ERR_INVALID_ARGUMENT,
                    "hybrid_cache_create: n_blocks 0 needs a memory budget, got %lld bytes",
                    (long long)p->memory_bytes);
    kg.n_blocks = 1; /* a block's and a slot's bytes do not depend on the counts */
    const int64_t per_block = kg.n_full ? kv_geometry_bytes_per_block(&kg) : 1;
    const int64_t per_slot = state_geometry_slot_cost(sg); /* every bank */
    const int64_t all_slots =
        per_slot >= 0 && (sg->max_slots == 0 || per_slot <= INT64_MAX / sg->max_slots)
            ? per_slot * sg->max_slots
            : -1;
    const int64_t left = all_slots < 0 ? -1 : p->memory_bytes - all_slots;
    RETURN_ERROR_IF(per_block <= 0 || all_slots < 0 || left < 2 * per_block, d, PH_ERR_LIMIT,
                    "a memory budget of %lld bytes holds %d state slots of %lld bytes but not "
                    "two KV pages of %lld bytes",
                    (long long)p->memory_bytes, sg->max_slots, (long long)per_slot,
                    (long long)per_block);
    const int64_t n = left / per_block;
    kg.n_blocks = (int32_t)(n > INT32_MAX - 1 ? INT32_MAX - 1 : n);
  }
  hybrid_cache *c = calloc(1, sizeof *c);
  RETURN_ERROR_IF(!c, d, PH_ERR_NO_MEMORY, "hybrid_cache_create: out of memory");
  c->block_size = kg.block_size;
  c->stateless = sgv.n_linear == 0;
  ph_status st = kv_buffers_create(&kg, &c->kv, d);
  if (st == PH_OK) st = block_pool_create(kg.n_blocks, &c->blocks, d);
  if (st == PH_OK) st = state_pool_create(sg, &c->states, d);
  if (st != PH_OK) {
    hybrid_cache_free(c);
    return st;
  }
  *out = c;
  return PH_OK;
}

void hybrid_cache_free(hybrid_cache *c) {
  if (!c) return;
  block_pool_free(c->blocks);
  kv_buffers_free(c->kv);
  state_pool_free(c->states);
  free(c);
}

/* ---- room ---------------------------------------------------------------------------------------
 */

ph_status hybrid_cache_reserve(hybrid_cache *c, block_table *blocks, int32_t *slot,
                               int64_t n_tokens, diag *d) {
  int32_t taken = -1;
  if (*slot < 0 && !c->stateless) FORWARD_IF_ERROR(state_pool_alloc(c->states, &taken, d));
  const ph_status st = block_table_reserve(blocks, c->blocks, n_tokens, c->block_size, d);
  if (st != PH_OK) {
    /* all or nothing: the slot just taken goes back (nothing is bound while room is asked for) */
    if (taken >= 0) (void)state_pool_release(c->states, taken, NULL);
    return st;
  }
  if (taken >= 0) *slot = taken;
  return PH_OK;
}

ph_status hybrid_cache_release(hybrid_cache *c, block_table *blocks, int32_t *slot, diag *d) {
  RETURN_ERROR_IF(c->stateless_bound, d, PH_ERR_INVALID_ARGUMENT,
                  "hybrid_cache_release: pages released while a step is bound");
  if (*slot >= 0) {
    FORWARD_IF_ERROR(state_pool_release(c->states, *slot, d));
    *slot = -1;
  }
  FORWARD_IF_ERROR(block_pool_decref_n(c->blocks, blocks->n_blocks, blocks->ids, d));
  blocks->n_blocks = 0;
  return PH_OK;
}

ph_status hybrid_cache_compact(hybrid_cache *c, state_move *moves, int32_t max_moves,
                               int32_t *n_moves, diag *d) {
  if (c->stateless) { /* nothing to move; refused while bound like the pool's compaction */
    *n_moves = 0;
    RETURN_ERROR_IF(c->stateless_bound, d, PH_ERR_INVALID_ARGUMENT,
                    "hybrid_cache_compact: a step is bound");
    return PH_OK;
  }
  return state_pool_compact(c->states, moves, max_moves, n_moves, d);
}

void hybrid_cache_slot_order(const int32_t *slots, int32_t n, int32_t *order) {
  state_pool_slot_order(slots, n, order);
}

int hybrid_cache_slots_are_slice(const int32_t *slots, int32_t n) {
  return state_pool_slots_are_slice(slots, n);
}

/* ---- binding ------------------------------------------------------------------------------------
 */

ph_status hybrid_cache_bind(hybrid_cache *c, const int32_t *slots, int32_t batch, diag *d) {
  return hybrid_cache_bind_spec(c, slots, NULL, batch, d);
}

ph_status hybrid_cache_bind_spec(hybrid_cache *c, const int32_t *slots, const uint8_t *spec,
                                 int32_t batch, diag *d) {
  if (!c->stateless) return state_pool_bind_spec(c->states, slots, spec, batch, d);
  /* no state to bind: only the one-binding-at-a-time rule */
  RETURN_ERROR_IF(c->stateless_bound, d, PH_ERR_INVALID_ARGUMENT,
                  "hybrid_cache_bind: a step is bound");
  RETURN_ERROR_IF(batch < 1, d, PH_ERR_INVALID_ARGUMENT, "hybrid_cache_bind: batch %d", (int)batch);
  c->stateless_bound = 1;
  return PH_OK;
}

ph_status hybrid_cache_unbind(hybrid_cache *c, diag *d) {
  if (!c->stateless) return state_pool_unbind(c->states, d);
  RETURN_ERROR_IF(!c->stateless_bound, d, PH_ERR_INVALID_ARGUMENT,
                  "hybrid_cache_unbind: nothing is bound");
  c->stateless_bound = 0;
  return PH_OK;
}

int hybrid_cache_bound_is_slice(const hybrid_cache *c) {
  return c->stateless ? c->stateless_bound : state_pool_bound_is_slice(c->states);
}

ph_status hybrid_cache_kv_views(const hybrid_cache *c, int32_t layer, tensor *key, tensor *value,
                                diag *d) {
  FORWARD_IF_ERROR(kv_buffers_key(c->kv, layer, key, d));
  return value ? kv_buffers_value(c->kv, layer, value, d) : PH_OK;
}

ph_status hybrid_cache_state_views(const hybrid_cache *c, int32_t layer, tensor *conv,
                                   tensor *recurrent, diag *d) {
  FORWARD_IF_ERROR(state_pool_bound_conv(c->states, layer, conv, d));
  return state_pool_bound_recurrent(c->states, layer, recurrent, d);
}

ph_status hybrid_cache_state_views_out(const hybrid_cache *c, int32_t layer, tensor *conv,
                                       tensor *recurrent, diag *d) {
  FORWARD_IF_ERROR(state_pool_bound_conv_out(c->states, layer, conv, d));
  return state_pool_bound_recurrent_out(c->states, layer, recurrent, d);
}

ph_status hybrid_cache_state_views_staged(const hybrid_cache *c, int32_t layer, int32_t slot,
                                          tensor *conv, tensor *recurrent, diag *d) {
  FORWARD_IF_ERROR(state_pool_slot_conv_staged(c->states, layer, slot, conv, d));
  return state_pool_slot_recurrent_staged(c->states, layer, slot, recurrent, d);
}

ph_status hybrid_cache_publish(hybrid_cache *c, int32_t slot, diag *d) {
  return state_pool_publish(c->states, slot, d);
}

/* ---- sizes and counts ---------------------------------------------------------------------------
 */

int32_t hybrid_cache_block_size(const hybrid_cache *c) { return c->block_size; }
int32_t hybrid_cache_n_blocks(const hybrid_cache *c) { return block_pool_n_blocks(c->blocks); }
int32_t hybrid_cache_pages_used(const hybrid_cache *c) { return block_pool_used_count(c->blocks); }
int32_t hybrid_cache_max_slots(const hybrid_cache *c) { return state_pool_max_slots(c->states); }
int32_t hybrid_cache_slots_used(const hybrid_cache *c) { return state_pool_used_count(c->states); }
int hybrid_cache_has_state(const hybrid_cache *c) { return !c->stateless; }
int hybrid_cache_key_only(const hybrid_cache *c) { return kv_buffers_geometry(c->kv).key_only; }
int hybrid_cache_slot_in_use(const hybrid_cache *c, int32_t slot) {
  return state_pool_slot_in_use(c->states, slot);
}
int64_t hybrid_cache_bytes(const hybrid_cache *c) {
  return kv_buffers_bytes(c->kv) + state_pool_bytes(c->states);
}
int32_t hybrid_cache_state_banks(const hybrid_cache *c) { return state_pool_banks(c->states); }
int64_t hybrid_cache_slot_cost(const hybrid_cache *c) { return state_pool_slot_cost(c->states); }
uint64_t hybrid_cache_bytes_moved(const hybrid_cache *c) {
  return state_pool_bytes_moved(c->states);
}

block_pool *hybrid_cache_blocks(hybrid_cache *c) { return c->blocks; }
kv_buffers *hybrid_cache_kv(hybrid_cache *c) { return c->kv; }
state_pool *hybrid_cache_states(hybrid_cache *c) { return c->states; }
