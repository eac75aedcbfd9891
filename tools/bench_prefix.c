/* bench_prefix — `pagedhybrid bench --scenario prefix|chat`. See bench_prefix.h. */
#include "bench_prefix.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "../bench/engine_steps.h"
#include "cli.h"
#include "engine_flags.h"

#define MAX_LOOP 1000000 /* steps one run may take before it is a bug */

/* Prompt streams of bench_prompt_token (request numbers): apart from each other and from
 * tools/cmd_bench.c's (below 1,000,000). */
#define PREFIX_STREAM 4000000u /* + repeat: the shared prefix */
#define SUFFIX_STREAM 5000000u /* + repeat x (PREFIX_MAX_REQUESTS + 1) + request: its suffix */
#define SYSTEM_STREAM 7000000u /* + seed: chat's system prompt */
#define USER_STREAM   8000000u /* + (seed x 256 + conversation) x 64 + turn: a user message */

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int64_t bench_prefix_cached_tokens(int64_t shared, int64_t n, int64_t align) {
  if (align <= 0) return 0;
  const int64_t m = shared < n - 1 ? shared : n - 1;
  return m > 0 ? m / align * align : 0;
}

int64_t bench_prefix_align(const ph_engine *e) {
  ph_engine_info in;
  if (ph_engine_get_info(e, &in) != PH_OK || in.params.prefill_chunk <= 0 || in.block_size <= 0)
    return 1;
  int64_t a = in.params.prefill_chunk, b = in.block_size;
  while (b) {
    const int64_t t = a % b;
    a = b;
    b = t;
  }
  return in.params.prefill_chunk / a * in.block_size;
}

/* ---- driving the engines -------------------------------------------------------------------- */

static void cache_sample(ph_engine *e, int64_t *peak) {
  ph_prefix_cache_stats st;
  if (!peak || ph_engine_prefix_cache_stats(e, &st) != PH_OK) return;
  if (st.page_bytes_held + st.snapshot_bytes > *peak)
    *peak = st.page_bytes_held + st.snapshot_bytes;
}

static ph_status cache_stats(ph_engine *e, ph_prefix_cache_stats *out, diag *d) {
  memset(out, 0, sizeof *out);
  return engine_call_failed("ph_engine_prefix_cache_stats", ph_engine_prefix_cache_stats(e, out),
                            d);
}

/* end's gauges, and its counters minus start's. */
static void cache_delta(const ph_prefix_cache_stats *start, const ph_prefix_cache_stats *end,
                        ph_prefix_cache_stats *out) {
  *out = *end;
  out->lookups -= start->lookups;
  out->hits -= start->hits;
  out->misses -= start->misses;
  out->tokens_looked_up -= start->tokens_looked_up;
  out->tokens_saved -= start->tokens_saved;
  out->pages_evicted -= start->pages_evicted;
  out->snapshots_taken -= start->snapshots_taken;
  out->snapshots_evicted -= start->snapshots_evicted;
}

/* One step; with peak, what the cache holds after it raises *peak. */
static ph_status step(ph_engine *e, int64_t *peak, diag *d) {
  FORWARD_IF_ERROR(engine_failed(e, ph_engine_step(e, NULL), d));
  cache_sample(e, peak);
  return PH_OK;
}

static ph_status context_fits(const ph_engine *e, int64_t need, const char *what, diag *d) {
  ph_engine_info in;
  FORWARD_IF_ERROR(engine_call_failed("ph_engine_get_info", ph_engine_get_info(e, &in), d));
  RETURN_ERROR_IF(need > in.max_context, d, PH_ERR_LIMIT,
                  "%s need %lld tokens of context, the context is %lld", what, (long long)need,
                  (long long)in.max_context);
  return PH_OK;
}

static int64_t vocab_of(const ph_engine *e) {
  ph_engine_info in;
  return ph_engine_get_info(e, &in) == PH_OK ? in.vocab_size : 1;
}

/* One request alone on e (greedy, one token, ignore_eos), stepped to its end: its info and its
 * token; then released. */
