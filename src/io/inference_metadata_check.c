/* inference_metadata_check — inference_metadata.json read back against a graph and its
 * genai_config: the parsed document walked key by key, each value compared with the graph and
 * genai_config directly (the table, inference_metadata_abi.h, says which graph I/O is which),
 * every error naming the key path with what was expected and what was found. Unknown keys are
 * refused, as the format's readers do. See inference_metadata.h.
 */
#include "io/inference_metadata.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "io/inference_metadata_abi.h"
#include "io/json_util.h"

#define MD_PATH_BYTES 256

/* ---- the table's names only reading needs ---------------------------------------------------- */

/* The tensor dtypes the format can name (onnx-genai's validation.rs), spellings included. */
static int dtype_known(const char *s) {
  static const char *const names[] = {
      "float16",    "fp16",        "float32",  "fp32",        "bfloat16", "bf16",   "float8_e4m3fn",
      "fp8_e4m3fn", "float8_e4m3", "fp8_e4m3", "float8_e5m2", "fp8_e5m2", "int8",   "int16",
      "int32",      "int64",       "uint8",    "uint16",      "uint32",   "uint64", "bool"};
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (strcmp(s, names[i]) == 0) return 1;
  return 0;
}

/* The format's short spellings read as the names we write (onnx-genai normalizes the same). */
static const char *dtype_canonical(const char *s) {
  return strcmp(s, "fp32") == 0   ? "float32"
         : strcmp(s, "fp16") == 0 ? "float16"
         : strcmp(s, "bf16") == 0 ? "bfloat16"
                                  : s;
}

/* tmpl with its %d replaced by layer ("" when tmpl has no %d). */
static const char *template_name(const char *tmpl, int layer, char *buf, size_t n) {
  const char *p = strstr(tmpl, "%d");
  if (!p) {
    buf[0] = '\0';
    return buf;
  }
  snprintf(buf, n, "%.*s%d%s", (int)(p - tmpl), tmpl, layer, p + 2);
  return buf;
}

/* The table's input (is_output 0) or output called name, NULL if none. */
static const md_io *find_io_named(const md_abi *a, const char *name, int is_output) {
  for (int i = 0; i < a->n_io; i++)
    if (a->io[i].is_output == is_output && strcmp(md_io_value(a, &a->io[i])->name, name) == 0)
      return &a->io[i];
  return NULL;
}

/* ---- the document, key by key ---------------------------------------------------------------- */

/* parent.key, or parent["key"] when the key holds a '.' (tensor names). */
static const char *key_path(char *buf, size_t n, const char *parent, const char *key) {
  if (strchr(key, '.'))
    snprintf(buf, n, "%s[\"%s\"]", parent, key);
  else
    snprintf(buf, n, "%s%s%s", parent, parent[0] ? "." : "", key);
  return buf;
}

static int type_is(const json_t *v, json_type t) {
  return t == JSON_TRUE ? json_is_boolean(v) : json_typeof(v) == t;
}

/* obj[key] of the given type (JSON_TRUE: a boolean). */
static ph_status member(const json_t *obj, const char *path, const char *key, json_type t,
                        json_t **out, diag *d) {
  char p[MD_PATH_BYTES];
  json_t *v = json_object_get(obj, key);
  *out = NULL;
  RETURN_ERROR_IF(!v, d, PH_ERR_CONFIG_MISSING_FIELD, "%s is missing",
                  key_path(p, sizeof p, path, key));
  RETURN_ERROR_IF(!type_is(v, t), d, PH_ERR_CONFIG_INVALID, "%s is %s, expected %s",
                  key_path(p, sizeof p, path, key), json_kind(v), json_type_kind(t));
  *out = v;
  return PH_OK;
}

static ph_status expect_str(const json_t *obj, const char *path, const char *key, const char *want,
                            const char *why, diag *d) {
  char p[MD_PATH_BYTES];
  json_t *v;
  FORWARD_IF_ERROR(member(obj, path, key, JSON_STRING, &v, d));
  RETURN_ERROR_IF(strcmp(json_string_value(v), want) != 0, d, PH_ERR_CONFIG_INCONSISTENT,
                  "%s: expected \"%s\"%s%s, found \"%s\"", key_path(p, sizeof p, path, key), want,
                  why ? " " : "", why ? why : "", json_string_value(v));
  return PH_OK;
}

static ph_status expect_int(const json_t *obj, const char *path, const char *key, int64_t want,
                            const char *why, diag *d) {
  char p[MD_PATH_BYTES];
  json_t *v;
  FORWARD_IF_ERROR(member(obj, path, key, JSON_INTEGER, &v, d));
  RETURN_ERROR_IF(json_integer_value(v) != want, d, PH_ERR_CONFIG_INCONSISTENT,
                  "%s: expected %lld%s%s, found %lld", key_path(p, sizeof p, path, key),
                  (long long)want, why ? " " : "", why ? why : "",
                  (long long)json_integer_value(v));
  return PH_OK;
}

/* obj has no key outside allowed (the format's readers deny unknown fields). */
static ph_status only_keys(const json_t *obj, const char *path, const char *const *allowed,
                           diag *d) {
  const char *key;
  json_t *v;
  char p[MD_PATH_BYTES];
  json_object_foreach((json_t *)obj, key, v) {
    int known = 0;
    for (int i = 0; allowed[i] && !known; i++) known = strcmp(allowed[i], key) == 0;
    RETURN_ERROR_IF(!known, d, PH_ERR_CONFIG_INVALID, "%s is not a key of this object",
                    key_path(p, sizeof p, path, key));
  }
  return PH_OK;
}

/* A map of strings compared with the expected one: an extra key first (a renamed entry reads as
 * what it is), then each expected key and value. what says what the keys are. */
static ph_status expect_string_map(const json_t *obj, const char *path, const json_t *want,
                                   const char *what, diag *d) {
  const char *key;
  json_t *v;
  char p[MD_PATH_BYTES];
  RETURN_ERROR_IF(!json_is_object(obj), d, PH_ERR_CONFIG_INVALID, "%s is %s, expected an object",
                  path, json_kind(obj));
  json_object_foreach((json_t *)obj, key, v) {
    RETURN_ERROR_IF(!json_object_get(want, key), d, PH_ERR_CONFIG_INCONSISTENT,
                    "%s: \"%s\" is not %s", key_path(p, sizeof p, path, key), key, what);
  }
  json_object_foreach((json_t *)want, key, v) {
    FORWARD_IF_ERROR(expect_str(obj, path, key, json_string_value(v), NULL, d));
  }
  return PH_OK;
}

