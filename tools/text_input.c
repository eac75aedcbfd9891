/* text_input — see text_input.h. */
#include "text_input.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#define CHAT_FILE_MAX_BYTES ((size_t)64 << 20) /* a chat file larger than this is refused */

int text_has_tokenizer(const char *dir) {
  char path[4096];
  struct stat st;
  if (snprintf(path, sizeof path, "%s/tokenizer.json", dir) >= (int)sizeof path) return 0;
  return stat(path, &st) == 0 && S_ISREG(st.st_mode);
}

ph_status text_open_tokenizer(const char *dir, const char *what, const char *hint,
                              ph_tokenizer **out, diag *d) {
  *out = NULL;
  /* named here rather than by the library: the message says which option needs it */
  RETURN_ERROR_IF(!text_has_tokenizer(dir), d, PH_ERR_NOT_FOUND,
                  "%s/tokenizer.json not found: %s needs the model's tokenizer (a Hugging Face "
                  "tokenizer.json beside config.json)%s%s",
                  dir, what, hint ? "; " : "", hint ? hint : "");
  ph_tokenizer *tok = NULL;
  const ph_status s = ph_tokenizer_open(dir, &tok);
  if (s != PH_OK) {
    diag_set(d, s, "%s: %s", dir,
             tok && ph_tokenizer_error(tok)[0] ? ph_tokenizer_error(tok) : ph_status_message(s));
    ph_tokenizer_free(tok);
    return s;
  }
  *out = tok;
  return PH_OK;
}

static char *dump(const json_t *v) {
  return json_dumps(v, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_ENCODE_ANY);
}

static ph_status check_messages(const char *path, const json_t *m, diag *d) {
  RETURN_ERROR_IF(!json_is_array(m), d, PH_ERR_CONFIG_INVALID,
                  "%s: \"messages\" is not an array: expected [{\"role\": \"user\", \"content\": "
                  "\"...\"}, ...]",
                  path);
  RETURN_ERROR_IF(json_array_size(m) == 0, d, PH_ERR_CONFIG_INVALID,
                  "%s: the messages array is empty", path);
  for (size_t i = 0; i < json_array_size(m); i++)
    RETURN_ERROR_IF(!json_is_object(json_array_get(m, i)), d, PH_ERR_CONFIG_INVALID,
                    "%s: messages[%zu] is not an object like {\"role\": \"user\", \"content\": "
                    "\"...\"}",
                    path, i);
  return PH_OK;
}

ph_status text_read_chat_file(const char *path, char **messages_json, char **extra_json,
                              int *add_generation_prompt, diag *d) {
  *messages_json = *extra_json = NULL;
  *add_generation_prompt = 1;
  char *bytes = NULL;
  size_t n = 0;
  FORWARD_IF_ERROR(file_read_all(path, CHAT_FILE_MAX_BYTES, &bytes, &n, d));
  json_error_t err;
  json_t *root = json_loadb(bytes, n, JSON_REJECT_DUPLICATES, &err);
  free(bytes);
  RETURN_ERROR_IF(!root, d, PH_ERR_JSON, "%s:%d:%d: malformed JSON: %s", path, err.line, err.column,
                  err.text);
  ph_status s = PH_OK;
  json_t *messages = root, *extra = NULL;
  if (json_is_object(root)) {
    messages = json_object_get(root, "messages");
    if (!messages)
      s = diag_set(d, PH_ERR_CONFIG_INVALID,
                   "%s: an object without \"messages\": expected a messages array, or an object "
                   "with \"messages\" and template variables (\"tools\", ...)",
                   path);
    const json_t *agp = json_object_get(root, "add_generation_prompt");
    if (s == PH_OK && agp && !json_is_boolean(agp))
      s = diag_set(d, PH_ERR_CONFIG_INVALID,
                   "%s: \"add_generation_prompt\" is %s, expected true "
                   "or false",
                   path, json_kind(agp));
    if (s == PH_OK && agp) *add_generation_prompt = json_is_true(agp);
    if (s == PH_OK && json_object_size(root) > 1 + (agp != NULL)) {
      extra = json_copy(root);
      if (!extra || json_object_del(extra, "messages") != 0)
        s = diag_set(d, PH_ERR_NO_MEMORY, "%s: template variables", path);
      if (s == PH_OK && agp) json_object_del(extra, "add_generation_prompt");
    }
  } else if (!json_is_array(root)) {
    s = diag_set(d, PH_ERR_CONFIG_INVALID,
                 "%s: expected a JSON array of messages, or an object with \"messages\"", path);
  }
  if (s == PH_OK) s = check_messages(path, messages, d);
  if (s == PH_OK && !(*messages_json = dump(messages)))
    s = diag_set(d, PH_ERR_NO_MEMORY, "%s: messages", path);
  if (s == PH_OK && extra && !(*extra_json = dump(extra)))
    s = diag_set(d, PH_ERR_NO_MEMORY, "%s: template variables", path);
  json_decref(extra);
  json_decref(root);
  if (s != PH_OK) {
    free(*messages_json);
    free(*extra_json);
    *messages_json = *extra_json = NULL;
  }
  return s;
}

