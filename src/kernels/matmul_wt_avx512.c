/* matmul_wt_avx512 — the AVX-512 F/BW/VL MatMulWT kernels (kernels/matmul_wt.h), R = 1..6 rows
 * of A per call. Same summation order as the scalar kernels, lane for lane: partial l of a dot
 * product is zmm lane l, the K % 16 tail goes to lanes 0 .. K % 16 - 1 with the other lanes left
 * untouched (masked), and the tree adds the upper half onto the lower half four times, which is
 * the reference's l + 8, + 4, + 2, + 1. The one difference is the fused multiply-add: each step
 * rounds a * w + acc once instead of twice. matmul_wt_avx2.c performs the same operations on the
 * same lanes, so the two agree bit for bit. Every function that uses intrinsics carries the
 * target attribute; the rest of the library stays baseline x86-64, and other architectures get
 * an empty table (kernels/dispatch.c never picks it there).
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

/* 16 W elements at p (any alignment) as f32. bf16 and f16 conversions are exact. */
static WT_INLINE WT_AVX512 __m512 wt512_ld(const unsigned char *p, int wdt) {
  if (wdt == PH_DTYPE_BF16) {
    __m512i u = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i_u *)p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
  }
  if (wdt == PH_DTYPE_F16) return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i_u *)p));
  return _mm512_loadu_ps(p);
}

/* The W elements at p that m selects (the first K % 16), zeros elsewhere; reads nothing else. */
static WT_INLINE WT_AVX512 __m512 wt512_ld_part(const unsigned char *p, int wdt, __mmask16 m) {
  if (wdt == PH_DTYPE_BF16) {
    __m512i u = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p));
    return _mm512_castsi512_ps(_mm512_slli_epi32(u, 16));
  }
  if (wdt == PH_DTYPE_F16) return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
  return _mm512_maskz_loadu_ps(m, p);
}

/* The reference tree over 16 lanes: (l, l + 8), then (l, l + 4), (l, l + 2), (l, l + 1). */
static WT_INLINE WT_AVX512 float wt512_tree(__m512 v) {
  __m256 lo = _mm512_castps512_ps256(v);
  __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1));
  __m256 s8 = _mm256_add_ps(lo, hi);
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

/* The reference tree of four accumulators at once (WT_NW = 4), lane for lane the additions of
 * wt512_tree (l + 8, + 4, + 2, + 1; a + b = b + a exactly), with the lanes of the four moved
 * side by side so that each level is one vector add: s[c] = tree(v[c]) for c < 4. */
static WT_INLINE WT_AVX512 void wt512_tree4(__m512 v0, __m512 v1, __m512 v2, __m512 v3, float *s) {
  /* level 8: [lo(v0) + hi(v0) | lo(v1) + hi(v1)], the same for v2, v3 */
  __m512 s01 =
      _mm512_add_ps(_mm512_shuffle_f32x4(v0, v1, 0x44), _mm512_shuffle_f32x4(v0, v1, 0xee));
  __m512 s23 =
      _mm512_add_ps(_mm512_shuffle_f32x4(v2, v3, 0x44), _mm512_shuffle_f32x4(v2, v3, 0xee));
  /* level 4: 128-bit block c holds v_c's four partials */
  __m512 s4 = _mm512_add_ps(_mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(2, 0, 2, 0)),
                            _mm512_shuffle_f32x4(s01, s23, _MM_SHUFFLE(3, 1, 3, 1)));
  /* levels 2 and 1 inside each block */
  __m512 s2 = _mm512_add_ps(s4, _mm512_permute_ps(s4, _MM_SHUFFLE(1, 0, 3, 2)));
  __m512 s1 = _mm512_add_ps(s2, _mm512_permute_ps(s2, _MM_SHUFFLE(2, 3, 0, 1)));
  _mm_storeu_ps(s, _mm512_castps512_ps128(_mm512_maskz_compress_ps(0x1111, s1)));
}

