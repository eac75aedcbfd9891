/* attend — one query row's softmax attention (kernels/attend.h). */
#include "kernels/attend.h"

#include <math.h>
#include <string.h>

/* Element offset of row t from the head's first element. */
static int64_t attend_off(const attend_kv *kv, int64_t t) {
  if (!kv->pages) return t * kv->row_stride;
  return ((int64_t)kv->pages[t / kv->page_rows] * kv->page_rows + t % kv->page_rows) *
         kv->row_stride;
}

/* n elements of base (dtype dt) from element i, as f32 (exact for every dtype accepted). */
static void attend_load(const void *base, ph_dtype dt, int64_t i, int64_t n, float *dst) {
  if (dt == PH_DTYPE_F32) {
    memcpy(dst, (const float *)base + i, (size_t)n * sizeof(float));
  } else if (dt == PH_DTYPE_F16) {
    const uint16_t *p = (const uint16_t *)base + i;
    for (int64_t e = 0; e < n; e++) dst[e] = f16_to_f32(p[e]);
  } else {
    const uint16_t *p = (const uint16_t *)base + i;
    for (int64_t e = 0; e < n; e++) dst[e] = bf16_to_f32(p[e]);
  }
}

void attend_row(const float *q, int64_t D, int64_t lo, int64_t hi, float scale, float softcap,
                const float *sink, const attend_kv *kv, float *scores, float *row, float *acc) {
  float m = -INFINITY;
  for (int64_t t = lo; t <= hi; t++) {
    attend_load(kv->k, kv->dt, attend_off(kv, t), D, row);
    float dot = 0.0f;
    for (int64_t e = 0; e < D; e++) dot += q[e] * row[e];
    float sc = dot * scale;
    if (softcap > 0.0f) sc = softcap * tanhf(sc / softcap);
    scores[t - lo] = sc;
    if (sc > m) m = sc;
  }
  if (sink && *sink > m) m = *sink;
  const int64_t Dv = kv->v_width > 0 ? kv->v_width : D;
  float sum = 0.0f;
  for (int64_t e = 0; e < Dv; e++) acc[e] = 0.0f;
  for (int64_t t = lo; t <= hi; t++) {
    const float w = expf(scores[t - lo] - m);
    sum += w;
    attend_load(kv->v, kv->dt, attend_off(kv, t), Dv, row);
    for (int64_t e = 0; e < Dv; e++) acc[e] += w * row[e];
  }
  if (sink) sum += expf(*sink - m);
  for (int64_t e = 0; e < Dv; e++) acc[e] = acc[e] / sum;
}
