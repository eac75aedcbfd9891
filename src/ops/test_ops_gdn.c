/* test_ops_gdn — GatedDeltaNet (packed varlen layout) against a float64 loop written here from
 * the text of spec/abi.md §2.4, never from the kernel.
 *
 * Tolerances: f32 outputs and every final state within 2e-5 of the reference tensor's max
 * magnitude; bf16 outputs within one bf16 ulp of the reference value plus that slack (the
 * kernel rounds once).
 * Derivation: a sum of n f32 terms is within n u (u = 2^-24) of exact relative to its terms'
 * magnitudes (Higham §3.1), O(scale) here (L2-normalized or small q and k, beta <= 1, decays
 * <= 1). The longest dependent chain of sums in a chunk of the WY form is about Dk + C + C + Dk
 * <= 32 + 64 + 64 + 32 = 192 roundings (k.k dots, the triangular solve over the chunk's C <= 64
 * tokens, the output's sum over them, the state read), and the state carries over up to two
 * chunk boundaries (130 tokens): first order about 2 x 192 u = 2.3e-5, so 2e-5 is the bound
 * rounded to one digit; measured: 5e-7. The bf16 output is that f32 value rounded once (half an
 * ulp; one ulp leaves room). Against LinearAttention (test_gdn_vs_linear_attention) both run
 * the same f32 chunk arithmetic on the same numbers except the gates, beta and the normalized
 * q, k: float64 rounded once for LinearAttention, f32 softplus/exp/sigmoid/rsqrt here, within
 * 4 u of each other. The recurrence does not amplify input differences (decays and beta <= 1,
 * unit-norm keys: each update is a contraction), and each input enters an output in about four
 * places (decay, beta, q, k): 4 x 4 u = 16 u = 1e-6 (measured: 2.2e-7). The reference reads the
 * inputs as stored. Bit-exactness is required for a sequence run alone vs packed with others, for 1
 * vs 3 threads and for an aliased state. The last lines printed are the largest errors seen.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "op_testing.h"

enum { IQ, IK, IV, ICU, IDECAY, IBETA, ISTATE, IALOG, IDTB, NIN };

static const char *const g_rules[4] = {"linear", "gated", "delta", "gated_delta"};

typedef struct gcase {
  int64_t Hq, ratio, Dk, Dv;
  int nseq;
  int64_t lens[8];
  int rule; /* index in g_rules: bit 0 gated, bit 1 delta */
  int qwen, sig, l2, has_state;
  ph_dtype dt;
  int64_t chunk; /* 0: default */
} gcase;

static double g_f32_err, g_bf16_bound, g_state_err, g_la_err;
static int g_cases;

static double dmax(double a, double b) { return a > b ? a : b; }

static int64_t total_tokens(const gcase *c) {
  int64_t n = 0;
  for (int i = 0; i < c->nseq; i++) n += c->lens[i];
  return n;
}

static tensor *mk(ph_dtype dt, int rank, int64_t a, int64_t b, int64_t c, int64_t e) {
  int64_t d[4] = {a, b, c, e};
  return tensor_new(dt, rank, d);
}

/* The inputs of a case (absent ones NULL). Keys are L2-normalised before storage for delta
 * rules when the op does not normalise them (the spec requires normalised keys there). */
static void make_inputs(const gcase *c, uint64_t seed, tensor **in) {
  rng r = rng_seed(seed);
  int64_t N = total_tokens(c), Hv = c->Hq * c->ratio;
  memset(in, 0, NIN * sizeof *in);
  in[IQ] = mk(c->dt, 3, N, c->Hq, c->Dk, 0);
  in[IK] = mk(c->dt, 3, N, c->Hq, c->Dk, 0);
  in[IV] = mk(c->dt, 3, N, Hv, c->Dv, 0);
  tensor_fill_uniform(in[IQ], &r, -1.0f, 1.0f);
  tensor_fill_uniform(in[IK], &r, -1.0f, 1.0f);
  tensor_fill_uniform(in[IV], &r, -1.0f, 1.0f);
  if ((c->rule & 2) && !c->l2) {
    for (int64_t row = 0; row < N * c->Hq; row++) {
      double s = 0;
      for (int64_t i = 0; i < c->Dk; i++) s += pow(tensor_get_f32(in[IK], row * c->Dk + i), 2);
      for (int64_t i = 0; i < c->Dk; i++)
        tensor_set_f32(in[IK], row * c->Dk + i,
                       (float)(tensor_get_f32(in[IK], row * c->Dk + i) / sqrt(s)));
    }
  }
  in[ICU] = mk(PH_DTYPE_I32, 1, c->nseq + 1, 0, 0, 0);
  int32_t *cu = in[ICU]->data;
  cu[0] = 0;
  for (int i = 0; i < c->nseq; i++) cu[i + 1] = cu[i] + (int32_t)c->lens[i];
  if (c->rule & 1) {
    in[IDECAY] = mk(PH_DTYPE_F32, 2, N, Hv, 0, 0);
    if (c->qwen)
      tensor_fill_uniform(in[IDECAY], &r, -3.0f, 3.0f);
    else
      tensor_fill_uniform(in[IDECAY], &r, -0.4f, 0.0f);
  }
  if (c->rule & 2) {
    in[IBETA] = mk(PH_DTYPE_F32, 2, N, Hv, 0, 0);
    if (c->sig)
      tensor_fill_uniform(in[IBETA], &r, -3.0f, 3.0f);
    else
      tensor_fill_uniform(in[IBETA], &r, 0.0f, 1.0f);
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
    /* one token per case goes through the softplus x > 20 branch */
    if (N > 0) ((float *)in[IDECAY]->data)[0] = 25.0f;
  }
}

