/* matmul_nbits_avx512 — MatMulNBits accuracy_level 4 with AVX-512 VNNI (contract and the rule it
 * computes bit for bit: kernels/matmul_nbits.h).
 *
 * vpdpbusd multiplies 64 unsigned bytes (the weight codes, 0..255) by 64 signed bytes (the int8
 * activations) and adds each group of four products to one int32 lane, without saturation. A
 * step reads 64 packed bytes of each of NBITS_COLS columns (four weight streams per thread, what
 * the bandwidth needs: docs/ops-linear.md) and does NBITS_ROWS x NBITS_COLS vpdpbusd. 4-bit
 * codes are unpacked in registers: the low nibbles of the 64 bytes are the even k, the high ones
 * the odd k, and the activations are stored in that order (nbits_i8_avx512_layout), so lane l of
 * a step always covers 8 consecutive k (4 bits) or 4 (8 bits), and 128-bit chunk j covers 32 k
 * or 16 k.
 *
 * The per-block integer sums are exact, so how lanes are added does not matter; the f32 combine
 * is then the reference's, lane c being column c:
 *   blocks of 64 bytes or more (8 bits: block >= 64, 4 bits: block >= 128): the steps of a block
 *     accumulate in the lanes, then one reduction of the four columns' vectors (int32 adds,
 *     columns side by side: nbits_tree4) gives the block's sums;
 *   smaller blocks (8 bits: 16, 32; 4 bits: 32, 64): one or two steps hold four blocks; the
 *     reduction after each step leaves chunk j = one block or half of one, and four blocks are
 *     combined at a time. The tables are padded to a multiple of four blocks with zeros and the
 *     last step's weight loads are masked, so nothing past the column is read. Without zero
 *     points the accumulators start at −z·Σâ of each block (in one lane of the block's chunk),
 *     so the reductions give d itself.
 * The entry points are specialized per width and for the small blocks (constants, one step body
 * per loop). 4 bits with block 16 (8 bytes) has no kernel here (the caller runs the reference).
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/matmul_nbits.h"
#include "kernels/matmul_wt.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#if WT_X86
#include <immintrin.h>

#define NQ_TARGET __attribute__((target("avx512f,avx512bw,avx512vl,avx512vnni,avx2,fma,f16c")))

/* Sums of each 128-bit chunk of four vectors, the columns side by side: chunk j of the result
 * holds, in lane c, the sum of the four lanes of chunk j of v[c]. */
static WT_INLINE NQ_TARGET __m512i nq_tree4(__m512i v0, __m512i v1, __m512i v2, __m512i v3) {
  __m512i x01 = _mm512_add_epi32(_mm512_unpacklo_epi32(v0, v1), _mm512_unpackhi_epi32(v0, v1));
  __m512i x23 = _mm512_add_epi32(_mm512_unpacklo_epi32(v2, v3), _mm512_unpackhi_epi32(v2, v3));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(x01, x23), _mm512_unpackhi_epi64(x01, x23));
}

/* Bytes [0, n) of 64 set, n in [0, 64]. */
static WT_INLINE __mmask64 nq_mask(int64_t n) {
  return n >= 64 ? ~(__mmask64)0 : n <= 0 ? (__mmask64)0 : (((__mmask64)1 << n) - 1);
}

/* One step: acc[r][c] += the dot of 64 packed bytes of column c (at b[c] + off, the bytes m
 * selects) with row r's activations for them (q + r * q_stride + off * 8 / bits). */
