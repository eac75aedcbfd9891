/* op_varlen_causal_conv — com.microsoft VarlenCausalConvWithState: the depthwise causal conv of
 * the packed (varlen) hybrid layout, one carry state per sequence (spec/abi.md §3).
 *
 * Letters: N packed tokens, B sequences, Ch channels, K taps, P = (K-1)*dilation carried
 * positions, cap = state_update_capacity.
 *   in 0 input [N,Ch] token-major packed   in 1 weight [Ch,1,K]
 *   in 2 cumulative_sequence_length int32 [B+1] (0 = cu[0] <= cu[1] <= ... <= cu[B] = N)
 *   in 3 bias [Ch] (optional; an empty slot keeps initial_state at index 4)
 *   in 4 initial_state [B,Ch,P] (required)   in 5 capture_count int32 [B] (only when cap > 0)
 *   -> out 0 output [N,Ch], out 1 final_state [B,Ch,P], out 2 state_update [B,cap,Ch]
 * One dtype T in {f32,f16,bf16} throughout. Sequence b owns rows [cu[b], cu[b+1]); per channel,
 * with x_full = concat(initial_state[b], its rows) over time:
 *   y[t] = act(bias + Σ_j w[j] · x_full[t + j*dilation]),  final_state[b] = x_full[L_b .. L_b+P)
 * so nothing is read across a sequence boundary and a sequence of 0 tokens keeps its state.
 * The arithmetic is the dense CausalConvWithState's (conv_causal_channel, kernels/conv.h: f16
 * and bf16 run it; f32 runs the same operations per channel token-major, vc_task_f32), so a
 * sequence gives the same bits alone, packed with others, or through the dense op.
 *
 * cap > 0 (compact state updates, spec/abi.md §3): capture_count int32 [B] is required (and
 * refused when cap = 0); output 2 [B,cap,Ch] (dtype T) gets, in slots [0, cc_b) with
 * cc_b = clamp(capture_count[b], 0, min(cap, L_b)), the original input rows (pre-conv,
 * pre-activation, their bytes as given) of sequence b's first cc_b tokens, and zeros everywhere
 * else. Replaying a of them onto the state at the call's start (kernels/state_replay.h:
 * state_replay_conv, dilation 1) gives the final state of a call that ran only those a tokens.
 * Output 0 and 1 do not depend on the capture. Malformed offsets are a synchronous
 * PH_ERR_INVALID_ARGUMENT here (ORT's CUDA kernel skips the work instead); they are checked before
 * anything is written.
 *
 * f16/bf16: work is split over (sequence, block of VC_BLOCK channels); a task reads its block's
 * state and rows before writing, so final_state may alias initial_state. f32: over VC_TOKENS packed
 * rows (of one or more sequences) for the outputs, then a second pool run over (sequence, channel
 * block) writes the final states, after every output task has read the initial ones.
 */
#include <stdint.h>
#include <string.h>

#include "kernels/conv.h"
#include "kernels/dispatch.h"
#include "ops/op.h"
#include "ops/op_util.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

enum { VC_IN_X, VC_IN_W, VC_IN_CU, VC_IN_BIAS, VC_IN_STATE, VC_IN_CAPTURE, VC_N_IN };

#define VC_BLOCK  64
#define VC_TOKENS 32 /* tokens per task of the f32 path */

typedef struct vc_geom {
  ph_dtype dt;
  int silu, has_bias;
  int64_t dil, cap;
  int64_t N, B, Ch, K, P; /* -1: unknown at build time */
} vc_geom;

/* cu (B+1 int32) must start at 0, end at N and never decrease. */
static ph_status vc_check_cu(const gnode *n, const int32_t *cu, int64_t B, int64_t N, diag *d) {
  (void)n;
  RETURN_ERROR_IF(cu[0] != 0, d, PH_ERR_INVALID_ARGUMENT,
                  "VarlenCausalConvWithState: cumulative_sequence_length[0] is %d, must be 0",
                  (int)cu[0]);
  for (int64_t b = 0; b < B; b++)
    RETURN_ERROR_IF(cu[b + 1] < cu[b], d, PH_ERR_INVALID_ARGUMENT,
                    "VarlenCausalConvWithState: cumulative_sequence_length decreases at %lld "
                    "(%d then %d)",
                    (long long)(b + 1), (int)cu[b], (int)cu[b + 1]);
  RETURN_ERROR_IF(N >= 0 && cu[B] != N, d, PH_ERR_INVALID_ARGUMENT,
                  "VarlenCausalConvWithState: cumulative_sequence_length ends at %d, input has "
                  "N = %lld rows",
                  (int)cu[B], (long long)N);
  return PH_OK;
}

