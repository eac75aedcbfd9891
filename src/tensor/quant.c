/* quant — blockwise MatMulNBits quantization (quant.h has the layout and the rounding rule): the
 * scalar reference variant, the choice of variant (quant_impl.h), and the inverse. */
#include "tensor/quant.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "tensor/dtype.h"
#include "tensor/quant_impl.h"

static ph_status check_params(const quant_params *p, int64_t n, int64_t k, diag *d) {
  RETURN_ERROR_IF(!p, d, PH_ERR_INVALID_ARGUMENT, "quant: no parameters");
  RETURN_ERROR_IF(p->bits != 4 && p->bits != 8, d, PH_ERR_INVALID_ARGUMENT,
                  "quant: bits %d, expected 4 or 8", p->bits);
  RETURN_ERROR_IF(p->block < 16 || (p->block & (p->block - 1)) != 0 || p->block > (1 << 20), d,
                  PH_ERR_INVALID_ARGUMENT,
                  "quant: block size %d, expected a power of two >= 16 (32, 64 or 128)", p->block);
  RETURN_ERROR_IF(p->scale_dtype != PH_DTYPE_F32 && p->scale_dtype != PH_DTYPE_F16 &&
                      p->scale_dtype != PH_DTYPE_BF16,
                  d, PH_ERR_INVALID_ARGUMENT, "quant: scale dtype %d, expected f32, f16 or bf16",
                  (int)p->scale_dtype);
  RETURN_ERROR_IF(n < 1 || k < 1 || n > (INT64_C(1) << 40) / k, d, PH_ERR_INVALID_ARGUMENT,
                  "quant: weight shape [%lld, %lld], expected positive and at most 2^40 elements",
                  (long long)n, (long long)k);
  return PH_OK;
}

ph_status quant_sizes(const quant_params *p, int64_t n, int64_t k, size_t *b_bytes,
                      size_t *n_scales, size_t *zp_bytes, diag *d) {
  FORWARD_IF_ERROR(check_params(p, n, k, d));
  int64_t kb = (k + p->block - 1) / p->block;
  if (b_bytes) *b_bytes = (size_t)(n * kb * (p->block * p->bits / 8));
  if (n_scales) *n_scales = (size_t)(n * kb);
  if (zp_bytes) *zp_bytes = p->symmetric ? 0 : (size_t)(n * ((kb * p->bits + 7) / 8));
  return PH_OK;
}

/* Element i of w as f32 (w_dtype checked by the caller). */
static float load(const void *w, ph_dtype dt, int64_t i) {
  if (dt == PH_DTYPE_F32) {
    float f;
    memcpy(&f, (const char *)w + 4 * i, 4);
    return f;
  }
  uint16_t h;
  memcpy(&h, (const char *)w + 2 * i, 2);
  return dt == PH_DTYPE_BF16 ? bf16_to_f32(h) : f16_to_f32(h);
}

static void put_code(uint8_t *b, int bits, int64_t j, unsigned code) {
  if (bits == 8) {
    b[j] = (uint8_t)code;
  } else if ((j & 1) == 0) {
    b[j / 2] = (uint8_t)((b[j / 2] & 0xf0u) | code);
  } else {
    b[j / 2] = (uint8_t)((b[j / 2] & 0x0fu) | (code << 4));
  }
}

static unsigned get_code(const uint8_t *b, int bits, int64_t j) {
  if (bits == 8) return b[j];
  return (j & 1) ? (unsigned)(b[j / 2] >> 4) : (unsigned)(b[j / 2] & 0x0fu);
}

int quant_variant_available(quant_variant v) {
  if (v == QUANT_SCALAR) return 1;
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  const ph_cpu_features *f = cpu_features();
  const int avx2 = f->avx2 && f->fma && f->f16c;
  if (v == QUANT_AVX2) return avx2;
  return v == QUANT_AVX512 && avx2 && f->avx512f && f->avx512bw && f->avx512vl;
#else
  return 0;
#endif
}

