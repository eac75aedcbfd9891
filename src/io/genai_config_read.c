/* genai_config_read — a package's genai_config.json into a genai_config. See genai_config.h and
 * docs/import.md for every key, its default and its check.
 *
 * The file is untrusted: jansson parses it (duplicate keys rejected), then each key we keep goes
 * through one typed getter that names the full key path in its error ("model.decoder.inputs.
 * past_key_names is an integer, expected a string"). Absent keys and JSON null take ONNX Runtime
 * GenAI's runtime defaults; keys we do not keep (session_options, the other search options,
 * engine, state_groups) are ignored here. Only "model" and "model.type" are required: without
 * them the file describes no model, and GenAI refuses it as well.
 */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "io/genai_config.h"
#include "io/json_util.h"
#include "io/onnx.h"

#define GENAI_FILE    "genai_config.json"
/* GenAI stores sizes and token ids in C++ int. */
#define GENAI_INT_MAX 2147483647
#define PATH_BYTES    128

/* An object and the dotted path its keys are reported under. obj NULL: absent, every key reads
 * as absent. */
typedef struct scope {
  const json_t *obj;
  const char *path; /* "model.decoder." */
  const char *file; /* for messages */
} scope;

/* key's value, NULL when absent or null. */
static const json_t *get(const scope *s, const char *key) {
  const json_t *v = s->obj ? json_object_get(s->obj, key) : NULL;
  return v && !json_is_null(v) ? v : NULL;
}

static ph_status get_object(const scope *s, const char *key, const char *path, scope *out,
                            diag *d) {
  const json_t *v = get(s, key);
  RETURN_ERROR_IF(v && !json_is_object(v), d, PH_ERR_CONFIG_INVALID,
                  "%s: %s%s is %s, expected an object", s->file, s->path, key, json_kind(v));
  out->obj = v;
  out->path = path;
  out->file = s->file;
  return PH_OK;
}

static ph_status check_id(const scope *s, const char *key, const json_t *v, int64_t *out, diag *d) {
  RETURN_ERROR_IF(!json_is_integer(v), d, PH_ERR_CONFIG_INVALID,
                  "%s: %s%s is %s, expected an integer", s->file, s->path, key, json_kind(v));
  json_int_t x = json_integer_value(v);
  RETURN_ERROR_IF(x < 0 || x > GENAI_INT_MAX, d, PH_ERR_CONFIG_INVALID,
                  "%s: %s%s = %" JSON_INTEGER_FORMAT " is outside [0, 2^31)", s->file, s->path, key,
                  x);
  *out = (int64_t)x;
  return PH_OK;
}

/* A non-negative int (GenAI's int range); def when absent. */
static ph_status get_int(const scope *s, const char *key, int64_t def, int64_t *out, diag *d) {
  const json_t *v = get(s, key);
  *out = def;
  return v ? check_id(s, key, v, out, d) : PH_OK;
}

/* A string into buf[GENAI_MAX_NAME] (or a smaller cap); def when absent. */
static ph_status get_string(const scope *s, const char *key, const char *def, char *buf, size_t cap,
                            diag *d) {
  const json_t *v = get(s, key);
  if (!v) {
    snprintf(buf, cap, "%s", def);
    return PH_OK;
  }
  RETURN_ERROR_IF(!json_is_string(v), d, PH_ERR_CONFIG_INVALID, "%s: %s%s is %s, expected a string",
                  s->file, s->path, key, json_kind(v));
  size_t n = json_string_length(v);
  const char *str = json_string_value(v);
  RETURN_ERROR_IF(n >= cap, d, PH_ERR_CONFIG_INVALID, "%s: %s%s is %zu bytes, at most %zu", s->file,
                  s->path, key, n, cap - 1);
  memcpy(buf, str, n + 1);
  return PH_OK;
}

/* A per-layer name template: exactly one %d and no other conversion ("%%" is a literal '%'), so
 * formatting it with a layer index is safe. */
