/* op_gated_delta_net — com.microsoft GatedDeltaNet v1, packed varlen layout: the contract, the
 * token loads and the split over threads; the compute is kernels/gated_delta.h.
 *
 * Letters: N packed tokens, B sequences, Hq = Hk query/key heads, Hv value heads (a multiple of
 * Hq; value head h reads q/k head h/(Hv/Hq)), Dk key width, Dv value width, C chunk length.
 *   query [N,Hq,Dk]  key [N,Hk,Dk]  value [N,Hv,Dv]  (dtype T: f32, f16 or bf16)
 *   cu_seqlens i32 [B+1] (optional)  decay f32 [N,Hv]  beta f32 [N,Hv]
 *   initial_state f32 [B,Hv,Dv,Dk] (V-major)  a_log f32 [Hv]  dt_bias f32 [Hv]
 *   capture_count i32 [B]  state_update_active i32 [1]
 *   -> output T [N,Hv,Dv] (= max(Hq,Hv))   final_state f32 [B,Hv,Dv,Dk]
 *      state_update f32 [B, C*(Hv + Hk*Dk + Hv*Dv)]
 * Without cu_seqlens the packing is uniform (spec/abi.md §2.2): either the same rank-3 tensors
 * with B from initial_state (1 without it) and N = B*S, or the [B,S,H,D] spelling (q/k/v
 * [B,S,H,D], decay/beta [B,S,Hv], output [B,S,Hv,Dv]; B from initial_state when present, else
 * from the query), which is the same memory as [B*S,H,D] and runs exactly as cu_seqlens
 * 0, S, 2S, ... would. Rank 4 with cu_seqlens is refused (ragged packing needs rank 3).
 * The recurrence is spec/abi.md §2.4: optional L2 norm of q and k, gate (raw or qwen), beta
 * (raw or sigmoid), decay first, delta from the decayed state, write, read after the write.
 *
 * Work is split over (sequence, value head) pairs; each pair is one single-threaded kernel
 * call. A sequence of one token (decode) runs the one-token step on the V-major state; a longer
 * one runs in chunks of the WY/UT form (kernels/gated_delta.h: the variant's chunk kernel from
 * kernels/dispatch.h, gated_delta_chunk or the blocked gated_delta_chunk_avx512, the core
 * LinearAttention runs too, on a K-major copy of the state, G = 1, per-head decay), chunks
 * anchored at that sequence's first token, so a sequence's results never depend on the other
 * sequences of the call nor on the thread count. A pair reads its whole initial state before
 * writing: final_state may alias it.
 * The one-token step has one arithmetic and one summation order (spec/abi.md §2.4 with the
 * state update S' = fmaf(k, δ, S·α) of §2.5): the scalar reference gated_delta_decode_ref and
 * the variant's V-major kernel (kernels/gated_delta_avx2.c), which reads the V-major state once
 * and writes it once, eight value rows at a time transposed in registers, with the same lanes,
 * the same sums in increasing key index and FMA exactly where the reference calls fmaf: its bits
 * equal the reference's. The kernel is chosen once per process by kernels/dispatch.h (the CPU,
 * PH_KERNELS, kernel_force_variant): scalar runs the reference, avx2 and avx512 run the AVX2
 * kernel. Never from the shapes.
 * Compact state updates (state_update_capacity C in 1..8, spec/abi.md §2.2, §2.5): input 9
 * capture_count i32 [B] (present iff C > 0), input 10 state_update_active i32 [1] (optional,
 * absent = active), output 2 f32 [B, C*(Hv + Hk*Dk + Hv*Dv)] (only with C > 0). Active and
 * cc_b = clamp(capture_count[b], 0, min(C, len_b)) > 0: sequence b runs every token through the
 * one-token step (never the chunked form), so its outputs and final state are the bits of len_b
 * one-token calls; its first cc_b slots get α, the key as used and the delta row, the rest of
 * its row zeros; kernels/state_replay.h replays them. cc_b = 0: the usual paths, row zero.
 * Inactive (input 10 = 0): capture_count ignored, output 2 all zeros. Output 2 is zero-filled
 * before the pairs run; each pair writes only its own slots (a key by the first value head of
 * its group).
 * Not yet: per-key-dim decay [N,Hv,Dk] (and never with C > 0: INVALID_ARGUMENT).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/dispatch.h"
#include "kernels/gated_delta.h"
#include "kernels/vec.h"
#include "ops/op.h"
#include "ops/op_util.h"
#include "tensor/dtype.h"

enum {
  GDN_IN_Q,
  GDN_IN_K,
  GDN_IN_V,
  GDN_IN_CU,
  GDN_IN_DECAY,
  GDN_IN_BETA,
  GDN_IN_STATE,
  GDN_IN_ALOG,
  GDN_IN_DTB,
  GDN_IN_CAPTURE,
  GDN_IN_ACTIVE,
  GDN_N_IN
};

#define GDN_MAX_CHUNK 256

/* ---- the contract ---------------------------------------------------------------------------- */

