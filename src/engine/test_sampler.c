/* test_sampler — greedy, determinism, the sampled distribution, top-k / top-p / min-p against a
 * reference computed here by a plain full sort, the exact edges of min-p, top-p and top-k ties
 * (rows whose weights are exact), parameter validation, a full-size vocabulary. */
#include <float.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/rng.h"
#include "check.h"
#include "engine/sampler.h"

#define BIG_VOCAB 248320

/* ---- reference: full sort, softmax in double, then the filters in the documented order ------- */

static const float *ref_logits;
static int cmp_rank(const void *a, const void *b) { /* higher logit first, ties by lower id */
  int64_t i = *(const int64_t *)a, j = *(const int64_t *)b;
  float x = ref_logits[i], y = ref_logits[j];
  if (x != y) return x > y ? -1 : 1;
  return i < j ? -1 : 1;
}

/* prob[V]: the probability of each token after every filter (0 for dropped ones). Logits must be
 * finite. */
static void reference_probs(const float *logits, int64_t V, const sampling_params *p,
                            double *prob) {
  int64_t *order = malloc((size_t)V * sizeof *order);
  for (int64_t i = 0; i < V; i++) order[i] = i;
  ref_logits = logits;
  qsort(order, (size_t)V, sizeof *order, cmp_rank);
  int64_t n = (p->top_k > 0 && p->top_k < V) ? p->top_k : V;
  double *w = malloc((size_t)n * sizeof *w), sum = 0.0;
  float top = logits[order[0]];
  for (int64_t r = 0; r < n; r++) {
    w[r] = exp(((double)logits[order[r]] - top) / p->temperature);
    sum += w[r];
  }
  int64_t m = 0;
  double cum = 0.0;
  for (; m < n; m++) {
    if (m > 0 && p->top_p < 1.0f && cum >= p->top_p * sum) break; /* nucleus */
    if (w[m] < p->min_p * w[0]) break;                            /* min-p */
    cum += w[m];
  }
  memset(prob, 0, (size_t)V * sizeof *prob);
  for (int64_t r = 0; r < m; r++) prob[order[r]] = w[r] / cum;
  free(w);
  free(order);
}

static void random_logits(float *x, int64_t n, uint64_t seed, float scale) {
  rng r = rng_seed(seed);
  for (int64_t i = 0; i < n; i++) x[i] = rng_range(&r, -scale, scale);
}

static sampling_params sampled(float temperature, int32_t top_k, float top_p, float min_p,
                               uint64_t seed) {
  sampling_params p = sampling_params_default();
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  p.min_p = min_p;
  p.seed = seed;
  return p;
}

/* ---- greedy ---------------------------------------------------------------------------------- */

static void test_greedy_ties_and_nan(void) {
  sampling_params g = sampling_params_default();
  CHECK(g.temperature == 0.0f && g.top_k == 0 && g.top_p == 1.0f && g.min_p == 0.0f);
  CHECK_EQ_INT(g.max_new_tokens, 16);
  CHECK_EQ_INT(g.seed, 0);
  CHECK_STATUS(sampling_params_validate(&g, 10, NULL), PH_OK, NULL);

  const float ties[] = {1.0f, 3.0f, 3.0f, 2.0f, 3.0f};
  CHECK_EQ_INT(sampler_sample(ties, 5, &g, 0, NULL, 0), 1); /* lowest id of the tie */
  const float nan_first[] = {NAN, -1.0f, -1.0f, NAN};
  CHECK_EQ_INT(sampler_sample(nan_first, 4, &g, 0, NULL, 0), 1);
  const float nan_big[] = {0.0f, NAN, 5.0f, NAN};
  CHECK_EQ_INT(sampler_sample(nan_big, 4, &g, 0, NULL, 0), 2);
  const float all_nan[] = {NAN, NAN, NAN};
  CHECK_EQ_INT(sampler_sample(all_nan, 3, &g, 0, NULL, 0), 0); /* documented: 0 */
  const float neg_inf[] = {NAN, -INFINITY, -INFINITY};
  CHECK_EQ_INT(sampler_sample(neg_inf, 3, &g, 0, NULL, 0), 1);
  const float pos_inf[] = {1.0f, INFINITY, 2.0f, INFINITY};
  CHECK_EQ_INT(sampler_sample(pos_inf, 4, &g, 0, NULL, 0), 1);
  const float one[] = {-7.0f};
  CHECK_EQ_INT(sampler_sample(one, 1, &g, 0, NULL, 0), 0);

  /* non-greedy rows without a finite distribution fall back to the greedy token */
  sampling_params s = sampled(1.0f, 0, 1.0f, 0.0f, 3);
  double scratch[32];
  CHECK_EQ_INT(sampler_sample(all_nan, 3, &s, 5, scratch, sizeof scratch), 0);
  CHECK_EQ_INT(sampler_sample(neg_inf, 3, &s, 5, scratch, sizeof scratch), 1);
  CHECK_EQ_INT(sampler_sample(pos_inf, 4, &s, 5, scratch, sizeof scratch), 1);
  /* NaN is never drawn, even next to a single finite logit */
  const float nan_one[] = {NAN, NAN, 0.5f, NAN};
  for (int t = 0; t < 50; t++)
    CHECK_EQ_INT(sampler_sample(nan_one, 4, &s, t, scratch, sizeof scratch), 2);
}

