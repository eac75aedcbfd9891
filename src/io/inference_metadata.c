/* inference_metadata — inference_metadata.json written from and checked against a graph and its
 * genai_config. See inference_metadata.h for what the document says and docs/export.md for why.
 *
 * Both directions start from one table (md_abi): every graph input and output classified by the
 * genai_config name or template that gives it (token ids, positions, mask, logits, a paged
 * control input, or layer i's key, value, conv or recurrent state), with the batch layout its
 * dims call for, and the layer ids of each state discipline. Building the table is itself the
 * first check: a graph I/O genai_config does not name, or state groups that disagree with the
 * graph, stop both the writer and the checker. The writer turns the table into JSON; the checker
 * walks a parsed file and compares each value with the graph and genai_config directly, naming
 * the key path. The writer runs the checker on its own text before writing it.
 *
 * About 1,600 lines, past the usual size: the table, the writer and the checker of one format
 * stay in one file so that a key written is seen next to the check that reads it back.
 */
#include "io/inference_metadata.h"

#include <jansson.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "io/json_util.h"

#define MD_SCHEMA_VERSION     "v1"
#define MD_CONTRACT_VERSION   "1"
#define MD_COMPONENT          "decoder"
#define MD_REQUEST            "request."       /* prefix of the workflow inputs */
#define MD_STEP               MD_COMPONENT "." /* prefix of the invoke's results */
#define MD_LOGITS_OUTPUT      "logits"
#define MD_GROUP_CONV         "fixed_conv"
#define MD_GROUP_RECURRENT    "fixed_recurrent"
#define MD_GROUP_DENSE_KV     "dense_kv"
/* The element layouts the groups declare (the format names layouts freely; these follow the
 * catalogue's bnsh / bch spelling, one letter per axis). */
#define MD_LAYOUT_KV          "bnsh" /* dense [batch, Hkv, sequence, D] */
#define MD_LAYOUT_CONV        "bch"  /* [batch, conv_dim, K-1] */
#define MD_LAYOUT_REC_V_MAJOR "bhvk" /* packed paged [batch, Hv, Dv, Dk] */
#define MD_LAYOUT_REC_K_MAJOR "bhkv" /* dense [batch, Hv, Dk, Dv] (LinearAttention's) */
#define MD_NAME_BYTES         (GENAI_MAX_NAME + 32)
#define MD_PATH_BYTES         256

/* The serving controls every catalogue decoder declares (not graph inputs). */
static const struct {
  const char *name, *app_name, *dtype;
} SERVING_INPUTS[] = {
    {"request.active", "active", "bool"},
    {"request.done", "done", "bool"},
    {"request.accepted_len", "accepted_len", "int64"},
};
#define N_SERVING_INPUTS 3

/* ---- the table ------------------------------------------------------------------------------ */

typedef enum md_kind {
  MD_TOKENS,
  MD_POSITIONS,
  MD_MASK,
  MD_LOGITS,
  MD_BLOCK_TABLE,
  MD_CU_SEQLENS,
  MD_PAST_SEQLENS,
  MD_ATTN_METADATA,
  MD_KEY,
  MD_VALUE,
  MD_CONV,
  MD_RECURRENT,
} md_kind;

typedef enum md_layout {
  MD_SHARED,
  MD_REQUEST_ALIGNED,
  MD_TOKEN_PACKED,
  MD_RUNTIME_STATE
} md_layout;

typedef struct md_io {
  int value; /* graph value id */
  int is_output;
  md_kind kind;
  int layer; /* MD_KEY..MD_RECURRENT: the layer id; else -1 */
  md_layout layout;
  int axis; /* MD_REQUEST_ALIGNED / MD_TOKEN_PACKED */
} md_io;

/* One state discipline: its layer ids, ascending. */
typedef struct md_layers {
  int n;
  int32_t id[GENAI_MAX_LAYERS];
} md_layers;

typedef struct md_abi {
  const graph *g;
  const genai_config *gc;
  int paged;
  int n_io;
  md_io *io;                         /* graph inputs in order, then outputs; malloc'ed */
  md_layers kv, conv, rec;           /* KV (paged or dense), conv and recurrent state */
  int serving;                       /* the document has serving (some state-service group) */
  char batch_sym[32], token_sym[32]; /* "" when the dim is not symbolic */
} md_abi;

static void abi_free(md_abi *a) {
  free(a->io);
  a->io = NULL;
}

static const gvalue *io_value(const md_abi *a, const md_io *io) { return &a->g->values[io->value]; }

