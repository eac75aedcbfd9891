/* hf_config — config.json to hf_config. See hf_config.h for the rules and
 * ../../docs/config.md for where each field is read from.
 *
 * The parse runs in stages over one jansson tree: identity (model_type, wrapper, dtype), common
 * sizes, layer kinds, GatedDeltaNet fields, MoE fields, rope, MLA, then derived geometry and the
 * cross-field checks. Every field goes through one of the get_* helpers below, so the type
 * check, the range check and the path in the message ("text_config.hidden_size") live in one
 * place. Value ranges are generous but bounded so that the byte counts derived later fit in
 * int64 without overflow checks at every use.
 */
#include "io/hf_config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "io/json_util.h"
#include "tensor/dtype.h"

/* Upper bounds: far above any real model, low enough that every product in this file and in
 * the byte-count helpers stays below 2^62. */
#define LIM_HIDDEN       ((int64_t)1 << 20)
#define LIM_VOCAB        ((int64_t)1 << 24)
#define LIM_INTERMEDIATE ((int64_t)1 << 22)
#define LIM_HEADS        ((int64_t)1 << 14)
#define LIM_HEAD_DIM     ((int64_t)1 << 14)
#define LIM_LORA         ((int64_t)1 << 16)
#define LIM_CONV_KERNEL  ((int64_t)1 << 8)
#define LIM_EXPERTS      ((int64_t)1 << 16)
#define LIM_POSITIONS    ((int64_t)1 << 40)
#define LIM_STEP         ((int64_t)1 << 20)

/* Integral JSON reals are accepted for integer fields only below 2^53, where a double still
 * holds every integer exactly (and the cast to int64 is defined). */
#define EXACT_DOUBLE_INT 9007199254740992.0

#define PATH_BYTES 160

/* A JSON object and the dotted prefix its keys are reported under ("text_config."). obj may be
 * NULL: an absent sub-object, whose keys then all read as absent. */
typedef struct scope {
  const json_t *obj;
  char prefix[64];
} scope;

typedef struct reader {
  scope root;    /* the top-level object */
  scope text;    /* text_config for wrappers, else the top level */
  scope rope_p;  /* rope_parameters (obj NULL when absent) */
  scope rope_s;  /* older rope_scaling (obj NULL when absent or null) */
  int is_qwen35; /* qwen3_5* family: MRoPE, every layer MoE for *_moe */
  int is_moe35;  /* qwen3_5_moe / qwen3_5_moe_text */
  int is_next;   /* qwen3_next */
  int is_v3;     /* deepseek_v3 (defaults differ from v2) */
  int is_glm;    /* glm_moe_dsa (V3-style routing, its own defaults) */
  int is_lite;   /* glm4_moe_lite (GLM-4.7-Flash: DeepSeek-V3's MLA and routing, GLM defaults) */
  int sigmoid;   /* is_v3 || is_glm || is_lite: sigmoid / noaux_tc routing defaults */
} reader;

static const char SUPPORTED_TYPES[] =
    "qwen3_5_text, qwen3_5_moe_text, qwen3_5, qwen3_5_moe, qwen3_next, deepseek_v2, deepseek_v3, "
    "glm_moe_dsa, glm4_moe_lite";

/* ---- field access ------------------------------------------------------------------------- */

static void scope_init(scope *s, const json_t *obj, const char *prefix) {
  s->obj = obj;
  snprintf(s->prefix, sizeof s->prefix, "%s", prefix);
}

static const char *field_path(char *buf, const scope *s, const char *key) {
  snprintf(buf, PATH_BYTES, "%s%s", s->prefix, key);
  return buf;
}

/* The value of key, or NULL when it is absent or JSON null (HF treats null as "use the
 * default" for every optional field). */
static const json_t *field(const scope *s, const char *key) {
  if (!s || !s->obj) return NULL;
  const json_t *v = json_object_get(s->obj, key);
  return (v && !json_is_null(v)) ? v : NULL;
}

/* The first of a, b, c (c may be NULL) that holds key; a when none does, so a missing-field
 * message and the default apply to the preferred spelling. */
static const scope *pick(const scope *a, const scope *b, const scope *c, const char *key) {
  if (field(a, key)) return a;
  if (field(b, key)) return b;
  if (c && field(c, key)) return c;
  return a;
}

/* Converts an integer-valued JSON number to int64 (integral reals such as 4096.0 included). */
static ph_status json_to_int(const json_t *v, const char *path, int64_t *out, diag *d) {
  if (json_is_integer(v)) {
    *out = (int64_t)json_integer_value(v);
    return PH_OK;
  }
  if (json_is_real(v)) {
    double x = json_real_value(v);
    RETURN_ERROR_IF(x != floor(x) || fabs(x) >= EXACT_DOUBLE_INT, d, PH_ERR_CONFIG_INVALID,
                    "%s: expected an integer, got %.17g", path, x);
    *out = (int64_t)x;
    return PH_OK;
  }
  return diag_set(d, PH_ERR_CONFIG_INVALID, "%s: expected an integer, got %s", path, json_kind(v));
}

static ph_status check_int_range(int64_t v, int64_t lo, int64_t hi, const char *path, diag *d) {
  RETURN_ERROR_IF(v < lo, d, PH_ERR_CONFIG_INVALID, "%s = %lld: must be >= %lld", path,
                  (long long)v, (long long)lo);
  RETURN_ERROR_IF(v > hi, d, PH_ERR_LIMIT, "%s = %lld: exceeds the supported maximum %lld", path,
                  (long long)v, (long long)hi);
  return PH_OK;
}

/* Integer field in [lo, hi]: below lo is PH_ERR_CONFIG_INVALID (non-positive sizes), above hi
 * PH_ERR_LIMIT. Absent: PH_ERR_CONFIG_MISSING_FIELD when required, else def. */
static ph_status get_int(const scope *s, const char *key, int required, int64_t def, int64_t lo,
                         int64_t hi, int64_t *out, diag *d) {
  char path[PATH_BYTES];
  field_path(path, s, key);
  const json_t *v = field(s, key);
  if (!v) {
    RETURN_ERROR_IF(required, d, PH_ERR_CONFIG_MISSING_FIELD, "%s is missing", path);
    *out = def;
    return PH_OK;
  }
  int64_t x;
  FORWARD_IF_ERROR(json_to_int(v, path, &x, d));
  FORWARD_IF_ERROR(check_int_range(x, lo, hi, path, d));
  *out = x;
  return PH_OK;
}

/* Number field (integer or real). positive: must be > 0. Never required: every double field
 * has an HF default. */
