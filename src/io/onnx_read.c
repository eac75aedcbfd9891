/* onnx_read — a ModelProto and its external data to a graph. See onnx.h and docs/import.md.
 *
 * The input is untrusted. protobuf-c decodes the bytes (it bounds every length by the input),
 * then one pass checks the model in a fixed order — header (IR version, opset imports),
 * initializers, graph inputs, nodes, graph outputs — and builds the graph as it goes, so the
 * first problem found is the one reported, as a typed error naming the tensor, input, node or
 * attribute. Nothing decoded is trusted: every string, pointer and count protobuf-c hands back
 * is checked before use, and every external byte range against its file. Names resolve through
 * a hash table of the values defined so far, which also enforces ONNX's rules that a name is
 * assigned once and that nodes come in topological order.
 */
#include "io/onnx.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "onnx.pb-c.h"

#include "base/arena.h"
#include "base/fmap.h"
#include "base/hash.h"
#include "tensor/dtype.h"

/* IR 3 is the first with opset imports; 10 is the newest ONNX release format we know. */
#define IR_MIN          3
#define IR_MAX          10
/* Opset 13 moved the axes/splits of ReduceSum, Split, Squeeze and Unsqueeze from attributes to
 * inputs, which is what our ops implement: an older model would be read with the wrong
 * semantics, so it is rejected rather than misread. 21 is the newest opset checked against. */
#define OPSET_AI_MIN    13
#define OPSET_AI_MAX    21
#define DOMAIN_MS       "com.microsoft"
/* protobuf messages are limited to 2 GiB; anything larger cannot be a valid model.onnx. */
#define MAX_MODEL_BYTES ((size_t)INT32_MAX)
/* Counts the graph stores as int; far above any real model. */
#define MAX_GRAPH_ITEMS ((size_t)1 << 24)
#define MAX_ATTRS       64
#define MAX_ATTR_ELEMS  ((size_t)1 << 24)
#define MAX_DATA_FILES  8
#define LOCATION_BYTES  256

typedef struct data_file {
  char location[LOCATION_BYTES];
  const uint8_t *data; /* NULL when size == 0 */
  size_t size;
} data_file;

/* Open addressing, linear probing; keys point at the graph's own copies of the names. */
typedef struct name_table {
  const char **keys; /* [cap], NULL = empty slot */
  int *ids;          /* [cap] */
  size_t cap, n;
} name_table;

typedef struct reader {
  graph *g;
  const char *dir;         /* package directory; NULL when parsing from memory */
  const uint8_t *mem_data; /* parse: the bytes of model.onnx.data, or NULL for none */
  size_t mem_data_size;
  data_file files[MAX_DATA_FILES];
  int n_files;
  name_table names;
  arena tmp;       /* per node: NUL-terminated copies of string attributes */
  tinfo *declared; /* [graph outputs] declared types, checked after finalize */
  unsigned flags;  /* ONNX_READ_* */
  onnx_model_info info;
} reader;

static const char *str_or_empty(const char *s) { return s ? s : ""; }

/* ---- names ---------------------------------------------------------------------------------- */

static int names_find(const name_table *t, const char *key) {
  if (!t->cap) return -1;
  size_t mask = t->cap - 1;
  for (size_t i = (size_t)hash_str(key) & mask;; i = (i + 1) & mask) {
    if (!t->keys[i]) return -1;
    if (strcmp(t->keys[i], key) == 0) return t->ids[i];
  }
}

static void names_insert(name_table *t, const char *key, int id) {
  size_t mask = t->cap - 1, i = (size_t)hash_str(key) & mask;
  while (t->keys[i]) i = (i + 1) & mask;
  t->keys[i] = key;
  t->ids[i] = id;
  t->n++;
}

/* key must not be in the table yet. Returns 0 on out of memory. */
static int names_put(name_table *t, const char *key, int id) {
  if ((t->n + 1) * 2 > t->cap) { /* keep the load at most 1/2 */
    name_table bigger = {0};
    bigger.cap = t->cap ? t->cap * 2 : 256;
    bigger.keys = calloc(bigger.cap, sizeof *bigger.keys);
    bigger.ids = calloc(bigger.cap, sizeof *bigger.ids);
    if (!bigger.keys || !bigger.ids) {
      free(bigger.keys);
      free(bigger.ids);
      return 0;
    }
    for (size_t i = 0; i < t->cap; i++)
      if (t->keys[i]) names_insert(&bigger, t->keys[i], t->ids[i]);
    free(t->keys);
    free(t->ids);
    *t = bigger;
  }
  names_insert(t, key, id);
  return 1;
}

static void names_free(name_table *t) {
  free(t->keys);
  free(t->ids);
  memset(t, 0, sizeof *t);
}

/* Records value id under its graph-owned name. */
static ph_status define(reader *r, int id, diag *d) {
  RETURN_ERROR_IF(!names_put(&r->names, r->g->values[id].name, id), d, PH_ERR_NO_MEMORY,
                  "out of memory indexing value \"%s\"", r->g->values[id].name);
  return PH_OK;
}

/* The graph's sticky builder error, with context. */
static ph_status graph_error(const reader *r, diag *d, const char *context) {
  diag_copy(d, &r->g->err);
  if (r->g->err.status == PH_OK)
    return diag_set(d, PH_ERR_INTERNAL, "%s: graph builder failed", context);
  return diag_prefix(d, "%s", context);
}

/* ---- header --------------------------------------------------------------------------------- */

static const char *onnx_type_name(int64_t code) {
  static const char *const NAMES[] = {
      "UNDEFINED",      "FLOAT",      "UINT8",          "INT8",       "UINT16",   "INT16",
      "INT32",          "INT64",      "STRING",         "BOOL",       "FLOAT16",  "DOUBLE",
      "UINT32",         "UINT64",     "COMPLEX64",      "COMPLEX128", "BFLOAT16", "FLOAT8E4M3FN",
      "FLOAT8E4M3FNUZ", "FLOAT8E5M2", "FLOAT8E5M2FNUZ", "UINT4",      "INT4",     "FLOAT4E2M1"};
  if (code < 0 || code >= (int64_t)(sizeof NAMES / sizeof NAMES[0])) return "unknown";
  return NAMES[code];
}

static ph_status elem_dtype(int64_t code, const char *what, const char *name, ph_dtype *out,
                            diag *d) {
  ph_dtype dt = dtype_from_onnx(code);
  RETURN_ERROR_IF(dt == PH_DTYPE_INVALID, d, PH_ERR_TENSOR_DTYPE,
                  "%s \"%s\": ONNX data type %" PRId64 " (%s) is not supported (FLOAT, FLOAT16, "
                  "BFLOAT16, INT64, INT32, INT8, UINT8, FLOAT8E4M3FN are)",
                  what, name, code, onnx_type_name(code));
  *out = dt;
  return PH_OK;
}

