/* op_moe — com.microsoft::MoE as ONNX Runtime 1.30's CPU kernel computes it: a mixture of
 * SwiGLU experts, each token routed to k of them.
 *
 * Inputs (ORT's order): 0 input [T, H] or [B, S, H] (T = B*S rows); 1 router_probs [T, E], the
 * router LOGITS; 2 fc1_experts_weights [E, 2I, H]; 3 fc1_experts_bias [E, 2I] (optional);
 * 4 fc2_experts_weights [E, H, I]; 5 fc2_experts_bias [E, H] (optional); 6 fc3_experts_weights
 * and 7 fc3_experts_bias: present is PH_ERR_UNSUPPORTED, as on ORT's CPU. Output: input's shape
 * and dtype. Every tensor is f32, f16 or bf16, each its own (ORT wants one T; the CPU prepare
 * pass drops the Cast an exported graph puts in front of the weights, graph/prepare.h).
 *
 * Attributes, with the schema's defaults (which ORT 1.30 applies; checked against it in
 * tests/test_ort_moe.c): k (default 1; 1 <= k <= E); activation_type (default "relu") must be
 * "swiglu" and swiglu_fusion (default 0) must be 1 (fc1 rows interleaved per expert: row 2i is
 * gate_i, row 2i+1 up_i), another value is PH_ERR_UNSUPPORTED naming it;
 * normalize_routing_weights 0 (default) or 1; use_sparse_mixer must be 0; activation_alpha
 * (default 1.0), activation_beta (default 0.0); swiglu_limit (absent: no clamp).
 *
 * Per token, in f32: p = softmax(router row) over all E (max subtracted, expf, summed in expert
 * order, each divided by the sum); the k largest p in rank order j = 0..k-1, a tie going to the
 * LOWER expert index (ORT's kernel sends an exact tie to the higher one: docs/ops-moe.md);
 * w_j = p_j, or p_j / (p_0 + ... + p_{k-1}) (summed in rank order) when
 * normalize_routing_weights = 1. A route whose w_j is not > 0 is skipped (as ORT does). Expert e:
 * h = fc1_e x + b1_e; for each i, G = h[2i], L = h[2i+1], with a limit G = min(G, limit) and
 * L = clamp(L, -limit, limit); a_i = G * sigmoid(alpha G) * (L + beta); y_e = fc2_e a + b2_e.
 * out = 0 + w_0 y_{e_0} + w_1 y_{e_1} + ... (rank order), rounded once to the output dtype.
 *
 * Compute: tokens go in chunks of at most `chunk` rows (a function of H, I and k only, bounding
 * the scratch). Per chunk: route every token; bucket its routes by expert (each expert's rows in
 * token order); gather each routed row into a grouped f32 block; per expert with rows, one
 * grouped fc1 + SwiGLU and one grouped fc2, through the MatMulWT dot-product kernels
 * (kernels/matmul_wt.h; the [out, in] row-major weights are exactly the rows those kernels
 * take); then each token sums its k expert rows in rank order. Experts without rows cost
 * nothing: a batch never computes every expert for every token.
 *
 * Batch invariance: the kernels compute each row's dot products in one order that depends on
 * the reduction length only, never on which rows share a call, so a routed row's y_e is the same
 * whatever else the chunk holds; routing is per token; the combination is per token in a fixed
 * order. A token's output bits therefore do not depend on the batch, the chunking or the thread
 * count (tested). Threads split routing and the combination by token, the matmuls by (expert,
 * block of output columns), never a reduction. The kernel variant is read once per run.
 *
 * Memory: nothing is allocated in run(); scratch_bytes() sizes the per-chunk buffers (routing
 * arrays, the grouped rows [chunk*k, H] reused for the expert outputs, the activations
 * [chunk*k, I]) and per-thread rows.
 *
 * The core (routing, grouped matmuls, combination) is shared with com.microsoft::QMoE
 * (op_qmoe.c) through op_moe.h: there an fc task dequantizes the WT_NW rows it needs into a
 * per-thread f32 buffer (moe_rows; AVX2 in the avx2/avx512 variants, C in the scalar one, the
 * same operations) and runs the f32 kernels on them.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/dispatch.h"
#include "kernels/matmul_nbits.h"
#include "kernels/matmul_wt.h"
#include "kernels/vec.h"
#include "ops/op.h"
#include "ops/op_moe.h"
#include "ops/op_util.h"
#include "tensor/dtype.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* Scratch budget of one chunk's grouped rows and activations: bounds the scratch whatever T is.
 * Chunking cannot change a bit (see above), only how often expert weights are re-read. */
#define MOE_CHUNK_BYTES ((int64_t)32 << 20)
#define MOE_NB          32 /* output columns per matmul task (a multiple of WT_NW, even) */

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

/* ---- contract -------------------------------------------------------------------------------- */

