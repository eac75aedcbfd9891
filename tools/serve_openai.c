/* serve_openai — see serve_openai.h. */
#include "serve_openai.h"

#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tools_api.h"

int serve_error_set(serve_error *e, int http, const char *type, const char *param, const char *code,
                    const char *fmt, ...) {
  e->http = http;
  snprintf(e->type, sizeof e->type, "%s", type);
  snprintf(e->param, sizeof e->param, "%s", param ? param : "");
  snprintf(e->code, sizeof e->code, "%s", code ? code : "");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(e->message, sizeof e->message, fmt, ap);
  va_end(ap);
  return -1;
}

/* ---- reading fields ------------------------------------------------------------------------ */

static int bad_type(serve_error *e, const char *name, const char *expected, const json_t *v) {
  return serve_error_set(e, 400, "invalid_request_error", name, "invalid_type",
                         "Invalid type for '%s': expected %s, but got %s instead.", name, expected,
                         json_kind(v));
}

static int bad_value(serve_error *e, const char *name, const char *fmt, double got) {
  char what[160];
  snprintf(what, sizeof what, fmt, got);
  return serve_error_set(e, 400, "invalid_request_error", name, "invalid_value",
                         "Invalid value for '%s': %s.", name, what);
}

/* The member, or NULL when absent or null. */
static json_t *field(json_t *o, const char *name) {
  json_t *v = json_object_get(o, name);
  return v && !json_is_null(v) ? v : NULL;
}

/* A number in [lo, hi] (open at lo when lo_open). 1: read, 0: absent, -1: error. */
static int get_number(json_t *o, const char *name, double lo, int lo_open, double hi, double *out,
                      serve_error *e) {
  json_t *v = field(o, name);
  if (!v) return 0;
  if (!json_is_number(v)) return bad_type(e, name, "a number", v);
  const double x = json_number_value(v);
  if (!isfinite(x) || x > hi || x < lo || (lo_open && x == lo)) {
    char fmt[96];
    snprintf(fmt, sizeof fmt, "expected a number in %s%g, %g], got %%g", lo_open ? "(" : "[", lo,
             hi);
    return bad_value(e, name, fmt, x);
  }
  *out = x;
  return 1;
}

static int get_int(json_t *o, const char *name, long long lo, long long hi, long long *out,
                   serve_error *e) {
  json_t *v = field(o, name);
  if (!v) return 0;
  if (!json_is_integer(v)) return bad_type(e, name, "an integer", v);
  const long long x = json_integer_value(v);
  if (x < lo || x > hi) {
    return serve_error_set(e, 400, "invalid_request_error", name, "invalid_value",
                           "Invalid value for '%s': expected an integer in [%lld, %lld], got "
                           "%lld.",
                           name, lo, hi, x);
  }
  *out = x;
  return 1;
}

static int get_bool(json_t *o, const char *name, int *out, serve_error *e) {
  json_t *v = field(o, name);
  if (!v) return 0;
  if (!json_is_boolean(v)) return bad_type(e, name, "a boolean", v);
  *out = json_is_true(v);
  return 1;
}

static char *dup_n(const char *s, size_t n) {
  char *p = malloc(n + 1);
  if (p) {
    memcpy(p, s, n);
    p[n] = '\0';
  }
  return p;
}

static int no_memory(serve_error *e) {
  return serve_error_set(e, 500, "server_error", NULL, NULL, "out of memory");
}