static ph_status run_one(ph_engine *e, const int64_t *prompt, int64_t n, int64_t *peak,
                         ph_request_info *in, int64_t *token, diag *d) {
  ph_sampling_params sp = ph_sampling_params_default();
  sp.max_new_tokens = 1;
  sp.ignore_eos = 1;
  uint64_t id = 0;
  FORWARD_IF_ERROR(engine_call_failed("ph_engine_add_request",
                                      ph_engine_add_request(e, prompt, n, &sp, &id), d));
  for (int64_t k = 0; ph_engine_busy(e); k++) {
    RETURN_ERROR_IF(k == MAX_LOOP, d, PH_ERR_INTERNAL, "a benchmark request never finished");
    FORWARD_IF_ERROR(step(e, peak, d));
  }
  FORWARD_IF_ERROR(
      engine_call_failed("ph_engine_request_info", ph_engine_request_info(e, id, in), d));
  if (in->finish == PH_FINISH_ERROR)
    return diag_set(d, in->status, "the engine refused a benchmark request: %s", in->message);
  int64_t nt = 0;
  const int64_t *t = ph_engine_request_tokens(e, id, &nt);
  RETURN_ERROR_IF(!t || nt != 1, d, PH_ERR_INTERNAL,
                  "a benchmark request generated %lld tokens, expected 1", (long long)nt);
  *token = t[0];
  return engine_call_failed("ph_engine_release_request", ph_engine_release_request(e, id), d);
}

/* ---- --scenario prefix ---------------------------------------------------------------------- */

static void fill_suffix(int64_t *prompt, int64_t P, int64_t U, int rep, int64_t i, int64_t V) {
  for (int64_t j = 0; j < U; j++)
    prompt[P + j] = bench_prompt_token(
        SUFFIX_STREAM + (uint64_t)rep * (PREFIX_MAX_REQUESTS + 1) + (uint64_t)i, (uint64_t)j, V);
}

ph_status bench_prefix_run(ph_engine *on, ph_engine *off, const prefix_config *c, prefix_result *r,
                           diag *d) {
  memset(r, 0, sizeof *r);
  const int64_t P = c->shared, U = c->unique, n = P + U, N = c->requests, R = c->repeats;
  const int64_t V = vocab_of(on);
  r->prompt = n;
  r->align = bench_prefix_align(on);
  r->expected_cached = bench_prefix_cached_tokens(P, n, r->align);
  FORWARD_IF_ERROR(
      context_fits(on, n + 1, "--shared-prefix + --unique and the token generated", d));
  int64_t *prompt = malloc((size_t)n * sizeof *prompt);
  double *cold = calloc((size_t)R, sizeof *cold), *offt = calloc((size_t)R, sizeof *offt);
  double *warm = calloc((size_t)(R * N), sizeof *warm), *one = calloc((size_t)N, sizeof *one);
  double *cached = calloc((size_t)(R * N), sizeof *cached);
  double *wc = calloc((size_t)R, sizeof *wc), *wo = calloc((size_t)R, sizeof *wo);
  ph_status s = prompt && cold && offt && warm && one && cached && wc && wo
                    ? PH_OK
                    : diag_set(d, PH_ERR_NO_MEMORY, "out of memory");
  ph_prefix_cache_stats st0, st1;
  if (s == PH_OK) s = cache_stats(on, &st0, d);
  r->warm_cached_min = INT64_MAX;
  for (int rep = 0; s == PH_OK && rep < R; rep++) {
    s = engine_failed(on, ph_engine_prefix_cache_clear(on), d);
    for (int64_t j = 0; j < P; j++)
      prompt[j] = bench_prompt_token(PREFIX_STREAM + (uint64_t)rep, (uint64_t)j, V);
    ph_request_info in;
    int64_t tok = 0, tok_off = 0;
    /* cold: the cache engine with nothing cached computes it all (and caches it) */
    fill_suffix(prompt, P, U, rep, 0, V);
    if (s == PH_OK) s = run_one(on, prompt, n, &r->cache.peak_held_bytes, &in, &tok, d);
    if (s != PH_OK) break;
    cold[rep] = in.time_to_first_token_ms;
    if (in.n_cached_tokens > r->cold_cached_max) r->cold_cached_max = in.n_cached_tokens;
    /* without the cache: what the first warm request computes from nothing */
    fill_suffix(prompt, P, U, rep, 1, V);
    s = run_one(off, prompt, n, NULL, &in, &tok_off, d);
    if (s != PH_OK) break;
    offt[rep] = in.time_to_first_token_ms;
    for (int64_t i = 1; s == PH_OK && i <= N; i++) {
      fill_suffix(prompt, P, U, rep, i, V);
      s = run_one(on, prompt, n, &r->cache.peak_held_bytes, &in, &tok, d);
      if (s != PH_OK) break;
      if (i == 1 && tok != tok_off)
        s = diag_set(d, PH_ERR_INTERNAL,
                     "repeat %d: the request served with %lld cached tokens generated %lld, the "
                     "same request without the cache %lld: the prefix cache changed the output",
                     rep, (long long)in.n_cached_tokens, (long long)tok, (long long)tok_off);
      warm[rep * N + i - 1] = one[i - 1] = in.time_to_first_token_ms;
      cached[rep * N + i - 1] = (double)in.n_cached_tokens;
      if (in.n_cached_tokens > 0) r->warm_hits++;
      if (in.n_cached_tokens < r->warm_cached_min) r->warm_cached_min = in.n_cached_tokens;
    }
    if (s != PH_OK) break;
    const double w = bench_median(one, N);
    wc[rep] = cold[rep] > 0 ? w / cold[rep] : 0.0;
    wo[rep] = offt[rep] > 0 ? w / offt[rep] : 0.0;
  }
  if (s == PH_OK) s = cache_stats(on, &st1, d);
  if (s == PH_OK) {
    cache_delta(&st0, &st1, &r->cache.delta);
    r->cold_ttft_ms = bench_median(cold, R);
    r->off_ttft_ms = bench_median(offt, R);
    r->warm_ttft_ms = bench_median(warm, R * N);
    r->warm_cached = bench_median(cached, R * N);
    r->warm_vs_cold = bench_median(wc, R);
    r->warm_vs_off = bench_median(wo, R);
  }
  free(prompt);
  free(cold);
  free(offt);
  free(warm);
  free(one);
  free(cached);
  free(wc);
  free(wo);
  return s;
}

