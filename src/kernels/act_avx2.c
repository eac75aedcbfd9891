/* act_avx2 — the AVX2+FMA row kernels of kernels/act.h: act_expf's operations on 8 lanes
 * (round = rint; 2^n1 and 2^n2 built from the exponent bits as the reference builds them), so
 * every lane has the reference's bits. Tails go through an 8-float buffer, on the same lanes. */
#include <stdint.h>
#include <string.h>

#include "kernels/act.h"
#include "kernels/act_impl.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define ACT256     __attribute__((target("avx2,fma,f16c")))
#define ACT_INLINE __attribute__((always_inline)) inline

static ACT_INLINE ACT256 __m256 act256_exp(__m256 x) {
  const __m256 nan = _mm256_cmp_ps(x, x, _CMP_UNORD_Q);
  __m256 c =
      _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(ACT_EXP_LO)), _mm256_set1_ps(ACT_EXP_HI));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(c, _mm256_set1_ps(ACT_LOG2E)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-ACT_LN2_HI), c);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(-ACT_LN2_LO), r);
  __m256 p = _mm256_set1_ps(ACT_EXP_C7);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ACT_EXP_C6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ACT_EXP_C5));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ACT_EXP_C4));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ACT_EXP_C3));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(ACT_EXP_C2));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  /* k1 = trunc(k / 2) = (k + (k < 0)) >> 1, k2 = k - k1 */
  const __m256i k = _mm256_cvtps_epi32(n);
  const __m256i k1 = _mm256_srai_epi32(_mm256_add_epi32(k, _mm256_srli_epi32(k, 31)), 1);
  const __m256i k2 = _mm256_sub_epi32(k, k1);
  const __m256i bias = _mm256_set1_epi32(127);
  const __m256 t1 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k1, bias), 23));
  const __m256 t2 = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(k2, bias), 23));
  const __m256 e = _mm256_mul_ps(_mm256_mul_ps(p, t1), t2);
  return _mm256_blendv_ps(e, _mm256_add_ps(x, x), nan);
}

static ACT_INLINE ACT256 __m256 act256_sigmoid(__m256 x) {
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN));
  const __m256 e = act256_exp(_mm256_or_ps(x, sign)); /* -|x|, as the reference's -fabsf */
  const __m256 ge = _mm256_cmp_ps(x, _mm256_setzero_ps(), _CMP_GE_OQ);
  const __m256 num = _mm256_blendv_ps(e, _mm256_set1_ps(1.0f), ge);
  return _mm256_div_ps(num, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

static ACT_INLINE ACT256 __m256 act256_silu(__m256 x) {
  const __m256 sign = _mm256_castsi256_ps(_mm256_set1_epi32(INT32_MIN));
  const __m256 e = act256_exp(_mm256_xor_ps(x, sign)); /* -x, as the reference's negation */
  return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

#define ACT256_ROW(name, f)                                                                        \
  static ACT256 void name(const float *x, float *y, int64_t n) {                                   \
    int64_t i = 0;                                                                                 \
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, f(_mm256_loadu_ps(x + i)));                 \
    if (i < n) {                                                                                   \
      float buf[8] = {0};                                                                          \
      memcpy(buf, x + i, (size_t)(n - i) * sizeof(float));                                         \
      _mm256_storeu_ps(buf, f(_mm256_loadu_ps(buf)));                                              \
      memcpy(y + i, buf, (size_t)(n - i) * sizeof(float));                                         \
    }                                                                                              \
  }

ACT256_ROW(act_exp_avx2, act256_exp)
ACT256_ROW(act_sigmoid_avx2, act256_sigmoid)
ACT256_ROW(act_silu_avx2, act256_silu)

const act_kernels act_avx2_kernels = {act_exp_avx2, act_sigmoid_avx2, act_silu_avx2};
#else
const act_kernels act_avx2_kernels = {NULL, NULL, NULL};
#endif
