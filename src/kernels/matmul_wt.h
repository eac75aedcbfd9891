/* matmul_wt — the MatMulWT kernels: sums[r * WT_NW + c] = dot(A row r, W row c).
 *
 * One kernel call computes R rows of A (f32, contiguous, K apart) against WT_NW rows of W (f32,
 * bf16 or f16, any alignment) and writes the R x WT_NW raw dot products; bias, output rounding,
 * tiling and threading are the op's (src/ops/op_matmul.c). Every kernel of every variant sums
 * each dot product in one order that depends on K only: WT_LANES partial sums, element k going
 * to partial k % WT_LANES in increasing k, then a fixed pairwise tree (lanes l and l + 8, then
 * + 4, + 2, + 1). So a row's sums never depend on R nor on which rows share a call (batch
 * invariance, architecture.md). The scalar kernels round each product (the reference); the
 * AVX2 and AVX-512 kernels fuse each multiply-add, so they differ from the reference by
 * rounding (bounded in docs/performance.md) and are bit-identical to each other.
 *
 * Variants (one file each, registered in kernels/dispatch.c):
 *   matmul_wt_scalar.c  portable C, R = 1 and 4
 *   matmul_wt_avx2.c    AVX2+FMA+F16C (two ymm per dot product), R = 1
 *   matmul_wt_avx512.c  AVX-512 F/BW/VL (one zmm per dot product), R = 1..6
 * Kernels read only their inputs and write only sums; nothing allocates; all are thread-safe.
 */
#ifndef PH_KERNELS_MATMUL_WT_H
#define PH_KERNELS_MATMUL_WT_H

#include <stdint.h>
#include <string.h>

#define WT_LANES 16 /* partial sums per dot product: the fixed summation order */
#define WT_NW    4  /* W rows per kernel call: four concurrent weight streams */
/* Most A rows per kernel call: AVX-512 keeps 6 x WT_NW accumulators, WT_NW weight vectors and
 * one A vector in its 32 registers. */
#define WT_RMAX  6

/* sums[r * WT_NW + c] = dot(a + r * K, w[c]) for r < R (the kernel's row count), c < WT_NW. */
typedef void (*wt_kernel_fn)(const float *a, int64_t K, const unsigned char *const *w, float *sums);

/* One variant's kernels, indexed [W dtype: 0 f32, 1 bf16, 2 f16][rows per call], NULL where the
 * variant has no kernel for that row count (rows are then split into smaller calls; every call
 * of a variant computes each row with the same operations, so the split cannot change a bit).
 * k[*][1] exists in every variant this build can run. */
typedef struct matmul_wt_kernels {
  wt_kernel_fn k[3][WT_RMAX + 1];
} matmul_wt_kernels;

extern const matmul_wt_kernels matmul_wt_scalar_kernels;
extern const matmul_wt_kernels matmul_wt_avx2_kernels;   /* all NULL off x86-64 */
extern const matmul_wt_kernels matmul_wt_avx512_kernels; /* all NULL off x86-64 */

/* Element k of a row of W, as f32; p points at the row's first byte (any alignment). */
static inline float wt_ld_f32(const unsigned char *p, int64_t k) {
  float f;
  memcpy(&f, p + 4 * k, 4);
  return f;
}

static inline float wt_ld_bf16(const unsigned char *p, int64_t k) {
  uint16_t h;
  memcpy(&h, p + 2 * k, 2);
  uint32_t u = (uint32_t)h << 16;
  float f;
  memcpy(&f, &u, 4);
  return f;
}

/* f16 -> f32, exact for every input including subnormals, inf and NaN (the test checks all
 * 65536). Written without branches and without floating-point arithmetic on subnormals (which
 * costs a microcode assist per element on x86) so the kernels' loops vectorize. */
static inline float wt_ld_f16(const unsigned char *p, int64_t k) {
  uint16_t h;
  memcpy(&h, p + 2 * k, 2);
  uint32_t em = h & 0x7fffu;
  uint32_t normal = (em << 13) + ((uint32_t)(127 - 15) << 23);
  uint32_t special = (em << 13) | 0x7f800000u;
  float sub = (float)(int32_t)em * 0x1p-24f; /* exact: em < 2^10 when used */
  uint32_t sub_bits;
  memcpy(&sub_bits, &sub, 4);
  /* selects as masks: a conditional here kept gcc from vectorizing the loops */
  uint32_t is_sub = 0u - (uint32_t)(em < 0x0400u);
  uint32_t is_special = 0u - (uint32_t)(em >= 0x7c00u);
  uint32_t bits = (sub_bits & is_sub) | (special & is_special) | (normal & ~(is_sub | is_special));
  bits |= (uint32_t)(h & 0x8000u) << 16;
  float f;
  memcpy(&f, &bits, 4);
  return f;
}

/* ---- for the x86 variant files only -------------------------------------------------------- */
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define WT_X86    1
#define WT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define WT_AVX2   __attribute__((target("avx2,fma,f16c")))
#define WT_INLINE __attribute__((always_inline)) inline
/* Fully unrolls the short register-tile loops (trip counts <= WT_RMAX, WT_NW) so that the
 * accumulator arrays live in registers; clang ignores the GCC spelling. */
#if defined(__clang__)
#define WT_UNROLL _Pragma("unroll")
#else
#define WT_UNROLL _Pragma("GCC unroll 8")
#endif

/* An address `bytes` past p for a prefetch only: computed as an integer, since it may lie past
 * the end of W where pointer arithmetic would be undefined (the prefetch itself never faults). */
static inline const char *wt_ahead(const unsigned char *p, int64_t bytes) {
  return (const char *)(uintptr_t)((uintptr_t)p + (uintptr_t)bytes);
}
#else
#define WT_X86 0
#endif

#endif /* PH_KERNELS_MATMUL_WT_H */
