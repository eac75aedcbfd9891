/* conv — one channel of the depthwise causal convolution (kernels/conv.h). */
#include "kernels/conv.h"

#include "kernels/act.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

void conv_causal_channel(const float *x, const float *w, int64_t K, int64_t dil, float bias,
                         int silu, int64_t L, float *y) {
  for (int64_t t = 0; t < L; t++) {
    float acc = bias;
    for (int64_t k = 0; k < K; k++) acc += w[k] * x[t + k * dil];
    y[t] = silu ? act_siluf(acc) : acc;
  }
}
