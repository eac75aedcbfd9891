/* op_linear_attention_gate — STUB: contract and kernels not written yet. */
#include "ops/op.h"

const op_def op_def_linear_attention_gate = {"com.microsoft", "LinearAttentionGate", 3, 4, 1, 2, NULL, NULL, NULL};
