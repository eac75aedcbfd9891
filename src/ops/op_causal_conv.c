/* op_causal_conv — com.microsoft CausalConvWithState (dense, ndim = 1): the contract, the gather
 * into f32 rows and the split over threads; one channel's sum and activation are
 * conv_causal_channel (kernels/conv.h), shared with VarlenCausalConvWithState.
 *
 * Letters: B sequences, Ch channels, L tokens, K taps, P = (K-1)*dilation carried positions.
 *   input [B,Ch,L] (channels_last: [B,L,Ch])  weight [Ch,1,K]  bias [Ch] (optional)
 *   past_state [B,Ch,P] (channels_last: [B,P,Ch]; optional, zeros when absent)
 *   -> output (shape of input), present_state (shape of past_state); one dtype T throughout.
 * Per channel, with x_full = concat(past_state, input) over time (spec/ort-1.30.md §2):
 *   y[t] = act(bias + Σ_j w[j] · x_full[t + j*dilation]),  present_state = x_full[L .. L+P)
 * act is none or silu (swish is the same function). Arithmetic is f32 whatever T; the output is
 * rounded once and the state is copied exactly (it only ever holds values of dtype T).
 *
 * Work is split over (sequence, block of CC_BLOCK channels); a task reads its block's whole past
 * state and input before writing anything, so present_state may alias past_state (and output
 * may alias input). Each output element is computed by the same code whatever the split.
 */
#include <stdint.h>
#include <string.h>

#include "kernels/conv.h"
#include "kernels/dispatch.h"
#include "ops/op.h"
#include "ops/op_util.h"

enum { CC_IN_X, CC_IN_W, CC_IN_BIAS, CC_IN_PAST };

/* Channels per task: enough work per task to amortize dispatch, and a channels_last row load
 * of this many elements is still contiguous. */
#define CC_BLOCK 16

typedef struct cc_geom {
  ph_dtype dt;
  int silu, channels_last, has_bias, has_past;
  int64_t dil;
  int64_t B, Ch, L, K, P; /* -1: unknown at build time */
} cc_geom;

