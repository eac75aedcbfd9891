/* dense_session — runs one sequence through the dense graph. See dense_session.h. */
#include "runtime/dense_session.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec/exec.h"
#include "graph/abi_names.h"
#include "graph/prepare.h"
#include "models/model.h"
#include "models/registry.h"
#include "runtime/paged_session.h"
#include "runtime/runtime.h"

typedef struct layer_io {
  int full;
  int in0, in1, out0, out1; /* executor input / output indices */
  float *buf0[2], *buf1[2]; /* full: K and V double buffers; linear: conv, recurrent in [0] */
  int cur;                  /* full: which buffer holds the past */
  int64_t dims0[4], dims1[4];
  int rank0, rank1;
} layer_io;

struct dense_session {
  int n_layers;
  int64_t vocab;
  int has_mrope; /* position_ids [3, B, S] rather than [B, S] */
  graph *g;
  executor *e;
  int64_t max_context;
  ph_precision precision; /* resolved: f32 or bf16 */
  int n_quant;            /* MatMulNBits nodes as built (graph_quant_summary) */
  ph_quant_params quant;  /* the first one's parameters */
  int64_t len;            /* tokens in the cache */
  int in_ids, in_mask, in_pos, out_logits;
  layer_io *layers;
  int64_t *ids, *mask, *pos; /* [max_context] each; pos [3 * max_context] */
};

static float *alloc_f32(int64_t n) { return calloc((size_t)(n > 0 ? n : 1), sizeof(float)); }

ph_status dense_session_create(const ph_model *m, int64_t max_context, int n_threads,
                               dense_session **out, diag *d) {
  return dense_session_create_ex(m, max_context, n_threads, PH_PRECISION_F32, out, d);
}

ph_precision dense_session_precision(const dense_session *s) { return s->precision; }

/* The -1 / 0 / 1 of prepare_options.matmul_bf16 for a public precision. */
static int matmul_bf16_of(ph_precision p) {
  return p == PH_PRECISION_BF16 ? 1 : p == PH_PRECISION_F32 ? 0 : -1;
}

ph_status dense_session_create_ex(const ph_model *m, int64_t max_context, int n_threads,
                                  ph_precision precision, dense_session **out, diag *d) {
  return dense_session_create_quant(m, max_context, n_threads, precision, NULL, out, d);
}

int dense_session_quant(const dense_session *s, ph_quant_params *out) {
  if (out) *out = s->quant;
  return s->n_quant;
}

ph_status dense_session_create_quant(const ph_model *m, int64_t max_context, int n_threads,
                                     ph_precision precision, const ph_quant_params *quant,
                                     dense_session **out, diag *d) {
  *out = NULL;
  const hf_config *c = model_config(m);
  const model_weights *w = model_weights_of(m);
  RETURN_ERROR_IF(!c || !w, d, PH_ERR_INVALID_ARGUMENT, "the model was opened without weights");
  model_options opt = model_options_default();
  opt.max_context = max_context;
  if (quant) FORWARD_IF_ERROR(runtime_quant_resolve(quant, "dense session", &opt.quant, d));
  graph *g = NULL;
  FORWARD_IF_ERROR(model_build_graph(c, w, &opt, &g, d));
  ph_status st = graph_note_checkpoint(g, m, d);
  if (st != PH_OK) {
    graph_free(g);
    return st;
  }
  return dense_session_create_graph_ex(g, max_context, n_threads, precision, out, d);
}

/* The static dims of graph input `name`, or -1 when absent. */
static int input_type(const graph *g, const char *name, tinfo *t) {
  for (int i = 0; i < g->n_inputs; i++)
    if (strcmp(g->values[g->inputs[i]].name, name) == 0) {
      *t = g->values[g->inputs[i]].type;
      return i;
    }
  return -1;
}