typedef struct gdn_geom {
  ph_dtype dt;
  int gated, delta;             /* from update_rule */
  int qwen, sigmoid;            /* gate_activation, beta_activation */
  int l2;                       /* qk_l2_norm */
  float scale;                  /* resolved once Dk is known */
  int64_t chunk;                /* capped at GDN_MAX_CHUNK */
  int64_t cap;                  /* state_update_capacity C, 0..8 */
  int has_active;               /* input 10 present */
  int64_t N, B, Hq, Hv, Dk, Dv; /* -1 unknown */
  int has_state;
  int has_cu;        /* 0: uniform packing, every sequence S tokens (spec/abi.md §2.2) */
  int rank4;         /* the [B,S,H,D] spelling (uniform only) */
  int64_t S;         /* tokens per sequence when uniform, -1 unknown */
  const int32_t *cu; /* cu_seqlens data when visible (run time, or a constant) */
} gdn_geom;

/* Sequence b's packed tokens [*start, *start + *len): from cu_seqlens, or uniform. */
static void gdn_seq(const gdn_geom *g, int64_t b, int64_t *start, int64_t *len) {
  if (g->has_cu) {
    *start = g->cu[b];
    *len = (int64_t)g->cu[b + 1] - g->cu[b];
  } else {
    *start = b * g->S;
    *len = g->S;
  }
}

static ph_status gdn_check_cu(const gdn_geom *g, diag *d) {
  const int32_t *cu = g->cu;
  RETURN_ERROR_IF(cu[0] != 0, d, PH_ERR_INVALID_ARGUMENT,
                  "GatedDeltaNet: cu_seqlens[0] must be 0, got %d", (int)cu[0]);
  for (int64_t b = 0; b < g->B; b++)
    RETURN_ERROR_IF(cu[b + 1] < cu[b], d, PH_ERR_INVALID_ARGUMENT,
                    "GatedDeltaNet: cu_seqlens must be non-decreasing, but cu_seqlens[%lld] = %d "
                    "< cu_seqlens[%lld] = %d",
                    (long long)(b + 1), (int)cu[b + 1], (long long)b, (int)cu[b]);
  RETURN_ERROR_IF((int64_t)cu[g->B] != g->N, d, PH_ERR_INVALID_ARGUMENT,
                  "GatedDeltaNet: cu_seqlens[%lld] must be the token count %lld, got %d",
                  (long long)g->B, (long long)g->N, (int)cu[g->B]);
  return PH_OK;
}

