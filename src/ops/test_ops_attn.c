/* test_ops_attn — GroupQueryAttention, RotaryEmbedding, MRotaryEmbedding,
 * SimplifiedLayerNormalization and SkipSimplifiedLayerNormalization.
 *
 * Every op is checked against a plain float64 loop written here from the spec text
 * (docs/ops-attention.md, spec/model-math.md §3, spec/ort-1.30.md), never from the kernels:
 * the references read the same (dtype-rounded) inputs and compute in double. Where the contract
 * rounds an intermediate to the IO dtype (a rotated key stored in present_key) the reference
 * rounds there too. Shapes cover 1, odd sizes and sizes around 64; f32, f16 and bf16 IO.
 *
 * Tolerances: f32 outputs within 1e-5 of the reference scale (max |ref| of the tensor); f16 and
 * bf16 outputs within one output ulp of the reference value or 2e-3 of it relative, whichever is
 * larger, plus the f32 floor of 1e-5 of the scale (the arithmetic is f32 whatever the storage).
 * Derivation. A sum of n f32 terms lies within gamma_n ~ n u (u = 2^-24 = 6.0e-8) of its exact
 * value relative to the sum of the terms' magnitudes (Higham, Accuracy and Stability, §3.1),
 * which is O(scale) here: softmax weights sum to 1, norms divide by the row's RMS. The longest
 * reduction in these cases has n <= 167 terms (attention over P + S <= 37 + 130 keys; norms over
 * <= 130 values; head dims <= 32 are shorter), so 167 u = 1.0e-5 of the scale. f16/bf16: the f32
 * result is rounded once to the output (half an output ulp); the contract also rounds
 * intermediates to the IO dtype (a rotated key in present_key, the normalized row before its
 * weight), so an input a rounding away from a tie can move the output by one more output ulp:
 * one ulp in all. In f16 some intermediates are rounded up to about 4 times before the output
 * (stored input, rotated or normalized copy, weight product): 4 f16 unit roundoffs, 4 x 2^-11 =
 * 2e-3 relative. The measured worst errors are printed (f32: up to 5e-7 of scale; f16/bf16:
 * half an ulp).
 * Thread-count independence is checked bit-exactly (1 vs 3 threads), and GQA batch invariance
 * (a row alone vs packed with others) too. The worst errors seen are printed at the end.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "check.h"
#include "op_testing.h"

/* ---- small helpers ----------------------------------------------------------------------------
 */

static tensor *mk(ph_dtype dt, int rank, const int64_t *dims) { return tensor_new(dt, rank, dims); }

static tensor *mk_rand(ph_dtype dt, int rank, const int64_t *dims, rng *r, float lo, float hi) {
  tensor *t = tensor_new(dt, rank, dims);
  tensor_fill_uniform(t, r, lo, hi);
  return t;
}

static double at(const tensor *t, int64_t i) { return (double)tensor_get_f32(t, i); }

/* x rounded to dtype dt (through f32, as a kernel's store does) */
static double round_to(ph_dtype dt, double x) {
  float f = (float)x;
  if (dt == PH_DTYPE_F16) return f16_to_f32(f32_to_f16(f));
  if (dt == PH_DTYPE_BF16) return bf16_to_f32(f32_to_bf16(f));
  return f;
}

/* spacing of dtype dt at |x| */
static double ulp_of(ph_dtype dt, double x) {
  int e;
  x = fabs(x);
  int mant = dt == PH_DTYPE_F16 ? 10 : 7, emin = dt == PH_DTYPE_F16 ? -14 : -126;
  if (x == 0.0) return ldexp(1.0, emin - mant);
  frexp(x, &e); /* x = m * 2^e, m in [0.5, 1) */
  e -= 1;
  if (e < emin) e = emin;
  return ldexp(1.0, e - mant);
}

static void free_all(tensor **t, int n) {
  for (int i = 0; i < n; i++) {
    tensor_free(t[i]);
    t[i] = NULL;
  }
}

static int same_bytes(const tensor *a, const tensor *b) {
  if (!a || !b || a->dtype != b->dtype || tensor_numel(a) != tensor_numel(b)) return 0;
  return memcmp(a->data, b->data, (size_t)tensor_numel(a) * dtype_size(a->dtype)) == 0;
}

/* worst errors observed, per op family and dtype (0 f32, 1 f16, 2 bf16): the fraction of the
 * tolerance used, and the error in output ulps (f32: as a fraction of the scale) over elements
 * of at least 1% of the scale, where an ulp is a meaningful unit */
enum { FAM_NORM, FAM_ROPE, FAM_GQA, N_FAM };
static const char *const FAM_NAMES[N_FAM] = {"norms", "rotary", "gqa"};
static double worst_tol[N_FAM][3], worst_err[N_FAM][3];

static int dt_index(ph_dtype dt) { return dt == PH_DTYPE_F32 ? 0 : dt == PH_DTYPE_F16 ? 1 : 2; }

/* Compares n elements of t with ref; prints the first failures with `what`. */
static int check_close(int fam, const tensor *t, const double *ref, int64_t n, const char *what) {
  double scale = 0.0;
  for (int64_t i = 0; i < n; i++) scale = fmax(scale, fabs(ref[i]));
  const double floor32 = 1e-5 * (scale > 0.0 ? scale : 1.0); /* derivation: file header */
  int bad = 0;
  const int k = dt_index(t->dtype);
  for (int64_t i = 0; i < n; i++) {
    double got = at(t, i), err = fabs(got - ref[i]), tol = floor32, unit = 0.0;
    if (t->dtype == PH_DTYPE_F32) {
      unit = scale > 0.0 ? scale : 1.0;
    } else {
      double u = ulp_of(t->dtype, ref[i]);
      tol = fmax(tol, fmax(u, 2e-3 * fabs(ref[i])));
      if (fabs(ref[i]) >= 1e-2 * scale) unit = u;
    }
    worst_tol[fam][k] = fmax(worst_tol[fam][k], err / tol);
    if (unit > 0.0) worst_err[fam][k] = fmax(worst_err[fam][k], err / unit);
    if (!(err <= tol)) {
      if (bad < 4)
        fprintf(stderr, "  %s: element %lld got %.9g, expected %.9g (err %.3g, tol %.3g)\n", what,
                (long long)i, got, ref[i], err, tol);
      bad++;
    }
  }
  char msg[160];
  snprintf(msg, sizeof msg, "%s: %d of %lld elements out of tolerance", what, bad, (long long)n);
  check_report(bad == 0, __FILE__, __LINE__, msg);
  return bad == 0;
}

static const ph_dtype FLOAT_DTS[3] = {PH_DTYPE_F32, PH_DTYPE_F16, PH_DTYPE_BF16};

/* ================================ norms ====================================================== */

static void sln_case(ph_dtype dt, int rank, const int64_t *xd, int axis, int srank,
                     const int64_t *sd, float eps, int with_inv, uint64_t seed) {
  rng r = rng_seed(seed);
  gattr attrs[2] = {attr_int("axis", axis), attr_float("epsilon", eps)};
  gnode n = op_test_node("SimplifiedLayerNormalization", "", 2, with_inv ? 2 : 1, attrs, 2);
  tensor *in[2] = {mk_rand(dt, rank, xd, &r, -3.0f, 3.0f), mk_rand(dt, srank, sd, &r, -2.0f, 2.0f)};
  tensor *out[2] = {NULL, NULL}, *out3[2] = {NULL, NULL};
  diag d;
  char what[128];
  int ax = axis < 0 ? axis + rank : axis;
  snprintf(what, sizeof what, "SLN %s rank %d axis %d width %lld", ph_dtype_name(dt), rank, ax,
           (long long)xd[rank - 1]);
  CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_OK, d.msg);
  CHECK_STATUS(op_test_run(&n, in, out3, 3, &d), PH_OK, d.msg);
  if (!out[0] || !out3[0]) goto done;
  CHECK(same_bytes(out[0], out3[0]));
  int64_t rows = 1, width = 1;
  for (int k = 0; k < rank; k++) *(k < ax ? &rows : &width) *= xd[k];
  double *ref = calloc((size_t)(rows * width), sizeof(double));
  double *inv_ref = calloc((size_t)rows, sizeof(double));
  for (int64_t row = 0; row < rows; row++) {
    double ss = 0.0;
    for (int64_t c = 0; c < width; c++)
      ss += at(in[0], row * width + c) * at(in[0], row * width + c);
    double inv = 1.0 / sqrt(ss / (double)width + (double)eps);
    inv_ref[row] = inv;
    for (int64_t c = 0; c < width; c++) {
      /* scale index: the column's coordinates in the normalised dims, right-aligned onto scale */
      int64_t rem = c, sidx = 0, sstride = 1;
      for (int k = rank - 1; k >= ax; k--) {
        int64_t coord = rem % xd[k];
        rem /= xd[k];
        int sk = k - (rank - srank);
        if (sk >= 0) {
          sidx += (sd[sk] == 1 ? 0 : coord) * sstride;
          sstride *= sd[sk];
        }
      }
      ref[row * width + c] = at(in[0], row * width + c) * inv * at(in[1], sidx);
    }
  }
  check_close(FAM_NORM, out[0], ref, rows * width, what);
  if (with_inv) {
    CHECK_EQ_INT(out[1]->dtype, PH_DTYPE_F32);
    CHECK_EQ_INT(tensor_numel(out[1]), rows);
    check_close(FAM_NORM, out[1], inv_ref, rows, "SLN inv_std_var");
  }
  free(ref);
  free(inv_ref);
