/* weights — the checkpoint name tables: which tensors a configuration implies, under which
 * names and shapes, and binding them from a safetensors set.
 *
 * One table per family (Qwen3.5 dense/MoE, Qwen3-Next, DeepSeek MLA) lists every tensor as a
 * role, a name template and a shape rule. From it and a parsed hf_config come:
 *   weights_expected()  the full list of names and shapes for a layout (make-tiny writes exactly
 *                       this; inspect counts parameters from it when weights are absent);
 *   weights_bind()      every expected tensor found in the checkpoint at the predicted shape and
 *                       a float dtype, or a typed error naming the tensor (PH_ERR_TENSOR_MISSING,
 *                       PH_ERR_TENSOR_SHAPE with expected vs got, PH_ERR_TENSOR_DTYPE).
 * Layouts: Qwen3_5ForCausalLM / Qwen3-Next / DeepSeek keep the decoder under "model.", the
 * shipped Qwen3.5 VLM under "model.language_model."; lm_head is always top-level and absent
 * when embeddings are tied (then the embedding is the LM head). Qwen3.5-MoE experts come fused
 * (mlp.experts.gate_up_proj [E,2I,H], down_proj [E,H,I]) or per expert; both bind. Tensors the
 * model does not use (vision tower, MTP layers) are counted and ignored — except that a Qwen3.5
 * checkpoint's dense-MLP MTP head (mtp.*, docs/mtp.md) is also bound, apart, for the drafter
 * (weights_expected_mtp; model_weights.mtp_*), and still counts as unused by the target.
 * Never touches the engine; never computes.
 */
#ifndef PH_MODELS_WEIGHTS_H
#define PH_MODELS_WEIGHTS_H

#include <stddef.h>
#include <stdint.h>

#include "base/diag.h"
#include "io/hf_config.h"
#include "io/safetensors.h"
#include "tensor/tensor.h"

typedef enum weight_layout {
  LAYOUT_CAUSAL_LM = 0, /* decoder under "model." */
  LAYOUT_VLM = 1,       /* decoder under "model.language_model." */
} weight_layout;

typedef enum expert_form {
  EXPERTS_FUSED = 0,      /* mlp.experts.gate_up_proj / mlp.experts.down_proj */
  EXPERTS_PER_EXPERT = 1, /* mlp.experts.{e}.{gate,up,down}_proj.weight */
} expert_form;