ph_status moe_common_attrs(const gnode *n, moe_plan *p, diag *d) {
  const char *op = n->op_type;
  /* defaults are the schema's (ORT 1.30 fills them in): k 1, activation_type "relu" */
  FORWARD_IF_ERROR(op_attr_int(n, "k", 1, &p->k, d));
  RETURN_ERROR_IF(p->k < 1, d, PH_ERR_INVALID_ARGUMENT, "%s: k must be >= 1, got %lld", op,
                  (long long)p->k);
  const char *act = NULL;
  FORWARD_IF_ERROR(op_attr_string(n, "activation_type", "relu", &act, d));
  RETURN_ERROR_IF(strcmp(act, "swiglu") != 0, d, PH_ERR_UNSUPPORTED,
                  "%s: activation_type \"%s\" is not supported (only \"swiglu\")", op, act);
  int64_t fusion = 0, norm = 0, sparse = 0;
  FORWARD_IF_ERROR(op_attr_int(n, "swiglu_fusion", 0, &fusion, d));
  RETURN_ERROR_IF(fusion != 1, d, PH_ERR_UNSUPPORTED,
                  "%s: swiglu_fusion %lld is not supported (only 1: fc1 rows interleaved "
                  "gate/up)",
                  op, (long long)fusion);
  FORWARD_IF_ERROR(op_attr_int(n, "normalize_routing_weights", 0, &norm, d));
  RETURN_ERROR_IF(norm != 0 && norm != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "%s: normalize_routing_weights must be 0 or 1, got %lld", op, (long long)norm);
  p->normalize = (int)norm;
  FORWARD_IF_ERROR(op_attr_int(n, "use_sparse_mixer", 0, &sparse, d));
  RETURN_ERROR_IF(sparse != 0, d, PH_ERR_UNSUPPORTED,
                  "%s: use_sparse_mixer %lld is not supported (only 0)", op, (long long)sparse);
  FORWARD_IF_ERROR(op_attr_float(n, "activation_alpha", 1.0f, &p->alpha, d));
  FORWARD_IF_ERROR(op_attr_float(n, "activation_beta", 0.0f, &p->beta, d));
  p->has_limit = node_attr(n, "swiglu_limit") != NULL;
  FORWARD_IF_ERROR(op_attr_float(n, "swiglu_limit", INFINITY, &p->limit, d));
  return PH_OK;
}

void moe_set_chunk(moe_plan *p) {
  p->chunk = 0;
  if (p->T > 0 && p->H > 0 && p->I > 0) {
    /* in double: static dims from a file may be anything, and k is not yet bounded by E */
    double per_token = (double)p->k * ((double)p->H + (double)p->I) * (double)sizeof(float);
    int64_t c = per_token >= (double)MOE_CHUNK_BYTES ? 1 : (int64_t)(MOE_CHUNK_BYTES / per_token);
    p->chunk = min64(p->T, c < 1 ? 1 : c);
  }
}

static ph_status moe_check_float(const tinfo *t, const char *what, diag *d) {
  RETURN_ERROR_IF(!dtype_is_compute_float(t->dtype), d, PH_ERR_TENSOR_DTYPE,
                  "MoE: %s is %s; expected F32, F16 or BF16", what, op_dtype_name(t->dtype));
  return PH_OK;
}

