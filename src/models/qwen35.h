/* qwen35 — the Qwen3.5 / 3.6 / 3.8 (and Qwen3-Next dense-MLP) graph builder.
 *
 * Reads like the forward pass of ../shared/spec/model-math.md §1–§3 but emits ONNX /
 * com.microsoft nodes, in either layout (model_options.paged): the packed paged one of
 * ../shared/spec/abi.md §8.1–§8.3, or DENSE, the one ONNX Runtime runs on CPU —
 *   inputs  input_ids i64 [B,S], attention_mask i64 [B,P+S], position_ids i64 [3,B,S],
 *           past_key_values.{i}.key/.value f32 [B,Hkv,P,D]           (full-attention layers)
 *           past_key_values.{i}.conv_state f32 [B,conv_dim,K-1]       (linear layers)
 *           past_key_values.{i}.recurrent_state f32 [B,Hv,Dk,Dv]      (K-major, LinearAttention)
 *   outputs logits f32 [B,S,V], present.{i}.* matching each past (KV grows to P+S; the conv and
 *           recurrent states keep their shape and may be bound in place)
 * (docs/graph-io.md; every name from graph/abi_names.h, the I/O of each layout declared in
 * qwen35_io.c). Full attention: q_proj split per head into query and gate, (1+w) q/k
 * RMSNorm, interleaved partial MRoPE, GroupQueryAttention, sigmoid(gate), o_proj. Linear:
 * projections, CausalConvWithState (silu), L2-normalised q/k (as RMSNorm with eps/Dk and gain
 * 1/sqrt(Dk)), key repeated to the value heads, LinearAttentionGate, LinearAttention
 * (gated_delta), GatedRMSNorm with z, out_proj. Qwen3-Next's fused in_proj_qkvz / in_proj_ba
 * are regrouped to the split layout at build time. A MoE layer's MLP is models/moe.h's.
 * model_options.linear_op GatedDeltaNet replaces the dense linear layer's L2 norms, gate and
 * LinearAttention by one GatedDeltaNet in the uniform [B,S,H,D] spelling (V-major state
 * [B,Hv,Dv,Dk]); model_options.state_update_capacity C > 0 (packed only) adds the compact
 * state-update inputs, node inputs/outputs and graph outputs of abi.md §8.1-§8.3
 * (docs/graph-io.md); C = 0 builds exactly the graph without them.
 *
 * Weights are initializer views of the mapped checkpoint (copied only when misaligned or when
 * a transform needs it: (1+w) norm gains, f32 gate constants, Qwen3-Next regrouping).
 */
#ifndef PH_MODELS_QWEN35_H
#define PH_MODELS_QWEN35_H

#include "graph/graph.h"
#include "io/hf_config.h"
#include "models/registry.h"
#include "models/weights.h"

/* The context a graph is built for when the caller gives none (model_options.max_context 0):
 * min(max_position_embeddings, 32768), the rows of its rotary caches. */
int64_t qwen35_default_context(const hf_config *c);

/* Builds and finalizes the graph in the layout opt asks for (dense or packed paged). Reached
 * through models/registry.h (model_build_graph), not called by name from outside src/models. */
ph_status qwen35_build(const hf_config *c, const model_weights *w, const model_options *opt,
                       graph **out, diag *d);

#endif /* PH_MODELS_QWEN35_H */
