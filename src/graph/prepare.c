/* prepare — CPU rewrites of a finalized graph. See prepare.h. */
#include "graph/prepare.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "base/log.h"
#include "base/pool.h"
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
  /* a stored [K, N] float weight (a package's MatMul B): its rows are a lazy transpose, made
   * once where the weights come to live (graph_prepare_cpu's copy), never an arena copy beside
   * the mapping */
  if (!v->lazy && v->type.data &&
      (from == PH_DTYPE_F32 || from == PH_DTYPE_F16 || from == PH_DTYPE_BF16))
    return graph_add_initializer_lazy(g, name, dt, shape_2d(N, K), v->type.data, from, 1);
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

/* ---- resident weights ---------------------------------------------------------------------- */

/* What an initializer's bytes are made from: equal keys are the same bytes (a tied embedding read
 * by the Gather and, as rows, by the LM head), copied once. */
typedef struct wkey {
  const void *src;
  int64_t n_bytes;
  int64_t cols; /* a transpose's source columns (its value's dims[0]); 0 otherwise */
  int transposed;
  ph_dtype from, to;
  int quant_part; /* a lazy quantized part (graph_quant_part) and its params; 0 otherwise */
  int bits, block, symmetric;
  int value;
  size_t offset;
} wkey;

/* The order of the bytes a key names (value and offset aside). */
static int wkey_bytes_cmp(const wkey *a, const wkey *b) {
  if (a->src != b->src) return (uintptr_t)a->src < (uintptr_t)b->src ? -1 : 1;
  if (a->n_bytes != b->n_bytes) return a->n_bytes < b->n_bytes ? -1 : 1;
  if (a->cols != b->cols) return a->cols < b->cols ? -1 : 1;
  if (a->transposed != b->transposed) return a->transposed < b->transposed ? -1 : 1;
  if (a->from != b->from) return a->from < b->from ? -1 : 1;
  if (a->to != b->to) return a->to < b->to ? -1 : 1;
  if (a->quant_part != b->quant_part) return a->quant_part < b->quant_part ? -1 : 1;
  if (a->bits != b->bits) return a->bits < b->bits ? -1 : 1;
  if (a->block != b->block) return a->block < b->block ? -1 : 1;
  if (a->symmetric != b->symmetric) return a->symmetric < b->symmetric ? -1 : 1;
  return 0;
}

static int wkey_cmp(const void *pa, const void *pb) {
  const wkey *a = pa, *b = pb;
  int c = wkey_bytes_cmp(a, b);
  return c ? c : a->value - b->value;
}

static int wkey_same(const wkey *a, const wkey *b) { return wkey_bytes_cmp(a, b) == 0; }

/* ---- copies shared between graphs ------------------------------------------------------------ */

typedef struct store_entry {
  wkey key; /* value and offset unused */
  const uint8_t *data;
} store_entry;

typedef struct store_region {
  void *p;
  size_t bytes;
} store_region;

struct weight_store {
  store_entry *e; /* [n], sorted by key (wkey_bytes_cmp), keys unique */
  size_t n;
  store_region *r;
  size_t n_r;
  size_t bytes;
};

ph_status weight_store_create(weight_store **out, diag *d) {
  *out = calloc(1, sizeof **out);
  RETURN_ERROR_IF(!*out, d, PH_ERR_NO_MEMORY, "out of memory");
  return PH_OK;
}

void weight_store_free(weight_store *s) {
  if (!s) return;
  for (size_t i = 0; i < s->n_r; i++) pages_free_huge(s->r[i].p, s->r[i].bytes);
  free(s->r);
  free(s->e);
  free(s);
}

size_t weight_store_bytes(const weight_store *s) { return s ? s->bytes : 0; }

static int store_entry_cmp(const void *pa, const void *pb) {
  return wkey_bytes_cmp(&((const store_entry *)pa)->key, &((const store_entry *)pb)->key);
}

static const uint8_t *store_find(const weight_store *s, const wkey *k) {
  if (!s || s->n == 0) return NULL;
  store_entry probe = {*k, NULL};
  const store_entry *e = bsearch(&probe, s->e, s->n, sizeof *s->e, store_entry_cmp);
  return e ? e->data : NULL;
}

