/* ph_engine — the public serving API (include/pagedhybrid.h) over the engine (engine.h).
 *
 * The engine's parameter, request and result types are the public structs, so every call here
 * hands its arguments through unchanged. What this layer adds is the sqlite/ph_model style of
 * errors: a per-object error string (an engine that failed to open is still an object that
 * says why), and calls on such an object refused with PH_ERR_INVALID_ARGUMENT. Nothing here
 * decides behaviour.
 */
#include <stdlib.h>
#include <string.h>

#include "cache/block_pool.h"
#include "cache/kv_buffers.h"
#include "cache/state_pool.h"
#include "engine/engine.h"
#include "engine/sampler.h"
#include "pagedhybrid.h"
#include "runtime/paged_session.h"

struct ph_engine {
  engine *e; /* NULL when opening failed */
  diag err;  /* the last failure on this object */
};

ph_engine_params ph_engine_params_default(void) {
  ph_engine_params p;
  memset(&p, 0, sizeof p);
  p.io_dtype = PH_DTYPE_INVALID;
  return p;
}

ph_sampling_params ph_sampling_params_default(void) { return sampling_params_default(); }

ph_status ph_engine_create(const char *dir, const ph_engine_params *params, ph_engine **out) {
  if (!out) return PH_ERR_INVALID_ARGUMENT;
  *out = NULL;
  ph_engine *pe = calloc(1, sizeof *pe);
  if (!pe) return PH_ERR_NO_MEMORY;
  *out = pe;
  if (!dir) return diag_set(&pe->err, PH_ERR_INVALID_ARGUMENT, "ph_engine_create: NULL dir");
  return engine_create(dir, params, &pe->e, &pe->err);
}

void ph_engine_free(ph_engine *pe) {
  if (!pe) return;
  engine_free(pe->e);
  free(pe);
}

const char *ph_engine_error(const ph_engine *pe) { return pe ? pe->err.msg : ""; }

#define NEED_ENGINE(pe)                                                                            \
  do {                                                                                             \
    if (!(pe)) return PH_ERR_INVALID_ARGUMENT;                                                     \
    if (!(pe)->e)                                                                                  \
      return diag_set(&(pe)->err, PH_ERR_INVALID_ARGUMENT, "the engine failed to open");           \
  } while (0)

void ph_engine_set_callback(ph_engine *pe, ph_token_fn fn, void *user) {
  if (!pe || !pe->e) return;
  engine_set_callback(pe->e, fn, user);
}

/* The calls other threads may make take a diag of their own: several may run at once. */

ph_status ph_engine_add_request(ph_engine *pe, const int64_t *prompt, int64_t n_prompt,
                                const ph_sampling_params *sampling, uint64_t *id) {
  NEED_ENGINE(pe);
  diag d;
  diag_clear(&d);
  return engine_add(pe->e, prompt, n_prompt, sampling, id, &d);
}

ph_status ph_engine_remove_request(ph_engine *pe, uint64_t id) {
  NEED_ENGINE(pe);
  diag d;
  diag_clear(&d);
  return engine_remove(pe->e, id, &d);
}

ph_status ph_engine_step(ph_engine *pe, ph_step_info *info) {
  NEED_ENGINE(pe);
  return engine_step(pe->e, info, &pe->err);
}

int ph_engine_busy(ph_engine *pe) { return pe && pe->e ? engine_busy(pe->e) : 0; }

ph_status ph_engine_request_info(ph_engine *pe, uint64_t id, ph_request_info *out) {
  NEED_ENGINE(pe);
  if (!out) return PH_ERR_INVALID_ARGUMENT;
  diag d;
  diag_clear(&d);
  return engine_request_info_get(pe->e, id, out, &d);
}

int64_t ph_engine_read_tokens(ph_engine *pe, uint64_t id, int64_t *out, int64_t max) {
  if (!pe || !pe->e || (!out && max > 0) || max < 0) return -1;
  return engine_poll(pe->e, id, out, max);
}

ph_status ph_engine_release_request(ph_engine *pe, uint64_t id) {
  NEED_ENGINE(pe);
  diag d;
  diag_clear(&d);
  return engine_release(pe->e, id, &d);
}

const int64_t *ph_engine_request_tokens(ph_engine *pe, uint64_t id, int64_t *n) {
  int64_t k = 0;
  const int64_t *t = pe && pe->e ? engine_tokens(pe->e, id, &k) : NULL;
  if (n) *n = t ? k : 0;
  return t;
}

ph_status ph_engine_set_capture_logits(ph_engine *pe, ph_logits_capture mode) {
  NEED_ENGINE(pe);
  return engine_set_capture(pe->e, mode, &pe->err);
}

const float *ph_engine_request_logits(ph_engine *pe, uint64_t id, int64_t *n) {
  int64_t k = 0;
  const float *l = pe && pe->e ? engine_captured(pe->e, id, &k) : NULL;
  if (n) *n = l ? k : 0;
  return l;
}

ph_status ph_engine_get_info(const ph_engine *pe, ph_engine_info *out) {
  if (!pe || !out) return PH_ERR_INVALID_ARGUMENT;
  if (!pe->e) return PH_ERR_INVALID_ARGUMENT; /* const: the object's error is left as it is */
  memset(out, 0, sizeof *out);
  engine *e = pe->e;
  hybrid_cache *c = paged_session_cache(engine_session(e));
  out->params = *engine_params_of(e);
  out->vocab_size = engine_vocab(e);
  out->max_context = engine_max_context(e);
  out->block_size = hybrid_cache_block_size(c);
  out->kv_pages = hybrid_cache_n_blocks(c) - 1; /* without the null page */
  out->cache_bytes = hybrid_cache_bytes(c);
  out->state_bytes_per_request = hybrid_cache_slot_cost(c); /* both banks when double-banked */
  out->kv_bytes_per_token =
      out->block_size > 0 ? kv_buffers_bytes_per_block(hybrid_cache_kv(c)) / out->block_size : 0;
  out->max_draft_tokens = engine_max_drafts(e);
  out->has_mtp = engine_has_mtp(e);
  out->quantized_linears = paged_session_quant(engine_session(e), NULL);
  return PH_OK;
}

ph_status ph_engine_prefix_cache_stats(ph_engine *pe, ph_prefix_cache_stats *out) {
  NEED_ENGINE(pe);
  if (!out) return PH_ERR_INVALID_ARGUMENT;
  engine_prefix_stats(pe->e, out);
  return PH_OK;
}

ph_status ph_engine_prefix_cache_clear(ph_engine *pe) {
  NEED_ENGINE(pe);
  return engine_prefix_clear(pe->e, &pe->err);
}
