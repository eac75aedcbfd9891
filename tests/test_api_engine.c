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

/* ph_engine_get_info, ph_engine_request_tokens, the logits capture (PH_CAPTURE_POSITIONS and
 * PH_CAPTURE_SAMPLED) and ph_step_info.n_admitted. The references the engine did not make: the
 * checkpoint's geometry through ph_model (KV and state bytes), the parameters asked for, and the
 * dense session run over the same tokens (every position's row within PAIR_F32_TOL of the
 * row's scale). The two capture modes must agree bit for bit on the sampled rows. */
static void test_info_and_capture(void) {
  char dir[1024];
  check_data(dir, sizeof dir, "golden/qwen35-tiny-f32/checkpoint");
  ph_engine_params p = ph_engine_params_default();
  p.max_context = 128;
  p.num_blocks = 16;
  p.block_size = 32;
  p.capture_logits = PH_CAPTURE_POSITIONS;
  ph_engine *e = NULL, *es = NULL;
  CHECK_STATUS(ph_engine_create(dir, &p, &e), PH_OK, e ? ph_engine_error(e) : "");
  p.capture_logits = PH_CAPTURE_SAMPLED;
  CHECK_STATUS(ph_engine_create(dir, &p, &es), PH_OK, es ? ph_engine_error(es) : "");
  ph_model *m = NULL;
  CHECK_STATUS(ph_model_open(dir, NULL, &m), PH_OK, m ? ph_model_error(m) : "");
  if (!e || !es || !m) {
    ph_engine_free(e);
    ph_engine_free(es);
    ph_model_free(m);
    return;
  }
  ph_engine_info in;
  memset(&in, 0xff, sizeof in);
  CHECK_STATUS(ph_engine_get_info(e, &in), PH_OK, "info");
  ph_model_info mi;
  CHECK_STATUS(ph_model_get_info(m, &mi), PH_OK, "model info");
  CHECK_EQ_INT(in.vocab_size, mi.vocab_size);
  CHECK_EQ_INT(in.max_context, 128);
  CHECK_EQ_INT(in.block_size, 32);
  CHECK_EQ_INT(in.kv_pages, 15); /* num_blocks counts the null page */
  CHECK_EQ_INT(in.params.num_blocks, 16);
  CHECK_EQ_INT(in.params.max_batch_size, 16); /* 0 resolved: a checkpoint's default */
  CHECK_EQ_INT(in.params.max_requests, 16);   /* = max_batch_size */
  CHECK_EQ_INT(in.params.max_scheduled_tokens, 2048);
  CHECK_EQ_INT(in.params.capture_logits, PH_CAPTURE_POSITIONS);
  CHECK_EQ_INT(in.kv_bytes_per_token, ph_model_kv_bytes_per_token(m, PH_DTYPE_F32));
  CHECK_EQ_INT(in.state_bytes_per_request, ph_model_fixed_state_bytes(m, PH_DTYPE_F32));
  CHECK_EQ_INT(in.cache_bytes, (int64_t)16 * 32 * in.kv_bytes_per_token +
                                   (int64_t)in.params.max_requests * in.state_bytes_per_request);
  CHECK(ph_engine_get_info(NULL, &in) == PH_ERR_INVALID_ARGUMENT);
  CHECK(ph_engine_get_info(e, NULL) == PH_ERR_INVALID_ARGUMENT);

  /* a checkpoint's default engine prunes its LM head: every position cannot be captured */
  CHECK(ph_engine_set_capture_logits(es, PH_CAPTURE_POSITIONS) == PH_ERR_UNSUPPORTED);
  CHECK_CONTAINS(ph_engine_error(es), "prunes its LM head");
  CHECK(ph_engine_set_capture_logits(es, (ph_logits_capture)7) == PH_ERR_INVALID_ARGUMENT);

  const int64_t prompt[5] = {11, 22, 33, 44, 55};
  enum { P = 5, G = 4 };
  ph_sampling_params sp = ph_sampling_params_default();
  sp.max_new_tokens = G;
  sp.ignore_eos = 1;
  uint64_t id = 0, ids = 0;
  CHECK_STATUS(ph_engine_add_request(e, prompt, P, &sp, &id), PH_OK, "add");
  CHECK_STATUS(ph_engine_add_request(es, prompt, P, &sp, &ids), PH_OK, "add");
  int64_t n = -1;
  CHECK(ph_engine_request_tokens(e, id, &n) != NULL && n == 0); /* queued: none yet */
  CHECK(ph_engine_request_logits(e, id, &n) != NULL && n == 0);
  int32_t admitted[2 * G] = {0};
  for (int k = 0; k < 2 * G && ph_engine_busy(e); k++) {
    ph_step_info si;
    CHECK_STATUS(ph_engine_step(e, &si), PH_OK, ph_engine_error(e));
    admitted[k] = si.n_admitted;
  }
  while (ph_engine_busy(es))
    if (ph_engine_step(es, NULL) != PH_OK) break;
  CHECK_EQ_INT(admitted[0], 1);
  CHECK_EQ_INT(admitted[1], 0);

  int64_t nt = 0, nts = 0, nr = 0, nrs = 0, polled[G + 1];
  const int64_t *tok = ph_engine_request_tokens(e, id, &nt);
  const int64_t *toks = ph_engine_request_tokens(es, ids, &nts);
  CHECK(tok && toks && nt == G && nts == G && memcmp(tok, toks, G * sizeof *tok) == 0);
  /* not consuming: the poll still sees all of them, and the tokens stay */
  CHECK_EQ_INT(ph_engine_read_tokens(e, id, polled, G + 1), G);
  CHECK(tok && memcmp(polled, tok, G * sizeof *tok) == 0);
  CHECK(ph_engine_request_tokens(e, id, &nt) == tok && nt == G);
  const float *rows = ph_engine_request_logits(e, id, &nr);
  const float *rows_s = ph_engine_request_logits(es, ids, &nrs);
  CHECK(rows != NULL && nr == P + G - 1); /* the last token is never run */
  CHECK(rows_s != NULL && nrs == G);
  const int64_t V = in.vocab_size;
  if (rows && rows_s && tok && nr == P + G - 1 && nrs == G) {
    /* the sampled rows are positions P-1 .. P+G-2 of every position, bit for bit */
    CHECK(memcmp(rows + (P - 1) * V, rows_s, (size_t)(G * V) * sizeof *rows) == 0);
    /* every row against the dense session over prompt + the generated tokens run */
    dense_session *ds = NULL;
    diag d;
    CHECK_STATUS(dense_session_create(m, 128, 1, &ds, &d), PH_OK, d.msg);
    int64_t seq[P + G];
    memcpy(seq, prompt, sizeof prompt);
    memcpy(seq + P, tok, G * sizeof *tok);
    float *ref = malloc((size_t)((P + G - 1) * V) * sizeof *ref);
    if (ds && ref) {
      CHECK_STATUS(dense_session_step(ds, seq, P + G - 1, ref, &d), PH_OK, d.msg);
      int bad = 0;
      for (int64_t t = 0; t < P + G - 1; t++) {
        double scale = 0, worst = 0;
        for (int64_t v = 0; v < V; v++) {
          const double x = fabs(ref[t * V + v]), diff = fabs(rows[t * V + v] - ref[t * V + v]);
          if (!(x <= scale)) scale = x;
          if (!(diff <= worst)) worst = diff;
        }
        if (!(worst <= PAIR_F32_TOL * scale) && bad++ == 0)
          printf("  position %lld: captured row differs from the dense row by %g (scale %g)\n",
                 (long long)t, worst, scale);
      }
      CHECK_EQ_INT(bad, 0);
    }
    free(ref);
    dense_session_free(ds);
  }
  CHECK(ph_engine_request_logits(e, 999, &n) == NULL && n == 0);
  CHECK(ph_engine_request_tokens(e, 999, &n) == NULL && n == 0);
  CHECK_STATUS(ph_engine_release_request(e, id), PH_OK, "release");
  CHECK(ph_engine_request_logits(e, id, &n) == NULL && n == 0);
  /* capture off for requests added now: no rows */
  CHECK_STATUS(ph_engine_set_capture_logits(e, PH_CAPTURE_NONE), PH_OK, "capture off");
  CHECK_STATUS(ph_engine_add_request(e, prompt, P, &sp, &id), PH_OK, "add");
  while (ph_engine_busy(e))
    if (ph_engine_step(e, NULL) != PH_OK) break;
  CHECK(ph_engine_request_logits(e, id, &n) == NULL && n == 0);
  CHECK(ph_engine_request_tokens(e, id, &n) != NULL && n == G);
  ph_engine_free(e);
  ph_engine_free(es);
  ph_model_free(m);
}