static void free_inputs(tensor **in) {
  for (int i = 0; i < NIN; i++) tensor_free(in[i]);
}

static ph_status run_gdn(const gcase *c, tensor **in, tensor **out, int threads, diag *d) {
  gattr attrs[6];
  int na = 0;
  attrs[na++] = attr_string("update_rule", g_rules[c->rule]);
  attrs[na++] = attr_string("gate_activation", c->qwen && (c->rule & 1) ? "qwen" : "none");
  attrs[na++] = attr_string("beta_activation", c->sig && (c->rule & 2) ? "sigmoid" : "none");
  attrs[na++] = attr_int("qk_l2_norm", c->l2);
  if (c->chunk) attrs[na++] = attr_int("chunk_size", c->chunk);
  gnode n = op_test_node("GatedDeltaNet", "com.microsoft", NIN, 2, attrs, na);
  return op_test_run(&n, in, out, threads, d);
}

/* spec/abi.md §2.4, token by token in float64. out [N,Hv,Dv], st [B,Hv,Dv,Dk]. */
static void reference(const gcase *c, tensor **in, double *out, double *st) {
  int64_t Hv = c->Hq * c->ratio, Dk = c->Dk, Dv = c->Dv;
  double scale = 1.0 / sqrt((double)Dk);
  const int32_t *cu = in[ICU]->data;
  double *S = malloc((size_t)(Dk * Dv) * sizeof *S), *q = malloc((size_t)Dk * sizeof *q);
  double *k = malloc((size_t)Dk * sizeof *k), *delta = malloc((size_t)Dv * sizeof *delta);
  for (int b = 0; b < c->nseq; b++) {
    for (int64_t hv = 0; hv < Hv; hv++) {
      int64_t hq = hv * c->Hq / Hv, so = (b * Hv + hv) * Dv * Dk;
      for (int64_t cc = 0; cc < Dv; cc++) /* S[r][c] = state[c][r] */
        for (int64_t r = 0; r < Dk; r++)
          S[r * Dv + cc] = in[ISTATE] ? tensor_get_f32(in[ISTATE], so + cc * Dk + r) : 0.0;
      for (int64_t t = cu[b]; t < cu[b + 1]; t++) {
        double nq = 0, nk = 0;
        for (int64_t r = 0; r < Dk; r++) {
          q[r] = tensor_get_f32(in[IQ], (t * c->Hq + hq) * Dk + r);
          k[r] = tensor_get_f32(in[IK], (t * c->Hq + hq) * Dk + r);
          nq += q[r] * q[r];
          nk += k[r] * k[r];
        }
        if (c->l2)
          for (int64_t r = 0; r < Dk; r++) {
            q[r] /= sqrt(nq + 1e-12);
            k[r] /= sqrt(nk + 1e-12);
          }
        double alpha = 1.0, beta = 1.0;
        if (c->rule & 1) {
          double gv = tensor_get_f32(in[IDECAY], t * Hv + hv);
          if (c->qwen) {
            double x = gv + tensor_get_f32(in[IDTB], hv);
            double sp = x > 20 ? x : log1p(exp(x));
            gv = -exp(tensor_get_f32(in[IALOG], hv)) * sp;
          }
          alpha = exp(gv);
        }
        if (c->rule & 2) {
          beta = tensor_get_f32(in[IBETA], t * Hv + hv);
          if (c->sig) beta = 1.0 / (1.0 + exp(-beta));
        }
        for (int64_t e = 0; e < Dk * Dv; e++) S[e] *= alpha;
        for (int64_t cc = 0; cc < Dv; cc++) {
          double vc = tensor_get_f32(in[IV], (t * Hv + hv) * Dv + cc), pred = 0;
          if (c->rule & 2)
            for (int64_t r = 0; r < Dk; r++) pred += S[r * Dv + cc] * k[r];
          delta[cc] = beta * (vc - pred);
        }
        for (int64_t r = 0; r < Dk; r++)
          for (int64_t cc = 0; cc < Dv; cc++) S[r * Dv + cc] += k[r] * delta[cc];
        for (int64_t cc = 0; cc < Dv; cc++) {
          double o = 0;
          for (int64_t r = 0; r < Dk; r++) o += S[r * Dv + cc] * q[r];
          out[(t * Hv + hv) * Dv + cc] = scale * o;
        }
      }
      for (int64_t cc = 0; cc < Dv; cc++)
        for (int64_t r = 0; r < Dk; r++) st[so + cc * Dk + r] = S[r * Dv + cc];
    }
  }
  free(S);
  free(q);
  free(k);
  free(delta);
}

