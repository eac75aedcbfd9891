/* test_gdn_variants — the GatedDeltaNet decode kernels (one token per sequence) give the bits of
 * the scalar reference: every variant the CPU runs (kernel_force_variant picks it, as
 * kernels/dispatch.h does at run time) against scalar with memcmp, over shapes whose Dk and Dv are
 * and are not multiples of 8 and 16, every update rule, with and without an initial state, with
 * the final state aliasing the initial one and with no final state asked for. A batch mixing a
 * prefill sequence with decode ones is included: its decode sequences give the bits of scalar,
 * its prefill sequence runs the variant's chunk kernel (kernels/dispatch.h: gated_delta_chunk,
 * another summation order, checked against the reference in test_kernels' grid) and is held to
 * the pair bound of two f32 evaluations of the chunk (gdn_pair_tol below).
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "kernels/dispatch.h"
#include "op_testing.h"

enum { IQ, IK, IV, ICU, IDECAY, IBETA, ISTATE, IALOG, IDTB, NIN };

typedef struct vcase {
  int64_t Hq, ratio, Dk, Dv;
  int nseq;
  int64_t lens[4];
  int rule; /* bit 0 gated, bit 1 delta */
  int qwen, l2, has_state;
} vcase;

static const char *const v_rules[4] = {"linear", "gated", "delta", "gated_delta"};

static tensor *mk(ph_dtype dt, int rank, int64_t a, int64_t b, int64_t c, int64_t e) {
  int64_t d[4] = {a, b, c, e};
  return tensor_new(dt, rank, d);
}

static void make_inputs(const vcase *c, uint64_t seed, tensor **in) {
  rng r = rng_seed(seed);
  int64_t N = 0, Hv = c->Hq * c->ratio;
  for (int i = 0; i < c->nseq; i++) N += c->lens[i];
  memset(in, 0, NIN * sizeof *in);
  in[IQ] = mk(PH_DTYPE_F32, 3, N, c->Hq, c->Dk, 0);
  in[IK] = mk(PH_DTYPE_F32, 3, N, c->Hq, c->Dk, 0);
  in[IV] = mk(PH_DTYPE_F32, 3, N, Hv, c->Dv, 0);
  tensor_fill_uniform(in[IQ], &r, -1.0f, 1.0f);
  tensor_fill_uniform(in[IK], &r, -0.3f, 0.3f);
  tensor_fill_uniform(in[IV], &r, -1.0f, 1.0f);
  in[ICU] = mk(PH_DTYPE_I32, 1, c->nseq + 1, 0, 0, 0);
  int32_t *cu = in[ICU]->data;
  for (int i = 0; i < c->nseq; i++) cu[i + 1] = cu[i] + (int32_t)c->lens[i];
  if (c->rule & 1) {
    in[IDECAY] = mk(PH_DTYPE_F32, 2, N, Hv, 0, 0);
    tensor_fill_uniform(in[IDECAY], &r, c->qwen ? -3.0f : -0.4f, c->qwen ? 3.0f : 0.0f);
  }
  if (c->rule & 2) {
    in[IBETA] = mk(PH_DTYPE_F32, 2, N, Hv, 0, 0);
    tensor_fill_uniform(in[IBETA], &r, -3.0f, 3.0f);
  }
  if (c->has_state) {
    in[ISTATE] = mk(PH_DTYPE_F32, 4, c->nseq, Hv, c->Dv, c->Dk);
    tensor_fill_uniform(in[ISTATE], &r, -0.5f, 0.5f);
  }
  if (c->qwen && (c->rule & 1)) {
    in[IALOG] = mk(PH_DTYPE_F32, 1, Hv, 0, 0, 0);
    in[IDTB] = mk(PH_DTYPE_F32, 1, Hv, 0, 0, 0);
    tensor_fill_uniform(in[IALOG], &r, -1.5f, 0.5f);
    tensor_fill_uniform(in[IDTB], &r, -1.0f, 1.0f);
  }
}

