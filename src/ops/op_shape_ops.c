/* op_shape_ops — Reshape, Transpose, Split, Slice, Concat, Unsqueeze, Squeeze, Shape (ai.onnx).
 *
 * All of them move bytes, so every dtype works. Inputs that carry shapes or positions (Reshape
 * shape, Split split, Slice starts/ends/axes/steps, Unsqueeze/Squeeze axes) must be constants:
 * infer() reads them from tinfo.data (I64 or I32, rank 0 or 1); a non-constant one is
 * PH_ERR_UNSUPPORTED ("non-constant <name> input"), because a graph whose shapes depend on data
 * cannot be planned. Contract decisions (also in docs/ops-basic.md):
 *   Reshape    opset 14: 0 copies the input dim (allowzero = 0) or means 0 (allowzero = 1, then
 *              0 and -1 together are an error); at most one -1, inferred from the element count.
 *   Transpose  perm attribute, default reversed dims; must be a permutation of 0..rank-1.
 *   Split      opset 13: axis attribute, optional constant `split` input (sizes, summing to the
 *              dim). Without it the dim is split into n_outputs equal parts and must divide
 *              evenly, unless the opset-18 attribute num_outputs is given (= n_outputs), which
 *              allows a smaller last part (ceil-sized parts). The pre-13 `split` attribute is
 *              rejected rather than half-supported.
 *   Slice      opset 13: starts, ends, optional axes and steps, with ONNX clamping: negative
 *              positions count from the end, then starts clamp to [0, d] ([0, d-1] for negative
 *              steps) and ends to [0, d] ([-1, d-1]); INT64_MAX/INT64_MIN work as "to the end".
 *   Concat     axis attribute (required); equal dtypes and ranks, equal dims off the axis.
 *   Unsqueeze  opset 13: constant axes input, in [-r', r'-1] for the output rank r'.
 *   Squeeze    opset 13: optional constant axes (each dim must be 1); without axes every dim of
 *              size 1 goes, and while a dim is unknown the output rank is unknown.
 *   Shape      opset 15: I64 [end - start] with start/end attributes clamped to [0, rank].
 * Unknown dims (-1) propagate as -1; the run-time infer with concrete shapes checks the rest.
 */
#include <string.h>

#include "ops/op.h"
#include "ops/op_util.h"
#include "tensor/dtype.h"

static ph_status check_io(const gnode *n, const char *op, int min_in, int max_in, int min_out,
                          int max_out, diag *d) {
  RETURN_ERROR_IF(n->n_inputs < min_in || n->n_inputs > max_in || n->n_outputs < min_out ||
                      n->n_outputs > max_out,
                  d, PH_ERR_INVALID_ARGUMENT,
                  "%s takes %d-%d inputs and %d-%d outputs, got %d and %d", op, min_in, max_in,
                  min_out, max_out, n->n_inputs, n->n_outputs);
  return PH_OK;
}

/* Reads a constant integer input (I64 or I32, rank 0 or 1, at most max values) into v. */
static ph_status const_ints(const char *op, const char *what, const tinfo *t, int64_t *v, int max,
                            int *n, diag *d) {
  RETURN_ERROR_IF(t->dtype != PH_DTYPE_I64 && t->dtype != PH_DTYPE_I32, d, PH_ERR_TENSOR_DTYPE,
                  "%s: %s is %s; expected I64 or I32", op, what, op_dtype_name(t->dtype));
  /* an input statically known to be empty needs no contents */
  int empty = t->rank == 1 && t->dims[0] == 0;
  RETURN_ERROR_IF(!t->data && !empty, d, PH_ERR_UNSUPPORTED, "%s: non-constant %s input", op, what);
  RETURN_ERROR_IF(t->rank < 0 || t->rank > 1, d, PH_ERR_TENSOR_SHAPE,
                  "%s: %s must be 1-D, got rank %d", op, what, t->rank);
  int64_t len = t->rank == 1 ? t->dims[0] : 1;
  RETURN_ERROR_IF(len < 0 || len > max, d, PH_ERR_TENSOR_SHAPE,
                  "%s: %s has %lld values; at most %d are supported", op, what, (long long)len,
                  max);
  for (int64_t i = 0; i < len; i++) {
    if (t->dtype == PH_DTYPE_I64) {
      memcpy(&v[i], (const char *)t->data + 8 * i, 8);
    } else {
      int32_t x;
      memcpy(&x, (const char *)t->data + 4 * i, 4);
      v[i] = x;
    }
  }
  *n = (int)len;
  return PH_OK;
}