static double ulp_bf16(double r) {
  int e = 0;
  frexp(fabs(r), &e);
  int ex = e - 1 < -126 ? -126 : e - 1;
  return ldexp(1.0, ex - 7);
}

/* f32: max error / max |ref| <= tol. bf16: every element within one ulp + tol * max |ref|. */
static double compare(const tensor *t, const double *ref, int64_t n, double tol, const char *what) {
  double scale = 0, maxerr = 0, worst = 0;
  int bad = 0;
  for (int64_t i = 0; i < n; i++) scale = dmax(scale, fabs(ref[i]));
  double slack = tol * (scale > 0 ? scale : 1.0);
  for (int64_t i = 0; i < n; i++) {
    double x = tensor_get_f32(t, i), e = fabs(x - ref[i]);
    if (!(e == e) || !isfinite(x)) e = INFINITY;
    maxerr = dmax(maxerr, e);
    if (t->dtype != PH_DTYPE_F32) {
      double bound = ulp_bf16(ref[i]) + slack;
      worst = dmax(worst, e / bound);
      if (e > bound) bad++;
    }
  }
  double rel = maxerr / (scale > 0 ? scale : 1.0);
  int ok = t->dtype == PH_DTYPE_F32 ? rel <= tol : bad == 0;
  if (!CHECK(ok))
    fprintf(stderr, "       case %d %s: max err %.3g scale %.3g rel %.3g, %d out\n", g_cases, what,
            maxerr, scale, rel, bad);
  return t->dtype == PH_DTYPE_F32 ? rel : worst;
}

static void check_case(const gcase *c, uint64_t seed) {
  tensor *in[NIN], *out[2] = {NULL, NULL};
  diag d;
  memset(&d, 0, sizeof d);
  make_inputs(c, seed, in);
  CHECK_STATUS(run_gdn(c, in, out, 2, &d), PH_OK, d.msg);
  if (out[0] && out[1]) {
    int64_t N = total_tokens(c), Hv = c->Hq * c->ratio;
    int64_t no = N * Hv * c->Dv, ns = c->nseq * Hv * c->Dv * c->Dk;
    double *ro = calloc((size_t)(no ? no : 1), sizeof *ro);
    double *rs = calloc((size_t)ns, sizeof *rs);
    reference(c, in, ro, rs);
    double e = compare(out[0], ro, no, 2e-5, "output"); /* 2e-5: file header */
    if (c->dt == PH_DTYPE_F32)
      g_f32_err = dmax(g_f32_err, e);
    else
      g_bf16_bound = dmax(g_bf16_bound, e);
    g_state_err = dmax(g_state_err, compare(out[1], rs, ns, 2e-5, "final_state"));
    free(ro);
    free(rs);
  }
  g_cases++;
  tensor_free(out[0]);
  tensor_free(out[1]);
  free_inputs(in);
}

static void test_gdn_grid(void) {
  static const int64_t mixes[4][5] = {{1, 1}, {3, 5, 1, 70}, {4, 64, 65, 0, 3}, {1, 130}};
  rng r = rng_seed(7);
  int counts[16] = {0};
  int idx = 0;
  for (int m = 0; m < 4; m++)
    for (int ratio = 1; ratio <= 3; ratio++)
      for (int rule = 0; rule < 4; rule++)
        for (int var = 0; var < 2; var++, idx++) {
          gcase c;
          memset(&c, 0, sizeof c);
          c.Hq = (idx % 3 == 0) ? 1 : 2;
          c.ratio = ratio;
          c.Dk = 16;
          c.Dv = 24;
          c.nseq = (int)mixes[m][0];
          for (int i = 0; i < c.nseq; i++) c.lens[i] = mixes[m][i + 1];
          c.rule = rule;
          unsigned bits = (unsigned)(rng_range(&r, 0.0f, 16.0f)) & 15u;
          bits ^= (unsigned)var * 15u; /* the two variants of a cell are complementary */
          c.qwen = bits & 1;
          c.sig = (bits >> 1) & 1;
          c.l2 = (bits >> 2) & 1;
          c.dt = (bits >> 3) & 1 ? PH_DTYPE_BF16 : PH_DTYPE_F32;
          c.has_state = idx % 5 != 4;
          c.chunk = idx % 7 == 3 ? 16 : 0;
          counts[bits]++;
          check_case(&c, 1000 + (uint64_t)idx);
        }
  /* every combination of (qwen, sigmoid, l2, bf16) was drawn */
  for (int i = 0; i < 16; i++) CHECK(counts[i] > 0);
  /* Dk > Dv and Dk == Dv with a short chunk, once each */
  gcase c = {2, 2, 32, 8, 2, {9, 40}, 3, 1, 1, 1, 1, PH_DTYPE_F32, 0};
  check_case(&c, 77);
  gcase c2 = {1, 1, 8, 8, 2, {1, 33}, 2, 0, 0, 1, 0, PH_DTYPE_BF16, 8};
  check_case(&c2, 78);
}

