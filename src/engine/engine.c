/* engine — continuous batching over the packed paged graph. See engine.h.
 *
 * Locking: `mu` guards the request table, the inbox, and each request's generated tokens and
 * finish state as seen by other threads. The stepping thread holds it only to drain the inbox
 * and to publish a token or a finish; the model runs unlocked. Callbacks run unlocked.
 *
 * Cost per request, whatever else is queued: the table is a hash map from id to record (add,
 * lookup and release are O(1) amortized), removals are queued by id (a finish never searches
 * them), and the scheduler's step touches only running requests and the head of its waiting
 * queue. A queued request holds its record (~450 bytes), its prompt and room for what it may
 * still generate (8 bytes a token, capped by the context) and its block-table storage;
 * a request refused when added holds only its record and message.
 */
#include "engine/engine.h"

#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "engine/drafter.h"
#include "engine/engine_impl.h"
#include "engine/scheduler.h"
#include "io/genai_config.h"
#include "runtime/mtp_session.h"
#include "runtime/runtime.h"

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

const char *ph_precision_name(ph_precision precision) {
  switch (precision) {
  case PH_PRECISION_AUTO:
    return "auto";
  case PH_PRECISION_F32:
    return "f32";
  case PH_PRECISION_BF16:
    return "bf16";
  }
  return "unknown";
}

const char *ph_draft_method_name(ph_draft_method method) {
  switch (method) {
  case PH_DRAFT_NONE:
    return "none";
  case PH_DRAFT_NGRAM:
    return "ngram";
  case PH_DRAFT_MTP:
    return "mtp";
  case PH_DRAFT_REPLAY:
    return "replay";
  }
  return "unknown";
}

const char *ph_finish_reason_name(ph_finish_reason reason) {
  switch (reason) {
  case PH_FINISH_NONE:
    return "running";
  case PH_FINISH_LENGTH:
    return "length";
  case PH_FINISH_STOP:
    return "stop";
  case PH_FINISH_ABORTED:
    return "aborted";
  case PH_FINISH_ERROR:
    return "error";
  }
  return "unknown";
}

/* ---- creation ------------------------------------------------------------------------------ */

/* Fills the defaults a package's genai_config.json gives (or the built-in ones). */
static void resolve_params(ph_engine_params *p, const genai_config *gc) {
  if (p->max_batch_size <= 0)
    p->max_batch_size =
        gc && gc->dynamic_batching.present && gc->dynamic_batching.max_batch_size > 0
            ? (int32_t)(gc->dynamic_batching.max_batch_size < 64
                            ? gc->dynamic_batching.max_batch_size
                            : 64)
            : 16;
  if (p->max_scheduled_tokens <= 0)
    p->max_scheduled_tokens =
        gc && gc->dynamic_batching.present && gc->dynamic_batching.max_scheduled_tokens > 0
            ? gc->dynamic_batching.max_scheduled_tokens
            : 2048;
  if (p->prefill_chunk <= 0)
    p->prefill_chunk = p->max_scheduled_tokens < 256 ? p->max_scheduled_tokens : 256;
  if (p->max_requests <= 0) p->max_requests = p->max_batch_size;
  if (p->num_blocks <= 0 && p->memory_bytes <= 0) {
    if (gc && gc->dynamic_batching.num_blocks > 0)
      p->num_blocks = (int32_t)(gc->dynamic_batching.num_blocks + 1);
    else
      p->memory_bytes = (int64_t)1 << 30;
  }
}

static ph_status check_params(const ph_engine_params *p, diag *d) {
  RETURN_ERROR_IF(p->precision != PH_PRECISION_AUTO && p->precision != PH_PRECISION_F32 &&
                      p->precision != PH_PRECISION_BF16,
                  d, PH_ERR_INVALID_ARGUMENT,
                  "engine params: precision %d: expected PH_PRECISION_AUTO (0), _F32 (1) or "
                  "_BF16 (2)",
                  (int)p->precision);
  RETURN_ERROR_IF(p->state_update_capacity < 0 || p->state_update_capacity > PH_MAX_DRAFT_TOKENS, d,
                  PH_ERR_INVALID_ARGUMENT,
                  "engine params: state_update_capacity %d: must be in [0, %d] (0: none)",
                  (int)p->state_update_capacity, PH_MAX_DRAFT_TOKENS);
  RETURN_ERROR_IF(
      p->max_batch_size < 1 || p->max_scheduled_tokens < 1 || p->prefill_chunk < 1 ||
          p->prefill_chunk > p->max_scheduled_tokens || p->max_requests < p->max_batch_size ||
          p->num_blocks < 0 || p->memory_bytes < 0,
      d, PH_ERR_INVALID_ARGUMENT,
      "engine params: max_batch_size %d, max_scheduled_tokens %lld, prefill_chunk %lld (1.."
      "max_scheduled_tokens), max_requests %d (>= max_batch_size), num_blocks %d, memory_bytes "
      "%lld",
      p->max_batch_size, (long long)p->max_scheduled_tokens, (long long)p->prefill_chunk,
      p->max_requests, p->num_blocks, (long long)p->memory_bytes);
  return PH_OK;
}

static paged_session_params session_params(const ph_engine_params *p) {
  paged_session_params sp = paged_session_params_default();
  sp.n_blocks = p->num_blocks;
  sp.memory_bytes = p->memory_bytes;
  sp.max_slots = p->max_requests;
  sp.max_batch = p->max_batch_size;
  sp.max_tokens = p->max_scheduled_tokens;
  sp.n_threads = p->n_threads;
  sp.state_banks = p->state_update_capacity > 0 ? 2 : 1;
  sp.matmul_bf16 = p->precision == PH_PRECISION_BF16  ? 1
                   : p->precision == PH_PRECISION_F32 ? 0
                                                      : -1;
  return sp;
}

static void set_eos(engine *e, const genai_config *gc) {
  e->n_eos = 0;
  if (!gc) return;
  for (int i = 0; i < gc->n_eos_token_ids && i < GENAI_MAX_EOS; i++)
    e->eos[e->n_eos++] = gc->eos_token_ids[i];
  if (e->n_eos == 0 && gc->eos_token_id >= 0) e->eos[e->n_eos++] = gc->eos_token_id;
}

