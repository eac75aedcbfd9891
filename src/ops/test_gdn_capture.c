/* test_gdn_capture — GatedDeltaNet's uniform spelling and the compact state updates of both
 * GatedDeltaNet (output 2, the recurrent capsule) and VarlenCausalConvWithState (output 2, the
 * captured input rows), with the replay of kernels/state_replay.h (spec/abi.md §2.2, §2.5, §3).
 *
 * Everything here is bit for bit (memcmp), never a tolerance: the uniform [B,S,H,D] spelling
 * against the ragged spelling of the same data; a capturing sequence's outputs and final state
 * against the same tokens run one per call; replaying a captured prefix against the state the op
 * produces after that prefix one token per call; capture inactive or C = 0 against each other.
 * Every kernel variant this CPU runs is forced in turn (kernel_force_variant).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "kernels/dispatch.h"
#include "kernels/state_replay.h"
#include "op_testing.h"

enum { IQ, IK, IV, ICU, IDECAY, IBETA, ISTATE, IALOG, IDTB, ICAP, IACT, NIN };

/* A GatedDeltaNet case: gated_delta, qwen gate, sigmoid beta, in-op l2 norm. */
typedef struct gcase {
  int64_t Hq, ratio, Dk, Dv;
  int nseq;
  int64_t lens[8];
  ph_dtype dt;
} gcase;

static tensor *mk(ph_dtype dt, int rank, int64_t a, int64_t b, int64_t c, int64_t e) {
  int64_t d[4] = {a, b, c, e};
  return tensor_new(dt, rank, d);
}

static int64_t total(const gcase *c) {
  int64_t n = 0;
  for (int i = 0; i < c->nseq; i++) n += c->lens[i];
  return n;
}

/* Inputs 0..8 of a case (packed, rank 3, with cu_seqlens and an initial state). */
static void gdn_inputs(const gcase *c, uint64_t seed, tensor **in) {
  rng r = rng_seed(seed);
  int64_t N = total(c), Hv = c->Hq * c->ratio;
  memset(in, 0, NIN * sizeof *in);
  in[IQ] = mk(c->dt, 3, N, c->Hq, c->Dk, 0);
  in[IK] = mk(c->dt, 3, N, c->Hq, c->Dk, 0);
  in[IV] = mk(c->dt, 3, N, Hv, c->Dv, 0);
  tensor_fill_uniform(in[IQ], &r, -1.0f, 1.0f);
  tensor_fill_uniform(in[IK], &r, -1.0f, 1.0f);
  tensor_fill_uniform(in[IV], &r, -1.0f, 1.0f);
  in[ICU] = mk(PH_DTYPE_I32, 1, c->nseq + 1, 0, 0, 0);
  int32_t *cu = in[ICU]->data;
  for (int i = 0; i < c->nseq; i++) cu[i + 1] = cu[i] + (int32_t)c->lens[i];
  in[IDECAY] = mk(PH_DTYPE_F32, 2, N, Hv, 0, 0);
  tensor_fill_uniform(in[IDECAY], &r, -3.0f, 3.0f);
  in[IBETA] = mk(PH_DTYPE_F32, 2, N, Hv, 0, 0);
  tensor_fill_uniform(in[IBETA], &r, -3.0f, 3.0f);
  in[ISTATE] = mk(PH_DTYPE_F32, 4, c->nseq, Hv, c->Dv, c->Dk);
  tensor_fill_uniform(in[ISTATE], &r, -0.5f, 0.5f);
  in[IALOG] = mk(PH_DTYPE_F32, 1, Hv, 0, 0, 0);
  in[IDTB] = mk(PH_DTYPE_F32, 1, Hv, 0, 0, 0);
  tensor_fill_uniform(in[IALOG], &r, -1.5f, 0.5f);
  tensor_fill_uniform(in[IDTB], &r, -1.0f, 1.0f);
}