static ph_status get_double(const scope *s, const char *key, double def, int positive, double *out,
                            diag *d) {
  char path[PATH_BYTES];
  field_path(path, s, key);
  const json_t *v = field(s, key);
  if (!v) {
    *out = def;
    return PH_OK;
  }
  RETURN_ERROR_IF(!json_is_number(v), d, PH_ERR_CONFIG_INVALID, "%s: expected a number, got %s",
                  path, json_kind(v));
  double x = json_number_value(v);
  /* jansson rejects overflowing reals, so x is finite; the check guards future parsers. */
  RETURN_ERROR_IF(!isfinite(x) || (positive && !(x > 0)), d, PH_ERR_CONFIG_INVALID,
                  "%s = %g: must be a positive number", path, x);
  *out = x;
  return PH_OK;
}

/* Boolean field: only JSON true/false (0/1 integers are a type error, as in HF's typed
 * configs). */
static ph_status get_bool(const scope *s, const char *key, int def, int *out, diag *d) {
  char path[PATH_BYTES];
  field_path(path, s, key);
  const json_t *v = field(s, key);
  if (!v) {
    *out = def;
    return PH_OK;
  }
  RETURN_ERROR_IF(!json_is_boolean(v), d, PH_ERR_CONFIG_INVALID,
                  "%s: expected true or false, got %s", path, json_kind(v));
  *out = json_is_true(v) ? 1 : 0;
  return PH_OK;
}

/* String field copied into buf[cap]; def (may be NULL = "") when absent. A string that does not
 * fit is PH_ERR_CONFIG_INVALID: every string we keep has a short fixed vocabulary. */
static ph_status get_string(const scope *s, const char *key, int required, const char *def,
                            char *buf, size_t cap, diag *d) {
  char path[PATH_BYTES];
  field_path(path, s, key);
  const json_t *v = field(s, key);
  if (!v) {
    RETURN_ERROR_IF(required, d, PH_ERR_CONFIG_MISSING_FIELD, "%s is missing", path);
    snprintf(buf, cap, "%s", def ? def : "");
    return PH_OK;
  }
  RETURN_ERROR_IF(!json_is_string(v), d, PH_ERR_CONFIG_INVALID, "%s: expected a string, got %s",
                  path, json_kind(v));
  const char *str = json_string_value(v);
  RETURN_ERROR_IF(strlen(str) >= cap, d, PH_ERR_CONFIG_INVALID,
                  "%s: \"%.40s...\" is longer than %zu characters", path, str, cap - 1);
  snprintf(buf, cap, "%s", str);
  return PH_OK;
}

/* Sub-object field: sets *out (obj NULL when absent or null) with the nested prefix. */
static ph_status get_object(const scope *s, const char *key, scope *out, diag *d) {
  char path[PATH_BYTES];
  field_path(path, s, key);
  const json_t *v = field(s, key);
  RETURN_ERROR_IF(v && !json_is_object(v), d, PH_ERR_CONFIG_INVALID,
                  "%s: expected an object, got %s", path, json_kind(v));
  /* Keys nest at most two deep ("text_config.rope_parameters."), far below the buffer. */
  char prefix[sizeof out->prefix];
  RETURN_ERROR_IF(snprintf(prefix, sizeof prefix, "%s.", path) >= (int)sizeof prefix, d,
                  PH_ERR_INTERNAL, "%s: path too long", path);
  scope_init(out, v, prefix);
  return PH_OK;
}

static int str_in(const char *s, const char *const *list, size_t n) {
  for (size_t i = 0; i < n; i++)
    if (strcmp(s, list[i]) == 0) return 1;
  return 0;
}

/* ---- stages ------------------------------------------------------------------------------- */

/* model_type, the VLM wrapper, family, architecture and dtype. */
static ph_status parse_identity(reader *r, hf_config *c, diag *d) {
  char path[PATH_BYTES];
  const json_t *mt = field(&r->root, "model_type");
  RETURN_ERROR_IF(!mt, d, PH_ERR_CONFIG_MISSING_FIELD, "model_type is missing");
  RETURN_ERROR_IF(!json_is_string(mt), d, PH_ERR_CONFIG_INVALID,
                  "model_type: expected a string, got %s", json_kind(mt));
  const char *type = json_string_value(mt);

  const char *wrapped_text_type = NULL; /* set for the VLM wrappers */
  if (strcmp(type, "qwen3_5_text") == 0 || strcmp(type, "qwen3_5_moe_text") == 0) {
    c->family = FAMILY_QWEN35;
  } else if (strcmp(type, "qwen3_5") == 0) {
    c->family = FAMILY_QWEN35;
    wrapped_text_type = "qwen3_5_text";
  } else if (strcmp(type, "qwen3_5_moe") == 0) {
    c->family = FAMILY_QWEN35;
    wrapped_text_type = "qwen3_5_moe_text";
  } else if (strcmp(type, "qwen3_next") == 0) {
    c->family = FAMILY_QWEN3_NEXT;
  } else if (strcmp(type, "deepseek_v2") == 0 || strcmp(type, "deepseek_v3") == 0 ||
             strcmp(type, "glm_moe_dsa") == 0 || strcmp(type, "glm4_moe_lite") == 0) {
    c->family = FAMILY_DEEPSEEK;
  } else {
    return diag_set(d, PH_ERR_UNKNOWN_MODEL_TYPE, "model_type \"%.64s\" is not supported (%s)",
                    type, SUPPORTED_TYPES);
  }
  snprintf(c->model_type, sizeof c->model_type, "%s", type);

  if (wrapped_text_type) {
    const json_t *tc = field(&r->root, "text_config");
    RETURN_ERROR_IF(!tc, d, PH_ERR_CONFIG_MISSING_FIELD,
                    "text_config is missing (model_type %s keeps the text model's fields there)",
                    type);
    RETURN_ERROR_IF(!json_is_object(tc), d, PH_ERR_CONFIG_INVALID,
                    "text_config: expected an object, got %s", json_kind(tc));
    scope_init(&r->text, tc, "text_config.");
    c->is_vlm = 1;
    /* HF builds the text config from the dict whatever it says; absent means the default. */
    FORWARD_IF_ERROR(get_string(&r->text, "model_type", 0, wrapped_text_type, c->text_model_type,
                                sizeof c->text_model_type, d));
    RETURN_ERROR_IF(strcmp(c->text_model_type, wrapped_text_type) != 0, d,
                    PH_ERR_CONFIG_INCONSISTENT,
                    "text_config.model_type \"%s\" does not match model_type \"%s\" (expected "
                    "\"%s\")",
                    c->text_model_type, type, wrapped_text_type);
  } else {
    r->text = r->root;
    snprintf(c->text_model_type, sizeof c->text_model_type, "%s", type);
  }
  const char *tt = c->text_model_type;
  r->is_qwen35 = c->family == FAMILY_QWEN35;
  r->is_moe35 = strcmp(tt, "qwen3_5_moe_text") == 0;
  r->is_next = c->family == FAMILY_QWEN3_NEXT;
  r->is_v3 = strcmp(tt, "deepseek_v3") == 0;
  r->is_glm = strcmp(tt, "glm_moe_dsa") == 0;
  r->is_lite = strcmp(tt, "glm4_moe_lite") == 0;
  r->sigmoid = r->is_v3 || r->is_glm || r->is_lite;

  const json_t *arch = field(&r->root, "architectures");
  if (arch) {
    RETURN_ERROR_IF(!json_is_array(arch), d, PH_ERR_CONFIG_INVALID,
                    "architectures: expected an array, got %s", json_kind(arch));
    if (json_array_size(arch) > 0) {
      const json_t *a0 = json_array_get(arch, 0);
      RETURN_ERROR_IF(!json_is_string(a0), d, PH_ERR_CONFIG_INVALID,
                      "architectures[0]: expected a string, got %s", json_kind(a0));
      RETURN_ERROR_IF(strlen(json_string_value(a0)) >= sizeof c->architecture, d,
                      PH_ERR_CONFIG_INVALID, "architectures[0] is longer than %zu characters",
                      sizeof c->architecture - 1);
      snprintf(c->architecture, sizeof c->architecture, "%s", json_string_value(a0));
    }
  }

  /* dtype: text_config before the top level, "dtype" (newer transformers) before the older
   * "torch_dtype" within each. */
  const scope *order[2] = {&r->text, &r->root};
  const char *keys[2] = {"dtype", "torch_dtype"};
  c->dtype = PH_DTYPE_F32;
  for (int i = 0; i < 2; i++) {
    for (int k = 0; k < 2; k++) {
      const json_t *v = field(order[i], keys[k]);
      if (!v) continue;
      field_path(path, order[i], keys[k]);
      RETURN_ERROR_IF(!json_is_string(v), d, PH_ERR_CONFIG_INVALID, "%s: expected a string, got %s",
                      path, json_kind(v));
      ph_dtype dt = dtype_from_name(json_string_value(v));
      RETURN_ERROR_IF(dt == PH_DTYPE_INVALID || !dtype_is_float(dt), d, PH_ERR_CONFIG_INVALID,
                      "%s: unknown model dtype \"%.40s\" (float32, float16, bfloat16, "
                      "float8_e4m3fn)",
                      path, json_string_value(v));
      c->dtype = dt;
      return PH_OK;
    }
    if (!c->is_vlm) break; /* root == text: nothing more to look at */
  }
  return PH_OK;
}

