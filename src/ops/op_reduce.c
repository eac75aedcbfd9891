/* op_reduce — ReduceSum (ai.onnx opset 13).
 *
 * Inputs: data (f32, f16, bf16, i64, i32) and an optional constant axes input (I64/I32, values
 * in [-r, r-1], no repeats; a non-constant one is PH_ERR_UNSUPPORTED). Attributes keepdims
 * (default 1) and noop_with_empty_axes (default 0): with no axes, every dim is reduced unless
 * noop_with_empty_axes = 1, which makes the op an identity. The opset-11 `axes` attribute is
 * rejected. The output keeps the input dtype.
 *
 * Numerics: float types accumulate in f32 and round once at the end; integer types accumulate
 * in int64 with wrapping (as numpy does on overflow), then wrap to i32 for I32 outputs. Every
 * output element sums its inputs in increasing flat input index: the order is a function of
 * the shape alone, never of threads or batch. One pass over the input in memory order adds
 * into an accumulator row per output element (scratch: 8 bytes per output element), so
 * reducing leading axes streams memory instead of striding through it.
 */
#include <string.h>

#include "ops/op.h"
#include "ops/op_util.h"
#include "tensor/dtype.h"

#define RS_CHUNK 256 /* f32 staging elements per step */

/* What a ReduceSum node does for data of known rank r. */
typedef struct rs_plan {
  int reduce[GRAPH_MAX_DIMS]; /* 1: this axis is summed */
  int noop;                   /* identity (no axes and noop_with_empty_axes) */
  int keepdims;
} rs_plan;

static ph_status rs_parse(const gnode *n, const tinfo *in, int r, rs_plan *p, diag *d) {
  memset(p, 0, sizeof *p);
  RETURN_ERROR_IF(node_attr(n, "axes") != NULL, d, PH_ERR_INVALID_ARGUMENT,
                  "ReduceSum: the axes attribute is opset < 13; pass axes as the second input");
  int64_t keep = 1, noop_empty = 0;
  FORWARD_IF_ERROR(op_attr_int(n, "keepdims", 1, &keep, d));
  FORWARD_IF_ERROR(op_attr_int(n, "noop_with_empty_axes", 0, &noop_empty, d));
  p->keepdims = keep != 0;
  int n_axes = 0;
  if (op_has_input(n, in, 1)) {
    const tinfo *t = &in[1];
    RETURN_ERROR_IF(t->dtype != PH_DTYPE_I64 && t->dtype != PH_DTYPE_I32, d, PH_ERR_TENSOR_DTYPE,
                    "ReduceSum: axes is %s; expected I64 or I32", op_dtype_name(t->dtype));
    /* an axes input statically known to be empty needs no contents */
    RETURN_ERROR_IF(!t->data && !(t->rank == 1 && t->dims[0] == 0), d, PH_ERR_UNSUPPORTED,
                    "ReduceSum: non-constant axes input");
    RETURN_ERROR_IF(t->rank < 0 || t->rank > 1, d, PH_ERR_TENSOR_SHAPE,
                    "ReduceSum: axes must be 1-D, got rank %d", t->rank);
    int64_t len = t->rank == 1 ? t->dims[0] : 1;
    RETURN_ERROR_IF(len > (r > 0 ? r : 0), d, PH_ERR_INVALID_ARGUMENT,
                    "ReduceSum: %lld axes for data of rank %d", (long long)len, r);
    for (int64_t i = 0; i < len; i++) {
      int64_t a;
      if (t->dtype == PH_DTYPE_I64) {
        memcpy(&a, (const char *)t->data + 8 * i, 8);
      } else {
        int32_t x;
        memcpy(&x, (const char *)t->data + 4 * i, 4);
        a = x;
      }
      int ax = 0;
      FORWARD_IF_ERROR(op_norm_axis(n, a, r, &ax, d));
      RETURN_ERROR_IF(p->reduce[ax], d, PH_ERR_INVALID_ARGUMENT, "ReduceSum: axis %d appears twice",
                      ax);
      p->reduce[ax] = 1;
    }
    n_axes = (int)len;
  }
  if (n_axes == 0) {
    if (noop_empty)
      p->noop = 1;
    else
      for (int i = 0; i < r; i++) p->reduce[i] = 1;
  }
  return PH_OK;
}

static ph_status reduce_sum_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  RETURN_ERROR_IF(n->n_inputs < 1 || n->n_inputs > 2 || n->n_outputs != 1, d,
                  PH_ERR_INVALID_ARGUMENT, "ReduceSum takes 1-2 inputs and 1 output, got %d and %d",
                  n->n_inputs, n->n_outputs);
  const tinfo *x = &in[0];
  RETURN_ERROR_IF(x->dtype == PH_DTYPE_INVALID, d, PH_ERR_INVALID_ARGUMENT,
                  "ReduceSum: data is required");
  RETURN_ERROR_IF(
      !dtype_is_compute_float(x->dtype) && x->dtype != PH_DTYPE_I64 && x->dtype != PH_DTYPE_I32, d,
      PH_ERR_TENSOR_DTYPE, "ReduceSum: data is %s; expected F32, F16, BF16, I64 or I32",
      op_dtype_name(x->dtype));
  memset(out, 0, sizeof *out);
  out->dtype = x->dtype;
  out->rank = -1;
  if (x->rank < 0) {
    /* the axes are still checked as far as they can be without the rank */
    rs_plan p;
    return rs_parse(n, in, GRAPH_MAX_DIMS, &p, d);
  }
  rs_plan p;
  FORWARD_IF_ERROR(rs_parse(n, in, x->rank, &p, d));
  int r = 0;
  for (int i = 0; i < x->rank; i++) {
    if (!p.reduce[i])
      out->dims[r++] = x->dims[i];
    else if (p.keepdims)
      out->dims[r++] = 1;
  }
  out->rank = r;
  return PH_OK;
}

