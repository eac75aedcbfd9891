/* gated_delta_chunk_avx512 — the chunked WY/UT form of the gated delta rule as blocked matrix
 * products in AVX-512 F (kernels/gated_delta.h: gated_delta_chunk_avx512), the dispatch table's
 * gated_delta_chunk for the avx512 variant.
 *
 * Every product is one register tile shape: up to GD_MR rows by up to GD_NW 16-lane columns
 * (64 floats), C[i][..] = init_i + Σ_k a(i, k) B[k][..] with k increasing and one fused
 * multiply-add per term, the last column block masked for a width that is not a multiple of 16.
 * The tiles walk column blocks outermost (the B panel stays in L1) and row tiles inside. With
 * S0 the state at the chunk's start ([Dk][Dv], K-major), in this order:
 *   1. γ and e^γ (gated_delta_chunk_decays, shared with the reference);
 *   2. Kt = K^T; the pairwise products P = K K^T and Q K^T, lower triangle only (row tile t0
 *      computes columns s < t0 + GD_MR, the rest is never read), then scaled per element:
 *      −A_ts = −(β_t e^{γ_t−γ_s}) P_ts (s < t), QK_ts = e^{γ_t−γ_s} (q_t·k_s) (s <= t). The
 *      negated A makes every later product an accumulation. Per key dim the decay sits inside
 *      the dot product, formed as the reference forms it (vec_dot of e⊙k_s);
 *   3. Kt = (e^{γ_L−γ_s} k_s)^T, then K' = −β e^γ⊙K, Q' = e^γ⊙Q (in place), V = β⊙V;
 *   4. U = β⊙V + K' S0 (in V), then (I + A) U = that, forward substitution in row tiles of
 *      GD_MR: a row's sum runs over s < t in increasing s, the rows of its own tile coming from
 *      registers as they become final;
 *   5. O = Q' S0, then O_t += Σ_{s<=t} QK_ts U_s (increasing s), times scale, to store();
 *   6. S_end = e^{γ_L} S0 + Kt U (each S0 element rounded once by its decay, then the L terms).
 * Rounding differs from the reference (sums in another order and fused), within the bound
 * test_kernels derives. The order depends on (Dk, Dv, G, L, per_dim, gated, delta) only, never
 * on the thread or the batch.
 */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "kernels/gated_delta.h"
#include "kernels/matmul_wt.h" /* WT_X86, WT_AVX512, WT_INLINE, WT_UNROLL */
#include "kernels/vec.h"

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#endif

#if WT_X86
#include <immintrin.h>

#define GD_MR 4 /* rows of a register tile */
#define GD_NW 4 /* 16-lane columns of a register tile: 64 floats */

/* The mask of a block's last 16-lane column when the block is n floats wide. */
static inline __mmask16 gd_last_mask(int64_t n) {
  int64_t r = n % 16;
  return r ? (__mmask16)((1u << (unsigned)r) - 1u) : (__mmask16)0xffff;
}

/* Rows i < mr, columns [0, 16 nw) (the last column masked by last) of
 *   Y[i] = init_i + Σ_{k<K} A[i*lda + k] B[k*ldb + ..],   k increasing, one FMA per term,
 * with init_i = Y[i] (load) times rs[i] (when rs), or 0 (no load). */