/* The scalar variant: p checked, buffers non-NULL, w finite. */
static ph_status quant_rows_scalar(const quant_params *p, const void *w, ph_dtype w_dtype,
                                   int64_t n, int64_t k, uint8_t *b, float *scales, uint8_t *zp,
                                   const char *nm, diag *d) {
  const int bs = p->block, bits = p->bits;
  const int qmax = (1 << bits) - 1, mid = 1 << (bits - 1);
  const int64_t kb = (k + bs - 1) / bs;
  const int64_t row_codes = kb * bs; /* codes per row in B, padding included */
  const int64_t zp_row = (kb * bits + 7) / 8;
  for (int64_t r = 0; r < n; r++) {
    uint8_t *brow = b + r * (row_codes * bits / 8);
    if (!p->symmetric) memset(zp + r * zp_row, bits == 4 ? 0x88 : mid, (size_t)zp_row);
    for (int64_t blk = 0; blk < kb; blk++) {
      int64_t k0 = blk * bs, k1 = k0 + bs < k ? k0 + bs : k;
      float lo = load(w, w_dtype, r * k + k0), hi = lo;
      for (int64_t c = k0 + 1; c < k1; c++) {
        float v = load(w, w_dtype, r * k + c);
        if (v < lo) lo = v;
        if (v > hi) hi = v;
      }
      /* The zero padding of a short last block (K % block != 0) would take part in the range,
       * as in ORT, but cannot change it: see quant.h. */
      float s;
      int z;
      quant_block_scale(p, &lo, &hi, &s, &z);
      RETURN_ERROR_IF(!isfinite(s), d, PH_ERR_NON_FINITE,
                      "quant: %s row %lld block %lld: the scale of range [%g, %g] is not finite "
                      "in %s",
                      nm, (long long)r, (long long)blk, (double)lo, (double)hi,
                      dtype_safetensors_name(p->scale_dtype));
      scales[r * kb + blk] = s;
      if (!p->symmetric) quant_put_zp(zp + r * zp_row, bits, blk, z);
      float rcp = s != 0.0f ? 1.0f / s : 0.0f;
      for (int64_t c = k0; c < k0 + bs; c++) {
        float v = c < k1 ? load(w, w_dtype, r * k + c) : 0.0f;
        float q = v * rcp;
        q = roundf(q + (float)z);
        /* !(q >= 0) also catches a NaN (0 * inf, quant_impl.h): code 0 */
        q = !(q >= 0.0f) ? 0.0f : q > (float)qmax ? (float)qmax : q;
        put_code(brow, bits, c, (unsigned)q);
      }
    }
  }
  return PH_OK;
}

ph_status quant_quantize_with(quant_variant v, const quant_params *p, const void *w,
                              ph_dtype w_dtype, int64_t n, int64_t k, uint8_t *b, float *scales,
                              uint8_t *zp, const char *name, diag *d) {
  FORWARD_IF_ERROR(check_params(p, n, k, d));
  const char *nm = name ? name : "weight";
  RETURN_ERROR_IF(w_dtype != PH_DTYPE_F32 && w_dtype != PH_DTYPE_F16 && w_dtype != PH_DTYPE_BF16, d,
                  PH_ERR_TENSOR_DTYPE, "quant: %s has dtype %s, expected f32, f16 or bf16", nm,
                  dtype_safetensors_name(w_dtype) ? dtype_safetensors_name(w_dtype) : "invalid");
  RETURN_ERROR_IF(!w || !b || !scales || (!p->symmetric && !zp), d, PH_ERR_INVALID_ARGUMENT,
                  "quant: %s: a NULL buffer", nm);
  RETURN_ERROR_IF(!quant_variant_available(v), d, PH_ERR_INVALID_ARGUMENT,
                  "quant: variant %d is not available on this CPU", (int)v);
  /* the SIMD variants check finiteness as they go; on a non-finite weight or scale the scalar
   * one below reports it */
  if (v == QUANT_AVX512 && quant_rows_avx512(p, w, w_dtype, n, k, b, scales, zp) == 0) return PH_OK;
  if (v == QUANT_AVX2 && quant_rows_avx2(p, w, w_dtype, n, k, b, scales, zp) == 0) return PH_OK;
  int64_t first = 0;
  int64_t bad = dtype_count_nonfinite(w_dtype, w, n * k, &first);
  RETURN_ERROR_IF(bad > 0, d, PH_ERR_NON_FINITE,
                  "quant: %s [%lld, %lld]: %lld non-finite value%s, the first (%g) at [%lld, %lld]",
                  nm, (long long)n, (long long)k, (long long)bad, bad == 1 ? "" : "s",
                  (double)load(w, w_dtype, first), (long long)(first / k), (long long)(first % k));
  return quant_rows_scalar(p, w, w_dtype, n, k, b, scales, zp, nm, d);
}

