/* test_engine — the continuous-batching engine (src/engine/engine.h) end to end on the golden
 * tiny checkpoint (4 layers: 3 GatedDeltaNet + 1 full attention, vocab 256):
 *  - acceptance: unequal prompts around the page size (16) and the GatedDeltaNet chunk (64)
 *    overlapping, a request admitted while others decode, one removed mid-decode, preemption and
 *    resume under a small page pool, greedy and sampled requests;
 *  - identical concurrent prompts (seeded sampling) give one distinct output;
 *  - bad requests finish with typed errors without disturbing good ones; API misuse is refused;
 *  - a randomized schedule over RAND_SEEDS (arrivals, removals in any state, random budgets,
 *    pools that preempt in every seed, two seeds whose requests run into the context's end, 1 and
 *    2 kernel threads) with the pools checked after every step (4,000+ steps; fewer in Debug and
 *    sanitizer builds);
 *  - max_new_tokens past the context is clipped there ("length"); a request removed from its own
 *    token callback and released right after is not touched again;
 *  - engine_step allocates nothing after warm-up, in the warm-up's workload and in a new one
 *    (random traffic); counted by interposing malloc, or by the sanitizer's malloc hook;
 *  - prompts that are prefixes of the golden sequences give the golden rows (f32 and bf16 VLM
 *    sets, prefill chunks 16, 32, 64, with preemption).
 * Run one test: test_engine <part of its name>.
 * Two references for every request. (1) Its run alone: tokens and captured logits compared bit
 * for bit (memcmp) with the same request run alone in an engine with the same params (the
 * randomized test: the other thread count); an aborted request must have produced a prefix of
 * it. Requests run one after another in one engine are alone too, which is how the randomized
 * test gets its references cheaply. (2) One the engine did not produce, since a bug both runs
 * share cancels out of (1): the dense session, teacher-forced (dense_ref_check below), and, for
 * golden prefixes, the float64 golden rows.
 * What the engine API cannot show: block tables (the scheduler's requests are hidden), so page
 * accounting is checked through the pools — used == sum of refcounts, every refcount 0 or 1
 * (no page held twice), slots used == requests running, nothing held when nothing runs.
 * Why one file of ~1,800 lines: its tests share the fixtures (params, outcomes, the pool checks,
 * the dense reference, the random traffic) and the malloc interposer, which a binary defines
 * once; split it when a part grows a life of its own. */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "base/fmap.h"
#include "base/rng.h"
#include "cache/block_pool.h"
#include "cache/state_pool.h"
#include "check.h"
#include "engine/engine.h"
#include "exec/exec.h"
#include "io/safetensors.h"
#include "models/model.h"
#include "models/tiny.h"
#include "runtime/dense_session.h"
#include "runtime/paged_session.h"

/* ---- allocation counter ------------------------------------------------------------------------
 * Every allocation of the process (library, jansson, worker threads) is counted while
 * `alloc_counting` is set. Release build: the test binary defines malloc, calloc, realloc,
 * aligned_alloc, posix_memalign and free on top of glibc's __libc_* entry points. Sanitizer
 * builds (ASan, MSan, TSan replace the allocator themselves, so interposing is impossible there):
 * the sanitizer's own malloc hook (__sanitizer_install_malloc_and_free_hooks) counts instead, so
 * the allocation checks run in both builds; ALLOC_COUNTER names the way in the output. */

static atomic_int alloc_counting;
static atomic_long alloc_count;
static atomic_long alloc_bytes; /* bytes asked for while counting (realloc: the new size) */

static void count_alloc(size_t bytes) {
  if (atomic_load_explicit(&alloc_counting, memory_order_relaxed)) {
    atomic_fetch_add_explicit(&alloc_count, 1, memory_order_relaxed);
    atomic_fetch_add_explicit(&alloc_bytes, (long)bytes, memory_order_relaxed);
  }
}

#if SANITIZED
#include <sanitizer/allocator_interface.h>
#define ALLOC_COUNTER "the sanitizer's malloc hook"
static void on_malloc(const volatile void *p, size_t n) {
  (void)p;
  count_alloc(n);
}
static void on_free(const volatile void *p) { (void)p; }
static int alloc_counter_ready(void) {
  static int installed = -1;
  if (installed < 0) installed = __sanitizer_install_malloc_and_free_hooks(on_malloc, on_free) != 0;
  return installed;
}
#else
#define ALLOC_COUNTER "malloc interposed"
static int alloc_counter_ready(void) { return 1; }
extern void *__libc_malloc(size_t n);
extern void *__libc_calloc(size_t n, size_t size);
extern void *__libc_realloc(void *p, size_t n);
extern void *__libc_memalign(size_t align, size_t n);
extern void __libc_free(void *p);

void *malloc(size_t n) {
  count_alloc(n);
  return __libc_malloc(n);
}

void *calloc(size_t n, size_t size) {
  count_alloc(n * size);
  return __libc_calloc(n, size);
}

void *realloc(void *p, size_t n) {
  count_alloc(n);
  return __libc_realloc(p, n);
}

void *aligned_alloc(size_t align, size_t n) {
  count_alloc(n);
  return __libc_memalign(align, n);
}

int posix_memalign(void **out, size_t align, size_t n) {
  count_alloc(n);
  void *p = __libc_memalign(align, n);
  if (!p) return ENOMEM;
  *out = p;
  return 0;
}

void free(void *p) { __libc_free(p); }
#endif

#include "engine_testing.h"

/* ---- 1. acceptance -------------------------------------------------------------------------- */

#define N_ACC 9

static void test_acceptance(void) {
  /* 17 pages incl. the null one: 256 tokens for 6 running requests that need up to 230 together
   * at their ends, so some are preempted */
  const ph_engine_params p = small_params(6, 128, 64, 17);
  engine *e = open_engine(&p);
  if (!e) return;
  const int64_t V = engine_vocab(e);
  static const int64_t lens[N_ACC] = {1, 15, 16, 17, 63, 64, 65, 130, 40};
  static const int64_t news[N_ACC] = {20, 16, 17, 12, 24, 16, 9, 20, 14};
  req_spec *q = calloc(N_ACC, sizeof *q);
  rng r = rng_seed(61);
  for (int i = 0; i < N_ACC; i++) {
    fill_prompt(&r, &q[i], lens[i], V);
    q[i].sp = i % 2 ? sampled(news[i], 0.6f + 0.1f * (float)i, i == 3 ? 0 : 20,
                              i == 5 ? 1.0f : 0.9f, 1000 + (uint64_t)i)
                    : greedy(news[i]);
  }
  const int late = 8;   /* added while the others decode */
  const int victim = 4; /* the 63-token prompt: removed mid-decode */
  uint64_t ids[N_ACC] = {0};
  diag d;
  for (int i = 0; i < late; i++)
    CHECK_STATUS(engine_add(e, q[i].prompt, q[i].n_prompt, &q[i].sp, &ids[i], &d), PH_OK, d.msg);
  run_stats rs;
  memset(&rs, 0, sizeof rs);
  int64_t removed_with = -1, decoding_at_late = -1;
  int removal_seen = 0;
  ph_step_info si;
  for (int k = 0; k < MAX_STEPS && engine_busy(e); k++) {
    ph_request_info info;
    if (k == 6) {
      decoding_at_late = 0;
      for (int i = 0; i < late; i++) {
        CHECK_STATUS(engine_request_info_get(e, ids[i], &info, &d), PH_OK, d.msg);
        decoding_at_late += info.finish == PH_FINISH_NONE && info.n_generated > 0;
      }
      CHECK_STATUS(engine_add(e, q[late].prompt, q[late].n_prompt, &q[late].sp, &ids[late], &d),
                   PH_OK, d.msg);
    }
    int removing = 0;
    if (removed_with < 0) {
      CHECK_STATUS(engine_request_info_get(e, ids[victim], &info, &d), PH_OK, d.msg);
      if (info.n_generated >= 5) {
        CHECK_STATUS(engine_remove(e, ids[victim], &d), PH_OK, d.msg);
        CHECK_STATUS(engine_remove(e, ids[victim], &d), PH_OK, d.msg); /* twice: once queued */
        removed_with = info.n_generated;
        removing = 1;
      }
    }
    if (checked_step(e, &si, &rs) != PH_OK) break;
    if (removing) {
      /* effective before the step scheduled anything: no token after the removal */
      CHECK_STATUS(engine_request_info_get(e, ids[victim], &info, &d), PH_OK, d.msg);
      CHECK_EQ_INT(info.finish, PH_FINISH_ABORTED);
      CHECK_EQ_INT(info.n_generated, removed_with);
      CHECK(si.n_finished >= 1);
      removal_seen = 1;
    }
  }
  CHECK(!engine_busy(e));
  CHECK(removal_seen && removed_with >= 5 && removed_with < news[victim]);
  CHECK(decoding_at_late >= 1); /* the late request joined running decodes */
  if (rs.bad_steps)
    printf("  pools inconsistent at %lld steps, first: %s\n", (long long)rs.bad_steps,
           rs.first_bad);
  CHECK_EQ_INT(rs.bad_steps, 0);
  check_idle_pools(e);

  outcome got[N_ACC];
  int64_t preempted = 0;
  for (int i = 0; i < N_ACC; i++) {
    take_outcome(e, ids[i], &got[i]);
    preempted += got[i].n_preemptions;
    CHECK_EQ_INT(got[i].status, PH_OK);
    if (i == victim) {
      CHECK_EQ_INT(got[i].finish, PH_FINISH_ABORTED);
      CHECK_EQ_INT(got[i].n_generated, removed_with);
    } else {
      CHECK_EQ_INT(got[i].finish, PH_FINISH_LENGTH); /* no eos in the golden config */
      CHECK_EQ_INT(got[i].n_generated, news[i]);
    }
  }
  CHECK(preempted >= 1);
  printf("  %lld steps, %lld tokens sampled, %lld preemptions, victim aborted after %lld tokens, "
         "worst step %.2f ms\n",
         (long long)rs.steps, (long long)rs.sampled, (long long)preempted, (long long)removed_with,
         rs.worst_ms);
  engine_free(e);

  int n_same = 0;
  dense_ref dr;
  dense_ref_open(&dr, golden_dir());
  for (int i = 0; i < N_ACC; i++) {
    outcome alone;
    run_alone(&p, &q[i], &alone);
    char label[64];
    snprintf(label, sizeof label, "request %d", i);
    const int same = same_as_alone(&got[i], &alone, V, label);
    CHECK(same);
    n_same += same;
    CHECK_EQ_INT(alone.n_preemptions, 0);
    CHECK(dense_ref_check(&dr, &q[i], &got[i], label));
    outcome_free(&alone);
    outcome_free(&got[i]);
  }
  printf("  %d/%d requests bit-identical to their isolated runs (tokens and logits)\n", n_same,
         N_ACC);
  dense_ref_report(&dr, "all 9");
  CHECK_EQ_INT(dr.n_requests, N_ACC);
  dense_ref_close(&dr);
  free(q);
}

