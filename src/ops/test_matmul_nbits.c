/* Tests of com.microsoft MatMulNBits (src/ops/op_matmul_nbits.c, kernels/matmul_nbits.c).
 *
 * Weights are random codes (not quantized from floats: the quantizer is another module), so the
 * reference below only has to read ORT 1.30's layout, which it does its own way: code of (n, k)
 * at byte n*n_blocks*blob + (k/block)*blob + (k%block)*bits/8, low nibble for even k; a packed
 * 4-bit zero point of block b in byte b/2 of its column's ceil(n_blocks/2) bytes, low nibble for
 * even b. The reference then sums in double.
 *
 * Tolerance (per output element). The op computes w = (q - z)·s in f32: q - z is exact (small
 * integers; for float zero points q - z rounds once more), the product rounds once, so
 * w = w*(1 + δ1)(1 + δ0), |δ| <= u = 2^-24. Each product a·w rounds once more and the sequential
 * f32 sum of K terms adds at most (K - 1) roundings, each relative to a partial sum bounded by
 * S = Σ|a_k·w_k|; the bias add one more. Together |y - y_ref| <= (K + 3)·u·S·(1 + small) +
 * u·|y|; we use 1.01·((K + 4)·u·(S + |bias|)). For an f16/bf16 output the single final rounding
 * adds half an ulp: |y|·2^-11 (f16) or |y|·2^-8 (bf16). Inputs of dtype f16/bf16 are exact in
 * f32, so the reference reads the same values.
 */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../tests/check.h"
#include "../../tests/op_testing.h"
#include "base/cpu.h"
#include "base/rng.h"
#include "kernels/dispatch.h"
#include "kernels/matmul_nbits.h"
#include "ops/op.h"

enum { ZP_NONE, ZP_U8, ZP_FLOAT };

typedef struct nb_case {
  ph_dtype dt;
  int a_rank; /* 2: [M, K]; 3: [2, M/2, K] (M even) */
  int64_t M, K, N;
  int bits, block, zp, bias;
  int level; /* accuracy_level: 0 (f32, the default of these initializers) or 4 (int8) */
} nb_case;

typedef struct nb_inputs {
  tensor *t[6]; /* A, B, scales, zero_points, g_idx, bias */
  int64_t nb, blob, zp_bytes;
} nb_inputs;

static void nb_make(const nb_case *c, rng *r, nb_inputs *x) {
  memset(x, 0, sizeof *x);
  x->nb = (c->K + c->block - 1) / c->block;
  x->blob = (int64_t)c->block * c->bits / 8;
  x->zp_bytes = (x->nb * c->bits + 7) / 8;
  int64_t ad[3] = {c->M, c->K, 0};
  if (c->a_rank == 3) {
    ad[0] = 2;
    ad[1] = c->M / 2;
    ad[2] = c->K;
  }
  x->t[0] = tensor_rand(c->dt, c->a_rank, ad, r, -1.0f, 1.0f);
  x->t[1] = tensor_new(PH_DTYPE_U8, 3, (int64_t[]){c->N, x->nb, x->blob});
  uint8_t *b = x->t[1]->data;
  for (int64_t i = 0; i < c->N * x->nb * x->blob; i++) b[i] = (uint8_t)rng_below(r, 256);
  x->t[2] = tensor_rand(c->dt, 1, (int64_t[]){c->N * x->nb}, r, 0.001f, 0.05f);
  if (c->zp == ZP_U8) {
    x->t[3] = tensor_new(PH_DTYPE_U8, 1, (int64_t[]){c->N * x->zp_bytes});
    uint8_t *z = x->t[3]->data;
    for (int64_t i = 0; i < c->N * x->zp_bytes; i++) z[i] = (uint8_t)rng_below(r, 256);
  } else if (c->zp == ZP_FLOAT) {
    x->t[3] = tensor_rand(c->dt, 2, (int64_t[]){c->N, x->nb}, r, 0.0f, (float)(1 << c->bits));
  }
  if (c->bias) x->t[5] = tensor_rand(c->dt, 1, (int64_t[]){c->N}, r, -1.0f, 1.0f);
}

static int nb_code(const nb_case *c, const nb_inputs *x, int64_t n, int64_t k) {
  const uint8_t *b = x->t[1]->data;
  int64_t byte = n * x->nb * x->blob + (k / c->block) * x->blob + (k % c->block) * c->bits / 8;
  if (c->bits == 8) return b[byte];
  return (b[byte] >> ((k % 2) * 4)) & 15;
}

static double nb_zero(const nb_case *c, const nb_inputs *x, int64_t n, int64_t blk) {
  if (c->zp == ZP_NONE) return c->bits == 4 ? 8.0 : 128.0;
  if (c->zp == ZP_FLOAT) return tensor_at(x->t[3], n * x->nb + blk);
  const uint8_t *z = x->t[3]->data;
  if (c->bits == 8) return z[n * x->zp_bytes + blk];
  return (z[n * x->zp_bytes + blk / 2] >> ((blk % 2) * 4)) & 15;
}