static void free_all(tensor **t, int n) {
  for (int i = 0; i < n; i++) tensor_free(t[i]);
}

/* n_out 1: output only; 2: output and final state (out[1] may be preset to alias the state). */
static ph_status run_case(const vcase *c, tensor **in, tensor **out, int n_out, int threads,
                          diag *d) {
  gattr attrs[4];
  attrs[0] = attr_string("update_rule", v_rules[c->rule]);
  attrs[1] = attr_string("gate_activation", c->qwen && (c->rule & 1) ? "qwen" : "none");
  attrs[2] = attr_string("beta_activation", (c->rule & 2) ? "sigmoid" : "none");
  attrs[3] = attr_int("qk_l2_norm", c->l2);
  gnode n = op_test_node("GatedDeltaNet", "com.microsoft", NIN, n_out, attrs, 4);
  return op_test_run(&n, in, out, threads, d);
}

static int same(const tensor *a, const tensor *b) {
  if (!a || !b) return 0;
  size_t bytes = (size_t)tensor_numel(a) * dtype_size(a->dtype);
  return tensor_numel(a) == tensor_numel(b) && memcmp(a->data, b->data, bytes) == 0;
}

/* Two f32 evaluations of one chunk of L tokens (l2-normalized keys, β and decays <= 1: every
 * update a contraction) differ by at most 2 (2 Dk + 2 L) u of the slice's scale: each is within
 * n u of exact with n the longest chain of roundings, Dk (k·k) + L (the solve) + L (the output's
 * intra-chunk sum) + Dk (the state read) (test_ops_gdn.c's header, Higham §3.1), and the
 * triangle inequality gives twice that. */
static double gdn_pair_tol(int64_t Dk, int64_t L) {
  return 2.0 * (double)(2 * Dk + 2 * L) * 0x1p-24;
}

/* n floats at a and b: max |a - b| <= tol * max |b| (NaN fails). */
static int close_to(const float *a, const float *b, int64_t n, double tol) {
  double mx = 0.0, err = 0.0;
  for (int64_t i = 0; i < n; i++) {
    if (!isfinite(a[i]) || !isfinite(b[i])) return 0;
    double d = fabs((double)a[i] - (double)b[i]);
    err = d > err ? d : err;
    mx = fabs((double)b[i]) > mx ? fabs((double)b[i]) : mx;
  }
  return err <= tol * mx;
}

/* Output (state 0) or final state (state 1) of a variant's run against scalar's, sequence by
 * sequence: a sequence of at most one token (the decode kernel) bitwise, a longer one (the chunk
 * kernel) within gdn_pair_tol. */
static int same_seqs(const vcase *c, const tensor *a, const tensor *b, int state) {
  if (!a || !b || tensor_numel(a) != tensor_numel(b)) return 0;
  const float *x = a->data, *y = b->data;
  int64_t Hv = c->Hq * c->ratio, tok = 0, ok = 1;
  for (int i = 0; i < c->nseq; i++) {
    int64_t len = c->lens[i];
    int64_t off = state ? i * Hv * c->Dv * c->Dk : tok * Hv * c->Dv;
    int64_t n = state ? Hv * c->Dv * c->Dk : len * Hv * c->Dv;
    if (len <= 1)
      ok = ok && memcmp(x + off, y + off, (size_t)n * sizeof(float)) == 0;
    else
      ok = ok && close_to(x + off, y + off, n, gdn_pair_tol(c->Dk, len));
    tok += len;
  }
  return (int)ok;
}

static int g_compared, g_differed;

