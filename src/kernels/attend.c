/* attend — the blocked online-softmax attention of a tile of query rows (kernels/attend.h): the
 * exponential every variant shares, the portable variant (one row at a time) and the choice of
 * variant. */
#include "kernels/attend.h"

#include <math.h>
#include <string.h>

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

/* attend_expf's body, inlined into each variant's loops (the x86 build of the avx2 variant turns
 * fmaf and rintf into instructions; the operations, and so the bits, are the same). */
#define AT_EXPF_BODY(x)                                                                            \
  do {                                                                                             \
    if (isnan(x)) return x;                                                                        \
    if (x < ATTEND_EXP_MIN) return 0.0f;                                                           \
    const float n = rintf(x * ATTEND_LOG2E);                                                       \
    float r = fmaf(n, -ATTEND_LN2_HI, x);                                                          \
    r = fmaf(n, -ATTEND_LN2_LO, r);                                                                \
    float p = ATTEND_EXP_C7;                                                                       \
    p = fmaf(p, r, ATTEND_EXP_C6);                                                                 \
    p = fmaf(p, r, ATTEND_EXP_C5);                                                                 \
    p = fmaf(p, r, ATTEND_EXP_C4);                                                                 \
    p = fmaf(p, r, ATTEND_EXP_C3);                                                                 \
    p = fmaf(p, r, ATTEND_EXP_C2);                                                                 \
    p = fmaf(p, r, 1.0f);                                                                          \
    p = fmaf(p, r, 1.0f);                                                                          \
    if (n > 127.0f) return ldexpf(p, (int)n);                                                      \
    /* 2^n for n in [-115, 127] (x >= -80): a normal power of two, so the product is exact */      \
    const uint32_t bits = (uint32_t)((int32_t)n + 127) << 23;                                      \
    float two_n;                                                                                   \
    memcpy(&two_n, &bits, sizeof two_n);                                                           \
    return p * two_n;                                                                              \
  } while (0)

float attend_expf(float x) { AT_EXPF_BODY(x); }

size_t attend_work_floats(int64_t D, int64_t Dv) {
  /* avx512: q^T [D][16], key rows [KB][D], value rows [KB][Dv], a zero row [D], scores
   * [KB][16], accumulators [16][Dv], m, l, α, spare [4][16]; the scalar variant uses less */
  return (size_t)(16 * D + ATTEND_KB * D + ATTEND_KB * Dv + D + ATTEND_KB * 16 + 16 * Dv + 64);
}

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

static inline __attribute__((always_inline)) float at_exp_inline(float x) { AT_EXPF_BODY(x); }

/* One row, literally as attend.h writes it (always inlined into each variant's entry point).
 * Work: s [ATTEND_KB] scores, row [ATTEND_KB][D] the block's keys (then one value row). */
