/* op_util — the shared toolkit of the operator files (src/ops/op_*.c): typed attribute getters,
 * optional input/output tests, static-shape helpers and numpy broadcasting of dims.
 *
 * Every op's infer() runs at build time on static types whose dims (or rank) may be unknown
 * (-1), and again on concrete shapes each time the executor re-plans (then the op's plan hook
 * follows, on the same types: op.h). These helpers read -1 as "unknown" throughout,
 * propagate it and never guess. Errors carry the typed statuses op.h prescribes and a message
 * that starts with the node's op type ("LinearAttention: ...") and names the attribute, input or
 * dim with expected vs got; the graph and the executor add the node name. Nothing here
 * allocates, keeps state or reads tensor contents; d may be NULL everywhere (as in
 * scratch_bytes(), which re-runs a resolve without a diag). Implemented in op_common.c; tensor
 * element access (tensor_*) is src/tensor/tensor.h's. Internal to src/ops, not public.
 */
#ifndef PH_OPS_OP_UTIL_H
#define PH_OPS_OP_UTIL_H

#include <stdint.h>

#include "ops/op.h"

/* ---- attributes ----------------------------------------------------------------------------
 * Absent: *out = def and PH_OK. Present with another type: *out = def and
 * PH_ERR_INVALID_ARGUMENT, "<op>: attribute <name> must be an int, got a float". Types are
 * strict, as in ONNX: an int attribute is not accepted where a float is expected (an exporter
 * that writes epsilon = 0 as an int is reported, not guessed at), nor a float for an int. Value
 * ranges are the caller's to check. Strings and lists point into the node (owned by the graph). */
ph_status op_attr_int(const gnode *n, const char *name, int64_t def, int64_t *out, diag *d);
ph_status op_attr_float(const gnode *n, const char *name, float def, float *out, diag *d);
/* A string attribute whose value is NULL counts as the wrong type. def may be NULL. */
ph_status op_attr_string(const gnode *n, const char *name, const char *def, const char **out,
                         diag *d);
/* A list of ints: *v and *count elements. Absent: *v = NULL and *count = -1, so that "absent"
 * (often a default) differs from "empty". */
ph_status op_attr_ints(const gnode *n, const char *name, const int64_t **v, int *count, diag *d);
/* update_rule of the recurrent-state ops (LinearAttention, GatedDeltaNet): "linear", "gated",
 * "delta" or "gated_delta" (the default); *name gets the value for messages. Another value is
 * PH_ERR_INVALID_ARGUMENT, "<op>: update_rule "x" is not linear, gated, delta or gated_delta". */
ph_status op_attr_update_rule(const gnode *n, const char **name, int *gated, int *delta, diag *d);
/* activation of the causal convolutions: "none" (the default, *silu = 0), "silu" or "swish"
 * (*silu = 1); another value is PH_ERR_INVALID_ARGUMENT naming it. */
ph_status op_attr_conv_activation(const gnode *n, int *silu, diag *d);

/* ---- inputs and outputs -------------------------------------------------------------------- */

/* Input i is present: i < n->n_inputs and in[i] is not an absent optional slot. */
int op_has_input(const gnode *n, const tinfo *in, int i);
/* Optional output i is requested: i < n->n_outputs and not an empty slot (-1 in a graph; a node
 * without an outputs array, as tests build, requests every slot it has). */
int op_wants_output(const gnode *n, int i);
/* The static type of a run-time tensor, data pointer included (for callers outside the
 * executor that size an op's scratch from tensors they hold, as bench/bench_matmul.c does). run()
 * never re-derives its geometry from its tensors: an op with a geometry reads its plan (op.h). */
tinfo op_tinfo_of(const tensor *t);

/* ---- static shapes (dims < 0 are unknown) -------------------------------------------------- */

/* Upper-case dtype name for messages ("F32", "BF16", "I64"); "INVALID" for an absent input. */
const char *op_dtype_name(ph_dtype dt);
/* Dim i of t, or -1 while the rank is unknown. When the rank is known, i must be < rank. */
int64_t op_dim(const tinfo *t, int i);
/* Both dims known and different. */
int op_dims_conflict(int64_t a, int64_t b);
/* A known rank must equal rank: else PH_ERR_TENSOR_SHAPE, "<op>: <what> must have rank 3, got
 * 2". An unknown rank passes. what names the input, with its layout if useful ("key [B,T,D]"). */
ph_status op_check_rank(const gnode *n, const tinfo *t, int rank, const char *what, diag *d);
/* Folds dim v into *acc: unknown v leaves *acc; a known v fills an unknown *acc; two known
 * values must agree, else PH_ERR_TENSOR_SHAPE, "<op>: <what> is 3 here but 4 elsewhere". */
ph_status op_merge_dim(const gnode *n, int64_t *acc, int64_t v, const char *what, diag *d);
/* Normalizes an axis against rank r: valid in [-r, r-1], negative counts from the end. Else
 * PH_ERR_INVALID_ARGUMENT, "<op>: axis 5 is out of range [-3, 2] for rank 3". */
ph_status op_norm_axis(const gnode *n, int64_t axis, int r, int *out, diag *d);
/* numpy broadcasting of dims a (rank ra) and b (rank rb), right-aligned, into o (rank
 * *ro = max(ra, rb) <= GRAPH_MAX_DIMS): equal dims stay, a 1 stretches, an unknown dim against
 * 1 stays unknown and against a known d > 1 becomes d. Two known dims other than 1 that differ
 * are PH_ERR_TENSOR_SHAPE, "<op>: <what> 2: 3 and 4 do not broadcast" (what: "batch dim"). */
ph_status op_broadcast(const gnode *n, const char *what, int ra, const int64_t *a, int rb,
                       const int64_t *b, int *ro, int64_t *o, diag *d);

#endif /* PH_OPS_OP_UTIL_H */
