/* serve_http — see serve_http.h. */
#include "serve_http.h"

#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "serve_buf.h"
#include "serve_openai.h"

#define WAIT_SLICE_MS 100 /* how often a waiting request looks at its socket */
#define READ_BATCH    256 /* tokens taken from the engine per wake-up */

struct serve_http {
  serve_config cfg;
  serve_engine *se;
  const ph_tokenizer *tok;
  ph_tokenizer_info tok_info;
  ph_engine_info ei;
  serve_metrics *metrics;
  struct MHD_Daemon *daemon;
  int listen_fd; /* after quiesce: closed once the daemon is stopped */
  int port;
  char url[128];
  long long started; /* Unix seconds */
  pthread_mutex_t mu;
  int draining;
  int64_t active;   /* generation requests in flight */
  uint64_t counter; /* response ids and default seeds */
};

typedef enum route {
  R_NONE = 0,
  R_COMPLETIONS,
  R_CHAT,
  R_MODELS,
  R_MODEL, /* /v1/models/NAME */
  R_HEALTH,
  R_METRICS,
} route;

/* Per connection request (libmicrohttpd's con_cls). */
typedef struct conn {
  route route;
  sbuf body;
  int too_big;
} conn;

/* ---- responses ----------------------------------------------------------------------------- */

static enum MHD_Result send_body(serve_http *h, struct MHD_Connection *c, int code,
                                 const char *type, const char *body, size_t len) {
  struct MHD_Response *r =
      MHD_create_response_from_buffer(len, (void *)body, MHD_RESPMEM_MUST_COPY);
  if (!r) return MHD_NO;
  MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
  if (code == 405) MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, POST");
  if (code == 401) MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
  const enum MHD_Result ok = MHD_queue_response(c, (unsigned)code, r);
  MHD_destroy_response(r);
  if (ok == MHD_YES) serve_metrics_http(h->metrics, code);
  return ok;
}

static enum MHD_Result send_json(serve_http *h, struct MHD_Connection *c, int code, sbuf *b) {
  if (b->failed) {
    sbuf_free(b);
    static const char oom[] = "{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\","
                              "\"param\":null,\"code\":null}}";
    return send_body(h, c, 500, "application/json", oom, sizeof oom - 1);
  }
  const enum MHD_Result ok =
      send_body(h, c, code, "application/json", b->data ? b->data : "", b->len);
  sbuf_free(b);
  return ok;
}

static enum MHD_Result send_error(serve_http *h, struct MHD_Connection *c, const serve_error *e) {
  sbuf b = {0};
  serve_error_json(&b, e);
  return send_json(h, c, e->http, &b);
}

static enum MHD_Result fail(serve_http *h, struct MHD_Connection *c, int code, const char *type,
                            const char *param, const char *ecode, const char *msg) {
  serve_error e;
  serve_error_set(&e, code, type, param, ecode, "%s", msg);
  return send_error(h, c, &e);
}

/* ---- the client's socket ------------------------------------------------------------------- */

/* 1 when the peer has closed the connection (EOF or an error on the socket). Data it sent
 * (a pipelined request) is left where it is. */
