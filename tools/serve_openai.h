/* serve_openai — the OpenAI wire format of `pagedhybrid serve`: request bodies of
 * POST /v1/completions and /v1/chat/completions read into serve_params with every field checked,
 * and the JSON of responses, stream chunks and errors written (docs/serve.md).
 *
 * Pure functions of their inputs (no engine, no HTTP, no tokenizer): the HTTP layer
 * (serve_http.c) tokenizes and runs what serve_parse_request returns.
 *
 * Fields read (anything else is ignored, as OpenAI's own server ignores unknown fields):
 *   both        model (string), max_tokens / max_completion_tokens (integer >= 1; the second
 *               wins), temperature [0, 2], top_p (0, 1], top_k (integer; 0 or -1: off), min_p
 *               [0, 1], seed (integer), stop (string or array of <= 16 strings; "" ignored, U+0000
 *               refused), n
 *               (1 only), stream (boolean), stream_options.include_usage (boolean), user
 *               (string); null means absent for every optional field.
 *               Non-standard (vLLM's names): ignore_eos (boolean), stop_token_ids (array of
 *               <= 16 integers), skip_special_tokens (boolean, default true), and
 *               return_token_ids (boolean: each choice, and each stream chunk's choice, carries
 *               "token_ids"; the non-streaming choice also "prompt_token_ids").
 *   completions prompt: a string, an array of token ids, or an array holding one of those.
 *   chat        messages: a non-empty array of objects with a string "role"; "content" a string,
 *               null, or an array of {"type": "text", "text": ...} parts (joined with "\n");
 *               other members are passed to the template as they are. tools (array) and
 *               chat_template_kwargs (object) become template variables.
 * Refused as unsupported (400) when set to anything but their no-op value: logprobs,
 * top_logprobs, echo, best_of > 1, suffix, frequency_penalty, presence_penalty, logit_bias,
 * response_format other than {"type": "text"}.
 */
#ifndef PH_TOOLS_SERVE_OPENAI_H
#define PH_TOOLS_SERVE_OPENAI_H

#include <stddef.h>
#include <stdint.h>

#include "pagedhybrid.h"
#include "serve_buf.h"

typedef enum serve_kind {
  SERVE_COMPLETION = 0, /* POST /v1/completions */
  SERVE_CHAT = 1,       /* POST /v1/chat/completions */
} serve_kind;

/* An OpenAI error object {"error": {"message", "type", "param", "code"}} and its HTTP status.
 * param and code are "" for null. */
typedef struct serve_error {
  int http;
  char type[40];
  char param[64];
  char code[48];
  char message[512];
} serve_error;

/* Fills *e; returns -1 (so that a parser can `return serve_error_set(...)`). */
int serve_error_set(serve_error *e, int http, const char *type, const char *param, const char *code,
                    const char *fmt, ...)
#if defined(__GNUC__)
    __attribute__((format(printf, 6, 7)))
#endif
    ;

typedef struct serve_params {
  serve_kind kind;
  /* completions: the prompt as text (prompt_text, prompt_len) or as ids (prompt_ids) */
  char *prompt_text;
  size_t prompt_len;
  int64_t *prompt_ids;
  int64_t n_prompt_ids;
  /* chat: the messages (content parts joined) and the template's extra variables, JSON text */
  char *messages_json;
  char *extra_json; /* NULL: none */
  int has_max_tokens;
  int64_t max_tokens;
  float temperature, top_p, min_p;
  int32_t top_k;
  int has_seed;
  uint64_t seed;
  char *stops[PH_MAX_STOP_STRINGS];
  int n_stops;
  int64_t stop_token_ids[PH_MAX_STOP_TOKENS];
  int n_stop_token_ids;
  int stream, include_usage, return_token_ids, ignore_eos, skip_special;
} serve_params;

/* Parses and checks a request body. Returns 0 with *p filled (free with serve_params_free), or
 * -1 with *err set (400 for malformed JSON, a wrong type or value, an unsupported option) and
 * *p holding nothing to free. */
int serve_parse_request(serve_kind kind, const char *body, size_t len, serve_params *p,
                        serve_error *err);
void serve_params_free(serve_params *p);

/* What every response of one request shares. */
typedef struct serve_resp {
  serve_kind kind;
  const char *id;    /* "cmpl-..." / "chatcmpl-..." */
  long long created; /* Unix seconds */
  const char *model;
  int return_token_ids;
} serve_resp;

/* The body of an error response. */
int serve_error_json(sbuf *out, const serve_error *e);

/* A whole non-streaming response: one choice with text (cleaned to valid UTF-8), its
 * finish_reason ("stop" | "length"), usage; with return_token_ids also the token ids. Usage is
 * OpenAI's: prompt_tokens, completion_tokens, total_tokens and prompt_tokens_details.cached_tokens
 * (n_cached: the prompt tokens the prefix cache served, 0..n_prompt). */
int serve_response_json(sbuf *out, const serve_resp *r, const char *text, size_t len,
                        const char *finish_reason, const int64_t *prompt_ids, int64_t n_prompt,
                        int64_t n_cached, const int64_t *ids, int64_t n_ids);

/* One SSE event "data: {chunk}\n\n" appended to out. role: 1 on a chat stream's first chunk (the
 * delta carries "role": "assistant"). finish_reason: NULL while running. include_usage: the
 * chunk carries "usage": null (OpenAI's form when the final usage chunk will follow). */
int serve_chunk_sse(sbuf *out, const serve_resp *r, int role, const char *text, size_t len,
                    const char *finish_reason, const int64_t *ids, int64_t n_ids,
                    int include_usage);
/* The final usage chunk (choices empty) as an SSE event; usage as in serve_response_json. */
int serve_usage_sse(sbuf *out, const serve_resp *r, int64_t n_prompt, int64_t n_cached,
                    int64_t n_completion);
/* An error inside a stream: "data: {"error": {...}}\n\n". */
int serve_error_sse(sbuf *out, const serve_error *e);

#endif /* PH_TOOLS_SERVE_OPENAI_H */
