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

int main(void) {
  RUN(test_gdn_uniform);
  return check_finish();
}
