/* inference_metadata — inference_metadata.json: the package's graph ABI in the onnx-genai
 * inference-metadata format (schema_version "v1", justinchuby/onnx-genai,
 * crates/onnx-genai-metadata; the Qwen3.5 hybrid form of its catalogue,
 * examples/inference_metadata/catalogue/20-*.yaml). Written at export beside genai_config.json,
 * checked against the graph and genai_config. It owns the file's bytes and the checks; it never
 * opens the graph file itself and never exits on a bad file.
 *
 * Files: inference_metadata_abi.h/.c, the table both directions start from (every graph I/O
 * classified by the genai_config name that gives it; internal); inference_metadata_write.c, the
 * writer; inference_metadata_check.c, the checker, which the writer also runs on its own text.
 *
 * What the document says (docs/export.md, "inference_metadata.json", has the decisions):
 * - one ONNX component "decoder" (artifact: genai_config's decoder.filename) whose ports are
 *   exactly the graph's inputs and outputs: dtype ("float32", "bfloat16", ...), rank, shape (a
 *   known dim as a number, an unknown one as the graph's symbol, else "<tensor>_dim<k>", the
 *   name model.onnx gives it) and batch_layout: request_aligned on the batch dim, token_packed
 *   on the packed-token dim (offsets and owner both "request.<cumulative_sequence_lengths>"),
 *   runtime_sequence_state for KV pages, none for the rest; roles token_ids, position_ids,
 *   attention_mask (dense) and logits;
 * - a workflow input "request.<name>" per graph input with the port's contract, one invoke of
 *   the decoder binding every port, and an emit of "decoder.<logits>" as output "logits";
 * - state: every linear layer i's conv and recurrent state as cells "layer.<i>.conv_state" /
 *   "layer.<i>.recurrent_state" in the state-service groups "fixed_conv" (layout "bch") and
 *   "fixed_recurrent" (layout "bhvk" packed paged, V-major f32; "bhkv" dense, K-major), kind
 *   recurrent, update replace, one port alias per layer {input past, output present, layer i};
 *   aliasing "permitted" in the paged layout (the kernels may update in place), "forbidden" in
 *   the dense one;
 * - KV, packed paged layout: not a state-service group (every state-service cell must be
 *   request-aligned, and a page pool has no request axis) but the decoder's component contract
 *   INFERENCE_METADATA_PAGED_KV_CONTRACT version "1": bindings PagedAttention's slot names ->
 *   graph names (block_table, cumulative_sequence_length, past_seqlens, attention_metadata and
 *   slot_mapping where genai_config names them, and "layer.<i>.key_cache" / "value_cache" /
 *   "key_cache_out" / "value_cache_out" per full-attention layer), parameters block_size (tokens
 *   per page) and aliasing "required";
 * - LATENT (DeepSeek MLA: genai_config names slot_mapping and no value templates): the same
 *   contract with key_cache / key_cache_out per layer only, slot_mapping bound (its port
 *   token_packed like input_ids), the parameter kv_cache_layout "LATENT" (absent, as in every
 *   other package, means SEPARATE), no state service, model.attention.type "multi_latent";
 * - KV, dense layout: the state-service group "dense_kv" (kind full_attention, sequence_axis 2,
 *   layout "bnsh", update append), cells "layer.<i>.key" / ".value", aliases with role key/value;
 * - model: attention type and sizes (genai_config's heads and head_size: for LATENT the latent
 *   page row), max_sequence_length (= context_length), vocab_size.
 * A layer's id is the model's layer index, the id genai_config's state_groups use.
 */
#ifndef PH_IO_INFERENCE_METADATA_H
#define PH_IO_INFERENCE_METADATA_H

#include <stddef.h>

#include "base/diag.h"
#include "graph/graph.h"
#include "io/genai_config.h"

#define INFERENCE_METADATA_FILE              "inference_metadata.json"
#define INFERENCE_METADATA_PAGED_KV_CONTRACT "pagedhybrid.paged_kv"

/* Writes dir/inference_metadata.json (JSON_INDENT(2), a fixed key order: the same graph and
 * config give the same bytes) for g, a graph as built or as read (its inputs and outputs are
 * what is described), and gc, its genai_config. The document is checked
 * (inference_metadata_check_text) before it is written: a graph I/O name gc does not give, a
 * state group that disagrees with the graph (the errors of the check) is returned as such and
 * nothing is written. Written through base/wfile.h. */
ph_status inference_metadata_write(const graph *g, const genai_config *gc, const char *dir,
                                   diag *d);

/* Checks dir/inference_metadata.json against g (as built or as read, finalized or not) and gc:
 * - every graph input and output is a decoder port and every port a graph input or output, with
 *   the graph's dtype, rank and shape, and the batch_layout its dims call for; roles name gc's
 *   input_ids, position_ids, attention_mask and logits;
 * - every graph input has its workflow input with the port's contract; the one invoke binds
 *   every port; the emit publishes the logits;
 * - the state disciplines: fixed_conv's and fixed_recurrent's layer ids equal gc's state_groups
 *   (dense: the layers whose gc templates name graph inputs), each alias names exactly
 *   gc's past/present template for its layer, each cell carries the port's contract; the
 *   recurrent state is float32; the paged KV contract binds exactly gc's paged_kv layers to
 *   gc's past/present key and value names (LATENT: key names only, kv_cache_layout "LATENT")
 *   and gc's control inputs, with block_size = gc's engine.dynamic_batching.block_size = the
 *   pages' dim 1 (dense: the dense_kv group does);
 * - schema_version "v1", the manifest's capabilities, the model sizes against gc.
 * Errors, naming the key path with what was expected and what was found: PH_ERR_NOT_FOUND (no
 * file), PH_ERR_JSON (malformed), PH_ERR_CONFIG_MISSING_FIELD (a key or entry missing),
 * PH_ERR_CONFIG_INVALID (a key of the wrong JSON type or an unknown value: a dtype, a layout
 * kind), PH_ERR_CONFIG_INCONSISTENT (a value that disagrees with the graph or gc: a dtype, a dim,
 * a layer id, a tensor name, an entry the graph does not have). gc and g disagreeing with each
 * other (a graph I/O gc does not name, an input gc names that the graph lacks, a slot_mapping
 * that is not [N] like input_ids, key pages without value templates or slot_mapping) is
 * PH_ERR_CONFIG_INCONSISTENT too. */
ph_status inference_metadata_check(const char *dir, const graph *g, const genai_config *gc,
                                   diag *d);

/* The same for JSON text held in memory (len bytes, need not be NUL-terminated); label names
 * the source in messages. */
ph_status inference_metadata_check_text(const char *json, size_t len, const char *label,
                                        const graph *g, const genai_config *gc, diag *d);

#endif /* PH_IO_INFERENCE_METADATA_H */
