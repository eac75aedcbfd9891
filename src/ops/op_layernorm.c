/* op_layernorm — RMS normalisation: ai.onnx-domain SimplifiedLayerNormalization and
 * com.microsoft SkipSimplifiedLayerNormalization (the decoder's pre-attention/pre-MLP norms and
 * the residual add fused into them).
 *
 * SimplifiedLayerNormalization (domain "", opset 1 as ORT registers it)
 *   in  0 X      T in {f32, f16, bf16}, rank r >= 1
 *   in  1 scale  any of f32/f16/bf16, rank <= r - axis, right-aligned broadcastable to
 *                X.dims[axis..] (each dim equal or 1)
 *   out 0 Y      T, shape of X:  Y = X / sqrt(mean(X^2 over dims axis..r-1) + epsilon) * scale
 *   out 1 inv_std_var (optional) f32, shape of X with dims axis..r-1 set to 1
 *   attrs axis (default -1), epsilon (default 1e-5, finite, >= 0), stash_type (default 1; only 1,
 *   fp32 statistics, is supported: other values are PH_ERR_UNSUPPORTED).
 *
 * SkipSimplifiedLayerNormalization (com.microsoft)
 *   in  0 input  T, [B,S,H] or [N,H]
 *   in  1 skip   T, same shape as input, or (input rank 3) [S,H] / [1,S,H]: broadcast over batch
 *   in  2 gamma  T, [H]
 *   in  3 bias   T, [H] (optional)
 *   out 0 output                T, shape of input: sum / sqrt(mean(sum^2) + epsilon) * gamma
 *   out 1 mean (optional)       f32, [..., 1]: always 0 (no centring; ORT writes 0 too)
 *   out 2 inv_std_var (opt.)    f32, [..., 1]
 *   out 3 input_skip_bias_sum   T, shape of input: sum = (input + skip) + bias rounded to T
 *   attr epsilon (default 1e-12, ORT's schema default; finite, >= 0)
 *   The statistics and output 0 use the fp32 sum, not the sum rounded to T: this is what ORT's
 *   CPU kernel does for f16/bf16 (it computes the whole row in fp32 and rounds both outputs once).
 *   See docs/ops-attention.md for why we match CPU ORT rather than the older CUDA kernel.
 *
 * Numerics: every element is loaded as f32; the mean square is accumulated in double in element
 * order (a fixed order: one row is one task, so results do not depend on the thread count or on
 * which rows share the batch); 1/sqrt is taken in double and rounded to f32 once; outputs are
 * rounded to their dtype once. Rows stream through fixed stack chunks: no scratch, any width.
 */
#include <math.h>
#include <string.h>

#include "ops/op.h"
#include "ops/op_util.h"
#include "tensor/dtype.h"

#define LN_CHUNK 256 /* f32 elements per stack chunk (1 KiB each) */

static ph_status ln_check_eps(float eps, diag *d) {
  RETURN_ERROR_IF(!(eps >= 0.0f) || isinf(eps), d, PH_ERR_INVALID_ARGUMENT,
                  "attribute epsilon must be finite and >= 0, got %g", (double)eps);
  return PH_OK;
}

/* ================================ SimplifiedLayerNormalization ================================ */

/* X viewed as [rows, width]; scale index of column c is full ? c : sum(idx_k * stride_k). */
typedef struct sln_geom {
  int axis;                             /* normalised from dims axis..rank-1 */
  int64_t rows, width;                  /* -1 when unknown (build time) */
  int scale_full;                       /* scale has exactly the normalised dims' elements */
  int n_norm;                           /* normalised dims */
  int64_t norm_dims[GRAPH_MAX_DIMS];    /* X.dims[axis..] */
  int64_t scale_stride[GRAPH_MAX_DIMS]; /* element stride in scale per normalised dim; 0 = bcast */
  float eps;
} sln_geom;