/* ---- --scenario chat ------------------------------------------------------------------------ */

typedef struct chat_conv {
  int64_t *hist; /* [cap]: the system prompt, then each turn's user message and answer */
  int64_t n;     /* tokens of hist so far */
  int64_t turn;  /* the turn running */
  uint64_t id;
  int running;
} chat_conv;

/* One run of the workload on e. The first run ever (check 0) keeps every answer in
 * answers[N][M][A]; a later one (check 1) must generate the same. Per request (conversation ci,
 * turn t at [ci x M + t]): its TTFT, cached tokens and prompt length. */
typedef struct chat_pass {
  int64_t *answers; /* [N][M][A] */
  int check;
  double *ttft;               /* [N][M] */
  int64_t *cached, *n_prompt; /* [N][M] */
  int64_t *peak;              /* the cache engine: what it held, at most; NULL: not sampled */
  double wall_s;
} chat_pass;

/* The conversation's next turn: its user message appended, the whole history queued. */
static ph_status chat_add(ph_engine *e, const prefix_config *c, int64_t V, chat_conv *cv,
                          int64_t ci, diag *d) {
  const uint64_t stream =
      USER_STREAM +
      ((c->seed * CHAT_MAX_CONVERSATIONS + (uint64_t)ci) * CHAT_MAX_TURNS + (uint64_t)cv->turn);
  for (int64_t j = 0; j < c->user_tokens; j++)
    cv->hist[cv->n + j] = bench_prompt_token(stream, (uint64_t)j, V);
  cv->n += c->user_tokens;
  ph_sampling_params sp = ph_sampling_params_default();
  sp.max_new_tokens = c->answer_tokens;
  sp.ignore_eos = 1;
  FORWARD_IF_ERROR(engine_call_failed("ph_engine_add_request",
                                      ph_engine_add_request(e, cv->hist, cv->n, &sp, &cv->id), d));
  cv->running = 1;
  return PH_OK;
}

/* cv's request has finished: its figures and answer taken (or checked), released, and the
 * next turn queued. */