/* Checks the inputs and fills p's dims (-1 where unknown). */
static ph_status moe_resolve(const gnode *n, const tinfo *in, moe_plan *p, diag *d) {
  memset(p, 0, sizeof *p);
  RETURN_ERROR_IF(n->n_inputs < 5 || n->n_inputs > 8 || n->n_outputs != 1, d,
                  PH_ERR_INVALID_ARGUMENT, "MoE takes 5-8 inputs and 1 output, got %d and %d",
                  n->n_inputs, n->n_outputs);
  static const char *const NAMES[] = {"input", "router_probs", "fc1_experts_weights", NULL,
                                      "fc2_experts_weights"};
  for (int i = 0; i < 5; i++)
    if (NAMES[i])
      RETURN_ERROR_IF(!op_has_input(n, in, i), d, PH_ERR_INVALID_ARGUMENT,
                      "MoE: %s (input %d) is required", NAMES[i], i);
  RETURN_ERROR_IF(op_has_input(n, in, 6) || op_has_input(n, in, 7), d, PH_ERR_UNSUPPORTED,
                  "MoE: fc3_experts_%s (input %d) is not supported on the CPU (as in ONNX "
                  "Runtime's CPU MoE)",
                  op_has_input(n, in, 6) ? "weights" : "bias", op_has_input(n, in, 6) ? 6 : 7);
  FORWARD_IF_ERROR(moe_common_attrs(n, p, d));
  const tinfo *x = &in[0], *r = &in[1], *w1 = &in[2], *w2 = &in[4];
  p->has_b1 = op_has_input(n, in, 3);
  p->has_b2 = op_has_input(n, in, 5);
  const tinfo *b1 = p->has_b1 ? &in[3] : NULL, *b2 = p->has_b2 ? &in[5] : NULL;
  FORWARD_IF_ERROR(moe_check_float(x, "input", d));
  FORWARD_IF_ERROR(moe_check_float(r, "router_probs", d));
  FORWARD_IF_ERROR(moe_check_float(w1, "fc1_experts_weights", d));
  FORWARD_IF_ERROR(moe_check_float(w2, "fc2_experts_weights", d));
  if (b1) FORWARD_IF_ERROR(moe_check_float(b1, "fc1_experts_bias", d));
  if (b2) FORWARD_IF_ERROR(moe_check_float(b2, "fc2_experts_bias", d));
  RETURN_ERROR_IF(x->rank >= 0 && x->rank != 2 && x->rank != 3, d, PH_ERR_TENSOR_SHAPE,
                  "MoE: input must be [T, H] or [B, S, H], got rank %d", x->rank);
  FORWARD_IF_ERROR(op_check_rank(n, r, 2, "router_probs [T, E]", d));
  FORWARD_IF_ERROR(op_check_rank(n, w1, 3, "fc1_experts_weights [E, 2I, H]", d));
  FORWARD_IF_ERROR(op_check_rank(n, w2, 3, "fc2_experts_weights [E, H, I]", d));
  if (b1) FORWARD_IF_ERROR(op_check_rank(n, b1, 2, "fc1_experts_bias [E, 2I]", d));
  if (b2) FORWARD_IF_ERROR(op_check_rank(n, b2, 2, "fc2_experts_bias [E, H]", d));
  int64_t T = -1, H = -1, E = -1, I = -1, I2 = -1;
  if (x->rank >= 0) {
    H = x->dims[x->rank - 1];
    T = 1;
    for (int i = 0; i + 1 < x->rank; i++) T = (T < 0 || x->dims[i] < 0) ? -1 : T * x->dims[i];
  }
  FORWARD_IF_ERROR(op_merge_dim(n, &T, op_dim(r, 0), "the token count T", d));
  FORWARD_IF_ERROR(op_merge_dim(n, &E, op_dim(r, 1), "the expert count E", d));
  FORWARD_IF_ERROR(op_merge_dim(n, &E, op_dim(w1, 0), "the expert count E", d));
  FORWARD_IF_ERROR(op_merge_dim(n, &E, op_dim(w2, 0), "the expert count E", d));
  FORWARD_IF_ERROR(op_merge_dim(n, &H, op_dim(w1, 2), "the hidden size H", d));
  FORWARD_IF_ERROR(op_merge_dim(n, &H, op_dim(w2, 1), "the hidden size H", d));
  FORWARD_IF_ERROR(op_merge_dim(n, &I, op_dim(w2, 2), "the expert size I", d));
  FORWARD_IF_ERROR(op_merge_dim(n, &I2, op_dim(w1, 1), "fc1's row count 2I", d));
  if (b1) {
    FORWARD_IF_ERROR(op_merge_dim(n, &E, op_dim(b1, 0), "the expert count E", d));
    FORWARD_IF_ERROR(op_merge_dim(n, &I2, op_dim(b1, 1), "fc1's row count 2I", d));
  }
  if (b2) {
    FORWARD_IF_ERROR(op_merge_dim(n, &E, op_dim(b2, 0), "the expert count E", d));
    FORWARD_IF_ERROR(op_merge_dim(n, &H, op_dim(b2, 1), "the hidden size H", d));
  }
  RETURN_ERROR_IF(I >= 0 && I2 >= 0 && I2 != 2 * I, d, PH_ERR_TENSOR_SHAPE,
                  "MoE: fc1_experts_weights has %lld rows per expert but fc2 has I = %lld; "
                  "swiglu_fusion = 1 needs 2I = %lld",
                  (long long)I2, (long long)I, (long long)(2 * I));
  RETURN_ERROR_IF(I2 >= 0 && I2 % 2 != 0, d, PH_ERR_TENSOR_SHAPE,
                  "MoE: fc1_experts_weights has %lld rows per expert, not 2I", (long long)I2);
  if (I < 0 && I2 >= 0) I = I2 / 2;
  RETURN_ERROR_IF(H == 0 || I == 0, d, PH_ERR_TENSOR_SHAPE,
                  "MoE: the hidden size (%lld) and expert size (%lld) must be >= 1", (long long)H,
                  (long long)I);
  RETURN_ERROR_IF(E >= 0 && p->k > E, d, PH_ERR_INVALID_ARGUMENT,
                  "MoE: k = %lld is more than the %lld experts", (long long)p->k, (long long)E);
  p->T = T;
  p->H = H;
  p->E = E;
  p->I = I;
  moe_set_chunk(p);
  return PH_OK;
}

static ph_status moe_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  moe_plan p;
  FORWARD_IF_ERROR(moe_resolve(n, in, &p, d));
  *out = in[0];
  out->data = NULL;
  return PH_OK;
}

