/* safetensors reader — validates a whole safetensors image before handing out any tensor.
 *
 * One image is checked in a fixed order so the first problem found is the one reported: the
 * 8-byte length, the JSON header (jansson, duplicate keys rejected), each entry in file order
 * (structure, dtype, absurd offsets, byte count against dtype x shape), then the data section
 * length against the largest end, then overlaps. Memory is proportional to the header only: the
 * jansson tree, one st_tensor per entry and one block for the names. A sharded checkpoint is the
 * union of its shards' tensors checked against model.safetensors.index.json. See safetensors.h
 * and docs/safetensors.md for the rules.
 */
#include "io/safetensors.h"

#include <inttypes.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "io/json_util.h"
#include "tensor/dtype.h"

/* Offsets above 2^53 cannot be right for any file (8 PiB), and 2^53 is where JSON numbers stop
 * being exact in most readers: such an offset is PH_ERR_SAFETENSORS_RANGE, not TRUNCATED. */
#define ST_MAX_OFFSET ((uint64_t)1 << 53)

#define ST_INDEX_NAME  "model.safetensors.index.json"
#define ST_SINGLE_NAME "model.safetensors"

typedef struct st_file {
  fmap map;    /* zero for st_parse: the caller owns the bytes */
  char *names; /* every tensor name of this file, NUL-separated, one malloc */
} st_file;

struct st_set {
  st_tensor *tensors; /* [n_tensors], sorted by name */
  size_t n_tensors;
  st_file *files; /* [n_files]; file_index indexes this */
  size_t n_files;
  json_t *metadata; /* files[0]'s "__metadata__" object, or NULL */
  uint64_t total_bytes;
};

/* What one image yields before it joins a set. */
typedef struct parsed_image {
  st_tensor *tensors; /* [n], sorted by name, names pointing into `names` */
  size_t n;
  char *names;
  json_t *metadata;
} parsed_image;

static void parsed_image_free(parsed_image *p) {
  free(p->tensors);
  free(p->names);
  json_decref(p->metadata);
  memset(p, 0, sizeof *p);
}

static uint64_t read_u64_le(const uint8_t *p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; i--) v = (v << 8) | p[i];
  return v;
}

