/* op_gather — Gather (ai.onnx, opset 13): out = data indexed by `indices` along `axis`.
 *
 * data [d0..d(r-1)] of any dtype (rows are copied bytewise), indices of any rank q (i64 or i32),
 * attribute axis in [-r, r-1] (default 0). out = data.dims[:axis] + indices.dims +
 * data.dims[axis+1:], rank r + q - 1 <= GRAPH_MAX_DIMS. An index i is valid in [-s, s-1]
 * (s = data.dims[axis]); a negative one counts from the end. An index outside that range is
 * PH_ERR_INVALID_ARGUMENT naming it: at build time when indices are a constant, else at run
 * time, checked for every index before anything is written. An embedding lookup (the common
 * use) is a memcpy per token, so run() stays single-threaded.
 */
#include <string.h>

#include "ops/op.h"
#include "ops/op_util.h"
#include "tensor/dtype.h"

static int64_t index_at(const void *p, ph_dtype dt, int64_t i) {
  if (dt == PH_DTYPE_I32) {
    int32_t v;
    memcpy(&v, (const char *)p + 4 * i, 4);
    return v;
  }
  int64_t v;
  memcpy(&v, (const char *)p + 8 * i, 8);
  return v;
}

/* Checks every index against [-s, s-1]. */
static ph_status check_indices(const void *p, ph_dtype dt, int64_t n_idx, int64_t s, int axis,
                               diag *d) {
  for (int64_t i = 0; i < n_idx; i++) {
    int64_t v = index_at(p, dt, i);
    RETURN_ERROR_IF(v < -s || v >= s, d, PH_ERR_INVALID_ARGUMENT,
                    "Gather: index %lld (element %lld of indices) is out of range [%lld, %lld] "
                    "for axis %d of size %lld",
                    (long long)v, (long long)i, (long long)-s, (long long)(s - 1), axis,
                    (long long)s);
  }
  return PH_OK;
}

static ph_status gather_axis(const gnode *n, int rank, int *axis, diag *d) {
  int64_t ax = 0;
  FORWARD_IF_ERROR(op_attr_int(n, "axis", 0, &ax, d));
  return op_norm_axis(n, ax, rank, axis, d);
}

static ph_status gather_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  RETURN_ERROR_IF(n->n_inputs != 2 || n->n_outputs != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "Gather takes 2 inputs and 1 output, got %d and %d", n->n_inputs, n->n_outputs);
  const tinfo *data = &in[0], *idx = &in[1];
  RETURN_ERROR_IF(data->dtype == PH_DTYPE_INVALID || idx->dtype == PH_DTYPE_INVALID, d,
                  PH_ERR_INVALID_ARGUMENT, "Gather: data and indices are required");
  RETURN_ERROR_IF(idx->dtype != PH_DTYPE_I64 && idx->dtype != PH_DTYPE_I32, d, PH_ERR_TENSOR_DTYPE,
                  "Gather: indices are %s; expected I64 or I32", op_dtype_name(idx->dtype));
  memset(out, 0, sizeof *out);
  out->dtype = data->dtype;
  out->rank = -1;
  if (data->rank < 0) return PH_OK;
  RETURN_ERROR_IF(data->rank == 0, d, PH_ERR_TENSOR_SHAPE, "Gather: data must have rank >= 1");
  int axis = 0;
  FORWARD_IF_ERROR(gather_axis(n, data->rank, &axis, d));
  if (idx->rank < 0) return PH_OK;
  int r = data->rank + idx->rank - 1;
  RETURN_ERROR_IF(r > GRAPH_MAX_DIMS, d, PH_ERR_TENSOR_SHAPE, "Gather: output rank %d exceeds %d",
                  r, GRAPH_MAX_DIMS);
  int o = 0;
  for (int i = 0; i < axis; i++) out->dims[o++] = data->dims[i];
  for (int i = 0; i < idx->rank; i++) out->dims[o++] = idx->dims[i];
  for (int i = axis + 1; i < data->rank; i++) out->dims[o++] = data->dims[i];
  out->rank = r;
  int64_t s = data->dims[axis], n_idx = tinfo_numel(idx);
  if (idx->data && s >= 0 && n_idx >= 0)
    FORWARD_IF_ERROR(check_indices(idx->data, idx->dtype, n_idx, s, axis, d));
  return PH_OK;
}

static ph_status gather_run(const gnode *n, const tensor *const *in, tensor *const *out,
                            op_ctx *ctx, diag *d) {
  (void)ctx;
  const tensor *data = in[0], *idx = in[1];
  int axis = 0;
  FORWARD_IF_ERROR(gather_axis(n, data->rank, &axis, d));
  int64_t outer = 1, inner = 1, s = data->dims[axis], n_idx = tensor_numel(idx);
  for (int i = 0; i < axis; i++) outer *= data->dims[i];
  for (int i = axis + 1; i < data->rank; i++) inner *= data->dims[i];
  FORWARD_IF_ERROR(check_indices(idx->data, idx->dtype, n_idx, s, axis, d));
  size_t row = (size_t)inner * dtype_size(data->dtype);
  if (row == 0 || n_idx == 0) return PH_OK;
  const char *src = data->data;
  char *dst = out[0]->data;
  for (int64_t o = 0; o < outer; o++)
    for (int64_t i = 0; i < n_idx; i++) {
      int64_t v = index_at(idx->data, idx->dtype, i);
      if (v < 0) v += s;
      memcpy(dst, src + (size_t)(o * s + v) * row, row);
      dst += row;
    }
  return PH_OK;
}

const op_def op_def_gather = {"", "Gather", 2, 2, 1, 1, gather_infer, gather_run, NULL, 0, NULL};
