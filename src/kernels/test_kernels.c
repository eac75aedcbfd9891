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
 *   gated_delta_decode  the bits of the reference (gated_delta_token on the K-major transposed
 *                       state), output and final state, with the state absent, separate or
 *                       aliased, and no final state asked for.
 *   gated_delta_chunk   (one implementation today) against L recurrent steps, NMSE at most
 *                       GATED_DELTA_CHUNK_NMSE, state and outputs.
 * Shapes: 1, odd sizes, and sizes around 8/16/64/256. A failing case is printed by name with its
 * error; NaN or infinity in any result fails. Each grid prints its worst NMSE.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/rng.h"
#include "check.h"
#include "kernels/dispatch.h"
#include "kernels/gated_delta.h"
#include "kernels/matmul_wt.h"
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

/* The reference decode: gated_delta_token on the K-major transpose of p's state. */
static void gd_decode_reference(const gated_delta_dec *p, const float *src, float *o, float *dst) {
  gated_delta_shape sh = {p->Dk, p->Dv, 1, 1, 0, p->gated, p->delta, p->scale};
  gated_delta_ws ws;
  char *base = gd_ws_new(&sh, &ws);
  int64_t Dk = p->Dk, Dv = p->Dv;
  for (int64_t c = 0; c < Dv; c++)
    for (int64_t k = 0; k < Dk; k++) ws.S[k * Dv + c] = src ? src[c * Dk + k] : 0.0f;
  memcpy(ws.K, p->k, (size_t)Dk * sizeof(float));
  memcpy(ws.Q, p->q, (size_t)Dk * sizeof(float));
  memcpy(ws.V, p->v, (size_t)Dv * sizeof(float));
  ws.beta[0] = p->beta;
  gd_sink sink = {o, 1, Dv};
  /* a = expf(gl) must give back p->a exactly for the bits to compare: set the decay directly */
  if (p->gated) {
    for (int64_t e = 0; e < Dk * Dv; e++) ws.S[e] *= p->a;
    sh.gated = 0;
  }
  gated_delta_token(&sh, &ws, gd_store, &sink);
  for (int64_t c = 0; c < Dv; c++)
    for (int64_t k = 0; k < Dk; k++) dst[c * Dk + k] = ws.S[k * Dv + c];
  free(base);
}

/* The scalar V-major reference, every value row. */
static void gd_decode_cols_all(const gated_delta_dec *p) {
  for (int64_t c0 = 0; c0 < p->Dv; c0 += 8)
    gated_delta_decode_cols_ref(p, c0, p->Dv - c0 < 8 ? p->Dv - c0 : 8);
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
          gd_decode_reference(&p, p.src, o_ref, dst_ref);
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
            memset(dst, 0xff, ns * sizeof(float));
            if (fn)
              fn(&pv);
            else
              gd_decode_cols_all(&pv);
            int ok = memcmp(o, o_ref, (size_t)Dv * sizeof(float)) == 0;
            if (pv.dst) ok = ok && memcmp(pv.dst, dst_ref, ns * sizeof(float)) == 0;
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

/* ---- the grid ------------------------------------------------------------------------------- */

typedef struct kernel_column {
  const char *name;
  void (*grid)(const kernel_variant *vs, int n_vs);
} kernel_column;

/* One row per kernel of kernel_set (kernels/dispatch.h). */
static const kernel_column COLUMNS[] = {
    {"matmul_wt", grid_matmul_wt},
    {"gated_delta_decode", grid_gated_delta_decode},
    {"gated_delta_chunk", grid_gated_delta_chunk},
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
}

int main(void) {
  RUN(test_kernel_table);
  RUN(test_kernel_grid);
  return check_finish();
}
