/* sampler — see sampler.h and docs/sampling.md.
 *
 * Data flow of one non-greedy call (V = vocab, n = non-NaN logits, m = tokens kept):
 *   1. one pass for the largest logit L (degenerate rows fall back to greedy);
 *   2. candidates cand[n] with weight w = exp((logit - L) / T), so the best token has w = 1:
 *      with a small top-k, a heap of the k best (O(V log k)); otherwise all n in id order, which
 *      for a large top-k are then put in rank order and cut to k;
 *   3. top-p and min-p keep a prefix of the rank order; without top-k, only the tokens that can
 *      be in that prefix are ranked (see nucleus_bound), so a peaked distribution ranks a
 *      handful of tokens and a flat one ranks all n;
 *   4. the kept tokens are put in id order and an inverse-CDF walk picks one with u in [0, 1).
 * Rank order is "higher logit first, equal logits by lower id", a total order, so no step
 * depends on anything but the inputs. Sorting is an LSD radix sort (stable, O(n), into the
 * second half of the scratch): a flat 248k-token row costs milliseconds, not a comparison sort's
 * hundreds of milliseconds.
 */
#include "engine/sampler.h"

#include <math.h>
#include <stdint.h>
#include <string.h>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include "base/rng.h"

/* Top-k up to this size uses a heap over the row; beyond it, every token is weighted and
 * radix-ranked, which costs the same whatever k is. */
#define TOP_K_HEAP_MAX 4096

/* One token under consideration, 16 bytes. The scratch holds 2 * V of them: the candidates and
 * the radix sort's second buffer. */
typedef struct cand {
  double w;    /* exp((logit - L) / T) in [0, 1]; 0 for -inf logits */
  float logit; /* the raw logit: ordering uses it, so equal weights from distinct logits keep
                  their logit order */
  int32_t id;
} cand;

sampling_params sampling_params_default(void) {
  sampling_params p = {0};
  p.temperature = 0.0f;
  p.top_k = 0;
  p.top_p = 1.0f;
  p.min_p = 0.0f;
  p.seed = 0;
  p.max_new_tokens = 16;
  p.n_stop_token_ids = 0;
  p.ignore_eos = 0;
  p.speculative.method = PH_DRAFT_NONE;
  return p;
}

ph_speculative_params speculative_params_resolved(const ph_speculative_params *p) {
  ph_speculative_params r = *p;
  if (r.num_draft_tokens == 0) r.num_draft_tokens = SPEC_DEFAULT_DRAFTS;
  if (r.ngram_min == 0 && r.ngram_max == 0) {
    r.ngram_min = 1;
    r.ngram_max = 4;
  }
  return r;
}

static ph_status speculative_validate(const ph_speculative_params *s, int64_t vocab, diag *d) {
  RETURN_ERROR_IF(s->method < PH_DRAFT_NONE || s->method > PH_DRAFT_REPLAY, d,
                  PH_ERR_INVALID_ARGUMENT,
                  "speculative.method = %d: must be none, ngram, mtp or replay", (int)s->method);
  if (s->method == PH_DRAFT_NONE) return PH_OK;
  RETURN_ERROR_IF(s->num_draft_tokens < 0 || s->num_draft_tokens > PH_MAX_DRAFT_TOKENS, d,
                  PH_ERR_INVALID_ARGUMENT,
                  "speculative.num_draft_tokens = %d: must be in [1, %d] (0 = %d)",
                  (int)s->num_draft_tokens, PH_MAX_DRAFT_TOKENS, SPEC_DEFAULT_DRAFTS);
  RETURN_ERROR_IF(
      !(s->ngram_min == 0 && s->ngram_max == 0) &&
          !(s->ngram_min >= 1 && s->ngram_min <= s->ngram_max && s->ngram_max <= SPEC_MAX_NGRAM),
      d, PH_ERR_INVALID_ARGUMENT,
      "speculative.ngram_min = %d, ngram_max = %d: need 1 <= min <= max <= %d (both "
      "0 = 1 and 4)",
      (int)s->ngram_min, (int)s->ngram_max, SPEC_MAX_NGRAM);
  if (s->method != PH_DRAFT_REPLAY) return PH_OK;
  RETURN_ERROR_IF(
      s->n_replay_tokens < 1 || s->n_replay_tokens > SPEC_MAX_REPLAY || !s->replay_tokens, d,
      PH_ERR_INVALID_ARGUMENT, "speculative replay with %lld tokens: needs 1..%d replay tokens",
      (long long)s->n_replay_tokens, SPEC_MAX_REPLAY);
  for (int64_t i = 0; i < s->n_replay_tokens; i++) {
    int64_t t = s->replay_tokens[i];
    RETURN_ERROR_IF(t < 0 || (vocab > 0 && t >= vocab), d, PH_ERR_INVALID_ARGUMENT,
                    "speculative replay token %lld = %lld is outside the vocabulary [0, %lld)",
                    (long long)i, (long long)t, (long long)(vocab > 0 ? vocab : INT64_MAX));
  }
  return PH_OK;
}

