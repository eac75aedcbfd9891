/* placeholder — weights that exist only as names, shapes and dtypes: for building the graph of
 * a model whose checkpoint is not at hand or too big to map (export --config-only).
 *
 * Owns: the tensor descriptors weights_expected() predicts from a config, bound into a
 * model_weights exactly as weights_bind() binds a real checkpoint, all pointing into one
 * read-only anonymous zero mapping as large as the largest tensor (reserved, never committed:
 * only the pages something reads are touched, and they read as zeros). A graph built from it
 * has the right structure and sizes; its weight bytes are meaningless and must never be written
 * or run (the exporter writes structure only).
 */
#ifndef PH_MODELS_PLACEHOLDER_H
#define PH_MODELS_PLACEHOLDER_H

#include "base/diag.h"
#include "io/hf_config.h"
#include "models/weights.h"

typedef struct placeholder_weights placeholder_weights;

/* Tensors in the config's dtype (hf_config.dtype; F32 when absent), the layout the config
 * implies, fused experts. PH_ERR_NO_MEMORY, or what weights_expected reports. */
ph_status placeholder_weights_create(const hf_config *c, placeholder_weights **out, diag *d);
void placeholder_weights_free(placeholder_weights *p); /* NULL-safe */
const model_weights *placeholder_weights_get(const placeholder_weights *p);

#endif /* PH_MODELS_PLACEHOLDER_H */
