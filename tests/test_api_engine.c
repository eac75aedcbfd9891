/* The public serving API (include/pagedhybrid.h, ph_engine_*): requests added from other
 * threads while the main thread steps, tokens seen through the callback and by polling agree,
 * a removal, a refused request with its typed status, release, and the error object of a
 * failed open. Engine behaviour itself is tests/test_engine.c's.
 * The API gives tokens, not logits, so every request's tokens are checked against a reference
 * the engine did not produce: the dense session (src/runtime/dense_session.h) run teacher-forced
 * over the prompt and the generated tokens. Prompts reach 46 tokens against a prefill chunk of
 * 16 (up to 3 chunks), and the page pool is small enough to preempt. */
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "engine/sampler.h"
#include "pagedhybrid.h"
#include "runtime/dense_session.h"

#define N_THREADS  3
#define PER_THREAD 4

typedef struct seen {
  pthread_mutex_t mu;
  int64_t tokens[64][64];
  int64_t n[64];
  int finished[64];
  ph_finish_reason reason[64];
} seen;

static void on_token(void *user, uint64_t id, int64_t token, ph_finish_reason reason) {
  seen *s = user;
  if (id >= 64) return;
  pthread_mutex_lock(&s->mu);
  if (token >= 0 && s->n[id] < 64) s->tokens[id][s->n[id]++] = token;
  if (token < 0) {
    s->finished[id]++;
    s->reason[id] = reason;
  }
  pthread_mutex_unlock(&s->mu);
}

typedef struct adder {
  ph_engine *e;
  int which;
  uint64_t ids[PER_THREAD];
  ph_status st;
} adder;

#define MAX_PROMPT 64

/* Request k of thread which: its prompt (returns the length) and sampling parameters. */
static int request_of(int which, int k, int64_t *prompt, ph_sampling_params *sp) {
  const int n = 3 + 14 * k + which; /* 3..46 */
  for (int j = 0; j < n; j++) prompt[j] = (which * 31 + k * 7 + j * 13) % 256;
  *sp = ph_sampling_params_default();
  sp->max_new_tokens = 6 + k;
  sp->temperature = k % 2 ? 0.8f : 0.0f;
  sp->seed = (uint64_t)(which * 10 + k);
  return n;
}

static void *add_requests(void *arg) {
  adder *a = arg;
  for (int k = 0; k < PER_THREAD; k++) {
    int64_t prompt[MAX_PROMPT];
    ph_sampling_params sp;
    const int n = request_of(a->which, k, prompt, &sp);
    ph_status st = ph_engine_add_request(a->e, prompt, n, &sp, &a->ids[k]);
    if (st != PH_OK) a->st = st;
  }
  return NULL;
}

/* The tokens of request k of thread which against the dense session: the prompt and the
 * generated tokens in one teacher-forced pass; dense row n_prompt - 1 + j gives token j.
 *  - greedy: token j must be the dense row's argmax, or within PAIR_F32_TOL (tests/check.h: two
 *    float32 implementations of the model differ by at most 4e-4 of the logit scale) of it, so a
 *    near tie that the engine's rounding broke the other way is not a failure;
 *  - sampled: token j must be the sampler's draw from the dense row with the request's
 *    parameters and token index. The draw is an inverse CDF at a fixed u, which the 4e-4 moves
 *    by about 1e-4 of a token's probability at most; these fixed seeds sit farther than that
 *    from every boundary (checked: a flip would show here as a mismatch), so a mismatch means a
 *    wrong prompt, token, position or index.
 * Returns the number of tokens that fail. */
