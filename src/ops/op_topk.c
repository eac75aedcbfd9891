/* op_topk — TopK (ai.onnx opset 11): the K largest elements along an axis and their indices.
 *
 * Inputs: X (f32, f16, bf16) of rank >= 1 and K, a constant I64 holding one value (shape [1], or
 * a scalar), 0 <= K <= the axis' length; a K that is not a constant is PH_ERR_UNSUPPORTED (it
 * fixes the output shape). Attributes: axis (default -1), largest (default 1; 0, the K
 * smallest, is PH_ERR_UNSUPPORTED), sorted (default 1; with 0 ONNX leaves the order open and we
 * return the sorted order anyway). Outputs: Values (X's dtype) and Indices (I64), both shaped
 * like X with the axis' length replaced by K.
 *
 * Order: decreasing value; equal values in increasing index (the ONNX rule: the lower index
 * first); a NaN ranks above every number (NaNs among themselves by index). Each slice along the
 * axis is sorted by a stable bottom-up merge sort of its indices (O(n log n), no dependence on
 * anything but the slice's values), so a slice's result is the same whatever else the tensor
 * holds; slices are split over the pool. Values are copied exactly (f16/bf16 -> f32 -> back is
 * exact). Scratch: per thread the slice's values in f32 and two index arrays.
 */
#include <math.h>
#include <string.h>

#include "ops/op.h"
#include "ops/op_util.h"
#include "tensor/dtype.h"

typedef struct topk_plan {
  int64_t outer, n, inner; /* X = [outer, n, inner] around the axis */
  int64_t K;
} topk_plan;

/* K from the constant input (infer has checked dtype and size). */
static int64_t topk_k_value(const tinfo *k) {
  int64_t v;
  memcpy(&v, k->data, 8);
  return v;
}

static ph_status topk_resolve(const gnode *n, const tinfo *in, tinfo *out, topk_plan *p, diag *d) {
  RETURN_ERROR_IF(n->n_inputs != 2 || n->n_outputs != 2, d, PH_ERR_INVALID_ARGUMENT,
                  "TopK takes 2 inputs and 2 outputs, got %d and %d", n->n_inputs, n->n_outputs);
  const tinfo *x = &in[0], *k = &in[1];
  RETURN_ERROR_IF(x->dtype == PH_DTYPE_INVALID || k->dtype == PH_DTYPE_INVALID, d,
                  PH_ERR_INVALID_ARGUMENT, "TopK: X and K are required");
  RETURN_ERROR_IF(!dtype_is_compute_float(x->dtype), d, PH_ERR_TENSOR_DTYPE,
                  "TopK: X is %s; expected F32, F16 or BF16", op_dtype_name(x->dtype));
  RETURN_ERROR_IF(k->dtype != PH_DTYPE_I64, d, PH_ERR_TENSOR_DTYPE, "TopK: K is %s; expected I64",
                  op_dtype_name(k->dtype));
  RETURN_ERROR_IF(k->rank > 1 || (k->rank == 1 && k->dims[0] >= 0 && k->dims[0] != 1), d,
                  PH_ERR_TENSOR_SHAPE, "TopK: K must hold one value ([1]), got rank %d%s", k->rank,
                  k->rank == 1 ? " with another length" : "");
  RETURN_ERROR_IF(!k->data, d, PH_ERR_UNSUPPORTED, "TopK: non-constant K input");
  RETURN_ERROR_IF(k->rank < 0, d, PH_ERR_TENSOR_SHAPE, "TopK: K must hold one value ([1])");
  int64_t K = topk_k_value(k), largest = 1, sorted = 1, axis = -1;
  RETURN_ERROR_IF(K < 0, d, PH_ERR_INVALID_ARGUMENT, "TopK: K must be >= 0, got %lld",
                  (long long)K);
  FORWARD_IF_ERROR(op_attr_int(n, "largest", 1, &largest, d));
  RETURN_ERROR_IF(largest != 1, d, PH_ERR_UNSUPPORTED,
                  "TopK: largest = %lld is not supported (only 1, the K largest)",
                  (long long)largest);
  FORWARD_IF_ERROR(op_attr_int(n, "sorted", 1, &sorted, d));
  RETURN_ERROR_IF(sorted != 0 && sorted != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "TopK: sorted must be 0 or 1, got %lld", (long long)sorted);
  FORWARD_IF_ERROR(op_attr_int(n, "axis", -1, &axis, d));
  memset(out, 0, 2 * sizeof *out);
  out[0].dtype = x->dtype;
  out[1].dtype = PH_DTYPE_I64;
  out[0].rank = out[1].rank = x->rank;
  if (x->rank < 0) return PH_OK;
  RETURN_ERROR_IF(x->rank == 0, d, PH_ERR_TENSOR_SHAPE, "TopK: X must have rank >= 1");
  int ax = 0;
  FORWARD_IF_ERROR(op_norm_axis(n, axis, x->rank, &ax, d));
  RETURN_ERROR_IF(x->dims[ax] >= 0 && K > x->dims[ax], d, PH_ERR_INVALID_ARGUMENT,
                  "TopK: K = %lld is more than the %lld elements along axis %d", (long long)K,
                  (long long)x->dims[ax], ax);
  for (int i = 0; i < x->rank; i++) out[0].dims[i] = out[1].dims[i] = i == ax ? K : x->dims[i];
  if (p) {
    p->outer = p->inner = 1;
    for (int i = 0; i < ax; i++) p->outer *= x->dims[i];
    for (int i = ax + 1; i < x->rank; i++) p->inner *= x->dims[i];
    p->n = x->dims[ax];
    p->K = K;
  }
  return PH_OK;
}

