/* op_layernorm — STUB: contract and kernels not written yet. */
#include "ops/op.h"

const op_def op_def_simplified_layer_norm = {"", "SimplifiedLayerNormalization", 2, 2, 1, 3, NULL, NULL, NULL};
const op_def op_def_skip_simplified_layer_norm = {"com.microsoft", "SkipSimplifiedLayerNormalization", 3, 4, 1, 4, NULL, NULL, NULL};