static void check_case(const vcase *c, uint64_t seed) {
  diag d;
  memset(&d, 0, sizeof d);
  tensor *in[NIN], *ref[2] = {NULL, NULL};
  make_inputs(c, seed, in);
  CHECK_STATUS(kernel_force_variant(KERNEL_SCALAR, &d), PH_OK, d.msg);
  CHECK_STATUS(run_case(c, in, ref, 2, 1, &d), PH_OK, d.msg);
  for (int v = KERNEL_AVX2; v < KERNEL_N_VARIANTS; v++) {
    if (!kernel_variant_available((kernel_variant)v)) continue;
    CHECK_STATUS(kernel_force_variant((kernel_variant)v, &d), PH_OK, d.msg);
    tensor *o[2] = {NULL, NULL}, *o1[1] = {NULL};
    CHECK_STATUS(run_case(c, in, o, 2, 3, &d), PH_OK, d.msg);
    CHECK_STATUS(run_case(c, in, o1, 1, 1, &d), PH_OK, d.msg);
    int ok = same_seqs(c, o[0], ref[0], 0) && same_seqs(c, o[1], ref[1], 1) && same(o1[0], o[0]);
    /* final state written over the initial one */
    if (in[ISTATE]) {
      tensor *keep = mk(PH_DTYPE_F32, 4, c->nseq, c->Hq * c->ratio, c->Dv, c->Dk);
      memcpy(keep->data, in[ISTATE]->data, (size_t)tensor_numel(keep) * 4);
      tensor *al[2] = {NULL, in[ISTATE]};
      CHECK_STATUS(run_case(c, in, al, 2, 2, &d), PH_OK, d.msg);
      ok = ok && same(al[0], o[0]) && same(in[ISTATE], o[1]);
      memcpy(in[ISTATE]->data, keep->data, (size_t)tensor_numel(keep) * 4);
      tensor_free(al[0]);
      tensor_free(keep);
    }
    if (!ok)
      fprintf(stderr, "  %s differs from scalar: Hq %lld x%lld Dk %lld Dv %lld rule %s state %d\n",
              kernel_variant_name((kernel_variant)v), (long long)c->Hq, (long long)c->ratio,
              (long long)c->Dk, (long long)c->Dv, v_rules[c->rule], c->has_state);
    CHECK(ok);
    g_compared++;
    g_differed += !ok;
    free_all(o, 2);
    free_all(o1, 1);
  }
  free_all(ref, 2);
  free_all(in, NIN);
}

static void test_decode_variants_bitwise(void) {
  static const int64_t shapes[][4] = {{1, 2, 128, 128}, {2, 1, 16, 16}, {1, 1, 8, 8},
                                      {1, 3, 13, 21},   {2, 2, 33, 17}, {1, 1, 5, 3},
                                      {1, 2, 24, 40},   {1, 1, 1, 9},   {1, 1, 17, 1}};
  uint64_t seed = 1;
  for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
    for (int rule = 0; rule < 4; rule++)
      for (int st = 0; st < 2; st++) {
        vcase c = {shapes[s][0], shapes[s][1], shapes[s][2], shapes[s][3],      3,
                   {1, 1, 1, 0}, rule,         s % 2 == 0,   (int)(s % 3 != 1), st};
        check_case(&c, seed++);
      }
  /* decode sequences packed with a prefill one and an empty one */
  vcase mixed = {2, 2, 40, 24, 4, {1, 7, 0, 1}, 3, 1, 1, 1};
  check_case(&mixed, 77);
  printf("  %d variant runs compared with scalar, %d as promised (decode bits, chunks within "
         "the pair bound)\n",
         g_compared, g_compared - g_differed);
  /* a CPU without AVX2 leaves nothing to compare: that is not a pass */
  if (!check_report(g_compared > 0, __FILE__, __LINE__, "at least one SIMD variant compared"))
    fprintf(stderr, "       no GatedDeltaNet variant besides scalar is available on this CPU\n");
  diag d;
  memset(&d, 0, sizeof d);
  CHECK_STATUS(kernel_force_variant(KERNEL_SCALAR, &d), PH_OK, d.msg);
}

int main(void) {
  RUN(test_decode_variants_bitwise);
  return check_finish();
}
