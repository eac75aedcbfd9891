/* onnx_write — a finalized, unprepared graph as model.onnx + model.onnx.data. See onnx.h.
 *
 * Order of work: validate the whole graph (dead / internal nodes, domains, dtypes) before any
 * file is touched; build the ModelProto in an arena (every string copied, so the proto never
 * points into the graph); stream the initializers' bytes into model.onnx.data, recording each
 * one's offset and length in its TensorProto (initializers under ONNX_INLINE_MAX_BYTES go into
 * raw_data instead: onnx.h says why); pack the proto last and write model.onnx. Both files
 * are written through base/wfile.h into temporary files beside them, and renamed into place
 * (data first) only when both are complete: a failure leaves the directory as it was (an older
 * package in it untouched), so it never holds a model.onnx whose data file is short.
 *
 * Streaming, bounded by WRITE_CHUNK_BYTES of buffer whatever the model size:
 *   - bytes the graph already holds (checkpoint views, owned constants) go straight from memory
 *     to write(), in bounded slices;
 *   - lazy converted weights go through graph_initializer_read() a block of value rows at a time;
 *   - lazy quantized weights (MatMulNBits' B, scales, zero points) are quantized once for all
 *     their parts: the pass that writes the first part keeps the later, small parts (quant_pass);
 *   - lazy transposed weights (value [C, R] read from a source [R, C]) are produced here a block
 *     of value rows at a time, each block filled by TILE x TILE tiles: a tile reads TILE source
 *     rows of TILE contiguous columns and writes TILE value rows of TILE contiguous elements,
 *     so both sides stay in cache (graph_initializer_read's element loop strides through the
 *     source a full row per element, which is too slow for a 54 GB export). Equal bytes to
 *     graph_initializer_read() are tested.
 * Determinism: nodes in graph order, initializers in value id order, generated dim names from
 * value names, no timestamps; protobuf-c packs fields in tag order.
 */
#include <assert.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/arena.h"
#include "base/fmap.h"
#include "base/wfile.h"
#include "io/onnx.h"
#include "onnx.pb-c.h"
#include "tensor/dtype.h"

#define WRITE_CHUNK_BYTES ((size_t)32 << 20) /* staging buffer for converted/transposed rows */
#define TILE              64                 /* transpose tile edge, elements */

#define QCACHE_SLOTS 8

typedef struct writer {
  graph *g;
  diag *d;
  arena a;            /* every proto struct and string; freed at the end */
  wfile data;         /* model.onnx.data, until committed */
  wfile model;        /* model.onnx, until committed */
  int64_t offset;     /* bytes written to model.onnx.data so far */
  unsigned char *buf; /* WRITE_CHUNK_BYTES staging buffer */
  int structure_only; /* lay out offsets as if writing, but write no data file */

  const onnx_progress *progress;                    /* NULL: none */
  int64_t tensors_done, tensors_total, bytes_total; /* what progress reports */

  const unsigned char *used; /* the initializers the package holds (validate) */
  /* later parts (scales, zero points) of quantized weights, computed in the same pass as an
   * earlier part (quant_pass) and not written yet: value id (-1: empty slot), bytes, and the
   * bytes held in all */
  int qcache_id[QCACHE_SLOTS];
  uint8_t *qcache[QCACHE_SLOTS];
  size_t qcache_bytes;
  int64_t quant_rows;      /* weight rows per quantization pass, 0: by the buffer */
  int64_t quant_rows_done; /* weight rows quantized, all passes together */
} writer;

static void report_progress(const writer *w) {
  if (w->progress && w->progress->fn)
    w->progress->fn(w->progress->user, w->tensors_done, w->tensors_total, w->offset,
                    w->bytes_total);
}

/* ---- proto construction (arena-backed) ---------------------------------------------------- */

static void *alloc_n(writer *w, size_t n, size_t size) {
  if (n && size > SIZE_MAX / n) return NULL;
  return arena_alloc(&w->a, n * size);
}

static char *str(writer *w, const char *s) { return arena_strdup(&w->a, s ? s : ""); }

#define NEW_MSG(w, type, init_macro, out)                                                          \
  do {                                                                                             \
    type init_ = init_macro;                                                                       \
    (out) = arena_alloc(&(w)->a, sizeof(type));                                                    \
    if (out) *(out) = init_;                                                                       \
  } while (0)

static ph_status oom(writer *w) {
  return diag_set(w->d, PH_ERR_NO_MEMORY, "out of memory building the ONNX model");
}

