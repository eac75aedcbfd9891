/* test_kernels — one grid over every kernel × every variant × a grid of shapes, against the
 * scalar reference (in the style of ggml's test-backend-ops), driven by the dispatch table
 * (kernels/dispatch.h): each column of kernel_set has one grid function below, and every
 * variant this CPU runs is checked through its row of the table. A new kernel column adds one
 * grid function to COLUMNS; a new variant row is picked up with no change here.
 *
 * What each kernel promises, and so what is checked:
 *   matmul_wt           every variant: each row count R gives the bits of R = 1 (batch
 *                       invariance); SIMD variants: NMSE against the scalar reference at most
 *                       MATMUL_WT_NMSE (FMA rounding only) and the bits of every other SIMD
 *                       variant (one order, lane for lane).
 *   gated_delta_decode  the bits of a plain V-major loop of spec/abi.md §2.4 with the fmaf state
 *                       update of §2.5 (written here, independent of the kernels' tiling):
 *                       output, final state and delta row, with the state absent, separate or
 *                       aliased, and no final state asked for.
 *   gated_delta_chunk   every variant's chunk kernel against the reference per element within
 *                       twice a first-order running error bound derived from the inputs
 *                       (gd_chunk_bound); the reference against L recurrent steps, NMSE at most
 *                       GATED_DELTA_CHUNK_NMSE, state and outputs.
 *   attend_rows         (PagedAttention's and GroupQueryAttention's core; scalar, avx2 and
 *                       avx512 where the CPU runs them) against a double reference, per element
 * within ATTEND_TOL (an error bound derived beside it from the inputs), f32/f16/ bf16 rows, head
 * dims 1..256 with tails, 1..70 keys across key blocks and pages of 5 and 16 rows, GQA
 * groups 1..16, softcap, head sinks, windows, latent values; every variant gives the scalar
 * variant's bits, and every row the bits it gets alone in the whole tile, reversed and in tiles of
 * 3 and 5, paged addressing (pages out of order) the contiguous bits. attend_expf         within
 * ATTEND_EXP_ULP ulp of exp over [-80, 10]. conv_causal_channel (one implementation today: both
 * causal convs' core) against a double reference within CONV_TOL (derived beside it), silu on/off,
 * dilation. rope_rotate_f32     (one implementation today: RotaryEmbedding's, PagedAttention's and
 *                       GroupQueryAttention's rotation) against a double reference within
 *                       ROPE_TOL (derived beside it), both pairings; in place gives the bits.
 *   act                 (exp, sigmoid, SiLU rows) the reference within derived ulp bounds of
 *                       double over a sweep of all 2^32 bit patterns and the edges; every
 *                       variant the reference's bits, every length and offset, in place.
 * Shapes: 1, odd sizes, and sizes around 8/16/64/256. A failing case is printed by name with its
 * error; NaN or infinity in any result fails. Each grid prints its worst NMSE.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/cpu.h"
#include "base/rng.h"
#include "check.h"
#include "kernels/act.h"
#include "kernels/attend.h"
#include "kernels/conv.h"
#include "kernels/dispatch.h"
#include "kernels/gated_delta.h"
#include "kernels/matmul_wt.h"
#include "kernels/rope.h"
#include "kernels/state_replay.h"
#include "tensor/dtype.h"

#define MATMUL_WT_NMSE         1e-10
#define GATED_DELTA_CHUNK_NMSE 1e-9

/* Σ (x - ref)² / Σ ref², or +inf when any x is not finite (NaN counts as failure). */
static double nmse(const float *x, const float *ref, int64_t n) {
  double num = 0.0, den = 0.0;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(x[i]) || !isfinite(ref[i])) return INFINITY;
    double d = (double)x[i] - (double)ref[i];
    num += d * d;
    den += (double)ref[i] * (double)ref[i];
  }
  return den > 0.0 ? num / den : num;
}

static int n_cases;

/* Records one case: fails naming it when bad. */
static void case_result(int ok, const char *name, double err) {
  n_cases++;
  if (!ok) printf("  FAIL %s (err %.3g)\n", name, err);
  CHECK(ok);
}

/* ---- matmul_wt ------------------------------------------------------------------------------ */

static const ph_dtype WT_DTYPES[3] = {PH_DTYPE_F32, PH_DTYPE_BF16, PH_DTYPE_F16};
static const char *const WT_DTYPE_NAMES[3] = {"f32", "bf16", "f16"};
static const int64_t WT_KS[] = {1, 2, 7, 15, 16, 17, 31, 63, 64, 65, 255, 256, 257, 1000};

/* Runs kernel fn over R rows, then gives each row's sums (R x WT_NW). */
static void wt_call(wt_kernel_fn fn, int R, const float *a, int64_t K,
                    const unsigned char *const *w, float *sums) {
  float tmp[WT_RMAX * WT_NW];
  fn(a, K, w, tmp);
  memcpy(sums, tmp, (size_t)R * WT_NW * sizeof(float));
}

static void grid_matmul_wt(const kernel_variant *vs, int n_vs) {
  const matmul_wt_kernels *ref = kernel_set_of(KERNEL_SCALAR)->matmul_wt;
  double worst = 0.0;
  rng r = rng_seed(0x6b65726e656c73u);
  for (int di = 0; di < 3; di++) {
    size_t es = dtype_size(WT_DTYPES[di]);
    for (size_t ki = 0; ki < sizeof WT_KS / sizeof WT_KS[0]; ki++) {
      int64_t K = WT_KS[ki];
      float *a = malloc((size_t)(WT_RMAX * K) * sizeof(float));
      /* W rows at odd byte offsets: the kernels accept any alignment */
      unsigned char *wbuf = malloc((size_t)WT_NW * ((size_t)K * es + 3) + 8);
      const unsigned char *w[WT_NW];
      for (int64_t i = 0; i < WT_RMAX * K; i++) a[i] = rng_range(&r, -1.0f, 1.0f);
      for (int c = 0; c < WT_NW; c++) {
        unsigned char *row = wbuf + 1 + (size_t)c * ((size_t)K * es + 3);
        for (int64_t k = 0; k < K; k++) {
          float f = rng_range(&r, -1.0f, 1.0f);
          uint16_t h = WT_DTYPES[di] == PH_DTYPE_BF16 ? f32_to_bf16(f) : f32_to_f16(f);
          if (es == 4)
            memcpy(row + 4 * k, &f, 4);
          else
            memcpy(row + 2 * k, &h, 2);
        }
        w[c] = row;
      }
      float want[WT_RMAX * WT_NW], simd[WT_RMAX * WT_NW], got[WT_RMAX * WT_NW];
      for (int m = 0; m < WT_RMAX; m++)
        wt_call(ref->k[di][1], 1, a + m * K, K, w, want + m * WT_NW);
      int have_simd = 0;
      for (int vi = 0; vi < n_vs; vi++) {
        const matmul_wt_kernels *ks = kernel_set_of(vs[vi])->matmul_wt;
        const char *vn = kernel_variant_name(vs[vi]);
        float one[WT_RMAX * WT_NW];
        for (int m = 0; m < WT_RMAX; m++)
          wt_call(ks->k[di][1], 1, a + m * K, K, w, one + m * WT_NW);
        char name[160];
        for (int R = 1; R <= WT_RMAX; R++) {
          if (!ks->k[di][R]) continue;
          wt_call(ks->k[di][R], R, a, K, w, got);
          snprintf(name, sizeof name, "matmul_wt %s W=%s R=%d K=%lld: rows equal R=1", vn,
                   WT_DTYPE_NAMES[di], R, (long long)K);
          case_result(memcmp(got, one, (size_t)R * WT_NW * sizeof(float)) == 0, name, 0.0);
        }
        double e = nmse(one, want, WT_RMAX * WT_NW);
        if (e > worst) worst = e;
        snprintf(name, sizeof name, "matmul_wt %s W=%s K=%lld: NMSE vs scalar", vn,
                 WT_DTYPE_NAMES[di], (long long)K);
        case_result(e <= (vs[vi] == KERNEL_SCALAR ? 0.0 : MATMUL_WT_NMSE), name, e);
        if (vs[vi] == KERNEL_SCALAR) continue;
        if (!have_simd) {
          memcpy(simd, one, sizeof simd);
          have_simd = 1;
        } else {
          snprintf(name, sizeof name, "matmul_wt %s W=%s K=%lld: bits of the other SIMD variant",
                   vn, WT_DTYPE_NAMES[di], (long long)K);
          case_result(memcmp(one, simd, sizeof simd) == 0, name, 0.0);
        }
      }
      free(a);
      free(wbuf);
    }
  }
  printf("  matmul_wt: worst NMSE vs scalar %.3g (bound %.0e)\n", worst, MATMUL_WT_NMSE);
}

/* ---- matmul_wt, bf16 mode (kernels/matmul_wt.h "the bf16 dot") ------------------------------ */

/* The bf16-mode kernel tables this CPU runs: the scalar reference, the AVX-512F emulation and the
 * native AVX-512 BF16 kernels; returns how many. */
static int wtb_sets(const wt_bf16_kernel_fn **sets, const char **names) {
  int n = 0;
  sets[n] = kernel_set_of(KERNEL_SCALAR)->matmul_wt->kb;
  names[n++] = "scalar";
  if (kernel_variant_available(KERNEL_AVX512) && matmul_wt_avx512_kernels.kb[1]) {
    sets[n] = matmul_wt_avx512_kernels.kb;
    names[n++] = "avx512-emulated";
  }
  if (kernel_variant_available(KERNEL_AVX512) && cpu_features()->avx512_bf16 &&
      matmul_wt_avx512bf16_kernels.kb[1]) {
    sets[n] = matmul_wt_avx512bf16_kernels.kb;
    names[n++] = "avx512bf16";
  }
  return n;
}

/* The bound of the reference bf16 dot against the exact sum of the same (rounded) products: each
 * lane adds 2 ceil(K / 32) products, each sum rounded once, then 4 tree levels, so at most
 * n = 2 ceil(K / 32) + 4 roundings of partial sums bounded by sum |a w| (products are exact):
 * gamma_n = n u / (1 - n u), u = 2^-24 (Higham §3.1). */
