/* exec — planning and running a finalized graph. See exec.h.
 *
 * Per value the executor keeps one `tensor` (dims, dtype, data pointer) that kernels receive
 * directly, so running a node is two small pointer arrays and a call. Planning rewrites those
 * tensors and the nodes' plans (op.h); binding only swaps data pointers.
 */
#include "exec/exec.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tensor/dtype.h"

#define EXEC_ALIGN 64

typedef struct placement {
  int64_t size;
  int value;
} placement;

typedef struct interval {
  int64_t begin, end;
} interval;

struct executor {
  graph *g;
  pool *pool;
  int n_threads;
  tensor *vt;     /* [n_values] */
  int *first_use; /* [n_values] producing node, or -1 */
  int *last_use;  /* [n_values] last node reading it; n_nodes for graph outputs */
  tensor *in;     /* [n_inputs] bound inputs */
  int *in_bound;
  tensor *out; /* [n_outputs] caller buffers */
  int *out_bound;
  int64_t *sig; /* [n_inputs * (1 + GRAPH_MAX_DIMS)] shapes of the current plan */
  int planned;
  int64_t *offset;      /* [n_values] arena offset, -1 if not in the arena */
  placement *order;     /* [n_values] planning scratch */
  interval *busy;       /* [n_values] planning scratch */
  unsigned char *plans; /* every node's plan storage (op_def.plan_bytes), one block */
  size_t *plan_off;     /* [n_nodes] offset in plans, or SIZE_MAX without a plan */
  unsigned char *arena;
  size_t arena_cap;
  void *scratch;
  size_t scratch_cap, scratch_need;
  size_t n_allocs;
  exec_stats stats;
  exec_observer observer;
  void *observer_ctx;
};

static double now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void *counted_calloc(executor *e, size_t n, size_t size) {
  e->n_allocs++;
  return calloc(n ? n : 1, size);
}

ph_status exec_create(graph *g, int n_threads, executor **out, diag *d) {
  *out = NULL;
  RETURN_ERROR_IF(!g->finalized, d, PH_ERR_INVALID_ARGUMENT, "graph is not finalized");
  executor *e = calloc(1, sizeof *e);
  RETURN_ERROR_IF(!e, d, PH_ERR_NO_MEMORY, "out of memory creating an executor");
  e->g = g;
  ph_status s = pool_create(n_threads, &e->pool, d);
  if (s != PH_OK) {
    free(e);
    return s;
  }
  e->n_threads = pool_threads(e->pool);
  int nv = g->n_values;
  e->vt = counted_calloc(e, (size_t)nv, sizeof *e->vt);
  e->first_use = counted_calloc(e, (size_t)nv, sizeof(int));
  e->last_use = counted_calloc(e, (size_t)nv, sizeof(int));
  e->offset = counted_calloc(e, (size_t)nv, sizeof(int64_t));
  e->order = counted_calloc(e, (size_t)nv, sizeof(placement));
  e->busy = counted_calloc(e, (size_t)nv, sizeof(interval));
  e->in = counted_calloc(e, (size_t)g->n_inputs, sizeof(tensor));
  e->in_bound = counted_calloc(e, (size_t)g->n_inputs, sizeof(int));
  e->out = counted_calloc(e, (size_t)g->n_outputs, sizeof(tensor));
  e->out_bound = counted_calloc(e, (size_t)g->n_outputs, sizeof(int));
  e->sig = counted_calloc(e, (size_t)g->n_inputs * (1 + GRAPH_MAX_DIMS), sizeof(int64_t));
  if (!e->vt || !e->first_use || !e->last_use || !e->offset || !e->order || !e->busy || !e->in ||
      !e->in_bound || !e->out || !e->out_bound || !e->sig) {
    exec_free(e);
    return diag_set(d, PH_ERR_NO_MEMORY, "out of memory creating an executor");
  }
  for (int v = 0; v < nv; v++) {
    e->first_use[v] = g->values[v].producer;
    e->last_use[v] = g->values[v].producer;
    e->vt[v].dtype = g->values[v].type.dtype;
  }
  for (int i = 0; i < g->n_nodes; i++) {
    const gnode *n = &g->nodes[i];
    if (n->dead) continue;
    for (int k = 0; k < n->n_inputs; k++)
      if (n->inputs[k] >= 0 && e->last_use[n->inputs[k]] < i) e->last_use[n->inputs[k]] = i;
  }
  for (int i = 0; i < g->n_outputs; i++) e->last_use[g->outputs[i]] = g->n_nodes;
  /* plan storage: fixed per op, so it is sized here once and never reallocated */
  e->plan_off = counted_calloc(e, (size_t)g->n_nodes, sizeof(size_t));
  if (!e->plan_off) {
    exec_free(e);
    return diag_set(d, PH_ERR_NO_MEMORY, "out of memory creating an executor");
  }
  size_t plan_total = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const gnode *n = &g->nodes[i];
    e->plan_off[i] = SIZE_MAX;
    if (n->dead || !n->op->plan || n->op->plan_bytes == 0) continue;
    e->plan_off[i] = plan_total;
    plan_total += (n->op->plan_bytes + OP_PLAN_ALIGN - 1) / OP_PLAN_ALIGN * OP_PLAN_ALIGN;
  }
  if (plan_total > 0) {
    e->n_allocs++;
    e->plans = aligned_alloc(OP_PLAN_ALIGN, plan_total);
    if (!e->plans) {
      exec_free(e);
      return diag_set(d, PH_ERR_NO_MEMORY, "out of memory for %zu bytes of node plans", plan_total);
    }
    memset(e->plans, 0, plan_total);
  }
  *out = e;
  return PH_OK;
}