/* ---- speculative decoding through the public API ------------------------------------------------
 */

enum { SPEC_P = 6, SPEC_G = 14, SPEC_REQ = 4 };

/* Request k's prompt and sampling parameters, without speculation: 0 and 2 greedy, 1 and 3
 * sampled. */
static void spec_request(int k, int64_t *prompt, ph_sampling_params *sp) {
  for (int j = 0; j < SPEC_P; j++) prompt[j] = (k * 41 + j * 17 + (j % 2) * 3) % 256;
  *sp = ph_sampling_params_default();
  sp->max_new_tokens = SPEC_G;
  sp->ignore_eos = 1;
  sp->temperature = k % 2 ? 0.9f : 0.0f;
  sp->top_p = k % 2 ? 0.95f : 1.0f;
  sp->seed = (uint64_t)(100 + k);
}

/* Runs engine e until idle; sums the step infos' draft counts. */
static void spec_drain(ph_engine *e, int64_t *drafted, int64_t *accepted) {
  *drafted = *accepted = 0;
  for (int guard = 0; ph_engine_busy(e) && guard < 1000; guard++) {
    ph_step_info si;
    memset(&si, 0xff, sizeof si);
    CHECK_STATUS(ph_engine_step(e, &si), PH_OK, ph_engine_error(e));
    CHECK(si.n_drafted >= 0 && si.n_accepted >= 0 && si.n_accepted <= si.n_drafted);
    *drafted += si.n_drafted;
    *accepted += si.n_accepted;
  }
}

