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
const char *model_dir(const ph_model *m);

#endif /* PH_MODELS_MODEL_H */
