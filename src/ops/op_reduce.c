/* op_reduce — STUB: contract and kernels not written yet. */
#include "ops/op.h"

const op_def op_def_reduce_sum = {"", "ReduceSum", 1, 2, 1, 1, NULL, NULL, NULL};
