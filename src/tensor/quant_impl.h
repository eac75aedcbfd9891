/* quant_impl — what the scalar quantizer (quant.c) and its AVX-512 and AVX2 twins (quant_avx512.c,
 * quant_avx2.c) share, and the variant choice, for them and for test_quant. Not for other
 * modules: they call quant_quantize, which picks the variant itself.
 *
 * All variants compute every block's scale and zero point with quant_block_scale below (the
 * same f32 operations on the same min and max), and every code with the same f32 operations:
 * v * r, then + zp (two roundings, never a fused multiply-add), roundf (halves away from zero),
 * then the clamp to [0, 2^bits - 1] that sends a NaN to 0 (v = 0 against r = inf, possible only
 * for a block of subnormal weights whose scale's reciprocal overflows). So their bytes are
 * identical for every input; test_quant compares each SIMD variant with the scalar one over a grid.
 */
#ifndef PH_TENSOR_QUANT_IMPL_H
#define PH_TENSOR_QUANT_IMPL_H

#include <math.h>
#include <stdint.h>

#include "tensor/dtype.h"
#include "tensor/quant.h"

typedef enum quant_variant {
  QUANT_SCALAR = 0, /* portable C: the reference */
  QUANT_AVX2 = 1,   /* AVX2 + FMA + F16C (x86-64 builds with GCC or clang) */
  QUANT_AVX512 = 2, /* AVX-512 F/BW/VL and what AVX2 needs */
  QUANT_N_VARIANTS = 3
} quant_variant;

/* 1 when this build and this CPU (base/cpu.h, honouring PH_CPU_DISABLE) run v. */
int quant_variant_available(quant_variant v);

/* quant_quantize through variant v (PH_ERR_INVALID_ARGUMENT when it is not available).
 * quant_quantize uses the best one available: avx512, else avx2, else scalar. */
ph_status quant_quantize_with(quant_variant v, const quant_params *p, const void *w,
                              ph_dtype w_dtype, int64_t n, int64_t k, uint8_t *b, float *scales,
                              uint8_t *zp, const char *name, diag *d);

/* The AVX-512 body: p checked, the buffers non-NULL. Returns 0 when done, 1 when it met a
 * non-finite weight or scale: the caller then runs the scalar variant, which reports it (the
 * outputs are unspecified on error anyway). */
int quant_rows_avx512(const quant_params *p, const void *w, ph_dtype w_dtype, int64_t n, int64_t k,
                      uint8_t *b, float *scales, uint8_t *zp);
/* The AVX2 body, the same contract (quant_avx2.c). */
int quant_rows_avx2(const quant_params *p, const void *w, ph_dtype w_dtype, int64_t n, int64_t k,
                    uint8_t *b, float *scales, uint8_t *zp);

/* f rounded to dt (round to nearest even), back in f32. */
static inline float quant_round_to(ph_dtype dt, float f) {
  if (dt == PH_DTYPE_F16) return f16_to_f32(f32_to_f16(f));
  if (dt == PH_DTYPE_BF16) return bf16_to_f32(f32_to_bf16(f));
  return f;
}

/* The scale (rounded to p->scale_dtype; may be non-finite: the caller's error) and zero point of
 * a block whose elements range over [lo, hi] (quant.h's rule). *lo and *hi come back as the
 * asymmetric rule clamped them (for the error message). */
static inline void quant_block_scale(const quant_params *p, float *lo, float *hi, float *s,
                                     int *z) {
  const int qmax = (1 << p->bits) - 1, mid = 1 << (p->bits - 1);
  if (p->symmetric) {
    float m = fabsf(*hi) > fabsf(*lo) ? *hi : *lo;
    *s = m / (float)-mid;
    *z = mid;
  } else {
    if (*lo > 0) *lo = 0;
    if (*hi < 0) *hi = 0;
    *s = (*hi - *lo) / (float)qmax;
    float zf = *s != 0.0f ? -*lo / *s : *lo;
    *z = zf < 0.0f ? 0 : zf > (float)qmax ? qmax : (int)roundf(zf);
  }
  *s = quant_round_to(p->scale_dtype, *s);
}

/* Block blk's zero point z into row's packed zero points (bits 4: two per byte, low nibble the
 * even block). */
static inline void quant_put_zp(uint8_t *zrow, int bits, int64_t blk, int z) {
  if (bits == 8) {
    zrow[blk] = (uint8_t)z;
  } else {
    int64_t j = blk / 2;
    zrow[j] = (uint8_t)((blk & 1) ? ((zrow[j] & 0x0fu) | (unsigned)z << 4)
                                  : ((zrow[j] & 0xf0u) | (unsigned)z));
  }
}

/* A SIMD variant's block once its range [lo, hi] is known (an all-zero block's range already
 * replaced by its first weight, which the scalar loop starts from): the scale into *scale, the
 * zero point into the row's packed zero points zrow (asymmetric), and *z and *rcp = 1/scale (0
 * for a zero scale) for the codes. Returns 1 when the scale is not finite: the caller then hands
 * the weight to the scalar variant, which reports it. */
static inline int quant_block_store(const quant_params *p, float lo, float hi, float *scale,
                                    uint8_t *zrow, int64_t blk, int *z, float *rcp) {
  float s;
  quant_block_scale(p, &lo, &hi, &s, z);
  if (!isfinite(s)) return 1;
  *scale = s;
  if (!p->symmetric) quant_put_zp(zrow, p->bits, blk, *z);
  *rcp = s != 0.0f ? 1.0f / s : 0.0f;
  return 0;
}

#endif /* PH_TENSOR_QUANT_IMPL_H */