static ph_status vc_resolve(const gnode *n, const tinfo *in_, vc_geom *g, diag *d) {
  memset(g, 0, sizeof *g);
  RETURN_ERROR_IF(n->n_inputs < 5 || n->n_inputs > 6, d, PH_ERR_INVALID_ARGUMENT,
                  "VarlenCausalConvWithState: takes 5 or 6 inputs, got %d", n->n_inputs);
  RETURN_ERROR_IF(n->n_outputs < 2 || n->n_outputs > 3, d, PH_ERR_INVALID_ARGUMENT,
                  "VarlenCausalConvWithState: has 2 or 3 outputs, got %d", n->n_outputs);
  FORWARD_IF_ERROR(op_attr_conv_activation(n, &g->silu, d));
  FORWARD_IF_ERROR(op_attr_int(n, "dilation", 1, &g->dil, d));
  RETURN_ERROR_IF(g->dil < 1, d, PH_ERR_INVALID_ARGUMENT,
                  "VarlenCausalConvWithState: dilation must be >= 1, got %lld", (long long)g->dil);
  FORWARD_IF_ERROR(op_attr_int(n, "state_update_capacity", 0, &g->cap, d));
  RETURN_ERROR_IF(g->cap < 0 || g->cap > 8, d, PH_ERR_INVALID_ARGUMENT,
                  "VarlenCausalConvWithState: state_update_capacity must be in [0, 8], got %lld",
                  (long long)g->cap);

  tinfo in[VC_N_IN];
  memset(in, 0, sizeof in);
  for (int i = 0; i < n->n_inputs; i++) in[i] = in_[i];
  const tinfo *x = &in[VC_IN_X], *w = &in[VC_IN_W], *cu = &in[VC_IN_CU];
  const tinfo *bias = &in[VC_IN_BIAS], *st = &in[VC_IN_STATE], *cc = &in[VC_IN_CAPTURE];
  RETURN_ERROR_IF(x->dtype == PH_DTYPE_INVALID || w->dtype == PH_DTYPE_INVALID ||
                      cu->dtype == PH_DTYPE_INVALID,
                  d, PH_ERR_INVALID_ARGUMENT,
                  "VarlenCausalConvWithState: input, weight and cumulative_sequence_length are "
                  "required");
  RETURN_ERROR_IF(st->dtype == PH_DTYPE_INVALID, d, PH_ERR_INVALID_ARGUMENT,
                  "VarlenCausalConvWithState: initial_state (input 4) is required");
  RETURN_ERROR_IF(cc->dtype != PH_DTYPE_INVALID && g->cap == 0, d, PH_ERR_INVALID_ARGUMENT,
                  "VarlenCausalConvWithState: capture_count is given but state_update_capacity "
                  "is 0");
  RETURN_ERROR_IF(cc->dtype == PH_DTYPE_INVALID && g->cap > 0, d, PH_ERR_INVALID_ARGUMENT,
                  "VarlenCausalConvWithState: state_update_capacity %lld requires input 5 "
                  "(capture_count int32 [B])",
                  (long long)g->cap);
  g->has_bias = bias->dtype != PH_DTYPE_INVALID;

  g->dt = x->dtype;
  RETURN_ERROR_IF(!dtype_is_compute_float(g->dt), d, PH_ERR_TENSOR_DTYPE,
                  "VarlenCausalConvWithState: input dtype %s is not f32, f16 or bf16",
                  ph_dtype_name(g->dt));
  static const char *const names[VC_N_IN] = {"input", "weight", "", "bias", "initial_state", ""};
  static const int same[3] = {VC_IN_W, VC_IN_BIAS, VC_IN_STATE};
  for (int k = 0; k < 3; k++) {
    int i = same[k];
    RETURN_ERROR_IF(in[i].dtype != PH_DTYPE_INVALID && in[i].dtype != g->dt, d, PH_ERR_TENSOR_DTYPE,
                    "VarlenCausalConvWithState: %s is %s but input is %s", names[i],
                    ph_dtype_name(in[i].dtype), ph_dtype_name(g->dt));
  }
  RETURN_ERROR_IF(cu->dtype != PH_DTYPE_I32, d, PH_ERR_TENSOR_DTYPE,
                  "VarlenCausalConvWithState: cumulative_sequence_length must be I32, got %s",
                  op_dtype_name(cu->dtype));

  FORWARD_IF_ERROR(op_check_rank(n, x, 2, "input [N,C]", d));
  FORWARD_IF_ERROR(op_check_rank(n, w, 3, "weight [C,1,K]", d));
  FORWARD_IF_ERROR(op_check_rank(n, cu, 1, "cumulative_sequence_length [B+1]", d));
  if (g->has_bias) FORWARD_IF_ERROR(op_check_rank(n, bias, 1, "bias [C]", d));
  FORWARD_IF_ERROR(op_check_rank(n, st, 3, "initial_state [B,C,(K-1)*dilation]", d));
  if (g->cap > 0) {
    RETURN_ERROR_IF(cc->dtype != PH_DTYPE_I32, d, PH_ERR_TENSOR_DTYPE,
                    "VarlenCausalConvWithState: capture_count must be I32, got %s",
                    op_dtype_name(cc->dtype));
    FORWARD_IF_ERROR(op_check_rank(n, cc, 1, "capture_count [B]", d));
  }

  g->N = op_dim(x, 0);
  g->Ch = op_dim(x, 1);
  g->K = op_dim(w, 2);
  g->B = op_dim(cu, 0) >= 0 ? op_dim(cu, 0) - 1 : -1;
  RETURN_ERROR_IF(op_dim(cu, 0) == 0, d, PH_ERR_TENSOR_SHAPE,
                  "VarlenCausalConvWithState: cumulative_sequence_length is [B+1]; it is empty");
  g->P = -1;
  FORWARD_IF_ERROR(op_merge_dim(n, &g->Ch, op_dim(w, 0), "the channel count", d));
  RETURN_ERROR_IF(op_dim(w, 1) >= 0 && op_dim(w, 1) != 1, d, PH_ERR_TENSOR_SHAPE,
                  "VarlenCausalConvWithState: weight is [C,1,K] (depthwise); dim 1 is %lld",
                  (long long)op_dim(w, 1));
  RETURN_ERROR_IF(g->K == 0, d, PH_ERR_TENSOR_SHAPE,
                  "VarlenCausalConvWithState: the kernel needs at least one tap (K = 0)");
  if (g->K > 0) g->P = (g->K - 1) * g->dil;
  if (g->has_bias)
    FORWARD_IF_ERROR(op_merge_dim(n, &g->Ch, op_dim(bias, 0), "the channel count", d));
  FORWARD_IF_ERROR(op_merge_dim(n, &g->B, op_dim(st, 0), "the sequence count B", d));
  FORWARD_IF_ERROR(op_merge_dim(n, &g->Ch, op_dim(st, 1), "the channel count", d));
  FORWARD_IF_ERROR(op_merge_dim(n, &g->P, op_dim(st, 2), "the state length (K-1)*dilation", d));
  if (g->cap > 0)
    FORWARD_IF_ERROR(op_merge_dim(n, &g->B, op_dim(cc, 0), "the sequence count B", d));
  if (cu->data && g->B >= 0) FORWARD_IF_ERROR(vc_check_cu(n, cu->data, g->B, g->N, d));
  return PH_OK;
}