/* Options that change the output and are not implemented: refused unless at their no-op value. */
static int check_unsupported(json_t *o, serve_error *e) {
  static const char *const FALSEY[] = {"logprobs", "echo"};
  for (size_t i = 0; i < sizeof FALSEY / sizeof FALSEY[0]; i++) {
    json_t *v = field(o, FALSEY[i]);
    if (!v) continue;
    if (json_is_false(v) || (json_is_integer(v) && json_integer_value(v) == 0)) continue;
    if (!json_is_boolean(v) && !json_is_integer(v))
      return bad_type(e, FALSEY[i], "a boolean or an integer", v);
    return serve_error_set(e, 400, "invalid_request_error", FALSEY[i], "unsupported_parameter",
                           "'%s' is not supported by this server.", FALSEY[i]);
  }
  static const char *const ZERO[] = {"frequency_penalty", "presence_penalty", "top_logprobs"};
  for (size_t i = 0; i < sizeof ZERO / sizeof ZERO[0]; i++) {
    json_t *v = field(o, ZERO[i]);
    if (!v) continue;
    if (!json_is_number(v)) return bad_type(e, ZERO[i], "a number", v);
    if (json_number_value(v) != 0)
      return serve_error_set(e, 400, "invalid_request_error", ZERO[i], "unsupported_parameter",
                             "'%s' is not supported by this server (only 0).", ZERO[i]);
  }
  json_t *v = field(o, "best_of");
  if (v && (!json_is_integer(v) || json_integer_value(v) != 1)) {
    if (!json_is_integer(v)) return bad_type(e, "best_of", "an integer", v);
    return serve_error_set(e, 400, "invalid_request_error", "best_of", "unsupported_parameter",
                           "'best_of' must be 1 on this server.");
  }
  v = field(o, "suffix");
  if (v && (!json_is_string(v) || json_string_length(v) > 0)) {
    if (!json_is_string(v)) return bad_type(e, "suffix", "a string", v);
    return serve_error_set(e, 400, "invalid_request_error", "suffix", "unsupported_parameter",
                           "'suffix' is not supported by this server.");
  }
  v = field(o, "logit_bias");
  if (v && (!json_is_object(v) || json_object_size(v) > 0)) {
    if (!json_is_object(v)) return bad_type(e, "logit_bias", "an object", v);
    return serve_error_set(e, 400, "invalid_request_error", "logit_bias", "unsupported_parameter",
                           "'logit_bias' is not supported by this server.");
  }
  v = field(o, "response_format");
  if (v) {
    if (!json_is_object(v)) return bad_type(e, "response_format", "an object", v);
    json_t *t = json_object_get(v, "type");
    if (!json_is_string(t) || strcmp(json_string_value(t), "text") != 0)
      return serve_error_set(e, 400, "invalid_request_error", "response_format",
                             "unsupported_parameter",
                             "'response_format' other than {\"type\": \"text\"} is not "
                             "supported by this server.");
  }
  return 0;
}

static int read_stop(json_t *o, serve_params *p, serve_error *e) {
  json_t *v = field(o, "stop");
  if (!v) return 0;
  json_t *one[1] = {v};
  json_t **items = one;
  size_t n = 1;
  if (json_is_array(v)) {
    n = json_array_size(v);
    if (n > PH_MAX_STOP_STRINGS)
      return serve_error_set(e, 400, "invalid_request_error", "stop", "invalid_value",
                             "Invalid value for 'stop': at most %d strings, got %zu.",
                             PH_MAX_STOP_STRINGS, n);
    items = NULL;
  } else if (!json_is_string(v)) {
    return bad_type(e, "stop", "a string or an array of strings", v);
  }
  for (size_t i = 0; i < n; i++) {
    json_t *s = items ? items[i] : json_array_get(v, i);
    if (!json_is_string(s)) return bad_type(e, "stop", "a string or an array of strings", s);
    if (json_string_length(s) == 0) continue;
    if (memchr(json_string_value(s), '\0', json_string_length(s)))
      return serve_error_set(e, 400, "invalid_request_error", "stop", "invalid_value",
                             "Invalid value for 'stop': a stop string may not hold U+0000.");
    char *c = dup_n(json_string_value(s), json_string_length(s));
    if (!c) return no_memory(e);
    p->stops[p->n_stops++] = c;
  }
  return 0;
}

static int read_stop_token_ids(json_t *o, serve_params *p, serve_error *e) {
  json_t *v = field(o, "stop_token_ids");
  if (!v) return 0;
  if (!json_is_array(v)) return bad_type(e, "stop_token_ids", "an array of integers", v);
  if (json_array_size(v) > PH_MAX_STOP_TOKENS)
    return serve_error_set(e, 400, "invalid_request_error", "stop_token_ids", "invalid_value",
                           "Invalid value for 'stop_token_ids': at most %d ids.",
                           PH_MAX_STOP_TOKENS);
  for (size_t i = 0; i < json_array_size(v); i++) {
    json_t *t = json_array_get(v, i);
    if (!json_is_integer(t) || json_integer_value(t) < 0)
      return bad_type(e, "stop_token_ids", "an array of non-negative integers", t);
    p->stop_token_ids[p->n_stop_token_ids++] = json_integer_value(t);
  }
  return 0;
}

/* An array of token ids: 1 when v is one (copied into p), 0 when it is not an array of
 * integers, -1 on error. */