static Onnx__AttributeProto *make_attr(writer *w, const gattr *at) {
  Onnx__AttributeProto *p;
  NEW_MSG(w, Onnx__AttributeProto, ONNX__ATTRIBUTE_PROTO__INIT, p);
  if (!p || !(p->name = str(w, at->name))) return NULL;
  p->has_type = 1;
  switch (at->type) {
  case ATTR_INT:
    p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT;
    p->has_i = 1;
    p->i = at->i;
    break;
  case ATTR_FLOAT:
    p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT;
    p->has_f = 1;
    p->f = at->f;
    break;
  case ATTR_STRING: {
    p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING;
    char *s = str(w, at->s);
    if (!s) return NULL;
    p->has_s = 1;
    p->s.data = (uint8_t *)s;
    p->s.len = strlen(s);
    break;
  }
  case ATTR_INTS:
    p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS;
    p->n_ints = (size_t)at->n;
    p->ints = alloc_n(w, p->n_ints, sizeof *p->ints);
    if (!p->ints) return NULL;
    if (at->n) memcpy(p->ints, at->ints, p->n_ints * sizeof *p->ints);
    break;
  case ATTR_FLOATS:
    p->type = ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS;
    p->n_floats = (size_t)at->n;
    p->floats = alloc_n(w, p->n_floats, sizeof *p->floats);
    if (!p->floats) return NULL;
    if (at->n) memcpy(p->floats, at->floats, p->n_floats * sizeof *p->floats);
    break;
  }
  return p;
}

static const char *value_name(const graph *g, int id) { return id < 0 ? "" : g->values[id].name; }

static Onnx__NodeProto *make_node(writer *w, const gnode *n) {
  Onnx__NodeProto *p;
  NEW_MSG(w, Onnx__NodeProto, ONNX__NODE_PROTO__INIT, p);
  if (!p) return NULL;
  p->name = str(w, n->name);
  p->op_type = str(w, n->op_type);
  p->domain = str(w, n->domain);
  p->n_input = (size_t)n->n_inputs;
  p->input = alloc_n(w, p->n_input, sizeof *p->input);
  p->n_output = (size_t)n->n_outputs;
  p->output = alloc_n(w, p->n_output, sizeof *p->output);
  p->n_attribute = (size_t)n->n_attrs;
  p->attribute = alloc_n(w, p->n_attribute, sizeof *p->attribute);
  if (!p->name || !p->op_type || !p->domain || !p->input || !p->output || !p->attribute)
    return NULL;
  for (int i = 0; i < n->n_inputs; i++)
    if (!(p->input[i] = str(w, value_name(w->g, n->inputs[i])))) return NULL;
  for (int i = 0; i < n->n_outputs; i++)
    if (!(p->output[i] = str(w, value_name(w->g, n->outputs[i])))) return NULL;
  for (int i = 0; i < n->n_attrs; i++)
    if (!(p->attribute[i] = make_attr(w, &n->attrs[i]))) return NULL;
  return p;
}

/* A graph input or output: element type and every dim as a number, the graph's symbol, or a
 * generated "<value>_dim<k>" (so a runtime binds each unknown dim by a name). Unknown rank:
 * no shape at all. */
static Onnx__ValueInfoProto *make_value_info(writer *w, int id) {
  const gvalue *v = &w->g->values[id];
  Onnx__ValueInfoProto *p;
  Onnx__TypeProto *t;
  Onnx__TypeProto__Tensor *tt;
  NEW_MSG(w, Onnx__ValueInfoProto, ONNX__VALUE_INFO_PROTO__INIT, p);
  NEW_MSG(w, Onnx__TypeProto, ONNX__TYPE_PROTO__INIT, t);
  NEW_MSG(w, Onnx__TypeProto__Tensor, ONNX__TYPE_PROTO__TENSOR__INIT, tt);
  if (!p || !t || !tt || !(p->name = str(w, v->name))) return NULL;
  p->type = t;
  t->value_case = ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE;
  t->tensor_type = tt;
  tt->has_elem_type = 1;
  tt->elem_type = dtype_to_onnx(v->type.dtype);
  if (v->type.rank < 0) return p;
  Onnx__TensorShapeProto *sh;
  NEW_MSG(w, Onnx__TensorShapeProto, ONNX__TENSOR_SHAPE_PROTO__INIT, sh);
  if (!sh) return NULL;
  tt->shape = sh;
  sh->n_dim = (size_t)v->type.rank;
  sh->dim = alloc_n(w, sh->n_dim ? sh->n_dim : 1, sizeof *sh->dim);
  if (!sh->dim) return NULL;
  for (int k = 0; k < v->type.rank; k++) {
    Onnx__TensorShapeProto__Dimension *dm;
    NEW_MSG(w, Onnx__TensorShapeProto__Dimension, ONNX__TENSOR_SHAPE_PROTO__DIMENSION__INIT, dm);
    if (!dm) return NULL;
    sh->dim[k] = dm;
    int sym = v->sym[k];
    if (v->type.dims[k] >= 0) {
      dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE;
      dm->dim_value = v->type.dims[k];
    } else {
      char gen[256];
      const char *name = gen;
      if (sym >= 0 && sym < w->g->n_symbols && w->g->symbols[sym][0])
        name = w->g->symbols[sym];
      else
        snprintf(gen, sizeof gen, "%s_dim%d", v->name, k);
      dm->value_case = ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM;
      if (!(dm->dim_param = str(w, name))) return NULL;
    }
  }
  return p;
}

