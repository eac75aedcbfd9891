/* op_elementwise — Add, Sub, Mul, Div (ai.onnx opset 14, numpy multidirectional broadcasting)
 * and the unary Sigmoid, Softplus, Exp, Log, Neg.
 *
 * Binary ops: both inputs share one dtype, which the output keeps. f32/f16/bf16 are computed in
 * f32 and rounded once. i64 and i32 use integer arithmetic that wraps on overflow (two's
 * complement, as numpy does; C signed overflow is avoided by computing in unsigned). Integer Div
 * truncates toward zero; INT_MIN / -1 wraps to INT_MIN; a zero anywhere in an integer divisor
 * is PH_ERR_INVALID_ARGUMENT, checked before anything is written. Broadcasting: dims are
 * right-aligned, a dim of 1 stretches; an unknown dim against 1 stays unknown, against any other
 * known d it must be d. All four share one loop: dims are coalesced to a few (outer, inner)
 * runs where each input's inner stride is 0 (broadcast) or 1, so the inner loops are flat.
 *
 * Unary ops: Sigmoid, Softplus, Exp and Log take f32/f16/bf16; Neg also i64, i32, i8 (wrapping).
 * Exp is act_expf and Sigmoid act_sigmoidf (kernels/act.h: one exponential written as IEEE
 * operations, within ACT_EXP_ULP ulp of exp, vectorised with the same bits in every variant of
 * the dispatch table's `act` column): Sigmoid is 1/(1+e^-x) for x >= 0 and e^x/(1+e^x) below
 * (no overflow either way). Softplus is x for x > 20 (where log1p(e^x) == x in f32) else
 * log1pf(expf(x)), and Log libm's logf (log 0 = -inf, a negative x gives NaN, as IEEE says).
 *
 * Every output element depends only on its inputs, so large tensors are split over the pool
 * by rows without affecting results. run() never allocates: f32 operands that step by 1 are
 * read and written in place; anything else (f16/bf16, a broadcast scalar) goes through
 * 256-element stack buffers. Either way each element gets the same operations, so the staging
 * changes no bits.
 */
#include <math.h>
#include <string.h>

#include "kernels/dispatch.h"
#include "ops/op.h"
#include "ops/op_util.h"
#include "tensor/dtype.h"

#define EW_CHUNK        256       /* f32 staging elements per step */
#define EW_PARALLEL_MIN (1 << 15) /* below this many elements the pool is not worth it */

typedef enum bin_op { BIN_ADD, BIN_SUB, BIN_MUL, BIN_DIV } bin_op;
typedef enum un_op { UN_SIGMOID, UN_SOFTPLUS, UN_EXP, UN_LOG, UN_NEG } un_op;

static const char *const BIN_NAMES[] = {"Add", "Sub", "Mul", "Div"};
static const char *const UN_NAMES[] = {"Sigmoid", "Softplus", "Exp", "Log", "Neg"};

/* ---- broadcasting --------------------------------------------------------------------------- */

/* A broadcast iteration: `rank` dims (innermost last) with per-input element strides; after
 * coalescing the innermost stride of each input is 0 or 1. */
typedef struct bc_plan {
  int rank;
  int64_t dims[GRAPH_MAX_DIMS];
  int64_t sa[GRAPH_MAX_DIMS], sb[GRAPH_MAX_DIMS];
  int64_t inner, n_rows; /* dims[rank - 1] and the product of the others */
} bc_plan;