static int cmp_by_name(const void *a, const void *b) {
  return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

static int cmp_by_begin(const void *a, const void *b) {
  const st_tensor *x = a, *y = b;
  if (x->data_begin != y->data_begin) return x->data_begin < y->data_begin ? -1 : 1;
  if (x->data_end != y->data_end) return x->data_end < y->data_end ? -1 : 1;
  return strcmp(x->name, y->name);
}

static ph_status check_length_field(const uint8_t *bytes, size_t size, const char *label,
                                    uint64_t *header_bytes, diag *d) {
  RETURN_ERROR_IF(size < 8, d, PH_ERR_SAFETENSORS_HEADER_SIZE,
                  "%s: file has %zu bytes, expected at least 8 for the header length", label, size);
  uint64_t n = read_u64_le(bytes);
  RETURN_ERROR_IF(n == 0, d, PH_ERR_SAFETENSORS_HEADER_SIZE, "%s: header length is 0", label);
  RETURN_ERROR_IF(n > SAFETENSORS_MAX_HEADER, d, PH_ERR_SAFETENSORS_HEADER_SIZE,
                  "%s: header length %" PRIu64 " exceeds the limit of %" PRIu64 " bytes", label, n,
                  SAFETENSORS_MAX_HEADER);
  RETURN_ERROR_IF(n > (uint64_t)(size - 8), d, PH_ERR_SAFETENSORS_HEADER_SIZE,
                  "%s: header length %" PRIu64 " but only %zu bytes follow the length field "
                  "(file cut inside the header?)",
                  label, n, size - 8);
  *header_bytes = n;
  return PH_OK;
}

static ph_status check_metadata(const json_t *meta, const char *label, diag *d) {
  RETURN_ERROR_IF(!json_is_object(meta), d, PH_ERR_SAFETENSORS_HEADER,
                  "%s: \"__metadata__\" is %s, expected an object of strings", label,
                  json_kind(meta));
  const char *key;
  json_t *value;
  json_object_foreach((json_t *)meta, key, value) {
    RETURN_ERROR_IF(!json_is_string(value), d, PH_ERR_SAFETENSORS_HEADER,
                    "%s: \"__metadata__\".\"%s\" is %s, expected a string", label, key,
                    json_kind(value));
  }
  return PH_OK;
}

/* Reads element i of a JSON array as an integer >= 0. what names the field in messages. */
static ph_status json_index_uint(const json_t *arr, size_t i, const char *label, const char *name,
                                 const char *what, uint64_t *out, diag *d) {
  const json_t *v = json_array_get(arr, i);
  RETURN_ERROR_IF(!json_is_integer(v), d, PH_ERR_SAFETENSORS_HEADER,
                  "%s: tensor \"%s\": %s[%zu] is %s, expected a non-negative integer", label, name,
                  what, i, json_kind(v));
  json_int_t x = json_integer_value(v);
  RETURN_ERROR_IF(x < 0, d, PH_ERR_SAFETENSORS_HEADER,
                  "%s: tensor \"%s\": %s[%zu] is negative (%" JSON_INTEGER_FORMAT ")", label, name,
                  what, i, x);
  *out = (uint64_t)x;
  return PH_OK;
}

/* Validates one header entry on its own (everything but truncation and overlap) into t. */
static ph_status parse_entry(const char *label, const char *name, const json_t *entry,
                             int file_index, st_tensor *t, diag *d) {
  RETURN_ERROR_IF(name[0] == '\0', d, PH_ERR_SAFETENSORS_HEADER, "%s: a tensor has an empty name",
                  label);
  RETURN_ERROR_IF(!json_is_object(entry), d, PH_ERR_SAFETENSORS_HEADER,
                  "%s: tensor \"%s\": entry is %s, expected an object {dtype, shape, data_offsets}",
                  label, name, json_kind(entry));
  const char *key;
  json_t *value;
  json_object_foreach((json_t *)entry, key, value) {
    RETURN_ERROR_IF(strcmp(key, "dtype") && strcmp(key, "shape") && strcmp(key, "data_offsets"), d,
                    PH_ERR_SAFETENSORS_HEADER,
                    "%s: tensor \"%s\": unexpected key \"%s\" (expected exactly dtype, shape, "
                    "data_offsets)",
                    label, name, key);
  }

  const json_t *dtype_j = json_object_get(entry, "dtype");
  RETURN_ERROR_IF(!dtype_j, d, PH_ERR_SAFETENSORS_HEADER, "%s: tensor \"%s\": missing \"dtype\"",
                  label, name);
  RETURN_ERROR_IF(!json_is_string(dtype_j), d, PH_ERR_SAFETENSORS_HEADER,
                  "%s: tensor \"%s\": \"dtype\" is %s, expected a string", label, name,
                  json_kind(dtype_j));

  const json_t *shape_j = json_object_get(entry, "shape");
  RETURN_ERROR_IF(!shape_j, d, PH_ERR_SAFETENSORS_HEADER, "%s: tensor \"%s\": missing \"shape\"",
                  label, name);
  RETURN_ERROR_IF(!json_is_array(shape_j), d, PH_ERR_SAFETENSORS_HEADER,
                  "%s: tensor \"%s\": \"shape\" is %s, expected an array", label, name,
                  json_kind(shape_j));
  size_t n_dims = json_array_size(shape_j);
  RETURN_ERROR_IF(n_dims > TENSOR_MAX_DIMS, d, PH_ERR_SAFETENSORS_HEADER,
                  "%s: tensor \"%s\": shape has %zu dims, at most %d supported", label, name,
                  n_dims, TENSOR_MAX_DIMS);
  memset(t, 0, sizeof *t);
  t->shape.n_dims = (int)n_dims;
  for (size_t i = 0; i < n_dims; i++) {
    uint64_t dim;
    FORWARD_IF_ERROR(json_index_uint(shape_j, i, label, name, "shape", &dim, d));
    t->shape.dims[i] = (int64_t)dim; /* json_int_t is signed 64-bit, so this fits */
  }

  const json_t *offs_j = json_object_get(entry, "data_offsets");
  RETURN_ERROR_IF(!offs_j, d, PH_ERR_SAFETENSORS_HEADER,
                  "%s: tensor \"%s\": missing \"data_offsets\"", label, name);
  RETURN_ERROR_IF(
      !json_is_array(offs_j) || json_array_size(offs_j) != 2, d, PH_ERR_SAFETENSORS_HEADER,
      "%s: tensor \"%s\": \"data_offsets\" is %s of %zu elements, expected an array of "
      "2 integers",
      label, name, json_kind(offs_j), json_is_array(offs_j) ? json_array_size(offs_j) : (size_t)0);
  uint64_t begin, end;
  FORWARD_IF_ERROR(json_index_uint(offs_j, 0, label, name, "data_offsets", &begin, d));
  FORWARD_IF_ERROR(json_index_uint(offs_j, 1, label, name, "data_offsets", &end, d));

  const char *dtype_s = json_string_value(dtype_j);
  ph_dtype dt = dtype_from_safetensors_name(dtype_s);
  RETURN_ERROR_IF(dt == PH_DTYPE_INVALID, d, PH_ERR_SAFETENSORS_DTYPE,
                  "%s: tensor \"%s\": unknown dtype \"%s\" (supported: F32, F16, BF16, I64, I32, "
                  "I8, U8, F8_E4M3)",
                  label, name, dtype_s);

  RETURN_ERROR_IF(begin > ST_MAX_OFFSET || end > ST_MAX_OFFSET, d, PH_ERR_SAFETENSORS_RANGE,
                  "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] exceed 2^53, "
                  "impossible for any file",
                  label, name, begin, end);

  char shape_s[128];
  shape_format(&t->shape, shape_s, sizeof shape_s);
  int64_t need = shape_bytes(&t->shape, dt);
  RETURN_ERROR_IF(need < 0, d, PH_ERR_SAFETENSORS_SIZE_MISMATCH,
                  "%s: tensor \"%s\": shape %s of %s overflows a 64-bit byte count", label, name,
                  shape_s, dtype_s);
  RETURN_ERROR_IF(begin > end, d, PH_ERR_SAFETENSORS_SIZE_MISMATCH,
                  "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] begin after end",
                  label, name, begin, end);
  RETURN_ERROR_IF(end - begin != (uint64_t)need, d, PH_ERR_SAFETENSORS_SIZE_MISMATCH,
                  "%s: tensor \"%s\": data_offsets [%" PRIu64 ", %" PRIu64 "] hold %" PRIu64
                  " bytes, shape %s of %s needs %" PRId64,
                  label, name, begin, end, end - begin, shape_s, dtype_s, need);

  t->name = name;
  t->dtype = dt;
  t->data_begin = begin;
  t->data_end = end;
  t->file_index = file_index;
  return PH_OK;
}

/* Checks the data section against every range, then ranges against each other. ts is sorted by
 * begin on return. */
static ph_status check_ranges(st_tensor *ts, size_t n, uint64_t data_bytes, const char *label,
                              diag *d) {
  const st_tensor *last = NULL;
  for (size_t i = 0; i < n; i++)
    if (!last || ts[i].data_end > last->data_end) last = &ts[i];
  RETURN_ERROR_IF(last && last->data_end > data_bytes, d, PH_ERR_SAFETENSORS_TRUNCATED,
                  "%s: data section has %" PRIu64 " bytes, but tensor \"%s\" ends at %" PRIu64
                  " (file cut: expected at least %" PRIu64 " more bytes)",
                  label, data_bytes, last->name, last->data_end, last->data_end - data_bytes);

  qsort(ts, n, sizeof *ts, cmp_by_begin);
  const st_tensor *reach = NULL; /* non-empty tensor ending furthest so far */
  for (size_t i = 0; i < n; i++) {
    const st_tensor *t = &ts[i];
    if (t->data_begin == t->data_end) continue;
    RETURN_ERROR_IF(reach && t->data_begin < reach->data_end, d, PH_ERR_SAFETENSORS_OVERLAP,
                    "%s: tensors \"%s\" [%" PRIu64 ", %" PRIu64 ") and \"%s\" [%" PRIu64
                    ", %" PRIu64 ") overlap",
                    label, reach->name, reach->data_begin, reach->data_end, t->name, t->data_begin,
                    t->data_end);
    if (!reach || t->data_end > reach->data_end) reach = t;
  }
  return PH_OK;
}

/* Validates one image completely; on success out owns a name-sorted tensor table. */
static ph_status parse_image(const uint8_t *bytes, size_t size, const char *label, int file_index,
                             parsed_image *out, diag *d) {
  memset(out, 0, sizeof *out);
  uint64_t header_bytes = 0;
  FORWARD_IF_ERROR(check_length_field(bytes, size, label, &header_bytes, d));

  json_error_t jerr;
  json_t *root = json_loadb((const char *)bytes + 8, (size_t)header_bytes,
                            JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
  RETURN_ERROR_IF(!root, d, PH_ERR_SAFETENSORS_HEADER,
                  "%s: header JSON rejected: %s (line %d, column %d)", label, jerr.text, jerr.line,
                  jerr.column);
  ph_status st = PH_OK;
  if (!json_is_object(root)) {
    st = diag_set(d, PH_ERR_SAFETENSORS_HEADER, "%s: header is %s, expected an object", label,
                  json_kind(root));
    goto fail;
  }
  json_t *meta = json_object_get(root, "__metadata__");
  if (meta) {
    st = check_metadata(meta, label, d);
    if (st != PH_OK) goto fail;
  }

  size_t n_max = json_object_size(root) - (meta ? 1 : 0);
  out->tensors = calloc(n_max ? n_max : 1, sizeof *out->tensors);
  if (!out->tensors) {
    st = diag_set(d, PH_ERR_NO_MEMORY, "%s: cannot allocate %zu tensor entries", label, n_max);
    goto fail;
  }
  size_t name_bytes = 0;
  const char *key;
  json_t *value;
  json_object_foreach(root, key, value) {
    if (strcmp(key, "__metadata__") == 0) continue;
    st = parse_entry(label, key, value, file_index, &out->tensors[out->n], d);
    if (st != PH_OK) goto fail;
    name_bytes += strlen(key) + 1;
    out->n++;
  }

  uint64_t data_bytes = (uint64_t)(size - 8) - header_bytes;
  st = check_ranges(out->tensors, out->n, data_bytes, label, d);
  if (st != PH_OK) goto fail;

  /* Names still point into the jansson tree; move them into one block before dropping it. */
  out->names = malloc(name_bytes ? name_bytes : 1);
  if (!out->names) {
    st = diag_set(d, PH_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes of names", label, name_bytes);
    goto fail;
  }
  const uint8_t *data = bytes + 8 + header_bytes;
  char *pos = out->names;
  for (size_t i = 0; i < out->n; i++) {
    st_tensor *t = &out->tensors[i];
    size_t len = strlen(t->name) + 1;
    memcpy(pos, t->name, len);
    t->name = pos;
    pos += len;
    t->data = data + t->data_begin;
  }
  qsort(out->tensors, out->n, sizeof *out->tensors, cmp_by_name);
  out->metadata = meta ? json_incref(meta) : NULL;
  json_decref(root);
  return PH_OK;

fail:
  json_decref(root);
  free(out->tensors);
  free(out->names);
  memset(out, 0, sizeof *out);
  return st;
}

static uint64_t sum_bytes(const st_tensor *ts, size_t n) {
  uint64_t total = 0;
  for (size_t i = 0; i < n; i++) total += ts[i].data_end - ts[i].data_begin;
  return total;
}

/* A set holding one parsed image; takes ownership of p and of map (which may be zero). */
static ph_status set_from_image(parsed_image *p, fmap *map, const char *label, st_set **out,
                                diag *d) {
  st_set *s = calloc(1, sizeof *s);
  st_file *files = calloc(1, sizeof *files);
  if (!s || !files) {
    free(s);
    free(files);
    parsed_image_free(p);
    fmap_close(map);
    return diag_set(d, PH_ERR_NO_MEMORY, "%s: cannot allocate the tensor set", label);
  }
  files[0].map = *map;
  files[0].names = p->names;
  s->files = files;
  s->n_files = 1;
  s->tensors = p->tensors;
  s->n_tensors = p->n;
  s->metadata = p->metadata;
  s->total_bytes = sum_bytes(s->tensors, s->n_tensors);
  memset(p, 0, sizeof *p);
  *out = s;
  return PH_OK;
}

ph_status st_parse(const uint8_t *bytes, size_t size, const char *label, st_set **out, diag *d) {
  *out = NULL;
  if (!label) label = "(memory)";
  RETURN_ERROR_IF(!bytes && size, d, PH_ERR_INVALID_ARGUMENT, "%s: NULL bytes", label);
  parsed_image p;
  FORWARD_IF_ERROR(parse_image(bytes, size, label, 0, &p, d));
  fmap none = {0};
  return set_from_image(&p, &none, label, out, d);
}

ph_status st_open_file(const char *path, st_set **out, diag *d) {
  *out = NULL;
  fmap map;
  FORWARD_IF_ERROR(fmap_open(path, &map, d));
  parsed_image p;
  ph_status st = parse_image(map.data, map.size, path, 0, &p, d);
  if (st != PH_OK) {
    fmap_close(&map);
    return st;
  }
  return set_from_image(&p, &map, path, out, d);
}

void st_close(st_set *s) {
  if (!s) return;
  for (size_t i = 0; i < s->n_files; i++) {
    fmap_close(&s->files[i].map);
    free(s->files[i].names);
  }
  free(s->files);
  free(s->tensors);
  json_decref(s->metadata);
  free(s);
}

size_t st_count(const st_set *s) { return s ? s->n_tensors : 0; }
size_t st_file_count(const st_set *s) { return s ? s->n_files : 0; }
const fmap *st_file_map(const st_set *s, size_t i) {
  return s && i < s->n_files ? &s->files[i].map : NULL;
}

const st_tensor *st_at(const st_set *s, size_t i) {
  return (s && i < s->n_tensors) ? &s->tensors[i] : NULL;
}

const st_tensor *st_find(const st_set *s, const char *name) {
  if (!s || !name) return NULL;
  size_t lo = 0, hi = s->n_tensors;
  while (lo < hi) {
    size_t mid = lo + (hi - lo) / 2;
    int c = strcmp(s->tensors[mid].name, name);
    if (c == 0) return &s->tensors[mid];
    if (c < 0)
      lo = mid + 1;
    else
      hi = mid;
  }
  return NULL;
}

const char *st_metadata(const st_set *s, const char *key) {
  if (!s || !s->metadata || !key) return NULL;
  return json_string_value(json_object_get(s->metadata, key));
}

uint64_t st_total_bytes(const st_set *s) { return s ? s->total_bytes : 0; }

/* ---- sharded checkpoints ----------------------------------------------------------------- */

/* One weight_map row; order keeps the index's own order for "first tensor naming a shard". */
typedef struct map_row {
  const char *name;
  const char *shard;
  size_t order;
} map_row;

static int cmp_row_by_shard(const void *a, const void *b) {
  const map_row *x = a, *y = b;
  int c = strcmp(x->shard, y->shard);
  if (c) return c;
  return x->order < y->order ? -1 : x->order > y->order;
}

/* Shard names come from an untrusted file and are joined to dir: only plain names. */
static int plain_file_name(const char *s) {
  return s[0] != '\0' && !strchr(s, '/') && !strstr(s, "..");
}

static ph_status open_sharded(const char *dir, const char *index_path, st_set **out, diag *d) {
  char *text = NULL;
  size_t text_len = 0;
  FORWARD_IF_ERROR(file_read_all(index_path, (size_t)SAFETENSORS_MAX_HEADER, &text, &text_len, d));
  json_error_t jerr;
  json_t *root = json_loadb(text, text_len, JSON_REJECT_DUPLICATES | JSON_DECODE_ANY, &jerr);
  free(text);
  RETURN_ERROR_IF(!root, d, PH_ERR_SAFETENSORS_INDEX, "%s: JSON rejected: %s (line %d, column %d)",
                  index_path, jerr.text, jerr.line, jerr.column);

  ph_status st = PH_OK;
  map_row *rows = NULL;
  const char **shards = NULL;
  st_set *s = NULL;
  size_t n_rows = 0, n_shards = 0, cap = 0;
  json_t *wm = json_object_get(root, "weight_map");
  json_t *meta = json_object_get(root, "metadata");
  if (!json_is_object(root) || !json_is_object(wm) || (meta && !json_is_object(meta))) {
    st = diag_set(d, PH_ERR_SAFETENSORS_INDEX,
                  "%s: expected {\"metadata\": {..}, \"weight_map\": {name: shard}}, got %s%s",
                  index_path, json_kind(root),
                  !json_is_object(root) ? ""
                  : !wm                 ? " without \"weight_map\""
                  : !json_is_object(wm) ? " whose \"weight_map\" is not an object"
                                        : " whose \"metadata\" is not an object");
    goto fail;
  }

  size_t n_map = json_object_size(wm);
  rows = calloc(n_map ? n_map : 1, sizeof *rows);
  shards = calloc(n_map ? n_map : 1, sizeof *shards);
  s = calloc(1, sizeof *s);
  if (!rows || !shards || !s) {
    st = diag_set(d, PH_ERR_NO_MEMORY, "%s: cannot allocate %zu index rows", index_path, n_map);
    goto fail;
  }
  const char *key;
  json_t *value;
  json_object_foreach(wm, key, value) {
    if (!json_is_string(value)) {
      st = diag_set(d, PH_ERR_SAFETENSORS_INDEX, "%s: weight_map.\"%s\" is %s, expected a string",
                    index_path, key, json_kind(value));
      goto fail;
    }
    const char *shard = json_string_value(value);
    if (!plain_file_name(shard)) {
      st = diag_set(d, PH_ERR_SAFETENSORS_INDEX,
                    "%s: weight_map.\"%s\" names shard \"%s\", expected a plain file name "
                    "(no '/', no \"..\")",
                    index_path, key, shard);
      goto fail;
    }
    rows[n_rows] = (map_row){key, shard, n_rows};
    n_rows++;
  }

  qsort(rows, n_rows, sizeof *rows, cmp_row_by_shard);
  for (size_t i = 0; i < n_rows; i++)
    if (i == 0 || strcmp(rows[i].shard, rows[i - 1].shard) != 0) shards[n_shards++] = rows[i].shard;
  if (n_shards > (size_t)INT32_MAX) {
    st = diag_set(d, PH_ERR_LIMIT, "%s: %zu shards", index_path, n_shards);
    goto fail;
  }

  s->files = calloc(n_shards ? n_shards : 1, sizeof *s->files);
  if (!s->files) {
    st = diag_set(d, PH_ERR_NO_MEMORY, "%s: cannot allocate %zu shards", index_path, n_shards);
    goto fail;
  }
  size_t row = 0;
  for (size_t f = 0; f < n_shards; f++) {
    /* rows are grouped by shard; rows[row] is the first index row naming shards[f] */
    while (strcmp(rows[row].shard, shards[f]) != 0) row++;
    char path[4096];
    st = path_join(path, sizeof path, dir, shards[f], d);
    if (st != PH_OK) goto fail;
    fmap map;
    st = fmap_open(path, &map, d);
    if (st == PH_ERR_NOT_FOUND) {
      st = diag_set(d, PH_ERR_SAFETENSORS_INDEX,
                    "%s: weight_map names shard \"%s\" (for tensor \"%s\"), which does not exist",
                    index_path, shards[f], rows[row].name);
      goto fail;
    }
    if (st != PH_OK) goto fail;
    s->files[f].map = map;
    s->n_files = f + 1;
    parsed_image p;
    st = parse_image(map.data, map.size, path, (int)f, &p, d);
    if (st != PH_OK) goto fail;
    s->files[f].names = p.names;
    p.names = NULL;
    if (f == 0) {
      s->metadata = p.metadata;
      p.metadata = NULL;
    }
    if (s->n_tensors + p.n > cap) {
      size_t new_cap = (s->n_tensors + p.n) * 2;
      st_tensor *grown = realloc(s->tensors, new_cap * sizeof *grown);
      if (!grown) {
        parsed_image_free(&p);
        st =
            diag_set(d, PH_ERR_NO_MEMORY, "%s: cannot grow the tensor table to %zu", path, new_cap);
        goto fail;
      }
      s->tensors = grown;
      cap = new_cap;
    }
    if (p.n) memcpy(s->tensors + s->n_tensors, p.tensors, p.n * sizeof *p.tensors);
    s->n_tensors += p.n;
    parsed_image_free(&p);
  }

  if (s->n_tensors) qsort(s->tensors, s->n_tensors, sizeof *s->tensors, cmp_by_name);
  for (size_t i = 1; i < s->n_tensors; i++) {
    const st_tensor *a = &s->tensors[i - 1], *b = &s->tensors[i];
    if (strcmp(a->name, b->name) == 0) {
      st = diag_set(d, PH_ERR_DUPLICATE_TENSOR, "%s: tensor \"%s\" is in both \"%s\" and \"%s\"",
                    dir, a->name, shards[a->file_index], shards[b->file_index]);
      goto fail;
    }
  }
  json_object_foreach(wm, key, value) {
    const char *shard = json_string_value(value);
    const st_tensor *t = st_find(s, key);
    if (!t) {
      st = diag_set(d, PH_ERR_SAFETENSORS_INDEX,
                    "%s: weight_map puts tensor \"%s\" in \"%s\", which does not contain it",
                    index_path, key, shard);
      goto fail;
    }
    if (strcmp(shards[t->file_index], shard) != 0) {
      st = diag_set(d, PH_ERR_SAFETENSORS_INDEX,
                    "%s: weight_map puts tensor \"%s\" in \"%s\", but it is in \"%s\"", index_path,
                    key, shard, shards[t->file_index]);
      goto fail;
    }
  }
  s->total_bytes = sum_bytes(s->tensors, s->n_tensors);
  free(rows);
  free(shards);
  json_decref(root);
  *out = s;
  return PH_OK;

fail:
  st_close(s);
  free(rows);
  free(shards);
  json_decref(root);
  return st;
}

ph_status st_open_dir(const char *dir, st_set **out, diag *d) {
  *out = NULL;
  char path[4096];
  FORWARD_IF_ERROR(path_join(path, sizeof path, dir, ST_INDEX_NAME, d));
  if (path_exists(path)) return open_sharded(dir, path, out, d);
  FORWARD_IF_ERROR(path_join(path, sizeof path, dir, ST_SINGLE_NAME, d));
  RETURN_ERROR_IF(!path_exists(path), d, PH_ERR_NOT_FOUND,
                  "%s: neither " ST_INDEX_NAME " nor " ST_SINGLE_NAME " exists", dir);
  return st_open_file(path, out, d);
}
