/* op_onehot — OneHot (ai.onnx opset 11).
 *
 * Inputs: indices (I64 or I32, any rank r), depth (a constant I64 or I32 holding one value:
 * a scalar or [1], >= 1; not a constant is PH_ERR_UNSUPPORTED since it fixes the output shape),
 * values [2] = [off_value, on_value] (f32, f16 or bf16; read at run time). Attribute axis
 * (default -1, in [-(r+1), r]): where the new dim of size depth goes. Output: values' dtype,
 * indices' dims with depth inserted at axis; element (..., d, ...) is on_value where the index
 * at (...) equals d and off_value elsewhere. As the spec says, a negative index counts from the
 * end (index + depth); an index still outside [0, depth) gives a row of off_value. Values are
 * copied exactly; every output element depends on one index, so rows split over the pool.
 */
#include <string.h>

#include "ops/op.h"
#include "ops/op_util.h"
#include "tensor/dtype.h"

typedef struct onehot_plan {
  int64_t outer, depth, inner; /* output = [outer, depth, inner]; indices = [outer, inner] */
} onehot_plan;

static ph_status onehot_resolve(const gnode *n, const tinfo *in, tinfo *out, onehot_plan *p,
                                diag *d) {
  RETURN_ERROR_IF(n->n_inputs != 3 || n->n_outputs != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "OneHot takes 3 inputs and 1 output, got %d and %d", n->n_inputs, n->n_outputs);
  const tinfo *ix = &in[0], *dp = &in[1], *vals = &in[2];
  RETURN_ERROR_IF(ix->dtype == PH_DTYPE_INVALID || dp->dtype == PH_DTYPE_INVALID ||
                      vals->dtype == PH_DTYPE_INVALID,
                  d, PH_ERR_INVALID_ARGUMENT, "OneHot: indices, depth and values are required");
  RETURN_ERROR_IF(ix->dtype != PH_DTYPE_I64 && ix->dtype != PH_DTYPE_I32, d, PH_ERR_TENSOR_DTYPE,
                  "OneHot: indices is %s; expected I64 or I32", op_dtype_name(ix->dtype));
  RETURN_ERROR_IF(dp->dtype != PH_DTYPE_I64 && dp->dtype != PH_DTYPE_I32, d, PH_ERR_TENSOR_DTYPE,
                  "OneHot: depth is %s; expected I64 or I32", op_dtype_name(dp->dtype));
  RETURN_ERROR_IF(!dtype_is_compute_float(vals->dtype), d, PH_ERR_TENSOR_DTYPE,
                  "OneHot: values is %s; expected F32, F16 or BF16", op_dtype_name(vals->dtype));
  RETURN_ERROR_IF(
      vals->rank >= 0 && (vals->rank != 1 || (vals->dims[0] >= 0 && vals->dims[0] != 2)), d,
      PH_ERR_TENSOR_SHAPE, "OneHot: values must be [2] (off, on), got rank %d", vals->rank);
  RETURN_ERROR_IF(dp->rank > 1 || (dp->rank == 1 && dp->dims[0] >= 0 && dp->dims[0] != 1), d,
                  PH_ERR_TENSOR_SHAPE, "OneHot: depth must hold one value (a scalar or [1])");
  RETURN_ERROR_IF(!dp->data, d, PH_ERR_UNSUPPORTED, "OneHot: non-constant depth input");
  RETURN_ERROR_IF(dp->rank < 0, d, PH_ERR_TENSOR_SHAPE, "OneHot: depth must hold one value");
  int64_t depth;
  if (dp->dtype == PH_DTYPE_I64) {
    memcpy(&depth, dp->data, 8);
  } else {
    int32_t v;
    memcpy(&v, dp->data, 4);
    depth = v;
  }
  RETURN_ERROR_IF(depth < 1, d, PH_ERR_INVALID_ARGUMENT, "OneHot: depth must be >= 1, got %lld",
                  (long long)depth);
  int64_t axis = -1;
  FORWARD_IF_ERROR(op_attr_int(n, "axis", -1, &axis, d));
  memset(out, 0, sizeof *out);
  out->dtype = vals->dtype;
  if (ix->rank < 0) {
    out->rank = -1;
    return PH_OK;
  }
  RETURN_ERROR_IF(ix->rank + 1 > GRAPH_MAX_DIMS, d, PH_ERR_TENSOR_SHAPE,
                  "OneHot: indices of rank %d give an output of more than %d dims", ix->rank,
                  GRAPH_MAX_DIMS);
  int ax = 0;
  FORWARD_IF_ERROR(op_norm_axis(n, axis, ix->rank + 1, &ax, d));
  out->rank = ix->rank + 1;
  for (int i = 0, k = 0; i < out->rank; i++) out->dims[i] = i == ax ? depth : ix->dims[k++];
  if (p) {
    p->outer = p->inner = 1;
    for (int i = 0; i < ax; i++) p->outer *= ix->dims[i];
    for (int i = ax; i < ix->rank; i++) p->inner *= ix->dims[i];
    p->depth = depth;
  }
  return PH_OK;
}

static ph_status onehot_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  return onehot_resolve(n, in, out, NULL, d);
}

static ph_status onehot_plan_fn(const gnode *n, const tinfo *in, void *plan, diag *d) {
  tinfo out;
  return onehot_resolve(n, in, &out, plan, d);
}

typedef struct onehot_job {
  onehot_plan p;
  const tensor *ix;
  tensor *y;
  float off, on;
  int64_t n_tasks;
} onehot_job;

static void onehot_task(void *ctx, size_t task, int thread) {
  (void)thread;
  const onehot_job *j = ctx;
  const onehot_plan *p = &j->p;
  int64_t a = (int64_t)task * p->outer / j->n_tasks,
          b = ((int64_t)task + 1) * p->outer / j->n_tasks;
  for (int64_t o = a; o < b; o++)
    for (int64_t i = 0; i < p->inner; i++) {
      int64_t at = o * p->inner + i;
      int64_t v = j->ix->dtype == PH_DTYPE_I64 ? ((const int64_t *)j->ix->data)[at]
                                               : ((const int32_t *)j->ix->data)[at];
      if (v < 0) v += p->depth;
      for (int64_t k = 0; k < p->depth; k++)
        tensor_set_f32(j->y, (o * p->depth + k) * p->inner + i, k == v ? j->on : j->off);
    }
}

static ph_status onehot_run(const gnode *n, const tensor *const *in, tensor *const *out,
                            op_ctx *ctx, diag *d) {
  (void)n;
  RETURN_ERROR_IF(!ctx->plan, d, PH_ERR_INTERNAL, "OneHot: run without a plan");
  onehot_job j;
  memset(&j, 0, sizeof j);
  j.p = *(const onehot_plan *)ctx->plan;
  j.ix = in[0];
  j.y = out[0];
  j.off = tensor_get_f32(in[2], 0);
  j.on = tensor_get_f32(in[2], 1);
  if (j.p.outer == 0 || j.p.inner == 0) return PH_OK;
  int T = pool_threads(ctx->pool);
  j.n_tasks = j.p.outer < (int64_t)T * 4 ? j.p.outer : (int64_t)T * 4;
  pool_run(ctx->pool, (size_t)j.n_tasks, onehot_task, &j);
  return PH_OK;
}

const op_def op_def_onehot = {
    "", "OneHot", 3, 3, 1, 1, onehot_infer, onehot_run, NULL, sizeof(onehot_plan), onehot_plan_fn};