ph_status sampling_params_validate(const sampling_params *p, int64_t vocab, diag *d) {
  RETURN_ERROR_IF(!p, d, PH_ERR_INVALID_ARGUMENT, "sampling params are NULL");
  RETURN_ERROR_IF(!isfinite(p->temperature) || p->temperature < 0.0f, d, PH_ERR_INVALID_ARGUMENT,
                  "temperature = %g: must be finite and >= 0 (0 = greedy)", (double)p->temperature);
  RETURN_ERROR_IF(p->top_k < 0, d, PH_ERR_INVALID_ARGUMENT, "top_k = %d: must be >= 0 (0 = off)",
                  (int)p->top_k);
  RETURN_ERROR_IF(!(p->top_p > 0.0f && p->top_p <= 1.0f), d, PH_ERR_INVALID_ARGUMENT,
                  "top_p = %g: must be in (0, 1] (1 = off)", (double)p->top_p);
  RETURN_ERROR_IF(!(p->min_p >= 0.0f && p->min_p < 1.0f), d, PH_ERR_INVALID_ARGUMENT,
                  "min_p = %g: must be in [0, 1) (0 = off)", (double)p->min_p);
  RETURN_ERROR_IF(p->max_new_tokens < 1, d, PH_ERR_INVALID_ARGUMENT,
                  "max_new_tokens = %lld: must be >= 1", (long long)p->max_new_tokens);
  RETURN_ERROR_IF(p->n_stop_token_ids < 0 || p->n_stop_token_ids > SAMPLING_MAX_STOP, d,
                  PH_ERR_INVALID_ARGUMENT, "%d stop token ids: must be in [0, %d]",
                  (int)p->n_stop_token_ids, SAMPLING_MAX_STOP);
  RETURN_ERROR_IF(vocab > SAMPLER_MAX_VOCAB, d, PH_ERR_INVALID_ARGUMENT,
                  "vocabulary of %lld tokens: at most %lld are supported", (long long)vocab,
                  (long long)SAMPLER_MAX_VOCAB);
  for (int32_t i = 0; i < p->n_stop_token_ids; i++) {
    int64_t id = p->stop_token_ids[i];
    RETURN_ERROR_IF(id < 0, d, PH_ERR_INVALID_ARGUMENT, "stop_token_ids[%d] = %lld is negative",
                    (int)i, (long long)id);
    RETURN_ERROR_IF(vocab > 0 && id >= vocab, d, PH_ERR_INVALID_ARGUMENT,
                    "stop_token_ids[%d] = %lld is outside the vocabulary [0, %lld)", (int)i,
                    (long long)id, (long long)vocab);
  }
  return speculative_validate(&p->speculative, vocab, d);
}

size_t sampler_scratch_bytes(int64_t vocab) {
  if (vocab < 1 || vocab > SAMPLER_MAX_VOCAB) return 0;
  return 2 * (size_t)vocab * sizeof(cand);
}