static double wtb_bound(int64_t K) {
  double u = ldexp(1.0, -24), n = (double)(2 * ((K + 31) / 32) + 4);
  return n * u / (1.0 - n * u);
}

/* Fills n bf16 values: uniform in [-1, 1] rounded (special = 0), or (special = 1) a mix meant
 * for the DAZ/FTZ rules: bf16 subnormals, tiny values whose products underflow, signed zeros;
 * or (special = 2) uniform values scaled by 2^-62 or 2^-76, so that partial sums lie around the
 * smallest normal f32 (2^-126) and products reach far below it (to 2^-152, past the last f32
 * subnormal bit): such products must be added exactly, sums below 2^-126 flushed. */
static void wtb_fill(uint16_t *x, int64_t n, rng *r, int special) {
  for (int64_t i = 0; i < n; i++) {
    float f = rng_range(r, -1.0f, 1.0f);
    if (special == 2) f = ldexpf(f, rng_next(r) % 2 ? -62 : -76);
    if (special == 1) {
      uint32_t pick = rng_next(r) % 6u;
      if (pick == 0) f = ldexpf(f, -120); /* products with pick 0/1 underflow */
      if (pick == 1) f = ldexpf(f, -20);
      if (pick == 2) f = i % 2 ? -0.0f : 0.0f;
      if (pick == 3) { /* a bf16 subnormal: read as a signed zero */
        x[i] = (uint16_t)((rng_next(r) & 0x807fu) | 1u);
        continue;
      }
    }
    x[i] = f32_to_bf16(f);
  }
}

static void grid_matmul_wt_bf16(const kernel_variant *vs, int n_vs) {
  (void)vs;
  (void)n_vs;
  static const int64_t KS[] = {1, 2, 3, 31, 32, 33, 63, 64, 65, 100, 1024, 1031};
  const wt_bf16_kernel_fn *sets[3];
  const char *names[3];
  int n_sets = wtb_sets(sets, names);
  const wt_bf16_kblock_fn *kbk[2];
  const char *kbk_names[2];
  int n_kbk = 0;
  if (kernel_variant_available(KERNEL_AVX512) && matmul_wt_avx512_kernels.kbk[1]) {
    kbk[n_kbk] = matmul_wt_avx512_kernels.kbk;
    kbk_names[n_kbk++] = "avx512";
  }
  if (kernel_variant_available(KERNEL_AVX512) && cpu_features()->avx512_bf16 &&
      matmul_wt_avx512bf16_kernels.kbk[1]) {
    kbk[n_kbk] = matmul_wt_avx512bf16_kernels.kbk;
    kbk_names[n_kbk++] = "avx512bf16";
  }
  double worst = 0.0;
  rng r = rng_seed(0x62663136u);
  for (int special = 0; special < 3; special++)
    for (size_t ki = 0; ki < sizeof KS / sizeof KS[0]; ki++) {
      int64_t K = KS[ki];
      uint16_t *a = malloc((size_t)(WT_RMAX * K) * sizeof *a);
      /* W rows at odd byte offsets: the kernels accept any alignment */
      unsigned char *wbuf = malloc((size_t)WT_NW * ((size_t)K * 2 + 3) + 8);
      uint16_t *wv = malloc((size_t)(WT_NW * K) * sizeof *wv);
      const unsigned char *w[WT_NW];
      wtb_fill(a, WT_RMAX * K, &r, special);
      wtb_fill(wv, WT_NW * K, &r, special);
      for (int c = 0; c < WT_NW; c++) {
        unsigned char *row = wbuf + 1 + (size_t)c * ((size_t)K * 2 + 3);
        memcpy(row, wv + c * K, (size_t)K * 2);
        w[c] = row;
      }
      float want[WT_RMAX * WT_NW], got[WT_RMAX * WT_NW];
      for (int m = 0; m < WT_RMAX; m++) {
        float tmp[WT_RMAX * WT_NW];
        sets[0][1](a + m * K, K, w, tmp);
        memcpy(want + m * WT_NW, tmp, WT_NW * sizeof(float));
      }
      char name[160];
      if (!special) /* the reference against the exact sum of its products */
        for (int m = 0; m < WT_RMAX; m++)
          for (int c = 0; c < WT_NW; c++) {
            double s = 0, sa = 0;
            for (int64_t k = 0; k < K; k++) {
              double p = (double)bf16_to_f32(a[m * K + k]) * (double)bf16_to_f32(wv[c * K + k]);
              s += p;
              sa += fabs(p);
            }
            double e = fabs((double)want[m * WT_NW + c] - s), b = wtb_bound(K) * sa;
            if (sa > 0 && e / b > worst) worst = e / b;
            snprintf(name, sizeof name, "matmul_wt bf16-dot scalar K=%lld row %d col %d: bound",
                     (long long)K, m, c);
            case_result(isfinite(want[m * WT_NW + c]) && e <= b, name, e);
          }
      for (int si = 0; si < n_sets; si++)
        for (int R = 1; R <= WT_RMAX; R++) {
          if (!sets[si][R]) continue;
          float tmp[WT_RMAX * WT_NW];
          sets[si][R](a, K, w, tmp);
          memcpy(got, tmp, (size_t)R * WT_NW * sizeof(float));
          /* every row of every R of every table: the reference's bits for that row alone */
          snprintf(name, sizeof name, "matmul_wt bf16-dot %s R=%d K=%lld%s: bits of the reference",
                   names[si], R, (long long)K,
                   special == 1   ? " (subnormals, underflow)"
                   : special == 2 ? " (sums around 2^-126)"
                                  : "");
          case_result(memcmp(got, want, (size_t)R * WT_NW * sizeof(float)) == 0, name, 0.0);
        }
      /* the K-blocked forms (kbk): calls over consecutive blocks of 32, 64 and 1024 elements,
       * partial sums carried in acc, give every row the reference's bits too */
      static const int64_t KBS[] = {32, 64, 1024};
      for (int ti = 0; ti < n_kbk; ti++)
        for (size_t bi = 0; bi < sizeof KBS / sizeof KBS[0]; bi++)
          for (int R = 1; R <= WT_RMAX; R++) {
            if (!kbk[ti][R]) continue;
            float acc[WT_RMAX * WT_NW * WT_LANES], tmp[WT_RMAX * WT_NW];
            memset(tmp, 0xff, sizeof tmp);
            for (int64_t k0 = 0; k0 < K; k0 += KBS[bi]) {
              int64_t k1 = k0 + KBS[bi] < K ? k0 + KBS[bi] : K;
              kbk[ti][R](a, K, k0, k1, w, acc, tmp);
            }
            snprintf(name, sizeof name,
                     "matmul_wt bf16-dot %s K-blocked by %lld R=%d K=%lld%s: bits of the reference",
                     kbk_names[ti], (long long)KBS[bi], R, (long long)K,
                     special == 1   ? " (subnormals, underflow)"
                     : special == 2 ? " (sums around 2^-126)"
                                    : "");
            case_result(memcmp(tmp, want, (size_t)R * WT_NW * sizeof(float)) == 0, name, 0.0);
          }
      /* the eight-stream kernels (kb_w8): row 0 against W rows 0..3 then 3..0 */
      for (int ti = 0; ti < n_kbk; ti++) {
        const matmul_wt_kernels *t = kbk[ti] == matmul_wt_avx512_kernels.kbk
                                         ? &matmul_wt_avx512_kernels
                                         : &matmul_wt_avx512bf16_kernels;
        if (!t->kb_w8) continue;
        const unsigned char *w8[2 * WT_NW] = {w[0], w[1], w[2], w[3], w[3], w[2], w[1], w[0]};
        float s8[2 * WT_NW], want8[2 * WT_NW];
        for (int c = 0; c < WT_NW; c++) {
          want8[c] = want[c];
          want8[2 * WT_NW - 1 - c] = want[c];
        }
        t->kb_w8(a, K, w8, s8);
        snprintf(name, sizeof name,
                 "matmul_wt bf16-dot %s 8 weight rows K=%lld%s: bits of the reference",
                 kbk_names[ti], (long long)K,
                 special == 1   ? " (subnormals, underflow)"
                 : special == 2 ? " (sums around 2^-126)"
                                : "");
        case_result(memcmp(s8, want8, sizeof s8) == 0, name, 0.0);
      }
      free(a);
      free(wbuf);
      free(wv);
    }
  printf("  matmul_wt bf16-dot: tables");
  for (int si = 0; si < n_sets; si++) printf(" %s", names[si]);
  printf("; K-blocked:");
  for (int ti = 0; ti < n_kbk; ti++) printf(" %s", kbk_names[ti]);
  printf("; reference worst error %.3f of its bound\n", worst);
}

/* wt_round_bf16: round to nearest even as f32_to_bf16 for normal results (ties included), NaN
 * stays NaN, a subnormal result becomes the signed zero. */
static void grid_round_bf16(const kernel_variant *vs, int n_vs) {
  (void)vs;
  (void)n_vs;
  int64_t bad = 0;
  for (uint64_t i = 0; i < (1ull << 32); i += 4093) {
    uint32_t u = (uint32_t)i;
    float f;
    memcpy(&f, &u, 4);
    uint16_t got = wt_round_bf16(f), want = f32_to_bf16(f);
    if (isnan(f)) {
      bad += !isnan(bf16_to_f32(got));
      continue;
    }
    if (!(want & 0x7f80u)) want &= 0x8000u;
    bad += got != want;
  }
  /* ties: 1 + 2^-8 (even: down) and 1 + 3 * 2^-8 (odd: up) */
  bad += wt_round_bf16(1.0f + 0x1p-8f) != 0x3f80u;
  bad += wt_round_bf16(1.0f + 0x3p-8f) != 0x3f82u;
  case_result(bad == 0, "wt_round_bf16 against f32_to_bf16 with subnormals flushed", (double)bad);
}

/* ---- gated delta ---------------------------------------------------------------------------- */

/* 16 / 17 / 24 / 40 / 128: the AVX-512 decode's 16-row blocks with and without an 8-row or odd
 * tail (Dv) and a Dk tail; 272: its Dk above the stack tile (handed to the AVX2 kernel) */
static const int64_t GD_DIMS[] = {1, 3, 8, 9, 16, 17, 24, 40, 64, 128, 272};
#define GD_N_DIMS ((int)(sizeof GD_DIMS / sizeof GD_DIMS[0]))

