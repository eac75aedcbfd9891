/* op_moe — what com.microsoft::MoE (op_moe.c) and com.microsoft::QMoE (op_qmoe.c) share: the
 * routing, the grouped expert matmuls and the combination, over expert weights that are either
 * float rows (MoE) or 4/8-bit blocks with scales and optional zero points (QMoE). Internal to
 * src/ops; docs/ops-moe.md is the contract of both ops.
 *
 * A QMoE expert matrix [E, N, K] (fc1: N = 2I, K = H; fc2: N = H, K = I) is stored as ONNX
 * Runtime 1.30's QMoE schema says: codes uint8 [E, N, K * bits / 8] (row n of expert e: the K
 * codes in increasing k, bits 4 two per byte with the low nibble holding the even k), scales
 * [E, N, K / block] (block-wise) or [E, N] (per column: block = K), zero points (optional) uint8
 * [E, N, K / block * bits / 8] packed along the blocks (low nibble: the even block), or, per
 * column, [E, N * bits / 8] packed along N (low nibble: the even row). Without zero points every
 * block's is 2^(bits - 1). Each row is dequantized exactly as MatMulNBits dequantizes a column
 * (kernels/matmul_nbits.h: w = (q - z) * s in f32, one rounding) into a per-thread f32 buffer,
 * and then multiplied by the same MatMulWT f32 kernels MoE runs on f32 weights: QMoE's output is
 * bit-identical to MoE's on the dequantized weights (tested).
 */
#ifndef PH_OPS_OP_MOE_H
#define PH_OPS_OP_MOE_H

#include <stdint.h>

#include "ops/op.h"

/* One expert matrix's storage. */
typedef struct moe_fc {
  int bits;         /* 0: float weights (MoE); 4 or 8: quantized (QMoE) */
  int64_t block;    /* quantized: weights per scale along K (K when per column) */
  int64_t n_blocks; /* quantized: K / block */
  int zp;           /* quantized: 0 none (2^(bits-1)), 1 block-wise packed, 2 per column packed */
} moe_fc;

typedef struct moe_plan {
  int64_t T, H, E, I, k;
  int64_t chunk; /* tokens per chunk, >= 1 (0 when T == 0) */
  int normalize;
  int has_b1, has_b2;
  int has_limit;
  float alpha, beta, limit;
  moe_fc fc[2]; /* fc1 [E, 2I, H], fc2 [E, H, I] */
} moe_plan;

/* The run-time view of one expert matrix. */
typedef struct moe_fc_data {
  const unsigned char *w;    /* float rows [E, N, K] (dtype) or codes [E, N, K * bits / 8] */
  ph_dtype dtype;            /* float weights: F32, F16 or BF16; quantized: U8 */
  const tensor *scales;      /* quantized: [E * N * n_blocks] in any float dtype, else NULL */
  const uint8_t *zp;         /* quantized with zero points, else NULL */
  const unsigned char *bias; /* [E, N] or NULL */
  ph_dtype bias_dtype;
} moe_fc_data;

/* The attributes MoE and QMoE share (k, activation_type, swiglu_fusion,
 * normalize_routing_weights, use_sparse_mixer, activation_alpha/beta, swiglu_limit) into p,
 * with the schema's defaults; messages start with n->op_type. */
ph_status moe_common_attrs(const gnode *n, moe_plan *p, diag *d);

/* p->chunk from T, H, I and k (call once the dims are known). */
void moe_set_chunk(moe_plan *p);

/* Scratch bytes of a run of p on n_threads threads (0 when a dim is unknown). */
size_t moe_plan_scratch(const moe_plan *p, int n_threads);

/* Routes x [T, H] (any float dtype) by router [T, E] through the experts fc[0] (fc1) and fc[1]
 * (fc2), writing y (x's shape and dtype). Never allocates: ctx->scratch must hold
 * moe_plan_scratch(p, threads). */
ph_status moe_plan_run(const moe_plan *p, const tensor *x, const tensor *router,
                       const moe_fc_data fc[2], tensor *y, op_ctx *ctx, diag *d);

#endif /* PH_OPS_OP_MOE_H */
