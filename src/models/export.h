/* export — an opened Hugging Face checkpoint written as an ONNX Runtime GenAI package.
 *
 * Two layouts (models/registry.h, docs/graph-io.md): dense, the graph ONNX Runtime's CPU EP runs,
 * with GenAI's dense-decoder genai_config.json; and the packed paged layout (abi §8:
 * PagedAttention, VarlenCausalConvWithState, GatedDeltaNet) with state_groups and
 * engine.dynamic_batching, for GenAI's Engine on CUDA or our CPU runtime. The package directory
 * receives model.onnx + model.onnx.data   io/onnx.h (every weight external, 64-byte aligned)
 *   genai_config.json              io/genai_config.h (token ids from the checkpoint when known)
 *   inference_metadata.json        io/inference_metadata.h (the same ABI for onnx-genai's reader)
 *   tokenizer files                copied byte for byte when the checkpoint has them
 * (docs/export.md). Weights are streamed from the checkpoint mapping, transposed and converted
 * on the way; memory stays bounded whatever the model size.
 *
 * dtype is the storage dtype of the projection and embedding weights only. Dense activations,
 * graph inputs/outputs and cache state stay f32 because ONNX Runtime's CPU LinearAttention and
 * CausalConvWithState kernels exist for float only (../shared/spec/ort-1.30.md §10); an f16 or
 * bf16 weight sits behind a Cast to f32. Paged activations take io_dtype: f16 by default for the
 * CUDA target (bf16 on request), f32 for the CPU target. A CUDA package is written as GenAI's
 * builder writes it (abi §8; docs/export.md lists each deliberate difference), with RoPE as
 * plain ONNX ops unless rotary asks for the fused op; tests/test_conformance.c checks it.
 */
#ifndef PH_MODELS_EXPORT_H
#define PH_MODELS_EXPORT_H

#include <stdint.h>

#include "base/diag.h"
#include "graph/graph.h"
#include "io/onnx.h"
#include "pagedhybrid.h"

#define EXPORT_PRODUCER "pagedhybrid"

typedef enum export_layout { EXPORT_LAYOUT_DENSE = 0, EXPORT_LAYOUT_PAGED = 1 } export_layout;
/* Who will run a paged package: ONNX Runtime GenAI on CUDA (its PagedAttention takes f16/bf16
 * and pages of a multiple of 256), or our CPU runtime (any float, pages of 16+). */
typedef enum export_target { EXPORT_TARGET_CUDA = 0, EXPORT_TARGET_CPU = 1 } export_target;
const char *export_layout_name(export_layout l);
const char *export_target_name(export_target t);

/* How RoPE is written (models/qwen35.h model_rotary): the fused com.microsoft op, or plain ONNX
 * ops that every execution provider has kernels for. Both give the same bits. */
typedef enum export_rotary {
  EXPORT_ROTARY_DEFAULT = 0,
  EXPORT_ROTARY_FUSED = 1,
  EXPORT_ROTARY_OPS = 2
} export_rotary;
const char *export_rotary_name(export_rotary r);

/* The dense layout's recurrent op (models/registry.h model_linear_op). */
typedef enum export_linear_op {
  EXPORT_LINEAR_ATTENTION = 0,
  EXPORT_GATED_DELTA_NET = 1
} export_linear_op;
const char *export_linear_op_name(export_linear_op op); /* "linear_attention" | "gated_delta_net" */

