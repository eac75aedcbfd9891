/* test_ops_paged — PagedAttention (SEPARATE) and VarlenCausalConvWithState, the packed (varlen)
 * ops of the paged hybrid layout.
 *
 * References are float64 loops written here from spec/abi.md §1.7 and §3 (and docs/ops-paged.md),
 * never from the kernels; where the contract rounds an intermediate (a normed/rotated key stored
 * in the cache) the reference rounds there too. The conv is also checked bit for bit against the
 * dense CausalConvWithState run on each sequence alone. PagedAttention runs over shuffled
 * physical pages prefilled with garbage: pages and slots the call must not write stay
 * bit-identical, written slots are checked, and a sequence alone gives the same bits as packed
 * with others; 1 vs 3 threads is bit-exact. A row gives the same bits however its sequence is
 * chunked (whole prefill, continued from several pasts, decode), whatever shares its tiles.
 *
 * Tolerances (u = 2^-24 for f32; the unit roundoff of the IO dtype, 2^-11 for f16 and 2^-8 for
 * bf16, when it is narrower; values here are O(1): inputs in [-2, 2], weights in [-1, 1] and
 * [0.5, 1.5], RMS-normed rows; bounds scale with max(scale, 1)):
 *  - VarlenCausalConvWithState: K <= 4 products and a bias summed in f32 (5 u, so 1e-5 for f32),
 *    then the output rounded once to its dtype: half an ulp, up to 2^-8 relative in bf16; the
 *    reference rounds nothing, so allow two ulps (the f32 value may straddle a tie): 2 x 2^-8 =
 *    7.8e-3, so 8e-3 of the scale for f16 and bf16 alike (f16 is 8x inside it).
 *  - PagedAttention output (pa_tol): f32: a sum of n f32 terms is within n u of exact relative to
 *    its terms' magnitudes (Higham §3.1), O(scale) here; the longest chain is the softmax over
 *    past + ql <= 110 keys (in 4 key blocks: 4 rescales and their exponentials), a head dim <=
 *    32, and about 10 norm and rotary steps: ~170 u = 1e-5, so 2e-5. f16/bf16: the stored query and
 * key, their normed and rotated copies and the output are each rounded to the IO dtype: up to about
 * 8 roundings of O(scale) values on the path to an output: 8 x 2^-11 = 3.9e-3 (f16: 4e-3), 8 x 2^-8
 * = 3.1e-2 (bf16: 3e-2).
 *  - the written key slots (key_tol): one rounding of a normed, rotated key to the IO dtype. The
 *    kernel's f32 value and the reference's float64 one may straddle a rounding boundary: one
 *    ulp of the element in f16/bf16. Before that rounding, the f32 arithmetic: the norm's sum of
 *    D squares and about 8 more roundings, (D / 2 + 8) u relative, of elements at most
 *    1.5 sqrt(D) (norm weight <= 1.5): the f32 bound, and the slack added to the ulp. Values
 *    are copies: exact.
 *  - against GroupQueryAttention: exact (both call attend_rows, kernels/attend.h, on the same f32
 *    rows; a row's bits depend neither on its tile nor on where its keys are read from).
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "paged_testing.h"

static double worst_pa = 0.0, worst_conv = 0.0;

/* ================================ VarlenCausalConvWithState ================================= */

typedef struct vc_case {
  ph_dtype dt;
  int B, C, K, dil, silu, bias;
  const int32_t *lens;
} vc_case;

typedef struct vc_io {
  tensor *in[6], *out[3];
  gattr attrs[3];
  gnode node;
  int32_t cu[16];
  int64_t N, P;
} vc_io;

static void vc_build(const vc_case *c, vc_io *io, uint64_t seed) {
  memset(io, 0, sizeof *io);
  rng r = rng_seed(seed);
  io->cu[0] = 0;
  for (int b = 0; b < c->B; b++) io->cu[b + 1] = io->cu[b] + c->lens[b];
  io->N = io->cu[c->B];
  io->P = (int64_t)(c->K - 1) * c->dil;
  int64_t xd[2] = {io->N, c->C}, wd[3] = {c->C, 1, c->K}, bd[1] = {c->C};
  int64_t sd[3] = {c->B, c->C, io->P};
  io->in[0] = tensor_rand(c->dt, 2, xd, &r, -2.0f, 2.0f);
  io->in[1] = tensor_rand(c->dt, 3, wd, &r, -1.0f, 1.0f);
  io->in[2] = tensor_i32(c->B + 1, io->cu);
  if (c->bias) io->in[3] = tensor_rand(c->dt, 1, bd, &r, -0.5f, 0.5f);
  io->in[4] = tensor_rand(c->dt, 3, sd, &r, -2.0f, 2.0f);
  int na = 0;
  io->attrs[na++] = attr_string("activation", c->silu ? "silu" : "none");
  io->attrs[na++] = attr_int("dilation", c->dil);
  io->node = op_test_node("VarlenCausalConvWithState", "com.microsoft", 5, 2, io->attrs, na);
}

/* float64 reference from abi.md §3: tap j of local token t reads x_full[t + j*dil] where
 * x_full = state ++ the sequence's own rows. */
static void vc_reference(const vc_case *c, const vc_io *io, double *y, double *st) {
  const int64_t P = io->P, C = c->C, K = c->K;
  for (int b = 0; b < c->B; b++) {
    const int64_t r0 = io->cu[b], L = c->lens[b];
    for (int64_t ch = 0; ch < C; ch++) {
      for (int64_t t = 0; t < L + P; t++) {
        /* x_full position t */
        double v = t < P ? tensor_at(io->in[4], ((int64_t)b * C + ch) * P + t)
                         : tensor_at(io->in[0], (r0 + t - P) * C + ch);
        if (t >= L) st[((int64_t)b * C + ch) * P + (t - L)] = v;
      }
      for (int64_t t = 0; t < L; t++) {
        double acc = c->bias ? tensor_at(io->in[3], ch) : 0.0;
        for (int64_t j = 0; j < K; j++) {
          int64_t pos = t + j * c->dil; /* in x_full */
          double v = pos < P ? tensor_at(io->in[4], ((int64_t)b * C + ch) * P + pos)
                             : tensor_at(io->in[0], (r0 + pos - P) * C + ch);
          acc += tensor_at(io->in[1], ch * K + j) * v;
        }
        if (c->silu) acc = acc / (1.0 + exp(-acc));
        y[(r0 + t) * C + ch] = acc;
      }
    }
  }
}

static void vc_free(vc_io *io) {
  tensors_free(io->in, 6);
  tensors_free(io->out, 3);
}