typedef struct gd_sink {
  float *o; /* [G][L][Dv] */
  int64_t L, Dv;
} gd_sink;

static void gd_store(void *ctx, int64_t jq, int64_t t, const float *o) {
  gd_sink *s = ctx;
  memcpy(s->o + (jq * s->L + t) * s->Dv, o, (size_t)s->Dv * sizeof(float));
}

/* A workspace for shape sh (malloc'd; free ws->S's base with the returned pointer). */
static char *gd_ws_new(const gated_delta_shape *sh, gated_delta_ws *ws) {
  size_t bytes = gated_delta_ws_layout(sh, 8, NULL, NULL);
  char *base = aligned_alloc(64, (bytes + 63) / 64 * 64);
  gated_delta_ws_layout(sh, 8, base, ws);
  return base;
}

/* The reference decode, one value row at a time on the V-major state: decay (one rounding),
 * pred = Σ_r k_r x_r (products rounded, increasing r), u = β (v − pred) (or v), the state update
 * fmaf(k_r, u, x_r), o = scale · Σ_r q_r S'_r. */
static void gd_decode_reference(const gated_delta_dec *p, const float *src, float *o, float *dst,
                                float *u_out) {
  int64_t Dk = p->Dk, Dv = p->Dv;
  for (int64_t c = 0; c < Dv; c++) {
    float pred = 0.0f, acc = 0.0f;
    for (int64_t r = 0; r < Dk; r++) {
      float x = src ? src[c * Dk + r] : 0.0f;
      if (p->gated) x *= p->a;
      dst[c * Dk + r] = x;
      if (p->delta) pred += p->k[r] * x;
    }
    float u = p->delta ? p->beta * (p->v[c] - pred) : p->v[c];
    u_out[c] = u;
    for (int64_t r = 0; r < Dk; r++) {
      float y = fmaf(p->k[r], u, dst[c * Dk + r]);
      acc += p->q[r] * y;
      dst[c * Dk + r] = y;
    }
    o[c] = acc * p->scale;
  }
}

static void grid_gated_delta_decode(const kernel_variant *vs, int n_vs) {
  rng r = rng_seed(0x64656364u);
  for (int ki = 0; ki < GD_N_DIMS; ki++)
    for (int vi_ = 0; vi_ < GD_N_DIMS; vi_++) {
      int64_t Dk = GD_DIMS[ki], Dv = GD_DIMS[vi_];
      size_t ns = (size_t)(Dk * Dv);
      float *k = malloc((size_t)Dk * sizeof(float)), *q = malloc((size_t)Dk * sizeof(float));
      float *v = malloc((size_t)Dv * sizeof(float)), *o = malloc((size_t)Dv * sizeof(float));
      float *o_ref = malloc((size_t)Dv * sizeof(float)), *src = malloc(ns * sizeof(float));
      float *dst = malloc(ns * sizeof(float)), *dst_ref = malloc(ns * sizeof(float));
      float *u = malloc((size_t)Dv * sizeof(float)), *u_ref = malloc((size_t)Dv * sizeof(float));
      float *tile = malloc((size_t)Dk * 8 * sizeof(float));
      for (int64_t i = 0; i < Dk; i++) k[i] = rng_range(&r, -0.3f, 0.3f);
      for (int64_t i = 0; i < Dk; i++) q[i] = rng_range(&r, -1.0f, 1.0f);
      for (int64_t i = 0; i < Dv; i++) v[i] = rng_range(&r, -1.0f, 1.0f);
      for (int rule = 0; rule < 4; rule++)
        for (int mode = 0; mode < 4; mode++) { /* no state, separate dst, aliased, no dst */
          for (size_t i = 0; i < ns; i++) src[i] = rng_range(&r, -0.5f, 0.5f);
          gated_delta_dec p = {.src = mode == 0 ? NULL : src,
                               .k = k,
                               .q = q,
                               .v = v,
                               .tile = tile,
                               .a = 0.75f,
                               .beta = 0.6f,
                               .scale = 1.0f / sqrtf((float)Dk),
                               .gated = rule & 1,
                               .delta = (rule >> 1) & 1,
                               .Dk = Dk,
                               .Dv = Dv};
          gd_decode_reference(&p, p.src, o_ref, dst_ref, u_ref);
          char name[160];
          static const char *const modes[4] = {"no state", "separate", "aliased", "no final"};
          for (int vi = -1; vi < n_vs; vi++) {
            gated_delta_decode_fn fn = NULL;
            const char *vn = "scalar(V-major ref)";
            if (vi >= 0) {
              fn = kernel_set_of(vs[vi])->gated_delta_decode;
              vn = kernel_variant_name(vs[vi]);
              if (!fn) continue; /* this variant runs the reference path itself */
            }
            float *src_copy = malloc(ns * sizeof(float));
            memcpy(src_copy, src, ns * sizeof(float));
            gated_delta_dec pv = p;
            pv.src = mode == 0 ? NULL : src_copy;
            pv.dst = mode == 3 ? NULL : mode == 2 ? src_copy : dst;
            pv.o = o;
            pv.u = mode == 1 ? NULL : u; /* the delta row asked for, or not */
            memset(dst, 0xff, ns * sizeof(float));
            memset(u, 0xff, (size_t)Dv * sizeof(float));
            if (fn)
              fn(&pv);
            else
              gated_delta_decode_ref(&pv);
            int ok = memcmp(o, o_ref, (size_t)Dv * sizeof(float)) == 0;
            if (pv.dst) ok = ok && memcmp(pv.dst, dst_ref, ns * sizeof(float)) == 0;
            if (pv.u) ok = ok && memcmp(pv.u, u_ref, (size_t)Dv * sizeof(float)) == 0;
            snprintf(name, sizeof name, "gated_delta_decode %s Dk=%lld Dv=%lld rule=%d %s", vn,
                     (long long)Dk, (long long)Dv, rule, modes[mode]);
            case_result(ok, name, nmse(o, o_ref, Dv));
            free(src_copy);
          }
        }
      free(k);
      free(q);
      free(v);
      free(o);
      free(o_ref);
      free(src);
      free(dst);
      free(dst_ref);
      free(u);
      free(u_ref);
      free(tile);
    }
}

/* gamma_t = Σ_{s<=t} max(g_s, floor) in double, as gated_delta_chunk_decays forms it. */
static void gd_gammas(const float *gg, int64_t L, int64_t Dg, double *gam) {
  for (int64_t t = 0; t < L; t++)
    for (int64_t r = 0; r < Dg; r++) {
      double g = gg[t * Dg + r];
      if (g < GATED_DELTA_G_FLOOR) g = GATED_DELTA_G_FLOOR;
      gam[t * Dg + r] = (t ? gam[(t - 1) * Dg + r] : 0.0) + g;
    }
}

/* The decay factor from just after token s (s = -1: the chunk start) through token t, key dim r:
 * the f32 value both chunk implementations compute, expf((float)(γ_t - γ_s)). */
static double gd_e(const double *gam, int64_t Dg, int64_t t, int64_t s, int64_t r) {
  int64_t j = Dg > 1 ? r : 0;
  return (double)expf((float)(gam[t * Dg + j] - (s < 0 ? 0.0 : gam[s * Dg + j])));
}

/* The first-order running error bound of one f32 evaluation of the chunk (Higham, "Accuracy
 * and Stability of Numerical Algorithms", §3.1, 3.3), for either implementation: the decay
 * factors are the same f32 numbers in both (gd_e), so they count as exact inputs. For each
 * computed quantity z = init + Σ_i a_i b_i whose evaluation rounds each term at most m times,
 * |ẑ − z| <= m u Z + Σ_i (|b_i| E(a_i) + |a_i| E(b_i)) + E(init), with Z the same expression
 * over absolute values and u = 2^-24. m per quantity, the longer of the two implementations'
 * chains: A_ts and QK_ts Dk + 3 (the decayed key or the factor, the dot, β e), the right-hand
 * side β(v − e k·S0) Dk + 4, U_t (t + 1) (the t solve terms on it), o_t Dk + t + 4 (e q, the
 * state read, the t + 1 intra-chunk terms, scale), S_end L + 3 (the decayed key, the decayed
 * state, the L terms). Gives Eo [G][L][Dv] and Es [Dk][Dv]. */
