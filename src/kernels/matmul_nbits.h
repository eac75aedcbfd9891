/* matmul_nbits — the scalar reference kernels of com.microsoft::MatMulNBits (ONNX Runtime 1.30's
 * contrib schema; the op is src/ops/op_matmul_nbits.c, docs/ops-linear.md "MatMulNBits").
 *
 * A quantized weight column n (one output feature) is stored as n_blocks = ceil(K / block)
 * blocks of block * bits / 8 bytes. With bits = 8 byte j of a block is the code of k = j; with
 * bits = 4 byte j holds k = 2j in its low nibble and k = 2j + 1 in its high nibble. Codes past K
 * in the last block are padding and never read. Each block b has one scale s_b and one zero
 * point z_b (a float here: the op unpacks uint8 zero points, or passes float ones through):
 *
 *   w[k] = (q_k - z_b) * s_b          b = k / block, computed in f32 (one rounding: q - z is an
 *                                     exact small integer when z is, then one multiply)
 *
 * nbits_dot sums a[k] * w[k] in f32 in increasing k, one accumulator, each product rounded
 * before it is added (the library builds as ISO C11, where GCC does not contract a * b + c into
 * an FMA; a compiler that did would stay inside the bound the tests derive). That order depends on
 * K only, so a result never depends on M, on which rows share a call, or on the thread count. Pure,
 * single-threaded, no allocation.
 *
 * accuracy_level 4 (int8 activations; ONNX Runtime MLAS's CompInt8 rule for A, as its AVX-512
 * quantizer computes it). Per row of A and per weight block b along K (the k of the block that
 * are < K):
 *
 *   amax = max |a_k|,  s_a = amax / 127,  r = 127 / amax                 (each one f32 rounding)
 *   â_k  = round_half_even(a_k · r)    (one f32 multiply, then to the nearest integer, ties to
 *                                       even; |â_k| <= 127 since |a_k · r| rounds to <= 127)
 *   Σâ   = Σ_k â_k                                                         (int32, exact)
 *   amax < FLT_MIN (zero or subnormal): s_a = 0 and every â_k = 0 (MLAS would divide by it);
 *   amax not finite (an inf or NaN in the block): s_a = NaN and every â_k = 0, so every output
 *   of the row is NaN.
 *
 * Then per output (row, column n), with the weight codes q_k and integer zero points z_b
 * (uint8 or the implicit 2^(bits-1)):
 *
 *   d_b  = Σ_k q_k · â_k − z_b · Σâ_b          int32, exact (|d_b| <= 255 · 127 · block < 2^31
 *                                              for block <= NBITS_I8_MAX_BLOCK)
 *   y    = Σ_b (s_a,b · s_w,b) · (float)d_b    f32, b increasing, from +0: per block one multiply
 *                                              of the scales, one of the converted d_b (round to
 *                                              nearest even), one add; never fused
 *
 * The integer part is exact in any order, so every variant that takes the same f32 steps per
 * block gives these bits (kernels/matmul_nbits_avx512.c is tested bit-identical). Error against
 * the exact product: |Σ_k w_k (a_k − s_a â_k)| <= Σ_k |w_k| · s_a / 2 per block, plus the f32
 * roundings of the combine (docs/ops-linear.md).
 */
#ifndef PH_KERNELS_MATMUL_NBITS_H
#define PH_KERNELS_MATMUL_NBITS_H

#include <stdint.h>

/* w[0 .. K) = the dequantized column from its packed blocks b_col (n_blocks * block * bits / 8
 * bytes), scales[n_blocks] and zero points zp[n_blocks]. bits is 4 or 8; block is even. */
void nbits_dequant_col(const uint8_t *b_col, const float *scales, const float *zp, int bits,
                       int64_t block, int64_t K, float *w);

/* The zero point of block b of one column from its packed uint8 zero points zp_col:
 * bits = 8: byte b; bits = 4: the low nibble of byte b / 2 for even b, the high one for odd b. */