static WT_INLINE NQ_TARGET void nq_step(__m512i acc[NBITS_ROWS][NBITS_COLS], const int8_t *q,
                                        int64_t q_stride, const uint8_t *const *b, int64_t off,
                                        __mmask64 m, int64_t pf, int R, int bits) {
  if (pf) WT_UNROLL
  for (int c = 0; c < NBITS_COLS; c++) _mm_prefetch(wt_ahead(b[c], off + pf), _MM_HINT_T0);
  if (bits == 8) {
    __m512i a[NBITS_ROWS];
    WT_UNROLL
    for (int r = 0; r < R; r++) a[r] = _mm512_loadu_si512(q + r * q_stride + off);
    WT_UNROLL
    for (int c = 0; c < NBITS_COLS; c++) {
      __m512i w = _mm512_maskz_loadu_epi8(m, b[c] + off);
      WT_UNROLL
      for (int r = 0; r < R; r++) acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], w, a[r]);
    }
  } else {
    const __m512i lo4 = _mm512_set1_epi8(0x0F);
    __m512i ae[NBITS_ROWS], ao[NBITS_ROWS];
    WT_UNROLL
    for (int r = 0; r < R; r++) {
      ae[r] = _mm512_loadu_si512(q + r * q_stride + 2 * off);
      ao[r] = _mm512_loadu_si512(q + r * q_stride + 2 * off + 64);
    }
    WT_UNROLL
    for (int c = 0; c < NBITS_COLS; c++) {
      __m512i p = _mm512_maskz_loadu_epi8(m, b[c] + off);
      __m512i lo = _mm512_and_si512(p, lo4);
      __m512i hi = _mm512_and_si512(_mm512_srli_epi16(p, 4), lo4);
      WT_UNROLL
      for (int r = 0; r < R; r++) {
        acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], lo, ae[r]);
        acc[r][c] = _mm512_dpbusd_epi32(acc[r][c], hi, ao[r]);
      }
    }
  }
}

