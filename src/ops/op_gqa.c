/* op_gqa — com.microsoft GroupQueryAttention: causal attention over a dense BNSH KV cache, the
 * full-attention layer of the dense (ORT-CPU) Qwen3.5 layout.
 *
 * Dimension letters: B batch rows, S new tokens per row, Hq query heads, Hkv kv heads, D head
 * size, P past capacity (past_key dim 2), T = P + S present capacity. F is the IO
 * dtype.
 *
 *   in 0  query            F in {f32,f16,bf16}: [B,S,Hq*D], or packed [B,S,(Hq+2*Hkv)*D]
 *                          (q | k | v per token) when key and value are absent
 *   in 1  key              F [B,S,Hkv*D] (optional, with value)
 *   in 2  value            F [B,S,Hkv*D] (optional, with key)
 *   in 3  past_key         F [B,Hkv,P,D] (optional, with past_value; P may be 0)
 *   in 4  past_value       F [B,Hkv,P,D]
 *   in 5  seqlens_k        int32 [B]: total valid length L_b minus 1
 *   in 6  total_sequence_length  int32 scalar or [1]: must be <= P + S (checked at run time)
 *   in 7  cos_cache        F [max_pos, rot/2] (with sin_cache; required iff do_rotary = 1)
 *   in 8  sin_cache        F [max_pos, rot/2]
 *   in 9  position_ids     int64 [B,S] (optional, do_rotary only): rotary positions; default
 *                          P_b + s
 *   in 10 attention_bias, 12 k_scale, 13 v_scale, 14 q_norm_weight, 15 k_norm_weight:
 *                          PH_ERR_UNSUPPORTED (ORT's CPU kernel rejects q/k norm too)
 *   in 11 head_sink        F [Hq] (optional): exp(sink_h) joins the softmax denominator
 *   out 0 output           F [B,S,Hq*D]
 *   out 1 present_key      F [B,Hkv,T,D] (required)
 *   out 2 present_value    F [B,Hkv,T,D] (required)
 *   out 3 output_qk        PH_ERR_UNSUPPORTED
 *   attrs num_heads, kv_num_heads (required, > 0, num_heads % kv_num_heads == 0), scale (0 ->
 *     1/sqrt(D)), softcap (0 off; else softcap*tanh(x/softcap) on scaled scores),
 *     local_window_size (-1 off; W >= 1: query at p sees keys p-W+1..p), do_rotary,
 *     rotary_interleaved (0 NeoX halves, 1 adjacent pairs); smooth_softmax, qk_output, causal=0,
 *     sliding_window_cache and k/v_quant_type other than "NONE" are PH_ERR_UNSUPPORTED.
 *
 * Semantics of batch row b (L_b = seqlens_k[b] + 1, S <= L_b <= T else PH_ERR_INVALID_ARGUMENT;
 * P_b = L_b - S valid past rows):
 *   present[b] = past[b][0:P_b], then the S new keys/values at rows P_b..L_b-1, then zeros.
 *   New keys (and queries) are rotated first when do_rotary; the key is rounded to F as it is
 *   stored, and attention reads every key and value from present, so a token's key is the same
 *   value in this step and in every later decode step.
 *   Query s (absolute position p = P_b + s) attends keys max(0, p-W+1)..p (bottom-right causal);
 *   query head h reads kv head h / (Hq/Hkv). Softmax in f32 with the maximum subtracted; the
 *   output is sum_j e_j v_j / sum_j e_j rounded once to F.
 * present never aliases past (the shapes differ). Work: phase 1 builds present over (b, kv head)
 * tasks, phase 2 runs one single-threaded task per (b, query head), its query rows in tiles of
 * up to ATTEND_MAX_ROWS positions through attend_rows (kernels/attend.h, PagedAttention's core
 * too: a row's bits never depend on its tile); no reduction spans tasks, so results are
 * bit-identical for any thread count and any batch neighbours.
 * Scratch per thread: attend_work_floats(D, D) + 2 * ATTEND_MAX_ROWS * D + rot floats (the
 * kernel's work, the q and output tiles, cos/sin).
 */
#include <math.h>
#include <string.h>

#include "kernels/attend.h"
#include "kernels/rope.h"
#include "ops/op.h"
#include "ops/op_util.h"
#include "tensor/dtype.h"

