/* prepare — rewrites a finalized graph for the CPU executor. Never used on a graph that will be
 * exported: the nodes it creates are internal (gnode.internal) and have no ONNX meaning.
 *
 * Rewrites:
 * - MatMul(A, B) where B is a constant weight — an initializer, or a Cast of one — becomes
 *   pagedhybrid.internal::MatMulWT(A, W[N, K]) that reads the weight in its stored dtype and
 *   the checkpoint's row-per-output layout (no transposed or upcast copy). A lazily transposed
 *   initializer (graph_add_initializer_transposed) is used as its source view directly.
 * - com.microsoft::MoE whose expert weights (inputs 2 and 4) are a Cast of a float initializer
 *   reads the initializer directly (a widening or same-dtype Cast), or a copy rounded to the
 *   Cast's dtype (a narrowing one, so it sees the values the canonical graph means); the MoE
 *   node becomes internal (its inputs no longer share one dtype as ORT's schema wants).
 * - Nodes whose outputs nobody reads any more (the Casts above) are marked dead.
 * Then the graph is finalized again, so the rewritten nodes pass their contract checks.
 */
#ifndef PH_GRAPH_PREPARE_H
#define PH_GRAPH_PREPARE_H

#include "graph/graph.h"

ph_status graph_prepare_cpu(graph *g, diag *d);

/* graph_prepare_cpu with the precision of the linear layers (docs/precision.md): matmul_bf16 1
 * marks every MatMulWT it makes with the internal attribute bf16_dot = 1 (ops/op_matmul.c: the
 * bf16 dot), 0 leaves them f32 (graph_prepare_cpu), -1 (auto) marks those whose weight is
 * stored bf16. *used_bf16 (may be NULL) is set to 1 when any MatMulWT got bf16_dot, else 0. MoE
 * experts stay f32 in every mode. */
ph_status graph_prepare_cpu_ex(graph *g, int matmul_bf16, int *used_bf16, diag *d);

#endif /* PH_GRAPH_PREPARE_H */