/* R rows (R <= NBITS_ROWS, a constant in every caller) against the four columns. */
static WT_INLINE NQ_TARGET void nq_rows(const int8_t *q, int64_t q_stride, const float *sa,
                                        const int32_t *asum, int64_t x_stride,
                                        const uint8_t *const *b, const float *const *sw,
                                        const int32_t *zt, int bits, int64_t block, int64_t nb,
                                        int64_t pf, float *out, int R) {
  const int64_t blob = block * bits / 8;
  __m512i acc[NBITS_ROWS][NBITS_COLS];
  __m128 y[NBITS_ROWS];
  WT_UNROLL
  for (int r = 0; r < R; r++) y[r] = _mm_setzero_ps();
  if (blob >= 64) {
    for (int64_t blk = 0; blk < nb; blk++) {
      WT_UNROLL
      for (int r = 0; r < R; r++) WT_UNROLL
      for (int c = 0; c < NBITS_COLS; c++) acc[r][c] = _mm512_setzero_si512();
      for (int64_t off = blk * blob; off < (blk + 1) * blob; off += 64)
        nq_step(acc, q, q_stride, b, off, ~(__mmask64)0, pf, R, bits);
      __m128 swv = _mm_set_ps(sw[3][blk], sw[2][blk], sw[1][blk], sw[0][blk]);
      __m128i z = zt ? _mm_loadu_si128((const __m128i *)(const void *)(zt + blk * NBITS_COLS))
                     : _mm_set1_epi32(1 << (bits - 1));
      WT_UNROLL
      for (int r = 0; r < R; r++) {
        __m512i t = nq_tree4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
        t = _mm512_add_epi32(t, _mm512_shuffle_i32x4(t, t, _MM_SHUFFLE(1, 0, 3, 2)));
        t = _mm512_add_epi32(t, _mm512_shuffle_i32x4(t, t, _MM_SHUFFLE(2, 3, 0, 1)));
        __m128i d = _mm_sub_epi32(_mm512_castsi512_si128(t),
                                  _mm_mullo_epi32(z, _mm_set1_epi32(asum[r * x_stride + blk])));
        __m128 s = _mm_mul_ps(_mm_set1_ps(sa[r * x_stride + blk]), swv);
        y[r] = _mm_add_ps(y[r], _mm_mul_ps(s, _mm_cvtepi32_ps(d)));
      }
    }
  } else {
    /* four blocks per unit of 64 (blob 16) or 128 (blob 32) bytes */
    const int64_t unit = 4 * blob, col_bytes = nb * blob;
    const __m512i bcast4 = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    const __m512i tr4 = _mm512_set_epi32(15, 11, 7, 3, 14, 10, 6, 2, 13, 9, 5, 1, 12, 8, 4, 0);
    /* symmetric: the accumulators start at −z·Σâ = −(Σâ << (bits − 1)) in the first lane of each
     * chunk that sums into a block (lanes 0, 4, 8, 12 for blob 16; 0, 8 per step for blob 32), so
     * the reductions give the block's d directly (int32, the same value modulo 2^32) */
    const __mmask16 zl = blob == 16 ? (__mmask16)0x1111 : (__mmask16)0x0101;
    for (int64_t u = 0, blk = 0; blk < nb; u += unit, blk += 4) {
      __m512i t[NBITS_ROWS], init[NBITS_ROWS];
      WT_UNROLL
      for (int r = 0; r < R; r++)
        init[r] = zt ? _mm512_setzero_si512()
                     : _mm512_sub_epi32(_mm512_setzero_si512(),
                                        _mm512_slli_epi32(_mm512_maskz_expandloadu_epi32(
                                                              zl, asum + r * x_stride + blk),
                                                          (unsigned)(bits - 1)));
      WT_UNROLL
      for (int r = 0; r < R; r++) WT_UNROLL
      for (int c = 0; c < NBITS_COLS; c++) acc[r][c] = init[r];
      nq_step(acc, q, q_stride, b, u, nq_mask(col_bytes - u), pf, R, bits);
      WT_UNROLL
      for (int r = 0; r < R; r++) t[r] = nq_tree4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
      if (blob == 32) { /* chunks 0, 1: block blk; 2, 3: blk + 1; the next step blk + 2, + 3 */
        WT_UNROLL
        for (int r = 0; r < R; r++)
          init[r] = zt ? _mm512_setzero_si512()
                       : _mm512_sub_epi32(_mm512_setzero_si512(),
                                          _mm512_slli_epi32(_mm512_maskz_expandloadu_epi32(
                                                                zl, asum + r * x_stride + blk + 2),
                                                            (unsigned)(bits - 1)));
        WT_UNROLL
        for (int r = 0; r < R; r++) WT_UNROLL
        for (int c = 0; c < NBITS_COLS; c++) acc[r][c] = init[r];
        nq_step(acc, q, q_stride, b, u + 64, nq_mask(col_bytes - u - 64), pf, R, bits);
        WT_UNROLL
        for (int r = 0; r < R; r++) {
          __m512i t2 = nq_tree4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
          t[r] = _mm512_add_epi32(_mm512_shuffle_i32x4(t[r], t2, _MM_SHUFFLE(2, 0, 2, 0)),
                                  _mm512_shuffle_i32x4(t[r], t2, _MM_SHUFFLE(3, 1, 3, 1)));
        }
      }
      /* chunk j, lane c: block blk + j of column c */
      int n_valid = nb - blk < 4 ? (int)(nb - blk) : 4;
      /* the four columns' scales of blocks blk .. blk + 3 (zeros past n_blocks), loaded column
       * by column (chunk c, lane j) and transposed to chunk j, lane c */
      __m512 sc;
      if (n_valid == 4) { /* plain loads (folded into the inserts) but at a column's end */
        sc = _mm512_castps128_ps512(_mm_loadu_ps(sw[0] + blk));
        sc = _mm512_insertf32x4(sc, _mm_loadu_ps(sw[1] + blk), 1);
        sc = _mm512_insertf32x4(sc, _mm_loadu_ps(sw[2] + blk), 2);
        sc = _mm512_insertf32x4(sc, _mm_loadu_ps(sw[3] + blk), 3);
      } else {
        const __mmask8 vm = (__mmask8)((1u << n_valid) - 1);
        sc = _mm512_castps128_ps512(_mm_maskz_loadu_ps(vm, sw[0] + blk));
        sc = _mm512_insertf32x4(sc, _mm_maskz_loadu_ps(vm, sw[1] + blk), 1);
        sc = _mm512_insertf32x4(sc, _mm_maskz_loadu_ps(vm, sw[2] + blk), 2);
        sc = _mm512_insertf32x4(sc, _mm_maskz_loadu_ps(vm, sw[3] + blk), 3);
      }
      __m512 swv = _mm512_permutexvar_ps(tr4, sc);
      __m512i z = zt ? _mm512_loadu_si512(zt + blk * NBITS_COLS) : _mm512_setzero_si512();
      WT_UNROLL
      for (int r = 0; r < R; r++) {
        __m512 s = _mm512_permutexvar_ps(
            bcast4, _mm512_castps128_ps512(_mm_loadu_ps(sa + r * x_stride + blk)));
        __m512i d = t[r];
        if (zt)
          d = _mm512_sub_epi32(
              d,
              _mm512_mullo_epi32(
                  z, _mm512_permutexvar_epi32(
                         bcast4, _mm512_castsi128_si512(_mm_loadu_si128((
                                     const __m128i *)(const void *)(asum + r * x_stride + blk))))));
        __m512 p = _mm512_mul_ps(_mm512_mul_ps(s, swv), _mm512_cvtepi32_ps(d));
        y[r] = _mm_add_ps(y[r], _mm512_castps512_ps128(p));
        if (n_valid > 1) y[r] = _mm_add_ps(y[r], _mm512_extractf32x4_ps(p, 1));
        if (n_valid > 2) y[r] = _mm_add_ps(y[r], _mm512_extractf32x4_ps(p, 2));
        if (n_valid > 3) y[r] = _mm_add_ps(y[r], _mm512_extractf32x4_ps(p, 3));
      }
    }
  }
  WT_UNROLL
  for (int r = 0; r < R; r++) _mm_storeu_ps(out + r * NBITS_COLS, y[r]);
}