/* Drops [p, p + n) of the source from the file mappings the graph views
 * (graph_note_file_mapping, graph_adopt_mapping); memory that is not a named file mapping is left
 * alone. */
static void release_range(const graph *g, const void *p, size_t n) {
  for (int i = 0; i < g->n_borrowed; i++) fmap_release(&g->borrowed[i], p, n);
  for (int i = 0; i < g->n_mappings; i++) fmap_release(&g->mappings[i], p, n);
}

/* Bytes copied between two releases of the source: the file pages resident at once while a
 * weight is copied (a 500 MB embedding must not be resident twice, even for a moment). */
#define RELEASE_STEP ((size_t)4 << 20)

/* The bytes of initializer k->value into dst, the source's file pages released as they are
 * consumed. A same-dtype transpose (a package's [K, N] weight into rows) runs in tiles of 32 x 32
 * elements, its source released every 32 rows (walking it an element at a time would go a row
 * apart on every element). */
static ph_status copy_releasing(graph *g, const wkey *k, uint8_t *dst, diag *d) {
  const gvalue *val = &g->values[k->value];
  const uint8_t *src = k->src;
  if (!k->transposed && k->from == k->to) {
    for (size_t at = 0; at < (size_t)k->n_bytes; at += RELEASE_STEP) {
      size_t n = (size_t)k->n_bytes - at < RELEASE_STEP ? (size_t)k->n_bytes - at : RELEASE_STEP;
      memcpy(dst + at, src + at, n);
      release_range(g, src + at, n);
    }
    return PH_OK;
  }
  const int64_t numel = tinfo_numel(&val->type);
  if (k->transposed && k->from == k->to) {
    enum { T = 32 };
    const int64_t rows = val->type.dims[1], cols = val->type.dims[0]; /* of the source */
    const size_t es = dtype_size(k->to);
    for (int64_t r0 = 0; r0 < rows; r0 += T) {
      const int64_t r1 = r0 + T < rows ? r0 + T : rows;
      for (int64_t c0 = 0; c0 < cols; c0 += T) {
        const int64_t c1 = c0 + T < cols ? c0 + T : cols;
        for (int64_t c = c0; c < c1; c++)
          for (int64_t r = r0; r < r1; r++)
            memcpy(dst + ((size_t)c * (size_t)rows + (size_t)r) * es,
                   src + ((size_t)r * (size_t)cols + (size_t)c) * es, es);
      }
      release_range(g, src + (size_t)r0 * (size_t)cols * es, (size_t)(r1 - r0) * (size_t)cols * es);
    }
    return PH_OK;
  }
  if (!k->transposed) { /* a conversion, element for element: in steps */
    const int64_t step = (int64_t)(RELEASE_STEP / dtype_size(k->from));
    const size_t ef = dtype_size(k->from), et = dtype_size(k->to);
    for (int64_t at = 0; at < numel; at += step) {
      const int64_t end = at + step < numel ? at + step : numel;
      FORWARD_IF_ERROR(graph_initializer_read(g, k->value, at, end, dst + (size_t)at * et, d));
      release_range(g, src + (size_t)at * ef, (size_t)(end - at) * ef);
    }
    return PH_OK;
  }
  /* a transpose that also converts (no source format has one for a MatMul weight): whole */
  FORWARD_IF_ERROR(graph_initializer_read(g, k->value, 0, numel, dst, d));
  release_range(g, src, (size_t)numel * dtype_size(k->from));
  return PH_OK;
}

/* One chunk of copy_quantized's rows, split into tasks of consecutive rows for the pool. */
typedef struct quant_job {
  const graph *g;
  const int *ids;
  int n;
  int64_t r0, r1;     /* the chunk's rows */
  size_t n_tasks;     /* task t: rows [r0 + t*len/n_tasks, r0 + (t+1)*len/n_tasks) */
  uint8_t *const *at; /* each part's destination of row 0 */
  const size_t *row_out;
  ph_status *st; /* [n_tasks] */
  diag *errs;    /* [n_tasks] */
} quant_job;