/* Contiguous element strides of a tensor. */
static void strides_of(int rank, const int64_t *dims, int64_t *s) {
  int64_t c = 1;
  for (int i = rank - 1; i >= 0; i--) {
    s[i] = c;
    c *= dims[i];
  }
}

/* Writes the [odims] tensor whose element (i0..i(r-1)) is src[base + sum i_j * istride_j]
 * (elements of es bytes; strides may be negative) contiguously into dst. */
static void strided_copy(const char *src, int64_t base, const int64_t *istride,
                         const int64_t *odims, int rank, size_t es, char *dst) {
  if (rank == 0) {
    memcpy(dst, src + base * (int64_t)es, es);
    return;
  }
  int64_t total = 1;
  for (int i = 0; i < rank; i++) total *= odims[i];
  if (total == 0) return;
  int64_t inner = odims[rank - 1], is = istride[rank - 1], rows = total / inner;
  int64_t idx[GRAPH_MAX_DIMS] = {0}, off = base;
  for (int64_t row = 0; row < rows; row++) {
    const char *s = src + off * (int64_t)es;
    if (is == 1) {
      memcpy(dst, s, (size_t)inner * es);
    } else {
      int64_t step = is * (int64_t)es;
      switch (es) {
      case 2:
        for (int64_t k = 0; k < inner; k++) memcpy(dst + 2 * k, s + k * step, 2);
        break;
      case 4:
        for (int64_t k = 0; k < inner; k++) memcpy(dst + 4 * k, s + k * step, 4);
        break;
      case 8:
        for (int64_t k = 0; k < inner; k++) memcpy(dst + 8 * k, s + k * step, 8);
        break;
      default:
        for (int64_t k = 0; k < inner; k++) memcpy(dst + (size_t)k * es, s + k * step, es);
        break;
      }
    }
    dst += (size_t)inner * es;
    for (int i = rank - 2; i >= 0; i--) {
      idx[i]++;
      off += istride[i];
      if (idx[i] < odims[i]) break;
      off -= idx[i] * istride[i];
      idx[i] = 0;
    }
  }
}

/* Output = input bytes (Reshape, Unsqueeze, Squeeze). */
static ph_status copy_run(const gnode *n, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                          diag *d) {
  (void)n;
  (void)ctx;
  (void)d;
  size_t bytes = (size_t)tensor_numel(in[0]) * dtype_size(in[0]->dtype);
  if (bytes && out[0]->data != in[0]->data) memcpy(out[0]->data, in[0]->data, bytes);
  return PH_OK;
}

/* ---- Reshape -------------------------------------------------------------------------------- */

static ph_status reshape_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  FORWARD_IF_ERROR(check_io(n, "Reshape", 2, 2, 1, 1, d));
  RETURN_ERROR_IF(!op_has_input(n, in, 0) || !op_has_input(n, in, 1), d, PH_ERR_INVALID_ARGUMENT,
                  "Reshape: data and shape are required");
  int64_t allowzero = 0;
  FORWARD_IF_ERROR(op_attr_int(n, "allowzero", 0, &allowzero, d));
  int64_t shp[GRAPH_MAX_DIMS];
  int r = 0;
  FORWARD_IF_ERROR(const_ints("Reshape", "shape", &in[1], shp, GRAPH_MAX_DIMS, &r, d));
  const tinfo *x = &in[0];
  memset(out, 0, sizeof *out);
  out->dtype = x->dtype;
  out->rank = r;
  int infer_at = -1, has_zero = 0, unknown = 0;
  int64_t known = 1;
  for (int i = 0; i < r; i++) {
    int64_t v = shp[i];
    RETURN_ERROR_IF(v < -1, d, PH_ERR_INVALID_ARGUMENT, "Reshape: shape[%d] = %lld is invalid", i,
                    (long long)v);
    if (v == -1) {
      RETURN_ERROR_IF(infer_at >= 0, d, PH_ERR_INVALID_ARGUMENT,
                      "Reshape: shape has more than one -1 (at %d and %d)", infer_at, i);
      infer_at = i;
      continue;
    }
    if (v == 0 && !allowzero) {
      RETURN_ERROR_IF(x->rank >= 0 && i >= x->rank, d, PH_ERR_INVALID_ARGUMENT,
                      "Reshape: shape[%d] = 0 copies a dim the rank-%d input does not have", i,
                      x->rank);
      v = x->rank >= 0 ? x->dims[i] : -1;
    } else if (v == 0) {
      has_zero = 1;
    }
    out->dims[i] = v;
    if (v < 0)
      unknown = 1;
    else
      known *= v;
  }
  RETURN_ERROR_IF(has_zero && infer_at >= 0, d, PH_ERR_INVALID_ARGUMENT,
                  "Reshape: with allowzero = 1, shape cannot hold both 0 and -1");
  int64_t total = tinfo_numel(x);
  if (infer_at >= 0) {
    out->dims[infer_at] = -1;
    if (total >= 0 && !unknown) {
      RETURN_ERROR_IF(known == 0, d, PH_ERR_TENSOR_SHAPE,
                      "Reshape: cannot infer the -1 dim next to a zero-sized dim");
      RETURN_ERROR_IF(total % known != 0, d, PH_ERR_TENSOR_SHAPE,
                      "Reshape: %lld elements do not divide into shape with known product %lld",
                      (long long)total, (long long)known);
      out->dims[infer_at] = total / known;
    }
  } else if (total >= 0 && !unknown) {
    RETURN_ERROR_IF(total != known, d, PH_ERR_TENSOR_SHAPE,
                    "Reshape: input has %lld elements but the shape holds %lld", (long long)total,
                    (long long)known);
  }
  return PH_OK;
}