static Onnx__StringStringEntryProto *make_entry(writer *w, const char *key, const char *value) {
  Onnx__StringStringEntryProto *e;
  NEW_MSG(w, Onnx__StringStringEntryProto, ONNX__STRING_STRING_ENTRY_PROTO__INIT, e);
  if (!e || !(e->key = str(w, key)) || !(e->value = str(w, value))) return NULL;
  return e;
}

/* TensorProto header of initializer id: name, dims, element type. */
static Onnx__TensorProto *make_tensor_header(writer *w, int id) {
  const gvalue *v = &w->g->values[id];
  Onnx__TensorProto *p;
  NEW_MSG(w, Onnx__TensorProto, ONNX__TENSOR_PROTO__INIT, p);
  if (!p || !(p->name = str(w, v->name))) return NULL;
  p->n_dims = (size_t)v->type.rank;
  p->dims = alloc_n(w, p->n_dims ? p->n_dims : 1, sizeof *p->dims);
  if (!p->dims) return NULL;
  for (int k = 0; k < v->type.rank; k++) p->dims[k] = v->type.dims[k];
  p->has_data_type = 1;
  p->data_type = dtype_to_onnx(v->type.dtype);
  return p;
}

/* ---- quantized weights: every part from one pass ------------------------------------------ */

/* At most this many bytes of later parts are kept at once; a pass that would exceed it (a weight
 * of more than about 2^31 elements) leaves its later parts to passes of their own. */
#define QCACHE_MAX_BYTES ((size_t)512 << 20)

static ph_status put(writer *w, const void *data, size_t n);

/* Takes the cached bytes of value id (NULL if no earlier pass left them); the caller frees them. */
static uint8_t *qcache_take(writer *w, int id) {
  for (int i = 0; i < QCACHE_SLOTS; i++)
    if (w->qcache[i] && w->qcache_id[i] == id) {
      uint8_t *b = w->qcache[i];
      w->qcache[i] = NULL;
      w->qcache_id[i] = -1;
      w->qcache_bytes -= tinfo_bytes(&w->g->values[id].type);
      return b;
    }
  return NULL;
}

static void qcache_clear(writer *w) {
  for (int i = 0; i < QCACHE_SLOTS; i++) {
    free(w->qcache[i]);
    w->qcache[i] = NULL;
    w->qcache_id[i] = -1;
  }
  w->qcache_bytes = 0;
}

/* The lazy quantized part id (graph_add_initializer_quant) in one pass over its weight's rows that
 * also computes the scales and zero points of that weight the package holds later (higher value
 * ids: the writer goes in id order) into the cache, so each weight row is quantized once for all
 * its parts (graph_quant_read_rows) where graph_initializer_read per part quantized it once per
 * part. A later B is not cached (it is the big part; it gets its own pass). dst: the whole part
 * (an inline tensor); NULL: streamed to the data file through w->buf. */
