/* rope — the rotary rotation of one head (kernels/rope.h). */
#include "kernels/rope.h"

void rope_rotate_f32(const float *x, const float *c, const float *s, int64_t rot, int interleaved,
                     float *y) {
  const int64_t h = rot / 2;
  if (interleaved) {
    for (int64_t i = 0; i < h; i++) {
      const float a = x[2 * i], b = x[2 * i + 1];
      const float ac = a * c[i], bs = b * s[i], bc = b * c[i], as = a * s[i];
      y[2 * i] = ac - bs;
      y[2 * i + 1] = bc + as;
    }
  } else {
    /* each product rounded on its own (separate statements: no compiler may contract them into
     * an fma), so the plain-op form of RoPE (Mul, Mul, Sub) gives the same bits */
    for (int64_t i = 0; i < h; i++) {
      const float a = x[i], b = x[i + h];
      const float ac = a * c[i], bs = b * s[i], bc = b * c[i], as = a * s[i];
      y[i] = ac - bs;
      y[i + h] = bc + as;
    }
  }
}
