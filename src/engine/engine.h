/* engine — continuous batching over the packed paged graph: requests in, tokens out.
 *
 * Modelled on ONNX Runtime GenAI's Engine/Request (../shared/spec/abi.md §8.6) and vLLM's
 * scheduler. An engine owns one paged_session (graph, executor, KV pages, state slots), the
 * scheduler that asks the session's hybrid cache for room, and the requests. engine_step() is one
 * iteration:
 *   schedule (scheduler.h: token budget, running first, request-only chunk boundaries, admission
 *   of pages + slot together, preemption by recompute) → bind the packed inputs and the state
 *   slots → run → sample the requests whose chunk reached their last known token → commit
 *   (append tokens, finish on a stop token or max_new_tokens, release pages and slot).
 * Requests are added and removed from any thread (a mutex-guarded inbox drained at the start
 * of a step); new tokens are read by polling (engine_poll) or a callback run on the stepping
 * thread. A bad request (empty prompt, token outside the vocabulary, a prompt that fills the
 * context, impossible sampling parameters, a request that can never fit the pages) finishes
 * with PH_FINISH_ERROR and its typed status without touching the others; a max_new that
 * runs past the context is clipped there (finish "length"). A logits row holding NaN or an
 * infinity (non-finite weights) ends that request with PH_ERR_NON_FINITE, the others go on.
 *
 * Cost: adding, looking up, removing and releasing a request are O(1) amortized, and a step
 * costs O(running + max_batch_size) bookkeeping whatever the number of queued requests (a hash map
 * by id; the scheduler looks only at the head of its queue). A queued request holds its record
 * (~450 bytes), its prompt plus room for the tokens it may generate (8 bytes each, capped by
 * the context) and its block-table storage; one refused when added holds its record and
 * message only.
 *
 * Batch invariance: each request's tokens and logits are bit-identical to running it alone
 * (the chunk rule in scheduler.h, batch-invariant kernels, sampling a pure function of
 * (seed, token index)); preempted requests resume with identical output.
 * After warm-up a step allocates nothing (tests/test_engine.c counts).
 * Must never: decide pages or slots itself (the scheduler does), or touch KV memory.
 */
#ifndef PH_ENGINE_ENGINE_H
#define PH_ENGINE_ENGINE_H

#include <stdint.h>

#include "base/diag.h"
#include "engine/sampler.h"
#include "pagedhybrid.h"
#include "runtime/paged_session.h"

typedef struct engine engine;

/* The engine's parameters, requests and results are the public structs of include/pagedhybrid.h
 * (ph_engine_params, ph_sampling_params, ph_step_info, ph_request_info, ph_finish_reason,
 * ph_token_fn): ph_engine_* (ph_engine.c) hands them through unchanged. A 0 in a
 * ph_engine_params field takes the default its comment there names:
 *   max_batch_size        genai_config's max_batch_size, capped at 64 (a CUDA figure), else 16
 *   max_scheduled_tokens  genai_config's max_scheduled_tokens, else 2048
 *   prefill_chunk         min(256, max_scheduled_tokens)
 *   num_blocks            KV pages incl. the null page: genai_config's num_blocks + 1, else as
 *                         many as fit in memory_bytes (1 GiB when 0) after the state slots
 *   max_requests          state slots (requests holding state at once): max_batch_size; a
 *                         model without linear layers (DeepSeek MLA) has no fixed state and
 *                         no slots, so its requests are bounded by pages alone
 *   block_size, max_context, io_dtype: checkpoints only (a package fixes them in its graph)
 *   capture_logits        PH_CAPTURE_NONE; PH_CAPTURE_POSITIONS builds a checkpoint's graph
 *                         with every row of the LM head (it is pruned to the last row otherwise)
 *                         and is refused for a package that prunes it */

/* Opens dir: an exported package (model.onnx + genai_config.json with the paged layout; the
 * binding and dynamic batching defaults come from genai_config.json) or a Hugging Face
 * checkpoint (the paged graph is built). p NULL: ph_engine_params_default(). Errors: whatever
 * opening, reading or building reports; PH_ERR_UNSUPPORTED for a dense package;
 * PH_ERR_INVALID_ARGUMENT for bad params. */
ph_status engine_create(const char *dir, const ph_engine_params *p, engine **out, diag *d);
void engine_free(engine *e); /* NULL-safe */

/* Requests added after this call keep every sampled position's logits row (engine_logits; tests
 * and the demo). Call it before adding requests from other threads. Default off. */
void engine_set_capture_logits(engine *e, int on);
/* The capture mode of include/pagedhybrid.h (ph_engine_set_capture_logits) for requests added
 * from now on: none, the sampled rows, or every position's row (PH_ERR_UNSUPPORTED when the
 * graph prunes its LM head to the last row per sequence, as a checkpoint's does unless created
 * with capture_logits PH_CAPTURE_POSITIONS; PH_ERR_INVALID_ARGUMENT for another value). */
ph_status engine_set_capture(engine *e, ph_logits_capture mode, diag *d);

/* Called on the stepping thread for each new token (token >= 0, reason PH_FINISH_NONE), and
 * once when a request finishes (token -1, reason set). Must not call engine_step. */
void engine_set_callback(engine *e, ph_token_fn fn, void *user);