static ph_status topk_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  return topk_resolve(n, in, out, NULL, d);
}

static ph_status topk_plan_fn(const gnode *n, const tinfo *in, void *plan, diag *d) {
  tinfo out[2];
  return topk_resolve(n, in, out, plan, d);
}

/* Per thread: n floats, then two arrays of n int32 (merge sort source and destination). */
static size_t topk_per_thread(int64_t n) {
  return (size_t)n * (sizeof(float) + 2 * sizeof(int32_t));
}

static size_t topk_scratch(const gnode *n, const tinfo *in, int n_threads) {
  topk_plan p;
  tinfo out[2];
  if (topk_resolve(n, in, out, &p, NULL) != PH_OK || in[0].rank < 1 || p.n < 0) return 0;
  return (size_t)(n_threads > 0 ? n_threads : 1) * topk_per_thread(p.n);
}

/* a ranks before b: larger value, a NaN above any number. Ties return 0 (stability keeps the
 * index order). */
static int topk_before(float a, float b) { return (isnan(a) && !isnan(b)) || a > b; }

/* Sorts idx[0..n) by v, stably, using tmp; returns the array holding the result. */
static int32_t *topk_sort(const float *v, int32_t *idx, int32_t *tmp, int64_t n) {
  for (int64_t w = 1; w < n; w *= 2) {
    for (int64_t lo = 0; lo < n; lo += 2 * w) {
      int64_t mid = lo + w < n ? lo + w : n, hi = lo + 2 * w < n ? lo + 2 * w : n;
      int64_t a = lo, b = mid, o = lo;
      while (a < mid && b < hi) tmp[o++] = topk_before(v[idx[b]], v[idx[a]]) ? idx[b++] : idx[a++];
      while (a < mid) tmp[o++] = idx[a++];
      while (b < hi) tmp[o++] = idx[b++];
    }
    int32_t *t = idx;
    idx = tmp;
    tmp = t;
  }
  return idx;
}

typedef struct topk_job {
  topk_plan p;
  const tensor *x;
  tensor *values, *indices; /* either may be NULL (output not requested) */
  unsigned char *scratch;
  int64_t n_slices, n_tasks;
} topk_job;

static void topk_task(void *ctx, size_t task, int thread) {
  const topk_job *j = ctx;
  const topk_plan *p = &j->p;
  unsigned char *s = j->scratch + (size_t)thread * topk_per_thread(p->n);
  float *v = (float *)s;
  int32_t *idx = (int32_t *)(v + p->n), *tmp = idx + p->n;
  int64_t a = (int64_t)task * j->n_slices / j->n_tasks;
  int64_t b = ((int64_t)task + 1) * j->n_slices / j->n_tasks;
  for (int64_t sl = a; sl < b; sl++) {
    int64_t o = sl / p->inner, in = sl % p->inner;
    int64_t base = o * p->n * p->inner + in, obase = o * p->K * p->inner + in;
    if (p->inner == 1)
      tensor_load_f32(j->x, base, p->n, v);
    else
      for (int64_t i = 0; i < p->n; i++) v[i] = tensor_get_f32(j->x, base + i * p->inner);
    for (int64_t i = 0; i < p->n; i++) idx[i] = (int32_t)i;
    const int32_t *r = topk_sort(v, idx, tmp, p->n);
    for (int64_t i = 0; i < p->K; i++) {
      int64_t at = obase + i * p->inner;
      if (j->values) tensor_set_f32(j->values, at, v[r[i]]);
      if (j->indices) ((int64_t *)j->indices->data)[at] = r[i];
    }
  }
}

static ph_status topk_run(const gnode *n, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                          diag *d) {
  RETURN_ERROR_IF(!ctx->plan, d, PH_ERR_INTERNAL, "TopK: run without a plan");
  topk_job j;
  memset(&j, 0, sizeof j);
  j.p = *(const topk_plan *)ctx->plan;
  j.x = in[0];
  j.values = op_wants_output(n, 0) ? out[0] : NULL;
  j.indices = op_wants_output(n, 1) ? out[1] : NULL;
  j.n_slices = j.p.outer * j.p.inner;
  if (j.n_slices == 0 || j.p.K == 0 || (!j.values && !j.indices)) return PH_OK;
  RETURN_ERROR_IF(j.p.n > INT32_MAX, d, PH_ERR_UNSUPPORTED,
                  "TopK: %lld elements along the axis (at most 2^31 - 1)", (long long)j.p.n);
  int T = pool_threads(ctx->pool);
  size_t need = (size_t)T * topk_per_thread(j.p.n);
  RETURN_ERROR_IF(ctx->scratch_bytes < need, d, PH_ERR_INTERNAL,
                  "TopK: scratch of %zu bytes, need %zu", ctx->scratch_bytes, need);
  j.scratch = ctx->scratch;
  j.n_tasks = j.n_slices < (int64_t)T * 4 ? j.n_slices : (int64_t)T * 4;
  pool_run(ctx->pool, (size_t)j.n_tasks, topk_task, &j);
  return PH_OK;
}

const op_def op_def_topk = {
    "", "TopK", 2, 2, 2, 2, topk_infer, topk_run, topk_scratch, sizeof(topk_plan), topk_plan_fn};