static gnode nb_node(const nb_case *c, gattr *attrs, int n_inputs) {
  attrs[0] = attr_int("K", c->K);
  attrs[1] = attr_int("N", c->N);
  attrs[2] = attr_int("bits", c->bits);
  attrs[3] = attr_int("block_size", c->block);
  attrs[4] = attr_int("accuracy_level", c->level);
  return op_test_node("MatMulNBits", "com.microsoft", n_inputs, 1, attrs, 5);
}

/* Runs one case at n_threads and checks every element against the double reference; returns
 * the output (caller frees) for the invariance checks. */
static tensor *nb_check_case(const nb_case *c, const nb_inputs *x, int n_threads) {
  gattr attrs[5];
  gnode n = nb_node(c, attrs, c->bias ? 6 : (c->zp ? 4 : 3));
  tensor *in[6] = {x->t[0], x->t[1], x->t[2], x->t[3], NULL, x->t[5]};
  tensor *out[1] = {NULL};
  diag d;
  ph_status st = op_test_run(&n, in, out, n_threads, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  if (st != PH_OK) return NULL;
  CHECK_EQ_INT(out[0]->rank, c->a_rank);
  CHECK_EQ_INT(out[0]->dims[c->a_rank - 1], c->N);
  const double u = ldexp(1.0, -24);
  double out_u = c->dt == PH_DTYPE_F16    ? ldexp(1.0, -11)
                 : c->dt == PH_DTYPE_BF16 ? ldexp(1.0, -8)
                                          : 0;
  int bad = 0;
  for (int64_t m = 0; m < c->M && !bad; m++)
    for (int64_t nn = 0; nn < c->N && !bad; nn++) {
      double ref = 0, S = 0;
      for (int64_t k = 0; k < c->K; k++) {
        int64_t blk = k / c->block;
        double s = tensor_at(x->t[2], nn * x->nb + blk);
        double w = ((double)nb_code(c, x, nn, k) - nb_zero(c, x, nn, blk)) * s;
        double p = tensor_at(x->t[0], m * c->K + k) * w;
        ref += p;
        S += fabs(p);
      }
      double bias = c->bias ? tensor_at(x->t[5], nn) : 0.0;
      ref += bias;
      double tol = 1.01 * (double)(c->K + 4) * u * (S + fabs(bias)) + out_u * fabs(ref) + 1e-30;
      double got = tensor_at(out[0], m * c->N + nn);
      if (!(fabs(got - ref) <= tol)) {
        fprintf(stderr,
                "  dt %d M %lld K %lld N %lld bits %d block %d zp %d bias %d: y[%lld,%lld] = %.9g, "
                "ref %.9g, tol %.3g\n",
                c->dt, (long long)c->M, (long long)c->K, (long long)c->N, c->bits, c->block, c->zp,
                c->bias, (long long)m, (long long)nn, got, ref, tol);
        bad = 1;
      }
    }
  CHECK(!bad);
  return out[0];
}

static void nb_free(nb_inputs *x) { tensors_free(x->t, 6); }

/* The variants to check: scalar (the reference nbits_dot_i8) and avx512 (the VNNI kernel where
 * the CPU has VNNI; else the reference again). Leaves the variant forced to the best one. */
static int nb_variants(kernel_variant *v) {
  int n = 0;
  v[n++] = KERNEL_SCALAR;
  if (kernel_variant_available(KERNEL_AVX512)) v[n++] = KERNEL_AVX512;
  return n;
}

static void nb_force(kernel_variant v) {
  diag d;
  CHECK_STATUS(kernel_force_variant(v, &d), PH_OK, d.msg);
}

static void test_nb_grid(void) {
  static const int64_t Ms[] = {1, 3, 17}, Ks[] = {32, 96, 200, 512}, Ns[] = {5, 24};
  static const int bitss[] = {4, 8}, blocks[] = {32, 64, 128};
  kernel_variant vs[KERNEL_N_VARIANTS];
  int n_v = nb_variants(vs); /* scalar, and avx512 (the AVX-512 level-1 kernels) */
  rng r = rng_seed(1801);
  int runs = 0;
  for (size_t mi = 0; mi < 3; mi++)
    for (size_t ki = 0; ki < 4; ki++)
      for (size_t ni = 0; ni < 2; ni++)
        for (size_t bi = 0; bi < 2; bi++)
          for (size_t li = 0; li < 3; li++)
            for (int zp = ZP_NONE; zp <= ZP_FLOAT; zp++) {
              nb_case c = {PH_DTYPE_F32,
                           2,
                           Ms[mi],
                           Ks[ki],
                           Ns[ni],
                           bitss[bi],
                           blocks[li],
                           zp,
                           (int)((mi + ki + zp) % 2),
                           0};
              nb_inputs x;
              nb_make(&c, &r, &x);
              for (int v = 0; v < n_v; v++) {
                nb_force(vs[v]);
                tensor_free(nb_check_case(&c, &x, 1));
              }
              nb_free(&x);
              runs++;
            }
  CHECK_EQ_INT(runs, 432);
  nb_force(vs[n_v - 1]);
}

/* f16 and bf16 io, a rank-3 A, and a result that does not depend on the thread count or on
 * which rows share a call (row 0 alone equals row 0 of 17). */
static void test_nb_dtypes_threads_rows(void) {
  rng r = rng_seed(18);
  const ph_dtype dts[] = {PH_DTYPE_F16, PH_DTYPE_BF16, PH_DTYPE_F32};
  for (int i = 0; i < 3; i++) {
    nb_case c = {dts[i], 3, 6, 200, 40, 4, 32, ZP_U8, 1, 0};
    nb_inputs x;
    nb_make(&c, &r, &x);
    tensor *y1 = nb_check_case(&c, &x, 1), *y4 = nb_check_case(&c, &x, 4);
    CHECK(tensor_same_bits(y1, y4));
    tensor_free(y1);
    tensor_free(y4);
    nb_free(&x);
  }
  nb_case c = {PH_DTYPE_F32, 2, 17, 96, 24, 8, 64, ZP_NONE, 0, 0};
  nb_inputs x;
  nb_make(&c, &r, &x);
  tensor *all = nb_check_case(&c, &x, 3);
  nb_case c1 = c;
  c1.M = 1;
  tensor *a_all = x.t[0];
  x.t[0] = tensor_new(PH_DTYPE_F32, 2, (int64_t[]){1, c.K});
  memcpy(x.t[0]->data, a_all->data, (size_t)c.K * sizeof(float));
  tensor *one = nb_check_case(&c1, &x, 1);
  CHECK(one && all && memcmp(one->data, all->data, (size_t)c.N * sizeof(float)) == 0);
  tensor_free(one);
  tensor_free(all);
  tensor_free(a_all);
  nb_free(&x);
}

/* The layout by hand: 4 bits, K = 64, block 32 (two blocks), N = 1, scales 1 and 0.5. Byte 0 =
 * 0x21 holds k = 0 (low nibble, 1) and k = 1 (high nibble, 2); zero points byte 0x3A holds block
 * 0's (low nibble, 10) and block 1's (high nibble, 3). A one-hot A reads single weights. */
static void test_nb_layout(void) {
  int64_t K = 64;
  tensor *b = tensor_new(PH_DTYPE_U8, 3, (int64_t[]){1, 2, 16});
  uint8_t *bp = b->data;
  bp[0] = 0x21;
  bp[16] = 0xC5; /* k = 32: 5, k = 33: 12 */
  tensor *s = tensor_new(PH_DTYPE_F32, 1, (int64_t[]){2});
  ((float *)s->data)[0] = 1.0f;
  ((float *)s->data)[1] = 0.5f;
  tensor *zp = tensor_new(PH_DTYPE_U8, 1, (int64_t[]){1});
  ((uint8_t *)zp->data)[0] = 0x3A;
  tensor *a = tensor_new(PH_DTYPE_F32, 2, (int64_t[]){4, K});
  float *ap = a->data;
  ap[0 * K + 0] = 1.0f;
  ap[1 * K + 1] = 1.0f;
  ap[2 * K + 32] = 1.0f;
  ap[3 * K + 33] = 1.0f;
  gattr attrs[4] = {attr_int("K", K), attr_int("N", 1), attr_int("bits", 4),
                    attr_int("block_size", 32)};
  diag d;
  for (int with_zp = 0; with_zp < 2; with_zp++) {
    gnode n = op_test_node("MatMulNBits", "com.microsoft", with_zp ? 4 : 3, 1, attrs, 4);
    tensor *in[4] = {a, b, s, with_zp ? zp : NULL}, *out[1] = {NULL};
    ph_status st = op_test_run(&n, in, out, 1, &d);
    CHECK_STATUS(st, PH_OK, d.msg);
    if (st == PH_OK) {
      const float *y = out[0]->data;
      float z0 = with_zp ? 10.0f : 8.0f, z1 = with_zp ? 3.0f : 8.0f;
      CHECK_NEAR(y[0], (1.0f - z0) * 1.0f, 0.0);
      CHECK_NEAR(y[1], (2.0f - z0) * 1.0f, 0.0);
      CHECK_NEAR(y[2], (5.0f - z1) * 0.5f, 0.0);
      CHECK_NEAR(y[3], (12.0f - z1) * 0.5f, 0.0);
    }
    tensor_free(out[0]);
  }
  tensor *frees[] = {a, b, s, zp};
  for (size_t i = 0; i < 4; i++) tensor_free(frees[i]);
}

/* Every inconsistency is a typed error naming what is wrong. */
static void test_nb_errors(void) {
  rng r = rng_seed(7);
  nb_case c = {PH_DTYPE_F32, 2, 3, 96, 5, 4, 64, ZP_U8, 1, 0};
  nb_inputs x;
  nb_make(&c, &r, &x); /* nb = 2, blob = 32, zp bytes 1 per column */
  diag d;
  tensor *out[1] = {NULL};
  struct {
    const char *attr; /* attribute overridden */
    int64_t v;
    ph_status want;
    const char *needle;
  } attr_cases[] = {
      {"K", 64, PH_ERR_TENSOR_SHAPE, "K"},          /* A's last dim 96, B's n_blocks */
      {"N", 6, PH_ERR_TENSOR_SHAPE, "B is"},        /* B [5, ...] */
      {"bits", 3, PH_ERR_UNSUPPORTED, "bits"},      /* legal in the schema, not run here */
      {"bits", 9, PH_ERR_INVALID_ARGUMENT, "bits"}, /* outside [2, 8] */
      {"block_size", 24, PH_ERR_INVALID_ARGUMENT, "block_size"},
      {"block_size", 8, PH_ERR_INVALID_ARGUMENT, "block_size"},
      {"block_size", 32, PH_ERR_TENSOR_SHAPE, "B is"}, /* n_blocks 3, blob 16 */
      {"accuracy_level", 5, PH_ERR_INVALID_ARGUMENT, "accuracy_level"},
      {"K", 0, PH_ERR_INVALID_ARGUMENT, "K"},
      {"K", (int64_t)1 << 40, PH_ERR_UNSUPPORTED, "not supported"},
      {"N", (int64_t)1 << 40, PH_ERR_UNSUPPORTED, "not supported"},
      {"block_size", (int64_t)1 << 62, PH_ERR_UNSUPPORTED, "not supported"},
  };
  for (size_t i = 0; i < sizeof attr_cases / sizeof attr_cases[0]; i++) {
    gattr attrs[5];
    gnode n = nb_node(&c, attrs, 6);
    for (int a = 0; a < 5; a++)
      if (strcmp(attrs[a].name, attr_cases[i].attr) == 0)
        attrs[a] = attr_int(attr_cases[i].attr, attr_cases[i].v);
    tensor *in[6] = {x.t[0], x.t[1], x.t[2], x.t[3], NULL, x.t[5]};
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), attr_cases[i].want, d.msg);
    CHECK_CONTAINS(d.msg, attr_cases[i].needle);
  }
  { /* K and N are required */
    gattr attrs[2] = {attr_int("N", 5), attr_int("block_size", 64)};
    gnode n = op_test_node("MatMulNBits", "com.microsoft", 3, 1, attrs, 2);
    tensor *in[3] = {x.t[0], x.t[1], x.t[2]};
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "attribute K");
  }
  tensor *s_short = tensor_new(PH_DTYPE_F32, 1, (int64_t[]){9});
  tensor *s_f16 = tensor_new(PH_DTYPE_F16, 1, (int64_t[]){10});
  tensor *s_2d_bad = tensor_new(PH_DTYPE_F32, 2, (int64_t[]){2, 5});
  tensor *b_i8 = tensor_new(PH_DTYPE_I8, 3, (int64_t[]){5, 2, 32});
  tensor *b_2d = tensor_new(PH_DTYPE_U8, 2, (int64_t[]){5, 64});
  tensor *b_blob = tensor_new(PH_DTYPE_U8, 3, (int64_t[]){5, 2, 64});
  tensor *zp_long = tensor_new(PH_DTYPE_U8, 1, (int64_t[]){10}); /* 8-bit size under bits = 4 */
  tensor *zp_i32 = tensor_new(PH_DTYPE_I32, 1, (int64_t[]){5});
  tensor *zp_fshort = tensor_new(PH_DTYPE_F32, 1, (int64_t[]){5});
  tensor *gidx = tensor_new(PH_DTYPE_I32, 1, (int64_t[]){96});
  tensor *bias_bad = tensor_new(PH_DTYPE_F32, 1, (int64_t[]){6});
  tensor *bias_f16 = tensor_new(PH_DTYPE_F16, 1, (int64_t[]){5});
  tensor *a_i32 = tensor_new(PH_DTYPE_I32, 2, (int64_t[]){3, 96});
  tensor *a_k = tensor_new(PH_DTYPE_F32, 2, (int64_t[]){3, 95});
  tensor *a_scalar = tensor_new(PH_DTYPE_F32, 0, NULL);
  struct {
    int slot;
    tensor *t;
    ph_status want;
    const char *needle;
  } in_cases[] = {
      {2, s_short, PH_ERR_TENSOR_SHAPE, "scales"},
      {2, s_f16, PH_ERR_TENSOR_DTYPE, "scales"},
      {2, s_2d_bad, PH_ERR_TENSOR_SHAPE, "scales"},
      {1, b_i8, PH_ERR_TENSOR_DTYPE, "B"},
      {1, b_2d, PH_ERR_TENSOR_SHAPE, "B"},
      {1, b_blob, PH_ERR_TENSOR_SHAPE, "B is"},
      {3, zp_long, PH_ERR_TENSOR_SHAPE, "zero_points"},
      {3, zp_i32, PH_ERR_TENSOR_DTYPE, "zero_points"},
      {3, zp_fshort, PH_ERR_TENSOR_SHAPE, "zero_points"},
      {4, gidx, PH_ERR_UNSUPPORTED, "g_idx"},
      {5, bias_bad, PH_ERR_TENSOR_SHAPE, "bias"},
      {5, bias_f16, PH_ERR_TENSOR_DTYPE, "bias"},
      {0, a_i32, PH_ERR_TENSOR_DTYPE, "A"},
      {0, a_k, PH_ERR_TENSOR_SHAPE, "last dim of A"},
      {0, a_scalar, PH_ERR_TENSOR_SHAPE, "rank"},
  };
  for (size_t i = 0; i < sizeof in_cases / sizeof in_cases[0]; i++) {
    gattr attrs[5];
    gnode n = nb_node(&c, attrs, 6);
    tensor *in[6] = {x.t[0], x.t[1], x.t[2], x.t[3], NULL, x.t[5]};
    in[in_cases[i].slot] = in_cases[i].t;
    CHECK_STATUS(op_test_run(&n, in, out, 1, &d), in_cases[i].want, d.msg);
    CHECK_CONTAINS(d.msg, in_cases[i].needle);
    CHECK(out[0] == NULL);
  }
  { /* arity */
    gattr attrs[5];
    gnode n = nb_node(&c, attrs, 2);
    tensor *in[2] = {x.t[0], x.t[1]};
    CHECK(op_test_run(&n, in, out, 1, &d) != PH_OK);
  }
  tensor *frees[] = {s_short,   s_f16, s_2d_bad, b_i8,     b_2d,  b_blob, zp_long, zp_i32,
                     zp_fshort, gidx,  bias_bad, bias_f16, a_i32, a_k,    a_scalar};
  for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++) tensor_free(frees[i]);
  nb_free(&x);
}