static int is_ai_domain(const char *dom) { return !dom[0] || strcmp(dom, "ai.onnx") == 0; }

static ph_status check_header(reader *r, const Onnx__ModelProto *m, diag *d) {
  RETURN_ERROR_IF(!m->has_ir_version, d, PH_ERR_ONNX, "model has no ir_version");
  RETURN_ERROR_IF(m->ir_version < IR_MIN || m->ir_version > IR_MAX, d, PH_ERR_UNSUPPORTED,
                  "IR version %" PRId64 " is not supported (%d..%d are)", m->ir_version, IR_MIN,
                  IR_MAX);
  r->info.ir_version = m->ir_version;
  snprintf(r->info.producer_name, sizeof r->info.producer_name, "%s",
           str_or_empty(m->producer_name));
  snprintf(r->info.producer_version, sizeof r->info.producer_version, "%s",
           str_or_empty(m->producer_version));
  RETURN_ERROR_IF(m->n_opset_import && !m->opset_import, d, PH_ERR_ONNX,
                  "opset_import count without entries");
  char unknown[256];
  size_t pos = 0;
  int n_unknown = 0;
  unknown[0] = '\0';
  for (size_t i = 0; i < m->n_opset_import; i++) {
    const Onnx__OperatorSetIdProto *op = m->opset_import[i];
    RETURN_ERROR_IF(!op, d, PH_ERR_ONNX, "opset_import %zu is missing", i);
    const char *dom = str_or_empty(op->domain);
    RETURN_ERROR_IF(!op->has_version, d, PH_ERR_ONNX,
                    "opset import of domain \"%s\" has no version", dom);
    if (is_ai_domain(dom)) {
      RETURN_ERROR_IF(r->info.opset_ai, d, PH_ERR_ONNX, "domain ai.onnx is imported twice");
      RETURN_ERROR_IF(op->version < OPSET_AI_MIN || op->version > OPSET_AI_MAX, d,
                      PH_ERR_UNSUPPORTED,
                      "ai.onnx opset %" PRId64 " is not supported (%d..%d are: older opsets give "
                      "ReduceSum, Split, Squeeze and Unsqueeze other semantics)",
                      op->version, OPSET_AI_MIN, OPSET_AI_MAX);
      r->info.opset_ai = op->version;
    } else if (strcmp(dom, DOMAIN_MS) == 0) {
      RETURN_ERROR_IF(r->info.opset_ms, d, PH_ERR_ONNX, "domain com.microsoft is imported twice");
      RETURN_ERROR_IF(op->version != 1, d, PH_ERR_UNSUPPORTED,
                      "com.microsoft opset %" PRId64 " is not supported (1 is)", op->version);
      r->info.opset_ms = op->version;
    } else {
      int k = snprintf(unknown + pos, sizeof unknown - pos, "%s\"%s\"", n_unknown ? ", " : "", dom);
      if (k > 0 && (size_t)k < sizeof unknown - pos) pos += (size_t)k;
      n_unknown++;
    }
  }
  RETURN_ERROR_IF(n_unknown, d, PH_ERR_UNSUPPORTED,
                  "%d unsupported opset domain%s: %s (ai.onnx and com.microsoft are supported)",
                  n_unknown, n_unknown == 1 ? "" : "s", unknown);
  /* other keys are free text for people and tools; only our marker means something here */
  RETURN_ERROR_IF(m->n_metadata_props && !m->metadata_props, d, PH_ERR_ONNX,
                  "metadata_props count without entries");
  for (size_t i = 0; i < m->n_metadata_props; i++) {
    const Onnx__StringStringEntryProto *e = m->metadata_props[i];
    RETURN_ERROR_IF(!e, d, PH_ERR_ONNX, "metadata_props entry %zu is missing", i);
    if (e->key && strcmp(e->key, ONNX_META_CONFIG_ONLY) == 0)
      r->info.config_only = strcmp(str_or_empty(e->value), "true") == 0;
  }
  /* its weights are zeros standing in for tensors never written: refused before anything is
   * opened, whether or not a model.onnx.data happens to lie next to it */
  RETURN_ERROR_IF(
      r->info.config_only && !(r->flags & ONNX_READ_CONFIG_ONLY), d, PH_ERR_INVALID_ARGUMENT,
      "a config-only package (export --config-only; metadata_props " ONNX_META_CONFIG_ONLY
      " = true): structure without weights, model.onnx.data was never written, so it "
      "cannot run; export the checkpoint without --config-only");
  return PH_OK;
}

/* ---- initializers --------------------------------------------------------------------------- */

/* A decimal integer in [0, INT64_MAX], digits only (ONNX writes offsets and lengths so). */
static int parse_count(const char *s, int64_t *out) {
  if (!s || !*s) return 0;
  int64_t v = 0;
  for (; *s; s++) {
    if (*s < '0' || *s > '9') return 0;
    int digit = *s - '0';
    if (v > (INT64_MAX - digit) / 10) return 0;
    v = v * 10 + digit;
  }
  *out = v;
  return 1;
}

static ph_status check_location(const char *loc, const char *tensor_name, diag *d) {
  size_t n = strlen(loc);
  RETURN_ERROR_IF(n == 0 || n >= LOCATION_BYTES || strchr(loc, '/') || strchr(loc, '\\') ||
                      strcmp(loc, ".") == 0 || strcmp(loc, "..") == 0,
                  d, PH_ERR_ONNX,
                  "initializer \"%s\": external data location \"%s\" is not a plain file name in "
                  "the package directory",
                  tensor_name, loc);
  return PH_OK;
}

static ph_status open_data_file(reader *r, const char *location, const char *tensor_name,
                                const data_file **out, diag *d) {
  for (int i = 0; i < r->n_files; i++)
    if (strcmp(r->files[i].location, location) == 0) {
      *out = &r->files[i];
      return PH_OK;
    }
  RETURN_ERROR_IF(r->n_files == MAX_DATA_FILES, d, PH_ERR_LIMIT,
                  "initializer \"%s\": external data in more than %d files", tensor_name,
                  MAX_DATA_FILES);
  data_file *f = &r->files[r->n_files];
  if (!r->dir) {
    RETURN_ERROR_IF(!r->mem_data, d, PH_ERR_ONNX,
                    "initializer \"%s\": external data in \"%s\", but no data file was given",
                    tensor_name, location);
    RETURN_ERROR_IF(strcmp(location, ONNX_DATA_FILE) != 0, d, PH_ERR_ONNX,
                    "initializer \"%s\": external data in \"%s\", but only %s was given",
                    tensor_name, location, ONNX_DATA_FILE);
    f->data = r->mem_data_size ? r->mem_data : NULL;
    f->size = r->mem_data_size;
  } else {
    char path[4096];
    FORWARD_IF_ERROR(path_join(path, sizeof path, r->dir, location, d));
    fmap m;
    if (fmap_open(path, &m, d) != PH_OK) return diag_prefix(d, "initializer \"%s\"", tensor_name);
    /* ONNX Runtime refuses data files that resolve elsewhere (a symlink); so do we, to accept
     * exactly what it accepts */
    if (!path_resolves_inside(r->dir, path)) {
      fmap_close(&m);
      return diag_set(d, PH_ERR_ONNX,
                      "initializer \"%s\": external data file %s resolves outside the package "
                      "directory",
                      tensor_name, path);
    }
    ph_status st = graph_adopt_mapping(r->g, &m, d);
    if (st != PH_OK) {
      fmap_close(&m);
      return st;
    }
    f->data = m.data;
    f->size = m.size;
    r->info.n_external_files++;
  }
  snprintf(f->location, sizeof f->location, "%s", location);
  r->n_files++;
  *out = f;
  return PH_OK;
}