/* Sizes every family has. */
static ph_status parse_common(reader *r, hf_config *c, diag *d) {
  const scope *t = &r->text;
  int deepseek = c->family == FAMILY_DEEPSEEK;
  FORWARD_IF_ERROR(get_int(t, "hidden_size", 1, 0, 1, LIM_HIDDEN, &c->hidden_size, d));
  FORWARD_IF_ERROR(get_int(t, "num_hidden_layers", 1, 0, 1, HF_MAX_LAYERS, &c->n_layers, d));
  FORWARD_IF_ERROR(get_int(t, "num_attention_heads", 1, 0, 1, LIM_HEADS, &c->n_heads, d));
  FORWARD_IF_ERROR(get_int(t, "vocab_size", 1, 0, 1, LIM_VOCAB, &c->vocab_size, d));
  FORWARD_IF_ERROR(
      get_int(t, "num_key_value_heads", !deepseek, c->n_heads, 1, LIM_HEADS, &c->n_kv_heads, d));
  FORWARD_IF_ERROR(get_int(t, "max_position_embeddings", 0, 0, 0, LIM_POSITIONS,
                           &c->max_position_embeddings, d));
  if (!deepseek) FORWARD_IF_ERROR(get_int(t, "head_dim", 0, 256, 1, LIM_HEAD_DIM, &c->head_dim, d));
  /* The GLM configs default rms_norm_eps to 1e-5; every other family to 1e-6. */
  FORWARD_IF_ERROR(
      get_double(t, "rms_norm_eps", r->is_glm || r->is_lite ? 1e-5 : 1e-6, 1, &c->rms_norm_eps, d));
  RETURN_ERROR_IF(c->rms_norm_eps >= 1.0, d, PH_ERR_CONFIG_INVALID,
                  "%srms_norm_eps = %g: must be below 1", t->prefix, c->rms_norm_eps);
  FORWARD_IF_ERROR(get_bool(pick(&r->text, &r->root, NULL, "tie_word_embeddings"),
                            "tie_word_embeddings", 0, &c->tie_word_embeddings, d));
  FORWARD_IF_ERROR(get_bool(t, "attention_bias", 0, &c->attention_bias, d));
  FORWARD_IF_ERROR(
      get_int(t, "mtp_num_hidden_layers", 0, 0, 0, HF_MAX_LAYERS, &c->mtp_num_hidden_layers, d));
  /* attn_output_gate: HF gates full attention whatever it says and the checkpoint always holds
   * the gate rows, so it is only type-checked. */
  int attn_output_gate;
  FORWARD_IF_ERROR(get_bool(t, "attn_output_gate", 1, &attn_output_gate, d));
  FORWARD_IF_ERROR(
      get_string(t, "output_gate_type", 0, "", c->output_gate_type, sizeof c->output_gate_type, d));
  static const char *const gate_types[] = {"", "swish", "silu", "sigmoid"};
  RETURN_ERROR_IF(!str_in(c->output_gate_type, gate_types, 4), d, PH_ERR_UNSUPPORTED,
                  "%soutput_gate_type \"%s\" is not supported (swish, silu, sigmoid)", t->prefix,
                  c->output_gate_type);
  return PH_OK;
}