done:
  free_all(in, 2);
  free_all(out, 2);
  free_all(out3, 2);
}

static void test_simplified_layer_norm(void) {
  static const int64_t widths[6] = {1, 3, 17, 64, 65, 130};
  for (int t = 0; t < 3; t++)
    for (int w = 0; w < 6; w++) {
      int64_t xd[2] = {7, widths[w]}, sd[1] = {widths[w]};
      sln_case(FLOAT_DTS[t], 2, xd, -1, 1, sd, 1e-5f, 1, 100 + (uint64_t)(t * 10 + w));
    }
  /* axis over two dims with a full and a broadcast scale; rows of 1 */
  int64_t xd3[3] = {4, 3, 17}, s_full[2] = {3, 17}, s_last[1] = {17}, s_col[2] = {3, 1};
  sln_case(PH_DTYPE_F32, 3, xd3, 1, 2, s_full, 1e-6f, 1, 201);
  sln_case(PH_DTYPE_F32, 3, xd3, -2, 1, s_last, 1e-6f, 0, 202);
  sln_case(PH_DTYPE_F16, 3, xd3, 1, 2, s_col, 1e-6f, 1, 203);
  int64_t x1[3] = {1, 1, 130}, s1[1] = {130};
  sln_case(PH_DTYPE_BF16, 3, x1, -1, 1, s1, 1e-6f, 1, 204);
  /* scale with a different dtype than X (allowed; output keeps X's dtype) */
  {
    rng r = rng_seed(205);
    gattr attrs[1] = {attr_float("epsilon", 1e-6f)};
    gnode n = op_test_node("SimplifiedLayerNormalization", "", 2, 1, attrs, 1);
    int64_t xd[2] = {3, 65}, sd[1] = {65};
    tensor *in[2] = {mk_rand(PH_DTYPE_F16, 2, xd, &r, -1, 1),
                     mk_rand(PH_DTYPE_F32, 1, sd, &r, -1, 1)};
    tensor *out[1] = {NULL};
    diag d;
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_OK, d.msg);
    if (out[0]) CHECK_EQ_INT(out[0]->dtype, PH_DTYPE_F16);
    free_all(in, 2);
    free_all(out, 1);
  }
}

/* SkipSimplifiedLayerNormalization: input [Bt, S, W]; skip_form 0 same shape, 1 [S, W],
 * 2 [1, S, W]; outputs mask: which of outputs 1..3 a graph would wire. */
static void skln_case(ph_dtype dt, int64_t W, int skip_form, int with_bias, unsigned outputs,
                      uint64_t seed) {
  rng r = rng_seed(seed);
  const int64_t Bt = 2, S = 3, rows = Bt * S;
  gattr attrs[1] = {attr_float("epsilon", 1e-6f)};
  int out_ids[4] = {0, (outputs & 1u) ? 1 : -1, (outputs & 2u) ? 2 : -1, (outputs & 4u) ? 3 : -1};
  gnode n = op_test_node("SkipSimplifiedLayerNormalization", "com.microsoft", with_bias ? 4 : 3, 4,
                         attrs, 1);
  n.outputs = out_ids;
  int64_t xd[3] = {Bt, S, W}, s2[2] = {S, W}, s3[3] = {1, S, W}, gd[1] = {W};
  tensor *in[4] = {mk_rand(dt, 3, xd, &r, -2, 2), NULL, mk_rand(dt, 1, gd, &r, -2, 2),
                   with_bias ? mk_rand(dt, 1, gd, &r, -0.5f, 0.5f) : NULL};
  in[1] = skip_form == 0   ? mk_rand(dt, 3, xd, &r, -2, 2)
          : skip_form == 1 ? mk_rand(dt, 2, s2, &r, -2, 2)
                           : mk_rand(dt, 3, s3, &r, -2, 2);
  const int64_t skip_rows = skip_form == 0 ? rows : S;
  tensor *out[4] = {NULL, NULL, NULL, NULL}, *out3[4] = {NULL, NULL, NULL, NULL};
  diag d;
  char what[128];
  snprintf(what, sizeof what, "SkipSLN %s W %lld skip form %d bias %d", ph_dtype_name(dt),
           (long long)W, skip_form, with_bias);
  CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_OK, d.msg);
  CHECK_STATUS(op_test_run(&n, in, out3, 3, &d), PH_OK, d.msg);
  if (!out[0]) goto done;
  for (int i = 0; i < 4; i++) {
    CHECK_EQ_INT(out[i] != NULL, i == 0 || ((outputs >> (i - 1)) & 1u));
    if (out[i]) CHECK(same_bytes(out[i], out3[i]));
  }
  double *y = calloc((size_t)(rows * W), sizeof(double)), *sum = calloc((size_t)(rows * W), 8);
  double *inv = calloc((size_t)rows, sizeof(double)), *zero = calloc((size_t)rows, sizeof(double));
  for (int64_t row = 0; row < rows; row++) {
    double ss = 0.0;
    for (int64_t c = 0; c < W; c++) {
      double v = at(in[0], row * W + c) + at(in[1], (row % skip_rows) * W + c);
      if (with_bias) v += at(in[3], c);
      sum[row * W + c] = v;
      ss += v * v;
    }
    inv[row] = 1.0 / sqrt(ss / (double)W + 1e-6);
    /* output 0 normalises the exact sum (ORT CPU); output 3 is that sum rounded to T */
    for (int64_t c = 0; c < W; c++) y[row * W + c] = sum[row * W + c] * inv[row] * at(in[2], c);
  }
  check_close(FAM_NORM, out[0], y, rows * W, what);
  if (out[1]) check_close(FAM_NORM, out[1], zero, rows, "SkipSLN mean");
  if (out[2]) check_close(FAM_NORM, out[2], inv, rows, "SkipSLN inv_std_var");
  if (out[3]) check_close(FAM_NORM, out[3], sum, rows * W, "SkipSLN input_skip_bias_sum");
  free(y);
  free(sum);
  free(inv);
  free(zero);
done:
  free_all(in, 4);
  free_all(out, 4);
  free_all(out3, 4);
}

static void test_skip_simplified_layer_norm(void) {
  static const int64_t widths[6] = {1, 3, 17, 64, 65, 130};
  for (int t = 0; t < 3; t++)
    for (int w = 0; w < 6; w++)
      skln_case(FLOAT_DTS[t], widths[w], w % 3, (w + t) % 2, 7u, 300 + (uint64_t)(t * 10 + w));
  skln_case(PH_DTYPE_F16, 65, 0, 1, 4u, 331); /* only the sum output wired */
  skln_case(PH_DTYPE_F32, 17, 1, 0, 0u, 332); /* only output 0 */
  skln_case(PH_DTYPE_BF16, 130, 2, 1, 2u, 333);
  /* output 3 of an f16 row is exactly round(input + skip + bias) when that sum is exact in f32 */
  {
    gattr attrs[1] = {attr_float("epsilon", 1e-6f)};
    gnode n = op_test_node("SkipSimplifiedLayerNormalization", "com.microsoft", 4, 4, attrs, 1);
    int64_t xd[2] = {1, 4}, gd[1] = {4};
    tensor *in[4] = {mk(PH_DTYPE_F16, 2, xd), mk(PH_DTYPE_F16, 2, xd), mk(PH_DTYPE_F16, 1, gd),
                     mk(PH_DTYPE_F16, 1, gd)};
    const float xs[4] = {1.0f, 2048.0f, -3.5f, 0.25f}, ss[4] = {0.0009765625f, 1.0f, 1.5f, 0.0f},
                bs[4] = {0.0f, 0.0f, 0.25f, -0.125f};
    for (int i = 0; i < 4; i++) {
      tensor_set_f32(in[0], i, xs[i]);
      tensor_set_f32(in[1], i, ss[i]);
      tensor_set_f32(in[2], i, 1.0f);
      tensor_set_f32(in[3], i, bs[i]);
    }
    tensor *out[4] = {NULL, NULL, NULL, NULL};
    diag d;
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_OK, d.msg);
    if (out[3])
      for (int i = 0; i < 4; i++)
        CHECK_EQ_INT(((uint16_t *)out[3]->data)[i], f32_to_f16(xs[i] + ss[i] + bs[i]));
    free_all(in, 4);
    free_all(out, 4);
  }
}

