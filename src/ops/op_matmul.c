/* op_matmul — STUB: contract and kernels not written yet. */
#include "ops/op.h"

const op_def op_def_matmul = {"", "MatMul", 2, 2, 1, 1, NULL, NULL, NULL};
const op_def op_def_matmul_wt = {"pagedhybrid.internal", "MatMulWT", 2, 3, 1, 1, NULL, NULL, NULL};
