/* safetensors writer — one file, or shards plus model.safetensors.index.json.
 *
 * Every entry is validated (name, dtype, shape, byte count) and the whole header is built with
 * jansson before the first byte is written. Files are written through base/wfile.h: into a
 * temporary file beside the target, renamed over it only when everything was written, so an I/O
 * or fill() failure leaves what was at the target untouched and removes only the temporary file
 * (a sharded checkpoint's shards and index are all written before any is renamed). Data is
 * streamed: entries with data are written straight from the caller's memory, and filled entries
 * go through one buffer sized to the largest filled tensor. Offsets are packed in entry order, which is also the
 * header's key order (JSON_PRESERVE_ORDER), so the file reads top to bottom like the list.
 */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/fmap.h"
#include "base/wfile.h"
#include "io/safetensors.h"
#include "tensor/dtype.h"

#define ST_INDEX_NAME       "model.safetensors.index.json"
#define ST_SHARD_NAME_BYTES 64

static ph_status entry_bytes(const st_write_entry *e, size_t i, int have_fill, uint64_t *out,
                             diag *d) {
  RETURN_ERROR_IF(!e->name || !e->name[0], d, PH_ERR_INVALID_ARGUMENT,
                  "entry %zu: empty tensor name", i);
  RETURN_ERROR_IF(strcmp(e->name, "__metadata__") == 0, d, PH_ERR_INVALID_ARGUMENT,
                  "entry %zu: \"__metadata__\" is reserved", i);
  RETURN_ERROR_IF(!dtype_safetensors_name(e->dtype), d, PH_ERR_INVALID_ARGUMENT,
                  "tensor \"%s\": invalid dtype %d", e->name, (int)e->dtype);
  RETURN_ERROR_IF(e->shape.n_dims < 0 || e->shape.n_dims > TENSOR_MAX_DIMS, d,
                  PH_ERR_INVALID_ARGUMENT, "tensor \"%s\": %d dims, expected 0..%d", e->name,
                  e->shape.n_dims, TENSOR_MAX_DIMS);
  char shape_s[128];
  int64_t bytes = shape_bytes(&e->shape, e->dtype);
  RETURN_ERROR_IF(bytes < 0, d, PH_ERR_INVALID_ARGUMENT,
                  "tensor \"%s\": shape %s has a negative dim or overflows", e->name,
                  shape_format(&e->shape, shape_s, sizeof shape_s));
  RETURN_ERROR_IF((uint64_t)bytes > (uint64_t)SIZE_MAX, d, PH_ERR_LIMIT,
                  "tensor \"%s\": %" PRId64 " bytes do not fit in memory", e->name, bytes);
  RETURN_ERROR_IF(!e->data && !have_fill && bytes > 0, d, PH_ERR_INVALID_ARGUMENT,
                  "tensor \"%s\": no data and no fill function", e->name);
  *out = (uint64_t)bytes;
  return PH_OK;
}

/* {"__metadata__": {"format": "pt"}, name: {dtype, shape, data_offsets}, ...} in entry order. */
static ph_status build_header(const st_write_entry *entries, size_t n, int have_fill, json_t **out,
                              size_t *max_fill_bytes, diag *d) {
  *out = NULL;
  *max_fill_bytes = 0;
  json_t *root = json_object();
  json_t *meta = json_pack("{s:s}", "format", "pt");
  if (!root || !meta || json_object_set_new(root, "__metadata__", meta) != 0) {
    json_decref(root);
    return diag_set(d, PH_ERR_NO_MEMORY, "cannot build the safetensors header");
  }
  uint64_t offset = 0;
  ph_status st = PH_OK;
  for (size_t i = 0; i < n; i++) {
    const st_write_entry *e = &entries[i];
    uint64_t bytes;
    st = entry_bytes(e, i, have_fill, &bytes, d);
    if (st != PH_OK) goto fail;
    if (json_object_get(root, e->name)) {
      st = diag_set(d, PH_ERR_DUPLICATE_TENSOR, "tensor \"%s\" is listed twice", e->name);
      goto fail;
    }
    if (offset > (uint64_t)INT64_MAX - bytes) {
      st = diag_set(d, PH_ERR_LIMIT, "tensor \"%s\": data section exceeds 2^63 bytes", e->name);
      goto fail;
    }
    json_t *shape_j = json_array();
    for (int k = 0; shape_j && k < e->shape.n_dims; k++)
      if (json_array_append_new(shape_j, json_integer(e->shape.dims[k])) != 0) {
        json_decref(shape_j);
        shape_j = NULL;
      }
    json_t *entry =
        shape_j
            ? json_pack("{s:s, s:o, s:[I, I]}", "dtype", dtype_safetensors_name(e->dtype), "shape",
                        shape_j, "data_offsets", (json_int_t)offset, (json_int_t)(offset + bytes))
            : NULL;
    /* json_object_set_new fails on a name that is not UTF-8, as well as on out of memory */
    if (!entry || json_object_set_new(root, e->name, entry) != 0) {
      st = diag_set(d, PH_ERR_INVALID_ARGUMENT,
                    "tensor \"%s\": cannot add to the header (name not UTF-8, or out of memory)",
                    e->name);
      goto fail;
    }
    offset += bytes;
    if (!e->data && bytes > *max_fill_bytes) *max_fill_bytes = (size_t)bytes;
  }
  *out = root;
  return PH_OK;

fail:
  json_decref(root);
  return st;
}

