/* op_rotary — STUB: contract and kernels not written yet. */
#include "ops/op.h"

const op_def op_def_rotary_embedding = {"com.microsoft", "RotaryEmbedding", 4, 4, 1, 1, NULL, NULL, NULL};
const op_def op_def_mrotary_embedding = {"com.microsoft", "MRotaryEmbedding", 4, 4, 1, 1, NULL, NULL, NULL};