static ph_status vc_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  vc_geom g;
  FORWARD_IF_ERROR(vc_resolve(n, in, &g, d));
  int64_t xd[2] = {g.N, g.Ch}, sd[3] = {g.B, g.Ch, g.P}, ud[3] = {g.B, g.cap, g.Ch};
  out[0] = tinfo_make(g.dt, 2, xd);
  out[1] = tinfo_make(g.dt, 3, sd);
  if (n->n_outputs > 2) out[2] = tinfo_make(g.dt, 3, ud); /* [B,0,C] while cap = 0 */
  return PH_OK;
}

/* One thread's workspace: f16/bf16: X [VC_BLOCK][P+N] (x_full per channel; a sequence has at
 * most N rows), Y [VC_BLOCK][N] (the outputs per channel), W [VC_BLOCK][K], the block's state
 * rows [VC_BLOCK][P], bias and a row buffer [VC_BLOCK]; f32: the weights transposed, [K][Ch]. */
static size_t vc_ws_bytes(const vc_geom *g) {
  size_t f = (size_t)VC_BLOCK * (size_t)(g->P + g->N) + (size_t)VC_BLOCK * (size_t)g->N +
             (size_t)VC_BLOCK * (size_t)g->K + (size_t)VC_BLOCK * (size_t)g->P + 2 * VC_BLOCK;
  const size_t wt = (size_t)g->Ch * (size_t)g->K; /* the f32 path's transposed weights */
  if (f < wt) f = wt;
  return (f * sizeof(float) + 63) & ~(size_t)63;
}