static ph_status moe_plan_fn(const gnode *n, const tinfo *in, void *plan, diag *d) {
  return moe_resolve(n, in, plan, d);
}

/* ---- scratch --------------------------------------------------------------------------------- */

/* Byte offsets of the scratch parts for plan p on n_threads threads; returns the total. */
typedef struct moe_layout {
  size_t probs;     /* [threads, E] f32: softmax of one token */
  size_t acc;       /* [threads, H] f32: one token's combination */
  size_t route_e;   /* [chunk*k] i32: expert of route t*k+j */
  size_t route_w;   /* [chunk*k] f32: its weight */
  size_t route_pos; /* [chunk*k] i32: its grouped row, -1 when skipped */
  size_t row_tok;   /* [chunk*k] i32: token (in the chunk) of grouped row p */
  size_t offs;      /* [E+1] i32: grouped rows of expert e are offs[e] .. offs[e+1]-1 */
  size_t active;    /* [E] i32: the experts with rows, increasing */
  size_t xy;        /* [chunk*k, H] f32: gathered rows, then the expert outputs */
  size_t act;       /* [chunk*k, I] f32: SwiGLU activations */
  size_t deq;       /* quantized experts: [threads, WT_NW, max(H, I)] f32 dequantized rows */
  size_t qsc;       /* quantized experts: [threads, 2, max blocks per row] f32 scales, zps */
  size_t total;
} moe_layout;

static size_t moe_align(size_t v) { return (v + 63) / 64 * 64; }

static moe_layout moe_layout_of(const moe_plan *p, int n_threads) {
  moe_layout l;
  memset(&l, 0, sizeof l);
  if (p->chunk <= 0 || p->E <= 0) return l;
  size_t th = (size_t)(n_threads > 0 ? n_threads : 1), R = (size_t)(p->chunk * p->k);
  size_t E = (size_t)p->E, H = (size_t)p->H, I = (size_t)p->I, o = 0;
  l.probs = o;
  o = moe_align(o + th * E * sizeof(float));
  l.acc = o;
  o = moe_align(o + th * H * sizeof(float));
  l.route_e = o;
  o = moe_align(o + R * sizeof(int32_t));
  l.route_w = o;
  o = moe_align(o + R * sizeof(float));
  l.route_pos = o;
  o = moe_align(o + R * sizeof(int32_t));
  l.row_tok = o;
  o = moe_align(o + R * sizeof(int32_t));
  l.offs = o;
  o = moe_align(o + (E + 1) * sizeof(int32_t));
  l.active = o;
  o = moe_align(o + E * sizeof(int32_t));
  l.xy = o;
  o = moe_align(o + R * H * sizeof(float));
  l.act = o;
  o = moe_align(o + R * I * sizeof(float));
  if (p->fc[0].bits || p->fc[1].bits) {
    size_t K = H > I ? H : I;
    int64_t nb = p->fc[0].n_blocks > p->fc[1].n_blocks ? p->fc[0].n_blocks : p->fc[1].n_blocks;
    l.deq = o;
    o = moe_align(o + th * WT_NW * K * sizeof(float));
    l.qsc = o;
    o = moe_align(o + th * 2 * (size_t)(nb > 0 ? nb : 1) * sizeof(float));
  }
  l.total = o;
  return l;
}

size_t moe_plan_scratch(const moe_plan *p, int n_threads) {
  if (p->T < 0 || p->E < 0 || p->H < 0 || p->I < 0) return 0;
  return moe_layout_of(p, n_threads).total;
}

static size_t moe_scratch(const gnode *n, const tinfo *in, int n_threads) {
  moe_plan p;
  if (moe_resolve(n, in, &p, NULL) != PH_OK) return 0;
  return moe_plan_scratch(&p, n_threads);
}

/* ---- run ------------------------------------------------------------------------------------- */

typedef struct moe_job {
  const moe_plan *p;
  const tensor *x, *router;
  tensor *y;
  const moe_fc_data *fc;     /* [2]: fc1, fc2 */
  const wt_kernel_fn *kf[2]; /* the variant's kernels for fc1's and fc2's (dequantized) rows */
  int simd_dequant; /* quantized rows: the AVX2 dequantization (the avx2 and avx512 variants) */
  unsigned char *scratch;
  moe_layout l;
  int64_t t0, n_tok; /* this chunk: tokens t0 .. t0 + n_tok - 1 */
  int64_t n_active;
  int64_t n_tasks;    /* routing and combination tasks */
  int64_t n_gather;   /* gathering tasks */
  int64_t ncb1, ncb2; /* column blocks of fc1 (2I) and fc2 (H) */
} moe_job;

static float moe_ld(const unsigned char *p, ph_dtype dt, int64_t i) {
  switch (dt) {
  case PH_DTYPE_BF16:
    return wt_ld_bf16(p, i);
  case PH_DTYPE_F16:
    return wt_ld_f16(p, i);
  default:
    return wt_ld_f32(p, i);
  }
}