enum {
  GQA_IN_QUERY,
  GQA_IN_KEY,
  GQA_IN_VALUE,
  GQA_IN_PAST_KEY,
  GQA_IN_PAST_VALUE,
  GQA_IN_SEQLENS_K,
  GQA_IN_TOTAL_SEQLEN,
  GQA_IN_COS,
  GQA_IN_SIN,
  GQA_IN_POSITION_IDS,
  GQA_IN_ATTENTION_BIAS,
  GQA_IN_HEAD_SINK,
  GQA_IN_K_SCALE,
  GQA_IN_V_SCALE,
  GQA_IN_Q_NORM,
  GQA_IN_K_NORM,
  GQA_N_IN
};

static const char *const GQA_IN_NAMES[GQA_N_IN] = {"query",
                                                   "key",
                                                   "value",
                                                   "past_key",
                                                   "past_value",
                                                   "seqlens_k",
                                                   "total_sequence_length",
                                                   "cos_cache",
                                                   "sin_cache",
                                                   "position_ids",
                                                   "attention_bias",
                                                   "head_sink",
                                                   "k_scale",
                                                   "v_scale",
                                                   "q_norm_weight",
                                                   "k_norm_weight"};

static int64_t gqa_mul(int64_t a, int64_t b) { return a < 0 || b < 0 ? -1 : a * b; }

/* ---- geometry: resolved by infer, scratch_bytes and plan; run() reads the plan ---- */

typedef struct gqa_geom {
  ph_dtype dt;
  int64_t B, S, Hq, Hkv, D, P, T; /* -1 = unknown (build time) */
  int packed, has_past;
  int rotary, interleaved, has_pos_ids, has_sink;
  int64_t rot, max_pos; /* rotary only; -1 unknown */
  float scale, softcap; /* scale already resolved when D is known */
  int64_t window;       /* -1 off */
} gqa_geom;

static ph_status gqa_attrs(const gnode *n, gqa_geom *g, diag *d) {
  int64_t v;
  FORWARD_IF_ERROR(op_attr_int(n, "num_heads", 0, &g->Hq, d));
  FORWARD_IF_ERROR(op_attr_int(n, "kv_num_heads", 0, &g->Hkv, d));
  RETURN_ERROR_IF(g->Hq <= 0 || g->Hkv <= 0, d, PH_ERR_INVALID_ARGUMENT,
                  "attributes num_heads (%lld) and kv_num_heads (%lld) are required and > 0",
                  (long long)g->Hq, (long long)g->Hkv);
  RETURN_ERROR_IF(g->Hq % g->Hkv != 0, d, PH_ERR_INVALID_ARGUMENT,
                  "num_heads %lld is not a multiple of kv_num_heads %lld", (long long)g->Hq,
                  (long long)g->Hkv);
  FORWARD_IF_ERROR(op_attr_float(n, "scale", 0.0f, &g->scale, d));
  RETURN_ERROR_IF(!(g->scale >= 0.0f) || isinf(g->scale), d, PH_ERR_INVALID_ARGUMENT,
                  "attribute scale must be finite and >= 0, got %g", (double)g->scale);
  FORWARD_IF_ERROR(op_attr_float(n, "softcap", 0.0f, &g->softcap, d));
  RETURN_ERROR_IF(!(g->softcap >= 0.0f) || isinf(g->softcap), d, PH_ERR_INVALID_ARGUMENT,
                  "attribute softcap must be finite and >= 0, got %g", (double)g->softcap);
  FORWARD_IF_ERROR(op_attr_int(n, "local_window_size", -1, &g->window, d));
  RETURN_ERROR_IF(g->window == 0 || g->window < -1, d, PH_ERR_INVALID_ARGUMENT,
                  "attribute local_window_size must be -1 (off) or >= 1, got %lld",
                  (long long)g->window);
  FORWARD_IF_ERROR(op_attr_int(n, "do_rotary", 0, &v, d));
  RETURN_ERROR_IF(v != 0 && v != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "attribute do_rotary must be 0 or 1, got %lld", (long long)v);
  g->rotary = (int)v;
  FORWARD_IF_ERROR(op_attr_int(n, "rotary_interleaved", 0, &v, d));
  RETURN_ERROR_IF(v != 0 && v != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "attribute rotary_interleaved must be 0 or 1, got %lld", (long long)v);
  g->interleaved = (int)v;
  static const char *const off_attrs[3] = {"smooth_softmax", "qk_output", "sliding_window_cache"};
  for (int i = 0; i < 3; i++) {
    FORWARD_IF_ERROR(op_attr_int(n, off_attrs[i], 0, &v, d));
    RETURN_ERROR_IF(v != 0, d, PH_ERR_UNSUPPORTED, "attribute %s=%lld is not supported",
                    off_attrs[i], (long long)v);
  }
  FORWARD_IF_ERROR(op_attr_int(n, "causal", 1, &v, d));
  RETURN_ERROR_IF(v != 1, d, PH_ERR_UNSUPPORTED, "attribute causal=%lld is not supported",
                  (long long)v);
  static const char *const quant_attrs[2] = {"k_quant_type", "v_quant_type"};
  for (int i = 0; i < 2; i++) {
    const char *q = NULL;
    FORWARD_IF_ERROR(op_attr_string(n, quant_attrs[i], "NONE", &q, d));
    RETURN_ERROR_IF(strcmp(q, "NONE") != 0, d, PH_ERR_UNSUPPORTED,
                    "attribute %s=\"%s\" is not supported (quantized KV cache)", quant_attrs[i], q);
  }
  return PH_OK;
}

