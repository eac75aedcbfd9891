/* op_common — tensor element access shared by the reference kernels. */
#include <string.h>

#include "ops/op.h"
#include "tensor/dtype.h"

int64_t tensor_numel(const tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= t->dims[i];
  return n;
}

int dtype_is_compute_float(ph_dtype dt) {
  return dt == PH_DTYPE_F32 || dt == PH_DTYPE_F16 || dt == PH_DTYPE_BF16;
}

float tensor_get_f32(const tensor *t, int64_t i) {
  float v = 0.0f;
  tensor_load_f32(t, i, 1, &v);
  return v;
}

void tensor_set_f32(tensor *t, int64_t i, float v) { tensor_store_f32(t, i, 1, &v); }

void tensor_load_f32(const tensor *t, int64_t i, int64_t n, float *dst) {
  switch (t->dtype) {
  case PH_DTYPE_F32: memcpy(dst, (const float *)t->data + i, (size_t)n * sizeof(float)); return;
  case PH_DTYPE_F16: {
    const uint16_t *p = (const uint16_t *)t->data + i;
    for (int64_t k = 0; k < n; k++) dst[k] = f16_to_f32(p[k]);
    return;
  }
  case PH_DTYPE_BF16: {
    const uint16_t *p = (const uint16_t *)t->data + i;
    for (int64_t k = 0; k < n; k++) dst[k] = bf16_to_f32(p[k]);
    return;
  }
  default: dtype_convert(dst, PH_DTYPE_F32, (const char *)t->data + i * (int64_t)dtype_size(t->dtype), t->dtype, (size_t)n, NULL); return;
  }
}

void tensor_store_f32(tensor *t, int64_t i, int64_t n, const float *src) {
  switch (t->dtype) {
  case PH_DTYPE_F32: memcpy((float *)t->data + i, src, (size_t)n * sizeof(float)); return;
  case PH_DTYPE_F16: {
    uint16_t *p = (uint16_t *)t->data + i;
    for (int64_t k = 0; k < n; k++) p[k] = f32_to_f16(src[k]);
    return;
  }
  case PH_DTYPE_BF16: {
    uint16_t *p = (uint16_t *)t->data + i;
    for (int64_t k = 0; k < n; k++) p[k] = f32_to_bf16(src[k]);
    return;
  }
  default: return; /* integer outputs are written by their ops directly */
  }
}