static int moe_widx(ph_dtype dt) { return dt == PH_DTYPE_BF16 ? 1 : dt == PH_DTYPE_F16 ? 2 : 0; }

/* Softmax over E, then the k best in rank order (ties: the lower expert), then the weights. */
static void moe_route_task(void *ctx, size_t task, int thread) {
  const moe_job *j = ctx;
  const moe_plan *p = j->p;
  float *prob = (float *)(j->scratch + j->l.probs) + (int64_t)thread * p->E;
  int32_t *route_e = (int32_t *)(j->scratch + j->l.route_e);
  float *route_w = (float *)(j->scratch + j->l.route_w);
  int64_t a = (int64_t)task * j->n_tok / j->n_tasks,
          b = ((int64_t)task + 1) * j->n_tok / j->n_tasks;
  for (int64_t t = a; t < b; t++) {
    tensor_load_f32(j->router, (j->t0 + t) * p->E, p->E, prob);
    vec_softmax(prob, p->E);
    float wsum = 0.0f;
    for (int64_t r = 0; r < p->k; r++) {
      int64_t best = -1;
      for (int64_t e = 0; e < p->E; e++) {
        if (prob[e] < 0.0f) continue; /* taken */
        if (best < 0 || prob[e] > prob[best]) best = e;
      }
      route_e[t * p->k + r] = (int32_t)best;
      route_w[t * p->k + r] = prob[best];
      wsum += prob[best];
      prob[best] = -1.0f; /* probabilities are >= 0 (or NaN): marks it taken */
    }
    if (p->normalize)
      for (int64_t r = 0; r < p->k; r++) route_w[t * p->k + r] /= wsum;
  }
}

/* Grouped row pos <- the token's input row, in f32. */
static void moe_gather_task(void *ctx, size_t task, int thread) {
  (void)thread;
  const moe_job *j = ctx;
  const moe_plan *p = j->p;
  const int32_t *row_tok = (const int32_t *)(j->scratch + j->l.row_tok);
  float *xy = (float *)(j->scratch + j->l.xy);
  const int32_t *offs = (const int32_t *)(j->scratch + j->l.offs);
  int64_t rows = offs[p->E];
  int64_t a = (int64_t)task * rows / j->n_gather, b = ((int64_t)task + 1) * rows / j->n_gather;
  for (int64_t r = a; r < b; r++)
    tensor_load_f32(j->x, (j->t0 + row_tok[r]) * p->H, p->H, xy + r * p->H);
}

static float moe_swiglu(const moe_plan *p, float g, float l) {
  if (p->has_limit) {
    g = p->limit < g ? p->limit : g;
    l = l < -p->limit ? -p->limit : p->limit < l ? p->limit : l;
  }
  float z = p->alpha * g, s;
  if (z > 0.0f) {
    s = 1.0f / (1.0f + expf(-z));
  } else {
    float e = expf(z);
    s = e / (1.0f + e);
  }
  float swish = g * s;
  return swish * (l + p->beta);
}

/* The zero point of block b of row `row` (of E * N) of the quantized expert matrix f. */
static float moe_zero_point(const moe_fc *q, const moe_fc_data *f, int64_t row, int64_t b) {
  if (!f->zp) return (float)(1 << (q->bits - 1));
  if (q->zp == 1) /* block-wise: [E, N, n_blocks * bits / 8], packed along the blocks */
    return nbits_zero_point_u8(f->zp + row * (q->n_blocks * q->bits / 8), q->bits, b);
  return nbits_zero_point_u8(f->zp, q->bits, row); /* per column: [E, N * bits / 8] */
}

/* w[0 .. K) = one quantized row dequantized: w[k] = ((float)q_k - z_b) * s_b, b = k / block
 * (block divides K: QMoE's contract) — the operations of kernels/matmul_nbits.h's
 * nbits_dequant_col, so the same bits, in loops without branches that the compiler vectorizes
 * (the row is dequantized once per chunk, but at decode that is once per token). */
