/* inference_metadata_abi — the table inference_metadata.json is written from and checked
 * against (internal to io/inference_metadata_*.c; the module's interface is
 * io/inference_metadata.h).
 *
 * Both directions start from one table (md_abi): every graph input and output classified by the
 * genai_config name or template that gives it (token ids, positions, mask, logits, a paged
 * control input or slot_mapping, or layer i's key, value, conv or recurrent state), with the
 * batch layout its dims call for, and the layer ids of each state discipline. Building the
 * table is itself the first check: a graph I/O genai_config does not name, or state groups that
 * disagree with the graph, stop both the writer and the checker.
 *
 * The module's files:
 * - inference_metadata_abi.c   the table (md_abi_build) and the names of the document both
 *                              directions derive from it (cells, layouts, prefixed names);
 * - inference_metadata_write.c the writer: the table turned into JSON, checked, then written;
 * - inference_metadata_check.c the checker: a parsed file walked key by key, each value compared
 *                              with the graph and genai_config directly, naming the key path.
 * A key written in one file is read back in the other under the same MD_ name below.
 *
 * Everything here is md_-prefixed and library-internal (hidden visibility: nothing is exported
 * from libpagedhybrid). The table only points into g and gc, which must outlive it.
 */
#ifndef PH_IO_INFERENCE_METADATA_ABI_H
#define PH_IO_INFERENCE_METADATA_ABI_H

#include <stddef.h>
#include <stdint.h>

#include "base/diag.h"
#include "graph/graph.h"
#include "io/genai_config.h"

#define MD_SCHEMA_VERSION   "v1"
#define MD_CONTRACT_VERSION "1"
#define MD_COMPONENT        "decoder"
#define MD_REQUEST          "request."       /* prefix of the workflow inputs */
#define MD_STEP             MD_COMPONENT "." /* prefix of the invoke's results */
#define MD_LOGITS_OUTPUT    "logits"
#define MD_GROUP_CONV       "fixed_conv"
#define MD_GROUP_RECURRENT  "fixed_recurrent"
#define MD_GROUP_DENSE_KV   "dense_kv"
/* a tensor name, a cell or binding name, or one of them behind a prefix */
#define MD_NAME_BYTES       (GENAI_MAX_NAME + 32)

/* The paged KV contract's parameter naming PagedAttention's kv_cache_layout; written for LATENT
 * only (absent: SEPARATE, the op's default). */
#define MD_PARAM_KV_LAYOUT    "kv_cache_layout"
#define MD_KV_LAYOUT_LATENT   "LATENT"
#define MD_KV_LAYOUT_SEPARATE "SEPARATE"

/* The serving controls every catalogue decoder declares (not graph inputs). */
typedef struct md_serving_input {
  const char *name;     /* workflow input, "request.active" */
  const char *app_name; /* its application source, "active" */
  const char *dtype;
} md_serving_input;

#define MD_N_SERVING_INPUTS 3
/* active, done, accepted_len, in that order */
extern const md_serving_input md_serving_inputs[MD_N_SERVING_INPUTS];

typedef enum md_kind {
  MD_TOKENS,
  MD_POSITIONS,
  MD_MASK,
  MD_LOGITS,
  MD_BLOCK_TABLE,
  MD_CU_SEQLENS,
  MD_PAST_SEQLENS,
  MD_ATTN_METADATA,
  MD_SLOT_MAPPING, /* PagedAttention's flat write slot per packed token (LATENT) */
  MD_KEY,
  MD_VALUE,
  MD_CONV,
  MD_RECURRENT,
  /* compact state updates (genai_config state_update_capacity > 0): the capture inputs, opaque
   * application inputs like the paged controls, and layer i's two outputs */
  MD_SU_CAPTURE_COUNT,
  MD_SU_ACTIVE,
  MD_SU_CONV_VALUE,
  MD_SU_CAPSULE,
} md_kind;

typedef enum md_layout {
  MD_SHARED,
  MD_REQUEST_ALIGNED,
  MD_TOKEN_PACKED,
  MD_RUNTIME_STATE
} md_layout;

