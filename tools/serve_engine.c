/* serve_engine — see serve_engine.h.
 *
 * Locking: one mutex (se->mu) guards the live list, every serve_req field the two sides share,
 * and the thread's wake-up state. The engine's own calls (add, remove, step, request info,
 * release) are made without holding it, except ph_engine_add_request, which runs under mu so
 * that the request is on the live list before the engine thread can see its first token (the
 * engine calls the token callback without holding its own lock, so there is no lock-order
 * cycle). */
#include "serve_engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine_flags.h"

struct serve_req {
  serve_engine *se;
  uint64_t id;
  int refs;        /* the HTTP thread's and the engine side's (until released) */
  int64_t *tokens; /* [cap] generated tokens */
  int64_t n_tokens, cap;
  int finishing; /* the callback saw its finish; released after the step */
  int finished;  /* info valid; the engine has forgotten it */
  int cancelled; /* a removal was sent */
  ph_request_info info;
  pthread_cond_t cv;      /* signalled on a new token and on the finish */
  serve_req *prev, *next; /* the live list: submitted and not yet released */
};

struct serve_engine {
  ph_engine *e;
  serve_metrics *metrics;
  pthread_t thread;
  int thread_started;
  pthread_mutex_t mu;
  pthread_cond_t wake;
  int wake_pending, stop;
  serve_req *live;       /* head of the live list */
  int64_t n_live;        /* on the live list */
  serve_req **table;     /* [cap_table] the live requests by id: open addressing, linear
                            probing, at most half full (the callback finds a token's request in
                            O(1) whatever the number of connections) */
  int64_t cap_table;     /* 0 or a power of two */
  int64_t n_held;        /* not yet put by their HTTP thread */
  serve_req **finishing; /* [cap_finishing] finishes seen by the callback in this step */
  int64_t n_finishing, cap_finishing;
  int failed;
  ph_status fail_status;
  char fail_msg[512];
};

static void req_unref_locked(serve_req *r) {
  if (--r->refs > 0) return;
  pthread_cond_destroy(&r->cv);
  free(r->tokens);
  free(r);
}

/* ---- the live requests by id ---- */

static int64_t home_of(const serve_engine *se, uint64_t id) {
  uint64_t x = id;
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdULL;
  x ^= x >> 33;
  return (int64_t)(x & (uint64_t)(se->cap_table - 1));
}

static void table_put_locked(serve_engine *se, serve_req *r) {
  int64_t i = home_of(se, r->id);
  while (se->table[i]) i = (i + 1) & (se->cap_table - 1);
  se->table[i] = r;
}

/* Room for one more while at most half full; -1 when out of memory (nothing changed). */
static int table_reserve_locked(serve_engine *se) {
  if ((se->n_live + 1) * 2 <= se->cap_table) return 0;
  const int64_t cap = se->cap_table ? 2 * se->cap_table : 64;
  serve_req **t = calloc((size_t)cap, sizeof *t);
  if (!t) return -1;
  serve_req **old = se->table;
  const int64_t old_cap = se->cap_table;
  se->table = t;
  se->cap_table = cap;
  for (int64_t i = 0; i < old_cap; i++)
    if (old[i]) table_put_locked(se, old[i]);
  free(old);
  return 0;
}

static serve_req *find_locked(serve_engine *se, uint64_t id) {
  if (!se->cap_table) return NULL;
  for (int64_t i = home_of(se, id); se->table[i]; i = (i + 1) & (se->cap_table - 1))
    if (se->table[i]->id == id) return se->table[i];
  return NULL;
}

/* Removes r, shifting back the entries of its probe run that would no longer be found. */
static void table_del_locked(serve_engine *se, const serve_req *r) {
  if (!se->cap_table) return;
  const int64_t mask = se->cap_table - 1;
  int64_t i = home_of(se, r->id);
  while (se->table[i] && se->table[i] != r) i = (i + 1) & mask;
  if (!se->table[i]) return;
  for (int64_t j = (i + 1) & mask; se->table[j]; j = (j + 1) & mask) {
    const int64_t k = home_of(se, se->table[j]->id);
    /* the entry at j stays when its home lies cyclically in (i, j] */
    if (i <= j ? (i < k && k <= j) : (i < k || k <= j)) continue;
    se->table[i] = se->table[j];
    i = j;
  }
  se->table[i] = NULL;
}

