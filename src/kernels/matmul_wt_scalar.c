/* matmul_wt_scalar — the portable MatMulWT kernels (kernels/matmul_wt.h): the reference every
 * SIMD variant is tested against, and the fallback on every CPU. Each product is rounded before
 * it is added (no contraction: gcc in ISO C mode does not contract, clang is told not to below),
 * and the kernels for every row count are generated from one body, so the per-element
 * arithmetic is the same text for every R.
 */
#include <stdint.h>
#include <string.h>

#include "kernels/matmul_wt.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* The fixed combine of one dot product's partial sums. */
static inline float wt_tree(const float *acc) {
  float s[WT_LANES];
  for (int l = 0; l < WT_LANES; l++) s[l] = acc[l];
  for (int w = WT_LANES / 2; w >= 1; w /= 2)
    for (int l = 0; l < w; l++) s[l] += s[l + w];
  return s[0];
}

/* sums[r * WT_NW + c] = dot(A row r, W row c) for R rows of A (f32, contiguous, K apart) and
 * WT_NW rows of W. One body for every R and every W dtype: the summation order above. */
#define WT_KERNEL(NAME, LOAD, R)                                                                   \
  static void NAME(const float *a, int64_t K, const unsigned char *const *w, float *sums) {        \
    const unsigned char *w0 = w[0], *w1 = w[1], *w2 = w[2], *w3 = w[3];                            \
    float acc[R][WT_NW][WT_LANES];                                                                 \
    memset(acc, 0, sizeof acc);                                                                    \
    int64_t k = 0;                                                                                 \
    for (; k + WT_LANES <= K; k += WT_LANES)                                                       \
      for (int r = 0; r < (R); r++) {                                                              \
        const float *ar = a + r * K + k;                                                           \
        for (int l = 0; l < WT_LANES; l++) {                                                       \
          float av = ar[l];                                                                        \
          acc[r][0][l] += av * LOAD(w0, k + l);                                                    \
          acc[r][1][l] += av * LOAD(w1, k + l);                                                    \
          acc[r][2][l] += av * LOAD(w2, k + l);                                                    \
          acc[r][3][l] += av * LOAD(w3, k + l);                                                    \
        }                                                                                          \
      }                                                                                            \
    for (int r = 0; r < (R); r++) {                                                                \
      for (int64_t l = 0; k + l < K; l++) {                                                        \
        float av = a[r * K + k + l];                                                               \
        acc[r][0][l] += av * LOAD(w0, k + l);                                                      \
        acc[r][1][l] += av * LOAD(w1, k + l);                                                      \
        acc[r][2][l] += av * LOAD(w2, k + l);                                                      \
        acc[r][3][l] += av * LOAD(w3, k + l);                                                      \
      }                                                                                            \
      for (int c = 0; c < WT_NW; c++) sums[r * WT_NW + c] = wt_tree(acc[r][c]);                    \
    }                                                                                              \
  }

WT_KERNEL(wt_f32_r1, wt_ld_f32, 1)
WT_KERNEL(wt_f32_r4, wt_ld_f32, 4)
WT_KERNEL(wt_bf16_r1, wt_ld_bf16, 1)
WT_KERNEL(wt_bf16_r4, wt_ld_bf16, 4)
WT_KERNEL(wt_f16_r1, wt_ld_f16, 1)
WT_KERNEL(wt_f16_r4, wt_ld_f16, 4)

/* ---- bf16 mode: the reference bf16 dot (matmul_wt.h), the operations of vdpbf16ps in C ---------
 */

static inline float wtb_ld(const unsigned char *p, int64_t k, int64_t K) {
  return k < K ? wt_ftz(wt_ld_bf16(p, k)) : 0.0f;
}

/* One pair step of one partial: odd product first, then even; each product exact (in double: a
 * product of two bf16 has 16 significant bits, whatever its exponent), each sum rounded once to
 * f32 (a float and an exact product summed in double, then rounded to f32, is the correctly
 * rounded f32 sum: 53 >= 2 * 24 + 2) and flushed when subnormal. */
static inline float wtb_pair(float acc, float ae, float ao, float we, float wo) {
  acc = wt_ftz((float)((double)acc + (double)ao * (double)wo));
  return wt_ftz((float)((double)acc + (double)ae * (double)we));
}

#define WTB_KERNEL(NAME, R)                                                                        \
  static void NAME(const uint16_t *a, int64_t K, const unsigned char *const *w, float *sums) {     \
    float acc[R][WT_NW][WT_LANES];                                                                 \
    memset(acc, 0, sizeof acc);                                                                    \
    for (int64_t k0 = 0; k0 < K; k0 += 2 * WT_LANES)                                               \
      for (int r = 0; r < (R); r++) {                                                              \
        const unsigned char *ar = (const unsigned char *)(a + r * K);                              \
        for (int l = 0; l < WT_LANES; l++) {                                                       \
          int64_t ke = k0 + 2 * l;                                                                 \
          float ae = wtb_ld(ar, ke, K), ao = wtb_ld(ar, ke + 1, K);                                \
          for (int c = 0; c < WT_NW; c++)                                                          \
            acc[r][c][l] =                                                                         \
                wtb_pair(acc[r][c][l], ae, ao, wtb_ld(w[c], ke, K), wtb_ld(w[c], ke + 1, K));      \
        }                                                                                          \
      }                                                                                            \
    for (int r = 0; r < (R); r++)                                                                  \
      for (int c = 0; c < WT_NW; c++) sums[r * WT_NW + c] = wt_tree(acc[r][c]);                    \
  }

WTB_KERNEL(wtb_r1, 1)
WTB_KERNEL(wtb_r4, 4)

const matmul_wt_kernels matmul_wt_scalar_kernels = {{{NULL, wt_f32_r1, NULL, NULL, wt_f32_r4},
                                                     {NULL, wt_bf16_r1, NULL, NULL, wt_bf16_r4},
                                                     {NULL, wt_f16_r1, NULL, NULL, wt_f16_r4}},
                                                    {NULL, wtb_r1, NULL, NULL, wtb_r4},
                                                    {NULL},
                                                    NULL};