static ph_status add_external(reader *r, const Onnx__TensorProto *t, const char *name, ph_dtype dt,
                              shape s, int64_t bytes, int *id, diag *d) {
  RETURN_ERROR_IF(t->n_external_data && !t->external_data, d, PH_ERR_ONNX,
                  "initializer \"%s\": external_data count without entries", name);
  const char *location = NULL;
  int64_t offset = 0, length = -1;
  int have_offset = 0;
  for (size_t i = 0; i < t->n_external_data; i++) {
    const Onnx__StringStringEntryProto *e = t->external_data[i];
    RETURN_ERROR_IF(!e || !e->key, d, PH_ERR_ONNX,
                    "initializer \"%s\": external_data entry %zu has no key", name, i);
    const char *key = e->key, *value = str_or_empty(e->value);
    if (strcmp(key, "location") == 0) {
      RETURN_ERROR_IF(location, d, PH_ERR_ONNX,
                      "initializer \"%s\": external_data gives \"location\" twice", name);
      location = value;
    } else if (strcmp(key, "offset") == 0 || strcmp(key, "length") == 0) {
      int is_offset = key[0] == 'o';
      RETURN_ERROR_IF(is_offset ? have_offset : length >= 0, d, PH_ERR_ONNX,
                      "initializer \"%s\": external_data gives \"%s\" twice", name, key);
      RETURN_ERROR_IF(!parse_count(value, is_offset ? &offset : &length), d, PH_ERR_ONNX,
                      "initializer \"%s\": external_data %s \"%s\" is not a decimal integer in "
                      "[0, 2^63)",
                      name, key, value);
      have_offset |= is_offset;
    } else if (strcmp(key, "checksum") != 0) { /* a checksum is optional and not verified */
      return diag_set(d, PH_ERR_ONNX,
                      "initializer \"%s\": unknown external_data key \"%s\" (location, offset, "
                      "length, checksum)",
                      name, key);
    }
  }
  RETURN_ERROR_IF(!location, d, PH_ERR_ONNX, "initializer \"%s\": external data has no location",
                  name);
  FORWARD_IF_ERROR(check_location(location, name, d));
  char shape_s[128];
  shape_format(&s, shape_s, sizeof shape_s);
  if (length < 0) length = bytes; /* ONNX: length may be omitted, the tensor's size is meant */
  RETURN_ERROR_IF(length != bytes, d, PH_ERR_ONNX,
                  "initializer \"%s\": external data length %" PRId64 " bytes, but shape %s of %s "
                  "needs %" PRId64,
                  name, length, shape_s, ph_dtype_name(dt), bytes);
  /* a config-only package read for its structure: no bytes, none to check */
  if (r->info.config_only && (r->flags & ONNX_READ_CONFIG_ONLY)) {
    RETURN_ERROR_IF(offset > INT64_MAX - length, d, PH_ERR_ONNX,
                    "initializer \"%s\": external data offset %" PRId64 " + length %" PRId64
                    " overflows",
                    name, offset, length);
    *id = graph_add_initializer_view(r->g, name, dt, s, NULL);
    r->info.external_data_bytes += length;
    return PH_OK;
  }
  const data_file *f;
  FORWARD_IF_ERROR(open_data_file(r, location, name, &f, d));
  RETURN_ERROR_IF((uint64_t)offset > (uint64_t)f->size ||
                      (uint64_t)length > (uint64_t)f->size - (uint64_t)offset,
                  d, PH_ERR_ONNX,
                  "initializer \"%s\": external data [%" PRId64 ", %" PRId64 " + %" PRId64
                  ") lies outside %s (%zu bytes)",
                  name, offset, offset, length, f->location, f->size);
  const uint8_t *p = f->data ? f->data + offset : NULL;
  /* Views only into a mapping the graph owns and only when aligned for the dtype (kernels load
   * elements directly); anything else is copied. */
  if (r->dir && p && (uintptr_t)p % dtype_size(dt) == 0)
    *id = graph_add_initializer_view(r->g, name, dt, s, p);
  else
    *id = graph_add_initializer_copy(r->g, name, dt, s, p);
  r->info.external_data_bytes += length;
  return PH_OK;
}

/* Values in the typed repeated fields: float_data (FLOAT), int64_data (INT64) and int32_data
 * for the rest (16-bit floats as bit patterns, int8/uint8 widened), each element range-checked. */
static ph_status add_typed(reader *r, const Onnx__TensorProto *t, const char *name, ph_dtype dt,
                           shape s, int64_t numel, int *id, diag *d) {
  const char *field = dt == PH_DTYPE_F32   ? "float_data"
                      : dt == PH_DTYPE_I64 ? "int64_data"
                                           : "int32_data";
  size_t have = dt == PH_DTYPE_F32   ? t->n_float_data
                : dt == PH_DTYPE_I64 ? t->n_int64_data
                                     : t->n_int32_data;
  const void *src = dt == PH_DTYPE_F32   ? (const void *)t->float_data
                    : dt == PH_DTYPE_I64 ? (const void *)t->int64_data
                                         : (const void *)t->int32_data;
  size_t all = t->n_float_data + t->n_int32_data + t->n_int64_data + t->n_string_data +
               t->n_double_data + t->n_uint64_data;
  RETURN_ERROR_IF(all != have, d, PH_ERR_ONNX,
                  "initializer \"%s\" (%s) holds values in a field other than %s", name,
                  ph_dtype_name(dt), field);
  char shape_s[128];
  shape_format(&s, shape_s, sizeof shape_s);
  RETURN_ERROR_IF((uint64_t)have != (uint64_t)numel, d, PH_ERR_ONNX,
                  "initializer \"%s\": %s has %zu values, shape %s needs %" PRId64, name, field,
                  have, shape_s, numel);
  RETURN_ERROR_IF(have && !src, d, PH_ERR_ONNX, "initializer \"%s\": %s count without values", name,
                  field);
  int32_t lo = 0, hi = 0;
  switch (dt) {
  case PH_DTYPE_F16:
  case PH_DTYPE_BF16:
    hi = 0xffff;
    break;
  case PH_DTYPE_U8:
  case PH_DTYPE_F8E4M3:
    hi = 0xff;
    break;
  case PH_DTYPE_I8:
    lo = -128;
    hi = 127;
    break;
  default:
    break;
  }
  if (hi)
    for (size_t i = 0; i < have; i++)
      RETURN_ERROR_IF(t->int32_data[i] < lo || t->int32_data[i] > hi, d, PH_ERR_ONNX,
                      "initializer \"%s\": int32_data[%zu] = %" PRId32 " is outside [%" PRId32
                      ", %" PRId32 "] for %s",
                      name, i, t->int32_data[i], lo, hi, ph_dtype_name(dt));
  void *dst = NULL;
  *id = graph_add_initializer_alloc(r->g, name, dt, s, &dst);
  if (*id < 0 || !have) return PH_OK;
  size_t es = dtype_size(dt);
  if (!hi) { /* f32, i64, i32: the field holds the element type itself */
    memcpy(dst, src, have * es);
    return PH_OK;
  }
  uint8_t *out = dst;
  for (size_t i = 0; i < have; i++) {
    if (es == 2) {
      uint16_t h = (uint16_t)t->int32_data[i];
      memcpy(out + 2 * i, &h, 2);
    } else {
      out[i] = (uint8_t)(t->int32_data[i] & 0xff); /* two's complement for int8 */
    }
  }
  return PH_OK;
}