static WT_INLINE NQ_TARGET void nq_kernel(const int8_t *q, int64_t q_stride, const float *sa,
                                          const int32_t *asum, int64_t x_stride, int64_t M,
                                          const uint8_t *const *b, const float *const *sw,
                                          const int32_t *zt, int bits, int64_t block,
                                          int64_t n_blocks, float *out) {
  /* The first row tile prefetches the same bytes of the columns a whole number of groups ahead,
   * at least 8 KiB: the columns of the next groups follow these in B, and a group's columns are
   * too short a stream for the hardware prefetcher (decode was latency-bound without it: 8x
   * slower). */
  const int64_t group = NBITS_COLS * n_blocks * block * bits / 8;
  const int64_t pf = group * ((8192 + group - 1) / group);
  int64_t m = 0;
  for (; m + NBITS_ROWS <= M; m += NBITS_ROWS)
    nq_rows(q + m * q_stride, q_stride, sa + m * x_stride, asum + m * x_stride, x_stride, b, sw, zt,
            bits, block, n_blocks, m ? 0 : pf, out + m * NBITS_COLS, NBITS_ROWS);
  const int8_t *qm = q + m * q_stride;
  const float *sm = sa + m * x_stride;
  const int32_t *am = asum + m * x_stride;
  float *om = out + m * NBITS_COLS;
  const int64_t pm = m ? 0 : pf;
  switch (M - m) {
  case 3:
    nq_rows(qm, q_stride, sm, am, x_stride, b, sw, zt, bits, block, n_blocks, pm, om, 3);
    break;
  case 2:
    nq_rows(qm, q_stride, sm, am, x_stride, b, sw, zt, bits, block, n_blocks, pm, om, 2);
    break;
  case 1:
    nq_rows(qm, q_stride, sm, am, x_stride, b, sw, zt, bits, block, n_blocks, pm, om, 1);
    break;
  default:
    break;
  }
}

/* The kernel specialized for each width and for the small blocks (the width and the block size
 * constants: one step body, no width test in the loops; GCC 12 otherwise kept both widths' steps
 * in every loop and copied the accumulators around them). */
#define NQ_SPECIAL(name, BITS, BLOCK)                                                              \
  static NQ_TARGET void name(const int8_t *q, int64_t q_stride, const float *sa,                   \
                             const int32_t *asum, int64_t x_stride, int64_t M,                     \
                             const uint8_t *const *b, const float *const *sw, const int32_t *zt,   \
                             int bits, int64_t block, int64_t n_blocks, float *out) {              \
    (void)bits;                                                                                    \
    (void)block;                                                                                   \
    nq_kernel(q, q_stride, sa, asum, x_stride, M, b, sw, zt, BITS, BLOCK, n_blocks, out);          \
  }
