/* inference_metadata_abi — the table of inference_metadata.json (inference_metadata_abi.h): every
 * graph input and output classified by the genai_config name or template that gives it, the
 * layers of each state discipline checked against genai_config's state groups, and the names of
 * the document derived from the table that the writer and the checker share.
 */
#include "io/inference_metadata_abi.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The element layouts the groups declare (the format names layouts freely; these follow the
 * catalogue's bnsh / bch spelling, one letter per axis). */
#define MD_LAYOUT_KV          "bnsh" /* dense [batch, Hkv, sequence, D] */
#define MD_LAYOUT_CONV        "bch"  /* [batch, conv_dim, K-1] */
#define MD_LAYOUT_REC_V_MAJOR "bhvk" /* GatedDeltaNet's [batch, Hv, Dv, Dk] */
#define MD_LAYOUT_REC_K_MAJOR "bhkv" /* dense [batch, Hv, Dk, Dv] (LinearAttention's) */

const md_serving_input md_serving_inputs[MD_N_SERVING_INPUTS] = {
    {"request.active", "active", "bool"},
    {"request.done", "done", "bool"},
    {"request.accepted_len", "accepted_len", "int64"},
};

void md_abi_free(md_abi *a) {
  free(a->io);
  a->io = NULL;
}

const char *md_dtype_json_name(ph_dtype t) {
  switch (t) {
  case PH_DTYPE_F32:
    return "float32";
  case PH_DTYPE_F16:
    return "float16";
  case PH_DTYPE_BF16:
    return "bfloat16";
  case PH_DTYPE_I64:
    return "int64";
  case PH_DTYPE_I32:
    return "int32";
  case PH_DTYPE_I8:
    return "int8";
  case PH_DTYPE_U8:
    return "uint8";
  case PH_DTYPE_F8E4M3:
    return "float8_e4m3fn";
  default:
    return NULL;
  }
}

const char *md_dim_symbol(const graph *g, const gvalue *v, int k, char *buf, size_t n) {
  if (v->type.dims[k] >= 0) return NULL;
  int s = v->sym[k];
  if (s >= 0 && s < g->n_symbols && g->symbols[s][0]) return g->symbols[s];
  snprintf(buf, n, "%s_dim%d", v->name, k);
  return buf;
}

/* The layer a name gets from a genai_config template ("past_key_values.%d.key"), or -1. The
 * template's one %d (genai_config_read's rule) matches a canonical decimal, no sign, no leading
 * zero; the template is never used as a printf format. */
static int template_layer(const char *tmpl, const char *name) {
  const char *p = tmpl[0] ? strstr(tmpl, "%d") : NULL;
  if (!p) return -1;
  size_t pre = (size_t)(p - tmpl), suf = strlen(p + 2), n = strlen(name);
  if (n < pre + suf + 1 || strncmp(name, tmpl, pre) != 0 || strcmp(name + n - suf, p + 2) != 0)
    return -1;
  const char *digits = name + pre;
  size_t nd = n - pre - suf;
  if (nd > 4 || (nd > 1 && digits[0] == '0')) return -1;
  int id = 0;
  for (size_t i = 0; i < nd; i++) {
    if (digits[i] < '0' || digits[i] > '9') return -1;
    id = id * 10 + (digits[i] - '0');
  }
  return id < GENAI_MAX_LAYERS ? id : -1;
}

static int named(const char *config_name, const char *name) {
  return config_name[0] && strcmp(config_name, name) == 0;
}

/* The kinds of the graph inputs genai_config names one by one, in the order of
 * genai_config_single_inputs. */
static const md_kind INPUT_KINDS[GENAI_N_SINGLE_INPUTS] = {
    MD_TOKENS,       MD_POSITIONS,     MD_MASK,         MD_BLOCK_TABLE,      MD_CU_SEQLENS,
    MD_PAST_SEQLENS, MD_ATTN_METADATA, MD_SLOT_MAPPING, MD_SU_CAPTURE_COUNT, MD_SU_ACTIVE};
#define N_INPUT_KINDS GENAI_N_SINGLE_INPUTS