static ph_status expect_layout(const json_t *c, const char *path, const md_abi *a, const md_io *io,
                               diag *d) {
  static const char *const names[] = {"shared", "request_aligned", "token_packed",
                                      "runtime_sequence_state", "request_expanded"};
  char p[MD_PATH_BYTES], buf[MD_NAME_BYTES];
  const char *want = names[io->layout];
  json_t *bl = json_object_get(c, "batch_layout"), *kind;
  if (!bl && io->layout == MD_SHARED) return PH_OK;
  key_path(p, sizeof p, path, "batch_layout");
  RETURN_ERROR_IF(!bl, d, PH_ERR_CONFIG_MISSING_FIELD,
                  "%s is missing (expected %s: the dims of %s)", p, want, md_io_value(a, io)->name);
  RETURN_ERROR_IF(!json_is_object(bl), d, PH_ERR_CONFIG_INVALID, "%s is %s, expected an object", p,
                  json_kind(bl));
  FORWARD_IF_ERROR(member(bl, p, "kind", JSON_STRING, &kind, d));
  const char *found = json_string_value(kind);
  int known = 0;
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) known |= strcmp(found, names[i]) == 0;
  RETURN_ERROR_IF(!known, d, PH_ERR_CONFIG_INVALID, "%s.kind \"%s\" is not a batch layout", p,
                  found);
  RETURN_ERROR_IF(strcmp(found, want) != 0, d, PH_ERR_CONFIG_INCONSISTENT,
                  "%s.kind: expected \"%s\" (the dims of %s), found \"%s\"", p, want,
                  md_io_value(a, io)->name, found);
  static const char *const k_kind[] = {"kind", NULL}, *const k_axis[] = {"kind", "axis", NULL},
                           *const k_packed[] = {"kind", "offsets", "owner", "axis", NULL};
  switch (io->layout) {
  case MD_SHARED:
  case MD_RUNTIME_STATE:
    return only_keys(bl, p, k_kind, d);
  case MD_REQUEST_ALIGNED:
    FORWARD_IF_ERROR(only_keys(bl, p, k_axis, d));
    return expect_int(bl, p, "axis", io->axis, "(the batch dim)", d);
  case MD_TOKEN_PACKED: {
    FORWARD_IF_ERROR(only_keys(bl, p, k_packed, d));
    const char *cu = md_prefixed(MD_REQUEST, a->gc->cumulative_sequence_lengths, buf, sizeof buf);
    FORWARD_IF_ERROR(expect_str(bl, p, "offsets", cu, NULL, d));
    FORWARD_IF_ERROR(expect_str(bl, p, "owner", cu, NULL, d));
    return expect_int(bl, p, "axis", io->axis, "(the packed-token dim)", d);
  }
  }
  return PH_OK;
}

/* A tensor contract against the graph's input or output: dtype, rank, shape, batch layout. */
static ph_status expect_contract(const json_t *c, const char *path, const md_abi *a,
                                 const md_io *io, diag *d) {
  static const char *const keys[] = {"dtype", "rank", "shape", "batch_layout", "optional", NULL};
  const gvalue *v = md_io_value(a, io);
  const char *what = io->is_output ? "output" : "input";
  char p[MD_PATH_BYTES], buf[MD_NAME_BYTES];
  json_t *dt, *dims_j, *opt;
  RETURN_ERROR_IF(!json_is_object(c), d, PH_ERR_CONFIG_INVALID, "%s is %s, expected an object",
                  path, json_kind(c));
  FORWARD_IF_ERROR(only_keys(c, path, keys, d));
  FORWARD_IF_ERROR(member(c, path, "dtype", JSON_STRING, &dt, d));
  const char *want = md_dtype_json_name(v->type.dtype), *found = json_string_value(dt);
  RETURN_ERROR_IF(!dtype_known(found), d, PH_ERR_CONFIG_INVALID,
                  "%s.dtype \"%s\" is not a tensor dtype of the format", path, found);
  RETURN_ERROR_IF(strcmp(dtype_canonical(found), want) != 0, d, PH_ERR_CONFIG_INCONSISTENT,
                  "%s.dtype: expected \"%s\" (graph %s %s is %s), found \"%s\"", path, want, what,
                  v->name, ph_dtype_name(v->type.dtype), found);
  snprintf(buf, sizeof buf, "(the rank of graph %s %s)", what, v->name);
  FORWARD_IF_ERROR(expect_int(c, path, "rank", v->type.rank, buf, d));
  FORWARD_IF_ERROR(member(c, path, "shape", JSON_ARRAY, &dims_j, d));
  RETURN_ERROR_IF((int)json_array_size(dims_j) != v->type.rank, d, PH_ERR_CONFIG_INCONSISTENT,
                  "%s.shape has %zu dims, graph %s %s has %d", path, json_array_size(dims_j), what,
                  v->name, v->type.rank);
  for (int k = 0; k < v->type.rank; k++) {
    const json_t *dim = json_array_get(dims_j, (size_t)k);
    const char *sym = md_dim_symbol(a->g, v, k, buf, sizeof buf);
    snprintf(p, sizeof p, "%s.shape[%d]", path, k);
    RETURN_ERROR_IF(!json_is_integer(dim) && !json_is_string(dim), d, PH_ERR_CONFIG_INVALID,
                    "%s is %s, expected a number or a symbol", p, json_kind(dim));
    if (sym)
      RETURN_ERROR_IF(!json_is_string(dim) || strcmp(json_string_value(dim), sym) != 0, d,
                      PH_ERR_CONFIG_INCONSISTENT,
                      "%s: expected \"%s\" (dim %d of graph %s %s), found %s%s%s", p, sym, k, what,
                      v->name, json_is_string(dim) ? "\"" : "",
                      json_is_string(dim) ? json_string_value(dim) : "a number",
                      json_is_string(dim) ? "\"" : "");
    else
      RETURN_ERROR_IF(!json_is_integer(dim) || json_integer_value(dim) != v->type.dims[k], d,
                      PH_ERR_CONFIG_INCONSISTENT,
                      "%s: expected %lld (dim %d of graph %s %s), found %s%lld", p,
                      (long long)v->type.dims[k], k, what, v->name,
                      json_is_integer(dim) ? "" : "a symbol instead of ",
                      json_is_integer(dim) ? (long long)json_integer_value(dim) : 0LL);
  }
  if ((opt = json_object_get(c, "optional")) != NULL)
    RETURN_ERROR_IF(!json_is_false(opt), d, PH_ERR_CONFIG_INCONSISTENT,
                    "%s.optional: graph %s %s is required", path, what, v->name);
  return expect_layout(c, path, a, io, d);
}

/* A map of contracts (ports.inputs / ports.outputs) keyed by the graph's input or output names:
 * exactly those, each with its graph contract. */
