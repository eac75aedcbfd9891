/* engine_testing — fixtures of the engine tests (tests/test_engine.c, tests/test_speculative.c):
 * request specs and their outcomes copied out of the engine, small engine params on the golden
 * tiny checkpoint, steps with the pool checks, runs alone, the bit-for-bit comparison with a run
 * alone, and the independent reference — the dense session teacher-forced over a request's
 * prompt and generated tokens (dense_ref_check).
 * Header only (static inline: a test uses what it needs). */
#ifndef PH_TESTS_ENGINE_TESTING_H
#define PH_TESTS_ENGINE_TESTING_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/rng.h"
#include "cache/block_pool.h"
#include "cache/state_pool.h"
#include "check.h"
#include "engine/engine.h"
#include "models/model.h"
#include "runtime/dense_session.h"
#include "runtime/paged_session.h"

/* ---- fixtures -------------------------------------------------------------------------------- */

#define MAX_PROMPT 640 /* longest prompt sent (an over-long one included) */
#define MAX_STEPS  20000

/* One request as the test describes it. */
typedef struct req_spec {
  int64_t prompt[MAX_PROMPT];
  int64_t n_prompt;
  sampling_params sp;
} req_spec;

/* What a request produced, copied out of the engine. */
typedef struct outcome {
  ph_finish_reason finish;
  ph_status status;
  int64_t n_generated, n_preemptions;
  int64_t n_drafted, n_accepted; /* speculative drafts verified, and kept */
  int64_t n_cached;              /* prompt tokens served from the prefix cache (last admission) */
  int64_t *tokens;               /* [n_generated] */
  float *logits;                 /* [n_generated, vocab] */
} outcome;

static inline void outcome_free(outcome *o) {
  free(o->tokens);
  free(o->logits);
  memset(o, 0, sizeof *o);
}

static inline ph_engine_params small_params(int32_t max_batch, int64_t max_tokens, int64_t chunk,
                                            int32_t n_blocks) {
  ph_engine_params p = ph_engine_params_default();
  /* f32: these engines are compared with the f32 dense session and the goldens at 2e-4 (the
   * default, auto, would run a bf16 checkpoint in bf16; its tests set it) */
  p.precision = PH_PRECISION_F32;
  p.max_batch_size = max_batch;
  p.max_scheduled_tokens = max_tokens;
  p.prefill_chunk = chunk;
  p.num_blocks = n_blocks;
  p.n_threads = 2;
  p.block_size = 16;
  p.max_context = 512;
  return p;
}

static inline const char *golden_dir(void) {
  static char path[1024];
  check_data(path, sizeof path, "golden/qwen35-tiny-f32/checkpoint");
  return path;
}

static inline engine *open_engine(const ph_engine_params *p) {
  engine *e = NULL;
  diag d;
  CHECK_STATUS(engine_create(golden_dir(), p, &e, &d), PH_OK, d.msg);
  if (e) engine_set_capture_logits(e, 1); /* the tests compare logits rows */
  return e;
}

static inline sampling_params greedy(int64_t max_new) {
  sampling_params sp = sampling_params_default();
  sp.max_new_tokens = max_new;
  return sp;
}

static inline sampling_params sampled(int64_t max_new, float temperature, int32_t top_k,
                                      float top_p, uint64_t seed) {
  sampling_params sp = greedy(max_new);
  sp.temperature = temperature;
  sp.top_k = top_k;
  sp.top_p = top_p;
  sp.seed = seed;
  return sp;
}

static inline void fill_prompt(rng *r, req_spec *q, int64_t n, int64_t vocab) {
  q->n_prompt = n;
  for (int64_t j = 0; j < n; j++) q->prompt[j] = (int64_t)rng_below(r, (uint64_t)vocab);
}

static inline double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return 1e3 * (double)ts.tv_sec + 1e-6 * (double)ts.tv_nsec;
}

/* Copies request id's results out of e (between steps) and releases it. */
static inline void take_outcome(engine *e, uint64_t id, outcome *o) {
  diag d;
  ph_request_info info;
  memset(o, 0, sizeof *o);
  CHECK_STATUS(engine_request_info_get(e, id, &info, &d), PH_OK, d.msg);
  o->finish = info.finish;
  o->status = info.status;
  o->n_preemptions = info.n_preemptions;
  o->n_drafted = info.n_drafted;
  o->n_accepted = info.n_accepted;
  o->n_cached = info.n_cached_tokens;
  int64_t n = -1;
  const int64_t *t = engine_tokens(e, id, &n);
  CHECK(t != NULL);
  CHECK_EQ_INT(n, info.n_generated);
  o->n_generated = n > 0 ? n : 0;
  const int64_t V = engine_vocab(e);
  if (t && o->n_generated > 0) {
    const float *l = engine_logits(e, id);
    CHECK(l != NULL);
    o->tokens = malloc((size_t)o->n_generated * sizeof *o->tokens);
    o->logits = malloc((size_t)(o->n_generated * V) * sizeof *o->logits);
    memcpy(o->tokens, t, (size_t)o->n_generated * sizeof *o->tokens);
    if (l) memcpy(o->logits, l, (size_t)(o->n_generated * V) * sizeof *o->logits);
  }
  CHECK_STATUS(engine_release(e, id, &d), PH_OK, d.msg);
}