static void bc_plan_make(const tensor *a, const tensor *b, const tensor *y, bc_plan *p) {
  int r = y->rank;
  int64_t dims[GRAPH_MAX_DIMS], sa[GRAPH_MAX_DIMS], sb[GRAPH_MAX_DIMS];
  int64_t ca = 1, cb = 1;
  for (int i = r - 1; i >= 0; i--) {
    int ia = i - (r - a->rank), ib = i - (r - b->rank);
    int64_t da = ia >= 0 ? a->dims[ia] : 1, db = ib >= 0 ? b->dims[ib] : 1;
    dims[i] = y->dims[i];
    sa[i] = da == 1 ? 0 : ca;
    sb[i] = db == 1 ? 0 : cb;
    ca *= da;
    cb *= db;
  }
  /* coalesce from the inside out: dim i folds into the run below it when both inputs step
   * through it as through one longer dim */
  int n = 0;
  for (int i = r - 1; i >= 0; i--) {
    if (dims[i] == 1) continue;
    if (n > 0) {
      int j = n - 1;
      if (sa[i] == sa[j] * p->dims[j] && sb[i] == sb[j] * p->dims[j]) {
        p->dims[j] *= dims[i];
        continue;
      }
    }
    p->dims[n] = dims[i];
    p->sa[n] = sa[i];
    p->sb[n] = sb[i];
    n++;
  }
  if (n == 0) {
    p->dims[0] = 1;
    p->sa[0] = p->sb[0] = 0;
    n = 1;
  }
  /* reverse to outermost-first */
  for (int i = 0; i < n / 2; i++) {
    int64_t t = p->dims[i];
    p->dims[i] = p->dims[n - 1 - i];
    p->dims[n - 1 - i] = t;
    t = p->sa[i];
    p->sa[i] = p->sa[n - 1 - i];
    p->sa[n - 1 - i] = t;
    t = p->sb[i];
    p->sb[i] = p->sb[n - 1 - i];
    p->sb[n - 1 - i] = t;
  }
  p->rank = n;
  p->inner = p->dims[n - 1];
  p->n_rows = 1;
  for (int i = 0; i + 1 < n; i++) p->n_rows *= p->dims[i];
}

/* Element offsets in a and b of the first element of outer row `row`. */
static void bc_row_offsets(const bc_plan *p, int64_t row, int64_t *oa, int64_t *ob) {
  int64_t a = 0, b = 0;
  for (int i = p->rank - 2; i >= 0; i--) {
    int64_t k = row % p->dims[i];
    row /= p->dims[i];
    a += k * p->sa[i];
    b += k * p->sb[i];
  }
  *oa = a;
  *ob = b;
}

/* ---- binary kernels ------------------------------------------------------------------------- */

static void load_f32(const tensor *t, int64_t off, int64_t stride, int64_t n, float *dst) {
  if (stride == 0) {
    float v = tensor_get_f32(t, off);
    for (int64_t i = 0; i < n; i++) dst[i] = v;
  } else {
    tensor_load_f32(t, off, n, dst);
  }
}

static void bin_f32(bin_op op, const float *a, const float *b, float *y, int64_t n) {
  switch (op) {
  case BIN_ADD:
    for (int64_t i = 0; i < n; i++) y[i] = a[i] + b[i];
    break;
  case BIN_SUB:
    for (int64_t i = 0; i < n; i++) y[i] = a[i] - b[i];
    break;
  case BIN_MUL:
    for (int64_t i = 0; i < n; i++) y[i] = a[i] * b[i];
    break;
  case BIN_DIV:
    for (int64_t i = 0; i < n; i++) y[i] = a[i] / b[i];
    break;
  }
}

static int64_t bin_i64(bin_op op, int64_t a, int64_t b) {
  uint64_t ua = (uint64_t)a, ub = (uint64_t)b, r;
  switch (op) {
  case BIN_ADD:
    r = ua + ub;
    break;
  case BIN_SUB:
    r = ua - ub;
    break;
  case BIN_MUL:
    r = ua * ub;
    break;
  default:
    r = b == -1 ? 0u - ua : (uint64_t)(a / b);
    break; /* b != 0: checked first */
  }
  int64_t s;
  memcpy(&s, &r, 8);
  return s;
}

static int32_t bin_i32(bin_op op, int32_t a, int32_t b) {
  /* the 64-bit result of two 32-bit operands, wrapped to 32 bits */
  uint32_t r = (uint32_t)(uint64_t)bin_i64(op, a, b);
  int32_t s;
  memcpy(&s, &r, 4);
  return s;
}