static void gd_chunk_bound(const gated_delta_shape *sh, int64_t L, const float *kk, const float *qq,
                           const float *vv, const float *bb, const float *gg, const float *S0,
                           double *Eo, double *Es) {
  const double u = 0x1p-24;
  const int64_t G = sh->G, Dk = sh->Dk, Dv = sh->Dv, Dg = sh->per_dim ? Dk : 1;
  double *gam = malloc((size_t)(L * Dg) * sizeof(double));
  double *Ua = calloc((size_t)(L * Dv), sizeof(double)),
         *Ue = calloc((size_t)(L * Dv), sizeof(double));
  double *Xa = malloc((size_t)(L * L) * sizeof(double)); /* |A| or |QK| */
  gd_gammas(gg, L, Dg, gam);
  if (sh->delta) {
    for (int64_t t = 0; t < L; t++)
      for (int64_t s = 0; s < t; s++) {
        double a = 0.0;
        for (int64_t r = 0; r < Dk; r++)
          a += gd_e(gam, Dg, t, s, r) * fabs(kk[t * Dk + r]) * fabs(kk[s * Dk + r]);
        Xa[t * L + s] = fabs(bb[t]) * a;
      }
  }
  for (int64_t t = 0; t < L; t++)
    for (int64_t c = 0; c < Dv; c++) {
      if (!sh->delta) {
        Ua[t * Dv + c] = fabs(vv[t * Dv + c]);
        continue;
      }
      double b = fabs(vv[t * Dv + c]);
      for (int64_t r = 0; r < Dk; r++)
        b += gd_e(gam, Dg, t, -1, r) * fabs(kk[t * Dk + r]) * fabs(S0[r * Dv + c]);
      b *= fabs(bb[t]);
      double ua = b, ue = (double)(Dk + 4) * u * b;
      for (int64_t s = 0; s < t; s++) {
        double A = Xa[t * L + s];
        ua += A * Ua[s * Dv + c];
        ue += A * Ue[s * Dv + c] + (double)(Dk + 3) * u * A * Ua[s * Dv + c];
      }
      Ua[t * Dv + c] = ua;
      Ue[t * Dv + c] = ue + (double)(t + 1) * u * ua;
    }
  for (int64_t jq = 0; jq < G; jq++) {
    const float *q = qq + jq * L * Dk;
    for (int64_t t = 0; t < L; t++)
      for (int64_t s = 0; s <= t; s++) {
        double a = 0.0;
        for (int64_t r = 0; r < Dk; r++)
          a += gd_e(gam, Dg, t, s, r) * fabs(q[t * Dk + r]) * fabs(kk[s * Dk + r]);
        Xa[t * L + s] = a;
      }
    for (int64_t t = 0; t < L; t++)
      for (int64_t c = 0; c < Dv; c++) {
        double oa = 0.0, oe = 0.0;
        for (int64_t r = 0; r < Dk; r++)
          oa += gd_e(gam, Dg, t, -1, r) * fabs(q[t * Dk + r]) * fabs(S0[r * Dv + c]);
        for (int64_t s = 0; s <= t; s++) {
          double X = Xa[t * L + s];
          oa += X * Ua[s * Dv + c];
          oe += X * Ue[s * Dv + c] + (double)(Dk + 3) * u * X * Ua[s * Dv + c];
        }
        Eo[(jq * L + t) * Dv + c] = fabs(sh->scale) * (oe + (double)(Dk + t + 4) * u * oa);
      }
  }
  for (int64_t r = 0; r < Dk; r++)
    for (int64_t c = 0; c < Dv; c++) {
      double sa = gd_e(gam, Dg, L - 1, -1, r) * fabs(S0[r * Dv + c]), se = 0.0;
      for (int64_t s = 0; s < L; s++) {
        double w = gd_e(gam, Dg, L - 1, s, r) * fabs(kk[s * Dk + r]);
        sa += w * Ua[s * Dv + c];
        se += w * Ue[s * Dv + c];
      }
      Es[r * Dv + c] = se + (double)(L + 3) * u * sa;
    }
  free(gam);
  free(Ua);
  free(Ue);
  free(Xa);
}

/* |x − ref| <= GD_PAIR_SLACK (2 Eo + GD_ABS_FLOOR) per element, or +inf (NaN fails). Two f32
 * evaluations each within the bound E of the exact value differ by at most 2E (triangle
 * inequality); 1.01 covers the second-order terms the first-order bound drops (γ_n = nu/(1−nu)
 * <= 1.01 nu while nu <= 1e-2: n < 1.6e5 here); the floor covers results underflowing to
 * subnormals (an absolute error of at most 2^-149 per rounding). Gives the worst ratio. */
#define GD_PAIR_SLACK 1.01
#define GD_ABS_FLOOR  (1e4 * 0x1p-149)
static double gd_bound_ratio(const float *x, const float *ref, const double *E, int64_t n) {
  double worst = 0.0;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(x[i]) || !isfinite(ref[i])) return INFINITY;
    double d = fabs((double)x[i] - (double)ref[i]);
    double b = GD_PAIR_SLACK * (2.0 * E[i] + GD_ABS_FLOOR);
    double q = d / b;
    if (q > worst) worst = q;
  }
  return worst;
}

/* gated_delta_chunk (the reference) over L tokens against L calls of gated_delta_token (NMSE at
 * most GATED_DELTA_CHUNK_NMSE), and every variant's chunk kernel (the dispatch table's
 * gated_delta_chunk column) against the reference per element within the derived bound of
 * gd_chunk_bound: outputs and end state, over Dk x Dv, L in 1..64 (with the workspace stride C
 * = L or 64), G 1..2, per-head or per-key-dim decay, every update rule, log decays down to
 * below the clamp. */
static void grid_gated_delta_chunk(const kernel_variant *vs, int n_vs) {
  static const int64_t Ls[] = {1, 2, 3, 4, 5, 7, 16, 17, 33, 64};
  static const int64_t dims[][2] = {{1, 1},   {3, 9},   {16, 8},   {17, 33},
                                    {24, 17}, {64, 64}, {128, 128}};
  double worst = 0.0, worst_v = 0.0;
  int n_var = 0;
  rng r = rng_seed(0x6368756e6bu);
  for (size_t li = 0; li < sizeof Ls / sizeof Ls[0]; li++)
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
      for (int rule = 0; rule < 4; rule++)
        for (int per_dim = 0; per_dim < 2; per_dim++)
          for (int64_t G = 1; G <= 2; G++) {
            int64_t L = Ls[li], Dk = dims[di][0], Dv = dims[di][1], Dg = per_dim ? Dk : 1;
            int64_t C = (rule + G) % 2 ? 64 : L; /* the stride: L, or longer than the chunk */
            if (Dk == 128 && per_dim && L > 17) continue; /* the bound's L²Dk expf: kept short */
            gated_delta_shape sc = {
                Dk, Dv, G, C, per_dim, rule & 1, (rule >> 1) & 1, 1.0f / sqrtf((float)Dk)};
            gated_delta_shape st = sc;
            st.C = 1;
            gated_delta_ws wc, wt;
            char *bc = gd_ws_new(&sc, &wc), *bt = gd_ws_new(&st, &wt);
            float *kk = malloc((size_t)(L * Dk) * sizeof(float));
            float *qq = malloc((size_t)(G * L * Dk) * sizeof(float));
            float *vv = malloc((size_t)(L * Dv) * sizeof(float));
            float *bb = malloc((size_t)L * sizeof(float)),
                  *gg = malloc((size_t)(L * Dg) * sizeof(float));
            float *S0 = malloc((size_t)(Dk * Dv) * sizeof(float));
            float *oc = malloc((size_t)(G * L * Dv) * sizeof(float));
            float *ot = malloc((size_t)(G * L * Dv) * sizeof(float));
            float *ov = malloc((size_t)(G * L * Dv) * sizeof(float));
            double *Eo = malloc((size_t)(G * L * Dv) * sizeof(double));
            double *Es = malloc((size_t)(Dk * Dv) * sizeof(double));
            /* keys of norm about 1 (the op's l2 norm) up to 2, as the model's */
            float ks = 2.0f / sqrtf((float)Dk);
            for (int64_t i = 0; i < L * Dk; i++) kk[i] = rng_range(&r, -ks, ks);
            for (int64_t i = 0; i < G * L * Dk; i++) qq[i] = rng_range(&r, -1.0f, 1.0f);
            for (int64_t i = 0; i < L * Dv; i++) vv[i] = rng_range(&r, -1.0f, 1.0f);
            for (int64_t i = 0; i < L; i++) bb[i] = (rule >> 1) & 1 ? rng_range(&r, 0.1f, 0.9f) : 1;
            for (int64_t i = 0; i < L * Dg; i++) {
              float g = rng_range(&r, -0.5f, 0.0f);
              if (rng_range(&r, 0.0f, 1.0f) < 0.05f) g = -30.0f; /* a near-full reset */
              if (rng_range(&r, 0.0f, 1.0f) < 0.02f) g = -2e4f;  /* below the clamp */
              gg[i] = rule & 1 ? g : 0;
            }
            for (int64_t i = 0; i < Dk * Dv; i++) S0[i] = rng_range(&r, -0.5f, 0.5f);
            memcpy(wc.S, S0, (size_t)(Dk * Dv) * sizeof(float));
            memcpy(wt.S, S0, (size_t)(Dk * Dv) * sizeof(float));
            /* loads the chunk's rows into ws (query group jq at row jq * C) */
#define GD_LOAD(ws)                                                                                \
  do {                                                                                             \
    memcpy((ws).K, kk, (size_t)(L * Dk) * sizeof(float));                                          \
    memcpy((ws).V, vv, (size_t)(L * Dv) * sizeof(float));                                          \
    for (int64_t jq = 0; jq < G; jq++)                                                             \
      memcpy((ws).Q + jq * C * Dk, qq + jq * L * Dk, (size_t)(L * Dk) * sizeof(float));            \
    memcpy((ws).beta, bb, (size_t)L * sizeof(float));                                              \
    memcpy((ws).gl, gg, (size_t)(L * Dg) * sizeof(float));                                         \
  } while (0)
            GD_LOAD(wc);
            gd_sink sink_c = {oc, L, Dv};
            gated_delta_chunk(&sc, &wc, L, gd_store, &sink_c);
            for (int64_t t = 0; t < L; t++) {
              memcpy(wt.K, kk + t * Dk, (size_t)Dk * sizeof(float));
              memcpy(wt.V, vv + t * Dv, (size_t)Dv * sizeof(float));
              for (int64_t jq = 0; jq < G; jq++)
                memcpy(wt.Q + jq * Dk, qq + (jq * L + t) * Dk, (size_t)Dk * sizeof(float));
              wt.beta[0] = bb[t];
              memcpy(wt.gl, gg + t * Dg, (size_t)Dg * sizeof(float));
              float orow[2 * 128];
              gd_sink sink_t = {orow, 1, Dv};
              gated_delta_token(&st, &wt, gd_store, &sink_t);
              for (int64_t jq = 0; jq < G; jq++)
                memcpy(ot + (jq * L + t) * Dv, orow + jq * Dv, (size_t)Dv * sizeof(float));
            }
            double eo = nmse(oc, ot, G * L * Dv), es = nmse(wc.S, wt.S, Dk * Dv);
            double e = eo > es ? eo : es;
            if (e > worst) worst = e;
            char name[200];
            snprintf(name, sizeof name,
                     "gated_delta_chunk L=%lld C=%lld Dk=%lld Dv=%lld rule=%d per_dim=%d G=%lld: "
                     "NMSE vs token steps (out %.3g, state %.3g)",
                     (long long)L, (long long)C, (long long)Dk, (long long)Dv, rule, per_dim,
                     (long long)G, eo, es);
            case_result(e <= GATED_DELTA_CHUNK_NMSE, name, e);
            int have_bound = 0;
            for (int vi = 0; vi < n_vs; vi++) {
              gated_delta_chunk_fn fn = kernel_set_of(vs[vi])->gated_delta_chunk;
              if (!fn) continue; /* this variant runs the reference */
              if (!have_bound) {
                gd_chunk_bound(&sc, L, kk, qq, vv, bb, gg, S0, Eo, Es);
                have_bound = 1;
              }
              gated_delta_ws wv;
              char *bv = gd_ws_new(&sc, &wv);
              memcpy(wv.S, S0, (size_t)(Dk * Dv) * sizeof(float));
              GD_LOAD(wv);
              gd_sink sink_v = {ov, L, Dv};
              fn(&sc, &wv, L, gd_store, &sink_v);
              double ro = gd_bound_ratio(ov, oc, Eo, G * L * Dv);
              double rs = gd_bound_ratio(wv.S, wc.S, Es, Dk * Dv);
              double rv = ro > rs ? ro : rs;
              if (rv > worst_v) worst_v = rv;
              n_var++;
              snprintf(name, sizeof name,
                       "gated_delta_chunk %s L=%lld C=%lld Dk=%lld Dv=%lld rule=%d per_dim=%d "
                       "G=%lld: error / derived bound vs the reference (out %.3g, state %.3g)",
                       kernel_variant_name(vs[vi]), (long long)L, (long long)C, (long long)Dk,
                       (long long)Dv, rule, per_dim, (long long)G, ro, rs);
              case_result(rv <= 1.0, name, rv);
              free(bv);
            }
#undef GD_LOAD
            free(bc);
            free(bt);
            free(kk);
            free(qq);
            free(vv);
            free(bb);
            free(gg);
            free(S0);
            free(oc);
            free(ot);
            free(ov);
            free(Eo);
            free(Es);
          }
  printf("  gated_delta_chunk: worst NMSE vs token steps %.3g (bound %.0e); %d variant runs, "
         "worst error / derived bound %.3g\n",
         worst, GATED_DELTA_CHUNK_NMSE, n_var, worst_v);
}