const op_def op_def_reshape = {"", "Reshape", 2, 2, 1, 1, reshape_infer, copy_run, NULL, 0, NULL};

/* ---- Transpose ------------------------------------------------------------------------------ */

/* perm for rank r (default reversed); validated. */
static ph_status transpose_perm(const gnode *n, int r, int *perm, diag *d) {
  const int64_t *pv = NULL;
  int np = 0;
  FORWARD_IF_ERROR(op_attr_ints(n, "perm", &pv, &np, d));
  if (np < 0) {
    for (int i = 0; i < r; i++) perm[i] = r - 1 - i;
    return PH_OK;
  }
  RETURN_ERROR_IF(np != r, d, PH_ERR_INVALID_ARGUMENT,
                  "Transpose: perm has %d entries for an input of rank %d", np, r);
  int seen[GRAPH_MAX_DIMS] = {0};
  for (int i = 0; i < r; i++) {
    int64_t p = pv[i];
    RETURN_ERROR_IF(p < 0 || p >= r, d, PH_ERR_INVALID_ARGUMENT,
                    "Transpose: perm[%d] = %lld is out of range for rank %d", i, (long long)p, r);
    RETURN_ERROR_IF(seen[p], d, PH_ERR_INVALID_ARGUMENT,
                    "Transpose: perm repeats %lld; it must be a permutation", (long long)p);
    seen[p] = 1;
    perm[i] = (int)p;
  }
  return PH_OK;
}

static ph_status transpose_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  FORWARD_IF_ERROR(check_io(n, "Transpose", 1, 1, 1, 1, d));
  RETURN_ERROR_IF(!op_has_input(n, in, 0), d, PH_ERR_INVALID_ARGUMENT,
                  "Transpose: data is required");
  memset(out, 0, sizeof *out);
  out->dtype = in[0].dtype;
  int r = in[0].rank;
  if (r < 0) {
    /* the rank is perm's length when given; the dims stay unknown */
    const gattr *a = node_attr(n, "perm");
    out->rank = -1;
    if (a && a->type == ATTR_INTS && a->n <= GRAPH_MAX_DIMS) {
      int perm[GRAPH_MAX_DIMS];
      FORWARD_IF_ERROR(transpose_perm(n, a->n, perm, d));
      out->rank = a->n;
      for (int i = 0; i < a->n; i++) out->dims[i] = -1;
    }
    return PH_OK;
  }
  int perm[GRAPH_MAX_DIMS];
  FORWARD_IF_ERROR(transpose_perm(n, r, perm, d));
  out->rank = r;
  for (int i = 0; i < r; i++) out->dims[i] = in[0].dims[perm[i]];
  return PH_OK;
}

static ph_status transpose_run(const gnode *n, const tensor *const *in, tensor *const *out,
                               op_ctx *ctx, diag *d) {
  (void)ctx;
  const tensor *x = in[0];
  int perm[GRAPH_MAX_DIMS];
  FORWARD_IF_ERROR(transpose_perm(n, x->rank, perm, d));
  int64_t s[GRAPH_MAX_DIMS], is[GRAPH_MAX_DIMS];
  strides_of(x->rank, x->dims, s);
  for (int i = 0; i < x->rank; i++) is[i] = s[perm[i]];
  strided_copy(x->data, 0, is, out[0]->dims, out[0]->rank, dtype_size(x->dtype), out[0]->data);
  return PH_OK;
}

