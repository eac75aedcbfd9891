/* op_varlen_causal_conv — STUB: contract and kernels not written yet (issue 5). */
#include "ops/op.h"

const op_def op_def_varlen_causal_conv_with_state = {
    "com.microsoft", "VarlenCausalConvWithState", 5, 6, 2, 3, NULL, NULL, NULL};
