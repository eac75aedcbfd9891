/* state_pool — fixed-state slots for the linear-attention (GatedDeltaNet) layers.
 *
 * Owns: per linear layer one conv buffer [max_slots, conv_dim, K-1] in the io dtype and one
 * recurrent buffer f32 [max_slots, Hv, Dv, Dk] (V-major), page-aligned and committed as slots
 * are first used; which slots are in use; and the binding of a step's B sequences to the ABI's
 * [B, ...] state inputs (abi.md §8.1 past_key_values.{i}.conv_state / .recurrent_state, aliased
 * by present.{i}.*).
 *
 * A step must not copy state proportional to its size (docs/cache.md): when the step's slots
 * are consecutive and ascending, the bound views are slices of the slot buffers (0 bytes
 * moved). Otherwise the pool gathers the rows into staging buffers and scatters them back at
 * unbind; every byte copied that way, or by a compaction move, is added to
 * state_pool_bytes_moved(). Slot choice is deterministic (lowest free slot), a slot is zeroed
 * when allocated (a new request starts from empty state), and state_pool_compact() moves slots
 * only when asked (after a request finishes) so live slots stay a prefix [0, used).
 * Must never: compute, see requests (only slot numbers), or touch KV pages.
 * Not thread-safe: the engine loop is the only caller.
 */
#ifndef PH_CACHE_STATE_POOL_H
#define PH_CACHE_STATE_POOL_H

#include <stdint.h>

#include "base/diag.h"
#include "tensor/tensor.h"

#define STATE_POOL_ALIGN 64

/* What the buffers are sized from. linear_layers is borrowed for the call only (copied). */
typedef struct state_geometry {
  int32_t n_linear;             /* linear-attention layers (>= 0) */
  const int32_t *linear_layers; /* [n_linear] model layer indices, strictly ascending, >= 0 */
  int32_t conv_dim;             /* 2*Hk*Dk + Hv*Dv (>= 1) */
  int32_t conv_kernel;          /* K >= 2; the state keeps K-1 columns */
  int32_t n_v_heads;            /* Hv >= 1 */
  int32_t head_v;               /* Dv >= 1 */
  int32_t head_k;               /* Dk >= 1 */
  ph_dtype io_dtype;            /* conv state dtype: f32, f16 or bf16 */
  int32_t max_slots;            /* concurrent sequences >= 1; 0 only when n_linear is 0 (a
                                   model without fixed state holds no slots) */
} state_geometry;

typedef struct state_pool state_pool;

/* One compaction move: the sequence in slot `from` now lives in slot `to`. */
typedef struct state_move {
  int32_t from;
  int32_t to;
} state_move;

/* Bytes of one slot across every linear layer (conv + recurrent); -1 if invalid/overflow. */
int64_t state_geometry_slot_bytes(const state_geometry *g);

/* Maps the slot buffers (zero, committed when first written: base/fmap.h pages_alloc_zeroed). *out
 * owned by the caller (state_pool_free). PH_ERR_INVALID_ARGUMENT (names the field), PH_ERR_LIMIT
 * (overflow), PH_ERR_NO_MEMORY. */
ph_status state_pool_create(const state_geometry *g, state_pool **out, diag *d);

/* NULL is a no-op. */
void state_pool_free(state_pool *p);

/* Total bytes of the slot buffers (staging excluded). */
int64_t state_pool_bytes(const state_pool *p);

/* Bytes of one slot across every linear layer. */
int64_t state_pool_slot_bytes(const state_pool *p);

int32_t state_pool_max_slots(const state_pool *p);
int32_t state_pool_used_count(const state_pool *p);

/* 1 when slot is allocated, 0 when free or out of range. */
int state_pool_slot_in_use(const state_pool *p, int32_t slot);

/* Takes the lowest free slot into *out_slot and zeroes its rows in every layer.
 * PH_ERR_LIMIT when all max_slots are in use. */
ph_status state_pool_alloc(state_pool *p, int32_t *out_slot, diag *d);

/* Returns slot to the pool. A free or out-of-range slot is PH_ERR_INVALID_ARGUMENT naming it.
 * Not allowed while a binding is active. */
ph_status state_pool_release(state_pool *p, int32_t slot, diag *d);

/* Moves live slots down so they occupy [0, used): while a free slot lies below the highest
 * used slot, the highest used slot's rows are copied into the lowest free slot (counted in
 * bytes_moved) and the old slot is freed. Each move is written to moves[max_moves] in order;
 * *n_moves gets the count. The caller re-points its sequences (from -> to). After one request
 * finishes this is at most one move. PH_ERR_LIMIT when more than max_moves are needed (the
 * moves already done are reported). Not allowed while a binding is active. */
ph_status state_pool_compact(state_pool *p, state_move *moves, int32_t max_moves, int32_t *n_moves,
                             diag *d);

/* Sorts order[n] (indices 0..n-1) so slots[order[i]] ascends: the batch order that makes a
 * step over all live, compacted slots one contiguous slice. slots[n], order[n] caller-owned. */
void state_pool_slot_order(const int32_t *slots, int32_t n, int32_t *order);

/* 1 when slots[n] are consecutive and ascending (slots[b] == slots[0] + b), n >= 1. */
int state_pool_slots_are_slice(const int32_t *slots, int32_t n);

/* Binds a step's batch: batch row b is slot slots[b] (slots[batch], distinct, allocated).
 * Slice case: views alias the slot buffers; nothing is copied. Otherwise the rows are gathered
 * into pool-owned staging (bytes counted) and the views point at the staging. One binding at a
 * time: PH_ERR_INVALID_ARGUMENT if one is active. */
ph_status state_pool_bind(state_pool *p, const int32_t *slots, int32_t batch, diag *d);

/* 1 when the active binding is a zero-copy slice; 0 when gathered or unbound. */
int state_pool_bound_is_slice(const state_pool *p);

/* Views (contiguous `tensor`s) of the active binding for model layer `layer`: conv [B, conv_dim,
 * K-1] (io dtype) and recurrent f32 [B, Hv, Dv, Dk]. Data owned by the pool, valid until unbind.
 * The executor binds the same view as past_key_values.{layer}.* and present.{layer}.*.
 * PH_ERR_INVALID_ARGUMENT when unbound or `layer` is not a linear layer. */
ph_status state_pool_bound_conv(const state_pool *p, int32_t layer, tensor *out, diag *d);
ph_status state_pool_bound_recurrent(const state_pool *p, int32_t layer, tensor *out, diag *d);

/* Ends the binding; a gathered binding is scattered back to its slots (bytes counted).
 * PH_ERR_INVALID_ARGUMENT when nothing is bound. */
ph_status state_pool_unbind(state_pool *p, diag *d);

/* Views of one slot's rows (rank drops the slot dim): conv [conv_dim, K-1], recurrent
 * [Hv, Dv, Dk]. For tests and for seeding state; the slot must be allocated. */
ph_status state_pool_slot_conv(const state_pool *p, int32_t layer, int32_t slot, tensor *out,
                               diag *d);
ph_status state_pool_slot_recurrent(const state_pool *p, int32_t layer, int32_t slot, tensor *out,
                                    diag *d);

/* Bytes copied by gathers, scatters and compaction moves since creation or the last reset.
 * Zeroing a slot on allocation is not a move and is not counted. */
uint64_t state_pool_bytes_moved(const state_pool *p);
void state_pool_reset_bytes_moved(state_pool *p);

#endif /* PH_CACHE_STATE_POOL_H */
