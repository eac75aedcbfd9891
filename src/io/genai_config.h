/* genai_config — ONNX Runtime GenAI's genai_config.json for our packages (../shared/spec/abi.md
 * §8.5 for the key names, which are GenAI's contract, not ours), written at export and read back
 * when a package is loaded. It owns the struct and the file's bytes; it never opens the graph
 * (models/export.c checks the names against it) and never exits on a bad file.
 *
 * Two layouts share one struct:
 * - dense decoder: model.type, model.decoder {filename, session_options, head_size,
 *   hidden_size, num_attention_heads, num_hidden_layers, num_key_value_heads, inputs {input_ids,
 *   attention_mask, position_ids, past_key_names, past_value_names, past_conv_names,
 *   past_recurrent_names}, outputs {logits, present_key_names, present_value_names,
 *   present_conv_names, present_recurrent_names}}, model.context_length, model.vocab_size,
 *   model.bos/eos/pad token ids when the checkpoint config has them, search {max_length,
 *   do_sample false, past_present_share_buffer false}.
 * - packed paged layout (paged = 1): no attention_mask; inputs add block_table,
 *   cumulative_sequence_lengths, past_sequence_lengths, attention_metadata; the decoder adds
 *   state_groups (which layers hold paged K/V, fixed conv state, fixed recurrent state) and
 *   session_options.provider_options [{"cuda": {"enable_cuda_graph": "0"}}]; the top level adds
 *   engine.dynamic_batching; search.past_present_share_buffer is true.
 * - the LATENT variant of the paged layout (DeepSeek MLA: PagedAttention kv_cache_layout LATENT,
 *   one latent page cache per layer, abi.md §1.8/§9.1): inputs name slot_mapping and no
 *   position_ids, attention_metadata or past/present_value_names (the paged_kv layers hold key
 *   pages only). inputs.slot_mapping is our key (no ORT GenAI release is known to bind it:
 *   UNCONFIRMED); its presence is what makes the absent keys mean "none" instead of GenAI's
 *   default names (docs/export.md "LATENT packages").
 * - compact state updates (paged, state_update_capacity C in 1..8, abi.md §8.5): inputs add
 *   state_update_capture_count and state_update_active, outputs add
 *   state_update_conv_value_names and state_update_recurrent_capsule_names (one %d each), the
 *   decoder adds state_update_capacity; none of them when C = 0. The per-group "state_update"
 *   objects of state_groups are UNCONFIRMED in the spec: never written, and a capacity > 0 there
 *   is refused (PH_ERR_UNSUPPORTED).
 */
#ifndef PH_IO_GENAI_CONFIG_H
#define PH_IO_GENAI_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "base/diag.h"
#include "io/hf_config.h"

#define GENAI_MAX_NAME         96
#define GENAI_MAX_EOS          8
#define GENAI_MAX_STATE_GROUPS 8
#define GENAI_MAX_LAYERS       HF_MAX_LAYERS

/* model.decoder.state_groups[i].kind. Values are the JSON strings of genai_state_kind_name. */
typedef enum genai_state_kind {
  GENAI_STATE_PAGED_KV = 0,        /* "paged_kv": K/V in pages (past_key/value_names) */
  GENAI_STATE_FIXED_CONV = 1,      /* "fixed_conv": one conv state per sequence */
  GENAI_STATE_FIXED_RECURRENT = 2, /* "fixed_recurrent": one recurrent state per sequence */
} genai_state_kind;

typedef struct genai_state_group {
  genai_state_kind kind;
  int n_layer_ids;                     /* 0..GENAI_MAX_LAYERS */
  int32_t layer_ids[GENAI_MAX_LAYERS]; /* [n_layer_ids], unique, in [0, num_hidden_layers) */
} genai_state_group;

/* engine.dynamic_batching (GenAI's continuous-batching engine). */
typedef struct genai_dynamic_batching {
  int present;                   /* 1 when the file has (or the writer emits) the object */
  int64_t block_size;            /* tokens per KV page, > 0 (default 256) */
  int64_t max_batch_size;        /* >= 1; 16 (GenAI's runtime default) when absent in a file */
  double gpu_utilization_factor; /* in (0, 1]; <= 0 means absent */
  int64_t num_blocks;            /* explicit page budget; 0 means absent */
  int64_t max_scheduled_tokens;  /* tokens per engine step, >= 1 (default 2048) */
} genai_dynamic_batching;

