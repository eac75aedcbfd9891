/* op_gated_rms_norm — com.microsoft GatedRMSNorm: the output norm of a linear-attention layer.
 *
 *   X [..., H*C]  scale [C]  gate (shape of X)  -> Y (shape and dtype of X)
 *   per group of C consecutive channels: Y = X · rsqrt(mean_C(X²) + epsilon) · scale · SiLU(gate)
 * Norm first, then gate (spec/abi.md §6 and model-math §2 step 7). epsilon defaults to 1e-5.
 * One dtype T (f32/f16/bf16) for all inputs; the arithmetic is f32 (the mean of squares is
 * accumulated in f32 in channel order) and Y is rounded once.
 * Work is split over blocks of groups; each group is reduced by one task, so the split cannot
 * change a result.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/dispatch.h"
#include "ops/op.h"
#include "ops/op_util.h"

enum { GN_IN_X, GN_IN_SCALE, GN_IN_GATE };

#define GN_GROUPS_PER_TASK 32

typedef struct gn_geom {
  ph_dtype dt;
  float eps;
  int rank;
  int64_t dims[GRAPH_MAX_DIMS]; /* of X and Y; -1 unknown */
  int64_t C, groups;            /* groups = numel / C; -1 unknown */
} gn_geom;

static ph_status gn_resolve(const gnode *n, const tinfo *in, gn_geom *g, diag *d) {
  memset(g, 0, sizeof *g);
  RETURN_ERROR_IF(n->n_inputs != 3, d, PH_ERR_INVALID_ARGUMENT,
                  "GatedRMSNorm: takes 3 inputs (X, scale, gate), got %d", n->n_inputs);
  RETURN_ERROR_IF(n->n_outputs != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "GatedRMSNorm: has 1 output, got %d", n->n_outputs);
  FORWARD_IF_ERROR(op_attr_float(n, "epsilon", 1e-5f, &g->eps, d));
  RETURN_ERROR_IF(!isfinite(g->eps) || g->eps < 0.0f, d, PH_ERR_INVALID_ARGUMENT,
                  "GatedRMSNorm: attribute epsilon must be a finite float >= 0, got %g",
                  (double)g->eps);
  /* Later ONNX Runtime versions add an activation attribute; SiLU is what 1.30 computes. */
  const char *act = NULL;
  FORWARD_IF_ERROR(op_attr_string(n, "activation", "silu", &act, d));
  RETURN_ERROR_IF(strcmp(act, "silu") != 0 && strcmp(act, "swish") != 0, d, PH_ERR_UNSUPPORTED,
                  "GatedRMSNorm: activation \"%s\" is not supported (silu or swish only)", act);
  const tinfo *x = &in[GN_IN_X], *scale = &in[GN_IN_SCALE], *gate = &in[GN_IN_GATE];
  RETURN_ERROR_IF(x->dtype == PH_DTYPE_INVALID || scale->dtype == PH_DTYPE_INVALID ||
                      gate->dtype == PH_DTYPE_INVALID,
                  d, PH_ERR_INVALID_ARGUMENT, "GatedRMSNorm: X, scale and gate are required");
  g->dt = x->dtype;
  RETURN_ERROR_IF(!dtype_is_compute_float(g->dt), d, PH_ERR_TENSOR_DTYPE,
                  "GatedRMSNorm: X dtype %s is not f32, f16 or bf16", ph_dtype_name(g->dt));
  RETURN_ERROR_IF(scale->dtype != g->dt || gate->dtype != g->dt, d, PH_ERR_TENSOR_DTYPE,
                  "GatedRMSNorm: scale (%s) and gate (%s) must have the dtype of X (%s)",
                  ph_dtype_name(scale->dtype), ph_dtype_name(gate->dtype), ph_dtype_name(g->dt));

  RETURN_ERROR_IF(x->rank == 0, d, PH_ERR_TENSOR_SHAPE, "GatedRMSNorm: X must have rank >= 1");
  RETURN_ERROR_IF(scale->rank >= 0 && scale->rank != 1, d, PH_ERR_TENSOR_SHAPE,
                  "GatedRMSNorm: scale must be [C], got rank %d", scale->rank);
  RETURN_ERROR_IF(x->rank >= 0 && gate->rank >= 0 && gate->rank != x->rank, d, PH_ERR_TENSOR_SHAPE,
                  "GatedRMSNorm: gate has rank %d, X has rank %d", gate->rank, x->rank);
  g->rank = x->rank >= 0 ? x->rank : gate->rank;
  for (int i = 0; i < g->rank; i++) {
    int64_t a = x->rank >= 0 ? x->dims[i] : -1, b = gate->rank >= 0 ? gate->dims[i] : -1;
    RETURN_ERROR_IF(a >= 0 && b >= 0 && a != b, d, PH_ERR_TENSOR_SHAPE,
                    "GatedRMSNorm: gate dim %d is %lld, X dim %d is %lld", i, (long long)b, i,
                    (long long)a);
    g->dims[i] = a >= 0 ? a : b;
  }
  g->C = scale->rank >= 0 ? scale->dims[0] : -1;
  RETURN_ERROR_IF(g->C == 0, d, PH_ERR_TENSOR_SHAPE, "GatedRMSNorm: scale is empty (C = 0)");
  int64_t last = g->rank > 0 ? g->dims[g->rank - 1] : -1;
  RETURN_ERROR_IF(last >= 0 && g->C > 0 && last % g->C != 0, d, PH_ERR_TENSOR_SHAPE,
                  "GatedRMSNorm: the last dim of X (%lld) is not a multiple of C = %lld",
                  (long long)last, (long long)g->C);
  g->groups = g->C > 0 && g->rank > 0 ? 1 : -1;
  for (int i = 0; i < g->rank && g->groups >= 0; i++)
    g->groups = g->dims[i] >= 0 ? g->groups * g->dims[i] : -1;
  if (g->groups >= 0) g->groups /= g->C;
  return PH_OK;
}