const op_def op_def_transpose = {"",   "Transpose", 1,   1, 1, 1, transpose_infer, transpose_run,
                                 NULL, 0,           NULL};

/* ---- Split ---------------------------------------------------------------------------------- */

#define SPLIT_MAX_OUTPUTS 64

static ph_status split_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  FORWARD_IF_ERROR(check_io(n, "Split", 1, 2, 1, SPLIT_MAX_OUTPUTS, d));
  RETURN_ERROR_IF(!op_has_input(n, in, 0), d, PH_ERR_INVALID_ARGUMENT, "Split: input is required");
  RETURN_ERROR_IF(node_attr(n, "split") != NULL, d, PH_ERR_INVALID_ARGUMENT,
                  "Split: the split attribute is opset < 13; pass split as the second input");
  int k = n->n_outputs;
  int64_t num_outputs = 0, axis_attr = 0;
  FORWARD_IF_ERROR(op_attr_int(n, "num_outputs", 0, &num_outputs, d));
  RETURN_ERROR_IF(node_attr(n, "num_outputs") && num_outputs != k, d, PH_ERR_INVALID_ARGUMENT,
                  "Split: num_outputs = %lld but the node has %d outputs", (long long)num_outputs,
                  k);
  FORWARD_IF_ERROR(op_attr_int(n, "axis", 0, &axis_attr, d));
  int64_t sizes[SPLIT_MAX_OUTPUTS];
  int has_split = op_has_input(n, in, 1), n_split = 0;
  if (has_split) {
    FORWARD_IF_ERROR(const_ints("Split", "split", &in[1], sizes, SPLIT_MAX_OUTPUTS, &n_split, d));
    RETURN_ERROR_IF(n_split != k, d, PH_ERR_INVALID_ARGUMENT,
                    "Split: split has %d sizes for %d outputs", n_split, k);
    for (int i = 0; i < k; i++)
      RETURN_ERROR_IF(sizes[i] < 0, d, PH_ERR_INVALID_ARGUMENT, "Split: split[%d] = %lld < 0", i,
                      (long long)sizes[i]);
  }
  const tinfo *x = &in[0];
  for (int i = 0; i < k; i++) {
    memset(&out[i], 0, sizeof out[i]);
    out[i].dtype = x->dtype;
    out[i].rank = x->rank;
    for (int j = 0; j < (x->rank > 0 ? x->rank : 0); j++) out[i].dims[j] = x->dims[j];
  }
  if (x->rank < 0) return PH_OK;
  int axis = 0;
  FORWARD_IF_ERROR(op_norm_axis(n, axis_attr, x->rank, &axis, d));
  int64_t dim = x->dims[axis];
  if (has_split) {
    int64_t sum = 0;
    for (int i = 0; i < k; i++) sum += sizes[i];
    RETURN_ERROR_IF(dim >= 0 && sum != dim, d, PH_ERR_TENSOR_SHAPE,
                    "Split: split sizes sum to %lld but axis %d has %lld", (long long)sum, axis,
                    (long long)dim);
  } else if (dim < 0) {
    for (int i = 0; i < k; i++) sizes[i] = -1;
  } else if (node_attr(n, "num_outputs")) {
    int64_t chunk = (dim + k - 1) / k;
    RETURN_ERROR_IF(chunk * (k - 1) > dim, d, PH_ERR_TENSOR_SHAPE,
                    "Split: %lld elements along axis %d cannot form %d parts of %lld",
                    (long long)dim, axis, k, (long long)chunk);
    for (int i = 0; i < k; i++) sizes[i] = i + 1 < k ? chunk : dim - chunk * (k - 1);
  } else {
    RETURN_ERROR_IF(dim % k != 0, d, PH_ERR_TENSOR_SHAPE,
                    "Split: axis %d has %lld elements, not divisible into %d equal outputs; "
                    "pass split sizes",
                    axis, (long long)dim, k);
    for (int i = 0; i < k; i++) sizes[i] = dim / k;
  }
  for (int i = 0; i < k; i++) out[i].dims[axis] = sizes[i];
  return PH_OK;
}