static ph_status classify(const genai_config *gc, const char *name, int is_output, md_kind *kind,
                          int *layer, diag *d) {
  *layer = -1;
  if (is_output) {
    if (named(gc->logits, name)) return *kind = MD_LOGITS, PH_OK;
  } else {
    const char *names[N_INPUT_KINDS];
    genai_config_single_inputs(gc, names);
    for (size_t i = 0; i < N_INPUT_KINDS; i++)
      if (named(names[i], name)) return *kind = INPUT_KINDS[i], PH_OK;
  }
  const char *tmpl[4] = {is_output ? gc->present_key_names : gc->past_key_names,
                         is_output ? gc->present_value_names : gc->past_value_names,
                         is_output ? gc->present_conv_names : gc->past_conv_names,
                         is_output ? gc->present_recurrent_names : gc->past_recurrent_names};
  static const md_kind state_kinds[4] = {MD_KEY, MD_VALUE, MD_CONV, MD_RECURRENT};
  for (int i = 0; i < 4; i++) {
    int id = template_layer(tmpl[i], name);
    if (id >= 0 && id < gc->num_hidden_layers) {
      *kind = state_kinds[i];
      *layer = id;
      return PH_OK;
    }
  }
  const char *su_tmpl[2] = {gc->state_update_conv_value_names,
                            gc->state_update_recurrent_capsule_names};
  for (int i = 0; i < 2 && is_output; i++) {
    int id = template_layer(su_tmpl[i], name);
    if (id >= 0 && id < gc->num_hidden_layers) {
      *kind = i ? MD_SU_CAPSULE : MD_SU_CONV_VALUE;
      *layer = id;
      return PH_OK;
    }
  }
  return diag_set(d, PH_ERR_CONFIG_INCONSISTENT,
                  "graph %s \"%s\" is not named by genai_config.json (no input, output or layer "
                  "template gives it)",
                  is_output ? "output" : "input", name);
}

const md_io *md_find_io(const md_abi *a, md_kind kind, int layer, int is_output) {
  for (int i = 0; i < a->n_io; i++)
    if (a->io[i].kind == kind && a->io[i].layer == layer && a->io[i].is_output == is_output)
      return &a->io[i];
  return NULL;
}

static void layers_add(md_layers *l, int id) {
  for (int i = 0; i < l->n; i++)
    if (l->id[i] == id) return;
  int i = l->n++;
  while (i > 0 && l->id[i - 1] > id) {
    l->id[i] = l->id[i - 1];
    i--;
  }
  l->id[i] = id;
}

void md_layers_format(const md_layers *l, char *buf, size_t n) {
  size_t at = 0;
  buf[0] = '\0';
  at += (size_t)snprintf(buf, n, "[");
  for (int i = 0; i < l->n && at < n; i++)
    at += (size_t)snprintf(buf + at, n - at, "%s%d", i ? ", " : "", (int)l->id[i]);
  if (at < n) snprintf(buf + at, n - at, "]");
}

static int layers_equal(const md_layers *x, const md_layers *y) {
  if (x->n != y->n) return 0;
  for (int i = 0; i < x->n; i++)
    if (x->id[i] != y->id[i]) return 0;
  return 1;
}

static int layers_has(const md_layers *l, int id) {
  for (int i = 0; i < l->n; i++)
    if (l->id[i] == id) return 1;
  return 0;
}

/* A discipline's layers in the graph agree with genai_config's state groups of that kind, and
 * every layer has its whole set of past and present tensors. */
static ph_status check_discipline(const md_abi *a, const md_layers *graph_layers,
                                  genai_state_kind kind, const md_kind *parts, int n_parts,
                                  diag *d) {
  char x[600], y[600];
  if (a->gc->n_state_groups > 0) {
    md_layers cfg = {0};
    for (int i = 0; i < a->gc->n_state_groups; i++)
      if (a->gc->state_groups[i].kind == kind)
        for (int j = 0; j < a->gc->state_groups[i].n_layer_ids; j++)
          layers_add(&cfg, a->gc->state_groups[i].layer_ids[j]);
    if (!layers_equal(&cfg, graph_layers)) {
      md_layers_format(&cfg, x, sizeof x);
      md_layers_format(graph_layers, y, sizeof y);
      return diag_set(d, PH_ERR_CONFIG_INCONSISTENT,
                      "genai_config.json state groups %s hold layers %s, the graph's %s tensors "
                      "are for layers %s",
                      genai_state_kind_name(kind), x, genai_state_kind_name(kind), y);
    }
  }
  for (int i = 0; i < graph_layers->n; i++)
    for (int p = 0; p < n_parts; p++)
      for (int out = 0; out < 2; out++)
        RETURN_ERROR_IF(
            !md_find_io(a, parts[p], graph_layers->id[i], out), d, PH_ERR_CONFIG_INCONSISTENT,
            "layer %d has some %s tensors but no %s %s (genai_config.json's "
            "template names it; the graph does not have it)",
            (int)graph_layers->id[i], genai_state_kind_name(kind), out ? "output" : "input",
            parts[p] == MD_KEY     ? "key"
            : parts[p] == MD_VALUE ? "value"
            : parts[p] == MD_CONV  ? "conv state"
                                   : "recurrent state");
  return PH_OK;
}

