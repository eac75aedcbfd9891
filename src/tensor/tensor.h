/* tensor — shapes, the run-time tensor, element access, and the finiteness scan.
 *
 * Two ways to describe an array, for two jobs:
 *   shape  — dims read from untrusted files (checkpoints, packages, configs): every size
 *            computation on it is overflow-checked (shape_numel, shape_bytes return -1).
 *   tensor — the one run-time tensor: a non-owning, contiguous row-major view of typed memory
 *            with a concrete shape. The executor binds tensors as graph inputs and outputs, ops
 *            read and write them, and the cache hands out its KV pages and state rows as
 *            tensors. Whoever made the buffer frees it; its shape was checked when it was made,
 *            so tensor_numel does not check for overflow.
 * At most TENSOR_MAX_DIMS dims either way (the graph's GRAPH_MAX_DIMS is the same number).
 * Element access (tensor_get/set/load/store_f32) reads and writes any compute float dtype
 * (f32, f16, bf16) as f32, rounding to the tensor's dtype once on the way back.
 */
#ifndef PH_TENSOR_TENSOR_H
#define PH_TENSOR_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "base/diag.h"

#define TENSOR_MAX_DIMS 8

/* ---- shapes ---- */

typedef struct shape {
  int n_dims;                    /* 0 = scalar */
  int64_t dims[TENSOR_MAX_DIMS]; /* each >= 0 */
} shape;

/* Builds a shape from n dims (n <= TENSOR_MAX_DIMS). */
shape shape_make(int n_dims, const int64_t *dims);
shape shape_1d(int64_t a);
shape shape_2d(int64_t a, int64_t b);
shape shape_3d(int64_t a, int64_t b, int64_t c);

/* Element count; 1 for a scalar. Returns -1 if a dim is negative or the product overflows
 * int64. */
int64_t shape_numel(const shape *s);

/* Byte size for elements of dtype dt; -1 on overflow or an invalid dtype. */
int64_t shape_bytes(const shape *s, ph_dtype dt);

int shape_equal(const shape *a, const shape *b);

/* Writes "[a, b, c]" (always NUL-terminated; truncates). Returns buf. */
const char *shape_format(const shape *s, char *buf, size_t buf_bytes);

/* ---- the run-time tensor ---- */

/* Contiguous row-major data of a concrete shape: element i (flat) is at data + i * dtype size.
 * Non-owning. */
typedef struct tensor {
  ph_dtype dtype;
  int rank;                      /* 0 = scalar */
  int64_t dims[TENSOR_MAX_DIMS]; /* each >= 0 */
  void *data;
} tensor;

/* A tensor of dtype dt and shape dims[rank] over data (rank clamped to [0, TENSOR_MAX_DIMS];
 * dims past rank are 0). */
tensor tensor_make(ph_dtype dt, int rank, const int64_t *dims, void *data);

/* Element count; 1 for a scalar. The shape is trusted (no overflow check). */
int64_t tensor_numel(const tensor *t);
float tensor_get_f32(const tensor *t, int64_t i);   /* element i as f32 (any float dtype) */
void tensor_set_f32(tensor *t, int64_t i, float v); /* rounds to the tensor dtype */
/* Loads n elements starting at element i into dst as f32 (other dtypes than
 * f32/f16/bf16 through dtype_convert). */
void tensor_load_f32(const tensor *t, int64_t i, int64_t n, float *dst);
/* Stores n f32 values into elements [i, i+n), rounding to the tensor dtype (f32, f16, bf16;
 * a tensor of any other dtype is left untouched: integer outputs are written by their ops). */
void tensor_store_f32(tensor *t, int64_t i, int64_t n, const float *src);

/* ---- finiteness: NaN and infinities in weights ----
 * A checkpoint or package can carry NaN/Inf in a weight (a bad conversion, a corrupted file);
 * the model then runs and produces garbage silently. nonfinite_scan() folds one contiguous
 * tensor into a report; nonfinite_status() turns the report into PH_OK or a PH_ERR_NON_FINITE
 * naming the first bad tensor, its flat index (and multi-index) and its count. */
typedef struct nonfinite_report {
  int64_t n_tensors;     /* tensors scanned */
  int64_t n_bad_tensors; /* of them holding a NaN or an infinity */
  int64_t n_bad_values;  /* such elements, all tensors together */
  /* the first bad tensor in scan order */
  char first_name[192];
  ph_dtype first_dtype;
  shape first_shape;
  int64_t first_index; /* flat (row-major) index of its first non-finite element */
  int64_t first_count; /* its non-finite elements */
  float first_value;   /* that element: NaN, +inf or -inf */
} nonfinite_report;

void nonfinite_report_init(nonfinite_report *r);
/* Scans numel(s) contiguous elements of dt at data (integer dtypes count as finite). */
void nonfinite_scan(nonfinite_report *r, const char *name, ph_dtype dt, const shape *s,
                    const void *data);
/* PH_OK when nothing non-finite was found; else PH_ERR_NON_FINITE with "tensor NAME [shape]
 * dtype: C non-finite values, the first (nan) at flat index I [i, j]; T of N tensors hold NaN or
 * infinity (V values)". */
ph_status nonfinite_status(const nonfinite_report *r, diag *d);

#endif /* PH_TENSOR_TENSOR_H */