static ph_status bind_layer(dense_session *s, int i, diag *d) {
  layer_io *l = &s->layers[i];
  char name[96];
  tinfo t0, t1;
  l->full = input_type(s->g, abi_past_name(name, sizeof name, ABI_SLOT_KEY, i), &t0) >= 0;
  const abi_cache_slot s0 = abi_layer_slot(l->full, 0), s1 = abi_layer_slot(l->full, 1);
  abi_past_name(name, sizeof name, s0, i);
  RETURN_ERROR_IF(input_type(s->g, name, &t0) < 0, d, PH_ERR_INVALID_ARGUMENT,
                  "graph input %s is missing", name);
  l->in0 = exec_input_index(s->e, name);
  abi_past_name(name, sizeof name, s1, i);
  RETURN_ERROR_IF(input_type(s->g, name, &t1) < 0, d, PH_ERR_INVALID_ARGUMENT,
                  "graph input %s is missing", name);
  l->in1 = exec_input_index(s->e, name);
  l->out0 = exec_output_index(s->e, abi_present_name(name, sizeof name, s0, i));
  RETURN_ERROR_IF(l->out0 < 0, d, PH_ERR_INVALID_ARGUMENT, "graph output %s is missing", name);
  l->out1 = exec_output_index(s->e, abi_present_name(name, sizeof name, s1, i));
  RETURN_ERROR_IF(l->out1 < 0, d, PH_ERR_INVALID_ARGUMENT, "graph output %s is missing", name);
  l->rank0 = t0.rank;
  l->rank1 = t1.rank;
  if (l->full) {
    /* [B, Hkv, P, D]: Hkv and D must be static */
    RETURN_ERROR_IF(t0.rank != 4 || t0.dims[1] < 0 || t0.dims[3] < 0 || t1.rank != 4, d,
                    PH_ERR_INVALID_ARGUMENT,
                    "layer %d: KV inputs must be [batch, heads, past, dim]", i);
    for (int k = 0; k < 4; k++) l->dims0[k] = l->dims1[k] = k == 2 ? 0 : t0.dims[k];
    l->dims0[0] = l->dims1[0] = 1;
    int64_t n = t0.dims[1] * s->max_context * t0.dims[3];
    for (int k = 0; k < 2; k++) {
      l->buf0[k] = alloc_f32(n);
      l->buf1[k] = alloc_f32(n);
    }
  } else {
    RETURN_ERROR_IF(t0.rank != 3 || t1.rank != 4, d, PH_ERR_INVALID_ARGUMENT,
                    "layer %d: state inputs must be [batch, C, K-1] and [batch, Hv, Dk, Dv]", i);
    for (int k = 1; k < t0.rank; k++) l->dims0[k] = t0.dims[k];
    for (int k = 1; k < t1.rank; k++) l->dims1[k] = t1.dims[k];
    l->dims0[0] = l->dims1[0] = 1;
    l->buf0[0] = alloc_f32(l->dims0[1] * l->dims0[2]);
    l->buf1[0] = alloc_f32(l->dims1[1] * l->dims1[2] * l->dims1[3]);
  }
  RETURN_ERROR_IF(!l->buf0[0] || !l->buf1[0] || (l->full && (!l->buf0[1] || !l->buf1[1])), d,
                  PH_ERR_NO_MEMORY, "out of memory for the caches");
  return PH_OK;
}

ph_status dense_session_create_graph(graph *g, int64_t max_context, int n_threads,
                                     dense_session **out, diag *d) {
  return dense_session_create_graph_ex(g, max_context, n_threads, PH_PRECISION_F32, out, d);
}