/* ---- 2. identical prompts ------------------------------------------------------------------- */

#define N_SAME 8

static void test_identical_prompts(void) {
  /* 8 copies of 37 + 20 tokens need 32 pages at their ends; 20 make them preempt */
  const ph_engine_params p = small_params(8, 128, 32, 21);
  engine *e = open_engine(&p);
  if (!e) return;
  const int64_t V = engine_vocab(e);
  req_spec *q = calloc(1, sizeof *q);
  rng r = rng_seed(7);
  fill_prompt(&r, q, 37, V);
  q->sp = sampled(20, 0.9f, 0, 0.95f, 4242);
  q->sp.min_p = 0.01f;
  uint64_t ids[N_SAME];
  diag d;
  for (int i = 0; i < N_SAME; i++)
    CHECK_STATUS(engine_add(e, q->prompt, q->n_prompt, &q->sp, &ids[i], &d), PH_OK, d.msg);
  run_stats rs;
  memset(&rs, 0, sizeof rs);
  drain(e, &rs);
  CHECK_EQ_INT(rs.bad_steps, 0);
  check_idle_pools(e);
  outcome got[N_SAME];
  int64_t preempted = 0;
  for (int i = 0; i < N_SAME; i++) {
    take_outcome(e, ids[i], &got[i]);
    preempted += got[i].n_preemptions;
  }
  int distinct = 1;
  for (int i = 1; i < N_SAME; i++) {
    int same = 0;
    for (int j = 0; j < i && !same; j++)
      same = got[i].n_generated == got[j].n_generated && got[i].finish == got[j].finish &&
             memcmp(got[i].tokens, got[j].tokens,
                    (size_t)got[i].n_generated * sizeof *got[i].tokens) == 0 &&
             memcmp(got[i].logits, got[j].logits,
                    (size_t)(got[i].n_generated * V) * sizeof *got[i].logits) == 0;
    distinct += !same;
  }
  CHECK_EQ_INT(distinct, 1);
  CHECK_EQ_INT(got[0].n_generated, 20);
  /* a sampled output, not a constant one */
  int varied = 0;
  for (int64_t j = 1; j < got[0].n_generated; j++) varied |= got[0].tokens[j] != got[0].tokens[0];
  CHECK(varied);
  outcome alone;
  run_alone(&p, q, &alone);
  CHECK(same_as_alone(&got[0], &alone, V, "copy 0"));
  outcome_free(&alone);
  dense_ref dr;
  dense_ref_open(&dr, golden_dir());
  for (int i = 0; i < N_SAME; i++) {
    char label[32];
    snprintf(label, sizeof label, "copy %d", i);
    CHECK(dense_ref_check(&dr, q, &got[i], label));
  }
  dense_ref_report(&dr, "the copies");
  CHECK_EQ_INT(dr.n_requests, N_SAME);
  dense_ref_close(&dr);
  printf("  %d copies, %d distinct output(s), %lld preemptions, %lld steps\n", N_SAME, distinct,
         (long long)preempted, (long long)rs.steps);
  CHECK(preempted >= 1);
  for (int i = 0; i < N_SAME; i++) outcome_free(&got[i]);
  engine_free(e);
  free(q);
}

/* ---- 3. bad requests ------------------------------------------------------------------------ */

typedef struct bad_case {
  const char *name;
  int64_t n_prompt;
  int64_t bad_token; /* written at index 3 when != 0 */
  int what;          /* which sampling field to break */
  ph_status status;
  const char *message;
} bad_case;

enum {
  BREAK_NONE,
  BREAK_TEMP,
  BREAK_TEMP_NAN,
  BREAK_TOP_P,
  BREAK_TOP_K,
  BREAK_MAX_NEW,
  BREAK_STOP
};

static const bad_case BAD[] = {
    {"empty prompt", 0, 0, BREAK_NONE, PH_ERR_INVALID_ARGUMENT, "empty"},
    {"token -1", 10, -1, BREAK_NONE, PH_ERR_INVALID_ARGUMENT, "outside the vocabulary"},
    {"token = vocab", 10, 256, BREAK_NONE, PH_ERR_INVALID_ARGUMENT, "outside the vocabulary"},
    {"prompt beyond the context", 600, 0, BREAK_NONE, PH_ERR_LIMIT, "context"},
    {"prompt = the context", 512, 0, BREAK_NONE, PH_ERR_LIMIT, "no room"},
    {"temperature -1", 10, 0, BREAK_TEMP, PH_ERR_INVALID_ARGUMENT, "temperature"},
    {"temperature NaN", 10, 0, BREAK_TEMP_NAN, PH_ERR_INVALID_ARGUMENT, "temperature"},
    {"top_p 0", 10, 0, BREAK_TOP_P, PH_ERR_INVALID_ARGUMENT, "top_p"},
    {"top_k -3", 10, 0, BREAK_TOP_K, PH_ERR_INVALID_ARGUMENT, "top_k"},
    {"max_new_tokens 0", 10, 0, BREAK_MAX_NEW, PH_ERR_INVALID_ARGUMENT, "max_new_tokens"},
    {"stop token = vocab", 10, 0, BREAK_STOP, PH_ERR_INVALID_ARGUMENT, "stop_token_ids"},
    /* 300 + 40 tokens need 22 pages of 16; the pool has 19 */
    {"never fits the pages", 300, 0, BREAK_NONE, PH_ERR_LIMIT, "can never fit"},
};
#define N_BAD  ((int)(sizeof BAD / sizeof BAD[0]))
#define N_GOOD 3

static void make_bad(rng *r, const bad_case *b, req_spec *q) {
  fill_prompt(r, q, b->n_prompt, 256);
  if (b->bad_token) q->prompt[3] = b->bad_token;
  q->sp = sampled(b->n_prompt == 300 ? 40 : 8, 0.8f, 0, 1.0f, 5);
  switch (b->what) {
  case BREAK_TEMP:
    q->sp.temperature = -1.0f;
    break;
  case BREAK_TEMP_NAN:
    q->sp.temperature = NAN;
    break;
  case BREAK_TOP_P:
    q->sp.top_p = 0.0f;
    break;
  case BREAK_TOP_K:
    q->sp.top_k = -3;
    break;
  case BREAK_MAX_NEW:
    q->sp.max_new_tokens = 0;
    break;
  case BREAK_STOP:
    q->sp.n_stop_token_ids = 2;
    q->sp.stop_token_ids[0] = 7;
    q->sp.stop_token_ids[1] = 256;
    break;
  default:
    break;
  }
}

static void check_refused(engine *e, uint64_t id, const bad_case *b) {
  diag d;
  ph_request_info info;
  CHECK_STATUS(engine_request_info_get(e, id, &info, &d), PH_OK, d.msg);
  const int ok = info.finish == PH_FINISH_ERROR && info.status == b->status &&
                 strstr(info.message, b->message) != NULL && info.n_generated == 0;
  if (!ok)
    printf("  bad request \"%s\": finish %s, status %s, message \"%s\"\n", b->name,
           ph_finish_reason_name(info.finish), ph_status_name(info.status), info.message);
  CHECK_EQ_INT(info.finish, PH_FINISH_ERROR);
  CHECK_STATUS(info.status, b->status, info.message);
  CHECK_CONTAINS(info.message, b->message);
  CHECK_EQ_INT(info.n_generated, 0);
}