static ph_status chat_finished(ph_engine *e, const prefix_config *c, int64_t V, chat_conv *cv,
                               int64_t ci, const ph_request_info *in, chat_pass *ps, diag *d) {
  const int64_t M = c->turns, A = c->answer_tokens, at = ci * M + cv->turn;
  if (in->finish == PH_FINISH_ERROR)
    return diag_set(d, in->status, "the engine refused conversation %lld turn %lld: %s",
                    (long long)ci, (long long)cv->turn + 1, in->message);
  int64_t nt = 0;
  const int64_t *t = ph_engine_request_tokens(e, cv->id, &nt);
  RETURN_ERROR_IF(!t || nt != A, d, PH_ERR_INTERNAL,
                  "conversation %lld turn %lld generated %lld tokens, expected %lld", (long long)ci,
                  (long long)cv->turn + 1, (long long)nt, (long long)A);
  int64_t *ans = ps->answers + at * A;
  for (int64_t i = 0; ps->check && i < A; i++)
    RETURN_ERROR_IF(t[i] != ans[i], d, PH_ERR_INTERNAL,
                    "conversation %lld turn %lld: answer token %lld is %lld in this run (prefix "
                    "cache %s) and %lld in the first (cache on): the prefix cache changed the "
                    "output",
                    (long long)ci, (long long)cv->turn + 1, (long long)i, (long long)t[i],
                    ps->peak ? "on" : "off", (long long)ans[i]);
  if (!ps->check) memcpy(ans, t, (size_t)A * sizeof *t);
  memcpy(cv->hist + cv->n, t, (size_t)A * sizeof *t);
  cv->n += A;
  ps->ttft[at] = in->time_to_first_token_ms;
  ps->cached[at] = in->n_cached_tokens;
  ps->n_prompt[at] = in->n_prompt;
  FORWARD_IF_ERROR(
      engine_call_failed("ph_engine_release_request", ph_engine_release_request(e, cv->id), d));
  cv->running = 0;
  if (++cv->turn < M) FORWARD_IF_ERROR(chat_add(e, c, V, cv, ci, d));
  return PH_OK;
}

static ph_status chat_run_pass(ph_engine *e, const prefix_config *c, chat_conv *cv,
                               const int64_t *system, chat_pass *ps, diag *d) {
  const int64_t N = c->conversations, V = vocab_of(e);
  const double t0 = now_s();
  int64_t running = 0;
  for (int64_t ci = 0; ci < N; ci++) {
    memcpy(cv[ci].hist, system, (size_t)c->shared * sizeof *system);
    cv[ci].n = c->shared;
    cv[ci].turn = 0;
    FORWARD_IF_ERROR(chat_add(e, c, V, &cv[ci], ci, d));
    running++;
  }
  for (int64_t k = 0; running > 0; k++) {
    RETURN_ERROR_IF(k == MAX_LOOP, d, PH_ERR_INTERNAL, "the chat workload never finished");
    FORWARD_IF_ERROR(step(e, ps->peak, d));
    for (int64_t ci = 0; ci < N; ci++) {
      if (!cv[ci].running) continue;
      ph_request_info in;
      FORWARD_IF_ERROR(engine_call_failed("ph_engine_request_info",
                                          ph_engine_request_info(e, cv[ci].id, &in), d));
      if (in.finish == PH_FINISH_NONE) continue;
      FORWARD_IF_ERROR(chat_finished(e, c, V, &cv[ci], ci, &in, ps, d));
      if (!cv[ci].running) running--;
    }
  }
  ps->wall_s = now_s() - t0;
  return PH_OK;
}

static double mean_turn(const double *v, int64_t N, int64_t M, int64_t t) {
  double sum = 0;
  for (int64_t ci = 0; ci < N; ci++) sum += v[ci * M + t];
  return sum / (double)N;
}