static int read_ids(json_t *v, serve_params *p, serve_error *e) {
  const size_t n = json_array_size(v);
  for (size_t i = 0; i < n; i++)
    if (!json_is_integer(json_array_get(v, i))) return 0;
  p->prompt_ids = malloc((n ? n : 1) * sizeof *p->prompt_ids);
  if (!p->prompt_ids) return no_memory(e);
  for (size_t i = 0; i < n; i++) {
    const long long id = json_integer_value(json_array_get(v, i));
    if (id < 0)
      return serve_error_set(e, 400, "invalid_request_error", "prompt", "invalid_value",
                             "Invalid value for 'prompt': token id %lld at index %zu is "
                             "negative.",
                             id, i);
    p->prompt_ids[i] = id;
  }
  p->n_prompt_ids = (int64_t)n;
  return 1;
}

static int read_prompt(json_t *o, serve_params *p, serve_error *e) {
  json_t *v = field(o, "prompt");
  if (!v)
    return serve_error_set(e, 400, "invalid_request_error", "prompt", "missing_required_parameter",
                           "Missing required parameter: 'prompt'.");
  if (json_is_array(v) && json_array_size(v) == 1 &&
      (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0))))
    v = json_array_get(v, 0); /* a batch of one */
  if (json_is_string(v)) {
    p->prompt_len = json_string_length(v);
    p->prompt_text = dup_n(json_string_value(v), p->prompt_len);
    return p->prompt_text ? 0 : no_memory(e);
  }
  if (json_is_array(v)) {
    const int r = read_ids(v, p, e);
    if (r < 0) return -1;
    if (r == 1) return 0;
    if (json_array_size(v) > 1 &&
        (json_is_string(json_array_get(v, 0)) || json_is_array(json_array_get(v, 0))))
      return serve_error_set(e, 400, "invalid_request_error", "prompt", "unsupported_parameter",
                             "Invalid value for 'prompt': one prompt per request on this server "
                             "(got a batch of %zu).",
                             json_array_size(v));
  }
  return bad_type(e, "prompt", "a string or an array of token ids", v);
}

/* 1 when a string anywhere in v holds U+0000 (the body is read with JSON_ALLOW_NUL; the chat
 * template's JSON reader, like the template's C strings, cannot carry one). */
static int holds_nul(const json_t *v) {
  if (json_is_string(v)) return strlen(json_string_value(v)) != json_string_length(v);
  const char *key;
  const json_t *x;
  size_t i;
  if (json_is_object(v)) json_object_foreach((json_t *)v, key, x) if (holds_nul(x)) return 1;
  if (json_is_array(v)) json_array_foreach(v, i, x) if (holds_nul(x)) return 1;
  return 0;
}