static const char *dtype_json_name(ph_dtype t) {
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

/* Dim k of value v as model.onnx names it: NULL when known (a number), else the graph's symbol
 * or the "<name>_dim<k>" the ONNX writer generates for an anonymous dim (io/onnx_write.c). */
static const char *dim_symbol(const graph *g, const gvalue *v, int k, char *buf, size_t n) {
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

static int named(const char *config_name, const char *name) {
  return config_name[0] && strcmp(config_name, name) == 0;
}

static ph_status classify(const genai_config *gc, const char *name, int is_output, md_kind *kind,
                          int *layer, diag *d) {
  *layer = -1;
  if (is_output) {
    if (named(gc->logits, name)) return *kind = MD_LOGITS, PH_OK;
  } else {
    static const md_kind kinds[] = {MD_TOKENS,     MD_POSITIONS,    MD_MASK,         MD_BLOCK_TABLE,
                                    MD_CU_SEQLENS, MD_PAST_SEQLENS, MD_ATTN_METADATA};
    const char *names[] = {gc->input_ids,
                           gc->position_ids,
                           gc->attention_mask,
                           gc->block_table,
                           gc->cumulative_sequence_lengths,
                           gc->past_sequence_lengths,
                           gc->attention_metadata};
    for (size_t i = 0; i < sizeof kinds / sizeof kinds[0]; i++)
      if (named(names[i], name)) return *kind = kinds[i], PH_OK;
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
  return diag_set(d, PH_ERR_CONFIG_INCONSISTENT,
                  "graph %s \"%s\" is not named by genai_config.json (no input, output or layer "
                  "template gives it)",
                  is_output ? "output" : "input", name);
}

static const md_io *find_io(const md_abi *a, md_kind kind, int layer, int is_output) {
  for (int i = 0; i < a->n_io; i++)
    if (a->io[i].kind == kind && a->io[i].layer == layer && a->io[i].is_output == is_output)
      return &a->io[i];
  return NULL;
}

static const md_io *find_io_named(const md_abi *a, const char *name, int is_output) {
  for (int i = 0; i < a->n_io; i++)
    if (a->io[i].is_output == is_output && strcmp(io_value(a, &a->io[i])->name, name) == 0)
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

static void layers_format(const md_layers *l, char *buf, size_t n) {
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
      layers_format(&cfg, x, sizeof x);
      layers_format(graph_layers, y, sizeof y);
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
            !find_io(a, parts[p], graph_layers->id[i], out), d, PH_ERR_CONFIG_INCONSISTENT,
            "layer %d has some %s tensors but no %s %s (genai_config.json's "
            "template names it; the graph does not have it)",
            (int)graph_layers->id[i], genai_state_kind_name(kind), out ? "output" : "input",
            parts[p] == MD_KEY     ? "key"
            : parts[p] == MD_VALUE ? "value"
            : parts[p] == MD_CONV  ? "conv state"
                                   : "recurrent state");
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
  const gvalue *v = io_value(a, io);
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
      const char *s = dim_symbol(a->g, v, k, buf, sizeof buf);
      if (s && strcmp(s, sym) == 0) {
        io->layout = want;
        io->axis = k;
        return;
      }
    }
  }
}

static ph_status abi_build(const graph *g, const genai_config *gc, md_abi *a, diag *d) {
  memset(a, 0, sizeof *a);
  a->g = g;
  a->gc = gc;
  a->paged = gc->paged;
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
    if (v->type.rank < 0 || !dtype_json_name(v->type.dtype))
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
  if (s == PH_OK) s = check_discipline(a, &a->kv, GENAI_STATE_PAGED_KV, kv_parts, 2, d);
  if (s == PH_OK) s = check_discipline(a, &a->conv, GENAI_STATE_FIXED_CONV, conv_part, 1, d);
  if (s == PH_OK) s = check_discipline(a, &a->rec, GENAI_STATE_FIXED_RECURRENT, rec_part, 1, d);
  /* a value layers_add missed: a value template matching where no key does */
  for (int i = 0; s == PH_OK && i < a->n_io; i++)
    if (a->io[i].kind == MD_VALUE && !layers_has(&a->kv, a->io[i].layer))
      s = diag_set(d, PH_ERR_CONFIG_INCONSISTENT, "graph has %s but no key for layer %d",
                   io_value(a, &a->io[i])->name, a->io[i].layer);
  if (s == PH_OK && !find_io(a, MD_LOGITS, -1, 1))
    s = diag_set(d, PH_ERR_CONFIG_INCONSISTENT,
                 "genai_config.json names output \"%s\", which the graph does not have",
                 gc->logits);
  if (s == PH_OK && !find_io(a, MD_TOKENS, -1, 0))
    s = diag_set(d, PH_ERR_CONFIG_INCONSISTENT,
                 "genai_config.json names input \"%s\", which the graph does not have",
                 gc->input_ids);
  if (s == PH_OK && a->paged) {
    /* the pages' dim 1 is the page size genai_config promises GenAI's Engine */
    for (int i = 0; s == PH_OK && i < a->n_io; i++) {
      const gvalue *v = io_value(a, &a->io[i]);
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
    abi_free(a);
    return s;
  }
  dim0_symbol(a, a->paged ? gc->past_sequence_lengths : gc->input_ids, a->batch_sym,
              sizeof a->batch_sym);
  if (a->paged) dim0_symbol(a, gc->input_ids, a->token_sym, sizeof a->token_sym);
  for (int i = 0; i < a->n_io; i++) io_layout(a, &a->io[i]);
  a->serving = a->conv.n > 0 || a->rec.n > 0 || (!a->paged && a->kv.n > 0);
  return PH_OK;
}

/* The names of the document, from the table. */
static const char *group_layout(const md_abi *a, md_kind part) {
  return part == MD_KEY    ? MD_LAYOUT_KV
         : part == MD_CONV ? MD_LAYOUT_CONV
         : a->paged        ? MD_LAYOUT_REC_V_MAJOR
                           : MD_LAYOUT_REC_K_MAJOR;
}

static const char *state_cell_name(const md_io *io, char *buf, size_t n) {
  const char *part = io->kind == MD_CONV        ? "conv_state"
                     : io->kind == MD_RECURRENT ? "recurrent_state"
                     : io->kind == MD_KEY       ? "key"
                                                : "value";
  snprintf(buf, n, "layer.%d.%s", io->layer, part);
  return buf;
}

static const char *prefixed(const char *prefix, const char *name, char *buf, size_t n) {
  snprintf(buf, n, "%s%s", prefix, name);
  return buf;
}

/* ---- writing -------------------------------------------------------------------------------- */

/* Adds value under key; on any failure (value NULL, no memory) clears *ok. Steals value. */
static void put(json_t *obj, const char *key, json_t *value, int *ok) {
  if (!obj || !value || json_object_set_new(obj, key, value) != 0) *ok = 0;
}

static json_t *layout_json(const md_abi *a, const md_io *io, int *ok) {
  char buf[MD_NAME_BYTES];
  json_t *o = json_object();
  switch (io->layout) {
  case MD_SHARED:
    json_decref(o);
    return NULL;
  case MD_REQUEST_ALIGNED:
    put(o, "kind", json_string("request_aligned"), ok);
    put(o, "axis", json_integer(io->axis), ok);
    break;
  case MD_TOKEN_PACKED: {
    const char *cu = prefixed(MD_REQUEST, a->gc->cumulative_sequence_lengths, buf, sizeof buf);
    put(o, "kind", json_string("token_packed"), ok);
    put(o, "offsets", json_string(cu), ok);
    put(o, "owner", json_string(cu), ok);
    put(o, "axis", json_integer(io->axis), ok);
    break;
  }
  case MD_RUNTIME_STATE:
    put(o, "kind", json_string("runtime_sequence_state"), ok);
    break;
  }
  if (!o) *ok = 0;
  return o;
}

static json_t *contract_json(const md_abi *a, const md_io *io, int *ok) {
  const gvalue *v = io_value(a, io);
  char buf[MD_NAME_BYTES];
  json_t *c = json_object(), *dims_j = json_array();
  put(c, "dtype", json_string(dtype_json_name(v->type.dtype)), ok);
  put(c, "rank", json_integer(v->type.rank), ok);
  for (int k = 0; dims_j && k < v->type.rank; k++) {
    const char *sym = dim_symbol(a->g, v, k, buf, sizeof buf);
    if (json_array_append_new(dims_j, sym ? json_string(sym) : json_integer(v->type.dims[k])) != 0)
      *ok = 0;
  }
  put(c, "shape", dims_j, ok);
  if (io->layout != MD_SHARED) put(c, "batch_layout", layout_json(a, io, ok), ok);
  return c;
}

static json_t *model_json(const md_abi *a, int *ok) {
  const genai_config *gc = a->gc;
  json_t *m = json_object(), *att = json_object();
  put(att, "type", json_string("grouped_query"), ok);
  put(att, "num_kv_heads", json_integer(gc->num_key_value_heads), ok);
  put(att, "num_attention_heads", json_integer(gc->num_attention_heads), ok);
  put(att, "head_dim", json_integer(gc->head_size), ok);
  put(m, "attention", att, ok);
  put(m, "max_sequence_length", json_integer(gc->context_length), ok);
  put(m, "vocab_size", json_integer(gc->vocab_size), ok);
  return m;
}

static json_t *workflow_inputs_json(const md_abi *a, int *ok) {
  char buf[MD_NAME_BYTES];
  json_t *ins = json_object();
  for (int i = 0; a->serving && i < N_SERVING_INPUTS; i++) {
    json_t *in = json_object(), *c = json_object(), *dims_j = json_array(), *bl = json_object();
    put(c, "dtype", json_string(SERVING_INPUTS[i].dtype), ok);
    put(c, "rank", json_integer(1), ok);
    if (json_array_append_new(dims_j, json_string(a->batch_sym)) != 0) *ok = 0;
    put(c, "shape", dims_j, ok);
    put(bl, "kind", json_string("request_aligned"), ok);
    put(bl, "axis", json_integer(0), ok);
    put(c, "batch_layout", bl, ok);
    json_t *role = json_object(), *src = json_object();
    put(role, "kind", json_string("opaque"), ok);
    put(src, "kind", json_string("application"), ok);
    put(src, "name", json_string(SERVING_INPUTS[i].app_name), ok);
    put(in, "contract", c, ok);
    put(in, "role", role, ok);
    put(in, "source", src, ok);
    put(in, "required", json_true(), ok);
    put(ins, SERVING_INPUTS[i].name, in, ok);
  }
  for (int i = 0; i < a->n_io; i++) {
    const md_io *io = &a->io[i];
    if (io->is_output) continue;
    const char *name = io_value(a, io)->name;
    json_t *in = json_object(), *role = json_object(), *src = json_object();
    put(in, "contract", contract_json(a, io, ok), ok);
    if (io->kind == MD_TOKENS) {
      put(role, "kind", json_string("runtime"), ok);
      put(role, "version", json_string("1.0"), ok);
      put(role, "role", json_string("prompt_tokens"), ok);
      put(src, "kind", json_string("request"), ok);
    } else {
      put(role, "kind", json_string("opaque"), ok);
      put(src, "kind", json_string("application"), ok);
      put(src, "name", json_string(name), ok);
    }
    put(in, "role", role, ok);
    put(in, "source", src, ok);
    put(in, "required", json_true(), ok);
    put(ins, prefixed(MD_REQUEST, name, buf, sizeof buf), in, ok);
  }
  return ins;
}

static json_t *outputs_json(const md_abi *a, int *ok) {
  json_t *outs = json_object(), *o = json_object();
  put(o, "contract", contract_json(a, find_io(a, MD_LOGITS, -1, 1), ok), ok);
  put(o, "role", json_string("tensor"), ok);
  put(o, "stage", json_string("pre_adapter"), ok);
  put(outs, MD_LOGITS_OUTPUT, o, ok);
  return outs;
}

/* PagedAttention's name for the slot a control input fills (abi.md §1.2). */
static const char *paged_slot(md_kind k) {
  switch (k) {
  case MD_BLOCK_TABLE:
    return "block_table";
  case MD_CU_SEQLENS:
    return "cumulative_sequence_length";
  case MD_PAST_SEQLENS:
    return "past_seqlens";
  case MD_ATTN_METADATA:
    return "attention_metadata";
  default:
    return NULL;
  }
}

static const char *kv_binding_name(const md_io *io, char *buf, size_t n) {
  snprintf(buf, n, "layer.%d.%s_cache%s", io->layer, io->kind == MD_KEY ? "key" : "value",
           io->is_output ? "_out" : "");
  return buf;
}

static json_t *paged_contract_json(const md_abi *a, int *ok) {
  char buf[MD_NAME_BYTES];
  json_t *c = json_object(), *b = json_object(), *p = json_object();
  put(c, "id", json_string(INFERENCE_METADATA_PAGED_KV_CONTRACT), ok);
  put(c, "version", json_string(MD_CONTRACT_VERSION), ok);
  for (int i = 0; i < a->n_io; i++)
    if (paged_slot(a->io[i].kind))
      put(b, paged_slot(a->io[i].kind), json_string(io_value(a, &a->io[i])->name), ok);
  for (int l = 0; l < a->kv.n; l++)
    for (int out = 0; out < 2; out++)
      for (md_kind k = MD_KEY; k <= MD_VALUE; k++) {
        const md_io *io = find_io(a, k, a->kv.id[l], out);
        put(b, kv_binding_name(io, buf, sizeof buf), json_string(io_value(a, io)->name), ok);
      }
  put(c, "bindings", b, ok);
  put(p, "block_size", json_integer(a->gc->dynamic_batching.block_size), ok);
  put(p, "aliasing", json_string("required"), ok);
  put(c, "parameters", p, ok);
  return c;
}

static json_t *component_json(const md_abi *a, int *ok) {
  json_t *comp = json_object(), *impl = json_object(), *ports = json_object();
  json_t *ins = json_object(), *outs = json_object(), *roles = json_object();
  put(impl, "kind", json_string("onnx"), ok);
  put(impl, "artifact", json_string(a->gc->filename), ok);
  for (int i = 0; i < a->n_io; i++) {
    const md_io *io = &a->io[i];
    const char *name = io_value(a, io)->name;
    put(io->is_output ? outs : ins, name, contract_json(a, io, ok), ok);
    const char *role = io->kind == MD_TOKENS      ? "token_ids"
                       : io->kind == MD_POSITIONS ? "position_ids"
                       : io->kind == MD_MASK      ? "attention_mask"
                       : io->kind == MD_LOGITS    ? "logits"
                                                  : NULL;
    if (role) put(roles, name, json_string(role), ok);
  }
  put(ports, "inputs", ins, ok);
  put(ports, "outputs", outs, ok);
  put(ports, "roles", roles, ok);
  put(comp, "implementation", impl, ok);
  put(comp, "ports", ports, ok);
  if (a->paged && a->kv.n > 0) put(comp, "contract", paged_contract_json(a, ok), ok);
  return comp;
}

static json_t *state_json(const md_abi *a, int *ok) {
  char cell[MD_NAME_BYTES], buf[MD_NAME_BYTES];
  json_t *st = json_object();
  for (int i = 0; i < a->n_io; i++) {
    const md_io *io = &a->io[i];
    const int kv = io->kind == MD_KEY || io->kind == MD_VALUE;
    if (io->is_output || (io->kind != MD_CONV && io->kind != MD_RECURRENT && !(kv && !a->paged)))
      continue;
    json_t *c = json_object(), *rec = json_object();
    put(c, "contract", contract_json(a, io, ok), ok);
    put(c, "scope", json_string("invocation"), ok);
    put(c, "initializer", json_string(prefixed(MD_REQUEST, io_value(a, io)->name, buf, sizeof buf)),
        ok);
    put(rec, "kind", json_string("invariant"), ok);
    put(c, "recurrence", rec, ok);
    put(c, "management", json_string("runtime"), ok);
    put(c, "release_boundary", json_string("row"), ok);
    put(c, "service_group",
        json_string(kv                    ? MD_GROUP_DENSE_KV
                    : io->kind == MD_CONV ? MD_GROUP_CONV
                                          : MD_GROUP_RECURRENT),
        ok);
    put(st, state_cell_name(io, cell, sizeof cell), c, ok);
  }
  return st;
}

static json_t *steps_json(const md_abi *a, int *ok) {
  char buf[MD_NAME_BYTES];
  json_t *steps = json_array(), *inv = json_object(), *emit = json_object();
  json_t *ins = json_object(), *outs = json_object();
  put(inv, "kind", json_string("invoke"), ok);
  put(inv, "component", json_string(MD_COMPONENT), ok);
  for (int i = 0; i < a->n_io; i++) {
    const char *name = io_value(a, &a->io[i])->name;
    put(a->io[i].is_output ? outs : ins, name,
        json_string(prefixed(a->io[i].is_output ? MD_STEP : MD_REQUEST, name, buf, sizeof buf)),
        ok);
  }
  put(inv, "inputs", ins, ok);
  put(inv, "outputs", outs, ok);
  put(emit, "kind", json_string("emit"), ok);
  put(emit, "value", json_string(prefixed(MD_STEP, a->gc->logits, buf, sizeof buf)), ok);
  put(emit, "output", json_string(MD_LOGITS_OUTPUT), ok);
  put(emit, "mode", json_string("replace"), ok);
  if (!steps || json_array_append_new(steps, inv) != 0 || json_array_append_new(steps, emit) != 0)
    *ok = 0;
  return steps;
}

/* One state-service group: kind, geometry and one alias per layer tensor of `kind`. */
static json_t *group_json(const md_abi *a, md_kind kind, int *ok) {
  char cell[MD_NAME_BYTES];
  const int kv = kind == MD_KEY;
  json_t *grp = json_object(), *upd = json_object(), *ports = json_object(), *dec = json_object();
  put(grp, "kind", json_string(kv ? "full_attention" : "recurrent"), ok);
  if (kv) put(grp, "sequence_axis", json_integer(2), ok);
  put(grp, "layout", json_string(group_layout(a, kind)), ok);
  put(grp, "aliasing", json_string(a->paged ? "permitted" : "forbidden"), ok);
  put(upd, "kind", json_string(kv ? "append" : "replace"), ok);
  put(grp, "update", upd, ok);
  for (int i = 0; i < a->n_io; i++) {
    const md_io *io = &a->io[i];
    if (io->is_output || !(io->kind == kind || (kv && io->kind == MD_VALUE))) continue;
    const md_io *out = find_io(a, io->kind, io->layer, 1);
    json_t *al = json_object();
    put(al, "input", json_string(io_value(a, io)->name), ok);
    put(al, "output", json_string(io_value(a, out)->name), ok);
    if (kv) put(al, "role", json_string(io->kind == MD_KEY ? "key" : "value"), ok);
    put(al, "layer", json_integer(io->layer), ok);
    put(dec, state_cell_name(io, cell, sizeof cell), al, ok);
  }
  put(ports, MD_COMPONENT, dec, ok);
  put(grp, "ports", ports, ok);
  return grp;
}

static json_t *serving_json(const md_abi *a, int *ok) {
  json_t *sv = json_object(), *ss = json_object(), *groups = json_object();
  put(sv, "active", json_string(SERVING_INPUTS[0].name), ok);
  put(sv, "done", json_string(SERVING_INPUTS[1].name), ok);
  put(sv, "accepted_len", json_string(SERVING_INPUTS[2].name), ok);
  if (!a->paged && a->kv.n > 0) put(groups, MD_GROUP_DENSE_KV, group_json(a, MD_KEY, ok), ok);
  if (a->conv.n > 0) put(groups, MD_GROUP_CONV, group_json(a, MD_CONV, ok), ok);
  if (a->rec.n > 0) put(groups, MD_GROUP_RECURRENT, group_json(a, MD_RECURRENT, ok), ok);
  put(ss, "groups", groups, ok);
  put(sv, "state_service", ss, ok);
  return sv;
}

/* The capabilities the workflow uses, as onnx-genai's validator derives them (sorted). */
static json_t *capabilities_json(const md_abi *a, int *ok) {
  json_t *caps = json_array();
  if (!caps) *ok = 0;
  if (a->serving && json_array_append_new(caps, json_string("serving_service_contract")) != 0)
    *ok = 0;
  if (json_array_append_new(caps, json_string("typed_emit")) != 0) *ok = 0;
  if (json_array_append_new(caps, json_string("workflow_ssa")) != 0) *ok = 0;
  return caps;
}

static json_t *document_json(const md_abi *a, int *ok) {
  json_t *root = json_object(), *pipe = json_object(), *wf = json_object(), *man = json_object();
  put(root, "schema_version", json_string(MD_SCHEMA_VERSION), ok);
  put(root, "model", model_json(a, ok), ok);
  put(man, "capabilities", capabilities_json(a, ok), ok);
  put(wf, "manifest", man, ok);
  put(wf, "inputs", workflow_inputs_json(a, ok), ok);
  put(wf, "outputs", outputs_json(a, ok), ok);
  json_t *comps = json_object();
  put(comps, MD_COMPONENT, component_json(a, ok), ok);
  put(wf, "components", comps, ok);
  put(wf, "state", state_json(a, ok), ok);
  put(wf, "steps", steps_json(a, ok), ok);
  if (a->serving) put(wf, "serving", serving_json(a, ok), ok);
  put(pipe, "workflow", wf, ok);
  put(root, "pipeline", pipe, ok);
  return root;
}

ph_status inference_metadata_write(const graph *g, const genai_config *gc, const char *dir,
                                   diag *d) {
  RETURN_ERROR_IF(!g || !gc || !dir, d, PH_ERR_INVALID_ARGUMENT,
                  "inference_metadata_write: NULL argument");
  char path[4096];
  FORWARD_IF_ERROR(path_join(path, sizeof path, dir, INFERENCE_METADATA_FILE, d));
  md_abi a;
  FORWARD_IF_ERROR(abi_build(g, gc, &a, d));
  int ok = 1;
  json_t *root = document_json(&a, &ok);
  abi_free(&a);
  char *text = ok ? json_dumps(root, JSON_INDENT(2) | JSON_PRESERVE_ORDER) : NULL;
  json_decref(root);
  RETURN_ERROR_IF(!text, d, PH_ERR_NO_MEMORY, "out of memory building %s", path);
  size_t n = strlen(text);
  ph_status s = inference_metadata_check_text(text, n, path, g, gc, d);
  if (s != PH_OK) {
    diag_prefix(d, "inference_metadata_write refuses its own document");
    free(text);
    return s == PH_ERR_NO_MEMORY ? s : PH_ERR_INTERNAL;
  }
  char *with_nl = realloc(text, n + 2);
  if (!with_nl) {
    free(text);
    return diag_set(d, PH_ERR_NO_MEMORY, "out of memory building %s", path);
  }
  with_nl[n] = '\n';
  with_nl[n + 1] = '\0';
  s = file_write_all(path, with_nl, n + 1, d);
  free(with_nl);
  return s;
}

/* ---- checking ------------------------------------------------------------------------------- */

/* parent.key, or parent["key"] when the key holds a '.' (tensor names). */
static const char *key_path(char *buf, size_t n, const char *parent, const char *key) {
  if (strchr(key, '.'))
    snprintf(buf, n, "%s[\"%s\"]", parent, key);
  else
    snprintf(buf, n, "%s%s%s", parent, parent[0] ? "." : "", key);
  return buf;
}

static const char *type_name(json_type t) {
  switch (t) {
  case JSON_OBJECT:
    return "an object";
  case JSON_ARRAY:
    return "an array";
  case JSON_STRING:
    return "a string";
  case JSON_INTEGER:
    return "an integer";
  default:
    return "a boolean";
  }
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
                  key_path(p, sizeof p, path, key), json_kind(v), type_name(t));
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
                  "%s is missing (expected %s: the dims of %s)", p, want, io_value(a, io)->name);
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
                  io_value(a, io)->name, found);
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
    const char *cu = prefixed(MD_REQUEST, a->gc->cumulative_sequence_lengths, buf, sizeof buf);
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
  const gvalue *v = io_value(a, io);
  const char *what = io->is_output ? "output" : "input";
  char p[MD_PATH_BYTES], buf[MD_NAME_BYTES];
  json_t *dt, *dims_j, *opt;
  RETURN_ERROR_IF(!json_is_object(c), d, PH_ERR_CONFIG_INVALID, "%s is %s, expected an object",
                  path, json_kind(c));
  FORWARD_IF_ERROR(only_keys(c, path, keys, d));
  FORWARD_IF_ERROR(member(c, path, "dtype", JSON_STRING, &dt, d));
  const char *want = dtype_json_name(v->type.dtype), *found = json_string_value(dt);
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
    const char *sym = dim_symbol(a->g, v, k, buf, sizeof buf);
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
    const char *name = io_value(a, &a->io[i])->name;
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
  FORWARD_IF_ERROR(expect_str(att, "model.attention", "type", "grouped_query", NULL, d));
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
                               {"attention_metadata", gc->attention_metadata}};
  for (size_t i = 0; i < sizeof controls / sizeof controls[0]; i++)
    if (controls[i][1][0]) json_object_set_new(w, controls[i][0], json_string(controls[i][1]));
  const char *tmpl[4] = {gc->past_key_names, gc->past_value_names, gc->present_key_names,
                         gc->present_value_names};
  static const char *const slot[4] = {"key_cache", "value_cache", "key_cache_out",
                                      "value_cache_out"};
  for (int l = 0; l < a->kv.n; l++)
    for (int k = 0; k < 4; k++) {
      snprintf(key, sizeof key, "layer.%d.%s", (int)a->kv.id[l], slot[k]);
      json_object_set_new(w, key,
                          json_string(template_name(tmpl[k], a->kv.id[l], name, sizeof name)));
    }
  return w;
}

