/* prepare — CPU rewrites of a finalized graph. See prepare.h. */
#include "graph/prepare.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tensor/dtype.h"

/* The constant weight feeding input 1 of a MatMul: the initializer itself or the input of a Cast
 * that only converts a float initializer. -1 if B is not such a constant. *dt receives the dtype
 * whose values the MatMul must see: the initializer's own when there is no Cast or the Cast widens
 * to f32 (exact: every f16 and bf16 is an f32), the Cast's target when it narrows (f32 -> f16 /
 * bf16, f16 <-> bf16 round, and the prepared graph must compute with the rounded weights the
 * canonical graph means). */
static int weight_source(const graph *g, int b, ph_dtype *dt) {
  const gvalue *v = &g->values[b];
  *dt = v->type.dtype;
  if (v->kind == VALUE_INITIALIZER) return b;
  if (v->producer < 0) return -1;
  const gnode *p = &g->nodes[v->producer];
  if (strcmp(p->op_type, "Cast") != 0 || p->domain[0] || p->n_inputs != 1) return -1;
  int src = p->inputs[0];
  if (src < 0 || g->values[src].kind != VALUE_INITIALIZER) return -1;
  ph_dtype from = g->values[src].type.dtype;
  if (from != PH_DTYPE_F32 && from != PH_DTYPE_F16 && from != PH_DTYPE_BF16) return -1;
  if (*dt == PH_DTYPE_F32) *dt = from;
  return src;
}

/* An initializer [N, K] of dtype dt holding the rows of W (K, N): the lazy source view when there
 * is one (converted lazily to dt when it differs, materialized once), else a transposed copy
 * converted to dt. */
static int rows_initializer(graph *g, int w, ph_dtype dt, diag *d) {
  const gvalue *v = &g->values[w];
  char name[512];
  snprintf(name, sizeof name, "%s.rows%s%s", v->name, dt == v->type.dtype ? "" : ".",
           dt == v->type.dtype ? "" : ph_dtype_name(dt));
  int existing = graph_find_value(g, name);
  if (existing >= 0) return existing; /* a tied weight used twice */
  int64_t K = v->type.dims[0], N = v->type.dims[1];
  /* MatMulWT reads any float dtype: use the checkpoint's rows as they are stored; when the graph
   * converts the weight, the rows are converted too so the prepared graph computes exactly what
   * the canonical one means */
  if (v->lazy && v->src_transposed && v->src_dtype == v->type.dtype) {
    if (v->src_dtype == dt) return graph_add_initializer_view(g, name, dt, shape_2d(N, K), v->src);
    return graph_add_initializer_lazy(g, name, dt, shape_2d(N, K), v->src, v->src_dtype, 0);
  }
  if (v->lazy && v->src_transposed && dt == v->type.dtype)
    return graph_add_initializer_lazy(g, name, dt, shape_2d(N, K), v->src, v->src_dtype, 0);
  const ph_dtype from = v->type.dtype; /* v moves when the graph adds the rows below */
  const void *data = graph_initializer_data(g, w, d);
  if (!data) return -1;
  void *dst = NULL;
  int id = graph_add_initializer_alloc(g, name, dt, shape_2d(N, K), &dst);
  if (id < 0) return -1;
  const size_t es = dtype_size(from), ed = dtype_size(dt);
  const char *src = data;
  for (int64_t k = 0; k < K; k++)
    for (int64_t n = 0; n < N; n++) {
      char *to = (char *)dst + ((size_t)n * (size_t)K + (size_t)k) * ed;
      const char *at = src + ((size_t)k * (size_t)N + (size_t)n) * es;
      if (from == dt) {
        memcpy(to, at, es);
      } else if (dtype_convert(to, dt, at, from, 1, d) != PH_OK) {
        return -1;
      }
    }
  return id;
}

/* MoE (com.microsoft) reads its expert weights, inputs 2 (fc1) and 4 (fc2), in any float dtype.
 * An exported graph whose io dtype differs from the checkpoint's puts a Cast between the
 * initializer and the MoE (ORT's MoE wants one dtype for all of them): the MoE is rewired to read
 * the initializer itself when the Cast widens or keeps the dtype (exact), or a copy of it rounded
 * to the Cast's target when the Cast narrows (the values the canonical graph means; a narrowed
 * copy is also smaller than the source). The node is then internal: its inputs no longer share
 * ORT's one dtype. The Cast dies with its last reader (mark_dead_nodes). */