/* The one-pass rule sampler_argmax is specified by (sampler.h): replace on >, NaN skipped. */
static int64_t argmax_one_pass(const float *x, int64_t n) {
  int64_t best = -1;
  float best_v = 0.0f;
  for (int64_t i = 0; i < n; i++)
    if (x[i] > best_v || (best < 0 && x[i] == x[i])) {
      best = i;
      best_v = x[i];
    }
  return best < 0 ? 0 : best;
}

/* sampler_argmax (blocked, vectorized maximum, then the first index equal to it) against the
 * one-pass rule: lengths around the vector width and the block (1024), values drawn from a small
 * set so that ties, +-0, +-inf and NaN meet in one block and across blocks. */
static void test_argmax_blocked(void) {
  static const float pool[] = {NAN, -INFINITY, INFINITY, -0.0f, 0.0f, 1.0f, -1.0f, 2.5f, 2.5f};
  const int64_t lens[] = {0, 1, 3, 15, 16, 17, 1023, 1024, 1025, 2048, 3001};
  float *x = malloc(3001 * sizeof *x);
  uint64_t st = 12345;
  for (size_t li = 0; li < sizeof lens / sizeof lens[0]; li++)
    for (int trial = 0; trial < 200; trial++) {
      const int64_t n = lens[li];
      /* trial picks which of the pool's values may occur, and how rare the big ones are */
      for (int64_t i = 0; i < n; i++) {
        uint64_t r = rng_splitmix64(&st);
        int k = (int)(r % (uint64_t)(trial % 9 + 1));
        x[i] = (r >> 32) % 64 == 0 ? pool[(r >> 40) % 9] : pool[k];
      }
      CHECK_EQ_INT(sampler_argmax(x, n), argmax_one_pass(x, n));
    }
  /* all -inf but a NaN first; all NaN; -0 before +0 in a later block */
  for (int i = 0; i < 3001; i++) x[i] = -INFINITY;
  x[0] = NAN;
  CHECK_EQ_INT(sampler_argmax(x, 3001), 1);
  for (int i = 0; i < 3001; i++) x[i] = NAN;
  CHECK_EQ_INT(sampler_argmax(x, 3001), 0);
  for (int i = 0; i < 3001; i++) x[i] = -1.0f;
  x[500] = -0.0f;
  x[2000] = 0.0f;
  CHECK_EQ_INT(sampler_argmax(x, 3001), 500);
  x[2999] = 1.0f;
  x[3000] = 1.0f;
  CHECK_EQ_INT(sampler_argmax(x, 3001), 2999);
  free(x);
}

/* The engine's check before sampling: the first NaN or +-inf, in any block of the row. */
static void test_first_nonfinite(void) {
  enum { V = 5000 };
  float *row = malloc(V * sizeof *row);
  for (int i = 0; i < V; i++) row[i] = (float)(i % 17) - 8.0f;
  row[7] = FLT_MAX;
  row[8] = -FLT_MAX;
  row[9] = 1e-45f; /* denormal: finite */
  CHECK_EQ_INT(sampler_first_nonfinite(row, V), -1);
  const float bad[3] = {NAN, INFINITY, -INFINITY};
  const int at[4] = {0, 1023, 1024, V - 1};
  for (int b = 0; b < 3; b++)
    for (int k = 0; k < 4; k++) {
      const float keep = row[at[k]];
      row[at[k]] = bad[b];
      CHECK_EQ_INT(sampler_first_nonfinite(row, V), at[k]);
      if (at[k] < V - 1) {
        row[V - 1] = NAN; /* a later one does not change the answer */
        CHECK_EQ_INT(sampler_first_nonfinite(row, V), at[k]);
        row[V - 1] = 1.0f;
      }
      row[at[k]] = keep;
    }
  /* a last block whose length is not a multiple of eight: every position of its tail */
  for (int i = 0; i < V; i++) row[i] = 1.0f;
  for (int64_t n = 1029; n <= 1031; n++)
    for (int64_t at2 = 1016; at2 < n; at2++) {
      row[at2] = NAN;
      CHECK_EQ_INT(sampler_first_nonfinite(row, n), at2);
      row[at2] = 1.0f;
    }
  CHECK_EQ_INT(sampler_first_nonfinite(row, 7), -1);
  row[6] = INFINITY;
  CHECK_EQ_INT(sampler_first_nonfinite(row, 7), 6);
  CHECK_EQ_INT(sampler_first_nonfinite(row, 0), -1);
  CHECK_EQ_INT(sampler_first_nonfinite(NULL, V), -1);
  free(row);
}

