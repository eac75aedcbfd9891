/* runtime — what the engine serves, opened from a directory: an exported packed paged package
 * (its genai_config.json binds the graph) or a Hugging Face checkpoint (whose paged graph is
 * built here through models/registry.h). The engine asks this module and never src/models, so
 * serving another model family changes nothing in src/engine (docs/architecture.md).
 *
 *   runtime_source src;
 *   runtime_source_open(dir, &src, d);          // reads the config / opens the checkpoint
 *   ... the caller settles its parameters, a package's genai_config giving the defaults ...
 *   runtime_paged_session(&src, &build, &sp, &session, d);
 *   ... serve; the checkpoint's mapping must outlive the session ...
 *   runtime_source_close(&src);
 */
#ifndef PH_RUNTIME_RUNTIME_H
#define PH_RUNTIME_RUNTIME_H

#include <stdint.h>

#include "base/diag.h"
#include "io/genai_config.h"
#include "pagedhybrid.h"
#include "runtime/paged_session.h"

typedef struct runtime_source {
  const char *dir; /* the caller's string: must outlive the source */
  int is_package;  /* dir holds an exported model (model.onnx) */
  /* package: its genai_config.json; checkpoint: the dense config of its model with the bos / eos
   * / pad ids of its config.json and generation_config.json when they read (has_token_ids) */
  genai_config gc;
  int has_token_ids;
  ph_model *model; /* checkpoint: opened with its weights mapped; NULL for a package */
} runtime_source;

/* Opens dir. A package must have the packed paged layout (the dense one is PH_ERR_UNSUPPORTED
 * naming the export flag); its genai_config.json is read and checked alone (io/genai_config.h).
 * A checkpoint is opened as ph_model_open does (errors are its). On failure nothing is held. */
ph_status runtime_source_open(const char *dir, runtime_source *src, diag *d);

/* How a checkpoint's paged graph is built (a package is served as exported and ignores it). */
typedef struct runtime_build {
  int64_t block_size;            /* tokens per KV page */
  int64_t max_context;           /* rotary rows; 0 = the family's default */
  ph_dtype io_dtype;             /* activations, KV pages, conv state */
  int prune_lm_head;             /* logits of each sequence's last row only */
  int32_t state_update_capacity; /* compact state updates in the linear layers (0..8) */
  int output_hidden;     /* the packed graph also outputs hidden_states [N, H] (what an MTP head
                            reads; models/registry.h model_options.output_hidden) */
  int logit_rows;        /* the LM head computes only the rows the session asks for (each
                            sequence's last, every row of a verify; model_options.logit_rows) */
  ph_quant_params quant; /* linear weights quantized when the graph is built (model_options.quant;
                            bits 0: none): resolved by runtime_quant_resolve first; quant.skip must
                            outlive the build. The MTP drafter's graph is quantized the same way */
} runtime_build;

/* Weight quantization at load (docs/quantization.md): checks q's fields and writes them into *out
 * with their defaults resolved (block_size 0: 32, accuracy_level 0: 4; skip is the same pointer).
 * bits 0 (none) takes no other field: each must be 0 (skip NULL), so that a refinement given
 * without bits is not silently dropped. PH_ERR_INVALID_ARGUMENT naming the field, what it holds
 * and what is expected, after `who` ("engine params"): bits not 0, 4 or 8; block_size not a power
 * of two in [16, 256] (the builder's range); asymmetric not 0 or 1; accuracy_level outside 0..4;
 * skip "" or with an empty entry (an empty name would match every weight). */
ph_status runtime_quant_resolve(const ph_quant_params *q, const char *who, ph_quant_params *out,
                                diag *d);

/* 1 when src is a checkpoint whose multi-token-prediction head was bound (mtp.* weights of a
 * dense Qwen3.5 model: docs/mtp.md). */
int runtime_source_has_mtp(const runtime_source *src);

/* The MTP drafter of a checkpoint with a head (runtime/mtp_session.h), built as b says (io dtype,
 * block size, context; its output_hidden and prune flags are not the head's and are ignored).
 * Errors: mtp_session_create's; PH_ERR_UNSUPPORTED for a package. */
typedef struct mtp_session mtp_session;
ph_status runtime_mtp_session(const runtime_source *src, const runtime_build *b, int32_t max_seqs,
                              int64_t max_tokens, int64_t memory_bytes, mtp_session **out, diag *d);

/* The paged session of src: a package's graph bound by its genai_config, or the checkpoint's
 * paged graph (models/registry.h) built as b says. */
ph_status runtime_paged_session(const runtime_source *src, const runtime_build *b,
                                const paged_session_params *p, paged_session **out, diag *d);

void runtime_source_close(runtime_source *src); /* frees what open holds; NULL-safe */

#endif /* PH_RUNTIME_RUNTIME_H */
