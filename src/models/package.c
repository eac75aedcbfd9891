/* package — genai_config.json and its graph, read and checked together. See package.h. */
#include "models/package.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "graph/abi_names.h"

#define CFG PACKAGE_CONFIG_FILE

/* ---- reading ------------------------------------------------------------------------------- */

ph_status package_read_graph(const char *dir, const genai_config *gc, unsigned flags, graph **out,
                             onnx_model_info *info, diag *d) {
  *out = NULL;
  const char *file = gc ? gc->filename : ONNX_MODEL_FILE;
  char path[4096];
  FORWARD_IF_ERROR(path_join(path, sizeof path, dir, file, d));
  if (gc) {
    /* the reader refused paths and ".."; a symlink may still lead elsewhere */
    RETURN_ERROR_IF(!path_exists(path), d, PH_ERR_NOT_FOUND,
                    "%s/" CFG ": model.decoder.filename \"%s\": %s does not exist", dir, file,
                    path);
    RETURN_ERROR_IF(!path_resolves_inside(dir, path), d, PH_ERR_CONFIG_INVALID,
                    "%s/" CFG ": model.decoder.filename \"%s\" resolves outside the package "
                    "directory",
                    dir, file);
  }
  graph *g = NULL;
  const unsigned read_flags = ((flags & PACKAGE_FINALIZE) ? ONNX_READ_FINALIZE : 0u) |
                              ((flags & PACKAGE_CONFIG_ONLY) ? ONNX_READ_CONFIG_ONLY : 0u);
  FORWARD_IF_ERROR(onnx_read_model_file(dir, file, read_flags, &g, info, d));
  if (gc && (flags & PACKAGE_CHECK)) {
    diag local;
    ph_status s = package_check_graph(gc, g, &local);
    graph_free(s == PH_OK ? NULL : g);
    /* "genai_config.json: ..." becomes "DIR/genai_config.json: ..." */
    RETURN_ERROR_IF(s != PH_OK, d, s, "%s/%s", dir, local.msg);
  }
  *out = g;
  return PH_OK;
}

ph_status package_read(const char *dir, unsigned flags, genai_config *gc, int *has_config,
                       graph **out, onnx_model_info *info, diag *d) {
  *out = NULL;
  char path[4096];
  FORWARD_IF_ERROR(path_join(path, sizeof path, dir, CFG, d));
  const int has = path_exists(path);
  if (has_config) *has_config = has;
  genai_config local;
  if (!gc) gc = &local;
  if (has) FORWARD_IF_ERROR(genai_config_read(dir, gc, d));
  return package_read_graph(dir, has ? gc : NULL, flags, out, info, d);
}

/* ---- checking ------------------------------------------------------------------------------ */

static const gvalue *input_named(const graph *g, const char *name) {
  for (int i = 0; i < g->n_inputs; i++)
    if (strcmp(g->values[g->inputs[i]].name, name) == 0) return &g->values[g->inputs[i]];
  return NULL;
}

static const gvalue *output_named(const graph *g, const char *name) {
  for (int i = 0; i < g->n_outputs; i++)
    if (strcmp(g->values[g->outputs[i]].name, name) == 0) return &g->values[g->outputs[i]];
  return NULL;
}

/* The layer index name holds when it is tmpl ("past_key_values.%d.key", "%%" a literal '%')
 * formatted with some index; -1 otherwise. */
static int template_layer(const char *tmpl, const char *name) {
  const char *at = tmpl, *p = name;
  for (; *at && !(at[0] == '%' && at[1] == 'd'); at++, p++) {
    if (at[0] == '%' && at[1] == '%') at++;
    if (*p != *at) return -1;
  }
  if (!*at) return -1;
  int64_t v = 0;
  const char *digits = p;
  while (*p >= '0' && *p <= '9' && v < HF_MAX_LAYERS * 10) v = v * 10 + (*p++ - '0');
  if (p == digits || (p - digits > 1 && *digits == '0')) return -1;
  for (at += 2; *at; at++, p++) {
    if (at[0] == '%' && at[1] == '%') at++;
    if (*p != *at) return -1;
  }
  return *p ? -1 : (int)v;
}

/* Which per-layer state inputs the graph has: [role][layer], role 0 key, 1 value, 2 conv,
 * 3 recurrent; *n_layers = 1 + the highest layer index seen (0: none). */
enum { ROLE_KEY, ROLE_VALUE, ROLE_CONV, ROLE_RECURRENT, N_ROLES };

typedef struct layer_inputs {
  const gvalue *v[N_ROLES][HF_MAX_LAYERS];
  int n_layers;
  const char *last; /* the input naming the highest layer */
} layer_inputs;