static WT_INLINE WT_AVX512 void gd_tile(const int mr, const int nw, __mmask16 last, int64_t K,
                                        const float *A, int64_t lda, const float *B, int64_t ldb,
                                        float *Y, int64_t ldy, int load, const float *rs) {
  __m512 acc[GD_MR][GD_NW];
  WT_UNROLL for (int i = 0; i < GD_MR; i++) {
    if (i >= mr) break;
    WT_UNROLL for (int j = 0; j < GD_NW; j++) {
      if (j >= nw) break;
      __mmask16 m = j == nw - 1 ? last : (__mmask16)0xffff;
      acc[i][j] = load ? _mm512_maskz_loadu_ps(m, Y + i * ldy + 16 * j) : _mm512_setzero_ps();
      if (rs) acc[i][j] = _mm512_mul_ps(acc[i][j], _mm512_set1_ps(rs[i]));
    }
  }
  for (int64_t k = 0; k < K; k++) {
    __m512 b[GD_NW];
    WT_UNROLL for (int j = 0; j < GD_NW; j++) {
      if (j >= nw) break;
      __mmask16 m = j == nw - 1 ? last : (__mmask16)0xffff;
      b[j] = _mm512_maskz_loadu_ps(m, B + k * ldb + 16 * j);
    }
    WT_UNROLL for (int i = 0; i < GD_MR; i++) {
      if (i >= mr) break;
      __m512 a = _mm512_set1_ps(A[i * lda + k]);
      WT_UNROLL for (int j = 0; j < GD_NW; j++) {
        if (j >= nw) break;
        acc[i][j] = _mm512_fmadd_ps(a, b[j], acc[i][j]);
      }
    }
  }
  WT_UNROLL for (int i = 0; i < GD_MR; i++) {
    if (i >= mr) break;
    WT_UNROLL for (int j = 0; j < GD_NW; j++) {
      if (j >= nw) break;
      __mmask16 m = j == nw - 1 ? last : (__mmask16)0xffff;
      _mm512_mask_storeu_ps(Y + i * ldy + 16 * j, m, acc[i][j]);
    }
  }
}

/* The triangular tile, rows t0 + i (i < mr) of a lower-triangular product, columns as gd_tile:
 *   solve (Y == X, rows in place): X[t] = X[t] + Σ_{s<t} M[t][s] X[s]
 *   else:                          Y[t] = Y[t] + Σ_{s<=t} M[t][s] X[s]
 * s increasing, one FMA per term. Rows s < t0 are read from X (final: earlier tiles); rows of
 * this tile enter as they become final (solve: from registers, stored at that point). */
static WT_INLINE WT_AVX512 void gd_tri(const int mr, const int nw, __mmask16 last, int64_t t0,
                                       const float *M, int64_t ldm, float *X, int64_t ldx, float *Y,
                                       int64_t ldy, int solve) {
  __m512 acc[GD_MR][GD_NW];
  WT_UNROLL for (int i = 0; i < GD_MR; i++) {
    if (i >= mr) break;
    WT_UNROLL for (int j = 0; j < GD_NW; j++) {
      if (j >= nw) break;
      __mmask16 m = j == nw - 1 ? last : (__mmask16)0xffff;
      acc[i][j] = _mm512_maskz_loadu_ps(m, Y + (t0 + i) * ldy + 16 * j);
    }
  }
  const float *Mt = M + t0 * ldm;
  for (int64_t s = 0; s < t0; s++) {
    __m512 b[GD_NW];
    WT_UNROLL for (int j = 0; j < GD_NW; j++) {
      if (j >= nw) break;
      __mmask16 m = j == nw - 1 ? last : (__mmask16)0xffff;
      b[j] = _mm512_maskz_loadu_ps(m, X + s * ldx + 16 * j);
    }
    WT_UNROLL for (int i = 0; i < GD_MR; i++) {
      if (i >= mr) break;
      __m512 a = _mm512_set1_ps(Mt[i * ldm + s]);
      WT_UNROLL for (int j = 0; j < GD_NW; j++) {
        if (j >= nw) break;
        acc[i][j] = _mm512_fmadd_ps(a, b[j], acc[i][j]);
      }
    }
  }
  WT_UNROLL for (int jj = 0; jj < GD_MR; jj++) { /* s = t0 + jj */
    if (jj >= mr) break;
    __m512 b[GD_NW];
    WT_UNROLL for (int j = 0; j < GD_NW; j++) {
      if (j >= nw) break;
      __mmask16 m = j == nw - 1 ? last : (__mmask16)0xffff;
      if (solve) {
        _mm512_mask_storeu_ps(X + (t0 + jj) * ldx + 16 * j, m, acc[jj][j]);
        b[j] = acc[jj][j];
      } else {
        b[j] = _mm512_maskz_loadu_ps(m, X + (t0 + jj) * ldx + 16 * j);
      }
    }
    WT_UNROLL for (int i = 0; i < GD_MR; i++) {
      if (i >= mr || i < jj || (solve && i == jj)) continue;
      __m512 a = _mm512_set1_ps(Mt[i * ldm + t0 + jj]);
      WT_UNROLL for (int j = 0; j < GD_NW; j++) {
        if (j >= nw) break;
        acc[i][j] = _mm512_fmadd_ps(a, b[j], acc[i][j]);
      }
    }
  }
  if (!solve) {
    WT_UNROLL for (int i = 0; i < GD_MR; i++) {
      if (i >= mr) break;
      WT_UNROLL for (int j = 0; j < GD_NW; j++) {
        if (j >= nw) break;
        __mmask16 m = j == nw - 1 ? last : (__mmask16)0xffff;
        _mm512_mask_storeu_ps(Y + (t0 + i) * ldy + 16 * j, m, acc[i][j]);
      }
    }
  }
}