/* A mixed batch; each sequence also alone (same inputs sliced); threads 1 vs 3; state aliased. */
static void test_gdn_invariance(void) {
  gcase c = {2, 3, 16, 24, 5, {5, 1, 70, 0, 3}, 3, 1, 1, 1, 1, PH_DTYPE_BF16, 0};
  for (int pass = 0; pass < 2; pass++) {
    if (pass == 1) {
      c.dt = PH_DTYPE_F32;
      c.l2 = 0;
      c.rule = 1;
      c.lens[1] = 66;
    }
    tensor *in[NIN], *out1[2] = {NULL, NULL}, *out3[2] = {NULL, NULL};
    diag d;
    memset(&d, 0, sizeof d);
    make_inputs(&c, 99 + (uint64_t)pass, in);
    int64_t Hv = c.Hq * c.ratio, Dk = c.Dk, Dv = c.Dv;
    CHECK_STATUS(run_gdn(&c, in, out1, 1, &d), PH_OK, d.msg);
    CHECK_STATUS(run_gdn(&c, in, out3, 3, &d), PH_OK, d.msg);
    if (!out1[0] || !out3[0]) return;
    CHECK(memcmp(out1[0]->data, out3[0]->data, (size_t)tensor_numel(out1[0]) * dtype_size(c.dt)) ==
          0);
    CHECK(memcmp(out1[1]->data, out3[1]->data, (size_t)tensor_numel(out1[1]) * 4) == 0);

    /* each sequence alone */
    const int32_t *cu = in[ICU]->data;
    for (int b = 0; b < c.nseq; b++) {
      gcase a = c;
      a.nseq = 1;
      a.lens[0] = c.lens[b];
      tensor *ai[NIN], *ao[2] = {NULL, NULL};
      memset(ai, 0, sizeof ai);
      int64_t L = c.lens[b], t0 = cu[b];
      size_t es = dtype_size(c.dt);
      ai[IQ] = mk(c.dt, 3, L, c.Hq, Dk, 0);
      ai[IK] = mk(c.dt, 3, L, c.Hq, Dk, 0);
      ai[IV] = mk(c.dt, 3, L, Hv, Dv, 0);
      memcpy(ai[IQ]->data, (char *)in[IQ]->data + (size_t)(t0 * c.Hq * Dk) * es,
             (size_t)(L * c.Hq * Dk) * es);
      memcpy(ai[IK]->data, (char *)in[IK]->data + (size_t)(t0 * c.Hq * Dk) * es,
             (size_t)(L * c.Hq * Dk) * es);
      memcpy(ai[IV]->data, (char *)in[IV]->data + (size_t)(t0 * Hv * Dv) * es,
             (size_t)(L * Hv * Dv) * es);
      ai[ICU] = mk(PH_DTYPE_I32, 1, 2, 0, 0, 0);
      ((int32_t *)ai[ICU]->data)[1] = (int32_t)L;
      for (int s = IDECAY; s <= IBETA; s++)
        if (in[s]) {
          ai[s] = mk(PH_DTYPE_F32, 2, L, Hv, 0, 0);
          memcpy(ai[s]->data, (float *)in[s]->data + t0 * Hv, (size_t)(L * Hv) * 4);
        }
      ai[ISTATE] = mk(PH_DTYPE_F32, 4, 1, Hv, Dv, Dk);
      memcpy(ai[ISTATE]->data, (float *)in[ISTATE]->data + b * Hv * Dv * Dk,
             (size_t)(Hv * Dv * Dk) * 4);
      for (int s = IALOG; s <= IDTB; s++)
        if (in[s]) {
          ai[s] = mk(PH_DTYPE_F32, 1, Hv, 0, 0, 0);
          memcpy(ai[s]->data, in[s]->data, (size_t)Hv * 4);
        }
      CHECK_STATUS(run_gdn(&a, ai, ao, 2, &d), PH_OK, d.msg);
      if (ao[0]) {
        CHECK(memcmp(ao[0]->data, (char *)out1[0]->data + (size_t)(t0 * Hv * Dv) * es,
                     (size_t)(L * Hv * Dv) * es) == 0);
        CHECK(memcmp(ao[1]->data, (float *)out1[1]->data + b * Hv * Dv * Dk,
                     (size_t)(Hv * Dv * Dk) * 4) == 0);
        /* an empty sequence passes its state through */
        if (L == 0) CHECK(memcmp(ao[1]->data, ai[ISTATE]->data, (size_t)(Hv * Dv * Dk) * 4) == 0);
      }
      tensor_free(ao[0]);
      tensor_free(ao[1]);
      free_inputs(ai);
    }

    /* final_state aliasing initial_state, in place */
    tensor *alias[2] = {NULL, in[ISTATE]};
    CHECK_STATUS(run_gdn(&c, in, alias, 3, &d), PH_OK, d.msg);
    CHECK(memcmp(in[ISTATE]->data, out1[1]->data, (size_t)tensor_numel(out1[1]) * 4) == 0);
    if (alias[0])
      CHECK(memcmp(alias[0]->data, out1[0]->data,
                   (size_t)tensor_numel(out1[0]) * dtype_size(c.dt)) == 0);
    tensor_free(alias[0]);
    tensor_free(out1[0]);
    tensor_free(out1[1]);
    tensor_free(out3[0]);
    tensor_free(out3[1]);
    free_inputs(in);
  }
}

