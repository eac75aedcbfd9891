/* serve_metrics — see serve_metrics.h. */
#include "serve_metrics.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "serve_buf.h"

/* Time-to-first-token bucket bounds in seconds (Prometheus "le"; +Inf is implicit). */
static const double TTFT_BOUNDS[] = {0.005, 0.01, 0.025, 0.05, 0.1,  0.25, 0.5,
                                     1.0,   2.5,  5.0,   10.0, 30.0, 60.0};
#define N_TTFT (sizeof TTFT_BOUNDS / sizeof TTFT_BOUNDS[0])

struct serve_metrics {
  pthread_mutex_t mu;
  uint64_t http[600]; /* responses by status code; [0]: a code outside 100..599 */
  uint64_t finish[PH_FINISH_ERROR + 1];
  uint64_t prompt_tokens, generated_tokens;
  uint64_t ttft_buckets[N_TTFT + 1]; /* non-cumulative; [N_TTFT]: above the last bound */
  uint64_t ttft_count;
  double ttft_sum;
  ph_step_info last; /* gauges */
  uint64_t steps;
  ph_prefix_cache_stats prefix; /* the engine's, as of the last step */
};

serve_metrics *serve_metrics_create(void) {
  serve_metrics *m = calloc(1, sizeof *m);
  if (m && pthread_mutex_init(&m->mu, NULL) != 0) {
    free(m);
    return NULL;
  }
  return m;
}

void serve_metrics_free(serve_metrics *m) {
  if (!m) return;
  pthread_mutex_destroy(&m->mu);
  free(m);
}

void serve_metrics_http(serve_metrics *m, int code) {
  pthread_mutex_lock(&m->mu);
  m->http[code >= 100 && code <= 599 ? code : 0]++;
  pthread_mutex_unlock(&m->mu);
}

void serve_metrics_request(serve_metrics *m, ph_finish_reason reason, int64_t n_prompt,
                           int64_t n_generated, double ttft_s) {
  pthread_mutex_lock(&m->mu);
  if (reason >= PH_FINISH_LENGTH && reason <= PH_FINISH_ERROR) m->finish[reason]++;
  m->prompt_tokens += n_prompt > 0 ? (uint64_t)n_prompt : 0;
  m->generated_tokens += n_generated > 0 ? (uint64_t)n_generated : 0;
  if (ttft_s >= 0) {
    size_t b = 0;
    while (b < N_TTFT && ttft_s > TTFT_BOUNDS[b]) b++;
    m->ttft_buckets[b]++;
    m->ttft_count++;
    m->ttft_sum += ttft_s;
  }
  pthread_mutex_unlock(&m->mu);
}

void serve_metrics_step(serve_metrics *m, const ph_step_info *si) {
  pthread_mutex_lock(&m->mu);
  m->last = *si;
  m->steps++;
  pthread_mutex_unlock(&m->mu);
}

void serve_metrics_prefix_cache(serve_metrics *m, const ph_prefix_cache_stats *pc) {
  pthread_mutex_lock(&m->mu);
  m->prefix = *pc;
  pthread_mutex_unlock(&m->mu);
}

/* The prefix cache's series (docs/serve.md "Metrics"); all 0 when it is off. */
static void render_prefix_cache(sbuf *b, const ph_prefix_cache_stats *pc) {
  const struct {
    const char *name, *type, *help;
    long long v;
  } rows[] = {
      {"enabled", "gauge", "1 when the prefix cache is on (the default), 0 with --no-prefix-cache.",
       pc->enabled},
      {"lookups_total", "counter",
       "Admissions that looked for a cached prompt prefix (a preempted request looks again).",
       pc->lookups},
      {"hits_total", "counter", "Lookups that found a cached prefix.", pc->hits},
      {"misses_total", "counter", "Lookups that found none.", pc->misses},
      {"tokens_looked_up_total", "counter", "Prompt tokens of the admissions that looked.",
       pc->tokens_looked_up},
      {"tokens_saved_total", "counter", "Prompt tokens served from the cache, not computed.",
       pc->tokens_saved},
      {"pages_cached", "gauge", "KV pages findable by their tokens, held by requests or not.",
       pc->pages_cached},
      {"pages_evictable", "gauge",
       "Cached KV pages no request holds, kept until their memory is needed.", pc->pages_evictable},
      {"page_bytes_held", "gauge", "Memory of the evictable cached KV pages.", pc->page_bytes_held},
      {"pages_evicted_total", "counter", "Cached KV pages whose memory was taken back.",
       pc->pages_evicted},
      {"snapshots", "gauge", "Linear-layer state snapshots held.", pc->snapshots},
      {"snapshots_max", "gauge", "State snapshots the budget holds.", pc->snapshots_max},
      {"snapshot_bytes", "gauge", "Memory of the state snapshots held.", pc->snapshot_bytes},
      {"snapshot_budget_bytes", "gauge", "Memory budget of the state snapshots.",
       pc->snapshot_budget_bytes},
      {"snapshots_taken_total", "counter", "State snapshots taken.", pc->snapshots_taken},
      {"snapshots_evicted_total", "counter", "State snapshots dropped to make room.",
       pc->snapshots_evicted},
  };
  for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++)
    sbuf_printf(b,
                "# HELP pagedhybrid_prefix_cache_%s %s\n# TYPE pagedhybrid_prefix_cache_%s "
                "%s\npagedhybrid_prefix_cache_%s %lld\n",
                rows[i].name, rows[i].help, rows[i].name, rows[i].type, rows[i].name, rows[i].v);
}