static void test_norm_errors(void) {
  rng r = rng_seed(400);
  diag d;
  int64_t xd[2] = {3, 8}, sd[1] = {8}, bad[1] = {7}, x4[4] = {1, 2, 3, 8};
  {
    gattr attrs[1] = {attr_int("axis", 2)};
    gnode n = op_test_node("SimplifiedLayerNormalization", "", 2, 1, attrs, 1);
    tensor *in[2] = {mk_rand(PH_DTYPE_F32, 2, xd, &r, -1, 1),
                     mk_rand(PH_DTYPE_F32, 1, sd, &r, -1, 1)};
    tensor *out[1] = {NULL};
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "axis");
    attrs[0] = attr_int("stash_type", 0);
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_UNSUPPORTED, d.msg);
    attrs[0] = attr_float("epsilon", -1.0f);
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    attrs[0] = attr_float("axis", 1.0f); /* wrong attribute type */
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    tensor_free(in[1]);
    in[1] = mk(PH_DTYPE_F32, 1, bad);
    attrs[0] = attr_int("axis", -1);
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_TENSOR_SHAPE, d.msg);
    tensor_free(in[1]);
    in[1] = mk(PH_DTYPE_I32, 1, sd);
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_TENSOR_DTYPE, d.msg);
    free_all(in, 2);
    free_all(out, 1);
  }
  {
    gnode n = op_test_node("SkipSimplifiedLayerNormalization", "com.microsoft", 3, 1, NULL, 0);
    tensor *in[3] = {mk(PH_DTYPE_F32, 2, xd), mk(PH_DTYPE_F32, 2, xd), mk(PH_DTYPE_F32, 1, bad)};
    tensor *out[1] = {NULL};
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_TENSOR_SHAPE, d.msg);
    CHECK_CONTAINS(d.msg, "gamma");
    tensor_free(in[2]);
    in[2] = mk(PH_DTYPE_F32, 1, sd);
    tensor_free(in[1]);
    in[1] = mk(PH_DTYPE_F16, 2, xd);
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_TENSOR_DTYPE, d.msg);
    tensor_free(in[1]);
    in[1] = mk(PH_DTYPE_F32, 4, x4);
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_TENSOR_SHAPE, d.msg);
    tensor_free(in[0]);
    in[0] = mk(PH_DTYPE_F32, 4, x4);
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_TENSOR_SHAPE, d.msg);
    free_all(in, 3);
    free_all(out, 1);
  }
  /* build-time inference keeps unknown dims unknown */
  {
    const op_def *def = op_lookup("", "SimplifiedLayerNormalization");
    gnode n = op_test_node("SimplifiedLayerNormalization", "", 2, 2, NULL, 0);
    tinfo in[2], out[2];
    memset(in, 0, sizeof in);
    memset(out, 0, sizeof out);
    in[0].dtype = PH_DTYPE_BF16;
    in[0].rank = 3;
    in[0].dims[0] = -1;
    in[0].dims[1] = -1;
    in[0].dims[2] = 64;
    in[1].dtype = PH_DTYPE_BF16;
    in[1].rank = 1;
    in[1].dims[0] = 64;
    CHECK_STATUS(def->infer(&n, in, out, &d), PH_OK, d.msg);
    CHECK_EQ_INT(out[0].rank, 3);
    CHECK_EQ_INT(out[0].dims[0], -1);
    CHECK_EQ_INT(out[0].dims[2], 64);
    CHECK_EQ_INT(out[1].dtype, PH_DTYPE_F32);
    CHECK_EQ_INT(out[1].dims[1], -1);
    CHECK_EQ_INT(out[1].dims[2], 1);
  }
}

/* ================================ rotary ===================================================== */

/* Reference rotation of one head vector from the spec text. */
static void ref_rotate(const double *x, const double *c, const double *s, int64_t rot,
                       int interleaved, double *y) {
  int64_t h = rot / 2;
  for (int64_t i = 0; i < h; i++) {
    int64_t a = interleaved ? 2 * i : i, b = interleaved ? 2 * i + 1 : i + h;
    y[a] = x[a] * c[i] - x[b] * s[i];
    y[b] = x[b] * c[i] + x[a] * s[i];
  }
}

/* Fills caches [max_pos, half] with real RoPE angles (base 1e4). */
static void fill_rope_cache(tensor *cs, tensor *sn, int64_t max_pos, int64_t half) {
  for (int64_t p = 0; p < max_pos; p++)
    for (int64_t i = 0; i < half; i++) {
      double ang = (double)p * pow(10000.0, -2.0 * (double)i / (double)(2 * half));
      tensor_set_f32(cs, p * half + i, (float)cos(ang));
      tensor_set_f32(sn, p * half + i, (float)sin(ang));
    }
}

/* Which row (0 T, 1 H, 2 W) slot j reads, written from model-math §3 step 5 and abi.md §6. */
static int ref_mrope_row(int layout, const int64_t *sec, int64_t j) {
  if (layout == 0) return j < sec[0] ? 0 : j < sec[0] + sec[1] ? 1 : 2;
  if (j % 3 == 1 && j < 3 * sec[1]) return 1;
  if (j % 3 == 2 && j < 3 * sec[2]) return 2;
  return 0;
}

typedef struct rope_case {
  ph_dtype dt;
  int64_t B, S, N, H, rot;
  int transposed, interleaved;
  int pos_form;   /* 0 [B,S], 1 [1] offset, 2 scalar offset; MRoPE: [3,B,S] */
  int give_heads; /* num_heads attribute given */
  int mrope, layout;
  int64_t sec[3];
} rope_case;

static void rope_case_run(const rope_case *c, uint64_t seed) {
  rng r = rng_seed(seed);
  const int64_t half = c->rot / 2, max_pos = 50;
  gattr attrs[6];
  int na = 0;
  attrs[na++] = attr_int("interleaved", c->interleaved);
  if (c->give_heads) attrs[na++] = attr_int("num_heads", c->N);
  if (c->rot != c->H) attrs[na++] = attr_int("rotary_embedding_dim", c->rot);
  if (c->mrope) {
    attrs[na++] = attr_ints("mrope_section", c->sec, 3);
    attrs[na++] = attr_int("mrope_layout", c->layout);
  }
  gnode n = op_test_node(c->mrope ? "MRotaryEmbedding" : "RotaryEmbedding", "com.microsoft", 4, 1,
                         attrs, na);
  int64_t xd3[3] = {c->B, c->S, c->N * c->H}, xd4[4] = {c->B, c->N, c->S, c->H};
  int64_t cd[2] = {max_pos, half};
  int64_t pd2[2] = {c->B, c->S}, pd1[1] = {1}, pd3[3] = {3, c->B, c->S};
  tensor *in[4] = {c->transposed ? mk_rand(c->dt, 4, xd4, &r, -2, 2)
                                 : mk_rand(c->dt, 3, xd3, &r, -2, 2),
                   NULL, mk(c->dt, 2, cd), mk(c->dt, 2, cd)};
  fill_rope_cache(in[2], in[3], max_pos, half);
  if (c->mrope)
    in[1] = mk(PH_DTYPE_I64, 3, pd3);
  else if (c->pos_form == 0)
    in[1] = mk(PH_DTYPE_I64, 2, pd2);
  else
    in[1] = mk(PH_DTYPE_I64, c->pos_form == 1 ? 1 : 0, pd1);
  int64_t *pos = in[1]->data;
  const int64_t n_pos = tensor_numel(in[1]);
  for (int64_t i = 0; i < n_pos; i++)
    pos[i] = n_pos == 1 ? 7 : (int64_t)rng_below(&r, (uint64_t)max_pos);
  tensor *out[1] = {NULL}, *out3[1] = {NULL};
  diag d;
  char what[160];
  snprintf(what, sizeof what, "%s %s B%lld S%lld N%lld H%lld rot%lld %s il%d pos%d layout%d",
           c->mrope ? "MRoPE" : "RoPE", ph_dtype_name(c->dt), (long long)c->B, (long long)c->S,
           (long long)c->N, (long long)c->H, (long long)c->rot, c->transposed ? "BNSH" : "BSD",
           c->interleaved, c->pos_form, c->layout);
  CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_OK, d.msg);
  CHECK_STATUS(op_test_run(&n, in, out3, 3, &d), PH_OK, d.msg);
  if (!out[0] || !out3[0]) goto done;
  CHECK(same_bytes(out[0], out3[0]));
  const int64_t numel = tensor_numel(in[0]);
  double *ref = calloc((size_t)numel, sizeof(double));
  double x[256], y[256], cc[128], ss[128];
  int passthrough_exact = 1;
  const size_t es = dtype_size(c->dt);
  for (int64_t b = 0; b < c->B; b++)
    for (int64_t s = 0; s < c->S; s++) {
      for (int64_t i = 0; i < half; i++) {
        int64_t p;
        if (c->mrope)
          p = pos[(ref_mrope_row(c->layout, c->sec, i) * c->B + b) * c->S + s];
        else
          p = n_pos == 1 ? pos[0] + s : pos[b * c->S + s];
        cc[i] = at(in[2], p * half + i);
        ss[i] = at(in[3], p * half + i);
      }
      for (int64_t h = 0; h < c->N; h++) {
        int64_t off =
            c->transposed ? ((b * c->N + h) * c->S + s) * c->H : ((b * c->S + s) * c->N + h) * c->H;
        for (int64_t e = 0; e < c->H; e++) x[e] = at(in[0], off + e);
        ref_rotate(x, cc, ss, c->rot, c->interleaved, y);
        for (int64_t e = 0; e < c->H; e++) ref[off + e] = e < c->rot ? y[e] : x[e];
        if (c->H > c->rot && memcmp((char *)out[0]->data + (size_t)(off + c->rot) * es,
                                    (char *)in[0]->data + (size_t)(off + c->rot) * es,
                                    (size_t)(c->H - c->rot) * es) != 0)
          passthrough_exact = 0;
      }
    }
  check_close(FAM_ROPE, out[0], ref, numel, what);
  CHECK(passthrough_exact);
  free(ref);