/* One sequence through GatedDeltaNet (qwen gates, sigmoid beta, in-op L2 norm) and through
 * LinearAttention with those computed in float64 beforehand: K-major state, repeated keys. */
static void test_gdn_vs_linear_attention(void) {
  for (int tlen = 1; tlen <= 77; tlen += 76) {
    gcase c = {2, 2, 16, 24, 1, {tlen}, 3, 1, 1, 1, 1, PH_DTYPE_F32, 0};
    tensor *in[NIN], *out[2] = {NULL, NULL};
    diag d;
    memset(&d, 0, sizeof d);
    make_inputs(&c, 4242 + (uint64_t)tlen, in);
    CHECK_STATUS(run_gdn(&c, in, out, 2, &d), PH_OK, d.msg);
    int64_t T = tlen, Hq = c.Hq, Hv = Hq * c.ratio, Dk = c.Dk, Dv = c.Dv;
    tensor *lq = mk(PH_DTYPE_F32, 3, 1, T, Hq * Dk, 0), *lk = mk(PH_DTYPE_F32, 3, 1, T, Hv * Dk, 0);
    tensor *lv = mk(PH_DTYPE_F32, 3, 1, T, Hv * Dv, 0);
    tensor *lp = mk(PH_DTYPE_F32, 4, 1, Hv, Dk, Dv);
    tensor *ld = mk(PH_DTYPE_F32, 3, 1, T, Hv, 0), *lb = mk(PH_DTYPE_F32, 3, 1, T, Hv, 0);
    memcpy(lv->data, in[IV]->data, (size_t)(T * Hv * Dv) * 4);
    for (int64_t t = 0; t < T; t++) {
      for (int64_t h = 0; h < Hq; h++) {
        const float *qs = (const float *)in[IQ]->data + (t * Hq + h) * Dk;
        const float *ks = (const float *)in[IK]->data + (t * Hq + h) * Dk;
        double nq = 0, nk = 0;
        for (int64_t r = 0; r < Dk; r++) {
          nq += (double)qs[r] * qs[r];
          nk += (double)ks[r] * ks[r];
        }
        for (int64_t r = 0; r < Dk; r++) {
          ((float *)lq->data)[(t * Hq + h) * Dk + r] = (float)(qs[r] / sqrt(nq + 1e-12));
          for (int64_t j = 0; j < c.ratio; j++)
            ((float *)lk->data)[(t * Hv + h * c.ratio + j) * Dk + r] =
                (float)(ks[r] / sqrt(nk + 1e-12));
        }
      }
      for (int64_t h = 0; h < Hv; h++) {
        double x = tensor_get_f32(in[IDECAY], t * Hv + h) + tensor_get_f32(in[IDTB], h);
        double sp = x > 20 ? x : log1p(exp(x));
        ((float *)ld->data)[t * Hv + h] = (float)(-exp(tensor_get_f32(in[IALOG], h)) * sp);
        ((float *)lb->data)[t * Hv + h] =
            (float)(1.0 / (1.0 + exp(-tensor_get_f32(in[IBETA], t * Hv + h))));
      }
    }
    for (int64_t h = 0; h < Hv; h++)
      for (int64_t cc = 0; cc < Dv; cc++)
        for (int64_t r = 0; r < Dk; r++)
          ((float *)lp->data)[(h * Dk + r) * Dv + cc] =
              ((const float *)in[ISTATE]->data)[(h * Dv + cc) * Dk + r];
    gattr attrs[3] = {attr_string("update_rule", "gated_delta"), attr_int("q_num_heads", Hq),
                      attr_int("kv_num_heads", Hv)};
    gnode n = op_test_node("LinearAttention", "com.microsoft", 6, 2, attrs, 3);
    tensor *li[6] = {lq, lk, lv, lp, ld, lb}, *lo[2] = {NULL, NULL};
    CHECK_STATUS(op_test_run(&n, li, lo, 2, &d), PH_OK, d.msg);
    if (out[0] && lo[0]) {
      int64_t no = T * Hv * Dv;
      double *ref = malloc((size_t)no * sizeof *ref);
      for (int64_t i = 0; i < no; i++) ref[i] = tensor_get_f32(lo[0], i);
      /* 1e-6: the file header */
      double e = compare(out[0], ref, no, 1e-6, "vs LinearAttention output");
      free(ref);
      int64_t ns = Hv * Dv * Dk;
      double *rs = malloc((size_t)ns * sizeof *rs);
      for (int64_t h = 0; h < Hv; h++)
        for (int64_t cc = 0; cc < Dv; cc++)
          for (int64_t r = 0; r < Dk; r++)
            rs[(h * Dv + cc) * Dk + r] = tensor_get_f32(lo[1], (h * Dk + r) * Dv + cc);
      double es = compare(out[1], rs, ns, 1e-6, "vs LinearAttention state");
      free(rs);
      g_la_err = dmax(g_la_err, dmax(e, es));
    }
    tensor *all[8] = {lq, lk, lv, lp, ld, lb, lo[0], lo[1]};
    for (int i = 0; i < 8; i++) tensor_free(all[i]);
    tensor_free(out[0]);
    tensor_free(out[1]);
    free_inputs(in);
  }
}