static ph_status sln_resolve(const gnode *n, const tinfo *in, sln_geom *g, diag *d) {
  memset(g, 0, sizeof *g);
  RETURN_ERROR_IF(n->n_inputs != 2, d, PH_ERR_INVALID_ARGUMENT,
                  "SimplifiedLayerNormalization takes 2 inputs (X, scale), got %d", n->n_inputs);
  RETURN_ERROR_IF(n->n_outputs < 1 || n->n_outputs > 2, d, PH_ERR_INVALID_ARGUMENT,
                  "SimplifiedLayerNormalization has 1 or 2 outputs (Y, inv_std_var), got %d",
                  n->n_outputs);
  RETURN_ERROR_IF(!op_has_input(n, in, 0) || !op_has_input(n, in, 1), d, PH_ERR_INVALID_ARGUMENT,
                  "inputs X and scale are required");
  int64_t axis = -1, stash = 1;
  FORWARD_IF_ERROR(op_attr_int(n, "axis", -1, &axis, d));
  FORWARD_IF_ERROR(op_attr_float(n, "epsilon", 1e-5f, &g->eps, d));
  FORWARD_IF_ERROR(ln_check_eps(g->eps, d));
  FORWARD_IF_ERROR(op_attr_int(n, "stash_type", 1, &stash, d));
  RETURN_ERROR_IF(stash != 1, d, PH_ERR_UNSUPPORTED,
                  "stash_type %lld: only 1 (fp32 statistics) is supported", (long long)stash);
  const tinfo *x = &in[0], *s = &in[1];
  RETURN_ERROR_IF(!dtype_is_compute_float(x->dtype), d, PH_ERR_TENSOR_DTYPE,
                  "X must be f32, f16 or bf16, got %s", ph_dtype_name(x->dtype));
  RETURN_ERROR_IF(!dtype_is_compute_float(s->dtype), d, PH_ERR_TENSOR_DTYPE,
                  "scale must be f32, f16 or bf16, got %s", ph_dtype_name(s->dtype));
  g->rows = g->width = -1;
  if (x->rank < 0) return PH_OK; /* unknown rank: nothing more can be checked yet */
  RETURN_ERROR_IF(x->rank < 1, d, PH_ERR_TENSOR_SHAPE, "X must have rank >= 1, got a scalar");
  FORWARD_IF_ERROR(op_norm_axis(n, axis, x->rank, &g->axis, d));
  g->n_norm = x->rank - g->axis;
  g->rows = 1;
  g->width = 1;
  for (int k = 0; k < x->rank; k++) {
    int64_t dk = x->dims[k];
    int64_t *acc = k < g->axis ? &g->rows : &g->width;
    *acc = (dk < 0 || *acc < 0) ? -1 : *acc * dk;
    if (k >= g->axis) g->norm_dims[k - g->axis] = dk;
  }
  RETURN_ERROR_IF(g->width == 0, d, PH_ERR_TENSOR_SHAPE,
                  "the normalised dims (axis %d..) of X hold no elements", g->axis);
  if (s->rank < 0) return PH_OK;
  RETURN_ERROR_IF(s->rank > g->n_norm, d, PH_ERR_TENSOR_SHAPE,
                  "scale has rank %d but only %d dims are normalised", s->rank, g->n_norm);
  /* right-align scale under the normalised dims */
  int64_t stride = 1, s_numel = 1;
  for (int k = g->n_norm - 1; k >= 0; k--) {
    int sk = k - (g->n_norm - s->rank);
    if (sk < 0) {
      g->scale_stride[k] = 0;
      continue;
    }
    int64_t sd = s->dims[sk], xd = g->norm_dims[k];
    RETURN_ERROR_IF(sd >= 0 && sd != 1 && op_dims_conflict(sd, xd), d, PH_ERR_TENSOR_SHAPE,
                    "scale dim %d is %lld, X dim %d is %lld (must be equal or 1)", sk,
                    (long long)sd, g->axis + k, (long long)xd);
    g->scale_stride[k] = sd == 1 ? 0 : stride;
    stride = (sd < 0 || stride < 0) ? -1 : stride * sd;
    s_numel = (sd < 0 || s_numel < 0) ? -1 : s_numel * sd;
  }
  g->scale_full = g->width >= 0 && s_numel == g->width;
  return PH_OK;
}

static ph_status sln_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  sln_geom g;
  FORWARD_IF_ERROR(sln_resolve(n, in, &g, d));
  const tinfo *x = &in[0];
  out[0] = tinfo_make(x->dtype, x->rank, x->dims);
  if (op_wants_output(n, 1)) {
    out[1] = tinfo_make(PH_DTYPE_F32, x->rank, x->dims);
    for (int k = g.axis; x->rank > 0 && k < x->rank; k++) out[1].dims[k] = 1;
  }
  return PH_OK;
}