static size_t vc_scratch_bytes(const gnode *n, const tinfo *in, int n_threads) {
  vc_geom g;
  tinfo t[VC_N_IN];
  memset(t, 0, sizeof t);
  for (int i = 0; i < n->n_inputs && i < VC_N_IN; i++) t[i] = in[i];
  t[VC_IN_CU].data = NULL; /* sizes only: contents are checked by run() */
  if (vc_resolve(n, t, &g, NULL) != PH_OK || g.N < 0 || g.Ch < 0 || g.K < 0) return 0;
  return vc_ws_bytes(&g) * (size_t)(n_threads > 0 ? n_threads : 1);
}

typedef struct vc_job {
  const act_kernels *act; /* the active variant's SiLU, read once per run */
  const vc_geom *g;
  const tensor *x, *w, *bias, *state;
  const int32_t *cu;
  tensor *out, *final_state;
  char *scratch;
  size_t ws_bytes;
  int64_t n_blocks;
} vc_job;

/* acc[i] += w[i] * x[i]: a product, then a sum (two roundings, as conv_causal_channel). */
static inline void vc_tap(float *restrict acc, const float *restrict w, const float *restrict x,
                          int64_t n) {
  for (int64_t i = 0; i < n; i++) acc[i] += w[i] * x[i];
}

/* The f32 path, token-major: a task is VC_TOKENS consecutive packed rows over all channels
 * (rows of several sequences when they are short, as at decode), so it reads the input rows
 * front to back; per token and block of VC_BLOCK channels, each channel's
 * operations are those of conv_causal_channel (acc = bias, then acc + w[k] * x_full[t + k*dil]
 * in increasing k), so the bits are the channel-major path's. x_full's first P positions are the
 * initial state, read (never written) here; the weights are transposed once per task into
 * Wt [K][Ch]. The output never aliases the input (the executor's arena keeps a node's inputs and
 * outputs apart). The final state, which may alias the initial state, is written by a second
 * pool run (vc_final_f32), after every task has read it. */
static void vc_task_f32(void *ctx, size_t task, int thread) {
  const vc_job *j = ctx;
  const vc_geom *g = j->g;
  const int64_t row0 = (int64_t)task * VC_TOKENS;
  const int64_t row1 = row0 + VC_TOKENS < g->N ? row0 + VC_TOKENS : g->N;
  const int64_t P = g->P, K = g->K, Ch = g->Ch, dil = g->dil;
  const float *xd = j->x->data, *wd = j->w->data, *sd = j->state->data;
  const float *bd = j->bias ? (const float *)j->bias->data : NULL;
  float *od = j->out->data;
  float *Wt = (float *)(void *)(j->scratch + (size_t)thread * j->ws_bytes);
  for (int64_t c = 0; c < Ch; c++)
    for (int64_t k = 0; k < K; k++) Wt[k * Ch + c] = wd[c * K + k];
  int64_t b = 0; /* the sequence of each row: cu[b] <= row < cu[b + 1] */
  for (int64_t row = row0; row < row1; row++) {
    while (j->cu[b + 1] <= row) b++; /* skips sequences of 0 tokens */
    const int64_t r0 = j->cu[b], t = row - r0;
    float *y = od + row * Ch;
    for (int64_t c0 = 0; c0 < Ch; c0 += VC_BLOCK) {
      const int64_t nc = Ch - c0 < VC_BLOCK ? Ch - c0 : VC_BLOCK;
      float acc[VC_BLOCK], h[VC_BLOCK];
      for (int64_t i = 0; i < nc; i++) acc[i] = bd ? bd[c0 + i] : 0.0f;
      for (int64_t k = 0; k < K; k++) {
        const int64_t q = t + k * dil; /* position in x_full */
        const float *src = xd + (r0 + q - P) * Ch + c0;
        if (q < P) { /* the initial state, channel-major [Ch][P] */
          for (int64_t i = 0; i < nc; i++) h[i] = sd[(b * Ch + c0 + i) * P + q];
          src = h;
        }
        if (nc == VC_BLOCK)
          vc_tap(acc, Wt + k * Ch + c0, src, VC_BLOCK); /* a constant count: vectorised */
        else
          vc_tap(acc, Wt + k * Ch + c0, src, nc);
      }
      if (g->silu)
        j->act->silu(acc, y + c0, nc);
      else
        memcpy(y + c0, acc, (size_t)nc * sizeof(float));
    }
  }
}