static ph_status gdn_resolve(const gnode *n, const tinfo *in_, gdn_geom *g, diag *d) {
  memset(g, 0, sizeof *g);
  RETURN_ERROR_IF(n->n_inputs < 3 || n->n_inputs > GDN_N_IN, d, PH_ERR_INVALID_ARGUMENT,
                  "GatedDeltaNet: takes 3 to 11 inputs, got %d", n->n_inputs);
  RETURN_ERROR_IF(n->n_outputs < 1 || n->n_outputs > 3, d, PH_ERR_INVALID_ARGUMENT,
                  "GatedDeltaNet: has 1 to 3 outputs, got %d", n->n_outputs);

  const char *rs = NULL;
  FORWARD_IF_ERROR(op_attr_update_rule(n, &rs, &g->gated, &g->delta, d));
  float scale_attr = 0.0f;
  FORWARD_IF_ERROR(op_attr_float(n, "scale", 0.0f, &scale_attr, d));
  RETURN_ERROR_IF(!isfinite(scale_attr), d, PH_ERR_INVALID_ARGUMENT,
                  "GatedDeltaNet: attribute scale must be a finite float, got %g",
                  (double)scale_attr);
  const char *ga = "none", *ba = "none";
  FORWARD_IF_ERROR(op_attr_string(n, "gate_activation", "none", &ga, d));
  if (strcmp(ga, "qwen") == 0)
    g->qwen = 1;
  else
    RETURN_ERROR_IF(strcmp(ga, "none") != 0, d, PH_ERR_INVALID_ARGUMENT,
                    "GatedDeltaNet: gate_activation \"%s\" is not none or qwen", ga);
  FORWARD_IF_ERROR(op_attr_string(n, "beta_activation", "none", &ba, d));
  if (strcmp(ba, "sigmoid") == 0)
    g->sigmoid = 1;
  else
    RETURN_ERROR_IF(strcmp(ba, "none") != 0, d, PH_ERR_INVALID_ARGUMENT,
                    "GatedDeltaNet: beta_activation \"%s\" is not none or sigmoid", ba);
  int64_t l2 = 0;
  FORWARD_IF_ERROR(op_attr_int(n, "qk_l2_norm", 0, &l2, d));
  RETURN_ERROR_IF(l2 != 0 && l2 != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "GatedDeltaNet: qk_l2_norm must be 0 or 1, got %lld", (long long)l2);
  g->l2 = (int)l2;
  FORWARD_IF_ERROR(op_attr_int(n, "chunk_size", 64, &g->chunk, d));
  RETURN_ERROR_IF(g->chunk < 1, d, PH_ERR_INVALID_ARGUMENT,
                  "GatedDeltaNet: chunk_size must be >= 1, got %lld", (long long)g->chunk);
  if (g->chunk > GDN_MAX_CHUNK) g->chunk = GDN_MAX_CHUNK;
  int64_t cap = 0;
  FORWARD_IF_ERROR(op_attr_int(n, "state_update_capacity", 0, &cap, d));
  RETURN_ERROR_IF(cap < 0 || cap > 8, d, PH_ERR_INVALID_ARGUMENT,
                  "GatedDeltaNet: state_update_capacity must be in [0, 8], got %lld",
                  (long long)cap);
  g->cap = cap;

  tinfo in[GDN_N_IN];
  memset(in, 0, sizeof in);
  for (int i = 0; i < n->n_inputs; i++) in[i] = in_[i];
  int has[GDN_N_IN];
  for (int i = 0; i < GDN_N_IN; i++) has[i] = i < n->n_inputs && op_has_input(n, in_, i);
  RETURN_ERROR_IF(!has[GDN_IN_Q] || !has[GDN_IN_K] || !has[GDN_IN_V], d, PH_ERR_INVALID_ARGUMENT,
                  "GatedDeltaNet: query, key and value are required");
  /* presence rules, spec/abi.md §2.2 */
  RETURN_ERROR_IF(g->gated && !has[GDN_IN_DECAY], d, PH_ERR_INVALID_ARGUMENT,
                  "GatedDeltaNet: update_rule %s requires input 4 (decay)", rs);
  RETURN_ERROR_IF(!g->gated && has[GDN_IN_DECAY], d, PH_ERR_INVALID_ARGUMENT,
                  "GatedDeltaNet: update_rule %s takes no decay (input 4)", rs);
  RETURN_ERROR_IF(g->delta && !has[GDN_IN_BETA], d, PH_ERR_INVALID_ARGUMENT,
                  "GatedDeltaNet: update_rule %s requires input 5 (beta)", rs);
  RETURN_ERROR_IF(!g->delta && has[GDN_IN_BETA], d, PH_ERR_INVALID_ARGUMENT,
                  "GatedDeltaNet: update_rule %s takes no beta (input 5)", rs);
  RETURN_ERROR_IF(g->qwen && (!has[GDN_IN_ALOG] || !has[GDN_IN_DTB]), d, PH_ERR_INVALID_ARGUMENT,
                  "GatedDeltaNet: gate_activation qwen requires inputs 7 (a_log) and 8 (dt_bias)");
  RETURN_ERROR_IF(!g->qwen && (has[GDN_IN_ALOG] || has[GDN_IN_DTB]), d, PH_ERR_INVALID_ARGUMENT,
                  "GatedDeltaNet: a_log (input 7) and dt_bias (input 8) go only with "
                  "gate_activation qwen");
  RETURN_ERROR_IF(cap > 0 && !has[GDN_IN_CAPTURE], d, PH_ERR_INVALID_ARGUMENT,
                  "GatedDeltaNet: state_update_capacity %lld requires input 9 (capture_count "
                  "int32 [B])",
                  (long long)cap);
  RETURN_ERROR_IF(cap == 0 && has[GDN_IN_CAPTURE], d, PH_ERR_INVALID_ARGUMENT,
                  "GatedDeltaNet: capture_count (input 9) is present only when "
                  "state_update_capacity > 0");
  RETURN_ERROR_IF(cap == 0 && has[GDN_IN_ACTIVE], d, PH_ERR_INVALID_ARGUMENT,
                  "GatedDeltaNet: state_update_active (input 10) goes only with "
                  "state_update_capacity > 0");
  RETURN_ERROR_IF(cap == 0 && op_wants_output(n, 2), d, PH_ERR_INVALID_ARGUMENT,
                  "GatedDeltaNet: output 2 (state_update) requires state_update_capacity > 0");
  g->has_active = has[GDN_IN_ACTIVE];
  g->has_state = has[GDN_IN_STATE];
  g->has_cu = has[GDN_IN_CU];

  /* dtypes */
  g->dt = in[GDN_IN_Q].dtype;
  RETURN_ERROR_IF(!dtype_is_compute_float(g->dt), d, PH_ERR_TENSOR_DTYPE,
                  "GatedDeltaNet: query dtype %s is not f32, f16 or bf16", op_dtype_name(g->dt));
  RETURN_ERROR_IF(in[GDN_IN_K].dtype != g->dt || in[GDN_IN_V].dtype != g->dt, d,
                  PH_ERR_TENSOR_DTYPE, "GatedDeltaNet: key %s and value %s must match query %s",
                  op_dtype_name(in[GDN_IN_K].dtype), op_dtype_name(in[GDN_IN_V].dtype),
                  op_dtype_name(g->dt));
  RETURN_ERROR_IF(g->has_cu && in[GDN_IN_CU].dtype != PH_DTYPE_I32, d, PH_ERR_TENSOR_DTYPE,
                  "GatedDeltaNet: cu_seqlens must be I32, got %s",
                  op_dtype_name(in[GDN_IN_CU].dtype));
  static const char *const names[GDN_N_IN] = {
      "query", "key",     "value",         "cu_seqlens",         "decay", "beta", "initial_state",
      "a_log", "dt_bias", "capture_count", "state_update_active"};
  for (int i = GDN_IN_DECAY; i <= GDN_IN_DTB; i++)
    RETURN_ERROR_IF(has[i] && in[i].dtype != PH_DTYPE_F32, d, PH_ERR_TENSOR_DTYPE,
                    "GatedDeltaNet: %s must be F32, got %s", names[i], op_dtype_name(in[i].dtype));
  for (int i = GDN_IN_CAPTURE; i <= GDN_IN_ACTIVE; i++)
    RETURN_ERROR_IF(has[i] && in[i].dtype != PH_DTYPE_I32, d, PH_ERR_TENSOR_DTYPE,
                    "GatedDeltaNet: %s must be I32, got %s", names[i], op_dtype_name(in[i].dtype));

  /* ranks: [N,H,D] packed, or [B,S,H,D] uniform (no cu_seqlens; the same memory as [B*S,H,D]) */
  g->rank4 = in[GDN_IN_Q].rank == 4 || in[GDN_IN_K].rank == 4 || in[GDN_IN_V].rank == 4;
  RETURN_ERROR_IF(g->rank4 && g->has_cu, d, PH_ERR_INVALID_ARGUMENT,
                  "GatedDeltaNet: the rank-4 [B,S,H,D] spelling is uniform packing and takes no "
                  "cu_seqlens (input 3); ragged packing requires the rank-3 [N,H,D] spelling");
  int tr = g->rank4 ? 4 : 3, gr = tr - 1; /* q/k/v rank, decay/beta rank */
  FORWARD_IF_ERROR(
      op_check_rank(n, &in[GDN_IN_Q], tr, g->rank4 ? "query [B,S,Hq,Dk]" : "query [N,Hq,Dk]", d));
  FORWARD_IF_ERROR(
      op_check_rank(n, &in[GDN_IN_K], tr, g->rank4 ? "key [B,S,Hk,Dk]" : "key [N,Hk,Dk]", d));
  FORWARD_IF_ERROR(
      op_check_rank(n, &in[GDN_IN_V], tr, g->rank4 ? "value [B,S,Hv,Dv]" : "value [N,Hv,Dv]", d));
  if (g->has_cu) FORWARD_IF_ERROR(op_check_rank(n, &in[GDN_IN_CU], 1, "cu_seqlens [B+1]", d));
  if (has[GDN_IN_DECAY]) {
    RETURN_ERROR_IF(cap > 0 && in[GDN_IN_DECAY].rank == gr + 1, d, PH_ERR_INVALID_ARGUMENT,
                    "GatedDeltaNet: per-key-dim decay [..,Hv,Dk] has no compact state update "
                    "(spec/abi.md §2.5): state_update_capacity must be 0 with it");
    RETURN_ERROR_IF(in[GDN_IN_DECAY].rank == gr + 1, d, PH_ERR_UNSUPPORTED,
                    "GatedDeltaNet: per-key-dim decay [..,Hv,Dk] is not supported yet");
    FORWARD_IF_ERROR(
        op_check_rank(n, &in[GDN_IN_DECAY], gr, g->rank4 ? "decay [B,S,Hv]" : "decay [N,Hv]", d));
  }
  if (has[GDN_IN_BETA])
    FORWARD_IF_ERROR(
        op_check_rank(n, &in[GDN_IN_BETA], gr, g->rank4 ? "beta [B,S,Hv]" : "beta [N,Hv]", d));
  if (g->has_state)
    FORWARD_IF_ERROR(op_check_rank(n, &in[GDN_IN_STATE], 4, "initial_state [B,Hv,Dv,Dk]", d));
  if (has[GDN_IN_CAPTURE])
    FORWARD_IF_ERROR(op_check_rank(n, &in[GDN_IN_CAPTURE], 1, "capture_count [B]", d));
  if (has[GDN_IN_ACTIVE]) {
    FORWARD_IF_ERROR(op_check_rank(n, &in[GDN_IN_ACTIVE], 1, "state_update_active [1]", d));
    RETURN_ERROR_IF(op_dim(&in[GDN_IN_ACTIVE], 0) >= 0 && op_dim(&in[GDN_IN_ACTIVE], 0) != 1, d,
                    PH_ERR_TENSOR_SHAPE,
                    "GatedDeltaNet: state_update_active must be [1], got [%lld]",
                    (long long)op_dim(&in[GDN_IN_ACTIVE], 0));
  }
  if (g->qwen) {
    FORWARD_IF_ERROR(op_check_rank(n, &in[GDN_IN_ALOG], 1, "a_log [Hv]", d));
    FORWARD_IF_ERROR(op_check_rank(n, &in[GDN_IN_DTB], 1, "dt_bias [Hv] (per-key is rejected)", d));
  }

  /* dims; a rank-4 tensor's dims are read as [B,S,...] and its head dims shifted by one */
  const tinfo *q = &in[GDN_IN_Q], *k = &in[GDN_IN_K], *v = &in[GDN_IN_V];
  const tinfo *st = &in[GDN_IN_STATE];
  g->N = g->B = g->S = g->Hq = g->Hv = g->Dk = g->Dv = -1;
  int64_t Hk = -1;
  int o = g->rank4 ? 1 : 0; /* offset of the head dim past the token dim(s) */
  if (g->rank4) {
    const tinfo *tok[5] = {q, k, v, &in[GDN_IN_DECAY], &in[GDN_IN_BETA]};
    for (int i = 0; i < 5; i++) {
      if (i >= 3 && !has[GDN_IN_DECAY + i - 3]) continue;
      FORWARD_IF_ERROR(op_merge_dim(n, &g->B, op_dim(tok[i], 0), "B (sequences)", d));
      FORWARD_IF_ERROR(op_merge_dim(n, &g->S, op_dim(tok[i], 1), "S (tokens per sequence)", d));
    }
  } else {
    FORWARD_IF_ERROR(op_merge_dim(n, &g->N, op_dim(q, 0), "the token dim N", d));
    FORWARD_IF_ERROR(op_merge_dim(n, &g->N, op_dim(k, 0), "the token dim N", d));
    FORWARD_IF_ERROR(op_merge_dim(n, &g->N, op_dim(v, 0), "the token dim N", d));
    for (int i = GDN_IN_DECAY; i <= GDN_IN_BETA; i++)
      if (has[i]) FORWARD_IF_ERROR(op_merge_dim(n, &g->N, op_dim(&in[i], 0), "the token dim N", d));
  }
  g->Hq = op_dim(q, 1 + o);
  Hk = op_dim(k, 1 + o);
  RETURN_ERROR_IF(op_dims_conflict(g->Hq, Hk), d, PH_ERR_TENSOR_SHAPE,
                  "GatedDeltaNet: key has %lld heads but query has %lld (Hk must equal Hq)",
                  (long long)Hk, (long long)g->Hq);
  if (g->Hq < 0) g->Hq = Hk;
  g->Hv = op_dim(v, 1 + o);
  FORWARD_IF_ERROR(op_merge_dim(n, &g->Dk, op_dim(q, 2 + o), "Dk (query/key head width)", d));
  FORWARD_IF_ERROR(op_merge_dim(n, &g->Dk, op_dim(k, 2 + o), "Dk (query/key head width)", d));
  g->Dv = op_dim(v, 2 + o);
  if (g->has_cu) {
    int64_t cu_len = op_dim(&in[GDN_IN_CU], 0);
    RETURN_ERROR_IF(cu_len == 0, d, PH_ERR_TENSOR_SHAPE,
                    "GatedDeltaNet: cu_seqlens [B+1] must have at least 1 element");
    if (cu_len > 0) g->B = cu_len - 1;
  }
  for (int i = GDN_IN_DECAY; i <= GDN_IN_BETA; i++)
    if (has[i])
      FORWARD_IF_ERROR(op_merge_dim(n, &g->Hv, op_dim(&in[i], 1 + o), "Hv (value heads)", d));
  if (g->has_state) {
    FORWARD_IF_ERROR(op_merge_dim(n, &g->B, op_dim(st, 0), "B (sequences)", d));
    FORWARD_IF_ERROR(op_merge_dim(n, &g->Hv, op_dim(st, 1), "Hv (value heads)", d));
    FORWARD_IF_ERROR(op_merge_dim(n, &g->Dv, op_dim(st, 2), "Dv (value head width)", d));
    FORWARD_IF_ERROR(op_merge_dim(n, &g->Dk, op_dim(st, 3), "Dk (query/key head width)", d));
  }
  if (has[GDN_IN_CAPTURE])
    FORWARD_IF_ERROR(op_merge_dim(n, &g->B, op_dim(&in[GDN_IN_CAPTURE], 0), "B (sequences)", d));
  if (!g->has_cu && !g->rank4) {
    /* rank 3 without cu_seqlens: uniform, B from initial_state (one sequence without it) */
    if (!g->has_state) g->B = 1;
    if (g->B > 0 && g->N >= 0) {
      RETURN_ERROR_IF(g->N % g->B != 0, d, PH_ERR_TENSOR_SHAPE,
                      "GatedDeltaNet: without cu_seqlens the %lld tokens must split evenly over "
                      "the %lld sequences of initial_state",
                      (long long)g->N, (long long)g->B);
      g->S = g->N / g->B;
    }
    RETURN_ERROR_IF(g->B == 0 && g->N > 0, d, PH_ERR_TENSOR_SHAPE,
                    "GatedDeltaNet: %lld tokens but initial_state has 0 sequences",
                    (long long)g->N);
    if (g->B == 0) g->S = 0;
  }
  if (g->rank4) g->N = g->B >= 0 && g->S >= 0 ? g->B * g->S : -1;
  if (g->qwen) {
    FORWARD_IF_ERROR(op_merge_dim(n, &g->Hv, op_dim(&in[GDN_IN_ALOG], 0), "Hv (value heads)", d));
    FORWARD_IF_ERROR(op_merge_dim(n, &g->Hv, op_dim(&in[GDN_IN_DTB], 0), "Hv (value heads)", d));
  }
  RETURN_ERROR_IF(g->Hq == 0 || g->Hv == 0 || g->Dk == 0 || g->Dv == 0, d, PH_ERR_TENSOR_SHAPE,
                  "GatedDeltaNet: head counts and widths must be >= 1 (Hq %lld, Hv %lld, Dk %lld, "
                  "Dv %lld)",
                  (long long)g->Hq, (long long)g->Hv, (long long)g->Dk, (long long)g->Dv);
  RETURN_ERROR_IF(g->Hq > 0 && g->Hv > 0 && g->Hv % g->Hq != 0, d, PH_ERR_TENSOR_SHAPE,
                  "GatedDeltaNet: value heads %lld must be a multiple of query heads %lld",
                  (long long)g->Hv, (long long)g->Hq);
  if (g->Dk > 0) g->scale = scale_attr != 0.0f ? scale_attr : 1.0f / sqrtf((float)g->Dk);
  g->cu = g->has_cu ? in[GDN_IN_CU].data : NULL;
  if (g->cu && g->B >= 0 && g->N >= 0) FORWARD_IF_ERROR(gdn_check_cu(g, d));
  return PH_OK;
}

