/* pagedhybrid serve --model DIR|PKG [--host 127.0.0.1] [--port 8080] — an OpenAI-compatible HTTP
 * server on the continuous-batching engine (docs/serve.md).
 *
 * Opens the engine and the model's tokenizer (tokenizer.json; without one, only completion
 * prompts given as token ids are served), starts the engine thread (serve_engine.h) and the HTTP
 * daemon (serve_http.h), prints "listening on URL" on stdout (one line, flushed: tests and
 * scripts read the port from it, which --port 0 picks), then waits for SIGINT or SIGTERM.
 * Shutdown: stop accepting connections (requests on open connections get 503), let the requests
 * in flight finish for up to --shutdown-timeout seconds, abort what is left (their clients get
 * an error), close every connection, exit 0. A second signal skips the wait.
 * The signals are blocked in every thread and taken with sigtimedwait by the main thread only.
 */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli.h"
#include "engine_flags.h"
#include "pagedhybrid.h"
#include "quant_flags.h"
#include "serve_engine.h"
#include "serve_http.h"
#include "serve_metrics.h"
#include "tools_api.h"

static const cli_option OPTIONS[] = {
    {"model", "DIR|PKG", "Hugging Face checkpoint directory, or a package exported --layout paged"},
    {"host", "ADDR", "address to listen on (default 127.0.0.1)"},
    {"port", "N", "TCP port, 0 for a free one (default 8080)"},
    {"api-key", "KEY", "require \"Authorization: Bearer KEY\" on /v1/... (default: none)"},
    {"served-model-name", "NAME", "the model's name in responses (default: the model folder's)"},
    {"max-body-bytes", "N", "largest request body (default 4194304); larger: 413"},
    {"max-prompt-tokens", "N", "longest prompt in tokens (default: the context minus one)"},
    {"default-max-tokens", "N",
     "tokens to generate when a request says none (default: 16 for completions, the rest of "
     "the context for chat)"},
    {"max-connections", "N", "concurrent connections (default 256); more are closed at once"},
    {"idle-timeout", "S", "close a connection idle this many seconds (default 60; 0: never)"},
    {"shutdown-timeout", "S",
     "on SIGINT/SIGTERM, seconds running requests may take to finish (default 30)"},
    {"max-batch", "N", "sequences per step (default: the package's, capped at 64, else 16)"},
    {"max-tokens", "N", "token budget per engine step (default: the package's, else 2048)"},
    {"prefill-chunk", "N", "prompt tokens per request per step (default min(256, max-tokens))"},
    {"num-blocks", "N", "KV pages including the null page (default: from --memory)"},
    {"memory", "MiB", "budget for KV pages + state slots when --num-blocks is not given (1024)"},
    {"max-requests", "N", "requests holding state at once (default: --max-batch)"},
    {"threads", "N", "worker threads (default: all CPUs)"},
    {"block-size", "N", "checkpoint only: tokens per KV page (power of two >= 16, default 16)"},
    {"max-context", "N", "checkpoint only: context bound (default min(max_position, 32768))"},
    {"io-dtype", "f32|f16|bf16", "checkpoint only: activation/KV dtype of the graph (default f32)"},
    {"precision", "f32|bf16|auto",
     "linear-layer arithmetic: f32, or bf16 inputs and bf16 dot products summed in f32 "
     "(default auto: bf16 for a bf16 checkpoint; docs/precision.md)"},
    ENGINE_FLAG_PREFIX_CACHE_OPTIONS,
    QUANT_FLAG_OPTIONS,
};
#define N_OPTIONS ((int)(sizeof OPTIONS / sizeof OPTIONS[0]))

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* The last path component of dir, without trailing slashes, into out. */
static void base_name(const char *dir, char *out, size_t cap) {
  size_t end = strlen(dir);
  while (end > 1 && dir[end - 1] == '/') end--;
  size_t start = end;
  while (start > 0 && dir[start - 1] != '/') start--;
  snprintf(out, cap, "%.*s", (int)(end - start), dir + start);
  if (!out[0]) snprintf(out, cap, "model");
}