done:
  free_all(in, 4);
  free_all(out, 1);
  free_all(out3, 1);
}

static void test_rotary_embedding(void) {
  uint64_t seed = 500;
  for (int t = 0; t < 3; t++)
    for (int il = 0; il < 2; il++) {
      /* partial rot 8 of 32 on [B,S,N*H] with num_heads */
      rope_case c = {FLOAT_DTS[t], 2, 5, 3, 32, 8, 0, il, 0, 1, 0, 0, {0, 0, 0}};
      rope_case_run(&c, seed++);
      /* BNSH, whole head, position offset [1] */
      rope_case c4 = {FLOAT_DTS[t], 2, 4, 2, 24, 24, 1, il, 1, 0, 0, 0, {0, 0, 0}};
      rope_case_run(&c4, seed++);
      /* BSD without num_heads: head size from the cache width; scalar offset */
      rope_case c3 = {FLOAT_DTS[t], 1, 3, 4, 16, 16, 0, il, 2, 0, 0, 0, {0, 0, 0}};
      rope_case_run(&c3, seed++);
      /* BNSH partial with num_heads and odd sizes, S = 1 */
      rope_case c5 = {FLOAT_DTS[t], 3, 1, 5, 40, 8, 1, il, 0, 1, 0, 0, {0, 0, 0}};
      rope_case_run(&c5, seed++);
    }
}

static void test_mrotary_embedding(void) {
  uint64_t seed = 600;
  for (int t = 0; t < 3; t++)
    for (int il = 0; il < 2; il++) {
      /* Qwen3.5: rot 64 of head 80 (partial), interleaved layout [11, 11, 10] */
      rope_case c = {FLOAT_DTS[t], 2, 6, 2, 80, 64, 0, il, 0, 1, 1, 1, {11, 11, 10}};
      rope_case_run(&c, seed++);
      /* Qwen2-VL sectioned layout, BNSH */
      rope_case c2 = {FLOAT_DTS[t], 1, 5, 3, 64, 64, 1, il, 0, 1, 1, 0, {16, 8, 8}};
      rope_case_run(&c2, seed++);
      /* an uneven interleaved split where H runs out before W ([12, 2, 2]) */
      rope_case c3 = {FLOAT_DTS[t], 1, 3, 1, 32, 32, 0, il, 0, 1, 1, 1, {12, 2, 2}};
      rope_case_run(&c3, seed++);
    }
}

/* The slot map itself: cos[p][j] = p and sin = 0, x = 1, rows T=1, H=2, W=3: output channel j
 * (and j + rot/2) is the row whose position slot j read. */
static void mrope_slot_map_case(int layout, const int *expect) {
  const int64_t sec[3] = {11, 11, 10}, rot = 64, half = 32, H = 64, max_pos = 4;
  gattr attrs[4] = {attr_int("num_heads", 1), attr_int("rotary_embedding_dim", rot),
                    attr_ints("mrope_section", sec, 3), attr_int("mrope_layout", layout)};
  gnode n = op_test_node("MRotaryEmbedding", "com.microsoft", 4, 1, attrs, 4);
  int64_t xd[3] = {1, 2, H}, cd[2] = {max_pos, half}, pd[3] = {3, 1, 2};
  tensor *in[4] = {mk(PH_DTYPE_F32, 3, xd), mk(PH_DTYPE_I64, 3, pd), mk(PH_DTYPE_F32, 2, cd),
                   mk(PH_DTYPE_F32, 2, cd)};
  for (int64_t i = 0; i < tensor_numel(in[0]); i++) tensor_set_f32(in[0], i, 1.0f);
  for (int64_t p = 0; p < max_pos; p++)
    for (int64_t j = 0; j < half; j++) tensor_set_f32(in[2], p * half + j, (float)p);
  int64_t *pos = in[1]->data;
  for (int row = 0; row < 3; row++)
    for (int s = 0; s < 2; s++) pos[row * 2 + s] = row + 1;
  tensor *out[1] = {NULL};
  diag d;
  CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_OK, d.msg);
  if (out[0])
    for (int s = 0; s < 2; s++)
      for (int64_t j = 0; j < half; j++) {
        int got = (int)tensor_get_f32(out[0], s * H + j);
        int got2 = (int)tensor_get_f32(out[0], s * H + j + half);
        if (got != expect[j] || got2 != expect[j])
          fprintf(stderr, "  layout %d slot %lld: row %d/%d, expected %d\n", layout, (long long)j,
                  got, got2, expect[j]);
        CHECK(got == expect[j] && got2 == expect[j]);
      }
  free_all(in, 4);
  free_all(out, 1);
}

static void test_mrope_slot_map(void) {
  int expect[32];
  /* model-math §7 item 5: T slots 0,3,...,30; H slots 1,4,...,31; W slots 2,5,...,29 */
  for (int j = 0; j < 32; j++) expect[j] = 1;
  for (int j = 1; j <= 31; j += 3) expect[j] = 2;
  for (int j = 2; j <= 29; j += 3) expect[j] = 3;
  mrope_slot_map_case(1, expect);
  /* sectioned: 0..10 T, 11..21 H, 22..31 W */
  for (int j = 0; j < 32; j++) expect[j] = j < 11 ? 1 : j < 22 ? 2 : 3;
  mrope_slot_map_case(0, expect);
}

/* MRoPE with three equal rows is plain RoPE, bit for bit, in both layouts. */
static void test_mrope_equal_rows(void) {
  rng r = rng_seed(700);
  for (int layout = 0; layout < 2; layout++)
    for (int t = 0; t < 3; t++) {
      const int64_t sec[3] = {11, 11, 10}, B = 2, S = 9, N = 2, H = 96, max_pos = 40;
      gattr am[5] = {attr_int("num_heads", N), attr_int("rotary_embedding_dim", 64),
                     attr_ints("mrope_section", sec, 3), attr_int("mrope_layout", layout),
                     attr_int("interleaved", 0)};
      gnode nm = op_test_node("MRotaryEmbedding", "com.microsoft", 4, 1, am, 5);
      gnode nr = op_test_node("RotaryEmbedding", "com.microsoft", 4, 1, am, 2);
      int64_t xd[3] = {B, S, N * H}, cd[2] = {max_pos, 32}, p3[3] = {3, B, S}, p2[2] = {B, S};
      tensor *x = mk_rand(FLOAT_DTS[t], 3, xd, &r, -2, 2);
      tensor *cs = mk(FLOAT_DTS[t], 2, cd), *sn = mk(FLOAT_DTS[t], 2, cd);
      fill_rope_cache(cs, sn, max_pos, 32);
      tensor *pm = mk(PH_DTYPE_I64, 3, p3), *pr = mk(PH_DTYPE_I64, 2, p2);
      for (int64_t i = 0; i < B * S; i++) {
        int64_t p = (int64_t)rng_below(&r, (uint64_t)max_pos);
        ((int64_t *)pr->data)[i] = p;
        for (int row = 0; row < 3; row++) ((int64_t *)pm->data)[row * B * S + i] = p;
      }
      tensor *inm[4] = {x, pm, cs, sn}, *inr[4] = {x, pr, cs, sn};
      tensor *om[1] = {NULL}, *orr[1] = {NULL};
      diag d;
      CHECK_STATUS(op_test_run(&nm, inm, om, 2, &d), PH_OK, d.msg);
      CHECK_STATUS(op_test_run(&nr, inr, orr, 1, &d), PH_OK, d.msg);
      CHECK(same_bytes(om[0], orr[0]));
      tensor_free(x);
      tensor_free(cs);
      tensor_free(sn);
      tensor_free(pm);
      tensor_free(pr);
      free_all(om, 1);
      free_all(orr, 1);
    }
}

