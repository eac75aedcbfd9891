/* gated_delta_avx512 — GatedDeltaNet's decode step on the V-major state in AVX-512
 * (kernels/gated_delta.h: gated_delta_decode_f32_avx512). The AVX2 kernel's scheme sixteen value
 * rows wide: pass 1 reads sixteen rows from the state, transposes 16 x 16 blocks in registers,
 * decays them into a stack tile [Dk][16] and accumulates k·S; pass 2 updates the tile,
 * accumulates S·q and writes the rows back transposed. The lanes are the value rows, each sum
 * runs over the key index in increasing order, products are rounded before the adds of the two
 * sums, and the state update is one fused multiply-add on the decayed state (fmaf in the
 * reference: the replay rule of spec/abi.md §2.5): the arithmetic of gated_delta_decode_cols_ref
 * lane for lane, so the results are bit-identical to it (test_kernels checks with memcmp). The
 * last Dv % 16 rows, a Dv below 16 and a Dk above GDN512_MAX_DK (the tile lives on the stack) go
 * through the AVX2 kernel, which is bit-identical too.
 *
 * Why wider: a decode step of a batch reads and writes every sequence's recurrent state once
 * (64 sequences of the 0.8B model: 1.2 GB each way per step), so this kernel must run at memory
 * bandwidth; sixteen lanes halve the instructions per state element against AVX2, and pass 1
 * prefetches the next sixteen rows a block ahead (the hardware prefetcher does not follow sixteen
 * 512-byte streams; bench/bench_gdn_decode: 1.33x, level with an in-place scale of the same
 * bytes). Every function carries the target attribute; the rest of the library stays baseline
 * x86-64.
 */
#include <stdint.h>

#include "kernels/gated_delta.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
/* Every loop over the sixteen lanes or rows is unrolled (GCC at -O2 keeps a loop over a local
 * array of vectors in memory, and the kernel then runs at a fifth of its speed). FMA only where
 * the reference calls fmaf (the state update); the sums k·S and S·q round each
 * product before the add, as in the reference (mul then add, never fused). */
#define GDN_AVX512 __attribute__((target("avx512f,avx2,fma")))

#define GDN512_MAX_DK 256

/* In place: x[j][l] <- x[l][j] for a 16 x 16 block. */
GDN_AVX512 __attribute__((always_inline)) static inline void gdn_tr16(__m512 *x) {
  __m512 t[16], u[16];
#pragma GCC unroll 16
  for (int i = 0; i < 8; i++) {
    t[2 * i] = _mm512_unpacklo_ps(x[2 * i], x[2 * i + 1]);     /* a0 b0 a1 b1 per 128 bits */
    t[2 * i + 1] = _mm512_unpackhi_ps(x[2 * i], x[2 * i + 1]); /* a2 b2 a3 b3 */
  }
#pragma GCC unroll 16
  for (int i = 0; i < 4; i++) {
    u[4 * i] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0x44);         /* a0 b0 c0 d0 */
    u[4 * i + 1] = _mm512_shuffle_ps(t[4 * i], t[4 * i + 2], 0xEE);     /* a1 b1 c1 d1 */
    u[4 * i + 2] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0x44); /* a2 b2 c2 d2 */
    u[4 * i + 3] = _mm512_shuffle_ps(t[4 * i + 1], t[4 * i + 3], 0xEE); /* a3 b3 c3 d3 */
  }
/* 128-bit block m of u[4i + j] holds rows 4i..4i+3 of column 4m + j */
#pragma GCC unroll 16
  for (int j = 0; j < 4; j++) {
    __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x88);
    __m512 v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xDD);
    __m512 v2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x88);
    __m512 v3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xDD);
    x[j] = _mm512_shuffle_f32x4(v0, v2, 0x88);
    x[8 + j] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
    x[4 + j] = _mm512_shuffle_f32x4(v1, v3, 0x88);
    x[12 + j] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
  }
}

/* Pass 1 of sixteen value rows at key index r: x is their state at r (lane l = row c0 + l). */
GDN_AVX512 static inline __m512 gdn_dec_in16(const gated_delta_dec *p, float *T, int64_t r,
                                             __m512 x, __m512 pred) {
  if (p->gated) x = _mm512_mul_ps(x, _mm512_set1_ps(p->a));
  _mm512_store_ps(T + r * 16, x);
  if (p->delta) pred = _mm512_add_ps(pred, _mm512_mul_ps(_mm512_set1_ps(p->k[r]), x));
  return pred;
}