/* gd_tile and gd_tri with mr, nw as constants (1..GD_MR, 1..GD_NW). */
#define GD_CASES(X)                                                                                \
  X(1, 1)                                                                                          \
  X(1, 2)                                                                                          \
  X(1, 3)                                                                                          \
  X(1, 4)                                                                                          \
  X(2, 1) X(2, 2) X(2, 3) X(2, 4) X(3, 1) X(3, 2) X(3, 3) X(3, 4) X(4, 1) X(4, 2) X(4, 3) X(4, 4)

static WT_AVX512 void gd_tile_any(int mr, int nw, __mmask16 last, int64_t K, const float *A,
                                  int64_t lda, const float *B, int64_t ldb, float *Y, int64_t ldy,
                                  int load, const float *rs) {
  switch (mr * 8 + nw) {
#define GD_TILE_CASE(r, w)                                                                         \
  case r * 8 + w:                                                                                  \
    gd_tile(r, w, last, K, A, lda, B, ldb, Y, ldy, load, rs);                                      \
    break;
    GD_CASES(GD_TILE_CASE)
#undef GD_TILE_CASE
  default:
    break;
  }
}

static WT_AVX512 void gd_tri_any(int mr, int nw, __mmask16 last, int64_t t0, const float *M,
                                 int64_t ldm, float *X, int64_t ldx, float *Y, int64_t ldy,
                                 int solve) {
  switch (mr * 8 + nw) {
#define GD_TRI_CASE(r, w)                                                                          \
  case r * 8 + w:                                                                                  \
    gd_tri(r, w, last, t0, M, ldm, X, ldx, Y, ldy, solve);                                         \
    break;
    GD_CASES(GD_TRI_CASE)
#undef GD_TRI_CASE
  default:
    break;
  }
}

/* Y [M][N] = init + A [M][K] B [K][N] (row-major, leading dims lda/ldb/ldy), gd_tile's init. */
static WT_AVX512 void gd_gemm(int64_t M, int64_t N, int64_t K, const float *A, int64_t lda,
                              const float *B, int64_t ldb, float *Y, int64_t ldy, int load,
                              const float *rs) {
  for (int64_t c0 = 0; c0 < N; c0 += 16 * GD_NW) {
    int64_t n = N - c0 < 16 * GD_NW ? N - c0 : 16 * GD_NW;
    int nw = (int)((n + 15) / 16);
    __mmask16 last = gd_last_mask(n);
    for (int64_t r0 = 0; r0 < M; r0 += GD_MR) {
      int mr = (int)(M - r0 < GD_MR ? M - r0 : GD_MR);
      gd_tile_any(mr, nw, last, K, A + r0 * lda, lda, B + c0, ldb, Y + r0 * ldy + c0, ldy, load,
                  rs ? rs + r0 : NULL);
    }
  }
}

/* The lower triangle (s < t0 + GD_MR per row tile) of Y [L][L] = A [L][K] Kt [K][L]. */
static WT_AVX512 void gd_gram(int64_t L, int64_t K, const float *A, int64_t lda, const float *Kt,
                              int64_t ldk, float *Y, int64_t ldy) {
  for (int64_t t0 = 0; t0 < L; t0 += GD_MR) {
    int mr = (int)(L - t0 < GD_MR ? L - t0 : GD_MR);
    int64_t n = t0 + mr;
    for (int64_t c0 = 0; c0 < n; c0 += 16 * GD_NW) {
      int64_t w = n - c0 < 16 * GD_NW ? n - c0 : 16 * GD_NW;
      gd_tile_any(mr, (int)((w + 15) / 16), gd_last_mask(w), K, A + t0 * lda, lda, Kt + c0, ldk,
                  Y + t0 * ldy + c0, ldy, 0, NULL);
    }
  }
}