static ph_status scan_layers(const genai_config *gc, const graph *g, layer_inputs *li, diag *d) {
  memset(li, 0, sizeof *li);
  const char *tmpl[N_ROLES] = {gc->past_key_names, gc->past_value_names, gc->past_conv_names,
                               gc->past_recurrent_names};
  for (int i = 0; i < g->n_inputs; i++) {
    const gvalue *v = &g->values[g->inputs[i]];
    for (int r = 0; r < N_ROLES; r++) {
      int l = tmpl[r][0] ? template_layer(tmpl[r], v->name) : -1;
      if (l < 0) continue;
      RETURN_ERROR_IF(l >= HF_MAX_LAYERS, d, PH_ERR_LIMIT,
                      CFG ": graph input \"%s\" is layer %d; at most %d layers are supported",
                      v->name, l, HF_MAX_LAYERS);
      li->v[r][l] = v;
      if (l + 1 > li->n_layers) {
        li->n_layers = l + 1;
        li->last = v->name;
      }
    }
  }
  return PH_OK;
}

/* A size the graph gives (>0) that the config must repeat. */
static ph_status same(const char *key, int64_t cfg, int64_t graph_value, const char *where,
                      diag *d) {
  RETURN_ERROR_IF(graph_value > 0 && cfg != graph_value, d, PH_ERR_CONFIG_INCONSISTENT,
                  CFG ": %s = %" PRId64 ", but the graph has %" PRId64 " (%s)", key, cfg,
                  graph_value, where);
  return PH_OK;
}

static ph_status check_names(const genai_config *gc, const graph *g, diag *d) {
  const struct {
    const char *key, *name;
  } ins[] = {
      {"input_ids", gc->input_ids},
      {"position_ids", gc->position_ids},
      {"attention_mask", gc->attention_mask},
      {"block_table", gc->block_table},
      {"cumulative_sequence_lengths", gc->cumulative_sequence_lengths},
      {"past_sequence_lengths", gc->past_sequence_lengths},
      {"attention_metadata", gc->attention_metadata},
      {"slot_mapping", gc->slot_mapping},
      {"state_update_capture_count", gc->state_update_capture_count},
      {"state_update_active", gc->state_update_active},
  };
  /* a LATENT package (inputs.slot_mapping named: docs/export.md) has no position_ids and no
   * attention_metadata; every other paged package has both and no slot_mapping */
  const int latent = gc->paged && gc->slot_mapping[0];
  for (size_t i = 0; i < sizeof ins / sizeof ins[0]; i++) {
    const int needed = i == 0   ? 1
                       : i == 1 ? !latent
                       : i == 2 ? !gc->paged
                       : i == 6 ? gc->paged && !latent
                       : i == 7 ? latent
                       : i >= 8 ? gc->state_update_capacity > 0
                                : gc->paged;
    RETURN_ERROR_IF(needed && !ins[i].name[0], d, PH_ERR_CONFIG_INCONSISTENT,
                    CFG ": model.decoder.inputs.%s is empty; the %s layout needs it", ins[i].key,
                    gc->paged ? "paged" : "dense");
    RETURN_ERROR_IF(ins[i].name[0] && !input_named(g, ins[i].name), d, PH_ERR_CONFIG_INCONSISTENT,
                    CFG ": model.decoder.inputs.%s = \"%s\", but the graph has no such input",
                    ins[i].key, ins[i].name);
  }
  RETURN_ERROR_IF(!output_named(g, gc->logits), d, PH_ERR_CONFIG_INCONSISTENT,
                  CFG ": model.decoder.outputs.logits = \"%s\", but the graph has no such output",
                  gc->logits);
  return PH_OK;
}

/* The roles each layer needs: from the state groups, else GenAI's legacy all-paged contract
 * (paged) or whatever the graph has (dense: key/value or conv/recurrent). */
