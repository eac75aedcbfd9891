/* chat — ph_chat_render: the tokenizer's chat template rendered with a conversation. See
 * chat.h for the context the template sees and docs/chat-template.md for the interpreter. */
#include "text/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "text/jinja.h"
#include "text/tokenizer.h"

static const char *const k_special_names[CHAT_N_SPECIAL] = {"bos_token", "eos_token", "unk_token",
                                                            "pad_token"};

static ph_status load_json(const char *what, const char *text, json_type want, json_t **out,
                           diag *d) {
  json_error_t err;
  json_t *j = json_loads(text, JSON_REJECT_DUPLICATES, &err);
  if (!j)
    return diag_set(d, PH_ERR_JSON, "%s: %s (line %d, column %d)", what, err.text, err.line,
                    err.column);
  if (json_typeof(j) != want) {
    json_decref(j);
    return diag_set(d, PH_ERR_JSON, "%s: expected a JSON %s", what,
                    want == JSON_ARRAY ? "array" : "object");
  }
  *out = j;
  return PH_OK;
}

ph_status chat_context(const json_t *config, const char *const special[CHAT_N_SPECIAL],
                       const char *messages_json, const char *extra_json, int add_generation_prompt,
                       json_t **ctx, diag *d) {
  *ctx = NULL;
  if (!messages_json) return diag_set(d, PH_ERR_JSON, "messages: missing (NULL)");
  json_t *messages = NULL, *extra = NULL;
  ph_status s = load_json("messages", messages_json, JSON_ARRAY, &messages, d);
  if (s != PH_OK) return s;
  if (extra_json) {
    s = load_json("extra", extra_json, JSON_OBJECT, &extra, d);
    if (s != PH_OK) {
      json_decref(messages);
      return s;
    }
  }
  json_t *c = json_object();
  if (!c || json_object_set_new(c, "messages", messages) ||
      json_object_set_new(c, "tools", json_null()) ||
      json_object_set_new(c, "documents", json_null()))
    goto oom;
  for (int i = 0; i < CHAT_N_SPECIAL; i++)
    if (special && special[i] &&
        json_object_set_new(c, k_special_names[i], json_string(special[i])))
      goto oom;
  const json_t *extra_tokens = config ? json_object_get(config, "additional_special_tokens") : NULL;
  if (json_is_array(extra_tokens)) {
    json_t *list = json_array();
    if (!list || json_object_set_new(c, "additional_special_tokens", list)) goto oom;
    size_t i;
    json_t *t;
    json_array_foreach(extra_tokens, i, t) {
      const json_t *content = json_is_object(t) ? json_object_get(t, "content") : t;
      if (json_is_string(content) &&
          json_array_append_new(list, json_string(json_string_value(content))))
        goto oom;
    }
  }
  if (json_object_set_new(c, "add_generation_prompt", json_boolean(add_generation_prompt)))
    goto oom;
  if (extra) {
    const char *key;
    json_t *val;
    json_object_foreach(extra, key, val) {
      if (strcmp(key, "messages") == 0 || strcmp(key, "add_generation_prompt") == 0) {
        /* the message first: key belongs to extra */
        diag_set(d, PH_ERR_JSON,
                 "extra: '%s' is set by its own argument and cannot be given in extra", key);
        json_decref(extra);
        json_decref(c);
        return PH_ERR_JSON;
      }
      if (json_object_set(c, key, val)) goto oom;
    }
    json_decref(extra);
  }
  *ctx = c;
  return PH_OK;
oom:
  json_decref(extra);
  json_decref(c);
  return diag_set(d, PH_ERR_NO_MEMORY, "out of memory building the chat context");
}

ph_status chat_render_source(const char *src, const char *origin, const json_t *ctx, char **text,
                             size_t *len, diag *d) {
  jinja_template *t = NULL;
  ph_status s = jinja_parse(src, strlen(src), origin, &t, d);
  if (s != PH_OK) return s;
  s = jinja_render(t, ctx, NULL, text, len, d);
  jinja_free(t);
  return s;
}

PH_API ph_status ph_chat_render(const ph_tokenizer *tok, const char *messages_json,
                                const char *extra_json, int add_generation_prompt, char **text,
                                size_t *len, char *err, size_t err_cap) {
  diag d;
  diag_clear(&d);
  ph_status s;
  json_t *ctx = NULL;
  if (text) *text = NULL;
  if (len) *len = 0;
  if (!tok || !text) {
    s = diag_set(&d, PH_ERR_INVALID_ARGUMENT, "ph_chat_render: tok and text must not be NULL");
    goto done;
  }
  const char *src = tokenizer_chat_template(tok);
  if (!src) {
    s = diag_set(&d, PH_ERR_NOT_FOUND,
                 "the tokenizer has no chat template (neither chat_template.jinja nor "
                 "tokenizer_config.json's chat_template)");
    goto done;
  }
  const char *special[CHAT_N_SPECIAL];
  for (int i = 0; i < CHAT_N_SPECIAL; i++)
    special[i] = tokenizer_special_token(tok, (tokenizer_special)i);
  s = chat_context(tokenizer_config(tok), special, messages_json, extra_json, add_generation_prompt,
                   &ctx, &d);
  if (s == PH_OK) {
    /* lines are the template's own: name the member, not the JSON file's lines */
    const char *origin = tokenizer_chat_template_origin(tok);
    char where[128];
    size_t on = origin ? strlen(origin) : 0;
    if (on > 5 && strcmp(origin + on - 5, ".json") == 0)
      snprintf(where, sizeof where, "%s chat_template", origin);
    else
      snprintf(where, sizeof where, "%s", origin ? origin : "chat template");
    s = chat_render_source(src, where, ctx, text, len, &d);
  }
done:
  json_decref(ctx);
  if (err && err_cap) snprintf(err, err_cap, "%s", s == PH_OK ? "" : d.msg);
  return s;
}
