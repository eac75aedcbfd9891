/* matmul_nbits — scalar reference kernels of MatMulNBits (contract: matmul_nbits.h). */
#include "kernels/matmul_nbits.h"

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