static int client_gone(int fd) {
  if (fd < 0) return 0;
  struct pollfd p = {fd, POLLIN, 0};
  if (poll(&p, 1, 0) <= 0) return 0;
  if (p.revents & (POLLERR | POLLHUP | POLLNVAL)) return 1;
  if (!(p.revents & POLLIN)) return 0;
  char ch;
  const ssize_t n = recv(fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
}

static int connection_fd(struct MHD_Connection *c) {
  const union MHD_ConnectionInfo *ci =
      MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
  return ci ? (int)ci->connect_fd : -1;
}

static double mono_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* ---- one generation ------------------------------------------------------------------------ */

typedef struct gen {
  serve_http *h;
  int fd;
  serve_params p;
  serve_resp resp;
  char id[48];
  int64_t *prompt;
  int64_t n_prompt;
  serve_req *req;
  ph_text_stream *ts;
  int64_t seen; /* tokens read from the engine */
  int64_t *ids; /* [cap_ids] tokens that count (through a stop string's last) */
  int64_t n_ids, cap_ids;
  int64_t chunk_from;        /* ids[chunk_from, n_ids) not yet sent in a stream chunk */
  sbuf text;                 /* text not yet sent (stream) or all of it (non-streaming) */
  int stopped;               /* a stop string completed */
  int finished;              /* nothing more will come: finish_reason or err set */
  const char *finish_reason; /* "stop" | "length" */
  int64_t n_cached;          /* prompt tokens the prefix cache served (once finished) */
  serve_error err;           /* finished with an error (err.http != 0) */
  int role_sent, done_sent;  /* stream: the role chunk; the final events */
  int gone;                  /* the client went away */
  double checked_at;         /* when the socket was last looked at (mono_s) */
  sbuf out;                  /* stream: bytes for libmicrohttpd */
  size_t out_pos;
} gen;

static void gen_free(void *cls) {
  gen *g = cls;
  if (!g) return;
  serve_req_put(g->req);
  ph_text_stream_free(g->ts);
  serve_params_free(&g->p);
  free(g->prompt);
  free(g->ids);
  sbuf_free(&g->text);
  sbuf_free(&g->out);
  serve_http *h = g->h;
  pthread_mutex_lock(&h->mu);
  h->active--;
  pthread_mutex_unlock(&h->mu);
  free(g);
}

static uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

/* Tokenizes the request's prompt into g->prompt. Returns 0 or -1 with g->err. */
static int gen_tokenize(gen *g) {
  serve_http *h = g->h;
  serve_params *p = &g->p;
  serve_error *e = &g->err;
  if (p->prompt_ids) {
    g->prompt = p->prompt_ids;
    g->n_prompt = p->n_prompt_ids;
    p->prompt_ids = NULL;
    p->n_prompt_ids = 0;
    return 0;
  }
  if (!h->tok)
    return serve_error_set(e, 400, "invalid_request_error",
                           p->kind == SERVE_CHAT ? "messages" : "prompt", "no_tokenizer",
                           "The model has no tokenizer.json: only a completion prompt given as "
                           "token ids can be served.");
  char *rendered = NULL;
  size_t rlen = 0;
  const char *text = p->prompt_text;
  size_t len = p->prompt_len;
  if (p->kind == SERVE_CHAT) {
    char msg[512] = "";
    const ph_status s = ph_chat_render(h->tok, p->messages_json, p->extra_json, 1, &rendered, &rlen,
                                       msg, sizeof msg);
    if (s != PH_OK)
      return serve_error_set(e, s == PH_ERR_NO_MEMORY ? 500 : 400,
                             s == PH_ERR_NO_MEMORY ? "server_error" : "invalid_request_error",
                             "messages", s == PH_ERR_NOT_FOUND ? "no_chat_template" : "template",
                             "The chat template could not be rendered: %s: %s", ph_status_name(s),
                             msg[0] ? msg : ph_status_message(s));
    text = rendered;
    len = rlen;
  }
  int64_t *ids = NULL, n = 0;
  const ph_status s =
      ph_tokenizer_encode(h->tok, text ? text : "", len, p->kind == SERVE_CHAT ? 0 : 1, &ids, &n);
  ph_free(rendered);
  if (s != PH_OK)
    return serve_error_set(e, 500, "server_error", NULL, NULL, "tokenizing the prompt failed: %s",
                           ph_status_name(s));
  g->prompt = malloc((size_t)(n ? n : 1) * sizeof *g->prompt);
  if (!g->prompt) {
    ph_free(ids);
    return serve_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
  }
  if (n) memcpy(g->prompt, ids, (size_t)n * sizeof *ids);
  g->n_prompt = n;
  ph_free(ids);
  return 0;
}

/* Checks the prompt against the limits and submits it. Returns 0 or -1 with g->err. */
static int gen_submit(gen *g) {
  serve_http *h = g->h;
  serve_params *p = &g->p;
  serve_error *e = &g->err;
  const char *pname = p->kind == SERVE_CHAT ? "messages" : "prompt";
  if (g->n_prompt == 0)
    return serve_error_set(e, 400, "invalid_request_error", pname, "invalid_value",
                           "The prompt is empty (0 tokens).");
  for (int64_t i = 0; i < g->n_prompt; i++)
    if (g->prompt[i] >= h->ei.vocab_size)
      return serve_error_set(e, 400, "invalid_request_error", pname, "invalid_value",
                             "Token id %lld at prompt index %lld is outside the model's "
                             "vocabulary of %lld.",
                             (long long)g->prompt[i], (long long)i, (long long)h->ei.vocab_size);
  const int64_t ctx = h->ei.max_context;
  if (g->n_prompt > h->cfg.max_prompt_tokens || g->n_prompt >= ctx)
    return serve_error_set(
        e, 400, "invalid_request_error", pname, "context_length_exceeded",
        "The prompt has %lld tokens; this server takes at most %lld (the "
        "model's context is %lld tokens, and one must remain to generate).",
        (long long)g->n_prompt,
        (long long)(h->cfg.max_prompt_tokens < ctx - 1 ? h->cfg.max_prompt_tokens : ctx - 1),
        (long long)ctx);
  int64_t max_new;
  if (p->has_max_tokens) {
    max_new = p->max_tokens;
    if (g->n_prompt + max_new > ctx)
      return serve_error_set(e, 400, "invalid_request_error", "max_tokens",
                             "context_length_exceeded",
                             "This model's maximum context length is %lld tokens. However, you "
                             "requested %lld tokens (%lld in the prompt, %lld for the "
                             "completion).",
                             (long long)ctx, (long long)(g->n_prompt + max_new),
                             (long long)g->n_prompt, (long long)max_new);
  } else {
    max_new = h->cfg.default_max_tokens > 0 ? h->cfg.default_max_tokens
              : p->kind == SERVE_CHAT       ? ctx - g->n_prompt
                                            : 16;
    if (max_new > ctx - g->n_prompt) max_new = ctx - g->n_prompt;
  }
  ph_sampling_params sp = ph_sampling_params_default();
  sp.temperature = p->temperature;
  sp.top_p = p->top_p;
  sp.top_k = p->top_k;
  sp.min_p = p->min_p;
  sp.max_new_tokens = max_new;
  sp.ignore_eos = p->ignore_eos;
  pthread_mutex_lock(&h->mu);
  const uint64_t n = ++h->counter;
  pthread_mutex_unlock(&h->mu);
  sp.seed = p->has_seed ? p->seed : splitmix64(n ^ ((uint64_t)time(NULL) << 20));
  for (int i = 0; i < p->n_stop_token_ids; i++)
    sp.stop_token_ids[sp.n_stop_token_ids++] = p->stop_token_ids[i];
  if (!p->ignore_eos) /* the tokenizer's end-of-sequence ids stop too, as the model's do */
    for (int32_t i = 0; i < h->tok_info.n_eos_ids && sp.n_stop_token_ids < PH_MAX_STOP_TOKENS;
         i++) {
      int dup = 0;
      for (int32_t k = 0; k < sp.n_stop_token_ids; k++)
        dup |= sp.stop_token_ids[k] == h->tok_info.eos_ids[i];
      if (!dup) sp.stop_token_ids[sp.n_stop_token_ids++] = h->tok_info.eos_ids[i];
    }
  g->cap_ids = max_new;
  g->ids = malloc((size_t)max_new * sizeof *g->ids);
  if (!g->ids) return serve_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
  if (h->tok) {
    const ph_status s = ph_text_stream_create(h->tok, (const char *const *)p->stops, p->n_stops,
                                              p->skip_special, &g->ts);
    if (s != PH_OK)
      return serve_error_set(e, 500, "server_error", NULL, NULL,
                             "starting the detokenizer failed: %s", ph_status_name(s));
  } else if (p->n_stops > 0) {
    return serve_error_set(e, 400, "invalid_request_error", "stop", "no_tokenizer",
                           "Stop strings need the model's tokenizer.json, which it has not.");
  }
  diag d;
  diag_clear(&d);
  const ph_status s = serve_engine_submit(h->se, g->prompt, g->n_prompt, &sp, &g->req, &d);
  if (s != PH_OK)
    return serve_error_set(e, s == PH_ERR_NO_MEMORY ? 503 : 500, "server_error", NULL, NULL,
                           "the engine did not take the request: %s", d.msg);
  return 0;
}

/* The error a finished request carries, as the client sees it. */
static void finish_error(gen *g, const ph_request_info *info) {
  if (info->finish == PH_FINISH_ABORTED) {
    serve_error_set(&g->err, 503, "server_error", NULL, "shutting_down",
                    "The request was aborted: the server is shutting down.");
    return;
  }
  const int client = info->status == PH_ERR_INVALID_ARGUMENT || info->status == PH_ERR_LIMIT;
  serve_error_set(&g->err, client ? 400 : 500, client ? "invalid_request_error" : "server_error",
                  NULL, NULL, "The engine could not complete the request: %s: %s",
                  ph_status_name(info->status), info->message);
}

/* Waits up to WAIT_SLICE_MS for the engine, then moves what it has through the detokenizer:
 * text to g->text, counted ids to g->ids. Sets g->finished (with finish_reason or err), or
 * g->gone when the client closed its connection. */
static void gen_advance(gen *g) {
  int64_t buf[READ_BATCH];
  serve_req_state st;
  int64_t n = serve_req_wait(g->req, g->seen, buf, READ_BATCH, WAIT_SLICE_MS, &st);
  for (;;) {
    for (int64_t i = 0; i < n && !g->stopped; i++) {
      if (g->n_ids < g->cap_ids) g->ids[g->n_ids++] = buf[i];
      if (!g->ts) continue;
      const char *piece = NULL;
      size_t len = 0;
      int stopped = 0;
      const ph_status s = ph_text_stream_push(g->ts, buf[i], &piece, &len, &stopped);
      if (s != PH_OK) {
        serve_error_set(&g->err, 500, "server_error", NULL, NULL,
                        "detokenizing token %lld failed: %s", (long long)buf[i], ph_status_name(s));
        g->finished = 1;
        serve_req_cancel(g->req);
        return;
      }
      sbuf_append(&g->text, piece, len);
      if (stopped) {
        g->stopped = 1;
        g->finish_reason = "stop";
        g->finished = 1;
        serve_req_cancel(g->req); /* nothing after the stop string is wanted */
      }
    }
    g->seen += n;
    if (g->stopped) return;
    if (g->seen < st.n_tokens) { /* more than one batch arrived */
      n = serve_req_wait(g->req, g->seen, buf, READ_BATCH, 0, &st);
      continue;
    }
    break;
  }
  if (st.finished && g->seen >= st.n_tokens) {
    g->finished = 1;
    g->n_cached = st.info.n_cached_tokens;
    if (st.info.finish == PH_FINISH_STOP || st.info.finish == PH_FINISH_LENGTH) {
      g->finish_reason = st.info.finish == PH_FINISH_STOP ? "stop" : "length";
      if (g->ts) {
        const char *piece = NULL;
        size_t len = 0;
        if (ph_text_stream_finish(g->ts, &piece, &len) == PH_OK) sbuf_append(&g->text, piece, len);
      }
    } else {
      finish_error(g, &st.info);
    }
    return;
  }
  /* tokens may flow without pause: the socket is looked at every WAIT_SLICE_MS regardless */
  const double now = mono_s();
  if (now - g->checked_at >= WAIT_SLICE_MS * 1e-3) {
    g->checked_at = now;
    if (client_gone(g->fd)) {
      g->gone = 1;
      serve_req_cancel(g->req);
    }
  }
}

/* ---- streaming ----------------------------------------------------------------------------- */

/* Appends the next SSE events to g->out (maybe none, after a quiet wait). -1: stop the stream
 * (the client is gone, or memory ran out). */
static int gen_produce(gen *g) {
  if (g->p.kind == SERVE_CHAT && !g->role_sent) {
    g->role_sent = 1;
    return serve_chunk_sse(&g->out, &g->resp, 1, "", 0, NULL, NULL, 0, g->p.include_usage);
  }
  gen_advance(g);
  if (g->gone) return -1;
  const int64_t n_new = g->n_ids - g->chunk_from;
  const int has_text = g->text.len > 0, has_ids = g->p.return_token_ids && n_new > 0;
  if (!g->finished) {
    if (!has_text && !has_ids) return 0;
    const int rc = serve_chunk_sse(&g->out, &g->resp, 0, g->text.data, g->text.len, NULL,
                                   g->ids + g->chunk_from, n_new, g->p.include_usage);
    sbuf_reset(&g->text);
    g->chunk_from = g->n_ids;
    return rc;
  }
  int rc = 0;
  if (g->err.http) {
    if (has_text || has_ids)
      rc = serve_chunk_sse(&g->out, &g->resp, 0, g->text.data, g->text.len, NULL,
                           g->ids + g->chunk_from, n_new, g->p.include_usage);
    if (!rc) rc = serve_error_sse(&g->out, &g->err);
  } else {
    rc = serve_chunk_sse(&g->out, &g->resp, 0, g->text.data, g->text.len, g->finish_reason,
                         g->ids + g->chunk_from, n_new, g->p.include_usage);
    if (!rc && g->p.include_usage)
      rc = serve_usage_sse(&g->out, &g->resp, g->n_prompt, g->n_cached, g->n_ids);
  }
  if (!rc) rc = sbuf_puts(&g->out, "data: [DONE]\n\n");
  sbuf_reset(&g->text);
  g->chunk_from = g->n_ids;
  g->done_sent = 1;
  return rc;
}

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max) {
  gen *g = cls;
  (void)pos;
  while (g->out_pos >= g->out.len) {
    if (g->done_sent) return MHD_CONTENT_READER_END_OF_STREAM;
    sbuf_reset(&g->out);
    g->out_pos = 0;
    if (gen_produce(g) < 0 || g->out.failed) return MHD_CONTENT_READER_END_WITH_ERROR;
  }
  size_t n = g->out.len - g->out_pos;
  if (n > max) n = max;
  memcpy(buf, g->out.data + g->out_pos, n);
  g->out_pos += n;
  return (ssize_t)n;
}