NQ_SPECIAL(nq_i4_b32, 4, 32)
NQ_SPECIAL(nq_i4_b64, 4, 64)
NQ_SPECIAL(nq_i4, 4, block)
NQ_SPECIAL(nq_i8_b16, 8, 16)
NQ_SPECIAL(nq_i8_b32, 8, 32)
NQ_SPECIAL(nq_i8, 8, block)
#undef NQ_SPECIAL

/* ---- the panel kernel (prefill) ------------------------------------------------------------
 * The weights of NBITS_PANEL columns repacked once per call (nbits_i8_pack_panel) so that one
 * vector holds 4 consecutive codes of 16 columns: vpdpbusd against 4 activation bytes broadcast
 * then sums each column in its own lane, and the per-block sums need no reduction. A tile is
 * NQP_R rows x 2 vectors (32 columns); each block ends with the combine, lane c being column c. */
#define NQP_R 4

static WT_INLINE NQ_TARGET void nqp_rows(const int8_t *q, int64_t q_stride, const float *sa,
                                         const int32_t *asum, int64_t x_stride, const uint8_t *wp,
                                         const float *swp, const int32_t *zpp, int bits,
                                         int64_t block, int64_t nb, float *out, int R) {
  __m512 y[NQP_R][2];
  __m512i acc[NQP_R][2];
  WT_UNROLL
  for (int r = 0; r < R; r++) y[r][0] = y[r][1] = _mm512_setzero_ps();
  const int64_t quads = block / 4;
  for (int64_t blk = 0; blk < nb; blk++) {
    WT_UNROLL
    for (int r = 0; r < R; r++) acc[r][0] = acc[r][1] = _mm512_setzero_si512();
    const uint8_t *w = wp + blk * quads * 4 * NBITS_PANEL;
    const int8_t *qb = q + blk * block;
    /* 4 quads per iteration (a block holds a multiple of 4: block >= 16), unrolled: with one
     * quad per iteration GCC 12 copied all eight accumulators around each one */
    for (int64_t k4 = 0; k4 < quads; k4 += 4) {
      WT_UNROLL
      for (int u = 0; u < 4; u++) {
        const int64_t kq = k4 + u;
        __m512i w0 = _mm512_loadu_si512(w + kq * 4 * NBITS_PANEL);
        __m512i w1 = _mm512_loadu_si512(w + kq * 4 * NBITS_PANEL + 64);
        WT_UNROLL
        for (int r = 0; r < R; r++) {
          int32_t a4;
          memcpy(&a4, qb + r * q_stride + 4 * kq, 4);
          __m512i a = _mm512_set1_epi32(a4);
          acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], w0, a);
          acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], w1, a);
        }
      }
    }
    __m512 sw0 = _mm512_loadu_ps(swp + blk * NBITS_PANEL);
    __m512 sw1 = _mm512_loadu_ps(swp + blk * NBITS_PANEL + 16);
    __m512i z0 = _mm512_setzero_si512(), z1 = z0;
    if (zpp) {
      z0 = _mm512_loadu_si512(zpp + blk * NBITS_PANEL);
      z1 = _mm512_loadu_si512(zpp + blk * NBITS_PANEL + 16);
    }
    WT_UNROLL
    for (int r = 0; r < R; r++) {
      __m512i as = _mm512_set1_epi32(asum[r * x_stride + blk]);
      __m512 s = _mm512_set1_ps(sa[r * x_stride + blk]);
      __m512i za0 = zpp ? _mm512_mullo_epi32(z0, as) : _mm512_slli_epi32(as, (unsigned)(bits - 1));
      __m512i za1 = zpp ? _mm512_mullo_epi32(z1, as) : za0;
      __m512i d0 = _mm512_sub_epi32(acc[r][0], za0), d1 = _mm512_sub_epi32(acc[r][1], za1);
      y[r][0] =
          _mm512_add_ps(y[r][0], _mm512_mul_ps(_mm512_mul_ps(s, sw0), _mm512_cvtepi32_ps(d0)));
      y[r][1] =
          _mm512_add_ps(y[r][1], _mm512_mul_ps(_mm512_mul_ps(s, sw1), _mm512_cvtepi32_ps(d1)));
    }
  }
  WT_UNROLL
  for (int r = 0; r < R; r++) {
    _mm512_storeu_ps(out + r * NBITS_PANEL, y[r][0]);
    _mm512_storeu_ps(out + r * NBITS_PANEL + 16, y[r][1]);
  }
}