/* Rows [0, L) of the triangular product (gd_tri), column blocks outermost. */
static WT_AVX512 void gd_lower(int64_t L, int64_t N, const float *M, int64_t ldm, float *X,
                               int64_t ldx, float *Y, int64_t ldy, int solve) {
  for (int64_t c0 = 0; c0 < N; c0 += 16 * GD_NW) {
    int64_t n = N - c0 < 16 * GD_NW ? N - c0 : 16 * GD_NW;
    int nw = (int)((n + 15) / 16);
    __mmask16 last = gd_last_mask(n);
    for (int64_t t0 = 0; t0 < L; t0 += GD_MR) {
      int mr = (int)(L - t0 < GD_MR ? L - t0 : GD_MR);
      gd_tri_any(mr, nw, last, t0, M, ldm, X + c0, ldx, Y + c0, ldy, solve);
    }
  }
}

/* x[i] = a x[i], i < n. */
static WT_AVX512 void gd_vscale(float *x, float a, int64_t n) {
  __m512 va = _mm512_set1_ps(a);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : gd_last_mask(n - i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(va, _mm512_maskz_loadu_ps(m, x + i)));
  }
}

/* x[i] = w[i] x[i], i < n. */
static WT_AVX512 void gd_vmul(float *x, const float *w, int64_t n) {
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : gd_last_mask(n - i);
    __m512 vw = _mm512_maskz_loadu_ps(m, w + i);
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(vw, _mm512_maskz_loadu_ps(m, x + i)));
  }
}

/* x[i] = −(b w[i]) x[i], i < n: the right-hand side's keys, per key dim. */
static WT_AVX512 void gd_vnegmul(float *x, float b, const float *w, int64_t n) {
  __m512 vb = _mm512_set1_ps(b);
  __m512i sign = _mm512_set1_epi32((int)0x80000000u);
  for (int64_t i = 0; i < n; i += 16) {
    __mmask16 m = n - i >= 16 ? (__mmask16)0xffff : gd_last_mask(n - i);
    __m512 f = _mm512_castsi512_ps(_mm512_xor_si512(
        _mm512_castps_si512(_mm512_mul_ps(vb, _mm512_maskz_loadu_ps(m, w + i))), sign));
    _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(f, _mm512_maskz_loadu_ps(m, x + i)));
  }
}

/* Kt[r][s] = e_s K[s][r] (e NULL: K[s][r]) for s < L, r < Dk: a column of K gathered per
 * 16 tokens. */
static WT_AVX512 void gd_transpose(const float *K, int64_t Dk, int64_t L, const float *e, float *Kt,
                                   int64_t ldt) {
  const __m512i idx =
      _mm512_mullo_epi32(_mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15),
                         _mm512_set1_epi32((int)Dk));
  for (int64_t s0 = 0; s0 < L; s0 += 16) {
    __mmask16 m = L - s0 >= 16 ? (__mmask16)0xffff : gd_last_mask(L - s0);
    __m512 ve = e ? _mm512_maskz_loadu_ps(m, e + s0) : _mm512_setzero_ps();
    for (int64_t r = 0; r < Dk; r++) {
      __m512 v = _mm512_mask_i32gather_ps(_mm512_setzero_ps(), m, idx, K + s0 * Dk + r, 4);
      if (e) v = _mm512_mul_ps(ve, v);
      _mm512_mask_storeu_ps(Kt + r * ldt + s0, m, v);
    }
  }
}

