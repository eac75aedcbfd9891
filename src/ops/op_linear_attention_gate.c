/* op_linear_attention_gate — com.microsoft LinearAttentionGate: the gates of a dense
 * LinearAttention layer, elementwise (spec/abi.md §6).
 *
 *   a [B,T,H] (T = f32/f16/bf16)  dt_bias f32 [H]  decay_scale f32 [H] (= -exp(A_log))
 *   b [B,T,H] (optional; required when output 1 is requested)
 *   -> decay [B,T,H] = decay_scale[h] * softplus(a + dt_bias[h])   (log-space, <= 0 for Qwen)
 *      beta  [B,T,H] = sigmoid(b)
 * Outputs have the dtype of a. Intermediates are f32 and each output is rounded once;
 * softplus(x) = x for x > 20 (where log1p(e^x) equals x in f32), log1p(exp(x)) otherwise.
 * Work is split over blocks of rows; no reductions, so the split cannot change a result.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "ops/op.h"
#include "ops/op_util.h"

enum { LG_IN_A, LG_IN_DT_BIAS, LG_IN_DECAY_SCALE, LG_IN_B };

/* Elements converted per stack buffer pass, and rows per pool task. */
#define LG_BUF           256
#define LG_ROWS_PER_TASK 64

typedef struct lg_geom {
  ph_dtype dt;
  int has_b, want_beta;
  int64_t rows, H; /* rows = B*T; -1 when unknown */
  int64_t dims[3];
} lg_geom;

static ph_status lg_resolve(const gnode *n, const tinfo *in_, lg_geom *g, diag *d) {
  memset(g, 0, sizeof *g);
  RETURN_ERROR_IF(n->n_inputs < 3 || n->n_inputs > 4, d, PH_ERR_INVALID_ARGUMENT,
                  "LinearAttentionGate: takes 3 or 4 inputs, got %d", n->n_inputs);
  RETURN_ERROR_IF(n->n_outputs < 1 || n->n_outputs > 2, d, PH_ERR_INVALID_ARGUMENT,
                  "LinearAttentionGate: has 1 or 2 outputs, got %d", n->n_outputs);
  tinfo in[4];
  memset(in, 0, sizeof in);
  for (int i = 0; i < n->n_inputs; i++) in[i] = in_[i];
  const tinfo *a = &in[LG_IN_A], *dtb = &in[LG_IN_DT_BIAS], *ds = &in[LG_IN_DECAY_SCALE];
  const tinfo *b = &in[LG_IN_B];
  RETURN_ERROR_IF(a->dtype == PH_DTYPE_INVALID || dtb->dtype == PH_DTYPE_INVALID ||
                      ds->dtype == PH_DTYPE_INVALID,
                  d, PH_ERR_INVALID_ARGUMENT,
                  "LinearAttentionGate: a, dt_bias and decay_scale are required");
  g->has_b = b->dtype != PH_DTYPE_INVALID;
  g->want_beta = op_wants_output(n, 1);
  RETURN_ERROR_IF(g->want_beta && !g->has_b, d, PH_ERR_INVALID_ARGUMENT,
                  "LinearAttentionGate: output 1 (beta) is requested but input 3 (b) is absent");

  g->dt = a->dtype;
  RETURN_ERROR_IF(!dtype_is_compute_float(g->dt), d, PH_ERR_TENSOR_DTYPE,
                  "LinearAttentionGate: a dtype %s is not f32, f16 or bf16", ph_dtype_name(g->dt));
  RETURN_ERROR_IF(g->has_b && b->dtype != g->dt, d, PH_ERR_TENSOR_DTYPE,
                  "LinearAttentionGate: b is %s but a is %s", ph_dtype_name(b->dtype),
                  ph_dtype_name(g->dt));
  RETURN_ERROR_IF(dtb->dtype != PH_DTYPE_F32 || ds->dtype != PH_DTYPE_F32, d, PH_ERR_TENSOR_DTYPE,
                  "LinearAttentionGate: dt_bias and decay_scale must be f32 "
                  "(got %s, %s)",
                  ph_dtype_name(dtb->dtype), ph_dtype_name(ds->dtype));

  FORWARD_IF_ERROR(op_check_rank(n, a, 3, "a [B,T,H]", d));
  if (g->has_b) FORWARD_IF_ERROR(op_check_rank(n, b, 3, "b [B,T,H]", d));
  RETURN_ERROR_IF((dtb->rank >= 0 && dtb->rank != 1) || (ds->rank >= 0 && ds->rank != 1), d,
                  PH_ERR_TENSOR_SHAPE, "LinearAttentionGate: dt_bias and decay_scale must be [H]");
  for (int i = 0; i < 3; i++) {
    g->dims[i] = op_dim(a, i);
    if (g->has_b)
      FORWARD_IF_ERROR(op_merge_dim(n, &g->dims[i], op_dim(b, i), "a dim of a and b", d));
  }
  FORWARD_IF_ERROR(op_merge_dim(n, &g->dims[2], op_dim(dtb, 0), "the head count H", d));
  FORWARD_IF_ERROR(op_merge_dim(n, &g->dims[2], op_dim(ds, 0), "the head count H", d));
  g->H = g->dims[2];
  g->rows = g->dims[0] >= 0 && g->dims[1] >= 0 ? g->dims[0] * g->dims[1] : -1;
  return PH_OK;
}