typedef struct sln_job {
  const sln_geom *g;
  const tensor *x, *scale;
  tensor *y, *inv_std; /* inv_std may be NULL */
} sln_job;

/* scale value for normalised column c (general broadcast path) */
static float sln_scale_at(const sln_job *j, int64_t c) {
  const sln_geom *g = j->g;
  int64_t idx = 0;
  for (int k = g->n_norm - 1; k >= 0; k--) {
    int64_t dk = g->norm_dims[k];
    idx += (c % dk) * g->scale_stride[k];
    c /= dk;
  }
  return tensor_get_f32(j->scale, idx);
}

static void sln_row(void *ctx, size_t task, int thread) {
  (void)thread;
  const sln_job *j = ctx;
  const int64_t W = j->g->width, base = (int64_t)task * W;
  float xb[LN_CHUNK], sb[LN_CHUNK];
  double ss = 0.0;
  for (int64_t c0 = 0; c0 < W; c0 += LN_CHUNK) {
    int64_t m = W - c0 < LN_CHUNK ? W - c0 : LN_CHUNK;
    tensor_load_f32(j->x, base + c0, m, xb);
    for (int64_t k = 0; k < m; k++) ss += (double)xb[k] * (double)xb[k];
  }
  const float inv = (float)(1.0 / sqrt(ss / (double)W + (double)j->g->eps));
  for (int64_t c0 = 0; c0 < W; c0 += LN_CHUNK) {
    int64_t m = W - c0 < LN_CHUNK ? W - c0 : LN_CHUNK;
    tensor_load_f32(j->x, base + c0, m, xb);
    if (j->g->scale_full)
      tensor_load_f32(j->scale, c0, m, sb);
    else
      for (int64_t k = 0; k < m; k++) sb[k] = sln_scale_at(j, c0 + k);
    for (int64_t k = 0; k < m; k++) xb[k] = xb[k] * inv * sb[k];
    tensor_store_f32(j->y, base + c0, m, xb);
  }
  if (j->inv_std) ((float *)j->inv_std->data)[task] = inv;
}

static ph_status sln_plan(const gnode *n, const tinfo *in, void *plan, diag *d) {
  return sln_resolve(n, in, plan, d);
}

static ph_status sln_run(const gnode *n, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                         diag *d) {
  const sln_geom *g = ctx->plan; /* sln_resolve on these shapes, once per plan */
  RETURN_ERROR_IF(!g, d, PH_ERR_INTERNAL, "run without a plan");
  RETURN_ERROR_IF(!out[0], d, PH_ERR_INVALID_ARGUMENT, "output Y is required");
  sln_job j = {g, in[0], in[1], out[0], n->n_outputs > 1 ? out[1] : NULL};
  pool_run(ctx->pool, (size_t)g->rows, sln_row, &j);
  return PH_OK;
}

const op_def op_def_simplified_layer_norm = {
    "",      "SimplifiedLayerNormalization", 2, 2, 1, 2, sln_infer, sln_run, NULL, sizeof(sln_geom),
    sln_plan};

/* ============================== SkipSimplifiedLayerNormalization ============================== */

typedef struct skln_geom {
  int64_t rows, hidden; /* input viewed as [rows, hidden]; -1 when unknown */
  int64_t skip_rows;    /* rows of skip (rows or S when broadcast over batch); -1 unknown */
  int has_bias;
  float eps;
} skln_geom;