static ph_status moe_read_weights_directly(graph *g, int node, diag *d) {
  static const int SLOTS[2] = {2, 4};
  for (int s = 0; s < 2; s++) {
    const gnode *n = &g->nodes[node];
    if (n->n_inputs <= SLOTS[s]) continue;
    int v = n->inputs[SLOTS[s]];
    if (v < 0 || g->values[v].kind == VALUE_INITIALIZER) continue;
    ph_dtype dt = PH_DTYPE_INVALID;
    int w = weight_source(g, v, &dt);
    if (w < 0) continue;
    int src = w;
    if (dt != g->values[w].type.dtype) {
      const gvalue *wv = &g->values[w];
      char name[512];
      snprintf(name, sizeof name, "%s.%s", wv->name, ph_dtype_name(dt));
      src = graph_find_value(g, name); /* one weight read by two MoE nodes */
      if (src < 0) {
        const ph_dtype from = wv->type.dtype;
        const shape sh = shape_make(wv->type.rank, wv->type.dims);
        /* the canonical bytes: a plain lazy view is them already, else materialize once */
        const void *data = wv->lazy && !wv->src_transposed && wv->src_dtype == from
                               ? wv->src
                               : graph_initializer_data(g, w, d);
        if (!data) return d ? d->status : PH_ERR_NO_MEMORY;
        src = graph_add_initializer_lazy(g, name, dt, sh, data, from, 0);
        if (src < 0) return diag_set(d, graph_status(g), "%s", g->err.msg);
      }
    }
    gnode *m = &g->nodes[node];
    m->inputs[SLOTS[s]] = src;
    m->internal = 1;
  }
  return PH_OK;
}

static void mark_dead_nodes(graph *g) {
  int *uses = calloc((size_t)g->n_values, sizeof *uses);
  if (!uses) return; /* keeping dead nodes is only slower, never wrong */
  for (int i = 0; i < g->n_outputs; i++) uses[g->outputs[i]]++;
  for (int i = 0; i < g->n_nodes; i++) {
    const gnode *n = &g->nodes[i];
    if (n->dead) continue;
    for (int k = 0; k < n->n_inputs; k++)
      if (n->inputs[k] >= 0) uses[n->inputs[k]]++;
  }
  for (int i = g->n_nodes - 1; i >= 0; i--) {
    gnode *n = &g->nodes[i];
    if (n->dead) continue;
    int used = 0;
    for (int k = 0; k < n->n_outputs; k++)
      if (n->outputs[k] >= 0 && uses[n->outputs[k]]) used = 1;
    if (used) continue;
    n->dead = 1;
    for (int k = 0; k < n->n_inputs; k++)
      if (n->inputs[k] >= 0) uses[n->inputs[k]]--;
  }
  free(uses);
}

/* Adds the int attribute bf16_dot = 1 to node i (its attrs live in the graph's arena). */
static int mark_bf16_dot(graph *g, int i) {
  gnode *n = &g->nodes[i];
  gattr *attrs = arena_alloc(&g->arena, (size_t)(n->n_attrs + 1) * sizeof *attrs);
  if (!attrs) return 0;
  if (n->n_attrs) memcpy(attrs, n->attrs, (size_t)n->n_attrs * sizeof *attrs);
  attrs[n->n_attrs] = attr_int("bf16_dot", 1);
  n->attrs = attrs;
  n->n_attrs++;
  return 1;
}

ph_status graph_prepare_cpu(graph *g, diag *d) { return graph_prepare_cpu_ex(g, 0, NULL, d); }

ph_status graph_prepare_cpu_ex(graph *g, int matmul_bf16, int *used_bf16, diag *d) {
  if (used_bf16) *used_bf16 = 0;
  RETURN_ERROR_IF(!g->finalized, d, PH_ERR_INVALID_ARGUMENT, "prepare needs a finalized graph");
  RETURN_ERROR_IF(matmul_bf16 < -1 || matmul_bf16 > 1, d, PH_ERR_INVALID_ARGUMENT,
                  "prepare: matmul_bf16 must be -1, 0 or 1, got %d", matmul_bf16);
  for (int i = 0; i < g->n_nodes; i++) {
    gnode *n = &g->nodes[i];
    if (n->dead || strcmp(n->op_type, "MatMul") != 0 || n->domain[0] || n->n_inputs != 2) continue;
    ph_dtype dt = PH_DTYPE_INVALID;
    int w = weight_source(g, n->inputs[1], &dt);
    if (w < 0 || g->values[w].type.rank != 2) continue;
    const gvalue *a = &g->values[n->inputs[0]];
    if (a->type.rank < 1) continue;
    int rows = rows_initializer(g, w, dt, d);
    if (rows < 0)
      return graph_status(g) != PH_OK ? diag_set(d, graph_status(g), "%s", g->err.msg)
                                      : (d ? d->status : PH_ERR_INTERNAL);
    n = &g->nodes[i]; /* adding initializers does not move nodes, but be explicit */
    n->inputs[1] = rows;
    n->op_type = "MatMulWT";
    n->domain = "pagedhybrid.internal";
    n->internal = 1;
    n->op = NULL;
    if (matmul_bf16 == 1 || (matmul_bf16 < 0 && g->values[rows].type.dtype == PH_DTYPE_BF16)) {
      RETURN_ERROR_IF(!mark_bf16_dot(g, i), d, PH_ERR_NO_MEMORY, "prepare: out of memory");
      if (used_bf16) *used_bf16 = 1;
    }
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const gnode *n = &g->nodes[i];
    if (n->dead || strcmp(n->op_type, "MoE") != 0 || strcmp(n->domain, "com.microsoft") != 0)
      continue;
    FORWARD_IF_ERROR(moe_read_weights_directly(g, i, d));
  }
  mark_dead_nodes(g);
  g->finalized = 0;
  return graph_finalize(g, d);
}
