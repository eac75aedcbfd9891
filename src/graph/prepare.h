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
 * - com.microsoft::MatMulNBits is left as it is (never rewritten into MatMulWT): it reads its
 *   packed weights itself. Its lazy quantized initializers (graph_add_initializer_quant) are
 *   quantized into the resident copy below, each weight's rows once for all its parts
 *   (graph_quant_read_rows), source rows released as they are consumed. WEIGHTS_MAP leaves them
 *   lazy: the executor materializes them into the graph's arena when it binds them.
 * - Nodes whose outputs nobody reads any more (the Casts above) are marked dead.
 * Then the graph is finalized again, so the rewritten nodes pass their contract checks.
 *
 * Where the weights live (weight_residency). WEIGHTS_COPY, the default: every initializer a live
 * node reads that is not the graph's own memory already — views of a checkpoint's or a package's
 * file mapping, lazy transposes and conversions — is copied once into one region of anonymous
 * memory aligned to 2 MiB and advised MADV_HUGEPAGE (base/fmap.h pages_alloc_huge), each value at
 * a 64-byte aligned offset, in the layout it has in the graph (MatMulWT's weights as the
 * checkpoint's rows; a package's [K, N] MatMul weight transposed into rows here). Values with the
 * same source share one copy (a tied embedding and LM head). As each source is copied, its pages
 * in the file mappings the graph knows (graph_adopt_mapping, graph_note_file_mapping) are dropped
 * from the process, so the resident set holds the copy instead of the mapping plus the copy;
 * the mappings stay valid (their pages read back from the file). Decode streams every weight
 * once per step, and on the development VM a file mapping (4 KiB pages, page-cache reclaim) read
 * 2-3.5x slower and erratically against huge-page-advised anonymous memory
 * (docs/performance.md). When the copy would exceed the memory the kernel reports available
 * (MemAvailable), the views are kept with a warning in the log, as WEIGHTS_MAP does: a checkpoint
 * larger than memory runs paged in from its file. WEIGHTS_MAP keeps the views (nothing copied; load
 * is faster and a checkpoint larger than memory still runs, paged in from the file). Graphs that
 * are exported are never prepared, so the exporter never copies. The copy is freed with the graph.
 */
#ifndef PH_GRAPH_PREPARE_H
#define PH_GRAPH_PREPARE_H

#include "graph/graph.h"

typedef enum weight_residency {
  WEIGHTS_COPY = 0, /* copied into huge-page-advised anonymous memory, mappings released */
  WEIGHTS_MAP = 1,  /* read from where the graph views them (the file mapping) */
} weight_residency;

/* Copies shared by the graphs of one checkpoint: the target's session and its MTP head's both
 * read the embedding (and a tied LM head). A graph prepared with a store takes from it every
 * weight already copied from the same source bytes, copies the rest into a region the store
 * owns, and lists them there; the store must outlive every graph prepared with it (a ph_model
 * owns its checkpoint's: model_weight_store). Not thread-safe: one prepare at a time. */
typedef struct weight_store weight_store;
ph_status weight_store_create(weight_store **out, diag *d);
void weight_store_free(weight_store *s);          /* NULL-safe */
size_t weight_store_bytes(const weight_store *s); /* bytes copied into it */

/* How to prepare (zero-initialised = the defaults: copy, no store, f32 linear layers).
 *   weights      where the weights live (above).
 *   store        copies shared between graphs (NULL: the graph owns its copy).
 *   matmul_bf16  the precision of the linear layers (docs/precision.md): 1 marks every MatMulWT
 *                prepare makes with the internal attribute bf16_dot = 1 (ops/op_matmul.c: the
 *                bf16 dot), 0 leaves them f32, -1 (auto) marks those whose weight is stored
 *                bf16. MoE experts stay f32 in every mode.
 *   n_threads    threads that quantize the lazy quantized weights into the resident copy (rows
 *                split among them, each row quantized by one: the bytes are the same for any
 *                count); 0: every online CPU (cpu_count_online), 1: the calling thread only. The
 *                threads live for the prepare call only. */
typedef struct prepare_options {
  weight_residency weights;
  weight_store *store;
  int matmul_bf16;
  int n_threads;
} prepare_options;

/* graph_prepare_cpu_opts with the defaults. */
ph_status graph_prepare_cpu(graph *g, diag *d);
/* *used_bf16 (may be NULL) is set to 1 when any MatMulWT got bf16_dot, else 0. Errors:
 * graph_finalize's; PH_ERR_INVALID_ARGUMENT for a matmul_bf16 outside -1..1; PH_ERR_NO_MEMORY
 * when the weight copy cannot be allocated (nothing is released then). */
ph_status graph_prepare_cpu_opts(graph *g, const prepare_options *o, int *used_bf16, diag *d);

#endif /* PH_GRAPH_PREPARE_H */
