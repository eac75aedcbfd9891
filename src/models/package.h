/* package — a package directory read as a whole: genai_config.json, the graph file it names, and
 * the one checked against the other before anything is bound to them.
 *
 * genai_config_read (io/genai_config.h) checks the file alone; this module checks what only the
 * graph can confirm, so a package whose config and graph disagree is refused by name instead of
 * binding wrong sizes, or failing later with a message about a tensor:
 * - model.decoder must be present (it names the graph and its sizes), with num_hidden_layers,
 *   head_size, hidden_size, num_attention_heads, num_key_value_heads and model.vocab_size > 0;
 * - decoder.filename (a plain name, checked by the reader) must exist and resolve, symlinks
 *   followed, to a file directly inside the package directory; that file is the graph read (not a
 *   fixed model.onnx);
 * - the inputs and outputs the config names exist in the graph (input_ids, position_ids, and
 *   attention_mask or the paged inputs; logits);
 * - vocab_size equals the logits' last dim; num_hidden_layers equals the number of layers with
 *   state inputs (past_key / past_conv templates), and every such layer has the inputs its state
 *   group says (paged_kv: key and value; fixed: conv and recurrent; no groups: GenAI's legacy
 *   all-paged contract in the paged layout, key/value or conv/recurrent in the dense one);
 * - num_key_value_heads and head_size equal the key inputs' dims ([P, K, Hkv, D] paged,
 *   [B, Hkv, T, D] dense), and in the paged layout engine.dynamic_batching.block_size equals the
 *   page size K;
 * - num_attention_heads equals every attention node's num_heads (and num_key_value_heads its
 *   kv_num_heads: GroupQueryAttention, PagedAttention);
 * - hidden_size equals the width of the embedding table the input ids are gathered from;
 * - context_length does not exceed the rows of the rotary cache (cos_cache) when there is one.
 * A check whose quantity the graph leaves unknown (a symbolic dim, no such node) is skipped.
 * Disagreement is PH_ERR_CONFIG_INCONSISTENT naming the key, both values and the graph value;
 * a missing decoder or size is PH_ERR_CONFIG_MISSING_FIELD; a filename that leads outside the
 * package is PH_ERR_CONFIG_INVALID; a missing file PH_ERR_NOT_FOUND.
 */
#ifndef PH_MODELS_PACKAGE_H
#define PH_MODELS_PACKAGE_H

#include "base/diag.h"
#include "graph/graph.h"
#include "io/genai_config.h"
#include "io/onnx.h"

#define PACKAGE_CONFIG_FILE "genai_config.json"

enum {
  PACKAGE_FINALIZE = 1, /* finalize the graph (else it is returned as read: inspect) */
  PACKAGE_CHECK = 2,    /* check gc against the graph (package_check_graph) */
  /* read a structure-only package (export --config-only) instead of refusing it: its external
   * initializers have no data (io/onnx.h ONNX_READ_CONFIG_ONLY); info->config_only says so.
   * For describing it (inspect), never for running it. */
  PACKAGE_CONFIG_ONLY = 4,
};

/* Reads the graph of the package in dir: the file gc's decoder.filename names, confined to dir,
 * or dir/model.onnx when gc is NULL (a package without genai_config.json). flags: PACKAGE_*.
 * On failure *out is NULL. info as onnx_read_model_ex. */
ph_status package_read_graph(const char *dir, const genai_config *gc, unsigned flags, graph **out,
                             onnx_model_info *info, diag *d);

/* The same, reading dir/genai_config.json first when it exists (into *gc when gc is not NULL;
 * *has_config, when not NULL, says whether it existed). */
ph_status package_read(const char *dir, unsigned flags, genai_config *gc, int *has_config,
                       graph **out, onnx_model_info *info, diag *d);

/* Checks gc against g (finalized or as read), as the header says. */
ph_status package_check_graph(const genai_config *gc, const graph *g, diag *d);

#endif /* PH_MODELS_PACKAGE_H */
