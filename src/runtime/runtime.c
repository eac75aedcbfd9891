/* runtime — packages and checkpoints opened for serving. See runtime.h. */
#include "runtime/runtime.h"

#include <string.h>

#include "io/onnx.h"
#include "models/model.h"
#include "models/registry.h"
#include "models/weights.h"
#include "runtime/mtp_session.h"

ph_status runtime_source_open(const char *dir, runtime_source *src, diag *d) {
  memset(src, 0, sizeof *src);
  src->dir = dir;
  if (onnx_is_package(dir)) {
    /* a package: its genai_config.json binds the graph and gives the batching defaults */
    src->is_package = 1;
    FORWARD_IF_ERROR(genai_config_read(dir, &src->gc, d));
    RETURN_ERROR_IF(!src->gc.paged, d, PH_ERR_UNSUPPORTED,
                    "%s has the dense layout; the engine runs packed paged packages (export "
                    "--layout paged)",
                    dir);
    return PH_OK;
  }
  ph_status st = ph_model_open(dir, NULL, &src->model);
  if (st != PH_OK) {
    diag_set(d, st, "%s", src->model ? ph_model_error(src->model) : ph_status_message(st));
    runtime_source_close(src);
    return st;
  }
  src->gc = genai_config_dense(model_config(src->model), 0);
  diag ignored; /* token ids are optional: without them there is no end-of-sequence id */
  src->has_token_ids = genai_config_token_ids(&src->gc, dir, &ignored) == PH_OK;
  return PH_OK;
}

ph_status runtime_paged_session(const runtime_source *src, const runtime_build *b,
                                const paged_session_params *p, paged_session **out, diag *d) {
  *out = NULL;
  if (src->is_package) return paged_session_create_package(src->dir, &src->gc, p, out, d);
  RETURN_ERROR_IF(!src->model, d, PH_ERR_INVALID_ARGUMENT, "runtime: the source is not open");
  model_options o = model_options_default();
  o.block_size = b->block_size;
  o.max_context = b->max_context;
  o.io_dtype = b->io_dtype;
  o.prune_lm_head = b->prune_lm_head;
  o.state_update_capacity = b->state_update_capacity;
  o.output_hidden = b->output_hidden;
  o.logit_rows = b->logit_rows;
  o.quant = b->quant; /* the checkpoint's linear weights quantized as asked (bits 0: none) */
  return paged_session_create_model(src->model, &o, p, out, d);
}

int runtime_source_has_mtp(const runtime_source *src) {
  const model_weights *w = src->model ? model_weights_of(src->model) : NULL;
  return w && w->n_mtp_layers > 0;
}

ph_status runtime_mtp_session(const runtime_source *src, const runtime_build *b, int32_t max_seqs,
                              int64_t max_tokens, int64_t memory_bytes, mtp_session **out,
                              diag *d) {
  *out = NULL;
  RETURN_ERROR_IF(!src->model, d, PH_ERR_UNSUPPORTED,
                  "runtime: an MTP drafter needs a checkpoint (a package has no MTP head)");
  model_options o = model_options_default();
  o.block_size = b->block_size;
  o.max_context = b->max_context;
  o.io_dtype = b->io_dtype;
  o.quant = b->quant; /* the drafter's linear layers as the target's: its drafts are verified, so
                         this changes the acceptance rate at most, never an output */
  return mtp_session_create(src->model, &o, max_seqs, max_tokens, memory_bytes, out, d);
}

ph_status runtime_quant_resolve(const ph_quant_params *q, const char *who, ph_quant_params *out,
                                diag *d) {
  ph_quant_params r = *q;
  if (r.bits == 0) {
    RETURN_ERROR_IF(r.block_size || r.asymmetric || r.accuracy_level || r.skip, d,
                    PH_ERR_INVALID_ARGUMENT,
                    "%s: quant.bits 0 (no quantization) with quant.%s set: give bits 4 or 8, or "
                    "leave the other quant fields 0",
                    who,
                    r.block_size       ? "block_size"
                    : r.asymmetric     ? "asymmetric"
                    : r.accuracy_level ? "accuracy_level"
                                       : "skip");
    *out = r;
    return PH_OK;
  }
  RETURN_ERROR_IF(r.bits != 4 && r.bits != 8, d, PH_ERR_INVALID_ARGUMENT,
                  "%s: quant.bits %d: expected 0 (none), 4 or 8", who, (int)r.bits);
  if (r.block_size == 0) r.block_size = 32;
  RETURN_ERROR_IF(r.block_size < 16 || r.block_size > 256 || (r.block_size & (r.block_size - 1)), d,
                  PH_ERR_INVALID_ARGUMENT,
                  "%s: quant.block_size %d: expected a power of two in [16, 256] (0: 32)", who,
                  (int)r.block_size);
  RETURN_ERROR_IF(r.asymmetric != 0 && r.asymmetric != 1, d, PH_ERR_INVALID_ARGUMENT,
                  "%s: quant.asymmetric %d: expected 0 (symmetric) or 1 (zero points)", who,
                  (int)r.asymmetric);
  if (r.accuracy_level == 0) r.accuracy_level = 4;
  RETURN_ERROR_IF(r.accuracy_level < 1 || r.accuracy_level > 4, d, PH_ERR_INVALID_ARGUMENT,
                  "%s: quant.accuracy_level %d: expected 0..4 (ONNX Runtime's: 1 f32, 4 int8 "
                  "activations; 0: 4)",
                  who, (int)r.accuracy_level);
  if (r.skip) {
    /* entries are separated by commas; none may be empty */
    const char *at = r.skip;
    for (int entry = 1;; entry++) {
      const char *comma = strchr(at, ',');
      const size_t len = comma ? (size_t)(comma - at) : strlen(at);
      RETURN_ERROR_IF(len == 0, d, PH_ERR_INVALID_ARGUMENT,
                      "%s: quant.skip \"%s\": entry %d is empty (an empty name would match "
                      "every weight; NULL skips none)",
                      who, r.skip, entry);
      if (!comma) break;
      at = comma + 1;
    }
  }
  *out = r;
  return PH_OK;
}

void runtime_source_close(runtime_source *src) {
  if (!src) return;
  ph_model_free(src->model);
  src->model = NULL;
}