/* sums[r * WT_NW + c] = dot(A row r, W row c) for R rows of A (f32, K apart) and WT_NW W rows.
 * R and wdt are constants in every caller, so the loops unroll and acc stays in registers. */
static WT_INLINE WT_AVX512 void wt512_body(const float *a, int64_t K, const unsigned char *const *w,
                                           float *sums, int R, int wdt) {
  const int64_t es = wdt == PH_DTYPE_F32 ? 4 : 2;
  __m512 acc[WT_RMAX][WT_NW];
  WT_UNROLL
  for (int r = 0; r < R; r++) {
    WT_UNROLL
    for (int c = 0; c < WT_NW; c++) acc[r][c] = _mm512_setzero_ps();
  }
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) {
    __m512 wv[WT_NW];
    WT_UNROLL
    for (int c = 0; c < WT_NW; c++) wv[c] = wt512_ld(w[c] + k * es, wdt);
    /* W rows are consecutive in memory and a task walks them in groups of WT_NW: fetch the
     * same place in the next group, one line per stream per 64 bytes. A row of 2-4 KB is too
     * short a stream for the hardware prefetcher to ramp up on (measured: decode +20-25 %
     * bandwidth). */
    if (es == 4 || !(k & 16)) {
      WT_UNROLL
      for (int c = 0; c < WT_NW; c++)
        _mm_prefetch(wt_ahead(w[c], (k + WT_NW * K) * es), _MM_HINT_T0);
    }
    WT_UNROLL
    for (int r = 0; r < R; r++) {
      __m512 av = _mm512_loadu_ps(a + r * K + k);
      WT_UNROLL
      for (int c = 0; c < WT_NW; c++) acc[r][c] = _mm512_fmadd_ps(av, wv[c], acc[r][c]);
    }
  }
  if (k < K) {
    __mmask16 m = (__mmask16)((1u << (unsigned)(K - k)) - 1u);
    __m512 wv[WT_NW];
    WT_UNROLL
    for (int c = 0; c < WT_NW; c++) wv[c] = wt512_ld_part(w[c] + k * es, wdt, m);
    WT_UNROLL
    for (int r = 0; r < R; r++) {
      __m512 av = _mm512_maskz_loadu_ps(m, a + r * K + k);
      WT_UNROLL
      for (int c = 0; c < WT_NW; c++) acc[r][c] = _mm512_mask3_fmadd_ps(av, wv[c], acc[r][c], m);
    }
  }
  WT_UNROLL
  for (int r = 0; r < R; r++) {
    WT_UNROLL
    for (int c = 0; c < WT_NW; c++) sums[r * WT_NW + c] = wt512_tree(acc[r][c]);
  }
}

#define WT512_KERNEL(NAME, DT, R)                                                                  \
  static WT_AVX512 void NAME(const float *a, int64_t K, const unsigned char *const *w,             \
                             float *sums) {                                                        \
    wt512_body(a, K, w, sums, R, DT);                                                              \
  }