/* The pools after a step, as far as the engine shows them. Returns 1 when consistent; otherwise
 * writes the first broken rule into why. */
static inline int pools_consistent(engine *e, const ph_step_info *si, char *why, size_t why_bytes) {
  paged_session *s = engine_session(e);
  block_pool *kv = hybrid_cache_blocks(paged_session_cache(s));
  state_pool *st = hybrid_cache_states(paged_session_cache(s));
  const ph_engine_params *p = engine_params_of(e);
  const int32_t n_ids = block_pool_n_blocks(kv);
  int64_t held = 0;
  int32_t negative = -1;
  for (int32_t id = 1; id < n_ids; id++) {
    const int32_t rc = block_pool_refcount(kv, id);
    held += rc > 0;
    if (rc < 0 && negative < 0) negative = id;
  }
#define RULE(cond, ...)                                                                            \
  if (!(cond)) {                                                                                   \
    snprintf(why, why_bytes, __VA_ARGS__);                                                         \
    return 0;                                                                                      \
  }
  RULE(si->pages_total == n_ids - 1, "pages_total %d, pool has %d", si->pages_total, n_ids - 1);
  RULE(si->pages_used == block_pool_used_count(kv), "pages_used %d, pool says %d", si->pages_used,
       block_pool_used_count(kv));
  RULE(si->pages_used <= si->pages_total, "pages_used %d > total %d", si->pages_used,
       si->pages_total);
  RULE(negative < 0, "page %d has refcount %d", negative, block_pool_refcount(kv, negative));
  RULE(held == si->pages_used, "%lld pages have holders, used %d", (long long)held,
       si->pages_used);
  /* each page's holders are exactly the requests whose tables hold it (a page shared through
   * the prefix cache counts one per table), and the prefix index, the LRU and the snapshots
   * agree with the pool */
  diag pd;
  diag_clear(&pd);
  RULE(engine_prefix_check(e, &pd) == PH_OK, "%.180s", pd.msg);
  RULE(block_pool_refcount(kv, BLOCK_POOL_NULL_ID) == 0, "the null page is held");
  RULE(si->slots_used == state_pool_used_count(st), "slots_used %d, pool says %d", si->slots_used,
       state_pool_used_count(st));
  /* a model without fixed state (DeepSeek MLA) holds no slots */
  const int32_t want_slots =
      hybrid_cache_has_state(paged_session_cache(engine_session(e))) ? si->n_running : 0;
  RULE(si->slots_used == want_slots, "slots_used %d, running %d", si->slots_used, si->n_running);
  RULE(si->n_running > 0 || si->pages_used == 0, "%d pages held with nothing running",
       si->pages_used);
  RULE(si->batch_size <= p->max_batch_size, "batch of %d > max_batch %d", si->batch_size,
       p->max_batch_size);
  RULE(si->n_tokens <= p->max_scheduled_tokens, "%lld tokens > budget %lld",
       (long long)si->n_tokens, (long long)p->max_scheduled_tokens);
  /* a verify samples one token per kept draft besides its own */
  RULE(si->n_generated <= si->batch_size + si->n_accepted,
       "%lld sampled from %d sequences and %lld accepted drafts", (long long)si->n_generated,
       si->batch_size, (long long)si->n_accepted);
  RULE(si->n_running + si->n_waiting > 0 || !engine_busy(e), "busy with nothing queued");
#undef RULE
  return 1;
}

/* Step statistics of one run. */
typedef struct run_stats {
  int64_t steps, bad_steps, preemptions, sampled;
  double worst_ms;
  char first_bad[256];
} run_stats;