static int dense_mismatches(dense_session *ds, int which, int k, const int64_t *tokens, int64_t n,
                            void *scratch, size_t scratch_bytes) {
  int64_t seq[MAX_PROMPT + 64];
  ph_sampling_params sp;
  const int n_prompt = request_of(which, k, seq, &sp);
  if (n <= 0) return 0;
  if (n > 64) return (int)n;
  memcpy(seq + n_prompt, tokens, (size_t)(n - 1) * sizeof *seq);
  const int64_t V = dense_session_vocab(ds), L = n_prompt + n - 1;
  float *logits = malloc((size_t)(L * V) * sizeof *logits);
  diag d;
  dense_session_reset(ds);
  CHECK_STATUS(dense_session_step(ds, seq, L, logits, &d), PH_OK, d.msg);
  sampling_params p = sampling_params_default(); /* the same fields as ph_sampling_params */
  p.temperature = sp.temperature;
  p.top_k = sp.top_k;
  p.top_p = sp.top_p;
  p.min_p = sp.min_p;
  p.seed = sp.seed;
  p.max_new_tokens = sp.max_new_tokens;
  double scale = 0;
  for (int64_t i = 0; i < (int64_t)n * V; i++) {
    const double x = fabs(logits[(n_prompt - 1) * V + i]);
    if (!(x <= scale)) scale = x; /* NaN makes scale NaN: every check below fails */
  }
  int bad = 0;
  for (int64_t j = 0; j < n; j++) {
    const float *row = logits + (n_prompt - 1 + j) * V;
    int ok;
    if (sp.temperature == 0.0f) {
      float best = row[0];
      for (int64_t v = 1; v < V; v++) best = row[v] > best ? row[v] : best;
      ok = tokens[j] >= 0 && tokens[j] < V && row[tokens[j]] >= best - PAIR_F32_TOL * scale;
    } else {
      ok = sampler_sample(row, V, &p, j, scratch, scratch_bytes) == tokens[j];
    }
    if (!ok && bad++ == 0)
      printf("  thread %d request %d (prompt %d, %s): token %lld = %lld is not the dense "
             "session's\n",
             which, k, n_prompt, sp.temperature == 0.0f ? "greedy" : "sampled", (long long)j,
             (long long)tokens[j]);
  }
  free(logits);
  return bad;
}

static void test_threads_callback_poll(void) {
  char dir[1024];
  check_data(dir, sizeof dir, "golden/qwen35-tiny-f32/checkpoint");
  ph_engine_params p = ph_engine_params_default();
  p.max_context = 256;
  p.num_blocks = 12; /* 11 pages: 6 running requests of 2-4 pages preempt */
  p.max_batch_size = 6;
  p.max_scheduled_tokens = 64;
  p.prefill_chunk = 16;
  p.n_threads = 2;
  ph_engine *e = NULL;
  CHECK_STATUS(ph_engine_create(dir, &p, &e), PH_OK, ph_engine_error(e));
  if (!e) return;
  static seen s;
  memset(&s, 0, sizeof s);
  pthread_mutex_init(&s.mu, NULL);
  ph_engine_set_callback(e, on_token, &s);
  adder a[N_THREADS];
  pthread_t th[N_THREADS];
  for (int i = 0; i < N_THREADS; i++) {
    memset(&a[i], 0, sizeof a[i]);
    a[i].e = e;
    a[i].which = i;
    pthread_create(&th[i], NULL, add_requests, &a[i]);
  }
  /* step while the other threads add */
  int joined = 0, steps = 0;
  uint64_t removed = 0;
  while (!joined || ph_engine_busy(e)) {
    ph_step_info si;
    ph_status st = ph_engine_step(e, &si);
    CHECK_STATUS(st, PH_OK, ph_engine_error(e));
    if (st != PH_OK) break;
    if (++steps == 3) {
      for (int i = 0; i < N_THREADS; i++) pthread_join(th[i], NULL);
      joined = 1;
      removed = a[1].ids[PER_THREAD - 1];
      CHECK_STATUS(ph_engine_remove_request(e, removed), PH_OK, "remove");
    }
    if (steps > 2000) break;
  }
  if (!joined)
    for (int i = 0; i < N_THREADS; i++) pthread_join(th[i], NULL);
  ph_model *m = NULL;
  dense_session *ds = NULL;
  diag d;
  CHECK_STATUS(ph_model_open(dir, NULL, &m), PH_OK, ph_model_error(m));
  if (m) CHECK_STATUS(dense_session_create(m, 256, 1, &ds, &d), PH_OK, d.msg);
  const size_t scratch_bytes = sampler_scratch_bytes(256);
  void *scratch = malloc(scratch_bytes);
  int64_t preemptions = 0, compared = 0, mismatched = 0;
  for (int i = 0; i < N_THREADS; i++) {
    CHECK_STATUS(a[i].st, PH_OK, "add from a thread");
    for (int k = 0; k < PER_THREAD; k++) {
      const uint64_t id = a[i].ids[k];
      ph_request_info ri;
      CHECK_STATUS(ph_engine_request_info(e, id, &ri), PH_OK, "info");
      CHECK(ri.finish != PH_FINISH_NONE);
      CHECK_EQ_INT(s.finished[id], 1);
      CHECK(s.reason[id] == ri.finish);
      if (id == removed)
        CHECK(ri.finish == PH_FINISH_ABORTED || ri.finish == PH_FINISH_LENGTH);
      else
        CHECK(ri.finish == PH_FINISH_LENGTH || ri.finish == PH_FINISH_STOP);
      int64_t polled[64];
      const int64_t n = ph_engine_read_tokens(e, id, polled, 64);
      CHECK_EQ_INT(n, ri.n_generated);
      CHECK_EQ_INT(n, s.n[id]);
      CHECK(n <= 0 || memcmp(polled, s.tokens[id], (size_t)n * sizeof *polled) == 0);
      preemptions += ri.n_preemptions;
      if (ds && n > 0) {
        mismatched += dense_mismatches(ds, i, k, polled, n, scratch, scratch_bytes);
        compared += n;
      }
      CHECK_EQ_INT(ph_engine_read_tokens(e, id, polled, 64), 0); /* consumed */
      CHECK_STATUS(ph_engine_release_request(e, id), PH_OK, "release");
      CHECK_EQ_INT(ph_engine_read_tokens(e, id, polled, 64), -1);
    }
  }
  printf("  %d requests from %d threads in %d steps, %lld preemptions; %lld tokens against the "
         "dense session, %lld mismatched\n",
         N_THREADS * PER_THREAD, N_THREADS, steps, (long long)preemptions, (long long)compared,
         (long long)mismatched);
  CHECK_EQ_INT(mismatched, 0);
  CHECK(compared >= N_THREADS * PER_THREAD * 6 - 9); /* all but the removed request's tokens */
  CHECK(preemptions >= 1);
  free(scratch);
  dense_session_free(ds);
  ph_model_free(m);
  ph_engine_free(e);
}

