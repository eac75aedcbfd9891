/* test_ops_moe — com.microsoft::MoE and the standard ops DeepSeek's router is built from (TopK,
 * OneHot, Log, Softmax, and ReduceSum on the axes it uses), each against a float64 reference
 * written here; MoE's batch invariance bit for bit (a token alone vs in a batch, any thread
 * count, across token chunks, every kernel variant); the CPU prepare pass that lets MoE read its
 * expert weights without the exported graph's Cast.
 *
 * MoE tolerance (derived in moe_reference): first-order error propagation with u = 2^-24 through
 * each f32 step the op takes — fc1 dot products of length H (gamma(H + 1) times the sum of
 * |terms|), the SwiGLU (its derivative times the error of G and L, plus (|alpha G| + 8) u of its
 * own evaluation), fc2 dot products of length I (the propagated error plus gamma(I + 1) times the
 * sum of |terms|), the routing weight (softmax: (|l - max| + E + k + 6) u relative), and the
 * final rank-order sum of k terms — doubled for second-order terms. f16/bf16 outputs add one
 * output ulp (expect_close). Routing logits are drawn well separated (gaps >= 0.2), so f32 and
 * float64 choose the same experts; ties are tested with exactly equal logits, where both do.
 */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "check.h"
#include "exec/exec.h"
#include "graph/prepare.h"
#include "kernels/dispatch.h"
#include "op_testing.h"

#define U32 (1.0 / 16777216.0) /* 2^-24: f32 unit roundoff */

static const ph_dtype FLOATS[] = {PH_DTYPE_F32, PH_DTYPE_F16, PH_DTYPE_BF16};

/* ---- helpers -------------------------------------------------------------------------------- */

static tensor *tn(ph_dtype dt, int rank, const int64_t *dims) { return tensor_new(dt, rank, dims); }

static tensor *i64_tensor(int rank, const int64_t *dims, const int64_t *v) {
  tensor *t = tensor_new(PH_DTYPE_I64, rank, dims);
  memcpy(t->data, v, (size_t)tensor_numel(t) * 8);
  return t;
}

/* |y - ref| <= tol (+ one output ulp of ref for f16/bf16); NaN and inf must match exactly. */
/* ---- MoE: reference ------------------------------------------------------------------------- */

typedef struct moe_case {
  int64_t T, E, k, H, I;
  int rank3;                    /* input [B, S, H] (B = 1 when T is odd) */
  ph_dtype io, w1dt, w2dt, bdt; /* input/router/output; fc1; fc2; biases */
  int bias1, bias2, normalize;
  int attrs; /* 0: alpha 1, beta 0 written (ours); 1: absent (the defaults: the same values);
              * 2: alpha 1.702, beta 1.0 written (GPT-OSS's form) */
  int has_limit;
  float limit;
} moe_case;

static float moe_alpha(const moe_case *c) { return c->attrs == 2 ? 1.702f : 1.0f; }
static float moe_beta(const moe_case *c) { return c->attrs == 2 ? 1.0f : 0.0f; }

/* The attributes of a case (storage in attrs, at least 8); returns the count. */
static int moe_attrs(const moe_case *c, gattr *a) {
  int n = 0;
  a[n++] = attr_int("k", c->k);
  a[n++] = attr_string("activation_type", "swiglu");
  a[n++] = attr_int("swiglu_fusion", 1);
  a[n++] = attr_int("normalize_routing_weights", c->normalize);
  if (c->attrs != 1) {
    a[n++] = attr_float("activation_alpha", moe_alpha(c));
    a[n++] = attr_float("activation_beta", moe_beta(c));
  }
  if (c->has_limit) a[n++] = attr_float("swiglu_limit", c->limit);
  return n;
}

/* in[0..5]: input, router, fc1, fc1 bias (or NULL), fc2, fc2 bias (or NULL). */
static void moe_alloc(const moe_case *c, tensor **in) {
  int64_t B = c->rank3 ? (c->T % 2 ? 1 : 2) : 0;
  if (c->rank3)
    in[0] = tn(c->io, 3, (int64_t[]){B, c->T / B, c->H});
  else
    in[0] = tn(c->io, 2, (int64_t[]){c->T, c->H});
  in[1] = tn(c->io, 2, (int64_t[]){c->T, c->E});
  in[2] = tn(c->w1dt, 3, (int64_t[]){c->E, 2 * c->I, c->H});
  in[3] = c->bias1 ? tn(c->bdt, 2, (int64_t[]){c->E, 2 * c->I}) : NULL;
  in[4] = tn(c->w2dt, 3, (int64_t[]){c->E, c->H, c->I});
  in[5] = c->bias2 ? tn(c->bdt, 2, (int64_t[]){c->E, c->H}) : NULL;
}

/* Router logits for token t: a random permutation of 0.4 * rank plus noise in (-0.1, 0.1), so
 * any two differ by more than 0.2 (bf16 keeps them apart: its ulp below 4 is <= 1/64). */
static void moe_fill_router_row(tensor *r, int64_t t, int64_t E, rng *g) {
  int64_t perm[64];
  for (int64_t e = 0; e < E; e++) perm[e] = e;
  for (int64_t e = E - 1; e > 0; e--) {
    int64_t s = (int64_t)rng_below(g, (uint64_t)(e + 1)), tmp = perm[e];
    perm[e] = perm[s];
    perm[s] = tmp;
  }
  for (int64_t e = 0; e < E; e++)
    tensor_set_f32(r, t * E + e, 0.4f * (float)perm[e] - 1.5f + rng_range(g, -0.1f, 0.1f));
}

static void moe_fill(const moe_case *c, tensor **in, rng *g) {
  tensor_fill_uniform(in[0], g, -1.0f, 1.0f);
  for (int64_t t = 0; t < c->T; t++) moe_fill_router_row(in[1], t, c->E, g);
  tensor_fill_uniform(in[2], g, -0.5f, 0.5f);
  if (in[3]) tensor_fill_uniform(in[3], g, -0.2f, 0.2f);
  tensor_fill_uniform(in[4], g, -0.5f, 0.5f);
  if (in[5]) tensor_fill_uniform(in[5], g, -0.2f, 0.2f);
}

static double gam(int64_t n) { return (double)n * U32 / (1.0 - (double)n * U32); }

/* The k experts of a token from float64 probabilities: ties go to the lower index. */
static void moe_select(const double *p, int64_t E, int64_t k, int64_t *sel) {
  int taken[64] = {0};
  for (int64_t j = 0; j < k; j++) {
    int64_t best = -1;
    for (int64_t e = 0; e < E; e++)
      if (!taken[e] && (best < 0 || p[e] > p[best])) best = e;
    sel[j] = best;
    taken[best] = 1;
  }
}

/* ref[T*H] and tol[T*H] from the stored inputs (see the file comment for tol). */
static void moe_reference(const moe_case *c, tensor *const *in, double *ref, double *tol) {
  const int64_t T = c->T, E = c->E, k = c->k, H = c->H, I = c->I;
  const double alpha = moe_alpha(c), beta = moe_beta(c), lim = c->limit;
  double *h = calloc((size_t)(2 * I), sizeof *h), *s = calloc((size_t)(2 * I), sizeof *s);
  double *a = calloc((size_t)I, sizeof *a), *ea = calloc((size_t)I, sizeof *ea);
  double *x = calloc((size_t)H, sizeof *x);
  for (int64_t t = 0; t < T; t++) {
    double l[64], p[64], mx = -INFINITY, sum = 0;
    for (int64_t e = 0; e < E; e++) {
      l[e] = tensor_get_f32(in[1], t * E + e);
      if (l[e] > mx) mx = l[e];
    }
    for (int64_t e = 0; e < E; e++) sum += p[e] = exp(l[e] - mx);
    for (int64_t e = 0; e < E; e++) p[e] /= sum;
    int64_t sel[64];
    moe_select(p, E, k, sel);
    double wsum = 0, w[64], ew[64];
    for (int64_t j = 0; j < k; j++) wsum += p[sel[j]];
    for (int64_t j = 0; j < k; j++) {
      w[j] = c->normalize ? p[sel[j]] / wsum : p[sel[j]];
      ew[j] = (fabs(l[sel[j]] - mx) + (double)(E + k + 6)) * U32 * w[j];
    }
    for (int64_t i = 0; i < H; i++) x[i] = tensor_get_f32(in[0], t * H + i);
    double *o = ref + t * H, *ot = tol + t * H, *abs_sum = calloc((size_t)H, sizeof *abs_sum);
    for (int64_t i = 0; i < H; i++) o[i] = ot[i] = 0;
    for (int64_t j = 0; j < k; j++) {
      int64_t e = sel[j];
      for (int64_t r = 0; r < 2 * I; r++) {
        double acc = 0, mag = 0;
        for (int64_t q = 0; q < H; q++) {
          double term = (double)tensor_get_f32(in[2], (e * 2 * I + r) * H + q) * x[q];
          acc += term;
          mag += fabs(term);
        }
        if (in[3]) {
          double b = tensor_get_f32(in[3], e * 2 * I + r);
          acc += b;
          mag += fabs(b);
        }
        h[r] = acc;
        s[r] = gam(H + 1) * mag; /* error bound of h[r] in f32 */
      }
      for (int64_t i = 0; i < I; i++) {
        double G = h[2 * i], L = h[2 * i + 1];
        if (c->has_limit) {
          G = G < lim ? G : lim;
          L = L < -lim ? -lim : L > lim ? lim : L;
        }
        double sg = 1.0 / (1.0 + exp(-alpha * G));
        a[i] = G * sg * (L + beta);
        ea[i] = fabs(L + beta) * (sg + fabs(alpha * G) * sg * (1 - sg)) * s[2 * i] +
                fabs(G * sg) * s[2 * i + 1] + (fabs(alpha * G) + 8) * U32 * fabs(a[i]);
      }
      for (int64_t r = 0; r < H; r++) {
        double acc = 0, mag = 0, prop = 0;
        for (int64_t i = 0; i < I; i++) {
          double wv = tensor_get_f32(in[4], (e * H + r) * I + i);
          acc += wv * a[i];
          mag += fabs(wv * a[i]);
          prop += fabs(wv) * ea[i];
        }
        if (in[5]) {
          double b = tensor_get_f32(in[5], e * H + r);
          acc += b;
          mag += fabs(b);
        }
        double ey = prop + gam(I + 1) * mag;
        o[r] += w[j] * acc;
        ot[r] += fabs(w[j]) * ey + ew[j] * fabs(acc);
        abs_sum[r] += fabs(w[j] * acc);
      }
    }
    for (int64_t r = 0; r < H; r++) ot[r] = 2 * (ot[r] + gam(k + 1) * abs_sum[r]) + 1e-30;
    free(abs_sum);
  }
  free(h);
  free(s);
  free(a);
  free(ea);
  free(x);
}