/* ph_sampling_params.speculative through ph_engine_add_request: the tokens of the same requests
 * without it (n-gram, replay of the right continuation, replay of a wrong one, none), the
 * drafted/accepted counts in ph_request_info and ph_step_info (their sums agree), the replay
 * tokens copied at add (the caller's array is overwritten and freed at once), and the refusals:
 * no capacity, a capacity out of range at create. */
static void test_speculative(void) {
  char dir[1024];
  check_data(dir, sizeof dir, "golden/qwen35-tiny-f32/checkpoint");
  CHECK_EQ_STR(ph_draft_method_name(PH_DRAFT_NONE), "none");
  CHECK_EQ_STR(ph_draft_method_name(PH_DRAFT_NGRAM), "ngram");
  CHECK_EQ_STR(ph_draft_method_name(PH_DRAFT_MTP), "mtp");
  CHECK_EQ_STR(ph_draft_method_name(PH_DRAFT_REPLAY), "replay");
  CHECK_EQ_STR(ph_draft_method_name((ph_draft_method)4), "unknown");
  CHECK_EQ_STR(ph_draft_method_name((ph_draft_method)-1), "unknown");

  ph_engine_params p = ph_engine_params_default();
  p.max_context = 128;
  p.num_blocks = 16;
  /* the capacity bound, at create */
  const int32_t bad_caps[2] = {PH_MAX_DRAFT_TOKENS + 1, -1};
  for (int i = 0; i < 2; i++) {
    ph_engine *bad = NULL;
    p.state_update_capacity = bad_caps[i];
    CHECK_STATUS(ph_engine_create(dir, &p, &bad), PH_ERR_INVALID_ARGUMENT,
                 bad ? ph_engine_error(bad) : "");
    char want[64];
    snprintf(want, sizeof want, "state_update_capacity %d: must be in [0, 8]", (int)bad_caps[i]);
    CHECK(bad != NULL);
    if (bad) CHECK_CONTAINS(ph_engine_error(bad), want);
    ph_engine_free(bad);
  }

  /* the reference: no speculation, no capacity */
  p.state_update_capacity = 0;
  ph_engine *e0 = NULL, *e = NULL;
  CHECK_STATUS(ph_engine_create(dir, &p, &e0), PH_OK, e0 ? ph_engine_error(e0) : "");
  p.state_update_capacity = PH_MAX_DRAFT_TOKENS;
  CHECK_STATUS(ph_engine_create(dir, &p, &e), PH_OK, e ? ph_engine_error(e) : "");
  if (!e0 || !e) {
    ph_engine_free(e0);
    ph_engine_free(e);
    return;
  }
  int64_t ref[SPEC_REQ][SPEC_G];
  uint64_t id0[SPEC_REQ];
  for (int k = 0; k < SPEC_REQ; k++) {
    int64_t prompt[SPEC_P];
    ph_sampling_params sp;
    spec_request(k, prompt, &sp);
    CHECK_STATUS(ph_engine_add_request(e0, prompt, SPEC_P, &sp, &id0[k]), PH_OK, "add");
  }
  int64_t d0, a0;
  spec_drain(e0, &d0, &a0);
  CHECK(d0 == 0 && a0 == 0);
  for (int k = 0; k < SPEC_REQ; k++) {
    int64_t n = 0;
    const int64_t *t = ph_engine_request_tokens(e0, id0[k], &n);
    CHECK(t && n == SPEC_G);
    if (!t || n != SPEC_G) goto done;
    memcpy(ref[k], t, sizeof ref[k]);
    ph_request_info ri;
    CHECK_STATUS(ph_engine_request_info(e0, id0[k], &ri), PH_OK, "info");
    CHECK(ri.n_drafted == 0 && ri.n_accepted == 0);
  }

  /* every request in every speculative form, on the engine with capacity */
  enum { FORMS = 4 };
  uint64_t id[FORMS][SPEC_REQ];
  for (int f = 0; f < FORMS; f++)
    for (int k = 0; k < SPEC_REQ; k++) {
      int64_t prompt[SPEC_P];
      ph_sampling_params sp;
      spec_request(k, prompt, &sp);
      int64_t *replay = malloc(SPEC_G * sizeof *replay);
      for (int j = 0; j < SPEC_G; j++) replay[j] = f == 2 ? (ref[k][j] + 1) % 256 : ref[k][j];
      if (f == 0) {
        sp.speculative.method = PH_DRAFT_NGRAM;
        sp.speculative.num_draft_tokens = 3;
        sp.speculative.ngram_min = 1;
        sp.speculative.ngram_max = 2;
      } else if (f == 1 || f == 2) {
        sp.speculative.method = PH_DRAFT_REPLAY;
        sp.speculative.num_draft_tokens = f == 1 ? 8 : 0; /* 0: 4 */
        sp.speculative.replay_tokens = replay;
        sp.speculative.n_replay_tokens = SPEC_G;
      }
      CHECK_STATUS(ph_engine_add_request(e, prompt, SPEC_P, &sp, &id[f][k]), PH_OK,
                   ph_engine_error(e));
      /* copied at add: the caller's array is no longer the engine's business */
      for (int j = 0; j < SPEC_G; j++) replay[j] = (ref[k][j] + 7) % 256;
      free(replay);
    }
  int64_t drafted, accepted;
  spec_drain(e, &drafted, &accepted);
  int64_t sum_d = 0, sum_a = 0;
  for (int f = 0; f < FORMS; f++)
    for (int k = 0; k < SPEC_REQ; k++) {
      int64_t n = 0;
      const int64_t *t = ph_engine_request_tokens(e, id[f][k], &n);
      CHECK(t && n == SPEC_G && memcmp(t, ref[k], sizeof ref[k]) == 0);
      if (t && n == SPEC_G && memcmp(t, ref[k], sizeof ref[k]) != 0)
        printf("  form %d request %d: tokens differ from the plain run\n", f, k);
      ph_request_info ri;
      CHECK_STATUS(ph_engine_request_info(e, id[f][k], &ri), PH_OK, "info");
      CHECK(ri.finish == PH_FINISH_LENGTH && ri.n_generated == SPEC_G);
      CHECK(ri.n_drafted >= 0 && ri.n_accepted >= 0 && ri.n_accepted <= ri.n_drafted);
      sum_d += ri.n_drafted;
      sum_a += ri.n_accepted;
      if (f == 1) { /* the right continuation: every draft kept, 8 at a time */
        CHECK(ri.n_drafted >= SPEC_G / 2);
        CHECK_EQ_INT(ri.n_accepted, ri.n_drafted);
      } else if (f == 2) { /* never right: every draft rejected */
        CHECK(ri.n_drafted >= SPEC_G - 1);
        CHECK_EQ_INT(ri.n_accepted, 0);
      } else if (f == 3) {
        CHECK(ri.n_drafted == 0 && ri.n_accepted == 0);
      }
    }
  CHECK_EQ_INT(sum_d, drafted);
  CHECK_EQ_INT(sum_a, accepted);
  CHECK(accepted > 0 && accepted < drafted);

  /* no capacity: a speculative request is refused (typed, named), the others run */
  {
    int64_t prompt[SPEC_P];
    ph_sampling_params sp;
    spec_request(0, prompt, &sp);
    sp.speculative.method = PH_DRAFT_NGRAM;
    uint64_t rid = 0;
    CHECK_STATUS(ph_engine_add_request(e0, prompt, SPEC_P, &sp, &rid), PH_OK, "refused later");
    spec_drain(e0, &d0, &a0);
    ph_request_info ri;
    CHECK_STATUS(ph_engine_request_info(e0, rid, &ri), PH_OK, "info");
    CHECK(ri.finish == PH_FINISH_ERROR && ri.status == PH_ERR_UNSUPPORTED);
    CHECK_CONTAINS(ri.message, "state_update_capacity");
    /* more drafts per step than the capacity */
    spec_request(0, prompt, &sp);
    sp.speculative.method = PH_DRAFT_NGRAM;
    sp.speculative.num_draft_tokens = PH_MAX_DRAFT_TOKENS + 1;
    CHECK_STATUS(ph_engine_add_request(e, prompt, SPEC_P, &sp, &rid), PH_OK, "refused later");
    spec_drain(e, &d0, &a0);
    CHECK_STATUS(ph_engine_request_info(e, rid, &ri), PH_OK, "info");
    CHECK(ri.finish == PH_FINISH_ERROR && ri.status == PH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ri.message, "num_draft_tokens");
    /* replay without tokens */
    spec_request(0, prompt, &sp);
    sp.speculative.method = PH_DRAFT_REPLAY;
    CHECK_STATUS(ph_engine_add_request(e, prompt, SPEC_P, &sp, &rid), PH_OK, "refused later");
    spec_drain(e, &d0, &a0);
    CHECK_STATUS(ph_engine_request_info(e, rid, &ri), PH_OK, "info");
    CHECK(ri.finish == PH_FINISH_ERROR && ri.status == PH_ERR_INVALID_ARGUMENT);
    CHECK_CONTAINS(ri.message, "replay");
  }
done:
  ph_engine_free(e0);
  ph_engine_free(e);
}