int64_t sampler_first_nonfinite(const float *logits, int64_t vocab) {
  if (!logits || vocab <= 0) return -1;
  /* blocks of 1024 with an OR of "exponent all ones" (NaN and +-inf, nothing else), eight
   * entries a step in SSE2 and the block's last (end - b) % 8 one by one; the index is looked for
   * only in a block that has one */
  const int64_t block = 1024;
  for (int64_t b = 0; b < vocab; b += block) {
    const int64_t end = b + block < vocab ? b + block : vocab;
    uint32_t any = 0;
    int64_t i = b;
#if defined(__SSE2__)
    /* four lanes at a time: exponent bits all ones <=> NaN or +-inf */
    const __m128i expo = _mm_set1_epi32(0x7f800000);
    __m128i acc = _mm_setzero_si128();
    for (; i + 8 <= end; i += 8) {
      __m128i v0 = _mm_and_si128(_mm_loadu_si128((const __m128i *)(logits + i)), expo);
      __m128i v1 = _mm_and_si128(_mm_loadu_si128((const __m128i *)(logits + i + 4)), expo);
      acc = _mm_or_si128(acc, _mm_or_si128(_mm_cmpeq_epi32(v0, expo), _mm_cmpeq_epi32(v1, expo)));
    }
    any = (uint32_t)(_mm_movemask_epi8(acc) != 0);
#endif
    for (; i < end; i++) {
      uint32_t bits;
      memcpy(&bits, &logits[i], sizeof bits);
      any |= (uint32_t)((bits & 0x7f800000u) == 0x7f800000u);
    }
    if (any)
      for (int64_t j = b; j < end; j++)
        if (!isfinite(logits[j])) return j;
  }
  return -1;
}

int sampler_is_stop(const sampling_params *p, int64_t token, int64_t eos_id) {
  if (!p) return eos_id >= 0 && token == eos_id;
  if (!p->ignore_eos && eos_id >= 0 && token == eos_id) return 1;
  int32_t n = p->n_stop_token_ids;
  if (n > SAMPLING_MAX_STOP) n = SAMPLING_MAX_STOP;
  for (int32_t i = 0; i < n; i++)
    if (p->stop_token_ids[i] == token) return 1;
  return 0;
}

/* ---- the random number: a pure function of (seed, token index) ------------------------------- */

/* Uniform in [0, 1) with 53 random bits. Seed and index are hashed separately and combined
 * asymmetrically, so (a, b) and (b, a) differ; the result seeds a fresh xoshiro256** whose
 * first output is used. */
static double uniform_at(uint64_t seed, int64_t token_index) {
  uint64_t a = seed, b = (uint64_t)token_index;
  uint64_t ha = rng_splitmix64(&a);
  uint64_t hb = rng_splitmix64(&b);
  rng r = rng_seed(ha ^ rng_rotl(hb, 32));
  return (double)(rng_next(&r) >> 11) * (1.0 / 9007199254740992.0); /* 2^-53 */
}

/* ---- greedy ---------------------------------------------------------------------------------- */

/* The largest of x[0, n) under >, NaN skipped; -inf when there is none. */
static float block_max(const float *x, int64_t n) {
  float m = -INFINITY;
  int64_t i = 0;
#if defined(__SSE2__)
  /* _mm_max_ps(v, acc) is v > acc ? v : acc lane by lane: a NaN v keeps acc */
  __m128 a0 = _mm_set1_ps(-INFINITY), a1 = a0, a2 = a0, a3 = a0;
  for (; i + 16 <= n; i += 16) {
    a0 = _mm_max_ps(_mm_loadu_ps(x + i), a0);
    a1 = _mm_max_ps(_mm_loadu_ps(x + i + 4), a1);
    a2 = _mm_max_ps(_mm_loadu_ps(x + i + 8), a2);
    a3 = _mm_max_ps(_mm_loadu_ps(x + i + 12), a3);
  }
  float lanes[4];
  _mm_storeu_ps(lanes, _mm_max_ps(_mm_max_ps(a0, a1), _mm_max_ps(a2, a3)));
  for (int k = 0; k < 4; k++)
    if (lanes[k] > m) m = lanes[k];
#endif
  for (; i < n; i++)
    if (x[i] > m) m = x[i];
  return m;
}

/* The first index whose value equals (==) the maximum is the one the one-pass rule "replace on >"
 * keeps, so: the maximum per block of ARGMAX_BLOCK, the first block that raised it, and there the
 * first index equal to it. No block raised it: every non-NaN entry is -inf (or there is none),
 * and the first -inf is the answer (0 if there is none). */