static void quant_task(void *ctx, size_t t, int thread) {
  (void)thread;
  const quant_job *j = ctx;
  const int64_t len = j->r1 - j->r0;
  const int64_t a = j->r0 + (int64_t)((size_t)len * t / j->n_tasks);
  const int64_t b = j->r0 + (int64_t)((size_t)len * (t + 1) / j->n_tasks);
  void *dst[3];
  for (int i = 0; i < j->n; i++) dst[i] = j->at[i] + (size_t)a * j->row_out[i];
  diag_clear(&j->errs[t]);
  j->st[t] = graph_quant_read_rows(j->g, j->ids, j->n, a, b, dst, &j->errs[t]);
}

/* Tasks per chunk: a few per thread, so a descheduled thread holds little (pool.h). */
#define QUANT_TASKS_PER_THREAD 4
#define QUANT_MAX_TASKS        256

/* The parts of one quantized weight (keys[first[0..n)], B / scales / zero points of the same
 * source and params) into region + each key's offset, every row quantized once for all of them
 * (graph_quant_read_rows), in chunks of about RELEASE_STEP source bytes whose file pages are
 * released as they are consumed; each chunk's rows split among the threads of p (NULL: this
 * thread). Rows are independent, so the bytes do not depend on the split; after an error the
 * chunk is quantized again on the calling thread, so the message is the one of any split. */
static ph_status copy_quantized(graph *g, const wkey *keys, const size_t *first, int n,
                                uint8_t *region, pool *p, diag *d) {
  const gvalue *v = &g->values[keys[first[0]].value];
  const int64_t rows = v->quant_rows;
  const size_t row_bytes = (size_t)v->quant_cols * dtype_size(v->src_dtype);
  const int64_t step = RELEASE_STEP / row_bytes ? (int64_t)(RELEASE_STEP / row_bytes) : 1;
  int ids[3];
  size_t row_out[3]; /* bytes of one weight row in each part */
  uint8_t *at[3];
  for (int i = 0; i < n; i++) {
    const gvalue *q = &g->values[keys[first[i]].value];
    ids[i] = keys[first[i]].value;
    row_out[i] = (size_t)(q->n_bytes / rows);
    at[i] = region + keys[first[i]].offset;
  }
  size_t max_tasks = (size_t)(p ? pool_threads(p) : 1) * QUANT_TASKS_PER_THREAD;
  if (max_tasks > QUANT_MAX_TASKS) max_tasks = QUANT_MAX_TASKS;
  ph_status st[QUANT_MAX_TASKS];
  diag *errs = malloc(max_tasks * sizeof *errs);
  RETURN_ERROR_IF(!errs, d, PH_ERR_NO_MEMORY, "out of memory quantizing %s", v->name);
  ph_status s = PH_OK;
  for (int64_t r = 0; r < rows && s == PH_OK; r += step) {
    const int64_t r1 = r + step < rows ? r + step : rows;
    quant_job j = {g, ids, n, r, r1, 1, at, row_out, st, errs};
    j.n_tasks = (size_t)(r1 - r) < max_tasks ? (size_t)(r1 - r) : max_tasks;
    pool_run(p, j.n_tasks, quant_task, &j);
    for (size_t t = 0; t < j.n_tasks && s == PH_OK; t++)
      if (st[t] != PH_OK) { /* the chunk again on this thread: the message of any split */
        void *dst[3];
        for (int i = 0; i < n; i++) dst[i] = at[i] + (size_t)r * row_out[i];
        s = graph_quant_read_rows(g, ids, n, r, r1, dst, d);
        if (s == PH_OK) s = diag_set(d, st[t], "%s", errs[t].msg);
      }
    if (s == PH_OK)
      release_range(g, (const uint8_t *)v->src + (size_t)r * row_bytes,
                    (size_t)(r1 - r) * row_bytes);
  }
  free(errs);
  return s;
}

/* 1 when keys a and b are other parts of one quantized weight (same source and params). */
static int quant_siblings(const wkey *a, const wkey *b) {
  return a->quant_part && b->quant_part && a->quant_part != b->quant_part && a->src == b->src &&
         a->from == b->from && a->bits == b->bits && a->block == b->block &&
         a->symmetric == b->symmetric;
}