/* want_qk: output 3 is requested. */
static ph_status gqa_resolve(const gnode *n, const tinfo *in, int want_qk, gqa_geom *g, diag *d) {
  memset(g, 0, sizeof *g);
  RETURN_ERROR_IF(n->n_inputs < 7 || n->n_inputs > GQA_N_IN, d, PH_ERR_INVALID_ARGUMENT,
                  "GroupQueryAttention takes 7 to 16 inputs, got %d", n->n_inputs);
  RETURN_ERROR_IF(n->n_outputs < 3 || n->n_outputs > 4, d, PH_ERR_INVALID_ARGUMENT,
                  "GroupQueryAttention has 3 or 4 outputs (present_key and present_value are "
                  "required), got %d",
                  n->n_outputs);
  FORWARD_IF_ERROR(gqa_attrs(n, g, d));
  static const int unsupported[5] = {GQA_IN_ATTENTION_BIAS, GQA_IN_K_SCALE, GQA_IN_V_SCALE,
                                     GQA_IN_Q_NORM, GQA_IN_K_NORM};
  for (int i = 0; i < 5; i++)
    RETURN_ERROR_IF(op_has_input(n, in, unsupported[i]), d, PH_ERR_UNSUPPORTED,
                    "input %s is not supported", GQA_IN_NAMES[unsupported[i]]);
  RETURN_ERROR_IF(want_qk, d, PH_ERR_UNSUPPORTED, "output output_qk is not supported");
  static const int required[3] = {GQA_IN_QUERY, GQA_IN_SEQLENS_K, GQA_IN_TOTAL_SEQLEN};
  for (int i = 0; i < 3; i++)
    RETURN_ERROR_IF(!op_has_input(n, in, required[i]), d, PH_ERR_INVALID_ARGUMENT,
                    "input %s is required", GQA_IN_NAMES[required[i]]);
  RETURN_ERROR_IF(op_has_input(n, in, GQA_IN_KEY) != op_has_input(n, in, GQA_IN_VALUE), d,
                  PH_ERR_INVALID_ARGUMENT,
                  "key and value must both be present, or both absent (packed QKV)");
  RETURN_ERROR_IF(op_has_input(n, in, GQA_IN_PAST_KEY) != op_has_input(n, in, GQA_IN_PAST_VALUE), d,
                  PH_ERR_INVALID_ARGUMENT,
                  "past_key and past_value must both be present or absent");
  RETURN_ERROR_IF(op_has_input(n, in, GQA_IN_COS) != op_has_input(n, in, GQA_IN_SIN), d,
                  PH_ERR_INVALID_ARGUMENT,
                  "cos_cache and sin_cache must both be present or absent");
  RETURN_ERROR_IF(g->rotary != op_has_input(n, in, GQA_IN_COS), d, PH_ERR_INVALID_ARGUMENT,
                  g->rotary ? "do_rotary=1 needs cos_cache and sin_cache"
                            : "cos_cache/sin_cache are given but do_rotary=0");
  RETURN_ERROR_IF(!g->rotary && op_has_input(n, in, GQA_IN_POSITION_IDS), d,
                  PH_ERR_INVALID_ARGUMENT, "position_ids is given but do_rotary=0");
  g->packed = !op_has_input(n, in, GQA_IN_KEY);
  g->has_past = op_has_input(n, in, GQA_IN_PAST_KEY);
  g->has_pos_ids = op_has_input(n, in, GQA_IN_POSITION_IDS);
  g->has_sink = op_has_input(n, in, GQA_IN_HEAD_SINK);

  /* dtypes */
  const tinfo *q = &in[GQA_IN_QUERY];
  g->dt = q->dtype;
  RETURN_ERROR_IF(!dtype_is_compute_float(g->dt), d, PH_ERR_TENSOR_DTYPE,
                  "query must be f32, f16 or bf16, got %s", ph_dtype_name(g->dt));
  static const int same_t[7] = {GQA_IN_KEY, GQA_IN_VALUE, GQA_IN_PAST_KEY, GQA_IN_PAST_VALUE,
                                GQA_IN_COS, GQA_IN_SIN,   GQA_IN_HEAD_SINK};
  for (int i = 0; i < 7; i++) {
    int k = same_t[i];
    RETURN_ERROR_IF(op_has_input(n, in, k) && in[k].dtype != g->dt, d, PH_ERR_TENSOR_DTYPE,
                    "%s is %s but query is %s", GQA_IN_NAMES[k], ph_dtype_name(in[k].dtype),
                    ph_dtype_name(g->dt));
  }
  RETURN_ERROR_IF(in[GQA_IN_SEQLENS_K].dtype != PH_DTYPE_I32, d, PH_ERR_TENSOR_DTYPE,
                  "seqlens_k must be int32, got %s", ph_dtype_name(in[GQA_IN_SEQLENS_K].dtype));
  RETURN_ERROR_IF(in[GQA_IN_TOTAL_SEQLEN].dtype != PH_DTYPE_I32, d, PH_ERR_TENSOR_DTYPE,
                  "total_sequence_length must be int32, got %s",
                  ph_dtype_name(in[GQA_IN_TOTAL_SEQLEN].dtype));
  RETURN_ERROR_IF(g->has_pos_ids && in[GQA_IN_POSITION_IDS].dtype != PH_DTYPE_I64, d,
                  PH_ERR_TENSOR_DTYPE, "position_ids must be int64, got %s",
                  ph_dtype_name(in[GQA_IN_POSITION_IDS].dtype));

  /* query: [B, S, Hq*D] or packed [B, S, (Hq + 2 Hkv) * D] */
  g->B = g->S = g->D = g->P = g->T = g->rot = g->max_pos = -1;
  if (q->rank >= 0) {
    RETURN_ERROR_IF(q->rank != 3, d, PH_ERR_TENSOR_SHAPE, "query must have rank 3, got %d",
                    q->rank);
    g->B = q->dims[0];
    g->S = q->dims[1];
    const int64_t heads = g->packed ? g->Hq + 2 * g->Hkv : g->Hq;
    if (q->dims[2] >= 0) {
      RETURN_ERROR_IF(q->dims[2] % heads != 0 || q->dims[2] == 0, d, PH_ERR_TENSOR_SHAPE,
                      "query hidden size %lld is not a positive multiple of %lld heads%s",
                      (long long)q->dims[2], (long long)heads,
                      g->packed ? " (packed: num_heads + 2 * kv_num_heads)" : "");
      g->D = q->dims[2] / heads;
    }
  }
  for (int k = GQA_IN_KEY; k <= GQA_IN_VALUE && !g->packed; k++) {
    const tinfo *t = &in[k];
    if (t->rank < 0) continue;
    RETURN_ERROR_IF(t->rank != 3, d, PH_ERR_TENSOR_SHAPE, "%s must have rank 3, got %d",
                    GQA_IN_NAMES[k], t->rank);
    RETURN_ERROR_IF(op_dims_conflict(t->dims[0], g->B) || op_dims_conflict(t->dims[1], g->S), d,
                    PH_ERR_TENSOR_SHAPE, "%s is [%lld, %lld, ...] but query is [%lld, %lld, ...]",
                    GQA_IN_NAMES[k], (long long)t->dims[0], (long long)t->dims[1], (long long)g->B,
                    (long long)g->S);
    RETURN_ERROR_IF(op_dims_conflict(t->dims[2], gqa_mul(g->Hkv, g->D)), d, PH_ERR_TENSOR_SHAPE,
                    "%s hidden size is %lld, expected kv_num_heads * head size = %lld",
                    GQA_IN_NAMES[k], (long long)t->dims[2], (long long)gqa_mul(g->Hkv, g->D));
    if (g->D < 0 && t->dims[2] >= 0) {
      RETURN_ERROR_IF(t->dims[2] % g->Hkv != 0, d, PH_ERR_TENSOR_SHAPE,
                      "%s hidden size %lld is not a multiple of kv_num_heads %lld", GQA_IN_NAMES[k],
                      (long long)t->dims[2], (long long)g->Hkv);
      g->D = t->dims[2] / g->Hkv;
    }
  }

  /* past: [B, Hkv, P, D], both equal */
  if (!g->has_past) g->P = 0;
  for (int k = GQA_IN_PAST_KEY; k <= GQA_IN_PAST_VALUE && g->has_past; k++) {
    const tinfo *t = &in[k];
    if (t->rank < 0) continue;
    RETURN_ERROR_IF(t->rank != 4, d, PH_ERR_TENSOR_SHAPE,
                    "%s must have rank 4 [B, kv_num_heads, P, D], got %d", GQA_IN_NAMES[k],
                    t->rank);
    const int64_t want[4] = {g->B, g->Hkv, g->P, g->D};
    for (int i = 0; i < 4; i++)
      RETURN_ERROR_IF(op_dims_conflict(t->dims[i], want[i]), d, PH_ERR_TENSOR_SHAPE,
                      "%s dim %d is %lld, expected %lld (B, kv_num_heads, P, D)", GQA_IN_NAMES[k],
                      i, (long long)t->dims[i], (long long)want[i]);
    if (g->P < 0) g->P = t->dims[2];
    if (g->D < 0) g->D = t->dims[3];
  }
  g->T = g->P < 0 || g->S < 0 ? -1 : g->P + g->S;

  /* seqlens_k [B], total_sequence_length scalar or [1] */
  const tinfo *sk = &in[GQA_IN_SEQLENS_K], *tl = &in[GQA_IN_TOTAL_SEQLEN];
  if (sk->rank >= 0) {
    RETURN_ERROR_IF(sk->rank != 1, d, PH_ERR_TENSOR_SHAPE, "seqlens_k must be [B], got rank %d",
                    sk->rank);
    RETURN_ERROR_IF(op_dims_conflict(sk->dims[0], g->B), d, PH_ERR_TENSOR_SHAPE,
                    "seqlens_k has %lld rows, batch is %lld", (long long)sk->dims[0],
                    (long long)g->B);
  }
  if (tl->rank >= 0) {
    int one =
        tl->rank == 0 || (tl->rank == 1 && tl->dims[0] == 1) || (tl->rank == 1 && tl->dims[0] < 0);
    RETURN_ERROR_IF(!one, d, PH_ERR_TENSOR_SHAPE, "total_sequence_length must be a scalar or [1]");
    if (tl->data && g->T >= 0 && (tl->rank == 0 || tl->dims[0] == 1)) {
      int32_t total = *(const int32_t *)tl->data;
      RETURN_ERROR_IF(total < 0 || total > g->T, d, PH_ERR_INVALID_ARGUMENT,
                      "total_sequence_length %d is outside [0, P + S = %lld]", (int)total,
                      (long long)g->T);
    }
  }

  /* rotary caches [max_pos, rot/2], rot <= D; position_ids [B, S] */
  if (g->rotary) {
    for (int k = GQA_IN_COS; k <= GQA_IN_SIN; k++) {
      const tinfo *t = &in[k];
      if (t->rank < 0) continue;
      RETURN_ERROR_IF(t->rank != 2, d, PH_ERR_TENSOR_SHAPE, "%s must have rank 2, got %d",
                      GQA_IN_NAMES[k], t->rank);
      RETURN_ERROR_IF(op_dims_conflict(t->dims[0], g->max_pos) ||
                          op_dims_conflict(t->dims[1] < 0 ? -1 : 2 * t->dims[1], g->rot),
                      d, PH_ERR_TENSOR_SHAPE, "cos_cache and sin_cache shapes differ");
      if (g->max_pos < 0) g->max_pos = t->dims[0];
      if (g->rot < 0 && t->dims[1] >= 0) g->rot = 2 * t->dims[1];
    }
    RETURN_ERROR_IF(g->rot == 0, d, PH_ERR_TENSOR_SHAPE, "cos_cache has 0 columns");
    RETURN_ERROR_IF(g->rot > 0 && g->D >= 0 && g->rot > g->D, d, PH_ERR_TENSOR_SHAPE,
                    "cos_cache has %lld columns: 2 x that exceeds the head size %lld",
                    (long long)(g->rot / 2), (long long)g->D);
    const tinfo *p = &in[GQA_IN_POSITION_IDS];
    if (g->has_pos_ids && p->rank >= 0) {
      RETURN_ERROR_IF(p->rank != 2, d, PH_ERR_TENSOR_SHAPE,
                      "position_ids must be [B, S], got rank %d", p->rank);
      RETURN_ERROR_IF(op_dims_conflict(p->dims[0], g->B) || op_dims_conflict(p->dims[1], g->S), d,
                      PH_ERR_TENSOR_SHAPE, "position_ids is [%lld, %lld], expected [%lld, %lld]",
                      (long long)p->dims[0], (long long)p->dims[1], (long long)g->B,
                      (long long)g->S);
    }
  }

  /* head_sink [Hq] */
  const tinfo *hs = &in[GQA_IN_HEAD_SINK];
  if (g->has_sink && hs->rank >= 0)
    RETURN_ERROR_IF(hs->rank != 1 || op_dims_conflict(hs->dims[0], g->Hq), d, PH_ERR_TENSOR_SHAPE,
                    "head_sink must be [num_heads = %lld]", (long long)g->Hq);

  if (g->scale == 0.0f && g->D > 0) g->scale = (float)(1.0 / sqrt((double)g->D));
  return PH_OK;
}