static void test_greedy_equivalences(void) {
  enum { V = 1000 };
  float *x = malloc(V * sizeof *x);
  size_t bytes = sampler_scratch_bytes(V);
  void *scratch = malloc(bytes);
  for (uint64_t trial = 0; trial < 20; trial++) {
    random_logits(x, V, 100 + trial, 4.0f);
    if (trial % 3 == 0) x[trial * 7] = x[trial * 7 + 5] = 9.0f; /* a tie at the top */
    int64_t best = 0;
    for (int64_t i = 1; i < V; i++)
      if (x[i] > x[best]) best = i;
    sampling_params t0 = sampled(0.0f, 40, 0.5f, 0.2f, trial); /* filters ignored when greedy */
    sampling_params k1 = sampled(1.3f, 1, 0.9f, 0.0f, trial);
    sampling_params plain = sampling_params_default();
    for (int64_t t = 0; t < 5; t++) {
      CHECK_EQ_INT(sampler_sample(x, V, &t0, t, scratch, bytes), best);
      CHECK_EQ_INT(sampler_sample(x, V, &k1, t, scratch, bytes), best);
      CHECK_EQ_INT(sampler_sample(x, V, &plain, t, NULL, 0), best);
    }
  }
  free(scratch);
  free(x);
}

/* ---- determinism ----------------------------------------------------------------------------- */

static void test_determinism(void) {
  enum { V = 64, T = 400 };
  float x[V];
  random_logits(x, V, 7, 1.0f); /* fairly flat: many tokens likely */
  size_t bytes = sampler_scratch_bytes(V);
  void *s1 = malloc(bytes), *s2 = malloc(bytes);
  sampling_params a = sampled(1.0f, 0, 0.95f, 0.0f, 42);
  sampling_params b = sampled(1.0f, 0, 0.95f, 0.0f, 43);
  int64_t first[T];
  int distinct_index = 0, differ_seed = 0;
  for (int64_t t = 0; t < T; t++) first[t] = sampler_sample(x, V, &a, t, s1, bytes);
  /* again, interleaved with another request's calls and a dirtied scratch: same tokens (a
   * request's tokens do not depend on what it is batched with, or on call history) */
  for (int64_t t = T; t-- > 0;) {
    memset(s2, 0xA5, bytes);
    int64_t other = sampler_sample(x, V, &b, t, s2, bytes);
    differ_seed += other != first[t];
    CHECK_EQ_INT(sampler_sample(x, V, &a, t, s2, bytes), first[t]);
  }
  for (int64_t t = 1; t < T; t++) distinct_index += first[t] != first[t - 1];
  /* a near-flat row over 64 tokens with top_p 0.95: two draws agree with probability
   * sum p^2 ~ 1/50, so ~390 of the 400 differ; more than half is a bound a stream that ignored
   * the index or the seed (every draw alike) cannot meet */
  CHECK(distinct_index > T / 2); /* the stream varies with the index */
  CHECK(differ_seed > T / 2);    /* and with the seed */
  for (int64_t t = 0; t < T; t++) CHECK(first[t] >= 0 && first[t] < V);
  free(s1);
  free(s2);
}

/* ---- distribution ---------------------------------------------------------------------------- */

/* Draws N tokens (index 0..N-1) and checks every frequency against p within 5 standard
 * deviations plus one count. Fixed seeds make this deterministic; 5 sigma keeps it valid for
 * any seed in practice: a correct sampler's count leaves it with probability 5.7e-7 per token
 * (normal approximation of the binomial; the + 1 covers its discreteness for rare tokens), so
 * over the ~70 tokens of test_distribution a false failure has odds below 1 in 20,000; the
 * window is narrow enough to matter: for p = 0.3, 5 sigma is 324 of 20,000 draws, so a
 * probability off by more than 0.016 fails. Tokens with p == 0 must never appear. */
static void check_frequencies(const float *x, int64_t V, const sampling_params *p,
                              const char *name) {
  enum { N = 20000 };
  double *prob = malloc((size_t)V * sizeof *prob);
  int64_t *count = calloc((size_t)V, sizeof *count);
  size_t bytes = sampler_scratch_bytes(V);
  void *scratch = malloc(bytes);
  reference_probs(x, V, p, prob);
  for (int64_t t = 0; t < N; t++) {
    int64_t tok = sampler_sample(x, V, p, t, scratch, bytes);
    if (tok >= 0 && tok < V)
      count[tok]++;
    else
      CHECK(tok >= 0 && tok < V);
  }
  int bad = 0;
  double worst = 0.0;
  for (int64_t i = 0; i < V; i++) {
    double expect = N * prob[i];
    double sigma = sqrt(N * prob[i] * (1.0 - prob[i]));
    double dev = fabs((double)count[i] - expect);
    if (prob[i] == 0.0 && count[i] != 0) bad++;
    if (dev > 5.0 * sigma + 1.0) bad++;
    if (sigma > 0 && dev / sigma > worst) worst = dev / sigma;
  }
  if (!CHECK(bad == 0))
    fprintf(stderr, "       %s: %d tokens off (worst %.2f sigma)\n", name, bad, worst);
  free(scratch);
  free(count);
  free(prob);
}

