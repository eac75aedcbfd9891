/* act_avx512 — the AVX-512 F/BW/VL row kernels of kernels/act.h: act_expf's operations on 16
 * lanes (roundscale = rint, scalef(p, n) = the exact p · 2^n rounded once = the reference's
 * (p · 2^n1) · 2^n2, whose first product is exact), so every lane has the reference's bits.
 * Tails run masked, on the same lanes. */
#include <stdint.h>

#include "kernels/act.h"
#include "kernels/act_impl.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define ACT512     __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define ACT_INLINE __attribute__((always_inline)) inline

static ACT_INLINE ACT512 __m512 act512_exp(__m512 x) {
  const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
  /* max/min return their second operand on NaN: a NaN lane computes garbage, replaced below */
  __m512 c =
      _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(ACT_EXP_LO)), _mm512_set1_ps(ACT_EXP_HI));
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(c, _mm512_set1_ps(ACT_LOG2E)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-ACT_LN2_HI), c);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-ACT_LN2_LO), r);
  __m512 p = _mm512_set1_ps(ACT_EXP_C7);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ACT_EXP_C6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ACT_EXP_C5));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ACT_EXP_C4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ACT_EXP_C3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ACT_EXP_C2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  const __m512 e = _mm512_scalef_ps(p, n);
  return _mm512_mask_add_ps(e, nan, x, x);
}

static ACT_INLINE ACT512 __m512 act512_sigmoid(__m512 x) {
  /* -|x|: the sign bit set, as the reference's -fabsf */
  const __m512 e = act512_exp(
      _mm512_castsi512_ps(_mm512_or_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN))));
  const __mmask16 ge = _mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_GE_OQ);
  const __m512 num = _mm512_mask_blend_ps(ge, e, _mm512_set1_ps(1.0f));
  return _mm512_div_ps(num, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

static ACT_INLINE ACT512 __m512 act512_silu(__m512 x) {
  /* -x: the sign bit flipped, as the reference's negation */
  const __m512 e = act512_exp(
      _mm512_castsi512_ps(_mm512_xor_si512(_mm512_castps_si512(x), _mm512_set1_epi32(INT32_MIN))));
  return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), e));
}

#define ACT512_ROW(name, f)                                                                        \
  static ACT512 void name(const float *x, float *y, int64_t n) {                                   \
    int64_t i = 0;                                                                                 \
    for (; i + 16 <= n; i += 16) _mm512_storeu_ps(y + i, f(_mm512_loadu_ps(x + i)));               \
    if (i < n) {                                                                                   \
      const __mmask16 m = (__mmask16)((1u << (n - i)) - 1u);                                       \
      _mm512_mask_storeu_ps(y + i, m, f(_mm512_maskz_loadu_ps(m, x + i)));                         \
    }                                                                                              \
  }

ACT512_ROW(act_exp_avx512, act512_exp)
ACT512_ROW(act_sigmoid_avx512, act512_sigmoid)
ACT512_ROW(act_silu_avx512, act512_silu)

const act_kernels act_avx512_kernels = {act_exp_avx512, act_sigmoid_avx512, act_silu_avx512};
#else
const act_kernels act_avx512_kernels = {NULL, NULL, NULL};
#endif