static ph_status gdn_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  gdn_geom g;
  FORWARD_IF_ERROR(gdn_resolve(n, in, &g, d));
  int64_t ho = g.Hq > g.Hv ? g.Hq : g.Hv;
  if (g.Hq < 0 || g.Hv < 0) ho = -1;
  if (g.rank4) {
    int64_t od[4] = {g.B, g.S, ho, g.Dv};
    out[0] = tinfo_make(g.dt, 4, od);
  } else {
    int64_t od[3] = {g.N, ho, g.Dv};
    out[0] = tinfo_make(g.dt, 3, od);
  }
  if (n->n_outputs > 1 && op_wants_output(n, 1)) {
    int64_t sd[4] = {g.B, g.Hv, g.Dv, g.Dk};
    out[1] = tinfo_make(PH_DTYPE_F32, 4, sd);
  }
  if (n->n_outputs > 2 && op_wants_output(n, 2)) { /* only with C > 0 (gdn_resolve) */
    int64_t w = g.Hv < 0 || g.Hq < 0 || g.Dk < 0 || g.Dv < 0
                    ? -1
                    : g.cap * (g.Hv + g.Hq * g.Dk + g.Hv * g.Dv); /* Hk == Hq */
    int64_t ud[2] = {g.B, w};
    out[2] = tinfo_make(PH_DTYPE_F32, 2, ud);
  }
  return PH_OK;
}