static void unlink_locked(serve_engine *se, serve_req *r) {
  table_del_locked(se, r);
  if (r->prev)
    r->prev->next = r->next;
  else
    se->live = r->next;
  if (r->next) r->next->prev = r->prev;
  r->prev = r->next = NULL;
  se->n_live--;
}

/* The engine's callback: on the stepping thread, between the engine's own locks. */
static void on_token(void *user, uint64_t id, int64_t token, ph_finish_reason reason) {
  serve_engine *se = user;
  (void)reason;
  pthread_mutex_lock(&se->mu);
  serve_req *r = find_locked(se, id);
  if (r && token >= 0) {
    if (r->n_tokens < r->cap) r->tokens[r->n_tokens++] = token;
    pthread_cond_broadcast(&r->cv);
  } else if (r && !r->finishing) {
    r->finishing = 1;
    /* room was reserved at submit: one entry per live request */
    if (se->n_finishing < se->cap_finishing) se->finishing[se->n_finishing++] = r;
  }
  pthread_mutex_unlock(&se->mu);
}

/* After a step: the requests that finished in it are read, released and handed over. */
static void collect_finished(serve_engine *se) {
  pthread_mutex_lock(&se->mu);
  const int64_t n = se->n_finishing;
  pthread_mutex_unlock(&se->mu);
  for (int64_t k = 0; k < n; k++) {
    pthread_mutex_lock(&se->mu);
    serve_req *r = se->finishing[k];
    const uint64_t id = r->id;
    pthread_mutex_unlock(&se->mu);
    ph_request_info info;
    if (ph_engine_request_info(se->e, id, &info) != PH_OK) {
      memset(&info, 0, sizeof info);
      info.finish = PH_FINISH_ERROR;
      info.status = PH_ERR_INTERNAL;
      snprintf(info.message, sizeof info.message, "request %llu: no record after its finish",
               (unsigned long long)id);
    }
    ph_engine_release_request(se->e, id);
    serve_metrics_request(se->metrics, info.finish, info.n_prompt, info.n_generated,
                          info.time_to_first_token_ms >= 0 ? info.time_to_first_token_ms / 1e3
                                                           : -1.0);
    pthread_mutex_lock(&se->mu);
    r->info = info;
    r->finished = 1;
    unlink_locked(se, r);
    pthread_cond_broadcast(&r->cv);
    req_unref_locked(r);
    pthread_mutex_unlock(&se->mu);
  }
  pthread_mutex_lock(&se->mu);
  se->n_finishing = 0;
  pthread_mutex_unlock(&se->mu);
}

/* A failed step: every live request finishes with its error; the engine is not stepped again. */
static void fail_all(serve_engine *se, ph_status s) {
  pthread_mutex_lock(&se->mu);
  se->failed = 1;
  se->fail_status = s;
  snprintf(se->fail_msg, sizeof se->fail_msg, "engine step failed: %s: %s", ph_status_name(s),
           ph_engine_error(se->e));
  while (se->live) {
    serve_req *r = se->live;
    memset(&r->info, 0, sizeof r->info);
    r->info.finish = PH_FINISH_ERROR;
    r->info.status = s;
    snprintf(r->info.message, sizeof r->info.message, "%.255s", se->fail_msg);
    r->info.n_generated = r->n_tokens;
    r->info.time_to_first_token_ms = -1;
    r->finished = 1;
    unlink_locked(se, r);
    pthread_cond_broadcast(&r->cv);
    req_unref_locked(r);
  }
  se->n_finishing = 0;
  pthread_mutex_unlock(&se->mu);
}