static NQ_TARGET void nbits_i8_panel_vnni(const int8_t *q, int64_t q_stride, const float *sa,
                                          const int32_t *asum, int64_t x_stride, int64_t M,
                                          const uint8_t *wp, const float *swp, const int32_t *zpp,
                                          int bits, int64_t block, int64_t n_blocks, float *out) {
  int64_t m = 0;
  for (; m + NQP_R <= M; m += NQP_R)
    nqp_rows(q + m * q_stride, q_stride, sa + m * x_stride, asum + m * x_stride, x_stride, wp, swp,
             zpp, bits, block, n_blocks, out + m * NBITS_PANEL, NQP_R);
  const int8_t *qm = q + m * q_stride;
  const float *sm = sa + m * x_stride;
  const int32_t *am = asum + m * x_stride;
  float *om = out + m * NBITS_PANEL;
  switch (M - m) {
  case 3:
    nqp_rows(qm, q_stride, sm, am, x_stride, wp, swp, zpp, bits, block, n_blocks, om, 3);
    break;
  case 2:
    nqp_rows(qm, q_stride, sm, am, x_stride, wp, swp, zpp, bits, block, n_blocks, om, 2);
    break;
  case 1:
    nqp_rows(qm, q_stride, sm, am, x_stride, wp, swp, zpp, bits, block, n_blocks, om, 1);
    break;
  default:
    break;
  }
}

/* 16 x 16 int32 transpose: r[j] lane i = r[i] lane j on return. */
static WT_INLINE NQ_TARGET void nq_tr16(__m512i r[16]) {
  __m512i t[16];
  WT_UNROLL
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_epi32(r[2 * i], r[2 * i + 1]);
    t[2 * i + 1] = _mm512_unpackhi_epi32(r[2 * i], r[2 * i + 1]);
  }
  WT_UNROLL
  for (int i = 0; i < 4; i++) {
    r[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
    r[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
    r[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
  }
  WT_UNROLL
  for (int i = 0; i < 4; i++) {
    t[i] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0x88);
    t[i + 4] = _mm512_shuffle_i32x4(r[i], r[i + 4], 0xdd);
    t[i + 8] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0x88);
    t[i + 12] = _mm512_shuffle_i32x4(r[i + 8], r[i + 12], 0xdd);
  }
  WT_UNROLL
  for (int i = 0; i < 8; i++) {
    r[i] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0x88);
    r[i + 8] = _mm512_shuffle_i32x4(t[i], t[i + 8], 0xdd);
  }
}

/* nbits_i8_pack_panel's layout, 64 codes x 16 columns per transpose; the quads past the last
 * multiple of 16 by the reference packer's rule. */
static NQ_TARGET void nbits_i8_pack_panel_vnni(const uint8_t *const *cols, int bits, int64_t block,
                                               int64_t n_blocks, uint8_t *wp) {
  const int64_t n = n_blocks * block, n64 = n / 64 * 64;
  const __m256i lo4 = _mm256_set1_epi8(0x0F);
  const int64_t pf = NBITS_PANEL * n * bits / 8;
  for (int h = 0; h < NBITS_PANEL / 16; h++) {
    for (int64_t k0 = 0; k0 < n64; k0 += 64) {
      __m512i r[16];
      WT_UNROLL
      for (int c = 0; c < 16; c++) {
        const uint8_t *p = cols[16 * h + c];
        /* the same bytes of the next panel (the next task): B streams from DRAM here */
        _mm_prefetch(wt_ahead(p, k0 * bits / 8 + pf), _MM_HINT_T0);
        if (bits == 8) {
          r[c] = _mm512_loadu_si512(p + k0);
        } else { /* 32 bytes -> 64 codes in k order (low nibble first) */
          __m256i x = _mm256_loadu_si256((const __m256i_u *)(const void *)(p + k0 / 2));
          __m256i lo = _mm256_and_si256(x, lo4),
                  hi = _mm256_and_si256(_mm256_srli_epi16(x, 4), lo4);
          __m256i a = _mm256_unpacklo_epi8(lo, hi), b = _mm256_unpackhi_epi8(lo, hi);
          r[c] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm256_permute2x128_si256(a, b, 0x20)),
                                    _mm256_permute2x128_si256(a, b, 0x31), 1);
        }
      }
      nq_tr16(r);
      WT_UNROLL
      for (int j = 0; j < 16; j++)
        _mm512_storeu_si512(wp + (k0 / 4 + j) * 4 * NBITS_PANEL + h * 64, r[j]);
    }
  }
  for (int c = 0; c < NBITS_PANEL; c++)
    for (int64_t k = n64; k < n; k++) {
      const uint8_t *p = cols[c];
      wp[(k / 4) * 4 * NBITS_PANEL + c * 4 + k % 4] =
          bits == 8 ? p[k] : (uint8_t)((p[k / 2] >> ((k % 2) * 4)) & 0x0F);
    }
}