void exec_free(executor *e) {
  if (!e) return;
  pool_free(e->pool);
  free(e->vt);
  free(e->first_use);
  free(e->last_use);
  free(e->offset);
  free(e->order);
  free(e->busy);
  free(e->in);
  free(e->in_bound);
  free(e->out);
  free(e->out_bound);
  free(e->sig);
  free(e->plans);
  free(e->plan_off);
  free(e->arena);
  free(e->scratch);
  free(e);
}

int exec_input_index(const executor *e, const char *name) {
  for (int i = 0; i < e->g->n_inputs; i++)
    if (strcmp(e->g->values[e->g->inputs[i]].name, name) == 0) return i;
  return -1;
}

int exec_output_index(const executor *e, const char *name) {
  for (int i = 0; i < e->g->n_outputs; i++)
    if (strcmp(e->g->values[e->g->outputs[i]].name, name) == 0) return i;
  return -1;
}

ph_status exec_bind_input(executor *e, int i, const tensor *t, diag *d) {
  RETURN_ERROR_IF(i < 0 || i >= e->g->n_inputs, d, PH_ERR_INVALID_ARGUMENT, "no graph input %d", i);
  e->in[i] = *t;
  e->in_bound[i] = 1;
  return PH_OK;
}

ph_status exec_bind_output(executor *e, int i, const tensor *t, diag *d) {
  RETURN_ERROR_IF(i < 0 || i >= e->g->n_outputs, d, PH_ERR_INVALID_ARGUMENT, "no graph output %d",
                  i);
  int was_bound = e->out_bound[i];
  if (!t) {
    e->out_bound[i] = 0;
  } else {
    e->out[i] = *t;
    e->out_bound[i] = 1;
  }
  if (was_bound != e->out_bound[i]) e->planned = 0; /* the arena's contents change */
  return PH_OK;
}

pool *exec_pool(executor *e) { return e->pool; }

const tensor *exec_output(const executor *e, int i) {
  if (i < 0 || i >= e->g->n_outputs) return NULL;
  return &e->vt[e->g->outputs[i]];
}

size_t exec_alloc_count(const executor *e) { return e->n_allocs; }

exec_stats exec_last_stats(const executor *e) { return e->stats; }

/* ---- planning ------------------------------------------------------------------------------ */

