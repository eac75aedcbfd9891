/* genai_config_read — a package's genai_config.json into a genai_config. See genai_config.h and
 * docs/import.md for every key, its default and its check.
 *
 * The file is untrusted: jansson parses it (duplicate keys rejected), then each key we keep goes
 * through one typed getter that names the full key path in its error ("model.decoder.inputs.
 * past_key_names is an integer, expected a string"). Absent keys and JSON null take ONNX Runtime
 * GenAI's runtime defaults; keys we do not keep (log_id, the other search options) are ignored.
 * Only "model" and "model.type" are required: without them the file describes no model, and
 * GenAI refuses it as well.
 *
 * engine.dynamic_batching decides the layout (paged), and with it the defaults of the layout's
 * inputs: a paged config has no attention_mask and has block_table & co. state_groups are
 * checked as GenAI's config test does (abi.md §8.5): kind required, layer ids unique and in
 * range, paged_kv groups disjoint, no two bindings naming one tensor.
 */
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "graph/abi_names.h"
#include "io/genai_config.h"
#include "io/json_util.h"
#include "io/onnx.h"

#define GENAI_FILE    "genai_config.json"
/* GenAI stores sizes and token ids in C++ int. */
#define GENAI_INT_MAX 2147483647
#define PATH_BYTES    128
/* a path under one of PATH_BYTES ("...state_groups[7].bindings.state.") */
#define SUBPATH_BYTES (PATH_BYTES + 32)

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

/* An integer in [min, 2^31) (GenAI keeps sizes and ids in C++ int). */
static ph_status check_int(const scope *s, const char *key, const json_t *v, int64_t min,
                           int64_t *out, diag *d) {
  RETURN_ERROR_IF(!json_is_integer(v), d, PH_ERR_CONFIG_INVALID,
                  "%s: %s%s is %s, expected an integer", s->file, s->path, key, json_kind(v));
  json_int_t x = json_integer_value(v);
  RETURN_ERROR_IF(x < min || x > GENAI_INT_MAX, d, PH_ERR_CONFIG_INVALID,
                  "%s: %s%s = %" JSON_INTEGER_FORMAT " is outside [%" PRId64 ", 2^31)", s->file,
                  s->path, key, x, min);
  *out = (int64_t)x;
  return PH_OK;
}

static ph_status check_id(const scope *s, const char *key, const json_t *v, int64_t *out, diag *d) {
  return check_int(s, key, v, 0, out, d);
}

/* An int in [min, 2^31); def when absent. */
static ph_status get_int_min(const scope *s, const char *key, int64_t def, int64_t min,
                             int64_t *out, diag *d) {
  const json_t *v = get(s, key);
  *out = def;
  return v ? check_int(s, key, v, min, out, d) : PH_OK;
}