/* messages: checked, and each content given as an array of text parts joined into a string. */
static int read_messages(json_t *o, serve_params *p, serve_error *e) {
  json_t *v = field(o, "messages");
  if (!v)
    return serve_error_set(e, 400, "invalid_request_error", "messages",
                           "missing_required_parameter", "Missing required parameter: 'messages'.");
  if (!json_is_array(v)) return bad_type(e, "messages", "an array", v);
  if (json_array_size(v) == 0)
    return serve_error_set(e, 400, "invalid_request_error", "messages", "invalid_value",
                           "Invalid 'messages': empty array. Expected at least one message.");
  json_t *copy = json_deep_copy(v);
  if (!copy) return no_memory(e);
  char param[64];
  for (size_t i = 0; i < json_array_size(copy); i++) {
    json_t *m = json_array_get(copy, i);
    snprintf(param, sizeof param, "messages[%zu]", i);
    /* the error is written before copy (which holds what it describes) is freed */
    if (!json_is_object(m)) {
      bad_type(e, param, "an object", m);
      json_decref(copy);
      return -1;
    }
    json_t *role = json_object_get(m, "role");
    snprintf(param, sizeof param, "messages[%zu].role", i);
    if (!json_is_string(role)) {
      if (role)
        bad_type(e, param, "a string", role);
      else
        serve_error_set(e, 400, "invalid_request_error", param, "missing_required_parameter",
                        "Missing required parameter: '%s'.", param);
      json_decref(copy);
      return -1;
    }
    if (holds_nul(m)) {
      snprintf(param, sizeof param, "messages[%zu]", i);
      serve_error_set(e, 400, "invalid_request_error", param, "invalid_value",
                      "Invalid '%s': a string holds U+0000, which a chat template cannot take.",
                      param);
      json_decref(copy);
      return -1;
    }
    json_t *content = json_object_get(m, "content");
    snprintf(param, sizeof param, "messages[%zu].content", i);
    if (!content || json_is_null(content) || json_is_string(content)) continue;
    if (!json_is_array(content)) {
      bad_type(e, param, "a string, null or an array of text parts", content);
      json_decref(copy);
      return -1;
    }
    sbuf joined = {0};
    sbuf_puts(&joined, "");
    for (size_t k = 0; k < json_array_size(content); k++) {
      json_t *part = json_array_get(content, k);
      json_t *type = json_is_object(part) ? json_object_get(part, "type") : NULL;
      json_t *text = json_is_object(part) ? json_object_get(part, "text") : NULL;
      if (!json_is_string(type) || strcmp(json_string_value(type), "text") != 0 ||
          !json_is_string(text)) {
        sbuf_free(&joined);
        json_decref(copy);
        snprintf(param, sizeof param, "messages[%zu].content[%zu]", i, k);
        return serve_error_set(e, 400, "invalid_request_error", param, "unsupported_parameter",
                               "Invalid '%s': only {\"type\": \"text\", \"text\": ...} parts "
                               "are supported.",
                               param);
      }
      if (k) sbuf_append(&joined, "\n", 1);
      sbuf_append(&joined, json_string_value(text), json_string_length(text));
    }
    json_t *s = joined.failed ? NULL : json_stringn(joined.data, joined.len);
    sbuf_free(&joined);
    if (!s || json_object_set_new(m, "content", s) != 0) {
      json_decref(copy);
      return no_memory(e);
    }
  }
  p->messages_json = json_dumps(copy, JSON_COMPACT);
  json_decref(copy);
  if (!p->messages_json) return no_memory(e);
  /* the template's extra variables: chat_template_kwargs' members, then tools */
  json_t *kw = field(o, "chat_template_kwargs"), *tools = field(o, "tools");
  if (kw && !json_is_object(kw)) return bad_type(e, "chat_template_kwargs", "an object", kw);
  if (tools && !json_is_array(tools)) return bad_type(e, "tools", "an array", tools);
  if (holds_nul(kw) || holds_nul(tools))
    return serve_error_set(
        e, 400, "invalid_request_error", kw && holds_nul(kw) ? "chat_template_kwargs" : "tools",
        "invalid_value", "Invalid '%s': a string holds U+0000, which a chat template cannot take.",
        kw && holds_nul(kw) ? "chat_template_kwargs" : "tools");
  if (kw || tools) {
    json_t *extra = kw ? json_deep_copy(kw) : json_object();
    if (!extra || (tools && json_object_set(extra, "tools", tools) != 0)) {
      json_decref(extra);
      return no_memory(e);
    }
    p->extra_json = json_dumps(extra, JSON_COMPACT);
    json_decref(extra);
    if (!p->extra_json) return no_memory(e);
  }
  return 0;
}

static int parse_fields(json_t *o, serve_params *p, serve_error *e) {
  json_t *model = field(o, "model");
  if (model && !json_is_string(model)) return bad_type(e, "model", "a string", model);
  json_t *user = field(o, "user");
  if (user && !json_is_string(user)) return bad_type(e, "user", "a string", user);
  long long n = 1;
  if (get_int(o, "n", -(1LL << 62), 1LL << 62, &n, e) < 0) return -1;
  if (n != 1)
    return serve_error_set(e, 400, "invalid_request_error", "n", "unsupported_parameter",
                           "Invalid value for 'n': only 1 is supported, got %lld.", n);
  if (check_unsupported(o, e)) return -1;
  long long mt = 0;
  int r;
  if ((r = get_int(o, "max_tokens", 1, 1LL << 40, &mt, e)) < 0) return -1;
  if (r) p->has_max_tokens = 1, p->max_tokens = mt;
  if ((r = get_int(o, "max_completion_tokens", 1, 1LL << 40, &mt, e)) < 0) return -1;
  if (r) p->has_max_tokens = 1, p->max_tokens = mt;
  double x;
  if ((r = get_number(o, "temperature", 0, 0, 2, &x, e)) < 0) return -1;
  if (r) p->temperature = (float)x;
  if ((r = get_number(o, "top_p", 0, 1, 1, &x, e)) < 0) return -1;
  if (r) p->top_p = (float)x;
  if ((r = get_number(o, "min_p", 0, 0, 1, &x, e)) < 0) return -1;
  if (r) p->min_p = (float)x;
  long long k;
  if ((r = get_int(o, "top_k", -1, 1LL << 30, &k, e)) < 0) return -1;
  if (r) p->top_k = k < 0 ? 0 : (int32_t)k;
  long long seed;
  if ((r = get_int(o, "seed", -(1LL << 62) * 2, (1LL << 62) + ((1LL << 62) - 1), &seed, e)) < 0)
    return -1;
  if (r) p->has_seed = 1, p->seed = (uint64_t)seed;
  if (read_stop(o, p, e) || read_stop_token_ids(o, p, e)) return -1;
  if (get_bool(o, "stream", &p->stream, e) < 0) return -1;
  json_t *so = field(o, "stream_options");
  if (so) {
    if (!json_is_object(so)) return bad_type(e, "stream_options", "an object", so);
    if (get_bool(so, "include_usage", &p->include_usage, e) < 0) {
      snprintf(e->param, sizeof e->param, "stream_options.include_usage");
      return -1;
    }
  }
  if (get_bool(o, "return_token_ids", &p->return_token_ids, e) < 0 ||
      get_bool(o, "ignore_eos", &p->ignore_eos, e) < 0 ||
      get_bool(o, "skip_special_tokens", &p->skip_special, e) < 0)
    return -1;
  return p->kind == SERVE_CHAT ? read_messages(o, p, e) : read_prompt(o, p, e);
}

