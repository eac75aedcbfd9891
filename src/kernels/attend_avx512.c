/* attend_avx512 — the AVX-512 F/BW/VL variant of the blocked attention (kernels/attend.h).
 *
 * The rows of a tile sit in the 16 lanes of a vector, so every per-row quantity (a score, the
 * running max m, the sum l, α, p) is one lane and each lane performs exactly the scalar
 * variant's operations on its row, in the same order, with no horizontal reduction anywhere:
 *   scores  per key t, lane i accumulates fma(q_i[e], k_t[e], .) over e in increasing order (q
 *           transposed once per call to [D][16], each key element broadcast), then * scale;
 *   softmax block max, α, p and l lane-wise over the block's keys in increasing t; a key row i
 *           does not see is masked: its score -inf, its p +0 (l + 0 = l exactly);
 *   values  acc rows [16][Dv], register-tiled 6 rows x 4 vectors of 16 value elements: acc * α,
 *           then per key t in increasing order one masked fma per (row, vector) — a key row i
 *           does not see leaves its accumulators untouched (the mask, not a zero weight, so
 *           even a non-finite value row of another row's key cannot leak in).
 * The exponential is attend_expf's sequence on 16 lanes (roundscale = rintf, scalef = ldexpf in
 * its range). So a row's bits do not depend on the tile, and equal the scalar variant's.
 * Only key rows in [min lo, max hi] of the tile are read (others are zeros).
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/attend.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>

#define AT_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))
#define AT_INLINE __attribute__((always_inline)) inline
#if defined(__clang__)
#define AT_UNROLL _Pragma("unroll")
#else
#define AT_UNROLL _Pragma("GCC unroll 16")
#endif

enum { AT_PV_ROWS = 6, AT_PV_VECS = 4 };

/* attend_expf on 16 lanes, lanes outside keep set to +0. */
static AT_INLINE AT_AVX512 __m512 at_exp(__m512 x, __mmask16 keep) {
  /* x >= -80 or NaN (unordered) computes; x < -80 and -inf give 0 */
  keep &= _mm512_cmp_ps_mask(x, _mm512_set1_ps(ATTEND_EXP_MIN), _CMP_NLT_UQ);
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(ATTEND_LOG2E)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 r = _mm512_fmadd_ps(n, _mm512_set1_ps(-ATTEND_LN2_HI), x);
  r = _mm512_fmadd_ps(n, _mm512_set1_ps(-ATTEND_LN2_LO), r);
  __m512 p = _mm512_set1_ps(ATTEND_EXP_C7);
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTEND_EXP_C6));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTEND_EXP_C5));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTEND_EXP_C4));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTEND_EXP_C3));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(ATTEND_EXP_C2));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(1.0f));
  return _mm512_maskz_scalef_ps(keep, p, n);
}

/* Element offset of row t from the head's first element. */
static AT_INLINE int64_t at_off(const attend_kv *kv, int64_t t) {
  if (!kv->pages) return t * kv->row_stride;
  return ((int64_t)kv->pages[t / kv->page_rows] * kv->page_rows + t % kv->page_rows) *
         kv->row_stride;
}

/* Row t's first n elements (from base, dtype dt) as f32: the row itself when f32, else
 * converted (exactly) into dst. */
static AT_INLINE AT_AVX512 const float *at_row(const void *base, ph_dtype dt, int64_t off,
                                               int64_t n, float *dst) {
  if (dt == PH_DTYPE_F32) return (const float *)base + off;
  const uint16_t *p = (const uint16_t *)base + off;
  for (int64_t e = 0; e < n; e += 16) {
    const __mmask16 m = n - e >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (n - e)) - 1u);
    const __m256i h = _mm256_maskz_loadu_epi16(m, p + e);
    __m512 f;
    if (dt == PH_DTYPE_F16)
      f = _mm512_cvtph_ps(h);
    else
      f = _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    _mm512_mask_storeu_ps(dst + e, m, f);
  }
  return dst;
}

/* sT[k][lane] = (Σ_e qT[e][lane] k_k[e]) * scale for the 16 keys k_k = the row `stride` bytes
 * after k_{k-1}, k_0 at base. Four row pointers advance along e; the others are reached by the
 * strides 1, 2 and 3 (so that nothing spills: 16 separate pointers would not fit). */