static ph_status finish_create(engine *e, diag *d) {
  e->vocab = paged_session_vocab(e->s);
  e->max_context = paged_session_max_context(e->s);
  sched_params sp = sched_params_default();
  sp.max_batch = e->p.max_batch_size;
  sp.max_tokens = e->p.max_scheduled_tokens;
  sp.prefill_chunk = e->p.prefill_chunk;
  sp.block_size = (int32_t)paged_session_block_size(e->s);
  FORWARD_IF_ERROR(sched_create(&sp, paged_session_cache(e->s), &e->sch, d));
  e->seqs = calloc((size_t)e->p.max_batch_size, sizeof *e->seqs);
  e->kept = calloc((size_t)e->p.max_batch_size, sizeof *e->kept);
  e->finishing = calloc((size_t)e->p.max_batch_size, sizeof *e->finishing);
  e->scratch_bytes = sampler_scratch_bytes(e->vocab);
  e->scratch = malloc(e->scratch_bytes ? e->scratch_bytes : 1);
  /* a verify needs every row of its chunk: not with a pruned LM head; on a hybrid model its
   * linear layers must capture (state_update_capacity drafts at most) */
  const hybrid_cache *hc = paged_session_cache(e->s);
  if (paged_session_prunes_lm_head(e->s))
    e->spec_max = 0;
  else if (hybrid_cache_has_state(hc))
    e->spec_max = paged_session_state_capacity(e->s);
  else
    e->spec_max = PH_MAX_DRAFT_TOKENS;
  RETURN_ERROR_IF(!e->seqs || !e->kept || !e->finishing || !e->scratch, d, PH_ERR_NO_MEMORY,
                  "engine: out of memory");
  return PH_OK;
}

/* The MTP drafter beside the target: as many sequences as requests may hold state, a step's
 * rows, and pages for as many positions as the target's pool holds (one more attention layer's
 * share of the KV memory, on top of the budget). */
static ph_status open_mtp(engine *e, const runtime_build *rb, diag *d) {
  const hybrid_cache *c = paged_session_cache(e->s);
  const kv_buffers *kv = hybrid_cache_kv((hybrid_cache *)c);
  const int32_t n_full = kv_buffers_geometry(kv).n_full;
  const int64_t bytes =
      n_full > 0 ? kv_buffers_bytes_per_block(kv) / n_full * hybrid_cache_n_blocks(c) : 0;
  FORWARD_IF_ERROR(runtime_mtp_session(&e->src, rb, e->p.max_requests, e->p.max_scheduled_tokens,
                                       bytes, &e->mtp, d));
  const size_t B = (size_t)e->p.max_batch_size;
  e->mtp_H = mtp_session_hidden_size(e->mtp);
  e->mseq = calloc(B, sizeof *e->mseq);
  e->mreq = calloc(B, sizeof *e->mreq);
  e->mhidden = calloc(B * (size_t)e->mtp_H, sizeof *e->mhidden);
  e->mtok = calloc(B, sizeof *e->mtok);
  RETURN_ERROR_IF(!e->mseq || !e->mreq || !e->mhidden || !e->mtok, d, PH_ERR_NO_MEMORY,
                  "engine: out of memory");
  return PH_OK;
}

static engine *engine_alloc(const ph_engine_params *p) {
  engine *e = calloc(1, sizeof *e);
  if (!e) return NULL;
  e->p = p ? *p : ph_engine_params_default();
  e->next_id = 1;
  pthread_mutex_init(&e->mu, NULL);
  return e;
}

ph_status engine_create(const char *dir, const ph_engine_params *p, engine **out, diag *d) {
  *out = NULL;
  engine *e = engine_alloc(p);
  RETURN_ERROR_IF(!e, d, PH_ERR_NO_MEMORY, "engine: out of memory");
  ph_status st = runtime_source_open(dir, &e->src, d);
  if (st != PH_OK) goto fail;
  /* a package's genai_config.json gives the batching defaults; a checkpoint takes ours */
  resolve_params(&e->p, e->src.is_package ? &e->src.gc : NULL);
  if ((st = check_params(&e->p, d)) != PH_OK) goto fail;
  if (e->src.is_package) { /* a package fixes its compact state updates in its graph */
    const int32_t cap = e->src.gc.state_update_capacity;
    if (e->p.state_update_capacity != 0 && e->p.state_update_capacity != cap) {
      st = diag_set(d, PH_ERR_INVALID_ARGUMENT,
                    "engine params: state_update_capacity %d, but the package %s was exported "
                    "with %d (0 takes the package's)",
                    (int)e->p.state_update_capacity, dir, (int)cap);
      goto fail;
    }
    e->p.state_update_capacity = cap;
  }
  /* weights quantized at load: a checkpoint's graph is built so; a package's weights run as
   * exported (quantizing them again is the exporter's job, not a second, lossier pass here) */
  if (e->src.is_package && e->p.quant.bits != 0) {
    st = diag_set(d, PH_ERR_INVALID_ARGUMENT,
                  "engine params: quant.bits %d, but %s is a package: the package's weights run "
                  "as exported; quantize at export (pagedhybrid export --quant)",
                  (int)e->p.quant.bits, dir);
    goto fail;
  }
  if ((st = runtime_quant_resolve(&e->p.quant, "engine params", &e->p.quant, d)) != PH_OK)
    goto fail;
  if (e->p.quant.skip) { /* the caller's string need not outlive this call */
    const size_t n = strlen(e->p.quant.skip) + 1;
    if (!(e->quant_skip = malloc(n))) {
      st = diag_set(d, PH_ERR_NO_MEMORY, "engine: out of memory");
      goto fail;
    }
    memcpy(e->quant_skip, e->p.quant.skip, n);
    e->p.quant.skip = e->quant_skip;
  }
  paged_session_params sp = session_params(&e->p);
  /* a checkpoint with an MTP head drafts with it when the engine may speculate: the target
   * graph then also gives its hidden states */
  const int mtp = e->p.state_update_capacity > 0 && runtime_source_has_mtp(&e->src);
  /* the LM head computes the rows sampling reads — each sequence's last, every row of a verify
   * (logit_rows: bit-identical to the rows of a whole head) — unless every position's row is
   * captured */
  runtime_build rb = {e->p.block_size,
                      e->p.max_context,
                      e->p.io_dtype,
                      0,
                      e->p.state_update_capacity,
                      mtp,
                      e->p.capture_logits != PH_CAPTURE_POSITIONS,
                      e->p.quant};
  if ((st = runtime_paged_session(&e->src, &rb, &sp, &e->s, d)) != PH_OK) goto fail;
  e->p.precision = paged_session_precision(e->s); /* what auto resolved to */
  if (e->src.is_package) /* the quantization the package was exported with */
    paged_session_quant(e->s, &e->p.quant);
  if (mtp && (st = open_mtp(e, &rb, d)) != PH_OK) goto fail;
  if (e->src.is_package || e->src.has_token_ids) set_eos(e, &e->src.gc);
  if ((st = finish_create(e, d)) != PH_OK) goto fail;
  if ((st = engine_set_capture(e, e->p.capture_logits, d)) != PH_OK) goto fail;
  if ((st = engine_prefix_open(e, d)) != PH_OK) goto fail;
  *out = e;
  return PH_OK;
fail:
  engine_free(e);
  return st;
}

