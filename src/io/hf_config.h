/* hf_config — parse and validate a Hugging Face config.json into one flat struct, and derive
 * the geometry every other module sizes things from.
 *
 * Accepted model_type values (top level):
 *   qwen3_5_text, qwen3_5_moe_text        text-only Qwen3.5/3.6/3.8 (dense / MoE)
 *   qwen3_5, qwen3_5_moe                  the shipped VLM wrapper: text fields under "text_config"
 *                                         (its own model_type qwen3_5_text / qwen3_5_moe_text);
 *                                         the vision part is ignored
 *   qwen3_next                            Qwen3-Next (fused in_proj_qkvz / in_proj_ba checkpoints)
 *   deepseek_v2, deepseek_v3              MLA (models/deepseek.h builds them)
 *   glm_moe_dsa                           GLM-5 MLA (+ DSA indexer): parsed far enough for
 *                                         models/mla.h to decide LATENT eligibility
 *   glm4_moe_lite                         GLM-4.7-Flash: DeepSeek-V3's MLA and routing with
 *                                         GLM defaults (glm4_moe, GLM-4.5, is not MLA: refused)
 * Anything else is PH_ERR_UNKNOWN_MODEL_TYPE naming the type and the supported list.
 *
 * Rules (see ../shared/spec/model-math.md §1, §4, §5, §6):
 * - Layer kinds come from "layer_types" when present (length must equal num_hidden_layers,
 *   entries "linear_attention" | "full_attention"), else from "full_attention_interval"
 *   (layer i is full iff (i+1) % interval == 0; default 4). DeepSeek layers are all MLA.
 * - Rope fields are read from "rope_parameters" {rope_type, rope_theta, partial_rotary_factor,
 *   mrope_section, mrope_interleaved, factor, ...} or, in the older spelling, from top-level
 *   "rope_theta"/"partial_rotary_factor" and "rope_scaling" {type|rope_type, factor, ...}.
 *   Where both spellings give a value, rope_parameters wins.
 * - HF defaults apply to absent optional fields (partial_rotary_factor 0.25, mrope_section
 *   [11,11,10] for qwen3_5*, head_dim 256, linear_conv_kernel_dim 4, rms_norm_eps 1e-6,
 *   attention_bias false, tie_word_embeddings false).
 * - Required fields missing: PH_ERR_CONFIG_MISSING_FIELD; wrong JSON type or out-of-range
 *   value: PH_ERR_CONFIG_INVALID; contradictions (heads not divisible, mrope_section not
 *   summing to rotary_dim/2, layer_types length mismatch, odd rotary_dim, ...):
 *   PH_ERR_CONFIG_INCONSISTENT. Every message names the field ("text_config.layer_types").
 */
#ifndef PH_IO_HF_CONFIG_H
#define PH_IO_HF_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "base/diag.h"

#define HF_MAX_LAYERS       512
#define HF_CONFIG_MAX_BYTES ((size_t)16 << 20)

typedef enum model_family {
  FAMILY_QWEN35 = 1,     /* qwen3_5_text / qwen3_5 / *_moe */
  FAMILY_QWEN3_NEXT = 2, /* qwen3_next */
  FAMILY_DEEPSEEK = 3,   /* MLA: deepseek_v2 / deepseek_v3 / glm_moe_dsa / glm4_moe_lite */
} model_family;

typedef enum rope_scaling_kind {
  ROPE_SCALING_NONE = 0, /* "default" or absent */
  ROPE_SCALING_YARN = 1,
  ROPE_SCALING_LINEAR = 2,
} rope_scaling_kind;

