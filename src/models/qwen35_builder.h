/* qwen35_builder — internal to the qwen35 builder (qwen35.c: the forward pass; qwen35_io.c: the
 * graph I/O of each layout). Not for use outside src/models/qwen35*.c.
 */
#ifndef PH_MODELS_QWEN35_BUILDER_H
#define PH_MODELS_QWEN35_BUILDER_H

#include <stdint.h>

#include "models/builder.h"

/* The graph inputs of each layout, in the ABI's order (ids, then positions and the layout's
 * controls into b, then the two caches of every layer into io->past); see qwen35_io.c. */
void qwen35_dense_inputs(builder *b, graph_io *io);
void qwen35_packed_inputs(builder *b, graph_io *io);

/* Names and marks the outputs: io->logits, then every layer's io->present, with the layout's
 * symbolic dims. */
void qwen35_dense_outputs(builder *b, graph_io *io);
void qwen35_packed_outputs(builder *b, graph_io *io);

/* One decoder layer of kind `kind` (full or linear attention), its MLP a MoE block when moe:
 * (1+w) RMSNorm, the token mixer, (1+w) RMSNorm, MLP, with the weights lw(b, i, ...) of layer i
 * (the MTP builder points b->w at the MTP layers). The residual adds are fused into the next
 * norm (SkipSimplifiedLayerNormalization): *residual is the stream so far, branch the previous
 * layer's MLP output (-1 for the first layer: a plain norm of *residual). past[2] are the
 * layer's cache inputs; its presents are written to present[2]; a linear layer's compact
 * state-update outputs (model_options.state_update_capacity > 0) to su[2] (-1 without; never
 * written by a full-attention layer). Returns the MLP's output. */
int qwen35_decoder_layer(builder *b, int i, ph_layer_kind kind, int moe, int branch, int *residual,
                         const int past[2], int present[2], int su[2]);

/* Marks the packed graph output `name` f32 [num_tokens, H]: hidden (io dtype) cast to f32 when
 * needed (exact: widening). Appended after the outputs already marked. */
void qwen35_hidden_output(builder *b, int hidden, const char *name);

#endif /* PH_MODELS_QWEN35_BUILDER_H */