static ph_status quant_pass(writer *w, int id, uint8_t *dst) {
  const graph *g = w->g;
  const gvalue *v = &g->values[id];
  int ids[3] = {id, -1, -1}, slot[3] = {-1, -1, -1}, n = 1;
  size_t row_out[3] = {0, 0, 0}, total = 0;
  const int64_t rows = v->quant_rows;
  for (int j = id + 1; j < g->n_values && n < 3; j++) {
    const gvalue *u = &g->values[j];
    if (!w->used[j] || !u->quant_part || u->type.data || u->quant_part == GRAPH_QUANT_B ||
        u->quant_part == v->quant_part ||
        (n == 2 && u->quant_part == g->values[ids[1]].quant_part) || u->src != v->src ||
        u->src_dtype != v->src_dtype || u->quant_rows != rows || u->quant_cols != v->quant_cols ||
        memcmp(&u->quant, &v->quant, sizeof u->quant) != 0)
      continue;
    total += tinfo_bytes(&u->type);
    ids[n++] = j;
  }
  /* free slots for the later parts, or none cached */
  for (int i = 1, k = 0; i < n; i++) {
    while (k < QCACHE_SLOTS && w->qcache[k]) k++;
    slot[i] = k < QCACHE_SLOTS ? k++ : -1;
    if (slot[i] < 0) n = 1;
  }
  if (w->qcache_bytes + total > QCACHE_MAX_BYTES) n = 1;
  for (int i = 0; i < n; i++) row_out[i] = tinfo_bytes(&g->values[ids[i]].type) / (size_t)rows;
  for (int i = 1; i < n; i++) {
    const size_t bytes = tinfo_bytes(&g->values[ids[i]].type);
    RETURN_ERROR_IF(!(w->qcache[slot[i]] = malloc(bytes + 1)), w->d, PH_ERR_NO_MEMORY,
                    "out of memory keeping %zu bytes of %s", bytes, g->values[ids[i]].name);
    w->qcache_id[slot[i]] = ids[i];
    w->qcache_bytes += bytes;
  }
  int64_t per = rows; /* an inline part: all rows at once */
  if (!dst) per = row_out[0] <= WRITE_CHUNK_BYTES ? (int64_t)(WRITE_CHUNK_BYTES / row_out[0]) : 1;
  if (w->quant_rows > 0 && per > w->quant_rows) per = w->quant_rows;
  for (int64_t r = 0; r < rows; r += per) {
    const int64_t r1 = rows - r < per ? rows : r + per;
    void *out[3] = {dst ? dst + (size_t)r * row_out[0] : w->buf, NULL, NULL};
    for (int i = 1; i < n; i++) out[i] = w->qcache[slot[i]] + (size_t)r * row_out[i];
    FORWARD_IF_ERROR(graph_quant_read_rows(g, ids, n, r, r1, out, w->d));
    w->quant_rows_done += r1 - r;
    if (!dst) FORWARD_IF_ERROR(put(w, w->buf, (size_t)(r1 - r) * row_out[0]));
  }
  return PH_OK;
}

/* A small initializer with its bytes in raw_data (scalars and zero-size tensors included). */
static ph_status make_tensor_inline(writer *w, int id, Onnx__TensorProto **out) {
  const gvalue *v = &w->g->values[id];
  Onnx__TensorProto *p = make_tensor_header(w, id);
  int64_t numel = tinfo_numel(&v->type);
  size_t bytes = (size_t)numel * dtype_size(v->type.dtype);
  uint8_t *data = p ? arena_alloc(&w->a, bytes) : NULL;
  if (!data) return oom(w);
  uint8_t *cached = v->quant_part ? qcache_take(w, id) : NULL;
  if (cached) {
    memcpy(data, cached, bytes);
    free(cached);
  } else if (numel > 0 && v->quant_part && !v->type.data) {
    FORWARD_IF_ERROR(quant_pass(w, id, data));
  } else if (numel > 0) {
    FORWARD_IF_ERROR(graph_initializer_read(w->g, id, 0, numel, data, w->d));
  }
  p->has_raw_data = 1;
  p->raw_data.data = data;
  p->raw_data.len = bytes;
  *out = p;
  return PH_OK;
}

/* An initializer whose bytes sit at [offset, offset + length) of the data file. */
static Onnx__TensorProto *make_tensor_external(writer *w, int id, int64_t offset, int64_t length) {
  Onnx__TensorProto *p = make_tensor_header(w, id);
  if (!p) return NULL;
  p->has_data_location = 1;
  p->data_location = ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  char off[32], len[32];
  snprintf(off, sizeof off, "%" PRId64, offset);
  snprintf(len, sizeof len, "%" PRId64, length);
  p->n_external_data = 3;
  p->external_data = alloc_n(w, 3, sizeof *p->external_data);
  if (!p->external_data) return NULL;
  p->external_data[0] = make_entry(w, "location", ONNX_DATA_FILE);
  p->external_data[1] = make_entry(w, "offset", off);
  p->external_data[2] = make_entry(w, "length", len);
  if (!p->external_data[0] || !p->external_data[1] || !p->external_data[2]) return NULL;
  return p;
}

/* ---- data file -------------------------------------------------------------------------- */

static ph_status put(writer *w, const void *data, size_t n) {
  const unsigned char *p = data;
  if (w->structure_only) {
    w->offset += (int64_t)n;
    return PH_OK;
  }
  const uint8_t *b = p;
  while (n > 0) { /* in slices, so a terminal sees progress within a large tensor */
    const size_t k = n < WRITE_CHUNK_BYTES ? n : WRITE_CHUNK_BYTES;
    FORWARD_IF_ERROR(wfile_write(&w->data, b, k, w->d));
    b += k;
    n -= k;
    w->offset += (int64_t)k;
    report_progress(w);
  }
  return PH_OK;
}

static ph_status pad_to_alignment(writer *w) {
  static const unsigned char zeros[ONNX_DATA_ALIGN];
  int64_t rem = w->offset % ONNX_DATA_ALIGN;
  return rem ? put(w, zeros, (size_t)(ONNX_DATA_ALIGN - rem)) : PH_OK;
}