static ph_status lg_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  lg_geom g;
  FORWARD_IF_ERROR(lg_resolve(n, in, &g, d));
  tinfo t = tinfo_make(g.dt, 3, g.dims);
  out[0] = t;
  if (n->n_outputs > 1) {
    if (g.want_beta) {
      out[1] = t;
    } else {
      memset(&out[1], 0, sizeof out[1]);
      out[1].dtype = PH_DTYPE_INVALID;
    }
  }
  return PH_OK;
}

typedef struct lg_job {
  const lg_geom *g;
  const tensor *a, *b;
  const float *dt_bias, *decay_scale;
  tensor *decay, *beta;
} lg_job;

static float lg_softplus(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

static void lg_task(void *ctx, size_t task, int thread) {
  (void)thread;
  const lg_job *j = ctx;
  int64_t H = j->g->H, r0 = (int64_t)task * LG_ROWS_PER_TASK;
  int64_t r1 = r0 + LG_ROWS_PER_TASK < j->g->rows ? r0 + LG_ROWS_PER_TASK : j->g->rows;
  float buf[LG_BUF];
  for (int64_t e0 = r0 * H; e0 < r1 * H; e0 += LG_BUF) {
    int64_t m = r1 * H - e0 < LG_BUF ? r1 * H - e0 : LG_BUF;
    tensor_load_f32(j->a, e0, m, buf);
    for (int64_t i = 0; i < m; i++) {
      int64_t h = (e0 + i) % H;
      buf[i] = j->decay_scale[h] * lg_softplus(buf[i] + j->dt_bias[h]);
    }
    tensor_store_f32(j->decay, e0, m, buf);
    if (j->beta) {
      tensor_load_f32(j->b, e0, m, buf);
      for (int64_t i = 0; i < m; i++) buf[i] = 1.0f / (1.0f + expf(-buf[i]));
      tensor_store_f32(j->beta, e0, m, buf);
    }
  }
}

static ph_status lg_plan(const gnode *n, const tinfo *in, void *plan, diag *d) {
  return lg_resolve(n, in, plan, d);
}

static ph_status lg_run(const gnode *n, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                        diag *d) {
  const lg_geom *gp = ctx->plan; /* lg_resolve on these shapes, once per plan */
  RETURN_ERROR_IF(!gp, d, PH_ERR_INTERNAL, "LinearAttentionGate: run without a plan");
  const lg_geom g = *gp;
  lg_job j;
  memset(&j, 0, sizeof j);
  j.g = &g;
  j.a = in[LG_IN_A];
  j.b = g.has_b ? in[LG_IN_B] : NULL;
  j.dt_bias = in[LG_IN_DT_BIAS]->data;
  j.decay_scale = in[LG_IN_DECAY_SCALE]->data;
  j.decay = out[0];
  j.beta = n->n_outputs > 1 && g.has_b ? out[1] : NULL;
  RETURN_ERROR_IF(!j.decay, d, PH_ERR_INTERNAL, "LinearAttentionGate: output 0 is required");
  if (g.rows * g.H == 0) return PH_OK;
  pool_run(ctx->pool, (size_t)((g.rows + LG_ROWS_PER_TASK - 1) / LG_ROWS_PER_TASK), lg_task, &j);
  return PH_OK;
}

const op_def op_def_linear_attention_gate = {
    "com.microsoft", "LinearAttentionGate", 3, 4, 1, 2, lg_infer, lg_run, NULL, sizeof(lg_geom),
    lg_plan};