/* ---- the generation endpoints -------------------------------------------------------------- */

static enum MHD_Result handle_generate(serve_http *h, struct MHD_Connection *c, conn *k) {
  pthread_mutex_lock(&h->mu);
  const int draining = h->draining;
  pthread_mutex_unlock(&h->mu);
  if (draining)
    return fail(h, c, 503, "server_error", NULL, "shutting_down", "The server is shutting down.");
  char why[512];
  if (serve_engine_failed(h->se, why, sizeof why))
    return fail(h, c, 500, "server_error", NULL, NULL, why);
  gen *g = calloc(1, sizeof *g);
  if (!g) return fail(h, c, 500, "server_error", NULL, NULL, "out of memory");
  g->h = h;
  g->fd = connection_fd(c);
  pthread_mutex_lock(&h->mu);
  h->active++;
  const uint64_t n = ++h->counter;
  pthread_mutex_unlock(&h->mu);
  const serve_kind kind = k->route == R_CHAT ? SERVE_CHAT : SERVE_COMPLETION;
  if (serve_parse_request(kind, k->body.data ? k->body.data : "", k->body.len, &g->p, &g->err) ||
      gen_tokenize(g) || gen_submit(g)) {
    const enum MHD_Result r = send_error(h, c, &g->err);
    gen_free(g);
    return r;
  }
  snprintf(g->id, sizeof g->id, "%s-%016llx", kind == SERVE_CHAT ? "chatcmpl" : "cmpl",
           (unsigned long long)splitmix64(n ^ (uint64_t)h->started));
  g->resp =
      (serve_resp){kind, g->id, (long long)time(NULL), h->cfg.model_name, g->p.return_token_ids};
  if (g->p.stream) {
    struct MHD_Response *r =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, g, gen_free);
    if (!r) {
      gen_free(g);
      return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    const enum MHD_Result ok = MHD_queue_response(c, MHD_HTTP_OK, r);
    MHD_destroy_response(r); /* the free callback runs when libmicrohttpd is done with it */
    if (ok == MHD_YES) serve_metrics_http(h->metrics, 200);
    return ok;
  }
  while (!g->finished && !g->gone) gen_advance(g);
  if (g->gone) {
    gen_free(g);
    return MHD_NO; /* nobody to answer */
  }
  enum MHD_Result r;
  if (g->err.http) {
    r = send_error(h, c, &g->err);
  } else {
    sbuf b = {0};
    serve_response_json(&b, &g->resp, g->text.data ? g->text.data : "", g->text.len,
                        g->finish_reason, g->prompt, g->n_prompt, g->n_cached, g->ids, g->n_ids);
    r = send_json(h, c, 200, &b);
  }
  gen_free(g);
  return r;
}