static ph_status get_template(const scope *s, const char *key, const char *def, char *buf,
                              diag *d) {
  FORWARD_IF_ERROR(get_string(s, key, def, buf, GENAI_MAX_NAME, d));
  int n_d = 0;
  for (const char *p = buf; *p; p++) {
    if (*p != '%') continue;
    if (p[1] == '%') {
      p++;
      continue;
    }
    RETURN_ERROR_IF(p[1] != 'd', d, PH_ERR_CONFIG_INVALID,
                    "%s: %s%s = \"%s\": only %%d may appear (and %%%% for a literal %%)", s->file,
                    s->path, key, buf);
    n_d++;
  }
  RETURN_ERROR_IF(n_d != 1, d, PH_ERR_CONFIG_INVALID,
                  "%s: %s%s = \"%s\" must contain exactly one %%d (the layer index), has %d",
                  s->file, s->path, key, buf, n_d);
  return PH_OK;
}

static ph_status get_bool(const scope *s, const char *key, int def, int *out, diag *d) {
  const json_t *v = get(s, key);
  *out = def;
  if (!v) return PH_OK;
  RETURN_ERROR_IF(!json_is_boolean(v), d, PH_ERR_CONFIG_INVALID,
                  "%s: %s%s is %s, expected true or false", s->file, s->path, key, json_kind(v));
  *out = json_is_true(v);
  return PH_OK;
}

/* eos_token_id: one id or an array of ids (GenAI accepts both; Qwen lists two). */
static ph_status get_eos(const scope *s, genai_config *g, diag *d) {
  const json_t *v = get(s, "eos_token_id");
  g->eos_token_id = -1;
  g->n_eos_token_ids = 0;
  if (!v) return PH_OK;
  if (!json_is_array(v)) {
    FORWARD_IF_ERROR(check_id(s, "eos_token_id", v, &g->eos_token_ids[0], d));
    g->n_eos_token_ids = 1;
    g->eos_token_id = g->eos_token_ids[0];
    return PH_OK;
  }
  size_t n = json_array_size(v);
  RETURN_ERROR_IF(n > GENAI_MAX_EOS, d, PH_ERR_LIMIT,
                  "%s: %seos_token_id lists %zu ids, at most %d are supported", s->file, s->path, n,
                  GENAI_MAX_EOS);
  for (size_t i = 0; i < n; i++) {
    char key[32];
    snprintf(key, sizeof key, "eos_token_id[%zu]", i);
    FORWARD_IF_ERROR(check_id(s, key, json_array_get(v, i), &g->eos_token_ids[i], d));
  }
  g->n_eos_token_ids = (int)n;
  if (n) g->eos_token_id = g->eos_token_ids[0];
  return PH_OK;
}