/* Attributes, dtypes, ranks, dims, in that order. */
static ph_status cc_resolve(const gnode *n, const tinfo *in_, cc_geom *g, diag *d) {
  memset(g, 0, sizeof *g);
  RETURN_ERROR_IF(n->n_inputs < 2 || n->n_inputs > 4, d, PH_ERR_INVALID_ARGUMENT,
                  "CausalConvWithState: takes 2 to 4 inputs, got %d", n->n_inputs);
  RETURN_ERROR_IF(n->n_outputs < 1 || n->n_outputs > 2, d, PH_ERR_INVALID_ARGUMENT,
                  "CausalConvWithState: has 1 or 2 outputs, got %d", n->n_outputs);
  FORWARD_IF_ERROR(op_attr_conv_activation(n, &g->silu, d));
  int64_t ndim = 1, cl = 0, window = 0;
  FORWARD_IF_ERROR(op_attr_int(n, "ndim", 1, &ndim, d));
  RETURN_ERROR_IF(ndim < 1 || ndim > 3, d, PH_ERR_INVALID_ARGUMENT,
                  "CausalConvWithState: ndim must be 1, 2 or 3, got %lld", (long long)ndim);
  RETURN_ERROR_IF(ndim != 1, d, PH_ERR_UNSUPPORTED,
                  "CausalConvWithState: ndim %lld is not supported (only ndim=1, as on ONNX "
                  "Runtime's CPU)",
                  (long long)ndim);
  FORWARD_IF_ERROR(op_attr_int(n, "dilation", 1, &g->dil, d));
  RETURN_ERROR_IF(g->dil < 1, d, PH_ERR_INVALID_ARGUMENT,
                  "CausalConvWithState: dilation must be >= 1, got %lld", (long long)g->dil);
  FORWARD_IF_ERROR(op_attr_int(n, "channels_last", 0, &cl, d));
  RETURN_ERROR_IF(cl != 0 && cl != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "CausalConvWithState: channels_last must be 0 or 1, got %lld", (long long)cl);
  g->channels_last = (int)cl;
  FORWARD_IF_ERROR(op_attr_int(n, "state_window", 0, &window, d));
  RETURN_ERROR_IF(window < 0 || window > 8, d, PH_ERR_INVALID_ARGUMENT,
                  "CausalConvWithState: state_window must be in [0, 8], got %lld",
                  (long long)window);
  RETURN_ERROR_IF(window > 0, d, PH_ERR_UNSUPPORTED,
                  "CausalConvWithState: state_window %lld > 0 is not supported on the CPU (as in "
                  "ONNX Runtime, whose CPU kernel rejects it too)",
                  (long long)window);

  tinfo in[4];
  memset(in, 0, sizeof in);
  for (int i = 0; i < n->n_inputs; i++) in[i] = in_[i];
  const tinfo *x = &in[CC_IN_X], *w = &in[CC_IN_W], *bias = &in[CC_IN_BIAS];
  const tinfo *past = &in[CC_IN_PAST];
  RETURN_ERROR_IF(x->dtype == PH_DTYPE_INVALID || w->dtype == PH_DTYPE_INVALID, d,
                  PH_ERR_INVALID_ARGUMENT, "CausalConvWithState: input and weight are required");
  g->has_bias = bias->dtype != PH_DTYPE_INVALID;
  g->has_past = past->dtype != PH_DTYPE_INVALID;

  g->dt = x->dtype;
  RETURN_ERROR_IF(!dtype_is_compute_float(g->dt), d, PH_ERR_TENSOR_DTYPE,
                  "CausalConvWithState: input dtype %s is not f32, f16 or bf16",
                  ph_dtype_name(g->dt));
  static const char *const names[4] = {"input", "weight", "bias", "past_state"};
  for (int i = 1; i < 4; i++)
    RETURN_ERROR_IF(in[i].dtype != PH_DTYPE_INVALID && in[i].dtype != g->dt, d, PH_ERR_TENSOR_DTYPE,
                    "CausalConvWithState: %s is %s but input is %s", names[i],
                    ph_dtype_name(in[i].dtype), ph_dtype_name(g->dt));

  FORWARD_IF_ERROR(op_check_rank(n, x, 3, g->channels_last ? "input [B,L,C]" : "input [B,C,L]", d));
  FORWARD_IF_ERROR(op_check_rank(n, w, 3, "weight [C,1,K]", d));
  if (g->has_bias) FORWARD_IF_ERROR(op_check_rank(n, bias, 1, "bias [C]", d));
  if (g->has_past)
    FORWARD_IF_ERROR(op_check_rank(n, past, 3,
                                   g->channels_last ? "past_state [B,(K-1)*dilation,C]"
                                                    : "past_state [B,C,(K-1)*dilation]",
                                   d));

  int ci = g->channels_last ? 2 : 1, ti = g->channels_last ? 1 : 2;
  g->B = op_dim(x, 0);
  g->Ch = op_dim(x, ci);
  g->L = op_dim(x, ti);
  g->K = op_dim(w, 2);
  g->P = -1;
  FORWARD_IF_ERROR(op_merge_dim(n, &g->Ch, op_dim(w, 0), "the channel count", d));
  RETURN_ERROR_IF(op_dim(w, 1) >= 0 && op_dim(w, 1) != 1, d, PH_ERR_TENSOR_SHAPE,
                  "CausalConvWithState: weight is [C,1,K] (depthwise); dim 1 is %lld",
                  (long long)op_dim(w, 1));
  RETURN_ERROR_IF(g->K == 0, d, PH_ERR_TENSOR_SHAPE,
                  "CausalConvWithState: the kernel needs at least one tap (K = 0)");
  if (g->K > 0) g->P = (g->K - 1) * g->dil;
  if (g->has_bias)
    FORWARD_IF_ERROR(op_merge_dim(n, &g->Ch, op_dim(bias, 0), "the channel count", d));
  if (g->has_past) {
    FORWARD_IF_ERROR(op_merge_dim(n, &g->B, op_dim(past, 0), "the batch dim", d));
    FORWARD_IF_ERROR(op_merge_dim(n, &g->Ch, op_dim(past, ci), "the channel count", d));
    FORWARD_IF_ERROR(
        op_merge_dim(n, &g->P, op_dim(past, ti), "the state length (K-1)*dilation", d));
  }
  return PH_OK;
}