static void request_free(request *r) {
  if (!r) return;
  free(r->tokens);
  free(r->logits);
  free(r->message);
  free(r->spec);
  free(r->sr.blocks.ids); /* NULL once the scheduler took it over and released it */
  free(r);
}

/* ---- the request table --------------------------------------------------------------------- */

static uint64_t map_home(const req_map *m, uint64_t id) {
  return (id * 0x9E3779B97F4A7C15ull) & (m->cap - 1);
}

/* The slot holding id, or -1. Counts each probe in *work. */
static int64_t map_index(const req_map *m, uint64_t id, uint64_t *work) {
  if (m->cap == 0) return -1;
  for (uint64_t i = map_home(m, id);; i = (i + 1) & (m->cap - 1)) {
    (*work)++;
    if (!m->slot[i]) return -1;
    if (m->slot[i]->id == id) return (int64_t)i;
  }
}

static void map_place(req_map *m, request *r, uint64_t *work) {
  uint64_t i = map_home(m, r->id);
  for (; m->slot[i]; i = (i + 1) & (m->cap - 1)) (*work)++;
  m->slot[i] = r;
  m->n++;
}

/* Inserts r (its id not present); 0 when out of memory (nothing changed). */
static int map_put(req_map *m, request *r, uint64_t *work) {
  if ((m->n + 1) * 2 > m->cap) {
    const uint64_t cap = m->cap ? m->cap * 2 : 64;
    request **slot = calloc((size_t)cap, sizeof *slot);
    if (!slot) return 0;
    req_map grown = {slot, cap, 0};
    for (uint64_t i = 0; i < m->cap; i++)
      if (m->slot[i]) map_place(&grown, m->slot[i], work);
    *work += m->cap;
    free(m->slot);
    *m = grown;
  }
  map_place(m, r, work);
  return 1;
}

/* Removes the entry at slot i, shifting back the entries whose probe ran through it. */
static void map_remove_at(req_map *m, uint64_t i, uint64_t *work) {
  const uint64_t mask = m->cap - 1;
  m->slot[i] = NULL;
  m->n--;
  for (uint64_t j = (i + 1) & mask; m->slot[j]; j = (j + 1) & mask) {
    (*work)++;
    const uint64_t home = map_home(m, m->slot[j]->id);
    /* the entry at j may move to the hole at i unless its home lies in (i, j] */
    if (((j - home) & mask) >= ((j - i) & mask)) {
      m->slot[i] = m->slot[j];
      m->slot[j] = NULL;
      i = j;
    }
  }
}

static request *find_locked(engine *e, uint64_t id) {
  const int64_t i = map_index(&e->reqs, id, &e->work);
  return i < 0 ? NULL : e->reqs.slot[i];
}

/* ------------------------------------------------------------------------------------------- */

void engine_free(engine *e) {
  if (!e) return;
  sched_free(e->sch);     /* gives every linked request's pages and slot back */
  engine_prefix_close(e); /* before the session: it unhooks the session's page pool */
  for (uint64_t i = 0; i < e->reqs.cap; i++) request_free(e->reqs.slot[i]);
  free(e->reqs.slot); /* every request is in reqs (the inbox only points at some) */
  free(e->inbox);
  free(e->removals);
  free(e->draining);
  free(e->draining_ids);
  free(e->finishing);
  free(e->seqs);
  free(e->kept);
  free(e->scratch);
  free(e->mseq);
  free(e->mreq);
  free(e->mhidden);
  free(e->mtok);
  mtp_session_free(e->mtp);
  paged_session_free(e->s);
  runtime_source_close(&e->src);
  free(e->quant_skip);
  pthread_mutex_destroy(&e->mu);
  free(e);
}

void engine_set_capture_logits(engine *e, int on) {
  e->capture_logits = on ? PH_CAPTURE_SAMPLED : PH_CAPTURE_NONE;
}

ph_status engine_set_capture(engine *e, ph_logits_capture mode, diag *d) {
  RETURN_ERROR_IF(
      mode != PH_CAPTURE_NONE && mode != PH_CAPTURE_SAMPLED && mode != PH_CAPTURE_POSITIONS, d,
      PH_ERR_INVALID_ARGUMENT, "logits capture mode %d: expected 0, 1 or 2", (int)mode);
  RETURN_ERROR_IF(mode == PH_CAPTURE_POSITIONS && !paged_session_all_rows(e->s), d,
                  PH_ERR_UNSUPPORTED,
                  "%s prunes its LM head to the rows sampling reads; capturing every "
                  "position's logits needs the full logits%s",
                  e->src.is_package ? "the package" : "the graph",
                  e->src.is_package ? "" : " (create the engine with capture_logits set)");
  e->capture_logits = mode;
  return PH_OK;
}

void engine_set_callback(engine *e, ph_token_fn fn, void *user) {
  e->cb = fn;
  e->cb_user = user;
}

/* ---- requests ------------------------------------------------------------------------------ */

static int grow(void **arr, int64_t *cap, int64_t need, size_t elem) {
  if (need <= *cap) return 1;
  int64_t n = *cap ? *cap * 2 : 16;
  while (n < need) n *= 2;
  void *p = realloc(*arr, (size_t)n * elem);
  if (!p) return 0;
  *arr = p;
  *cap = n;
  return 1;
}

/* The most tokens a request's KV and state ever hold: the last generated token is never run,
 * and positions stop at the context. For validated sampling (max_new >= 1) and
 * n_prompt < max_context; no overflow for any max_new. */
static int64_t max_total_of(const engine *e, int64_t n_prompt, const sampling_params *sp) {
  return sp->max_new_tokens - 1 < e->max_context - n_prompt ? n_prompt + sp->max_new_tokens - 1
                                                            : e->max_context;
}

/* The checks that need the model, made when the request is added (so that a request that will
 * be refused costs no prompt copy), in this order: empty prompt, a prompt that fills the
 * context, a token outside the vocabulary, sampling parameters, pages. PH_OK or the refusal. */