static ph_status gn_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  gn_geom g;
  FORWARD_IF_ERROR(gn_resolve(n, in, &g, d));
  out[0] = tinfo_make(g.dt, g.rank, g.dims);
  return PH_OK;
}

/* One thread's workspace: scale, X and gate of one group, [C] each. */
static size_t gn_ws_bytes(const gn_geom *g) {
  return (3 * (size_t)g->C * sizeof(float) + 63) & ~(size_t)63;
}

static size_t gn_scratch_bytes(const gnode *n, const tinfo *in, int n_threads) {
  gn_geom g;
  if (gn_resolve(n, in, &g, NULL) != PH_OK || g.C < 0) return 0;
  return gn_ws_bytes(&g) * (size_t)(n_threads > 0 ? n_threads : 1);
}

typedef struct gn_job {
  const act_kernels *act; /* the active variant's SiLU, read once per run */
  const gn_geom *g;
  const tensor *x, *scale, *gate;
  tensor *y;
  char *scratch;
  size_t ws_bytes;
} gn_job;

static void gn_task(void *ctx, size_t task, int thread) {
  const gn_job *j = ctx;
  int64_t C = j->g->C, g0 = (int64_t)task * GN_GROUPS_PER_TASK;
  int64_t g1 = g0 + GN_GROUPS_PER_TASK < j->g->groups ? g0 + GN_GROUPS_PER_TASK : j->g->groups;
  float *w = (float *)(void *)(j->scratch + (size_t)thread * j->ws_bytes);
  float *x = w + C, *z = x + C;
  tensor_load_f32(j->scale, 0, C, w);
  for (int64_t gi = g0; gi < g1; gi++) {
    tensor_load_f32(j->x, gi * C, C, x);
    tensor_load_f32(j->gate, gi * C, C, z);
    float ss = 0.0f;
    for (int64_t c = 0; c < C; c++) ss += x[c] * x[c];
    float inv = 1.0f / sqrtf(ss / (float)C + j->g->eps);
    j->act->silu(z, z, C); /* act_siluf per element (kernels/act.h) */
    for (int64_t c = 0; c < C; c++) x[c] = x[c] * inv * w[c] * z[c];
    tensor_store_f32(j->y, gi * C, C, x);
  }
}

static ph_status gn_plan(const gnode *n, const tinfo *in, void *plan, diag *d) {
  return gn_resolve(n, in, plan, d);
}

static ph_status gn_run(const gnode *n, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                        diag *d) {
  (void)n;
  const gn_geom *gp = ctx->plan; /* gn_resolve on these shapes, once per plan */
  RETURN_ERROR_IF(!gp, d, PH_ERR_INTERNAL, "GatedRMSNorm: run without a plan");
  const gn_geom g = *gp;
  RETURN_ERROR_IF(!out[0], d, PH_ERR_INTERNAL, "GatedRMSNorm: output 0 is required");
  gn_job j;
  memset(&j, 0, sizeof j);
  j.g = &g;
  j.act = kernel_set_of(kernel_variant_active())->act;
  j.x = in[GN_IN_X];
  j.scale = in[GN_IN_SCALE];
  j.gate = in[GN_IN_GATE];
  j.y = out[0];
  j.ws_bytes = gn_ws_bytes(&g);
  if (g.groups == 0) return PH_OK;
  int n_threads = pool_threads(ctx->pool);
  RETURN_ERROR_IF(ctx->scratch_bytes < j.ws_bytes * (size_t)n_threads || !ctx->scratch, d,
                  PH_ERR_INTERNAL, "GatedRMSNorm: scratch is %zu bytes, %d threads need %zu",
                  ctx->scratch_bytes, n_threads, j.ws_bytes * (size_t)n_threads);
  j.scratch = ctx->scratch;
  pool_run(ctx->pool, (size_t)((g.groups + GN_GROUPS_PER_TASK - 1) / GN_GROUPS_PER_TASK), gn_task,
           &j);
  return PH_OK;
}

const op_def op_def_gated_rms_norm = {
    "com.microsoft",  "GatedRMSNorm",  3,      3, 1, 1, gn_infer, gn_run,
    gn_scratch_bytes, sizeof(gn_geom), gn_plan};