typedef struct md_io {
  int value; /* graph value id */
  int is_output;
  md_kind kind;
  int layer; /* MD_KEY..MD_RECURRENT: the layer id; else -1 */
  md_layout layout;
  int axis; /* MD_REQUEST_ALIGNED / MD_TOKEN_PACKED */
} md_io;

/* One state discipline: its layer ids, ascending. */
typedef struct md_layers {
  int n;
  int32_t id[GENAI_MAX_LAYERS];
} md_layers;

typedef struct md_abi {
  const graph *g;
  const genai_config *gc;
  int paged;
  /* paged KV layers hold key pages only (PagedAttention kv_cache_layout LATENT): gc names
   * slot_mapping and no value templates (io/genai_config.h) */
  int latent;
  /* the recurrent state is V-major [B, Hv, Dv, Dk]: GatedDeltaNet reads it (the packed layout,
   * and the dense one exported with linear_attn_op gated_delta_net); else LinearAttention's
   * K-major [B, Hv, Dk, Dv] */
  int rec_v_major;
  int n_io;
  md_io *io;                         /* graph inputs in order, then outputs; malloc'ed */
  md_layers kv, conv, rec;           /* KV (paged or dense), conv and recurrent state */
  int serving;                       /* the document has serving (some state-service group) */
  char batch_sym[32], token_sym[32]; /* "" when the dim is not symbolic */
} md_abi;

/* Builds a's table for g and gc (a is overwritten). Errors: PH_ERR_CONFIG_MISSING_FIELD (gc has
 * no decoder with input_ids and logits), PH_ERR_UNSUPPORTED (a graph I/O without rank or with a
 * dtype the format cannot name), PH_ERR_CONFIG_INCONSISTENT (a graph I/O gc does not name, an
 * input gc names that the graph lacks, state groups or page size that disagree with the graph,
 * paged KV layers without value templates and without slot_mapping, a slot_mapping that is not
 * one entry per packed token), PH_ERR_NO_MEMORY; on error a holds nothing to free. */
ph_status md_abi_build(const graph *g, const genai_config *gc, md_abi *a, diag *d);

/* Frees a's table; a second call is a no-op. */
void md_abi_free(md_abi *a);

static inline const gvalue *md_io_value(const md_abi *a, const md_io *io) {
  return &a->g->values[io->value];
}

/* The format's name of t ("float32", "bfloat16", ...), NULL for a dtype it cannot name. */
const char *md_dtype_json_name(ph_dtype t);

/* Dim k of value v as model.onnx names it: NULL when known (a number), else the graph's symbol
 * or the "<name>_dim<k>" the ONNX writer generates for an anonymous dim (io/onnx_write.c), built
 * in buf (n bytes). */
const char *md_dim_symbol(const graph *g, const gvalue *v, int k, char *buf, size_t n);

/* The table's entry of kind for layer (-1 for a non-state kind), input or output; NULL if none. */
const md_io *md_find_io(const md_abi *a, md_kind kind, int layer, int is_output);

/* l as "[0, 1, 2]" into buf (n bytes, truncated to fit). */
void md_layers_format(const md_layers *l, char *buf, size_t n);

/* model.attention.type: "multi_latent" for a LATENT package (the pages hold MLA's compressed
 * latent row), else "grouped_query" (the dense MLA graph runs GroupQueryAttention over
 * decompressed heads, so its caches are GQA's). */
const char *md_attention_type(const md_abi *a);

/* The layout a state-service group of part (MD_KEY, MD_CONV or MD_RECURRENT) declares. */
const char *md_group_layout(const md_abi *a, md_kind part);

/* The state cell / alias name of io's kind and layer, "layer.<i>.conv_state", into buf. */
const char *md_state_cell_name(const md_io *io, char *buf, size_t n);

/* prefix followed by name, into buf (n bytes, truncated to fit). */
const char *md_prefixed(const char *prefix, const char *name, char *buf, size_t n);

#endif /* PH_IO_INFERENCE_METADATA_ABI_H */