static void moe_dequant_row(const uint8_t *codes, const float *sc, const float *zp, int bits,
                            int64_t block, int64_t K, float *w) {
  for (int64_t k0 = 0, b = 0; k0 < K; k0 += block, b++) {
    const float s = sc[b], z = zp[b];
    float *o = w + k0;
    if (bits == 8) {
      const uint8_t *q = codes + k0;
      for (int64_t j = 0; j < block; j++) o[j] = ((float)q[j] - z) * s;
    } else {
      const uint8_t *q = codes + k0 / 2;
      for (int64_t j = 0; j < block / 2; j++) {
        o[2 * j] = ((float)(q[j] & 0x0F) - z) * s;
        o[2 * j + 1] = ((float)(q[j] >> 4) - z) * s;
      }
    }
  }
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
/* moe_dequant_row in AVX2 for the avx2 and avx512 variants: the same operations per element
 * (exact u8 -> f32, subtract, multiply: nothing to contract), eight at a time. */
__attribute__((target("avx2"))) static void moe_dequant_row_avx2(const uint8_t *codes,
                                                                 const float *sc, const float *zp,
                                                                 int bits, int64_t block, int64_t K,
                                                                 float *w) {
  for (int64_t k0 = 0, b = 0; k0 < K; k0 += block, b++) {
    const __m256 s = _mm256_set1_ps(sc[b]), z = _mm256_set1_ps(zp[b]);
    float *o = w + k0;
    int64_t j = 0;
    if (bits == 8) {
      const uint8_t *q = codes + k0;
      for (; j + 8 <= block; j += 8) {
        __m128i v = _mm_loadl_epi64((const __m128i *)(const void *)(q + j));
        __m256 f = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(v));
        _mm256_storeu_ps(o + j, _mm256_mul_ps(_mm256_sub_ps(f, z), s));
      }
      for (; j < block; j++) o[j] = ((float)q[j] - zp[b]) * sc[b];
    } else {
      const uint8_t *q = codes + k0 / 2;
      const __m128i mask = _mm_set1_epi8(0x0F);
      for (; j + 16 <= block; j += 16) { /* 8 bytes = 16 codes */
        __m128i v = _mm_loadl_epi64((const __m128i *)(const void *)(q + j / 2));
        __m128i lo = _mm_and_si128(v, mask), hi = _mm_and_si128(_mm_srli_epi16(v, 4), mask);
        __m128i x = _mm_unpacklo_epi8(lo, hi); /* the 16 codes in k order */
        __m256 f0 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(x));
        __m256 f1 = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_srli_si128(x, 8)));
        _mm256_storeu_ps(o + j, _mm256_mul_ps(_mm256_sub_ps(f0, z), s));
        _mm256_storeu_ps(o + j + 8, _mm256_mul_ps(_mm256_sub_ps(f1, z), s));
      }
      for (; j < block; j += 2) {
        o[j] = ((float)(q[j / 2] & 0x0F) - zp[b]) * sc[b];
        o[j + 1] = ((float)(q[j / 2] >> 4) - zp[b]) * sc[b];
      }
    }
  }
}
#define MOE_HAVE_AVX2_DEQUANT 1
#else
#define MOE_HAVE_AVX2_DEQUANT 0
#endif

/* wr[c] = row row0 + c of expert matrix `which` for c < WT_NW (K elements each): the stored
 * float row itself, or the quantized row dequantized into this thread's buffer. */
static void moe_rows(const moe_job *j, int which, int64_t row0, int nc, int thread,
                     const unsigned char **wr) {
  const moe_plan *p = j->p;
  const moe_fc *q = &p->fc[which];
  const moe_fc_data *f = &j->fc[which];
  const int64_t K = which == 0 ? p->H : p->I;
  if (!q->bits) {
    const size_t es = dtype_size(f->dtype);
    for (int c = 0; c < WT_NW; c++) {
      int cc = c < nc ? c : nc - 1; /* a short group repeats its last row; dropped */
      wr[c] = f->w + (size_t)(row0 + cc) * (size_t)K * es;
    }
    return;
  }
  const int64_t Kmax = p->H > p->I ? p->H : p->I;
  const int64_t nbmax =
      p->fc[0].n_blocks > p->fc[1].n_blocks ? p->fc[0].n_blocks : p->fc[1].n_blocks;
  float *deq = (float *)(j->scratch + j->l.deq) + (int64_t)thread * WT_NW * Kmax;
  float *sc = (float *)(j->scratch + j->l.qsc) + (int64_t)thread * 2 * nbmax, *zp = sc + nbmax;
  const int64_t row_bytes = K * q->bits / 8;
  for (int c = 0; c < WT_NW; c++) {
    if (c >= nc) {
      wr[c] = wr[nc - 1];
      continue;
    }
    int64_t row = row0 + c;
    tensor_load_f32(f->scales, row * q->n_blocks, q->n_blocks, sc);
    for (int64_t b = 0; b < q->n_blocks; b++) zp[b] = moe_zero_point(q, f, row, b);
    float *w = deq + (int64_t)c * Kmax;
#if MOE_HAVE_AVX2_DEQUANT
    if (j->simd_dequant)
      moe_dequant_row_avx2(f->w + row * row_bytes, sc, zp, q->bits, q->block, K, w);
    else
#endif
      moe_dequant_row(f->w + row * row_bytes, sc, zp, q->bits, q->block, K, w);
    wr[c] = (const unsigned char *)w;
  }
}

/* Task = (active expert, block of MOE_NB fc1 rows): SwiGLU activations of that block's gate/up
 * pairs for every row routed to the expert. */