ph_status dense_session_create_graph_ex(graph *g, int64_t max_context, int n_threads,
                                        ph_precision precision, dense_session **out, diag *d) {
  *out = NULL;
  if (precision != PH_PRECISION_AUTO && precision != PH_PRECISION_F32 &&
      precision != PH_PRECISION_BF16) {
    graph_free(g);
    return diag_set(d, PH_ERR_INVALID_ARGUMENT,
                    "dense session: precision %d: expected auto (0), f32 (1) or bf16 (2)",
                    (int)precision);
  }
  dense_session *s = calloc(1, sizeof *s);
  if (!s) {
    graph_free(g);
    return diag_set(d, PH_ERR_NO_MEMORY, "out of memory");
  }
  s->g = g;
  s->n_quant = graph_quant_summary(g, &s->quant);
  int bf16 = 0;
  const prepare_options po = {WEIGHTS_COPY, NULL, matmul_bf16_of(precision),
                              n_threads > 0 ? n_threads : 0};
  ph_status st = graph_prepare_cpu_opts(s->g, &po, &bf16, d);
  s->precision = bf16 ? PH_PRECISION_BF16 : PH_PRECISION_F32;
  if (st == PH_OK) st = exec_create(s->g, n_threads, &s->e, d);
  if (st != PH_OK) {
    dense_session_free(s);
    return st;
  }
  int cos = graph_find_value(s->g, ABI_COS_CACHE);
  s->max_context = cos >= 0 && g->values[cos].kind == VALUE_INITIALIZER
                       ? g->values[cos].type.dims[0]
                   : max_context > 0 ? max_context
                                     : 4096;
  tinfo t;
  s->in_ids = input_type(g, ABI_INPUT_IDS, &t);
  s->in_mask = input_type(g, ABI_ATTENTION_MASK, &t);
  s->in_pos = input_type(g, ABI_POSITION_IDS, &t);
  s->has_mrope = s->in_pos >= 0 && t.rank == 3;
  s->out_logits = exec_output_index(s->e, ABI_LOGITS);
  if (s->in_ids < 0 || s->in_mask < 0 || s->in_pos < 0 || s->out_logits < 0) {
    dense_session_free(s);
    return diag_set(
        d, PH_ERR_INVALID_ARGUMENT,
        "not a dense decoder graph: needs input_ids, attention_mask, position_ids and logits");
  }
  const tinfo *lt = &g->values[g->outputs[s->out_logits]].type;
  s->vocab = lt->rank == 3 ? lt->dims[2] : -1;
  char name[96];
  for (;; s->n_layers++) {
    int kv = input_type(g, abi_past_name(name, sizeof name, ABI_SLOT_KEY, s->n_layers), &t) >= 0;
    abi_past_name(name, sizeof name, ABI_SLOT_CONV, s->n_layers);
    if (!kv && input_type(g, name, &t) < 0) break;
  }
  if (s->vocab <= 0 || s->n_layers == 0) {
    dense_session_free(s);
    return diag_set(d, PH_ERR_INVALID_ARGUMENT,
                    "not a dense decoder graph: no layers or no vocab dim");
  }
  s->ids = calloc((size_t)s->max_context, sizeof(int64_t));
  s->mask = calloc((size_t)s->max_context, sizeof(int64_t));
  s->pos = calloc((size_t)s->max_context * 3, sizeof(int64_t));
  s->layers = calloc((size_t)s->n_layers, sizeof *s->layers);
  if (!s->ids || !s->mask || !s->pos || !s->layers) {
    dense_session_free(s);
    return diag_set(d, PH_ERR_NO_MEMORY, "out of memory");
  }
  for (int i = 0; i < s->n_layers; i++)
    if ((st = bind_layer(s, i, d)) != PH_OK) {
      dense_session_free(s);
      return st;
    }
  *out = s;
  return PH_OK;
}

void dense_session_free(dense_session *s) {
  if (!s) return;
  if (s->layers)
    for (int i = 0; i < s->n_layers; i++)
      for (int k = 0; k < 2; k++) {
        free(s->layers[i].buf0[k]);
        free(s->layers[i].buf1[k]);
      }
  free(s->layers);
  free(s->ids);
  free(s->mask);
  free(s->pos);
  exec_free(s->e);
  graph_free(s->g);
  free(s);
}

void dense_session_reset(dense_session *s) {
  s->len = 0;
  for (int i = 0; i < s->n_layers; i++) {
    layer_io *l = &s->layers[i];
    if (l->full) continue;
    memset(l->buf0[0], 0, (size_t)(l->dims0[1] * l->dims0[2]) * sizeof(float));
    memset(l->buf1[0], 0, (size_t)(l->dims1[1] * l->dims1[2] * l->dims1[3]) * sizeof(float));
  }
}

int64_t dense_session_length(const dense_session *s) { return s->len; }
int64_t dense_session_vocab(const dense_session *s) { return s->vocab; }
int64_t dense_session_max_context(const dense_session *s) { return s->max_context; }
executor *dense_session_executor(dense_session *s) { return s->e; }