static ph_status check_inputs(executor *e, int *same_shapes, diag *d) {
  const graph *g = e->g;
  *same_shapes = e->planned;
  for (int i = 0; i < g->n_inputs; i++) {
    const gvalue *v = &g->values[g->inputs[i]];
    RETURN_ERROR_IF(!e->in_bound[i], d, PH_ERR_INVALID_ARGUMENT, "graph input %s is not bound",
                    v->name);
    const tensor *t = &e->in[i];
    RETURN_ERROR_IF(t->dtype != v->type.dtype || t->rank != v->type.rank, d,
                    PH_ERR_INVALID_ARGUMENT,
                    "graph input %s: bound %s rank %d, declared %s rank %d", v->name,
                    ph_dtype_name(t->dtype), t->rank, ph_dtype_name(v->type.dtype), v->type.rank);
    int64_t *sig = &e->sig[(size_t)i * (1 + GRAPH_MAX_DIMS)];
    for (int k = 0; k < t->rank; k++) {
      RETURN_ERROR_IF(t->dims[k] < 0 || (v->type.dims[k] >= 0 && t->dims[k] != v->type.dims[k]), d,
                      PH_ERR_INVALID_ARGUMENT, "graph input %s: dim %d is %lld, declared %lld",
                      v->name, k, (long long)t->dims[k], (long long)v->type.dims[k]);
      if (sig[1 + k] != t->dims[k]) *same_shapes = 0;
    }
    int64_t numel = tensor_numel(t);
    RETURN_ERROR_IF(numel > 0 && !t->data, d, PH_ERR_INVALID_ARGUMENT,
                    "graph input %s: data is NULL", v->name);
  }
  return PH_OK;
}

static void remember_shapes(executor *e) {
  for (int i = 0; i < e->g->n_inputs; i++) {
    int64_t *sig = &e->sig[(size_t)i * (1 + GRAPH_MAX_DIMS)];
    sig[0] = e->in[i].rank;
    for (int k = 0; k < e->in[i].rank; k++) sig[1 + k] = e->in[i].dims[k];
  }
}

static tinfo tensor_type(const tensor *t, const void *constant) {
  tinfo ti = tinfo_make(t->dtype, t->rank, t->dims);
  ti.data = constant;
  return ti;
}

static ph_status infer_all(executor *e, diag *d) {
  graph *g = e->g;
  for (int v = 0; v < g->n_values; v++) {
    gvalue *val = &g->values[v];
    if (val->kind != VALUE_INITIALIZER) continue;
    tensor *t = &e->vt[v];
    t->dtype = val->type.dtype;
    t->rank = val->type.rank;
    memcpy(t->dims, val->type.dims, sizeof t->dims);
    if (!val->type.data && val->lazy && e->last_use[v] >= 0) {
      /* an op other than the prepared MatMulWT reads it: materialize the canonical bytes */
      if (!graph_initializer_data(g, v, d)) return d ? d->status : PH_ERR_NO_MEMORY;
    }
    t->data = (void *)val->type.data;
  }
  for (int i = 0; i < g->n_inputs; i++) e->vt[g->inputs[i]] = e->in[i];
  for (int i = 0; i < g->n_nodes; i++) {
    const gnode *n = &g->nodes[i];
    if (n->dead) continue;
    tinfo in[GRAPH_MAX_IO], out[GRAPH_MAX_IO];
    memset(in, 0, sizeof in);
    memset(out, 0, sizeof out);
    for (int k = 0; k < n->n_inputs; k++) {
      int v = n->inputs[k];
      if (v < 0) continue;
      const gvalue *val = &g->values[v];
      in[k] = tensor_type(&e->vt[v], val->kind == VALUE_INITIALIZER ? val->type.data : NULL);
    }
    ph_status s = n->op->infer(n, in, out, d);
    if (s == PH_OK && e->plan_off[i] != SIZE_MAX)
      s = n->op->plan(n, in, e->plans + e->plan_off[i], d);
    if (s != PH_OK) return diag_prefix(d, "node %s (%s)", n->name, n->op_type);
    for (int k = 0; k < n->n_outputs; k++) {
      int v = n->outputs[k];
      if (v < 0) continue;
      tensor *t = &e->vt[v];
      t->dtype = out[k].dtype;
      t->rank = out[k].rank;
      memcpy(t->dims, out[k].dims, sizeof t->dims);
      for (int j = 0; j < t->rank; j++)
        RETURN_ERROR_IF(t->dims[j] < 0, d, PH_ERR_INTERNAL,
                        "node %s (%s): output %d shape unknown at run time", n->name, n->op_type,
                        k);
    }
    if (n->op->scratch_bytes) {
      size_t sb = n->op->scratch_bytes(n, in, e->n_threads);
      if (sb > e->scratch_need) e->scratch_need = sb;
    }
  }
  return PH_OK;
}