nbits_i8_pack_fn nbits_i8_avx512_pack_panel(void) { return nbits_i8_pack_panel_vnni; }
nbits_i8_panel_fn nbits_i8_avx512_panel_kernel(void) { return nbits_i8_panel_vnni; }
/* ---- the activation quantizer ---------------------------------------------------------------
 * nbits_quantize_row_i8's rule with the same f32 operations per element: max |a| (exact in any
 * order), s_a = amax / 127 and r = 127 / amax in scalar, â = a·r rounded to nearest even
 * (vrndscaleps; the reference's 1.5·2^23 trick rounds the same way for |a·r| < 2^22). */
static NQ_TARGET void nbits_quantize_row_i8_avx512(const float *a, int64_t K, int64_t block,
                                                   int8_t *q, float *sa, int32_t *asum) {
  for (int64_t k0 = 0, b = 0; k0 < K; k0 += block, b++) {
    int64_t len = K - k0 < block ? K - k0 : block;
    __m512 mx = _mm512_setzero_ps();
    __mmask16 nonfinite = 0;
    for (int64_t j = 0; j < len; j += 16) {
      __mmask16 m = len - j >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (len - j)) - 1);
      __m512 x = _mm512_abs_ps(_mm512_maskz_loadu_ps(m, a + k0 + j));
      /* inf or NaN: not <= FLT_MAX (ordered, non-signalling) */
      nonfinite |= _mm512_mask_cmp_ps_mask(m, x, _mm512_set1_ps(FLT_MAX), _CMP_NLE_UQ);
      mx = _mm512_max_ps(mx, x);
    }
    float amax = _mm512_reduce_max_ps(mx);
    if (nonfinite || amax < FLT_MIN) {
      sa[b] = nonfinite ? NAN : 0.0f;
      memset(q + k0, 0, (size_t)block);
      asum[b] = 0;
      continue;
    }
    sa[b] = amax / 127.0f;
    const __m512 r = _mm512_set1_ps(127.0f / amax);
    __m512i sum = _mm512_setzero_si512();
    for (int64_t j = 0; j < block; j += 16) {
      int64_t n = len - j;
      __mmask16 m = n >= 16 ? (__mmask16)0xFFFF : n <= 0 ? 0 : (__mmask16)((1u << n) - 1);
      __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, a + k0 + j), r),
                                      _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
      __m512i iv = _mm512_cvtps_epi32(v);
      sum = _mm512_add_epi32(sum, iv);
      _mm_storeu_si128((__m128i *)(void *)(q + k0 + j), _mm512_cvtepi32_epi8(iv));
    }
    asum[b] = _mm512_reduce_add_epi32(sum);
  }
}

nbits_quantize_fn nbits_i8_avx512_quantizer(void) { return nbits_quantize_row_i8_avx512; }

/* ---- accuracy_level 1 ----------------------------------------------------------------------- */

#define NQ_TARGET_F __attribute__((target("avx512f,avx512bw,avx512vl,avx2,fma,f16c")))