static ph_status refusal_of(const engine *e, uint64_t id, const int64_t *prompt, int64_t n_prompt,
                            const sampling_params *sp, diag *d) {
  RETURN_ERROR_IF(n_prompt < 1, d, PH_ERR_INVALID_ARGUMENT, "request %llu: the prompt is empty",
                  (unsigned long long)id);
  RETURN_ERROR_IF(n_prompt >= e->max_context, d, PH_ERR_LIMIT,
                  "request %llu: a prompt of %lld tokens leaves no room in the context of %lld",
                  (unsigned long long)id, (long long)n_prompt, (long long)e->max_context);
  for (int64_t j = 0; j < n_prompt; j++)
    RETURN_ERROR_IF(prompt[j] < 0 || prompt[j] >= e->vocab, d, PH_ERR_INVALID_ARGUMENT,
                    "request %llu: prompt token %lld at %lld is outside the vocabulary [0, %lld)",
                    (unsigned long long)id, (long long)prompt[j], (long long)j,
                    (long long)e->vocab);
  FORWARD_IF_ERROR(sampling_params_validate(sp, e->vocab, d));
  const ph_speculative_params *spec = &sp->speculative;
  if (spec->method != PH_DRAFT_NONE) {
    const int no_capacity = hybrid_cache_has_state(paged_session_cache(e->s)) &&
                            paged_session_state_capacity(e->s) == 0;
    RETURN_ERROR_IF(no_capacity, d, PH_ERR_UNSUPPORTED,
                    "request %llu: speculative decoding on a model with linear-attention layers "
                    "needs compact state updates: create the engine with state_update_capacity "
                    "> 0 (run --state-update-capacity N) or export the package with "
                    "--state-update-capacity N",
                    (unsigned long long)id);
    RETURN_ERROR_IF(paged_session_prunes_lm_head(e->s), d, PH_ERR_UNSUPPORTED,
                    "request %llu: speculative decoding verifies every drafted row, and this "
                    "model's graph prunes its LM head to one row per sequence (export without "
                    "prune_lm_head)",
                    (unsigned long long)id);
    const int32_t k = speculative_params_resolved(spec).num_draft_tokens;
    RETURN_ERROR_IF(k > e->spec_max, d, PH_ERR_INVALID_ARGUMENT,
                    "request %llu: speculative.num_draft_tokens = %d is more than the model's "
                    "state_update_capacity %d",
                    (unsigned long long)id, (int)k, (int)e->spec_max);
    RETURN_ERROR_IF(spec->method == PH_DRAFT_MTP && !e->mtp, d, PH_ERR_UNSUPPORTED,
                    "request %llu: speculative method mtp: this model has no MTP head (a Qwen3.5 "
                    "checkpoint with mtp.* weights)",
                    (unsigned long long)id);
  }
  return sched_check_fits(e->sch, (int64_t)id, max_total_of(e, n_prompt, sp), d);
}

ph_status engine_add(engine *e, const int64_t *prompt, int64_t n_prompt,
                     const ph_sampling_params *sp, uint64_t *out_id, diag *d) {
  RETURN_ERROR_IF(!e || (!prompt && n_prompt > 0) || n_prompt < 0 || !out_id, d,
                  PH_ERR_INVALID_ARGUMENT, "engine_add: NULL argument or negative length");
  request *r = calloc(1, sizeof *r);
  RETURN_ERROR_IF(!r, d, PH_ERR_NO_MEMORY, "engine_add: out of memory");
  r->sp = sp ? *sp : sampling_params_default();
  /* the caller's replay tokens are copied below, never kept */
  const int64_t *replay_in = r->sp.speculative.replay_tokens;
  r->sp.speculative.replay_tokens = NULL;
  r->n_prompt = n_prompt;
  r->sr.slot = -1;
  r->t_add = now_s();
  /* the id first: refusal messages name it (two adds racing may queue in either order) */
  pthread_mutex_lock(&e->mu);
  r->id = e->next_id++;
  pthread_mutex_unlock(&e->mu);
  diag why;
  diag_clear(&why);
  sampling_params checked = r->sp;
  checked.speculative.replay_tokens = replay_in;
  r->refusal = refusal_of(e, r->id, prompt, n_prompt, &checked, &why);
  int ok = 1;
  int64_t cap = 0;
  if (r->refusal != PH_OK) {
    r->message = malloc(strlen(why.msg) + 1);
    ok = r->message != NULL;
    if (ok) memcpy(r->message, why.msg, strlen(why.msg) + 1);
  } else {
    /* storage for what it can ever hold, allocated here so that a step never allocates: the
     * prompt, then at most max_new tokens, and never more than the context + 1 (the last
     * generated token is never run) */
    const int64_t room = e->max_context + 1 - n_prompt;
    cap = n_prompt + (r->sp.max_new_tokens < room ? r->sp.max_new_tokens : room);
    r->capacity = cap;
    r->tokens = malloc((size_t)cap * sizeof *r->tokens);
    if (r->tokens) memcpy(r->tokens, prompt, (size_t)n_prompt * sizeof *prompt);
    r->capture = e->capture_logits;
    const int64_t rows = r->capture == PH_CAPTURE_POSITIONS ? cap - 1
                         : r->capture == PH_CAPTURE_SAMPLED ? cap - n_prompt
                                                            : 0;
    if (rows > 0) r->logits = malloc((size_t)rows * (size_t)e->vocab * sizeof *r->logits);
    /* the block table's storage for everything it can ever hold, so admission inside a step
     * does not allocate (the scheduler takes it over) */
    const int32_t n_ids = block_table_blocks_for(max_total_of(e, n_prompt, &r->sp),
                                                 (int32_t)paged_session_block_size(e->s));
    r->sr.blocks.ids = malloc((size_t)(n_ids > 0 ? n_ids : 1) * sizeof *r->sr.blocks.ids);
    r->sr.blocks.capacity = n_ids > 0 ? n_ids : 1;
    ok = r->tokens && r->sr.blocks.ids && (rows <= 0 || r->logits);
    r->sp.speculative = speculative_params_resolved(&r->sp.speculative);
    if (ok && r->sp.speculative.method != PH_DRAFT_NONE) {
      const int64_t n =
          r->sp.speculative.method == PH_DRAFT_REPLAY ? r->sp.speculative.n_replay_tokens : 0;
      r->spec = malloc(sizeof *r->spec + (size_t)n * sizeof *r->spec->replay);
      ok = r->spec != NULL;
      if (ok) {
        r->spec->mtp_handle = -1;
        r->spec->n_mtp_drafts = 0;
        r->spec->mtp_lost = 0;
        if (n) memcpy(r->spec->replay, replay_in, (size_t)n * sizeof *r->spec->replay);
        r->sp.speculative.replay_tokens = n ? r->spec->replay : NULL;
      }
    }
  }
  if (ok) {
    pthread_mutex_lock(&e->mu);
    ok = grow((void **)&e->inbox, &e->cap_inbox, e->n_inbox + 1, sizeof *e->inbox) &&
         map_put(&e->reqs, r, &e->work);
    if (ok) {
      e->inbox[e->n_inbox++] = r;
      *out_id = r->id;
    }
    pthread_mutex_unlock(&e->mu);
  }
  if (!ok) {
    request_free(r);
    return diag_set(d, PH_ERR_NO_MEMORY, "engine_add: out of memory for %lld tokens",
                    (long long)cap);
  }
  return PH_OK;
}

