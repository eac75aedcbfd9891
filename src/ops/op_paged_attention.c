/* op_paged_attention — STUB: contract and kernels not written yet (issue 5). */
#include "ops/op.h"

const op_def op_def_paged_attention = {
    "com.microsoft", "PagedAttention", 8, 17, 1, 3, NULL, NULL, NULL};