static ph_status write_bytes(FILE *f, const void *p, size_t n, const char *path, diag *d) {
  RETURN_ERROR_IF(n && fwrite(p, 1, n, f) != n, d, PH_ERR_IO, "%s: write failed: %s", path,
                  strerror(errno));
  return PH_OK;
}

/* Writes entries[0..n) for path into *w, finished but not committed (the caller commits or
 * aborts it; on failure it holds nothing); fill sees index_base + i so shards keep the caller's
 * indices. */
static ph_status write_file(const char *path, const st_write_entry *entries, size_t n,
                            size_t index_base, st_fill_fn fill, void *user, wfile *w, diag *d) {
  w->path = w->tmp = NULL;
  w->fd = -1;
  w->f = NULL;
  json_t *header;
  size_t max_fill_bytes;
  FORWARD_IF_ERROR(build_header(entries, n, fill != NULL, &header, &max_fill_bytes, d));
  char *text = json_dumps(header, JSON_COMPACT | JSON_PRESERVE_ORDER);
  json_decref(header);
  RETURN_ERROR_IF(!text, d, PH_ERR_NO_MEMORY, "%s: cannot serialise the header", path);

  ph_status st = PH_OK;
  uint8_t *buf = NULL;
  FILE *f = NULL;
  st = wfile_open(w, path, d);
  if (st == PH_OK && !(f = wfile_stream(w, d))) st = PH_ERR_NO_MEMORY;
  if (st != PH_OK) {
    free(text);
    wfile_abort(w);
    return st;
  }
  /* (8 + header) % 8 == 0 keeps the data section 8-aligned, as the reference writer does */
  size_t text_len = strlen(text);
  size_t padded = (text_len + 7) / 8 * 8;
  uint8_t len_le[8];
  for (int i = 0; i < 8; i++) len_le[i] = (uint8_t)((uint64_t)padded >> (8 * i));
  st = write_bytes(f, len_le, 8, path, d);
  if (st == PH_OK) st = write_bytes(f, text, text_len, path, d);
  for (size_t i = text_len; st == PH_OK && i < padded; i++) st = write_bytes(f, " ", 1, path, d);
  free(text);
  if (st != PH_OK) goto fail;

  if (max_fill_bytes) {
    buf = malloc(max_fill_bytes);
    if (!buf) {
      st = diag_set(d, PH_ERR_NO_MEMORY, "%s: cannot allocate %zu bytes for one tensor", path,
                    max_fill_bytes);
      goto fail;
    }
  }
  for (size_t i = 0; i < n; i++) {
    const st_write_entry *e = &entries[i];
    size_t bytes = (size_t)shape_bytes(&e->shape, e->dtype); /* checked by build_header */
    if (bytes == 0) continue;
    const void *src = e->data;
    if (!src) {
      st = fill(user, index_base + i, buf, d);
      if (st != PH_OK) {
        diag_prefix(d, "%s: tensor \"%s\"", path, e->name);
        goto fail;
      }
      src = buf;
    }
    st = write_bytes(f, src, bytes, path, d);
    if (st != PH_OK) goto fail;
  }
  free(buf);
  buf = NULL;
  if ((st = wfile_finish(w, d)) != PH_OK) goto fail;
  return PH_OK;

fail:
  free(buf);
  wfile_abort(w); /* the temporary file only: what is at path stays */
  return st;
}

ph_status st_write_file(const char *path, const st_write_entry *entries, size_t n, st_fill_fn fill,
                        void *user, diag *d) {
  RETURN_ERROR_IF(!path || (n && !entries), d, PH_ERR_INVALID_ARGUMENT,
                  "st_write_file: NULL path or entries");
  wfile w;
  FORWARD_IF_ERROR(write_file(path, entries, n, 0, fill, user, &w, d));
  return wfile_commit(&w, d);
}

static void shard_name(char *buf, size_t i, size_t n_shards) {
  snprintf(buf, ST_SHARD_NAME_BYTES, "model-%05zu-of-%05zu.safetensors", i + 1, n_shards);
}

