/* request_file — see request_file.h and docs/requests-jsonl.md.
 *
 * The input is untrusted: each non-blank line goes through jansson (duplicate keys rejected),
 * then every key is looked up in one table (unknown keys are errors, so a typo such as
 * "temprature" cannot silently fall back to a default) and read by a typed getter whose message
 * names "<label>:<line>: <key>" and what was found instead. Ids are kept unique with a small
 * open-addressing hash set over the list built so far, so errors come in file order.
 */
#include "engine/request_file.h"

#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "io/json_util.h"

#define DEFAULT_LABEL "requests"
#define KEY_SHOWN     40 /* bytes of an unknown key or an id quoted in a message */
#define INT_FIELD_MAX ((json_int_t)INT64_MAX)

/* The keys a request line may hold; anything else is an error. */
static const char *const known_keys[] = {
    "id",    "prompt_tokens", "max_new_tokens", "arrive_step",    "temperature", "top_k",
    "top_p", "min_p",         "seed",           "stop_token_ids", "ignore_eos",  "remove_step",
};

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

/* An integer in [lo, hi]; *out untouched when absent. */
static ph_status get_int(const at *a, const json_t *obj, const char *key, json_int_t lo,
                         json_int_t hi, int64_t *out, diag *d) {
  const json_t *v = get(obj, key);
  if (!v) return PH_OK;
  RETURN_ERROR_IF(!json_is_integer(v), d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: %s is %s, expected an integer", a->label, a->line, key, json_kind(v));
  json_int_t x = json_integer_value(v);
  RETURN_ERROR_IF(x < lo || x > hi, d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: %s = %" JSON_INTEGER_FORMAT " is outside [%" JSON_INTEGER_FORMAT
                  ", %" JSON_INTEGER_FORMAT "]",
                  a->label, a->line, key, x, lo, hi);
  *out = (int64_t)x;
  return PH_OK;
}

/* A number (integer or real) as float; the range is sampling_params_validate's to check. */
static ph_status get_float(const at *a, const json_t *obj, const char *key, float *out, diag *d) {
  const json_t *v = get(obj, key);
  if (!v) return PH_OK;
  RETURN_ERROR_IF(!json_is_number(v), d, PH_ERR_CONFIG_INVALID,
                  "%s:%d: %s is %s, expected a number", a->label, a->line, key, json_kind(v));
  double x = json_number_value(v);
  /* beyond the float range reads as +-inf (explicitly: the conversion would be undefined), which
   * validation then names */
  *out = x > FLT_MAX ? INFINITY : x < -FLT_MAX ? -INFINITY : (float)x;
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

static ph_status check_keys(const at *a, const json_t *obj, diag *d) {
  const char *key;
  const json_t *v;
  json_object_foreach((json_t *)obj, key, v) {
    int known = 0;
    for (size_t i = 0; i < sizeof known_keys / sizeof known_keys[0]; i++)
      known |= strcmp(key, known_keys[i]) == 0;
    char buf[KEY_SHOWN + 4];
    RETURN_ERROR_IF(!known, d, PH_ERR_CONFIG_INVALID,
                    "%s:%d: unknown key \"%s\" (known: id, prompt_tokens, max_new_tokens, "
                    "arrive_step, remove_step, temperature, top_k, top_p, min_p, seed, "
                    "stop_token_ids, ignore_eos)",
                    a->label, a->line, shown(key, buf));
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

/* Everything but the prompt; nothing is allocated. */
static ph_status read_fields(const at *a, const json_t *obj, request_spec *r, diag *d) {
  FORWARD_IF_ERROR(check_keys(a, obj, d));
  FORWARD_IF_ERROR(read_id(a, obj, r->id, d));
  sampling_params *sp = &r->sampling;
  *sp = sampling_params_default();
  int64_t top_k = sp->top_k, seed = 0;
  FORWARD_IF_ERROR(get_int(a, obj, "max_new_tokens", 1, INT_FIELD_MAX, &sp->max_new_tokens, d));
  FORWARD_IF_ERROR(get_float(a, obj, "temperature", &sp->temperature, d));
  FORWARD_IF_ERROR(get_int(a, obj, "top_k", 0, INT32_MAX, &top_k, d));
  FORWARD_IF_ERROR(get_float(a, obj, "top_p", &sp->top_p, d));
  FORWARD_IF_ERROR(get_float(a, obj, "min_p", &sp->min_p, d));
  FORWARD_IF_ERROR(get_int(a, obj, "seed", 0, INT_FIELD_MAX, &seed, d));
  FORWARD_IF_ERROR(read_stop_ids(a, obj, sp, d));
  FORWARD_IF_ERROR(get_bool(a, obj, "ignore_eos", &sp->ignore_eos, d));
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

/* Parses one non-blank line into *r (zeroed first). On failure nothing is left allocated. */
static ph_status parse_line(const at *a, const char *s, size_t n, request_spec *r, diag *d) {
  memset(r, 0, sizeof *r);
  r->line = a->line;
  json_error_t err;
  json_t *root = json_loadb(s, n, JSON_REJECT_DUPLICATES, &err);
  RETURN_ERROR_IF(!root, d, PH_ERR_JSON, "%s:%d: malformed JSON at column %d: %s", a->label,
                  a->line, err.column, err.text);
  ph_status st = PH_OK;
  if (!json_is_object(root))
    st = diag_set(d, PH_ERR_CONFIG_INVALID, "%s:%d: the line is %s, expected a JSON object",
                  a->label, a->line, json_kind(root));
  if (st == PH_OK) st = read_fields(a, root, r, d);
  if (st == PH_OK) st = read_prompt(a, root, r, d);
  json_decref(root);
  return st;
}

/* ---- unique ids: open addressing over indices into the list ---------------------------------- */

typedef struct id_set {
  int64_t *slot; /* [cap] index into the items, -1 empty; cap a power of two, >= 2 * count */
  size_t cap;
} id_set;

static uint64_t hash_id(const char *s) { /* FNV-1a */
  uint64_t h = 0xcbf29ce484222325ull;
  for (; *s; s++) h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
  return h;
}

static void id_set_place(id_set *set, const request_spec *items, int64_t idx) {
  size_t mask = set->cap - 1, i = (size_t)hash_id(items[idx].id) & mask;
  while (set->slot[i] >= 0) i = (i + 1) & mask;
  set->slot[i] = idx;
}

/* Adds items[idx] (items[0..idx) are in the set). *dup: the index with the same id, or -1. */
static ph_status id_set_add(id_set *set, const request_spec *items, int64_t idx, int64_t *dup,
                            diag *d) {
  *dup = -1;
  if ((size_t)(idx + 1) * 2 > set->cap) {
    size_t cap = set->cap ? set->cap * 2 : 64;
    int64_t *slot = malloc(cap * sizeof *slot);
    RETURN_ERROR_IF(!slot, d, PH_ERR_NO_MEMORY, "request id table of %zu entries", cap);
    for (size_t i = 0; i < cap; i++) slot[i] = -1;
    free(set->slot);
    set->slot = slot;
    set->cap = cap;
    for (int64_t j = 0; j < idx; j++) id_set_place(set, items, j);
  }
  size_t mask = set->cap - 1, i = (size_t)hash_id(items[idx].id) & mask;
  for (; set->slot[i] >= 0; i = (i + 1) & mask) {
    if (strcmp(items[set->slot[i]].id, items[idx].id) == 0) {
      *dup = set->slot[i];
      return PH_OK;
    }
  }
  set->slot[i] = idx;
  return PH_OK;
}

/* ---- the file -------------------------------------------------------------------------------- */

static int is_blank(const char *s, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r') return 0;
  return 1;
}

void request_list_free(request_list *l) {
  if (!l) return;
  for (int64_t i = 0; i < l->n; i++) free(l->items[i].prompt);
  free(l->items);
  l->items = NULL;
  l->n = 0;
}

ph_status request_list_parse(const char *text, size_t len, const char *label, request_list *out,
                             diag *d) {
  RETURN_ERROR_IF(!out, d, PH_ERR_INVALID_ARGUMENT, "request_list_parse: out is NULL");
  out->items = NULL;
  out->n = 0;
  if (!label) label = DEFAULT_LABEL;
  RETURN_ERROR_IF(!text && len, d, PH_ERR_INVALID_ARGUMENT, "%s: text is NULL", label);
  request_list l = {NULL, 0};
  size_t cap = 0;
  id_set ids = {NULL, 0};
  ph_status st = PH_OK;
  at a = {label, 0};
  for (size_t pos = 0; pos < len;) {
    const char *s = text + pos;
    const char *nl = memchr(s, '\n', len - pos);
    size_t n = nl ? (size_t)(nl - s) : len - pos;
    pos += n + (nl ? 1 : 0);
    if (a.line == INT_MAX) {
      st = diag_set(d, PH_ERR_LIMIT, "%s: more than %d lines", label, INT_MAX);
      goto fail;
    }
    a.line++;
    if (is_blank(s, n)) continue;
    if ((size_t)l.n == cap) {
      size_t new_cap = cap ? cap * 2 : 16;
      request_spec *items = realloc(l.items, new_cap * sizeof *items);
      if (!items) {
        st = diag_set(d, PH_ERR_NO_MEMORY, "%s:%d: list of %zu requests", label, a.line, new_cap);
        goto fail;
      }
      l.items = items;
      cap = new_cap;
    }
    st = parse_line(&a, s, n, &l.items[l.n], d);
    if (st != PH_OK) goto fail;
    l.n++;
    int64_t dup;
    st = id_set_add(&ids, l.items, l.n - 1, &dup, d);
    if (st != PH_OK) goto fail;
    if (dup >= 0) {
      char buf[KEY_SHOWN + 4];
      st = diag_set(d, PH_ERR_CONFIG_INVALID, "%s:%d: id \"%s\" repeats the id of line %d", label,
                    a.line, shown(l.items[l.n - 1].id, buf), l.items[dup].line);
      goto fail;
    }
  }
  if (l.n == 0) {
    st = diag_set(d, PH_ERR_CONFIG_INVALID, "%s: no requests (every line is blank)", label);
    goto fail;
  }
  free(ids.slot);
  *out = l;
  return PH_OK;
fail:
  free(ids.slot);
  request_list_free(&l);
  return st;
}

ph_status request_list_read(const char *path, request_list *out, diag *d) {
  RETURN_ERROR_IF(!out || !path, d, PH_ERR_INVALID_ARGUMENT, "request_list_read: NULL argument");
  out->items = NULL;
  out->n = 0;
  char *text = NULL;
  size_t len = 0;
  FORWARD_IF_ERROR(file_read_all(path, (size_t)REQUEST_FILE_MAX_BYTES, &text, &len, d));
  ph_status s = request_list_parse(text, len, path, out, d);
  free(text);
  return s;
}

/* ---- the result line ------------------------------------------------------------------------- */

static const char *const finish_reasons[] = {"length", "stop", "aborted", "error"};

/* A time in ms: null when negative ("never reached"); NaN and inf are refused by the caller. */
static json_t *time_value(double ms) { return ms < 0.0 ? json_null() : json_real(ms); }

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
  int ok = put(o, "tokens", arr) && put(o, "finish_reason", json_string(finish_reason)) &&
           put(o, "n_prompt_tokens", json_integer((json_int_t)t->n_prompt)) &&
           put(o, "n_generated_tokens", json_integer((json_int_t)t->n_generated)) &&
           put(o, "n_preemptions", json_integer((json_int_t)t->n_preempted)) &&
           put(o, "time_in_queue_ms", time_value(t->queue_ms)) &&
           put(o, "time_to_first_token_ms", time_value(t->ttft_ms)) &&
           put(o, "total_ms", time_value(t->total_ms));
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
  /* 10 significant digits: microseconds for anything under ~3 hours */
  *out_line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(10));
  if (!*out_line) st = diag_set(d, PH_ERR_NO_MEMORY, "request result %s", id);
done:
  json_decref(o);
  return st;
}