static int by_size_desc(const void *a, const void *b) {
  const placement *x = a, *y = b;
  if (x->size != y->size) return x->size > y->size ? -1 : 1;
  return x->value - y->value; /* deterministic */
}

static int by_begin(const void *a, const void *b) {
  const interval *x = a, *y = b;
  return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Heap sort in place: glibc's qsort allocates a merge buffer for arrays over 1 KiB, and a replan
 * runs inside steps that must not allocate (docs/engine.md). Elements up to 32 bytes. Not
 * stable; both comparators above are total orders, so the result is unique anyway. */
static void swap_elems(char *a, char *b, size_t size) {
  char t[32];
  memcpy(t, a, size);
  memcpy(a, b, size);
  memcpy(b, t, size);
}

static void sift_down(char *base, size_t root, size_t n, size_t size,
                      int (*cmp)(const void *, const void *)) {
  for (;;) {
    size_t child = 2 * root + 1;
    if (child >= n) return;
    if (child + 1 < n && cmp(base + child * size, base + (child + 1) * size) < 0) child++;
    if (cmp(base + root * size, base + child * size) >= 0) return;
    swap_elems(base + root * size, base + child * size, size);
    root = child;
  }
}

static void sort_in_place(void *arr, size_t n, size_t size,
                          int (*cmp)(const void *, const void *)) {
  char *base = arr;
  if (n < 2 || size > 32) return;
  for (size_t i = n / 2; i-- > 0;) sift_down(base, i, n, size, cmp);
  for (size_t end = n - 1; end > 0; end--) {
    swap_elems(base, base + end * size, size);
    sift_down(base, 0, end, size, cmp);
  }
}

static int is_bound_output(const executor *e, int v) {
  for (int i = 0; i < e->g->n_outputs; i++)
    if (e->g->outputs[i] == v && e->out_bound[i]) return i + 1;
  return 0;
}

static ph_status place_all(executor *e, diag *d) {
  graph *g = e->g;
  int n = 0;
  for (int v = 0; v < g->n_values; v++) {
    e->offset[v] = -1;
    int p = g->values[v].producer;
    if (p < 0 || g->nodes[p].dead || is_bound_output(e, v)) continue;
    int64_t bytes = (int64_t)dtype_size(e->vt[v].dtype) * tensor_numel(&e->vt[v]);
    e->order[n].size = (bytes + EXEC_ALIGN - 1) / EXEC_ALIGN * EXEC_ALIGN;
    e->order[n].value = v;
    n++;
  }
  _Static_assert(sizeof *e->order <= 32 && sizeof *e->busy <= 32, "sort_in_place: 32 bytes");
  sort_in_place(e->order, (size_t)n, sizeof *e->order, by_size_desc);
  int64_t total = 0;
  for (int i = 0; i < n; i++) {
    int v = e->order[i].value;
    int64_t size = e->order[i].size;
    int nb = 0;
    for (int j = 0; j < i; j++) {
      int u = e->order[j].value;
      if (e->last_use[u] < e->first_use[v] || e->last_use[v] < e->first_use[u]) continue;
      e->busy[nb].begin = e->offset[u];
      e->busy[nb].end = e->offset[u] + e->order[j].size;
      nb++;
    }
    sort_in_place(e->busy, (size_t)nb, sizeof *e->busy, by_begin);
    int64_t at = 0;
    for (int j = 0; j < nb; j++) {
      if (e->busy[j].begin >= at + size) break;
      if (e->busy[j].end > at) at = e->busy[j].end;
    }
    e->offset[v] = at;
    if (at + size > total) total = at + size;
  }
  if ((size_t)total > e->arena_cap) {
    size_t cap = (size_t)total + (size_t)total / 2;
    free(e->arena);
    e->n_allocs++;
    e->arena = aligned_alloc(EXEC_ALIGN, (cap + EXEC_ALIGN - 1) / EXEC_ALIGN * EXEC_ALIGN);
    RETURN_ERROR_IF(!e->arena, d, PH_ERR_NO_MEMORY, "out of memory for %zu bytes of activations",
                    cap);
    e->arena_cap = cap;
  }
  if (e->scratch_need > e->scratch_cap) {
    size_t cap = e->scratch_need + e->scratch_need / 2;
    free(e->scratch);
    e->n_allocs++;
    e->scratch = aligned_alloc(EXEC_ALIGN, (cap + EXEC_ALIGN - 1) / EXEC_ALIGN * EXEC_ALIGN);
    RETURN_ERROR_IF(!e->scratch, d, PH_ERR_NO_MEMORY, "out of memory for %zu bytes of scratch",
                    cap);
    e->scratch_cap = cap;
  }
  for (int v = 0; v < g->n_values; v++)
    if (e->offset[v] >= 0) e->vt[v].data = e->arena + e->offset[v];
  e->stats.arena_bytes = (size_t)total;
  return PH_OK;
}

static ph_status bind_outputs(executor *e, diag *d) {
  const graph *g = e->g;
  for (int i = 0; i < g->n_outputs; i++) {
    if (!e->out_bound[i]) continue;
    int v = g->outputs[i];
    tensor *t = &e->vt[v];
    const tensor *c = &e->out[i];
    int ok = c->dtype == t->dtype && c->rank == t->rank;
    for (int k = 0; ok && k < t->rank; k++) ok = c->dims[k] == t->dims[k];
    RETURN_ERROR_IF(!ok, d, PH_ERR_INVALID_ARGUMENT,
                    "graph output %s: the bound buffer's type does not match the inferred one",
                    g->values[v].name);
    t->data = c->data;
  }
  return PH_OK;
}

void exec_set_observer(executor *e, exec_observer fn, void *ctx) {
  e->observer = fn;
  e->observer_ctx = ctx;
}

ph_status exec_run(executor *e, diag *d) {
  double t0 = now_ns();
  graph *g = e->g;
  int same = 0;
  FORWARD_IF_ERROR(check_inputs(e, &same, d));
  if (!same) {
    e->planned = 0;
    e->scratch_need = 0;
    FORWARD_IF_ERROR(infer_all(e, d));
    FORWARD_IF_ERROR(place_all(e, d));
    remember_shapes(e);
    e->planned = 1;
  } else {
    for (int i = 0; i < g->n_inputs; i++) e->vt[g->inputs[i]].data = e->in[i].data;
  }
  FORWARD_IF_ERROR(bind_outputs(e, d));
  double t1 = now_ns();
  op_ctx ctx = {e->pool, e->scratch, e->scratch_cap, NULL};
  const tensor *in[GRAPH_MAX_IO];
  tensor *out[GRAPH_MAX_IO];
  double kernel = 0.0;
  int n_run = 0;
  for (int i = 0; i < g->n_nodes; i++) {
    const gnode *n = &g->nodes[i];
    if (n->dead) continue;
    for (int k = 0; k < n->n_inputs; k++) in[k] = n->inputs[k] >= 0 ? &e->vt[n->inputs[k]] : NULL;
    for (int k = 0; k < n->n_outputs; k++)
      out[k] = n->outputs[k] >= 0 ? &e->vt[n->outputs[k]] : NULL;
    ctx.plan = e->plan_off[i] != SIZE_MAX ? e->plans + e->plan_off[i] : NULL;
    double k0 = now_ns();
    ph_status s = n->op->run(n, in, out, &ctx, d);
    kernel += now_ns() - k0;
    if (s != PH_OK) return diag_prefix(d, "node %s (%s)", n->name, n->op_type);
    if (e->observer) e->observer(e->observer_ctx, g, n, (const tensor *const *)out);
    n_run++;
  }
  double t2 = now_ns();
  e->stats.plan_ns = t1 - t0;
  e->stats.kernel_ns = kernel;
  e->stats.dispatch_ns = (t2 - t1) - kernel;
  e->stats.n_nodes = n_run;
  return PH_OK;
}