/* layer_kind[] from layer_types or full_attention_interval (Qwen); all MLA for DeepSeek. */
static ph_status parse_layer_kinds(reader *r, hf_config *c, diag *d) {
  const scope *t = &r->text;
  if (c->family == FAMILY_DEEPSEEK) {
    for (int64_t i = 0; i < c->n_layers; i++) c->layer_kind[i] = PH_LAYER_MLA;
    c->full_attention_interval = 0;
    return PH_OK;
  }
  FORWARD_IF_ERROR(
      get_int(t, "full_attention_interval", 0, 4, 1, LIM_STEP, &c->full_attention_interval, d));
  const json_t *lt = field(t, "layer_types");
  if (!lt) {
    for (int64_t i = 0; i < c->n_layers; i++)
      c->layer_kind[i] = (i + 1) % c->full_attention_interval == 0 ? PH_LAYER_FULL_ATTENTION
                                                                   : PH_LAYER_LINEAR_ATTENTION;
    return PH_OK;
  }
  RETURN_ERROR_IF(!json_is_array(lt), d, PH_ERR_CONFIG_INVALID,
                  "%slayer_types: expected an array, got %s", t->prefix, json_kind(lt));
  RETURN_ERROR_IF((int64_t)json_array_size(lt) != c->n_layers, d, PH_ERR_CONFIG_INCONSISTENT,
                  "%slayer_types has %zu entries but %snum_hidden_layers = %lld", t->prefix,
                  json_array_size(lt), t->prefix, (long long)c->n_layers);
  for (int64_t i = 0; i < c->n_layers; i++) {
    const json_t *e = json_array_get(lt, (size_t)i);
    const char *s = json_is_string(e) ? json_string_value(e) : NULL;
    if (s && strcmp(s, "linear_attention") == 0) {
      c->layer_kind[i] = PH_LAYER_LINEAR_ATTENTION;
    } else if (s && strcmp(s, "full_attention") == 0) {
      c->layer_kind[i] = PH_LAYER_FULL_ATTENTION;
    } else if (s) {
      return diag_set(d, PH_ERR_CONFIG_INVALID,
                      "%slayer_types[%lld] = \"%.40s\": expected \"linear_attention\" or "
                      "\"full_attention\"",
                      t->prefix, (long long)i, s);
    } else {
      return diag_set(d, PH_ERR_CONFIG_INVALID, "%slayer_types[%lld]: expected a string, got %s",
                      t->prefix, (long long)i, json_kind(e));
    }
  }
  return PH_OK;
}

/* GatedDeltaNet sizes; required only when some layer is linear attention. */
static ph_status parse_linear(reader *r, hf_config *c, diag *d) {
  const scope *t = &r->text;
  if (c->family == FAMILY_DEEPSEEK) return PH_OK;
  int need = 0;
  for (int64_t i = 0; i < c->n_layers; i++) need |= c->layer_kind[i] == PH_LAYER_LINEAR_ATTENTION;
  FORWARD_IF_ERROR(
      get_int(t, "linear_num_key_heads", need, 0, 1, LIM_HEADS, &c->lin.n_key_heads, d));
  FORWARD_IF_ERROR(
      get_int(t, "linear_num_value_heads", need, 0, 1, LIM_HEADS, &c->lin.n_value_heads, d));
  FORWARD_IF_ERROR(
      get_int(t, "linear_key_head_dim", need, 0, 1, LIM_HEAD_DIM, &c->lin.key_head_dim, d));
  FORWARD_IF_ERROR(
      get_int(t, "linear_value_head_dim", need, 0, 1, LIM_HEAD_DIM, &c->lin.value_head_dim, d));
  FORWARD_IF_ERROR(
      get_int(t, "linear_conv_kernel_dim", 0, 4, 1, LIM_CONV_KERNEL, &c->lin.conv_kernel, d));
  return PH_OK;
}

/* mlp_only_layers (Qwen3-Next): marks listed layers dense. */
static ph_status apply_mlp_only_layers(const scope *t, hf_config *c, diag *d) {
  const json_t *v = field(t, "mlp_only_layers");
  if (!v) return PH_OK;
  RETURN_ERROR_IF(!json_is_array(v), d, PH_ERR_CONFIG_INVALID,
                  "%smlp_only_layers: expected an array, got %s", t->prefix, json_kind(v));
  for (size_t i = 0; i < json_array_size(v); i++) {
    char path[PATH_BYTES];
    snprintf(path, sizeof path, "%smlp_only_layers[%zu]", t->prefix, i);
    int64_t layer;
    FORWARD_IF_ERROR(json_to_int(json_array_get(v, i), path, &layer, d));
    RETURN_ERROR_IF(layer < 0 || layer >= c->n_layers, d, PH_ERR_CONFIG_INVALID,
                    "%s = %lld: not a layer index (num_hidden_layers = %lld)", path,
                    (long long)layer, (long long)c->n_layers);
    c->layer_is_moe[layer] = 0;
  }
  return PH_OK;
}

/* mlp_layer_types (glm_moe_dsa, glm4_moe_lite): "dense" / "sparse" per layer, overriding the
 * first_k_dense_replace pattern as HF does. "sparse" needs n_routed_experts > 0. */
static ph_status apply_mlp_layer_types(const scope *t, hf_config *c, diag *d) {
  const json_t *v = field(t, "mlp_layer_types");
  if (!v) return PH_OK;
  RETURN_ERROR_IF(!json_is_array(v), d, PH_ERR_CONFIG_INVALID,
                  "%smlp_layer_types: expected an array, got %s", t->prefix, json_kind(v));
  RETURN_ERROR_IF((int64_t)json_array_size(v) != c->n_layers, d, PH_ERR_CONFIG_INCONSISTENT,
                  "%smlp_layer_types has %zu entries but %snum_hidden_layers = %lld", t->prefix,
                  json_array_size(v), t->prefix, (long long)c->n_layers);
  for (int64_t i = 0; i < c->n_layers; i++) {
    const json_t *e = json_array_get(v, (size_t)i);
    const char *s = json_is_string(e) ? json_string_value(e) : NULL;
    RETURN_ERROR_IF(!s || (strcmp(s, "dense") != 0 && strcmp(s, "sparse") != 0), d,
                    PH_ERR_CONFIG_INVALID,
                    "%smlp_layer_types[%lld]: expected \"dense\" or \"sparse\", got %s%.40s%s",
                    t->prefix, (long long)i, s ? "\"" : "", s ? s : json_kind(e), s ? "\"" : "");
    c->layer_is_moe[i] = strcmp(s, "sparse") == 0;
    RETURN_ERROR_IF(c->layer_is_moe[i] && c->moe.n_experts == 0, d, PH_ERR_CONFIG_INCONSISTENT,
                    "%smlp_layer_types[%lld] = \"sparse\" but %sn_routed_experts is 0 or absent",
                    t->prefix, (long long)i, t->prefix);
  }
  return PH_OK;
}