static void moe_fc1_task(void *ctx, size_t task, int thread) {
  const moe_job *j = ctx;
  const moe_plan *p = j->p;
  const int32_t *active = (const int32_t *)(j->scratch + j->l.active);
  const int32_t *offs = (const int32_t *)(j->scratch + j->l.offs);
  const float *x = (const float *)(j->scratch + j->l.xy);
  float *act = (float *)(j->scratch + j->l.act);
  int64_t e = active[(int64_t)task / j->ncb1], N = 2 * p->I, K = p->H;
  int64_t c0 = ((int64_t)task % j->ncb1) * MOE_NB, c1 = min64(N, c0 + MOE_NB);
  int64_t r0 = offs[e], r1 = offs[e + 1];
  float sums[WT_RMAX * WT_NW];
  for (int64_t col = c0; col < c1; col += WT_NW) {
    int nc = (int)min64(WT_NW, c1 - col); /* even: N, c0 and WT_NW are */
    const unsigned char *wr[WT_NW];
    float bias[WT_NW];
    moe_rows(j, 0, e * N + col, nc, thread, wr);
    for (int c = 0; c < WT_NW; c++) {
      int cc = c < nc ? c : nc - 1; /* a short group repeats its last row; dropped */
      int64_t row = e * N + col + cc;
      bias[c] = j->fc[0].bias ? moe_ld(j->fc[0].bias, j->fc[0].bias_dtype, row) : 0.0f;
    }
    for (int64_t m = r0; m < r1;) {
      int R = (int)min64(WT_RMAX, r1 - m);
      while (!j->kf[0][R]) R--; /* k[1] exists in every variant */
      j->kf[0][R](x + m * K, K, wr, sums);
      for (int r = 0; r < R; r++)
        for (int c = 0; c < nc; c += 2) {
          float g = sums[r * WT_NW + c] + bias[c], u = sums[r * WT_NW + c + 1] + bias[c + 1];
          act[(m + r) * p->I + (col + c) / 2] = moe_swiglu(p, g, u);
        }
      m += R;
    }
  }
}

/* Task = (active expert, block of MOE_NB output columns): y = fc2_e a + b2_e for every row routed
 * to the expert, written over the gathered rows (no longer needed). */
static void moe_fc2_task(void *ctx, size_t task, int thread) {
  const moe_job *j = ctx;
  const moe_plan *p = j->p;
  const int32_t *active = (const int32_t *)(j->scratch + j->l.active);
  const int32_t *offs = (const int32_t *)(j->scratch + j->l.offs);
  const float *act = (const float *)(j->scratch + j->l.act);
  float *y = (float *)(j->scratch + j->l.xy);
  int64_t e = active[(int64_t)task / j->ncb2], N = p->H, K = p->I;
  int64_t c0 = ((int64_t)task % j->ncb2) * MOE_NB, c1 = min64(N, c0 + MOE_NB);
  int64_t r0 = offs[e], r1 = offs[e + 1];
  float sums[WT_RMAX * WT_NW];
  for (int64_t col = c0; col < c1; col += WT_NW) {
    int nc = (int)min64(WT_NW, c1 - col);
    const unsigned char *wr[WT_NW];
    float bias[WT_NW];
    moe_rows(j, 1, e * N + col, nc, thread, wr);
    for (int c = 0; c < WT_NW; c++) {
      int cc = c < nc ? c : nc - 1;
      int64_t row = e * N + col + cc;
      bias[c] = j->fc[1].bias ? moe_ld(j->fc[1].bias, j->fc[1].bias_dtype, row) : 0.0f;
    }
    for (int64_t m = r0; m < r1;) {
      int R = (int)min64(WT_RMAX, r1 - m);
      while (!j->kf[1][R]) R--;
      j->kf[1][R](act + m * K, K, wr, sums);
      for (int r = 0; r < R; r++)
        for (int c = 0; c < nc; c++) y[(m + r) * N + col + c] = sums[r * WT_NW + c] + bias[c];
      m += R;
    }
  }
}

/* out[t] = 0 + w_0 y_0 + w_1 y_1 + ... in rank order, rounded once. */
static void moe_combine_task(void *ctx, size_t task, int thread) {
  const moe_job *j = ctx;
  const moe_plan *p = j->p;
  const int32_t *route_pos = (const int32_t *)(j->scratch + j->l.route_pos);
  const float *route_w = (const float *)(j->scratch + j->l.route_w);
  const float *y = (const float *)(j->scratch + j->l.xy);
  float *acc = (float *)(j->scratch + j->l.acc) + (int64_t)thread * p->H;
  int64_t a = (int64_t)task * j->n_tok / j->n_tasks,
          b = ((int64_t)task + 1) * j->n_tok / j->n_tasks;
  for (int64_t t = a; t < b; t++) {
    for (int64_t h = 0; h < p->H; h++) acc[h] = 0.0f;
    for (int64_t r = 0; r < p->k; r++) {
      int64_t pos = route_pos[t * p->k + r];
      if (pos < 0) continue;
      float w = route_w[t * p->k + r];
      const float *yr = y + pos * p->H;
      for (int64_t h = 0; h < p->H; h++) acc[h] += w * yr[h];
    }
    tensor_store_f32(j->y, (j->t0 + t) * p->H, p->H, acc);
  }
}

