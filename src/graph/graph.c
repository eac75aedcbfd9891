/* graph — building, finalizing and querying the IR. See graph.h.
 *
 * Storage: values and nodes are growable arrays (realloc); every string, attribute array and
 * owned initializer lives in the graph's arena, so a graph frees in one call. Errors are sticky
 * (graph->err) so builders need not check each call.
 */
#include "graph/graph.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "base/hash.h"
#include "ops/op.h"
#include "tensor/dtype.h"

ph_status graph_create(graph **out, diag *d) {
  *out = NULL;
  graph *g = calloc(1, sizeof *g);
  RETURN_ERROR_IF(!g, d, PH_ERR_NO_MEMORY, "out of memory creating a graph");
  arena_init(&g->arena, 1 << 20);
  *out = g;
  return PH_OK;
}

void graph_free(graph *g) {
  if (!g) return;
  for (int i = 0; i < g->n_mappings; i++) fmap_close(&g->mappings[i]);
  free(g->mappings);
  free(g->borrowed);
  pages_free_huge(g->resident, g->resident_bytes);
  arena_free(&g->arena);
  free(g->values);
  free(g->nodes);
  free(g->inputs);
  free(g->outputs);
  free(g->name_slots);
  free(g);
}

ph_status graph_status(const graph *g) { return g->err.status; }

static int fail(graph *g, ph_status s, const char *fmt, const char *a, const char *b) {
  if (g->err.status == PH_OK) diag_set(&g->err, s, fmt, a, b);
  return -1;
}

static int grow(void **p, int *cap, int need, size_t elem) {
  if (need <= *cap) return 1;
  int cap2 = *cap ? *cap * 2 : 64;
  while (cap2 < need) cap2 *= 2;
  void *q = realloc(*p, (size_t)cap2 * elem);
  if (!q) return 0;
  *p = q;
  *cap = cap2;
  return 1;
}

/* ---- the name index (graph.name_slots) ---------------------------------------------------- */

#define SLOT_EMPTY   (-1)
#define SLOT_RENAMED (-2)

/* The slot holding name's id, or the empty slot ending its probe; -1 without an index. */
static int find_slot(const graph *g, const char *name) {
  if (!g->name_cap) return -1;
  const unsigned mask = (unsigned)g->name_cap - 1;
  for (unsigned i = (unsigned)hash_str(name) & mask;; i = (i + 1) & mask) {
    const int id = g->name_slots[i];
    if (id == SLOT_EMPTY || (id >= 0 && strcmp(g->values[id].name, name) == 0)) return (int)i;
  }
}

int graph_find_value(const graph *g, const char *name) {
  const int slot = find_slot(g, name);
  return slot < 0 ? -1 : g->name_slots[slot];
}

/* Indexes value id under its current name (not in the index yet); grows to keep the load of
 * ids and tombstones at most 1/2. 0 on out of memory. */
static int index_value(graph *g, int id) {
  if ((g->name_used + 1) * 2 > g->name_cap) {
    int cap = g->name_cap ? g->name_cap : 256;
    while ((g->n_values + 1) * 2 > cap) cap *= 2; /* tombstones are dropped by the rebuild */
    int *slots = malloc((size_t)cap * sizeof *slots);
    if (!slots) return 0;
    for (int i = 0; i < cap; i++) slots[i] = SLOT_EMPTY;
    free(g->name_slots);
    g->name_slots = slots;
    g->name_cap = cap;
    g->name_used = 0;
    for (int v = 0; v < g->n_values; v++)
      if (v != id) g->name_slots[find_slot(g, g->values[v].name)] = v, g->name_used++;
  }
  g->name_slots[find_slot(g, g->values[id].name)] = id;
  g->name_used++;
  return 1;
}

static int new_value(graph *g, const char *name, value_kind kind) {
  if (g->err.status != PH_OK) return -1;
  if (!name || !*name) return fail(g, PH_ERR_INVALID_ARGUMENT, "value name is empty%s%s", "", "");
  if (graph_find_value(g, name) >= 0)
    return fail(g, PH_ERR_INVALID_ARGUMENT, "value \"%s\" is defined twice%s", name, "");
  if (!grow((void **)&g->values, &g->cap_values, g->n_values + 1, sizeof(gvalue)))
    return fail(g, PH_ERR_NO_MEMORY, "out of memory adding value %s%s", name, "");
  char *nm = arena_strdup(&g->arena, name);
  if (!nm) return fail(g, PH_ERR_NO_MEMORY, "out of memory adding value %s%s", name, "");
  g->values[g->n_values].name = nm;
  if (!index_value(g, g->n_values))
    return fail(g, PH_ERR_NO_MEMORY, "out of memory adding value %s%s", name, "");
  int id = g->n_values++;
  gvalue *v = &g->values[id];
  memset(v, 0, sizeof *v);
  v->name = nm;
  v->kind = kind;
  v->producer = -1;
  v->type.rank = -1;
  for (int i = 0; i < GRAPH_MAX_DIMS; i++) v->sym[i] = -1;
  return id;
}

