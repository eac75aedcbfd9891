/* deepseek — the DeepSeek-V2 / V3 graph builder (multi-head latent attention, dense and
 * DeepSeekMoE MLPs), in the dense layout (decomposed MLA on GroupQueryAttention, what ONNX
 * Runtime's CPU EP runs) or the packed paged one (absorbed MLA on PagedAttention
 * kv_cache_layout=LATENT: one latent page cache per layer, slot_mapping, no position_ids;
 * docs/graph-io.md). See deepseek.c for the math; ../shared/spec/model-math.md §5.
 */
#ifndef PH_MODELS_DEEPSEEK_H
#define PH_MODELS_DEEPSEEK_H

#include "graph/graph.h"
#include "io/hf_config.h"
#include "models/registry.h"
#include "models/weights.h"

/* min(max_position_embeddings, 32768): the rows of the rotary caches when none is asked for. */
int64_t deepseek_default_context(const hf_config *c);

/* Builds and finalizes the graph in the layout opt asks for. Reached through registry.h. */
ph_status deepseek_build(const hf_config *c, const model_weights *w, const model_options *opt,
                         graph **out, diag *d);

#endif /* PH_MODELS_DEEPSEEK_H */