static inline __attribute__((always_inline)) void attend_one(const attend_kv *kv, int64_t D,
                                                             int64_t Dv, float scale, float softcap,
                                                             const attend_query *rq, float *s,
                                                             float *row) {
  float m = -INFINITY, l = 0.0f, *acc = rq->out;
  for (int64_t e = 0; e < Dv; e++) acc[e] = 0.0f;
  for (int64_t b = rq->lo / ATTEND_KB; b <= rq->hi / ATTEND_KB; b++) {
    const int64_t t0 = b * ATTEND_KB > rq->lo ? b * ATTEND_KB : rq->lo;
    const int64_t t1 =
        b * ATTEND_KB + ATTEND_KB - 1 < rq->hi ? b * ATTEND_KB + ATTEND_KB - 1 : rq->hi;
    float mb = -INFINITY;
    for (int64_t t = t0; t <= t1; t++)
      attend_load(kv->k, kv->dt, attend_off(kv, t), D, row + (t - t0) * D);
    for (int64_t t = t0; t <= t1; t += 8) {
      /* up to 8 keys' fma chains side by side (each chain is still one key's, in e order) */
      const int nt = t1 - t + 1 < 8 ? (int)(t1 - t + 1) : 8;
      const float *kr = row + (t - t0) * D;
      float dot[8] = {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 0.0f};
      if (nt == 8) { /* named accumulators: kept in registers */
        float d0 = 0.0f, d1 = 0.0f, d2 = 0.0f, d3 = 0.0f, d4 = 0.0f, d5 = 0.0f, d6 = 0.0f;
        float d7 = 0.0f;
        for (int64_t e = 0; e < D; e++) {
          const float qe = rq->q[e];
          d0 = fmaf(qe, kr[e], d0);
          d1 = fmaf(qe, kr[D + e], d1);
          d2 = fmaf(qe, kr[2 * D + e], d2);
          d3 = fmaf(qe, kr[3 * D + e], d3);
          d4 = fmaf(qe, kr[4 * D + e], d4);
          d5 = fmaf(qe, kr[5 * D + e], d5);
          d6 = fmaf(qe, kr[6 * D + e], d6);
          d7 = fmaf(qe, kr[7 * D + e], d7);
        }
        dot[0] = d0, dot[1] = d1, dot[2] = d2, dot[3] = d3;
        dot[4] = d4, dot[5] = d5, dot[6] = d6, dot[7] = d7;
      } else {
        for (int64_t e = 0; e < D; e++)
          for (int j = 0; j < nt; j++) dot[j] = fmaf(rq->q[e], kr[j * D + e], dot[j]);
      }
      for (int j = 0; j < nt; j++) {
        float sc = dot[j] * scale;
        if (softcap > 0.0f) sc = softcap * tanhf(sc / softcap);
        s[t - t0 + j] = sc;
        if (sc > mb) mb = sc;
      }
    }
    const float mn = mb > m ? mb : m;
    const float alpha = mn == m ? 1.0f : at_exp_inline(m - mn);
    l = l * alpha;
    for (int64_t e = 0; e < Dv; e++) acc[e] = acc[e] * alpha;
    for (int64_t t = t0; t <= t1; t++) {
      const float p = at_exp_inline(s[t - t0] - mn);
      l = l + p;
      attend_load(kv->v, kv->dt, attend_off(kv, t), Dv, row);
      for (int64_t e = 0; e < Dv; e++) acc[e] = fmaf(p, row[e], acc[e]);
    }
    m = mn;
  }
  float a = 1.0f;
  if (rq->sink) {
    const float sk = *rq->sink, m2 = sk > m ? sk : m;
    a = m2 == m ? 1.0f : at_exp_inline(m - m2);
    l = l * a;
    l = l + at_exp_inline(sk - m2);
  }
  for (int64_t e = 0; e < Dv; e++) {
    const float o = acc[e] * a;
    acc[e] = o / l;
  }
}

void attend_rows_scalar(const attend_kv *kv, int64_t D, float scale, float softcap,
                        const attend_query *rows, int n_rows, float *work) {
  const int64_t Dv = kv->v_width > 0 ? kv->v_width : D;
  for (int i = 0; i < n_rows; i++)
    attend_one(kv, D, Dv, scale, softcap, &rows[i], work, work + ATTEND_KB);
}

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
/* The same code built for AVX2+FMA: fmaf and rintf become single instructions. */
__attribute__((target("avx2,fma,f16c"))) void attend_rows_avx2(const attend_kv *kv, int64_t D,
                                                               float scale, float softcap,
                                                               const attend_query *rows, int n_rows,
                                                               float *work) {
  const int64_t Dv = kv->v_width > 0 ? kv->v_width : D;
  for (int i = 0; i < n_rows; i++)
    attend_one(kv, D, Dv, scale, softcap, &rows[i], work, work + ATTEND_KB);
}
#endif

attend_rows_fn attend_rows_for(kernel_variant v) {
#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
  if (v == KERNEL_AVX512 && kernel_variant_available(KERNEL_AVX512)) return attend_rows_avx512;
  if (v >= KERNEL_AVX2 && kernel_variant_available(KERNEL_AVX2)) return attend_rows_avx2;
#else
  (void)v;
#endif
  return attend_rows_scalar;
}