#define WT512_KERNELS(DTN, DT)                                                                     \
  WT512_KERNEL(wt_##DTN##_avx512_r1, DT, 1)                                                        \
  WT512_KERNEL(wt_##DTN##_avx512_r2, DT, 2)                                                        \
  WT512_KERNEL(wt_##DTN##_avx512_r3, DT, 3)                                                        \
  WT512_KERNEL(wt_##DTN##_avx512_r4, DT, 4)                                                        \
  WT512_KERNEL(wt_##DTN##_avx512_r5, DT, 5)                                                        \
  WT512_KERNEL(wt_##DTN##_avx512_r6, DT, 6)

WT512_KERNELS(f32, PH_DTYPE_F32)
WT512_KERNELS(bf16, PH_DTYPE_BF16)
WT512_KERNELS(f16, PH_DTYPE_F16)

/* ---- bf16 mode (matmul_wt.h "the bf16 dot") ------------------------------------------------ */

/* x with every lane whose exponent field is zero replaced by its signed zero (DAZ/FTZ). */
static WT_INLINE WT_AVX512 __m512 wtb512_ftz(__m512 x) {
  __m512i u = _mm512_castps_si512(x);
  __mmask16 normal = _mm512_test_epi32_mask(u, _mm512_set1_epi32(0x7f800000));
  return _mm512_castsi512_ps(
      _mm512_mask_mov_epi32(_mm512_and_si512(u, _mm512_set1_epi32((int)0x80000000u)), normal, u));
}

/* vdpbf16ps in AVX-512F: lane j = acc + a[2j+1] * w[2j+1], then + a[2j] * w[2j], each a fused
 * multiply-add (the exact product plus acc, rounded once, as the instruction does), inputs and
 * sums flushed like the instruction's (the default MXCSR keeps subnormals, so the explicit
 * flushes are the whole of it). */
static WT_INLINE WT_AVX512 __m512 wtb512_dot_emul(__m512 acc, __m512i a, __m512i w) {
  const __m512i hi = _mm512_set1_epi32((int)0xffff0000u);
  __m512 ao = wtb512_ftz(_mm512_castsi512_ps(_mm512_and_si512(a, hi)));
  __m512 wo = wtb512_ftz(_mm512_castsi512_ps(_mm512_and_si512(w, hi)));
  __m512 ae = wtb512_ftz(_mm512_castsi512_ps(_mm512_slli_epi32(a, 16)));
  __m512 we = wtb512_ftz(_mm512_castsi512_ps(_mm512_slli_epi32(w, 16)));
  acc = wtb512_ftz(_mm512_fmadd_ps(ao, wo, acc));
  return wtb512_ftz(_mm512_fmadd_ps(ae, we, acc));
}

static WT_INLINE WT_AVX512BF16 __m512 wtb512_dot_native(__m512 acc, __m512i a, __m512i w) {
  return _mm512_dpbf16_ps(acc, (__m512bh)a, (__m512bh)w);
}

/* The bf16-mode body: R rows of bf16 A against WT_NW bf16 W rows, 32 elements (16 pairs, one
 * per lane) per step, over elements [k0, k1) (the whole row: k0 = 0, k1 = K). The partial sums
 * start at zero when k0 = 0, else from accb ([r][c][lane], as a previous call left them); the
 * K % 32 tail (k1 = K only) is loaded masked (zeros past K, nothing read there) and goes through
 * the same dot, so the padded pairs add +0 products as the reference's do. k1 = K ends with the
 * tree into sums, k1 < K stores the partials to accb: a K-blocked call sequence performs each
 * lane's operations in the same order as one call over the whole row (stores are exact). */
#define WTB512_BODY(DOT)                                                                           \
  const int64_t es = 2;                                                                            \
  __m512 acc[WT_RMAX][WT_NW];                                                                      \
  WT_UNROLL                                                                                        \
  for (int r = 0; r < R; r++) {                                                                    \
    WT_UNROLL                                                                                      \
    for (int c = 0; c < WT_NW; c++)                                                                \
      acc[r][c] = k0 ? _mm512_loadu_ps(accb + (r * WT_NW + c) * WT_LANES) : _mm512_setzero_ps();   \
  }                                                                                                \
  int64_t k = k0;                                                                                  \
  const int64_t kend = k1 < K ? k1 : K;                                                            \
  for (; k + 32 <= kend; k += 32) {                                                                \
    __m512i wv[WT_NW];                                                                             \
    WT_UNROLL                                                                                      \
    for (int c = 0; c < WT_NW; c++) wv[c] = _mm512_loadu_si512(w[c] + k * es);                     \
    /* the next group of WT_NW rows, one line per stream per step, as the f32 body */              \
    WT_UNROLL                                                                                      \
    for (int c = 0; c < WT_NW; c++)                                                                \
      _mm_prefetch(wt_ahead(w[c], (k + WT_NW * K) * es), _MM_HINT_T0);                             \
    WT_UNROLL                                                                                      \
    for (int r = 0; r < R; r++) {                                                                  \
      __m512i av = _mm512_loadu_si512(a + r * K + k);                                              \
      WT_UNROLL                                                                                    \
      for (int c = 0; c < WT_NW; c++) acc[r][c] = DOT(acc[r][c], av, wv[c]);                       \
    }                                                                                              \
  }                                                                                                \
  if (k1 < K) {                                                                                    \
    WT_UNROLL                                                                                      \
    for (int r = 0; r < R; r++) {                                                                  \
      WT_UNROLL                                                                                    \
      for (int c = 0; c < WT_NW; c++)                                                              \
        _mm512_storeu_ps(accb + (r * WT_NW + c) * WT_LANES, acc[r][c]);                            \
    }                                                                                              \
    return;                                                                                        \
  }                                                                                                \
  if (k < K) {                                                                                     \
    __mmask32 m = (__mmask32)((1ull << (unsigned)(K - k)) - 1u);                                   \
    __m512i wv[WT_NW];                                                                             \
    WT_UNROLL                                                                                      \
    for (int c = 0; c < WT_NW; c++) wv[c] = _mm512_maskz_loadu_epi16(m, w[c] + k * es);            \
    WT_UNROLL                                                                                      \
    for (int r = 0; r < R; r++) {                                                                  \
      __m512i av = _mm512_maskz_loadu_epi16(m, a + r * K + k);                                     \
      WT_UNROLL                                                                                    \
      for (int c = 0; c < WT_NW; c++) acc[r][c] = DOT(acc[r][c], av, wv[c]);                       \
    }                                                                                              \
  }                                                                                                \
  WT_UNROLL                                                                                        \
  for (int r = 0; r < R; r++) {                                                                    \
    wt512_tree4(acc[r][0], acc[r][1], acc[r][2], acc[r][3], sums + r * WT_NW);                     \
  }

static WT_INLINE WT_AVX512 void wtb512_body_emul(const uint16_t *a, int64_t K, int64_t k0,
                                                 int64_t k1, const unsigned char *const *w,
                                                 float *accb, float *sums, int R) {
  WTB512_BODY(wtb512_dot_emul)
}

static WT_INLINE WT_AVX512BF16 void wtb512_body_native(const uint16_t *a, int64_t K, int64_t k0,
                                                       int64_t k1, const unsigned char *const *w,
                                                       float *accb, float *sums, int R) {
  WTB512_BODY(wtb512_dot_native)
}

/* One bf16 A row against 2 * WT_NW weight rows (w[0..7], sums[0..7]): eight concurrent weight
 * streams for decode (M = 1), where four leave DRAM bandwidth unused. Each dot product is the
 * WTB512_BODY one lane for lane (same steps, same masked tail, same tree), so the same bits. */
#define WTB512_W8_BODY(DOT)                                                                        \
  const int64_t es = 2;                                                                            \
  __m512 acc[2 * WT_NW];                                                                           \
  WT_UNROLL                                                                                        \
  for (int c = 0; c < 2 * WT_NW; c++) acc[c] = _mm512_setzero_ps();                                \
  int64_t k = 0;                                                                                   \
  for (; k + 32 <= K; k += 32) {                                                                   \
    __m512i av = _mm512_loadu_si512(a + k);                                                        \
    WT_UNROLL                                                                                      \
    for (int c = 0; c < 2 * WT_NW; c++) {                                                          \
      __m512i wv = _mm512_loadu_si512(w[c] + k * es);                                              \
      _mm_prefetch(wt_ahead(w[c], (k + 2 * WT_NW * K) * es), _MM_HINT_T0);                         \
      acc[c] = DOT(acc[c], av, wv);                                                                \
    }                                                                                              \
  }                                                                                                \
  if (k < K) {                                                                                     \
    __mmask32 mt = (__mmask32)((1ull << (unsigned)(K - k)) - 1u);                                  \
    __m512i av = _mm512_maskz_loadu_epi16(mt, a + k);                                              \
    WT_UNROLL                                                                                      \
    for (int c = 0; c < 2 * WT_NW; c++)                                                            \
      acc[c] = DOT(acc[c], av, _mm512_maskz_loadu_epi16(mt, w[c] + k * es));                       \
  }                                                                                                \
  wt512_tree4(acc[0], acc[1], acc[2], acc[3], sums);                                               \
  wt512_tree4(acc[4], acc[5], acc[6], acc[7], sums + WT_NW);

static WT_AVX512 void wtb_emul_w8(const uint16_t *a, int64_t K, const unsigned char *const *w,
                                  float *sums) {
  WTB512_W8_BODY(wtb512_dot_emul)
}

static WT_AVX512BF16 void wtb_native_w8(const uint16_t *a, int64_t K, const unsigned char *const *w,
                                        float *sums){WTB512_W8_BODY(wtb512_dot_native)}

#define WTB512_KERNEL(NAME, BODY, ATTR, R)                                                         \
  static ATTR void NAME(const uint16_t *a, int64_t K, const unsigned char *const *w,               \
                        float *sums) {                                                             \
    BODY(a, K, 0, K, w, NULL, sums, R);                                                            \
  }                                                                                                \
  static ATTR void NAME##_kb(const uint16_t *a, int64_t K, int64_t k0, int64_t k1,                 \
                             const unsigned char *const *w, float *acc, float *sums) {             \
    BODY(a, K, k0, k1, w, acc, sums, R);                                                           \
  }
#define WTB512_KERNELS(SUF, BODY, ATTR)                                                            \
  WTB512_KERNEL(wtb_##SUF##_r1, BODY, ATTR, 1)                                                     \
  WTB512_KERNEL(wtb_##SUF##_r2, BODY, ATTR, 2)                                                     \
  WTB512_KERNEL(wtb_##SUF##_r3, BODY, ATTR, 3)                                                     \
  WTB512_KERNEL(wtb_##SUF##_r4, BODY, ATTR, 4)                                                     \
  WTB512_KERNEL(wtb_##SUF##_r5, BODY, ATTR, 5)                                                     \
  WTB512_KERNEL(wtb_##SUF##_r6, BODY, ATTR, 6)

WTB512_KERNELS(emul, wtb512_body_emul, WT_AVX512)
    WTB512_KERNELS(native, wtb512_body_native, WT_AVX512BF16)

        const matmul_wt_kernels matmul_wt_avx512bf16_kernels = {
            {{NULL}},
            {NULL, wtb_native_r1, wtb_native_r2, wtb_native_r3, wtb_native_r4, wtb_native_r5,
             wtb_native_r6},
            {NULL, wtb_native_r1_kb, wtb_native_r2_kb, wtb_native_r3_kb, wtb_native_r4_kb,
             wtb_native_r5_kb, wtb_native_r6_kb},
            wtb_native_w8};

const matmul_wt_kernels matmul_wt_avx512_kernels = {
    {{NULL, wt_f32_avx512_r1, wt_f32_avx512_r2, wt_f32_avx512_r3, wt_f32_avx512_r4,
      wt_f32_avx512_r5, wt_f32_avx512_r6},
     {NULL, wt_bf16_avx512_r1, wt_bf16_avx512_r2, wt_bf16_avx512_r3, wt_bf16_avx512_r4,
      wt_bf16_avx512_r5, wt_bf16_avx512_r6},
     {NULL, wt_f16_avx512_r1, wt_f16_avx512_r2, wt_f16_avx512_r3, wt_f16_avx512_r4,
      wt_f16_avx512_r5, wt_f16_avx512_r6}},
    {NULL, wtb_emul_r1, wtb_emul_r2, wtb_emul_r3, wtb_emul_r4, wtb_emul_r5, wtb_emul_r6},
    {NULL, wtb_emul_r1_kb, wtb_emul_r2_kb, wtb_emul_r3_kb, wtb_emul_r4_kb, wtb_emul_r5_kb,
     wtb_emul_r6_kb},
    wtb_emul_w8};
#else
const matmul_wt_kernels matmul_wt_avx512_kernels = {{{NULL}}};
const matmul_wt_kernels matmul_wt_avx512bf16_kernels = {{{NULL}}};
#endif /* WT_X86 */