static int symbol_id(graph *g, const char *name) {
  for (int i = 0; i < g->n_symbols; i++)
    if (strcmp(g->symbols[i], name) == 0) return i;
  if (g->n_symbols == GRAPH_MAX_SYMBOLS || strlen(name) >= sizeof g->symbols[0])
    return fail(g, PH_ERR_LIMIT, "too many or too long symbolic dims (\"%s\")%s", name, "");
  snprintf(g->symbols[g->n_symbols], sizeof g->symbols[0], "%s", name);
  return g->n_symbols++;
}

static int set_symbols(graph *g, gvalue *v, int n, const char *const *sym_names) {
  if (!sym_names) return 0;
  for (int i = 0; i < n && i < GRAPH_MAX_DIMS; i++) {
    if (!sym_names[i]) continue;
    int s = symbol_id(g, sym_names[i]);
    if (s < 0) return -1;
    v->sym[i] = (int8_t)s;
  }
  return 0;
}

int graph_add_input(graph *g, const char *name, ph_dtype dtype, int rank, const int64_t *dims,
                    const char *const *sym_names) {
  if (rank < 0 || rank > GRAPH_MAX_DIMS)
    return fail(g, PH_ERR_INVALID_ARGUMENT, "input %s: bad rank%s", name, "");
  int id = new_value(g, name, VALUE_INPUT);
  if (id < 0) return -1;
  gvalue *v = &g->values[id];
  v->type = tinfo_make(dtype, rank, dims);
  if (set_symbols(g, v, rank, sym_names) < 0) return -1;
  if (!grow((void **)&g->inputs, &g->cap_inputs, g->n_inputs + 1, sizeof(int)))
    return fail(g, PH_ERR_NO_MEMORY, "out of memory adding input %s%s", name, "");
  g->inputs[g->n_inputs++] = id;
  return id;
}

static int add_initializer(graph *g, const char *name, ph_dtype dtype, shape s, const void *data,
                           int copy) {
  int64_t bytes = shape_bytes(&s, dtype);
  if (bytes < 0)
    return fail(g, PH_ERR_INVALID_ARGUMENT, "initializer %s: bad shape or dtype%s", name, "");
  int id = new_value(g, name, VALUE_INITIALIZER);
  if (id < 0) return -1;
  const void *p = data;
  if (copy) {
    void *q = arena_alloc(&g->arena, (size_t)bytes);
    if (!q) return fail(g, PH_ERR_NO_MEMORY, "out of memory copying initializer %s%s", name, "");
    if (data && bytes) memcpy(q, data, (size_t)bytes);
    p = q;
  }
  gvalue *v = &g->values[id];
  v->type = tinfo_make(dtype, s.n_dims, s.dims);
  v->type.data = p;
  v->n_bytes = bytes;
  v->owned = copy;
  return id;
}

int graph_add_initializer_view(graph *g, const char *name, ph_dtype dtype, shape s,
                               const void *data) {
  return add_initializer(g, name, dtype, s, data, 0);
}

int graph_add_initializer_copy(graph *g, const char *name, ph_dtype dtype, shape s,
                               const void *data) {
  return add_initializer(g, name, dtype, s, data, 1);
}

int graph_add_initializer_alloc(graph *g, const char *name, ph_dtype dtype, shape s, void **data) {
  int id = add_initializer(g, name, dtype, s, NULL, 1);
  *data = id >= 0 ? (void *)g->values[id].type.data : NULL;
  return id;
}

static float load_float(const char *p, ph_dtype dt) {
  uint16_t h;
  float f;
  switch (dt) {
  case PH_DTYPE_F32:
    memcpy(&f, p, 4);
    return f;
  case PH_DTYPE_F16:
    memcpy(&h, p, 2);
    return f16_to_f32(h);
  case PH_DTYPE_BF16:
    memcpy(&h, p, 2);
    return bf16_to_f32(h);
  case PH_DTYPE_F8E4M3:
    return f8e4m3_to_f32((uint8_t)*p);
  default:
    return 0.0f;
  }
}

static void store_float(char *p, ph_dtype dt, float f) {
  uint16_t h;
  switch (dt) {
  case PH_DTYPE_F32:
    memcpy(p, &f, 4);
    return;
  case PH_DTYPE_F16:
    h = f32_to_f16(f);
    memcpy(p, &h, 2);
    return;
  case PH_DTYPE_BF16:
    h = f32_to_bf16(f);
    memcpy(p, &h, 2);
    return;
  default:
    return;
  }
}

