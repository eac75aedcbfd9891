/* act — the reference exponential, sigmoid and SiLU and their scalar row kernels
 * (kernels/act.h). */
#include "kernels/act.h"

#include <math.h>
#include <string.h>

#include "kernels/act_impl.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* 2^k for k in [-126, 127]: a normal power of two. */
static float act_pow2(int32_t k) {
  const uint32_t bits = (uint32_t)(k + 127) << 23;
  float f;
  memcpy(&f, &bits, sizeof f);
  return f;
}

float act_expf(float x) {
  if (isnan(x)) return x + x;
  x = x < ACT_EXP_LO ? ACT_EXP_LO : x > ACT_EXP_HI ? ACT_EXP_HI : x;
  const float n = rintf(x * ACT_LOG2E);
  float r = fmaf(n, -ACT_LN2_HI, x);
  r = fmaf(n, -ACT_LN2_LO, r);
  float p = ACT_EXP_C7;
  p = fmaf(p, r, ACT_EXP_C6);
  p = fmaf(p, r, ACT_EXP_C5);
  p = fmaf(p, r, ACT_EXP_C4);
  p = fmaf(p, r, ACT_EXP_C3);
  p = fmaf(p, r, ACT_EXP_C2);
  p = fmaf(p, r, 1.0f);
  p = fmaf(p, r, 1.0f);
  const int32_t k = (int32_t)n, k1 = k / 2, k2 = k - k1;
  return (p * act_pow2(k1)) * act_pow2(k2);
}

float act_sigmoidf(float x) {
  const float e = act_expf(-fabsf(x));
  return (x >= 0.0f ? 1.0f : e) / (1.0f + e);
}

float act_siluf(float x) { return x / (1.0f + act_expf(-x)); }

static void act_exp_scalar(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = act_expf(x[i]);
}
static void act_sigmoid_scalar(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = act_sigmoidf(x[i]);
}
static void act_silu_scalar(const float *x, float *y, int64_t n) {
  for (int64_t i = 0; i < n; i++) y[i] = act_siluf(x[i]);
}

const act_kernels act_scalar_kernels = {act_exp_scalar, act_sigmoid_scalar, act_silu_scalar};