/* ---- the other endpoints ------------------------------------------------------------------- */

static enum MHD_Result handle_models(serve_http *h, struct MHD_Connection *c, int one) {
  sbuf b = {0};
  json_t *m = json_pack("{s:s, s:s, s:I, s:s, s:I}", "id", h->cfg.model_name, "object", "model",
                        "created", (json_int_t)h->started, "owned_by", "pagedhybrid",
                        "max_model_len", (json_int_t)h->ei.max_context);
  json_t *o = one || !m ? m : json_pack("{s:s, s:[o]}", "object", "list", "data", m);
  char *text = o ? json_dumps(o, JSON_COMPACT) : NULL;
  json_decref(o);
  if (text)
    sbuf_puts(&b, text);
  else
    b.failed = 1;
  free(text);
  return send_json(h, c, 200, &b);
}

static enum MHD_Result handle_health(serve_http *h, struct MHD_Connection *c) {
  char why[512];
  pthread_mutex_lock(&h->mu);
  const int draining = h->draining;
  pthread_mutex_unlock(&h->mu);
  sbuf b = {0};
  if (serve_engine_failed(h->se, why, sizeof why)) {
    serve_error e;
    serve_error_set(&e, 503, "server_error", NULL, "engine_failed", "%s", why);
    serve_error_json(&b, &e);
    return send_json(h, c, 503, &b);
  }
  sbuf_puts(&b, draining ? "{\"status\":\"shutting down\"}" : "{\"status\":\"ok\"}");
  return send_json(h, c, draining ? 503 : 200, &b);
}

