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
 *
 * Double banking (state_geometry.banks 2; docs/cache.md "Speculative steps"): every buffer holds
 * two banks [2][max_slots, ...] and every slot a published bank (the state its sequence has
 * committed) and an inactive one. A speculative batch row (state_pool_bind_spec) reads the
 * published rows and writes the inactive ones, so a rejected draft never touches committed state;
 * the engine then replays the accepted prefix into the inactive rows (state_pool_slot_*_staged)
 * and flips them to published (state_pool_publish) in the same operation that advances the KV
 * length. Memory doubles (state_pool_bytes, state_geometry_slot_cost); what one step copies does
 * not.
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
  int32_t banks;                /* 0 or 1: one bank (no speculative binding); 2: double banked
                                   (published + inactive bank per slot, twice the memory) */
} state_geometry;

typedef struct state_pool state_pool;

/* One compaction move: the sequence in slot `from` now lives in slot `to`. */
typedef struct state_move {
  int32_t from;
  int32_t to;
} state_move;

/* Bytes of one slot's rows in ONE bank across every linear layer (conv + recurrent): what a
 * gather, a scatter or a compaction move of the slot copies; -1 if invalid/overflow. */
int64_t state_geometry_slot_bytes(const state_geometry *g);

/* Memory one slot costs: state_geometry_slot_bytes times the banks (2 when double banked). Size
 * memory budgets with this. -1 if invalid/overflow. */
int64_t state_geometry_slot_cost(const state_geometry *g);

/* Maps the slot buffers (zero, committed when first written: base/fmap.h pages_alloc_zeroed). *out
 * owned by the caller (state_pool_free). PH_ERR_INVALID_ARGUMENT (names the field), PH_ERR_LIMIT
 * (overflow), PH_ERR_NO_MEMORY. */
ph_status state_pool_create(const state_geometry *g, state_pool **out, diag *d);

/* NULL is a no-op. */
void state_pool_free(state_pool *p);

/* Total bytes of the slot buffers, every bank (staging excluded). */
int64_t state_pool_bytes(const state_pool *p);

/* Bytes of one slot's rows in one bank across every linear layer (the unit of bytes_moved). */
int64_t state_pool_slot_bytes(const state_pool *p);

/* Memory one slot costs: state_pool_slot_bytes times state_pool_banks. */
int64_t state_pool_slot_cost(const state_pool *p);

/* 1 or 2. */
int32_t state_pool_banks(const state_pool *p);

int32_t state_pool_max_slots(const state_pool *p);
int32_t state_pool_used_count(const state_pool *p);

/* 1 when slot is allocated, 0 when free or out of range. */
int state_pool_slot_in_use(const state_pool *p, int32_t slot);

/* Takes the lowest free slot into *out_slot and zeroes its published rows in every layer. Its
 * published bank is that of slot-1 when slot-1 is in use (a batch over consecutive slots stays one
 * slice), else 0. The inactive bank is NOT zeroed: it holds whatever an earlier holder left, and
 * nothing reads it before a speculative step has written it.
 * PH_ERR_LIMIT when all max_slots are in use. */
ph_status state_pool_alloc(state_pool *p, int32_t *out_slot, diag *d);

/* Returns slot to the pool. A free or out-of-range slot is PH_ERR_INVALID_ARGUMENT naming it.
 * Not allowed while a binding is active. */
ph_status state_pool_release(state_pool *p, int32_t slot, diag *d);

/* Moves live slots down so they occupy [0, used): while a free slot lies below the highest
 * used slot, the highest used slot's published rows are copied into the lowest free slot (same
 * bank; the published-bank bit moves with them; one bank's bytes counted in bytes_moved) and the
 * old slot is freed. Each move is written to moves[max_moves] in order;
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

/* Binds a step's batch: batch row b is slot slots[b] (slots[batch], distinct, allocated); row b
 * is speculative when spec[b] != 0 (spec NULL or all 0: none is). The past views
 * (state_pool_bound_conv/_recurrent) read each slot's published rows; the present views
 * (_bound_*_out) are where the step's op writes: a speculative row's present lands in its slot's
 * inactive bank and never in the published one; any other row's in the published one (in place).
 * Copies (every byte counted in bytes_moved):
 *   past: a slice of the published bank when the slots are consecutive and ascending AND share
 *     their published bank (0 bytes); else gathered into pool-owned staging (B slots).
 *   present: no speculative row: the past view itself (in place, as a single bank);
 *     every row speculative and past a slice: the other bank's slice (0 bytes);
 *     mixed, past a slice: pool-owned present staging, scattered at unbind (B slots);
 *     past gathered: the past staging, updated in place and scattered at unbind, each row to its
 *     bank (B slots).
 * The op must write every row of the present views (an inactive bank holds stale rows).
 * PH_ERR_INVALID_ARGUMENT: a binding is active; a bad, freed or repeated slot; a speculative row
 * in a single-banked pool ("speculative binding needs a double-banked pool"). */