/* Build-time inference with unknown dims: they propagate, known ones are still checked. */
static void test_nb_infer_unknown(void) {
  const op_def *def = op_lookup("com.microsoft", "MatMulNBits");
  if (!CHECK(def != NULL)) return;
  gattr attrs[4] = {attr_int("K", 200), attr_int("N", 7), attr_int("bits", 8),
                    attr_int("block_size", 128)};
  gnode n = op_test_node("MatMulNBits", "com.microsoft", 3, 1, attrs, 4);
  n.op = def;
  tinfo in[3], out[1];
  int64_t ad[3] = {-1, -1, 200}, bd[3] = {7, 2, 128}, sd[1] = {14};
  in[0] = tinfo_make(PH_DTYPE_BF16, 3, ad);
  in[1] = tinfo_make(PH_DTYPE_U8, 3, bd);
  in[2] = tinfo_make(PH_DTYPE_BF16, 1, sd);
  diag d;
  CHECK_STATUS(def->infer(&n, in, out, &d), PH_OK, d.msg);
  CHECK_EQ_INT(out[0].dtype, PH_DTYPE_BF16);
  CHECK_EQ_INT(out[0].rank, 3);
  CHECK(out[0].dims[0] == -1 && out[0].dims[1] == -1 && out[0].dims[2] == 7);
  in[1].dims[0] = -1;
  in[2].rank = -1;
  CHECK_STATUS(def->infer(&n, in, out, &d), PH_OK, d.msg);
  in[1].dims[2] = 64; /* a 4-bit blob under bits = 8 */
  CHECK_STATUS(def->infer(&n, in, out, &d), PH_ERR_TENSOR_SHAPE, d.msg);
}

