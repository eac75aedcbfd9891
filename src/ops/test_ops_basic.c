/* test_ops_basic — MatMul, MatMulWT, Gather, Add/Sub/Mul/Div, Sigmoid/Softplus/Exp/Neg, Cast,
 * the shape ops and ReduceSum, each against a plain float64 (or integer) loop written here.
 *
 * Each op runs over a grid of shapes (size-1 dims, odd widths 1, 3, 17, 63, 64, 65, 130) and
 * every dtype it supports, through tests/op_testing.h (infer with static shapes, then run on a
 * pool). Tolerances: f32 outputs within a bound sized from the computation (sum |a*w| terms for
 * dot products), f16/bf16 outputs within one output ulp of the float64 reference plus that
 * bound. Integer results, byte moves and Cast are exact. MatMulWT is also checked bit-exactly
 * for batch invariance: any row gives the same bits alone, in any batch of 1..7 rows, in chunks
 * beyond the 64-row staging block, on 1..3 threads. Contract violations are checked for their
 * exact typed status.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "op_testing.h"

static const ph_dtype FLOATS[] = {PH_DTYPE_F32, PH_DTYPE_F16, PH_DTYPE_BF16};
#define N_FLOATS 3

/* ---- helpers -------------------------------------------------------------------------------- */

static tensor *tn(ph_dtype dt, int rank, const int64_t *dims) { return tensor_new(dt, rank, dims); }

/* A 1-D integer tensor (I64 or I32) holding v. */
static tensor *ints_tensor(ph_dtype dt, int n, const int64_t *v) {
  int64_t dims[1] = {n};
  tensor *t = tensor_new(dt, 1, dims);
  for (int i = 0; i < n; i++) {
    if (dt == PH_DTYPE_I64)
      ((int64_t *)t->data)[i] = v[i];
    else
      ((int32_t *)t->data)[i] = (int32_t)v[i];
  }
  return t;
}

static int64_t ielem(const tensor *t, int64_t i) {
  switch (t->dtype) {
  case PH_DTYPE_I64:
    return ((const int64_t *)t->data)[i];
  case PH_DTYPE_I32:
    return ((const int32_t *)t->data)[i];
  case PH_DTYPE_I8:
    return ((const int8_t *)t->data)[i];
  default:
    return ((const uint8_t *)t->data)[i];
  }
}

static void iset(tensor *t, int64_t i, int64_t v) {
  switch (t->dtype) {
  case PH_DTYPE_I64:
    ((int64_t *)t->data)[i] = v;
    return;
  case PH_DTYPE_I32:
    ((int32_t *)t->data)[i] = (int32_t)v;
    return;
  case PH_DTYPE_I8:
    ((int8_t *)t->data)[i] = (int8_t)v;
    return;
  default:
    ((uint8_t *)t->data)[i] = (uint8_t)v;
    return;
  }
}

/* Fills any tensor: floats uniform in [lo, hi), integers uniform in [lo, hi]. */
static void fill(tensor *t, rng *r, double lo, double hi) {
  int64_t n = tensor_numel(t);
  if (dtype_is_compute_float(t->dtype)) {
    tensor_fill_uniform(t, r, (float)lo, (float)hi);
    return;
  }
  int64_t ilo = (int64_t)lo, span = (int64_t)hi - ilo + 1;
  for (int64_t i = 0; i < n; i++) iset(t, i, ilo + (int64_t)rng_below(r, (uint64_t)span));
}

static const char *fmt_dims(char *buf, size_t n, int rank, const int64_t *dims) {
  size_t o = (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < rank && o < n; i++)
    o += (size_t)snprintf(buf + o, n - o, "%s%lld", i ? "," : "", (long long)dims[i]);
  if (o < n) snprintf(buf + o, n - o, "]");
  return buf;
}

/* infer() alone on static types (unknown dims allowed). */
static ph_status infer_op(const char *op, const char *dom, int n_in, const tinfo *in, int n_out,
                          tinfo *out, gattr *attrs, int n_attrs, diag *d) {
  gnode n = op_test_node(op, dom, n_in, n_out, attrs, n_attrs);
  const op_def *def = op_lookup(dom, op);
  if (!def) return diag_set(d, PH_ERR_UNSUPPORTED, "no op %s", op);
  n.op = def;
  diag_clear(d);
  return def->infer(&n, in, out, d);
}

static tinfo ti_make(ph_dtype dt, int rank, const int64_t *dims) {
  tinfo t;
  memset(&t, 0, sizeof t);
  t.dtype = dt;
  t.rank = rank;
  for (int i = 0; i < rank; i++) t.dims[i] = dims[i];
  return t;
}

static int dims_equal(const tinfo *t, int rank, const int64_t *dims) {
  if (t->rank != rank) return 0;
  for (int i = 0; i < rank; i++)
    if (t->dims[i] != dims[i]) return 0;
  return 1;
}

#define CHECK_DIMS(t_, r_, ...)                                                                    \
  do {                                                                                             \
    const int64_t check_dims_[] = {__VA_ARGS__};                                                   \
    char check_b1_[96], check_b2_[96];                                                             \
    if (!CHECK(dims_equal(&(t_), (r_), check_dims_)))                                              \
      fprintf(stderr, "       got rank %d %s, expected %s\n", (t_).rank,                           \
              fmt_dims(check_b1_, sizeof check_b1_, (t_).rank < 0 ? 0 : (t_).rank, (t_).dims),     \
              fmt_dims(check_b2_, sizeof check_b2_, (r_), check_dims_));                           \
  } while (0)

/* ---- registry ------------------------------------------------------------------------------- */

static void test_registry(void) {
  static const char *const OPS[][2] = {
      {"", "MatMul"},    {"pagedhybrid.internal", "MatMulWT"},
      {"", "Gather"},    {"", "Add"},
      {"", "Sub"},       {"", "Mul"},
      {"", "Div"},       {"", "Sigmoid"},
      {"", "Softplus"},  {"", "Exp"},
      {"", "Neg"},       {"", "Cast"},
      {"", "Reshape"},   {"", "Transpose"},
      {"", "Split"},     {"", "Slice"},
      {"", "Concat"},    {"", "Unsqueeze"},
      {"", "Squeeze"},   {"", "Shape"},
      {"", "ReduceSum"},
  };
  for (size_t i = 0; i < sizeof OPS / sizeof OPS[0]; i++) {
    const op_def *def = op_lookup(OPS[i][0], OPS[i][1]);
    CHECK(def != NULL);
    if (!def) continue;
    CHECK(def->infer != NULL);
    CHECK(def->run != NULL);
  }
}

/* ---- MatMul --------------------------------------------------------------------------------- */

/* numpy matmul in float64 over the stored inputs; tol: 1e-5 * sum |a*b| per element.
 * Derivation: the kernel sums K products in f32 one after another per output; a sum of n f32
 * terms is within gamma_n = n u / (1 - n u) of exact relative to sum |terms| (u = 2^-24; Higham,
 * Accuracy and Stability, §3.1), each product adding one rounding: n = K + 1 <= 66 here (K up to
 * 65; 17 in the broadcasting cases): 66 u = 3.9e-6 < 1e-5. f16/bf16 outputs add one output ulp
 * (expect_close). */
static void ref_matmul(const tensor *a, const tensor *b, double *ref, double *tol) {
  int ra = a->rank, rb = b->rank;
  int64_t M = ra >= 2 ? a->dims[ra - 2] : 1, K = a->dims[ra - 1], N = rb >= 2 ? b->dims[rb - 1] : 1;
  int na = ra > 2 ? ra - 2 : 0, nb = rb > 2 ? rb - 2 : 0, nr = na > nb ? na : nb;
  int64_t od[8], nbatch = 1;
  for (int i = 0; i < nr; i++) {
    int64_t x = i - (nr - na) >= 0 ? a->dims[i - (nr - na)] : 1;
    int64_t y = i - (nr - nb) >= 0 ? b->dims[i - (nr - nb)] : 1;
    od[i] = x > y ? x : y;
    nbatch *= od[i];
  }
  for (int64_t bi = 0; bi < nbatch; bi++) {
    int64_t idx[8], rem = bi;
    for (int i = nr - 1; i >= 0; i--) {
      idx[i] = rem % od[i];
      rem /= od[i];
    }
    int64_t fa = 0, fb = 0;
    for (int i = 0; i < nr; i++) {
      int ja = i - (nr - na), jb = i - (nr - nb);
      if (ja >= 0) fa = fa * a->dims[ja] + (a->dims[ja] == 1 ? 0 : idx[i]);
      if (jb >= 0) fb = fb * b->dims[jb] + (b->dims[jb] == 1 ? 0 : idx[i]);
    }
    for (int64_t m = 0; m < M; m++)
      for (int64_t n = 0; n < N; n++) {
        double s = 0, sa = 0;
        for (int64_t k = 0; k < K; k++) {
          double p = tensor_elem(a, (fa * M + m) * K + k) * tensor_elem(b, (fb * K + k) * N + n);
          s += p;
          sa += fabs(p);
        }
        ref[(bi * M + m) * N + n] = s;
        tol[(bi * M + m) * N + n] = 1e-5 * sa + 1e-30;
      }
  }
}

typedef struct mm_case {
  int ra;
  int64_t a[4];
  int rb;
  int64_t b[4];
} mm_case;