static void test_refusals(void) {
  char dir[1024];
  check_data(dir, sizeof dir, "golden/qwen35-tiny-f32/checkpoint");
  ph_engine *e = NULL;
  CHECK(ph_engine_create("/nonexistent/model", NULL, &e) != PH_OK);
  CHECK(e && ph_engine_error(e)[0]);
  CHECK(ph_engine_step(e, NULL) == PH_ERR_INVALID_ARGUMENT); /* a failed open is not an engine */
  ph_engine_free(e);
  ph_engine_params p = ph_engine_params_default();
  p.max_context = 128;
  p.num_blocks = 16;
  CHECK_STATUS(ph_engine_create(dir, &p, &e), PH_OK, ph_engine_error(e));
  if (!e) return;
  const int64_t bad[2] = {1, 256}, good[3] = {1, 2, 3};
  uint64_t id_bad = 0, id_good = 0;
  ph_sampling_params sp = ph_sampling_params_default();
  sp.max_new_tokens = 3;
  CHECK_STATUS(ph_engine_add_request(e, bad, 2, &sp, &id_bad), PH_OK, "accepted, refused later");
  CHECK_STATUS(ph_engine_add_request(e, good, 3, &sp, &id_good), PH_OK, "add");
  CHECK(ph_engine_add_request(e, NULL, 3, &sp, &id_good) == PH_ERR_INVALID_ARGUMENT);
  while (ph_engine_busy(e))
    if (ph_engine_step(e, NULL) != PH_OK) break;
  ph_request_info ri;
  CHECK_STATUS(ph_engine_request_info(e, id_bad, &ri), PH_OK, "info");
  CHECK(ri.finish == PH_FINISH_ERROR && ri.status == PH_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(ri.message, "outside the vocabulary");
  CHECK_STATUS(ph_engine_request_info(e, id_good, &ri), PH_OK, "info");
  CHECK(ri.finish == PH_FINISH_LENGTH && ri.n_generated == 3);
  CHECK(ph_engine_request_info(e, 999, &ri) == PH_ERR_NOT_FOUND);
  ph_engine_free(e);
}

int main(void) {
  RUN(test_threads_callback_poll);
  RUN(test_refusals);
  return check_finish();
}