static enum MHD_Result handle_metrics(serve_http *h, struct MHD_Connection *c) {
  char *text = serve_metrics_render(h->metrics);
  if (!text) return fail(h, c, 500, "server_error", NULL, NULL, "out of memory");
  const enum MHD_Result r =
      send_body(h, c, 200, "text/plain; version=0.0.4; charset=utf-8", text, strlen(text));
  free(text);
  return r;
}

/* ---- routing ------------------------------------------------------------------------------- */

static route route_of(serve_http *h, const char *url, int *is_post) {
  *is_post = 0;
  if (strcmp(url, "/v1/completions") == 0) return *is_post = 1, R_COMPLETIONS;
  if (strcmp(url, "/v1/chat/completions") == 0) return *is_post = 1, R_CHAT;
  if (strcmp(url, "/v1/models") == 0) return R_MODELS;
  if (strncmp(url, "/v1/models/", 11) == 0 && strcmp(url + 11, h->cfg.model_name) == 0)
    return R_MODEL;
  if (strcmp(url, "/health") == 0) return R_HEALTH;
  if (strcmp(url, "/metrics") == 0) return R_METRICS;
  return R_NONE;
}

/* The Authorization header holds "Bearer <api key>" (constant time in the key's length). */
static int authorized(serve_http *h, struct MHD_Connection *c) {
  const char *key = h->cfg.api_key;
  if (!key) return 1;
  const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
  if (!v || strncmp(v, "Bearer ", 7) != 0) return 0;
  v += 7;
  const size_t n = strlen(key);
  if (strlen(v) != n) return 0;
  unsigned diff = 0;
  for (size_t i = 0; i < n; i++) diff |= (unsigned char)v[i] ^ (unsigned char)key[i];
  return diff == 0;
}