/* Tiles: TILE source rows of TILE contiguous elements are copied into a local tile (contiguous
 * reads), transposed there (in L1), and written out as TILE value rows of TILE contiguous
 * elements. Strided access never touches the big buffers, which is what made the per-element
 * loop slow (about 4 ns per bf16 element against about 1.3 ns tiled, docs/export.md). */
#define TRANSPOSE_TILE(dst, src, tr, tc)                                                           \
  do {                                                                                             \
    for (int64_t j_ = 0; j_ < (tc); j_++)                                                          \
      for (int64_t i_ = 0; i_ < (tr); i_++) (dst)[j_ * TILE + i_] = (src)[i_ * TILE + j_];         \
  } while (0)

/* Value [C, R] from source [R, C]: value rows [c0, c0 + tc) into w->buf. Same dtype: element
 * moves (bit-exact, NaN payloads kept); otherwise through f32 with dtype_convert (exact
 * widening, one rounding), which is what graph_initializer_read does. */
static ph_status transpose_rows(writer *w, const gvalue *v, int64_t c0, int64_t tc) {
  const int64_t C = v->type.dims[0], R = v->type.dims[1];
  const ph_dtype st = v->src_dtype, dt = v->type.dtype;
  const size_t ses = dtype_size(st), es = dtype_size(dt);
  const unsigned char *src = v->src;
  unsigned char *out = w->buf;
  static_assert(TILE * TILE * sizeof(float) <= 16384, "two tiles fit the stack and L1");
  union {
    uint16_t u16[TILE * TILE];
    uint32_t u32[TILE * TILE];
    float f32[TILE * TILE];
  } a, b;
  for (int64_t r0 = 0; r0 < R; r0 += TILE) {
    const int64_t tr = R - r0 < TILE ? R - r0 : TILE;
    for (int64_t cb = 0; cb < tc; cb += TILE) {
      const int64_t tcb = tc - cb < TILE ? tc - cb : TILE;
      const unsigned char *s = src + ((size_t)r0 * (size_t)C + (size_t)(c0 + cb)) * ses;
      unsigned char *o = out + ((size_t)cb * (size_t)R + (size_t)r0) * es;
      if (st == dt && (es == 2 || es == 4)) {
        for (int64_t i = 0; i < tr; i++)
          memcpy(es == 2 ? (void *)&a.u16[i * TILE] : (void *)&a.u32[i * TILE],
                 s + (size_t)i * (size_t)C * es, (size_t)tcb * es);
        if (es == 2)
          TRANSPOSE_TILE(b.u16, a.u16, tr, tcb);
        else
          TRANSPOSE_TILE(b.u32, a.u32, tr, tcb);
        for (int64_t j = 0; j < tcb; j++)
          memcpy(o + (size_t)j * (size_t)R * es,
                 es == 2 ? (const void *)&b.u16[j * TILE] : (const void *)&b.u32[j * TILE],
                 (size_t)tr * es);
        continue;
      }
      for (int64_t i = 0; i < tr; i++)
        FORWARD_IF_ERROR(dtype_convert(&a.f32[i * TILE], PH_DTYPE_F32,
                                       s + (size_t)i * (size_t)C * ses, st, (size_t)tcb, w->d));
      TRANSPOSE_TILE(b.f32, a.f32, tr, tcb);
      for (int64_t j = 0; j < tcb; j++)
        FORWARD_IF_ERROR(dtype_convert(o + (size_t)j * (size_t)R * es, dt, &b.f32[j * TILE],
                                       PH_DTYPE_F32, (size_t)tr, w->d));
    }
  }
  return PH_OK;
}