ph_status engine_remove(engine *e, uint64_t id, diag *d) {
  pthread_mutex_lock(&e->mu);
  request *r = find_locked(e, id);
  int ok = 1;
  if (r && r->finish == PH_FINISH_NONE && !r->remove_pending) {
    ok = grow((void **)&e->removals, &e->cap_removals, e->n_removals + 1, sizeof *e->removals);
    if (ok) {
      r->remove_pending = 1;
      e->removals[e->n_removals++] = id;
    }
  }
  pthread_mutex_unlock(&e->mu);
  RETURN_ERROR_IF(!r, d, PH_ERR_NOT_FOUND, "request %llu is not known", (unsigned long long)id);
  RETURN_ERROR_IF(!ok, d, PH_ERR_NO_MEMORY, "engine_remove: out of memory");
  return PH_OK;
}

/* Publishes a finish (stepping thread). The scheduler lets go of the request first. A removal
 * still queued for it is skipped when drained (it is looked up by id then). */
static void finish(engine *e, request *r, ph_finish_reason why, ph_status st) {
  diag d;
  pthread_mutex_lock(&e->mu); /* the scheduler writes fields other threads read (preemptions) */
  if (r->admitted) {
    sched_finish(e->sch, &r->sr, &d); /* only refuses while a binding is active: never here */
    e->n_live--;
  }
  if (r->spec && r->spec->mtp_handle >= 0) {
    mtp_session_close(e->mtp, r->spec->mtp_handle);
    r->spec->mtp_handle = -1;
  }
  r->finish = why;
  r->status = st;
  r->t_done = now_s();
  pthread_mutex_unlock(&e->mu);
  if (e->cb) e->cb(e->cb_user, r->id, -1, why);
}

/* Joins the scheduler, or finishes with the refusal engine_add decided. */
static void admit(engine *e, request *r) {
  if (r->refusal != PH_OK) {
    finish(e, r, PH_FINISH_ERROR, r->refusal);
    return;
  }
  const int64_t max_total = max_total_of(e, r->n_prompt, &r->sp);
  const block_table storage = r->sr.blocks; /* kept across the re-initialisation */
  sched_req_init(&r->sr, (int64_t)r->id, r->n_prompt, max_total - r->n_prompt);
  r->sr.blocks = storage;
  diag d;
  pthread_mutex_lock(&e->mu);
  /* cannot fail: refusal_of checked the pages and the storage is there */
  const ph_status st = sched_add(e->sch, &r->sr, &d);
  if (st == PH_OK) {
    r->admitted = 1;
    e->n_live++;
  }
  pthread_mutex_unlock(&e->mu);
  if (st != PH_OK) finish(e, r, PH_FINISH_ERROR, st);
}

/* ---- the step ------------------------------------------------------------------------------ */

static int is_stop(const engine *e, const request *r, int64_t tok) {
  for (int32_t i = 0; i < r->sp.n_stop_token_ids; i++)
    if (r->sp.stop_token_ids[i] == tok) return 1;
  if (!r->sp.ignore_eos)
    for (int i = 0; i < e->n_eos; i++)
      if (e->eos[i] == tok) return 1;
  return 0;
}

/* Samples request r's next token from its last logits row and publishes it; returns the finish
 * it causes (PH_FINISH_NONE: none; the caller finishes it once the batch is done with). A row
 * holding NaN or an infinity is no distribution: the request ends with PH_ERR_NON_FINITE and
 * nothing is published (the others in the batch go on). */
static ph_finish_reason emit(engine *e, request *r, const float *row) {
  const int64_t t = r->n_generated;
  const int64_t bad = sampler_first_nonfinite(row, e->vocab);
  if (bad >= 0) {
    r->bad_step = e->steps;
    r->bad_index = bad;
    r->bad_value = row[bad];
    return PH_FINISH_ERROR;
  }
  const int64_t tok = sampler_sample(row, e->vocab, &r->sp, t, e->scratch, e->scratch_bytes);
  if (r->logits && r->capture == PH_CAPTURE_SAMPLED)
    memcpy(r->logits + t * e->vocab, row, (size_t)e->vocab * sizeof *row);
  pthread_mutex_lock(&e->mu);
  r->tokens[r->n_prompt + t] = tok;
  r->n_generated = t + 1;
  if (t == 0) r->t_first = now_s();
  pthread_mutex_unlock(&e->mu);
  if (e->cb) e->cb(e->cb_user, r->id, tok, PH_FINISH_NONE);
  if (is_stop(e, r, tok)) return PH_FINISH_STOP;
  if (r->n_generated >= r->sp.max_new_tokens || r->n_prompt + r->n_generated > e->max_context)
    return PH_FINISH_LENGTH;
  r->sr.n_total++; /* the new token is known; the scheduler runs it next */
  return PH_FINISH_NONE;
}

/* PH_CAPTURE_POSITIONS: every row this step ran and kept (a verify's rejected drafts are not
 * positions of the request), at its position (a recomputed prefix after a preemption writes the
 * same bytes again). */
static void capture_positions(engine *e, const sched_batch *b) {
  for (int32_t k = 0; k < b->n_entries; k++) {
    const sched_entry *en = &b->entries[k];
    request *r = (request *)((char *)en->req - offsetof(request, sr));
    if (!r->logits || r->capture != PH_CAPTURE_POSITIONS) continue;
    for (int64_t j = 0; j < e->kept[k] && en->start + j < r->capacity - 1; j++) {
      const float *row = paged_session_token_logits(e->s, k, j);
      if (row) /* never NULL: engine_set_capture refuses a pruned LM head */
        memcpy(r->logits + (en->start + j) * e->vocab, row, (size_t)e->vocab * sizeof *row);
    }
  }
}

/* The drafts request r asks for a step: its num_draft_tokens, within the model's bound (which
 * engine_add's checks already hold it to). */
static int32_t drafts_wanted(const engine *e, const request *r) {
  const int32_t k = r->sp.speculative.num_draft_tokens;
  return k < e->spec_max ? k : e->spec_max;
}

/* Speculative drafts for every running request whose next chunk is its decode token: written
 * after its known tokens (r->tokens[n_total, n_total + n), where the tokens it may generate
 * go; nothing there is published until sampled) and offered to the scheduler as sr.n_draft.
 * At most num_draft_tokens, the model's bound, the room left in the token buffer and the
 * context; the scheduler trims them further to max_total (one fewer than the tokens the request
 * may still generate: a verify of n drafts emits up to n + 1). */