static ph_status expect_ports(const json_t *map, const char *path, const md_abi *a, int is_output,
                              diag *d) {
  const char *key;
  json_t *v;
  char p[MD_PATH_BYTES];
  json_object_foreach((json_t *)map, key, v) {
    RETURN_ERROR_IF(!find_io_named(a, key, is_output), d, PH_ERR_CONFIG_INCONSISTENT,
                    "%s: the graph has no %s \"%s\"", key_path(p, sizeof p, path, key),
                    is_output ? "output" : "input", key);
  }
  for (int i = 0; i < a->n_io; i++) {
    if (a->io[i].is_output != is_output) continue;
    const char *name = md_io_value(a, &a->io[i])->name;
    json_t *c = json_object_get(map, name);
    key_path(p, sizeof p, path, name);
    RETURN_ERROR_IF(!c, d, PH_ERR_CONFIG_MISSING_FIELD, "%s is missing (a graph %s)", p,
                    is_output ? "output" : "input");
    FORWARD_IF_ERROR(expect_contract(c, p, a, &a->io[i], d));
  }
  return PH_OK;
}

static ph_status check_model(const json_t *root, const md_abi *a, diag *d) {
  const genai_config *gc = a->gc;
  json_t *m, *att;
  FORWARD_IF_ERROR(member(root, "", "model", JSON_OBJECT, &m, d));
  FORWARD_IF_ERROR(member(m, "model", "attention", JSON_OBJECT, &att, d));
  FORWARD_IF_ERROR(expect_str(att, "model.attention", "type", md_attention_type(a),
                              a->latent ? "(LATENT pages: the MLA latent row)" : NULL, d));
  FORWARD_IF_ERROR(expect_int(att, "model.attention", "num_kv_heads", gc->num_key_value_heads,
                              "(genai_config num_key_value_heads)", d));
  FORWARD_IF_ERROR(expect_int(att, "model.attention", "num_attention_heads",
                              gc->num_attention_heads, "(genai_config num_attention_heads)", d));
  FORWARD_IF_ERROR(
      expect_int(att, "model.attention", "head_dim", gc->head_size, "(genai_config head_size)", d));
  FORWARD_IF_ERROR(expect_int(m, "model", "max_sequence_length", gc->context_length,
                              "(genai_config context_length)", d));
  return expect_int(m, "model", "vocab_size", gc->vocab_size, "(genai_config vocab_size)", d);
}

/* The KV layers' four bindings and the control slots, from genai_config's names. */
static json_t *paged_bindings_want(const md_abi *a) {
  const genai_config *gc = a->gc;
  char key[MD_NAME_BYTES], name[MD_NAME_BYTES];
  json_t *w = json_object();
  const char *controls[][2] = {{"block_table", gc->block_table},
                               {"cumulative_sequence_length", gc->cumulative_sequence_lengths},
                               {"past_seqlens", gc->past_sequence_lengths},
                               {"attention_metadata", gc->attention_metadata},
                               {"slot_mapping", gc->slot_mapping}};
  for (size_t i = 0; i < sizeof controls / sizeof controls[0]; i++)
    if (controls[i][1][0]) json_object_set_new(w, controls[i][0], json_string(controls[i][1]));
  const char *tmpl[4] = {gc->past_key_names, gc->past_value_names, gc->present_key_names,
                         gc->present_value_names};
  static const char *const slot[4] = {"key_cache", "value_cache", "key_cache_out",
                                      "value_cache_out"};
  for (int l = 0; l < a->kv.n; l++)
    for (int k = 0; k < 4; k++) {
      if (a->latent && (k == 1 || k == 3)) continue; /* LATENT: key pages only */
      snprintf(key, sizeof key, "layer.%d.%s", (int)a->kv.id[l], slot[k]);
      json_object_set_new(w, key,
                          json_string(template_name(tmpl[k], a->kv.id[l], name, sizeof name)));
    }
  return w;
}

static ph_status check_paged_contract(const json_t *c, const char *path, const md_abi *a, diag *d) {
  static const char *const keys[] = {"id", "version", "bindings", "parameters", NULL},
                           *const pkeys[] = {"block_size", "aliasing", MD_PARAM_KV_LAYOUT, NULL};
  char p[MD_PATH_BYTES], ids[600], what[700];
  json_t *b, *prm;
  RETURN_ERROR_IF(!json_is_object(c), d, PH_ERR_CONFIG_INVALID, "%s is %s, expected an object",
                  path, json_kind(c));
  FORWARD_IF_ERROR(only_keys(c, path, keys, d));
  FORWARD_IF_ERROR(expect_str(c, path, "id", INFERENCE_METADATA_PAGED_KV_CONTRACT, NULL, d));
  FORWARD_IF_ERROR(expect_str(c, path, "version", MD_CONTRACT_VERSION, NULL, d));
  FORWARD_IF_ERROR(member(c, path, "bindings", JSON_OBJECT, &b, d));
  md_layers_format(&a->kv, ids, sizeof ids);
  snprintf(what, sizeof what,
           "a PagedAttention slot of the graph or of genai_config's paged_kv layers %s", ids);
  json_t *want = paged_bindings_want(a);
  RETURN_ERROR_IF(!want, d, PH_ERR_NO_MEMORY, "out of memory checking %s", path);
  ph_status s = expect_string_map(b, key_path(p, sizeof p, path, "bindings"), want, what, d);
  json_decref(want);
  FORWARD_IF_ERROR(s);
  FORWARD_IF_ERROR(member(c, path, "parameters", JSON_OBJECT, &prm, d));
  key_path(p, sizeof p, path, "parameters");
  FORWARD_IF_ERROR(only_keys(prm, p, pkeys, d));
  FORWARD_IF_ERROR(expect_int(prm, p, "block_size", a->gc->dynamic_batching.block_size,
                              "(genai_config engine.dynamic_batching.block_size)", d));
  FORWARD_IF_ERROR(
      expect_str(prm, p, "aliasing", "required", "(PagedAttention writes the pages in place)", d));
  /* LATENT must say so; SEPARATE may (absent means PagedAttention's default, SEPARATE) */
  if (a->latent || json_object_get(prm, MD_PARAM_KV_LAYOUT))
    FORWARD_IF_ERROR(expect_str(prm, p, MD_PARAM_KV_LAYOUT,
                                a->latent ? MD_KV_LAYOUT_LATENT : MD_KV_LAYOUT_SEPARATE,
                                a->latent ? "(genai_config names slot_mapping and no value pages)"
                                          : "(genai_config names value pages)",
                                d));
  return PH_OK;
}