static void test_distribution(void) {
  const float x[] = {0.0f, 1.0f, 2.0f, -1.0f, 0.5f, 1.5f, -2.0f, 3.0f, 2.9f, -0.5f};
  sampling_params t07 = sampled(0.7f, 0, 1.0f, 0.0f, 1234);
  check_frequencies(x, 10, &t07, "temperature 0.7");
  sampling_params t1 = sampled(1.0f, 0, 1.0f, 0.0f, 99);
  check_frequencies(x, 10, &t1, "temperature 1");
  sampling_params t3 = sampled(3.0f, 0, 1.0f, 0.0f, 5);
  check_frequencies(x, 10, &t3, "temperature 3");
  sampling_params k4 = sampled(1.0f, 4, 1.0f, 0.0f, 17);
  check_frequencies(x, 10, &k4, "top_k 4");
  sampling_params p8 = sampled(1.0f, 0, 0.8f, 0.0f, 18);
  check_frequencies(x, 10, &p8, "top_p 0.8");
  sampling_params mp = sampled(1.0f, 0, 1.0f, 0.1f, 19);
  check_frequencies(x, 10, &mp, "min_p 0.1");
  sampling_params all = sampled(1.5f, 6, 0.9f, 0.05f, 20);
  check_frequencies(x, 10, &all, "top_k 6 + top_p 0.9 + min_p 0.05");
  const float flat[] = {0.25f, 0.25f, 0.25f, 0.25f};
  check_frequencies(flat, 4, &t1, "uniform");
}

/* ---- filters against the reference ----------------------------------------------------------- */

/* Many draws with p over logits x; every token must be one the reference keeps, and (as a check
 * that the filter is not stricter than the reference) the most probable kept token appears. */
static void check_inside(const float *x, int64_t V, const sampling_params *p, int draws,
                         const char *name) {
  double *prob = malloc((size_t)V * sizeof *prob);
  size_t bytes = sampler_scratch_bytes(V);
  void *scratch = malloc(bytes);
  reference_probs(x, V, p, prob);
  int64_t n_kept = 0;
  for (int64_t i = 0; i < V; i++) n_kept += prob[i] > 0.0;
  int outside = 0, distinct = 0;
  unsigned char *seen = calloc((size_t)V, 1);
  for (int t = 0; t < draws; t++) {
    int64_t tok = sampler_sample(x, V, p, t, scratch, bytes);
    if (tok < 0 || tok >= V || prob[tok] == 0.0) {
      outside++;
      continue;
    }
    distinct += !seen[tok];
    seen[tok] = 1;
  }
  if (!CHECK(outside == 0))
    fprintf(stderr, "       %s: %d of %d draws outside the %lld kept tokens\n", name, outside,
            draws, (long long)n_kept);
  CHECK(distinct >= 1 && distinct <= n_kept);
  free(seen);
  free(scratch);
  free(prob);
}

static void test_top_k(void) {
  enum { V = 5000 };
  float *x = malloc(V * sizeof *x);
  for (uint64_t trial = 0; trial < 6; trial++) {
    random_logits(x, V, 300 + trial, 3.0f);
    /* quantized logits: many ties, so the k-th place is decided by id */
    if (trial % 2)
      for (int64_t i = 0; i < V; i++) x[i] = floorf(x[i] * 2.0f);
    int32_t ks[] = {2, 5, 50, 1000, 4500}; /* 4500: beyond the heap, ranked by radix sort */
    for (int j = 0; j < 5; j++) {
      sampling_params p = sampled(2.0f, ks[j], 1.0f, 0.0f, trial);
      check_inside(x, V, &p, 200, "top_k");
    }
  }
  /* k == 2 among exact ties: only the two lowest ids of the top value */
  const float tied[] = {1.0f, 5.0f, 0.0f, 5.0f, 5.0f, 5.0f};
  sampling_params k2 = sampled(1.0f, 2, 1.0f, 0.0f, 8);
  size_t bytes = sampler_scratch_bytes(6);
  void *scratch = malloc(bytes);
  int seen1 = 0, seen3 = 0;
  for (int t = 0; t < 200; t++) {
    int64_t tok = sampler_sample(tied, 6, &k2, t, scratch, bytes);
    CHECK(tok == 1 || tok == 3);
    seen1 += tok == 1;
    seen3 += tok == 3;
  }
  CHECK(seen1 > 50 && seen3 > 50); /* each p = 1/2 of 200: mean 100, sigma 7; 50 is 7 sigma off */
  /* k >= vocab is off */
  sampling_params kbig = sampled(1.0f, 100, 1.0f, 0.0f, 8);
  check_frequencies(tied, 6, &kbig, "top_k >= vocab");
  free(scratch);
  free(x);
}