static AT_INLINE AT_AVX512 void at_scores16(const float *qT, int64_t D, const float *base,
                                            int64_t stride, float scale, float *sT) {
  __m512 acc[16];
  AT_UNROLL
  for (int k = 0; k < 16; k++) acc[k] = _mm512_setzero_ps();
  const char *b[4];
  for (int i = 0; i < 4; i++) b[i] = (const char *)base + 4 * i * stride;
  const int64_t s1 = stride, s2 = 2 * stride, s3 = 3 * stride;
  for (int64_t e = 0; e < D; e++) {
    const __m512 q = _mm512_loadu_ps(qT + 16 * e);
    AT_UNROLL
    for (int i = 0; i < 4; i++) {
      float k0, k1, k2, k3;
      memcpy(&k0, b[i], 4);
      memcpy(&k1, b[i] + s1, 4);
      memcpy(&k2, b[i] + s2, 4);
      memcpy(&k3, b[i] + s3, 4);
      acc[4 * i + 0] = _mm512_fmadd_ps(q, _mm512_set1_ps(k0), acc[4 * i + 0]);
      acc[4 * i + 1] = _mm512_fmadd_ps(q, _mm512_set1_ps(k1), acc[4 * i + 1]);
      acc[4 * i + 2] = _mm512_fmadd_ps(q, _mm512_set1_ps(k2), acc[4 * i + 2]);
      acc[4 * i + 3] = _mm512_fmadd_ps(q, _mm512_set1_ps(k3), acc[4 * i + 3]);
      b[i] += 4;
    }
  }
  const __m512 sc = _mm512_set1_ps(scale);
  AT_UNROLL
  for (int k = 0; k < 16; k++) _mm512_storeu_ps(sT + 16 * k, _mm512_mul_ps(acc[k], sc));
}

/* Rows r0 .. r0+NR-1 of acc [16][Dv], value vectors e0 .. e0+AT_PV_VECS-1 (em: their lane
 * masks): acc * α, then the masked fma of every key t in [ta, tb] (block-relative). */
static AT_INLINE AT_AVX512 void at_pv(float *acc, int64_t Dv, const float *const *vp, int ta,
                                      int tb, const float *pT, const uint32_t *bits,
                                      const float *alpha, int r0, int NR, int64_t e0,
                                      const __mmask16 *em) {
  __m512 a[AT_PV_ROWS][AT_PV_VECS];
  AT_UNROLL
  for (int i = 0; i < NR; i++) {
    const __m512 al = _mm512_set1_ps(alpha[r0 + i]);
    AT_UNROLL
    for (int j = 0; j < AT_PV_VECS; j++)
      a[i][j] = _mm512_mul_ps(_mm512_maskz_loadu_ps(em[j], acc + (r0 + i) * Dv + e0 + 16 * j), al);
  }
  for (int t = ta; t <= tb; t++) {
    __m512 v[AT_PV_VECS];
    AT_UNROLL
    for (int j = 0; j < AT_PV_VECS; j++) v[j] = _mm512_maskz_loadu_ps(em[j], vp[t] + e0 + 16 * j);
    AT_UNROLL
    for (int i = 0; i < NR; i++) {
      const __m512 p = _mm512_set1_ps(pT[16 * t + r0 + i]);
      const __mmask16 k = (__mmask16)(0u - ((bits[r0 + i] >> t) & 1u));
      AT_UNROLL
      for (int j = 0; j < AT_PV_VECS; j++) a[i][j] = _mm512_mask3_fmadd_ps(p, v[j], a[i][j], k);
    }
  }
  AT_UNROLL
  for (int i = 0; i < NR; i++) AT_UNROLL
  for (int j = 0; j < AT_PV_VECS; j++)
    _mm512_mask_storeu_ps(acc + (r0 + i) * Dv + e0 + 16 * j, em[j], a[i][j]);
}