static ph_status moe_run(const moe_case *c, tensor **in, tensor **out, int threads, diag *d) {
  gattr at[8];
  int na = moe_attrs(c, at);
  return op_run("MoE", "com.microsoft", 6, in, 1, out, at, na, threads, ~0u, d);
}

static void moe_case_name(const moe_case *c, char *b, size_t n) {
  snprintf(b, n, "MoE T%lld E%lld k%lld H%lld I%lld io %s w %s/%s norm %d bias %d%d %s%s",
           (long long)c->T, (long long)c->E, (long long)c->k, (long long)c->H, (long long)c->I,
           dtype_label(c->io), dtype_label(c->w1dt), dtype_label(c->w2dt), c->normalize, c->bias1,
           c->bias2,
           c->attrs == 0   ? "ours"
           : c->attrs == 1 ? "defaults"
                           : "alpha 1.702",
           c->has_limit ? " limit" : "");
}

/* Runs a case and checks it against the reference; returns the output (caller frees). */
static tensor *moe_check(const moe_case *c, tensor **in, int threads) {
  tensor *out[1] = {NULL};
  diag d;
  char name[160];
  moe_case_name(c, name, sizeof name);
  ph_status st = moe_run(c, in, out, threads, &d);
  if (!CHECK(st == PH_OK)) {
    fprintf(stderr, "  %s: %s %s\n", name, ph_status_name(st), d.msg);
    return NULL;
  }
  int64_t n = c->T * c->H;
  double *ref = calloc((size_t)n + 1, sizeof *ref), *tol = calloc((size_t)n + 1, sizeof *tol);
  moe_reference(c, in, ref, tol);
  op_expect_close(name, out[0], ref, tol, 0, n);
  free(ref);
  free(tol);
  return out[0];
}

/* ---- MoE: tests ----------------------------------------------------------------------------- */

static void test_moe_grid(void) {
  rng g = rng_seed(1401);
  static const int64_t Ts[] = {1, 3, 17, 64}, Es[] = {4, 8}, Ks[] = {1, 2, 3};
  static const int64_t HI[][2] = {{8, 4}, {19, 7}};
  int n_case = 0;
  for (int ti = 0; ti < 4; ti++)
    for (int ei = 0; ei < 2; ei++)
      for (int ki = 0; ki < 3; ki++)
        for (int hi = 0; hi < 2; hi++)
          for (int norm = 0; norm < 2; norm++)
            for (int io = 0; io < 3; io++)
              for (int wd = 0; wd < 3; wd++) {
                moe_case c = {.T = Ts[ti],
                              .E = Es[ei],
                              .k = Ks[ki],
                              .H = HI[hi][0],
                              .I = HI[hi][1],
                              .io = FLOATS[io],
                              .w1dt = FLOATS[wd],
                              .w2dt = FLOATS[(wd + n_case) % 3],
                              .bdt = FLOATS[(io + wd) % 3],
                              .normalize = norm};
                c.rank3 = n_case % 5 == 0;
                c.bias1 = n_case % 2 == 0;
                c.bias2 = n_case % 3 != 0;
                c.attrs = n_case % 4 == 1 ? 1 : n_case % 4 == 3 ? 2 : 0;
                c.has_limit = n_case % 7 == 3;
                c.limit = 0.6f;
                n_case++;
                tensor *in[6] = {NULL};
                moe_alloc(&c, in);
                moe_fill(&c, in, &g);
                tensor *y = moe_check(&c, in, 1 + n_case % 3);
                tensor_free(y);
                tensors_free(in, 6);
              }
}

/* Exactly equal logits: the lower expert wins, in f32 as in the reference; and the choice
 * matters (the experts differ), so a rule that prefers the higher index fails here. */
static void test_moe_ties(void) {
  rng g = rng_seed(1402);
  static const float LOGITS[4][4] = {
      {1, 1, 1, 1}, {0, 2, 2, 0}, {3, 0, 3, 3}, {-1, 0.5f, 0.5f, 0.5f}};
  for (int io = 0; io < 3; io++)
    for (int norm = 0; norm < 2; norm++)
      for (int64_t k = 1; k <= 2; k++) {
        moe_case c = {.T = 4,
                      .E = 4,
                      .k = k,
                      .H = 6,
                      .I = 3,
                      .io = FLOATS[io],
                      .w1dt = PH_DTYPE_F32,
                      .w2dt = PH_DTYPE_F32,
                      .bdt = PH_DTYPE_F32,
                      .normalize = norm,
                      .attrs = 0};
        tensor *in[6] = {NULL};
        moe_alloc(&c, in);
        moe_fill(&c, in, &g);
        for (int t = 0; t < 4; t++)
          for (int e = 0; e < 4; e++) tensor_set_f32(in[1], t * 4 + e, LOGITS[t][e]);
        tensor *y = moe_check(&c, in, 2);
        /* the same tokens with the tied experts' order reversed in the logits must move the
         * output: it proves the choice is visible */
        if (y) {
          tensor *in2[6] = {NULL};
          moe_alloc(&c, in2);
          for (int i = 0; i < 6; i++)
            if (in[i])
              memcpy(in2[i]->data, in[i]->data,
                     (size_t)tensor_numel(in[i]) * dtype_size(in[i]->dtype));
          /* experts renumbered e -> 3 - e (logits and weights): the lower-index rule on these
           * inputs is the higher-index rule on the originals */
          for (int64_t t = 0; t < 4; t++)
            for (int64_t e = 0; e < 4; e++)
              tensor_set_f32(in2[1], t * 4 + 3 - e, tensor_get_f32(in[1], t * 4 + e));
          for (int64_t e = 0; e < 4; e++) {
            size_t b1 = (size_t)(2 * c.I * c.H) * dtype_size(c.w1dt);
            size_t b2 = (size_t)(c.H * c.I) * dtype_size(c.w2dt);
            memcpy((char *)in2[2]->data + (size_t)(3 - e) * b1,
                   (char *)in[2]->data + (size_t)e * b1, b1);
            memcpy((char *)in2[4]->data + (size_t)(3 - e) * b2,
                   (char *)in[4]->data + (size_t)e * b2, b2);
          }
          tensor *out2[1] = {NULL};
          diag d;
          CHECK_STATUS(moe_run(&c, in2, out2, 1, &d), PH_OK, d.msg);
          if (out2[0])
            CHECK(memcmp(out2[0]->data, y->data, (size_t)(4 * c.H) * dtype_size(c.io)) != 0);
          tensors_free(out2, 1);
          tensors_free(in2, 6);
        }
        tensor_free(y);
        tensors_free(in, 6);
      }
}

/* DeepSeek's routing through MoE: router = log(w) on the chosen experts and a huge negative
 * elsewhere (-1e30 in f32; in f16 it is -inf), normalize 0: the softmax gives w_j / sum(w). */
static void test_moe_log_weights(void) {
  rng g = rng_seed(1403);
  for (int io = 0; io < 3; io++) {
    moe_case c = {.T = 5,
                  .E = 8,
                  .k = 3,
                  .H = 10,
                  .I = 6,
                  .io = FLOATS[io],
                  .w1dt = PH_DTYPE_BF16,
                  .w2dt = PH_DTYPE_BF16,
                  .bdt = PH_DTYPE_F32,
                  .attrs = 0};
    tensor *in[6] = {NULL};
    moe_alloc(&c, in);
    moe_fill(&c, in, &g);
    double wsel[5][3];
    int64_t esel[5][3];
    for (int64_t t = 0; t < c.T; t++) {
      for (int64_t e = 0; e < c.E; e++) tensor_set_f32(in[1], t * c.E + e, -1e30f);
      for (int j = 0; j < 3; j++) {
        esel[t][j] = (t + 3 * j) % c.E;
        float w = 0.1f + 0.3f * (float)j + 0.05f * (float)t;
        tensor_set_f32(in[1], t * c.E + esel[t][j], logf(w));
        wsel[t][j] = exp((double)tensor_get_f32(in[1], t * c.E + esel[t][j]));
      }
    }
    tensor *out[1] = {NULL};
    diag d;
    CHECK_STATUS(moe_run(&c, in, out, 2, &d), PH_OK, d.msg);
    if (out[0]) {
      /* the reference's own softmax over the stored logits (exp(-1e30) = 0, f16 -inf too) is
       * the same as w / sum(w): check both */
      double *ref = calloc((size_t)(c.T * c.H), sizeof *ref);
      double *tol = calloc((size_t)(c.T * c.H), sizeof *tol);
      moe_reference(&c, in, ref, tol);
      op_expect_close("MoE log weights", out[0], ref, tol, 0, c.T * c.H);
      for (int64_t t = 0; t < c.T; t++) {
        double s = wsel[t][0] + wsel[t][1] + wsel[t][2];
        double l[8], mx = -INFINITY, sum = 0;
        for (int64_t e = 0; e < c.E; e++) {
          l[e] = tensor_get_f32(in[1], t * c.E + e);
          mx = l[e] > mx ? l[e] : mx;
        }
        for (int64_t e = 0; e < c.E; e++) sum += exp(l[e] - mx);
        for (int j = 0; j < 3; j++)
          CHECK_NEAR(exp(l[esel[t][j]] - mx) / sum, wsel[t][j] / s, 1e-12);
      }
      free(ref);
      free(tol);
    }
    tensors_free(out, 1);
    tensors_free(in, 6);
  }
}

