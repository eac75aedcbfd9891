/* export — an opened Hugging Face checkpoint written as an ONNX Runtime GenAI package.
 *
 * Dense layout today (models/qwen35, docs/graph-io.md): the graph ONNX Runtime's CPU EP runs,
 * with GenAI's dense-decoder genai_config.json. The package directory receives
 *   model.onnx + model.onnx.data   io/onnx.h (every weight external, 64-byte aligned)
 *   genai_config.json              io/genai_config.h (token ids from the checkpoint when known)
 *   tokenizer files                copied byte for byte when the checkpoint has them
 * (docs/export.md). Weights are streamed from the checkpoint mapping, transposed and converted
 * on the way; memory stays bounded whatever the model size. The paged layout is issue 5.
 *
 * dtype is the storage dtype of the projection and embedding weights only: activations, graph
 * inputs/outputs and cache state stay f32 because ONNX Runtime's CPU LinearAttention and
 * CausalConvWithState kernels exist for float only (../shared/spec/ort-1.30.md §10); an f16 or
 * bf16 weight sits behind a Cast to f32.
 */
#ifndef PH_MODELS_EXPORT_H
#define PH_MODELS_EXPORT_H

#include <stdint.h>

#include "base/diag.h"
#include "pagedhybrid.h"

#define EXPORT_PRODUCER "pagedhybrid"

typedef struct export_options {
  ph_dtype dtype; /* weight storage f32 | f16 | bf16; PH_DTYPE_INVALID keeps each stored dtype */
  int force;      /* write into a non-empty out_dir, replacing the package's files */
  int64_t max_context; /* tokens of rotary cache = genai context_length; 0: the builder's default
                          min(max_position_embeddings, 32768); above max_position_embeddings is
                          refused */
} export_options;

export_options export_options_default(void);

/* Writes the dense package of m (opened with weights) into out_dir (created when missing).
 * Errors, all before the first file is written:
 *   PH_ERR_INVALID_ARGUMENT  out_dir non-empty without force, out_dir is the checkpoint
 *                            directory or not a directory, model opened without weights,
 *                            max_context negative or beyond max_position_embeddings;
 *   PH_ERR_UNSUPPORTED       dtype other than f32/f16/bf16, a family without a dense builder
 *                            (DeepSeek MLA), and whatever the builder rejects (MoE layers);
 *   PH_ERR_CONFIG_INVALID / PH_ERR_JSON  a malformed token id in config.json or
 *                            generation_config.json.
 * I/O errors while writing remove the partial model files. */
ph_status model_export_dense(const ph_model *m, const char *out_dir, const export_options *o,
                             diag *d);

/* The tokenizer and generation files a package copies from the checkpoint, NULL-terminated. */
extern const char *const EXPORT_TOKENIZER_FILES[];

#endif /* PH_MODELS_EXPORT_H */
