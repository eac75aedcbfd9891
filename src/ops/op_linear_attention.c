/* op_linear_attention — STUB: contract and kernels not written yet. */
#include "ops/op.h"

const op_def op_def_linear_attention = {"com.microsoft", "LinearAttention", 3, 6, 1, 2, NULL, NULL, NULL};