static ph_status read_initializer(reader *r, const Onnx__TensorProto *t, size_t index, diag *d) {
  RETURN_ERROR_IF(!t, d, PH_ERR_ONNX, "initializer %zu is missing", index);
  const char *name = str_or_empty(t->name);
  RETURN_ERROR_IF(!name[0], d, PH_ERR_ONNX, "initializer %zu has no name", index);
  RETURN_ERROR_IF(names_find(&r->names, name) >= 0, d, PH_ERR_ONNX,
                  "initializer \"%s\" is defined twice", name);
  RETURN_ERROR_IF(!t->has_data_type, d, PH_ERR_ONNX, "initializer \"%s\" has no data_type", name);
  ph_dtype dt = PH_DTYPE_INVALID;
  FORWARD_IF_ERROR(elem_dtype(t->data_type, "initializer", name, &dt, d));
  RETURN_ERROR_IF(t->segment, d, PH_ERR_UNSUPPORTED,
                  "initializer \"%s\" is a segment of a larger tensor, which is not supported",
                  name);
  RETURN_ERROR_IF(t->n_dims > TENSOR_MAX_DIMS, d, PH_ERR_LIMIT,
                  "initializer \"%s\" has %zu dims, at most %d are supported", name, t->n_dims,
                  TENSOR_MAX_DIMS);
  RETURN_ERROR_IF(t->n_dims && !t->dims, d, PH_ERR_ONNX,
                  "initializer \"%s\": dims count without values", name);
  shape s;
  memset(&s, 0, sizeof s);
  s.n_dims = (int)t->n_dims;
  for (size_t i = 0; i < t->n_dims; i++) {
    RETURN_ERROR_IF(t->dims[i] < 0, d, PH_ERR_ONNX,
                    "initializer \"%s\": dim %zu is negative (%" PRId64 ")", name, i, t->dims[i]);
    s.dims[i] = t->dims[i];
  }
  char shape_s[128];
  shape_format(&s, shape_s, sizeof shape_s);
  int64_t bytes = shape_bytes(&s, dt), numel = shape_numel(&s);
  RETURN_ERROR_IF(bytes < 0 || numel < 0, d, PH_ERR_ONNX,
                  "initializer \"%s\": shape %s of %s overflows a 64-bit byte count", name, shape_s,
                  ph_dtype_name(dt));
  RETURN_ERROR_IF(
      t->has_data_location && t->data_location != ONNX__TENSOR_PROTO__DATA_LOCATION__DEFAULT &&
          t->data_location != ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL,
      d, PH_ERR_ONNX, "initializer \"%s\": data_location %d is neither DEFAULT nor EXTERNAL", name,
      (int)t->data_location);
  int external =
      t->has_data_location && t->data_location == ONNX__TENSOR_PROTO__DATA_LOCATION__EXTERNAL;
  RETURN_ERROR_IF(!external && t->n_external_data, d, PH_ERR_ONNX,
                  "initializer \"%s\" has external_data entries but data_location is not EXTERNAL",
                  name);
  int typed = t->n_float_data || t->n_int32_data || t->n_int64_data || t->n_string_data ||
              t->n_double_data || t->n_uint64_data;
  RETURN_ERROR_IF(external + !!t->has_raw_data + typed > 1, d, PH_ERR_ONNX,
                  "initializer \"%s\" holds its data in more than one place (raw_data, typed "
                  "fields, external data)",
                  name);
  int id = -1;
  if (external) {
    FORWARD_IF_ERROR(add_external(r, t, name, dt, s, bytes, &id, d));
  } else if (t->has_raw_data) {
    RETURN_ERROR_IF((uint64_t)t->raw_data.len != (uint64_t)bytes, d, PH_ERR_ONNX,
                    "initializer \"%s\": raw_data holds %zu bytes, shape %s of %s needs %" PRId64,
                    name, t->raw_data.len, shape_s, ph_dtype_name(dt), bytes);
    RETURN_ERROR_IF(bytes && !t->raw_data.data, d, PH_ERR_ONNX,
                    "initializer \"%s\": raw_data length without bytes", name);
    id = graph_add_initializer_copy(r->g, name, dt, s, t->raw_data.data);
  } else if (typed) {
    FORWARD_IF_ERROR(add_typed(r, t, name, dt, s, numel, &id, d));
  } else {
    RETURN_ERROR_IF(numel != 0, d, PH_ERR_ONNX, "initializer \"%s\" (%s %s) has no data", name,
                    ph_dtype_name(dt), shape_s);
    id = graph_add_initializer_copy(r->g, name, dt, s, NULL);
  }
  if (id < 0) return graph_error(r, d, "initializer");
  r->info.n_initializers++;
  r->info.initializer_bytes += bytes;
  return define(r, id, d);
}

/* ---- graph inputs and outputs --------------------------------------------------------------- */

/* Whether dim k of value `name`, declared as dim_param `param`, keeps its name in the graph
 * (syms[0..k) are this value's names kept so far). Not kept, the dim is simply unknown:
 *  - "<name>_dim<k>" is what our writer generates for an anonymous dim, so reading it back as
 *    anonymous makes read-then-write byte-exact and spends no symbol on it;
 *  - a name that does not fit the graph's symbol table (GRAPH_MAX_SYMBOLS names of fewer than
 *    32 bytes; exporters write things like "past_sequence_length + 1" for every output) is
 *    dropped and counted in info.n_symbols_dropped rather than rejecting a runnable model:
 *    only the name is lost, never a size. */