static ph_status gqa_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  gqa_geom g;
  FORWARD_IF_ERROR(gqa_resolve(n, in, op_wants_output(n, 3), &g, d));
  const int64_t od[3] = {g.B, g.S, gqa_mul(g.Hq, g.D)};
  const int64_t pd[4] = {g.B, g.Hkv, g.T, g.D};
  out[0] = tinfo_make(g.dt, 3, od);
  out[1] = tinfo_make(g.dt, 4, pd);
  out[2] = tinfo_make(g.dt, 4, pd);
  if (n->n_outputs > 3) memset(&out[3], 0, sizeof out[3]); /* output_qk stays absent */
  return PH_OK;
}

/* Per thread: attend's work, q and out tiles [ATTEND_MAX_ROWS][D], cos and sin [rot/2]. */
static size_t gqa_slice_floats(const gqa_geom *g) {
  return attend_work_floats(g->D, g->D) +
         (size_t)(2 * ATTEND_MAX_ROWS * g->D + (g->rotary ? g->rot : 0));
}

static size_t gqa_scratch(const gnode *n, const tinfo *in, int n_threads) {
  gqa_geom g;
  if (gqa_resolve(n, in, 0, &g, NULL) != PH_OK || g.T < 0 || g.D < 0) return 0;
  return gqa_slice_floats(&g) * sizeof(float) * (size_t)(n_threads > 0 ? n_threads : 1);
}

