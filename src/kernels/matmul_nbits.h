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

#endif /* PH_KERNELS_MATMUL_NBITS_H */