/* ---- attend_rows ---------------------------------------------------------------------------- */

static const ph_dtype AT_DTYPES[3] = {PH_DTYPE_F32, PH_DTYPE_F16, PH_DTYPE_BF16};
static const char *const AT_DTYPE_NAMES[3] = {"f32", "f16", "bf16"};

/* Stores f in dtype dt at element i of buf and gives back the value stored, as f32. */
static float at_put(void *buf, ph_dtype dt, int64_t i, float f) {
  if (dt == PH_DTYPE_F32) {
    ((float *)buf)[i] = f;
    return f;
  }
  uint16_t h = dt == PH_DTYPE_F16 ? f32_to_f16(f) : f32_to_bf16(f);
  ((uint16_t *)buf)[i] = h;
  return dt == PH_DTYPE_F16 ? f16_to_f32(h) : bf16_to_f32(h);
}

/* The straightforward reference, in double, on the stored values kf (row t at t * D) and vf
 * (row t at t * Dv): scores, softcap, max, exponentials, sums and the division, as attend.h
 * writes them. */
static void at_reference(const float *q, const float *kf, const float *vf, int64_t D, int64_t Dv,
                         int64_t lo, int64_t hi, float scale, float softcap, const float *sink,
                         double *o, double *A, double *R) {
  int64_t n = hi - lo + 1;
  double *s = malloc((size_t)n * sizeof(double)), m = -INFINITY;
  *A = 0.0;
  for (int64_t t = lo; t <= hi; t++) {
    double dot = 0.0, a = 0.0;
    for (int64_t e = 0; e < D; e++) {
      dot += (double)q[e] * kf[t * D + e];
      a += fabs((double)q[e] * kf[t * D + e]);
    }
    if (a > *A) *A = a;
    double sc = dot * (double)scale;
    if (softcap > 0.0f) sc = softcap * tanh(sc / softcap);
    s[t - lo] = sc;
    if (sc > m) m = sc;
  }
  if (sink && *sink > m) m = *sink;
  double sum = 0.0;
  *R = sink ? m - *sink : 0.0;
  for (int64_t e = 0; e < Dv; e++) o[e] = 0.0;
  for (int64_t t = lo; t <= hi; t++) {
    double w = exp(s[t - lo] - m);
    if (m - s[t - lo] > *R) *R = m - s[t - lo];
    sum += w;
    for (int64_t e = 0; e < Dv; e++) o[e] += w * vf[t * Dv + e];
  }
  if (sink) sum += exp(*sink - m);
  for (int64_t e = 0; e < Dv; e++) o[e] /= sum;
  free(s);
}

/* attend_expf against exp in double: every x of a sweep of [-80, 0] (and a few of [-80, 10]),
 * within ATTEND_EXP_ULP ulp of the result; 0 below -80 and for -inf; exact 1 at 0. */
#define ATTEND_EXP_ULP 2.0
static void grid_attend_exp(const kernel_variant *vs, int n_vs) {
  (void)vs;
  (void)n_vs;
  double worst = 0.0;
  for (int i = 0; i <= 200000; i++) {
    const float x = -80.0f + 90.0f * (float)i / 200000.0f;
    const double want = exp((double)x), got = attend_expf(x);
    const double ulp = ldexp(1.0, ilogb(want) - 23);
    const double e = fabs(got - want) / ulp;
    if (!(e <= worst)) worst = e;
  }
  char name[120];
  snprintf(name, sizeof name, "attend_expf within %.0f ulp on [-80, 10] (worst %.3g ulp)",
           ATTEND_EXP_ULP, worst);
  case_result(worst <= ATTEND_EXP_ULP, name, worst);
  case_result(attend_expf(0.0f) == 1.0f && attend_expf(-0.0f) == 1.0f, "attend_expf(0) is 1", 0.0);
  case_result(attend_expf(-80.5f) == 0.0f && attend_expf(-INFINITY) == 0.0f,
              "attend_expf is 0 below -80", 0.0);
  case_result(isnan(attend_expf(NAN)), "attend_expf(NaN) is NaN", 0.0);
  printf("  attend_expf: worst %.3g ulp\n", worst);
}

/* ---- act (exp, sigmoid, SiLU) --------------------------------------------------------------- */

/* The ulp of v in f32, subnormals included (2^-149 below FLT_MIN), FLT_MAX's above it. */
static double f32_ulp(double v) {
  v = fabs(v);
  if (v < (double)FLT_MIN) return ldexp(1.0, -149);
  if (v > (double)FLT_MAX) v = (double)FLT_MAX;
  return ldexp(1.0, ilogb(v) - 23);
}

/* Error of got against the exact want in ulps of want; a result that rounds past FLT_MAX may be
 * +-inf (0 ulp), an infinity for a finite want is +inf ulp, NaN is +inf. */
static double ulp_err(float got, double want) {
  if (isnan(got)) return INFINITY;
  if (isinf(got)) return isinf(want) || fabs(want) > (double)FLT_MAX ? 0.0 : INFINITY;
  return fabs((double)got - want) / f32_ulp(want);
}

/* The act grid's inputs: a sweep of every 4099th bit pattern over all 2^32 (both signs, every
 * exponent, subnormals, infinities and NaNs), the specials, the clamp and overflow edges, and the
 * points halfway between two multiples of ln 2 (where rint(x log2e) changes n). */
static int64_t act_inputs(float *xs, int64_t cap) {
  int64_t n = 0;
  for (uint64_t b = 0; b < (1ull << 32) && n < cap; b += 4099) {
    uint32_t u = (uint32_t)b;
    memcpy(&xs[n++], &u, 4);
  }
  const float sp[] = {
      0.0f,    -0.0f,    INFINITY, -INFINITY,   NAN,         -NAN,        FLT_MIN, -FLT_MIN,
      FLT_MAX, -FLT_MAX, 1e-45f,   -1e-45f,     1.17e-38f,   -1.17e-38f,  1.0f,    -1.0f,
      88.0f,   88.5f,    88.72f,   88.7228394f, 88.7228470f, 88.73f,      89.0f,   89.5f,
      -87.33f, -87.34f,  -100.0f,  -103.9f,     -103.97f,    -103.98f,    -104.0f, -104.5f,
      -150.0f, 150.0f,   1e10f,    -1e10f,      0.3465736f,  -0.3465736f, 20.0f,   -20.0f};
  for (size_t i = 0; i < sizeof sp / sizeof sp[0] && n < cap; i++) xs[n++] = sp[i];
  const uint32_t snan = 0x7f800123u, nsnan = 0xffc00456u;
  memcpy(&xs[n++], &snan, 4);
  memcpy(&xs[n++], &nsnan, 4);
  for (int k = -152; k <= 130 && n + 4 <= cap; k++) {
    const float h = (float)(((double)k + 0.5) * 0.69314718055994530942);
    xs[n++] = h;
    xs[n++] = nextafterf(h, INFINITY);
    xs[n++] = nextafterf(h, -INFINITY);
  }
  return n;
}

/* act_expf, act_sigmoidf, act_siluf (kernels/act.h) against double over act_inputs:
 *   exp      within ACT_EXP_ULP ulp (derived in docs/performance.md "Vector exp"), and exactly 1
 *            at +-0 and subnormals, +0 at -inf and below -104, +inf at +inf and above 89, NaN at
 *            NaN;
 *   sigmoid  within ACT_SIGMOID_ULP = 8 ulp: e = exp(-|x|) is within 2 ulp (relative 2^-22), 1 + e
 *            carries at most half of that plus its rounding 2^-24, the quotient adds 2^-24 and its
 *            numerator e (x < 0) all of it: relative 4 * 2^-23 = 8 ulp at most;
 *   silu     within ACT_SILU_ULP = 6 ulp (the same count without the numerator's share: relative
 *            2^-22 + 2 * 2^-24 = 3 * 2^-23), except where e^-x overflows (x < -88.72): there
 *            x / inf = -0 against an exact value below 2^-100 in magnitude, checked as such;
 * and every variant's row kernels give the scalar reference's bits (NaN for NaN) on every row
 * length 1..40 at every offset of a 64-float window, and on the whole set in place. */