/* The dense op on sequence b alone: input [1,C,L] channels-first, past [1,C,P]. */
static void vc_dense_check(const vc_case *c, const vc_io *io, int b) {
  const int64_t L = c->lens[b], C = c->C, P = io->P, r0 = io->cu[b];
  if (L == 0) return;
  int64_t xd[3] = {1, C, L}, sd[3] = {1, C, P};
  tensor *in[4] = {tensor_new(c->dt, 3, xd), io->in[1], io->in[3], tensor_new(c->dt, 3, sd)};
  tensor *out[2] = {NULL, NULL};
  for (int64_t ch = 0; ch < C; ch++) {
    for (int64_t t = 0; t < L; t++)
      tensor_set_f32(in[0], ch * L + t, tensor_get_f32(io->in[0], (r0 + t) * C + ch));
    for (int64_t p = 0; p < P; p++)
      tensor_set_f32(in[3], ch * P + p, tensor_get_f32(io->in[4], ((int64_t)b * C + ch) * P + p));
  }
  gattr a[2] = {attr_string("activation", c->silu ? "silu" : "none"), attr_int("dilation", c->dil)};
  gnode n = op_test_node("CausalConvWithState", "com.microsoft", 4, 2, a, 2);
  diag d = {0};
  CHECK_STATUS(op_test_run(&n, in, out, 1, &d), PH_OK, d.msg);
  int ok = 1;
  for (int64_t ch = 0; ch < C && out[0]; ch++) {
    for (int64_t t = 0; t < L; t++) {
      float x = tensor_get_f32(out[0], ch * L + t),
            y = tensor_get_f32(io->out[0], (r0 + t) * C + ch);
      if (memcmp(&x, &y, sizeof x) != 0) ok = 0;
    }
    for (int64_t p = 0; p < P; p++) {
      float x = tensor_get_f32(out[1], ch * P + p);
      float y = tensor_get_f32(io->out[1], ((int64_t)b * C + ch) * P + p);
      if (memcmp(&x, &y, sizeof x) != 0) ok = 0;
    }
  }
  CHECK(ok); /* bit-identical to the dense op on the sequence alone */
  tensor_free(in[0]);
  tensor_free(in[3]);
  tensors_free(out, 2);
}

static void vc_run_case(const vc_case *c, uint64_t seed) {
  vc_io io;
  vc_build(c, &io, seed);
  diag d = {0};
  CHECK_STATUS(op_test_run(&io.node, io.in, io.out, 1, &d), PH_OK, d.msg);
  if (!io.out[0]) {
    vc_free(&io);
    return;
  }
  const int64_t ny = io.N * c->C, ns = (int64_t)c->B * c->C * io.P;
  double *y = calloc((size_t)ny + 1, sizeof(double)), *st = calloc((size_t)ns + 1, sizeof(double));
  vc_reference(c, &io, y, st);
  double scale = 0.0, err = tensor_max_abs_diff(io.out[0], y, ny, &scale);
  double tol = /* see the top */
      c->dt == PH_DTYPE_F32 ? 1e-5 * (scale > 1 ? scale : 1) : 8e-3 * (scale > 1 ? scale : 1);
  CHECK(err <= tol);
  if (err > tol) fprintf(stderr, "       conv err %g tol %g\n", err, tol);
  if (err / (scale > 1 ? scale : 1) > worst_conv) worst_conv = err / (scale > 1 ? scale : 1);
  /* the state only ever holds values of dtype T: exact */
  CHECK(tensor_max_abs_diff(io.out[1], st, ns, NULL) == 0.0);
  for (int b = 0; b < c->B; b++) vc_dense_check(c, &io, b);

  /* 3 threads: bit-exact; final_state aliasing initial_state: same bits */
  tensor *o3[3] = {NULL, NULL, NULL};
  CHECK_STATUS(op_test_run(&io.node, io.in, o3, 3, &d), PH_OK, d.msg);
  CHECK(tensor_same_bits(o3[0], io.out[0]) && tensor_same_bits(o3[1], io.out[1]));
  tensors_free(o3, 3);
  tensor *state = tensor_clone(io.in[4]), *saved = io.in[4];
  io.in[4] = state;
  tensor *oa[3] = {NULL, state, NULL};
  CHECK_STATUS(op_test_run(&io.node, io.in, oa, 2, &d), PH_OK, d.msg);
  CHECK(tensor_same_bits(oa[0], io.out[0]) && tensor_same_bits(state, io.out[1]));
  tensor_free(oa[0]);
  io.in[4] = saved;
  tensor_free(state);
  free(y);
  free(st);
  vc_free(&io);
}

static void test_varlen_conv_reference_and_dense(void) {
  static const int32_t l1[] = {1}, l2[] = {3, 20}, l3[] = {5, 0, 17}, l4[] = {0, 0, 4, 1};
  static const int32_t l5[] = {70, 33, 2, 64}; /* past the f32 path's 32-token tasks */
  vc_case cs[] = {
      {PH_DTYPE_F32, 1, 8, 4, 1, 1, 1, l1},
      {PH_DTYPE_F32, 2, 37, 4, 1, 1, 1, l2},
      {PH_DTYPE_F32, 3, 19, 4, 2, 0, 0, l3},
      {PH_DTYPE_F32, 4, 16, 3, 2, 1, 1, l4},
      {PH_DTYPE_F16, 3, 20, 4, 1, 1, 1, l3},
      {PH_DTYPE_BF16, 2, 33, 4, 2, 1, 0, l2},
      {PH_DTYPE_F32, 2, 5, 1, 1, 1, 1, l2}, /* K = 1: empty state */
      /* more channels than one task's block (VC_BLOCK 64), the last block partial */
      {PH_DTYPE_F32, 3, 150, 4, 1, 1, 1, l3},
      {PH_DTYPE_BF16, 2, 130, 4, 2, 1, 0, l2},
      /* sequences longer than one f32 task's VC_TOKENS (32), full and partial token blocks */
      {PH_DTYPE_F32, 4, 150, 4, 1, 1, 1, l5},
      {PH_DTYPE_F32, 4, 70, 4, 2, 0, 1, l5},
  };
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) vc_run_case(&cs[i], 100 + i);
}

/* A sequence of 0 tokens keeps its state; the packed result of a sequence equals it alone. */
static void test_varlen_conv_alone_vs_packed(void) {
  static const int32_t lens[] = {5, 0, 17};
  vc_case c = {PH_DTYPE_F32, 3, 24, 4, 2, 1, 1, lens};
  vc_io io;
  vc_build(&c, &io, 7);
  diag d = {0};
  CHECK_STATUS(op_test_run(&io.node, io.in, io.out, 2, &d), PH_OK, d.msg);
  /* sequence 1 (empty): final state == initial state */
  const int64_t C = c.C, P = io.P;
  CHECK(memcmp((char *)io.out[1]->data + (size_t)(C * P) * 4,
               (char *)io.in[4]->data + (size_t)(C * P) * 4, (size_t)(C * P) * 4) == 0);
  /* sequence 2 alone */
  static const int32_t one[] = {17};
  vc_case c1 = {PH_DTYPE_F32, 1, 24, 4, 2, 1, 1, one};
  vc_io a;
  vc_build(&c1, &a, 8);
  memcpy(a.in[0]->data, (float *)io.in[0]->data + 5 * C, (size_t)(17 * C) * 4);
  memcpy(a.in[1]->data, io.in[1]->data, (size_t)(C * 4) * 4);
  memcpy(a.in[3]->data, io.in[3]->data, (size_t)C * 4);
  memcpy(a.in[4]->data, (float *)io.in[4]->data + 2 * C * P, (size_t)(C * P) * 4);
  CHECK_STATUS(op_test_run(&a.node, a.in, a.out, 1, &d), PH_OK, d.msg);
  CHECK(memcmp(a.out[0]->data, (float *)io.out[0]->data + 5 * C, (size_t)(17 * C) * 4) == 0);
  CHECK(memcmp(a.out[1]->data, (float *)io.out[1]->data + 2 * C * P, (size_t)(C * P) * 4) == 0);
  vc_free(&a);
  vc_free(&io);
}