/* Runs a node with the given attributes over the inputs and returns the status (message in d). */
static ph_status run_attrs(gattr *attrs, int na, tensor **in, int n_in, int n_out,
                           unsigned const_mask, diag *d) {
  gnode n = op_test_node("GatedDeltaNet", "com.microsoft", n_in, n_out, attrs, na);
  tensor *out[3] = {NULL, NULL, NULL};
  memset(d, 0, sizeof *d);
  ph_status s = op_test_run_ex(&n, in, out, 1, const_mask, d);
  for (int i = 0; i < 3; i++) tensor_free(out[i]);
  return s;
}

static void test_gdn_errors(void) {
  gcase c = {2, 2, 8, 8, 2, {3, 4}, 3, 1, 1, 0, 1, PH_DTYPE_F32, 0};
  tensor *in[NIN + 2];
  memset(in, 0, sizeof in);
  make_inputs(&c, 5, in);
  diag d;
  gattr base[3] = {attr_string("update_rule", "gated_delta"),
                   attr_string("gate_activation", "qwen"),
                   attr_string("beta_activation", "sigmoid")};
  CHECK_STATUS(run_attrs(base, 3, in, NIN, 2, ~0u, &d), PH_OK, d.msg);

  /* attributes */
  gattr a1[3] = {attr_string("update_rule", "fancy"), base[1], base[2]};
  CHECK_STATUS(run_attrs(a1, 3, in, NIN, 2, ~0u, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "update_rule");
  gattr a2[4] = {base[0], base[1], base[2], attr_int("state_update_capacity", 2)};
  /* capacity without capture_count (capture itself: test_gdn_capture) */
  CHECK_STATUS(run_attrs(a2, 4, in, NIN, 2, ~0u, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "requires input 9");
  a2[3] = attr_int("state_update_capacity", 9);
  CHECK_STATUS(run_attrs(a2, 4, in, NIN, 2, ~0u, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  a2[3] = attr_int("qk_l2_norm", 2);
  CHECK_STATUS(run_attrs(a2, 4, in, NIN, 2, ~0u, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  a2[3] = attr_float("chunk_size", 2.0f);
  CHECK_STATUS(run_attrs(a2, 4, in, NIN, 2, ~0u, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  gattr a3[3] = {base[0], attr_string("gate_activation", "relu"), base[2]};
  CHECK_STATUS(run_attrs(a3, 3, in, NIN, 2, ~0u, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  gattr a4[3] = {base[0], base[1], attr_string("beta_activation", "tanh")};
  CHECK_STATUS(run_attrs(a4, 3, in, NIN, 2, ~0u, &d), PH_ERR_INVALID_ARGUMENT, d.msg);

  /* presence rules */
  static const char *const rules[4] = {"linear", "gated", "delta", "gated_delta"};
  for (int r = 0; r < 4; r++) {
    gattr ar[1] = {attr_string("update_rule", rules[r])};
    tensor *x[NIN];
    memcpy(x, in, sizeof x);
    x[IALOG] = x[IDTB] = NULL;
    /* decay present iff gated, beta present iff delta: flip each */
    x[IDECAY] = (r & 1) ? NULL : in[IDECAY];
    if (!(r & 2)) x[IBETA] = NULL;
    CHECK_STATUS(run_attrs(ar, 1, x, NIN, 2, ~0u, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "decay");
    x[IDECAY] = (r & 1) ? in[IDECAY] : NULL;
    x[IBETA] = (r & 2) ? NULL : in[IBETA];
    CHECK_STATUS(run_attrs(ar, 1, x, NIN, 2, ~0u, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "beta");
    x[IBETA] = (r & 2) ? in[IBETA] : NULL;
    CHECK_STATUS(run_attrs(ar, 1, x, NIN, 2, ~0u, &d), PH_OK, d.msg);
    /* a_log/dt_bias without qwen */
    x[IALOG] = in[IALOG];
    CHECK_STATUS(run_attrs(ar, 1, x, NIN, 2, ~0u, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  }
  {
    tensor *x[NIN];
    memcpy(x, in, sizeof x);
    x[IDTB] = NULL; /* qwen needs both */
    CHECK_STATUS(run_attrs(base, 3, x, NIN, 2, ~0u, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "dt_bias");
    x[IDTB] = in[IDTB];
    x[ICU] = NULL; /* uniform packing: 7 tokens do not split over the state's 2 sequences */
    CHECK_STATUS(run_attrs(base, 3, x, NIN, 2, ~0u, &d), PH_ERR_TENSOR_SHAPE, d.msg);
    CHECK_CONTAINS(d.msg, "split evenly");
  }
  /* capture_count / state_update_active / state_update without capacity */
  tensor *cap = mk(PH_DTYPE_I32, 1, 2, 0, 0, 0);
  in[NIN] = cap;
  CHECK_STATUS(run_attrs(base, 3, in, NIN + 1, 2, ~0u, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "capture_count");
  in[NIN] = NULL;
  in[NIN + 1] = mk(PH_DTYPE_I32, 1, 1, 0, 0, 0);
  CHECK_STATUS(run_attrs(base, 3, in, NIN + 2, 2, ~0u, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  tensor_free(in[NIN + 1]);
  in[NIN + 1] = NULL;
  tensor_free(cap);
  CHECK_STATUS(run_attrs(base, 3, in, NIN, 3, ~0u, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "state_update");

  /* dtypes */
  {
    tensor *x[NIN];
    memcpy(x, in, sizeof x);
    tensor *kb = mk(PH_DTYPE_BF16, 3, 7, 2, 8, 0);
    x[IK] = kb;
    CHECK_STATUS(run_attrs(base, 3, x, NIN, 2, ~0u, &d), PH_ERR_TENSOR_DTYPE, d.msg);
    x[IK] = in[IK];
    tensor *db = mk(PH_DTYPE_BF16, 2, 7, 4, 0, 0);
    x[IDECAY] = db;
    CHECK_STATUS(run_attrs(base, 3, x, NIN, 2, ~0u, &d), PH_ERR_TENSOR_DTYPE, d.msg);
    x[IDECAY] = in[IDECAY];
    tensor *cu64 = mk(PH_DTYPE_I64, 1, 3, 0, 0, 0);
    x[ICU] = cu64;
    CHECK_STATUS(run_attrs(base, 3, x, NIN, 2, ~0u, &d), PH_ERR_TENSOR_DTYPE, d.msg);
    x[ICU] = in[ICU];
    tensor_free(kb);
    tensor_free(db);
    tensor_free(cu64);
  }
  /* shapes */
  {
    tensor *x[NIN];
    memcpy(x, in, sizeof x);
    tensor *v5 = mk(PH_DTYPE_F32, 3, 7, 5, 8, 0); /* Hv 5 not a multiple of Hq 2 */
    x[IV] = v5;
    x[IDECAY] = x[IBETA] = x[ISTATE] = x[IALOG] = x[IDTB] = NULL;
    gattr lin[1] = {attr_string("update_rule", "linear")};
    CHECK_STATUS(run_attrs(lin, 1, x, NIN, 2, ~0u, &d), PH_ERR_TENSOR_SHAPE, d.msg);
    memcpy(x, in, sizeof x);
    tensor *k3 = mk(PH_DTYPE_F32, 3, 7, 4, 8, 0); /* Hk != Hq */
    x[IK] = k3;
    CHECK_STATUS(run_attrs(base, 3, x, NIN, 2, ~0u, &d), PH_ERR_TENSOR_SHAPE, d.msg);
    x[IK] = in[IK];
    tensor *dtb2 = mk(PH_DTYPE_F32, 2, 4, 8, 0, 0); /* per-key dt_bias */
    x[IDTB] = dtb2;
    CHECK_STATUS(run_attrs(base, 3, x, NIN, 2, ~0u, &d), PH_ERR_TENSOR_SHAPE, d.msg);
    x[IDTB] = in[IDTB];
    tensor *st = mk(PH_DTYPE_F32, 4, 3, 4, 8, 8); /* B 3 vs cu_seqlens B 2 */
    x[ISTATE] = st;
    CHECK_STATUS(run_attrs(base, 3, x, NIN, 2, ~0u, &d), PH_ERR_TENSOR_SHAPE, d.msg);
    x[ISTATE] = in[ISTATE];
    tensor *dk = mk(PH_DTYPE_F32, 3, 7, 4, 8, 0); /* per-key-dim decay */
    x[IDECAY] = dk;
    CHECK_STATUS(run_attrs(base, 3, x, NIN, 2, ~0u, &d), PH_ERR_UNSUPPORTED, d.msg);
    x[IDECAY] = in[IDECAY];
    tensor *b6 = mk(PH_DTYPE_F32, 2, 6, 4, 0, 0); /* beta N 6 vs 7 */
    x[IBETA] = b6;
    CHECK_STATUS(run_attrs(base, 3, x, NIN, 2, ~0u, &d), PH_ERR_TENSOR_SHAPE, d.msg);
    x[IBETA] = in[IBETA];
    tensor *all[6] = {v5, k3, dtb2, st, dk, b6};
    for (int i = 0; i < 6; i++) tensor_free(all[i]);
  }
  /* cu_seqlens contents: checked at run time (not a constant here) and when constant */
  {
    int32_t *cu = in[ICU]->data;
    int32_t bad[3][3] = {{1, 3, 7}, {0, 5, 4}, {0, 3, 6}};
    for (int i = 0; i < 3; i++) {
      memcpy(cu, bad[i], sizeof bad[i]);
      CHECK_STATUS(run_attrs(base, 3, in, NIN, 2, ~(1u << ICU), &d), PH_ERR_INVALID_ARGUMENT,
                   d.msg);
      CHECK_CONTAINS(d.msg, "cu_seqlens");
      CHECK_STATUS(run_attrs(base, 3, in, NIN, 2, ~0u, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    }
    int32_t good[3] = {0, 7, 7}; /* trailing empty sequence */
    memcpy(cu, good, sizeof good);
    CHECK_STATUS(run_attrs(base, 3, in, NIN, 2, ~0u, &d), PH_OK, d.msg);
  }
  free_inputs(in);
}

/* Build-time inference: unknown dims (-1) propagate, known ones are checked. */
static void test_gdn_infer_unknown(void) {
  const op_def *def = op_lookup("com.microsoft", "GatedDeltaNet");
  if (!CHECK(def && def->infer)) return;
  gattr attrs[1] = {attr_string("update_rule", "gated_delta")};
  gnode n = op_test_node("GatedDeltaNet", "com.microsoft", 7, 2, attrs, 1);
  n.op = def;
  int64_t q[3] = {-1, 2, 16}, v[3] = {-1, 4, -1}, cu[1] = {-1}, g[2] = {-1, -1};
  int64_t st[4] = {3, -1, 24, -1};
  tinfo in[7], out[2];
  memset(in, 0, sizeof in);
  memset(out, 0, sizeof out);
  in[IQ] = tinfo_make(PH_DTYPE_BF16, 3, q);
  in[IK] = tinfo_make(PH_DTYPE_BF16, 3, q);
  in[IV] = tinfo_make(PH_DTYPE_BF16, 3, v);
  in[ICU] = tinfo_make(PH_DTYPE_I32, 1, cu);
  in[IDECAY] = tinfo_make(PH_DTYPE_F32, 2, g);
  in[IBETA] = tinfo_make(PH_DTYPE_F32, 2, g);
  in[ISTATE] = tinfo_make(PH_DTYPE_F32, 4, st);
  diag d;
  memset(&d, 0, sizeof d);
  CHECK_STATUS(def->infer(&n, in, out, &d), PH_OK, d.msg);
  CHECK_EQ_INT(out[0].dtype, PH_DTYPE_BF16);
  CHECK_EQ_INT(out[0].dims[0], -1);
  CHECK_EQ_INT(out[0].dims[1], 4);
  CHECK_EQ_INT(out[0].dims[2], 24);
  CHECK_EQ_INT(out[1].dtype, PH_DTYPE_F32);
  int64_t want[4] = {3, 4, 24, 16};
  for (int i = 0; i < 4; i++) CHECK_EQ_INT(out[1].dims[i], want[i]);
  st[3] = 8; /* Dk 8 in the state vs 16 in the query */
  in[ISTATE] = tinfo_make(PH_DTYPE_F32, 4, st);
  CHECK_STATUS(def->infer(&n, in, out, &d), PH_ERR_TENSOR_SHAPE, d.msg);
}

static void test_report(void) {
  printf("  cases %d; max rel err f32 output %.3g, final_state %.3g; bf16 worst fraction of "
         "bound %.3g; vs LinearAttention %.3g\n",
         g_cases, g_f32_err, g_state_err, g_bf16_bound, g_la_err);
}

int main(void) {
  RUN(test_gdn_grid);
  RUN(test_gdn_invariance);
  RUN(test_gdn_vs_linear_attention);
  RUN(test_gdn_errors);
  RUN(test_gdn_infer_unknown);
  RUN(test_report);
  return check_finish();
}