static void test_rotary_errors(void) {
  diag d;
  const int64_t sec_bad[3] = {11, 11, 11}, sec_ok[3] = {2, 1, 1};
  int64_t xd[3] = {1, 2, 32}, cd[2] = {8, 4}, pd2[2] = {1, 2}, pd3[3] = {3, 1, 2}, x2[2] = {2, 32};
  tensor *x = mk(PH_DTYPE_F32, 3, xd), *cs = mk(PH_DTYPE_F32, 2, cd), *sn = mk(PH_DTYPE_F32, 2, cd);
  tensor *p2 = mk(PH_DTYPE_I64, 2, pd2), *p3 = mk(PH_DTYPE_I64, 3, pd3);
  tensor *out[1] = {NULL};
  {
    gattr a[4] = {attr_int("num_heads", 4), attr_int("rotary_embedding_dim", 8),
                  attr_ints("mrope_section", sec_bad, 3), attr_int("mrope_layout", 1)};
    gnode n = op_test_node("MRotaryEmbedding", "com.microsoft", 4, 1, a, 4);
    tensor *in[4] = {x, p3, cs, sn};
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "mrope_section");
    a[2] = attr_ints("mrope_section", sec_ok, 2);
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    n.n_attrs = 2; /* no mrope_section at all */
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "mrope_section");
    n.n_attrs = 4;
    a[2] = attr_ints("mrope_section", sec_ok, 3);
    a[3] = attr_int("mrope_layout", 2);
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    a[3] = attr_int("mrope_layout", 1);
    in[1] = p2; /* RotaryEmbedding-style positions */
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_TENSOR_SHAPE, d.msg);
    in[1] = p3;
    ((int64_t *)p3->data)[5] = 8; /* == max_pos: out of range, found at run time */
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "position_ids");
    ((int64_t *)p3->data)[5] = 0;
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_OK, d.msg);
    tensor_free(out[0]);
    out[0] = NULL;
  }
  {
    gattr a[3] = {attr_int("num_heads", 4), attr_int("rotary_embedding_dim", 8),
                  attr_int("interleaved", 0)};
    gnode n = op_test_node("RotaryEmbedding", "com.microsoft", 4, 1, a, 3);
    tensor *x2t = mk(PH_DTYPE_F32, 2, x2), *pi32 = mk(PH_DTYPE_I32, 2, pd2);
    tensor *in[4] = {x2t, p2, cs, sn};
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_TENSOR_SHAPE, d.msg); /* rank 2 */
    in[0] = x;
    in[1] = pi32;
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_TENSOR_DTYPE, d.msg);
    in[1] = p2;
    /* is_packed_batching=1: one packed batch [1, N, ...] is the unpacked op's result exactly;
     * a batch of 2 is not implemented; other values are invalid */
    rng r = rng_seed(7);
    tensor_fill_uniform(x, &r, -1.0f, 1.0f);
    tensor_fill_uniform(cs, &r, -1.0f, 1.0f);
    tensor_fill_uniform(sn, &r, -1.0f, 1.0f);
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_OK, d.msg);
    tensor *plain = out[0];
    out[0] = NULL;
    a[2] = attr_int("is_packed_batching", 1);
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_OK, d.msg);
    CHECK(plain && out[0] &&
          memcmp(plain->data, out[0]->data, (size_t)tensor_numel(plain) * sizeof(float)) == 0);
    tensor_free(plain);
    tensor_free(out[0]);
    out[0] = NULL;
    {
      int64_t xb[3] = {2, 1, 32}, pb[2] = {2, 1};
      tensor *x2b = mk(PH_DTYPE_F32, 3, xb), *p2b = mk(PH_DTYPE_I64, 2, pb);
      tensor *inb[4] = {x2b, p2b, cs, sn};
      CHECK_STATUS(op_test_run(&n, inb, out, 1, &d), PH_ERR_UNSUPPORTED, d.msg);
      CHECK_CONTAINS(d.msg, "is_packed_batching");
      tensor_free(x2b);
      tensor_free(p2b);
    }
    a[2] = attr_int("is_packed_batching", 2);
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    a[2] = attr_float("scale", 2.0f);
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_UNSUPPORTED, d.msg);
    a[2] = attr_int("interleaved", 0);
    a[0] = attr_int("num_heads", 2);
    a[1] = attr_int("rotary_embedding_dim", 16); /* H = 16, but the cache has 4 columns, not 8 */
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_TENSOR_SHAPE, d.msg);
    a[0] = attr_int("num_heads", 4);
    a[1] = attr_int("rotary_embedding_dim", 10); /* exceeds head size 8 */
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    a[0] = attr_int("num_heads", 0);
    a[1] = attr_int("rotary_embedding_dim", 8); /* needs num_heads */
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    a[0] = attr_int("num_heads", 4);
    ((int64_t *)p2->data)[1] = -1;
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    tensor_free(x2t);
    tensor_free(pi32);
  }
  {
    /* the offset form running past the cache: 7 + 2 positions > 8 rows */
    gattr a[1] = {attr_int("num_heads", 4)};
    gnode n = op_test_node("RotaryEmbedding", "com.microsoft", 4, 1, a, 1);
    int64_t one[1] = {1}, c8[2] = {8, 4};
    tensor *po = mk(PH_DTYPE_I64, 1, one), *cs8 = mk(PH_DTYPE_F32, 2, c8),
           *sn8 = mk(PH_DTYPE_F32, 2, c8);
    ((int64_t *)po->data)[0] = 7;
    tensor *in[4] = {x, po, cs8, sn8};
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    ((int64_t *)po->data)[0] = 6;
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_OK, d.msg);
    tensor_free(out[0]);
    out[0] = NULL;
    tensor_free(po);
    tensor_free(cs8);
    tensor_free(sn8);
  }
  {
    /* build-time inference with unknown batch and sequence */
    const op_def *def = op_lookup("com.microsoft", "RotaryEmbedding");
    gattr a[2] = {attr_int("num_heads", 4), attr_int("rotary_embedding_dim", 4)};
    gnode n = op_test_node("RotaryEmbedding", "com.microsoft", 4, 1, a, 2);
    tinfo in[4], o[1];
    memset(in, 0, sizeof in);
    in[0] = (tinfo){PH_DTYPE_F16, 3, {-1, -1, 32}, NULL};
    in[1] = (tinfo){PH_DTYPE_I64, 2, {-1, -1}, NULL};
    in[2] = (tinfo){PH_DTYPE_F16, 2, {-1, 2}, NULL};
    in[3] = in[2];
    CHECK_STATUS(def->infer(&n, in, o, &d), PH_OK, d.msg);
    CHECK_EQ_INT(o[0].rank, 3);
    CHECK_EQ_INT(o[0].dims[0], -1);
    CHECK_EQ_INT(o[0].dims[1], -1);
    CHECK_EQ_INT(o[0].dims[2], 32);
    in[1] = (tinfo){PH_DTYPE_I64, 1, {-1}, NULL}; /* offset form, length known at run time */
    CHECK_STATUS(def->infer(&n, in, o, &d), PH_OK, d.msg);
    in[2].dims[1] = 3; /* rot/2 must be 2 */
    in[3] = in[2];
    CHECK_STATUS(def->infer(&n, in, o, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  }
  tensor_free(x);
  tensor_free(cs);
  tensor_free(sn);
  tensor_free(p2);
  tensor_free(p3);
}

/* ================================ GroupQueryAttention ======================================== */

typedef struct gqa_case {
  ph_dtype dt;
  int64_t B, S, P, Hq, Hkv, D;
  int64_t L[4]; /* total valid length per row; 0 = P + S */
  int packed;
  float scale; /* attribute; 0 = default */
  float softcap;
  int64_t window; /* -1 off */
  int no_past;    /* past_key/past_value absent (P must be 0) */
  int sink;
  int rotary, interleaved, pos_ids;
  int64_t rot; /* rotary channels (2 x cache columns) */
} gqa_case;

typedef struct gqa_io {
  tensor *in[12];
  tensor *out[3];
  gattr attrs[8];
  int n_attrs;
  gnode node;
} gqa_io;

static void gqa_build(const gqa_case *c, gqa_io *io, uint64_t seed) {
  rng r = rng_seed(seed);
  memset(io, 0, sizeof *io);
  const int64_t heads = c->packed ? c->Hq + 2 * c->Hkv : c->Hq, max_pos = c->P + c->S + 9;
  int64_t qd[3] = {c->B, c->S, heads * c->D}, kd[3] = {c->B, c->S, c->Hkv * c->D};
  int64_t pd[4] = {c->B, c->Hkv, c->P, c->D}, bd[1] = {c->B}, cd[2] = {max_pos, c->rot / 2};
  int64_t posd[2] = {c->B, c->S}, sd[1] = {c->Hq};
  io->in[0] = mk_rand(c->dt, 3, qd, &r, -1.5f, 1.5f);
  if (!c->packed) {
    io->in[1] = mk_rand(c->dt, 3, kd, &r, -1.5f, 1.5f);
    io->in[2] = mk_rand(c->dt, 3, kd, &r, -1.0f, 1.0f);
  }
  /* past rows past P_b hold garbage the op must ignore */
  if (!c->no_past) {
    io->in[3] = mk_rand(c->dt, 4, pd, &r, -1.5f, 1.5f);
    io->in[4] = mk_rand(c->dt, 4, pd, &r, -1.0f, 1.0f);
  }
  io->in[5] = mk(PH_DTYPE_I32, 1, bd);
  io->in[6] = mk(PH_DTYPE_I32, 0, NULL);
  for (int64_t b = 0; b < c->B; b++) {
    int64_t L = c->L[b] ? c->L[b] : c->P + c->S;
    ((int32_t *)io->in[5]->data)[b] = (int32_t)(L - 1);
  }
  ((int32_t *)io->in[6]->data)[0] = (int32_t)(c->P + c->S);
  int n_in = 7;
  if (c->rotary) {
    io->in[7] = mk(c->dt, 2, cd);
    io->in[8] = mk(c->dt, 2, cd);
    fill_rope_cache(io->in[7], io->in[8], max_pos, c->rot / 2);
    n_in = 9;
    if (c->pos_ids) {
      io->in[9] = mk(PH_DTYPE_I64, 2, posd);
      for (int64_t i = 0; i < c->B * c->S; i++)
        ((int64_t *)io->in[9]->data)[i] = (int64_t)rng_below(&r, (uint64_t)max_pos);
      n_in = 10;
    }
  }
  if (c->sink) {
    io->in[11] = mk_rand(c->dt, 1, sd, &r, -1.0f, 3.0f);
    n_in = 12;
  }
  io->attrs[io->n_attrs++] = attr_int("num_heads", c->Hq);
  io->attrs[io->n_attrs++] = attr_int("kv_num_heads", c->Hkv);
  if (c->scale != 0.0f) io->attrs[io->n_attrs++] = attr_float("scale", c->scale);
  if (c->softcap != 0.0f) io->attrs[io->n_attrs++] = attr_float("softcap", c->softcap);
  if (c->window > 0) io->attrs[io->n_attrs++] = attr_int("local_window_size", c->window);
  if (c->rotary) {
    io->attrs[io->n_attrs++] = attr_int("do_rotary", 1);
    io->attrs[io->n_attrs++] = attr_int("rotary_interleaved", c->interleaved);
  }
  io->node = op_test_node("GroupQueryAttention", "com.microsoft", n_in, 3, io->attrs, io->n_attrs);
}

/* Caller-owned outputs full of garbage, so every element the op must write is checked. */
static void gqa_garbage_outputs(const gqa_case *c, gqa_io *io) {
  const int64_t heads = c->Hq * c->D;
  int64_t od[3] = {c->B, c->S, heads}, pd[4] = {c->B, c->Hkv, c->P + c->S, c->D};
  for (int i = 0; i < 3; i++) {
    io->out[i] = i == 0 ? mk(c->dt, 3, od) : mk(c->dt, 4, pd);
    memset(io->out[i]->data, 0x5a, (size_t)tensor_numel(io->out[i]) * dtype_size(c->dt));
  }
}

static void gqa_free(gqa_io *io) {
  free_all(io->in, 12);
  free_all(io->out, 3);
}

/* The float64 reference, written from the semantics in the op header / docs: present is the valid
 * past, then the new (rotated, T-rounded) keys and values, then zeros; query s of row b sits at
 * p = P_b + s and sees keys max(0, p-W+1)..p of kv head h / (Hq/Hkv). */
static void gqa_reference(const gqa_case *c, tensor *const *in, double *out, double *pk,
                          double *pv) {
  const int64_t B = c->B, S = c->S, D = c->D, Hq = c->Hq, Hkv = c->Hkv, P = c->P, T = P + S;
  const int64_t qrow = (c->packed ? Hq + 2 * Hkv : Hq) * D, half = c->rot / 2;
  const double scale = c->scale != 0.0f ? (double)c->scale : 1.0 / sqrt((double)D);
  double q[256], x[256], cc[128], ss[128];
  double *sc = calloc((size_t)T, sizeof(double));
  for (int64_t b = 0; b < B; b++) {
    const int64_t L = (int64_t)((const int32_t *)in[5]->data)[b] + 1, Pb = L - S;
    for (int64_t g = 0; g < Hkv; g++)
      for (int64_t t = 0; t < T; t++) {
        double *kr = pk + ((b * Hkv + g) * T + t) * D, *vr = pv + ((b * Hkv + g) * T + t) * D;
        for (int64_t e = 0; e < D; e++) kr[e] = vr[e] = 0.0;
        if (t < Pb) {
          for (int64_t e = 0; e < D; e++) {
            kr[e] = at(in[3], ((b * Hkv + g) * P + t) * D + e);
            vr[e] = at(in[4], ((b * Hkv + g) * P + t) * D + e);
          }
        } else if (t < L) {
          const int64_t s = t - Pb;
          for (int64_t e = 0; e < D; e++) {
            x[e] = c->packed ? at(in[0], (b * S + s) * qrow + (Hq + g) * D + e)
                             : at(in[1], (b * S + s) * Hkv * D + g * D + e);
            vr[e] = c->packed ? at(in[0], (b * S + s) * qrow + (Hq + Hkv + g) * D + e)
                              : at(in[2], (b * S + s) * Hkv * D + g * D + e);
          }
          if (c->rotary) {
            int64_t p = c->pos_ids ? ((const int64_t *)in[9]->data)[b * S + s] : Pb + s;
            for (int64_t i = 0; i < half; i++) {
              cc[i] = at(in[7], p * half + i);
              ss[i] = at(in[8], p * half + i);
            }
            double y[256];
            ref_rotate(x, cc, ss, c->rot, c->interleaved, y);
            for (int64_t e = 0; e < c->rot; e++) x[e] = round_to(c->dt, y[e]);
          }
          for (int64_t e = 0; e < D; e++) kr[e] = x[e];
        }
      }
    for (int64_t h = 0; h < Hq; h++) {
      const int64_t g = h / (Hq / Hkv);
      for (int64_t s = 0; s < S; s++) {
        const int64_t p = Pb + s;
        for (int64_t e = 0; e < D; e++) q[e] = at(in[0], (b * S + s) * qrow + h * D + e);
        if (c->rotary) {
          int64_t pp = c->pos_ids ? ((const int64_t *)in[9]->data)[b * S + s] : p;
          for (int64_t i = 0; i < half; i++) {
            cc[i] = at(in[7], pp * half + i);
            ss[i] = at(in[8], pp * half + i);
          }
          double y[256];
          ref_rotate(q, cc, ss, c->rot, c->interleaved, y);
          for (int64_t e = 0; e < c->rot; e++) q[e] = y[e];
        }
        const int64_t lo = c->window > 0 ? (p - c->window + 1 > 0 ? p - c->window + 1 : 0) : 0;
        double m = -INFINITY;
        for (int64_t t = lo; t <= p; t++) {
          const double *kr = pk + ((b * Hkv + g) * T + t) * D;
          double dot = 0.0;
          for (int64_t e = 0; e < D; e++) dot += q[e] * kr[e];
          dot *= scale;
          if (c->softcap > 0.0f) dot = c->softcap * tanh(dot / c->softcap);
          sc[t] = dot;
          m = fmax(m, dot);
        }
        const double sink = c->sink ? at(in[11], h) : -INFINITY;
        m = fmax(m, sink);
        double den = c->sink ? exp(sink - m) : 0.0;
        double o[256];
        for (int64_t e = 0; e < D; e++) o[e] = 0.0;
        for (int64_t t = lo; t <= p; t++) {
          const double w = exp(sc[t] - m), *vr = pv + ((b * Hkv + g) * T + t) * D;
          den += w;
          for (int64_t e = 0; e < D; e++) o[e] += w * vr[e];
        }
        for (int64_t e = 0; e < D; e++) out[(b * S + s) * Hq * D + h * D + e] = o[e] / den;
      }
    }
  }
  free(sc);
}

static void gqa_name(const gqa_case *c, char *buf, size_t n) {
  snprintf(buf, n,
           "GQA %s B%lld S%lld P%lld Hq%lld Hkv%lld D%lld packed%d softcap%g window%lld sink%d "
           "rot%d/%lld il%d pos%d",
           ph_dtype_name(c->dt), (long long)c->B, (long long)c->S, (long long)c->P,
           (long long)c->Hq, (long long)c->Hkv, (long long)c->D, c->packed, (double)c->softcap,
           (long long)c->window, c->sink, c->rotary, (long long)c->rot, c->interleaved, c->pos_ids);
}

static void gqa_case_run(const gqa_case *c, uint64_t seed) {
  gqa_io io, io3;
  gqa_build(c, &io, seed);
  gqa_build(c, &io3, seed);
  gqa_garbage_outputs(c, &io);
  gqa_garbage_outputs(c, &io3);
  char what[256], w2[300];
  gqa_name(c, what, sizeof what);
  diag d;
  CHECK_STATUS(op_test_run(&io.node, io.in, io.out, 1, &d), PH_OK, d.msg);
  CHECK_STATUS(op_test_run(&io3.node, io3.in, io3.out, 3, &d), PH_OK, d.msg);
  if (!io.out[0] || !io3.out[0]) {
    fprintf(stderr, "  case: %s\n", what);
    goto done;
  }
  for (int i = 0; i < 3; i++) CHECK(same_bytes(io.out[i], io3.out[i]));
  const int64_t T = c->P + c->S, n_out = c->B * c->S * c->Hq * c->D;
  const int64_t n_pres = c->B * c->Hkv * T * c->D;
  CHECK_EQ_INT(io.out[1]->dims[2], T);
  double *ro = calloc((size_t)n_out, sizeof(double)), *rk = calloc((size_t)n_pres, 8),
         *rv = calloc((size_t)n_pres, 8);
  gqa_reference(c, io.in, ro, rk, rv);
  snprintf(w2, sizeof w2, "%s output", what);
  check_close(FAM_GQA, io.out[0], ro, n_out, w2);
  snprintf(w2, sizeof w2, "%s present_key", what);
  check_close(FAM_GQA, io.out[1], rk, n_pres, w2);
  snprintf(w2, sizeof w2, "%s present_value", what);
  check_close(FAM_GQA, io.out[2], rv, n_pres, w2);
  /* valid past rows are copied bit-exactly and rows from L_b on are exactly zero */
  const size_t es = dtype_size(c->dt);
  int exact = 1;
  for (int64_t b = 0; b < c->B; b++) {
    const int64_t L = (int64_t)((int32_t *)io.in[5]->data)[b] + 1, Pb = L - c->S;
    for (int64_t g = 0; g < c->Hkv; g++)
      for (int k = 1; k <= 2; k++) {
        const char *pres =
            (const char *)io.out[k]->data + (size_t)((b * c->Hkv + g) * T) * c->D * es;
        if (Pb > 0) {
          const char *past =
              (const char *)io.in[2 + k]->data + (size_t)((b * c->Hkv + g) * c->P) * c->D * es;
          if (memcmp(pres, past, (size_t)(Pb * c->D) * es) != 0) exact = 0;
        }
        for (size_t z = (size_t)(L * c->D) * es; z < (size_t)(T * c->D) * es; z++)
          if (pres[z] != 0) exact = 0;
      }
  }
  snprintf(w2, sizeof w2, "%s: past prefix copied and tail zeroed exactly", what);
  check_report(exact, __FILE__, __LINE__, w2);
  free(ro);
  free(rk);
  free(rv);
done:
  gqa_free(&io);
  gqa_free(&io3);
}

/* S x P x head ratio x batch, head dims cycling through 8, 24, 32 */
static void test_gqa_grid(void) {
  static const int64_t Ss[6] = {1, 4, 63, 64, 65, 130}, Ps[2] = {0, 37}, Ds[3] = {8, 24, 32};
  static const int64_t ratios[3][2] = {{2, 2}, {4, 2}, {6, 2}};
  uint64_t seed = 1000;
  int k = 0;
  for (int si = 0; si < 6; si++)
    for (int pi = 0; pi < 2; pi++)
      for (int ri = 0; ri < 3; ri++)
        for (int bi = 0; bi < 2; bi++, k++) {
          gqa_case c;
          memset(&c, 0, sizeof c);
          c.dt = PH_DTYPE_F32;
          c.S = Ss[si];
          c.P = Ps[pi];
          c.Hq = ratios[ri][0];
          c.Hkv = ratios[ri][1];
          c.D = Ds[k % 3];
          c.window = -1;
          c.B = bi ? 3 : 1;
          if (c.B == 3) { /* unequal lengths: full, about half the past, no past */
            c.L[0] = c.P + c.S;
            c.L[1] = c.S + c.P / 2;
            c.L[2] = c.S;
          } else if (c.P > 0) {
            c.L[0] = c.P + c.S - 5; /* a zero tail in present */
          }
          gqa_case_run(&c, seed++);
        }
}

static void test_gqa_dtypes(void) {
  static const int64_t Ss[3] = {1, 4, 65};
  uint64_t seed = 2000;
  for (int t = 1; t < 3; t++)
    for (int si = 0; si < 3; si++)
      for (int pi = 0; pi < 2; pi++) {
        gqa_case c;
        memset(&c, 0, sizeof c);
        c.dt = FLOAT_DTS[t];
        c.B = 3;
        c.S = Ss[si];
        c.P = pi ? 21 : 0;
        c.Hq = 6;
        c.Hkv = 2;
        c.D = 24;
        c.window = -1;
        c.L[0] = c.P + c.S;
        c.L[1] = c.S + c.P / 3;
        c.L[2] = c.S;
        gqa_case_run(&c, seed++);
      }
}

static void test_gqa_features(void) {
  uint64_t seed = 3000;
  for (int t = 0; t < 3; t++) {
    gqa_case base;
    memset(&base, 0, sizeof base);
    base.dt = FLOAT_DTS[t];
    base.B = 3;
    base.S = 9;
    base.P = 13;
    base.Hq = 6;
    base.Hkv = 2;
    base.D = 24;
    base.window = -1;
    base.L[0] = 22;
    base.L[1] = 15;
    base.L[2] = 9;
    gqa_case c = base;
    c.softcap = 1.5f;
    c.scale = 0.9f; /* large scores, so the cap bites */
    gqa_case_run(&c, seed++);
    static const int64_t windows[4] = {1, 2, 7, 1000};
    for (int w = 0; w < 4; w++) {
      c = base;
      c.window = windows[w];
      gqa_case_run(&c, seed++);
    }
    c = base;
    c.sink = 1;
    gqa_case_run(&c, seed++);
    c.window = 4;
    c.softcap = 3.0f;
    gqa_case_run(&c, seed++);
    for (int il = 0; il < 2; il++) {
      c = base;
      c.rotary = 1;
      c.interleaved = il;
      c.rot = 8; /* partial: 8 of 24 */
      gqa_case_run(&c, seed++);
      c.rot = 24; /* whole head, packed QKV */
      c.packed = 1;
      gqa_case_run(&c, seed++);
      c.pos_ids = 1;
      gqa_case_run(&c, seed++);
    }
    c = base;
    c.packed = 1;
    c.S = 1;
    c.L[0] = 14;
    c.L[1] = 1;
    c.L[2] = 7;
    gqa_case_run(&c, seed++);
    c = base; /* no past input at all */
    c.P = 0;
    c.no_past = 1;
    c.L[0] = c.L[1] = c.L[2] = 9;
    gqa_case_run(&c, seed++);
  }
}

/* A row's results do not depend on the rows packed beside it. */
static void test_gqa_batch_invariance(void) {
  gqa_case c;
  memset(&c, 0, sizeof c);
  c.dt = PH_DTYPE_BF16;
  c.B = 3;
  c.S = 5;
  c.P = 11;
  c.Hq = 4;
  c.Hkv = 2;
  c.D = 32;
  c.window = -1;
  c.rotary = 1;
  c.rot = 16;
  c.sink = 1;
  c.L[0] = 16;
  c.L[1] = 9;
  c.L[2] = 5;
  gqa_io all;
  gqa_build(&c, &all, 4000);
  diag d;
  CHECK_STATUS(op_test_run(&all.node, all.in, all.out, 2, &d), PH_OK, d.msg);
  for (int64_t b = 0; b < c.B && all.out[0]; b++) {
    gqa_case c1 = c;
    c1.B = 1;
    c1.L[0] = c.L[b];
    gqa_io one;
    gqa_build(&c1, &one, 4001);
    /* copy row b of every batched input into the single-row inputs */
    for (int i = 0; i < 12; i++) {
      if (!one.in[i] || i == 6 || i == 11 || i == 7 || i == 8) continue;
      size_t rb = (size_t)tensor_numel(one.in[i]) * dtype_size(one.in[i]->dtype);
      memcpy(one.in[i]->data, (char *)all.in[i]->data + (size_t)b * rb, rb);
    }
    memcpy(one.in[11]->data, all.in[11]->data, (size_t)tensor_numel(all.in[11]) * dtype_size(c.dt));
    CHECK_STATUS(op_test_run(&one.node, one.in, one.out, 1, &d), PH_OK, d.msg);
    for (int k = 0; k < 3 && one.out[0]; k++) {
      size_t rb = (size_t)tensor_numel(one.out[k]) * dtype_size(c.dt);
      CHECK(memcmp(one.out[k]->data, (char *)all.out[k]->data + (size_t)b * rb, rb) == 0);
    }
    gqa_free(&one);
  }
  gqa_free(&all);
}

/* Runs io and checks the status and that the message names the problem. */
static void gqa_expect(gqa_io *io, ph_status want, const char *needle, int line) {
  diag d;
  diag_clear(&d);
  ph_status s = op_test_run(&io->node, io->in, io->out, 1, &d);
  char what[96];
  snprintf(what, sizeof what, "GQA error case at line %d", line);
  if (!check_report(s == want, __FILE__, line, what))
    fprintf(stderr, "       got %s, expected %s: %s\n", ph_status_name(s), ph_status_name(want),
            d.msg);
  if (needle) CHECK_CONTAINS(d.msg, needle);
  free_all(io->out, 3);
}

static void test_gqa_errors(void) {
  gqa_case c;
  memset(&c, 0, sizeof c);
  c.dt = PH_DTYPE_F32;
  c.B = 1;
  c.S = 4;
  c.P = 3;
  c.Hq = 4;
  c.Hkv = 2;
  c.D = 8;
  c.window = -1;
  diag d;
  gqa_io io;
  int64_t dd[1] = {8}, q2[2] = {4, 32}, p3[3] = {2, 3, 8}, b1[1] = {1};
  tensor *extra = mk(PH_DTYPE_F32, 1, dd);
#define GQA_EXPECT(status, needle) gqa_expect(&io, status, needle, __LINE__)

  gqa_build(&c, &io, 5000);
  GQA_EXPECT(PH_OK, NULL);
  io.attrs[0] = attr_int("num_heads", 3); /* 3 % 2 != 0 */
  GQA_EXPECT(PH_ERR_INVALID_ARGUMENT, "kv_num_heads");
  io.attrs[0] = attr_int("num_heads", 4);
  /* each unsupported optional input is named */
  static const int slots[5] = {10, 12, 13, 14, 15};
  static const char *const names[5] = {"attention_bias", "k_scale", "v_scale", "q_norm_weight",
                                       "k_norm_weight"};
  for (int i = 0; i < 5; i++) {
    tensor *in16[16];
    memset(in16, 0, sizeof in16);
    for (int k = 0; k < 7; k++) in16[k] = io.in[k];
    in16[slots[i]] = extra;
    gnode n = io.node;
    n.n_inputs = slots[i] + 1;
    CHECK_STATUS(op_test_run(&n, in16, io.out, 1, &d), PH_ERR_UNSUPPORTED, d.msg);
    CHECK_CONTAINS(d.msg, names[i]);
    free_all(io.out, 3);
  }
  /* unsupported attributes and output */
  io.attrs[io.n_attrs] = attr_int("smooth_softmax", 1);
  io.node.n_attrs = io.n_attrs + 1;
  GQA_EXPECT(PH_ERR_UNSUPPORTED, "smooth_softmax");
  io.attrs[io.n_attrs] = attr_string("k_quant_type", "PER_TENSOR");
  GQA_EXPECT(PH_ERR_UNSUPPORTED, "k_quant_type");
  io.attrs[io.n_attrs] = attr_int("local_window_size", 0);
  GQA_EXPECT(PH_ERR_INVALID_ARGUMENT, "local_window_size");
  io.attrs[io.n_attrs] = attr_int("do_rotary", 1); /* without caches */
  GQA_EXPECT(PH_ERR_INVALID_ARGUMENT, "cos_cache");
  io.attrs[io.n_attrs] = attr_float("softcap", -1.0f);
  GQA_EXPECT(PH_ERR_INVALID_ARGUMENT, "softcap");
  io.node.n_attrs = io.n_attrs;
  io.node.n_outputs = 4;
  {
    tensor *o4[4] = {NULL, NULL, NULL, NULL};
    CHECK_STATUS(op_test_run(&io.node, io.in, o4, 1, &d), PH_ERR_UNSUPPORTED, d.msg);
    CHECK_CONTAINS(d.msg, "output_qk");
    free_all(o4, 4);
  }
  io.node.n_outputs = 1;
  GQA_EXPECT(PH_ERR_INVALID_ARGUMENT, "present_key");
  io.node.n_outputs = 3;
  /* shapes and dtypes */
  tensor *q = io.in[0];
  io.in[0] = mk(PH_DTYPE_F32, 2, q2);
  GQA_EXPECT(PH_ERR_TENSOR_SHAPE, "query");
  tensor_free(io.in[0]);
  io.in[0] = q;
  tensor *pk = io.in[3];
  io.in[3] = mk(PH_DTYPE_F32, 3, p3);
  GQA_EXPECT(PH_ERR_TENSOR_SHAPE, "past_key");
  tensor_free(io.in[3]);
  io.in[3] = pk;
  tensor *k = io.in[1];
  io.in[1] = mk(PH_DTYPE_F16, 3, k->dims);
  GQA_EXPECT(PH_ERR_TENSOR_DTYPE, "key");
  tensor_free(io.in[1]);
  io.in[1] = k;
  tensor *sk = io.in[5];
  io.in[5] = mk(PH_DTYPE_I64, 1, b1);
  GQA_EXPECT(PH_ERR_TENSOR_DTYPE, "seqlens_k");
  tensor_free(io.in[5]);
  io.in[5] = sk;
  tensor *v = io.in[2];
  io.in[2] = NULL; /* key without value */
  GQA_EXPECT(PH_ERR_INVALID_ARGUMENT, "value");
  io.in[2] = v;
  /* run-time lengths */
  int32_t *sl = io.in[5]->data, *tot = io.in[6]->data;
  sl[0] = 7; /* L = 8 > P + S = 7 */
  GQA_EXPECT(PH_ERR_INVALID_ARGUMENT, "seqlens_k");
  sl[0] = 2; /* L = 3 < S = 4 */
  GQA_EXPECT(PH_ERR_INVALID_ARGUMENT, "seqlens_k");
  sl[0] = 6;
  tot[0] = 8;
  GQA_EXPECT(PH_ERR_INVALID_ARGUMENT, "total_sequence_length"); /* seen by infer (constant) */
  CHECK_STATUS(op_test_run_ex(&io.node, io.in, io.out, 1, ~(1u << 6), &d), PH_ERR_INVALID_ARGUMENT,
               d.msg); /* a graph input: caught by run() */
  CHECK_CONTAINS(d.msg, "total_sequence_length");
  free_all(io.out, 3);
  tot[0] = 7;
  GQA_EXPECT(PH_OK, NULL);
  gqa_free(&io);

  /* rotary position past the cache */
  c.rotary = 1;
  c.rot = 8;
  c.pos_ids = 1;
  gqa_build(&c, &io, 5001);
  ((int64_t *)io.in[9]->data)[2] = c.P + c.S + 9;
  GQA_EXPECT(PH_ERR_INVALID_ARGUMENT, "cos/sin");
  gqa_free(&io);
  tensor_free(extra);
#undef GQA_EXPECT

  /* build-time inference: unknown batch, sequence and past propagate; P + S when both known */
  const op_def *def = op_lookup("com.microsoft", "GroupQueryAttention");
  gattr a[2] = {attr_int("num_heads", 4), attr_int("kv_num_heads", 2)};
  gnode n = op_test_node("GroupQueryAttention", "com.microsoft", 7, 3, a, 2);
  tinfo in[7], o[3];
  memset(in, 0, sizeof in);
  in[0] = (tinfo){PH_DTYPE_F16, 3, {-1, -1, 64}, NULL};
  in[1] = (tinfo){PH_DTYPE_F16, 3, {-1, -1, 32}, NULL};
  in[2] = in[1];
  in[3] = (tinfo){PH_DTYPE_F16, 4, {-1, 2, -1, 16}, NULL};
  in[4] = in[3];
  in[5] = (tinfo){PH_DTYPE_I32, 1, {-1}, NULL};
  in[6] = (tinfo){PH_DTYPE_I32, 0, {0}, NULL};
  CHECK_STATUS(def->infer(&n, in, o, &d), PH_OK, d.msg);
  CHECK_EQ_INT(o[0].dims[0], -1);
  CHECK_EQ_INT(o[0].dims[1], -1);
  CHECK_EQ_INT(o[0].dims[2], 64);
  CHECK_EQ_INT(o[1].rank, 4);
  CHECK_EQ_INT(o[1].dims[1], 2);
  CHECK_EQ_INT(o[1].dims[2], -1);
  CHECK_EQ_INT(o[2].dims[3], 16);
  in[0].dims[1] = 1;
  in[3].dims[2] = 9;
  in[4] = in[3];
  CHECK_STATUS(def->infer(&n, in, o, &d), PH_OK, d.msg);
  CHECK_EQ_INT(o[1].dims[2], 10);
  in[1].dims[2] = 48; /* key hidden size != kv_num_heads * D */
  in[2] = in[1];
  CHECK_STATUS(def->infer(&n, in, o, &d), PH_ERR_TENSOR_SHAPE, d.msg);
}

int main(void) {
  struct timespec t0, t1;
  clock_gettime(CLOCK_MONOTONIC, &t0);
  RUN(test_simplified_layer_norm);
  RUN(test_skip_simplified_layer_norm);
  RUN(test_norm_errors);
  RUN(test_rotary_embedding);
  RUN(test_mrotary_embedding);
  RUN(test_mrope_slot_map);
  RUN(test_mrope_equal_rows);
  RUN(test_rotary_errors);
  RUN(test_gqa_grid);
  RUN(test_gqa_dtypes);
  RUN(test_gqa_features);
  RUN(test_gqa_batch_invariance);
  RUN(test_gqa_errors);
  clock_gettime(CLOCK_MONOTONIC, &t1);
  for (int f = 0; f < N_FAM; f++)
    printf("worst %-6s: f32 %.2g of scale (%.2f of tol); f16 %.2f ulp (%.2f of tol); "
           "bf16 %.2f ulp (%.2f of tol)\n",
           FAM_NAMES[f], worst_err[f][0], worst_tol[f][0], worst_err[f][1], worst_tol[f][1],
           worst_err[f][2], worst_tol[f][2]);
  printf("elapsed %.2f s\n",
         (double)(t1.tv_sec - t0.tv_sec) + 1e-9 * (double)(t1.tv_nsec - t0.tv_nsec));
  return check_finish();
}