/* final_state[b][c][p] = x_full[L + p] for (sequence b, block of channels): in increasing p,
 * which reads the initial state only at L + p >= p, so an aliased state shifts in place. */
static void vc_final_f32(void *ctx, size_t task, int thread) {
  (void)thread;
  const vc_job *j = ctx;
  const vc_geom *g = j->g;
  const int64_t b = (int64_t)task / j->n_blocks, c0 = ((int64_t)task % j->n_blocks) * VC_BLOCK;
  const int64_t nc = g->Ch - c0 < VC_BLOCK ? g->Ch - c0 : VC_BLOCK;
  const int64_t P = g->P, Ch = g->Ch, r0 = j->cu[b], L = (int64_t)j->cu[b + 1] - r0;
  const float *xd = j->x->data, *sd = j->state->data;
  float *fd = j->final_state->data;
  for (int64_t i = 0; i < nc; i++)
    for (int64_t p = 0; p < P; p++) {
      const int64_t q = L + p, c = c0 + i;
      fd[(b * Ch + c) * P + p] = q < P ? sd[(b * Ch + c) * P + q] : xd[(r0 + q - P) * Ch + c];
    }
}

/* Every tensor is read and written a row of the block at a time (one call per row: the block's
 * channels are contiguous in x, out, weight, bias and both states), never an element or a
 * channel at a time: at decode, L = 1 and P = 3, per-channel calls were most of the op. */
static void vc_task(void *ctx, size_t task, int thread) {
  const vc_job *j = ctx;
  const vc_geom *g = j->g;
  const int64_t b = (int64_t)task / j->n_blocks, c0 = ((int64_t)task % j->n_blocks) * VC_BLOCK;
  const int64_t nc = g->Ch - c0 < VC_BLOCK ? g->Ch - c0 : VC_BLOCK;
  const int64_t P = g->P, K = g->K, Ch = g->Ch;
  const int64_t r0 = j->cu[b], L = (int64_t)j->cu[b + 1] - r0, F = P + L;
  float *X = (float *)(void *)(j->scratch + (size_t)thread * j->ws_bytes);
  float *Y = X + VC_BLOCK * F, *W = Y + VC_BLOCK * L, *S = W + VC_BLOCK * K;
  float *bias = S + VC_BLOCK * P, *row = bias + VC_BLOCK;

  /* Everything this block reads, before anything is written (final_state may alias). */
  tensor_load_f32(j->w, c0 * K, nc * K, W);
  if (j->bias)
    tensor_load_f32(j->bias, c0, nc, bias);
  else
    for (int64_t i = 0; i < nc; i++) bias[i] = 0.0f;
  tensor_load_f32(j->state, (b * Ch + c0) * P, nc * P, S);
  for (int64_t i = 0; i < nc; i++)
    for (int64_t p = 0; p < P; p++) X[i * F + p] = S[i * P + p];
  for (int64_t t = 0; t < L; t++) {
    tensor_load_f32(j->x, (r0 + t) * Ch + c0, nc, row);
    for (int64_t i = 0; i < nc; i++) X[i * F + P + t] = row[i];
  }

  /* the SiLU over the block's L outputs of all nc channels at once: act_siluf's bits, which
   * conv_causal_channel's own silu gives too (kernels/conv.h) */
  for (int64_t i = 0; i < nc; i++)
    conv_causal_channel(X + i * F, W + i * K, K, g->dil, bias[i], 0, L, Y + i * L);
  if (g->silu) j->act->silu(Y, Y, nc * L);
  for (int64_t t = 0; t < L; t++) {
    for (int64_t i = 0; i < nc; i++) row[i] = Y[i * L + t];
    tensor_store_f32(j->out, (r0 + t) * Ch + c0, nc, row);
  }
  for (int64_t i = 0; i < nc; i++)
    for (int64_t p = 0; p < P; p++) S[i * P + p] = X[i * F + L + p];
  tensor_store_f32(j->final_state, (b * Ch + c0) * P, nc * P, S);
}