/* Row t of y as bytes. */
static const void *row_of(const tensor *y, int64_t t, int64_t H) {
  return (const char *)y->data + (size_t)(t * H) * dtype_size(y->dtype);
}

/* Token t of a case's inputs alone: c1 = c with T = 1, in1 its input rows (t's router and input
 * rows; the weights and biases whole). */
static void moe_token(const moe_case *c, tensor *const *in, int64_t t, moe_case *c1, tensor **in1) {
  *c1 = *c;
  c1->T = 1;
  moe_alloc(c1, in1);
  for (int i = 0; i < 6; i++) {
    if (!in[i]) continue;
    size_t bytes = (size_t)tensor_numel(in1[i]) * dtype_size(in[i]->dtype);
    size_t off = i < 2 ? (size_t)t * bytes : 0; /* token rows; weights whole */
    memcpy(in1[i]->data, (const char *)in[i]->data + off, bytes);
  }
}

/* A token's output bits: alone, at several places in a batch of 64 others, on 1..3 threads, in
 * every kernel variant this machine runs. */
static void test_moe_batch_invariance(void) {
  rng g = rng_seed(1404);
  kernel_variant before = kernel_variant_active();
  for (int v = 0; v < KERNEL_N_VARIANTS; v++) {
    if (!kernel_variant_available((kernel_variant)v)) continue;
    diag d;
    CHECK_STATUS(kernel_force_variant((kernel_variant)v, &d), PH_OK, d.msg);
    for (int cfg = 0; cfg < 3; cfg++) {
      moe_case c = {.T = 64,
                    .E = 8,
                    .k = cfg == 2 ? 3 : 2,
                    .H = 40,
                    .I = 24,
                    .io = cfg == 1 ? PH_DTYPE_BF16 : PH_DTYPE_F32,
                    .w1dt = cfg == 0 ? PH_DTYPE_F32 : PH_DTYPE_BF16,
                    .w2dt = cfg == 2 ? PH_DTYPE_F16 : PH_DTYPE_BF16,
                    .bdt = PH_DTYPE_F32,
                    .bias1 = 1,
                    .bias2 = cfg != 1,
                    .normalize = cfg != 2,
                    .attrs = 0};
      tensor *in[6] = {NULL};
      moe_alloc(&c, in);
      moe_fill(&c, in, &g);
      tensor *ref[1] = {NULL};
      CHECK_STATUS(moe_run(&c, in, ref, 1, &d), PH_OK, d.msg);
      if (!ref[0]) {
        tensors_free(in, 6);
        continue;
      }
      size_t rb = (size_t)c.H * dtype_size(c.io);
      for (int th = 2; th <= 3; th++) {
        tensor *o[1] = {NULL};
        CHECK_STATUS(moe_run(&c, in, o, th, &d), PH_OK, d.msg);
        if (o[0]) CHECK(memcmp(o[0]->data, ref[0]->data, (size_t)c.T * rb) == 0);
        tensors_free(o, 1);
      }
      /* each probed token alone */
      static const int64_t PROBES[] = {0, 17, 63};
      for (int pi = 0; pi < 3; pi++) {
        int64_t t = PROBES[pi];
        moe_case c1;
        tensor *in1[6] = {NULL};
        moe_token(&c, in, t, &c1, in1);
        tensor *o[1] = {NULL};
        CHECK_STATUS(moe_run(&c1, in1, o, 1 + pi, &d), PH_OK, d.msg);
        if (o[0] && !CHECK(memcmp(o[0]->data, row_of(ref[0], t, c.H), rb) == 0))
          fprintf(stderr, "  variant %s cfg %d: token %lld alone differs from in the batch\n",
                  kernel_variant_name((kernel_variant)v), cfg, (long long)t);
        tensors_free(o, 1);
        tensors_free(in1, 6);
      }
      /* the batch reversed: every token among other neighbours and at another row */
      tensor *rev[6] = {NULL};
      moe_alloc(&c, rev);
      for (int i = 0; i < 6; i++) {
        if (!in[i]) continue;
        size_t all = (size_t)tensor_numel(in[i]) * dtype_size(in[i]->dtype);
        if (i >= 2) {
          memcpy(rev[i]->data, in[i]->data, all);
          continue;
        }
        size_t row = all / (size_t)c.T;
        for (int64_t t = 0; t < c.T; t++)
          memcpy((char *)rev[i]->data + (size_t)(c.T - 1 - t) * row,
                 (const char *)in[i]->data + (size_t)t * row, row);
      }
      tensor *o[1] = {NULL};
      CHECK_STATUS(moe_run(&c, rev, o, 2, &d), PH_OK, d.msg);
      if (o[0])
        for (int64_t t = 0; t < c.T; t++)
          CHECK(memcmp(row_of(o[0], c.T - 1 - t, c.H), row_of(ref[0], t, c.H), rb) == 0);
      tensors_free(o, 1);
      tensors_free(rev, 6);
      tensors_free(ref, 1);
      tensors_free(in, 6);
    }
  }
  diag d;
  kernel_force_variant(before, &d);
}

/* Tokens go in chunks when k (H + I) floats per token pass the op's 32 MiB budget: with k = 2,
 * H = 2^20, I = 1 a chunk holds 3 tokens, so 7 tokens run as 3 + 3 + 1. Every token must match
 * itself alone and the reference. */
static void test_moe_chunks(void) {
  rng g = rng_seed(1405);
  moe_case c = {.T = 7,
                .E = 3,
                .k = 2,
                .H = (int64_t)1 << 20,
                .I = 1,
                .io = PH_DTYPE_BF16,
                .w1dt = PH_DTYPE_BF16,
                .w2dt = PH_DTYPE_BF16,
                .bdt = PH_DTYPE_F32,
                .bias2 = 1,
                .normalize = 1,
                .attrs = 0};
  tensor *in[6] = {NULL};
  moe_alloc(&c, in);
  moe_fill(&c, in, &g);
  tensor *y = moe_check(&c, in, 2);
  if (y) {
    size_t rb = (size_t)c.H * dtype_size(c.io);
    for (int64_t t = 0; t < c.T; t++) {
      moe_case c1;
      tensor *in1[6] = {NULL};
      moe_token(&c, in, t, &c1, in1);
      tensor *o[1] = {NULL};
      diag d;
      CHECK_STATUS(moe_run(&c1, in1, o, 1, &d), PH_OK, d.msg);
      if (o[0] && !CHECK(memcmp(o[0]->data, row_of(y, t, c.H), rb) == 0))
        fprintf(stderr, "  chunked token %lld differs from alone\n", (long long)t);
      tensors_free(o, 1);
      tensors_free(in1, 6);
    }
  }
  tensor_free(y);
  tensors_free(in, 6);
}

static void test_moe_contract(void) {
  rng g = rng_seed(1406);
  moe_case c = {.T = 3,
                .E = 4,
                .k = 2,
                .H = 8,
                .I = 4,
                .io = PH_DTYPE_F32,
                .w1dt = PH_DTYPE_F32,
                .w2dt = PH_DTYPE_F32,
                .bdt = PH_DTYPE_F32,
                .attrs = 0};
  tensor *in[8] = {NULL};
  moe_alloc(&c, in);
  moe_fill(&c, in, &g);
  tensor *out[1] = {NULL};
  diag d;
  gattr at[10];
  int na = moe_attrs(&c, at);
  /* attributes: each replaces attribute slot (or, slot -1, is added); the status, and what the
   * message names where it says */
  const struct {
    int slot;
    gattr a;
    ph_status want;
    const char *says;
  } bad_attrs[] = {
      {1, attr_string("activation_type", "gelu"), PH_ERR_UNSUPPORTED, "gelu"}, /* named */
      {2, attr_int("swiglu_fusion", 2), PH_ERR_UNSUPPORTED, NULL},
      {-1, attr_int("use_sparse_mixer", 1), PH_ERR_UNSUPPORTED, NULL},
      {0, attr_int("k", 5), PH_ERR_INVALID_ARGUMENT, NULL}, /* > E */
      /* activation_type absent is "relu": unsupported, named */
      {1, attr_int("swiglu_fusion", 1), PH_ERR_UNSUPPORTED, "relu"},
  };
  gattr bad[10];
  for (size_t i = 0; i < sizeof bad_attrs / sizeof bad_attrs[0]; i++) {
    const int slot = bad_attrs[i].slot < 0 ? na : bad_attrs[i].slot;
    memcpy(bad, at, sizeof at);
    bad[slot] = bad_attrs[i].a;
    CHECK_STATUS(
        op_run("MoE", "com.microsoft", 6, in, 1, out, bad, slot < na ? na : na + 1, 1, ~0u, &d),
        bad_attrs[i].want, d.msg);
    if (bad_attrs[i].says) CHECK_CONTAINS(d.msg, bad_attrs[i].says);
  }
  /* k absent is the schema's default, 1 (ORT fills it in): the same bits as k = 1 written */
  {
    tensor *o1[1] = {NULL}, *o2[1] = {NULL};
    memcpy(bad, at, sizeof at);
    bad[0] = attr_int("k", 1);
    CHECK_STATUS(op_run("MoE", "com.microsoft", 6, in, 1, o1, bad, na, 1, ~0u, &d), PH_OK, d.msg);
    CHECK_STATUS(op_run("MoE", "com.microsoft", 6, in, 1, o2, at + 1, na - 1, 1, ~0u, &d), PH_OK,
                 d.msg);
    if (o1[0] && o2[0]) CHECK(memcmp(o1[0]->data, o2[0]->data, 3 * 8 * 4) == 0);
    tensors_free(o1, 1);
    tensors_free(o2, 1);
  }
  /* fc3 present: unsupported, like ORT's CPU kernel */
  in[6] = tn(PH_DTYPE_F32, 3, (int64_t[]){4, 4, 8});
  CHECK_STATUS(op_run("MoE", "com.microsoft", 7, in, 1, out, at, na, 1, ~0u, &d),
               PH_ERR_UNSUPPORTED, d.msg);
  CHECK_CONTAINS(d.msg, "fc3");
  tensors_free(in + 6, 1);
  /* inputs: fc1 rows must be 2I; router E must match; the input a float */
  static const struct {
    int slot;
    ph_dtype dt;
    int rank;
    int64_t dims[3];
    ph_status want;
  } bad_inputs[] = {{2, PH_DTYPE_F32, 3, {4, 6, 8}, PH_ERR_TENSOR_SHAPE},
                    {1, PH_DTYPE_F32, 2, {3, 5}, PH_ERR_TENSOR_SHAPE},
                    {0, PH_DTYPE_I64, 2, {3, 8}, PH_ERR_TENSOR_DTYPE}};
  for (size_t i = 0; i < sizeof bad_inputs / sizeof bad_inputs[0]; i++) {
    const int k = bad_inputs[i].slot;
    tensor *keep = in[k];
    in[k] = tn(bad_inputs[i].dt, bad_inputs[i].rank, bad_inputs[i].dims);
    CHECK_STATUS(op_run("MoE", "com.microsoft", 6, in, 1, out, at, na, 1, ~0u, &d),
                 bad_inputs[i].want, d.msg);
    tensor_free(in[k]);
    in[k] = keep;
  }
  /* static shapes: unknown T propagates */
  const op_def *def = op_lookup("com.microsoft", "MoE");
  CHECK(def != NULL);
  if (def) {
    gnode n = op_test_node("MoE", "com.microsoft", 5, 1, at, na);
    n.op = def;
    tinfo ti[5], to[1];
    memset(ti, 0, sizeof ti);
    ti[0] = tensor_tinfo(in[0], 0);
    ti[0].dims[0] = -1;
    ti[1] = tensor_tinfo(in[1], 0);
    ti[1].dims[0] = -1;
    ti[2] = tensor_tinfo(in[2], 0);
    ti[4] = tensor_tinfo(in[4], 0);
    CHECK_STATUS(def->infer(&n, ti, to, &d), PH_OK, d.msg);
    CHECK_EQ_INT(to[0].rank, 2);
    CHECK_EQ_INT(to[0].dims[0], -1);
    CHECK_EQ_INT(to[0].dims[1], 8);
    /* absurd static dims (a fuzzed file) are only shapes: no overflow while sizing chunks */
    gattr big[10];
    memcpy(big, at, sizeof at);
    big[0] = attr_int("k", INT64_MAX / 2);
    n.attrs = big;
    ti[0].dims[0] = 3;
    ti[0].dims[1] = ti[2].dims[2] = ti[4].dims[1] = INT64_MAX / 4;
    ti[1].dims[0] = 3;
    ti[1].dims[1] = ti[2].dims[0] = ti[4].dims[0] = -1;
    ti[2].dims[1] = 2 * (INT64_MAX / 8);
    ti[4].dims[2] = INT64_MAX / 8;
    CHECK_STATUS(def->infer(&n, ti, to, &d), PH_OK, d.msg);
  }
  tensors_free(in, 8);
}