ph_status bench_chat_run(ph_engine *on, ph_engine *off, const prefix_config *c, chat_result *r,
                         diag *d) {
  memset(r, 0, sizeof *r);
  const int64_t N = c->conversations, M = c->turns, A = c->answer_tokens, R = c->repeats;
  const int64_t cap = c->shared + M * (c->user_tokens + A), NM = N * M;
  FORWARD_IF_ERROR(context_fits(on, cap, "the last turn's prompt and answer", d));
  const int64_t V = vocab_of(on), align = bench_prefix_align(on);
  chat_conv *cv = calloc((size_t)N, sizeof *cv);
  int64_t *hist = malloc((size_t)(N * cap) * sizeof *hist);
  int64_t *system = malloc((size_t)(c->shared + 1) * sizeof *system);
  int64_t *answers = malloc((size_t)(NM * A) * sizeof *answers);
  double *ttft = calloc((size_t)(2 * R * NM), sizeof *ttft); /* [rep][on, off][N][M] */
  int64_t *cached = calloc((size_t)NM, sizeof *cached),
          *n_prompt = calloc((size_t)NM, sizeof *n_prompt);
  double *per = calloc((size_t)(2 * R * (M + 1)), sizeof *per); /* [on, off][turn, all][rep] */
  double *wall = calloc((size_t)(2 * R), sizeof *wall);         /* [on, off][rep] */
  ph_status s = cv && hist && system && answers && ttft && cached && n_prompt && per && wall
                    ? PH_OK
                    : diag_set(d, PH_ERR_NO_MEMORY, "out of memory");
  for (int64_t ci = 0; s == PH_OK && ci < N; ci++) cv[ci].hist = hist + ci * cap;
  for (int64_t j = 0; s == PH_OK && j < c->shared; j++)
    system[j] = bench_prompt_token(SYSTEM_STREAM + c->seed, (uint64_t)j, V);
  for (int64_t rep = 0; s == PH_OK && rep < R; rep++)
    for (int side = 0; s == PH_OK && side < 2; side++) {
      ph_engine *e = side == 0 ? on : off;
      ph_prefix_cache_stats st0, st1;
      int64_t peak = 0;
      chat_pass ps = {answers,
                      rep > 0 || side > 0,
                      ttft + (rep * 2 + side) * NM,
                      cached,
                      n_prompt,
                      side == 0 ? &peak : NULL,
                      0.0};
      if (side == 0) s = engine_failed(on, ph_engine_prefix_cache_clear(on), d);
      if (s == PH_OK && side == 0) s = cache_stats(on, &st0, d);
      if (s == PH_OK) s = chat_run_pass(e, c, cv, system, &ps, d);
      if (s == PH_OK && side == 0) s = cache_stats(on, &st1, d);
      if (s != PH_OK) break;
      wall[side * R + rep] = ps.wall_s;
      double all = 0;
      for (int64_t t = 0; t < M; t++) {
        per[(side * (M + 1) + t) * R + rep] = mean_turn(ps.ttft, N, M, t);
        all += per[(side * (M + 1) + t) * R + rep];
      }
      per[(side * (M + 1) + M) * R + rep] = all / (double)M;
      if (side == 0) {
        cache_delta(&st0, &st1, &r->cache.delta);
        r->cache.peak_held_bytes = peak;
        for (int64_t t = 0; t < M; t++) {
          double pt = 0, ct = 0, et = 0;
          for (int64_t ci = 0; ci < N; ci++) {
            const int64_t x = ci * M + t;
            pt += (double)n_prompt[x];
            ct += (double)cached[x];
            if (t > 0)
              et += (double)bench_prefix_cached_tokens(n_prompt[x - 1] - 1, n_prompt[x], align);
          }
          r->turn[t].prompt_tokens = pt / (double)N;
          r->turn[t].cached_tokens = ct / (double)N;
          r->turn[t].expected_cached = et / (double)N;
        }
      }
    }
  if (s == PH_OK) {
    r->requests = NM;
    for (int64_t x = 0; x < NM; x++) r->prompt_tokens += n_prompt[x];
    for (int64_t t = 0; t < M; t++) {
      r->turn[t].ttft_on_ms = bench_median(per + t * R, R);
      r->turn[t].ttft_off_ms = bench_median(per + ((M + 1) + t) * R, R);
    }
    r->ttft_on_ms = bench_median(per + M * R, R);
    r->ttft_off_ms = bench_median(per + ((M + 1) + M) * R, R);
    r->on_s = bench_median(wall, R);
    r->off_s = bench_median(wall + R, R);
  }
  free(cv);
  free(hist);
  free(system);
  free(answers);
  free(ttft);
  free(cached);
  free(n_prompt);
  free(per);
  free(wall);
  return s;
}

/* ---- reporting ------------------------------------------------------------------------------ */

static double ratio(double a, double b) { return b > 0 ? a / b : 0.0; }

static json_t *real_or_null(int ok, double x) { return ok ? json_real(x) : json_null(); }