static void check_matmul_case(const mm_case *c, ph_dtype dt, int threads, rng *r) {
  tensor *in[2] = {tn(dt, c->ra, c->a), tn(dt, c->rb, c->b)}, *out[1] = {NULL};
  fill(in[0], r, -1, 1);
  fill(in[1], r, -1, 1);
  diag d;
  char name[160], b1[64], b2[64];
  snprintf(name, sizeof name, "MatMul A%s B%s threads %d", fmt_dims(b1, 64, c->ra, c->a),
           fmt_dims(b2, 64, c->rb, c->b), threads);
  ph_status s = op_run("MatMul", "", 2, in, 1, out, NULL, 0, threads, ~0u, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  if (s == PH_OK) {
    int64_t n = tensor_numel(out[0]);
    double *ref = calloc((size_t)n + 1, sizeof *ref), *tol = calloc((size_t)n + 1, sizeof *tol);
    ref_matmul(in[0], in[1], ref, tol);
    if (!op_expect_close(name, out[0], ref, tol, 0, n)) fprintf(stderr, "  (%s)\n", name);
    free(ref);
    free(tol);
  }
  tensors_free(in, 2);
  tensors_free(out, 1);
}

static void test_matmul(void) {
  rng r = rng_seed(11);
  static const int64_t Ms[] = {1, 3, 17}, Ks[] = {1, 3, 17, 64, 65}, Ns[] = {1, 5, 63, 130};
  for (int di = 0; di < N_FLOATS; di++)
    for (int mi = 0; mi < 3; mi++)
      for (int ki = 0; ki < 5; ki++)
        for (int ni = 0; ni < 4; ni++) {
          mm_case c = {2, {Ms[mi], Ks[ki]}, 2, {Ks[ki], Ns[ni]}};
          check_matmul_case(&c, FLOATS[di], 1 + (mi + ni) % 3, &r);
        }
  static const mm_case BCAST[] = {
      {1, {17}, 2, {17, 5}},             /* 1-D A: [K] x [K, N] -> [N] */
      {2, {3, 17}, 1, {17}},             /* 1-D B: [M, K] x [K] -> [M] */
      {1, {17}, 1, {17}},                /* both 1-D: a scalar */
      {3, {4, 3, 17}, 1, {17}},          /* batched A x vector -> [4, 3] */
      {1, {17}, 3, {4, 17, 5}},          /* vector x batched B -> [4, 5] */
      {4, {2, 1, 3, 17}, 3, {4, 17, 5}}, /* batch dims broadcast both ways */
      {3, {1, 3, 17}, 3, {4, 17, 5}},    /* batch 1 against 4 */
      {3, {4, 3, 17}, 2, {17, 5}},       /* shared B */
      {2, {3, 17}, 4, {2, 3, 17, 65}},   /* shared A */
      {3, {2, 1, 64}, 3, {2, 64, 1}},    /* M = N = 1 */
      {3, {2, 3, 0}, 3, {2, 0, 5}},      /* K = 0: zeros */
  };
  for (int di = 0; di < N_FLOATS; di++)
    for (size_t i = 0; i < sizeof BCAST / sizeof BCAST[0]; i++)
      check_matmul_case(&BCAST[i], FLOATS[di], 1 + (int)i % 3, &r);
  /* the scalar result has rank 0 */
  tinfo in[2] = {ti_make(PH_DTYPE_F32, 1, (int64_t[]){8}),
                 ti_make(PH_DTYPE_F32, 1, (int64_t[]){8})};
  tinfo out[1];
  diag d;
  CHECK_STATUS(infer_op("MatMul", "", 2, in, 1, out, NULL, 0, &d), PH_OK, d.msg);
  CHECK_EQ_INT(out[0].rank, 0);
}

static void test_matmul_contract(void) {
  diag d;
  tinfo out[1];
  /* unknown dims propagate: [?, 3, 8] x [8, ?] -> [?, 3, ?]; [?, 1, K] x [4, K, N] -> [4, 1, N] */
  tinfo in[2] = {ti_make(PH_DTYPE_BF16, 3, (int64_t[]){-1, 3, 8}),
                 ti_make(PH_DTYPE_BF16, 2, (int64_t[]){8, -1})};
  CHECK_STATUS(infer_op("MatMul", "", 2, in, 1, out, NULL, 0, &d), PH_OK, d.msg);
  CHECK_DIMS(out[0], 3, -1, 3, -1);
  CHECK_EQ_INT(out[0].dtype, PH_DTYPE_BF16);
  in[0] = ti_make(PH_DTYPE_F32, 3, (int64_t[]){-1, 1, 8});
  in[1] = ti_make(PH_DTYPE_F32, 3, (int64_t[]){4, 8, 6});
  CHECK_STATUS(infer_op("MatMul", "", 2, in, 1, out, NULL, 0, &d), PH_OK, d.msg);
  CHECK_DIMS(out[0], 3, 4, 1, 6);
  in[0] = ti_make(PH_DTYPE_F32, 3, (int64_t[]){-1, 1, 8});
  in[1] = ti_make(PH_DTYPE_F32, 3, (int64_t[]){1, 8, 6});
  CHECK_STATUS(infer_op("MatMul", "", 2, in, 1, out, NULL, 0, &d), PH_OK, d.msg);
  CHECK_DIMS(out[0], 3, -1, 1, 6);
  /* unknown rank stays unknown */
  in[0].rank = -1;
  CHECK_STATUS(infer_op("MatMul", "", 2, in, 1, out, NULL, 0, &d), PH_OK, d.msg);
  CHECK_EQ_INT(out[0].rank, -1);
  /* K mismatch */
  in[0] = ti_make(PH_DTYPE_F32, 2, (int64_t[]){3, 8});
  in[1] = ti_make(PH_DTYPE_F32, 2, (int64_t[]){9, 6});
  CHECK_STATUS(infer_op("MatMul", "", 2, in, 1, out, NULL, 0, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  /* batch dims that do not broadcast */
  in[0] = ti_make(PH_DTYPE_F32, 3, (int64_t[]){2, 3, 8});
  in[1] = ti_make(PH_DTYPE_F32, 3, (int64_t[]){3, 8, 6});
  CHECK_STATUS(infer_op("MatMul", "", 2, in, 1, out, NULL, 0, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  /* rank 0 operand */
  in[0] = ti_make(PH_DTYPE_F32, 0, NULL);
  in[1] = ti_make(PH_DTYPE_F32, 2, (int64_t[]){1, 6});
  CHECK_STATUS(infer_op("MatMul", "", 2, in, 1, out, NULL, 0, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  /* dtype mismatch between A and B, and an integer dtype */
  in[0] = ti_make(PH_DTYPE_F32, 2, (int64_t[]){3, 8});
  in[1] = ti_make(PH_DTYPE_F16, 2, (int64_t[]){8, 6});
  CHECK_STATUS(infer_op("MatMul", "", 2, in, 1, out, NULL, 0, &d), PH_ERR_TENSOR_DTYPE, d.msg);
  CHECK_CONTAINS(d.msg, "F16");
  in[0].dtype = in[1].dtype = PH_DTYPE_I32;
  CHECK_STATUS(infer_op("MatMul", "", 2, in, 1, out, NULL, 0, &d), PH_ERR_TENSOR_DTYPE, d.msg);
  /* arity */
  CHECK_STATUS(infer_op("MatMul", "", 1, in, 1, out, NULL, 0, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
}

/* ---- MatMulWT ------------------------------------------------------------------------------- */

static const char *const WT = "pagedhybrid.internal";

/* All elements of t as doubles (callers free). */
static double *to_doubles(const tensor *t) {
  int64_t n = tensor_numel(t);
  double *v = malloc((size_t)(n + 1) * sizeof *v);
  for (int64_t i = 0; i < n; i++) v[i] = tensor_elem(t, i);
  return v;
}

/* y = A W^T + bias in float64; tol 1e-5 * (sum |a*w| + |bias|).
 * Derivation: MatMulWT sums in 16 lanes (K / 16 terms each), then a 4-level tree, then the bias
 * (src/ops/op_matmul.c); with the products' own rounding that is n <= ceil(K / 16) + 6 roundings
 * of partial sums bounded by sum |a w| + |b|: gamma_n with n = 70 for K = 1024, the largest here:
 * 4.2e-6 < 1e-5 (test_matmul_wt checks the exact gamma_n bound per variant). */
static void ref_matmul_wt(const tensor *a, const tensor *w, const tensor *bias, double *ref,
                          double *tol) {
  int64_t K = a->dims[a->rank - 1], N = w->dims[0], M = 1;
  for (int i = 0; i + 1 < a->rank; i++) M *= a->dims[i];
  double *av = to_doubles(a), *wv = to_doubles(w);
  for (int64_t m = 0; m < M; m++)
    for (int64_t n = 0; n < N; n++) {
      double s = bias ? tensor_elem(bias, n) : 0, sa = fabs(s);
      for (int64_t k = 0; k < K; k++) {
        double p = av[m * K + k] * wv[n * K + k];
        s += p;
        sa += fabs(p);
      }
      ref[m * N + n] = s;
      tol[m * N + n] = 1e-5 * sa + 1e-30;
    }
  free(av);
  free(wv);
}

static void test_matmul_wt(void) {
  rng r = rng_seed(12);
  static const int64_t Ks[] = {1, 3, 16, 17, 64, 255, 1024}, Ns[] = {1, 5, 64, 130};
  static const int64_t Ms[] = {1, 2, 7};
  static const ph_dtype BIAS[] = {PH_DTYPE_INVALID, PH_DTYPE_F32, PH_DTYPE_BF16, PH_DTYPE_F16};
  int n_cases = 0, n_ok = 0;
  for (int ai = 0; ai < N_FLOATS; ai++)
    for (int wi = 0; wi < N_FLOATS; wi++)
      for (int ki = 0; ki < 7; ki++)
        for (int ni = 0; ni < 4; ni++)
          for (int mi = 0; mi < 3; mi++) {
            /* thread counts rotate over the grid (every count meets every dtype pair and K);
             * the batch invariance test crosses them with every batch split */
            int threads = 1 + (ki + ni + mi) % 3;
            {
              ph_dtype bdt = BIAS[(ai + wi + ki + ni + mi) % 4];
              int64_t K = Ks[ki], N = Ns[ni], M = Ms[mi];
              tensor *in[3] = {tn(FLOATS[ai], 2, (int64_t[]){M, K}),
                               tn(FLOATS[wi], 2, (int64_t[]){N, K}),
                               bdt ? tn(bdt, 1, (int64_t[]){N}) : NULL};
              tensor *out[1] = {NULL};
              fill(in[0], &r, -1, 1);
              fill(in[1], &r, -1, 1);
              if (in[2]) fill(in[2], &r, -1, 1);
              diag d;
              ph_status s = op_run("MatMulWT", WT, 3, in, 1, out, NULL, 0, threads, ~0u, &d);
              CHECK_STATUS(s, PH_OK, d.msg);
              n_cases++;
              if (s == PH_OK) {
                double *ref = malloc((size_t)(M * N) * sizeof *ref);
                double *tol = malloc((size_t)(M * N) * sizeof *tol);
                ref_matmul_wt(in[0], in[1], in[2], ref, tol);
                char name[160];
                snprintf(name, sizeof name, "MatMulWT A %s [%lld,%lld] W %s N=%lld bias %s T=%d",
                         dtype_label(FLOATS[ai]), (long long)M, (long long)K,
                         dtype_label(FLOATS[wi]), (long long)N, bdt ? dtype_label(bdt) : "none",
                         threads);
                n_ok += op_expect_close(name, out[0], ref, tol, 0, M * N);
                free(ref);
                free(tol);
              }
              tensors_free(in, 3);
              tensors_free(out, 1);
            }
          }
  CHECK_EQ_INT(n_ok, n_cases);
}

/* A [2, 3, K] (rank 3 activations), K = 0 (y = bias), and a 1-D A. */
static void test_matmul_wt_shapes(void) {
  rng r = rng_seed(13);
  diag d;
  {
    tensor *in[3] = {tn(PH_DTYPE_BF16, 3, (int64_t[]){2, 3, 40}),
                     tn(PH_DTYPE_BF16, 2, (int64_t[]){9, 40}), NULL};
    tensor *out[1] = {NULL};
    fill(in[0], &r, -2, 2);
    fill(in[1], &r, -2, 2);
    CHECK_STATUS(op_run("MatMulWT", WT, 2, in, 1, out, NULL, 0, 2, ~0u, &d), PH_OK, d.msg);
    if (out[0]) {
      CHECK_EQ_INT(out[0]->rank, 3);
      CHECK_EQ_INT(out[0]->dims[2], 9);
      double ref[54], tol[54];
      ref_matmul_wt(in[0], in[1], NULL, ref, tol);
      op_expect_close("MatMulWT rank-3 A", out[0], ref, tol, 0, 54);
    }
    tensors_free(in, 3);
    tensors_free(out, 1);
  }
  {
    tensor *in[3] = {tn(PH_DTYPE_F32, 2, (int64_t[]){3, 0}), tn(PH_DTYPE_F16, 2, (int64_t[]){5, 0}),
                     tn(PH_DTYPE_F32, 1, (int64_t[]){5})};
    tensor *out[1] = {NULL};
    fill(in[2], &r, -2, 2);
    CHECK_STATUS(op_run("MatMulWT", WT, 3, in, 1, out, NULL, 0, 2, ~0u, &d), PH_OK, d.msg);
    if (out[0])
      for (int i = 0; i < 15; i++) CHECK(tensor_elem(out[0], i) == tensor_elem(in[2], i % 5));
    tensors_free(in, 3);
    tensors_free(out, 1);
  }
  {
    tensor *in[3] = {tn(PH_DTYPE_F16, 1, (int64_t[]){33}), tn(PH_DTYPE_F32, 2, (int64_t[]){6, 33}),
                     NULL};
    tensor *out[1] = {NULL};
    fill(in[0], &r, -2, 2);
    fill(in[1], &r, -2, 2);
    CHECK_STATUS(op_run("MatMulWT", WT, 2, in, 1, out, NULL, 0, 1, ~0u, &d), PH_OK, d.msg);
    if (out[0]) {
      CHECK_EQ_INT(out[0]->rank, 1);
      CHECK_EQ_INT(out[0]->dtype, PH_DTYPE_F16);
      double ref[6], tol[6];
      ref_matmul_wt(in[0], in[1], NULL, ref, tol);
      op_expect_close("MatMulWT 1-D A", out[0], ref, tol, 0, 6);
    }
    tensors_free(in, 3);
    tensors_free(out, 1);
  }
}

/* Runs MatMulWT on rows [r0, r0 + rows) of a (a copy of those rows) into a fresh output. */
static tensor *wt_rows(const tensor *a, int64_t r0, int64_t rows, const tensor *w,
                       const tensor *bias, int threads) {
  int64_t K = a->dims[1];
  tensor *sub = tn(a->dtype, 2, (int64_t[]){rows, K});
  size_t es = dtype_size(a->dtype);
  memcpy(sub->data, (const char *)a->data + (size_t)(r0 * K) * es, (size_t)(rows * K) * es);
  tensor *in[3] = {sub, (tensor *)w, (tensor *)bias}, *out[1] = {NULL};
  diag d;
  ph_status s = op_run("MatMulWT", WT, 3, in, 1, out, NULL, 0, threads, ~0u, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  tensor_free(sub);
  return out[0];
}

/* Rows of A [7, K] run alone, in batches of 1..7 at every offset and on 1..3 threads, each
 * compared bit for bit with the same row of one 7-row run. Returns the rows that differ. */
static int64_t wt_invariance(ph_dtype wdt, ph_dtype adt, int64_t K, rng *r, int64_t *compared) {
  int64_t M = 7, N = 130, mismatched = 0;
  tensor *a = tn(adt, 2, (int64_t[]){M, K}), *w = tn(wdt, 2, (int64_t[]){N, K});
  tensor *bias = tn(PH_DTYPE_F32, 1, (int64_t[]){N});
  fill(a, r, -1, 1);
  fill(w, r, -1, 1);
  fill(bias, r, -1, 1);
  tensor *full = wt_rows(a, 0, M, w, bias, 1);
  size_t row_bytes = (size_t)N * dtype_size(adt);
  for (int64_t b = 1; b <= M; b++)
    for (int threads = 1; threads <= 3; threads++)
      for (int64_t s = 0; s < M; s += b) {
        int64_t rows = M - s < b ? M - s : b;
        tensor *part = wt_rows(a, s, rows, w, bias, threads);
        for (int64_t i = 0; full && part && i < rows; i++) {
          (*compared)++;
          if (memcmp((char *)part->data + (size_t)i * row_bytes,
                     (char *)full->data + (size_t)(s + i) * row_bytes, row_bytes) == 0)
            continue;
          if (!mismatched)
            fprintf(stderr, "  batch invariance: W %s A %s K %lld row %lld batch %lld threads %d\n",
                    dtype_label(wdt), dtype_label(adt), (long long)K, (long long)(s + i),
                    (long long)b, threads);
          mismatched++;
        }
        tensor_free(part);
      }
  tensor_free(full);
  tensor_free(a);
  tensor_free(w);
  tensor_free(bias);
  return mismatched;
}

/* Bit-exact batch invariance: every row's output bits are the same alone, in any batch size,
 * at any offset, on any thread count, and across the 64-row staging chunks. */
static void test_matmul_wt_batch_invariance(void) {
  rng r = rng_seed(14);
  /* every W dtype x A dtype at K = 17 or 255, plus the common bf16 case at K = 1024 (one, so
   * the sanitizer build stays fast) */
  static const struct {
    ph_dtype w, a;
    int64_t K;
  } CFG[] = {
      {PH_DTYPE_F32, PH_DTYPE_F32, 17},  {PH_DTYPE_F32, PH_DTYPE_BF16, 255},
      {PH_DTYPE_F32, PH_DTYPE_F16, 255}, {PH_DTYPE_F16, PH_DTYPE_F32, 255},
      {PH_DTYPE_F16, PH_DTYPE_BF16, 17}, {PH_DTYPE_F16, PH_DTYPE_F16, 255},
      {PH_DTYPE_BF16, PH_DTYPE_F32, 17}, {PH_DTYPE_BF16, PH_DTYPE_BF16, 255},
      {PH_DTYPE_BF16, PH_DTYPE_F16, 17}, {PH_DTYPE_BF16, PH_DTYPE_BF16, 1024},
  };
  int64_t mismatched_rows = 0, compared_rows = 0;
  for (size_t ci = 0; ci < sizeof CFG / sizeof CFG[0]; ci++)
    mismatched_rows += wt_invariance(CFG[ci].w, CFG[ci].a, CFG[ci].K, &r, &compared_rows);
  CHECK_EQ_INT(mismatched_rows, 0);
  CHECK(compared_rows > 0);
  /* beyond the 64-row staging chunk: 70 rows at once vs each row alone */
  for (int wi = 0; wi < N_FLOATS; wi++) {
    int64_t M = 70, K = 64, N = 37;
    tensor *a = tn(PH_DTYPE_F32, 2, (int64_t[]){M, K}), *w = tn(FLOATS[wi], 2, (int64_t[]){N, K});
    fill(a, &r, -1, 1);
    fill(w, &r, -1, 1);
    tensor *full = wt_rows(a, 0, M, w, NULL, 3);
    int64_t bad = 0;
    for (int64_t m = 0; m < M && full; m++) {
      tensor *one = wt_rows(a, m, 1, w, NULL, 2);
      if (one && memcmp(one->data, (char *)full->data + (size_t)(m * N) * 4, (size_t)N * 4)) bad++;
      tensor_free(one);
    }
    CHECK_EQ_INT(bad, 0);
    tensor_free(full);
    tensor_free(a);
    tensor_free(w);
  }
}

/* The kernels' own f16 -> f32 conversion, for all 65536 patterns: in the tail loop (K = 1),
 * in the 16-lane main loop (K = 16, pattern at k = 5), single-row and pre-converted (M = 2). */
static void test_matmul_wt_f16_exhaustive(void) {
  static const int64_t Ks[] = {1, 16};
  for (int ki = 0; ki < 2; ki++)
    for (int64_t M = 1; M <= 2; M++) {
      int64_t K = Ks[ki], N = 65536, at = K > 1 ? 5 : 0;
      tensor *a = tn(PH_DTYPE_F32, 2, (int64_t[]){M, K}),
             *w = tn(PH_DTYPE_F16, 2, (int64_t[]){N, K});
      for (int64_t m = 0; m < M; m++) ((float *)a->data)[m * K + at] = 1.0f;
      for (int64_t n = 0; n < N; n++) ((uint16_t *)w->data)[n * K + at] = (uint16_t)n;
      tensor *in[3] = {a, w, NULL}, *out[1] = {NULL};
      diag d;
      CHECK_STATUS(op_run("MatMulWT", WT, 2, in, 1, out, NULL, 0, 2, ~0u, &d), PH_OK, d.msg);
      int64_t bad = 0;
      for (int64_t m = 0; out[0] && m < M; m++)
        for (int64_t n = 0; n < N; n++) {
          float want = f16_to_f32((uint16_t)n), got = ((float *)out[0]->data)[m * N + n];
          int ok = isnan(want) ? isnan(got) : got == want;
          if (!ok && !bad)
            fprintf(stderr, "  f16 0x%04x: got %.9g want %.9g (K %lld M %lld)\n", (unsigned)n, got,
                    want, (long long)K, (long long)M);
          bad += !ok;
        }
      CHECK_EQ_INT(bad, 0);
      tensors_free(in, 2);
      tensors_free(out, 1);
    }
}

static void test_matmul_wt_contract(void) {
  diag d;
  tinfo in[3], out[1];
  in[0] = ti_make(PH_DTYPE_BF16, 3, (int64_t[]){-1, -1, 64});
  in[1] = ti_make(PH_DTYPE_F16, 2, (int64_t[]){32, 64});
  in[2] = ti_make(PH_DTYPE_F32, 1, (int64_t[]){32});
  CHECK_STATUS(infer_op("MatMulWT", WT, 3, in, 1, out, NULL, 0, &d), PH_OK, d.msg);
  CHECK_DIMS(out[0], 3, -1, -1, 32);
  CHECK_EQ_INT(out[0].dtype, PH_DTYPE_BF16);
  in[2].dtype = PH_DTYPE_INVALID; /* absent bias */
  CHECK_STATUS(infer_op("MatMulWT", WT, 3, in, 1, out, NULL, 0, &d), PH_OK, d.msg);
  in[2] = ti_make(PH_DTYPE_F32, 1, (int64_t[]){31});
  CHECK_STATUS(infer_op("MatMulWT", WT, 3, in, 1, out, NULL, 0, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  in[1] = ti_make(PH_DTYPE_F16, 2, (int64_t[]){32, 63});
  CHECK_STATUS(infer_op("MatMulWT", WT, 2, in, 1, out, NULL, 0, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  in[1] = ti_make(PH_DTYPE_F16, 3, (int64_t[]){1, 32, 64});
  CHECK_STATUS(infer_op("MatMulWT", WT, 2, in, 1, out, NULL, 0, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  in[1] = ti_make(PH_DTYPE_I8, 2, (int64_t[]){32, 64});
  CHECK_STATUS(infer_op("MatMulWT", WT, 2, in, 1, out, NULL, 0, &d), PH_ERR_TENSOR_DTYPE, d.msg);
  in[1] = ti_make(PH_DTYPE_F32, 2, (int64_t[]){32, 64});
  in[0].dtype = PH_DTYPE_I64;
  CHECK_STATUS(infer_op("MatMulWT", WT, 2, in, 1, out, NULL, 0, &d), PH_ERR_TENSOR_DTYPE, d.msg);
}

/* ---- Gather --------------------------------------------------------------------------------- */

static void check_gather(ph_dtype dt, int rd, const int64_t *dd, ph_dtype it, int ri,
                         const int64_t *di, int64_t axis, rng *r) {
  tensor *in[2] = {tn(dt, rd, dd), tn(it, ri, di)}, *out[1] = {NULL};
  fill(in[0], r, -100, 100);
  int ax = (int)(axis < 0 ? axis + rd : axis);
  int64_t s = dd[ax];
  fill(in[1], r, (double)-s, (double)(s - 1));
  gattr at[1] = {attr_int("axis", axis)};
  diag d;
  CHECK_STATUS(op_run("Gather", "", 2, in, 1, out, at, 1, 1, 0u, &d), PH_OK, d.msg);
  if (out[0]) {
    CHECK_EQ_INT(out[0]->rank, rd + ri - 1);
    int64_t outer = 1, inner = 1, ni = tensor_numel(in[1]);
    for (int i = 0; i < ax; i++) outer *= dd[i];
    for (int i = ax + 1; i < rd; i++) inner *= dd[i];
    int64_t n = outer * ni * inner, bad = 0;
    size_t es = dtype_size(dt);
    for (int64_t o = 0; o < outer; o++)
      for (int64_t j = 0; j < ni; j++) {
        int64_t v = ielem(in[1], j);
        if (v < 0) v += s;
        bad += memcmp((char *)out[0]->data + (size_t)((o * ni + j) * inner) * es,
                      (char *)in[0]->data + (size_t)((o * s + v) * inner) * es,
                      (size_t)inner * es) != 0;
      }
    CHECK_EQ_INT(tensor_numel(out[0]), n);
    CHECK_EQ_INT(bad, 0);
  }
  tensors_free(in, 2);
  tensors_free(out, 1);
}

static void test_gather(void) {
  rng r = rng_seed(21);
  static const ph_dtype DT[] = {PH_DTYPE_F32, PH_DTYPE_BF16, PH_DTYPE_I64, PH_DTYPE_U8,
                                PH_DTYPE_I8};
  static const int64_t Ws[] = {1, 3, 17, 64, 65};
  for (int di = 0; di < 5; di++)
    for (int wi = 0; wi < 5; wi++)
      for (int ii = 0; ii < 2; ii++) {
        ph_dtype it = ii ? PH_DTYPE_I32 : PH_DTYPE_I64;
        int64_t W = Ws[wi];
        /* embedding lookup [V, W] by [B, T] tokens, axis 0 and -2 */
        check_gather(DT[di], 2, (int64_t[]){11, W}, it, 2, (int64_t[]){2, 3}, 0, &r);
        check_gather(DT[di], 2, (int64_t[]){11, W}, it, 1, (int64_t[]){5}, -2, &r);
        /* axis 1 of [3, W, 2] with a scalar index (rank drops) and with [4] */
        check_gather(DT[di], 3, (int64_t[]){3, W, 2}, it, 0, NULL, 1, &r);
        check_gather(DT[di], 3, (int64_t[]){3, W, 2}, it, 1, (int64_t[]){4}, -1, &r);
      }
  /* negative indices count from the end */
  tensor *in[2] = {tn(PH_DTYPE_I32, 1, (int64_t[]){5}),
                   ints_tensor(PH_DTYPE_I64, 3, (int64_t[]){-1, -5, 2})};
  tensor *out[1] = {NULL};
  for (int i = 0; i < 5; i++) ((int32_t *)in[0]->data)[i] = 10 * i;
  diag d;
  CHECK_STATUS(op_run("Gather", "", 2, in, 1, out, NULL, 0, 1, 0u, &d), PH_OK, d.msg);
  if (out[0]) {
    CHECK_EQ_INT(ielem(out[0], 0), 40);
    CHECK_EQ_INT(ielem(out[0], 1), 0);
    CHECK_EQ_INT(ielem(out[0], 2), 20);
  }
  tensors_free(out, 1);
  /* out of range at run time (indices not constant) names the index; nothing is written */
  ((int64_t *)in[1]->data)[1] = 5;
  CHECK_STATUS(op_run("Gather", "", 2, in, 1, out, NULL, 0, 1, 0u, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  CHECK_CONTAINS(d.msg, "index 5");
  tensors_free(out, 1);
  ((int64_t *)in[1]->data)[1] = -6;
  CHECK_STATUS(op_run("Gather", "", 2, in, 1, out, NULL, 0, 1, 0u, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  CHECK_CONTAINS(d.msg, "index -6");
  tensors_free(out, 1);
  /* constant indices are checked at build time */
  tinfo ti[2] = {ti_make(PH_DTYPE_F32, 2, (int64_t[]){5, 4}), tensor_tinfo(in[1], 1)}, to[1];
  CHECK_STATUS(infer_op("Gather", "", 2, ti, 1, to, NULL, 0, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  tensors_free(in, 2);
  /* contract: indices dtype, axis range, unknown dims */
  ti[0] = ti_make(PH_DTYPE_BF16, 2, (int64_t[]){-1, 64});
  ti[1] = ti_make(PH_DTYPE_I64, 2, (int64_t[]){-1, -1});
  CHECK_STATUS(infer_op("Gather", "", 2, ti, 1, to, NULL, 0, &d), PH_OK, d.msg);
  CHECK_DIMS(to[0], 3, -1, -1, 64);
  ti[1].dtype = PH_DTYPE_F32;
  CHECK_STATUS(infer_op("Gather", "", 2, ti, 1, to, NULL, 0, &d), PH_ERR_TENSOR_DTYPE, d.msg);
  ti[1].dtype = PH_DTYPE_I32;
  gattr at[1] = {attr_int("axis", 2)};
  CHECK_STATUS(infer_op("Gather", "", 2, ti, 1, to, at, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  at[0] = attr_int("axis", -3);
  CHECK_STATUS(infer_op("Gather", "", 2, ti, 1, to, at, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
}

/* ---- elementwise ---------------------------------------------------------------------------- */

static const char *const BIN[] = {"Add", "Sub", "Mul", "Div"};

static double ref_bin(int op, double a, double b) {
  switch (op) {
  case 0:
    return a + b;
  case 1:
    return a - b;
  case 2:
    return a * b;
  default:
    return a / b;
  }
}

/* Integer reference with wrapping, in unsigned arithmetic; bits = 32 or 64. */
static int64_t ref_bin_int(int op, int64_t a, int64_t b, int bits) {
  uint64_t ua = (uint64_t)a, ub = (uint64_t)b, r;
  if (op == 0)
    r = ua + ub;
  else if (op == 1)
    r = ua - ub;
  else if (op == 2)
    r = ua * ub;
  else if (b == -1)
    r = 0u - ua;
  else
    r = (uint64_t)(a / b);
  if (bits == 32) {
    uint32_t w = (uint32_t)r;
    return w >= 0x80000000u ? (int64_t)w - (int64_t)0x100000000 : (int64_t)w;
  }
  int64_t s;
  memcpy(&s, &r, 8);
  return s;
}

typedef struct bc_case {
  int ra;
  int64_t a[4];
  int rb;
  int64_t b[4];
} bc_case;

/* Broadcast index of output element i into an input of rank rx (right-aligned). */
static int64_t bc_index(int64_t i, int ry, const int64_t *yd, int rx, const int64_t *xd) {
  int64_t idx = 0, stride = 1;
  for (int k = ry - 1; k >= 0; k--) {
    int64_t c = i % yd[k];
    i /= yd[k];
    int kx = k - (ry - rx);
    if (kx < 0) continue;
    if (xd[kx] != 1) idx += c * stride;
    stride *= xd[kx];
  }
  return idx;
}

static void check_binary(int op, ph_dtype dt, const bc_case *c, int threads, rng *r) {
  tensor *in[2] = {tn(dt, c->ra, c->a), tn(dt, c->rb, c->b)}, *out[1] = {NULL};
  if (dtype_is_compute_float(dt)) {
    fill(in[0], r, -4, 4);
    fill(in[1], r, 0.25, 4);
    /* divisors away from 0, with both signs */
    int64_t nb = tensor_numel(in[1]);
    for (int64_t i = 0; i < nb; i += 2) tensor_set_f32(in[1], i, -tensor_get_f32(in[1], i));
  } else {
    fill(in[0], r, -1000, 1000);
    fill(in[1], r, 1, 50);
    int64_t nb = tensor_numel(in[1]);
    for (int64_t i = 0; i < nb; i += 3) iset(in[1], i, -ielem(in[1], i));
  }
  diag d;
  char name[160], b1[64], b2[64];
  snprintf(name, sizeof name, "%s %s%s T=%d", BIN[op], fmt_dims(b1, 64, c->ra, c->a),
           fmt_dims(b2, 64, c->rb, c->b), threads);
  CHECK_STATUS(op_run(BIN[op], "", 2, in, 1, out, NULL, 0, threads, ~0u, &d), PH_OK, d.msg);
  if (out[0]) {
    int64_t n = tensor_numel(out[0]);
    double *ref = malloc((size_t)(n + 1) * sizeof *ref);
    for (int64_t i = 0; i < n; i++) {
      int64_t ia = bc_index(i, out[0]->rank, out[0]->dims, c->ra, c->a);
      int64_t ib = bc_index(i, out[0]->rank, out[0]->dims, c->rb, c->b);
      ref[i] = dtype_is_compute_float(dt)
                   ? ref_bin(op, tensor_elem(in[0], ia), tensor_elem(in[1], ib))
                   : (double)ref_bin_int(op, ielem(in[0], ia), ielem(in[1], ib),
                                         dt == PH_DTYPE_I32 ? 32 : 64);
    }
    /* one correctly rounded f32 operation: half an f32 ulp, (then one output ulp) */
    double *tol = malloc((size_t)(n + 1) * sizeof *tol);
    for (int64_t i = 0; i < n; i++) tol[i] = 0.5 * dtype_ulp_at(PH_DTYPE_F32, ref[i]);
    if (!op_expect_close(name, out[0], ref, tol, 0, n)) fprintf(stderr, "  (%s)\n", name);
    free(ref);
    free(tol);
  }
  tensors_free(in, 2);
  tensors_free(out, 1);
}

static void test_binary(void) {
  rng r = rng_seed(31);
  static const ph_dtype DT[] = {PH_DTYPE_F32, PH_DTYPE_F16, PH_DTYPE_BF16, PH_DTYPE_I64,
                                PH_DTYPE_I32};
  static const int64_t Ws[] = {1, 3, 17, 63, 64, 65, 130};
  for (int op = 0; op < 4; op++)
    for (int di = 0; di < 5; di++)
      for (int wi = 0; wi < 7; wi++) {
        int64_t W = Ws[wi];
        const bc_case cases[] = {
            {1, {W}, 1, {W}},             /* same shape */
            {2, {4, W}, 1, {W}},          /* row broadcast */
            {2, {4, 1}, 2, {1, W}},       /* outer product */
            {3, {2, 3, W}, 2, {3, 1}},    /* per-row scalar */
            {1, {W}, 0, {0}},             /* scalar B */
            {1, {1}, 3, {2, 1, W}},       /* [1] against rank 3 */
            {3, {2, 1, W}, 3, {1, 3, 1}}, /* both stretch */
            {2, {0, W}, 1, {W}},          /* empty */
        };
        for (int ci = 0; ci < 8; ci++) check_binary(op, DT[di], &cases[ci], 1 + (ci + wi) % 3, &r);
      }
  /* large enough to split over the pool: same bits on 1 and 3 threads */
  for (int op = 0; op < 4; op++) {
    tensor *in[2] = {tn(PH_DTYPE_BF16, 2, (int64_t[]){300, 130}),
                     tn(PH_DTYPE_BF16, 1, (int64_t[]){130})};
    fill(in[0], &r, -4, 4);
    fill(in[1], &r, 0.5, 4);
    tensor *o1[1] = {NULL}, *o3[1] = {NULL};
    diag d;
    CHECK_STATUS(op_run(BIN[op], "", 2, in, 1, o1, NULL, 0, 1, ~0u, &d), PH_OK, d.msg);
    CHECK_STATUS(op_run(BIN[op], "", 2, in, 1, o3, NULL, 0, 3, ~0u, &d), PH_OK, d.msg);
    if (o1[0] && o3[0]) CHECK(memcmp(o1[0]->data, o3[0]->data, 300 * 130 * 2) == 0);
    tensors_free(in, 2);
    tensors_free(o1, 1);
    tensors_free(o3, 1);
  }
}

static void test_binary_int_edges(void) {
  diag d;
  /* wrapping, truncating division, INT_MIN / -1 */
  const int64_t a64[] = {INT64_MAX, INT64_MIN, -7, 7, INT64_MIN, 5};
  const int64_t b64[] = {1, -1, 2, -2, -1, 3};
  const int64_t want[4][6] = {
      {INT64_MIN, INT64_MAX, -5, 5, INT64_MAX, 8},
      {INT64_MAX - 1, INT64_MIN + 1, -9, 9, INT64_MIN + 1, 2},
      {INT64_MAX, INT64_MIN, -14, -14, INT64_MIN, 15},
      {INT64_MAX, INT64_MIN, -3, -3, INT64_MIN, 1},
  };
  for (int op = 0; op < 4; op++) {
    tensor *in[2] = {ints_tensor(PH_DTYPE_I64, 6, a64), ints_tensor(PH_DTYPE_I64, 6, b64)};
    tensor *out[1] = {NULL};
    CHECK_STATUS(op_run(BIN[op], "", 2, in, 1, out, NULL, 0, 1, ~0u, &d), PH_OK, d.msg);
    for (int i = 0; out[0] && i < 6; i++) CHECK_EQ_INT(ielem(out[0], i), want[op][i]);
    tensors_free(in, 2);
    tensors_free(out, 1);
  }
  const int64_t a32[] = {INT32_MAX, INT32_MIN, -7}, b32[] = {1, -1, 2};
  const int64_t want32[4][3] = {{INT32_MIN, INT32_MAX, -5},
                                {INT32_MAX - 1, INT32_MIN + 1, -9},
                                {INT32_MAX, INT32_MIN, -14},
                                {INT32_MAX, INT32_MIN, -3}};
  for (int op = 0; op < 4; op++) {
    tensor *in[2] = {ints_tensor(PH_DTYPE_I32, 3, a32), ints_tensor(PH_DTYPE_I32, 3, b32)};
    tensor *out[1] = {NULL};
    CHECK_STATUS(op_run(BIN[op], "", 2, in, 1, out, NULL, 0, 1, ~0u, &d), PH_OK, d.msg);
    for (int i = 0; out[0] && i < 3; i++) CHECK_EQ_INT(ielem(out[0], i), want32[op][i]);
    tensors_free(in, 2);
    tensors_free(out, 1);
  }
  /* integer division by zero */
  for (int i32 = 0; i32 < 2; i32++) {
    ph_dtype dt = i32 ? PH_DTYPE_I32 : PH_DTYPE_I64;
    tensor *in[2] = {ints_tensor(dt, 3, (int64_t[]){1, 2, 3}),
                     ints_tensor(dt, 3, (int64_t[]){1, 0, 1})};
    tensor *out[1] = {NULL};
    CHECK_STATUS(op_run("Div", "", 2, in, 1, out, NULL, 0, 1, ~0u, &d), PH_ERR_INVALID_ARGUMENT,
                 d.msg);
    CHECK_CONTAINS(d.msg, "zero");
    tensors_free(in, 2);
    tensors_free(out, 1);
  }
  /* float division by zero is IEEE */
  tensor *in[2] = {tn(PH_DTYPE_F32, 1, (int64_t[]){2}), tn(PH_DTYPE_F32, 1, (int64_t[]){2})};
  ((float *)in[0]->data)[0] = 1.0f;
  tensor *out[1] = {NULL};
  CHECK_STATUS(op_run("Div", "", 2, in, 1, out, NULL, 0, 1, ~0u, &d), PH_OK, d.msg);
  if (out[0]) {
    CHECK(isinf(tensor_elem(out[0], 0)));
    CHECK(isnan(tensor_elem(out[0], 1)));
  }
  tensors_free(in, 2);
  tensors_free(out, 1);
}

static void test_binary_contract(void) {
  diag d;
  tinfo in[2], out[1];
  in[0] = ti_make(PH_DTYPE_F32, 2, (int64_t[]){-1, 4});
  in[1] = ti_make(PH_DTYPE_F32, 2, (int64_t[]){1, 4});
  CHECK_STATUS(infer_op("Add", "", 2, in, 1, out, NULL, 0, &d), PH_OK, d.msg);
  CHECK_DIMS(out[0], 2, -1, 4);
  in[1] = ti_make(PH_DTYPE_F32, 3, (int64_t[]){2, 5, 4});
  CHECK_STATUS(infer_op("Mul", "", 2, in, 1, out, NULL, 0, &d), PH_OK, d.msg);
  CHECK_DIMS(out[0], 3, 2, 5, 4);
  in[1] = ti_make(PH_DTYPE_F32, 2, (int64_t[]){-1, 1});
  CHECK_STATUS(infer_op("Sub", "", 2, in, 1, out, NULL, 0, &d), PH_OK, d.msg);
  CHECK_DIMS(out[0], 2, -1, 4);
  in[0] = ti_make(PH_DTYPE_F32, 1, (int64_t[]){3});
  in[1] = ti_make(PH_DTYPE_F32, 1, (int64_t[]){4});
  CHECK_STATUS(infer_op("Div", "", 2, in, 1, out, NULL, 0, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  in[1] = ti_make(PH_DTYPE_F16, 1, (int64_t[]){3});
  CHECK_STATUS(infer_op("Add", "", 2, in, 1, out, NULL, 0, &d), PH_ERR_TENSOR_DTYPE, d.msg);
  in[0].dtype = in[1].dtype = PH_DTYPE_U8;
  CHECK_STATUS(infer_op("Add", "", 2, in, 1, out, NULL, 0, &d), PH_ERR_TENSOR_DTYPE, d.msg);
  in[0].dtype = PH_DTYPE_I64;
  CHECK_STATUS(infer_op("Sigmoid", "", 1, in, 1, out, NULL, 0, &d), PH_ERR_TENSOR_DTYPE, d.msg);
  CHECK_STATUS(infer_op("Neg", "", 1, in, 1, out, NULL, 0, &d), PH_OK, d.msg);
  in[0] = ti_make(PH_DTYPE_BF16, 3, (int64_t[]){-1, 2, -1});
  CHECK_STATUS(infer_op("Exp", "", 1, in, 1, out, NULL, 0, &d), PH_OK, d.msg);
  CHECK_DIMS(out[0], 3, -1, 2, -1);
}

static const char *const UN[] = {"Sigmoid", "Softplus", "Exp", "Neg"};

static double ref_un(int op, double x) {
  switch (op) {
  case 0:
    return 1.0 / (1.0 + exp(-x));
  case 1:
    return x > 30 ? x + log1p(exp(-x)) : log1p(exp(x));
  case 2:
    return exp(x);
  default:
    return -x;
  }
}

static void test_unary(void) {
  rng r = rng_seed(41);
  static const int64_t Ws[] = {1, 3, 17, 63, 64, 65, 130};
  static const float SPECIAL[] = {0.0f,   -0.0f,  1.0f,  -1.0f,  19.9f, 20.0f,   20.5f, 21.0f,
                                  -20.0f, -30.0f, 40.0f, -87.0f, 88.0f, -103.0f, 1e-3f, -1e-3f};
  for (int op = 0; op < 4; op++)
    for (int di = 0; di < N_FLOATS; di++)
      for (int wi = 0; wi < 7; wi++) {
        ph_dtype dt = FLOATS[di];
        int64_t W = Ws[wi];
        tensor *in[1] = {tn(dt, 2, (int64_t[]){3, W})}, *out[1] = {NULL};
        double lim = op == 2 ? 10 : 30;
        fill(in[0], &r, -lim, lim);
        int64_t n = 3 * W;
        /* the special values (f32 only: exp of 88 overflows f16 and differs by range) */
        for (int64_t i = 0; dt == PH_DTYPE_F32 && i < n && i < 16; i++)
          if (op != 2 || fabsf(SPECIAL[i]) <= 80) tensor_set_f32(in[0], i, SPECIAL[i]);
        diag d;
        CHECK_STATUS(op_run(UN[op], "", 1, in, 1, out, NULL, 0, 1 + wi % 3, ~0u, &d), PH_OK, d.msg);
        if (out[0]) {
          double ref[390], tol[390];
          for (int64_t i = 0; i < n; i++) {
            ref[i] = ref_un(op, tensor_elem(in[0], i));
            /* Exp and Sigmoid are kernels/act.h's: within ACT_EXP_ULP = 2 and 8 ulp (derived
             * in test_kernels' act grid); Softplus is libm's, within a few */
            tol[i] = (op == 0 ? 8 : 4) * dtype_ulp_at(PH_DTYPE_F32, ref[i]);
          }
          char name[64];
          snprintf(name, sizeof name, "%s [3,%lld]", UN[op], (long long)W);
          op_expect_close(name, out[0], ref, tol, 0, n);
        }
        tensors_free(in, 1);
        tensors_free(out, 1);
      }
  /* Neg on integers wraps at the minimum */
  static const ph_dtype IT[] = {PH_DTYPE_I64, PH_DTYPE_I32, PH_DTYPE_I8};
  static const int64_t MINS[] = {INT64_MIN, INT32_MIN, INT8_MIN};
  for (int i = 0; i < 3; i++) {
    tensor *in[1] = {ints_tensor(PH_DTYPE_I64, 4, (int64_t[]){5, -7, 0, 0})}, *out[1] = {NULL};
    tensor *x = tn(IT[i], 1, (int64_t[]){4});
    for (int k = 0; k < 4; k++) iset(x, k, k == 3 ? MINS[i] : ielem(in[0], k));
    tensor_free(in[0]);
    in[0] = x;
    diag d;
    CHECK_STATUS(op_run("Neg", "", 1, in, 1, out, NULL, 0, 1, ~0u, &d), PH_OK, d.msg);
    if (out[0]) {
      CHECK_EQ_INT(ielem(out[0], 0), -5);
      CHECK_EQ_INT(ielem(out[0], 1), 7);
      CHECK_EQ_INT(ielem(out[0], 2), 0);
      CHECK_EQ_INT(ielem(out[0], 3), MINS[i]);
    }
    tensors_free(in, 1);
    tensors_free(out, 1);
  }
  /* large tensor over the pool: same bits on 1 and 3 threads */
  tensor *in[1] = {tn(PH_DTYPE_F16, 1, (int64_t[]){70001})}, *o1[1] = {NULL}, *o3[1] = {NULL};
  fill(in[0], &r, -8, 8);
  diag d;
  CHECK_STATUS(op_run("Softplus", "", 1, in, 1, o1, NULL, 0, 1, ~0u, &d), PH_OK, d.msg);
  CHECK_STATUS(op_run("Softplus", "", 1, in, 1, o3, NULL, 0, 3, ~0u, &d), PH_OK, d.msg);
  if (o1[0] && o3[0]) CHECK(memcmp(o1[0]->data, o3[0]->data, 70001 * 2) == 0);
  tensors_free(in, 1);
  tensors_free(o1, 1);
  tensors_free(o3, 1);
}

/* ---- Cast ----------------------------------------------------------------------------------- */

static const ph_dtype CAST_DT[] = {PH_DTYPE_F32, PH_DTYPE_F16, PH_DTYPE_BF16, PH_DTYPE_I64,
                                   PH_DTYPE_I32, PH_DTYPE_I8,  PH_DTYPE_U8};
#define N_CAST_DT 7

/* |v| rounded to p significant bits, ties to even, in exact integer arithmetic. */
static double round_int_bits(uint64_t mag, int p) {
  int len = 0;
  while (len < 64 && (mag >> len) != 0) len++;
  if (len <= p) return (double)mag;
  int s = len - p;
  uint64_t q = mag >> s, rem = mag & ((UINT64_C(1) << s) - 1), half = UINT64_C(1) << (s - 1);
  if (rem > half || (rem == half && (q & 1))) q++;
  return ldexp((double)q, s);
}

/* The expected value of casting element i of x to dtype to (as a double; NaN for NaN). */
static double cast_ref(const tensor *x, int64_t i, ph_dtype to) {
  if (dtype_is_compute_float(x->dtype)) {
    float f = tensor_get_f32(x, i);
    switch (to) {
    case PH_DTYPE_F32:
      return f;
    case PH_DTYPE_F16:
      return f16_to_f32(f32_to_f16(f));
    case PH_DTYPE_BF16:
      return bf16_to_f32(f32_to_bf16(f));
    default:
      break;
    }
    if (isnan(f)) return 0;
    double lo = to == PH_DTYPE_I64   ? -9223372036854775808.0
                : to == PH_DTYPE_I32 ? -2147483648.0
                : to == PH_DTYPE_I8  ? -128.0
                                     : 0.0;
    double hi = to == PH_DTYPE_I64   ? 9223372036854775807.0
                : to == PH_DTYPE_I32 ? 2147483647.0
                : to == PH_DTYPE_I8  ? 127.0
                                     : 255.0;
    double t = trunc((double)f);
    return t < lo ? lo : t > hi ? hi : t;
  }
  int64_t v = ielem(x, i);
  uint64_t mag = v < 0 ? 0u - (uint64_t)v : (uint64_t)v;
  double sign = v < 0 ? -1.0 : 1.0;
  switch (to) {
  case PH_DTYPE_F32:
    return sign * round_int_bits(mag, 24);
  case PH_DTYPE_BF16:
    return sign * round_int_bits(mag, 8);
  case PH_DTYPE_F16: {
    double m = round_int_bits(mag, 11);
    return sign * (m > 65504.0 ? INFINITY : m);
  }
  case PH_DTYPE_I64:
    return (double)v;
  case PH_DTYPE_I32:
    return (double)(int32_t)(uint32_t)(uint64_t)v;
  case PH_DTYPE_I8:
    return (double)(int8_t)(uint8_t)(uint64_t)v;
  default:
    return (double)(uint8_t)(uint64_t)v;
  }
}

static void test_cast(void) {
  rng r = rng_seed(51);
  static const float FSPEC[] = {0.5f,  -0.5f,    2.5f,      -2.7f,  1e10f,   -1e10f,  70000.0f,
                                NAN,   INFINITY, -INFINITY, 255.9f, 256.0f,  -129.0f, 127.9f,
                                -0.0f, 65519.0f, 65520.0f,  3.0e9f, -3.0e9f, 9.3e18f, -9.3e18f};
  static const int64_t ISPEC[] = {0,
                                  -1,
                                  127,
                                  128,
                                  -129,
                                  255,
                                  256,
                                  16777217,
                                  -16777219,
                                  2049,
                                  65519,
                                  65520,
                                  INT32_MAX,
                                  INT32_MIN,
                                  INT64_MAX,
                                  INT64_MIN,
                                  (INT64_C(1) << 40) + 1,
                                  -(INT64_C(1) << 53) - 3};
  int64_t n = 200;
  for (int fi = 0; fi < N_CAST_DT; fi++)
    for (int ti = 0; ti < N_CAST_DT; ti++) {
      ph_dtype from = CAST_DT[fi], to = CAST_DT[ti];
      tensor *in[1] = {tn(from, 1, (int64_t[]){n})}, *out[1] = {NULL};
      if (dtype_is_compute_float(from)) {
        fill(in[0], &r, -300, 300);
        for (int i = 0; i < 21; i++) tensor_set_f32(in[0], i, FSPEC[i]);
      } else {
        int64_t lo = from == PH_DTYPE_U8 ? 0 : from == PH_DTYPE_I8 ? -128 : -100000;
        int64_t hi = from == PH_DTYPE_U8 ? 255 : from == PH_DTYPE_I8 ? 127 : 100000;
        fill(in[0], &r, (double)lo, (double)hi);
        for (int i = 0; i < 18; i++) {
          int64_t v = ISPEC[i];
          if (from == PH_DTYPE_I32 && (v > INT32_MAX || v < INT32_MIN)) continue;
          if ((from == PH_DTYPE_I8 || from == PH_DTYPE_U8) && (v > hi || v < lo)) continue;
          iset(in[0], i, v);
        }
      }
      gattr at[1] = {attr_int("to", dtype_to_onnx(to))};
      diag d;
      CHECK_STATUS(op_run("Cast", "", 1, in, 1, out, at, 1, 1, ~0u, &d), PH_OK, d.msg);
      if (out[0]) {
        CHECK_EQ_INT(out[0]->dtype, to);
        int64_t bad = 0;
        for (int64_t i = 0; i < n; i++) {
          double want = cast_ref(in[0], i, to);
          double got = to == PH_DTYPE_I64 ? (double)ielem(out[0], i) : tensor_elem(out[0], i);
          int ok = isnan(want) ? isnan(got) : got == want;
          if (to == PH_DTYPE_I64 && !dtype_is_compute_float(from))
            ok = ielem(out[0], i) == ielem(in[0], i);
          if (!ok && !bad)
            fprintf(stderr, "  Cast %s->%s element %lld (%.17g): got %.17g want %.17g\n",
                    dtype_label(from), dtype_label(to), (long long)i, tensor_elem(in[0], i), got,
                    want);
          bad += !ok;
        }
        CHECK_EQ_INT(bad, 0);
      }
      tensors_free(in, 1);
      tensors_free(out, 1);
    }
  /* i64 extremes to i64 from float saturate exactly at the ends */
  tensor *in[1] = {tn(PH_DTYPE_F32, 1, (int64_t[]){2})}, *out[1] = {NULL};
  ((float *)in[0]->data)[0] = 9.3e18f;
  ((float *)in[0]->data)[1] = -9.3e18f;
  gattr at[1] = {attr_int("to", 7)};
  diag d;
  CHECK_STATUS(op_run("Cast", "", 1, in, 1, out, at, 1, 1, ~0u, &d), PH_OK, d.msg);
  if (out[0]) {
    CHECK(ielem(out[0], 0) == INT64_MAX);
    CHECK(ielem(out[0], 1) == INT64_MIN);
  }
  tensors_free(in, 1);
  tensors_free(out, 1);
  /* contract */
  tinfo ti[1] = {ti_make(PH_DTYPE_F32, 2, (int64_t[]){-1, 3})}, to[1];
  CHECK_STATUS(infer_op("Cast", "", 1, ti, 1, to, at, 1, &d), PH_OK, d.msg);
  CHECK_DIMS(to[0], 2, -1, 3);
  CHECK_EQ_INT(to[0].dtype, PH_DTYPE_I64);
  CHECK_STATUS(infer_op("Cast", "", 1, ti, 1, to, NULL, 0, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  at[0] = attr_int("to", 11); /* DOUBLE */
  CHECK_STATUS(infer_op("Cast", "", 1, ti, 1, to, at, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  at[0] = attr_int("to", 1);
  ti[0].dtype = PH_DTYPE_F8E4M3;
  CHECK_STATUS(infer_op("Cast", "", 1, ti, 1, to, at, 1, &d), PH_ERR_TENSOR_DTYPE, d.msg);
}

/* ---- shape ops ------------------------------------------------------------------------------ */

static const ph_dtype MOVE_DT[] = {PH_DTYPE_F32, PH_DTYPE_F16, PH_DTYPE_I64, PH_DTYPE_U8};

static void test_reshape(void) {
  rng r = rng_seed(61);
  diag d;
  for (int di = 0; di < 4; di++) {
    struct {
      int n;
      int64_t shape[4];
      int rank;
      int64_t want[4];
    } cases[] = {
        {2, {0, -1}, 2, {2, 12}},     {1, {-1}, 1, {24}},
        {3, {4, 0, 2}, 3, {4, 3, 2}}, {4, {1, 2, -1, 3}, 4, {1, 2, 4, 3}},
        {3, {0, 0, 4}, 3, {2, 3, 4}}, {2, {24, 1}, 2, {24, 1}},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
      tensor *in[2] = {
          tn(MOVE_DT[di], 3, (int64_t[]){2, 3, 4}),
          ints_tensor(c % 2 ? PH_DTYPE_I32 : PH_DTYPE_I64, cases[c].n, cases[c].shape)};
      tensor *out[1] = {NULL};
      fill(in[0], &r, -50, 50);
      CHECK_STATUS(op_run("Reshape", "", 2, in, 1, out, NULL, 0, 1, ~0u, &d), PH_OK, d.msg);
      if (out[0]) {
        tinfo ot = tensor_tinfo(out[0], 0);
        CHECK_DIMS(ot, cases[c].rank, cases[c].want[0], cases[c].want[1], cases[c].want[2],
                   cases[c].want[3]);
        CHECK(memcmp(out[0]->data, in[0]->data, 24 * dtype_size(MOVE_DT[di])) == 0);
      }
      tensors_free(in, 2);
      tensors_free(out, 1);
    }
  }
  /* allowzero = 1: 0 is a real 0 */
  tensor *in[2] = {tn(PH_DTYPE_F32, 2, (int64_t[]){0, 5}),
                   ints_tensor(PH_DTYPE_I64, 3, (int64_t[]){5, 0, 2})};
  tensor *out[1] = {NULL};
  gattr az[1] = {attr_int("allowzero", 1)};
  CHECK_STATUS(op_run("Reshape", "", 2, in, 1, out, az, 1, 1, ~0u, &d), PH_OK, d.msg);
  if (out[0]) {
    tinfo ot = tensor_tinfo(out[0], 0);
    CHECK_DIMS(ot, 3, 5, 0, 2);
  }
  tensors_free(out, 1);
  ((int64_t *)in[1]->data)[0] = -1;
  CHECK_STATUS(op_run("Reshape", "", 2, in, 1, out, az, 1, 1, ~0u, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  tensors_free(in, 2);
  tensors_free(out, 1);
  /* errors */
  in[0] = tn(PH_DTYPE_F32, 2, (int64_t[]){4, 6});
  in[1] = ints_tensor(PH_DTYPE_I64, 2, (int64_t[]){-1, -1});
  CHECK_STATUS(op_run("Reshape", "", 2, in, 1, out, NULL, 0, 1, ~0u, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  ((int64_t *)in[1]->data)[0] = 5;
  ((int64_t *)in[1]->data)[1] = -1;
  CHECK_STATUS(op_run("Reshape", "", 2, in, 1, out, NULL, 0, 1, ~0u, &d), PH_ERR_TENSOR_SHAPE,
               d.msg);
  ((int64_t *)in[1]->data)[0] = 5;
  ((int64_t *)in[1]->data)[1] = 5;
  CHECK_STATUS(op_run("Reshape", "", 2, in, 1, out, NULL, 0, 1, ~0u, &d), PH_ERR_TENSOR_SHAPE,
               d.msg);
  ((int64_t *)in[1]->data)[0] = 4;
  ((int64_t *)in[1]->data)[1] = 6;
  CHECK_STATUS(op_run("Reshape", "", 2, in, 1, out, NULL, 0, 1, 0u, &d), PH_ERR_UNSUPPORTED, d.msg);
  CHECK_CONTAINS(d.msg, "non-constant shape input");
  /* unknown dims at build time: [?, 3, 4] -> [0, -1] = [?, 12]; [-1, 4] = [?, 4] */
  tinfo ti[2] = {ti_make(PH_DTYPE_F32, 3, (int64_t[]){-1, 3, 4}), tensor_tinfo(in[1], 1)}, to[1];
  ((int64_t *)in[1]->data)[0] = 0;
  ((int64_t *)in[1]->data)[1] = -1;
  CHECK_STATUS(infer_op("Reshape", "", 2, ti, 1, to, NULL, 0, &d), PH_OK, d.msg);
  CHECK_DIMS(to[0], 2, -1, -1);
  ti[0] = ti_make(PH_DTYPE_F32, 3, (int64_t[]){2, -1, 4});
  ((int64_t *)in[1]->data)[0] = -1;
  ((int64_t *)in[1]->data)[1] = 4;
  CHECK_STATUS(infer_op("Reshape", "", 2, ti, 1, to, NULL, 0, &d), PH_OK, d.msg);
  CHECK_DIMS(to[0], 2, -1, 4);
  ti[0] = ti_make(PH_DTYPE_F32, 3, (int64_t[]){-1, 3, 4});
  ((int64_t *)in[1]->data)[0] = 0;
  ((int64_t *)in[1]->data)[1] = 12;
  CHECK_STATUS(infer_op("Reshape", "", 2, ti, 1, to, NULL, 0, &d), PH_OK, d.msg);
  CHECK_DIMS(to[0], 2, -1, 12);
  tensors_free(in, 2);
}

static void check_transpose(ph_dtype dt, int rank, const int64_t *dims, const int64_t *perm,
                            rng *r) {
  tensor *in[1] = {tn(dt, rank, dims)}, *out[1] = {NULL};
  fill(in[0], r, -100, 100);
  gattr at[1] = {attr_ints("perm", perm, rank)};
  diag d;
  CHECK_STATUS(op_run("Transpose", "", 1, in, 1, out, at, perm ? 1 : 0, 1, ~0u, &d), PH_OK, d.msg);
  if (out[0]) {
    int64_t p[8], od[8], n = tensor_numel(in[0]), bad = 0;
    for (int i = 0; i < rank; i++) {
      p[i] = perm ? perm[i] : rank - 1 - i;
      od[i] = dims[p[i]];
      CHECK_EQ_INT(out[0]->dims[i], od[i]);
    }
    size_t es = dtype_size(dt);
    for (int64_t o = 0; o < n; o++) {
      /* output multi-index -> input flat index */
      int64_t rem = o, idx[8], src = 0;
      for (int i = rank - 1; i >= 0; i--) {
        idx[i] = rem % od[i];
        rem /= od[i];
      }
      int64_t in_idx[8];
      for (int i = 0; i < rank; i++) in_idx[p[i]] = idx[i];
      for (int i = 0; i < rank; i++) src = src * dims[i] + in_idx[i];
      bad += memcmp((char *)out[0]->data + (size_t)o * es, (char *)in[0]->data + (size_t)src * es,
                    es) != 0;
    }
    CHECK_EQ_INT(bad, 0);
  }
  tensors_free(in, 1);
  tensors_free(out, 1);
}

static void test_transpose(void) {
  rng r = rng_seed(62);
  static const ph_dtype DT[] = {PH_DTYPE_F32, PH_DTYPE_BF16, PH_DTYPE_I64, PH_DTYPE_U8,
                                PH_DTYPE_I8};
  static const int64_t Ws[] = {1, 3, 17, 64, 65};
  for (int di = 0; di < 5; di++)
    for (int wi = 0; wi < 5; wi++) {
      int64_t W = Ws[wi];
      check_transpose(DT[di], 2, (int64_t[]){3, W}, NULL, &r);
      check_transpose(DT[di], 3, (int64_t[]){2, W, 5}, (int64_t[]){0, 2, 1}, &r);
      check_transpose(DT[di], 3, (int64_t[]){2, W, 5}, (int64_t[]){2, 0, 1}, &r);
      check_transpose(DT[di], 4, (int64_t[]){2, 1, 3, W}, (int64_t[]){0, 2, 1, 3}, &r);
      check_transpose(DT[di], 4, (int64_t[]){2, 1, 3, W}, (int64_t[]){3, 1, 0, 2}, &r);
      check_transpose(DT[di], 1, (int64_t[]){W}, NULL, &r);
    }
  /* bad perms */
  diag d;
  tinfo ti[1] = {ti_make(PH_DTYPE_F32, 3, (int64_t[]){2, 3, 4})}, to[1];
  gattr at[1] = {attr_ints("perm", (int64_t[]){0, 0, 1}, 3)};
  CHECK_STATUS(infer_op("Transpose", "", 1, ti, 1, to, at, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  at[0] = attr_ints("perm", (int64_t[]){0, 1}, 2);
  CHECK_STATUS(infer_op("Transpose", "", 1, ti, 1, to, at, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  at[0] = attr_ints("perm", (int64_t[]){0, 3, 1}, 3);
  CHECK_STATUS(infer_op("Transpose", "", 1, ti, 1, to, at, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  at[0] = attr_ints("perm", (int64_t[]){0, -1, 1}, 3);
  CHECK_STATUS(infer_op("Transpose", "", 1, ti, 1, to, at, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  /* unknown dims move with their axes */
  ti[0] = ti_make(PH_DTYPE_F32, 3, (int64_t[]){-1, 3, 4});
  at[0] = attr_ints("perm", (int64_t[]){1, 2, 0}, 3);
  CHECK_STATUS(infer_op("Transpose", "", 1, ti, 1, to, at, 1, &d), PH_OK, d.msg);
  CHECK_DIMS(to[0], 3, 3, 4, -1);
}

/* Runs Split on [A, B, C] data along axis and checks each part against the input. */
static void check_split(int64_t axis, int n_out, const int64_t *split, const gattr *extra,
                        const int64_t *want_sizes, ph_dtype dt, rng *r) {
  int64_t dims[3] = {4, 7, 6};
  tensor *in[2] = {tn(dt, 3, dims), split ? ints_tensor(PH_DTYPE_I64, n_out, split) : NULL};
  tensor *out[8] = {NULL};
  fill(in[0], r, -100, 100);
  gattr at[2] = {attr_int("axis", axis)};
  int n_at = 1;
  if (extra) at[n_at++] = *extra;
  diag d;
  CHECK_STATUS(op_run("Split", "", split ? 2 : 1, in, n_out, out, at, n_at, 1, ~0u, &d), PH_OK,
               d.msg);
  int ax = (int)(axis < 0 ? axis + 3 : axis);
  int64_t off = 0, bad = 0;
  for (int i = 0; i < n_out; i++) {
    if (!out[i]) continue;
    CHECK_EQ_INT(out[i]->dims[ax], want_sizes[i]);
    int64_t n = tensor_numel(out[i]);
    for (int64_t e = 0; e < n; e++) {
      int64_t rem = e, idx[3];
      for (int k = 2; k >= 0; k--) {
        idx[k] = rem % out[i]->dims[k];
        rem /= out[i]->dims[k];
      }
      idx[ax] += off;
      int64_t src = (idx[0] * dims[1] + idx[1]) * dims[2] + idx[2];
      bad += tensor_elem(out[i], e) != tensor_elem(in[0], src);
    }
    off += want_sizes[i];
  }
  CHECK_EQ_INT(bad, 0);
  tensors_free(in, 2);
  tensors_free(out, n_out);
}

static void test_split(void) {
  rng r = rng_seed(63);
  for (int di = 0; di < 4; di++) {
    ph_dtype dt = MOVE_DT[di];
    check_split(0, 2, NULL, NULL, (int64_t[]){2, 2}, dt, &r);
    check_split(-1, 3, NULL, NULL, (int64_t[]){2, 2, 2}, dt, &r);
    check_split(1, 3, (int64_t[]){1, 2, 4}, NULL, (int64_t[]){1, 2, 4}, dt, &r);
    check_split(1, 3, (int64_t[]){0, 7, 0}, NULL, (int64_t[]){0, 7, 0}, dt, &r);
    check_split(2, 1, NULL, NULL, (int64_t[]){6}, dt, &r);
    gattr nout = attr_int("num_outputs", 3);
    check_split(1, 3, NULL, &nout, (int64_t[]){3, 3, 1}, dt, &r);
  }
  diag d;
  tensor *in[2] = {tn(PH_DTYPE_F32, 2, (int64_t[]){4, 7}),
                   ints_tensor(PH_DTYPE_I64, 2, (int64_t[]){3, 3})};
  tensor *out[3] = {NULL};
  gattr at[1] = {attr_int("axis", 1)};
  /* 7 not divisible by 2 without split sizes; sizes not summing to the dim */
  CHECK_STATUS(op_run("Split", "", 1, in, 2, out, at, 1, 1, ~0u, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  CHECK_STATUS(op_run("Split", "", 2, in, 2, out, at, 1, 1, ~0u, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  /* wrong count of sizes; non-constant sizes */
  CHECK_STATUS(op_run("Split", "", 2, in, 3, out, at, 1, 1, ~0u, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  ((int64_t *)in[1]->data)[0] = 4;
  CHECK_STATUS(op_run("Split", "", 2, in, 2, out, at, 1, 1, 1u, &d), PH_ERR_UNSUPPORTED, d.msg);
  CHECK_CONTAINS(d.msg, "non-constant split input");
  tensors_free(out, 3);
  /* the pre-13 split attribute is refused */
  gattr old[2] = {attr_int("axis", 1), attr_ints("split", (int64_t[]){4, 3}, 2)};
  CHECK_STATUS(op_run("Split", "", 1, in, 2, out, old, 2, 1, ~0u, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  tensors_free(in, 2);
  tensors_free(out, 3);
  /* unknown dims */
  tinfo ti[1] = {ti_make(PH_DTYPE_F32, 2, (int64_t[]){-1, -1})}, to[2];
  CHECK_STATUS(infer_op("Split", "", 1, ti, 2, to, at, 1, &d), PH_OK, d.msg);
  CHECK_DIMS(to[0], 2, -1, -1);
  CHECK_DIMS(to[1], 2, -1, -1);
}

/* The ONNX Slice rules for one axis of length len, written from the spec text: negative
 * positions get len added (saturating, so INT64_MIN stays below 0), then starts clamp to
 * [0, len] ([0, len-1] for negative steps) and ends to [0, len] ([-1, len-1]). This is numpy's
 * slicing except for a start before the front with a negative step, which numpy makes empty and
 * ONNX clamps to 0. Returns the indices taken, in order. */
static int64_t onnx_slice(int64_t len, int64_t start, int64_t stop, int64_t step, int64_t *idx) {
  if (start < 0) start = start < -len ? -1 : start + len;
  if (stop < 0) stop = stop < -len ? -1 : stop + len;
  int64_t lo_s = 0, hi_s = step < 0 ? len - 1 : len, lo_e = step < 0 ? -1 : 0;
  int64_t hi_e = step < 0 ? len - 1 : len;
  start = start < lo_s ? lo_s : start > hi_s ? hi_s : start;
  stop = stop < lo_e ? lo_e : stop > hi_e ? hi_e : stop;
  int64_t n = 0;
  uint64_t mag = step > 0 ? (uint64_t)step : 0u - (uint64_t)step;
  if (step > 0)
    for (int64_t i = start; i < stop;) {
      idx[n++] = i;
      if ((uint64_t)(stop - i) <= mag) break;
      i += step;
    }
  else
    for (int64_t i = start; i > stop;) {
      idx[n++] = i;
      if ((uint64_t)(i - stop) <= mag) break;
      i += step;
    }
  return n;
}

static void test_slice_1d(void) {
  static const int64_t POS[] = {INT64_MIN, -12, -10, -3, -1, 0, 1, 3, 9, 10, 12, INT64_MAX};
  static const int64_t STEPS[] = {1, 2, 3, -1, -2, -3, INT64_MAX, INT64_MIN};
  int64_t bad = 0, cases = 0;
  tensor *data = tn(PH_DTYPE_F32, 1, (int64_t[]){10});
  for (int i = 0; i < 10; i++) ((float *)data->data)[i] = (float)i;
  for (int si = 0; si < 12; si++)
    for (int ei = 0; ei < 12; ei++)
      for (int ti = 0; ti < 8; ti++) {
        int64_t idx[16];
        int64_t n = onnx_slice(10, POS[si], POS[ei], STEPS[ti], idx);
        int with_axes = (si + ei) % 2;
        tensor *in[5] = {data, ints_tensor(PH_DTYPE_I64, 1, &POS[si]),
                         ints_tensor(PH_DTYPE_I64, 1, &POS[ei]),
                         ints_tensor(PH_DTYPE_I64, 1, (int64_t[]){with_axes ? -1 : 0}),
                         ints_tensor(PH_DTYPE_I64, 1, &STEPS[ti])};
        tensor *out[1] = {NULL};
        diag d;
        cases++;
        ph_status s = op_run("Slice", "", 5, in, 1, out, NULL, 0, 1, ~0u, &d);
        int ok = s == PH_OK && out[0] && out[0]->dims[0] == n;
        for (int64_t k = 0; ok && k < n; k++) ok = ((float *)out[0]->data)[k] == (float)idx[k];
        if (!ok && !bad)
          fprintf(stderr,
                  "  Slice [10] start %lld end %lld step %lld: %s, got len %lld want %lld\n",
                  (long long)POS[si], (long long)POS[ei], (long long)STEPS[ti], ph_status_name(s),
                  out[0] ? (long long)out[0]->dims[0] : -1LL, (long long)n);
        bad += !ok;
        for (int k = 1; k < 5; k++) tensor_free(in[k]);
        tensors_free(out, 1);
      }
  tensor_free(data);
  CHECK_EQ_INT(bad, 0);
  CHECK_EQ_INT(cases, 12 * 12 * 8);
}

static void test_slice(void) {
  rng r = rng_seed(64);
  diag d;
  /* several axes of [4, W, 6], given out of order, i32 parameters, mixed steps */
  static const int64_t Ws[] = {1, 3, 17, 65};
  for (int di = 0; di < 4; di++)
    for (int wi = 0; wi < 4; wi++) {
      int64_t W = Ws[wi], dims[3] = {4, W, 6};
      const int64_t st[3] = {-1, 1, 0}, en[3] = {INT64_MIN, -1, 3}, ax[3] = {2, 1, 0};
      const int64_t sp[3] = {-2, 2, 1};
      tensor *in[5] = {tn(MOVE_DT[di], 3, dims),
                       ints_tensor(PH_DTYPE_I32, 3, (int64_t[]){-1, 1, 0}),
                       ints_tensor(PH_DTYPE_I64, 3, en), ints_tensor(PH_DTYPE_I32, 3, ax),
                       ints_tensor(PH_DTYPE_I64, 3, sp)};
      (void)st;
      tensor *out[1] = {NULL};
      fill(in[0], &r, -100, 100);
      CHECK_STATUS(op_run("Slice", "", 5, in, 1, out, NULL, 0, 1, ~0u, &d), PH_OK, d.msg);
      int64_t i0[16], i1[80], i2[16];
      int64_t n0 = onnx_slice(4, 0, 3, 1, i0), n1 = onnx_slice(W, 1, -1, 2, i1);
      int64_t n2 = onnx_slice(6, -1, INT64_MIN, -2, i2);
      if (out[0]) {
        tinfo ot = tensor_tinfo(out[0], 0);
        CHECK_DIMS(ot, 3, n0, n1, n2);
        int64_t bad = 0, e = 0;
        for (int64_t a = 0; a < n0; a++)
          for (int64_t b = 0; b < n1; b++)
            for (int64_t c = 0; c < n2; c++, e++)
              bad += tensor_elem(out[0], e) != tensor_elem(in[0], (i0[a] * W + i1[b]) * 6 + i2[c]);
        CHECK_EQ_INT(bad, 0);
      }
      tensors_free(in, 5);
      tensors_free(out, 1);
    }
  /* axes and steps omitted: leading axes */
  tensor *in[5] = {tn(PH_DTYPE_I64, 2, (int64_t[]){5, 4}),
                   ints_tensor(PH_DTYPE_I64, 1, (int64_t[]){1}),
                   ints_tensor(PH_DTYPE_I64, 1, (int64_t[]){3}), NULL, NULL};
  tensor *out[1] = {NULL};
  for (int i = 0; i < 20; i++) ((int64_t *)in[0]->data)[i] = i;
  CHECK_STATUS(op_run("Slice", "", 3, in, 1, out, NULL, 0, 1, ~0u, &d), PH_OK, d.msg);
  if (out[0]) {
    tinfo ot = tensor_tinfo(out[0], 0);
    CHECK_DIMS(ot, 2, 2, 4);
    CHECK_EQ_INT(ielem(out[0], 0), 4);
    CHECK_EQ_INT(ielem(out[0], 7), 11);
  }
  tensors_free(out, 1);
  /* contract: non-constant starts, step 0, repeated axis, mismatched lengths */
  CHECK_STATUS(op_run("Slice", "", 3, in, 1, out, NULL, 0, 1, 3u, &d), PH_ERR_UNSUPPORTED, d.msg);
  CHECK_CONTAINS(d.msg, "non-constant ends input");
  in[3] = ints_tensor(PH_DTYPE_I64, 1, (int64_t[]){0});
  in[4] = ints_tensor(PH_DTYPE_I64, 1, (int64_t[]){0});
  CHECK_STATUS(op_run("Slice", "", 5, in, 1, out, NULL, 0, 1, ~0u, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  tensors_free(&in[1], 4);
  in[1] = ints_tensor(PH_DTYPE_I64, 2, (int64_t[]){0, 0});
  in[2] = ints_tensor(PH_DTYPE_I64, 2, (int64_t[]){1, 1});
  in[3] = ints_tensor(PH_DTYPE_I64, 2, (int64_t[]){1, -1});
  CHECK_STATUS(op_run("Slice", "", 4, in, 1, out, NULL, 0, 1, ~0u, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  tensor_free(in[3]);
  in[3] = ints_tensor(PH_DTYPE_I64, 1, (int64_t[]){1});
  CHECK_STATUS(op_run("Slice", "", 4, in, 1, out, NULL, 0, 1, ~0u, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  /* unknown dims: a sliced unknown dim is unknown, others pass through */
  tinfo ti[4] = {ti_make(PH_DTYPE_F32, 2, (int64_t[]){-1, 4}), tensor_tinfo(in[1], 1),
                 tensor_tinfo(in[2], 1), tensor_tinfo(in[3], 1)},
        to[1];
  ti[3].dims[0] = 2;
  ((int64_t *)in[3]->data)[0] = 1;
  tensor *axes2 = ints_tensor(PH_DTYPE_I64, 2, (int64_t[]){1, 0});
  ti[3] = tensor_tinfo(axes2, 1);
  CHECK_STATUS(infer_op("Slice", "", 4, ti, 1, to, NULL, 0, &d), PH_OK, d.msg);
  CHECK_DIMS(to[0], 2, -1, 1);
  tensor_free(axes2);
  tensors_free(in, 5);
}

static void test_concat(void) {
  rng r = rng_seed(65);
  diag d;
  static const int64_t Ws[] = {1, 3, 17, 64, 65};
  for (int di = 0; di < 4; di++)
    for (int wi = 0; wi < 5; wi++)
      for (int axis = -3; axis < 3; axis++) {
        int ax = axis < 0 ? axis + 3 : axis;
        int64_t W = Ws[wi], sizes[3] = {2, 0, W};
        tensor *in[3];
        for (int i = 0; i < 3; i++) {
          int64_t dims[3] = {2, 3, W};
          dims[ax] = sizes[i];
          in[i] = tn(MOVE_DT[di], 3, dims);
          fill(in[i], &r, -100, 100);
        }
        tensor *out[1] = {NULL};
        gattr at[1] = {attr_int("axis", axis)};
        CHECK_STATUS(op_run("Concat", "", 3, in, 1, out, at, 1, 1, ~0u, &d), PH_OK, d.msg);
        if (out[0]) {
          CHECK_EQ_INT(out[0]->dims[ax], 2 + W);
          int64_t n = tensor_numel(out[0]), bad = 0;
          for (int64_t e = 0; e < n; e++) {
            int64_t rem = e, idx[3];
            for (int k = 2; k >= 0; k--) {
              idx[k] = rem % out[0]->dims[k];
              rem /= out[0]->dims[k];
            }
            int which = 0;
            while (idx[ax] >= in[which]->dims[ax]) idx[ax] -= in[which++]->dims[ax];
            const int64_t *sd = in[which]->dims;
            bad += tensor_elem(out[0], e) !=
                   tensor_elem(in[which], (idx[0] * sd[1] + idx[1]) * sd[2] + idx[2]);
          }
          CHECK_EQ_INT(bad, 0);
        }
        tensors_free(in, 3);
        tensors_free(out, 1);
      }
  tinfo ti[3] = {ti_make(PH_DTYPE_F32, 2, (int64_t[]){-1, 4}),
                 ti_make(PH_DTYPE_F32, 2, (int64_t[]){3, -1}),
                 ti_make(PH_DTYPE_F32, 2, (int64_t[]){3, 5})},
        to[1];
  gattr at[1] = {attr_int("axis", 1)};
  CHECK_STATUS(infer_op("Concat", "", 3, ti, 1, to, at, 1, &d), PH_OK, d.msg);
  CHECK_DIMS(to[0], 2, 3, -1);
  ti[1].dims[1] = 2;
  CHECK_STATUS(infer_op("Concat", "", 3, ti, 1, to, at, 1, &d), PH_OK, d.msg);
  CHECK_DIMS(to[0], 2, 3, 11);
  ti[2].dims[0] = 4;
  CHECK_STATUS(infer_op("Concat", "", 3, ti, 1, to, at, 1, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  ti[2].dims[0] = 3;
  ti[2].dtype = PH_DTYPE_F16;
  CHECK_STATUS(infer_op("Concat", "", 3, ti, 1, to, at, 1, &d), PH_ERR_TENSOR_DTYPE, d.msg);
  ti[2] = ti_make(PH_DTYPE_F32, 3, (int64_t[]){3, 5, 1});
  CHECK_STATUS(infer_op("Concat", "", 3, ti, 1, to, at, 1, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  CHECK_STATUS(infer_op("Concat", "", 3, ti, 1, to, NULL, 0, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
}

static void test_unsqueeze_squeeze_shape(void) {
  diag d;
  rng r = rng_seed(66);
  for (int di = 0; di < 4; di++) {
    tensor *in[2] = {tn(MOVE_DT[di], 2, (int64_t[]){3, 4}),
                     ints_tensor(PH_DTYPE_I64, 2, (int64_t[]){0, -1})};
    tensor *out[1] = {NULL};
    fill(in[0], &r, -100, 100);
    CHECK_STATUS(op_run("Unsqueeze", "", 2, in, 1, out, NULL, 0, 1, ~0u, &d), PH_OK, d.msg);
    if (out[0]) {
      tinfo ot = tensor_tinfo(out[0], 0);
      CHECK_DIMS(ot, 4, 1, 3, 4, 1);
      CHECK(memcmp(out[0]->data, in[0]->data, 12 * dtype_size(MOVE_DT[di])) == 0);
    }
    tensors_free(out, 1);
    /* Squeeze it back, all 1-dims */
    tensor *sq[2] = {tn(MOVE_DT[di], 4, (int64_t[]){1, 3, 1, 4}), NULL};
    memcpy(sq[0]->data, in[0]->data, 12 * dtype_size(MOVE_DT[di]));
    CHECK_STATUS(op_run("Squeeze", "", 1, sq, 1, out, NULL, 0, 1, ~0u, &d), PH_OK, d.msg);
    if (out[0]) {
      tinfo ot = tensor_tinfo(out[0], 0);
      CHECK_DIMS(ot, 2, 3, 4);
      CHECK(memcmp(out[0]->data, in[0]->data, 12 * dtype_size(MOVE_DT[di])) == 0);
    }
    tensors_free(out, 1);
    sq[1] = ints_tensor(PH_DTYPE_I32, 1, (int64_t[]){-2});
    CHECK_STATUS(op_run("Squeeze", "", 2, sq, 1, out, NULL, 0, 1, ~0u, &d), PH_OK, d.msg);
    if (out[0]) {
      tinfo ot = tensor_tinfo(out[0], 0);
      CHECK_DIMS(ot, 3, 1, 3, 4);
    }
    tensors_free(out, 1);
    tensors_free(sq, 2);
    tensors_free(in, 2);
  }
  /* Unsqueeze: middle axis, repeats, range, non-constant */
  tensor *in[2] = {tn(PH_DTYPE_F32, 2, (int64_t[]){3, 4}),
                   ints_tensor(PH_DTYPE_I64, 1, (int64_t[]){1})};
  tensor *out[1] = {NULL};
  CHECK_STATUS(op_run("Unsqueeze", "", 2, in, 1, out, NULL, 0, 1, ~0u, &d), PH_OK, d.msg);
  if (out[0]) {
    tinfo ot = tensor_tinfo(out[0], 0);
    CHECK_DIMS(ot, 3, 3, 1, 4);
  }
  tensors_free(out, 1);
  CHECK_STATUS(op_run("Unsqueeze", "", 2, in, 1, out, NULL, 0, 1, 1u, &d), PH_ERR_UNSUPPORTED,
               d.msg);
  ((int64_t *)in[1]->data)[0] = 3;
  CHECK_STATUS(op_run("Unsqueeze", "", 2, in, 1, out, NULL, 0, 1, ~0u, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  tensor_free(in[1]);
  in[1] = ints_tensor(PH_DTYPE_I64, 2, (int64_t[]){1, -3});
  CHECK_STATUS(op_run("Unsqueeze", "", 2, in, 1, out, NULL, 0, 1, ~0u, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  /* Squeeze of a dim that is not 1 */
  ((int64_t *)in[1]->data)[0] = 0;
  tensor_free(in[1]);
  in[1] = ints_tensor(PH_DTYPE_I64, 1, (int64_t[]){0});
  CHECK_STATUS(op_run("Squeeze", "", 2, in, 1, out, NULL, 0, 1, ~0u, &d), PH_ERR_TENSOR_SHAPE,
               d.msg);
  tensors_free(out, 1);
  /* Shape with start/end */
  struct {
    int64_t start, end;
    int has_start, has_end;
    int n;
    int64_t want[3];
  } sc[] = {{0, 0, 0, 0, 3, {2, 3, 4}},
            {1, 0, 1, 0, 2, {3, 4}},
            {0, -1, 0, 1, 2, {2, 3}},
            {-10, 10, 1, 1, 3, {2, 3, 4}},
            {2, 1, 1, 1, 0, {0}}};
  tensor *x = tn(PH_DTYPE_BF16, 3, (int64_t[]){2, 3, 4});
  for (size_t i = 0; i < sizeof sc / sizeof sc[0]; i++) {
    gattr at[2];
    int na = 0;
    if (sc[i].has_start) at[na++] = attr_int("start", sc[i].start);
    if (sc[i].has_end) at[na++] = attr_int("end", sc[i].end);
    tensor *sin[1] = {x};
    CHECK_STATUS(op_run("Shape", "", 1, sin, 1, out, at, na, 1, ~0u, &d), PH_OK, d.msg);
    if (out[0]) {
      CHECK_EQ_INT(out[0]->dtype, PH_DTYPE_I64);
      CHECK_EQ_INT(out[0]->dims[0], sc[i].n);
      for (int k = 0; k < sc[i].n; k++) CHECK_EQ_INT(ielem(out[0], k), sc[i].want[k]);
    }
    tensors_free(out, 1);
  }
  tensor_free(x);
  tensors_free(in, 2);
  /* unknown rank/dims */
  tinfo ti[2] = {ti_make(PH_DTYPE_F32, 3, (int64_t[]){-1, 1, 4})}, to[1];
  CHECK_STATUS(infer_op("Shape", "", 1, ti, 1, to, NULL, 0, &d), PH_OK, d.msg);
  CHECK_DIMS(to[0], 1, 3);
  CHECK_STATUS(infer_op("Squeeze", "", 1, ti, 1, to, NULL, 0, &d), PH_OK, d.msg);
  CHECK_EQ_INT(to[0].rank, -1);
  ti[0].rank = -1;
  CHECK_STATUS(infer_op("Shape", "", 1, ti, 1, to, NULL, 0, &d), PH_OK, d.msg);
  CHECK_DIMS(to[0], 1, -1);
}

/* ---- ReduceSum ------------------------------------------------------------------------------ */

static void check_reduce(ph_dtype dt, int rank, const int64_t *dims, int n_axes,
                         const int64_t *axes, int keepdims, rng *r) {
  tensor *in[2] = {tn(dt, rank, dims),
                   n_axes >= 0 ? ints_tensor(PH_DTYPE_I64, n_axes, axes) : NULL};
  tensor *out[1] = {NULL};
  fill(in[0], r, -100, 100);
  gattr at[1] = {attr_int("keepdims", keepdims)};
  diag d;
  CHECK_STATUS(op_run("ReduceSum", "", in[1] ? 2 : 1, in, 1, out, at, 1, 1, ~0u, &d), PH_OK, d.msg);
  int red[8] = {0};
  for (int i = 0; i < n_axes; i++) red[axes[i] < 0 ? axes[i] + rank : axes[i]] = 1;
  if (n_axes <= 0)
    for (int i = 0; i < rank; i++) red[i] = 1;
  if (out[0]) {
    int64_t on = tensor_numel(out[0]), n = tensor_numel(in[0]);
    double *ref = calloc((size_t)on + 1, sizeof *ref), *tol = calloc((size_t)on + 1, sizeof *tol);
    for (int64_t e = 0; e < n; e++) {
      int64_t rem = e, idx[8], o = 0;
      for (int k = rank - 1; k >= 0; k--) {
        idx[k] = rem % dims[k];
        rem /= dims[k];
      }
      for (int k = 0; k < rank; k++)
        if (!red[k]) o = o * dims[k] + idx[k];
      ref[o] += tensor_elem(in[0], e);
      tol[o] += fabs(tensor_elem(in[0], e));
    }
    /* sequential f32 sum of n terms: n * eps * sum |x| */
    for (int64_t o = 0; o < on; o++) tol[o] *= (double)(n / (on ? on : 1) + 1) * 6e-8;
    int rr = 0;
    for (int k = 0; k < rank; k++) rr += !red[k] || keepdims;
    CHECK_EQ_INT(out[0]->rank, rr);
    char name[64], b[48];
    snprintf(name, sizeof name, "ReduceSum %s n_axes %d keep %d", fmt_dims(b, 48, rank, dims),
             n_axes, keepdims);
    op_expect_close(name, out[0], ref, tol, 0, on);
    free(ref);
    free(tol);
  }
  tensors_free(in, 2);
  tensors_free(out, 1);
}

static void test_reduce_sum(void) {
  rng r = rng_seed(71);
  static const ph_dtype DT[] = {PH_DTYPE_F32, PH_DTYPE_F16, PH_DTYPE_BF16, PH_DTYPE_I64,
                                PH_DTYPE_I32};
  static const int64_t Ws[] = {1, 3, 17, 63, 64, 65, 130};
  for (int di = 0; di < 5; di++)
    for (int wi = 0; wi < 7; wi++)
      for (int keep = 0; keep < 2; keep++) {
        int64_t W = Ws[wi];
        check_reduce(DT[di], 1, (int64_t[]){W}, -1, NULL, keep, &r);
        check_reduce(DT[di], 2, (int64_t[]){3, W}, 1, (int64_t[]){-1}, keep, &r);
        check_reduce(DT[di], 2, (int64_t[]){3, W}, 1, (int64_t[]){0}, keep, &r);
        check_reduce(DT[di], 3, (int64_t[]){2, W, 5}, 2, (int64_t[]){2, 0}, keep, &r);
        check_reduce(DT[di], 3, (int64_t[]){2, W, 5}, 1, (int64_t[]){1}, keep, &r);
        check_reduce(DT[di], 3, (int64_t[]){2, 1, W}, 0, NULL, keep, &r); /* empty axes: all */
      }
  diag d;
  /* noop_with_empty_axes: identity */
  tensor *in[2] = {tn(PH_DTYPE_F32, 2, (int64_t[]){3, 5}), ints_tensor(PH_DTYPE_I64, 0, NULL)};
  tensor *out[1] = {NULL};
  fill(in[0], &r, -1, 1);
  gattr noop[1] = {attr_int("noop_with_empty_axes", 1)};
  CHECK_STATUS(op_run("ReduceSum", "", 2, in, 1, out, noop, 1, 1, ~0u, &d), PH_OK, d.msg);
  if (out[0]) {
    tinfo ot = tensor_tinfo(out[0], 0);
    CHECK_DIMS(ot, 2, 3, 5);
    CHECK(memcmp(out[0]->data, in[0]->data, 15 * 4) == 0);
  }
  tensors_free(out, 1);
  /* integer sums wrap */
  tensor *ii[2] = {ints_tensor(PH_DTYPE_I32, 2, (int64_t[]){INT32_MAX, 1}), NULL};
  CHECK_STATUS(op_run("ReduceSum", "", 1, ii, 1, out, NULL, 0, 1, ~0u, &d), PH_OK, d.msg);
  if (out[0]) CHECK_EQ_INT(ielem(out[0], 0), INT32_MIN);
  tensors_free(out, 1);
  tensors_free(ii, 2);
  /* contract */
  CHECK_STATUS(op_run("ReduceSum", "", 2, in, 1, out, NULL, 0, 1, 1u, &d), PH_OK, d.msg);
  tensors_free(out, 1);
  tensor_free(in[1]);
  in[1] = ints_tensor(PH_DTYPE_I64, 1, (int64_t[]){1});
  CHECK_STATUS(op_run("ReduceSum", "", 2, in, 1, out, NULL, 0, 1, 1u, &d), PH_ERR_UNSUPPORTED,
               d.msg);
  ((int64_t *)in[1]->data)[0] = 2;
  CHECK_STATUS(op_run("ReduceSum", "", 2, in, 1, out, NULL, 0, 1, ~0u, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  tensor_free(in[1]);
  in[1] = ints_tensor(PH_DTYPE_I64, 2, (int64_t[]){1, -1});
  CHECK_STATUS(op_run("ReduceSum", "", 2, in, 1, out, NULL, 0, 1, ~0u, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  tensors_free(in, 2);
  tinfo ti[1] = {ti_make(PH_DTYPE_U8, 1, (int64_t[]){4})}, to[1];
  CHECK_STATUS(infer_op("ReduceSum", "", 1, ti, 1, to, NULL, 0, &d), PH_ERR_TENSOR_DTYPE, d.msg);
  ti[0] = ti_make(PH_DTYPE_F32, 3, (int64_t[]){-1, 4, -1});
  CHECK_STATUS(infer_op("ReduceSum", "", 1, ti, 1, to, NULL, 0, &d), PH_OK, d.msg);
  CHECK_DIMS(to[0], 3, 1, 1, 1);
}

int main(void) {
  RUN(test_registry);
  RUN(test_matmul);
  RUN(test_matmul_contract);
  RUN(test_matmul_wt);
  RUN(test_matmul_wt_shapes);
  RUN(test_matmul_wt_batch_invariance);
  RUN(test_matmul_wt_f16_exhaustive);
  RUN(test_matmul_wt_contract);
  RUN(test_gather);
  RUN(test_binary);
  RUN(test_binary_int_edges);
  RUN(test_binary_contract);
  RUN(test_unary);
  RUN(test_cast);
  RUN(test_reshape);
  RUN(test_transpose);
  RUN(test_split);
  RUN(test_slice_1d);
  RUN(test_slice);
  RUN(test_concat);
  RUN(test_unsqueeze_squeeze_shape);
  RUN(test_reduce_sum);
  return check_finish();
}