static ph_status check_paged_contract(const json_t *c, const char *path, const md_abi *a, diag *d) {
  static const char *const keys[] = {"id", "version", "bindings", "parameters", NULL},
                           *const pkeys[] = {"block_size", "aliasing", NULL};
  char p[MD_PATH_BYTES], ids[600], what[700];
  json_t *b, *prm;
  RETURN_ERROR_IF(!json_is_object(c), d, PH_ERR_CONFIG_INVALID, "%s is %s, expected an object",
                  path, json_kind(c));
  FORWARD_IF_ERROR(only_keys(c, path, keys, d));
  FORWARD_IF_ERROR(expect_str(c, path, "id", INFERENCE_METADATA_PAGED_KV_CONTRACT, NULL, d));
  FORWARD_IF_ERROR(expect_str(c, path, "version", MD_CONTRACT_VERSION, NULL, d));
  FORWARD_IF_ERROR(member(c, path, "bindings", JSON_OBJECT, &b, d));
  layers_format(&a->kv, ids, sizeof ids);
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
  return expect_str(prm, p, "aliasing", "required", "(PagedAttention writes the pages in place)",
                    d);
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
  FORWARD_IF_ERROR(expect_str(c, p, "dtype", SERVING_INPUTS[i].dtype, NULL, d));
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
  FORWARD_IF_ERROR(expect_source(in, path, "application", SERVING_INPUTS[i].app_name, d));
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
    for (int i = 0; a->serving && i < N_SERVING_INPUTS; i++)
      known |= strcmp(key, SERVING_INPUTS[i].name) == 0;
    known |= strncmp(key, MD_REQUEST, strlen(MD_REQUEST)) == 0 &&
             find_io_named(a, key + strlen(MD_REQUEST), 0) != NULL;
    RETURN_ERROR_IF(!known, d, PH_ERR_CONFIG_INCONSISTENT,
                    "%s: neither \"" MD_REQUEST "\" + a graph input nor a serving control",
                    key_path(p, sizeof p, P, key));
  }
  for (int i = 0; a->serving && i < N_SERVING_INPUTS; i++) {
    json_t *in = json_object_get(ins, SERVING_INPUTS[i].name);
    key_path(p, sizeof p, P, SERVING_INPUTS[i].name);
    RETURN_ERROR_IF(!in, d, PH_ERR_CONFIG_MISSING_FIELD, "%s is missing (a serving control)", p);
    FORWARD_IF_ERROR(check_serving_input(in, p, a, i, d));
  }
  for (int i = 0; i < a->n_io; i++) {
    const md_io *io = &a->io[i];
    if (io->is_output) continue;
    const char *name = io_value(a, io)->name;
    json_t *in = json_object_get(ins, prefixed(MD_REQUEST, name, buf, sizeof buf));
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
                                   find_io(a, MD_LOGITS, -1, 1), d));
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
      const char *name = io_value(a, &a->io[i])->name;
      json_object_set_new(want, name,
                          json_string(prefixed(out ? MD_STEP : MD_REQUEST, name, buf, sizeof buf)));
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
      expect_str(emit, E, "value", prefixed(MD_STEP, a->gc->logits, buf, sizeof buf), NULL, d));
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
      if (strcmp(state_cell_name(&io, buf, sizeof buf), name) == 0) return 1;
    }
  return 0;
}