static int is_float_dtype(ph_dtype dt) {
  return dt == PH_DTYPE_F32 || dt == PH_DTYPE_F16 || dt == PH_DTYPE_BF16 || dt == PH_DTYPE_F8E4M3;
}

int graph_add_initializer_lazy(graph *g, const char *name, ph_dtype dtype, shape s, const void *src,
                               ph_dtype src_dtype, int transposed) {
  if (transposed && (s.n_dims != 2 || !is_float_dtype(src_dtype) || !is_float_dtype(dtype)))
    return fail(g, PH_ERR_INVALID_ARGUMENT,
                "initializer %s: a transposed initializer is a 2-D float weight%s", name, "");
  if (!dtype_size(src_dtype) ||
      (src_dtype != dtype &&
       (!is_float_dtype(src_dtype) || dtype == PH_DTYPE_F8E4M3 || !is_float_dtype(dtype))))
    return fail(g, PH_ERR_INVALID_ARGUMENT, "initializer %s: cannot convert its source dtype%s",
                name, "");
  int id = add_initializer(g, name, dtype, s, NULL, 0);
  if (id < 0) return -1;
  gvalue *v = &g->values[id];
  v->type.data = NULL; /* materialized on demand */
  v->src = src;
  v->src_dtype = src_dtype;
  v->src_transposed = transposed;
  v->lazy = 1;
  return id;
}

/* Elements of `part` per row of the weight (B: kb*blob bytes; scales: kb; zero points: the packed
 * bytes of one row). */
static int64_t quant_per_row(const quant_params *p, graph_quant_part part, int64_t k) {
  const int64_t kb = (k + p->block - 1) / p->block;
  switch (part) {
  case GRAPH_QUANT_B:
    return kb * p->block * p->bits / 8;
  case GRAPH_QUANT_SCALES:
    return kb;
  case GRAPH_QUANT_ZP:
    return (kb * p->bits + 7) / 8;
  default:
    return 0;
  }
}

int graph_add_initializer_quant(graph *g, const char *name, graph_quant_part part,
                                const quant_params *p, int64_t n, int64_t k, const void *src,
                                ph_dtype src_dtype) {
  if (g->err.status != PH_OK) return -1;
  diag d;
  diag_clear(&d);
  if (quant_sizes(p, n, k, NULL, NULL, NULL, &d) != PH_OK)
    return fail(g, d.status, "initializer %s: %s", name, d.msg);
  if (src_dtype != PH_DTYPE_F32 && src_dtype != PH_DTYPE_F16 && src_dtype != PH_DTYPE_BF16)
    return fail(g, PH_ERR_INVALID_ARGUMENT,
                "initializer %s: quantizes an f32, f16 or bf16 weight%s", name, "");
  if (part != GRAPH_QUANT_B && part != GRAPH_QUANT_SCALES && part != GRAPH_QUANT_ZP)
    return fail(g, PH_ERR_INVALID_ARGUMENT, "initializer %s: unknown quantized part%s", name, "");
  if (part == GRAPH_QUANT_ZP && p->symmetric)
    return fail(g, PH_ERR_INVALID_ARGUMENT,
                "initializer %s: symmetric quantization has no zero points%s", name, "");
  const int64_t kb = (k + p->block - 1) / p->block, per = quant_per_row(p, part, k);
  const shape s = part == GRAPH_QUANT_B ? shape_3d(n, kb, per / kb) : shape_1d(n * per);
  const ph_dtype dt = part == GRAPH_QUANT_SCALES ? p->scale_dtype : PH_DTYPE_U8;
  int id = add_initializer(g, name, dt, s, NULL, 0);
  if (id < 0) return -1;
  gvalue *v = &g->values[id];
  v->type.data = NULL; /* computed on demand */
  v->src = src;
  v->src_dtype = src_dtype;
  v->lazy = 1;
  v->quant_part = part;
  v->quant = *p;
  v->quant_rows = n;
  v->quant_cols = k;
  return id;
}

/* Elements [begin, end) of a lazy quantized initializer: each weight row the range touches is
 * quantized whole (rows are independent: blocks run along K) and the part's slice copied out. */