static enum MHD_Result on_access(void *cls, struct MHD_Connection *c, const char *url,
                                 const char *method, const char *version, const char *upload,
                                 size_t *upload_size, void **con_cls) {
  serve_http *h = cls;
  (void)version;
  conn *k = *con_cls;
  if (!k) { /* headers are in; the body (if any) follows in later calls */
    k = calloc(1, sizeof *k);
    if (!k) return MHD_NO;
    *con_cls = k;
    int is_post = 0;
    k->route = route_of(h, url, &is_post);
    if (k->route == R_NONE)
      return fail(h, c, 404, "invalid_request_error", NULL, "not_found",
                  "Unknown path: only /v1/completions, /v1/chat/completions, /v1/models, /health "
                  "and /metrics are served.");
    const int get = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0;
    if (is_post ? strcmp(method, "POST") != 0 : !get)
      return fail(h, c, 405, "invalid_request_error", NULL, "method_not_allowed",
                  is_post ? "This endpoint takes POST." : "This endpoint takes GET.");
    if (strncmp(url, "/v1/", 4) == 0 && !authorized(h, c))
      return fail(h, c, 401, "invalid_request_error", NULL, "invalid_api_key",
                  "Incorrect or missing API key: send \"Authorization: Bearer <key>\".");
    const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
    if (cl) {
      char *end = NULL;
      errno = 0;
      const unsigned long long len = strtoull(cl, &end, 10);
      if (errno == 0 && end != cl && len > h->cfg.max_body_bytes) k->too_big = 1;
    }
    if (k->too_big) {
      char msg[160];
      snprintf(msg, sizeof msg, "The request body is larger than this server's limit of %zu bytes.",
               h->cfg.max_body_bytes);
      return fail(h, c, 413, "invalid_request_error", NULL, "request_too_large", msg);
    }
    return MHD_YES;
  }
  if (*upload_size) {
    if (!k->too_big && k->body.len + *upload_size > h->cfg.max_body_bytes) {
      k->too_big = 1;
      sbuf_free(&k->body);
    }
    if (!k->too_big && sbuf_append(&k->body, upload, *upload_size)) return MHD_NO;
    *upload_size = 0;
    return MHD_YES;
  }
  if (k->too_big) {
    char msg[160];
    snprintf(msg, sizeof msg, "The request body is larger than this server's limit of %zu bytes.",
             h->cfg.max_body_bytes);
    return fail(h, c, 413, "invalid_request_error", NULL, "request_too_large", msg);
  }
  switch (k->route) {
  case R_COMPLETIONS:
  case R_CHAT:
    return handle_generate(h, c, k);
  case R_MODELS:
    return handle_models(h, c, 0);
  case R_MODEL:
    return handle_models(h, c, 1);
  case R_HEALTH:
    return handle_health(h, c);
  case R_METRICS:
    return handle_metrics(h, c);
  case R_NONE:
    break;
  }
  return MHD_NO;
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode why) {
  (void)cls;
  (void)c;
  (void)why;
  conn *k = *con_cls;
  if (!k) return;
  sbuf_free(&k->body);
  free(k);
  *con_cls = NULL;
}