static int keep_symbol(reader *r, const char *name, size_t k, const char *param,
                       const char *const *syms) {
  char gen[32];
  size_t n = strlen(name);
  int w = snprintf(gen, sizeof gen, "_dim%zu", k);
  if (strncmp(param, name, n) == 0 && w > 0 && strcmp(param + n, gen) == 0) return 0;
  const graph *g = r->g;
  if (strlen(param) >= sizeof g->symbols[0]) {
    r->info.n_symbols_dropped++;
    return 0;
  }
  for (int i = 0; i < g->n_symbols; i++)
    if (strcmp(g->symbols[i], param) == 0) return 1;
  int n_new = 0; /* names this value already adds to the table */
  for (size_t i = 0; i < k; i++) {
    if (!syms[i]) continue;
    int known = 0;
    for (int j = 0; j < g->n_symbols && !known; j++) known = strcmp(g->symbols[j], syms[i]) == 0;
    for (size_t j = 0; j < i && !known; j++) known = syms[j] && strcmp(syms[j], syms[i]) == 0;
    if (!known) n_new++;
    if (strcmp(syms[i], param) == 0) return 1;
  }
  if (g->n_symbols + n_new >= GRAPH_MAX_SYMBOLS) {
    r->info.n_symbols_dropped++;
    return 0;
  }
  return 1;
}

/* The declared type of a graph input or output: tensor, supported dtype, and (required for
 * inputs) a shape whose dims are values (known), params (unknown, named) or neither (unknown).
 * syms[i] points into the proto: use it before the proto is freed. */
static ph_status value_type(reader *r, const Onnx__ValueInfoProto *vi, const char *what,
                            const char *name, int shape_required, tinfo *t, const char **syms,
                            diag *d) {
  const Onnx__TypeProto *tp = vi->type;
  RETURN_ERROR_IF(!tp, d, PH_ERR_ONNX, "%s \"%s\" has no type", what, name);
  RETURN_ERROR_IF(tp->value_case != ONNX__TYPE_PROTO__VALUE_TENSOR_TYPE || !tp->tensor_type, d,
                  PH_ERR_UNSUPPORTED,
                  "%s \"%s\" is not a tensor (sequence, map, optional and sparse types are not "
                  "supported)",
                  what, name);
  const Onnx__TypeProto__Tensor *tt = tp->tensor_type;
  RETURN_ERROR_IF(!tt->has_elem_type, d, PH_ERR_ONNX, "%s \"%s\" has no elem_type", what, name);
  ph_dtype dt = PH_DTYPE_INVALID;
  FORWARD_IF_ERROR(elem_dtype(tt->elem_type, what, name, &dt, d));
  *t = tinfo_make(dt, -1, NULL);
  for (int i = 0; i < GRAPH_MAX_DIMS; i++) syms[i] = NULL;
  const Onnx__TensorShapeProto *sh = tt->shape;
  if (!sh) {
    RETURN_ERROR_IF(shape_required, d, PH_ERR_UNSUPPORTED,
                    "%s \"%s\" has no shape (inputs of unknown rank are not supported)", what,
                    name);
    return PH_OK;
  }
  RETURN_ERROR_IF(sh->n_dim > GRAPH_MAX_DIMS, d, PH_ERR_LIMIT,
                  "%s \"%s\" has %zu dims, at most %d are supported", what, name, sh->n_dim,
                  GRAPH_MAX_DIMS);
  RETURN_ERROR_IF(sh->n_dim && !sh->dim, d, PH_ERR_ONNX, "%s \"%s\": dim count without dims", what,
                  name);
  t->rank = (int)sh->n_dim;
  for (size_t i = 0; i < sh->n_dim; i++) {
    const Onnx__TensorShapeProto__Dimension *dm = sh->dim[i];
    RETURN_ERROR_IF(!dm, d, PH_ERR_ONNX, "%s \"%s\": dim %zu is missing", what, name, i);
    t->dims[i] = -1;
    if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_VALUE) {
      RETURN_ERROR_IF(dm->dim_value < 0, d, PH_ERR_ONNX,
                      "%s \"%s\": dim %zu is negative (%" PRId64 ")", what, name, i, dm->dim_value);
      t->dims[i] = dm->dim_value;
    } else if (dm->value_case == ONNX__TENSOR_SHAPE_PROTO__DIMENSION__VALUE_DIM_PARAM &&
               dm->dim_param && dm->dim_param[0] && keep_symbol(r, name, i, dm->dim_param, syms)) {
      syms[i] = dm->dim_param;
    }
  }
  return PH_OK;
}

static ph_status read_input(reader *r, const Onnx__ValueInfoProto *vi, size_t index, diag *d) {
  RETURN_ERROR_IF(!vi, d, PH_ERR_ONNX, "graph input %zu is missing", index);
  const char *name = str_or_empty(vi->name);
  RETURN_ERROR_IF(!name[0], d, PH_ERR_ONNX, "graph input %zu has no name", index);
  int prior = names_find(&r->names, name);
  /* IR < 4 lists every initializer among the inputs as well; later IRs allow it as an
   * overridable default. Either way the value is the initializer's constant. */
  if (prior >= 0 && r->g->values[prior].kind == VALUE_INITIALIZER) return PH_OK;
  RETURN_ERROR_IF(prior >= 0, d, PH_ERR_ONNX, "graph input \"%s\" is listed twice", name);
  tinfo t;
  const char *syms[GRAPH_MAX_DIMS];
  FORWARD_IF_ERROR(value_type(r, vi, "graph input", name, 1, &t, syms, d));
  int id = graph_add_input(r->g, name, t.dtype, t.rank, t.dims, syms);
  if (id < 0) return graph_error(r, d, "graph input");
  return define(r, id, d);
}

/* Declared and computed type agree where both are known. */
static ph_status check_declared(const char *name, const tinfo *decl, const tinfo *got, diag *d) {
  char a[160], b[160];
  RETURN_ERROR_IF(got->dtype != PH_DTYPE_INVALID && decl->dtype != got->dtype, d,
                  PH_ERR_TENSOR_DTYPE, "graph output \"%s\" is declared %s but is %s", name,
                  ph_dtype_name(decl->dtype), ph_dtype_name(got->dtype));
  if (decl->rank < 0 || got->rank < 0) return PH_OK;
  int ok = decl->rank == got->rank;
  for (int i = 0; ok && i < decl->rank; i++)
    ok = decl->dims[i] < 0 || got->dims[i] < 0 || decl->dims[i] == got->dims[i];
  RETURN_ERROR_IF(!ok, d, PH_ERR_TENSOR_SHAPE, "graph output \"%s\" is declared %s but is %s", name,
                  tinfo_format(decl, a, sizeof a), tinfo_format(got, b, sizeof b));
  return PH_OK;
}

