/* op_cast — Cast (ai.onnx opset 13/19 without `saturate`): converts every element to the dtype
 * named by attribute `to` (an ONNX TensorProto code, dtype_from_onnx).
 *
 * Types: f32, f16, bf16, i64, i32, i8, u8 on both sides; any other `to` (or a missing one) is
 * PH_ERR_INVALID_ARGUMENT, any other input dtype PH_ERR_TENSOR_DTYPE. Semantics, per pair:
 *   float -> float   through f32, rounded once to nearest even (dtype.h converters); NaN stays
 *                    NaN, overflow to f16 gives inf.
 *   float -> int     truncates toward zero (C cast semantics) and SATURATES: values beyond the
 *                    target range clamp to its min/max, -inf/+inf likewise, NaN gives 0. ONNX
 *                    leaves out-of-range results undefined and C makes them undefined behaviour;
 *                    we pick a defined answer.
 *   int -> f32       nearest even (the C conversion).
 *   int -> f16/bf16  rounded once from the exact integer: an integer too wide for f32 is first
 *                    narrowed with round-to-odd, which makes the second rounding exact.
 *   int -> int       wraps (keeps the low bits, two's complement), as numpy's astype does.
 * Same dtype: a copy.
 */
#include <math.h>
#include <string.h>

#include "ops/op.h"
#include "ops/op_util.h"
#include "tensor/dtype.h"

#define CAST_CHUNK 256 /* f32 staging elements per step */

static int cast_dtype_ok(ph_dtype dt) {
  switch (dt) {
  case PH_DTYPE_F32:
  case PH_DTYPE_F16:
  case PH_DTYPE_BF16:
  case PH_DTYPE_I64:
  case PH_DTYPE_I32:
  case PH_DTYPE_I8:
  case PH_DTYPE_U8:
    return 1;
  default:
    return 0;
  }
}

static int is_int(ph_dtype dt) { return !dtype_is_compute_float(dt); }

static ph_status cast_target(const gnode *n, ph_dtype *to, diag *d) {
  RETURN_ERROR_IF(!node_attr(n, "to"), d, PH_ERR_INVALID_ARGUMENT,
                  "Cast: attribute `to` is required");
  int64_t code = 0;
  FORWARD_IF_ERROR(op_attr_int(n, "to", 0, &code, d));
  ph_dtype dt = dtype_from_onnx(code);
  RETURN_ERROR_IF(!cast_dtype_ok(dt), d, PH_ERR_INVALID_ARGUMENT,
                  "Cast: to = %lld is not a supported type (FLOAT=1, UINT8=2, INT8=3, INT32=6, "
                  "INT64=7, FLOAT16=10, BFLOAT16=16)",
                  (long long)code);
  *to = dt;
  return PH_OK;
}

static ph_status cast_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  RETURN_ERROR_IF(n->n_inputs != 1 || n->n_outputs != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "Cast takes 1 input and 1 output, got %d and %d", n->n_inputs, n->n_outputs);
  RETURN_ERROR_IF(in[0].dtype == PH_DTYPE_INVALID, d, PH_ERR_INVALID_ARGUMENT,
                  "Cast: input is required");
  RETURN_ERROR_IF(!cast_dtype_ok(in[0].dtype), d, PH_ERR_TENSOR_DTYPE,
                  "Cast: input is %s; expected F32, F16, BF16, I64, I32, I8 or U8",
                  op_dtype_name(in[0].dtype));
  ph_dtype to;
  FORWARD_IF_ERROR(cast_target(n, &to, d));
  *out = in[0];
  out->dtype = to;
  out->data = NULL;
  return PH_OK;
}

/* Integer element i of p (dtype dt) widened to int64. */
static int64_t int_get(const void *p, ph_dtype dt, int64_t i) {
  switch (dt) {
  case PH_DTYPE_I64:
    return ((const int64_t *)p)[i];
  case PH_DTYPE_I32:
    return ((const int32_t *)p)[i];
  case PH_DTYPE_I8:
    return ((const int8_t *)p)[i];
  default:
    return ((const uint8_t *)p)[i];
  }
}