static ph_status check_component(const json_t *wf, const md_abi *a, diag *d) {
  static const char *const ckeys[] = {"implementation", "ports", "contract", NULL},
                           *const ikeys[] = {"kind", "artifact", NULL},
                           *const pkeys[] = {"inputs", "outputs", "roles", NULL};
  const char *key;
  json_t *comps, *dec, *impl, *ports, *map, *v;
  const char *P = "pipeline.workflow.components", *D = "pipeline.workflow.components.decoder";
  FORWARD_IF_ERROR(member(wf, "pipeline.workflow", "components", JSON_OBJECT, &comps, d));
  json_object_foreach(comps, key, v) {
    RETURN_ERROR_IF(strcmp(key, MD_COMPONENT) != 0, d, PH_ERR_CONFIG_INCONSISTENT,
                    "%s.%s: the package has one graph, component \"" MD_COMPONENT "\"", P, key);
  }
  FORWARD_IF_ERROR(member(comps, P, MD_COMPONENT, JSON_OBJECT, &dec, d));
  FORWARD_IF_ERROR(only_keys(dec, D, ckeys, d));
  FORWARD_IF_ERROR(member(dec, D, "implementation", JSON_OBJECT, &impl, d));
  FORWARD_IF_ERROR(
      only_keys(impl, "pipeline.workflow.components.decoder.implementation", ikeys, d));
  FORWARD_IF_ERROR(expect_str(impl, "pipeline.workflow.components.decoder.implementation", "kind",
                              "onnx", NULL, d));
  FORWARD_IF_ERROR(expect_str(impl, "pipeline.workflow.components.decoder.implementation",
                              "artifact", a->gc->filename, "(genai_config decoder.filename)", d));
  FORWARD_IF_ERROR(member(dec, D, "ports", JSON_OBJECT, &ports, d));
  const char *PP = "pipeline.workflow.components.decoder.ports";
  FORWARD_IF_ERROR(only_keys(ports, PP, pkeys, d));
  FORWARD_IF_ERROR(member(ports, PP, "inputs", JSON_OBJECT, &map, d));
  FORWARD_IF_ERROR(expect_ports(map, "pipeline.workflow.components.decoder.ports.inputs", a, 0, d));
  FORWARD_IF_ERROR(member(ports, PP, "outputs", JSON_OBJECT, &map, d));
  FORWARD_IF_ERROR(
      expect_ports(map, "pipeline.workflow.components.decoder.ports.outputs", a, 1, d));
  FORWARD_IF_ERROR(member(ports, PP, "roles", JSON_OBJECT, &map, d));
  json_t *want = json_object();
  const char *roles[][2] = {{a->gc->input_ids, "token_ids"},
                            {a->gc->position_ids, "position_ids"},
                            {a->gc->attention_mask, "attention_mask"},
                            {a->gc->logits, "logits"}};
  for (size_t i = 0; want && i < sizeof roles / sizeof roles[0]; i++)
    if (roles[i][0][0] && graph_find_value(a->g, roles[i][0]) >= 0)
      json_object_set_new(want, roles[i][0], json_string(roles[i][1]));
  RETURN_ERROR_IF(!want, d, PH_ERR_NO_MEMORY, "out of memory checking %s", PP);
  ph_status s = expect_string_map(map, "pipeline.workflow.components.decoder.ports.roles", want,
                                  "a port genai_config gives a role", d);
  json_decref(want);
  FORWARD_IF_ERROR(s);
  json_t *c = json_object_get(dec, "contract");
  if (a->paged && a->kv.n > 0) {
    RETURN_ERROR_IF(!c, d, PH_ERR_CONFIG_MISSING_FIELD,
                    "%s.contract is missing (the paged KV of layers "
                    "%d..., " INFERENCE_METADATA_PAGED_KV_CONTRACT ")",
                    D, (int)a->kv.id[0]);
    return check_paged_contract(c, "pipeline.workflow.components.decoder.contract", a, d);
  }
  RETURN_ERROR_IF(c, d, PH_ERR_CONFIG_INCONSISTENT, "%s.contract: the graph has no paged KV", D);
  return PH_OK;
}

static ph_status expect_source(const json_t *in, const char *path, const char *kind,
                               const char *name, diag *d) {
  static const char *const keys[] = {"kind", "name", NULL};
  char p[MD_PATH_BYTES];
  json_t *src;
  FORWARD_IF_ERROR(member(in, path, "source", JSON_OBJECT, &src, d));
  key_path(p, sizeof p, path, "source");
  FORWARD_IF_ERROR(only_keys(src, p, keys, d));
  FORWARD_IF_ERROR(expect_str(src, p, "kind", kind, NULL, d));
  if (name) return expect_str(src, p, "name", name, NULL, d);
  RETURN_ERROR_IF(json_object_get(src, "name"), d, PH_ERR_CONFIG_INCONSISTENT,
                  "%s.name: a request source has no name", p);
  return PH_OK;
}

static ph_status expect_role(const json_t *in, const char *path, int runtime, diag *d) {
  static const char *const okeys[] = {"kind", NULL}, *const rkeys[] = {"kind", "version", "role",
                                                                       NULL};
  char p[MD_PATH_BYTES];
  json_t *role;
  FORWARD_IF_ERROR(member(in, path, "role", JSON_OBJECT, &role, d));
  key_path(p, sizeof p, path, "role");
  FORWARD_IF_ERROR(only_keys(role, p, runtime ? rkeys : okeys, d));
  if (!runtime) return expect_str(role, p, "kind", "opaque", NULL, d);
  FORWARD_IF_ERROR(expect_str(role, p, "kind", "runtime", NULL, d));
  FORWARD_IF_ERROR(expect_str(role, p, "version", "1.0", NULL, d));
  return expect_str(role, p, "role", "prompt_tokens", NULL, d);
}

static ph_status expect_required(const json_t *in, const char *path, diag *d) {
  json_t *r = json_object_get(in, "required");
  RETURN_ERROR_IF(r && !json_is_true(r), d, PH_ERR_CONFIG_INCONSISTENT,
                  "%s.required: every graph input and serving control is required", path);
  return PH_OK;
}

