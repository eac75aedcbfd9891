/* op_shape_ops — STUB: contract and kernels not written yet. */
#include "ops/op.h"

const op_def op_def_reshape = {"", "Reshape", 2, 2, 1, 1, NULL, NULL, NULL};
const op_def op_def_transpose = {"", "Transpose", 1, 1, 1, 1, NULL, NULL, NULL};
const op_def op_def_split = {"", "Split", 1, 2, 1, 64, NULL, NULL, NULL};
const op_def op_def_slice = {"", "Slice", 3, 5, 1, 1, NULL, NULL, NULL};
const op_def op_def_concat = {"", "Concat", 1, 64, 1, 1, NULL, NULL, NULL};
const op_def op_def_unsqueeze = {"", "Unsqueeze", 2, 2, 1, 1, NULL, NULL, NULL};
const op_def op_def_squeeze = {"", "Squeeze", 1, 2, 1, 1, NULL, NULL, NULL};
const op_def op_def_shape = {"", "Shape", 1, 1, 1, 1, NULL, NULL, NULL};