/* y[0..n) = a op b where a and b step by sa, sb (0 or 1) elements. */
static void bin_row(bin_op op, const tensor *a, int64_t oa, int64_t sa, const tensor *b, int64_t ob,
                    int64_t sb, tensor *y, int64_t oy, int64_t n) {
  switch (y->dtype) {
  case PH_DTYPE_I64: {
    const int64_t *pa = (const int64_t *)a->data + oa, *pb = (const int64_t *)b->data + ob;
    int64_t *py = (int64_t *)y->data + oy;
    for (int64_t i = 0; i < n; i++) py[i] = bin_i64(op, pa[i * sa], pb[i * sb]);
    return;
  }
  case PH_DTYPE_I32: {
    const int32_t *pa = (const int32_t *)a->data + oa, *pb = (const int32_t *)b->data + ob;
    int32_t *py = (int32_t *)y->data + oy;
    for (int64_t i = 0; i < n; i++) py[i] = bin_i32(op, pa[i * sa], pb[i * sb]);
    return;
  }
  case PH_DTYPE_F32:
    if (sa == 1 && sb == 1) { /* no staging: the same operation per element */
      bin_f32(op, (const float *)a->data + oa, (const float *)b->data + ob, (float *)y->data + oy,
              n);
      return;
    }
    break;
  default:
    break;
  }
  float fa[EW_CHUNK], fb[EW_CHUNK], fy[EW_CHUNK];
  for (int64_t i = 0; i < n; i += EW_CHUNK) {
    int64_t m = n - i < EW_CHUNK ? n - i : EW_CHUNK;
    load_f32(a, oa + i * sa, sa, m, fa);
    load_f32(b, ob + i * sb, sb, m, fb);
    bin_f32(op, fa, fb, fy, m);
    tensor_store_f32(y, oy + i, m, fy);
  }
}

typedef struct bin_job {
  bin_op op;
  const tensor *a, *b;
  tensor *y;
  bc_plan plan;
  int64_t n_tasks;
} bin_job;

static void bin_task(void *ctx, size_t task, int thread) {
  (void)thread;
  const bin_job *j = ctx;
  const bc_plan *p = &j->plan;
  int64_t r0 = (int64_t)task * p->n_rows / j->n_tasks;
  int64_t r1 = ((int64_t)task + 1) * p->n_rows / j->n_tasks;
  int64_t sa = p->sa[p->rank - 1], sb = p->sb[p->rank - 1];
  for (int64_t r = r0; r < r1; r++) {
    int64_t oa, ob;
    bc_row_offsets(p, r, &oa, &ob);
    bin_row(j->op, j->a, oa, sa, j->b, ob, sb, j->y, r * p->inner, p->inner);
  }
}

static ph_status binary_infer(bin_op op, const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  const char *name = BIN_NAMES[op];
  RETURN_ERROR_IF(n->n_inputs != 2 || n->n_outputs != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "%s takes 2 inputs and 1 output, got %d and %d", name, n->n_inputs, n->n_outputs);
  const tinfo *a = &in[0], *b = &in[1];
  RETURN_ERROR_IF(a->dtype == PH_DTYPE_INVALID || b->dtype == PH_DTYPE_INVALID, d,
                  PH_ERR_INVALID_ARGUMENT, "%s: both inputs are required", name);
  RETURN_ERROR_IF(!dtype_is_compute_float(a->dtype) && a->dtype != PH_DTYPE_I64 &&
                      a->dtype != PH_DTYPE_I32,
                  d, PH_ERR_TENSOR_DTYPE, "%s: A is %s; expected F32, F16, BF16, I64 or I32", name,
                  op_dtype_name(a->dtype));
  RETURN_ERROR_IF(a->dtype != b->dtype, d, PH_ERR_TENSOR_DTYPE,
                  "%s: A is %s but B is %s; both must have one dtype", name,
                  op_dtype_name(a->dtype), op_dtype_name(b->dtype));
  memset(out, 0, sizeof *out);
  out->dtype = a->dtype;
  if (a->rank < 0 || b->rank < 0) {
    out->rank = -1;
    return PH_OK;
  }
  return op_broadcast(n, "output dim", a->rank, a->dims, b->rank, b->dims, &out->rank, out->dims,
                      d);
}