/* ---- kernels ---- */

typedef struct gqa_job {
  const gqa_geom *g;
  const tensor *q, *k, *v;       /* k, v NULL when packed (then both live in q) */
  const tensor *past_k, *past_v; /* NULL when absent */
  const int32_t *seqlens;        /* [B] */
  const tensor *cos, *sin;       /* rotary only */
  const int64_t *pos_ids;        /* [B,S] or NULL */
  const tensor *sink;            /* [Hq] or NULL */
  tensor *out, *present_k, *present_v;
  float *scratch;
  size_t esize;
  attend_rows_fn attend; /* the variant chosen once per run (kernels/dispatch.h) */
} gqa_job;

/* element offsets of token (b, s)'s q head h, k head g and v head g */
static int64_t gqa_q_off(const gqa_job *j, int64_t b, int64_t s, int64_t h) {
  const gqa_geom *g = j->g;
  int64_t row = g->packed ? (g->Hq + 2 * g->Hkv) * g->D : g->Hq * g->D;
  return (b * g->S + s) * row + h * g->D;
}

static int64_t gqa_kv_off(const gqa_job *j, int64_t b, int64_t s, int64_t kvh, int is_v) {
  const gqa_geom *g = j->g;
  if (!g->packed) return (b * g->S + s) * g->Hkv * g->D + kvh * g->D;
  int64_t row = (g->Hq + 2 * g->Hkv) * g->D;
  return (b * g->S + s) * row + (g->Hq + (is_v ? g->Hkv : 0) + kvh) * g->D;
}

