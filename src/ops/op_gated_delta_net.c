/* op_gated_delta_net — STUB: contract and kernels not written yet (issue 5). */
#include "ops/op.h"

const op_def op_def_gated_delta_net = {
    "com.microsoft", "GatedDeltaNet", 3, 11, 1, 3, NULL, NULL, NULL};