/* X(ROLE, name template after the layer prefix or after "model." for globals) */
#define WEIGHT_ROLE_TABLE(X)                                                                       \
  X(EMBED, "embed_tokens.weight")                                                                  \
  X(FINAL_NORM, "norm.weight")                                                                     \
  X(LM_HEAD, "lm_head.weight")                                                                     \
  X(INPUT_NORM, "input_layernorm.weight")                                                          \
  X(POST_NORM, "post_attention_layernorm.weight")                                                  \
  X(LIN_QKV, "linear_attn.in_proj_qkv.weight")                                                     \
  X(LIN_Z, "linear_attn.in_proj_z.weight")                                                         \
  X(LIN_B, "linear_attn.in_proj_b.weight")                                                         \
  X(LIN_A, "linear_attn.in_proj_a.weight")                                                         \
  X(LIN_QKVZ, "linear_attn.in_proj_qkvz.weight")                                                   \
  X(LIN_BA, "linear_attn.in_proj_ba.weight")                                                       \
  X(LIN_CONV, "linear_attn.conv1d.weight")                                                         \
  X(LIN_DT_BIAS, "linear_attn.dt_bias")                                                            \
  X(LIN_A_LOG, "linear_attn.A_log")                                                                \
  X(LIN_NORM, "linear_attn.norm.weight")                                                           \
  X(LIN_OUT, "linear_attn.out_proj.weight")                                                        \
  X(ATTN_Q, "self_attn.q_proj.weight")                                                             \
  X(ATTN_K, "self_attn.k_proj.weight")                                                             \
  X(ATTN_V, "self_attn.v_proj.weight")                                                             \
  X(ATTN_O, "self_attn.o_proj.weight")                                                             \
  X(ATTN_Q_BIAS, "self_attn.q_proj.bias")                                                          \
  X(ATTN_K_BIAS, "self_attn.k_proj.bias")                                                          \
  X(ATTN_V_BIAS, "self_attn.v_proj.bias")                                                          \
  X(ATTN_Q_NORM, "self_attn.q_norm.weight")                                                        \
  X(ATTN_K_NORM, "self_attn.k_norm.weight")                                                        \
  X(MLA_Q, "self_attn.q_proj.weight")                                                              \
  X(MLA_Q_A, "self_attn.q_a_proj.weight")                                                          \
  X(MLA_Q_A_NORM, "self_attn.q_a_layernorm.weight")                                                \
  X(MLA_Q_B, "self_attn.q_b_proj.weight")                                                          \
  X(MLA_KV_A, "self_attn.kv_a_proj_with_mqa.weight")                                               \
  X(MLA_KV_A_NORM, "self_attn.kv_a_layernorm.weight")                                              \
  X(MLA_KV_B, "self_attn.kv_b_proj.weight")                                                        \
  X(MLA_O, "self_attn.o_proj.weight")                                                              \
  X(MLP_GATE, "mlp.gate_proj.weight")                                                              \
  X(MLP_UP, "mlp.up_proj.weight")                                                                  \
  X(MLP_DOWN, "mlp.down_proj.weight")                                                              \
  X(MOE_ROUTER, "mlp.gate.weight")                                                                 \
  X(MOE_ROUTER_BIAS, "mlp.gate.e_score_correction_bias")                                           \
  X(MOE_GATE_UP_FUSED, "mlp.experts.gate_up_proj")                                                 \
  X(MOE_DOWN_FUSED, "mlp.experts.down_proj")                                                       \
  X(EXPERT_GATE, "mlp.experts.%d.gate_proj.weight")                                                \
  X(EXPERT_UP, "mlp.experts.%d.up_proj.weight")                                                    \
  X(EXPERT_DOWN, "mlp.experts.%d.down_proj.weight")                                                \
  X(SHARED_GATE, "mlp.shared_expert.gate_proj.weight")                                             \
  X(SHARED_UP, "mlp.shared_expert.up_proj.weight")                                                 \
  X(SHARED_DOWN, "mlp.shared_expert.down_proj.weight")                                             \
  X(SHARED_EXPERT_GATE, "mlp.shared_expert_gate.weight")                                           \
  X(DS_SHARED_GATE, "mlp.shared_experts.gate_proj.weight")                                         \
  X(DS_SHARED_UP, "mlp.shared_experts.up_proj.weight")                                             \
  X(DS_SHARED_DOWN, "mlp.shared_experts.down_proj.weight")                                         \
  X(MTP_FC, "fc.weight")                                                                           \
  X(MTP_NORM_EMBED, "pre_fc_norm_embedding.weight")                                                \
  X(MTP_NORM_HIDDEN, "pre_fc_norm_hidden.weight")

typedef enum weight_role {
#define WEIGHT_ROLE_ENUM_(role, tmpl) W_##role,
  WEIGHT_ROLE_TABLE(WEIGHT_ROLE_ENUM_)
#undef WEIGHT_ROLE_ENUM_
      W_ROLE_COUNT
} weight_role;

/* How a tensor is initialised by make-tiny (the shape alone does not say). */
typedef enum weight_init {
  INIT_LINEAR = 0,  /* uniform(+-sqrt(3/in)): unit-variance outputs for unit inputs */
  INIT_EMBED,       /* uniform(+-1) */
  INIT_NORM_OFFSET, /* (1+w) RMSNorm gains: near 0 */
  INIT_NORM_PLAIN,  /* w RMSNorm gains: near 1 */
  INIT_A_LOG,       /* log(uniform(1,16)) */
  INIT_DT_BIAS,     /* uniform(0.5, 1.5) */
  INIT_CONV,        /* uniform(+-1/sqrt(K)) */
  INIT_BIAS,        /* uniform(+-0.1) */
} weight_init;

typedef struct expected_tensor {
  char name[192];
  weight_role role;
  int layer;  /* -1 for globals */
  int expert; /* -1 unless per-expert */
  shape shape;
  weight_init init;
} expected_tensor;

/* The tensors `c` implies in `layout`, in a stable order (globals, then layer by layer). The
 * array is malloc'ed; free() it. */
ph_status weights_expected(const hf_config *c, weight_layout layout, expert_form experts,
                           expected_tensor **out, size_t *n_out, diag *d);