static ph_status read_root(const json_t *root, const char *file, genai_config *g, diag *d) {
  RETURN_ERROR_IF(!json_is_object(root), d, PH_ERR_CONFIG_INVALID,
                  "%s: the top level is %s, expected an object", file, json_kind(root));
  scope top = {root, "", file}, model, dec, in, out, search;
  FORWARD_IF_ERROR(get_object(&top, "model", "model.", &model, d));
  RETURN_ERROR_IF(!model.obj, d, PH_ERR_CONFIG_MISSING_FIELD, "%s: model is missing", file);
  RETURN_ERROR_IF(!get(&model, "type"), d, PH_ERR_CONFIG_MISSING_FIELD, "%s: model.type is missing",
                  file);
  FORWARD_IF_ERROR(get_string(&model, "type", "", g->model_type, sizeof g->model_type, d));
  FORWARD_IF_ERROR(get_int(&model, "vocab_size", 0, &g->vocab_size, d));
  FORWARD_IF_ERROR(get_int(&model, "context_length", 0, &g->context_length, d));
  FORWARD_IF_ERROR(get_int(&model, "bos_token_id", -1, &g->bos_token_id, d));
  FORWARD_IF_ERROR(get_int(&model, "pad_token_id", -1, &g->pad_token_id, d));
  FORWARD_IF_ERROR(get_eos(&model, g, d));

  FORWARD_IF_ERROR(get_object(&model, "decoder", "model.decoder.", &dec, d));
  FORWARD_IF_ERROR(get_string(&dec, "filename", ONNX_MODEL_FILE, g->filename, GENAI_MAX_NAME, d));
  FORWARD_IF_ERROR(get_int(&dec, "head_size", 0, &g->head_size, d));
  FORWARD_IF_ERROR(get_int(&dec, "hidden_size", 0, &g->hidden_size, d));
  FORWARD_IF_ERROR(get_int(&dec, "num_attention_heads", 0, &g->num_attention_heads, d));
  FORWARD_IF_ERROR(get_int(&dec, "num_hidden_layers", 0, &g->num_hidden_layers, d));
  FORWARD_IF_ERROR(get_int(&dec, "num_key_value_heads", 0, &g->num_key_value_heads, d));

  FORWARD_IF_ERROR(get_object(&dec, "inputs", "model.decoder.inputs.", &in, d));
  FORWARD_IF_ERROR(get_string(&in, "input_ids", "input_ids", g->input_ids, GENAI_MAX_NAME, d));
  FORWARD_IF_ERROR(
      get_string(&in, "attention_mask", "attention_mask", g->attention_mask, GENAI_MAX_NAME, d));
  FORWARD_IF_ERROR(
      get_string(&in, "position_ids", "position_ids", g->position_ids, GENAI_MAX_NAME, d));
  FORWARD_IF_ERROR(
      get_template(&in, "past_key_names", "past_key_values.%d.key", g->past_key_names, d));
  FORWARD_IF_ERROR(
      get_template(&in, "past_value_names", "past_key_values.%d.value", g->past_value_names, d));
  FORWARD_IF_ERROR(
      get_template(&in, "past_conv_names", "past_key_values.%d.conv_state", g->past_conv_names, d));
  FORWARD_IF_ERROR(get_template(&in, "past_recurrent_names", "past_key_values.%d.recurrent_state",
                                g->past_recurrent_names, d));

  FORWARD_IF_ERROR(get_object(&dec, "outputs", "model.decoder.outputs.", &out, d));
  FORWARD_IF_ERROR(get_string(&out, "logits", "logits", g->logits, GENAI_MAX_NAME, d));
  FORWARD_IF_ERROR(
      get_template(&out, "present_key_names", "present.%d.key", g->present_key_names, d));
  FORWARD_IF_ERROR(
      get_template(&out, "present_value_names", "present.%d.value", g->present_value_names, d));
  FORWARD_IF_ERROR(
      get_template(&out, "present_conv_names", "present.%d.conv_state", g->present_conv_names, d));
  FORWARD_IF_ERROR(get_template(&out, "present_recurrent_names", "present.%d.recurrent_state",
                                g->present_recurrent_names, d));

  FORWARD_IF_ERROR(get_object(&top, "search", "search.", &search, d));
  return get_bool(&search, "past_present_share_buffer", 0, &g->past_present_share_buffer, d);
}

ph_status genai_config_parse(const char *json, size_t len, const char *label, genai_config *out,
                             diag *d) {
  memset(out, 0, sizeof *out);
  json_error_t err;
  json_t *root = json_loadb(json ? json : "", json ? len : 0, JSON_REJECT_DUPLICATES, &err);
  RETURN_ERROR_IF(!root, d, PH_ERR_JSON, "%s: line %d, column %d: %s", label, err.line, err.column,
                  err.text);
  genai_config g;
  memset(&g, 0, sizeof g);
  ph_status s = read_root(root, label, &g, d);
  json_decref(root);
  if (s == PH_OK) *out = g;
  return s;
}

ph_status genai_config_read(const char *dir, genai_config *out, diag *d) {
  memset(out, 0, sizeof *out);
  char path[4096];
  FORWARD_IF_ERROR(path_join(path, sizeof path, dir, GENAI_FILE, d));
  char *text = NULL;
  size_t len = 0;
  FORWARD_IF_ERROR(file_read_all(path, HF_CONFIG_MAX_BYTES, &text, &len, d));
  ph_status s = genai_config_parse(text, len, path, out, d);
  free(text);
  return s;
}
