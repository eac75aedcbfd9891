/* op_gated_rms_norm — STUB: contract and kernels not written yet. */
#include "ops/op.h"

const op_def op_def_gated_rms_norm = {"com.microsoft", "GatedRMSNorm", 3, 3, 1, 1, NULL, NULL, NULL};