int serve_parse_request(serve_kind kind, const char *body, size_t len, serve_params *p,
                        serve_error *err) {
  memset(p, 0, sizeof *p);
  p->kind = kind;
  p->temperature = 1.0f; /* OpenAI's defaults */
  p->top_p = 1.0f;
  p->skip_special = 1;
  json_error_t je;
  json_t *root = json_loadb(body, len, JSON_ALLOW_NUL, &je);
  if (!root)
    return serve_error_set(err, 400, "invalid_request_error", NULL, "invalid_json",
                           "The request body is not valid JSON: %s (line %d, column %d).", je.text,
                           je.line, je.column);
  if (!json_is_object(root)) {
    serve_error_set(err, 400, "invalid_request_error", NULL, "invalid_json",
                    "The request body must be a JSON object, got %s.", json_kind(root));
    json_decref(root);
    return -1;
  }
  const int rc = parse_fields(root, p, err);
  json_decref(root);
  if (rc) serve_params_free(p);
  return rc ? -1 : 0;
}

void serve_params_free(serve_params *p) {
  free(p->prompt_text);
  free(p->prompt_ids);
  free(p->messages_json);
  free(p->extra_json);
  for (int i = 0; i < p->n_stops; i++) free(p->stops[i]);
  const serve_kind kind = p->kind;
  memset(p, 0, sizeof *p);
  p->kind = kind;
}

/* ---- writing responses --------------------------------------------------------------------- */

/* A JSON string of text made valid UTF-8. */
static json_t *text_string(const char *text, size_t len) {
  if (serve_utf8_valid(text, len)) return json_stringn(text, len);
  sbuf b = {0};
  json_t *s = serve_utf8_clean(text, len, &b) ? NULL : json_stringn(b.data ? b.data : "", b.len);
  sbuf_free(&b);
  return s;
}

static json_t *id_array(const int64_t *ids, int64_t n) {
  json_t *a = json_array();
  for (int64_t i = 0; a && i < n; i++)
    if (json_array_append_new(a, json_integer(ids[i])) != 0) {
      json_decref(a);
      return NULL;
    }
  return a;
}

/* OpenAI's usage object; prompt_tokens_details.cached_tokens: the prompt tokens the prefix cache
 * served (always there, 0 on a miss or with the cache off, as OpenAI sends it). */
static json_t *usage_object(int64_t n_prompt, int64_t n_cached, int64_t n_completion) {
  return json_pack("{s:I, s:I, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)n_prompt,
                   "completion_tokens", (json_int_t)n_completion, "total_tokens",
                   (json_int_t)(n_prompt + n_completion), "prompt_tokens_details", "cached_tokens",
                   (json_int_t)n_cached);
}

static json_t *envelope(const serve_resp *r, int chunk) {
  const char *object = r->kind == SERVE_CHAT ? (chunk ? "chat.completion.chunk" : "chat.completion")
                                             : "text_completion";
  return json_pack("{s:s, s:s, s:I, s:s}", "id", r->id, "object", object, "created",
                   (json_int_t)r->created, "model", r->model);
}

