/* op_causal_conv — STUB: contract and kernels not written yet. */
#include "ops/op.h"

const op_def op_def_causal_conv_with_state = {"com.microsoft", "CausalConvWithState", 2, 4, 1, 2, NULL, NULL, NULL};