float nbits_zero_point_u8(const uint8_t *zp_col, int bits, int64_t b);

/* Sum over k < K of a[k] * w[k], in f32, in increasing k (see above). */
float nbits_dot(const float *a, const float *w, int64_t K);

/* ---- accuracy_level 4 --------------------------------------------------------------------- */

/* The largest block the int8 path takes (d_b stays inside int32); larger blocks compute as level
 * 1 (the op's choice). */
#define NBITS_I8_MAX_BLOCK 32768

/* Quantizes one row a[0 .. K) by the rule above: q[0 .. n_blocks * block) (codes; zeros from K
 * on), sa[n_blocks] (s_a per block) and asum[n_blocks] (Σâ per block). block is a power of two
 * <= NBITS_I8_MAX_BLOCK. */
void nbits_quantize_row_i8(const float *a, int64_t K, int64_t block, int8_t *q, float *sa,
                           int32_t *asum);

/* The level-4 output of one row and one column (the rule above): q, sa, asum from
 * nbits_quantize_row_i8; b_col the column's packed blocks; sw[n_blocks] its scales (f32);
 * zp[n_blocks] its integer zero points (0..2^bits - 1). */
float nbits_dot_i8(const int8_t *q, const float *sa, const int32_t *asum, const uint8_t *b_col,
                   const float *sw, const int32_t *zp, int bits, int64_t block, int64_t K);

/* ---- accuracy_level 4, AVX-512 VNNI (kernels/matmul_nbits_avx512.c) ------------------------
 * One call computes rows [0, M) against NBITS_COLS columns and writes out[m * NBITS_COLS + c]
 * = nbits_dot_i8 of row m and column c, bit for bit (no bias). Inputs:
 *   q:     M rows of codes, q_stride bytes apart, in nbits_i8_avx512_layout's order, zeros past
 *          K up to nbits_i8_row_blocks(...) * block codes;
 *   sa, asum: M rows of nbits_i8_row_blocks(...) floats / int32 each, x_stride apart (zeros
 *          past n_blocks);
 *   b[c]:  column c's packed blocks (n_blocks * block * bits / 8 bytes; the kernel reads exactly
 *          these, with masked loads at the end);
 *   swt, zt: the columns' scales and zero points transposed, [b * NBITS_COLS + c], for
 *          b < nbits_i8_row_blocks(...) (zeros past n_blocks).
 * Rows are taken NBITS_ROWS at a time; each row's operations do not depend on the others, so a
 * row gives the same bits whatever M. Needs avx512f/bw/vl + avx512_vnni. */
#define NBITS_COLS 4
#define NBITS_ROWS 4
typedef void (*nbits_i8_kernel_fn)(const int8_t *q, int64_t q_stride, const float *sa,
                                   const int32_t *asum, int64_t x_stride, int64_t M,
                                   const uint8_t *const *b, const float *swt, const int32_t *zt,
                                   int bits, int64_t block, int64_t n_blocks, float *out);

/* The blocks each row's tables are padded to: n_blocks rounded up to 4 when a block is less
 * than 64 bytes (the kernel then takes four blocks per step), else n_blocks. */
int64_t nbits_i8_row_blocks(int bits, int64_t block, int64_t n_blocks);

/* The AVX-512 VNNI kernel for (bits, block), or NULL when this build has none for them (off
 * x86-64, 4 bits with block 16, or a block above NBITS_I8_MAX_BLOCK): the caller then runs
 * nbits_dot_i8, which gives the same bits. Whether the CPU can run it is the caller's check. */
nbits_i8_kernel_fn nbits_i8_avx512_kernel(int bits, int64_t block);

/* Reorders one row's codes q[0 .. n) (n a multiple of 128) for the 4-bit kernel: in each group
 * of 128 codes the 64 of even k first, then the 64 of odd k (the low and high nibbles of 64
 * packed bytes). 8 bits use the natural order. */
void nbits_i8_avx512_layout(int8_t *q, int64_t n);

#endif /* PH_KERNELS_MATMUL_NBITS_H */