static ph_status check_serving_input(const json_t *in, const char *path, const md_abi *a, int i,
                                     diag *d) {
  static const char *const keys[] = {"contract", "role", "source", "required", NULL},
                           *const ckeys[] = {"dtype", "rank", "shape", "batch_layout", NULL};
  char p[MD_PATH_BYTES];
  json_t *c, *dims_j, *bl;
  RETURN_ERROR_IF(!json_is_object(in), d, PH_ERR_CONFIG_INVALID, "%s is %s, expected an object",
                  path, json_kind(in));
  FORWARD_IF_ERROR(only_keys(in, path, keys, d));
  FORWARD_IF_ERROR(member(in, path, "contract", JSON_OBJECT, &c, d));
  key_path(p, sizeof p, path, "contract");
  FORWARD_IF_ERROR(only_keys(c, p, ckeys, d));
  FORWARD_IF_ERROR(expect_str(c, p, "dtype", md_serving_inputs[i].dtype, NULL, d));
  FORWARD_IF_ERROR(expect_int(c, p, "rank", 1, NULL, d));
  FORWARD_IF_ERROR(member(c, p, "shape", JSON_ARRAY, &dims_j, d));
  RETURN_ERROR_IF(json_array_size(dims_j) != 1 || !json_is_string(json_array_get(dims_j, 0)) ||
                      strcmp(json_string_value(json_array_get(dims_j, 0)), a->batch_sym) != 0,
                  d, PH_ERR_CONFIG_INCONSISTENT, "%s.shape: expected [\"%s\"] (the batch dim)", p,
                  a->batch_sym);
  FORWARD_IF_ERROR(member(c, p, "batch_layout", JSON_OBJECT, &bl, d));
  char bp[MD_PATH_BYTES];
  key_path(bp, sizeof bp, p, "batch_layout");
  FORWARD_IF_ERROR(expect_str(bl, bp, "kind", "request_aligned", NULL, d));
  FORWARD_IF_ERROR(expect_int(bl, bp, "axis", 0, NULL, d));
  FORWARD_IF_ERROR(expect_role(in, path, 0, d));
  FORWARD_IF_ERROR(expect_source(in, path, "application", md_serving_inputs[i].app_name, d));
  return expect_required(in, path, d);
}

static ph_status check_inputs(const json_t *wf, const md_abi *a, diag *d) {
  static const char *const keys[] = {"contract", "role", "source", "required", NULL};
  const char *P = "pipeline.workflow.inputs", *key;
  char p[MD_PATH_BYTES], buf[MD_NAME_BYTES];
  json_t *ins, *v;
  FORWARD_IF_ERROR(member(wf, "pipeline.workflow", "inputs", JSON_OBJECT, &ins, d));
  json_object_foreach(ins, key, v) {
    int known = 0;
    for (int i = 0; a->serving && i < MD_N_SERVING_INPUTS; i++)
      known |= strcmp(key, md_serving_inputs[i].name) == 0;
    known |= strncmp(key, MD_REQUEST, strlen(MD_REQUEST)) == 0 &&
             find_io_named(a, key + strlen(MD_REQUEST), 0) != NULL;
    RETURN_ERROR_IF(!known, d, PH_ERR_CONFIG_INCONSISTENT,
                    "%s: neither \"" MD_REQUEST "\" + a graph input nor a serving control",
                    key_path(p, sizeof p, P, key));
  }
  for (int i = 0; a->serving && i < MD_N_SERVING_INPUTS; i++) {
    json_t *in = json_object_get(ins, md_serving_inputs[i].name);
    key_path(p, sizeof p, P, md_serving_inputs[i].name);
    RETURN_ERROR_IF(!in, d, PH_ERR_CONFIG_MISSING_FIELD, "%s is missing (a serving control)", p);
    FORWARD_IF_ERROR(check_serving_input(in, p, a, i, d));
  }
  for (int i = 0; i < a->n_io; i++) {
    const md_io *io = &a->io[i];
    if (io->is_output) continue;
    const char *name = md_io_value(a, io)->name;
    json_t *in = json_object_get(ins, md_prefixed(MD_REQUEST, name, buf, sizeof buf));
    key_path(p, sizeof p, P, buf);
    RETURN_ERROR_IF(!in, d, PH_ERR_CONFIG_MISSING_FIELD, "%s is missing (graph input %s)", p, name);
    RETURN_ERROR_IF(!json_is_object(in), d, PH_ERR_CONFIG_INVALID, "%s is %s, expected an object",
                    p, json_kind(in));
    FORWARD_IF_ERROR(only_keys(in, p, keys, d));
    char cp[MD_PATH_BYTES];
    json_t *c;
    FORWARD_IF_ERROR(member(in, p, "contract", JSON_OBJECT, &c, d));
    FORWARD_IF_ERROR(expect_contract(c, key_path(cp, sizeof cp, p, "contract"), a, io, d));
    FORWARD_IF_ERROR(expect_role(in, p, io->kind == MD_TOKENS, d));
    FORWARD_IF_ERROR(expect_source(in, p, io->kind == MD_TOKENS ? "request" : "application",
                                   io->kind == MD_TOKENS ? NULL : name, d));
    FORWARD_IF_ERROR(expect_required(in, p, d));
  }
  return PH_OK;
}

static ph_status check_outputs(const json_t *wf, const md_abi *a, diag *d) {
  static const char *const keys[] = {"contract", "role", "stage", NULL};
  const char *P = "pipeline.workflow.outputs", *key;
  char p[MD_PATH_BYTES];
  json_t *outs, *o, *c;
  FORWARD_IF_ERROR(member(wf, "pipeline.workflow", "outputs", JSON_OBJECT, &outs, d));
  json_object_foreach(outs, key, o) {
    RETURN_ERROR_IF(strcmp(key, MD_LOGITS_OUTPUT) != 0, d, PH_ERR_CONFIG_INCONSISTENT,
                    "%s: the package's one output is \"" MD_LOGITS_OUTPUT "\"",
                    key_path(p, sizeof p, P, key));
  }
  FORWARD_IF_ERROR(member(outs, P, MD_LOGITS_OUTPUT, JSON_OBJECT, &o, d));
  const char *O = "pipeline.workflow.outputs.logits";
  FORWARD_IF_ERROR(only_keys(o, O, keys, d));
  FORWARD_IF_ERROR(member(o, O, "contract", JSON_OBJECT, &c, d));
  FORWARD_IF_ERROR(expect_contract(c, "pipeline.workflow.outputs.logits.contract", a,
                                   md_find_io(a, MD_LOGITS, -1, 1), d));
  FORWARD_IF_ERROR(expect_str(o, O, "role", "tensor", NULL, d));
  return expect_str(o, O, "stage", "pre_adapter", NULL, d);
}

