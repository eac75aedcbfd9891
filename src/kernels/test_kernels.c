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
 *   gated_delta_chunk   (one implementation today) against L recurrent steps, NMSE at most
 *                       GATED_DELTA_CHUNK_NMSE, state and outputs.
 *   attend_row          (one implementation today: PagedAttention's and GroupQueryAttention's
 *                       core) against a double reference, per element within ATTEND_TOL (an
 *                       error bound derived beside it from the inputs), f32/f16/bf16 rows, with
 *                       softcap, head sink and a window start; and paged addressing (pages out
 *                       of order) giving the bits of contiguous rows.
 *   conv_causal_channel (one implementation today: both causal convs' core) against a double
 *                       reference within CONV_TOL (derived beside it), silu on/off, dilation.
 *   rope_rotate_f32     (one implementation today: RotaryEmbedding's, PagedAttention's and
 *                       GroupQueryAttention's rotation) against a double reference within
 *                       ROPE_TOL (derived beside it), both pairings; in place gives the bits.
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
      free(a);
      free(wbuf);
      free(wv);
    }
  printf("  matmul_wt bf16-dot: tables");
  for (int si = 0; si < n_sets; si++) printf(" %s", names[si]);
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

static const int64_t GD_DIMS[] = {1, 3, 8, 9, 16, 24, 64, 128};
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

/* gated_delta_chunk over L tokens against L calls of gated_delta_token. */
static void grid_gated_delta_chunk(const kernel_variant *vs, int n_vs) {
  (void)vs;
  (void)n_vs; /* one implementation in every variant today */
  static const int64_t Ls[] = {1, 2, 5, 16, 33};
  static const int64_t dims[][2] = {{1, 1}, {3, 9}, {16, 8}, {24, 17}, {64, 64}};
  double worst = 0.0;
  rng r = rng_seed(0x6368756e6bu);
  for (size_t li = 0; li < sizeof Ls / sizeof Ls[0]; li++)
    for (size_t di = 0; di < sizeof dims / sizeof dims[0]; di++)
      for (int rule = 0; rule < 4; rule++)
        for (int per_dim = 0; per_dim < 2; per_dim++)
          for (int64_t G = 1; G <= 2; G++) {
            int64_t L = Ls[li], Dk = dims[di][0], Dv = dims[di][1], Dg = per_dim ? Dk : 1;
            gated_delta_shape sc = {
                Dk, Dv, G, L, per_dim, rule & 1, (rule >> 1) & 1, 1.0f / sqrtf((float)Dk)};
            gated_delta_shape st = sc;
            st.C = 1;
            gated_delta_ws wc, wt;
            char *bc = gd_ws_new(&sc, &wc), *bt = gd_ws_new(&st, &wt);
            float *kk = malloc((size_t)(L * Dk) * sizeof(float));
            float *qq = malloc((size_t)(G * L * Dk) * sizeof(float));
            float *vv = malloc((size_t)(L * Dv) * sizeof(float));
            float *bb = malloc((size_t)L * sizeof(float)),
                  *gg = malloc((size_t)(L * Dg) * sizeof(float));
            float *oc = malloc((size_t)(G * L * Dv) * sizeof(float));
            float *ot = malloc((size_t)(G * L * Dv) * sizeof(float));
            for (int64_t i = 0; i < L * Dk; i++) kk[i] = rng_range(&r, -0.3f, 0.3f);
            for (int64_t i = 0; i < G * L * Dk; i++) qq[i] = rng_range(&r, -1.0f, 1.0f);
            for (int64_t i = 0; i < L * Dv; i++) vv[i] = rng_range(&r, -1.0f, 1.0f);
            for (int64_t i = 0; i < L; i++) bb[i] = (rule >> 1) & 1 ? rng_range(&r, 0.1f, 0.9f) : 1;
            for (int64_t i = 0; i < L * Dg; i++) gg[i] = rule & 1 ? rng_range(&r, -0.5f, 0.0f) : 0;
            for (int64_t i = 0; i < Dk * Dv; i++) wc.S[i] = wt.S[i] = rng_range(&r, -0.5f, 0.5f);
            memcpy(wc.K, kk, (size_t)(L * Dk) * sizeof(float));
            memcpy(wc.V, vv, (size_t)(L * Dv) * sizeof(float));
            memcpy(wc.Q, qq, (size_t)(G * L * Dk) * sizeof(float));
            memcpy(wc.beta, bb, (size_t)L * sizeof(float));
            memcpy(wc.gl, gg, (size_t)(L * Dg) * sizeof(float));
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
            char name[160];
            snprintf(name, sizeof name,
                     "gated_delta_chunk L=%lld Dk=%lld Dv=%lld rule=%d per_dim=%d G=%lld: NMSE "
                     "vs token steps (out %.3g, state %.3g)",
                     (long long)L, (long long)Dk, (long long)Dv, rule, per_dim, (long long)G, eo,
                     es);
            case_result(e <= GATED_DELTA_CHUNK_NMSE, name, e);
            free(bc);
            free(bt);
            free(kk);
            free(qq);
            free(vv);
            free(bb);
            free(gg);
            free(oc);
            free(ot);
          }
  printf("  gated_delta_chunk: worst NMSE vs token steps %.3g (bound %.0e)\n", worst,
         GATED_DELTA_CHUNK_NMSE);
}

/* ---- attend_row ----------------------------------------------------------------------------- */

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

/* attend_row, the one implementation (scalar, in every variant): against the double reference
 * within ATTEND_TOL (below), and the paged addressing bit-identical to the contiguous one. Two
 * value layouts: separate value rows D wide, and the latent one (PagedAttention LATENT): values
 * are the first Dv = (D + 1) / 2 elements of the key rows themselves (v == k). */
static void grid_attend_row(const kernel_variant *vs, int n_vs) {
  (void)vs;
  (void)n_vs; /* one implementation in every variant today */
  static const int64_t Ds[] = {1, 3, 8, 64, 128};
  static const int64_t ns[] = {1, 2, 17, 100};
  static const int64_t los[] = {0, 5};
  static const int64_t PAGE = 4; /* rows per page in the paged copy */
  const double u = FLT_EPSILON / 2.0;
  double worst = 0.0;
  rng r = rng_seed(0x617474656e64u);
  for (int di = 0; di < 3; di++)
    for (size_t Di = 0; Di < sizeof Ds / sizeof Ds[0]; Di++)
      for (size_t ni = 0; ni < sizeof ns / sizeof ns[0]; ni++)
        for (size_t li = 0; li < sizeof los / sizeof los[0]; li++)
          for (int opt = 0; opt < 12; opt++) { /* softcap off/on x sink none/small/large x
                                                * separate/latent values */
            const ph_dtype dt = AT_DTYPES[di];
            const size_t es = dtype_size(dt);
            const int latent = opt >= 6;
            const int64_t D = Ds[Di], lo = los[li], hi = lo + ns[ni] - 1, T = hi + 1;
            const int64_t Dv = latent ? (D + 1) / 2 : D;
            const int64_t n_pages = (T + PAGE - 1) / PAGE, stride = D + 3; /* rows apart */
            const int o6 = opt % 6;
            const float scale = 1.0f / sqrtf((float)D), softcap = o6 & 1 ? 5.0f : 0.0f;
            const float sink_v = o6 >= 4 ? 4.0f : 0.3f, *sink = o6 >= 2 ? &sink_v : NULL;
            float *q = malloc((size_t)D * sizeof(float));
            float *kf = malloc((size_t)(T * D) * sizeof(float));
            float *vf = malloc((size_t)(T * D) * sizeof(float));
            /* contiguous: rows stride apart; paged: page order reversed, rows stride apart */
            char *kc = calloc((size_t)(T * stride), es), *vc = calloc((size_t)(T * stride), es);
            char *kp = calloc((size_t)(n_pages * PAGE * stride), es);
            char *vp = calloc((size_t)(n_pages * PAGE * stride), es);
            int32_t *pages = malloc((size_t)n_pages * sizeof(int32_t));
            for (int64_t pg = 0; pg < n_pages; pg++) pages[pg] = (int32_t)(n_pages - 1 - pg);
            for (int64_t e = 0; e < D; e++) q[e] = rng_range(&r, -2.0f, 2.0f);
            for (int64_t t = 0; t < T; t++) {
              int64_t slot = (int64_t)pages[t / PAGE] * PAGE + t % PAGE;
              for (int64_t e = 0; e < D; e++) {
                kf[t * D + e] = at_put(kc, dt, t * stride + e, rng_range(&r, -2.0f, 2.0f));
                at_put(kp, dt, slot * stride + e, kf[t * D + e]);
                if (latent) {
                  if (e < Dv) vf[t * Dv + e] = kf[t * D + e];
                  continue;
                }
                vf[t * D + e] = at_put(vc, dt, t * stride + e, rng_range(&r, -1.0f, 1.0f));
                at_put(vp, dt, slot * stride + e, vf[t * D + e]);
              }
            }
            const attend_kv cont = {
                .k = kc, .v = latent ? kc : vc, .v_width = Dv, .dt = dt, .row_stride = stride};
            const attend_kv paged = {.k = kp,
                                     .v = latent ? kp : vp,
                                     .v_width = Dv,
                                     .dt = dt,
                                     .row_stride = stride,
                                     .pages = pages,
                                     .page_rows = PAGE};
            float *scores = malloc((size_t)(hi - lo + 1) * sizeof(float));
            float *row = malloc((size_t)D * sizeof(float));
            float *oc = malloc((size_t)D * sizeof(float)), *op = malloc((size_t)D * sizeof(float));
            double *ref = malloc((size_t)D * sizeof(double)), A = 0.0, R = 0.0;
            attend_row(q, D, lo, hi, scale, softcap, sink, &cont, scores, row, oc);
            attend_row(q, D, lo, hi, scale, softcap, sink, &paged, scores, row, op);
            at_reference(q, kf, vf, D, Dv, lo, hi, scale, softcap, sink, ref, &A, &R);
            /* ATTEND_TOL, first-order error bound of attend_row's f32 arithmetic (u = 2^-24,
             * n = hi-lo+1 rows, A = max_t Σ_e |q_e k_te|, R = max_t (m - s_t), V = max |v|):
             *   scores: D-term dot (D u A), the scale and the softcap's division (2 u scale A),
             *           tanhf (2 ulp) and its product (u): e_s = (D+2) u scale A + 3 u softcap;
             *   weights e^{s_t - m}: e_s, the subtraction (u R) and expf (<= 2 u, glibc < 1 ulp);
             *           the shift by m is common to every term and cancels in the ratio:
             *           e_w = e_s + u R + 2 u relative;
             *   numerator Σ w_t v_t and denominator Σ w_t (+ sink): n products and n additions
             *           each, (n+1) u relative of Σ w |v| <= V Σ w; the division: u;
             *   so |o - ref| <= V (2 e_w + (2n + 3) u), and twice that for the second-order
             *   terms. Worst-case; the measured error is printed below, far under it. */
            double V = 0.0;
            for (int64_t i = 0; i < T * Dv; i++)
              if (fabs(vf[i]) > V) V = fabs(vf[i]);
            const double e_s = (double)(D + 2) * u * scale * A + 3.0 * u * softcap;
            const double e_w = e_s + u * R + 2.0 * u;
            const double tol = 2.0 * V * (2.0 * e_w + (double)(2 * (hi - lo + 1) + 3) * u);
            double err = 0.0;
            for (int64_t e = 0; e < Dv; e++) {
              double x = isfinite(oc[e]) ? fabs(oc[e] - ref[e]) : INFINITY;
              if (!(x <= err)) err = x; /* NaN/inf propagate to err as failure */
            }
            if (tol > 0.0 && err / tol > worst) worst = err / tol;
            char name[200];
            snprintf(name, sizeof name,
                     "attend_row %s D=%lld Dv=%lld%s lo=%lld n=%lld softcap=%g sink=%s: vs "
                     "double reference (err %.3g, tol %.3g)",
                     AT_DTYPE_NAMES[di], (long long)D, (long long)Dv, latent ? " (latent)" : "",
                     (long long)lo, (long long)(hi - lo + 1), (double)softcap,
                     sink ? (o6 >= 4 ? "4" : "0.3") : "none", err, tol);
            case_result(err <= tol, name, err);
            snprintf(name, sizeof name,
                     "attend_row %s D=%lld lo=%lld n=%lld opt=%d: paged rows give the "
                     "contiguous bits",
                     AT_DTYPE_NAMES[di], (long long)D, (long long)lo, (long long)(hi - lo + 1),
                     opt);
            case_result(memcmp(oc, op, (size_t)Dv * sizeof(float)) == 0, name, 0.0);
            free(q);
            free(kf);
            free(vf);
            free(kc);
            free(vc);
            free(kp);
            free(vp);
            free(pages);
            free(scores);
            free(row);
            free(oc);
            free(op);
            free(ref);
          }
  printf("  attend_row: worst error / tolerance %.3g\n", worst);
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
 * (gated_delta_chunk, attend_row, conv_causal_channel, rope_rotate_f32: outside the table). */
static const kernel_column COLUMNS[] = {
    {"matmul_wt", grid_matmul_wt},
    {"matmul_wt bf16-dot", grid_matmul_wt_bf16},
    {"wt_round_bf16", grid_round_bf16},
    {"gated_delta_decode", grid_gated_delta_decode},
    {"replay_recurrent", grid_replay_recurrent},
    {"gated_delta_chunk", grid_gated_delta_chunk},
    {"attend_row", grid_attend_row},
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
}

int main(void) {
  RUN(test_kernel_table);
  RUN(test_kernel_grid);
  return check_finish();
}
