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
 *   matmul_wt_avx512.c  AVX-512 F/BW/VL (one zmm per dot product), R = 1..6; its bf16-mode
 *                       kernels emulate vdpbf16ps in AVX-512F, and matmul_wt_avx512bf16_kernels
 *                       are the native AVX-512 BF16 ones (R = 1..6, same bits); both AVX-512
 *                       tables also have the K-blocked form kbk (wt_bf16_kblock_fn)
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

/* ---- bf16 mode: the bf16 dot ---------------------------------------------------------------
 * In bf16 precision mode (docs/precision.md) A is rounded to bf16 (wt_round_bf16) and W is bf16
 * too; a kernel of this type computes the same sums[r * WT_NW + c] = dot(A row r, W row c) from
 * bf16 A rows (K apart) and bf16 W rows (any alignment), summing in f32 in one order that
 * depends on K only, the order of the AVX-512 BF16 instruction vdpbf16ps (as Intel documents it
 * and as measured on this Zen 5):
 *   - elements are taken in pairs (2p, 2p + 1); pair p goes to partial sum p % WT_LANES, in
 *     increasing p; K is padded with zeros to a multiple of 2 * WT_LANES (the padded pairs add
 *     +0 products like the real ones);
 *   - for each pair: acc = acc + a[2p+1] * w[2p+1], then acc = acc + a[2p] * w[2p], each the
 *     exact product added to acc and rounded once to f32 (the product itself is never rounded
 *     nor flushed, even when it is below the f32 normal range);
 *   - inputs with a zero exponent field (bf16 subnormals) count as signed zeros, and every sum
 *     whose rounded result is f32-subnormal is flushed to a signed zero (the instruction's
 *     DAZ/FTZ behaviour; wt_ftz). This model was checked against the instruction on this Zen 5
 *     over 3.2M lanes with sums and products around 2^-126 (every lane equal) and is what
 *     test_kernels checks every table against;
 *   - then the f32 tree over the WT_LANES partials above (l + 8, + 4, + 2, + 1).
 * Every variant's bf16 kernels (the scalar reference, the AVX-512F emulation and the native
 * AVX-512 BF16 kernels) perform exactly these operations, so they agree bit for bit, and a
 * row's sums never depend on R nor on the rows sharing a call. */
typedef void (*wt_bf16_kernel_fn)(const uint16_t *a, int64_t K, const unsigned char *const *w,
                                  float *sums);

/* The same bf16 dot over elements [k0, k1) of the rows only, for K-blocked tiles: k0 is a
 * multiple of 2 * WT_LANES and so is k1 unless k1 = K. The R x WT_NW x WT_LANES partial sums
 * ([r][c][lane] floats) start at zero when k0 = 0, else are read from acc, where the previous
 * block's call left them; k1 < K stores them back to acc, k1 = K ends the dot (tail, tree) and
 * writes sums as wt_bf16_kernel_fn does. Each lane sees exactly the operations of one whole-row
 * call in the same order, so calls over consecutive blocks give that call's bits. */
typedef void (*wt_bf16_kblock_fn)(const uint16_t *a, int64_t K, int64_t k0, int64_t k1,
                                  const unsigned char *const *w, float *acc, float *sums);

/* One variant's kernels, indexed [W dtype: 0 f32, 1 bf16, 2 f16][rows per call], NULL where the
 * variant has no kernel for that row count (rows are then split into smaller calls; every call
 * of a variant computes each row with the same operations, so the split cannot change a bit).
 * k[*][1] exists in every variant this build can run. */
typedef struct matmul_wt_kernels {
  wt_kernel_fn k[3][WT_RMAX + 1];
  /* bf16-mode kernels by rows per call (NULL where absent, as k; all NULL: the variant runs the
   * scalar reference's, which gives the same bits) */
  wt_bf16_kernel_fn kb[WT_RMAX + 1];
  /* the K-blocked form of kb (the AVX-512 tables; NULL elsewhere: the op then runs whole rows) */
  wt_bf16_kblock_fn kbk[WT_RMAX + 1];
  /* one A row against 2 * WT_NW W rows (w[0..7] -> sums[0..7]) with kb's bits: eight weight
   * streams for M = 1 (the AVX-512 tables; NULL elsewhere: the op then runs kb[1]) */
  wt_bf16_kernel_fn kb_w8;
} matmul_wt_kernels;

extern const matmul_wt_kernels matmul_wt_scalar_kernels;
extern const matmul_wt_kernels matmul_wt_avx2_kernels;   /* all NULL off x86-64 */
extern const matmul_wt_kernels matmul_wt_avx512_kernels; /* all NULL off x86-64 */
/* The native AVX-512 BF16 (vdpbf16ps) bf16-mode kernels, for CPUs with avx512_bf16 (only kb is
 * set; kernels/dispatch.h picks them for the avx512 variant when the CPU has the instruction). */
extern const matmul_wt_kernels matmul_wt_avx512bf16_kernels;

/* f32 -> bf16 as bf16 mode rounds A (and f32/f16 W): round to nearest, ties to even; a NaN stays
 * a (quiet) NaN; a result whose exponent field is zero (a bf16 subnormal) becomes a signed zero,
 * as the bf16 dot would read it anyway. */
static inline uint16_t wt_round_bf16(float f) {
  uint32_t u;
  memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x0040u);
  u += 0x7fffu + ((u >> 16) & 1u);
  uint16_t h = (uint16_t)(u >> 16);
  if (!(h & 0x7f80u)) h &= 0x8000u;
  return h;
}

/* x with a zero exponent field (zero or subnormal) replaced by the signed zero: the bf16 dot's
 * DAZ/FTZ. Bit operations only, so no subnormal arithmetic is ever performed. */
static inline float wt_ftz(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  if (!(u & 0x7f800000u)) u &= 0x80000000u;
  memcpy(&x, &u, 4);
  return x;
}

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
#define WT_X86        1
#define WT_AVX512     __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define WT_AVX2       __attribute__((target("avx2,fma,f16c")))
#define WT_AVX512BF16 __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16,avx2,fma,f16c")))
#define WT_INLINE     __attribute__((always_inline)) inline
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