static ph_status skln_resolve(const gnode *n, const tinfo *in, skln_geom *g, diag *d) {
  memset(g, 0, sizeof *g);
  RETURN_ERROR_IF(n->n_inputs < 3 || n->n_inputs > 4, d, PH_ERR_INVALID_ARGUMENT,
                  "SkipSimplifiedLayerNormalization takes 3 or 4 inputs, got %d", n->n_inputs);
  RETURN_ERROR_IF(n->n_outputs < 1 || n->n_outputs > 4, d, PH_ERR_INVALID_ARGUMENT,
                  "SkipSimplifiedLayerNormalization has 1 to 4 outputs, got %d", n->n_outputs);
  for (int i = 0; i < 3; i++)
    RETURN_ERROR_IF(!op_has_input(n, in, i), d, PH_ERR_INVALID_ARGUMENT,
                    "inputs input, skip and gamma are required (input %d is absent)", i);
  FORWARD_IF_ERROR(op_attr_float(n, "epsilon", 1e-12f, &g->eps, d));
  FORWARD_IF_ERROR(ln_check_eps(g->eps, d));
  g->has_bias = op_has_input(n, in, 3);
  const tinfo *x = &in[0], *s = &in[1], *gm = &in[2], *b = g->has_bias ? &in[3] : NULL;
  static const char *const names[4] = {"input", "skip", "gamma", "bias"};
  RETURN_ERROR_IF(!dtype_is_compute_float(x->dtype), d, PH_ERR_TENSOR_DTYPE,
                  "input must be f32, f16 or bf16, got %s", ph_dtype_name(x->dtype));
  for (int i = 1; i < (g->has_bias ? 4 : 3); i++)
    RETURN_ERROR_IF(in[i].dtype != x->dtype, d, PH_ERR_TENSOR_DTYPE,
                    "%s is %s but input is %s (all must share one dtype)", names[i],
                    ph_dtype_name(in[i].dtype), ph_dtype_name(x->dtype));
  g->rows = g->hidden = g->skip_rows = -1;
  if (x->rank >= 0) {
    RETURN_ERROR_IF(x->rank != 2 && x->rank != 3, d, PH_ERR_TENSOR_SHAPE,
                    "input must have rank 2 or 3, got %d", x->rank);
    g->hidden = x->dims[x->rank - 1];
    g->rows = 1;
    for (int k = 0; k < x->rank - 1; k++)
      g->rows = (g->rows < 0 || x->dims[k] < 0) ? -1 : g->rows * x->dims[k];
    RETURN_ERROR_IF(g->hidden == 0, d, PH_ERR_TENSOR_SHAPE, "input hidden size is 0");
  }
  if (s->rank >= 0) {
    RETURN_ERROR_IF(s->rank != 2 && s->rank != 3, d, PH_ERR_TENSOR_SHAPE,
                    "skip must have rank 2 or 3, got %d", s->rank);
    if (x->rank >= 0) {
      /* last two dims must match; a skip of other shape may only drop or unit the batch */
      for (int k = 1; k <= 2; k++)
        RETURN_ERROR_IF(
            op_dims_conflict(s->dims[s->rank - k], x->dims[x->rank - k]), d, PH_ERR_TENSOR_SHAPE,
            "skip dim %d is %lld, input dim %d is %lld (last two dims must match)", s->rank - k,
            (long long)s->dims[s->rank - k], x->rank - k, (long long)x->dims[x->rank - k]);
      int same = s->rank == x->rank;
      if (same && x->rank == 3) same = !op_dims_conflict(s->dims[0], x->dims[0]);
      if (!same) {
        int bcast = x->rank == 3 && (s->rank == 2 || s->dims[0] == 1);
        RETURN_ERROR_IF(!bcast, d, PH_ERR_TENSOR_SHAPE,
                        "skip must have the shape of input, or [S, H] / [1, S, H] for a rank-3 "
                        "input");
      }
      g->skip_rows = s->dims[s->rank - 2];
      if (s->rank == 3)
        g->skip_rows = (s->dims[0] < 0 || g->skip_rows < 0) ? -1 : s->dims[0] * g->skip_rows;
    }
  }
  for (int i = 2; i < (g->has_bias ? 4 : 3); i++) {
    const tinfo *v = i == 2 ? gm : b;
    if (v->rank < 0) continue;
    RETURN_ERROR_IF(v->rank != 1, d, PH_ERR_TENSOR_SHAPE, "%s must have rank 1, got %d", names[i],
                    v->rank);
    RETURN_ERROR_IF(op_dims_conflict(v->dims[0], g->hidden), d, PH_ERR_TENSOR_SHAPE,
                    "%s has %lld elements, hidden size is %lld", names[i], (long long)v->dims[0],
                    (long long)g->hidden);
  }
  return PH_OK;
}