#define ACT_SIGMOID_ULP 8.0
#define ACT_SILU_ULP    6.0
static void grid_act(const kernel_variant *vs, int n_vs) {
  enum { CAP = 1100000 };
  float *xs = malloc(CAP * sizeof(float)), *ref = malloc(CAP * sizeof(float));
  float *got = malloc(CAP * sizeof(float));
  CHECK(xs && ref && got);
  if (!xs || !ref || !got) {
    free(xs);
    free(ref);
    free(got);
    return;
  }
  const int64_t n = act_inputs(xs, CAP);
  double w_exp = 0.0, w_sig = 0.0, w_silu = 0.0;
  for (int64_t i = 0; i < n; i++) {
    const float x = xs[i];
    if (isnan(x)) continue;
    const double ex = exp((double)x);
    const double e_exp = ulp_err(act_expf(x), ex);
    if (!(e_exp <= w_exp)) w_exp = e_exp;
    const double sg = x >= 0.0f ? 1.0 / (1.0 + exp(-(double)x)) : ex / (1.0 + ex);
    const double e_sig = ulp_err(act_sigmoidf(x), sg);
    if (!(e_sig <= w_sig)) w_sig = e_sig;
    if (x < -88.72f) {
      const float s = act_siluf(x);
      const double e_s = isinf(x)                      ? (isnan(s) ? 0.0 : INFINITY)
                         : fabs((double)s) <= 0x1p-100 ? 0.0
                                                       : INFINITY;
      if (!(e_s <= w_silu)) w_silu = e_s;
    } else if (!isinf(x)) {
      const double sl = (double)x * sg;
      const double e_s = ulp_err(act_siluf(x), sl);
      if (!(e_s <= w_silu)) w_silu = e_s;
    }
  }
  char name[160];
  snprintf(name, sizeof name, "act_expf within %.0f ulp of exp over %lld inputs (worst %.3g)",
           ACT_EXP_ULP, (long long)n, w_exp);
  case_result(w_exp <= ACT_EXP_ULP, name, w_exp);
  snprintf(name, sizeof name, "act_sigmoidf within %.0f ulp (worst %.3g)", ACT_SIGMOID_ULP, w_sig);
  case_result(w_sig <= ACT_SIGMOID_ULP, name, w_sig);
  snprintf(name, sizeof name, "act_siluf within %.0f ulp (worst %.3g)", ACT_SILU_ULP, w_silu);
  case_result(w_silu <= ACT_SILU_ULP, name, w_silu);
  const float one = 1.0f;
  case_result(act_expf(0.0f) == one && act_expf(-0.0f) == one && act_expf(1e-45f) == one &&
                  act_expf(-1e-45f) == one && act_expf(-1e-40f) == one,
              "act_expf is 1 at 0 and subnormals", 0.0);
  case_result(act_expf(-INFINITY) == 0.0f && act_expf(-104.5f) == 0.0f &&
                  !signbit(act_expf(-1e30f)),
              "act_expf is +0 at -inf and far below", 0.0);
  case_result(isinf(act_expf(INFINITY)) && isinf(act_expf(89.5f)) && act_expf(88.0f) < INFINITY,
              "act_expf overflows to +inf past ln FLT_MAX only", 0.0);
  case_result(isnan(act_expf(NAN)) && isnan(act_sigmoidf(NAN)) && isnan(act_siluf(NAN)),
              "act NaN in, NaN out", 0.0);
  case_result(act_sigmoidf(INFINITY) == 1.0f && act_sigmoidf(-INFINITY) == 0.0f &&
                  act_sigmoidf(0.0f) == 0.5f && act_sigmoidf(-0.0f) == 0.5f,
              "act_sigmoidf at +-inf and +-0", 0.0);
  case_result(act_expf(-100.0f) > 0.0f && act_expf(-100.0f) < FLT_MIN, "act_expf subnormal results",
              0.0);

  static const char *const fn_names[3] = {"exp", "sigmoid", "silu"};
  for (int f = 0; f < 3; f++) {
    for (int64_t i = 0; i < n; i++)
      ref[i] = f == 0 ? act_expf(xs[i]) : f == 1 ? act_sigmoidf(xs[i]) : act_siluf(xs[i]);
    for (int v = 0; v < n_vs; v++) {
      const act_kernels *ak = kernel_set_of(vs[v])->act;
      CHECK(ak && ak->exp && ak->sigmoid && ak->silu);
      if (!ak || !ak->exp || !ak->sigmoid || !ak->silu) continue;
      const act_row_fn fn = f == 0 ? ak->exp : f == 1 ? ak->sigmoid : ak->silu;
      int64_t bad = 0;
      fn(xs, got, n);
      for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &ref[i], 4) != 0 && !(isnan(got[i]) && isnan(ref[i]))) bad++;
      memcpy(got, xs, (size_t)n * sizeof(float)); /* in place */
      fn(got, got, n);
      for (int64_t i = 0; i < n; i++)
        if (memcmp(&got[i], &ref[i], 4) != 0 && !(isnan(got[i]) && isnan(ref[i]))) bad++;
      /* every length 1..40 at every offset of a 64-float window; past the row is untouched */
      for (int64_t len = 1; len <= 40; len++)
        for (int64_t off = 0; off + len <= 64; off++) {
          float buf[64];
          for (int k = 0; k < 64; k++) buf[k] = -7.0f;
          const int64_t base = (len * 997 + off * 131) % (n - 64);
          fn(xs + base + off, buf + off, len);
          for (int64_t k = 0; k < 64; k++) {
            const int in_row = k >= off && k < off + len;
            if (!in_row && buf[k] != -7.0f) bad++;
            if (in_row && memcmp(&buf[k], &ref[base + k], 4) != 0 &&
                !(isnan(buf[k]) && isnan(ref[base + k])))
              bad++;
          }
        }
      snprintf(name, sizeof name, "act %s %s: the scalar bits (%lld differ)", fn_names[f],
               kernel_variant_name(vs[v]), (long long)bad);
      case_result(bad == 0, name, (double)bad);
    }
  }
  printf("  act: exp worst %.3g ulp, sigmoid %.3g, silu %.3g over %lld inputs\n", w_exp, w_sig,
         w_silu, (long long)n);
  free(xs);
  free(ref);
  free(got);
}

/* One attention case: G query heads of one kv head x P consecutive positions ending at key
 * T - 1 (the causal prefill tile), window W (0: off), over T keys stored contiguous and paged. */
typedef struct at_case {
  ph_dtype dt;
  int64_t D, Dv, T, W;
  int G, P, latent;
  float softcap;
  int sink; /* 0 none, 1 per-head sinks of 0.3 and 4 alternating */
} at_case;

/* Runs fn over rows in the order given by perm, in tiles of `tile` rows, into out[row][Dv]. */
static void at_run(attend_rows_fn fn, const attend_kv *kv, const at_case *c, float scale,
                   const attend_query *rows, int n, const int *perm, int tile, float *out,
                   float *work) {
  attend_query t[ATTEND_MAX_ROWS];
  for (int i0 = 0; i0 < n; i0 += tile) {
    int k = n - i0 < tile ? n - i0 : tile;
    for (int i = 0; i < k; i++) {
      t[i] = rows[perm[i0 + i]];
      t[i].out = out + perm[i0 + i] * c->Dv;
    }
    fn(kv, c->D, scale, c->softcap, t, k, work);
  }
}

/* attend_rows, every variant: against the double reference within ATTEND_TOL (below); every
 * variant gives the scalar variant's bits; each row's bits are the same alone, in the whole
 * tile, in the tile reversed (every row at another place) and in tiles of 3 and 5 rows; and
 * paged addressing (pages out of order, 5 or 16 rows each) gives the contiguous bits. */
