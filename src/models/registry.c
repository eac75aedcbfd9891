/* registry — the family table. See registry.h. */
#include "models/registry.h"

#include <string.h>

#include "models/deepseek.h"
#include "models/qwen35.h"

static const model_family_def QWEN35 = {"qwen35", qwen35_build, qwen35_default_context};
static const model_family_def DEEPSEEK = {"deepseek", deepseek_build, deepseek_default_context};

model_options model_options_default(void) {
  model_options o;
  memset(&o, 0, sizeof o);
  o.weight_dtype = PH_DTYPE_INVALID;
  o.io_dtype = PH_DTYPE_INVALID;
  return o;
}

int32_t model_state_update_capacity(const hf_config *c, const model_options *o) {
  if (!o) return 0;
  for (int i = 0; i < (int)c->n_layers; i++)
    if (c->layer_kind[i] == PH_LAYER_LINEAR_ATTENTION) return o->state_update_capacity;
  return 0;
}

const model_family_def *model_family_for(const hf_config *c, diag *d) {
  switch (c->family) {
  case FAMILY_QWEN35:
  case FAMILY_QWEN3_NEXT:
    return &QWEN35;
  case FAMILY_DEEPSEEK:
    return &DEEPSEEK;
  default:
    break;
  }
  diag_set(d, PH_ERR_UNSUPPORTED, "no graph builder for %s models (family %s)", c->model_type,
           model_family_name(c->family));
  return NULL;
}

ph_status model_build_graph(const hf_config *c, const model_weights *w, const model_options *o,
                            graph **out, diag *d) {
  *out = NULL;
  const model_family_def *f = model_family_for(c, d);
  if (!f) return PH_ERR_UNSUPPORTED;
  return f->build(c, w, o, out, d);
}

int64_t model_default_context(const hf_config *c) {
  const model_family_def *f = model_family_for(c, NULL);
  return f ? f->default_context(c) : 0;
}
