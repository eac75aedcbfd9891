/* matmul_nbits — scalar reference kernels of MatMulNBits (contract: matmul_nbits.h). */
#include "kernels/matmul_nbits.h"

#include <float.h>
#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

float nbits_zero_point_u8(const uint8_t *zp_col, int bits, int64_t b) {
  if (bits == 8) return (float)zp_col[b];
  uint8_t byte = zp_col[b / 2];
  return (float)((b & 1) ? (byte >> 4) : (byte & 0x0F));
}

void nbits_dequant_col(const uint8_t *b_col, const float *scales, const float *zp, int bits,
                       int64_t block, int64_t K, float *w) {
  int64_t blob = block * bits / 8;
  for (int64_t k0 = 0, b = 0; k0 < K; k0 += block, b++) {
    const uint8_t *p = b_col + b * blob;
    int64_t len = K - k0 < block ? K - k0 : block;
    float s = scales[b], z = zp[b];
    for (int64_t j = 0; j < len; j++) {
      int q = bits == 8 ? p[j] : ((j & 1) ? (p[j / 2] >> 4) : (p[j / 2] & 0x0F));
      w[k0 + j] = ((float)q - z) * s;
    }
  }
}

float nbits_dot(const float *a, const float *w, int64_t K) {
  float acc = 0.0f;
  for (int64_t k = 0; k < K; k++) {
    float p = a[k] * w[k];
    acc += p;
  }
  return acc;
}

/* ---- accuracy_level 4 (the rule: matmul_nbits.h) ------------------------------------------- */

/* x rounded to the nearest integer, ties to even, for |x| < 2^22: adding 1.5 * 2^23 lands in
 * [2^23, 2^24), where the f32 spacing is 1, so the add itself rounds (the default rounding
 * mode, like MLAS's _mm512_roundscale_ps(_MM_ROUND_NEAREST)); the subtraction is exact. */
static float nbits_rint(float x) {
  float t = x + 12582912.0f;
  return t - 12582912.0f;
}

void nbits_quantize_row_i8(const float *a, int64_t K, int64_t block, int8_t *q, float *sa,
                           int32_t *asum) {
  for (int64_t k0 = 0, b = 0; k0 < K; k0 += block, b++) {
    int64_t len = K - k0 < block ? K - k0 : block;
    float amax = 0.0f;
    int finite = 1;
    for (int64_t j = 0; j < len; j++) {
      float x = fabsf(a[k0 + j]);
      if (!(x <= FLT_MAX)) finite = 0; /* inf or NaN */
      if (x > amax) amax = x;
    }
    int32_t sum = 0;
    if (!finite || amax < FLT_MIN) {
      sa[b] = finite ? 0.0f : NAN;
      for (int64_t j = 0; j < block; j++) q[k0 + j] = 0;
    } else {
      sa[b] = amax / 127.0f;
      float r = 127.0f / amax;
      for (int64_t j = 0; j < len; j++) {
        float v = nbits_rint(a[k0 + j] * r);
        v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v; /* never taken; a bound kept */
        q[k0 + j] = (int8_t)v;
        sum += (int32_t)v;
      }
      for (int64_t j = len; j < block; j++) q[k0 + j] = 0;
    }
    asum[b] = sum;
  }
}

float nbits_dot_i8(const int8_t *q, const float *sa, const int32_t *asum, const uint8_t *b_col,
                   const float *sw, const int32_t *zp, int bits, int64_t block, int64_t K) {
  int64_t blob = block * bits / 8;
  float acc = 0.0f;
  for (int64_t k0 = 0, b = 0; k0 < K; k0 += block, b++) {
    const uint8_t *p = b_col + b * blob;
    int64_t len = K - k0 < block ? K - k0 : block;
    int32_t dot = 0;
    for (int64_t j = 0; j < len; j++) {
      int32_t code = bits == 8 ? p[j] : ((j & 1) ? (p[j / 2] >> 4) : (p[j / 2] & 0x0F));
      dot += code * q[k0 + j];
    }
    int32_t d = dot - zp[b] * asum[b];
    float t = sa[b] * sw[b];
    float prod = t * (float)d;
    acc = acc + prod;
  }
  return acc;
}

int64_t nbits_i8_row_blocks(int bits, int64_t block, int64_t n_blocks) {
  return block * bits / 8 < 64 ? (n_blocks + 3) / 4 * 4 : n_blocks;
}

void nbits_i8_avx512_layout(int8_t *q, int64_t n) {
  int8_t t[128];
  for (int64_t g = 0; g + 128 <= n; g += 128) {
    for (int j = 0; j < 64; j++) {
      t[j] = q[g + 2 * j];
      t[64 + j] = q[g + 2 * j + 1];
    }
    memcpy(q + g, t, sizeof t);
  }
}