/* ---- workspace ------------------------------------------------------------------------------- */

/* One thread's workspace is kernels/gated_delta.h's, with G = 1 and a per-head decay. Its S is
 * the running state K-major inside (V-major on the boundary), with at least 8 columns: the fused
 * decode kernel's [Dk][8] tile. */

/* The scratch stride of the chunk matrices: the longest chunk any sequence of the call can
 * have. Only a stride: the chunk boundaries are at multiples of g->chunk in each sequence. */
static int64_t gdn_stride(const gdn_geom *g) {
  int64_t c = g->N < g->chunk ? g->N : g->chunk;
  return c < 1 ? 1 : c;
}

static void gdn_shape(const gdn_geom *g, gated_delta_shape *sh) {
  sh->Dk = g->Dk;
  sh->Dv = g->Dv;
  sh->G = 1;
  sh->C = gdn_stride(g);
  sh->per_dim = 0;
  sh->gated = g->gated;
  sh->delta = g->delta;
  sh->scale = g->scale;
}

/* With C > 0 the workspace also holds one V-major [Dv][Dk] state (*cst): a capturing sequence's
 * running state when final_state is not asked for. */
static size_t gdn_ws_layout(const gdn_geom *g, char *base, gated_delta_ws *ws, float **cst) {
  gated_delta_shape sh;
  gdn_shape(g, &sh);
  size_t bytes = gated_delta_ws_layout(&sh, 8, base, ws);
  if (g->cap > 0) {
    if (base) *cst = (float *)(void *)(base + bytes);
    bytes += ((size_t)(g->Dk * g->Dv) * sizeof(float) + 63) & ~(size_t)63;
  }
  return bytes;
}