static AT_AVX512 void at_pv_rows(float *acc, int64_t Dv, const float *const *vp, int ta, int tb,
                                 const float *pT, const uint32_t *bits, const float *alpha, int r0,
                                 int NR, int64_t e0, const __mmask16 *em) {
  switch (NR) {
  case 1:
    at_pv(acc, Dv, vp, ta, tb, pT, bits, alpha, r0, 1, e0, em);
    break;
  case 2:
    at_pv(acc, Dv, vp, ta, tb, pT, bits, alpha, r0, 2, e0, em);
    break;
  case 3:
    at_pv(acc, Dv, vp, ta, tb, pT, bits, alpha, r0, 3, e0, em);
    break;
  case 4:
    at_pv(acc, Dv, vp, ta, tb, pT, bits, alpha, r0, 4, e0, em);
    break;
  case 5:
    at_pv(acc, Dv, vp, ta, tb, pT, bits, alpha, r0, 5, e0, em);
    break;
  default:
    at_pv(acc, Dv, vp, ta, tb, pT, bits, alpha, r0, 6, e0, em);
    break;
  }
}

AT_AVX512 void attend_rows_avx512(const attend_kv *kv, int64_t D, float scale, float softcap,
                                  const attend_query *rows, int n_rows, float *work) {
  const int64_t Dv = kv->v_width > 0 ? kv->v_width : D, KB = ATTEND_KB;
  float *qT = work, *kbuf = qT + 16 * D, *vbuf = kbuf + KB * D, *zero = vbuf + KB * Dv;
  float *sT = zero + D, *acc = sT + KB * 16, *mv = acc + 16 * Dv, *lv = mv + 16, *av = lv + 16;
  const int n = n_rows;
  int64_t lo_min = INT64_MAX, hi_max = -1;
  int32_t lo32[16], hi32[16];
  for (int i = 0; i < 16; i++) {
    lo32[i] = i < n ? (int32_t)rows[i].lo : INT32_MAX;
    hi32[i] = i < n ? (int32_t)rows[i].hi : -1;
    if (i < n && rows[i].lo < lo_min) lo_min = rows[i].lo;
    if (i < n && rows[i].hi > hi_max) hi_max = rows[i].hi;
  }
  for (int64_t e = 0; e < D; e++) {
    for (int i = 0; i < 16; i++) qT[16 * e + i] = i < n ? rows[i].q[e] : 0.0f;
    zero[e] = 0.0f;
  }
  for (int i = 0; i < n; i++) memset(acc + i * Dv, 0, (size_t)Dv * sizeof(float));
  const __m512i lo_v = _mm512_loadu_si512(lo32), hi_v = _mm512_loadu_si512(hi32);
  __m512 m = _mm512_set1_ps(-INFINITY), l = _mm512_setzero_ps();
  const int64_t nvec = (Dv + 15) / 16;

  for (int64_t b = lo_min / KB; b <= hi_max / KB; b++) {
    const int64_t base = b * KB;
    const int ta = (int)((base > lo_min ? base : lo_min) - base);
    const int tb = (int)((base + KB - 1 < hi_max ? base + KB - 1 : hi_max) - base);
    const float *vp[ATTEND_KB];
    for (int t = 0; t < KB; t++)
      vp[t] =
          t < ta || t > tb ? zero : at_row(kv->v, kv->dt, at_off(kv, base + t), Dv, vbuf + t * Dv);
    for (int g = ta / 16; g <= tb / 16; g++) {
      /* a group of 16 keys the tile sees whole, f32, evenly strided (contiguous, or inside one
       * page): read in place; else its rows converted or copied into kbuf, zeros for keys
       * outside [ta, tb] (nothing outside the tile's range is read) */
      const int full = ta <= 16 * g && 16 * g + 15 <= tb;
      if (full && kv->dt == PH_DTYPE_F32 && (!kv->pages || kv->page_rows % 16 == 0)) {
        at_scores16(qT, D, (const float *)kv->k + at_off(kv, base + 16 * g), kv->row_stride * 4,
                    scale, sT + 256 * g);
        continue;
      }
      for (int t = 16 * g; t < 16 * g + 16; t++) {
        float *dst = kbuf + t * D;
        if (t < ta || t > tb)
          memset(dst, 0, (size_t)D * sizeof(float));
        else if (at_row(kv->k, kv->dt, at_off(kv, base + t), D, dst) != dst)
          memcpy(dst, (const float *)kv->k + at_off(kv, base + t), (size_t)D * sizeof(float));
      }
      at_scores16(qT, D, kbuf + 16 * g * D, D * 4, scale, sT + 256 * g);
    }
    if (softcap > 0.0f)
      for (int t = ta; t <= tb; t++)
        for (int i = 0; i < n; i++) sT[16 * t + i] = softcap * tanhf(sT[16 * t + i] / softcap);
    /* mask, block max, α, p, l */
    __m512 mb = _mm512_set1_ps(-INFINITY);
    __mmask16 valid[ATTEND_KB];
    for (int t = ta; t <= tb; t++) {
      const __m512i tv = _mm512_set1_epi32((int32_t)(base + t));
      valid[t] = _mm512_cmple_epi32_mask(lo_v, tv) & _mm512_cmple_epi32_mask(tv, hi_v);
      const __m512 s = _mm512_mask_loadu_ps(_mm512_set1_ps(-INFINITY), valid[t], sT + 16 * t);
      _mm512_storeu_ps(sT + 16 * t, s);
      mb = _mm512_max_ps(mb, s);
    }
    const __m512 mn = _mm512_max_ps(m, mb);
    const __mmask16 same = _mm512_cmp_ps_mask(mn, m, _CMP_EQ_OQ);
    const __m512 alpha = _mm512_mask_mov_ps(at_exp(_mm512_sub_ps(m, mn), (__mmask16)~same), same,
                                            _mm512_set1_ps(1.0f));
    l = _mm512_mul_ps(l, alpha);
    for (int t = ta; t <= tb; t++) {
      const __m512 p = at_exp(_mm512_sub_ps(_mm512_loadu_ps(sT + 16 * t), mn), valid[t]);
      l = _mm512_add_ps(l, p);
      _mm512_storeu_ps(sT + 16 * t, p);
    }
    m = mn;
    _mm512_storeu_ps(av, alpha);
    /* each row's keys in this block, as bits of t */
    uint32_t bits[16];
    for (int i = 0; i < n; i++) {
      const int64_t a0 = rows[i].lo > base + ta ? rows[i].lo - base : ta;
      const int64_t a1 = rows[i].hi < base + tb ? rows[i].hi - base : tb;
      bits[i] = a0 > a1 ? 0u : (uint32_t)((((uint64_t)1 << (a1 - a0 + 1)) - 1u) << a0);
    }
    for (int64_t ev = 0; ev < nvec; ev += AT_PV_VECS) {
      __mmask16 em[AT_PV_VECS];
      for (int j = 0; j < AT_PV_VECS; j++) {
        const int64_t e = (ev + j) * 16;
        em[j] = e >= Dv ? 0 : Dv - e >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (Dv - e)) - 1u);
      }
      for (int r0 = 0; r0 < n; r0 += AT_PV_ROWS)
        at_pv_rows(acc, Dv, vp, ta, tb, sT, bits, av, r0, n - r0 < AT_PV_ROWS ? n - r0 : AT_PV_ROWS,
                   ev * 16, em);
    }
  }
  _mm512_storeu_ps(mv, m);
  _mm512_storeu_ps(lv, l);
  for (int i = 0; i < n; i++) {
    float a = 1.0f, li = lv[i];
    if (rows[i].sink) {
      const float sk = *rows[i].sink, mi = mv[i], m2 = sk > mi ? sk : mi;
      a = m2 == mi ? 1.0f : attend_expf(mi - m2);
      li = li * a;
      li = li + attend_expf(sk - m2);
    }
    const __m512 av5 = _mm512_set1_ps(a), lv5 = _mm512_set1_ps(li);
    for (int64_t e = 0; e < Dv; e += 16) {
      const __mmask16 em = Dv - e >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (Dv - e)) - 1u);
      const __m512 o = _mm512_mul_ps(_mm512_maskz_loadu_ps(em, acc + i * Dv + e), av5);
      _mm512_mask_storeu_ps(rows[i].out + e, em, _mm512_div_ps(o, lv5));
    }
  }
}

#endif