/* GatedDeltaNet with capacity C (0: no attribute), chunk_size chunk (0: default). */
static ph_status gdn_run(int64_t C, int64_t chunk, tensor **in, int n_in, tensor **out, int n_out,
                         int threads, diag *d) {
  gattr attrs[6];
  int na = 0;
  attrs[na++] = attr_string("update_rule", "gated_delta");
  attrs[na++] = attr_string("gate_activation", "qwen");
  attrs[na++] = attr_string("beta_activation", "sigmoid");
  attrs[na++] = attr_int("qk_l2_norm", 1);
  if (C) attrs[na++] = attr_int("state_update_capacity", C);
  if (chunk) attrs[na++] = attr_int("chunk_size", chunk);
  gnode n = op_test_node("GatedDeltaNet", "com.microsoft", n_in, n_out, attrs, na);
  return op_test_run(&n, in, out, threads, d);
}

static tensor *reshaped(const tensor *t, int rank, const int64_t *dims) {
  tensor *c = tensor_new(t->dtype, rank, dims);
  if (CHECK(tensor_numel(c) == tensor_numel(t))) memcpy(c->data, t->data, tensor_bytes(t));
  return c;
}

/* ---- the uniform spelling -------------------------------------------------------------------- */

/* [B,S,H,D] without cu_seqlens, and [N,H,D] without it (B from initial_state), against the
 * ragged spelling of the same data with cu_seqlens: the same bits. */
static void test_gdn_uniform(void) {
  static const int64_t shapes[][3] = {{3, 1, 1}, {2, 5, 2}, {1, 70, 1}, {4, 2, 3}};
  for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
    int64_t B = shapes[si][0], S = shapes[si][1];
    gcase c = {2, shapes[si][2], 16, 8, (int)B, {0}, PH_DTYPE_BF16};
    for (int b = 0; b < B; b++) c.lens[b] = S;
    int64_t Hv = c.Hq * c.ratio;
    tensor *in[NIN], *ref[2] = {NULL, NULL};
    gdn_inputs(&c, 40 + si, in);
    diag d;
    memset(&d, 0, sizeof d);
    CHECK_STATUS(gdn_run(0, 16, in, 9, ref, 2, 2, &d), PH_OK, d.msg);
    /* rank 4, no cu_seqlens */
    tensor *u[NIN];
    memcpy(u, in, sizeof u);
    int64_t dq[4] = {B, S, c.Hq, c.Dk}, dv[4] = {B, S, Hv, c.Dv}, dg[3] = {B, S, Hv};
    u[IQ] = reshaped(in[IQ], 4, dq);
    u[IK] = reshaped(in[IK], 4, dq);
    u[IV] = reshaped(in[IV], 4, dv);
    u[IDECAY] = reshaped(in[IDECAY], 3, dg);
    u[IBETA] = reshaped(in[IBETA], 3, dg);
    u[ICU] = NULL;
    tensor *o4[2] = {NULL, NULL};
    CHECK_STATUS(gdn_run(0, 16, u, 9, o4, 2, 3, &d), PH_OK, d.msg);
    if (o4[0] && ref[0]) {
      CHECK_EQ_INT(o4[0]->rank, 4);
      int64_t want[4] = {B, S, Hv, c.Dv};
      for (int i = 0; i < 4; i++) CHECK_EQ_INT(o4[0]->dims[i], want[i]);
      CHECK(memcmp(o4[0]->data, ref[0]->data, tensor_bytes(ref[0])) == 0);
      CHECK(tensor_same_bits(o4[1], ref[1]));
    }
    /* rank 4 without initial_state: B from the query; against ragged without a state */
    tensor *ref0[2] = {NULL, NULL}, *o40[2] = {NULL, NULL};
    tensor *keep = in[ISTATE];
    in[ISTATE] = u[ISTATE] = NULL;
    CHECK_STATUS(gdn_run(0, 16, in, 9, ref0, 2, 1, &d), PH_OK, d.msg);
    CHECK_STATUS(gdn_run(0, 16, u, 9, o40, 2, 1, &d), PH_OK, d.msg);
    if (o40[0] && ref0[0]) {
      CHECK(memcmp(o40[0]->data, ref0[0]->data, tensor_bytes(ref0[0])) == 0);
      CHECK(memcmp(o40[1]->data, ref0[1]->data, tensor_bytes(ref0[1])) == 0);
    }
    in[ISTATE] = u[ISTATE] = keep;
    /* rank 3 without cu_seqlens: B from initial_state */
    tensor *x[NIN], *o3[2] = {NULL, NULL};
    memcpy(x, in, sizeof x);
    x[ICU] = NULL;
    CHECK_STATUS(gdn_run(0, 16, x, 9, o3, 2, 2, &d), PH_OK, d.msg);
    CHECK(tensor_same_bits(o3[0], ref[0]) && tensor_same_bits(o3[1], ref[1]));
    /* rank 4 with cu_seqlens: ragged packing needs rank 3 */
    u[ICU] = in[ICU];
    tensor *oe[2] = {NULL, NULL};
    CHECK_STATUS(gdn_run(0, 16, u, 9, oe, 2, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "rank-3");
    u[ICU] = NULL;
    /* rank-4 q with rank-2 decay */
    tensor *g2 = u[IDECAY];
    u[IDECAY] = in[IDECAY];
    CHECK_STATUS(gdn_run(0, 16, u, 9, oe, 2, 1, &d), PH_ERR_TENSOR_SHAPE, d.msg);
    CHECK_CONTAINS(d.msg, "decay [B,S,Hv]");
    u[IDECAY] = g2;
    tensors_free(oe, 2);
    tensors_free(o3, 2);
    tensors_free(o40, 2);
    tensors_free(ref0, 2);
    tensors_free(o4, 2);
    tensors_free(ref, 2);
    tensor *mine[5] = {u[IQ], u[IK], u[IV], u[IDECAY], u[IBETA]};
    tensors_free(mine, 5);
    tensors_free(in, NIN);
  }
}

