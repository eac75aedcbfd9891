/* genai_config — ONNX Runtime GenAI's genai_config.json for our packages (../shared/spec/abi.md
 * §8.5 for the key names), written at export and read back when a package is loaded.
 *
 * Dense decoder (today): model.type, model.decoder {filename, session_options, head_size,
 * hidden_size, num_attention_heads, num_hidden_layers, num_key_value_heads, inputs {input_ids,
 * attention_mask, position_ids, past_key_names, past_value_names, past_conv_names,
 * past_recurrent_names}, outputs {logits, present_key_names, present_value_names,
 * present_conv_names, present_recurrent_names}}, model.context_length, model.vocab_size,
 * model.bos/eos/pad token ids when the checkpoint config has them, search {max_length,
 * do_sample false, past_present_share_buffer false for the dense layout}. The paged layout adds
 * state_groups and engine.dynamic_batching (issue 5).
 */
#ifndef PH_IO_GENAI_CONFIG_H
#define PH_IO_GENAI_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "base/diag.h"
#include "io/hf_config.h"

#define GENAI_MAX_NAME 96
#define GENAI_MAX_EOS  8

typedef struct genai_config {
  char model_type[64];
  char filename[GENAI_MAX_NAME];
  int64_t head_size, hidden_size, num_attention_heads, num_hidden_layers, num_key_value_heads;
  int64_t vocab_size, context_length;
  int64_t bos_token_id, eos_token_id, pad_token_id; /* -1 when absent */
  /* Every end-of-sequence id (HF generation_config.json often lists several, e.g. Qwen's
   * <|im_end|> and <|endoftext|>); eos_token_id is the first. Written as one integer when there
   * is one, as an array (GenAI accepts both) when there are more; 0 when absent. */
  int n_eos_token_ids;
  int64_t eos_token_ids[GENAI_MAX_EOS];
  char input_ids[GENAI_MAX_NAME], attention_mask[GENAI_MAX_NAME], position_ids[GENAI_MAX_NAME];
  char past_key_names[GENAI_MAX_NAME], past_value_names[GENAI_MAX_NAME];
  char past_conv_names[GENAI_MAX_NAME], past_recurrent_names[GENAI_MAX_NAME];
  char logits[GENAI_MAX_NAME];
  char present_key_names[GENAI_MAX_NAME], present_value_names[GENAI_MAX_NAME];
  char present_conv_names[GENAI_MAX_NAME], present_recurrent_names[GENAI_MAX_NAME];
  int past_present_share_buffer;
} genai_config;

/* The dense decoder's config for a model exported with context_length tokens of rotary cache. */
genai_config genai_config_dense(const hf_config *c, int64_t context_length);

/* Fills the bos/eos/pad token ids from checkpoint_dir's config.json (top level, then its
 * text_config) and generation_config.json (which wins, as it does for HF generate()), each only
 * when present; null values count as absent. A key holding something other than a non-negative
 * integer (or, for eos_token_id, an array of them) is PH_ERR_CONFIG_INVALID naming file and key;
 * malformed JSON is PH_ERR_JSON. Missing files are not an error. */
ph_status genai_config_token_ids(genai_config *g, const char *checkpoint_dir, diag *d);

/* Writes dir/genai_config.json (JSON_INDENT(2), keys in a fixed order; empty *_names are
 * omitted, so a model without linear layers gets no conv/recurrent templates). */
ph_status genai_config_write(const genai_config *g, const char *dir, diag *d);

/* Reads dir/genai_config.json; missing keys take ORT GenAI's defaults; the *_names templates must
 * contain exactly one %d (PH_ERR_CONFIG_INVALID otherwise). docs/import.md lists every key. */
ph_status genai_config_read(const char *dir, genai_config *out, diag *d);

/* The same from JSON text held in memory (len bytes, need not be NUL-terminated); label names
 * the source in messages. The fuzzer drives this. */
ph_status genai_config_parse(const char *json, size_t len, const char *label, genai_config *out,
                             diag *d);

#endif /* PH_IO_GENAI_CONFIG_H */
