/* op_cast — STUB: contract and kernels not written yet. */
#include "ops/op.h"

const op_def op_def_cast = {"", "Cast", 1, 1, 1, 1, NULL, NULL, NULL};