static size_t gdn_scratch_bytes(const gnode *n, const tinfo *in, int n_threads) {
  gdn_geom g;
  if (gdn_resolve(n, in, &g, NULL) != PH_OK || g.N < 0 || g.Dk < 0 || g.Dv < 0) return 0;
  return gdn_ws_layout(&g, NULL, NULL, NULL) * (size_t)(n_threads > 0 ? n_threads : 1);
}

/* ---- kernels --------------------------------------------------------------------------------- */

typedef struct gdn_job {
  const gdn_geom *g;
  const tensor *q, *k, *v, *decay, *beta, *state, *a_log, *dt_bias;
  tensor *out, *final_state;
  const int32_t *capture; /* capture_count when capturing this call (C > 0 and active), else NULL */
  float *su;              /* output 2 [B, C*(Hv + Hk*Dk + Hv*Dv)] when asked for, else NULL */
  char *scratch;
  size_t ws_bytes;
  gated_delta_shape sh;
  gated_delta_decode_fn decode; /* the variant's V-major decode kernel, or the reference */
  gated_delta_chunk_fn chunk;   /* the variant's chunk kernel, or the reference */
} gdn_job;

static void gdn_l2(float *x, int64_t n) {
  float inv = 1.0f / sqrtf(vec_dot(x, x, n) + 1e-12f);
  for (int64_t i = 0; i < n; i++) x[i] *= inv;
}

/* Loads packed token tok (value head h) into row i of the workspace, with the gate and beta
 * activations applied: gl[i] is the log decay g, beta[i] the effective β. */
static void gdn_load_token(const gdn_job *j, const gated_delta_ws *ws, int64_t h, int64_t tok,
                           int64_t i) {
  const gdn_geom *g = j->g;
  int64_t Dk = g->Dk, Dv = g->Dv, hq = h / (g->Hv / g->Hq);
  float *kr = ws->K + i * Dk, *qr = ws->Q + i * Dk;
  tensor_load_f32(j->k, (tok * g->Hq + hq) * Dk, Dk, kr);
  tensor_load_f32(j->q, (tok * g->Hq + hq) * Dk, Dk, qr);
  tensor_load_f32(j->v, (tok * g->Hv + h) * Dv, Dv, ws->V + i * Dv);
  if (g->l2) {
    gdn_l2(kr, Dk);
    gdn_l2(qr, Dk);
  }
  float gv = 0.0f, bv = 1.0f;
  if (g->gated) {
    gv = ((const float *)j->decay->data)[tok * g->Hv + h];
    if (g->qwen) {
      float x = gv + ((const float *)j->dt_bias->data)[h];
      float sp = x > 20.0f ? x : log1pf(expf(x));
      gv = -expf(((const float *)j->a_log->data)[h]) * sp;
    }
  }
  if (g->delta) {
    bv = ((const float *)j->beta->data)[tok * g->Hv + h];
    if (g->sigmoid) bv = 1.0f / (1.0f + expf(-bv));
  }
  ws->gl[i] = gv;
  ws->beta[i] = bv;
}