static ph_status skln_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  skln_geom g;
  FORWARD_IF_ERROR(skln_resolve(n, in, &g, d));
  const tinfo *x = &in[0];
  out[0] = tinfo_make(x->dtype, x->rank, x->dims);
  for (int i = 1; i <= 2; i++) {
    if (!op_wants_output(n, i)) continue;
    out[i] = tinfo_make(PH_DTYPE_F32, x->rank, x->dims);
    if (x->rank > 0) out[i].dims[x->rank - 1] = 1;
  }
  if (op_wants_output(n, 3)) out[3] = tinfo_make(x->dtype, x->rank, x->dims);
  return PH_OK;
}

typedef struct skln_job {
  const skln_geom *g;
  const tensor *x, *skip, *gamma, *bias; /* bias may be NULL */
  tensor *y, *mean, *inv_std, *sum;      /* all but y may be NULL */
} skln_job;

/* sum = (input + skip) + bias for m columns from c0 of row r, in f32 (same ops every call, so
 * the two passes see identical values) */
static void skln_sum(const skln_job *j, int64_t r, int64_t c0, int64_t m, float *v, float *t) {
  const int64_t H = j->g->hidden;
  tensor_load_f32(j->x, r * H + c0, m, v);
  tensor_load_f32(j->skip, (r % j->g->skip_rows) * H + c0, m, t);
  for (int64_t k = 0; k < m; k++) v[k] = v[k] + t[k];
  if (j->bias) {
    tensor_load_f32(j->bias, c0, m, t);
    for (int64_t k = 0; k < m; k++) v[k] = v[k] + t[k];
  }
}

static void skln_row(void *ctx, size_t task, int thread) {
  (void)thread;
  const skln_job *j = ctx;
  const int64_t H = j->g->hidden, r = (int64_t)task;
  float v[LN_CHUNK], t[LN_CHUNK];
  double ss = 0.0;
  for (int64_t c0 = 0; c0 < H; c0 += LN_CHUNK) {
    int64_t m = H - c0 < LN_CHUNK ? H - c0 : LN_CHUNK;
    skln_sum(j, r, c0, m, v, t);
    for (int64_t k = 0; k < m; k++) ss += (double)v[k] * (double)v[k];
    if (j->sum) tensor_store_f32(j->sum, r * H + c0, m, v);
  }
  const float inv = (float)(1.0 / sqrt(ss / (double)H + (double)j->g->eps));
  for (int64_t c0 = 0; c0 < H; c0 += LN_CHUNK) {
    int64_t m = H - c0 < LN_CHUNK ? H - c0 : LN_CHUNK;
    skln_sum(j, r, c0, m, v, t);
    tensor_load_f32(j->gamma, c0, m, t);
    for (int64_t k = 0; k < m; k++) v[k] = v[k] * inv * t[k];
    tensor_store_f32(j->y, r * H + c0, m, v);
  }
  if (j->mean) ((float *)j->mean->data)[r] = 0.0f;
  if (j->inv_std) ((float *)j->inv_std->data)[r] = inv;
}

static ph_status skln_plan(const gnode *n, const tinfo *in, void *plan, diag *d) {
  return skln_resolve(n, in, plan, d);
}

static ph_status skln_run(const gnode *n, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                          diag *d) {
  const skln_geom *gp = ctx->plan; /* skln_resolve on these shapes, once per plan */
  RETURN_ERROR_IF(!gp, d, PH_ERR_INTERNAL, "run without a plan");
  const skln_geom g = *gp;
  RETURN_ERROR_IF(!out[0], d, PH_ERR_INVALID_ARGUMENT, "output 0 is required");
  skln_job j = {&g,
                in[0],
                in[1],
                in[2],
                g.has_bias ? in[3] : NULL,
                out[0],
                n->n_outputs > 1 ? out[1] : NULL,
                n->n_outputs > 2 ? out[2] : NULL,
                n->n_outputs > 3 ? out[3] : NULL};
  if (g.rows > 0) RETURN_ERROR_IF(g.skip_rows <= 0, d, PH_ERR_TENSOR_SHAPE, "skip has no rows");
  pool_run(ctx->pool, (size_t)g.rows, skln_row, &j);
  return PH_OK;
}

const op_def op_def_skip_simplified_layer_norm = {"com.microsoft",
                                                  "SkipSimplifiedLayerNormalization",
                                                  3,
                                                  4,
                                                  1,
                                                  4,
                                                  skln_infer,
                                                  skln_run,
                                                  NULL,
                                                  sizeof(skln_geom),
                                                  skln_plan};