static ph_status check_layers(const genai_config *gc, const layer_inputs *li, diag *d) {
  const int64_t n = gc->num_hidden_layers;
  RETURN_ERROR_IF(li->n_layers != n, d, PH_ERR_CONFIG_INCONSISTENT,
                  CFG ": model.decoder.num_hidden_layers = %" PRId64
                      ", but the graph has state inputs for %d layers%s%s%s",
                  n, li->n_layers, li->last ? " (the last: \"" : "", li->last ? li->last : "",
                  li->last ? "\")" : "");
  uint8_t want[HF_MAX_LAYERS][N_ROLES];
  memset(want, 0, sizeof want);
  for (int i = 0; i < gc->n_state_groups; i++) {
    const genai_state_group *grp = &gc->state_groups[i];
    for (int j = 0; j < grp->n_layer_ids; j++) {
      uint8_t *w = want[grp->layer_ids[j]];
      /* a paged_kv layer without value names is LATENT: key pages only */
      if (grp->kind == GENAI_STATE_PAGED_KV)
        w[ROLE_KEY] = 1, w[ROLE_VALUE] = gc->past_value_names[0] != 0;
      if (grp->kind == GENAI_STATE_FIXED_CONV) w[ROLE_CONV] = 1;
      if (grp->kind == GENAI_STATE_FIXED_RECURRENT) w[ROLE_RECURRENT] = 1;
    }
  }
  static const char *const role_key[N_ROLES] = {"past_key_names", "past_value_names",
                                                "past_conv_names", "past_recurrent_names"};
  const char *tmpl[N_ROLES] = {gc->past_key_names, gc->past_value_names, gc->past_conv_names,
                               gc->past_recurrent_names};
  for (int l = 0; l < n; l++) {
    uint8_t *w = want[l];
    if (gc->n_state_groups == 0) {
      const int kv = gc->paged || li->v[ROLE_KEY][l] || li->v[ROLE_VALUE][l];
      w[kv ? ROLE_KEY : ROLE_CONV] = w[kv ? ROLE_VALUE : ROLE_RECURRENT] = 1;
    }
    for (int r = 0; r < N_ROLES; r++) {
      RETURN_ERROR_IF(w[r] && !li->v[r][l], d, PH_ERR_CONFIG_INCONSISTENT,
                      CFG ": layer %d needs the input model.decoder.inputs.%s names (\"%s\"), "
                          "which the graph does not have",
                      l, role_key[r], tmpl[r]);
      RETURN_ERROR_IF(!w[r] && li->v[r][l], d, PH_ERR_CONFIG_INCONSISTENT,
                      CFG ": the graph has input \"%s\", but model.decoder.state_groups give "
                          "layer %d no such state",
                      li->v[r][l]->name, l);
    }
  }
  return PH_OK;
}

/* Page or cache geometry from every key input: [P, K, Hkv, D] paged, [B, Hkv, T, D] dense. */
static ph_status check_kv_dims(const genai_config *gc, const layer_inputs *li, diag *d) {
  for (int l = 0; l < li->n_layers; l++) {
    const gvalue *k = li->v[ROLE_KEY][l];
    if (!k) continue;
    RETURN_ERROR_IF(k->type.rank != 4, d, PH_ERR_CONFIG_INCONSISTENT,
                    CFG ": graph input \"%s\" has rank %d; the %s layout's key cache has 4 dims",
                    k->name, k->type.rank, gc->paged ? "paged" : "dense");
    char where[160];
    snprintf(where, sizeof where, "dims of graph input %.100s", k->name);
    const int64_t *dims = k->type.dims;
    FORWARD_IF_ERROR(same("model.decoder.num_key_value_heads", gc->num_key_value_heads,
                          dims[gc->paged ? 2 : 1], where, d));
    FORWARD_IF_ERROR(same("model.decoder.head_size", gc->head_size, dims[3], where, d));
    if (gc->paged)
      FORWARD_IF_ERROR(same("engine.dynamic_batching.block_size", gc->dynamic_batching.block_size,
                            dims[1], where, d));
  }
  return PH_OK;
}

/* C > 0: every layer with conv state has its two state_update outputs (abi §8.2). */
static ph_status check_state_update_outputs(const genai_config *gc, const graph *g,
                                            const layer_inputs *li, diag *d) {
  const char *const key[2] = {"state_update_conv_value_names",
                              "state_update_recurrent_capsule_names"};
  const char *const tmpl[2] = {gc->state_update_conv_value_names,
                               gc->state_update_recurrent_capsule_names};
  char name[2 * GENAI_MAX_NAME];
  for (int l = 0; gc->state_update_capacity > 0 && l < li->n_layers; l++) {
    if (!li->v[ROLE_CONV][l]) continue;
    for (int k = 0; k < 2; k++) {
      abi_layer_name(name, sizeof name, tmpl[k], l);
      RETURN_ERROR_IF(!output_named(g, name), d, PH_ERR_CONFIG_INCONSISTENT,
                      CFG ": model.decoder.outputs.%s gives \"%s\" for linear layer %d, but the "
                          "graph has no such output",
                      key[k], name, l);
    }
  }
  return PH_OK;
}