static size_t reduce_sum_scratch(const gnode *n, const tinfo *in, int n_threads) {
  (void)n_threads;
  tinfo o;
  if (reduce_sum_infer(n, in, &o, NULL) != PH_OK || o.rank < 0) return 0;
  int64_t cnt = 1;
  for (int i = 0; i < o.rank; i++) cnt *= o.dims[i] < 0 ? 0 : o.dims[i];
  return (size_t)cnt * 8;
}

typedef union rs_acc {
  float f;
  int64_t i;
} rs_acc;

/* The parsed axes (a constant input or the attribute) for this rank. */
static ph_status reduce_sum_plan(const gnode *n, const tinfo *in, void *plan, diag *d) {
  return rs_parse(n, in, in[0].rank, plan, d);
}

static ph_status reduce_sum_run(const gnode *n, const tensor *const *in, tensor *const *out,
                                op_ctx *ctx, diag *d) {
  (void)n;
  const tensor *x = in[0];
  tensor *y = out[0];
  RETURN_ERROR_IF(!ctx->plan, d, PH_ERR_INTERNAL, "ReduceSum: run without a plan");
  const rs_plan p = *(const rs_plan *)ctx->plan;
  int64_t nx = tensor_numel(x), ny = tensor_numel(y);
  size_t es = dtype_size(x->dtype);
  if (p.noop) {
    if (nx && y->data != x->data) memcpy(y->data, x->data, (size_t)nx * es);
    return PH_OK;
  }
  if (ny == 0) return PH_OK;
  RETURN_ERROR_IF(ctx->scratch_bytes < (size_t)ny * sizeof(rs_acc), d, PH_ERR_INTERNAL,
                  "ReduceSum: scratch of %zu bytes, need %zu", ctx->scratch_bytes,
                  (size_t)ny * sizeof(rs_acc));
  rs_acc *acc = ctx->scratch;
  int is_float = dtype_is_compute_float(x->dtype);
  for (int64_t i = 0; i < ny; i++) {
    if (is_float)
      acc[i].f = 0.0f;
    else
      acc[i].i = 0;
  }
  /* output stride of each input dim: 0 where it is reduced */
  int r = x->rank;
  int64_t os[GRAPH_MAX_DIMS], c = 1;
  for (int i = r - 1; i >= 0; i--) {
    os[i] = p.reduce[i] ? 0 : c;
    if (!p.reduce[i]) c *= x->dims[i];
  }
  if (nx > 0) {
    int64_t inner = r > 0 ? x->dims[r - 1] : 1, ios = r > 0 ? os[r - 1] : 0;
    int64_t rows = nx / inner, idx[GRAPH_MAX_DIMS] = {0}, o = 0;
    float buf[RS_CHUNK];
    for (int64_t row = 0; row < rows; row++) {
      int64_t base = row * inner;
      if (is_float) {
        for (int64_t k0 = 0; k0 < inner; k0 += RS_CHUNK) {
          int64_t m = inner - k0 < RS_CHUNK ? inner - k0 : RS_CHUNK;
          tensor_load_f32(x, base + k0, m, buf);
          for (int64_t k = 0; k < m; k++) acc[o + (k0 + k) * ios].f += buf[k];
        }
      } else {
        for (int64_t k = 0; k < inner; k++) {
          int64_t v = x->dtype == PH_DTYPE_I64 ? ((const int64_t *)x->data)[base + k]
                                               : ((const int32_t *)x->data)[base + k];
          uint64_t s = (uint64_t)acc[o + k * ios].i + (uint64_t)v;
          memcpy(&acc[o + k * ios].i, &s, 8);
        }
      }
      for (int i = r - 2; i >= 0; i--) {
        idx[i]++;
        o += os[i];
        if (idx[i] < x->dims[i]) break;
        o -= idx[i] * os[i];
        idx[i] = 0;
      }
    }
  }
  for (int64_t i = 0; i < ny; i++) {
    switch (y->dtype) {
    case PH_DTYPE_I64:
      ((int64_t *)y->data)[i] = acc[i].i;
      break;
    case PH_DTYPE_I32: {
      uint32_t w = (uint32_t)(uint64_t)acc[i].i;
      memcpy((int32_t *)y->data + i, &w, 4);
      break;
    }
    default:
      tensor_set_f32(y, i, acc[i].f);
      break;
    }
  }
  return PH_OK;
}

const op_def op_def_reduce_sum = {"",
                                  "ReduceSum",
                                  1,
                                  2,
                                  1,
                                  1,
                                  reduce_sum_infer,
                                  reduce_sum_run,
                                  reduce_sum_scratch,
                                  sizeof(rs_plan),
                                  reduce_sum_plan};