ph_status state_pool_bind_spec(state_pool *p, const int32_t *slots, const uint8_t *spec,
                               int32_t batch, diag *d);

/* state_pool_bind_spec(p, slots, NULL, batch, d): no speculative row. */
ph_status state_pool_bind(state_pool *p, const int32_t *slots, int32_t batch, diag *d);

/* 1 when the active binding copies nothing (past a slice, present the same slice or the other
 * bank's slice); 0 when it stages, or when unbound. */
int state_pool_bound_is_slice(const state_pool *p);

/* Views (contiguous `tensor`s) of the active binding for model layer `layer`: conv [B, conv_dim,
 * K-1] (io dtype) and recurrent f32 [B, Hv, Dv, Dk]. Data owned by the pool, valid until unbind.
 * _bound_conv/_recurrent are the past views (past_key_values.{layer}.*), _out the present views
 * (present.{layer}.*); the two are the same view when no row is speculative.
 * PH_ERR_INVALID_ARGUMENT when unbound or `layer` is not a linear layer. */
ph_status state_pool_bound_conv(const state_pool *p, int32_t layer, tensor *out, diag *d);
ph_status state_pool_bound_recurrent(const state_pool *p, int32_t layer, tensor *out, diag *d);
ph_status state_pool_bound_conv_out(const state_pool *p, int32_t layer, tensor *out, diag *d);
ph_status state_pool_bound_recurrent_out(const state_pool *p, int32_t layer, tensor *out, diag *d);

/* Ends the binding; staged present rows are scattered back to their banks (bytes counted).
 * PH_ERR_INVALID_ARGUMENT when nothing is bound. */
ph_status state_pool_unbind(state_pool *p, diag *d);

/* Makes slot's inactive bank its published one (the other becomes inactive): the commit of a
 * speculative step, after the accepted state has been written to the inactive rows. Nothing is
 * copied. PH_ERR_INVALID_ARGUMENT when the pool is single banked, a binding is active, or the
 * slot is not allocated. */
ph_status state_pool_publish(state_pool *p, int32_t slot, diag *d);

/* The published bank (0 or 1) of an allocated slot; -1 when free or out of range. */
int state_pool_slot_bank(const state_pool *p, int32_t slot);

/* Views of one slot's PUBLISHED rows (rank drops the slot dim): conv [conv_dim, K-1], recurrent
 * [Hv, Dv, Dk]. For tests and for seeding state; the slot must be allocated. */
ph_status state_pool_slot_conv(const state_pool *p, int32_t layer, int32_t slot, tensor *out,
                               diag *d);
ph_status state_pool_slot_recurrent(const state_pool *p, int32_t layer, int32_t slot, tensor *out,
                                    diag *d);

/* Views of one allocated slot's INACTIVE rows (where a speculative step left its present state and
 * where the commit replays into), same shapes. PH_ERR_INVALID_ARGUMENT when the pool is single
 * banked, the slot is not allocated or the layer is not linear. */
ph_status state_pool_slot_conv_staged(const state_pool *p, int32_t layer, int32_t slot, tensor *out,
                                      diag *d);
ph_status state_pool_slot_recurrent_staged(const state_pool *p, int32_t layer, int32_t slot,
                                           tensor *out, diag *d);

/* Snapshots (prefix caching, src/cache/prefix_cache.h): copy an allocated slot's PUBLISHED rows
 * of every linear layer to dst (state_pool_slot_bytes of it: conv then recurrent, layer after
 * layer), or overwrite them from src. Not counted in bytes_moved (a snapshot is the prefix
 * cache's traffic, not a step's). PH_ERR_INVALID_ARGUMENT while bound or for a free slot. */
ph_status state_pool_save_slot(const state_pool *p, int32_t slot, void *dst, diag *d);
ph_status state_pool_load_slot(state_pool *p, int32_t slot, const void *src, diag *d);

/* Bytes copied by gathers, scatters and compaction moves since creation or the last reset.
 * Zeroing a slot on allocation is not a move and is not counted. */
uint64_t state_pool_bytes_moved(const state_pool *p);
void state_pool_reset_bytes_moved(state_pool *p);

#endif /* PH_CACHE_STATE_POOL_H */