static json_t *cache_json(const prefix_cache_figures *f) {
  const ph_prefix_cache_stats *s = &f->delta;
  json_t *o = json_object();
  json_object_set_new(o, "enabled", json_boolean(s->enabled));
  json_object_set_new(o, "lookups", json_integer(s->lookups));
  json_object_set_new(o, "hits", json_integer(s->hits));
  json_object_set_new(o, "misses", json_integer(s->misses));
  json_object_set_new(o, "hit_rate",
                      real_or_null(s->lookups > 0, ratio((double)s->hits, (double)s->lookups)));
  json_object_set_new(o, "tokens_looked_up", json_integer(s->tokens_looked_up));
  json_object_set_new(o, "tokens_saved", json_integer(s->tokens_saved));
  json_object_set_new(o, "saved_share",
                      real_or_null(s->tokens_looked_up > 0,
                                   ratio((double)s->tokens_saved, (double)s->tokens_looked_up)));
  json_object_set_new(o, "pages_cached", json_integer(s->pages_cached));
  json_object_set_new(o, "pages_evictable", json_integer(s->pages_evictable));
  json_object_set_new(o, "page_bytes_held", json_integer(s->page_bytes_held));
  json_object_set_new(o, "pages_evicted", json_integer(s->pages_evicted));
  json_object_set_new(o, "snapshots", json_integer(s->snapshots));
  json_object_set_new(o, "snapshots_max", json_integer(s->snapshots_max));
  json_object_set_new(o, "snapshot_bytes", json_integer(s->snapshot_bytes));
  json_object_set_new(o, "snapshot_budget_bytes", json_integer(s->snapshot_budget_bytes));
  json_object_set_new(o, "snapshots_taken", json_integer(s->snapshots_taken));
  json_object_set_new(o, "snapshots_evicted", json_integer(s->snapshots_evicted));
  json_object_set_new(o, "held_bytes", json_integer(s->page_bytes_held + s->snapshot_bytes));
  json_object_set_new(o, "peak_held_bytes", json_integer(f->peak_held_bytes));
  return o;
}

/* One request kind's prefill figures: n prompt tokens, `cached` of them not computed. */
static json_t *request_json(double ttft_ms, double n, double cached, const prefix_peaks *pk) {
  const double computed_tok_s = ratio(n - cached, ttft_ms * 1e-3);
  const double gflops = computed_tok_s * 2.0 * pk->parameters / 1e9;
  json_t *o = json_object();
  json_object_set_new(o, "ttft_ms", json_real(ttft_ms));
  json_object_set_new(o, "cached_tokens", json_real(cached));
  json_object_set_new(o, "tok_s", json_real(ratio(n, ttft_ms * 1e-3)));
  json_object_set_new(o, "computed_tok_s", json_real(computed_tok_s));
  json_object_set_new(o, "gflops", json_real(gflops));
  json_object_set_new(o, "vs_fma", real_or_null(pk->fma_gflops > 0, ratio(gflops, pk->fma_gflops)));
  json_object_set_new(o, "vs_compute",
                      real_or_null(pk->peak_gflops > 0, ratio(gflops, pk->peak_gflops)));
  return o;
}

json_t *bench_prefix_json(const prefix_config *c, const prefix_result *r, const prefix_peaks *pk) {
  json_t *o = json_object();
  const double n = (double)r->prompt;
  json_object_set_new(o, "shared_tokens", json_integer(c->shared));
  json_object_set_new(o, "unique_tokens", json_integer(c->unique));
  json_object_set_new(o, "prompt_tokens", json_integer(r->prompt));
  json_object_set_new(o, "requests", json_integer(c->requests));
  json_object_set_new(o, "align_tokens", json_integer(r->align));
  json_object_set_new(o, "expected_cached_tokens", json_integer(r->expected_cached));
  json_object_set_new(o, "expected_cached_share", json_real(ratio((double)r->expected_cached, n)));
  json_object_set_new(o, "expected_ttft_ratio",
                      json_real(ratio(n - (double)r->expected_cached, n)));
  json_object_set_new(o, "without_cache", request_json(r->off_ttft_ms, n, 0, pk));
  json_t *cold = request_json(r->cold_ttft_ms, n, 0, pk);
  json_object_set_new(cold, "cached_tokens", json_integer(r->cold_cached_max));
  json_object_set_new(o, "cold", cold);
  json_t *warm = request_json(r->warm_ttft_ms, n, r->warm_cached, pk);
  json_object_set_new(warm, "cached_tokens_min", json_integer(r->warm_cached_min));
  json_object_set_new(warm, "hits", json_integer(r->warm_hits));
  json_object_set_new(warm, "count", json_integer(c->requests * c->repeats));
  json_object_set_new(o, "warm", warm);
  json_object_set_new(o, "ttft_ratio_warm_cold", json_real(r->warm_vs_cold));
  json_object_set_new(o, "ttft_ratio_warm_without", json_real(r->warm_vs_off));
  json_object_set_new(o, "exact", json_true()); /* a cached token that differs fails the bench */
  json_object_set_new(o, "cache", cache_json(&r->cache));
  return o;
}

