/* quant_avx512 — quant_quantize's AVX-512 F/BW/VL variant (quant_impl.h): 16 weights a step.
 *
 * Per block: one pass for the min and max (the last, short block read masked, its padding as
 * zeros, which never changes the scale: quant.h) and a check that every weight is finite; the
 * scale and zero point from quant_block_scale, as the scalar variant computes them; then one pass
 * for the codes: q = v * r, q = q + zp (no FMA: FP_CONTRACT off below), roundf as trunc(q) plus
 * sign(q) where |q - trunc(q)| >= 0.5 (q - trunc(q) is exact), the clamp by max(q, 0) (which
 * also sends a NaN to 0) and min(q, 2^bits - 1), packed to bytes or nibbles (low nibble the even
 * k). A block of zeros only: its min and max are taken as its first weight, as the scalar loop
 * leaves them (a -0.0 there gives the scale -0.0's sign, byte for byte). */
#include <string.h>

#include "tensor/quant_impl.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define Q512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

/* 16 weights from w (dtype dt) at element i, lanes outside mask zero. */
static inline Q512 __m512 load16(const void *w, ph_dtype dt, int64_t i, __mmask16 m) {
  if (dt == PH_DTYPE_F32) return _mm512_maskz_loadu_ps(m, (const float *)w + i);
  __m256i h = _mm256_maskz_loadu_epi16(m, (const uint16_t *)w + i);
  if (dt == PH_DTYPE_F16) return _mm512_cvtph_ps(h);
  return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}

/* roundf of each lane (halves away from zero). */
static inline Q512 __m512 round_away(__m512 q) {
  const __m512 t = _mm512_roundscale_ps(q, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_sub_ps(q, t); /* exact, same sign as q (or zero) */
  const __m512 absf = _mm512_abs_ps(f);
  const __mmask16 up = _mm512_cmp_ps_mask(absf, _mm512_set1_ps(0.5f), _CMP_GE_OQ);
  /* sign(q) * 1 (integer ops: AVX-512 F has no float and/or) */
  const __m512i sign = _mm512_and_si512(_mm512_castps_si512(q), _mm512_set1_epi32(INT32_MIN));
  const __m512 one =
      _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(_mm512_set1_ps(1.0f)), sign));
  return _mm512_mask_add_ps(t, up, t, one);
}

Q512 int quant_rows_avx512(const quant_params *p, const void *w, ph_dtype w_dtype, int64_t n,
                           int64_t k, uint8_t *b, float *scales, uint8_t *zp) {
  const int bs = p->block, bits = p->bits;
  const int qmax = (1 << bits) - 1, mid = 1 << (bits - 1);
  const int64_t kb = (k + bs - 1) / bs;
  const int64_t row_codes = kb * bs;
  const int64_t zp_row = (kb * bits + 7) / 8;
  const __m512i exp_mask = _mm512_set1_epi32(0x7f800000);
  const __m512 vzero = _mm512_setzero_ps(), vqmax = _mm512_set1_ps((float)qmax);
  for (int64_t r = 0; r < n; r++) {
    uint8_t *brow = b + r * (row_codes * bits / 8);
    const int64_t base = r * k;
    if (!p->symmetric) memset(zp + r * zp_row, bits == 4 ? 0x88 : mid, (size_t)zp_row);
    for (int64_t blk = 0; blk < kb; blk++) {
      const int64_t k0 = blk * bs, k1 = k0 + bs < k ? k0 + bs : k;
      __m512 vlo = _mm512_set1_ps(INFINITY), vhi = _mm512_set1_ps(-INFINITY);
      __mmask16 bad = 0;
      for (int64_t c = k0; c < k1; c += 16) {
        const __mmask16 m = k1 - c >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (k1 - c)) - 1);
        const __m512 v = load16(w, w_dtype, base + c, m);
        /* a weight with every exponent bit set is an inf or a NaN */
        bad |=
            _mm512_cmpeq_epi32_mask(_mm512_and_si512(_mm512_castps_si512(v), exp_mask), exp_mask);
        vlo = _mm512_min_ps(vlo, v);
        vhi = _mm512_max_ps(vhi, v);
      }
      if (bad) return 1;
      float lo = _mm512_reduce_min_ps(vlo), hi = _mm512_reduce_max_ps(vhi);
      if (lo == 0.0f && hi == 0.0f) {
        /* zeros only (padding included): the scalar loop keeps the first weight */
        lo = _mm512_cvtss_f32(load16(w, w_dtype, base + k0, 1));
        hi = lo;
      }
      int z;
      float rcp;
      if (quant_block_store(p, lo, hi, &scales[r * kb + blk], zp ? zp + r * zp_row : NULL, blk, &z,
                            &rcp))
        return 1;
      const __m512 vr = _mm512_set1_ps(rcp), vz = _mm512_set1_ps((float)z);
      for (int64_t c = k0; c < k0 + bs; c += 16) {
        const __mmask16 m = c >= k1        ? (__mmask16)0
                            : k1 - c >= 16 ? (__mmask16)0xffff
                                           : (__mmask16)((1u << (k1 - c)) - 1);
        const __m512 v = load16(w, w_dtype, base + c, m);
        __m512 q = _mm512_add_ps(_mm512_mul_ps(v, vr), vz);
        q = round_away(q);
        q = _mm512_min_ps(_mm512_max_ps(q, vzero), vqmax); /* max(NaN, 0) = 0 */
        const __m128i c8 = _mm512_cvtepi32_epi8(_mm512_cvttps_epi32(q));
        if (bits == 8) {
          _mm_storeu_si128((__m128i *)(void *)(brow + c), c8);
        } else {
          /* u16 lanes (odd << 8 | even) -> low byte even | odd << 4 */
          const __m128i pair =
              _mm_and_si128(_mm_or_si128(c8, _mm_srli_epi16(c8, 4)), _mm_set1_epi16(0x00ff));
          _mm_storel_epi64((__m128i *)(void *)(brow + c / 2), _mm_packus_epi16(pair, pair));
        }
      }
    }
  }
  return 0;
}

#else

int quant_rows_avx512(const quant_params *p, const void *w, ph_dtype w_dtype, int64_t n, int64_t k,
                      uint8_t *b, float *scales, uint8_t *zp) {
  (void)p, (void)w, (void)w_dtype, (void)n, (void)k, (void)b, (void)scales, (void)zp;
  return 1;
}

#endif