/* The table's input called name, NULL if none. */
static const md_io *input_named(const md_abi *a, const char *name) {
  for (int i = 0; i < a->n_io; i++)
    if (!a->io[i].is_output && strcmp(md_io_value(a, &a->io[i])->name, name) == 0) return &a->io[i];
  return NULL;
}

/* slot_mapping holds one page slot per packed token: [N], dim 0 input_ids' (the same symbol or
 * the same number), so it is token_packed wherever input_ids is. */
static ph_status check_slot_mapping(const md_abi *a, diag *d) {
  const gvalue *ids = md_io_value(a, input_named(a, a->gc->input_ids));
  const gvalue *sm = md_io_value(a, input_named(a, a->gc->slot_mapping));
  char bi[MD_NAME_BYTES], bs[MD_NAME_BYTES];
  const char *si = ids->type.rank == 1 ? md_dim_symbol(a->g, ids, 0, bi, sizeof bi) : NULL;
  const char *ss = sm->type.rank == 1 ? md_dim_symbol(a->g, sm, 0, bs, sizeof bs) : NULL;
  const int same =
      ids->type.rank == 1 && sm->type.rank == 1 &&
      (si && ss ? strcmp(si, ss) == 0 : !si && !ss && ids->type.dims[0] == sm->type.dims[0]);
  RETURN_ERROR_IF(!same, d, PH_ERR_CONFIG_INCONSISTENT,
                  "graph input \"%s\" (genai_config.json inputs.slot_mapping) is not one slot per "
                  "packed token: expected rank 1 with %s's dim (%s is rank %d)",
                  sm->name, ids->name, ids->name, ids->type.rank);
  return PH_OK;
}

static void dim0_symbol(const md_abi *a, const char *name, char *out, size_t n) {
  out[0] = '\0';
  int id = name[0] ? graph_find_value(a->g, name) : -1;
  if (id < 0 || a->g->values[id].type.rank < 1) return;
  const gvalue *v = &a->g->values[id];
  int s = v->sym[0];
  if (v->type.dims[0] < 0 && s >= 0 && s < a->g->n_symbols)
    snprintf(out, n, "%s", a->g->symbols[s]);
}

/* The batch layout io's dims call for: KV pages are runtime state (no request axis: one pool for
 * every sequence); a dim named as the packed-token dim makes it token_packed, the batch dim
 * request_aligned; anything else (cumulative_sequence_lengths' batch+1, attention_metadata) is
 * shared. */
static void io_layout(md_abi *a, md_io *io) {
  const gvalue *v = md_io_value(a, io);
  char buf[MD_NAME_BYTES];
  io->layout = MD_SHARED;
  io->axis = 0;
  if (a->paged && (io->kind == MD_KEY || io->kind == MD_VALUE)) {
    io->layout = MD_RUNTIME_STATE;
    return;
  }
  for (md_layout want = MD_TOKEN_PACKED; want >= MD_REQUEST_ALIGNED; want--) {
    const char *sym = want == MD_TOKEN_PACKED ? a->token_sym : a->batch_sym;
    if (!sym[0]) continue;
    for (int k = 0; k < v->type.rank; k++) {
      const char *s = md_dim_symbol(a->g, v, k, buf, sizeof buf);
      if (s && strcmp(s, sym) == 0) {
        io->layout = want;
        io->axis = k;
        return;
      }
    }
  }
}

/* 1 when a GatedDeltaNet node reads a recurrent state input (its input 6). */
static int reads_recurrent_gdn(const md_abi *a) {
  for (int i = 0; i < a->g->n_nodes; i++) {
    const gnode *n = &a->g->nodes[i];
    if (strcmp(n->op_type, "GatedDeltaNet") != 0 || n->n_inputs < 7) continue;
    for (int k = 0; k < a->n_io; k++)
      if (a->io[k].kind == MD_RECURRENT && !a->io[k].is_output && a->io[k].value == n->inputs[6])
        return 1;
  }
  return 0;
}

