/* tensor — shapes, the run-time tensor and its element access, finiteness. See tensor.h. */
#include "tensor/tensor.h"

#include <stdio.h>
#include <string.h>

#include "tensor/dtype.h"

shape shape_make(int n_dims, const int64_t *dims) {
  shape s;
  memset(&s, 0, sizeof s);
  if (n_dims < 0) n_dims = 0;
  if (n_dims > TENSOR_MAX_DIMS) n_dims = TENSOR_MAX_DIMS;
  s.n_dims = n_dims;
  for (int i = 0; i < n_dims; i++) s.dims[i] = dims[i];
  return s;
}

shape shape_1d(int64_t a) { return shape_make(1, (int64_t[]){a}); }
shape shape_2d(int64_t a, int64_t b) { return shape_make(2, (int64_t[]){a, b}); }
shape shape_3d(int64_t a, int64_t b, int64_t c) { return shape_make(3, (int64_t[]){a, b, c}); }

int64_t shape_numel(const shape *s) {
  int64_t n = 1;
  for (int i = 0; i < s->n_dims; i++) {
    int64_t d = s->dims[i];
    if (d < 0) return -1;
    if (d != 0 && n > INT64_MAX / d) return -1;
    n *= d;
  }
  return n;
}

int64_t shape_bytes(const shape *s, ph_dtype dt) {
  int64_t n = shape_numel(s);
  int64_t es = (int64_t)dtype_size(dt);
  if (n < 0 || es == 0) return -1;
  if (n > INT64_MAX / es) return -1;
  return n * es;
}

int shape_equal(const shape *a, const shape *b) {
  if (a->n_dims != b->n_dims) return 0;
  for (int i = 0; i < a->n_dims; i++)
    if (a->dims[i] != b->dims[i]) return 0;
  return 1;
}

const char *shape_format(const shape *s, char *buf, size_t buf_bytes) {
  if (!buf_bytes) return buf;
  size_t pos = 0;
  buf[0] = '\0';
  int n = snprintf(buf, buf_bytes, "[");
  pos = n > 0 ? (size_t)n : 0;
  for (int i = 0; i < s->n_dims && pos < buf_bytes; i++) {
    n = snprintf(buf + pos, buf_bytes - pos, "%s%lld", i ? ", " : "", (long long)s->dims[i]);
    if (n < 0) break;
    pos += (size_t)n;
  }
  if (pos < buf_bytes) snprintf(buf + pos, buf_bytes - pos, "]");
  return buf;
}

/* ---- the run-time tensor -------------------------------------------------------------------- */

tensor tensor_make(ph_dtype dt, int rank, const int64_t *dims, void *data) {
  tensor t;
  memset(&t, 0, sizeof t);
  if (rank < 0) rank = 0;
  if (rank > TENSOR_MAX_DIMS) rank = TENSOR_MAX_DIMS;
  t.dtype = dt;
  t.rank = rank;
  for (int i = 0; i < rank; i++) t.dims[i] = dims[i];
  t.data = data;
  return t;
}

int64_t tensor_numel(const tensor *t) {
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) n *= t->dims[i];
  return n;
}

float tensor_get_f32(const tensor *t, int64_t i) {
  float v = 0.0f;
  tensor_load_f32(t, i, 1, &v);
  return v;
}

void tensor_set_f32(tensor *t, int64_t i, float v) { tensor_store_f32(t, i, 1, &v); }

void tensor_load_f32(const tensor *t, int64_t i, int64_t n, float *dst) {
  switch (t->dtype) {
  case PH_DTYPE_F32:
    memcpy(dst, (const float *)t->data + i, (size_t)n * sizeof(float));
    return;
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
  default:
    dtype_convert(dst, PH_DTYPE_F32, (const char *)t->data + i * (int64_t)dtype_size(t->dtype),
                  t->dtype, (size_t)n, NULL);
    return;
  }
}

void tensor_store_f32(tensor *t, int64_t i, int64_t n, const float *src) {
  switch (t->dtype) {
  case PH_DTYPE_F32:
    memcpy((float *)t->data + i, src, (size_t)n * sizeof(float));
    return;
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
  default:
    return; /* integer outputs are written by their ops directly */
  }
}

/* ---- finiteness ----------------------------------------------------------------------------- */

void nonfinite_report_init(nonfinite_report *r) {
  memset(r, 0, sizeof *r);
  r->first_index = -1;
}

void nonfinite_scan(nonfinite_report *r, const char *name, ph_dtype dt, const shape *s,
                    const void *data) {
  r->n_tensors++;
  const int64_t n = shape_numel(s);
  int64_t first = -1;
  const int64_t bad = n > 0 ? dtype_count_nonfinite(dt, data, n, &first) : 0;
  if (!bad) return;
  if (!r->n_bad_tensors) {
    snprintf(r->first_name, sizeof r->first_name, "%s", name ? name : "?");
    r->first_dtype = dt;
    r->first_shape = *s;
    r->first_index = first;
    r->first_count = bad;
    float v = 0.0f;
    const size_t es = dtype_size(dt);
    dtype_convert(&v, PH_DTYPE_F32, (const unsigned char *)data + (size_t)first * es, dt, 1, NULL);
    r->first_value = v;
  }
  r->n_bad_tensors++;
  r->n_bad_values += bad;
}

ph_status nonfinite_status(const nonfinite_report *r, diag *d) {
  if (!r->n_bad_tensors) return PH_OK;
  char sh[128], at[160];
  size_t pos = 0;
  int64_t rest = r->first_index;
  at[0] = '\0';
  /* the multi-index, last dim fastest */
  int64_t idx[TENSOR_MAX_DIMS];
  for (int k = r->first_shape.n_dims - 1; k >= 0; k--) {
    const int64_t dim = r->first_shape.dims[k] > 0 ? r->first_shape.dims[k] : 1;
    idx[k] = rest % dim;
    rest /= dim;
  }
  for (int k = 0; k < r->first_shape.n_dims && pos < sizeof at; k++) {
    int w = snprintf(at + pos, sizeof at - pos, "%s%lld", k ? ", " : " [", (long long)idx[k]);
    if (w < 0) break;
    pos += (size_t)w;
  }
  if (r->first_shape.n_dims && pos < sizeof at) snprintf(at + pos, sizeof at - pos, "]");
  const float v = r->first_value;
  const char *what = v != v ? "nan" : v > 0 ? "+inf" : "-inf";
  return diag_set(d, PH_ERR_NON_FINITE,
                  "tensor %s %s %s: %lld non-finite value%s, the first (%s) at flat index %lld%s; "
                  "%lld of %lld tensors hold NaN or infinity (%lld values)",
                  r->first_name, shape_format(&r->first_shape, sh, sizeof sh),
                  ph_dtype_name(r->first_dtype), (long long)r->first_count,
                  r->first_count == 1 ? "" : "s", what, (long long)r->first_index, at,
                  (long long)r->n_bad_tensors, (long long)r->n_tensors, (long long)r->n_bad_values);
}
