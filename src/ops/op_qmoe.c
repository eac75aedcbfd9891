/* op_qmoe — com.microsoft::QMoE as ONNX Runtime 1.30's schema defines it for quant_type "int":
 * MoE (op_moe.c: same routing, SwiGLU experts and combination) over expert weights quantized to
 * 4 or 8 bits, block-wise along K or one scale per output row.
 *
 * Inputs (ORT's order): 0 input [T, H] or [B, S, H]; 1 router_probs [T, E] (logits);
 * 2 fc1_experts_weights uint8 [E, 2I, H / pack]; 3 fc1_scales [E, 2I, H / block] or [E, 2I];
 * 4 fc1_experts_bias [E, 2I] (optional); 5 fc2_experts_weights uint8 [E, H, I / pack];
 * 6 fc2_scales [E, H, I / block] or [E, H]; 7 fc2_experts_bias [E, H] (optional);
 * 8-10 fc3_experts_weights / scales / bias and 13 fc3_zero_points: present is PH_ERR_UNSUPPORTED
 * (as on ORT's CPU, which runs only the fused SwiGLU); 11 fc1_zero_points uint8
 * [E, 2I, H / block / pack] or [E, 2I / pack]; 12 fc2_zero_points [E, H, I / block / pack] or
 * [E, H / pack] (optional; a matrix one block wide may give the per-row shape, as ORT 1.30
 * wants it then); 14 router_weights and 15-20 (the FP4/FP8 global and activation
 * scales): present is PH_ERR_UNSUPPORTED. pack = 8 / expert_weight_bits. Output: input's shape
 * and dtype. input, router_probs, the scales and biases are each f32, f16 or bf16.
 *
 * Attributes: MoE's (op_moe.h moe_common_attrs: k, activation_type "swiglu" with swiglu_fusion 1,
 * normalize_routing_weights, use_sparse_mixer 0, activation_alpha/beta, swiglu_limit), and
 * expert_weight_bits (default 4; 4 or 8 — 2 is legal in the schema and PH_ERR_UNSUPPORTED here),
 * block_size (absent: one scale per output row; present: a power of two >= 16 dividing H and I,
 * and with zero points H and I divisible by block * pack), quant_type (default "int", the only
 * one run here), weights_prepacked (default -1; -1 and 0 both mean the raw layout above on the
 * CPU, as in ORT's CPU kernel, which packs at load; 1 is PH_ERR_UNSUPPORTED).
 *
 * Storage and arithmetic: op_moe.h. A row is dequantized as MatMulNBits dequantizes a column
 * (w = (q - z) * s in f32), then the MoE kernels run on it, so the output is bit-identical to
 * MoE's on the dequantized f32 weights, batch- and thread-invariant like MoE's.
 */
#include <string.h>

#include "ops/op.h"
#include "ops/op_moe.h"
#include "ops/op_util.h"
#include "tensor/dtype.h"

enum {
  QM_IN_X,
  QM_IN_ROUTER,
  QM_IN_W1,
  QM_IN_S1,
  QM_IN_B1,
  QM_IN_W2,
  QM_IN_S2,
  QM_IN_B2,
  QM_IN_W3,
  QM_IN_S3,
  QM_IN_B3,
  QM_IN_Z1,
  QM_IN_Z2,
  QM_IN_Z3,
  QM_IN_ROUTER_WEIGHTS,
  QM_N_INPUTS = 21
};

/* Caps far above any real layer that keep every size product in int64. */
#define QM_MAX_DIM ((int64_t)1 << 31)

static ph_status qm_check_float(const tinfo *t, const char *what, diag *d) {
  RETURN_ERROR_IF(!dtype_is_compute_float(t->dtype), d, PH_ERR_TENSOR_DTYPE,
                  "QMoE: %s is %s; expected F32, F16 or BF16", what, op_dtype_name(t->dtype));
  return PH_OK;
}

/* A table of rank 3 [E, N, per] (block-wise) or rank 2 [E, N2] (per row) against its expected
 * dims; unknown dims pass. */
