/* op_softmax — Softmax (ai.onnx opset 13): y = exp(x - max) / sum(exp(x - max)) along one axis.
 *
 * Input f32, f16 or bf16 of rank >= 1; output the same dtype and shape. Attribute axis
 * (default -1, in [-r, r-1]). Each slice along the axis is computed in f32: its max, then
 * e_i = expf(x_i - max), summed in increasing index, then each e_i divided by the sum and
 * rounded once to the output dtype. The order is a function of the slice alone, so a slice's
 * result never depends on the batch; slices are split over the pool. Scratch: per thread one
 * slice of f32.
 */
#include <string.h>

#include "kernels/vec.h"
#include "ops/op.h"
#include "ops/op_util.h"
#include "tensor/dtype.h"

typedef struct softmax_plan {
  int64_t outer, n, inner; /* x = [outer, n, inner] around the axis */
} softmax_plan;

static ph_status softmax_resolve(const gnode *n, const tinfo *in, tinfo *out, softmax_plan *p,
                                 diag *d) {
  RETURN_ERROR_IF(n->n_inputs != 1 || n->n_outputs != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "Softmax takes 1 input and 1 output, got %d and %d", n->n_inputs, n->n_outputs);
  const tinfo *x = &in[0];
  RETURN_ERROR_IF(x->dtype == PH_DTYPE_INVALID, d, PH_ERR_INVALID_ARGUMENT,
                  "Softmax: input is required");
  RETURN_ERROR_IF(!dtype_is_compute_float(x->dtype), d, PH_ERR_TENSOR_DTYPE,
                  "Softmax: input is %s; expected F32, F16 or BF16", op_dtype_name(x->dtype));
  int64_t axis = -1;
  FORWARD_IF_ERROR(op_attr_int(n, "axis", -1, &axis, d));
  *out = *x;
  out->data = NULL;
  if (x->rank < 0) return PH_OK;
  RETURN_ERROR_IF(x->rank == 0, d, PH_ERR_TENSOR_SHAPE, "Softmax: input must have rank >= 1");
  int ax = 0;
  FORWARD_IF_ERROR(op_norm_axis(n, axis, x->rank, &ax, d));
  if (p) {
    p->outer = p->inner = 1;
    for (int i = 0; i < ax; i++) p->outer *= x->dims[i];
    for (int i = ax + 1; i < x->rank; i++) p->inner *= x->dims[i];
    p->n = x->dims[ax];
  }
  return PH_OK;
}

static ph_status softmax_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  return softmax_resolve(n, in, out, NULL, d);
}

static ph_status softmax_plan_fn(const gnode *n, const tinfo *in, void *plan, diag *d) {
  tinfo out;
  return softmax_resolve(n, in, &out, plan, d);
}

static size_t softmax_scratch(const gnode *n, const tinfo *in, int n_threads) {
  softmax_plan p;
  tinfo out;
  if (softmax_resolve(n, in, &out, &p, NULL) != PH_OK || in[0].rank < 1 || p.n < 0) return 0;
  return (size_t)(n_threads > 0 ? n_threads : 1) * (size_t)p.n * sizeof(float);
}

typedef struct softmax_job {
  softmax_plan p;
  const tensor *x;
  tensor *y;
  float *scratch;
  int64_t n_slices, n_tasks;
} softmax_job;

static void softmax_task(void *ctx, size_t task, int thread) {
  const softmax_job *j = ctx;
  const softmax_plan *p = &j->p;
  float *v = j->scratch + (int64_t)thread * p->n;
  int64_t a = (int64_t)task * j->n_slices / j->n_tasks;
  int64_t b = ((int64_t)task + 1) * j->n_slices / j->n_tasks;
  for (int64_t sl = a; sl < b; sl++) {
    int64_t base = (sl / p->inner) * p->n * p->inner + sl % p->inner;
    if (p->inner == 1)
      tensor_load_f32(j->x, base, p->n, v);
    else
      for (int64_t i = 0; i < p->n; i++) v[i] = tensor_get_f32(j->x, base + i * p->inner);
    vec_softmax(v, p->n);
    if (p->inner == 1)
      tensor_store_f32(j->y, base, p->n, v);
    else
      for (int64_t i = 0; i < p->n; i++) tensor_set_f32(j->y, base + i * p->inner, v[i]);
  }
}

static ph_status softmax_run(const gnode *n, const tensor *const *in, tensor *const *out,
                             op_ctx *ctx, diag *d) {
  (void)n;
  RETURN_ERROR_IF(!ctx->plan, d, PH_ERR_INTERNAL, "Softmax: run without a plan");
  softmax_job j;
  memset(&j, 0, sizeof j);
  j.p = *(const softmax_plan *)ctx->plan;
  j.x = in[0];
  j.y = out[0];
  j.n_slices = j.p.outer * j.p.inner;
  if (j.n_slices == 0 || j.p.n == 0) return PH_OK;
  int T = pool_threads(ctx->pool);
  size_t need = (size_t)T * (size_t)j.p.n * sizeof(float);
  RETURN_ERROR_IF(ctx->scratch_bytes < need, d, PH_ERR_INTERNAL,
                  "Softmax: scratch of %zu bytes, need %zu", ctx->scratch_bytes, need);
  j.scratch = ctx->scratch;
  j.n_tasks = j.n_slices < (int64_t)T * 4 ? j.n_slices : (int64_t)T * 4;
  pool_run(ctx->pool, (size_t)j.n_tasks, softmax_task, &j);
  return PH_OK;
}

const op_def op_def_softmax = {"",
                               "Softmax",
                               1,
                               1,
                               1,
                               1,
                               softmax_infer,
                               softmax_run,
                               softmax_scratch,
                               sizeof(softmax_plan),
                               softmax_plan_fn};