/* ---- accuracy_level 4 ------------------------------------------------------------------------
 * The expected bits are computed here from the rule in kernels/matmul_nbits.h, written out
 * again (quantize each block of a row: amax, s_a = amax/127, r = 127/amax, rintf(a·r); then per
 * block the exact integer dot with the codes minus z·Σâ, and the f32 combine in increasing block,
 * each multiply and add rounded). Every variant must give exactly these bits. Separately the
 * result is bounded against the float64 dequantize-then-dot: per block the activation error is
 * |a_k − s_a·â_k| <= s_a·(1/2 + 2^-16) (half a step, plus the roundings of r and of a·r), so
 * |Σ_k w_k (a_k − s_a â_k)| <= Σ_k |w_k|·s_a·(1/2 + 2^-16); the f32 combine adds at most
 * (n_blocks + 4)·u·Σ_k |w_k|·(|a_k| + s_a) (three roundings per block term, one per add, bias). */

typedef struct nb_i8_row {
  int8_t *q; /* [K] */
  float *sa;
  int32_t *asum;
} nb_i8_row;

static void nb_i8_quant(const nb_case *c, const nb_inputs *x, int64_t m, nb_i8_row *row) {
  for (int64_t b = 0; b < x->nb; b++) {
    int64_t k0 = b * c->block, k1 = k0 + c->block < c->K ? k0 + c->block : c->K;
    float amax = 0.0f;
    int finite = 1;
    for (int64_t k = k0; k < k1; k++) {
      float v = (float)tensor_at(x->t[0], m * c->K + k);
      if (!isfinite(v)) finite = 0;
      amax = fabsf(v) > amax ? fabsf(v) : amax;
    }
    int32_t sum = 0;
    if (!finite || amax < FLT_MIN) {
      row->sa[b] = finite ? 0.0f : NAN;
      for (int64_t k = k0; k < k1; k++) row->q[k] = 0;
    } else {
      float r = 127.0f / amax;
      row->sa[b] = amax / 127.0f;
      for (int64_t k = k0; k < k1; k++) {
        float prod = (float)tensor_at(x->t[0], m * c->K + k) * r;
        row->q[k] = (int8_t)rintf(prod);
        sum += row->q[k];
      }
    }
    row->asum[b] = sum;
  }
}