/* Copies every initializer a live node reads that is not already the graph's own memory (views
 * of a file mapping or of caller memory, and lazy values) into one region of anonymous memory
 * advised for huge pages (pages_alloc_huge), each at a 64-byte aligned offset, and points the
 * values at the copies. The source's file pages are released as they are copied (every
 * RELEASE_STEP bytes), so the copy replaces the mapping in the resident set instead of doubling
 * it. */
static ph_status make_weights_resident(graph *g, weight_store *store, int n_threads, diag *d) {
  int *uses = calloc((size_t)g->n_values, sizeof *uses);
  RETURN_ERROR_IF(!uses, d, PH_ERR_NO_MEMORY, "out of memory listing the weights");
  for (int i = 0; i < g->n_outputs; i++) uses[g->outputs[i]] = 1;
  for (int i = 0; i < g->n_nodes; i++) {
    const gnode *n = &g->nodes[i];
    if (n->dead) continue;
    for (int k = 0; k < n->n_inputs; k++)
      if (n->inputs[k] >= 0) uses[n->inputs[k]] = 1;
  }
  size_t n_keys = 0;
  for (int v = 0; v < g->n_values; v++) {
    const gvalue *val = &g->values[v];
    if (val->kind != VALUE_INITIALIZER || !uses[v] || val->n_bytes <= 0 || val->owned) continue;
    if (!val->type.data && !val->lazy) continue;
    uses[n_keys++] = v; /* reuse: ids of the values to copy, in order */
  }
  wkey *keys = n_keys ? malloc(n_keys * sizeof *keys) : NULL;
  if (n_keys && !keys) {
    free(uses);
    return diag_set(d, PH_ERR_NO_MEMORY, "out of memory listing %zu weights", n_keys);
  }
  for (size_t i = 0; i < n_keys; i++) {
    const gvalue *val = &g->values[uses[i]];
    wkey *k = &keys[i];
    k->value = uses[i];
    k->n_bytes = val->n_bytes;
    k->cols = 0;
    k->to = val->type.dtype;
    k->quant_part = val->type.data ? 0 : val->quant_part;
    k->bits = k->quant_part ? val->quant.bits : 0;
    k->block = k->quant_part ? val->quant.block : 0;
    k->symmetric = k->quant_part ? val->quant.symmetric : 0;
    if (val->type.data) {
      k->src = val->type.data;
      k->transposed = 0;
      k->from = k->to;
    } else {
      k->src = val->src;
      k->transposed = val->src_transposed;
      k->cols = val->src_transposed ? val->type.dims[0] : 0;
      k->from = val->src_dtype;
    }
  }
  free(uses);
  if (n_keys > 1) qsort(keys, n_keys, sizeof *keys, wkey_cmp); /* keys is NULL when none */
  size_t total = 0, n_new = 0;
  const size_t SHARED = SIZE_MAX; /* offset of a key the store already holds */
  for (size_t i = 0; i < n_keys; i++) {
    if (i > 0 && wkey_same(&keys[i], &keys[i - 1])) {
      keys[i].offset = keys[i - 1].offset;
      continue;
    }
    if (store_find(store, &keys[i])) {
      keys[i].offset = SHARED;
      continue;
    }
    keys[i].offset = total;
    total += ((size_t)keys[i].n_bytes + 63) & ~(size_t)63;
    n_new++;
  }
  if (store && n_new > 0) { /* room for the new entries and region, before anything changes */
    store_entry *e = realloc(store->e, (store->n + n_new) * sizeof *e);
    if (e) store->e = e;
    store_region *r = e ? realloc(store->r, (store->n_r + 1) * sizeof *r) : NULL;
    if (r) store->r = r;
    if (!e || !r) {
      free(keys);
      return diag_set(d, PH_ERR_NO_MEMORY, "out of memory listing %zu weights", n_new);
    }
  }
  for (size_t i = 0; i < n_keys; i++) /* the shared ones: point at the store's copy */
    if (keys[i].offset == SHARED) {
      gvalue *val = &g->values[keys[i].value];
      val->type.data = store_find(store, &keys[i]);
      val->owned = 1;
    }
  if (total == 0) {
    free(keys);
    return PH_OK;
  }
  /* a checkpoint larger than the memory the kernel can give keeps its mapping (paged in from
   * the file as it is read) instead of being copied into memory that does not exist */
  const uint64_t avail = mem_available_bytes();
  if (avail > 0 && (uint64_t)total > avail) {
    LOG_WARN("weights: %.1f MiB do not fit in the %.1f MiB of available memory; they are read "
             "from the file mapping",
             (double)total / 1048576.0, (double)avail / 1048576.0);
    free(keys);
    return PH_OK;
  }
  uint8_t *region = pages_alloc_huge(total);
  if (!region) {
    free(keys);
    return diag_set(d, PH_ERR_NO_MEMORY, "out of memory copying %zu bytes of weights", total);
  }
  /* the region belongs to the store when there is one (it outlives the graph), else to g; the
   * values already moved point into it even after an error, so it is handed over first */
  if (store) {
    store->r[store->n_r++] = (store_region){region, total};
    store->bytes += total;
  } else {
    g->resident = region;
    g->resident_bytes = total;
  }
  ph_status st = PH_OK;
  pool *qpool = NULL; /* created at the first quantized weight */
  /* the distinct quantized keys already written with a sibling (one pass per weight) */
  unsigned char *done = calloc(n_keys ? n_keys : 1, 1);
  if (!done) st = diag_set(d, PH_ERR_NO_MEMORY, "out of memory copying the weights");
  for (size_t i = 0; i < n_keys && st == PH_OK; i++) {
    const wkey *k = &keys[i];
    if (k->offset == SHARED) continue;
    gvalue *val = &g->values[k->value];
    uint8_t *dst = region + k->offset;
    if (i == 0 || !wkey_same(k, &keys[i - 1])) {
      if (k->quant_part && !done[i]) {
        /* its siblings sit among the keys of the same source, which sort together */
        size_t first[3] = {i, 0, 0};
        int n = 1;
        for (size_t j = i + 1; j < n_keys && keys[j].src == k->src && n < 3; j++)
          if (keys[j].offset != SHARED && !wkey_same(&keys[j], &keys[j - 1]) && !done[j] &&
              quant_siblings(k, &keys[j]) &&
              (n < 2 || keys[j].quant_part != keys[first[1]].quant_part)) {
            done[j] = 1;
            first[n++] = j;
          }
        if (!qpool && n_threads != 1) st = pool_create(n_threads, &qpool, d);
        if (st == PH_OK) st = copy_quantized(g, keys, first, n, region, qpool, d);
      } else if (!k->quant_part) {
        st = copy_releasing(g, k, dst, d);
      }
      if (st == PH_OK && store) store->e[store->n++] = (store_entry){*k, dst};
    }
    val->type.data = dst;
    val->owned = 1;
  }
  pool_free(qpool);
  free(done);
  free(keys);
  if (store && store->n > 1) qsort(store->e, store->n, sizeof *store->e, store_entry_cmp);
  return st == PH_OK ? PH_OK : diag_prefix(d, "copying the weights");
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

ph_status graph_prepare_cpu(graph *g, diag *d) {
  const prepare_options o = {WEIGHTS_COPY, NULL, 0, 0};
  return graph_prepare_cpu_opts(g, &o, NULL, d);
}

ph_status graph_prepare_cpu_opts(graph *g, const prepare_options *o, int *used_bf16, diag *d) {
  if (used_bf16) *used_bf16 = 0;
  const int matmul_bf16 = o->matmul_bf16;
  RETURN_ERROR_IF(!g->finalized, d, PH_ERR_INVALID_ARGUMENT, "prepare needs a finalized graph");
  RETURN_ERROR_IF(matmul_bf16 < -1 || matmul_bf16 > 1, d, PH_ERR_INVALID_ARGUMENT,
                  "prepare: matmul_bf16 must be -1, 0 or 1, got %d", matmul_bf16);
  RETURN_ERROR_IF(o->n_threads < 0 || o->n_threads > 4096, d, PH_ERR_INVALID_ARGUMENT,
                  "prepare: n_threads %d, expected 0 (every CPU) .. 4096", o->n_threads);
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
  FORWARD_IF_ERROR(graph_finalize(g, d));
  return o->weights == WEIGHTS_MAP ? PH_OK : make_weights_resident(g, o->store, o->n_threads, d);
}