/* layer_is_moe[] and the MoE fields; the dense intermediate_size when some layer is dense. */
static ph_status parse_moe(reader *r, hf_config *c, diag *d) {
  const scope *t = &r->text;
  int deepseek = c->family == FAMILY_DEEPSEEK;

  /* Routing knobs, with the per-family HF defaults. Qwen3.5-MoE always renormalises. */
  FORWARD_IF_ERROR(
      get_bool(t, "norm_topk_prob", deepseek ? r->sigmoid : 1, &c->moe.norm_topk_prob, d));
  if (r->is_moe35) c->moe.norm_topk_prob = 1;
  FORWARD_IF_ERROR(get_double(t, "routed_scaling_factor",
                              r->is_lite   ? 1.8
                              : r->sigmoid ? 2.5
                                           : 1.0,
                              1, &c->moe.routed_scaling_factor, d));
  FORWARD_IF_ERROR(get_string(t, "scoring_func", 0, r->sigmoid ? "sigmoid" : "softmax",
                              c->moe.scoring_func, sizeof c->moe.scoring_func, d));
  FORWARD_IF_ERROR(get_string(t, "topk_method", 0, r->sigmoid ? "noaux_tc" : "greedy",
                              c->moe.topk_method, sizeof c->moe.topk_method, d));
  if (r->is_glm || r->is_lite) {
    /* HF's GLM routers (glm_moe_dsa, glm4_moe_lite) are always V3's: sigmoid scores,
     * e_score_correction_bias, group-limited top-k; it reads neither key (type-checked above, then
     * overridden). */
    snprintf(c->moe.scoring_func, sizeof c->moe.scoring_func, "sigmoid");
    snprintf(c->moe.topk_method, sizeof c->moe.topk_method, "noaux_tc");
  }
  static const char *const scorings[] = {"softmax", "sigmoid"};
  static const char *const methods[] = {"greedy", "group_limited_greedy", "noaux_tc"};
  RETURN_ERROR_IF(!str_in(c->moe.scoring_func, scorings, 2), d, PH_ERR_UNSUPPORTED,
                  "%sscoring_func \"%s\" is not supported (softmax, sigmoid)", t->prefix,
                  c->moe.scoring_func);
  RETURN_ERROR_IF(!str_in(c->moe.topk_method, methods, 3), d, PH_ERR_UNSUPPORTED,
                  "%stopk_method \"%s\" is not supported (greedy, group_limited_greedy, noaux_tc)",
                  t->prefix, c->moe.topk_method);

  int64_t n_moe = 0;
  if (deepseek) {
    int64_t freq;
    FORWARD_IF_ERROR(get_int(t, "n_routed_experts", 0, 0, 0, LIM_EXPERTS, &c->moe.n_experts, d));
    /* GlmMoeDsaConfig: 3 dense layers; Glm4MoeLiteConfig: 1 (its mlp_layer_types default). */
    FORWARD_IF_ERROR(get_int(t, "first_k_dense_replace", 0,
                             r->is_glm    ? 3
                             : r->is_lite ? 1
                                          : 0,
                             0, LIM_STEP, &c->moe.first_k_dense_replace, d));
    FORWARD_IF_ERROR(get_int(t, "moe_layer_freq", 0, 1, 1, LIM_STEP, &freq, d));
    FORWARD_IF_ERROR(get_int(t, "n_shared_experts", 0, r->sigmoid ? 1 : 0, 0, LIM_EXPERTS,
                             &c->moe.n_shared_experts, d));
    FORWARD_IF_ERROR(
        get_int(t, "n_group", 0, r->is_v3 ? 8 : 1, 1, LIM_EXPERTS, &c->moe.n_group, d));
    FORWARD_IF_ERROR(
        get_int(t, "topk_group", 0, r->is_v3 ? 4 : 1, 1, LIM_EXPERTS, &c->moe.topk_group, d));
    for (int64_t i = 0; i < c->n_layers; i++)
      c->layer_is_moe[i] =
          c->moe.n_experts > 0 && i >= c->moe.first_k_dense_replace && i % freq == 0;
    if (r->is_glm || r->is_lite) FORWARD_IF_ERROR(apply_mlp_layer_types(t, c, d));
  } else if (r->is_moe35) {
    FORWARD_IF_ERROR(get_int(t, "num_experts", 1, 0, 1, LIM_EXPERTS, &c->moe.n_experts, d));
    for (int64_t i = 0; i < c->n_layers; i++) c->layer_is_moe[i] = 1;
  } else if (r->is_next) {
    FORWARD_IF_ERROR(get_int(t, "num_experts", 0, 0, 0, LIM_EXPERTS, &c->moe.n_experts, d));
    FORWARD_IF_ERROR(
        get_int(t, "decoder_sparse_step", 0, 1, 1, LIM_STEP, &c->moe.decoder_sparse_step, d));
    for (int64_t i = 0; i < c->n_layers; i++)
      c->layer_is_moe[i] = c->moe.n_experts > 0 && (i + 1) % c->moe.decoder_sparse_step == 0;
    FORWARD_IF_ERROR(apply_mlp_only_layers(t, c, d));
  }
  for (int64_t i = 0; i < c->n_layers; i++) n_moe += c->layer_is_moe[i];
  int need_dense = n_moe < c->n_layers;
  int need_moe = n_moe > 0;
  int need_shared = need_moe && !deepseek;

  FORWARD_IF_ERROR(get_int(t, "intermediate_size", need_dense, 0, 1, LIM_INTERMEDIATE,
                           &c->intermediate_size, d));
  FORWARD_IF_ERROR(
      get_int(t, "num_experts_per_tok", need_moe, 0, 1, LIM_EXPERTS, &c->moe.n_experts_per_tok, d));
  FORWARD_IF_ERROR(get_int(t, "moe_intermediate_size", need_moe, 0, 1, LIM_INTERMEDIATE,
                           &c->moe.moe_intermediate_size, d));
  if (!deepseek)
    FORWARD_IF_ERROR(get_int(t, "shared_expert_intermediate_size", need_shared, 0, 1,
                             LIM_INTERMEDIATE, &c->moe.shared_intermediate_size, d));
  if (need_moe) {
    const char *experts_key = deepseek ? "n_routed_experts" : "num_experts";
    RETURN_ERROR_IF(c->moe.n_experts_per_tok > c->moe.n_experts, d, PH_ERR_CONFIG_INCONSISTENT,
                    "%snum_experts_per_tok = %lld exceeds %s%s = %lld", t->prefix,
                    (long long)c->moe.n_experts_per_tok, t->prefix, experts_key,
                    (long long)c->moe.n_experts);
    if (deepseek) {
      RETURN_ERROR_IF(c->moe.n_experts % c->moe.n_group != 0, d, PH_ERR_CONFIG_INCONSISTENT,
                      "%sn_routed_experts = %lld is not divisible by %sn_group = %lld", t->prefix,
                      (long long)c->moe.n_experts, t->prefix, (long long)c->moe.n_group);
      RETURN_ERROR_IF(c->moe.topk_group > c->moe.n_group, d, PH_ERR_CONFIG_INCONSISTENT,
                      "%stopk_group = %lld exceeds %sn_group = %lld", t->prefix,
                      (long long)c->moe.topk_group, t->prefix, (long long)c->moe.n_group);
    }
  }
  return PH_OK;
}

