/* op_gqa — STUB: contract and kernels not written yet. */
#include "ops/op.h"

const op_def op_def_group_query_attention = {"com.microsoft", "GroupQueryAttention", 7, 16, 1, 4, NULL, NULL, NULL};