static ph_status check_nodes(const genai_config *gc, const graph *g, diag *d) {
  const int ids = graph_find_value(g, gc->input_ids);
  char where[160];
  for (int i = 0; i < g->n_nodes; i++) {
    const gnode *n = &g->nodes[i];
    if (n->dead) continue;
    snprintf(where, sizeof where, "%.40s node %.100s", n->op_type, n->name);
    if (strcmp(n->op_type, "GroupQueryAttention") == 0 ||
        strcmp(n->op_type, "PagedAttention") == 0) {
      FORWARD_IF_ERROR(same("model.decoder.num_attention_heads", gc->num_attention_heads,
                            node_attr_int(n, "num_heads", 0), where, d));
      FORWARD_IF_ERROR(same("model.decoder.num_key_value_heads", gc->num_key_value_heads,
                            node_attr_int(n, "kv_num_heads", 0), where, d));
    }
    /* compact state updates: every capturing op is built for the capacity the config gives */
    if (strcmp(n->op_type, "GatedDeltaNet") == 0 ||
        strcmp(n->op_type, "VarlenCausalConvWithState") == 0) {
      const int64_t cap = node_attr_int(n, "state_update_capacity", 0);
      RETURN_ERROR_IF(cap != gc->state_update_capacity, d, PH_ERR_CONFIG_INCONSISTENT,
                      CFG ": model.decoder.state_update_capacity = %d, but the graph's %s has "
                          "state_update_capacity %" PRId64,
                      (int)gc->state_update_capacity, where, cap);
    }
    /* the embedding: Gather(table [vocab, hidden], input_ids) */
    if (strcmp(n->op_type, "Gather") == 0 && n->n_inputs == 2 && ids >= 0 && n->inputs[1] == ids &&
        n->inputs[0] >= 0) {
      const tinfo *t = &g->values[n->inputs[0]].type;
      if (t->rank == 2)
        FORWARD_IF_ERROR(same("model.decoder.hidden_size", gc->hidden_size, t->dims[1], where, d));
    }
  }
  return PH_OK;
}

ph_status package_check_graph(const genai_config *gc, const graph *g, diag *d) {
  RETURN_ERROR_IF(!gc->has_decoder, d, PH_ERR_CONFIG_MISSING_FIELD,
                  CFG ": model.decoder is missing (it names the graph file and gives its sizes: "
                      "num_hidden_layers, head_size, num_attention_heads, ...)");
  const struct {
    const char *key;
    int64_t v;
  } sizes[] = {
      {"model.decoder.num_hidden_layers", gc->num_hidden_layers},
      {"model.decoder.head_size", gc->head_size},
      {"model.decoder.hidden_size", gc->hidden_size},
      {"model.decoder.num_attention_heads", gc->num_attention_heads},
      {"model.decoder.num_key_value_heads", gc->num_key_value_heads},
      {"model.vocab_size", gc->vocab_size},
  };
  for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++)
    RETURN_ERROR_IF(sizes[i].v <= 0, d, PH_ERR_CONFIG_MISSING_FIELD, CFG ": %s is %s", sizes[i].key,
                    sizes[i].v ? "negative" : "missing or 0");
  RETURN_ERROR_IF(gc->num_hidden_layers > HF_MAX_LAYERS, d, PH_ERR_LIMIT,
                  CFG ": model.decoder.num_hidden_layers = %" PRId64 ": at most %d are supported",
                  gc->num_hidden_layers, HF_MAX_LAYERS);
  FORWARD_IF_ERROR(check_names(gc, g, d));
  const gvalue *logits = output_named(g, gc->logits);
  if (logits->type.rank >= 1) {
    char where[160];
    snprintf(where, sizeof where, "last dim of output %.100s", logits->name);
    FORWARD_IF_ERROR(same("model.vocab_size", gc->vocab_size,
                          logits->type.dims[logits->type.rank - 1], where, d));
  }
  layer_inputs *li = malloc(sizeof *li);
  RETURN_ERROR_IF(!li, d, PH_ERR_NO_MEMORY, "out of memory checking " CFG);
  ph_status s = scan_layers(gc, g, li, d);
  if (s == PH_OK) s = check_layers(gc, li, d);
  if (s == PH_OK) s = check_kv_dims(gc, li, d);
  if (s == PH_OK) s = check_state_update_outputs(gc, g, li, d);
  free(li);
  FORWARD_IF_ERROR(s);
  FORWARD_IF_ERROR(check_nodes(gc, g, d));
  const int cos = graph_find_value(g, ABI_COS_CACHE);
  if (cos >= 0 && g->values[cos].type.rank == 2 && gc->context_length > 0)
    RETURN_ERROR_IF(gc->context_length > g->values[cos].type.dims[0], d, PH_ERR_CONFIG_INCONSISTENT,
                    CFG ": model.context_length = %" PRId64
                        ", but the graph's rotary cache (cos_cache) has %" PRId64 " positions",
                    gc->context_length, g->values[cos].type.dims[0]);
  return PH_OK;
}
