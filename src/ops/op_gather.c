/* op_gather — STUB: contract and kernels not written yet. */
#include "ops/op.h"

const op_def op_def_gather = {"", "Gather", 2, 2, 1, 1, NULL, NULL, NULL};