static ph_status write_initializer(writer *w, int id) {
  const gvalue *v = &w->g->values[id];
  const size_t es = dtype_size(v->type.dtype);
  const int64_t numel = tinfo_numel(&v->type);
  const size_t chunk_elems = WRITE_CHUNK_BYTES / es;
  if (numel == 0) return PH_OK;
  if (v->type.data) return put(w, v->type.data, (size_t)numel * es);
  if (v->quant_part) {
    uint8_t *cached = qcache_take(w, id);
    if (!cached) return quant_pass(w, id, NULL);
    ph_status s = put(w, cached, (size_t)numel * es);
    free(cached);
    return s;
  }
  if (v->lazy && v->src_transposed) {
    const int64_t C = v->type.dims[0], R = v->type.dims[1];
    const int64_t rows_per =
        R > 0 && (size_t)R < chunk_elems ? (int64_t)(chunk_elems / (size_t)R) : 1;
    /* one value row longer than the buffer cannot be staged in tiles; such a row is one
     * column of the source, so the element path costs no more than any other way */
    if ((size_t)R > chunk_elems) {
      for (int64_t b = 0; b < numel; b += (int64_t)chunk_elems) {
        int64_t e = numel - b < (int64_t)chunk_elems ? numel : b + (int64_t)chunk_elems;
        FORWARD_IF_ERROR(graph_initializer_read(w->g, id, b, e, w->buf, w->d));
        FORWARD_IF_ERROR(put(w, w->buf, (size_t)(e - b) * es));
      }
      return PH_OK;
    }
    for (int64_t c0 = 0; c0 < C; c0 += rows_per) {
      int64_t tc = C - c0 < rows_per ? C - c0 : rows_per;
      FORWARD_IF_ERROR(transpose_rows(w, v, c0, tc));
      FORWARD_IF_ERROR(put(w, w->buf, (size_t)(tc * R) * es));
    }
    return PH_OK;
  }
  RETURN_ERROR_IF(!v->lazy, w->d, PH_ERR_INTERNAL, "initializer %s has no data", v->name);
  /* converted (not transposed): whole value rows per block while a row fits the buffer */
  int64_t row = v->type.rank > 0 && v->type.dims[0] > 0 ? numel / v->type.dims[0] : numel;
  int64_t block = (size_t)row <= chunk_elems ? (int64_t)(chunk_elems / (size_t)row) * row
                                             : (int64_t)chunk_elems;
  for (int64_t b = 0; b < numel; b += block) {
    int64_t e = numel - b < block ? numel : b + block;
    FORWARD_IF_ERROR(graph_initializer_read(w->g, id, b, e, w->buf, w->d));
    FORWARD_IF_ERROR(put(w, w->buf, (size_t)(e - b) * es));
  }
  return PH_OK;
}

/* ---- validation ------------------------------------------------------------------------- */

static ph_status check_value_dtype(writer *w, int id, const char *what) {
  const gvalue *v = &w->g->values[id];
  RETURN_ERROR_IF(dtype_to_onnx(v->type.dtype) == 0, w->d, PH_ERR_UNSUPPORTED,
                  "%s %s has dtype %s, which has no ONNX element type", what, v->name,
                  ph_dtype_name(v->type.dtype));
  return PH_OK;
}

/* Everything that could fail on the graph's content, before any file is created. Marks in
 * used[] the initializers the package holds: read by a node, or a graph output. */
static ph_status validate(writer *w, unsigned char *used) {
  graph *g = w->g;
  for (int i = 0; i < g->n_nodes; i++) {
    const gnode *n = &g->nodes[i];
    RETURN_ERROR_IF(n->dead || n->internal, w->d, PH_ERR_INVALID_ARGUMENT,
                    "node %s (%s) is %s: only an unprepared graph can be exported", n->name,
                    n->op_type, n->dead ? "dead (removed by a prepare pass)" : "internal");
    RETURN_ERROR_IF(strcmp(n->domain, "") != 0 && strcmp(n->domain, "com.microsoft") != 0, w->d,
                    PH_ERR_UNSUPPORTED,
                    "node %s (%s): domain \"%s\" is not ai.onnx or com.microsoft", n->name,
                    n->op_type, n->domain);
    for (int k = 0; k < n->n_inputs; k++)
      if (n->inputs[k] >= 0 && g->values[n->inputs[k]].kind == VALUE_INITIALIZER)
        used[n->inputs[k]] = 1;
  }
  for (int i = 0; i < g->n_outputs; i++)
    if (g->values[g->outputs[i]].kind == VALUE_INITIALIZER) used[g->outputs[i]] = 1;
  for (int i = 0; i < g->n_inputs; i++)
    FORWARD_IF_ERROR(check_value_dtype(w, g->inputs[i], "input"));
  for (int i = 0; i < g->n_outputs; i++)
    FORWARD_IF_ERROR(check_value_dtype(w, g->outputs[i], "output"));
  for (int i = 0; i < g->n_values; i++) {
    if (!used[i]) continue;
    const gvalue *v = &g->values[i];
    FORWARD_IF_ERROR(check_value_dtype(w, i, "initializer"));
    RETURN_ERROR_IF(tinfo_numel(&v->type) < 0 || tinfo_bytes(&v->type) < 0, w->d,
                    PH_ERR_INVALID_ARGUMENT, "initializer %s has an unknown or overflowing size",
                    v->name);
    RETURN_ERROR_IF(v->lazy && v->src_transposed && v->type.rank != 2, w->d, PH_ERR_INTERNAL,
                    "transposed initializer %s is not 2-D", v->name);
  }
  return PH_OK;
}

/* ---- the whole package ------------------------------------------------------------------ */