json_t *bench_chat_json(const prefix_config *c, const chat_result *r) {
  json_t *o = json_object(), *turns = json_array();
  json_object_set_new(o, "conversations", json_integer(c->conversations));
  json_object_set_new(o, "turns", json_integer(c->turns));
  json_object_set_new(o, "shared_tokens", json_integer(c->shared));
  json_object_set_new(o, "user_tokens", json_integer(c->user_tokens));
  json_object_set_new(o, "answer_tokens", json_integer(c->answer_tokens));
  json_object_set_new(o, "seed", json_integer((json_int_t)c->seed));
  json_object_set_new(o, "requests", json_integer(r->requests));
  json_object_set_new(o, "prompt_tokens", json_integer(r->prompt_tokens));
  for (int64_t t = 0; t < c->turns; t++) {
    const chat_turn_result *x = &r->turn[t];
    json_t *e = json_object();
    json_object_set_new(e, "turn", json_integer(t + 1));
    json_object_set_new(e, "prompt_tokens", json_real(x->prompt_tokens));
    json_object_set_new(e, "cached_tokens", json_real(x->cached_tokens));
    json_object_set_new(e, "expected_cached_tokens", json_real(x->expected_cached));
    json_object_set_new(e, "ttft_ms", json_real(x->ttft_on_ms));
    json_object_set_new(e, "ttft_ms_without", json_real(x->ttft_off_ms));
    json_object_set_new(e, "ttft_ratio", json_real(ratio(x->ttft_on_ms, x->ttft_off_ms)));
    json_object_set_new(e, "expected_ttft_ratio",
                        json_real(ratio(x->prompt_tokens - x->expected_cached, x->prompt_tokens)));
    json_array_append_new(turns, e);
  }
  json_object_set_new(o, "per_turn", turns);
  json_object_set_new(o, "ttft_ms", json_real(r->ttft_on_ms));
  json_object_set_new(o, "ttft_ms_without", json_real(r->ttft_off_ms));
  json_object_set_new(o, "ttft_ratio", json_real(ratio(r->ttft_on_ms, r->ttft_off_ms)));
  json_object_set_new(o, "workload_s", json_real(r->on_s));
  json_object_set_new(o, "workload_s_without", json_real(r->off_s));
  json_object_set_new(o, "exact", json_true()); /* an answer that differs fails the bench */
  json_object_set_new(o, "cache", cache_json(&r->cache));
  return o;
}

static void print_cache(const prefix_cache_figures *f) {
  const ph_prefix_cache_stats *s = &f->delta;
  char b1[CLI_BYTES_BUF], b2[CLI_BYTES_BUF], b3[CLI_BYTES_BUF], b4[CLI_BYTES_BUF],
      b5[CLI_BYTES_BUF];
  if (!s->enabled) {
    printf("cache     reports itself off (ph_prefix_cache_stats.enabled 0): nothing was cached\n");
    return;
  }
  printf("cache     lookups %lld, hits %lld (%.3f); prompt tokens looked up %lld, saved %lld "
         "(%.3f)\n",
         (long long)s->lookups, (long long)s->hits, ratio((double)s->hits, (double)s->lookups),
         (long long)s->tokens_looked_up, (long long)s->tokens_saved,
         ratio((double)s->tokens_saved, (double)s->tokens_looked_up));
  printf("          held at the end %s: %d snapshots (%s; budget %d, %s), %d evictable pages "
         "(%s); peak %s; snapshots taken %lld, evicted %lld; pages evicted %lld\n",
         cli_bytes((uint64_t)(s->page_bytes_held + s->snapshot_bytes), b1, sizeof b1),
         (int)s->snapshots, cli_bytes((uint64_t)s->snapshot_bytes, b2, sizeof b2),
         (int)s->snapshots_max, cli_bytes((uint64_t)s->snapshot_budget_bytes, b3, sizeof b3),
         (int)s->pages_evictable, cli_bytes((uint64_t)s->page_bytes_held, b4, sizeof b4),
         cli_bytes((uint64_t)f->peak_held_bytes, b5, sizeof b5), (long long)s->snapshots_taken,
         (long long)s->snapshots_evicted, (long long)s->pages_evicted);
}

