/* hybrid_cache — the one owner of a hybrid model's cache memory: the KV block pool, the KV page
 * buffers of the attention layers (K and V, or K alone for LATENT: kv_geometry.key_only) and the
 * fixed-state slot pool of the linear layers, created together from one geometry and handed out
 * together. A model without linear layers (state.n_linear 0: DeepSeek MLA, or every layer full
 * attention) has no fixed state: its sequences hold no slot (reserve leaves *slot at -1, the
 * pool has 0 slots whatever state.max_slots says) and a step binds no state.
 *
 * Who calls what (docs/cache.md): the session creates the cache from the geometry its graph needs
 * and binds what the cache says (hybrid_cache_bind, the page and state views); the scheduler
 * decides who runs and asks the cache for room (hybrid_cache_reserve, _release, _compact), as
 * vLLM v1's scheduler asks its KV cache manager. The cache never sees a request: what one sequence
 * holds is a block table (its pages, in token order; storage is the caller's) and a slot number,
 * both passed by pointer and written only here.
 *
 * Owns: the three parts (block_pool.h, kv_buffers.h, state_pool.h), freed with it.
 * Must never: decide which sequence runs, compute, or know about tokens' values.
 * Not thread-safe: the engine loop (tests aside) is the only caller.
 *
 * Errors: PH_ERR_LIMIT is "no room" (too few free pages or slots; nothing changed);
 * PH_ERR_INVALID_ARGUMENT for bad geometry, bad ids/slots, or a release or compaction while a
 * step is bound (nothing changed); PH_ERR_NO_MEMORY.
 */
#ifndef PH_CACHE_HYBRID_CACHE_H
#define PH_CACHE_HYBRID_CACHE_H

#include <stdint.h>

#include "base/diag.h"
#include "cache/block_pool.h"
#include "cache/kv_buffers.h"
#include "cache/state_pool.h"
#include "tensor/tensor.h"

/* What the cache is sized from. kv.full_layers and state.linear_layers are borrowed for the call.
 * kv.n_blocks: pages including the null page (>= 1), or 0 for as many pages as fit in
 * memory_bytes (> 0) after the state.max_slots slots. */
typedef struct hybrid_cache_params {
  kv_geometry kv;
  state_geometry state;
  int64_t memory_bytes; /* the budget used when kv.n_blocks is 0 */
  int32_t state_banks;  /* 0: state.banks as given; 1 or 2: the state pool's banks (2 = double
                           banked for speculative steps: each slot costs twice its bytes, and
                           the budget counts both). A value that contradicts a nonzero
                           state.banks is PH_ERR_INVALID_ARGUMENT. */
} hybrid_cache_params;

typedef struct hybrid_cache hybrid_cache;

/* Creates the block pool, the page buffers and the slot pool. *out owned by the caller
 * (hybrid_cache_free). PH_ERR_LIMIT when the memory budget cannot hold the slots and two pages
 * (message gives the sizes); otherwise the parts' errors. Nothing is left allocated on failure. */
ph_status hybrid_cache_create(const hybrid_cache_params *p, hybrid_cache **out, diag *d);

/* NULL is a no-op. Views handed out before become dangling. */
void hybrid_cache_free(hybrid_cache *c);

/* ---- room: the scheduler's calls ---------------------------------------------------------------
 */

/* Makes one sequence hold enough for n_tokens tokens: when *slot < 0 and the cache has fixed
 * state (hybrid_cache_has_state) it takes a state slot first (the lowest free one, zeroed: a new
 * sequence starts from empty state) and writes it to *slot;
 * then blocks grows to ceil(n_tokens / block_size) pages (never shrinks). All or nothing:
 * PH_ERR_LIMIT ("no room": no free slot, or too few free pages) leaves *slot and blocks as they
 * were. blocks' storage may grow (PH_ERR_NO_MEMORY) unless its capacity already covers n_tokens. */
ph_status hybrid_cache_reserve(hybrid_cache *c, block_table *blocks, int32_t *slot,
                               int64_t n_tokens, diag *d);

/* Gives back what one sequence holds: its slot (when *slot >= 0; *slot becomes -1) and one
 * reference on each of its pages (blocks->n_blocks becomes 0). The table keeps its storage (a
 * preempted sequence runs again without allocating); the caller frees it. Refused while a step is
 * bound (PH_ERR_INVALID_ARGUMENT, nothing changed); PH_ERR_INVALID_ARGUMENT too when the pools
 * disagree with the arguments (a slot not held, a page freed twice: a caller's bug). */
ph_status hybrid_cache_release(hybrid_cache *c, block_table *blocks, int32_t *slot, diag *d);

/* Moves live slots down to [0, used) (state_pool_compact): each move is written to
 * moves[max_moves] in order and *n_moves gets the count; the caller re-points the sequence of
 * each moved slot (from -> to). Refused while a step is bound. After one sequence is released it
 * is at most one move; max_moves = hybrid_cache_max_slots always suffices. */
ph_status hybrid_cache_compact(hybrid_cache *c, state_move *moves, int32_t max_moves,
                               int32_t *n_moves, diag *d);

/* The step's batch order: sorts order[n] so slots[order[i]] ascends; with live slots compacted a
 * step over every live sequence then binds as one zero-copy slice. */