WT_AVX512 void gated_delta_chunk_avx512(const gated_delta_shape *sh, const gated_delta_ws *ws,
                                        int64_t L, gated_delta_store_fn store, void *ctx) {
  const int64_t G = sh->G, C = sh->C, Dk = sh->Dk, Dv = sh->Dv;
  const int per_dim = sh->per_dim, delta = sh->delta;
  const int64_t Dg = per_dim ? Dk : 1;
  float *S = ws->S, *K = ws->K, *U = ws->V, *Kt = ws->Kt, *rs = ws->t0;

  gated_delta_chunk_decays(sh, ws, L);

  /* 2. pairwise products, lower triangle */
  gd_transpose(K, Dk, L, NULL, Kt, C);
  if (!per_dim) {
    if (delta) gd_gram(L, Dk, K, Dk, Kt, C, ws->A, C);
    for (int64_t jq = 0; jq < G; jq++)
      gd_gram(L, Dk, ws->Q + jq * C * Dk, Dk, Kt, C, ws->QK + jq * C * C, C);
    for (int64_t t = 0; t < L; t++)
      for (int64_t s = 0; s <= t; s++) {
        float e = expf((float)(ws->gam[t] - ws->gam[s]));
        if (delta && s < t) ws->A[t * C + s] *= -(ws->beta[t] * e);
        for (int64_t jq = 0; jq < G; jq++) ws->QK[(jq * C + t) * C + s] *= e;
      }
  } else {
    float *tmp = ws->t0;
    for (int64_t t = 0; t < L; t++) {
      const float *kt = K + t * Dk;
      const double *gt = ws->gam + t * Dk;
      for (int64_t s = 0; s <= t; s++) {
        const float *ks = K + s * Dk;
        const double *gs = ws->gam + s * Dk;
        for (int64_t r = 0; r < Dk; r++) tmp[r] = expf((float)(gt[r] - gs[r])) * ks[r];
        if (delta && s < t) ws->A[t * C + s] = -(ws->beta[t] * vec_dot(kt, tmp, Dk));
        for (int64_t jq = 0; jq < G; jq++)
          ws->QK[(jq * C + t) * C + s] = vec_dot(ws->Q + (jq * C + t) * Dk, tmp, Dk);
      }
    }
  }

  /* 3. the decayed keys for the end state (transposed), then K', Q', β⊙V in place */
  const double *gend = ws->gam + (L - 1) * Dg;
  if (per_dim) {
    for (int64_t s = 0; s < L; s++) {
      const double *gs = ws->gam + s * Dk;
      const float *ks = K + s * Dk;
      for (int64_t r = 0; r < Dk; r++) Kt[r * C + s] = expf((float)(gend[r] - gs[r])) * ks[r];
    }
  } else {
    float *es = ws->O; /* [L] of O's room (G C Dv >= C floats), free until step 5 */
    for (int64_t s = 0; s < L; s++) es[s] = expf((float)(gend[0] - ws->gam[s]));
    gd_transpose(K, Dk, L, es, Kt, C);
  }
  for (int64_t t = 0; t < L; t++) {
    const float *eg = ws->eg + t * Dg;
    if (delta) {
      float *kt = K + t * Dk, b = ws->beta[t];
      if (per_dim)
        gd_vnegmul(kt, b, eg, Dk);
      else
        gd_vscale(kt, -(b * eg[0]), Dk);
      gd_vscale(U + t * Dv, b, Dv);
    }
    for (int64_t jq = 0; jq < G; jq++) {
      float *qt = ws->Q + (jq * C + t) * Dk;
      if (per_dim)
        gd_vmul(qt, eg, Dk);
      else
        gd_vscale(qt, eg[0], Dk);
    }
  }

  /* 4. U: the right-hand side, then the forward substitution */
  if (delta) {
    gd_gemm(L, Dv, Dk, K, Dk, S, Dv, U, Dv, 1, NULL);
    gd_lower(L, Dv, ws->A, C, U, Dv, U, Dv, 1);
  }

  /* 5. outputs */
  for (int64_t jq = 0; jq < G; jq++) {
    float *O = ws->O + jq * C * Dv;
    gd_gemm(L, Dv, Dk, ws->Q + jq * C * Dk, Dk, S, Dv, O, Dv, 0, NULL);
    gd_lower(L, Dv, ws->QK + jq * C * C, C, U, Dv, O, Dv, 0);
    for (int64_t t = 0; t < L; t++) {
      float *o = O + t * Dv;
      gd_vscale(o, sh->scale, Dv);
      store(ctx, jq, t, o);
    }
  }

  /* 6. the end state */
  const float *egend = ws->eg + (L - 1) * Dg;
  for (int64_t r = 0; r < Dk; r++) rs[r] = egend[per_dim ? r : 0];
  gd_gemm(Dk, Dv, L, Kt, C, U, Dv, S, Dv, 1, sh->gated ? rs : NULL);
}

#else

void gated_delta_chunk_avx512(const gated_delta_shape *sh, const gated_delta_ws *ws, int64_t L,
                              gated_delta_store_fn store, void *ctx) {
  gated_delta_chunk(sh, ws, L, store, ctx); /* never in the table off x86 */
}

#endif
