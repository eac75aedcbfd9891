/* quant — blockwise weight quantization into ONNX Runtime 1.30's com.microsoft::MatMulNBits
 * layout, its inverse, and the round-trip error the quantization report prints.
 *
 * Why src/tensor/: the quantizer needs only element types and their conversions (dtype.h) and
 * the diag of base/, so it sits where every module that will call it may include it: the export
 * and load-time quantization (models/), the MatMulNBits reference kernel and its tests
 * (kernels/, ops/), and the CLI through tools_api.h (docs/architecture.md, tests/test_layers.sh).
 *
 * Layout (W is the nn.Linear weight, row-major [N = out, K = in]; blocks run along K):
 *   kb      = ceil(K / block)                      blocks per row
 *   B       uint8 [N, kb, block*bits/8]            bits 8: one code per byte; bits 4: two codes
 *                                                  per byte, the LOW nibble holding the even k
 *   scales  [N * kb]                               scale of row n, block b at n*kb + b
 *   zp      uint8 [N * ceil(kb*bits/8)]            asymmetric only; bits 4: two per byte, the low
 *                                                  nibble holding the even block; an odd kb's
 *                                                  last high nibble is 8 (ORT's fill value)
 * Symmetric quantization has no zp input: the schema's default zero point 2^(bits-1) applies.
 * Dequantization: w = (code - zp) * scale.
 *
 * K not a multiple of the block: the row is padded with zeros to kb*block, as ORT's Python
 * quantizer (MatMulNBitsQuantizer) pads the weight before quantizing. A zero never changes a
 * block's scale (symmetric: the value of largest magnitude decides; asymmetric: the range
 * already includes 0), and it encodes as the zero point, so padding dequantizes to 0 exactly.
 *
 * Scale and zero point, as ORT's blockwise quantizer (MLAS BlockwiseQuantizer) computes them,
 * per block, from the block's min and max:
 *   symmetric:  m = the element of largest |v| (max if |max| > |min|, else min);
 *               scale = m / -2^(bits-1)  (so scale carries m's sign: m encodes as code 0);
 *               zp = 2^(bits-1).
 *   asymmetric: lo = min(min, 0), hi = max(max, 0); scale = (hi - lo) / (2^bits - 1);
 *               zp = clamp(roundf(-lo / scale), 0, 2^bits - 1) (zp = 0 when scale == 0).
 * The scale is then rounded to the scale dtype (f32, f16 or bf16: the graph's io dtype), and
 * every code is computed against that stored value, as ORT does:
 *   r = (s != 0 ? 1/s : 0);  code = clamp(roundf(v * r + zp), 0, 2^bits - 1)
 * roundf rounds halves away from zero (ORT's rule), not to even.
 *
 * Error bound (test_quant.c checks it): asymmetric, |w - dq(q(w))| <= |s|/2 for every element;
 * symmetric, <= |s|/2 except on the side opposite m, where the code 2^bits would be needed for
 * v = -m and clamps to 2^bits - 1: there <= |s|. Both plus a few ulps of float arithmetic and,
 * for an f16/bf16 scale, the scale's own rounding times the code's distance from zp.
 *
 * Errors: bits other than 4|8, a block that is not a power of two >= 16, N or K < 1:
 * PH_ERR_INVALID_ARGUMENT. A NaN or infinite weight: PH_ERR_NON_FINITE naming the tensor (the
 * name argument) and the element [n, k]. A block whose scale is not finite in the scale dtype
 * (e.g. hi - lo overflows f32, or the scale exceeds f16's 65504): PH_ERR_NON_FINITE. Pure
 * functions over caller buffers; nothing is allocated except by quant_rms_rel_error; safe to call
 * from several threads at once (the CPU prepare pass quantizes rows of a weight in parallel).
 *
 * Speed: quant_quantize runs an AVX-512 variant where the CPU has AVX-512 F/BW/VL, else an AVX2
 * one where it has AVX2 + FMA + F16C (base/cpu.h; PH_CPU_DISABLE masks them), each bit-identical
 * to the scalar rule above (quant_impl.h says how; test_quant compares them over a grid).
 * Indicative: about 10-20 ns a weight scalar, about 1 ns with either SIMD variant
 * (docs/quantization.md, "Speed of quantizing").
 */
#ifndef PH_TENSOR_QUANT_H
#define PH_TENSOR_QUANT_H

#include <stddef.h>
#include <stdint.h>

#include "base/diag.h"

typedef struct quant_params {
  int bits;             /* 4 or 8 */
  int block;            /* a power of two >= 16; MatMulNBits exports use 32, 64 or 128 */
  int symmetric;        /* 1: no zero points (default 2^(bits-1)); 0: per-block zero points */
  ph_dtype scale_dtype; /* f32, f16 or bf16: the dtype the scales are stored in */
} quant_params;

/* Sizes of the three outputs for W [n, k]: B bytes, scale count, zero-point bytes (0 when
 * symmetric). PH_ERR_INVALID_ARGUMENT for bad params (message says which). Any out pointer may
 * be NULL. */
ph_status quant_sizes(const quant_params *p, int64_t n, int64_t k, size_t *b_bytes,
                      size_t *n_scales, size_t *zp_bytes, diag *d);

/* Quantizes w (dtype w_dtype: f32, f16 or bf16; row-major [n, k]; read with memcpy, any
 * alignment) into b, scales (f32 values, each exactly representable in p->scale_dtype) and zp
 * (asymmetric only; may be NULL when symmetric). The buffers have quant_sizes' sizes. name
 * names the tensor in error messages (may be NULL). On error the outputs are unspecified. */
ph_status quant_quantize(const quant_params *p, const void *w, ph_dtype w_dtype, int64_t n,
                         int64_t k, uint8_t *b, float *scales, uint8_t *zp, const char *name,
                         diag *d);

/* The inverse: out [n, k] f32 = (code - zp) * scale for the K real columns (padding dropped).
 * zp NULL means the default zero point (symmetric). */
ph_status quant_dequantize(const quant_params *p, const uint8_t *b, const float *scales,
                           const uint8_t *zp, int64_t n, int64_t k, float *out, diag *d);

/* Converts the n f32 scales to p->scale_dtype's bytes at dst (f32: a copy). Exact, because
 * quant_quantize already rounded them. */
ph_status quant_scales_to(ph_dtype dt, const float *scales, size_t n, void *dst, diag *d);

/* RMS relative error ||W - dq(q(W))||_2 / ||W||_2 (accumulated in double) of quantizing w with
 * p; 0 for an all-zero W. Allocates its scratch (PH_ERR_NO_MEMORY). */
ph_status quant_rms_rel_error(const quant_params *p, const void *w, ph_dtype w_dtype, int64_t n,
                              int64_t k, const char *name, double *rel, diag *d);

#endif /* PH_TENSOR_QUANT_H */