void hybrid_cache_slot_order(const int32_t *slots, int32_t n, int32_t *order);

/* 1 when slots[n] bind as one zero-copy slice (consecutive and ascending, n >= 1). */
int hybrid_cache_slots_are_slice(const int32_t *slots, int32_t n);

/* ---- binding: the session's calls --------------------------------------------------------------
 */

/* Binds a step's B sequences: batch row b is slot slots[b] (distinct, allocated); zero-copy when
 * the slots are a slice, gathered into staging (bytes counted) otherwise (state_pool_bind).
 * Without fixed state slots is not read (may be NULL): the call only marks the step bound. */
ph_status hybrid_cache_bind(hybrid_cache *c, const int32_t *slots, int32_t batch, diag *d);

/* hybrid_cache_bind with speculative rows: row b is speculative when spec[b] != 0 (spec NULL or
 * all 0 == hybrid_cache_bind). A speculative row's present state goes to its slot's inactive bank,
 * never its published one (state_pool_bind_spec: the zero-copy rules, the errors; a speculative
 * row needs state_banks 2). Without fixed state spec is not read either. */
ph_status hybrid_cache_bind_spec(hybrid_cache *c, const int32_t *slots, const uint8_t *spec,
                                 int32_t batch, diag *d);

/* Ends the binding, scattering staged rows back. */
ph_status hybrid_cache_unbind(hybrid_cache *c, diag *d);

/* 1 when the active binding is a zero-copy slice (always, while bound, without fixed state). */
int hybrid_cache_bound_is_slice(const hybrid_cache *c);

/* Views of model layer `layer`: the page buffers [n_blocks, block_size, Hkv, D] of an
 * attention layer (always valid; value may be NULL, and must be for a key-only cache), or the
 * bound state [B, conv_dim, K-1] / f32 [B, Hv, Dv, Dk] of a linear layer (valid until unbind).
 * Bound as past and present both. PH_ERR_INVALID_ARGUMENT when the layer is not of that kind, a
 * value view is asked of a key-only cache, or nothing is bound. */
ph_status hybrid_cache_kv_views(const hybrid_cache *c, int32_t layer, tensor *key, tensor *value,
                                diag *d);
ph_status hybrid_cache_state_views(const hybrid_cache *c, int32_t layer, tensor *conv,
                                   tensor *recurrent, diag *d);

/* The present (output) state views of a linear layer for the bound step: bind these as
 * present.{layer}.*. The same views as hybrid_cache_state_views unless a row is speculative
 * (state_pool_bound_conv_out / _recurrent_out). */
ph_status hybrid_cache_state_views_out(const hybrid_cache *c, int32_t layer, tensor *conv,
                                       tensor *recurrent, diag *d);

/* One allocated slot's inactive rows of a linear layer (conv [conv_dim, K-1], f32 [Hv, Dv, Dk]):
 * what a speculative step wrote, and where the commit replays the accepted prefix before
 * hybrid_cache_publish. Needs state_banks 2. */
ph_status hybrid_cache_state_views_staged(const hybrid_cache *c, int32_t layer, int32_t slot,
                                          tensor *conv, tensor *recurrent, diag *d);

/* Flips slot's inactive bank to published (state_pool_publish): refused while bound, for a free
 * slot, or with one bank. The engine calls it in the operation that advances the KV length. */
ph_status hybrid_cache_publish(hybrid_cache *c, int32_t slot, diag *d);

/* ---- sizes and counts
 * ----------------------------------------------------------------------------
 */

int32_t hybrid_cache_block_size(const hybrid_cache *c);
int32_t hybrid_cache_n_blocks(const hybrid_cache *c);   /* pages incl. the null page */
int32_t hybrid_cache_pages_used(const hybrid_cache *c); /* pages held */
int32_t hybrid_cache_max_slots(const hybrid_cache *c);  /* state slots (0 without state) */
int32_t hybrid_cache_slots_used(const hybrid_cache *c); /* slots held */
int hybrid_cache_has_state(const hybrid_cache *c);      /* 1: linear layers; sequences hold slots */
int hybrid_cache_key_only(const hybrid_cache *c);       /* 1: key pages only (LATENT) */
int hybrid_cache_slot_in_use(const hybrid_cache *c, int32_t slot);
int64_t hybrid_cache_bytes(const hybrid_cache *c); /* page buffers + slot buffers (all banks) */
int32_t hybrid_cache_state_banks(const hybrid_cache *c);  /* 1 or 2 */
int64_t hybrid_cache_slot_cost(const hybrid_cache *c);    /* memory of one slot, all banks */
uint64_t hybrid_cache_bytes_moved(const hybrid_cache *c); /* state_pool_bytes_moved */

/* The parts, for inspection (tests, `inspect`-style reporting) and for callers that predate the
 * facade. Allocating from them directly bypasses the all-or-nothing reserve. */
block_pool *hybrid_cache_blocks(hybrid_cache *c);
kv_buffers *hybrid_cache_kv(hybrid_cache *c);
state_pool *hybrid_cache_states(hybrid_cache *c);

#endif /* PH_CACHE_HYBRID_CACHE_H */