#define ARGMAX_BLOCK 1024
int64_t sampler_argmax(const float *x, int64_t n) {
  float best_v = -INFINITY;
  int64_t from = 0, to = n;
  for (int64_t b = 0; b < n; b += ARGMAX_BLOCK) {
    const int64_t end = b + ARGMAX_BLOCK < n ? b + ARGMAX_BLOCK : n;
    const float m = block_max(x + b, end - b);
    if (m > best_v) {
      best_v = m;
      from = b;
      to = end;
    }
  }
  for (int64_t i = from; i < to; i++)
    if (x[i] == best_v) return i;
  return 0;
}

/* ---- rank order: a heap for top-k, a radix sort for everything else ------------------------ */

/* a comes after b in rank order: lower logit, or the same logit and a higher id. */
static int after_by_rank(const cand *a, const cand *b) {
  return a->logit < b->logit || (a->logit == b->logit && a->id > b->id);
}

/* Max-heap under after_by_rank: the candidate that ranks last sits at the root. */
static void sift_down(cand *h, int64_t n, int64_t i) {
  cand x = h[i];
  for (;;) {
    int64_t c = 2 * i + 1;
    if (c >= n) break;
    if (c + 1 < n && after_by_rank(&h[c + 1], &h[c])) c++;
    if (!after_by_rank(&h[c], &x)) break;
    h[i] = h[c];
    i = c;
  }
  h[i] = x;
}

static void heapify(cand *h, int64_t n) {
  for (int64_t i = n / 2; i-- > 0;) sift_down(h, n, i);
}

/* A heap (from heapify) into rank order. */
static void heap_to_ranked(cand *h, int64_t n) {
  for (int64_t end = n - 1; end > 0; end--) {
    cand t = h[0];
    h[0] = h[end];
    h[end] = t;
    sift_down(h, end, 0);
  }
}

/* Unsigned key that ascends with rank: descending logit. -0 and +0 get one key, as they compare
 * equal (the heap treats them as a tie too). NaN never reaches here. */
static uint32_t rank_key(float f) {
  if (f == 0.0f) f = 0.0f;
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  u = (u & 0x80000000u) ? ~u : (u | 0x80000000u); /* ascends with f */
  return ~u;
}

static uint32_t sort_key(const cand *c, int by_id) {
  return by_id ? (uint32_t)c->id : rank_key(c->logit);
}

/* Stable LSD radix sort of c[0..n) by id (by_id) or by rank key, RADIX_BITS per pass, tmp[n] as
 * the second buffer. One read counts every digit; a digit that is the same for every element
 * (the high digits of ids, most digits of a row with few distinct logits) costs no pass.
 * Stability makes equal logits keep their incoming order, which is ascending id wherever this is
 * called. */
#define RADIX_BITS   11
#define RADIX_SIZE   (1 << RADIX_BITS)
#define RADIX_PASSES ((32 + RADIX_BITS - 1) / RADIX_BITS)

static void radix_sort(cand *c, cand *tmp, int64_t n, int by_id) {
  uint32_t count[RADIX_PASSES][RADIX_SIZE];
  memset(count, 0, sizeof count);
  for (int64_t i = 0; i < n; i++) {
    uint32_t key = sort_key(&c[i], by_id);
    for (int d = 0; d < RADIX_PASSES; d++) count[d][(key >> (d * RADIX_BITS)) & (RADIX_SIZE - 1)]++;
  }
  cand *src = c, *dst = tmp;
  for (int d = 0; d < RADIX_PASSES; d++) {
    uint32_t *cnt = count[d], at = 0;
    int constant = 0;
    for (int b = 0; b < RADIX_SIZE; b++) {
      uint32_t k = cnt[b];
      constant |= (int64_t)k == n;
      cnt[b] = at;
      at += k;
    }
    if (constant) continue;
    int shift = d * RADIX_BITS;
    for (int64_t i = 0; i < n; i++)
      dst[cnt[(sort_key(&src[i], by_id) >> shift) & (RADIX_SIZE - 1)]++] = src[i];
    cand *t = src;
    src = dst;
    dst = t;
  }
  if (src != c) memcpy(c, src, (size_t)n * sizeof *c);
}

/* c[0..m) into ascending id order. A large set (an eighth of the vocabulary or more) is placed
 * directly: each token to tmp[id], then one scan collects them, three linear passes over V
 * instead of scattering passes; a smaller one is radix-sorted. */