/* The bf16 precision mode through the public API (docs/precision.md): auto resolves from the
 * weights' dtype (bf16 checkpoint: bf16; f32 checkpoint: f32) and ph_engine_info reports it; a
 * value outside the enum is refused; and in bf16 mode every request's captured logits are the
 * bits of the same request run alone, with 4 requests of different lengths batched in chunks
 * (batch invariance holds in every mode). The mode is really on: its rows differ from an f32
 * engine's. */
static void test_bf16_mode(void) {
  char dir[1024], dir32[1024];
  check_data(dir, sizeof dir, "golden/qwen35-tiny-bf16-vlm/checkpoint");
  check_data(dir32, sizeof dir32, "golden/qwen35-tiny-f32/checkpoint");
  ph_engine_params p = ph_engine_params_default();
  p.max_context = 128;
  p.num_blocks = 24;
  p.prefill_chunk = 16;
  p.max_batch_size = 4;
  p.capture_logits = PH_CAPTURE_SAMPLED;
  ph_engine *e = NULL;
  p.precision = (ph_precision)9;
  CHECK(ph_engine_create(dir, &p, &e) == PH_ERR_INVALID_ARGUMENT);
  CHECK_CONTAINS(ph_engine_error(e), "precision");
  ph_engine_free(e);
  e = NULL;
  CHECK_EQ_STR(ph_precision_name(PH_PRECISION_BF16), "bf16");
  CHECK_EQ_STR(ph_precision_name((ph_precision)9), "unknown");
  ph_engine_info in;
  p.precision = PH_PRECISION_AUTO;
  CHECK_STATUS(ph_engine_create(dir32, &p, &e), PH_OK, ph_engine_error(e));
  if (e && ph_engine_get_info(e, &in) == PH_OK) CHECK_EQ_INT(in.params.precision, PH_PRECISION_F32);
  ph_engine_free(e);
  e = NULL;
  p.precision = PH_PRECISION_BF16; /* asked for: f32 weights are rounded to bf16 */
  CHECK_STATUS(ph_engine_create(dir32, &p, &e), PH_OK, ph_engine_error(e));
  if (e && ph_engine_get_info(e, &in) == PH_OK)
    CHECK_EQ_INT(in.params.precision, PH_PRECISION_BF16);
  ph_engine_free(e);
  e = NULL;
  enum { R = 4, G = 3 };
  const int lens[R] = {3, 20, 37, 9};
  int64_t prompts[R][40];
  for (int r = 0; r < R; r++)
    for (int j = 0; j < lens[r]; j++) prompts[r][j] = (r * 17 + j * 29 + 3) % 256;
  ph_sampling_params sp = ph_sampling_params_default();
  sp.max_new_tokens = G;
  sp.ignore_eos = 1;
  float *rows[1][R] = {{NULL}};
  for (int mode = 0; mode < 3; mode++) { /* 0: bf16 batched, 1: bf16 alone, 2: f32 batched */
    p.precision = mode == 2 ? PH_PRECISION_F32 : PH_PRECISION_AUTO;
    CHECK_STATUS(ph_engine_create(dir, &p, &e), PH_OK, ph_engine_error(e));
    if (!e) return;
    CHECK_STATUS(ph_engine_get_info(e, &in), PH_OK, "info");
    CHECK_EQ_INT(in.params.precision, mode == 2 ? PH_PRECISION_F32 : PH_PRECISION_BF16);
    const int64_t V = in.vocab_size;
    uint64_t ids[R];
    for (int r = 0; r < R; r++) {
      CHECK_STATUS(ph_engine_add_request(e, prompts[r], lens[r], &sp, &ids[r]), PH_OK, "add");
      if (mode == 1) /* alone: each request runs to the end before the next is added */
        while (ph_engine_busy(e))
          if (ph_engine_step(e, NULL) != PH_OK) break;
    }
    while (ph_engine_busy(e))
      if (ph_engine_step(e, NULL) != PH_OK) break;
    int64_t differ = 0;
    for (int r = 0; r < R; r++) {
      int64_t n = 0;
      const float *x = ph_engine_request_logits(e, ids[r], &n);
      CHECK(x != NULL && n == G);
      if (!x || n != G) continue;
      if (mode == 0) {
        rows[0][r] = malloc((size_t)(G * V) * sizeof(float));
        if (rows[0][r]) memcpy(rows[0][r], x, (size_t)(G * V) * sizeof(float));
      } else if (rows[0][r] && mode == 1) {
        CHECK(memcmp(rows[0][r], x, (size_t)(G * V) * sizeof(float)) == 0);
      } else if (rows[0][r]) {
        differ += memcmp(rows[0][r], x, (size_t)(G * V) * sizeof(float)) != 0;
      }
    }
    if (mode == 2) CHECK_EQ_INT(differ, R); /* f32 rows are not the bf16 mode's */
    ph_engine_free(e);
    e = NULL;
  }
  for (int r = 0; r < R; r++) free(rows[0][r]);
}

int main(void) {
  RUN(test_threads_callback_poll);
  RUN(test_refusals);
  RUN(test_info_and_capture);
  RUN(test_speculative);
  RUN(test_bf16_mode);
  return check_finish();
}
