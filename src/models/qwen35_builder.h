/* qwen35_builder — internal to the qwen35 builder (qwen35.c: the forward pass; qwen35_io.c: the
 * graph I/O of each layout). Not for use outside src/models/qwen35*.c.
 */
#ifndef PH_MODELS_QWEN35_BUILDER_H
#define PH_MODELS_QWEN35_BUILDER_H

#include <stdint.h>

#include "graph/graph.h"
#include "io/hf_config.h"
#include "models/weights.h"

/* The state of one build: the graph, the model, the layout options and the value ids every layer
 * reads (graph inputs, rotary caches and tables, GQA lengths). */
typedef struct builder {
  graph *g;
  const hf_config *c;
  const model_weights *w;
  char scope[96];
  int64_t max_context;
  int cos, sin;           /* rotary caches [ctx, rot/2] f32 */
  ph_dtype weight_dtype;  /* PH_DTYPE_INVALID: as stored */
  int positions;          /* position_ids, the graph input ([3,B,S] / [B,S] dense, [3,N] / [N]
                             packed) */
  int rotary_ops;         /* RoPE as plain ONNX ops (model_rotary) instead of the fused op */
  int rope_cos, rope_sin; /* rotary_ops: the shared per-token tables [.., 1, rot/2] f32, or -1 */
  int seqlens_k, total;   /* GQA lengths derived from attention_mask */
  int paged;              /* packed layout: activations [N, ...] instead of [B, S, ...] */
  ph_dtype io;            /* activation, cache and conv-state dtype (f32 for the dense layout) */
  int prune_lm_head;      /* packed: logits only for each sequence's last row */
  int cu, past_lens, block_table, metadata; /* packed layout graph inputs */
  int64_t block_size;                       /* packed: tokens per KV page */
} builder;

/* The value ids of the graph's inputs and outputs the forward pass reads and writes; the
 * positions and the packed controls live in the builder, which the layers read them from. */
typedef struct graph_io {
  int ids, mask;              /* input_ids; attention_mask (dense only, else -1) */
  int past[HF_MAX_LAYERS][2]; /* per layer: key/value (full attention) or conv/recurrent */
  int present[HF_MAX_LAYERS][2];
  int logits;
} graph_io;

/* The graph inputs of each layout, in the ABI's order (ids, then positions and the layout's
 * controls into b, then the two caches of every layer into io->past); see qwen35_io.c. */
void qwen35_dense_inputs(builder *b, graph_io *io);
void qwen35_packed_inputs(builder *b, graph_io *io);

/* Names and marks the outputs: io->logits, then every layer's io->present, with the layout's
 * symbolic dims. */
void qwen35_dense_outputs(builder *b, graph_io *io);
void qwen35_packed_outputs(builder *b, graph_io *io);

#endif /* PH_MODELS_QWEN35_BUILDER_H */
