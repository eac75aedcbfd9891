/* fuzz_serve_request — libFuzzer target for the server's request reader (tools/serve_openai.h:
 * the bodies of POST /v1/completions and /v1/chat/completions, untrusted bytes from the network).
 *
 * The first byte picks the endpoint ('h': chat, anything else: completions); the rest is the
 * body. A refusal must carry a 4xx/5xx status, a type and a message, and its error object must be
 * valid JSON. An accepted request must hold what the header promises: exactly one prompt form
 * for its kind, at most 16 non-empty stop strings, sampling values in their ranges, messages
 * that parse back as a non-empty array of objects with string roles and string-or-null
 * contents, extra variables that parse back as an object. The response writers are then run on
 * it (the prompt text as the completion's text, so arbitrary bytes go through the UTF-8 repair)
 * and everything they write must be valid JSON / SSE. Everything is freed (leak detection).
 * The reader lives in tools/ (it is the CLI's), so its sources are compiled in here. Seeds in
 * fuzz/corpus/serve_request/.
 */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "../tools/serve_buf.c"
#include "../tools/serve_openai.c"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void check_json(const char *text, size_t len, int want_object) {
  json_error_t e;
  json_t *o = json_loadb(text, len, JSON_ALLOW_NUL, &e);
  if (!o || (want_object && !json_is_object(o))) __builtin_trap();
  json_decref(o);
}

/* Every event of an SSE text is "data: JSON\n\n". */
static void check_sse(const sbuf *b) {
  size_t at = 0;
  while (at < b->len) {
    const char *ev = b->data + at;
    const char *end = strstr(ev, "\n\n");
    if (!end || strncmp(ev, "data: ", 6) != 0) __builtin_trap();
    check_json(ev + 6, (size_t)(end - ev - 6), 1);
    at = (size_t)(end - b->data) + 2;
  }
}

static void check_params(const serve_params *p) {
  if (p->kind == SERVE_CHAT) {
    if (!p->messages_json || p->prompt_text || p->prompt_ids) __builtin_trap();
    json_error_t e;
    json_t *m = json_loads(p->messages_json, 0, &e);
    if (!json_is_array(m) || json_array_size(m) == 0) __builtin_trap();
    for (size_t i = 0; i < json_array_size(m); i++) {
      json_t *msg = json_array_get(m, i);
      json_t *c = json_object_get(msg, "content");
      if (!json_is_object(msg) || !json_is_string(json_object_get(msg, "role")) ||
          (c && !json_is_null(c) && !json_is_string(c)))
        __builtin_trap();
    }
    json_decref(m);
    if (p->extra_json) {
      json_t *x = json_loads(p->extra_json, 0, &e);
      if (!json_is_object(x)) __builtin_trap();
      json_decref(x);
    }
  } else {
    if (p->messages_json || p->extra_json || !!p->prompt_text == !!p->prompt_ids) __builtin_trap();
    for (int64_t i = 0; i < p->n_prompt_ids; i++)
      if (p->prompt_ids[i] < 0) __builtin_trap();
  }
  if (p->n_stops < 0 || p->n_stops > PH_MAX_STOP_STRINGS) __builtin_trap();
  for (int i = 0; i < p->n_stops; i++)
    if (!p->stops[i] || !p->stops[i][0]) __builtin_trap();
  if (p->n_stop_token_ids < 0 || p->n_stop_token_ids > PH_MAX_STOP_TOKENS) __builtin_trap();
  if (!(p->temperature >= 0 && p->temperature <= 2) || !(p->top_p > 0 && p->top_p <= 1) ||
      !(p->min_p >= 0 && p->min_p <= 1) || p->top_k < 0 || (p->has_max_tokens && p->max_tokens < 1))
    __builtin_trap();
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (size < 1) return 0;
  const serve_kind kind = data[0] == 'h' ? SERVE_CHAT : SERVE_COMPLETION;
  serve_params p;
  serve_error err;
  memset(&err, 0, sizeof err);
  sbuf b = {0};
  if (serve_parse_request(kind, (const char *)data + 1, size - 1, &p, &err) != 0) {
    if (err.http < 400 || err.http > 599 || !err.type[0] || !err.message[0]) __builtin_trap();
    if (serve_error_json(&b, &err) == 0) check_json(b.data, b.len, 1);
    sbuf_free(&b);
    if (p.prompt_text || p.prompt_ids || p.messages_json || p.extra_json || p.n_stops)
      __builtin_trap();
    return 0;
  }
  check_params(&p);
  const serve_resp r = {kind, "id-1", 1, "m", p.return_token_ids};
  const char *text = p.prompt_text ? p.prompt_text : (p.stops[0] ? p.stops[0] : "");
  const size_t len = p.prompt_text ? p.prompt_len : strlen(text);
  const int64_t ids[3] = {1, 2, 3};
  if (serve_response_json(&b, &r, text, len, "stop", p.prompt_ids, p.n_prompt_ids,
                          p.n_prompt_ids / 2, ids, 3) == 0)
    check_json(b.data, b.len, 1);
  sbuf_reset(&b);
  int ok = serve_chunk_sse(&b, &r, 1, "", 0, NULL, NULL, 0, p.include_usage) == 0 &&
           serve_chunk_sse(&b, &r, 0, text, len, NULL, ids, 3, p.include_usage) == 0 &&
           serve_chunk_sse(&b, &r, 0, "", 0, "length", ids, 0, p.include_usage) == 0 &&
           serve_usage_sse(&b, &r, 5, 2, 3) == 0;
  if (ok) check_sse(&b);
  sbuf_free(&b);
  serve_params_free(&p);
  return 0;
}