static ph_status read_output(reader *r, const Onnx__ValueInfoProto *vi, size_t index, diag *d) {
  RETURN_ERROR_IF(!vi, d, PH_ERR_ONNX, "graph output %zu is missing", index);
  const char *name = str_or_empty(vi->name);
  RETURN_ERROR_IF(!name[0], d, PH_ERR_ONNX, "graph output %zu has no name", index);
  int id = names_find(&r->names, name);
  RETURN_ERROR_IF(id < 0, d, PH_ERR_ONNX,
                  "graph output \"%s\" is not a graph input, an initializer or a node output",
                  name);
  gvalue *v = &r->g->values[id];
  RETURN_ERROR_IF(v->is_output, d, PH_ERR_ONNX, "graph output \"%s\" is listed twice", name);
  tinfo *t = &r->declared[index];
  const char *syms[GRAPH_MAX_DIMS];
  FORWARD_IF_ERROR(value_type(r, vi, "graph output", name, 0, t, syms, d));
  if (v->kind == VALUE_INTERMEDIATE)
    v->type =
        *t; /* until graph_finalize infers it: lets symbols attach, describes unfinalized graphs */
  else
    FORWARD_IF_ERROR(check_declared(name, t, &v->type, d));
  if (graph_mark_output(r->g, id, syms) < 0) return graph_error(r, d, "graph output");
  return PH_OK;
}

/* ---- nodes ---------------------------------------------------------------------------------- */

static const char *attr_type_name(int type) {
  switch (type) {
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__UNDEFINED:
    return "UNDEFINED";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSOR:
    return "TENSOR";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPH:
    return "GRAPH";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSOR:
    return "SPARSE_TENSOR";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTO:
    return "TYPE_PROTO";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRINGS:
    return "STRINGS";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TENSORS:
    return "TENSORS";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__GRAPHS:
    return "GRAPHS";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__SPARSE_TENSORS:
    return "SPARSE_TENSORS";
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__TYPE_PROTOS:
    return "TYPE_PROTOS";
  default:
    return "unknown";
  }
}

static ph_status read_attr(reader *r, const Onnx__AttributeProto *a, const char *node, gattr *out,
                           diag *d) {
  RETURN_ERROR_IF(!a, d, PH_ERR_ONNX, "%s: an attribute is missing", node);
  const char *name = str_or_empty(a->name);
  RETURN_ERROR_IF(!name[0], d, PH_ERR_ONNX, "%s: an attribute has no name", node);
  RETURN_ERROR_IF(a->ref_attr_name && a->ref_attr_name[0], d, PH_ERR_UNSUPPORTED,
                  "%s: attribute \"%s\" refers to a function attribute, which is not supported",
                  node, name);
  RETURN_ERROR_IF(!a->has_type, d, PH_ERR_ONNX, "%s: attribute \"%s\" has no type", node, name);
  switch (a->type) {
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INT:
    *out = attr_int(name, a->i);
    return PH_OK;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOAT:
    *out = attr_float(name, a->f);
    return PH_OK;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__STRING: {
    size_t len = a->has_s ? a->s.len : 0;
    RETURN_ERROR_IF(len && !a->s.data, d, PH_ERR_ONNX,
                    "%s: attribute \"%s\": string length without bytes", node, name);
    RETURN_ERROR_IF(len && memchr(a->s.data, 0, len), d, PH_ERR_ONNX,
                    "%s: attribute \"%s\": string contains a NUL byte", node, name);
    char *s =
        len ? arena_strndup(&r->tmp, (const char *)a->s.data, len) : arena_strdup(&r->tmp, "");
    RETURN_ERROR_IF(!s, d, PH_ERR_NO_MEMORY, "%s: out of memory", node);
    *out = attr_string(name, s);
    return PH_OK;
  }
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__INTS:
    RETURN_ERROR_IF(a->n_ints > MAX_ATTR_ELEMS, d, PH_ERR_LIMIT,
                    "%s: attribute \"%s\" has %zu values", node, name, a->n_ints);
    RETURN_ERROR_IF(a->n_ints && !a->ints, d, PH_ERR_ONNX,
                    "%s: attribute \"%s\": count without values", node, name);
    *out = attr_ints(name, a->ints, (int)a->n_ints);
    return PH_OK;
  case ONNX__ATTRIBUTE_PROTO__ATTRIBUTE_TYPE__FLOATS:
    RETURN_ERROR_IF(a->n_floats > MAX_ATTR_ELEMS, d, PH_ERR_LIMIT,
                    "%s: attribute \"%s\" has %zu values", node, name, a->n_floats);
    RETURN_ERROR_IF(a->n_floats && !a->floats, d, PH_ERR_ONNX,
                    "%s: attribute \"%s\": count without values", node, name);
    *out = attr_floats(name, a->floats, (int)a->n_floats);
    return PH_OK;
  default:
    return diag_set(d, PH_ERR_UNSUPPORTED,
                    "%s: attribute \"%s\" has type %s (%d); INT, FLOAT, STRING, INTS and FLOATS "
                    "are supported",
                    node, name, attr_type_name((int)a->type), (int)a->type);
  }
}