static void grid_attend(const kernel_variant *vs, int n_vs) {
  static const int64_t Ds[] = {1, 3, 16, 17, 64, 256};
  static const int64_t Ts[] = {1, 2, 31, 33, 70};
  static const int Gs[] = {1, 3, 4, 8};

  const double u = FLT_EPSILON / 2.0;
  double worst = 0.0;
  int n_case = 0;
  rng r = rng_seed(0x617474656e64u);
  for (int di = 0; di < 3; di++)
    for (size_t Di = 0; Di < sizeof Ds / sizeof Ds[0]; Di++)
      for (size_t Ti = 0; Ti < sizeof Ts / sizeof Ts[0]; Ti++)
        for (int opt = 0; opt < 12; opt++, n_case++) {
          /* softcap off/on x sink none/on x window off/on/latent values */
          at_case c = {.dt = AT_DTYPES[di], .D = Ds[Di], .T = Ts[Ti]};
          c.softcap = opt & 1 ? 5.0f : 0.0f;
          c.sink = (opt >> 1) & 1;
          const int mode = opt >> 2; /* 0 plain, 1 window, 2 latent values */
          c.latent = mode == 2;
          c.W = mode == 1 ? 1 + (int64_t)(n_case % 40) : 0;
          c.Dv = c.latent ? (c.D + 1) / 2 : c.D;
          c.G = c.latent ? 1 + 15 * (n_case % 2) : Gs[n_case % 4];
          c.P = ATTEND_MAX_ROWS / c.G < c.T ? ATTEND_MAX_ROWS / c.G : (int)c.T;
          const size_t es = dtype_size(c.dt);
          const int64_t D = c.D, Dv = c.Dv, T = c.T;
          /* rows per page in the paged copy: 5 (pages cross key groups) or 16 (a 16-key group
           * lies in one page: the AVX-512 kernel reads such a group in place) */
          const int64_t PAGE = n_case % 2 ? 16 : 5;
          const int64_t n_pages = (T + PAGE - 1) / PAGE, stride = D + 3; /* rows apart */
          const float scale = 1.0f / sqrtf((float)D);
          const int n = c.G * c.P;
          float *q = malloc((size_t)(n * D) * sizeof(float));
          float *kf = malloc((size_t)(T * D) * sizeof(float));
          float *vf = malloc((size_t)(T * D) * sizeof(float));
          char *kc = calloc((size_t)(T * stride), es), *vc = calloc((size_t)(T * stride), es);
          char *kp = calloc((size_t)(n_pages * PAGE * stride), es);
          char *vp = calloc((size_t)(n_pages * PAGE * stride), es);
          int32_t *pages = malloc((size_t)n_pages * sizeof(int32_t));
          for (int64_t pg = 0; pg < n_pages; pg++) pages[pg] = (int32_t)(n_pages - 1 - pg);
          for (int64_t e = 0; e < n * D; e++) q[e] = rng_range(&r, -2.0f, 2.0f);
          for (int64_t t = 0; t < T; t++) {
            int64_t slot = (int64_t)pages[t / PAGE] * PAGE + t % PAGE;
            for (int64_t e = 0; e < D; e++) {
              kf[t * D + e] = at_put(kc, c.dt, t * stride + e, rng_range(&r, -2.0f, 2.0f));
              at_put(kp, c.dt, slot * stride + e, kf[t * D + e]);
              if (c.latent) {
                if (e < Dv) vf[t * Dv + e] = kf[t * D + e];
                continue;
              }
              vf[t * D + e] = at_put(vc, c.dt, t * stride + e, rng_range(&r, -1.0f, 1.0f));
              at_put(vp, c.dt, slot * stride + e, vf[t * D + e]);
            }
          }
          const attend_kv cont = {
              .k = kc, .v = c.latent ? kc : vc, .v_width = Dv, .dt = c.dt, .row_stride = stride};
          const attend_kv paged = {.k = kp,
                                   .v = c.latent ? kp : vp,
                                   .v_width = Dv,
                                   .dt = c.dt,
                                   .row_stride = stride,
                                   .pages = pages,
                                   .page_rows = PAGE};
          float sinks[ATTEND_MAX_ROWS];
          attend_query rows[ATTEND_MAX_ROWS];
          int fwd[ATTEND_MAX_ROWS], rev[ATTEND_MAX_ROWS];
          for (int i = 0; i < n; i++) {
            const int pos = i / c.G, h = i % c.G;
            const int64_t p = T - c.P + pos;
            sinks[i] = h % 2 ? 4.0f : 0.3f;
            rows[i] = (attend_query){.q = q + i * D,
                                     .lo = c.W > 0 && p - c.W + 1 > 0 ? p - c.W + 1 : 0,
                                     .hi = p,
                                     .sink = c.sink ? &sinks[i] : NULL};
            fwd[i] = i;
            rev[i] = n - 1 - i;
          }
          float *work = malloc(attend_work_floats(D, Dv) * sizeof(float));
          float *want = malloc((size_t)(n * Dv) * sizeof(float));
          float *got = malloc((size_t)(n * Dv) * sizeof(float));
          double *ref = malloc((size_t)Dv * sizeof(double));
          char name[240];
          int nm =
              snprintf(name, sizeof name,
                       "attend %s D=%lld Dv=%lld%s T=%lld G=%d P=%d W=%lld softcap=%g "
                       "sink=%d",
                       AT_DTYPE_NAMES[di], (long long)D, (long long)Dv, c.latent ? " (latent)" : "",
                       (long long)T, c.G, c.P, (long long)c.W, (double)c.softcap, c.sink);
          /* the scalar variant, whole tile: the bits every other run must give */
          at_run(attend_rows_scalar, &cont, &c, scale, rows, n, fwd, n, want, work);
          for (int i = 0; i < n; i++) {
            double A = 0.0, R = 0.0, V = 0.0, lo_s = INFINITY, hi_s = -INFINITY;
            at_reference(rows[i].q, kf, vf, D, Dv, rows[i].lo, rows[i].hi, scale, c.softcap,
                         rows[i].sink, ref, &A, &R);
            for (int64_t t = rows[i].lo; t <= rows[i].hi; t++) {
              double dot = 0.0;
              for (int64_t e = 0; e < D; e++) dot += (double)rows[i].q[e] * kf[t * D + e];
              dot *= scale;
              if (dot < lo_s) lo_s = dot;
              if (dot > hi_s) hi_s = dot;
              for (int64_t e = 0; e < Dv; e++)
                if (fabs(vf[t * Dv + e]) > V) V = fabs(vf[t * Dv + e]);
            }
            /* ATTEND_TOL, first-order error bound of the arithmetic of attend.h (u = 2^-24,
             * n keys, nb key blocks, A = max_t Σ_e |q_e k_te|, R = max_t (m - s_t) (and the
             * sink's), Rm = the range of the scores, V = max |v|, exp within ATTEND_EXP_ULP
             * ulp = 2 ATTEND_EXP_ULP u):
             *   scores: D-term fma chain (D u A), the scale (u scale A), the softcap's division,
             *           tanhf (2 ulp) and its product: e_s = (D+1) u scale A + 3 u softcap;
             *   weights e^{s_t - m'}: e_s, the subtraction (u R) and the exponential;
             *   rescales: each block's α errs by its exponential and its subtraction (u |Δm|,
             *           Σ over blocks <= u Rm), and multiplies acc and l (u each): what has been
             *           summed so far is weighted off by that against later terms, so
             *           e_w = e_s + u R + e_x + nb (e_x + 2 u) + u Rm, e_x = 2 ATTEND_EXP_ULP u;
             *   numerator Σ p_t v_t (fma) and denominator Σ p_t (+ sink): (n+1) u relative of
             *           Σ p |v| <= V Σ p each; the final product and division: 2 u;
             *   so |o - ref| <= V (2 e_w + (2n + 4) u), and twice that for second-order terms.
             * Worst-case; the measured error is printed below, far under it. */
            const int64_t nk = rows[i].hi - rows[i].lo + 1;
            const int64_t nb = rows[i].hi / ATTEND_KB - rows[i].lo / ATTEND_KB + 1;
            const double e_x = 2.0 * ATTEND_EXP_ULP * u;
            const double e_s = (double)(D + 1) * u * scale * A + 3.0 * u * c.softcap;
            const double e_w = e_s + u * R + e_x + (double)nb * (e_x + 2.0 * u) + u * (hi_s - lo_s);
            const double tol = 2.0 * V * (2.0 * e_w + (double)(2 * nk + 4) * u);
            double err = 0.0;
            for (int64_t e = 0; e < Dv; e++) {
              double x = isfinite(want[i * Dv + e]) ? fabs(want[i * Dv + e] - ref[e]) : INFINITY;
              if (!(x <= err)) err = x; /* NaN/inf propagate to err as failure */
            }
            if (tol > 0.0 && err / tol > worst) worst = err / tol;
            snprintf(name + nm, sizeof name - (size_t)nm,
                     " row %d: vs double reference (err %.3g, tol %.3g)", i, err, tol);
            case_result(err <= tol, name, err);
          }
          /* every variant, every way of tiling, both addressings: the same bits */
          for (int vi = 0; vi < n_vs; vi++) {
            const attend_rows_fn fn = attend_rows_for(vs[vi]);
            static const char *const how[6] = {"whole tile", "reversed",   "alone",
                                               "tiles of 3", "tiles of 5", "paged"};
            for (int k = 0; k < 6; k++) {
              for (int64_t e = 0; e < n * Dv; e++) got[e] = NAN;
              const int tile = k == 2 ? 1 : k == 3 ? 3 : k == 4 ? 5 : n;
              at_run(fn, k == 5 ? &paged : &cont, &c, scale, rows, n, k == 1 ? rev : fwd, tile, got,
                     work);
              snprintf(name + nm, sizeof name - (size_t)nm,
                       " %s, %s: the scalar variant's whole-tile bits", kernel_variant_name(vs[vi]),
                       how[k]);
              case_result(memcmp(got, want, (size_t)(n * Dv) * sizeof(float)) == 0, name, 0.0);
            }
          }
          free(q);
          free(kf);
          free(vf);
          free(kc);
          free(vc);
          free(kp);
          free(vp);
          free(pages);
          free(work);
          free(want);
          free(got);
          free(ref);
        }
  printf("  attend: worst error / tolerance %.3g\n", worst);
}

/* ---- conv_causal_channel -------------------------------------------------------------------- */

/* conv_causal_channel, the one implementation: against a double reference within the bound
 * derived below. */
static void grid_conv_causal(const kernel_variant *vs, int n_vs) {
  (void)vs;
  (void)n_vs; /* one implementation in every variant today */
  static const int64_t Ks[] = {1, 2, 3, 4, 7};
  static const int64_t dils[] = {1, 2, 3};
  static const int64_t Ls[] = {1, 2, 5, 33};
  const double u = FLT_EPSILON / 2.0;
  double worst = 0.0;
  rng r = rng_seed(0x636f6e76u);
  for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
    for (size_t di = 0; di < sizeof dils / sizeof dils[0]; di++)
      for (size_t li = 0; li < sizeof Ls / sizeof Ls[0]; li++)
        for (int opt = 0; opt < 4; opt++) { /* silu off/on x bias 0/random */
          const int64_t K = Ks[ki], dil = dils[di], L = Ls[li], F = (K - 1) * dil + L;
          const int silu = opt & 1;
          const float bias = opt & 2 ? rng_range(&r, -1.0f, 1.0f) : 0.0f;
          float *x = malloc((size_t)F * sizeof(float)), *w = malloc((size_t)K * sizeof(float));
          float *y = malloc((size_t)L * sizeof(float));
          for (int64_t i = 0; i < F; i++) x[i] = rng_range(&r, -2.0f, 2.0f);
          for (int64_t k = 0; k < K; k++) w[k] = rng_range(&r, -1.0f, 1.0f);
          conv_causal_channel(x, w, K, dil, bias, silu, L, y);
          double err_ratio = 0.0, err = 0.0, tol_at = 0.0;
          for (int64_t t = 0; t < L; t++) {
            double a = bias, M = fabs(bias);
            for (int64_t k = 0; k < K; k++) {
              a += (double)w[k] * x[t + k * dil];
              M += fabs((double)w[k] * x[t + k * dil]);
            }
            double ref = silu ? a / (1.0 + exp(-a)) : a;
            /* CONV_TOL: the f32 sum of bias and K products in order, (K+1) u M with
             * M = |bias| + Σ_k |w_k x|; silu's slope is at most 1.1, and its f32 evaluation
             * (expf <= 2 u, the addition, the division) adds 4 u |y|; twice that for the
             * second-order terms: tol = 2 (1.1 (K+1) u M + 4 u |ref|) (+ FLT_MIN). */
            double tol = 2.0 * (1.1 * (double)(K + 1) * u * M + 4.0 * u * fabs(ref)) + FLT_MIN;
            double e = isfinite(y[t]) ? fabs(y[t] - ref) : INFINITY;
            if (!(e / tol <= err_ratio)) {
              err_ratio = e / tol;
              err = e;
              tol_at = tol;
            }
          }
          if (err_ratio > worst) worst = err_ratio;
          char name[200];
          snprintf(name, sizeof name,
                   "conv_causal_channel K=%lld dil=%lld L=%lld silu=%d bias=%d: vs double "
                   "reference (err %.3g, tol %.3g)",
                   (long long)K, (long long)dil, (long long)L, silu, (opt >> 1) & 1, err, tol_at);
          case_result(err_ratio <= 1.0, name, err);
          free(x);
          free(w);
          free(y);
        }
  printf("  conv_causal_channel: worst error / tolerance %.3g\n", worst);
}

