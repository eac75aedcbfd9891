/* dispatch — which kernel variant runs: the one table of variants, and the choice among them.
 *
 * A variant is one instruction-set level: scalar (portable C, the reference and the fallback
 * everywhere), avx2 (AVX2+FMA+F16C) and avx512 (AVX-512 F/BW/VL and what avx2 needs). Each row of
 * the table (kernels/dispatch.c) names the variant and gives every kernel it has:
 *   matmul_wt           MatMulWT's dot-product kernels (kernels/matmul_wt.h)
 *   gated_delta_decode  GatedDeltaNet's one-token step on a V-major state, or NULL where the
 *                       variant runs the scalar reference (kernels/gated_delta.h)
 *   replay_recurrent    the commit's replay of captured GatedDeltaNet updates, or NULL: the
 *                       scalar reference (kernels/state_replay.h)
 *   gated_delta_chunk   the chunked WY/UT form of GatedDeltaNet's and LinearAttention's prefill,
 *                       or NULL: the reference gated_delta_chunk (kernels/gated_delta.h)
 *   act                 the elementwise activations' row kernels (exp, sigmoid, SiLU on f32:
 *                       kernels/act.h), never NULL; every variant gives the scalar bits
 * A new kernel is a new column here and one entry per row; tests/benches walk the table.
 * Cores with one implementation only (gated_delta_token, conv_causal_channel in kernels/conv.h,
 * rope_rotate_f32 in kernels/rope.h) are called directly and have no column: they get one when a
 * second variant of them exists. attend_rows (kernels/attend.h) has variants but picks them
 * itself from the active variant (attend_rows_for). test_kernels checks them all in its grid.
 *
 * The variant is chosen once per process, from the CPU (cpu_features(), which honours
 * PH_CPU_DISABLE) and the environment variable PH_KERNELS = scalar | avx2 | avx512 | auto
 * (unset or auto: the best this CPU runs; a variant the CPU lacks falls back to the best one
 * below it, with a warning in the log; an unknown value is ignored with a warning). Never from
 * the shapes: within one process every row of every batch goes through the same arithmetic.
 * Every op that has variants reads the choice once at the start of its run().
 *
 * Nothing here allocates; every function is thread-safe.
 */
#ifndef PH_KERNELS_DISPATCH_H
#define PH_KERNELS_DISPATCH_H

#include "base/diag.h"
#include "kernels/act.h"
#include "kernels/gated_delta.h"
#include "kernels/matmul_wt.h"
#include "kernels/state_replay.h"

typedef enum kernel_variant {
  KERNEL_SCALAR = 0, /* portable C reference */
  KERNEL_AVX2 = 1,   /* needs avx2, fma, f16c */
  KERNEL_AVX512 = 2, /* needs avx512f, avx512bw, avx512vl (and what AVX2 needs) */
  KERNEL_N_VARIANTS = 3
} kernel_variant;

/* One row of the table: a variant's name and its kernels. */
typedef struct kernel_set {
  const char *name;                   /* "scalar", "avx2", "avx512": PH_KERNELS spells these */
  const matmul_wt_kernels *matmul_wt; /* never NULL; its entries are NULL where not built */
  gated_delta_decode_fn gated_delta_decode;   /* NULL: the scalar reference path */
  state_replay_recurrent_fn replay_recurrent; /* NULL: the scalar reference */
  gated_delta_chunk_fn gated_delta_chunk;     /* NULL: the reference gated_delta_chunk */
  const act_kernels *act;                     /* never NULL */
} kernel_set;

/* "scalar", "avx2", "avx512"; "?" for a value outside the enum. */
const char *kernel_variant_name(kernel_variant v);

/* 1 when this build and this CPU (after PH_CPU_DISABLE) can run v; scalar always can. */
int kernel_variant_available(kernel_variant v);

/* The variant the kernels run now: the forced one if any, else the one chosen at first use from
 * the CPU and PH_KERNELS. */
kernel_variant kernel_variant_active(void);

/* The table row of v (v must be < KERNEL_N_VARIANTS; an unavailable v's kernels must not run). */
const kernel_set *kernel_set_of(kernel_variant v);

/* The bf16-mode MatMulWT kernels (kernels/matmul_wt.h "the bf16 dot") variant v runs, by rows per
 * call: for avx512 on a CPU with avx512_bf16 (after PH_CPU_DISABLE) the native vdpbf16ps kernels,
 * else the variant's own (avx512: an AVX-512F emulation), else the scalar reference's (avx2 has
 * none yet). All of them give the same bits, so this choice is speed only. Entry [1] is never
 * NULL. */
const wt_bf16_kernel_fn *kernel_matmul_wt_bf16(kernel_variant v);

/* The one test override: forces v for every later kernel choice in this process, so tests and
 * benchmarks can time or check each variant in turn. Switching while another thread runs an op
 * is safe but makes that thread's later ops use the new variant: do not switch under a running
 * model. PH_ERR_UNSUPPORTED (and nothing changes) when v is not available here. */
ph_status kernel_force_variant(kernel_variant v, diag *d);

#endif /* PH_KERNELS_DISPATCH_H */