static ph_status read_node(reader *r, const Onnx__NodeProto *n, size_t index, diag *d) {
  RETURN_ERROR_IF(!n, d, PH_ERR_ONNX, "node %zu is missing", index);
  const char *op = str_or_empty(n->op_type), *dom = str_or_empty(n->domain);
  const char *nm = str_or_empty(n->name);
  char label[160];
  snprintf(label, sizeof label, "node %zu \"%.64s\" (%s%s%.48s)", index, nm, dom[0] ? dom : "",
           dom[0] ? "." : "", op);
  RETURN_ERROR_IF(!op[0], d, PH_ERR_ONNX, "%s has no op_type", label);
  if (is_ai_domain(dom))
    RETURN_ERROR_IF(!r->info.opset_ai, d, PH_ERR_ONNX,
                    "%s: domain ai.onnx is not among the opset imports", label);
  else if (strcmp(dom, DOMAIN_MS) == 0)
    RETURN_ERROR_IF(!r->info.opset_ms, d, PH_ERR_ONNX,
                    "%s: domain com.microsoft is not among the opset imports", label);
  else
    return diag_set(d, PH_ERR_UNSUPPORTED,
                    "%s: operator domain \"%s\" is not supported (ai.onnx, com.microsoft are)",
                    label, dom);
  RETURN_ERROR_IF(n->n_input > GRAPH_MAX_IO || n->n_output > GRAPH_MAX_IO, d, PH_ERR_LIMIT,
                  "%s has %zu inputs and %zu outputs, at most %d each are supported", label,
                  n->n_input, n->n_output, GRAPH_MAX_IO);
  RETURN_ERROR_IF(n->n_output == 0, d, PH_ERR_ONNX, "%s has no outputs", label);
  RETURN_ERROR_IF((n->n_input && !n->input) || !n->output, d, PH_ERR_ONNX,
                  "%s: input or output count without names", label);

  int inputs[GRAPH_MAX_IO];
  for (size_t k = 0; k < n->n_input; k++) {
    const char *in = n->input[k];
    inputs[k] = -1; /* empty name: absent optional input */
    if (!in || !in[0]) continue;
    inputs[k] = names_find(&r->names, in);
    RETURN_ERROR_IF(inputs[k] < 0, d, PH_ERR_ONNX,
                    "%s: input %zu \"%s\" is not a graph input, an initializer or an output of an "
                    "earlier node",
                    label, k, in);
  }
  const char *outs[GRAPH_MAX_IO];
  for (size_t k = 0; k < n->n_output; k++) {
    const char *o = n->output[k];
    outs[k] = (o && o[0]) ? o : NULL; /* empty name: absent optional output */
    if (!outs[k]) continue;
    int twice = names_find(&r->names, o) >= 0;
    for (size_t j = 0; j < k && !twice; j++) twice = outs[j] && strcmp(outs[j], o) == 0;
    RETURN_ERROR_IF(twice, d, PH_ERR_ONNX,
                    "%s: output \"%s\" is already defined (ONNX assigns every value once)", label,
                    o);
  }

  RETURN_ERROR_IF(n->n_attribute > MAX_ATTRS, d, PH_ERR_LIMIT,
                  "%s has %zu attributes, at most %d are supported", label, n->n_attribute,
                  MAX_ATTRS);
  RETURN_ERROR_IF(n->n_attribute && !n->attribute, d, PH_ERR_ONNX,
                  "%s: attribute count without attributes", label);
  gattr attrs[MAX_ATTRS];
  arena_reset(&r->tmp);
  for (size_t a = 0; a < n->n_attribute; a++) {
    FORWARD_IF_ERROR(read_attr(r, n->attribute[a], label, &attrs[a], d));
    for (size_t j = 0; j < a; j++)
      RETURN_ERROR_IF(strcmp(attrs[j].name, attrs[a].name) == 0, d, PH_ERR_ONNX,
                      "%s: attribute \"%s\" is given twice", label, attrs[a].name);
  }

  int out_ids[GRAPH_MAX_IO];
  if (graph_add_node(r->g, op, dom, nm, (int)n->n_input, inputs, (int)n->n_output, outs, out_ids,
                     (int)n->n_attribute, attrs) < 0)
    return graph_error(r, d, label);
  for (size_t k = 0; k < n->n_output; k++)
    if (out_ids[k] >= 0) FORWARD_IF_ERROR(define(r, out_ids[k], d));
  return PH_OK;
}

/* ---- the model ------------------------------------------------------------------------------ */

static ph_status build(reader *r, const Onnx__ModelProto *m, diag *d) {
  FORWARD_IF_ERROR(check_header(r, m, d));
  const Onnx__GraphProto *gp = m->graph;
  RETURN_ERROR_IF(!gp, d, PH_ERR_ONNX, "model has no graph");
  RETURN_ERROR_IF(gp->n_sparse_initializer, d, PH_ERR_UNSUPPORTED,
                  "graph has %zu sparse initializers, which are not supported",
                  gp->n_sparse_initializer);
  RETURN_ERROR_IF(gp->n_initializer > MAX_GRAPH_ITEMS || gp->n_input > MAX_GRAPH_ITEMS ||
                      gp->n_node > MAX_GRAPH_ITEMS || gp->n_output > MAX_GRAPH_ITEMS,
                  d, PH_ERR_LIMIT, "graph has more than %zu initializers, inputs, nodes or outputs",
                  MAX_GRAPH_ITEMS);
  RETURN_ERROR_IF((gp->n_initializer && !gp->initializer) || (gp->n_input && !gp->input) ||
                      (gp->n_node && !gp->node) || (gp->n_output && !gp->output),
                  d, PH_ERR_ONNX, "graph: a count without entries");
  RETURN_ERROR_IF(gp->n_output == 0, d, PH_ERR_ONNX, "graph has no outputs");
  FORWARD_IF_ERROR(graph_create(&r->g, d));

  for (size_t i = 0; i < gp->n_initializer; i++)
    FORWARD_IF_ERROR(read_initializer(r, gp->initializer[i], i, d));
  for (size_t i = 0; i < gp->n_input; i++) FORWARD_IF_ERROR(read_input(r, gp->input[i], i, d));
  for (size_t i = 0; i < gp->n_node; i++) FORWARD_IF_ERROR(read_node(r, gp->node[i], i, d));
  r->declared = calloc(gp->n_output, sizeof *r->declared);
  RETURN_ERROR_IF(!r->declared, d, PH_ERR_NO_MEMORY, "out of memory");
  for (size_t i = 0; i < gp->n_output; i++) FORWARD_IF_ERROR(read_output(r, gp->output[i], i, d));
  if (!(r->flags & ONNX_READ_FINALIZE)) return PH_OK;

  FORWARD_IF_ERROR(graph_finalize(r->g, d));
  for (int i = 0; i < r->g->n_outputs; i++) {
    const gvalue *v = &r->g->values[r->g->outputs[i]];
    FORWARD_IF_ERROR(check_declared(v->name, &r->declared[i], &v->type, d));
  }
  return PH_OK;
}

static void reader_init(reader *r, const char *dir, const uint8_t *data, size_t data_size,
                        unsigned flags) {
  memset(r, 0, sizeof *r);
  r->dir = dir;
  r->flags = flags;
  r->mem_data = data;
  r->mem_data_size = data ? data_size : 0;
  arena_init(&r->tmp, 0);
}

/* ---- nesting -------------------------------------------------------------------------------
 * protobuf-c decodes a nested message by recursing, one C stack frame per level and no limit, so
 * a GraphProto inside an AttributeProto inside a NodeProto inside a GraphProto ... a few
 * thousand deep (a 50 KB file) overflows the stack, and many tiny fields cost ~75x their bytes
 * (ONNX_MAX_FIELDS). Before protobuf-c sees the bytes, this walk
 * follows exactly the fields protobuf-c would recurse into (the message-typed fields of the
 * descriptors it decodes with) with an explicit stack of ONNX_MAX_NESTING levels: one pass,
 * each byte read once, no recursion. It is as strict as protobuf-c's scan or stricter, so every
 * input protobuf-c goes on to decode has had every nested message's extent walked here with the
 * same boundaries: tags of at most 5 bytes and never field 0, lengths of at most 5 bytes and
 * within their enclosing message, no group wire types (protobuf-c refuses those too). */

typedef struct nest_level {
  const ProtobufCMessageDescriptor *desc;
  size_t end; /* one past the message's last byte */
} nest_level;

/* A varint of at most max_bytes at p[*pos..end); 0 if it does not end in time. */
static int read_varint(const uint8_t *p, size_t end, size_t *pos, unsigned max_bytes,
                       uint64_t *out) {
  uint64_t v = 0;
  for (unsigned i = 0; i < max_bytes && *pos < end; i++) {
    uint8_t b = p[(*pos)++];
    v |= (uint64_t)(b & 0x7f) << (7 * i);
    if (!(b & 0x80)) {
      *out = v;
      return 1;
    }
  }
  return 0;
}