static void print_request(const char *name, double ttft_ms, double n, double cached,
                          const prefix_peaks *pk) {
  const double computed = ratio(n - cached, ttft_ms * 1e-3);
  const double gflops = computed * 2.0 * pk->parameters / 1e9;
  printf("          %-15s %11.2f %13.1f %15.1f %9.3f", name, ttft_ms, ratio(n, ttft_ms * 1e-3),
         computed, gflops);
  if (pk->fma_gflops > 0) printf(" %12.4f", gflops / pk->fma_gflops);
  if (pk->peak_gflops > 0 && strcmp(pk->peak_name, "f32 FMA") != 0)
    printf(" %12.4f", gflops / pk->peak_gflops);
  printf(" %8.0f\n", cached);
}

void bench_prefix_print(const prefix_config *c, const prefix_result *r, const prefix_peaks *pk) {
  const double n = (double)r->prompt;
  const int other = pk->peak_gflops > 0 && strcmp(pk->peak_name, "f32 FMA") != 0;
  printf("prefix    %lld shared + %lld unique tokens = %lld-token prompts; per repeat a cold and "
         "%lld warm requests on the cache engine (cleared first), one on the engine without\n",
         (long long)c->shared, (long long)c->unique, (long long)r->prompt, (long long)c->requests);
  printf("          expected: %lld of %lld tokens cached (%.3f; multiples of lcm(prefill_chunk, "
         "page) = %lld), TTFT ratio %.4f\n",
         (long long)r->expected_cached, (long long)r->prompt, ratio((double)r->expected_cached, n),
         (long long)r->align, ratio(n - (double)r->expected_cached, n));
  printf("          request             TTFT ms  prompt tok/s  computed tok/s   GFLOP/s%s%s%s"
         "   cached\n",
         pk->fma_gflops > 0 ? "  of FMA peak" : "", other ? "  of " : "",
         other ? pk->peak_name : "");
  print_request("without cache", r->off_ttft_ms, n, 0, pk);
  print_request("cold (cleared)", r->cold_ttft_ms, n, (double)r->cold_cached_max, pk);
  print_request("warm", r->warm_ttft_ms, n, r->warm_cached, pk);
  printf("          TTFT ratio warm/cold %.4f, warm/without %.4f (expected %.4f); %lld of %lld "
         "warm requests served from the cache; first tokens equal with and without\n",
         r->warm_vs_cold, r->warm_vs_off, ratio(n - (double)r->expected_cached, n),
         (long long)r->warm_hits, (long long)(c->requests * c->repeats));
  print_cache(&r->cache);
}

void bench_chat_print(const prefix_config *c, const chat_result *r) {
  printf("chat      %lld conversations x %lld turns: system prompt %lld, user messages %lld, "
         "answers %lld tokens (greedy), seed %llu; a turn is queued when the previous answer "
         "ends; all answers equal with and without the cache\n",
         (long long)c->conversations, (long long)c->turns, (long long)c->shared,
         (long long)c->user_tokens, (long long)c->answer_tokens, (unsigned long long)c->seed);
  printf("          turn    prompt    cached  expected  TTFT ms cache  TTFT ms none   ratio  "
         "expected\n");
  for (int64_t t = 0; t < c->turns; t++) {
    const chat_turn_result *x = &r->turn[t];
    printf("          %4lld  %8.1f  %8.1f  %8.1f  %13.2f  %12.2f  %6.3f  %8.3f\n", (long long)t + 1,
           x->prompt_tokens, x->cached_tokens, x->expected_cached, x->ttft_on_ms, x->ttft_off_ms,
           ratio(x->ttft_on_ms, x->ttft_off_ms),
           ratio(x->prompt_tokens - x->expected_cached, x->prompt_tokens));
  }
  printf("          all   %8.1f  %8s  %8s  %13.2f  %12.2f  %6.3f   (mean TTFT per request)\n",
         ratio((double)r->prompt_tokens, (double)r->requests), "", "", r->ttft_on_ms,
         r->ttft_off_ms, ratio(r->ttft_on_ms, r->ttft_off_ms));
  printf("          workload %.2f s with the cache, %.2f s without (%lld requests, %lld prompt "
         "tokens)\n",
         r->on_s, r->off_s, (long long)r->requests, (long long)r->prompt_tokens);
  print_cache(&r->cache);
}