/* The level-4 value of (m, n) before the output rounding, bias included; *bound gets the
 * tolerance against the float64 reference and *ref that reference. */
static float nb_i8_expect(const nb_case *c, const nb_inputs *x, const nb_i8_row *row, int64_t n,
                          double *ref, double *bound, int64_t m) {
  const double u = ldexp(1.0, -24);
  float acc = 0.0f;
  double act_err = 0, S = 0;
  *ref = 0;
  for (int64_t b = 0; b < x->nb; b++) {
    int64_t k0 = b * c->block, k1 = k0 + c->block < c->K ? k0 + c->block : c->K;
    int32_t z = (int32_t)nb_zero(c, x, n, b), dot = 0;
    float sw = (float)tensor_at(x->t[2], n * x->nb + b);
    double wsum = 0;
    for (int64_t k = k0; k < k1; k++) {
      int code = nb_code(c, x, n, k);
      dot += (code - z) * row->q[k];
      double w = (double)(code - z) * sw, a = tensor_at(x->t[0], m * c->K + k);
      *ref += a * w;
      wsum += fabs(w);
      S += fabs(w) * (fabs(a) + row->sa[b]);
    }
    act_err += wsum * row->sa[b] * (0.5 + ldexp(1.0, -16));
    float t = row->sa[b] * sw;
    float p = t * (float)dot;
    acc = acc + p;
  }
  float bias = c->bias ? (float)tensor_at(x->t[5], n) : 0.0f;
  if (c->bias) {
    acc = acc + bias;
    *ref += bias;
  }
  *bound = act_err + 1.01 * (double)(x->nb + 4) * u * (S + fabs(bias)) + 1e-30;
  return acc;
}