/* The plan is the geometry of these shapes; the offsets' contents are run()'s to check. */
static ph_status vc_plan(const gnode *n, const tinfo *in, void *plan, diag *d) {
  return vc_resolve(n, in, plan, d);
}

static ph_status vc_run(const gnode *n, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                        diag *d) {
  const vc_geom *gp = ctx->plan; /* vc_resolve on these shapes, once per plan */
  RETURN_ERROR_IF(!gp, d, PH_ERR_INTERNAL, "VarlenCausalConvWithState: run without a plan");
  const vc_geom g = *gp;
  RETURN_ERROR_IF(!out[0] || !out[1], d, PH_ERR_INTERNAL,
                  "VarlenCausalConvWithState: output and final_state are required");
  FORWARD_IF_ERROR(vc_check_cu(n, in[VC_IN_CU]->data, g.B, g.N, d));
  tensor *su = n->n_outputs > 2 ? out[2] : NULL;
  if (su && g.cap > 0) {
    /* the capture: raw rows, nothing read from the outputs; zeros past each captured prefix */
    const int32_t *cu = in[VC_IN_CU]->data, *cc = in[VC_IN_CAPTURE]->data;
    size_t es = dtype_size(g.dt), row = (size_t)g.Ch * es;
    memset(su->data, 0, (size_t)(g.B * g.cap) * row);
    for (int64_t b = 0; b < g.B; b++) {
      int64_t L = (int64_t)cu[b + 1] - cu[b], lim = g.cap < L ? g.cap : L;
      int64_t a = cc[b] < 0 ? 0 : cc[b] > lim ? lim : cc[b];
      memcpy((char *)su->data + (size_t)(b * g.cap) * row,
             (const char *)in[VC_IN_X]->data + (size_t)cu[b] * row, (size_t)a * row);
    }
  }

  vc_job j;
  memset(&j, 0, sizeof j);
  j.g = &g;
  j.act = kernel_set_of(kernel_variant_active())->act;
  j.x = in[VC_IN_X];
  j.w = in[VC_IN_W];
  j.bias = g.has_bias ? in[VC_IN_BIAS] : NULL;
  j.state = in[VC_IN_STATE];
  j.cu = in[VC_IN_CU]->data;
  j.out = out[0];
  j.final_state = out[1];
  j.ws_bytes = vc_ws_bytes(&g);
  j.n_blocks = (g.Ch + VC_BLOCK - 1) / VC_BLOCK;
  const int n_threads = pool_threads(ctx->pool);
  RETURN_ERROR_IF(ctx->scratch_bytes < j.ws_bytes * (size_t)n_threads || !ctx->scratch, d,
                  PH_ERR_INTERNAL,
                  "VarlenCausalConvWithState: scratch is %zu bytes, %d threads need %zu",
                  ctx->scratch_bytes, n_threads, j.ws_bytes * (size_t)n_threads);
  j.scratch = ctx->scratch;
  if (g.B > 0 && g.Ch > 0 && g.dt == PH_DTYPE_F32) {
    if (g.N > 0) pool_run(ctx->pool, (size_t)((g.N + VC_TOKENS - 1) / VC_TOKENS), vc_task_f32, &j);
    pool_run(ctx->pool, (size_t)(g.B * j.n_blocks), vc_final_f32, &j);
  } else if (g.B > 0 && g.Ch > 0) {
    pool_run(ctx->pool, (size_t)(g.B * j.n_blocks), vc_task, &j);
  }
  return PH_OK;
}

const op_def op_def_varlen_causal_conv_with_state = {"com.microsoft",
                                                     "VarlenCausalConvWithState",
                                                     5,
                                                     6,
                                                     2,
                                                     3,
                                                     vc_infer,
                                                     vc_run,
                                                     vc_scratch_bytes,
                                                     sizeof(vc_geom),
                                                     vc_plan};
