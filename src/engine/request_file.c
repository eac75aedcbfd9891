/* request_file — see request_file.h and docs/requests-jsonl.md.
 *
 * The input is untrusted: each non-blank line goes through jansson (duplicate keys rejected),
 * then every key is looked up in one table (unknown keys are errors, so a typo such as
 * "temprature" cannot silently fall back to a default) and read by a typed getter whose message
 * names "<label>:<line>: <key>" and what was found instead. A plain integer prompt_tokens array
 * is read by a scanner instead (see "prompt_tokens without a JSON tree"). The file is read once
 * to index and check it (ids kept unique with a hash set of id hashes, so errors come in file
 * order), then each line is read again when its request is asked for.
 */
#include "engine/request_file.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/fmap.h"
#include "base/hash.h"
#include "io/json_util.h"

#define DEFAULT_LABEL "requests"
#define KEY_SHOWN     40 /* bytes of an unknown key or an id quoted in a message */
#define INT_FIELD_MAX ((json_int_t)INT64_MAX)

/* The keys a request line may hold; anything else is an error. */
static const char *const known_keys[] = {
    "id",
    "prompt_tokens",
    "prompt",
    "messages",
    "tools",
    "chat_template_kwargs",
    "add_generation_prompt",
    "max_new_tokens",
    "max_tokens",
    "arrive_step",
    "temperature",
    "top_k",
    "top_p",
    "min_p",
    "seed",
    "stop",
    "stop_token_ids",
    "ignore_eos",
    "remove_step",
    "speculative",
};
#define KNOWN_KEYS_LISTED                                                                          \
  "id, prompt_tokens, prompt, messages, tools, chat_template_kwargs, add_generation_prompt, "      \
  "max_new_tokens, max_tokens, arrive_step, remove_step, temperature, top_k, top_p, min_p, seed, " \
  "stop, stop_token_ids, ignore_eos, speculative"

/* The keys of a chat (they need "messages"). */
static const char *const chat_keys[] = {"tools", "chat_template_kwargs", "add_generation_prompt"};

/* The keys of a request's "speculative" object. */
static const char *const spec_keys[] = {"method", "num_draft_tokens", "ngram_min", "ngram_max",
                                        "tokens"};

/* Where a line's messages come from. */
typedef struct at {
  const char *label;
  int line;
} at;

/* A printable copy of s for messages: at most KEY_SHOWN bytes, control bytes as '?'. */
static const char *shown(const char *s, char buf[KEY_SHOWN + 4]) {
  size_t i = 0;
  for (; s[i] && i < KEY_SHOWN; i++) buf[i] = (unsigned char)s[i] < 0x20 ? '?' : s[i];
  if (s[i]) buf[i++] = '.', buf[i++] = '.', buf[i++] = '.';
  buf[i] = '\0';
  return buf;
}

/* ---- typed getters: absent and null read as "not given" -------------------------------------- */

static const json_t *get(const json_t *obj, const char *key) {
  const json_t *v = json_object_get(obj, key);
  return v && !json_is_null(v) ? v : NULL;
}

/* An integer in [lo, hi] at obj's key, named parent.key in messages when parent is given
 * (a key of a nested object); *out untouched when absent. */