/* Stores the low bits of v (wrapping) as element i of p. */
static void int_put(void *p, ph_dtype dt, int64_t i, int64_t v) {
  uint64_t u = (uint64_t)v;
  switch (dt) {
  case PH_DTYPE_I64:
    memcpy((int64_t *)p + i, &u, 8);
    return;
  case PH_DTYPE_I32: {
    uint32_t w = (uint32_t)u;
    memcpy((int32_t *)p + i, &w, 4);
    return;
  }
  case PH_DTYPE_I8: {
    uint8_t w = (uint8_t)u;
    memcpy((int8_t *)p + i, &w, 1);
    return;
  }
  default:
    ((uint8_t *)p)[i] = (uint8_t)u;
    return;
  }
}

/* Truncates f toward zero and clamps into [lo, hi]; NaN -> 0. The comparisons are done in
 * double, where every bound we use (up to 2^63) is exact. */
static int64_t sat_trunc(float f, int64_t lo, int64_t hi) {
  if (f != f) return 0;
  double t = trunc((double)f);
  if (t <= (double)lo) return lo;
  if (t >= (double)hi) return hi; /* (double)INT64_MAX rounds up to 2^63: >= catches it */
  return (int64_t)t;
}

static void int_range(ph_dtype dt, int64_t *lo, int64_t *hi) {
  switch (dt) {
  case PH_DTYPE_I64:
    *lo = INT64_MIN;
    *hi = INT64_MAX;
    return;
  case PH_DTYPE_I32:
    *lo = INT32_MIN;
    *hi = INT32_MAX;
    return;
  case PH_DTYPE_I8:
    *lo = INT8_MIN;
    *hi = INT8_MAX;
    return;
  default:
    *lo = 0;
    *hi = UINT8_MAX;
    return;
  }
}

/* v as f32 rounded to odd: exact when |v| < 2^24, else the truncated 24-bit value with its last
 * bit set when anything was dropped. Rounding that to f16/bf16 (<= 11 significant bits) then
 * equals rounding v directly. */
static float int_to_f32_odd(int64_t v) {
  uint64_t mag = v < 0 ? 0u - (uint64_t)v : (uint64_t)v;
  if (mag < (1u << 24)) return v < 0 ? -(float)mag : (float)mag;
  int shift = 0;
  while ((mag >> shift) >= (1u << 24)) shift++;
  uint64_t kept = mag >> shift;
  if (mag & ((UINT64_C(1) << shift) - 1)) kept |= 1u;
  float f = ldexpf((float)kept, shift);
  return v < 0 ? -f : f;
}

static ph_status cast_run(const gnode *n, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                          diag *d) {
  (void)ctx;
  const tensor *x = in[0];
  tensor *y = out[0];
  ph_dtype from = x->dtype, to;
  FORWARD_IF_ERROR(cast_target(n, &to, d));
  int64_t cnt = tensor_numel(x);
  if (cnt == 0) return PH_OK;
  if (from == to) {
    memcpy(y->data, x->data, (size_t)cnt * dtype_size(from));
    return PH_OK;
  }
  if (is_int(from) && is_int(to)) {
    for (int64_t i = 0; i < cnt; i++) int_put(y->data, to, i, int_get(x->data, from, i));
    return PH_OK;
  }
  float buf[CAST_CHUNK];
  for (int64_t i = 0; i < cnt; i += CAST_CHUNK) {
    int64_t m = cnt - i < CAST_CHUNK ? cnt - i : CAST_CHUNK;
    if (is_int(from)) {
      for (int64_t k = 0; k < m; k++) {
        int64_t v = int_get(x->data, from, i + k);
        buf[k] = to == PH_DTYPE_F32 ? (float)v : int_to_f32_odd(v);
      }
    } else {
      tensor_load_f32(x, i, m, buf);
    }
    if (is_int(to)) {
      int64_t lo, hi;
      int_range(to, &lo, &hi);
      for (int64_t k = 0; k < m; k++) int_put(y->data, to, i + k, sat_trunc(buf[k], lo, hi));
    } else {
      tensor_store_f32(y, i, m, buf);
    }
  }
  return PH_OK;
}

const op_def op_def_cast = {"", "Cast", 1, 1, 1, 1, cast_infer, cast_run, NULL, 0, NULL};