/* Waits for SIGINT/SIGTERM, then drains (see the top of the file). */
static void wait_and_drain(serve_http *h, serve_engine *se, const sigset_t *sigs,
                           double timeout_s) {
  int sig;
  while (sigwait(sigs, &sig) != 0) {
  }
  fprintf(stderr, "serve: %s: no new connections; waiting up to %.0f s for %lld request(s)\n",
          sig == SIGINT ? "SIGINT" : "SIGTERM", timeout_s, (long long)serve_http_active(h));
  serve_http_quiesce(h);
  const double until = now_s() + timeout_s;
  const struct timespec slice = {0, 50 * 1000 * 1000};
  while (serve_http_active(h) > 0 && now_s() < until) {
    siginfo_t info;
    if (sigtimedwait(sigs, &info, &slice) >= 0) {
      fprintf(stderr, "serve: second signal: not waiting any longer\n");
      break;
    }
  }
  const int64_t left = serve_http_active(h);
  if (left > 0) {
    fprintf(stderr, "serve: aborting %lld request(s) still running\n", (long long)left);
    serve_engine_abort_all(se);
    /* their clients get the abort (an error object, a stream's error event) before the
     * connections close; bounded, as a client may not be reading */
    const double until_abort = now_s() + 10;
    while (serve_http_active(h) > 0 && now_s() < until_abort) nanosleep(&slice, NULL);
  }
}