static ph_status check_steps(const json_t *wf, const md_abi *a, diag *d) {
  static const char *const ikeys[] = {"kind", "component", "inputs", "outputs", NULL},
                           *const ekeys[] = {"kind", "value", "output", "mode", NULL};
  char buf[MD_NAME_BYTES];
  json_t *steps, *map;
  FORWARD_IF_ERROR(member(wf, "pipeline.workflow", "steps", JSON_ARRAY, &steps, d));
  RETURN_ERROR_IF(json_array_size(steps) != 2, d, PH_ERR_CONFIG_INCONSISTENT,
                  "pipeline.workflow.steps has %zu steps, expected 2 (invoke the decoder, emit "
                  "its logits)",
                  json_array_size(steps));
  const json_t *inv = json_array_get(steps, 0), *emit = json_array_get(steps, 1);
  const char *I = "pipeline.workflow.steps[0]", *E = "pipeline.workflow.steps[1]";
  RETURN_ERROR_IF(!json_is_object(inv) || !json_is_object(emit), d, PH_ERR_CONFIG_INVALID,
                  "pipeline.workflow.steps: expected two objects");
  FORWARD_IF_ERROR(only_keys(inv, I, ikeys, d));
  FORWARD_IF_ERROR(expect_str(inv, I, "kind", "invoke", NULL, d));
  FORWARD_IF_ERROR(expect_str(inv, I, "component", MD_COMPONENT, NULL, d));
  for (int out = 0; out < 2; out++) {
    json_t *want = json_object();
    for (int i = 0; want && i < a->n_io; i++) {
      if (a->io[i].is_output != out) continue;
      const char *name = md_io_value(a, &a->io[i])->name;
      json_object_set_new(
          want, name, json_string(md_prefixed(out ? MD_STEP : MD_REQUEST, name, buf, sizeof buf)));
    }
    RETURN_ERROR_IF(!want, d, PH_ERR_NO_MEMORY, "out of memory checking %s", I);
    ph_status s = member(inv, I, out ? "outputs" : "inputs", JSON_OBJECT, &map, d);
    if (s == PH_OK)
      s = expect_string_map(
          map, out ? "pipeline.workflow.steps[0].outputs" : "pipeline.workflow.steps[0].inputs",
          want, out ? "a graph output" : "a graph input", d);
    json_decref(want);
    FORWARD_IF_ERROR(s);
  }
  FORWARD_IF_ERROR(only_keys(emit, E, ekeys, d));
  FORWARD_IF_ERROR(expect_str(emit, E, "kind", "emit", NULL, d));
  FORWARD_IF_ERROR(
      expect_str(emit, E, "value", md_prefixed(MD_STEP, a->gc->logits, buf, sizeof buf), NULL, d));
  FORWARD_IF_ERROR(expect_str(emit, E, "output", MD_LOGITS_OUTPUT, NULL, d));
  return expect_str(emit, E, "mode", "replace", NULL, d);
}

/* The discipline of a state-service group or state cell. */
typedef struct md_discipline {
  const char *group; /* group name */
  const char *what;  /* for messages: whose layers */
  const md_layers *layers;
  md_kind parts[2];
  int n_parts;
} md_discipline;

static int disciplines(const md_abi *a, md_discipline *out) {
  int n = 0;
  if (!a->paged && a->kv.n > 0)
    out[n++] = (md_discipline){MD_GROUP_DENSE_KV, "KV", &a->kv, {MD_KEY, MD_VALUE}, 2};
  if (a->conv.n > 0)
    out[n++] = (md_discipline){MD_GROUP_CONV, "fixed_conv", &a->conv, {MD_CONV, MD_CONV}, 1};
  if (a->rec.n > 0)
    out[n++] = (md_discipline){
        MD_GROUP_RECURRENT, "fixed_recurrent", &a->rec, {MD_RECURRENT, MD_RECURRENT}, 1};
  return n;
}

/* The genai_config templates of part (past, present). */
static void part_templates(const genai_config *gc, md_kind part, const char **past,
                           const char **present) {
  *past = part == MD_KEY     ? gc->past_key_names
          : part == MD_VALUE ? gc->past_value_names
          : part == MD_CONV  ? gc->past_conv_names
                             : gc->past_recurrent_names;
  *present = part == MD_KEY     ? gc->present_key_names
             : part == MD_VALUE ? gc->present_value_names
             : part == MD_CONV  ? gc->present_conv_names
                                : gc->present_recurrent_names;
}

/* Whether name is the cell of one of the discipline's (layer, part). */
static int discipline_has_cell(const md_discipline *dc, const char *name) {
  char buf[MD_NAME_BYTES];
  for (int l = 0; l < dc->layers->n; l++)
    for (int k = 0; k < dc->n_parts; k++) {
      md_io io = {0};
      io.kind = dc->parts[k];
      io.layer = dc->layers->id[l];
      if (strcmp(md_state_cell_name(&io, buf, sizeof buf), name) == 0) return 1;
    }
  return 0;
}

static ph_status unknown_cell(const char *path, const char *key, const md_discipline *dcs, int n,
                              const char *where, diag *d) {
  char p[MD_PATH_BYTES], list[300] = "";
  size_t at = 0;
  for (int i = 0; i < n && at < sizeof list; i++) {
    char ids[200];
    md_layers_format(dcs[i].layers, ids, sizeof ids);
    at += (size_t)snprintf(list + at, sizeof list - at, "%s%s %s", i ? ", " : "", dcs[i].what, ids);
  }
  return diag_set(d, PH_ERR_CONFIG_INCONSISTENT,
                  "%s: \"%s\" is not %s of a layer genai_config gives that state (%s)",
                  key_path(p, sizeof p, path, key), key, where, n ? list : "none");
}

static ph_status check_state(const json_t *wf, const md_abi *a, diag *d) {
  static const char *const keys[] = {"contract",      "scope",      "initializer",
                                     "recurrence",    "management", "release_boundary",
                                     "service_group", NULL},
                           *const rkeys[] = {"kind", NULL};
  const char *P = "pipeline.workflow.state", *key;
  char p[MD_PATH_BYTES], cp[MD_PATH_BYTES], cell[MD_NAME_BYTES], buf[MD_NAME_BYTES];
  md_discipline dcs[3];
  const int n = disciplines(a, dcs);
  json_t *st, *v;
  FORWARD_IF_ERROR(member(wf, "pipeline.workflow", "state", JSON_OBJECT, &st, d));
  json_object_foreach(st, key, v) {
    int known = 0;
    for (int i = 0; i < n && !known; i++) known = discipline_has_cell(&dcs[i], key);
    if (!known) return unknown_cell(P, key, dcs, n, "the state cell", d);
  }
  for (int i = 0; i < n; i++)
    for (int l = 0; l < dcs[i].layers->n; l++)
      for (int k = 0; k < dcs[i].n_parts; k++) {
        const md_io *io = md_find_io(a, dcs[i].parts[k], dcs[i].layers->id[l], 0);
        json_t *c = json_object_get(st, md_state_cell_name(io, cell, sizeof cell)), *con, *rec;
        key_path(p, sizeof p, P, cell);
        RETURN_ERROR_IF(!c, d, PH_ERR_CONFIG_MISSING_FIELD, "%s is missing (%s layer %d)", p,
                        dcs[i].what, io->layer);
        RETURN_ERROR_IF(!json_is_object(c), d, PH_ERR_CONFIG_INVALID,
                        "%s is %s, expected an object", p, json_kind(c));
        FORWARD_IF_ERROR(only_keys(c, p, keys, d));
        FORWARD_IF_ERROR(member(c, p, "contract", JSON_OBJECT, &con, d));
        FORWARD_IF_ERROR(expect_contract(con, key_path(cp, sizeof cp, p, "contract"), a, io, d));
        FORWARD_IF_ERROR(expect_str(c, p, "scope", "invocation", NULL, d));
        FORWARD_IF_ERROR(expect_str(
            c, p, "initializer", md_prefixed(MD_REQUEST, md_io_value(a, io)->name, buf, sizeof buf),
            NULL, d));
        FORWARD_IF_ERROR(member(c, p, "recurrence", JSON_OBJECT, &rec, d));
        FORWARD_IF_ERROR(only_keys(rec, key_path(cp, sizeof cp, p, "recurrence"), rkeys, d));
        FORWARD_IF_ERROR(expect_str(rec, cp, "kind", "invariant", "(fixed-size state)", d));
        FORWARD_IF_ERROR(expect_str(c, p, "management", "runtime", NULL, d));
        FORWARD_IF_ERROR(expect_str(c, p, "release_boundary", "row", NULL, d));
        FORWARD_IF_ERROR(expect_str(c, p, "service_group", dcs[i].group, NULL, d));
      }
  return PH_OK;
}