static ph_status binary_run(bin_op op, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                            diag *d) {
  bin_job j;
  memset(&j, 0, sizeof j);
  j.op = op;
  j.a = in[0];
  j.b = in[1];
  j.y = out[0];
  int64_t n = tensor_numel(j.y);
  if (n == 0) return PH_OK;
  if (op == BIN_DIV && (j.b->dtype == PH_DTYPE_I64 || j.b->dtype == PH_DTYPE_I32)) {
    int64_t nb = tensor_numel(j.b);
    for (int64_t i = 0; i < nb; i++) {
      int64_t v = j.b->dtype == PH_DTYPE_I64 ? ((const int64_t *)j.b->data)[i]
                                             : ((const int32_t *)j.b->data)[i];
      RETURN_ERROR_IF(v == 0, d, PH_ERR_INVALID_ARGUMENT,
                      "Div: integer division by zero (element %lld of B)", (long long)i);
    }
  }
  bc_plan_make(j.a, j.b, j.y, &j.plan);
  int T = pool_threads(ctx->pool);
  j.n_tasks = n < EW_PARALLEL_MIN || T == 1 ? 1 : (int64_t)T * 4;
  if (j.n_tasks > j.plan.n_rows) j.n_tasks = j.plan.n_rows;
  pool_run(ctx->pool, (size_t)j.n_tasks, bin_task, &j);
  return PH_OK;
}

#define BINARY_OP(lower, OPV, Name)                                                                \
  static ph_status lower##_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {           \
    return binary_infer(OPV, n, in, out, d);                                                       \
  }                                                                                                \
  static ph_status lower##_run(const gnode *n, const tensor *const *in, tensor *const *out,        \
                               op_ctx *ctx, diag *d) {                                             \
    (void)n;                                                                                       \
    return binary_run(OPV, in, out, ctx, d);                                                       \
  }                                                                                                \
  const op_def op_def_##lower = {"", Name, 2, 2, 1, 1, lower##_infer, lower##_run, NULL, 0, NULL};

BINARY_OP(add, BIN_ADD, "Add")
BINARY_OP(sub, BIN_SUB, "Sub")
BINARY_OP(mul, BIN_MUL, "Mul")
BINARY_OP(div, BIN_DIV, "Div")

/* ---- unary ---------------------------------------------------------------------------------- */

static float softplus_f32(float x) { return x > 20.0f ? x : log1pf(expf(x)); }

/* y[0..n) = op(x[0..n)); y may equal x. */
static void un_f32(un_op op, const act_kernels *act, const float *x, float *y, int64_t n) {
  switch (op) {
  case UN_SIGMOID:
    act->sigmoid(x, y, n);
    break;
  case UN_SOFTPLUS:
    for (int64_t i = 0; i < n; i++) y[i] = softplus_f32(x[i]);
    break;
  case UN_EXP:
    act->exp(x, y, n);
    break;
  case UN_LOG:
    for (int64_t i = 0; i < n; i++) y[i] = logf(x[i]);
    break;
  case UN_NEG:
    for (int64_t i = 0; i < n; i++) y[i] = -x[i];
    break;
  }
}

typedef struct un_job {
  un_op op;
  const act_kernels *act; /* the active variant's, read once per run */
  const tensor *x;
  tensor *y;
  int64_t n, n_tasks;
} un_job;