static ph_status quant_read(const gvalue *v, int64_t begin, int64_t end, void *dst, diag *d) {
  const quant_params *p = &v->quant;
  const int64_t K = v->quant_cols;
  const graph_quant_part part = (graph_quant_part)v->quant_part;
  const int64_t per = quant_per_row(p, part, K);
  size_t b_bytes = 0, n_scales = 0, zp_bytes = 0;
  FORWARD_IF_ERROR(quant_sizes(p, 1, K, &b_bytes, &n_scales, &zp_bytes, d));
  const size_t es = dtype_size(v->type.dtype), ses = dtype_size(v->src_dtype);
  /* one allocation, each part aligned for its type */
  const size_t off_sc = (b_bytes + 7) & ~(size_t)7;
  const size_t off_sb = off_sc + n_scales * sizeof(float);
  const size_t off_zp = off_sb + n_scales * es;
  uint8_t *buf = malloc(off_zp + zp_bytes + 1);
  RETURN_ERROR_IF(!buf, d, PH_ERR_NO_MEMORY, "out of memory quantizing %s", v->name);
  float *scales = (float *)(void *)(buf + off_sc);
  uint8_t *zp = zp_bytes ? buf + off_zp : NULL;
  ph_status s = PH_OK;
  for (int64_t r = begin / per; r * per < end && s == PH_OK; r++) {
    s = quant_quantize(p, (const char *)v->src + (size_t)r * (size_t)K * ses, v->src_dtype, 1, K,
                       buf, scales, zp, v->name, d);
    if (s != PH_OK) {
      diag_prefix(d, "quantizing row %lld of %lld (the row as [1, %lld] below)", (long long)r,
                  (long long)v->quant_rows, (long long)K);
      break;
    }
    const uint8_t *row = buf;
    if (part == GRAPH_QUANT_SCALES) {
      if ((s = quant_scales_to(v->type.dtype, scales, n_scales, buf + off_sb, d)) != PH_OK) break;
      row = buf + off_sb;
    } else if (part == GRAPH_QUANT_ZP) {
      row = zp;
    }
    const int64_t lo = r * per > begin ? r * per : begin;
    const int64_t hi = (r + 1) * per < end ? (r + 1) * per : end;
    memcpy((char *)dst + (size_t)(lo - begin) * es, row + (size_t)(lo - r * per) * es,
           (size_t)(hi - lo) * es);
  }
  free(buf);
  return s;
}

ph_status graph_quant_read_rows(const graph *g, const int *ids, int n, int64_t r0, int64_t r1,
                                void *const *dst, diag *d) {
  RETURN_ERROR_IF(n < 1 || n > 3, d, PH_ERR_INVALID_ARGUMENT, "%d quantized parts: expected 1..3",
                  n);
  const gvalue *v0 = NULL;
  void *out[4] = {NULL, NULL, NULL, NULL}; /* by graph_quant_part */
  for (int i = 0; i < n; i++) {
    RETURN_ERROR_IF(ids[i] < 0 || ids[i] >= g->n_values || !g->values[ids[i]].quant_part ||
                        g->values[ids[i]].type.data,
                    d, PH_ERR_INVALID_ARGUMENT, "value %d is not a lazy quantized initializer",
                    ids[i]);
    const gvalue *v = &g->values[ids[i]];
    if (!v0) v0 = v;
    RETURN_ERROR_IF(v->src != v0->src || v->src_dtype != v0->src_dtype ||
                        v->quant_rows != v0->quant_rows || v->quant_cols != v0->quant_cols ||
                        memcmp(&v->quant, &v0->quant, sizeof v->quant) != 0 ||
                        out[v->quant_part] != NULL,
                    d, PH_ERR_INVALID_ARGUMENT,
                    "%s and %s are not distinct parts of one quantized weight", v0->name, v->name);
    out[v->quant_part] = dst[i];
  }
  const quant_params *p = &v0->quant;
  const int64_t K = v0->quant_cols, rows = r1 - r0;
  RETURN_ERROR_IF(r0 < 0 || r1 < r0 || r1 > v0->quant_rows, d, PH_ERR_INVALID_ARGUMENT,
                  "%s: rows [%lld, %lld) outside its %lld", v0->name, (long long)r0, (long long)r1,
                  (long long)v0->quant_rows);
  if (rows == 0) return PH_OK;
  size_t b_bytes = 0, n_scales = 0, zp_bytes = 0;
  FORWARD_IF_ERROR(quant_sizes(p, rows, K, &b_bytes, &n_scales, &zp_bytes, d));
  /* what no caller asked for still has to be written somewhere: scratch */
  const int f32_scales = out[GRAPH_QUANT_SCALES] && p->scale_dtype == PH_DTYPE_F32;
  const size_t need = (out[GRAPH_QUANT_B] ? 0 : b_bytes) + (f32_scales ? 0 : n_scales * 4) +
                      (out[GRAPH_QUANT_ZP] ? 0 : zp_bytes);
  uint8_t *scratch = need ? malloc(need + 8) : NULL;
  RETURN_ERROR_IF(need && !scratch, d, PH_ERR_NO_MEMORY, "out of memory quantizing %s", v0->name);
  uint8_t *at = scratch;
  float *scales = f32_scales ? out[GRAPH_QUANT_SCALES] : (float *)(void *)at;
  if (!f32_scales) at += n_scales * 4;
  uint8_t *b = out[GRAPH_QUANT_B] ? out[GRAPH_QUANT_B] : at;
  if (!out[GRAPH_QUANT_B]) at += b_bytes;
  uint8_t *zp = !zp_bytes ? NULL : out[GRAPH_QUANT_ZP] ? out[GRAPH_QUANT_ZP] : at;
  ph_status s =
      quant_quantize(p, (const char *)v0->src + (size_t)r0 * (size_t)K * dtype_size(v0->src_dtype),
                     v0->src_dtype, rows, K, b, scales, zp, v0->name, d);
  if (s != PH_OK)
    diag_prefix(d, "quantizing rows %lld..%lld of %lld (rows counted from %lld below)",
                (long long)r0, (long long)r1 - 1, (long long)v0->quant_rows, (long long)r0);
  else if (out[GRAPH_QUANT_SCALES] && !f32_scales)
    s = quant_scales_to(p->scale_dtype, scales, n_scales, out[GRAPH_QUANT_SCALES], d);
  free(scratch);
  return s;
}