static ph_status build_and_write(writer *w, const char *dir, const char *producer,
                                 unsigned char *used) {
  graph *g = w->g;
  Onnx__ModelProto *m;
  Onnx__GraphProto *gp;
  Onnx__OperatorSetIdProto *ops[2];
  NEW_MSG(w, Onnx__ModelProto, ONNX__MODEL_PROTO__INIT, m);
  NEW_MSG(w, Onnx__GraphProto, ONNX__GRAPH_PROTO__INIT, gp);
  NEW_MSG(w, Onnx__OperatorSetIdProto, ONNX__OPERATOR_SET_ID_PROTO__INIT, ops[0]);
  NEW_MSG(w, Onnx__OperatorSetIdProto, ONNX__OPERATOR_SET_ID_PROTO__INIT, ops[1]);
  if (!m || !gp || !ops[0] || !ops[1]) return oom(w);
  m->has_ir_version = 1;
  m->ir_version = ONNX_IR_VERSION;
  ops[0]->domain = str(w, "");
  ops[0]->has_version = 1;
  ops[0]->version = ONNX_OPSET_AI;
  ops[1]->domain = str(w, "com.microsoft");
  ops[1]->has_version = 1;
  ops[1]->version = ONNX_OPSET_MS;
  m->n_opset_import = 2;
  m->opset_import = alloc_n(w, 2, sizeof *m->opset_import);
  m->producer_name = str(w, producer ? producer : "pagedhybrid");
  m->producer_version = str(w, ph_version_string());
  if (!ops[0]->domain || !ops[1]->domain || !m->opset_import || !m->producer_name ||
      !m->producer_version)
    return oom(w);
  m->opset_import[0] = ops[0];
  m->opset_import[1] = ops[1];
  if (w->structure_only) { /* onnx.h: how a reader tells it from a package that lost its data */
    m->metadata_props = alloc_n(w, 1, sizeof *m->metadata_props);
    if (!m->metadata_props ||
        !(m->metadata_props[0] = make_entry(w, ONNX_META_CONFIG_ONLY, "true")))
      return oom(w);
    m->n_metadata_props = 1;
  }
  m->graph = gp;
  if (!(gp->name = str(w, "main"))) return oom(w);

  gp->n_node = (size_t)g->n_nodes;
  gp->node = alloc_n(w, gp->n_node ? gp->n_node : 1, sizeof *gp->node);
  gp->n_input = (size_t)g->n_inputs;
  gp->input = alloc_n(w, gp->n_input ? gp->n_input : 1, sizeof *gp->input);
  gp->n_output = (size_t)g->n_outputs;
  gp->output = alloc_n(w, gp->n_output ? gp->n_output : 1, sizeof *gp->output);
  size_t n_init = 0;
  for (int i = 0; i < g->n_values; i++) n_init += used[i];
  gp->initializer = alloc_n(w, n_init ? n_init : 1, sizeof *gp->initializer);
  if (!gp->node || !gp->input || !gp->output || !gp->initializer) return oom(w);
  for (int i = 0; i < g->n_nodes; i++)
    if (!(gp->node[i] = make_node(w, &g->nodes[i]))) return oom(w);
  for (int i = 0; i < g->n_inputs; i++)
    if (!(gp->input[i] = make_value_info(w, g->inputs[i]))) return oom(w);
  for (int i = 0; i < g->n_outputs; i++)
    if (!(gp->output[i] = make_value_info(w, g->outputs[i]))) return oom(w);

  char data_path[4096], model_path[4096];
  FORWARD_IF_ERROR(path_join(data_path, sizeof data_path, dir, ONNX_DATA_FILE, w->d));
  FORWARD_IF_ERROR(path_join(model_path, sizeof model_path, dir, ONNX_MODEL_FILE, w->d));
  /* both targets are checked before the data, which may take minutes, is written */
  FORWARD_IF_ERROR(wfile_check_target(model_path, w->d));
  if (!w->structure_only) FORWARD_IF_ERROR(wfile_open(&w->data, data_path, w->d));
  for (int i = 0; i < g->n_values; i++) { /* the totals progress reports against */
    const int64_t bytes = (int64_t)tinfo_bytes(&g->values[i].type);
    if (!used[i] || bytes < ONNX_INLINE_MAX_BYTES) continue;
    w->tensors_total++;
    w->bytes_total =
        (w->bytes_total + ONNX_DATA_ALIGN - 1) / ONNX_DATA_ALIGN * ONNX_DATA_ALIGN + bytes;
  }
  for (int i = 0; i < g->n_values; i++) {
    if (!used[i]) continue;
    Onnx__TensorProto *t = NULL;
    if (tinfo_bytes(&g->values[i].type) < ONNX_INLINE_MAX_BYTES) {
      FORWARD_IF_ERROR(make_tensor_inline(w, i, &t));
    } else {
      FORWARD_IF_ERROR(pad_to_alignment(w));
      int64_t start = w->offset;
      if (w->structure_only)
        w->offset += (int64_t)tinfo_bytes(&g->values[i].type);
      else
        FORWARD_IF_ERROR(write_initializer(w, i));
      if (!(t = make_tensor_external(w, i, start, w->offset - start))) return oom(w);
      w->tensors_done++;
      if (!w->structure_only) report_progress(w);
    }
    gp->initializer[gp->n_initializer++] = t;
  }
  if (!w->structure_only) FORWARD_IF_ERROR(wfile_finish(&w->data, w->d));

  size_t size = onnx__model_proto__get_packed_size(m);
  uint8_t *bytes = malloc(size ? size : 1);
  RETURN_ERROR_IF(!bytes, w->d, PH_ERR_NO_MEMORY, "out of memory packing %zu bytes of model.onnx",
                  size);
  size_t packed = onnx__model_proto__pack(m, bytes);
  ph_status s = packed == size ? wfile_open(&w->model, model_path, w->d)
                               : diag_set(w->d, PH_ERR_INTERNAL, "protobuf packing size mismatch");
  if (s == PH_OK) s = wfile_write(&w->model, bytes, size, w->d);
  if (s == PH_OK) s = wfile_finish(&w->model, w->d);
  free(bytes);
  /* the data first: a model.onnx in place always has its data */
  if (s == PH_OK && !w->structure_only) s = wfile_commit(&w->data, w->d);
  if (s == PH_OK) s = wfile_commit(&w->model, w->d);
  return s;
}