int cmd_serve(int argc, char **argv) {
  cli_args a;
  int rc = cli_parse(&a, "serve", OPTIONS, N_OPTIONS, argc, argv);
  if (rc) return rc;
  if (a.help) {
    cli_print_help(
        &a, "--model DIR|PKG [--host 127.0.0.1] [--port 8080] [options]",
        "An OpenAI-compatible HTTP server on the continuous-batching engine:\n"
        "POST /v1/completions and /v1/chat/completions (streaming with \"stream\": true),\n"
        "GET /v1/models, /health and /metrics (Prometheus). Prints \"listening on URL\" on\n"
        "stdout once it accepts connections; SIGINT/SIGTERM let running requests finish\n"
        "(up to --shutdown-timeout) and exit 0 (docs/serve.md).");
    return CLI_EXIT_OK;
  }
  if (a.n_positional) return cli_usage_error(&a, "unexpected argument \"%s\"", a.positional[0]);
  const char *dir = cli_get(&a, "model");
  if (!dir) return cli_usage_error(&a, "--model DIR|PKG is required");
  ph_engine_params p = ph_engine_params_default();
  int64_t port = 8080, max_body = 4 << 20, max_prompt = 0, default_max = 0, max_conn = 256,
          idle = 60, shutdown_s = 30, max_requests = 0;
  if ((rc = engine_flags_parse(&a, &p)) || (rc = quant_flags_parse(&a, &p.quant)) ||
      (rc = cli_get_int(&a, "port", 0, 65535, &port)) ||
      (rc = cli_get_int(&a, "max-body-bytes", 1, (int64_t)1 << 30, &max_body)) ||
      (rc = cli_get_int(&a, "max-prompt-tokens", 1, (int64_t)1 << 24, &max_prompt)) ||
      (rc = cli_get_int(&a, "default-max-tokens", 1, (int64_t)1 << 24, &default_max)) ||
      (rc = cli_get_int(&a, "max-connections", 1, 65536, &max_conn)) ||
      (rc = cli_get_int(&a, "idle-timeout", 0, 86400, &idle)) ||
      (rc = cli_get_int(&a, "shutdown-timeout", 0, 86400, &shutdown_s)) ||
      (rc = cli_get_int(&a, "max-requests", 1, 1 << 20, &max_requests)))
    return rc;
  p.max_requests = (int32_t)max_requests;
  const char *key = cli_get(&a, "api-key");
  if (key && !key[0]) return cli_usage_error(&a, "--api-key must not be empty");
  if ((rc = cli_check_model_path(dir))) return rc;
  char name[256];
  const char *served = cli_get(&a, "served-model-name");
  if (served && !served[0]) return cli_usage_error(&a, "--served-model-name must not be empty");
  base_name(dir, name, sizeof name);
  if (served) snprintf(name, sizeof name, "%s", served);

  diag d;
  diag_clear(&d);
  ph_status s = PH_OK;
  if (engine_flags_checkpoint_only(&a) && onnx_is_package(dir))
    s = diag_set(&d, PH_ERR_INVALID_ARGUMENT,
                 "--block-size, --max-context and --io-dtype apply to a checkpoint; the package "
                 "%s fixes them in its graph",
                 dir);
  /* every thread started from here on inherits the mask: only sigwait sees the signals */
  sigset_t sigs;
  sigemptyset(&sigs);
  sigaddset(&sigs, SIGINT);
  sigaddset(&sigs, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &sigs, NULL);
  signal(SIGPIPE, SIG_IGN); /* a client gone mid-write is an error return, not a signal */

  ph_engine *e = NULL;
  ph_tokenizer *tok = NULL;
  serve_metrics *metrics = NULL;
  serve_engine *se = NULL;
  serve_http *h = NULL;
  ph_engine_info ei;
  if (s == PH_OK) {
    s = ph_engine_create(dir, &p, &e);
    s = engine_failed(e, s, &d);
  }
  if (s == PH_OK) s = engine_call_failed("ph_engine_get_info", ph_engine_get_info(e, &ei), &d);
  if (s == PH_OK) {
    const ph_status ts = ph_tokenizer_open(dir, &tok);
    if (ts == PH_ERR_NOT_FOUND) {
      ph_tokenizer_free(tok);
      tok = NULL;
      fprintf(stderr,
              "serve: %s has no tokenizer.json: only completion prompts given as token "
              "ids are served\n",
              dir);
    } else if (ts != PH_OK) {
      s = diag_set(&d, ts, "%s", tok ? ph_tokenizer_error(tok) : ph_status_message(ts));
    }
  }
  if (s == PH_OK && !(metrics = serve_metrics_create()))
    s = diag_set(&d, PH_ERR_NO_MEMORY, "serve: out of memory");
  if (s == PH_OK) s = serve_engine_start(e, metrics, &se, &d);
  if (s == PH_OK) {
    const serve_config cfg = {
        cli_get(&a, "host") ? cli_get(&a, "host") : "127.0.0.1",
        (int)port,
        key,
        name,
        (size_t)max_body,
        max_prompt ? max_prompt : ei.max_context - 1,
        default_max,
        (unsigned)max_conn,
        (unsigned)idle,
    };
    s = serve_http_start(&cfg, se, tok, &ei, metrics, &h, &d);
  }
  if (s == PH_OK) {
    printf("listening on %s\n", serve_http_url(h));
    if ((rc = cli_flush_stdout()) != CLI_EXIT_OK) s = diag_set(&d, PH_ERR_IO, "writing stdout");
  }
  if (s == PH_OK) {
    char q[256];
    fprintf(stderr,
            "serve: %s as \"%s\": context %lld, %d KV pages of %lld tokens, batch %d, "
            "weights quantized: %s, prefix cache %s; Ctrl-C stops\n",
            dir, name, (long long)ei.max_context, ei.kv_pages, (long long)ei.block_size,
            ei.params.max_batch_size, quant_flags_describe(&ei, q, sizeof q),
            ei.params.prefix_cache == PH_PREFIX_CACHE_OFF ? "off" : "on");
    wait_and_drain(h, se, &sigs, (double)shutdown_s);
  }
  serve_http_stop(h); /* joins every connection thread: nothing holds a request after this */
  serve_engine_stop(se);
  serve_metrics_free(metrics);
  ph_tokenizer_free(tok);
  ph_engine_free(e);
  if (s == PH_OK) fprintf(stderr, "serve: stopped\n");
  return s == PH_OK ? CLI_EXIT_OK : cli_lib_error(s, d.msg);
}
