/* fuzz_requests — libFuzzer target for the requests JSONL reader (engine/request_file.h).
 *
 * Feeds the raw input to request_file_open_text (the index: every line parsed and checked, the
 * prompt_tokens scanner included). A failure must carry its status and a message and hand back
 * no file. An indexed file must hold what the header promises: entries in increasing line
 * order, inside the input, each parsed again by request_file_get into NUL-terminated, non-empty,
 * unique ids; exactly one prompt: ids >= 0, non-empty text, or a non-empty array of message
 * objects (template variables an object, only for a chat); non-empty stop strings, the index's
 * needs_tokenizer agreeing; sampling parameters that validate for an unknown
 * vocabulary; speculative replay tokens (>= 0) owned by the spec, for the replay method only;
 * arrive/remove steps in range and equal to the entry's. Each request's result line
 * is then written (with a text) and must parse back as a JSON object with the same id and text,
 * the speculative and prefix-cache counts there exactly when they are > 0.
 * Everything is freed (the sanitize build runs with leak detection). Seeds in
 * fuzz/corpus/requests/.
 */
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/request_file.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECKED 256 /* requests parsed again per input */

static void check_request(const request_spec *items, int64_t i, const request_entry *e,
                          size_t size) {
  const request_spec *r = &items[i];
  if (!memchr(r->id, 0, sizeof r->id) || r->id[0] == '\0') __builtin_trap();
  for (int64_t j = 0; j < i; j++)
    if (strcmp(items[j].id, r->id) == 0) __builtin_trap();
  if (i > 0 && r->line <= items[i - 1].line) __builtin_trap();
  if (r->line != e->line || r->arrive_step != e->arrive_step || r->remove_step != e->remove_step)
    __builtin_trap();
  if ((size_t)e->offset + e->length > size) __builtin_trap();
  /* exactly one prompt: ids >= 0, non-empty text, or messages (a non-empty array of objects,
   * with template variables only as an object) */
  switch (r->input) {
  case REQUEST_INPUT_TOKENS:
    if (r->n_prompt < 1 || !r->prompt || r->prompt_text || r->messages_json) __builtin_trap();
    for (int64_t j = 0; j < r->n_prompt; j++)
      if (r->prompt[j] < 0) __builtin_trap();
    break;
  case REQUEST_INPUT_TEXT:
    if (r->prompt || r->n_prompt || r->messages_json || !r->prompt_text) __builtin_trap();
    if (r->prompt_text_len == 0 || strlen(r->prompt_text) != r->prompt_text_len) __builtin_trap();
    break;
  case REQUEST_INPUT_MESSAGES: {
    if (r->prompt || r->n_prompt || r->prompt_text || !r->messages_json) __builtin_trap();
    json_error_t je;
    json_t *m = json_loads(r->messages_json, 0, &je);
    if (!json_is_array(m) || json_array_size(m) == 0) __builtin_trap();
    for (size_t j = 0; j < json_array_size(m); j++)
      if (!json_is_object(json_array_get(m, j))) __builtin_trap();
    json_decref(m);
    if (r->chat_extra_json) {
      json_t *x = json_loads(r->chat_extra_json, 0, &je);
      if (!json_is_object(x)) __builtin_trap();
      json_decref(x);
    }
    break;
  }
  default:
    __builtin_trap();
  }
  if (r->input != REQUEST_INPUT_MESSAGES && (r->chat_extra_json || r->add_generation_prompt))
    __builtin_trap();
  if (r->n_stops < 0 || r->n_stops > REQUEST_MAX_STOPS) __builtin_trap();
  for (int j = 0; j < r->n_stops; j++)
    if (!r->stops[j] || r->stops[j][0] == '\0') __builtin_trap();
  if (request_spec_needs_tokenizer(r) != e->needs_tokenizer) __builtin_trap();
  if (sampling_params_validate(&r->sampling, 0, NULL) != PH_OK) __builtin_trap();
  /* speculative: replay tokens owned by the spec (ids >= 0), and only for replay; a method
   * other than none only from a "speculative" object */
  const ph_speculative_params *sp = &r->sampling.speculative;
  if (sp->replay_tokens != r->draft_tokens) __builtin_trap();
  if ((sp->method == PH_DRAFT_REPLAY) != (sp->n_replay_tokens > 0)) __builtin_trap();
  if ((sp->n_replay_tokens > 0) != (r->draft_tokens != NULL)) __builtin_trap();
  for (int64_t j = 0; j < sp->n_replay_tokens; j++)
    if (r->draft_tokens[j] < 0) __builtin_trap();
  if (sp->method != PH_DRAFT_NONE && !r->speculative_given) __builtin_trap();
  if (r->arrive_step < 0) __builtin_trap();
  if (r->remove_step != -1 && r->remove_step < r->arrive_step) __builtin_trap();

  /* the result writer on what was read: the prompt stands in for generated tokens, the prompt
   * text (or the first stop string) for the generated text */
  int64_t n = r->n_prompt < 64 ? r->n_prompt : 64;
  const char *text = r->prompt_text ? r->prompt_text : r->n_stops ? r->stops[0] : NULL;
  request_timing t = {.queue_ms = 0.5,
                      .ttft_ms = -1.0,
                      .total_ms = 2.0,
                      .n_prompt = r->n_prompt,
                      .n_generated = n,
                      .n_drafted = sp->n_replay_tokens,
                      .n_accepted = sp->n_replay_tokens / 2,
                      .n_cached = r->n_prompt / 2};
  char *line = NULL;
  diag d;
  ph_status st = request_result_to_json_text(r->id, text, text ? strlen(text) : 0, r->prompt, n,
                                             "length", &t, NULL, &line, &d);
  if (st != PH_OK) {
    /* ids come from JSON, so they are valid UTF-8: only memory may run out */
    if (st != PH_ERR_NO_MEMORY) __builtin_trap();
    return;
  }
  json_error_t err;
  json_t *o = json_loads(line, 0, &err);
  if (!json_is_object(o)) __builtin_trap();
  const char *id = json_string_value(json_object_get(o, "id"));
  if (!id || strcmp(id, r->id) != 0) __builtin_trap();
  if ((int64_t)json_array_size(json_object_get(o, "tokens")) != n) __builtin_trap();
  const json_t *jt = json_object_get(o, "text");
  if ((jt != NULL) != (text != NULL)) __builtin_trap();
  if (jt && strcmp(json_string_value(jt), text) != 0) __builtin_trap();
  /* the speculative counts are there exactly when drafts were counted */
  const json_t *drafted = json_object_get(o, "n_drafted_tokens");
  if ((drafted != NULL) != (t.n_drafted > 0)) __builtin_trap();
  if (drafted && (json_integer_value(drafted) != t.n_drafted ||
                  json_integer_value(json_object_get(o, "n_accepted_tokens")) != t.n_accepted))
    __builtin_trap();
  /* the prefix cache's count likewise, when some of the prompt came from it */
  const json_t *cached = json_object_get(o, "n_cached_tokens");
  if ((cached != NULL) != (t.n_cached > 0)) __builtin_trap();
  if (cached && json_integer_value(cached) != t.n_cached) __builtin_trap();
  json_decref(o);
  free(line);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  request_file *f = NULL;
  diag d;
  diag_clear(&d);
  ph_status st = request_file_open_text((const char *)data, size, "fuzz", &f, &d);
  if (st != PH_OK) {
    if (d.status != st || d.msg[0] == '\0' || f) __builtin_trap();
    return 0;
  }
  const int64_t n = request_file_count(f);
  if (n < 1) __builtin_trap();
  request_spec items[CHECKED];
  int64_t got = 0;
  for (; got < n && got < CHECKED; got++) {
    /* indexed lines parse again, and the same way */
    if (request_file_get(f, got, &items[got], &d) != PH_OK) __builtin_trap();
    check_request(items, got, request_file_entry(f, got), size);
  }
  for (int64_t i = 0; i < got; i++) request_spec_free(&items[i]);
  request_file_close(f);
  return 0;
}