static int64_t gqa_pos(const gqa_job *j, int64_t b, int64_t s) {
  const gqa_geom *g = j->g;
  if (j->pos_ids) return j->pos_ids[b * g->S + s];
  return (int64_t)j->seqlens[b] + 1 - g->S + s;
}

/* Rotates x[0..rot) in place at position p; c, sn: rot/2 floats of scratch each. */
static void gqa_rotate(const gqa_job *j, float *x, int64_t p, float *c, float *sn) {
  const int64_t h = j->g->rot / 2;
  tensor_load_f32(j->cos, p * h, h, c);
  tensor_load_f32(j->sin, p * h, h, sn);
  rope_rotate_f32(x, c, sn, j->g->rot, j->g->interleaved, x);
}

/* Phase 1, task (b, kv head): present rows = valid past, new keys/values, zeros. */
static void gqa_present_task(void *ctx, size_t task, int thread) {
  const gqa_job *j = ctx;
  const gqa_geom *g = j->g;
  const int64_t b = (int64_t)task / g->Hkv, kvh = (int64_t)task % g->Hkv, D = g->D;
  const int64_t L = (int64_t)j->seqlens[b] + 1, Pb = L - g->S;
  const size_t es = j->esize, row_bytes = (size_t)D * es;
  const int64_t dst0 = (b * g->Hkv + kvh) * g->T * D; /* element offset of row 0 */
  char *pk = (char *)j->present_k->data, *pv = (char *)j->present_v->data;
  if (Pb > 0) {
    const int64_t src0 = (b * g->Hkv + kvh) * g->P * D;
    memcpy(pk + (size_t)dst0 * es, (const char *)j->past_k->data + (size_t)src0 * es,
           (size_t)Pb * row_bytes);
    memcpy(pv + (size_t)dst0 * es, (const char *)j->past_v->data + (size_t)src0 * es,
           (size_t)Pb * row_bytes);
  }
  const tensor *ks = g->packed ? j->q : j->k, *vs = g->packed ? j->q : j->v;
  /* slice: x [D], cos [rot/2], sin [rot/2] */
  float *x = j->scratch + (size_t)thread * gqa_slice_floats(g), *c = x + D;
  float *sn = c + (g->rotary ? g->rot / 2 : 0);
  for (int64_t s = 0; s < g->S; s++) {
    const int64_t dst = dst0 + (Pb + s) * D;
    const int64_t koff = gqa_kv_off(j, b, s, kvh, 0), voff = gqa_kv_off(j, b, s, kvh, 1);
    if (g->rotary) {
      tensor_load_f32(ks, koff, g->rot, x);
      gqa_rotate(j, x, gqa_pos(j, b, s), c, sn);
      tensor_store_f32(j->present_k, dst, g->rot, x);
      memcpy(pk + (size_t)(dst + g->rot) * es,
             (const char *)ks->data + (size_t)(koff + g->rot) * es, (size_t)(D - g->rot) * es);
    } else {
      memcpy(pk + (size_t)dst * es, (const char *)ks->data + (size_t)koff * es, row_bytes);
    }
    memcpy(pv + (size_t)dst * es, (const char *)vs->data + (size_t)voff * es, row_bytes);
  }
  if (L < g->T) {
    memset(pk + (size_t)(dst0 + L * D) * es, 0, (size_t)(g->T - L) * row_bytes);
    memset(pv + (size_t)(dst0 + L * D) * es, 0, (size_t)(g->T - L) * row_bytes);
  }
}