static void propose_drafts(engine *e) {
  for (sched_req *q = sched_running_first(e->sch); q; q = q->next) {
    request *r = (request *)((char *)q - offsetof(request, sr));
    q->n_draft = 0;
    const ph_speculative_params *sp = &r->sp.speculative;
    if (sp->method == PH_DRAFT_NONE || q->n_computed + 1 != q->n_total) continue;
    int64_t k = drafts_wanted(e, r);
    const int64_t n_total = q->n_total;
    if (k > r->capacity - n_total) k = r->capacity - n_total;
    if (k > e->max_context - n_total) k = e->max_context - n_total;
    if (k <= 0) continue;
    int64_t *out = r->tokens + n_total;
    int32_t n = 0;
    if (sp->method == PH_DRAFT_NGRAM)
      n = draft_ngram(r->tokens, n_total, sp->ngram_min, sp->ngram_max, (int32_t)k, out);
    else if (sp->method == PH_DRAFT_REPLAY)
      n = draft_replay(sp->replay_tokens, sp->n_replay_tokens, r->n_generated, (int32_t)k, out);
    else if (sp->method == PH_DRAFT_MTP) { /* made after the last step (mtp_draft) */
      n = r->spec->n_mtp_drafts < k ? r->spec->n_mtp_drafts : (int32_t)k;
      memcpy(out, r->spec->mtp_drafts, (size_t)n * sizeof *out);
    }
    q->n_draft = n;
  }
}

/* Samples a verify chunk of request r (entry k of the batch): row j gives generated token
 * n_generated + j; the draft at j is kept while it equals that token, so the tokens published
 * are exactly those one-token steps would have sampled (the same rows, bit for bit, and the
 * same draws at the same (seed, index)). Returns the finish, *kept the rows whose KV and state
 * stay (the decode token and the accepted drafts). */
static ph_finish_reason verify(engine *e, request *r, const sched_entry *en, int32_t k,
                               int64_t *kept, int64_t *n_emitted) {
  ph_finish_reason f = PH_FINISH_NONE;
  int64_t j = 0;
  for (;; j++) {
    /* read the draft before emit writes the sampled token over it */
    const int64_t draft = j < en->n_draft ? r->tokens[en->start + 1 + j] : -1;
    f = emit(e, r, paged_session_token_logits(e->s, k, j));
    (*n_emitted) += f != PH_FINISH_ERROR;
    if (f != PH_FINISH_NONE || j == en->n_draft) break;
    if (r->tokens[r->n_prompt + r->n_generated - 1] != draft) break;
  }
  *kept = j + 1;
  r->n_drafted += en->n_draft;
  r->n_accepted += j; /* the drafts before row j all matched */
  return f;
}

/* ---- the MTP drafter ------------------------------------------------------------------------ */

/* After a step, for every live request drafting with the MTP head (docs/mtp.md, the flow of
 * runtime/mtp_session.h): catch the head up on the positions the step kept — row j reads the
 * target's hidden state at position start + j and the token after it — in one packed run; then,
 * for the requests whose next chunk is their decode token, draft 1 is the last row's argmax and
 * each further draft one chained one-token run (the previous draft, the head's own hidden row).
 * Drafts only change speed: a request whose head cannot keep up (no pages, a gap in its
 * positions) stops drafting and runs on. */
static ph_status mtp_draft(engine *e, const sched_batch *b, diag *d) {
  int32_t B = 0;
  for (int32_t k = 0; k < b->n_entries; k++) {
    const sched_entry *en = &b->entries[k];
    request *r = (request *)((char *)en->req - offsetof(request, sr));
    if (r->sp.speculative.method != PH_DRAFT_MTP) continue;
    spec_state *ss = r->spec;
    ss->n_mtp_drafts = 0;
    if (ss->mtp_lost || r->finish_next != PH_FINISH_NONE || r->sr.state != SCHED_RUNNING) continue;
    diag ignored; /* all handles open: this request drafts no more, nothing else changes */
    if (ss->mtp_handle < 0 &&
        (en->start != 0 || mtp_session_open(e->mtp, &ss->mtp_handle, &ignored))) {
      ss->mtp_handle = -1;
      ss->mtp_lost = 1;
      continue;
    }
    if (en->start > mtp_session_computed(e->mtp, ss->mtp_handle)) {
      ss->mtp_lost = 1;
      continue;
    }
    const float *hidden = paged_session_hidden(e->s, k, 0, NULL);
    RETURN_ERROR_IF(!hidden, d, PH_ERR_INTERNAL, "engine: the target graph has no hidden_states");
    /* the kept positions' next tokens are all known: the last one was just sampled */
    e->mseq[B] =
        (mtp_seq){ss->mtp_handle, en->start, e->kept[k], r->tokens + en->start + 1, hidden};
    e->mreq[B++] = r;
  }
  if (B == 0) return PH_OK;
  diag local;
  ph_status st = mtp_session_run(e->mtp, e->mseq, B, &local);
  if (st == PH_ERR_LIMIT) { /* no pages or context for the head: drafting stops, decoding not */
    for (int32_t i = 0; i < B; i++) e->mreq[i]->spec->mtp_lost = 1;
    return PH_OK;
  }
  if (st != PH_OK) {
    diag_copy(d, &local);
    return st;
  }
  /* draft 1 of each decode-ready request; the chain continues from its row */
  const int64_t H = e->mtp_H, V = e->vocab;
  int32_t C = 0, most = 0;
  for (int32_t i = 0; i < B; i++) {
    request *r = e->mreq[i];
    const mtp_seq q = e->mseq[i];
    if (r->sr.n_computed + 1 != r->sr.n_total) continue; /* a prompt chunk: no drafts yet */
    const float *row = mtp_session_logits(e->mtp, i, q.n - 1);
    const float *h = mtp_session_hidden(e->mtp, i, q.n - 1);
    if (!row || !h) continue;
    r->spec->mtp_drafts[0] = sampler_argmax(row, V);
    r->spec->n_mtp_drafts = 1;
    const int32_t want = drafts_wanted(e, r);
    if (want > most) most = want;
    memcpy(e->mhidden + (size_t)C * (size_t)H, h, (size_t)H * sizeof *h);
    e->mtok[C] = r->spec->mtp_drafts[0];
    e->mseq[C] = (mtp_seq){q.handle, q.past + q.n, 1, &e->mtok[C], e->mhidden + (size_t)C * H};
    e->mreq[C++] = r;
  }
  for (int32_t step = 1; step < most && C > 0; step++) {
    int32_t n = 0; /* the chains still short of their count and inside the context */
    for (int32_t i = 0; i < C; i++) {
      request *r = e->mreq[i];
      const int32_t want = drafts_wanted(e, r);
      if (r->spec->n_mtp_drafts >= want || e->mseq[i].past + 1 >= e->max_context) continue;
      if (n != i) {
        e->mseq[n] = e->mseq[i];
        e->mreq[n] = r;
        e->mtok[n] = e->mtok[i];
        memmove(e->mhidden + (size_t)n * H, e->mhidden + (size_t)i * H, (size_t)H * sizeof(float));
        e->mseq[n].tokens = &e->mtok[n];
        e->mseq[n].hidden = e->mhidden + (size_t)n * H;
      }
      n++;
    }
    C = n;
    if (C == 0) break;
    st = mtp_session_run(e->mtp, e->mseq, C, &local);
    if (st == PH_ERR_LIMIT) return PH_OK; /* the drafts made so far stand */
    if (st != PH_OK) {
      diag_copy(d, &local);
      return st;
    }
    for (int32_t i = 0; i < C; i++) {
      request *r = e->mreq[i];
      const float *row = mtp_session_logits(e->mtp, i, 0), *h = mtp_session_hidden(e->mtp, i, 0);
      if (!row || !h) continue;
      const int64_t t = sampler_argmax(row, V);
      r->spec->mtp_drafts[r->spec->n_mtp_drafts++] = t;
      e->mtok[i] = t;
      memcpy(e->mhidden + (size_t)i * H, h, (size_t)H * sizeof *h);
      e->mseq[i].past++;
    }
  }
  return PH_OK;
}