int graph_add_initializer_transposed(graph *g, const char *name, ph_dtype dtype, int64_t rows,
                                     int64_t cols, const void *src) {
  return graph_add_initializer_lazy(g, name, dtype, shape_2d(cols, rows), src, dtype, 1);
}

ph_status graph_adopt_mapping(graph *g, const fmap *m, diag *d) {
  fmap *p = realloc(g->mappings, (size_t)(g->n_mappings + 1) * sizeof *p);
  RETURN_ERROR_IF(!p, d, PH_ERR_NO_MEMORY, "out of memory");
  g->mappings = p;
  g->mappings[g->n_mappings++] = *m;
  return PH_OK;
}

ph_status graph_note_file_mapping(graph *g, const fmap *m, diag *d) {
  if (!m->data) return PH_OK; /* an empty file: nothing to view */
  fmap *p = realloc(g->borrowed, (size_t)(g->n_borrowed + 1) * sizeof *p);
  RETURN_ERROR_IF(!p, d, PH_ERR_NO_MEMORY, "out of memory");
  g->borrowed = p;
  g->borrowed[g->n_borrowed++] = *m;
  return PH_OK;
}

ph_status graph_initializer_read(const graph *g, int value, int64_t begin, int64_t end, void *dst,
                                 diag *d) {
  RETURN_ERROR_IF(value < 0 || value >= g->n_values || g->values[value].kind != VALUE_INITIALIZER,
                  d, PH_ERR_INVALID_ARGUMENT, "value %d is not an initializer", value);
  const gvalue *v = &g->values[value];
  int64_t n = tinfo_numel(&v->type);
  RETURN_ERROR_IF(begin < 0 || end < begin || end > n, d, PH_ERR_INVALID_ARGUMENT,
                  "initializer %s: range [%lld, %lld) outside its %lld elements", v->name,
                  (long long)begin, (long long)end, (long long)n);
  size_t es = dtype_size(v->type.dtype);
  if (v->type.data) {
    memcpy(dst, (const char *)v->type.data + (size_t)begin * es, (size_t)(end - begin) * es);
    return PH_OK;
  }
  if (!v->lazy) return PH_OK; /* zero-size */
  if (v->quant_part) return quant_read(v, begin, end, dst, d);
  size_t ses = dtype_size(v->src_dtype);
  const char *src = v->src;
  char *out = dst;
  if (!v->src_transposed) {
    /* contiguous: one conversion */
    return dtype_convert(out, v->type.dtype, src + (size_t)begin * ses, v->src_dtype,
                         (size_t)(end - begin), d);
  }
  /* value [cols, rows] from source [rows, cols]: element (c, r) reads source (r, c). Both dtypes
   * are float types (checked when the initializer was made), converted through f32 exactly. */
  const int64_t rows = v->type.dims[1], cols = v->type.dims[0];
  for (int64_t i = begin; i < end; i++) {
    int64_t c = i / rows, r = i % rows;
    float f = load_float(src + ((size_t)r * (size_t)cols + (size_t)c) * ses, v->src_dtype);
    store_float(out + (size_t)(i - begin) * es, v->type.dtype, f);
  }
  return PH_OK;
}

