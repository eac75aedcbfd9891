/* safetensors — read (mmapped, fully validated) and write Hugging Face safetensors files.
 *
 * File format: 8-byte little-endian header length n, n bytes of JSON
 *   { "__metadata__": {str: str}?, NAME: {"dtype": "F32", "shape": [..], "data_offsets": [b, e]},
 * ... } then the data section; offsets are relative to the data section's start (8 + n).
 *
 * Reading validates everything before any tensor is handed out, so a malformed or truncated
 * file is a typed error naming the problem and never a crash or an out-of-bounds read:
 *   PH_ERR_SAFETENSORS_HEADER_SIZE   file shorter than 8 bytes, n == 0, n > SAFETENSORS_MAX_HEADER
 *                                    (100 MiB), or n larger than the file
 *   PH_ERR_SAFETENSORS_HEADER        not JSON, not an object, duplicate names, a tensor entry that
 *                                    is not {dtype, shape, data_offsets} with the right types,
 *                                    negative dims, more than TENSOR_MAX_DIMS dims, bad metadata
 *   PH_ERR_SAFETENSORS_DTYPE         a dtype string we do not know (BOOL, F64, "F33", ...)
 *   PH_ERR_SAFETENSORS_SIZE_MISMATCH e - b != numel * dtype size, begin > end, or numel * size
 *                                    overflowing 64 bits
 *   PH_ERR_SAFETENSORS_RANGE         an offset above 2^53: wrong whatever the file's length
 *   PH_ERR_SAFETENSORS_TRUNCATED     the data section is shorter than the largest end (the file
 *                                    was cut); the message names the tensor with that end
 *   PH_ERR_SAFETENSORS_OVERLAP       two tensors' byte ranges intersect (empty ones never do)
 *   PH_ERR_SAFETENSORS_INDEX         model.safetensors.index.json malformed, a shard name that is
 *                                    not a plain file name (no '/', no ".."), a weight_map entry
 *                                    naming a missing shard or a tensor its shard lacks
 *   PH_ERR_DUPLICATE_TENSOR          the same name in two shards
 * Checks run in this order: length, JSON, metadata, then each entry in file order (structure,
 * dtype, RANGE, SIZE_MISMATCH), then TRUNCATED, then OVERLAP; the first failure is reported.
 * Tensors a shard holds beyond its weight_map entries are part of the set (so a stray copy of a
 * name in a second shard is still a DUPLICATE_TENSOR).
 * Gaps between tensors and trailing bytes are allowed (real files have alignment padding).
 * Data pointers are NOT aligned in general (real files pack bf16 at odd multiples of 2 bytes):
 * read through memcpy or copy out.
 */
#ifndef PH_IO_SAFETENSORS_H
#define PH_IO_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "base/diag.h"
#include "tensor/tensor.h"

#define SAFETENSORS_MAX_HEADER ((uint64_t)100 << 20)

typedef struct st_tensor {
  const char *name; /* owned by the set */
  ph_dtype dtype;
  shape shape;
  uint64_t data_begin; /* relative to the data section of its file */
  uint64_t data_end;
  const uint8_t *data; /* points into the mapping (or the caller's buffer for _parse) */
  int file_index;      /* which shard (0 for a single file) */
} st_tensor;

/* A set of tensors from one file or a sharded checkpoint. Sorted by name for lookup. */
typedef struct st_set st_set;

/* Parses and validates one safetensors image held in memory (bytes, size). Tensors point into
 * bytes, which must outlive the set. label names the source in error messages. This is the
 * entry point the fuzzer drives. */
ph_status st_parse(const uint8_t *bytes, size_t size, const char *label, st_set **out, diag *d);

/* Maps and validates one .safetensors file. */
ph_status st_open_file(const char *path, st_set **out, diag *d);

/* Opens a checkpoint directory: model.safetensors.index.json (sharded; every shard mapped and
 * validated, every weight_map entry checked against its shard) if present, else
 * model.safetensors. PH_ERR_NOT_FOUND if neither exists. */
ph_status st_open_dir(const char *dir, st_set **out, diag *d);

void st_close(st_set *s); /* NULL-safe */

size_t st_count(const st_set *s);
/* The file mapping of shard i (i < st_file_count), what the tensors of file_index i point into;
 * NULL past the end. An st_parse set's one entry has data == NULL (the caller owns the bytes). */
struct fmap;
size_t st_file_count(const st_set *s);
const struct fmap *st_file_map(const st_set *s, size_t i);
const st_tensor *st_at(const st_set *s, size_t i);           /* sorted by name */
const st_tensor *st_find(const st_set *s, const char *name); /* NULL if absent */
/* Metadata value from the first file's "__metadata__", NULL if absent. */
const char *st_metadata(const st_set *s, const char *key);
/* Total bytes of all tensor data. */
uint64_t st_total_bytes(const st_set *s);

/* ---- writing ---- */

/* Fills the tensor's bytes (exactly shape_bytes(shape, dtype) of them) into dst. */
typedef ph_status (*st_fill_fn)(void *user, size_t index, void *dst, diag *d);

typedef struct st_write_entry {
  const char *name;
  ph_dtype dtype;
  shape shape;
  const void *data; /* if non-NULL, the bytes to write; else fill() is called */
} st_write_entry;

/* Writes one file with the entries in the given order, data offsets packed in that order,
 * header padded with spaces to a multiple of 8, "__metadata__": {"format": "pt"}. fill may be
 * NULL if every entry has data. Streams: memory use is one tensor at a time. */
ph_status st_write_file(const char *path, const st_write_entry *entries, size_t n, st_fill_fn fill,
                        void *user, diag *d);

/* Writes entries across as few shards as keep each under max_shard_bytes (a tensor larger than
 * that gets a shard of its own), named model-00001-of-0000N.safetensors, plus
 * model.safetensors.index.json {"metadata": {"total_size": ..}, "weight_map": {name: file}}.
 * With everything fitting in one shard it still writes the sharded form. */
ph_status st_write_sharded(const char *dir, const st_write_entry *entries, size_t n,
                           uint64_t max_shard_bytes, st_fill_fn fill, void *user, diag *d);

#endif /* PH_IO_SAFETENSORS_H */