ph_status quant_quantize(const quant_params *p, const void *w, ph_dtype w_dtype, int64_t n,
                         int64_t k, uint8_t *b, float *scales, uint8_t *zp, const char *name,
                         diag *d) {
  const quant_variant v = quant_variant_available(QUANT_AVX512) ? QUANT_AVX512
                          : quant_variant_available(QUANT_AVX2) ? QUANT_AVX2
                                                                : QUANT_SCALAR;
  return quant_quantize_with(v, p, w, w_dtype, n, k, b, scales, zp, name, d);
}

ph_status quant_dequantize(const quant_params *p, const uint8_t *b, const float *scales,
                           const uint8_t *zp, int64_t n, int64_t k, float *out, diag *d) {
  FORWARD_IF_ERROR(check_params(p, n, k, d));
  RETURN_ERROR_IF(!b || !scales || !out, d, PH_ERR_INVALID_ARGUMENT, "dequant: a NULL buffer");
  const int bs = p->block, bits = p->bits;
  const int64_t kb = (k + bs - 1) / bs;
  const int64_t row_codes = kb * bs, zp_row = (kb * bits + 7) / 8;
  for (int64_t r = 0; r < n; r++) {
    const uint8_t *brow = b + r * (row_codes * bits / 8);
    for (int64_t c = 0; c < k; c++) {
      int64_t blk = c / bs;
      int z = 1 << (bits - 1);
      if (zp) z = (int)get_code(zp + r * zp_row, bits, blk);
      out[r * k + c] = (float)((int)get_code(brow, bits, c) - z) * scales[r * kb + blk];
    }
  }
  return PH_OK;
}

ph_status quant_scales_to(ph_dtype dt, const float *scales, size_t n, void *dst, diag *d) {
  RETURN_ERROR_IF(dt != PH_DTYPE_F32 && dt != PH_DTYPE_F16 && dt != PH_DTYPE_BF16, d,
                  PH_ERR_INVALID_ARGUMENT, "quant: scale dtype %d, expected f32, f16 or bf16",
                  (int)dt);
  return dtype_convert(dst, dt, scales, PH_DTYPE_F32, n, d);
}

ph_status quant_rms_rel_error(const quant_params *p, const void *w, ph_dtype w_dtype, int64_t n,
                              int64_t k, const char *name, double *rel, diag *d) {
  size_t nb = 0, ns = 0, nz = 0;
  FORWARD_IF_ERROR(quant_sizes(p, n, k, &nb, &ns, &nz, d));
  ph_status st = PH_OK;
  uint8_t *b = malloc(nb);
  float *s = malloc(ns * sizeof(float));
  uint8_t *z = nz ? malloc(nz) : NULL;
  float *dq = malloc((size_t)(n * k) * sizeof(float));
  if (!b || !s || (nz && !z) || !dq) {
    st = diag_set(d, PH_ERR_NO_MEMORY, "quant: %s: scratch for [%lld, %lld]",
                  name ? name : "weight", (long long)n, (long long)k);
    goto done;
  }
  st = quant_quantize(p, w, w_dtype, n, k, b, s, z, name, d);
  if (st != PH_OK) goto done;
  st = quant_dequantize(p, b, s, z, n, k, dq, d);
  if (st != PH_OK) goto done;
  double num = 0, den = 0;
  for (int64_t i = 0; i < n * k; i++) {
    double v = load(w, w_dtype, i), e = v - (double)dq[i];
    num += e * e;
    den += v * v;
  }
  *rel = den > 0 ? sqrt(num / den) : 0.0;
done:
  free(b);
  free(s);
  free(z);
  free(dq);
  return st;
}