/* ---- the daemon ---------------------------------------------------------------------------- */

ph_status serve_http_start(const serve_config *cfg, serve_engine *se, const ph_tokenizer *tok,
                           const ph_engine_info *engine_info, serve_metrics *metrics,
                           serve_http **out, diag *d) {
  *out = NULL;
  serve_http *h = calloc(1, sizeof *h);
  RETURN_ERROR_IF(!h, d, PH_ERR_NO_MEMORY, "serve: out of memory");
  h->cfg = *cfg;
  h->se = se;
  h->tok = tok;
  h->ei = *engine_info;
  h->metrics = metrics;
  h->listen_fd = -1;
  h->started = (long long)time(NULL);
  if (tok && ph_tokenizer_get_info(tok, &h->tok_info) != PH_OK)
    memset(&h->tok_info, 0, sizeof h->tok_info);
  pthread_mutex_init(&h->mu, NULL);

  char port_s[16];
  snprintf(port_s, sizeof port_s, "%d", cfg->port);
  struct addrinfo hints, *ai = NULL;
  memset(&hints, 0, sizeof hints);
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  const int gai = getaddrinfo(cfg->host, port_s, &hints, &ai);
  if (gai != 0 || !ai) {
    pthread_mutex_destroy(&h->mu);
    free(h);
    return diag_set(d, PH_ERR_INVALID_ARGUMENT, "serve: --host %s: %s", cfg->host,
                    gai ? gai_strerror(gai) : "no address");
  }
  const int v6 = ai->ai_family == AF_INET6;
  unsigned flags =
      MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_ITC | MHD_USE_POLL;
  if (v6) flags |= MHD_USE_IPv6;
  h->daemon = MHD_start_daemon(
      flags, (uint16_t)cfg->port, NULL, NULL, on_access, h, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
      MHD_OPTION_CONNECTION_LIMIT, cfg->max_connections, MHD_OPTION_CONNECTION_TIMEOUT,
      cfg->idle_timeout_s, MHD_OPTION_NOTIFY_COMPLETED, on_completed, h, MHD_OPTION_END);
  const int bind_errno = errno;
  freeaddrinfo(ai);
  if (!h->daemon) {
    pthread_mutex_destroy(&h->mu);
    free(h);
    return diag_set(d, PH_ERR_IO, "serve: cannot listen on %s port %d: %s", cfg->host, cfg->port,
                    bind_errno ? strerror(bind_errno) : "libmicrohttpd refused to start");
  }
  const union MHD_DaemonInfo *di = MHD_get_daemon_info(h->daemon, MHD_DAEMON_INFO_BIND_PORT);
  h->port = di ? (int)di->port : cfg->port;
  snprintf(h->url, sizeof h->url, v6 ? "http://[%s]:%d" : "http://%s:%d", cfg->host, h->port);
  *out = h;
  return PH_OK;
}

int serve_http_port(const serve_http *h) { return h->port; }
const char *serve_http_url(const serve_http *h) { return h->url; }

void serve_http_quiesce(serve_http *h) {
  pthread_mutex_lock(&h->mu);
  h->draining = 1;
  pthread_mutex_unlock(&h->mu);
  const MHD_socket fd = MHD_quiesce_daemon(h->daemon);
  if (fd != MHD_INVALID_SOCKET) {
    h->listen_fd = (int)fd;
    /* libmicrohttpd no longer accepts, but the socket still listens until it is closed (after
     * MHD_stop_daemon): connections would queue unanswered. On Linux a shutdown stops the
     * listening at once, so new clients are refused instead; the descriptor stays ours. */
    shutdown((int)fd, SHUT_RDWR);
  }
}

int64_t serve_http_active(serve_http *h) {
  pthread_mutex_lock(&h->mu);
  const int64_t n = h->active;
  pthread_mutex_unlock(&h->mu);
  return n;
}

void serve_http_stop(serve_http *h) {
  if (!h) return;
  MHD_stop_daemon(h->daemon);
  if (h->listen_fd >= 0) close(h->listen_fd);
  pthread_mutex_destroy(&h->mu);
  free(h);
}
