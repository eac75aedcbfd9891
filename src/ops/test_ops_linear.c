/* test_ops_linear — LinearAttention, CausalConvWithState, LinearAttentionGate and GatedRMSNorm
 * against plain float64 loops written here from the spec text (spec/abi.md §2.4-§6,
 * spec/ort-1.30.md §2), never from the kernels.
 *
 * Each op runs through tests/op_testing.h (infer with static shapes, then run on a pool).
 * Tolerances: f32 outputs within 1e-5 of the reference's max magnitude (decays make single
 * values tiny, so bounds are relative to the tensor's scale, not per element); f16/bf16 outputs
 * within one ulp of the reference value plus that same f32 slack (the kernels round once).
 * The reference reads the inputs as stored (already rounded to their dtype).
 * Derivation (u = 2^-24 = 6.0e-8; a sum of n f32 terms is within n u of exact relative to the
 * sum of its terms' magnitudes, Higham §3.1, which is O(scale) here: unit or small keys, beta
 * and decays <= 1). LinearAttention's longest dependent chain in a chunk is about Dk + C + C + Dk
 * <= 24 + 64 + 64 + 24 = 176 roundings (key dots, the triangular solve and the output sum over
 * the chunk's C <= 64 tokens, the state read): 176 u = 1.05e-5, so 1e-5 (measured: 5e-7). The
 * recurrent form's chain per token is shorter (Dk + Dk), and the state update is a contraction,
 * so earlier roundings do not grow: the same bound holds for it. Two forms compared with each
 * other (test_la_chunked_vs_recurrent: chunked, recurrent, split, chunk 32) are each within it
 * of the exact result, so within twice it of each other: 2e-5 (measured: 6e-7).
 * CausalConvWithState sums K <= 4 products and a bias: 5 u, well inside 1e-5.
 * LinearAttentionGate and GatedRMSNorm: see their tests.
 * The last lines printed are the largest errors seen, for the record.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "op_testing.h"

/* ---- small helpers --------------------------------------------------------------------------- */

static tensor *mk3(ph_dtype dt, int64_t a, int64_t b, int64_t c) {
  int64_t d[3] = {a, b, c};
  return tensor_new(dt, 3, d);
}

static tensor *mk4(ph_dtype dt, int64_t a, int64_t b, int64_t c, int64_t e) {
  int64_t d[4] = {a, b, c, e};
  return tensor_new(dt, 4, d);
}

static tensor *mk1(ph_dtype dt, int64_t a) { return tensor_new(dt, 1, &a); }

static double dmax(double a, double b) { return a > b ? a : b; }

static const char *dt_name(ph_dtype dt) {
  return dt == PH_DTYPE_F32 ? "f32" : dt == PH_DTYPE_F16 ? "f16" : "bf16";
}

/* Spacing of dtype dt's values near |r| (its unit in the last place). */
static double ulp_of(ph_dtype dt, double r) {
  int mant = dt == PH_DTYPE_F16 ? 10 : dt == PH_DTYPE_BF16 ? 7 : 23;
  int emin = dt == PH_DTYPE_F16 ? -14 : -126;
  int e = 0;
  frexp(fabs(r), &e); /* |r| = m 2^e, m in [0.5, 1) */
  int ex = e - 1 < emin ? emin : e - 1;
  return ldexp(1.0, ex - mant);
}

/* Largest errors seen, printed at the end. */
static double g_la_f32_err, g_la_half_bound, g_la_chunk_rec, g_la_split, g_la_chunk32;
static double g_cc_err, g_lg_err, g_gn_err;
static int g_la_cases, g_cc_cases;

/* Compares t with ref. f32: max |t - ref| <= tol * max |ref|. f16/bf16: every element within
 * one ulp of ref plus tol * max |ref|. Returns the error relative to the scale (f32) or the
 * largest fraction of its bound an element used (f16/bf16), and fails the check with the case
 * name when out of bounds. */
static double compare(const tensor *t, const double *ref, int64_t n, double tol, const char *what,
                      const char *name) {
  double scale = 0.0, maxerr = 0.0, worst = 0.0;
  int bad = 0;
  for (int64_t i = 0; i < n; i++) scale = dmax(scale, fabs(ref[i]));
  double slack = tol * (scale > 0 ? scale : 1.0);
  for (int64_t i = 0; i < n; i++) {
    double x = tensor_get_f32(t, i), e = fabs(x - ref[i]);
    if (!(e == e) || !isfinite(x)) e = INFINITY;
    maxerr = dmax(maxerr, e);
    if (t->dtype != PH_DTYPE_F32) {
      double bound = ulp_of(t->dtype, ref[i]) + slack;
      worst = dmax(worst, e / bound);
      if (e > bound) bad++;
    }
  }
  double rel = maxerr / (scale > 0 ? scale : 1.0);
  int ok = t->dtype == PH_DTYPE_F32 ? rel <= tol : bad == 0;
  if (!CHECK(ok))
    fprintf(stderr, "       %s %s: max err %.3g, scale %.3g (rel %.3g), %d elements out\n", name,
            what, maxerr, scale, rel, bad);
  return t->dtype == PH_DTYPE_F32 ? rel : worst;
}

/* Max |a - b| / max |b| over two tensors of equal size (both read as f32). */
static double rel_diff(const tensor *a, const tensor *b) {
  int64_t n = tensor_numel(b);
  double m = 0.0, s = 0.0;
  for (int64_t i = 0; i < n; i++) {
    double x = tensor_get_f32(a, i), y = tensor_get_f32(b, i);
    double e = fabs(x - y);
    if (!(e == e)) e = INFINITY;
    m = dmax(m, e);
    s = dmax(s, fabs(y));
  }
  return m / (s > 0 ? s : 1.0);
}

static int same_bits(const tensor *a, const tensor *b) {
  int64_t n = tensor_numel(a);
  return a->dtype == b->dtype && n == tensor_numel(b) &&
         memcmp(a->data, b->data, (size_t)n * dtype_size(a->dtype)) == 0;
}

/* Tokens [t0, t1) of a [B,T,W] tensor, as a new [B,t1-t0,W] tensor. */
static tensor *slice_tokens(const tensor *x, int64_t t0, int64_t t1) {
  tensor *s = mk3(x->dtype, x->dims[0], t1 - t0, x->dims[2]);
  size_t es = dtype_size(x->dtype), row = (size_t)x->dims[2] * es;
  for (int64_t b = 0; b < x->dims[0]; b++)
    memcpy((char *)s->data + (size_t)(b * (t1 - t0)) * row,
           (const char *)x->data + (size_t)(b * x->dims[1] + t0) * row, (size_t)(t1 - t0) * row);
  return s;
}

/* Writes the [B,L,W] tensor part into tokens [t0, t0+L) of the [B,T,W] tensor whole. */
static void put_tokens(tensor *whole, const tensor *part, int64_t t0) {
  size_t es = dtype_size(whole->dtype), row = (size_t)whole->dims[2] * es;
  int64_t L = part->dims[1];
  for (int64_t b = 0; b < whole->dims[0]; b++)
    memcpy((char *)whole->data + (size_t)(b * whole->dims[1] + t0) * row,
           (const char *)part->data + (size_t)(b * L) * row, (size_t)L * row);
}

/* ---- LinearAttention ------------------------------------------------------------------------- */

typedef struct la_cfg {
  const char *rule;
  int B, T, Hq, Hv, Hk, Dk, Dv;
  int per_dim;    /* decay [B,T,Hv*Dk] instead of [B,T,Hv] */
  int beta_bcast; /* beta [B,T,1] instead of [B,T,Hv] */
  int has_past;
  ph_dtype dt;
  int chunk;   /* 0: attribute absent (default 64) */
  float scale; /* 0: attribute absent */
  float gmin;  /* log decays uniform in [gmin, 0] */
  uint64_t seed;
} la_cfg;

static int rule_gated(const char *r) {
  return strcmp(r, "gated") == 0 || strcmp(r, "gated_delta") == 0;
}

static int rule_delta(const char *r) {
  return strcmp(r, "delta") == 0 || strcmp(r, "gated_delta") == 0;
}

static void la_name(const la_cfg *c, char *buf, size_t n) {
  snprintf(buf, n, "LA[%s B%d T%d Hq%d Hv%d Hk%d Dk%d Dv%d %s%s%s %s chunk%d]", c->rule, c->B, c->T,
           c->Hq, c->Hv, c->Hk, c->Dk, c->Dv, c->per_dim ? "per-dim " : "",
           c->beta_bcast ? "beta-bcast " : "", c->has_past ? "past" : "no-past", dt_name(c->dt),
           c->chunk);
}

