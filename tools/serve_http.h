/* serve_http — the HTTP side of `pagedhybrid serve` on libmicrohttpd: routes, limits, API-key
 * check, the OpenAI endpoints (non-streaming and server-sent events), /v1/models, /health and
 * /metrics (docs/serve.md).
 *
 * Threads: libmicrohttpd runs one thread per connection (bounded by max_connections). A
 * generation request tokenizes its prompt on that thread, submits it to the engine thread
 * (serve_engine.h) and waits for tokens there, detokenizing with the request's own
 * ph_text_stream. While it waits it checks its socket every 100 ms: a client that closed the
 * connection cancels its request (its pages and state slot are freed at the next engine step),
 * as does a failed write of a stream (libmicrohttpd then ends the response and its free callback
 * cancels).
 */
#ifndef PH_TOOLS_SERVE_HTTP_H
#define PH_TOOLS_SERVE_HTTP_H

#include <stddef.h>
#include <stdint.h>

#include "pagedhybrid.h"
#include "serve_engine.h"
#include "serve_metrics.h"
#include "tools_api.h"

typedef struct serve_config {
  const char *host;           /* address to bind: a numeric IPv4/IPv6 address or a host name */
  int port;                   /* 0: a free port (serve_http_port tells which) */
  const char *api_key;        /* NULL: no check; else /v1/... requires "Bearer KEY" */
  const char *model_name;     /* what responses and /v1/models call the model */
  size_t max_body_bytes;      /* larger request bodies: 413 */
  int64_t max_prompt_tokens;  /* longer prompts: 400 (context_length_exceeded) */
  int64_t default_max_tokens; /* when a request gives none; 0: 16 for completions, the rest of
                                 the context for chat (OpenAI's defaults) */
  unsigned max_connections;   /* concurrent connections; more are closed at once */
  unsigned idle_timeout_s;    /* an idle connection is closed after this (0: never) */
} serve_config;

typedef struct serve_http serve_http;

/* Binds and starts serving. tok may be NULL (a model without tokenizer.json: only prompts given
 * as token ids are served). The pointers must outlive serve_http_stop. */
ph_status serve_http_start(const serve_config *cfg, serve_engine *se, const ph_tokenizer *tok,
                           const ph_engine_info *engine_info, serve_metrics *metrics,
                           serve_http **out, diag *d);
/* The port it listens on, and the URL ("http://127.0.0.1:8080", "http://[::1]:8080"). */
int serve_http_port(const serve_http *h);
const char *serve_http_url(const serve_http *h);
/* Stops accepting connections; requests arriving on open connections get 503. */
void serve_http_quiesce(serve_http *h);
/* Generation requests in flight (submitted and not yet answered in full). */
int64_t serve_http_active(serve_http *h);
/* Closes every connection (waiting for their threads) and frees h. NULL-safe. */
void serve_http_stop(serve_http *h);

#endif /* PH_TOOLS_SERVE_HTTP_H */