ph_status text_user_turn(const char *text, char **messages_json, diag *d) {
  *messages_json = NULL;
  json_t *content = json_string(text);
  RETURN_ERROR_IF(!content, d, PH_ERR_INVALID_ARGUMENT, "--prompt is not valid UTF-8");
  json_t *m = json_pack("[{s:s,s:o}]", "role", "user", "content", content);
  *messages_json = m ? dump(m) : NULL;
  json_decref(m);
  RETURN_ERROR_IF(!*messages_json, d, PH_ERR_NO_MEMORY, "out of memory");
  return PH_OK;
}

/* A malloc'ed copy of p[n] (ph_free'd memory moved to free()'d memory). */
static char *copy_out(const char *p, size_t n) {
  char *c = malloc(n + 1);
  if (!c) return NULL;
  memcpy(c, p, n);
  c[n] = '\0';
  return c;
}

ph_status text_render_chat(const ph_tokenizer *tok, const char *messages_json,
                           const char *extra_json, int add_generation_prompt, char **text,
                           size_t *len, diag *d) {
  *text = NULL;
  *len = 0;
  char *t = NULL, err[512] = "";
  size_t n = 0;
  const ph_status s = ph_chat_render(tok, messages_json, extra_json, add_generation_prompt, &t, &n,
                                     err, sizeof err);
  if (s != PH_OK) {
    ph_free(t);
    return diag_set(d, s, "chat template: %s", err[0] ? err : ph_status_message(s));
  }
  *text = copy_out(t, n);
  ph_free(t);
  RETURN_ERROR_IF(!*text, d, PH_ERR_NO_MEMORY, "out of memory for a %zu-byte prompt", n);
  *len = n;
  return PH_OK;
}

ph_status text_encode(const ph_tokenizer *tok, const char *text, size_t len, int add_special,
                      int64_t **ids, int64_t *n, diag *d) {
  *ids = NULL;
  *n = 0;
  int64_t *t = NULL, k = 0;
  const ph_status s = ph_tokenizer_encode(tok, text, len, add_special, &t, &k);
  if (s != PH_OK) {
    ph_free(t);
    return diag_set(d, s, "encoding %zu bytes of text: %s", len, ph_status_message(s));
  }
  *ids = malloc((size_t)(k > 0 ? k : 1) * sizeof **ids);
  if (*ids && k > 0) memcpy(*ids, t, (size_t)k * sizeof *t);
  ph_free(t);
  RETURN_ERROR_IF(!*ids, d, PH_ERR_NO_MEMORY, "out of memory for %lld token ids", (long long)k);
  *n = k;
  return PH_OK;
}

ph_status text_chat_ids(const ph_tokenizer *tok, const char *messages_json, const char *extra_json,
                        int add_generation_prompt, int64_t **ids, int64_t *n, diag *d) {
  char *text = NULL;
  size_t len = 0;
  FORWARD_IF_ERROR(
      text_render_chat(tok, messages_json, extra_json, add_generation_prompt, &text, &len, d));
  const ph_status s = text_encode(tok, text, len, 0, ids, n, d);
  free(text);
  return s;
}