static ph_status split_run(const gnode *n, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                           diag *d) {
  (void)ctx;
  const tensor *x = in[0];
  int64_t axis_attr = 0;
  FORWARD_IF_ERROR(op_attr_int(n, "axis", 0, &axis_attr, d));
  int axis = 0;
  FORWARD_IF_ERROR(op_norm_axis(n, axis_attr, x->rank, &axis, d));
  int64_t outer = 1, inner = 1, dim = x->dims[axis];
  for (int i = 0; i < axis; i++) outer *= x->dims[i];
  for (int i = axis + 1; i < x->rank; i++) inner *= x->dims[i];
  size_t es = dtype_size(x->dtype);
  /* the outputs' own dims along the axis are the split sizes (infer made them) */
  int64_t off = 0;
  for (int i = 0; i < n->n_outputs; i++) {
    if (!out[i]) continue;
    int64_t s = out[i]->dims[axis];
    size_t run = (size_t)(s * inner) * es;
    if (run)
      for (int64_t o = 0; o < outer; o++)
        memcpy((char *)out[i]->data + (size_t)o * run,
               (const char *)x->data + (size_t)((o * dim + off) * inner) * es, run);
    off += s;
  }
  return PH_OK;
}

const op_def op_def_split = {"",          "Split",   1,    2, 1,   SPLIT_MAX_OUTPUTS,
                             split_infer, split_run, NULL, 0, NULL};

/* ---- Slice ---------------------------------------------------------------------------------- */

/* Per data axis: first element, step and count (unsliced axes: 0, 1, dim). */
typedef struct slice_params {
  int64_t start[GRAPH_MAX_DIMS], step[GRAPH_MAX_DIMS], len[GRAPH_MAX_DIMS];
} slice_params;

/* ONNX clamping for one axis of size dim (known): first element, count, and the step (set to
 * 1 when at most one element is taken, so huge steps never reach stride arithmetic). Written
 * to stay clear of signed overflow for any int64 starts, ends and steps. */
static void slice_axis(int64_t st, int64_t en, int64_t step, int64_t dim, int64_t *start,
                       int64_t *len, int64_t *step_out) {
  if (st < -dim) st = -dim - 1; /* beyond the front: after + dim it clamps like -1 */
  if (en < -dim) en = -dim - 1;
  if (st < 0) st += dim;
  if (en < 0) en += dim;
  uint64_t ustep = step > 0 ? (uint64_t)step : 0u - (uint64_t)step;
  int64_t n;
  if (step > 0) {
    st = st < 0 ? 0 : st > dim ? dim : st;
    en = en < 0 ? 0 : en > dim ? dim : en;
    n = en > st ? (int64_t)((uint64_t)(en - st - 1) / ustep) + 1 : 0;
  } else {
    st = st < 0 ? 0 : st > dim - 1 ? dim - 1 : st;
    en = en < -1 ? -1 : en > dim - 1 ? dim - 1 : en;
    n = st > en ? (int64_t)((uint64_t)(st - en - 1) / ustep) + 1 : 0;
  }
  *start = n > 0 ? st : 0;
  *len = n;
  *step_out = n > 1 ? step : 1;
}

/* Reads and checks starts/ends/axes/steps for data x (rank known). Unknown dims of sliced axes
 * give len -1. */