/* Phase 2, task (b, query head): all S queries of this head against present, in tiles of up to
 * ATTEND_MAX_ROWS consecutive positions (a row's bits do not depend on its tile: attend.h). */
static void gqa_attend_task(void *ctx, size_t task, int thread) {
  const gqa_job *j = ctx;
  const gqa_geom *g = j->g;
  const int64_t b = (int64_t)task / g->Hq, h = (int64_t)task % g->Hq, D = g->D;
  const int64_t kvh = h / (g->Hq / g->Hkv);
  const int64_t L = (int64_t)j->seqlens[b] + 1, Pb = L - g->S;
  /* present rows 0..T-1 of this kv head, contiguous (kernels/attend.h) */
  const size_t row0 = (size_t)((b * g->Hkv + kvh) * g->T * D) * j->esize;
  const attend_kv kv_rows = {.k = (const char *)j->present_k->data + row0,
                             .v = (const char *)j->present_v->data + row0,
                             .dt = g->dt,
                             .row_stride = D};
  /* slice: attend work, q [16][D], out [16][D], cos [rot/2], sin [rot/2] */
  float *work = j->scratch + (size_t)thread * gqa_slice_floats(g);
  float *q = work + attend_work_floats(D, D), *o = q + ATTEND_MAX_ROWS * D;
  float *c = o + ATTEND_MAX_ROWS * D, *sn = c + (g->rotary ? g->rot / 2 : 0);
  const float sink = j->sink ? tensor_get_f32(j->sink, h) : 0.0f;
  attend_query rows[ATTEND_MAX_ROWS];
  for (int64_t s0 = 0; s0 < g->S; s0 += ATTEND_MAX_ROWS) {
    const int n = (int)(g->S - s0 < ATTEND_MAX_ROWS ? g->S - s0 : ATTEND_MAX_ROWS);
    for (int i = 0; i < n; i++) {
      const int64_t s = s0 + i, p = Pb + s;
      float *qi = q + i * D;
      tensor_load_f32(j->q, gqa_q_off(j, b, s, h), D, qi);
      if (g->rotary) gqa_rotate(j, qi, gqa_pos(j, b, s), c, sn);
      rows[i] = (attend_query){.q = qi,
                               .lo = g->window > 0 && p - g->window + 1 > 0 ? p - g->window + 1 : 0,
                               .hi = p,
                               .sink = j->sink ? &sink : NULL,
                               .out = o + i * D};
    }
    j->attend(&kv_rows, D, g->scale, g->softcap, rows, n, work);
    for (int i = 0; i < n; i++)
      tensor_store_f32(j->out, (b * g->S + s0 + i) * g->Hq * D + h * D, D, o + i * D);
  }
}