ph_status engine_step(engine *e, ph_step_info *info, diag *d) {
  const double t0 = now_s();
  ph_step_info si;
  memset(&si, 0, sizeof si);
  e->n_admitted = 0;
  /* 1. drain the inbox, then the removals (a request added and removed before this step
   * joins and is aborted at once) */
  pthread_mutex_lock(&e->mu);
  const int64_t n_fresh = e->n_inbox;
  int ok = grow((void **)&e->draining, &e->cap_draining, n_fresh, sizeof *e->draining);
  if (ok && n_fresh) {
    memcpy(e->draining, e->inbox, (size_t)n_fresh * sizeof *e->draining);
    e->n_inbox = 0;
  }
  pthread_mutex_unlock(&e->mu);
  RETURN_ERROR_IF(!ok, d, PH_ERR_NO_MEMORY, "engine_step: out of memory");
  for (int64_t i = 0; i < n_fresh; i++) {
    admit(e, e->draining[i]);
    si.n_finished += e->draining[i]->finish != PH_FINISH_NONE; /* refused: finished here */
  }
  /* removals queued up to now, including any made while admitting; an id finished (and maybe
   * released) since it was queued is skipped */
  pthread_mutex_lock(&e->mu);
  const int64_t n_gone = e->n_removals;
  ok = grow((void **)&e->draining_ids, &e->cap_draining_ids, n_gone, sizeof *e->draining_ids);
  if (ok && n_gone) {
    memcpy(e->draining_ids, e->removals, (size_t)n_gone * sizeof *e->draining_ids);
    e->n_removals = 0;
  }
  pthread_mutex_unlock(&e->mu);
  RETURN_ERROR_IF(!ok, d, PH_ERR_NO_MEMORY, "engine_step: out of memory");
  for (int64_t i = 0; i < n_gone; i++) {
    pthread_mutex_lock(&e->mu);
    request *r = find_locked(e, e->draining_ids[i]);
    pthread_mutex_unlock(&e->mu);
    if (r && r->finish == PH_FINISH_NONE) {
      finish(e, r, PH_FINISH_ABORTED, PH_OK);
      si.n_finished++;
    }
  }
  /* 2. schedule */
  const hybrid_cache *cache = paged_session_cache(e->s);
  const uint64_t moved0 = hybrid_cache_bytes_moved(cache);
  sched_batch b;
  if (e->spec_max > 0) propose_drafts(e);
  /* under the lock: the scheduler updates requests' preemption counts, which
   * engine_request_info_get reads from other threads (it allocates nothing; microseconds) */
  pthread_mutex_lock(&e->mu);
  ph_status sst = sched_schedule(e->sch, &b, d);
  pthread_mutex_unlock(&e->mu);
  FORWARD_IF_ERROR(sst);
  si.n_preempted = b.n_preempted;
  e->n_admitted = si.n_admitted = b.n_admitted;
  if (b.n_entries > 0) {
    /* 3. run */
    const double t_now = now_s();
    pthread_mutex_lock(&e->mu); /* t_sched is read by engine_request_info_get */
    for (int32_t k = 0; k < b.n_entries; k++) {
      const sched_entry *en = &b.entries[k];
      request *r = (request *)((char *)en->req - offsetof(request, sr));
      if (r->t_sched == 0) r->t_sched = t_now;
      e->seqs[k] = (paged_seq){en->req->slot,         &en->req->blocks, en->start,
                               r->tokens + en->start, en->n_tokens,     (int32_t)en->n_draft};
    }
    pthread_mutex_unlock(&e->mu);
    FORWARD_IF_ERROR(paged_session_run(e->s, e->seqs, b.n_entries, d));
    e->steps++;
    /* 4. sample and commit tokens; finishes wait until the batch is no longer read */
    int32_t n_done = 0;
    for (int32_t k = 0; k < b.n_entries; k++) {
      const sched_entry *en = &b.entries[k];
      e->kept[k] = en->n_tokens;
      if (!en->sample) continue;
      request *r = (request *)((char *)en->req - offsetof(request, sr));
      ph_finish_reason f;
      if (en->n_draft > 0) {
        RETURN_ERROR_IF(!paged_session_token_logits(e->s, k, 0), d, PH_ERR_INTERNAL,
                        "engine: the verify of request %llu has no logits for its first row",
                        (unsigned long long)r->id);
        f = verify(e, r, en, k, &e->kept[k], &si.n_generated);
        si.n_drafted += en->n_draft;
        si.n_accepted += e->kept[k] - 1;
      } else {
        f = emit(e, r, paged_session_last_logits(e->s, k));
        si.n_generated += f != PH_FINISH_ERROR;
      }
      if (f != PH_FINISH_NONE) {
        e->finishing[n_done] = r;
        r->finish_next = f;
        n_done++;
      }
    }
    /* one commit: every verify's state after its kept tokens is published (replayed into the
     * inactive bank unless all were kept; ordinary sequences were updated in place), and every
     * KV length advances by what was kept */
    FORWARD_IF_ERROR(paged_session_commit_all(e->s, e->kept, d));
    FORWARD_IF_ERROR(sched_commit_kept(e->sch, &b, e->kept, d));
    FORWARD_IF_ERROR(engine_prefix_after_step(e, &b, d));
    capture_positions(e, &b);
    if (e->mtp) FORWARD_IF_ERROR(mtp_draft(e, &b, d));
    si.batch_size = b.n_entries;
    si.n_tokens = b.n_tokens;
    for (int32_t k = 0; k < n_done; k++) {
      request *r = e->finishing[k];
      finish(e, r, r->finish_next, r->finish_next == PH_FINISH_ERROR ? PH_ERR_NON_FINITE : PH_OK);
    }
    si.n_finished += n_done;
  }
  si.step = e->steps;
  si.n_running = sched_n_running(e->sch);
  si.n_waiting = sched_n_waiting(e->sch);
  si.pages_total = hybrid_cache_n_blocks(cache) - 1;
  si.pages_used = hybrid_cache_pages_used(cache);
  si.slots_total = hybrid_cache_max_slots(cache);
  si.slots_used = hybrid_cache_slots_used(cache);
  si.state_bytes_moved = hybrid_cache_bytes_moved(cache) - moved0;
  if (e->pc) {
    pthread_mutex_lock(&e->mu);
    engine_prefix_publish_stats(e);
    pthread_mutex_unlock(&e->mu);
  }
  si.seconds = now_s() - t0;
  if (info) *info = si;
  return PH_OK;
}