/* A non-negative int (GenAI's int range); def when absent. */
static ph_status get_int(const scope *s, const char *key, int64_t def, int64_t *out, diag *d) {
  return get_int_min(s, key, def, 0, out, d);
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

/* decoder.filename: the graph file, a plain name in the package directory (no directory part,
 * no "." or ".."; jansson refuses NUL bytes), so no value can name a file elsewhere;
 * models/package.c also checks that it does not resolve outside the directory through a symlink. */
static ph_status get_filename(const scope *dec, char *buf, diag *d) {
  FORWARD_IF_ERROR(get_string(dec, "filename", ONNX_MODEL_FILE, buf, GENAI_MAX_NAME, d));
  RETURN_ERROR_IF(!buf[0] || strchr(buf, '/') || strchr(buf, '\\') || strcmp(buf, ".") == 0 ||
                      strcmp(buf, "..") == 0,
                  d, PH_ERR_CONFIG_INVALID,
                  "%s: %sfilename = \"%s\": expected a plain file name in the package directory "
                  "(no path, no \"..\")",
                  dec->file, dec->path, buf);
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

/* get_template, except that def NULL leaves an absent key "" (no template). */
static ph_status get_optional_template(const scope *s, const char *key, const char *def, char *buf,
                                       diag *d) {
  if (!def && !get(s, key)) {
    buf[0] = '\0';
    return PH_OK;
  }
  return get_template(s, key, def ? def : "", buf, d);
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

/* ---- engine and session options ---------------------------------------------------------- */

/* engine.dynamic_batching: its presence makes the config paged; GenAI's runtime defaults for
 * absent keys. engine.static_batching beside it is refused, as GenAI does. */
static ph_status read_engine(const scope *top, genai_config *g, diag *d) {
  scope engine, db;
  FORWARD_IF_ERROR(get_object(top, "engine", "engine.", &engine, d));
  FORWARD_IF_ERROR(get_object(&engine, "dynamic_batching", "engine.dynamic_batching.", &db, d));
  if (!db.obj) return PH_OK;
  RETURN_ERROR_IF(get(&engine, "static_batching"), d, PH_ERR_CONFIG_INVALID,
                  "%s: engine.static_batching and engine.dynamic_batching are mutually exclusive",
                  top->file);
  genai_dynamic_batching *b = &g->dynamic_batching;
  b->present = 1;
  g->paged = 1;
  FORWARD_IF_ERROR(get_int_min(&db, "block_size", 256, 1, &b->block_size, d));
  /* PagedAttention's own rule (abi.md §1.6), which every runtime of the ABI enforces; GenAI's
   * CUDA builder further wants a multiple of 256, our CPU export writes 16 */
  const int64_t K = b->block_size;
  RETURN_ERROR_IF(K < 16 || (K & (K - 1)), d, PH_ERR_CONFIG_INVALID,
                  "%s: engine.dynamic_batching.block_size = %" PRId64
                  ": expected a power of two >= 16 (PagedAttention's page size rule)",
                  top->file, K);
  FORWARD_IF_ERROR(get_int_min(&db, "max_batch_size", 16, 1, &b->max_batch_size, d));
  FORWARD_IF_ERROR(get_int_min(&db, "num_blocks", 0, 0, &b->num_blocks, d));
  FORWARD_IF_ERROR(get_int_min(&db, "max_scheduled_tokens", 2048, 1, &b->max_scheduled_tokens, d));
  const json_t *f = get(&db, "gpu_utilization_factor");
  b->gpu_utilization_factor = 0; /* absent */
  if (!f) return PH_OK;
  RETURN_ERROR_IF(!json_is_number(f), d, PH_ERR_CONFIG_INVALID,
                  "%s: engine.dynamic_batching.gpu_utilization_factor is %s, expected a number",
                  top->file, json_kind(f));
  double x = json_number_value(f);
  RETURN_ERROR_IF(!(x > 0 && x <= 1), d, PH_ERR_CONFIG_INVALID,
                  "%s: engine.dynamic_batching.gpu_utilization_factor = %g is outside (0, 1]",
                  top->file, x);
  b->gpu_utilization_factor = x;
  return PH_OK;
}

/* session_options.provider_options: CUDA graphs are off when an entry reads {"cuda":
 * {"enable_cuda_graph": "0"}} (GenAI's provider options are strings). */
static ph_status read_provider_options(const scope *dec, genai_config *g, diag *d) {
  scope so;
  FORWARD_IF_ERROR(get_object(dec, "session_options", "model.decoder.session_options.", &so, d));
  const json_t *po = get(&so, "provider_options");
  if (!po) return PH_OK;
  RETURN_ERROR_IF(!json_is_array(po), d, PH_ERR_CONFIG_INVALID,
                  "%s: %sprovider_options is %s, expected an array", so.file, so.path,
                  json_kind(po));
  for (size_t i = 0; i < json_array_size(po); i++) {
    char path[PATH_BYTES], cuda_path[SUBPATH_BYTES];
    snprintf(path, sizeof path, "%sprovider_options[%zu].", so.path, i);
    snprintf(cuda_path, sizeof cuda_path, "%scuda.", path);
    const json_t *e = json_array_get(po, i);
    RETURN_ERROR_IF(!json_is_object(e), d, PH_ERR_CONFIG_INVALID,
                    "%s: %sprovider_options[%zu] is %s, expected an object", so.file, so.path, i,
                    json_kind(e));
    scope entry = {e, path, so.file}, cuda;
    FORWARD_IF_ERROR(get_object(&entry, "cuda", cuda_path, &cuda, d));
    const json_t *v = get(&cuda, "enable_cuda_graph");
    if (!v) continue;
    RETURN_ERROR_IF(!json_is_string(v), d, PH_ERR_CONFIG_INVALID,
                    "%s: %senable_cuda_graph is %s, expected a string (\"0\" or \"1\")", so.file,
                    cuda_path, json_kind(v));
    g->cuda_graph_disabled = strcmp(json_string_value(v), "0") == 0;
  }
  return PH_OK;
}

/* A per-group state_update (generation B; gen C's spelling is UNCONFIRMED, abi.md §8.5): a
 * capacity > 0 there is refused rather than guessed at (decoder.state_update_capacity is the
 * key this reader honours). */
static ph_status refuse_state_updates(const scope *s, const char *key, diag *d) {
  int64_t capacity;
  FORWARD_IF_ERROR(get_int(s, key, 0, &capacity, d));
  RETURN_ERROR_IF(capacity > 0, d, PH_ERR_UNSUPPORTED,
                  "%s: %s%s %" PRId64 ": per-group state updates are not supported (use "
                  "model.decoder.state_update_capacity)",
                  s->file, s->path, key, capacity);
  return PH_OK;
}

/* decoder.state_update_capacity and the four names that go with it (abi.md §8.5): capacity
 * 0..8, above 0 only in a paged config, and the names given exactly when it is above 0 (GenAI
 * would default them; a package that names one without the other is inconsistent). */
static ph_status read_state_updates(const char *file, const scope *dec, const scope *in,
                                    const scope *out, genai_config *g, diag *d) {
  int64_t cap = 0;
  FORWARD_IF_ERROR(get_int(dec, "state_update_capacity", 0, &cap, d));
  RETURN_ERROR_IF(cap > ABI_SU_MAX_CAPACITY, d, PH_ERR_CONFIG_INVALID,
                  "%s: model.decoder.state_update_capacity = %" PRId64 ": expected 0..%d", file,
                  cap, ABI_SU_MAX_CAPACITY);
  RETURN_ERROR_IF(cap > 0 && !g->paged, d, PH_ERR_CONFIG_INCONSISTENT,
                  "%s: model.decoder.state_update_capacity = %" PRId64
                  " in a dense config: compact state updates need the packed paged layout "
                  "(engine.dynamic_batching is absent)",
                  file, cap);
  g->state_update_capacity = (int32_t)cap;
  const struct {
    const scope *s;
    const char *key;
    char *buf;
    int is_template;
  } names[] = {
      {in, "state_update_capture_count", g->state_update_capture_count, 0},
      {in, "state_update_active", g->state_update_active, 0},
      {out, "state_update_conv_value_names", g->state_update_conv_value_names, 1},
      {out, "state_update_recurrent_capsule_names", g->state_update_recurrent_capsule_names, 1},
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
    const scope *s = names[i].s;
    const int given = get(s, names[i].key) != NULL;
    RETURN_ERROR_IF(given && cap == 0, d, PH_ERR_CONFIG_INCONSISTENT,
                    "%s: %s%s is given but model.decoder.state_update_capacity is 0 (absent): "
                    "the state_update names go with a capacity above 0",
                    file, s->path, names[i].key);
    RETURN_ERROR_IF(!given && cap > 0, d, PH_ERR_CONFIG_INCONSISTENT,
                    "%s: %s%s is missing; model.decoder.state_update_capacity = %" PRId64
                    " needs it",
                    file, s->path, names[i].key, cap);
    if (!given) {
      names[i].buf[0] = '\0';
    } else if (names[i].is_template) {
      FORWARD_IF_ERROR(get_template(s, names[i].key, "", names[i].buf, d));
    } else {
      FORWARD_IF_ERROR(get_string(s, names[i].key, "", names[i].buf, GENAI_MAX_NAME, d));
      RETURN_ERROR_IF(!names[i].buf[0], d, PH_ERR_CONFIG_INVALID, "%s: %s%s is empty", file,
                      s->path, names[i].key);
    }
  }
  return PH_OK;
}

/* ---- state groups ------------------------------------------------------------------------- */

/* Generation A/B (abi.md §8.5, end): {"kind": "fixed", "bindings": {"state": {"input": T}}},
 * where T is the conv or the recurrent input template and says which state the group holds. */
static ph_status fixed_kind(const scope *grp, const genai_config *g, genai_state_kind *out,
                            diag *d) {
  char b_path[SUBPATH_BYTES], s_path[SUBPATH_BYTES], input[GENAI_MAX_NAME];
  snprintf(b_path, sizeof b_path, "%sbindings.", grp->path);
  snprintf(s_path, sizeof s_path, "%sbindings.state.", grp->path);
  scope bindings, state;
  FORWARD_IF_ERROR(get_object(grp, "bindings", b_path, &bindings, d));
  FORWARD_IF_ERROR(get_object(&bindings, "state", s_path, &state, d));
  RETURN_ERROR_IF(!get(&state, "input"), d, PH_ERR_CONFIG_MISSING_FIELD,
                  "%s: %sinput is missing (a \"fixed\" group names its state by its input)",
                  grp->file, s_path);
  FORWARD_IF_ERROR(get_string(&state, "input", "", input, sizeof input, d));
  if (strcmp(input, g->past_conv_names) == 0) {
    *out = GENAI_STATE_FIXED_CONV;
  } else if (strcmp(input, g->past_recurrent_names) == 0) {
    *out = GENAI_STATE_FIXED_RECURRENT;
  } else {
    return diag_set(d, PH_ERR_CONFIG_INVALID,
                    "%s: %sinput = \"%s\" is neither past_conv_names \"%s\" nor "
                    "past_recurrent_names \"%s\"",
                    grp->file, s_path, input, g->past_conv_names, g->past_recurrent_names);
  }
  return PH_OK;
}

static ph_status group_kind(const scope *grp, const genai_config *g, genai_state_kind *out,
                            diag *d) {
  char kind[GENAI_MAX_NAME];
  RETURN_ERROR_IF(!get(grp, "kind"), d, PH_ERR_CONFIG_MISSING_FIELD,
                  "%s: %skind is missing (paged_kv, fixed_conv or fixed_recurrent)", grp->file,
                  grp->path);
  FORWARD_IF_ERROR(get_string(grp, "kind", "", kind, sizeof kind, d));
  static const genai_state_kind kinds[] = {GENAI_STATE_PAGED_KV, GENAI_STATE_FIXED_CONV,
                                           GENAI_STATE_FIXED_RECURRENT};
  for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
    if (strcmp(kind, genai_state_kind_name(kinds[i])) == 0) {
      *out = kinds[i];
      return PH_OK;
    }
  if (strcmp(kind, "fixed") == 0) return fixed_kind(grp, g, out, d);
  return diag_set(d, PH_ERR_CONFIG_INVALID,
                  "%s: %skind = \"%s\": expected paged_kv, fixed_conv or fixed_recurrent",
                  grp->file, grp->path, kind);
}

/* layer_ids: integers, unique, in [0, num_hidden_layers); absent reads as none. */
static ph_status read_layer_ids(const scope *grp, int64_t n_layers, genai_state_group *out,
                                diag *d) {
  const json_t *ids = get(grp, "layer_ids");
  out->n_layer_ids = 0;
  if (!ids) return PH_OK;
  RETURN_ERROR_IF(!json_is_array(ids), d, PH_ERR_CONFIG_INVALID,
                  "%s: %slayer_ids is %s, expected an array", grp->file, grp->path, json_kind(ids));
  size_t n = json_array_size(ids);
  RETURN_ERROR_IF(n > GENAI_MAX_LAYERS, d, PH_ERR_LIMIT,
                  "%s: %slayer_ids lists %zu layers, at most %d are supported", grp->file,
                  grp->path, n, GENAI_MAX_LAYERS);
  uint16_t first[GENAI_MAX_LAYERS] = {0}; /* 1 + the index that listed each layer, 0: none */
  for (size_t j = 0; j < n; j++) {
    const json_t *e = json_array_get(ids, j);
    RETURN_ERROR_IF(!json_is_integer(e), d, PH_ERR_CONFIG_INVALID,
                    "%s: %slayer_ids[%zu] is %s, expected an integer", grp->file, grp->path, j,
                    json_kind(e));
    json_int_t x = json_integer_value(e);
    RETURN_ERROR_IF(x < 0 || x >= n_layers, d, PH_ERR_CONFIG_INVALID,
                    "%s: %slayer_ids[%zu] = %" JSON_INTEGER_FORMAT
                    " is outside [0, num_hidden_layers = %" PRId64 ")",
                    grp->file, grp->path, j, x, n_layers);
    RETURN_ERROR_IF(x >= GENAI_MAX_LAYERS, d, PH_ERR_LIMIT,
                    "%s: %slayer_ids[%zu] = %" JSON_INTEGER_FORMAT
                    ": at most %d layers are supported",
                    grp->file, grp->path, j, x, GENAI_MAX_LAYERS);
    RETURN_ERROR_IF(first[x], d, PH_ERR_CONFIG_INVALID,
                    "%s: %slayer_ids[%zu] = %" JSON_INTEGER_FORMAT " repeats layer_ids[%d]",
                    grp->file, grp->path, j, x, first[x] - 1);
    first[x] = (uint16_t)(j + 1);
    out->layer_ids[j] = (int32_t)x;
  }
  out->n_layer_ids = (int)n;
  return PH_OK;
}

static ph_status read_group(const char *file, const json_t *v, size_t i, const genai_config *g,
                            genai_state_group *out, diag *d) {
  char path[PATH_BYTES], su_path[SUBPATH_BYTES];
  snprintf(path, sizeof path, "model.decoder.state_groups[%zu].", i);
  snprintf(su_path, sizeof su_path, "%sstate_update.", path);
  RETURN_ERROR_IF(!json_is_object(v), d, PH_ERR_CONFIG_INVALID,
                  "%s: model.decoder.state_groups[%zu] is %s, expected an object", file, i,
                  json_kind(v));
  scope grp = {v, path, file}, su;
  FORWARD_IF_ERROR(group_kind(&grp, g, &out->kind, d));
  /* a per-group state_update (generation B, and gen C's UNCONFIRMED spelling) */
  FORWARD_IF_ERROR(get_object(&grp, "state_update", su_path, &su, d));
  FORWARD_IF_ERROR(refuse_state_updates(&su, "capacity", d));
  return read_layer_ids(&grp, g->num_hidden_layers, out, d);
}

/* One layer may sit in a fixed_conv and a fixed_recurrent group, never in two paged_kv ones. */
static ph_status check_paged_overlap(const char *file, const genai_config *g, diag *d) {
  uint8_t owner[GENAI_MAX_LAYERS] = {0}; /* 1 + the paged_kv group holding each layer */
  for (int i = 0; i < g->n_state_groups; i++) {
    const genai_state_group *grp = &g->state_groups[i];
    if (grp->kind != GENAI_STATE_PAGED_KV) continue;
    for (int j = 0; j < grp->n_layer_ids; j++) {
      int32_t l = grp->layer_ids[j];
      RETURN_ERROR_IF(owner[l], d, PH_ERR_CONFIG_INVALID,
                      "%s: model.decoder.state_groups[%d].layer_ids[%d] = %d is also in "
                      "state_groups[%d]: paged_kv groups may not overlap",
                      file, i, j, (int)l, owner[l] - 1);
      owner[l] = (uint8_t)(i + 1);
    }
  }
  return PH_OK;
}

/* The templates each kind binds, inputs then outputs. */
typedef struct binding {
  genai_state_kind kind;
  const char *side; /* "inputs" | "outputs" */
  const char *key;
  char *name;
} binding;

#define N_BINDINGS 8

static void bindings_of(genai_config *g, binding b[N_BINDINGS]) {
  binding all[N_BINDINGS] = {
      {GENAI_STATE_PAGED_KV, "inputs", "past_key_names", g->past_key_names},
      {GENAI_STATE_PAGED_KV, "inputs", "past_value_names", g->past_value_names},
      {GENAI_STATE_FIXED_CONV, "inputs", "past_conv_names", g->past_conv_names},
      {GENAI_STATE_FIXED_RECURRENT, "inputs", "past_recurrent_names", g->past_recurrent_names},
      {GENAI_STATE_PAGED_KV, "outputs", "present_key_names", g->present_key_names},
      {GENAI_STATE_PAGED_KV, "outputs", "present_value_names", g->present_value_names},
      {GENAI_STATE_FIXED_CONV, "outputs", "present_conv_names", g->present_conv_names},
      {GENAI_STATE_FIXED_RECURRENT, "outputs", "present_recurrent_names",
       g->present_recurrent_names},
  };
  memcpy(b, all, sizeof all);
}

/* With state_groups, a template whose kind has no group binds nothing: when the file leaves it
 * out it stays "" instead of taking GenAI's default, so a model without linear layers reads back
 * as it was written. */
static void drop_unused_templates(const scope *in, const scope *out, genai_config *g) {
  int used[3] = {0, 0, 0};
  for (int i = 0; i < g->n_state_groups; i++) used[g->state_groups[i].kind] = 1;
  binding b[N_BINDINGS];
  bindings_of(g, b);
  for (int i = 0; i < N_BINDINGS; i++) {
    const scope *s = b[i].side[0] == 'i' ? in : out;
    if (!used[b[i].kind] && !get(s, b[i].key)) b[i].name[0] = '\0';
  }
}

/* Two bindings of one layer may not resolve to the same tensor name (e.g. past_conv_names equal
 * to past_recurrent_names while one layer has both). Templates are checked, so formatting one
 * with a layer index is safe. */
static ph_status check_bindings(const char *file, genai_config *g, diag *d) {
  uint8_t has[3][GENAI_MAX_LAYERS]; /* [kind][layer]: some group of that kind lists the layer */
  memset(has, 0, sizeof has);
  for (int i = 0; i < g->n_state_groups; i++)
    for (int j = 0; j < g->state_groups[i].n_layer_ids; j++)
      has[g->state_groups[i].kind][g->state_groups[i].layer_ids[j]] = 1;
  binding b[N_BINDINGS];
  bindings_of(g, b);
  char names[N_BINDINGS][2 * GENAI_MAX_NAME];
  for (int l = 0; l < g->num_hidden_layers && l < GENAI_MAX_LAYERS; l++) {
    for (int i = 0; i < N_BINDINGS; i++) {
      names[i][0] = '\0';
      if (has[b[i].kind][l] && b[i].name[0]) snprintf(names[i], sizeof names[i], b[i].name, l);
      for (int k = 0; names[i][0] && k < i; k++)
        RETURN_ERROR_IF(strcmp(names[i], names[k]) == 0, d, PH_ERR_CONFIG_INVALID,
                        "%s: layer %d: model.decoder.%s.%s and %s.%s both bind \"%s\"", file, l,
                        b[k].side, b[k].key, b[i].side, b[i].key, names[i]);
    }
  }
  return PH_OK;
}

static ph_status read_state_groups(const scope *dec, genai_config *g, diag *d) {
  const json_t *a = get(dec, "state_groups");
  g->n_state_groups = 0;
  if (!a) return PH_OK;
  RETURN_ERROR_IF(!json_is_array(a), d, PH_ERR_CONFIG_INVALID,
                  "%s: model.decoder.state_groups is %s, expected an array", dec->file,
                  json_kind(a));
  size_t n = json_array_size(a);
  RETURN_ERROR_IF(n > GENAI_MAX_STATE_GROUPS, d, PH_ERR_LIMIT,
                  "%s: model.decoder.state_groups lists %zu groups, at most %d are supported",
                  dec->file, n, GENAI_MAX_STATE_GROUPS);
  for (size_t i = 0; i < n; i++)
    FORWARD_IF_ERROR(read_group(dec->file, json_array_get(a, i), i, g, &g->state_groups[i], d));
  g->n_state_groups = (int)n;
  return check_paged_overlap(dec->file, g, d);
}

/* ---- the whole file ----------------------------------------------------------------------- */

/* Sizes that contradict each other within the file (the graph is checked in models/package.c):
 * token ids inside the vocabulary, query heads a multiple of key/value heads. */
static ph_status check_sizes(const char *file, const genai_config *g, diag *d) {
  const struct {
    const char *key;
    int64_t id;
  } ids[] = {{"bos_token_id", g->bos_token_id}, {"pad_token_id", g->pad_token_id}};
  for (size_t i = 0; g->vocab_size > 0 && i < sizeof ids / sizeof ids[0]; i++)
    RETURN_ERROR_IF(ids[i].id >= g->vocab_size, d, PH_ERR_CONFIG_INCONSISTENT,
                    "%s: model.%s = %" PRId64 " is outside model.vocab_size = %" PRId64, file,
                    ids[i].key, ids[i].id, g->vocab_size);
  for (int i = 0; g->vocab_size > 0 && i < g->n_eos_token_ids; i++)
    RETURN_ERROR_IF(g->eos_token_ids[i] >= g->vocab_size, d, PH_ERR_CONFIG_INCONSISTENT,
                    "%s: model.eos_token_id %" PRId64 " is outside model.vocab_size = %" PRId64,
                    file, g->eos_token_ids[i], g->vocab_size);
  RETURN_ERROR_IF(g->num_attention_heads > 0 && g->num_key_value_heads > 0 &&
                      g->num_attention_heads % g->num_key_value_heads != 0,
                  d, PH_ERR_CONFIG_INCONSISTENT,
                  "%s: model.decoder.num_attention_heads = %" PRId64
                  " is not a multiple of num_key_value_heads = %" PRId64,
                  file, g->num_attention_heads, g->num_key_value_heads);
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
  FORWARD_IF_ERROR(read_engine(&top, g, d)); /* first: the layout sets the inputs' defaults */

  FORWARD_IF_ERROR(get_object(&model, "decoder", "model.decoder.", &dec, d));
  g->has_decoder = dec.obj != NULL;
  FORWARD_IF_ERROR(get_filename(&dec, g->filename, d));
  FORWARD_IF_ERROR(read_provider_options(&dec, g, d));
  FORWARD_IF_ERROR(get_int(&dec, "head_size", 0, &g->head_size, d));
  FORWARD_IF_ERROR(get_int(&dec, "hidden_size", 0, &g->hidden_size, d));
  FORWARD_IF_ERROR(get_int(&dec, "num_attention_heads", 0, &g->num_attention_heads, d));
  FORWARD_IF_ERROR(get_int(&dec, "num_hidden_layers", 0, &g->num_hidden_layers, d));
  FORWARD_IF_ERROR(get_int(&dec, "num_key_value_heads", 0, &g->num_key_value_heads, d));

  /* keys are GenAI's config keys; an absent key means GenAI's default name, the ABI's
   * (graph/abi_names.h). The dense layout has attention_mask, the paged one block_table & co.
   * (abi.md §8.1). */
  const int pg = g->paged;
  FORWARD_IF_ERROR(get_object(&dec, "inputs", "model.decoder.inputs.", &in, d));
  /* slot_mapping (our key, docs/export.md "LATENT packages") marks the LATENT variant: its graph
   * has no position_ids, attention_metadata or value pages, so their absent keys mean none */
  FORWARD_IF_ERROR(get_string(&in, "slot_mapping", "", g->slot_mapping, GENAI_MAX_NAME, d));
  const int lat = g->slot_mapping[0] != '\0';
  RETURN_ERROR_IF(lat && !pg, d, PH_ERR_CONFIG_INVALID,
                  "%s: model.decoder.inputs.slot_mapping = \"%s\" in a dense config: slot_mapping "
                  "is an input of the packed paged layout (engine.dynamic_batching is absent)",
                  file, g->slot_mapping);
  FORWARD_IF_ERROR(get_string(&in, "input_ids", ABI_INPUT_IDS, g->input_ids, GENAI_MAX_NAME, d));
  FORWARD_IF_ERROR(get_string(&in, "attention_mask", pg ? "" : ABI_ATTENTION_MASK,
                              g->attention_mask, GENAI_MAX_NAME, d));
  FORWARD_IF_ERROR(get_string(&in, "position_ids", lat ? "" : ABI_POSITION_IDS, g->position_ids,
                              GENAI_MAX_NAME, d));
  FORWARD_IF_ERROR(
      get_string(&in, "block_table", pg ? ABI_BLOCK_TABLE : "", g->block_table, GENAI_MAX_NAME, d));
  FORWARD_IF_ERROR(get_string(&in, "cumulative_sequence_lengths", pg ? ABI_CU_SEQLENS : "",
                              g->cumulative_sequence_lengths, GENAI_MAX_NAME, d));
  FORWARD_IF_ERROR(get_string(&in, "past_sequence_lengths", pg ? ABI_PAST_SEQLENS : "",
                              g->past_sequence_lengths, GENAI_MAX_NAME, d));
  FORWARD_IF_ERROR(get_string(&in, "attention_metadata", pg && !lat ? ABI_ATTN_METADATA : "",
                              g->attention_metadata, GENAI_MAX_NAME, d));
  FORWARD_IF_ERROR(get_template(&in, "past_key_names", ABI_PAST_KEY, g->past_key_names, d));
  FORWARD_IF_ERROR(get_optional_template(&in, "past_value_names", lat ? NULL : ABI_PAST_VALUE,
                                         g->past_value_names, d));
  FORWARD_IF_ERROR(get_template(&in, "past_conv_names", ABI_PAST_CONV, g->past_conv_names, d));
  FORWARD_IF_ERROR(
      get_template(&in, "past_recurrent_names", ABI_PAST_RECURRENT, g->past_recurrent_names, d));

  FORWARD_IF_ERROR(get_object(&dec, "outputs", "model.decoder.outputs.", &out, d));
  FORWARD_IF_ERROR(get_string(&out, "logits", ABI_LOGITS, g->logits, GENAI_MAX_NAME, d));
  FORWARD_IF_ERROR(
      get_template(&out, "present_key_names", ABI_PRESENT_KEY, g->present_key_names, d));
  FORWARD_IF_ERROR(get_optional_template(
      &out, "present_value_names", lat ? NULL : ABI_PRESENT_VALUE, g->present_value_names, d));
  /* a LATENT config names both value templates (SEPARATE pages written through slot_mapping)
   * or neither (key pages only) */
  RETURN_ERROR_IF(
      lat && !g->past_value_names[0] != !g->present_value_names[0], d, PH_ERR_CONFIG_INCONSISTENT,
      "%s: model.decoder.%s is given but %s is not; paged_kv layers have value pages "
      "through both or through neither (LATENT: key pages only)",
      file, g->past_value_names[0] ? "inputs.past_value_names" : "outputs.present_value_names",
      g->past_value_names[0] ? "outputs.present_value_names" : "inputs.past_value_names");
  FORWARD_IF_ERROR(
      get_template(&out, "present_conv_names", ABI_PRESENT_CONV, g->present_conv_names, d));
  FORWARD_IF_ERROR(get_template(&out, "present_recurrent_names", ABI_PRESENT_RECURRENT,
                                g->present_recurrent_names, d));

  FORWARD_IF_ERROR(read_state_updates(file, &dec, &in, &out, g, d));
  FORWARD_IF_ERROR(
      read_state_groups(&dec, g, d)); /* after the templates: generation A needs them */
  if (g->n_state_groups > 0) {
    drop_unused_templates(&in, &out, g);
    FORWARD_IF_ERROR(check_bindings(file, g, d));
  }

  FORWARD_IF_ERROR(check_sizes(file, g, d));
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