/* ---- GatedDeltaNet capture ------------------------------------------------------------------ */

/* Sequence b's tokens [t0, t0+L) of in as a batch of one (rank 3, cu_seqlens [0, L]) with
 * initial state st (f32 [Hv,Dv,Dk]). */
static void gdn_slice(const gcase *c, tensor **in, int64_t t0, int64_t L, const float *st,
                      tensor **x) {
  int64_t Hv = c->Hq * c->ratio;
  size_t es = dtype_size(c->dt);
  memset(x, 0, NIN * sizeof *x);
  x[IQ] = mk(c->dt, 3, L, c->Hq, c->Dk, 0);
  x[IK] = mk(c->dt, 3, L, c->Hq, c->Dk, 0);
  x[IV] = mk(c->dt, 3, L, Hv, c->Dv, 0);
  memcpy(x[IQ]->data, (char *)in[IQ]->data + (size_t)(t0 * c->Hq * c->Dk) * es,
         tensor_bytes(x[IQ]));
  memcpy(x[IK]->data, (char *)in[IK]->data + (size_t)(t0 * c->Hq * c->Dk) * es,
         tensor_bytes(x[IK]));
  memcpy(x[IV]->data, (char *)in[IV]->data + (size_t)(t0 * Hv * c->Dv) * es, tensor_bytes(x[IV]));
  int32_t cu[2] = {0, (int32_t)L};
  x[ICU] = tensor_i32(2, cu);
  x[IDECAY] = mk(PH_DTYPE_F32, 2, L, Hv, 0, 0);
  x[IBETA] = mk(PH_DTYPE_F32, 2, L, Hv, 0, 0);
  memcpy(x[IDECAY]->data, (float *)in[IDECAY]->data + t0 * Hv, tensor_bytes(x[IDECAY]));
  memcpy(x[IBETA]->data, (float *)in[IBETA]->data + t0 * Hv, tensor_bytes(x[IBETA]));
  x[ISTATE] = mk(PH_DTYPE_F32, 4, 1, Hv, c->Dv, c->Dk);
  memcpy(x[ISTATE]->data, st, tensor_bytes(x[ISTATE]));
  x[IALOG] = tensor_clone(in[IALOG]);
  x[IDTB] = tensor_clone(in[IDTB]);
}

static int all_zero(const void *p, size_t bytes) {
  const unsigned char *b = p;
  for (size_t i = 0; i < bytes; i++)
    if (b[i]) return 0;
  return 1;
}

static int g_gdn_replays, g_gdn_verifies, g_conv_replays;

/* One ragged batch with capacity C and capture counts cc, under the variant forced now:
 *  - output 0 rows and the final state of every capturing sequence are the bits of its tokens
 *    run one per call (the verify property); the other sequences are the bits of C = 0;
 *  - output 2: slots past the clamped count are zero; replaying a = 0..count slots onto the
 *    initial state gives the state after the first a one-token calls, bit for bit (in place and
 *    not);
 *  - inactive: output 2 all zero, outputs 0 and 1 the bits of C = 0. */