ph_status moe_plan_run(const moe_plan *p, const tensor *x, const tensor *router,
                       const moe_fc_data fc[2], tensor *y, op_ctx *ctx, diag *d) {
  if (p->T == 0) return PH_OK;
  int threads = pool_threads(ctx->pool);
  moe_job j;
  memset(&j, 0, sizeof j);
  j.p = p;
  j.l = moe_layout_of(p, threads);
  RETURN_ERROR_IF(ctx->scratch_bytes < j.l.total, d, PH_ERR_INTERNAL,
                  "MoE: scratch of %zu bytes, need %zu", ctx->scratch_bytes, j.l.total);
  j.scratch = ctx->scratch;
  j.x = x;
  j.router = router;
  j.y = y;
  j.fc = fc;
  const matmul_wt_kernels *ks = kernel_set_of(kernel_variant_active())->matmul_wt;
  for (int i = 0; i < 2; i++) /* dequantized rows are f32 */
    j.kf[i] = ks->k[p->fc[i].bits ? 0 : moe_widx(fc[i].dtype)];
  j.simd_dequant = kernel_variant_active() != KERNEL_SCALAR;
  j.ncb1 = (2 * p->I + MOE_NB - 1) / MOE_NB;
  j.ncb2 = (p->H + MOE_NB - 1) / MOE_NB;
  int32_t *route_e = (int32_t *)(j.scratch + j.l.route_e);
  const float *route_w = (const float *)(j.scratch + j.l.route_w);
  int32_t *route_pos = (int32_t *)(j.scratch + j.l.route_pos);
  int32_t *row_tok = (int32_t *)(j.scratch + j.l.row_tok);
  int32_t *offs = (int32_t *)(j.scratch + j.l.offs);
  int32_t *active = (int32_t *)(j.scratch + j.l.active);
  for (j.t0 = 0; j.t0 < p->T; j.t0 += p->chunk) {
    j.n_tok = min64(p->chunk, p->T - j.t0);
    j.n_tasks = min64(j.n_tok, (int64_t)threads * 4);
    pool_run(ctx->pool, (size_t)j.n_tasks, moe_route_task, &j);
    /* bucket the routes by expert: each expert's rows in token order */
    int64_t R = j.n_tok * p->k;
    for (int64_t e = 0; e <= p->E; e++) offs[e] = 0;
    for (int64_t r = 0; r < R; r++)
      if (route_w[r] > 0.0f) offs[route_e[r] + 1]++;
    j.n_active = 0;
    for (int64_t e = 0; e < p->E; e++) {
      if (offs[e + 1]) active[j.n_active++] = (int32_t)e;
      offs[e + 1] += offs[e];
    }
    /* offs[e] is now the start of e's rows: fill them, offs[e] serving as e's cursor */
    for (int64_t r = 0; r < R; r++) {
      if (!(route_w[r] > 0.0f)) {
        route_pos[r] = -1;
        continue;
      }
      route_pos[r] = offs[route_e[r]];
      row_tok[offs[route_e[r]]++] = (int32_t)(r / p->k);
    }
    /* the cursors ended at each expert's end: shift back to starts */
    for (int64_t e = p->E; e > 0; e--) offs[e] = offs[e - 1];
    offs[0] = 0;
    int64_t rows = offs[p->E];
    if (rows > 0) {
      j.n_gather = min64(rows, (int64_t)threads * 4);
      pool_run(ctx->pool, (size_t)j.n_gather, moe_gather_task, &j);
      pool_run(ctx->pool, (size_t)(j.n_active * j.ncb1), moe_fc1_task, &j);
      pool_run(ctx->pool, (size_t)(j.n_active * j.ncb2), moe_fc2_task, &j);
    }
    pool_run(ctx->pool, (size_t)j.n_tasks, moe_combine_task, &j);
  }
  return PH_OK;
}

static ph_status moe_run(const gnode *n, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                         diag *d) {
  (void)n;
  RETURN_ERROR_IF(!ctx->plan, d, PH_ERR_INTERNAL, "MoE: run without a plan");
  const moe_plan *p = ctx->plan;
  moe_fc_data fc[2];
  memset(fc, 0, sizeof fc);
  for (int i = 0; i < 2; i++) {
    const tensor *w = in[2 + 2 * i], *b = (i == 0 ? p->has_b1 : p->has_b2) ? in[3 + 2 * i] : NULL;
    fc[i].w = w->data;
    fc[i].dtype = w->dtype;
    if (b) {
      fc[i].bias = b->data;
      fc[i].bias_dtype = b->dtype;
    }
  }
  return moe_plan_run(p, in[0], in[1], fc, out[0], ctx, d);
}

const op_def op_def_moe = {
    "com.microsoft",  "MoE",      5, 8, 1, 1, moe_infer, moe_run, moe_scratch,
    sizeof(moe_plan), moe_plan_fn};