static void *engine_thread(void *arg) {
  serve_engine *se = arg;
  pthread_mutex_lock(&se->mu);
  for (;;) {
    while (!se->wake_pending && !se->stop) pthread_cond_wait(&se->wake, &se->mu);
    se->wake_pending = 0;
    const int stopping = se->stop, failed = se->failed;
    pthread_mutex_unlock(&se->mu);
    if (failed) { /* nothing to step; wait for stop */
      pthread_mutex_lock(&se->mu);
      if (stopping) break;
      continue;
    }
    while (ph_engine_busy(se->e)) {
      ph_step_info si;
      const ph_status s = ph_engine_step(se->e, &si);
      if (s != PH_OK) {
        fprintf(stderr, "serve: engine step failed: %s: %s\n", ph_status_name(s),
                ph_engine_error(se->e));
        fail_all(se, s);
        break;
      }
      collect_finished(se);
      serve_metrics_step(se->metrics, &si);
      ph_prefix_cache_stats pc;
      if (ph_engine_prefix_cache_stats(se->e, &pc) == PH_OK)
        serve_metrics_prefix_cache(se->metrics, &pc);
    }
    pthread_mutex_lock(&se->mu);
    if (stopping && !se->wake_pending) break;
  }
  pthread_mutex_unlock(&se->mu);
  return NULL;
}

ph_status serve_engine_start(ph_engine *e, serve_metrics *metrics, serve_engine **out, diag *d) {
  *out = NULL;
  serve_engine *se = calloc(1, sizeof *se);
  RETURN_ERROR_IF(!se, d, PH_ERR_NO_MEMORY, "serve: out of memory");
  se->e = e;
  se->metrics = metrics;
  ph_prefix_cache_stats pc; /* /metrics says whether the cache is on before the first step */
  if (ph_engine_prefix_cache_stats(e, &pc) == PH_OK) serve_metrics_prefix_cache(metrics, &pc);
  if (pthread_mutex_init(&se->mu, NULL) != 0) {
    free(se);
    return diag_set(d, PH_ERR_INTERNAL, "serve: pthread_mutex_init failed");
  }
  if (pthread_cond_init(&se->wake, NULL) != 0) {
    pthread_mutex_destroy(&se->mu);
    free(se);
    return diag_set(d, PH_ERR_INTERNAL, "serve: pthread_cond_init failed");
  }
  ph_engine_set_callback(e, on_token, se);
  const int err = pthread_create(&se->thread, NULL, engine_thread, se);
  if (err) {
    ph_engine_set_callback(e, NULL, NULL);
    pthread_cond_destroy(&se->wake);
    pthread_mutex_destroy(&se->mu);
    free(se);
    return diag_set(d, PH_ERR_INTERNAL, "serve: starting the engine thread failed: %s",
                    strerror(err));
  }
  se->thread_started = 1;
  *out = se;
  return PH_OK;
}

void serve_engine_abort_all(serve_engine *se) {
  pthread_mutex_lock(&se->mu);
  for (serve_req *r = se->live; r; r = r->next)
    if (!r->finishing) {
      ph_engine_remove_request(se->e, r->id);
      r->cancelled = 1;
    }
  se->wake_pending = 1;
  pthread_cond_signal(&se->wake);
  pthread_mutex_unlock(&se->mu);
}

void serve_engine_stop(serve_engine *se) {
  if (!se) return;
  serve_engine_abort_all(se);
  pthread_mutex_lock(&se->mu);
  se->stop = 1;
  pthread_cond_signal(&se->wake);
  pthread_mutex_unlock(&se->mu);
  if (se->thread_started) pthread_join(se->thread, NULL);
  ph_engine_set_callback(se->e, NULL, NULL);
  /* what is still live belongs to a failed engine, or was never stepped: hand it over */
  fail_all(se, PH_ERR_INTERNAL);
  pthread_mutex_lock(&se->mu);
  const int64_t held = se->n_held;
  pthread_mutex_unlock(&se->mu);
  if (held == 0) {
    pthread_cond_destroy(&se->wake);
    pthread_mutex_destroy(&se->mu);
    free(se->finishing);
    free(se->table);
    free(se);
  }
  /* else an HTTP thread still holds a request: the caller stops the HTTP side first, so this
   * happens only when that failed; the engine record is leaked rather than freed under it */
}

int serve_engine_failed(serve_engine *se, char *msg, size_t cap) {
  pthread_mutex_lock(&se->mu);
  const int failed = se->failed;
  if (failed && msg && cap) snprintf(msg, cap, "%s", se->fail_msg);
  pthread_mutex_unlock(&se->mu);
  return failed;
}

int64_t serve_engine_n_live(serve_engine *se) {
  pthread_mutex_lock(&se->mu);
  const int64_t n = se->n_held;
  pthread_mutex_unlock(&se->mu);
  return n;
}