static void gdn_store_out(const gdn_job *j, int64_t h, int64_t tok, const float *o) {
  tensor_store_f32(j->out, (tok * j->g->Hv + h) * j->g->Dv, j->g->Dv, o);
}

/* Where the core's output rows go: token tok0 + t of value head h. */
typedef struct gdn_out {
  const gdn_job *j;
  int64_t h, tok0;
} gdn_out;

static void gdn_store_row(void *ctx, int64_t jq, int64_t t, const float *o) {
  const gdn_out *w = ctx;
  (void)jq; /* G = 1 */
  gdn_store_out(w->j, w->h, w->tok0 + t, o);
}

/* One token of value head h (packed token tok) through the one-token step, V-major state src
 * (NULL: zeros) to dst (NULL: not wanted; may equal src); u [Dv] receives the delta row when not
 * NULL. Returns the decay factor α = expf(g) the step used (1 when not gated). */
static float gdn_step(const gdn_job *j, const gated_delta_ws *ws, int64_t h, int64_t tok,
                      const float *src, float *dst, float *u) {
  const gdn_geom *g = j->g;
  gdn_load_token(j, ws, h, tok, 0);
  gated_delta_dec p = {
      .src = src,
      .dst = dst,
      .k = ws->K,
      .q = ws->Q,
      .v = ws->V,
      .o = ws->t1,
      .u = u,
      .tile = ws->S,
      .a = g->gated ? expf(ws->gl[0]) : 1.0f,
      .beta = ws->beta[0],
      .scale = g->scale,
      .gated = g->gated,
      .delta = g->delta,
      .Dk = g->Dk,
      .Dv = g->Dv,
  };
  j->decode(&p);
  gdn_store_out(j, h, tok, ws->t1);
  return p.a;
}

/* Sequence b (tokens [start, start+len)), value head h, capturing its first cc >= 1 tokens:
 * every token through the one-token step (so the result is the bits of len one-token calls),
 * the first reading initial_state, each writing the running state (final_state's slice, or
 * cst), and slots t < cc of output 2 getting α, the key as used (written by the first value head
 * of its group only) and the delta row (spec/abi.md §2.5). */
static void gdn_capture_seq(const gdn_job *j, const gated_delta_ws *ws, float *cst, int64_t b,
                            int64_t h, int64_t start, int64_t len, int64_t cc, int64_t off) {
  const gdn_geom *g = j->g;
  const int64_t C = g->cap, Hv = g->Hv, Hk = g->Hq, Dk = g->Dk, Dv = g->Dv;
  const int64_t ratio = Hv / Hk, hk = h / ratio;
  float *st = j->final_state ? (float *)j->final_state->data + off : cst;
  const float *src = j->state ? (const float *)j->state->data + off : NULL;
  float *row = j->su ? j->su + b * C * (Hv + Hk * Dk + Hv * Dv) : NULL;
  float *dec = row, *key = row ? row + C * Hv : NULL, *del = row ? key + C * Hk * Dk : NULL;
  for (int64_t t = 0; t < len; t++) {
    int cap = row && t < cc;
    float a =
        gdn_step(j, ws, h, start + t, t == 0 ? src : st, st, cap ? del + (t * Hv + h) * Dv : NULL);
    if (!cap) continue;
    dec[t * Hv + h] = a;
    if (h % ratio == 0) memcpy(key + (t * Hk + hk) * Dk, ws->K, (size_t)Dk * sizeof(float));
  }
}

/* One chunk of L tokens from packed token tok0: the WY/UT form of kernels/gated_delta.h
 * (docs/ops-gdn.md) on the K-major state in ws->S. */
static void gdn_chunk(const gdn_job *j, const gated_delta_ws *ws, int64_t h, int64_t tok0,
                      int64_t L) {
  for (int64_t i = 0; i < L; i++) gdn_load_token(j, ws, h, tok0 + i, i);
  gdn_out w = {j, h, tok0};
  j->chunk(&j->sh, ws, L, gdn_store_row, &w);
}

/* dst [n][m] = src [m][n] transposed (dst[j * m + i] = src[i * n + j]), in 16 x 16 blocks so that
 * every cache line read or written is used whole (the state head is 64 KiB, more than L1). */
static void gdn_transpose(float *restrict dst, const float *restrict src, int64_t m, int64_t n) {
  for (int64_t i0 = 0; i0 < m; i0 += 16)
    for (int64_t j0 = 0; j0 < n; j0 += 16) {
      int64_t i1 = i0 + 16 < m ? i0 + 16 : m, j1 = j0 + 16 < n ? j0 + 16 : n;
      for (int64_t j = j0; j < j1; j++)
        for (int64_t i = i0; i < i1; i++) dst[j * m + i] = src[i * n + j];
    }
}

