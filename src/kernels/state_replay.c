/* state_replay — replay of captured compact state updates (kernels/state_replay.h). */
#include "kernels/state_replay.h"

#include <math.h>
#include <string.h>

#include "kernels/dispatch.h"

void state_replay_conv(const void *src, void *dst, const void *values, int64_t conv_dim,
                       int64_t width, int64_t a, ph_dtype dt) {
  const size_t es = dtype_size(dt);
  const int64_t keep = a < width ? width - a : 0; /* old columns that stay */
  const int64_t first = a - (width - keep);       /* first appended slot */
  for (int64_t c = 0; c < conv_dim; c++) {
    char *d = (char *)dst + (size_t)(c * width) * es;
    const char *s = (const char *)src + (size_t)(c * width) * es;
    if (keep > 0) memmove(d, s + (size_t)(width - keep) * es, (size_t)keep * es);
    for (int64_t t = first; t < a; t++)
      memcpy(d + (size_t)(keep + t - first) * es,
             (const char *)values + (size_t)(t * conv_dim + c) * es, es);
  }
}

void state_replay_recurrent_ref(const float *src, float *dst, const float *capsule, int64_t C,
                                int64_t Hv, int64_t Hk, int64_t Dk, int64_t Dv, int64_t a) {
  const float *decay = capsule, *key = capsule + C * Hv, *delta = key + C * Hk * Dk;
  const int64_t ratio = Hv / Hk;
  for (int64_t hv = 0; hv < Hv; hv++) {
    const float *S0 = src + hv * Dv * Dk;
    float *S = dst + hv * Dv * Dk;
    for (int64_t c = 0; c < Dv; c++)
      for (int64_t r = 0; r < Dk; r++) {
        float s = S0[c * Dk + r];
        for (int64_t t = 0; t < a; t++)
          s = fmaf(key[(t * Hk + hv / ratio) * Dk + r], delta[(t * Hv + hv) * Dv + c],
                   s * decay[t * Hv + hv]);
        S[c * Dk + r] = s;
      }
  }
}

void state_replay_recurrent(const float *src, float *dst, const float *capsule, int64_t C,
                            int64_t Hv, int64_t Hk, int64_t Dk, int64_t Dv, int64_t a) {
  const state_replay_recurrent_fn f = kernel_set_of(kernel_variant_active())->replay_recurrent;
  (f ? f : state_replay_recurrent_ref)(src, dst, capsule, C, Hv, Hk, Dk, Dv, a);
}