/* gated_delta_decode_cols_ref for every value row, sixteen rows per step with lane l = row
 * c0 + l (the reference's lanes and order, bit for bit). */
GDN_AVX512 void gated_delta_decode_f32_avx512(const gated_delta_dec *p) {
  const int64_t Dk = p->Dk, Dv = p->Dv;
  if (Dk > GDN512_MAX_DK || Dv < 16) {
    gated_delta_decode_f32_avx2(p);
    return;
  }
  _Alignas(64) float T[GDN512_MAX_DK * 16];
  int64_t c0 = 0;
  for (; c0 + 16 <= Dv; c0 += 16) {
    const float *src = p->src ? p->src + c0 * Dk : NULL;
    __m512 pred = _mm512_setzero_ps(), x[16];
    int64_t r = 0;
    /* the next sixteen rows, one block of 16 x 16 ahead: the rows of a group are 16 streams of
     * Dk floats, too short for the hardware prefetcher to follow */
    const float *next = src && c0 + 32 <= Dv ? src + 16 * Dk : NULL;
    for (; r + 16 <= Dk; r += 16) {
      if (next) {
#pragma GCC unroll 16
        for (int l = 0; l < 16; l++) _mm_prefetch((const char *)(next + l * Dk + r), _MM_HINT_T0);
      }
#pragma GCC unroll 16
      for (int l = 0; l < 16; l++)
        x[l] = src ? _mm512_loadu_ps(src + l * Dk + r) : _mm512_setzero_ps();
      gdn_tr16(x);
#pragma GCC unroll 16
      for (int j = 0; j < 16; j++) pred = gdn_dec_in16(p, T, r + j, x[j], pred);
    }
    for (; r < Dk; r++) {
      float col[16];
#pragma GCC unroll 16
      for (int l = 0; l < 16; l++) col[l] = src ? src[l * Dk + r] : 0.0f;
      pred = gdn_dec_in16(p, T, r, _mm512_loadu_ps(col), pred);
    }
    __m512 u = _mm512_loadu_ps(p->v + c0);
    if (p->delta) u = _mm512_mul_ps(_mm512_set1_ps(p->beta), _mm512_sub_ps(u, pred));
    if (p->u) _mm512_storeu_ps(p->u + c0, u);
    __m512 o = _mm512_setzero_ps();
    float *dst = p->dst ? p->dst + c0 * Dk : NULL;
    for (r = 0; r + 16 <= Dk; r += 16) {
#pragma GCC unroll 16
      for (int j = 0; j < 16; j++) {
        x[j] = _mm512_fmadd_ps(_mm512_set1_ps(p->k[r + j]), u, _mm512_load_ps(T + (r + j) * 16));
        o = _mm512_add_ps(o, _mm512_mul_ps(_mm512_set1_ps(p->q[r + j]), x[j]));
      }
      if (dst) {
        gdn_tr16(x);
#pragma GCC unroll 16
        for (int l = 0; l < 16; l++) _mm512_storeu_ps(dst + l * Dk + r, x[l]);
      }
    }
    for (; r < Dk; r++) {
      __m512 y = _mm512_fmadd_ps(_mm512_set1_ps(p->k[r]), u, _mm512_load_ps(T + r * 16));
      o = _mm512_add_ps(o, _mm512_mul_ps(_mm512_set1_ps(p->q[r]), y));
      if (dst) {
        float col[16];
        _mm512_storeu_ps(col, y);
#pragma GCC unroll 16
        for (int l = 0; l < 16; l++) dst[l * Dk + r] = col[l];
      }
    }
    _mm512_storeu_ps(p->o + c0, _mm512_mul_ps(o, _mm512_set1_ps(p->scale)));
  }
  if (c0 < Dv) { /* the last rows: the same step on rows [c0, Dv) (rows are independent) */
    gated_delta_dec rest = *p;
    rest.src = p->src ? p->src + c0 * Dk : NULL;
    rest.dst = p->dst ? p->dst + c0 * Dk : NULL;
    rest.v = p->v + c0;
    rest.o = p->o + c0;
    rest.u = p->u ? p->u + c0 : NULL;
    rest.Dv = Dv - c0;
    gated_delta_decode_f32_avx2(&rest);
  }
}
#endif
