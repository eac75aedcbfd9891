/* mtp — the graph of a Qwen3.5 checkpoint's multi-token-prediction head (docs/mtp.md), in the
 * packed paged layout, for the CPU runtime's MTP drafter (runtime/mtp_session.h). Never exported.
 *
 * Row r of a packed step is position t of its sequence: token t+1 and the hidden state h_t
 * (the target's final-normed hidden state at t, model_options.output_hidden, or the previous MTP
 * row's mtp_hidden_out when chaining drafts). With (1+w) RMSNorms throughout:
 *   x   = fc( concat(norm_e(embed(token)), norm_h(h_t)) )        fc [H, 2H], embedding half first
 *   x   = decoder layer mtp.layers.0 (gated full attention over the sequence's MTP cache, dense
 * MLP) out = norm(x)                 -> mtp_hidden_out, and logits = out · lm_head^T (shared head)
 * The decoder layer is qwen35's (qwen35_decoder_layer) over the mtp.layers.* weights; the
 * embedding and the LM head are the target's tensors (the same initializer views).
 *
 * Graph I/O (names from graph/abi_names.h):
 *   inputs  input_ids i64 [N], mtp_hidden_in f32 [N, H], position_ids i64 [3, N] (MRoPE) or [N],
 *           block_table i32 [B, max_blocks], cumulative_sequence_lengths i32 [B+1],
 *           past_sequence_lengths i32 [B], attention_metadata i32 [3],
 *           past_key_values.0.key / .value [num_blocks, block_size, Hkv, D] (io dtype)
 *   outputs logits f32 [N, V], present.0.key / .value (alias the pasts), mtp_hidden_out f32 [N, H]
 */
#ifndef PH_MODELS_MTP_H
#define PH_MODELS_MTP_H

#include "graph/graph.h"
#include "io/hf_config.h"
#include "models/registry.h"
#include "models/weights.h"

/* Builds the MTP graph of c over w (its mtp.* tensors and the shared embedding / LM head) with
 * opt's paged options (paged forced on; io_dtype, block_size, weight_dtype, rotary, max_context
 * as for the target; prune_lm_head and output_hidden must be 0). PH_ERR_UNSUPPORTED when the
 * checkpoint has no MTP head bound (no mtp_num_hidden_layers, no mtp.* tensors), when the model
 * is MoE (its MTP layer's MLP would be MoE) or not a Qwen3.5 / Qwen3-Next model, or when it has
 * more than one MTP layer; PH_ERR_INVALID_ARGUMENT for the options. */
ph_status mtp_build(const hf_config *c, const model_weights *w, const model_options *opt,
                    graph **out, diag *d);

#endif /* PH_MODELS_MTP_H */