static void test_varlen_conv_errors(void) {
  static const int32_t lens[] = {3, 4};
  vc_case c = {PH_DTYPE_F32, 2, 8, 4, 1, 1, 1, lens};
  vc_io io;
  vc_build(&c, &io, 9);
  diag d = {0};
  int32_t *cu = io.in[2]->data;
  static const int32_t bad[][3] = {{1, 3, 7}, {0, 5, 3}, {0, 3, 6}};
  for (int i = 0; i < 3; i++) {
    memcpy(cu, bad[i], sizeof bad[i]);
    tensor *o[3] = {NULL, NULL, NULL};
    CHECK_STATUS(op_test_run(&io.node, io.in, o, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "cumulative_sequence_length");
    /* run time (offsets not visible to infer): same typed error */
    CHECK_STATUS(op_test_run_ex(&io.node, io.in, o, 1, 0u, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    tensors_free(o, 3);
  }
  cu[0] = 0, cu[1] = 3, cu[2] = 7;
  tensor *st = io.in[4];
  io.in[4] = NULL;
  tensor *o[3] = {NULL, NULL, NULL};
  CHECK_STATUS(op_test_run(&io.node, io.in, o, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "initial_state");
  io.in[4] = st;
  gattr a[2] = {attr_string("activation", "silu"), attr_int("state_update_capacity", 2)};
  gnode n = op_test_node("VarlenCausalConvWithState", "com.microsoft", 5, 2, a, 2);
  /* capacity without capture_count (capture itself: test_gdn_capture) */
  CHECK_STATUS(op_test_run(&n, io.in, o, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "capture_count");
  gattr a2[1] = {attr_string("activation", "gelu")};
  n = op_test_node("VarlenCausalConvWithState", "com.microsoft", 5, 2, a2, 1);
  CHECK_STATUS(op_test_run(&n, io.in, o, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  /* capture_count without capacity */
  int32_t cc[2] = {1, 1};
  io.in[5] = tensor_i32(2, cc);
  n = op_test_node("VarlenCausalConvWithState", "com.microsoft", 6, 2, io.attrs, 2);
  CHECK_STATUS(op_test_run(&n, io.in, o, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  /* state dtype must match */
  int64_t sd[3] = {2, 8, 3};
  tensor *s16 = tensor_new(PH_DTYPE_F16, 3, sd);
  io.in[4] = s16;
  CHECK_STATUS(op_test_run(&io.node, io.in, o, 1, &d), PH_ERR_TENSOR_DTYPE, d.msg);
  io.in[4] = st;
  tensor_free(s16);
  tensors_free(o, 3);
  vc_free(&io);
}

/* ===================================== PagedAttention ======================================== */

typedef struct pa_case {
  ph_dtype dt;
  int Hq, Hkv, D, BS, B;
  int32_t ql[PT_MAXB], past[PT_MAXB];
  int rotary, interleaved, rot, norm, sink, slots, packed, window, meta;
  int rot_off, cos_f32; /* rotary_offset; cos/sin tables in f32 whatever dt */
  float softcap, scale;
} pa_case;

typedef struct pa_io {
  tensor *in[17], *out[3];
  tensor *kc0, *vc0; /* the caches before the call */
  gattr attrs[12];
  gnode node;
  int32_t cu[PT_MAXB + 1];
  int64_t N, NP, MB, max_pos;
} pa_io;

/* Pages and table from pt_block_table (shuffled, two unused, rows padded with -1); caches are
 * garbage everywhere. */
static void pa_build(const pa_case *c, pa_io *io, uint64_t seed) {
  memset(io, 0, sizeof *io);
  rng r = rng_seed(seed);
  const int64_t D = c->D;
  tensor *bt = pt_block_table(c->B, c->ql, c->past, c->BS, &r, io->cu, &io->N, &io->NP, &io->MB,
                              &io->max_pos);
  const int64_t qw = (c->packed ? c->Hq + 2 * c->Hkv : c->Hq) * D;
  int64_t qd[2] = {io->N, qw}, kd[2] = {io->N, c->Hkv * D};
  int64_t cd[4] = {io->NP, c->BS, c->Hkv, D};
  io->in[0] = tensor_rand(c->dt, 2, qd, &r, -1.0f, 1.0f);
  if (!c->packed) {
    io->in[1] = tensor_rand(c->dt, 2, kd, &r, -1.0f, 1.0f);
    io->in[2] = tensor_rand(c->dt, 2, kd, &r, -1.0f, 1.0f);
  }
  io->in[3] = tensor_rand(c->dt, 4, cd, &r, -1.0f, 1.0f);
  io->in[4] = tensor_rand(c->dt, 4, cd, &r, -1.0f, 1.0f);
  io->in[5] = tensor_i32(c->B + 1, io->cu);
  io->in[6] = tensor_i32(c->B, c->past);
  io->in[7] = bt;
  int n_in = 8;
  if (c->rotary) {
    int64_t rd[2] = {io->max_pos, c->rot / 2};
    io->in[8] = tensor_new(c->cos_f32 ? PH_DTYPE_F32 : c->dt, 2, rd);
    io->in[9] = tensor_new(c->cos_f32 ? PH_DTYPE_F32 : c->dt, 2, rd);
    pt_fill_rope(io->in[8], io->in[9], io->max_pos, c->rot / 2);
    n_in = 10;
  }
  if (c->slots) {
    io->in[10] = pt_slot_mapping(c->B, c->ql, c->past, c->BS, io->cu, bt, io->N);
    n_in = 11;
  }
  if (c->sink) {
    int64_t hd[1] = {c->Hq};
    io->in[11] = tensor_rand(c->dt, 1, hd, &r, -1.0f, 3.0f);
    n_in = 12;
  }
  if (c->norm) {
    int64_t nd[1] = {D};
    io->in[12] = tensor_rand(c->dt, 1, nd, &r, 0.5f, 1.5f);
    io->in[13] = tensor_rand(c->dt, 1, nd, &r, 0.5f, 1.5f);
    n_in = 14;
  }
  if (c->meta) {
    int32_t m[3] = {64, 4096, 1};
    io->in[16] = tensor_i32(c->meta, m);
    n_in = 17;
  }
  io->kc0 = tensor_clone(io->in[3]);
  io->vc0 = tensor_clone(io->in[4]);
  int na = 0;
  io->attrs[na++] = attr_int("num_heads", c->Hq);
  io->attrs[na++] = attr_int("kv_num_heads", c->Hkv);
  if (c->scale != 0.0f) io->attrs[na++] = attr_float("scale", c->scale);
  if (c->softcap != 0.0f) io->attrs[na++] = attr_float("softcap", c->softcap);
  if (c->window > 0) io->attrs[na++] = attr_int("local_window_size", c->window);
  if (c->rotary) {
    io->attrs[na++] = attr_int("do_rotary", 1);
    io->attrs[na++] = attr_int("rotary_interleaved", c->interleaved);
    if (c->rot_off) io->attrs[na++] = attr_int("rotary_offset", c->rot_off);
  }
  if (c->norm) io->attrs[na++] = attr_float("qk_norm_epsilon", 1e-5f);
  io->node = op_test_node("PagedAttention", "com.microsoft", n_in, 3, io->attrs, na);
}

static void pa_free(pa_io *io) {
  tensors_free(io->in, 17);
  tensors_free(io->out, 3);
  tensor_free(io->kc0);
  tensor_free(io->vc0);
  io->kc0 = io->vc0 = NULL;
}

/* Norm then RoPE (abi.md §1.7 step 1), in double. */
static void ref_prep(const pa_case *c, const pa_io *io, double *x, const tensor *w, int64_t p) {
  const int64_t D = c->D;
  if (w) {
    double ss = 0.0;
    for (int64_t e = 0; e < D; e++) ss += x[e] * x[e];
    double inv = 1.0 / sqrt(ss / (double)D + 1e-5);
    for (int64_t e = 0; e < D; e++) x[e] = x[e] * inv * tensor_at(w, e);
  }
  if (c->rotary) pt_rope_f64(x + c->rot_off, c->rot, c->interleaved, io->in[8], io->in[9], p);
}

/* The float64 reference: kc/vc (doubles, from the input caches) get the writes, then every
 * query row attends its sequence's keys through the block table. written[slot] marks writes. */
static void pa_reference(const pa_case *c, const pa_io *io, double *out, double *kc, double *vc,
                         char *written) {
  const int64_t D = c->D, Hq = c->Hq, Hkv = c->Hkv, BS = c->BS;
  const int64_t qw = (c->packed ? Hq + 2 * Hkv : Hq) * D;
  const int32_t *bt = io->in[7]->data;
  const int64_t ncache = io->NP * BS * Hkv * D;
  for (int64_t i = 0; i < ncache; i++) {
    kc[i] = tensor_at(io->in[3], i);
    vc[i] = tensor_at(io->in[4], i);
  }
  double x[256];
  for (int b = 0; b < c->B; b++)
    for (int32_t j = 0; j < c->ql[b]; j++) {
      const int64_t row = io->cu[b] + j, p = c->past[b] + j;
      const int64_t slot =
          pt_write_slot(c->slots ? io->in[10] : NULL, io->in[7], b, row, p, c->BS, written);
      if (slot < 0) continue;
      for (int64_t g = 0; g < Hkv; g++) {
        for (int64_t e = 0; e < D; e++)
          x[e] = c->packed ? tensor_at(io->in[0], row * qw + (Hq + g) * D + e)
                           : tensor_at(io->in[1], (row * Hkv + g) * D + e);
        ref_prep(c, io, x, c->norm ? io->in[13] : NULL, p);
        for (int64_t e = 0; e < D; e++) {
          kc[(slot * Hkv + g) * D + e] = round_to_dtype(c->dt, x[e]);
          vc[(slot * Hkv + g) * D + e] =
              c->packed ? tensor_at(io->in[0], row * qw + (Hq + Hkv + g) * D + e)
                        : tensor_at(io->in[2], (row * Hkv + g) * D + e);
        }
      }
    }
  const double scale = c->scale != 0.0f ? c->scale : 1.0 / sqrt((double)D);
  double *sc = calloc((size_t)(io->MB * BS), sizeof(double));
  for (int b = 0; b < c->B; b++)
    for (int32_t j = 0; j < c->ql[b]; j++) {
      const int64_t row = io->cu[b] + j, p = c->past[b] + j;
      const int64_t lo = c->window > 0 && p - c->window + 1 > 0 ? p - c->window + 1 : 0;
      for (int64_t h = 0; h < Hq; h++) {
        const int64_t g = h / (Hq / Hkv);
        for (int64_t e = 0; e < D; e++) x[e] = tensor_at(io->in[0], row * qw + h * D + e);
        ref_prep(c, io, x, c->norm ? io->in[12] : NULL, p);
        const double sink = c->sink ? tensor_at(io->in[11], h) : 0.0;
        pt_attend_f64(x, D, kc + g * D, vc + g * D, Hkv * D, D, bt + b * io->MB, BS, lo, p, scale,
                      c->softcap, c->sink ? &sink : NULL, sc, out + (row * Hq + h) * D);
      }
    }
  free(sc);
}

static double pa_tol(ph_dtype dt, double scale) {
  double s = scale > 1.0 ? scale : 1.0;
  return dt == PH_DTYPE_F32 ? 2e-5 * s : (dt == PH_DTYPE_F16 ? 4e-3 : 3e-2) * s; /* see top */
}

/* The tolerance of one written key element whose reference value is ref (see the top). */
static double key_tol(const pa_case *c, double ref) {
  return pt_key_tol(c->dt, ref, (c->D / 2.0 + 8.0) * 0x1p-24 * 1.5 * sqrt((double)c->D));
}

/* Checks out[0] and the caches of a finished run against the reference. kcache/vcache: the
 * caches the op updated. */
static void pa_check(const pa_case *c, const pa_io *io, const tensor *out, const tensor *kcache,
                     const tensor *vcache) {
  const int64_t ncache = io->NP * c->BS * c->Hkv * c->D, nout = io->N * c->Hq * c->D;
  double *kc = calloc((size_t)ncache, sizeof(double)), *vc = calloc((size_t)ncache, sizeof(double));
  double *ro = calloc((size_t)nout + 1, sizeof(double));
  char *written = calloc((size_t)(io->NP * c->BS), 1);
  pa_reference(c, io, ro, kc, vc, written);
  double scale = 0.0, err = tensor_max_abs_diff(out, ro, nout, &scale);
  double tol = pa_tol(c->dt, scale);
  CHECK(err <= tol);
  if (err > tol) fprintf(stderr, "       paged err %g tol %g\n", err, tol);
  if (err / (scale > 1 ? scale : 1) > worst_pa) worst_pa = err / (scale > 1 ? scale : 1);
  /* slots: untouched ones bit-identical to the input; written ones exact (values are raw copies,
   * or within a rounding step when normed/rotated) */
  const int64_t slot_elems = c->Hkv * c->D;
  const size_t es = dtype_size(c->dt);
  int untouched_ok = 1, written_ok = 1;
  int64_t key_bad = 0;
  for (int64_t s = 0; s < io->NP * c->BS; s++) {
    const size_t off = (size_t)(s * slot_elems) * es, nb = (size_t)slot_elems * es;
    if (!written[s]) {
      if (memcmp((char *)kcache->data + off, (char *)io->kc0->data + off, nb) != 0 ||
          memcmp((char *)vcache->data + off, (char *)io->vc0->data + off, nb) != 0)
        untouched_ok = 0;
      continue;
    }
    for (int64_t e = 0; e < slot_elems; e++) {
      double kv = tensor_at(kcache, s * slot_elems + e), vv = tensor_at(vcache, s * slot_elems + e);
      double ke = fabs(kv - kc[s * slot_elems + e]);
      if (!(ke <= key_tol(c, kc[s * slot_elems + e]))) key_bad++; /* NaN fails too */
      if (vv != vc[s * slot_elems + e]) written_ok = 0;
      if (!c->norm && !c->rotary && kv != kc[s * slot_elems + e]) written_ok = 0;
    }
  }
  CHECK(untouched_ok);
  CHECK(written_ok);
  CHECK_EQ_INT(key_bad, 0);
  free(kc);
  free(vc);
  free(ro);
  free(written);
}

/* One case: in-place run (outputs bound to the input caches), reference check, then 3 threads
 * and non-aliased outputs give the same bits, and each sequence alone gives the same bits. */
static void pa_run_case(const pa_case *c, uint64_t seed) {
  pa_io io;
  pa_build(c, &io, seed);
  diag d = {0};
  tensor *kc = io.in[3], *vc = io.in[4];
  io.out[1] = kc;
  io.out[2] = vc;
  CHECK_STATUS(op_test_run(&io.node, io.in, io.out, 1, &d), PH_OK, d.msg);
  io.out[1] = io.out[2] = NULL;
  if (!io.out[0]) {
    pa_free(&io);
    return;
  }
  /* the reference reads the caches as they were before the call */
  tensor *after_k = tensor_clone(kc), *after_v = tensor_clone(vc);
  memcpy(kc->data, io.kc0->data, (size_t)tensor_numel(kc) * dtype_size(c->dt));
  memcpy(vc->data, io.vc0->data, (size_t)tensor_numel(vc) * dtype_size(c->dt));
  pa_check(c, &io, io.out[0], after_k, after_v);

  /* non-aliased outputs (copy then update) and 3 threads: same bits; inputs untouched */
  tensor *o3[3] = {NULL, NULL, NULL};
  CHECK_STATUS(op_test_run(&io.node, io.in, o3, 3, &d), PH_OK, d.msg);
  CHECK(tensor_same_bits(o3[0], io.out[0]) && tensor_same_bits(o3[1], after_k) &&
        tensor_same_bits(o3[2], after_v));
  CHECK(tensor_same_bits(kc, io.kc0) && tensor_same_bits(vc, io.vc0));
  tensors_free(o3, 3);

  /* each sequence alone (B = 1, its own table row; caches as before the call) */
  for (int b = 0; b < c->B && c->B > 1; b++) {
    if (c->ql[b] == 0) continue;
    tensor *in1[17], *o1[3] = {NULL, NULL, NULL};
    const int seq[1] = {b}, st[1] = {0}, cnt[1] = {c->ql[b]};
    const int64_t r0 = io.cu[b], n = c->ql[b];
    pt_sub(io.in, io.cu, c->past, io.MB, 1, seq, st, cnt, in1);
    CHECK_STATUS(op_test_run(&io.node, in1, o1, 2, &d), PH_OK, d.msg);
    if (o1[0])
      CHECK(memcmp(o1[0]->data,
                   (char *)io.out[0]->data + (size_t)(r0 * c->Hq * c->D) * dtype_size(c->dt),
                   (size_t)(n * c->Hq * c->D) * dtype_size(c->dt)) == 0);
    tensors_free(o1, 3);
    pt_sub_free(in1);
  }
  tensor_free(after_k);
  tensor_free(after_v);
  pa_free(&io);
}

static void test_paged_prefill_mixes(void) {
  /* clang-format off */
  /* dtype, query heads, kv heads, head size, block size, sequences, new rows, cached rows */
  pa_case cs[] = {
      {.dt = PH_DTYPE_F32,  2, 2, 16, 16, 1, {1},        {0}},
      {.dt = PH_DTYPE_F32,  4, 2, 16, 16, 2, {3, 20},    {0}},
      {.dt = PH_DTYPE_F32,  3, 1, 24, 32, 3, {5, 0, 17}, {0}},
      {.dt = PH_DTYPE_F32,  6, 2, 16, 16, 2, {4, 9},     {0, 37}},
      {.dt = PH_DTYPE_F16,  4, 4, 32, 16, 3, {5, 0, 17}, {2, 0, 30}},
      {.dt = PH_DTYPE_BF16, 4, 2, 16, 32, 2, {3, 20},    {40, 0}},
      {.dt = PH_DTYPE_F32,  4, 2, 16, 16, 2, {3, 20},    {0, 37}, .packed = 1},
      /* the 0.8B group (8 heads on 2): more rows than a task's chunk of 32 positions, tiles of
       * 4 positions x 4 heads across 32-key blocks */
      {.dt = PH_DTYPE_F32,  8, 2, 24, 16, 2, {70, 5},    {0, 40}},
      {.dt = PH_DTYPE_BF16, 8, 2, 16, 16, 2, {3, 66},    {29, 0}, .window = 37},
  };
  /* clang-format on */
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) pa_run_case(&cs[i], 200 + i);
}

static void test_paged_features(void) {
  /* clang-format off */
  /* dtype, query heads, kv heads, head size, block size, sequences, new rows, cached rows */
  pa_case cs[] = {
      /* slot_mapping with -1 */
      {.dt = PH_DTYPE_F32, 4, 2, 16, 16, 3, {5, 0, 17}, {3, 1, 20}, .slots = 1},
      /* local window, head_sink, softcap, scale */
      {.dt = PH_DTYPE_F32, 6, 3, 16, 16, 2, {3, 20},    {0, 37}, .window = 7},
      {.dt = PH_DTYPE_F32, 4, 1, 16, 32, 2, {6, 11},    {17, 0}, .sink = 1, .softcap = 2.5f,
       .scale = 0.7f},
      /* fused q/k norm + rotary, both pairings, partial rotary on D = 32 */
      {.dt = PH_DTYPE_F32, 4, 2, 32, 16, 2, {3, 20},    {0, 37}, .rotary = 1, .interleaved = 0,
       .rot = 16, .norm = 1},
      {.dt = PH_DTYPE_F32, 3, 3, 16, 16, 2, {5, 9},     {12, 0}, .rotary = 1, .interleaved = 1,
       .rot = 16, .norm = 1, .window = 5, .sink = 1},
      {.dt = PH_DTYPE_F16, 4, 2, 16, 16, 2, {3, 7},     {0, 20}, .rotary = 1, .interleaved = 1,
       .rot = 16, .packed = 1},
      /* rotary_offset (channels [8, 24) and [16, 32) of 32), f32 cos/sin under f16 */
      {.dt = PH_DTYPE_F32, 4, 2, 32, 16, 2, {4, 18},    {9, 0}, .rotary = 1, .interleaved = 1,
       .rot = 16, .rot_off = 8, .norm = 1},
      {.dt = PH_DTYPE_F16, 2, 1, 32, 16, 2, {7, 12},    {3, 20}, .rotary = 1, .rot = 16,
       .rot_off = 16, .cos_f32 = 1, .slots = 1},
      /* attention_metadata [2] and [3] */
      {.dt = PH_DTYPE_F32, 2, 1, 16, 16, 2, {3, 4},     {0, 5}, .meta = 2},
      {.dt = PH_DTYPE_F32, 2, 1, 16, 16, 2, {3, 4},     {0, 5}, .meta = 3},
  };
  /* clang-format on */
  for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) pa_run_case(&cs[i], 300 + i);
}

/* attention_metadata never changes a result. */
static void test_paged_metadata_no_effect(void) {
  pa_case c = {.dt = PH_DTYPE_F32,
               .Hq = 4,
               .Hkv = 2,
               .D = 16,
               .BS = 16,
               .B = 2,
               .ql = {3, 9},
               .past = {4, 30},
               .meta = 3};
  pa_io io;
  pa_build(&c, &io, 11);
  diag d = {0};
  tensor *a[3] = {NULL, NULL, NULL}, *b[3] = {NULL, NULL, NULL};
  CHECK_STATUS(op_test_run(&io.node, io.in, a, 1, &d), PH_OK, d.msg);
  gnode n = io.node;
  n.n_inputs = 8;
  CHECK_STATUS(op_test_run(&n, io.in, b, 1, &d), PH_OK, d.msg);
  CHECK(tensor_same_bits(a[0], b[0]) && tensor_same_bits(a[1], b[1]) &&
        tensor_same_bits(a[2], b[2]));
  tensors_free(a, 3);
  tensors_free(b, 3);
  pa_free(&io);
}

/* Prefill {3,20}, then feed the cache outputs back: continuation with new tokens {1,13}. */
static void test_paged_continuation(void) {
  for (int bs = 16; bs <= 32; bs *= 2) {
    pa_case c1 = {.dt = PH_DTYPE_F32,
                  .Hq = 4,
                  .Hkv = 2,
                  .D = 16,
                  .BS = bs,
                  .B = 2,
                  .ql = {3, 20},
                  .past = {0, 0},
                  .rotary = 1,
                  .rot = 16};
    pa_case c2 = c1;
    c2.ql[0] = 1, c2.ql[1] = 13, c2.past[0] = 3, c2.past[1] = 20;
    pa_io a, b;
    pa_build(&c2, &b, 41); /* pages for the whole history */
    pa_build(&c1, &a, 42);
    /* step 1 uses step 2's cache and block table (same pages, same history positions) */
    tensor_free(a.in[3]);
    tensor_free(a.in[4]);
    tensor_free(a.in[7]);
    tensor_free(a.kc0);
    tensor_free(a.vc0);
    a.in[3] = tensor_clone(b.in[3]);
    a.in[4] = tensor_clone(b.in[4]);
    a.in[7] = tensor_clone(b.in[7]);
    a.kc0 = tensor_clone(b.in[3]);
    a.vc0 = tensor_clone(b.in[4]);
    a.NP = b.NP;
    a.MB = b.MB;
    tensor_free(a.in[8]);
    tensor_free(a.in[9]);
    a.in[8] = tensor_clone(b.in[8]);
    a.in[9] = tensor_clone(b.in[9]);
    a.max_pos = b.max_pos;
    diag d = {0};
    tensor *o1[3] = {NULL, a.in[3], a.in[4]};
    CHECK_STATUS(op_test_run(&a.node, a.in, o1, 1, &d), PH_OK, d.msg);
    tensor_free(o1[0]);
    /* step 2 reads step 1's cache (in place) */
    memcpy(b.in[3]->data, a.in[3]->data, (size_t)tensor_numel(a.in[3]) * 4);
    memcpy(b.in[4]->data, a.in[4]->data, (size_t)tensor_numel(a.in[4]) * 4);
    memcpy(b.kc0->data, a.in[3]->data, (size_t)tensor_numel(a.in[3]) * 4);
    memcpy(b.vc0->data, a.in[4]->data, (size_t)tensor_numel(a.in[4]) * 4);
    tensor *o2[3] = {NULL, b.in[3], b.in[4]};
    CHECK_STATUS(op_test_run(&b.node, b.in, o2, 2, &d), PH_OK, d.msg);
    tensor *after_k = tensor_clone(b.in[3]), *after_v = tensor_clone(b.in[4]);
    memcpy(b.in[3]->data, b.kc0->data, (size_t)tensor_numel(b.kc0) * 4);
    memcpy(b.in[4]->data, b.vc0->data, (size_t)tensor_numel(b.vc0) * 4);
    if (o2[0]) pa_check(&c2, &b, o2[0], after_k, after_v);

    tensor_free(o2[0]);
    tensor_free(after_k);
    tensor_free(after_v);
    pa_free(&a);
    pa_free(&b);
  }
}

/* A row's output has the same bits however its sequence is chunked and whatever rows share its
 * tiles: one sequence prefilled whole (70 rows, 8 query heads on 2 kv heads) and, in the same
 * call, the same tokens continued from past P = 1, 29, 32, 33 and 69 (P = 69: the decode of the
 * last token), their pages preloaded with the first P keys and values (no norm, no rotary: the
 * cache holds the key rows as given, which is what the whole prefill writes). The continued
 * rows sit at other places in other tiles, task chunks and key blocks' first rows. */
static void test_paged_chunking_bits(void) {
  enum { HQ = 8, HKV = 2, D = 24, BS = 16, L = 70, NB = 6 };
  static const int32_t pasts[NB] = {0, 1, 29, 32, 33, 69};
  static const ph_dtype dts[2] = {PH_DTYPE_F32, PH_DTYPE_BF16};
  for (int di = 0; di < 2; di++) {
    const ph_dtype dt = dts[di];
    const size_t es = dtype_size(dt);
    rng r = rng_seed(77 + (uint64_t)di);
    const int64_t qd[2] = {L, HQ * D}, kd[2] = {L, HKV * D};
    tensor *qs = tensor_rand(dt, 2, qd, &r, -2.0f, 2.0f);
    tensor *ks = tensor_rand(dt, 2, kd, &r, -2.0f, 2.0f);
    tensor *vs = tensor_rand(dt, 2, kd, &r, -1.0f, 1.0f);
    int32_t cu[NB + 1] = {0}, past[NB];
    for (int b = 0; b < NB; b++) {
      past[b] = pasts[b];
      cu[b + 1] = cu[b] + L - pasts[b];
    }
    const int64_t N = cu[NB], MB = (L + BS - 1) / BS, NP = NB * MB;
    const int64_t nd[2] = {N, HQ * D}, nkd[2] = {N, HKV * D}, cd[4] = {NP, BS, HKV, D};
    const int64_t btd[2] = {NB, MB};
    tensor *in[8] = {tensor_new(dt, 2, nd), tensor_new(dt, 2, nkd),          tensor_new(dt, 2, nkd),
                     tensor_new(dt, 4, cd), tensor_new(dt, 4, cd),           tensor_i32(NB + 1, cu),
                     tensor_i32(NB, past),  tensor_new(PH_DTYPE_I32, 2, btd)};
    int32_t *bt = in[7]->data;
    for (int b = 0; b < NB; b++)
      for (int64_t m = 0; m < MB; m++) bt[b * MB + m] = (int32_t)(m * NB + (NB - 1 - b));
    char *q = in[0]->data, *k = in[1]->data, *v = in[2]->data;
    char *kc = in[3]->data, *vc = in[4]->data;
    for (int b = 0; b < NB; b++) {
      for (int64_t t = past[b]; t < L; t++) { /* the new rows: the sequence's rows P.. */
        const int64_t row = cu[b] + t - past[b];
        memcpy(q + (size_t)(row * HQ * D) * es, (char *)qs->data + (size_t)(t * HQ * D) * es,
               (size_t)(HQ * D) * es);
        memcpy(k + (size_t)(row * HKV * D) * es, (char *)ks->data + (size_t)(t * HKV * D) * es,
               (size_t)(HKV * D) * es);
        memcpy(v + (size_t)(row * HKV * D) * es, (char *)vs->data + (size_t)(t * HKV * D) * es,
               (size_t)(HKV * D) * es);
      }
      for (int64_t t = 0; t < past[b]; t++) { /* the cached rows: keys and values as given */
        const int64_t slot = (int64_t)bt[b * MB + t / BS] * BS + t % BS;
        memcpy(kc + (size_t)(slot * HKV * D) * es, (char *)ks->data + (size_t)(t * HKV * D) * es,
               (size_t)(HKV * D) * es);
        memcpy(vc + (size_t)(slot * HKV * D) * es, (char *)vs->data + (size_t)(t * HKV * D) * es,
               (size_t)(HKV * D) * es);
      }
    }
    gattr a[2] = {attr_int("num_heads", HQ), attr_int("kv_num_heads", HKV)};
    gnode n = op_test_node("PagedAttention", "com.microsoft", 8, 1, a, 2);
    for (int threads = 1; threads <= 2; threads++) {
      diag d = {0};
      tensor *o[1] = {NULL};
      CHECK_STATUS(op_test_run(&n, in, o, threads, &d), PH_OK, d.msg);
      if (!o[0]) continue;
      const char *out = o[0]->data;
      const size_t row_bytes = (size_t)(HQ * D) * es;
      for (int b = 1; b < NB; b++) {
        int same = 1;
        for (int64_t t = past[b]; t < L; t++)
          same &= memcmp(out + (size_t)(cu[b] + t - past[b]) * row_bytes,
                         out + (size_t)t * row_bytes, row_bytes) == 0;
        if (!same)
          printf("  FAIL %s, %d thread(s): rows continued from past %d differ from the whole "
                 "prefill's\n",
                 dtype_label(dt), threads, (int)past[b]);
        CHECK(same);
      }
      tensors_free(o, 1);
    }
    tensors_free(in, 8);
    tensor_free(qs);
    tensor_free(ks);
    tensor_free(vs);
  }
}

/* Single sequence, no past: PagedAttention equals GroupQueryAttention. */
static void test_paged_vs_gqa(void) {
  static const int ratios[3][2] = {{2, 2}, {4, 2}, {6, 2}};
  for (int k = 0; k < 3; k++) {
    const int Hq = ratios[k][0], Hkv = ratios[k][1], D = 16, S = 19;
    pa_case c = {.dt = PH_DTYPE_F32,
                 .Hq = Hq,
                 .Hkv = Hkv,
                 .D = D,
                 .BS = 16,
                 .B = 1,
                 .ql = {S},
                 .window = k == 2 ? 6 : 0};
    pa_io io;
    pa_build(&c, &io, 500 + (uint64_t)k);
    diag d = {0};
    CHECK_STATUS(op_test_run(&io.node, io.in, io.out, 1, &d), PH_OK, d.msg);
    int64_t qd[3] = {1, S, Hq * D}, kd[3] = {1, S, Hkv * D}, one[1] = {1};
    tensor *g[7] = {tensor_new(PH_DTYPE_F32, 3, qd),
                    tensor_new(PH_DTYPE_F32, 3, kd),
                    tensor_new(PH_DTYPE_F32, 3, kd),
                    NULL,
                    NULL,
                    tensor_new(PH_DTYPE_I32, 1, one),
                    tensor_new(PH_DTYPE_I32, 1, one)};
    memcpy(g[0]->data, io.in[0]->data, (size_t)(S * Hq * D) * 4);
    memcpy(g[1]->data, io.in[1]->data, (size_t)(S * Hkv * D) * 4);
    memcpy(g[2]->data, io.in[2]->data, (size_t)(S * Hkv * D) * 4);
    ((int32_t *)g[5]->data)[0] = S - 1;
    ((int32_t *)g[6]->data)[0] = S;
    gattr a[3] = {attr_int("num_heads", Hq), attr_int("kv_num_heads", Hkv),
                  attr_int("local_window_size", c.window > 0 ? c.window : -1)};
    gnode n = op_test_node("GroupQueryAttention", "com.microsoft", 7, 3, a, 3);
    tensor *go[3] = {NULL, NULL, NULL};
    CHECK_STATUS(op_test_run(&n, g, go, 1, &d), PH_OK, d.msg);
    if (go[0] && io.out[0]) {
      double *ref = calloc((size_t)(S * Hq * D), sizeof(double));
      for (int64_t i = 0; i < S * Hq * D; i++) ref[i] = tensor_at(go[0], i);
      double scale = 0.0, err = tensor_max_abs_diff(io.out[0], ref, S * Hq * D, &scale);
      CHECK(err == 0); /* the same attend_rows arithmetic on the same rows: see the top */
      free(ref);
    }
    tensors_free(go, 3);
    tensors_free(g, 7);
    pa_free(&io);
  }
}

static void test_paged_errors(void) {
  pa_case c = {.dt = PH_DTYPE_F32,
               .Hq = 4,
               .Hkv = 2,
               .D = 16,
               .BS = 16,
               .B = 2,
               .ql = {3, 20},
               .past = {0, 5},
               .meta = 3};
  pa_io io;
  pa_build(&c, &io, 77);
  diag d = {0};
  CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_OK, d.msg);

  /* attributes */
  static const struct {
    const char *name, *sval;
    int64_t ival;
    ph_status want;
  } bad_attrs[] = {
      {"kv_cache_layout", "LATENT", 0, PH_ERR_INVALID_ARGUMENT}, /* kv_num_heads 2, a value */
      {"kv_cache_layout", "BLOCKED", 0, PH_ERR_INVALID_ARGUMENT},
      {"is_causal", NULL, 0, PH_ERR_UNSUPPORTED},
      {"k_quant_type", "PER_TENSOR", 0, PH_ERR_UNSUPPORTED},
      {"v_quant_type", "PER_CHANNEL", 0, PH_ERR_UNSUPPORTED},
      {"v_head_size", NULL, 8, PH_ERR_INVALID_ARGUMENT},
      {"local_window_size", NULL, 0, PH_ERR_INVALID_ARGUMENT},
      {"rotary_offset", NULL, 4, PH_ERR_INVALID_ARGUMENT},
  };
  for (size_t i = 0; i < sizeof bad_attrs / sizeof bad_attrs[0]; i++) {
    gattr a[3] = {attr_int("num_heads", 4), attr_int("kv_num_heads", 2),
                  bad_attrs[i].sval ? attr_string(bad_attrs[i].name, bad_attrs[i].sval)
                                    : attr_int(bad_attrs[i].name, bad_attrs[i].ival)};
    gnode n = op_test_node("PagedAttention", "com.microsoft", io.node.n_inputs, 3, a, 3);
    CHECK_STATUS(pt_try(&n, io.in, &d), bad_attrs[i].want, d.msg);
  }
  {
    gattr a[2] = {attr_int("num_heads", 3), attr_int("kv_num_heads", 2)};
    gnode n = op_test_node("PagedAttention", "com.microsoft", io.node.n_inputs, 3, a, 2);
    CHECK_STATUS(pt_try(&n, io.in, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  }
  CHECK_CONTAINS(d.msg, "num_heads");

  /* shapes: block_size 8 and 24, head size 12, block table rows */
  {
    tensor *kc = io.in[3], *vc = io.in[4];
    static const int64_t bss[2] = {8, 24};
    for (int i = 0; i < 2; i++) {
      int64_t cd[4] = {io.NP, bss[i], 2, 16};
      io.in[3] = tensor_new(PH_DTYPE_F32, 4, cd);
      io.in[4] = tensor_new(PH_DTYPE_F32, 4, cd);
      CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_ERR_TENSOR_SHAPE, d.msg);
      CHECK_CONTAINS(d.msg, "block_size");
      tensor_free(io.in[3]);
      tensor_free(io.in[4]);
    }
    io.in[3] = kc;
    io.in[4] = vc;
  }
  {
    pa_case c12 = c;
    c12.D = 12;
    pa_io o;
    pa_build(&c12, &o, 78);
    CHECK_STATUS(pt_try(&o.node, o.in, &d), PH_ERR_TENSOR_SHAPE, d.msg);
    CHECK_CONTAINS(d.msg, "multiple of 8");
    pa_free(&o);
  }
  {
    tensor *bt = io.in[7];
    int64_t btd[2] = {3, io.MB};
    io.in[7] = tensor_new(PH_DTYPE_I32, 2, btd);
    CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_ERR_TENSOR_SHAPE, d.msg);
    tensor_free(io.in[7]);
    io.in[7] = bt;
  }

  /* data: checked before any write, so the caches stay untouched */
  int32_t *cu = io.in[5]->data, *past = io.in[6]->data, *bt = io.in[7]->data;
  const int32_t save_b1 = bt[io.MB], save_p1 = past[1];
  past[1] = (int32_t)(io.MB * 16); /* beyond the table */
  CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  past[1] = -1;
  CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  past[1] = save_p1;
  bt[io.MB] = (int32_t)io.NP; /* block id out of range */
  CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "block_table");
  bt[io.MB] = -1;
  CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  bt[io.MB] = save_b1;
  cu[0] = 1;
  CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  cu[0] = 0;
  cu[1] = 30;
  CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  cu[1] = 3;
  CHECK(tensor_same_bits(io.in[3], io.kc0) && tensor_same_bits(io.in[4], io.vc0));
  /* attention_metadata */
  int32_t *md = io.in[16]->data;
  md[0] = -1;
  CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  {
    /* the metadata is a graph input, not a constant: only run() sees its values */
    tensor *o[3] = {NULL, NULL, NULL};
    CHECK_STATUS(op_test_run_ex(&io.node, io.in, o, 1, 0u, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "attention_metadata[0] = -1");
    tensors_free(o, 3);
  }
  md[0] = 64;
  md[2] = 5000;
  CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  {
    tensor *o[3] = {NULL, NULL, NULL};
    CHECK_STATUS(op_test_run_ex(&io.node, io.in, o, 1, 0u, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "max_kv_len_lower_bound");
    tensors_free(o, 3);
  }
  md[2] = 1;
  {
    int32_t m4[4] = {1, 2, 3, 4};
    tensor *m = io.in[16];
    io.in[16] = tensor_i32(4, m4);
    CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_ERR_TENSOR_SHAPE, d.msg);
    tensor_free(io.in[16]);
    io.in[16] = m;
  }
  /* slot_mapping out of range; quant scales; dtype mismatch */
  {
    int32_t s[23];
    for (int i = 0; i < 23; i++) s[i] = -1;
    s[5] = (int32_t)(io.NP * 16);
    io.in[10] = tensor_i32(23, s);
    CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "slot_mapping");
    s[5] = -1;
    memcpy(io.in[10]->data, s, sizeof s);
    CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_OK, d.msg); /* every write skipped */
    tensor_free(io.in[10]);
    io.in[10] = NULL;
    int64_t one[1] = {1};
    io.in[14] = tensor_new(PH_DTYPE_F32, 1, one);
    CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    tensor_free(io.in[14]);
    io.in[14] = NULL;
    tensor *kc = io.in[3];
    int64_t cd[4] = {io.NP, 16, 2, 16};
    io.in[3] = tensor_new(PH_DTYPE_F16, 4, cd);
    CHECK_STATUS(pt_try(&io.node, io.in, &d), PH_ERR_TENSOR_DTYPE, d.msg);
    tensor_free(io.in[3]);
    io.in[3] = kc;
  }
  pa_free(&io);
}

int main(void) {
  RUN(test_varlen_conv_reference_and_dense);
  RUN(test_varlen_conv_alone_vs_packed);
  RUN(test_varlen_conv_errors);
  RUN(test_paged_prefill_mixes);
  RUN(test_paged_features);
  RUN(test_paged_metadata_no_effect);
  RUN(test_paged_continuation);
  RUN(test_paged_chunking_bits);
  RUN(test_paged_vs_gqa);
  RUN(test_paged_errors);
  printf("worst relative error: paged %.3g, varlen conv %.3g\n", worst_pa, worst_conv);
  return check_finish();
}