static ph_status slice_parse(const gnode *n, const tinfo *in, slice_params *p, diag *d) {
  const tinfo *x = &in[0];
  int r = x->rank;
  int64_t st[GRAPH_MAX_DIMS], en[GRAPH_MAX_DIMS], ax[GRAPH_MAX_DIMS], sp[GRAPH_MAX_DIMS];
  int ns = 0, ne = 0, na = 0, nst = 0;
  FORWARD_IF_ERROR(const_ints("Slice", "starts", &in[1], st, GRAPH_MAX_DIMS, &ns, d));
  FORWARD_IF_ERROR(const_ints("Slice", "ends", &in[2], en, GRAPH_MAX_DIMS, &ne, d));
  RETURN_ERROR_IF(ns != ne, d, PH_ERR_INVALID_ARGUMENT,
                  "Slice: starts has %d values but ends has %d", ns, ne);
  if (op_has_input(n, in, 3)) {
    FORWARD_IF_ERROR(const_ints("Slice", "axes", &in[3], ax, GRAPH_MAX_DIMS, &na, d));
    RETURN_ERROR_IF(na != ns, d, PH_ERR_INVALID_ARGUMENT,
                    "Slice: axes has %d values but starts has %d", na, ns);
  } else {
    RETURN_ERROR_IF(ns > r, d, PH_ERR_INVALID_ARGUMENT, "Slice: %d starts for data of rank %d", ns,
                    r);
    for (int i = 0; i < ns; i++) ax[i] = i;
  }
  if (op_has_input(n, in, 4)) {
    FORWARD_IF_ERROR(const_ints("Slice", "steps", &in[4], sp, GRAPH_MAX_DIMS, &nst, d));
    RETURN_ERROR_IF(nst != ns, d, PH_ERR_INVALID_ARGUMENT,
                    "Slice: steps has %d values but starts has %d", nst, ns);
  } else {
    for (int i = 0; i < ns; i++) sp[i] = 1;
  }
  int seen[GRAPH_MAX_DIMS] = {0};
  for (int i = 0; i < r; i++) {
    p->start[i] = 0;
    p->step[i] = 1;
    p->len[i] = x->dims[i];
  }
  for (int i = 0; i < ns; i++) {
    int a = 0;
    FORWARD_IF_ERROR(op_norm_axis(n, ax[i], r, &a, d));
    RETURN_ERROR_IF(seen[a], d, PH_ERR_INVALID_ARGUMENT, "Slice: axis %d appears twice", a);
    seen[a] = 1;
    RETURN_ERROR_IF(sp[i] == 0, d, PH_ERR_INVALID_ARGUMENT, "Slice: steps[%d] is 0", i);
    if (x->dims[a] < 0) {
      p->len[a] = -1;
      continue;
    }
    slice_axis(st[i], en[i], sp[i], x->dims[a], &p->start[a], &p->len[a], &p->step[a]);
  }
  return PH_OK;
}

static ph_status slice_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  FORWARD_IF_ERROR(check_io(n, "Slice", 3, 5, 1, 1, d));
  RETURN_ERROR_IF(!op_has_input(n, in, 0) || !op_has_input(n, in, 1) || !op_has_input(n, in, 2), d,
                  PH_ERR_INVALID_ARGUMENT, "Slice: data, starts and ends are required");
  memset(out, 0, sizeof *out);
  out->dtype = in[0].dtype;
  out->rank = in[0].rank;
  if (in[0].rank < 0) return PH_OK;
  slice_params p;
  FORWARD_IF_ERROR(slice_parse(n, in, &p, d));
  for (int i = 0; i < in[0].rank; i++) out->dims[i] = p.len[i];
  return PH_OK;
}

/* The clamped starts, lengths and steps of these shapes and constant bounds. */
static ph_status slice_plan(const gnode *n, const tinfo *in, void *plan, diag *d) {
  return slice_parse(n, in, plan, d);
}

static ph_status slice_run(const gnode *n, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                           diag *d) {
  (void)n;
  RETURN_ERROR_IF(!ctx->plan, d, PH_ERR_INTERNAL, "Slice: run without a plan");
  const slice_params p = *(const slice_params *)ctx->plan;
  const tensor *x = in[0];
  int64_t s[GRAPH_MAX_DIMS], is[GRAPH_MAX_DIMS], base = 0;
  strides_of(x->rank, x->dims, s);
  for (int i = 0; i < x->rank; i++) {
    base += p.start[i] * s[i];
    is[i] = p.step[i] * s[i];
  }
  strided_copy(x->data, base, is, out[0]->dims, out[0]->rank, dtype_size(x->dtype), out[0]->data);
  return PH_OK;
}

const op_def op_def_slice = {
    "", "Slice", 3, 5, 1, 1, slice_infer, slice_run, NULL, sizeof(slice_params), slice_plan};

/* ---- Concat --------------------------------------------------------------------------------- */

#define CONCAT_MAX_INPUTS 64

