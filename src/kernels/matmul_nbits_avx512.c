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
 *     last step's weight loads are masked, so nothing past the column is read.
 * 4 bits with block 16 (8 bytes) has no kernel here (the caller runs the reference).
 */
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
                                        __mmask64 m, int R, int bits) {
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
                                        const uint8_t *const *b, const float *swt,
                                        const int32_t *zt, int bits, int64_t block, int64_t nb,
                                        float *out, int R) {
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
        nq_step(acc, q, q_stride, b, off, ~(__mmask64)0, R, bits);
      __m128 sw = _mm_loadu_ps(swt + blk * NBITS_COLS);
      __m128i z = _mm_loadu_si128((const __m128i *)(const void *)(zt + blk * NBITS_COLS));
      WT_UNROLL
      for (int r = 0; r < R; r++) {
        __m512i t = nq_tree4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
        t = _mm512_add_epi32(t, _mm512_shuffle_i32x4(t, t, _MM_SHUFFLE(1, 0, 3, 2)));
        t = _mm512_add_epi32(t, _mm512_shuffle_i32x4(t, t, _MM_SHUFFLE(2, 3, 0, 1)));
        __m128i d = _mm_sub_epi32(_mm512_castsi512_si128(t),
                                  _mm_mullo_epi32(z, _mm_set1_epi32(asum[r * x_stride + blk])));
        __m128 s = _mm_mul_ps(_mm_set1_ps(sa[r * x_stride + blk]), sw);
        y[r] = _mm_add_ps(y[r], _mm_mul_ps(s, _mm_cvtepi32_ps(d)));
      }
    }
  } else {
    /* four blocks per unit of 64 (blob 16) or 128 (blob 32) bytes */
    const int64_t unit = 4 * blob, col_bytes = nb * blob;
    const __m512i bcast4 = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    for (int64_t u = 0, blk = 0; blk < nb; u += unit, blk += 4) {
      __m512i t[NBITS_ROWS];
      WT_UNROLL
      for (int r = 0; r < R; r++) WT_UNROLL
      for (int c = 0; c < NBITS_COLS; c++) acc[r][c] = _mm512_setzero_si512();
      nq_step(acc, q, q_stride, b, u, nq_mask(col_bytes - u), R, bits);
      WT_UNROLL
      for (int r = 0; r < R; r++) t[r] = nq_tree4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
      if (blob == 32) { /* chunks 0, 1: block blk; 2, 3: blk + 1; the next step blk + 2, + 3 */
        WT_UNROLL
        for (int r = 0; r < R; r++) WT_UNROLL
        for (int c = 0; c < NBITS_COLS; c++) acc[r][c] = _mm512_setzero_si512();
        nq_step(acc, q, q_stride, b, u + 64, nq_mask(col_bytes - u - 64), R, bits);
        WT_UNROLL
        for (int r = 0; r < R; r++) {
          __m512i t2 = nq_tree4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]);
          t[r] = _mm512_add_epi32(_mm512_shuffle_i32x4(t[r], t2, _MM_SHUFFLE(2, 0, 2, 0)),
                                  _mm512_shuffle_i32x4(t[r], t2, _MM_SHUFFLE(3, 1, 3, 1)));
        }
      }
      /* chunk j, lane c: block blk + j of column c */
      __m512 sw = _mm512_loadu_ps(swt + blk * NBITS_COLS);
      __m512i z = _mm512_loadu_si512(zt + blk * NBITS_COLS);
      int n_valid = nb - blk < 4 ? (int)(nb - blk) : 4;
      WT_UNROLL
      for (int r = 0; r < R; r++) {
        __m512i as = _mm512_permutexvar_epi32(
            bcast4, _mm512_castsi128_si512(_mm_loadu_si128(
                        (const __m128i *)(const void *)(asum + r * x_stride + blk))));
        __m512 s = _mm512_permutexvar_ps(
            bcast4, _mm512_castps128_ps512(_mm_loadu_ps(sa + r * x_stride + blk)));
        __m512i d = _mm512_sub_epi32(t[r], _mm512_mullo_epi32(z, as));
        __m512 p = _mm512_mul_ps(_mm512_mul_ps(s, sw), _mm512_cvtepi32_ps(d));
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

static NQ_TARGET void nbits_i8_vnni(const int8_t *q, int64_t q_stride, const float *sa,
                                    const int32_t *asum, int64_t x_stride, int64_t M,
                                    const uint8_t *const *b, const float *swt, const int32_t *zt,
                                    int bits, int64_t block, int64_t n_blocks, float *out) {
  int64_t m = 0;
  for (; m + NBITS_ROWS <= M; m += NBITS_ROWS)
    nq_rows(q + m * q_stride, q_stride, sa + m * x_stride, asum + m * x_stride, x_stride, b, swt,
            zt, bits, block, n_blocks, out + m * NBITS_COLS, NBITS_ROWS);
  const int8_t *qm = q + m * q_stride;
  const float *sm = sa + m * x_stride;
  const int32_t *am = asum + m * x_stride;
  float *om = out + m * NBITS_COLS;
  switch (M - m) {
  case 3:
    nq_rows(qm, q_stride, sm, am, x_stride, b, swt, zt, bits, block, n_blocks, om, 3);
    break;
  case 2:
    nq_rows(qm, q_stride, sm, am, x_stride, b, swt, zt, bits, block, n_blocks, om, 2);
    break;
  case 1:
    nq_rows(qm, q_stride, sm, am, x_stride, b, swt, zt, bits, block, n_blocks, om, 1);
    break;
  default:
    break;
  }
}

nbits_i8_kernel_fn nbits_i8_avx512_kernel(int bits, int64_t block) {
  if ((bits != 8 && bits != 4) || block < 16 || block > NBITS_I8_MAX_BLOCK) return NULL;
  if (bits == 4 && block < 32) return NULL;
  return nbits_i8_vnni;
}
#else
nbits_i8_kernel_fn nbits_i8_avx512_kernel(int bits, int64_t block) {
  (void)bits;
  (void)block;
  return NULL;
}
#endif