int32_t engine_step_admitted(const engine *e) { return e->n_admitted; }

int32_t engine_max_drafts(const engine *e) { return e->spec_max; }
int engine_has_mtp(const engine *e) { return e->mtp != NULL; }

int32_t engine_mtp_drafts(engine *e, uint64_t id, int64_t *out, int32_t max) {
  pthread_mutex_lock(&e->mu);
  const request *r = find_locked(e, id);
  int32_t n = r && r->spec ? r->spec->n_mtp_drafts : 0;
  if (n > max) n = max;
  if (n > 0) memcpy(out, r->spec->mtp_drafts, (size_t)n * sizeof *out);
  pthread_mutex_unlock(&e->mu);
  return n;
}

int engine_busy(engine *e) {
  pthread_mutex_lock(&e->mu);
  const int busy = e->n_inbox > 0 || e->n_live > 0;
  pthread_mutex_unlock(&e->mu);
  return busy;
}

/* ---- reading results ----------------------------------------------------------------------- */

/* The error message of a finished request (under mu). */
static void format_message(const request *r, char *out, size_t size) {
  if (r->message)
    snprintf(out, size, "%s", r->message);
  else if (r->status == PH_ERR_NON_FINITE)
    snprintf(out, size,
             "request %llu: the logits for generated token %lld (position %lld, engine step "
             "%llu) are not finite: logits[%lld] = %g; the weights or the computation hold NaN "
             "or infinity",
             (unsigned long long)r->id, (long long)r->n_generated,
             (long long)(r->n_prompt + r->n_generated - 1), (unsigned long long)r->bad_step,
             (long long)r->bad_index, (double)r->bad_value);
  else if (r->status != PH_OK)
    snprintf(out, size, "request %llu: %s", (unsigned long long)r->id,
             ph_status_message(r->status));
  else
    out[0] = '\0';
}

ph_status engine_request_info_get(engine *e, uint64_t id, ph_request_info *out, diag *d) {
  pthread_mutex_lock(&e->mu);
  request *r = find_locked(e, id);
  if (r) {
    memset(out, 0, sizeof *out);
    out->finish = r->finish;
    out->status = r->finish == PH_FINISH_NONE ? PH_OK : r->status;
    if (r->finish == PH_FINISH_ERROR) format_message(r, out->message, sizeof out->message);
    out->n_prompt = r->n_prompt;
    out->n_generated = r->n_generated;
    out->n_preemptions = r->sr.n_preemptions;
    out->n_drafted = r->n_drafted;
    out->n_accepted = r->n_accepted;
    out->n_cached_tokens = r->n_cached;
    const double end = r->t_done > 0 ? r->t_done : now_s();
    out->queue_ms = r->t_sched > 0 ? 1e3 * (r->t_sched - r->t_add) : -1;
    out->time_to_first_token_ms = r->t_first > 0 ? 1e3 * (r->t_first - r->t_add) : -1;
    out->total_ms = 1e3 * (end - r->t_add);
  }
  pthread_mutex_unlock(&e->mu);
  RETURN_ERROR_IF(!r, d, PH_ERR_NOT_FOUND, "request %llu is not known", (unsigned long long)id);
  return PH_OK;
}

int64_t engine_poll(engine *e, uint64_t id, int64_t *out, int64_t max) {
  pthread_mutex_lock(&e->mu);
  request *r = find_locked(e, id);
  int64_t n = -1;
  if (r) {
    n = r->n_generated - r->n_polled;
    if (n > max) n = max;
    if (n > 0) memcpy(out, r->tokens + r->n_prompt + r->n_polled, (size_t)n * sizeof *out);
    r->n_polled += n > 0 ? n : 0;
  }
  pthread_mutex_unlock(&e->mu);
  return n;
}

const int64_t *engine_tokens(engine *e, uint64_t id, int64_t *n) {
  static const int64_t none[1] = {0}; /* a request refused at add has no token storage */
  pthread_mutex_lock(&e->mu);
  request *r = find_locked(e, id);
  if (n) *n = r ? r->n_generated : 0;
  const int64_t *toks = !r ? NULL : r->tokens ? r->tokens + r->n_prompt : none;
  pthread_mutex_unlock(&e->mu);
  return toks;
}

const float *engine_logits(engine *e, uint64_t id) {
  pthread_mutex_lock(&e->mu);
  request *r = find_locked(e, id);
  pthread_mutex_unlock(&e->mu);
  return r ? r->logits : NULL;
}

const float *engine_captured(engine *e, uint64_t id, int64_t *n_rows) {
  pthread_mutex_lock(&e->mu);
  request *r = find_locked(e, id);
  int64_t n = 0;
  if (r && r->logits)
    n = r->capture == PH_CAPTURE_SAMPLED ? r->n_generated
        : r->n_generated > 0             ? r->n_prompt + r->n_generated - 1
                                         : 0;
  const float *l = r ? r->logits : NULL;
  pthread_mutex_unlock(&e->mu);
  if (n_rows) *n_rows = l ? n : 0;
  return l;
}

ph_status engine_release(engine *e, uint64_t id, diag *d) {
  pthread_mutex_lock(&e->mu);
  const int64_t at = map_index(&e->reqs, id, &e->work);
  request *r = at < 0 ? NULL : e->reqs.slot[at];
  ph_status st = PH_OK;
  if (!r) {
    st = diag_set(d, PH_ERR_NOT_FOUND, "request %llu is not known", (unsigned long long)id);
  } else if (r->finish == PH_FINISH_NONE) {
    st = diag_set(d, PH_ERR_INVALID_ARGUMENT, "request %llu has not finished",
                  (unsigned long long)id);
  } else {
    map_remove_at(&e->reqs, (uint64_t)at, &e->work);
    request_free(r);
  }
  pthread_mutex_unlock(&e->mu);
  return st;
}

uint64_t engine_work(engine *e) {
  pthread_mutex_lock(&e->mu);
  const uint64_t w = e->work + sched_work(e->sch);
  pthread_mutex_unlock(&e->mu);
  return w;
}

int64_t engine_vocab(const engine *e) { return e->vocab; }
int64_t engine_max_context(const engine *e) { return e->max_context; }
paged_session *engine_session(engine *e) { return e->s; }
const ph_engine_params *engine_params_of(const engine *e) { return &e->p; }
