/* ops_registry — the table of every operator the executor knows. One op_def per op, defined in
 * its own file (op_<name>.c). */
#include <string.h>

#include "ops/op.h"

#define OP_LIST(X)                                                                                 \
  X(matmul)                                                                                        \
  X(matmul_wt)                                                                                     \
  X(matmul_nbits)                                                                                  \
  X(gather)                                                                                        \
  X(add)                                                                                           \
  X(sub)                                                                                           \
  X(mul)                                                                                           \
  X(div)                                                                                           \
  X(sigmoid)                                                                                       \
  X(softplus)                                                                                      \
  X(exp)                                                                                           \
  X(log)                                                                                           \
  X(neg)                                                                                           \
  X(cast)                                                                                          \
  X(reshape)                                                                                       \
  X(transpose)                                                                                     \
  X(split)                                                                                         \
  X(slice)                                                                                         \
  X(concat)                                                                                        \
  X(unsqueeze)                                                                                     \
  X(squeeze)                                                                                       \
  X(shape)                                                                                         \
  X(reduce_sum)                                                                                    \
  X(simplified_layer_norm)                                                                         \
  X(skip_simplified_layer_norm)                                                                    \
  X(gated_rms_norm)                                                                                \
  X(linear_attention_gate)                                                                         \
  X(linear_attention)                                                                              \
  X(causal_conv_with_state)                                                                        \
  X(group_query_attention)                                                                         \
  X(rotary_embedding)                                                                              \
  X(mrotary_embedding)                                                                             \
  X(paged_attention)                                                                               \
  X(varlen_causal_conv_with_state)                                                                 \
  X(gated_delta_net)                                                                               \
  X(softmax)                                                                                       \
  X(topk)                                                                                          \
  X(onehot)                                                                                        \
  X(moe)                                                                                           \
  X(qmoe)

#define OP_DECLARE_(name) extern const op_def op_def_##name;
OP_LIST(OP_DECLARE_)
#undef OP_DECLARE_

static const op_def *const OPS[] = {
#define OP_ENTRY_(name) &op_def_##name,
    OP_LIST(OP_ENTRY_)
#undef OP_ENTRY_
};

size_t op_count(void) { return sizeof OPS / sizeof OPS[0]; }

const op_def *op_at(size_t i) { return i < op_count() ? OPS[i] : NULL; }

const op_def *op_lookup(const char *domain, const char *op_type) {
  const char *dom = domain ? domain : "";
  /* ONNX spells the default domain "" or "ai.onnx" */
  if (strcmp(dom, "ai.onnx") == 0) dom = "";
  for (size_t i = 0; i < op_count(); i++)
    if (strcmp(OPS[i]->op_type, op_type) == 0 && strcmp(OPS[i]->domain, dom) == 0) return OPS[i];
  return NULL;
}
