/* kv_buffers — one aligned allocation per layer per K/V, described by the geometry. */
#include "cache/kv_buffers.h"

#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "tensor/dtype.h"

struct kv_buffers {
  kv_geometry g;        /* g.full_layers -> layers */
  int32_t *layers;      /* [n_full] copy of the model layer indices */
  void **keys;          /* [n_full] each [n_blocks, block_size, Hkv, D] */
  void **values;        /* [n_full] same */
  int64_t buffer_bytes; /* one buffer, rounded up to KV_BUFFERS_ALIGN */
};

static int dtype_ok(ph_dtype dt) {
  return dt == PH_DTYPE_F32 || dt == PH_DTYPE_F16 || dt == PH_DTYPE_BF16;
}

/* Checks g; fills *buffer (bytes of one layer's K or V, unrounded). */
static ph_status check_geometry(const kv_geometry *g, int64_t *buffer, diag *d) {
  RETURN_ERROR_IF(!g, d, PH_ERR_INVALID_ARGUMENT, "kv geometry is NULL");
  RETURN_ERROR_IF(g->n_full < 0 || (g->n_full > 0 && !g->full_layers), d, PH_ERR_INVALID_ARGUMENT,
                  "kv geometry: n_full %d with full_layers %s", (int)g->n_full,
                  g->full_layers ? "set" : "NULL");
  for (int32_t i = 0; i < g->n_full; i++)
    RETURN_ERROR_IF(g->full_layers[i] < 0 || (i > 0 && g->full_layers[i] <= g->full_layers[i - 1]),
                    d, PH_ERR_INVALID_ARGUMENT,
                    "kv geometry: full_layers[%d] = %d is negative or not ascending", (int)i,
                    (int)g->full_layers[i]);
  RETURN_ERROR_IF(g->n_kv_heads < 1, d, PH_ERR_INVALID_ARGUMENT, "kv geometry: n_kv_heads %d",
                  (int)g->n_kv_heads);
  RETURN_ERROR_IF(g->head_size < 1, d, PH_ERR_INVALID_ARGUMENT, "kv geometry: head_size %d",
                  (int)g->head_size);
  RETURN_ERROR_IF(g->block_size < 1, d, PH_ERR_INVALID_ARGUMENT, "kv geometry: block_size %d",
                  (int)g->block_size);
  RETURN_ERROR_IF(g->n_blocks < 1, d, PH_ERR_INVALID_ARGUMENT, "kv geometry: n_blocks %d",
                  (int)g->n_blocks);
  RETURN_ERROR_IF(!dtype_ok(g->dtype), d, PH_ERR_INVALID_ARGUMENT,
                  "kv geometry: dtype %d is not f32, f16 or bf16", (int)g->dtype);
  RETURN_ERROR_IF(g->key_only != 0 && g->key_only != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "kv geometry: key_only %d is not 0 or 1", (int)g->key_only);
  int64_t dims[4] = {g->n_blocks, g->block_size, g->n_kv_heads, g->head_size};
  shape s = shape_make(4, dims);
  int64_t bytes = shape_bytes(&s, g->dtype);
  RETURN_ERROR_IF(bytes < 0 || bytes > INT64_MAX / 4 - KV_BUFFERS_ALIGN, d, PH_ERR_LIMIT,
                  "kv geometry: one layer's buffer overflows");
  *buffer = bytes;
  return PH_OK;
}

static int64_t round_up(int64_t n) {
  return (n + KV_BUFFERS_ALIGN - 1) / KV_BUFFERS_ALIGN * KV_BUFFERS_ALIGN;
}

/* Page buffers per layer: K and V, or K alone (LATENT). */
static int64_t n_caches(const kv_geometry *g) { return g->key_only ? 1 : 2; }

int64_t kv_geometry_bytes_per_block(const kv_geometry *g) {
  int64_t buffer = 0;
  if (check_geometry(g, &buffer, NULL) != PH_OK) return -1;
  int64_t per_layer_block = buffer / g->n_blocks; /* block_size * Hkv * D * esize */
  if (g->n_full > 0 && per_layer_block > INT64_MAX / 2 / g->n_full) return -1;
  return per_layer_block * n_caches(g) * g->n_full;
}