static void test_bad_requests(void) {
  const ph_engine_params p = small_params(4, 128, 64, 20); /* 19 pages: 304 tokens */
  diag d;
  {
    ph_engine_params bp = p;
    bp.prefill_chunk = 256; /* more than the step budget: a chunk could never run */
    engine *none = NULL;
    CHECK_STATUS(engine_create(golden_dir(), &bp, &none, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
    CHECK_CONTAINS(d.msg, "prefill_chunk");
    CHECK(none == NULL);
  }
  engine *e = open_engine(&p);
  if (!e) return;
  const int64_t V = engine_vocab(e);
  rng r = rng_seed(99);
  req_spec *good = calloc(N_GOOD, sizeof *good), *bad = calloc(N_BAD, sizeof *bad);
  fill_prompt(&r, &good[0], 20, V);
  good[0].sp = greedy(10);
  fill_prompt(&r, &good[1], 70, V);
  good[1].sp = sampled(12, 1.1f, 30, 0.8f, 31337);
  fill_prompt(&r, &good[2], 5, V);
  good[2].sp = sampled(8, 0.5f, 0, 1.0f, 8);
  good[2].sp.n_stop_token_ids = 1;
  good[2].sp.stop_token_ids[0] = 255;
  for (int i = 0; i < N_BAD; i++) make_bad(&r, &BAD[i], &bad[i]);

  /* API misuse: refused at the call */
  uint64_t id = 0;
  CHECK_STATUS(engine_add(e, NULL, 3, &good[0].sp, &id, &d), PH_ERR_INVALID_ARGUMENT, d.msg);
  CHECK_STATUS(engine_add(e, good[0].prompt, -1, &good[0].sp, &id, &d), PH_ERR_INVALID_ARGUMENT,
               d.msg);
  CHECK_STATUS(engine_remove(e, 12345, &d), PH_ERR_NOT_FOUND, d.msg);
  CHECK_CONTAINS(d.msg, "12345");
  CHECK_STATUS(engine_release(e, 12345, &d), PH_ERR_NOT_FOUND, d.msg);
  ph_request_info info;
  CHECK_STATUS(engine_request_info_get(e, 12345, &info, &d), PH_ERR_NOT_FOUND, d.msg);
  int64_t buf[4];
  CHECK_EQ_INT(engine_poll(e, 12345, buf, 4), -1);
  int64_t n = 7;
  CHECK(engine_tokens(e, 12345, &n) == NULL && n == 0);
  CHECK(engine_logits(e, 12345) == NULL);

  /* good and bad requests interleaved in one step */
  uint64_t gid[N_GOOD], bid[N_BAD];
  const int half = N_BAD / 2;
  CHECK_STATUS(engine_add(e, good[0].prompt, good[0].n_prompt, &good[0].sp, &gid[0], &d), PH_OK,
               d.msg);
  for (int i = 0; i < half; i++)
    CHECK_STATUS(engine_add(e, BAD[i].n_prompt ? bad[i].prompt : NULL, bad[i].n_prompt, &bad[i].sp,
                            &bid[i], &d),
                 PH_OK, d.msg);
  CHECK_STATUS(engine_add(e, good[1].prompt, good[1].n_prompt, &good[1].sp, &gid[1], &d), PH_OK,
               d.msg);
  CHECK_STATUS(engine_release(e, gid[1], &d), PH_ERR_INVALID_ARGUMENT, d.msg); /* queued */
  run_stats rs;
  memset(&rs, 0, sizeof rs);
  ph_step_info si;
  checked_step(e, &si, &rs);
  CHECK_EQ_INT(si.n_finished, half);
  for (int i = 0; i < half; i++) check_refused(e, bid[i], &BAD[i]);
  /* a refused request is finished: removing it is a no-op, releasing it works */
  CHECK_STATUS(engine_remove(e, bid[0], &d), PH_OK, d.msg);
  CHECK_STATUS(engine_release(e, gid[1], &d), PH_ERR_INVALID_ARGUMENT, d.msg); /* running */
  CHECK_CONTAINS(d.msg, "has not finished");
  checked_step(e, &si, &rs);
  /* the rest while the good ones decode, with a third good one */
  for (int i = half; i < N_BAD; i++)
    CHECK_STATUS(engine_add(e, bad[i].prompt, bad[i].n_prompt, &bad[i].sp, &bid[i], &d), PH_OK,
                 d.msg);
  CHECK_STATUS(engine_add(e, good[2].prompt, good[2].n_prompt, &good[2].sp, &gid[2], &d), PH_OK,
               d.msg);
  checked_step(e, &si, &rs);
  for (int i = half; i < N_BAD; i++) check_refused(e, bid[i], &BAD[i]);
  drain(e, &rs);
  CHECK_EQ_INT(rs.bad_steps, 0);
  check_idle_pools(e);
  for (int i = 0; i < N_BAD; i++) {
    n = -1;
    CHECK(engine_tokens(e, bid[i], &n) != NULL && n == 0);
    CHECK_STATUS(engine_release(e, bid[i], &d), PH_OK, d.msg);
    CHECK_STATUS(engine_request_info_get(e, bid[i], &info, &d), PH_ERR_NOT_FOUND, d.msg);
    CHECK_STATUS(engine_release(e, bid[i], &d), PH_ERR_NOT_FOUND, d.msg);
  }
  outcome got[N_GOOD];
  for (int i = 0; i < N_GOOD; i++) {
    CHECK_STATUS(engine_request_info_get(e, gid[i], &info, &d), PH_OK, d.msg);
    /* polling hands out every token once */
    int64_t polled[16];
    CHECK_EQ_INT(engine_poll(e, gid[i], polled, 16), info.n_generated);
    CHECK_EQ_INT(engine_poll(e, gid[i], polled, 16), 0);
    take_outcome(e, gid[i], &got[i]);
    CHECK_EQ_INT(got[i].status, PH_OK);
    CHECK(got[i].finish == PH_FINISH_LENGTH || got[i].finish == PH_FINISH_STOP);
  }
  engine_free(e);
  int n_same = 0;
  dense_ref dr;
  dense_ref_open(&dr, golden_dir());
  for (int i = 0; i < N_GOOD; i++) {
    outcome alone;
    run_alone(&p, &good[i], &alone);
    char label[32];
    snprintf(label, sizeof label, "good request %d", i);
    const int same = same_as_alone(&got[i], &alone, V, label);
    CHECK(same);
    n_same += same;
    CHECK(dense_ref_check(&dr, &good[i], &got[i], label));
    outcome_free(&alone);
    outcome_free(&got[i]);
  }
  dense_ref_report(&dr, "the good requests");
  CHECK_EQ_INT(dr.n_requests, N_GOOD);
  dense_ref_close(&dr);
  printf("  %d bad requests refused with typed errors; %d/%d good ones bit-identical alone\n",
         N_BAD, n_same, N_GOOD);
  free(good);
  free(bad);
}

/* ---- 4. randomized schedule ----------------------------------------------------------------- */

#define RAND_MAX_REQ 600
/* Arrival steps per seed. Debug and sanitizer builds run the model tens of times slower: fewer
 * steps there (the release build runs RAND_SEEDS x 800 = 4,000+ steps). */
#if SANITIZED || !defined(__OPTIMIZE__)
#define RAND_ARRIVAL_STEPS 60
#else
#define RAND_ARRIVAL_STEPS 800
#endif
#define RAND_MAX_NEW    24
#define RAND_MAX_PROMPT 150 /* RAND_MIXED / RAND_TIGHT prompts: 1..150 tokens */

typedef enum rand_kind {
  RAND_TIGHT,   /* 11 pages, which the longest request fills alone; 6 requests a step */
  RAND_MIXED,   /* random budgets; a pool a little larger than the longest request needs */
  RAND_CONTEXT, /* max_context 128..192 and half the prompts within 24 tokens of it: requests end
                   at the context ("length" before max_new_tokens) */
} rand_kind;

/* The seeds test_randomized runs (docs/engine.md quotes this table): each preempts, two fill the
 * context, prefill chunks of 16, 32 and 64, and the batched run uses 2 kernel threads in two of
 * them (its references use the other count: results do not depend on the thread count,
 * docs/threading.md). */
static const struct {
  uint64_t seed;
  rand_kind kind;
  int n_threads;
  int64_t chunk; /* prefill_chunk (RAND_TIGHT: 64) */
} RAND_SEEDS[] = {
    {1, RAND_TIGHT, 1, 64}, {2, RAND_MIXED, 2, 16},   {3, RAND_CONTEXT, 2, 32},
    {4, RAND_MIXED, 1, 64}, {5, RAND_CONTEXT, 1, 16},
};
#define N_RAND_SEEDS ((int)(sizeof RAND_SEEDS / sizeof RAND_SEEDS[0]))

typedef struct rand_req {
  req_spec spec;
  uint64_t id;
  int removed;                     /* engine_remove called while it was unfinished */
  int64_t cb_tokens[RAND_MAX_NEW]; /* what the callback saw */
  int64_t n_cb;
  int n_cb_finish, cb_late; /* finish callbacks; tokens after the finish */
  ph_finish_reason cb_reason;
  outcome got;
} rand_req;

typedef struct rand_run {
  rand_req *reqs; /* [RAND_MAX_REQ]; request k added is reqs[k] */
  int n;
  uint64_t first_id; /* id of reqs[0]: ids are consecutive per engine */
} rand_run;

static void on_token(void *user, uint64_t id, int64_t token, ph_finish_reason reason) {
  rand_run *rr = user;
  if (id < rr->first_id || id >= rr->first_id + (uint64_t)rr->n) return;
  rand_req *q = &rr->reqs[id - rr->first_id];
  if (token >= 0) {
    if (q->n_cb < RAND_MAX_NEW) q->cb_tokens[q->n_cb] = token;
    q->n_cb++;
    q->cb_late += q->n_cb_finish > 0;
  } else {
    q->n_cb_finish++;
    q->cb_reason = reason;
  }
}

static void random_sampling(rng *r, sampling_params *sp) {
  *sp = greedy(1 + (int64_t)rng_below(r, RAND_MAX_NEW));
  if (rng_below(r, 10) >= 4) {
    static const int32_t ks[] = {0, 1, 5, 50};
    static const float ps[] = {1.0f, 0.9f, 0.5f};
    sp->temperature = rng_range(r, 0.3f, 1.5f);
    sp->top_k = ks[rng_below(r, 4)];
    sp->top_p = ps[rng_below(r, 3)];
    sp->min_p = rng_below(r, 4) == 0 ? 0.05f : 0.0f;
    sp->seed = rng_next(r);
  }
  if (rng_below(r, 5) == 0) {
    sp->n_stop_token_ids = 1 + (int32_t)rng_below(r, 3);
    for (int32_t i = 0; i < sp->n_stop_token_ids; i++)
      sp->stop_token_ids[i] = (int64_t)rng_below(r, 256);
  }
  sp->ignore_eos = (int)rng_below(r, 2);
}

static int is_stop_id(const sampling_params *sp, int64_t tok) {
  for (int32_t i = 0; i < sp->n_stop_token_ids; i++)
    if (sp->stop_token_ids[i] == tok) return 1;
  return 0;
}

/* Random traffic: an opening burst of max_batch long requests (max_prompt - 0..7 tokens, or
 * near_end: context - 1), which together need more pages than any pool here holds, so every run
 * preempts by construction; then for arrival_steps steps random arrivals (prompts 1..max_prompt
 * tokens; near_end: half of them within 24 tokens of the context instead) and removals in any
 * state; then steps until idle, every step checked (checked_step). With step_allocs, allocations
 * inside engine_step are counted into it (adds and removals are outside the counted region). */
static void random_traffic(engine *e, rng *r, rand_run *rr, int arrival_steps, int64_t max_prompt,
                           int near_end, run_stats *rs, long *step_allocs) {
  const ph_engine_params *p = engine_params_of(e);
  const int64_t V = engine_vocab(e), C = engine_max_context(e);
  if (max_prompt > C - 1) max_prompt = C - 1; /* a longer one is refused (tested elsewhere) */
  const int active_cap = 2 * p->max_batch_size + 3;
  diag d;
  ph_step_info si;
  memset(&si, 0, sizeof si);
  for (int a = 0; a < p->max_batch_size && rr->n < RAND_MAX_REQ; a++) {
    rand_req *q = &rr->reqs[rr->n];
    fill_prompt(r, &q->spec, near_end ? C - 1 : max_prompt - (int64_t)rng_below(r, 8), V);
    random_sampling(r, &q->spec.sp);
    const ph_status st = engine_add(e, q->spec.prompt, q->spec.n_prompt, &q->spec.sp, &q->id, &d);
    CHECK_STATUS(st, PH_OK, d.msg);
    if (st != PH_OK) break;
    if (rr->n == 0) rr->first_id = q->id;
    CHECK_EQ_INT(q->id, rr->first_id + (uint64_t)rr->n);
    rr->n++;
  }
  for (int k = 0; k < MAX_STEPS && (k < arrival_steps || engine_busy(e)); k++) {
    int active = si.n_running + si.n_waiting;
    const int arrivals = k >= arrival_steps || rng_below(r, 100) >= 15 ? 0
                         : rng_below(r, 20) == 0                       ? 3
                                                                       : 1;
    for (int a = 0; a < arrivals && active < active_cap && rr->n < RAND_MAX_REQ; a++, active++) {
      rand_req *q = &rr->reqs[rr->n];
      const int64_t n = near_end && rng_below(r, 2)
                            ? C - 1 - (int64_t)rng_below(r, 24)
                            : 1 + (int64_t)rng_below(r, (uint64_t)max_prompt);
      fill_prompt(r, &q->spec, n, V);
      random_sampling(r, &q->spec.sp);
      ph_status st = engine_add(e, q->spec.prompt, q->spec.n_prompt, &q->spec.sp, &q->id, &d);
      CHECK_STATUS(st, PH_OK, d.msg);
      if (st != PH_OK) break;
      if (rr->n == 0) rr->first_id = q->id;
      CHECK_EQ_INT(q->id, rr->first_id + (uint64_t)rr->n);
      rr->n++;
    }
    /* removals in any state: queued (maybe just added), waiting, running, or finished (no-op) */
    if (rr->n > 0 && rng_below(r, 100) < 4) {
      rand_req *q =
          &rr->reqs[rng_below(r, 5) == 0 ? (uint64_t)rr->n - 1 : rng_below(r, (uint64_t)rr->n)];
      ph_request_info info;
      CHECK_STATUS(engine_request_info_get(e, q->id, &info, &d), PH_OK, d.msg);
      CHECK_STATUS(engine_remove(e, q->id, &d), PH_OK, d.msg);
      if (info.finish == PH_FINISH_NONE) q->removed = 1;
    }
    if (step_allocs) {
      atomic_store(&alloc_count, 0);
      atomic_store(&alloc_counting, 1);
    }
    const ph_status st = checked_step(e, &si, rs);
    if (step_allocs) {
      atomic_store(&alloc_counting, 0);
      *step_allocs += atomic_load(&alloc_count);
    }
    if (st != PH_OK) break;
  }
  CHECK(!engine_busy(e));
}

/* What a seed's requests did, counted by rand_outcomes. */
typedef struct rand_counts {
  int64_t preemptions, removed, context_end, bad_finish, bad_cb, generated;
} rand_counts;

/* Takes every request's outcome out of e and checks it: finish reasons follow from the tokens
 * (only removed requests abort; "length" at max_new_tokens or at the context's end), and the
 * callback saw every token once, in order, then one finish. */
static void rand_outcomes(engine *e, rand_run *rr, const char *what, rand_counts *c) {
  const int64_t C = engine_max_context(e);
  memset(c, 0, sizeof *c);
  for (int i = 0; i < rr->n; i++) {
    rand_req *q = &rr->reqs[i];
    take_outcome(e, q->id, &q->got);
    const outcome *o = &q->got;
    const sampling_params *sp = &q->spec.sp;
    c->preemptions += o->n_preemptions;
    c->removed += o->finish == PH_FINISH_ABORTED;
    c->generated += o->n_generated;
    int ok = o->status == PH_OK && o->n_generated <= sp->max_new_tokens;
    for (int64_t j = 0; ok && j + 1 < o->n_generated; j++) ok = !is_stop_id(sp, o->tokens[j]);
    const int last_stops = o->n_generated > 0 && is_stop_id(sp, o->tokens[o->n_generated - 1]);
    const int at_end = q->spec.n_prompt + o->n_generated == C + 1; /* the last position ran */
    if (o->finish == PH_FINISH_ABORTED)
      ok = ok && q->removed && !(o->n_generated == sp->max_new_tokens || last_stops || at_end);
    else if (o->finish == PH_FINISH_STOP)
      ok = ok && last_stops;
    else
      ok = ok && o->finish == PH_FINISH_LENGTH && !last_stops &&
           (o->n_generated == sp->max_new_tokens || at_end);
    c->context_end += ok && o->finish == PH_FINISH_LENGTH && o->n_generated < sp->max_new_tokens;
    if (!ok && c->bad_finish++ == 0)
      printf("  %s request %d: finish %s after %lld of %lld tokens, prompt %lld (removed %d)\n",
             what, i, ph_finish_reason_name(o->finish), (long long)o->n_generated,
             (long long)sp->max_new_tokens, (long long)q->spec.n_prompt, q->removed);
    int cb_ok = q->n_cb == o->n_generated && q->n_cb_finish == 1 && q->cb_late == 0 &&
                q->cb_reason == o->finish;
    for (int64_t j = 0; cb_ok && j < o->n_generated; j++) cb_ok = q->cb_tokens[j] == o->tokens[j];
    c->bad_cb += !cb_ok;
  }
  CHECK_EQ_INT(c->bad_finish, 0);
  CHECK_EQ_INT(c->bad_cb, 0);
}

typedef struct rand_totals {
  int64_t steps, requests, removed, preemptions, context_end, identical, dense, seeds_preempting;
  double worst_ms, worst_dense;
} rand_totals;

static ph_engine_params rand_params(rng *r, rand_kind kind, int n_threads, int64_t chunk) {
  /* drawn one per statement: argument order is unspecified */
  /* at least two chunks a step: with one, a prompt chunk never fits beside a decoding request,
   * so requests would run one at a time and could never preempt each other */
  const int64_t budget = chunk * (2 + (int64_t)rng_below(r, 3));
  const int32_t batch = 2 + (int32_t)rng_below(r, 7);
  const int64_t context = kind == RAND_CONTEXT ? 128 + 16 * (int64_t)rng_below(r, 5) : 512;
  /* the most pages one request can need (sched_add refuses more than the pool): RAND_MIXED's
   * 150 + 24 tokens, or the whole context */
  const int64_t most = kind == RAND_CONTEXT ? context : RAND_MAX_PROMPT + RAND_MAX_NEW;
  const int32_t pages = (int32_t)((most + 15) / 16) + 1 + (int32_t)rng_below(r, (uint64_t)batch);
  ph_engine_params p = kind == RAND_TIGHT ? small_params(6, 128, 64, 12)
                                          : small_params(batch, budget, chunk, pages + 1);
  p.max_context = context;
  p.n_threads = n_threads;
  return p;
}

/* One seed: random traffic, then every request against its run alone (one after another in a
 * fresh engine with the same params but the other thread count) and against the dense session. */
static void random_run(int which, int arrival_steps, dense_ref *dr, rand_totals *tot) {
  const uint64_t seed = RAND_SEEDS[which].seed;
  const rand_kind kind = RAND_SEEDS[which].kind;
  rng r = rng_seed(seed);
  const ph_engine_params p =
      rand_params(&r, kind, RAND_SEEDS[which].n_threads, RAND_SEEDS[which].chunk);
  engine *e = open_engine(&p);
  if (!e) return;
  const int64_t V = engine_vocab(e);
  rand_run rr = {calloc(RAND_MAX_REQ, sizeof(rand_req)), 0, 0};
  engine_set_callback(e, on_token, &rr);
  run_stats rs;
  memset(&rs, 0, sizeof rs);
  random_traffic(e, &r, &rr, arrival_steps, RAND_MAX_PROMPT, kind == RAND_CONTEXT, &rs, NULL);
  char what[32];
  snprintf(what, sizeof what, "seed %llu", (unsigned long long)seed);
  if (rs.bad_steps)
    printf("  %s: pools inconsistent at %lld steps, first: %s\n", what, (long long)rs.bad_steps,
           rs.first_bad);
  CHECK_EQ_INT(rs.bad_steps, 0);
  check_idle_pools(e);
  rand_counts c;
  rand_outcomes(e, &rr, what, &c);
  engine_free(e);

  ph_engine_params pa = p;
  pa.n_threads = 3 - p.n_threads; /* 1 <-> 2 */
  engine *alone_e = open_engine(&pa);
  int identical = 0;
  const int64_t dense_before = dr->n_requests, bad_before = dr->n_bad;
  if (alone_e) {
    for (int i = 0; i < rr.n; i++) {
      outcome alone;
      run_alone_in(alone_e, &rr.reqs[i].spec, &alone);
      char label[64];
      snprintf(label, sizeof label, "%s request %d", what, i);
      identical += same_as_alone(&rr.reqs[i].got, &alone, V, label);
      dense_ref_check(dr, &rr.reqs[i].spec, &rr.reqs[i].got, label);
      outcome_free(&alone);
    }
    check_idle_pools(alone_e);
    engine_free(alone_e);
  }
  const int64_t dense = dr->n_requests - dense_before;
  int with_tokens = 0;
  for (int i = 0; i < rr.n; i++) with_tokens += rr.reqs[i].got.n_generated > 0;
  CHECK_EQ_INT(identical, rr.n);
  CHECK_EQ_INT(dense, with_tokens);
  CHECK_EQ_INT(dr->n_bad - bad_before, 0);
  CHECK(c.preemptions >= 1); /* every seed preempts (docs/engine.md) */
  if (kind == RAND_CONTEXT) CHECK(c.context_end >= 1);
  printf(
      "  %s: %s, max_batch %d, max_tokens %lld, chunk %lld, %d pages, context %lld, %d "
      "thread(s): %lld steps, %d requests (%lld removed, %lld ended at the context), %lld "
      "preemptions, worst step %.2f ms; %d/%d identical alone (%d thread(s)), %lld/%d vs dense\n",
      what,
      kind == RAND_TIGHT     ? "tight"
      : kind == RAND_CONTEXT ? "context"
                             : "mixed",
      p.max_batch_size, (long long)p.max_scheduled_tokens, (long long)p.prefill_chunk,
      p.num_blocks - 1, (long long)p.max_context, p.n_threads, (long long)rs.steps, rr.n,
      (long long)c.removed, (long long)c.context_end, (long long)c.preemptions, rs.worst_ms,
      identical, rr.n, pa.n_threads, (long long)dense, with_tokens);
  tot->steps += rs.steps;
  tot->requests += rr.n;
  tot->removed += c.removed;
  tot->preemptions += c.preemptions;
  tot->context_end += c.context_end;
  tot->identical += identical;
  tot->dense += dense;
  tot->seeds_preempting += c.preemptions >= 1;
  if (rs.worst_ms > tot->worst_ms) tot->worst_ms = rs.worst_ms;
  for (int i = 0; i < rr.n; i++) outcome_free(&rr.reqs[i].got);
  free(rr.reqs);
}

static void test_randomized(void) {
  rand_totals tot;
  memset(&tot, 0, sizeof tot);
  dense_ref dr;
  dense_ref_open(&dr, golden_dir());
  const double t0 = now_ms();
  for (int i = 0; i < N_RAND_SEEDS; i++) random_run(i, RAND_ARRIVAL_STEPS, &dr, &tot);
  printf("  total: %d seeds, %lld steps, %lld requests (%lld removed, %lld ended at the context), "
         "%lld preemptions, worst step %.2f ms, %.1f s with the references\n",
         N_RAND_SEEDS, (long long)tot.steps, (long long)tot.requests, (long long)tot.removed,
         (long long)tot.context_end, (long long)tot.preemptions, tot.worst_ms,
         1e-3 * (now_ms() - t0));
  dense_ref_report(&dr, "every request");
  /* the counts docs/engine.md and docs/testing.md quote */
  CHECK(tot.steps >= (int64_t)N_RAND_SEEDS * RAND_ARRIVAL_STEPS);
  CHECK_EQ_INT(tot.seeds_preempting, N_RAND_SEEDS);
  CHECK(tot.removed >= 1);
  CHECK(tot.context_end >= 2);
  CHECK_EQ_INT(tot.identical, tot.requests);
  CHECK(tot.dense >= tot.requests - tot.removed);
  dense_ref_close(&dr);
}

/* ---- the context's end, and removal from a callback ------------------------------------------ */

/* A request whose max_new_tokens reaches past the context is clipped, not refused: it finishes
 * "length" when the context is full (positions stop at max_context - 1, and the token sampled
 * from the last position is the last one), beside others and bit-identical alone. */
static void test_context_full(void) {
  const ph_engine_params p = small_params(3, 128, 64, 70); /* 69 pages: two full contexts */
  engine *e = open_engine(&p);
  if (!e) return;
  const int64_t V = engine_vocab(e), C = engine_max_context(e);
  CHECK_EQ_INT(C, 512);
  req_spec *q = calloc(3, sizeof *q);
  rng r = rng_seed(512);
  fill_prompt(&r, &q[0], C - 12, V); /* 12 positions left: 13 tokens */
  q[0].sp = greedy(30);
  fill_prompt(&r, &q[1], C - 1, V); /* 1 position left: 2 tokens */
  q[1].sp = sampled(5, 1.0f, 0, 1.0f, 3);
  fill_prompt(&r, &q[2], 9, V);
  q[2].sp = greedy(6);
  static const int64_t expect[3] = {13, 2, 6};
  uint64_t ids[3];
  diag d;
  for (int i = 0; i < 3; i++)
    CHECK_STATUS(engine_add(e, q[i].prompt, q[i].n_prompt, &q[i].sp, &ids[i], &d), PH_OK, d.msg);
  run_stats rs;
  memset(&rs, 0, sizeof rs);
  drain(e, &rs);
  CHECK_EQ_INT(rs.bad_steps, 0);
  check_idle_pools(e);
  outcome got[3];
  for (int i = 0; i < 3; i++) {
    take_outcome(e, ids[i], &got[i]);
    CHECK_EQ_INT(got[i].finish, PH_FINISH_LENGTH);
    CHECK_EQ_INT(got[i].n_generated, expect[i]);
  }
  engine_free(e);
  dense_ref dr;
  dense_ref_open(&dr, golden_dir());
  for (int i = 0; i < 3; i++) {
    outcome alone;
    run_alone(&p, &q[i], &alone);
    const char *label = i == 2 ? "short prompt" : "prompt at the context's end";
    CHECK(same_as_alone(&got[i], &alone, V, label));
    CHECK(dense_ref_check(&dr, &q[i], &got[i], label));
    outcome_free(&alone);
    outcome_free(&got[i]);
  }
  dense_ref_report(&dr, "the 3 requests");
  CHECK_EQ_INT(dr.n_requests, 3);
  dense_ref_close(&dr);
  free(q);
}

typedef struct remover {
  engine *e;
  uint64_t id;
  int calls;
} remover;

static void remove_on_token(void *user, uint64_t id, int64_t token, ph_finish_reason reason) {
  remover *m = user;
  (void)reason;
  if (id != m->id || token < 0) return;
  diag d;
  m->calls++;
  CHECK_STATUS(engine_remove(m->e, id, &d), PH_OK, d.msg);
}

/* The callback removes the request on its last token: the step still finishes it "length", and
 * once released, the next steps must not touch it (the removal was queued while it ran). */
static void test_remove_from_callback(void) {
  const ph_engine_params p = small_params(2, 64, 32, 10);
  engine *e = open_engine(&p);
  if (!e) return;
  req_spec *q = calloc(2, sizeof *q);
  rng r = rng_seed(11);
  fill_prompt(&r, &q[0], 7, engine_vocab(e));
  q[0].sp = greedy(1);
  fill_prompt(&r, &q[1], 20, engine_vocab(e));
  q[1].sp = greedy(5);
  remover m = {e, 0, 0};
  diag d;
  uint64_t other = 0;
  CHECK_STATUS(engine_add(e, q[0].prompt, q[0].n_prompt, &q[0].sp, &m.id, &d), PH_OK, d.msg);
  CHECK_STATUS(engine_add(e, q[1].prompt, q[1].n_prompt, &q[1].sp, &other, &d), PH_OK, d.msg);
  engine_set_callback(e, remove_on_token, &m);
  run_stats rs;
  memset(&rs, 0, sizeof rs);
  ph_step_info si;
  checked_step(e, &si, &rs);
  CHECK_EQ_INT(m.calls, 1);
  ph_request_info info;
  CHECK_STATUS(engine_request_info_get(e, m.id, &info, &d), PH_OK, d.msg);
  CHECK_EQ_INT(info.finish, PH_FINISH_LENGTH);
  CHECK_STATUS(engine_release(e, m.id, &d), PH_OK, d.msg);
  /* reuse the freed memory with requests of the same size, then step */
  uint64_t more[4];
  for (int i = 0; i < 4; i++)
    CHECK_STATUS(engine_add(e, q[0].prompt, q[0].n_prompt, &q[1].sp, &more[i], &d), PH_OK, d.msg);
  drain(e, &rs);
  CHECK_EQ_INT(rs.bad_steps, 0);
  check_idle_pools(e);
  CHECK_STATUS(engine_request_info_get(e, other, &info, &d), PH_OK, d.msg);
  CHECK_EQ_INT(info.finish, PH_FINISH_LENGTH);
  for (int i = 0; i < 4; i++) {
    CHECK_STATUS(engine_request_info_get(e, more[i], &info, &d), PH_OK, d.msg);
    CHECK_EQ_INT(info.finish, PH_FINISH_LENGTH);
    CHECK_EQ_INT(info.n_generated, 5);
  }
  engine_free(e);
  free(q);
}

/* ---- 5. no allocation in engine_step after warm-up ---------------------------------------- */

#define N_WORK 6

/* Adds the workload (outside the counted region) and steps it to the end, counting allocations
 * inside engine_step only. */
/* The warm-up's workload: N_WORK requests of unequal prompts (around the page and chunk
 * sizes), greedy and sampled, prompts drawn from seed. Caller frees. */
static req_spec *work_specs(int64_t V, uint64_t seed) {
  static const int64_t lens[N_WORK] = {5, 33, 64, 90, 17, 120};
  static const int64_t news[N_WORK] = {8, 12, 6, 10, 16, 7};
  req_spec *q = calloc(N_WORK, sizeof *q);
  rng r = rng_seed(seed);
  for (int i = 0; q && i < N_WORK; i++) {
    fill_prompt(&r, &q[i], lens[i], V);
    q[i].sp = i % 2 ? sampled(news[i], 0.8f, 40, 0.9f, 77 + (uint64_t)i) : greedy(news[i]);
  }
  return q;
}

static void work_round(engine *e, const req_spec *q, int count, outcome *got, long *allocs,
                       long *allocs_admit, int64_t *steps) {
  diag d;
  uint64_t ids[N_WORK];
  for (int i = 0; i < N_WORK; i++)
    CHECK_STATUS(engine_add(e, q[i].prompt, q[i].n_prompt, &q[i].sp, &ids[i], &d), PH_OK, d.msg);
  *allocs = *allocs_admit = 0;
  *steps = 0;
  ph_step_info si;
  for (int k = 0; k < MAX_STEPS && engine_busy(e); k++) {
    atomic_store(&alloc_count, 0);
    atomic_store(&alloc_counting, count);
    const ph_status st = engine_step(e, &si, &d);
    atomic_store(&alloc_counting, 0);
    const long n = atomic_load(&alloc_count);
    CHECK_STATUS(st, PH_OK, d.msg);
    if (st != PH_OK) break;
    *allocs += n;
    if (engine_step_admitted(e) > 0) *allocs_admit += n;
    (*steps)++;
  }
  for (int i = 0; i < N_WORK; i++) take_outcome(e, ids[i], &got[i]);
}

/* Warm-up: the N_WORK workload once (a burst of N_WORK adds, preemptions) and one queued
 * removal. Then, counted: the same workload again (identical outcomes), and a different one —
 * random traffic with longer prompts, arrivals while others decode, removals in any state and
 * other sampling parameters — whose requests are checked against the dense session. A step may
 * allocate only to grow the queues' copy buffers past the largest burst seen (docs/engine.md);
 * the traffic's bursts (at most 3 adds, 1 removal a step) stay within the warm-up's. */
static void test_no_alloc_in_step(void) {
  const ph_engine_params p = small_params(4, 96, 32, 14); /* 13 pages: preempts */
  engine *e = open_engine(&p);
  if (!e) return;
  const int64_t V = engine_vocab(e);
  req_spec *q = work_specs(V, 5);
  const int counter = alloc_counter_ready();
  CHECK(counter);
  outcome warm[N_WORK], again[N_WORK];
  long allocs = 0, allocs_admit = 0;
  int64_t steps = 0;
  executor *x = paged_session_executor(engine_session(e));
  work_round(e, q, 0, warm, &allocs, &allocs_admit, &steps);
  {
    diag d;
    uint64_t id = 0;
    ph_step_info si;
    CHECK_STATUS(engine_add(e, q[0].prompt, q[0].n_prompt, &q[0].sp, &id, &d), PH_OK, d.msg);
    CHECK_STATUS(engine_remove(e, id, &d), PH_OK, d.msg);
    CHECK_STATUS(engine_step(e, &si, &d), PH_OK, d.msg);
    CHECK_STATUS(engine_release(e, id, &d), PH_OK, d.msg);
  }
  const size_t exec_before = exec_alloc_count(x);
  work_round(e, q, 1, again, &allocs, &allocs_admit, &steps);
  check_idle_pools(e);
  int64_t preempted = 0;
  for (int i = 0; i < N_WORK; i++) {
    preempted += again[i].n_preemptions;
    CHECK(same_as_alone(&again[i], &warm[i], V, "the second round"));
    outcome_free(&warm[i]);
    outcome_free(&again[i]);
  }
  CHECK(preempted >= 1);

  /* the new workload */
  rand_run rr = {calloc(RAND_MAX_REQ, sizeof(rand_req)), 0, 0};
  engine_set_callback(e, on_token, &rr);
  run_stats rs;
  memset(&rs, 0, sizeof rs);
  long traffic_allocs = 0;
  rng tr = rng_seed(4321);
  random_traffic(e, &tr, &rr, 150, RAND_MAX_PROMPT, 0, &rs, &traffic_allocs);
  CHECK_EQ_INT(rs.bad_steps, 0);
  check_idle_pools(e);
  CHECK_EQ_INT(exec_alloc_count(x), exec_before);
  rand_counts c;
  rand_outcomes(e, &rr, "new workload", &c);
  dense_ref dr;
  dense_ref_open(&dr, golden_dir());
  int64_t longest = 0;
  for (int i = 0; i < rr.n; i++) {
    char label[48];
    snprintf(label, sizeof label, "new workload request %d", i);
    CHECK(dense_ref_check(&dr, &rr.reqs[i].spec, &rr.reqs[i].got, label));
    if (rr.reqs[i].spec.n_prompt > longest) longest = rr.reqs[i].spec.n_prompt;
    outcome_free(&rr.reqs[i].got);
  }
  dense_ref_report(&dr, "the new workload");
  dense_ref_close(&dr);
  free(rr.reqs);
  /* the traffic is a different workload: longer prompts than the warm-up's, preempting */
  CHECK(rr.n >= 10 && longest > q[N_WORK - 1].n_prompt && c.preemptions >= 1);
  printf("  counted by %s: %ld allocations in %lld engine_step calls of the warm-up's workload "
         "(%ld in steps that admitted requests, %lld preemptions); %ld in %lld steps of a new "
         "workload (%d requests, prompts up to %lld, %lld removed, %lld preemptions)\n",
         ALLOC_COUNTER, allocs, (long long)steps, allocs_admit, (long long)preempted,
         traffic_allocs, (long long)rs.steps, rr.n, (long long)longest, (long long)c.removed,
         (long long)c.preemptions);
  CHECK_EQ_INT(allocs, 0);
  CHECK_EQ_INT(traffic_allocs, 0);
  engine_free(e);
  free(q);
}

/* The same for speculative steps: drafts (n-gram and replay), verify chunks, the state commit
 * (replay into the inactive bank, publish) allocate nothing after the warm-up either; the second
 * round is bit-identical to the first. */
static void no_alloc_speculative_in(const char *dir, ph_draft_method even, const char *what) {
  ph_engine_params p = small_params(4, 96, 32, 14);
  p.state_update_capacity = 8;
  engine *e = NULL;
  diag d;
  CHECK_STATUS(engine_create(dir, &p, &e, &d), PH_OK, d.msg);
  if (!e) return;
  engine_set_capture_logits(e, 1);
  const int64_t V = engine_vocab(e);
  static const int64_t cont[16] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16};
  req_spec *q = work_specs(V, 6);
  for (int i = 0; i < N_WORK && q; i++) {
    q[i].sp.speculative.method = i % 3 ? even : PH_DRAFT_REPLAY;
    q[i].sp.speculative.num_draft_tokens = 1 + i;
    q[i].sp.speculative.replay_tokens = cont;
    q[i].sp.speculative.n_replay_tokens = 16;
  }
  CHECK(alloc_counter_ready());
  outcome warm[N_WORK], again[N_WORK];
  long allocs = 0, allocs_admit = 0;
  int64_t steps = 0;
  work_round(e, q, 0, warm, &allocs, &allocs_admit, &steps);
  work_round(e, q, 1, again, &allocs, &allocs_admit, &steps);
  check_idle_pools(e);
  int64_t drafted = 0;
  for (int i = 0; i < N_WORK; i++) {
    drafted += again[i].n_drafted;
    CHECK(same_as_alone(&again[i], &warm[i], V, what));
    outcome_free(&warm[i]);
    outcome_free(&again[i]);
  }
  printf("  %s: %ld allocations in %lld speculative engine_step calls (%lld drafts verified)\n",
         what, allocs, (long long)steps, (long long)drafted);
  CHECK(drafted > 0);
  CHECK_EQ_INT(allocs, 0);
  engine_free(e);
  free(q);
}

/* The same for speculative steps: drafts (n-gram, replay, the MTP head's catch-up and chain),
 * verify chunks, the state commit (replay into the inactive bank, publish) allocate nothing
 * after the warm-up either; the second round is bit-identical to the first. */
static void test_no_alloc_speculative(void) {
  no_alloc_speculative_in(golden_dir(), PH_DRAFT_NGRAM, "n-gram and replay");
  static char dir[1024];
  snprintf(dir, sizeof dir, "%s/tiny-mtp-alloc", check_env("PH_TMP_DIR"));
  mkdir(check_env("PH_TMP_DIR"), 0755);
  tiny_params tp = tiny_params_default();
  tp.mtp_layers = 1;
  diag d;
  CHECK_STATUS(tiny_write(dir, &tp, &d), PH_OK, d.msg);
  no_alloc_speculative_in(dir, PH_DRAFT_MTP, "MTP head and replay");
}

/* ---- 6. non-finite logits end that request only ----------------------------------------- */

#define POISON 7 /* the token whose embedding row gets a NaN */

/* A copy of the golden checkpoint in PH_TMP_DIR whose embedding row POISON holds a NaN: every
 * position from that token on computes NaN, every other sequence stays finite. */
static const char *poisoned_checkpoint(char *dir, size_t dir_n) {
  diag d;
  char src[1200], dst[1200];
  snprintf(dir, dir_n, "%s/poisoned-embedding", check_env("PH_TMP_DIR"));
  CHECK_STATUS(path_mkdirs(dir, &d), PH_OK, d.msg);
  static const char *const files[2] = {"config.json", "model.safetensors"};
  int ok = 1;
  for (int f = 0; f < 2 && ok; f++) {
    char *bytes = NULL;
    size_t n = 0;
    snprintf(src, sizeof src, "%s/%s", golden_dir(), files[f]);
    snprintf(dst, sizeof dst, "%s/%s", dir, files[f]);
    CHECK_STATUS(file_read_all(src, 1 << 24, &bytes, &n, &d), PH_OK, d.msg);
    if (!bytes) return NULL;
    if (f == 1) { /* safetensors: u64 header length, JSON header, data */
      uint64_t hn = 0;
      memcpy(&hn, bytes, sizeof hn);
      json_error_t err;
      json_t *h = n > 8 + hn ? json_loadb(bytes + 8, (size_t)hn, 0, &err) : NULL;
      const json_t *off =
          json_object_get(json_object_get(h, "model.embed_tokens.weight"), "data_offsets");
      const size_t at = (size_t)(8 + hn + (uint64_t)json_integer_value(json_array_get(off, 0))) +
                        ((size_t)POISON * 64 + 5) * sizeof(float);
      ok = off && at + sizeof(float) <= n;
      CHECK(ok);
      const float nan = NAN;
      if (ok) memcpy(bytes + at, &nan, sizeof nan);
      json_decref(h);
    }
    if (ok) CHECK_STATUS(file_write_all(dst, bytes, n, &d), PH_OK, d.msg);
    free(bytes);
  }
  return ok ? dir : NULL;
}

/* Requests with the poisoned token in their prompt end with PH_ERR_NON_FINITE at their first
 * sample, one that generates it ends when that token's logits come; the others in the same
 * batches give their tokens and logits bit for bit as on the clean checkpoint alone. */
static void test_nonfinite_logits(void) {
  char dir[1024];
  if (!poisoned_checkpoint(dir, sizeof dir)) return;
  const ph_engine_params p = small_params(8, 128, 64, 40);
  engine *e = NULL;
  diag d;
  CHECK_STATUS(engine_create(dir, &p, &e, &d), PH_OK, d.msg);
  if (!e) return;
  engine_set_capture_logits(e, 1);
  enum { N = 8 };
  const int64_t V = engine_vocab(e);
  static const int64_t lens[N] = {12, 30, 9, 70, 17, 5, 40, 23};
  static const int64_t poison_at[N] = {0, 29, -1, 35, -1, -1, 8, -1}; /* -1: none */
  req_spec *q = calloc(N, sizeof *q);
  rng r = rng_seed(1234);
  uint64_t ids[N];
  for (int i = 0; i < N; i++) {
    fill_prompt(&r, &q[i], lens[i], V);
    for (int64_t j = 0; j < q[i].n_prompt; j++)
      if (q[i].prompt[j] == POISON) q[i].prompt[j] = POISON + 1;
    if (poison_at[i] >= 0) q[i].prompt[poison_at[i]] = POISON;
    q[i].sp = i % 2 ? sampled(10, 0.9f, 0, 1.0f, 50 + (uint64_t)i) : greedy(10);
    CHECK_STATUS(engine_add(e, q[i].prompt, q[i].n_prompt, &q[i].sp, &ids[i], &d), PH_OK, d.msg);
  }
  run_stats rs;
  memset(&rs, 0, sizeof rs);
  drain(e, &rs);
  CHECK_EQ_INT(rs.bad_steps, 0);
  check_idle_pools(e);
  int n_errors = 0, n_same = 0;
  dense_ref dr; /* the clean checkpoint: rows before the poisoned token runs are clean ones */
  dense_ref_open(&dr, golden_dir());
  for (int i = 0; i < N; i++) {
    ph_request_info info;
    CHECK_STATUS(engine_request_info_get(e, ids[i], &info, &d), PH_OK, d.msg);
    outcome got, alone;
    take_outcome(e, ids[i], &got);
    run_alone(&p, &q[i], &alone); /* the clean checkpoint */
    /* where the poisoned token first runs: in the prompt, or as a generated token (the last
     * generated one is never run) */
    int64_t gen_err = -1; /* the generated token whose logits are NaN */
    if (poison_at[i] >= 0) gen_err = 0;
    for (int64_t j = 0; gen_err < 0 && j + 1 < alone.n_generated; j++)
      if (alone.tokens[j] == POISON) gen_err = j + 1;
    char label[32];
    snprintf(label, sizeof label, "request %d", i);
    if (gen_err < 0) {
      const int same = same_as_alone(&got, &alone, V, label);
      CHECK(same);
      CHECK_EQ_INT(info.status, PH_OK);
      n_same += same;
    } else {
      n_errors++;
      CHECK_EQ_INT(got.finish, PH_FINISH_ERROR);
      CHECK_STATUS(got.status, PH_ERR_NON_FINITE, info.message);
      CHECK_EQ_INT(got.n_generated, gen_err);
      char want[96];
      snprintf(want, sizeof want, "logits for generated token %lld (position %lld,",
               (long long)gen_err, (long long)(q[i].n_prompt + gen_err - 1));
      CHECK_CONTAINS(info.message, want);
      CHECK_CONTAINS(info.message, "are not finite: logits[");
      for (int64_t j = 0; j < got.n_generated && j < alone.n_generated; j++)
        CHECK_EQ_INT(got.tokens[j], alone.tokens[j]);
    }
    CHECK(dense_ref_check(&dr, &q[i], &got, label));
    outcome_free(&got);
    outcome_free(&alone);
  }
  printf("  %d requests ended with PH_ERR_NON_FINITE, %d bit-identical to the clean model\n",
         n_errors, n_same);
  dense_ref_report(&dr, "the tokens before any NaN");
  dense_ref_close(&dr);
  CHECK(n_errors >= 4 && n_same >= 1);
  engine_free(e);
  free(q);
}

/* ---- 7. cost per request: no scans of every request, a queued request costs its tokens ---- */

#define N_MANY 8192

/* Counts the work (request records visited by the engine's table and queues and by the
 * scheduler: engine_work) and the bytes engine_add allocates, for many small requests queued
 * at once, some removed while queued, released in an order unlike their ids. Linear work has a
 * bound per request and per step; the scans this replaced (release searched and memmoved the
 * whole table, every step checked the whole waiting queue) cost ~N^2/2 = 33 M visits here. */
static void test_cost_per_request(void) {
  const ph_engine_params p = small_params(16, 256, 64, 64);
  engine *e = open_engine(&p);
  if (!e) return;
  engine_set_capture_logits(e, 0); /* the bytes counted are the requests' own */
  diag d;
  const int64_t V = engine_vocab(e);
  uint64_t *ids = calloc(N_MANY, sizeof *ids);
  rng r = rng_seed(404);
  const uint64_t work0 = engine_work(e);
  atomic_store(&alloc_bytes, 0);
  atomic_store(&alloc_counting, 1);
  for (int i = 0; i < N_MANY; i++) {
    const int64_t prompt[2] = {(int64_t)rng_below(&r, (uint64_t)V),
                               (int64_t)rng_below(&r, (uint64_t)V)};
    const sampling_params sp = greedy(1 + i % 3);
    CHECK_STATUS(engine_add(e, prompt, 1 + i % 2, &sp, &ids[i], &d), PH_OK, d.msg);
  }
  atomic_store(&alloc_counting, 0);
  const long per_request = atomic_load(&alloc_bytes) / N_MANY;
  for (int i = 0; i < N_MANY; i += 5) CHECK_STATUS(engine_remove(e, ids[i], &d), PH_OK, d.msg);
  run_stats rs;
  memset(&rs, 0, sizeof rs);
  drain(e, &rs);
  CHECK_EQ_INT(rs.bad_steps, 0);
  check_idle_pools(e);
  /* release odd positions first, then even ones backwards */
  for (int i = 1; i < N_MANY; i += 2) CHECK_STATUS(engine_release(e, ids[i], &d), PH_OK, d.msg);
  for (int i = N_MANY - 2 + N_MANY % 2; i >= 0; i -= 2)
    CHECK_STATUS(engine_release(e, ids[i], &d), PH_OK, d.msg);
  const uint64_t work = engine_work(e) - work0;
  /* per request: a few probes to add, remove, release, look up (hash map at most half full),
   * amortized rehashing; per step: the running requests and the head of the waiting queue */
  const uint64_t bound = 32u * N_MANY + 4u * (uint64_t)rs.steps * (uint64_t)p.max_batch_size;
  printf("  %d requests, %lld steps: %llu records visited (bound %llu); engine_add allocated "
         "%ld bytes per request\n",
         N_MANY, (long long)rs.steps, (unsigned long long)work, (unsigned long long)bound,
         per_request);
  CHECK(work <= bound);
  CHECK(alloc_counter_ready());
  /* the record (~450 bytes), 2-4 tokens, a block id, the table and inbox growth */
  CHECK(per_request <= 640);
  /* a prompt the context cannot hold is refused without a copy of it */
  enum { LONG = 4096 }; /* 8 x the context of 512 */
  int64_t *big = calloc(LONG, sizeof *big);
  uint64_t id = 0;
  const sampling_params sp = greedy(1000000);
  atomic_store(&alloc_bytes, 0);
  atomic_store(&alloc_counting, 1);
  CHECK_STATUS(engine_add(e, big, LONG, &sp, &id, &d), PH_OK, d.msg);
  atomic_store(&alloc_counting, 0);
  printf("  a refused %d-token prompt: %ld bytes\n", LONG, atomic_load(&alloc_bytes));
  CHECK(atomic_load(&alloc_bytes) < 2048);
  free(big);
  ph_step_info si;
  CHECK_STATUS(engine_step(e, &si, &d), PH_OK, d.msg);
  ph_request_info info;
  CHECK_STATUS(engine_request_info_get(e, id, &info, &d), PH_OK, d.msg);
  CHECK_EQ_INT(info.finish, PH_FINISH_ERROR);
  CHECK_STATUS(info.status, PH_ERR_LIMIT, info.message);
  CHECK_CONTAINS(info.message, "leaves no room in the context of 512");
  int64_t n = -1;
  CHECK(engine_tokens(e, id, &n) != NULL && n == 0);
  engine_free(e);
  free(ids);
}

/* ---- 8. golden rows: prompts that are prefixes of the golden sequences -----------------------
 * The golden references (tests/data/golden: float64, from an implementation written
 * independently of ours) hold the logits of every position of each sequence run alone from empty
 * state. A request whose prompt is a sequence's first k tokens must give, for its first
 * generated token, row k - 1. Every prefix of every golden sequence runs at once (the f32 set:
 * 7, 70 and 1 tokens; the bf16 VLM set: 5, 130 and 33) at prefill chunks 16, 32 and 64 (a prompt
 * spans up to 9 chunks), in a page pool small enough to preempt; each request generates
 * GP_NEW tokens, all of them checked against the dense session too. Bound: GOLDEN_F32_TOL of the
 * sequence's reference scale (tests/check.h), as tests/test_golden.c and test_paged.c use. */

#define GP_MAX_SEQ 3
#define GP_MAX_TOK 256
#define GP_NEW     4
/* Debug and sanitizer builds run the model tens of times slower: there only the prefixes at and
 * around chunk boundaries run (k <= 2, k = the sequence, k within one token of a multiple of the
 * chunk), about a fifth of them. */
#if SANITIZED || !defined(__OPTIMIZE__)
#define GP_ALL_PREFIXES 0
#else
#define GP_ALL_PREFIXES 1
#endif

static int gp_prefix_runs(int64_t k, int64_t len, int64_t chunk) {
  const int64_t m = k % chunk;
  return GP_ALL_PREFIXES || k <= 2 || k == len || m <= 1 || m == chunk - 1;
}

typedef struct golden_set {
  int n_seq;
  int64_t len[GP_MAX_SEQ];
  int64_t tokens[GP_MAX_SEQ][GP_MAX_TOK];
  const float *logits[GP_MAX_SEQ]; /* [len, V] in ref */
  double scale[GP_MAX_SEQ];        /* max |logit| of the sequence */
  st_set *ref;
} golden_set;

static int golden_load(const char *set, int64_t V, golden_set *g) {
  memset(g, 0, sizeof *g);
  char path[1024];
  check_data(path, sizeof path, "golden/%s/manifest.json", set);
  json_error_t je;
  json_t *man = json_load_file(path, 0, &je);
  if (!check_report(man != NULL, __FILE__, __LINE__, "manifest.json parses")) {
    fprintf(stderr, "       %s:%d: %s\n", path, je.line, je.text);
    return 0;
  }
  check_data(path, sizeof path, "golden/%s/reference.safetensors", set);
  diag d;
  CHECK_STATUS(st_open_file(path, &g->ref, &d), PH_OK, d.msg);
  const json_t *seqs = json_object_get(man, "sequences");
  g->n_seq = (int)json_array_size(seqs);
  int ok = g->ref != NULL;
  if (!check_report(g->n_seq >= 1 && g->n_seq <= GP_MAX_SEQ, __FILE__, __LINE__,
                    "1 <= golden sequences <= GP_MAX_SEQ")) {
    fprintf(stderr, "       %s: %d sequences\n", set, g->n_seq);
    ok = 0;
  }
  for (int s = 0; ok && s < g->n_seq; s++) {
    const json_t *t = json_object_get(json_array_get(seqs, (size_t)s), "tokens");
    g->len[s] = (int64_t)json_array_size(t);
    ok = CHECK(g->len[s] >= 1 && g->len[s] <= GP_MAX_TOK);
    for (int64_t k = 0; ok && k < g->len[s]; k++)
      g->tokens[s][k] = json_integer_value(json_array_get(t, (size_t)k));
    char name[32];
    snprintf(name, sizeof name, "seq%d.logits", s);
    const st_tensor *rt = ok ? st_find(g->ref, name) : NULL;
    ok = ok &&
         check_report(rt && rt->dtype == PH_DTYPE_F32 && shape_numel(&rt->shape) == g->len[s] * V,
                      __FILE__, __LINE__, "reference logits present, f32 [T, V]");
    if (!ok) break;
    g->logits[s] = (const float *)rt->data;
    for (int64_t k = 0; k < g->len[s] * V; k++)
      if (fabs(g->logits[s][k]) > g->scale[s]) g->scale[s] = fabs(g->logits[s][k]);
  }
  json_decref(man);
  return ok;
}

/* One golden set at one chunk size: returns the preemptions seen. */
static int64_t golden_prefixes_at(const char *set, int64_t chunk, dense_ref *dr, double *worst,
                                  int64_t *n_rows) {
  char dir[1024];
  check_data(dir, sizeof dir, "golden/%s/checkpoint", set);
  /* 9 pages: the longest request (130 + 3 tokens) needs all of them. The prefixes share their
   * pages through the prefix cache (every prompt here is a prefix of another), so the pool is
   * that small for every chunk size to still preempt, also with the Debug build's fewer
   * prefixes */
  ph_engine_params p = small_params(8, 128, chunk, 10);
  engine *e = NULL;
  diag d;
  CHECK_STATUS(engine_create(dir, &p, &e, &d), PH_OK, d.msg);
  if (!e) return 0;
  engine_set_capture_logits(e, 1);
  const int64_t V = engine_vocab(e);
  golden_set g;
  if (!golden_load(set, V, &g)) {
    st_close(g.ref);
    engine_free(e);
    return 0;
  }
  int n = 0;
  for (int s = 0; s < g.n_seq; s++)
    for (int64_t k = 1; k <= g.len[s]; k++) n += gp_prefix_runs(k, g.len[s], chunk);
  req_spec *q = calloc((size_t)n, sizeof *q);
  uint64_t *ids = calloc((size_t)n, sizeof *ids);
  int *seq_of = calloc((size_t)n, sizeof *seq_of);
  int i = 0;
  for (int s = 0; s < g.n_seq; s++)
    for (int64_t k = 1; k <= g.len[s]; k++) {
      if (!gp_prefix_runs(k, g.len[s], chunk)) continue;
      q[i].n_prompt = k;
      memcpy(q[i].prompt, g.tokens[s], (size_t)k * sizeof *q[i].prompt);
      q[i].sp = i % 2 ? sampled(GP_NEW, 0.9f, 0, 1.0f, 900 + (uint64_t)i) : greedy(GP_NEW);
      seq_of[i] = s;
      CHECK_STATUS(engine_add(e, q[i].prompt, k, &q[i].sp, &ids[i], &d), PH_OK, d.msg);
      i++;
    }
  run_stats rs;
  memset(&rs, 0, sizeof rs);
  drain(e, &rs);
  CHECK_EQ_INT(rs.bad_steps, 0);
  check_idle_pools(e);
  int64_t preempted = 0;
  int bad = 0;
  for (i = 0; i < n; i++) {
    outcome o;
    take_outcome(e, ids[i], &o);
    preempted += o.n_preemptions;
    CHECK_EQ_INT(o.finish, PH_FINISH_LENGTH);
    CHECK_EQ_INT(o.n_generated, GP_NEW);
    const int s = seq_of[i];
    if (o.n_generated > 0) {
      const float *want = g.logits[s] + (q[i].n_prompt - 1) * V;
      double err = 0, unused = 0;
      for (int64_t v = 0; v < V; v++) check_err_acc(o.logits[v], want[v], &err, &unused);
      const double rel = err / g.scale[s];
      if (!(rel <= *worst)) *worst = rel;
      (*n_rows)++;
      if (!(rel <= GOLDEN_F32_TOL) && bad++ < 5)
        printf("  %s chunk %lld: prefix %lld of sequence %d: first row %.3g of scale from the "
               "golden row (bound %.0e)\n",
               set, (long long)chunk, (long long)q[i].n_prompt, s, rel, GOLDEN_F32_TOL);
    }
    char label[96];
    snprintf(label, sizeof label, "%s chunk %lld prefix %lld of sequence %d", set, (long long)chunk,
             (long long)q[i].n_prompt, s);
    dense_ref_check(dr, &q[i], &o, label);
    outcome_free(&o);
  }
  CHECK_EQ_INT(bad, 0);
  /* the prompts are prefixes of one another: later ones resume from earlier ones' pages */
  ph_prefix_cache_stats pcs;
  engine_prefix_stats(e, &pcs);
  printf("  %s chunk %lld: prefix cache %lld hits of %lld lookups, %lld of %lld prompt tokens "
         "served from it\n",
         set, (long long)chunk, (long long)pcs.hits, (long long)pcs.lookups,
         (long long)pcs.tokens_saved, (long long)pcs.tokens_looked_up);
  CHECK(pcs.hits > 0 && pcs.tokens_saved > 0);
  free(q);
  free(ids);
  free(seq_of);
  st_close(g.ref);
  engine_free(e);
  return preempted;
}

static void test_golden_prefixes(void) {
  static const char *const sets[2] = {"qwen35-tiny-f32", "qwen35-tiny-bf16-vlm"};
  static const int64_t chunks[3] = {16, 32, 64};
  for (int k = 0; k < 2; k++) {
    char dir[1024];
    dense_ref dr;
    dense_ref_open(&dr, check_data(dir, sizeof dir, "golden/%s/checkpoint", sets[k]));
    for (int c = 0; c < 3; c++) {
      double worst = 0;
      int64_t rows = 0;
      const int64_t preempted = golden_prefixes_at(sets[k], chunks[c], &dr, &worst, &rows);
      printf("  %s, chunk %lld: %lld prefixes, first rows within %.2e of the golden scale (bound "
             "%.0e), %lld preemptions\n",
             sets[k], (long long)chunks[c], (long long)rows, worst, GOLDEN_F32_TOL,
             (long long)preempted);
      CHECK(rows > 0);
      CHECK(preempted >= 1);
    }
    dense_ref_report(&dr, sets[k]);
    dense_ref_close(&dr);
  }
}

int main(int argc, char **argv) {
  check_select(argc, argv); /* test_engine randomized: that test only */
  alloc_counter_ready();    /* before any counting (the sanitizer build's hook) */
  RUN_SELECTED(test_acceptance);
  RUN_SELECTED(test_identical_prompts);
  RUN_SELECTED(test_bad_requests);
  RUN_SELECTED(test_randomized);
  RUN_SELECTED(test_context_full);
  RUN_SELECTED(test_remove_from_callback);
  RUN_SELECTED(test_no_alloc_in_step);
  RUN_SELECTED(test_no_alloc_speculative);
  RUN_SELECTED(test_nonfinite_logits);
  RUN_SELECTED(test_cost_per_request);
  RUN_SELECTED(test_golden_prefixes);
  return check_finish();
}