/* ---- MoE: the prepare pass drops the weight Casts ------------------------------------------- */

/* x [T, H] and router [T, E] in io; fc1/fc2 initializers in wdt, Cast to io when they differ
 * (what an exporter writes for ORT, whose MoE wants one dtype), or fed directly when direct. */
static graph *moe_graph(ph_dtype io, ph_dtype wdt, int direct, const void *w1, const void *w2,
                        diag *d) {
  graph *g = NULL;
  if (graph_create(&g, d) != PH_OK) return NULL;
  int x = graph_add_input(g, "x", io, 2, (int64_t[]){-1, 8}, NULL);
  int r = graph_add_input(g, "router", io, 2, (int64_t[]){-1, 4}, NULL);
  int a = graph_add_initializer_view(g, "fc1", wdt, shape_3d(4, 6, 8), w1);
  int b = graph_add_initializer_view(g, "fc2", wdt, shape_3d(4, 8, 3), w2);
  if (wdt != io && !direct) {
    gattr to = attr_int("to", dtype_to_onnx(io));
    int ca = -1, cb = -1;
    graph_add_node(g, "Cast", "", "cast_fc1", 1, &a, 1, (const char *[]){"fc1_io"}, &ca, 1, &to);
    graph_add_node(g, "Cast", "", "cast_fc2", 1, &b, 1, (const char *[]){"fc2_io"}, &cb, 1, &to);
    a = ca;
    b = cb;
  }
  gattr at[6] = {attr_int("k", 2),
                 attr_string("activation_type", "swiglu"),
                 attr_int("swiglu_fusion", 1),
                 attr_int("normalize_routing_weights", 1),
                 attr_float("activation_alpha", 1.0f),
                 attr_float("activation_beta", 0.0f)};
  int y = -1;
  graph_add_node(g, "MoE", "com.microsoft", "moe", 5, (int[]){x, r, a, -1, b}, 1,
                 (const char *[]){"y"}, &y, 6, at);
  graph_mark_output(g, y, NULL);
  if (graph_finalize(g, d) != PH_OK) {
    graph_free(g);
    return NULL;
  }
  return g;
}

