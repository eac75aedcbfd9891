/* matmul_wt_avx2 — the AVX2+FMA+F16C MatMulWT kernels (kernels/matmul_wt.h), one row of A per
 * call. Partial l of a dot product is lane l of two ymm (lanes 0-7 and 8-15); the K % 16 tail
 * goes through zero-padded copies with a blend that leaves the lanes past it untouched; the tree
 * is the reference's. The same operations on the same lanes as matmul_wt_avx512.c, so the two
 * agree bit for bit; both differ from the scalar reference only by the fused multiply-add.
 */
#include <stdint.h>
#include <string.h>

#include "kernels/matmul_wt.h"
#include "tensor/dtype.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#if WT_X86
#include <immintrin.h>

/* 8 W elements at p (any alignment) as f32, exactly. */
static WT_INLINE WT_AVX2 __m256 wt256_ld(const unsigned char *p, int wdt) {
  if (wdt == PH_DTYPE_BF16) {
    __m256i u = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i_u *)p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(u, 16));
  }
  if (wdt == PH_DTYPE_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i_u *)p));
  return _mm256_loadu_ps((const float *)(const void *)p);
}

/* The reference tree over lanes lo (0-7) and hi (8-15). */
static WT_INLINE WT_AVX2 float wt256_tree(__m256 lo, __m256 hi) {
  __m256 s8 = _mm256_add_ps(lo, hi);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

static WT_INLINE WT_AVX2 void wt256_body(const float *a, int64_t K, const unsigned char *const *w,
                                         float *sums, int wdt) {
  const int64_t es = wdt == PH_DTYPE_F32 ? 4 : 2;
  __m256 lo[WT_NW], hi[WT_NW];
  WT_UNROLL
  for (int c = 0; c < WT_NW; c++) lo[c] = hi[c] = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    if (es == 4 ||
        !(k & 16)) { /* the next group's rows, one line per 64 bytes: see matmul_wt_avx512.c */
      WT_UNROLL
      for (int c = 0; c < WT_NW; c++)
        _mm_prefetch(wt_ahead(w[c], (k + WT_NW * K) * es), _MM_HINT_T0);
    }
    __m256 av = _mm256_loadu_ps(a + k);
    WT_UNROLL
    for (int c = 0; c < WT_NW; c++)
      lo[c] = _mm256_fmadd_ps(av, wt256_ld(w[c] + k * es, wdt), lo[c]);
    av = _mm256_loadu_ps(a + k + 8);
    WT_UNROLL
    for (int c = 0; c < WT_NW; c++)
      hi[c] = _mm256_fmadd_ps(av, wt256_ld(w[c] + (k + 8) * es, wdt), hi[c]);
  }
  if (k < K) {
    /* the tail through zero-padded copies (no masked 16-bit loads in AVX2); the blend keeps the
     * lanes past the tail untouched, as the AVX-512 masked FMA does (-0 stays -0) */
    int n = (int)(K - k);
    float at[16] = {0}, wt[WT_NW][16] = {{0}};
    int32_t keep[16];
    for (int l = 0; l < 16; l++) keep[l] = l < n ? -1 : 0;
    for (int l = 0; l < n; l++) at[l] = a[k + l];
    for (int c = 0; c < WT_NW; c++)
      for (int l = 0; l < n; l++)
        wt[c][l] = wdt == PH_DTYPE_BF16  ? wt_ld_bf16(w[c], k + l)
                   : wdt == PH_DTYPE_F16 ? wt_ld_f16(w[c], k + l)
                                         : wt_ld_f32(w[c], k + l);
    __m256 mlo = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i_u *)keep));
    __m256 mhi = _mm256_castsi256_ps(_mm256_loadu_si256((const __m256i_u *)(keep + 8)));
    __m256 alo = _mm256_loadu_ps(at), ahi = _mm256_loadu_ps(at + 8);
    for (int c = 0; c < WT_NW; c++) {
      __m256 flo = _mm256_fmadd_ps(alo, _mm256_loadu_ps(wt[c]), lo[c]);
      __m256 fhi = _mm256_fmadd_ps(ahi, _mm256_loadu_ps(wt[c] + 8), hi[c]);
      lo[c] = _mm256_blendv_ps(lo[c], flo, mlo);
      hi[c] = _mm256_blendv_ps(hi[c], fhi, mhi);
    }
  }
  WT_UNROLL
  for (int c = 0; c < WT_NW; c++) sums[c] = wt256_tree(lo[c], hi[c]);
}

#define WT256_KERNEL(NAME, DT)                                                                     \
  static WT_AVX2 void NAME(const float *a, int64_t K, const unsigned char *const *w,               \
                           float *sums) {                                                          \
    wt256_body(a, K, w, sums, DT);                                                                 \
  }
WT256_KERNEL(wt_f32_avx2_r1, PH_DTYPE_F32)
WT256_KERNEL(wt_bf16_avx2_r1, PH_DTYPE_BF16)
WT256_KERNEL(wt_f16_avx2_r1, PH_DTYPE_F16)

const matmul_wt_kernels matmul_wt_avx2_kernels = {
    {{NULL, wt_f32_avx2_r1}, {NULL, wt_bf16_avx2_r1}, {NULL, wt_f16_avx2_r1}},
    {NULL}, /* bf16 mode: the scalar reference's kernels (same bits; no AVX2 bf16 dot yet) */
    {NULL},
    NULL};
#else
const matmul_wt_kernels matmul_wt_avx2_kernels = {{{NULL}}};
#endif /* WT_X86 */