int64_t kv_geometry_total_bytes(const kv_geometry *g) {
  int64_t buffer = 0;
  if (check_geometry(g, &buffer, NULL) != PH_OK) return -1;
  int64_t r = round_up(buffer);
  if (g->n_full > 0 && r > INT64_MAX / 2 / g->n_full) return -1;
  return r * n_caches(g) * g->n_full;
}

ph_status kv_buffers_create(const kv_geometry *g, kv_buffers **out, diag *d) {
  RETURN_ERROR_IF(!out, d, PH_ERR_INVALID_ARGUMENT, "kv_buffers_create: out is NULL");
  *out = NULL;
  int64_t buffer = 0;
  FORWARD_IF_ERROR(check_geometry(g, &buffer, d));
  RETURN_ERROR_IF(kv_geometry_total_bytes(g) < 0 || (uint64_t)round_up(buffer) > SIZE_MAX, d,
                  PH_ERR_LIMIT, "kv_buffers_create: total size overflows");
  kv_buffers *kv = calloc(1, sizeof *kv);
  if (!kv) return diag_set(d, PH_ERR_NO_MEMORY, "kv_buffers_create: struct");
  size_t n = g->n_full > 0 ? (size_t)g->n_full : 1;
  kv->layers = calloc(n, sizeof *kv->layers);
  kv->keys = calloc(n, sizeof *kv->keys);
  kv->values = calloc(n, sizeof *kv->values);
  kv->g = *g;
  kv->g.full_layers = kv->layers;
  kv->buffer_bytes = round_up(buffer);
  if (!kv->layers || !kv->keys || !kv->values) goto fail_mem;
  if (g->n_full > 0) memcpy(kv->layers, g->full_layers, (size_t)g->n_full * sizeof *kv->layers);
  for (int32_t i = 0; i < g->n_full; i++) {
    kv->keys[i] = pages_alloc_zeroed((size_t)kv->buffer_bytes);
    if (!g->key_only) kv->values[i] = pages_alloc_zeroed((size_t)kv->buffer_bytes);
    if (!kv->keys[i] || (!g->key_only && !kv->values[i])) goto fail_mem;
  }
  *out = kv;
  return PH_OK;
fail_mem:
  kv_buffers_free(kv);
  return diag_set(d, PH_ERR_NO_MEMORY, "kv_buffers_create: %lld bytes for %d layers",
                  (long long)kv_geometry_total_bytes(g), (int)g->n_full);
}

void kv_buffers_free(kv_buffers *kv) {
  if (!kv) return;
  for (int32_t i = 0; i < kv->g.n_full; i++) {
    if (kv->keys) pages_free(kv->keys[i], (size_t)kv->buffer_bytes);
    if (kv->values) pages_free(kv->values[i], (size_t)kv->buffer_bytes);
  }
  free(kv->keys);
  free(kv->values);
  free(kv->layers);
  free(kv);
}

int64_t kv_buffers_bytes(const kv_buffers *kv) {
  return kv->buffer_bytes * n_caches(&kv->g) * kv->g.n_full;
}

int64_t kv_buffers_bytes_per_block(const kv_buffers *kv) {
  return kv_geometry_bytes_per_block(&kv->g);
}

kv_geometry kv_buffers_geometry(const kv_buffers *kv) { return kv->g; }

static ph_status view_of(const kv_buffers *kv, int32_t layer, int value, tensor *out, diag *d) {
  for (int32_t i = 0; i < kv->g.n_full; i++) {
    if (kv->layers[i] != layer) continue;
    RETURN_ERROR_IF(value && kv->g.key_only, d, PH_ERR_INVALID_ARGUMENT,
                    "kv_buffers: layer %d holds key pages only (LATENT): it has no value pages",
                    (int)layer);
    int64_t dims[4] = {kv->g.n_blocks, kv->g.block_size, kv->g.n_kv_heads, kv->g.head_size};
    *out = tensor_make(kv->g.dtype, 4, dims, value ? kv->values[i] : kv->keys[i]);
    return PH_OK;
  }
  return diag_set(d, PH_ERR_INVALID_ARGUMENT, "kv_buffers: layer %d is not an attention layer",
                  (int)layer);
}

ph_status kv_buffers_key(const kv_buffers *kv, int32_t layer, tensor *out, diag *d) {
  return view_of(kv, layer, 0, out, d);
}

ph_status kv_buffers_value(const kv_buffers *kv, int32_t layer, tensor *out, diag *d) {
  return view_of(kv, layer, 1, out, d);
}