static void order_by_id(cand *c, cand *tmp, int64_t m, int64_t vocab) {
  if (m < vocab / 8) {
    radix_sort(c, tmp, m, 1);
    return;
  }
  for (int64_t i = 0; i < vocab; i++) tmp[i].w = -1.0; /* weights are >= 0: -1 marks a hole */
  for (int64_t j = 0; j < m; j++) tmp[c[j].id] = c[j];
  int64_t k = 0;
  for (int64_t i = 0; i < vocab; i++)
    if (tmp[i].w >= 0.0) c[k++] = tmp[i];
}

/* ---- candidates ------------------------------------------------------------------------------ */

static double weight(float logit, float max_logit, double temperature) {
  return exp(((double)logit - (double)max_logit) / temperature);
}

/* The k best non-NaN tokens into c[0..k) in rank order, weights not set; returns how many (fewer
 * than k when the row has fewer non-NaN entries). O(V log k): most tokens cost one comparison
 * with the root. */
static int64_t gather_top_k(const float *logits, int64_t vocab, int64_t k, cand *c) {
  int64_t n = 0;
  for (int64_t i = 0; i < vocab; i++) {
    float x = logits[i];
    if (x != x) continue;
    if (n < k) {
      c[n].logit = x;
      c[n].id = (int32_t)i;
      if (++n == k) heapify(c, n);
    } else if (x > c[0].logit) {
      /* equal logits never replace the root: every id in the heap is lower than i */
      c[0].logit = x;
      c[0].id = (int32_t)i;
      sift_down(c, n, 0);
    }
  }
  if (n < k) heapify(c, n);
  heap_to_ranked(c, n);
  return n;
}

/* Every non-NaN token into c[0..n) in id order with its weight; *total = the sum of weights in
 * id order. Returns n. */
static int64_t gather_all(const float *logits, int64_t vocab, float max_logit, double temperature,
                          cand *c, double *total) {
  int64_t n = 0;
  double sum = 0.0;
  for (int64_t i = 0; i < vocab; i++) {
    float x = logits[i];
    if (x != x) continue;
    double w = weight(x, max_logit, temperature);
    c[n].w = w;
    c[n].logit = x;
    c[n].id = (int32_t)i;
    sum += w;
    n++;
  }
  *total = sum;
  return n;
}

/* Keeps the candidates with w >= floor_w, in their order; returns how many. */
static int64_t keep_at_least(cand *c, int64_t n, double floor_w) {
  int64_t m = 0;
  for (int64_t i = 0; i < n; i++)
    if (c[i].w >= floor_w) c[m++] = c[i];
  return m;
}

/* The kept prefix of c[0..n) (best first, c[0].w == 1): top-p keeps token j while the mass of
 * the tokens before it is below top_p * total (so at least one, and the smallest prefix holding
 * top_p of the mass); min-p keeps token j while w_j >= min_p * w_0. *decided is set to 1 when
 * the cut fell inside c[0..n) or top_p's mass was reached there, i.e. tokens after c[n-1] would
 * not have been kept either; 0 when the prefix ran to the end of c still short of top_p. */
static int64_t cut_prefix(const cand *c, int64_t n, double total, const sampling_params *p,
                          int *decided) {
  int use_top_p = p->top_p < 1.0f;
  double mass_needed = (double)p->top_p * total;
  double min_w = (double)p->min_p * c[0].w;
  double cum = 0.0;
  int64_t m = 0;
  *decided = 1;
  for (; m < n; m++) {
    if (m > 0 && use_top_p && cum >= mass_needed) return m;
    if (c[m].w < min_w) return m;
    cum += c[m].w;
  }
  *decided = !use_top_p || cum >= mass_needed;
  return m;
}

/* A weight below which no token can be inside the top-p nucleus: tokens with w < eps hold less
 * than n * eps = (1 - top_p) * total of the mass together, so the tokens with w >= eps already
 * hold at least top_p of it and the nucleus (a best-first prefix) ends among them. Rounding can
 * only make the nucleus look short by an ulp; cut_prefix reports that and the caller redoes the
 * cut over every token. 0 when top-p is off. */
