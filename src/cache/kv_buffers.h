/* kv_buffers — the KV page memory of the attention layers, in the ABI's packed layout.
 *
 * Owns: one page-aligned anonymous mapping (reads as zero, committed when first written) per
 * attention layer per K/V, each [n_blocks, block_size, Hkv, D] in the cache dtype (f32, f16 or
 * bf16), zeroed at creation (abi.md §8.1 past_key_values.{i}.key/.value). A key-only geometry
 * (PagedAttention LATENT, abi.md §1.8: DeepSeek MLA's latent row [.., 1, l+r]) has the key
 * buffer alone: no value pages exist and none are counted. A block id from
 * src/cache/block_pool.h indexes dim 0 of every layer's buffer. The executor binds the views in
 * place: past_key_values.{i}.key and present.{i}.key are the same buffer (the cache output aliases
 * the cache input). Must never: decide which blocks are used (block_pool does), compute, or see
 * requests.
 */
#ifndef PH_CACHE_KV_BUFFERS_H
#define PH_CACHE_KV_BUFFERS_H

#include <stddef.h>
#include <stdint.h>

#include "base/diag.h"
#include "tensor/tensor.h"

#define KV_BUFFERS_ALIGN 64

/* What the buffers are sized from. full_layers is borrowed for the call only (copied). */
typedef struct kv_geometry {
  int32_t n_full;             /* full-attention layers (>= 0) */
  const int32_t *full_layers; /* [n_full] model layer indices, strictly ascending, >= 0 */
  int32_t n_kv_heads;         /* Hkv >= 1 */
  int32_t head_size;          /* D >= 1 */
  int32_t block_size;         /* tokens per block >= 1 */
  int32_t n_blocks;           /* block ids incl. the null block >= 1 (block_pool's n_blocks) */
  ph_dtype dtype;             /* PH_DTYPE_F32, _F16 or _BF16 */
  int32_t key_only;           /* 0: key and value pages (SEPARATE); 1: key pages only (LATENT) */
} kv_geometry;

typedef struct kv_buffers kv_buffers;

/* Bytes of one block across every layer, K and V: n_full * n_caches * block_size * Hkv * D *
 * esize, n_caches 2 (1 when key_only). -1 for an invalid geometry or overflow. Allocates
 * nothing. */
int64_t kv_geometry_bytes_per_block(const kv_geometry *g);

/* Bytes kv_buffers_create would allocate: bytes_per_block * n_blocks, each buffer rounded up to
 * KV_BUFFERS_ALIGN. -1 for an invalid geometry or overflow. Allocates nothing. */
int64_t kv_geometry_total_bytes(const kv_geometry *g);

/* Allocates and zeroes the buffers. *out owned by the caller (kv_buffers_free).
 * PH_ERR_INVALID_ARGUMENT (geometry; message names the field), PH_ERR_LIMIT (overflow),
 * PH_ERR_NO_MEMORY. */
ph_status kv_buffers_create(const kv_geometry *g, kv_buffers **out, diag *d);

/* NULL is a no-op. Views handed out before become dangling. */
void kv_buffers_free(kv_buffers *kv);

/* Total bytes held (as kv_geometry_total_bytes). */
int64_t kv_buffers_bytes(const kv_buffers *kv);

/* Bytes of one block across every layer, K and V (K alone when key_only). */
int64_t kv_buffers_bytes_per_block(const kv_buffers *kv);

/* The geometry (full_layers points at the buffers' own copy). */
kv_geometry kv_buffers_geometry(const kv_buffers *kv);

/* Views (contiguous `tensor`s) [n_blocks, block_size, Hkv, D] of model layer `layer`'s key or
 * value pages; the data stays owned by kv. PH_ERR_INVALID_ARGUMENT when `layer` is not an
 * attention layer, or for the value of a key-only geometry (it has none). */
ph_status kv_buffers_key(const kv_buffers *kv, int32_t layer, tensor *out, diag *d);
ph_status kv_buffers_value(const kv_buffers *kv, int32_t layer, tensor *out, diag *d);

#endif /* PH_CACHE_KV_BUFFERS_H */