static ph_status cc_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  cc_geom g;
  FORWARD_IF_ERROR(cc_resolve(n, in, &g, d));
  int64_t xd[3] = {g.B, g.channels_last ? g.L : g.Ch, g.channels_last ? g.Ch : g.L};
  out[0] = tinfo_make(g.dt, 3, xd);
  if (n->n_outputs > 1) {
    int64_t sd[3] = {g.B, g.channels_last ? g.P : g.Ch, g.channels_last ? g.Ch : g.P};
    out[1] = tinfo_make(g.dt, 3, sd);
  }
  return PH_OK;
}

/* One thread's workspace: X [CC_BLOCK][P+L] (x_full per channel), Y [CC_BLOCK][L],
 * W [CC_BLOCK][K], bias and a row buffer [CC_BLOCK]. */
static size_t cc_ws_floats(const cc_geom *g) {
  return (size_t)CC_BLOCK * (size_t)(g->P + g->L) + (size_t)CC_BLOCK * (size_t)g->L +
         (size_t)CC_BLOCK * (size_t)g->K + 2 * CC_BLOCK;
}

static size_t cc_ws_bytes(const cc_geom *g) {
  return (cc_ws_floats(g) * sizeof(float) + 63) & ~(size_t)63;
}

static size_t cc_scratch_bytes(const gnode *n, const tinfo *in, int n_threads) {
  cc_geom g;
  if (cc_resolve(n, in, &g, NULL) != PH_OK || g.B < 0 || g.Ch < 0 || g.L < 0 || g.K < 0) return 0;
  return cc_ws_bytes(&g) * (size_t)(n_threads > 0 ? n_threads : 1);
}

typedef struct cc_job {
  const act_kernels *act; /* the active variant's SiLU, read once per run */
  const cc_geom *g;
  const tensor *x, *w, *bias, *past;
  tensor *out, *present;
  char *scratch;
  size_t ws_bytes;
  int64_t n_blocks;
} cc_job;