/* Maps a rope_type / type string to the scaling kind. */
static ph_status rope_kind_from_name(const char *name, const char *path, rope_scaling_kind *out,
                                     diag *d) {
  /* "mrope" is the Qwen2-VL spelling of default rope with MRoPE sections: no scaling. */
  if (strcmp(name, "default") == 0 || strcmp(name, "mrope") == 0) {
    *out = ROPE_SCALING_NONE;
  } else if (strcmp(name, "yarn") == 0) {
    *out = ROPE_SCALING_YARN;
  } else if (strcmp(name, "linear") == 0) {
    *out = ROPE_SCALING_LINEAR;
  } else {
    return diag_set(d, PH_ERR_UNSUPPORTED, "%s \"%s\" is not supported (default, yarn, linear)",
                    path, name);
  }
  return PH_OK;
}

/* mrope_section: exactly three non-negative integers. */
static ph_status get_mrope_section(const scope *s, int64_t out[3], diag *d) {
  char path[PATH_BYTES];
  field_path(path, s, "mrope_section");
  const json_t *v = field(s, "mrope_section");
  RETURN_ERROR_IF(!json_is_array(v) || json_array_size(v) != 3, d, PH_ERR_CONFIG_INVALID,
                  "%s: expected an array of 3 integers", path);
  for (size_t i = 0; i < 3; i++) {
    char item[PATH_BYTES + 8];
    snprintf(item, sizeof item, "%s[%zu]", path, i);
    FORWARD_IF_ERROR(json_to_int(json_array_get(v, i), item, &out[i], d));
    FORWARD_IF_ERROR(check_int_range(out[i], 0, LIM_HEAD_DIM, item, d));
  }
  return PH_OK;
}

/* Rope from rope_parameters (preferred) or top-level rope_theta / partial_rotary_factor and
 * rope_scaling. */
static ph_status parse_rope(reader *r, hf_config *c, diag *d) {
  const scope *t = &r->text;
  const scope *p = &r->rope_p, *s = &r->rope_s;
  FORWARD_IF_ERROR(get_object(t, "rope_parameters", &r->rope_p, d));
  FORWARD_IF_ERROR(get_object(t, "rope_scaling", &r->rope_s, d));

  FORWARD_IF_ERROR(
      get_double(pick(p, t, NULL, "rope_theta"), "rope_theta", 10000.0, 1, &c->rope.theta, d));
  FORWARD_IF_ERROR(get_double(pick(p, t, NULL, "partial_rotary_factor"), "partial_rotary_factor",
                              0.25, 1, &c->rope.partial_rotary_factor, d));

  /* rope_type (new) or type (old) in either object; rope_parameters first. */
  char type[32];
  const scope *ts = NULL;
  const char *tkey = NULL;
  const scope *cands[2] = {p, s};
  const char *keys[2] = {"rope_type", "type"};
  for (int i = 0; i < 2 && !ts; i++)
    for (int k = 0; k < 2 && !ts; k++)
      if (field(cands[i], keys[k])) ts = cands[i], tkey = keys[k];
  c->rope.scaling = ROPE_SCALING_NONE;
  if (ts) {
    char path[PATH_BYTES];
    FORWARD_IF_ERROR(get_string(ts, tkey, 0, "default", type, sizeof type, d));
    FORWARD_IF_ERROR(rope_kind_from_name(type, field_path(path, ts, tkey), &c->rope.scaling, d));
  }

  FORWARD_IF_ERROR(get_double(pick(p, s, NULL, "factor"), "factor", 1.0, 1, &c->rope.factor, d));
  FORWARD_IF_ERROR(get_int(pick(p, s, NULL, "original_max_position_embeddings"),
                           "original_max_position_embeddings", 0, 0, 0, LIM_POSITIONS,
                           &c->rope.original_max_position_embeddings, d));
  FORWARD_IF_ERROR(
      get_double(pick(p, s, NULL, "beta_fast"), "beta_fast", 32.0, 0, &c->rope.beta_fast, d));
  FORWARD_IF_ERROR(
      get_double(pick(p, s, NULL, "beta_slow"), "beta_slow", 1.0, 0, &c->rope.beta_slow, d));
  FORWARD_IF_ERROR(get_double(pick(p, s, NULL, "mscale"), "mscale", 0.0, 0, &c->rope.mscale, d));
  FORWARD_IF_ERROR(get_double(pick(p, s, NULL, "mscale_all_dim"), "mscale_all_dim", 0.0, 0,
                              &c->rope.mscale_all_dim, d));
  FORWARD_IF_ERROR(get_double(pick(p, s, NULL, "attention_factor"), "attention_factor", 0.0, 1,
                              &c->rope.attention_factor, d));
  FORWARD_IF_ERROR(get_bool(pick(p, s, NULL, "truncate"), "truncate", 1, &c->rope.truncate, d));

  if (r->is_qwen35) {
    /* Only the qwen3_5 family has MRoPE; HF defaults the sections when none are written. */
    const scope *ms = pick(p, s, NULL, "mrope_section");
    c->rope.has_mrope = 1;
    if (field(ms, "mrope_section")) {
      FORWARD_IF_ERROR(get_mrope_section(ms, c->rope.mrope_section, d));
    } else {
      c->rope.mrope_section[0] = 11;
      c->rope.mrope_section[1] = 11;
      c->rope.mrope_section[2] = 10;
    }
    FORWARD_IF_ERROR(get_bool(pick(p, s, NULL, "mrope_interleaved"), "mrope_interleaved", 1,
                              &c->rope.mrope_interleaved, d));
  }
  if (c->family == FAMILY_DEEPSEEK) {
    /* Only HF's deepseek_v3 and glm4_moe_lite read rope_interleave (default true). deepseek_v2
     * always rotates adjacent pairs (view_as_complex over (2i, 2i+1)); glm_moe_dsa always
     * rotate_half. The key is still type-checked where HF ignores it. */
    FORWARD_IF_ERROR(get_bool(t, "rope_interleave", 1, &c->rope.interleave, d));
    if (!r->is_v3 && !r->is_lite) c->rope.interleave = r->is_glm ? 0 : 1;
  }
  return PH_OK;
}

