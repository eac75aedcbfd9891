/* serve_metrics — the counters, gauges and the time-to-first-token histogram of `pagedhybrid
 * serve`, and their Prometheus text exposition (GET /metrics; docs/serve.md lists every name).
 *
 * Thread-safe: HTTP threads count responses, the engine thread counts tokens and sets the
 * gauges from each step; one mutex guards everything (each update is a few additions).
 * Owns no threads and allocates only in serve_metrics_render (the text it returns).
 */
#ifndef PH_TOOLS_SERVE_METRICS_H
#define PH_TOOLS_SERVE_METRICS_H

#include <stddef.h>
#include <stdint.h>

#include "pagedhybrid.h"

typedef struct serve_metrics serve_metrics;

/* NULL when out of memory. */
serve_metrics *serve_metrics_create(void);
void serve_metrics_free(serve_metrics *m); /* NULL-safe */

/* One HTTP response sent with status code (any of 100..599; others are counted as 0). */
void serve_metrics_http(serve_metrics *m, int code);
/* One generation request finished in the engine: its reason, prompt and generated token counts,
 * and its time to first token in seconds (< 0: it produced none). */
void serve_metrics_request(serve_metrics *m, ph_finish_reason reason, int64_t n_prompt,
                           int64_t n_generated, double ttft_s);
/* The engine's state after a step (running and waiting requests, pages, slots). */
void serve_metrics_step(serve_metrics *m, const ph_step_info *si);
/* The prefix cache's counters and gauges as ph_engine_prefix_cache_stats gave them (the engine
 * keeps the totals: the last call wins). */
void serve_metrics_prefix_cache(serve_metrics *m, const ph_prefix_cache_stats *pc);

/* Prometheus text format 0.0.4 of everything counted so far: malloc'ed, NUL-terminated (free
 * it); NULL when out of memory. */
char *serve_metrics_render(serve_metrics *m);

#endif /* PH_TOOLS_SERVE_METRICS_H */
