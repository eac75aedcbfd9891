/* state_replay_avx2 — the commit's replay of captured GatedDeltaNet updates in AVX2+FMA
 * (kernels/state_replay.h: state_replay_recurrent_avx2). Eight key columns of one value row at a
 * time: each state element is loaded once, takes the a updates in slot order as
 * s = fma(key, delta, s * decay) (_mm256_mul_ps then _mm256_fmadd_ps: the reference's rounding,
 * fmaf after the rounded product), and is stored once. Bit-identical to the reference
 * (test_gdn_capture replays under every variant against the op's own state). Every function
 * carries the target attribute; the rest of the library stays baseline x86-64.
 */
#include <stdint.h>

#include "kernels/state_replay.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>

#define REPLAY_AVX2 __attribute__((target("avx2,fma")))

REPLAY_AVX2 void state_replay_recurrent_avx2(const float *src, float *dst, const float *capsule,
                                             int64_t C, int64_t Hv, int64_t Hk, int64_t Dk,
                                             int64_t Dv, int64_t a) {
  const float *decay = capsule, *key = capsule + C * Hv, *delta = key + C * Hk * Dk;
  const int64_t ratio = Hv / Hk;
  for (int64_t hv = 0; hv < Hv; hv++) {
    const float *S0 = src + hv * Dv * Dk, *kh = key + (hv / ratio) * Dk;
    float *S = dst + hv * Dv * Dk;
    for (int64_t c = 0; c < Dv; c++) {
      int64_t r = 0;
      for (; r + 8 <= Dk; r += 8) {
        __m256 s = _mm256_loadu_ps(S0 + c * Dk + r);
        for (int64_t t = 0; t < a; t++) {
          const __m256 al = _mm256_set1_ps(decay[t * Hv + hv]);
          const __m256 u = _mm256_set1_ps(delta[(t * Hv + hv) * Dv + c]);
          s = _mm256_fmadd_ps(_mm256_loadu_ps(kh + t * Hk * Dk + r), u, _mm256_mul_ps(s, al));
        }
        _mm256_storeu_ps(S + c * Dk + r, s);
      }
      for (; r < Dk; r++) {
        __m128 s = _mm_set_ss(S0[c * Dk + r]);
        for (int64_t t = 0; t < a; t++)
          s = _mm_fmadd_ss(_mm_set_ss(kh[t * Hk * Dk + r]),
                           _mm_set_ss(delta[(t * Hv + hv) * Dv + c]),
                           _mm_mul_ss(s, _mm_set_ss(decay[t * Hv + hv])));
        S[c * Dk + r] = _mm_cvtss_f32(s);
      }
    }
  }
}
#endif