static ph_status qm_check_table(const tinfo *t, const char *what, int blockwise, int64_t E,
                                int64_t N, int64_t per, diag *d) {
  const int rank = blockwise ? 3 : 2;
  RETURN_ERROR_IF(t->rank >= 0 && t->rank != rank, d, PH_ERR_TENSOR_SHAPE,
                  "QMoE: %s must have rank %d (%s), got rank %d", what, rank,
                  blockwise ? "block_size is set" : "block_size is absent: one per row", t->rank);
  if (t->rank != rank) return PH_OK;
  const int64_t want[3] = {E, blockwise ? N : per, per};
  for (int i = 0; i < rank; i++)
    RETURN_ERROR_IF(op_dims_conflict(t->dims[i], want[i]), d, PH_ERR_TENSOR_SHAPE,
                    "QMoE: %s has dim %d = %lld, expected %lld", what, i, (long long)t->dims[i],
                    (long long)want[i]);
  return PH_OK;
}

static ph_status qmoe_resolve(const gnode *n, const tinfo *in, moe_plan *p, diag *d) {
  memset(p, 0, sizeof *p);
  RETURN_ERROR_IF(n->n_inputs < 7 || n->n_inputs > QM_N_INPUTS || n->n_outputs != 1, d,
                  PH_ERR_INVALID_ARGUMENT, "QMoE takes 7-%d inputs and 1 output, got %d and %d",
                  QM_N_INPUTS, n->n_inputs, n->n_outputs);
  static const char *const REQUIRED[] = {"input",      "router_probs", "fc1_experts_weights",
                                         "fc1_scales", NULL,           "fc2_experts_weights",
                                         "fc2_scales"};
  for (int i = 0; i < 7; i++)
    if (REQUIRED[i])
      RETURN_ERROR_IF(!op_has_input(n, in, i), d, PH_ERR_INVALID_ARGUMENT,
                      "QMoE: %s (input %d) is required", REQUIRED[i], i);
  static const struct {
    int slot;
    const char *name;
  } REFUSED[] = {{QM_IN_W3, "fc3_experts_weights"},
                 {QM_IN_S3, "fc3_scales"},
                 {QM_IN_B3, "fc3_experts_bias"},
                 {QM_IN_Z3, "fc3_zero_points"},
                 {QM_IN_ROUTER_WEIGHTS, "router_weights"},
                 {15, "fc1_global_scale"},
                 {16, "fc2_global_scale"},
                 {17, "fc1_act_scale"},
                 {18, "fc2_act_scale"},
                 {19, "fc1_act_block_scale"},
                 {20, "fc2_act_block_scale"}};
  for (size_t i = 0; i < sizeof REFUSED / sizeof REFUSED[0]; i++)
    RETURN_ERROR_IF(op_has_input(n, in, REFUSED[i].slot), d, PH_ERR_UNSUPPORTED,
                    "QMoE: %s (input %d) is not supported on the CPU (fused SwiGLU experts with "
                    "integer weights only)",
                    REFUSED[i].name, REFUSED[i].slot);
  FORWARD_IF_ERROR(moe_common_attrs(n, p, d));
  int64_t bits = 4, block = 0, prepacked = -1;
  const char *qt = NULL;
  FORWARD_IF_ERROR(op_attr_int(n, "expert_weight_bits", 4, &bits, d));
  RETURN_ERROR_IF(bits == 2, d, PH_ERR_UNSUPPORTED,
                  "QMoE: expert_weight_bits 2 is not supported (4 or 8)");
  RETURN_ERROR_IF(bits != 4 && bits != 8, d, PH_ERR_INVALID_ARGUMENT,
                  "QMoE: expert_weight_bits must be 2, 4 or 8, got %lld", (long long)bits);
  const int blockwise = node_attr(n, "block_size") != NULL;
  FORWARD_IF_ERROR(op_attr_int(n, "block_size", 0, &block, d));
  RETURN_ERROR_IF(blockwise && (block < 16 || block > QM_MAX_DIM || (block & (block - 1)) != 0), d,
                  PH_ERR_INVALID_ARGUMENT,
                  "QMoE: block_size must be a power of two >= 16, got %lld", (long long)block);
  FORWARD_IF_ERROR(op_attr_string(n, "quant_type", "int", &qt, d));
  RETURN_ERROR_IF(strcmp(qt, "int") != 0, d, PH_ERR_UNSUPPORTED,
                  "QMoE: quant_type \"%s\" is not supported (only \"int\")", qt);
  FORWARD_IF_ERROR(op_attr_int(n, "weights_prepacked", -1, &prepacked, d));
  RETURN_ERROR_IF(prepacked < -1 || prepacked > 1, d, PH_ERR_INVALID_ARGUMENT,
                  "QMoE: weights_prepacked must be -1, 0 or 1, got %lld", (long long)prepacked);
  RETURN_ERROR_IF(prepacked == 1, d, PH_ERR_UNSUPPORTED,
                  "QMoE: weights_prepacked 1 (an execution provider's packed layout) is not "
                  "supported; the CPU reads the raw layout (0, or -1)");
  const int64_t pack = 8 / bits;

  const tinfo *x = &in[QM_IN_X], *r = &in[QM_IN_ROUTER], *w1 = &in[QM_IN_W1], *w2 = &in[QM_IN_W2];
  const tinfo *s1 = &in[QM_IN_S1], *s2 = &in[QM_IN_S2];
  p->has_b1 = op_has_input(n, in, QM_IN_B1);
  p->has_b2 = op_has_input(n, in, QM_IN_B2);
  const int has_z1 = op_has_input(n, in, QM_IN_Z1), has_z2 = op_has_input(n, in, QM_IN_Z2);
  FORWARD_IF_ERROR(qm_check_float(x, "input", d));
  FORWARD_IF_ERROR(qm_check_float(r, "router_probs", d));
  FORWARD_IF_ERROR(qm_check_float(s1, "fc1_scales", d));
  FORWARD_IF_ERROR(qm_check_float(s2, "fc2_scales", d));
  if (p->has_b1) FORWARD_IF_ERROR(qm_check_float(&in[QM_IN_B1], "fc1_experts_bias", d));
  if (p->has_b2) FORWARD_IF_ERROR(qm_check_float(&in[QM_IN_B2], "fc2_experts_bias", d));
  static const int U8_SLOTS[4] = {QM_IN_W1, QM_IN_W2, QM_IN_Z1, QM_IN_Z2};
  static const char *const U8_NAMES[4] = {"fc1_experts_weights", "fc2_experts_weights",
                                          "fc1_zero_points", "fc2_zero_points"};
  for (int i = 0; i < 4; i++)
    if (op_has_input(n, in, U8_SLOTS[i]))
      RETURN_ERROR_IF(in[U8_SLOTS[i]].dtype != PH_DTYPE_U8, d, PH_ERR_TENSOR_DTYPE,
                      "QMoE: %s is %s; expected U8", U8_NAMES[i],
                      op_dtype_name(in[U8_SLOTS[i]].dtype));
  RETURN_ERROR_IF(x->rank >= 0 && x->rank != 2 && x->rank != 3, d, PH_ERR_TENSOR_SHAPE,
                  "QMoE: input must be [T, H] or [B, S, H], got rank %d", x->rank);
  FORWARD_IF_ERROR(op_check_rank(n, r, 2, "router_probs [T, E]", d));
  FORWARD_IF_ERROR(op_check_rank(n, w1, 3, "fc1_experts_weights [E, 2I, H / pack]", d));
  FORWARD_IF_ERROR(op_check_rank(n, w2, 3, "fc2_experts_weights [E, H, I / pack]", d));

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
  const int64_t w1k = op_dim(w1, 2), w2k = op_dim(w2, 2);
  FORWARD_IF_ERROR(
      op_merge_dim(n, &H, w1k < 0 ? -1 : w1k * pack, "the hidden size H (fc1's K)", d));
  FORWARD_IF_ERROR(op_merge_dim(n, &H, op_dim(w2, 1), "the hidden size H", d));
  I = w2k < 0 ? -1 : w2k * pack;
  FORWARD_IF_ERROR(op_merge_dim(n, &I2, op_dim(w1, 1), "fc1's row count 2I", d));
  RETURN_ERROR_IF(I >= 0 && I2 >= 0 && I2 != 2 * I, d, PH_ERR_TENSOR_SHAPE,
                  "QMoE: fc1_experts_weights has %lld rows per expert but fc2 has I = %lld; "
                  "swiglu_fusion = 1 needs 2I = %lld",
                  (long long)I2, (long long)I, (long long)(2 * I));
  RETURN_ERROR_IF(I2 >= 0 && I2 % 2 != 0, d, PH_ERR_TENSOR_SHAPE,
                  "QMoE: fc1_experts_weights has %lld rows per expert, not 2I", (long long)I2);
  if (I < 0 && I2 >= 0) I = I2 / 2;
  RETURN_ERROR_IF(H == 0 || I == 0, d, PH_ERR_TENSOR_SHAPE,
                  "QMoE: the hidden size (%lld) and expert size (%lld) must be >= 1", (long long)H,
                  (long long)I);
  RETURN_ERROR_IF(H > QM_MAX_DIM || I > QM_MAX_DIM || E > QM_MAX_DIM, d, PH_ERR_UNSUPPORTED,
                  "QMoE: H = %lld, I = %lld, E = %lld: dims above %lld are not supported",
                  (long long)H, (long long)I, (long long)E, (long long)QM_MAX_DIM);
  RETURN_ERROR_IF(E >= 0 && p->k > E, d, PH_ERR_INVALID_ARGUMENT,
                  "QMoE: k = %lld is more than the %lld experts", (long long)p->k, (long long)E);
  RETURN_ERROR_IF(x->rank >= 0 && H >= 0 && H % pack != 0, d, PH_ERR_TENSOR_SHAPE,
                  "QMoE: the hidden size %lld is not a multiple of %lld (codes per byte)",
                  (long long)H, (long long)pack);
  if (blockwise) {
    RETURN_ERROR_IF((H >= 0 && H % block != 0) || (I >= 0 && I % block != 0), d,
                    PH_ERR_TENSOR_SHAPE,
                    "QMoE: block_size %lld must divide the hidden size %lld and the expert size "
                    "%lld",
                    (long long)block, (long long)H, (long long)I);
    if (has_z1 || has_z2)
      RETURN_ERROR_IF((H >= 0 && H % (block * pack) != 0) || (I >= 0 && I % (block * pack) != 0), d,
                      PH_ERR_TENSOR_SHAPE,
                      "QMoE: with zero points, block_size * %lld = %lld must divide the hidden "
                      "size %lld and the expert size %lld",
                      (long long)pack, (long long)(block * pack), (long long)H, (long long)I);
  }
  /* scales, zero points and biases against E, N and the blocks */
  const int64_t N1 = I < 0 ? -1 : 2 * I;
  const int64_t nb1 = H < 0 ? -1 : blockwise ? H / block : 1;
  const int64_t nb2 = I < 0 ? -1 : blockwise ? I / block : 1;
  FORWARD_IF_ERROR(qm_check_table(s1, "fc1_scales", blockwise, E, N1, blockwise ? nb1 : N1, d));
  FORWARD_IF_ERROR(qm_check_table(s2, "fc2_scales", blockwise, E, H, blockwise ? nb2 : H, d));
  /* zero points: block-wise [E, N, nb / pack], per row [E, N / pack]; a block-wise matrix one
   * block wide may also give the per-row shape (ORT 1.30 reads scales [E, N, 1] as per row and
   * then wants that shape; for one block the two mean the same) */
  int zp_rows[2] = {0, 0};
  for (int i = 0; i < 2; i++) {
    const int slot = i == 0 ? QM_IN_Z1 : QM_IN_Z2;
    if (!(i == 0 ? has_z1 : has_z2)) continue;
    const tinfo *z = &in[slot];
    const int64_t N = i == 0 ? N1 : H, nb = i == 0 ? nb1 : nb2;
    zp_rows[i] = !blockwise || (z->rank == 2 && nb == 1);
    const char *what = i == 0 ? "fc1_zero_points" : "fc2_zero_points";
    if (zp_rows[i])
      FORWARD_IF_ERROR(qm_check_table(z, what, 0, E, N, N < 0 ? -1 : N / pack, d));
    else
      FORWARD_IF_ERROR(qm_check_table(z, what, 1, E, N, nb < 0 ? -1 : nb / pack, d));
  }
  if (p->has_b1) {
    const tinfo *b1 = &in[QM_IN_B1];
    FORWARD_IF_ERROR(op_check_rank(n, b1, 2, "fc1_experts_bias [E, 2I]", d));
    FORWARD_IF_ERROR(op_merge_dim(n, &E, op_dim(b1, 0), "the expert count E", d));
    RETURN_ERROR_IF(op_dims_conflict(op_dim(b1, 1), N1), d, PH_ERR_TENSOR_SHAPE,
                    "QMoE: fc1_experts_bias has %lld columns, expected 2I = %lld",
                    (long long)op_dim(b1, 1), (long long)N1);
  }
  if (p->has_b2) {
    const tinfo *b2 = &in[QM_IN_B2];
    FORWARD_IF_ERROR(op_check_rank(n, b2, 2, "fc2_experts_bias [E, H]", d));
    FORWARD_IF_ERROR(op_merge_dim(n, &E, op_dim(b2, 0), "the expert count E", d));
    FORWARD_IF_ERROR(op_merge_dim(n, &H, op_dim(b2, 1), "the hidden size H", d));
  }
  p->T = T;
  p->H = H;
  p->E = E;
  p->I = I;
  for (int i = 0; i < 2; i++) {
    moe_fc *f = &p->fc[i];
    const int64_t K = i == 0 ? H : I;
    f->bits = (int)bits;
    f->block = blockwise ? block : K;
    f->n_blocks = blockwise ? (K < 0 ? -1 : K / block) : 1;
    f->zp = (i == 0 ? has_z1 : has_z2) ? (zp_rows[i] ? 2 : 1) : 0;
  }
  moe_set_chunk(p);
  return PH_OK;
}