const void *graph_initializer_data(graph *g, int value, diag *d) {
  if (value < 0 || value >= g->n_values || g->values[value].kind != VALUE_INITIALIZER) {
    diag_set(d, PH_ERR_INVALID_ARGUMENT, "value %d is not an initializer", value);
    return NULL;
  }
  gvalue *v = &g->values[value];
  if (v->type.data || !v->lazy) return v->type.data;
  void *dst = arena_alloc(&g->arena, (size_t)v->n_bytes);
  if (!dst) {
    diag_set(d, PH_ERR_NO_MEMORY, "out of memory materializing %s", v->name);
    return NULL;
  }
  if (graph_initializer_read(g, value, 0, tinfo_numel(&v->type), dst, d) != PH_OK) return NULL;
  v->type.data = dst;
  v->owned = 1;
  return dst;
}

gattr attr_int(const char *name, int64_t v) {
  gattr a = {.name = name, .type = ATTR_INT, .i = v};
  return a;
}
gattr attr_float(const char *name, float v) {
  gattr a = {.name = name, .type = ATTR_FLOAT, .f = v};
  return a;
}
gattr attr_string(const char *name, const char *v) {
  gattr a = {.name = name, .type = ATTR_STRING, .s = v};
  return a;
}
gattr attr_ints(const char *name, const int64_t *v, int n) {
  gattr a = {.name = name, .type = ATTR_INTS, .ints = v, .n = n};
  return a;
}
gattr attr_floats(const char *name, const float *v, int n) {
  gattr a = {.name = name, .type = ATTR_FLOATS, .floats = v, .n = n};
  return a;
}

static int copy_attr(graph *g, gattr *dst, const gattr *src) {
  *dst = *src;
  dst->name = arena_strdup(&g->arena, src->name);
  if (!dst->name) return 0;
  if (src->type == ATTR_STRING) {
    dst->s = arena_strdup(&g->arena, src->s ? src->s : "");
    if (!dst->s) return 0;
  } else if (src->type == ATTR_INTS) {
    int64_t *p = arena_alloc(&g->arena, (size_t)src->n * sizeof *p);
    if (!p) return 0;
    if (src->n) memcpy(p, src->ints, (size_t)src->n * sizeof *p);
    dst->ints = p;
  } else if (src->type == ATTR_FLOATS) {
    float *p = arena_alloc(&g->arena, (size_t)src->n * sizeof *p);
    if (!p) return 0;
    if (src->n) memcpy(p, src->floats, (size_t)src->n * sizeof *p);
    dst->floats = p;
  }
  return 1;
}