static ph_status unknown_cell(const char *path, const char *key, const md_discipline *dcs, int n,
                              const char *where, diag *d) {
  char p[MD_PATH_BYTES], list[300] = "";
  size_t at = 0;
  for (int i = 0; i < n && at < sizeof list; i++) {
    char ids[200];
    layers_format(dcs[i].layers, ids, sizeof ids);
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
        const md_io *io = find_io(a, dcs[i].parts[k], dcs[i].layers->id[l], 0);
        json_t *c = json_object_get(st, state_cell_name(io, cell, sizeof cell)), *con, *rec;
        key_path(p, sizeof p, P, cell);
        RETURN_ERROR_IF(!c, d, PH_ERR_CONFIG_MISSING_FIELD, "%s is missing (%s layer %d)", p,
                        dcs[i].what, io->layer);
        RETURN_ERROR_IF(!json_is_object(c), d, PH_ERR_CONFIG_INVALID,
                        "%s is %s, expected an object", p, json_kind(c));
        FORWARD_IF_ERROR(only_keys(c, p, keys, d));
        FORWARD_IF_ERROR(member(c, p, "contract", JSON_OBJECT, &con, d));
        FORWARD_IF_ERROR(expect_contract(con, key_path(cp, sizeof cp, p, "contract"), a, io, d));
        FORWARD_IF_ERROR(expect_str(c, p, "scope", "invocation", NULL, d));
        FORWARD_IF_ERROR(expect_str(c, p, "initializer",
                                    prefixed(MD_REQUEST, io_value(a, io)->name, buf, sizeof buf),
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
  FORWARD_IF_ERROR(expect_str(grp, path, "layout", group_layout(a, dc->parts[0]),
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
      json_t *al = json_object_get(dec, state_cell_name(&io, cell, sizeof cell));
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
  FORWARD_IF_ERROR(expect_str(sv, P, "active", SERVING_INPUTS[0].name, NULL, d));
  FORWARD_IF_ERROR(expect_str(sv, P, "done", SERVING_INPUTS[1].name, NULL, d));
  FORWARD_IF_ERROR(expect_str(sv, P, "accepted_len", SERVING_INPUTS[2].name, NULL, d));
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
  ph_status s = abi_build(g, gc, &a, d);
  if (s == PH_OK) {
    s = check_document(root, &a, d);
    abi_free(&a);
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