ph_status md_abi_build(const graph *g, const genai_config *gc, md_abi *a, diag *d) {
  memset(a, 0, sizeof *a);
  a->g = g;
  a->gc = gc;
  a->paged = gc->paged;
  a->latent =
      gc->paged && gc->slot_mapping[0] && !gc->past_value_names[0] && !gc->present_value_names[0];
  RETURN_ERROR_IF(!gc->has_decoder || !gc->logits[0] || !gc->input_ids[0], d,
                  PH_ERR_CONFIG_MISSING_FIELD,
                  "genai_config.json has no model.decoder with input_ids and logits");
  a->io = calloc((size_t)(g->n_inputs + g->n_outputs) + 1, sizeof *a->io);
  RETURN_ERROR_IF(!a->io, d, PH_ERR_NO_MEMORY, "out of memory describing the graph");
  ph_status s = PH_OK;
  for (int i = 0; i < g->n_inputs + g->n_outputs && s == PH_OK; i++) {
    md_io *io = &a->io[a->n_io++];
    io->is_output = i >= g->n_inputs;
    io->value = io->is_output ? g->outputs[i - g->n_inputs] : g->inputs[i];
    const gvalue *v = &g->values[io->value];
    if (v->type.rank < 0 || !md_dtype_json_name(v->type.dtype))
      s = diag_set(d, PH_ERR_UNSUPPORTED, "graph %s \"%s\" has %s; its contract cannot be stated",
                   io->is_output ? "output" : "input", v->name,
                   v->type.rank < 0 ? "no rank" : "a dtype the metadata cannot name");
    else
      s = classify(gc, v->name, io->is_output, &io->kind, &io->layer, d);
    if (s != PH_OK) break;
    if (io->kind == MD_KEY) layers_add(&a->kv, io->layer);
    if (io->kind == MD_CONV) layers_add(&a->conv, io->layer);
    if (io->kind == MD_RECURRENT) layers_add(&a->rec, io->layer);
  }
  static const md_kind kv_parts[2] = {MD_KEY, MD_VALUE};
  static const md_kind conv_part[1] = {MD_CONV}, rec_part[1] = {MD_RECURRENT};
  /* a KV layer without value templates is a LATENT one, which slot_mapping marks (a struct
   * built by hand can lack both: genai_config_read gives GenAI's default names instead) */
  if (s == PH_OK && a->kv.n > 0 && !a->latent &&
      (!gc->past_value_names[0] || !gc->present_value_names[0]))
    s = diag_set(d, PH_ERR_CONFIG_INCONSISTENT,
                 "genai_config.json gives layer %d key pages but no %s template, and no "
                 "inputs.slot_mapping (only a LATENT package, which names slot_mapping, has key "
                 "pages alone)",
                 (int)a->kv.id[0],
                 gc->past_value_names[0] ? "present_value_names" : "past_value_names");
  if (s == PH_OK)
    s = check_discipline(a, &a->kv, GENAI_STATE_PAGED_KV, kv_parts, a->latent ? 1 : 2, d);
  if (s == PH_OK) s = check_discipline(a, &a->conv, GENAI_STATE_FIXED_CONV, conv_part, 1, d);
  if (s == PH_OK) s = check_discipline(a, &a->rec, GENAI_STATE_FIXED_RECURRENT, rec_part, 1, d);
  /* a value layers_add missed: a value template matching where no key does */
  for (int i = 0; s == PH_OK && i < a->n_io; i++)
    if (a->io[i].kind == MD_VALUE && !layers_has(&a->kv, a->io[i].layer))
      s = diag_set(d, PH_ERR_CONFIG_INCONSISTENT, "graph has %s but no key for layer %d",
                   md_io_value(a, &a->io[i])->name, a->io[i].layer);
  /* compact state updates: the two outputs of exactly the layers with conv state */
  for (int i = 0; s == PH_OK && i < a->n_io; i++)
    if ((a->io[i].kind == MD_SU_CONV_VALUE || a->io[i].kind == MD_SU_CAPSULE) &&
        !layers_has(&a->conv, a->io[i].layer))
      s = diag_set(d, PH_ERR_CONFIG_INCONSISTENT,
                   "graph has %s but layer %d holds no conv or recurrent state",
                   md_io_value(a, &a->io[i])->name, a->io[i].layer);
  for (int i = 0; s == PH_OK && gc->state_update_capacity > 0 && i < a->conv.n; i++)
    for (md_kind k = MD_SU_CONV_VALUE; s == PH_OK && k <= MD_SU_CAPSULE; k++)
      if (!md_find_io(a, k, a->conv.id[i], 1))
        s = diag_set(d, PH_ERR_CONFIG_INCONSISTENT,
                     "genai_config.json has state_update_capacity %d, but the graph has no %s "
                     "output for linear layer %d",
                     (int)gc->state_update_capacity,
                     k == MD_SU_CONV_VALUE ? "conv value" : "recurrent capsule",
                     (int)a->conv.id[i]);
  if (s == PH_OK && !md_find_io(a, MD_LOGITS, -1, 1))
    s = diag_set(d, PH_ERR_CONFIG_INCONSISTENT,
                 "genai_config.json names output \"%s\", which the graph does not have",
                 gc->logits);
  /* every input genai_config names is one the graph has (GenAI binds each by name) */
  const char *named_inputs[N_INPUT_KINDS];
  genai_config_single_inputs(gc, named_inputs);
  for (size_t i = 0; s == PH_OK && i < N_INPUT_KINDS; i++)
    if (named_inputs[i][0] && !input_named(a, named_inputs[i]))
      s = diag_set(d, PH_ERR_CONFIG_INCONSISTENT,
                   "genai_config.json names input \"%s\", which the graph does not have",
                   named_inputs[i]);
  if (s == PH_OK && gc->slot_mapping[0]) s = check_slot_mapping(a, d);
  if (s == PH_OK && a->paged) {
    /* the pages' dim 1 is the page size genai_config promises GenAI's Engine */
    for (int i = 0; s == PH_OK && i < a->n_io; i++) {
      const gvalue *v = md_io_value(a, &a->io[i]);
      if ((a->io[i].kind == MD_KEY || a->io[i].kind == MD_VALUE) &&
          (v->type.rank != 4 || v->type.dims[1] != gc->dynamic_batching.block_size))
        s = diag_set(d, PH_ERR_CONFIG_INCONSISTENT,
                     "graph input \"%s\" is not [num_blocks, %lld, Hkv, D] (genai_config.json "
                     "engine.dynamic_batching.block_size %lld)",
                     v->name, (long long)gc->dynamic_batching.block_size,
                     (long long)gc->dynamic_batching.block_size);
    }
  }
  if (s != PH_OK) {
    md_abi_free(a);
    return s;
  }
  dim0_symbol(a, a->paged ? gc->past_sequence_lengths : gc->input_ids, a->batch_sym,
              sizeof a->batch_sym);
  if (a->paged) dim0_symbol(a, gc->input_ids, a->token_sym, sizeof a->token_sym);
  for (int i = 0; i < a->n_io; i++) io_layout(a, &a->io[i]);
  a->serving = a->conv.n > 0 || a->rec.n > 0 || (!a->paged && a->kv.n > 0);
  a->rec_v_major = a->paged || reads_recurrent_gdn(a);
  return PH_OK;
}

/* The names of the document, from the table. */
const char *md_attention_type(const md_abi *a) {
  return a->latent ? "multi_latent" : "grouped_query";
}

const char *md_group_layout(const md_abi *a, md_kind part) {
  return part == MD_KEY    ? MD_LAYOUT_KV
         : part == MD_CONV ? MD_LAYOUT_CONV
         : a->rec_v_major  ? MD_LAYOUT_REC_V_MAJOR
                           : MD_LAYOUT_REC_K_MAJOR;
}

const char *md_state_cell_name(const md_io *io, char *buf, size_t n) {
  const char *part = io->kind == MD_CONV        ? "conv_state"
                     : io->kind == MD_RECURRENT ? "recurrent_state"
                     : io->kind == MD_KEY       ? "key"
                                                : "value";
  snprintf(buf, n, "layer.%d.%s", io->layer, part);
  return buf;
}

const char *md_prefixed(const char *prefix, const char *name, char *buf, size_t n) {
  snprintf(buf, n, "%s%s", prefix, name);
  return buf;
}