/* Dumps o (reference stolen) into out, optionally as one SSE event. */
static int emit(sbuf *out, json_t *o, int sse) {
  if (!o) return -1;
  char *s = json_dumps(o, JSON_COMPACT);
  json_decref(o);
  if (!s) return -1;
  int rc = sse ? sbuf_puts(out, "data: ") : 0;
  if (!rc) rc = sbuf_puts(out, s);
  if (!rc && sse) rc = sbuf_puts(out, "\n\n");
  free(s);
  return rc;
}

static json_t *error_object(const serve_error *e) {
  return json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", e->message, "type", e->type,
                   "param", e->param[0] ? json_string(e->param) : json_null(), "code",
                   e->code[0] ? json_string(e->code) : json_null());
}

int serve_error_json(sbuf *out, const serve_error *e) { return emit(out, error_object(e), 0); }

int serve_error_sse(sbuf *out, const serve_error *e) { return emit(out, error_object(e), 1); }

int serve_response_json(sbuf *out, const serve_resp *r, const char *text, size_t len,
                        const char *finish_reason, const int64_t *prompt_ids, int64_t n_prompt,
                        int64_t n_cached, const int64_t *ids, int64_t n_ids) {
  json_t *o = envelope(r, 0);
  json_t *choice = json_pack("{s:i, s:o, s:s}", "index", 0, "logprobs", json_null(),
                             "finish_reason", finish_reason);
  json_t *t = text_string(text, len);
  int bad = !o || !choice || !t;
  if (!bad && r->kind == SERVE_CHAT)
    bad = json_object_set_new(choice, "message",
                              json_pack("{s:s, s:O}", "role", "assistant", "content", t)) != 0;
  else if (!bad)
    bad = json_object_set(choice, "text", t) != 0;
  json_decref(t);
  if (!bad && r->return_token_ids)
    bad = json_object_set_new(choice, "token_ids", id_array(ids, n_ids)) != 0 ||
          json_object_set_new(choice, "prompt_token_ids", id_array(prompt_ids, n_prompt)) != 0;
  if (!bad) bad = json_object_set_new(o, "choices", json_pack("[O]", choice)) != 0;
  if (!bad) bad = json_object_set_new(o, "usage", usage_object(n_prompt, n_cached, n_ids)) != 0;
  json_decref(choice);
  if (bad) {
    json_decref(o);
    return -1;
  }
  return emit(out, o, 0);
}

int serve_chunk_sse(sbuf *out, const serve_resp *r, int role, const char *text, size_t len,
                    const char *finish_reason, const int64_t *ids, int64_t n_ids,
                    int include_usage) {
  json_t *o = envelope(r, 1);
  json_t *choice =
      json_pack("{s:i, s:o, s:o}", "index", 0, "logprobs", json_null(), "finish_reason",
                finish_reason ? json_string(finish_reason) : json_null());
  int bad = !o || !choice;
  if (!bad && r->kind == SERVE_CHAT) {
    json_t *delta = json_object();
    bad = !delta;
    if (!bad && role) bad = json_object_set_new(delta, "role", json_string("assistant")) != 0;
    if (!bad && (len > 0 || role))
      bad = json_object_set_new(delta, "content", text_string(text, len)) != 0;
    if (!bad) bad = json_object_set(choice, "delta", delta) != 0;
    json_decref(delta);
  } else if (!bad) {
    bad = json_object_set_new(choice, "text", text_string(text, len)) != 0;
  }
  if (!bad && r->return_token_ids)
    bad = json_object_set_new(choice, "token_ids", id_array(ids, n_ids)) != 0;
  if (!bad) bad = json_object_set_new(o, "choices", json_pack("[O]", choice)) != 0;
  if (!bad && include_usage) bad = json_object_set_new(o, "usage", json_null()) != 0;
  json_decref(choice);
  if (bad) {
    json_decref(o);
    return -1;
  }
  return emit(out, o, 1);
}

int serve_usage_sse(sbuf *out, const serve_resp *r, int64_t n_prompt, int64_t n_cached,
                    int64_t n_completion) {
  json_t *o = envelope(r, 1);
  if (!o || json_object_set_new(o, "choices", json_array()) != 0 ||
      json_object_set_new(o, "usage", usage_object(n_prompt, n_cached, n_completion)) != 0) {
    json_decref(o);
    return -1;
  }
  return emit(out, o, 1);
}