static void gdn_capture_case(const gcase *c, int64_t C, const int32_t *cc, uint64_t seed) {
  int64_t Hv = c->Hq * c->ratio, Hk = c->Hq, Dk = c->Dk, Dv = c->Dv, B = c->nseq;
  int64_t ns = Hv * Dv * Dk, W = C * (Hv + Hk * Dk + Hv * Dv);
  size_t es = dtype_size(c->dt);
  tensor *in[NIN];
  gdn_inputs(c, seed, in);
  in[ICAP] = tensor_i32(B, cc);
  diag d;
  memset(&d, 0, sizeof d);
  tensor *ref[2] = {NULL, NULL}, *o[3] = {NULL, NULL, NULL};
  CHECK_STATUS(gdn_run(0, 4, in, 9, ref, 2, 2, &d), PH_OK, d.msg);
  CHECK_STATUS(gdn_run(C, 4, in, 10, o, 3, 3, &d), PH_OK, d.msg);
  if (!ref[0] || !o[2]) goto done;
  CHECK_EQ_INT(o[2]->rank, 2);
  CHECK_EQ_INT(o[2]->dims[0], B);
  CHECK_EQ_INT(o[2]->dims[1], W);
  const int32_t *cu = in[ICU]->data;
  float *S = malloc((size_t)ns * sizeof(float)), *R = malloc((size_t)ns * sizeof(float));
  for (int64_t b = 0; b < B; b++) {
    int64_t t0 = cu[b], L = cu[b + 1] - cu[b], lim = C < L ? C : L;
    int64_t n = cc[b] < 0 ? 0 : cc[b] > lim ? lim : cc[b];
    const float *row = (const float *)o[2]->data + b * W;
    const float *S0 = (const float *)in[ISTATE]->data + b * ns;
    const float *fs = (const float *)o[1]->data + b * ns;
    /* past the captured prefix: zeros in each of the three parts */
    CHECK(all_zero(row + n * Hv, (size_t)((C - n) * Hv) * 4));
    CHECK(all_zero(row + C * Hv + n * Hk * Dk, (size_t)((C - n) * Hk * Dk) * 4));
    CHECK(all_zero(row + C * (Hv + Hk * Dk) + n * Hv * Dv, (size_t)((C - n) * Hv * Dv) * 4));
    if (n == 0) {
      CHECK(memcmp((char *)o[0]->data + (size_t)(t0 * Hv * Dv) * es,
                   (char *)ref[0]->data + (size_t)(t0 * Hv * Dv) * es,
                   (size_t)(L * Hv * Dv) * es) == 0);
      CHECK(memcmp(fs, (const float *)ref[1]->data + b * ns, (size_t)ns * 4) == 0);
      continue;
    }
    /* L one-token calls */
    memcpy(S, S0, (size_t)ns * 4);
    int ok_out = 1;
    for (int64_t t = 0; t <= L; t++) {
      if (t <= n) { /* replay of the first t slots, separate and in place */
        state_replay_recurrent(S0, R, row, C, Hv, Hk, Dk, Dv, t);
        int ok = memcmp(R, S, (size_t)ns * 4) == 0;
        memcpy(R, S0, (size_t)ns * 4);
        state_replay_recurrent(R, R, row, C, Hv, Hk, Dk, Dv, t);
        ok = ok && memcmp(R, S, (size_t)ns * 4) == 0;
        if (!ok)
          fprintf(stderr, "  replay of %lld slots differs (seq %lld of len %lld, count %lld)\n",
                  (long long)t, (long long)b, (long long)L, (long long)n);
        CHECK(ok);
        g_gdn_replays++;
      }
      if (t == L) break;
      tensor *x[NIN], *y[2] = {NULL, NULL};
      gdn_slice(c, in, t0 + t, 1, S, x);
      CHECK_STATUS(gdn_run(0, 4, x, 9, y, 2, 1, &d), PH_OK, d.msg);
      if (y[0]) {
        ok_out =
            ok_out && memcmp(y[0]->data, (char *)o[0]->data + (size_t)((t0 + t) * Hv * Dv) * es,
                             (size_t)(Hv * Dv) * es) == 0;
        memcpy(S, y[1]->data, (size_t)ns * 4);
      }
      tensors_free(y, 2);
      tensors_free(x, NIN);
    }
    int ok_state = memcmp(S, fs, (size_t)ns * 4) == 0;
    if (!ok_out || !ok_state)
      fprintf(stderr,
              "  verify: seq %lld (len %lld, count %lld) differs from %lld one-token calls\n",
              (long long)b, (long long)L, (long long)n, (long long)L);
    CHECK(ok_out && ok_state);
    g_gdn_verifies++;
  }
  free(S);
  free(R);
  /* the verify pass with final_state over the initial state (aliased): the same bits */
  {
    tensor *keep = tensor_clone(in[ISTATE]), *al[3] = {NULL, in[ISTATE], NULL};
    CHECK_STATUS(gdn_run(C, 4, in, 10, al, 3, 2, &d), PH_OK, d.msg);
    CHECK(tensor_same_bits(al[0], o[0]) && tensor_same_bits(in[ISTATE], o[1]) &&
          tensor_same_bits(al[2], o[2]));
    memcpy(in[ISTATE]->data, keep->data, tensor_bytes(keep));
    tensor_free(keep);
    tensor_free(al[0]);
    tensor_free(al[2]);
  }
  /* no final_state asked for: output 0 and 2 unchanged (the running state lives in scratch) */
  {
    gattr attrs[5] = {attr_string("update_rule", "gated_delta"),
                      attr_string("gate_activation", "qwen"),
                      attr_string("beta_activation", "sigmoid"), attr_int("qk_l2_norm", 1),
                      attr_int("state_update_capacity", C)};
    int outs[3] = {0, -1, 2};
    gnode nd = op_test_node("GatedDeltaNet", "com.microsoft", 10, 3, attrs, 5);
    nd.outputs = outs;
    tensor *p[3] = {NULL, NULL, NULL};
    CHECK_STATUS(op_test_run(&nd, in, p, 2, &d), PH_OK, d.msg);
    CHECK(p[1] == NULL && tensor_same_bits(p[0], o[0]) && tensor_same_bits(p[2], o[2]));
    tensors_free(p, 3);
  }
  /* inactive: capture_count ignored, output 2 all zeros, outputs 0/1 the bits of C = 0 */
  for (int mode = 0; mode < 2; mode++) {
    int32_t act = mode == 0 ? 0 : 1;
    in[IACT] = tensor_i32(1, &act);
    tensor *p[3] = {NULL, NULL, NULL};
    CHECK_STATUS(gdn_run(C, 4, in, 11, p, 3, 2, &d), PH_OK, d.msg);
    if (mode == 0)
      CHECK(tensor_same_bits(p[0], ref[0]) && tensor_same_bits(p[1], ref[1]) && p[2] &&
            all_zero(p[2]->data, tensor_bytes(p[2])));
    else /* active = 1: as if absent */
      CHECK(tensor_same_bits(p[0], o[0]) && tensor_same_bits(p[1], o[1]) &&
            tensor_same_bits(p[2], o[2]));
    tensors_free(p, 3);
    tensor_free(in[IACT]);
    in[IACT] = NULL;
  }
done:
  tensors_free(o, 3);
  tensors_free(ref, 2);
  tensors_free(in, NIN);
}