static ph_status check_group(const json_t *grp, const char *path, const md_abi *a,
                             const md_discipline *dc, diag *d) {
  static const char *const
      keys[] = {"kind", "sequence_axis", "layout", "aliasing", "update", "ports", NULL},
      *const akeys[] = {"input", "output", "role", "layer", NULL}, *const ukeys[] = {"kind", NULL};
  const int kv = dc->parts[0] == MD_KEY;
  const char *key;
  char p[MD_PATH_BYTES], ap[MD_PATH_BYTES], cell[MD_NAME_BYTES], want[MD_NAME_BYTES];
  json_t *upd, *ports, *dec, *v;
  RETURN_ERROR_IF(!json_is_object(grp), d, PH_ERR_CONFIG_INVALID, "%s is %s, expected an object",
                  path, json_kind(grp));
  FORWARD_IF_ERROR(only_keys(grp, path, keys, d));
  FORWARD_IF_ERROR(expect_str(grp, path, "kind", kv ? "full_attention" : "recurrent", NULL, d));
  if (kv)
    FORWARD_IF_ERROR(expect_int(grp, path, "sequence_axis", 2, "([batch, Hkv, sequence, D])", d));
  else
    RETURN_ERROR_IF(json_object_get(grp, "sequence_axis"), d, PH_ERR_CONFIG_INCONSISTENT,
                    "%s.sequence_axis: fixed-size state has no sequence axis", path);
  FORWARD_IF_ERROR(expect_str(grp, path, "layout", md_group_layout(a, dc->parts[0]),
                              kv                        ? "([batch, Hkv, sequence, D])"
                              : dc->parts[0] == MD_CONV ? "([batch, conv_dim, K-1])"
                              : a->paged                ? "(V-major [batch, Hv, Dv, Dk])"
                                                        : "(K-major [batch, Hv, Dk, Dv])",
                              d));
  FORWARD_IF_ERROR(
      expect_str(grp, path, "aliasing", a->paged ? "permitted" : "forbidden", NULL, d));
  FORWARD_IF_ERROR(member(grp, path, "update", JSON_OBJECT, &upd, d));
  key_path(p, sizeof p, path, "update");
  FORWARD_IF_ERROR(only_keys(upd, p, ukeys, d));
  FORWARD_IF_ERROR(expect_str(upd, p, "kind", kv ? "append" : "replace", NULL, d));
  FORWARD_IF_ERROR(member(grp, path, "ports", JSON_OBJECT, &ports, d));
  key_path(p, sizeof p, path, "ports");
  json_object_foreach(ports, key, v) {
    RETURN_ERROR_IF(strcmp(key, MD_COMPONENT) != 0, d, PH_ERR_CONFIG_INCONSISTENT,
                    "%s.%s: the only component is \"" MD_COMPONENT "\"", p, key);
  }
  FORWARD_IF_ERROR(member(ports, p, MD_COMPONENT, JSON_OBJECT, &dec, d));
  char dp[MD_PATH_BYTES];
  key_path(dp, sizeof dp, p, MD_COMPONENT);
  json_object_foreach(dec, key, v) {
    if (!discipline_has_cell(dc, key)) return unknown_cell(dp, key, dc, 1, "the alias", d);
  }
  for (int l = 0; l < dc->layers->n; l++)
    for (int k = 0; k < dc->n_parts; k++) {
      const int layer = dc->layers->id[l];
      md_io io = {0};
      io.kind = dc->parts[k];
      io.layer = layer;
      json_t *al = json_object_get(dec, md_state_cell_name(&io, cell, sizeof cell));
      key_path(ap, sizeof ap, dp, cell);
      RETURN_ERROR_IF(!al, d, PH_ERR_CONFIG_MISSING_FIELD,
                      "%s is missing (genai_config gives layer %d %s state)", ap, layer, dc->what);
      RETURN_ERROR_IF(!json_is_object(al), d, PH_ERR_CONFIG_INVALID, "%s is %s, expected an object",
                      ap, json_kind(al));
      FORWARD_IF_ERROR(only_keys(al, ap, akeys, d));
      const char *past, *present;
      part_templates(a->gc, io.kind, &past, &present);
      FORWARD_IF_ERROR(expect_str(al, ap, "input", template_name(past, layer, want, sizeof want),
                                  "(genai_config's past template for this layer)", d));
      FORWARD_IF_ERROR(expect_str(al, ap, "output",
                                  template_name(present, layer, want, sizeof want),
                                  "(genai_config's present template for this layer)", d));
      FORWARD_IF_ERROR(expect_int(al, ap, "layer", layer, "(the layer of this state)", d));
      if (kv)
        FORWARD_IF_ERROR(expect_str(al, ap, "role", io.kind == MD_KEY ? "key" : "value", NULL, d));
      else
        RETURN_ERROR_IF(json_object_get(al, "role"), d, PH_ERR_CONFIG_INCONSISTENT,
                        "%s.role: recurrent state has no key/value role", ap);
    }
  return PH_OK;
}