typedef struct hf_config {
  char model_type[64];      /* top level, as written */
  char text_model_type[64]; /* text_config.model_type for wrappers, else = model_type */
  char architecture[128];   /* architectures[0] or "" */
  model_family family;
  int is_vlm;     /* text fields came from "text_config" */
  ph_dtype dtype; /* "dtype" or "torch_dtype" (text_config first); F32 if absent */

  int64_t hidden_size;
  int64_t n_layers;
  int64_t vocab_size;
  int64_t intermediate_size; /* dense MLP width (0 when every layer is MoE and it is absent) */
  int64_t max_position_embeddings;
  int64_t n_heads;    /* num_attention_heads */
  int64_t n_kv_heads; /* num_key_value_heads */
  int64_t head_dim;   /* Qwen: head_dim (default 256); DeepSeek: qk_nope + qk_rope */
  double rms_norm_eps;
  int tie_word_embeddings;
  int attention_bias;
  int64_t mtp_num_hidden_layers; /* Qwen: MTP layers; the target never reads them; a dense
                                    model's head is bound for the drafter (docs/mtp.md) */
  char output_gate_type[16];     /* "" | "swish" | "sigmoid" | "silu" (GDN z gate; see §4.6) */

  uint8_t layer_kind[HF_MAX_LAYERS];   /* ph_layer_kind per layer */
  uint8_t layer_is_moe[HF_MAX_LAYERS]; /* 1 if the layer's MLP is a sparse MoE */
  int64_t full_attention_interval;     /* as given or defaulted (Qwen); 0 for DeepSeek */

  struct {                  /* GatedDeltaNet (Qwen3.5 / Qwen3-Next) */
    int64_t n_key_heads;    /* linear_num_key_heads   (Hk) */
    int64_t n_value_heads;  /* linear_num_value_heads (Hv) */
    int64_t key_head_dim;   /* linear_key_head_dim    (Dk) */
    int64_t value_head_dim; /* linear_value_head_dim  (Dv) */
    int64_t conv_kernel;    /* linear_conv_kernel_dim (Kc) */
  } lin;

  struct {
    double theta;
    double partial_rotary_factor;
    int64_t rotary_dim; /* derived: int(head_dim * factor) (Qwen), qk_rope_head_dim (MLA) */
    int has_mrope;      /* mrope_section given/defaulted */
    int mrope_interleaved;
    int64_t mrope_section[3];
    rope_scaling_kind scaling;
    double factor;
    int64_t original_max_position_embeddings;
    double beta_fast, beta_slow;   /* YaRN; defaults 32, 1 */
    double mscale, mscale_all_dim; /* YaRN; 0 when absent (HF None) */
    double attention_factor;       /* YaRN "attention_factor"; 0 when absent (then derived) */
    int truncate;                  /* YaRN "truncate" (default true): floor/ceil the ramp bounds */
    /* MLA rope pairing, 1 = adjacent pairs (2i, 2i+1), 0 = halves (i, i + r/2):
     * deepseek_v2 always 1 (HF rotates adjacent pairs as complex numbers; no key);
     * deepseek_v3 and glm4_moe_lite rope_interleave, default 1 (HF rotates the same adjacent
     * pairs); glm_moe_dsa always 0 (HF applies rotate_half to q_pe/k_pe). */
    int interleave;
  } rope;

  struct {
    int64_t n_experts; /* num_experts / n_routed_experts */
    int64_t n_experts_per_tok;
    int64_t moe_intermediate_size;
    int64_t shared_intermediate_size; /* Qwen shared_expert_intermediate_size */
    int64_t n_shared_experts;         /* DeepSeek */
    int64_t decoder_sparse_step;      /* Qwen3-Next */
    int64_t first_k_dense_replace;    /* DeepSeek */
    int64_t n_group, topk_group;      /* DeepSeek V3 */
    int norm_topk_prob;
    double routed_scaling_factor;
    char scoring_func[16]; /* "softmax" | "sigmoid" */
    char topk_method[32];  /* "greedy" | "group_limited_greedy" | "noaux_tc" */
  } moe;

  struct {               /* DeepSeek MLA */
    int64_t q_lora_rank; /* 0 when null (q_proj used directly) */
    int64_t kv_lora_rank;
    int64_t qk_nope_head_dim;
    int64_t qk_rope_head_dim;
    int64_t v_head_dim;
    double softmax_scale; /* derived: (dn+dr)^-1/2 * mscale^2 (YaRN) */
  } mla;

  /* MLA-family features the LATENT export refuses (models/mla.h); parsed for FAMILY_DEEPSEEK
   * only (zero for the others). JSON null reads as absent. */
  struct {
    int use_dsa; /* "use_dsa"; absent: 1 for glm_moe_dsa (HF runs the DSA indexer on every
                  * layer), else 0. The caller may clear it for a full-attention export. */
    int64_t index_topk, index_n_heads, index_head_dim; /* DSA indexer; absent: 0 (glm_moe_dsa:
                                                        * HF defaults 2048, 32, 128) */
    int64_t n_compress_ratios;        /* length of "compress_ratios" (DeepSeek-V4 CSA/HCA); 0 */
    int64_t o_lora_rank;              /* DeepSeek-V4 low-rank output; absent 0 */
    int64_t o_groups;                 /* DeepSeek-V4 grouped output; absent 1 */
    int64_t hc_mult;                  /* hyper-connections; absent 1 */
    int64_t num_nextn_predict_layers; /* MTP layers in the checkpoint (never loaded) */
    int qk_norm;            /* attn_qk_norm || attn_qk_norm_full || use_qk_norm || qk_layernorm */
    char qk_norm_key[24];   /* the first of those that was true, for messages */
    int64_t sliding_window; /* 0 when absent, null, or use_sliding_window is false */
    int head_sink;          /* attention_sink || head_sink */
  } mla_feat;

  struct {             /* derived geometry */
    int64_t key_dim;   /* Hk*Dk */
    int64_t value_dim; /* Hv*Dv */
    int64_t conv_dim;  /* 2*key_dim + value_dim */
    int64_t n_full;    /* full-attention (or MLA) layers */
    int64_t n_linear;  /* GatedDeltaNet layers */
  } geom;
} hf_config;

/* Parses config.json text (json need not be NUL-terminated). */
ph_status hf_config_parse(const char *json, size_t len, hf_config *out, diag *d);

/* Reads DIR/config.json and parses it; errors are prefixed with the path. */
ph_status hf_config_load(const char *dir, hf_config *out, diag *d);

/* Per-sequence fixed state bytes over all linear layers: conv [conv_dim, Kc-1] in conv_dtype
 * plus FP32 recurrent [Hv, Dv, Dk]. 0 for models without linear layers. */
int64_t hf_config_fixed_state_bytes(const hf_config *c, ph_dtype conv_dtype);

/* KV bytes per token over all attention layers in kv_dtype: full attention 2*Hkv*D, MLA one
 * latent row (kv_lora_rank + qk_rope_head_dim) per layer (MTP layers are not served and not
 * counted). */
int64_t hf_config_kv_bytes_per_token(const hf_config *c, ph_dtype kv_dtype);

const char *model_family_name(model_family f);

#endif /* PH_IO_HF_CONFIG_H */