static void test_top_p(void) {
  enum { V = 2000 };
  float *x = malloc(V * sizeof *x);
  float ps[] = {0.05f, 0.5f, 0.9f, 0.99f};
  for (uint64_t trial = 0; trial < 4; trial++) {
    random_logits(x, V, 500 + trial, trial < 2 ? 12.0f : 1.0f); /* peaked, then flat */
    for (int j = 0; j < 4; j++) {
      sampling_params p = sampled(0.8f, 0, ps[j], 0.0f, trial);
      check_inside(x, V, &p, 150, "top_p");
      sampling_params pk = sampled(0.8f, 200, ps[j], 0.0f, trial); /* nucleus over the top-k */
      check_inside(x, V, &pk, 150, "top_k + top_p");
    }
  }
  /* exact boundary: 4 equal tokens, top_p 0.5 keeps exactly ids 0 and 1 (mass 0.5 reached) */
  const float eq[] = {2.0f, 2.0f, 2.0f, 2.0f};
  double scratch[32];
  sampling_params half = sampled(1.0f, 0, 0.5f, 0.0f, 1);
  sampling_params three = sampled(1.0f, 0, 0.75f, 0.0f, 1);
  int max_half = 0, max_three = 0;
  for (int t = 0; t < 300; t++) {
    int64_t a = sampler_sample(eq, 4, &half, t, scratch, sizeof scratch);
    int64_t b = sampler_sample(eq, 4, &three, t, scratch, sizeof scratch);
    if (a > max_half) max_half = (int)a;
    if (b > max_three) max_three = (int)b;
    CHECK(a >= 0 && b >= 0);
  }
  CHECK_EQ_INT(max_half, 1);
  CHECK_EQ_INT(max_three, 2);
  /* a tiny nucleus keeps only the best token */
  const float peak[] = {0.0f, 10.0f, 1.0f, 9.0f};
  sampling_params tiny = sampled(1.0f, 0, 0.01f, 0.0f, 2);
  for (int t = 0; t < 50; t++)
    CHECK_EQ_INT(sampler_sample(peak, 4, &tiny, t, scratch, sizeof scratch), 1);
  free(x);
}

static void test_min_p(void) {
  enum { V = 3000 };
  float *x = malloc(V * sizeof *x);
  float mps[] = {0.01f, 0.1f, 0.5f, 0.9f};
  for (uint64_t trial = 0; trial < 4; trial++) {
    random_logits(x, V, 700 + trial, 6.0f);
    for (int j = 0; j < 4; j++) {
      sampling_params p = sampled(1.2f, 0, 1.0f, mps[j], trial);
      check_inside(x, V, &p, 200, "min_p");
      sampling_params all = sampled(1.2f, 100, 0.7f, mps[j], trial);
      check_inside(x, V, &all, 200, "top_k + top_p + min_p");
      sampling_params pm = sampled(1.2f, 0, 0.7f, mps[j], trial);
      check_inside(x, V, &pm, 200, "top_p + min_p");
    }
  }
  /* min_p is relative to the best token: p1 / p0 = 0.5 is kept by min_p 0.25, dropped by 0.75 */
  const float two[] = {0.0f, logf(0.5f)};
  double scratch[32];
  sampling_params keep = sampled(1.0f, 0, 1.0f, 0.25f, 4);
  sampling_params drop = sampled(1.0f, 0, 1.0f, 0.75f, 4);
  int seen1 = 0;
  for (int t = 0; t < 200; t++) {
    seen1 += sampler_sample(two, 2, &keep, t, scratch, sizeof scratch) == 1;
    CHECK_EQ_INT(sampler_sample(two, 2, &drop, t, scratch, sizeof scratch), 0);
  }
  CHECK(seen1 > 20); /* p1 = 0.5 / 1.5 = 1/3 of 200: mean 67, sigma 6.7; 20 is 7 sigma off */
  free(x);
}

/* Draws `draws` tokens with p over x[V] and counts each id into count[V]. */
static void draw_counts(const float *x, int64_t V, const sampling_params *p, int draws,
                        int64_t *count) {
  size_t bytes = sampler_scratch_bytes(V);
  void *scratch = malloc(bytes);
  memset(count, 0, (size_t)V * sizeof *count);
  for (int t = 0; t < draws; t++) {
    int64_t tok = sampler_sample(x, V, p, t, scratch, bytes);
    if (CHECK(tok >= 0 && tok < V)) count[tok]++;
  }
  free(scratch);
}

