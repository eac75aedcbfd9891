/* op_matmul — which kernel variant MatMulWT runs (y = A W^T + bias, src/ops/op_matmul.c).
 *
 * MatMulWT has three implementations of one contract: the portable scalar reference (plain C,
 * the fallback everywhere), AVX2+FMA+F16C (8-lane ymm) and AVX-512 F/BW/VL (16-lane zmm). All
 * three sum each dot product in one order that depends on K only (16 partial sums, element k in
 * partial k % 16 in increasing k, a fixed pairwise tree, then + bias), so every variant is batch
 * invariant by itself. The SIMD variants use fused multiply-add where the reference rounds the
 * product first: their results differ from the reference by rounding (bounded in
 * docs/performance.md), and are bit-identical to each other.
 *
 * The variant is chosen once per process, from the CPU (cpu_features(), which honours
 * PH_CPU_DISABLE) and the environment variable PH_KERNELS = scalar | avx2 | avx512 | auto
 * (unset or auto: the best this CPU runs; a variant the CPU lacks falls back to the best one
 * below it, with a warning in the log; an unknown value is ignored with a warning). Never from
 * the shapes: within one process every row of every batch goes through the same arithmetic.
 *
 * This header is for tests and benchmarks that compare variants. Nothing here allocates; every
 * function is thread-safe. It never changes results of a MatMulWT already running: run() reads
 * the variant once at its start.
 */
#ifndef PH_OPS_OP_MATMUL_H
#define PH_OPS_OP_MATMUL_H

#include "base/diag.h"

typedef enum matmul_wt_variant {
  MATMUL_WT_SCALAR = 0, /* portable C reference */
  MATMUL_WT_AVX2 = 1,   /* needs avx2, fma, f16c */
  MATMUL_WT_AVX512 = 2, /* needs avx512f, avx512bw, avx512vl (and what AVX2 needs) */
  MATMUL_WT_N_VARIANTS = 3
} matmul_wt_variant;

/* "scalar", "avx2", "avx512"; "?" for a value outside the enum. */
const char *matmul_wt_variant_name(matmul_wt_variant v);

/* 1 when this build and this CPU (after PH_CPU_DISABLE) can run v; scalar always can. */
int matmul_wt_variant_available(matmul_wt_variant v);

/* The variant MatMulWT runs now: the forced one if any, else the one chosen at first use from
 * the CPU and PH_KERNELS. */
matmul_wt_variant matmul_wt_variant_active(void);

/* Forces v for every later MatMulWT in this process, for tests and benchmarks that time or
 * check each variant in turn. Switching while another thread runs MatMulWT is safe but makes
 * that thread's later results come from the new variant: do not switch under a running model.
 * PH_ERR_UNSUPPORTED (and nothing changes) when v is not available here. */
ph_status matmul_wt_force_variant(matmul_wt_variant v, diag *d);

#endif /* PH_OPS_OP_MATMUL_H */