ph_status st_write_sharded(const char *dir, const st_write_entry *entries, size_t n,
                           uint64_t max_shard_bytes, st_fill_fn fill, void *user, diag *d) {
  RETURN_ERROR_IF(!dir || (n && !entries), d, PH_ERR_INVALID_ARGUMENT,
                  "st_write_sharded: NULL dir or entries");
  /* first[k] is the first entry of shard k; greedy in order is optimal for contiguous runs */
  size_t *first = malloc((n + 1) * sizeof *first);
  RETURN_ERROR_IF(!first, d, PH_ERR_NO_MEMORY, "%s: cannot plan %zu shards", dir, n);
  size_t n_shards = 0;
  uint64_t in_shard = 0, total = 0;
  ph_status st = PH_OK;
  json_t *index = NULL;
  char *text = NULL;
  wfile *files = NULL; /* [n_shards + 1]: the shards, then the index */
  for (size_t i = 0; i < n; i++) {
    uint64_t bytes;
    st = entry_bytes(&entries[i], i, fill != NULL, &bytes, d);
    if (st != PH_OK) goto done;
    if (total > (uint64_t)INT64_MAX - bytes) {
      st = diag_set(d, PH_ERR_LIMIT, "%s: tensor \"%s\": checkpoint exceeds 2^63 bytes", dir,
                    entries[i].name);
      goto done;
    }
    if (n_shards == 0 || (in_shard > 0 && in_shard + bytes > max_shard_bytes)) {
      first[n_shards++] = i;
      in_shard = 0;
    }
    in_shard += bytes;
    total += bytes;
  }
  if (n_shards == 0) first[n_shards++] = 0; /* no entries: one empty shard keeps the form */
  first[n_shards] = n;

  /* the index is complete (and names checked unique) before any shard is written */
  json_t *weight_map = json_object();
  index = json_pack("{s:{s:I}, s:o}", "metadata", "total_size", (json_int_t)total, "weight_map",
                    weight_map);
  if (!index) {
    st = diag_set(d, PH_ERR_NO_MEMORY, "%s: cannot build the index", dir);
    goto done;
  }
  for (size_t k = 0; k < n_shards; k++) {
    char name[ST_SHARD_NAME_BYTES];
    shard_name(name, k, n_shards);
    for (size_t i = first[k]; i < first[k + 1]; i++) {
      if (json_object_get(weight_map, entries[i].name)) {
        st = diag_set(d, PH_ERR_DUPLICATE_TENSOR, "%s: tensor \"%s\" is listed twice", dir,
                      entries[i].name);
        goto done;
      }
      if (json_object_set_new(weight_map, entries[i].name, json_string(name)) != 0) {
        st = diag_set(d, PH_ERR_INVALID_ARGUMENT,
                      "%s: tensor \"%s\": cannot add to the index (name not UTF-8?)", dir,
                      entries[i].name);
        goto done;
      }
    }
  }
  text = json_dumps(index, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
  if (!text) {
    st = diag_set(d, PH_ERR_NO_MEMORY, "%s: cannot serialise the index", dir);
    goto done;
  }

  /* every shard and the index are written before any replaces what is in dir */
  files = calloc(n_shards + 1, sizeof *files);
  if (!files) {
    st = diag_set(d, PH_ERR_NO_MEMORY, "%s: cannot plan %zu shards", dir, n_shards);
    goto done;
  }
  for (size_t k = 0; k <= n_shards; k++) files[k].fd = -1;
  st = path_mkdirs(dir, d);
  for (size_t k = 0; st == PH_OK && k < n_shards; k++) {
    char name[ST_SHARD_NAME_BYTES], path[4096];
    shard_name(name, k, n_shards);
    st = path_join(path, sizeof path, dir, name, d);
    if (st == PH_OK)
      st = write_file(path, entries + first[k], first[k + 1] - first[k], first[k], fill, user,
                      &files[k], d);
  }
  if (st == PH_OK) {
    char path[4096];
    wfile *w = &files[n_shards];
    st = path_join(path, sizeof path, dir, ST_INDEX_NAME, d);
    if (st == PH_OK) st = wfile_open(w, path, d);
    if (st == PH_OK) st = wfile_write(w, text, strlen(text), d);
    if (st == PH_OK) st = wfile_finish(w, d);
  }
  for (size_t k = 0; st == PH_OK && k <= n_shards; k++) st = wfile_commit(&files[k], d);

done:
  for (size_t k = 0; files && k <= n_shards; k++) wfile_abort(&files[k]);
  free(files);
  free(text);
  json_decref(index);
  free(first);
  return st;
}