static void gdn_task(void *ctx, size_t task, int thread) {
  const gdn_job *j = ctx;
  const gdn_geom *g = j->g;
  gated_delta_ws ws;
  float *cst = NULL;
  gdn_ws_layout(g, j->scratch + (size_t)thread * j->ws_bytes, &ws, &cst);
  int64_t b = (int64_t)task / g->Hv, h = (int64_t)task % g->Hv;
  int64_t Dk = g->Dk, Dv = g->Dv, off = (b * g->Hv + h) * Dk * Dv;
  int64_t start, len;
  gdn_seq(g, b, &start, &len);
  if (j->capture) {
    int64_t lim = g->cap < len ? g->cap : len, cc = j->capture[b];
    cc = cc < 0 ? 0 : cc > lim ? lim : cc;
    if (cc > 0) {
      gdn_capture_seq(j, &ws, cst, b, h, start, len, cc, off);
      return;
    }
  }
  if (len == 1) {
    gdn_step(j, &ws, h, start, j->state ? (const float *)j->state->data + off : NULL,
             j->final_state ? (float *)j->final_state->data + off : NULL, NULL);
    return;
  }
  /* The whole V-major head is read (transposed into S) before anything is written. */
  if (j->state) {
    gdn_transpose(ws.S, (const float *)j->state->data + off, Dv, Dk);
  } else {
    memset(ws.S, 0, (size_t)(Dk * Dv) * sizeof(float));
  }
  for (int64_t t0 = 0; t0 < len; t0 += g->chunk) {
    int64_t L = len - t0 < g->chunk ? len - t0 : g->chunk;
    gdn_chunk(j, &ws, h, start + t0, L);
  }
  if (j->final_state) {
    gdn_transpose((float *)j->final_state->data + off, ws.S, Dk, Dv);
  }
}

/* The plan is the geometry without cu_seqlens' data: that changes from run to run. */
static ph_status gdn_plan(const gnode *n, const tinfo *in, void *plan, diag *d) {
  gdn_geom *g = plan;
  FORWARD_IF_ERROR(gdn_resolve(n, in, g, d));
  g->cu = NULL;
  return PH_OK;
}

static ph_status gdn_run(const gnode *n, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                         diag *d) {
  const gdn_geom *gp = ctx->plan; /* gdn_resolve on these shapes, once per plan */
  RETURN_ERROR_IF(!gp, d, PH_ERR_INTERNAL, "GatedDeltaNet: run without a plan");
  gdn_geom g = *gp;
  RETURN_ERROR_IF(!out[0], d, PH_ERR_INTERNAL, "GatedDeltaNet: output 0 is required");
  tensor *fs = n->n_outputs > 1 ? out[1] : NULL;
  if (g.has_cu) {
    g.cu = in[GDN_IN_CU] ? in[GDN_IN_CU]->data : NULL;
    RETURN_ERROR_IF(!g.cu, d, PH_ERR_INTERNAL, "GatedDeltaNet: cu_seqlens has no data");
    FORWARD_IF_ERROR(gdn_check_cu(&g, d));
  }

  gdn_job j;
  memset(&j, 0, sizeof j);
  j.g = &g;
  j.q = in[GDN_IN_Q];
  j.k = in[GDN_IN_K];
  j.v = in[GDN_IN_V];
  j.decay = g.gated ? in[GDN_IN_DECAY] : NULL;
  j.beta = g.delta ? in[GDN_IN_BETA] : NULL;
  j.state = g.has_state ? in[GDN_IN_STATE] : NULL;
  j.a_log = g.qwen ? in[GDN_IN_ALOG] : NULL;
  j.dt_bias = g.qwen ? in[GDN_IN_DTB] : NULL;
  j.out = out[0];
  j.final_state = fs;
  if (g.cap > 0) {
    /* inactive (input 10 = 0): capture_count ignored, output 2 all zeros, the usual paths */
    int active = !g.has_active || ((const int32_t *)in[GDN_IN_ACTIVE]->data)[0] != 0;
    j.capture = active ? (const int32_t *)in[GDN_IN_CAPTURE]->data : NULL;
    tensor *su = n->n_outputs > 2 ? out[2] : NULL;
    if (su) {
      j.su = su->data;
      memset(su->data, 0, (size_t)tensor_numel(su) * sizeof(float));
    }
  }
  j.ws_bytes = gdn_ws_layout(&g, NULL, NULL, NULL);
  gdn_shape(&g, &j.sh);
  j.decode = kernel_set_of(kernel_variant_active())->gated_delta_decode;
  if (!j.decode) j.decode = gated_delta_decode_ref;
  j.chunk = kernel_set_of(kernel_variant_active())->gated_delta_chunk;
  if (!j.chunk) j.chunk = gated_delta_chunk;
  int n_threads = pool_threads(ctx->pool);
  RETURN_ERROR_IF(ctx->scratch_bytes < j.ws_bytes * (size_t)n_threads || !ctx->scratch, d,
                  PH_ERR_INTERNAL, "GatedDeltaNet: scratch is %zu bytes, %d threads need %zu",
                  ctx->scratch_bytes, n_threads, j.ws_bytes * (size_t)n_threads);
  j.scratch = ctx->scratch;
  if (g.B > 0) pool_run(ctx->pool, (size_t)(g.B * g.Hv), gdn_task, &j);
  return PH_OK;
}

const op_def op_def_gated_delta_net = {
    "com.microsoft",   "GatedDeltaNet",  3,       11, 1, 3, gdn_infer, gdn_run,
    gdn_scratch_bytes, sizeof(gdn_geom), gdn_plan};