static ph_status get_int_in(const at *a, const char *parent, const json_t *obj, const char *key,
                            json_int_t lo, json_int_t hi, int64_t *out, diag *d) {
  const json_t *v = get(obj, key);
  if (!v) return PH_OK;
  const char *dot = parent ? "." : "";
  if (!parent) parent = "";
  RETURN_ERROR_IF(!json_is_integer(v), d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: %s%s%s is %s, expected an integer", a->label, a->line, parent, dot, key,
                  json_kind(v));
  json_int_t x = json_integer_value(v);
  RETURN_ERROR_IF(x < lo || x > hi, d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: %s%s%s = %" JSON_INTEGER_FORMAT " is outside [%" JSON_INTEGER_FORMAT
                  ", %" JSON_INTEGER_FORMAT "]",
                  a->label, a->line, parent, dot, key, x, lo, hi);
  *out = (int64_t)x;
  return PH_OK;
}

/* A top-level integer in [lo, hi]; *out untouched when absent. */
static ph_status get_int(const at *a, const json_t *obj, const char *key, json_int_t lo,
                         json_int_t hi, int64_t *out, diag *d) {
  return get_int_in(a, NULL, obj, key, lo, hi, out, d);
}

/* A number (integer or real) as float; the range is sampling_params_validate's to check. */
static ph_status get_float(const at *a, const json_t *obj, const char *key, float *out, diag *d) {
  const json_t *v = get(obj, key);
  if (!v) return PH_OK;
  RETURN_ERROR_IF(!json_is_number(v), d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: %s is %s, expected a number", a->label, a->line, key, json_kind(v));
  const double x = json_number_value(v);
  /* named with the value given: converted, it would read as inf (and the conversion of a
   * double beyond the float range is undefined) */
  RETURN_ERROR_IF(!(x >= -FLT_MAX && x <= FLT_MAX), d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: %s = %g is outside the range of a float (magnitude at most %g)", a->label,
                  a->line, key, x, (double)FLT_MAX);
  *out = (float)x;
  return PH_OK;
}

static ph_status get_bool(const at *a, const json_t *obj, const char *key, int *out, diag *d) {
  const json_t *v = get(obj, key);
  if (!v) return PH_OK;
  RETURN_ERROR_IF(!json_is_boolean(v), d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: %s is %s, expected true or false", a->label, a->line, key, json_kind(v));
  *out = json_is_true(v);
  return PH_OK;
}

/* Element i of an array of token ids: an integer >= 0. */
static ph_status get_token(const at *a, const char *key, const json_t *arr, size_t i, int64_t *out,
                           diag *d) {
  const json_t *v = json_array_get(arr, i);
  RETURN_ERROR_IF(!json_is_integer(v), d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: %s[%zu] is %s, expected a non-negative integer token id", a->label,
                  a->line, key, i, json_kind(v));
  json_int_t x = json_integer_value(v);
  RETURN_ERROR_IF(x < 0, d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: %s[%zu] = %" JSON_INTEGER_FORMAT " is negative", a->label, a->line, key,
                  i, x);
  *out = (int64_t)x;
  return PH_OK;
}

/* ---- one line -------------------------------------------------------------------------------- */

/* Every key of obj is one of keys[n]; else the first that is not, named with where (the object:
 * "" for the line) and listed (the known keys as the message spells them). */
static ph_status check_keys(const at *a, const json_t *obj, const char *const *keys, size_t n,
                            const char *where, const char *listed, diag *d) {
  const char *key;
  const json_t *v;
  json_object_foreach((json_t *)obj, key, v) {
    int known = 0;
    for (size_t i = 0; i < n; i++) known |= strcmp(key, keys[i]) == 0;
    char buf[KEY_SHOWN + 4];
    RETURN_ERROR_IF(!known, d, PH_ERR_CONFIG_INVALID, "%s:%d: unknown key \"%s\"%s (known: %s)",
                    a->label, a->line, shown(key, buf), where, listed);
  }
  return PH_OK;
}

static ph_status read_id(const at *a, const json_t *obj, char id[REQUEST_ID_BYTES], diag *d) {
  const json_t *v = get(obj, "id");
  RETURN_ERROR_IF(!v, d, PH_ERR_CONFIG_MISSING_FIELD, "%s:%d: id is missing", a->label, a->line);
  if (json_is_integer(v)) {
    json_int_t x = json_integer_value(v);
    RETURN_ERROR_IF(x < 0, d, PH_ERR_CONFIG_INVALID,
                    "%s:%d: id = %" JSON_INTEGER_FORMAT " is negative", a->label, a->line, x);
    snprintf(id, REQUEST_ID_BYTES, "%" JSON_INTEGER_FORMAT, x);
    return PH_OK;
  }
  RETURN_ERROR_IF(!json_is_string(v), d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: id is %s, expected a string or a non-negative integer", a->label, a->line,
                  json_kind(v));
  size_t n = json_string_length(v);
  RETURN_ERROR_IF(n == 0, d, PH_ERR_CONFIG_INVALID, "%s:%d: id is empty", a->label, a->line);
  RETURN_ERROR_IF(n >= REQUEST_ID_BYTES, d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: id is %zu bytes, at most %d", a->label, a->line, n, REQUEST_ID_BYTES - 1);
  memcpy(id, json_string_value(v), n + 1); /* no NUL inside: jansson refuses \u0000 */
  return PH_OK;
}

static ph_status read_prompt(const at *a, const json_t *obj, request_spec *r, diag *d) {
  const json_t *v = get(obj, "prompt_tokens");
  RETURN_ERROR_IF(!v, d, PH_ERR_CONFIG_MISSING_FIELD, "%s:%d: prompt_tokens is missing", a->label,
                  a->line);
  RETURN_ERROR_IF(!json_is_array(v), d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: prompt_tokens is %s, expected an array of token ids", a->label, a->line,
                  json_kind(v));
  size_t n = json_array_size(v);
  RETURN_ERROR_IF(n == 0, d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: prompt_tokens is empty, a request needs at least one token", a->label,
                  a->line);
  int64_t *prompt = malloc(n * sizeof *prompt);
  RETURN_ERROR_IF(!prompt, d, PH_ERR_NO_MEMORY, "%s:%d: %zu prompt tokens", a->label, a->line, n);
  for (size_t i = 0; i < n; i++) {
    ph_status s = get_token(a, "prompt_tokens", v, i, &prompt[i], d);
    if (s != PH_OK) {
      free(prompt);
      return s;
    }
  }
  r->prompt = prompt;
  r->n_prompt = (int64_t)n;
  return PH_OK;
}

static ph_status read_stop_ids(const at *a, const json_t *obj, sampling_params *sp, diag *d) {
  const json_t *v = get(obj, "stop_token_ids");
  if (!v) return PH_OK;
  RETURN_ERROR_IF(!json_is_array(v), d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: stop_token_ids is %s, expected an array of token ids", a->label, a->line,
                  json_kind(v));
  size_t n = json_array_size(v);
  RETURN_ERROR_IF(n > SAMPLING_MAX_STOP, d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: stop_token_ids lists %zu ids, at most %d", a->label, a->line, n,
                  SAMPLING_MAX_STOP);
  for (size_t i = 0; i < n; i++)
    FORWARD_IF_ERROR(get_token(a, "stop_token_ids", v, i, &sp->stop_token_ids[i], d));
  sp->n_stop_token_ids = (int32_t)n;
  return PH_OK;
}

/* "speculative": {"method": "none" | "ngram" | "mtp" | "replay", "num_draft_tokens": k,
 * "ngram_min": n, "ngram_max": n, "tokens": [...]} (tokens: replay only, allocated into
 * r->draft_tokens). The values are sampling_params_validate's to check. */
static ph_status read_speculative(const at *a, const json_t *obj, request_spec *r, diag *d) {
  const json_t *v = get(obj, "speculative");
  if (!v) return PH_OK;
  r->speculative_given = 1;
  RETURN_ERROR_IF(!json_is_object(v), d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: speculative is %s, expected an object like {\"method\": \"ngram\", "
                  "\"num_draft_tokens\": 4}",
                  a->label, a->line, json_kind(v));
  FORWARD_IF_ERROR(check_keys(a, v, spec_keys, sizeof spec_keys / sizeof spec_keys[0],
                              " in speculative",
                              "method, num_draft_tokens, ngram_min, ngram_max, tokens", d));
  ph_speculative_params *sp = &r->sampling.speculative;
  const json_t *m = get(v, "method");
  RETURN_ERROR_IF(!m || !json_is_string(m), d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: speculative.method is %s, expected \"none\", \"ngram\", \"mtp\" or "
                  "\"replay\"",
                  a->label, a->line, m ? json_kind(m) : "missing");
  static const ph_draft_method methods[] = {PH_DRAFT_NONE, PH_DRAFT_NGRAM, PH_DRAFT_MTP,
                                            PH_DRAFT_REPLAY};
  int found = 0;
  for (size_t i = 0; i < sizeof methods / sizeof methods[0]; i++)
    if (strcmp(json_string_value(m), ph_draft_method_name(methods[i])) == 0) {
      sp->method = methods[i];
      found = 1;
    }
  char buf[KEY_SHOWN + 4];
  RETURN_ERROR_IF(!found, d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: speculative.method \"%s\" is none of none, ngram, mtp, replay", a->label,
                  a->line, shown(json_string_value(m), buf));
  int64_t k = 0, lo = 0, hi = 0;
  FORWARD_IF_ERROR(
      get_int_in(a, "speculative", v, "num_draft_tokens", 0, PH_MAX_DRAFT_TOKENS, &k, d));
  FORWARD_IF_ERROR(get_int_in(a, "speculative", v, "ngram_min", 0, SPEC_MAX_NGRAM, &lo, d));
  FORWARD_IF_ERROR(get_int_in(a, "speculative", v, "ngram_max", 0, SPEC_MAX_NGRAM, &hi, d));
  sp->num_draft_tokens = (int32_t)k;
  sp->ngram_min = (int32_t)lo;
  sp->ngram_max = (int32_t)hi;
  const json_t *t = get(v, "tokens");
  RETURN_ERROR_IF(t && sp->method != PH_DRAFT_REPLAY, d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: speculative.tokens is for the replay method only", a->label, a->line);
  if (!t) return PH_OK;
  RETURN_ERROR_IF(
      !json_is_array(t) || json_array_size(t) == 0 || json_array_size(t) > SPEC_MAX_REPLAY, d,
      PH_ERR_CONFIG_INVALID, "%s:%d: speculative.tokens must be an array of 1..%d token ids",
      a->label, a->line, SPEC_MAX_REPLAY);
  const size_t n = json_array_size(t);
  r->draft_tokens = malloc(n * sizeof *r->draft_tokens);
  RETURN_ERROR_IF(!r->draft_tokens, d, PH_ERR_NO_MEMORY, "%s:%d: out of memory", a->label, a->line);
  for (size_t i = 0; i < n; i++)
    FORWARD_IF_ERROR(get_token(a, "speculative.tokens", t, i, &r->draft_tokens[i], d));
  sp->replay_tokens = r->draft_tokens;
  sp->n_replay_tokens = (int64_t)n;
  return PH_OK;
}

/* A malloc'ed NUL-terminated copy of JSON string v (jansson refuses \u0000, so none inside). */
static char *dup_string(const json_t *v, size_t *len) {
  const size_t n = json_string_length(v);
  char *s = malloc(n + 1);
  if (!s) return NULL;
  memcpy(s, json_string_value(v), n + 1);
  if (len) *len = n;
  return s;
}

/* "stop": a string, or an array of at most REQUEST_MAX_STOPS strings; each non-empty (the text
 * stream cuts the output before the first one that occurs). Allocated into r->stops. */
static ph_status read_stops(const at *a, const json_t *obj, request_spec *r, diag *d) {
  const json_t *v = get(obj, "stop");
  if (!v) return PH_OK;
  RETURN_ERROR_IF(!json_is_string(v) && !json_is_array(v), d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: stop is %s, expected a string or an array of strings", a->label, a->line,
                  json_kind(v));
  const size_t n = json_is_string(v) ? 1 : json_array_size(v);
  RETURN_ERROR_IF(n > REQUEST_MAX_STOPS, d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: stop lists %zu strings, at most %d", a->label, a->line, n,
                  REQUEST_MAX_STOPS);
  for (size_t i = 0; i < n; i++) {
    const json_t *s = json_is_string(v) ? v : json_array_get(v, i);
    RETURN_ERROR_IF(!json_is_string(s), d, PH_ERR_CONFIG_INVALID,
                    "%s:%d: stop[%zu] is %s, expected a string", a->label, a->line, i,
                    json_kind(s));
    char name[32] = "stop";
    if (!json_is_string(v)) snprintf(name, sizeof name, "stop[%zu]", i);
    RETURN_ERROR_IF(json_string_length(s) == 0, d, PH_ERR_CONFIG_INVALID,
                    "%s:%d: %s is an empty string (a stop string needs at least one byte)",
                    a->label, a->line, name);
    r->stops[i] = dup_string(s, NULL);
    RETURN_ERROR_IF(!r->stops[i], d, PH_ERR_NO_MEMORY, "%s:%d: stop strings", a->label, a->line);
    r->n_stops = (int)i + 1;
  }
  return PH_OK;
}

/* "prompt": non-empty text, kept as it is (the caller encodes it). */
static ph_status read_text_prompt(const at *a, const json_t *v, request_spec *r, diag *d) {
  RETURN_ERROR_IF(!json_is_string(v), d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: prompt is %s, expected a string (text; token ids go in prompt_tokens)",
                  a->label, a->line, json_kind(v));
  RETURN_ERROR_IF(json_string_length(v) == 0, d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: prompt is empty, a request needs some text", a->label, a->line);
  r->prompt_text = dup_string(v, &r->prompt_text_len);
  RETURN_ERROR_IF(!r->prompt_text, d, PH_ERR_NO_MEMORY, "%s:%d: prompt text", a->label, a->line);
  r->input = REQUEST_INPUT_TEXT;
  return PH_OK;
}

static char *dump(const json_t *v) {
  return json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
}

/* "messages": a non-empty array of objects (what each holds is the template's to judge), with
 * "tools" (an array), "chat_template_kwargs" (an object of further template variables) and
 * "add_generation_prompt" (default true); kept as compact JSON for ph_chat_render. */
static ph_status read_messages(const at *a, const json_t *obj, const json_t *v, request_spec *r,
                               diag *d) {
  RETURN_ERROR_IF(!json_is_array(v), d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: messages is %s, expected an array of message objects like "
                  "{\"role\": \"user\", \"content\": \"...\"}",
                  a->label, a->line, json_kind(v));
  RETURN_ERROR_IF(json_array_size(v) == 0, d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: messages is empty, a chat needs at least one message", a->label, a->line);
  for (size_t i = 0; i < json_array_size(v); i++)
    RETURN_ERROR_IF(!json_is_object(json_array_get(v, i)), d, PH_ERR_CONFIG_INVALID,
                    "%s:%d: messages[%zu] is %s, expected an object like {\"role\": \"user\", "
                    "\"content\": \"...\"}",
                    a->label, a->line, i, json_kind(json_array_get(v, i)));
  const json_t *tools = get(obj, "tools"), *kw = get(obj, "chat_template_kwargs");
  RETURN_ERROR_IF(tools && !json_is_array(tools), d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: tools is %s, expected an array of tool definitions", a->label, a->line,
                  json_kind(tools));
  RETURN_ERROR_IF(kw && !json_is_object(kw), d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: chat_template_kwargs is %s, expected an object of template variables",
                  a->label, a->line, json_kind(kw));
  static const char *const reserved[] = {"messages", "tools", "add_generation_prompt"};
  for (size_t i = 0; kw && i < sizeof reserved / sizeof reserved[0]; i++)
    RETURN_ERROR_IF(json_object_get(kw, reserved[i]), d, PH_ERR_CONFIG_INVALID,
                    "%s:%d: chat_template_kwargs.%s: give %s as a key of the line", a->label,
                    a->line, reserved[i], reserved[i]);
  r->add_generation_prompt = 1;
  FORWARD_IF_ERROR(get_bool(a, obj, "add_generation_prompt", &r->add_generation_prompt, d));
  r->messages_json = dump(v);
  RETURN_ERROR_IF(!r->messages_json, d, PH_ERR_NO_MEMORY, "%s:%d: messages", a->label, a->line);
  r->input = REQUEST_INPUT_MESSAGES;
  if (!tools && !kw) return PH_OK;
  json_t *extra = kw ? json_copy((json_t *)kw) : json_object();
  const int ok = extra && (!tools || json_object_set(extra, "tools", (json_t *)tools) == 0);
  r->chat_extra_json = ok ? dump(extra) : NULL;
  json_decref(extra);
  RETURN_ERROR_IF(!r->chat_extra_json, d, PH_ERR_NO_MEMORY, "%s:%d: chat template variables",
                  a->label, a->line);
  return PH_OK;
}

/* Exactly one of prompt_tokens (given: the caller reads it), prompt and messages; the chat keys
 * only with messages. */
static ph_status read_input(const at *a, const json_t *obj, int *tokens_given, request_spec *r,
                            diag *d) {
  const json_t *ids = get(obj, "prompt_tokens"), *text = get(obj, "prompt");
  const json_t *msgs = get(obj, "messages");
  const int n = (ids != NULL) + (text != NULL) + (msgs != NULL);
  RETURN_ERROR_IF(n == 0, d, PH_ERR_CONFIG_MISSING_FIELD,
                  "%s:%d: prompt_tokens is missing (a request gives one of prompt_tokens: ids, "
                  "prompt: text, messages: a chat)",
                  a->label, a->line);
  RETURN_ERROR_IF(n > 1, d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: %s and %s are both given; a request gives exactly one of "
                  "prompt_tokens, prompt, messages",
                  a->label, a->line, ids ? "prompt_tokens" : "prompt",
                  msgs ? "messages" : "prompt");
  for (size_t i = 0; !msgs && i < sizeof chat_keys / sizeof chat_keys[0]; i++)
    RETURN_ERROR_IF(get(obj, chat_keys[i]), d, PH_ERR_CONFIG_INVALID,
                    "%s:%d: %s is for a chat: it needs messages", a->label, a->line, chat_keys[i]);
  *tokens_given = ids != NULL;
  if (text) return read_text_prompt(a, text, r, d);
  if (msgs) return read_messages(a, obj, msgs, r, d);
  return PH_OK;
}

/* Everything but the prompt; only replay draft tokens are allocated (r->draft_tokens). */
static ph_status read_fields(const at *a, const json_t *obj, request_spec *r, diag *d) {
  FORWARD_IF_ERROR(check_keys(a, obj, known_keys, sizeof known_keys / sizeof known_keys[0], "",
                              KNOWN_KEYS_LISTED, d));
  FORWARD_IF_ERROR(read_id(a, obj, r->id, d));
  sampling_params *sp = &r->sampling;
  *sp = sampling_params_default();
  int64_t top_k = sp->top_k, seed = 0, max_tokens = -1;
  FORWARD_IF_ERROR(get_int(a, obj, "max_new_tokens", 1, INT_FIELD_MAX, &sp->max_new_tokens, d));
  /* max_tokens: the OpenAI name of max_new_tokens; both may be given only when they agree */
  FORWARD_IF_ERROR(get_int(a, obj, "max_tokens", 1, INT_FIELD_MAX, &max_tokens, d));
  if (max_tokens >= 0) {
    RETURN_ERROR_IF(get(obj, "max_new_tokens") && max_tokens != sp->max_new_tokens, d,
                    PH_ERR_CONFIG_INVALID,
                    "%s:%d: max_tokens = %lld and max_new_tokens = %lld differ (max_tokens is the "
                    "OpenAI name of max_new_tokens: give one)",
                    a->label, a->line, (long long)max_tokens, (long long)sp->max_new_tokens);
    sp->max_new_tokens = max_tokens;
  }
  FORWARD_IF_ERROR(read_stops(a, obj, r, d));
  FORWARD_IF_ERROR(get_float(a, obj, "temperature", &sp->temperature, d));
  FORWARD_IF_ERROR(get_int(a, obj, "top_k", 0, INT32_MAX, &top_k, d));
  FORWARD_IF_ERROR(get_float(a, obj, "top_p", &sp->top_p, d));
  FORWARD_IF_ERROR(get_float(a, obj, "min_p", &sp->min_p, d));
  FORWARD_IF_ERROR(get_int(a, obj, "seed", 0, INT_FIELD_MAX, &seed, d));
  FORWARD_IF_ERROR(read_stop_ids(a, obj, sp, d));
  FORWARD_IF_ERROR(get_bool(a, obj, "ignore_eos", &sp->ignore_eos, d));
  FORWARD_IF_ERROR(read_speculative(a, obj, r, d));
  sp->top_k = (int32_t)top_k;
  sp->seed = (uint64_t)seed;
  diag v;
  diag_clear(&v);
  RETURN_ERROR_IF(sampling_params_validate(sp, 0, &v) != PH_OK, d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: %s", a->label, a->line, v.msg);

  r->arrive_step = 0;
  r->remove_step = -1;
  FORWARD_IF_ERROR(get_int(a, obj, "arrive_step", 0, INT_FIELD_MAX, &r->arrive_step, d));
  FORWARD_IF_ERROR(get_int(a, obj, "remove_step", -1, INT_FIELD_MAX, &r->remove_step, d));
  RETURN_ERROR_IF(r->remove_step >= 0 && r->remove_step < r->arrive_step, d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: remove_step = %lld is before arrive_step = %lld (-1 = never remove)",
                  a->label, a->line, (long long)r->remove_step, (long long)r->arrive_step);
  return PH_OK;
}

/* ---- prompt_tokens without a JSON tree ---------------------------------------------------------
 * jansson builds a node per array element (~50 bytes a token with its table), so the prompt is
 * read here when it is a plain array of integers, and its bytes are blanked to "[   ...   ]"
 * before jansson parses the rest of the line: the line keeps its length (columns in messages
 * do not move), jansson still sees an array under the key (duplicate keys and every other rule
 * are its to check), and the values come from here. Anything else in the array (a string, a
 * real, an integer beyond int64, a syntax error) leaves the line to jansson whole, so every
 * message stays jansson's. Locating the key is a loose walk over the top-level object: a line
 * it does not understand is simply left to jansson. */

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static size_t skip_ws(const char *s, size_t i, size_t n) {
  while (i < n && is_ws(s[i])) i++;
  return i;
}

/* s[*i] == '"': past the closing quote; 0 when unterminated. */
static int skip_string(const char *s, size_t *i, size_t n) {
  for (size_t j = *i + 1; j < n; j++) {
    if (s[j] == '\\') {
      j++;
    } else if (s[j] == '"') {
      *i = j + 1;
      return 1;
    }
  }
  return 0;
}

/* Past one value (loosely: strings, brackets, or a scalar's bytes); 0 when it runs off the end. */
static int skip_value(const char *s, size_t *i, size_t n) {
  size_t j = *i;
  if (j >= n) return 0;
  if (s[j] == '"') return skip_string(s, i, n);
  if (s[j] == '[' || s[j] == '{') {
    int64_t depth = 0;
    while (j < n) {
      const char c = s[j];
      if (c == '"') {
        if (!skip_string(s, &j, n)) return 0;
        continue;
      }
      depth += (c == '[' || c == '{') - (c == ']' || c == '}');
      j++;
      if (depth == 0) {
        *i = j;
        return 1;
      }
    }
    return 0;
  }
  const size_t start = j;
  while (j < n && !is_ws(s[j]) && s[j] != ',' && s[j] != '}' && s[j] != ']') j++;
  *i = j;
  return j > start;
}

/* The position of the '[' of the top-level member "prompt_tokens" (spelled without escapes);
 * 0 when there is none or the walk gets lost. */
static int find_prompt_array(const char *s, size_t n, size_t *open) {
  static const char key[] = "\"prompt_tokens\"";
  size_t i = skip_ws(s, 0, n);
  if (i >= n || s[i] != '{') return 0;
  for (i = skip_ws(s, i + 1, n); i < n && s[i] == '"';) {
    const size_t k0 = i;
    if (!skip_string(s, &i, n)) return 0;
    const int is_key = i - k0 == sizeof key - 1 && memcmp(s + k0, key, sizeof key - 1) == 0;
    i = skip_ws(s, i, n);
    if (i >= n || s[i] != ':') return 0;
    i = skip_ws(s, i + 1, n);
    if (is_key) {
      *open = i;
      return i < n && s[i] == '[';
    }
    if (!skip_value(s, &i, n)) return 0;
    i = skip_ws(s, i, n);
    if (i >= n || s[i] != ',') return 0;
    i = skip_ws(s, i + 1, n);
  }
  return 0;
}

/* One JSON integer at s[*i] as jansson reads it (-?(0|[1-9][0-9]*), no fraction or exponent,
 * within int64); 0 otherwise. */
static int scan_int(const char *s, size_t *i, size_t n, int64_t *out) {
  size_t j = *i;
  const int neg = j < n && s[j] == '-';
  j += (size_t)neg;
  if (j >= n || s[j] < '0' || s[j] > '9') return 0;
  uint64_t v = 0;
  const uint64_t limit = neg ? (uint64_t)INT64_MAX + 1 : (uint64_t)INT64_MAX;
  if (s[j] == '0') {
    j++;
  } else {
    for (; j < n && s[j] >= '0' && s[j] <= '9'; j++) {
      const uint64_t digit = (uint64_t)(s[j] - '0');
      if (v > (limit - digit) / 10) return 0;
      v = v * 10 + digit;
    }
  }
  if (j < n && (s[j] == '.' || s[j] == 'e' || s[j] == 'E' || (s[j] >= '0' && s[j] <= '9')))
    return 0;
  *out = neg ? (v == (uint64_t)INT64_MAX + 1 ? INT64_MIN : -(int64_t)v) : (int64_t)v;
  *i = j;
  return 1;
}

typedef struct prompt_scan {
  int found;              /* a plain integer array, blanked */
  int64_t n;              /* its elements */
  int64_t first_negative; /* index of the first element < 0, or -1 */
  int64_t negative_value; /* that element */
} prompt_scan;

/* Reads the array at s[open] == '[' into out[] (NULL: counts only); 0 when it is not a plain
 * integer array. *close: the position of its ']'. */
static int scan_int_array(const char *s, size_t n, size_t open, int64_t *out, prompt_scan *ps,
                          size_t *close) {
  size_t i = skip_ws(s, open + 1, n);
  ps->n = 0;
  ps->first_negative = -1;
  if (i < n && s[i] == ']') {
    *close = i;
    return 1;
  }
  for (;;) {
    int64_t v;
    if (!scan_int(s, &i, n, &v)) return 0;
    if (v < 0 && ps->first_negative < 0) {
      ps->first_negative = ps->n;
      ps->negative_value = v;
    }
    if (out) out[ps->n] = v;
    ps->n++;
    i = skip_ws(s, i, n);
    if (i < n && s[i] == ']') {
      *close = i;
      return 1;
    }
    if (i >= n || s[i] != ',') return 0;
    i = skip_ws(s, i + 1, n);
  }
}

/* The fast path: when the line's prompt_tokens is a plain integer array, its values (only when
 * want is set: *prompt malloc'd) and the blanked line. PH_OK also when not found (ps->found 0). */
static ph_status scan_prompt(const at *a, char *s, size_t n, int want, prompt_scan *ps,
                             int64_t **prompt, diag *d) {
  memset(ps, 0, sizeof *ps);
  *prompt = NULL;
  size_t open = 0, close = 0;
  if (!find_prompt_array(s, n, &open) || !scan_int_array(s, n, open, NULL, ps, &close))
    return PH_OK;
  if (want && ps->n > 0 && ps->first_negative < 0) {
    *prompt = malloc((size_t)ps->n * sizeof **prompt);
    RETURN_ERROR_IF(!*prompt, d, PH_ERR_NO_MEMORY, "%s:%d: %lld prompt tokens", a->label, a->line,
                    (long long)ps->n);
    scan_int_array(s, n, open, *prompt, ps, &close);
  }
  memset(s + open + 1, ' ', close - open - 1);
  ps->found = 1;
  return PH_OK;
}

/* ---- one line -------------------------------------------------------------------------------- */

/* Parses one non-blank line s[n] into *r (zeroed first); s is overwritten (the prompt array is
 * blanked). want_prompt 0: the prompt (ids, text or messages), the stop strings and the replay
 * tokens are checked and counted but not kept (every pointer NULL, nothing to free; r->input and
 * r->n_stops still say what the line held). On failure nothing is left allocated. */
static ph_status parse_line(const at *a, char *s, size_t n, int want_prompt, request_spec *r,
                            diag *d) {
  memset(r, 0, sizeof *r);
  r->line = a->line;
  prompt_scan ps;
  int64_t *prompt = NULL;
  FORWARD_IF_ERROR(scan_prompt(a, s, n, want_prompt, &ps, &prompt, d));
  size_t other = 0; /* what jansson will see, but whitespace (which costs it no memory) */
  for (size_t i = 0; i < n; i++) other += !is_ws(s[i]);
  if (other > REQUEST_LINE_MAX_OTHER) {
    free(prompt);
    return diag_set(d, PH_ERR_LIMIT,
                    "%s:%d: %zu bytes of the line are neither whitespace nor a prompt_tokens "
                    "array of integer ids; at most %u (a text prompt or messages included)",
                    a->label, a->line, other, REQUEST_LINE_MAX_OTHER);
  }
  json_error_t err;
  json_t *root = json_loadb(s, n, JSON_REJECT_DUPLICATES, &err);
  if (!root) {
    free(prompt);
    return diag_set(d, PH_ERR_JSON, "%s:%d: malformed JSON at column %d: %s", a->label, a->line,
                    err.column, err.text);
  }
  ph_status st = PH_OK;
  if (!json_is_object(root))
    st = diag_set(d, PH_ERR_CONFIG_INVALID, "%s:%d: the line is %s, expected a JSON object",
                  a->label, a->line, json_kind(root));
  if (st == PH_OK) st = read_fields(a, root, r, d);
  int tokens_given = 0;
  if (st == PH_OK) st = read_input(a, root, &tokens_given, r, d);
  if (st == PH_OK && !tokens_given) {
    /* a text prompt or messages: read above */
  } else if (st == PH_OK && ps.found) {
    if (ps.n == 0)
      st = diag_set(d, PH_ERR_CONFIG_INVALID,
                    "%s:%d: prompt_tokens is empty, a request needs at least one token", a->label,
                    a->line);
    else if (ps.first_negative >= 0)
      st = diag_set(d, PH_ERR_CONFIG_INVALID, "%s:%d: prompt_tokens[%lld] = %lld is negative",
                    a->label, a->line, (long long)ps.first_negative, (long long)ps.negative_value);
    r->prompt = prompt;
    r->n_prompt = ps.n;
    prompt = NULL;
  } else if (st == PH_OK) {
    st = read_prompt(a, root, r, d);
    if (st == PH_OK && !want_prompt) {
      free(r->prompt);
      r->prompt = NULL;
    }
  }
  json_decref(root);
  free(prompt);
  if (st != PH_OK) {
    request_spec_free(r);
  } else if (!want_prompt) { /* checked, not kept: the index keeps 32 bytes a line */
    const request_input input = r->input;
    const int n_stops = r->n_stops;
    request_spec_free(r); /* the prompt (text, messages), stop strings, replay tokens */
    r->input = input;     /* what request_spec_needs_tokenizer reads */
    r->n_stops = n_stops;
  }
  return st;
}

int request_spec_needs_tokenizer(const request_spec *r) {
  return r && (r->input != REQUEST_INPUT_TOKENS || r->n_stops > 0);
}

void request_spec_free(request_spec *r) {
  if (!r) return;
  free(r->prompt);
  r->prompt = NULL;
  r->n_prompt = 0;
  free(r->prompt_text);
  r->prompt_text = NULL;
  r->prompt_text_len = 0;
  free(r->messages_json);
  r->messages_json = NULL;
  free(r->chat_extra_json);
  r->chat_extra_json = NULL;
  for (int i = 0; i < r->n_stops; i++) {
    free(r->stops[i]);
    r->stops[i] = NULL;
  }
  r->n_stops = 0;
  free(r->draft_tokens);
  r->draft_tokens = NULL;
  r->sampling.speculative.replay_tokens = NULL;
  r->sampling.speculative.n_replay_tokens = 0;
}

/* ---- the indexed file --------------------------------------------------------------------------
 */

struct request_file {
  char *label;      /* the path, or the caller's label */
  int fd;           /* -1 over text */
  const char *text; /* borrowed, over text */
  size_t size;      /* bytes of the input */
  int64_t mtime_s, mtime_ns;
  request_entry *entries; /* [n] */
  int64_t n, cap;
  char *buf; /* [buf_cap] one line for request_file_get */
  size_t buf_cap;
};

#define READ_BLOCK   ((size_t)1 << 20) /* bytes read at a time while indexing */
#define BUF_KEEP_MAX ((size_t)1 << 20) /* a longer line's buffer is freed after use */

/* The one place the requests file is opened: through file_open_read (base/fmap.h: regular files
 * only, refused at once otherwise, never blocking on a FIFO), and bounded in size. */
static ph_status open_input(const char *path, int *fd_out, struct stat *st, diag *d) {
  *fd_out = -1;
  int fd = -1;
  FORWARD_IF_ERROR(file_open_read(path, &fd, NULL, d)); /* regular files only, never blocks */
  if (fstat(fd, st) != 0) {
    const int e = errno;
    close(fd);
    return diag_set(d, PH_ERR_IO, "%s: %s", path, strerror(e));
  }
  if ((uint64_t)st->st_size > REQUEST_FILE_MAX_BYTES) {
    close(fd);
    return diag_set(d, PH_ERR_LIMIT, "%s: %lld bytes, more than the %llu allowed", path,
                    (long long)st->st_size, (unsigned long long)REQUEST_FILE_MAX_BYTES);
  }
  *fd_out = fd;
  return PH_OK;
}

static int buf_reserve(request_file *f, size_t n) {
  if (n <= f->buf_cap && f->buf) return 1;
  char *b = malloc(n ? n : 1);
  if (!b) return 0;
  free(f->buf);
  f->buf = b;
  f->buf_cap = n ? n : 1;
  return 1;
}

/* Copies the bytes of entry e into f->buf (not NUL-terminated). */
static ph_status load_line(request_file *f, const request_entry *e, diag *d) {
  RETURN_ERROR_IF(!buf_reserve(f, e->length), d, PH_ERR_NO_MEMORY, "%s:%d: a line of %u bytes",
                  f->label, e->line, e->length);
  if (f->fd < 0) {
    memcpy(f->buf, f->text + e->offset, e->length);
    return PH_OK;
  }
  struct stat st;
  RETURN_ERROR_IF(
      fstat(f->fd, &st) != 0 || (size_t)st.st_size != f->size ||
          (int64_t)st.st_mtim.tv_sec != f->mtime_s || (int64_t)st.st_mtim.tv_nsec != f->mtime_ns,
      d, PH_ERR_IO, "%s: the file changed since it was read (line %d)", f->label, e->line);
  for (size_t got = 0; got < e->length;) {
    const ssize_t r = pread(f->fd, f->buf + got, e->length - got, (off_t)(e->offset + got));
    if (r < 0 && errno == EINTR) continue;
    RETURN_ERROR_IF(r <= 0, d, PH_ERR_IO, "%s:%d: read failed: %s", f->label, e->line,
                    r < 0 ? strerror(errno) : "end of file");
    got += (size_t)r;
  }
  return PH_OK;
}

static void shrink_buf(request_file *f) {
  if (f->buf_cap <= BUF_KEEP_MAX) return;
  free(f->buf);
  f->buf = NULL;
  f->buf_cap = 0;
}

static ph_status parse_entry(request_file *f, int64_t i, int want_prompt, request_spec *out,
                             diag *d) {
  const request_entry *e = &f->entries[i];
  FORWARD_IF_ERROR(load_line(f, e, d));
  const at a = {f->label, e->line};
  const ph_status st = parse_line(&a, f->buf, e->length, want_prompt, out, d);
  shrink_buf(f);
  return st;
}

/* ---- unique ids: open addressing over (hash, index) ------------------------------------------ */

typedef struct id_slot {
  uint64_t hash;
  int64_t index; /* into the entries, -1 empty */
} id_slot;

typedef struct id_set {
  id_slot *slot; /* [cap], cap a power of two >= 2 * count */
  size_t cap, count;
} id_set;

static void id_set_place(id_set *set, id_slot x) {
  size_t mask = set->cap - 1, i = (size_t)x.hash & mask;
  while (set->slot[i].index >= 0) i = (i + 1) & mask;
  set->slot[i] = x;
  set->count++;
}

/* Adds (id of entry idx); *dup: the entry with the same id, or -1. An equal hash is confirmed
 * by parsing that entry's line again (ids are not kept: 16 bytes a line while indexing). */
static ph_status id_set_add(request_file *f, id_set *set, const char *id, int64_t idx, int64_t *dup,
                            diag *d) {
  *dup = -1;
  if ((set->count + 1) * 2 > set->cap) {
    id_set grown = {NULL, set->cap ? set->cap * 2 : 64, 0};
    grown.slot = malloc(grown.cap * sizeof *grown.slot);
    RETURN_ERROR_IF(!grown.slot, d, PH_ERR_NO_MEMORY, "request id table of %zu entries", grown.cap);
    for (size_t i = 0; i < grown.cap; i++) grown.slot[i].index = -1;
    for (size_t i = 0; i < set->cap; i++)
      if (set->slot[i].index >= 0) id_set_place(&grown, set->slot[i]);
    free(set->slot);
    *set = grown;
  }
  const uint64_t h = hash_str(id);
  size_t mask = set->cap - 1, i = (size_t)h & mask;
  for (; set->slot[i].index >= 0; i = (i + 1) & mask) {
    if (set->slot[i].hash != h) continue;
    request_spec other;
    FORWARD_IF_ERROR(parse_entry(f, set->slot[i].index, 0, &other, d));
    if (strcmp(other.id, id) == 0) {
      *dup = set->slot[i].index;
      return PH_OK;
    }
  }
  id_set_place(set, (id_slot){h, idx});
  return PH_OK;
}

/* ---- indexing ----------------------------------------------------------------------------------
 */

static int is_blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
  return 1;
}

/* One line s[n] at offset off (s is scratch: the parse blanks it). */
static ph_status index_line(request_file *f, id_set *ids, int *line, char *s, size_t n, size_t off,
                            diag *d) {
  RETURN_ERROR_IF(*line == INT32_MAX, d, PH_ERR_LIMIT, "%s: more than %d lines", f->label,
                  INT32_MAX);
  ++*line;
  if (is_blank(s, n)) return PH_OK;
  if (f->n == f->cap) {
    const int64_t cap = f->cap ? f->cap * 2 : 64;
    request_entry *e = realloc(f->entries, (size_t)cap * sizeof *e);
    RETURN_ERROR_IF(!e, d, PH_ERR_NO_MEMORY, "%s:%d: index of %lld requests", f->label, *line,
                    (long long)cap);
    f->entries = e;
    f->cap = cap;
  }
  const at a = {f->label, *line};
  request_spec r;
  FORWARD_IF_ERROR(parse_line(&a, s, n, 0, &r, d));
  f->entries[f->n] =
      (request_entry){r.arrive_step, r.remove_step, (uint32_t)off,
                      (uint32_t)n,   *line,         request_spec_needs_tokenizer(&r)};
  int64_t dup;
  FORWARD_IF_ERROR(id_set_add(f, ids, r.id, f->n, &dup, d));
  if (dup >= 0) {
    char buf[KEY_SHOWN + 4];
    return diag_set(d, PH_ERR_CONFIG_INVALID, "%s:%d: id \"%s\" repeats the id of line %d",
                    f->label, *line, shown(r.id, buf), f->entries[dup].line);
  }
  f->n++;
  return PH_OK;
}

static ph_status index_text(request_file *f, id_set *ids, diag *d) {
  int line = 0;
  for (size_t pos = 0; pos < f->size;) {
    const char *s = f->text + pos;
    const char *nl = memchr(s, '\n', f->size - pos);
    const size_t n = nl ? (size_t)(nl - s) : f->size - pos;
    RETURN_ERROR_IF(!buf_reserve(f, n), d, PH_ERR_NO_MEMORY, "%s:%d: a line of %zu bytes", f->label,
                    line + 1, n);
    memcpy(f->buf, s, n);
    FORWARD_IF_ERROR(index_line(f, ids, &line, f->buf, n, pos, d));
    shrink_buf(f);
    pos += n + (nl ? 1 : 0);
  }
  return PH_OK;
}

/* Reads the file once in blocks; a line longer than the buffer grows it (to the line). */
static ph_status index_fd(request_file *f, id_set *ids, diag *d) {
  size_t cap = READ_BLOCK, len = 0, start = 0, scan = 0, base = 0; /* base: offset of blk[0] */
  char *blk = malloc(cap);
  RETURN_ERROR_IF(!blk, d, PH_ERR_NO_MEMORY, "%s: read buffer", f->label);
  ph_status st = PH_OK;
  int line = 0, eof = 0;
  while (st == PH_OK) {
    char *nl = memchr(blk + scan, '\n', len - scan);
    if (nl) {
      const size_t end = (size_t)(nl - blk);
      st = index_line(f, ids, &line, blk + start, end - start, base + start, d);
      start = scan = end + 1;
      continue;
    }
    if (eof) {
      if (start < len) st = index_line(f, ids, &line, blk + start, len - start, base + start, d);
      break;
    }
    if (start > 0) { /* keep the partial line, drop what was indexed */
      memmove(blk, blk + start, len - start);
      base += start;
      len -= start;
      start = 0;
    }
    if (len == cap) {
      char *grown = cap < REQUEST_FILE_MAX_BYTES + 1 ? realloc(blk, cap * 2) : NULL;
      if (!grown) {
        st = diag_set(d, PH_ERR_NO_MEMORY, "%s: a line of more than %zu bytes", f->label, cap);
        break;
      }
      blk = grown;
      cap *= 2;
    }
    scan = len;
    const ssize_t r = read(f->fd, blk + len, cap - len);
    if (r < 0 && errno == EINTR) continue;
    if (r < 0) {
      st = diag_set(d, PH_ERR_IO, "%s: read failed: %s", f->label, strerror(errno));
    } else if (r == 0) {
      eof = 1;
    } else {
      len += (size_t)r;
      if (base + len > REQUEST_FILE_MAX_BYTES || base + len > f->size)
        st = diag_set(d, PH_ERR_IO, "%s: the file grew while it was read", f->label);
    }
  }
  if (st == PH_OK && base + len != f->size)
    st = diag_set(d, PH_ERR_IO, "%s: read %zu of %zu bytes (the file changed)", f->label,
                  base + len, f->size);
  free(blk);
  return st;
}

static ph_status finish_open(request_file *f, request_file **out, diag *d) {
  id_set ids = {NULL, 0, 0};
  ph_status st = f->fd >= 0 ? index_fd(f, &ids, d) : index_text(f, &ids, d);
  free(ids.slot);
  if (st == PH_OK && f->n == 0)
    st = diag_set(d, PH_ERR_CONFIG_INVALID, "%s: no requests (every line is blank)", f->label);
  if (st != PH_OK) {
    request_file_close(f);
    return st;
  }
  shrink_buf(f);
  *out = f;
  return PH_OK;
}

static request_file *file_alloc(const char *label) {
  request_file *f = calloc(1, sizeof *f);
  if (!f) return NULL;
  f->fd = -1;
  f->label = malloc(strlen(label) + 1);
  if (!f->label) {
    free(f);
    return NULL;
  }
  memcpy(f->label, label, strlen(label) + 1);
  return f;
}

ph_status request_file_open(const char *path, request_file **out, diag *d) {
  RETURN_ERROR_IF(!out || !path, d, PH_ERR_INVALID_ARGUMENT, "request_file_open: NULL argument");
  *out = NULL;
  int fd;
  struct stat st;
  FORWARD_IF_ERROR(open_input(path, &fd, &st, d));
  request_file *f = file_alloc(path);
  if (!f) {
    close(fd);
    return diag_set(d, PH_ERR_NO_MEMORY, "%s: out of memory", path);
  }
  f->fd = fd;
  f->size = (size_t)st.st_size;
  f->mtime_s = (int64_t)st.st_mtim.tv_sec;
  f->mtime_ns = (int64_t)st.st_mtim.tv_nsec;
  return finish_open(f, out, d);
}

ph_status request_file_open_text(const char *text, size_t len, const char *label,
                                 request_file **out, diag *d) {
  RETURN_ERROR_IF(!out, d, PH_ERR_INVALID_ARGUMENT, "request_file_open_text: out is NULL");
  *out = NULL;
  if (!label) label = DEFAULT_LABEL;
  RETURN_ERROR_IF(!text && len, d, PH_ERR_INVALID_ARGUMENT, "%s: text is NULL", label);
  RETURN_ERROR_IF(len > REQUEST_FILE_MAX_BYTES, d, PH_ERR_LIMIT,
                  "%s: %zu bytes, more than the %llu allowed", label, len,
                  (unsigned long long)REQUEST_FILE_MAX_BYTES);
  request_file *f = file_alloc(label);
  RETURN_ERROR_IF(!f, d, PH_ERR_NO_MEMORY, "%s: out of memory", label);
  f->text = text;
  f->size = len;
  return finish_open(f, out, d);
}

int64_t request_file_count(const request_file *f) { return f ? f->n : 0; }

const request_entry *request_file_entry(const request_file *f, int64_t i) {
  return f && i >= 0 && i < f->n ? &f->entries[i] : NULL;
}

ph_status request_file_get(request_file *f, int64_t i, request_spec *out, diag *d) {
  RETURN_ERROR_IF(!f || !out || i < 0 || i >= f->n, d, PH_ERR_INVALID_ARGUMENT,
                  "request_file_get: NULL argument or index %lld outside [0, %lld)", (long long)i,
                  (long long)(f ? f->n : 0));
  return parse_entry(f, i, 1, out, d);
}

void request_file_close(request_file *f) {
  if (!f) return;
  if (f->fd >= 0) close(f->fd);
  free(f->entries);
  free(f->buf);
  free(f->label);
  free(f);
}

/* ---- the whole list ----------------------------------------------------------------------------
 */

void request_list_free(request_list *l) {
  if (!l) return;
  for (int64_t i = 0; i < l->n; i++) request_spec_free(&l->items[i]);
  free(l->items);
  l->items = NULL;
  l->n = 0;
}

ph_status request_list_parse(const char *text, size_t len, const char *label, request_list *out,
                             diag *d) {
  RETURN_ERROR_IF(!out, d, PH_ERR_INVALID_ARGUMENT, "request_list_parse: out is NULL");
  out->items = NULL;
  out->n = 0;
  request_file *f = NULL;
  FORWARD_IF_ERROR(request_file_open_text(text, len, label, &f, d));
  request_list l = {calloc((size_t)f->n, sizeof *l.items), 0};
  ph_status st = l.items ? PH_OK
                         : diag_set(d, PH_ERR_NO_MEMORY, "%s: list of %lld requests", f->label,
                                    (long long)f->n);
  for (; st == PH_OK && l.n < f->n; l.n++) {
    st = request_file_get(f, l.n, &l.items[l.n], d);
    if (st != PH_OK) break;
  }
  request_file_close(f);
  if (st != PH_OK) {
    request_list_free(&l);
    return st;
  }
  *out = l;
  return PH_OK;
}

/* ---- the result line ------------------------------------------------------------------------- */

static const char *const finish_reasons[] = {"length", "stop", "aborted", "error"};

/* A time in ms rounded to the microsecond: null when negative ("never reached"); NaN and inf
 * are refused by the caller. Printed with 15 significant digits, which show every value of at
 * most 15 digits exactly (3 decimals up to ~30 years), and no binary noise. */
static json_t *time_value(double ms) {
  return ms < 0.0 ? json_null() : json_real(round(ms * 1e3) / 1e3);
}

static ph_status check_result_args(const char *id, const int64_t *tokens, int64_t n_tokens,
                                   const char *finish_reason, const request_timing *t,
                                   const char *error_message, diag *d) {
  RETURN_ERROR_IF(!id, d, PH_ERR_INVALID_ARGUMENT, "request result: id is NULL");
  RETURN_ERROR_IF(n_tokens < 0, d, PH_ERR_INVALID_ARGUMENT,
                  "request result %s: n_tokens = %lld is negative", id, (long long)n_tokens);
  RETURN_ERROR_IF(n_tokens > 0 && !tokens, d, PH_ERR_INVALID_ARGUMENT,
                  "request result %s: tokens is NULL with n_tokens = %lld", id,
                  (long long)n_tokens);
  int known = 0;
  for (size_t i = 0; finish_reason && i < sizeof finish_reasons / sizeof finish_reasons[0]; i++)
    known |= strcmp(finish_reason, finish_reasons[i]) == 0;
  RETURN_ERROR_IF(!known, d, PH_ERR_INVALID_ARGUMENT,
                  "request result %s: finish_reason \"%s\" is not one of length, stop, aborted, "
                  "error",
                  id, finish_reason ? finish_reason : "(null)");
  RETURN_ERROR_IF(error_message && strcmp(finish_reason, "error") != 0, d, PH_ERR_INVALID_ARGUMENT,
                  "request result %s: an error message needs finish_reason \"error\", not \"%s\"",
                  id, finish_reason);
  RETURN_ERROR_IF(!t, d, PH_ERR_INVALID_ARGUMENT, "request result %s: timing is NULL", id);
  RETURN_ERROR_IF(!isfinite(t->queue_ms) || !isfinite(t->ttft_ms) || !isfinite(t->total_ms), d,
                  PH_ERR_INVALID_ARGUMENT,
                  "request result %s: times must be finite (queue %g, ttft %g, total %g ms)", id,
                  t->queue_ms, t->ttft_ms, t->total_ms);
  RETURN_ERROR_IF(t->n_prompt < 0 || t->n_generated < 0 || t->n_preempted < 0, d,
                  PH_ERR_INVALID_ARGUMENT,
                  "request result %s: negative count (prompt %lld, generated %lld, preempted "
                  "%lld)",
                  id, (long long)t->n_prompt, (long long)t->n_generated, (long long)t->n_preempted);
  RETURN_ERROR_IF(t->n_drafted < 0 || t->n_accepted < 0 || t->n_accepted > t->n_drafted, d,
                  PH_ERR_INVALID_ARGUMENT,
                  "request result %s: %lld accepted of %lld drafted, expected 0 <= accepted <= "
                  "drafted",
                  id, (long long)t->n_accepted, (long long)t->n_drafted);
  RETURN_ERROR_IF(t->n_cached < 0 || t->n_cached > t->n_prompt, d, PH_ERR_INVALID_ARGUMENT,
                  "request result %s: %lld cached prompt tokens of %lld, expected 0 <= cached "
                  "<= prompt",
                  id, (long long)t->n_cached, (long long)t->n_prompt);
  RETURN_ERROR_IF(t->n_generated != n_tokens, d, PH_ERR_INVALID_ARGUMENT,
                  "request result %s: timing counts %lld generated tokens, tokens has %lld", id,
                  (long long)t->n_generated, (long long)n_tokens);
  for (int64_t i = 0; i < n_tokens; i++)
    RETURN_ERROR_IF(tokens[i] < 0, d, PH_ERR_INVALID_ARGUMENT,
                    "request result %s: tokens[%lld] = %lld is negative", id, (long long)i,
                    (long long)tokens[i]);
  return PH_OK;
}

/* Sets key to v (stolen); 0 when v is NULL or the set failed. */
static int put(json_t *o, const char *key, json_t *v) {
  return v && json_object_set_new(o, key, v) == 0;
}

ph_status request_result_to_json(const char *id, const int64_t *tokens, int64_t n_tokens,
                                 const char *finish_reason, const request_timing *t,
                                 const char *error_message, char **out_line, diag *d) {
  return request_result_to_json_text(id, NULL, 0, tokens, n_tokens, finish_reason, t, error_message,
                                     out_line, d);
}

ph_status request_result_to_json_text(const char *id, const char *text, size_t text_len,
                                      const int64_t *tokens, int64_t n_tokens,
                                      const char *finish_reason, const request_timing *t,
                                      const char *error_message, char **out_line, diag *d) {
  RETURN_ERROR_IF(!out_line, d, PH_ERR_INVALID_ARGUMENT, "request result: out_line is NULL");
  *out_line = NULL;
  FORWARD_IF_ERROR(check_result_args(id, tokens, n_tokens, finish_reason, t, error_message, d));
  json_t *o = json_object(), *arr = json_array();
  ph_status st = PH_OK;
  if (!o || !arr) {
    json_decref(arr);
    st = diag_set(d, PH_ERR_NO_MEMORY, "request result %s", id);
    goto done;
  }
  for (int64_t i = 0; i < n_tokens; i++) {
    if (json_array_append_new(arr, json_integer((json_int_t)tokens[i])) != 0) {
      json_decref(arr);
      st = diag_set(d, PH_ERR_NO_MEMORY, "request result %s: %lld tokens", id, (long long)n_tokens);
      goto done;
    }
  }
  /* jansson refuses invalid UTF-8 in strings: the only caller-caused failure left */
  json_t *jid = json_string(id);
  if (!jid) {
    json_decref(arr);
    st = diag_set(d, PH_ERR_INVALID_ARGUMENT, "request result: id is not valid UTF-8");
    goto done;
  }
  if (!put(o, "id", jid)) {
    json_decref(arr);
    st = diag_set(d, PH_ERR_NO_MEMORY, "request result %s", id);
    goto done;
  }
  if (text) {
    json_t *jt = json_stringn(text, text_len); /* NUL bytes allowed: written as \u0000 */
    if (!jt) {
      json_decref(arr);
      st = diag_set(d, PH_ERR_INVALID_ARGUMENT, "request result %s: text is not valid UTF-8", id);
      goto done;
    }
    if (!put(o, "text", jt)) {
      json_decref(arr);
      st = diag_set(d, PH_ERR_NO_MEMORY, "request result %s", id);
      goto done;
    }
  }
  int ok = put(o, "tokens", arr) && put(o, "finish_reason", json_string(finish_reason)) &&
           put(o, "n_prompt_tokens", json_integer((json_int_t)t->n_prompt)) &&
           put(o, "n_generated_tokens", json_integer((json_int_t)t->n_generated)) &&
           put(o, "n_preemptions", json_integer((json_int_t)t->n_preempted)) &&
           (t->n_drafted <= 0 ||
            (put(o, "n_drafted_tokens", json_integer((json_int_t)t->n_drafted)) &&
             put(o, "n_accepted_tokens", json_integer((json_int_t)t->n_accepted)))) &&
           put(o, "time_in_queue_ms", time_value(t->queue_ms)) &&
           put(o, "time_to_first_token_ms", time_value(t->ttft_ms)) &&
           put(o, "total_ms", time_value(t->total_ms)) &&
           (t->n_cached <= 0 || put(o, "n_cached_tokens", json_integer((json_int_t)t->n_cached)));
  if (!ok) {
    st = diag_set(d, PH_ERR_NO_MEMORY, "request result %s", id);
    goto done;
  }
  if (error_message) {
    json_t *msg = json_string(error_message);
    if (!msg) {
      st = diag_set(d, PH_ERR_INVALID_ARGUMENT,
                    "request result %s: error_message is not valid UTF-8", id);
      goto done;
    }
    if (!put(o, "error", msg)) {
      st = diag_set(d, PH_ERR_NO_MEMORY, "request result %s", id);
      goto done;
    }
  }
  *out_line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(15));
  if (!*out_line) st = diag_set(d, PH_ERR_NO_MEMORY, "request result %s", id);
done:
  json_decref(o);
  return st;
}