char *serve_metrics_render(serve_metrics *m) {
  pthread_mutex_lock(&m->mu);
  serve_metrics s = *m; /* a consistent snapshot; the copied mutex is never used */
  pthread_mutex_unlock(&m->mu);
  sbuf b = {0};
  sbuf_puts(&b, "# HELP pagedhybrid_http_responses_total HTTP responses sent, by status code.\n"
                "# TYPE pagedhybrid_http_responses_total counter\n");
  for (int c = 0; c < 600; c++)
    if (s.http[c])
      sbuf_printf(&b, "pagedhybrid_http_responses_total{code=\"%d\"} %llu\n", c,
                  (unsigned long long)s.http[c]);
  sbuf_puts(&b, "# HELP pagedhybrid_requests_total Generation requests finished in the engine, "
                "by finish reason.\n"
                "# TYPE pagedhybrid_requests_total counter\n");
  for (int r = PH_FINISH_LENGTH; r <= PH_FINISH_ERROR; r++)
    sbuf_printf(&b, "pagedhybrid_requests_total{reason=\"%s\"} %llu\n",
                ph_finish_reason_name((ph_finish_reason)r), (unsigned long long)s.finish[r]);
  sbuf_printf(&b,
              "# HELP pagedhybrid_prompt_tokens_total Prompt tokens of finished requests.\n"
              "# TYPE pagedhybrid_prompt_tokens_total counter\n"
              "pagedhybrid_prompt_tokens_total %llu\n"
              "# HELP pagedhybrid_generation_tokens_total Tokens generated by finished requests.\n"
              "# TYPE pagedhybrid_generation_tokens_total counter\n"
              "pagedhybrid_generation_tokens_total %llu\n"
              "# HELP pagedhybrid_engine_steps_total Engine steps run.\n"
              "# TYPE pagedhybrid_engine_steps_total counter\n"
              "pagedhybrid_engine_steps_total %llu\n",
              (unsigned long long)s.prompt_tokens, (unsigned long long)s.generated_tokens,
              (unsigned long long)s.steps);
  const struct {
    const char *name, *help;
    long long v;
  } gauges[] = {
      {"requests_running", "Requests holding pages and a state slot after the last step.",
       s.last.n_running},
      {"requests_waiting", "Requests queued for admission after the last step.", s.last.n_waiting},
      {"kv_pages_used", "KV cache pages in use after the last step.", s.last.pages_used},
      {"kv_pages_total", "KV cache pages requests can hold.", s.last.pages_total},
      {"state_slots_used", "Fixed-state slots in use after the last step.", s.last.slots_used},
      {"state_slots_total", "Fixed-state slots.", s.last.slots_total},
  };
  for (size_t i = 0; i < sizeof gauges / sizeof gauges[0]; i++)
    sbuf_printf(&b, "# HELP pagedhybrid_%s %s\n# TYPE pagedhybrid_%s gauge\npagedhybrid_%s %lld\n",
                gauges[i].name, gauges[i].help, gauges[i].name, gauges[i].name, gauges[i].v);
  render_prefix_cache(&b, &s.prefix);
  sbuf_puts(&b, "# HELP pagedhybrid_time_to_first_token_seconds Time from a request's arrival "
                "at the engine to its first token.\n"
                "# TYPE pagedhybrid_time_to_first_token_seconds histogram\n");
  uint64_t cum = 0;
  for (size_t k = 0; k < N_TTFT; k++) {
    cum += s.ttft_buckets[k];
    sbuf_printf(&b, "pagedhybrid_time_to_first_token_seconds_bucket{le=\"%g\"} %llu\n",
                TTFT_BOUNDS[k], (unsigned long long)cum);
  }
  sbuf_printf(&b,
              "pagedhybrid_time_to_first_token_seconds_bucket{le=\"+Inf\"} %llu\n"
              "pagedhybrid_time_to_first_token_seconds_sum %.6f\n"
              "pagedhybrid_time_to_first_token_seconds_count %llu\n",
              (unsigned long long)s.ttft_count, s.ttft_sum, (unsigned long long)s.ttft_count);
  if (b.failed) {
    sbuf_free(&b);
    return NULL;
  }
  return b.data;
}