/* Queues a request (thread-safe; it joins at the next step). The prompt is copied; sp NULL:
 * sampling_params_default(). Returns its id (>= 1, unique, increasing from one thread) in
 * *out_id. API misuse (NULL prompt, n < 0) is PH_ERR_INVALID_ARGUMENT here; a request the model
 * cannot serve (empty prompt, a prompt that fills the context, a token outside the vocabulary,
 * bad sampling parameters, more pages than the pool has, checked here in this order) is
 * accepted, keeps no copy of its prompt, and finishes PH_FINISH_ERROR with the status and
 * message at the next step. Everything the request will need is allocated here, so that a step
 * allocates nothing. PH_ERR_NO_MEMORY. */
ph_status engine_add(engine *e, const int64_t *prompt, int64_t n_prompt,
                     const ph_sampling_params *sp, uint64_t *out_id, diag *d);
/* Aborts a request at any time (thread-safe; effective at the next step). Unknown or finished
 * ids are PH_ERR_NOT_FOUND / a no-op. */
ph_status engine_remove(engine *e, uint64_t id, diag *d);

/* One step. *info (may be NULL) describes it: step counts the steps run so far (this one
 * included), batch_size the sequences in this step's batch (0: idle), n_generated the tokens
 * sampled, state_bytes_moved what this step's binding (and slot compaction) moved, seconds its
 * wall time. Returns PH_OK with batch_size 0 when there is nothing to run. A failure of the
 * graph run is returned and leaves the engine usable for other calls only to be freed. */
ph_status engine_step(engine *e, ph_step_info *info, diag *d);
/* Waiting requests the scheduler admitted in the last step (tests and the demo watch it). */
int32_t engine_step_admitted(const engine *e);
/* 1 while any request is queued, waiting or running. */
int engine_busy(engine *e);

/* Thread-safe. PH_ERR_NOT_FOUND for an unknown or released id. status is PH_OK unless finish is
 * PH_FINISH_ERROR, and message is "" then; queue_ms (add → first scheduled),
 * time_to_first_token_ms (add → first token) are -1 until reached; total_ms runs to the finish
 * (or now). */
ph_status engine_request_info_get(engine *e, uint64_t id, ph_request_info *out, diag *d);
/* Copies up to max tokens generated since the last poll into out (thread-safe); returns the
 * count, or -1 for an unknown id. */
int64_t engine_poll(engine *e, uint64_t id, int64_t *out, int64_t max);
/* All tokens generated so far (not consuming), and with capture_logits their logits rows
 * [n_generated, vocab] (row j produced token j); NULL for an unknown id. Valid until the request
 * is released; read them between steps. */
const int64_t *engine_tokens(engine *e, uint64_t id, int64_t *n);
/* For tests: the drafts the MTP head made for request id's next step (up to max into out);
 * returns their count, 0 when none or the id is unknown. Read between steps. */
int32_t engine_mtp_drafts(engine *e, uint64_t id, int64_t *out, int32_t max);
/* The most drafts a verify may hold (0: no speculation) and whether an MTP head drafts. */
int32_t engine_max_drafts(const engine *e);
int engine_has_mtp(const engine *e);
const float *engine_logits(engine *e, uint64_t id);
/* The captured rows and their count in the request's capture mode: PH_CAPTURE_SAMPLED
 * n_generated rows (row j produced token j); PH_CAPTURE_POSITIONS n_prompt + n_generated - 1
 * rows once a token is out (row t was computed at position t and predicts token t + 1), else 0.
 * NULL (and 0) for an unknown id or one added without capture. Read between steps. */
const float *engine_captured(engine *e, uint64_t id, int64_t *n_rows);
/* Forgets a finished request (its record and buffers). PH_ERR_INVALID_ARGUMENT if it has not
 * finished, PH_ERR_NOT_FOUND if unknown. */
ph_status engine_release(engine *e, uint64_t id, diag *d);

/* Request records visited so far by the engine's table and queues and by its scheduler
 * (sched_work): a work counter for tests, which bound it by a constant per request and per
 * step to catch a return to scans of every request (thread-safe). */
uint64_t engine_work(engine *e);

/* ---- prefix cache (src/cache/prefix_cache.h, docs/prefix-cache.md) ---- */
/* The counters and gauges as of the last step (thread-safe); all 0 when the cache is off. */
void engine_prefix_stats(engine *e, ph_prefix_cache_stats *out);
/* Drops what no request holds (evictable pages, every snapshot). Between steps. */
ph_status engine_prefix_clear(engine *e, diag *d);
/* For tests, between steps: checks every invariant of the page pool, the prefix index and the
 * snapshot pool against the requests' block tables (each page's reference count equals the
 * tables holding it plus nothing else; evictable pages are exactly the cached ones nobody holds;
 * every index entry and snapshot is consistent); PH_ERR_INTERNAL naming the first broken one. */
ph_status engine_prefix_check(engine *e, diag *d);

int64_t engine_vocab(const engine *e);
int64_t engine_max_context(const engine *e);
paged_session *engine_session(engine *e);
/* The parameters as resolved at creation (every 0 replaced by its default). */
const ph_engine_params *engine_params_of(const engine *e);

#endif /* PH_ENGINE_ENGINE_H */
