/* mla — what the absorbed (LATENT) multi-head latent attention needs from a parsed config:
 * whether a model may take the LATENT PagedAttention path, its softmax scale, and its RoPE
 * frequencies. Pure functions of an hf_config; no weights, no graph, no allocation.
 *
 * Eligibility is decided from geometry and declared features, never from model names
 * (../shared/spec/abi.md §1.1, §1.6, §1.8, §9.1; issue 14, "LATENT MLA"). With l =
 * kv_lora_rank and r = qk_rope_head_dim, a LATENT node has head_size l + r, v_head_size l,
 * rotary_offset l and rotary_dim r. mla_latent_check accepts a config iff:
 *   - it is MLA (FAMILY_DEEPSEEK with kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim,
 *     v_head_dim > 0);
 *   - l % 16 == 0 and r % 16 == 0; head size l + r % 16 == 0, the schema's rotary_offset =
 *     l % 8 == 0 and 1 <= v_head_size = l <= head_size = l + r follow. (The schema also allows
 *     r == 0, but a config without a rope part is not MLA here, as in Mobius: r > 0 above.)
 *   - the cache dtype is f16 or bf16 (f32 too for MLA_CHECK_CPU, see below);
 *   - block_size is a power of two >= 16;
 *   - none of the features LATENT cannot express is on.
 * Everything else is PH_ERR_UNSUPPORTED with a message naming the field and its value:
 *   - a non-MLA config (model_type and the missing MLA size);
 *   - DSA: use_dsa true AND an indexer configured (index_topk, index_n_heads or index_head_dim
 *     > 0). The operator has no query-dependent sparse-index input. use_dsa false (GLM's
 *     full-attention export) with the indexer fields still written is NOT refused: the indexer
 *     is vestigial there. glm_moe_dsa defaults use_dsa to true (HF runs DSA on every layer), so
 *     a GLM config is refused unless it says use_dsa false or the caller clears
 *     c->mla_feat.use_dsa for a full-attention export;
 *   - DeepSeek-V4 CSA/HCA: compress_ratios (any entries), o_lora_rank > 0, o_groups > 1,
 *     hc_mult > 1;
 *   - MTP as a paged feature: only when the caller asks for it (MLA_CHECK_MTP). Real DeepSeek-V3
 *     and GLM-5 configs carry num_nextn_predict_layers = 1; those layers are never loaded or
 *     exported (weights_bind ignores them), so a plain export of them is eligible. What LATENT
 *     cannot do is serve the MTP draft layers through the paged graph;
 *   - q/k norm (attn_qk_norm, attn_qk_norm_full, use_qk_norm, qk_layernorm), sliding window
 *     (sliding_window > 0), head sink (attention_sink, head_sink), a quantized cache (int8,
 *     uint8, f8e4m3).
 * Checks run in that order: the first refusal is reported.
 *
 * Targets. The ORT schema's T is {f16, bf16}: an exported LATENT package (which runs on CUDA)
 * must refuse f32, and the default check does. Our CPU executor also runs LATENT over an f32
 * cache; MLA_CHECK_CPU admits f32 for that caller (the engine), nothing else changes.
 */
#ifndef PH_MODELS_MLA_H
#define PH_MODELS_MLA_H

#include <stdint.h>

#include "base/diag.h"
#include "io/hf_config.h"

/* Flags for mla_latent_check. */
#define MLA_CHECK_CPU 1u /* target is our CPU executor: an f32 cache is eligible too */
#define MLA_CHECK_MTP 2u /* the caller asks for MTP as a paged feature: refused */

/* PH_OK when c may run as LATENT PagedAttention with pages of block_size tokens and a cache of
 * cache_dtype; else PH_ERR_UNSUPPORTED naming the first reason (header comment), or
 * PH_ERR_INVALID_ARGUMENT for a NULL c. Never modifies c. */
ph_status mla_latent_check(const hf_config *c, int64_t block_size, ph_dtype cache_dtype,
                           unsigned flags, diag *d);

/* The explicit LATENT softmax scale: (dn + dr)^-1/2 * m^2, m = 0.1 * mscale_all_dim * ln(factor)
 * + 1 with YaRN, mscale_all_dim != 0 and factor > 1, else m = 1 (model-math §5.2; the value
 * hf_config derived as mla.softmax_scale). DeepSeek-V3 0.135234, V2-Lite 0.114721. 0 for a
 * non-MLA config. The same scale as the decomposed attention: absorption does not change it. */
double mla_softmax_scale(const hf_config *c);

/* RoPE frequencies over the rope part, r = rope.rotary_dim (qk_rope_head_dim): fills
 * inv_freq[0 .. r/2) and *attention_factor (the factor HF multiplies cos and sin by), in float64.
 *   no scaling: inv_freq[j] = theta^(-2j/r), factor 1;
 *   linear:     the same divided by rope.factor, factor 1;
 *   YaRN (HF _compute_yarn_parameters): extrap = theta^(-2j/r), interp = extrap / factor,
 *     inv_freq = interp * (1 - e) + extrap * e, e = 1 - clamp((j - low) / (high - low), 0, 1)
 *     (high += 0.001 when equal), low/high = the correction dims r * ln(orig / (beta * 2 pi)) /
 *     (2 ln theta) for beta_fast / beta_slow, floor/ceil when rope.truncate, clipped to
 *     [0, r - 1]; orig = original_max_position_embeddings, else max_position_embeddings (when
 *     both are 0 the frequencies are left unscaled). attention_factor = rope.attention_factor
 *     when given, else mscale(factor, mscale) / mscale(factor, mscale_all_dim) when both are
 *     non-zero, else mscale(factor, 1); mscale(s, m) = 0.1 m ln(s) + 1 for s > 1, else 1.
 * Either output pointer may be NULL. Writes nothing for r == 0 or a NULL c. */
void mla_rope_inv_freq(const hf_config *c, double *inv_freq, double *attention_factor);

#endif /* PH_MODELS_MLA_H */