static void cc_task(void *ctx, size_t task, int thread) {
  const cc_job *j = ctx;
  const cc_geom *g = j->g;
  int64_t b = (int64_t)task / j->n_blocks, c0 = ((int64_t)task % j->n_blocks) * CC_BLOCK;
  int64_t nc = g->Ch - c0 < CC_BLOCK ? g->Ch - c0 : CC_BLOCK;
  int64_t P = g->P, L = g->L, K = g->K, Ch = g->Ch, F = P + L;
  float *X = (float *)(void *)(j->scratch + (size_t)thread * j->ws_bytes);
  float *Y = X + CC_BLOCK * F, *W = Y + CC_BLOCK * L, *bias = W + CC_BLOCK * K;
  float *row = bias + CC_BLOCK;

  /* Gather everything this block reads before anything is written (aliasing). */
  for (int64_t i = 0; i < nc; i++) {
    tensor_load_f32(j->w, (c0 + i) * K, K, W + i * K);
    bias[i] = j->bias ? tensor_get_f32(j->bias, c0 + i) : 0.0f;
  }
  if (!g->channels_last) {
    for (int64_t i = 0; i < nc; i++) {
      float *xi = X + i * F;
      if (j->past)
        tensor_load_f32(j->past, (b * Ch + c0 + i) * P, P, xi);
      else
        for (int64_t p = 0; p < P; p++) xi[p] = 0.0f;
      tensor_load_f32(j->x, (b * Ch + c0 + i) * L, L, xi + P);
    }
  } else {
    for (int64_t p = 0; p < P; p++) {
      if (j->past)
        tensor_load_f32(j->past, (b * P + p) * Ch + c0, nc, row);
      else
        for (int64_t i = 0; i < nc; i++) row[i] = 0.0f;
      for (int64_t i = 0; i < nc; i++) X[i * F + p] = row[i];
    }
    for (int64_t t = 0; t < L; t++) {
      tensor_load_f32(j->x, (b * L + t) * Ch + c0, nc, row);
      for (int64_t i = 0; i < nc; i++) X[i * F + P + t] = row[i];
    }
  }

  /* the SiLU over the block's L outputs of all nc channels at once: act_siluf's bits, which
   * conv_causal_channel's own silu gives too (kernels/conv.h) */
  for (int64_t i = 0; i < nc; i++)
    conv_causal_channel(X + i * F, W + i * K, K, g->dil, bias[i], 0, L, Y + i * L);
  if (g->silu) j->act->silu(Y, Y, nc * L);

  if (!g->channels_last) {
    for (int64_t i = 0; i < nc; i++) {
      tensor_store_f32(j->out, (b * Ch + c0 + i) * L, L, Y + i * L);
      if (j->present) tensor_store_f32(j->present, (b * Ch + c0 + i) * P, P, X + i * F + L);
    }
  } else {
    for (int64_t t = 0; t < L; t++) {
      for (int64_t i = 0; i < nc; i++) row[i] = Y[i * L + t];
      tensor_store_f32(j->out, (b * L + t) * Ch + c0, nc, row);
    }
    for (int64_t p = 0; j->present && p < P; p++) {
      for (int64_t i = 0; i < nc; i++) row[i] = X[i * F + L + p];
      tensor_store_f32(j->present, (b * P + p) * Ch + c0, nc, row);
    }
  }
}

static ph_status cc_plan(const gnode *n, const tinfo *in, void *plan, diag *d) {
  return cc_resolve(n, in, plan, d);
}

static ph_status cc_run(const gnode *n, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                        diag *d) {
  const cc_geom *gp = ctx->plan; /* cc_resolve on these shapes, once per plan */
  RETURN_ERROR_IF(!gp, d, PH_ERR_INTERNAL, "CausalConvWithState: run without a plan");
  const cc_geom g = *gp;
  RETURN_ERROR_IF(!out[0], d, PH_ERR_INTERNAL, "CausalConvWithState: output 0 is required");
  tensor *present = n->n_outputs > 1 ? out[1] : NULL;

  cc_job j;
  memset(&j, 0, sizeof j);
  j.g = &g;
  j.act = kernel_set_of(kernel_variant_active())->act;
  j.x = in[CC_IN_X];
  j.w = in[CC_IN_W];
  j.bias = g.has_bias ? in[CC_IN_BIAS] : NULL;
  j.past = g.has_past ? in[CC_IN_PAST] : NULL;
  j.out = out[0];
  j.present = present;
  j.ws_bytes = cc_ws_bytes(&g);
  j.n_blocks = (g.Ch + CC_BLOCK - 1) / CC_BLOCK;
  int n_threads = pool_threads(ctx->pool);
  RETURN_ERROR_IF(ctx->scratch_bytes < j.ws_bytes * (size_t)n_threads || !ctx->scratch, d,
                  PH_ERR_INTERNAL, "CausalConvWithState: scratch is %zu bytes, %d threads need %zu",
                  ctx->scratch_bytes, n_threads, j.ws_bytes * (size_t)n_threads);
  j.scratch = ctx->scratch;
  pool_run(ctx->pool, (size_t)(g.B * j.n_blocks), cc_task, &j);
  return PH_OK;
}

const op_def op_def_causal_conv_with_state = {
    "com.microsoft",  "CausalConvWithState", 2,      4, 1, 2, cc_infer, cc_run,
    cc_scratch_bytes, sizeof(cc_geom),       cc_plan};