/* Ragged batches: sequences of 1 token, capture 0 mixed in, counts below, at and above both the
 * length and C (and negative), C = 1, 4 and 8, f32 and bf16 IO, every variant this CPU runs. */
static void test_gdn_capture(void) {
  diag d;
  memset(&d, 0, sizeof d);
  gcase c1 = {2, 2, 16, 24, 7, {1, 5, 3, 0, 9, 2, 1}, PH_DTYPE_F32};
  static const int32_t cc1[7] = {1, 3, 3, 2, 9, 0, -2};
  gcase c2 = {1, 3, 13, 9, 4, {6, 1, 2, 12}, PH_DTYPE_BF16};
  static const int32_t cc2[4] = {8, 1, 0, 5};
  gcase c3 = {2, 1, 8, 8, 3, {3, 8, 1}, PH_DTYPE_F32};
  static const int32_t cc3[3] = {1, 8, 1};
  for (int v = 0; v < KERNEL_N_VARIANTS; v++) {
    if (!kernel_variant_available((kernel_variant)v)) continue;
    CHECK_STATUS(kernel_force_variant((kernel_variant)v, &d), PH_OK, d.msg);
    gdn_capture_case(&c1, 4, cc1, 11 + (uint64_t)v);
    gdn_capture_case(&c2, 8, cc2, 21 + (uint64_t)v);
    gdn_capture_case(&c3, 1, cc3, 31 + (uint64_t)v);
  }
  CHECK_STATUS(kernel_force_variant(KERNEL_SCALAR, &d), PH_OK, d.msg);
  printf("  GatedDeltaNet: %d replays and %d verify passes bit-exact\n", g_gdn_replays,
         g_gdn_verifies);
}

