/* placeholder — predicted tensors bound as model_weights over a zero mapping. See placeholder.h. */
#include "models/placeholder.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "tensor/dtype.h"

struct placeholder_weights {
  expected_tensor *expected; /* names live here */
  size_t n;
  st_tensor *tensors; /* [n] */
  void *zeros;        /* PROT_READ anonymous mapping */
  size_t zeros_bytes;
  model_weights w;
};

ph_status placeholder_weights_create(const hf_config *c, placeholder_weights **out, diag *d) {
  *out = NULL;
  placeholder_weights *p = calloc(1, sizeof *p);
  RETURN_ERROR_IF(!p, d, PH_ERR_NO_MEMORY, "placeholder weights: out of memory");
  const ph_dtype dt = c->dtype != PH_DTYPE_INVALID ? c->dtype : PH_DTYPE_F32;
  ph_status s =
      weights_expected(c, weights_default_layout(c), EXPERTS_FUSED, &p->expected, &p->n, d);
  if (s != PH_OK) goto fail;
  p->tensors = calloc(p->n ? p->n : 1, sizeof *p->tensors);
  p->w.layout = weights_default_layout(c);
  p->w.experts = EXPERTS_FUSED;
  p->w.n_layers = (int)c->n_layers;
  p->w.placeholder = 1;
  p->w.layer = calloc((size_t)p->w.n_layers * W_ROLE_COUNT + 1, sizeof *p->w.layer);
  if (!p->tensors || !p->w.layer) {
    s = diag_set(d, PH_ERR_NO_MEMORY, "placeholder weights: out of memory");
    goto fail;
  }
  for (size_t i = 0; i < p->n; i++) {
    size_t bytes = (size_t)shape_numel(&p->expected[i].shape) * dtype_size(dt);
    if (bytes > p->zeros_bytes) p->zeros_bytes = bytes;
  }
  /* the MoE builder reads a layer's whole repacked expert block [E, 2I, H] from here */
  const size_t moe_bytes =
      (size_t)(c->moe.n_experts * 2 * c->moe.moe_intermediate_size * c->hidden_size) *
      dtype_size(dt);
  if (moe_bytes > p->zeros_bytes) p->zeros_bytes = moe_bytes;
  /* the DeepSeek builder reads its absorbed [H (l + r), in] / [hidden, H l] and padded kv_b
   * [H (2 dn + dr), l] projections from here too */
  if (c->family == FAMILY_DEEPSEEK) {
    const int64_t H = c->n_heads, l = c->mla.kv_lora_rank, r = c->mla.qk_rope_head_dim;
    const int64_t in = c->mla.q_lora_rank ? c->mla.q_lora_rank : c->hidden_size;
    const int64_t dn = c->mla.qk_nope_head_dim;
    const int64_t n[3] = {H * (l + r) * in, c->hidden_size * H * l, H * (2 * dn + r) * l};
    for (int k = 0; k < 3; k++)
      if ((size_t)n[k] * dtype_size(dt) > p->zeros_bytes)
        p->zeros_bytes = (size_t)n[k] * dtype_size(dt);
  }
  p->zeros_bytes = p->zeros_bytes ? p->zeros_bytes : 64;
  p->zeros =
      mmap(NULL, p->zeros_bytes, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p->zeros == MAP_FAILED) {
    p->zeros = NULL;
    s = diag_set(d, PH_ERR_NO_MEMORY, "placeholder weights: cannot reserve %zu bytes",
                 p->zeros_bytes);
    goto fail;
  }
  for (size_t i = 0; i < p->n; i++) {
    const expected_tensor *e = &p->expected[i];
    st_tensor *t = &p->tensors[i];
    t->name = e->name;
    t->dtype = dt;
    t->shape = e->shape;
    t->data = p->zeros;
    t->data_end = (uint64_t)shape_numel(&e->shape) * dtype_size(dt);
    if (e->expert >= 0)
      continue; /* per-expert slots: not bound (the MoE builder views the
                   zero mapping instead, models/moe.c) */
    if (e->layer < 0)
      p->w.global[e->role] = t;
    else
      p->w.layer[(size_t)e->layer * W_ROLE_COUNT + e->role] = t;
    p->w.n_parameters += shape_numel(&e->shape);
    p->w.n_bytes += (int64_t)t->data_end;
  }
  *out = p;
  return PH_OK;
fail:
  placeholder_weights_free(p);
  return s;
}

void placeholder_weights_free(placeholder_weights *p) {
  if (!p) return;
  if (p->zeros) munmap(p->zeros, p->zeros_bytes);
  free(p->tensors);
  free(p->expected);
  free(p->w.layer);
  free(p);
}

const model_weights *placeholder_weights_get(const placeholder_weights *p) { return &p->w; }