/* Exactly at the edges, where a `<` against a `<=` decides. Weights are exp((logit - max) / T)
 * in double; they are exact only where the arithmetic is, so the rows are built from powers of
 * two:
 *  - min_p: max logit 2^-49, the next one -2^-24: w = exp(-2^-24 - 2^-49) = 1 - 2^-24 exactly
 *    (ln(1 - 2^-24) = -2^-24 - 2^-49 - 2^-74/3 - ..., and the rest is far below half an ulp of
 *    the result, 2^-54), which is the float 0.99999994 = 1 - 2^-24 = min_p. The rule keeps
 *    w >= min_p * w_best: that token stays, the next one (w = 1 - 2^-23 - ...) goes. The test
 *    checks the arithmetic first, so a libm whose exp rounds otherwise fails loudly here rather
 *    than testing nothing.
 *  - top-p: equal logits (w = 1 each, others -inf: w = 0), top_p 0.5 or 0.75, so the mass
 *    needed, top_p * total, is exact: the nucleus stops as soon as the mass before a token
 *    reaches it (cum >= needed), neither one token early nor late.
 *  - top-k: ties at the k-th place go to the lower ids, both through the heap (k <= 4096) and
 *    through the radix ranking (larger k).
 * Each row is run without top-k, with a small top-k (heap) and with a large one (radix), which
 * take different code paths to the same cut.
 * Counts: two kept tokens of p ~ 1/2 in 400 draws: mean 200, sigma 10, so > 120 is 8 sigma; the
 * radix top-k keeps ~4500 near-equal tokens, and 2000 draws all below id 4000 would have
 * probability (4000 / 4500)^2000 ~ 1e-102. Out-of-set draws must be exactly 0. */
static void test_exact_edges(void) {
  enum { V = 5000 };
  float *x = malloc(V * sizeof *x);
  int64_t *count = malloc(V * sizeof *count);
  /* min_p */
  const float min_p = 1.0f - 0x1p-24f;
  const double w1 = exp(((double)-0x1p-24f - (double)0x1p-49f) / 1.0);
  CHECK(w1 == (double)min_p); /* the edge is exact */
  CHECK(exp(((double)-0x1p-23f - (double)0x1p-49f) / 1.0) < (double)min_p);
  for (int64_t i = 0; i < V; i++) x[i] = -INFINITY;
  x[0] = 0x1p-49f;  /* the best: w = 1 */
  x[1] = -0x1p-24f; /* w = min_p exactly: kept */
  x[2] = -0x1p-23f; /* w just below: dropped */
  x[3] = -1.0f;
  static const int32_t ks[3] = {0, 3, 4500}; /* off, heap, radix */
  for (int k = 0; k < 3; k++) {
    sampling_params p = sampled(1.0f, ks[k], 1.0f, min_p, 31 + (uint64_t)k);
    draw_counts(x, V, &p, 400, count);
    if (!CHECK(count[0] > 120 && count[1] > 120 && count[0] + count[1] == 400))
      fprintf(stderr, "       min_p at the edge, top_k %d: ids 0/1/2/3 drawn %lld/%lld/%lld/%lld\n",
              (int)ks[k], (long long)count[0], (long long)count[1], (long long)count[2],
              (long long)count[3]);
  }
  /* top-p: 8 equal tokens (ids 10..17), total mass 8 */
  for (int64_t i = 0; i < V; i++) x[i] = -INFINITY;
  for (int i = 10; i < 18; i++) x[i] = 3.0f;
  static const float tps[2] = {0.5f, 0.75f};
  static const int32_t pks[3] = {0, 4, 4500}; /* top-k keeps 8, 4 (ids 10..13), 8 */
  for (int j = 0; j < 2; j++)
    for (int k = 0; k < 3; k++) {
      sampling_params p = sampled(1.0f, pks[k], tps[j], 0.0f, 50 + (uint64_t)(3 * j + k));
      draw_counts(x, V, &p, 400, count);
      /* the mass needed is top_p * (tokens top-k keeps): 2, 3, 4 or 6, exact */
      const int keep = (int)(tps[j] * (float)(pks[k] == 4 ? 4 : 8));
      int64_t inside = 0, n_ids = 0;
      for (int i = 10; i < 10 + keep; i++) {
        inside += count[i];
        n_ids += count[i] > 0;
      }
      if (!CHECK(inside == 400 && n_ids == keep))
        fprintf(stderr,
                "       top_p %g at the boundary, top_k %d: %lld of 400 draws among ids "
                "10..%d, %lld of them seen\n",
                (double)tps[j], (int)pks[k], (long long)inside, 9 + keep, (long long)n_ids);
    }
  /* top-k: ties at the k-th place; the heap (k = 3 among 6 tied) and the radix sort (k = 4500
   * among 4600 tied) keep the lowest ids */
  for (int64_t i = 0; i < V; i++) x[i] = i < 4600 ? 1.0f : 0.0f;
  x[4] = 2.0f; /* a distinct best, so the tie is at the cut, not at the top */
  static const int32_t tk[2] = {3, 4500};
  for (int k = 0; k < 2; k++) {
    sampling_params p = sampled(1.0f, tk[k], 1.0f, 0.0f, 70 + (uint64_t)k);
    draw_counts(x, V, &p, k ? 2000 : 400, count);
    /* kept: id 4 and the k - 1 lowest tied ids */
    /* the k - 1 lowest tied ids skip id 4: 0..k-2 when k - 1 <= 4, else 0..3 and 5..k-1 */
    const int64_t last_kept = tk[k] - 1 <= 4 ? tk[k] - 2 : tk[k] - 1;
    int64_t outside = 0, highest = -1;
    for (int64_t i = 0; i < V; i++)
      if (count[i] > 0) {
        highest = i;
        outside += i > last_kept && i != 4 ? count[i] : 0;
      }
    if (!CHECK(outside == 0 && count[4] > 0 && highest >= (k ? 4000 : 1)))
      fprintf(stderr,
              "       top_k %d with ties at the cut: %lld draws past id %lld, highest "
              "%lld\n",
              (int)tk[k], (long long)outside, (long long)last_kept, (long long)highest);
  }
  free(count);
  free(x);
}

