/* vec — the f32 vector primitives the kernels share (kernels/gated_delta.c, for LinearAttention
 * and GatedDeltaNet; the Softmax and MoE ops' row softmax). Single-threaded and pure; the summation
 * order of vec_dot depends on n alone (eight fixed lanes combined in a fixed tree), which keeps
 * every caller batch-invariant. Written as eight explicit lanes so that baseline -O2 vectorizes
 * them. */
#ifndef PH_KERNELS_VEC_H
#define PH_KERNELS_VEC_H

#include <math.h>
#include <stdint.h>

/* Σ a[i] b[i] over [0, n). */
static inline float vec_dot(const float *restrict a, const float *restrict b, int64_t n) {
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0, s4 = 0, s5 = 0, s6 = 0, s7 = 0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
    s4 += a[i + 4] * b[i + 4];
    s5 += a[i + 5] * b[i + 5];
    s6 += a[i + 6] * b[i + 6];
    s7 += a[i + 7] * b[i + 7];
  }
  float s = ((s0 + s4) + (s1 + s5)) + ((s2 + s6) + (s3 + s7));
  for (; i < n; i++) s += a[i] * b[i];
  return s;
}

/* y[0..n) += a * x[0..n) */
static inline void vec_axpy(float *restrict y, float a, const float *restrict x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    y[i] += a * x[i];
    y[i + 1] += a * x[i + 1];
    y[i + 2] += a * x[i + 2];
    y[i + 3] += a * x[i + 3];
    y[i + 4] += a * x[i + 4];
    y[i + 5] += a * x[i + 5];
    y[i + 6] += a * x[i + 6];
    y[i + 7] += a * x[i + 7];
  }
  for (; i < n; i++) y[i] += a * x[i];
}

/* y[c] = Σ_r w[r] S[r][c] for a K-major state S [Dk][Dv]: the state read through a [Dk] vector. */
static inline void vec_state_read(float *y, const float *S, const float *w, int64_t Dk,
                                  int64_t Dv) {
  for (int64_t c = 0; c < Dv; c++) y[c] = 0.0f;
  for (int64_t r = 0; r < Dk; r++) vec_axpy(y, w[r], S + r * Dv, Dv);
}

/* v[0..n) = softmax(v) in place (n >= 1): max, e_i = expf(v_i - max) summed in increasing index,
 * each e_i divided by the sum. */
static inline void vec_softmax(float *v, int64_t n) {
  float mx = v[0];
  for (int64_t i = 1; i < n; i++) mx = v[i] > mx ? v[i] : mx;
  float sum = 0.0f;
  for (int64_t i = 0; i < n; i++) {
    v[i] = expf(v[i] - mx);
    sum += v[i];
  }
  for (int64_t i = 0; i < n; i++) v[i] /= sum;
}

#endif /* PH_KERNELS_VEC_H */