/* Random inputs: q, k, v in [-1, 1] (keys L2-normalised per head for delta rules, as the op
 * requires), past in [-0.5, 0.5], beta in (0, 1), log decay in [gmin, 0]. */
static void la_inputs(const la_cfg *c, tensor *in[6]) {
  rng r = rng_seed(c->seed);
  memset(in, 0, 6 * sizeof in[0]);
  in[0] = mk3(c->dt, c->B, c->T, (int64_t)c->Hq * c->Dk);
  in[1] = mk3(c->dt, c->B, c->T, (int64_t)c->Hk * c->Dk);
  in[2] = mk3(c->dt, c->B, c->T, (int64_t)c->Hv * c->Dv);
  tensor_fill_uniform(in[0], &r, -1.0f, 1.0f);
  tensor_fill_uniform(in[2], &r, -1.0f, 1.0f);
  int64_t nk = tensor_numel(in[1]) / c->Dk;
  for (int64_t h = 0; h < nk; h++) {
    float kv[64];
    double ss = 0.0;
    for (int i = 0; i < c->Dk; i++) {
      kv[i] = rng_range(&r, -1.0f, 1.0f);
      ss += (double)kv[i] * kv[i];
    }
    for (int i = 0; i < c->Dk; i++)
      tensor_set_f32(in[1], h * c->Dk + i,
                     rule_delta(c->rule) ? (float)(kv[i] / sqrt(ss + 1e-12)) : kv[i]);
  }
  if (c->has_past) {
    in[3] = mk4(c->dt, c->B, c->Hv, c->Dk, c->Dv);
    tensor_fill_uniform(in[3], &r, -0.5f, 0.5f);
  }
  if (rule_gated(c->rule)) {
    in[4] = mk3(c->dt, c->B, c->T, (int64_t)c->Hv * (c->per_dim ? c->Dk : 1));
    tensor_fill_uniform(in[4], &r, c->gmin, 0.0f);
  }
  if (rule_delta(c->rule)) {
    in[5] = mk3(c->dt, c->B, c->T, c->beta_bcast ? 1 : c->Hv);
    tensor_fill_uniform(in[5], &r, 0.02f, 0.98f);
  }
}

static int la_attrs(const la_cfg *c, gattr *a) {
  int n = 0;
  a[n++] = attr_string("update_rule", c->rule);
  a[n++] = attr_int("q_num_heads", c->Hq);
  a[n++] = attr_int("kv_num_heads", c->Hv);
  if (c->chunk) a[n++] = attr_int("chunk_size", c->chunk);
  if (c->scale != 0.0f) a[n++] = attr_float("scale", c->scale);
  return n;
}

static ph_status la_call(const la_cfg *c, tensor *in[6], tensor *out[2], int threads, diag *d) {
  gattr a[8];
  int na = la_attrs(c, a);
  gnode n = op_test_node("LinearAttention", "com.microsoft", 6, 2, a, na);
  return op_test_run(&n, in, out, threads, d);
}

/* Float64 recurrence of spec/abi.md §2.4 with the K-major state of §5: for each sequence b and
 * value head h, for each token: S *= exp(g); u = beta (v - S^T k) (delta rules; u = v otherwise);
 * S += k u^T; out = scale S^T q. GQA (Hq >= Hv): query head j reads state j / (Hq/Hv).
 * Inverse GQA: value head h reads query head h / (Hv/Hq) and writes output head h. */
static void la_reference(const la_cfg *c, tensor *const in[6], double *out, double *state) {
  int gated = rule_gated(c->rule), delta = rule_delta(c->rule);
  int Ho = c->Hq > c->Hv ? c->Hq : c->Hv, Dk = c->Dk, Dv = c->Dv, T = c->T;
  double scale = c->scale != 0.0f ? c->scale : 1.0 / sqrt((double)Dk);
  double k[64], u[64], q[64];
  for (int b = 0; b < c->B; b++) {
    for (int h = 0; h < c->Hv; h++) {
      double *S = state + ((int64_t)b * c->Hv + h) * Dk * Dv;
      for (int i = 0; i < Dk * Dv; i++)
        S[i] = in[3] ? tensor_get_f32(in[3], ((int64_t)b * c->Hv + h) * Dk * Dv + i) : 0.0;
      int hk = h / (c->Hv / c->Hk);
      for (int t = 0; t < T; t++) {
        int64_t bt = (int64_t)b * T + t;
        for (int r = 0; r < Dk; r++) k[r] = tensor_get_f32(in[1], (bt * c->Hk + hk) * Dk + r);
        if (gated) {
          for (int r = 0; r < Dk; r++) {
            double g = c->per_dim ? tensor_get_f32(in[4], (bt * c->Hv + h) * Dk + r)
                                  : tensor_get_f32(in[4], bt * c->Hv + h);
            for (int cc = 0; cc < Dv; cc++) S[r * Dv + cc] *= exp(g);
          }
        }
        double beta = 1.0;
        if (delta) beta = tensor_get_f32(in[5], c->beta_bcast ? bt : bt * c->Hv + h);
        for (int cc = 0; cc < Dv; cc++) {
          double v = tensor_get_f32(in[2], (bt * c->Hv + h) * Dv + cc);
          if (delta) {
            double pred = 0.0;
            for (int r = 0; r < Dk; r++) pred += S[r * Dv + cc] * k[r];
            u[cc] = beta * (v - pred);
          } else {
            u[cc] = v;
          }
        }
        for (int r = 0; r < Dk; r++)
          for (int cc = 0; cc < Dv; cc++) S[r * Dv + cc] += k[r] * u[cc];
        for (int hq = 0; hq < c->Hq; hq++) {
          int served = c->Hq >= c->Hv ? hq / (c->Hq / c->Hv) == h : hq == h / (c->Hv / c->Hq);
          if (!served) continue;
          int oh = c->Hq >= c->Hv ? hq : h;
          for (int r = 0; r < Dk; r++) q[r] = tensor_get_f32(in[0], (bt * c->Hq + hq) * Dk + r);
          for (int cc = 0; cc < Dv; cc++) {
            double o = 0.0;
            for (int r = 0; r < Dk; r++) o += S[r * Dv + cc] * q[r];
            out[(bt * Ho + oh) * Dv + cc] = scale * o;
          }
        }
      }
    }
  }
}

static void free6(tensor *t[6]) {
  for (int i = 0; i < 6; i++) tensor_free(t[i]);
}