/* DeepSeek MLA sizes and the derived head_dim / rotary_dim / softmax scale. */
static ph_status parse_mla(reader *r, hf_config *c, diag *d) {
  const scope *t = &r->text;
  if (c->family != FAMILY_DEEPSEEK) return PH_OK;
  /* q_lora_rank null (V2-Lite) means q_proj is used directly; field() reads null as absent. */
  FORWARD_IF_ERROR(get_int(t, "q_lora_rank", 0, 0, 1, LIM_LORA, &c->mla.q_lora_rank, d));
  FORWARD_IF_ERROR(get_int(t, "kv_lora_rank", 1, 0, 1, LIM_LORA, &c->mla.kv_lora_rank, d));
  FORWARD_IF_ERROR(
      get_int(t, "qk_nope_head_dim", 1, 0, 1, LIM_HEAD_DIM, &c->mla.qk_nope_head_dim, d));
  FORWARD_IF_ERROR(
      get_int(t, "qk_rope_head_dim", 1, 0, 1, LIM_HEAD_DIM, &c->mla.qk_rope_head_dim, d));
  FORWARD_IF_ERROR(get_int(t, "v_head_dim", 1, 0, 1, LIM_HEAD_DIM, &c->mla.v_head_dim, d));
  RETURN_ERROR_IF(c->mla.qk_rope_head_dim % 2 != 0, d, PH_ERR_CONFIG_INCONSISTENT,
                  "%sqk_rope_head_dim = %lld: rotary dims must be even", t->prefix,
                  (long long)c->mla.qk_rope_head_dim);
  c->head_dim = c->mla.qk_nope_head_dim + c->mla.qk_rope_head_dim;
  c->rope.rotary_dim = c->mla.qk_rope_head_dim;
  c->rope.partial_rotary_factor = 1.0; /* rope covers the whole qk_rope part */
  double m = 1.0;
  if (c->rope.scaling == ROPE_SCALING_YARN && c->rope.mscale_all_dim != 0.0 && c->rope.factor > 1.0)
    m = 0.1 * c->rope.mscale_all_dim * log(c->rope.factor) + 1.0;
  c->mla.softmax_scale = m * m / sqrt((double)c->head_dim);
  return PH_OK;
}

/* The MLA-family features models/mla.h refuses for LATENT (see hf_config.h, mla_feat). Only
 * types are checked here: refusing is the export's business, and a dense run of the same
 * checkpoint may still be fine. */
static ph_status parse_mla_features(reader *r, hf_config *c, diag *d) {
  const scope *t = &r->text;
  if (c->family != FAMILY_DEEPSEEK) return PH_OK;
  /* GlmMoeDsaConfig defaults the indexer to 2048 / 32 / 128 and runs it on every layer. */
  const int64_t topk = r->is_glm ? 2048 : 0, heads = r->is_glm ? 32 : 0, dim = r->is_glm ? 128 : 0;
  FORWARD_IF_ERROR(get_bool(t, "use_dsa", r->is_glm, &c->mla_feat.use_dsa, d));
  FORWARD_IF_ERROR(get_int(t, "index_topk", 0, topk, 0, LIM_POSITIONS, &c->mla_feat.index_topk, d));
  FORWARD_IF_ERROR(
      get_int(t, "index_n_heads", 0, heads, 0, LIM_HEADS, &c->mla_feat.index_n_heads, d));
  FORWARD_IF_ERROR(
      get_int(t, "index_head_dim", 0, dim, 0, LIM_HEAD_DIM, &c->mla_feat.index_head_dim, d));

  const json_t *cr = field(t, "compress_ratios");
  RETURN_ERROR_IF(cr && !json_is_array(cr), d, PH_ERR_CONFIG_INVALID,
                  "%scompress_ratios: expected an array, got %s", t->prefix, json_kind(cr));
  c->mla_feat.n_compress_ratios = cr ? (int64_t)json_array_size(cr) : 0;
  FORWARD_IF_ERROR(get_int(t, "o_lora_rank", 0, 0, 0, LIM_LORA, &c->mla_feat.o_lora_rank, d));
  FORWARD_IF_ERROR(get_int(t, "o_groups", 0, 1, 0, LIM_HEADS, &c->mla_feat.o_groups, d));
  FORWARD_IF_ERROR(get_int(t, "hc_mult", 0, 1, 0, LIM_HEADS, &c->mla_feat.hc_mult, d));
  FORWARD_IF_ERROR(get_int(t, "num_nextn_predict_layers", 0, 0, 0, HF_MAX_LAYERS,
                           &c->mla_feat.num_nextn_predict_layers, d));

  static const char *const qk_keys[] = {"attn_qk_norm", "attn_qk_norm_full", "use_qk_norm",
                                        "qk_layernorm"};
  for (size_t i = 0; i < sizeof qk_keys / sizeof qk_keys[0]; i++) {
    int on;
    FORWARD_IF_ERROR(get_bool(t, qk_keys[i], 0, &on, d));
    if (on && !c->mla_feat.qk_norm) {
      c->mla_feat.qk_norm = 1;
      snprintf(c->mla_feat.qk_norm_key, sizeof c->mla_feat.qk_norm_key, "%s", qk_keys[i]);
    }
  }
  int use_window, sink, head_sink;
  FORWARD_IF_ERROR(
      get_int(t, "sliding_window", 0, 0, 0, LIM_POSITIONS, &c->mla_feat.sliding_window, d));
  FORWARD_IF_ERROR(get_bool(t, "use_sliding_window", 1, &use_window, d));
  if (!use_window) c->mla_feat.sliding_window = 0; /* Qwen2-style: a window written but off */
  FORWARD_IF_ERROR(get_bool(t, "attention_sink", 0, &sink, d));
  FORWARD_IF_ERROR(get_bool(t, "head_sink", 0, &head_sink, d));
  c->mla_feat.head_sink = sink || head_sink;
  return PH_OK;
}