static ph_status write_model(graph *g, const char *dir, const char *producer, int structure_only,
                             const onnx_progress *progress, int64_t quant_rows,
                             int64_t *quant_rows_done, diag *d) {
  RETURN_ERROR_IF(!g || !dir, d, PH_ERR_INVALID_ARGUMENT, "onnx_write_model: NULL graph or dir");
  RETURN_ERROR_IF(graph_status(g) != PH_OK, d, graph_status(g), "graph has an error: %s",
                  g->err.msg);
  RETURN_ERROR_IF(!g->finalized, d, PH_ERR_INVALID_ARGUMENT,
                  "graph is not finalized (its output types are unknown)");
  RETURN_ERROR_IF(!path_is_dir(dir), d, PH_ERR_NOT_FOUND, "%s: not a directory", dir);
  writer w;
  memset(&w, 0, sizeof w);
  w.g = g;
  w.d = d;
  w.data.fd = w.model.fd = -1;
  w.structure_only = structure_only;
  w.progress = progress;
  arena_init(&w.a, 1 << 20);
  unsigned char *used = calloc((size_t)(g->n_values ? g->n_values : 1), 1);
  ph_status s = PH_OK;
  if (!used) {
    s = diag_set(d, PH_ERR_NO_MEMORY, "out of memory");
    goto fail;
  }
  for (int i = 0; i < QCACHE_SLOTS; i++) w.qcache_id[i] = -1;
  w.quant_rows = quant_rows;
  w.used = used;
  if ((s = validate(&w, used)) != PH_OK) goto fail;
  w.buf = malloc(WRITE_CHUNK_BYTES);
  if (!w.buf) {
    s = diag_set(d, PH_ERR_NO_MEMORY, "out of memory for the %zu-byte write buffer",
                 WRITE_CHUNK_BYTES);
    goto fail;
  }
  s = build_and_write(&w, dir, producer, used);
fail:
  /* on failure only the temporary files go: never leave a package that looks complete but is
   * not, never remove what was there */
  wfile_abort(&w.data);
  wfile_abort(&w.model);
  qcache_clear(&w);
  if (quant_rows_done) *quant_rows_done = w.quant_rows_done;
  free(w.buf);
  free(used);
  arena_free(&w.a);
  return s;
}

ph_status onnx_write_model(graph *g, const char *dir, const char *producer, diag *d) {
  return write_model(g, dir, producer, 0, NULL, 0, NULL, d);
}

ph_status onnx_write_model_progress(graph *g, const char *dir, const char *producer,
                                    const onnx_progress *p, diag *d) {
  return write_model(g, dir, producer, 0, p, 0, NULL, d);
}

ph_status onnx_write_model_structure(graph *g, const char *dir, const char *producer, diag *d) {
  return write_model(g, dir, producer, 1, NULL, 0, NULL, d);
}

ph_status onnx_write_model_quant_rows(graph *g, const char *dir, const char *producer,
                                      int64_t quant_rows, int64_t *rows_done, diag *d) {
  return write_model(g, dir, producer, 0, NULL, quant_rows, rows_done, d);
}