typedef struct export_options {
  ph_dtype dtype; /* weight storage f32 | f16 | bf16; PH_DTYPE_INVALID keeps each stored dtype */
  export_layout layout; /* dense (default) or the packed paged layout (abi §8) */
  /* paged only (set on a dense export: PH_ERR_INVALID_ARGUMENT) */
  export_target target;   /* default CUDA */
  ph_dtype io_dtype;      /* activations/KV/conv state; INVALID: CUDA f16 (bf16 only when asked:
                             EXPORT_CUDA_BF16_NOTE), CPU f32 */
  int64_t block_size;     /* tokens per page, power of two >= 16 (CUDA: multiple of 256);
                             0: CUDA 256, CPU 16 */
  int prune_lm_head;      /* logits [B, V] of each sequence's last token */
  int64_t max_batch_size; /* engine.dynamic_batching, 1..256 (default 100, as GenAI's
                             builder writes) */
  double gpu_utilization_factor; /* (0, 1], default 0.6; written unless num_blocks is set */
  int64_t num_blocks;            /* explicit page budget (0: use the factor) */
  int64_t max_scheduled_tokens;  /* default 2048 */
  int config_only;      /* build from config.json alone; write model.onnx (structure only, no
                           model.onnx.data) and genai_config.json: for checking huge models */
  int force;            /* write into a non-empty out_dir, replacing the package's files */
  export_rotary rotary; /* the form of RoPE; DEFAULT: plain ops for the CUDA target, the fused
                           op otherwise (docs/export.md) */
  int32_t state_update_capacity; /* paged: compact state updates C in 0..8 (default 0; abi §8.4):
                                    the capture inputs and the state_update.* outputs, and their
                                    genai_config keys; forced to 0 for a model without linear
                                    layers (DeepSeek) */
  export_linear_op linear_op;    /* dense: LinearAttention (default) or GatedDeltaNet (abi §8.4
                                    linear_attn_op); the paged layout always uses GatedDeltaNet */
  int64_t max_context; /* tokens of rotary cache = genai context_length; 0: the builder's default
                          min(max_position_embeddings, 32768); above max_position_embeddings is
                          refused */

  ph_quant_params quant; /* bits 4|8: linear layers as com.microsoft::MatMulNBits (models/registry.h
                           model_options.quant; docs/export.md "Quantized packages"), either
                           layout; bits 0 (default): none. Checked by the builder
                           (PH_ERR_INVALID_ARGUMENT); quant.skip must outlive the call. */

  onnx_progress progress; /* told while model.onnx.data is written (fn NULL: nothing) */
} export_options;

export_options export_options_default(void);

/* Writes the package of m (opened with weights, or config only with o->config_only) into
 * out_dir (created when missing), in o->layout.
 * Errors, all before the first file is written:
 *   PH_ERR_INVALID_ARGUMENT  out_dir non-empty without force, out_dir is the checkpoint
 *                            directory or not a directory, model opened without weights,
 *                            max_context negative or beyond max_position_embeddings, a paged
 *                            option on a dense export, a block size that is not a power of
 *                            two >= 16 (or, for CUDA, not a multiple of 256), dynamic batching
 *                            values out of range, state_update_capacity outside 0..8 or above
 *                            0 with the dense layout, an unknown linear_op;
 *   PH_ERR_UNSUPPORTED       dtype other than f32/f16/bf16, f32 activations for CUDA, a family
 *                            without a builder, what LATENT PagedAttention cannot honour for a
 *                            paged DeepSeek export (models/mla.h), and whatever the builder
 *                            rejects (DeepSeek Sparse Attention, DeepSeek-V4 attention, ...);
 *   PH_ERR_CONFIG_INVALID / PH_ERR_JSON  a malformed token id in config.json or
 *                            generation_config.json.
 *   PH_ERR_IO                a package file name in out_dir that is a FIFO, device or
 *                            directory.
 * Files are written through base/wfile.h: an I/O error while writing leaves out_dir's earlier
 * files as they were and removes only the temporary files; symlinks there are replaced, never
 * followed. With force, stale tokenizer files are removed once the package is complete. */
ph_status model_export(const ph_model *m, const char *out_dir, const export_options *o, diag *d);

/* The graph a package would hold, built and finalized exactly as model_export builds it (options
 * checked, defaults applied), without writing anything: for tests and tools that examine the
 * export's structure. Holds the placeholder weights of a config_only build, which the graph's
 * initializers point into; free both with export_built_free. */
typedef struct placeholder_weights placeholder_weights;
typedef struct export_built {
  graph *g;
  placeholder_weights *placeholders; /* config_only: the zero mapping behind the initializers */
  ph_dtype io_dtype;                 /* activations (paged: after defaults; dense: f32) */
  int64_t block_size;                /* paged: tokens per page after defaults; dense 0 */
  export_rotary rotary;              /* the RoPE form after defaults: FUSED or OPS */
  int32_t state_update_capacity;     /* as built: 0 for a model without linear layers */
} export_built;
ph_status export_build(const ph_model *m, const export_options *o, export_built *out, diag *d);
void export_built_free(export_built *b); /* NULL-safe; leaves *b zeroed */

/* What a CUDA package in bf16 needs from ONNX Runtime to load (printed by `export --io-dtype
 * bf16`): the kernels whose CUDA bf16 registration the pinned sources do not show. */
#define EXPORT_CUDA_BF16_NOTE                                                                      \
  "bf16 I/O loads on CUDA only if ONNX Runtime registers bfloat16 CUDA kernels for GatedDeltaNet " \
  "and VarlenCausalConvWithState (the pinned sources register float and float16 only); "           \
  "the default f16 needs neither"

/* The tokenizer and generation files a package copies from the checkpoint, NULL-terminated. */
extern const char *const EXPORT_TOKENIZER_FILES[];

#endif /* PH_MODELS_EXPORT_H */
