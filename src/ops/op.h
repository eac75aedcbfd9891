/* op — the contract every operator implements, and the registry.
 *
 * One file per op in src/ops/ (op_matmul.c, op_linear_attention.c, ...). Each defines a const
 * op_def and registers it in ops_registry.c's table. An op has:
 *   infer  — the contract: checks arity (also enforced from min/max fields), attributes, input
 *            dtypes and ranks, and computes output dtype and shape. Called at build time with
 *            static shapes (unknown dims are -1; it must propagate unknowns, never guess) and
 *            with concrete shapes each time the executor plans. Errors are typed
 *            (PH_ERR_INVALID_ARGUMENT for a bad attribute, PH_ERR_TENSOR_SHAPE for ranks/dims,
 *            PH_ERR_TENSOR_DTYPE for dtypes) and the executor/graph prefix the node name.
 *   run    — computes outputs from inputs. Outputs may alias inputs only where the op's schema
 *            allows it (cache and state outputs); such ops must read what they need before
 *            writing. Kernels are single-threaded and pure; run() may split independent work
 *            (rows, heads, sequences) over ctx->pool, never a reduction: every output element
 *            is computed by the same code in the same order whatever the batch (batch
 *            invariance). run() never allocates: scratch comes from ctx->scratch, sized by
 *            scratch_bytes() from the same shapes.
 *   plan   — optional (plan_bytes > 0): the node's run-time geometry, computed once per set of
 *            concrete shapes, not once per run. Whoever runs the op calls infer() and then
 *            plan() with the same concrete input types (data visible for constants only) each
 *            time the shapes change, into plan_bytes of storage it owns (the executor: one block
 *            per executor, allocated at exec_create; tests/op_testing.h: per call), and hands it
 *            to every run() as ctx->plan until the shapes change again. plan() runs after
 *            infer() succeeded, so it only derives (sizes, strides, resolved attributes) and
 *            may assume infer()'s checks; it must not depend on the data of a non-constant
 *            input. run() then trusts ctx->plan and the shapes it was made for: it neither
 *            re-infers nor re-checks shapes, dtypes or output buffers (infer() is the one place
 *            they are checked). What only the data can reveal (positions out of range, block
 *            tables, cumulative lengths) stays checked in run(). An op with a plan returns
 *            PH_ERR_INTERNAL when ctx->plan is NULL. Ops without one (elementwise, shape ops:
 *            reading a few dims is all their run() does) see ctx->plan == NULL.
 * Storage dtypes f32/f16/bf16 are computed in f32 and rounded to the output dtype once.
 * in/out are the run-time `tensor` of src/tensor/tensor.h (with its element access,
 * tensor_load_f32/tensor_store_f32); dtype_is_compute_float is tensor/dtype.h's.
 */
#ifndef PH_OPS_OP_H
#define PH_OPS_OP_H

#include <stddef.h>
#include <stdint.h>

#include "base/diag.h"
#include "base/pool.h"
#include "graph/graph.h"
#include "tensor/dtype.h"
#include "tensor/tensor.h"

typedef struct op_ctx {
  pool *pool;    /* never NULL; may have 1 thread */
  void *scratch; /* scratch_bytes() bytes, 64-byte aligned (NULL if 0) */
  size_t scratch_bytes;
  const void *plan; /* the node's plan (plan_bytes bytes, 16-byte aligned); NULL without one */
} op_ctx;

typedef struct op_def {
  const char *domain; /* "" (ai.onnx) or "com.microsoft" */
  const char *op_type;
  int min_inputs, max_inputs;
  int min_outputs, max_outputs;
  /* in[i].dtype == PH_DTYPE_INVALID for an absent optional input; out has n->n_outputs entries
   * (absent optional outputs are ignored). */
  ph_status (*infer)(const gnode *n, const tinfo *in, tinfo *out, diag *d);
  /* in[i] / out[i] are NULL for absent slots. */
  ph_status (*run)(const gnode *n, const tensor *const *in, tensor *const *out, op_ctx *ctx,
                   diag *d);
  /* Optional: workspace for run() with these concrete input shapes (NULL means 0). */
  size_t (*scratch_bytes)(const gnode *n, const tinfo *in, int n_threads);
  /* Optional: the size of the node's plan (0: no plan hook) and the hook that fills it from
   * concrete input types (see plan above). The storage is zeroed before the first plan. */
  size_t plan_bytes;
  ph_status (*plan)(const gnode *n, const tinfo *in, void *plan, diag *d);
} op_def;

/* Alignment of a node's plan storage (enough for any geometry struct of ints, floats and
 * pointers). */
#define OP_PLAN_ALIGN 16

/* The op for (domain, op_type), or NULL. */
const op_def *op_lookup(const char *domain, const char *op_type);

/* Every registered op (for docs and tests). */
size_t op_count(void);
const op_def *op_at(size_t i);

#endif /* PH_OPS_OP_H */