/* Typed errors for capture inputs and attributes. */
static void test_gdn_capture_errors(void) {
  gcase c = {2, 2, 8, 8, 2, {3, 4}, PH_DTYPE_F32};
  tensor *in[NIN];
  gdn_inputs(&c, 5, in);
  int32_t cc[2] = {1, 2};
  in[ICAP] = tensor_i32(2, cc);
  diag d;
  memset(&d, 0, sizeof d);
  tensor *o[3] = {NULL, NULL, NULL};
  CHECK_STATUS(gdn_run(2, 0, in, 10, o, 3, 1, &d), PH_OK, d.msg);
  tensors_free(o, 3);
  CHECK_STATUS(gdn_run(9, 0, in, 10, o, 3, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "state_update_capacity");
  CHECK_STATUS(gdn_run(-1, 0, in, 10, o, 3, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  /* C > 0 requires capture_count */
  tensor *keep = in[ICAP];
  in[ICAP] = NULL;
  CHECK_STATUS(gdn_run(2, 0, in, 10, o, 3, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "capture_count");
  /* wrong dtype / shape */
  int64_t d3[1] = {3};
  in[ICAP] = tensor_new(PH_DTYPE_I64, 1, (int64_t[]){2});
  CHECK_STATUS(gdn_run(2, 0, in, 10, o, 3, 1, &d), PH_ERR_TENSOR_DTYPE, d.msg);
  tensor_free(in[ICAP]);
  in[ICAP] = tensor_new(PH_DTYPE_I32, 1, d3); /* B 3 vs 2 */
  CHECK_STATUS(gdn_run(2, 0, in, 10, o, 3, 1, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  tensor_free(in[ICAP]);
  in[ICAP] = tensor_new(PH_DTYPE_I32, 2, (int64_t[]){2, 1});
  CHECK_STATUS(gdn_run(2, 0, in, 10, o, 3, 1, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  tensor_free(in[ICAP]);
  in[ICAP] = keep;
  /* state_update_active: i32 [1] */
  in[IACT] = tensor_new(PH_DTYPE_I32, 1, (int64_t[]){2});
  CHECK_STATUS(gdn_run(2, 0, in, 11, o, 3, 1, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  tensor_free(in[IACT]);
  in[IACT] = tensor_new(PH_DTYPE_F32, 1, (int64_t[]){1});
  CHECK_STATUS(gdn_run(2, 0, in, 11, o, 3, 1, &d), PH_ERR_TENSOR_DTYPE, d.msg);
  tensor_free(in[IACT]);
  in[IACT] = NULL;
  /* per-key-dim decay has no compact update */
  tensor *g = in[IDECAY];
  in[IDECAY] = mk(PH_DTYPE_F32, 3, 7, 4, 8, 0);
  CHECK_STATUS(gdn_run(2, 0, in, 10, o, 3, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "per-key-dim");
  tensor_free(in[IDECAY]);
  in[IDECAY] = g;
  /* C = 0: capture inputs and output 2 refused */
  CHECK_STATUS(gdn_run(0, 0, in, 10, o, 2, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(gdn_run(0, 0, in, 9, o, 3, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  tensors_free(o, 3);
  tensors_free(in, NIN);
}

/* ---- VarlenCausalConvWithState capture ------------------------------------------------------ */

enum { VX, VW, VCU, VBIAS, VSTATE, VCAP, VN };

static ph_status conv_run(int64_t C, tensor **in, int n_in, tensor **out, int n_out, int threads,
                          diag *d) {
  gattr a[3] = {attr_string("activation", "silu"), attr_int("dilation", 1),
                attr_int("state_update_capacity", C)};
  gnode n = op_test_node("VarlenCausalConvWithState", "com.microsoft", n_in, n_out, a, C ? 3 : 2);
  return op_test_run(&n, in, out, threads, d);
}

/* Ragged batch, capacity C, counts cc: outputs 0/1 the bits of C = 0; output 2 the raw input
 * rows of the clamped prefix, zeros after; replaying a = 0..count values onto the initial state
 * gives the final state of a call that ran the first a tokens one per call (in place and not). */
static void conv_capture_case(ph_dtype dt, int64_t Ch, int64_t K, int nseq, const int64_t *lens,
                              int64_t C, const int32_t *cc, uint64_t seed) {
  rng r = rng_seed(seed);
  int64_t N = 0, P = K - 1;
  for (int i = 0; i < nseq; i++) N += lens[i];
  size_t es = dtype_size(dt);
  tensor *in[VN];
  memset(in, 0, sizeof in);
  in[VX] = mk(dt, 2, N, Ch, 0, 0);
  tensor_fill_uniform(in[VX], &r, -2.0f, 2.0f);
  in[VW] = mk(dt, 3, Ch, 1, K, 0);
  tensor_fill_uniform(in[VW], &r, -1.0f, 1.0f);
  in[VCU] = mk(PH_DTYPE_I32, 1, nseq + 1, 0, 0, 0);
  int32_t *cu = in[VCU]->data;
  for (int i = 0; i < nseq; i++) cu[i + 1] = cu[i] + (int32_t)lens[i];
  in[VBIAS] = mk(dt, 1, Ch, 0, 0, 0);
  tensor_fill_uniform(in[VBIAS], &r, -0.5f, 0.5f);
  in[VSTATE] = mk(dt, 3, nseq, Ch, P, 0);
  tensor_fill_uniform(in[VSTATE], &r, -2.0f, 2.0f);
  in[VCAP] = tensor_i32(nseq, cc);
  diag d;
  memset(&d, 0, sizeof d);
  tensor *ref[2] = {NULL, NULL}, *o[3] = {NULL, NULL, NULL};
  CHECK_STATUS(conv_run(0, in, 5, ref, 2, 2, &d), PH_OK, d.msg);
  CHECK_STATUS(conv_run(C, in, 6, o, 3, 3, &d), PH_OK, d.msg);
  if (ref[0] && o[2]) {
    CHECK(tensor_same_bits(o[0], ref[0]) && tensor_same_bits(o[1], ref[1]));
    CHECK_EQ_INT(o[2]->dims[0], nseq);
    CHECK_EQ_INT(o[2]->dims[1], C);
    CHECK_EQ_INT(o[2]->dims[2], Ch);
    size_t sb = (size_t)(Ch * P) * es, rowb = (size_t)Ch * es;
    char *S = malloc(sb + 1), *R = malloc(sb + 1);
    for (int b = 0; b < nseq; b++) {
      int64_t L = lens[b], lim = C < L ? C : L, n = cc[b] < 0 ? 0 : cc[b] > lim ? lim : cc[b];
      const char *vals = (const char *)o[2]->data + (size_t)(b * C) * rowb;
      const char *S0 = (const char *)in[VSTATE]->data + (size_t)b * sb;
      CHECK(memcmp(vals, (const char *)in[VX]->data + (size_t)cu[b] * rowb, (size_t)n * rowb) == 0);
      CHECK(all_zero(vals + (size_t)n * rowb, (size_t)(C - n) * rowb));
      memcpy(S, S0, sb);
      for (int64_t t = 0; t <= n; t++) {
        state_replay_conv(S0, R, vals, Ch, P, t, dt);
        int ok = memcmp(R, S, sb) == 0;
        memcpy(R, S0, sb);
        state_replay_conv(R, R, vals, Ch, P, t, dt);
        ok = ok && memcmp(R, S, sb) == 0;
        if (!ok)
          fprintf(stderr, "  conv replay of %lld values differs (%s, seq %d)\n", (long long)t,
                  dtype_label(dt), b);
        CHECK(ok);
        g_conv_replays++;
        if (t == n) break;
        /* token t alone, one call */
        tensor *x[VN], *y[2] = {NULL, NULL};
        memset(x, 0, sizeof x);
        x[VX] = mk(dt, 2, 1, Ch, 0, 0);
        memcpy(x[VX]->data, (const char *)in[VX]->data + (size_t)(cu[b] + t) * rowb, rowb);
        x[VW] = tensor_clone(in[VW]);
        int32_t c1[2] = {0, 1};
        x[VCU] = tensor_i32(2, c1);
        x[VBIAS] = tensor_clone(in[VBIAS]);
        x[VSTATE] = mk(dt, 3, 1, Ch, P, 0);
        memcpy(x[VSTATE]->data, S, sb);
        CHECK_STATUS(conv_run(0, x, 5, y, 2, 1, &d), PH_OK, d.msg);
        if (y[1]) memcpy(S, y[1]->data, sb);
        tensors_free(y, 2);
        tensors_free(x, VN);
      }
    }
    free(S);
    free(R);
  }
  tensors_free(o, 3);
  tensors_free(ref, 2);
  tensors_free(in, VN);
}

static void test_conv_capture(void) {
  /* counts: at len 1, below len, above len but within C (seq 2), 0, above len and C, negative */
  static const int64_t lens[7] = {1, 5, 2, 3, 9, 2, 4};
  static const int32_t cc[7] = {1, 3, 3, 0, 9, -1, 4};
  static const ph_dtype dts[3] = {PH_DTYPE_F32, PH_DTYPE_F16, PH_DTYPE_BF16};
  for (int i = 0; i < 3; i++) {
    conv_capture_case(dts[i], 20, 4, 7, lens, 4, cc, 70 + (uint64_t)i); /* C > width */
    conv_capture_case(dts[i], 33, 4, 7, lens, 2, cc, 80 + (uint64_t)i); /* C < width */
    conv_capture_case(dts[i], 7, 2, 7, lens, 8, cc, 90 + (uint64_t)i);  /* width 1 */
  }
  printf("  VarlenCausalConvWithState: %d replays bit-exact\n", g_conv_replays);
}

static void test_conv_capture_errors(void) {
  static const int64_t lens[2] = {3, 4};
  int64_t N = 7, Ch = 8, K = 4;
  tensor *in[VN];
  memset(in, 0, sizeof in);
  in[VX] = mk(PH_DTYPE_F32, 2, N, Ch, 0, 0);
  in[VW] = mk(PH_DTYPE_F32, 3, Ch, 1, K, 0);
  int32_t cu[3] = {0, (int32_t)lens[0], (int32_t)(lens[0] + lens[1])};
  in[VCU] = tensor_i32(3, cu);
  in[VSTATE] = mk(PH_DTYPE_F32, 3, 2, Ch, K - 1, 0);
  int32_t cc[2] = {1, 1};
  in[VCAP] = tensor_i32(2, cc);
  diag d;
  memset(&d, 0, sizeof d);
  tensor *o[3] = {NULL, NULL, NULL};
  CHECK_STATUS(conv_run(2, in, 6, o, 3, 1, &d), PH_OK, d.msg);
  tensors_free(o, 3);
  CHECK_STATUS(conv_run(9, in, 6, o, 3, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(conv_run(2, in, 5, o, 3, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "capture_count");
  tensor *keep = in[VCAP];
  in[VCAP] = mk(PH_DTYPE_F32, 1, 2, 0, 0, 0);
  CHECK_STATUS(conv_run(2, in, 6, o, 3, 1, &d), PH_ERR_TENSOR_DTYPE, d.msg);
  tensor_free(in[VCAP]);
  in[VCAP] = mk(PH_DTYPE_I32, 1, 3, 0, 0, 0);
  CHECK_STATUS(conv_run(2, in, 6, o, 3, 1, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  tensor_free(in[VCAP]);
  in[VCAP] = keep;
  tensors_free(o, 3);
  tensors_free(in, VN);
}

int main(void) {
  RUN(test_gdn_uniform);
  RUN(test_gdn_capture);
  RUN(test_gdn_capture_errors);
  RUN(test_conv_capture);
  RUN(test_conv_capture_errors);
  return check_finish();
}