/* Derived geometry and the cross-field checks. */
static ph_status derive_and_check(reader *r, hf_config *c, diag *d) {
  const char *tp = r->text.prefix;
  RETURN_ERROR_IF(c->n_heads % c->n_kv_heads != 0, d, PH_ERR_CONFIG_INCONSISTENT,
                  "%snum_attention_heads = %lld is not divisible by %snum_key_value_heads = %lld",
                  tp, (long long)c->n_heads, tp, (long long)c->n_kv_heads);
  for (int64_t i = 0; i < c->n_layers; i++) {
    if (c->layer_kind[i] == PH_LAYER_LINEAR_ATTENTION)
      c->geom.n_linear++;
    else
      c->geom.n_full++;
  }
  if (c->family == FAMILY_DEEPSEEK) return PH_OK;

  if (c->geom.n_linear > 0)
    RETURN_ERROR_IF(c->lin.n_value_heads % c->lin.n_key_heads != 0, d, PH_ERR_CONFIG_INCONSISTENT,
                    "%slinear_num_value_heads = %lld is not divisible by %slinear_num_key_heads "
                    "= %lld",
                    tp, (long long)c->lin.n_value_heads, tp, (long long)c->lin.n_key_heads);
  c->geom.key_dim = c->lin.n_key_heads * c->lin.key_head_dim;
  c->geom.value_dim = c->lin.n_value_heads * c->lin.value_head_dim;
  c->geom.conv_dim = 2 * c->geom.key_dim + c->geom.value_dim;

  /* The factor was checked positive; above 1 the product could exceed head_dim (and, for huge
   * values, the int64 range), so compare before converting. */
  double prf = c->rope.partial_rotary_factor;
  RETURN_ERROR_IF(prf > 1.0, d, PH_ERR_CONFIG_INCONSISTENT,
                  "partial_rotary_factor = %g gives a rotary dim above %shead_dim = %lld", prf, tp,
                  (long long)c->head_dim);
  c->rope.rotary_dim = (int64_t)((double)c->head_dim * prf);
  RETURN_ERROR_IF(c->rope.rotary_dim <= 0 || c->rope.rotary_dim % 2 != 0, d,
                  PH_ERR_CONFIG_INCONSISTENT,
                  "rotary_dim = int(%shead_dim %lld * partial_rotary_factor %g) = %lld: must be "
                  "even and positive",
                  tp, (long long)c->head_dim, prf, (long long)c->rope.rotary_dim);
  if (c->rope.has_mrope) {
    const int64_t *sec = c->rope.mrope_section;
    int64_t sum = sec[0] + sec[1] + sec[2];
    RETURN_ERROR_IF(sum != c->rope.rotary_dim / 2, d, PH_ERR_CONFIG_INCONSISTENT,
                    "mrope_section [%lld, %lld, %lld] sums to %lld, but rotary_dim / 2 = %lld "
                    "(%shead_dim %lld * partial_rotary_factor %g / 2)",
                    (long long)sec[0], (long long)sec[1], (long long)sec[2], (long long)sum,
                    (long long)(c->rope.rotary_dim / 2), tp, (long long)c->head_dim, prf);
  }
  return PH_OK;
}

static ph_status parse_root(const json_t *root, hf_config *c, diag *d) {
  RETURN_ERROR_IF(!json_is_object(root), d, PH_ERR_CONFIG_INVALID,
                  "config.json: expected an object at the top level, got %s", json_kind(root));
  reader r;
  memset(&r, 0, sizeof r);
  scope_init(&r.root, root, "");
  FORWARD_IF_ERROR(parse_identity(&r, c, d));
  FORWARD_IF_ERROR(parse_common(&r, c, d));
  FORWARD_IF_ERROR(parse_layer_kinds(&r, c, d));
  FORWARD_IF_ERROR(parse_linear(&r, c, d));
  FORWARD_IF_ERROR(parse_moe(&r, c, d));
  FORWARD_IF_ERROR(parse_rope(&r, c, d));
  FORWARD_IF_ERROR(parse_mla(&r, c, d));
  FORWARD_IF_ERROR(parse_mla_features(&r, c, d));
  return derive_and_check(&r, c, d);
}

/* ---- public ------------------------------------------------------------------------------- */

ph_status hf_config_parse(const char *json, size_t len, hf_config *out, diag *d) {
  RETURN_ERROR_IF(!out || (!json && len > 0), d, PH_ERR_INVALID_ARGUMENT,
                  "hf_config_parse: NULL argument");
  memset(out, 0, sizeof *out);
  RETURN_ERROR_IF(len > HF_CONFIG_MAX_BYTES, d, PH_ERR_LIMIT,
                  "config.json is %zu bytes, more than the %zu allowed", len, HF_CONFIG_MAX_BYTES);
  json_error_t jerr;
  json_t *root = json_loadb(json ? json : "", len, JSON_REJECT_DUPLICATES, &jerr);
  RETURN_ERROR_IF(!root, d, PH_ERR_JSON, "config.json line %d, column %d: %s", jerr.line,
                  jerr.column, jerr.text);
  ph_status st = parse_root(root, out, d);
  json_decref(root);
  if (st != PH_OK) memset(out, 0, sizeof *out); /* no half-filled config escapes */
  return st;
}

ph_status hf_config_load(const char *dir, hf_config *out, diag *d) {
  RETURN_ERROR_IF(!dir || !out, d, PH_ERR_INVALID_ARGUMENT, "hf_config_load: NULL argument");
  char path[4096];
  FORWARD_IF_ERROR(path_join(path, sizeof path, dir, "config.json", d));
  char *text = NULL;
  size_t len = 0;
  /* file_read_all's messages already name the path; parse errors get it as a prefix. */
  memset(out, 0, sizeof *out);
  FORWARD_IF_ERROR(file_read_all(path, HF_CONFIG_MAX_BYTES, &text, &len, d));
  ph_status st = hf_config_parse(text, len, out, d);
  free(text);
  if (st != PH_OK) return diag_prefix(d, "%s", path);
  return PH_OK;
}

int64_t hf_config_fixed_state_bytes(const hf_config *c, ph_dtype conv_dtype) {
  if (!c || c->geom.n_linear == 0) return 0;
  int64_t conv = c->geom.conv_dim * (c->lin.conv_kernel - 1) * (int64_t)dtype_size(conv_dtype);
  int64_t recurrent =
      c->lin.n_value_heads * c->lin.value_head_dim * c->lin.key_head_dim * (int64_t)sizeof(float);
  return c->geom.n_linear * (conv + recurrent);
}

int64_t hf_config_kv_bytes_per_token(const hf_config *c, ph_dtype kv_dtype) {
  if (!c) return 0;
  int64_t size = (int64_t)dtype_size(kv_dtype);
  if (c->family == FAMILY_DEEPSEEK)
    return c->n_layers * (c->mla.kv_lora_rank + c->mla.qk_rope_head_dim) * size;
  return c->geom.n_full * 2 * c->n_kv_heads * c->head_dim * size;
}

const char *model_family_name(model_family f) {
  switch (f) {
  case FAMILY_QWEN35:
    return "qwen3_5";
  case FAMILY_QWEN3_NEXT:
    return "qwen3_next";
  case FAMILY_DEEPSEEK:
    return "deepseek";
  }
  return "unknown";
}
