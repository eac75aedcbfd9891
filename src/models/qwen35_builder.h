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

#endif /* PH_MODELS_QWEN35_BUILDER_H */