static ph_status malformed_at(size_t at, size_t size, const char *why, diag *d) {
  return diag_set(d, PH_ERR_ONNX,
                  "not an ONNX ModelProto: protobuf decoding failed at byte %zu: %s (%zu bytes; "
                  "garbage or truncated file?)",
                  at, why, size);
}

static ph_status check_nesting(const uint8_t *p, size_t size, diag *d) {
  nest_level stack[ONNX_MAX_NESTING + 1];
  int depth = 0;
  stack[0] = (nest_level){&onnx__model_proto__descriptor, size};
  size_t pos = 0, n_fields = 0;
  for (;;) {
    while (depth > 0 && pos == stack[depth].end) depth--;
    const size_t end = stack[depth].end;
    if (pos == end) return PH_OK; /* depth 0: the whole model */
    const size_t at = pos;
    if (++n_fields > ONNX_MAX_FIELDS)
      return diag_set(d, PH_ERR_LIMIT,
                      "more than %zu protobuf fields (at byte %zu of %zu): decoding that many "
                      "tiny fields would take far more memory than the file's size",
                      ONNX_MAX_FIELDS, at, size);
    uint64_t tag, v;
    if (!read_varint(p, end, &pos, 5, &tag) || (tag >> 3) == 0 || (tag >> 3) > UINT32_MAX)
      return malformed_at(at, size, "bad field tag", d);
    switch (tag & 7) {
    case 0: /* varint */
      if (!read_varint(p, end, &pos, 10, &v))
        return malformed_at(at, size, "unterminated varint", d);
      break;
    case 1: /* 64-bit */
      if (end - pos < 8) return malformed_at(at, size, "truncated 64-bit field", d);
      pos += 8;
      break;
    case 5: /* 32-bit */
      if (end - pos < 4) return malformed_at(at, size, "truncated 32-bit field", d);
      pos += 4;
      break;
    case 2: { /* length-delimited: a string, bytes, packed scalars or a message */
      if (!read_varint(p, end, &pos, 5, &v) || v > end - pos)
        return malformed_at(at, size, "length-delimited field runs past the end of its message", d);
      const ProtobufCFieldDescriptor *f =
          protobuf_c_message_descriptor_get_field(stack[depth].desc, (unsigned)(tag >> 3));
      if (!f || f->type != PROTOBUF_C_TYPE_MESSAGE) {
        pos += (size_t)v;
        break;
      }
      if (depth == ONNX_MAX_NESTING) {
        const ProtobufCMessageDescriptor *sub = f->descriptor;
        return diag_set(d, PH_ERR_LIMIT,
                        "messages nest more than %d deep (a %s in field %s of a %s at byte %zu); "
                        "%d is protobuf's default recursion limit",
                        ONNX_MAX_NESTING, sub->short_name, f->name, stack[depth].desc->short_name,
                        at, ONNX_MAX_NESTING);
      }
      stack[++depth] = (nest_level){f->descriptor, pos + (size_t)v};
      break;
    }
    default:
      return malformed_at(at, size, "group or unknown wire type (ONNX uses none)", d);
    }
  }
}

/* Decodes and builds; on success hands the graph to *out, else frees it. */
static ph_status read_bytes(reader *r, const uint8_t *bytes, size_t size, graph **out, diag *d) {
  static const uint8_t EMPTY[1];
  ph_status s = PH_OK;
  Onnx__ModelProto *m = NULL;
  if (size > MAX_MODEL_BYTES) {
    s = diag_set(d, PH_ERR_LIMIT, "model is %zu bytes, above protobuf's 2 GiB limit", size);
    goto done;
  }
  if ((s = check_nesting(bytes ? bytes : EMPTY, size, d)) != PH_OK) goto done;
  m = onnx__model_proto__unpack(NULL, size, bytes ? bytes : EMPTY);
  if (!m) {
    s = diag_set(d, PH_ERR_ONNX,
                 "not an ONNX ModelProto: protobuf decoding failed (%zu bytes; garbage or "
                 "truncated file?)",
                 size);
    goto done;
  }
  s = build(r, m, d);
done:
  if (m) onnx__model_proto__free_unpacked(m, NULL);
  names_free(&r->names);
  arena_free(&r->tmp);
  free(r->declared);
  r->declared = NULL;
  if (s == PH_OK) {
    *out = r->g;
  } else {
    graph_free(r->g);
  }
  r->g = NULL;
  return s;
}

ph_status onnx_parse_model(const uint8_t *bytes, size_t size, const uint8_t *data, size_t data_size,
                           graph **out, diag *d) {
  *out = NULL;
  diag local; /* diag_prefix needs a diag to report the status through */
  if (!d) d = &local;
  RETURN_ERROR_IF(!bytes && size, d, PH_ERR_INVALID_ARGUMENT, "model bytes are NULL");
  reader r;
  reader_init(&r, NULL, data, data_size, ONNX_READ_FINALIZE);
  return read_bytes(&r, bytes, size, out, d);
}

ph_status onnx_read_model_ex(const char *dir, unsigned flags, graph **out, onnx_model_info *info,
                             diag *d) {
  return onnx_read_model_file(dir, ONNX_MODEL_FILE, flags, out, info, d);
}

ph_status onnx_read_model_file(const char *dir, const char *filename, unsigned flags, graph **out,
                               onnx_model_info *info, diag *d) {
  *out = NULL;
  if (info) memset(info, 0, sizeof *info);
  diag local; /* diag_prefix needs a diag to report the status through */
  if (!d) d = &local;
  RETURN_ERROR_IF(!filename || check_location(filename, "(model)", NULL) != PH_OK, d,
                  PH_ERR_INVALID_ARGUMENT, "model file \"%s\": not a plain file name in %s",
                  filename ? filename : "(null)", dir);
  char path[4096];
  FORWARD_IF_ERROR(path_join(path, sizeof path, dir, filename, d));
  fmap mf;
  FORWARD_IF_ERROR(fmap_open(path, &mf, d));
  reader r;
  reader_init(&r, dir, NULL, 0, flags);
  ph_status s = read_bytes(&r, mf.data, mf.size, out, d);
  fmap_close(&mf);
  if (s != PH_OK) return diag_prefix(d, "%s", path);
  if (info) *info = r.info;
  return PH_OK;
}

ph_status onnx_read_model(const char *dir, graph **out, diag *d) {
  return onnx_read_model_ex(dir, ONNX_READ_FINALIZE, out, NULL, d);
}

int onnx_is_package(const char *dir) {
  char path[4096];
  return (path_join(path, sizeof path, dir, ONNX_MODEL_FILE, NULL) == PH_OK && path_exists(path)) ||
         (path_join(path, sizeof path, dir, "genai_config.json", NULL) == PH_OK &&
          path_exists(path));
}
