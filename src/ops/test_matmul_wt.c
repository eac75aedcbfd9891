/* test_matmul_wt — every MatMulWT kernel variant this CPU runs (kernels/dispatch.h: scalar
 * reference, AVX2, AVX-512), each forced in turn and checked:
 *
 *   accuracy     against a float64 reference over the grid M x K x N x W dtype x bias below,
 *                within the rounding bound derived at wt_bound();
 *   agreement    SIMD variants against the scalar reference (largest difference, printed for
 *                docs/performance.md), and AVX2 against AVX-512 bit for bit (same lanes, same
 *                fused operations, same tree: the design says they are equal);
 *   invariance   each row of an M-row call bit-identical to that row run alone, in sub-batches
 *                of every size at every offset, and on 1 vs 3 threads;
 *   conversions  all 65536 f16 and bf16 weight patterns, in the 16-lane loop and in the tail.
 *
 * A is f32 in the grid (A's conversion happens before the kernels and is the same code for
 * every variant); the invariance test also runs bf16 activations. Prints which variants ran.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "kernels/dispatch.h"
#include "op_testing.h"

static const ph_dtype WDTS[] = {PH_DTYPE_F32, PH_DTYPE_BF16, PH_DTYPE_F16};
#define N_WDTS 3

static const char *dtn(ph_dtype dt) {
  const char *s = dtype_safetensors_name(dt);
  return s ? s : "INVALID";
}

static tensor *tn2(ph_dtype dt, int64_t d0, int64_t d1) {
  return tensor_new(dt, 2, (int64_t[]){d0, d1});
}

/* Runs MatMulWT (bias may be NULL) on a pool of `threads`; NULL (and a failed check) on error. */
static tensor *wt_run(const tensor *a, const tensor *w, const tensor *bias, int threads) {
  gnode n = op_test_node("MatMulWT", "pagedhybrid.internal", bias ? 3 : 2, 1, NULL, 0);
  tensor *in[3] = {(tensor *)a, (tensor *)w, (tensor *)bias}, *out[1] = {NULL};
  diag d;
  ph_status s = op_test_run(&n, in, out, threads, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  if (s == PH_OK) return out[0];
  tensor_free(out[0]);
  return NULL;
}

/* The variants this CPU runs, in enum order; returns how many. */
static int available_variants(kernel_variant *v) {
  int n = 0;
  for (int i = 0; i < KERNEL_N_VARIANTS; i++)
    if (kernel_variant_available((kernel_variant)i)) v[n++] = (kernel_variant)i;
  return n;
}

static void force(kernel_variant v) {
  diag d;
  CHECK_STATUS(kernel_force_variant(v, &d), PH_OK, d.msg);
}

/* ---- the hook ------------------------------------------------------------------------------- */

static void test_variants(void) {
  kernel_variant v[KERNEL_N_VARIANTS];
  int n = available_variants(v);
  CHECK(n >= 1);
  CHECK(v[0] == KERNEL_SCALAR);
  printf("  MatMulWT variants on this CPU:");
  for (int i = 0; i < n; i++) printf(" %s", kernel_variant_name(v[i]));
  printf(" (default: %s)\n", kernel_variant_name(kernel_variant_active()));
  CHECK_EQ_STR(kernel_variant_name(KERNEL_AVX512), "avx512");
  CHECK_EQ_STR(kernel_variant_name((kernel_variant)7), "?");
  diag d;
  CHECK_STATUS(kernel_force_variant((kernel_variant)7, &d), PH_ERR_UNSUPPORTED, d.msg);
  for (int i = 0; i < KERNEL_N_VARIANTS; i++) {
    kernel_variant want = (kernel_variant)i;
    ph_status s = kernel_force_variant(want, &d);
    if (kernel_variant_available(want)) {
      CHECK_STATUS(s, PH_OK, d.msg);
      CHECK(kernel_variant_active() == want);
    } else {
      CHECK_STATUS(s, PH_ERR_UNSUPPORTED, d.msg);
      CHECK_CONTAINS(d.msg, kernel_variant_name(want));
    }
  }
}

/* ---- accuracy over the grid ----------------------------------------------------------------- */

/* Rounding bound of one output, |y - exact| <= wt_bound(K) * (sum_k |a_k w_k| + |bias|).
 * A and W are exact in f32 (f16 and bf16 widen exactly), so all error is the kernels' rounding.
 * Each output is a sum along one path of at most ceil(K / 16) accumulations into its lane, the
 * 4 tree additions and the bias addition; the reference also rounds each product first (FMA
 * variants do not). That is at most n = ceil(K / 16) + 6 roundings of partial sums bounded by the
 * absolute sum, so the classic bound gamma_n = n u / (1 - n u), u = 2^-24, applies (Higham,
 * Accuracy and Stability, §3.1). The float64 reference's own error (about 2^-53 relative) is
 * far below it. The output is f32 here (A is f32), so no final rounding to a narrower dtype. */
static double wt_bound(int64_t K) {
  double u = ldexp(1.0, -24), n = (double)((K + 15) / 16 + 6);
  return n * u / (1.0 - n * u);
}

typedef struct variant_stats {
  int64_t outputs, over_bound, same_as_scalar;
  double worst_vs_bound;  /* max |y - ref| / bound */
  double worst_u;         /* max |y - ref| / (u * (sum |a w| + |b|)) */
  double worst_vs_scalar; /* max |y - y_scalar| / (u * (sum |a w| + |b|)) */
} variant_stats;

/* Returns the number of rows of [M, N] outputs, in f32 y, outside ref +- tol. */
static int64_t grid_check(const char *what, const float *y, const double *ref, const double *mag,
                          int64_t n, double bound) {
  int64_t bad = 0;
  for (int64_t i = 0; i < n; i++) {
    double err = fabs((double)y[i] - ref[i]);
    /* + 1e-37: an output whose products are all zero must be zero; the floor only admits the
     * sign of a zero or a denormal, below any rounding of a nonzero sum */
    if (err <= bound * mag[i] + 1e-37) continue;
    if (!bad)
      fprintf(stderr, "  %s: element %lld is %.9g, reference %.12g, bound %.3g\n", what,
              (long long)i, (double)y[i], ref[i], bound * mag[i]);
    bad++;
  }
  return bad;
}

static void test_grid(void) {
  static const int64_t Ms[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 64, 65};
  static const int64_t Ks[] = {1, 7, 16, 31, 64, 100, 1024, 1031};
  static const int64_t Ns[] = {1, 3, 4, 5, 17, 64, 100};
  enum { NM = 12, NK = 8, NN = 7 };
  kernel_variant v[KERNEL_N_VARIANTS];
  int nv = available_variants(v);
  variant_stats st[KERNEL_N_VARIANTS];
  memset(st, 0, sizeof st);
  int64_t avx_mismatch = 0, avx_compared = 0, cases = 0;
  rng r = rng_seed(31);
  for (int wi = 0; wi < N_WDTS; wi++)
    for (int ki = 0; ki < NK; ki++)
      for (int ni = 0; ni < NN; ni++) {
        int64_t K = Ks[ki], N = Ns[ni];
        tensor *w = tn2(WDTS[wi], N, K);
        tensor *bias = tensor_new(PH_DTYPE_F32, 1, (int64_t[]){N});
        tensor_fill_uniform(w, &r, -1, 1);
        tensor_fill_uniform(bias, &r, -1, 1);
        double *wd = malloc((size_t)(N * K) * sizeof *wd);
        for (int64_t i = 0; i < N * K; i++) wd[i] = tensor_get_f32(w, i);
        for (int mi = 0; mi < NM; mi++) {
          int64_t M = Ms[mi], MN = M * N;
          tensor *a = tn2(PH_DTYPE_F32, M, K);
          tensor_fill_uniform(a, &r, -1, 1);
          double *ref = malloc((size_t)MN * 2 * sizeof *ref), *mag = ref + MN;
          const float *av = a->data;
          for (int64_t m = 0; m < M; m++)
            for (int64_t n = 0; n < N; n++) {
              double s = 0, sa = 0;
              for (int64_t k = 0; k < K; k++) {
                double p = (double)av[m * K + k] * wd[n * K + k];
                s += p;
                sa += fabs(p);
              }
              ref[m * N + n] = s;
              mag[m * N + n] = sa;
            }
          for (int with_bias = 0; with_bias < 2; with_bias++) {
            if (with_bias)
              for (int64_t i = 0; i < MN; i++) {
                double b = ((const float *)bias->data)[i % N];
                ref[i] += b;
                mag[i] += fabs(b);
              }
            tensor *y[KERNEL_N_VARIANTS] = {NULL};
            for (int vi = 0; vi < nv; vi++) {
              force(v[vi]);
              y[vi] = wt_run(a, w, with_bias ? bias : NULL, 1 + (int)((ki + ni + mi) % 3));
              if (!y[vi]) continue;
              char what[128];
              snprintf(what, sizeof what, "%s W %s M %lld K %lld N %lld bias %d",
                       kernel_variant_name(v[vi]), dtn(WDTS[wi]), (long long)M, (long long)K,
                       (long long)N, with_bias);
              const float *yv = y[vi]->data, *ys = y[0] ? (const float *)y[0]->data : NULL;
              variant_stats *s = &st[vi];
              s->over_bound += grid_check(what, yv, ref, mag, MN, wt_bound(K));
              s->outputs += MN;
              for (int64_t i = 0; i < MN; i++) {
                double scale = mag[i] > 0 ? mag[i] : 1e-30;
                double e = fabs((double)yv[i] - ref[i]) / (wt_bound(K) * scale);
                if (e > s->worst_vs_bound) s->worst_vs_bound = e;
                e = fabs((double)yv[i] - ref[i]) / (ldexp(1.0, -24) * scale);
                if (e > s->worst_u) s->worst_u = e;
                if (!ys) continue;
                s->same_as_scalar += memcmp(&yv[i], &ys[i], 4) == 0;
                double ds = fabs((double)yv[i] - (double)ys[i]) / (ldexp(1.0, -24) * scale);
                if (ds > s->worst_vs_scalar) s->worst_vs_scalar = ds;
              }
            }
            /* AVX2 and AVX-512 run the same operations per lane: equal bits */
            if (nv == 3 && y[1] && y[2]) {
              avx_compared += MN;
              for (int64_t i = 0; i < MN; i++)
                avx_mismatch += memcmp((float *)y[1]->data + i, (float *)y[2]->data + i, 4) != 0;
            }
            for (int vi = 0; vi < nv; vi++) tensor_free(y[vi]);
            cases++;
          }
          free(ref);
          tensor_free(a);
        }
        free(wd);
        tensor_free(w);
        tensor_free(bias);
      }
  printf("  %lld cases per variant; errors in units of u * (sum |a w| + |b|), u = 2^-24, and "
         "as a fraction of the bound gamma_n (sum |a w| + |b|):\n",
         (long long)cases);
  for (int vi = 0; vi < nv; vi++) {
    variant_stats *s = &st[vi];
    printf("  %-7s vs float64: max %.2f u (%.3f of the bound); vs scalar: %.1f%% bit-identical, "
           "max %.2f u\n",
           kernel_variant_name(v[vi]), s->worst_u, s->worst_vs_bound,
           100.0 * (double)s->same_as_scalar / (double)(s->outputs ? s->outputs : 1),
           s->worst_vs_scalar);
    CHECK_EQ_INT(s->over_bound, 0);
    CHECK(s->outputs > 0);
  }
  if (nv == 3) {
    printf("  avx2 vs avx512: %lld of %lld outputs differ\n", (long long)avx_mismatch,
           (long long)avx_compared);
    CHECK_EQ_INT(avx_mismatch, 0);
    CHECK(avx_compared > 0);
  } else {
    printf("  avx2 vs avx512: NOT COMPARED, this CPU runs %d of the 3 variants\n", nv);
  }
}

/* ---- batch invariance, per variant ---------------------------------------------------------- */

/* Rows [r0, r0 + rows) of a as their own tensor. */
static tensor *rows_of(const tensor *a, int64_t r0, int64_t rows) {
  int64_t K = a->dims[1];
  tensor *t = tn2(a->dtype, rows, K);
  size_t es = dtype_size(a->dtype);
  memcpy(t->data, (const char *)a->data + (size_t)(r0 * K) * es, (size_t)(rows * K) * es);
  return t;
}

/* Compares rows [0, rows) of part with rows [r0, r0 + rows) of full; returns rows that differ. */
static int64_t rows_differ(const tensor *part, const tensor *full, int64_t r0, int64_t rows) {
  if (!part || !full) return rows;
  size_t row_bytes = (size_t)full->dims[1] * dtype_size(full->dtype);
  int64_t bad = 0;
  for (int64_t i = 0; i < rows; i++)
    bad += memcmp((const char *)part->data + (size_t)i * row_bytes,
                  (const char *)full->data + (size_t)(r0 + i) * row_bytes, row_bytes) != 0;
  return bad;
}

/* One variant, one configuration: the full M-row call on 1 thread is the reference; every row
 * alone, every sub-batch of sizes 1..WT_RMAX + 1 at every offset, and the full call on 3
 * threads must give its bits. */
static int64_t invariance_case(ph_dtype wdt, ph_dtype adt, int64_t M, int64_t K, int64_t N, rng *r,
                               int64_t *compared) {
  tensor *a = tn2(adt, M, K), *w = tn2(wdt, N, K);
  tensor *bias = tensor_new(PH_DTYPE_BF16, 1, (int64_t[]){N});
  tensor_fill_uniform(a, r, -1, 1);
  tensor_fill_uniform(w, r, -1, 1);
  tensor_fill_uniform(bias, r, -1, 1);
  tensor *full = wt_run(a, w, bias, 1);
  int64_t bad = 0;
  tensor *t3 = wt_run(a, w, bias, 3);
  bad += rows_differ(t3, full, 0, M);
  *compared += M;
  tensor_free(t3);
  for (int64_t b = 1; b <= 7; b++)
    for (int64_t s = 0; s < M; s += b) {
      int64_t rows = M - s < b ? M - s : b;
      tensor *sub = rows_of(a, s, rows);
      tensor *part = wt_run(sub, w, bias, b % 2 ? 1 : 3);
      bad += rows_differ(part, full, s, rows);
      *compared += rows;
      tensor_free(part);
      tensor_free(sub);
    }
  if (bad)
    fprintf(stderr, "  batch invariance (%s): W %s A %s M %lld K %lld N %lld: %lld rows differ\n",
            kernel_variant_name(kernel_variant_active()), dtn(wdt), dtn(adt), (long long)M,
            (long long)K, (long long)N, (long long)bad);
  tensor_free(full);
  tensor_free(a);
  tensor_free(w);
  tensor_free(bias);
  return bad;
}

static void test_batch_invariance(void) {
  static const struct {
    ph_dtype w, a;
    int64_t M, K, N;
  } CFG[] = {
      {PH_DTYPE_BF16, PH_DTYPE_F32, 17, 1031, 37}, {PH_DTYPE_BF16, PH_DTYPE_BF16, 65, 100, 9},
      {PH_DTYPE_F16, PH_DTYPE_F32, 13, 31, 37},    {PH_DTYPE_F16, PH_DTYPE_F16, 65, 64, 5},
      {PH_DTYPE_F32, PH_DTYPE_F32, 13, 7, 37},     {PH_DTYPE_F32, PH_DTYPE_BF16, 9, 1024, 64},
  };
  kernel_variant v[KERNEL_N_VARIANTS];
  int nv = available_variants(v);
  rng r = rng_seed(32);
  for (int vi = 0; vi < nv; vi++) {
    force(v[vi]);
    int64_t bad = 0, compared = 0;
    for (size_t ci = 0; ci < sizeof CFG / sizeof CFG[0]; ci++)
      bad += invariance_case(CFG[ci].w, CFG[ci].a, CFG[ci].M, CFG[ci].K, CFG[ci].N, &r, &compared);
    printf("  %-7s %lld rows compared bit for bit, %lld differ\n", kernel_variant_name(v[vi]),
           (long long)compared, (long long)bad);
    CHECK_EQ_INT(bad, 0);
    CHECK(compared > 0);
  }
}

/* ---- bf16 mode (attribute bf16_dot = 1) ------------------------------------------------------ */

static tensor *wt_run_bf16(const tensor *a, const tensor *w, const tensor *bias, int threads,
                           int64_t mode, ph_status want) {
  gattr at = attr_int("bf16_dot", mode);
  gnode n = op_test_node("MatMulWT", "pagedhybrid.internal", bias ? 3 : 2, 1, &at, 1);
  tensor *in[3] = {(tensor *)a, (tensor *)w, (tensor *)bias}, *out[1] = {NULL};
  diag d;
  ph_status s = op_test_run(&n, in, out, threads, &d);
  CHECK_STATUS(s, want, d.msg);
  if (s == PH_OK) return out[0];
  tensor_free(out[0]);
  return NULL;
}

/* The bound against the exact sum of the rounded products (kernels/matmul_wt.h: 2 ceil(K / 32)
 * rounded sums per lane, 4 tree levels, + 1 for the bias): gamma_n, u = 2^-24. */
static double wtb_op_bound(int64_t K) {
  double u = ldexp(1.0, -24), n = (double)(2 * ((K + 31) / 32) + 5);
  return n * u / (1.0 - n * u);
}

/* Every variant in bf16 mode: within the bound of the exact sum of bf16(A) x bf16(W) products
 * (+ bias), bit-identical to the scalar variant, each row bit-identical alone and in sub-batches,
 * on 1 and 3 threads; for W f32, bf16 and f16 (f32/f16 W are rounded to bf16). */
static void test_bf16_mode(void) {
  static const int64_t Ms[] = {1, 3, 7, 13, 65, 300}; /* 300: two 256-row chunks */
  static const int64_t Ks[] = {1, 33, 64, 1031};
  static const int64_t Ns[] = {1, 5, 37};
  kernel_variant v[KERNEL_N_VARIANTS];
  int nv = available_variants(v);
  rng r = rng_seed(33);
  int64_t over = 0, differ = 0, rows_bad = 0, outputs = 0;
  double worst = 0;
  for (int wi = 0; wi < N_WDTS; wi++)
    for (int ki = 0; ki < 4; ki++)
      for (int ni = 0; ni < 3; ni++)
        for (int mi = 0; mi < 6; mi++) {
          int64_t M = Ms[mi], K = Ks[ki], N = Ns[ni];
          if (M > 256 && K > 64) continue; /* M = 300: two chunks; small K keeps it cheap */
          tensor *a = tn2(PH_DTYPE_F32, M, K), *w = tn2(WDTS[wi], N, K);
          tensor *bias = tensor_new(PH_DTYPE_F32, 1, (int64_t[]){N});
          tensor_fill_uniform(a, &r, -1, 1);
          tensor_fill_uniform(w, &r, -1, 1);
          tensor_fill_uniform(bias, &r, -1, 1);
          tensor *y0 = NULL;
          for (int vi = 0; vi < nv; vi++) {
            force(v[vi]);
            tensor *y = wt_run_bf16(a, w, bias, 1 + (int)((mi + ni) % 3), 1, PH_OK);
            if (!y) continue;
            const float *yv = y->data;
            if (vi == 0) {
              for (int64_t m = 0; m < M; m++)
                for (int64_t n = 0; n < N; n++) {
                  double s = 0, sa = 0;
                  for (int64_t k = 0; k < K; k++) {
                    double p =
                        (double)bf16_to_f32(f32_to_bf16(((float *)a->data)[m * K + k])) *
                        (double)bf16_to_f32(f32_to_bf16((float)tensor_get_f32(w, n * K + k)));
                    s += p;
                    sa += fabs(p);
                  }
                  double b = ((float *)bias->data)[n];
                  s += b;
                  sa += fabs(b);
                  double e = fabs((double)yv[m * N + n] - s), bound = wtb_op_bound(K) * sa;
                  if (!(e <= bound)) {
                    if (!over)
                      fprintf(stderr, "  bf16 W %s M %lld K %lld N %lld: %.9g vs %.12g\n",
                              dtn(WDTS[wi]), (long long)M, (long long)K, (long long)N,
                              (double)yv[m * N + n], s);
                    over++;
                  }
                  if (sa > 0 && e / bound > worst) worst = e / bound;
                  outputs++;
                }
              y0 = y;
              /* batch invariance: each row alone and the rows in sub-batches of 4 */
              for (int64_t s0 = 0; s0 < M; s0 += 4) {
                int64_t rows = M - s0 < 4 ? M - s0 : 4;
                for (int alone = 0; alone < 2; alone++)
                  for (int64_t q = 0; q < rows; q += alone ? 1 : rows) {
                    int64_t nr = alone ? 1 : rows;
                    tensor *sub = rows_of(a, s0 + q, nr);
                    tensor *part = wt_run_bf16(sub, w, bias, 2, 1, PH_OK);
                    rows_bad += rows_differ(part, y0, s0 + q, nr);
                    tensor_free(part);
                    tensor_free(sub);
                  }
              }
              continue;
            }
            differ += memcmp(y->data, y0->data, (size_t)(M * N) * sizeof(float)) != 0;
            tensor_free(y);
          }
          tensor_free(y0);
          tensor_free(a);
          tensor_free(w);
          tensor_free(bias);
        }
  printf("  bf16 mode: %lld outputs, worst %.3f of the bound; variant calls differing from "
         "scalar %lld; rows differing alone/in sub-batches %lld\n",
         (long long)outputs, worst, (long long)differ, (long long)rows_bad);
  CHECK_EQ_INT(over, 0);
  CHECK_EQ_INT(differ, 0);
  CHECK_EQ_INT(rows_bad, 0);
  CHECK(outputs > 0);
  /* bf16 mode really rounds A: a = 1 + 2^-10 (not a bf16) times w = 1 gives 1 */
  tensor *a = tn2(PH_DTYPE_F32, 1, 1), *w = tn2(PH_DTYPE_F32, 1, 1);
  ((float *)a->data)[0] = 1.0f + 0x1p-10f;
  ((float *)w->data)[0] = 1.0f;
  tensor *y = wt_run_bf16(a, w, NULL, 1, 1, PH_OK), *yf = wt_run_bf16(a, w, NULL, 1, 0, PH_OK);
  CHECK(y && ((float *)y->data)[0] == 1.0f);
  CHECK(yf && ((float *)yf->data)[0] == 1.0f + 0x1p-10f);
  tensor_free(y);
  tensor_free(yf);
  /* a value of bf16_dot other than 0 or 1 is refused */
  CHECK(wt_run_bf16(a, w, NULL, 1, 2, PH_ERR_INVALID_ARGUMENT) == NULL);
  tensor_free(a);
  tensor_free(w);
}

/* ---- weight conversions --------------------------------------------------------------------- */

/* Every 16-bit pattern as a weight, alone in its row at position `at` against a = 1: the output
 * is the pattern's exact f32 value (NaN stays NaN). K = 1: the tail path; K = 16 and 35: the
 * 16-lane loop; 2 rows: the multi-row kernels. */
static void test_conversions(void) {
  static const int64_t Ks[] = {1, 16, 35}, ATS[] = {0, 5, 33};
  kernel_variant v[KERNEL_N_VARIANTS];
  int nv = available_variants(v);
  for (int vi = 0; vi < nv; vi++) {
    force(v[vi]);
    int64_t bad = 0;
    for (int di = 1; di < N_WDTS; di++)
      for (int ki = 0; ki < 3; ki++) {
        int64_t K = Ks[ki], N = 65536, M = 2, at = ATS[ki];
        tensor *a = tn2(PH_DTYPE_F32, M, K), *w = tn2(WDTS[di], N, K);
        for (int64_t m = 0; m < M; m++) ((float *)a->data)[m * K + at] = 1.0f;
        for (int64_t n = 0; n < N; n++) ((uint16_t *)w->data)[n * K + at] = (uint16_t)n;
        tensor *y = wt_run(a, w, NULL, 2);
        for (int64_t m = 0; y && m < M; m++)
          for (int64_t n = 0; n < N; n++) {
            uint16_t h = (uint16_t)n;
            float want = WDTS[di] == PH_DTYPE_F16 ? f16_to_f32(h) : bf16_to_f32(h);
            float got = ((const float *)y->data)[m * N + n];
            int ok = isnan(want) ? isnan(got) : got == want;
            if (!ok && !bad)
              fprintf(stderr, "  %s %s 0x%04x: got %.9g want %.9g (K %lld)\n",
                      kernel_variant_name(v[vi]), dtn(WDTS[di]), (unsigned)h, got, want,
                      (long long)K);
            bad += !ok;
          }
        tensor_free(y);
        tensor_free(a);
        tensor_free(w);
      }
    CHECK_EQ_INT(bad, 0);
  }
}

int main(void) {
  RUN(test_variants);
  RUN(test_grid);
  RUN(test_batch_invariance);
  RUN(test_bf16_mode);
  RUN(test_conversions);
  return check_finish();
}