/* The MTP head's tensors (docs/mtp.md), top level under "mtp." in every layout: fc [H, 2H],
 * pre_fc_norm_embedding / pre_fc_norm_hidden / norm [H] ((1+w) gains, roles MTP_NORM_EMBED,
 * MTP_NORM_HIDDEN, FINAL_NORM; layer -1), then for each of the c->mtp_num_hidden_layers layers
 * "mtp.layers.{i}." + a full-attention decoder layer with a dense MLP (the Qwen layer's roles).
 * Empty (PH_OK, *n_out 0) when mtp_num_hidden_layers is 0. PH_ERR_UNSUPPORTED for a MoE model
 * (its MTP layer's MLP is a MoE block, which is not supported) or a non-Qwen family. make-tiny
 * writes these after weights_expected's; malloc'ed, free(). */
ph_status weights_expected_mtp(const hf_config *c, expected_tensor **out, size_t *n_out, diag *d);

/* Parameter counts of the tensors weights_expected lists for c (its default layout, fused
 * experts; the expert form does not change the counts). *total: every tensor, which equals the
 * count of a bound checkpoint's tensors. *active: what one token's forward reads: every tensor
 * except the routed experts, plus num_experts_per_tok routed experts in each MoE layer. The
 * embedding table, the LM head, norms, routers (and e_score_correction_bias) and the shared
 * experts count in full. A dense model has *active == *total. Either pointer may be NULL. */
ph_status weights_param_counts(const hf_config *c, int64_t *total, int64_t *active, diag *d);

/* Bound tensors: slot (role, layer) → tensor; per-expert roles index experts separately. */
typedef struct model_weights {
  weight_layout layout;
  expert_form experts;
  int n_layers;
  int n_experts;
  const st_tensor *global[W_ROLE_COUNT]; /* EMBED, FINAL_NORM, LM_HEAD (NULL when tied) */
  const st_tensor **layer;               /* [n_layers * W_ROLE_COUNT] */
  const st_tensor **expert;              /* [n_layers * 3 * n_experts] gate/up/down, or NULL */
  int64_t n_parameters;                  /* elements of all bound tensors */
  int64_t n_bytes;                       /* bytes of all bound tensors */
  size_t n_unused;                       /* checkpoint tensors the target does not read (vision,
                                            MTP: the MTP head counts here even when bound) */
  int placeholder; /* every tensor reads zeros (models/placeholder.h: config-only packages) */
  /* The MTP head (weights_expected_mtp), bound when the config has mtp_num_hidden_layers > 0,
   * the model is not MoE and the checkpoint holds mtp.fc.weight; else n_mtp_layers is 0. Not in
   * n_parameters / n_bytes (those are the target's). */
  int n_mtp_layers;
  const st_tensor *mtp_global[W_ROLE_COUNT]; /* MTP_FC, MTP_NORM_EMBED, MTP_NORM_HIDDEN,
                                                FINAL_NORM (mtp.norm) */
  const st_tensor **mtp_layer;               /* [n_mtp_layers * W_ROLE_COUNT] */
} model_weights;

/* Finds every expected tensor in `set` (layout and expert form detected from the names present,
 * preferring what the config implies) and checks shape and dtype; then the MTP head when the
 * config and the checkpoint have one (see model_weights.n_mtp_layers: once mtp.fc.weight is
 * present every MTP tensor must be, with the same typed errors). On error, `out` is left empty
 * and the message names the tensor. */
ph_status weights_bind(const hf_config *c, const st_set *set, model_weights *out, diag *d);
void weights_free(model_weights *w); /* NULL-safe */

const st_tensor *weights_layer(const model_weights *w, int layer, weight_role role);
/* expert_part: 0 gate, 1 up, 2 down */
const st_tensor *weights_expert(const model_weights *w, int layer, int expert, int expert_part);

const char *weight_role_name(weight_role role);

/* 1 for the roles issue 18 quantizes into MatMulNBits (tensor/quant.h): the 2-D linear
 * projections of attention, GatedDeltaNet (qkv/z/qkvz and out_proj), MLA, the dense and shared
 * MLPs, the experts (per expert and fused), the MTP fc and the LM head. 0 for everything that
 * stays in its dtype: the embedding gather, norms, biases, the GatedDeltaNet a/b projections
 * (in_proj_a/b/ba), conv1d, A_log and dt_bias (they feed the decay and beta gates), the MoE
 * router and its bias, and Qwen's shared_expert_gate (a router-like [1, H] gate). */
int weight_role_quantizable(weight_role role);

/* Prefix of decoder tensors for a layout: "model." or "model.language_model.". */
const char *weight_layout_prefix(weight_layout layout);

/* The layout a config implies (VLM wrapper → LAYOUT_VLM). */
weight_layout weights_default_layout(const hf_config *c);

#endif /* PH_MODELS_WEIGHTS_H */