/* One step with the pool checks; returns the step's status. */
static inline ph_status checked_step(engine *e, ph_step_info *si, run_stats *rs) {
  diag d;
  const ph_status st = engine_step(e, si, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  if (st != PH_OK) return st;
  char why[200];
  if (!pools_consistent(e, si, why, sizeof why) && rs->bad_steps++ == 0)
    snprintf(rs->first_bad, sizeof rs->first_bad, "step %llu: %s", (unsigned long long)si->step,
             why);
  rs->steps++;
  rs->preemptions += si->n_preempted;
  rs->sampled += si->n_generated;
  if (1e3 * si->seconds > rs->worst_ms) rs->worst_ms = 1e3 * si->seconds;
  return st;
}

/* Steps until e is idle. */
static inline void drain(engine *e, run_stats *rs) {
  ph_step_info si;
  for (int k = 0; k < MAX_STEPS && engine_busy(e); k++)
    if (checked_step(e, &si, rs) != PH_OK) return;
  CHECK(!engine_busy(e));
}

static inline void check_idle_pools(engine *e) {
  paged_session *s = engine_session(e);
  CHECK_EQ_INT(block_pool_used_count(hybrid_cache_blocks(paged_session_cache(s))), 0);
  CHECK_EQ_INT(state_pool_used_count(hybrid_cache_states(paged_session_cache(s))), 0);
}

/* Runs q alone in e (idle) to its end. */
static inline void run_alone_in(engine *e, const req_spec *q, outcome *o) {
  diag d;
  uint64_t id = 0;
  CHECK_STATUS(engine_add(e, q->prompt, q->n_prompt, &q->sp, &id, &d), PH_OK, d.msg);
  run_stats rs;
  memset(&rs, 0, sizeof rs);
  drain(e, &rs);
  CHECK_EQ_INT(rs.bad_steps, 0);
  take_outcome(e, id, o);
}

/* Runs q alone in a fresh engine with params p. */
static inline void run_alone(const ph_engine_params *p, const req_spec *q, outcome *o) {
  memset(o, 0, sizeof *o);
  engine *e = open_engine(p);
  if (!e) return;
  run_alone_in(e, q, o);
  engine_free(e);
}

/* got (among others) against alone: the same finish, tokens and logits bit for bit; an aborted
 * request produced a prefix of its isolated run. Prints what differs. */
static inline int same_as_alone(const outcome *got, const outcome *alone, int64_t V,
                                const char *label) {
  int ok = got->finish == PH_FINISH_ABORTED
               ? got->n_generated <= alone->n_generated
               : got->finish == alone->finish && got->n_generated == alone->n_generated;
  const int64_t n = got->n_generated < alone->n_generated ? got->n_generated : alone->n_generated;
  int64_t first_token = -1, first_row = -1;
  for (int64_t j = 0; j < n; j++) {
    if (first_token < 0 && got->tokens[j] != alone->tokens[j]) first_token = j;
    if (first_row < 0 &&
        memcmp(got->logits + j * V, alone->logits + j * V, (size_t)V * sizeof *got->logits) != 0)
      first_row = j;
  }
  ok = ok && first_token < 0 && first_row < 0;
  if (!ok)
    printf("  %s differs from its run alone: finish %s vs %s, %lld vs %lld tokens, first token "
           "difference at %lld, first logits row difference at %lld\n",
           label, ph_finish_reason_name(got->finish), ph_finish_reason_name(alone->finish),
           (long long)got->n_generated, (long long)alone->n_generated, (long long)first_token,
           (long long)first_row);
  return ok;
}

/* ---- the independent reference: the dense session -------------------------------------------
 * A request compared with its own run alone cannot catch a bug both runs share: with prompt
 * chunks after the first reading the prompt from offset 0 (issue 11, mutation M2), every
 * bit-identical check here passed. So every request compared alone is also run teacher-forced
 * through the dense session (src/runtime/dense_session.h: the dense graph, one sequence, no
 * pages, slots, scheduler, chunks or sampler) on the same checkpoint: its prompt followed by the
 * tokens the engine generated, in one forward pass. Dense row n_prompt - 1 + j predicts generated
 * token j and must match the engine's captured logits row j within DENSE_TOL of the request's
 * logit scale (max |dense logit| over the compared rows); and every generated token must be the
 * one the sampler draws from the engine's own row (greedy: its argmax), so a token sampled from
 * the wrong row or with the wrong token index after a preemption is caught as well.
 *
 * DENSE_TOL = PAIR_F32_TOL (tests/check.h): the engine's paged graph and the dense session are
 * two float32 implementations of the model math over the same f32 weights, each bound to within
 * GOLDEN_F32_TOL (2e-4) of the f64 golden reference's scale (tests/test_paged.c,
 * tests/test_golden.c), so they differ by at most twice that, 4e-4 of scale. Measured here: up
 * to 6e-5 (a 159-token sequence whose prompt ran chunked and the rest one token a step, against
 * one dense pass), 1e-6..1e-5 on most requests; a wrong token, position or chunk moves logits
 * by O(1) of scale (M2: see docs/testing.md). */
#define DENSE_TOL PAIR_F32_TOL

typedef struct dense_ref {
  ph_model *m;
  dense_session *s;
  int64_t V, max_context;
  int64_t *tokens;      /* [max_context] */
  float *logits;        /* [max_context, V] */
  void *scratch;        /* sampler scratch */
  size_t scratch_bytes; /* sampler_scratch_bytes(V) */
  double worst;         /* worst error of scale over the compared requests */
  int64_t n_requests, n_rows, n_bad;
} dense_ref;

/* The dense session on the checkpoint in dir (max_context 512, the engines' context here). */
static inline int dense_ref_open(dense_ref *r, const char *dir) {
  memset(r, 0, sizeof *r);
  CHECK_STATUS(ph_model_open(dir, NULL, &r->m), PH_OK, ph_model_error(r->m));
  if (!r->m) return 0;
  diag d;
  r->max_context = 512;
  CHECK_STATUS(dense_session_create(r->m, r->max_context, 1, &r->s, &d), PH_OK, d.msg);
  if (!r->s) return 0;
  r->V = dense_session_vocab(r->s);
  r->tokens = malloc((size_t)r->max_context * sizeof *r->tokens);
  r->logits = malloc((size_t)(r->max_context * r->V) * sizeof *r->logits);
  r->scratch_bytes = sampler_scratch_bytes(r->V);
  r->scratch = malloc(r->scratch_bytes);
  return r->tokens && r->logits && r->scratch;
}

static inline void dense_ref_close(dense_ref *r) {
  dense_session_free(r->s);
  ph_model_free(r->m);
  free(r->tokens);
  free(r->logits);
  free(r->scratch);
  memset(r, 0, sizeof *r);
}

/* Checks o (what request q produced, logits captured) against the dense session as described
 * above; a request with no tokens has nothing to compare and passes. Returns 1 when it matches,
 * else prints what differs and returns 0. */
static inline int dense_ref_check(dense_ref *r, const req_spec *q, const outcome *o,
                                  const char *label) {
  const int64_t n = o->n_generated, V = r->V, L = q->n_prompt + n - 1;
  if (n <= 0) return 1;
  if (!r->s || !o->logits || L > r->max_context) {
    printf("  %s: no dense comparison possible (%lld tokens)\n", label, (long long)L);
    r->n_bad++;
    return 0;
  }
  memcpy(r->tokens, q->prompt, (size_t)q->n_prompt * sizeof *r->tokens);
  memcpy(r->tokens + q->n_prompt, o->tokens, (size_t)(n - 1) * sizeof *r->tokens);
  diag d;
  dense_session_reset(r->s);
  const ph_status st = dense_session_step(r->s, r->tokens, L, r->logits, &d);
  CHECK_STATUS(st, PH_OK, d.msg);
  if (st != PH_OK) {
    r->n_bad++;
    return 0;
  }
  double err = 0, scale = 0;
  int64_t worst_row = -1, bad_token = -1;
  for (int64_t j = 0; j < n; j++) {
    const float *want = r->logits + (q->n_prompt - 1 + j) * V, *got = o->logits + j * V;
    const double before = err;
    for (int64_t v = 0; v < V; v++) check_err_acc(got[v], want[v], &err, &scale);
    if (err > before) worst_row = j;
    if (bad_token < 0 &&
        sampler_sample(got, V, &q->sp, j, r->scratch, r->scratch_bytes) != o->tokens[j])
      bad_token = j;
  }
  const double rel = scale > 0 ? err / scale : err;
  r->n_requests++;
  r->n_rows += n;
  if (!(rel <= r->worst)) r->worst = rel; /* NaN and inf included */
  const int ok = rel <= DENSE_TOL && bad_token < 0;
  if (!ok && r->n_bad++ < 5) /* the first few; dense_ref_report counts them all */
    printf("  %s (prompt %lld, %lld generated) vs the dense session: logits %.3g of scale "
           "(bound %.0e, worst row %lld), first token not drawn from its own row: %lld\n",
           label, (long long)q->n_prompt, (long long)n, rel, DENSE_TOL, (long long)worst_row,
           (long long)bad_token);
  return ok;
}

/* One line for a test's output; checks that every request compared passed. */
static inline void dense_ref_report(const dense_ref *r, const char *what) {
  printf("  %s vs the dense session: %lld requests, %lld logits rows, worst %.2e of scale "
         "(bound %.0e), %lld failed\n",
         what, (long long)r->n_requests, (long long)r->n_rows, r->worst, DENSE_TOL,
         (long long)r->n_bad);
  CHECK_EQ_INT(r->n_bad, 0);
  CHECK(r->n_requests > 0);
}

#endif /* PH_TESTS_ENGINE_TESTING_H */