static ph_status check_serving(const json_t *wf, const md_abi *a, diag *d) {
  static const char *const keys[] = {"active", "done", "accepted_len", "state_service", NULL},
                           *const skeys[] = {"groups", NULL};
  const char *P = "pipeline.workflow.serving", *key;
  char p[MD_PATH_BYTES];
  json_t *sv = json_object_get(wf, "serving"), *ss, *groups, *v;
  if (!a->serving) {
    RETURN_ERROR_IF(sv, d, PH_ERR_CONFIG_INCONSISTENT,
                    "%s: the graph has no state a state service would hold", P);
    return PH_OK;
  }
  FORWARD_IF_ERROR(member(wf, "pipeline.workflow", "serving", JSON_OBJECT, &sv, d));
  FORWARD_IF_ERROR(only_keys(sv, P, keys, d));
  FORWARD_IF_ERROR(expect_str(sv, P, "active", md_serving_inputs[0].name, NULL, d));
  FORWARD_IF_ERROR(expect_str(sv, P, "done", md_serving_inputs[1].name, NULL, d));
  FORWARD_IF_ERROR(expect_str(sv, P, "accepted_len", md_serving_inputs[2].name, NULL, d));
  FORWARD_IF_ERROR(member(sv, P, "state_service", JSON_OBJECT, &ss, d));
  FORWARD_IF_ERROR(only_keys(ss, "pipeline.workflow.serving.state_service", skeys, d));
  FORWARD_IF_ERROR(
      member(ss, "pipeline.workflow.serving.state_service", "groups", JSON_OBJECT, &groups, d));
  const char *G = "pipeline.workflow.serving.state_service.groups";
  md_discipline dcs[3];
  const int n = disciplines(a, dcs);
  json_object_foreach(groups, key, v) {
    int known = 0;
    for (int i = 0; i < n; i++) known |= strcmp(dcs[i].group, key) == 0;
    RETURN_ERROR_IF(!known, d, PH_ERR_CONFIG_INCONSISTENT,
                    "%s: no state discipline of this graph is called \"%s\"",
                    key_path(p, sizeof p, G, key), key);
  }
  for (int i = 0; i < n; i++) {
    json_t *grp = json_object_get(groups, dcs[i].group);
    key_path(p, sizeof p, G, dcs[i].group);
    RETURN_ERROR_IF(!grp, d, PH_ERR_CONFIG_MISSING_FIELD, "%s is missing (the graph has %s state)",
                    p, dcs[i].what);
    FORWARD_IF_ERROR(check_group(grp, p, a, &dcs[i], d));
  }
  return PH_OK;
}

static ph_status check_manifest(const json_t *wf, const md_abi *a, diag *d) {
  static const char *const keys[] = {"capabilities", NULL};
  const char *P = "pipeline.workflow.manifest";
  json_t *man, *caps;
  FORWARD_IF_ERROR(member(wf, "pipeline.workflow", "manifest", JSON_OBJECT, &man, d));
  FORWARD_IF_ERROR(only_keys(man, P, keys, d));
  FORWARD_IF_ERROR(member(man, P, "capabilities", JSON_ARRAY, &caps, d));
  const char *want[3] = {"workflow_ssa", "typed_emit", "serving_service_contract"};
  const int n_want = a->serving ? 3 : 2;
  for (size_t i = 0; i < json_array_size(caps); i++) {
    const json_t *c = json_array_get(caps, i);
    int known = 0;
    for (int k = 0; json_is_string(c) && k < n_want; k++)
      known |= strcmp(json_string_value(c), want[k]) == 0;
    RETURN_ERROR_IF(!known, d, PH_ERR_CONFIG_INCONSISTENT,
                    "%s.capabilities[%zu]: not a capability this workflow uses", P, i);
  }
  for (int k = 0; k < n_want; k++) {
    int found = 0;
    for (size_t i = 0; i < json_array_size(caps); i++)
      found |= strcmp(json_string_value(json_array_get(caps, i)), want[k]) == 0;
    RETURN_ERROR_IF(!found, d, PH_ERR_CONFIG_MISSING_FIELD,
                    "%s.capabilities lacks \"%s\", which the workflow uses", P, want[k]);
  }
  return PH_OK;
}

static ph_status check_document(const json_t *root, const md_abi *a, diag *d) {
  static const char *const keys[] = {"schema_version", "model", "pipeline", NULL},
                           *const pkeys[] = {"workflow", NULL},
                           *const wkeys[] = {"manifest", "inputs", "outputs", "components",
                                             "state",    "steps",  "serving", NULL};
  json_t *pipe, *wf;
  RETURN_ERROR_IF(!json_is_object(root), d, PH_ERR_CONFIG_INVALID,
                  "the document is %s, expected an object", json_kind(root));
  FORWARD_IF_ERROR(only_keys(root, "", keys, d));
  FORWARD_IF_ERROR(expect_str(root, "", "schema_version", MD_SCHEMA_VERSION, NULL, d));
  FORWARD_IF_ERROR(check_model(root, a, d));
  FORWARD_IF_ERROR(member(root, "", "pipeline", JSON_OBJECT, &pipe, d));
  FORWARD_IF_ERROR(only_keys(pipe, "pipeline", pkeys, d));
  FORWARD_IF_ERROR(member(pipe, "pipeline", "workflow", JSON_OBJECT, &wf, d));
  FORWARD_IF_ERROR(only_keys(wf, "pipeline.workflow", wkeys, d));
  FORWARD_IF_ERROR(check_manifest(wf, a, d));
  FORWARD_IF_ERROR(check_component(wf, a, d));
  FORWARD_IF_ERROR(check_inputs(wf, a, d));
  FORWARD_IF_ERROR(check_outputs(wf, a, d));
  FORWARD_IF_ERROR(check_state(wf, a, d));
  FORWARD_IF_ERROR(check_steps(wf, a, d));
  return check_serving(wf, a, d);
}

ph_status inference_metadata_check_text(const char *json, size_t len, const char *label,
                                        const graph *g, const genai_config *gc, diag *d) {
  RETURN_ERROR_IF(!json || !g || !gc, d, PH_ERR_INVALID_ARGUMENT,
                  "inference_metadata_check_text: NULL argument");
  if (!label) label = INFERENCE_METADATA_FILE;
  json_error_t err;
  json_t *root = json_loadb(json, len, JSON_REJECT_DUPLICATES, &err);
  RETURN_ERROR_IF(!root, d, PH_ERR_JSON, "%s:%d:%d: %s", label, err.line, err.column, err.text);
  md_abi a;
  ph_status s = md_abi_build(g, gc, &a, d);
  if (s == PH_OK) {
    s = check_document(root, &a, d);
    md_abi_free(&a);
  }
  json_decref(root);
  if (s != PH_OK) diag_prefix(d, "%s", label);
  return s;
}

ph_status inference_metadata_check(const char *dir, const graph *g, const genai_config *gc,
                                   diag *d) {
  RETURN_ERROR_IF(!dir, d, PH_ERR_INVALID_ARGUMENT, "inference_metadata_check: NULL directory");
  char path[4096];
  FORWARD_IF_ERROR(path_join(path, sizeof path, dir, INFERENCE_METADATA_FILE, d));
  char *text = NULL;
  size_t n = 0;
  /* a 27B model's file is about 0.3 MB; 64 MB is far beyond any model we build */
  FORWARD_IF_ERROR(file_read_all(path, (size_t)64 << 20, &text, &n, d));
  ph_status s = inference_metadata_check_text(text, n, path, g, gc, d);
  free(text);
  return s;
}