typedef struct genai_config {
  char model_type[64];
  /* 1 when the file has model.decoder (the writers set it): without it nothing names the graph or
   * its sizes, and a package cannot be bound (models/package.h says so by name). */
  int has_decoder;
  /* model.decoder.filename: the graph file, a plain file name in the package directory (read
   * refuses a path, "." or ".."); "model.onnx" when absent. */
  char filename[GENAI_MAX_NAME];
  int64_t head_size, hidden_size, num_attention_heads, num_hidden_layers, num_key_value_heads;
  int64_t vocab_size, context_length;
  int64_t bos_token_id, eos_token_id, pad_token_id; /* -1 when absent */
  /* Every end-of-sequence id (HF generation_config.json often lists several, e.g. Qwen's
   * <|im_end|> and <|endoftext|>); eos_token_id is the first. Written as one integer when there
   * is one, as an array (GenAI accepts both) when there are more; 0 when absent. */
  int n_eos_token_ids;
  int64_t eos_token_ids[GENAI_MAX_EOS];
  /* Graph I/O names; "" means the key is absent (and is not written). */
  char input_ids[GENAI_MAX_NAME], attention_mask[GENAI_MAX_NAME], position_ids[GENAI_MAX_NAME];
  char block_table[GENAI_MAX_NAME], cumulative_sequence_lengths[GENAI_MAX_NAME];
  char past_sequence_lengths[GENAI_MAX_NAME], attention_metadata[GENAI_MAX_NAME];
  char slot_mapping[GENAI_MAX_NAME]; /* paged LATENT only; "" otherwise */
  char past_key_names[GENAI_MAX_NAME], past_value_names[GENAI_MAX_NAME];
  char past_conv_names[GENAI_MAX_NAME], past_recurrent_names[GENAI_MAX_NAME];
  char logits[GENAI_MAX_NAME];
  char present_key_names[GENAI_MAX_NAME], present_value_names[GENAI_MAX_NAME];
  char present_conv_names[GENAI_MAX_NAME], present_recurrent_names[GENAI_MAX_NAME];
  /* compact state updates: capacity 0..8 (0: none, every name below ""); C > 0 names the
   * capture inputs and the two per-linear-layer output templates */
  int32_t state_update_capacity;
  char state_update_capture_count[GENAI_MAX_NAME], state_update_active[GENAI_MAX_NAME];
  char state_update_conv_value_names[GENAI_MAX_NAME];
  char state_update_recurrent_capsule_names[GENAI_MAX_NAME];
  int past_present_share_buffer;
  /* 1: the packed paged layout (engine.dynamic_batching is present; written in §8.5's order). */
  int paged;
  /* model.decoder.state_groups in file order; 0 groups: absent, which in a paged config is
   * GenAI's legacy contract (every layer holds paged K/V). */
  int n_state_groups;
  genai_state_group state_groups[GENAI_MAX_STATE_GROUPS];
  genai_dynamic_batching dynamic_batching;
  /* 1: session_options.provider_options is [{"cuda": {"enable_cuda_graph": "0"}}] (hybrid
   * paged models must run without CUDA graphs: fixed state uses per-step staging addresses). */
  int cuda_graph_disabled;
} genai_config;

/* "paged_kv", "fixed_conv", "fixed_recurrent"; "unknown" for any other value. */
const char *genai_state_kind_name(genai_state_kind k);

/* The dense decoder's config for a model exported with context_length tokens of rotary cache. */
genai_config genai_config_dense(const hf_config *c, int64_t context_length);

/* The packed paged layout's config: the dense config's sizes and templates without
 * attention_mask, plus the paged inputs, past_present_share_buffer true, CUDA graphs disabled,
 * and state groups in the order paged_kv (every attention layer), fixed_conv and fixed_recurrent
 * (every linear-attention layer; both omitted, with their templates, when there is none), each
 * with ascending layer ids. A model with MLA layers (DeepSeek) gets the LATENT variant:
 * slot_mapping, no position_ids, attention_metadata or value templates, and the page geometry
 * of its latent cache (num_key_value_heads 1, head_size kv_lora_rank + qk_rope_head_dim).
 * dynamic_batching holds the arguments (present = 1), with one page budget: num_blocks when > 0
 * (the factor is then dropped to 0), else gpu_utilization_factor when > 0, else neither (GenAI's
 * runtime default). Arguments are not validated here; genai_config_read checks what comes back. */