/* Runs one case against the reference; returns 1 if it ran. */
static int la_check_case(const la_cfg *c) {
  char name[160];
  la_name(c, name, sizeof name);
  tensor *in[6], *out[2] = {NULL, NULL};
  la_inputs(c, in);
  diag d;
  diag_clear(&d);
  ph_status s = la_call(c, in, out, 2, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  if (s != PH_OK) {
    fprintf(stderr, "       %s\n", name);
    free6(in);
    return 0;
  }
  int Ho = c->Hq > c->Hv ? c->Hq : c->Hv;
  int64_t n_out = (int64_t)c->B * c->T * Ho * c->Dv;
  int64_t n_state = (int64_t)c->B * c->Hv * c->Dk * c->Dv;
  double *ro = calloc((size_t)n_out + 1, sizeof(double));
  double *rs = calloc((size_t)n_state + 1, sizeof(double));
  la_reference(c, in, ro, rs);
  CHECK_EQ_INT(tensor_numel(out[0]), n_out);
  CHECK_EQ_INT(tensor_numel(out[1]), n_state);
  double e0 = compare(out[0], ro, n_out, 1e-5, "output", name); /* 1e-5: file header */
  double e1 = compare(out[1], rs, n_state, 1e-5, "present_state", name);
  if (c->dt == PH_DTYPE_F32)
    g_la_f32_err = dmax(g_la_f32_err, dmax(e0, e1));
  else
    g_la_half_bound = dmax(g_la_half_bound, dmax(e0, e1));
  g_la_cases++;
  free(ro);
  free(rs);
  tensor_free(out[0]);
  tensor_free(out[1]);
  free6(in);
  return 1;
}

/* The grid: every T x head layout x rule, with the other parameters mixed from the three indices
 * so that for every (T, rule) and every (head layout, rule) each of them takes more than one
 * value: both decay layouts, both beta layouts (and all four pairs under gated_delta), past
 * present and absent, B 1 and 3, four width pairs, all three dtypes and chunks 32/64/default. */
static void test_la_grid(void) {
  static const int Ts[] = {1, 4, 63, 64, 65, 130};
  static const int heads[][3] = {
      {2, 2, 2}, {4, 2, 2}, {6, 2, 2}, /* Hq:Hv = 1, 2, 3 (GQA) */
      {2, 4, 4}, {2, 6, 6},            /* inverse GQA 2, 3, key repeated to Hv */
      {2, 4, 2}, {1, 3, 1},            /* inverse GQA, key not repeated (Hk = Hq) */
  };
  static const int widths[][2] = {{3, 16}, {16, 24}, {24, 3}, {16, 16}};
  static const char *const rules[] = {"linear", "gated", "delta", "gated_delta"};
  static const ph_dtype dts[] = {PH_DTYPE_F32, PH_DTYPE_F32, PH_DTYPE_F16, PH_DTYPE_F32,
                                 PH_DTYPE_BF16};
  for (int ti = 0; ti < 6; ti++) {
    for (int hi = 0; hi < 7; hi++) {
      for (int ri = 0; ri < 4; ri++) {
        la_cfg c;
        memset(&c, 0, sizeof c);
        c.rule = rules[ri];
        c.T = Ts[ti];
        c.Hq = heads[hi][0];
        c.Hv = heads[hi][1];
        c.Hk = heads[hi][2];
        c.Dk = widths[(ti + hi + 2 * ri) % 4][0];
        c.Dv = widths[(ti + hi + 2 * ri) % 4][1];
        c.B = (ti + 2 * hi + ri) % 3 == 1 ? 3 : 1;
        c.per_dim = rule_gated(c.rule) && (ti + hi) % 2;
        c.beta_bcast = rule_delta(c.rule) && ((ti + hi) / 2 + ri) % 2;
        c.has_past = ((ti + 3 * hi) / 2 + ri + ti) % 2 == 0;
        c.dt = dts[(ti + 3 * hi + ri) % 5];
        c.chunk = (2 * ti + hi + ri) % 3 == 0 ? 32 : (2 * ti + hi + ri) % 3 == 1 ? 64 : 0;
        c.gmin = -1.0f;
        c.seed = 1000 + (uint64_t)((ti * 7 + hi) * 4 + ri);
        la_check_case(&c);
      }
    }
  }
}

/* An explicit scale, and a decay strong enough that the cumulative log decay of a chunk reaches
 * about -1500: the chunked form must stay finite and exact where a factorised e^{γ_t} e^{-γ_s}
 * would overflow. Plus tokens whose decay is -1e30 (state wiped) in the middle of a chunk. */
static void test_la_strong_decay(void) {
  la_cfg c;
  memset(&c, 0, sizeof c);
  c.rule = "gated_delta";
  c.B = 1;
  c.T = 130;
  c.Hq = c.Hv = c.Hk = 2;
  c.Dk = c.Dv = 16;
  c.has_past = 1;
  c.dt = PH_DTYPE_F32;
  c.gmin = -40.0f;
  c.scale = 0.37f;
  c.seed = 77;
  la_check_case(&c);
  c.per_dim = 1;
  c.rule = "gated";
  la_check_case(&c);

  c.per_dim = 0;
  c.rule = "gated_delta";
  c.gmin = -0.3f;
  tensor *in[6], *out[2] = {NULL, NULL};
  la_inputs(&c, in);
  for (int t = 10; t < 130; t += 37) tensor_set_f32(in[4], (int64_t)t * c.Hv + 1, -1e30f);
  diag d;
  CHECK_STATUS(la_call(&c, in, out, 1, &d), PH_OK, d.msg);
  double *ro = calloc((size_t)(c.T * c.Hv * c.Dv), sizeof(double));
  double *rs = calloc((size_t)(c.Hv * c.Dk * c.Dv), sizeof(double));
  la_reference(&c, in, ro, rs);
  if (out[0]) {
    /* 1e-5: the file header */
    g_la_f32_err = dmax(g_la_f32_err, compare(out[0], ro, c.T * c.Hv * c.Dv, 1e-5, "output",
                                              "LA strong decay -1e30"));
    g_la_f32_err = dmax(g_la_f32_err, compare(out[1], rs, c.Hv * c.Dk * c.Dv, 1e-5, "present_state",
                                              "LA strong decay -1e30"));
  }
  free(ro);
  free(rs);
  tensor_free(out[0]);
  tensor_free(out[1]);
  free6(in);
}

/* Runs c over the token splits given (their sum is c->T), feeding present_state back as
 * past_state, and returns the concatenated output and the final state. */
static void la_run_split(const la_cfg *c, tensor *const in[6], const int *splits, int n_splits,
                         tensor **out_all, tensor **state) {
  int Ho = c->Hq > c->Hv ? c->Hq : c->Hv;
  *out_all = mk3(c->dt, c->B, c->T, (int64_t)Ho * c->Dv);
  tensor *past = NULL;
  if (in[3]) {
    past = mk4(c->dt, c->B, c->Hv, c->Dk, c->Dv);
    memcpy(past->data, in[3]->data, (size_t)tensor_numel(past) * dtype_size(c->dt));
  }
  int t0 = 0;
  for (int i = 0; i < n_splits; i++) {
    la_cfg ci = *c;
    ci.T = splits[i];
    tensor *part[6] = {NULL, NULL, NULL, past, NULL, NULL};
    for (int k = 0; k < 6; k++)
      if (k != 3 && in[k]) part[k] = slice_tokens(in[k], t0, t0 + splits[i]);
    tensor *out[2] = {NULL, NULL};
    diag d;
    CHECK_STATUS(la_call(&ci, part, out, 2, &d), PH_OK, d.msg);
    if (out[0]) put_tokens(*out_all, out[0], t0);
    tensor_free(out[0]);
    for (int k = 0; k < 6; k++)
      if (k != 3) tensor_free(part[k]);
    tensor_free(past);
    past = out[1];
    t0 += splits[i];
  }
  *state = past;
}

/* Chunked (one call of 130 tokens) against recurrent (130 calls of one token) and against
 * splits whose chunk boundaries differ (64+1+65, 7+123), for every rule and head layout, both
 * decay layouts; and chunk 32 against chunk 64. All in f32: within 2e-5 of the scale, twice the
 * bound each form meets (the header's derivation). */
static void test_la_chunked_vs_recurrent(void) {
  static const char *const rules[] = {"linear", "gated", "delta", "gated_delta"};
  static const int heads[][3] = {{2, 2, 2}, {6, 2, 2}, {2, 6, 6}, {2, 4, 2}};
  int ones[130];
  for (int i = 0; i < 130; i++) ones[i] = 1;
  static const int split_a[] = {64, 1, 65}, split_b[] = {7, 123}, whole[] = {130};
  int idx = 0;
  for (int ri = 0; ri < 4; ri++) {
    for (int hi = 0; hi < 4; hi++, idx++) {
      for (int per_dim = 0; per_dim <= rule_gated(rules[ri]); per_dim++) {
        la_cfg c;
        memset(&c, 0, sizeof c);
        c.rule = rules[ri];
        c.B = idx % 2 ? 3 : 1;
        c.T = 130;
        c.Hq = heads[hi][0];
        c.Hv = heads[hi][1];
        c.Hk = heads[hi][2];
        c.Dk = idx % 2 ? 24 : 16;
        c.Dv = idx % 3 ? 16 : 3;
        c.per_dim = per_dim;
        c.beta_bcast = rule_delta(c.rule) && idx % 2;
        c.has_past = 1;
        c.dt = PH_DTYPE_F32;
        c.chunk = 64;
        c.gmin = -0.5f;
        c.seed = 500 + (uint64_t)idx;
        char name[160];
        la_name(&c, name, sizeof name);
        tensor *in[6];
        la_inputs(&c, in);
        tensor *o_full, *s_full, *o_rec, *s_rec, *o_a, *s_a, *o_b, *s_b, *o_32, *s_32;
        la_run_split(&c, in, whole, 1, &o_full, &s_full);
        la_run_split(&c, in, ones, 130, &o_rec, &s_rec);
        la_run_split(&c, in, split_a, 3, &o_a, &s_a);
        la_run_split(&c, in, split_b, 2, &o_b, &s_b);
        la_cfg c32 = c;
        c32.chunk = 32;
        la_run_split(&c32, in, whole, 1, &o_32, &s_32);
        double e_rec = dmax(rel_diff(o_full, o_rec), rel_diff(s_full, s_rec));
        double e_split = dmax(dmax(rel_diff(o_a, o_rec), rel_diff(s_a, s_rec)),
                              dmax(rel_diff(o_b, o_rec), rel_diff(s_b, s_rec)));
        double e_32 = dmax(rel_diff(o_32, o_full), rel_diff(s_32, s_full));
        g_la_chunk_rec = dmax(g_la_chunk_rec, e_rec);
        g_la_split = dmax(g_la_split, e_split);
        g_la_chunk32 = dmax(g_la_chunk32, e_32);
        if (!CHECK(e_rec <= 2e-5 && e_split <= 2e-5 && e_32 <= 2e-5))
          fprintf(stderr, "       %s: chunked vs recurrent %.3g, splits %.3g, chunk 32 %.3g\n",
                  name, e_rec, e_split, e_32);
        tensor *all[] = {o_full, s_full, o_rec, s_rec, o_a, s_a, o_b, s_b, o_32, s_32};
        for (size_t k = 0; k < sizeof all / sizeof all[0]; k++) tensor_free(all[k]);
        free6(in);
      }
    }
  }
}

/* 1 thread against 3 threads, bit for bit, chunked and recurrent; and present_state written
 * over past_state (aliased) against a separate buffer, bit for bit. */
static void test_la_threads_and_alias(void) {
  for (int T = 1; T <= 70; T += 69) {
    la_cfg c;
    memset(&c, 0, sizeof c);
    c.rule = "gated_delta";
    c.B = 3;
    c.T = T;
    c.Hq = 2;
    c.Hv = 4;
    c.Hk = 4;
    c.Dk = 16;
    c.Dv = 24;
    c.has_past = 1;
    c.dt = PH_DTYPE_BF16;
    c.chunk = 32;
    c.gmin = -1.0f;
    c.seed = 9 + (uint64_t)T;
    tensor *in[6], *o1[2] = {NULL, NULL}, *o3[2] = {NULL, NULL};
    la_inputs(&c, in);
    diag d;
    CHECK_STATUS(la_call(&c, in, o1, 1, &d), PH_OK, d.msg);
    CHECK_STATUS(la_call(&c, in, o3, 3, &d), PH_OK, d.msg);
    if (o1[0] && o3[0]) {
      CHECK(same_bits(o1[0], o3[0]));
      CHECK(same_bits(o1[1], o3[1]));
    }
    /* Aliased: the present_state buffer is the past_state tensor itself. */
    tensor *oa[2] = {NULL, in[3]};
    CHECK_STATUS(la_call(&c, in, oa, 3, &d), PH_OK, d.msg);
    if (oa[0] && o1[0]) {
      CHECK(same_bits(oa[0], o1[0]));
      CHECK(same_bits(in[3], o1[1]));
    }
    tensor_free(oa[0]);
    tensor_free(o1[0]);
    tensor_free(o1[1]);
    tensor_free(o3[0]);
    tensor_free(o3[1]);
    free6(in);
  }
}

/* Batch invariance (architecture.md): sequence 1 of a batch of 3 gives the same bits as the
 * same sequence alone, chunked and recurrent; and a node without present_state computes the same
 * output. */
static void test_la_batch_invariance(void) {
  for (int T = 1; T <= 100; T += 99) {
    la_cfg c;
    memset(&c, 0, sizeof c);
    c.rule = "gated_delta";
    c.B = 3;
    c.T = T;
    c.Hq = 2;
    c.Hv = 4;
    c.Hk = 2;
    c.Dk = 24;
    c.Dv = 16;
    c.per_dim = T > 1;
    c.has_past = 1;
    c.dt = PH_DTYPE_F32;
    c.gmin = -1.0f;
    c.seed = 123 + (uint64_t)T;
    tensor *in[6], *out[2] = {NULL, NULL};
    la_inputs(&c, in);
    diag d;
    CHECK_STATUS(la_call(&c, in, out, 2, &d), PH_OK, d.msg);
    /* Sequence 1 alone. */
    la_cfg c1 = c;
    c1.B = 1;
    tensor *one[6] = {NULL, NULL, NULL, NULL, NULL, NULL}, *out1[2] = {NULL, NULL};
    for (int i = 0; i < 6; i++) {
      if (!in[i]) continue;
      int64_t per = tensor_numel(in[i]) / 3;
      one[i] = tensor_new(in[i]->dtype, in[i]->rank, in[i]->dims);
      one[i]->dims[0] = 1;
      memcpy(one[i]->data, (const float *)in[i]->data + per, (size_t)per * sizeof(float));
    }
    CHECK_STATUS(la_call(&c1, one, out1, 1, &d), PH_OK, d.msg);
    if (out[0] && out1[0]) {
      int64_t po = tensor_numel(out1[0]), ps = tensor_numel(out1[1]);
      CHECK(memcmp((const float *)out[0]->data + po, out1[0]->data, (size_t)po * 4) == 0);
      CHECK(memcmp((const float *)out[1]->data + ps, out1[1]->data, (size_t)ps * 4) == 0);
    }
    /* One output only. */
    gattr a[8];
    int na = la_attrs(&c1, a);
    gnode n = op_test_node("LinearAttention", "com.microsoft", 6, 1, a, na);
    tensor *only[1] = {NULL};
    CHECK_STATUS(op_test_run(&n, one, only, 2, &d), PH_OK, d.msg);
    if (only[0] && out1[0]) CHECK(same_bits(only[0], out1[0]));
    tensor_free(only[0]);
    tensor_free(out[0]);
    tensor_free(out[1]);
    tensor_free(out1[0]);
    tensor_free(out1[1]);
    free6(one);
    free6(in);
  }
}

/* T = 0 (nothing to do): the state passes through unchanged; absent past gives zeros. */
static void test_la_empty(void) {
  la_cfg c;
  memset(&c, 0, sizeof c);
  c.rule = "linear";
  c.B = 2;
  c.T = 0;
  c.Hq = c.Hv = c.Hk = 2;
  c.Dk = 3;
  c.Dv = 5;
  c.has_past = 1;
  c.dt = PH_DTYPE_F32;
  c.seed = 3;
  tensor *in[6], *out[2] = {NULL, NULL};
  la_inputs(&c, in);
  diag d;
  CHECK_STATUS(la_call(&c, in, out, 2, &d), PH_OK, d.msg);
  if (out[1]) CHECK(same_bits(out[1], in[3]));
  tensor_free(out[0]);
  tensor_free(out[1]);
  free6(in);
}

static ph_status la_try(const char *rule, tensor *in[6], int n_in, gattr *extra, int n_extra,
                        int Hq, int Hv, diag *d) {
  gattr a[12];
  int n = 0;
  a[n++] = attr_string("update_rule", rule);
  if (Hq) a[n++] = attr_int("q_num_heads", Hq);
  if (Hv) a[n++] = attr_int("kv_num_heads", Hv);
  for (int i = 0; i < n_extra; i++) a[n++] = extra[i];
  gnode node = op_test_node("LinearAttention", "com.microsoft", n_in, 2, a, n);
  tensor *out[2] = {NULL, NULL};
  ph_status s = op_test_run(&node, in, out, 1, d);
  tensor_free(out[0]);
  tensor_free(out[1]);
  return s;
}

/* Each contract violation gets its typed status. */
static void test_la_errors(void) {
  ph_dtype f = PH_DTYPE_F32;
  tensor *q = mk3(f, 1, 4, 8), *k = mk3(f, 1, 4, 8), *v = mk3(f, 1, 4, 6);
  tensor *past = mk4(f, 1, 2, 4, 3), *g = mk3(f, 1, 4, 2), *beta = mk3(f, 1, 4, 2);
  diag d;
  tensor *all[6] = {q, k, v, past, g, beta};
  CHECK_STATUS(la_try("gated_delta", all, 6, NULL, 0, 2, 2, &d), PH_OK, d.msg);
  tensor *no_decay[6] = {q, k, v, past, NULL, beta};
  CHECK_STATUS(la_try("gated", no_decay, 6, NULL, 0, 2, 2, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "decay");
  CHECK_STATUS(la_try("gated_delta", no_decay, 6, NULL, 0, 2, 2, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  tensor *no_beta[6] = {q, k, v, past, NULL, NULL};
  CHECK_STATUS(la_try("delta", no_beta, 6, NULL, 0, 2, 2, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "beta");
  CHECK_STATUS(la_try("linear", all, 6, NULL, 0, 2, 2, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  tensor *qkv[6] = {q, k, v, NULL, NULL, NULL};
  CHECK_STATUS(la_try("linear", qkv, 3, NULL, 0, 2, 2, &d), PH_OK, d.msg);
  CHECK_STATUS(la_try("sideways", qkv, 3, NULL, 0, 2, 2, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(la_try("linear", qkv, 3, NULL, 0, 0, 2, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "q_num_heads");
  CHECK_STATUS(la_try("linear", qkv, 3, NULL, 0, 2, 0, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  gattr sw = attr_int("state_window", 2);
  CHECK_STATUS(la_try("linear", qkv, 3, &sw, 1, 2, 2, &d), PH_ERR_UNSUPPORTED, d.msg);
  CHECK_CONTAINS(d.msg, "state_window");
  gattr sw_neg = attr_int("state_window", -1);
  CHECK_STATUS(la_try("linear", qkv, 3, &sw_neg, 1, 2, 2, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  gattr ch0 = attr_int("chunk_size", 0);
  CHECK_STATUS(la_try("linear", qkv, 3, &ch0, 1, 2, 2, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  gattr bad_type = attr_float("q_num_heads", 2.0f);
  CHECK_STATUS(la_try("linear", qkv, 3, &bad_type, 1, 0, 2, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  /* Head counts: 3 and 2 do not divide; query width 8 is not a multiple of 3. */
  CHECK_STATUS(la_try("linear", qkv, 3, NULL, 0, 3, 2, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(la_try("linear", qkv, 3, NULL, 0, 3, 3, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  /* Key width 8 = 2 heads of 4; with Hq 4 (Dk 2) and Hv 2 it must be Hv*Dk = 4. */
  CHECK_STATUS(la_try("linear", qkv, 3, NULL, 0, 4, 2, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  CHECK_CONTAINS(d.msg, "key width");
  /* Value width 6 with Hv 4. */
  CHECK_STATUS(la_try("linear", qkv, 3, NULL, 0, 2, 4, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  /* Ranks. */
  tensor *q2 = tensor_new(f, 2, (int64_t[]){4, 8});
  tensor *bad_rank[6] = {q2, k, v, NULL, NULL, NULL};
  CHECK_STATUS(la_try("linear", bad_rank, 3, NULL, 0, 2, 2, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  tensor *past3 = mk3(f, 2, 4, 3);
  tensor *bad_past[6] = {q, k, v, past3, NULL, NULL};
  CHECK_STATUS(la_try("linear", bad_past, 4, NULL, 0, 2, 2, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  tensor *past_dv = mk4(f, 1, 2, 4, 4);
  tensor *bad_past2[6] = {q, k, v, past_dv, NULL, NULL};
  CHECK_STATUS(la_try("linear", bad_past2, 4, NULL, 0, 2, 2, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  /* Token counts disagree; decay and beta widths. */
  tensor *v5 = mk3(f, 1, 5, 6);
  tensor *bad_t[6] = {q, k, v5, NULL, NULL, NULL};
  CHECK_STATUS(la_try("linear", bad_t, 3, NULL, 0, 2, 2, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  tensor *g3 = mk3(f, 1, 4, 3), *beta3 = mk3(f, 1, 4, 3);
  tensor *bad_g[6] = {q, k, v, NULL, g3, NULL};
  CHECK_STATUS(la_try("gated", bad_g, 5, NULL, 0, 2, 2, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  tensor *bad_b[6] = {q, k, v, NULL, NULL, beta3};
  CHECK_STATUS(la_try("delta", bad_b, 6, NULL, 0, 2, 2, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  /* dtypes: one T for everything, state included (ORT rejects an f32 state with f16 IO). */
  tensor *past16 = mk4(PH_DTYPE_F16, 1, 2, 4, 3);
  tensor *bad_dt[6] = {q, k, v, past16, NULL, NULL};
  CHECK_STATUS(la_try("linear", bad_dt, 4, NULL, 0, 2, 2, &d), PH_ERR_TENSOR_DTYPE, d.msg);
  tensor *qi = mk3(PH_DTYPE_I32, 1, 4, 8);
  tensor *bad_dt2[6] = {qi, k, v, NULL, NULL, NULL};
  CHECK_STATUS(la_try("linear", bad_dt2, 3, NULL, 0, 2, 2, &d), PH_ERR_TENSOR_DTYPE, d.msg);
  tensor *frees[] = {q, k, v, past, g, beta, q2, past3, past_dv, v5, g3, beta3, past16, qi};
  for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++) tensor_free(frees[i]);
}

/* Build-time inference: unknown dims (-1) propagate, known ones are computed. */
static void test_la_infer_unknown(void) {
  const op_def *def = op_lookup("com.microsoft", "LinearAttention");
  CHECK(def && def->infer);
  if (!def || !def->infer) return;
  gattr a[3] = {attr_string("update_rule", "gated_delta"), attr_int("q_num_heads", 2),
                attr_int("kv_num_heads", 4)};
  gnode n = op_test_node("LinearAttention", "com.microsoft", 6, 2, a, 3);
  tinfo in[6], out[2];
  memset(in, 0, sizeof in);
  memset(out, 0, sizeof out);
  int64_t qd[3] = {-1, -1, 2 * 16}, kd[3] = {-1, -1, 2 * 16}, vd[3] = {-1, -1, 4 * 8};
  int64_t gd[3] = {-1, -1, 4}, bd[3] = {-1, -1, 1};
  const int64_t *dims[6] = {qd, kd, vd, NULL, gd, bd};
  for (int i = 0; i < 6; i++) {
    if (!dims[i]) continue;
    in[i].dtype = PH_DTYPE_BF16;
    in[i].rank = 3;
    memcpy(in[i].dims, dims[i], sizeof qd);
  }
  diag d;
  CHECK_STATUS(def->infer(&n, in, out, &d), PH_OK, d.msg);
  CHECK_EQ_INT(out[0].dtype, PH_DTYPE_BF16);
  CHECK_EQ_INT(out[0].rank, 3);
  CHECK_EQ_INT(out[0].dims[0], -1);
  CHECK_EQ_INT(out[0].dims[1], -1);
  CHECK_EQ_INT(out[0].dims[2], 4 * 8);
  CHECK_EQ_INT(out[1].rank, 4);
  CHECK_EQ_INT(out[1].dims[0], -1);
  CHECK_EQ_INT(out[1].dims[1], 4);
  CHECK_EQ_INT(out[1].dims[2], 16);
  CHECK_EQ_INT(out[1].dims[3], 8);
  /* Unknown widths: only what is known is checked, the rest stays -1. */
  in[0].dims[2] = -1;
  in[2].dims[2] = -1;
  CHECK_STATUS(def->infer(&n, in, out, &d), PH_OK, d.msg);
  CHECK_EQ_INT(out[0].dims[2], -1);
  CHECK_EQ_INT(out[1].dims[2], -1);
  CHECK_EQ_INT(out[1].dims[3], -1);
  /* Unknown rank propagates too. */
  in[1].rank = -1;
  CHECK_STATUS(def->infer(&n, in, out, &d), PH_OK, d.msg);
}

/* ---- CausalConvWithState --------------------------------------------------------------------- */

typedef struct cc_cfg {
  int B, Ch, L, K, dil;
  int channels_last, has_bias, has_past;
  const char *act; /* NULL: attribute absent */
  ph_dtype dt;
  uint64_t seed;
} cc_cfg;

static void cc_name(const cc_cfg *c, char *buf, size_t n) {
  snprintf(buf, n, "Conv[B%d C%d L%d K%d dil%d %s%s%s act=%s %s]", c->B, c->Ch, c->L, c->K, c->dil,
           c->channels_last ? "channels-last " : "", c->has_bias ? "bias " : "",
           c->has_past ? "past" : "no-past", c->act ? c->act : "(none)", dt_name(c->dt));
}

static void cc_inputs(const cc_cfg *c, tensor *in[4]) {
  rng r = rng_seed(c->seed);
  int P = (c->K - 1) * c->dil;
  memset(in, 0, 4 * sizeof in[0]);
  in[0] = c->channels_last ? mk3(c->dt, c->B, c->L, c->Ch) : mk3(c->dt, c->B, c->Ch, c->L);
  in[1] = mk3(c->dt, c->Ch, 1, c->K);
  tensor_fill_uniform(in[0], &r, -2.0f, 2.0f);
  tensor_fill_uniform(in[1], &r, -1.0f, 1.0f);
  if (c->has_bias) {
    in[2] = mk1(c->dt, c->Ch);
    tensor_fill_uniform(in[2], &r, -0.5f, 0.5f);
  }
  if (c->has_past) {
    in[3] = c->channels_last ? mk3(c->dt, c->B, P, c->Ch) : mk3(c->dt, c->B, c->Ch, P);
    tensor_fill_uniform(in[3], &r, -2.0f, 2.0f);
  }
}

static ph_status cc_call(const cc_cfg *c, tensor *in[4], tensor *out[2], int threads, diag *d) {
  gattr a[4];
  int n = 0;
  if (c->act) a[n++] = attr_string("activation", c->act);
  if (c->dil != 1) a[n++] = attr_int("dilation", c->dil);
  if (c->channels_last) a[n++] = attr_int("channels_last", 1);
  gnode node = op_test_node("CausalConvWithState", "com.microsoft", 4, 2, a, n);
  return op_test_run(&node, in, out, threads, d);
}

/* spec/ort-1.30.md §2: x_full = concat(past_state, x) over time; y[t] = act(bias +
 * Σ_j w[j] x_full[t + j dil]); present_state = the last (K-1) dil columns of x_full. */
static void cc_reference(const cc_cfg *c, tensor *const in[4], double *y, double *state) {
  int P = (c->K - 1) * c->dil, F = P + c->L;
  double *xf = calloc((size_t)F + 1, sizeof(double));
  int silu = c->act && (strcmp(c->act, "silu") == 0 || strcmp(c->act, "swish") == 0);
  for (int b = 0; b < c->B; b++) {
    for (int ch = 0; ch < c->Ch; ch++) {
      for (int p = 0; p < P; p++) {
        int64_t i = c->channels_last ? ((int64_t)b * P + p) * c->Ch + ch
                                     : ((int64_t)b * c->Ch + ch) * P + p;
        xf[p] = in[3] ? tensor_get_f32(in[3], i) : 0.0;
      }
      for (int t = 0; t < c->L; t++) {
        int64_t i = c->channels_last ? ((int64_t)b * c->L + t) * c->Ch + ch
                                     : ((int64_t)b * c->Ch + ch) * c->L + t;
        xf[P + t] = tensor_get_f32(in[0], i);
      }
      for (int t = 0; t < c->L; t++) {
        double acc = in[2] ? tensor_get_f32(in[2], ch) : 0.0;
        for (int j = 0; j < c->K; j++)
          acc += tensor_get_f32(in[1], (int64_t)ch * c->K + j) * xf[t + j * c->dil];
        if (silu) acc = acc / (1.0 + exp(-acc));
        int64_t i = c->channels_last ? ((int64_t)b * c->L + t) * c->Ch + ch
                                     : ((int64_t)b * c->Ch + ch) * c->L + t;
        y[i] = acc;
      }
      for (int p = 0; p < P; p++) {
        int64_t i = c->channels_last ? ((int64_t)b * P + p) * c->Ch + ch
                                     : ((int64_t)b * c->Ch + ch) * P + p;
        state[i] = xf[c->L + p];
      }
    }
  }
  free(xf);
}

static void cc_check_case(const cc_cfg *c) {
  char name[160];
  cc_name(c, name, sizeof name);
  tensor *in[4], *out[2] = {NULL, NULL};
  cc_inputs(c, in);
  diag d;
  ph_status s = cc_call(c, in, out, 2, &d);
  CHECK_STATUS(s, PH_OK, d.msg);
  if (s == PH_OK) {
    int P = (c->K - 1) * c->dil;
    int64_t ny = (int64_t)c->B * c->Ch * c->L, ns = (int64_t)c->B * c->Ch * P;
    double *ry = calloc((size_t)ny + 1, sizeof(double));
    double *rs = calloc((size_t)ns + 1, sizeof(double));
    cc_reference(c, in, ry, rs);
    CHECK_EQ_INT(tensor_numel(out[0]), ny);
    CHECK_EQ_INT(tensor_numel(out[1]), ns);
    double e = compare(out[0], ry, ny, 1e-5, "output", name); /* 5 u: file header */
    if (c->dt == PH_DTYPE_F32) g_cc_err = dmax(g_cc_err, e);
    /* The state only moves stored values: exact in every dtype. */
    int exact = 1;
    for (int64_t i = 0; i < ns; i++) exact &= tensor_get_f32(out[1], i) == rs[i];
    if (!CHECK(exact)) fprintf(stderr, "       %s: present_state is not exact\n", name);
    g_cc_cases++;
    free(ry);
    free(rs);
  } else {
    fprintf(stderr, "       %s\n", name);
  }
  tensor_free(out[0]);
  tensor_free(out[1]);
  for (int i = 0; i < 4; i++) tensor_free(in[i]);
}

/* L around K-1 (1, 2 < K-1 = 3, 3, 7, 33) x K x dilation x layout; the other parameters are
 * mixed from those indices so that every pair of parameters meets in all its combinations. */
static void test_cc_grid(void) {
  static const int Ls[] = {1, 2, 3, 7, 33};
  static const int Ks[] = {4, 2, 1, 3};
  static const char *const acts[] = {"silu", NULL, "none", "swish"};
  static const ph_dtype dts[] = {PH_DTYPE_F32, PH_DTYPE_F16, PH_DTYPE_F32, PH_DTYPE_BF16};
  for (int li = 0; li < 5; li++) {
    for (int ki = 0; ki < 4; ki++) {
      for (int di = 0; di < 2; di++) {
        for (int cl = 0; cl <= 1; cl++) {
          cc_cfg c;
          memset(&c, 0, sizeof c);
          c.B = (li + ki + cl) % 3 == 0 ? 3 : 1;
          c.Ch = (li + ki + di) % 2 ? 37 : 5; /* 37: three channel blocks, the last partial */
          c.L = Ls[li];
          c.K = Ks[ki];
          c.dil = di + 1;
          c.channels_last = cl;
          c.has_bias = (li + cl + ki / 2) % 2;
          c.has_past = (li + ki + di + cl) % 3 != 0;
          c.act = acts[(li + 2 * ki + di + cl) % 4];
          c.dt = dts[(li + 3 * ki + 2 * cl + di + li / 2) % 4];
          c.seed = 2000 + (uint64_t)(((li * 4 + ki) * 2 + di) * 2 + cl);
          cc_check_case(&c);
        }
      }
    }
  }
}

/* A long input in one call against one token per call (state fed back), threads 1 vs 3, and
 * present_state written over past_state: all bit for bit (same sums in the same order). */
static void test_cc_streaming_threads_alias(void) {
  for (int cl = 0; cl <= 1; cl++) {
    cc_cfg c;
    memset(&c, 0, sizeof c);
    c.B = 3;
    c.Ch = 40;
    c.L = 12;
    c.K = 4;
    c.dil = 2;
    c.channels_last = cl;
    c.has_bias = 1;
    c.has_past = 1;
    c.act = "silu";
    c.dt = PH_DTYPE_F32;
    c.seed = 31 + (uint64_t)cl;
    tensor *in[4], *o1[2] = {NULL, NULL}, *o3[2] = {NULL, NULL};
    cc_inputs(&c, in);
    diag d;
    CHECK_STATUS(cc_call(&c, in, o1, 1, &d), PH_OK, d.msg);
    CHECK_STATUS(cc_call(&c, in, o3, 3, &d), PH_OK, d.msg);
    if (!o1[0] || !o3[0]) continue;
    CHECK(same_bits(o1[0], o3[0]));
    CHECK(same_bits(o1[1], o3[1]));

    /* One token at a time; channels-first input is [B,C,L] so slice along the last axis. */
    int P = (c.K - 1) * c.dil;
    tensor *state = c.channels_last ? mk3(c.dt, c.B, P, c.Ch) : mk3(c.dt, c.B, c.Ch, P);
    memcpy(state->data, in[3]->data, (size_t)tensor_numel(state) * sizeof(float));
    int ok = 1;
    for (int t = 0; t < c.L; t++) {
      cc_cfg c1 = c;
      c1.L = 1;
      tensor *x = c.channels_last ? mk3(c.dt, c.B, 1, c.Ch) : mk3(c.dt, c.B, c.Ch, 1);
      for (int b = 0; b < c.B; b++)
        for (int ch = 0; ch < c.Ch; ch++) {
          int64_t src = c.channels_last ? ((int64_t)b * c.L + t) * c.Ch + ch
                                        : ((int64_t)b * c.Ch + ch) * c.L + t;
          tensor_set_f32(x, (int64_t)b * c.Ch + ch, tensor_get_f32(in[0], src));
        }
      tensor *step_in[4] = {x, in[1], in[2], state};
      tensor *step_out[2] = {NULL, state}; /* present written over past */
      CHECK_STATUS(cc_call(&c1, step_in, step_out, 2, &d), PH_OK, d.msg);
      for (int b = 0; b < c.B && step_out[0]; b++)
        for (int ch = 0; ch < c.Ch; ch++) {
          int64_t dst = c.channels_last ? ((int64_t)b * c.L + t) * c.Ch + ch
                                        : ((int64_t)b * c.Ch + ch) * c.L + t;
          ok &= tensor_get_f32(step_out[0], (int64_t)b * c.Ch + ch) == tensor_get_f32(o1[0], dst);
        }
      tensor_free(step_out[0]);
      tensor_free(x);
    }
    CHECK(ok);
    CHECK(same_bits(state, o1[1]));
    tensor_free(state);
    tensor_free(o1[0]);
    tensor_free(o1[1]);
    tensor_free(o3[0]);
    tensor_free(o3[1]);
    for (int i = 0; i < 4; i++) tensor_free(in[i]);
  }
}

static ph_status cc_try(tensor *in[4], int n_in, gattr *a, int na, diag *d) {
  gnode node = op_test_node("CausalConvWithState", "com.microsoft", n_in, 2, a, na);
  tensor *out[2] = {NULL, NULL};
  ph_status s = op_test_run(&node, in, out, 1, d);
  tensor_free(out[0]);
  tensor_free(out[1]);
  return s;
}

static void test_cc_errors(void) {
  ph_dtype f = PH_DTYPE_F32;
  tensor *x = mk3(f, 2, 4, 5), *w = mk3(f, 4, 1, 3), *bias = mk1(f, 4), *past = mk3(f, 2, 4, 2);
  tensor *in[4] = {x, w, bias, past};
  diag d;
  CHECK_STATUS(cc_try(in, 4, NULL, 0, &d), PH_OK, d.msg);
  gattr sw = attr_int("state_window", 2);
  CHECK_STATUS(cc_try(in, 4, &sw, 1, &d), PH_ERR_UNSUPPORTED, d.msg);
  CHECK_CONTAINS(d.msg, "state_window");
  gattr nd = attr_int("ndim", 2);
  CHECK_STATUS(cc_try(in, 4, &nd, 1, &d), PH_ERR_UNSUPPORTED, d.msg);
  CHECK_CONTAINS(d.msg, "ndim");
  gattr nd4 = attr_int("ndim", 4);
  CHECK_STATUS(cc_try(in, 4, &nd4, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  gattr dil0 = attr_int("dilation", 0);
  CHECK_STATUS(cc_try(in, 4, &dil0, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  gattr relu = attr_string("activation", "relu");
  CHECK_STATUS(cc_try(in, 4, &relu, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  gattr cl2 = attr_int("channels_last", 2);
  CHECK_STATUS(cc_try(in, 4, &cl2, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  /* dilation 2 needs a state of (K-1)*2 = 4 columns. */
  gattr dil2 = attr_int("dilation", 2);
  CHECK_STATUS(cc_try(in, 4, &dil2, 1, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  tensor *w2 = tensor_new(f, 2, (int64_t[]){4, 3}), *w_c = mk3(f, 5, 1, 3), *w_g = mk3(f, 4, 2, 3);
  tensor *bias5 = mk1(f, 5), *past_b = mk3(f, 1, 4, 2), *past16 = mk3(PH_DTYPE_F16, 2, 4, 2);
  tensor *x2 = tensor_new(f, 2, (int64_t[]){4, 5});
  tensor *e1[4] = {x, w2, NULL, NULL}, *e2[4] = {x, w_c, NULL, NULL}, *e3[4] = {x, w_g, NULL, NULL};
  tensor *e4[4] = {x, w, bias5, NULL}, *e5[4] = {x, w, NULL, past_b}, *e6[4] = {x, w, NULL, past16};
  tensor *e7[4] = {x2, w, NULL, NULL};
  CHECK_STATUS(cc_try(e1, 2, NULL, 0, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  CHECK_STATUS(cc_try(e2, 2, NULL, 0, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  CHECK_STATUS(cc_try(e3, 2, NULL, 0, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  CHECK_STATUS(cc_try(e4, 3, NULL, 0, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  CHECK_STATUS(cc_try(e5, 4, NULL, 0, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  CHECK_STATUS(cc_try(e6, 4, NULL, 0, &d), PH_ERR_TENSOR_DTYPE, d.msg);
  CHECK_STATUS(cc_try(e7, 2, NULL, 0, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  tensor *frees[] = {x, w, bias, past, w2, w_c, w_g, bias5, past_b, past16, x2};
  for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++) tensor_free(frees[i]);

  /* Build time: an unknown L propagates; a known K gives the state length. */
  const op_def *def = op_lookup("com.microsoft", "CausalConvWithState");
  gattr a = attr_int("dilation", 3);
  gnode n = op_test_node("CausalConvWithState", "com.microsoft", 2, 2, &a, 1);
  tinfo ti[2], to[2];
  memset(ti, 0, sizeof ti);
  memset(to, 0, sizeof to);
  ti[0].dtype = ti[1].dtype = PH_DTYPE_F16;
  ti[0].rank = ti[1].rank = 3;
  memcpy(ti[0].dims, (int64_t[]){-1, 8, -1}, 3 * sizeof(int64_t));
  memcpy(ti[1].dims, (int64_t[]){8, 1, 4}, 3 * sizeof(int64_t));
  CHECK_STATUS(def->infer(&n, ti, to, &d), PH_OK, d.msg);
  CHECK_EQ_INT(to[0].dims[0], -1);
  CHECK_EQ_INT(to[0].dims[1], 8);
  CHECK_EQ_INT(to[0].dims[2], -1);
  CHECK_EQ_INT(to[1].dtype, PH_DTYPE_F16);
  CHECK_EQ_INT(to[1].dims[0], -1);
  CHECK_EQ_INT(to[1].dims[1], 8);
  CHECK_EQ_INT(to[1].dims[2], 9);
}

/* ---- LinearAttentionGate --------------------------------------------------------------------- */

static double softplus_ref(double x) { return x > 20.0 ? x : log1p(exp(x)); }

static void test_lg(void) {
  static const ph_dtype dts[] = {PH_DTYPE_F32, PH_DTYPE_F16, PH_DTYPE_BF16};
  for (int di = 0; di < 3; di++) {
    for (int with_b = 0; with_b <= 1; with_b++) {
      int B = 3, T = 41, H = 6;
      rng r = rng_seed(40 + (uint64_t)(di * 2 + with_b));
      tensor *a = mk3(dts[di], B, T, H), *b = with_b ? mk3(dts[di], B, T, H) : NULL;
      tensor *dtb = mk1(PH_DTYPE_F32, H), *ds = mk1(PH_DTYPE_F32, H);
      tensor_fill_uniform(a, &r, -12.0f, 12.0f);
      /* Values around the softplus threshold: a + dt_bias crosses 20 for some heads. */
      for (int h = 0; h < H; h++) {
        tensor_set_f32(dtb, h, -2.0f + 3.5f * (float)h);
        tensor_set_f32(ds, h, -expf(rng_range(&r, -3.0f, 1.0f)));
      }
      if (b) tensor_fill_uniform(b, &r, -9.0f, 9.0f);
      tensor *in[4] = {a, dtb, ds, b}, *out[2] = {NULL, NULL};
      gnode n = op_test_node("LinearAttentionGate", "com.microsoft", 4, with_b ? 2 : 1, NULL, 0);
      diag d;
      CHECK_STATUS(op_test_run(&n, in, out, 3, &d), PH_OK, d.msg);
      if (!out[0]) continue;
      int64_t N = (int64_t)B * T * H;
      double *rd = calloc((size_t)N, sizeof(double)), *rb = calloc((size_t)N, sizeof(double));
      for (int64_t i = 0; i < N; i++) {
        int h = (int)(i % H);
        rd[i] = tensor_get_f32(ds, h) *
                softplus_ref(tensor_get_f32(a, i) + (double)tensor_get_f32(dtb, h));
        if (b) rb[i] = 1.0 / (1.0 + exp(-(double)tensor_get_f32(b, i)));
      }
      char name[64];
      snprintf(name, sizeof name, "Gate[%s%s]", dt_name(dts[di]), with_b ? " b" : "");
      /* Elementwise with values of very different sizes: f32 is checked per element, relative
       * to it. Each output is a handful of f32 operations: the add, exp and log1p of softplus
       * (or the threshold), the product (decay); exp, add, divide (sigmoid beta). Each is within
       * one ulp of its exact result (libm's expf/log1pf: < 1 ulp; + - * /: half), an ulp being
       * at most 2^-23 = 1.2e-7 relative, and softplus does not amplify a relative error of its
       * input (x sigmoid(x) / softplus(x) <= 1): 5 ulp = 6e-7; 2e-6 leaves room for libm's worst
       * inputs. A NaN is an infinite error (dmax would drop it). */
      if (dts[di] == PH_DTYPE_F32) {
        double worst = 0.0;
        for (int64_t i = 0; i < N; i++) {
          double e0 = fabs(tensor_get_f32(out[0], i) - rd[i]) / dmax(1e-30, fabs(rd[i]));
          if (!(e0 == e0)) e0 = INFINITY;
          worst = dmax(worst, e0);
          if (b) {
            double e1 = fabs(tensor_get_f32(out[1], i) - rb[i]) / fabs(rb[i]);
            worst = dmax(worst, e1 == e1 ? e1 : INFINITY);
          }
        }
        g_lg_err = dmax(g_lg_err, worst);
        if (!CHECK(worst <= 2e-6))
          fprintf(stderr, "       %s: worst relative error %.3g\n", name, worst);
      } else {
        /* f16/bf16: the f32 value above rounded once (one output ulp) plus its 6e-7 */
        compare(out[0], rd, N, 1e-6, "decay", name);
        if (b) compare(out[1], rb, N, 1e-6, "beta", name);
      }
      CHECK(with_b ? out[1] != NULL : out[1] == NULL);
      free(rd);
      free(rb);
      tensor_free(out[0]);
      tensor_free(out[1]);
      tensor_free(a);
      tensor_free(b);
      tensor_free(dtb);
      tensor_free(ds);
    }
  }
}

static void test_lg_errors(void) {
  tensor *a = mk3(PH_DTYPE_F16, 1, 2, 4), *dtb = mk1(PH_DTYPE_F32, 4), *ds = mk1(PH_DTYPE_F32, 4);
  tensor *dt16 = mk1(PH_DTYPE_F16, 4), *ds5 = mk1(PH_DTYPE_F32, 5);
  tensor *b32 = mk3(PH_DTYPE_F32, 1, 2, 4);
  tensor *a2 = tensor_new(PH_DTYPE_F16, 2, (int64_t[]){2, 4});
  diag d;
  tensor *out[2] = {NULL, NULL};
  gnode two = op_test_node("LinearAttentionGate", "com.microsoft", 3, 2, NULL, 0);
  gnode one = op_test_node("LinearAttentionGate", "com.microsoft", 3, 1, NULL, 0);
  gnode four = op_test_node("LinearAttentionGate", "com.microsoft", 4, 2, NULL, 0);
  tensor *ok[4] = {a, dtb, ds, NULL};
  CHECK_STATUS(op_test_run(&two, ok, out, 1, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, "beta");
  CHECK_STATUS(op_test_run(&one, ok, out, 1, &d), PH_OK, d.msg);
  tensor_free(out[0]);
  out[0] = NULL;
  tensor *e1[4] = {a, dt16, ds, NULL}, *e2[4] = {a, dtb, ds5, NULL}, *e3[4] = {a, dtb, ds, b32};
  tensor *e4[4] = {a2, dtb, ds, NULL};
  CHECK_STATUS(op_test_run(&one, e1, out, 1, &d), PH_ERR_TENSOR_DTYPE, d.msg);
  CHECK_STATUS(op_test_run(&one, e2, out, 1, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  CHECK_STATUS(op_test_run(&four, e3, out, 1, &d), PH_ERR_TENSOR_DTYPE, d.msg);
  CHECK_STATUS(op_test_run(&one, e4, out, 1, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  tensor *frees[] = {a, dtb, ds, dt16, ds5, b32, a2};
  for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++) tensor_free(frees[i]);
}

/* ---- GatedRMSNorm ---------------------------------------------------------------------------- */

static void test_gn(void) {
  static const ph_dtype dts[] = {PH_DTYPE_F32, PH_DTYPE_F16, PH_DTYPE_BF16};
  static const struct {
    int rank;
    int64_t dims[3];
    int C;
  } shapes[] = {{3, {3, 5, 48}, 24}, {2, {7, 16, 0}, 16}, {3, {1, 2, 256}, 128}};
  int idx = 0;
  for (int si = 0; si < 3; si++) {
    for (int di = 0; di < 3; di++, idx++) {
      int C = shapes[si].C;
      rng r = rng_seed(60 + (uint64_t)idx);
      tensor *x = tensor_new(dts[di], shapes[si].rank, shapes[si].dims);
      tensor *z = tensor_new(dts[di], shapes[si].rank, shapes[si].dims);
      tensor *w = mk1(dts[di], C);
      tensor_fill_uniform(x, &r, -3.0f, 3.0f);
      tensor_fill_uniform(z, &r, -6.0f, 6.0f);
      tensor_fill_uniform(w, &r, 0.5f, 1.5f);
      /* Odd cases set epsilon explicitly, even ones take the default 1e-5. */
      int explicit_eps = idx % 2;
      gattr a = attr_float("epsilon", 1e-6f);
      gnode n = op_test_node("GatedRMSNorm", "com.microsoft", 3, 1, &a, explicit_eps);
      double eps = explicit_eps ? 1e-6f : 1e-5f;
      tensor *in[3] = {x, w, z}, *out[1] = {NULL};
      diag d;
      CHECK_STATUS(op_test_run(&n, in, out, 3, &d), PH_OK, d.msg);
      int64_t N = tensor_numel(x);
      double *ry = calloc((size_t)N, sizeof(double));
      for (int64_t g0 = 0; g0 < N; g0 += C) {
        double ss = 0.0;
        for (int c = 0; c < C; c++) ss += pow(tensor_get_f32(x, g0 + c), 2);
        double inv = 1.0 / sqrt(ss / C + eps);
        for (int c = 0; c < C; c++) {
          double zv = tensor_get_f32(z, g0 + c);
          double silu = zv / (1.0 + exp(-zv));
          ry[g0 + c] = tensor_get_f32(x, g0 + c) * inv * tensor_get_f32(w, c) * silu;
        }
      }
      char name[64];
      snprintf(name, sizeof name, "GatedRMSNorm[C%d %s]", C, dt_name(dts[di]));
      if (out[0]) {
        /* The sum of C squares is within C u of exact relative to itself (positive terms), the
         * inverse square root halves that; then about 8 roundings (mean, eps, rsqrt, three
         * products, silu's exp, add and divide) of at most an ulp each: (C / 2 + 8) u relative
         * per element, so of the scale too (C = 128: 4.3e-6; measured 1.7e-7). */
        double e = compare(out[0], ry, N, (C / 2.0 + 8.0) * 0x1p-24, "Y", name);
        if (dts[di] == PH_DTYPE_F32) g_gn_err = dmax(g_gn_err, e);
      }
      free(ry);
      tensor_free(out[0]);
      tensor_free(x);
      tensor_free(z);
      tensor_free(w);
    }
  }
  /* Errors. */
  tensor *x = mk3(PH_DTYPE_F32, 2, 3, 48), *w = mk1(PH_DTYPE_F32, 24), *w5 = mk1(PH_DTYPE_F32, 5);
  tensor *z = mk3(PH_DTYPE_F32, 2, 3, 48), *z2 = mk3(PH_DTYPE_F32, 2, 4, 48);
  tensor *w16 = mk1(PH_DTYPE_F16, 24);
  gnode n = op_test_node("GatedRMSNorm", "com.microsoft", 3, 1, NULL, 0);
  tensor *out[1] = {NULL};
  diag d;
  tensor *e1[3] = {x, w5, z}, *e2[3] = {x, w, z2}, *e3[3] = {x, w16, z};
  CHECK_STATUS(op_test_run(&n, e1, out, 1, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  CHECK_STATUS(op_test_run(&n, e2, out, 1, &d), PH_ERR_TENSOR_SHAPE, d.msg);
  CHECK_STATUS(op_test_run(&n, e3, out, 1, &d), PH_ERR_TENSOR_DTYPE, d.msg);
  gattr sig = attr_string("activation", "sigmoid");
  gnode ns = op_test_node("GatedRMSNorm", "com.microsoft", 3, 1, &sig, 1);
  tensor *okin[3] = {x, w, z};
  CHECK_STATUS(op_test_run(&ns, okin, out, 1, &d), PH_ERR_UNSUPPORTED, d.msg);
  tensor *frees[] = {x, w, w5, z, z2, w16};
  for (size_t i = 0; i < sizeof frees / sizeof frees[0]; i++) tensor_free(frees[i]);
}

static void test_report(void) {
  printf("  LinearAttention: %d cases vs float64; f32 max error %.3g of scale; f16/bf16 worst "
         "element at %.2f of its bound (1 ulp + 1e-5 of scale)\n",
         g_la_cases, g_la_f32_err, g_la_half_bound);
  printf("  LinearAttention: chunked vs recurrent %.3g, split calls vs recurrent %.3g, chunk 32 "
         "vs 64 %.3g (of scale)\n",
         g_la_chunk_rec, g_la_split, g_la_chunk32);
  printf("  CausalConvWithState: %d cases; f32 output max error %.3g of scale\n", g_cc_cases,
         g_cc_err);
  printf("  LinearAttentionGate f32 max relative error %.3g; GatedRMSNorm f32 %.3g of scale\n",
         g_lg_err, g_gn_err);
}

int main(void) {
  RUN(test_la_grid);
  RUN(test_la_strong_decay);
  RUN(test_la_chunked_vs_recurrent);
  RUN(test_la_threads_and_alias);
  RUN(test_la_batch_invariance);
  RUN(test_la_empty);
  RUN(test_la_errors);
  RUN(test_la_infer_unknown);
  RUN(test_cc_grid);
  RUN(test_cc_streaming_threads_alias);
  RUN(test_cc_errors);
  RUN(test_lg);
  RUN(test_lg_errors);
  RUN(test_gn);
  RUN(test_report);
  return check_finish();
}