static double nucleus_bound(const sampling_params *p, int64_t n, double total) {
  if (p->top_p >= 1.0f || n == 0) return 0.0;
  return (1.0 - (double)p->top_p) * total / (double)n;
}

/* Inverse CDF over c[0..m) in id order: the first token whose running weight exceeds u * sum.
 * Zero-weight tokens are never returned; m >= 1 and c holds a token with w = 1. */
static int64_t draw(const cand *c, int64_t m, double u) {
  double sum = 0.0;
  for (int64_t j = 0; j < m; j++) sum += c[j].w;
  double target = u * sum, cum = 0.0;
  int64_t last = -1;
  for (int64_t j = 0; j < m; j++) {
    if (c[j].w <= 0.0) continue;
    cum += c[j].w;
    last = c[j].id;
    if (cum > target) return c[j].id;
  }
  return last; /* u * sum rounded up to sum: the last token with weight */
}

static int params_usable(const sampling_params *p) {
  return isfinite(p->temperature) && p->temperature >= 0.0f && p->top_k >= 0 && p->top_p > 0.0f &&
         p->top_p <= 1.0f && p->min_p >= 0.0f && p->min_p < 1.0f;
}

int64_t sampler_sample(const float *logits, int64_t vocab, const sampling_params *p,
                       int64_t token_index, void *scratch, size_t scratch_bytes) {
  if (!logits || !p || vocab < 1 || vocab > SAMPLER_MAX_VOCAB || !params_usable(p)) return -1;
  if (p->temperature == 0.0f || p->top_k == 1) return sampler_argmax(logits, vocab);
  if (!scratch || scratch_bytes < sampler_scratch_bytes(vocab) ||
      (uintptr_t)scratch % _Alignof(cand) != 0)
    return -1;

  float max_logit = -INFINITY;
  int any = 0;
  for (int64_t i = 0; i < vocab; i++) {
    float x = logits[i];
    if (x != x) continue;
    any = 1;
    if (x > max_logit) max_logit = x;
  }
  /* all NaN, all -inf, or +inf present: softmax has no finite form; greedy is the limit */
  if (!any || isinf(max_logit)) return sampler_argmax(logits, vocab);

  cand *c = scratch, *tmp = c + vocab;
  double t = (double)p->temperature;
  int filters = p->top_p < 1.0f || p->min_p > 0.0f;
  int64_t m;
  int in_id_order = 0;
  if (p->top_k > 0 && p->top_k < vocab) {
    int64_t n;
    if (p->top_k <= TOP_K_HEAP_MAX) {
      n = gather_top_k(logits, vocab, p->top_k, c);
      for (int64_t j = 0; j < n; j++) c[j].w = weight(c[j].logit, max_logit, t);
    } else {
      double unused;
      n = gather_all(logits, vocab, max_logit, t, c, &unused);
      radix_sort(c, tmp, n, 0);
      if (n > p->top_k) n = p->top_k;
    }
    double total = 0.0; /* in rank order, whichever way the k were found */
    for (int64_t j = 0; j < n; j++) total += c[j].w;
    int decided; /* always 1 here: c holds every token top-k kept */
    m = filters ? cut_prefix(c, n, total, p, &decided) : n;
  } else {
    double total;
    int64_t n = gather_all(logits, vocab, max_logit, t, c, &total);
    m = n;
    in_id_order = !filters;
    if (filters) {
      double min_w = (double)p->min_p; /* min_p * w of the best token, which is 1 */
      double bound = nucleus_bound(p, n, total);
      double floor_w = bound > min_w ? bound : min_w;
      int64_t n_cand = keep_at_least(c, n, floor_w);
      radix_sort(c, tmp, n_cand, 0);
      int decided;
      m = cut_prefix(c, n_cand, total, p, &decided);
      if (!decided && n_cand < n && floor_w > min_w) {
        /* rounding left the nucleus short of the bound: redo over every token min-p keeps */
        n = gather_all(logits, vocab, max_logit, t, c, &total);
        n_cand = keep_at_least(c, n, min_w);
        radix_sort(c, tmp, n_cand, 0);
        m = cut_prefix(c, n_cand, total, p, &decided);
      }
    }
  }
  if (!in_id_order) order_by_id(c, tmp, m, vocab);
  return draw(c, m, uniform_at(p->seed, token_index));
}
