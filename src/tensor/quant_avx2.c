/* quant_avx2 — quant_quantize's AVX2 (+F16C) variant (quant_impl.h): quant_avx512.c's steps on 8
 * weights at a time, bit-identical to the scalar rule for the same reasons (read that file's
 * comment). AVX2 has no masked 16-bit loads: a block's short tail goes through a zeroed 8-lane
 * buffer. */
#include <string.h>

#include "tensor/quant_impl.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define Q256 __attribute__((target("avx2,fma,f16c")))

/* 8 weights from w (dtype dt) at element i; only the first m (1..8) are read, the rest are 0. */
static inline Q256 __m256 load8(const void *w, ph_dtype dt, int64_t i, int m) {
  const size_t es = dt == PH_DTYPE_F32 ? 4 : 2;
  const char *p = (const char *)w + (size_t)i * es;
  _Alignas(32) unsigned char tmp[32];
  if (m < 8) {
    memset(tmp, 0, sizeof tmp);
    memcpy(tmp, p, (size_t)m * es);
    p = (const char *)tmp;
  }
  if (dt == PH_DTYPE_F32) return _mm256_loadu_ps((const float *)(const void *)p);
  const __m128i h = _mm_loadu_si128((const __m128i *)(const void *)p);
  if (dt == PH_DTYPE_F16) return _mm256_cvtph_ps(h);
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* roundf of each lane (halves away from zero). */
static inline Q256 __m256 round_away8(__m256 q) {
  const __m256 t = _mm256_round_ps(q, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
  const __m256 f = _mm256_sub_ps(q, t); /* exact */
  const __m256 signbit = _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN));
  const __m256 absf = _mm256_andnot_ps(signbit, f);
  const __m256 up = _mm256_cmp_ps(absf, _mm256_set1_ps(0.5f), _CMP_GE_OQ);
  const __m256 one = _mm256_or_ps(_mm256_set1_ps(1.0f), _mm256_and_ps(q, signbit));
  return _mm256_add_ps(t, _mm256_and_ps(up, one)); /* t + 0 where not up: t unchanged */
}

static inline Q256 float hmin8(__m256 v) {
  __m128 m = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_min_ps(m, _mm_movehl_ps(m, m));
  m = _mm_min_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

static inline Q256 float hmax8(__m256 v) {
  __m128 m = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  m = _mm_max_ps(m, _mm_movehl_ps(m, m));
  m = _mm_max_ss(m, _mm_shuffle_ps(m, m, 1));
  return _mm_cvtss_f32(m);
}

Q256 int quant_rows_avx2(const quant_params *p, const void *w, ph_dtype w_dtype, int64_t n,
                         int64_t k, uint8_t *b, float *scales, uint8_t *zp) {
  const int bs = p->block, bits = p->bits;
  const int qmax = (1 << bits) - 1, mid = 1 << (bits - 1);
  const int64_t kb = (k + bs - 1) / bs;
  const int64_t row_codes = kb * bs;
  const int64_t zp_row = (kb * bits + 7) / 8;
  const __m256i exp_mask = _mm256_set1_epi32(0x7f800000);
  const __m256 vzero = _mm256_setzero_ps(), vqmax = _mm256_set1_ps((float)qmax);
  for (int64_t r = 0; r < n; r++) {
    uint8_t *brow = b + r * (row_codes * bits / 8);
    const int64_t base = r * k;
    if (!p->symmetric) memset(zp + r * zp_row, bits == 4 ? 0x88 : mid, (size_t)zp_row);
    for (int64_t blk = 0; blk < kb; blk++) {
      const int64_t k0 = blk * bs, k1 = k0 + bs < k ? k0 + bs : k;
      __m256 vlo = _mm256_set1_ps(INFINITY), vhi = _mm256_set1_ps(-INFINITY);
      int bad = 0;
      for (int64_t c = k0; c < k1; c += 8) {
        const __m256 v = load8(w, w_dtype, base + c, k1 - c >= 8 ? 8 : (int)(k1 - c));
        const __m256i e = _mm256_and_si256(_mm256_castps_si256(v), exp_mask);
        bad |= _mm256_movemask_epi8(_mm256_cmpeq_epi32(e, exp_mask));
        vlo = _mm256_min_ps(vlo, v);
        vhi = _mm256_max_ps(vhi, v);
      }
      if (bad) return 1;
      float lo = hmin8(vlo), hi = hmax8(vhi);
      if (lo == 0.0f && hi == 0.0f) {
        /* zeros only (padding included): the scalar loop keeps the first weight */
        lo = _mm256_cvtss_f32(load8(w, w_dtype, base + k0, 1));
        hi = lo;
      }
      int z;
      float rcp;
      if (quant_block_store(p, lo, hi, &scales[r * kb + blk], zp ? zp + r * zp_row : NULL, blk, &z,
                            &rcp))
        return 1;
      const __m256 vr = _mm256_set1_ps(rcp), vz = _mm256_set1_ps((float)z);
      for (int64_t c = k0; c < k0 + bs; c += 8) {
        const __m256 v =
            c >= k1 ? vzero : load8(w, w_dtype, base + c, k1 - c >= 8 ? 8 : (int)(k1 - c));
        __m256 q = _mm256_add_ps(_mm256_mul_ps(v, vr), vz);
        q = round_away8(q);
        q = _mm256_min_ps(_mm256_max_ps(q, vzero), vqmax); /* max(NaN, 0) = 0 */
        const __m256i q32 = _mm256_cvttps_epi32(q);
        const __m128i q16 =
            _mm_packus_epi32(_mm256_castsi256_si128(q32), _mm256_extracti128_si256(q32, 1));
        if (bits == 8) {
          _mm_storel_epi64((__m128i *)(void *)(brow + c), _mm_packus_epi16(q16, q16));
        } else {
          /* u32 lanes of two codes (odd << 16 | even) -> even | odd << 4 */
          const __m128i pair = _mm_or_si128(q16, _mm_srli_epi32(q16, 12));
          const __m128i lo16 = _mm_and_si128(pair, _mm_set1_epi32(0xff));
          const __m128i w16 = _mm_packus_epi32(lo16, lo16);
          const __m128i b8 = _mm_packus_epi16(w16, w16);
          int32_t four = _mm_cvtsi128_si32(b8);
          memcpy(brow + c / 2, &four, 4);
        }
      }
    }
  }
  return 0;
}

#else

int quant_rows_avx2(const quant_params *p, const void *w, ph_dtype w_dtype, int64_t n, int64_t k,
                    uint8_t *b, float *scales, uint8_t *zp) {
  (void)p, (void)w, (void)w_dtype, (void)n, (void)k, (void)b, (void)scales, (void)zp;
  return 1;
}

#endif
