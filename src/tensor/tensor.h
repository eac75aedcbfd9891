/* tensor — shapes and non-owning views of typed memory.
 *
 * A view never owns its data; whoever made the buffer frees it. Strides are in elements.
 * Shapes are at most TENSOR_MAX_DIMS dims; every size computation is overflow-checked because
 * shapes come from untrusted files.
 */
#ifndef PH_TENSOR_TENSOR_H
#define PH_TENSOR_TENSOR_H

#include <stddef.h>
#include <stdint.h>

#include "base/diag.h"

#define TENSOR_MAX_DIMS 8

typedef struct shape {
  int n_dims;                    /* 0 = scalar */
  int64_t dims[TENSOR_MAX_DIMS]; /* each >= 0 */
} shape;

typedef struct tensor_view {
  ph_dtype dtype;
  shape shape;
  int64_t strides[TENSOR_MAX_DIMS]; /* elements */
  void *data;
} tensor_view;

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

/* A contiguous row-major view of data. */
tensor_view tensor_view_make(void *data, ph_dtype dt, shape s);

int tensor_view_is_contiguous(const tensor_view *v);

/* View of index i along dim 0 (rank drops by one). i must be in range. */
tensor_view tensor_view_index0(const tensor_view *v, int64_t i);

/* View of rows [begin, end) along dim 0. */
tensor_view tensor_view_slice0(const tensor_view *v, int64_t begin, int64_t end);

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