genai_config genai_config_paged(const hf_config *c, int64_t context_length, int64_t block_size,
                                int64_t max_batch_size, double gpu_utilization_factor,
                                int64_t num_blocks, int64_t max_scheduled_tokens);

/* The graph inputs g names one by one (the per-layer templates aside), in this order:
 * input_ids, position_ids, attention_mask, block_table, cumulative_sequence_lengths,
 * past_sequence_lengths, attention_metadata, slot_mapping, state_update_capture_count,
 * state_update_active; "" where g names none. The one list of them (the export's name check
 * and inference_metadata.json read it). */
#define GENAI_N_SINGLE_INPUTS 10
void genai_config_single_inputs(const genai_config *g, const char *out[GENAI_N_SINGLE_INPUTS]);

/* Sets g's compact state updates to capacity (the ABI's names, graph/abi_names.h, when > 0;
 * capacity 0 clears them). Not validated here. */
void genai_config_set_state_updates(genai_config *g, int32_t capacity);

/* Fills the bos/eos/pad token ids from checkpoint_dir's config.json (top level, then its
 * text_config) and generation_config.json (which wins, as it does for HF generate()), each only
 * when present; null values count as absent. A key holding something other than a non-negative
 * integer (or, for eos_token_id, an array of them) is PH_ERR_CONFIG_INVALID naming file and key;
 * malformed JSON is PH_ERR_JSON. Missing files are not an error. */
ph_status genai_config_token_ids(genai_config *g, const char *checkpoint_dir, diag *d);

/* Writes dir/genai_config.json (JSON_INDENT(2), keys in a fixed order, so the same struct always
 * gives the same bytes; docs/export.md lists the order). Empty names are omitted, so a model
 * without linear layers gets no conv/recurrent templates. state_groups are written when
 * n_state_groups > 0, engine.dynamic_batching when dynamic_batching.present. More than
 * GENAI_MAX_STATE_GROUPS groups or GENAI_MAX_LAYERS ids in a group is PH_ERR_INVALID_ARGUMENT. */
ph_status genai_config_write(const genai_config *g, const char *dir, diag *d);

/* Reads dir/genai_config.json; missing keys take ORT GenAI's defaults; the *_names templates must
 * contain exactly one %d (PH_ERR_CONFIG_INVALID otherwise); state groups and dynamic batching
 * are validated (PH_ERR_CONFIG_INVALID naming the key path, PH_ERR_LIMIT past the array sizes
 * above; engine.dynamic_batching.block_size must be a power of two >= 16, PagedAttention's
 * rule); decoder.filename must be a plain file name (no '/', '\', "." or ".."); inputs.slot_mapping
 * (LATENT) makes absent position_ids, attention_metadata and value templates read as "" (not
 * GenAI's defaults), is PH_ERR_CONFIG_INVALID in a dense config, and past_value_names named
 * without present_value_names (or the reverse) beside it is PH_ERR_CONFIG_INCONSISTENT; token
 * ids at or beyond vocab_size and query heads that are not a multiple of key/value heads are
 * PH_ERR_CONFIG_INCONSISTENT; decoder.state_update_capacity must be 0..8 (PH_ERR_CONFIG_INVALID)
 * and > 0 only in a paged config, and the four state_update_* names are present exactly when
 * it is > 0 (PH_ERR_CONFIG_INCONSISTENT naming the key; the templates take exactly one %d); a
 * per-group state_update.capacity > 0 is PH_ERR_UNSUPPORTED. The older
 * "paged_kv" / "fixed" + "bindings" form of state_groups is accepted. This checks the file alone;
 * models/package.h checks it against the graph it names. docs/import.md lists every key. */
ph_status genai_config_read(const char *dir, genai_config *out, diag *d);

/* The same from JSON text held in memory (len bytes, need not be NUL-terminated); label names
 * the source in messages. The fuzzer drives this. */
ph_status genai_config_parse(const char *json, size_t len, const char *label, genai_config *out,
                             diag *d);

#endif /* PH_IO_GENAI_CONFIG_H */
