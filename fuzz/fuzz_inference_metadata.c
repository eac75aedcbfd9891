/* fuzz_inference_metadata — libFuzzer target for the inference_metadata.json checker
 * (io/inference_metadata.h).
 *
 * The document is checked against one fixed package built once in memory, as `export
 * --config-only` builds it: the packed paged graph of the golden tiny Qwen3.5 config (three
 * linear layers and one full-attention layer; f16 io, 256-token pages) over placeholder weights,
 * and its genai_config. Every failure must carry its status and a message; nothing may crash,
 * leak or read out of bounds whatever the JSON holds (types, sizes, key names, nesting). Seeds in
 * fuzz/corpus/inference_metadata/: the valid document for that package (written by `pagedhybrid
 * export --layout paged --io-dtype f16 --config-only` of the config below) and corrupted copies.
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

static graph *g_graph;
static genai_config g_gc;
static placeholder_weights *g_weights;
static int g_ready; /* 1 built, -1 failed */

static int setup(void) {
  static hf_config c;
  diag d;
  if (hf_config_parse(CONFIG, sizeof CONFIG - 1, &c, &d) != PH_OK) return -1;
  if (placeholder_weights_create(&c, &g_weights, &d) != PH_OK) return -1;
  model_options o = model_options_default();
  o.paged = 1;
  o.io_dtype = PH_DTYPE_F16;
  o.weight_dtype = PH_DTYPE_F16;
  o.block_size = 256;
  if (model_build_graph(&c, placeholder_weights_get(g_weights), &o, &g_graph, &d) != PH_OK)
    return -1;
  int cos = graph_find_value(g_graph, "cos_cache");
  if (cos < 0) return -1;
  g_gc = genai_config_paged(&c, g_graph->values[cos].type.dims[0], 256, 100, 0.6, 0, 2048);
  return 1;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  if (!g_ready) g_ready = setup();
  if (g_ready < 0) __builtin_trap(); /* the fixed package must build */
  diag d;
  diag_clear(&d);
  ph_status st =
      inference_metadata_check_text((const char *)data, size, "fuzz", g_graph, &g_gc, &d);
  if (st != PH_OK && (d.status != st || d.msg[0] == '\0')) __builtin_trap();
  if (st == PH_OK && d.msg[0] != '\0') __builtin_trap();
  if (!memchr(d.msg, 0, sizeof d.msg)) __builtin_trap();
  return 0;
}
