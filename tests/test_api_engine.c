/* The public serving API (include/pagedhybrid.h, ph_engine_*): requests added from other
 * threads while the main thread steps, tokens seen through the callback and by polling agree,
 * a removal, a refused request with its typed status, release, and the error object of a
 * failed open. Engine behaviour itself is tests/test_engine.c's. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "pagedhybrid.h"

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

static void *add_requests(void *arg) {
  adder *a = arg;
  for (int k = 0; k < PER_THREAD; k++) {
    int64_t prompt[40];
    const int n = 3 + 9 * k + a->which;
    for (int j = 0; j < n; j++) prompt[j] = (a->which * 31 + k * 7 + j) % 256;
    ph_sampling_params sp = ph_sampling_params_default();
    sp.max_new_tokens = 6 + k;
    sp.temperature = k % 2 ? 0.8f : 0.0f;
    sp.seed = (uint64_t)(a->which * 10 + k);
    ph_status st = ph_engine_add_request(a->e, prompt, n, &sp, &a->ids[k]);
    if (st != PH_OK) a->st = st;
  }
  return NULL;
}

static void test_threads_callback_poll(void) {
  char dir[1024];
  check_data(dir, sizeof dir, "golden/qwen35-tiny-f32/checkpoint");
  ph_engine_params p = ph_engine_params_default();
  p.max_context = 256;
  p.num_blocks = 40;
  p.max_batch_size = 6;
  p.max_scheduled_tokens = 64;
  p.prefill_chunk = 32;
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
      CHECK_EQ_INT(ph_engine_read_tokens(e, id, polled, 64), 0); /* consumed */
      CHECK_STATUS(ph_engine_release_request(e, id), PH_OK, "release");
      CHECK_EQ_INT(ph_engine_read_tokens(e, id, polled, 64), -1);
    }
  }
  printf("  %d requests from %d threads in %d steps\n", N_THREADS * PER_THREAD, N_THREADS, steps);
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
