/* fuzz_inference_metadata — libFuzzer target for the inference_metadata.json checker
 * (io/inference_metadata.h).
 *
 * The document is checked against two fixed packages built once in memory, as `export
 * --config-only` builds them (f16 io, 256-token pages, placeholder weights, and their
 * genai_configs): the packed paged graph of the golden tiny Qwen3.5 config (three linear layers
 * and one full-attention layer; SEPARATE pages) and the LATENT graph of the tiny DeepSeek-V3
 * config with dense MLPs (three MLA layers: slot_mapping, key pages only). Every failure must
 * carry its status and a message; nothing may crash, leak or read out of bounds whatever the
 * JSON holds (types, sizes, key names, nesting). Seeds in fuzz/corpus/inference_metadata/: the
 * valid document for each package (written by `pagedhybrid export --layout paged --io-dtype f16
 * --config-only` of the configs below: valid_paged_tiny.json, valid_latent_tiny.json) and
 * corrupted copies.
 */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "io/genai_config.h"
#include "io/hf_config.h"
#include "io/inference_metadata.h"
#include "models/placeholder.h"
#include "models/registry.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* fuzz/corpus/hf_config/golden_tiny_f32.json */
static const char CONFIG[] =
    "{\"architectures\": [\"Qwen3_5ForCausalLM\"], \"hidden_size\": 64, \"num_hidden_layers\": 4,"
    " \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 32,"
    " \"vocab_size\": 256, \"rms_norm_eps\": 1e-06, \"hidden_act\": \"silu\","
    " \"attention_bias\": false, \"attn_output_gate\": true, \"linear_num_key_heads\": 2,"
    " \"linear_num_value_heads\": 4, \"linear_key_head_dim\": 16, \"linear_value_head_dim\": 16,"
    " \"linear_conv_kernel_dim\": 4, \"full_attention_interval\": 4,"
    " \"layer_types\": [\"linear_attention\", \"linear_attention\", \"linear_attention\","
    " \"full_attention\"], \"max_position_embeddings\": 262144, \"tie_word_embeddings\": false,"
    " \"dtype\": \"float32\", \"mamba_ssm_dtype\": \"float32\", \"intermediate_size\": 128,"
    " \"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": 10000000.0,"
    " \"partial_rotary_factor\": 0.25, \"mrope_section\": [2, 1, 1], \"mrope_interleaved\": true},"
    " \"model_type\": \"qwen3_5_text\"}";

/* tests/data/golden/deepseek-v3-tiny-moe/checkpoint/config.json, first_k_dense_replace 3 (every
 * layer a dense MLP, so the graph needs no MoE operator) */
static const char CONFIG_LATENT[] =
    "{\"architectures\": [\"DeepseekV3ForCausalLM\"], \"model_type\": \"deepseek_v3\","
    " \"hidden_size\": 64, \"num_hidden_layers\": 3, \"num_attention_heads\": 4,"
    " \"num_key_value_heads\": 4, \"q_lora_rank\": 48, \"kv_lora_rank\": 32,"
    " \"qk_nope_head_dim\": 16, \"qk_rope_head_dim\": 16, \"v_head_dim\": 16,"
    " \"intermediate_size\": 128, \"n_routed_experts\": 8, \"num_experts_per_tok\": 2,"
    " \"moe_intermediate_size\": 32, \"n_shared_experts\": 1, \"first_k_dense_replace\": 3,"
    " \"moe_layer_freq\": 1, \"routed_scaling_factor\": 2.5, \"norm_topk_prob\": true,"
    " \"topk_method\": \"noaux_tc\", \"scoring_func\": \"sigmoid\", \"n_group\": 4,"
    " \"topk_group\": 2, \"vocab_size\": 256, \"rms_norm_eps\": 1e-06, \"hidden_act\": \"silu\","
    " \"rope_theta\": 10000.0, \"rope_scaling\": {\"beta_fast\": 32, \"beta_slow\": 1,"
    " \"factor\": 40.0, \"mscale\": 1.0, \"mscale_all_dim\": 1.0,"
    " \"original_max_position_embeddings\": 4096, \"type\": \"yarn\"},"
    " \"max_position_embeddings\": 163840, \"tie_word_embeddings\": false,"
    " \"attention_bias\": false, \"dtype\": \"float32\"}";

typedef struct package {
  hf_config c; /* kept beside the graph built from it */
  graph *g;
  genai_config gc;
  placeholder_weights *weights;
} package;

#define N_PACKAGES 2
static package g_pkg[N_PACKAGES];
static int g_ready; /* 1 built, -1 failed */

static int build(const char *config, size_t n, package *p) {
  hf_config *c = &p->c;
  diag d;
  if (hf_config_parse(config, n, c, &d) != PH_OK) return -1;
  if (placeholder_weights_create(c, &p->weights, &d) != PH_OK) return -1;
  model_options o = model_options_default();
  o.paged = 1;
  o.io_dtype = PH_DTYPE_F16;
  o.weight_dtype = PH_DTYPE_F16;
  o.block_size = 256;
  if (model_build_graph(c, placeholder_weights_get(p->weights), &o, &p->g, &d) != PH_OK) return -1;
  int cos = graph_find_value(p->g, "cos_cache");
  if (cos < 0) return -1;
  p->gc = genai_config_paged(c, p->g->values[cos].type.dims[0], 256, 100, 0.6, 0, 2048);
  return 1;
}

static int setup(void) {
  if (build(CONFIG, sizeof CONFIG - 1, &g_pkg[0]) < 0) return -1;
  if (build(CONFIG_LATENT, sizeof CONFIG_LATENT - 1, &g_pkg[1]) < 0) return -1;
  return g_pkg[1].gc.slot_mapping[0] ? 1 : -1; /* the second one is LATENT */
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_ready) g_ready = setup();
  if (g_ready < 0) __builtin_trap(); /* the fixed packages must build */
  for (int i = 0; i < N_PACKAGES; i++) {
    diag d;
    diag_clear(&d);
    ph_status st = inference_metadata_check_text((const char *)data, size, "fuzz", g_pkg[i].g,
                                                 &g_pkg[i].gc, &d);
    if (st != PH_OK && (d.status != st || d.msg[0] == '\0')) __builtin_trap();
    if (st == PH_OK && d.msg[0] != '\0') __builtin_trap();
    if (!memchr(d.msg, 0, sizeof d.msg)) __builtin_trap();
  }
  return 0;
}