/* ---- validation, stop tokens, contract ------------------------------------------------------- */

static void expect_invalid(const sampling_params *p, int64_t vocab, const char *needle) {
  diag d;
  diag_clear(&d);
  CHECK_STATUS(sampling_params_validate(p, vocab, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_CONTAINS(d.msg, needle);
}

static void test_validate(void) {
  sampling_params p = sampling_params_default();
  p.temperature = -0.5f;
  expect_invalid(&p, 100, "temperature = -0.5");
  p.temperature = NAN;
  expect_invalid(&p, 100, "temperature");
  p.temperature = INFINITY;
  expect_invalid(&p, 100, "must be finite");
  p = sampling_params_default();
  p.top_k = -1;
  expect_invalid(&p, 100, "top_k = -1");
  p = sampling_params_default();
  p.top_p = 0.0f;
  expect_invalid(&p, 100, "top_p = 0: must be in (0, 1]");
  p.top_p = 1.5f;
  expect_invalid(&p, 100, "top_p = 1.5");
  p.top_p = NAN;
  expect_invalid(&p, 100, "top_p");
  p = sampling_params_default();
  p.min_p = 1.0f;
  expect_invalid(&p, 100, "min_p = 1: must be in [0, 1)");
  p.min_p = -0.1f;
  expect_invalid(&p, 100, "min_p = -0.1");
  p = sampling_params_default();
  p.max_new_tokens = 0;
  expect_invalid(&p, 100, "max_new_tokens = 0");
  p = sampling_params_default();
  p.n_stop_token_ids = SAMPLING_MAX_STOP + 1;
  expect_invalid(&p, 100, "17 stop token ids: must be in [0, 16]");
  p.n_stop_token_ids = -1;
  expect_invalid(&p, 100, "stop token ids");
  p = sampling_params_default();
  p.n_stop_token_ids = 2;
  p.stop_token_ids[0] = 5;
  p.stop_token_ids[1] = 100;
  expect_invalid(&p, 100, "stop_token_ids[1] = 100 is outside the vocabulary [0, 100)");
  CHECK_STATUS(sampling_params_validate(&p, 0, NULL), PH_OK, NULL); /* vocab not known yet */
  CHECK_STATUS(sampling_params_validate(&p, 101, NULL), PH_OK, NULL);
  p.stop_token_ids[0] = -3;
  expect_invalid(&p, 0, "stop_token_ids[0] = -3 is negative");
  p = sampling_params_default();
  expect_invalid(&p, (int64_t)INT32_MAX + 1, "at most");
  expect_invalid(NULL, 10, "NULL");
  sampling_params ok = sampled(0.7f, 50, 0.9f, 0.05f, 42);
  CHECK_STATUS(sampling_params_validate(&ok, 248320, NULL), PH_OK, NULL);
}

static void test_stop(void) {
  sampling_params p = sampling_params_default();
  p.n_stop_token_ids = 2;
  p.stop_token_ids[0] = 7;
  p.stop_token_ids[1] = 11;
  CHECK_EQ_INT(sampler_is_stop(&p, 7, -1), 1);
  CHECK_EQ_INT(sampler_is_stop(&p, 11, 2), 1);
  CHECK_EQ_INT(sampler_is_stop(&p, 2, 2), 1); /* eos */
  CHECK_EQ_INT(sampler_is_stop(&p, 3, 2), 0);
  CHECK_EQ_INT(sampler_is_stop(&p, 2, -1), 0); /* no eos */
  p.ignore_eos = 1;
  CHECK_EQ_INT(sampler_is_stop(&p, 2, 2), 0);
  CHECK_EQ_INT(sampler_is_stop(&p, 7, 2), 1); /* stop ids still stop */
  CHECK_EQ_INT(sampler_is_stop(NULL, 2, 2), 1);
}

static void test_contract(void) {
  const float x[] = {0.0f, 1.0f, 2.0f};
  sampling_params s = sampled(1.0f, 0, 1.0f, 0.0f, 0);
  double scratch[32];
  CHECK_EQ_INT(sampler_scratch_bytes(0), 0);
  CHECK_EQ_INT(sampler_scratch_bytes(-4), 0);
  CHECK_EQ_INT(sampler_scratch_bytes((int64_t)INT32_MAX + 1), 0);
  CHECK(sampler_scratch_bytes(3) >= 3 * sizeof(float) + 3 * sizeof(int32_t));
  CHECK(sampler_scratch_bytes(3) <= sizeof scratch);
  CHECK_EQ_INT(sampler_sample(NULL, 3, &s, 0, scratch, sizeof scratch), -1);
  CHECK_EQ_INT(sampler_sample(x, 3, NULL, 0, scratch, sizeof scratch), -1);
  CHECK_EQ_INT(sampler_sample(x, 0, &s, 0, scratch, sizeof scratch), -1);
  CHECK_EQ_INT(sampler_sample(x, 3, &s, 0, NULL, 0), -1);
  CHECK_EQ_INT(sampler_sample(x, 3, &s, 0, scratch, sampler_scratch_bytes(3) - 1), -1);
  CHECK_EQ_INT(sampler_sample(x, 3, &s, 0, (char *)scratch + 4, sizeof scratch - 4), -1);
  sampling_params bad = s;
  bad.top_p = 2.0f;
  CHECK_EQ_INT(sampler_sample(x, 3, &bad, 0, scratch, sizeof scratch), -1);
  int64_t tok = sampler_sample(x, 3, &s, 0, scratch, sizeof scratch);
  CHECK(tok >= 0 && tok < 3);
}

/* ---- full-size vocabulary -------------------------------------------------------------------- */

/* CPU time of the process: stable on a shared, loaded build machine, where wall time is not. */
static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec * 1e-6;
}

static void test_big_vocab(void) {
  float *x = malloc(BIG_VOCAB * sizeof *x);
  size_t bytes = sampler_scratch_bytes(BIG_VOCAB);
  void *scratch = malloc(bytes);
  random_logits(x, BIG_VOCAB, 2024, 1.0f);
  /* an LLM-like row: a few hundred plausible tokens, a long tail far below */
  for (int64_t i = 0; i < BIG_VOCAB; i++) x[i] = x[i] * 4.0f - (i % 997 == 0 ? 0.0f : 12.0f);
  x[123456] = 9.0f;
  struct {
    const char *name;
    sampling_params p;
  } cases[] = {
      {"greedy", sampling_params_default()},
      {"temperature 0.8", sampled(0.8f, 0, 1.0f, 0.0f, 1)},
      {"top_k 50", sampled(0.8f, 50, 1.0f, 0.0f, 2)},
      {"top_p 0.9", sampled(0.8f, 0, 0.9f, 0.0f, 3)},
      {"min_p 0.05", sampled(0.8f, 0, 1.0f, 0.05f, 4)},
      {"top_k 50 + top_p 0.9 + min_p 0.05", sampled(0.8f, 50, 0.9f, 0.05f, 5)},
  };
  for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
    enum { CALLS = 20 };
    double t0 = now_ms();
    int ok = 1;
    for (int t = 0; t < CALLS; t++) {
      int64_t tok = sampler_sample(x, BIG_VOCAB, &cases[c].p, t, scratch, bytes);
      ok &= tok >= 0 && tok < BIG_VOCAB;
      if (c == 0) ok &= tok == 123456;
    }
    CHECK(ok);
    printf("  vocab %d, %-36s %.3f ms CPU per call\n", BIG_VOCAB, cases[c].name,
           (now_ms() - t0) / CALLS);
  }
  check_inside(x, BIG_VOCAB, &cases[5].p, 50, "big vocab, all filters");
  check_inside(x, BIG_VOCAB, &cases[3].p, 50, "big vocab, top_p");
  /* a flat row: the nucleus holds ~90% of the vocabulary, every candidate is ranked */
  for (int64_t i = 0; i < BIG_VOCAB; i++) x[i] = (float)(i % 3) * 1e-3f;
  sampling_params flat = sampled(1.0f, 0, 0.9f, 0.0f, 6);
  sampling_params flat_k = sampled(1.0f, 100000, 0.9f, 0.0f, 7);
  double t0 = now_ms();
  for (int t = 0; t < 10; t++) {
    int64_t tok = sampler_sample(x, BIG_VOCAB, &flat, t, scratch, bytes);
    CHECK(tok >= 0 && tok < BIG_VOCAB);
  }
  printf("  vocab %d, %-36s %.3f ms CPU per call\n", BIG_VOCAB, "flat row, top_p 0.9",
         (now_ms() - t0) / 10);
  check_inside(x, BIG_VOCAB, &flat, 10, "big vocab, flat, top_p");
  check_inside(x, BIG_VOCAB, &flat_k, 10, "big vocab, flat, top_k 100000 + top_p");
  free(scratch);
  free(x);
}

int main(void) {
  RUN(test_greedy_ties_and_nan);
  RUN(test_first_nonfinite);
  RUN(test_argmax_blocked);
  RUN(test_greedy_equivalences);
  RUN(test_determinism);
  RUN(test_distribution);
  RUN(test_top_k);
  RUN(test_top_p);
  RUN(test_min_p);
  RUN(test_exact_edges);
  RUN(test_validate);
  RUN(test_stop);
  RUN(test_contract);
  RUN(test_big_vocab);
  return check_finish();
}