ph_status dense_session_step(dense_session *s, const int64_t *tokens, int64_t n, float *logits,
                             diag *d) {
  RETURN_ERROR_IF(n < 1, d, PH_ERR_INVALID_ARGUMENT, "a step needs at least one token");
  RETURN_ERROR_IF(s->len + n > s->max_context, d, PH_ERR_LIMIT,
                  "sequence of %lld tokens exceeds the context of %lld", (long long)(s->len + n),
                  (long long)s->max_context);
  for (int64_t i = 0; i < n; i++) {
    RETURN_ERROR_IF(tokens[i] < 0 || tokens[i] >= s->vocab, d, PH_ERR_INVALID_ARGUMENT,
                    "token %lld at %lld is outside the vocabulary of %lld", (long long)tokens[i],
                    (long long)i, (long long)s->vocab);
    s->ids[i] = tokens[i];
    for (int r = 0; r < 3; r++) s->pos[r * n + i] = s->len + i; /* text: T = H = W */
  }
  const int64_t P = s->len, T = P + n;
  for (int64_t i = 0; i < T; i++) s->mask[i] = 1;
  ph_status st;
  tensor t = tensor_make(PH_DTYPE_I64, 2, (int64_t[]){1, n}, s->ids);
  if ((st = exec_bind_input(s->e, s->in_ids, &t, d)) != PH_OK) return st;
  t = tensor_make(PH_DTYPE_I64, 2, (int64_t[]){1, T}, s->mask);
  if ((st = exec_bind_input(s->e, s->in_mask, &t, d)) != PH_OK) return st;
  t = s->has_mrope ? tensor_make(PH_DTYPE_I64, 3, (int64_t[]){3, 1, n}, s->pos)
                   : tensor_make(PH_DTYPE_I64, 2, (int64_t[]){1, n}, s->pos);
  if ((st = exec_bind_input(s->e, s->in_pos, &t, d)) != PH_OK) return st;
  for (int i = 0; i < s->n_layers; i++) {
    layer_io *l = &s->layers[i];
    if (l->full) {
      int64_t past[4] = {1, l->dims0[1], P, l->dims0[3]};
      int64_t pres[4] = {1, l->dims0[1], T, l->dims0[3]};
      tensor pk = tensor_make(PH_DTYPE_F32, 4, past, l->buf0[l->cur]);
      tensor pv = tensor_make(PH_DTYPE_F32, 4, past, l->buf1[l->cur]);
      tensor ok = tensor_make(PH_DTYPE_F32, 4, pres, l->buf0[1 - l->cur]);
      tensor ov = tensor_make(PH_DTYPE_F32, 4, pres, l->buf1[1 - l->cur]);
      if ((st = exec_bind_input(s->e, l->in0, &pk, d)) != PH_OK ||
          (st = exec_bind_input(s->e, l->in1, &pv, d)) != PH_OK ||
          (st = exec_bind_output(s->e, l->out0, &ok, d)) != PH_OK ||
          (st = exec_bind_output(s->e, l->out1, &ov, d)) != PH_OK)
        return st;
    } else {
      /* fixed state: the present output is the past input's buffer (updated in place) */
      tensor cs = tensor_make(PH_DTYPE_F32, 3, l->dims0, l->buf0[0]);
      tensor rs = tensor_make(PH_DTYPE_F32, 4, l->dims1, l->buf1[0]);
      if ((st = exec_bind_input(s->e, l->in0, &cs, d)) != PH_OK ||
          (st = exec_bind_input(s->e, l->in1, &rs, d)) != PH_OK ||
          (st = exec_bind_output(s->e, l->out0, &cs, d)) != PH_OK ||
          (st = exec_bind_output(s->e, l->out1, &rs, d)) != PH_OK)
        return st;
    }
  }
  if ((st = exec_run(s->e, d)) != PH_OK) return st;
  for (int i = 0; i < s->n_layers; i++) {
    layer_io *l = &s->layers[i];
    if (!l->full) continue;
    l->cur = 1 - l->cur;
    l->dims0[2] = l->dims1[2] = T;
  }
  s->len = T;
  if (logits) {
    const tensor *lg = exec_output(s->e, s->out_logits);
    memcpy(logits, lg->data, (size_t)(n * s->vocab) * sizeof(float));
  }
  return PH_OK;
}

const float *dense_session_state(const dense_session *s, int layer, int which, int *rank,
                                 int64_t *dims) {
  if (layer < 0 || layer >= s->n_layers || which < 0 || which > 1) return NULL;
  const layer_io *l = &s->layers[layer];
  const int64_t *src = which ? l->dims1 : l->dims0;
  int r = which ? l->rank1 : l->rank0;
  /* drop the batch dim */
  *rank = r - 1;
  for (int k = 1; k < r; k++) dims[k - 1] = src[k];
  if (l->full) return which ? l->buf1[l->cur] : l->buf0[l->cur];
  return which ? l->buf1[0] : l->buf0[0];
}
