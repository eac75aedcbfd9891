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

/* One row of `inspect --quant-report`: a weight issue 18 would quantize and the RMS relative
 * error ||W - dq(q(W))|| / ||W|| of int8 and int4 at the chosen block (tensor/quant.h). */
typedef struct model_quant_row {
  char name[192];
  int64_t n, k;      /* rows (out; all leading dims of a fused expert tensor) and K (in) */
  double rel8, rel4; /* RMS relative error, int8 and int4 */
} model_quant_row;

/* Quantizes every bound weight whose role weight_role_quantizable accepts (globals, layers,
 * experts, the MTP head; in model_check_finite's order), each as [N = product of all but the
 * last dim, K = last dim], with block `block` (a power of two >= 16), symmetric or not, scales
 * in f32, at 8 and at 4 bits. *rows (malloc'd, caller frees) gets *n_rows rows. Errors: those of
 * quant_quantize (PH_ERR_NON_FINITE names the tensor), PH_ERR_INVALID_ARGUMENT without
 * weights, PH_ERR_NO_MEMORY. */
ph_status model_quant_report(const ph_model *m, int block, int symmetric, model_quant_row **rows,
                             size_t *n_rows, diag *d);

#endif /* PH_MODELS_MODEL_H */