static ph_status qmoe_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  moe_plan p;
  FORWARD_IF_ERROR(qmoe_resolve(n, in, &p, d));
  *out = in[QM_IN_X];
  out->data = NULL;
  return PH_OK;
}

static ph_status qmoe_plan_fn(const gnode *n, const tinfo *in, void *plan, diag *d) {
  return qmoe_resolve(n, in, plan, d);
}

static size_t qmoe_scratch(const gnode *n, const tinfo *in, int n_threads) {
  moe_plan p;
  if (qmoe_resolve(n, in, &p, NULL) != PH_OK) return 0;
  return moe_plan_scratch(&p, n_threads);
}

static ph_status qmoe_run(const gnode *n, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                          diag *d) {
  RETURN_ERROR_IF(!ctx->plan, d, PH_ERR_INTERNAL, "QMoE: run without a plan");
  const moe_plan *p = ctx->plan;
  moe_fc_data fc[2];
  memset(fc, 0, sizeof fc);
  static const int W[2] = {QM_IN_W1, QM_IN_W2}, S[2] = {QM_IN_S1, QM_IN_S2},
                   B[2] = {QM_IN_B1, QM_IN_B2}, Z[2] = {QM_IN_Z1, QM_IN_Z2};
  for (int i = 0; i < 2; i++) {
    fc[i].w = in[W[i]]->data;
    fc[i].dtype = PH_DTYPE_U8;
    fc[i].scales = in[S[i]];
    if (p->fc[i].zp) fc[i].zp = in[Z[i]]->data;
    if (i == 0 ? p->has_b1 : p->has_b2) {
      fc[i].bias = in[B[i]]->data;
      fc[i].bias_dtype = in[B[i]]->dtype;
    }
  }
  (void)n;
  return moe_plan_run(p, in[QM_IN_X], in[QM_IN_ROUTER], fc, out[0], ctx, d);
}

const op_def op_def_qmoe = {
    "com.microsoft", "QMoE",           7,           QM_N_INPUTS, 1, 1, qmoe_infer, qmoe_run,
    qmoe_scratch,    sizeof(moe_plan), qmoe_plan_fn};