static void un_task(void *ctx, size_t task, int thread) {
  (void)thread;
  const un_job *j = ctx;
  int64_t i0 = (int64_t)task * j->n / j->n_tasks, i1 = ((int64_t)task + 1) * j->n / j->n_tasks;
  switch (j->x->dtype) {
  case PH_DTYPE_I64: {
    const int64_t *px = j->x->data;
    int64_t *py = j->y->data;
    for (int64_t i = i0; i < i1; i++) py[i] = bin_i64(BIN_SUB, 0, px[i]);
    return;
  }
  case PH_DTYPE_I32: {
    const int32_t *px = j->x->data;
    int32_t *py = j->y->data;
    for (int64_t i = i0; i < i1; i++) py[i] = bin_i32(BIN_SUB, 0, px[i]);
    return;
  }
  case PH_DTYPE_I8: {
    const int8_t *px = j->x->data;
    int8_t *py = j->y->data;
    for (int64_t i = i0; i < i1; i++) {
      uint8_t u = (uint8_t)(0u - (uint8_t)px[i]); /* wraps: -(-128) == -128 */
      memcpy(&py[i], &u, 1);
    }
    return;
  }
  case PH_DTYPE_F32: /* no staging */
    un_f32(j->op, j->act, (const float *)j->x->data + i0, (float *)j->y->data + i0, i1 - i0);
    return;
  default:
    break;
  }
  float buf[EW_CHUNK];
  for (int64_t i = i0; i < i1; i += EW_CHUNK) {
    int64_t m = i1 - i < EW_CHUNK ? i1 - i : EW_CHUNK;
    tensor_load_f32(j->x, i, m, buf);
    un_f32(j->op, j->act, buf, buf, m);
    tensor_store_f32(j->y, i, m, buf);
  }
}

static ph_status unary_infer(un_op op, const gnode *n, const tinfo *in, tinfo *out, diag *d) {
  const char *name = UN_NAMES[op];
  RETURN_ERROR_IF(n->n_inputs != 1 || n->n_outputs != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "%s takes 1 input and 1 output, got %d and %d", name, n->n_inputs, n->n_outputs);
  ph_dtype dt = in[0].dtype;
  RETURN_ERROR_IF(dt == PH_DTYPE_INVALID, d, PH_ERR_INVALID_ARGUMENT, "%s: X is required", name);
  int ok = dtype_is_compute_float(dt) ||
           (op == UN_NEG && (dt == PH_DTYPE_I64 || dt == PH_DTYPE_I32 || dt == PH_DTYPE_I8));
  RETURN_ERROR_IF(!ok, d, PH_ERR_TENSOR_DTYPE, "%s: X is %s; expected F32, F16 or BF16%s", name,
                  op_dtype_name(dt), op == UN_NEG ? " (or I64, I32, I8)" : "");
  *out = in[0];
  out->data = NULL;
  return PH_OK;
}

static ph_status unary_run(un_op op, const tensor *const *in, tensor *const *out, op_ctx *ctx) {
  un_job j;
  j.op = op;
  j.act = kernel_set_of(kernel_variant_active())->act;
  j.x = in[0];
  j.y = out[0];
  j.n = tensor_numel(j.x);
  if (j.n == 0) return PH_OK;
  int T = pool_threads(ctx->pool);
  j.n_tasks = j.n < EW_PARALLEL_MIN || T == 1 ? 1 : (int64_t)T * 4;
  pool_run(ctx->pool, (size_t)j.n_tasks, un_task, &j);
  return PH_OK;
}

#define UNARY_OP(lower, OPV, Name)                                                                 \
  static ph_status lower##_infer(const gnode *n, const tinfo *in, tinfo *out, diag *d) {           \
    return unary_infer(OPV, n, in, out, d);                                                        \
  }                                                                                                \
  static ph_status lower##_run(const gnode *n, const tensor *const *in, tensor *const *out,        \
                               op_ctx *ctx, diag *d) {                                             \
    (void)n;                                                                                       \
    (void)d;                                                                                       \
    return unary_run(OPV, in, out, ctx);                                                           \
  }                                                                                                \
  const op_def op_def_##lower = {"", Name, 1, 1, 1, 1, lower##_infer, lower##_run, NULL, 0, NULL};

UNARY_OP(sigmoid, UN_SIGMOID, "Sigmoid")
UNARY_OP(softplus, UN_SOFTPLUS, "Softplus")
UNARY_OP(exp, UN_EXP, "Exp")
UNARY_OP(log, UN_LOG, "Log")
UNARY_OP(neg, UN_NEG, "Neg")