ph_status text_join_eos(const ph_tokenizer *tok, ph_sampling_params *sp, diag *d) {
  if (sp->ignore_eos) return PH_OK;
  ph_tokenizer_info info;
  const ph_status s = ph_tokenizer_get_info(tok, &info);
  RETURN_ERROR_IF(s != PH_OK, d, s, "ph_tokenizer_get_info: %s", ph_status_message(s));
  for (int i = 0; i < info.n_eos_ids; i++) {
    int known = 0;
    for (int j = 0; j < sp->n_stop_token_ids; j++)
      known |= sp->stop_token_ids[j] == info.eos_ids[i];
    if (known) continue;
    RETURN_ERROR_IF(sp->n_stop_token_ids == PH_MAX_STOP_TOKENS, d, PH_ERR_LIMIT,
                    "the stop ids and the tokenizer's end-of-sequence ids are more than %d "
                    "together (ignore_eos leaves the latter out)",
                    PH_MAX_STOP_TOKENS);
    sp->stop_token_ids[sp->n_stop_token_ids++] = info.eos_ids[i];
  }
  return PH_OK;
}

/* ---- text_out ---- */

ph_status text_out_init(text_out *o, const ph_tokenizer *tok, const char *const *stops, int n_stops,
                        diag *d) {
  memset(o, 0, sizeof *o);
  for (int i = 0; i < n_stops; i++)
    RETURN_ERROR_IF(!stops[i] || !stops[i][0], d, PH_ERR_INVALID_ARGUMENT,
                    "stop string %d is empty", i + 1);
  const ph_status s = ph_text_stream_create(tok, stops, n_stops, 1, &o->stream);
  RETURN_ERROR_IF(s != PH_OK, d, s, "the stop strings (at most %d, each valid UTF-8): %s",
                  PH_MAX_STOP_STRINGS, ph_status_message(s));
  o->cap = 64;
  o->text = malloc(o->cap);
  RETURN_ERROR_IF(!o->text, d, PH_ERR_NO_MEMORY, "out of memory");
  o->text[0] = '\0';
  return PH_OK;
}

static ph_status append(text_out *o, const char *p, size_t n, const char **piece, size_t *piece_len,
                        diag *d) {
  if (o->len + n + 1 > o->cap) {
    size_t cap = o->cap;
    while (o->len + n + 1 > cap) cap *= 2;
    char *t = realloc(o->text, cap);
    RETURN_ERROR_IF(!t, d, PH_ERR_NO_MEMORY, "out of memory for %zu bytes of text", cap);
    o->text = t;
    o->cap = cap;
  }
  if (n) memcpy(o->text + o->len, p, n);
  *piece = o->text + o->len;
  *piece_len = n;
  o->len += n;
  o->text[o->len] = '\0';
  return PH_OK;
}

ph_status text_out_push(text_out *o, int64_t token, const char **piece, size_t *piece_len,
                        diag *d) {
  *piece = "";
  *piece_len = 0;
  if (o->stopped || o->finished) return PH_OK;
  const char *p = NULL;
  size_t n = 0;
  int stopped = 0;
  const ph_status s = ph_text_stream_push(o->stream, token, &p, &n, &stopped);
  RETURN_ERROR_IF(s != PH_OK, d, s, "token %lld (generated #%lld): %s", (long long)token,
                  (long long)o->n_tokens, ph_status_message(s));
  o->n_tokens++;
  o->stopped = stopped;
  return append(o, p, n, piece, piece_len, d);
}

ph_status text_out_finish(text_out *o, const char **piece, size_t *piece_len, diag *d) {
  *piece = "";
  *piece_len = 0;
  if (o->stopped || o->finished) return PH_OK;
  o->finished = 1;
  const char *p = NULL;
  size_t n = 0;
  const ph_status s = ph_text_stream_finish(o->stream, &p, &n);
  RETURN_ERROR_IF(s != PH_OK, d, s, "ph_text_stream_finish: %s", ph_status_message(s));
  return append(o, p, n, piece, piece_len, d);
}

void text_out_free(text_out *o) {
  if (!o) return;
  ph_text_stream_free(o->stream);
  free(o->text);
  memset(o, 0, sizeof *o);
}
