/* abi_names — the one table of graph I/O names: the decoder graph's inputs and outputs, the
 * per-layer cache templates (one %d, the layer index), the symbolic dims the builder names them
 * with, and the rotary cache initializers a session reads its context bound from.
 *
 * The names are the ABI of ../shared/spec/abi.md §8.1 (packed paged inputs, the compact
 * state-update ones included), §8.2 (outputs) and
 * §8.5 (the genai_config.json defaults: "past_key_values.%d.key" and co.), and the dense layout
 * of docs/graph-io.md (which adds attention_mask). The graph builder (models/qwen35.c) writes
 * them; the sessions (runtime/) and genai_config (io/) bind and default by them; nothing else in
 * src/ spells them. The tests keep their literals on purpose: they are the independent check.
 *
 * Header only, no state; nothing here allocates.
 */
#ifndef PH_GRAPH_ABI_NAMES_H
#define PH_GRAPH_ABI_NAMES_H

#include <stddef.h>
#include <stdio.h>

/* ---- graph inputs and outputs ------------------------------------------------------------- */

#define ABI_INPUT_IDS      "input_ids"      /* i64 [B, S] dense, [N] packed */
#define ABI_ATTENTION_MASK "attention_mask" /* i64 [B, P+S], dense only */
#define ABI_POSITION_IDS   "position_ids"   /* i64 [3, B, S] / [B, S] dense, [3, N] / [N] packed */
#define ABI_BLOCK_TABLE    "block_table"    /* i32 [B, max_num_blocks], packed */
#define ABI_CU_SEQLENS     "cumulative_sequence_lengths" /* i32 [B+1], packed (plural, §8.1) */
#define ABI_PAST_SEQLENS   "past_sequence_lengths"       /* i32 [B], packed */
#define ABI_ATTN_METADATA  "attention_metadata"          /* i32 [3], packed, host */
#define ABI_SLOT_MAPPING   "slot_mapping" /* i32 [N], packed LATENT (MLA) graphs: flat page slot */
#define ABI_LOGITS         "logits"       /* f32 [B, S, V] / [N, V] / [B, V] */

/* Not the ABI: the CPU runtime's MTP drafter (docs/mtp.md; never in an exported package). */
#define ABI_HIDDEN_STATES  "hidden_states"  /* f32 [N, H] output, model_options.output_hidden */
#define ABI_MTP_HIDDEN_IN  "mtp_hidden_in"  /* f32 [N, H] input of the MTP graph */
#define ABI_LOGIT_ROWS     "logit_rows"     /* i64 [R] input: rows reaching the LM head,
                                               model_options.logit_rows */
#define ABI_DIM_LOGIT_ROWS "num_logit_rows"
#define ABI_MTP_HIDDEN_OUT "mtp_hidden_out" /* f32 [N, H] output of the MTP graph, for chaining */

/* ---- per-layer cache templates (exactly one %d: the layer index) -------------------------- */

#define ABI_PAST_KEY          "past_key_values.%d.key" /* full-attention layers */
#define ABI_PAST_VALUE        "past_key_values.%d.value"
#define ABI_PAST_CONV         "past_key_values.%d.conv_state" /* linear layers */
#define ABI_PAST_RECURRENT    "past_key_values.%d.recurrent_state"
#define ABI_PRESENT_KEY       "present.%d.key"
#define ABI_PRESENT_VALUE     "present.%d.value"
#define ABI_PRESENT_CONV      "present.%d.conv_state"
#define ABI_PRESENT_RECURRENT "present.%d.recurrent_state"

/* ---- compact state updates (packed graphs built with state_update_capacity C > 0 only) ---- */

/* inputs, after every other input (abi §8.1) */
#define ABI_SU_CAPTURE_COUNT "state_update_capture_count" /* i32 [B] */
#define ABI_SU_ACTIVE        "state_update_active"        /* i32 [1], host */

/* per linear layer (one %d), layers ascending, after every other output (abi §8.2):
 * the conv value, io dtype [B, C, conv_dim]; the recurrent capsule, f32 [B, C*(Hv+Hk*Dk+Hv*Dv)] */
#define ABI_SU_CONV_VALUE        "state_update.%d.conv_value"
#define ABI_SU_RECURRENT_CAPSULE "state_update.%d.recurrent_capsule"

/* the largest capacity the ops take (abi §2.1, §3) */
#define ABI_SU_MAX_CAPACITY 8

/* ---- symbolic dims (ONNX dim_param) ------------------------------------------------------- */

#define ABI_DIM_BATCH        "batch_size"
#define ABI_DIM_BATCH_PLUS_1 "batch_size_plus_1"
#define ABI_DIM_SEQUENCE     "sequence_length"
#define ABI_DIM_TOTAL_SEQ    "total_sequence_length"
#define ABI_DIM_PAST_SEQ     "past_sequence_length"
#define ABI_DIM_TOKENS       "num_tokens"
#define ABI_DIM_BLOCKS       "num_blocks"
#define ABI_DIM_MAX_BLOCKS   "max_num_blocks"

/* ---- initializers read by name ------------------------------------------------------------ */

/* rotary caches [context, rot/2] f32 (GenAI's builder's names): their rows bound the context */
#define ABI_COS_CACHE "cos_cache"
#define ABI_SIN_CACHE "sin_cache"

/* ---- per-layer names ---------------------------------------------------------------------- */

/* The two cache tensors of a layer: key and value of a full-attention layer, conv and recurrent
 * state of a linear one. */
typedef enum abi_cache_slot {
  ABI_SLOT_KEY,
  ABI_SLOT_VALUE,
  ABI_SLOT_CONV,
  ABI_SLOT_RECURRENT,
} abi_cache_slot;

/* Slot k (0 or 1) of a layer: full attention's key/value, a linear layer's conv/recurrent. */
static inline abi_cache_slot abi_layer_slot(int full_attention, int k) {
  return (abi_cache_slot)((full_attention ? ABI_SLOT_KEY : ABI_SLOT_CONV) + (k ? 1 : 0));
}

static inline const char *abi_past_template(abi_cache_slot s) {
  static const char *const t[4] = {ABI_PAST_KEY, ABI_PAST_VALUE, ABI_PAST_CONV, ABI_PAST_RECURRENT};
  return t[s];
}

static inline const char *abi_present_template(abi_cache_slot s) {
  static const char *const t[4] = {ABI_PRESENT_KEY, ABI_PRESENT_VALUE, ABI_PRESENT_CONV,
                                   ABI_PRESENT_RECURRENT};
  return t[s];
}

/* Writes layer's name from tmpl (one of the templates above) into out[n] and returns out;
 * truncated (still NUL-terminated) when n is too small: 64 bytes hold every name for layers
 * below 10^9. */
static inline const char *abi_layer_name(char *out, size_t n, const char *tmpl, int layer) {
  snprintf(out, n, tmpl, layer);
  return out;
}

static inline const char *abi_past_name(char *out, size_t n, abi_cache_slot s, int layer) {
  return abi_layer_name(out, n, abi_past_template(s), layer);
}

static inline const char *abi_present_name(char *out, size_t n, abi_cache_slot s, int layer) {
  return abi_layer_name(out, n, abi_present_template(s), layer);
}

#endif /* PH_GRAPH_ABI_NAMES_H */