/* ---- rope_rotate_f32 ------------------------------------------------------------------------ */

/* rope_rotate_f32, the one implementation: against a double reference within ROPE_TOL, and in
 * place giving the bits of out of place. */
static void grid_rope(const kernel_variant *vs, int n_vs) {
  (void)vs;
  (void)n_vs; /* one implementation in every variant today */
  static const int64_t rots[] = {2, 6, 16, 18, 64, 128};
  const double u = FLT_EPSILON / 2.0;
  double worst = 0.0;
  rng r = rng_seed(0x726f7065u);
  for (size_t ri = 0; ri < sizeof rots / sizeof rots[0]; ri++)
    for (int il = 0; il < 2; il++) {
      const int64_t rot = rots[ri], h = rot / 2;
      float *x = malloc((size_t)rot * sizeof(float)), *y = malloc((size_t)rot * sizeof(float));
      float *yi = malloc((size_t)rot * sizeof(float)), *c = malloc((size_t)h * sizeof(float));
      float *sn = malloc((size_t)h * sizeof(float));
      for (int64_t i = 0; i < rot; i++) x[i] = rng_range(&r, -4.0f, 4.0f);
      for (int64_t i = 0; i < h; i++) {
        float th = rng_range(&r, -100.0f, 100.0f);
        c[i] = cosf(th);
        sn[i] = sinf(th);
      }
      rope_rotate_f32(x, c, sn, rot, il, y);
      memcpy(yi, x, (size_t)rot * sizeof(float));
      rope_rotate_f32(yi, c, sn, rot, il, yi);
      double ratio = 0.0;
      for (int64_t i = 0; i < h; i++) {
        const int64_t ia = il ? 2 * i : i, ib = il ? 2 * i + 1 : i + h;
        const double a = x[ia], b = x[ib], ci = c[i], si = sn[i];
        const double ra = a * ci - b * si, rb = b * ci + a * si;
        /* ROPE_TOL: fl(fl(a c) - fl(b s)) differs from a c - b s by at most
         * (2u + u^2)(|a c| + |b s|): each product and the difference rounded once (u = 2^-24);
         * likewise for b c + a s. */
        const double ta = (2.0 * u + u * u) * (fabs(a * ci) + fabs(b * si)) + FLT_MIN;
        const double tb = (2.0 * u + u * u) * (fabs(b * ci) + fabs(a * si)) + FLT_MIN;
        const double ea = isfinite(y[ia]) ? fabs(y[ia] - ra) / ta : INFINITY;
        const double eb = isfinite(y[ib]) ? fabs(y[ib] - rb) / tb : INFINITY;
        if (!(ea <= ratio)) ratio = ea;
        if (!(eb <= ratio)) ratio = eb;
      }
      if (ratio > worst) worst = ratio;
      char name[160];
      snprintf(name, sizeof name, "rope_rotate_f32 rot=%lld interleaved=%d: vs double reference",
               (long long)rot, il);
      case_result(ratio <= 1.0, name, ratio);
      snprintf(name, sizeof name, "rope_rotate_f32 rot=%lld interleaved=%d: in place, same bits",
               (long long)rot, il);
      case_result(memcmp(y, yi, (size_t)rot * sizeof(float)) == 0, name, 0.0);
      free(x);
      free(y);
      free(yi);
      free(c);
      free(sn);
    }
  printf("  rope_rotate_f32: worst error / tolerance %.3g\n", worst);
}

/* The commit's replay (kernels/state_replay.h) against replaying slot by slot, written here as
 * abi.md §2.5 states it (state = fmaf(key, delta, state * decay), one slot after another over the
 * whole state): every variant bit for bit, every a in 0..C, key widths around 8, GQA ratios 1 and
 * 2, in place and not. */
static void grid_replay_recurrent(const kernel_variant *vs, int n_vs) {
  rng r = rng_seed(0x7265706cu);
  static const int64_t dks[] = {1, 7, 8, 9, 16, 33}, C = 4, Hk = 2;
  for (size_t ki = 0; ki < sizeof dks / sizeof dks[0]; ki++)
    for (int64_t ratio = 1; ratio <= 2; ratio++) {
      const int64_t Dk = dks[ki], Dv = 5, Hv = Hk * ratio, n = Hv * Dv * Dk;
      const int64_t w = C * (Hv + Hk * Dk + Hv * Dv);
      float *src = malloc((size_t)n * sizeof(float)), *want = malloc((size_t)n * sizeof(float));
      float *got = malloc((size_t)n * sizeof(float)), *cap = malloc((size_t)w * sizeof(float));
      for (int64_t i = 0; i < n; i++) src[i] = rng_range(&r, -1.0f, 1.0f);
      for (int64_t i = 0; i < w; i++) cap[i] = rng_range(&r, -1.0f, 1.0f);
      for (int64_t i = 0; i < C * Hv; i++) cap[i] = rng_range(&r, 0.5f, 1.0f); /* decays */
      const float *decay = cap, *key = cap + C * Hv, *delta = key + C * Hk * Dk;
      for (int64_t a = 0; a <= C; a++) {
        memcpy(want, src, (size_t)n * sizeof(float));
        for (int64_t t = 0; t < a; t++)
          for (int64_t hv = 0; hv < Hv; hv++)
            for (int64_t c = 0; c < Dv; c++)
              for (int64_t k = 0; k < Dk; k++) {
                float *x = &want[(hv * Dv + c) * Dk + k];
                *x = fmaf(key[(t * Hk + hv / ratio) * Dk + k], delta[(t * Hv + hv) * Dv + c],
                          *x * decay[t * Hv + hv]);
              }
        for (int vi = -1; vi < n_vs; vi++) {
          state_replay_recurrent_fn fn =
              vi < 0 ? state_replay_recurrent_ref : kernel_set_of(vs[vi])->replay_recurrent;
          if (!fn) continue;
          for (int inplace = 0; inplace < 2; inplace++) {
            memcpy(got, src, (size_t)n * sizeof(float));
            fn(inplace ? got : src, got, cap, C, Hv, Hk, Dk, Dv, a);
            char name[160];
            snprintf(name, sizeof name, "replay_recurrent %s Dk=%lld Hv/Hk=%lld a=%lld%s",
                     vi < 0 ? "ref" : kernel_variant_name(vs[vi]), (long long)Dk, (long long)ratio,
                     (long long)a, inplace ? " in place" : "");
            case_result(memcmp(got, want, (size_t)n * sizeof(float)) == 0, name, 0.0);
          }
        }
      }
      free(src);
      free(want);
      free(got);
      free(cap);
    }
}

/* ---- the grid ------------------------------------------------------------------------------- */

typedef struct kernel_column {
  const char *name;
  void (*grid)(const kernel_variant *vs, int n_vs);
} kernel_column;

/* One row per kernel of kernel_set (kernels/dispatch.h), and one per single-implementation core
 * (attend_rows, conv_causal_channel, rope_rotate_f32: outside the table;
 * attend_rows picks its variant itself, attend_rows_for). */
static const kernel_column COLUMNS[] = {
    {"matmul_wt", grid_matmul_wt},
    {"matmul_wt bf16-dot", grid_matmul_wt_bf16},
    {"wt_round_bf16", grid_round_bf16},
    {"gated_delta_decode", grid_gated_delta_decode},
    {"replay_recurrent", grid_replay_recurrent},
    {"gated_delta_chunk", grid_gated_delta_chunk},
    {"attend_expf", grid_attend_exp},
    {"act", grid_act},
    {"attend_rows", grid_attend},
    {"conv_causal_channel", grid_conv_causal},
    {"rope_rotate_f32", grid_rope},
};

static void test_kernel_grid(void) {
  kernel_variant vs[KERNEL_N_VARIANTS];
  int n_vs = 0;
  for (int v = 0; v < KERNEL_N_VARIANTS; v++)
    if (kernel_variant_available((kernel_variant)v)) vs[n_vs++] = (kernel_variant)v;
  CHECK(n_vs >= 1 && vs[0] == KERNEL_SCALAR);
  printf("  variants this CPU runs:");
  for (int i = 0; i < n_vs; i++) printf(" %s", kernel_variant_name(vs[i]));
  printf("\n");
  for (size_t c = 0; c < sizeof COLUMNS / sizeof COLUMNS[0]; c++) {
    int before = n_cases;
    COLUMNS[c].grid(vs, n_vs);
    printf("  %-20s %d cases\n", COLUMNS[c].name, n_cases - before);
  }
}

/* The table itself: every row named, its MatMulWT kernels present where the variant runs. */
static void test_kernel_table(void) {
  for (int v = 0; v < KERNEL_N_VARIANTS; v++) {
    const kernel_set *ks = kernel_set_of((kernel_variant)v);
    CHECK(ks->name && strcmp(ks->name, kernel_variant_name((kernel_variant)v)) == 0);
    CHECK(ks->matmul_wt != NULL);
    if (!kernel_variant_available((kernel_variant)v)) continue;
    for (int d = 0; d < 3; d++) CHECK(ks->matmul_wt->k[d][1] != NULL);
  }
  CHECK(kernel_set_of(KERNEL_SCALAR)->gated_delta_decode == NULL);
  CHECK(kernel_set_of(KERNEL_SCALAR)->replay_recurrent == NULL);
  CHECK(kernel_set_of(KERNEL_SCALAR)->gated_delta_chunk == NULL);
  for (int v = 0; v < KERNEL_N_VARIANTS; v++) CHECK(kernel_set_of((kernel_variant)v)->act != NULL);
}

int main(void) {
  RUN(test_kernel_table);
  RUN(test_kernel_grid);
  return check_finish();
}
