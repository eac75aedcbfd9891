/* op_elementwise — STUB: contract and kernels not written yet. */
#include "ops/op.h"

const op_def op_def_add = {"", "Add", 2, 2, 1, 1, NULL, NULL, NULL};
const op_def op_def_sub = {"", "Sub", 2, 2, 1, 1, NULL, NULL, NULL};
const op_def op_def_mul = {"", "Mul", 2, 2, 1, 1, NULL, NULL, NULL};
const op_def op_def_div = {"", "Div", 2, 2, 1, 1, NULL, NULL, NULL};
const op_def op_def_sigmoid = {"", "Sigmoid", 1, 1, 1, 1, NULL, NULL, NULL};
const op_def op_def_softplus = {"", "Softplus", 1, 1, 1, 1, NULL, NULL, NULL};
const op_def op_def_exp = {"", "Exp", 1, 1, 1, 1, NULL, NULL, NULL};
const op_def op_def_neg = {"", "Neg", 1, 1, 1, 1, NULL, NULL, NULL};
