/* model — the public ph_model: an opened Hugging Face checkpoint directory (parsed config,
 * mapped safetensors, bound weights). Internal accessors for tools and later modules.
 */
#ifndef PH_MODELS_MODEL_H
#define PH_MODELS_MODEL_H

#include "io/hf_config.h"
#include "io/safetensors.h"
#include "models/weights.h"

const hf_config *model_config(const ph_model *m);
/* NULL when the model was opened without weights. */
const model_weights *model_weights_of(const ph_model *m);
const st_set *model_tensors(const ph_model *m);
/* The weight copies shared by the graphs of every session built from m (graph/prepare.h
 * weight_store: the target's and the MTP head's sessions read one embedding); freed with m.
 * NULL when m was opened without weights. */
struct weight_store *model_weight_store(const ph_model *m);
const char *model_dir(const ph_model *m);

/* Scans every bound weight (globals, then layer by layer, then experts; the tensors the model
 * computes with, not the unused vision/MTP ones) for NaN and infinities into *r (tensor.h).
 * PH_OK when all are finite; PH_ERR_NON_FINITE naming the first bad tensor, its flat index and
 * count (nonfinite_status); PH_ERR_INVALID_ARGUMENT when m was opened without weights. Reads
 * every weight byte once: memory speed. */
ph_status model_check_finite(const ph_model *m, nonfinite_report *r, diag *d);

#endif /* PH_MODELS_MODEL_H */