/* Runs g on fixed inputs; out gets T*8 values of io's dtype (bytes). */
static int moe_graph_run(graph *g, ph_dtype io, void *out) {
  diag d;
  executor *e = NULL;
  CHECK_STATUS(exec_create(g, 2, &e, &d), PH_OK, d.msg);
  if (!e) return 0;
  enum { T = 5 };
  int64_t xd[2] = {T, 8}, rd[2] = {T, 4};
  tensor *x = tn(io, 2, xd), *r = tn(io, 2, rd);
  for (int i = 0; i < T * 8; i++) tensor_set_f32(x, i, (float)(i % 7) * 0.25f - 0.7f);
  for (int i = 0; i < T * 4; i++) tensor_set_f32(r, i, (float)((i * 5) % 4) * 0.5f);
  ph_status st = exec_bind_input(e, 0, x, &d);
  if (st == PH_OK) st = exec_bind_input(e, 1, r, &d);
  if (st == PH_OK) st = exec_run(e, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  if (st == PH_OK) memcpy(out, exec_output(e, 0)->data, (size_t)T * 8 * dtype_size(io));
  tensor_free(x);
  tensor_free(r);
  exec_free(e);
  return st == PH_OK;
}

static void test_moe_prepare(void) {
  /* weights not representable in f16 or bf16 (k/3 + 1/7), so a lost narrowing shows */
  static float w1f[4 * 6 * 8], w2f[4 * 8 * 3];
  static uint16_t w1h[4 * 6 * 8], w2h[4 * 8 * 3];
  for (int i = 0; i < 192; i++) w1f[i] = (float)(i % 9 - 4) / 3.0f * 0.1f + 1.0f / 7.0f * 0.1f;
  for (int i = 0; i < 96; i++) w2f[i] = (float)(i % 11 - 5) / 3.0f * 0.1f - 1.0f / 7.0f * 0.1f;
  static const struct {
    ph_dtype io, w;
  } CASES[] = {{PH_DTYPE_F32, PH_DTYPE_BF16}, /* widening: read the bf16 initializer */
               {PH_DTYPE_F32, PH_DTYPE_F16},  {PH_DTYPE_F16, PH_DTYPE_F32}, /* narrowing */
               {PH_DTYPE_BF16, PH_DTYPE_F32}, {PH_DTYPE_BF16, PH_DTYPE_F16},
               {PH_DTYPE_F16, PH_DTYPE_F16}}; /* no Cast at all */
  for (size_t ci = 0; ci < sizeof CASES / sizeof CASES[0]; ci++) {
    ph_dtype io = CASES[ci].io, wdt = CASES[ci].w;
    const void *w1 = w1f, *w2 = w2f;
    if (wdt != PH_DTYPE_F32) {
      dtype_convert(w1h, wdt, w1f, PH_DTYPE_F32, 192, NULL);
      dtype_convert(w2h, wdt, w2f, PH_DTYPE_F32, 96, NULL);
      w1 = w1h;
      w2 = w2h;
    }
    diag d;
    graph *g = moe_graph(io, wdt, 0, w1, w2, &d);
    if (!CHECK(g != NULL)) {
      fprintf(stderr, "  %s\n", d.msg);
      continue;
    }
    unsigned char canon[5 * 8 * 4], prep[5 * 8 * 4], direct[5 * 8 * 4];
    size_t bytes = (size_t)5 * 8 * dtype_size(io);
    CHECK(moe_graph_run(g, io, canon));
    /* the rewiring itself: weights left where they are, so the pointers below say which bytes
     * the MoE reads (the default copy's bytes are checked equal in test_graph) */
    CHECK_STATUS(graph_prepare_cpu_opts(g, &(prepare_options){WEIGHTS_MAP, NULL, 0, 0}, NULL, &d),
                 PH_OK, d.msg);
    int live_casts = 0, moe = -1;
    for (int i = 0; i < g->n_nodes; i++) {
      if (g->nodes[i].dead) continue;
      if (strcmp(g->nodes[i].op_type, "Cast") == 0) live_casts++;
      if (strcmp(g->nodes[i].op_type, "MoE") == 0) moe = i;
    }
    CHECK_EQ_INT(live_casts, 0);
    CHECK(moe >= 0);
    if (moe >= 0) {
      const gnode *n = &g->nodes[moe];
      const gvalue *a = &g->values[n->inputs[2]], *b = &g->values[n->inputs[4]];
      CHECK_EQ_INT(a->kind, VALUE_INITIALIZER);
      CHECK_EQ_INT(b->kind, VALUE_INITIALIZER);
      /* widening or no Cast: the stored weight itself; narrowing: rounded to io */
      int narrows = wdt != io && !(io == PH_DTYPE_F32);
      CHECK_EQ_INT(a->type.dtype, narrows ? io : wdt);
      CHECK_EQ_INT(b->type.dtype, narrows ? io : wdt);
      if (!narrows) CHECK(a->type.data == w1 && b->type.data == w2);
      CHECK_EQ_INT(n->internal, wdt != io);
    }
    CHECK(moe_graph_run(g, io, prep));
    if (!CHECK(memcmp(canon, prep, bytes) == 0))
      fprintf(stderr, "  io %s weights %s: prepared differs from canonical\n", dtype_label(io),
              dtype_label(wdt));
    graph_free(g);
    /* teeth: reading the unrounded weights directly gives other bits when the Cast narrows */
    if (wdt != io && io != PH_DTYPE_F32) {
      g = moe_graph(io, wdt, 1, w1, w2, &d);
      if (CHECK(g != NULL)) {
        CHECK(moe_graph_run(g, io, direct));
        CHECK(memcmp(canon, direct, bytes) != 0);
        graph_free(g);
      }
    }
  }
}

/* ---- TopK ----------------------------------------------------------------------------------- */

/* Stable descending order of n values (stride st), NaN first: idx[0..n). */
static void ref_order(const double *v, int64_t n, int64_t *idx) {
  for (int64_t i = 0; i < n; i++) idx[i] = i;
  for (int64_t i = 1; i < n; i++) { /* insertion sort: stable */
    int64_t x = idx[i], j = i;
    while (j > 0) {
      double a = v[x], b = v[idx[j - 1]];
      int before = (isnan(a) && !isnan(b)) || a > b;
      if (!before) break;
      idx[j] = idx[j - 1];
      j--;
    }
    idx[j] = x;
  }
}

static void check_topk(ph_dtype dt, int rank, const int64_t *dims, int axis, int64_t K, int nan,
                       rng *g) {
  tensor *in[2] = {tn(dt, rank, dims), i64_tensor(1, (int64_t[]){1}, &K)};
  int64_t n = tensor_numel(in[0]);
  for (int64_t i = 0; i < n; i++) /* small integers: many ties */
    tensor_set_f32(in[0], i, (float)((int)rng_below(g, 7) - 3) * 0.5f);
  if (nan && n > 2) {
    tensor_set_f32(in[0], n / 2, NAN);
    tensor_set_f32(in[0], n - 1, NAN);
  }
  int ax = axis < 0 ? axis + rank : axis;
  gattr at[1] = {attr_int("axis", axis)};
  tensor *out[2] = {NULL, NULL}, *out3[2] = {NULL, NULL};
  diag d;
  CHECK_STATUS(op_run("TopK", "", 2, in, 2, out, at, 1, 1, ~0u, &d), PH_OK, d.msg);
  CHECK_STATUS(op_run("TopK", "", 2, in, 2, out3, at, 1, 3, ~0u, &d), PH_OK, d.msg);
  if (out[0] && out[1]) {
    int64_t outer = 1, inner = 1, len = dims[ax];
    for (int i = 0; i < ax; i++) outer *= dims[i];
    for (int i = ax + 1; i < rank; i++) inner *= dims[i];
    CHECK_EQ_INT(out[0]->dims[ax], K);
    CHECK_EQ_INT(out[1]->dtype, PH_DTYPE_I64);
    double *v = calloc((size_t)len + 1, sizeof *v);
    int64_t *idx = calloc((size_t)len + 1, sizeof *idx), bad = 0;
    for (int64_t o = 0; o < outer; o++)
      for (int64_t q = 0; q < inner; q++) {
        for (int64_t i = 0; i < len; i++) v[i] = tensor_get_f32(in[0], (o * len + i) * inner + q);
        ref_order(v, len, idx);
        for (int64_t i = 0; i < K; i++) {
          int64_t at_ = (o * K + i) * inner + q;
          double got = tensor_get_f32(out[0], at_);
          int64_t gi = ((const int64_t *)out[1]->data)[at_];
          int same = isnan(v[idx[i]]) ? isnan(got) : got == v[idx[i]];
          if (gi != idx[i] || !same) bad++;
        }
      }
    if (!CHECK(bad == 0))
      fprintf(stderr, "  TopK %s rank %d axis %d K %lld: %lld wrong\n", dtype_label(dt), rank, axis,
              (long long)K, (long long)bad);
    free(v);
    free(idx);
    if (out3[0] && out3[1]) {
      CHECK(memcmp(out[0]->data, out3[0]->data, (size_t)tensor_numel(out[0]) * dtype_size(dt)) ==
            0);
      CHECK(memcmp(out[1]->data, out3[1]->data, (size_t)tensor_numel(out[1]) * 8) == 0);
    }
  }
  tensors_free(out, 2);
  tensors_free(out3, 2);
  tensors_free(in, 2);
}

static void test_topk(void) {
  rng g = rng_seed(1407);
  static const int64_t Ns[] = {1, 3, 17, 64, 65};
  for (int di = 0; di < 3; di++)
    for (int ni = 0; ni < 5; ni++) {
      int64_t n = Ns[ni];
      int64_t Ks[4] = {0, 1, n < 3 ? n : 3, n};
      for (int ki = 0; ki < 4; ki++) {
        int64_t K = Ks[ki];
        check_topk(FLOATS[di], 1, (int64_t[]){n}, -1, K, 0, &g);
        check_topk(FLOATS[di], 2, (int64_t[]){3, n}, 1, K, di == 0, &g);
        check_topk(FLOATS[di], 2, (int64_t[]){n, 4}, 0, K, 0, &g);
        check_topk(FLOATS[di], 3, (int64_t[]){2, n, 3}, -2, K, di == 0, &g);
      }
    }
  /* contract */
  diag d;
  int64_t K = 2;
  tensor *in[2] = {tn(PH_DTYPE_F32, 2, (int64_t[]){3, 4}), i64_tensor(1, (int64_t[]){1}, &K)};
  tensor *out[2] = {NULL, NULL};
  gattr small[1] = {attr_int("largest", 0)};
  CHECK_STATUS(op_run("TopK", "", 2, in, 2, out, small, 1, 1, ~0u, &d), PH_ERR_UNSUPPORTED, d.msg);
  CHECK_STATUS(op_run("TopK", "", 2, in, 2, out, NULL, 0, 1, 1u, &d), PH_ERR_UNSUPPORTED, d.msg);
  gattr ax[1] = {attr_int("axis", 2)};
  CHECK_STATUS(op_run("TopK", "", 2, in, 2, out, ax, 1, 1, ~0u, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  ((int64_t *)in[1]->data)[0] = 5;
  CHECK_STATUS(op_run("TopK", "", 2, in, 2, out, NULL, 0, 1, ~0u, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  ((int64_t *)in[1]->data)[0] = -1;
  CHECK_STATUS(op_run("TopK", "", 2, in, 2, out, NULL, 0, 1, ~0u, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  tensor_free(in[1]);
  in[1] = tn(PH_DTYPE_I32, 1, (int64_t[]){1});
  CHECK_STATUS(op_run("TopK", "", 2, in, 2, out, NULL, 0, 1, ~0u, &d), PH_ERR_TENSOR_DTYPE, d.msg);
  tensors_free(out, 2);
  tensors_free(in, 2);
}

/* ---- OneHot --------------------------------------------------------------------------------- */

static void check_onehot(ph_dtype idt, ph_dtype vdt, int rank, const int64_t *dims, int axis,
                         int64_t depth, int depth_scalar, rng *g) {
  tensor *in[3];
  in[0] = tn(idt, rank, dims);
  int64_t n = tensor_numel(in[0]);
  int64_t *iv = calloc((size_t)n + 1, sizeof *iv);
  for (int64_t i = 0; i < n; i++) {
    iv[i] = (int64_t)rng_below(g, (uint64_t)(3 * depth + 1)) - (int64_t)(3 * depth / 2);
    if (idt == PH_DTYPE_I64)
      ((int64_t *)in[0]->data)[i] = iv[i];
    else
      ((int32_t *)in[0]->data)[i] = (int32_t)iv[i];
  }
  in[1] = depth_scalar ? i64_tensor(0, NULL, &depth) : i64_tensor(1, (int64_t[]){1}, &depth);
  in[2] = tn(vdt, 1, (int64_t[]){2});
  tensor_set_f32(in[2], 0, -0.5f);
  tensor_set_f32(in[2], 1, 2.25f);
  gattr at[1] = {attr_int("axis", axis)};
  tensor *out[1] = {NULL};
  diag d;
  CHECK_STATUS(op_run("OneHot", "", 3, in, 1, out, at, 1, 2, ~0u, &d), PH_OK, d.msg);
  if (out[0]) {
    int ax = axis < 0 ? axis + rank + 1 : axis;
    CHECK_EQ_INT(out[0]->rank, rank + 1);
    CHECK_EQ_INT(out[0]->dims[ax], depth);
    CHECK_EQ_INT(out[0]->dtype, vdt);
    int64_t outer = 1, inner = 1, bad = 0;
    for (int i = 0; i < ax; i++) outer *= dims[i];
    for (int i = ax; i < rank; i++) inner *= dims[i];
    for (int64_t o = 0; o < outer; o++)
      for (int64_t q = 0; q < inner; q++) {
        int64_t v = iv[o * inner + q];
        if (v < 0) v += depth; /* ONNX: negative counts from the end; still outside: all off */
        for (int64_t k = 0; k < depth; k++) {
          double want = k == v ? 2.25 : -0.5;
          if (tensor_get_f32(out[0], (o * depth + k) * inner + q) != want) bad++;
        }
      }
    if (!CHECK(bad == 0))
      fprintf(stderr, "  OneHot %s rank %d axis %d depth %lld: %lld wrong\n", dtype_label(vdt),
              rank, axis, (long long)depth, (long long)bad);
  }
  free(iv);
  tensors_free(out, 1);
  tensors_free(in, 3);
}

static void test_onehot(void) {
  rng g = rng_seed(1408);
  for (int vi = 0; vi < 3; vi++)
    for (int ii = 0; ii < 2; ii++) {
      ph_dtype idt = ii ? PH_DTYPE_I32 : PH_DTYPE_I64;
      for (int64_t depth = 1; depth <= 9; depth += 4) {
        check_onehot(idt, FLOATS[vi], 1, (int64_t[]){7}, -1, depth, vi == 1, &g);
        check_onehot(idt, FLOATS[vi], 1, (int64_t[]){7}, 0, depth, 0, &g);
        check_onehot(idt, FLOATS[vi], 2, (int64_t[]){3, 5}, -1, depth, 0, &g);
        check_onehot(idt, FLOATS[vi], 2, (int64_t[]){3, 5}, 1, depth, 1, &g);
        check_onehot(idt, FLOATS[vi], 2, (int64_t[]){3, 5}, 0, depth, 0, &g);
        check_onehot(idt, FLOATS[vi], 0, NULL, -1, depth, 0, &g);
      }
    }
  /* negative indices exactly at the ends: -depth is 0, -depth-1 is none */
  int64_t depth = 4, idx[4] = {-4, -1, -5, 4};
  tensor *in[3] = {i64_tensor(1, (int64_t[]){4}, idx), i64_tensor(1, (int64_t[]){1}, &depth),
                   tn(PH_DTYPE_F32, 1, (int64_t[]){2})};
  tensor_set_f32(in[2], 0, 0.0f);
  tensor_set_f32(in[2], 1, 1.0f);
  tensor *out[1] = {NULL};
  diag d;
  CHECK_STATUS(op_run("OneHot", "", 3, in, 1, out, NULL, 0, 1, ~0u, &d), PH_OK, d.msg);
  if (out[0]) {
    static const float WANT[16] = {1, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 0};
    CHECK(memcmp(out[0]->data, WANT, sizeof WANT) == 0);
  }
  tensors_free(out, 1);
  /* contract */
  CHECK_STATUS(op_run("OneHot", "", 3, in, 1, out, NULL, 0, 1, 5u, &d), PH_ERR_UNSUPPORTED, d.msg);
  ((int64_t *)in[1]->data)[0] = 0;
  CHECK_STATUS(op_run("OneHot", "", 3, in, 1, out, NULL, 0, 1, ~0u, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  ((int64_t *)in[1]->data)[0] = 4;
  gattr ax[1] = {attr_int("axis", 2)};
  CHECK_STATUS(op_run("OneHot", "", 3, in, 1, out, ax, 1, 1, ~0u, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  tensor_free(in[2]);
  in[2] = tn(PH_DTYPE_F32, 1, (int64_t[]){3});
  CHECK_STATUS(op_run("OneHot", "", 3, in, 1, out, NULL, 0, 1, ~0u, &d), PH_ERR_TENSOR_SHAPE,
               d.msg);
  tensors_free(out, 1);
  tensors_free(in, 3);
}

/* ---- Log ------------------------------------------------------------------------------------ */

static void test_log(void) {
  rng g = rng_seed(1409);
  for (int di = 0; di < 3; di++) {
    int64_t n = 67;
    tensor *in[1] = {tn(FLOATS[di], 1, &n)}, *out[1] = {NULL};
    for (int64_t i = 0; i < n; i++) tensor_set_f32(in[0], i, expf(rng_range(&g, -20.0f, 20.0f)));
    tensor_set_f32(in[0], 0, 0.0f);
    tensor_set_f32(in[0], 1, -1.0f);
    tensor_set_f32(in[0], 2, 1.0f);
    tensor_set_f32(in[0], 3, INFINITY);
    diag d;
    CHECK_STATUS(op_run("Log", "", 1, in, 1, out, NULL, 0, 1, ~0u, &d), PH_OK, d.msg);
    if (out[0]) {
      double ref[67], tol[67];
      for (int64_t i = 0; i < n; i++) {
        double x = tensor_get_f32(in[0], i);
        ref[i] = x < 0 ? NAN : log(x);
        tol[i] = 2 * U32 * fabs(ref[i]) + 1e-30; /* libm logf: within an ulp */
      }
      op_expect_close("Log", out[0], ref, tol, 0, n);
      CHECK(isinf(tensor_get_f32(out[0], 0)) && tensor_get_f32(out[0], 0) < 0);
      CHECK(isnan(tensor_get_f32(out[0], 1)));
    }
    tensors_free(out, 1);
    tensors_free(in, 1);
  }
}

/* ---- Softmax -------------------------------------------------------------------------------- */

static void check_softmax(ph_dtype dt, int rank, const int64_t *dims, int axis, rng *g) {
  tensor *in[1] = {tn(dt, rank, dims)}, *out[1] = {NULL}, *out3[1] = {NULL};
  int64_t n = tensor_numel(in[0]);
  tensor_fill_uniform(in[0], g, -8.0f, 8.0f);
  tensor_set_f32(in[0], n - 1, 100.0f); /* exp(100) overflows f32 unless the max is subtracted */
  gattr at[1] = {attr_int("axis", axis)};
  diag d;
  CHECK_STATUS(op_run("Softmax", "", 1, in, 1, out, at, 1, 1, ~0u, &d), PH_OK, d.msg);
  CHECK_STATUS(op_run("Softmax", "", 1, in, 1, out3, at, 1, 3, ~0u, &d), PH_OK, d.msg);
  if (out[0]) {
    int ax = axis < 0 ? axis + rank : axis;
    int64_t outer = 1, inner = 1, len = dims[ax];
    for (int i = 0; i < ax; i++) outer *= dims[i];
    for (int i = ax + 1; i < rank; i++) inner *= dims[i];
    double *ref = calloc((size_t)n, sizeof *ref), *tol = calloc((size_t)n, sizeof *tol);
    for (int64_t o = 0; o < outer; o++)
      for (int64_t q = 0; q < inner; q++) {
        double mx = -INFINITY, s = 0;
        for (int64_t i = 0; i < len; i++) {
          double x = tensor_get_f32(in[0], (o * len + i) * inner + q);
          mx = x > mx ? x : mx;
        }
        for (int64_t i = 0; i < len; i++)
          s += exp(tensor_get_f32(in[0], (o * len + i) * inner + q) - mx);
        for (int64_t i = 0; i < len; i++) {
          int64_t at_ = (o * len + i) * inner + q;
          double x = tensor_get_f32(in[0], at_);
          ref[at_] = exp(x - mx) / s;
          /* x - max (u |x - max|), expf (2u), the f32 sum of len terms (gamma(len)), the
           * division (u): relative, doubled */
          tol[at_] = 2 * ((fabs(x - mx) + 4) * U32 + gam(len)) * ref[at_] + 1e-40;
        }
      }
    char name[64];
    snprintf(name, sizeof name, "Softmax rank %d axis %d", rank, axis);
    op_expect_close(name, out[0], ref, tol, 0, n);
    free(ref);
    free(tol);
    if (out3[0]) CHECK(memcmp(out[0]->data, out3[0]->data, (size_t)n * dtype_size(dt)) == 0);
  }
  tensors_free(out, 1);
  tensors_free(out3, 1);
  tensors_free(in, 1);
}

static void test_softmax(void) {
  rng g = rng_seed(1410);
  static const int64_t Ns[] = {1, 3, 17, 64, 65};
  for (int di = 0; di < 3; di++)
    for (int ni = 0; ni < 5; ni++) {
      int64_t n = Ns[ni];
      check_softmax(FLOATS[di], 1, (int64_t[]){n}, -1, &g);
      check_softmax(FLOATS[di], 2, (int64_t[]){3, n}, 1, &g);
      check_softmax(FLOATS[di], 2, (int64_t[]){n, 4}, 0, &g);
      check_softmax(FLOATS[di], 3, (int64_t[]){2, n, 3}, -2, &g);
    }
  diag d;
  tensor *in[1] = {tn(PH_DTYPE_I64, 1, (int64_t[]){3})}, *out[1] = {NULL};
  CHECK_STATUS(op_run("Softmax", "", 1, in, 1, out, NULL, 0, 1, ~0u, &d), PH_ERR_TENSOR_DTYPE,
               d.msg);
  tensors_free(in, 1);
  in[0] = tn(PH_DTYPE_F32, 2, (int64_t[]){3, 4});
  gattr ax[1] = {attr_int("axis", -3)};
  CHECK_STATUS(op_run("Softmax", "", 1, in, 1, out, ax, 1, 1, ~0u, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  tensors_free(out, 1);
  tensors_free(in, 1);
}

/* ---- ReduceSum on the router's axes --------------------------------------------------------- */

/* DeepSeek's group scores reduce the last axis of [T, groups, per_group] and the weights the
 * last axis of [T, k]; keepdims 0 and 1. */
static void test_reduce_sum_router_axes(void) {
  rng g = rng_seed(1411);
  static const int64_t AXES[] = {-1, 2, 1};
  for (int ai = 0; ai < 3; ai++)
    for (int keep = 0; keep < 2; keep++) {
      int64_t dims[3] = {5, 4, 7}, ax = AXES[ai];
      tensor *in[2] = {tn(PH_DTYPE_F32, 3, dims), i64_tensor(1, (int64_t[]){1}, &ax)};
      tensor *out[1] = {NULL};
      tensor_fill_uniform(in[0], &g, -1.0f, 1.0f);
      gattr at[1] = {attr_int("keepdims", keep)};
      diag d;
      CHECK_STATUS(op_run("ReduceSum", "", 2, in, 1, out, at, 1, 1, ~0u, &d), PH_OK, d.msg);
      if (out[0]) {
        int a = ax < 0 ? (int)ax + 3 : (int)ax;
        CHECK_EQ_INT(out[0]->rank, keep ? 3 : 2);
        if (keep) CHECK_EQ_INT(out[0]->dims[a], 1);
        double ref[35], tol[35];
        int64_t outer = a == 1 ? 5 : 20, len = dims[a], inner = a == 1 ? 7 : 1;
        for (int64_t o = 0; o < outer; o++)
          for (int64_t q = 0; q < inner; q++) {
            double s = 0, m = 0;
            for (int64_t i = 0; i < len; i++) {
              double x = tensor_get_f32(in[0], (o * len + i) * inner + q);
              s += x;
              m += fabs(x);
            }
            ref[o * inner + q] = s;
            tol[o * inner + q] = gam(len) * m;
          }
        op_expect_close("ReduceSum router axes", out[0], ref, tol, 0, outer * inner);
      }
      tensors_free(out, 1);
      tensors_free(in, 2);
    }
}

/* ---- QMoE ----------------------------------------------------------------------------------- */

/* A QMoE case: m is the MoE case of its dequantized weights (f32), which the float64 reference
 * (moe_reference) and the bit-identity check read. block 0: one scale per row. */
typedef struct qmoe_case {
  moe_case m;
  int bits, block, zp, prepacked_attr; /* prepacked_attr: write weights_prepacked = 0 */
  ph_dtype sdt;                        /* scales */
} qmoe_case;

/* The code of element (row, k) of a quantized matrix with K columns, unpacked here on its own
 * (not with the kernel's helpers): bits 8 one byte per code, bits 4 the low nibble for even k. */
static int qm_code(const uint8_t *codes, int bits, int64_t K, int64_t row, int64_t k) {
  const uint8_t *r = codes + row * (K * bits / 8);
  return bits == 8 ? r[k] : (k & 1) ? r[k / 2] >> 4 : r[k / 2] & 0x0F;
}

/* The zero point of (row, block b): block-wise [rows, nb * bits / 8] packed along the blocks,
 * per row [rows * bits / 8] packed along the rows; absent 2^(bits - 1). */
static int qm_zero(const uint8_t *zp, int bits, int blockwise, int64_t nb, int64_t row, int64_t b) {
  if (!zp) return 1 << (bits - 1);
  const int64_t i = blockwise ? row * nb + b : row; /* the zero point's index, unpacked */
  return bits == 8 ? zp[i] : (i & 1) ? zp[i / 2] >> 4 : zp[i / 2] & 0x0F;
}

/* One expert matrix [E, N, K]: random codes (every value occurs), scales and zero points, and
 * deq, its dequantized values as f32: (q - z) * s is exact in double (a 9-bit integer times a
 * 24-bit significand) and rounded once to f32, the op's single f32 rounding. */
static void qmoe_matrix(const qmoe_case *c, int64_t N, int64_t K, rng *g, tensor **codes,
                        tensor **scales, tensor **zp, tensor **deq) {
  const int64_t E = c->m.E, pack = 8 / c->bits, nb = c->block ? K / c->block : 1;
  *codes = tn(PH_DTYPE_U8, 3, (int64_t[]){E, N, K / pack});
  for (int64_t i = 0; i < tensor_numel(*codes); i++)
    ((uint8_t *)(*codes)->data)[i] = (uint8_t)rng_below(g, 256);
  *scales = c->block ? tn(c->sdt, 3, (int64_t[]){E, N, nb}) : tn(c->sdt, 2, (int64_t[]){E, N});
  tensor_fill_uniform(*scales, g, -0.5f / (float)(1 << c->bits), 0.5f / (float)(1 << c->bits));
  *zp = NULL;
  if (c->zp) {
    *zp = c->block ? tn(PH_DTYPE_U8, 3, (int64_t[]){E, N, nb / pack})
                   : tn(PH_DTYPE_U8, 2, (int64_t[]){E, N / pack});
    for (int64_t i = 0; i < tensor_numel(*zp); i++)
      ((uint8_t *)(*zp)->data)[i] = (uint8_t)rng_below(g, 256);
  }
  *deq = tn(PH_DTYPE_F32, 3, (int64_t[]){E, N, K});
  const uint8_t *zd = *zp ? (*zp)->data : NULL;
  for (int64_t row = 0; row < E * N; row++)
    for (int64_t k = 0; k < K; k++) {
      int64_t b = c->block ? k / c->block : 0;
      double s = tensor_get_f32(*scales, row * nb + b);
      int q = qm_code((*codes)->data, c->bits, K, row, k);
      int z = qm_zero(zd, c->bits, c->block != 0, nb, row, b);
      ((float *)(*deq)->data)[row * K + k] = (float)((double)(q - z) * s);
    }
}

/* q[13]: QMoE's inputs (x, router, fc1 codes, scales, bias, fc2 codes, scales, bias, fc3 x 3
 * absent, fc1 and fc2 zero points); m[6]: the MoE inputs over the dequantized weights, sharing
 * x, router and the biases (m's are not owned: free q only, and m[2], m[4]). */
static void qmoe_alloc(const qmoe_case *c, rng *g, tensor **q, tensor **m) {
  moe_alloc(&c->m, m);
  moe_fill(&c->m, m, g);
  tensor_free(m[2]);
  tensor_free(m[4]);
  memset(q, 0, 13 * sizeof *q);
  q[0] = m[0];
  q[1] = m[1];
  q[4] = m[3];
  q[7] = m[5];
  qmoe_matrix(c, 2 * c->m.I, c->m.H, g, &q[2], &q[3], &q[11], &m[2]);
  qmoe_matrix(c, c->m.H, c->m.I, g, &q[5], &q[6], &q[12], &m[4]);
}

static void qmoe_free(tensor **q, tensor **m) {
  tensors_free(q, 13); /* x, router and the biases with them */
  tensor_free(m[2]);
  tensor_free(m[4]);
}

static int qmoe_attrs(const qmoe_case *c, gattr *a) {
  int n = moe_attrs(&c->m, a);
  a[n++] = attr_int("expert_weight_bits", c->bits);
  if (c->block) a[n++] = attr_int("block_size", c->block);
  if (c->prepacked_attr) a[n++] = attr_int("weights_prepacked", 0);
  return n;
}

static ph_status qmoe_run(const qmoe_case *c, tensor **q, tensor **out, int threads, diag *d) {
  gattr at[16];
  int na = qmoe_attrs(c, at);
  return op_run("QMoE", "com.microsoft", c->zp ? 13 : 8, q, 1, out, at, na, threads, ~0u, d);
}

/* The grid: bits 4 and 8, block-wise (16, 32) and per row, with and without zero points, every
 * scale and io dtype, T, E, k, biases, normalisation. Each output against the float64 reference
 * (moe_reference on the weights dequantized here, with MoE's derived bound) and bit for bit
 * against MoE on those f32 weights (the same kernels: op_moe.h). */
static void qmoe_grid(kernel_variant v) {
  rng g = rng_seed(1801);
  static const int64_t Ts[] = {1, 5, 33};
  static const int BLOCKS[] = {0, 16, 32};
  int n_case = 0;
  for (int bi = 0; bi < 2; bi++)
    for (int bl = 0; bl < 3; bl++)
      for (int zp = 0; zp < 2; zp++)
        for (int ti = 0; ti < 3; ti++) {
          const int bits = bi ? 8 : 4, block = BLOCKS[bl];
          /* H, I: multiples of block * pack for block-wise zero points; odd for 8-bit rows */
          int64_t H = block == 32 ? 64 : block == 16 ? 64 : bits == 4 ? 20 : 19;
          int64_t I = block == 32 ? 64 : block == 16 ? 32 : bits == 4 ? 10 : 7;
          qmoe_case c = {.m = {.T = Ts[ti],
                               .E = n_case % 2 ? 8 : 4,
                               .k = 1 + n_case % 3,
                               .H = H,
                               .I = I,
                               .io = FLOATS[n_case % 3],
                               .w1dt = PH_DTYPE_F32,
                               .w2dt = PH_DTYPE_F32,
                               .bdt = FLOATS[(n_case / 3) % 3],
                               .bias1 = n_case % 2 == 0,
                               .bias2 = n_case % 3 != 0,
                               .normalize = n_case % 4 != 1,
                               .attrs = n_case % 5 == 2 ? 2 : 0,
                               .has_limit = n_case % 7 == 3,
                               .limit = 0.6f},
                         .bits = bits,
                         .block = block,
                         .zp = zp,
                         .prepacked_attr = n_case % 2,
                         .sdt = FLOATS[(n_case / 2) % 3]};
          c.m.rank3 = n_case % 5 == 0;
          n_case++;
          tensor *q[13], *m[6];
          qmoe_alloc(&c, &g, q, m);
          const int threads = 1 + n_case % 3;
          char name[200];
          moe_case_name(&c.m, name, sizeof name);
          char full[260];
          snprintf(full, sizeof full, "QMoE %s bits %d block %d zp %d scales %s / %s",
                   kernel_variant_name(v), bits, block, zp, dtype_label(c.sdt), name);
          tensor *out[1] = {NULL}, *ref[1] = {NULL};
          diag d;
          ph_status st = qmoe_run(&c, q, out, threads, &d);
          if (!CHECK(st == PH_OK))
            fprintf(stderr, "  %s: %s %s\n", full, ph_status_name(st), d.msg);
          st = moe_run(&c.m, m, ref, threads, &d);
          CHECK_STATUS(st, PH_OK, d.msg);
          if (out[0] && ref[0]) {
            const int64_t n = c.m.T * c.m.H;
            double *r = calloc((size_t)n, sizeof *r), *tol = calloc((size_t)n, sizeof *tol);
            moe_reference(&c.m, m, r, tol);
            op_expect_close(full, out[0], r, tol, 0, n);
            free(r);
            free(tol);
            if (!CHECK(memcmp(out[0]->data, ref[0]->data, (size_t)n * dtype_size(c.m.io)) == 0))
              fprintf(stderr, "  %s: not bit-identical to MoE on the dequantized weights\n", full);
          }
          tensors_free(out, 1);
          tensors_free(ref, 1);
          qmoe_free(q, m);
        }
}

/* ... in every kernel variant this machine runs (the scalar one dequantizes in C, the others
 * with AVX2: both must give the reference's values and MoE's bits). */
static void test_qmoe_grid(void) {
  kernel_variant before = kernel_variant_active();
  for (int v = 0; v < KERNEL_N_VARIANTS; v++) {
    if (!kernel_variant_available((kernel_variant)v)) continue;
    diag d;
    CHECK_STATUS(kernel_force_variant((kernel_variant)v, &d), PH_OK, d.msg);
    qmoe_grid((kernel_variant)v);
  }
  diag d;
  kernel_force_variant(before, &d);
}

/* A token's output bits: alone or in a batch of 48, on 1..3 threads, in every kernel variant. */
static void test_qmoe_batch_invariance(void) {
  rng g = rng_seed(1802);
  kernel_variant before = kernel_variant_active();
  for (int v = 0; v < KERNEL_N_VARIANTS; v++) {
    if (!kernel_variant_available((kernel_variant)v)) continue;
    diag d;
    CHECK_STATUS(kernel_force_variant((kernel_variant)v, &d), PH_OK, d.msg);
    for (int cfg = 0; cfg < 2; cfg++) {
      qmoe_case c = {.m = {.T = 48,
                           .E = 8,
                           .k = 2 + cfg,
                           .H = 64,
                           .I = 32,
                           .io = cfg ? PH_DTYPE_BF16 : PH_DTYPE_F32,
                           .w1dt = PH_DTYPE_F32,
                           .w2dt = PH_DTYPE_F32,
                           .bdt = PH_DTYPE_F32,
                           .bias1 = 1,
                           .normalize = 1},
                     .bits = cfg ? 8 : 4,
                     .block = cfg ? 0 : 16,
                     .zp = 1,
                     .sdt = cfg ? PH_DTYPE_F16 : PH_DTYPE_F32};
      tensor *q[13], *m[6];
      qmoe_alloc(&c, &g, q, m);
      tensor *ref[1] = {NULL};
      CHECK_STATUS(qmoe_run(&c, q, ref, 1, &d), PH_OK, d.msg);
      const size_t rb = (size_t)c.m.H * dtype_size(c.m.io);
      for (int th = 2; th <= 3 && ref[0]; th++) {
        tensor *o[1] = {NULL};
        CHECK_STATUS(qmoe_run(&c, q, o, th, &d), PH_OK, d.msg);
        if (o[0]) CHECK(memcmp(o[0]->data, ref[0]->data, (size_t)c.m.T * rb) == 0);
        tensors_free(o, 1);
      }
      static const int64_t PROBES[] = {0, 29, 47};
      for (int pi = 0; pi < 3 && ref[0]; pi++) {
        const int64_t t = PROBES[pi];
        qmoe_case c1 = c;
        c1.m.T = 1;
        tensor *x = q[0], *r = q[1];
        tensor *x1 = tn(c.m.io, 2, (int64_t[]){1, c.m.H}),
               *r1 = tn(c.m.io, 2, (int64_t[]){1, c.m.E});
        memcpy(x1->data, row_of(x, t, c.m.H), rb);
        memcpy(r1->data, row_of(r, t, c.m.E), (size_t)c.m.E * dtype_size(c.m.io));
        q[0] = x1;
        q[1] = r1;
        tensor *o[1] = {NULL};
        CHECK_STATUS(qmoe_run(&c1, q, o, 1 + pi, &d), PH_OK, d.msg);
        if (o[0] && !CHECK(memcmp(o[0]->data, row_of(ref[0], t, c.m.H), rb) == 0))
          fprintf(stderr, "  QMoE variant %s cfg %d: token %lld alone differs from in the batch\n",
                  kernel_variant_name((kernel_variant)v), cfg, (long long)t);
        tensors_free(o, 1);
        q[0] = x;
        q[1] = r;
        tensor_free(x1);
        tensor_free(r1);
      }
      tensors_free(ref, 1);
      qmoe_free(q, m);
    }
  }
  diag d;
  kernel_force_variant(before, &d);
}

/* Typed errors for what the schema allows and we do not run, and for bad inputs. */
static void test_qmoe_contract(void) {
  rng g = rng_seed(1803);
  qmoe_case c = {.m = {.T = 3,
                       .E = 4,
                       .k = 2,
                       .H = 64,
                       .I = 32,
                       .io = PH_DTYPE_F32,
                       .w1dt = PH_DTYPE_F32,
                       .w2dt = PH_DTYPE_F32,
                       .bdt = PH_DTYPE_F32},
                 .bits = 4,
                 .block = 16,
                 .zp = 1,
                 .sdt = PH_DTYPE_F32};
  tensor *q[21], *m[6];
  memset(q, 0, sizeof q);
  qmoe_alloc(&c, &g, q, m);
  gattr at[16];
  const int na = qmoe_attrs(&c, at);
  tensor *out[1] = {NULL};
  diag d;
  CHECK_STATUS(op_run("QMoE", "com.microsoft", 13, q, 1, out, at, na, 1, ~0u, &d), PH_OK, d.msg);
  tensors_free(out, 1);
  const struct {
    gattr a;
    ph_status want;
    const char *says;
  } bad_attrs[] = {
      {attr_int("expert_weight_bits", 2), PH_ERR_UNSUPPORTED, "expert_weight_bits 2"},
      {attr_int("expert_weight_bits", 3), PH_ERR_INVALID_ARGUMENT, "expert_weight_bits"},
      {attr_int("block_size", 8), PH_ERR_INVALID_ARGUMENT, "block_size"},
      {attr_int("block_size", 48), PH_ERR_INVALID_ARGUMENT, "block_size"},
      {attr_int("block_size", 64), PH_ERR_TENSOR_SHAPE, "divide"}, /* 64 does not divide I = 32 */
      {attr_string("quant_type", "fp4"), PH_ERR_UNSUPPORTED, "fp4"},
      {attr_int("weights_prepacked", 1), PH_ERR_UNSUPPORTED, "weights_prepacked"},
      {attr_int("weights_prepacked", 2), PH_ERR_INVALID_ARGUMENT, "weights_prepacked"},
      {attr_int("swiglu_fusion", 2), PH_ERR_UNSUPPORTED, "QMoE: swiglu_fusion"},
  };
  for (size_t i = 0; i < sizeof bad_attrs / sizeof bad_attrs[0]; i++) {
    gattr bad[17];
    int nb = 0;
    for (int j = 0; j < na; j++)
      if (strcmp(at[j].name, bad_attrs[i].a.name) != 0) bad[nb++] = at[j];
    bad[nb++] = bad_attrs[i].a;
    CHECK_STATUS(op_run("QMoE", "com.microsoft", 13, q, 1, out, bad, nb, 1, ~0u, &d),
                 bad_attrs[i].want, d.msg);
    CHECK_CONTAINS(d.msg, bad_attrs[i].says);
    tensors_free(out, 1);
  }
  /* block-wise zero points need block * pack | H and I: block 32 with I = 32 and 4 bits */
  {
    qmoe_case c2 = c;
    c2.block = 32;
    gattr a2[16];
    const int n2 = qmoe_attrs(&c2, a2);
    CHECK_STATUS(op_run("QMoE", "com.microsoft", 13, q, 1, out, a2, n2, 1, ~0u, &d),
                 PH_ERR_TENSOR_SHAPE, d.msg);
    CHECK_CONTAINS(d.msg, "zero points");
  }
  /* inputs the CPU does not run: fc3, router_weights, the FP4/FP8 scales */
  static const struct {
    int slot;
    const char *says;
  } refused[] = {{8, "fc3_experts_weights"}, {14, "router_weights"}, {15, "fc1_global_scale"}};
  for (size_t i = 0; i < sizeof refused / sizeof refused[0]; i++) {
    const int s = refused[i].slot;
    q[s] = tn(PH_DTYPE_F32, 2, (int64_t[]){3, 4});
    CHECK_STATUS(op_run("QMoE", "com.microsoft", s + 1, q, 1, out, at, na, 1, ~0u, &d),
                 PH_ERR_UNSUPPORTED, d.msg);
    CHECK_CONTAINS(d.msg, refused[i].says);
    tensor_free(q[s]);
    q[s] = NULL;
  }
  /* bad inputs: scales missing, of the wrong rank or dims, codes not U8, zero points' shape */
  static const struct {
    int slot;
    ph_dtype dt;
    int rank;
    int64_t dims[3];
    ph_status want;
    const char *says;
  } bad_inputs[] = {
      {3, PH_DTYPE_INVALID, 0, {0}, PH_ERR_INVALID_ARGUMENT, "fc1_scales"},
      {3, PH_DTYPE_F32, 2, {4, 64}, PH_ERR_TENSOR_SHAPE, "fc1_scales"},
      {6, PH_DTYPE_F32, 3, {4, 64, 4}, PH_ERR_TENSOR_SHAPE, "fc2_scales"},
      {2, PH_DTYPE_I8, 3, {4, 64, 32}, PH_ERR_TENSOR_DTYPE, "fc1_experts_weights"},
      {5, PH_DTYPE_U8, 3, {4, 64, 15}, PH_ERR_TENSOR_SHAPE, NULL},
      {11, PH_DTYPE_U8, 3, {4, 64, 4}, PH_ERR_TENSOR_SHAPE, "fc1_zero_points"},
      {12, PH_DTYPE_F32, 3, {4, 64, 1}, PH_ERR_TENSOR_DTYPE, "fc2_zero_points"},
  };
  for (size_t i = 0; i < sizeof bad_inputs / sizeof bad_inputs[0]; i++) {
    const int k = bad_inputs[i].slot;
    tensor *keep = q[k];
    q[k] = bad_inputs[i].dt == PH_DTYPE_INVALID
               ? NULL
               : tn(bad_inputs[i].dt, bad_inputs[i].rank, bad_inputs[i].dims);
    CHECK_STATUS(op_run("QMoE", "com.microsoft", 13, q, 1, out, at, na, 1, ~0u, &d),
                 bad_inputs[i].want, d.msg);
    if (bad_inputs[i].says) CHECK_CONTAINS(d.msg, bad_inputs[i].says);
    tensor_free(q[k]);
    q[k] = keep;
  }
  qmoe_free(q, m);
}

int main(void) {
  RUN(test_moe_grid);
  RUN(test_moe_ties);
  RUN(test_moe_log_weights);
  RUN(test_moe_batch_invariance);
  RUN(test_moe_chunks);
  RUN(test_moe_contract);
  RUN(test_moe_prepare);
  RUN(test_qmoe_grid);
  RUN(test_qmoe_batch_invariance);
  RUN(test_qmoe_contract);
  RUN(test_topk);
  RUN(test_onehot);
  RUN(test_log);
  RUN(test_softmax);
  RUN(test_reduce_sum_router_axes);
  return check_finish();
}