ph_status serve_engine_submit(serve_engine *se, const int64_t *prompt, int64_t n_prompt,
                              const ph_sampling_params *sp, serve_req **out, diag *d) {
  *out = NULL;
  const int64_t cap = sp->max_new_tokens > 0 ? sp->max_new_tokens : 1;
  serve_req *r = calloc(1, sizeof *r);
  int64_t *tokens = malloc((size_t)cap * sizeof *tokens);
  if (!r || !tokens || pthread_cond_init(&r->cv, NULL) != 0) {
    free(r);
    free(tokens);
    return diag_set(d, PH_ERR_NO_MEMORY, "serve: out of memory for a request of %lld tokens",
                    (long long)cap);
  }
  r->se = se;
  r->tokens = tokens;
  r->cap = cap;
  r->refs = 2;
  pthread_mutex_lock(&se->mu);
  ph_status s = PH_OK;
  if (se->failed) s = diag_set(d, PH_ERR_INTERNAL, "%s", se->fail_msg);
  if (s == PH_OK && table_reserve_locked(se))
    s = diag_set(d, PH_ERR_NO_MEMORY, "serve: out of memory");
  if (s == PH_OK && se->n_live + 1 > se->cap_finishing) { /* one finish slot per live request */
    const int64_t c = se->cap_finishing ? 2 * se->cap_finishing : 64;
    serve_req **f = realloc(se->finishing, (size_t)c * sizeof *f);
    if (!f)
      s = diag_set(d, PH_ERR_NO_MEMORY, "serve: out of memory");
    else {
      se->finishing = f;
      se->cap_finishing = c;
    }
  }
  if (s == PH_OK)
    s = engine_call_failed("ph_engine_add_request",
                           ph_engine_add_request(se->e, prompt, n_prompt, sp, &r->id), d);
  if (s != PH_OK) {
    pthread_mutex_unlock(&se->mu);
    pthread_cond_destroy(&r->cv);
    free(tokens);
    free(r);
    return s;
  }
  r->next = se->live;
  if (se->live) se->live->prev = r;
  se->live = r;
  table_put_locked(se, r);
  se->n_live++;
  se->n_held++;
  se->wake_pending = 1;
  pthread_cond_signal(&se->wake);
  pthread_mutex_unlock(&se->mu);
  *out = r;
  return PH_OK;
}

int64_t serve_req_wait(serve_req *r, int64_t seen, int64_t *out, int64_t cap, int timeout_ms,
                       serve_req_state *st) {
  serve_engine *se = r->se;
  pthread_mutex_lock(&se->mu);
  if (timeout_ms > 0 && r->n_tokens <= seen && !r->finished) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    until.tv_sec += timeout_ms / 1000;
    until.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (until.tv_nsec >= 1000000000L) {
      until.tv_sec++;
      until.tv_nsec -= 1000000000L;
    }
    while (r->n_tokens <= seen && !r->finished)
      if (pthread_cond_timedwait(&r->cv, &se->mu, &until) == ETIMEDOUT) break;
  }
  int64_t n = r->n_tokens - seen;
  if (n < 0) n = 0;
  if (n > cap) n = cap;
  if (n > 0) memcpy(out, r->tokens + seen, (size_t)n * sizeof *out);
  st->n_tokens = r->n_tokens;
  st->finished = r->finished;
  if (r->finished) st->info = r->info;
  pthread_mutex_unlock(&se->mu);
  return n;
}

void serve_req_cancel(serve_req *r) {
  serve_engine *se = r->se;
  pthread_mutex_lock(&se->mu);
  if (!r->finished && !r->finishing && !r->cancelled) {
    r->cancelled = 1;
    ph_engine_remove_request(se->e, r->id);
    se->wake_pending = 1;
    pthread_cond_signal(&se->wake);
  }
  pthread_mutex_unlock(&se->mu);
}

void serve_req_put(serve_req *r) {
  if (!r) return;
  serve_req_cancel(r);
  serve_engine *se = r->se;
  pthread_mutex_lock(&se->mu);
  se->n_held--;
  req_unref_locked(r);
  pthread_mutex_unlock(&se->mu);
}