static ph_status concat_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  FORWARD_IF_ERROR(check_io(n, "Concat", 1, CONCAT_MAX_INPUTS, 1, 1, d));
  const gattr *a = node_attr(n, "axis");
  RETURN_ERROR_IF(!a || a->type != ATTR_INT, d, PH_ERR_INVALID_ARGUMENT,
                  "Concat: int attribute axis is required");
  int r = -1;
  for (int i = 0; i < n->n_inputs; i++) {
    RETURN_ERROR_IF(!op_has_input(n, in, i), d, PH_ERR_INVALID_ARGUMENT,
                    "Concat: input %d is missing", i);
    RETURN_ERROR_IF(in[i].dtype != in[0].dtype, d, PH_ERR_TENSOR_DTYPE,
                    "Concat: input %d is %s but input 0 is %s", i, op_dtype_name(in[i].dtype),
                    op_dtype_name(in[0].dtype));
    if (in[i].rank < 0) continue;
    RETURN_ERROR_IF(r >= 0 && in[i].rank != r, d, PH_ERR_TENSOR_SHAPE,
                    "Concat: input %d has rank %d, others rank %d", i, in[i].rank, r);
    r = in[i].rank;
  }
  memset(out, 0, sizeof *out);
  out->dtype = in[0].dtype;
  out->rank = r;
  if (r < 0) return PH_OK;
  RETURN_ERROR_IF(r == 0, d, PH_ERR_TENSOR_SHAPE, "Concat: inputs must have rank >= 1");
  int axis = 0;
  FORWARD_IF_ERROR(op_norm_axis(n, a->i, r, &axis, d));
  for (int j = 0; j < r; j++) out->dims[j] = j == axis ? 0 : -1;
  for (int i = 0; i < n->n_inputs; i++) {
    for (int j = 0; j < r; j++) {
      int64_t v = in[i].rank < 0 ? -1 : in[i].dims[j];
      if (j == axis) {
        out->dims[j] = v < 0 || out->dims[j] < 0 ? -1 : out->dims[j] + v;
        continue;
      }
      RETURN_ERROR_IF(v >= 0 && out->dims[j] >= 0 && v != out->dims[j], d, PH_ERR_TENSOR_SHAPE,
                      "Concat: input %d has dim %d = %lld, another input has %lld", i, j,
                      (long long)v, (long long)out->dims[j]);
      if (v >= 0) out->dims[j] = v;
    }
  }
  return PH_OK;
}

static ph_status concat_run(const gnode *n, const tensor *const *in, tensor *const *out,
                            op_ctx *ctx, diag *d) {
  (void)ctx;
  const tensor *y = out[0];
  const gattr *a = node_attr(n, "axis");
  RETURN_ERROR_IF(!a, d, PH_ERR_INVALID_ARGUMENT, "Concat: attribute axis is required");
  int axis = 0;
  FORWARD_IF_ERROR(op_norm_axis(n, a->i, y->rank, &axis, d));
  int64_t outer = 1, inner = 1;
  for (int i = 0; i < axis; i++) outer *= y->dims[i];
  for (int i = axis + 1; i < y->rank; i++) inner *= y->dims[i];
  size_t es = dtype_size(y->dtype);
  char *dst = y->data;
  for (int64_t o = 0; o < outer; o++)
    for (int i = 0; i < n->n_inputs; i++) {
      size_t run = (size_t)(in[i]->dims[axis] * inner) * es;
      if (!run) continue;
      memcpy(dst, (const char *)in[i]->data + (size_t)o * run, run);
      dst += run;
    }
  return PH_OK;
}

const op_def op_def_concat = {
    "", "Concat", 1, CONCAT_MAX_INPUTS, 1, 1, concat_infer, concat_run, NULL, 0, NULL};

/* ---- Unsqueeze ------------------------------------------------------------------------------ */

static ph_status unsqueeze_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  FORWARD_IF_ERROR(check_io(n, "Unsqueeze", 2, 2, 1, 1, d));
  RETURN_ERROR_IF(!op_has_input(n, in, 0) || !op_has_input(n, in, 1), d, PH_ERR_INVALID_ARGUMENT,
                  "Unsqueeze: data and axes are required");
  int64_t axes[GRAPH_MAX_DIMS];
  int na = 0;
  FORWARD_IF_ERROR(const_ints("Unsqueeze", "axes", &in[1], axes, GRAPH_MAX_DIMS, &na, d));
  memset(out, 0, sizeof *out);
  out->dtype = in[0].dtype;
  out->rank = -1;
  if (in[0].rank < 0) return PH_OK;
  int r = in[0].rank + na;
  RETURN_ERROR_IF(r > GRAPH_MAX_DIMS, d, PH_ERR_TENSOR_SHAPE,
                  "Unsqueeze: output rank %d exceeds %d", r, GRAPH_MAX_DIMS);
  int is_new[GRAPH_MAX_DIMS] = {0};
  for (int i = 0; i < na; i++) {
    int a = 0;
    FORWARD_IF_ERROR(op_norm_axis(n, axes[i], r, &a, d));
    RETURN_ERROR_IF(is_new[a], d, PH_ERR_INVALID_ARGUMENT, "Unsqueeze: axis %d appears twice", a);
    is_new[a] = 1;
  }
  for (int i = 0, j = 0; i < r; i++) out->dims[i] = is_new[i] ? 1 : in[0].dims[j++];
  out->rank = r;
  return PH_OK;
}

