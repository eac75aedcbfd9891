/* tiny — deterministic random-weight checkpoints in exact Hugging Face layout.
 *
 * tiny_write() writes DIR/config.json and DIR/model.safetensors (or shards plus
 * model.safetensors.index.json) that ph_model_open() and real HF loaders read the same way as a
 * shipped checkpoint. Tensor names and shapes come from the weights name table, so what is
 * written is exactly what binding expects. Values are a pure function of (seed, tensor name):
 * the same parameters always give the same bytes. Tests, the demo and benchmarks use it; the
 * weights are random and the model's output is meaningless.
 */
#ifndef PH_MODELS_TINY_H
#define PH_MODELS_TINY_H

#include <stdint.h>

#include "base/diag.h"
#include "models/weights.h"

typedef struct tiny_params {
  const char *model_type; /* text model type: qwen3_5_text | qwen3_5_moe_text | qwen3_next |
                             deepseek_v2 | deepseek_v3 */
  weight_layout layout;   /* LAYOUT_VLM writes the qwen3_5 / qwen3_5_moe wrapper */
  ph_dtype dtype;         /* f32 | bf16 | f16 (DeepSeek e_score_correction_bias: always f32,
                             as in the published checkpoints) */
  uint64_t seed;
  uint64_t max_shard_bytes; /* 0: one model.safetensors; else sharded with an index */

  int64_t hidden_size, n_layers, vocab_size, intermediate_size, max_position_embeddings;
  int64_t n_heads, n_kv_heads, head_dim;
  int64_t lin_key_heads, lin_value_heads, lin_key_dim, lin_value_dim, conv_kernel;
  int64_t full_attention_interval;
  double partial_rotary_factor, rope_theta, rms_norm_eps;
  int64_t mrope_section[3];
  int tie_word_embeddings;
  /* MoE (qwen3_5_moe_text, qwen3_next, deepseek) */
  int64_t n_experts, n_experts_per_tok, moe_intermediate_size, shared_intermediate_size;
  int64_t decoder_sparse_step;
  /* MLA (deepseek) */
  int64_t q_lora_rank, kv_lora_rank, qk_nope_head_dim, qk_rope_head_dim, v_head_dim;
  int64_t n_shared_experts, first_k_dense_replace;
  /* Qwen: mtp_num_hidden_layers, and that many MTP layers' weights under "mtp."
   * (weights_expected_mtp; dense-MLP models only). 0 (the default): no key, no weights. */
  int64_t mtp_layers;
} tiny_params;

/* The default: the geometry of ../shared/golden/qwen35-tiny-f32 (4 layers, hidden 64, ...). */
tiny_params tiny_params_default(void);

/* Overwrites geometry with a named preset: "tiny" (the default), "qwen3.5-0.8b" (real 0.8B
 * shapes, for benchmarks), "qwen3.8-tiny" (Qwen3.8-27B proportions scaled down: 8 layers, full
 * attention every 4th, Hv/Hk = 3). PH_ERR_INVALID_ARGUMENT for an unknown name. */
ph_status tiny_apply_preset(tiny_params *p, const char *preset, diag *d);

/* Writes the checkpoint into dir (created if needed). The config is validated by the same
 * parser that loads it; an impossible geometry is the parser's typed error. */
ph_status tiny_write(const char *dir, const tiny_params *p, diag *d);

/* The config.json text tiny_write() would write (malloc'ed; free()). */
ph_status tiny_config_json(const tiny_params *p, char **out, diag *d);

#endif /* PH_MODELS_TINY_H */
