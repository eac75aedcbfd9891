/* gated_delta_avx2 — GatedDeltaNet's decode step on the V-major state in AVX2
 * (kernels/gated_delta.h: gated_delta_decode_f32_avx2). Eight value rows at a time, transposed
 * in registers: pass 1 reads them from the state, decays them into an L1 tile [Dk][8] and
 * accumulates k·S; pass 2 updates the tile, accumulates S·q and writes the rows back
 * transposed. The lanes are the value rows, each sum runs over the key index in increasing
 * order, products are rounded before the adds of the two sums, and the state update is one fused
 * multiply-add on the decayed state (_mm256_fmadd_ps, fmaf in the reference: the replay rule of
 * spec/abi.md §2.5): the arithmetic of gated_delta_decode_cols_ref,
 * so the results are bit-identical to it (test_gdn_variants checks with memcmp). Every function
 * carries the target attribute; the rest of the library stays baseline x86-64.
 */
#include <stdint.h>

#include "kernels/gated_delta.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
/* Every loop over the eight lanes or rows is unrolled (GCC at -O2 keeps a loop over a local
 * array of vectors in memory). AVX2 and FMA. FMA only where the reference calls fmaf (the state
 * update); the sums k·S and S·q round each product before the add, as in the reference (mul then
 * add, never fused). */
#define GDN_AVX2 __attribute__((target("avx2,fma")))

/* In place: x[j][l] <- x[l][j] for an 8 x 8 block. */
GDN_AVX2 static inline void gdn_tr8(__m256 *x) {
  __m256 t0 = _mm256_unpacklo_ps(x[0], x[1]), t1 = _mm256_unpackhi_ps(x[0], x[1]);
  __m256 t2 = _mm256_unpacklo_ps(x[2], x[3]), t3 = _mm256_unpackhi_ps(x[2], x[3]);
  __m256 t4 = _mm256_unpacklo_ps(x[4], x[5]), t5 = _mm256_unpackhi_ps(x[4], x[5]);
  __m256 t6 = _mm256_unpacklo_ps(x[6], x[7]), t7 = _mm256_unpackhi_ps(x[6], x[7]);
  __m256 s0 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(1, 0, 1, 0));
  __m256 s1 = _mm256_shuffle_ps(t0, t2, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 s2 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(1, 0, 1, 0));
  __m256 s3 = _mm256_shuffle_ps(t1, t3, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 s4 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(1, 0, 1, 0));
  __m256 s5 = _mm256_shuffle_ps(t4, t6, _MM_SHUFFLE(3, 2, 3, 2));
  __m256 s6 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(1, 0, 1, 0));
  __m256 s7 = _mm256_shuffle_ps(t5, t7, _MM_SHUFFLE(3, 2, 3, 2));
  x[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
  x[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  x[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
  x[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  x[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
  x[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  x[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
  x[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* Pass 1 of eight value rows at key index r: x is their state at r (lane l = row c0 + l). */
GDN_AVX2 static inline __m256 gdn_dec_in(const gated_delta_dec *p, float *T, int64_t r, __m256 x,
                                         __m256 pred) {
  if (p->gated) x = _mm256_mul_ps(x, _mm256_set1_ps(p->a));
  _mm256_storeu_ps(T + r * 8, x);
  if (p->delta) pred = _mm256_add_ps(pred, _mm256_mul_ps(_mm256_set1_ps(p->k[r]), x));
  return pred;
}

/* gated_delta_decode_cols_ref for every value row, eight rows per step with lane l = row c0 + l
 * (the reference's lanes and order, bit for bit); the Dv % 8 last rows go through the reference. */
GDN_AVX2 void gated_delta_decode_f32_avx2(const gated_delta_dec *p) {
  const int64_t Dk = p->Dk, Dv = p->Dv;
  float *T = p->tile;
  int64_t c0 = 0;
  for (; c0 + 8 <= Dv; c0 += 8) {
    const float *src = p->src ? p->src + c0 * Dk : NULL;
    __m256 pred = _mm256_setzero_ps(), x[8];
    int64_t r = 0;
    for (; r + 8 <= Dk; r += 8) {
#pragma GCC unroll 8
      for (int l = 0; l < 8; l++)
        x[l] = src ? _mm256_loadu_ps(src + l * Dk + r) : _mm256_setzero_ps();
      gdn_tr8(x);
#pragma GCC unroll 8
      for (int j = 0; j < 8; j++) pred = gdn_dec_in(p, T, r + j, x[j], pred);
    }
    for (; r < Dk; r++) {
      __m256 xr =
          src ? _mm256_setr_ps(src[r], src[Dk + r], src[2 * Dk + r], src[3 * Dk + r],
                               src[4 * Dk + r], src[5 * Dk + r], src[6 * Dk + r], src[7 * Dk + r])
              : _mm256_setzero_ps();
      pred = gdn_dec_in(p, T, r, xr, pred);
    }
    __m256 u = _mm256_loadu_ps(p->v + c0);
    if (p->delta) u = _mm256_mul_ps(_mm256_set1_ps(p->beta), _mm256_sub_ps(u, pred));
    if (p->u) _mm256_storeu_ps(p->u + c0, u);
    __m256 o = _mm256_setzero_ps();
    float *dst = p->dst ? p->dst + c0 * Dk : NULL;
    for (r = 0; r + 8 <= Dk; r += 8) {
#pragma GCC unroll 8
      for (int j = 0; j < 8; j++) {
        x[j] = _mm256_fmadd_ps(_mm256_set1_ps(p->k[r + j]), u, _mm256_loadu_ps(T + (r + j) * 8));
        o = _mm256_add_ps(o, _mm256_mul_ps(_mm256_set1_ps(p->q[r + j]), x[j]));
      }
      if (dst) {
        gdn_tr8(x);
#pragma GCC unroll 8
        for (int l = 0; l < 8; l++) _mm256_storeu_ps(dst + l * Dk + r, x[l]);
      }
    }
    for (; r < Dk; r++) {
      __m256 y = _mm256_fmadd_ps(_mm256_set1_ps(p->k[r]), u, _mm256_loadu_ps(T + r * 8));
      o = _mm256_add_ps(o, _mm256_mul_ps(_mm256_set1_ps(p->q[r]), y));
      if (dst) {
        float t[8];
        _mm256_storeu_ps(t, y);
#pragma GCC unroll 8
        for (int l = 0; l < 8; l++) dst[l * Dk + r] = t[l];
      }
    }
    _mm256_storeu_ps(p->o + c0, _mm256_mul_ps(o, _mm256_set1_ps(p->scale)));
  }
  if (c0 < Dv) gated_delta_decode_cols_ref(p, c0, Dv - c0);
}
#endif
