/* ph_engine — the public serving API (include/pagedhybrid.h) over the internal engine
 * (engine.h): parameter and enum translation, and a per-object error string in the
 * sqlite/ph_model style. Nothing here decides behaviour.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "engine/engine.h"
#include "pagedhybrid.h"

struct ph_engine {
  engine *e;
  diag err;
  ph_token_fn fn;
  void *user;
};

_Static_assert(PH_MAX_STOP_TOKENS == SAMPLING_MAX_STOP, "stop token capacity differs");
_Static_assert((int)PH_FINISH_NONE == (int)ENGINE_RUNNING &&
                   (int)PH_FINISH_LENGTH == (int)ENGINE_FINISH_LENGTH &&
                   (int)PH_FINISH_STOP == (int)ENGINE_FINISH_STOP &&
                   (int)PH_FINISH_ABORTED == (int)ENGINE_FINISH_ABORTED &&
                   (int)PH_FINISH_ERROR == (int)ENGINE_FINISH_ERROR,
               "finish reasons differ");

const char *ph_finish_reason_name(ph_finish_reason reason) {
  switch (reason) {
  case PH_FINISH_NONE:
  case PH_FINISH_LENGTH:
  case PH_FINISH_STOP:
  case PH_FINISH_ABORTED:
  case PH_FINISH_ERROR:
    return engine_finish_name((engine_finish)reason);
  }
  return "unknown";
}

ph_engine_params ph_engine_params_default(void) {
  ph_engine_params p;
  memset(&p, 0, sizeof p);
  p.io_dtype = PH_DTYPE_INVALID;
  return p;
}

ph_sampling_params ph_sampling_params_default(void) {
  const sampling_params s = sampling_params_default();
  ph_sampling_params p;
  memset(&p, 0, sizeof p);
  p.temperature = s.temperature;
  p.top_k = s.top_k;
  p.top_p = s.top_p;
  p.min_p = s.min_p;
  p.seed = s.seed;
  p.max_new_tokens = s.max_new_tokens;
  p.ignore_eos = s.ignore_eos;
  return p;
}

static sampling_params to_sampling(const ph_sampling_params *p) {
  sampling_params s = sampling_params_default();
  if (!p) return s;
  s.temperature = p->temperature;
  s.top_k = p->top_k;
  s.top_p = p->top_p;
  s.min_p = p->min_p;
  s.seed = p->seed;
  s.max_new_tokens = p->max_new_tokens;
  /* an out-of-range count is kept so validation refuses it at admission, not clipped here */
  s.n_stop_token_ids = p->n_stop_token_ids;
  const int32_t n = p->n_stop_token_ids < 0                    ? 0
                    : p->n_stop_token_ids > PH_MAX_STOP_TOKENS ? PH_MAX_STOP_TOKENS
                                                               : p->n_stop_token_ids;
  memcpy(s.stop_token_ids, p->stop_token_ids, (size_t)n * sizeof *s.stop_token_ids);
  s.ignore_eos = p->ignore_eos;
  return s;
}

ph_status ph_engine_create(const char *dir, const ph_engine_params *params, ph_engine **out) {
  if (!out) return PH_ERR_INVALID_ARGUMENT;
  *out = NULL;
  ph_engine *pe = calloc(1, sizeof *pe);
  if (!pe) return PH_ERR_NO_MEMORY;
  *out = pe;
  if (!dir) return diag_set(&pe->err, PH_ERR_INVALID_ARGUMENT, "ph_engine_create: NULL dir");
  const ph_engine_params p = params ? *params : ph_engine_params_default();
  engine_params ep = engine_params_default();
  ep.max_batch = p.max_batch_size;
  ep.max_tokens = p.max_scheduled_tokens;
  ep.prefill_chunk = p.prefill_chunk;
  ep.n_blocks = p.num_blocks;
  ep.memory_bytes = p.memory_bytes;
  ep.max_slots = p.max_requests;
  ep.n_threads = p.n_threads;
  ep.block_size = p.block_size;
  ep.max_context = p.max_context;
  ep.io_dtype = p.io_dtype;
  return engine_create(dir, &ep, &pe->e, &pe->err);
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

static void trampoline(void *user, uint64_t id, int64_t token, engine_finish reason) {
  ph_engine *pe = user;
  pe->fn(pe->user, id, token, (ph_finish_reason)reason);
}

void ph_engine_set_callback(ph_engine *pe, ph_token_fn fn, void *user) {
  if (!pe || !pe->e) return;
  pe->fn = fn;
  pe->user = user;
  engine_set_callback(pe->e, fn ? trampoline : NULL, pe);
}

ph_status ph_engine_add_request(ph_engine *pe, const int64_t *prompt, int64_t n_prompt,
                                const ph_sampling_params *sampling, uint64_t *id) {
  NEED_ENGINE(pe);
  const sampling_params s = to_sampling(sampling);
  diag d; /* a per-call diag: several threads may add at once */
  diag_clear(&d);
  return engine_add(pe->e, prompt, n_prompt, &s, id, &d);
}

ph_status ph_engine_remove_request(ph_engine *pe, uint64_t id) {
  NEED_ENGINE(pe);
  diag d;
  diag_clear(&d);
  return engine_remove(pe->e, id, &d);
}

ph_status ph_engine_step(ph_engine *pe, ph_step_info *info) {
  NEED_ENGINE(pe);
  engine_step_info si;
  ph_status st = engine_step(pe->e, &si, &pe->err);
  if (st == PH_OK && info) {
    memset(info, 0, sizeof *info);
    info->step = si.step;
    info->batch_size = si.n_seqs;
    info->n_tokens = si.n_tokens;
    info->n_generated = si.n_sampled;
    info->n_running = si.n_running;
    info->n_waiting = si.n_waiting;
    info->n_preempted = si.n_preempted;
    info->n_finished = si.n_finished;
    info->pages_used = si.pages_used;
    info->pages_total = si.pages_total;
    info->slots_used = si.slots_used;
    info->slots_total = si.slots_total;
    info->state_bytes_moved = si.state_bytes_moved;
    info->seconds = si.seconds;
  }
  return st;
}

int ph_engine_busy(ph_engine *pe) { return pe && pe->e ? engine_busy(pe->e) : 0; }

ph_status ph_engine_request_info(ph_engine *pe, uint64_t id, ph_request_info *out) {
  NEED_ENGINE(pe);
  if (!out) return PH_ERR_INVALID_ARGUMENT;
  engine_request_info ri;
  diag d;
  diag_clear(&d);
  ph_status st = engine_request_info_get(pe->e, id, &ri, &d);
  if (st != PH_OK) return st;
  memset(out, 0, sizeof *out);
  out->finish = (ph_finish_reason)ri.finish;
  out->status = ri.status;
  snprintf(out->message, sizeof out->message, "%s", ri.message);
  out->n_prompt = ri.n_prompt;
  out->n_generated = ri.n_generated;
  out->n_preemptions = ri.n_preemptions;
  out->queue_ms = ri.queue_ms;
  out->time_to_first_token_ms = ri.ttft_ms;
  out->total_ms = ri.total_ms;
  return PH_OK;
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
