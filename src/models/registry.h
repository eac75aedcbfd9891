/* registry — the model families pagedhybrid builds graphs for, and the options of a build.
 *
 * Whoever needs a model's graph (the runtime's sessions, export, tests) asks here, by the
 * checkpoint's parsed config, never a family's builder by name: adding a family means a builder
 * file in src/models/ and one row in registry.c's table, and nothing above this module changes
 * (docs/architecture.md, "Adding a model family"). A family without a builder is
 * PH_ERR_UNSUPPORTED naming it.
 *
 * Today: Qwen3.5 / 3.6 / 3.8 and Qwen3-Next, dense or MoE (models/qwen35.h), and DeepSeek-V2/V3
 * (models/deepseek.h), each in the dense or the packed paged layout.
 */
#ifndef PH_MODELS_REGISTRY_H
#define PH_MODELS_REGISTRY_H

#include <stdint.h>

#include "base/diag.h"
#include "graph/graph.h"
#include "io/hf_config.h"
#include "models/weights.h"

/* How RoPE is written: the fused com.microsoft op (MRotaryEmbedding / RotaryEmbedding), or plain
 * ONNX ops (Gather, Transpose, Mul, Sub, Add, Split, Concat) that any runtime has kernels for.
 * Both compute in f32 with the same roundings: their outputs are bit-identical. */
typedef enum model_rotary { MODEL_ROTARY_FUSED = 0, MODEL_ROTARY_OPS = 1 } model_rotary;

/* The dense layout's recurrent op of a linear layer (abi §8.4 linear_attn_op): LinearAttention
 * after LinearAttentionGate and the L2 norms as separate nodes, K-major state [B, Hv, Dk, Dv]
 * (the default); or GatedDeltaNet in its uniform rank-4 spelling [B, S, H, D] doing the gates
 * and the norm itself, V-major state [B, Hv, Dv, Dk] (docs/graph-io.md). The paged layout always
 * runs GatedDeltaNet: this changes nothing there. */
typedef enum model_linear_op {
  MODEL_LINEAR_ATTENTION = 0,
  MODEL_GATED_DELTA_NET = 1
} model_linear_op;

/* What a graph is built as; the same for every family (a family refuses what it cannot do). */
typedef struct model_options {
  int64_t max_context; /* rows of the rotary cos/sin caches; 0 = the family's default
                          (model_default_context) */
  int paged;          /* 1: the packed paged layout (../shared/spec/abi.md §8; docs/graph-io.md) */
  int64_t block_size; /* paged: tokens per KV page (power of two >= 16); 0 = 16 */
  ph_dtype io_dtype;  /* paged: activations, KV pages and conv state (f32, f16 or bf16;
                         PH_DTYPE_INVALID = f32); recurrent state and logits stay f32. The dense
                         layout is f32 only. */
  int prune_lm_head;  /* paged: logits [B, V] for each sequence's last token (abi §8.2) */
  ph_dtype weight_dtype; /* storage dtype of the projection and embedding weights in the graph:
                            PH_DTYPE_INVALID keeps the checkpoint's; f32/f16/bf16 converts (lazily:
                            the exporter streams the converted bytes, nothing is copied here) */
  model_rotary rotary;   /* the form of RoPE (default fused) */
  int32_t state_update_capacity; /* paged: compact state updates, C in 0..8 (abi §2.5, §8.1/§8.2):
                                    C > 0 adds the inputs state_update_capture_count [B] and
                                    state_update_active [1] and, per linear layer, the outputs
                                    state_update.{i}.conv_value and .recurrent_capsule. 0 (default)
                                    builds today's graph. Forced to 0 for a model without linear
                                    layers (DeepSeek); > 0 with the dense layout is
                                    PH_ERR_INVALID_ARGUMENT. */
  model_linear_op linear_op;     /* dense: the recurrent op of a linear layer (default
                                    LinearAttention) */
  int logit_rows;        /* packed, CPU runtime only (never exported; not with prune_lm_head): an
                            extra input "logit_rows" i64 [R] names the rows of [N] that reach the
                            LM head; logits are [R, V]. The engine asks for each sequence's last
                            row, and every row of a verify chunk. */
  int output_hidden;     /* packed Qwen only: an extra output "hidden_states" f32 [N, H], the
                            final-normed hidden state of every row (what the MTP head reads,
                            docs/mtp.md), after the other outputs. CPU runtime only: the exporter
                            never sets it (its options have no such field), so no package has it;
                            the dense layout and DeepSeek refuse it. */
  ph_quant_params quant; /* bits 4|8: every linear layer whose role weight_role_quantizable accepts
                            and whose checkpoint name matches no quant.skip entry becomes
                            com.microsoft::MatMulNBits (docs/quantization.md); 0: none. The
                            builder checks the fields (PH_ERR_INVALID_ARGUMENT). quant.skip must
                            outlive the build. */
} model_options;

model_options model_options_default(void);

/* The state_update_capacity a graph of c is built with under o: o's, or 0 when c has no linear
 * layer (nothing to capture) or o is NULL. Does not range-check (the builder does). */
int32_t model_state_update_capacity(const hf_config *c, const model_options *o);

/* One family's entry points. */
typedef struct model_family_def {
  const char *name; /* for messages: "qwen35" */
  /* Builds and finalizes the graph of c over weights w. */
  ph_status (*build)(const hf_config *c, const model_weights *w, const model_options *o,
                     graph **out, diag *d);
  /* The context a graph is built for when the caller gives none. */
  int64_t (*default_context)(const hf_config *c);
} model_family_def;

/* The builder for c's family, or NULL (with PH_ERR_UNSUPPORTED in d naming the model type). */
const model_family_def *model_family_for(const hf_config *c, diag *d);

/* model_family_for(c)->build: the graph of c in the layout o asks for. */
ph_status model_build_graph(const hf_config *c, const model_weights *w, const model_options *o,
                            graph **out, diag *d);

/* model_family_for(c)->default_context; 0 for a family without a builder. */
int64_t model_default_context(const hf_config *c);

#endif /* PH_MODELS_REGISTRY_H */