/* Runs c (level 4) under the active variant at n_threads; checks every element bit for bit
 * against nb_i8_expect (rounded to the output dtype) and within its bound of the float64
 * reference. Returns the output (caller frees). */
static tensor *nb_i8_check(const nb_case *c, const nb_inputs *x, int n_threads) {
  gattr attrs[5];
  gnode n = nb_node(c, attrs, c->bias ? 6 : (c->zp ? 4 : 3));
  tensor *in[6] = {x->t[0], x->t[1], x->t[2], x->t[3], NULL, x->t[5]};
  tensor *out[1] = {NULL};
  diag d;
  ph_status st = op_test_run(&n, in, out, n_threads, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  if (st != PH_OK) return NULL;
  double out_u = c->dt == PH_DTYPE_F16    ? ldexp(1.0, -11)
                 : c->dt == PH_DTYPE_BF16 ? ldexp(1.0, -8)
                                          : 0;
  nb_i8_row row = {malloc((size_t)c->K), malloc((size_t)x->nb * 4), malloc((size_t)x->nb * 4)};
  tensor *want = tensor_new(c->dt, 1, (int64_t[]){1});
  int bad = 0;
  for (int64_t m = 0; m < c->M && !bad; m++) {
    nb_i8_quant(c, x, m, &row);
    for (int64_t nn = 0; nn < c->N && !bad; nn++) {
      double ref, bound;
      float e = nb_i8_expect(c, x, &row, nn, &ref, &bound, m);
      tensor_store_f32(want, 0, 1, &e);
      size_t es = dtype_size(c->dt);
      const char *got_p = (const char *)out[0]->data + (size_t)(m * c->N + nn) * es;
      double got = tensor_at(out[0], m * c->N + nn);
      int same = memcmp(got_p, want->data, es) == 0;
      int near = fabs(got - ref) <= bound + out_u * fabs(ref);
      if (!same || !near) {
        fprintf(stderr,
                "  %s: dt %d M %lld K %lld N %lld bits %d block %d zp %d bias %d threads %d: "
                "y[%lld,%lld] = %.9g, level-4 rule %.9g (%s), f64 ref %.9g, bound %.3g\n",
                kernel_variant_name(kernel_variant_active()), c->dt, (long long)c->M,
                (long long)c->K, (long long)c->N, c->bits, c->block, c->zp, c->bias, n_threads,
                (long long)m, (long long)nn, got, tensor_at(want, 0), same ? "same" : "DIFFERS",
                ref, bound);
        bad = 1;
      }
    }
  }
  CHECK(!bad);
  free(row.q);
  free(row.sa);
  free(row.asum);
  tensor_free(want);
  return out[0];
}

static void test_nb_i8_grid(void) {
  static const int blocks[] = {16, 32, 64, 128, 256};
  /* 15: the streaming kernel's largest M; 16 (NB_PANEL_MIN_M), 27: the panel kernel */
  static const int64_t Ms[] = {1, 2, 3, 4, 5, 6, 11, 15, 16, 27};
  kernel_variant vs[KERNEL_N_VARIANTS];
  int n_v = nb_variants(vs), runs = 0;
  if (!cpu_features()->avx512_vnni) fprintf(stderr, "  (no avx512_vnni: reference only)\n");
  rng r = rng_seed(4018);
  for (int bits = 4; bits <= 8; bits += 4)
    for (size_t bi = 0; bi < 5; bi++)
      for (int kk = 0; kk < 3; kk++)
        for (int zp = ZP_NONE; zp <= ZP_U8; zp++) {
          int block = blocks[bi];
          /* K: several blocks, a multiple; then a partial last block; then less than a block */
          int64_t K = kk == 0 ? 5 * block : kk == 1 ? 2 * block + block / 2 + 2 : block / 2 + 6;
          /* N: 4..8 (the streaming kernel groups 4), 33..41 (the panel kernel, M >= 16, takes 32:
           * a full panel and a partial one), 1 */
          int64_t N = kk == 2 ? 1 : kk == 0 ? 4 + (int64_t)bi : 33 + 2 * (int64_t)bi;
          for (size_t mi = 0; mi < sizeof Ms / sizeof Ms[0]; mi++) {
            if (mi < 6 && (bi + (size_t)kk) % 2 && mi % 2) continue; /* fewer small-M runs */
            nb_case c = {PH_DTYPE_F32, 2, Ms[mi], K, N, bits, block, zp, (int)(mi + bi) % 2, 4};
            nb_inputs x;
            nb_make(&c, &r, &x);
            for (int v = 0; v < n_v; v++) {
              nb_force(vs[v]);
              tensor_free(nb_i8_check(&c, &x, 1));
              runs++;
            }
            nb_free(&x);
          }
        }
  CHECK(runs > 300);
  nb_force(vs[n_v - 1]);
}

/* f16 and bf16 io (scales, bias, Y in that dtype; the rule reads A widened to f32), a rank-3 A,
 * 1 vs 3 threads, and each row alone vs in a batch of 27 (bit-identical; the batch takes the panel
 * kernel). */
static void test_nb_i8_invariance(void) {
  kernel_variant vs[KERNEL_N_VARIANTS];
  int n_v = nb_variants(vs);
  rng r = rng_seed(1804);
  const ph_dtype dts[] = {PH_DTYPE_F16, PH_DTYPE_BF16, PH_DTYPE_F32};
  for (int v = 0; v < n_v; v++) {
    nb_force(vs[v]);
    for (int i = 0; i < 3; i++) {
      nb_case c = {dts[i], 3, 6, 200, 9, 4 + 4 * (i % 2), 32, ZP_U8, 1, 4};
      nb_inputs x;
      nb_make(&c, &r, &x);
      tensor *y1 = nb_i8_check(&c, &x, 1), *y3 = nb_i8_check(&c, &x, 3);
      CHECK(y1 && y3 && tensor_same_bits(y1, y3));
      tensor_free(y1);
      tensor_free(y3);
      nb_free(&x);
    }
    for (int bits = 4; bits <= 8; bits += 4) {
      nb_case c = {PH_DTYPE_F32, 2, 27, 384, 7, bits, 128, ZP_NONE, 0, 4};
      nb_inputs x;
      nb_make(&c, &r, &x);
      tensor *all = nb_i8_check(&c, &x, 3);
      tensor *a_all = x.t[0];
      nb_case c1 = c;
      c1.M = 1;
      for (int64_t m = 0; m < c.M && all; m++) {
        x.t[0] = tensor_new(PH_DTYPE_F32, 2, (int64_t[]){1, c.K});
        memcpy(x.t[0]->data, (const float *)a_all->data + m * c.K, (size_t)c.K * sizeof(float));
        tensor *one = nb_i8_check(&c1, &x, 1);
        CHECK(one && memcmp(one->data, (const float *)all->data + m * c.N,
                            (size_t)c.N * sizeof(float)) == 0);
        tensor_free(one);
        tensor_free(x.t[0]);
      }
      x.t[0] = a_all;
      tensor_free(all);
      nb_free(&x);
    }
  }
  nb_force(vs[n_v - 1]);
}

/* Edges of the activation rule: a row of zeros (s_a = 0: exact zeros out), a block with a NaN or
 * an inf (that row's outputs NaN, the other rows untouched), subnormal-only blocks (s_a = 0), a
 * value exactly on a half step (ties to even), and float zero points (computed as level 1). */
static void test_nb_i8_edges(void) {
  kernel_variant vs[KERNEL_N_VARIANTS];
  int n_v = nb_variants(vs);
  for (int v = 0; v < n_v; v++) {
    nb_force(vs[v]);
    rng r = rng_seed(99);
    nb_case c = {PH_DTYPE_F32, 2, 5, 96, 6, 8, 32, ZP_U8, 0, 4};
    nb_inputs x;
    nb_make(&c, &r, &x);
    float *a = x.t[0]->data;
    for (int64_t k = 0; k < c.K; k++) a[0 * c.K + k] = 0.0f;
    a[1 * c.K + 40] = NAN;
    a[2 * c.K + 95] = INFINITY;
    for (int64_t k = 32; k < 64; k++) a[3 * c.K + k] = (k % 2 ? 1e-39f : -3e-40f);
    /* row 4, block 0: amax 127, so r = 1 and a = 2.5, -3.5 quantize to 2, -4 */
    a[4 * c.K + 0] = 127.0f;
    a[4 * c.K + 1] = 2.5f;
    a[4 * c.K + 2] = -3.5f;
    gattr attrs[5];
    gnode n = nb_node(&c, attrs, 4);
    tensor *in[4] = {x.t[0], x.t[1], x.t[2], x.t[3]}, *out[1] = {NULL};
    diag d;
    CHECK_STATUS(op_test_run(&n, in, out, 2, &d), PH_OK, d.msg);
    if (out[0]) {
      const float *y = out[0]->data;
      nb_i8_row row = {malloc((size_t)c.K), malloc((size_t)x.nb * 4), malloc((size_t)x.nb * 4)};
      for (int64_t nn = 0; nn < c.N; nn++) {
        CHECK(y[0 * c.N + nn] == 0.0f);
        CHECK(isnan(y[1 * c.N + nn]));
        CHECK(isnan(y[2 * c.N + nn]));
        for (int64_t m = 3; m < 5; m++) {
          double ref, bound;
          nb_i8_quant(&c, &x, m, &row);
          float e = nb_i8_expect(&c, &x, &row, nn, &ref, &bound, m);
          CHECK(memcmp(&e, &y[m * c.N + nn], 4) == 0);
          CHECK(fabs(y[m * c.N + nn] - ref) <= bound);
        }
      }
      nb_i8_quant(&c, &x, 4, &row);
      CHECK(row.q[1] == 2 && row.q[2] == -4 && row.q[0] == 127);
      nb_i8_quant(&c, &x, 3, &row);
      CHECK(row.sa[1] == 0.0f);
      free(row.q);
      free(row.sa);
      free(row.asum);
    }
    tensor_free(out[0]);
    nb_free(&x);
    /* float zero points: level 1's arithmetic (its bound) */
    nb_case cf = {PH_DTYPE_F32, 2, 3, 200, 5, 4, 64, ZP_FLOAT, 1, 4};
    nb_make(&cf, &r, &x);
    tensor_free(nb_check_case(&cf, &x, 2));
    nb_free(&x);
  }
  nb_force(vs[n_v - 1]);
}

/* The panel packing: the reference layout (nbits_i8_pack_panel, checked here against its
 * definition) and the AVX-512 packer (the one the op runs) give the same bytes, with code counts
 * that are and are not multiples of the 64 the packer transposes at a time. */
static void test_nb_i8_pack(void) {
  rng r = rng_seed(33);
  nbits_i8_pack_fn simd = nbits_i8_avx512_pack_panel();
  int can_simd = simd && kernel_variant_available(KERNEL_AVX512);
  static const int64_t shapes[][2] = {{16, 1}, {32, 3}, {64, 2}, {128, 3}, {16, 7}};
  for (int bits = 4; bits <= 8; bits += 4)
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
      int64_t block = shapes[si][0], nb = shapes[si][1], n = block * nb;
      int64_t col_bytes = n * bits / 8;
      uint8_t *b = malloc((size_t)(col_bytes * NBITS_PANEL));
      uint8_t *w1 = malloc((size_t)(n * NBITS_PANEL)), *w2 = malloc((size_t)(n * NBITS_PANEL));
      const uint8_t *cols[NBITS_PANEL];
      for (int64_t i = 0; i < col_bytes * NBITS_PANEL; i++) b[i] = (uint8_t)rng_below(&r, 256);
      for (int c = 0; c < NBITS_PANEL; c++) cols[c] = b + c * col_bytes;
      nbits_i8_pack_panel(cols, bits, block, nb, w1);
      int bad = 0;
      for (int c = 0; c < NBITS_PANEL; c++)
        for (int64_t k = 0; k < n; k++) {
          int code = bits == 8 ? cols[c][k] : (cols[c][k / 2] >> ((k % 2) * 4)) & 15;
          bad += w1[(k / 4) * 4 * NBITS_PANEL + c * 4 + k % 4] != code;
        }
      CHECK_EQ_INT(bad, 0);
      if (can_simd) {
        memset(w2, 0xAA, (size_t)(n * NBITS_PANEL));
        simd(cols, bits, block, nb, w2);
        CHECK(memcmp(w1, w2, (size_t)(n * NBITS_PANEL)) == 0);
      }
      free(b);
      free(w1);
      free(w2);
    }
}

int main(void) {
  RUN(test_nb_layout);
  RUN(test_nb_grid);
  RUN(test_nb_dtypes_threads_rows);
  RUN(test_nb_errors);
  RUN(test_nb_infer_unknown);
  RUN(test_nb_i8_grid);
  RUN(test_nb_i8_invariance);
  RUN(test_nb_i8_edges);
  RUN(test_nb_i8_pack);
  return check_finish();
}