const op_def op_def_unsqueeze = {"",       "Unsqueeze", 2, 2,   1, 1, unsqueeze_infer,
                                 copy_run, NULL,        0, NULL};

/* ---- Squeeze -------------------------------------------------------------------------------- */

static ph_status squeeze_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  FORWARD_IF_ERROR(check_io(n, "Squeeze", 1, 2, 1, 1, d));
  RETURN_ERROR_IF(!op_has_input(n, in, 0), d, PH_ERR_INVALID_ARGUMENT, "Squeeze: data is required");
  int64_t axes[GRAPH_MAX_DIMS];
  int na = 0, has_axes = op_has_input(n, in, 1);
  if (has_axes)
    FORWARD_IF_ERROR(const_ints("Squeeze", "axes", &in[1], axes, GRAPH_MAX_DIMS, &na, d));
  const tinfo *x = &in[0];
  memset(out, 0, sizeof *out);
  out->dtype = x->dtype;
  out->rank = -1;
  if (x->rank < 0) return PH_OK;
  int drop[GRAPH_MAX_DIMS] = {0};
  if (has_axes) {
    for (int i = 0; i < na; i++) {
      int a = 0;
      FORWARD_IF_ERROR(op_norm_axis(n, axes[i], x->rank, &a, d));
      RETURN_ERROR_IF(drop[a], d, PH_ERR_INVALID_ARGUMENT, "Squeeze: axis %d appears twice", a);
      RETURN_ERROR_IF(x->dims[a] >= 0 && x->dims[a] != 1, d, PH_ERR_TENSOR_SHAPE,
                      "Squeeze: dim %d is %lld, not 1", a, (long long)x->dims[a]);
      drop[a] = 1;
    }
  } else {
    for (int i = 0; i < x->rank; i++) {
      if (x->dims[i] < 0) return PH_OK; /* whether it goes is unknown until run time */
      drop[i] = x->dims[i] == 1;
    }
  }
  int r = 0;
  for (int i = 0; i < x->rank; i++)
    if (!drop[i]) out->dims[r++] = x->dims[i];
  out->rank = r;
  return PH_OK;
}

const op_def op_def_squeeze = {"", "Squeeze", 1, 2, 1, 1, squeeze_infer, copy_run, NULL, 0, NULL};

/* ---- Shape ---------------------------------------------------------------------------------- */

static ph_status shape_range(const gnode *n, int r, int64_t *start, int64_t *end, diag *d) {
  FORWARD_IF_ERROR(op_attr_int(n, "start", 0, start, d));
  FORWARD_IF_ERROR(op_attr_int(n, "end", r, end, d));
  if (*start < 0) *start += r;
  if (*end < 0) *end += r;
  *start = *start < 0 ? 0 : *start > r ? r : *start;
  *end = *end < 0 ? 0 : *end > r ? r : *end;
  if (*end < *start) *end = *start;
  return PH_OK;
}

static ph_status shape_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  FORWARD_IF_ERROR(check_io(n, "Shape", 1, 1, 1, 1, d));
  RETURN_ERROR_IF(!op_has_input(n, in, 0), d, PH_ERR_INVALID_ARGUMENT, "Shape: data is required");
  memset(out, 0, sizeof *out);
  out->dtype = PH_DTYPE_I64;
  out->rank = 1;
  out->dims[0] = -1;
  if (in[0].rank < 0) return PH_OK;
  int64_t start = 0, end = 0;
  FORWARD_IF_ERROR(shape_range(n, in[0].rank, &start, &end, d));
  out->dims[0] = end - start;
  return PH_OK;
}

static ph_status shape_run(const gnode *n, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                           diag *d) {
  (void)ctx;
  int64_t start = 0, end = 0;
  FORWARD_IF_ERROR(shape_range(n, in[0]->rank, &start, &end, d));
  int64_t *y = out[0]->data;
  for (int64_t i = start; i < end; i++) y[i - start] = in[0]->dims[i];
  return PH_OK;
}

const op_def op_def_shape = {"", "Shape", 1, 1, 1, 1, shape_infer, shape_run, NULL, 0, NULL};