int graph_add_node(graph *g, const char *op_type, const char *domain, const char *name,
                   int n_inputs, const int *inputs, int n_outputs, const char *const *out_names,
                   int *out_ids, int n_attrs, const gattr *attrs) {
  if (out_ids)
    for (int i = 0; i < n_outputs; i++) out_ids[i] = -1;
  if (g->err.status != PH_OK) return -1;
  if (n_inputs < 0 || n_inputs > GRAPH_MAX_IO || n_outputs < 1 || n_outputs > GRAPH_MAX_IO)
    return fail(g, PH_ERR_LIMIT, "node %s (%s): too many inputs or outputs", name, op_type);
  for (int i = 0; i < n_inputs; i++)
    if (inputs[i] < -1 || inputs[i] >= g->n_values)
      return fail(g, PH_ERR_INVALID_ARGUMENT, "node %s (%s): input refers to no value", name,
                  op_type);
  if (!grow((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof(gnode)))
    return fail(g, PH_ERR_NO_MEMORY, "out of memory adding node %s%s", name, "");
  gnode n;
  memset(&n, 0, sizeof n);
  n.name = arena_strdup(&g->arena, name);
  n.op_type = arena_strdup(&g->arena, op_type);
  n.domain = arena_strdup(&g->arena, domain ? domain : "");
  n.n_inputs = n_inputs;
  n.n_outputs = n_outputs;
  n.n_attrs = n_attrs;
  n.inputs = arena_alloc(&g->arena, (size_t)(n_inputs ? n_inputs : 1) * sizeof(int));
  n.outputs = arena_alloc(&g->arena, (size_t)n_outputs * sizeof(int));
  n.attrs = arena_alloc(&g->arena, (size_t)(n_attrs ? n_attrs : 1) * sizeof(gattr));
  if (!n.name || !n.op_type || !n.domain || !n.inputs || !n.outputs || !n.attrs)
    return fail(g, PH_ERR_NO_MEMORY, "out of memory adding node %s%s", name, "");
  if (n_inputs) memcpy(n.inputs, inputs, (size_t)n_inputs * sizeof(int));
  for (int i = 0; i < n_attrs; i++)
    if (!copy_attr(g, &n.attrs[i], &attrs[i]))
      return fail(g, PH_ERR_NO_MEMORY, "out of memory adding node %s%s", name, "");
  int node_id = g->n_nodes;
  for (int i = 0; i < n_outputs; i++) {
    n.outputs[i] = -1;
    if (!out_names || !out_names[i]) continue;
    int v = new_value(g, out_names[i], VALUE_INTERMEDIATE);
    if (v < 0) return -1;
    g->values[v].producer = node_id;
    n.outputs[i] = v;
    if (out_ids) out_ids[i] = v;
  }
  g->nodes[g->n_nodes++] = n;
  return node_id;
}

int graph_rename_value(graph *g, int value, const char *name) {
  if (g->err.status != PH_OK) return -1;
  if (value < 0 || value >= g->n_values)
    return fail(g, PH_ERR_INVALID_ARGUMENT, "rename to %s: no such value%s", name, "");
  int other = graph_find_value(g, name);
  if (other == value) return value;
  if (other >= 0)
    return fail(g, PH_ERR_INVALID_ARGUMENT, "value \"%s\" is defined twice%s", name, "");
  char *nm = arena_strdup(&g->arena, name);
  if (!nm) return fail(g, PH_ERR_NO_MEMORY, "out of memory renaming to %s%s", name, "");
  g->name_slots[find_slot(g, g->values[value].name)] = SLOT_RENAMED; /* probes go past it */
  g->values[value].name = nm;
  if (!index_value(g, value))
    return fail(g, PH_ERR_NO_MEMORY, "out of memory renaming to %s%s", name, "");
  return value;
}

int graph_mark_output(graph *g, int value, const char *const *sym_names) {
  if (g->err.status != PH_OK) return -1;
  if (value < 0 || value >= g->n_values)
    return fail(g, PH_ERR_INVALID_ARGUMENT, "graph output refers to no value%s%s", "", "");
  gvalue *v = &g->values[value];
  if (v->is_output) return value;
  if (!grow((void **)&g->outputs, &g->cap_outputs, g->n_outputs + 1, sizeof(int)))
    return fail(g, PH_ERR_NO_MEMORY, "out of memory marking output %s%s", v->name, "");
  v->is_output = 1;
  g->outputs[g->n_outputs++] = value;
  if (sym_names && v->type.rank >= 0 && set_symbols(g, v, v->type.rank, sym_names) < 0) return -1;
  return value;
}

int graph_name_dims(graph *g, int value, int n, const char *const *sym_names) {
  if (g->err.status != PH_OK) return -1;
  if (value < 0 || value >= g->n_values || n < 0 || n > GRAPH_MAX_DIMS)
    return fail(g, PH_ERR_INVALID_ARGUMENT, "naming dims: bad value or count%s%s", "", "");
  return set_symbols(g, &g->values[value], n, sym_names) < 0 ? -1 : value;
}

/* ---- finalize: resolve ops, static inference -------------------------------------------- */

static ph_status resolve_ops(graph *g, diag *d) {
  char missing[DIAG_MSG_BYTES];
  size_t pos = 0;
  int n_missing = 0;
  missing[0] = '\0';
  for (int i = 0; i < g->n_nodes; i++) {
    gnode *n = &g->nodes[i];
    if (n->dead) continue;
    n->op = op_lookup(n->domain, n->op_type);
    if (n->op && n->op->infer && n->op->run) continue;
    n->op = NULL;
    /* list each unsupported (domain, op) once */
    char item[160];
    snprintf(item, sizeof item, "%s%s%s", n->domain[0] ? n->domain : "", n->domain[0] ? "." : "",
             n->op_type);
    if (strstr(missing, item)) continue;
    int k = snprintf(missing + pos, sizeof missing - pos, "%s%s", n_missing ? ", " : "", item);
    if (k > 0 && (size_t)k < sizeof missing - pos) pos += (size_t)k;
    n_missing++;
  }
  RETURN_ERROR_IF(n_missing, d, PH_ERR_UNSUPPORTED, "%d unsupported operator type%s: %s", n_missing,
                  n_missing == 1 ? "" : "s", missing);
  return PH_OK;
}

ph_status graph_finalize(graph *g, diag *d) {
  if (g->err.status != PH_OK) {
    diag_copy(d, &g->err);
    return g->err.status;
  }
  FORWARD_IF_ERROR(resolve_ops(g, d));
  for (int i = 0; i < g->n_nodes; i++) {
    gnode *n = &g->nodes[i];
    if (n->dead) continue;
    const op_def *op = n->op;
    if (n->n_inputs < op->min_inputs || n->n_inputs > op->max_inputs ||
        n->n_outputs < op->min_outputs || n->n_outputs > op->max_outputs)
      return diag_set(d, PH_ERR_INVALID_ARGUMENT,
                      "node %s (%s): %d inputs and %d outputs, the op takes %d..%d and %d..%d",
                      n->name, n->op_type, n->n_inputs, n->n_outputs, op->min_inputs,
                      op->max_inputs, op->min_outputs, op->max_outputs);
    tinfo in[GRAPH_MAX_IO], out[GRAPH_MAX_IO];
    memset(in, 0, sizeof in);
    memset(out, 0, sizeof out);
    for (int k = 0; k < n->n_inputs; k++) {
      int v = n->inputs[k];
      if (v < 0) continue;
      const gvalue *val = &g->values[v];
      if (val->kind == VALUE_INTERMEDIATE && val->producer < 0)
        return diag_set(d, PH_ERR_INVALID_ARGUMENT, "node %s (%s): input %s has no producer",
                        n->name, n->op_type, val->name);
      if (val->producer >= i)
        return diag_set(d, PH_ERR_INVALID_ARGUMENT,
                        "node %s (%s): input %s is produced later (nodes out of order)", n->name,
                        n->op_type, val->name);
      in[k] = val->type;
      if (val->lazy && !val->type.data) in[k].data = NULL; /* contents not materialized */
    }
    ph_status s = op->infer(n, in, out, d);
    if (s != PH_OK) return diag_prefix(d, "node %s (%s)", n->name, n->op_type);
    for (int k = 0; k < n->n_outputs; k++) {
      int v = n->outputs[k];
      if (v < 0) continue;
      g->values[v].type = out[k];
      g->values[v].type.data = NULL;
    }
  }
  for (int i = 0; i < g->n_outputs; i++) {
    const gvalue *v = &g->values[g->outputs[i]];
    RETURN_ERROR_IF(v->type.dtype == PH_DTYPE_INVALID, d, PH_ERR_INVALID_ARGUMENT,
                    "graph output %s is never produced", v->name);
  }
  g->finalized = 1;
  return PH_OK;
}

/* ---- attributes and tinfo ----------------------------------------------------------------- */

const gattr *node_attr(const gnode *n, const char *name) {
  for (int i = 0; i < n->n_attrs; i++)
    if (strcmp(n->attrs[i].name, name) == 0) return &n->attrs[i];
  return NULL;
}

int64_t node_attr_int(const gnode *n, const char *name, int64_t def) {
  const gattr *a = node_attr(n, name);
  return a && a->type == ATTR_INT ? a->i : def;
}

float node_attr_float(const gnode *n, const char *name, float def) {
  const gattr *a = node_attr(n, name);
  return a && a->type == ATTR_FLOAT ? a->f : def;
}

const char *node_attr_string(const gnode *n, const char *name, const char *def) {
  const gattr *a = node_attr(n, name);
  return a && a->type == ATTR_STRING ? a->s : def;
}

tinfo tinfo_make(ph_dtype dtype, int rank, const int64_t *dims) {
  tinfo t;
  memset(&t, 0, sizeof t);
  t.dtype = dtype;
  t.rank = rank;
  for (int i = 0; i < rank && i < GRAPH_MAX_DIMS; i++) t.dims[i] = dims ? dims[i] : -1;
  return t;
}

int64_t tinfo_numel(const tinfo *t) {
  if (t->rank < 0) return -1;
  int64_t n = 1;
  for (int i = 0; i < t->rank; i++) {
    if (t->dims[i] < 0) return -1;
    if (t->dims[i] && n > INT64_MAX / t->dims[i]) return -1;
    n *= t->dims[i];
  }
  return n;
}

int64_t tinfo_bytes(const tinfo *t) {
  int64_t n = tinfo_numel(t);
  int64_t es = (int64_t)dtype_size(t->dtype);
  if (n < 0 || !es || n > INT64_MAX / es) return -1;
  return n * es;
}

const char *tinfo_format(const tinfo *t, char *buf, size_t n) {
  if (!n) return buf;
  size_t pos = 0;
  int k = snprintf(buf, n, "%s", ph_dtype_name(t->dtype));
  pos = k > 0 ? (size_t)k : 0;
  if (t->rank < 0) {
    if (pos < n) snprintf(buf + pos, n - pos, "[?..]");
    return buf;
  }
  if (pos < n) pos += (size_t)snprintf(buf + pos, n - pos, "[");
  for (int i = 0; i < t->rank && pos < n; i++) {
    if (t->dims[i] < 0)
      k = snprintf(buf + pos, n - pos, "%s?", i ? ", " : "");
    else
      k = snprintf(buf + pos, n - pos, "%s%lld", i ? ", " : "", (long long)t->dims[i]);
    if (k < 0) break;
    pos += (size_t)k;
  }
  if (pos < n) snprintf(buf + pos, n - pos, "]");
  return buf;
}