static ph_status gqa_plan(const gnode *n, const tinfo *in, void *plan, diag *d) {
  return gqa_resolve(n, in, op_wants_output(n, 3), plan, d);
}

static ph_status gqa_run(const gnode *n, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                         diag *d) {
  (void)n;
  const gqa_geom *gp = ctx->plan; /* gqa_resolve on these shapes, once per plan */
  RETURN_ERROR_IF(!gp, d, PH_ERR_INTERNAL, "run without a plan");
  const gqa_geom g = *gp;
  RETURN_ERROR_IF(!out[0] || !out[1] || !out[2], d, PH_ERR_INVALID_ARGUMENT,
                  "outputs output, present_key and present_value are required");
  const int n_threads = pool_threads(ctx->pool);
  const size_t need = gqa_slice_floats(&g) * sizeof(float) * (size_t)n_threads;
  RETURN_ERROR_IF(ctx->scratch_bytes < need, d, PH_ERR_INTERNAL,
                  "scratch is %zu bytes, %zu needed for %d threads", ctx->scratch_bytes, need,
                  n_threads);

  /* lengths and positions are checked before anything is written */
  const int32_t *seqlens = in[GQA_IN_SEQLENS_K]->data;
  const int32_t total = *(const int32_t *)in[GQA_IN_TOTAL_SEQLEN]->data;
  RETURN_ERROR_IF(total < 0 || total > g.T, d, PH_ERR_INVALID_ARGUMENT,
                  "total_sequence_length %d is outside [0, P + S = %lld]", (int)total,
                  (long long)g.T);
  for (int64_t b = 0; b < g.B; b++) {
    const int64_t L = (int64_t)seqlens[b] + 1;
    RETURN_ERROR_IF(L < g.S || L > g.T, d, PH_ERR_INVALID_ARGUMENT,
                    "seqlens_k[%lld] = %d: total length %lld must lie in [S = %lld, P + S = "
                    "%lld]",
                    (long long)b, (int)seqlens[b], (long long)L, (long long)g.S, (long long)g.T);
  }
  const int64_t *pos_ids = g.has_pos_ids ? in[GQA_IN_POSITION_IDS]->data : NULL;
  if (g.rotary)
    for (int64_t b = 0; b < g.B; b++)
      for (int64_t s = 0; s < g.S; s++) {
        const int64_t p = pos_ids ? pos_ids[b * g.S + s] : (int64_t)seqlens[b] + 1 - g.S + s;
        RETURN_ERROR_IF(p < 0 || p >= g.max_pos, d, PH_ERR_INVALID_ARGUMENT,
                        "rotary position %lld of row %lld token %lld is outside the cos/sin "
                        "cache [0, %lld)",
                        (long long)p, (long long)b, (long long)s, (long long)g.max_pos);
      }

  gqa_job j;
  memset(&j, 0, sizeof j);
  j.g = &g;
  j.q = in[GQA_IN_QUERY];
  j.k = g.packed ? NULL : in[GQA_IN_KEY];
  j.v = g.packed ? NULL : in[GQA_IN_VALUE];
  j.past_k = g.has_past ? in[GQA_IN_PAST_KEY] : NULL;
  j.past_v = g.has_past ? in[GQA_IN_PAST_VALUE] : NULL;
  j.seqlens = seqlens;
  j.cos = g.rotary ? in[GQA_IN_COS] : NULL;
  j.sin = g.rotary ? in[GQA_IN_SIN] : NULL;
  j.pos_ids = pos_ids;
  j.sink = g.has_sink ? in[GQA_IN_HEAD_SINK] : NULL;
  j.out = out[0];
  j.present_k = out[1];
  j.present_v = out[2];
  j.scratch = ctx->scratch;
  j.attend = attend_rows_for(kernel_variant_active());
  j.esize = dtype_size(g.dt);
  pool_run(ctx->pool, (size_t)(g.B * g.Hkv), gqa_present_task, &j);
  pool_run(ctx->pool, (size_t)(g.B * g.Hq), gqa_attend_task, &j);
  return PH_OK;
}

const op_def op_def_group_query_attention = {
    "com.microsoft", "GroupQueryAttention", 7,       16, 3, 4, gqa_infer, gqa_run,
    gqa_scratch,     sizeof(gqa_geom),      gqa_plan};