/* nbits_dequant_col, 16 k at a time (a block holds a whole number of 16s), with the reference's
 * operations per element: (float)q − z, then · s. */
static NQ_TARGET_F void nbits_dequant_col_avx512(const uint8_t *b_col, const float *scales,
                                                 const float *zp, int bits, int64_t block,
                                                 int64_t K, float *w) {
  const int64_t blob = block * bits / 8;
  const __m128i lo4 = _mm_set1_epi8(0x0F);
  for (int64_t k0 = 0, b = 0; k0 < K; k0 += block, b++) {
    const uint8_t *p = b_col + b * blob;
    const __m512 s = _mm512_set1_ps(scales[b]), z = _mm512_set1_ps(zp[b]);
    int64_t len = K - k0 < block ? K - k0 : block;
    for (int64_t j = 0; j < len; j += 16) {
      __m128i codes;
      if (bits == 8) {
        codes = _mm_loadu_si128((const __m128i_u *)(const void *)(p + j));
      } else {
        uint64_t v;
        memcpy(&v, p + j / 2, 8);
        __m128i x = _mm_cvtsi64_si128((long long)v);
        codes = _mm_unpacklo_epi8(_mm_and_si128(x, lo4), _mm_and_si128(_mm_srli_epi16(x, 4), lo4));
      }
      __m512 q = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(codes));
      __m512 wv = _mm512_mul_ps(_mm512_sub_ps(q, z), s);
      int64_t n = len - j < 16 ? len - j : 16;
      _mm512_mask_storeu_ps(w + k0 + j, (__mmask16)((1u << n) - 1), wv);
    }
  }
}

/* Σ a[k]·w[k]: k to lane k % 16 (the tail masked), a fused multiply-add per element, then the
 * tree l + 8, + 4, + 2, + 1. The order depends on K only. */
static NQ_TARGET_F float nbits_dot_avx512(const float *a, const float *w, int64_t K) {
  __m512 acc = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16)
    acc = _mm512_fmadd_ps(_mm512_loadu_ps(a + k), _mm512_loadu_ps(w + k), acc);
  if (k < K) {
    __mmask16 m = (__mmask16)((1u << (K - k)) - 1);
    acc = _mm512_mask3_fmadd_ps(_mm512_maskz_loadu_ps(m, a + k), _mm512_maskz_loadu_ps(m, w + k),
                                acc, m);
  }
  __m256 s8 = _mm256_add_ps(_mm512_castps512_ps256(acc),
                            _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
  __m128 s4 = _mm_add_ps(_mm256_castps256_ps128(s8), _mm256_extractf128_ps(s8, 1));
  __m128 s2 = _mm_add_ps(s4, _mm_movehl_ps(s4, s4));
  __m128 s1 = _mm_add_ss(s2, _mm_shuffle_ps(s2, s2, 1));
  return _mm_cvtss_f32(s1);
}

const nbits_f32_kernels *nbits_f32_avx512_kernels(void) {
  static const nbits_f32_kernels k = {nbits_dequant_col_avx512, nbits_dot_avx512};
  return &k;
}

nbits_i8_kernel_fn nbits_i8_avx512_kernel(int bits, int64_t block) {
  if ((bits != 8 && bits != 4) || block < 16 || block > NBITS_I8_MAX_BLOCK) return NULL;
  if (bits == 4 && block < 32) return NULL;
  if (bits == 4) return block == 32 ? nq_i4_b32 : block == 64 ? nq_i4_b64 : nq_i4;
  return block == 16 ? nq_i8_b16 : block == 32 ? nq_i8_b32 : nq_i8;
}
#else
nbits_quantize_fn nbits_i8_avx512_quantizer(void) { return NULL; }
nbits_i8_pack_fn nbits_i8_avx512_pack_panel(void) { return NULL; }
const nbits_f32_kernels *nbits_f32_avx512_kernels(void) { return NULL; }
nbits_i8_panel_fn nbits_i8_avx512_panel_kernel(void) { return NULL; }
nbits_i8_kernel_fn nbits_i8_avx512_kernel(int bits, int64_t block) {
  (void)bits;
  (void)block;
  return NULL;
}
#endif
